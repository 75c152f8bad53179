/* prim_blockize.c: Blockize and Tensorize (TVM's blockize_tensorize.cc).
 *
 * Blockize(loop) wraps the subtree under `loop` (a chain of loops down to
 * exactly one block) in a new outer block `<block>_o`. Each iteration
 * variable v of the block is divided into an outer part over the loops
 * outside the subtree and an inner part over the loops inside it (TVM's
 * subspace division): a binding that uses only one side goes to that side
 * whole; a binding that uses both must be affine, o + i with the inner part
 * i a dense mixed-radix sum of the inner loops (coefficients 1, e1, e1*e2,
 * ...) of extent E, and the outer part o divisible by E and itself dense.
 * The outer block gets one iteration variable `v_o` per v (extent: the outer
 * part's span, or v's extent for a one-sided binding; kind: v's), the inner
 * block keeps only the `v_i` of extent > 1, and v is replaced in the inner
 * block by v_o * E + v_i (or v_i, v_o, 0 where a side has extent 1). The
 * outer block's reads and writes are the inner block's, relaxed over the
 * v_i. A block with an init hands it to the outer block: `<block>_init`
 * under fresh copies of the inner loops its spatial bindings use (TVM's
 * GenerateOuterInit), and the inner block loses it; with a reduction
 * variable on the outer side the inner block also lists what it writes
 * among its reads. The predicate is split by conjunct: a conjunct over outer
 * loops only goes to the outer block, one over inner loops only stays; one
 * that mixes them is refused (TVM's division refuses it too). Without
 * preserve_unit_iters, loops of extent 1 count as the constant 0.
 *
 * The inner block and every loop keep their identity (handles stay valid);
 * the step is planned completely before the kernel is touched. Blockize of a
 * list of blocks (TVM's other form) is refused with a message.
 *
 * Tensorize(block_or_loop, intrin) checks that the block (for a loop: the
 * block Blockize makes of it, undone if the check fails) computes what the
 * intrinsic describes (intrin_match, src/sched/intrin.c) and annotates it
 * `tensor_intrin = <name>`. The body is kept: on the CPU the kernel runs as
 * written; the CUDA lowering emits the WMMA call for the annotated block
 * (contract in include/dragon/intrin.h and docs/intrinsics.md). */
#include <stdlib.h>
#include <string.h>

#include "dragon/intrin.h"
#include "sched/region.h"

enum { MAX_LOOPS = 64, MAX_NAMES = 512 };

typedef struct {
  dg_func *f;
  dg_stmt *loop;            /* the loop blockized */
  dg_stmt **slot;           /* where it is stored */
  dg_block *blk;            /* the block under it; keeps its identity */
  dg_stmt *inner[MAX_LOOPS]; /* `loop` down to the block, outermost first */
  int n_inner;
  dg_block shadow;          /* blk's contents once the step is applied */
  dg_stmt *outer_realize;   /* the new outer block, realized where `loop` was */
  const char *names[MAX_NAMES]; /* names planned so far */
  int n_names;
} bz_plan;

static bool flag_attr(const sched_val *v, const char *what, bool *out, dg_status *st) {
  if (v->kind != SV_INT && v->kind != SV_BOOL)
    return dg_fail(st, DG_ERR_INVALID, "%s must be a boolean", what);
  *out = v->i != 0;
  return true;
}

/* A name unique in the kernel and among the names this step has planned. */
static const char *plan_name(bz_plan *p, const char *base, bool block) {
  for (int k = 0;; k++) {
    const char *cand = k ? dg_arena_printf(p->f->arena, "%s_%d", base, k) : base;
    const char *r = block ? sched_fresh_block_name(p->f, cand) : sched_fresh_var_name(p->f, cand);
    if (strcmp(r, cand) != 0) continue;
    bool dup = false;
    for (int i = 0; i < p->n_names && !dup; i++) dup = strcmp(p->names[i], r) == 0;
    if (dup) continue;
    DG_ASSERT(p->n_names < MAX_NAMES);
    p->names[p->n_names++] = r;
    return r;
  }
}

static void push_range(dg_ranges *r, const dg_var *v, int64_t extent) {
  if (r->n < (int)DG_ARRAY_LEN(r->var)) ir_ranges_push(r, v, 0, extent - 1);
}

static bool is_inner_var(const bz_plan *p, const dg_var *v) {
  for (int i = 0; i < p->n_inner; i++)
    if (p->inner[i]->loop_var == v) return true;
  return false;
}

