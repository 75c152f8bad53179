/* bench_evolve.c: candidate generation of the evolutionary search per
 * thread count.
 *
 * Rounds of search_evolve_generate on a workload's CUDA design space with
 * the CUDA postprocessors and the XGBoost model, the candidates' times
 * made up from their kernel hashes (no measurement: this is the search's
 * own cost) so that later rounds run on predicted scores and the database
 * pool. Prints one row per thread count: seconds per round (wall), the
 * search's split of it (initial population and picks, generations, cost
 * model), the speed-up over the first row, and whether the candidates are
 * the same as the first row's (they must be). Sets glibc's malloc
 * thresholds as dragon tune does.
 *
 * usage: bench_evolve [SPEC] [--rounds R] [--population P] [--per-round N]
 *                     [--threads 1,2,4,...]
 */
#include <malloc.h>
#include <stdlib.h>
#include <string.h>

#include "dragon/search.h"
#include "dragon/wl.h"

typedef struct {
  double secs, sample, evolve, model;
  uint64_t digest; /* of every candidate's hash, in order */
  int n;
} bench_row;

static double made_up_secs(uint64_t hash) {
  if (hash % 7 == 0) return SEARCH_FAILED_SECS;
  return 1e-6 * (double)(1 + (hash >> 11) % 997);
}

static bool run(const dg_func *f, const search_space *sp, int threads, int rounds, int population,
                int per_round, bench_row *out, dg_status *st) {
  memset(out, 0, sizeof *out);
  search_xgb_opts xo;
  search_xgb_opts_default(&xo);
  search_cost_model *model = search_cost_model_new(&xo, 1);
  search_postprocs pp = {0};
  search_task task = {f, sp->sketches, sp->n, search_postproc_cuda, &pp, model, "bench",
                      true, {0}, 1};
  for (int m = 0; m < SEARCH_MUT_COUNT; m++)
    task.mutator_probs[m] = search_mutator_cuda_prob((search_mutator)m);
  search_evolve_opts o;
  search_evolve_opts_default(&o);
  o.population_size = population;
  o.num_trials_per_iter = per_round;
  o.threads = threads;
  search_evolve *ev = search_evolve_new(&task, &o);
  bool ok = true;
  double in_search = 0; /* generate and notify, not the made-up measurement */
  for (int r = 0; r < rounds && ok; r++) {
    search_cand *c = NULL;
    double t1 = dg_now();
    int n = search_evolve_generate(ev, per_round, &c, st);
    in_search += dg_now() - t1;
    if (n < 0) {
      ok = false;
      break;
    }
    double *secs = dg_malloc(sizeof(double) * (size_t)(n ? n : 1));
    for (int i = 0; i < n; i++) {
      secs[i] = made_up_secs(c[i].hash);
      out->digest = dg_hash_combine(out->digest, c[i].hash);
    }
    out->n += n;
    double t2 = dg_now();
    ok = search_evolve_notify(ev, c, secs, n, st);
    in_search += dg_now() - t2;
    free(secs);
    search_cands_free(c, n);
  }
  const search_evolve_stats *s = search_evolve_get_stats(ev);
  out->secs = in_search / rounds;
  out->sample = s->t_sample / rounds;
  out->evolve = s->t_evolve / rounds;
  out->model = s->t_model / rounds;
  search_evolve_free(ev);
  search_cost_model_free(model);
  return ok;
}

int main(int argc, char **argv) {
  const char *spec = "GMM/0", *threads_list = "1,2,4,8,16";
  int64_t rounds = 3, population = 512, per_round = 64;
  dg_status st;
  for (int i = 1; i < argc; i++) {
    int64_t *dst = NULL;
    int64_t lo = 1, hi = 1 << 20;
    if (strcmp(argv[i], "--rounds") == 0) dst = &rounds;
    else if (strcmp(argv[i], "--population") == 0) {
      dst = &population;
      lo = 4;
    }
    else if (strcmp(argv[i], "--per-round") == 0) dst = &per_round;
    else if (strcmp(argv[i], "--threads") == 0 && i + 1 < argc) {
      threads_list = argv[++i];
      continue;
    } else if (argv[i][0] != '-') {
      spec = argv[i];
      continue;
    } else {
      fprintf(stderr, "usage: bench_evolve [SPEC] [--rounds R] [--population P] [--per-round N] "
                      "[--threads 1,2,4,...]\n");
      return 2;
    }
    if (i + 1 >= argc || !dg_parse_i64(argv[i + 1], lo, hi, dst, argv[i], &st)) {
      fprintf(stderr, "bench_evolve: %s\n", i + 1 >= argc ? "a flag needs a value" : st.msg);
      return 2;
    }
    i++;
  }
  mallopt(M_MMAP_THRESHOLD, 4 << 20); /* as dragon tune does (cmd_tune.c) */
  mallopt(M_TRIM_THRESHOLD, 32 << 20);
  dg_func *f = wl_build(spec, &st);
  search_space_opts so = {.seed = 1};
  search_space sp;
  if (!f || !search_space_generate(f, &so, &sp, &st)) {
    fprintf(stderr, "bench_evolve: %s: %s\n", spec, st.msg);
    ir_func_free(f);
    return 1;
  }
  printf("%s: %d sketches, population %lld, %lld per round, %lld rounds\n", spec, sp.n,
         (long long)population, (long long)per_round, (long long)rounds);
  printf("threads  s/round  sample  evolve   model  speed-up  same\n");
  bench_row first = {0};
  int rc = 0;
  char *list = dg_strdup(threads_list);
  bool have_first = false;
  for (char *save = NULL, *tok = strtok_r(list, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
    int64_t t;
    if (!dg_parse_i64(tok, 0, 1024, &t, "--threads", &st)) {
      fprintf(stderr, "bench_evolve: %s\n", st.msg);
      rc = 2;
      break;
    }
    bench_row r;
    if (!run(f, &sp, (int)t, (int)rounds, (int)population, (int)per_round, &r, &st)) {
      fprintf(stderr, "bench_evolve: %lld threads: %s\n", (long long)t, st.msg);
      rc = 1;
      break;
    }
    if (!have_first) {
      first = r;
      have_first = true;
    }
    bool same = r.digest == first.digest && r.n == first.n;
    if (!same) rc = 1;
    printf("%7lld  %7.3f  %6.3f  %6.3f  %6.3f  %7.2fx  %s\n", (long long)t, r.secs, r.sample,
           r.evolve, r.model, first.secs / r.secs, same ? "yes" : "NO");
    fflush(stdout);
  }
  free(list);
  search_space_free(&sp);
  ir_func_free(f);
  return rc;
}
