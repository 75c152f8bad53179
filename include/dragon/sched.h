/* sched.h: schedules, their instructions and traces.
 *
 * A schedule (sched) owns a private copy of a kernel and rewrites it step by
 * step through MetaSchedule's primitives. Every step is an instruction
 * (kind, inputs, attrs, outputs, decision) appended to the schedule's trace;
 * a trace is data: the search mutates its decisions, the database stores it
 * as TVM's trace JSON, TSEL encodes it, the model learns it. Replaying a
 * trace on a fresh schedule of the same kernel gives the same kernel.
 *
 * Handles ("random variables", RVs) name blocks, loops and sampled integers.
 * They are small integers, serial in order of creation: the trace JSON
 * names them b0, l1, v2, ... by that one counter, as TVM does. A handle to a
 * loop that was split or fused, or a block that was inlined, is stale:
 * using it is an error naming the instruction that consumed it.
 *
 * Errors: every primitive returns false and fills a dg_status whose message
 * is the detailed rendering ("Split: loop l5 (i_0) is stale: consumed by
 * instruction 7 (Fuse)"); sched_error_brief() gives the short one for the
 * search loop ("Split: stale loop"). Replay prefixes the instruction index.
 */
#ifndef DRAGON_SCHED_H
#define DRAGON_SCHED_H

#include "dragon/ir.h"

/* ---- values: instruction inputs, attrs and decisions --------------------- */

typedef enum {
  SV_NONE,  /* None */
  SV_INT,
  SV_FLOAT,
  SV_BOOL,
  SV_STR,   /* a string constant */
  SV_RV,    /* a handle */
  SV_ARRAY,
} sched_val_kind;

typedef struct sched_val sched_val;
struct sched_val {
  sched_val_kind kind;
  int64_t i;      /* SV_INT, SV_BOOL (0/1), SV_RV (handle id) */
  double f;       /* SV_FLOAT */
  const char *s;  /* SV_STR */
  sched_val *items; /* SV_ARRAY */
  int n;
};

/* The deepest loop nest (loops from the root to any statement, across
 * blocks) that split may make: the walks of a nest keep its loops in
 * fixed stacks of 64. MetaSchedule's deepest sketches nest about 35. */
#define SCHED_MAX_LOOP_DEPTH 48

/* ---- instruction kinds ----------------------------------------------------- */

typedef enum {
  SCHED_RV_BLOCK,
  SCHED_RV_LOOP,
  SCHED_RV_EXPR,
} sched_rv_kind;

/* X(enum suffix, TVM name, apply function (prim_NAME, the primitive's
 *   file), pure, n_inputs (-1: flat variadic list), n_attrs, has_decision,
 *   output kind): the one description of every instruction; the apply
 *   table (prim_table.c), the trace's signatures, replay's arity checks
 *   and TSEL's output kinds are all made from it. */
