/* test_sched_reduction.c: DecomposeReduction, RFactor and the cross-thread
 * reduction form (a reduction loop bound to threadIdx.x): expected kernel
 * text, ir_verify after every step, numerics against the unscheduled kernel
 * through the interpreter, trace JSON round trip and replay, invalid uses
 * with their messages (and the kernel left as it was). */
#include <stdlib.h>

#include "dragon/rt.h"
#include "dragon/sched.h"
#include "dragon/wl.h"
#include "sched_support.h"
#include "test.h"

static const char *MATMUL =
    "kernel main(A: f32[12, 8], B: f32[8, 10], C: f32[12, 10]):\n"
    "  block root:\n"
    "    for i, j, k in grid(12, 10, 8):\n"
    "      block C(vi: S(12) = i, vj: S(10) = j, vk: R(8) = k):\n"
    "        reads A[vi, vk], B[vk, vj]\n"
    "        writes C[vi, vj]\n"
    "        init:\n"
    "          C[vi, vj] = 0.0\n"
    "        C[vi, vj] = C[vi, vj] + A[vi, vk] * B[vk, vj]\n";

/* A row reduction with a chosen init and update (the update's text goes
 * after "C[vi] = "). */
static char *row_kernel(const char *init, const char *update) {
  dg_str s;
  dg_str_init(&s);
  dg_str_printf(&s,
                "kernel main(A: f32[6, 16], C: f32[6]):\n"
                "  block root:\n"
                "    for i, k in grid(6, 16):\n"
                "      block C(vi: S(6) = i, vk: R(16) = k):\n"
                "        reads A[vi, vk]\n"
                "        writes C[vi]\n"
                "        init:\n"
                "          C[vi] = %s\n"
                "        C[vi] = %s\n",
                init, update);
  return dg_str_take(&s);
}


/* ---- DecomposeReduction ------------------------------------------------------ */

DG_TEST(sched_reduction_decompose_matmul) {
  dg_func *f = ts_parse(MATMUL);
  CHECK(f);
  dg_status st;
  /* at the outermost loop: the init gets copies of both spatial loops */
  sched *s = sched_new(f, 1);
  int b = sched_get_block(s, "C", NULL, &st);
  int l[3];
  CHECK_EQ(sched_get_loops(s, b, l, 3, &st), 3);
  int ib = sched_decompose_reduction(s, b, l[0], &st);
  CHECK_OK(st);
  CHECK(ib >= 0 && sched_rv_get_kind(s, ib) == SCHED_RV_BLOCK);
  CHECK(ts_verified(s));
  CHECK(ts_text_is(s,
                "kernel main(A: f32[12, 8], B: f32[8, 10], C: f32[12, 10]):\n"
                "  block root:\n"
                "    for i_init, j_init in grid(12, 10):\n"
                "      block C_init(vi_1: S(12) = i_init, vj_1: S(10) = j_init):\n"
                "        writes C[vi_1, vj_1]\n"
                "        C[vi_1, vj_1] = 0.0\n"
                "    for i, j, k in grid(12, 10, 8):\n"
                "      block C_update(vi: S(12) = i, vj: S(10) = j, vk: R(8) = k):\n"
                "        reads C[vi, vj], A[vi, vk], B[vk, vj]\n"
                "        writes C[vi, vj]\n"
                "        C[vi, vj] = C[vi, vj] + A[vi, vk] * B[vk, vj]\n"));
  CHECK(ts_same_numbers_seed(f, sched_func(s), 7));
  CHECK(ts_replays(f, s));
  /* the block's handle names the update block, the output the init block;
   * the loops keep their handles */
  int out[4];
  CHECK_EQ(sched_get_loops(s, b, out, 4, &st), 3);
  CHECK(out[0] != l[0]);
  CHECK(sched_unroll(s, l[2], &st));
  CHECK_EQ(sched_get_loops(s, ib, out, 4, &st), 2);
  CHECK(sched_get_block(s, "C_init", NULL, &st) >= 0);
  CHECK(sched_get_block(s, "C_update", NULL, &st) >= 0);
  /* no init left to take out */
  CHECK(sched_decompose_reduction(s, b, l[0], &st) < 0);
  CHECK_ERR(st, "DecomposeReduction: block C_update is not a reduction block: it has no init statement");
  sched_free(s);

  /* at the reduction loop: the init sits right before it, no loop copied */
  s = sched_new(f, 1);
  b = sched_get_block(s, "C", NULL, &st);
  sched_get_loops(s, b, l, 3, &st);
  CHECK(sched_decompose_reduction(s, b, l[2], &st) >= 0);
  CHECK(ts_verified(s));
  CHECK(ts_text_is(s,
                "kernel main(A: f32[12, 8], B: f32[8, 10], C: f32[12, 10]):\n"
                "  block root:\n"
                "    for i, j in grid(12, 10):\n"
                "      block C_init(vi_1: S(12) = i, vj_1: S(10) = j):\n"
                "        writes C[vi_1, vj_1]\n"
                "        C[vi_1, vj_1] = 0.0\n"
                "      for k in 8:\n"
                "        block C_update(vi: S(12) = i, vj: S(10) = j, vk: R(8) = k):\n"
                "          reads C[vi, vj], A[vi, vk], B[vk, vj]\n"
                "          writes C[vi, vj]\n"
                "          C[vi, vj] = C[vi, vj] + A[vi, vk] * B[vk, vj]\n"));
  CHECK(ts_same_numbers_seed(f, sched_func(s), 7));
  CHECK(ts_replays(f, s));
  sched_free(s);
  ir_func_free(f);
}

