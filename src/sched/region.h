/* region.h: buffer-region analysis and the block-scope facts built on it,
 * shared by the schedule primitives (compute-at, inlining, caching, ...).
 *
 * A region is a box of a buffer's elements with symbolic corners: per
 * dimension the closed interval [lo, hi] of two integer expressions in the
 * variables that were not relaxed. Relaxing a variable replaces it by the
 * interval of its range (TVM's arith::EvalSet on a loop domain); what the
 * analysis cannot bound symbolically gets the constant bounds of
 * ir_expr_bounds, which is always sound and only ever looser. Regions are
 * over-approximations: a block never touches an element outside its region.
 *
 * The scope facts follow TVM's BlockScope: the children of a scope block are
 * the blocks under it with no block in between, in program order; b2 depends
 * on an earlier b1 by read-after-write or write-after-write when b1 writes a
 * buffer b2 reads or writes, as the blocks' declared regions say.
 *
 * Everything new is built in the kernel's arena; nothing here changes the
 * kernel except sched_region_detect (the block's regions) and applying a
 * removal plan.
 */
#ifndef DRAGON_SCHED_REGION_H
#define DRAGON_SCHED_REGION_H

#include "sched/sched_impl.h"

/* ---- regions ---------------------------------------------------------------- */

typedef struct {
  dg_buffer *buf;             /* NULL: the empty region */
  dg_expr *lo[DG_MAX_DIMS];   /* buf->ndim entries, inclusive */
  dg_expr *hi[DG_MAX_DIMS];   /* buf->ndim entries, inclusive */
} sched_region;

/* Bounds [*lo, *hi] of the integer expression e when the variables of
 * `relax` range over their intervals; other variables stay symbolic.
 * `known` (may be NULL) holds the ranges of the symbolic ones: the results
 * are simplified under them, and a part with no symbolic bound (a product of
 * two relaxed variables, a load, a select) gets constant bounds from both
 * range sets. */
void sched_region_relax(dg_func *f, const dg_expr *e, const dg_ranges *relax,
                        const dg_ranges *known, dg_expr **lo, dg_expr **hi);

/* The region of buf that the block realized at the end of p reads (or, with
 * writes, writes): the union of its declared regions of buf, iteration
 * variables replaced by their bindings, relaxed over the loops of the path
 * strictly below p->stmts[top]. Loops at or above top stay symbolic, except
 * that with relax_scope a shared-memory buffer is also relaxed over the
 * threadIdx.* and vthread.* loops above (all threads of a GPU block share
 * one copy: TVM's storage-scope rule). *known (may be NULL) receives the
 * ranges of the loop and enclosing iteration variables left symbolic.
 * Returns false, with *out empty, if the block has no such region. */
bool sched_region_of_block(dg_func *f, const sched_path *p, int top, const dg_buffer *buf,
                           bool writes, bool relax_scope, sched_region *out, dg_ranges *known);

/* The region of buf that the blocks of a subtree read (or write), each
 * relaxed over the loops between the subtree's top and the block. `outer`
 * (may be NULL) has the ranges of the variables defined above the subtree.
 * A block nested in another block counts through the outer block's
 * declared regions. Returns false, with *out empty, if none accesses buf. */
bool sched_region_of_subtree(dg_func *f, dg_stmt *subtree, const dg_ranges *outer,
                             const dg_buffer *buf, bool writes, sched_region *out);

/* acc := the smallest region containing acc and r (of one buffer; an empty
 * acc takes r). Simplified under `known` (may be NULL). */
void sched_region_union(dg_func *f, sched_region *acc, const sched_region *r,
                        const dg_ranges *known);

/* Recomputes a block's reads and writes from what its init and body access
 * (TVM's GetBlockReadWriteRegion): each load or store is a point, loops
 * inside the block are relaxed, nested blocks count through their declared
 * regions, buffers keep the order of their first access, and a block with an
 * init does not list the buffers it writes among its reads. */
void sched_region_detect(dg_func *f, dg_block *b);

/* ---- the block scope --------------------------------------------------------- */

typedef DG_VEC(dg_block *) sched_blocks;

/* The children of a scope block, in program order (appended to out). */
void sched_scope_blocks(dg_block *scope, sched_blocks *out);
/* Earlier children that b depends on (RAW or WAW), in program order. */
void sched_scope_producers(dg_block *scope, const dg_block *b, sched_blocks *out);
/* Later children that depend on b (RAW or WAW), in program order. */
void sched_scope_consumers(dg_block *scope, const dg_block *b, sched_blocks *out);

bool sched_block_reads(const dg_block *b, const dg_buffer *buf);
bool sched_block_writes(const dg_block *b, const dg_buffer *buf);

/* TVM's complete block: every iteration variable spatial, the only writer in
 * the scope of each buffer it writes, no buffer both read and written.
 * False with the reason in st ("block C is not complete: ..."). */
bool sched_block_check_complete(dg_block *scope, const dg_block *b, dg_status *st);
/* TVM's reduction block: an init, the only writer of its outputs, reduction
 * variables absent from the written regions. False with the reason. */
bool sched_block_check_reduction(dg_block *scope, const dg_block *b, dg_status *st);
/* Either one; the message gives both reasons. */
bool sched_block_check_complete_or_reduction(dg_block *scope, const dg_block *b,
                                             dg_status *st);
/* The first buffer b writes that outlives the scope (a kernel parameter for
 * the root scope, else a buffer the scope block does not allocate), or NULL. */
dg_buffer *sched_block_output(const dg_func *f, const dg_block *scope, const dg_block *b);

/* ---- removing a leaf block ----------------------------------------------------- */

/* Taking the block at the end of p out of the tree (TVM's
 * LeafBlockRemovalPlan): the block and the loops that hold nothing else go;
 * the sequence that held them loses one statement (and is replaced by the
 * statement left if only one is). Planned first, applied after every other
 * check has passed: *slot = replacement. */
typedef struct {
  dg_stmt **slot;
  dg_stmt *replacement;
} sched_removal;

/* Fails (a message naming the block) if the block is the only leaf of its
 * scope or sits under an if. */
bool sched_removal_plan(dg_func *f, const sched_path *p, sched_removal *out, dg_status *st);
void sched_removal_apply(const sched_removal *r);

#endif
