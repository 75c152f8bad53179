/* test_codegen_cuda_compact.c: what the CUDA emitter leaves out to spare
 * NVRTC work: floor division helpers where the index is provably
 * non-negative and the divisor a positive constant (plain / and %), and
 * cuda_fp16.h in programs without f16 values. The C emulation keeps the
 * helpers and is checked against the float64 reference; the CUDA source is
 * compiled by NVRTC where it is present.
 *
 * One kernel: B[i] = A[(30 - i) // 2 + 17] + A[i // 2] over 64 elements, 2
 * blocks of 32 threads; 30 - i may be negative, i may not.
 */
#include <stdlib.h>
#include <string.h>

#include "dragon/codegen.h"
#include "dragon/lower.h"
#include "dragon/rt.h"
#include "dragon/rt_cuda.h"
#include "dragon/sched.h"
#include "sched_support.h"
#include "test.h"

static const char shift_kernel[] =
    "kernel shift(A: f32[64], B: f32[64]):\n"
    "  block root:\n"
    "    for i in grid(64):\n"
    "      block B(vi: S(64) = i):\n"
    "        reads A[0:64]\n"
    "        writes B[vi]\n"
    "        B[vi] = A[(30 - vi) // 2 + 17] + A[vi // 2]\n";

static const char shift_trace[] =
    "[[[\"GetBlock\",[],[\"B\",\"shift\"],[\"b0\"]],"
    "[\"GetLoops\",[\"b0\"],[],[\"l1\"]],"
    "[\"Split\",[\"l1\",\"None\",32],[1,0],[\"l2\",\"l3\"]],"
    "[\"Bind\",[\"l2\"],[\"blockIdx.x\"],[]],[\"Bind\",[\"l3\"],[\"threadIdx.x\"],[]]],[]]";

static lw_program *lower_shift(dg_func **ref, dg_status *st) {
  *ref = ir_parse(shift_kernel, "shift", st);
  if (!*ref) return NULL;
  sched_trace *t = sched_trace_from_json(shift_trace, st);
  if (!t) return NULL;
  sched *s = sched_new(*ref, 0);
  bool ok = sched_replay(s, t, false, false, st);
  sched_trace_free(t);
  lw_program *p = ok ? lower_program(sched_func(s), NULL, st) : NULL;
  sched_free(s);
  return p;
}

static int count(const char *s, const char *what) {
  int n = 0;
  for (const char *p = strstr(s, what); p; p = strstr(p + 1, what)) n++;
  return n;
}

DG_TEST(codegen_cuda_compact_floor_division) {
  dg_status st;
  dg_func *ref = NULL;
  lw_program *p = lower_shift(&ref, &st);
  if (!p) dg_test_fail(__FILE__, __LINE__, "lower: %s", st.msg);
  CHECK(p != NULL);
  char *cu = codegen_emit_program(p, &codegen_lang_cuda, &st);
  CHECK(cu != NULL);
  const char *body = strstr(cu, "__global__");
  CHECK(body != NULL);
  /* 30 - i may be negative: the floor helper stays; i // 2 is plain */
  CHECK_EQ(count(body, "dg_floordiv_i32("), 1);
  CHECK_EQ(count(body, "dg_floormod_i32("), 0);
  CHECK(strstr(body, " / 2)") != NULL);
  /* f32 only: the f16 header is left out */
  CHECK(strncmp(cu, "#define DG_NO_F16\n", 18) == 0);
  CHECK_EQ(count(cu, "cuda_fp16.h"), 1); /* the guarded include, skipped */
  dg_status probe;
  if (rt_nvrtc_available(&probe)) {
    rt_cubin bin = {0};
    bool ok = rt_nvrtc_compile(cu, "shift", "sm_90", &bin, &st);
    if (!ok) fprintf(stderr, "%s\n--- source\n%s\n", bin.log ? bin.log : "", cu);
    rt_cubin_free(&bin);
    CHECK(ok);
  } else {
    dg_test_skip("NVRTC not available: %s", probe.msg);
  }
  free(cu);
  /* the C emulation (floor helpers throughout) against the reference */
  char *src = codegen_emit_program_source(p, ref, &st);
  CHECK(src != NULL);
  CHECK(strstr(src, "DG_NO_F16") == NULL);
  CHECK(src && ts_source_matches(ref, src, rt_data_dist_for(ref)));
  free(src);
  lower_program_free(p);
  ir_func_free(ref);
}

/* A program with f16 values keeps the header. */
static const char half_kernel[] =
    "kernel halve(A: f16[64], B: f16[64]):\n"
    "  block root:\n"
    "    for i in grid(64):\n"
    "      block B(vi: S(64) = i):\n"
    "        reads A[vi]\n"
    "        writes B[vi]\n"
    "        B[vi] = A[vi] * 0.5f16\n";

static const char half_trace[] =
    "[[[\"GetBlock\",[],[\"B\",\"halve\"],[\"b0\"]],"
    "[\"GetLoops\",[\"b0\"],[],[\"l1\"]],"
    "[\"Split\",[\"l1\",\"None\",32],[1,0],[\"l2\",\"l3\"]],"
    "[\"Bind\",[\"l2\"],[\"blockIdx.x\"],[]],[\"Bind\",[\"l3\"],[\"threadIdx.x\"],[]]],[]]";

DG_TEST(codegen_cuda_compact_keeps_f16) {
  dg_status st;
  dg_func *f = ir_parse(half_kernel, "halve", &st);
  if (!f) dg_test_fail(__FILE__, __LINE__, "parse: %s", st.msg);
  CHECK(f != NULL);
  sched_trace *t = sched_trace_from_json(half_trace, &st);
  CHECK(t != NULL);
  sched *s = sched_new(f, 0);
  CHECK(sched_replay(s, t, false, false, &st));
  sched_trace_free(t);
  lw_program *p = lower_program(sched_func(s), NULL, &st);
  sched_free(s);
  ir_func_free(f);
  CHECK(p != NULL);
  char *cu = codegen_emit_program(p, &codegen_lang_cuda, &st);
  CHECK(cu != NULL);
  CHECK(strncmp(cu, "#ifndef DG_NO_F16\n#include <cuda_fp16.h>", 40) == 0);
  dg_status probe;
  if (rt_nvrtc_available(&probe)) {
    rt_cubin bin = {0};
    bool ok = rt_nvrtc_compile(cu, "halve", "sm_90", &bin, &st);
    if (!ok) fprintf(stderr, "%s\n--- source\n%s\n", bin.log ? bin.log : "", cu);
    rt_cubin_free(&bin);
    CHECK(ok);
  } else {
    dg_test_skip("NVRTC not available: %s", probe.msg);
  }
  free(cu);
  lower_program_free(p);
}
