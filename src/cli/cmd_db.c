/* cmd_db.c: `dragon db`: queries of a tuning database, and moving its
 * records.
 *   best SPEC      the best record of a workload: latency, target, date, and
 *                  its trace JSON on the next line
 *   merge SRC...   adds the records of shards, directories of shards or
 *                  other databases (search_db_merge_shard, search_db_merge)
 *   pack --out F   the records, baselines and marks not yet in the shards of
 *                  --except DIR, as one new shard (search_db_write_shard)
 *   model --out DIR    the cost model fitted on the database's last records
 *                  (search_cost_model_fit_db) and saved, for runs to start
 *                  from (`dragon data label --cost-model`)
 *   export --tvm OUT   TVM's database_workload.json and
 *                  database_tuning_record.json (search_db_export_tvm)
 *   recall         the cost model's ranking quality on the database: every
 *                  fifth record of each workload held out, the model trained
 *                  on the others, top-1 and top-5 recall on the held-out ones
 * Warnings about skipped lines go to stderr as the database loads. Only
 * merge opens --db for writing (taking its writer lock); best, export,
 * recall and pack open it read-only and never modify it.
 */
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli/cli.h"
#include "dragon/search.h"
#include "dragon/wl.h"

static int db_best(search_db *db, const char *arg) {
  dg_status st;
  dg_func *f = cli_load_kernel(arg, &st);
  if (!f) return cli_report("db", &st);
  char hash[21];
  snprintf(hash, sizeof hash, "%llu", (unsigned long long)ir_func_hash(f));
  ir_func_free(f);
  const search_record *r = NULL;
  if (search_db_top_k(db, hash, 1, &r) != 1) {
    fprintf(stderr, "dragon db: %s: no valid record in the database (%d records of it)\n", arg,
            search_db_workload_trials(db, hash));
    return CLI_ERROR;
  }
  if (r->n_copies > 1)
    printf("%s: best %.3f us (the median of %d copies of its record, target %s, %s, of %d "
           "records)\n",
           arg, search_record_secs(r) * 1e6, r->n_copies, r->target, r->date,
           search_db_workload_trials(db, hash));
  else
    printf("%s: best %.3f us (%d runs, target %s, %s, of %d records)\n", arg,
           search_record_secs(r) * 1e6, r->n_secs, r->target, r->date,
           search_db_workload_trials(db, hash));
  printf("%s\n", r->trace);
  return CLI_OK;
}

static int db_recall(search_db *db, int64_t seed) {
  dg_status st;
  int n = search_db_record_count(db);
  search_features *feats = dg_calloc((size_t)(n ? n : 1), sizeof *feats);
  double *costs = dg_calloc((size_t)(n ? n : 1), sizeof(double));
  int *group = dg_calloc((size_t)(n ? n : 1), sizeof(int));
  bool *held = dg_calloc((size_t)(n ? n : 1), 1);
  int nw = search_db_workload_count(db), used = 0, skipped = 0;
  search_db_features(db, 0, n, 0, feats, group, &st);
  int *seen = dg_calloc((size_t)(nw ? nw : 1), sizeof(int));
  for (int i = 0; i < n; i++) {
    if (group[i] < 0) {
      skipped++;
      continue;
    }
    costs[i] = search_record_secs(search_db_record_at(db, i));
    held[i] = seen[group[i]]++ % 5 == 0;
    used++;
  }
  free(seen);
  search_xgb_opts xo;
  search_xgb_opts_default(&xo);
  xo.num_warmup_samples = 0;
  search_cost_model *m = search_cost_model_new(&xo, (uint64_t)seed);
  int rc = CLI_OK, n_train = 0, n_test = 0;
  search_features *tf = dg_calloc((size_t)(n ? n : 1), sizeof *tf);
  double *tc = dg_calloc((size_t)(n ? n : 1), sizeof(double));
  int *tg = dg_calloc((size_t)(n ? n : 1), sizeof(int));
  for (int w = 0; w < nw && rc == CLI_OK; w++) {
    int k = 0;
    for (int i = 0; i < n; i++)
      if (feats[i].n && group[i] == w && !held[i]) {
        tf[k] = feats[i];
        tc[k++] = costs[i];
      }
    n_train += k;
    if (k && !search_cost_model_update(m, search_db_workload_hash(db, w), tf, tc, k, &st))
      rc = cli_report("db", &st);
  }
  for (int i = 0; i < n; i++)
    if (feats[i].n && held[i]) {
      tf[n_test] = feats[i];
      tc[n_test] = costs[i];
      tg[n_test++] = group[i];
    }
  search_recall rec;
  if (rc == CLI_OK && n_test && search_cost_model_recall(m, tf, tc, tg, n_test, &rec, &st)) {
    printf("records %d used (%d skipped): trained on %d, held out %d, over %d workloads\n",
           used, skipped, n_train, n_test, rec.n_groups);
    printf("top-1 recall %.3f  top-5 recall %.3f\n", rec.top1, rec.top5);
  } else if (rc == CLI_OK) {
    fprintf(stderr, "dragon db: recall: %s\n",
            n_test ? st.msg : "no usable records to hold out");
    rc = CLI_ERROR;
  }
  search_cost_model_free(m);
  for (int i = 0; i < n; i++) search_features_free(&feats[i]);
  free(feats);
  free(costs);
  free(group);
  free(held);
  free(tf);
  free(tc);
  free(tg);
  return rc;
}

