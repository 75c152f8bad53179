/* grpo_run.c: a GRPO run (`dragon train grpo`; the objective is
 * grpo.c's), on the C reference model or on the GPU's (train_backend: the
 * log-probabilities, the weighted forward, the accumulated gradients and
 * AdamW run there). On the GPU the rollouts are written there too, every
 * sample of a round a row of one KV cache with the writers on every core
 * (train_decode_jobs_cuda); else (or with write_on_cpu) on the CPU cores
 * with the host copy of the model, refreshed after every update.
 *
 * A step: prompts are the training split's workloads in the split file's
 * order from a cursor (construction prompts: the kernel's text). For each,
 * G graphs are written by constrained decoding at the run's temperature
 * (sample j of prompt q with seed + q * G + j; on the CPU a prompt's G in
 * step on a thread, train_decode_graphs), and judged through the gates of the one
 * road (eval_score_tsel up to the numbers in the C emulation; on a GPU,
 * eval_score_batch with the untuned baseline in the same queue, so a
 * correct graph earns the log of its speedup): grpo_reward. A group whose
 * rewards are all equal teaches nothing: it is dropped and the next
 * prompt taken (dynamic sampling), up to twice the prompts a step. The
 * kept samples become rows (prompt and written tokens; the loss on the
 * drawn tokens only); their
 * log-probabilities under the sampling policy (and the reference, with a
 * KL) are computed, then `epochs` AdamW updates each accumulate the
 * gradient of grpo_token_weights's loss over the step's rows in
 * micro-batches (one normaliser for the step).
 *
 * Everything a step draws comes from the seed, the step's prompts and
 * their indices, so a run resumed from its checkpoint (model, AdamW
 * state, the cursor; written atomically, `latest` last) logs the same
 * steps as one that was not stopped. The run directory: grpo.cfg (the
 * options), tokenizer.bin, ref.bin (the reference, with a KL),
 * model_<S>.bin, state_<S>.bin, cursor_<S>.txt, latest, log.jsonl.
 */
#include <math.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "dragon/data.h"
#include "dragon/rt_cuda.h"
#include "dragon/search.h"
#include "dragon/train.h"
#include "dragon/wl.h"

void grpo_run_args_default(grpo_run_args *a) {
  memset(a, 0, sizeof *a);
  grpo_opts_default(&a->obj);
  a->steps = 100;
  a->prompts = 16;
  a->samples = 8;
  a->lr = 1e-5f;
  a->warmup = 10;
  a->grad_clip = 1.0f;
  a->temperature = 1.0f;
  a->max_tokens = 2048;
  a->epochs = 1;
  a->micro_rows = 4;
  a->seed = 1;
}

/* ---- the run's files -------------------------------------------------------- */

static char *path_in(const char *dir, const char *name) {
  dg_str s;
  dg_str_init(&s);
  dg_str_printf(&s, "%s/%s", dir, name);
  return dg_str_take(&s);
}

static char *step_path(const char *dir, const char *kind, int64_t step, const char *ext) {
  dg_str s;
  dg_str_init(&s);
  dg_str_printf(&s, "%s/%s_%lld.%s", dir, kind, (long long)step, ext);
  return dg_str_take(&s);
}

/* The options that define the run, as `key = value` lines. */
static void cfg_print(const grpo_run_args *a, dg_str *out) {
  dg_str_printf(out,
                "prompts = %d\nsamples = %d\nlr = %.9g\nwarmup = %d\ngrad_clip = %.9g\n"
                "eps_low = %.9g\neps_high = %.9g\nbeta = %.9g\nnorm = %s\nscale_std = %d\n"
                "bonus_clip = %.9g\ntemperature = %.9g\nmax_tokens = %d\nepochs = %d\n"
                "micro_rows = %d\nguard = %d\nseed = %llu\n",
                a->prompts, a->samples, (double)a->lr, a->warmup, (double)a->grad_clip,
                (double)a->obj.eps_low, (double)a->obj.eps_high, (double)a->obj.beta,
                a->obj.norm == GRPO_NORM_TOKEN ? "token" : "sequence", a->obj.scale_std,
                (double)a->obj.bonus_clip, (double)a->temperature, a->max_tokens, a->epochs,
                a->micro_rows, a->guard, (unsigned long long)a->seed);
}

typedef struct {
  grpo_run_args *a;
} cfg_ctx;

