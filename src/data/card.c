/* card.c: the dataset card (`dragon data card`): what the committed records
 * and examples hold, as Markdown, and the points of its plot.
 *
 * From the database (the committed shards merged): the labelled workloads
 * per family and split and per dtype, the records and their provenance
 * (builds, devices, dates), the distribution of each workload's best
 * correct time over its untuned baseline. From the examples files: the
 * examples per split and kind, their size, and the distribution of target
 * over prior speedups. Deterministic: the same inputs give the same bytes
 * (no clock is read).
 */
#include <jansson.h>
#include <math.h>
#include <string.h>

#include "dragon/data.h"
#include "dragon/search.h"
#include "dragon/wl.h"

static int cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return x < y ? -1 : x > y;
}

/* q-quantile of sorted xs (nearest rank). */
static double quantile(const double *xs, size_t n, double q) {
  if (n == 0) return NAN;
  size_t i = (size_t)(q * (double)(n - 1) + 0.5);
  return xs[i < n ? i : n - 1];
}

static void put_quantiles(dg_str *md, const char *what, double *xs, size_t n) {
  if (n == 0) {
    dg_str_printf(md, "| %s | 0 | - | - | - | - | - |\n", what);
    return;
  }
  qsort(xs, n, sizeof *xs, cmp_double);
  double lg = 0;
  for (size_t i = 0; i < n; i++) lg += log(xs[i]);
  dg_str_printf(md, "| %s | %zu | %.2fx | %.2fx | %.2fx | %.2fx | %.2fx |\n", what, n, xs[0],
                quantile(xs, n, 0.5), exp(lg / (double)n), quantile(xs, n, 0.9), xs[n - 1]);
}

static int family_index(const char *spec) {
  size_t n = strcspn(spec, ":");
  for (int k = 0; k < wl_family_count(); k++)
    if (strlen(wl_family_name(k)) == n && strncmp(wl_family_name(k), spec, n) == 0) return k;
  return -1;
}

/* Distinct strings, counted, in order of first appearance. */
typedef struct {
  DG_VEC(const char *) s;
  DG_VEC(int64_t) n;
} tally;

static void tally_add(tally *t, const char *s) {
  for (size_t i = 0; i < t->s.len; i++)
    if (strcmp(t->s.data[i], s) == 0) {
      t->n.data[i]++;
      return;
    }
  DG_VEC_PUSH(&t->s, s);
  DG_VEC_PUSH(&t->n, 1);
}

static void tally_free(tally *t) {
  DG_VEC_FREE(&t->s);
  DG_VEC_FREE(&t->n);
}