#define SCHED_INST_LIST(X)                                         \
  X(GET_BLOCK, "GetBlock", get_block, 1, 0, 2, 0, SCHED_RV_BLOCK)             \
  X(GET_LOOPS, "GetLoops", get_loops, 1, 1, 0, 0, SCHED_RV_LOOP)              \
  X(GET_CHILD_BLOCKS, "GetChildBlocks", get_child_blocks, 1, 1, 0, 0, SCHED_RV_BLOCK) \
  X(GET_PRODUCERS, "GetProducers", get_producers, 1, 1, 0, 0, SCHED_RV_BLOCK)     \
  X(GET_CONSUMERS, "GetConsumers", get_consumers, 1, 1, 0, 0, SCHED_RV_BLOCK)     \
  X(SPLIT, "Split", split, 0, -1, 2, 0, SCHED_RV_LOOP)                    \
  X(FUSE, "Fuse", fuse, 0, -1, 1, 0, SCHED_RV_LOOP)                      \
  X(REORDER, "Reorder", reorder, 0, -1, 0, 0, SCHED_RV_LOOP)                \
  X(ADD_UNIT_LOOP, "AddUnitLoop", add_unit_loop, 0, 1, 0, 0, SCHED_RV_LOOP)       \
  X(PARALLEL, "Parallel", parallel, 0, 1, 0, 0, SCHED_RV_LOOP)               \
  X(VECTORIZE, "Vectorize", vectorize, 0, 1, 0, 0, SCHED_RV_LOOP)             \
  X(UNROLL, "Unroll", unroll, 0, 1, 0, 0, SCHED_RV_LOOP)                   \
  X(BIND, "Bind", bind, 0, 1, 1, 0, SCHED_RV_LOOP)                       \
  X(CACHE_READ, "CacheRead", cache_read, 0, 2, 2, 0, SCHED_RV_BLOCK)           \
  X(CACHE_WRITE, "CacheWrite", cache_write, 0, 2, 2, 0, SCHED_RV_BLOCK)         \
  X(REINDEX, "ReIndex", reindex, 0, 1, 2, 0, SCHED_RV_BLOCK)                \
  X(SET_SCOPE, "SetScope", set_scope, 0, 1, 2, 0, SCHED_RV_BLOCK)             \
  X(STORAGE_ALIGN, "StorageAlign", storage_align, 0, 1, 4, 0, SCHED_RV_BLOCK)     \
  X(COMPUTE_AT, "ComputeAt", compute_at, 0, 2, 2, 0, SCHED_RV_BLOCK)           \
  X(REVERSE_COMPUTE_AT, "ReverseComputeAt", reverse_compute_at, 0, 2, 2, 0, SCHED_RV_BLOCK) \
  X(COMPUTE_INLINE, "ComputeInline", compute_inline, 0, 1, 0, 0, SCHED_RV_BLOCK)   \
  X(REVERSE_COMPUTE_INLINE, "ReverseComputeInline", reverse_compute_inline, 0, 1, 0, 0, SCHED_RV_BLOCK) \
  X(DECOMPOSE_REDUCTION, "DecomposeReduction", decompose_reduction, 0, 2, 0, 0, SCHED_RV_BLOCK) \
  X(RFACTOR, "RFactor", rfactor, 0, 1, 1, 0, SCHED_RV_BLOCK)                \
  X(BLOCKIZE, "Blockize", blockize, 0, 1, 1, 0, SCHED_RV_BLOCK)              \
  X(TENSORIZE, "Tensorize", tensorize, 0, 1, 2, 0, SCHED_RV_BLOCK)            \
  X(ANNOTATE, "Annotate", annotate, 0, 2, 1, 0, SCHED_RV_BLOCK)              \
  X(UNANNOTATE, "Unannotate", unannotate, 0, 1, 1, 0, SCHED_RV_BLOCK)          \
  X(SAMPLE_PERFECT_TILE, "SamplePerfectTile", sample_perfect_tile, 1, 1, 2, 1, SCHED_RV_EXPR) \
  X(SAMPLE_CATEGORICAL, "SampleCategorical", sample_categorical, 1, 0, 2, 1, SCHED_RV_EXPR) \
  X(SAMPLE_COMPUTE_LOCATION, "SampleComputeLocation", sample_compute_location, 1, 1, 0, 1, SCHED_RV_LOOP) \
  X(ENTER_POSTPROC, "EnterPostproc", enter_postproc, 0, 0, 0, 0, SCHED_RV_BLOCK)

typedef enum {
#define X(e, name, fn, pure, nin, nattr, dec, out) SCHED_INST_##e,
  SCHED_INST_LIST(X)
#undef X
  SCHED_INST_COUNT,
  SCHED_INST_UNKNOWN = SCHED_INST_COUNT, /* kept verbatim, never applied */
} sched_inst_kind;

const char *sched_inst_name(sched_inst_kind k);
bool sched_inst_from_name(const char *s, sched_inst_kind *out);
bool sched_inst_is_pure(sched_inst_kind k);
bool sched_inst_has_decision(sched_inst_kind k);

