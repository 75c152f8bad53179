/* sft.c: supervised fine-tuning: the training config, the C reference as a
 * back end, and the run (data, split, padded batches, AdamW steps,
 * validation, progress, log, checkpoints, exact resume) on the back end of
 * the chosen device (the CUDA one is in backend_cuda.c).
 *
 * The batch of step s is a function of (seed, s) alone (each epoch is a
 * permutation drawn from the seed and the epoch number), so a resumed run
 * needs only the model, the AdamW state and the step to continue exactly.
 * Every input is loaded and checked, and the model allocated, before the
 * out dir is written. A checkpoint is two files and a `latest` pointer
 * written after both (each through dg_write_file_atomic), so a crash
 * between them leaves the previous pair current; the temporary files of a
 * write that a kill interrupted are removed when the run directory is
 * opened again. A resumed run first cuts log.jsonl back to the steps up to
 * its checkpoint, so every step is logged once. Does not do gradient
 * accumulation, mixed precision or several processes: one batch of
 * examples per step on one back end.
 *
 * B examples per step, T the longest row of a batch.
 */
#include "dragon/train.h"

#include <errno.h>
#include <math.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* ---- configuration ------------------------------------------------------- */

typedef enum { K_F32, K_F64, K_I64, K_INT, K_U64 } key_type;

static const struct {
  const char *name;
  key_type type;
  size_t off;
  double lo, hi;
} tkeys[] = {
    {"lr", K_F32, offsetof(train_config, lr), 1e-12, 10},
    {"lr_min", K_F32, offsetof(train_config, lr_min), 0, 10},
    {"warmup_steps", K_I64, offsetof(train_config, warmup_steps), 0, 1e12},
    {"steps", K_I64, offsetof(train_config, steps), 1, 1e12},
    {"batch", K_INT, offsetof(train_config, batch), 1, 65536},
    {"seq_len", K_INT, offsetof(train_config, seq_len), 2, 1 << 20},
    {"grad_clip", K_F32, offsetof(train_config, grad_clip), 0, 1e30},
    {"weight_decay", K_F32, offsetof(train_config, weight_decay), 0, 10},
#define X(e, n, w) {"loss_weight_" n, K_F32, offsetof(train_config, seg_weights) + sizeof(float) * TRAIN_SEG_##e, 0, 1e6},
    TRAIN_SEG_LIST(X)
#undef X
    {"eval_every", K_I64, offsetof(train_config, eval_every), 0, 1e12},
    {"ckpt_every", K_I64, offsetof(train_config, ckpt_every), 0, 1e12},
    {"log_every", K_I64, offsetof(train_config, log_every), 1, 1e12},
    {"val_fraction", K_F64, offsetof(train_config, val_fraction), 0, 0.5},
    {"seed", K_U64, offsetof(train_config, seed), 0, 9.2e18},
    {"peak_flops", K_F64, offsetof(train_config, peak_flops), 0, 1e20},
    {"plan_first", K_INT, offsetof(train_config, plan_first), 0, 1},
};
enum { NTKEYS = (int)DG_ARRAY_LEN(tkeys) };

void train_config_default(train_config *c) {
  memset(c, 0, sizeof *c);
  dg_status st;
  bool ok = nn_config_named("tiny", &c->model, &st);
  DG_ASSERT(ok);
  c->model.max_seq_len = 512;
  c->lr = 3e-3f;
  c->lr_min = 3e-4f;
  c->warmup_steps = 20;
  c->steps = 300;
  c->batch = 4;
  c->seq_len = 512;
  c->grad_clip = 1.0f;
  c->weight_decay = 0.0f;
#define X(e, n, w) c->seg_weights[TRAIN_SEG_##e] = w;
  TRAIN_SEG_LIST(X)
#undef X
  c->eval_every = 50;
  c->ckpt_every = 100;
  c->log_every = 10;
  c->val_fraction = 0.1;
  c->seed = 1;
  /* A nominal 100 GFLOP/s for the C reference on one CPU (docs/training.md):
   * MFU on the CPU is a relative figure, not a claim about the hardware. */
  c->peak_flops = 1e11;
}

static char *trim(char *s) {
  while (*s == ' ' || *s == '\t' || *s == '\r') s++;
  size_t n = strlen(s);
  while (n > 0 && (s[n - 1] == ' ' || s[n - 1] == '\t' || s[n - 1] == '\r')) s[--n] = 0;
  return s;
}

static bool set_key(train_config *c, int k, const char *val, const char *what, dg_status *st) {
  char *p = (char *)c + tkeys[k].off;
  if (tkeys[k].type == K_F32 || tkeys[k].type == K_F64) {
    double v;
    if (!dg_parse_f64(val, &v, what, st)) return false;
    if (!isfinite(v) || v < tkeys[k].lo || v > tkeys[k].hi)
      return dg_fail(st, DG_ERR_PARSE, "%s: %s is out of range [%g, %g]", what, val, tkeys[k].lo,
                     tkeys[k].hi);
    if (tkeys[k].type == K_F32) *(float *)p = (float)v;
    else *(double *)p = v;
    return true;
  }
  int64_t v;
  int64_t hi = tkeys[k].type == K_U64 ? INT64_MAX : (int64_t)tkeys[k].hi;
  if (!dg_parse_i64(val, (int64_t)tkeys[k].lo, hi, &v, what, st)) return false;
  if (tkeys[k].type == K_INT) *(int *)p = (int)v;
  else if (tkeys[k].type == K_U64) *(uint64_t *)p = (uint64_t)v;
  else *(int64_t *)p = v;
  return true;
}

