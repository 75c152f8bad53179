/* test_lower.c: the lowering passes on small scheduled kernels written as
 * kernel text: the lowered program's text (lower_print) byte for byte,
 * barrier placement, unrolling by TVM's rule, compaction, and every GPU
 * limit rejected with its reason.
 */
#include <stdlib.h>

#include "dragon/codegen.h"
#include "dragon/lower.h"
#include "dragon/rt.h"
#include "sched_support.h"
#include "test.h"

static lw_program *lower_text(const char *text, dg_status *st) {
  dg_func *f = ir_parse(text, "test", st);
  if (!f) return NULL;
  lw_program *p = lower_program(f, NULL, st);
  ir_func_free(f);
  return p;
}

/* Init block -> if (k == 0); predicate of an imperfect split -> if; the
 * thread loops -> dims. */
static const char reduce_kernel[] =
    "kernel rowsum(A: f32[10, 8], B: f32[10]):\n"
    "  block root:\n"
    "    for i_0 in 3 bind(blockIdx.x):\n"
    "      for i_1 in 4 bind(threadIdx.x):\n"
    "        for k in 8:\n"
    "          block B(vi: S(10) = i_0 * 4 + i_1, vk: R(8) = k):\n"
    "            where i_0 * 4 + i_1 < 10\n"
    "            reads A[vi, vk]\n"
    "            writes B[vi]\n"
    "            init:\n"
    "              B[vi] = 0.0\n"
    "            B[vi] = B[vi] + A[vi, vk]\n";

DG_TEST(lower_init_and_predicate) {
  dg_status st;
  lw_program *p = lower_text(reduce_kernel, &st);
  CHECK_OK(st);
  char *txt = lower_print(p);
  CHECK_STREQ(txt,
              "program rowsum:\n"
              "kernel rowsum_kernel0 grid(3, 1, 1) block(4, 1, 1):\n"
              "  for k in 8:\n"
              "    if blockIdx.x * 4 + threadIdx.x < 10:\n"
              "      if k == 0:\n"
              "        B[blockIdx.x * 4 + threadIdx.x] = 0.0\n"
              "      B[blockIdx.x * 4 + threadIdx.x] = B[blockIdx.x * 4 + threadIdx.x] + "
              "A[blockIdx.x * 4 + threadIdx.x, k]\n");
  free(txt);
  lower_program_free(p);
}

/* The program's C emulation against the float64 reference of `ref`. */
static bool emulation_matches(const dg_func *ref, const lw_program *p) {
  dg_status st;
  char *src = codegen_emit_program_source(p, ref, &st);
  CHECKR(src != NULL, false);
  bool same = ts_source_matches(ref, src, RT_DIST_UNIFORM);
  free(src);
  if (!same) dg_test_fail(__FILE__, __LINE__, "the emulation's numbers differ");
  return same;
}

/* A shared tile written by all threads (a loop bound to the same
 * threadIdx.x inside, as cooperative fetch makes it), then read across
 * threads: one barrier between, one at the end of the loop before the
 * next iteration overwrites it. */
static const char shared_kernel[] =
    "kernel tile(A: f32[64], B: f32[64]):\n"
    "  block root:\n"
    "    alloc S: f32[64] shared\n"
    "    for bx in 2 bind(blockIdx.x):\n"
    "      for tx in 8 bind(threadIdx.x):\n"
    "        for r in 3:\n"
    "          for tx_1 in 8 bind(threadIdx.x):\n"
    "            for c in 4:\n"
    "              block S(vs: S(64) = bx * 32 + tx_1 * 4 + c):\n"
    "                reads A[vs]\n"
    "                writes S[vs]\n"
    "                S[vs] = A[vs]\n"
    "          for t in 4:\n"
    "            block B(vb: S(64) = bx * 32 + tx * 4 + t):\n"
    "              reads S[bx * 32 + (tx * 4 + t + 1) % 32]\n"
    "              writes B[vb]\n"
    "              B[vb] = S[bx * 32 + (tx * 4 + t + 1) % 32] + 1.0\n";

