/* lower.h: a scheduled kernel lowered to device kernels.
 *
 * lower_program turns a scheduled kernel (dg_func) into an lw_program: one
 * or more kernel launches in order, as TVM's SplitHostDevice outlines them.
 * Every statement of the root block becomes one launch; global buffers the
 * root allocates become device allocations of the program. Inside a launch
 * the passes run in TVM's order (docs/lowering.md):
 *   convert   blocks -> their bindings substituted, predicate as `if`, init
 *             as `if (reduce bindings == 0)`; blockIdx/threadIdx loops ->
 *             the launch's dims and one index variable per tag;
 *             cross-thread reductions -> per-thread partial + allreduce
 *   compact   shared/local buffers shrunk to the region used under the
 *             loop that encloses all their uses (local buffers under a
 *             vthread get one slot per virtual thread)
 *   pipeline  loops annotated software_pipeline_stage/order -> prologue,
 *             body and epilogue over multi-buffered stages, asynchronous
 *             stages committed and waited for (pipeline.c)
 *   vthread   virtual-thread loops expanded into unrolled copies, pushed
 *             down to the statements that use them
 *   vectorize vectorized loops of 2/4/8 lanes over contiguous, aligned
 *             stores -> vector stores; others become serial loops
 *   async     global->shared copies of 4, 8 or 16 bytes in asynchronous
 *             stages -> cp.async (targets that have it)
 *   unroll    pragma_auto_unroll_max_step / pragma_unroll_explicit and
 *             unrolled loops, by TVM's UnrollLoop rule
 *   sync      __syncthreads() where shared memory written by one thread is
 *             read by others, and before it is overwritten
 *   verify    the GPU's limits (lower_verify)
 * Tensorized blocks (tensor_intrin) become LW_WMMA statements during
 * convert; a launch with them gets its warp lanes right after, and the
 * fragment indices, layouts and alignment are settled last (wmma.c).
 *
 * Expressions are dg_expr; thread and block indices are dg_vars of the
 * program's function (kernel->tag_var[tag]). Everything lives in the arena
 * of prog->f, a private copy of the scheduled kernel.
 *
 * Dimension letters: grid (x, y, z) = blockIdx extents, block (x, y, z) =
 * threadIdx extents; sizes in elements unless named bytes.
 */
#ifndef DRAGON_LOWER_H
#define DRAGON_LOWER_H

#include "dragon/ir.h"
#include "dragon/intrin.h"

/* The lowering's version, named by every measured record with the commit:
 * raised whenever a change makes the same schedule compile to a different
 * kernel (a pass added, a pass's output changed), so that records measured
 * before and after are told apart. 1: no software pipelining (annotated
 * loops ran unpipelined), vthread extents above 8 refused. 2: software
 * pipelining (multi-buffered stages, cp.async for asynchronous stages),
 * VerifyGPUCode counting the multi-buffered shared memory, no vthread
 * extent refused. */
#define LOWER_VERSION 2
/* Whether the lowering honours software_pipeline_* annotations (multi-
 * buffered stages, pipeline.c): labels are searched with MultiLevelTiling's
 * pipelined sketches exactly when it does. */
#define LOWER_HAS_SOFTWARE_PIPELINE 1

typedef enum {
  LW_SEQ,
  LW_FOR,
  LW_IF,
  LW_STORE,     /* buf[idx] = value; lanes > 1: a vector store */
  LW_BARRIER,   /* __syncthreads() */
  LW_ALLREDUCE, /* dst[0] = combine of src[0] over the threads of red_tag */
  LW_WMMA,      /* one warp-wide tensor-core operation (a tensorized block) */
  LW_ASYNC_COMMIT, /* cp.async.commit_group: the thread's copies issued so far form a group */
  LW_ASYNC_WAIT,   /* cp.async.wait_group wait_count: all but the last wait_count groups done */
} lw_stmt_kind;

typedef enum {
  LW_LOOP_SERIAL,
  LW_LOOP_UNROLLED,   /* `#pragma unroll` (implicit unrolling) */
  LW_LOOP_VECTORIZED, /* before the vectorize pass only */
  LW_LOOP_VTHREAD,    /* before the vthread pass only */
} lw_loop_kind;

