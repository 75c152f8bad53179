/* prim_for_kind.c: Parallel, Vectorize, Unroll, Bind (TVM's for_kind.cc).
 *
 * Parallelising a loop (parallel, vectorized, thread-bound) is legal when
 * every block directly under it binds the loop variable only into spatial
 * iteration variables. A reduction may be bound to threadIdx.* only: that is
 * MetaSchedule's cross-thread reduction, which lowering turns into warp
 * shuffles. Unroll is always legal. */
#include <string.h>

#include "sched/sched_impl.h"

typedef struct {
  const dg_var *v;
  const char *bad_block;
  const char *bad_iter;
} par_ctx;

static void check_blocks(const dg_stmt *s, par_ctx *c) {
  if (!s || c->bad_block) return;
  switch (s->kind) {
    case DG_STMT_FOR: check_blocks(s->body, c); break;
    case DG_STMT_SEQ:
      for (int i = 0; i < s->n; i++) check_blocks(s->stmts[i], c);
      break;
    case DG_STMT_IF:
      check_blocks(s->then_s, c);
      check_blocks(s->else_s, c);
      break;
    case DG_STMT_BLOCK:
      for (int i = 0; i < s->block->n_iters; i++) {
        const dg_iter *it = &s->block->iters[i];
        if (it->kind == DG_ITER_REDUCE && ir_expr_uses_var(it->binding, c->v)) {
          c->bad_block = s->block->name;
          c->bad_iter = it->var->name;
          return;
        }
      }
      break; /* blocks nested deeper are that block's business */
    case DG_STMT_STORE: break;
  }
}

bool sched_loop_binds_reduction(sched *s, int rv) {
  dg_stmt *l = sched_live_loop(s, rv);
  if (!l) return false;
  par_ctx pc = {l->loop_var, NULL, NULL};
  check_blocks(l->body, &pc);
  return pc.bad_block != NULL;
}

static bool set_kind(prim_call *c, dg_loop_kind kind, dg_thread_tag tag, dg_status *st) {
  dg_stmt *l = sched_rv_loop(c->s, &c->inst->inputs[0], "loop", st);
  if (!l) return false;
  if (kind != DG_LOOP_UNROLLED && !(kind == DG_LOOP_THREAD && dg_thread_tag_is_thread(tag))) {
    par_ctx pc = {l->loop_var, NULL, NULL};
    check_blocks(l->body, &pc);
    if (pc.bad_block)
      return dg_fail(st, DG_ERR_INVALID,
                     "loop %s cannot be %s: block %s binds it to reduction variable %s",
                     l->loop_var->name,
                     kind == DG_LOOP_THREAD ? dg_thread_tag_name(tag) : dg_loop_kind_name(kind),
                     pc.bad_block, pc.bad_iter);
  }
  l->loop_kind = kind;
  l->tag = tag;
  return true;
}

bool prim_parallel(prim_call *c, dg_status *st) {
  return set_kind(c, DG_LOOP_PARALLEL, DG_TAG_NONE, st);
}
bool prim_vectorize(prim_call *c, dg_status *st) {
  return set_kind(c, DG_LOOP_VECTORIZED, DG_TAG_NONE, st);
}
bool prim_unroll(prim_call *c, dg_status *st) {
  return set_kind(c, DG_LOOP_UNROLLED, DG_TAG_NONE, st);
}

bool prim_bind(prim_call *c, dg_status *st) {
  const sched_val *a = &c->inst->attrs[0];
  dg_thread_tag tag;
  if (a->kind != SV_STR || !dg_thread_tag_from_name(a->s, strlen(a->s), &tag))
    return dg_fail(st, DG_ERR_INVALID,
                   "thread axis must be blockIdx.x|y|z, threadIdx.x|y|z or vthread.x|y|z, got %s",
                   a->kind == SV_STR ? a->s : "a non-string");
  return set_kind(c, DG_LOOP_THREAD, tag, st);
}
