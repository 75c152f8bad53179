/* tvm_traces.h: reading TVM's design spaces (tests/data/tvm_spaces/ALIAS.json,
 * written by scripts/tvm_spaces.py) and comparing traces with them, for
 * test_space.c and test_postproc.c.
 *
 * Comparison is on a normal form: Fuse instructions of a single loop are
 * dropped (their output stands for their input) and handles are renumbered
 * serially, because dragon's Fuse primitive may refuse single loops
 * (docs/design-spaces.md); everything else must be identical. */
#ifndef DRAGON_TEST_TVM_TRACES_H
#define DRAGON_TEST_TVM_TRACES_H

#include <jansson.h>
#include <stdlib.h>
#include <string.h>

#include "dragon/sched.h"
#include "test.h"

static const char *const tvm_aliases[13] = {"C1D", "C2D", "C3D", "CAP", "DEP", "DIL", "GMM",
                                            "GRP", "T2D", "NRM", "SFM", "CBR", "TBG"};

/* The document of an alias; NULL (test failure printed) if unreadable. */
static inline json_t *tvm_load(const char *alias) {
  char name[64];
  snprintf(name, sizeof name, "tvm_spaces/%s.json", alias);
  json_error_t e;
  json_t *doc = json_load_file(dg_test_data(name), 0, &e);
  if (!doc) fprintf(stderr, "%s: %s (line %d)\n", name, e.text, e.line);
  return doc;
}

/* A trace of a JSON value (a sketch or a postprocessed trace). */
static inline sched_trace *tvm_trace(json_t *j) {
  char *s = json_dumps(j, JSON_COMPACT);
  dg_status st;
  sched_trace *t = sched_trace_from_json(s, &st);
  if (!t) fprintf(stderr, "trace: %s\n", st.msg);
  free(s);
  return t;
}

static inline void tvm_remap(dg_arena *a, const sched_val *v, sched_val *o, const int *map) {
  *o = *v;
  if (v->kind == SV_RV) {
    o->i = map[v->i];
  } else if (v->kind == SV_ARRAY) {
    o->items = DG_ANEWN(a, sched_val, v->n ? v->n : 1);
    for (int i = 0; i < v->n; i++) tvm_remap(a, &v->items[i], &o->items[i], map);
  }
}

/* The normal form, renumbered through the JSON round trip. */
static inline sched_trace *tvm_normal(const sched_trace *t) {
  int *map = malloc(sizeof(int) * (size_t)(t->n_rvs + 1));
  for (int i = 0; i <= t->n_rvs; i++) map[i] = i;
  sched_trace *n = sched_trace_new();
  dg_arena *a = dg_arena_new();
  for (int i = 0; i < t->n; i++) {
    const sched_inst *in = &t->insts[i];
    if (in->kind == SCHED_INST_FUSE && in->n_inputs == 1 && in->n_outputs == 1) {
      map[in->outputs[0]] = map[in->inputs[0].i];
      continue;
    }
    sched_inst c = *in;
    c.inputs = DG_ANEWN(a, sched_val, in->n_inputs ? in->n_inputs : 1);
    for (int k = 0; k < in->n_inputs; k++) tvm_remap(a, &in->inputs[k], &c.inputs[k], map);
    if (c.has_decision) tvm_remap(a, &in->decision, &c.decision, map);
    sched_trace_append(n, &c);
  }
  dg_arena_free(a);
  free(map);
  char *js = sched_trace_to_json(n);
  sched_trace_free(n);
  dg_status st;
  sched_trace *r = sched_trace_from_json(js, &st);
  free(js);
  return r;
}

/* A copy of `t` (normal form) with the decisions of `from` (normal form,
 * the same instructions); NULL if the instruction kinds differ. */
static inline sched_trace *tvm_with_decisions(const sched_trace *t, const sched_trace *from) {
  if (t->n != from->n) return NULL;
  sched_trace *cur = sched_trace_clone(t);
  for (int i = 0; i < t->n; i++) {
    if (t->insts[i].kind != from->insts[i].kind) {
      sched_trace_free(cur);
      return NULL;
    }
    if (!from->insts[i].has_decision) continue;
    sched_trace *next = sched_trace_with_decision(cur, i, &from->insts[i].decision, false);
    sched_trace_free(cur);
    cur = next;
  }
  return cur;
}

/* Index of the first instruction where two traces' JSON differ (for
 * messages), -1 if equal. */
static inline int tvm_first_difference(const sched_trace *a, const sched_trace *b, char *why, size_t n) {
  int m = a->n < b->n ? a->n : b->n;
  for (int i = 0; i < m; i++) {
    sched_trace *x = sched_trace_new(), *y = sched_trace_new();
    for (int k = 0; k <= i; k++) {
      sched_trace_append(x, &a->insts[k]);
      sched_trace_append(y, &b->insts[k]);
    }
    char *jx = sched_trace_to_json(x), *jy = sched_trace_to_json(y);
    bool same = strcmp(jx, jy) == 0;
    if (!same) snprintf(why, n, "instruction %d (%s vs %s)", i, a->insts[i].kind_name, b->insts[i].kind_name);
    free(jx);
    free(jy);
    sched_trace_free(x);
    sched_trace_free(y);
    if (!same) return i;
  }
  if (a->n != b->n) {
    snprintf(why, n, "lengths %d and %d", a->n, b->n);
    return m;
  }
  return -1;
}

#endif
