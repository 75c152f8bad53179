/* rt.h: running kernels and checking their numbers.
 *
 * CPU runner (cpu.c): C source (codegen/) compiled by the system C compiler
 * into a shared object, loaded with dlopen, called through `void f(void **)`.
 * Tensors (data.c): one per kernel parameter, in the kernel's storage and
 * in the float64 reference's storage, inputs drawn from a seed, outputs
 * poisoned before a run. Check (check.c): a kernel's outputs against the
 * reference's, with per-dtype tolerances. Interpreter (interp.c): the IR run
 * directly, no compiler needed, for small kernels and tests.
 *
 * Storage: dense, row-major; bool as uint8, f16 as IEEE binary16 bits
 * (uint16); in the reference every float buffer is double, integers keep
 * their type. args[i] is parameter i's data.
 */
#ifndef DRAGON_RT_H
#define DRAGON_RT_H

#include "dragon/ir.h"

/* ---- CPU runner (cpu.c) -------------------------------------------------- */

typedef struct rt_cpu_kernel rt_cpu_kernel;

/* Compiles src with $CC (default cc) -O2 -shared -fPIC -march=native
 * -fno-strict-aliasing -ffp-contract=off $DRAGON_CFLAGS and loads fn_name
 * from it. On failure st carries the compiler's or the loader's message. */
bool rt_cpu_compile(const char *src, const char *fn_name, rt_cpu_kernel **out,
                    dg_status *st);
/* The same for n functions of one source, compiled once: out[i] is
 * fn_names[i]. All or nothing. */
bool rt_cpu_compile_many(const char *src, const char *const *fn_names, int n,
                         rt_cpu_kernel **out, dg_status *st);
void rt_cpu_call(const rt_cpu_kernel *k, void **args);
/* Frees one kernel; the shared object is unloaded with the last of its
 * kernels. NULL is allowed. */
void rt_cpu_free(rt_cpu_kernel *k);

/* ---- tensors and data (data.c) ------------------------------------------- */

typedef enum {
  RT_DIST_UNIFORM,  /* floats uniform in [-1, 1] */
  RT_DIST_POSITIVE, /* floats uniform in [0.5, 2] (log, sqrt, rsqrt, pow) */
} rt_dist;

typedef struct {
  const dg_buffer *buf; /* the parameter */
  int64_t numel;
  bool is_output;       /* some block of the kernel stores to it */
  void *data;           /* (numel) in the kernel's storage */
  void *ref;            /* (numel) in the reference's storage */
  void *base;           /* (numel) outputs: the unscheduled kernel's own
                           result on the same inputs, in the kernel's
                           storage (rt_tensors_base_args); NULL until then */
} rt_tensor;

typedef struct {
  rt_tensor *t; /* (n) in parameter order */
  int n;
  void **args;     /* (n) t[i].data: what the kernel is called with */
  void **ref_args; /* (n) t[i].ref: what the reference is called with */
} rt_tensors;

/* Allocates a tensor per parameter of f (not filled). Fails, rather than
 * aborting, if the memory is not there. */
bool rt_tensors_init(rt_tensors *ts, const dg_func *f, dg_status *st);
void rt_tensors_free(rt_tensors *ts);

/* Inputs from the seed (the same values in data and ref; each parameter
 * draws from its own stream, so its values do not depend on the others):
 * floats as rt_dist says, rounded to the dtype (so f16 and f32 inputs are
 * exact in the reference), integers in [0, 7], bools 0/1. Outputs poisoned,
 * their baselines dropped (they were computed from other inputs). */
void rt_data_fill(rt_tensors *ts, uint64_t seed, rt_dist dist);
/* Outputs of both the kernel and the reference set to NaN (floats) or to a
 * 0xA5 byte pattern (integers, bools), so an unwritten element fails. */
void rt_data_poison(rt_tensors *ts);
/* RT_DIST_POSITIVE if the kernel calls log, sqrt, rsqrt or pow, else
 * RT_DIST_UNIFORM. */
rt_dist rt_data_dist_for(const dg_func *f);
const char *rt_dist_name(rt_dist d);

/* Gives every output its baseline array (t->base, poisoned as outputs
 * are; kept if it has one) and writes into args (ts->n) what the
 * unscheduled kernel is called with to fill them: the inputs' data, the
 * outputs' base. */
bool rt_tensors_base_args(rt_tensors *ts, void **args, dg_status *st);