static bool cfg_pair(void *ctx, const char *key, const char *val, int line, dg_status *st) {
  grpo_run_args *a = ((cfg_ctx *)ctx)->a;
  char *end;
  double v = strtod(val, &end);
  bool num = end != val && *end == 0;
  if (strcmp(key, "norm") == 0) {
    if (strcmp(val, "token") == 0) a->obj.norm = GRPO_NORM_TOKEN;
    else if (strcmp(val, "sequence") == 0) a->obj.norm = GRPO_NORM_SEQUENCE;
    else return dg_fail(st, DG_ERR_PARSE, "grpo.cfg:%d: norm is token or sequence", line);
    return true;
  }
  if (!num) return dg_fail(st, DG_ERR_PARSE, "grpo.cfg:%d: %s: '%s' is not a number", line, key, val);
  if (strcmp(key, "prompts") == 0) a->prompts = (int)v;
  else if (strcmp(key, "samples") == 0) a->samples = (int)v;
  else if (strcmp(key, "lr") == 0) a->lr = (float)v;
  else if (strcmp(key, "warmup") == 0) a->warmup = (int)v;
  else if (strcmp(key, "grad_clip") == 0) a->grad_clip = (float)v;
  else if (strcmp(key, "eps_low") == 0) a->obj.eps_low = (float)v;
  else if (strcmp(key, "eps_high") == 0) a->obj.eps_high = (float)v;
  else if (strcmp(key, "beta") == 0) a->obj.beta = (float)v;
  else if (strcmp(key, "scale_std") == 0) a->obj.scale_std = v != 0;
  else if (strcmp(key, "bonus_clip") == 0) a->obj.bonus_clip = (float)v;
  else if (strcmp(key, "temperature") == 0) a->temperature = (float)v;
  else if (strcmp(key, "max_tokens") == 0) a->max_tokens = (int)v;
  else if (strcmp(key, "epochs") == 0) a->epochs = (int)v;
  else if (strcmp(key, "micro_rows") == 0) a->micro_rows = (int)v;
  else if (strcmp(key, "guard") == 0) a->guard = v != 0;
  else if (strcmp(key, "seed") == 0) a->seed = (uint64_t)v;
  else return dg_fail(st, DG_ERR_PARSE, "grpo.cfg:%d: unknown key '%s'", line, key);
  return true;
}

static bool check_args(const grpo_run_args *a, dg_status *st) {
  if (a->prompts < 1 || a->samples < 2 || a->samples > 256 || a->epochs < 1 || a->micro_rows < 1 ||
      a->max_tokens < 16)
    return dg_fail(st, DG_ERR_USAGE,
                   "grpo: prompts >= 1, samples 2 to 256 (a group compares its samples), epochs >= 1, "
                   "micro_rows >= 1 and max_tokens >= 16");
  if (!(a->lr > 0) || !(a->obj.eps_low > 0 && a->obj.eps_low < 1) || !(a->obj.eps_high > 0) ||
      !(a->obj.beta >= 0) || !(a->temperature > 0))
    return dg_fail(st, DG_ERR_USAGE, "grpo: lr > 0, 0 < eps_low < 1, eps_high > 0, beta >= 0, temperature > 0");
  return true;
}

/* ---- a step's samples --------------------------------------------------------- */

typedef struct {
  char *spec;
  dg_func *f;
  char *text;
  tok_ids prompt;
  int64_t q; /* the prompt's index in the run */
} prompt_t;

typedef struct {
  char *graph;
  train_decode_trace trace;
  bool truncated;
  eval_gate gate;
  double speedup;
  float reward, adv;
} sample_t;

typedef struct {
  const grpo_run_args *a;
  const nn_model *m;
  const prompt_t *p; /* a round's prompts */
  sample_t *s;       /* and their samples, g a prompt */
  int g;
} write_ctx;

/* On a thread: prompt k's g samples, written in step (one pass of the
 * model feeds all of them), with a tokenizer and mask of its own
 * (encoding and masking keep scratch state). */
static void write_samples(void *ctx, int k) {
  write_ctx *c = ctx;
  const grpo_run_args *a = c->a;
  const prompt_t *p = &c->p[k];
  sample_t *s = &c->s[(size_t)k * c->g];
  dg_status st;
  tok_tokenizer *tok = tok_load(a->tokenizer_path, &st);
  tsel_mask *mask = tok ? tsel_mask_new(tok, &st) : NULL;
  if (!mask) {
    tok_free(tok);
    return; /* no graphs: judged parse failures */
  }
  train_decode_opts o;
  train_decode_opts_default(&o);
  o.sample.temperature = a->temperature;
  o.sample.max_tokens = a->max_tokens;
  o.explain = false;
  o.plan_first = a->plan_first;
  eval_guard guard = {p->f, p->spec};
  if (a->guard) {
    o.guard = eval_guard_line;
    o.guard_ctx = &guard;
  }
  int g = c->g;
  uint64_t *seeds = dg_malloc(sizeof *seeds * (size_t)g);
  char **texts = dg_calloc((size_t)g, sizeof *texts);
  train_decode_trace *traces = dg_calloc((size_t)g, sizeof *traces);
  train_decode_stats *ds = dg_calloc((size_t)g, sizeof *ds);
  dg_status *es = dg_calloc((size_t)g, sizeof *es);
  for (int j = 0; j < g; j++) seeds[j] = a->seed + (uint64_t)p->q * (uint64_t)g + (uint64_t)j;
  train_decode_graphs(c->m, tok, mask, p->prompt.data, (int)p->prompt.len, p->f, p->spec, TSEL_TARGET_CUDA, &o,
                      g, seeds, texts, traces, ds, es, &st);
  for (int j = 0; j < g; j++) {
    s[j].graph = texts[j];
    s[j].trace = traces[j];
    s[j].truncated = ds[j].budget_completed;
  }
  free(seeds);
  free(texts);
  free(traces);
  free(ds);
  free(es);
  tsel_mask_free(mask);
  tok_free(tok);
}

/* A round's samples written on the GPU with the policy's current weights:
 * every prompt's g graphs, one row each of one cache
 * (train_decode_jobs_cuda), the writers on every core, each thread with a
 * tokenizer and mask of its own. */