DG_TEST(lower_barriers_and_compaction) {
  dg_status st;
  lw_program *p = lower_text(shared_kernel, &st);
  CHECK_OK(st);
  char *txt = lower_print(p);
  CHECK_STREQ(txt,
              "program tile:\n"
              "kernel tile_kernel0 grid(2, 1, 1) block(8, 1, 1):\n"
              "  shared S: f32[32]\n"
              "  for r in 3:\n"
              "    for c in 4:\n"
              "      S[c + threadIdx.x * 4] = A[blockIdx.x * 32 + c + threadIdx.x * 4]\n"
              "    sync\n"
              "    for t in 4:\n"
              "      B[blockIdx.x * 32 + t + threadIdx.x * 4] = S[(t + threadIdx.x * 4 + 1) % 32] + 1.0\n"
              "    sync\n");
  free(txt);
  /* the C target splits the body at the barriers: three thread loops */
  char *c = codegen_emit_program(p, &codegen_lang_c, &st);
  CHECK(c != NULL);
  int n = 0;
  for (const char *q = strstr(c, "for (int32_t dg_tx = 0;"); q; q = strstr(q + 1, "for (int32_t dg_tx = 0;")) n++;
  CHECK_EQ(n, 2);
  free(c);
  /* each thread reads its neighbour's element: right only with the barrier */
  dg_func *f = ir_parse(shared_kernel, "test", &st);
  CHECK(f != NULL);
  bool same = emulation_matches(f, p);
  ir_func_free(f);
  lower_program_free(p);
  CHECK(same);
}

/* pragma_auto_unroll_max_step = 16, implicit: the inner loops (4 x 2 = 8
 * stores) are marked unrolled, the outer (8 x 8 > 16) stays a loop. */
static const char unroll_kernel[] =
    "kernel un(A: f32[8, 4, 2], B: f32[8, 4, 2]):\n"
    "  block root:\n"
    "    for tx in 32 bind(threadIdx.x) {pragma_auto_unroll_max_step = 16, pragma_unroll_explicit = 0}:\n"
    "      for i in 8:\n"
    "        for j in 4:\n"
    "          for k in 2:\n"
    "            block B(vi: S(8) = i, vj: S(4) = j, vk: S(2) = k):\n"
    "              reads A[vi, vj, vk]\n"
    "              writes B[vi, vj, vk]\n"
    "              B[vi, vj, vk] = A[vi, vj, vk] * 3.0\n";

DG_TEST(lower_unroll_rule) {
  dg_status st;
  lw_program *p = lower_text(unroll_kernel, &st);
  CHECK_OK(st);
  const lw_stmt *i = p->kernels[0].body;
  CHECK(i->kind == LW_FOR && i->loop_kind == LW_LOOP_SERIAL && i->extent == 8);
  CHECK(i->body->kind == LW_FOR && i->body->loop_kind == LW_LOOP_UNROLLED);
  CHECK(i->body->body->kind == LW_FOR && i->body->body->loop_kind == LW_LOOP_UNROLLED);
  char *cu = codegen_emit_program(p, &codegen_lang_cuda, &st);
  CHECK(cu != NULL);
  CHECK(strstr(cu, "#pragma unroll\n    for (int32_t j = 0;") != NULL);
  free(cu);
  lower_program_free(p);
}

static void expect_reject(const char *text, const char *sub) {
  dg_status st;
  lw_program *p = lower_text(text, &st);
  CHECK(p == NULL);
  CHECK_ERR(st, sub);
}

DG_TEST(lower_rejects_limits) {
  expect_reject("kernel a(A: f32[2048]):\n"
                "  block root:\n"
                "    for t in 2048 bind(threadIdx.x):\n"
                "      block A(v: S(2048) = t):\n"
                "        writes A[v]\n"
                "        A[v] = 1.0\n",
                "kernel a_kernel0: 2048 threads per block (limit 1024)");
  expect_reject("kernel b(A: f32[64, 256]):\n"
                "  block root:\n"
                "    alloc S: f32[64, 256] shared\n"
                "    for t in 64 bind(threadIdx.x):\n"
                "      for j in 256:\n"
                "        block S(v: S(64) = t, w: S(256) = j):\n"
                "          writes S[v, w]\n"
                "          S[v, w] = 1.0\n"
                "      for j_1 in 256:\n"
                "        block A(v_1: S(64) = t, w_1: S(256) = j_1):\n"
                "          reads S[63 - v_1, w_1]\n"
                "          writes A[v_1, w_1]\n"
                "          A[v_1, w_1] = S[63 - v_1, w_1]\n",
                "65536 bytes of shared memory (limit 49152)");
  /* vthread extents are not limited (TVM expands them before it checks);
   * the expansion's size is */
  expect_reject("kernel c(A: f32[131072]):\n"
                "  block root:\n"
                "    for v in 131072 bind(vthread.x):\n"
                "      for t in 1 bind(threadIdx.x):\n"
                "        block A(x: S(131072) = v):\n"
                "          writes A[x]\n"
                "          A[x] = 1.0\n",
                "expanding vthread loop v (extent 131072) makes more than 65536 statements");
  expect_reject("kernel d(A: f32[32, 8]):\n"
                "  block root:\n"
                "    for t in 32 bind(threadIdx.x):\n"
                "      for j in 8 vectorized:\n"
                "        block A(x: S(32) = t, y: S(8) = j):\n"
                "          writes A[x, y]\n"
                "          A[x, y] = 1.0\n",
                "vectorized loop j accesses 32 bytes at once (limit 16)");
  expect_reject("kernel e(A: f32[16]):\n"
                "  block root:\n"
                "    for t in 16 bind(threadIdx.x):\n"
                "      block A(x: S(16) = t):\n"
                "        writes A[x]\n"
                "        attr meta_schedule.thread_extent_low_inclusive = 32\n"
                "        A[x] = 1.0\n",
                "block A runs on 16 threads, outside its thread extent bounds [32, -1]");
}

