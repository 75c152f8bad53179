/* trace.c: traces as data: the instruction-kind table, appending
 * (deep copies into the trace's arena), dead-code elimination
 * (Simplified), decision replacement (WithDecision) and equality. */
#include <stdlib.h>
#include <string.h>

#include "sched/sched_impl.h"

static const struct {
  const char *name;
  int pure, n_inputs, n_attrs, has_decision;
} kinds[] = {
#define X(e, name, fn, pure, nin, nattr, dec, out) {name, pure, nin, nattr, dec},
    SCHED_INST_LIST(X)
#undef X
};
_Static_assert(DG_ARRAY_LEN(kinds) == SCHED_INST_COUNT, "instruction table");

const char *sched_inst_name(sched_inst_kind k) {
  return k < SCHED_INST_COUNT ? kinds[k].name : "Unknown";
}

bool sched_inst_from_name(const char *s, sched_inst_kind *out) {
  for (int i = 0; i < SCHED_INST_COUNT; i++)
    if (strcmp(kinds[i].name, s) == 0) {
      *out = (sched_inst_kind)i;
      return true;
    }
  return false;
}

bool sched_inst_is_pure(sched_inst_kind k) { return k < SCHED_INST_COUNT && kinds[k].pure; }
bool sched_inst_has_decision(sched_inst_kind k) {
  return k < SCHED_INST_COUNT && kinds[k].has_decision;
}

sched_trace *sched_trace_new(void) {
  sched_trace *t = dg_calloc(1, sizeof *t);
  t->arena = dg_arena_new();
  return t;
}

void sched_trace_free(sched_trace *t) {
  if (!t) return;
  dg_arena_free(t->arena);
  free(t->insts);
  free(t);
}

static void val_copy(dg_arena *a, sched_val *dst, const sched_val *src) {
  *dst = *src;
  if (src->kind == SV_STR) dst->s = dg_arena_strdup(a, src->s);
  if (src->kind == SV_ARRAY) {
    dst->items = DG_ANEWN(a, sched_val, src->n ? src->n : 1);
    for (int i = 0; i < src->n; i++) val_copy(a, &dst->items[i], &src->items[i]);
  }
}

static sched_val *vals_copy(dg_arena *a, const sched_val *v, int n) {
  sched_val *d = DG_ANEWN(a, sched_val, n ? n : 1);
  for (int i = 0; i < n; i++) val_copy(a, &d[i], &v[i]);
  return d;
}

void sched_trace_append(sched_trace *t, const sched_inst *in) {
  if (t->n == t->cap) {
    t->cap = t->cap ? 2 * t->cap : 32;
    t->insts = dg_realloc(t->insts, sizeof(sched_inst) * (size_t)t->cap);
  }
  sched_inst *d = &t->insts[t->n++];
  *d = *in;
  d->kind_name = dg_arena_strdup(t->arena, in->kind < SCHED_INST_COUNT ? sched_inst_name(in->kind)
                                                                        : in->kind_name);
  d->inputs = vals_copy(t->arena, in->inputs, in->n_inputs);
  d->attrs = vals_copy(t->arena, in->attrs, in->n_attrs);
  d->outputs = dg_arena_memdup(t->arena, in->outputs, sizeof(int) * (size_t)in->n_outputs);
  d->out_kinds = dg_arena_memdup(t->arena, in->out_kinds, sizeof(sched_rv_kind) * (size_t)in->n_outputs);
  if (in->has_decision) val_copy(t->arena, &d->decision, &in->decision);
  for (int i = 0; i < in->n_outputs; i++)
    if (in->outputs[i] >= t->n_rvs) t->n_rvs = in->outputs[i] + 1;
}

sched_trace *sched_trace_clone(const sched_trace *t) {
  sched_trace *c = sched_trace_new();
  for (int i = 0; i < t->n; i++) sched_trace_append(c, &t->insts[i]);
  c->n_rvs = t->n_rvs;
  return c;
}

/* Renumbers handles serially in order of definition (outputs), rewriting
 * inputs. Handles used but never defined keep a fresh number too. */
