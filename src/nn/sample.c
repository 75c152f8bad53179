/* sample.c: KV-cache decoding and sampling for the C reference model:
 * prefill a prompt, then one token at a time; temperature, top-k, top-p,
 * seeded RNG; batched over several prompts.
 *
 * The per-token arithmetic repeats model.c's forward for one position in the
 * same order (dot products summed left to right, the same softmax), so the
 * logits match a full nn_forward over the sequence to rounding (tested at
 * 1e-5). A token's work is bound by reading the weights, so tokens are fed
 * in passes of up to 32 that share each weight row (a prompt's positions,
 * or the next token of several rows written in step); a token's arithmetic
 * does not depend on the others of its pass, so a row ends bit for bit as
 * it would fed alone. Each row's sampling has its own RNG, so a row's
 * output does not depend on the other rows. Sampling works on a
 * logits array and so serves any back end that can produce logits; the
 * cache itself is the C reference's. No beam search, no repetition penalty.
 *
 * B rows, T positions, C d_model, V vocab, L layers, NH query heads, NKV kv
 * heads, HD head dim, F ffn hidden, QD = NH*HD, KVD = NKV*HD.
 */
#include "dragon/nn.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* ---- the cache ------------------------------------------------------------ */

/* A feed's work: up to CHUNK (row, position, token) items, one pass over
 * the weights for all of them. Decoding one token is bound by reading the
 * weights (4 bytes a parameter a token); the items of a pass share each
 * weight row while it is in the cache. */
enum { CHUNK = 32 };

typedef struct {
  int b, t;
  int32_t token;
} item_t;

/* Item i's buffers in the scratch: x, ln, tmp (C); q, atty (QD); k, v
 * (KVD); h1, h3 (F); att (T). */
static size_t scratch_floats(const nn_config *c, int T) {
  size_t C = (size_t)c->d_model, QD = (size_t)c->n_heads * c->head_dim;
  size_t KVD = (size_t)c->n_kv_heads * c->head_dim, F = (size_t)c->ffn_hidden;
  return 3 * C + 2 * QD + 2 * KVD + 2 * F + (size_t)T + 1;
}

bool nn_kv_init(nn_kv_cache *c, const nn_model *m, int B, int T, dg_status *st) {
  const nn_config *cfg = &m->cfg;
  if (B < 1 || B > (1 << 20))
    return dg_fail(st, DG_ERR_INVALID, "KV cache: %d rows is out of range [1, %d]", B, 1 << 20);
  if (T < 1 || T > cfg->max_seq_len)
    return dg_fail(st, DG_ERR_INVALID, "KV cache: %d positions is out of range [1, %d]", T,
                   cfg->max_seq_len);
  double kv = 2.0 * cfg->n_layers * (double)B * T * cfg->n_kv_heads * cfg->head_dim;
  double bytes = 4.0 * (kv + (double)B * cfg->vocab_size);
  if (bytes > 1e15)
    return dg_fail(st, DG_ERR_INVALID, "KV cache: %.3g GiB is more than any machine holds",
                   bytes / 1073741824.0);
  nn_kv_cache t;
  memset(&t, 0, sizeof t);
  t.m = m;
  t.B = B;
  t.T = T;
  size_t half = (size_t)(kv / 2);
  t.k = calloc(half ? half : 1, sizeof(float));
  t.v = calloc(half ? half : 1, sizeof(float));
  t.pos = calloc((size_t)B, sizeof(int));
  t.logits = calloc((size_t)B * cfg->vocab_size, sizeof(float));
  t.scratch = calloc(scratch_floats(cfg, T) * CHUNK, sizeof(float));
  if (!t.k || !t.v || !t.pos || !t.logits || !t.scratch) {
    nn_kv_free(&t);
    return dg_fail(st, DG_ERR_RUNTIME, "KV cache: out of memory for %d rows of %d positions (%.3g GiB)",
                   B, T, bytes / 1073741824.0);
  }
  *c = t;
  return true;
}

void nn_kv_free(nn_kv_cache *c) {
  free(c->k);
  free(c->v);
  free(c->pos);
  free(c->logits);
  free(c->scratch);
  memset(c, 0, sizeof *c);
}

void nn_kv_reset(nn_kv_cache *c, int b) {
  DG_ASSERT(b >= 0 && b < c->B);
  c->pos[b] = 0;
}

void nn_kv_rewind(nn_kv_cache *c, int b, int pos, const float *logits) {
  DG_ASSERT(b >= 0 && b < c->B && pos >= 0 && pos <= c->pos[b]);
  c->pos[b] = pos;
  int V = c->m->cfg.vocab_size;
  memcpy(c->logits + (size_t)b * V, logits, sizeof(float) * (size_t)V);
}

