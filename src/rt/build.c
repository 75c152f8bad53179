/* build.c: the one road from a scheduled kernel to compiled code
 * (rt_program_build, rt_cuda.h): ir_verify, lowering to device launches,
 * VerifyGPUCode's limits, the target's source, and NVRTC or the system C
 * compiler. Every caller that turns a scheduled kernel into a module goes
 * through here, so the checks, the architecture and the order of the
 * stages are decided once; a failure names its stage and keeps the stage's
 * message as it came.
 *
 * The limits are checked by the lowering itself, launch by launch as soon
 * as a launch's buffers are sized (lower/program.c), so that a launch past
 * them never reaches vthread expansion or unrolling. When the lowering
 * fails, the build tells the two stages apart by lowering once more
 * without the limits (the rolled check, lower_check): if that succeeds,
 * the limits were the reason. Only a failed build pays for it, and not
 * one with a vthread past a table's vthread limit, which is a limits
 * failure on sight (sm_90's table sets none, as TVM expands virtual
 * threads before it checks; the lowering caps the expansion's size
 * instead, and a kernel past that cap fails at the lowering stage).
 *
 * It does not run anything, and keeps no state but the default
 * architecture's resolution, which rt_cuda_device_info caches.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dragon/codegen.h"
#include "dragon/lower.h"
#include "dragon/rt_cuda.h"

/* Where no device is seen and none is asked for: the H200 that measures. */
static const char default_arch[] = "sm_90";

const char *rt_build_stage_name(rt_build_stage s) {
  static const char *const names[] = {
#define X(id, name) name,
      RT_BUILD_STAGE_LIST(X)
#undef X
  };
  _Static_assert(DG_ARRAY_LEN(names) == RT_BUILD_STAGE_COUNT, "one name per stage");
  DG_ASSERT((unsigned)s < RT_BUILD_STAGE_COUNT);
  return names[s];
}

void rt_build_arch(char *out, size_t n) {
  rt_cuda_device d;
  dg_status st;
  if (rt_cuda_device_info(&d, &st)) snprintf(out, n, "sm_%d%d", d.cc_major, d.cc_minor);
  else snprintf(out, n, "%s", default_arch);
}

const lw_limits *rt_build_limits_for(const char *arch) {
  (void)arch; /* one table so far: see rt_cuda.h */
  return &lower_limits_sm90;
}

/* The widest vthread loop of a statement (1: none). */
static int64_t widest_vthread(const dg_stmt *s) {
  if (!s) return 1;
  int64_t w = 1, x;
  switch (s->kind) {
  case DG_STMT_FOR:
    if (s->loop_kind == DG_LOOP_THREAD &&
        (s->tag == DG_TAG_VTHREAD_X || s->tag == DG_TAG_VTHREAD_Y || s->tag == DG_TAG_VTHREAD_Z))
      w = s->extent;
    x = widest_vthread(s->body);
    return x > w ? x : w;
  case DG_STMT_SEQ:
    for (int i = 0; i < s->n; i++)
      if ((x = widest_vthread(s->stmts[i])) > w) w = x;
    return w;
  case DG_STMT_BLOCK:
    w = widest_vthread(s->block->init);
    x = widest_vthread(s->block->body);
    return x > w ? x : w;
  case DG_STMT_IF:
    w = widest_vthread(s->then_s);
    x = widest_vthread(s->else_s);
    return x > w ? x : w;
  case DG_STMT_STORE:
    return 1;
  }
  return w;
}

/* The lowering under `lim` failed: was it the limits? */
static bool past_limits_only(const dg_func *f, const lw_limits *lim) {
  if (widest_vthread(f->body) > lim->max_vthread) return true;
  lower_opts lo = {.skip_verify = true};
  dg_status st;
  return lower_check(f, &lo, &st);
}

static bool stop(rt_build *out, rt_build_stage stage) {
  out->stage = stage;
  return false;
}

static bool build_lowered(const dg_func *f, const rt_build_opts *o, const lw_limits *lim,
                          rt_build *out, dg_status *st) {
  lower_opts lo = {.limits = lim, .skip_verify = o->no_limits};
  out->prog = lower_program(f, &lo, st);
  /* a program that lowered has met the limits: lower_program verifies the
   * whole program last (lower_verify) */
  if (!out->prog)
    return stop(out, !o->no_limits && past_limits_only(f, lim) ? RT_BUILD_LIMITS : RT_BUILD_LOWER);
  return true;
}

static bool compile_c(rt_build *out, const char *kernel_fn, bool with_ref, dg_status *st) {
  const char *names[2] = {kernel_fn, CODEGEN_REFERENCE_FN};
  rt_cpu_kernel *k[2] = {NULL, NULL};
  if (!rt_cpu_compile_many(out->source, names, with_ref ? 2 : 1, k, st)) return false;
  out->fn = k[0];
  out->ref_fn = k[1];
  return true;
}

bool rt_program_build(const dg_func *f, const rt_build_opts *o, rt_build *out, dg_status *st) {
  memset(out, 0, sizeof *out);
  dg_status_ok(st);
  out->target = o->target;
  bool cuda = o->target == RT_BUILD_CUDA;
  /* a device is asked for its architecture only when one is compiled for */
  if (o->arch) snprintf(out->arch, sizeof out->arch, "%s", o->arch);
  else if (cuda && o->compile) rt_build_arch(out->arch, sizeof out->arch);
  else snprintf(out->arch, sizeof out->arch, "%s", default_arch);
  const lw_limits *lim = o->limits ? o->limits : rt_build_limits_for(out->arch);

  double t0 = dg_now();
  bool ok = ir_verify(f, st) || stop(out, RT_BUILD_VERIFY);
  if (ok && o->target != RT_BUILD_C) ok = build_lowered(f, o, lim, out, st);
  double t1 = dg_now();
  out->t_lower = t1 - t0;
  if (!ok) return false;

  switch (o->target) {
  case RT_BUILD_C:
    out->source = codegen_emit_source(f, o->reference, &codegen_lang_c, st);
    break;
  case RT_BUILD_C_EMULATION:
    out->source = codegen_emit_program_source(out->prog, o->reference, st);
    break;
  case RT_BUILD_CUDA:
    out->source = codegen_emit_program(out->prog, &codegen_lang_cuda, st);
    break;
  }
  double t2 = dg_now();
  out->t_codegen = t2 - t1;
  if (!out->source) return stop(out, RT_BUILD_CODEGEN);
  out->stage = RT_BUILD_DONE;
  return o->compile ? rt_build_compile(out, o, st) : true;
}

bool rt_build_compile(rt_build *out, const rt_build_opts *o, dg_status *st) {
  dg_status_ok(st);
  double t0 = dg_now();
  bool ok;
  if (o->target == RT_BUILD_CUDA)
    ok = rt_nvrtc_compile_within(out->source, o->name ? o->name : "dragon", out->arch, o->compile_limit_s,
                                 &out->bin, st);
  else
    ok = compile_c(out, o->target == RT_BUILD_C ? CODEGEN_KERNEL_FN : CODEGEN_PROGRAM_FN,
                   o->reference != NULL, st);
  out->t_compile = dg_now() - t0;
  if (!ok) return stop(out, RT_BUILD_COMPILE);
  out->stage = RT_BUILD_DONE;
  return true;
}

void rt_build_free(rt_build *b) {
  if (!b) return;
  lower_program_free(b->prog);
  free(b->source);
  rt_cubin_free(&b->bin);
  rt_cpu_free(b->fn);
  rt_cpu_free(b->ref_fn);
  memset(b, 0, sizeof *b);
}
