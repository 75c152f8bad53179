/* cmd_data_plan.c: `dragon data plan`: the next workloads' first labelling
 * round compiled ahead, on a machine without a GPU (plan.c), for a
 * labelling run on the GPU machine to take (`data label --plan DIR`). */
#include <stdlib.h>
#include <string.h>

#include "cli/cli.h"
#include "dragon/data.h"
#include "dragon/rt_cuda.h"
#include "dragon/search.h"

int cmd_data_plan(int argc, char **argv) {
  const char *splits_path = DATA_SPLIT_FILE, *split_name = "train", *db_dir = NULL;
  const char *shard = NULL, *records = NULL, *cost_model = NULL, *out_dir = NULL;
  const char *arch = "sm_90";
  int64_t first = 0, skip = 0, trials_min = 64, threads = 0, population = 256, seed = 1;
  int64_t max_mb = 16;
  double budget = 0, max_work = 1e10, compile_limit = 5;
  bool no_pipeline = false, quiet = false;
  const cli_opt opts[] = {
      {"--out", CLI_OPT_STR, &out_dir, 0, 0, "the plan's directory (created; a rerun adds to it)"},
      {"--db", CLI_OPT_STR, &db_dir, 0, 0,
       "a database of the committed records (created if needed): what it has begun is not "
       "planned"},
      {"--records", CLI_OPT_STR, &records, 0, 0,
       "merge every shard (*.jsonl.zst) of this directory into the database first"},
      {"--split", CLI_OPT_STR, &split_name, 0, 0, "which split (train, val, test, ...)"},
      {"--splits", CLI_OPT_STR, &splits_path, 0, 0, "the splits file"},
      {"--first", CLI_OPT_INT, &first, 0, INT64_MAX, "at most the first N workloads (0: all)"},
      {"--skip", CLI_OPT_INT, &skip, 0, INT64_MAX, "start after the split's first N workloads"},
      {"--shard", CLI_OPT_STR, &shard, 0, 0, "R/S: every S-th workload from the R-th"},
      {"--trials-min", CLI_OPT_INT, &trials_min, 1, 100000,
       "candidates of the first round (the labeller's --trials-min)"},
      {"--cost-model", CLI_OPT_STR, &cost_model, 0, 0,
       "the saved cost model the labelling run loads (`dragon db model`)"},
      {"--arch", CLI_OPT_STR, &arch, 0, 0, "the GPU's architecture (sm_90: H100, H200)"},
      {"--max-mb", CLI_OPT_INT, &max_mb, 1, 1 << 20,
       "stop once the plan holds this many MiB (what a GPU call can carry)"},
      {"--budget-s", CLI_OPT_F64, &budget, 0, 0, "wall seconds for the run (0: no limit)"},
      {"--max-work", CLI_OPT_F64, &max_work, 0, 0,
       "leave out workloads whose float64 reference takes more operations (as the labelling "
       "run defers them: scripts/gpu_label.sh passes 1e10)"},
      {"--threads", CLI_OPT_INT, &threads, 0, 1024, "threads searching and compiling (0: all cores)"},
      {"--population", CLI_OPT_INT, &population, 4, 65536, "population of the evolutionary search"},
      {"--seed", CLI_OPT_INT, &seed, 0, INT64_MAX, "random seed"},
      {"--compile-limit", CLI_OPT_F64, &compile_limit, 0, 0,
       "NVRTC wall seconds before a candidate is stopped and left out (the labeller's)"},
      {"--no-pipeline", CLI_OPT_FLAG, &no_pipeline, 0, 0, "leave out the software-pipeline sketches"},
      {"--quiet", CLI_OPT_FLAG, &quiet, 0, 0, "no progress lines"},
  };
  const cli_spec spec = {
      "data plan",
      "--out DIR --db DIR [--records DIR] [--split S] [--cost-model DIR] [--max-mb N]",
      "Compiles ahead, without a GPU, the first labelling round of the workloads a\n"
      "labelling run would begin next (the split's order; those the database has\n"
      "begun are left out): each one's candidates drawn by the search with the saved\n"
      "cost model, as `data label` draws them, and compiled by NVRTC for --arch as\n"
      "the GPU machine would. The plan (part files plan-*.zst: traces, CUDA sources,\n"
      "images) goes to the GPU machine with the labelling run (`data label --plan\n"
      "DIR`), which measures each planned workload's candidates as its first round\n"
      "without compiling them. Stops at --max-mb or --budget-s; a rerun adds to the\n"
      "plan.",
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
  if (!out_dir || !db_dir) {
    fprintf(stderr, "dragon data plan: --out DIR and --db DIR are required\n");
    return CLI_USAGE;
  }
  if (!(budget >= 0) || !(max_work >= 0) || !(compile_limit >= 0)) {
    fprintf(stderr, "dragon data plan: --budget-s, --max-work and --compile-limit must not be "
                    "negative\n");
    return CLI_USAGE;
  }
  cli_split_args sa = {splits_path, split_name, shard, skip, first};
  data_splits *t;
  const char **specs;
  int64_t n_specs;
  rc = cli_split_specs("data plan", &sa, &t, &specs, &n_specs);
  if (rc != CLI_OK) return rc;
  dg_status st;
  search_db *db;
  if (!search_db_open(db_dir, &db, &st)) {
    free(specs);
    data_splits_free(t);
    return cli_report("data plan", &st);
  }
  rc = cli_merge_records(db, records, "data plan", quiet);
  if (rc == CLI_OK && !rt_nvrtc_available(&st)) rc = cli_report("data plan", &st);
  if (rc == CLI_OK) {
    data_plan_opts o;
    data_plan_opts_default(&o);
    o.db = db;
    o.specs = specs;
    o.n_specs = n_specs;
    o.out_dir = out_dir;
    o.trials_min = trials_min;
    o.population = (int)population;
    o.seed = (uint64_t)seed;
    o.threads = (int)threads;
    o.cost_model = cost_model;
    o.arch = arch;
    o.compile_limit_s = compile_limit;
    o.budget_s = budget;
    o.max_work = max_work;
    o.max_bytes = max_mb << 20;
    if (no_pipeline) o.no_software_pipeline = true;
    o.progress = quiet ? NULL : stderr;
    if (!quiet)
      fprintf(stderr, "planning %lld %s workloads of %s (shard %s) for %s into %s, %s\n",
              (long long)n_specs, split_name, splits_path, shard ? shard : "0/1", arch, out_dir,
              search_build_id());
    data_plan_stats s;
    if (!data_plan_run(&o, &s, &st)) {
      rc = cli_report("data plan", &st);
    } else {
      printf("planned %lld workloads, %lld candidates compiled (%lld more did not build; %lld "
             "workloads begun before or planned, %lld deferred, %lld failed) in %.0f s "
             "(search %.0f s, compiling %.0f s); the plan holds %.1f MiB in %lld new files%s\n",
             (long long)s.planned, (long long)s.cands, (long long)s.not_compiled,
             (long long)s.already, (long long)s.deferred, (long long)s.failed, s.wall_s,
             s.t_search, s.t_compile, (double)s.bytes / (1 << 20), (long long)s.files,
             s.full ? "; stopped at --max-mb" : s.budget_hit ? "; stopped at the budget" : "");
      if (s.failed) printf("first failure: %s\n", s.first_failure);
    }
  }
  search_db_close(db);
  free(specs);
  data_splits_free(t);
  return rc;
}
