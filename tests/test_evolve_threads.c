/* test_evolve_threads.c: the evolutionary search gives the same candidates
 * for a seed whatever its thread count: rounds of search_evolve_generate on
 * a small matmul with the CUDA design space, the CUDA postprocessors and
 * an XGBoost model trained on a synthetic measurement (so that every part
 * runs: the database pool, the initial population, the generations, the
 * model's random and trained scores, the picks), logged candidate by
 * candidate and compared between one thread and several. */
#include <stdlib.h>
#include <string.h>

#include "dragon/search.h"
#include "dragon/wl.h"
#include "test.h"

#define SMALL_MM "batch_matmul:b=1,n=32,m=32,k=32,dtype=f32"

/* A deterministic stand-in for a measurement: some kernels fail, the others
 * take a time that depends on the kernel alone. */
static double synthetic_secs(uint64_t hash) {
  if (hash % 7 == 0) return SEARCH_FAILED_SECS;
  return 1e-6 * (double)(1 + (hash >> 11) % 997);
}

typedef struct {
  dg_str log;                  /* one line per candidate and round */
  search_evolve_stats stats;
  search_postprocs pp;
  int n_cands;
  bool trained; /* the model was trained before the last round */
} run_result;

/* `rounds` rounds with `threads` threads, everything else fixed. */
static bool run_search(const dg_func *f, const search_space *sp, int threads, int rounds,
                       bool with_model, run_result *out, dg_status *st) {
  dg_str_init(&out->log);
  memset(&out->pp, 0, sizeof out->pp);
  out->n_cands = 0;
  out->trained = false;
  search_xgb_opts xo;
  search_xgb_opts_default(&xo);
  xo.nthread = 1;
  xo.num_warmup_samples = 24; /* trained from the third round on */
  search_cost_model *model = with_model ? search_cost_model_new(&xo, 3) : NULL;
  search_task task = {f, sp->sketches, sp->n, search_postproc_cuda, &out->pp, model, "mm",
                      true, {0}, 77};
  for (int m = 0; m < SEARCH_MUT_COUNT; m++)
    task.mutator_probs[m] = search_mutator_cuda_prob((search_mutator)m);
  search_evolve_opts o;
  search_evolve_opts_default(&o);
  o.population_size = 64;
  o.init_min_unmeasured = 16;
  o.num_trials_per_iter = 20; /* one eps-greedy random pick a round */
  o.threads = threads;
  search_evolve *ev = search_evolve_new(&task, &o);
  bool ok = true;
  for (int r = 0; r < rounds && ok; r++) {
    if (r == rounds - 1) out->trained = model && search_cost_model_trained(model);
    search_cand *c = NULL;
    int n = search_evolve_generate(ev, 1000, &c, st);
    if (n < 0) {
      ok = false;
      break;
    }
    double *secs = dg_malloc(sizeof(double) * (size_t)(n ? n : 1));
    for (int i = 0; i < n; i++) {
      char *js = sched_trace_to_json(c[i].trace);
      dg_str_printf(&out->log, "round %d cand %d hash %llu kernel %llu score %.17g random %d %s\n",
                    r, i, (unsigned long long)c[i].hash,
                    (unsigned long long)ir_func_hash(c[i].func), c[i].score, c[i].random, js);
      free(js);
      secs[i] = synthetic_secs(c[i].hash);
    }
    out->n_cands += n;
    ok = search_evolve_notify(ev, c, secs, n, st);
    free(secs);
    search_cands_free(c, n);
  }
  out->stats = *search_evolve_get_stats(ev);
  search_evolve_free(ev);
  search_cost_model_free(model);
  return ok;
}

/* The first line where two logs differ, for the failure message. */
static const char *first_difference(const char *a, const char *b, int *line) {
  *line = 1;
  const char *start = a;
  for (; *a && *a == *b; a++, b++)
    if (*a == '\n') {
      (*line)++;
      start = a + 1;
    }
  return start;
}

