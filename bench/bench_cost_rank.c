/* bench_cost_rank.c: a saved cost model ranking schedules a model wrote.
 * Every graph is lowered to its trace (`postproc default` as dragon runs
 * it), replayed on its workload's kernel and scored by the cost model.
 *
 * pairs: does the cost model order two measured schedules of one workload
 * as the GPU did? Each input line is a JSON object {"workload": spec, "a":
 * TSEL graph, "a_secs": s, "b": graph, "b_secs": s} (a model's output and
 * the search's label, timed in one run). Printed: the pairs it orders as
 * measured, overall and by how far apart the two times are, and the speed
 * its pick of the pair keeps against the faster of the two.
 *
 * pick: each input line {"workload": spec, "graphs": [graph, ...]} (one
 * task's samples, the first the greedy one); writes {"workload", "graph",
 * "pick", "scores"} lines, graph the best scored of those that lower and
 * replay (the first where none scores), for `dragon eval --graphs`.
 *
 * usage: bench_cost_rank pairs PAIRS.jsonl COST_MODEL_DIR
 *        bench_cost_rank pick SAMPLES.jsonl COST_MODEL_DIR OUT.jsonl
 */
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dragon/search.h"
#include "dragon/tsel.h"
#include "dragon/wl.h"

static const char usage[] =
    "usage: bench_cost_rank pairs PAIRS.jsonl COST_MODEL_DIR\n"
    "       bench_cost_rank pick SAMPLES.jsonl COST_MODEL_DIR OUT.jsonl\n";

/* The features of graph text on kernel f, false with st set. */
static bool features_of(const dg_func *f, const char *text, search_features *out, dg_status *st) {
  tsel_graph *g = tsel_parse(text, "graph", st);
  if (!g) return false;
  sched_trace *t = tsel_lower(g, st);
  tsel_graph_free(g);
  if (!t) return false;
  sched *s = sched_new(f, 0);
  bool ok = sched_replay(s, t, false, false, st) && search_features_extract(sched_func(s), true, out, st);
  sched_free(s);
  sched_trace_free(t);
  return ok;
}

static int cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return x < y ? -1 : x > y;
}

enum { NB = 4 };
static const double bands[NB + 1] = {1.0, 1.1, 1.5, 2.0, INFINITY};

static int pairs(const char *path, FILE *in, search_cost_model *m) {
  dg_status st;
  int n = 0, skipped = 0, agree = 0, band_n[NB] = {0}, band_agree[NB] = {0};
  double *kept = NULL;
  int cap = 0;
  char *line = NULL;
  size_t cap_line = 0;
  int lineno = 0;
  while (getline(&line, &cap_line, in) > 0) {
    lineno++;
    json_error_t je;
    json_t *j = json_loads(line, 0, &je);
    const char *spec = json_string_value(json_object_get(j, "workload")),
               *a = json_string_value(json_object_get(j, "a")), *b = json_string_value(json_object_get(j, "b"));
    double as = json_number_value(json_object_get(j, "a_secs")), bs = json_number_value(json_object_get(j, "b_secs"));
    if (!spec || !a || !b || !(as > 0) || !(bs > 0)) {
      fprintf(stderr, "bench_cost_rank: %s:%d: not a pair\n", path, lineno);
      json_decref(j);
      free(line);
      return 1;
    }
    dg_func *f = wl_build(spec, &st);
    search_features fe[2] = {0};
    double sc[2];
    if (!f || !features_of(f, a, &fe[0], &st) || !features_of(f, b, &fe[1], &st) ||
        !search_cost_model_predict(m, fe, 2, sc, &st)) {
      fprintf(stderr, "bench_cost_rank: %s:%d: %s\n", path, lineno, st.msg);
      skipped++;
    } else {
      double ratio = as > bs ? as / bs : bs / as;
      bool ok = (sc[0] > sc[1]) == (as < bs);
      int k = 0;
      while (k + 1 < NB && ratio >= bands[k + 1]) k++;
      band_n[k]++;
      band_agree[k] += ok;
      agree += ok;
      if (n == cap) kept = realloc(kept, sizeof *kept * (size_t)(cap = cap ? 2 * cap : 64));
      double picked = sc[0] >= sc[1] ? as : bs;
      kept[n++] = fmin(as, bs) / picked;
    }
    search_features_free(&fe[0]);
    search_features_free(&fe[1]);
    ir_func_free(f);
    json_decref(j);
  }
  printf("%d pairs scored (%d skipped): the model orders %d as measured (%.0f%%)\n", n, skipped, agree,
         n ? 100.0 * agree / n : 0);
  for (int k = 0; k < NB; k++)
    if (band_n[k])
      printf("  times %.1fx to %.1fx apart: %d of %d\n", bands[k], bands[k + 1], band_agree[k], band_n[k]);
  if (n) {
    qsort(kept, (size_t)n, sizeof *kept, cmp_double);
    double lg = 0;
    for (int i = 0; i < n; i++) lg += log(kept[i]);
    printf("the pick against the faster of the pair: median %.3f, p10 %.3f, geomean %.3f\n", kept[n / 2],
           kept[n / 10], exp(lg / n));
  }
  free(kept);
  free(line);
  return 0;
}

