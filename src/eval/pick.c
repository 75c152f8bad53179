/* pick.c: which of a kernel's candidate schedules `dragon optimize` keeps
 * (eval.h, eval_pick_best).
 *
 * The candidates are the model's samples, the user's prior and the untuned
 * baseline (TVM's DefaultGPUSchedule, lifted to a graph so that it walks
 * the same road). One batch scores them all: every gate up to the numeric
 * check, and on the GPU the timing, in one queue. Then, in this order:
 * the fastest sample that passed; the prior where that sample does not
 * beat it by min_gain (a refinement must be worth its change); the
 * baseline where it is faster still. Without a GPU nothing is timed, and
 * the first sample that passed is kept (samples come in the model's order
 * of preference: the first is its greedy or first draw), else the prior,
 * else the baseline. The reason is written down in every case.
 */
#include <string.h>

#include "dragon/eval.h"
#include "dragon/search.h"
#include "dragon/tsel.h"

/* The baseline's graph: DefaultGPUSchedule's trace, lifted. */
static char *baseline_graph(const dg_func *f, const char *spec, dg_status *st) {
  sched *s = NULL;
  if (!search_baseline_schedule(f, NULL, &s, st)) return NULL;
  tsel_graph *g = tsel_lift(sched_get_trace(s), spec, f, NULL, st);
  sched_free(s);
  if (!g) return NULL;
  char *text = tsel_print(g);
  tsel_graph_free(g);
  return text;
}

static void keep(eval_pick *out, eval_pick_kind kind, int sample, const char *graph,
                 const eval_score *sc) {
  out->kind = kind;
  out->sample = sample;
  out->graph = dg_strdup(graph);
  out->trace_json = sc->trace ? sched_trace_to_json(sc->trace) : dg_strdup("[[],[]]");
  out->secs = sc->secs;
}

