/* examples.c: construction and refinement examples from measured records
 * (`dragon data build`), deterministic: the same records and splits give
 * the same bytes.
 *
 * For each workload of the chosen split that the database holds, in the
 * split file's order:
 *   construction  prompt = the kernel text; target = the TSEL graph of the
 *                 workload's fastest correct record that is admitted (a
 *                 refused one is counted and the next tried), with why/expect
 *                 lines from compiler facts and its measured speedup over
 *                 the untuned baseline;
 *   refinement    prompt = the kernel text and a prior graph G_A (edits
 *                 only) of another correct record of the workload, between
 *                 min_gain and max_prior_ratio times slower than the best;
 *                 target = the best's graph. Up to max_priors priors,
 *                 spread evenly over that range by log time; prior and
 *                 target were measured by the same device and build, so
 *                 "faster" compares like with like.
 * Admission walks the one road (eval_score_tsel) up to the build: the
 * target parses, names the workload, type-checks, lowers to exactly its
 * record's trace, replays exactly to the record's kernel, lowers, passes
 * VerifyGPUCode and emits; its record ran correct on the GPU. A refused
 * target is counted at its gate, with the first reason kept. Identical
 * examples are dropped.
 *
 * Only the chosen split's workloads are read: the examples of train never
 * hold a workload of val, test or the held-out sets (tests/test_data_
 * examples.c proves it over the committed splits).
 */
#include <jansson.h>
#include <string.h>

#include "dragon/data.h"
#include "dragon/eval.h"
#include "dragon/search.h"
#include "dragon/tsel.h"
#include "dragon/wl.h"

_Static_assert(EVAL_GATE_COUNT <= DG_ARRAY_LEN(((data_build_stats *)0)->refused),
               "a refusal count per gate");

void data_build_opts_default(data_build_opts *o) {
  memset(o, 0, sizeof *o);
  o->split = DATA_SPLIT_TRAIN;
  o->max_priors = 3;
  o->min_gain = 1.1;
  o->max_prior_ratio = 10;
}

/* A record measured correct, with its mean time. */
typedef struct {
  const search_record *r;
  double secs;
} timed;

static int cmp_timed(const void *a, const void *b) {
  const timed *x = a, *y = b;
  if (x->secs != y->secs) return x->secs < y->secs ? -1 : 1;
  return strcmp(x->r->trace, y->r->trace);
}

static json_t *source_json(const search_record *r, double secs) {
  char kh[24];
  snprintf(kh, sizeof kh, "%llu", (unsigned long long)r->kernel_hash);
  return json_pack("{s:s, s:f, s:s, s:s, s:s}", "kernel_hash", kh, "secs", secs, "device",
                   r->device ? r->device : "", "build", r->build ? r->build : "", "date",
                   r->date ? r->date : "");
}

/* The graph of a record (with explanations, or edits only). NULL with the
 * refusal counted when it is not admitted. */
static char *admit(const char *spec, const dg_func *f,
                   const timed *t, double base, bool explain, data_build_stats *s) {
  dg_status st;
  sched_trace *tr = sched_trace_from_json(t->r->trace, &st);
  if (!tr) {
    s->refused[EVAL_GATE_LOWER]++;
    if (!s->first_refusal[0])
      snprintf(s->first_refusal, sizeof s->first_refusal, "%.80s: %.160s", spec, st.msg);
    return NULL;
  }
  tsel_record rec = {true, t->secs, base < SEARCH_FAILED_SECS, base};
  tsel_graph *g = tsel_lift(tr, spec, f, explain ? &rec : NULL, &st);
  sched_trace_free(tr);
  if (!g) {
    /* lifting with the kernel checks the graph against it (explanations
     * need the facts): its refusal is the check gate's */
    s->refused[EVAL_GATE_CHECK]++;
    if (!s->first_refusal[0])
      snprintf(s->first_refusal, sizeof s->first_refusal, "%.80s: lift: %.150s", spec, st.msg);
    return NULL;
  }
  if (!explain) tsel_graph_strip_explanations(g);
  char *text = tsel_print(g);
  tsel_graph_free(g);
  eval_score_opts eo;
  memset(&eo, 0, sizeof eo);
  eo.kernel = f;
  eo.spec = spec;
  eo.last = EVAL_GATE_BUILD;
  eo.expect_trace = t->r->trace;
  eval_score r;
  bool ok = eval_score_tsel(text, spec, &eo, &r);
  if (ok && t->r->kernel_hash && r.kernel_hash != t->r->kernel_hash) {
    ok = false;
    r.failed = EVAL_GATE_REPLAY;
    snprintf(r.reason, sizeof r.reason, "replays to a kernel other than the one measured");
  }
  if (!ok) {
    s->refused[r.failed < EVAL_GATE_COUNT ? r.failed : EVAL_GATE_BUILD]++;
    if (!s->first_refusal[0])
      snprintf(s->first_refusal, sizeof s->first_refusal, "%.80s: %s: %.150s", spec,
               eval_gate_name(r.failed), r.reason);
    free(text);
    text = NULL;
  }
  eval_score_free(&r);
  return text;
}

static void put_example(json_t *ex, dg_str *out) {
  char *line = json_dumps(ex, JSON_COMPACT | JSON_PRESERVE_ORDER | JSON_REAL_PRECISION(10));
  dg_str_puts(out, line);
  dg_str_putc(out, '\n');
  free(line);
  json_decref(ex);
}

static json_t *weights_json(void) {
  return json_pack("{s:f, s:f, s:f, s:f}", "prompt", 0.0, "edit", 1.0, "expect", 0.5, "why", 0.2);
}