/* One parse: the training keys set here; every other pair goes on, at its
 * own line, to the model's text (so the model parser's line numbers stay
 * those of the file). */
typedef struct {
  train_config *c;
  const char *where;
  bool seen[NTKEYS];
  dg_str model;
  int model_lines; /* lines written to model so far */
  bool model_keys;
} tcfg_parse;

static bool tcfg_pair(void *ctx, const char *key, const char *val, int lineno, dg_status *st) {
  tcfg_parse *p = ctx;
  for (int k = 0; k < NTKEYS; k++) {
    if (strcmp(key, tkeys[k].name) != 0) continue;
    char what[200];
    snprintf(what, sizeof what, "%s:%d: %s", p->where, lineno, key);
    if (p->seen[k]) return dg_fail(st, DG_ERR_PARSE, "%s: given twice", what);
    p->seen[k] = true;
    if (!set_key(p->c, k, val, what, st)) {
      st->code = DG_ERR_PARSE;
      return false;
    }
    return true;
  }
  for (; p->model_lines < lineno - 1; p->model_lines++) dg_str_putc(&p->model, '\n');
  dg_str_printf(&p->model, "%s = %s\n", key, val);
  p->model_lines++;
  p->model_keys = true;
  return true;
}

static bool tcfg_text(const char *text, size_t len, const char *where, train_config *out,
                      dg_status *st) {
  train_config c;
  train_config_default(&c);
  tcfg_parse p = {&c, where, {0}, {0}, 0, false};
  dg_str_init(&p.model);
  bool ok = dg_kv_parse(text, len, where, tcfg_pair, &p, st);
  if (ok && p.model_keys) ok = nn_config_parse(p.model.s, where, &c.model, st);
  dg_str_free(&p.model);
  if (!ok) return false;
  if (c.seq_len > c.model.max_seq_len)
    return dg_fail(st, DG_ERR_INVALID, "%s: seq_len = %d exceeds the model's max_seq_len = %d",
                   where, c.seq_len, c.model.max_seq_len);
  if (c.lr_min > c.lr)
    return dg_fail(st, DG_ERR_INVALID, "%s: lr_min = %g exceeds lr = %g", where, (double)c.lr_min,
                   (double)c.lr);
  *out = c;
  return true;
}

bool train_config_parse(const char *text, const char *where, train_config *out, dg_status *st) {
  return tcfg_text(text, strlen(text), where, out, st);
}

bool train_config_load(const char *name_or_path, train_config *c, dg_status *st) {
  if (strcmp(name_or_path, "tiny") == 0) {
    train_config_default(c);
    return true;
  }
  size_t len;
  char *text = dg_read_file(name_or_path, &len, st);
  if (!text) return false;
  bool ok = tcfg_text(text, len, name_or_path, c, st);
  free(text);
  return ok;
}

char *train_model_config_path(const char *model_path) {
  const char *slash = strrchr(model_path, '/');
  size_t dl = slash ? (size_t)(slash - model_path) : 1;
  const char *dir = slash ? model_path : ".";
  const char *names[] = {TRAIN_MODEL_CONFIG, "config.txt"};
  for (size_t i = 0; i < DG_ARRAY_LEN(names); i++) {
    size_t n = dl + strlen(names[i]) + 2;
    char *p = dg_malloc(n);
    snprintf(p, n, "%.*s/%s", (int)dl, dir, names[i]);
    struct stat sb;
    if (stat(p, &sb) == 0 && S_ISREG(sb.st_mode)) return p;
    free(p);
  }
  return NULL;
}

bool train_model_plan_first(const char *model_path, bool *plan_first, dg_status *st) {
  dg_status_ok(st);
  *plan_first = false;
  char *p = train_model_config_path(model_path);
  if (!p) return true;
  train_config c;
  bool ok = train_config_load(p, &c, st);
  if (ok) *plan_first = c.plan_first != 0;
  else dg_status_prefix(st, "the model's training config");
  free(p);
  return ok;
}

bool train_model_config_copy(const char *model_path, const char *dir, dg_status *st) {
  dg_status_ok(st);
  char *from = train_model_config_path(model_path);
  if (!from) return true;
  train_config c;
  size_t n = 0;
  char *text = train_config_load(from, &c, st) ? dg_read_file(from, &n, st) : NULL;
  bool ok = text != NULL;
  if (ok) {
    size_t pl = strlen(dir) + sizeof TRAIN_MODEL_CONFIG + 2;
    char *to = dg_malloc(pl);
    snprintf(to, pl, "%s/%s", dir, TRAIN_MODEL_CONFIG);
    ok = dg_write_file_atomic(to, text, n, st);
    free(to);
  }
  free(text);
  free(from);
  return ok;
}

