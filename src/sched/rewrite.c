/* rewrite.c: in-place rewriting that several primitives share: substituting
 * loop variables in the bindings and predicates of the blocks under a loop
 * (without entering those blocks: a block's body sees only its own
 * iteration variables), simplifying what changed, and adding predicates. */
#include "sched/sched_impl.h"

typedef struct {
  dg_func *f;
  const dg_subst *map;
  int n;
  dg_ranges *r;
  dg_expr *pred; /* conjoined to every block reached, may be NULL */
} rw_ctx;

static bool uses_any(const dg_expr *e, const dg_subst *map, int n) {
  for (int i = 0; i < n; i++)
    if (ir_expr_uses_var(e, map[i].from)) return true;
  return false;
}

static dg_expr *rw_expr(rw_ctx *c, dg_expr *e) {
  if (!e || !uses_any(e, c->map, c->n)) return e;
  return ir_simplify(c->f, ir_subst_expr(c->f, e, c->map, c->n), c->r);
}

static void rw(rw_ctx *c, dg_stmt *s) {
  if (!s) return;
  switch (s->kind) {
    case DG_STMT_FOR:
      ir_ranges_push(c->r, s->loop_var, 0, s->extent - 1);
      rw(c, s->body);
      ir_ranges_pop(c->r, 1);
      break;
    case DG_STMT_SEQ:
      for (int i = 0; i < s->n; i++) rw(c, s->stmts[i]);
      break;
    case DG_STMT_IF:
      s->cond = rw_expr(c, s->cond);
      rw(c, s->then_s);
      rw(c, s->else_s);
      break;
    case DG_STMT_STORE:
      for (int i = 0; i < s->nidx; i++) s->idx[i] = rw_expr(c, s->idx[i]);
      s->value = rw_expr(c, s->value);
      break;
    case DG_STMT_BLOCK: {
      dg_block *b = s->block;
      for (int i = 0; i < b->n_iters; i++) b->iters[i].binding = rw_expr(c, b->iters[i].binding);
      b->predicate = rw_expr(c, b->predicate);
      if (c->pred)
        b->predicate = b->predicate ? ir_bin(c->f, DG_EXPR_AND, b->predicate, c->pred) : c->pred;
      break;
    }
  }
}

void sched_rewrite_bindings(dg_func *f, dg_stmt *subtree, const dg_subst *map, int n,
                            dg_ranges *r, dg_expr *pred) {
  rw_ctx c = {f, map, n, r, pred};
  rw(&c, subtree);
}
