/* lower_impl.h: what the lowering passes share: constructors of lowered
 * statements, substitution and walking over them, and the passes' entry
 * points (one file each).
 *
 * Statements are built in the program function's arena and never mutated
 * once shared: a pass that changes a subtree builds new nodes.
 */
#ifndef DRAGON_LOWER_IMPL_H
#define DRAGON_LOWER_IMPL_H

#include "dragon/lower.h"

/* ---- construction (stmt.c) ----------------------------------------------- */

lw_stmt *lw_seq(dg_func *f, lw_stmt **stmts, int n); /* flattens nested SEQs */
lw_stmt *lw_for(dg_func *f, dg_var *v, int64_t extent, lw_loop_kind k, lw_stmt *body);
lw_stmt *lw_if(dg_func *f, dg_expr *cond, lw_stmt *then_s, lw_stmt *else_s);
lw_stmt *lw_store(dg_func *f, dg_buffer *b, dg_expr **idx, int n, dg_expr *value);
lw_stmt *lw_barrier(dg_func *f);
lw_stmt *lw_async_commit(dg_func *f);
/* cp.async.wait_group count; bufs: the shared buffers it completes (copied). */
lw_stmt *lw_async_wait(dg_func *f, int64_t count, dg_buffer *const *bufs, int n);
/* An LW_WMMA statement without operands (the caller fills wmma_*). */
lw_stmt *lw_wmma(dg_func *f, const dg_intrin *in, const char *block, lw_stmt *body);
lw_stmt *lw_copy(dg_func *f, const lw_stmt *s); /* shallow */
/* s with an unroll region (pragma_auto_unroll_max_step, _explicit; -1:
 * none) put on its outermost loops that have none of their own: what a
 * removed loop's region becomes (copies the nodes on the way). */
lw_stmt *lw_with_unroll(dg_func *f, const lw_stmt *s, int64_t max_step, int expl);

/* A new statement with every expression substituted (map as ir_subst_expr). */
lw_stmt *lw_subst(dg_func *f, const lw_stmt *s, const dg_subst *map, int n);
/* Whether variable v occurs anywhere in s. */
bool lw_uses_var(const lw_stmt *s, const dg_var *v);
/* Whether expression e loads buffer b. */
bool lw_expr_reads_buf(const dg_expr *e, const dg_buffer *b);
/* An expression with every load of `from` redirected to `to` with indices
 * mapped by fn (NULL: unchanged); returns e itself where nothing changed. */
typedef dg_expr **(*lw_index_fn)(dg_func *f, dg_expr *const *idx, int n, void *ctx);
dg_expr *lw_expr_rebuf(dg_func *f, dg_expr *e, const dg_buffer *from, dg_buffer *to,
                       lw_index_fn fn, void *ctx);
/* The flat row-major offset of buf[idx]. */
dg_expr *lw_flat_index(dg_func *f, const dg_buffer *b, dg_expr *const *idx, int n);
/* A fresh variable or buffer name unique in the program (base, base_1, ...);
 * lower_names_add registers a name in use; lower_names_free drops the set. */
const char *lw_fresh_name(lw_program *p, const char *base);
void lower_names_add(lw_program *p, const char *s);
void lower_names_free(lw_program *p);

/* ---- the passes ---------------------------------------------------------- */

/* convert.c: the root statement `root_stmt` -> kernel k (body, dims, tag
 * vars, local allocations of blocks inside it, facts for verify). */
bool lower_convert_kernel(lw_program *p, lw_kernel *k, const dg_stmt *root_stmt,
                          dg_status *st);
/* allreduce.c: a FOR of dg IR that heads a cross-thread reduction: the
 * lowered replacement, or NULL with *matched false if it is not one.
 * Needs the conversion's substitution of enclosing loop variables. */
typedef struct lw_conv lw_conv;
lw_stmt *lower_cross_thread_reduction(lw_conv *c, const dg_stmt *loop, bool *matched,
                                      dg_status *st);
/* local_stage.c: ManifestSharedMemoryLocalStage, on the scheduled kernel
 * (p->f) before the launches are converted: blocks annotated
 * tirx.manifest_shared_memory_local_stage get a register stage in front
 * (a local buffer of the root). */
bool lower_manifest_local_stage(lw_program *p, dg_status *st);
/* compact.c */
bool lower_compact_buffers(lw_program *p, lw_kernel *k, dg_status *st);
/* pipeline.c: software-pipelined loops (after compaction, before the
 * limits are checked, so that they see the multi-buffered allocations) */
bool lower_inject_software_pipeline(lw_program *p, lw_kernel *k, dg_status *st);
/* pipeline.c: stores of asynchronous stages that can be cp.async made so
 * (after vectorization); commits and waits dropped where none is */
