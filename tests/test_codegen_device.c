/* test_codegen_device.c: scheduled kernels lowered to device programs, run
 * through the C emulation of blocks and threads against the float64
 * reference, and their CUDA source compiled by NVRTC for sm_90 (the test
 * is counted skipped where NVRTC is absent).
 *
 * Schedules (TVM trace JSON): a 256^3 GEMM bound to blockIdx/threadIdx; a
 * tiled GMM/0 in MetaSchedule's shape (vthread, shared caches with a
 * cooperative vectorized fetch, a local write cache, auto-unroll,
 * decomposed reduction); a softmax with cross-thread reductions over one
 * warp and over four; an elementwise kernel with a vectorized store.
 */
#include <stdlib.h>

#include "dragon/codegen.h"
#include "dragon/lower.h"
#include "dragon/rt.h"
#include "dragon/rt_cuda.h"
#include "dragon/sched.h"
#include "dragon/wl.h"
#include "test.h"

static dg_func *apply_trace(const dg_func *f, const char *json, dg_status *st) {
  sched_trace *t = sched_trace_from_json(json, st);
  if (!t) return NULL;
  sched *s = sched_new(f, 0);
  bool ok = sched_replay(s, t, false, false, st);
  sched_trace_free(t);
  dg_func *out = ok ? ir_func_clone(sched_func(s)) : NULL;
  sched_free(s);
  return out;
}

/* Runs the program's C emulation and the reference on the same inputs. */
static bool run_emulated(const dg_func *ref, const lw_program *p, rt_check *chk, dg_status *st) {
  char *src = codegen_emit_program_source(p, ref, st);
  if (!src) return false;
  static const char *const names[2] = {CODEGEN_PROGRAM_FN, CODEGEN_REFERENCE_FN};
  rt_cpu_kernel *k[2] = {NULL, NULL};
  bool ok = rt_cpu_compile_many(src, names, 2, k, st);
  free(src);
  if (!ok) return false;
  rt_tensors ts;
  ok = rt_tensors_init(&ts, ref, st);
  if (ok) {
    rt_data_fill(&ts, 7, rt_data_dist_for(ref));
    rt_data_poison(&ts);
    rt_cpu_call(k[1], ts.ref_args);
    rt_cpu_call(k[0], ts.args);
    rt_check_outputs(&ts, rt_check_reduce_len(ref), chk);
    rt_tensors_free(&ts);
  }
  rt_cpu_free(k[0]);
  rt_cpu_free(k[1]);
  return ok;
}

/* 1: compiled; 0: NVRTC rejected it (message in st); -1: no NVRTC here. */
static int nvrtc_check(const lw_program *p, dg_status *st) {
  dg_status probe;
  if (!rt_nvrtc_available(&probe)) {
    dg_test_skip("NVRTC not available: %s", probe.msg);
    return -1;
  }
  char *src = codegen_emit_program(p, &codegen_lang_cuda, st);
  if (!src) return 0;
  rt_cubin bin = {0};
  bool ok = rt_nvrtc_compile(src, p->name, "sm_90", &bin, st);
  if (!ok) fprintf(stderr, "%s\n--- source\n%s\n", bin.log ? bin.log : "", src);
  rt_cubin_free(&bin);
  free(src);
  return ok ? 1 : 0;
}

/* Schedules, lowers and checks one kernel both ways; returns the program
 * (caller frees) for further checks, NULL after a failed CHECK. */
static lw_program *full_check(const dg_func *f, const char *trace) {
  dg_status st;
  dg_func *g = apply_trace(f, trace, &st);
  CHECKR(g != NULL, NULL);
  CHECKR(ir_verify(g, &st), NULL);
  lw_program *p = lower_program(g, NULL, &st);
  ir_func_free(g);
  if (!p) dg_test_fail(__FILE__, __LINE__, "lower: %s", st.msg);
  CHECKR(p != NULL, NULL);
  rt_check chk;
  bool ran = run_emulated(f, p, &chk, &st);
  if (!ran) dg_test_fail(__FILE__, __LINE__, "run: %s", st.msg);
  if (ran && !chk.pass) dg_test_fail(__FILE__, __LINE__, "wrong numbers: %s", chk.first_bad);
  int nv = nvrtc_check(p, &st);
  if (nv == 0) dg_test_fail(__FILE__, __LINE__, "nvrtc: %s", st.msg);
  if (!ran || !chk.pass || nv == 0) {
    lower_program_free(p);
    return NULL;
  }
  CHECKR(chk.n_checked > 0, NULL);
  return p;
}