static bool write_gpu(const grpo_run_args *a, train_cuda *gpu, const prompt_t *p, int n_p, sample_t *s, int g,
                      dg_status *st) {
  int n = n_p * g, threads = a->threads > 0 ? a->threads : rt_cpu_count();
  if (threads > n) threads = n;
  if (n < 1) return true;
  tok_tokenizer **toks = dg_calloc((size_t)threads, sizeof *toks);
  tsel_mask **masks = dg_calloc((size_t)threads, sizeof *masks);
  bool ok = true;
  for (int t = 0; ok && t < threads; t++) {
    toks[t] = tok_load(a->tokenizer_path, st);
    masks[t] = toks[t] ? tsel_mask_new(toks[t], st) : NULL;
    ok = masks[t] != NULL;
  }
  eval_guard *guards = dg_calloc((size_t)n_p, sizeof *guards);
  train_decode_job *jobs = dg_calloc((size_t)n, sizeof *jobs);
  for (int k = 0; k < n_p; k++) {
    guards[k] = (eval_guard){p[k].f, p[k].spec};
    for (int j = 0; j < g; j++)
      jobs[k * g + j] = (train_decode_job){p[k].prompt.data, (int)p[k].prompt.len, p[k].f, p[k].spec,
                                           a->seed + (uint64_t)p[k].q * (uint64_t)g + (uint64_t)j,
                                           a->guard ? &guards[k] : NULL};
  }
  train_decode_opts o;
  train_decode_opts_default(&o);
  o.sample.temperature = a->temperature;
  o.sample.max_tokens = a->max_tokens;
  o.explain = false;
  o.plan_first = a->plan_first;
  if (a->guard) o.guard = eval_guard_line;
  char **texts = dg_calloc((size_t)n, sizeof *texts);
  train_decode_trace *traces = dg_calloc((size_t)n, sizeof *traces);
  train_decode_stats *ds = dg_calloc((size_t)n, sizeof *ds);
  dg_status *es = dg_calloc((size_t)n, sizeof *es);
  if (ok)
    ok = train_decode_jobs_cuda(gpu, toks, masks, threads, jobs, n, TSEL_TARGET_CUDA, &o, texts, traces, ds, es,
                                NULL, st);
  for (int i = 0; i < n; i++) {
    /* a graph that failed is judged a parse failure */
    s[i].graph = texts[i];
    s[i].trace = traces[i];
    s[i].truncated = ds[i].budget_completed;
  }
  for (int t = 0; t < threads; t++) {
    tsel_mask_free(masks[t]);
    tok_free(toks[t]);
  }
  free(toks);
  free(masks);
  free(guards);
  free(jobs);
  free(texts);
  free(traces);
  free(ds);
  free(es);
  return ok;
}

/* The gates' verdicts and rewards of a round's samples (g for each of its
 * n_p prompts): one batch, built on every core, and on a GPU one queue
 * with each prompt's untuned baseline beside its samples. */
static void judge(const grpo_run_args *a, const prompt_t *p, int n_p, sample_t *s, int g) {
  if (a->reward) {
    for (int i = 0; i < n_p * g; i++)
      s[i].reward = a->reward(a->reward_ctx, p[i / g].spec, p[i / g].f, s[i].graph, &s[i].gate, &s[i].speedup);
    return;
  }
  int per = g + (a->gpu ? 1 : 0), n = n_p * per;
  eval_item *items = dg_calloc((size_t)n, sizeof *items);
  eval_score *sc = dg_calloc((size_t)n, sizeof *sc);
  char **base = dg_calloc((size_t)n_p, sizeof *base);
  for (int k = 0; k < n_p; k++) {
    for (int j = 0; j < g; j++) {
      const char *graph = s[k * g + j].graph;
      items[k * per + j] = (eval_item){graph ? graph : "", "sample", p[k].f, p[k].spec, NULL};
    }
    if (!a->gpu) continue;
    /* the untuned baseline, for the speedups */
    sched *bs = NULL;
    dg_status st;
    if (search_baseline_schedule(p[k].f, NULL, &bs, &st)) {
      tsel_graph *bg = tsel_lift(sched_get_trace(bs), p[k].spec, p[k].f, NULL, &st);
      if (bg) base[k] = tsel_print(bg);
      tsel_graph_free(bg);
    }
    sched_free(bs);
    items[k * per + g] = (eval_item){base[k] ? base[k] : "", "baseline", p[k].f, p[k].spec, NULL};
  }
  eval_score_opts eo;
  memset(&eo, 0, sizeof eo);
  eo.last = a->gpu ? EVAL_GATE_MEASURE : EVAL_GATE_NUMERIC;
  eo.gpu = a->gpu;
  eval_score_batch(items, n, &eo, a->threads, sc);
  if (a->gpu) {
    /* each group's fastest kernels measured again, their times the
     * medians (the samples of an equal kernel share it) */
    int *again = dg_malloc(sizeof(int) * (size_t)(n_p * GRPO_TOP_AGAIN + 1)), n_again = 0;
    double *secs = dg_malloc(sizeof *secs * (size_t)g);
    uint64_t *hash = dg_malloc(sizeof *hash * (size_t)g);
    for (int k = 0; k < n_p; k++) {
      for (int j = 0; j < g; j++) {
        const eval_score *y = &sc[k * per + j];
        secs[j] = s[k * g + j].graph && y->failed == EVAL_PASSED ? y->secs : 0;
        hash[j] = y->kernel_hash;
      }
      int top[GRPO_TOP_AGAIN];
      int m = grpo_group_fastest(secs, hash, g, GRPO_TOP_AGAIN, top);
      for (int t = 0; t < m; t++) again[n_again++] = k * per + top[t];
    }
    eval_score_measure_again(items, sc, n, again, n_again, &eo, GRPO_MEASURE_AGAIN);
    free(again);
    free(secs);
    free(hash);
  }
  for (int k = 0; k < n_p; k++) {
    const eval_score *b = &sc[k * per + g];
    double base_secs = a->gpu && b->failed == EVAL_PASSED ? b->secs : 0;
    for (int j = 0; j < g; j++) {
      sample_t *x = &s[k * g + j];
      const eval_score *y = &sc[k * per + j];
      x->gate = x->graph ? y->failed : EVAL_GATE_PARSE;
      x->speedup = x->gate == EVAL_PASSED && base_secs > 0 && y->secs > 0 ? base_secs / y->secs : 0;
      x->reward = grpo_reward(&a->obj, x->gate, x->speedup);
    }
    free(base[k]);
  }
  for (int i = 0; i < n; i++) eval_score_free(&sc[i]);
  free(sc);
  free(items);
  free(base);
}