/* Element i as a double (ref: from the reference's storage). */
double rt_data_get(const rt_tensor *t, int64_t i, bool ref);
/* Sets element i in both storages (rounded to the dtype in data). */
void rt_data_set(rt_tensor *t, int64_t i, double v);

/* Checksum of the kernel's outputs: the sum of all their values as double
 * and a hash of their bytes. */
typedef struct {
  double sum;
  uint64_t hash;
} rt_checksum;
rt_checksum rt_data_checksum(const rt_tensors *ts);

/* ---- numeric check (check.c) --------------------------------------------- */

/* An element passes if it is not NaN and equals the reference (so equal
 * infinities pass) or both are finite and
 *   |out - ref| <= atol * sqrt(K) * scale + rtol * |ref|,
 * scale the largest |ref| of the tensor (1 if all are 0), K the reduction
 * length. Integers and bools must be equal. */
typedef struct {
  double atol, rtol;
} rt_tol;
rt_tol rt_check_tolerance(dg_dtype t);

/* The longest reduction of a kernel: the largest product of a block's reduce
 * iteration extents (1 if none). */
int64_t rt_check_reduce_len(const dg_func *f);

typedef struct {
  int64_t K;
  double max_abs, max_rel; /* rel: |out-ref| / max(|ref|, 1e-3 * scale) */
  int64_t n_checked, n_bad;
  char first_bad[192];     /* "C[1, 2]: got nan, want 0.5", or "" */
  bool pass;
} rt_check;

/* Compares every output's data with its ref. Where an output has its
 * baseline (t->base), an element out of tolerance still passes if its error
 * is within a small factor of the baseline's error at that element: a
 * schedule is not blamed for the kernel's own ill-conditioning (a layernorm
 * over two values whose difference cancels). */
void rt_check_outputs(const rt_tensors *ts, int64_t K, rt_check *out);

/* ---- interpreter (interp.c) ---------------------------------------------- */

/* Runs f on args (the layout above). reference: every float in double,
 * storage included (ref_args); otherwise each dtype rounded as the compiled
 * kernel rounds it, bit for bit. Out-of-bounds accesses, iteration variables
 * outside their domain and division by zero are errors naming the block. */
bool rt_interp_run(const dg_func *f, void **args, bool reference,
                   dg_status *st);

/* ---- comparison against a reference (compare.c) ---------------------------- */

/* Runs `ref` (float64 reference mode) and `f` (its own dtypes) on the same
 * inputs drawn from `seed` (outputs poisoned first) and compares their
 * outputs into *out. The two kernels must have the same parameters.
 * compiled: through generated C and the system compiler; else through the
 * interpreter. *kernel_seconds (may be NULL): one run of f. False with st
 * set if something could not be built or run (not if the numbers differ). */
bool rt_compare_cpu(const dg_func *ref, const dg_func *f, uint64_t seed, bool compiled,
                    rt_check *out, double *kernel_seconds, dg_status *st);
/* The expected outputs of a check on ts's inputs, in one compiler run:
 * `ref`'s float64 reference into the refs, and the unscheduled kernel in
 * its own dtypes into every output's baseline (t->base). secs (may be
 * NULL): the seconds of the build and of the two runs. */
bool rt_reference_run(const dg_func *ref, rt_tensors *ts, double secs[2], dg_status *st);
/* rt_check_outputs of ts (its kernel's outputs and ref's reference); if it
 * fails where an output has no baseline yet, the unscheduled `ref` is run
 * in its own dtypes on the same inputs (compiled C, else the interpreter)
 * and the outputs checked again with it: every check of a kernel passes
 * or fails the same way, whatever path ran it. False with st set only if
 * the baseline could not be built or run. */
bool rt_check_outputs_for(const dg_func *ref, rt_tensors *ts, bool compiled, rt_check *out,
                          dg_status *st);
/* The work of a kernel in block executions: the sum over blocks of the
 * product of the extents of the loops above them. */
int64_t rt_kernel_iterations(const dg_func *f);

/* ---- the GPU's program, emulated (program.c) -------------------------------- */

/* Lowers f to device kernels (checking the GPU's limits), emits the C
 * target's emulation of them (blocks and threads as loops, phases split at
 * barriers) with `ref`'s float64 reference in one translation unit,
 * compiles and runs both on seeded inputs, compares into *out. False with
 * st set if f does not lower or something cannot be built. */
bool rt_program_check_c(const dg_func *ref, const dg_func *f, uint64_t seed, rt_check *out,
                        dg_status *st);

#endif
