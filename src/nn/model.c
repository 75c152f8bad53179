/* model.c: the Llama-style decoder's fp32 C reference: parameter layout,
 * memory, initialisation, forward with per-token weighted cross-entropy,
 * and every layer's backward written by hand.
 *
 * Follows llm.c's train_gpt2.c: size tables and one allocation per group,
 * plain loops, OpenMP on the outer loops when compiled with -fopenmp (every
 * parallel loop writes disjoint outputs in a fixed order, so results are
 * bitwise the same with or without it). Backward accumulates into the
 * gradients (+=); activations are kept for the whole batch. Positions
 * restart at 0 in every row of a batch; there is no KV cache here.
 *
 * B batch, T time, C d_model, V vocab, L layers, NH query heads, NKV kv
 * heads, HD head dim, F ffn hidden, QD = NH*HD, KVD = NKV*HD, N = B*T rows.
 */
#include "dragon/nn.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#ifdef _OPENMP
#define OMP_FOR _Pragma("omp parallel for")
#else
#define OMP_FOR
#endif

/* ---- parameter table ----------------------------------------------------- */

static const struct {
  const char *name, *hf;
  bool per_layer, decays;
} ptab[] = {
#define X(e, f, pl, d, hf) {#f, hf, pl, d},
    NN_PARAM_LIST(X)
#undef X
};
_Static_assert(DG_ARRAY_LEN(ptab) == NN_PARAM_COUNT, "parameter table");

const char *nn_param_name(nn_param_id i) { return ptab[i].name; }
const char *nn_param_hf_name(nn_param_id i) { return ptab[i].hf; }
bool nn_param_per_layer(nn_param_id i) { return ptab[i].per_layer; }
bool nn_param_decays(nn_param_id i) { return ptab[i].decays; }

int nn_param_shape(const nn_config *c, nn_param_id i, int64_t dims[2]) {
  int64_t V = c->vocab_size, C = c->d_model, F = c->ffn_hidden;
  int64_t QD = (int64_t)c->n_heads * c->head_dim, KVD = (int64_t)c->n_kv_heads * c->head_dim;
  dims[1] = 1;
  switch (i) {
    case NN_PARAM_WTE:
    case NN_PARAM_WLM: dims[0] = V, dims[1] = C; return 2;
    case NN_PARAM_LN1W:
    case NN_PARAM_LN2W:
    case NN_PARAM_LNFW: dims[0] = C; return 1;
    case NN_PARAM_WQ: dims[0] = QD, dims[1] = C; return 2;
    case NN_PARAM_WK:
    case NN_PARAM_WV: dims[0] = KVD, dims[1] = C; return 2;
    case NN_PARAM_WO: dims[0] = C, dims[1] = QD; return 2;
    case NN_PARAM_W1:
    case NN_PARAM_W3: dims[0] = F, dims[1] = C; return 2;
    case NN_PARAM_W2: dims[0] = C, dims[1] = F; return 2;
    case NN_PARAM_COUNT: break;
  }
  DG_UNREACHABLE();
}

static void point_weights(nn_weights *w, float *base, const size_t *sizes) {
  memset(w, 0, sizeof *w);
  if (!base) return;
  float *p = base;
#define X(e, f, pl, d, hf)                                                    \
  w->f = p;                                                                   \
  p += sizes[NN_PARAM_##e];
  NN_PARAM_LIST(X)
#undef X
}

/* ---- activation table ---------------------------------------------------- */

#define COUNT_ONE(f, n) +1
enum { ACT_COUNT = 0 NN_ACT_LIST(COUNT_ONE) };
#undef COUNT_ONE

/* Sizes in double first: the memory check must not overflow. */
static void act_sizes(const nn_config *c, double B, double T, double sizes[ACT_COUNT]) {
  double L = c->n_layers, C = c->d_model, V = c->vocab_size, F = c->ffn_hidden;
  double NH = c->n_heads, QD = NH * c->head_dim, KVD = (double)c->n_kv_heads * c->head_dim;
  double BT = B * T;
  int i = 0;
#define X(f, n) sizes[i++] = (n);
  NN_ACT_LIST(X)
#undef X
}

static void point_acts(nn_acts *a, float *base, const double *sizes) {
  float *p = base;
#define X(f, n)                                                               \
  a->f = p;                                                                   \
  p += (size_t)*sizes++;
  NN_ACT_LIST(X)
#undef X
}

/* ---- memory -------------------------------------------------------------- */

static double phys_bytes(void) {
  long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGESIZE);
  if (pages <= 0 || page <= 0) return 1e18; /* unknown: let malloc decide */
  return (double)pages * (double)page;
}