void train_config_print(const train_config *c, dg_str *out) {
  nn_config_print(&c->model, out);
  for (int k = 0; k < NTKEYS; k++) {
    const char *p = (const char *)c + tkeys[k].off;
    switch (tkeys[k].type) {
      case K_F32: dg_str_printf(out, "%s = %.9g\n", tkeys[k].name, (double)*(const float *)p); break;
      case K_F64: dg_str_printf(out, "%s = %.17g\n", tkeys[k].name, *(const double *)p); break;
      case K_I64: dg_str_printf(out, "%s = %lld\n", tkeys[k].name, (long long)*(const int64_t *)p); break;
      case K_INT: dg_str_printf(out, "%s = %d\n", tkeys[k].name, *(const int *)p); break;
      case K_U64:
        dg_str_printf(out, "%s = %llu\n", tkeys[k].name, (unsigned long long)*(const uint64_t *)p);
        break;
    }
  }
}

/* ---- the C reference back end --------------------------------------------- */

static float cpu_forward(void *ctx, const int32_t *in, const int32_t *tg, const float *w, int B, int T) {
  return nn_forward(ctx, in, tg, w, B, T);
}

static double cpu_weighted_sum(void *ctx, const float *w, int B, int T) {
  nn_model *m = ctx;
  DG_ASSERT(m->last_has_targets && m->last_B == B && m->last_T == T);
  double s = 0;
  for (int i = 0; i < B * T; i++) s += (double)w[i] * m->acts.losses[i];
  return s;
}

static void cpu_backward(void *ctx) {
  nn_zero_grad(ctx);
  nn_backward(ctx);
}

static float cpu_update(void *ctx, int64_t step) { return nn_update(ctx, step); }

static bool cpu_save(void *ctx, const char *model_path, const char *state_path, int64_t step,
                     dg_status *st) {
  return nn_checkpoint_save(ctx, model_path, st) && nn_state_save(ctx, step, NULL, state_path, st);
}

static void cpu_token_logps(void *ctx, const int32_t *in, const int32_t *tg, const uint8_t *mask, int B,
                            int T, float *logp) {
  nn_model *m = ctx;
  nn_forward(m, in, NULL, NULL, B, T);
  grpo_token_logps(m->acts.logits, tg, mask, B * T, m->cfg.vocab_size, logp);
}

static float cpu_forward_weighted(void *ctx, const int32_t *in, const int32_t *tg, const float *w,
                                  double norm, int B, int T) {
  return nn_forward_weighted(ctx, in, tg, w, norm, B, T);
}

static void cpu_zero_grad(void *ctx) { nn_zero_grad(ctx); }
static void cpu_accumulate(void *ctx) { nn_backward(ctx); }
static nn_optim *cpu_optim(void *ctx) { return &((nn_model *)ctx)->opt; }

static bool cpu_pull(void *ctx, dg_status *st) {
  (void)ctx, (void)st;
  return true;
}

train_backend train_backend_cpu(nn_model *m) {
  train_backend b = {.name = "cpu",
                     .ctx = m,
                     .forward = cpu_forward,
                     .weighted_sum = cpu_weighted_sum,
                     .backward = cpu_backward,
                     .update = cpu_update,
                     .save = cpu_save,
                     .token_logps = cpu_token_logps,
                     .forward_weighted = cpu_forward_weighted,
                     .zero_grad = cpu_zero_grad,
                     .accumulate = cpu_accumulate,
                     .optim = cpu_optim,
                     .pull = cpu_pull};
  return b;
}

/* ---- run directories ------------------------------------------------------ */

static char *join(const char *dir, const char *name) {
  size_t n = strlen(dir) + strlen(name) + 2;
  char *p = dg_malloc(n);
  snprintf(p, n, "%s/%s", dir, name);
  return p;
}

static char *step_file(const char *dir, const char *kind, int64_t step) {
  char name[64];
  snprintf(name, sizeof name, "%s_%lld.bin", kind, (long long)step);
  return join(dir, name);
}

static bool exists(const char *path) {
  struct stat sb;
  return stat(path, &sb) == 0;
}

bool train_run_latest(const char *dir, char **model_path, char **state_path, int64_t *step,
                      dg_status *st) {
  char *lp = join(dir, "latest");
  char *text = dg_read_file(lp, NULL, st);
  if (!text) {
    dg_status_prefix(st, "%s: not a training run directory (no readable 'latest')", dir);
    free(lp);
    return false;
  }
  char *s = trim(text);
  size_t n = strlen(s);
  if (n && s[n - 1] == '\n') s[n - 1] = 0;
  int64_t v;
  bool ok = dg_parse_i64(trim(s), 0, INT64_MAX, &v, lp, st);
  free(text);
  free(lp);
  if (!ok) {
    /* a damaged file, not a usage error */
    st->code = DG_ERR_PARSE;
    dg_status_prefix(st, "corrupt checkpoint pointer");
    return false;
  }
  char *mp = step_file(dir, "model", v), *sp = step_file(dir, "state", v);
  if (!exists(mp) || !exists(sp)) {
    dg_fail(st, DG_ERR_IO, "%s: 'latest' names step %lld but %s or %s is missing", dir,
            (long long)v, mp, sp);
    free(mp);
    free(sp);
    return false;
  }
  *model_path = mp;
  *state_path = sp;
  *step = v;
  return true;
}

