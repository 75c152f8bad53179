/* unroll.c: loop unrolling by TVM's UnrollLoop rule.
 *
 * Inside a loop annotated pragma_auto_unroll_max_step = S (the region is
 * the loop and everything under it), visiting loops inner to outer, a
 * serial loop is unrolled when no loop nested in it stayed a loop, at most
 * 8 unrolled loops are nested in it, and extent x (stores under it,
 * counting the unrolled copies) <= S. Loops already marked unrolled are
 * always unrolled. With pragma_unroll_explicit = 1 (and outside any such
 * annotation) the body is duplicated with the variable replaced by each
 * value; with 0 the loop is kept and marked, and CUDA prints `#pragma
 * unroll` before it. A sequence counts the stores of all its parts, its
 * depths are the largest of its parts', as in TVM.
 */
#include "lower/lower_impl.h"

typedef struct {
  dg_func *f;
  int64_t max_step;
  int64_t max_depth;
  bool explicit_unroll;
  int64_t step_count, unroll_depth, normal_depth;
} unroller;

static lw_stmt *visit(unroller *u, const lw_stmt *s);

static lw_stmt *unroll_copies(unroller *u, const lw_stmt *l) {
  lw_stmt **xs = DG_ANEWN(u->f->arena, lw_stmt *, l->extent);
  for (int64_t i = 0; i < l->extent; i++) {
    dg_subst m = {l->var, ir_int_t(u->f, i, l->var->dtype)};
    xs[i] = lw_subst(u->f, l->body, &m, 1);
  }
  return lw_seq(u->f, xs, (int)l->extent);
}

/* After the body of loop s was visited: whether s is unrolled (TVM's
 * rule), with the counters updated for the loop. */
static bool loop_unrolls(unroller *u, const lw_stmt *s) {
  int64_t value = s->extent;
  bool aut = s->loop_kind == LW_LOOP_SERIAL && u->normal_depth == 0 &&
             u->unroll_depth <= u->max_depth && value * u->step_count <= u->max_step;
  if (s->loop_kind == LW_LOOP_UNROLLED) aut = true;
  if (aut) {
    u->step_count *= value;
    u->unroll_depth++;
  } else {
    u->normal_depth++;
  }
  return aut;
}

/* visit's counting without building anything. */
static void count(unroller *u, const lw_stmt *s) {
  if (!s) return;
  switch (s->kind) {
    case LW_SEQ:
      for (int i = 0; i < s->n; i++) {
        int64_t sc = u->step_count, ud = u->unroll_depth, nd = u->normal_depth;
        u->step_count = u->unroll_depth = u->normal_depth = 0;
        count(u, s->stmts[i]);
        u->step_count += sc;
        if (nd > u->normal_depth) u->normal_depth = nd;
        if (ud > u->unroll_depth) u->unroll_depth = ud;
      }
      return;
    case LW_FOR: {
      int64_t saved_step = u->max_step;
      bool saved_explicit = u->explicit_unroll;
      if (s->unroll_max_step >= 0) u->max_step = s->unroll_max_step;
      if (s->unroll_explicit >= 0) u->explicit_unroll = s->unroll_explicit != 0;
      count(u, s->body);
      loop_unrolls(u, s);
      u->max_step = saved_step;
      u->explicit_unroll = saved_explicit;
      return;
    }
    case LW_IF:
      count(u, s->then_s);
      count(u, s->else_s);
      return;
    case LW_STORE:
    case LW_BARRIER:
    case LW_ALLREDUCE:
    case LW_WMMA: u->step_count++; return;
    case LW_ASYNC_COMMIT:
    case LW_ASYNC_WAIT: return; /* attributes in TVM's IR when it unrolls: no step */
  }
}

static unroller from_state(const lw_unroll_state *st) {
  return (unroller){.max_step = st->max_step, .max_depth = 8,
                    .explicit_unroll = st->explicit_unroll, .step_count = st->step_count,
                    .unroll_depth = st->unroll_depth, .normal_depth = st->normal_depth};
}

static lw_unroll_state to_state(const unroller *u) {
  return (lw_unroll_state){u->max_step, u->explicit_unroll, u->step_count, u->unroll_depth,
                           u->normal_depth};
}

void lower_unroll_begin(lw_unroll_state *st) {
  *st = (lw_unroll_state){.max_step = 0, .explicit_unroll = true};
}

lw_unroll_how lower_unroll_loop(const lw_stmt *s, const lw_unroll_state *entry,
                                lw_unroll_state *body_entry) {
  DG_ASSERT(s->kind == LW_FOR);
  unroller u = from_state(entry);
  if (s->unroll_max_step >= 0) u.max_step = s->unroll_max_step;
  if (s->unroll_explicit >= 0) u.explicit_unroll = s->unroll_explicit != 0;
  *body_entry = to_state(&u);
  count(&u, s->body);
  if (!loop_unrolls(&u, s)) return LW_UNROLL_KEEP;
  return u.explicit_unroll ? LW_UNROLL_COPIES : LW_UNROLL_MARK;
}

void lower_unroll_skip(const lw_stmt *s, lw_unroll_state *st) {
  unroller u = from_state(st);
  count(&u, s);
  *st = to_state(&u);
}

static lw_stmt *visit(unroller *u, const lw_stmt *s) {
  if (!s) return NULL;
  dg_func *f = u->f;
  switch (s->kind) {
    case LW_SEQ: {
      lw_stmt **xs = DG_ANEWN(f->arena, lw_stmt *, s->n > 0 ? s->n : 1);
      for (int i = 0; i < s->n; i++) {
        int64_t sc = u->step_count, ud = u->unroll_depth, nd = u->normal_depth;
        u->step_count = u->unroll_depth = u->normal_depth = 0;
        xs[i] = visit(u, s->stmts[i]);
        u->step_count += sc;
        if (nd > u->normal_depth) u->normal_depth = nd;
        if (ud > u->unroll_depth) u->unroll_depth = ud;
      }
      return lw_seq(f, xs, s->n);
    }
    case LW_FOR: {
      int64_t saved_step = u->max_step;
      bool saved_explicit = u->explicit_unroll;
      if (s->unroll_max_step >= 0) u->max_step = s->unroll_max_step;
      if (s->unroll_explicit >= 0) u->explicit_unroll = s->unroll_explicit != 0;
      lw_stmt *body = visit(u, s->body);
      bool aut = loop_unrolls(u, s);
      lw_stmt *out = lw_copy(f, s);
      out->body = body;
      if (aut && u->explicit_unroll) out = unroll_copies(u, out);
      else if (aut) out->loop_kind = LW_LOOP_UNROLLED;
      u->max_step = saved_step;
      u->explicit_unroll = saved_explicit;
      return out;
    }
    case LW_IF: {
      lw_stmt *x = lw_copy(f, s);
      x->then_s = visit(u, s->then_s);
      x->else_s = visit(u, s->else_s);
      return x;
    }
    case LW_STORE:
    case LW_BARRIER:
    case LW_ALLREDUCE:
    case LW_WMMA: u->step_count++; return (lw_stmt *)s; /* a warp's tile op is one step */
    case LW_ASYNC_COMMIT:
    case LW_ASYNC_WAIT: return (lw_stmt *)s;
  }
  return (lw_stmt *)s;
}

bool lower_unroll(lw_program *p, lw_kernel *k, dg_status *st) {
  (void)st;
  lw_unroll_state st0;
  lower_unroll_begin(&st0);
  unroller u = from_state(&st0);
  u.f = p->f;
  k->body = visit(&u, k->body);
  return true;
}