bool data_card_write(const data_card_opts *o, dg_str *md, dg_str *points, dg_status *st) {
  dg_status_ok(st);
  const search_db *db = o->db;
  int nf = wl_family_count();
  int64_t(*per)[DATA_SPLIT_COUNT] = dg_calloc((size_t)nf, sizeof *per);
  int64_t dtype_n[2][DATA_SPLIT_COUNT] = {{0}};
  int64_t outside = 0;
  DG_VEC(double) speed = {0};
  tally builds = {0}, devices = {0};
  const char *first_date = NULL, *last_date = NULL;
  int64_t n_ok = 0, n_fail = 0;
  for (int i = 0; i < search_db_record_count(db); i++) {
    const search_record *r = search_db_record_at(db, i);
    tally_add(&builds, r->build && r->build[0] ? r->build : "(not recorded)");
    tally_add(&devices, r->device && r->device[0] ? r->device : "(not recorded)");
    if (r->date && r->date[0]) {
      if (!first_date || strcmp(r->date, first_date) < 0) first_date = r->date;
      if (!last_date || strcmp(r->date, last_date) > 0) last_date = r->date;
    }
    if (r->error || !search_record_valid(r)) n_fail++;
    else n_ok++;
  }
  for (int w = 0; w < search_db_workload_count(db); w++) {
    const char *hash = search_db_workload_hash(db, w);
    const char *spec = search_db_workload_spec(db, hash);
    const data_split_entry *e = spec ? data_splits_find(o->splits, spec) : NULL;
    if (!e) {
      outside++;
      continue;
    }
    int k = family_index(spec);
    if (k >= 0) per[k][e->split]++;
    dtype_n[strstr(spec, "dtype=f16") != NULL][e->split]++;
    const search_record *best = NULL;
    double base = search_db_baseline_secs(db, hash, NULL);
    if (search_db_top_k(db, hash, 1, &best) == 1 && base < SEARCH_FAILED_SECS) {
      double x = base / search_record_secs(best);
      DG_VEC_PUSH(&speed, x);
      if (points) dg_str_printf(points, "best %s %.6g\n", wl_family_name(k >= 0 ? k : 0), x);
    }
  }

  dg_str_puts(md, "# Dataset card\n\n");
  dg_str_puts(md,
              "What the committed records (`data/records/`) and examples (`data/examples/`) "
              "hold. Made by `dragon data card`; docs/data.md describes the formats.\n\n");
  dg_str_puts(md, "## Records\n\n");
  dg_str_printf(md,
                "%d workloads, %lld records (%lld correct, %lld failed or invalid), %d "
                "baselines",
                search_db_workload_count(db), (long long)(n_ok + n_fail), (long long)n_ok,
                (long long)n_fail, search_db_baseline_count(db));
  if (first_date) dg_str_printf(md, ", measured %s to %s", first_date, last_date);
  dg_str_puts(md, ".\n\n| build | records |\n|---|---:|\n");
  for (size_t i = 0; i < builds.s.len; i++)
    dg_str_printf(md, "| %s | %lld |\n", builds.s.data[i], (long long)builds.n.data[i]);
  dg_str_puts(md, "\n| device | records |\n|---|---:|\n");
  for (size_t i = 0; i < devices.s.len; i++)
    dg_str_printf(md, "| %s | %lld |\n", devices.s.data[i], (long long)devices.n.data[i]);
  if (outside) dg_str_printf(md, "\n%lld workloads are not in the splits file.\n", (long long)outside);

  dg_str_puts(md, "\n## Labelled workloads by family and split\n\n| family |");
  for (int s = 0; s < DATA_SPLIT_COUNT; s++) dg_str_printf(md, " %s |", data_split_name((data_split)s));
  dg_str_puts(md, "\n|---|");
  for (int s = 0; s < DATA_SPLIT_COUNT; s++) dg_str_puts(md, "---:|");
  dg_str_puts(md, "\n");
  int64_t tot[DATA_SPLIT_COUNT] = {0};
  int families = 0;
  for (int k = 0; k < nf; k++) {
    int64_t row = 0;
    for (int s = 0; s < DATA_SPLIT_COUNT; s++) row += per[k][s];
    if (!row) continue;
    families++;
    dg_str_printf(md, "| %s |", wl_family_name(k));
    for (int s = 0; s < DATA_SPLIT_COUNT; s++) {
      dg_str_printf(md, " %lld |", (long long)per[k][s]);
      tot[s] += per[k][s];
    }
    dg_str_puts(md, "\n");
  }
  dg_str_printf(md, "| **all %d families** |", families);
  for (int s = 0; s < DATA_SPLIT_COUNT; s++) dg_str_printf(md, " **%lld** |", (long long)tot[s]);
  dg_str_puts(md, "\n\n| dtype |");
  for (int s = 0; s < DATA_SPLIT_COUNT; s++) dg_str_printf(md, " %s |", data_split_name((data_split)s));
  dg_str_puts(md, "\n|---|");
  for (int s = 0; s < DATA_SPLIT_COUNT; s++) dg_str_puts(md, "---:|");
  for (int d = 0; d < 2; d++) {
    dg_str_printf(md, "\n| %s |", d ? "f16" : "f32");
    for (int s = 0; s < DATA_SPLIT_COUNT; s++) dg_str_printf(md, " %lld |", (long long)dtype_n[d][s]);
  }
  dg_str_puts(md, "\n\n## Speedups\n\n");
  dg_str_puts(md, "| what | n | min | median | geomean | p90 | max |\n|---|---:|---:|---:|---:|---:|---:|\n");
  put_quantiles(md, "best correct record over the untuned baseline (per workload)", speed.data,
                speed.len);

  /* the examples files */
  DG_VEC(double) gains = {0};
  dg_str ex;
  dg_str_init(&ex);
  dg_str_puts(&ex, "\n## Examples\n\n| split | construction | refinement | bytes per example |\n|---|---:|---:|---:|\n");
  for (int i = 0; i < o->n_examples; i++) {
    int64_t nc = 0, nr = 0, bytes = 0;
    const char *text = o->examples[i];
    for (const char *p = text; p && *p;) {
      const char *nl = strchr(p, '\n');
      size_t n = nl ? (size_t)(nl - p) : strlen(p);
      json_t *j = json_loadb(p, n, 0, NULL);
      if (j) {
        const char *kind = json_string_value(json_object_get(j, "kind"));
        bool refine = kind && strcmp(kind, "refine") == 0;
        if (refine) {
          nr++;
          double g = json_number_value(json_object_get(j, "speedup_over_prior"));
          if (g > 0) {
            DG_VEC_PUSH(&gains, g);
            if (points) dg_str_printf(points, "gain %s %.6g\n", o->example_names[i], g);
          }
        } else {
          nc++;
        }
        bytes += (int64_t)n;
        json_decref(j);
      }
      p = nl ? nl + 1 : p + n;
    }
    int64_t all = nc + nr;
    dg_str_printf(&ex, "| %s | %lld | %lld | %lld |\n", o->example_names[i], (long long)nc,
                  (long long)nr, (long long)(all ? bytes / all : 0));
  }
  dg_str_puts(md, "");
  put_quantiles(md, "refinement target over its prior (per example)", gains.data, gains.len);
  dg_str_putn(md, ex.s ? ex.s : "", ex.len);
  if (o->plot_name)
    dg_str_printf(md, "\n![speedups](%s)\n\nLeft: each labelled workload's best over its "
                      "baseline; right: each refinement's target over its prior (log scale).\n",
                  o->plot_name);
  dg_str_free(&ex);
  DG_VEC_FREE(&gains);
  DG_VEC_FREE(&speed);
  tally_free(&builds);
  tally_free(&devices);
  free(per);
  return true;
}