static bool save_checkpoint(const train_backend *be, const char *dir, int64_t step, int64_t *prev,
                            dg_status *st) {
  char *mp = step_file(dir, "model", step), *sp = step_file(dir, "state", step);
  bool ok = be->save(be->ctx, mp, sp, step, st);
  free(mp);
  free(sp);
  if (!ok) return false;
  char num[32];
  int n = snprintf(num, sizeof num, "%lld\n", (long long)step);
  char *lp = join(dir, "latest");
  ok = dg_write_file_atomic(lp, num, (size_t)n, st);
  free(lp);
  if (!ok) return false;
  if (*prev >= 0 && *prev != step) {
    char *om = step_file(dir, "model", *prev), *os = step_file(dir, "state", *prev);
    unlink(om);
    unlink(os);
    free(om);
    free(os);
  }
  *prev = step;
  return true;
}

/* The step of a log line ({"step": N, ...}), or -1 when it is not one. */
static int64_t log_line_step(const char *line, size_t n) {
  static const char key[] = "{\"step\": ";
  if (n < sizeof key || memcmp(line, key, sizeof key - 1) != 0 || line[n - 1] != '}') return -1;
  int64_t v = 0;
  size_t i = sizeof key - 1;
  if (line[i] < '0' || line[i] > '9') return -1;
  for (; i < n && line[i] >= '0' && line[i] <= '9'; i++) {
    if (v > INT64_MAX / 10 - 10) return -1;
    v = v * 10 + (line[i] - '0');
  }
  return i < n && line[i] == ',' ? v : -1;
}

/* A resumed run continues after step `done`: log.jsonl keeps one line per
 * step up to it, in order, and loses the lines of steps past it (logged
 * before a kill, after the checkpoint the run resumes from), repeats of a
 * step (left by resumes before this was done) and a torn last line. The
 * file is rewritten atomically, and only when something goes. */
static bool trim_log(const char *dir, int64_t done, dg_status *st) {
  char *lp = join(dir, "log.jsonl");
  struct stat sb;
  if (stat(lp, &sb) != 0) {
    free(lp);
    return true;
  }
  size_t len;
  char *text = dg_read_file(lp, &len, st);
  if (!text) {
    free(lp);
    return false;
  }
  dg_str keep;
  dg_str_init(&keep);
  int64_t last = 0, dropped = 0;
  for (size_t pos = 0; pos < len;) {
    char *nl = memchr(text + pos, '\n', len - pos);
    size_t n = nl ? (size_t)(nl - (text + pos)) : len - pos;
    int64_t step = nl ? log_line_step(text + pos, n) : -1;
    if (step > last && step <= done) {
      dg_str_putn(&keep, text + pos, n + 1);
      last = step;
    } else if (n > 0) {
      dropped++;
    }
    pos += n + (nl ? 1 : 0);
  }
  bool ok = true;
  if (dropped > 0) ok = dg_write_file_atomic(lp, keep.s, keep.len, st);
  dg_str_free(&keep);
  free(text);
  free(lp);
  return ok;
}

void train_result_free(train_result *r) {
  free(r->losses);
  memset(r, 0, sizeof *r);
}

/* ---- the run -------------------------------------------------------------- */

typedef struct {
  train_config cfg;
  tok_tokenizer *tok;
  train_shard data;
  nn_model model;
  bool have_model;
  train_cuda *gpu; /* the CUDA back end, with --device cuda */
  int64_t step0;  /* first step of this session */
  int64_t prev_ckpt;
  DG_VEC(int64_t) train_idx;
  DG_VEC(int64_t) val_idx;
  int64_t n_dropped;
  int longest; /* longest row kept, tokens */
} run_state;

static void run_free(run_state *r) {
  tok_free(r->tok);
  train_shard_free(&r->data);
  train_cuda_free(r->gpu);
  if (r->have_model) nn_model_free(&r->model);
  DG_VEC_FREE(&r->train_idx);
  DG_VEC_FREE(&r->val_idx);
}

/* A new run's weights from a trained model (a checkpoint file): fine-tuning
 * after a first stage. The model keys must be the run's, vocabulary
 * included (give the run the first stage's tokenizer). */
static bool init_from(const char *path, nn_model *m, dg_status *st) {
  nn_model src;
  if (!nn_checkpoint_load(&src, path, false, st)) {
    dg_status_prefix(st, "--init");
    return false;
  }
  const nn_config *x = &src.cfg, *y = &m->cfg;
  bool same = x->vocab_size == y->vocab_size && x->d_model == y->d_model &&
              x->n_layers == y->n_layers && x->n_heads == y->n_heads &&
              x->n_kv_heads == y->n_kv_heads && x->head_dim == y->head_dim &&
              x->ffn_hidden == y->ffn_hidden && x->max_seq_len == y->max_seq_len &&
              x->rope_theta == y->rope_theta && x->norm_eps == y->norm_eps;
  if (same) memcpy(m->params_mem, src.params_mem, sizeof(float) * m->num_params);
  else
    dg_fail(st, DG_ERR_INVALID,
            "--init %s: its model (vocabulary %d, d_model %d, %d layers) is not the run's "
            "(vocabulary %d, d_model %d, %d layers) or differs in another model key",
            path, x->vocab_size, x->d_model, x->n_layers, y->vocab_size, y->d_model, y->n_layers);
  nn_model_free(&src);
  return same;
}

