/* test_gpu_measure.c: the tuner's GPU measurement (search_measure_cuda)
 * end to end: candidates lowered, emitted and compiled on threads, each
 * handed to the worker as soon as it is compiled, results matched back to
 * their candidates.
 *
 * search_cuda_measure_pipeline runs anywhere NVRTC is: copies of a
 * hand-written schedule and a candidate that cannot lower. Without a GPU
 * (allow_no_gpu) every compiled candidate comes back with the worker's
 * reason, which proves the pipeline delivers each job and matches each
 * reply; with one, each passes with a time. gpu_measure_cuda_rounds (GPU
 * only): two rounds of one workload (the data file and the worker's device
 * buffers reused), then another workload, every candidate checked and
 * timed, the stats adding up. search_cuda_measure_prepare_keeps_files
 * (where NVRTC is): a batch's data files made at once, each once, kept for
 * the measurement, removed at the end. search_cuda_measure_many_workloads
 * (where NVRTC is): candidates of two workloads in one round, each matched
 * back to its own index and its own workload's data.
 */
#include <stdio.h>
#include <unistd.h>

#include "dragon/rt_cuda.h"
#include "dragon/sched.h"
#include "dragon/search.h"
#include "dragon/wl.h"
#include "sched_support.h"
#include "test.h"

/* n candidates: copies of schedules/NAME.json replayed on spec, then, with
 * unlowerable, the unscheduled kernel (no loop bound to the GPU). *f_out
 * is the workload. NULL after a failed CHECK. */
static search_cand *cands_of(const char *name, const char *spec, int n, bool unlowerable,
                             dg_func **f_out) {
  char path[64];
  snprintf(path, sizeof path, "schedules/%s.json", name);
  dg_status st;
  char *text = dg_read_file(path, NULL, &st);
  sched_trace *t = text ? sched_trace_from_json(text, &st) : NULL;
  free(text);
  dg_func *f = t ? wl_build(spec, &st) : NULL;
  sched *s = f ? sched_new(f, 0) : NULL;
  bool ok = s && sched_replay(s, t, false, false, &st);
  if (!ok) dg_test_fail(__FILE__, __LINE__, "%s on %s: %s", path, spec, st.msg);
  search_cand *c = NULL;
  if (ok) {
    int total = n + (unlowerable ? 1 : 0);
    c = dg_calloc((size_t)total, sizeof *c);
    for (int i = 0; i < n; i++) {
      c[i].trace = sched_trace_clone(t);
      c[i].func = ir_func_clone(sched_func(s));
      c[i].hash = ir_func_hash(c[i].func);
    }
    if (unlowerable) {
      c[n].trace = sched_trace_clone(t);
      c[n].func = ir_func_clone(f);
      c[n].hash = ir_func_hash(c[n].func);
    }
    *f_out = f;
  } else {
    ir_func_free(f);
  }
  sched_free(s);
  if (t) sched_trace_free(t);
  return c;
}

/* Measures the candidates; checks each result: the unlowerable one (last,
 * with unlowerable) names the lowering; the others pass with `reps` times
 * (on_gpu) or carry the worker's reason (no GPU). */
static void measure_and_check(search_cuda_measure *m, const dg_func *f, const search_cand *c,
                              int n, bool unlowerable, bool on_gpu) {
  int total = n + (unlowerable ? 1 : 0);
  search_measure_result *out = dg_calloc((size_t)total, sizeof *out);
  search_measure_cuda(m, f, c, total, out, NULL);
  for (int i = 0; i < n; i++) {
    if (on_gpu) {
      CHECK_MSG(out[i].n_secs == m->repeats, "candidate %d: %s", i, out[i].error);
      for (int k = 0; k < out[i].n_secs; k++) CHECK(out[i].secs[k] > 0 && out[i].secs[k] < 1);
    } else {
      CHECK_MSG(out[i].n_secs == 0 && strstr(out[i].error, "setup error: ") &&
                    strstr(out[i].error, "cuda"),
                "candidate %d: %s", i, out[i].error);
    }
  }
  if (unlowerable)
    CHECK_MSG(out[n].n_secs == 0 && strstr(out[n].error, "lower: ") &&
                  strstr(out[n].error, "blockIdx"),
              "%s", out[n].error);
  if (on_gpu) printf("  %d candidates: %.3f us (first)\n", n, n ? out[0].secs[0] * 1e6 : 0);
  free(out);
}