/* Loops below the decomposition point that spatial bindings use are copied
 * (`<var>_init`); predicate conjuncts over the dropped loops go. */
DG_TEST(sched_reduction_decompose_inner_loops_and_predicate) {
  dg_func *f = ts_parse(MATMUL);
  sched *s = sched_new(f, 1);
  dg_status st;
  int b = sched_get_block(s, "C", NULL, &st);
  int l[3];
  sched_get_loops(s, b, l, 3, &st);
  sched_val fi[2] = {TS_NONE, ts_int(5)}, fk[2] = {ts_int(3), TS_NONE}; /* 12 -> 3x5, 8 -> 3x3: both predicated */
  int li[2], lk[2];
  CHECK_EQ(sched_split(s, l[0], fi, 2, true, false, li, &st), 2);
  CHECK_EQ(sched_split(s, l[2], fk, 2, true, false, lk, &st), 2);
  int ord[2] = {lk[0], l[1]};
  CHECK(sched_reorder(s, ord, 2, &st)); /* i_0, i_1, k_0, j, k_1 */
  CHECK(sched_decompose_reduction(s, b, lk[0], &st) >= 0);
  CHECK(ts_verified(s));
  CHECK(ts_text_is(s,
                "kernel main(A: f32[12, 8], B: f32[8, 10], C: f32[12, 10]):\n"
                "  block root:\n"
                "    for i_0, i_1 in grid(3, 5):\n"
                "      for j_init in 10:\n"
                "        block C_init(vi_1: S(12) = i_0 * 5 + i_1, vj_1: S(10) = j_init):\n"
                "          writes C[vi_1, vj_1]\n"
                "          where i_0 * 5 + i_1 < 12\n"
                "          C[vi_1, vj_1] = 0.0\n"
                "      for k_0, j, k_1 in grid(3, 10, 3):\n"
                "        block C_update(vi: S(12) = i_0 * 5 + i_1, vj: S(10) = j, vk: R(8) = k_0 * 3 + k_1):\n"
                "          reads C[vi, vj], A[vi, vk], B[vk, vj]\n"
                "          writes C[vi, vj]\n"
                "          where i_0 * 5 + i_1 < 12 && k_0 * 3 + k_1 < 8\n"
                "          C[vi, vj] = C[vi, vj] + A[vi, vk] * B[vk, vj]\n"));
  CHECK(ts_same_numbers_seed(f, sched_func(s), 7));
  CHECK(ts_replays(f, s));
  sched_free(s);
  ir_func_free(f);
}

DG_TEST(sched_reduction_decompose_invalid) {
  dg_status st;
  dg_func *f = wl_build("softmax:m=4,n=8,dtype=f32", &st);
  CHECK(f);
  sched *s = sched_new(f, 1);
  char *before = ir_print(sched_func(s));
  int mx = sched_get_block(s, "T_softmax_maxelem", NULL, &st);
  int ex = sched_get_block(s, "T_softmax_exp", NULL, &st);
  int lm[2], le[2];
  CHECK_EQ(sched_get_loops(s, mx, lm, 2, &st), 2);
  CHECK_EQ(sched_get_loops(s, ex, le, 2, &st), 2);
  /* not a reduction block */
  CHECK(sched_decompose_reduction(s, ex, le[0], &st) < 0);
  CHECK_ERR(st, "DecomposeReduction: block T_softmax_exp is not a reduction block: it has no init statement");
  /* a loop of another nest */
  CHECK(sched_decompose_reduction(s, mx, le[0], &st) < 0);
  CHECK_ERR(st, "DecomposeReduction: loop i0_1 is not an ancestor of block T_softmax_maxelem");
  /* below a loop of the reduction */
  sched_val fk[2] = {TS_NONE, ts_int(4)};
  int lk[2];
  CHECK_EQ(sched_split(s, lm[1], fk, 2, true, false, lk, &st), 2);
  char *split = ir_print(sched_func(s));
  CHECK(sched_decompose_reduction(s, mx, lk[1], &st) < 0);
  CHECK_ERR(st, "DecomposeReduction: loop k_1_1 is below loop k_0, which binds reduction variable v_k "
                "of block T_softmax_maxelem");
  /* wrong handle kinds */
  CHECK(sched_decompose_reduction(s, lk[0], lk[0], &st) < 0);
  CHECK_ERR(st, "is a loop handle, expected a block");
  /* failures leave the kernel as it was */
  char *after = ir_print(sched_func(s));
  CHECK_STREQ(after, split);
  CHECK(strcmp(before, split) != 0);
  free(before);
  free(split);
  free(after);
  sched_free(s);
  ir_func_free(f);

  /* a predicate conjunct over a dropped loop and a kept one: dropping it
   * would run the init outside the block's domain, keeping it is not
   * possible without the dropped loop */
  f = ts_parse("kernel main(A: f32[6, 16], C: f32[6]):\n"
            "  block root:\n"
            "    for i, k in grid(6, 16):\n"
            "      block C(vi: S(6) = i, vk: R(16) = k):\n"
            "        reads A[vi, vk]\n"
            "        writes C[vi]\n"
            "        where i < 5 && i + k < 18\n"
            "        init:\n"
            "          C[vi] = 0.0\n"
            "        C[vi] = C[vi] + A[vi, vk]\n");
  CHECK(f);
  s = sched_new(f, 1);
  int b = sched_get_block(s, "C", NULL, &st);
  int l[2];
  CHECK_EQ(sched_get_loops(s, b, l, 2, &st), 2);
  CHECK(sched_decompose_reduction(s, b, l[1], &st) < 0);
  CHECK_ERR(st, "DecomposeReduction: the predicate of block C ties loops the init block drops to "
                "loops it keeps (i + k < 18); decompose_reduction cannot split it");
  CHECK(ts_verified(s));
  sched_free(s);
  ir_func_free(f);

  /* an init that reads the reduction variable cannot stand alone */
  char *text = row_kernel("A[vi, vk]", "C[vi] + A[vi, vk]");
  f = ts_parse(text);
  free(text);
  CHECK(f);
  s = sched_new(f, 1);
  b = sched_get_block(s, "C", NULL, &st);
  CHECK_EQ(sched_get_loops(s, b, l, 2, &st), 2);
  CHECK(sched_decompose_reduction(s, b, l[0], &st) < 0);
  CHECK_ERR(st, "DecomposeReduction: the init of block C uses reduction variable vk");
  sched_free(s);
  ir_func_free(f);
}