static bool load_new(const train_sft_args *a, run_state *r, dg_status *st) {
  char *latest = join(a->out_dir, "latest"), *cfgp = join(a->out_dir, "config.txt");
  bool busy = exists(latest) || exists(cfgp);
  free(latest);
  free(cfgp);
  if (busy)
    return dg_fail(st, DG_ERR_USAGE, "%s already holds a training run: use --resume, or another --out",
                   a->out_dir);
  if (!a->data) return dg_fail(st, DG_ERR_USAGE, "--data is required for a new run");
  if (!train_config_load(a->config ? a->config : "tiny", &r->cfg, st)) return false;
  bool shard = train_shard_sniff(a->data);
  if (a->tokenizer) {
    if (!(r->tok = tok_load(a->tokenizer, st))) return false;
  } else if (shard) {
    return dg_fail(st, DG_ERR_USAGE, "%s: a token shard needs the --tokenizer it was made with",
                   a->data);
  } else {
    size_t n;
    char *corpus = train_examples_corpus(a->data, &n, st);
    if (!corpus) return false;
    r->tok = tok_train(corpus, n, a->tok_vocab > 0 ? a->tok_vocab : 1024, NULL, st);
    free(corpus);
    if (!r->tok) {
      dg_status_prefix(st, "%s: training the tokenizer", a->data);
      return false;
    }
  }
  if (shard ? !train_shard_load(&r->data, a->data, st)
            : !train_examples_load(a->data, r->tok, r->cfg.plan_first != 0, &r->data, st))
    return false;
  if (r->data.vocab_size > tok_vocab_size(r->tok))
    return dg_fail(st, DG_ERR_INVALID, "%s: token ids reach %d, beyond the tokenizer's %d", a->data,
                   (int)r->data.vocab_size - 1, tok_vocab_size(r->tok));
  if (r->data.n_examples == 0) return dg_fail(st, DG_ERR_INVALID, "%s: no examples", a->data);
  r->cfg.model.vocab_size = tok_vocab_size(r->tok);
  if (a->steps > 0) r->cfg.steps = a->steps;
  if (!nn_model_init(&r->model, &r->cfg.model, true, st)) return false;
  r->have_model = true;
  nn_model_init_weights(&r->model, r->cfg.seed);
  if (a->init && !init_from(a->init, &r->model, st)) return false;
  r->step0 = 0;
  r->prev_ckpt = -1;
  return true;
}

static bool load_resume(const train_sft_args *a, run_state *r, dg_status *st) {
  char *cfgp = join(a->out_dir, "config.txt"), *tokp = join(a->out_dir, "tokenizer.bin"),
       *datap = join(a->out_dir, "data.shard"), *mp = NULL, *sp = NULL;
  bool ok = train_config_load(cfgp, &r->cfg, st) && (r->tok = tok_load(tokp, st)) != NULL &&
            train_shard_load(&r->data, datap, st) &&
            train_run_latest(a->out_dir, &mp, &sp, &r->step0, st);
  if (ok && r->cfg.model.vocab_size != tok_vocab_size(r->tok))
    ok = dg_fail(st, DG_ERR_INVALID, "%s: vocab_size %d does not match %s's %d", cfgp,
                 r->cfg.model.vocab_size, tokp, tok_vocab_size(r->tok));
  if (ok && r->data.vocab_size > tok_vocab_size(r->tok))
    ok = dg_fail(st, DG_ERR_INVALID, "%s: token ids beyond the tokenizer's vocabulary", datap);
  nn_config got;
  if (ok && (ok = nn_checkpoint_read_config(mp, &got, st)) &&
      memcmp(&got, &r->cfg.model, sizeof got) != 0)
    ok = dg_fail(st, DG_ERR_INVALID, "%s: the checkpoint's model config differs from %s", mp, cfgp);
  if (ok && (ok = nn_checkpoint_load(&r->model, mp, true, st))) r->have_model = true;
  int64_t sstep = 0;
  if (ok) ok = nn_state_load(&r->model, sp, &sstep, NULL, st);
  if (ok && sstep != r->step0)
    ok = dg_fail(st, DG_ERR_INVALID, "%s: holds step %lld, but 'latest' says %lld", sp,
                 (long long)sstep, (long long)r->step0);
  if (ok && a->steps > 0) r->cfg.steps = a->steps;
  if (ok && r->step0 > r->cfg.steps)
    ok = dg_fail(st, DG_ERR_INVALID,
                 "%s: the run is already at step %lld, past %s %lld: nothing to train (resume "
                 "with a larger --steps to continue)",
                 a->out_dir, (long long)r->step0, a->steps > 0 ? "--steps" : "its steps =",
                 (long long)r->cfg.steps);
  r->prev_ckpt = r->step0;
  free(cfgp);
  free(tokp);
  free(datap);
  free(mp);
  free(sp);
  return ok;
}