bool eval_pick_best(const char *const *samples, int n, const char *prior,
                    const eval_pick_opts *o, eval_pick *out, dg_status *st) {
  memset(out, 0, sizeof *out);
  dg_status_ok(st);
  out->n_samples = n;
  out->has_prior = prior != NULL;
  out->prior.failed = EVAL_PASSED;
  double min_gain = o->min_gain > 0 ? o->min_gain : 1.03;
  bool timed = o->gpu != NULL;

  dg_status bst;
  dg_status_ok(&bst);
  char *base = o->no_baseline ? NULL : baseline_graph(o->kernel, o->spec, &bst);
  /* items: the baseline (or nothing), the prior, the samples */
  int n_items = 0, i_base = -1, i_prior = -1, i0 = 0;
  eval_item *items = dg_calloc((size_t)n + 2, sizeof *items);
  if (base) {
    i_base = n_items;
    items[n_items++] = (eval_item){base, "baseline", o->kernel, o->spec, NULL};
  }
  if (prior) {
    i_prior = n_items;
    items[n_items++] = (eval_item){prior, "prior", o->kernel, o->spec, NULL};
  }
  i0 = n_items;
  char (*sample_names)[32] = dg_calloc((size_t)(n ? n : 1), sizeof *sample_names);
  for (int i = 0; i < n; i++) {
    snprintf(sample_names[i], sizeof sample_names[i], "sample %d", i + 1);
    items[n_items++] = (eval_item){samples[i] ? samples[i] : "", sample_names[i], o->kernel,
                                   o->spec, NULL};
  }
  eval_score_opts eo;
  memset(&eo, 0, sizeof eo);
  eo.kernel = o->kernel;
  eo.last = timed ? EVAL_GATE_MEASURE : o->no_numbers ? EVAL_GATE_BUILD : EVAL_GATE_NUMERIC;
  eo.compile = timed;
  eo.gpu = o->gpu;
  eval_score *sc = dg_calloc((size_t)n_items, sizeof *sc);
  eval_score_batch(items, n_items, &eo, o->threads, sc);

  out->scores = dg_calloc((size_t)(n ? n : 1), sizeof *out->scores);
  int best = -1;
  for (int i = 0; i < n; i++) {
    out->scores[i] = sc[i0 + i];
    memset(&sc[i0 + i], 0, sizeof sc[i0 + i]);
    const eval_score *s = &out->scores[i];
    if (s->failed != EVAL_PASSED) {
      out->failed_at[s->failed]++;
      continue;
    }
    out->n_passed++;
    if (best < 0 || (timed && s->secs < out->scores[best].secs)) best = i;
  }
  bool prior_ok = false, base_ok = false;
  if (i_prior >= 0) {
    out->prior = sc[i_prior];
    memset(&sc[i_prior], 0, sizeof sc[i_prior]);
    prior_ok = out->prior.failed == EVAL_PASSED;
    if (prior_ok && timed) out->prior_secs = out->prior.secs;
  }
  const eval_score *bs = i_base >= 0 ? &sc[i_base] : NULL;
  base_ok = bs && bs->failed == EVAL_PASSED;
  if (base_ok && timed) out->baseline_secs = bs->secs;

  char passed[64];
  snprintf(passed, sizeof passed, "%d of %d samples passed every gate", out->n_passed, n);
  bool ok = true;
  if (best >= 0 && timed && prior_ok && out->scores[best].secs * min_gain > out->prior_secs) {
    keep(out, EVAL_PICK_PRIOR, -1, prior, &out->prior);
    snprintf(out->why, sizeof out->why,
             "%s; the fastest (sample %d, %.2f us) is not %.2fx faster than the prior "
             "(%.2f us): the prior is kept",
             passed, best + 1, out->scores[best].secs * 1e6, min_gain, out->prior_secs * 1e6);
  } else if (best >= 0) {
    keep(out, EVAL_PICK_SAMPLE, best, samples[best], &out->scores[best]);
    if (timed)
      snprintf(out->why, sizeof out->why, "%s; sample %d is the fastest", passed, best + 1);
    else
      snprintf(out->why, sizeof out->why,
               "%s; sample %d is the first that passed (no GPU: checked in the C emulation, "
               "not timed)", passed, best + 1);
  } else if (prior_ok) {
    keep(out, EVAL_PICK_PRIOR, -1, prior, &out->prior);
    snprintf(out->why, sizeof out->why, "%s: the prior is kept", passed);
  } else if (base_ok) {
    keep(out, EVAL_PICK_BASELINE, -1, base, bs);
    snprintf(out->why, sizeof out->why, "%s%s: the untuned baseline is kept", passed,
             prior ? " and the prior did not pass" : "");
  } else {
    ok = false;
    snprintf(out->why, sizeof out->why, "%s, and the baseline did not pass either", passed);
    dg_fail(st, DG_ERR_RUNTIME, "no schedule passed, not even the baseline: %s",
            bs ? bs->reason : o->no_baseline ? "no baseline was asked for" : bst.msg);
  }
  if (ok && timed && base_ok && out->kind != EVAL_PICK_BASELINE && bs->secs < out->secs) {
    char was[sizeof out->why];
    memcpy(was, out->why, sizeof was);
    free(out->graph);
    free(out->trace_json);
    keep(out, EVAL_PICK_BASELINE, -1, base, bs);
    snprintf(out->why, sizeof out->why,
             "%.400s; but the baseline (%.2f us) is faster still: the baseline is kept", was,
             bs->secs * 1e6);
  }
  for (int i = 0; i < n_items; i++) eval_score_free(&sc[i]);
  free(sc);
  free(items);
  free(sample_names);
  free(base);
  return ok;
}

void eval_pick_free(eval_pick *p) {
  if (!p) return;
  for (int i = 0; i < p->n_samples; i++) eval_score_free(&p->scores[i]);
  free(p->scores);
  eval_score_free(&p->prior);
  free(p->graph);
  free(p->trace_json);
  memset(p, 0, sizeof *p);
}