static int pick(const char *path, FILE *in, search_cost_model *m, FILE *out) {
  char *line = NULL;
  size_t cap_line = 0;
  int lineno = 0, tasks = 0, moved = 0, scored = 0, samples = 0;
  while (getline(&line, &cap_line, in) > 0) {
    lineno++;
    json_error_t je;
    json_t *j = json_loads(line, 0, &je);
    const char *spec = json_string_value(json_object_get(j, "workload"));
    json_t *gs = json_object_get(j, "graphs");
    int n = (int)json_array_size(gs);
    if (!spec || n < 1) {
      fprintf(stderr, "bench_cost_rank: %s:%d: not a task's samples\n", path, lineno);
      json_decref(j);
      free(line);
      return 1;
    }
    dg_status st;
    dg_func *f = wl_build(spec, &st);
    if (!f) {
      fprintf(stderr, "bench_cost_rank: %s:%d: %s\n", path, lineno, st.msg);
      json_decref(j);
      free(line);
      return 1;
    }
    json_t *scores = json_array();
    int best = -1;
    double best_score = -INFINITY;
    for (int k = 0; k < n; k++) {
      const char *g = json_string_value(json_array_get(gs, (size_t)k));
      search_features fe = {0};
      double sc;
      bool ok = g && features_of(f, g, &fe, &st) && search_cost_model_predict(m, &fe, 1, &sc, &st);
      search_features_free(&fe);
      json_array_append_new(scores, ok ? json_real(sc) : json_null());
      samples++;
      scored += ok;
      if (ok && sc > best_score) best_score = sc, best = k;
    }
    if (best < 0) best = 0;
    moved += best != 0;
    tasks++;
    json_t *o = json_pack("{s:s, s:O, s:i, s:o}", "workload", spec, "graph", json_array_get(gs, (size_t)best),
                          "pick", best, "scores", scores);
    char *text = json_dumps(o, JSON_COMPACT);
    fprintf(out, "%s\n", text);
    free(text);
    json_decref(o);
    ir_func_free(f);
    json_decref(j);
  }
  printf("%d tasks, %d samples (%d scored): the pick is not the first sample on %d\n", tasks, samples, scored,
         moved);
  free(line);
  return 0;
}

int main(int argc, char **argv) {
  bool is_pick = argc == 5 && strcmp(argv[1], "pick") == 0;
  if (!is_pick && !(argc == 4 && strcmp(argv[1], "pairs") == 0)) {
    fputs(usage, stderr);
    return 2;
  }
  FILE *in = fopen(argv[2], "r");
  if (!in) {
    perror(argv[2]);
    return 1;
  }
  dg_status st;
  tsel_set_postprocessor(search_postproc_cuda, NULL); /* `postproc default`: the GPU's, as dragon runs it */
  search_xgb_opts xo;
  search_xgb_opts_default(&xo);
  search_cost_model *m = search_cost_model_new(&xo, 1);
  if (!search_cost_model_load(m, argv[3], &st)) {
    fprintf(stderr, "bench_cost_rank: %s\n", st.msg);
    return 1;
  }
  int rc;
  if (is_pick) {
    FILE *out = fopen(argv[4], "w");
    if (!out) {
      perror(argv[4]);
      return 1;
    }
    rc = pick(argv[2], in, m, out);
    if (fclose(out) != 0) rc = 1;
  } else {
    rc = pairs(argv[2], in, m);
  }
  fclose(in);
  search_cost_model_free(m);
  return rc;
}