const float *nn_kv_logits(const nn_kv_cache *c, int b) {
  DG_ASSERT(b >= 0 && b < c->B);
  return c->logits + (size_t)b * c->m->cfg.vocab_size;
}

/* out[i] (OUT) = x[i] (IN) . w (OUT, IN)^T for the n items, each dot
 * product summed as model.c's matmul_forward. */
static void matvecs(float *const *out, const float *const *x, int n, const float *w, int IN, int OUT) {
  for (int o = 0; o < OUT; o++) {
    const float *wo = w + (size_t)o * IN;
    for (int i = 0; i < n; i++) out[i][o] = nn_dot(x[i], wo, IN);
  }
}

/* One pass of the model over n items (n <= CHUNK). Items of one row come
 * in order of position; a row's keys and values up to an item's position
 * are in the cache or among the items before it, so every item attends to
 * what it would if fed alone. Each row's logits become those of its last
 * item. */
static void feed_items(nn_kv_cache *c, const item_t *it, int n) {
  const nn_model *m = c->m;
  const nn_config *cfg = &m->cfg;
  int L = cfg->n_layers, C = cfg->d_model, V = cfg->vocab_size, F = cfg->ffn_hidden;
  int NH = cfg->n_heads, NKV = cfg->n_kv_heads, HD = cfg->head_dim, QD = NH * HD, KVD = NKV * HD;
  int group = NH / NKV, half = HD / 2, T = c->T;
  const nn_weights *p = &m->params;
  size_t per = scratch_floats(cfg, T);
  float *x[CHUNK], *ln[CHUNK], *tmp[CHUNK], *q[CHUNK], *atty[CHUNK], *kk[CHUNK], *vv[CHUNK], *h1[CHUNK],
      *h3[CHUNK], *att[CHUNK];
  float rstd, scale = 1.0f / sqrtf((float)HD);
  for (int i = 0; i < n; i++) {
    DG_ASSERT(it[i].t < T && it[i].token >= 0 && it[i].token < V);
    x[i] = c->scratch + per * (size_t)i;
    ln[i] = x[i] + C, tmp[i] = ln[i] + C, q[i] = tmp[i] + C, atty[i] = q[i] + QD, kk[i] = atty[i] + QD;
    vv[i] = kk[i] + KVD, h1[i] = vv[i] + KVD, h3[i] = h1[i] + F, att[i] = h3[i] + F;
    memcpy(x[i], p->wte + (size_t)it[i].token * C, sizeof(float) * (size_t)C);
  }
  for (int l = 0; l < L; l++) {
    for (int i = 0; i < n; i++) nn_rmsnorm_forward(ln[i], &rstd, x[i], p->ln1w + (size_t)l * C, 1, C, cfg->norm_eps);
    matvecs(q, (const float *const *)ln, n, p->wq + (size_t)l * QD * C, C, QD);
    matvecs(kk, (const float *const *)ln, n, p->wk + (size_t)l * KVD * C, C, KVD);
    matvecs(vv, (const float *const *)ln, n, p->wv + (size_t)l * KVD * C, C, KVD);
    /* every item's key and value into the cache first */
    for (int i = 0; i < n; i++) {
      int t = it[i].t;
      const float *cs = m->rope_cos + (size_t)t * half, *sn = m->rope_sin + (size_t)t * half;
      nn_rope_rotate(q[i], cs, sn, 1, 1, NH, HD, 1.0f);
      nn_rope_rotate(kk[i], cs, sn, 1, 1, NKV, HD, 1.0f);
      size_t row = ((size_t)l * c->B + it[i].b) * T;
      memcpy(c->k + (row + (size_t)t) * KVD, kk[i], sizeof(float) * (size_t)KVD);
      memcpy(c->v + (row + (size_t)t) * KVD, vv[i], sizeof(float) * (size_t)KVD);
    }
    for (int i = 0; i < n; i++) {
      int t = it[i].t;
      const float *kc = c->k + (((size_t)l * c->B + it[i].b) * T) * KVD;
      const float *vc = c->v + (((size_t)l * c->B + it[i].b) * T) * KVD;
      float *a = att[i];
      for (int h = 0; h < NH; h++) {
        int kvh = h / group;
        const float *qv = q[i] + (size_t)h * HD;
        float mx = -INFINITY;
        for (int t2 = 0; t2 <= t; t2++) {
          float s = nn_dot(qv, kc + (size_t)t2 * KVD + (size_t)kvh * HD, HD) * scale;
          a[t2] = s;
          if (s > mx) mx = s;
        }
        float sum = 0;
        for (int t2 = 0; t2 <= t; t2++) {
          a[t2] = expf(a[t2] - mx);
          sum += a[t2];
        }
        float inv = 1.0f / sum;
        for (int t2 = 0; t2 <= t; t2++) a[t2] *= inv;
        float *o = atty[i] + (size_t)h * HD;
        for (int j = 0; j < HD; j++) o[j] = 0;
        for (int t2 = 0; t2 <= t; t2++) {
          const float *vr = vc + (size_t)t2 * KVD + (size_t)kvh * HD;
          float w = a[t2];
          for (int j = 0; j < HD; j++) o[j] += w * vr[j];
        }
      }
    }
    matvecs(tmp, (const float *const *)atty, n, p->wo + (size_t)l * C * QD, QD, C);
    for (int i = 0; i < n; i++) {
      for (int j = 0; j < C; j++) x[i][j] = x[i][j] + tmp[i][j];
      nn_rmsnorm_forward(ln[i], &rstd, x[i], p->ln2w + (size_t)l * C, 1, C, cfg->norm_eps);
    }
    matvecs(h1, (const float *const *)ln, n, p->w1 + (size_t)l * F * C, C, F);
    matvecs(h3, (const float *const *)ln, n, p->w3 + (size_t)l * F * C, C, F);
    for (int i = 0; i < n; i++)
      for (int j = 0; j < F; j++) h1[i][j] = h1[i][j] / (1.0f + expf(-h1[i][j])) * h3[i][j];
    matvecs(tmp, (const float *const *)h1, n, p->w2 + (size_t)l * C * F, F, C);
    for (int i = 0; i < n; i++)
      for (int j = 0; j < C; j++) x[i][j] = x[i][j] + tmp[i][j];
  }
  /* the logits of each row's last item only */
  float *lo[CHUNK];
  const float *li[CHUNK];
  int nl = 0;
  for (int i = 0; i < n; i++) {
    bool last = true;
    for (int j = i + 1; j < n && last; j++) last = it[j].b != it[i].b;
    if (!last) continue;
    nn_rmsnorm_forward(ln[i], &rstd, x[i], p->lnfw, 1, C, cfg->norm_eps);
    li[nl] = ln[i];
    lo[nl++] = c->logits + (size_t)it[i].b * V;
    c->pos[it[i].b] = it[i].t + 1;
  }
  matvecs(lo, li, nl, p->wlm, C, V);
}