/* Softmax's two reductions and NRM: every reduction block decomposed at its
 * first reduction loop, as RewriteReductionBlock does. */
DG_TEST(sched_reduction_decompose_workloads) {
  dg_status st;
  const char *specs[] = {"softmax:m=4,n=8,dtype=f32", "NRM/0", "softmax:m=3,n=5,dtype=f16"};
  const char *blocks[][2] = {{"T_softmax_maxelem", "T_softmax_expsum"}, {"C", NULL},
                             {"T_softmax_maxelem", "T_softmax_expsum"}};
  for (size_t w = 0; w < DG_ARRAY_LEN(specs); w++) {
    dg_func *f = wl_build(specs[w], &st);
    CHECK(f);
    sched *s = sched_new(f, 1);
    for (int k = 0; k < 2 && blocks[w][k]; k++) {
      int b = sched_get_block(s, blocks[w][k], NULL, &st);
      int l[3];
      int n = sched_get_loops(s, b, l, 3, &st);
      CHECK(n >= 2);
      CHECK(sched_decompose_reduction(s, b, l[1], &st) >= 0);
      CHECK_OK(st);
      CHECK(ts_verified(s));
    }
    CHECK(ts_same_numbers_seed(f, sched_func(s), 7));
    CHECK(ts_replays(f, s));
    sched_free(s);
    ir_func_free(f);
  }
  /* NRM's text at a small size */
  dg_func *f = wl_build("norm_bmn:b=2,m=3,n=4,dtype=f32", &st);
  CHECK(f);
  sched *s = sched_new(f, 1);
  int b = sched_get_block(s, "C", NULL, &st);
  int l[3];
  sched_get_loops(s, b, l, 3, &st);
  CHECK(sched_decompose_reduction(s, b, l[1], &st) >= 0);
  CHECK(ts_verified(s));
  CHECK(ts_text_is(s,
                "kernel main(A: f32[2, 3, 4], D: f32[2]):\n"
                "  block root:\n"
                "    alloc C: f32[2]\n"
                "    for b in 2:\n"
                "      block C_init(v_b_2: S(2) = b):\n"
                "        writes C[v_b_2]\n"
                "        C[v_b_2] = 0.0\n"
                "      for i, j in grid(3, 4):\n"
                "        block C_update(v_b: S(2) = b, v_i: R(3) = i, v_j: R(4) = j):\n"
                "          reads C[v_b], A[v_b, v_i, v_j]\n"
                "          writes C[v_b]\n"
                "          C[v_b] = C[v_b] + A[v_b, v_i, v_j] * A[v_b, v_i, v_j]\n"
                "    for b_1 in 2:\n"
                "      block D(v_b_1: S(2) = b_1):\n"
                "        reads C[v_b_1]\n"
                "        writes D[v_b_1]\n"
                "        D[v_b_1] = sqrt(C[v_b_1])\n"));
  CHECK(ts_same_numbers_seed(f, sched_func(s), 7));
  sched_free(s);
  ir_func_free(f);
}

/* ---- RFactor ---------------------------------------------------------------- */