/* Validation by a hash of the example's tokens: the same example lands on
 * the same side whatever the order of the file. */
static void split(run_state *r) {
  const train_shard *s = &r->data;
  for (int64_t i = 0; i < s->n_examples; i++) {
    int64_t n = s->offsets[i + 1] - s->offsets[i];
    if (n - 1 > r->cfg.seq_len) {
      r->n_dropped++;
      continue;
    }
    uint64_t h = dg_hash_bytes(s->tokens + s->offsets[i], sizeof(int32_t) * (size_t)n, r->cfg.seed);
    bool val = (double)(h % 1000000) < r->cfg.val_fraction * 1e6;
    if (val) DG_VEC_PUSH(&r->val_idx, i);
    else DG_VEC_PUSH(&r->train_idx, i);
  }
  /* A tiny corpus must still train: everything goes to training then. */
  if (r->train_idx.len == 0)
    for (size_t i = 0; i < r->val_idx.len; i++) DG_VEC_PUSH(&r->train_idx, r->val_idx.data[i]);
  if (r->train_idx.len == r->val_idx.len) r->val_idx.len = 0;
}

static bool write_run_files(const train_sft_args *a, run_state *r, dg_status *st) {
  if (!dg_mkdirs(a->out_dir, st)) return false;
  dg_remove_stale_tmp(a->out_dir);
  dg_str cfg;
  dg_str_init(&cfg);
  train_config_print(&r->cfg, &cfg);
  char *cfgp = join(a->out_dir, "config.txt"), *tokp = join(a->out_dir, "tokenizer.bin"),
       *datap = join(a->out_dir, "data.shard");
  bool ok = tok_save(r->tok, tokp, st) && train_shard_save(&r->data, datap, st) &&
            dg_write_file_atomic(cfgp, cfg.s, cfg.len, st);
  dg_str_free(&cfg);
  free(cfgp);
  free(tokp);
  free(datap);
  return ok;
}

/* The examples of step s: positions s*B .. s*B+B-1 of the endless sequence
 * of per-epoch permutations of the training set. */
typedef struct {
  int64_t epoch;
  int64_t *perm;
} order;

static void batch_indices(order *o, const run_state *r, int64_t step, int64_t *idx, int B) {
  int64_t n = (int64_t)r->train_idx.len;
  for (int k = 0; k < B; k++) {
    int64_t p = step * B + k, e = p / n, i = p % n;
    if (e != o->epoch) {
      dg_rng rng;
      dg_rng_seed(&rng, dg_hash_combine(r->cfg.seed, (uint64_t)e));
      for (int64_t j = 0; j < n; j++) o->perm[j] = r->train_idx.data[j];
      for (int64_t j = n - 1; j > 0; j--) {
        int64_t t = (int64_t)dg_rng_below(&rng, (uint64_t)j + 1), x = o->perm[j];
        o->perm[j] = o->perm[t];
        o->perm[t] = x;
      }
      o->epoch = e;
    }
    idx[k] = o->perm[i];
  }
}

static float validate(const train_backend *be, run_state *r, train_batch *b, int32_t pad) {
  if (r->val_idx.len == 0) return -1.0f;
  double sum = 0, wsum = 0;
  for (size_t i = 0; i < r->val_idx.len; i += (size_t)r->cfg.batch) {
    int n = (int)(r->val_idx.len - i < (size_t)r->cfg.batch ? r->val_idx.len - i : (size_t)r->cfg.batch);
    train_batch_fill(b, &r->data, r->val_idx.data + i, n, r->cfg.seg_weights, pad);
    be->forward(be->ctx, b->inputs, b->targets, b->weights, b->B, b->T);
    sum += be->weighted_sum(be->ctx, b->weights, b->B, b->T);
    for (int j = 0; j < b->B * b->T; j++) wsum += b->weights[j];
  }
  return wsum > 0 ? (float)(sum / wsum) : -1.0f;
}

static void fmt_time(char *buf, size_t n, double s) {
  if (s < 60) snprintf(buf, n, "%.0fs", s);
  else if (s < 3600) snprintf(buf, n, "%dm%02ds", (int)(s / 60), (int)fmod(s, 60));
  else snprintf(buf, n, "%dh%02dm", (int)(s / 3600), (int)fmod(s / 60, 60));
}

/* Activations for the longest row kept, on the chosen device: allocated
 * (or refused) before the run directory is written. */
static bool reserve(run_state *r, train_device device, dg_status *st) {
  r->longest = 1;
  for (int side = 0; side < 2; side++) {
    const int64_t *ix = side ? r->val_idx.data : r->train_idx.data;
    size_t cnt = side ? r->val_idx.len : r->train_idx.len;
    for (size_t i = 0; i < cnt; i++) {
      int64_t n = r->data.offsets[ix[i] + 1] - r->data.offsets[ix[i]] - 1;
      if (n > r->longest) r->longest = (int)n;
    }
  }
  if (device == TRAIN_DEVICE_CUDA)
    return train_cuda_init(&r->gpu, &r->model, r->cfg.batch, r->longest, st);
  return nn_model_reserve(&r->model, r->cfg.batch, r->longest, st);
}