/* merge SRC...: every source into db. */
static int db_merge(search_db *db, char **src, int n) {
  int rc = CLI_OK;
  int64_t total = 0;
  for (int i = 0; i < n; i++) {
    int64_t added = 0;
    int ok = 0;
    dg_status st;
    int bad = cli_merge_shards(db, src[i], "db", &added, &ok, &st);
    if (bad < 0) return cli_report("db", &st);
    if (bad > 0) rc = CLI_ERROR;
    total += added;
  }
  printf("merged: %lld records, baselines and exhausted marks added; the database holds %d "
         "workloads, %d records, %d baselines, %d exhausted marks\n",
         (long long)total, search_db_workload_count(db), search_db_record_count(db),
         search_db_baseline_count(db), search_db_exhausted_count(db));
  return rc;
}

/* model --out DIR: the warm start of a labelling run, done once. */
static int db_model(search_db *db, const char *out, int64_t max_records, int64_t threads,
                    int64_t seed) {
  search_xgb_opts xo;
  search_xgb_opts_default(&xo);
  /* a job of its own: XGBoost trains on the cores the replays use (the
   * default of one thread suits a model retrained beside compilers) */
  xo.nthread = (int)threads;
  search_cost_model *m = search_cost_model_new(&xo, (uint64_t)seed);
  dg_status st;
  int used = 0;
  double t0 = dg_now();
  int rc = CLI_OK;
  if (!search_cost_model_fit_db(m, db, (int)max_records, (int)threads, &used, &st) ||
      !search_cost_model_save(m, out, &st))
    rc = cli_report("db", &st);
  else
    printf("wrote the cost model to %s: %d records with features, fitted in %.1f s\n", out, used,
           dg_now() - t0);
  search_cost_model_free(m);
  return rc;
}

/* pack --out FILE [--except DIR]: what db holds beyond the shards of DIR. */
static int db_pack(search_db *db, const char *out, const char *except) {
  dg_status st;
  search_db *ex = NULL;
  if (except) {
    search_db_open_memory(&ex); /* the shards of --except, merged in memory */
    int64_t added;
    int ok;
    if (cli_merge_shards(ex, except, "db", &added, &ok, &st) < 0) {
      search_db_close(ex);
      return cli_report("db", &st);
    }
  }
  int64_t n = 0;
  bool ok = search_db_write_shard(db, ex, out, &n, &st);
  search_db_close(ex);
  if (!ok) return cli_report("db", &st);
  if (n) printf("wrote %s: %lld records, baselines and exhausted marks\n", out, (long long)n);
  else printf("nothing new to pack: no file written\n");
  return CLI_OK;
}