static double params_bytes_d(const nn_config *cfg, bool training) {
  double rope = (double)cfg->max_seq_len * cfg->head_dim; /* cos and sin */
  return 4.0 * ((double)nn_config_param_count(cfg) * (training ? 4 : 1) + rope);
}

static double acts_bytes_d(const nn_config *cfg, int B, int T) {
  if (B <= 0 || T <= 0) return 0;
  double sizes[ACT_COUNT], n = 0;
  act_sizes(cfg, B, T, sizes);
  for (int i = 0; i < ACT_COUNT; i++) n += sizes[i];
  return 4.0 * n + 8.0 * B * T;
}

int64_t nn_model_bytes(const nn_config *cfg, bool training, int B, int T) {
  double b = params_bytes_d(cfg, training) + acts_bytes_d(cfg, B, T);
  return b >= 9.2e18 ? INT64_MAX : (int64_t)b;
}

static bool check_fits(double need, const char *what, dg_status *st) {
  double have = phys_bytes();
  if (need <= have) return true;
  return dg_fail(st, DG_ERR_INVALID,
                 "model config: %s need %.3g GiB, more than this machine's %.3g GiB of memory",
                 what, need / 1073741824.0, have / 1073741824.0);
}

static float *alloc_floats(size_t n, const char *what, dg_status *st) {
  float *p = calloc(n ? n : 1, sizeof(float));
  if (!p) dg_fail(st, DG_ERR_RUNTIME, "model: out of memory allocating %s (%zu floats)", what, n);
  return p;
}

bool nn_model_init(nn_model *m, const nn_config *cfg, bool training, dg_status *st) {
  if (!nn_config_validate(cfg, st)) return false;
  if (!check_fits(params_bytes_d(cfg, training),
                  training ? "parameters, gradients and AdamW state" : "parameters", st))
    return false;
  nn_model t;
  memset(&t, 0, sizeof t);
  t.cfg = *cfg;
  for (int i = 0; i < NN_PARAM_COUNT; i++) {
    int64_t dims[2];
    nn_param_shape(cfg, (nn_param_id)i, dims);
    t.param_sizes[i] = (size_t)(dims[0] * dims[1] * (ptab[i].per_layer ? cfg->n_layers : 1));
    t.num_params += t.param_sizes[i];
  }
  size_t half = (size_t)cfg->head_dim / 2, nrope = (size_t)cfg->max_seq_len * half;
  bool ok = (t.params_mem = alloc_floats(t.num_params, "parameters", st)) &&
            (t.rope_cos = alloc_floats(nrope, "RoPE table", st)) &&
            (t.rope_sin = alloc_floats(nrope, "RoPE table", st));
  if (ok && training)
    ok = (t.grads_mem = alloc_floats(t.num_params, "gradients", st)) &&
         (t.m_mem = alloc_floats(t.num_params, "AdamW m", st)) &&
         (t.v_mem = alloc_floats(t.num_params, "AdamW v", st));
  if (!ok) {
    nn_model_free(&t);
    return false;
  }
  point_weights(&t.params, t.params_mem, t.param_sizes);
  point_weights(&t.grads, t.grads_mem, t.param_sizes);
  nn_rope_table(t.rope_cos, t.rope_sin, cfg->rope_theta, cfg->head_dim, cfg->max_seq_len);
  nn_optim_default(&t.opt);
  *m = t;
  return true;
}

void nn_model_free(nn_model *m) {
  free(m->params_mem);
  free(m->grads_mem);
  free(m->m_mem);
  free(m->v_mem);
  free(m->rope_cos);
  free(m->rope_sin);
  free(m->acts_mem);
  free(m->tokens);
  memset(m, 0, sizeof *m);
}

