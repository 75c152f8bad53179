/* versus.c: the model against the search, per family (eval.h,
 * eval_versus_search): for each task whose output passed and whose search
 * label was timed beside it, the output's speed and cost against what the
 * search had after 64, 256 and 1,000 trials, and after as many seconds as
 * the model took.
 *
 * The search is read from its records (a tuning database: the labels'
 * records), in the order they were measured: the workload's records on the
 * device of its best one, each a trial. The best within the first N trials
 * is read against the best of all (the label), both from that labelling
 * run, and scaled to this run by the label's time here, so the output and
 * the search are compared at one run's clock:
 *
 *   search@N's time here = label_secs x best(first N) / best(all)
 *
 * A search that stopped before N trials is at N only where it measured its
 * whole space (an exhausted mark); else it has no point at N. The search's
 * wall time at N trials is N times its mean seconds a trial in that run
 * (from its first record's date to its last, pauses of more than five
 * minutes between two records left out: a search resumed in a later
 * window), the machine shared as the labelling shared it. The search at the
 * model's cost: the trials that rate fits in the seconds the model took
 * (writing, the gates, one measurement); none where it fits none.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "dragon/eval.h"
#include "dragon/search.h"
#include "dragon/wl.h"

const int eval_search_trials[EVAL_SEARCH_POINTS] = {64, 256, 1000};

enum { PAUSE_S = 300 };

/* Seconds since the epoch of "YYYY-MM-DDTHH:MM:SSZ", -1 for another form. */
static int64_t iso_seconds(const char *s) {
  if (!s) return -1;
  struct tm tm;
  memset(&tm, 0, sizeof tm);
  const char *end = strptime(s, "%Y-%m-%dT%H:%M:%SZ", &tm);
  if (!end || *end) return -1;
  return (int64_t)timegm(&tm);
}

/* The workload of a task, as the database names it. */
static bool task_hash(const eval_task *t, char out[21]) {
  dg_status st;
  dg_func *f = wl_build(t->spec, &st);
  if (!f) return false;
  snprintf(out, 21, "%llu", (unsigned long long)ir_func_hash(f));
  ir_func_free(f);
  return true;
}

/* One task's search, from its records (indices into db, in order). */
static void read_search(const search_db *db, const int *idx, int n, const char *hash, const eval_task *t,
                        eval_versus_task *v) {
  /* the device of the best record */
  const search_record *best = NULL;
  for (int i = 0; i < n; i++) {
    const search_record *r = search_db_record_at(db, idx[i]);
    if (search_record_valid(r) && (!best || search_record_secs(r) < search_record_secs(best))) best = r;
  }
  if (!best || !(search_record_secs(best) > 0)) return;
  const char *device = best->device ? best->device : "";
  double best_all = search_record_secs(best), run_best = SEARCH_FAILED_SECS;
  int trials = 0;
  int64_t last = -1, wall = 0;
  double at_best[EVAL_SEARCH_POINTS];
  for (int k = 0; k < EVAL_SEARCH_POINTS; k++) at_best[k] = 0;
  for (int i = 0; i < n; i++) {
    const search_record *r = search_db_record_at(db, idx[i]);
    if (strcmp(r->device ? r->device : "", device) != 0) continue;
    trials++;
    if (search_record_valid(r) && search_record_secs(r) < run_best) run_best = search_record_secs(r);
    int64_t d = iso_seconds(r->date);
    if (d >= 0) {
      if (last >= 0 && d >= last && d - last <= PAUSE_S) wall += d - last;
      last = d;
    }
    for (int k = 0; k < EVAL_SEARCH_POINTS; k++)
      if (trials == eval_search_trials[k] && run_best < SEARCH_FAILED_SECS) at_best[k] = run_best;
  }
  bool exhausted = search_db_workload_exhausted(db, hash) >= 0;
  /* the mean seconds a trial: the first record's own share by the rate of the rest */
  double per_trial = trials > 1 && wall > 0 ? (double)wall / (trials - 1) : 0;
  v->trials = trials;
  v->per_trial_s = per_trial;
  double out_secs = t->secs, base = t->baseline_secs;
  for (int k = 0; k < EVAL_SEARCH_POINTS; k++) {
    double b = at_best[k];
    int used = eval_search_trials[k];
    if (b <= 0 && exhausted && trials < eval_search_trials[k]) b = best_all, used = trials;
    if (b <= 0) continue;
    double here = t->label_secs * b / best_all;
    v->vs[k] = here / out_secs;
    v->search_speedup[k] = base > 0 ? base / here : 0;
    v->wall[k] = per_trial > 0 ? used * per_trial : 0;
  }
  if (per_trial > 0) {
    int fit = (int)floor(v->model_cost / per_trial);
    v->at_cost_trials = fit < trials ? fit : trials;
    double b = SEARCH_FAILED_SECS;
    int seen = 0;
    for (int i = 0; i < n && seen < v->at_cost_trials; i++) {
      const search_record *r = search_db_record_at(db, idx[i]);
      if (strcmp(r->device ? r->device : "", device) != 0) continue;
      seen++;
      if (search_record_valid(r) && search_record_secs(r) < b) b = search_record_secs(r);
    }
    if (b < SEARCH_FAILED_SECS) v->vs_at_cost = t->label_secs * b / best_all / out_secs;
  }
}