int cmd_db(int argc, char **argv) {
  const char *db_dir = NULL, *tvm = NULL, *out = NULL, *except = NULL;
  int64_t seed = 1, max_records = 20000, threads = 0;
  const cli_opt opts[] = {
      {"--db", CLI_OPT_STR, &db_dir, 0, 0, "tuning database directory"},
      {"--tvm", CLI_OPT_STR, &tvm, 0, 0, "export: the output directory for TVM's files"},
      {"--seed", CLI_OPT_INT, &seed, 0, INT64_MAX, "recall: the cost model's seed"},
      {"--out", CLI_OPT_STR, &out, 0, 0,
       "pack: the shard to write (*.jsonl.zst); model: the model's directory"},
      {"--max-records", CLI_OPT_INT, &max_records, 0, INT32_MAX,
       "model: fit on the database's last N records (0: all)"},
      {"--threads", CLI_OPT_INT, &threads, 0, 1024, "model: threads replaying traces (0: all cores)"},
      {"--except", CLI_OPT_STR, &except, 0, 0,
       "pack: leave out what these shards (a file or a directory of them) hold"},
  };
  const cli_spec spec = {
      "db",
      "best SPEC --db DIR | export --db DIR --tvm OUT | recall --db DIR | merge SRC... --db DIR\n"
      "       | pack --db DIR --out FILE [--except DIR] | model --db DIR --out DIR",
      "Queries a tuning database (the directory `dragon tune --db` writes) and moves\n"
      "its records.\n"
      "  best SPEC   the fastest valid record of a workload and its trace JSON\n"
      "  export      TVM's JSONDatabase files (base64 kernel text in place of\n"
      "              TVM's SaveJSON module; docs/search.md)\n"
      "  recall      the XGBoost cost model's top-1 / top-5 recall on held-out\n"
      "              records (every fifth of each workload)\n"
      "  merge SRC   adds the workloads, records, baselines and exhausted marks of\n"
      "              each SRC (a shard *.jsonl.zst, a directory of shards, or a\n"
      "              database directory) that the database lacks; an unreadable\n"
      "              shard is reported and skipped (exit 1)\n"
      "  pack        writes the records, baselines and exhausted marks that the\n"
      "              shards of --except lack as one new shard (zstd, checksummed;\n"
      "              nothing when none)\n"
      "  model       fits the XGBoost cost model on the last --max-records records\n"
      "              (the warm start of `dragon data label`) and saves it to --out, for\n"
      "              labelling runs to load with --cost-model instead",
      opts, (int)DG_ARRAY_LEN(opts), 1, -1};
  char **pos;
  int npos;
  int rc = cli_parse(&spec, argc, argv, &pos, &npos);
  if (rc == -1) return CLI_OK;
  if (rc != CLI_OK) return rc;
  const char *action = pos[0];
  bool is_best = strcmp(action, "best") == 0, is_export = strcmp(action, "export") == 0,
       is_recall = strcmp(action, "recall") == 0, is_merge = strcmp(action, "merge") == 0,
       is_pack = strcmp(action, "pack") == 0, is_model = strcmp(action, "model") == 0;
  if (!is_best && !is_export && !is_recall && !is_merge && !is_pack && !is_model) {
    fprintf(stderr, "dragon db: unknown action '%s' (best, export, recall, merge, pack, model)\n",
            action);
    free(pos);
    return CLI_USAGE;
  }
  bool pos_ok = is_best ? npos == 2 : is_merge ? npos >= 2 : npos == 1;
  if (!db_dir || !pos_ok || (is_export && !tvm) || ((is_pack || is_model) && !out)) {
    fprintf(stderr, "dragon db: usage: dragon db %s\n", spec.synopsis);
    free(pos);
    return CLI_USAGE;
  }
  /* only merge writes into --db; the other actions read it and must not
   * change a byte of it (a tuner may be appending as they run) */
  dg_status st;
  search_db *db;
  bool opened = is_merge ? search_db_open(db_dir, &db, &st)
                         : search_db_open_readonly(db_dir, &db, &st);
  if (!opened) {
    free(pos);
    return cli_report("db", &st);
  }
  if (is_best) {
    rc = db_best(db, pos[1]);
  } else if (is_export) {
    if (search_db_export_tvm(db, tvm, &st))
      printf("wrote %s/database_workload.json (%d workloads) and "
             "%s/database_tuning_record.json (%d records)\n",
             tvm, search_db_workload_count(db), tvm, search_db_record_count(db));
    else
      rc = cli_report("db", &st);
  } else if (is_merge) {
    rc = db_merge(db, pos + 1, npos - 1);
  } else if (is_pack) {
    rc = db_pack(db, out, except);
  } else if (is_model) {
    rc = db_model(db, out, max_records, threads, seed);
  } else {
    rc = db_recall(db, seed);
  }
  search_db_close(db);
  free(pos);
  return rc;
}
