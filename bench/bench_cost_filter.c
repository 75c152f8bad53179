/* bench_cost_filter.c: would a saved cost model have let a labelling round
 * skip compiles? For every workload of a tuning database with at least
 * MIN measured candidates, the candidates are ranked by the saved model's
 * predicted score (a model fitted before these records were measured: it
 * has seen none of their workloads) and, beside that, taken in the order
 * the search measured them. Printed per k: the best correct time among the
 * k best predicted, and among the first k measured, as a fraction of the
 * best of all (1.0: the label kept), median, p10 and the share within 5%;
 * and how often the measured best is among the k best predicted.
 *
 * usage: bench_cost_filter DB COST_MODEL_DIR [MIN]
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dragon/search.h"

static const char usage[] = "usage: bench_cost_filter DB COST_MODEL_DIR [MIN]\n";

typedef struct {
  double pred, secs;
  int order;
} cand;

static int by_pred(const void *a, const void *b) {
  double x = ((const cand *)a)->pred, y = ((const cand *)b)->pred;
  return x < y ? 1 : x > y ? -1 : 0;
}
static int by_order(const void *a, const void *b) {
  return ((const cand *)a)->order - ((const cand *)b)->order;
}
static int cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return x < y ? -1 : x > y;
}

/* The best (least) correct time among the first k of c. */
static double best_of(const cand *c, int k) {
  double b = INFINITY;
  for (int i = 0; i < k; i++)
    if (c[i].secs < SEARCH_FAILED_SECS && c[i].secs < b) b = c[i].secs;
  return b;
}

enum { NK = 6 };
static const int ks[NK] = {8, 16, 24, 32, 40, 48};

int main(int argc, char **argv) {
  if (argc < 3 || argc > 4) {
    fputs(usage, stderr);
    return 2;
  }
  int min_n = argc == 4 ? atoi(argv[3]) : 64;
  dg_status st;
  search_db *db;
  if (!search_db_open_readonly(argv[1], &db, &st)) {
    fprintf(stderr, "bench_cost_filter: %s\n", st.msg);
    return 1;
  }
  search_xgb_opts xo;
  search_xgb_opts_default(&xo);
  search_cost_model *m = search_cost_model_new(&xo, 1);
  if (!search_cost_model_load(m, argv[2], &st)) {
    fprintf(stderr, "bench_cost_filter: %s\n", st.msg);
    return 1;
  }
  int n = search_db_record_count(db), nw = search_db_workload_count(db);
  search_features *feats = dg_calloc((size_t)(n ? n : 1), sizeof *feats);
  int *group = dg_calloc((size_t)(n ? n : 1), sizeof(int));
  search_db_features(db, 0, n, 0, feats, group, &st);
  /* per workload: its records in database order (the order measured) */
  int *count = dg_calloc((size_t)(nw ? nw : 1), sizeof(int));
  for (int i = 0; i < n; i++)
    if (group[i] >= 0) count[group[i]]++;
  double *pk[NK], *fk[NK];
  int hit[NK] = {0}, used = 0;
  for (int k = 0; k < NK; k++) {
    pk[k] = dg_calloc((size_t)(nw ? nw : 1), sizeof(double));
    fk[k] = dg_calloc((size_t)(nw ? nw : 1), sizeof(double));
  }
  search_features *wf = dg_calloc((size_t)(n ? n : 1), sizeof *wf);
  double *scores = dg_calloc((size_t)(n ? n : 1), sizeof(double));
  cand *c = dg_calloc((size_t)(n ? n : 1), sizeof *c);
  for (int w = 0; w < nw; w++) {
    if (count[w] < min_n) continue;
    int k = 0;
    for (int i = 0; i < n; i++)
      if (group[i] == w) {
        wf[k] = feats[i];
        c[k] = (cand){0, search_record_secs(search_db_record_at(db, i)), k};
        k++;
      }
    if (!search_cost_model_predict(m, wf, k, scores, &st)) {
      fprintf(stderr, "bench_cost_filter: %s\n", st.msg);
      return 1;
    }
    for (int i = 0; i < k; i++) c[i].pred = scores[i];
    double all = best_of(c, k);
    if (!isfinite(all)) continue;
    for (int j = 0; j < NK; j++) fk[j][used] = all / best_of(c, ks[j] < k ? ks[j] : k);
    qsort(c, (size_t)k, sizeof *c, by_pred);
    for (int j = 0; j < NK; j++) {
      double b = best_of(c, ks[j] < k ? ks[j] : k);
      pk[j][used] = isfinite(b) ? all / b : 0;
      hit[j] += b == all;
    }
    qsort(c, (size_t)k, sizeof *c, by_order);
    used++;
  }
  printf("%d workloads with >= %d records with features (of %d workloads, %d records)\n", used, min_n, nw, n);
  printf("| k | best of the k best predicted: median | p10 | within 5%% | holds the best | first k measured: median | p10 | within 5%% |\n");
  printf("|---:|---:|---:|---:|---:|---:|---:|---:|\n");
  for (int j = 0; j < NK && used; j++) {
    int w5p = 0, w5f = 0;
    for (int i = 0; i < used; i++) {
      w5p += pk[j][i] >= 0.95;
      w5f += fk[j][i] >= 0.95;
    }
    qsort(pk[j], (size_t)used, sizeof(double), cmp_double);
    qsort(fk[j], (size_t)used, sizeof(double), cmp_double);
    printf("| %d | %.3f | %.3f | %.0f%% | %.0f%% | %.3f | %.3f | %.0f%% |\n", ks[j], pk[j][used / 2],
           pk[j][used / 10], 100.0 * w5p / used, 100.0 * hit[j] / used, fk[j][used / 2], fk[j][used / 10],
           100.0 * w5f / used);
  }
  for (int i = 0; i < n; i++) search_features_free(&feats[i]);
  for (int k = 0; k < NK; k++) free(pk[k]), free(fk[k]);
  free(feats), free(group), free(count), free(wf), free(scores), free(c);
  search_cost_model_free(m);
  search_db_close(db);
  return 0;
}