void nn_model_init_weights(nn_model *m, uint64_t seed) {
  dg_rng rng;
  dg_rng_seed(&rng, seed);
  float resid_scale = (float)(1.0 / sqrt(2.0 * m->cfg.n_layers));
  float *p = m->params_mem;
  for (int i = 0; i < NN_PARAM_COUNT; i++) {
    bool gain = i == NN_PARAM_LN1W || i == NN_PARAM_LN2W || i == NN_PARAM_LNFW;
    float scale = 0.02f * (i == NN_PARAM_WO || i == NN_PARAM_W2 ? resid_scale : 1.0f);
    for (size_t j = 0; j < m->param_sizes[i]; j++)
      *p++ = gain ? 1.0f : scale * (float)dg_rng_normal(&rng);
  }
}

bool nn_model_reserve(nn_model *m, int B, int T, dg_status *st) {
  if (B < 1 || B > (1 << 20))
    return dg_fail(st, DG_ERR_INVALID, "model: batch size %d is out of range [1, %d]", B, 1 << 20);
  if (T < 1 || T > m->cfg.max_seq_len)
    return dg_fail(st, DG_ERR_INVALID, "model: sequence length %d is out of range [1, %d]", T,
                   m->cfg.max_seq_len);
  if (m->acts_mem && B <= m->B && T <= m->T) return true;
  if (!check_fits(params_bytes_d(&m->cfg, m->grads_mem != NULL) + acts_bytes_d(&m->cfg, B, T),
                  "parameters and activations", st))
    return false;
  double sizes[ACT_COUNT], n = 0;
  act_sizes(&m->cfg, B, T, sizes);
  for (int i = 0; i < ACT_COUNT; i++) n += sizes[i];
  float *mem = alloc_floats((size_t)n, "activations", st);
  if (!mem) return false;
  int32_t *tok = calloc((size_t)2 * B * T, sizeof(int32_t));
  if (!tok) {
    free(mem);
    return dg_fail(st, DG_ERR_RUNTIME, "model: out of memory allocating token buffers");
  }
  free(m->acts_mem);
  free(m->tokens);
  m->acts_mem = mem;
  m->tokens = tok;
  m->num_acts = (size_t)n;
  m->B = B;
  m->T = T;
  m->last_has_targets = false;
  point_acts(&m->acts, mem, sizes);
  return true;
}

bool nn_batch_check(const nn_model *m, const int32_t *inputs, const int32_t *targets,
                    const float *weights, int B, int T, dg_status *st) {
  if (!m->acts_mem || B < 1 || T < 1 || B > m->B || T > m->T)
    return dg_fail(st, DG_ERR_INVALID, "batch %dx%d exceeds the reserved %dx%d", B, T, m->B, m->T);
  int V = m->cfg.vocab_size;
  for (int i = 0; i < B * T; i++) {
    if (inputs[i] < 0 || inputs[i] >= V)
      return dg_fail(st, DG_ERR_INVALID, "batch: inputs[%d][%d] = %d is outside the vocabulary [0, %d)",
                     i / T, i % T, (int)inputs[i], V);
    if (targets && (targets[i] < 0 || targets[i] >= V))
      return dg_fail(st, DG_ERR_INVALID, "batch: targets[%d][%d] = %d is outside the vocabulary [0, %d)",
                     i / T, i % T, (int)targets[i], V);
    if (weights && (!isfinite(weights[i]) || weights[i] < 0))
      return dg_fail(st, DG_ERR_INVALID, "batch: weights[%d][%d] = %g must be finite and >= 0",
                     i / T, i % T, (double)weights[i]);
  }
  return true;
}

/* ---- layers: forward ----------------------------------------------------- */

/* angle(pos, i) = pos * theta^(-2i/HD), in double, rounded once. */
void nn_rope_table(float *cosb, float *sinb, float theta, int HD, int T) {
  int half = HD / 2;
  for (int pos = 0; pos < T; pos++)
    for (int i = 0; i < half; i++) {
      double ang = pos * pow((double)theta, -2.0 * i / HD);
      cosb[(size_t)pos * half + i] = (float)cos(ang);
      sinb[(size_t)pos * half + i] = (float)sin(ang);
    }
}

