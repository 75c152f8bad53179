/* codegen.h: kernel IR -> source text, through a language table.
 *
 * A language table (dg_lang) holds every string and name that differs
 * between targets: the kernel prefix, qualifiers of helpers, the barrier,
 * the storage-scope prefixes, the thread index names, the math function
 * names per dtype, the f16 storage type and its conversions, vector types
 * and the helper preamble. The emitter walks the IR once and asks the table;
 * it never prints a target string of its own. Two tables exist: C (runs on
 * the CPU) and CUDA (device programs lowered by lower/, see
 * codegen_emit_program below).
 *
 * The emitted kernel (codegen_emit) is one function `void NAME(void **args)`, args[i] the
 * i-th parameter's dense row-major data. Values of dtype f16 are carried as
 * float holding an exact half and rounded to f16 after every operation, as a
 * GPU computing in half would; f16 buffers are stored as IEEE binary16 bits.
 *
 * Reference mode (codegen_opts.reference) emits the same loop nest with
 * every float buffer, value and operation in double: the float64 reference
 * a scheduled kernel is checked against. Integer and bool stay as they are.
 * Its outer independent loops get OpenMP pragmas, and a reduction nest may
 * have its innermost spatial loop moved inside the reduction loops (see
 * codegen_opts.reference_in_order); neither changes a single bit of the
 * results.
 */
#ifndef DRAGON_CODEGEN_H
#define DRAGON_CODEGEN_H

#include "dragon/ir.h"

typedef struct dg_lang {
  const char *name;          /* "c" */
  /* Written before `void NAME(void **args)`: "" for C, "extern \"C\"
   * __global__ " for CUDA. */
  const char *kernel_prefix;
  const char *helper_prefix; /* qualifiers of helper functions */
  const char *restrict_kw;   /* on parameter pointers */
  /* The statement a barrier becomes; NULL where the target has none and
   * emulates threads by splitting at barriers instead (C). */
  const char *barrier;
  /* Prefix of an allocated buffer's declaration per storage scope
   * ("__shared__ " for shared on CUDA; "" everywhere on C). */
  const char *scope_prefix[DG_SCOPE_COUNT];
  /* Names of the hardware indices per thread tag; NULL where thread-bound
   * loops stay loops (C, which runs every block and thread in turn). */
  const char *thread_index[DG_TAG_COUNT];
  /* f16: storage type and the conversions between it and float; `round_half`
   * rounds a float to the nearest half, kept as float. */
  const char *half_type;
  const char *half_to_float;
  const char *float_to_half;
  const char *round_half;
  /* Vector types of 4 lanes (NULL: none; vectorized loops stay scalar). */
  const char *float4_type;
  const char *half2_type;
  /* Math function names per dtype. f16 uses the f32 name followed by
   * round_half unless math_f16 names a function of its own. */
  const char *math_f16[DG_MATH_COUNT];
  const char *math_f32[DG_MATH_COUNT];
  const char *math_f64[DG_MATH_COUNT];
  /* Helpers named in the tables above and used by the emitter: floordiv,
   * floormod, min/max with NaN propagation, checked float->int conversion,
   * half conversion. Text emitted once before the kernels. */
  const char *preamble;
  /* Names of the helpers the emitter calls (suffixed _i32, _i64, _f32,
   * _f64): "dg_floordiv" etc. */
  const char *floordiv_fn, *floormod_fn, *min_fn, *max_fn;
  const char *float_to_int_fn; /* (double x, int64 lo, int64 hi) -> int64 */
  const char *inf_literal, *nan_literal;
  /* Heap allocations bigger than this many bytes (0: never on the heap). */
  int64_t max_stack_bytes;
  const char *malloc_fn, *free_fn;
  /* ---- device programs (codegen_emit_program) ---- */
  /* true: threads are emulated (blocks and threads are loops, the body is
   * split into phases at barriers); false: the hardware indices above. */
  bool emulate_threads;
  const char *launch_bounds_fmt; /* printf format of the thread count, or NULL */
  const char *align16;           /* qualifier that aligns an array to 16 bytes */
  const char *unroll_pragma;     /* line before an implicitly unrolled loop, or NULL */
  const char *dyn_shared_decl;   /* declares dg_dyn_smem (bytes), or NULL */
  /* Warp shuffles, printf formats of (mask, value, offset, width) and
   * (mask, value, lane, width); NULL where threads are emulated. */
  const char *shfl_down_fmt, *shfl_fmt;
  /* Vector types: by lanes for float and int32 arithmetic, by bytes for
   * raw copies (any dtype); NULL entries: not vectorized. */
  const char *vec_float[9];
  const char *vec_int[9];
  const char *vec_bits[17];
  const char *lane_field[8]; /* member names of the lanes: x y z w */
  /* ---- tensor cores (LW_WMMA) ---- */
  /* The line that declares the fragment API (emitted once, only in programs
   * with tensorized blocks) and its namespace; NULL: the target runs a
   * tensorized block's own body for each warp instead (C). */
  const char *wmma_include;
  const char *wmma_ns;
  const char *wmma_align; /* qualifier aligning a shared array to 32 bytes */
  /* ---- asynchronous copies (lowered cp_async stores, ASYNC_COMMIT/WAIT) ---- */
  /* The helper that copies N = 4, 8 or 16 bytes from global to shared
   * memory asynchronously, called as NAME<N>(&dst, &src); the statement
   * that commits the copies issued so far as a group; the printf format of
   * the statement that waits until at most %d groups are in flight. NULL:
   * the copies are plain stores and commits and waits nothing (C: emulated
   * threads run phase by phase, so a copy is complete before the barrier
   * that follows it). */
  const char *cp_async_fn;
  const char *cp_async_commit;
  const char *cp_async_wait_fmt;
} dg_lang;

