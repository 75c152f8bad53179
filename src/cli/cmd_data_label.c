/* cmd_data_label.c: `dragon data label`: the labelling campaign
 * (data_label_run) over the workloads of a split, in the split file's
 * order, into one tuning database, within a wall-clock budget.
 *
 * --records DIR first merges every committed shard (*.jsonl.zst) of DIR
 * into the database, so a run on a fresh machine knows what is labelled
 * and its cost model starts from every earlier record; a shard that cannot
 * be read is reported and skipped. --shard R/S labels every S-th workload
 * from the R-th (one process per GPU, or per machine; their databases
 * merge with `dragon db merge`). Rerun with the same database it resumes.
 */
#include <stdlib.h>
#include <string.h>

#include "cli/cli.h"
#include "dragon/data.h"
#include "dragon/search.h"
#include "dragon/wl.h"

/* The specs this run labels, sorted: with a saved cost model and nothing
 * to merge, the database is opened as a view that holds their records
 * only (a window's eight processes each opened all 127,510 records of its
 * copy in 19-22 s, for the eighth of them its shard needs). */
typedef struct {
  const char **v;
  int64_t n;
} spec_set;

static int cmp_spec(const void *a, const void *b) {
  return strcmp(*(const char *const *)a, *(const char *const *)b);
}

/* A workload line written with an alias or another spelling of a spec
 * names the same kernel: it is held if its canonical spec is labelled. */
static bool in_specs(const char *spec, void *ctx) {
  const spec_set *s = ctx;
  if (bsearch(&spec, s->v, (size_t)s->n, sizeof *s->v, cmp_spec)) return true;
  dg_status st;
  char *c = wl_canonical(spec, &st);
  if (!c) return true; /* not a spec dragon can read: held, as it was */
  const char *cs = c;
  bool in = strcmp(c, spec) != 0 && bsearch(&cs, s->v, (size_t)s->n, sizeof *s->v, cmp_spec);
  free(c);
  return in;
}