static void print_stats(const search_cuda_measure *m) {
  printf("  stats: %lld candidates, %lld lowered, %lld compiled, %lld ran, %lld passed; "
         "lower %.2f, nvrtc %.2f thread-s; waits: gpu %.2f, nvrtc %.2f; worker %.2f, wall %.2f s\n",
         (long long)m->stats.candidates, (long long)m->stats.lowered,
         (long long)m->stats.compiled, (long long)m->stats.ran, (long long)m->stats.passed,
         m->stats.t_lower, m->stats.t_compile, m->stats.t_gpu_wait, m->stats.t_compile_wait,
         m->stats.t_worker, m->stats.t_wall);
}

/* A measurement on two threads that starts without a GPU too (its
 * candidates then fail with the worker's reason). */
static bool measure_open(search_cuda_measure *m, dg_status *st) {
  *m = (search_cuda_measure){3, 10, 1, NULL};
  m->threads = 2;
  m->allow_no_gpu = true;
  return search_cuda_measure_init(m, st);
}

DG_TEST(search_cuda_measure_pipeline) {
  dg_status st;
  if (!rt_nvrtc_available(&st)) {
    SKIP("NVRTC is not here: %s", st.msg);
  }
  bool on_gpu = rt_cuda_available(&st);
  search_cuda_measure m;
  CHECK_MSG(measure_open(&m, &st), "%s", st.msg);
  dg_func *f = NULL;
  enum { N = 3 };
  search_cand *c = cands_of("GMM", "GMM/0", N, true, &f);
  CHECK(c != NULL);
  measure_and_check(&m, f, c, N, true, on_gpu);
  print_stats(&m);
  CHECK_EQ(m.stats.candidates, N + 1);
  CHECK_EQ(m.stats.lowered, N);
  CHECK_EQ(m.stats.compiled, N);
  CHECK_EQ(m.stats.ran, N);
  CHECK_EQ(m.stats.passed, on_gpu ? N : 0);
  CHECK(m.stats.t_lower > 0 && m.stats.t_compile > 0 && m.stats.t_wall > 0);
  CHECK(m.stats.t_gpu_wait + m.stats.t_compile_wait <= m.stats.t_wall);
  search_cuda_measure_free(&m);
  CHECK(m.state == NULL);
  search_cands_free(c, N + 1);
  ir_func_free(f);

  /* without allow_no_gpu, init says where there is no GPU */
  if (!on_gpu) {
    search_cuda_measure m2 = {3, 10, 1, NULL};
    CHECK(!search_cuda_measure_init(&m2, &st));
    CHECK_ERR(st, "cuda");
    CHECK(m2.state == NULL);
  }
}

/* A batch's workloads are prepared at once, each once: measuring one of
 * them then makes no file of its own, and free removes them all. */
DG_TEST(search_cuda_measure_prepare_keeps_files) {
  dg_status st;
  if (!rt_nvrtc_available(&st)) {
    SKIP("NVRTC is not here: %s", st.msg);
  }
  bool on_gpu = rt_cuda_available(&st);
  search_cuda_measure m;
  CHECK_MSG(measure_open(&m, &st), "%s", st.msg);
  int before = ts_tune_data_files();
  dg_func *gmm = NULL, *nrm = wl_build("NRM/0", &st);
  CHECK(nrm);
  enum { N = 2 };
  search_cand *c = cands_of("GMM", "GMM/0", N, false, &gmm);
  CHECK(c != NULL);
  const dg_func *batch[3] = {gmm, nrm, gmm};
  search_cuda_measure_prepare(&m, batch, 3);
  CHECK_EQ(ts_tune_data_files(), before + 2);
  measure_and_check(&m, gmm, c, N, false, on_gpu);
  CHECK_EQ(ts_tune_data_files(), before + 2);
  search_cuda_measure_prepare(&m, batch, 3); /* kept: nothing new */
  CHECK_EQ(ts_tune_data_files(), before + 2);
  search_cuda_measure_free(&m);
  CHECK_EQ(ts_tune_data_files(), before);
  search_cands_free(c, N);
  ir_func_free(gmm);
  ir_func_free(nrm);
}