DG_TEST(sched_reduction_rfactor_matmul) {
  dg_func *f = ts_parse(MATMUL);
  sched *s = sched_new(f, 1);
  dg_status st;
  int b = sched_get_block(s, "C", NULL, &st);
  int l[3];
  sched_get_loops(s, b, l, 3, &st);
  sched_val fk[2] = {TS_NONE, ts_int(4)};
  int lk[2];
  CHECK_EQ(sched_split(s, l[2], fk, 2, true, false, lk, &st), 2);
  int rb = sched_rfactor(s, lk[1], 0, &st);
  CHECK_OK(st);
  CHECK(rb >= 0 && sched_rv_get_kind(s, rb) == SCHED_RV_BLOCK);
  CHECK(ts_verified(s));
  CHECK(ts_text_is(s,
                "kernel main(A: f32[12, 8], B: f32[8, 10], C: f32[12, 10]):\n"
                "  block root:\n"
                "    alloc C_rf: f32[4, 12, 10]\n"
                "    for i_1, j_1, k_0_1, k_1_1 in grid(12, 10, 2, 4):\n"
                "      block C_rf(vk_1: S(4) = k_1_1, vi: S(12) = i_1, vj: S(10) = j_1, vk_0: R(2) = k_0_1):\n"
                "        reads A[vi, vk_0 * 4 + vk_1], B[vk_0 * 4 + vk_1, vj]\n"
                "        writes C_rf[vk_1, vi, vj]\n"
                "        init:\n"
                "          C_rf[vk_1, vi, vj] = 0.0\n"
                "        C_rf[vk_1, vi, vj] = C_rf[vk_1, vi, vj] + A[vi, vk_0 * 4 + vk_1] * B[vk_0 * 4 + vk_1, vj]\n"
                "    for i, j, k_1 in grid(12, 10, 4):\n"
                "      block C(vk_1_1: R(4) = k_1, vi_1: S(12) = i, vj_1: S(10) = j):\n"
                "        reads C_rf[vk_1_1, vi_1, vj_1]\n"
                "        writes C[vi_1, vj_1]\n"
                "        init:\n"
                "          C[vi_1, vj_1] = 0.0\n"
                "        C[vi_1, vj_1] = C[vi_1, vj_1] + C_rf[vk_1_1, vi_1, vj_1]\n"));
  CHECK(ts_same_numbers_seed(f, sched_func(s), 7));
  CHECK(ts_replays(f, s));
  /* handles: b is the write-back block, the rf loop survives around it, the
   * other reduction loop is gone */
  int wl[4];
  CHECK_EQ(sched_get_loops(s, b, wl, 4, &st), 3);
  CHECK(sched_parallel(s, l[0], &st));
  CHECK(!sched_unroll(s, lk[0], &st));
  CHECK_ERR(st, "is stale");
  CHECK(sched_unroll(s, lk[1], &st));
  /* then RewriteReductionBlock's decompositions, each at the block's first
   * reduction loop */
  int rl[4];
  CHECK_EQ(sched_get_loops(s, rb, rl, 4, &st), 4);
  CHECK(sched_decompose_reduction(s, rb, rl[3], &st) < 0);
  CHECK_ERR(st, "loop k_1_1 is below loop k_0_1, which binds reduction variable vk_0 of block C_rf");
  CHECK(sched_decompose_reduction(s, rb, rl[2], &st) >= 0);
  CHECK(ts_verified(s));
  CHECK(sched_decompose_reduction(s, b, wl[2], &st) >= 0);
  CHECK(ts_verified(s));
  char *txt = ir_print(sched_func(s));
  CHECK(strstr(txt, "      block C_rf_init(vk_1_2: S(4) = k_1_1_init, vi_2: S(12) = i_1, vj_2: S(10) = j_1):\n") != NULL);
  CHECK(strstr(txt, "      block C_init(vi_1_1: S(12) = i, vj_1_1: S(10) = j):\n") != NULL);
  free(txt);
  CHECK(ts_same_numbers_seed(f, sched_func(s), 7));
  CHECK(ts_replays(f, s));
  sched_free(s);
  ir_func_free(f);
}

/* factor_axis places the new axis; negative values count from the end. */
DG_TEST(sched_reduction_rfactor_factor_axis) {
  dg_func *f = ts_parse(MATMUL);
  dg_status st;
  struct {
    int axis;
    const char *alloc;
  } cases[] = {
      {0, "alloc C_rf: f32[2, 12, 10]"},  {1, "alloc C_rf: f32[12, 2, 10]"},
      {2, "alloc C_rf: f32[12, 10, 2]"},  {-1, "alloc C_rf: f32[12, 10, 2]"},
      {-3, "alloc C_rf: f32[2, 12, 10]"},
  };
  for (size_t c = 0; c < DG_ARRAY_LEN(cases); c++) {
    sched *s = sched_new(f, 1);
    int b = sched_get_block(s, "C", NULL, &st);
    int l[3];
    sched_get_loops(s, b, l, 3, &st);
    sched_val fk[2] = {TS_NONE, ts_int(4)};
    int lk[2];
    CHECK_EQ(sched_split(s, l[2], fk, 2, true, false, lk, &st), 2);
    CHECK(sched_rfactor(s, lk[0], cases[c].axis, &st) >= 0); /* the outer part, extent 2 */
    CHECK(ts_verified(s));
    char *txt = ir_print(sched_func(s));
    CHECK_MSG(strstr(txt, cases[c].alloc) != NULL, "axis %d:\n%s", cases[c].axis, txt);
    free(txt);
    CHECK(ts_same_numbers_seed(f, sched_func(s), 7));
    CHECK(ts_replays(f, s));
    sched_free(s);
  }
  ir_func_free(f);
}