int cmd_data_label(int argc, char **argv) {
  /* the budget counts from here: opening the database is part of it */
  double t_cmd = dg_now();
  const char *splits_path = DATA_SPLIT_FILE, *split_name = "train", *db_dir = NULL;
  const char *target = "cuda", *shard = NULL, *records = NULL, *cost_model = NULL;
  const char *plan_dir = NULL;
  int64_t first = 0, skip = 0, trials_min = 64, trials_max = 192, threads = 0, population = 256;
  int64_t seed = 1, repeats = 3;
  double budget = 0, plateau = 0.02, max_work = -1, compile_limit = 5;
  bool no_pipeline = false, quiet = false, retry_exhausted = false, find_exhausted = false;
  const cli_opt opts[] = {
      {"--db", CLI_OPT_STR, &db_dir, 0, 0, "tuning database directory (created if needed)"},
      {"--split", CLI_OPT_STR, &split_name, 0, 0, "which split to label (train, val, test, ...)"},
      {"--splits", CLI_OPT_STR, &splits_path, 0, 0, "the splits file"},
      {"--records", CLI_OPT_STR, &records, 0, 0,
       "merge every shard (*.jsonl.zst) of this directory into the database first"},
      {"--budget-s", CLI_OPT_F64, &budget, 0, 0, "wall seconds for the run, counted from the command's start (opening the database, loading the plan and the cost model count; 0: no limit)"},
      {"--first", CLI_OPT_INT, &first, 0, INT64_MAX, "label at most the first N workloads (0: all)"},
      {"--skip", CLI_OPT_INT, &skip, 0, INT64_MAX, "start after the split's first N workloads"},
      {"--shard", CLI_OPT_STR, &shard, 0, 0,
       "R/S: every S-th workload from the R-th; mpi: R and S from the MPI launcher (mpirun, "
       "srun), each rank writing DIR/rank-R and measuring on its node's GPU local rank % GPUs"},
      {"--trials-min", CLI_OPT_INT, &trials_min, 1, 100000, "measured candidates per workload"},
      {"--trials-max", CLI_OPT_INT, &trials_max, 1, 100000,
       "at most this many while rounds still improve"},
      {"--plateau", CLI_OPT_F64, &plateau, 0, 0,
       "past --trials-min, go on while a round improves the best by more than this fraction"},
      {"--max-work", CLI_OPT_F64, &max_work, 0, 0,
       "defer workloads whose float64 reference takes more operations (0: none; default 4e10 "
       "on cuda, 1e8 on cpu)"},
      {"--target", CLI_OPT_STR, &target, 0, 0, "cuda (the GPU) or cpu (compiled C emulation)"},
      {"--threads", CLI_OPT_INT, &threads, 0, 1024, "threads building and compiling (0: all cores)"},
      {"--population", CLI_OPT_INT, &population, 4, 65536, "population of the evolutionary search"},
      {"--repeats", CLI_OPT_INT, &repeats, 1, 8, "timed runs per candidate"},
      {"--seed", CLI_OPT_INT, &seed, 0, INT64_MAX, "random seed"},
      {"--compile-limit", CLI_OPT_F64, &compile_limit, 0, 0,
       "NVRTC wall seconds before a candidate is stopped and counted failed (0: none; default 5: about 1% of "
       "the candidates, explicitly unrolled giants, 8% of the NVRTC time on an idle core; bench/RESULTS.md)"},
      {"--cost-model", CLI_OPT_STR, &cost_model, 0, 0,
       "start from this saved cost model (`dragon db model`) instead of fitting one on the "
       "database's records"},
      {"--no-pipeline", CLI_OPT_FLAG, &no_pipeline, 0, 0,
       "leave out the software-pipeline sketches (default: kept where the lowering pipelines)"},
      {"--plan", CLI_OPT_STR, &plan_dir, 0, 0,
       "a plan compiled ahead (`dragon data plan`): a workload it holds takes its compilations "
       "and measures its candidates as the first round"},
      {"--retry-exhausted", CLI_OPT_FLAG, &retry_exhausted, 0, 0,
       "search again the workloads marked exhausted (spaces measured whole, or with no valid "
       "schedule), as after the design spaces grew"},
      {"--find-exhausted", CLI_OPT_FLAG, &find_exhausted, 0, 0,
       "measure nothing (no GPU): search each begun workload with fewer than --trials-min "
       "records and mark those whose search has nothing new left"},
      {"--quiet", CLI_OPT_FLAG, &quiet, 0, 0, "no progress lines"},
  };
  const cli_spec spec = {
      "data label",
      "--db DIR [--split S] [--budget-s N] [--records DIR] [--shard R/S|mpi] [--target cuda|cpu]",
      "Labels the workloads of a split, in the split file's order: for each, the\n"
      "untuned baseline (DefaultGPUSchedule) measured once, then MetaSchedule's search\n"
      "with one cost model shared by every workload (warm-started from the database's\n"
      "records): --trials-min measured candidates, more while rounds still improve,\n"
      "up to --trials-max. Every candidate is checked against the float64 reference\n"
      "and recorded as it is measured, naming the commit and the device. Stops at\n"
      "--budget-s; a rerun skips labelled workloads (and those whose search ran out\n"
      "of new kernels, marked in the database) and resumes the rest. Prints a\n"
      "line per workload (trials, baseline, best, speedup, rate, time left).",
      opts,
      (int)DG_ARRAY_LEN(opts),
      0,
      0};
  char **pos;
  int npos;
  int rc = cli_parse(&spec, argc, argv, &pos, &npos);
  if (rc == -1) return CLI_OK;
  if (rc != CLI_OK) return rc;
  free(pos);
  if (!db_dir) {
    fprintf(stderr, "dragon data label: --db DIR is required\n");
    return CLI_USAGE;
  }
  if (strcmp(target, "cuda") != 0 && strcmp(target, "cpu") != 0) {
    fprintf(stderr, "dragon data label: --target: '%s' is not cuda or cpu\n", target);
    return CLI_USAGE;
  }
  if (trials_max < trials_min) {
    fprintf(stderr, "dragon data label: --trials-max %lld is below --trials-min %lld\n",
            (long long)trials_max, (long long)trials_min);
    return CLI_USAGE;
  }
  /* the CPU emulates the GPU program: far fewer operations are affordable */
  if (max_work < 0) max_work = strcmp(target, "cpu") == 0 ? 1e8 : 4e10;
  if (!(budget >= 0) || !(plateau >= 0) || !(max_work >= 0) || !(compile_limit >= 0)) {
    fprintf(stderr, "dragon data label: --budget-s, --plateau, --max-work and --compile-limit "
                    "must not be negative\n");
    return CLI_USAGE;
  }
  /* ranks of an MPI job: a shard each, a database each (merged after:
   * `dragon db merge DIR/rank-* --db ALL`), a GPU each where the launcher
   * has not chosen one */
  char shard_mpi[48];
  char *rank_db = NULL;
  if (shard && strcmp(shard, "mpi") == 0) {
    cli_launch L;
    char why[300];
    if (!cli_launch_from_env(&L, why, sizeof why)) {
      fprintf(stderr, "dragon data label: --shard mpi: %s\n", why);
      return CLI_USAGE;
    }
    snprintf(shard_mpi, sizeof shard_mpi, "%ld/%ld", L.rank, L.size);
    shard = shard_mpi;
    dg_str d;
    dg_str_init(&d);
    dg_str_printf(&d, "%s/rank-%ld", db_dir, L.rank);
    db_dir = rank_db = dg_str_take(&d);
    int gpu = -1;
    if (strcmp(target, "cuda") == 0 && !getenv("CUDA_VISIBLE_DEVICES")) {
      gpu = cli_launch_gpu(L.local, cli_node_gpu_count());
      char g[16];
      snprintf(g, sizeof g, "%d", gpu);
      if (gpu >= 0) setenv("CUDA_VISIBLE_DEVICES", g, 1);
    }
    if (!quiet) {
      fprintf(stderr, "%s rank %ld of %ld: shard %s, database %s", L.launcher, L.rank, L.size, shard,
              db_dir);
      if (gpu >= 0) fprintf(stderr, ", GPU %d of the node (local rank %ld)", gpu, L.local);
      fputc('\n', stderr);
    }
  }
  cli_split_args sa = {splits_path, split_name, shard, skip, first};
  data_splits *t;
  const char **specs;
  int64_t n_specs;
  rc = cli_split_specs("data label", &sa, &t, &specs, &n_specs);
  if (rc != CLI_OK) {
    free(rank_db);
    return rc;
  }
  dg_status st;
  data_plan *plan = NULL;
  if (plan_dir && !(plan = data_plan_load(plan_dir, false, &st))) {
    free(specs);
    data_splits_free(t);
    free(rank_db);
    return cli_report("data label", &st);
  }
  search_db *db;
  double t_open = dg_now();
  /* the search reads the records of the workloads it labels; the cost
   * model's warm start (no --cost-model) and a merge (--records) need all */
  bool view = cost_model && !records;
  spec_set ss = {NULL, 0};
  if (view) {
    ss.v = dg_malloc(sizeof *ss.v * (size_t)(n_specs ? n_specs : 1));
    memcpy(ss.v, specs, sizeof *ss.v * (size_t)n_specs);
    ss.n = n_specs;
    qsort(ss.v, (size_t)n_specs, sizeof *ss.v, cmp_spec);
  }
  bool opened = view ? search_db_open_some(db_dir, in_specs, &ss, &db, &st)
                     : search_db_open(db_dir, &db, &st);
  free(ss.v); /* the view keeps its verdicts, not the set */
  if (!opened) {
    data_plan_free(plan);
    free(specs);
    data_splits_free(t);
    free(rank_db);
    return cli_report("data label", &st);
  }
  if (!quiet) {
    fprintf(stderr, "database: %lld records opened in %.1f s", (long long)search_db_record_count(db),
            dg_now() - t_open);
    if (view)
      fprintf(stderr, " (those of the %lld workloads labelled here; %lld lines of others unread)",
              (long long)n_specs, (long long)search_db_unread_count(db));
    fputc('\n', stderr);
  }
  rc = cli_merge_records(db, records, "data label", quiet);
  if (rc == CLI_OK) {
    data_label_opts o;
    data_label_opts_default(&o);
    o.db = db;
    o.specs = specs;
    o.n_specs = n_specs;
    o.plan = plan;
    o.trials_min = trials_min;
    o.trials_max = trials_max;
    o.plateau = plateau;
    o.budget_s = budget;
    o.t_start = t_cmd;
    o.max_work = max_work;
    o.on_gpu = strcmp(target, "cuda") == 0 && !find_exhausted;
    o.retry_exhausted = retry_exhausted;
    o.find_exhausted = find_exhausted;
    if (no_pipeline) o.no_software_pipeline = true;
    o.threads = (int)threads;
    o.population = (int)population;
    o.repeats = (int)repeats;
    o.seed = (uint64_t)seed;
    o.compile_limit_s = compile_limit;
    o.cost_model = cost_model;
    o.progress = quiet ? NULL : stderr;
    if (!quiet)
      fprintf(stderr, "labelling %lld %s workloads of %s (shard %s) on %s, %s%s%s\n",
              (long long)n_specs, split_name, splits_path, shard ? shard : "0/1", target,
              search_build_id(), plan ? "; a plan compiled ahead: " : "", plan ? plan_dir : "");
    data_label_stats s;
    if (!data_label_run(&o, &s, &st)) {
      rc = cli_report("data label", &st);
    } else {
      if (find_exhausted) {
        printf("marked %lld workloads exhausted (%lld labelled before, %lld deferred, %lld "
               "failed) in %.0f s\n",
               (long long)s.exhausted, (long long)s.already, (long long)s.deferred,
               (long long)s.failed, s.wall_s);
      } else {
        printf("labelled %lld workloads (%lld already labelled, %lld of them spaces measured "
               "whole, %lld deferred, %lld failed); %lld candidates measured in %.0f s "
               "(%.1f/s)%s\n",
               (long long)s.labelled, (long long)s.already, (long long)s.exhausted,
               (long long)s.deferred, (long long)s.failed, (long long)s.measured, s.wall_s,
               s.wall_s > 0 ? (double)s.measured / s.wall_s : 0,
               s.budget_hit ? "; stopped at the budget" : "");
        if (plan)
          printf("plan: %lld workloads begun from it, %lld of its candidates measured (%d "
                 "workloads planned)\n",
                 (long long)s.planned, (long long)s.planned_cands, data_plan_count(plan));
      }
      printf("time: search %.1f s, cost model %.1f s, measurement %.1f s", s.t_search, s.t_model,
             s.t_measure);
      if (o.on_gpu)
        printf(" (lowering %.1f and NVRTC %.1f thread-s; waiting for the GPU %.1f s, for a "
               "compile %.1f s; GPU worker %.1f s, holding the GPU %.1f s; %lld compiled, %lld of them a source "
               "compiled before; references compiled in %.1f and run in %.1f thread-s)",
               s.t_lower, s.t_compile, s.t_gpu_wait, s.t_compile_wait, s.t_worker,
               s.t_held, (long long)s.compiled, (long long)s.cached, s.t_data_build, s.t_data_run);
      printf("\n");
      if (s.memory_full)
        printf("the GPU's memory was full for %lld candidates: not recorded, measured again by "
               "a later run\n",
               (long long)s.memory_full);
      if (s.failed) printf("first failure: %s\n", s.first_failure);
    }
  }
  search_db_close(db);
  data_plan_free(plan);
  free(specs);
  data_splits_free(t);
  free(rank_db);
  return rc;
}