typedef struct lw_stmt lw_stmt;
struct lw_stmt {
  lw_stmt_kind kind;
  /* FOR: var in [0, extent) */
  dg_var *var;
  int64_t extent;
  lw_loop_kind loop_kind;
  dg_thread_tag tag;        /* VTHREAD loops: vthread.x/y/z */
  int64_t unroll_max_step;  /* pragma_auto_unroll_max_step, -1: none */
  int unroll_explicit;      /* pragma_unroll_explicit, -1: none */
  /* A software-pipelined loop, until the pipeline pass: pipe_n parts of
   * the body (the statements of the annotated loop's body, in order); part
   * i is the next pipe_len[i] statements of the body (a SEQ, or the body
   * itself when it is one statement), in stage pipe_stage[i] and
   * pipe_order[i]; pipe_async lists the stages whose copies are
   * asynchronous (software_pipeline_async_stages). pipe_n == 0: none. */
  int *pipe_stage, *pipe_order, *pipe_len, *pipe_async;
  int pipe_n, pipe_n_async;
  lw_stmt *body;
  /* SEQ */
  lw_stmt **stmts;
  int n;
  /* IF */
  dg_expr *cond;
  lw_stmt *then_s, *else_s; /* else_s may be NULL */
  /* STORE: for lane_var in [0, lanes): buf[idx] = value. With lanes > 1 the
   * flat index is base + lane_var, base a multiple of lanes (aligned);
   * vloads lists the loads of value that are contiguous and aligned in the
   * same way, by ordinal: the i-th LOAD node of value in pre-order (node
   * before its indices); the others are per-lane loads or lane-invariant. */
  dg_buffer *buf;
  dg_expr **idx;
  int nidx;
  dg_expr *value;
  int lanes;
  dg_var *lane_var;
  int *vloads;
  int n_vloads;
  /* in_async: the store belongs to an asynchronous pipeline stage (TVM's
   * async_scope); cp_async: it is issued as cp.async (a global->shared copy
   * of 4, 8 or 16 bytes, decided after vectorization), its write complete
   * only after a later ASYNC_WAIT. */
  bool in_async, cp_async;
  /* ASYNC_WAIT: the shared buffers whose asynchronous writes it completes
   * (what barrier insertion counts as written at the wait). */
  int64_t wait_count;
  dg_buffer **wait_bufs;
  int n_wait_bufs;
  /* ALLREDUCE: src, dst local buffers of one element; scratch a shared
   * buffer (one slot per warp of the block) where more than one warp takes
   * part. red_extent threads along red_tag form one group. */
  dg_expr_kind combiner; /* DG_EXPR_ADD, MUL, MIN or MAX */
  dg_buffer *src, *dst, *scratch;
  dg_thread_tag red_tag;
  int64_t red_extent;
  /* WMMA (src/lower/wmma.c): a block tagged tensor_intrin, computed by the
   * 32 lanes of a warp together. intrin is the intrinsic; wmma_buf[i] and
   * wmma_origin[i] (wmma_buf[i]->ndim entries) are operand i in
   * intrin_bind's order and the tile's first element in it; wmma_frag[i]
   * is, for a fragment operand, the index of its 16x16 fragment in the
   * fragment array (set by the last pass; NULL for memory operands).
   * body is the block's own scalar statement, its meaning: what the C
   * target runs for the warp. wmma_block names the block in messages. */
  const dg_intrin *intrin;
  dg_buffer *wmma_buf[3];
  dg_expr **wmma_origin[3];
  dg_expr *wmma_frag[3];
  int wmma_n;
  const char *wmma_block;
};

/* A block's requirement on the threads of its launch
 * (meta_schedule.thread_extent_low/high_inclusive). */
typedef struct {
  const char *block;
  int64_t low, high; /* -1: not given */
  int64_t threads;   /* product of the threadIdx extents around the block */
} lw_thread_check;

/* A StorageAlign request (a block's buffer_dim_align annotation): the
 * stride of dimension axis of buf is padded to factor * k + offset when
 * compaction allocates it. */
typedef struct {
  const dg_buffer *buf;
  int axis;
  int64_t factor, offset;
} lw_align;

