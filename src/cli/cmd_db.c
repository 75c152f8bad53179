/* cmd_db.c: `dragon db`: queries of a tuning database.
 *   best SPEC      the best record of a workload: latency, target, date, and
 *                  its trace JSON on the next line
 *   export --tvm OUT   TVM's database_workload.json and
 *                  database_tuning_record.json (search_db_export_tvm)
 *   recall         the cost model's ranking quality on the database: every
 *                  fifth record of each workload held out, the model trained
 *                  on the others, top-1 and top-5 recall on the held-out ones
 * Warnings about skipped lines go to stderr as the database loads.
 */
#include <string.h>

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
  for (int w = 0; w < nw; w++) {
    const char *hash = search_db_workload_hash(db, w);
    dg_func *f = ir_parse(search_db_workload_kernel(db, hash), hash, &st);
    if (!f) {
      skipped += search_db_workload_trials(db, hash);
      continue;
    }
    int k = 0;
    for (int i = 0; i < n; i++) {
      const search_record *r = search_db_record_at(db, i);
      if (strcmp(r->workload, hash) != 0) continue;
      sched_trace *t = sched_trace_from_json(r->trace, &st);
      sched *s = t ? sched_new(f, 0) : NULL;
      if (!s || !sched_replay(s, t, false, false, &st) ||
          !search_features_extract(sched_func(s), true, &feats[i], &st)) {
        skipped++;
      } else {
        costs[i] = search_record_secs(r);
        group[i] = w;
        held[i] = k++ % 5 == 0;
        used++;
      }
      sched_free(s);
      sched_trace_free(t);
    }
    ir_func_free(f);
  }
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

int cmd_db(int argc, char **argv) {
  const char *db_dir = NULL, *tvm = NULL;
  int64_t seed = 1;
  const cli_opt opts[] = {
      {"--db", CLI_OPT_STR, &db_dir, 0, 0, "tuning database directory"},
      {"--tvm", CLI_OPT_STR, &tvm, 0, 0, "export: the output directory for TVM's files"},
      {"--seed", CLI_OPT_INT, &seed, 0, INT64_MAX, "recall: the cost model's seed"},
  };
  const cli_spec spec = {
      "db",
      "best SPEC --db DIR | export --db DIR --tvm OUT | recall --db DIR",
      "Queries a tuning database (the directory `dragon tune --db` writes).\n"
      "  best SPEC   the fastest valid record of a workload and its trace JSON\n"
      "  export      TVM's JSONDatabase files (base64 kernel text in place of\n"
      "              TVM's SaveJSON module; docs/search.md)\n"
      "  recall      the XGBoost cost model's top-1 / top-5 recall on held-out\n"
      "              records (every fifth of each workload)",
      opts, (int)DG_ARRAY_LEN(opts), 1, 2};
  char **pos;
  int npos;
  int rc = cli_parse(&spec, argc, argv, &pos, &npos);
  if (rc == -1) return CLI_OK;
  if (rc != CLI_OK) return rc;
  const char *action = pos[0];
  bool is_best = strcmp(action, "best") == 0, is_export = strcmp(action, "export") == 0,
       is_recall = strcmp(action, "recall") == 0;
  if (!is_best && !is_export && !is_recall) {
    fprintf(stderr, "dragon db: unknown action '%s' (best, export, recall)\n", action);
    free(pos);
    return CLI_USAGE;
  }
  if (!db_dir || (is_best && npos != 2) || (!is_best && npos != 1) || (is_export && !tvm)) {
    fprintf(stderr, "dragon db: usage: dragon db %s\n", spec.synopsis);
    free(pos);
    return CLI_USAGE;
  }
  dg_status st;
  search_db *db;
  if (!search_db_open(db_dir, &db, &st)) {
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
  } else {
    rc = db_recall(db, seed);
  }
  search_db_close(db);
  free(pos);
  return rc;
}