static const char gemm_bind_trace[] =
    "[[[\"GetBlock\",[],[\"C\",\"main\"],[\"b0\"]],"
    "[\"GetLoops\",[\"b0\"],[],[\"l1\",\"l2\",\"l3\"]],"
    "[\"Split\",[\"l1\",16,16],[1,0],[\"l4\",\"l5\"]],"
    "[\"Split\",[\"l2\",16,16],[1,0],[\"l6\",\"l7\"]],"
    "[\"Reorder\",[\"l4\",\"l6\",\"l5\",\"l7\"],[],[]],"
    "[\"Bind\",[\"l4\"],[\"blockIdx.y\"],[]],"
    "[\"Bind\",[\"l6\"],[\"blockIdx.x\"],[]],"
    "[\"Bind\",[\"l5\"],[\"threadIdx.y\"],[]],"
    "[\"Bind\",[\"l7\"],[\"threadIdx.x\"],[]]],[]]";

DG_TEST(codegen_device_gemm_bind) {
  dg_status st;
  dg_func *f = wl_build("gemm:m=256,n=256,k=256", &st);
  CHECK(f != NULL);
  lw_program *p = full_check(f, gemm_bind_trace);
  ir_func_free(f);
  CHECK(p != NULL);
  CHECK_EQ(p->n_kernels, 1);
  const lw_kernel *k = &p->kernels[0];
  CHECK_EQ(k->grid[0], 16);
  CHECK_EQ(k->grid[1], 16);
  CHECK_EQ(k->block[0], 16);
  CHECK_EQ(k->block[1], 16);
  char *cu = codegen_emit_program(p, &codegen_lang_cuda, &st);
  CHECK(cu != NULL);
  CHECK(strstr(cu, "extern \"C\" __global__ void __launch_bounds__(256) main_kernel0(") != NULL);
  CHECK(strstr(cu, "const float *__restrict__ A") != NULL);
  CHECK(strstr(cu, "__syncthreads") == NULL);
  free(cu);
  lower_program_free(p);
}