static void sample_free(sample_t *s) {
  free(s->graph);
  train_decode_trace_free(&s->trace);
}

static void prompt_free(prompt_t *p) {
  free(p->spec);
  ir_func_free(p->f);
  free(p->text);
  tok_ids_free(&p->prompt);
}

/* ---- rows and log-probabilities ------------------------------------------- */

/* A kept sample as a row: inputs, targets, and the loss mask: the drawn
 * tokens (a graph the token budget ended keeps its drawn tokens, with the
 * advantage its completed text earned: rambling is penalised, not
 * hidden). */
typedef struct {
  int32_t *in, *tg;
  uint8_t *mask;
  int len;
  float adv;
} row_t;

static void row_make(row_t *r, const prompt_t *p, const sample_t *s, int max_len) {
  int n = (int)p->prompt.len + s->trace.n;
  if (n > max_len + 1) n = max_len + 1;
  r->len = n - 1;
  r->in = dg_malloc(sizeof(int32_t) * (size_t)(r->len ? r->len : 1));
  r->tg = dg_malloc(sizeof(int32_t) * (size_t)(r->len ? r->len : 1));
  r->mask = dg_calloc((size_t)(r->len ? r->len : 1), 1);
  for (int t = 0; t < r->len; t++) {
    int k0 = t, k1 = t + 1; /* positions in prompt + trace */
    int np = (int)p->prompt.len;
    r->in[t] = k0 < np ? p->prompt.data[k0] : s->trace.ids[k0 - np];
    r->tg[t] = k1 < np ? p->prompt.data[k1] : s->trace.ids[k1 - np];
    r->mask[t] = k1 >= np && s->trace.sampled[k1 - np];
  }
  r->adv = s->adv;
}

static void row_free(row_t *r) {
  free(r->in);
  free(r->tg);
  free(r->mask);
}

/* Rows [lo, hi) padded into one batch (B rows of the longest length). */
typedef struct {
  int32_t *in, *tg;
  uint8_t *mask;
  float *adv;
  int B, T;
} mbatch;

static void mbatch_fill(mbatch *b, const row_t *rows, int lo, int hi, int32_t pad) {
  b->B = hi - lo;
  b->T = 1;
  for (int i = lo; i < hi; i++)
    if (rows[i].len > b->T) b->T = rows[i].len;
  size_t n = (size_t)b->B * b->T;
  b->in = dg_malloc(sizeof(int32_t) * n);
  b->tg = dg_malloc(sizeof(int32_t) * n);
  b->mask = dg_calloc(n, 1);
  b->adv = dg_malloc(sizeof(float) * (size_t)b->B);
  for (int i = lo; i < hi; i++) {
    const row_t *r = &rows[i];
    size_t o = (size_t)(i - lo) * b->T;
    for (int t = 0; t < b->T; t++) {
      b->in[o + t] = t < r->len ? r->in[t] : pad;
      b->tg[o + t] = t < r->len ? r->tg[t] : pad;
      b->mask[o + t] = t < r->len ? r->mask[t] : 0;
    }
    b->adv[i - lo] = r->adv;
  }
}

static void mbatch_free(mbatch *b) {
  free(b->in);
  free(b->tg);
  free(b->mask);
  free(b->adv);
}

/* A model's log-probabilities of the batch's targets (0 off the mask). */
static void batch_logps(const train_backend *be, const mbatch *b, float *logp) {
  be->token_logps(be->ctx, b->in, b->tg, b->mask, b->B, b->T, logp);
}

/* ---- the run ------------------------------------------------------------- */

typedef struct {
  nn_model model, ref;
  bool have_model, have_ref;
  /* where they train and score: the C reference itself, or the GPU (the
   * host models then stage checkpoints and write the rollouts) */
  train_backend be, ref_be;
  train_cuda *gpu, *gpu_ref;
  int64_t step, cursor;
  int32_t pad;
  int64_t *train_idx; /* the training split's workloads, by index */
  int64_t n_train;
} run_t;

static bool save_step(const grpo_run_args *a, run_t *r, dg_status *st) {
  char *mp = step_path(a->out_dir, "model", r->step, "bin"), *sp = step_path(a->out_dir, "state", r->step, "bin"),
       *cp = step_path(a->out_dir, "cursor", r->step, "txt"), *lp = path_in(a->out_dir, "latest");
  char cur[32], lat[32];
  snprintf(cur, sizeof cur, "%lld\n", (long long)r->cursor);
  snprintf(lat, sizeof lat, "%lld\n", (long long)r->step);
  bool ok = r->be.save(r->be.ctx, mp, sp, r->step, st) && dg_write_file_atomic(cp, cur, strlen(cur), st) &&
            dg_write_file_atomic(lp, lat, strlen(lat), st);
  /* the step before is no longer needed */
  if (ok && r->step > 0) {
    char *om = step_path(a->out_dir, "model", r->step - 1, "bin"),
         *os = step_path(a->out_dir, "state", r->step - 1, "bin"),
         *oc = step_path(a->out_dir, "cursor", r->step - 1, "txt");
    unlink(om);
    unlink(os);
    unlink(oc);
    free(om);
    free(os);
    free(oc);
  }
  free(mp);
  free(sp);
  free(cp);
  free(lp);
  return ok;
}

