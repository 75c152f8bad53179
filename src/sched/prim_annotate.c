/* prim_annotate.c: Annotate, Unannotate and the EnterPostproc marker.
 * An annotation value that is an integer handle is stored as its value, as
 * TVM stores the sampled IntImm. */
#include <string.h>

#include "sched/sched_impl.h"

/* The annotation set of a block or loop handle. */
static dg_anns *target_anns(prim_call *c, const sched_val *v, const char **label, dg_status *st) {
  sched *s = c->s;
  if (v->kind == SV_RV && v->i >= 0 && v->i < s->n_rvs && s->rvs[v->i].kind == SCHED_RV_LOOP) {
    dg_stmt *l = sched_rv_loop(s, v, "target", st);
    if (!l) return NULL;
    *label = l->loop_var->name;
    return &l->anns;
  }
  dg_block *b = sched_rv_block(s, v, "target (a block or loop)", st);
  if (!b) return NULL;
  *label = b->name;
  return &b->anns;
}

bool prim_annotate(prim_call *c, dg_status *st) {
  const sched_val *key = &c->inst->attrs[0], *val = &c->inst->inputs[1];
  if (key->kind != SV_STR) return dg_fail(st, DG_ERR_INVALID, "annotation key must be a string");
  dg_ann a = {.key = key->s};
  switch (val->kind) {
    case SV_INT:
    case SV_BOOL:
      a.kind = DG_ANN_INT;
      a.i = val->i;
      break;
    case SV_FLOAT:
      a.kind = DG_ANN_FLOAT;
      a.f = val->f;
      break;
    case SV_STR:
      a.kind = DG_ANN_STR;
      a.s = val->s;
      break;
    case SV_RV:
      a.kind = DG_ANN_INT;
      if (!sched_val_int(c->s, val, "annotation value", &a.i, st)) return false;
      break;
    case SV_ARRAY: {
      a.kind = DG_ANN_INTS;
      a.nints = val->n;
      int64_t *ints = DG_ANEWN(c->s->f->arena, int64_t, val->n ? val->n : 1);
      for (int i = 0; i < val->n; i++)
        if (!sched_val_int(c->s, &val->items[i], "annotation list item", &ints[i], st)) return false;
      a.ints = ints;
      break;
    }
    case SV_NONE: return dg_fail(st, DG_ERR_INVALID, "annotation value cannot be None");
  }
  const char *label;
  dg_anns *anns = target_anns(c, &c->inst->inputs[0], &label, st);
  if (!anns) return false;
  ir_anns_set(c->s->f, anns, &a);
  return true;
}

bool prim_unannotate(prim_call *c, dg_status *st) {
  const sched_val *key = &c->inst->attrs[0];
  if (key->kind != SV_STR) return dg_fail(st, DG_ERR_INVALID, "annotation key must be a string");
  const char *label;
  dg_anns *anns = target_anns(c, &c->inst->inputs[0], &label, st);
  if (!anns) return false;
  if (!ir_anns_remove(anns, key->s))
    return dg_fail(st, DG_ERR_INVALID, "%s has no annotation '%s'", label, key->s);
  return true;
}

bool prim_enter_postproc(prim_call *c, dg_status *st) {
  (void)c;
  (void)st;
  return true;
}