/* Whether e uses an inner loop variable (*in) and any other variable (*out). */
static void classify(const bz_plan *p, const dg_expr *e, bool *in, bool *out) {
  if (!e) return;
  if (e->kind == DG_EXPR_VAR) {
    if (is_inner_var(p, e->var)) *in = true;
    else *out = true;
    return;
  }
  classify(p, e->a, in, out);
  classify(p, e->b, in, out);
  classify(p, e->c, in, out);
  for (int i = 0; i < e->nargs; i++) classify(p, e->args[i], in, out);
}

/* ---- affine forms ------------------------------------------------------------- */

typedef struct {
  const dg_var *v;
  int64_t c;
} lin_term;

typedef struct {
  lin_term t[64];
  int n;
  int64_t c0;
} lin_form;

static bool lin_add(lin_form *l, const dg_expr *e, int64_t scale) {
  int64_t k;
  switch (e->kind) {
    case DG_EXPR_INT: l->c0 += scale * e->ival; return true;
    case DG_EXPR_VAR:
      for (int i = 0; i < l->n; i++)
        if (l->t[i].v == e->var) {
          l->t[i].c += scale;
          return true;
        }
      if (l->n == (int)DG_ARRAY_LEN(l->t)) return false;
      l->t[l->n++] = (lin_term){e->var, scale};
      return true;
    case DG_EXPR_ADD: return lin_add(l, e->a, scale) && lin_add(l, e->b, scale);
    case DG_EXPR_SUB: return lin_add(l, e->a, scale) && lin_add(l, e->b, -scale);
    case DG_EXPR_MUL:
      if (ir_is_const_int(e->a, &k)) return lin_add(l, e->b, scale * k);
      if (ir_is_const_int(e->b, &k)) return lin_add(l, e->a, scale * k);
      return false;
    default: return false;
  }
}

static int64_t loop_extent_of(const bz_plan *p, const sched_path *path, const dg_var *v) {
  for (int i = 0; i < p->n_inner; i++)
    if (p->inner[i]->loop_var == v) return p->inner[i]->extent;
  for (int i = 0; i < path->n; i++)
    if (path->stmts[i]->kind == DG_STMT_FOR && path->stmts[i]->loop_var == v)
      return path->stmts[i]->extent;
  return -1;
}

/* Terms sorted by coefficient must be dense: 1, e1, e1*e2, ... (unit
 * loops contribute nothing and are skipped). Returns the span or -1. */
static int64_t dense_span(lin_term *t, int n, const int64_t *ext) {
  int64_t order[64];
  for (int i = 0; i < n; i++) order[i] = i;
  for (int i = 1; i < n; i++)
    for (int j = i; j > 0 && t[order[j]].c < t[order[j - 1]].c; j--) {
      int64_t x = order[j];
      order[j] = order[j - 1];
      order[j - 1] = x;
    }
  int64_t span = 1;
  for (int i = 0; i < n; i++) {
    int64_t e = ext[order[i]];
    if (e == 1) continue;
    if (e < 1 || t[order[i]].c != span) return -1;
    span *= e;
  }
  return span;
}

static dg_expr *lin_expr(dg_func *f, const lin_term *t, int n, int64_t div, int64_t c0,
                         dg_dtype dt) {
  dg_expr *e = ir_int_t(f, c0, dt);
  for (int i = 0; i < n; i++)
    e = ir_add(f, e, ir_mul(f, ir_int_t(f, t[i].c / div, dt), ir_var(f, (dg_var *)t[i].v)));
  return e;
}

/* ---- substitution with simplification (copying; shares what is unchanged) ----- */

typedef struct {
  dg_func *f;
  const dg_subst *map;
  int n;
  dg_ranges *r;
} ss_ctx;

static dg_expr *ss_expr(ss_ctx *c, dg_expr *e) {
  if (!e) return NULL;
  dg_expr *x = ir_subst_expr(c->f, e, c->map, c->n);
  return x == e ? e : ir_simplify(c->f, x, c->r);
}

static dg_expr **ss_arr(ss_ctx *c, dg_expr **v, int n, bool *ch) {
  dg_expr **out = NULL;
  for (int i = 0; i < n; i++) {
    dg_expr *x = ss_expr(c, v[i]);
    if (x == v[i] && !out) continue;
    if (!out) {
      out = DG_ANEWN(c->f->arena, dg_expr *, n);
      memcpy(out, v, sizeof(*out) * (size_t)n);
    }
    out[i] = x;
  }
  if (!out) return v;
  *ch = true;
  return out;
}