bool eval_versus_search(const eval_result *r, const search_db *db, eval_versus *out, dg_status *st) {
  memset(out, 0, sizeof *out);
  dg_status_ok(st);
  out->tasks = dg_calloc((size_t)(r->n ? r->n : 1), sizeof *out->tasks);
  for (int i = 0; i < r->n; i++) {
    const eval_task *t = &r->tasks[i];
    char hash[21];
    if (t->gate != EVAL_PASSED || t->secs <= 0 || t->label_secs <= 0) continue;
    if (!task_hash(t, hash)) continue;
    eval_versus_task *v = &out->tasks[out->n];
    memset(v, 0, sizeof *v);
    snprintf(v->family, sizeof v->family, "%s", t->family);
    v->task = i;
    v->model_cost = t->t_write + t->t_check;
    v->model_speedup = t->baseline_secs > 0 ? t->baseline_secs / t->secs : 0;
    int n = 0;
    const int *idx = search_db_workload_records(db, hash, &n);
    read_search(db, idx, n, hash, t, v);
    if (v->trials > 0) out->n++;
  }
  return true;
}

void eval_versus_free(eval_versus *v) {
  if (!v) return;
  free(v->tasks);
  memset(v, 0, sizeof *v);
}

static void put_ratio(dg_str *s, double x, int n) {
  if (n) dg_str_printf(s, " %.2fx (%d) |", x, n);
  else dg_str_puts(s, " - |");
}

static void put_secs(dg_str *s, double x, int n) {
  if (n) dg_str_printf(s, " %.3g |", x);
  else dg_str_puts(s, " - |");
}

static void versus_row(dg_str *s, const char *name, const eval_versus *v, const char *family) {
  int n = 0, nv[EVAL_SEARCH_POINTS] = {0}, nw[EVAL_SEARCH_POINTS] = {0}, some = 0, nc = 0;
  int cap = v->n ? v->n : 1;
  double *cost = dg_calloc((size_t)cap, sizeof(double)), *c2 = dg_calloc((size_t)cap, sizeof(double));
  double *vs[EVAL_SEARCH_POINTS], *wall[EVAL_SEARCH_POINTS];
  for (int k = 0; k < EVAL_SEARCH_POINTS; k++) {
    vs[k] = dg_calloc((size_t)cap, sizeof(double));
    wall[k] = dg_calloc((size_t)cap, sizeof(double));
  }
  for (int i = 0; i < v->n; i++) {
    const eval_versus_task *t = &v->tasks[i];
    if (family && strcmp(t->family, family) != 0) continue;
    cost[n++] = t->model_cost;
    for (int k = 0; k < EVAL_SEARCH_POINTS; k++) {
      if (t->vs[k] > 0) vs[k][nv[k]++] = t->vs[k];
      if (t->wall[k] > 0) wall[k][nw[k]++] = t->wall[k];
    }
    if (t->at_cost_trials > 0) some++;
    if (t->vs_at_cost > 0) c2[nc++] = t->vs_at_cost;
  }
  dg_str_printf(s, "| %s | %d |", name, n);
  put_secs(s, eval_median_ratio(cost, n), n);
  for (int k = 0; k < EVAL_SEARCH_POINTS; k++) put_ratio(s, eval_median_ratio(vs[k], nv[k]), nv[k]);
  for (int k = 0; k < EVAL_SEARCH_POINTS - 1; k++) put_secs(s, eval_median_ratio(wall[k], nw[k]), nw[k]);
  dg_str_printf(s, " %d |", some);
  put_ratio(s, eval_median_ratio(c2, nc), nc);
  dg_str_puts(s, "\n");
  for (int k = 0; k < EVAL_SEARCH_POINTS; k++) {
    free(vs[k]);
    free(wall[k]);
  }
  free(cost);
  free(c2);
}

char *eval_versus_table(const eval_versus *v) {
  dg_str s;
  dg_str_init(&s);
  dg_str_printf(&s,
                "## Against the search, per family\n\n"
                "%d correct outputs whose search label was timed beside them. The output's speed over the "
                "search's after 64, 256 and 1,000 trials (its best then, read against the label in this run; "
                "medians, with how many tasks the search reached that many trials), the model's cost (seconds "
                "writing, gating and measuring one output) and the search's wall time to 64 and 256 trials in "
                "its labelling run (its mean seconds a trial there, the machine shared as labelling shares "
                "it); then on how many tasks that rate fits a trial in the model's cost (its start, the "
                "workload's data and first compiles, not counted: in the search's favour), and the output's "
                "speed over the best of those trials.\n\n",
                v->n);
  dg_str_puts(&s, "| family | tasks | model s | vs search@64 | vs search@256 | vs search@1000 | search@64 s | "
                  "search@256 s | a search trial within the model's s | vs search at the model's s |\n");
  dg_str_puts(&s, "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n");
  for (int i = 0; i < v->n; i++) {
    bool seen = false;
    for (int j = 0; j < i && !seen; j++) seen = strcmp(v->tasks[j].family, v->tasks[i].family) == 0;
    if (!seen) versus_row(&s, v->tasks[i].family, v, v->tasks[i].family);
  }
  versus_row(&s, "**all**", v, NULL);
  return dg_str_take(&s);
}

void eval_versus_points(const eval_versus *v, dg_str *out) {
  for (int i = 0; i < v->n; i++) {
    const eval_versus_task *t = &v->tasks[i];
    if (t->model_speedup > 0) dg_str_printf(out, "model\t%.6g\t%.6g\n", t->model_cost, t->model_speedup);
    for (int k = 0; k < EVAL_SEARCH_POINTS; k++)
      if (t->wall[k] > 0 && t->search_speedup[k] > 0)
        dg_str_printf(out, "search%d\t%.6g\t%.6g\n", eval_search_trials[k], t->wall[k], t->search_speedup[k]);
  }
}