/* NRM (two reduction loops, a spatial unit loop) and a max reduction. */
DG_TEST(sched_reduction_rfactor_nrm_and_max) {
  dg_status st;
  dg_func *f = wl_build("norm_bmn:b=1,m=4,n=8,dtype=f32", &st);
  CHECK(f);
  sched *s = sched_new(f, 1);
  int b = sched_get_block(s, "C", NULL, &st);
  int l[3];
  CHECK_EQ(sched_get_loops(s, b, l, 3, &st), 3);
  CHECK(sched_rfactor(s, l[2], 1, &st) >= 0);
  CHECK(ts_verified(s));
  CHECK(ts_text_is(s,
                "kernel main(A: f32[1, 4, 8], D: f32[1]):\n"
                "  block root:\n"
                "    alloc C: f32[1]\n"
                "    alloc C_rf: f32[1, 8]\n"
                "    for b_2, i_1, j_1 in grid(1, 4, 8):\n"
                "      block C_rf(vj: S(8) = j_1, v_b: S(1) = b_2, v_i: R(4) = i_1):\n"
                "        reads A[v_b, v_i, vj]\n"
                "        writes C_rf[v_b, vj]\n"
                "        init:\n"
                "          C_rf[v_b, vj] = 0.0\n"
                "        C_rf[v_b, vj] = C_rf[v_b, vj] + A[v_b, v_i, vj] * A[v_b, v_i, vj]\n"
                "    for b, j in grid(1, 8):\n"
                "      block C(vj_1: R(8) = j, v_b_2: S(1) = b):\n"
                "        reads C_rf[v_b_2, vj_1]\n"
                "        writes C[v_b_2]\n"
                "        init:\n"
                "          C[v_b_2] = 0.0\n"
                "        C[v_b_2] = C[v_b_2] + C_rf[v_b_2, vj_1]\n"
                "    for b_1 in 1:\n"
                "      block D(v_b_1: S(1) = b_1):\n"
                "        reads C[v_b_1]\n"
                "        writes D[v_b_1]\n"
                "        D[v_b_1] = sqrt(C[v_b_1])\n"));
  CHECK(ts_same_numbers_seed(f, sched_func(s), 7));
  CHECK(ts_replays(f, s));
  sched_free(s);
  ir_func_free(f);

  /* the full-size NRM, rfactor over the outer reduction loop */
  f = wl_build("NRM/0", &st);
  CHECK(f);
  s = sched_new(f, 1);
  b = sched_get_block(s, "C", NULL, &st);
  CHECK_EQ(sched_get_loops(s, b, l, 3, &st), 3);
  CHECK(sched_rfactor(s, l[1], 0, &st) >= 0);
  CHECK(ts_verified(s));
  CHECK(ts_same_numbers_seed(f, sched_func(s), 7));
  CHECK(ts_replays(f, s));
  sched_free(s);
  ir_func_free(f);

  f = wl_build("reduce_max:m=4,n=8,dtype=f32", &st);
  CHECK(f);
  s = sched_new(f, 1);
  b = sched_get_block(s, "A_red", NULL, &st);
  CHECK_EQ(sched_get_loops(s, b, l, 2, &st), 2);
  sched_val fk[2] = {ts_int(2), TS_NONE};
  int lk[2];
  CHECK_EQ(sched_split(s, l[1], fk, 2, true, false, lk, &st), 2);
  CHECK(sched_rfactor(s, lk[1], -1, &st) >= 0);
  CHECK(ts_verified(s));
  CHECK(ts_text_is(s,
                "kernel main(A: f32[4, 8], A_red: f32[4]):\n"
                "  block root:\n"
                "    alloc A_red_rf: f32[4, 4]\n"
                "    for ax0_1, k1_0_1, k1_1_1 in grid(4, 2, 4):\n"
                "      block A_red_rf(vk1_1: S(4) = k1_1_1, v_ax0: S(4) = ax0_1, vk1_0: R(2) = k1_0_1):\n"
                "        reads A[v_ax0, vk1_0 * 4 + vk1_1]\n"
                "        writes A_red_rf[v_ax0, vk1_1]\n"
                "        init:\n"
                "          A_red_rf[v_ax0, vk1_1] = -3.4028235e+38\n"
                "        A_red_rf[v_ax0, vk1_1] = max(A_red_rf[v_ax0, vk1_1], A[v_ax0, vk1_0 * 4 + vk1_1])\n"
                "    for ax0, k1_1 in grid(4, 4):\n"
                "      block A_red(vk1_1_1: R(4) = k1_1, v_ax0_1: S(4) = ax0):\n"
                "        reads A_red_rf[v_ax0_1, vk1_1_1]\n"
                "        writes A_red[v_ax0_1]\n"
                "        init:\n"
                "          A_red[v_ax0_1] = -3.4028235e+38\n"
                "        A_red[v_ax0_1] = max(A_red[v_ax0_1], A_red_rf[v_ax0_1, vk1_1_1])\n"));
  CHECK(ts_same_numbers_seed(f, sched_func(s), 7));
  CHECK(ts_replays(f, s));
  sched_free(s);
  ir_func_free(f);
}

/* The four reducers of TVM's registry are recognised from init and update;
 * anything else is refused with both written out. */
