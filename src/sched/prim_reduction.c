/* prim_reduction.c: the reduction primitives DecomposeReduction and RFactor
 * (TVM's reduction.cc).
 *
 * DecomposeReduction(block, loop) takes a reduction block's init out into a
 * block of its own, `<block>_init`, placed right before `loop`, under fresh
 * copies (`<loop var>_init`) of the loops between `loop` and the block that
 * the spatial bindings use. The block itself keeps its identity, loses its
 * init, is renamed `<block>_update` as TVM renames it, and lists the buffers
 * it writes among its reads. `loop` must be one of the block's loops (below
 * its scope block) and at or above every loop a reduction binding uses. As
 * in TVM's primitive, a reduction whose loop is bound to threadIdx.* (the
 * cross-thread reduction form) is decomposed like any other: it is the
 * RewriteReductionBlock postprocessor, not the primitive, that leaves such
 * blocks alone, since lowering them into an allreduce needs the init.
 *
 * RFactor(loop, factor_axis) turns the reduction over `loop` into a new
 * block `<block>_rf` that reduces everything but `loop` into a new buffer
 * `<buf>_rf` (the written buffer with an axis of loop's extent inserted at
 * factor_axis, allocated in the scope block), under fresh copies of all the
 * block's loops, followed by the original block (same struct, same name:
 * TVM's write-back block) reducing the rf buffer over `loop` alone; the other
 * loops that only reduction bindings use are removed around it (their
 * handles go stale). The reducer is recognised from the init and the body
 * as TVM's registry does: C = C + x with init 0, C = C * x with init 1,
 * C = min(C, x) with init the dtype's largest value, C = max(C, x) with init
 * its lowest; the load of C must be the left operand.
 *
 * Where this differs from TVM: bindings are not checked to be affine; the
 * rf buffer is `<buf>_rf` (TVM: `<buf>.rf`); RFactor refuses a block under
 * an `if` or one that allocates buffers; DecomposeReduction drops the
 * predicate conjuncts over the loops the init leaves out, as TVM does, but
 * refuses a conjunct that ties such a loop to a kept one (TVM drops it too
 * and its init then runs outside the block's domain). New variables are
 * fresh copies with unique names (vi becomes vi_1 where TVM reuses vi). */
#include <string.h>

#include "sched/region.h"

/* ---- shared helpers ------------------------------------------------------------ */

/* The loops of a block below its scope block, outermost first, with their
 * positions in the path. */
typedef struct {
  dg_stmt *loop[256];
  int at[256];
  int n;
  bool under_if;
} loop_chain;

static void chain_of(const sched_path *p, loop_chain *lc) {
  int first = p->n - 1;
  while (first > 0 && p->stmts[first - 1]->kind != DG_STMT_BLOCK) first--;
  lc->n = 0;
  lc->under_if = false;
  for (int i = first; i < p->n - 1; i++) {
    if (p->stmts[i]->kind == DG_STMT_FOR) {
      lc->loop[lc->n] = p->stmts[i];
      lc->at[lc->n++] = i;
    } else if (p->stmts[i]->kind == DG_STMT_IF) {
      lc->under_if = true;
    }
  }
}

/* Names handed out in this step but not yet in the kernel, so that two new
 * variables (or blocks) never get the same name; one list per kind of name
 * (0 variables, 1 buffers, 2 blocks), as the kernel keeps them apart. */
typedef struct {
  DG_VEC(const char *) names[3];
} name_pool;

static bool pooled(const name_pool *np, int what, const char *s) {
  for (size_t i = 0; i < np->names[what].len; i++)
    if (strcmp(np->names[what].data[i], s) == 0) return true;
  return false;
}

static void pool_free(name_pool *np) {
  for (int i = 0; i < 3; i++) DG_VEC_FREE(&np->names[i]);
}

static const char *fresh(dg_func *f, name_pool *np, const char *base, int what) {
  for (int k = 0;; k++) {
    const char *cand = k ? dg_arena_printf(f->arena, "%s_%d", base, k) : base;
    const char *got = what == 0   ? sched_fresh_var_name(f, cand)
                      : what == 1 ? sched_fresh_buffer_name(f, cand)
                                  : sched_fresh_block_name(f, cand);
    if (strcmp(got, cand) == 0 && !pooled(np, what, got)) {
      DG_VEC_PUSH(&np->names[what], got);
      return got;
    }
  }
}

static dg_var *fresh_var(dg_func *f, name_pool *np, const char *base) {
  return ir_var_new(f, fresh(f, np, base, 0), DG_I32);
}

static void copy_anns(dg_func *f, dg_anns *dst, const dg_anns *src) {
  for (int i = 0; i < src->n; i++) ir_anns_set(f, dst, &src->items[i]);
}

static dg_expr **subst_all(dg_func *f, dg_expr *const *e, int n, const dg_subst *map, int nm) {
  dg_expr **out = DG_ANEWN(f->arena, dg_expr *, n ? n : 1);
  for (int i = 0; i < n; i++) out[i] = ir_subst_expr(f, e[i], map, nm);
  return out;
}