static void embed_forward(float *out, const int32_t *inp, const float *wte, int N, int C) {
  for (int n = 0; n < N; n++) memcpy(out + (size_t)n * C, wte + (size_t)inp[n] * C, sizeof(float) * (size_t)C);
}

void nn_rmsnorm_forward(float *out, float *rstd, const float *inp, const float *w, int N, int C,
                        float eps) {
  OMP_FOR
  for (int n = 0; n < N; n++) {
    const float *x = inp + (size_t)n * C;
    float *y = out + (size_t)n * C;
    float ss = 0;
    for (int i = 0; i < C; i++) ss += x[i] * x[i];
    float r = 1.0f / sqrtf(ss / (float)C + eps);
    for (int i = 0; i < C; i++) y[i] = x[i] * r * w[i];
    rstd[n] = r;
  }
}

/* out (N, OUT) = inp (N, IN) . w (OUT, IN)^T */
/* Eight running sums, one a lane, then combined pairwise: an order the
 * compiler may vectorise without reassociating, the same everywhere. */
float nn_dot(const float *x, const float *w, int n) {
  float acc[8] = {0, 0, 0, 0, 0, 0, 0, 0};
  int i = 0;
  for (; i + 8 <= n; i += 8)
    for (int j = 0; j < 8; j++) acc[j] += x[i + j] * w[i + j];
  for (int j = 0; i < n; i++, j++) acc[j] += x[i] * w[i];
  return ((acc[0] + acc[4]) + (acc[2] + acc[6])) + ((acc[1] + acc[5]) + (acc[3] + acc[7]));
}

static void matmul_forward(float *out, const float *inp, const float *w, int N, int IN, int OUT) {
  OMP_FOR
  for (int n = 0; n < N; n++) {
    const float *x = inp + (size_t)n * IN;
    for (int o = 0; o < OUT; o++) out[(size_t)n * OUT + o] = nn_dot(x, w + (size_t)o * IN, IN);
  }
}

/* Rotate-half RoPE in place on x (B, T, nh, HD): pairs (i, i + HD/2) are
 * rotated by pos * freq_i. dir = -1 rotates back (the backward pass). */
void nn_rope_rotate(float *x, const float *cosb, const float *sinb, int B, int T, int nh, int HD,
                    float dir) {
  int half = HD / 2;
  OMP_FOR
  for (int bt = 0; bt < B * T; bt++) {
    int t = bt % T;
    const float *cs = cosb + (size_t)t * half, *sn = sinb + (size_t)t * half;
    for (int h = 0; h < nh; h++) {
      float *v = x + ((size_t)bt * nh + h) * HD;
      for (int i = 0; i < half; i++) {
        float c = cs[i], s = dir * sn[i];
        float x1 = v[i], x2 = v[i + half];
        v[i] = x1 * c - x2 * s;
        v[i + half] = x2 * c + x1 * s;
      }
    }
  }
}

/* Causal softmax attention; query head h reads kv head h / (NH / NKV), as
 * HF's repeat_kv. att (B, NH, T, T) keeps the probabilities. */
void nn_attention_forward(float *out, float *att, const float *q, const float *k, const float *v, int B,
                          int T, int NH, int NKV, int HD) {
  int QD = NH * HD, KVD = NKV * HD, group = NH / NKV;
  float scale = 1.0f / sqrtf((float)HD);
  OMP_FOR
  for (int bh = 0; bh < B * NH; bh++) {
    int b = bh / NH, h = bh % NH, kvh = h / group;
    for (int t = 0; t < T; t++) {
      const float *qv = q + ((size_t)b * T + t) * QD + (size_t)h * HD;
      float *row = att + ((size_t)bh * T + t) * T;
      float mx = -INFINITY;
      for (int t2 = 0; t2 <= t; t2++) {
        const float *kv = k + ((size_t)b * T + t2) * KVD + (size_t)kvh * HD;
        float s = 0;
        for (int i = 0; i < HD; i++) s += qv[i] * kv[i];
        s *= scale;
        row[t2] = s;
        if (s > mx) mx = s;
      }
      float sum = 0;
      for (int t2 = 0; t2 <= t; t2++) {
        row[t2] = expf(row[t2] - mx);
        sum += row[t2];
      }
      float inv = 1.0f / sum;
      for (int t2 = 0; t2 <= t; t2++) row[t2] *= inv;
      for (int t2 = t + 1; t2 < T; t2++) row[t2] = 0;
      float *o = out + ((size_t)b * T + t) * QD + (size_t)h * HD;
      for (int i = 0; i < HD; i++) o[i] = 0;
      for (int t2 = 0; t2 <= t; t2++) {
        const float *vv = v + ((size_t)b * T + t2) * KVD + (size_t)kvh * HD;
        float a = row[t2];
        for (int i = 0; i < HD; i++) o[i] += a * vv[i];
      }
    }
  }
}