DG_TEST(sched_reduction_rfactor_reducers) {
  dg_status st;
  struct {
    const char *init, *update, *err;
  } cases[] = {
      {"0.0", "C[vi] + A[vi, vk]", NULL},
      {"1.0", "C[vi] * A[vi, vk]", NULL},
      {"3.4028235e+38", "min(C[vi], A[vi, vk])", NULL},
      {"-3.4028235e+38", "max(C[vi], A[vi, vk] * 2.0)", NULL},
      {"0.0", "C[vi] - A[vi, vk]",
       "block C: no commutative reducer matches init 0.0 and update C[vi] - A[vi, vk]; rfactor knows "
       "x + y (init 0), x * y (init 1), min(x, y) (init the largest value), max(x, y) (init the "
       "lowest value), with the load of the stored element as x"},
      {"1.0", "C[vi] + A[vi, vk]", "no commutative reducer matches init 1.0 and update C[vi] + A[vi, vk]"},
      {"0.0", "max(C[vi], A[vi, vk])", "no commutative reducer matches init 0.0 and update max(C[vi], A[vi, vk])"},
      {"0.0", "A[vi, vk] + C[vi]", "no commutative reducer matches init 0.0 and update A[vi, vk] + C[vi]"},
  };
  for (size_t c = 0; c < DG_ARRAY_LEN(cases); c++) {
    char *text = row_kernel(cases[c].init, cases[c].update);
    dg_func *f = ts_parse(text);
    free(text);
    CHECK(f);
    sched *s = sched_new(f, 1);
    int b = sched_get_block(s, "C", NULL, &st);
    int l[2];
    CHECK_EQ(sched_get_loops(s, b, l, 2, &st), 2);
    sched_val fk[2] = {TS_NONE, ts_int(4)};
    int lk[2];
    CHECK_EQ(sched_split(s, l[1], fk, 2, true, false, lk, &st), 2);
    char *before = ir_print(sched_func(s));
    int rb = sched_rfactor(s, lk[1], 0, &st);
    if (cases[c].err) {
      CHECK_MSG(rb < 0, "case %zu accepted", c);
      CHECK_ERR(st, cases[c].err);
      char *after = ir_print(sched_func(s));
      CHECK_STREQ(after, before);
      free(after);
    } else {
      CHECK_MSG(rb >= 0, "case %zu: %s", c, st.msg);
      CHECK(ts_verified(s));
      CHECK(ts_same_numbers_seed(f, sched_func(s), 7));
      CHECK(ts_replays(f, s));
    }
    free(before);
    sched_free(s);
    ir_func_free(f);
  }
}

DG_TEST(sched_reduction_rfactor_invalid) {
  dg_func *f = ts_parse(MATMUL);
  sched *s = sched_new(f, 1);
  dg_status st;
  int b = sched_get_block(s, "C", NULL, &st);
  int l[3];
  sched_get_loops(s, b, l, 3, &st);
  char *before = ir_print(sched_func(s));
  CHECK(sched_rfactor(s, l[2], 3, &st) < 0);
  CHECK_ERR(st, "RFactor: factor_axis 3 is out of range: buffer C has 2 dimensions, so it must be in [-3, 2]");
  CHECK(sched_rfactor(s, l[2], -4, &st) < 0);
  CHECK_ERR(st, "factor_axis -4 is out of range");
  CHECK(sched_rfactor(s, l[0], 0, &st) < 0);
  CHECK_ERR(st, "RFactor: loop i binds a spatial variable of block C; rfactor needs a reduction loop");
  CHECK(sched_rfactor(s, b, 0, &st) < 0);
  CHECK_ERR(st, "is a block handle, expected a loop");
  CHECK(sched_unroll(s, l[2], &st));
  char *unrolled = ir_print(sched_func(s));
  CHECK(sched_rfactor(s, l[2], 0, &st) < 0);
  CHECK_ERR(st, "RFactor: loop k is unrolled; rfactor needs a serial loop");
  char *after = ir_print(sched_func(s));
  CHECK_STREQ(after, unrolled);
  free(after);
  free(unrolled);
  free(before);
  sched_free(s);

  /* a loop holding two blocks (after a decomposition) */
  s = sched_new(f, 1);
  b = sched_get_block(s, "C", NULL, &st);
  sched_get_loops(s, b, l, 3, &st);
  CHECK(sched_decompose_reduction(s, b, l[2], &st) >= 0);
  CHECK(sched_rfactor(s, l[1], 0, &st) < 0);
  CHECK_ERR(st, "RFactor: loop j holds 2 blocks; rfactor needs exactly one");
  /* a block without init */
  CHECK(sched_rfactor(s, l[2], 0, &st) < 0);
  CHECK_ERR(st, "RFactor: block C_update is not a reduction block: it has no init statement");
  sched_free(s);

  /* a loop carrying both kinds of variables */
  s = sched_new(f, 1);
  b = sched_get_block(s, "C", NULL, &st);
  sched_get_loops(s, b, l, 3, &st);
  int jk = sched_fuse(s, l + 1, 2, true, &st);
  CHECK(jk >= 0);
  CHECK(sched_rfactor(s, jk, 0, &st) < 0);
  CHECK_ERR(st, "RFactor: loop j_k_fused is used by both spatial and reduction variables of block C");
  sched_free(s);

  /* a loop that binds nothing, of extent > 1, under the reduction loop */
  s = sched_new(f, 1);
  b = sched_get_block(s, "C", NULL, &st);
  sched_get_loops(s, b, l, 3, &st);
  sched_val fk[2] = {TS_NONE, ts_int(4)};
  int lk[2];
  CHECK_EQ(sched_split(s, l[2], fk, 2, true, false, lk, &st), 2);
  CHECK(sched_add_unit_loop(s, b, &st) >= 0); /* a unit loop under k_1 is fine */
  CHECK(sched_rfactor(s, lk[1], 0, &st) >= 0);
  CHECK(ts_verified(s));
  CHECK(ts_same_numbers_seed(f, sched_func(s), 7));
  sched_free(s);
  ir_func_free(f);

  /* not the first block under the outermost loop */
  const char *two =
      "kernel main(A: f32[4, 8], C: f32[4], E: f32[4]):\n"
      "  block root:\n"
      "    for i in 4:\n"
      "      block E(ve: S(4) = i):\n"
      "        reads A[ve, 0]\n"
      "        writes E[ve]\n"
      "        E[ve] = A[ve, 0]\n"
      "      for k in 8:\n"
      "        block C(vi: S(4) = i, vk: R(8) = k):\n"
      "          reads A[vi, vk]\n"
      "          writes C[vi]\n"
      "          init:\n"
      "            C[vi] = 0.0\n"
      "          C[vi] = C[vi] + A[vi, vk]\n";
  f = ts_parse(two);
  CHECK(f);
  s = sched_new(f, 1);
  b = sched_get_block(s, "C", NULL, &st);
  CHECK_EQ(sched_get_loops(s, b, l, 2, &st), 2);
  CHECK(sched_rfactor(s, l[1], 0, &st) < 0);
  CHECK_ERR(st, "RFactor: block C is not the first block under loop i");
  sched_free(s);
  ir_func_free(f);
}

