/* vthread.c: virtual threads expanded (TVM's InjectVirtualThread, for the
 * register-tiling use MetaSchedule makes of them).
 *
 * A vthread loop of extent n is removed; its body is rewritten so that
 * every statement that uses the virtual thread variable runs n times, once
 * per value, and everything else runs once. The copies are pushed down
 * through serial loops, sequences and conditions that do not depend on the
 * variable, so that loads shared by the virtual threads (a shared-memory
 * tile) are issued once and the copies of a register-tile update sit side
 * by side in the innermost loop, as TVM's output has them. That reorders
 * the iterations of different virtual threads, which TVM's contract allows:
 * virtual threads are independent (compaction gave each its own copy of
 * its local buffers).
 *
 * It does not handle a vthread variable in a loop extent (extents are
 * constants here) and keeps a vectorized loop whole (its copies go around it).
 */
#include "lower/lower_impl.h"

static lw_stmt *inject(dg_func *f, const lw_stmt *s, dg_var *v, int64_t n) {
  if (!s) return NULL;
  if (!lw_uses_var(s, v)) return (lw_stmt *)s;
  switch (s->kind) {
    case LW_SEQ: {
      lw_stmt **xs = DG_ANEWN(f->arena, lw_stmt *, s->n > 0 ? s->n : 1);
      for (int i = 0; i < s->n; i++) xs[i] = inject(f, s->stmts[i], v, n);
      return lw_seq(f, xs, s->n);
    }
    case LW_FOR:
      if (s->loop_kind != LW_LOOP_VECTORIZED) {
        lw_stmt *c = lw_copy(f, s);
        c->body = inject(f, s->body, v, n);
        return c;
      }
      break;
    case LW_IF:
      if (!ir_expr_uses_var(s->cond, v)) {
        lw_stmt *c = lw_copy(f, s);
        c->then_s = inject(f, s->then_s, v, n);
        c->else_s = inject(f, s->else_s, v, n);
        return c;
      }
      break;
    default: break;
  }
  lw_stmt **copies = DG_ANEWN(f->arena, lw_stmt *, n);
  for (int64_t i = 0; i < n; i++) {
    dg_subst m = {v, ir_int_t(f, i, v->dtype)};
    copies[i] = lw_subst(f, s, &m, 1);
  }
  return lw_seq(f, copies, (int)n);
}

static lw_stmt *expand(dg_func *f, const lw_stmt *s) {
  if (!s) return NULL;
  switch (s->kind) {
    case LW_SEQ: {
      lw_stmt **xs = DG_ANEWN(f->arena, lw_stmt *, s->n > 0 ? s->n : 1);
      for (int i = 0; i < s->n; i++) xs[i] = expand(f, s->stmts[i]);
      return lw_seq(f, xs, s->n);
    }
    case LW_FOR: {
      lw_stmt *body = expand(f, s->body);
      if (s->loop_kind == LW_LOOP_VTHREAD)
        return lw_with_unroll(f, inject(f, body, s->var, s->extent), s->unroll_max_step,
                              s->unroll_explicit);
      lw_stmt *c = lw_copy(f, s);
      c->body = body;
      return c;
    }
    case LW_IF: {
      lw_stmt *c = lw_copy(f, s);
      c->then_s = expand(f, s->then_s);
      c->else_s = expand(f, s->else_s);
      return c;
    }
    default: return (lw_stmt *)s;
  }
}

bool lower_expand_vthreads(lw_program *p, lw_kernel *k, dg_status *st) {
  (void)st;
  k->body = expand(p->f, k->body);
  return true;
}
