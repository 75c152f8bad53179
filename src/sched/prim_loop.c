/* prim_loop.c: the loop transformations Split, Fuse, Reorder, AddUnitLoop
 * (TVM's loop_transformation.cc).
 *
 * Split and Fuse need plain serial loops without annotations; they replace
 * the loops they consume with new ones (the old handles become stale) and
 * substitute the old loop variables in the bindings of the blocks below,
 * simplified with the new loops' ranges only (as TVM's local analyzer does).
 * With preserve_unit_iters, unit loops are given the range [0, 1] during
 * that simplification so that their variables stay in the bindings, as TVM
 * keeps them. Reorder moves loop structs (keeping every handle valid). */
#include <string.h>

#include "sched/sched_impl.h"

static bool attr_flag(const sched_val *v, const char *what, bool *out, dg_status *st) {
  if (v->kind != SV_INT && v->kind != SV_BOOL)
    return dg_fail(st, DG_ERR_INVALID, "%s must be 0 or 1", what);
  *out = v->i != 0;
  return true;
}

static bool plain_loop(const dg_stmt *l, const char *op, dg_status *st) {
  if (l->loop_kind != DG_LOOP_SERIAL || l->anns.n > 0)
    return dg_fail(st, DG_ERR_INVALID,
                   "loop %s is %s%s; %s needs a plain serial loop without annotations",
                   l->loop_var->name,
                   l->loop_kind == DG_LOOP_THREAD ? dg_thread_tag_name(l->tag)
                                                  : dg_loop_kind_name(l->loop_kind),
                   l->anns.n ? " and annotated" : "", op);
  return true;
}

static dg_stmt **slot_of(dg_func *f, dg_stmt *l) {
  sched_path p;
  DG_ASSERT(sched_locate_stmt(f, l, &p));
  return p.slots[p.n - 1];
}

/* Loops nested around a statement and inside one (across blocks), for the
 * depth limit of split: every walk of a loop nest keeps its loops in a
 * bounded stack. */
static int loops_above(const dg_stmt *s, const dg_stmt *target, int above) {
  if (!s) return -1;
  if (s == target) return above;
  switch (s->kind) {
    case DG_STMT_FOR:
      return loops_above(s->body, target, above + 1);
    case DG_STMT_SEQ:
      for (int i = 0; i < s->n; i++) {
        int d = loops_above(s->stmts[i], target, above);
        if (d >= 0) return d;
      }
      return -1;
    case DG_STMT_IF: {
      int d = loops_above(s->then_s, target, above);
      return d >= 0 ? d : loops_above(s->else_s, target, above);
    }
    case DG_STMT_BLOCK: {
      int d = loops_above(s->block->init, target, above);
      return d >= 0 ? d : loops_above(s->block->body, target, above);
    }
    default:
      return -1;
  }
}

static int loops_below(const dg_stmt *s) {
  if (!s) return 0;
  int d = 0, k0;
  switch (s->kind) {
    case DG_STMT_FOR:
      return 1 + loops_below(s->body);
    case DG_STMT_SEQ:
      for (int i = 0; i < s->n; i++) {
        int k = loops_below(s->stmts[i]);
        if (k > d) d = k;
      }
      return d;
    case DG_STMT_IF:
      d = loops_below(s->then_s);
      k0 = loops_below(s->else_s);
      return d > k0 ? d : k0;
    case DG_STMT_BLOCK:
      d = loops_below(s->block->init);
      k0 = loops_below(s->block->body);
      return d > k0 ? d : k0;
    default:
      return 0;
  }
}