static void renumber(sched_trace *t) {
  int cap = t->n_rvs + 1;
  int *map = dg_malloc(sizeof(int) * (size_t)cap);
  for (int i = 0; i < cap; i++) map[i] = -1;
  int next = 0;
  for (int i = 0; i < t->n; i++)
    for (int k = 0; k < t->insts[i].n_outputs; k++) {
      int o = t->insts[i].outputs[k];
      if (o >= 0 && o < cap && map[o] < 0) map[o] = next++;
      t->insts[i].outputs[k] = o >= 0 && o < cap ? map[o] : o;
    }
  for (int i = 0; i < t->n; i++) {
    sched_inst *in = &t->insts[i];
    sched_val *stack[64];
    int sp = 0;
    for (int k = 0; k < in->n_inputs; k++) stack[sp++] = &in->inputs[k];
    while (sp > 0) {
      sched_val *v = stack[--sp];
      if (v->kind == SV_RV && v->i >= 0 && v->i < cap && map[v->i] >= 0) v->i = map[v->i];
      if (v->kind == SV_ARRAY)
        for (int k = 0; k < v->n && sp < 64; k++) stack[sp++] = &v->items[k];
    }
  }
  t->n_rvs = next;
  free(map);
}

static void mark_used(const sched_val *v, bool *used, int cap) {
  if (v->kind == SV_RV && v->i >= 0 && v->i < cap) used[v->i] = true;
  if (v->kind == SV_ARRAY)
    for (int k = 0; k < v->n; k++) mark_used(&v->items[k], used, cap);
}

sched_trace *sched_trace_simplified(const sched_trace *t, bool remove_postproc) {
  int n = t->n;
  if (remove_postproc)
    for (int i = 0; i < t->n; i++)
      if (t->insts[i].kind == SCHED_INST_ENTER_POSTPROC) {
        n = i;
        break;
      }
  int cap = t->n_rvs + 1;
  bool *used = dg_calloc((size_t)cap, 1);
  bool *keep = dg_calloc((size_t)(n ? n : 1), 1);
  for (int i = n; i-- > 0;) {
    const sched_inst *in = &t->insts[i];
    bool k = !sched_inst_is_pure(in->kind) || in->kind >= SCHED_INST_COUNT;
    for (int o = 0; o < in->n_outputs && !k; o++)
      if (in->outputs[o] >= 0 && in->outputs[o] < cap && used[in->outputs[o]]) k = true;
    keep[i] = k;
    if (k)
      for (int j = 0; j < in->n_inputs; j++) mark_used(&in->inputs[j], used, cap);
  }
  sched_trace *r = sched_trace_new();
  for (int i = 0; i < n; i++)
    if (keep[i]) sched_trace_append(r, &t->insts[i]);
  free(used);
  free(keep);
  renumber(r);
  return r;
}

sched_trace *sched_trace_with_decision(const sched_trace *t, int index,
                                       const sched_val *decision, bool remove_postproc) {
  sched_trace *r = sched_trace_new();
  for (int i = 0; i < t->n; i++) {
    if (remove_postproc && t->insts[i].kind == SCHED_INST_ENTER_POSTPROC) break;
    if (i == index) {
      sched_inst in = t->insts[i];
      in.has_decision = true;
      in.decision = *decision;
      sched_trace_append(r, &in);
    } else {
      sched_trace_append(r, &t->insts[i]);
    }
  }
  r->n_rvs = t->n_rvs;
  return r;
}

static bool val_equal(const sched_val *a, const sched_val *b) {
  if (a->kind != b->kind) return false;
  switch (a->kind) {
    case SV_NONE: return true;
    case SV_INT:
    case SV_BOOL:
    case SV_RV: return a->i == b->i;
    case SV_FLOAT: return a->f == b->f;
    case SV_STR: return strcmp(a->s, b->s) == 0;
    case SV_ARRAY:
      if (a->n != b->n) return false;
      for (int i = 0; i < a->n; i++)
        if (!val_equal(&a->items[i], &b->items[i])) return false;
      return true;
  }
  return false;
}

bool sched_trace_equal(const sched_trace *a, const sched_trace *b) {
  if (a->n != b->n) return false;
  for (int i = 0; i < a->n; i++) {
    const sched_inst *x = &a->insts[i], *y = &b->insts[i];
    if (x->kind != y->kind || strcmp(x->kind_name, y->kind_name) != 0) return false;
    if (x->n_inputs != y->n_inputs || x->n_attrs != y->n_attrs ||
        x->n_outputs != y->n_outputs || x->has_decision != y->has_decision)
      return false;
    for (int k = 0; k < x->n_inputs; k++)
      if (!val_equal(&x->inputs[k], &y->inputs[k])) return false;
    for (int k = 0; k < x->n_attrs; k++)
      if (!val_equal(&x->attrs[k], &y->attrs[k])) return false;
    for (int k = 0; k < x->n_outputs; k++)
      if (x->outputs[k] != y->outputs[k] || x->out_kinds[k] != y->out_kinds[k]) return false;
    if (x->has_decision && !val_equal(&x->decision, &y->decision)) return false;
  }
  return true;
}