/* The workload's examples into out. */
static void workload_examples(const data_build_opts *o, const char *spec, const char *hash,
                              dg_str *out, data_build_stats *s) {
  const search_db *db = o->db;
  const char *kernel_text = search_db_workload_kernel(db, hash);
  dg_status st;
  dg_func *f = kernel_text ? ir_parse(kernel_text, spec, &st) : NULL;
  if (!f) {
    s->unreadable++;
    return;
  }
  DG_VEC(timed) ok = {0};
  for (int i = 0; i < search_db_record_count(db); i++) {
    const search_record *r = search_db_record_at(db, i);
    if (strcmp(r->workload, hash) != 0 || r->error || !search_record_valid(r)) continue;
    timed t = {r, search_record_secs(r)};
    DG_VEC_PUSH(&ok, t);
  }
  if (ok.len == 0) {
    s->no_valid++;
    DG_VEC_FREE(&ok);
    ir_func_free(f);
    return;
  }
  qsort(ok.data, ok.len, sizeof *ok.data, cmp_timed);
  s->workloads++;
  double base = search_db_baseline_secs(db, hash, NULL);
  /* the fastest record that is admitted (a refused one is counted and the
   * next is tried, a few at most) */
  const timed *best = NULL;
  char *target = NULL;
  size_t first = 0;
  for (; first < ok.len && first < 8 && !target; first++) {
    best = &ok.data[first];
    target = admit(spec, f, best, base, true, s);
  }
  if (target) {
    char task[64];
    snprintf(task, sizeof task, "construct/%s", hash);
    json_t *ex = json_pack("{s:s, s:s, s:s, s:s, s:s, s:o, s:[o]}", "task", task, "kind",
                           "construct", "workload", spec, "prompt", kernel_text, "target", target,
                           "weights_by_segment", weights_json(), "source_records",
                           source_json(best->r, best->secs));
    if (base < SEARCH_FAILED_SECS)
      json_object_set_new(ex, "speedup_over_baseline", json_real(base / best->secs));
    put_example(ex, out);
    s->construct++;
    /* priors: measured by the same device and build as the best, slow
     * enough to leave room for a gain, not so slow as to be noise */
    DG_VEC(int) pri = {0};
    for (size_t i = first; i < ok.len; i++) {
      const timed *t = &ok.data[i];
      if (t->secs < o->min_gain * best->secs || t->secs > o->max_prior_ratio * best->secs)
        continue;
      if (strcmp(t->r->device ? t->r->device : "", best->r->device ? best->r->device : "") ||
          strcmp(t->r->build ? t->r->build : "", best->r->build ? best->r->build : ""))
        continue;
      DG_VEC_PUSH(&pri, (int)i);
    }
    int k = (int)pri.len < o->max_priors ? (int)pri.len : o->max_priors;
    int last = -1;
    for (int j = 0; j < k; j++) {
      /* evenly spaced through the candidates, fastest to slowest */
      int at = k == 1 ? (int)pri.len / 2 : (int)((double)j * (double)(pri.len - 1) / (k - 1) + 0.5);
      if (at == last) continue;
      last = at;
      const timed *p = &ok.data[pri.data[at]];
      char *prior = admit(spec, f, p, base, false, s);
      if (!prior) continue;
      snprintf(task, sizeof task, "refine/%s/%d", hash, j);
      json_t *rx = json_pack("{s:s, s:s, s:s, s:s, s:s, s:s, s:o, s:[o,o], s:f}", "task", task,
                             "kind", "refine", "workload", spec, "prompt", kernel_text, "prior",
                             prior, "target", target, "weights_by_segment", weights_json(),
                             "source_records", source_json(p->r, p->secs),
                             source_json(best->r, best->secs), "speedup_over_prior",
                             p->secs / best->secs);
      put_example(rx, out);
      s->refine++;
      free(prior);
    }
    DG_VEC_FREE(&pri);
    free(target);
  }
  DG_VEC_FREE(&ok);
  ir_func_free(f);
}

bool data_build_examples(const data_build_opts *o, dg_str *out, data_build_stats *s,
                         dg_status *st) {
  dg_status_ok(st);
  memset(s, 0, sizeof *s);
  if (!o->db || !o->splits)
    return dg_fail(st, DG_ERR_USAGE, "data build: a database and the splits are needed");
  /* the database's workloads by spec, so that the split's order decides */
  int nw = search_db_workload_count(o->db);
  for (int64_t i = data_splits_next(o->splits, o->split, 0); i >= 0;
       i = data_splits_next(o->splits, o->split, i + 1)) {
    const data_split_entry *e = data_splits_at(o->splits, i);
    for (int w = 0; w < nw; w++) {
      const char *hash = search_db_workload_hash(o->db, w);
      const char *spec = search_db_workload_spec(o->db, hash);
      if (!spec || strcmp(spec, e->spec) != 0) continue;
      /* the kernel the split was drawn with is the one measured */
      char want[24];
      snprintf(want, sizeof want, "%llu", (unsigned long long)e->kernel_hash);
      if (strcmp(want, hash) != 0) {
        s->unreadable++;
        continue;
      }
      workload_examples(o, e->spec, hash, out, s);
      if (o->progress && s->workloads % 100 == 0 && s->workloads)
        fprintf(o->progress, "  %lld workloads, %lld construction and %lld refinement examples\n",
                (long long)s->workloads, (long long)s->construct, (long long)s->refine);
    }
  }
  return true;
}