static dg_region *ss_regions(ss_ctx *c, dg_region *rs, int n, bool *ch) {
  if (n == 0) return rs;
  dg_region *out = DG_ANEWN(c->f->arena, dg_region, n);
  bool any = false;
  for (int i = 0; i < n; i++) {
    int nd = rs[i].buf->ndim;
    out[i] = rs[i];
    out[i].min = ss_arr(c, rs[i].min, nd, &any);
    out[i].ext = ss_arr(c, rs[i].ext, nd, &any);
  }
  if (!any) return rs;
  *ch = true;
  return out;
}

static dg_stmt *ss_stmt(ss_ctx *c, dg_stmt *s);

static dg_block *ss_block(ss_ctx *c, dg_block *b) {
  int mark = c->r->n;
  for (int i = 0; i < b->n_iters; i++) push_range(c->r, b->iters[i].var, b->iters[i].extent);
  bool ch = false;
  dg_iter *iters = DG_ANEWN(c->f->arena, dg_iter, b->n_iters ? b->n_iters : 1);
  for (int i = 0; i < b->n_iters; i++) {
    iters[i] = b->iters[i];
    iters[i].binding = ss_expr(c, b->iters[i].binding);
    ch |= iters[i].binding != b->iters[i].binding;
  }
  dg_expr *pred = ss_expr(c, b->predicate);
  ch |= pred != b->predicate;
  dg_region *reads = ss_regions(c, b->reads, b->n_reads, &ch);
  dg_region *writes = ss_regions(c, b->writes, b->n_writes, &ch);
  dg_stmt *init = ss_stmt(c, b->init), *body = ss_stmt(c, b->body);
  ch |= init != b->init || body != b->body;
  ir_ranges_pop(c->r, c->r->n - mark);
  if (!ch) return b;
  dg_block *nb = DG_ANEW(c->f->arena, dg_block);
  *nb = *b;
  nb->iters = iters;
  nb->predicate = pred;
  nb->reads = reads;
  nb->writes = writes;
  nb->init = init;
  nb->body = body;
  return nb;
}

static dg_stmt *ss_stmt(ss_ctx *c, dg_stmt *s) {
  if (!s) return NULL;
  dg_stmt *n = NULL;
  switch (s->kind) {
    case DG_STMT_FOR: {
      int mark = c->r->n;
      push_range(c->r, s->loop_var, s->extent);
      dg_stmt *body = ss_stmt(c, s->body);
      ir_ranges_pop(c->r, c->r->n - mark);
      if (body == s->body) return s;
      n = DG_ANEW(c->f->arena, dg_stmt);
      *n = *s;
      n->body = body;
      return n;
    }
    case DG_STMT_SEQ: {
      dg_stmt **out = NULL;
      for (int i = 0; i < s->n; i++) {
        dg_stmt *x = ss_stmt(c, s->stmts[i]);
        if (x == s->stmts[i] && !out) continue;
        if (!out) {
          out = DG_ANEWN(c->f->arena, dg_stmt *, s->n);
          memcpy(out, s->stmts, sizeof(*out) * (size_t)s->n);
        }
        out[i] = x;
      }
      if (!out) return s;
      n = DG_ANEW(c->f->arena, dg_stmt);
      *n = *s;
      n->stmts = out;
      return n;
    }
    case DG_STMT_BLOCK: {
      dg_block *b = ss_block(c, s->block);
      if (b == s->block) return s;
      n = DG_ANEW(c->f->arena, dg_stmt);
      *n = *s;
      n->block = b;
      return n;
    }
    case DG_STMT_STORE: {
      bool ch = false;
      dg_expr **idx = ss_arr(c, s->idx, s->nidx, &ch);
      dg_expr *v = ss_expr(c, s->value);
      if (!ch && v == s->value) return s;
      n = DG_ANEW(c->f->arena, dg_stmt);
      *n = *s;
      n->idx = idx;
      n->value = v;
      return n;
    }
    case DG_STMT_IF: {
      dg_expr *cond = ss_expr(c, s->cond);
      dg_stmt *t = ss_stmt(c, s->then_s), *e = ss_stmt(c, s->else_s);
      if (cond == s->cond && t == s->then_s && e == s->else_s) return s;
      n = DG_ANEW(c->f->arena, dg_stmt);
      *n = *s;
      n->cond = cond;
      n->then_s = t;
      n->else_s = e;
      return n;
    }
  }
  return s;
}

