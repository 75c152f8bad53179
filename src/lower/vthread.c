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
 * No extent is refused (TVM refuses none: it expands virtual threads before
 * VerifyGPUCode looks at them). What bounds the work is the number of
 * statements the copies make: past LOWER_VTHREAD_MAX_STMTS in one launch
 * the expansion stops with a reason, before the copies are built.
 *
 * It does not handle a vthread variable in a loop extent (extents are
 * constants here) and keeps a vectorized loop whole (its copies go around it).
 */
#include <inttypes.h>

#include "lower/lower_impl.h"

typedef struct {
  dg_func *f;
  const lw_kernel *k;
  int64_t made;  /* statements the copies hold so far */
  bool failed;
  dg_status *st;
} vctx;

static int64_t stmt_count(const lw_stmt *s) {
  if (!s) return 0;
  switch (s->kind) {
    case LW_SEQ: {
      int64_t n = 0;
      for (int i = 0; i < s->n; i++) n += stmt_count(s->stmts[i]);
      return n;
    }
    case LW_FOR: return 1 + stmt_count(s->body);
    case LW_IF: return 1 + stmt_count(s->then_s) + stmt_count(s->else_s);
    case LW_WMMA: return 1 + stmt_count(s->body);
    default: return 1;
  }
}

static lw_stmt *inject(vctx *c, const lw_stmt *s, const lw_stmt *loop) {
  if (!s || c->failed) return (lw_stmt *)s;
  dg_func *f = c->f;
  dg_var *v = loop->var;
  int64_t n = loop->extent;
  if (!lw_uses_var(s, v)) return (lw_stmt *)s;
  switch (s->kind) {
    case LW_SEQ: {
      lw_stmt **xs = DG_ANEWN(f->arena, lw_stmt *, s->n > 0 ? s->n : 1);
      for (int i = 0; i < s->n; i++) xs[i] = inject(c, s->stmts[i], loop);
      return lw_seq(f, xs, s->n);
    }
    case LW_FOR:
      if (s->loop_kind != LW_LOOP_VECTORIZED) {
        lw_stmt *x = lw_copy(f, s);
        x->body = inject(c, s->body, loop);
        return x;
      }
      break;
    case LW_IF:
      if (!ir_expr_uses_var(s->cond, v)) {
        lw_stmt *x = lw_copy(f, s);
        x->then_s = inject(c, s->then_s, loop);
        x->else_s = inject(c, s->else_s, loop);
        return x;
      }
      break;
    default: break;
  }
  int64_t size = stmt_count(s);
  if (n > LOWER_VTHREAD_MAX_STMTS || size * n > LOWER_VTHREAD_MAX_STMTS - c->made) {
    c->failed = true;
    dg_fail(c->st, DG_ERR_INVALID,
            "lower: kernel %s: expanding vthread loop %s (extent %" PRId64 ") makes more than %d "
            "statements",
            c->k->name, v->name, n, LOWER_VTHREAD_MAX_STMTS);
    return (lw_stmt *)s;
  }
  c->made += size * n;
  lw_stmt **copies = DG_ANEWN(f->arena, lw_stmt *, n);
  for (int64_t i = 0; i < n; i++) {
    dg_subst m = {v, ir_int_t(f, i, v->dtype)};
    copies[i] = lw_subst(f, s, &m, 1);
  }
  return lw_seq(f, copies, (int)n);
}

static lw_stmt *expand(vctx *c, const lw_stmt *s) {
  if (!s || c->failed) return (lw_stmt *)s;
  dg_func *f = c->f;
  switch (s->kind) {
    case LW_SEQ: {
      lw_stmt **xs = DG_ANEWN(f->arena, lw_stmt *, s->n > 0 ? s->n : 1);
      for (int i = 0; i < s->n; i++) xs[i] = expand(c, s->stmts[i]);
      return lw_seq(f, xs, s->n);
    }
    case LW_FOR: {
      lw_stmt *body = expand(c, s->body);
      if (s->loop_kind == LW_LOOP_VTHREAD)
        return lw_with_unroll(f, inject(c, body, s), s->unroll_max_step, s->unroll_explicit);
      lw_stmt *x = lw_copy(f, s);
      x->body = body;
      return x;
    }
    case LW_IF: {
      lw_stmt *x = lw_copy(f, s);
      x->then_s = expand(c, s->then_s);
      x->else_s = expand(c, s->else_s);
      return x;
    }
    default: return (lw_stmt *)s;
  }
}

bool lower_expand_vthreads(lw_program *p, lw_kernel *k, dg_status *st) {
  vctx c = {.f = p->f, .k = k, .st = st};
  lw_stmt *body = expand(&c, k->body);
  if (c.failed) return false;
  k->body = body;
  return true;
}
