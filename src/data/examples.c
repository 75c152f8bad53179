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
#include "dragon/rt_cuda.h"
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
  int n_rec = 0;
  const int *idx = search_db_workload_records(db, hash, &n_rec);
  for (int i = 0; i < n_rec; i++) {
    const search_record *r = search_db_record_at(db, idx[i]);
    if (r->error || !search_record_valid(r)) continue;
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

/* A workload of the database (w) at its place in the splits file (at). */
typedef struct {
  int64_t at;
  int w;
} placed;

static int cmp_placed(const void *a, const void *b) {
  const placed *x = a, *y = b;
  if (x->at != y->at) return x->at < y->at ? -1 : 1;
  return (x->w > y->w) - (x->w < y->w);
}

/* One workload's examples and counts, built on a thread. */
typedef struct {
  dg_str lines;
  data_build_stats s;
  bool other_kernel; /* the database measured another kernel than the split's */
} one_out;

typedef struct {
  const data_build_opts *o;
  const placed *v;
  one_out *res;
} build_ctx;

static void one_workload(void *ctx, int i) {
  build_ctx *c = ctx;
  one_out *w = &c->res[i];
  const data_split_entry *e = data_splits_at(c->o->splits, c->v[i].at);
  const char *hash = search_db_workload_hash(c->o->db, c->v[i].w);
  dg_str_init(&w->lines);
  /* the kernel the split was drawn with is the one measured */
  char want[24];
  snprintf(want, sizeof want, "%llu", (unsigned long long)e->kernel_hash);
  if (strcmp(want, hash) != 0) {
    w->other_kernel = true;
    return;
  }
  workload_examples(c->o, e->spec, hash, &w->lines, &w->s);
}

bool data_build_examples(const data_build_opts *o, dg_str *out, data_build_stats *s,
                         dg_status *st) {
  dg_status_ok(st);
  memset(s, 0, sizeof *s);
  if (!o->db || !o->splits)
    return dg_fail(st, DG_ERR_USAGE, "data build: a database and the splits are needed");
  /* the database's workloads of the split, in the splits file's order (the
   * database's order among equal specs) */
  int nw = search_db_workload_count(o->db);
  const data_split_entry *first = data_splits_count(o->splits) ? data_splits_at(o->splits, 0) : NULL;
  DG_VEC(placed) v = {0};
  for (int w = 0; w < nw; w++) {
    const char *spec = search_db_workload_spec(o->db, search_db_workload_hash(o->db, w));
    const data_split_entry *e = spec ? data_splits_find(o->splits, spec) : NULL;
    if (!e || e->split != o->split) continue;
    placed p = {(int64_t)(e - first), w};
    DG_VEC_PUSH(&v, p);
  }
  if (v.len > 1) qsort(v.data, v.len, sizeof *v.data, cmp_placed);
  /* built on threads, each workload on its own, then put in that order */
  int n = (int)v.len;
  one_out *res = dg_calloc((size_t)(n ? n : 1), sizeof *res);
  build_ctx c = {o, v.data, res};
  double t0 = dg_now();
  int done = 0;
  int64_t made = 0;
  rt_tasks *t = rt_tasks_start(n, o->threads > 0 ? o->threads : rt_cpu_count(), one_workload, &c);
  for (int i; (i = rt_tasks_next(t, true)) >= 0;) {
    done++;
    made += res[i].s.construct + res[i].s.refine;
    if (o->progress && (done % 200 == 0 || done == n)) {
      double el = dg_now() - t0, rate = el > 0 ? done / el : 0;
      fprintf(o->progress, "  %d/%d workloads, %lld examples, %.1f workloads/s, ETA %.0f s\n",
              done, n, (long long)made, rate, rate > 0 ? (n - done) / rate : 0.0);
      fflush(o->progress);
    }
  }
  rt_tasks_free(t);
  for (int k = 0; k < n; k++) {
    one_out *w = &res[k];
    if (w->other_kernel) {
      s->unreadable++;
      continue;
    }
    s->workloads += w->s.workloads;
    s->construct += w->s.construct;
    s->refine += w->s.refine;
    s->no_valid += w->s.no_valid;
    s->unreadable += w->s.unreadable;
    for (size_t g = 0; g < DG_ARRAY_LEN(s->refused); g++) s->refused[g] += w->s.refused[g];
    if (!s->first_refusal[0] && w->s.first_refusal[0])
      snprintf(s->first_refusal, sizeof s->first_refusal, "%s", w->s.first_refusal);
    if (w->lines.len) dg_str_putn(out, w->lines.s, w->lines.len);
    dg_str_free(&w->lines);
  }
  free(res);
  DG_VEC_FREE(&v);
  return true;
}