static void same_results(const run_result *a, const run_result *b, int threads) {
  int line;
  const char *at = first_difference(a->log.s, b->log.s, &line);
  CHECK_MSG(strcmp(a->log.s, b->log.s) == 0,
            "1 thread and %d threads differ at log line %d:\n  %.300s", threads, line, at);
  CHECK_EQ(a->stats.n_replayed, b->stats.n_replayed);
  CHECK_EQ(a->stats.n_rejected, b->stats.n_rejected);
  CHECK_EQ(a->stats.n_picked_best, b->stats.n_picked_best);
  CHECK_EQ(a->stats.n_picked_random, b->stats.n_picked_random);
  CHECK_EQ(a->stats.n_dup_skipped, b->stats.n_dup_skipped);
  CHECK_EQ(a->stats.empty_rounds, b->stats.empty_rounds);
  CHECK_EQ(a->pp.accepted, b->pp.accepted);
  for (int k = 0; k < SEARCH_POSTPROC_COUNT; k++) CHECK_EQ(a->pp.rejected[k], b->pp.rejected[k]);
}

DG_TEST(evolve_threads_same_candidates) {
  dg_status st;
  dg_func *f = wl_build(SMALL_MM, &st);
  CHECK_MSG(f, "%s", st.msg);
  search_space_opts so = {.seed = 5};
  search_space sp;
  CHECK_MSG(search_space_generate(f, &so, &sp, &st), "%s", st.msg);
  CHECK(sp.n > 0);
  run_result one, four;
  bool ok1 = run_search(f, &sp, 1, 3, true, &one, &st);
  CHECK_MSG(ok1, "1 thread: %s", st.msg);
  bool ok4 = run_search(f, &sp, 4, 3, true, &four, &st);
  CHECK_MSG(ok4, "4 threads: %s", st.msg);
  /* the search did real work: three full rounds, rejections included */
  CHECK_EQ(one.n_cands, 3 * 20);
  CHECK(one.stats.n_rejected > 0 && one.stats.n_replayed > one.stats.n_rejected);
  CHECK(one.stats.n_picked_random > 0);
  CHECK(one.trained && four.trained); /* the last round ran on predicted scores */
  /* every schedule built went through the postprocessors (dup-free count) */
  int64_t pp_seen = one.pp.accepted;
  for (int k = 0; k < SEARCH_POSTPROC_COUNT; k++) pp_seen += one.pp.rejected[k];
  CHECK(pp_seen > 0 && pp_seen <= one.stats.n_replayed);
  same_results(&one, &four, 4);
  dg_str_free(&one.log);
  dg_str_free(&four.log);
  search_space_free(&sp);
  ir_func_free(f);
}

DG_TEST(evolve_threads_random_scores_any_count) {
  /* without a cost model (scores from the search's own generator), for
   * thread counts that do not divide the population, and for 0 (all) */
  dg_status st;
  dg_func *f = wl_build(SMALL_MM, &st);
  CHECK_MSG(f, "%s", st.msg);
  search_space_opts so = {.seed = 9};
  search_space sp;
  CHECK_MSG(search_space_generate(f, &so, &sp, &st), "%s", st.msg);
  run_result base;
  CHECK_MSG(run_search(f, &sp, 1, 2, false, &base, &st), "%s", st.msg);
  CHECK_EQ(base.n_cands, 2 * 20);
  const int counts[] = {3, 0};
  for (size_t i = 0; i < DG_ARRAY_LEN(counts); i++) {
    run_result r;
    CHECK_MSG(run_search(f, &sp, counts[i], 2, false, &r, &st), "%d threads: %s", counts[i],
              st.msg);
    same_results(&base, &r, counts[i]);
    dg_str_free(&r.log);
  }
  dg_str_free(&base.log);
  search_space_free(&sp);
  ir_func_free(f);
}

DG_TEST(evolve_threads_cli_flag) {
  /* dragon tune takes --threads and shows it in --help */
  char *out = NULL;
  int rc = dg_test_run_dragon("tune --help", NULL, &out);
  CHECK_MSG(rc == 0, "%s", out ? out : "");
  CHECK_MSG(strstr(out, "--threads"), "%s", out);
  free(out);
  rc = dg_test_run_dragon("tune GMM/0 --db /nonexistent --threads -1", NULL, &out);
  CHECK_EQ(rc, 2);
  free(out);
}
