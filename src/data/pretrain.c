/* pretrain.c: structure examples for pretraining (`dragon data pretrain`):
 * valid schedules of many training workloads, drawn from their design
 * spaces, with no measurement.
 *
 * The labels are few (one search a workload, on the GPU); the shapes the
 * model must write for are many. A model fine-tuned on a few hundred
 * labelled workloads copies their graphs and loses its way in the
 * handles of workloads it has not seen (a fuse of loops an earlier edit
 * left apart). These examples teach the language on thousands of shapes:
 * for each of the first `count` workloads of the training split (the
 * split file's order), `per` distinct samples of its CUDA design space
 * (search_sample: a sketch drawn uniformly, every decision drawn anew,
 * postprocessed; a rejected draw is drawn again), each lifted to TSEL with
 * why/expect lines from compiler facts (no time: nothing was measured) and
 * admitted through the one road up to the build, as data build admits its
 * targets (parse, header, check, lower to exactly the sample's trace,
 * exact replay, lowering and VerifyGPUCode). A sample is valid, not fast:
 * the examples are for a first stage of training, before the labels.
 *
 * Deterministic: workload i (its index in the split file) draws from the
 * seed and i alone, the workloads are built on threads and written in
 * order, so the same splits, count, per and seed give the same bytes.
 * Only the training split is read, so no held-out workload (nor one whose
 * kernel is structurally equal to one: the splits file puts those in the
 * held-out split) reaches these examples.
 */
#include <jansson.h>
#include <string.h>

#include "dragon/data.h"
#include "dragon/eval.h"
#include "dragon/rt_cuda.h"
#include "dragon/search.h"
#include "dragon/tsel.h"
#include "dragon/wl.h"

void data_pretrain_opts_default(data_pretrain_opts *o) {
  memset(o, 0, sizeof *o);
  o->count = 1000;
  o->per = 2;
  o->seed = 1;
}

/* What one workload gives. */
typedef struct {
  dg_str lines; /* its examples, one JSON object a line */
  int examples, refused, no_sample;
  char first_refusal[256];
  bool unbuildable;
} one_out;

typedef struct {
  const data_pretrain_opts *o;
  const int64_t *index; /* split-file index of each workload */
  one_out *out;
} pre_ctx;

/* The sample's graph, admitted; NULL with the refusal kept. */
static char *admit(const char *spec, const dg_func *f, const sched_trace *t, one_out *w) {
  dg_status st;
  tsel_graph *g = tsel_lift(t, spec, f, NULL, &st);
  if (!g) {
    if (!w->first_refusal[0])
      snprintf(w->first_refusal, sizeof w->first_refusal, "%.80s: lift: %.150s", spec, st.msg);
    return NULL;
  }
  char *text = tsel_print(g);
  tsel_graph_free(g);
  char *json = sched_trace_to_json(t);
  eval_score_opts eo;
  memset(&eo, 0, sizeof eo);
  eo.kernel = f;
  eo.spec = spec;
  eo.last = EVAL_GATE_BUILD;
  eo.expect_trace = json;
  eval_score r;
  if (!eval_score_tsel(text, spec, &eo, &r)) {
    if (!w->first_refusal[0])
      snprintf(w->first_refusal, sizeof w->first_refusal, "%.80s: %s: %.150s", spec,
               eval_gate_name(r.failed), r.reason);
    free(text);
    text = NULL;
  }
  eval_score_free(&r);
  free(json);
  return text;
}

/* Whether an example already written for this workload has this target
 * (its JSON-escaped text in the line). */
static bool strstr_graph(const dg_str *lines, const char *text) {
  json_t *j = json_string(text);
  char *esc = json_dumps(j, JSON_ENCODE_ANY);
  json_decref(j);
  bool found = esc && strstr(lines->s, esc) != NULL;
  free(esc);
  return found;
}