/* Puts `stage` right before the statement stored in p->slots[k] (k >= 1). */
static void insert_before(dg_func *f, const sched_path *p, int k, dg_stmt *stage) {
  dg_stmt *parent = p->stmts[k - 1];
  if (parent->kind == DG_STMT_SEQ) {
    int pos = (int)(p->slots[k] - parent->stmts);
    DG_ASSERT(pos >= 0 && pos < parent->n);
    sched_stmt_insert(f, p->slots[k - 1], pos, stage);
  } else {
    sched_stmt_insert(f, p->slots[k], 0, stage);
  }
}

/* Vars of e in order of first appearance, appended to out (no repeats). */
static void vars_in_order(const dg_expr *e, const dg_var **out, int max, int *n) {
  if (!e) return;
  if (e->kind == DG_EXPR_VAR) {
    for (int i = 0; i < *n; i++)
      if (out[i] == e->var) return;
    if (*n < max) out[(*n)++] = e->var;
    return;
  }
  vars_in_order(e->a, out, max, n);
  vars_in_order(e->b, out, max, n);
  vars_in_order(e->c, out, max, n);
  for (int i = 0; i < e->nargs; i++) vars_in_order(e->args[i], out, max, n);
}

static bool uses_any_var(const dg_expr *e, dg_var *const *vars, int n) {
  for (int i = 0; i < n; i++)
    if (ir_expr_uses_var(e, vars[i])) return true;
  return false;
}

static bool stmt_uses_var(const dg_stmt *s, const dg_var *v) {
  if (!s) return false;
  switch (s->kind) {
    case DG_STMT_FOR: return stmt_uses_var(s->body, v);
    case DG_STMT_SEQ:
      for (int i = 0; i < s->n; i++)
        if (stmt_uses_var(s->stmts[i], v)) return true;
      return false;
    case DG_STMT_IF:
      return ir_expr_uses_var(s->cond, v) || stmt_uses_var(s->then_s, v) ||
             stmt_uses_var(s->else_s, v);
    case DG_STMT_STORE:
      for (int i = 0; i < s->nidx; i++)
        if (ir_expr_uses_var(s->idx[i], v)) return true;
      return ir_expr_uses_var(s->value, v);
    case DG_STMT_BLOCK: {
      const dg_block *b = s->block;
      for (int i = 0; i < b->n_iters; i++)
        if (ir_expr_uses_var(b->iters[i].binding, v)) return true;
      return ir_expr_uses_var(b->predicate, v) || stmt_uses_var(b->init, v) ||
             stmt_uses_var(b->body, v);
    }
  }
  return false;
}

/* ---- DecomposeReduction ------------------------------------------------------------ */

/* A conjunct of pred that uses one of `drop` and some other variable too,
 * or NULL. Dropping it would lose a bound on the kept loops; TVM drops it
 * anyway and its init block then runs outside the block's domain. */
static const dg_expr *mixed_conjunct(const dg_expr *pred, dg_var *const *drop, int n) {
  if (!pred) return NULL;
  if (pred->kind == DG_EXPR_AND) {
    const dg_expr *m = mixed_conjunct(pred->a, drop, n);
    return m ? m : mixed_conjunct(pred->b, drop, n);
  }
  if (!uses_any_var(pred, drop, n)) return NULL;
  const dg_var *vs[256];
  int n_vs = 0;
  vars_in_order(pred, vs, 256, &n_vs);
  for (int i = 0; i < n_vs; i++) {
    bool dropped = false;
    for (int k = 0; k < n; k++) dropped |= vs[i] == drop[k];
    if (!dropped) return pred;
  }
  return NULL;
}

/* The conjuncts of pred that use none of `drop` (NULL: none left, true). */
static dg_expr *keep_conjuncts(dg_func *f, dg_expr *pred, dg_var *const *drop, int n) {
  if (!pred) return NULL;
  if (pred->kind == DG_EXPR_AND) {
    dg_expr *a = keep_conjuncts(f, pred->a, drop, n), *b = keep_conjuncts(f, pred->b, drop, n);
    if (a && b) return a == pred->a && b == pred->b ? pred : ir_bin(f, DG_EXPR_AND, a, b);
    return a ? a : b;
  }
  return uses_any_var(pred, drop, n) ? NULL : pred;
}

/* The first loop of lc above position `at` that binds a reduction variable
 * of b (the init cannot go at or below it), its iterator in *iter; -1. */
static int reduction_loop_above(const dg_block *b, const loop_chain *lc, int at, int *iter) {
  for (int r = 0; r < b->n_iters; r++) {
    if (b->iters[r].kind != DG_ITER_REDUCE) continue;
    for (int i = 0; i < at; i++)
      if (ir_expr_uses_var(b->iters[r].binding, lc->loop[i]->loop_var)) {
        *iter = r;
        return i;
      }
  }
  return -1;
}

