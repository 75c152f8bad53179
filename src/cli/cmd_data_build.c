/* cmd_data_build.c: `dragon data build`: the construction and refinement
 * examples of each split (data_build_examples) from the committed records
 * alone, no GPU: the shards of --records are merged into a database in
 * memory (or --db names one), and OUT/<split>.jsonl.zst is written for
 * each split asked for (zstd, atomically). The same records and splits
 * give the same bytes, so a fresh clone reproduces the committed examples.
 */
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli/cli.h"
#include "dragon/data.h"
#include "dragon/eval.h"
#include "dragon/search.h"

int cmd_data_build(int argc, char **argv) {
  const char *records = "data/records", *db_dir = NULL, *splits_path = DATA_SPLIT_FILE;
  const char *out_dir = "data/examples", *which = "train,val,test";
  int64_t max_priors = 3, threads = 0;
  double min_gain = 1.1, max_ratio = 10;
  bool quiet = false;
  const cli_opt opts[] = {
      {"--records", CLI_OPT_STR, &records, 0, 0, "the committed shards (a directory or one file)"},
      {"--db", CLI_OPT_STR, &db_dir, 0, 0, "read this database instead of --records"},
      {"--splits", CLI_OPT_STR, &splits_path, 0, 0, "the splits file"},
      {"--out", CLI_OPT_STR, &out_dir, 0, 0, "where OUT/<split>.jsonl.zst go"},
      {"--split", CLI_OPT_STR, &which, 0, 0, "the splits to build, comma-separated"},
      {"--max-priors", CLI_OPT_INT, &max_priors, 0, 64, "refinement priors per workload"},
      {"--min-gain", CLI_OPT_F64, &min_gain, 0, 0,
       "a target is at least this many times faster than its prior"},
      {"--max-prior-ratio", CLI_OPT_F64, &max_ratio, 0, 0,
       "priors at most this many times slower than the best"},
      {"--threads", CLI_OPT_INT, &threads, 0, 1024,
       "workloads built at once (0: every core); the same bytes whatever the count"},
      {"--quiet", CLI_OPT_FLAG, &quiet, 0, 0, "no progress lines"},
  };
  const cli_spec spec = {
      "data build",
      "[--records DIR | --db DIR] [--splits FILE] [--out DIR] [--split train,val,test]",
      "Builds the construction and refinement examples of each split from measured\n"
      "records alone: for each workload, the best correct record's TSEL graph (with\n"
      "why/expect lines) as a construction target, and refinements towards it from\n"
      "slower correct records of the same device and build. Every target and prior\n"
      "is admitted through the one road up to the build (it parses, names the\n"
      "workload, type-checks, lowers to exactly its record's trace, replays exactly,\n"
      "lowers and passes VerifyGPUCode); refusals are counted by gate. Writes\n"
      "OUT/<split>.jsonl.zst; the same records give the same bytes.",
      opts, (int)DG_ARRAY_LEN(opts), 0, 0};
  char **pos;
  int npos;
  int rc = cli_parse(&spec, argc, argv, &pos, &npos);
  if (rc == -1) return CLI_OK;
  if (rc != CLI_OK) return rc;
  free(pos);
  if (!(min_gain >= 1) || !(max_ratio >= min_gain)) {
    fprintf(stderr, "dragon data build: --min-gain must be >= 1 and --max-prior-ratio >= it\n");
    return CLI_USAGE;
  }
  /* the splits asked for, checked before anything is read */
  data_split list[DATA_SPLIT_COUNT];
  int n_list = 0;
  for (const char *p = which; *p;) {
    size_t n = strcspn(p, ",");
    data_split s;
    if (!data_split_from_name(p, n, &s)) {
      fprintf(stderr, "dragon data build: --split: '%.*s' is not a split\n", (int)n, p);
      return CLI_USAGE;
    }
    if (n_list < DATA_SPLIT_COUNT) list[n_list++] = s;
    p += n;
    if (*p == ',') p++;
  }
  dg_status st;
  data_splits *t = data_splits_load(splits_path, &st);
  if (!t) return cli_report("data build", &st);
  search_db *db = NULL;
  rc = CLI_OK;
  if (db_dir) {
    if (!search_db_open(db_dir, &db, &st)) rc = cli_report("data build", &st);
  } else {
    /* the shards merged in memory: nothing is written but the examples */
    int64_t added;
    int n_ok;
    search_db_open_memory(&db);
    if (cli_merge_shards(db, records, "data build", &added, &n_ok, &st) != 0)
      rc = st.code != DG_OK ? cli_report("data build", &st) : CLI_ERROR;
  }
  if (rc == CLI_OK && !dg_mkdirs(out_dir, &st)) rc = cli_report("data build", &st);
  for (int k = 0; k < n_list && rc == CLI_OK; k++) {
    data_build_opts o;
    data_build_opts_default(&o);
    o.db = db;
    o.splits = t;
    o.split = list[k];
    o.max_priors = (int)max_priors;
    o.min_gain = min_gain;
    o.max_prior_ratio = max_ratio;
    o.threads = (int)threads;
    o.progress = quiet ? NULL : stderr;
    dg_str text, z;
    dg_str_init(&text);
    dg_str_init(&z);
    data_build_stats s;
    char path[4096];
    snprintf(path, sizeof path, "%s/%s.jsonl.zst", out_dir, data_split_name(list[k]));
    if (!data_build_examples(&o, &text, &s, &st) ||
        !dg_zstd_pack(text.s ? text.s : "", text.len, 19, &z, &st) ||
        !dg_write_file_atomic(path, z.s ? z.s : "", z.len, &st)) {
      rc = cli_report("data build", &st);
    } else {
      printf("%s: %lld workloads -> %lld construction, %lld refinement examples (%zu bytes, "
             "%zu compressed)",
             path, (long long)s.workloads, (long long)s.construct, (long long)s.refine,
             text.len, z.len);
      int64_t refused = 0;
      for (int g = 0; g < EVAL_GATE_COUNT; g++) refused += s.refused[g];
      if (s.no_valid) printf("; %lld workloads without a correct record", (long long)s.no_valid);
      if (s.unreadable) printf("; %lld unreadable", (long long)s.unreadable);
      if (refused) {
        printf("; refused:");
        for (int g = 0; g < EVAL_GATE_COUNT; g++)
          if (s.refused[g]) printf(" %s %lld", eval_gate_name((eval_gate)g), (long long)s.refused[g]);
        printf(" (first: %s)", s.first_refusal);
      }
      printf("\n");
    }
    dg_str_free(&text);
    dg_str_free(&z);
  }
  search_db_close(db);
  data_splits_free(t);
  return rc;
}