static void one_workload(void *p, int k) {
  pre_ctx *c = p;
  const data_pretrain_opts *o = c->o;
  one_out *w = &c->out[k];
  dg_str_init(&w->lines);
  const char *spec = data_splits_at(o->splits, c->index[k])->spec;
  dg_status st;
  dg_func *f = wl_build(spec, &st);
  if (!f) {
    w->unbuildable = true;
    return;
  }
  uint64_t seed = o->seed * 0x9e3779b97f4a7c15ull + (uint64_t)c->index[k];
  search_space_opts so = {.seed = seed};
  search_space sp;
  if (!search_space_generate(f, &so, &sp, &st)) {
    w->unbuildable = true;
    ir_func_free(f);
    return;
  }
  char *prompt = ir_print(f);
  dg_rng rng;
  dg_rng_seed(&rng, seed);
  search_postprocs pp = {0};
  dg_status last;
  dg_status_ok(&last);
  int tries = 0, max_tries = 50 + 20 * o->per;
  for (int n = 0; n < o->per && tries < max_tries;) {
    tries++;
    sched *s = search_sample(f, &sp, &pp, &rng, NULL, &last);
    if (!s) continue;
    char *text = admit(spec, f, sched_get_trace(s), w);
    sched_free(s);
    if (text && w->lines.len && strstr_graph(&w->lines, text)) { /* drawn before */
      free(text);
      continue;
    }
    n++;
    if (!text) {
      w->refused++;
      continue;
    }
    char seed_s[24];
    snprintf(seed_s, sizeof seed_s, "%llu", (unsigned long long)seed);
    json_t *ex = json_pack("{s:s, s:s, s:s, s:s, s:s, s:{s:f, s:f, s:f, s:f}, s:{s:s, s:i}}", "task",
                           "pretrain", "kind", "construct", "workload", spec, "prompt", prompt,
                           "target", text, "weights_by_segment", "prompt", 0.0, "edit", 1.0,
                           "expect", 0.5, "why", 0.2, "source", "seed", seed_s, "sample", n - 1);
    char *line = json_dumps(ex, JSON_COMPACT | JSON_PRESERVE_ORDER);
    dg_str_puts(&w->lines, line);
    dg_str_putc(&w->lines, '\n');
    free(line);
    json_decref(ex);
    free(text);
    w->examples++;
  }
  if (w->examples + w->refused < o->per) w->no_sample = o->per - w->examples - w->refused;
  free(prompt);
  search_space_free(&sp);
  ir_func_free(f);
}

bool data_pretrain_examples(const data_pretrain_opts *o, dg_str *out, data_pretrain_stats *s,
                            dg_status *st) {
  dg_status_ok(st);
  memset(s, 0, sizeof *s);
  if (!o->splits) return dg_fail(st, DG_ERR_USAGE, "data pretrain: no splits");
  if (o->count < 1 || o->per < 1)
    return dg_fail(st, DG_ERR_USAGE, "data pretrain: count and per must be at least 1");
  int64_t n = 0, cap = o->count;
  int64_t *index = dg_malloc(sizeof(int64_t) * (size_t)cap);
  for (int64_t i = data_splits_next(o->splits, DATA_SPLIT_TRAIN, 0); i >= 0 && n < cap;
       i = data_splits_next(o->splits, DATA_SPLIT_TRAIN, i + 1))
    index[n++] = i;
  one_out *res = dg_calloc((size_t)(n ? n : 1), sizeof *res);
  pre_ctx c = {o, index, res};
  double t0 = dg_now();
  int64_t done = 0;
  rt_tasks *t = rt_tasks_start((int)n, o->threads > 0 ? o->threads : rt_cpu_count(), one_workload,
                               &c);
  while (rt_tasks_next(t, true) >= 0) {
    done++;
    if (o->progress && (done % 200 == 0 || done == n)) {
      double el = dg_now() - t0, rate = el > 0 ? (double)done / el : 0;
      fprintf(o->progress, "  %lld/%lld workloads, %.1f/s, ETA %.0f s\n", (long long)done,
              (long long)n, rate, rate > 0 ? (double)(n - done) / rate : 0.0);
      fflush(o->progress);
    }
  }
  rt_tasks_free(t);
  /* in the split file's order */
  for (int64_t k = 0; k < n; k++) {
    one_out *w = &res[k];
    s->workloads++;
    s->examples += w->examples;
    s->refused += w->refused;
    s->unbuildable += w->unbuildable;
    s->no_sample += w->no_sample;
    if (!s->first_refusal[0] && w->first_refusal[0])
      snprintf(s->first_refusal, sizeof s->first_refusal, "%s", w->first_refusal);
    if (w->lines.len) dg_str_putn(out, w->lines.s, w->lines.len);
    dg_str_free(&w->lines);
  }
  s->seconds = dg_now() - t0;
  free(res);
  free(index);
  return true;
}
