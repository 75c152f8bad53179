/* space_impl.h: what the design-space rules (rule_*.c), the
 * postprocessors (postproc_*.c) and their driver (space.c) share: the
 * schedule-rule calling convention, copies of schedules, and the block and
 * loop analyses of TVM's tir/schedule/analysis that the rules ask about
 * without recording anything in the trace.
 *
 * Handles are the schedule's (sched.h); analyses look at the current kernel
 * through the handle table (sched_impl.h). A rule records exactly the
 * instructions TVM's rule records, through the typed primitives.
 */
#ifndef DRAGON_SEARCH_SPACE_IMPL_H
#define DRAGON_SEARCH_SPACE_IMPL_H

#include "dragon/search.h"
#include "sched/region.h"
#include "sched/sched_impl.h"

/* What a rule application knows. */
typedef struct {
  const dg_func *f;          /* the unscheduled kernel */
  const search_target *t;
  uint64_t seed;             /* for the schedules copies are made of */
  bool no_software_pipeline; /* search_space_opts.no_software_pipeline */
  int n_copies;
  int n_fallbacks;           /* tensor-core blocks left to MultiLevelTiling */
  char fallback[256];        /* the first one */
} space_ctx;

/* The most schedules one rule application returns. */
#define SPACE_MAX_OUT 4

/* A rule applied to block handle `block` of s: writes the resulting
 * schedules to out (s itself, changed in place, may be one of them; copies
 * are new) and returns their count (>= 1), or -1 with st set when a step
 * failed midway (the driver then undoes the application). */
typedef int (*space_rule_fn)(space_ctx *c, sched *s, int block, sched **out, dg_status *st);

int rule_mlt_tc_apply(space_ctx *c, sched *s, int block, sched **out, dg_status *st);
/* The WMMA compute intrinsic whose group matches a block (TVM's
 * GetAutoTensorizeMappingInfo for the f16 groups), or NULL. */
const char *rule_mlt_tc_match(const dg_block *b);
int rule_mlt_apply(space_ctx *c, sched *s, int block, sched **out, dg_status *st);
int rule_inline_const_scalars_apply(space_ctx *c, sched *s, int block, sched **out,
                                    dg_status *st);
int rule_auto_inline_apply(space_ctx *c, sched *s, int block, sched **out, dg_status *st);
int rule_ctr_apply(space_ctx *c, sched *s, int block, sched **out, dg_status *st);
int rule_unroll_apply(space_ctx *c, sched *s, int block, sched **out, dg_status *st);
int rule_bind_apply(space_ctx *c, sched *s, int block, sched **out, dg_status *st);

/* The postprocessors, one file each (postproc_*.c); false rejects. */
bool postproc_disallow_dynamic_loop(sched *s, const search_target *t, dg_status *st);
bool postproc_cooperative_fetch(sched *s, const search_target *t, dg_status *st);
bool postproc_unbound_block(sched *s, const search_target *t, dg_status *st);
bool postproc_unroll(sched *s, const search_target *t, dg_status *st);
bool postproc_reduction_block(sched *s, const search_target *t, dg_status *st);
bool postproc_verify_gpu(sched *s, const search_target *t, dg_status *st);
bool postproc_tensorize(sched *s, const search_target *t, dg_status *st);

/* ---- schedules ---------------------------------------------------------------- */

/* A copy of s (same handles, same trace, the RNG state carried over) made
 * by replaying s's trace on a fresh schedule of c->f. */
sched *space_copy(space_ctx *c, sched *s, dg_status *st);
/* A fresh schedule of f with the first n instructions of t replayed. */
sched *space_replay_prefix(const dg_func *f, uint64_t seed, const sched_trace *t, int n,
                           dg_status *st);

/* ---- handles and the kernel --------------------------------------------------- */

/* The live block / loop of a handle; NULL if stale or of another kind. */
dg_block *space_block(sched *s, int rv);
dg_stmt *space_loop(sched *s, int rv);
/* The block that is the scope of b (NULL for the root). */
dg_block *space_scope(sched *s, const dg_block *b);
/* The loops above b up to its scope block, outermost first; returns the
 * count (at most max). */
int space_block_loops(sched *s, const dg_block *b, dg_stmt **out, int max);

/* TVM's GetLoopIterType: how the blocks directly under a loop use its
 * variable. */
typedef enum { SPACE_LOOP_SPATIAL, SPACE_LOOP_REDUCE, SPACE_LOOP_OPAQUE } space_loop_type;
space_loop_type space_loop_iter_type(const dg_stmt *loop);

bool space_is_root(sched *s, const dg_block *b);
/* Every iteration variable spatial (of one block; of every block). */
bool space_block_is_spatial(const dg_block *b);
bool space_func_is_spatial(const dg_func *f);
/* Already tiled by MultiLevelTiling (meta_schedule.tiling_structure). */
bool space_block_is_tiled(const dg_block *b);
/* The i-th loop above b binds exactly the i-th iteration variable. */
bool space_trivial_binding(sched *s, const dg_block *b);
/* TVM's NeedsMultiLevelTiling: a reduction-like block with data reuse. */
bool space_needs_mlt(sched *s, const dg_block *b);
/* The block's string annotation `key`, or NULL. */
const char *space_ann_str(const dg_block *b, const char *key);
/* Whether a block is a reduction block / complete block of its scope. */
bool space_is_reduction(sched *s, const dg_block *b);
bool space_is_complete(sched *s, const dg_block *b);
/* Blocks of the scope that depend on b (consumers) / b depends on
 * (producers), RAW or WAW, program order. */
void space_consumers(sched *s, const dg_block *b, sched_blocks *out);
void space_producers(sched *s, const dg_block *b, sched_blocks *out);
/* The block writes a buffer that outlives its scope. */
bool space_is_output(sched *s, const dg_block *b);

/* ---- recorded steps shared by several rules ----------------------------------- */

/* Fuse as TVM records it (a single loop is fused into a renamed loop). When
 * the Fuse primitive refuses a single loop, the loop itself is returned and
 * nothing is recorded (docs/design-spaces.md). -1 on failure. */
int space_fuse(sched *s, const int *loops, int n, dg_status *st);
/* SampleCategorical with uniform probabilities 1/n; -1 on failure. */
int space_sample_uniform(sched *s, const int64_t *cands, int n, dg_status *st);

/* TVM's BindBlockThreadIdx (schedule/cuda/thread_bind.cc), shared by
 * AutoBind and RewriteUnboundBlock: fuses the leading spatial loops of a
 * block that is not bound to both blockIdx and threadIdx and binds them.
 * The thread extent is sampled from `cands` (those <= the fused extent
 * capped at max_threads_per_block; a constant when one or none survives);
 * with n_cands 0 it is that cap itself. */
bool space_bind_block_threads(sched *s, int block, const search_target *t, const int64_t *cands,
                              int n_cands, dg_status *st);

#endif