bool prim_split(prim_call *c, dg_status *st) {
  sched *s = c->s;
  dg_func *f = s->f;
  const sched_inst *in = c->inst;
  if (in->n_inputs < 2) return dg_fail(st, DG_ERR_INVALID, "needs a loop and at least one factor");
  dg_stmt *l = sched_rv_loop(s, &in->inputs[0], "loop", st);
  if (!l) return false;
  bool preserve = false, nopred = false;
  if (!attr_flag(&in->attrs[0], "preserve_unit_iters", &preserve, st) ||
      !attr_flag(&in->attrs[1], "disable_predication", &nopred, st))
    return false;
  if (!plain_loop(l, "split", st)) return false;
  int n = in->n_inputs - 1;
  if (n > 32) return dg_fail(st, DG_ERR_INVALID, "at most 32 factors");
  int depth = loops_above(f->body, l, 0) + n + loops_below(l->body);
  if (depth > SCHED_MAX_LOOP_DEPTH)
    return dg_fail(st, DG_ERR_INVALID,
                   "splitting loop %s into %d would nest %d loops, more than %d", l->loop_var->name,
                   n, depth, SCHED_MAX_LOOP_DEPTH);
  int64_t fac[32];
  int infer = -1;
  int64_t prod = 1;
  for (int k = 0; k < n; k++) {
    const sched_val *v = &in->inputs[k + 1];
    char what[32];
    snprintf(what, sizeof what, "factor %d", k);
    if (v->kind == SV_NONE) {
      if (infer >= 0) return dg_fail(st, DG_ERR_INVALID, "at most one factor may be None");
      infer = k;
      continue;
    }
    if (!sched_val_int(s, v, what, &fac[k], st)) return false;
    if (fac[k] < 1) return dg_fail(st, DG_ERR_INVALID, "%s is %lld; factors must be positive", what, (long long)fac[k]);
    if (prod > (INT64_C(1) << 40)) return dg_fail(st, DG_ERR_INVALID, "factors are too large");
    prod *= fac[k];
  }
  int64_t extent = l->extent;
  if (infer >= 0) {
    fac[infer] = (extent + prod - 1) / prod;
    prod *= fac[infer];
  } else if (prod < extent) {
    return dg_fail(st, DG_ERR_INVALID,
                   "factors of loop %s multiply to %lld, less than its extent %lld",
                   l->loop_var->name, (long long)prod, (long long)extent);
  }
  /* new loops, innermost first */
  dg_var *vars[32] = {0};
  for (int k = 0; k < n; k++) {
    char base[256];
    snprintf(base, sizeof base, "%s_%d", l->loop_var->name, k);
    vars[k] = ir_var_new(f, sched_fresh_var_name(f, base), DG_I32);
  }
  dg_stmt **slot = slot_of(f, l);
  dg_stmt *body = l->body;
  dg_stmt *loops[32] = {0};
  for (int k = n - 1; k >= 0; k--) {
    body = ir_for(f, vars[k], fac[k], DG_LOOP_SERIAL, DG_TAG_NONE, body);
    loops[k] = body;
  }
  *slot = loops[0];
  /* old var = ((v0 * f1 + v1) * f2 + v2) ... */
  dg_expr *e = ir_var(f, vars[0]);
  for (int k = 1; k < n; k++) e = ir_add(f, ir_mul(f, e, ir_int(f, fac[k])), ir_var(f, vars[k]));
  dg_ranges r = {.n = 0};
  for (int k = 0; k < n; k++)
    ir_ranges_push(&r, vars[k], 0, fac[k] == 1 && preserve ? 1 : fac[k] - 1);
  dg_expr *pred = NULL;
  if (prod > extent && !nopred) pred = ir_simplify(f, ir_bin(f, DG_EXPR_LT, e, ir_int(f, extent)), &r);
  dg_subst map = {l->loop_var, e};
  sched_rewrite_bindings(f, l->body, &map, 1, &r, pred);
  for (int k = 0; k < n; k++) prim_out(c, sched_rv_new_loop(s, loops[k]));
  return true;
}

/* The single loop directly inside l's body, or NULL. */
static dg_stmt *only_child_loop(dg_stmt *l) {
  dg_stmt *b = l->body;
  if (b && b->kind == DG_STMT_SEQ && b->n == 1) b = b->stmts[0];
  return b && b->kind == DG_STMT_FOR ? b : NULL;
}

dg_stmt *sched_live_loop(sched *s, int rv) {
  if (rv < 0 || rv >= s->n_rvs || s->rvs[rv].kind != SCHED_RV_LOOP || !s->rvs[rv].loop) return NULL;
  sched_val v = {.kind = SV_RV, .i = rv};
  dg_status tmp;
  return sched_rv_loop(s, &v, "loop", &tmp);
}

bool sched_loop_plain(sched *s, int rv) {
  dg_stmt *l = sched_live_loop(s, rv);
  dg_status tmp;
  return l && plain_loop(l, "fuse", &tmp);
}