static bool read_int(const char *path, int64_t *v, dg_status *st) {
  size_t n;
  char *t = dg_read_file(path, &n, st);
  if (!t) return false;
  char *end;
  long long x = strtoll(t, &end, 10);
  bool ok = end != t && (*end == '\n' || *end == 0) && x >= 0;
  free(t);
  if (!ok) return dg_fail(st, DG_ERR_PARSE, "%s: not a step count", path);
  *v = x;
  return true;
}

/* A new run's directory and weights, or a resumed run's state. */
static bool open_run(grpo_run_args *a, run_t *r, dg_status *st) {
  char *cfgp = path_in(a->out_dir, "grpo.cfg"), *tokp = path_in(a->out_dir, "tokenizer.bin"),
       *latest = path_in(a->out_dir, "latest"), *refp = path_in(a->out_dir, "ref.bin");
  bool ok = false;
  struct stat sb;
  if (a->resume) {
    size_t n;
    char *text = dg_read_file(cfgp, &n, st);
    if (!text) goto done;
    int64_t steps = a->steps;
    cfg_ctx cc = {a};
    bool parsed = dg_kv_parse(text, n, cfgp, cfg_pair, &cc, st);
    free(text);
    if (!parsed || !check_args(a, st)) goto done;
    if (steps > 0) a->steps = steps;
    if (!read_int(latest, &r->step, st)) goto done;
    char *mp = step_path(a->out_dir, "model", r->step, "bin"), *sp = step_path(a->out_dir, "state", r->step, "bin"),
         *cp = step_path(a->out_dir, "cursor", r->step, "txt");
    int64_t sstep = -1;
    bool loaded = nn_checkpoint_load(&r->model, mp, true, st);
    r->have_model = loaded;
    loaded = loaded && nn_state_load(&r->model, sp, &sstep, NULL, st) && read_int(cp, &r->cursor, st);
    if (loaded && sstep != r->step)
      loaded = dg_fail(st, DG_ERR_INVALID, "%s: the state is of step %lld, latest says %lld", sp,
                       (long long)sstep, (long long)r->step);
    free(mp);
    free(sp);
    free(cp);
    if (!loaded) goto done;
    if (a->obj.beta > 0) {
      if (!nn_checkpoint_load(&r->ref, refp, false, st)) goto done;
      r->have_ref = true;
    }
  } else {
    if (stat(latest, &sb) == 0 || stat(cfgp, &sb) == 0) {
      dg_fail(st, DG_ERR_USAGE, "%s already holds a run: use --resume, or another --out", a->out_dir);
      goto done;
    }
    if (!check_args(a, st)) goto done;
    if (!a->init || !a->init_tokenizer) {
      dg_fail(st, DG_ERR_USAGE, "a new GRPO run needs the model it starts from and its tokenizer");
      goto done;
    }
    /* the starting model, as a training model */
    nn_model src;
    bool st_file = strstr(a->init, ".safetensors") != NULL;
    if (st_file) {
      nn_config cfg;
      if (!nn_safetensors_read_config(a->init, &cfg, st) || !nn_model_init(&src, &cfg, false, st)) goto done;
      if (!nn_safetensors_import(&src, a->init, st)) {
        nn_model_free(&src);
        goto done;
      }
    } else if (!nn_checkpoint_load(&src, a->init, false, st)) {
      goto done;
    }
    bool made = nn_model_init(&r->model, &src.cfg, true, st);
    if (made) memcpy(r->model.params_mem, src.params_mem, sizeof(float) * src.num_params);
    r->have_model = made;
    if (made && a->obj.beta > 0) {
      r->ref = src; /* the reference stays the starting model */
      r->have_ref = true;
    } else {
      nn_model_free(&src);
    }
    if (!made || !dg_mkdirs(a->out_dir, st)) goto done;
    tok_tokenizer *tok = tok_load(a->init_tokenizer, st);
    if (!tok) goto done;
    bool vocab_ok = tok_vocab_size(tok) == r->model.cfg.vocab_size;
    bool saved = vocab_ok && tok_save(tok, tokp, st);
    tok_free(tok);
    if (!vocab_ok) {
      dg_fail(st, DG_ERR_INVALID, "%s: a vocabulary of another size than the model's %d", a->init_tokenizer,
              r->model.cfg.vocab_size);
      goto done;
    }
    if (!saved || !train_model_config_copy(a->init, a->out_dir, st)) goto done;
    dg_str c;
    dg_str_init(&c);
    cfg_print(a, &c);
    bool w = dg_write_file_atomic(cfgp, c.s, c.len, st);
    dg_str_free(&c);
    if (!w || (r->have_ref && !nn_checkpoint_save(&r->ref, refp, st))) goto done;
    r->step = 0;
    r->cursor = 0;
  }
  if (!train_model_plan_first(tokp, &a->plan_first, st)) goto done; /* the config beside the run's models */
  a->tokenizer_path = dg_strdup(tokp);
  ok = true;
done:
  free(cfgp);
  free(tokp);
  free(latest);
  free(refp);
  return ok;
}