DG_TEST(gpu_measure_cuda_rounds) {
  dg_status st;
  if (!rt_cuda_available(&st) || !rt_nvrtc_available(&st)) {
    SKIP("no GPU or NVRTC: %s", st.msg);
  }
  search_cuda_measure m = {3, 10, 1, NULL};
  CHECK_MSG(search_cuda_measure_init(&m, &st), "%s", st.msg);
  dg_func *gmm = NULL, *nrm = NULL;
  enum { N = 8 };
  search_cand *cg = cands_of("GMM", "GMM/0", N, true, &gmm);
  search_cand *cn = cands_of("NRM", "NRM/0", N, false, &nrm);
  CHECK(cg != NULL && cn != NULL);
  measure_and_check(&m, gmm, cg, N, true, true);
  measure_and_check(&m, gmm, cg, N, true, true); /* the same workload again */
  measure_and_check(&m, nrm, cn, N, false, true);
  measure_and_check(&m, gmm, cg, 2, false, true); /* and back */
  print_stats(&m);
  CHECK_EQ(m.stats.candidates, 3 * N + 4);
  CHECK_EQ(m.stats.passed, 3 * N + 2);
  CHECK_EQ(m.stats.ran, 3 * N + 2);
  CHECK(m.stats.t_worker > 0 && m.stats.t_worker <= m.stats.t_wall);
  search_cuda_measure_free(&m);
  search_cands_free(cg, N + 1);
  search_cands_free(cn, N);
  ir_func_free(gmm);
  ir_func_free(nrm);
}

/* The sink's calls, by candidate. */
typedef struct {
  int calls[16];
} sink_count;

static void count_sink(void *ctx, int i, const search_measure_result *r) {
  (void)r;
  sink_count *s = ctx;
  if (i >= 0 && i < 16) s->calls[i]++;
}

/* Candidates of two workloads interleaved in one round: each workload's
 * data file made once, every candidate built and matched back to its own
 * index (and the sink told once each), the unlowerable one failing alone;
 * on a GPU each of the others passes against its own workload's
 * reference. */
DG_TEST(search_cuda_measure_many_workloads) {
  dg_status st;
  if (!rt_nvrtc_available(&st)) {
    SKIP("NVRTC is not here: %s", st.msg);
  }
  bool on_gpu = rt_cuda_available(&st);
  search_cuda_measure m;
  CHECK_MSG(measure_open(&m, &st), "%s", st.msg);
  int before = ts_tune_data_files();
  dg_func *gmm = NULL, *nrm = NULL;
  search_cand *cg = cands_of("GMM", "GMM/0", 2, true, &gmm);
  search_cand *cn = cands_of("NRM", "NRM/0", 2, false, &nrm);
  CHECK(cg != NULL && cn != NULL);
  if (!cg || !cn) return;
  /* gmm, nrm, gmm, nrm, gmm (unlowerable) */
  enum { N = 5 };
  search_cand c[N] = {cg[0], cn[0], cg[1], cn[1], cg[2]};
  const dg_func *f[N] = {gmm, nrm, gmm, nrm, gmm};
  search_measure_result out[N];
  sink_count sc = {{0}};
  search_measure_sink sink = {count_sink, &sc};
  search_measure_cuda_many(&m, f, c, N, out, &sink);
  CHECK_EQ(ts_tune_data_files(), before + 2);
  for (int i = 0; i < N; i++) {
    CHECK_MSG(sc.calls[i] == 1, "candidate %d: the sink was told %d times", i, sc.calls[i]);
    if (i == N - 1) {
      CHECK_MSG(out[i].n_secs == 0 && strstr(out[i].error, "lower: "), "%s", out[i].error);
    } else if (on_gpu) {
      CHECK_MSG(out[i].n_secs == m.repeats, "candidate %d: %s", i, out[i].error);
    } else {
      CHECK_MSG(out[i].n_secs == 0 && strstr(out[i].error, "setup error: "), "candidate %d: %s", i,
                out[i].error);
    }
  }
  print_stats(&m);
  CHECK_EQ(m.stats.candidates, N);
  CHECK_EQ(m.stats.lowered, N - 1);
  CHECK_EQ(m.stats.compiled, N - 1);
  search_cuda_measure_free(&m);
  CHECK_EQ(ts_tune_data_files(), before);
  search_cands_free(cg, 3);
  search_cands_free(cn, 2);
  ir_func_free(gmm);
  ir_func_free(nrm);
}