static void swiglu_forward(float *out, const float *h1, const float *h3, size_t n) {
  OMP_FOR
  for (size_t i = 0; i < n; i++) out[i] = h1[i] / (1.0f + expf(-h1[i])) * h3[i];
}

static void residual_forward(float *out, const float *a, const float *b, size_t n) {
  for (size_t i = 0; i < n; i++) out[i] = a[i] + b[i];
}

/* ---- layers: backward ---------------------------------------------------- */

/* dinp (N, IN) += dout . w;  dw (OUT, IN) += dout^T . inp */
static void matmul_backward(float *dinp, float *dw, const float *dout, const float *inp, const float *w,
                            int N, int IN, int OUT) {
  OMP_FOR
  for (int n = 0; n < N; n++) {
    const float *d = dout + (size_t)n * OUT;
    float *dx = dinp + (size_t)n * IN;
    for (int o = 0; o < OUT; o++) {
      const float *wr = w + (size_t)o * IN;
      float g = d[o];
      for (int i = 0; i < IN; i++) dx[i] += g * wr[i];
    }
  }
  OMP_FOR
  for (int o = 0; o < OUT; o++) {
    float *dwr = dw + (size_t)o * IN;
    for (int n = 0; n < N; n++) {
      const float *x = inp + (size_t)n * IN;
      float g = dout[(size_t)n * OUT + o];
      for (int i = 0; i < IN; i++) dwr[i] += g * x[i];
    }
  }
}

/* y = x * r * w with r = (mean(x^2) + eps)^(-1/2):
 * dx_j += r * w_j * dy_j - x_j * r^3 / C * sum_i(dy_i * w_i * x_i). */
static void rmsnorm_backward(float *dinp, float *dw, const float *dout, const float *inp, const float *w,
                             const float *rstd, int N, int C) {
  OMP_FOR
  for (int n = 0; n < N; n++) {
    const float *dy = dout + (size_t)n * C, *x = inp + (size_t)n * C;
    float *dx = dinp + (size_t)n * C;
    float r = rstd[n], dot = 0;
    for (int i = 0; i < C; i++) dot += dy[i] * w[i] * x[i];
    float c = dot * r * r * r / (float)C;
    for (int i = 0; i < C; i++) dx[i] += r * w[i] * dy[i] - c * x[i];
  }
  for (int n = 0; n < N; n++) {
    const float *dy = dout + (size_t)n * C, *x = inp + (size_t)n * C;
    float r = rstd[n];
    for (int i = 0; i < C; i++) dw[i] += dy[i] * x[i] * r;
  }
}

/* dq, dk, dv accumulate (+=). Parallel over (b, kv head): the query heads
 * of one group write the same dk/dv rows, so they stay in one thread. */