/* The results of the last two steps, for a back end that runs a step at
 * once (one without queue_step): step s in slot s % 2. */
typedef struct {
  int64_t step[2];
  float loss[2], norm[2];
} step_slots;

/* Runs training step s on the back end: queued without waiting where the
 * back end can (the results read later by step_results), else run at once
 * with its results kept in the slots. */
static void run_step(const train_backend *be, step_slots *k, const train_batch *b, int64_t s) {
  if (be->queue_step) {
    be->queue_step(be->ctx, b->inputs, b->targets, b->weights, b->B, b->T, s);
    return;
  }
  int i = (int)(s & 1);
  k->loss[i] = be->forward(be->ctx, b->inputs, b->targets, b->weights, b->B, b->T);
  be->backward(be->ctx);
  k->norm[i] = be->update(be->ctx, s);
  k->step[i] = s;
}

/* Step s's loss and gradient norm: s is one of the last two steps run. */
static void step_results(const train_backend *be, const step_slots *k, int64_t s, float *loss,
                         float *norm) {
  if (be->step_result) {
    be->step_result(be->ctx, s, loss, norm);
    return;
  }
  int i = (int)(s & 1);
  DG_ASSERT(k->step[i] == s);
  *loss = k->loss[i];
  *norm = k->norm[i];
}

/* What the loop reports of a step, and its throughput window. */
typedef struct {
  FILE *log;
  double t_start, t_win, tok_win, flops_win;
} progress;

/* Reads step s's loss and gradient norm (waiting for that step only) and
 * writes its log line and, every log_every steps or with a validation
 * loss (val >= 0) or at the last step, its progress line. ntok, flops:
 * the step's tokens and FLOPs. False: the back end failed (st says how). */
static bool report(const train_sft_args *a, const run_state *r, const train_backend *be,
                   const step_slots *k, progress *p, train_result *res, int64_t s, int64_t end,
                   double ntok, double flops, float val, dg_status *st) {
  const train_config *c = &r->cfg;
  float loss = NAN, norm = NAN;
  step_results(be, k, s, &loss, &norm);
  if (be->check && !be->check(be->ctx, st)) return false;
  float lr = nn_optim_lr(&r->model.opt, s);
  res->losses[s - r->step0] = loss;
  res->last_step = s + 1;
  p->tok_win += ntok;
  p->flops_win += flops;
  bool last = s + 1 == end;
  double now = dg_now(), dt = now - p->t_win;
  double tps = dt > 0 ? p->tok_win / dt : 0;
  fprintf(p->log,
          "{\"step\": %lld, \"loss\": %.6g, \"lr\": %.6g, \"grad_norm\": %.6g, "
          "\"tokens_per_s\": %.1f",
          (long long)(s + 1), (double)loss, (double)lr, (double)norm, tps);
  if (val >= 0) fprintf(p->log, ", \"val_loss\": %.6g", (double)val);
  fprintf(p->log, "}\n");
  fflush(p->log);
  if (!a->quiet && ((s + 1) % c->log_every == 0 || last || val >= 0)) {
    char eta[32], vbuf[32] = "", mfu[32] = "";
    double per_step = (now - p->t_start) / (double)(s + 1 - r->step0);
    fmt_time(eta, sizeof eta, per_step * (double)(c->steps - s - 1));
    if (val >= 0) snprintf(vbuf, sizeof vbuf, " | val %.4f", (double)val);
    if (c->peak_flops > 0 && dt > 0)
      snprintf(mfu, sizeof mfu, " | MFU %.1f%%", 100.0 * p->flops_win / dt / c->peak_flops);
    fprintf(stderr, "step %lld/%lld | loss %.4f%s | lr %.2e | %.0f tok/s%s | ETA %s\n",
            (long long)(s + 1), (long long)c->steps, (double)loss, vbuf, (double)lr, tps, mfu, eta);
    p->t_win = now;
    p->tok_win = p->flops_win = 0;
  }
  return true;
}

/* The training loop. A step's results are read only after the next step
 * is queued, so that on an asynchronous back end (the GPU) the host fills
 * the next batch while the device runs the current step; a step that
 * validates or writes a checkpoint (and the last) is finished first. The
 * steps, their order and their results are those of a loop that waits. */
