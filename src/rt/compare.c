/* compare.c: the numeric check of a kernel against a reference kernel on
 * the CPU: the same inputs drawn from a seed, outputs poisoned, the
 * reference in float64, the kernel in its own dtypes, compared with the
 * per-dtype tolerances of check.c. Compiled C (one translation unit with
 * both) or, for small kernels and no compiler, the interpreter. */
#include <stdlib.h>
#include <string.h>

#include "dragon/codegen.h"
#include "dragon/rt.h"
#include "dragon/rt_cuda.h"

/* The unscheduled kernel ref as a check's baseline (k[0]) and, with_ref,
 * its float64 reference (k[1]), compiled as C in one run. */
static bool baseline_build(const dg_func *ref, bool with_ref, rt_cpu_kernel *k[2], dg_status *st) {
  k[0] = k[1] = NULL;
  if (!ir_verify(ref, st)) return false;
  char *src = codegen_emit_baseline(ref, with_ref, &codegen_lang_c, st);
  if (!src) return false;
  static const char *const names[2] = {CODEGEN_KERNEL_FN, CODEGEN_REFERENCE_FN};
  bool ok = rt_cpu_compile_many(src, names, with_ref ? 2 : 1, k, st);
  free(src);
  return ok;
}

/* The unscheduled kernel in its own dtypes on ts's inputs, into every
 * output's baseline: compiled C, else the interpreter. */
static bool baseline_run(const dg_func *ref, rt_tensors *ts, bool compiled, dg_status *st) {
  void **args = dg_calloc((size_t)(ts->n ? ts->n : 1), sizeof *args);
  bool ok = rt_tensors_base_args(ts, args, st);
  if (ok && compiled) {
    rt_cpu_kernel *k[2];
    ok = baseline_build(ref, false, k, st);
    if (ok) rt_cpu_call(k[0], args);
    rt_cpu_free(k[0]);
  } else if (ok) {
    ok = rt_interp_run(ref, args, false, st);
  }
  free(args);
  return ok;
}

bool rt_reference_run(const dg_func *ref, rt_tensors *ts, double secs[2], dg_status *st) {
  void **args = dg_calloc((size_t)(ts->n ? ts->n : 1), sizeof *args);
  rt_cpu_kernel *k[2] = {NULL, NULL};
  double t0 = dg_now();
  bool ok = rt_tensors_base_args(ts, args, st) && baseline_build(ref, true, k, st);
  double t1 = dg_now();
  if (ok) {
    rt_cpu_call(k[1], ts->ref_args);
    rt_cpu_call(k[0], args);
  }
  if (secs) secs[0] = t1 - t0, secs[1] = dg_now() - t1;
  rt_cpu_free(k[0]);
  rt_cpu_free(k[1]);
  free(args);
  return ok;
}

bool rt_check_outputs_for(const dg_func *ref, rt_tensors *ts, bool compiled, rt_check *out,
                          dg_status *st) {
  dg_status_ok(st);
  int64_t K = rt_check_reduce_len(ref);
  rt_check_outputs(ts, K, out);
  bool all_based = true;
  for (int i = 0; i < ts->n; i++)
    if (ts->t[i].is_output && !ts->t[i].base) all_based = false;
  if (out->pass || all_based) return true;
  if (!baseline_run(ref, ts, compiled, st)) return false;
  rt_check_outputs(ts, K, out);
  return true;
}

bool rt_compare_cpu(const dg_func *ref, const dg_func *f, uint64_t seed, bool compiled,
                    rt_check *out, double *kernel_seconds, dg_status *st) {
  dg_status_ok(st);
  rt_tensors ts;
  if (!rt_tensors_init(&ts, ref, st)) return false;
  rt_data_fill(&ts, seed, rt_data_dist_for(ref));
  rt_data_poison(&ts);
  bool ok = false;
  double t = 0;
  if (compiled) {
    /* the kernel as plain C with its float64 reference in one unit */
    rt_build_opts bo = {RT_BUILD_C, NULL, NULL, false, 0, true, ref, "kernel"};
    rt_build b;
    if (rt_program_build(f, &bo, &b, st)) {
      rt_cpu_call(b.ref_fn, ts.ref_args);
      double t0 = dg_now();
      rt_cpu_call(b.fn, ts.args);
      t = dg_now() - t0;
      ok = true;
    }
    rt_build_free(&b);
  } else {
    double t0 = dg_now();
    ok = rt_interp_run(ref, ts.ref_args, true, st);
    t0 = dg_now();
    ok = ok && rt_interp_run(f, ts.args, false, st);
    t = dg_now() - t0;
  }
  if (ok) ok = rt_check_outputs_for(ref, &ts, compiled, out, st);
  if (kernel_seconds) *kernel_seconds = t;
  rt_tensors_free(&ts);
  return ok;
}

int64_t rt_kernel_iterations(const dg_func *f) {
  /* the sum over blocks of the product of the loop extents above them */
  int64_t total = 0;
  struct frame {
    const dg_stmt *s;
    int64_t prod;
  } stack[512];
  int sp = 0;
  stack[sp++] = (struct frame){f->body, 1};
  while (sp > 0) {
    struct frame fr = stack[--sp];
    const dg_stmt *s = fr.s;
    if (!s) continue;
    switch (s->kind) {
      case DG_STMT_FOR:
        if (sp < 512) stack[sp++] = (struct frame){s->body, fr.prod * s->extent};
        break;
      case DG_STMT_SEQ:
        for (int i = 0; i < s->n && sp < 512; i++) stack[sp++] = (struct frame){s->stmts[i], fr.prod};
        break;
      case DG_STMT_IF:
        if (sp < 511) {
          stack[sp++] = (struct frame){s->then_s, fr.prod};
          stack[sp++] = (struct frame){s->else_s, fr.prod};
        }
        break;
      case DG_STMT_BLOCK:
        if (s->block->n_iters > 0 || s->block->body->kind == DG_STMT_STORE) total += fr.prod;
        if (sp < 511) {
          stack[sp++] = (struct frame){s->block->body, fr.prod};
          stack[sp++] = (struct frame){s->block->init, fr.prod};
        }
        break;
      case DG_STMT_STORE: break;
    }
  }
  return total;
}