static dg_block *live_block(sched *s, int rv) {
  if (rv < 0 || rv >= s->n_rvs || s->rvs[rv].kind != SCHED_RV_BLOCK) return NULL;
  sched_val v = {.kind = SV_RV, .i = rv};
  dg_status tmp;
  return sched_rv_block(s, &v, "block", &tmp);
}

bool sched_block_decomposable(sched *s, int block_rv) {
  dg_block *b = live_block(s, block_rv);
  if (!b) return true;
  if (!b->init) return false;
  for (int r = 0; r < b->n_iters; r++)
    if (b->iters[r].kind == DG_ITER_REDUCE) return true;
  return false;
}

bool sched_init_fits(sched *s, int block_rv, int loop_rv) {
  dg_stmt *l = sched_live_loop(s, loop_rv);
  dg_block *b = live_block(s, block_rv);
  sched_path p;
  if (!b || !l || !sched_locate_block(s->f, b, &p)) return true;
  loop_chain lc;
  chain_of(&p, &lc);
  int at = -1;
  for (int i = 0; i < lc.n; i++)
    if (lc.loop[i] == l) at = i;
  int iter;
  return at >= 0 && reduction_loop_above(b, &lc, at, &iter) < 0;
}

bool prim_decompose_reduction(prim_call *c, dg_status *st) {
  sched *s = c->s;
  dg_func *f = s->f;
  dg_block *b = sched_rv_block(s, &c->inst->inputs[0], "block", st);
  if (!b) return false;
  dg_stmt *l = sched_rv_loop(s, &c->inst->inputs[1], "loop", st);
  if (!l) return false;
  sched_path p;
  DG_ASSERT(sched_locate_block(f, b, &p));
  loop_chain lc;
  chain_of(&p, &lc);
  int at = -1;
  for (int i = 0; i < lc.n; i++)
    if (lc.loop[i] == l) at = i;
  if (at < 0)
    return dg_fail(st, DG_ERR_INVALID, "loop %s is not an ancestor of block %s",
                   l->loop_var->name, b->name);
  dg_block *scope = sched_path_parent_block(&p, p.n - 1);
  DG_ASSERT(scope);
  if (!sched_block_check_reduction(scope, b, st)) return false;
  int r_above, above = reduction_loop_above(b, &lc, at, &r_above);
  if (above >= 0)
    return dg_fail(st, DG_ERR_INVALID,
                   "loop %s is below loop %s, which binds reduction variable %s of block %s; "
                   "the init must go at or above every reduction loop",
                   l->loop_var->name, lc.loop[above]->loop_var->name, b->iters[r_above].var->name, b->name);
  for (int r = 0; r < b->n_iters; r++) {
    if (b->iters[r].kind != DG_ITER_REDUCE) continue;
    if (stmt_uses_var(b->init, b->iters[r].var))
      return dg_fail(st, DG_ERR_INVALID, "the init of block %s uses reduction variable %s",
                     b->name, b->iters[r].var->name);
  }
  /* loops from the block up to `loop`: copied when a spatial binding uses
   * them, dropped (with the predicate conjuncts over them) otherwise */
  bool keep[256] = {false};
  dg_var *dropped[256];
  int n_drop = 0;
  for (int i = lc.n - 1; i >= at; i--) {
    for (int k = 0; k < b->n_iters && !keep[i]; k++)
      keep[i] = b->iters[k].kind == DG_ITER_SPATIAL &&
                ir_expr_uses_var(b->iters[k].binding, lc.loop[i]->loop_var);
    if (!keep[i]) dropped[n_drop++] = lc.loop[i]->loop_var;
  }
  const dg_expr *mixed = mixed_conjunct(b->predicate, dropped, n_drop);
  if (mixed) {
    dg_str m;
    dg_str_init(&m);
    ir_print_expr(&m, mixed);
    dg_fail(st, DG_ERR_INVALID,
            "the predicate of block %s ties loops the init block drops to loops it keeps (%s); "
            "decompose_reduction cannot split it",
            b->name, m.s);
    dg_str_free(&m);
    return false;
  }

  /* the init block: the spatial iteration variables, copied */
  name_pool np = {0};
  dg_block *ib = ir_block_new(f, fresh(f, &np, dg_arena_printf(f->arena, "%s_init", b->name), 2));
  const char *update_name = fresh(f, &np, dg_arena_printf(f->arena, "%s_update", b->name), 2);
  dg_subst *vmap = DG_ANEWN(f->arena, dg_subst, b->n_iters ? b->n_iters : 1);
  int nv = 0;
  for (int i = 0; i < b->n_iters; i++) {
    const dg_iter *it = &b->iters[i];
    if (it->kind != DG_ITER_SPATIAL) continue;
    dg_var *v = fresh_var(f, &np, it->var->name);
    ir_block_add_iter(f, ib, v, it->extent, DG_ITER_SPATIAL, it->binding);
    vmap[nv++] = (dg_subst){it->var, ir_var(f, v)};
  }
  ib->body = ir_subst_stmt(f, b->init, vmap, nv);
  for (int w = 0; w < b->n_writes; w++) {
    const dg_region *r = &b->writes[w];
    int nd = r->buf->ndim;
    ir_block_add_write(f, ib, r->buf, subst_all(f, r->min, nd, vmap, nv),
                       subst_all(f, r->ext, nd, vmap, nv));
  }
  copy_anns(f, &ib->anns, &b->anns);

  dg_subst lmap[256];
  int n_l = 0;
  dg_stmt *nest = ir_block_stmt(f, ib);
  for (int i = lc.n - 1; i >= at; i--) {
    dg_stmt *old = lc.loop[i];
    if (!keep[i]) continue;
    dg_var *v = fresh_var(f, &np, dg_arena_printf(f->arena, "%s_init", old->loop_var->name));
    nest = ir_for(f, v, old->extent, old->loop_kind, old->tag, nest);
    copy_anns(f, &nest->anns, &old->anns);
    lmap[n_l++] = (dg_subst){old->loop_var, ir_var(f, v)};
  }
  ib->predicate = keep_conjuncts(f, b->predicate, dropped, n_drop);
  if (ib->predicate) ib->predicate = ir_subst_expr(f, ib->predicate, lmap, n_l);
  for (int k = 0; k < ib->n_iters; k++)
    ib->iters[k].binding = ir_subst_expr(f, ib->iters[k].binding, lmap, n_l);
  pool_free(&np);

  /* the update block: the same struct, without its init, reading what it
   * writes (written buffers not read yet come first, as in TVM) */
  int n_reads = 0;
  dg_region *reads = DG_ANEWN(f->arena, dg_region, b->n_reads + b->n_writes + 1);
  for (int w = 0; w < b->n_writes; w++) {
    if (sched_block_reads(b, b->writes[w].buf)) continue;
    bool dup = false;
    for (int k = 0; k < n_reads; k++) dup |= reads[k].buf == b->writes[w].buf;
    if (dup) continue;
    dg_region r = b->writes[w];
    int nd = r.buf->ndim ? r.buf->ndim : 1;
    r.min = dg_arena_memdup(f->arena, r.min, sizeof(dg_expr *) * (size_t)nd);
    r.ext = dg_arena_memdup(f->arena, r.ext, sizeof(dg_expr *) * (size_t)nd);
    reads[n_reads++] = r;
  }
  for (int k = 0; k < b->n_reads; k++) reads[n_reads++] = b->reads[k];

  sched_path lp;
  DG_ASSERT(sched_locate_stmt(f, l, &lp) && lp.n >= 2);
  insert_before(f, &lp, lp.n - 1, nest);
  b->name = update_name;
  b->init = NULL;
  b->reads = reads;
  b->n_reads = n_reads;
  prim_out(c, sched_rv_new_block(s, ib));
  return true;
}