bool sched_loop_nested(sched *s, int outer, int inner) {
  dg_stmt *o = sched_live_loop(s, outer), *i = sched_live_loop(s, inner);
  return o && i && only_child_loop(o) == i;
}

bool prim_fuse(prim_call *c, dg_status *st) {
  sched *s = c->s;
  dg_func *f = s->f;
  const sched_inst *in = c->inst;
  int n = in->n_inputs;
  /* one loop is allowed, as in TVM: it is renamed <loop>_fused */
  if (n < 1) return dg_fail(st, DG_ERR_INVALID, "needs at least one loop");
  if (n > 32) return dg_fail(st, DG_ERR_INVALID, "at most 32 loops");
  bool preserve = false;
  if (!attr_flag(&in->attrs[0], "preserve_unit_iters", &preserve, st)) return false;
  dg_stmt *l[32];
  for (int k = 0; k < n; k++) {
    char what[32];
    snprintf(what, sizeof what, "loop %d", k);
    if (!(l[k] = sched_rv_loop(s, &in->inputs[k], what, st))) return false;
    if (!plain_loop(l[k], "fuse", st)) return false;
  }
  int64_t prod = 1;
  for (int k = 0; k < n; k++) {
    if (k > 0 && only_child_loop(l[k - 1]) != l[k])
      return dg_fail(st, DG_ERR_INVALID,
                     "loop %s is not the only child of loop %s; fused loops must be directly nested",
                     l[k]->loop_var->name, l[k - 1]->loop_var->name);
    if (prod > (INT64_C(1) << 40) / (l[k]->extent > 0 ? l[k]->extent : 1))
      return dg_fail(st, DG_ERR_INVALID, "fused extent is too large");
    prod *= l[k]->extent;
  }
  dg_str name;
  dg_str_init(&name);
  for (int k = 0; k < n; k++) dg_str_printf(&name, "%s_", l[k]->loop_var->name);
  dg_str_puts(&name, "fused");
  dg_var *fv = ir_var_new(f, sched_fresh_var_name(f, name.s), DG_I32);
  dg_str_free(&name);
  dg_stmt **slot = slot_of(f, l[0]);
  dg_stmt *fused = ir_for(f, fv, prod, DG_LOOP_SERIAL, DG_TAG_NONE, l[n - 1]->body);
  *slot = fused;
  dg_subst map[32];
  int64_t lower = 1;
  for (int k = n - 1; k >= 0; k--) {
    dg_expr *q = lower == 1 ? ir_var(f, fv)
                            : ir_bin(f, DG_EXPR_FLOORDIV, ir_var(f, fv), ir_int(f, lower));
    map[k].from = l[k]->loop_var;
    map[k].to = k == 0 ? q : ir_bin(f, DG_EXPR_FLOORMOD, q, ir_int(f, l[k]->extent));
    lower *= l[k]->extent;
  }
  dg_ranges r = {.n = 0};
  ir_ranges_push(&r, fv, 0, prod == 1 && preserve ? 1 : prod - 1);
  sched_rewrite_bindings(f, fused->body, map, n, &r, NULL);
  prim_out(c, sched_rv_new_loop(s, fused));
  return true;
}

/* Whether some block directly under s binds v into a spatial and into a
 * reduction variable at once. */
static bool mixed_loop(const dg_stmt *s, const dg_var *v, const char **blk) {
  if (!s) return false;
  switch (s->kind) {
    case DG_STMT_FOR: return mixed_loop(s->body, v, blk);
    case DG_STMT_SEQ:
      for (int i = 0; i < s->n; i++)
        if (mixed_loop(s->stmts[i], v, blk)) return true;
      return false;
    case DG_STMT_IF: return mixed_loop(s->then_s, v, blk) || mixed_loop(s->else_s, v, blk);
    case DG_STMT_BLOCK: {
      bool sp = false, red = false;
      for (int i = 0; i < s->block->n_iters; i++)
        if (ir_expr_uses_var(s->block->iters[i].binding, v)) {
          if (s->block->iters[i].kind == DG_ITER_REDUCE) red = true;
          else sp = true;
        }
      if (sp && red) *blk = s->block->name;
      return sp && red;
    }
    case DG_STMT_STORE: return false;
  }
  return false;
}