static void attention_backward(float *dq, float *dk, float *dv, float *drow, const float *dout,
                               const float *att, const float *q, const float *k, const float *v, int B,
                               int T, int NH, int NKV, int HD) {
  int QD = NH * HD, KVD = NKV * HD, group = NH / NKV;
  float scale = 1.0f / sqrtf((float)HD);
  OMP_FOR
  for (int bk = 0; bk < B * NKV; bk++) {
    int b = bk / NKV, kvh = bk % NKV;
    for (int h = kvh * group; h < (kvh + 1) * group; h++) {
      int bh = b * NH + h;
      float *dr = drow + (size_t)bh * T;
      for (int t = 0; t < T; t++) {
        const float *row = att + ((size_t)bh * T + t) * T;
        const float *qv = q + ((size_t)b * T + t) * QD + (size_t)h * HD;
        const float *dov = dout + ((size_t)b * T + t) * QD + (size_t)h * HD;
        float *dqv = dq + ((size_t)b * T + t) * QD + (size_t)h * HD;
        float dot = 0;
        for (int t2 = 0; t2 <= t; t2++) {
          const float *vv = v + ((size_t)b * T + t2) * KVD + (size_t)kvh * HD;
          float *dvv = dv + ((size_t)b * T + t2) * KVD + (size_t)kvh * HD;
          float s = 0;
          for (int i = 0; i < HD; i++) {
            s += dov[i] * vv[i];
            dvv[i] += row[t2] * dov[i];
          }
          dr[t2] = s;
          dot += row[t2] * s;
        }
        for (int t2 = 0; t2 <= t; t2++) {
          float g = row[t2] * (dr[t2] - dot) * scale;
          const float *kv = k + ((size_t)b * T + t2) * KVD + (size_t)kvh * HD;
          float *dkv = dk + ((size_t)b * T + t2) * KVD + (size_t)kvh * HD;
          for (int i = 0; i < HD; i++) {
            dqv[i] += g * kv[i];
            dkv[i] += g * qv[i];
          }
        }
      }
    }
  }
}

/* silu(a) = a * s(a); d/da = s * (1 + a * (1 - s)). */
static void swiglu_backward(float *dh1, float *dh3, const float *dout, const float *h1, const float *h3,
                            size_t n) {
  OMP_FOR
  for (size_t i = 0; i < n; i++) {
    float a = h1[i], s = 1.0f / (1.0f + expf(-a));
    dh3[i] = dout[i] * a * s;
    dh1[i] = dout[i] * h3[i] * s * (1.0f + a * (1.0f - s));
  }
}

/* ---- the model ----------------------------------------------------------- */

static float forward(nn_model *m, const int32_t *inputs, const int32_t *targets, const float *weights,
                     double norm, int B, int T) {
  DG_ASSERT(m->acts_mem && B >= 1 && T >= 1 && B <= m->B && T <= m->T);
  const nn_config *c = &m->cfg;
  int L = c->n_layers, C = c->d_model, V = c->vocab_size, F = c->ffn_hidden;
  int NH = c->n_heads, NKV = c->n_kv_heads, HD = c->head_dim, QD = NH * HD, KVD = NKV * HD;
  int N = B * T;
  for (int i = 0; i < N; i++) {
    DG_ASSERT(inputs[i] >= 0 && inputs[i] < V);
    DG_ASSERT(!targets || (targets[i] >= 0 && targets[i] < V));
  }
  nn_weights *p = &m->params;
  nn_acts *a = &m->acts;
  size_t NC = (size_t)N * C;

  embed_forward(a->x, inputs, p->wte, N, C);
  for (int l = 0; l < L; l++) {
    float *x = a->x + l * NC, *xmid = a->xmid + l * NC, *xout = a->x + (l + 1) * NC;
    float *ln1 = a->ln1 + l * NC, *ln2 = a->ln2 + l * NC;
    float *q = a->q + (size_t)l * N * QD, *k = a->k + (size_t)l * N * KVD, *v = a->v + (size_t)l * N * KVD;
    float *atty = a->atty + (size_t)l * N * QD, *att = a->att + (size_t)l * B * NH * T * T;
    float *h1 = a->h1 + (size_t)l * N * F, *h3 = a->h3 + (size_t)l * N * F, *hg = a->hg + (size_t)l * N * F;

    nn_rmsnorm_forward(ln1, a->rstd1 + (size_t)l * N, x, p->ln1w + (size_t)l * C, N, C, c->norm_eps);
    matmul_forward(q, ln1, p->wq + (size_t)l * QD * C, N, C, QD);
    matmul_forward(k, ln1, p->wk + (size_t)l * KVD * C, N, C, KVD);
    matmul_forward(v, ln1, p->wv + (size_t)l * KVD * C, N, C, KVD);
    nn_rope_rotate(q, m->rope_cos, m->rope_sin, B, T, NH, HD, 1.0f);
    nn_rope_rotate(k, m->rope_cos, m->rope_sin, B, T, NKV, HD, 1.0f);
    nn_attention_forward(atty, att, q, k, v, B, T, NH, NKV, HD);
    matmul_forward(a->dn, atty, p->wo + (size_t)l * C * QD, N, QD, C);
    residual_forward(xmid, x, a->dn, NC);

    nn_rmsnorm_forward(ln2, a->rstd2 + (size_t)l * N, xmid, p->ln2w + (size_t)l * C, N, C, c->norm_eps);
    matmul_forward(h1, ln2, p->w1 + (size_t)l * F * C, N, C, F);
    matmul_forward(h3, ln2, p->w3 + (size_t)l * F * C, N, C, F);
    swiglu_forward(hg, h1, h3, (size_t)N * F);
    matmul_forward(a->dn, hg, p->w2 + (size_t)l * C * F, N, F, C);
    residual_forward(xout, xmid, a->dn, NC);
  }
  nn_rmsnorm_forward(a->lnf, a->rstdf, a->x + L * NC, p->lnfw, N, C, c->norm_eps);
  matmul_forward(a->logits, a->lnf, p->wlm, N, C, V);

  m->last_B = B;
  m->last_T = T;
  m->last_has_targets = targets != NULL;
  memcpy(m->tokens, inputs, sizeof(int32_t) * (size_t)N);
  if (!targets) {
    m->loss = -1.0f;
    return m->loss;
  }
  memcpy(m->tokens + N, targets, sizeof(int32_t) * (size_t)N);
  double total = 0;
  for (int n = 0; n < N; n++) {
    const float *z = a->logits + (size_t)n * V;
    float *pr = a->probs + (size_t)n * V;
    float mx = -INFINITY, sum = 0;
    for (int j = 0; j < V; j++) mx = z[j] > mx ? z[j] : mx;
    for (int j = 0; j < V; j++) sum += (pr[j] = expf(z[j] - mx));
    float inv = 1.0f / sum;
    for (int j = 0; j < V; j++) pr[j] *= inv;
    /* log-sum-exp form keeps -log p exact when p underflows */
    a->losses[n] = logf(sum) + mx - z[targets[n]];
    float w = weights ? weights[n] : 1.0f;
    a->dlosses[n] = norm > 0 ? (float)(w / norm) : 0.0f;
    total += (double)w * a->losses[n];
  }
  m->loss = norm > 0 ? (float)(total / norm) : 0.0f;
  return m->loss;
}