static bool loop(const train_sft_args *a, run_state *r, train_result *res, dg_status *st) {
  const train_config *c = &r->cfg;
  nn_model *m = &r->model;
  m->opt.lr = c->lr;
  m->opt.lr_min = c->lr_min;
  m->opt.warmup_steps = c->warmup_steps;
  m->opt.total_steps = c->steps;
  m->opt.weight_decay = c->weight_decay;
  m->opt.grad_clip = c->grad_clip;
  int32_t pad = tok_special(r->tok, TOK_PAD);
  if (pad < 0) return dg_fail(st, DG_ERR_INVALID, "the tokenizer has no %s token", TOK_PAD);
  int longest = r->longest;
  train_backend be = r->gpu ? train_backend_cuda(r->gpu) : train_backend_cpu(m);

  int64_t end = c->steps;
  if (a->stop_after > 0 && r->step0 + a->stop_after < end) end = r->step0 + a->stop_after;
  res->first_step = r->step0;
  res->last_step = r->step0;
  res->losses = dg_calloc((size_t)(end > r->step0 ? end - r->step0 : 1), sizeof(float));
  res->val_loss = -1.0f;
  res->n_train = (int64_t)r->train_idx.len;
  res->n_val = (int64_t)r->val_idx.len;
  res->n_dropped = r->n_dropped;

  char *logp = join(a->out_dir, "log.jsonl");
  progress p = {fopen(logp, "a"), 0, 0, 0, 0};
  if (!p.log) {
    dg_fail(st, DG_ERR_IO, "%s: %s", logp, strerror(errno));
    free(logp);
    return false;
  }
  train_batch b;
  train_batch_init(&b, c->batch, longest);
  order ord = {-1, dg_malloc(sizeof(int64_t) * r->train_idx.len)};
  int64_t *idx = dg_malloc(sizeof(int64_t) * (size_t)c->batch);
  const nn_config *mc = &m->cfg;
  double flops_tok_base = 6.0 * (double)m->num_params;
  double attn_per_T = 6.0 * mc->n_layers * (double)mc->n_heads * mc->head_dim;
  step_slots slots = {{-1, -1}, {0, 0}, {0, 0}};
  p.t_start = p.t_win = dg_now();
  /* the queued step whose results are not reported yet (-1: none), and
   * its tokens and FLOPs */
  int64_t pending = -1;
  double pend_tok = 0, pend_flops = 0;
  bool ok = true;
  for (int64_t s = r->step0; s < end && ok; s++) {
    batch_indices(&ord, r, s, idx, c->batch);
    train_batch_fill(&b, &r->data, idx, c->batch, c->seg_weights, pad);
    double ntok = (double)b.B * b.T, flops = ntok * (flops_tok_base + attn_per_T * b.T);
    run_step(&be, &slots, &b, s);
    if (be.check && !be.check(be.ctx, st)) {
      ok = false;
      break;
    }
    if (pending >= 0 &&
        !report(a, r, &be, &slots, &p, res, pending, end, pend_tok, pend_flops, -1.0f, st)) {
      ok = false;
      break;
    }
    pending = -1;
    bool last = s + 1 == end;
    bool eval = (c->eval_every > 0 && (s + 1) % c->eval_every == 0) || last;
    bool ckpt = (c->ckpt_every > 0 && (s + 1) % c->ckpt_every == 0) || last;
    if (!eval && !ckpt) {
      pending = s;
      pend_tok = ntok;
      pend_flops = flops;
      continue;
    }
    float val = -1.0f;
    if (eval) {
      val = validate(&be, r, &b, pad);
      if (be.check && !be.check(be.ctx, st)) {
        ok = false;
        break;
      }
      if (val >= 0) res->val_loss = val;
    }
    ok = report(a, r, &be, &slots, &p, res, s, end, ntok, flops, val, st);
    if (ok && ckpt) ok = save_checkpoint(&be, a->out_dir, s + 1, &r->prev_ckpt, st);
  }
  /* (after a failure a queued step's results stay unreported) */
  if (ok && r->step0 >= end) {
    res->val_loss = validate(&be, r, &b, pad);
    if (be.check && !be.check(be.ctx, st)) ok = false;
  }
  fclose(p.log);
  free(logp);
  free(ord.perm);
  free(idx);
  train_batch_free(&b);
  return ok;
}

bool train_sft_run(const train_sft_args *a, train_result *res, dg_status *st) {
  memset(res, 0, sizeof *res);
  res->val_loss = -1.0f;
  if (!a->out_dir) return dg_fail(st, DG_ERR_USAGE, "--out is required");
  if (!train_device_available(a->device, st)) return false; /* before any work */
  run_state r;
  memset(&r, 0, sizeof r);
  /* temporary files of checkpoint writes that a killed run left */
  if (a->resume) dg_remove_stale_tmp(a->out_dir);
  bool ok = a->resume ? load_resume(a, &r, st) : load_new(a, &r, st);
  if (ok) {
    split(&r);
    if (r.train_idx.len == 0)
      ok = dg_fail(st, DG_ERR_INVALID,
                   "no example fits seq_len = %d (all %lld are longer); raise seq_len",
                   r.cfg.seq_len, (long long)r.n_dropped);
  }
  if (ok && !a->quiet && r.n_dropped)
    fprintf(stderr, "warning: %lld example(s) longer than seq_len = %d tokens left out\n",
            (long long)r.n_dropped, r.cfg.seq_len);
  if (ok) ok = reserve(&r, a->device, st);
  if (ok && !a->resume) ok = write_run_files(a, &r, st);
  if (ok && a->resume) ok = trim_log(a->out_dir, r.step0, st);
  if (ok && a->resume && r.step0 == r.cfg.steps && !a->quiet)
    fprintf(stderr, "note: %s has done all its %lld steps; nothing to train (validation only)\n",
            a->out_dir, (long long)r.cfg.steps);
  if (ok) ok = loop(a, &r, res, st);
  run_free(&r);
  return ok;
}
