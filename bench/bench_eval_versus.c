/* bench_eval_versus.c: an evaluation already run, read against the search
 * afterwards (eval_versus_search, src/eval/versus.c): the tasks of a
 * `dragon eval` JSON (OUT/SPLIT.json of a timed run: each task's times,
 * its label's, its write and check seconds) against a tuning database of
 * the labels' records, as `dragon eval --search-db` reads a run it has
 * just made. Prints the per-family section; with a third argument writes
 * the cost-speed plane's points (the lines of OUT/SPLIT.search.tsv).
 *
 * usage: bench_eval_versus SPLIT.json SEARCH_DB [POINTS.tsv]
 */
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dragon/eval.h"
#include "dragon/search.h"

static const char usage[] = "usage: bench_eval_versus SPLIT.json SEARCH_DB [POINTS.tsv]\n";

int main(int argc, char **argv) {
  if (argc < 3 || argc > 4 || strcmp(argv[1], "--help") == 0) {
    fputs(usage, argc == 2 ? stdout : stderr);
    return argc == 2 ? 0 : 2;
  }
  json_error_t je;
  json_t *j = json_load_file(argv[1], 0, &je);
  json_t *ts = j ? json_object_get(j, "tasks") : NULL;
  if (!json_is_array(ts) || !json_is_true(json_object_get(j, "timed"))) {
    fprintf(stderr, "bench_eval_versus: %s: %s\n", argv[1], j ? "not a timed evaluation's JSON" : je.text);
    json_decref(j);
    return 1;
  }
  int n = (int)json_array_size(ts);
  eval_task *t = dg_calloc((size_t)(n ? n : 1), sizeof *t);
  for (int i = 0; i < n; i++) {
    json_t *x = json_array_get(ts, (size_t)i);
    const char *spec = json_string_value(json_object_get(x, "workload")),
               *family = json_string_value(json_object_get(x, "family"));
    if (!spec || !family) {
      fprintf(stderr, "bench_eval_versus: %s: task %d has no workload or family\n", argv[1], i + 1);
      return 1;
    }
    t[i].spec = (char *)spec;
    snprintf(t[i].family, sizeof t[i].family, "%s", family);
    t[i].gate = json_is_true(json_object_get(x, "correct")) ? EVAL_PASSED : EVAL_GATE_LOWER;
    t[i].secs = json_number_value(json_object_get(x, "secs"));
    t[i].baseline_secs = json_number_value(json_object_get(x, "baseline_secs"));
    t[i].label_secs = json_number_value(json_object_get(x, "label_secs"));
    t[i].t_write = json_number_value(json_object_get(x, "write_s"));
    t[i].t_check = json_number_value(json_object_get(x, "check_s"));
  }
  eval_result r = {.tasks = t, .n = n, .timed = true};
  search_db *db;
  dg_status st;
  if (!search_db_open_readonly(argv[2], &db, &st)) {
    fprintf(stderr, "bench_eval_versus: %s\n", st.msg);
    return 1;
  }
  eval_versus v;
  int rc = 0;
  if (eval_versus_search(&r, db, &v, &st)) {
    char *table = eval_versus_table(&v);
    fputs(table, stdout);
    free(table);
    if (argc == 4) {
      dg_str p;
      dg_str_init(&p);
      eval_versus_points(&v, &p);
      if (!dg_write_file_atomic(argv[3], p.s ? p.s : "", p.len, &st)) {
        fprintf(stderr, "bench_eval_versus: %s\n", st.msg);
        rc = 1;
      }
      dg_str_free(&p);
    }
    eval_versus_free(&v);
  } else {
    fprintf(stderr, "bench_eval_versus: %s\n", st.msg);
    rc = 1;
  }
  search_db_close(db);
  free(t);
  json_decref(j);
  return rc;
}