void nn_kv_feed_rows(nn_kv_cache *c, const int *rows, const int32_t *const *tokens, const int *n, int count) {
  item_t it[CHUNK];
  int k = 0;
  for (int r = 0; r < count; r++) {
    int b = rows[r];
    DG_ASSERT(b >= 0 && b < c->B && n[r] >= 0 && c->pos[b] + n[r] <= c->T);
    for (int r2 = 0; r2 < r; r2++) DG_ASSERT(rows[r2] != b);
    int at = c->pos[b]; /* a pass moves pos on */
    for (int i = 0; i < n[r]; i++) {
      it[k++] = (item_t){b, at + i, tokens[r][i]};
      if (k == CHUNK) {
        feed_items(c, it, k);
        k = 0;
      }
    }
  }
  if (k > 0) feed_items(c, it, k);
}

void nn_kv_feed(nn_kv_cache *c, int b, const int32_t *tokens, int n) {
  nn_kv_feed_rows(c, &b, &tokens, &n, 1);
}

void nn_kv_copy_row(nn_kv_cache *c, int dst, int src) {
  DG_ASSERT(dst >= 0 && dst < c->B && src >= 0 && src < c->B);
  if (dst == src) return;
  const nn_config *cfg = &c->m->cfg;
  size_t KVD = (size_t)cfg->n_kv_heads * cfg->head_dim, T = (size_t)c->T, n = (size_t)c->pos[src] * KVD;
  for (int l = 0; l < cfg->n_layers; l++) {
    memcpy(c->k + ((size_t)l * c->B + dst) * T * KVD, c->k + ((size_t)l * c->B + src) * T * KVD, sizeof(float) * n);
    memcpy(c->v + ((size_t)l * c->B + dst) * T * KVD, c->v + ((size_t)l * c->B + src) * T * KVD, sizeof(float) * n);
  }
  c->pos[dst] = c->pos[src];
  size_t V = (size_t)cfg->vocab_size;
  memcpy(c->logits + (size_t)dst * V, c->logits + (size_t)src * V, sizeof(float) * V);
}

/* ---- sampling ------------------------------------------------------------- */

void nn_sample_opts_default(nn_sample_opts *o) {
  o->temperature = 1.0f;
  o->top_k = 0;
  o->top_p = 1.0f;
  o->max_tokens = 256;
  o->stop_token = -1;
}

typedef struct {
  float z;
  int32_t id;
} ranked;

/* Most likely first; the lower id first on ties, so results do not depend
 * on the sort's stability. */
static int rank_cmp(const void *a, const void *b) {
  const ranked *x = a, *y = b;
  if (x->z != y->z) return x->z > y->z ? -1 : 1;
  return x->id < y->id ? -1 : x->id > y->id;
}