/* A step's prompt q (the training split's workload cursor + q), built;
 * false with st when its spec does not build (the step skips it). */
static bool prompt_make(const grpo_run_args *a, const run_t *r, tok_tokenizer *tok, int64_t q,
                        prompt_t *p, dg_status *st) {
  memset(p, 0, sizeof *p);
  p->q = q;
  p->spec = dg_strdup(data_splits_at(a->splits, r->train_idx[q % r->n_train])->spec);
  if (!(p->f = wl_build(p->spec, st))) return false;
  p->text = ir_print(p->f);
  return train_prompt_encode(tok, p->text, NULL, &p->prompt, st) &&
         (int)p->prompt.len < r->model.cfg.max_seq_len - 16;
}

/* Appends the step's log line. */
static bool log_step(const grpo_run_args *a, const grpo_step_stats *s, dg_status *st) {
  char *lp = path_in(a->out_dir, "log.jsonl");
  dg_str l;
  dg_str_init(&l);
  dg_str_printf(&l,
                "{\"step\": %lld, \"reward\": %.6g, \"correct\": %.6g, \"speedup\": %.6g, \"loss\": %.6g, "
                "\"kl\": %.6g, \"clipped\": %.6g, \"entropy\": %.6g, \"dropped\": %.6g, \"groups\": %d, "
                "\"tokens\": %lld, \"grad_norm\": %.6g, \"lr\": %.6g, \"seconds\": %.3f, "
                "\"write_seconds\": %.3f, \"judge_seconds\": %.3f, \"update_seconds\": %.3f, "
                "\"compile_seconds\": %.3f, \"compile_wait_seconds\": %.3f, \"gpu_wait_seconds\": %.3f}\n",
                (long long)s->step, s->reward_mean, s->correct, s->speedup_mean, s->loss, s->kl, s->clipped,
                s->entropy, s->dropped_share, s->groups, (long long)s->tokens, s->grad_norm, s->lr, s->seconds,
                s->write_seconds, s->judge_seconds, s->update_seconds, s->compile_seconds, s->compile_wait_seconds,
                s->gpu_wait_seconds);
  bool ok = dg_append_lines(lp, l.s, l.len, st);
  dg_str_free(&l);
  free(lp);
  return ok;
}

