/* postproc_unbound_block.c: RewriteUnboundBlock
 * (postproc/rewrite_unbound_block.cc): every block of the root's body that
 * is not under both a blockIdx and a threadIdx loop (nested blocks of such
 * a block are its business) is looked up by name (GetBlock, recorded) and
 * bound as AutoBind binds, with the thread extent fixed to the fused
 * extent capped at max_threads_per_block and max_threadblocks blocks
 * (target.max_threadblocks, 256).
 */
#include "search/space_impl.h"

typedef DG_VEC(const char *) name_list;

static void find_unbound(const dg_stmt *s, int nb, int nt, name_list *out) {
  if (!s) return;
  switch (s->kind) {
    case DG_STMT_FOR: {
      bool bound = s->loop_kind == DG_LOOP_THREAD;
      int b = nb + (bound && dg_thread_tag_is_block(s->tag));
      int t = nt + (bound && dg_thread_tag_is_thread(s->tag));
      if (b == 0 || t == 0) find_unbound(s->body, b, t, out);
      break;
    }
    case DG_STMT_SEQ:
      for (int i = 0; i < s->n; i++) find_unbound(s->stmts[i], nb, nt, out);
      break;
    case DG_STMT_IF:
      find_unbound(s->then_s, nb, nt, out);
      find_unbound(s->else_s, nb, nt, out);
      break;
    case DG_STMT_BLOCK: DG_VEC_PUSH(out, s->block->name); break;
    case DG_STMT_STORE: break;
  }
}

bool postproc_unbound_block(sched *s, const search_target *t, dg_status *st) {
  dg_func *f = sched_func(s);
  name_list names = {0};
  find_unbound(ir_func_root(f)->body, 0, 0, &names);
  bool ok = true;
  for (size_t i = 0; i < names.len && ok; i++) {
    int b = sched_get_block(s, names.data[i], f->name, st);
    ok = b >= 0 && space_bind_block_threads(s, b, t, NULL, 0, st);
  }
  DG_VEC_FREE(&names);
  return ok;
}