/* Moving the planned contents into the kernel's own nodes, so that blocks
 * and loops under the blockized one keep their identity: `now` is `old`
 * rewritten by ss_stmt (sharing what did not change). */
static void graft_block(dg_block *old, const dg_block *now);

static dg_stmt *graft(dg_stmt *old, dg_stmt *now) {
  if (old == now || !old || !now || old->kind != now->kind) return now;
  switch (old->kind) {
    case DG_STMT_FOR: old->body = graft(old->body, now->body); return old;
    case DG_STMT_SEQ:
      DG_ASSERT(old->n == now->n);
      for (int i = 0; i < old->n; i++) old->stmts[i] = graft(old->stmts[i], now->stmts[i]);
      return old;
    case DG_STMT_IF:
      old->cond = now->cond;
      old->then_s = graft(old->then_s, now->then_s);
      old->else_s = graft(old->else_s, now->else_s);
      return old;
    case DG_STMT_BLOCK: graft_block(old->block, now->block); return old;
    case DG_STMT_STORE: return now;
  }
  return now;
}

static void graft_block(dg_block *old, const dg_block *now) {
  if (old == now) return;
  dg_stmt *init = old->init, *body = old->body;
  *old = *now;
  old->init = graft(init, now->init);
  old->body = graft(body, now->body);
}

/* ---- the plan ------------------------------------------------------------------- */

static bool region_uses_var(const dg_region *r, const dg_var *v) {
  for (int d = 0; d < r->buf->ndim; d++)
    if (ir_expr_uses_var(r->min[d], v) || ir_expr_uses_var(r->ext[d], v)) return true;
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
      for (int i = 0; i < b->n_reads; i++)
        if (region_uses_var(&b->reads[i], v)) return true;
      for (int i = 0; i < b->n_writes; i++)
        if (region_uses_var(&b->writes[i], v)) return true;
      return ir_expr_uses_var(b->predicate, v) || stmt_uses_var(b->init, v) ||
             stmt_uses_var(b->body, v);
    }
  }
  return false;
}

static int count_blocks(const dg_stmt *s) {
  if (!s) return 0;
  switch (s->kind) {
    case DG_STMT_FOR: return count_blocks(s->body);
    case DG_STMT_SEQ: {
      int k = 0;
      for (int i = 0; i < s->n; i++) k += count_blocks(s->stmts[i]);
      return k;
    }
    case DG_STMT_IF: return count_blocks(s->then_s) + count_blocks(s->else_s);
    case DG_STMT_BLOCK: return 1;
    case DG_STMT_STORE: return 0;
  }
  return 0;
}

static dg_expr *and_pred(dg_func *f, dg_expr *a, dg_expr *b) {
  return a ? ir_bin(f, DG_EXPR_AND, a, b) : b;
}

static void split_conjuncts(dg_expr *e, dg_expr **out, int *n, int max) {
  if (e->kind == DG_EXPR_AND) {
    split_conjuncts(e->a, out, n, max);
    split_conjuncts(e->b, out, n, max);
  } else if (*n < max) {
    out[(*n)++] = e;
  }
}

/* Relaxes a region over the inner iteration variables (TVM's EvalSet of
 * the range [min, min + ext - 1]). */
static void relax_region(dg_func *f, const dg_region *r, const dg_ranges *relax,
                         const dg_ranges *known, dg_expr **mn, dg_expr **ex) {
  for (int d = 0; d < r->buf->ndim; d++) {
    dg_expr *lo = r->min[d], *ext = r->ext[d];
    bool uses = false;
    for (int i = 0; i < relax->n && !uses; i++)
      uses = ir_expr_uses_var(lo, relax->var[i]) || ir_expr_uses_var(ext, relax->var[i]);
    if (!uses) {
      mn[d] = lo;
      ex[d] = ext;
      continue;
    }
    dg_expr *last = ir_simplify(f, ir_sub(f, ir_add(f, lo, ext), ir_int_t(f, 1, lo->dtype)), known);
    dg_expr *a, *b, *ignore;
    sched_region_relax(f, lo, relax, known, &a, &ignore);
    sched_region_relax(f, last, relax, known, &ignore, &b);
    mn[d] = a;
    ex[d] = ir_simplify(f, ir_add(f, ir_sub(f, b, a), ir_int_t(f, 1, a->dtype)), known);
  }
}