static bool one_step(grpo_run_args *a, run_t *r, tok_tokenizer *tok, grpo_step_stats *out, dg_status *st) {
  double t0 = dg_now();
  memset(out, 0, sizeof *out);
  out->step = r->step;
  int g = a->samples, want = a->prompts, tries = 0;
  prompt_t *ps = dg_calloc((size_t)want, sizeof *ps);
  sample_t *ss = dg_calloc((size_t)want * g, sizeof *ss);
  int kept = 0, judged_samples = 0, correct = 0, timed = 0;
  double reward_sum = 0, speed_sum = 0;
  /* Rounds: the prompts a round still needs (want - kept, no more than
   * 2 * want tried in all), all their samples written at once on every
   * core and judged in one batch; a group whose rewards are all equal is
   * dropped. The prompts tried are those of one prompt at a time (a round
   * tries no more than would be needed if none were dropped). */
  while (kept < want && tries < 2 * want) {
    int need = want - kept;
    if (need > 2 * want - tries) need = 2 * want - tries;
    prompt_t *rp = dg_calloc((size_t)need, sizeof *rp);
    int n_p = 0;
    for (int i = 0; i < need; i++) {
      int64_t q = r->cursor + tries;
      tries++;
      dg_status pst;
      if (prompt_make(a, r, tok, q, &rp[n_p], &pst)) n_p++;
      else prompt_free(&rp[n_p]);
    }
    sample_t *rs = dg_calloc((size_t)(n_p ? n_p : 1) * g, sizeof *rs);
    /* the prompts' data (inputs, float64 references) made on the CPU while
     * their samples are written, kept for the judging */
    search_cuda_data *data = NULL;
    if (a->gpu && !a->reward) {
      const dg_func **fs = dg_calloc((size_t)(n_p ? n_p : 1), sizeof *fs);
      for (int k = 0; k < n_p; k++) fs[k] = rp[k].f;
      data = search_cuda_measure_prepare_start(a->gpu, fs, n_p);
      free(fs);
    }
    double ta = dg_now();
    if (r->gpu && !a->write_on_cpu) {
      if (!write_gpu(a, r->gpu, rp, n_p, rs, g, st)) {
        search_cuda_measure_prepare_finish(a->gpu, data);
        for (int i = 0; i < n_p * g; i++) sample_free(&rs[i]);
        for (int k = 0; k < n_p; k++) prompt_free(&rp[k]);
        free(rp);
        free(rs);
        for (int k = 0; k < kept; k++) prompt_free(&ps[k]);
        for (int i = 0; i < kept * g; i++) sample_free(&ss[i]);
        free(ps);
        free(ss);
        return false;
      }
    } else {
      write_ctx wc = {a, &r->model, rp, rs, g};
      rt_tasks *tk = rt_tasks_start(n_p, a->threads > 0 ? a->threads : rt_cpu_count(), write_samples, &wc);
      while (rt_tasks_next(tk, true) >= 0) {
      }
      rt_tasks_free(tk);
    }
    double tb = dg_now();
    search_cuda_measure_prepare_finish(a->gpu, data); /* its wait is the judging's */
    double c0 = a->gpu ? a->gpu->stats.t_compile : 0, cw0 = a->gpu ? a->gpu->stats.t_compile_wait : 0,
           gw0 = a->gpu ? a->gpu->stats.t_gpu_wait : 0;
    judge(a, rp, n_p, rs, g);
    out->write_seconds += tb - ta;
    out->judge_seconds += dg_now() - tb;
    if (a->gpu) {
      out->compile_seconds += a->gpu->stats.t_compile - c0;
      out->compile_wait_seconds += a->gpu->stats.t_compile_wait - cw0;
      out->gpu_wait_seconds += a->gpu->stats.t_gpu_wait - gw0;
    }
    for (int k = 0; k < n_p; k++) {
      sample_t *s = &rs[(size_t)k * g];
      float rw[256], adv[256];
      for (int j = 0; j < g; j++) {
        rw[j] = s[j].reward;
        reward_sum += s[j].reward;
        correct += s[j].gate == EVAL_PASSED;
        if (s[j].speedup > 0) speed_sum += s[j].speedup, timed++;
      }
      judged_samples += g;
      if (!grpo_group_advantages(rw, g, a->obj.scale_std, adv)) {
        out->dropped_groups++;
        for (int j = 0; j < g; j++) sample_free(&s[j]);
        prompt_free(&rp[k]);
        continue;
      }
      for (int j = 0; j < g; j++) s[j].adv = adv[j];
      ps[kept] = rp[k];
      memcpy(&ss[(size_t)kept * g], s, sizeof *s * (size_t)g);
      kept++;
    }
    free(rp);
    free(rs);
  }
  r->cursor += tries;
  double tu = dg_now();
  out->groups = kept;
  out->reward_mean = judged_samples ? reward_sum / judged_samples : 0;
  out->correct = judged_samples ? (double)correct / judged_samples : 0;
  out->speedup_mean = timed ? speed_sum / timed : 0;
  out->dropped_share = tries ? (double)out->dropped_groups / tries : 0;
  /* the rows and the update */
  int n_rows = kept * g;
  row_t *rows = dg_calloc((size_t)(n_rows ? n_rows : 1), sizeof *rows);
  int64_t tokens = 0;
  for (int k = 0; k < kept; k++)
    for (int j = 0; j < g; j++) {
      row_make(&rows[k * g + j], &ps[k], &ss[(size_t)k * g + j], r->model.cfg.max_seq_len);
      for (int t = 0; t < rows[k * g + j].len; t++) tokens += rows[k * g + j].mask[t];
    }
  out->tokens = tokens;
  bool ok = true;
  const train_backend *be = &r->be, *rbe = &r->ref_be;
  nn_optim *opt = be->optim(be->ctx);
  opt->lr = a->lr;
  opt->lr_min = a->lr;
  opt->warmup_steps = a->warmup;
  opt->total_steps = INT64_MAX / 2;
  opt->weight_decay = 0;
  opt->grad_clip = a->grad_clip;
  out->lr = nn_optim_lr(opt, r->step);
  if (tokens > 0) {
    int mr = a->micro_rows;
    int n_mb = (n_rows + mr - 1) / mr;
    mbatch *mb = dg_calloc((size_t)n_mb, sizeof *mb);
    float **old = dg_calloc((size_t)n_mb, sizeof *old), **ref = dg_calloc((size_t)n_mb, sizeof *ref);
    double ent = 0;
    int max_b = 1, max_t = 1;
    for (int i = 0; i < n_mb; i++) {
      int lo = i * mr, hi = lo + mr < n_rows ? lo + mr : n_rows;
      mbatch_fill(&mb[i], rows, lo, hi, r->pad);
      if (mb[i].B > max_b) max_b = mb[i].B;
      if (mb[i].T > max_t) max_t = mb[i].T;
    }
    /* room for the largest micro-batch, once (the GPU's was reserved for
     * micro_rows rows of the longest context) */
    if (!r->gpu)
      ok = nn_model_reserve(&r->model, max_b, max_t, st) &&
           (!r->have_ref || nn_model_reserve(&r->ref, max_b, max_t, st));
    for (int i = 0; i < n_mb && ok; i++) {
      size_t n = (size_t)mb[i].B * mb[i].T;
      old[i] = dg_malloc(sizeof(float) * n);
      batch_logps(be, &mb[i], old[i]);
      for (size_t t = 0; t < n; t++) ent -= mb[i].mask[t] ? old[i][t] : 0;
      if (r->have_ref) {
        ref[i] = dg_malloc(sizeof(float) * n);
        batch_logps(rbe, &mb[i], ref[i]);
      }
    }
    out->entropy = ent / (double)tokens; /* the drawn tokens' mean surprise */
    for (int e = 0; e < a->epochs && ok; e++) {
      be->zero_grad(be->ctx);
      double loss = 0, kl = 0, clipped = 0;
      for (int i = 0; i < n_mb; i++) {
        size_t n = (size_t)mb[i].B * mb[i].T;
        float *lp = dg_malloc(sizeof(float) * n), *w = dg_malloc(sizeof(float) * n);
        if (e == 0) memcpy(lp, old[i], sizeof(float) * n); /* the sampling policy itself */
        else batch_logps(be, &mb[i], lp);
        grpo_tokens tk = {mb[i].B, mb[i].T, mb[i].mask, lp, old[i], r->have_ref ? ref[i] : NULL,
                          mb[i].adv, tokens, n_rows};
        grpo_stats gs;
        loss += grpo_token_weights(&a->obj, &tk, w, &gs);
        kl += gs.kl_mean * (double)gs.tokens;
        clipped += gs.clipped_frac * (double)gs.tokens;
        be->forward_weighted(be->ctx, mb[i].in, mb[i].tg, w, 1.0, mb[i].B, mb[i].T);
        be->accumulate(be->ctx);
        free(lp);
        free(w);
      }
      out->grad_norm = be->update(be->ctx, r->step);
      out->loss = loss;
      out->kl = kl / (double)tokens;
      out->clipped = clipped / (double)tokens;
    }
    for (int i = 0; i < n_mb; i++) {
      mbatch_free(&mb[i]);
      free(old[i]);
      free(ref[i]);
    }
    free(mb);
    free(old);
    free(ref);
    /* a GPU fault surfaces here; the next rollouts are the new policy's */
    if (ok && be->check) ok = be->check(be->ctx, st) && (!r->have_ref || !rbe->check || rbe->check(rbe->ctx, st));
    if (ok) ok = be->pull(be->ctx, st);
  }
  for (int i = 0; i < n_rows; i++) row_free(&rows[i]);
  free(rows);
  for (int k = 0; k < kept; k++) prompt_free(&ps[k]);
  for (int i = 0; i < want * g; i++) sample_free(&ss[i]);
  free(ps);
  free(ss);
  out->update_seconds = dg_now() - tu;
  out->seconds = dg_now() - t0;
  return ok;
}