/* One step. Inputs name handles by id (SV_RV); outputs are handle ids. */
typedef struct {
  sched_inst_kind kind;
  const char *kind_name;  /* the TVM name (also for SCHED_INST_UNKNOWN) */
  sched_val *inputs;
  int n_inputs;
  sched_val *attrs;
  int n_attrs;
  int *outputs;
  sched_rv_kind *out_kinds;
  int n_outputs;
  bool has_decision;
  sched_val decision;
} sched_inst;

/* ---- traces ---------------------------------------------------------------- */

typedef struct {
  dg_arena *arena;
  sched_inst *insts;
  int n, cap;
  int n_rvs; /* handles are 0 .. n_rvs-1, each an output of one instruction */
} sched_trace;

sched_trace *sched_trace_new(void);
void sched_trace_free(sched_trace *t);
sched_trace *sched_trace_clone(const sched_trace *t);
/* Appends a deep copy of inst (values copied into the trace's arena). */
void sched_trace_append(sched_trace *t, const sched_inst *inst);
/* Dead-code elimination as TVM's Trace::Simplified: walking backwards, a
 * pure instruction whose outputs are all unused is dropped; with
 * remove_postproc the trace is cut at EnterPostproc. Handles are renumbered
 * serially. */
sched_trace *sched_trace_simplified(const sched_trace *t, bool remove_postproc);
/* A copy with instruction `index`'s decision replaced (and cut at
 * EnterPostproc if remove_postproc), as TVM's WithDecision. */
sched_trace *sched_trace_with_decision(const sched_trace *t, int index,
                                       const sched_val *decision,
                                       bool remove_postproc);
/* Structural equality of traces (kinds, inputs, attrs, outputs, decisions). */
bool sched_trace_equal(const sched_trace *a, const sched_trace *b);

/* TVM's trace JSON: [[ [kind, inputs, attrs, outputs], ... ], [[index,
 * decision], ...]], compact, RVs named b/l/v + serial id, None as "None",
 * string inputs with their quotes inside the JSON string. Canonical: the
 * same trace always gives the same bytes. Caller frees. */
char *sched_trace_to_json(const sched_trace *t);
/* Parses trace JSON (any RV names; renumbered serially in order of
 * definition). Errors name the instruction index and what is wrong. */
sched_trace *sched_trace_from_json(const char *json, dg_status *st);

/* ---- schedules ------------------------------------------------------------- */

typedef struct sched sched;

/* A schedule over a private copy of f; seed drives sampling. */
sched *sched_new(const dg_func *f, uint64_t seed);
void sched_free(sched *s);
/* The current kernel (owned by the schedule). */
dg_func *sched_func(sched *s);
/* The trace of every step applied so far. */
const sched_trace *sched_get_trace(const sched *s);
/* The short rendering of the last error. */
const char *sched_error_brief(const sched *s);

/* Applies one instruction whose inputs refer to this schedule's handles;
 * appends it (with its outputs and the decision actually taken) to the
 * trace. out receives the output handle ids (room for `max_out`); *n_out
 * their count. A decision given here is taken as TVM's schedule takes one
 * (SCHED_REPLAY_REPAIR); traces are replayed exactly (sched_replay). */
bool sched_apply(sched *s, const sched_inst *inst, int *out, int max_out,
                 int *n_out, dg_status *st);

/* What replay does with the recorded decisions of the sampling
 * instructions (SamplePerfectTile, SampleCategorical,
 * SampleComputeLocation). */
typedef enum {
  /* Taken as recorded, never changed: a decision that is not valid where it
   * stands (tiles that do not multiply to the loop's extent, an innermost
   * factor above max_innermost_factor, a categorical index out of range, a
   * compute location that is not one of the legal ones) is an error naming
   * the instruction. What every trace from a file, the database or TSEL
   * gets. */
  SCHED_REPLAY_EXACT,
  /* Every sampling step draws a new decision (design spaces sampled). */
  SCHED_REPLAY_RESAMPLE,
  /* TVM's replay of a mutated trace: a tile decision that no longer divides
   * its loop is repaired innermost first (slot 0 takes what is left), a
   * compute location that is no longer legal falls back to the nearest
   * earlier legal one; a repaired tile whose innermost factor exceeds
   * max_innermost_factor is still an error, so every trace this mode
   * records replays exactly. Only the evolutionary search's mutants use it:
   * a mutation may change a loop's extent upstream of a recorded decision
   * (docs/schedules.md). */
  SCHED_REPLAY_REPAIR,
} sched_replay_mode;

