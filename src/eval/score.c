/* score.c: the one road from a TSEL graph to a measured kernel (eval.h).
 *
 * Each gate is a function of the previous gate's product; the first that
 * fails stops the walk and names itself and the reason. Nothing here
 * trusts the text: parse and check report located errors, the lowered
 * trace is replayed in the exact mode (a decision that does not fit is
 * refused, never repaired), the build goes through lowering and
 * VerifyGPUCode before any code is emitted, and the numbers are checked
 * against the float64 reference of the unscheduled kernel with poisoned
 * outputs (NaN never passes).
 */
#include <errno.h>
#include <jansson.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dragon/codegen.h"
#include "dragon/eval.h"
#include "dragon/ir.h"
#include "dragon/rt.h"
#include "dragon/rt_cuda.h"
#include "dragon/search.h"
#include "dragon/tsel.h"

const char *eval_gate_name(eval_gate g) {
  static const char *const names[] = {
#define X(e, name) name,
      EVAL_GATE_LIST(X)
#undef X
  };
  _Static_assert(DG_ARRAY_LEN(names) == EVAL_GATE_COUNT, "one name per gate");
  if (g == EVAL_PASSED) return "passed";
  DG_ASSERT(g >= 0 && g < EVAL_GATE_COUNT);
  return names[g];
}

bool eval_gate_from_name(const char *name, eval_gate *out) {
  for (int g = 0; g <= EVAL_PASSED; g++)
    if (strcmp(name, eval_gate_name((eval_gate)g)) == 0) {
      *out = (eval_gate)g;
      return true;
    }
  return false;
}

