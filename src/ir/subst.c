/* subst.c: substitution of variables in expressions and statements, and the
 * variable-use query.
 *
 * Substitution rebuilds the path from the root to every replaced variable
 * and shares untouched subtrees with the input; the replacement expressions
 * themselves are shared, not copied, at each place they are put. Blocks on a
 * changed path are copied (with their iteration variables, regions,
 * predicate, init and body substituted) so that the input stays intact.
 * Defining occurrences (loop variables, iteration variables, allocated
 * buffers) are never renamed: the map is meant for free variables such as
 * the loop variables of a split or fuse. Nothing is simplified here.
 */
#include <string.h>

#include "dragon/ir.h"

static dg_expr *lookup(const dg_subst *map, int n, const dg_var *v) {
  for (int i = 0; i < n; i++)
    if (map[i].from == v) return map[i].to;
  return NULL;
}

dg_expr *ir_subst_expr(dg_func *f, dg_expr *e, const dg_subst *map, int n) {
  if (!e) return NULL;
  switch (e->kind) {
    case DG_EXPR_INT:
    case DG_EXPR_FLOAT: return e;
    case DG_EXPR_VAR: {
      dg_expr *to = lookup(map, n, e->var);
      return to ? to : e;
    }
    case DG_EXPR_LOAD:
    case DG_EXPR_CALL: {
      dg_expr **args = NULL;
      for (int i = 0; i < e->nargs; i++) {
        dg_expr *x = ir_subst_expr(f, e->args[i], map, n);
        if (x == e->args[i] && !args) continue;
        if (!args) {
          args = DG_ANEWN(f->arena, dg_expr *, e->nargs);
          memcpy(args, e->args, sizeof(*args) * (size_t)e->nargs);
        }
        args[i] = x;
      }
      if (!args) return e;
      dg_expr *c = ir_expr_copy(f, e);
      c->args = args;
      return c;
    }
    default: {
      dg_expr *a = ir_subst_expr(f, e->a, map, n);
      dg_expr *b = ir_subst_expr(f, e->b, map, n);
      dg_expr *c = ir_subst_expr(f, e->c, map, n);
      if (a == e->a && b == e->b && c == e->c) return e;
      dg_expr *x = ir_expr_copy(f, e);
      x->a = a;
      x->b = b;
      x->c = c;
      return x;
    }
  }
}

/* Substitutes in an array of expressions; returns the input array when
 * nothing changed. */
static dg_expr **subst_arr(dg_func *f, dg_expr **v, int cnt, const dg_subst *map,
                           int n, bool *changed) {
  dg_expr **out = NULL;
  for (int i = 0; i < cnt; i++) {
    dg_expr *x = ir_subst_expr(f, v[i], map, n);
    if (x == v[i] && !out) continue;
    if (!out) {
      out = DG_ANEWN(f->arena, dg_expr *, cnt);
      memcpy(out, v, sizeof(*out) * (size_t)cnt);
    }
    out[i] = x;
  }
  if (!out) return v;
  *changed = true;
  return out;
}

static dg_region *subst_regions(dg_func *f, dg_region *rs, int cnt, const dg_subst *map,
                                int n, bool *changed) {
  dg_region *out = NULL;
  for (int i = 0; i < cnt; i++) {
    bool ch = false;
    int nd = rs[i].buf ? rs[i].buf->ndim : 0;
    dg_expr **mn = subst_arr(f, rs[i].min, nd, map, n, &ch);
    dg_expr **ex = subst_arr(f, rs[i].ext, nd, map, n, &ch);
    if (!ch && !out) continue;
    if (!out) {
      out = DG_ANEWN(f->arena, dg_region, cnt);
      memcpy(out, rs, sizeof(*out) * (size_t)cnt);
    }
    out[i].min = mn;
    out[i].ext = ex;
  }
  if (!out) return rs;
  *changed = true;
  return out;
}