static bool bz_plan_make(sched *s, dg_stmt *loop, bool preserve, bz_plan *p, dg_status *st) {
  dg_func *f = s->f;
  memset(p, 0, sizeof *p);
  p->f = f;
  p->loop = loop;
  sched_path path;
  DG_ASSERT(sched_locate_stmt(f, loop, &path));
  p->slot = path.slots[path.n - 1];
  dg_stmt *x = loop;
  while (x && x->kind == DG_STMT_FOR && p->n_inner < MAX_LOOPS) {
    p->inner[p->n_inner++] = x;
    x = x->body;
  }
  if (!x || x->kind != DG_STMT_BLOCK) {
    int nb = count_blocks(loop);
    if (nb == 0) return dg_fail(st, DG_ERR_INVALID, "loop %s holds no block", loop->loop_var->name);
    if (nb > 1)
      return dg_fail(st, DG_ERR_INVALID,
                     "loop %s holds %d blocks; Blockize needs exactly one (a list of blocks is "
                     "not supported)",
                     loop->loop_var->name, nb);
    return dg_fail(st, DG_ERR_INVALID,
                   "the block under loop %s is not under a chain of loops only (an if or a "
                   "sequence is in between)",
                   loop->loop_var->name);
  }
  dg_block *blk = p->blk = x->block;

  /* what is known about the variables around: enclosing loops and blocks */
  /* (unit loops that are preserved get [0, 1] so that they stay in the
   * simplified bindings, as Split does) */
  dg_ranges known = {.n = 0};
  for (int i = 0; i < path.n - 1; i++) {
    dg_stmt *y = path.stmts[i];
    if (y->kind == DG_STMT_FOR) push_range(&known, y->loop_var, y->extent == 1 && preserve ? 2 : y->extent);
    if (y->kind == DG_STMT_BLOCK)
      for (int k = 0; k < y->block->n_iters; k++)
        push_range(&known, y->block->iters[k].var, y->block->iters[k].extent);
  }
  int n_outside = known.n;
  for (int i = 0; i < p->n_inner; i++)
    push_range(&known, p->inner[i]->loop_var,
               p->inner[i]->extent == 1 && preserve ? 2 : p->inner[i]->extent);

  /* unit loops are the constant 0 unless preserved */
  dg_subst unit[MAX_LOOPS + 256];
  int n_unit = 0;
  if (!preserve) {
    for (int i = 0; i < path.n - 1; i++)
      if (path.stmts[i]->kind == DG_STMT_FOR && path.stmts[i]->extent == 1 && n_unit < 256)
        unit[n_unit++] = (dg_subst){path.stmts[i]->loop_var,
                                    ir_int_t(f, 0, path.stmts[i]->loop_var->dtype)};
    for (int i = 0; i < p->n_inner; i++)
      if (p->inner[i]->extent == 1)
        unit[n_unit++] = (dg_subst){p->inner[i]->loop_var, ir_int_t(f, 0, p->inner[i]->loop_var->dtype)};
  }

  /* the subspace division, one iteration variable at a time */
  int ni = blk->n_iters;
  int64_t *eo = DG_ANEWN(f->arena, int64_t, ni ? ni : 1), *ei = DG_ANEWN(f->arena, int64_t, ni ? ni : 1);
  dg_expr **bo = DG_ANEWN(f->arena, dg_expr *, ni ? ni : 1), **bi = DG_ANEWN(f->arena, dg_expr *, ni ? ni : 1);
  for (int t = 0; t < ni; t++) {
    const dg_iter *it = &blk->iters[t];
    dg_expr *e = it->binding;
    if (n_unit) e = ir_simplify(f, ir_subst_expr(f, e, unit, n_unit), &known);
    bool uin = false, uout = false;
    classify(p, e, &uin, &uout);
    dg_dtype dt = e->dtype;
    if (!uin) { /* outer side only (or a constant) */
      eo[t] = it->extent, bo[t] = e;
      ei[t] = 1, bi[t] = NULL;
    } else if (!uout) { /* inner side only */
      eo[t] = 1, bo[t] = ir_int_t(f, 0, dt);
      ei[t] = it->extent, bi[t] = e;
    } else {
      lin_form l = {.n = 0};
      bool ok = lin_add(&l, e, 1);
      lin_term ti[64], to[64];
      int64_t xi[64], xo[64];
      int nti = 0, nto = 0;
      for (int k = 0; ok && k < l.n; k++) {
        if (l.t[k].c == 0) continue;
        int64_t ext = loop_extent_of(p, &path, l.t[k].v);
        if (ext < 0) ok = false;
        else if (is_inner_var(p, l.t[k].v)) ti[nti] = l.t[k], xi[nti++] = ext;
        else to[nto] = l.t[k], xo[nto++] = ext;
      }
      int64_t span_i = ok ? dense_span(ti, nti, xi) : -1;
      ok = span_i > 0 && l.c0 % span_i == 0;
      for (int k = 0; ok && k < nto; k++) {
        ok = to[k].c % span_i == 0;
        if (ok) to[k].c /= span_i;
      }
      int64_t span_o = ok ? dense_span(to, nto, xo) : -1;
      if (span_o <= 0) {
        dg_str b;
        dg_str_init(&b);
        ir_print_expr(&b, it->binding);
        dg_fail(st, DG_ERR_INVALID,
                "the binding %s = %s of block %s cannot be divided into a part outside loop %s "
                "and a dense part inside it",
                it->var->name, b.s, blk->name, loop->loop_var->name);
        dg_str_free(&b);
        return false;
      }
      eo[t] = span_o, bo[t] = ir_simplify(f, lin_expr(f, to, nto, 1, l.c0 / span_i, dt), &known);
      ei[t] = span_i, bi[t] = ir_simplify(f, lin_expr(f, ti, nti, 1, 0, dt), &known);
    }
  }

  /* the predicate, by conjunct */
  dg_expr *pred_o = NULL, *pred_i = NULL;
  if (blk->predicate) {
    dg_expr *cs[64];
    int nc = 0;
    split_conjuncts(blk->predicate, cs, &nc, 64);
    if (nc == 64) return dg_fail(st, DG_ERR_INVALID, "the predicate of block %s is too long", blk->name);
    for (int k = 0; k < nc; k++) {
      bool uin = false, uout = false;
      classify(p, cs[k], &uin, &uout);
      if (uin && uout) {
        dg_str b;
        dg_str_init(&b);
        ir_print_expr(&b, cs[k]);
        dg_fail(st, DG_ERR_INVALID,
                "the predicate %s of block %s mixes loops inside and outside loop %s", b.s,
                blk->name, loop->loop_var->name);
        dg_str_free(&b);
        return false;
      }
      if (uin) pred_i = and_pred(f, pred_i, cs[k]);
      else pred_o = and_pred(f, pred_o, cs[k]);
    }
  }

  /* the new iteration variables and what replaces each old one */
  dg_block *ob = ir_block_new(f, plan_name(p, dg_arena_printf(f->arena, "%s_o", blk->name), true));
  dg_iter *inner_iters = DG_ANEWN(f->arena, dg_iter, ni ? ni : 1);
  int n_ii = 0;
  dg_subst *sub = DG_ANEWN(f->arena, dg_subst, ni ? ni : 1);
  dg_ranges rel = {.n = 0};
  dg_ranges full = known;
  ir_ranges_pop(&full, full.n - n_outside);
  bool outer_reduce = false;
  for (int t = 0; t < ni; t++) {
    const dg_iter *it = &blk->iters[t];
    dg_var *vo = ir_var_new(f, plan_name(p, dg_arena_printf(f->arena, "%s_o", it->var->name), false),
                            it->var->dtype);
    ir_block_add_iter(f, ob, vo, eo[t], it->kind, bo[t]);
    push_range(&full, vo, eo[t]);
    outer_reduce |= it->kind == DG_ITER_REDUCE;
    dg_expr *to;
    if (ei[t] == 1) {
      to = eo[t] == 1 && !preserve ? ir_int_t(f, 0, it->var->dtype) : ir_var(f, vo);
    } else {
      dg_var *vi = ir_var_new(f, plan_name(p, dg_arena_printf(f->arena, "%s_i", it->var->name), false),
                              it->var->dtype);
      inner_iters[n_ii++] = (dg_iter){vi, ei[t], it->kind, bi[t]};
      push_range(&rel, vi, ei[t]);
      to = eo[t] == 1 ? ir_var(f, vi)
                      : ir_add(f, ir_mul(f, ir_var(f, vo), ir_int_t(f, ei[t], it->var->dtype)),
                               ir_var(f, vi));
    }
    sub[t] = (dg_subst){it->var, to};
  }
  for (int k = 0; k < rel.n; k++) push_range(&full, rel.var[k], rel.iv[k].hi + 1);

  /* the inner block's new contents */
  ss_ctx sc = {f, sub, ni, &full};
  dg_block *sh = &p->shadow;
  *sh = *blk;
  sh->iters = inner_iters;
  sh->n_iters = n_ii;
  sh->predicate = pred_i;
  sh->init = NULL;
  bool ch = false;
  dg_region *reads = ss_regions(&sc, blk->reads, blk->n_reads, &ch);
  sh->writes = ss_regions(&sc, blk->writes, blk->n_writes, &ch);
  sh->reads = reads;
  sh->body = ss_stmt(&sc, blk->body);
  if (blk->init && outer_reduce) {
    /* the inner block now also reads what it writes (it accumulates) */
    dg_region *rs = DG_ANEWN(f->arena, dg_region, blk->n_writes + blk->n_reads);
    int n = 0;
    for (int i = 0; i < blk->n_writes; i++) rs[n++] = sh->writes[i];
    for (int i = 0; i < blk->n_reads; i++) {
      bool dup = false;
      for (int k = 0; k < blk->n_writes; k++) dup |= reads[i].buf == sh->writes[k].buf;
      if (!dup) rs[n++] = reads[i];
    }
    sh->reads = rs;
    sh->n_reads = n;
  }

  /* the outer block: regions relaxed over the inner iteration variables */
  for (int i = 0; i < blk->n_reads; i++) {
    dg_expr *mn[DG_MAX_DIMS], *ex[DG_MAX_DIMS];
    relax_region(f, &reads[i], &rel, &full, mn, ex);
    ir_block_add_read(f, ob, reads[i].buf, mn, ex);
  }
  for (int i = 0; i < blk->n_writes; i++) {
    dg_expr *mn[DG_MAX_DIMS], *ex[DG_MAX_DIMS];
    relax_region(f, &sh->writes[i], &rel, &full, mn, ex);
    ir_block_add_write(f, ob, sh->writes[i].buf, mn, ex);
  }
  ob->predicate = pred_o;
  ob->body = loop;

  if (blk->init) {
    /* TVM's GenerateOuterInit: the init as a block of the spatial inner
     * variables it uses, under copies of the inner loops their bindings use */
    dg_stmt *init = ss_stmt(&sc, blk->init);
    dg_block *ib = ir_block_new(f, plan_name(p, dg_arena_printf(f->arena, "%s_init", blk->name), true));
    dg_subst *m = DG_ANEWN(f->arena, dg_subst, n_ii + p->n_inner + 1);
    int nm = 0;
    for (int k = 0; k < n_ii; k++) {
      const dg_iter *it = &inner_iters[k];
      if (it->kind != DG_ITER_SPATIAL || !stmt_uses_var(init, it->var)) continue;
      dg_var *v = ir_var_new(f, plan_name(p, dg_arena_printf(f->arena, "%s_init", it->var->name), false),
                             it->var->dtype);
      ir_block_add_iter(f, ib, v, it->extent, it->kind, it->binding);
      m[nm++] = (dg_subst){it->var, ir_var(f, v)};
    }
    ib->predicate = pred_i;
    for (int i = 0; i < sh->n_writes; i++)
      ir_block_add_write(f, ib, sh->writes[i].buf, sh->writes[i].min, sh->writes[i].ext);
    ib->body = init;
    dg_stmt *nest = ir_block_stmt(f, ib);
    for (int k = p->n_inner - 1; k >= 0; k--) {
      dg_stmt *l = p->inner[k];
      bool used = pred_i && ir_expr_uses_var(pred_i, l->loop_var);
      for (int i = 0; i < ib->n_iters && !used; i++) used = ir_expr_uses_var(ib->iters[i].binding, l->loop_var);
      if (!used) continue;
      dg_var *v = ir_var_new(f, plan_name(p, l->loop_var->name, false), l->loop_var->dtype);
      nest = ir_for(f, v, l->extent, l->loop_kind, l->tag, nest);
      for (int a = 0; a < l->anns.n; a++) ir_anns_set(f, &nest->anns, &l->anns.items[a]);
      m[nm++] = (dg_subst){l->loop_var, ir_var(f, v)};
    }
    ob->init = ir_subst_stmt(f, nest, m, nm);
  }
  p->outer_realize = ir_block_stmt(f, ob);
  return true;
}

