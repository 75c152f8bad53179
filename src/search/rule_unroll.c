/* rule_unroll.c: ParallelizeVectorizeUnroll
 * (schedule_rule/parallel_vectorize_unroll.cc) in MetaSchedule's CUDA
 * configuration: no parallel or vectorize marks (max_jobs_per_core and
 * max_vectorize_extent are -1), explicit unrolling with the maximum step
 * sampled uniformly from {0, 16, 64, 512, 1024} (TVM v0.18's list; HEAD
 * has eight steps). It acts only on the root block, and only when some
 * block of the kernel reduces; the mark is turned into loop pragmas by the
 * RewriteParallelVectorizeUnroll postprocessor.
 */
#include "search/space_impl.h"

static const int64_t unroll_max_steps[] = {0, 16, 64, 512, 1024};

int rule_unroll_apply(space_ctx *c, sched *s, int block, sched **out, dg_status *st) {
  (void)c;
  out[0] = s;
  dg_block *b = space_block(s, block);
  if (!b || !space_is_root(s, b) || space_func_is_spatial(s->f)) return 1;
  int v = space_sample_uniform(s, unroll_max_steps, (int)DG_ARRAY_LEN(unroll_max_steps), st);
  if (v < 0) return -1;
  sched_val val = {.kind = SV_RV, .i = v};
  return sched_annotate(s, block, "meta_schedule.unroll_explicit", &val, st) ? 1 : -1;
}