/* GMM/0 (1x128x128x128) tiled as MetaSchedule's MultiLevelTiling does it. */
static const char gmm_trace[] =
    "[[[\"GetBlock\",[],[\"Z\",\"main\"],[\"b0\"]],"
    "[\"GetBlock\",[],[\"root\",\"main\"],[\"b1\"]],"
    "[\"GetLoops\",[\"b0\"],[],[\"l2\",\"l3\",\"l4\",\"l5\"]],"
    "[\"Split\",[\"l2\",1,1,1,1,1],[1,0],[\"l6\",\"l7\",\"l8\",\"l9\",\"l10\"]],"
    "[\"Split\",[\"l3\",4,2,8,1,2],[1,0],[\"l11\",\"l12\",\"l13\",\"l14\",\"l15\"]],"
    "[\"Split\",[\"l4\",4,1,16,2,1],[1,0],[\"l16\",\"l17\",\"l18\",\"l19\",\"l20\"]],"
    "[\"Split\",[\"l5\",16,2,4],[1,0],[\"l21\",\"l22\",\"l23\"]],"
    "[\"Reorder\",[\"l6\",\"l11\",\"l16\",\"l7\",\"l12\",\"l17\",\"l8\",\"l13\",\"l18\",\"l21\","
    "\"l22\",\"l9\",\"l14\",\"l19\",\"l23\",\"l10\",\"l15\",\"l20\"],[],[]],"
    "[\"Fuse\",[\"l6\",\"l11\",\"l16\"],[1],[\"l24\"]],[\"Bind\",[\"l24\"],[\"blockIdx.x\"],[]],"
    "[\"Fuse\",[\"l7\",\"l12\",\"l17\"],[1],[\"l25\"]],[\"Bind\",[\"l25\"],[\"vthread.x\"],[]],"
    "[\"Fuse\",[\"l8\",\"l13\",\"l18\"],[1],[\"l26\"]],[\"Bind\",[\"l26\"],[\"threadIdx.x\"],[]],"
    "[\"Annotate\",[\"b0\",32],[\"meta_schedule.thread_extent_low_inclusive\"],[]],"
    "[\"Annotate\",[\"b0\",1024],[\"meta_schedule.thread_extent_high_inclusive\"],[]],"
    "[\"CacheWrite\",[\"b0\",[]],[0,\"local\"],[\"b27\"]],"
    "[\"ReverseComputeAt\",[\"b27\",\"l26\"],[1,-1],[]],"
    "[\"CacheRead\",[\"b0\",[\"b0\"]],[0,\"shared\"],[\"b28\"]],"
    "[\"ComputeAt\",[\"b28\",\"l21\"],[1,-1],[]],"
    "[\"GetLoops\",[\"b28\"],[],[\"l29\",\"l30\",\"l31\",\"l32\",\"l33\",\"l34\",\"l35\"]],"
    "[\"Fuse\",[\"l33\",\"l34\",\"l35\"],[1],[\"l36\"]],"
    "[\"Split\",[\"l36\",\"None\",128,2],[1,0],[\"l37\",\"l38\",\"l39\"]],"
    "[\"Vectorize\",[\"l39\"],[],[]],[\"Bind\",[\"l38\"],[\"threadIdx.x\"],[]],"
    "[\"CacheRead\",[\"b0\",[\"b0\"]],[1,\"shared\"],[\"b40\"]],"
    "[\"ComputeAt\",[\"b40\",\"l21\"],[1,-1],[]],"
    "[\"GetLoops\",[\"b40\"],[],[\"l41\",\"l42\",\"l43\",\"l44\",\"l45\",\"l46\",\"l47\"]],"
    "[\"Fuse\",[\"l45\",\"l46\",\"l47\"],[1],[\"l48\"]],"
    "[\"Split\",[\"l48\",\"None\",128,2],[1,0],[\"l49\",\"l50\",\"l51\"]],"
    "[\"Vectorize\",[\"l51\"],[],[]],[\"Bind\",[\"l50\"],[\"threadIdx.x\"],[]],"
    "[\"Annotate\",[\"l24\",64],[\"pragma_auto_unroll_max_step\"],[]],"
    "[\"Annotate\",[\"l24\",1],[\"pragma_unroll_explicit\"],[]],"
    "[\"DecomposeReduction\",[\"b0\",\"l21\"],[],[\"b52\"]]],[]]";

static int count(const char *s, const char *sub) {
  int n = 0;
  for (const char *p = strstr(s, sub); p; p = strstr(p + 1, sub)) n++;
  return n;
}

DG_TEST(codegen_device_gmm_tiled) {
  dg_status st;
  dg_func *f = wl_build("GMM/0", &st);
  CHECK(f != NULL);
  lw_program *p = full_check(f, gmm_trace);
  ir_func_free(f);
  CHECK(p != NULL);
  CHECK_EQ(p->n_kernels, 1);
  const lw_kernel *k = &p->kernels[0];
  CHECK_EQ(k->grid[0], 16);
  CHECK_EQ(k->block[0], 128);
  /* X_shared: the 32x8 tile of one block and one k_0 step; Y_shared 8x32;
   * Z_local: 2x2 per thread and per virtual thread (2) */
  CHECK_EQ(lower_kernel_shared_bytes(k, false), (256 + 256) * 4);
  int64_t local = 0;
  for (int i = 0; i < k->n_local; i++) local += ir_buffer_numel(k->local[i]);
  CHECK_EQ(local, 8);
  char *cu = codegen_emit_program(p, &codegen_lang_cuda, &st);
  CHECK(cu != NULL);
  /* loop k0 { X_shared; Y_shared; sync; compute; sync } */
  CHECK_EQ(count(cu, "__syncthreads();"), 2);
  CHECK(strstr(cu, "*(uint2 *)") != NULL); /* 2 x f32 cooperative fetch */
  free(cu);
  lower_program_free(p);
}