/* ---- RFactor ------------------------------------------------------------------------ */

/* The block realizes under s (not entering blocks), in program order. */
static void child_realizes(dg_stmt *s, dg_stmt **out, int max, int *n) {
  if (!s) return;
  switch (s->kind) {
    case DG_STMT_FOR: child_realizes(s->body, out, max, n); break;
    case DG_STMT_SEQ:
      for (int i = 0; i < s->n; i++) child_realizes(s->stmts[i], out, max, n);
      break;
    case DG_STMT_IF:
      child_realizes(s->then_s, out, max, n);
      child_realizes(s->else_s, out, max, n);
      break;
    case DG_STMT_BLOCK:
      if (*n < max) out[*n] = s;
      (*n)++;
      break;
    case DG_STMT_STORE: break;
  }
}

static int count_blocks(dg_stmt *s, dg_stmt **first) {
  dg_stmt *one[1] = {NULL};
  int n = 0;
  child_realizes(s, one, 1, &n);
  if (first) *first = one[0];
  return n;
}

/* A commutative reducer of TVM's registry: the combining operator and its
 * identity. */
typedef struct {
  dg_expr_kind op;
  const char *name;
} reducer;

static const reducer REDUCERS[] = {
    {DG_EXPR_ADD, "x + y (init 0)"},
    {DG_EXPR_MUL, "x * y (init 1)"},
    {DG_EXPR_MIN, "min(x, y) (init the largest value)"},
    {DG_EXPR_MAX, "max(x, y) (init the lowest value)"},
};

static dg_expr *reducer_identity(dg_func *f, dg_expr_kind op, dg_dtype t) {
  bool fl = dg_dtype_is_float(t);
  double big = t == DG_F16 ? 65504.0 : t == DG_F32 ? 3.4028234663852886e38 : 1.7976931348623157e308;
  int64_t imax = t == DG_I8 ? INT8_MAX : t == DG_I32 ? INT32_MAX : INT64_MAX;
  int64_t imin = t == DG_I8 ? INT8_MIN : t == DG_I32 ? INT32_MIN : INT64_MIN;
  switch (op) {
    case DG_EXPR_ADD: return fl ? ir_float(f, 0.0, t) : ir_int_t(f, 0, t);
    case DG_EXPR_MUL: return fl ? ir_float(f, 1.0, t) : ir_int_t(f, 1, t);
    case DG_EXPR_MIN: return fl ? ir_float(f, big, t) : ir_int_t(f, imax, t);
    case DG_EXPR_MAX: return fl ? ir_float(f, -big, t) : ir_int_t(f, imin, t);
    default: DG_UNREACHABLE();
  }
}