bool prim_reorder(prim_call *c, dg_status *st) {
  sched *s = c->s;
  dg_func *f = s->f;
  const sched_inst *in = c->inst;
  int n = in->n_inputs;
  if (n < 1) return dg_fail(st, DG_ERR_INVALID, "needs at least one loop");
  if (n > 64) return dg_fail(st, DG_ERR_INVALID, "at most 64 loops");
  dg_stmt *l[64];
  int depth[64];
  int top = 0;
  for (int k = 0; k < n; k++) {
    char what[32];
    snprintf(what, sizeof what, "loop %d", k);
    if (!(l[k] = sched_rv_loop(s, &in->inputs[k], what, st))) return false;
    for (int j = 0; j < k; j++)
      if (l[j] == l[k])
        return dg_fail(st, DG_ERR_INVALID, "loop %s appears twice", l[k]->loop_var->name);
    sched_path p;
    DG_ASSERT(sched_locate_stmt(f, l[k], &p));
    depth[k] = p.n;
    if (depth[k] < depth[top]) top = k;
  }
  /* the chain of single-child loops from the outermost given loop down to
   * the deepest given loop; every given loop must be on it */
  dg_stmt *chain[256];
  int m = 0, found = 0;
  for (dg_stmt *x = l[top]; x && m < 256; x = only_child_loop(x)) {
    chain[m++] = x;
    for (int k = 0; k < n; k++)
      if (l[k] == x) found++;
    if (found == n) break;
  }
  if (found != n) {
    for (int k = 0; k < n; k++) {
      bool on = false;
      for (int i = 0; i < m; i++) on |= chain[i] == l[k];
      if (!on)
        return dg_fail(st, DG_ERR_INVALID,
                       "loop %s is not in the chain of directly nested loops under %s",
                       l[k]->loop_var->name, l[top]->loop_var->name);
    }
  }
  /* a loop bound into both spatial and reduction variables of one block
   * must not move: the block's init runs where every reduction variable is
   * 0, which is only the first visit while such loops stay in place */
  for (int j = 0; j < n; j++) {
    const char *blk = NULL;
    if (mixed_loop(chain[m - 1]->body, l[j]->loop_var, &blk))
      return dg_fail(st, DG_ERR_INVALID,
                     "loop %s is bound to both spatial and reduction variables of block %s; "
                     "reordering it would break the reduction's order",
                     l[j]->loop_var->name, blk);
  }
  /* positions of the given loops in the chain, in chain order, receive the
   * given loops in the given order */
  dg_stmt *order[256];
  int k = 0;
  for (int i = 0; i < m; i++) {
    bool given = false;
    for (int j = 0; j < n; j++) given |= chain[i] == l[j];
    order[i] = given ? l[k++] : chain[i];
  }
  dg_stmt **slot = slot_of(f, chain[0]);
  dg_stmt *inner = chain[m - 1]->body;
  for (int i = 0; i < m - 1; i++) order[i]->body = order[i + 1];
  order[m - 1]->body = inner;
  *slot = order[0];
  return true;
}

bool prim_add_unit_loop(prim_call *c, dg_status *st) {
  sched *s = c->s;
  dg_func *f = s->f;
  const sched_val *v = &c->inst->inputs[0];
  dg_stmt *target;
  if (v->kind == SV_RV && v->i >= 0 && v->i < s->n_rvs && s->rvs[v->i].kind == SCHED_RV_LOOP) {
    if (!(target = sched_rv_loop(s, v, "loop", st))) return false;
  } else {
    dg_block *b = sched_rv_block(s, v, "block or loop", st);
    if (!b) return false;
    if (b == ir_func_root(f)) return dg_fail(st, DG_ERR_INVALID, "cannot add a loop above the root block");
    target = sched_block_realize(f, b);
  }
  sched_path p;
  DG_ASSERT(sched_locate_stmt(f, target, &p));
  dg_stmt **slot = p.slots[p.n - 1];
  dg_var *u = ir_var_new(f, sched_fresh_var_name(f, "u"), DG_I32);
  dg_stmt *loop = ir_for(f, u, 1, DG_LOOP_SERIAL, DG_TAG_NONE, target);
  *slot = loop;
  prim_out(c, sched_rv_new_loop(s, loop));
  return true;
}