/* A workload whose data cannot be made (its float64 reference does not
 * compile: a C flag the compiler refuses) fails each of its candidates
 * with the reason, built or not, and leaves no file behind; another
 * workload's candidates in the same call are not held up by it. */
DG_TEST(search_cuda_measure_many_data_fails) {
  dg_status st;
  if (!rt_nvrtc_available(&st)) {
    SKIP("NVRTC is not here: %s", st.msg);
  }
  const char *env = getenv("DRAGON_CFLAGS");
  char *saved = env ? dg_strdup(env) : NULL;
  search_cuda_measure m;
  CHECK_MSG(measure_open(&m, &st), "%s", st.msg);
  int before = ts_tune_data_files();
  dg_func *gmm = NULL;
  search_cand *cg = cands_of("GMM", "GMM/0", 2, true, &gmm);
  CHECK(cg != NULL);
  if (!cg) return;
  setenv("DRAGON_CFLAGS", "-fdragon-no-such-flag", 1);
  enum { N = 3 };
  const dg_func *f[N] = {gmm, gmm, gmm};
  search_measure_result out[N];
  sink_count sc = {{0}};
  search_measure_sink sink = {count_sink, &sc};
  search_measure_cuda_many(&m, f, cg, N, out, &sink);
  if (saved) setenv("DRAGON_CFLAGS", saved, 1);
  else unsetenv("DRAGON_CFLAGS");
  for (int i = 0; i < N; i++) {
    CHECK_MSG(sc.calls[i] == 1, "candidate %d: the sink was told %d times", i, sc.calls[i]);
    CHECK_MSG(out[i].n_secs == 0, "candidate %d measured", i);
    /* the unlowerable one fails at its build, the others at the data */
    if (i < N - 1) CHECK_MSG(strstr(out[i].error, "cc: compiling"), "candidate %d: %s", i, out[i].error);
    else CHECK_MSG(strstr(out[i].error, "lower: "), "%s", out[i].error);
  }
  CHECK_EQ(ts_tune_data_files(), before);
  print_stats(&m);
  CHECK_EQ(m.stats.candidates, N);
  CHECK_EQ(m.stats.ran, 0);
  search_cuda_measure_free(&m);
  search_cands_free(cg, 3);
  ir_func_free(gmm);
  free(saved);
}

/* Past the measurement's deadline nothing is built: every candidate comes
 * back not_measured, and the tuner records none of them and stops. */