static bool fail_at(eval_score *out, eval_gate g, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static bool fail_at(eval_score *out, eval_gate g, const char *fmt, ...) {
  out->failed = g;
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(out->reason, sizeof out->reason, fmt, ap);
  va_end(ap);
  return false;
}

/* BUILD: the one build path (rt_program_build) for CUDA: verify,
 * lowering, VerifyGPUCode, the source, and NVRTC if asked. */
static bool build(const eval_score_opts *o, const dg_func *f, eval_score *out) {
  rt_build_opts bo;
  memset(&bo, 0, sizeof bo);
  bo.target = RT_BUILD_CUDA;
  bo.arch = o->gpu && o->gpu->arch[0] ? o->gpu->arch : NULL;
  bo.compile = o->compile;
  bo.name = "graph";
  rt_build b;
  dg_status st;
  bool ok = rt_program_build(f, &bo, &b, &st);
  if (!ok) fail_at(out, EVAL_GATE_BUILD, "%s: %s", rt_build_stage_name(b.stage), st.msg);
  rt_build_free(&b);
  return ok;
}

/* NUMERIC on the CPU: the C emulation of the GPU program, one check per
 * seed against the float64 reference. */
static bool numeric_cpu(const eval_score_opts *o, const dg_func *f, eval_score *out) {
  static const uint64_t default_seeds[] = {1, 2};
  const uint64_t *seeds = o->n_seeds > 0 ? o->seeds : default_seeds;
  int n = o->n_seeds > 0 ? o->n_seeds : (int)DG_ARRAY_LEN(default_seeds);
  for (int i = 0; i < n; i++) {
    rt_check chk;
    dg_status st;
    if (!rt_program_check_c(o->reference ? o->reference : o->kernel, f, seeds[i], &chk, &st))
      return fail_at(out, EVAL_GATE_NUMERIC, "seed %llu: %s", (unsigned long long)seeds[i],
                     st.msg);
    if (!chk.pass)
      return fail_at(out, EVAL_GATE_NUMERIC, "seed %llu: wrong numbers: %s",
                     (unsigned long long)seeds[i], chk.first_bad);
  }
  return true;
}

/* The gate of a measurement's failure: a result the worker ran and found
 * wrong is the numeric gate's; one that failed on the GPU otherwise
 * (setup, load, launch, fault, timeout, crash) the measurement's; anything
 * that failed before the GPU (lowering, NVRTC) the build's. */
static eval_gate gpu_failure_gate(const char *error) {
  static const char *const gpu_fails[] = {"setup error", "load error", "launch error",
                                          "illegal address", "device error", "timeout",
                                          "worker crashed", "GPU"};
  const char *wrong = rt_fail_name(RT_FAIL_WRONG);
  if (strncmp(error, wrong, strlen(wrong)) == 0) return EVAL_GATE_NUMERIC;
  for (size_t i = 0; i < DG_ARRAY_LEN(gpu_fails); i++)
    if (strncmp(error, gpu_fails[i], strlen(gpu_fails[i])) == 0) return EVAL_GATE_MEASURE;
  return EVAL_GATE_BUILD;
}

/* ---- the roofline ----------------------------------------------------------- */

/* Specification ceilings (DRAM bandwidth; dense f16 tensor-core FLOP/s over
 * 2 for multiply-adds), by the device name's words, most specific first. */
static const struct {
  const char *name, *also;
  double bytes_per_s, flops;
} cards[] = {
    {"H200", NULL, 4.8e12, 989.4e12},
    {"H100", "PCIe", 2.0e12, 756.0e12},
    {"H100", NULL, 3.35e12, 989.4e12},
    {"A100", NULL, 2.039e12, 312.0e12},
};

bool eval_roofline_of(const char *device, eval_roofline *out) {
  memset(out, 0, sizeof *out);
  if (!device) return false;
  for (size_t i = 0; i < DG_ARRAY_LEN(cards); i++)
    if (strstr(device, cards[i].name) && (!cards[i].also || strstr(device, cards[i].also))) {
      *out = (eval_roofline){cards[i].bytes_per_s, cards[i].flops / 2};
      return true;
    }
  return false;
}

double eval_roofline_secs(const dg_func *f, const eval_roofline *r) {
  if (!r || r->bytes_per_s <= 0 || r->fma_per_s <= 0) return 0;
  double bytes = 0;
  for (int i = 0; i < f->n_params; i++)
    if (codegen_param_written(f, i))
      bytes += (double)ir_buffer_numel(f->params[i]) * dg_dtype_bytes(f->params[i]->dtype);
  double a = bytes / r->bytes_per_s, b = ir_func_iterations(f, false) / r->fma_per_s;
  return a > b ? a : b;
}

/* Measured candidates of kernels[i] (c[i], r[i]) read against the card's
 * roofline: those timed below EVAL_ROOFLINE_SLACK of it are measured
 * again, and fail (a MEASURE failure) if they still are; else the new
 * time stands. */
static void roofline_check(const eval_score_opts *o, const dg_func *const *kernels, const search_cand *c,
                           search_measure_result *r, int n) {
  eval_roofline card;
  const eval_roofline *rl = o->roofline;
  if (!rl && eval_roofline_of(o->gpu->device, &card)) rl = &card;
  if (!rl || n <= 0) return;
  double *bound = dg_calloc((size_t)n, sizeof *bound);
  int *again = dg_malloc(sizeof(int) * (size_t)n), k = 0;
  for (int i = 0; i < n; i++) {
    if (r[i].n_secs == 0) continue;
    bound[i] = eval_roofline_secs(kernels[i], rl);
    if (r[i].secs[0] < EVAL_ROOFLINE_SLACK * bound[i]) again[k++] = i;
  }
  if (k > 0) {
    const dg_func **kk = dg_malloc(sizeof *kk * (size_t)k);
    search_cand *cc = dg_malloc(sizeof *cc * (size_t)k);
    search_measure_result *rr = dg_calloc((size_t)k, sizeof *rr);
    for (int j = 0; j < k; j++) kk[j] = kernels[again[j]], cc[j] = c[again[j]];
    search_measure_cuda_many(o->gpu, kk, cc, k, rr, NULL);
    for (int j = 0; j < k; j++) {
      search_measure_result *x = &r[again[j]];
      double first = x->secs[0], b = bound[again[j]];
      if (rr[j].n_secs > 0 && rr[j].secs[0] >= EVAL_ROOFLINE_SLACK * b) {
        *x = rr[j];
        continue;
      }
      x->n_secs = 0;
      snprintf(x->error, sizeof x->error,
               "GPU measurement refused: %.4g us, then %.4g us, under half the card's roofline (%.4g us: "
               "its outputs at the memory's bandwidth, its iterations at the peak multiply-add rate)",
               first * 1e6, rr[j].n_secs ? rr[j].secs[0] * 1e6 : 0.0, b * 1e6);
    }
    free(kk);
    free(cc);
    free(rr);
  }
  free(bound);
  free(again);
}

/* NUMERIC and MEASURE on the GPU for candidates of one kernel: checked on
 * their first run, then timed. */
static void on_gpu_many(const eval_score_opts *o, const dg_func *kernel, eval_score *const *outs,
                        int n) {
  search_cand *c = dg_calloc((size_t)n, sizeof *c);
  search_measure_result *r = dg_calloc((size_t)n, sizeof *r);
  for (int i = 0; i < n; i++)
    c[i] = (search_cand){outs[i]->trace, outs[i]->scheduled, outs[i]->kernel_hash, 0, false};
  search_measure_cuda(o->gpu, kernel, c, n, r, NULL);
  const dg_func **kernels = dg_malloc(sizeof *kernels * (size_t)(n ? n : 1));
  for (int i = 0; i < n; i++) kernels[i] = kernel;
  roofline_check(o, kernels, c, r, n);
  free(kernels);
  for (int i = 0; i < n; i++) {
    if (r[i].n_secs == 0) fail_at(outs[i], gpu_failure_gate(r[i].error), "%s", r[i].error);
    else outs[i]->secs = r[i].secs[0];
  }
  free(c);
  free(r);
}

static bool on_gpu(const eval_score_opts *o, eval_score *out) {
  on_gpu_many(o, o->kernel, &out, 1);
  return out->failed == EVAL_PASSED;
}

bool eval_score_tsel(const char *text, const char *name, const eval_score_opts *o,
                     eval_score *out) {
  memset(out, 0, sizeof *out);
  out->failed = EVAL_PASSED;
  double t0 = dg_now();
  dg_status st;
  bool ok = false;
  tsel_graph *g = tsel_parse(text ? text : "", name, &st);
  if (!g) {
    fail_at(out, EVAL_GATE_PARSE, "%s", st.msg);
    goto done;
  }
  if (o->last < EVAL_GATE_HEADER) goto passed;
  if (o->spec && strcmp(tsel_graph_kernel(g), o->spec) != 0) {
    fail_at(out, EVAL_GATE_HEADER, "%s: the graph is for '%.200s', not '%.200s'",
            name ? name : "graph", tsel_graph_kernel(g), o->spec);
    goto done;
  }
  if (o->last < EVAL_GATE_CHECK) goto passed;
  if (!tsel_check(g, o->kernel, TSEL_TARGET_CUDA, &st)) {
    fail_at(out, EVAL_GATE_CHECK, "%s", st.msg);
    goto done;
  }
  if (o->last < EVAL_GATE_LOWER) goto passed;
  out->trace = tsel_lower(g, &st);
  if (!out->trace) {
    fail_at(out, EVAL_GATE_LOWER, "%s", st.msg);
    goto done;
  }
  if (o->expect_trace) {
    char *json = sched_trace_to_json(out->trace);
    sched_trace *want = sched_trace_from_json(o->expect_trace, &st);
    char *want_json = want ? sched_trace_to_json(want) : NULL;
    bool same = want_json && strcmp(json, want_json) == 0;
    free(json);
    free(want_json);
    sched_trace_free(want);
    if (!same) {
      fail_at(out, EVAL_GATE_LOWER, "the graph lowers to a trace other than the expected one");
      goto done;
    }
  }
  if (o->last < EVAL_GATE_REPLAY) goto passed;
  {
    sched *s = sched_new(o->kernel, 0);
    if (!sched_replay(s, out->trace, false, false, &st)) {
      fail_at(out, EVAL_GATE_REPLAY, "%s", st.msg);
      sched_free(s);
      goto done;
    }
    out->scheduled = ir_func_clone(sched_func(s));
    out->kernel_hash = ir_func_hash(out->scheduled);
    sched_free(s);
  }
  if (o->last < EVAL_GATE_BUILD) goto passed;
  if (!build(o, out->scheduled, out)) goto done;
  if (o->last < EVAL_GATE_NUMERIC) goto passed;
  if (o->gpu) {
    if (!on_gpu(o, out)) goto done;
  } else if (!numeric_cpu(o, out->scheduled, out)) {
    goto done;
  }
passed:
  ok = true;
done:
  tsel_graph_free(g);
  out->t_total = dg_now() - t0;
  return ok;
}

/* The bytes and the limit of a build refused for shared memory (the words
 * of lower/verify.c: "N bytes of [dynamic ]shared memory (limit M)"). */
static bool shared_excess(const char *reason, int64_t *bytes, int64_t *limit) {
  static const char *const words[] = {" bytes of shared memory (limit ",
                                      " bytes of dynamic shared memory (limit "};
  for (int w = 0; w < 2; w++) {
    const char *at = strstr(reason, words[w]);
    if (!at) continue;
    const char *d = at;
    while (d > reason && d[-1] >= '0' && d[-1] <= '9') d--;
    long long b = 0, l = 0;
    if (d == at || sscanf(d, "%lld", &b) != 1 || sscanf(at + strlen(words[w]), "%lld", &l) != 1) return false;
    if (b <= l || l <= 0) return false;
    *bytes = b;
    *limit = l;
    return true;
  }
  return false;
}

/* The threads and bounds of a block refused for its threads (the words of
 * search_thread_extents_ok: "runs on N threads, outside its bounds [L, H]"). */
static bool thread_excess(const char *reason, int64_t *n, int64_t *lo, int64_t *hi) {
  const char *at = strstr(reason, " runs on ");
  long long a = 0, b = 0, c = 0;
  if (!at || sscanf(at, " runs on %lld threads, outside its bounds [%lld, %lld]", &a, &b, &c) != 3) return false;
  if (a < 1 || b < 1 || c < b) return false;
  *n = a;
  *lo = b;
  *hi = c;
  return true;
}

/* ---- the guard's refusals written down ----------------------------------- */

struct eval_guard_log {
  FILE *f;
  char *path;
  pthread_mutex_t mu;
  bool failed; /* a write failed: said at close */
};

eval_guard_log *eval_guard_log_open(const char *path, dg_status *st) {
  FILE *f = fopen(path, "a");
  if (!f) {
    dg_fail(st, DG_ERR_IO, "%s: cannot open the guard log: %s", path, strerror(errno));
    return NULL;
  }
  eval_guard_log *log = dg_calloc(1, sizeof *log);
  log->f = f;
  log->path = dg_strdup(path);
  pthread_mutex_init(&log->mu, NULL);
  return log;
}

bool eval_guard_log_close(eval_guard_log *log, dg_status *st) {
  if (!log) return true;
  bool ok = !log->failed && fflush(log->f) == 0;
  if (fclose(log->f) != 0) ok = false;
  if (!ok) dg_fail(st, DG_ERR_IO, "%s: writing the guard log failed", log->path);
  pthread_mutex_destroy(&log->mu);
  free(log->path);
  free(log);
  return ok;
}

/* The last line of a graph's text (the edit just written), its length. */
static const char *last_line(const char *text, size_t len, int *n) {
  while (len > 0 && text[len - 1] == '\n') len--;
  size_t b = len;
  while (b > 0 && text[b - 1] != '\n') b--;
  *n = (int)(len - b);
  return text + b;
}

static void log_refusal(eval_guard_log *log, const char *spec, const char *text, size_t len, const char *gate,
                        const char *reason, int blame) {
  int n = 0;
  const char *line = last_line(text, len, &n);
  int edits = 0;
  for (size_t i = 0; i + 1 < len; i++)
    if (text[i] == '\n' && text[i + 1] == 't' && i + 2 < len && text[i + 2] >= '0' && text[i + 2] <= '9') edits++;
  json_t *o = json_object();
  json_object_set_new(o, "spec", json_string(spec ? spec : ""));
  json_object_set_new(o, "edits", json_integer(edits));
  json_object_set_new(o, "line", json_stringn(line, (size_t)n));
  json_object_set_new(o, "gate", json_string(gate));
  json_object_set_new(o, "reason", json_string(reason));
  json_object_set_new(o, "blame", json_integer(blame));
  json_object_set_new(o, "graph", json_stringn(text, len));
  char *s = json_dumps(o, JSON_COMPACT);
  json_decref(o);
  /* the whole line, under the lock, flushed: a reader (or a killed run)
   * sees whole lines */
  pthread_mutex_lock(&log->mu);
  if (!s) {
    log->failed = true; /* out of memory */
  } else {
    size_t k = strlen(s);
    s[k] = '\n';
    if (fwrite(s, 1, k + 1, log->f) != k + 1 || fflush(log->f) != 0) log->failed = true;
  }
  pthread_mutex_unlock(&log->mu);
  free(s);
}

bool eval_guard_line(void *ctx, const char *text, size_t len, bool postprocessed, int *back_to,
                     tsel_tile_narrowing *narrow) {
  const eval_guard *g = ctx;
  eval_score_opts o;
  memset(&o, 0, sizeof o);
  o.kernel = g->kernel;
  o.spec = g->spec;
  o.last = postprocessed ? EVAL_GATE_BUILD : EVAL_GATE_REPLAY;
  eval_score sc;
  bool ok = eval_score_tsel(text, "graph", &o, &sc);
  /* The threads of a block with bounds, as soon as they are bound (the
   * build's VerifyGPUCode would refuse them at the postproc line): the
   * blame goes to the edit whose factors set them. */
  dg_status st;
  bool threads = sc.scheduled && !search_thread_extents_ok(sc.scheduled, NULL, &st);
  char thread_msg[sizeof st.msg];
  snprintf(thread_msg, sizeof thread_msg, "%s", threads ? st.msg : sc.reason);
  /* A build refused at the postproc line (VerifyGPUCode, which the
   * postprocessors run while the graph is lowered, or the build gate:
   * shared memory, threads, vector widths past the device's limits) is
   * the factors': the blame goes to the latest edit that wrote some. */
  bool build = !ok && postprocessed &&
               (sc.failed == EVAL_GATE_BUILD ||
                (sc.failed == EVAL_GATE_LOWER &&
                 strstr(sc.reason, search_postproc_name(SEARCH_POSTPROC_VERIFY_GPU_CODE))));
  /* a build refused for a block's threads (one the postprocessors made,
   * as the init block of a decomposed reduction) is the thread tile's too */
  bool build_threads = build && strstr(sc.reason, "threads, outside its bounds");
  /* a build refused for shared memory: the widest tile (what the staged
   * regions grow with) that can keep its threads, capped to shrink them by
   * the bytes over the limit (tsel_shared_blame, tsel_tile_narrowing.cap) */
  int64_t bytes = 0, limit = 0;
  bool shared = build && !build_threads && shared_excess(sc.reason, &bytes, &limit);
  /* a copy annotated for a cooperative fetch, then inlined: the inline's
   * (the guard took back only the postproc line, 305 times on the 201 test
   * tasks, and the model wrote the inline again) */
  if (!ok && postprocessed && back_to && sc.failed == EVAL_GATE_LOWER && strstr(sc.reason, "an annotated copy block is gone")) {
    tsel_graph *gr = tsel_parse(text, NULL, &st);
    int n = gr ? tsel_copy_gone_blame(gr) : 0;
    if (n > 0) *back_to = n;
    tsel_graph_free(gr);
  }
  if (threads || build) {
    ok = false;
    tsel_graph *gr = tsel_parse(text, NULL, &st);
    int64_t cap = 0;
    int widest = shared && gr ? tsel_shared_blame(gr, bytes, limit, &cap) : 0;
    if (gr && back_to && widest) {
      *back_to = widest;
      if (narrow) narrow->cap = cap;
    } else if (gr && back_to) {
      /* threads out of bounds: the latest thread tile whose thread factor
       * can be written again within the range that brings them in (the
       * block's other thread factors kept), with that range; else the
       * latest edit that chose the threads */
      int64_t n = 0, lo = 0, hi = 0;
      tsel_tile_narrowing tn;
      int tile = (threads || build_threads) && thread_excess(thread_msg, &n, &lo, &hi)
                     ? tsel_thread_blame(gr, n, lo, hi, &tn)
                     : 0;
      if (tile > 0) {
        *back_to = tile;
        if (narrow) narrow->factor = tn.factor, narrow->lo = tn.lo, narrow->hi = tn.hi;
      } else {
        *back_to = threads || build_threads ? tsel_thread_decision(gr) : tsel_last_decision(gr);
      }
    }
    tsel_graph_free(gr);
  }
  if (!ok && g->log)
    log_refusal(g->log, g->spec, text, len, threads ? eval_gate_name(EVAL_GATE_BUILD) : eval_gate_name(sc.failed),
                thread_msg, back_to ? *back_to : 0);
  eval_score_free(&sc);
  return ok;
}

void eval_score_free(eval_score *s) {
  sched_trace_free(s->trace);
  ir_func_free(s->scheduled);
  s->trace = NULL;
  s->scheduled = NULL;
}

/* ---- many graphs at once ---------------------------------------------------- */

typedef struct {
  const eval_item *items;
  const eval_score_opts *o;
  eval_score *out;
  bool gpu_after; /* the numbers come from the GPU queue afterwards */
} batch_ctx;

static eval_score_opts item_opts(const batch_ctx *b, int i) {
  eval_score_opts o = *b->o;
  o.kernel = b->items[i].kernel;
  o.spec = b->items[i].spec;
  o.expect_trace = b->items[i].expect_trace;
  if (b->gpu_after) {
    /* up to the build here; the measurement compiles on its own threads */
    o.last = EVAL_GATE_BUILD;
    o.compile = false;
    o.gpu = NULL;
  }
  return o;
}

static void batch_task(void *p, int i) {
  batch_ctx *b = p;
  eval_score_opts o = item_opts(b, i);
  eval_score_tsel(b->items[i].text, b->items[i].name, &o, &b->out[i]);
}

void eval_score_batch(const eval_item *items, int n, const eval_score_opts *o, int threads,
                      eval_score *out) {
  batch_ctx b = {items, o, out, o->gpu && o->last >= EVAL_GATE_NUMERIC};
  rt_tasks *t = rt_tasks_start(n, threads, batch_task, &b);
  while (rt_tasks_next(t, true) >= 0) {
  }
  rt_tasks_free(t);
  if (!b.gpu_after) return;
  /* one round on the GPU for every output that got this far: the data of
   * their workloads made at once, every build on every core while the GPU
   * measures those ready (each checked on its first run, then timed). An
   * output whose scheduled kernel is one already in the round (its kernel
   * hash: a prompt's GRPO samples often agree, an output its label) takes
   * that one's measurement: built and run once, and equal kernels get
   * equal times, where noise would rank them */
  const dg_func **kernels = dg_malloc(sizeof *kernels * (size_t)(n ? n : 1));
  search_cand *c = dg_calloc((size_t)(n ? n : 1), sizeof *c);
  search_measure_result *r = dg_calloc((size_t)(n ? n : 1), sizeof *r);
  int *of = dg_malloc(sizeof(int) * (size_t)(n ? n : 1)); /* output i's candidate, -1 none */
  int k = 0;
  for (int i = 0; i < n; i++) {
    of[i] = -1;
    if (out[i].failed != EVAL_PASSED) continue;
    for (int j = 0; j < i && of[i] < 0; j++)
      if (of[j] >= 0 && out[i].kernel_hash != 0 && out[j].kernel_hash == out[i].kernel_hash) of[i] = of[j];
    if (of[i] >= 0) continue;
    of[i] = k;
    kernels[k] = items[i].kernel;
    c[k++] = (search_cand){out[i].trace, out[i].scheduled, out[i].kernel_hash, 0, false};
  }
  double t0 = dg_now();
  search_measure_cuda_many(o->gpu, kernels, c, k, r, NULL);
  roofline_check(o, kernels, c, r, k);
  int outputs = 0;
  for (int i = 0; i < n; i++) outputs += of[i] >= 0;
  double each = outputs ? (dg_now() - t0) / outputs : 0;
  for (int i = 0; i < n; i++) {
    if (of[i] < 0) continue;
    const search_measure_result *m = &r[of[i]];
    if (m->n_secs == 0) fail_at(&out[i], gpu_failure_gate(m->error), "%s", m->error);
    else out[i].secs = m->secs[0];
    out[i].t_total += each;
  }
  free(of);
  free(kernels);
  free(c);
  free(r);
}

static int cmp_secs(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

void eval_score_measure_again(const eval_item *items, eval_score *out, int n_out, const int *idx, int k,
                              const eval_score_opts *o, int times) {
  if (!o->gpu || k <= 0 || times <= 0) return;
  enum { MAX_TIMES = 8 };
  if (times > MAX_TIMES) times = MAX_TIMES;
  int n = 0;
  const dg_func **kernels = dg_malloc(sizeof *kernels * (size_t)k * (size_t)times);
  search_cand *c = dg_calloc((size_t)k * (size_t)times, sizeof *c);
  search_measure_result *r = dg_calloc((size_t)k * (size_t)times, sizeof *r);
  int *of = dg_malloc(sizeof(int) * (size_t)k * (size_t)times); /* candidate -> output */
  for (int j = 0; j < k; j++) {
    eval_score *x = &out[idx[j]];
    if (x->failed != EVAL_PASSED || x->secs <= 0) continue;
    for (int t = 0; t < times; t++) {
      kernels[n] = items[idx[j]].kernel;
      of[n] = idx[j];
      c[n++] = (search_cand){x->trace, x->scheduled, x->kernel_hash, 0, false};
    }
  }
  if (n > 0) {
    search_measure_cuda_many(o->gpu, kernels, c, n, r, NULL);
    roofline_check(o, kernels, c, r, n);
  }
  for (int a = 0; a < n;) {
    int i = of[a], b = a;
    double secs[MAX_TIMES + 1];
    int m = 0;
    secs[m++] = out[i].secs;
    for (; b < n && of[b] == i; b++) {
      if (out[i].failed != EVAL_PASSED) continue;
      if (r[b].n_secs == 0) fail_at(&out[i], gpu_failure_gate(r[b].error), "measured again: %s", r[b].error);
      else secs[m++] = r[b].secs[0];
    }
    if (out[i].failed == EVAL_PASSED) {
      qsort(secs, (size_t)m, sizeof *secs, cmp_secs);
      out[i].secs = m % 2 ? secs[m / 2] : 0.5 * (secs[m / 2 - 1] + secs[m / 2]);
    } else {
      out[i].secs = 0;
    }
    /* the outputs that shared its first measurement share this outcome */
    for (int j = 0; j < n_out; j++) {
      eval_score *x = &out[j];
      if (j == i || x->kernel_hash == 0 || x->kernel_hash != out[i].kernel_hash || x->failed != EVAL_PASSED) continue;
      x->secs = out[i].secs;
      if (out[i].failed != EVAL_PASSED) {
        x->failed = out[i].failed;
        memcpy(x->reason, out[i].reason, sizeof x->reason); /* x is not out[i] */
      }
    }
    a = b;
  }
  free(kernels);
  free(c);
  free(r);
  free(of);
}