static int32_t argmax(const float *z, int V) {
  int32_t best = 0;
  for (int32_t j = 1; j < V; j++)
    if (z[j] > z[best]) best = j;
  return best;
}

/* Fills probs and returns the number of kept tokens, in r[0..kept). */
static int filter(const float *logits, int V, const nn_sample_opts *o, float *probs, ranked *r) {
  DG_ASSERT(V >= 1);
  for (int j = 0; j < V; j++) probs[j] = 0;
  if (!(o->temperature > 0)) {
    r[0].id = argmax(logits, V);
    r[0].z = 0;
    probs[r[0].id] = 1;
    return 1;
  }
  for (int j = 0; j < V; j++) r[j] = (ranked){logits[j] / o->temperature, j};
  qsort(r, (size_t)V, sizeof *r, rank_cmp);
  int kept = o->top_k > 0 && o->top_k < V ? o->top_k : V;
  double sum = 0;
  for (int j = 0; j < kept; j++) sum += exp((double)r[j].z - r[0].z);
  if (o->top_p > 0 && o->top_p < 1) {
    double cum = 0;
    int j = 0;
    while (j < kept) {
      cum += exp((double)r[j].z - r[0].z) / sum;
      j++;
      if (cum >= o->top_p) break;
    }
    kept = j;
    sum = 0;
    for (j = 0; j < kept; j++) sum += exp((double)r[j].z - r[0].z);
  }
  for (int j = 0; j < kept; j++) probs[r[j].id] = (float)(exp((double)r[j].z - r[0].z) / sum);
  return kept;
}

void nn_sample_probs(const float *logits, int V, const nn_sample_opts *o, float *probs) {
  ranked *r = dg_malloc(sizeof(ranked) * (size_t)V);
  filter(logits, V, o, probs, r);
  free(r);
}

int32_t nn_sample_token(const float *logits, int V, const nn_sample_opts *o, dg_rng *rng) {
  if (!(o->temperature > 0)) return argmax(logits, V);
  float *probs = dg_malloc(sizeof(float) * (size_t)V);
  ranked *r = dg_malloc(sizeof(ranked) * (size_t)V);
  int kept = filter(logits, V, o, probs, r);
  double u = dg_rng_uniform(rng), cum = 0;
  int32_t tok = r[kept - 1].id;
  for (int j = 0; j < kept; j++) {
    cum += probs[r[j].id];
    if (u < cum) {
      tok = r[j].id;
      break;
    }
  }
  free(probs);
  free(r);
  return tok;
}

bool nn_generate(const nn_model *m, const int32_t *const *prompts, const int *prompt_lens, int n,
                 const nn_sample_opts *o, uint64_t seed, int32_t *out, int *out_lens, dg_status *st) {
  int V = m->cfg.vocab_size, maxT = m->cfg.max_seq_len, longest = 0;
  if (n < 1) return dg_fail(st, DG_ERR_INVALID, "generate: no prompts");
  if (o->max_tokens < 1) return dg_fail(st, DG_ERR_INVALID, "generate: max_tokens must be >= 1");
  for (int i = 0; i < n; i++) {
    if (prompt_lens[i] < 1) return dg_fail(st, DG_ERR_INVALID, "generate: prompt %d is empty", i);
    if (prompt_lens[i] > maxT)
      return dg_fail(st, DG_ERR_INVALID, "generate: prompt %d has %d tokens, more than the model's max_seq_len %d",
                     i, prompt_lens[i], maxT);
    for (int j = 0; j < prompt_lens[i]; j++)
      if (prompts[i][j] < 0 || prompts[i][j] >= V)
        return dg_fail(st, DG_ERR_INVALID, "generate: prompt %d token %d = %d is outside the vocabulary [0, %d)",
                       i, j, (int)prompts[i][j], V);
    if (prompt_lens[i] > longest) longest = prompt_lens[i];
  }
  int T = longest + o->max_tokens;
  if (T > maxT) T = maxT;
  nn_kv_cache c;
  if (!nn_kv_init(&c, m, n, T, st)) return false;
  dg_rng base;
  dg_rng_seed(&base, seed);
  for (int i = 0; i < n; i++) {
    dg_rng rng = dg_rng_fork(&base);
    int32_t *row = out + (size_t)i * o->max_tokens;
    int len = 0;
    nn_kv_feed(&c, i, prompts[i], prompt_lens[i]);
    for (;;) {
      int32_t tok = nn_sample_token(nn_kv_logits(&c, i), V, o, &rng);
      if (tok == o->stop_token) break;
      row[len++] = tok;
      if (len == o->max_tokens || c.pos[i] >= T) break;
      nn_kv_feed(&c, i, &tok, 1);
    }
    out_lens[i] = len;
  }
  nn_kv_free(&c);
  return true;
}