/* Replays a trace on this schedule; decisions as `mode` says. The trace
 * recorded on s holds the decisions actually taken. With remove_postproc,
 * stops at EnterPostproc. Errors are prefixed "instruction N: Kind: ". */
bool sched_replay_with(sched *s, const sched_trace *t, sched_replay_mode mode,
                       bool remove_postproc, dg_status *st);
/* sched_replay_with in SCHED_REPLAY_EXACT mode, or SCHED_REPLAY_RESAMPLE
 * with `resample`. */
bool sched_replay(sched *s, const sched_trace *t, bool resample,
                  bool remove_postproc, dg_status *st);

/* sched_replay exact, and map[i] (t->n_rvs entries) the handle of this
 * schedule that the trace's handle i became, -1 where none (the handles
 * as far as the replay went, on failure too). */
bool sched_replay_map(sched *s, const sched_trace *t, bool remove_postproc, int *map,
                      dg_status *st);
/* What fuse asks of its loops: loop handle rv is a plain serial loop
 * without annotations; loop handle inner is the only child of loop handle
 * outer. False where a handle is not a live loop. */
bool sched_loop_plain(sched *s, int rv);
bool sched_loop_nested(sched *s, int outer, int inner);
/* Whether a block directly under loop handle rv binds its variable into a
 * reduction iterator: then only threadIdx.* may bind it (Bind). */
bool sched_loop_binds_reduction(sched *s, int rv);
/* Whether DecomposeReduction could put block handle block_rv's init at
 * loop handle loop_rv: the loop is one of the block's and no loop above it
 * binds a reduction variable of the block. True where a handle is not
 * live (nothing to say). */
bool sched_init_fits(sched *s, int block_rv, int loop_rv);
/* Whether block handle rv has an init and a reduction iterator (what
 * DecomposeReduction takes); true where it is not a live block. */
bool sched_block_decomposable(sched *s, int rv);
/* Whether block or loop handle rv names a statement no longer in the
 * kernel (a loop split, fused or regenerated by a compute_at, a block
 * inlined): every instruction taking it fails. False for a live handle, a
 * location mark, an integer handle or an unknown one. */
bool sched_rv_stale(sched *s, int rv);
/* Whether ComputeAt (reverse: ReverseComputeAt) would move block handle
 * block_rv under loop handle loop_rv at some index (index -1 is valid
 * wherever one is), checked without a change; false where the loop is
 * stale, true where a handle is not a live block or loop (nothing to say)
 * and for a location mark as the instruction reads it. */
bool sched_compute_at_fits(sched *s, int block_rv, int loop_rv, bool reverse);
/* The loops GetLoops would return for block handle rv (those between the
 * block and the block above it), recording nothing; -1 where rv is not a
 * live block. */
int sched_block_loop_count(sched *s, int rv);

/* The blocks GetProducers (producers) or GetConsumers would return for
 * block handle rv, recording nothing; -1 where rv is not a live block. */
int sched_block_neighbour_count(sched *s, int rv, bool producers);
/* The write (else read) regions of block handle rv, -1 where it is not a
 * live block. */
int sched_block_region_count(sched *s, int rv, bool write);

/* Value of an integer handle, kind of a handle. */
bool sched_rv_value(const sched *s, int rv, int64_t *out);
sched_rv_kind sched_rv_get_kind(const sched *s, int rv);

/* ---- the primitives, typed (each builds an instruction and applies it) ---- */

int sched_get_block(sched *s, const char *name, const char *func,
                    dg_status *st);                              /* -1 on error */