static void bz_apply(bz_plan *p) {
  graft_block(p->blk, &p->shadow);
  *p->slot = p->outer_realize;
}

/* ---- the primitives ---------------------------------------------------------------- */

static dg_stmt *loop_operand(sched *s, const sched_val *v, const char *prim, dg_status *st) {
  if (v->kind == SV_ARRAY) {
    dg_fail(st, DG_ERR_INVALID,
            "%s of a list of blocks is not supported by dragon; pass the loop whose subtree "
            "becomes the block",
            prim);
    return NULL;
  }
  return sched_rv_loop(s, v, "loop", st);
}

bool prim_blockize(prim_call *c, dg_status *st) {
  bool preserve = false;
  if (!flag_attr(&c->inst->attrs[0], "preserve_unit_iters", &preserve, st)) return false;
  dg_stmt *loop = loop_operand(c->s, &c->inst->inputs[0], "Blockize", st);
  if (!loop) return false;
  bz_plan *p = dg_malloc(sizeof *p);
  bool ok = bz_plan_make(c->s, loop, preserve, p, st);
  if (ok) {
    bz_apply(p);
    prim_out(c, sched_rv_new_block(c->s, p->outer_realize->block));
  }
  free(p);
  return ok;
}

static bool unknown_intrin(const char *name, dg_status *st) {
  char msg[400];
  intrin_unknown_message(name, msg, sizeof msg);
  return dg_fail(st, DG_ERR_INVALID, "%s", msg);
}