/* Softmax rows of SFM/0 (256x256): the max over one warp (32 threads, 8
 * serial steps each), the sum over four warps (128 threads). */
static const char softmax_trace[] =
    "[[[\"GetBlock\",[],[\"T_softmax_maxelem\",\"main\"],[\"b0\"]],"
    "[\"GetLoops\",[\"b0\"],[],[\"l1\",\"l2\"]],"
    "[\"Split\",[\"l2\",\"None\",32],[1,0],[\"l3\",\"l4\"]],"
    "[\"Bind\",[\"l1\"],[\"blockIdx.x\"],[]],[\"Bind\",[\"l4\"],[\"threadIdx.x\"],[]],"
    "[\"GetBlock\",[],[\"T_softmax_exp\",\"main\"],[\"b5\"]],"
    "[\"GetLoops\",[\"b5\"],[],[\"l6\",\"l7\"]],"
    "[\"Fuse\",[\"l6\",\"l7\"],[1],[\"l8\"]],"
    "[\"Split\",[\"l8\",\"None\",256],[1,0],[\"l9\",\"l10\"]],"
    "[\"Bind\",[\"l9\"],[\"blockIdx.x\"],[]],[\"Bind\",[\"l10\"],[\"threadIdx.x\"],[]],"
    "[\"GetBlock\",[],[\"T_softmax_expsum\",\"main\"],[\"b11\"]],"
    "[\"GetLoops\",[\"b11\"],[],[\"l12\",\"l13\"]],"
    "[\"Split\",[\"l13\",\"None\",128],[1,0],[\"l14\",\"l15\"]],"
    "[\"Bind\",[\"l12\"],[\"blockIdx.x\"],[]],[\"Bind\",[\"l15\"],[\"threadIdx.x\"],[]],"
    "[\"GetBlock\",[],[\"T_softmax_norm\",\"main\"],[\"b16\"]],"
    "[\"GetLoops\",[\"b16\"],[],[\"l17\",\"l18\"]],"
    "[\"Split\",[\"l18\",\"None\",64],[1,0],[\"l19\",\"l20\"]],"
    "[\"Bind\",[\"l17\"],[\"blockIdx.x\"],[]],[\"Bind\",[\"l20\"],[\"threadIdx.x\"],[]]],[]]";

DG_TEST(codegen_device_softmax_allreduce) {
  dg_status st;
  dg_func *f = wl_build("SFM/0", &st);
  CHECK(f != NULL);
  lw_program *p = full_check(f, softmax_trace);
  ir_func_free(f);
  CHECK(p != NULL);
  CHECK_EQ(p->n_kernels, 4);
  CHECK_EQ(p->n_allocs, 3); /* maxelem, exp, expsum live in device memory */
  char *cu = codegen_emit_program(p, &codegen_lang_cuda, &st);
  CHECK(cu != NULL);
  CHECK(strstr(cu, "__shfl_down_sync(0xffffffffu, dg_red, 16, 32)") != NULL);
  CHECK(strstr(cu, "__shfl_down_sync(0xffffffffu, dg_red, 2, 32)") != NULL); /* 4 warps */
  CHECK(strstr(cu, "__shared__ __align__(16) float red_buf_shared[4];") != NULL);
  free(cu);
  lower_program_free(p);
}

static const char ew_kernel[] =
    "kernel scale(A: f32[64, 256], B: f32[64, 256]):\n"
    "  block root:\n"
    "    for i, j in grid(64, 256):\n"
    "      block B(vi: S(64) = i, vj: S(256) = j):\n"
    "        reads A[vi, vj]\n"
    "        writes B[vi, vj]\n"
    "        B[vi, vj] = A[vi, vj] * 2.0 + A[vi, 0]\n";