/* ---- cross-thread reduction ------------------------------------------------------- */

/* MetaSchedule's CrossThreadReduction: the reduction loops fused, split
 * [None, 32], the inner part bound to threadIdx.x, the init kept. No
 * primitive of its own; Bind allows it on threadIdx.* only. */
DG_TEST(sched_reduction_cross_thread) {
  dg_status st;
  dg_func *f = wl_build("norm_bmn:b=2,m=4,n=16,dtype=f32", &st);
  CHECK(f);
  sched *s = sched_new(f, 1);
  int b = sched_get_block(s, "C", NULL, &st);
  int l[3];
  CHECK_EQ(sched_get_loops(s, b, l, 3, &st), 3);
  int fu = sched_fuse(s, l + 1, 2, true, &st);
  CHECK(fu >= 0);
  sched_val ft[2] = {TS_NONE, ts_int(32)};
  int lt[2];
  CHECK_EQ(sched_split(s, fu, ft, 2, true, false, lt, &st), 2);
  CHECK(sched_bind(s, lt[1], DG_TAG_THREAD_X, &st));
  CHECK(sched_bind(s, l[0], DG_TAG_BLOCK_X, &st));
  CHECK(!sched_bind(s, lt[0], DG_TAG_BLOCK_Y, &st));
  CHECK_ERR(st, "Bind: loop i_j_fused_0 cannot be blockIdx.y: block C binds it to reduction variable v_i");
  CHECK(ts_verified(s));
  CHECK(ts_text_is(s,
                "kernel main(A: f32[2, 4, 16], D: f32[2]):\n"
                "  block root:\n"
                "    alloc C: f32[2]\n"
                "    for b in 2 bind(blockIdx.x):\n"
                "      for i_j_fused_0 in 2:\n"
                "        for i_j_fused_1 in 32 bind(threadIdx.x):\n"
                "          block C(v_b: S(2) = b, v_i: R(4) = i_j_fused_0 * 2 + i_j_fused_1 // 16, v_j: R(16) = i_j_fused_1 % 16):\n"
                "            reads A[v_b, v_i, v_j]\n"
                "            writes C[v_b]\n"
                "            init:\n"
                "              C[v_b] = 0.0\n"
                "            C[v_b] = C[v_b] + A[v_b, v_i, v_j] * A[v_b, v_i, v_j]\n"
                "    for b_1 in 2:\n"
                "      block D(v_b_1: S(2) = b_1):\n"
                "        reads C[v_b_1]\n"
                "        writes D[v_b_1]\n"
                "        D[v_b_1] = sqrt(C[v_b_1])\n"));
  CHECK(ts_same_numbers_seed(f, sched_func(s), 7));
  CHECK(ts_replays(f, s));
  /* TVM's DecomposeReduction primitive does not look at thread bindings and
   * neither does ours: it is RewriteReductionBlock that skips such blocks.
   * RFactor needs a serial loop, so the bound one is refused. */
  CHECK(sched_rfactor(s, lt[1], 0, &st) < 0);
  CHECK_ERR(st, "RFactor: loop i_j_fused_1 is threadIdx.x; rfactor needs a serial loop");
  CHECK(sched_decompose_reduction(s, b, lt[0], &st) >= 0);
  CHECK(ts_verified(s));
  char *txt = ir_print(sched_func(s));
  CHECK(strstr(txt,
               "    for b in 2 bind(blockIdx.x):\n"
               "      block C_init(v_b_2: S(2) = b):\n"
               "        writes C[v_b_2]\n"
               "        C[v_b_2] = 0.0\n"
               "      for i_j_fused_0 in 2:\n"
               "        for i_j_fused_1 in 32 bind(threadIdx.x):\n"
               "          block C_update(") != NULL);
  free(txt);
  CHECK(ts_same_numbers_seed(f, sched_func(s), 7)); /* the interpreter runs threads one by one */
  CHECK(ts_replays(f, s));
  sched_free(s);
  ir_func_free(f);

  /* softmax: both reductions as cross-thread reductions over [None, 32] */
  f = wl_build("softmax:m=3,n=64,dtype=f32", &st);
  CHECK(f);
  s = sched_new(f, 1);
  const char *names[2] = {"T_softmax_maxelem", "T_softmax_expsum"};
  for (int k = 0; k < 2; k++) {
    int rb = sched_get_block(s, names[k], NULL, &st);
    int rl[2];
    CHECK_EQ(sched_get_loops(s, rb, rl, 2, &st), 2);
    int sp[2];
    CHECK_EQ(sched_split(s, rl[1], ft, 2, true, false, sp, &st), 2);
    CHECK(sched_bind(s, sp[1], DG_TAG_THREAD_X, &st));
    CHECK(sched_bind(s, rl[0], DG_TAG_BLOCK_X, &st));
    CHECK(ts_verified(s));
  }
  CHECK(ts_same_numbers_seed(f, sched_func(s), 7));
  CHECK(ts_replays(f, s));
  sched_free(s);
  ir_func_free(f);
}

