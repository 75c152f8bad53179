/* cost_model_db.c: the cost model and the records of a database.
 *
 * search_db_features replays each record's trace on its workload's kernel
 * (parsed once per workload from the database's kernel text) and extracts
 * the per-store features, on several threads. search_cost_model_fit_db
 * trains a model on the most recent records, one group per workload, so a
 * labelling run that starts on a fresh machine begins with a model that
 * knows every earlier workload (the warm start MetaSchedule gets from a
 * saved model).
 *
 * A record whose workload is unknown, whose kernel does not parse or whose
 * trace does not replay gets no features (n == 0) and group -1; the
 * callers count them.
 */
#include <string.h>

#include "dragon/rt_cuda.h"
#include "dragon/search.h"

typedef struct {
  const search_db *db;
  int first;
  dg_func **kernels;     /* per workload index, NULL: unparsed */
  const int *wl_of;      /* per record offset: workload index or -1 */
  search_features *feats;
} feat_job;

static void feature_task(void *p, int i) {
  feat_job *j = p;
  int w = j->wl_of[i];
  memset(&j->feats[i], 0, sizeof j->feats[i]);
  if (w < 0 || !j->kernels[w]) return;
  const search_record *r = search_db_record_at(j->db, j->first + i);
  dg_status st;
  sched_trace *t = sched_trace_from_json(r->trace, &st);
  if (!t) return;
  sched *s = sched_new(j->kernels[w], 0);
  if (sched_replay(s, t, false, false, &st) &&
      !search_features_extract(sched_func(s), true, &j->feats[i], &st))
    search_features_free(&j->feats[i]);
  sched_free(s);
  sched_trace_free(t);
}

bool search_db_features(const search_db *db, int first, int n, int threads,
                        search_features *feats, int *group, dg_status *st) {
  dg_status_ok(st);
  int nw = search_db_workload_count(db);
  dg_func **kernels = dg_calloc((size_t)(nw ? nw : 1), sizeof *kernels);
  bool *tried = dg_calloc((size_t)(nw ? nw : 1), sizeof(bool));
  for (int i = 0; i < n; i++) {
    const search_record *r = search_db_record_at(db, first + i);
    group[i] = -1;
    for (int w = 0; w < nw; w++)
      if (strcmp(search_db_workload_hash(db, w), r->workload) == 0) {
        group[i] = w;
        break;
      }
    int w = group[i];
    if (w >= 0 && !tried[w]) {
      tried[w] = true;
      dg_status pst;
      const char *hash = search_db_workload_hash(db, w);
      kernels[w] = ir_parse(search_db_workload_kernel(db, hash), hash, &pst);
    }
  }
  feat_job j = {db, first, kernels, group, feats};
  rt_tasks *t = rt_tasks_start(n, threads, feature_task, &j);
  while (rt_tasks_next(t, true) >= 0) {
  }
  rt_tasks_free(t);
  for (int i = 0; i < n; i++)
    if (group[i] >= 0 && feats[i].n == 0) group[i] = -1;
  for (int w = 0; w < nw; w++) ir_func_free(kernels[w]);
  free(kernels);
  free(tried);
  return true;
}

bool search_cost_model_fit_db(search_cost_model *m, const search_db *db, int max_records,
                              int threads, int *n_used, dg_status *st) {
  dg_status_ok(st);
  int total = search_db_record_count(db);
  int first = max_records > 0 && total > max_records ? total - max_records : 0;
  int n = total - first;
  if (n_used) *n_used = 0;
  if (n <= 0) return true;
  search_features *feats = dg_calloc((size_t)n, sizeof *feats);
  int *group = dg_calloc((size_t)n, sizeof(int));
  bool ok = search_db_features(db, first, n, threads, feats, group, st);
  int nw = search_db_workload_count(db), used = 0;
  search_features *gf = dg_calloc((size_t)n, sizeof *gf);
  double *gc = dg_calloc((size_t)n, sizeof(double));
  for (int w = 0; w < nw && ok; w++) {
    int k = 0;
    for (int i = 0; i < n; i++)
      if (group[i] == w) {
        gf[k] = feats[i];
        gc[k++] = search_record_secs(search_db_record_at(db, first + i));
      }
    if (k) search_cost_model_add(m, search_db_workload_hash(db, w), gf, gc, k);
    used += k;
  }
  if (ok && used) ok = search_cost_model_retrain(m, st);
  if (n_used) *n_used = used;
  for (int i = 0; i < n; i++) search_features_free(&feats[i]);
  free(feats);
  free(group);
  free(gf);
  free(gc);
  return ok;
}