static const char ew_trace[] =
    "[[[\"GetBlock\",[],[\"B\",\"scale\"],[\"b0\"]],"
    "[\"GetLoops\",[\"b0\"],[],[\"l1\",\"l2\"]],"
    "[\"Fuse\",[\"l1\",\"l2\"],[1],[\"l3\"]],"
    "[\"Split\",[\"l3\",\"None\",128,4],[1,0],[\"l4\",\"l5\",\"l6\"]],"
    "[\"Bind\",[\"l4\"],[\"blockIdx.x\"],[]],[\"Bind\",[\"l5\"],[\"threadIdx.x\"],[]],"
    "[\"Vectorize\",[\"l6\"],[],[]]],[]]";

DG_TEST(codegen_device_elementwise_vector) {
  dg_status st;
  dg_func *f = ir_parse(ew_kernel, "ew", &st);
  CHECK(f != NULL);
  lw_program *p = full_check(f, ew_trace);
  ir_func_free(f);
  CHECK(p != NULL);
  const lw_kernel *k = &p->kernels[0];
  CHECK_EQ(k->grid[0], 32);
  CHECK_EQ(k->block[0], 128);
  CHECK(k->body->kind == LW_STORE);
  CHECK_EQ(k->body->lanes, 4);
  CHECK_EQ(k->body->n_vloads, 1); /* A[vi, vj]; A[vi, 0] is lane-invariant */
  char *cu = codegen_emit_program(p, &codegen_lang_cuda, &st);
  CHECK(cu != NULL);
  CHECK(strstr(cu, "const float4 dg_vl0 = *(const float4 *)") != NULL);
  CHECK(strstr(cu, "dg_vs.w = ") != NULL);
  free(cu);
  lower_program_free(p);
}

/* A padded read (B's first row is zero) stored four lanes at a time: the
 * vector register of A's lanes is filled only where the padding's
 * condition holds (it is the lanes' own: they differ in j only), never
 * from the address before A's first row. */
static const char pad_kernel[] =
    "kernel shift(A: f32[64, 256], B: f32[65, 256]):\n"
    "  block root:\n"
    "    for i, j in grid(65, 256):\n"
    "      block B(vi: S(65) = i, vj: S(256) = j):\n"
    "        reads A[vi - 1, vj]\n"
    "        writes B[vi, vj]\n"
    "        B[vi, vj] = select(vi >= 1, A[vi - 1, vj], 0.0)\n";

static const char pad_trace[] =
    "[[[\"GetBlock\",[],[\"B\",\"shift\"],[\"b0\"]],"
    "[\"GetLoops\",[\"b0\"],[],[\"l1\",\"l2\"]],"
    "[\"Split\",[\"l2\",\"None\",4],[1,0],[\"l3\",\"l4\"]],"
    "[\"Bind\",[\"l1\"],[\"blockIdx.x\"],[]],[\"Bind\",[\"l3\"],[\"threadIdx.x\"],[]],"
    "[\"Vectorize\",[\"l4\"],[],[]]],[]]";

DG_TEST(codegen_device_vector_load_under_its_condition) {
  dg_status st;
  dg_func *f = ir_parse(pad_kernel, "pad", &st);
  CHECK_MSG(f != NULL, "%s", st.msg);
  if (!f) return;
  lw_program *p = full_check(f, pad_trace);
  ir_func_free(f);
  CHECK(p != NULL);
  if (!p) return;
  const lw_kernel *k = &p->kernels[0];
  CHECK(k->body->kind == LW_STORE);
  CHECK_EQ(k->body->lanes, 4);
  CHECK_EQ(k->body->n_vloads, 1);
  char *cu = codegen_emit_program(p, &codegen_lang_cuda, &st);
  CHECK(cu != NULL);
  if (cu) {
    /* the load only under the condition, the lanes then read from it */
    const char *decl = strstr(cu, "float4 dg_vl0 = {0};");
    const char *guard = decl ? strstr(decl, "if (") : NULL;
    const char *load = guard ? strstr(guard, ") dg_vl0 = *(const float4 *)(&A[") : NULL;
    CHECK_MSG(decl && guard && load, "%s", cu);
    CHECK(strstr(cu, "const float4 dg_vl0 = *(const float4 *)") == NULL);
    CHECK(strstr(cu, "? dg_vl0.x : ") != NULL);
    free(cu);
  }
  lower_program_free(p);
}