static bool same_const(const dg_expr *a, const dg_expr *b) {
  if (a->kind != b->kind || a->dtype != b->dtype) return false;
  return a->kind == DG_EXPR_FLOAT ? a->fval == b->fval : a->kind == DG_EXPR_INT && a->ival == b->ival;
}

static bool is_load_of(const dg_expr *e, const dg_stmt *store) {
  if (e->kind != DG_EXPR_LOAD || e->buf != store->buf || e->nargs != store->nidx) return false;
  for (int i = 0; i < e->nargs; i++)
    if (!ir_expr_equal(e->args[i], store->idx[i])) return false;
  return true;
}

static dg_expr **insert_axis(dg_func *f, dg_expr *const *idx, int n, int axis, dg_expr *x) {
  dg_expr **out = DG_ANEWN(f->arena, dg_expr *, n + 1);
  for (int i = 0, k = 0; i <= n; i++) out[i] = i == axis ? x : idx[k++];
  return out;
}

static dg_expr **ones(dg_func *f, int n) {
  dg_expr **out = DG_ANEWN(f->arena, dg_expr *, n ? n : 1);
  for (int i = 0; i < n; i++) out[i] = ir_int(f, 1);
  return out;
}

/* What the checks of RFactor find out, for the rewrite. */
typedef struct {
  dg_stmt *rf;          /* the rfactor loop */
  dg_block *b, *scope;
  sched_path p;         /* to b */
  loop_chain lc;
  dg_stmt *init, *upd;  /* b's init and update stores */
  dg_expr_kind op;      /* the reducer */
  dg_expr *rhs;         /* the update's other operand */
  int axis;             /* factor_axis, non-negative */
} rf_plan;

static bool rf_check_loops(rf_plan *pl, dg_status *st) {
  dg_block *b = pl->b;
  const loop_chain *lc = &pl->lc;
  dg_stmt *first = NULL;
  count_blocks(lc->loop[0]->body, &first);
  if (!first || first->block != b)
    return dg_fail(st, DG_ERR_INVALID, "block %s is not the first block under loop %s",
                   b->name, lc->loop[0]->loop_var->name);
  bool met_reduction = false;
  for (int i = 0; i < lc->n; i++) {
    dg_stmt *l = lc->loop[i];
    bool sp = false, red = false;
    for (int k = 0; k < b->n_iters; k++)
      if (ir_expr_uses_var(b->iters[k].binding, l->loop_var)) {
        if (b->iters[k].kind == DG_ITER_SPATIAL) sp = true;
        else red = true;
      }
    if (sp && red)
      return dg_fail(st, DG_ERR_INVALID,
                     "loop %s is used by both spatial and reduction variables of block %s",
                     l->loop_var->name, b->name);
    if (sp) {
      if (l == pl->rf)
        return dg_fail(st, DG_ERR_INVALID,
                       "loop %s binds a spatial variable of block %s; rfactor needs a reduction loop",
                       l->loop_var->name, b->name);
      continue;
    }
    if (red) {
      if (!met_reduction) {
        int nb = count_blocks(l->body, NULL);
        if (nb != 1)
          return dg_fail(st, DG_ERR_INVALID,
                         "the outermost reduction loop %s of block %s holds %d blocks; it must hold only that block",
                         l->loop_var->name, b->name, nb);
      }
      met_reduction = true;
      continue;
    }
    if (met_reduction && l->extent != 1)
      return dg_fail(st, DG_ERR_INVALID,
                     "loop %s (extent %lld) binds no variable of block %s but sits under a reduction loop",
                     l->loop_var->name, (long long)l->extent, b->name);
  }
  return true;
}