static dg_block *subst_block(dg_func *f, dg_block *b, const dg_subst *map, int n) {
  bool ch = false;
  dg_iter *iters = NULL;
  for (int i = 0; i < b->n_iters; i++) {
    dg_expr *x = ir_subst_expr(f, b->iters[i].binding, map, n);
    if (x == b->iters[i].binding && !iters) continue;
    if (!iters) {
      iters = DG_ANEWN(f->arena, dg_iter, b->n_iters);
      memcpy(iters, b->iters, sizeof(*iters) * (size_t)b->n_iters);
    }
    iters[i].binding = x;
    ch = true;
  }
  dg_expr *pred = ir_subst_expr(f, b->predicate, map, n);
  ch |= pred != b->predicate;
  dg_region *reads = subst_regions(f, b->reads, b->n_reads, map, n, &ch);
  dg_region *writes = subst_regions(f, b->writes, b->n_writes, map, n, &ch);
  dg_stmt *init = ir_subst_stmt(f, b->init, map, n);
  dg_stmt *body = ir_subst_stmt(f, b->body, map, n);
  ch |= init != b->init || body != b->body;
  if (!ch) return b;
  dg_block *c = DG_ANEW(f->arena, dg_block);
  *c = *b;
  if (iters) c->iters = iters;
  c->predicate = pred;
  c->reads = reads;
  c->writes = writes;
  c->init = init;
  c->body = body;
  return c;
}

dg_stmt *ir_subst_stmt(dg_func *f, dg_stmt *s, const dg_subst *map, int n) {
  if (!s) return NULL;
  dg_stmt *c;
  switch (s->kind) {
    case DG_STMT_FOR: {
      dg_stmt *body = ir_subst_stmt(f, s->body, map, n);
      if (body == s->body) return s;
      c = DG_ANEW(f->arena, dg_stmt);
      *c = *s;
      c->body = body;
      return c;
    }
    case DG_STMT_SEQ: {
      dg_stmt **out = NULL;
      for (int i = 0; i < s->n; i++) {
        dg_stmt *x = ir_subst_stmt(f, s->stmts[i], map, n);
        if (x == s->stmts[i] && !out) continue;
        if (!out) {
          out = DG_ANEWN(f->arena, dg_stmt *, s->n);
          memcpy(out, s->stmts, sizeof(*out) * (size_t)s->n);
        }
        out[i] = x;
      }
      if (!out) return s;
      c = DG_ANEW(f->arena, dg_stmt);
      *c = *s;
      c->stmts = out;
      return c;
    }
    case DG_STMT_BLOCK: {
      dg_block *b = subst_block(f, s->block, map, n);
      if (b == s->block) return s;
      c = DG_ANEW(f->arena, dg_stmt);
      *c = *s;
      c->block = b;
      return c;
    }
    case DG_STMT_STORE: {
      bool ch = false;
      dg_expr **idx = subst_arr(f, s->idx, s->nidx, map, n, &ch);
      dg_expr *v = ir_subst_expr(f, s->value, map, n);
      if (!ch && v == s->value) return s;
      c = DG_ANEW(f->arena, dg_stmt);
      *c = *s;
      c->idx = idx;
      c->value = v;
      return c;
    }
    case DG_STMT_IF: {
      dg_expr *cond = ir_subst_expr(f, s->cond, map, n);
      dg_stmt *t = ir_subst_stmt(f, s->then_s, map, n);
      dg_stmt *e = ir_subst_stmt(f, s->else_s, map, n);
      if (cond == s->cond && t == s->then_s && e == s->else_s) return s;
      c = DG_ANEW(f->arena, dg_stmt);
      *c = *s;
      c->cond = cond;
      c->then_s = t;
      c->else_s = e;
      return c;
    }
  }
  return s;
}

bool ir_expr_uses_var(const dg_expr *e, const dg_var *v) {
  if (!e) return false;
  switch (e->kind) {
    case DG_EXPR_VAR: return e->var == v;
    case DG_EXPR_LOAD:
    case DG_EXPR_CALL:
      for (int i = 0; i < e->nargs; i++)
        if (ir_expr_uses_var(e->args[i], v)) return true;
      return false;
    default:
      return ir_expr_uses_var(e->a, v) || ir_expr_uses_var(e->b, v) ||
             ir_expr_uses_var(e->c, v);
  }
}