float nn_forward(nn_model *m, const int32_t *inputs, const int32_t *targets, const float *weights,
                 int B, int T) {
  double norm = (double)B * T;
  if (targets && weights) {
    norm = 0;
    for (int i = 0; i < B * T; i++) {
      DG_ASSERT(isfinite(weights[i]) && weights[i] >= 0);
      norm += weights[i];
    }
  }
  return forward(m, inputs, targets, weights, norm, B, T);
}

float nn_forward_weighted(nn_model *m, const int32_t *inputs, const int32_t *targets,
                          const float *weights, double norm, int B, int T) {
  DG_ASSERT(targets && isfinite(norm) && norm > 0);
  return forward(m, inputs, targets, weights, norm, B, T);
}

void nn_zero_grad(nn_model *m) {
  if (m->grads_mem) memset(m->grads_mem, 0, sizeof(float) * m->num_params);
}

void nn_backward(nn_model *m) {
  DG_ASSERT(m->grads_mem && m->last_has_targets);
  const nn_config *c = &m->cfg;
  int B = m->last_B, T = m->last_T, N = B * T;
  int L = c->n_layers, C = c->d_model, V = c->vocab_size, F = c->ffn_hidden;
  int NH = c->n_heads, NKV = c->n_kv_heads, HD = c->head_dim, QD = NH * HD, KVD = NKV * HD;
  const int32_t *inputs = m->tokens, *targets = m->tokens + N;
  nn_weights *p = &m->params, *g = &m->grads;
  nn_acts *a = &m->acts;
  size_t NC = (size_t)N * C, NF = (size_t)N * F;

  /* d loss / d logits = (p - onehot(y)) * w / norm */
  OMP_FOR
  for (int n = 0; n < N; n++) {
    const float *pr = a->probs + (size_t)n * V;
    float *dz = a->dlogits + (size_t)n * V, d = a->dlosses[n];
    for (int j = 0; j < V; j++) dz[j] = (pr[j] - (j == targets[n] ? 1.0f : 0.0f)) * d;
  }
  memset(a->dn, 0, sizeof(float) * NC);
  matmul_backward(a->dn, g->wlm, a->dlogits, a->lnf, p->wlm, N, C, V);
  memset(a->dx, 0, sizeof(float) * NC);
  rmsnorm_backward(a->dx, g->lnfw, a->dn, a->x + L * NC, p->lnfw, a->rstdf, N, C);

  for (int l = L - 1; l >= 0; l--) {
    float *x = a->x + l * NC, *xmid = a->xmid + l * NC;
    float *ln1 = a->ln1 + l * NC, *ln2 = a->ln2 + l * NC;
    float *q = a->q + (size_t)l * N * QD, *k = a->k + (size_t)l * N * KVD, *v = a->v + (size_t)l * N * KVD;
    float *atty = a->atty + (size_t)l * N * QD, *att = a->att + (size_t)l * B * NH * T * T;
    float *h1 = a->h1 + l * NF, *h3 = a->h3 + l * NF, *hg = a->hg + l * NF;

    /* x[l+1] = xmid + hg . w2^T; dx flows through the residual unchanged. */
    memset(a->dhg, 0, sizeof(float) * NF);
    matmul_backward(a->dhg, g->w2 + (size_t)l * C * F, a->dx, hg, p->w2 + (size_t)l * C * F, N, F, C);
    swiglu_backward(a->dh1, a->dh3, a->dhg, h1, h3, NF);
    memset(a->dn, 0, sizeof(float) * NC);
    matmul_backward(a->dn, g->w1 + (size_t)l * F * C, a->dh1, ln2, p->w1 + (size_t)l * F * C, N, C, F);
    matmul_backward(a->dn, g->w3 + (size_t)l * F * C, a->dh3, ln2, p->w3 + (size_t)l * F * C, N, C, F);
    rmsnorm_backward(a->dx, g->ln2w + (size_t)l * C, a->dn, xmid, p->ln2w + (size_t)l * C,
                     a->rstd2 + (size_t)l * N, N, C);

    /* xmid = x + atty . wo^T */
    memset(a->datty, 0, sizeof(float) * (size_t)N * QD);
    matmul_backward(a->datty, g->wo + (size_t)l * C * QD, a->dx, atty, p->wo + (size_t)l * C * QD, N, QD, C);
    memset(a->dq, 0, sizeof(float) * (size_t)N * QD);
    memset(a->dk, 0, sizeof(float) * (size_t)N * KVD);
    memset(a->dv, 0, sizeof(float) * (size_t)N * KVD);
    attention_backward(a->dq, a->dk, a->dv, a->drow, a->datty, att, q, k, v, B, T, NH, NKV, HD);
    nn_rope_rotate(a->dq, m->rope_cos, m->rope_sin, B, T, NH, HD, -1.0f);
    nn_rope_rotate(a->dk, m->rope_cos, m->rope_sin, B, T, NKV, HD, -1.0f);
    memset(a->dn, 0, sizeof(float) * NC);
    matmul_backward(a->dn, g->wq + (size_t)l * QD * C, a->dq, ln1, p->wq + (size_t)l * QD * C, N, C, QD);
    matmul_backward(a->dn, g->wk + (size_t)l * KVD * C, a->dk, ln1, p->wk + (size_t)l * KVD * C, N, C, KVD);
    matmul_backward(a->dn, g->wv + (size_t)l * KVD * C, a->dv, ln1, p->wv + (size_t)l * KVD * C, N, C, KVD);
    rmsnorm_backward(a->dx, g->ln1w + (size_t)l * C, a->dn, x, p->ln1w + (size_t)l * C,
                     a->rstd1 + (size_t)l * N, N, C);
  }
  for (int n = 0; n < N; n++) {
    float *dw = g->wte + (size_t)inputs[n] * C;
    const float *d = a->dx + (size_t)n * C;
    for (int i = 0; i < C; i++) dw[i] += d[i];
  }
}

float nn_grad_norm(const nn_model *m) {
  DG_ASSERT(m->grads_mem);
  double s = 0;
  for (size_t i = 0; i < m->num_params; i++) s += (double)m->grads_mem[i] * m->grads_mem[i];
  return (float)sqrt(s);
}