bool grpo_run(grpo_run_args *a, grpo_result *res, dg_status *st) {
  dg_status_ok(st);
  memset(res, 0, sizeof *res);
  if (!a->out_dir || !a->splits) return dg_fail(st, DG_ERR_USAGE, "grpo: an out directory and the splits are needed");
  /* no GPU: refused before anything is written */
  if (!train_device_available(a->device, st)) return false;
  run_t r;
  memset(&r, 0, sizeof r);
  tok_tokenizer *tok = NULL;
  bool ok = open_run(a, &r, st);
  if (ok) {
    if (a->resume) dg_remove_stale_tmp(a->out_dir);
    tok = tok_load(a->tokenizer_path, st);
    ok = tok != NULL;
  }
  if (ok) {
    r.pad = tok_special(tok, TOK_PAD);
    r.n_train = data_splits_size(a->splits, DATA_SPLIT_TRAIN);
    r.train_idx = dg_malloc(sizeof(int64_t) * (size_t)(r.n_train ? r.n_train : 1));
    int64_t k = 0;
    for (int64_t i = data_splits_next(a->splits, DATA_SPLIT_TRAIN, 0); i >= 0 && k < r.n_train;
         i = data_splits_next(a->splits, DATA_SPLIT_TRAIN, i + 1))
      r.train_idx[k++] = i;
    r.n_train = k;
    if (r.n_train == 0) ok = dg_fail(st, DG_ERR_INVALID, "grpo: the splits have no training workload");
    if (r.pad < 0) ok = dg_fail(st, DG_ERR_INVALID, "grpo: the tokenizer has no %s token", TOK_PAD);
  }
  if (ok && a->device == TRAIN_DEVICE_CUDA) {
    /* micro-batches of micro_rows rows, each at most the context long */
    int B = a->micro_rows, T = r.model.cfg.max_seq_len;
    ok = train_cuda_init(&r.gpu, &r.model, B, T, st) &&
         (!r.have_ref || train_cuda_init_frozen(&r.gpu_ref, &r.ref, B, T, st));
    if (ok) {
      r.be = train_backend_cuda(r.gpu);
      if (r.have_ref) r.ref_be = train_backend_cuda(r.gpu_ref);
    }
  } else if (ok) {
    r.be = train_backend_cpu(&r.model);
    if (r.have_ref) r.ref_be = train_backend_cpu(&r.ref);
  }
  res->first_step = r.step;
  while (ok && r.step < a->steps) {
    grpo_step_stats s;
    ok = one_step(a, &r, tok, &s, st);
    if (!ok) break;
    r.step++;
    ok = save_step(a, &r, st) && log_step(a, &s, st);
    res->steps = dg_realloc(res->steps, sizeof *res->steps * (size_t)(res->n + 1));
    res->steps[res->n++] = s;
    if (a->progress) {
      fprintf(a->progress,
              "step %lld/%lld | reward %.3f | correct %.1f%% | groups %d (%d dropped) | loss %.4f | kl %.4f | "
              "%lld tokens | %.1f s (write %.1f, judge %.1f, update %.1f)\n",
              (long long)r.step, (long long)a->steps, s.reward_mean, 100 * s.correct, s.groups,
              s.dropped_groups, s.loss, s.kl, (long long)s.tokens, s.seconds, s.write_seconds,
              s.judge_seconds, s.update_seconds);
      fflush(a->progress);
    }
  }
  res->last_step = r.step;
  train_cuda_free(r.gpu);
  train_cuda_free(r.gpu_ref);
  tok_free(tok);
  free(r.train_idx);
  if (r.have_model) nn_model_free(&r.model);
  if (r.have_ref) nn_model_free(&r.ref);
  free(a->tokenizer_path);
  a->tokenizer_path = NULL;
  return ok;
}

void grpo_result_free(grpo_result *r) {
  free(r->steps);
  memset(r, 0, sizeof *r);
}