int sched_get_loops(sched *s, int block, int *out, int max, dg_status *st); /* count */
int sched_get_child_blocks(sched *s, int block_or_loop, int *out, int max, dg_status *st);
int sched_get_producers(sched *s, int block, int *out, int max, dg_status *st);
int sched_get_consumers(sched *s, int block, int *out, int max, dg_status *st);
/* factors: SV_INT, SV_RV (an int handle) or SV_NONE (at most one, inferred) */
int sched_split(sched *s, int loop, const sched_val *factors, int n,
                bool preserve_unit_iters, bool disable_predication, int *out,
                dg_status *st);
int sched_fuse(sched *s, const int *loops, int n, bool preserve_unit_iters,
               dg_status *st);
bool sched_reorder(sched *s, const int *loops, int n, dg_status *st);
int sched_add_unit_loop(sched *s, int block_or_loop, dg_status *st);
bool sched_parallel(sched *s, int loop, dg_status *st);
bool sched_vectorize(sched *s, int loop, dg_status *st);
bool sched_unroll(sched *s, int loop, dg_status *st);
bool sched_bind(sched *s, int loop, dg_thread_tag tag, dg_status *st);
int sched_cache_read(sched *s, int block, int read_index, dg_scope scope,
                     const int *consumers, int n_consumers, dg_status *st);
int sched_cache_write(sched *s, int block, int write_index, dg_scope scope,
                      const int *consumers, int n_consumers, dg_status *st);
int sched_reindex(sched *s, int block, int buffer_index, bool is_write,
                  dg_status *st);
bool sched_set_scope(sched *s, int block, int buffer_index, dg_scope scope,
                     dg_status *st);
bool sched_storage_align(sched *s, int block, int buffer_index, int axis,
                         int factor, int offset, dg_status *st);
bool sched_compute_at(sched *s, int block, int loop, bool preserve_unit_loops,
                      int index, dg_status *st);
bool sched_reverse_compute_at(sched *s, int block, int loop,
                              bool preserve_unit_loops, int index,
                              dg_status *st);
bool sched_compute_inline(sched *s, int block, dg_status *st);
bool sched_reverse_compute_inline(sched *s, int block, dg_status *st);
int sched_decompose_reduction(sched *s, int block, int loop, dg_status *st);
int sched_rfactor(sched *s, int loop, int factor_axis, dg_status *st);
int sched_blockize(sched *s, int loop, bool preserve_unit_iters, dg_status *st);
bool sched_tensorize(sched *s, int block_or_loop, const char *intrin,
                     bool preserve_unit_iters, dg_status *st);
/* value: SV_INT, SV_FLOAT, SV_STR, SV_RV (an int handle) or an int array */
bool sched_annotate(sched *s, int block_or_loop, const char *key,
                    const sched_val *value, dg_status *st);
bool sched_unannotate(sched *s, int block_or_loop, const char *key,
                      dg_status *st);
/* decision NULL: sample; a decision is taken as sched_apply takes it.
 * Returns the number of outputs (n) or -1. */
int sched_sample_perfect_tile(sched *s, int loop, int n, int max_innermost,
                              const int64_t *decision, int *out, dg_status *st);
int sched_sample_categorical(sched *s, const int64_t *candidates,
                             const double *probs, int n,
                             const int64_t *decision, dg_status *st);
int sched_sample_compute_location(sched *s, int block, const int64_t *decision,
                                  dg_status *st);
bool sched_enter_postproc(sched *s, dg_status *st);

/* ---- random schedules (random.c) ------------------------------------------- */

/* Applies up to n_steps random primitives to s, each drawn from those that
 * apply to the current kernel (random loops, factors, orders, bindings,
 * annotations, caches, compute locations, inlining). A drawn step that the
 * primitive rejects is skipped (rejection leaves the kernel unchanged and
 * records nothing). Returns the number of steps applied. Deterministic for
 * the RNG state. */
int sched_random_steps(sched *s, dg_rng *r, int n_steps);

#endif