static bool rf_check_reducer(dg_func *f, rf_plan *pl, dg_status *st) {
  dg_block *b = pl->b;
  dg_stmt *init = b->init, *upd = b->body;
  if (!init || init->kind != DG_STMT_STORE || !upd || upd->kind != DG_STMT_STORE)
    return dg_fail(st, DG_ERR_INVALID, "block %s: rfactor needs an init and a body that are single stores",
                   b->name);
  if (init->buf != upd->buf)
    return dg_fail(st, DG_ERR_INVALID, "block %s: the init stores to %s, the body to %s", b->name,
                   init->buf->name, upd->buf->name);
  for (int i = 0; i < upd->nidx; i++)
    if (!ir_expr_equal(init->idx[i], upd->idx[i]))
      return dg_fail(st, DG_ERR_INVALID, "block %s: the init and the body store to different elements of %s",
                     b->name, upd->buf->name);
  for (int k = 0; k < b->n_iters; k++)
    for (int i = 0; i < upd->nidx; i++)
      if (b->iters[k].kind == DG_ITER_REDUCE && ir_expr_uses_var(upd->idx[i], b->iters[k].var))
        return dg_fail(st, DG_ERR_INVALID, "block %s: reduction variable %s indexes the stored buffer %s",
                       b->name, b->iters[k].var->name, upd->buf->name);
  const dg_expr *v = upd->value;
  for (size_t r = 0; r < DG_ARRAY_LEN(REDUCERS); r++) {
    if (v->kind != REDUCERS[r].op || !is_load_of(v->a, upd)) continue;
    if (!same_const(init->value, reducer_identity(f, REDUCERS[r].op, upd->buf->dtype))) continue;
    pl->init = init;
    pl->upd = upd;
    pl->op = REDUCERS[r].op;
    pl->rhs = v->b;
    return true;
  }
  dg_str m;
  dg_str_init(&m);
  dg_str_printf(&m, "block %s: no commutative reducer matches init ", b->name);
  ir_print_expr(&m, init->value);
  dg_str_puts(&m, " and update ");
  ir_print_expr(&m, v);
  dg_str_puts(&m, "; rfactor knows");
  for (size_t r = 0; r < DG_ARRAY_LEN(REDUCERS); r++)
    dg_str_printf(&m, "%s %s", r ? "," : "", REDUCERS[r].name);
  dg_str_puts(&m, ", with the load of the stored element as x");
  dg_fail(st, DG_ERR_INVALID, "%s", m.s);
  dg_str_free(&m);
  return false;
}

/* The loops RFactor removes around the write-back block: the block's loops
 * other than rf that bind a reduction variable. */
static int rf_dropped_loops(const rf_plan *pl, dg_var **out, int max) {
  int n = 0;
  for (int i = 0; i < pl->lc.n && n < max; i++) {
    dg_stmt *l = pl->lc.loop[i];
    if (l == pl->rf) continue;
    for (int k = 0; k < pl->b->n_iters; k++)
      if (pl->b->iters[k].kind == DG_ITER_REDUCE &&
          ir_expr_uses_var(pl->b->iters[k].binding, l->loop_var)) {
        out[n++] = l->loop_var;
        break;
      }
  }
  return n;
}

static bool rf_check(prim_call *c, rf_plan *pl, dg_status *st) {
  sched *s = c->s;
  dg_func *f = s->f;
  pl->rf = sched_rv_loop(s, &c->inst->inputs[0], "loop", st);
  if (!pl->rf) return false;
  const sched_val *a = &c->inst->attrs[0];
  if (a->kind != SV_INT) return dg_fail(st, DG_ERR_INVALID, "factor_axis must be an integer");
  dg_stmt *realize = NULL;
  int nb = count_blocks(pl->rf->body, &realize);
  if (nb != 1)
    return dg_fail(st, DG_ERR_INVALID, "loop %s holds %d blocks; rfactor needs exactly one",
                   pl->rf->loop_var->name, nb);
  dg_block *b = pl->b = realize->block;
  DG_ASSERT(sched_locate_block(f, b, &pl->p));
  pl->scope = sched_path_parent_block(&pl->p, pl->p.n - 1);
  DG_ASSERT(pl->scope);
  if (!sched_block_check_reduction(pl->scope, b, st)) return false;
  if (pl->rf->loop_kind != DG_LOOP_SERIAL)
    return dg_fail(st, DG_ERR_INVALID, "loop %s is %s; rfactor needs a serial loop",
                   pl->rf->loop_var->name,
                   pl->rf->loop_kind == DG_LOOP_THREAD ? dg_thread_tag_name(pl->rf->tag)
                                                       : dg_loop_kind_name(pl->rf->loop_kind));
  chain_of(&pl->p, &pl->lc);
  if (pl->lc.under_if)
    return dg_fail(st, DG_ERR_INVALID, "block %s sits under an if; rfactor does not support that", b->name);
  if (b->n_allocs)
    return dg_fail(st, DG_ERR_INVALID, "block %s allocates buffers; rfactor does not support that", b->name);
  if (!rf_check_loops(pl, st)) return false;
  if (!rf_check_reducer(f, pl, st)) return false;
  /* the write-back block keeps the predicate's conjuncts over the loops it
   * keeps; one that ties them to a dropped reduction loop has no meaning
   * there (TVM would drop it, leaving rf entries that are never written) */
  dg_var *drop[256];
  int n_drop = rf_dropped_loops(pl, drop, 256);
  const dg_expr *mixed = mixed_conjunct(b->predicate, drop, n_drop);
  if (mixed) {
    char *txt = NULL;
    dg_str m;
    dg_str_init(&m);
    ir_print_expr(&m, mixed);
    txt = dg_str_take(&m);
    dg_fail(st, DG_ERR_INVALID,
            "the predicate of block %s ties reduction loops other than %s to loops the "
            "write-back keeps (%s); rfactor does not support that",
            b->name, pl->rf->loop_var->name, txt);
    free(txt);
    return false;
  }
  const dg_buffer *buf = pl->upd->buf;
  int nd = buf->ndim;
  if (a->i < -(nd + 1) || a->i > nd)
    return dg_fail(st, DG_ERR_INVALID,
                   "factor_axis %lld is out of range: buffer %s has %d dimension%s, so it must be in [%d, %d]",
                   (long long)a->i, buf->name, nd, nd == 1 ? "" : "s", -(nd + 1), nd);
  if (nd + 1 > DG_MAX_DIMS)
    return dg_fail(st, DG_ERR_INVALID, "buffer %s has %d dimensions; the rf buffer would exceed %d",
                   buf->name, nd, DG_MAX_DIMS);
  pl->axis = (int)(a->i < 0 ? a->i + nd + 1 : a->i);
  return true;
}