/* Trace JSON of the two kinds, in TVM's layout. */
DG_TEST(sched_reduction_trace_json) {
  dg_func *f = ts_parse(MATMUL);
  dg_status st;
  sched_trace *t = sched_trace_from_json(
      "[[[\"GetBlock\",[],[\"C\",\"main\"],[\"b0\"]],[\"GetLoops\",[\"b0\"],[],[\"l1\",\"l2\",\"l3\"]],"
      "[\"Split\",[\"l3\",\"None\",4],[1,0],[\"l4\",\"l5\"]],[\"RFactor\",[\"l5\"],[0],[\"b6\"]],"
      "[\"GetLoops\",[\"b6\"],[],[\"l7\",\"l8\",\"l9\",\"l10\"]],"
      "[\"DecomposeReduction\",[\"b6\",\"l9\"],[],[\"b11\"]],"
      "[\"DecomposeReduction\",[\"b0\",\"l5\"],[],[\"b12\"]]],[]]",
      &st);
  CHECK_OK(st);
  sched *s = sched_new(f, 1);
  CHECK(sched_replay(s, t, false, false, &st));
  CHECK_OK(st);
  CHECK(ts_verified(s));
  CHECK(ts_same_numbers_seed(f, sched_func(s), 7));
  CHECK(ir_find_block(sched_func(s), "C_rf_init") && ir_find_block(sched_func(s), "C_rf_update"));
  CHECK(ir_find_block(sched_func(s), "C_init") && ir_find_block(sched_func(s), "C_update"));
  char *js = sched_trace_to_json(sched_get_trace(s));
  char *want = sched_trace_to_json(t);
  CHECK_STREQ(js, want);
  free(js);
  free(want);
  sched_trace_free(t);
  sched_free(s);
  /* a replayed step that fails names the instruction */
  t = sched_trace_from_json(
      "[[[\"GetBlock\",[],[\"C\",\"main\"],[\"b0\"]],[\"GetLoops\",[\"b0\"],[],[\"l1\",\"l2\",\"l3\"]],"
      "[\"RFactor\",[\"l1\"],[0],[\"b4\"]]],[]]",
      &st);
  CHECK_OK(st);
  s = sched_new(f, 1);
  CHECK(!sched_replay(s, t, false, false, &st));
  CHECK_ERR(st, "instruction 2: RFactor: loop i binds a spatial variable of block C");
  sched_trace_free(t);
  sched_free(s);
  ir_func_free(f);
}

/* An imperfect split of a spatial loop predicates the block; after rfactor
 * both the rf block and the write-back block keep that predicate (found by
 * fuzz-schedules: the write-back once ran past the buffer's end). */
DG_TEST(sched_reduction_rfactor_keeps_spatial_predicate) {
  dg_status st;
  dg_func *f = wl_build("reduce_sum:m=45,n=12,dtype=f32", &st);
  CHECK(f);
  sched *s = sched_new(f, 1);
  int b = sched_get_block(s, "A_red", NULL, &st);
  CHECK(b >= 0);
  int l[2];
  CHECK_EQ(sched_get_loops(s, b, l, 2, &st), 2);
  sched_val fs[2] = {ts_int(4), TS_NONE}; /* 45 -> [4, 12]: 48 > 45, predicated */
  int li[2];
  CHECK_EQ(sched_split(s, l[0], fs, 2, true, false, li, &st), 2);
  sched_val fk[2] = {TS_NONE, ts_int(3)};
  int lk[2];
  CHECK_EQ(sched_split(s, l[1], fk, 2, true, false, lk, &st), 2);
  CHECK(sched_rfactor(s, lk[1], 0, &st) >= 0);
  CHECK(ts_verified(s));
  CHECK(ts_same_numbers_seed(f, sched_func(s), 7));
  CHECK(ts_replays(f, s));
  char *txt = ir_print(sched_func(s));
  int n_where = 0;
  for (const char *p = txt; (p = strstr(p, "where ")); p++) n_where++;
  CHECK_MSG(n_where == 2, "expected the predicate on both blocks:\n%s", txt);
  free(txt);
  sched_free(s);
  ir_func_free(f);
}