typedef struct {
  const char *name;
  int64_t grid[3];   /* blockIdx.x, y, z extents */
  int64_t block[3];  /* threadIdx.x, y, z extents */
  dg_var *tag_var[DG_TAG_COUNT]; /* blockIdx/threadIdx index vars (NULL: unused) */
  dg_buffer **params; /* global buffers it uses, program order */
  int n_params;
  dg_buffer **shared; /* after compaction */
  int n_shared;
  dg_buffer **local;  /* per thread, after compaction */
  int n_local;
  lw_stmt *body;
  /* facts for lower_verify, collected before the passes consume them */
  int64_t max_vthread;      /* largest vthread loop extent (1: none) */
  int64_t max_vector_bytes; /* widest vectorized loop (lanes * bytes) */
  const char *vector_loop;  /* its loop variable */
  lw_thread_check *checks;
  int n_checks;
  lw_align *aligns;  /* StorageAlign requests of the blocks inside */
  int n_aligns;
  /* Fragments (wmma.* scopes) are listed in `local`: one array of 16x16
   * fragments per warp. true when no loop binds threadIdx.x and the
   * launch got 32 lanes for its tensorized blocks (warp execution). */
  bool implicit_lanes;
} lw_kernel;

typedef struct lw_program_s {
  dg_func *f;          /* owns every node; a private copy of the input */
  const char *name;
  dg_buffer **params;  /* the kernel's parameters, in order */
  int n_params;
  dg_buffer **allocs;  /* intermediate global buffers (device allocations) */
  int n_allocs;
  lw_kernel *kernels;  /* launched in order */
  int n_kernels;
  bool async_copy;     /* asynchronous stages may use cp.async (lw_limits.async_copy) */
  struct lw_names *names; /* private: every name in use, for fresh ones */
} lw_program;

/* The limits a lowered kernel must meet (TVM's VerifyGPUCode). */
typedef struct {
  int64_t max_threads_per_block;   /* 1024 */
  int64_t max_thread_dim[3];       /* 1024, 1024, 64 */
  int64_t max_grid_dim[3];         /* 2^31-1, 65535, 65535 */
  int64_t max_shared_bytes;        /* static shared per block: 48 KiB */
  int64_t max_shared_dyn_bytes;    /* shared.dyn per block: 227 KiB */
  int64_t max_local_bytes;         /* per thread (registers + local) */
  int64_t max_fragment_bytes;      /* tensor-core fragments per thread: 255 registers */
  /* The widest vthread loop refused. TVM's table names 8 but checks after
   * InjectVirtualThread has removed every vthread loop, so it refuses none:
   * INT64_MAX here. (Expansion is bounded by LOWER_VTHREAD_MAX_STMTS.) */
  int64_t max_vthread;
  int64_t max_vector_bytes;        /* 16 */
  int64_t warp_size;               /* 32 */
  bool async_copy;                 /* cp.async exists (sm_80 and later) */
} lw_limits;

/* The limits of sm_90 (H100/H200). */
extern const lw_limits lower_limits_sm90;

typedef struct {
  const lw_limits *limits; /* NULL: lower_limits_sm90 */
  bool skip_verify;        /* lower, but do not check the limits */
} lower_opts;

/* The most statements virtual-thread expansion may make in one launch: a
 * guard against pathological expansions (vthread extents themselves are
 * not limited, as in TVM). docs/lowering.md gives the measurements. */
#define LOWER_VTHREAD_MAX_STMTS 65536

/* Lowers a scheduled kernel (which must pass ir_verify). Fails with a
 * message naming the block, loop or buffer at fault: a launch not bound to
 * blockIdx/threadIdx, tags bound with different extents, a barrier under a
 * condition on the thread index, a broken limit, ... NULL on failure. */
lw_program *lower_program(const dg_func *f, const lower_opts *o, dg_status *st);
void lower_program_free(lw_program *p);
/* lower_program's verdict and message, without building what only the
 * program needs (unrolled bodies, barriers, fragment indices, parameters):
 * for checks that throw the program away. */
bool lower_check(const dg_func *f, const lower_opts *o, dg_status *st);

/* Checks every launch against the limits; false with the first violation
 * ("lower: kernel main_kernel0: 2048 threads per block (limit 1024)"). */
bool lower_verify(const lw_program *p, const lw_limits *lim, dg_status *st);
/* The same for one launch (lim NULL: lower_limits_sm90). What it reads is
 * settled once the launch's buffers are compacted (conversion collects the
 * rest), so lowering checks it there, before the costly passes. */
bool lower_verify_kernel(const lw_kernel *k, const lw_limits *lim, dg_status *st);

/* Bytes of shared memory a launch declares (static, dynamic). */
int64_t lower_kernel_shared_bytes(const lw_kernel *k, bool dynamic);

/* Readable text of a lowered program (for tests and `dragon emit`
 * debugging). Caller frees. */
char *lower_print(const lw_program *p);

/* Whether a statement contains a barrier or an allreduce (a point where
 * every thread of the block must arrive). */
bool lower_stmt_has_barrier(const lw_stmt *s);

#endif