static dg_expr *combine(dg_func *f, dg_expr_kind op, dg_expr *x, dg_expr *y) {
  return ir_bin(f, op, x, y);
}

/* A region of points at idx. */
static void add_point(dg_func *f, dg_block *b, dg_buffer *buf, dg_expr **idx, bool write) {
  if (write) ir_block_add_write(f, b, buf, idx, ones(f, buf->ndim));
  else ir_block_add_read(f, b, buf, idx, ones(f, buf->ndim));
}

bool prim_rfactor(prim_call *c, dg_status *st) {
  sched *s = c->s;
  dg_func *f = s->f;
  rf_plan pl;
  if (!rf_check(c, &pl, st)) return false;
  dg_var *drop[256];
  int n_drop = rf_dropped_loops(&pl, drop, 256);
  dg_block *b = pl.b;
  dg_stmt *rf = pl.rf;
  dg_buffer *buf = pl.upd->buf;
  int nd = buf->ndim, axis = pl.axis;
  name_pool np = {0};

  /* the rf buffer: the written one with rf's axis inserted */
  int64_t shape[DG_MAX_DIMS];
  for (int i = 0, k = 0; i <= nd; i++) shape[i] = i == axis ? rf->extent : buf->shape[k++];
  dg_buffer *rbuf = ir_buffer_new(f, fresh(f, &np, dg_arena_printf(f->arena, "%s_rf", buf->name), 1),
                                  buf->dtype, nd + 1, shape, buf->scope);

  /* the rf block: rf's own spatial variable, then the old variables, those
   * of reductions over rf replaced by one reduction variable per loop */
  dg_block *rb = ir_block_new(f, fresh(f, &np, dg_arena_printf(f->arena, "%s_rf", b->name), 2));
  dg_var *av = fresh_var(f, &np, dg_arena_printf(f->arena, "v%s", rf->loop_var->name));
  ir_block_add_iter(f, rb, av, rf->extent, DG_ITER_SPATIAL, ir_var(f, rf->loop_var));
  dg_subst l2i[256]; /* loop var -> new iteration variable */
  int n_l2i = 0;
  l2i[n_l2i++] = (dg_subst){rf->loop_var, ir_var(f, av)};
  dg_subst *vmap = DG_ANEWN(f->arena, dg_subst, b->n_iters ? b->n_iters : 1);
  int n_vmap = 0;
  for (int i = 0; i < b->n_iters; i++) {
    const dg_iter *it = &b->iters[i];
    if (it->kind == DG_ITER_SPATIAL || !ir_expr_uses_var(it->binding, rf->loop_var)) {
      ir_block_add_iter(f, rb, it->var, it->extent, it->kind, it->binding);
      continue;
    }
    const dg_var *vs[256];
    int n_vs = 0;
    vars_in_order(it->binding, vs, 256, &n_vs);
    for (int k = 0; k < n_vs; k++) {
      dg_stmt *loop = NULL;
      for (int j = 0; j < pl.lc.n; j++)
        if (pl.lc.loop[j]->loop_var == vs[k]) loop = pl.lc.loop[j];
      bool mapped = false;
      for (int j = 0; j < n_l2i; j++) mapped |= l2i[j].from == vs[k];
      if (!loop || mapped) continue;
      dg_var *nv = fresh_var(f, &np, dg_arena_printf(f->arena, "v%s", vs[k]->name));
      ir_block_add_iter(f, rb, nv, loop->extent, DG_ITER_REDUCE, ir_var(f, loop->loop_var));
      l2i[n_l2i++] = (dg_subst){loop->loop_var, ir_var(f, nv)};
    }
    vmap[n_vmap++] = (dg_subst){it->var, ir_subst_expr(f, it->binding, l2i, n_l2i)};
  }
  dg_expr **ridx = insert_axis(f, pl.upd->idx, nd, axis, ir_var(f, av)); /* old variables */
  dg_expr **ridx_rb = subst_all(f, ridx, nd + 1, vmap, n_vmap);
  dg_expr *rhs_rb = ir_subst_expr(f, pl.rhs, vmap, n_vmap);
  rb->body = ir_store(f, rbuf, ridx_rb, nd + 1,
                      combine(f, pl.op, ir_load(f, rbuf, ridx_rb, nd + 1), rhs_rb));
  rb->init = ir_store(f, rbuf, ridx_rb, nd + 1, reducer_identity(f, pl.op, buf->dtype));
  for (int pass = 0; pass < 2; pass++) {
    const dg_region *rs = pass ? b->writes : b->reads;
    int n = pass ? b->n_writes : b->n_reads;
    for (int k = 0; k < n; k++) {
      const dg_region *r = &rs[k];
      dg_buffer *to = r->buf;
      int rn = to->ndim;
      dg_expr **mn = r->min, **ex = r->ext;
      if (to == buf) {
        to = rbuf;
        mn = insert_axis(f, mn, rn, axis, ir_var(f, av));
        ex = insert_axis(f, ex, rn, axis, ir_int(f, 1));
        rn++;
      }
      mn = subst_all(f, mn, rn, vmap, n_vmap);
      ex = subst_all(f, ex, rn, vmap, n_vmap);
      if (pass) ir_block_add_write(f, rb, to, mn, ex);
      else ir_block_add_read(f, rb, to, mn, ex);
    }
  }
  rb->predicate = b->predicate;
  copy_anns(f, &rb->anns, &b->anns);

  /* the rf block's loops: fresh copies of all of the block's loops */
  dg_subst lmap[256];
  for (int i = 0; i < pl.lc.n; i++) {
    dg_var *v = fresh_var(f, &np, pl.lc.loop[i]->loop_var->name);
    lmap[i] = (dg_subst){pl.lc.loop[i]->loop_var, ir_var(f, v)};
  }
  dg_stmt *nest = ir_block_stmt(f, rb);
  for (int i = pl.lc.n - 1; i >= 0; i--) {
    const dg_stmt *old = pl.lc.loop[i];
    nest = ir_for(f, lmap[i].to->var, old->extent, old->loop_kind, old->tag, nest);
    copy_anns(f, &nest->anns, &old->anns);
  }
  for (int k = 0; k < rb->n_iters; k++)
    rb->iters[k].binding = ir_subst_expr(f, rb->iters[k].binding, lmap, pl.lc.n);
  if (rb->predicate) rb->predicate = ir_subst_expr(f, rb->predicate, lmap, pl.lc.n);

  /* the write-back block: b itself, reducing the rf buffer over rf */
  dg_var *wv = fresh_var(f, &np, dg_arena_printf(f->arena, "v%s", rf->loop_var->name));
  dg_iter *old_iters = b->iters;
  int n_old = b->n_iters;
  dg_subst *wmap = DG_ANEWN(f->arena, dg_subst, n_old + 1);
  int n_wmap = 0;
  wmap[n_wmap++] = (dg_subst){av, ir_var(f, wv)};
  b->iters = NULL;
  b->n_iters = 0;
  ir_block_add_iter(f, b, wv, rf->extent, DG_ITER_REDUCE, ir_var(f, rf->loop_var));
  for (int i = 0; i < n_old; i++) {
    if (old_iters[i].kind != DG_ITER_SPATIAL) continue;
    dg_var *v = fresh_var(f, &np, old_iters[i].var->name);
    ir_block_add_iter(f, b, v, old_iters[i].extent, DG_ITER_SPATIAL, old_iters[i].binding);
    wmap[n_wmap++] = (dg_subst){old_iters[i].var, ir_var(f, v)};
  }
  pool_free(&np);
  dg_expr **widx = subst_all(f, pl.upd->idx, nd, wmap, n_wmap);
  dg_expr **wridx = subst_all(f, ridx, nd + 1, wmap, n_wmap);
  b->body = ir_store(f, buf, widx, nd,
                     combine(f, pl.op, ir_load(f, buf, widx, nd), ir_load(f, rbuf, wridx, nd + 1)));
  b->init = ir_store(f, buf, widx, nd, reducer_identity(f, pl.op, buf->dtype));
  b->reads = NULL;
  b->n_reads = 0;
  b->writes = NULL;
  b->n_writes = 0;
  add_point(f, b, rbuf, wridx, false);
  add_point(f, b, buf, widx, true);
  b->predicate = keep_conjuncts(f, b->predicate, drop, n_drop);

  /* drop the loops only reductions other than rf's use, innermost first (a
   * slot then holds what the loop held), then put the rf nest before the
   * outermost loop's place */
  for (int i = pl.lc.n - 1; i >= 0; i--) {
    dg_stmt *l = pl.lc.loop[i];
    if (l == rf) continue;
    bool red = false;
    for (int k = 0; k < n_old; k++)
      if (old_iters[k].kind == DG_ITER_REDUCE && ir_expr_uses_var(old_iters[k].binding, l->loop_var))
        red = true;
    if (!red) continue;
    dg_stmt *inner = l->body;
    if (inner->kind == DG_STMT_SEQ && inner->n == 1) inner = inner->stmts[0];
    *pl.p.slots[pl.lc.at[i]] = inner;
  }
  insert_before(f, &pl.p, pl.lc.at[0], nest);
  ir_block_add_alloc(f, pl.scope, rbuf);
  prim_out(c, sched_rv_new_block(s, rb));
  return true;
}