bool lower_async_copies(lw_program *p, lw_kernel *k, dg_status *st);
/* vthread.c */
bool lower_expand_vthreads(lw_program *p, lw_kernel *k, dg_status *st);
/* vectorize.c */
bool lower_vectorize(lw_program *p, lw_kernel *k, dg_status *st);
/* unroll.c */
bool lower_unroll(lw_program *p, lw_kernel *k, dg_status *st);
/* The unroller's state where it reaches a statement (the region's
 * settings and what it has counted), so that a walk over the rolled
 * statements can tell what lower_unroll makes of each loop. */
typedef struct {
  int64_t max_step;
  bool explicit_unroll;
  int64_t step_count, unroll_depth, normal_depth;
} lw_unroll_state;
typedef enum {
  LW_UNROLL_KEEP,   /* stays a loop */
  LW_UNROLL_MARK,   /* stays a loop, marked unrolled */
  LW_UNROLL_COPIES, /* replaced by copies of its body, var -> 0, 1, ... */
} lw_unroll_how;
/* The state at a launch body. */
void lower_unroll_begin(lw_unroll_state *st);
/* Loop s reached in state *entry: its fate, and the state its body is
 * reached in. A SEQ's parts are each reached with the counts zeroed; an
 * IF's else part in the state after its then part (lower_unroll_skip). */
lw_unroll_how lower_unroll_loop(const lw_stmt *s, const lw_unroll_state *entry,
                                lw_unroll_state *body_entry);
/* The state after s, reached in *st. */
void lower_unroll_skip(const lw_stmt *s, lw_unroll_state *st);
/* stmt.c: e with the substitution applied, simplified where it changed
 * (what lw_subst does to each expression). */
dg_expr *lw_subst_expr(dg_func *f, dg_expr *e, const dg_subst *map, int n);
/* sync.c */
bool lower_insert_barriers(lw_program *p, lw_kernel *k, dg_status *st);

/* The conversion state (convert.c), shared with allreduce.c. */
struct lw_conv {
  lw_program *p;
  lw_kernel *k;
  dg_subst map[256]; /* loop var -> tag var or itself */
  int n_map;
  dg_ranges ranges;  /* ranges of the loops and tags in scope */
  const dg_block *block; /* innermost block, for messages */
  unsigned tags_in_scope; /* bit per dg_thread_tag of the enclosing bound loops */
  bool failed;
  dg_status *st;
  int in_tensorized; /* > 0 inside the body of a tensorized block (wmma.c) */
};
/* Records a thread-bound loop's tag and extent; false with st set if the
 * tag is already bound with another extent. Returns the tag's var. */
dg_var *lower_conv_bind(lw_conv *c, dg_thread_tag tag, int64_t extent, const char *loop,
                        dg_status *st);
/* Converts a dg statement (the conversion proper, convert.c). */
lw_stmt *lower_conv_stmt(lw_conv *c, const dg_stmt *s);
/* Substitutes the conversion's map into e and simplifies under its ranges. */
dg_expr *lower_conv_expr(lw_conv *c, dg_expr *e);
/* A new per-thread local buffer of one element, registered with the kernel. */
dg_buffer *lower_new_local(lw_program *p, lw_kernel *k, const char *base, dg_dtype t);
dg_buffer *lower_new_shared(lw_program *p, lw_kernel *k, const char *base, dg_dtype t,
                            int64_t n);

/* ---- tensor cores (wmma.c) ---------------------------------------------- */

/* Whether a scope is a tensor-core fragment (wmma.matrix_a/b, accumulator). */
bool lower_scope_is_fragment(dg_scope s);
/* A block annotated tensor_intrin -> one LW_WMMA statement (NULL and
 * c->failed on a block the tensor cores cannot run). */
lw_stmt *lower_wmma_block(lw_conv *c, const dg_stmt *s);
/* A store outside tensorized blocks must not touch a fragment: false (and
 * c->failed) if it does. */
bool lower_wmma_check_store(lw_conv *c, const dg_stmt *store);
/* Right after conversion: a launch with tensorized blocks and no
 * threadIdx.x loop gets its 32 lanes (warp execution). */
bool lower_wmma_lanes(lw_program *p, lw_kernel *k, dg_status *st);
/* Last: fragment shapes, tile indices, layouts and alignment checked. */
bool lower_wmma_finalize(lw_program *p, lw_kernel *k, dg_status *st);
/* What lower_unroll, lower_insert_barriers and lower_wmma_finalize in turn
 * would say of k, without building the unrolled body: 1 they succeed, 0
 * one fails (st set as it would be), -1 no verdict (st untouched: run
 * them). k is not changed. */
int lower_wmma_check_unrolled(lw_program *p, lw_kernel *k, dg_status *st);

#endif
