/* postproc_unroll.c: RewriteParallelVectorizeUnroll
 * (postproc/rewrite_parallel_vectorize_unroll.cc, TVM HEAD), the GPU part:
 * when the root carries meta_schedule.unroll_explicit (or _implicit), the
 * root is looked up (GetBlock), the mark removed, and for each child block
 * of the root (GetChildBlocks, then GetLoops of each, all recorded) that is
 * not purely spatial, its outermost loop gets pragma_auto_unroll_max_step =
 * the step and pragma_unroll_explicit = 1 (0 for implicit). Step 0 adds
 * nothing. The parallel and vectorize marks (CPU) are removed like TVM
 * does but not acted on: dragon's CUDA rules never set them.
 */
#include "search/space_impl.h"

static const char *const keys[] = {"meta_schedule.parallel", "meta_schedule.vectorize",
                                   "meta_schedule.unroll_explicit",
                                   "meta_schedule.unroll_implicit"};

bool postproc_unroll(sched *s, const search_target *t, dg_status *st) {
  (void)t;
  dg_func *f = sched_func(s);
  for (;;) {
    dg_block *root = ir_func_root(f);
    int64_t vals[4];
    bool found = false;
    for (int k = 0; k < 4; k++) {
      const dg_ann *a = ir_anns_get(&root->anns, keys[k]);
      vals[k] = -1;
      if (a) {
        found = true;
        if (a->kind == DG_ANN_INT) vals[k] = a->i;
      }
    }
    if (!found) return true;
    int r = sched_get_block(s, root->name, f->name, st);
    if (r < 0) return false;
    for (int k = 0; k < 4; k++)
      if (ir_anns_get(&root->anns, keys[k]) && !sched_unannotate(s, r, keys[k], st)) return false;
    if (vals[2] != -1 && vals[3] != -1)
      return dg_fail(st, DG_ERR_INVALID, "the root is marked for explicit and implicit unrolling");
    int kids[1024];
    int nk = sched_get_child_blocks(s, r, kids, 1024, st);
    if (nk < 0) return false;
    for (int i = 0; i < nk; i++) {
      int loops[64];
      int nl = sched_get_loops(s, kids[i], loops, 64, st);
      if (nl < 0) return false;
      if (nl == 0) continue;
      if (vals[2] == -1 && vals[3] == -1) continue;
      int64_t step = vals[2] + vals[3] + 1;
      if (step <= 0 || space_block_is_spatial(space_block(s, kids[i]))) continue;
      sched_val v = {.kind = SV_INT, .i = step};
      sched_val e = {.kind = SV_INT, .i = vals[2] != -1};
      if (!sched_annotate(s, loops[0], "pragma_auto_unroll_max_step", &v, st) ||
          !sched_annotate(s, loops[0], "pragma_unroll_explicit", &e, st))
        return false;
    }
  }
}