static bool tag_block(dg_func *f, dg_block *b, const dg_intrin *in, dg_status *st) {
  char why[400];
  if (!intrin_match(in, f, b, why, sizeof why)) return dg_fail(st, DG_ERR_INVALID, "%s", why);
  ir_anns_set_str(f, &b->anns, "tensor_intrin", in->name);
  return true;
}

static bool already_tagged(const dg_block *b, dg_status *st) {
  const dg_ann *a = ir_anns_get(&b->anns, "tensor_intrin");
  if (!a) return false;
  dg_fail(st, DG_ERR_INVALID, "block %s is already tensorized (tensor_intrin = %s)", b->name,
          a->kind == DG_ANN_STR ? a->s : "?");
  return true;
}

bool prim_tensorize(prim_call *c, dg_status *st) {
  const sched_val *name = &c->inst->attrs[0];
  bool preserve = false;
  if (name->kind != SV_STR) return dg_fail(st, DG_ERR_INVALID, "the intrinsic name must be a string");
  if (!flag_attr(&c->inst->attrs[1], "preserve_unit_iters", &preserve, st)) return false;
  const dg_intrin *in = intrin_find(name->s);
  if (!in) return unknown_intrin(name->s, st);
  sched *s = c->s;
  const sched_val *v = &c->inst->inputs[0];
  if (v->kind == SV_RV && v->i >= 0 && v->i < s->n_rvs && s->rvs[v->i].kind == SCHED_RV_BLOCK) {
    dg_block *b = sched_rv_block(s, v, "block", st);
    if (!b || already_tagged(b, st)) return false;
    return tag_block(s->f, b, in, st);
  }
  dg_stmt *loop = loop_operand(s, v, "Tensorize", st);
  if (!loop) return false;
  bz_plan *p = dg_malloc(sizeof *p);
  bool ok = bz_plan_make(s, loop, preserve, p, st);
  if (ok && p->blk->body->kind != DG_STMT_STORE) {
    /* checked before blockizing: undoing a step that rewrote nested blocks
     * is not possible in place, and such a block never matches */
    ok = dg_fail(st, DG_ERR_INVALID,
                 "block %s_o does not match %s: the body of block %s is not one store",
                 p->blk->name, in->name, p->blk->name);
  }
  if (ok) {
    dg_block saved = *p->blk;
    bz_apply(p);
    ok = tag_block(s->f, p->outer_realize->block, in, st);
    if (!ok) { /* undo: the inner block's fields and the loop's slot */
      *p->blk = saved;
      *p->slot = p->loop;
    }
  }
  free(p);
  return ok;
}