DG_TEST(search_cuda_measure_deadline_builds_nothing_past_it) {
  dg_status st;
  if (!rt_nvrtc_available(&st)) {
    SKIP("NVRTC is not here: %s", st.msg);
  }
  search_cuda_measure m;
  CHECK_MSG(measure_open(&m, &st), "%s", st.msg);
  m.deadline = dg_now() - 1;
  dg_func *f = NULL;
  enum { N = 3 };
  search_cand *c = cands_of("GMM", "GMM/0", N, false, &f);
  CHECK(c != NULL);
  search_measure_result out[N];
  search_measure_cuda(&m, f, c, N, out, NULL);
  for (int i = 0; i < N; i++) {
    CHECK(out[i].not_measured);
    CHECK_EQ(out[i].n_secs, 0);
    CHECK(strstr(out[i].error, "deadline"));
  }
  CHECK_EQ(m.stats.lowered, 0);
  CHECK_EQ(m.stats.compiled, 0);
  CHECK_EQ(m.stats.ran, 0);
  /* the tuner: nothing recorded, the deadline said, the search not
   * taken for exhausted */
  char dir[600];
  snprintf(dir, sizeof dir, "%s/deadline_db", dg_test_tmpdir());
  search_db *db;
  CHECK(search_db_open(dir, &db, &st));
  search_space_opts so = {0};
  search_postprocs pp = {0};
  search_tune_opts to;
  search_tune_opts_default(&to);
  to.spec = "GMM/0";
  to.f = f;
  to.max_trials = 8;
  to.space = search_space_cuda;
  to.space_ctx = &so;
  to.postproc = search_postproc_cuda;
  to.postproc_ctx = &pp;
  to.measure = search_measure_cuda;
  to.measure_ctx = &m;
  to.target = "cuda";
  to.is_gpu = true;
  to.evolve.population_size = 16;
  to.evolve.num_trials_per_iter = 4;
  search_tune_result res;
  CHECK_MSG(search_tune(db, &to, &res, &st), "%s", st.msg);
  CHECK(res.deadline_hit);
  CHECK(!res.exhausted);
  CHECK_EQ(res.rounds, 1);
  CHECK_EQ(res.trials, 0);
  CHECK_EQ(search_db_record_count(db), 0);
  search_db_close(db);
  search_cuda_measure_free(&m);
  search_cands_free(c, N);
  ir_func_free(f);
}

typedef struct {
  int order[4];
  int n;
} sink_order;

static void note_order(void *ctx, int i, const search_measure_result *r) {
  (void)r;
  sink_order *o = ctx;
  if (o->n < 4) o->order[o->n++] = i;
}

/* A round's candidates are all lowered first, then compiled largest
 * source first (a round ends with its slowest compile, and a source's
 * size is what its compile time follows): with one compiling thread the
 * results come back in that order, not the candidates'. */
DG_TEST(search_cuda_measure_compiles_largest_first) {
  dg_status st;
  if (!rt_nvrtc_available(&st)) SKIP("NVRTC is not here: %s", st.msg);
  search_cuda_measure m;
  CHECK_MSG(measure_open(&m, &st), "%s", st.msg);
  m.threads = 1;
  dg_func *f = NULL;
  search_cand *c = cands_of("GMM", "GMM/0", 1, false, &f);
  sched *bs = NULL;
  CHECK(c && search_baseline_schedule(f, NULL, &bs, &st));
  if (!c || !bs) {
    search_cuda_measure_free(&m);
    return;
  }
  /* the candidates: the untuned baseline, then the hand schedule */
  search_cand two[2] = {{sched_trace_clone(sched_get_trace(bs)), ir_func_clone(sched_func(bs)), 0, 0, false},
                        c[0]};
  two[0].hash = ir_func_hash(two[0].func);
  size_t len[2];
  for (int i = 0; i < 2; i++) {
    rt_build b;
    rt_build_opts bo = {.target = RT_BUILD_CUDA, .arch = m.arch, .compile = false};
    CHECK_MSG(rt_program_build(two[i].func, &bo, &b, &st), "%s", st.msg);
    len[i] = b.source ? strlen(b.source) : 0;
    rt_build_free(&b);
  }
  CHECK_MSG(len[1] > len[0], "the hand schedule's source (%zu bytes) is not the larger (%zu)", len[1], len[0]);
  sink_order o = {{0}, 0};
  search_measure_sink sink = {note_order, &o};
  search_measure_result out[2];
  search_measure_cuda(&m, f, two, 2, out, &sink);
  CHECK_EQ(o.n, 2);
  CHECK_MSG(o.order[0] == 1 && o.order[1] == 0, "results in the order %d, %d", o.order[0], o.order[1]);
  CHECK_EQ(m.stats.compiled, 2);
  search_cuda_measure_free(&m);
  sched_trace_free(two[0].trace);
  ir_func_free(two[0].func);
  search_cands_free(c, 1);
  sched_free(bs);
  ir_func_free(f);
}
