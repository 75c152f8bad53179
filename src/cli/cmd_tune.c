/* cmd_tune.c: `dragon tune SPEC... --trials N --db DIR`: MetaSchedule's
 * evolutionary search per workload (search/tune.c), every measurement a
 * record of the database, a progress line per round on stderr, a summary
 * line per workload on stdout. Rerun with the same database it resumes:
 * --trials is the total per workload, records already there count.
 *
 * Candidates come from the CUDA design spaces and postprocessors
 * (search_space_cuda, search_postproc_cuda) or, with --space FILE, from one
 * hand-written design space (trace JSON) replayed with its decisions
 * re-drawn. --target cpu measures compiled C on the CPU (the C emulation of
 * the GPU schedules), so the whole loop runs without a GPU. --target cuda
 * measures on the GPU (search_measure_cuda: lowered, NVRTC, a crash-isolated
 * worker, checked, L2 flushed); without a GPU it says so and exits 1.
 */
#include <malloc.h>
#include <string.h>

#include "cli/cli.h"
#include "dragon/search.h"
#include "dragon/wl.h"

int cmd_tune(int argc, char **argv) {
  int64_t trials = 64, workers = 1, seed = 1, population = 512, per_round = 64, repeats = 3;
  int64_t threads = 0;
  double compile_limit = 120;
  const char *db_dir = NULL, *target = "cpu", *space_path = NULL, *model_dir = NULL;
  bool quiet = false;
  const cli_opt opts[] = {
      {"--trials", CLI_OPT_INT, &trials, 1, 100000000, "measured candidates per workload, in total"},
      {"--db", CLI_OPT_STR, &db_dir, 0, 0, "tuning database directory (created if needed)"},
      {"--workers", CLI_OPT_INT, &workers, 1, 64, "measurement processes"},
      {"--target", CLI_OPT_STR, &target, 0, 0, "cpu (compiled C) or cuda"},
      {"--space", CLI_OPT_STR, &space_path, 0, 0, "a design space as trace JSON (default: the CUDA rules)"},
      {"--model", CLI_OPT_STR, &model_dir, 0, 0, "cost-model directory: loaded if there, saved after"},
      {"--seed", CLI_OPT_INT, &seed, 0, INT64_MAX, "random seed"},
      {"--population", CLI_OPT_INT, &population, 4, 65536, "population of the evolutionary search"},
      {"--per-round", CLI_OPT_INT, &per_round, 1, 4096, "candidates measured per round"},
      {"--repeats", CLI_OPT_INT, &repeats, 1, 8, "timed runs per candidate (cpu)"},
      {"--threads", CLI_OPT_INT, &threads, 0, 1024,
       "threads building candidates in the search (0: all cores; same results for any count)"},
      {"--compile-limit", CLI_OPT_F64, &compile_limit, 0, 0,
       "seconds NVRTC may spend on one candidate before it is stopped and fails (cuda; 0: no "
       "limit)"},
      {"--quiet", CLI_OPT_FLAG, &quiet, 0, 0, "no progress lines"},
  };
  const cli_spec spec = {
      "tune",
      "SPEC... --trials N --db DIR [--workers K] [--threads T] [--target cpu|cuda] [--space FILE]",
      "Tunes each workload (a spec, an alias like GMM/0, or a kernel-text file) with\n"
      "MetaSchedule's evolutionary search and XGBoost cost model, recording every\n"
      "measured candidate in the database. Rerunning with the same database resumes:\n"
      "--trials counts the records already there. Prints one progress line per round\n"
      "(trials, best, candidates/s, ETA, time in sampling, cost model, measurement)\n"
      "and the best latency per workload.",
      opts, (int)DG_ARRAY_LEN(opts), 1, -1};
  char **pos;
  int npos;
  int rc = cli_parse(&spec, argc, argv, &pos, &npos);
  if (rc == -1) return CLI_OK;
  if (rc != CLI_OK) return rc;
  dg_status st;
  if (!db_dir) {
    free(pos);
    fprintf(stderr, "dragon tune: --db DIR is required\n");
    return CLI_USAGE;
  }
  if (strcmp(target, "cpu") != 0 && strcmp(target, "cuda") != 0) {
    free(pos);
    fprintf(stderr, "dragon tune: --target: '%s' is not cpu or cuda\n", target);
    return CLI_USAGE;
  }
  /* Building a schedule allocates and frees a few MiB. glibc's defaults
   * hand freed heap back to the kernel each time and fault it in again on
   * the next build (a fifth of the search's time on one thread, and the
   * search's threads each do it in their own arena): keep up to 32 MiB. */
  mallopt(M_MMAP_THRESHOLD, 4 << 20);
  mallopt(M_TRIM_THRESHOLD, 32 << 20);
  bool on_gpu = strcmp(target, "cuda") == 0;
  if (!(compile_limit >= 0 && compile_limit <= 86400)) {
    free(pos);
    fprintf(stderr, "dragon tune: --compile-limit: %g is not in [0, 86400] seconds\n",
            compile_limit);
    return CLI_USAGE;
  }
  search_cuda_measure gm = {(int)repeats, 10, (uint64_t)seed, NULL};
  gm.compile_limit_s = compile_limit;
  if (on_gpu && !search_cuda_measure_init(&gm, &st)) {
    free(pos);
    return cli_report("tune", &st);
  }
  search_db *db;
  if (!search_db_open(db_dir, &db, &st)) {
    free(pos);
    search_cuda_measure_free(&gm);
    return cli_report("tune", &st);
  }
  search_xgb_opts xo;
  search_xgb_opts_default(&xo);
  search_cost_model *model = search_cost_model_new(&xo, (uint64_t)seed);
  if (model_dir) {
    char probe[4096];
    snprintf(probe, sizeof probe, "%s/data.bin", model_dir);
    FILE *fp = fopen(probe, "rb");
    if (fp) {
      fclose(fp);
      if (!search_cost_model_load(model, model_dir, &st)) {
        search_cost_model_free(model);
        search_db_close(db);
        free(pos);
        search_cuda_measure_free(&gm);
        return cli_report("tune", &st);
      }
    }
  }
  search_space_file sf = {space_path};
  search_postprocs pp = {0};
  search_cpu_measure cm = {(int)repeats, 10, (uint64_t)seed, (int)workers};
  rc = CLI_OK;
  for (int i = 0; i < npos && rc == CLI_OK; i++) {
    dg_func *f = cli_load_kernel(pos[i], &st);
    if (!f) {
      rc = cli_report("tune", &st);
      break;
    }
    char *canon = wl_canonical(pos[i], &st);
    search_tune_opts o;
    search_tune_opts_default(&o);
    o.spec = canon ? canon : pos[i];
    o.f = f;
    o.max_trials = trials;
    o.space = space_path ? search_space_from_file : search_space_cuda;
    o.space_ctx = space_path ? (void *)&sf : NULL;
    o.postproc = space_path ? NULL : search_postproc_cuda;
    o.postproc_ctx = space_path ? NULL : &pp;
    o.measure = on_gpu ? search_measure_cuda : search_measure_cpu;
    o.measure_ctx = on_gpu ? (void *)&gm : (void *)&cm;
    o.device = on_gpu ? gm.device : "cpu";
    o.model = model;
    o.target = target;
    o.is_gpu = true; /* the schedules are GPU schedules, whatever runs them */
    o.evolve.population_size = (int)population;
    o.evolve.num_trials_per_iter = (int)per_round;
    o.evolve.threads = (int)threads;
    if (o.evolve.init_min_unmeasured > population / 2) o.evolve.init_min_unmeasured = (int)(population / 2);
    o.seed = (uint64_t)seed + (uint64_t)i;
    o.progress = quiet ? NULL : stderr;
    search_tune_result res;
    if (!search_tune(db, &o, &res, &st)) {
      dg_status_prefix(&st, "%s", o.spec);
      rc = cli_report("tune", &st);
    } else if (res.best_secs < SEARCH_FAILED_SECS) {
      printf("%s: best %.3f us  trials %lld (%lld new)  [sampling %.1f s, cost model %.1f s, "
             "measurement %.1f s, total %.1f s]\n",
             o.spec, res.best_secs * 1e6, (long long)res.trials, (long long)res.new_trials,
             res.t_sample, res.t_model, res.t_measure, res.t_total);
    } else {
      printf("%s: no candidate ran  trials %lld (%lld new)\n", o.spec, (long long)res.trials,
             (long long)res.new_trials);
    }
    free(canon);
    ir_func_free(f);
  }
  int64_t pp_seen = pp.accepted;
  for (int k = 0; k < SEARCH_POSTPROC_COUNT; k++) pp_seen += pp.rejected[k];
  if (rc == CLI_OK && !space_path && pp_seen > 0 && !quiet) {
    fprintf(stderr, "postprocessors: %lld accepted", (long long)pp.accepted);
    for (int k = 0; k < SEARCH_POSTPROC_COUNT; k++)
      if (pp.rejected[k])
        fprintf(stderr, ", %s rejected %lld", search_postproc_name((search_postproc)k),
                (long long)pp.rejected[k]);
    fputc('\n', stderr);
  }
  if (rc == CLI_OK && model_dir && !search_cost_model_save(model, model_dir, &st))
    rc = cli_report("tune", &st);
  search_cost_model_free(model);
  search_db_close(db);
  search_cuda_measure_free(&gm);
  free(pos);
  return rc;
}