/* The C target: runs on the CPU, every thread-bound loop a plain loop. */
extern const dg_lang codegen_lang_c;
/* CUDA C for sm_90 (lang_cuda.c): device programs only. */
extern const dg_lang codegen_lang_cuda;

/* A table by name ("c", "cuda"); NULL if unknown. */
const dg_lang *codegen_lang_find(const char *name);

typedef struct {
  bool reference;      /* float64 everywhere (see above) */
  /* Reference mode: emit every loop nest in its own order. By default a
   * nest of spatial loops over reduction loops down to one block with an
   * init runs its innermost spatial loop inside the reduction loops where
   * that walks memory more closely (see emit.c); each element's terms are
   * still summed in the same order, so the results are the same bit for
   * bit. */
  bool reference_in_order;
  /* Not reference mode: the reference's loop orders and OpenMP pragmas for
   * the kernel in its own dtypes (the same bits as its loops as written):
   * for the unscheduled kernel computed as a check's baseline
   * (codegen_emit_baseline). */
  bool fast_loops;
  /* NULL: the kernel's name, prefixed dg_ where it would clash with C
   * (`main` becomes dg_main). */
  const char *fn_name;
} codegen_opts;

/* The kernel as one function. Fails (NULL, st set) on an fn_name that is
 * not a C identifier or a kernel the emitter cannot express (a buffer used outside
 * the block that allocates it, a loop or buffer too large). Caller frees. */
char *codegen_emit(const dg_func *f, const dg_lang *lang,
                   const codegen_opts *o, dg_status *st);

/* A whole translation unit: the preamble, `kernel` as CODEGEN_KERNEL_FN and
 * `reference` in reference mode as CODEGEN_REFERENCE_FN; either may be NULL
 * (not both): a reference alone is what a measurement's expected outputs
 * come from. The two must have the same parameters. Caller frees. */
#define CODEGEN_KERNEL_FN "dg_kernel"
#define CODEGEN_REFERENCE_FN "dg_reference"
char *codegen_emit_source(const dg_func *kernel, const dg_func *reference,
                          const dg_lang *lang, dg_status *st);
/* The same for the unscheduled kernel f as a check's baseline: f in its own
 * dtypes as CODEGEN_KERNEL_FN with fast_loops and, with_reference, f in
 * reference mode as CODEGEN_REFERENCE_FN: a check's expected outputs and
 * the baseline's, from one compiler run. Caller frees. */
char *codegen_emit_baseline(const dg_func *f, bool with_reference, const dg_lang *lang,
                            dg_status *st);

/* Whether some block of f stores to parameter i (what makes it an output). */
bool codegen_param_written(const dg_func *f, int i);

/* ---- device programs (emit_device.c) ---------------------------------------- */

struct lw_program_s;
/* A lowered program (lower.h) as source text. CUDA: the preamble and one
 * `extern "C" __global__` function per launch, named as the launch
 * (lw_kernel.name), its parameters typed pointers in lw_kernel.params order,
 * __launch_bounds__ of its thread count. C: the preamble, one static
 * function per launch that emulates it (serial loops over the grid, the
 * body split at barriers into phases, each phase a loop over the threads;
 * per-thread local arrays indexed by the thread number; warp shuffles done
 * over the lanes in the same order of operations), and the host entry
 * `void CODEGEN_PROGRAM_FN(void **args)`, args[i] the program's parameter
 * i, which allocates the intermediate buffers and runs every launch in
 * order. Fails (NULL, st set) on what a target cannot express, e.g. a
 * barrier under a condition on the thread index. Caller frees. */
#define CODEGEN_PROGRAM_FN "dg_program"
char *codegen_emit_program(const struct lw_program_s *p, const dg_lang *lang, dg_status *st);
/* The C target's program and `reference` (may be NULL; the unscheduled
 * kernel, same parameters) as CODEGEN_REFERENCE_FN in float64 reference
 * mode, in one translation unit, as codegen_emit_source. Caller frees. */
char *codegen_emit_program_source(const struct lw_program_s *p, const dg_func *reference,
                                  dg_status *st);

#endif