DG_TEST(lower_rejects_bad_bindings) {
  expect_reject("kernel f(A: f32[16], B: f32[16]):\n"
                "  block root:\n"
                "    for t in 16 bind(threadIdx.x):\n"
                "      block A(x: S(16) = t):\n"
                "        writes A[x]\n"
                "        A[x] = 1.0\n"
                "      for u in 8 bind(threadIdx.x):\n"
                "        block B(y: S(16) = u):\n"
                "          writes B[y]\n"
                "          B[y] = 1.0\n",
                "loop u is bound to threadIdx.x with extent 8, but another loop bound to it has "
                "extent 16");
  expect_reject("kernel g(A: f32[16]):\n"
                "  block root:\n"
                "    for t in 16:\n"
                "      block A(x: S(16) = t):\n"
                "        writes A[x]\n"
                "        A[x] = 1.0\n",
                "kernel g_kernel0: no loop is bound to blockIdx or threadIdx");
  expect_reject("kernel h(A: f32[16], B: f32[1]):\n"
                "  block root:\n"
                "    for t in 4 bind(threadIdx.x):\n"
                "      for k in 4:\n"
                "        block B(x: S(1) = 0, r: R(16) = t * 4 + k):\n"
                "          reads A[r]\n"
                "          writes B[x]\n"
                "          B[x] = B[x] + A[r] * 2.0\n"
                "        block C(x_1: S(1) = 0):\n"
                "          writes B[x_1]\n"
                "          B[x_1] = 1.0\n",
                "do not form a cross-thread reduction");
}

/* The cross-thread reduction over 8 threads and 2 serial steps, with its
 * init at the first step of the nest. */
static const char allreduce_kernel[] =
    "kernel rs(A: f32[4, 16], B: f32[4]):\n"
    "  block root:\n"
    "    for i in 4 bind(blockIdx.x):\n"
    "      for k_0 in 2:\n"
    "        for k_1 in 8 bind(threadIdx.x):\n"
    "          block B(vi: S(4) = i, vk: R(16) = k_0 * 8 + k_1):\n"
    "            reads A[vi, vk]\n"
    "            writes B[vi]\n"
    "            init:\n"
    "              B[vi] = 0.0\n"
    "            B[vi] = B[vi] + A[vi, vk]\n";

DG_TEST(lower_cross_thread_reduction) {
  dg_status st;
  lw_program *p = lower_text(allreduce_kernel, &st);
  CHECK_OK(st);
  char *txt = lower_print(p);
  CHECK_STREQ(txt,
              "program rs:\n"
              "kernel rs_kernel0 grid(4, 1, 1) block(8, 1, 1):\n"
              "  local normal_reduce_temp: f32[1]\n"
              "  local red_buf: f32[1]\n"
              "  normal_reduce_temp[0] = 0.0\n"
              "  for k_0 in 2:\n"
              "    normal_reduce_temp[0] = normal_reduce_temp[0] + A[blockIdx.x, k_0 * 8 + threadIdx.x]\n"
              "  red_buf[0] = allreduce(+, normal_reduce_temp[0]) over threadIdx.x (8)\n"
              "  if threadIdx.x == 0:\n"
              "    B[blockIdx.x] = 0.0 + red_buf[0]\n");
  free(txt);
  char *cu = codegen_emit_program(p, &codegen_lang_cuda, &st);
  CHECK(cu != NULL);
  CHECK(strstr(cu, "dg_red = (dg_red + __shfl_down_sync(0xffu, dg_red, 4, 8));") != NULL);
  CHECK(strstr(cu, "dg_red = __shfl_sync(0xffu, dg_red, 0, 8);") != NULL);
  free(cu);
  dg_func *f = ir_parse(allreduce_kernel, "test", &st);
  CHECK(f != NULL);
  bool same = emulation_matches(f, p);
  ir_func_free(f);
  lower_program_free(p);
  CHECK(same);
}
