/* postproc_reduction_block.c: RewriteReductionBlock
 * (postproc/rewrite_reduction_block.cc): every block with an init whose
 * reduction variables are not bound to blockIdx/threadIdx loops (those are
 * cross-thread reductions, lowered as such) has its init decomposed out at
 * its first loop that is not spatial: GetBlock, GetLoops and
 * DecomposeReduction are recorded. A block marked for tensorization passes
 * the mark on: the init block gets meta_schedule.auto_tensorize = the
 * block's auto_tensorize_init (or ""), and auto_tensorize_init is removed
 * from both. Rounds repeat until one rewrites nothing.
 */
#include "search/space_impl.h"

typedef DG_VEC(const dg_var *) var_list;
typedef DG_VEC(dg_block *) block_list;

static bool uses_any(const dg_expr *e, const var_list *vars) {
  for (size_t i = 0; i < vars->len; i++)
    if (ir_expr_uses_var(e, vars->data[i])) return true;
  return false;
}

/* Pre-order, as TVM's ReductionBlockFinder: the thread-bound loop
 * variables seen so far are never forgotten (names are unique, so loops of
 * other subtrees cannot be confused with the block's). */
static void find(const dg_stmt *s, var_list *bound, block_list *out) {
  if (!s) return;
  switch (s->kind) {
    case DG_STMT_FOR:
      if (s->loop_kind == DG_LOOP_THREAD &&
          (dg_thread_tag_is_block(s->tag) || dg_thread_tag_is_thread(s->tag)))
        DG_VEC_PUSH(bound, s->loop_var);
      find(s->body, bound, out);
      break;
    case DG_STMT_SEQ:
      for (int i = 0; i < s->n; i++) find(s->stmts[i], bound, out);
      break;
    case DG_STMT_IF:
      find(s->then_s, bound, out);
      find(s->else_s, bound, out);
      break;
    case DG_STMT_BLOCK: {
      dg_block *b = s->block;
      bool unbound = true;
      for (int i = 0; i < b->n_iters && unbound; i++)
        if (b->iters[i].kind == DG_ITER_REDUCE && uses_any(b->iters[i].binding, bound))
          unbound = false;
      if (b->init && unbound) DG_VEC_PUSH(out, b);
      find(b->body, bound, out);
      break;
    }
    case DG_STMT_STORE: break;
  }
}

static bool rewrite(sched *s, dg_block *b, bool *done, dg_status *st) {
  *done = false;
  dg_stmt *loops[64];
  int n = space_block_loops(s, b, loops, 64);
  int point = -1;
  for (int i = 0; i < n && point < 0; i++)
    if (space_loop_iter_type(loops[i]) != SPACE_LOOP_SPATIAL) point = i;
  if (point < 0) return true;
  const char *intrin = space_ann_str(b, "meta_schedule.auto_tensorize");
  const char *intrin_init = space_ann_str(b, "meta_schedule.auto_tensorize_init");
  int rb = sched_get_block(s, b->name, sched_func(s)->name, st);
  if (rb < 0) return false;
  int lrv[64];
  if (sched_get_loops(s, rb, lrv, 64, st) != n) return false;
  int init = sched_decompose_reduction(s, rb, lrv[point], st);
  if (init < 0) return false;
  *done = true;
  if (!intrin) return true;
  sched_val v = {.kind = SV_STR, .s = intrin_init ? intrin_init : ""};
  if (!sched_unannotate(s, init, "meta_schedule.auto_tensorize", st) ||
      !sched_annotate(s, init, "meta_schedule.auto_tensorize", &v, st))
    return false;
  return !intrin_init ||
         (sched_unannotate(s, rb, "meta_schedule.auto_tensorize_init", st) &&
          sched_unannotate(s, init, "meta_schedule.auto_tensorize_init", st));
}

bool postproc_reduction_block(sched *s, const search_target *t, dg_status *st) {
  (void)t;
  for (;;) {
    var_list bound = {0};
    block_list found = {0};
    find(sched_func(s)->body, &bound, &found);
    int rewritten = 0;
    bool ok = true;
    for (size_t i = 0; i < found.len && ok; i++) {
      bool done;
      ok = rewrite(s, found.data[i], &done, st);
      rewritten += done;
    }
    DG_VEC_FREE(&bound);
    DG_VEC_FREE(&found);
    if (!ok) return false;
    if (rewritten == 0) return true;
  }
}
