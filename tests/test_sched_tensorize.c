/* test_sched_tensorize.c: Blockize, Tensorize and the WMMA intrinsic
 * registry: expected kernel text, numerics against the unscheduled kernel
 * (interpreter), trace replay, a hand-scheduled f16 GEMM in the WMMA style,
 * and the mismatch errors. */
#include <stdlib.h>

#include "dragon/intrin.h"
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


/* Splits loop l into [None, f] (outputs in out[0..1]). */
static bool split2(sched *s, int l, int64_t f, int *out) {
  dg_status st;
  sched_val fs[2] = {TS_NONE, ts_int(f)};
  if (sched_split(s, l, fs, 2, true, false, out, &st) == 2) return true;
  fprintf(stderr, "split: %s\n", st.msg);
  return false;
}

/* Runs a step that must fail with `sub` in its message and leave the
 * kernel exactly as it was. */
#define CHECK_REJECTS(s, call, st, sub)                                    \
  do {                                                                     \
    char *before_ = ir_print(sched_func(s));                               \
    int n_ = sched_get_trace(s)->n;                                        \
    CHECK(!(call));                                                        \
    char *after_ = ir_print(sched_func(s));                                \
    bool same_ = strcmp(before_, after_) == 0;                             \
    free(before_);                                                         \
    free(after_);                                                          \
    CHECK_MSG(same_, "a failed step changed the kernel");                  \
    CHECK_EQ(sched_get_trace(s)->n, n_);                                   \
    CHECK_ERR(st, sub);                                                    \
  } while (0)

DG_TEST(sched_tensorize_blockize_matmul) {
  dg_func *f = ts_parse(MATMUL);
  CHECK(f);
  sched *s = sched_new(f, 1);
  dg_status st;
  int b = sched_get_block(s, "C", NULL, &st);
  int l[3], li[2], lk[2];
  CHECK_EQ(sched_get_loops(s, b, l, 3, &st), 3);
  CHECK(split2(s, l[0], 4, li));
  CHECK(split2(s, l[2], 4, lk));
  int order[5] = {li[0], l[1], lk[0], li[1], lk[1]};
  CHECK(sched_reorder(s, order, 5, &st));
  int o = sched_blockize(s, li[1], true, &st);
  CHECK_OK(st);
  CHECK(o >= 0);
  CHECK(ts_verified(s));
  char *txt = ir_print(sched_func(s));
  CHECK_STREQ(txt,
              "kernel main(A: f32[12, 8], B: f32[8, 10], C: f32[12, 10]):\n"
              "  block root:\n"
              "    for i_0, j, k_0 in grid(3, 10, 2):\n"
              "      block C_o(vi_o: S(3) = i_0, vj_o: S(10) = j, vk_o: R(2) = k_0):\n"
              "        reads A[vi_o * 4:vi_o * 4 + 4, vk_o * 4:vk_o * 4 + 4], B[vk_o * 4:vk_o * 4 + 4, vj_o]\n"
              "        writes C[vi_o * 4:vi_o * 4 + 4, vj_o]\n"
              "        init:\n"
              "          for i_1_1 in 4:\n"
              "            block C_init(vi_i_init: S(4) = i_1_1):\n"
              "              writes C[vi_i_init + vi_o * 4, vj_o]\n"
              "              C[vi_i_init + vi_o * 4, vj_o] = 0.0\n"
              "        for i_1, k_1 in grid(4, 4):\n"
              "          block C(vi_i: S(4) = i_1, vk_i: R(4) = k_1):\n"
              "            reads C[vi_i + vi_o * 4, vj_o], A[vi_i + vi_o * 4, vk_i + vk_o * 4], B[vk_i + vk_o * 4, vj_o]\n"
              "            writes C[vi_i + vi_o * 4, vj_o]\n"
              "            C[vi_i + vi_o * 4, vj_o] = C[vi_i + vi_o * 4, vj_o] + A[vi_i + vi_o * 4, vk_i + vk_o * 4] * B[vk_i + vk_o * 4, vj_o]\n");
  free(txt);
  CHECK(ts_same_numbers_seed(f, sched_func(s), 7));
  CHECK(ts_replays(f, s));
  /* the inner block and the loops kept their identity: the old handles work */
  int in[4];
  CHECK_EQ(sched_get_loops(s, b, in, 4, &st), 2);
  CHECK_EQ(sched_get_loops(s, o, in, 4, &st), 3);
  CHECK(sched_unroll(s, lk[1], &st));
  /* blockize again, one level up: the outer block nests the first one */
  int o2 = sched_blockize(s, l[1], false, &st);
  CHECK_OK(st);
  CHECK(o2 >= 0 && ts_verified(s));
  txt = ir_print(sched_func(s));
  CHECK(strstr(txt, "block C_o_o(vi_o_o: S(3) = i_0, vj_o_o: S(1) = 0, vk_o_o: R(1) = 0):") != NULL);
  CHECK(strstr(txt, "block C_o(vj_o_i: S(10) = j, vk_o_i: R(2) = k_0):") != NULL);
  free(txt);
  CHECK(ts_same_numbers_seed(f, sched_func(s), 7));
  CHECK(ts_replays(f, s));
  sched_free(s);
  ir_func_free(f);
}

static const char *ELEMWISE =
    "kernel main(A: f32[16, 128], B: f32[16, 128]):\n"
    "  block root:\n"
    "    for i0, j0, i1, j1 in grid(1, 8, 16, 16):\n"
    "      block B(vi: S(16) = i0 * 16 + i1, vj: S(128) = j0 * 16 + j1):\n"
    "        reads A[vi, vj]\n"
    "        writes B[vi, vj]\n"
    "        B[vi, vj] = A[vi, vj] + 1.0\n";

/* TVM's test_blockize_outer_int64_shape, with and without unit iterators,
 * and test_blockize_outer (the whole nest). */
DG_TEST(sched_tensorize_blockize_unit_iters) {
  dg_func *f = ts_parse(ELEMWISE);
  CHECK(f);
  for (int preserve = 0; preserve < 2; preserve++) {
    sched *s = sched_new(f, 1);
    dg_status st;
    int b = sched_get_block(s, "B", NULL, &st);
    int l[4];
    CHECK_EQ(sched_get_loops(s, b, l, 4, &st), 4);
    CHECK(sched_blockize(s, l[2], preserve, &st) >= 0);
    CHECK(ts_verified(s));
    char *txt = ir_print(sched_func(s));
    const char *want =
        preserve ? "      block B_o(vi_o: S(1) = i0, vj_o: S(8) = j0):\n"
                   "        reads A[0:16, vj_o * 16:vj_o * 16 + 16]\n"
                   "        writes B[0:16, vj_o * 16:vj_o * 16 + 16]\n"
                   "        for i1, j1 in grid(16, 16):\n"
                   "          block B(vi_i: S(16) = i1, vj_i: S(16) = j1):\n"
                   "            reads A[vi_i, vj_i + vj_o * 16]\n"
                 : "      block B_o(vi_o: S(1) = 0, vj_o: S(8) = j0):\n"
                   "        reads A[0:16, vj_o * 16:vj_o * 16 + 16]\n"
                   "        writes B[0:16, vj_o * 16:vj_o * 16 + 16]\n"
                   "        for i1, j1 in grid(16, 16):\n"
                   "          block B(vi_i: S(16) = i1, vj_i: S(16) = j1):\n"
                   "            reads A[vi_i, vj_i + vj_o * 16]\n";
    CHECK_MSG(strstr(txt, want) != NULL, "got\n%s", txt);
    free(txt);
    CHECK(ts_same_numbers_seed(f, sched_func(s), 7));
    CHECK(ts_replays(f, s));
    sched_free(s);
  }
  sched *s = sched_new(f, 1);
  dg_status st;
  int b = sched_get_block(s, "B", NULL, &st);
  int l[4];
  sched_get_loops(s, b, l, 4, &st);
  CHECK(sched_blockize(s, l[0], true, &st) >= 0);
  char *txt = ir_print(sched_func(s));
  CHECK_MSG(strstr(txt, "    block B_o(vi_o: S(1) = 0, vj_o: S(1) = 0):\n"
                        "      reads A[0:16, 0:128]\n") != NULL,
            "got\n%s", txt);
  CHECK(strstr(txt, "block B(vi_i: S(16) = i0 * 16 + i1, vj_i: S(128) = j0 * 16 + j1):") != NULL);
  free(txt);
  CHECK(ts_same_numbers_seed(f, sched_func(s), 7));
  sched_free(s);
  ir_func_free(f);
}

DG_TEST(sched_tensorize_blockize_errors) {
  dg_func *f = ts_parse(MATMUL);
  CHECK(f);
  sched *s = sched_new(f, 1);
  dg_status st;
  int b = sched_get_block(s, "C", NULL, &st);
  int l[3], lj[2];
  sched_get_loops(s, b, l, 3, &st);
  /* j = j_0 * 4 + j_1 < 10: the predicate mixes both sides of j_1 */
  CHECK(split2(s, l[1], 4, lj));
  CHECK_REJECTS(s, sched_blockize(s, lj[1], true, &st) >= 0, st,
                "Blockize: the predicate j_0 * 4 + j_1 < 10 of block C mixes loops inside and "
                "outside loop j_1");
  CHECK(sched_blockize(s, lj[0], true, &st) >= 0); /* the whole of j is fine */
  CHECK_REJECTS(s, sched_blockize(s, b, true, &st) >= 0, st, "is a block handle, expected a loop");
  sched_free(s);

  /* a fused binding split across the boundary is not affine */
  s = sched_new(f, 1);
  b = sched_get_block(s, "C", NULL, &st);
  sched_get_loops(s, b, l, 3, &st);
  int fused = sched_fuse(s, l, 2, true, &st);
  int lf[2];
  CHECK(split2(s, fused, 8, lf));
  CHECK_REJECTS(s, sched_blockize(s, lf[1], true, &st) >= 0, st,
                "cannot be divided into a part outside loop i_j_fused_1");
  sched_free(s);

  /* two blocks under one loop */
  dg_func *g = ts_parse("kernel main(A: f32[4], B: f32[4], C: f32[4]):\n"
                     "  block root:\n"
                     "    for i in 4:\n"
                     "      block B(vi: S(4) = i):\n"
                     "        reads A[vi]\n"
                     "        writes B[vi]\n"
                     "        B[vi] = A[vi]\n"
                     "      block C(vi_1: S(4) = i):\n"
                     "        reads B[vi_1]\n"
                     "        writes C[vi_1]\n"
                     "        C[vi_1] = B[vi_1]\n");
  CHECK(g);
  s = sched_new(g, 1);
  b = sched_get_block(s, "B", NULL, &st);
  sched_get_loops(s, b, l, 1, &st);
  CHECK_REJECTS(s, sched_blockize(s, l[0], true, &st) >= 0, st,
                "loop i holds 2 blocks; Blockize needs exactly one");
  /* TVM's list-of-blocks form */
  int c = sched_get_block(s, "C", NULL, &st);
  sched_val items[2] = {{.kind = SV_RV, .i = b}, {.kind = SV_RV, .i = c}};
  sched_val in[1] = {{.kind = SV_ARRAY, .items = items, .n = 2}};
  sched_val at[1] = {{.kind = SV_BOOL, .i = 1}};
  sched_inst inst = {.kind = SCHED_INST_BLOCKIZE, .kind_name = "Blockize", .inputs = in,
                     .n_inputs = 1, .attrs = at, .n_attrs = 1};
  int out[1], n_out;
  CHECK_REJECTS(s, sched_apply(s, &inst, out, 1, &n_out, &st), st,
                "Blockize: Blockize of a list of blocks is not supported");
  sched_free(s);
  ir_func_free(g);
  ir_func_free(f);
}

DG_TEST(sched_tensorize_registry) {
  static const char *const names[] = {
      "wmma_fill_16x16x16_f32", "wmma_fill_16x16x16_f16",
      "wmma_load_16x16x16_f16_a_shared_dyn", "wmma_load_16x16x16_f16_a_shared",
      "wmma_load_16x16x16_f16_b_shared_dyn", "wmma_load_16x16x16_f16_b_trans_shared_dyn",
      "wmma_sync_16x16x16_f16f16f32", "wmma_sync_16x16x16_f16f16f32_trans",
      "wmma_sync_16x16x16_f16f16f16", "wmma_store_16x16x16_f32_shared_dyn",
      "wmma_store_16x16x16_f32_global", "wmma_store_16x16x16_f16_shared_dyn",
      "wmma_store_16x16x16_f16_global", "wmma_fill_16x16x16_s32",
      "wmma_load_16x16x16_s8_b_trans_shared_dyn", "wmma_sync_16x16x16_s8s8s32_trans",
      "wmma_store_16x16x16_s32_shared_dyn"};
  for (size_t i = 0; i < DG_ARRAY_LEN(names); i++) {
    const dg_intrin *in = intrin_find(names[i]);
    CHECK_MSG(in && strcmp(in->name, names[i]) == 0, "%s is not registered", names[i]);
    CHECK(in->m == 16 && in->n == 16 && in->k == 16);
  }
  CHECK_EQ(intrin_count(), 34);
  for (int i = 0; i < intrin_count(); i++)
    for (int k = 0; k < i; k++) CHECK(strcmp(intrin_at(i)->name, intrin_at(k)->name) != 0);
  const dg_intrin *sync = intrin_find("wmma_sync_16x16x16_f16f16f32_trans");
  CHECK(sync->kind == DG_INTRIN_MMA && sync->in_dtype == DG_F16 && sync->out_dtype == DG_F32 &&
        sync->trans && sync->dst_scope == DG_SCOPE_WMMA_ACC);
  const dg_intrin *ld = intrin_find("wmma_load_16x16x16_f16_b_trans_shared_dyn");
  CHECK(ld->kind == DG_INTRIN_LOAD_B && ld->src_scope == DG_SCOPE_SHARED_DYN &&
        ld->dst_scope == DG_SCOPE_WMMA_B && strcmp(ld->layout, "col_major") == 0);
  const dg_intrin *stg = intrin_find("wmma_store_16x16x16_f16_global");
  CHECK(stg->kind == DG_INTRIN_STORE && stg->src_scope == DG_SCOPE_WMMA_ACC &&
        stg->dst_scope == DG_SCOPE_GLOBAL && stg->out_dtype == DG_F16);
  CHECK(intrin_find("wmma_sync_16x16x16_f16f16f33") == NULL);
  CHECK(intrin_find(NULL) == NULL);
  const char *close[3];
  CHECK_EQ(intrin_suggest("wmma_sync_16x16x16_f16f16f33", close, 3), 3);
  CHECK_STREQ(close[0], "wmma_sync_16x16x16_f16f16f32");
  CHECK_STREQ(dg_intrin_kind_name(DG_INTRIN_LOAD_B), "load_b");
}

/* The f16 GEMM in the WMMA style: 16x16x16 tiles, A and B through
 * shared.dyn into the matrix_a / matrix_b fragments, C accumulated in a
 * wmma.accumulator fragment, each stage blockized and tensorized. */
DG_TEST(sched_tensorize_wmma_gemm) {
  dg_status st;
  dg_func *f = wl_build("gemm:m=64,n=64,k=64,dtype=f16", &st);
  CHECK_MSG(f, "%s", st.msg);
  sched *s = sched_new(f, 1);
  int b = sched_get_block(s, "C", NULL, &st);
  int l[3], li[2], lj[2], lk[2];
  CHECK_EQ(sched_get_loops(s, b, l, 3, &st), 3);
  CHECK(split2(s, l[0], 16, li));
  CHECK(split2(s, l[1], 16, lj));
  CHECK(split2(s, l[2], 16, lk));
  int order[6] = {li[0], lj[0], lk[0], li[1], lj[1], lk[1]};
  CHECK(sched_reorder(s, order, 6, &st));
  /* on the global buffers, before any cache: an init, then the wrong scope */
  CHECK_REJECTS(s, sched_tensorize(s, li[1], "wmma_sync_16x16x16_f16f16f32", true, &st), st,
                "Tensorize: block C_o does not match wmma_sync_16x16x16_f16f16f32: the block has "
                "an init");
  int acc = sched_cache_write(s, b, 0, DG_SCOPE_WMMA_ACC, NULL, 0, &st);
  CHECK(acc >= 0);
  CHECK(sched_reverse_compute_at(s, acc, lj[0], true, -1, &st));
  int ash = sched_cache_read(s, b, 0, DG_SCOPE_SHARED_DYN, &b, 1, &st);
  CHECK(ash >= 0 && sched_compute_at(s, ash, lk[0], true, -1, &st));
  int bsh = sched_cache_read(s, b, 1, DG_SCOPE_SHARED_DYN, &b, 1, &st);
  CHECK(bsh >= 0 && sched_compute_at(s, bsh, lk[0], true, -1, &st));
  /* the fragment copies land under k_0, right after the shared copies */
  int afr = sched_cache_read(s, b, 0, DG_SCOPE_WMMA_A, &b, 1, &st);
  int bfr = sched_cache_read(s, b, 1, DG_SCOPE_WMMA_B, &b, 1, &st);
  CHECK(afr >= 0 && bfr >= 0);
  int init = sched_decompose_reduction(s, b, lk[0], &st);
  CHECK(init >= 0);
  CHECK(ts_verified(s));

  /* mismatches: tile size, dtype, scope, pattern, name */
  CHECK_REJECTS(s, sched_tensorize(s, lj[1], "wmma_sync_16x16x16_f16f16f32", true, &st), st,
                "block C_update_o does not match wmma_sync_16x16x16_f16f16f32: shape mismatch: "
                "the intrinsic computes a 16x16x16 tile, the block's loops are 16x16");
  CHECK_REJECTS(s, sched_tensorize(s, li[1], "wmma_sync_16x16x16_f16f16f16", true, &st), st,
                "dtype mismatch: accumulator C_wmma_accumulator is f32, the intrinsic needs f16");
  int al[8];
  int n = sched_get_loops(s, afr, al, 8, &st);
  CHECK_EQ(n, 5);
  CHECK_REJECTS(s, sched_tensorize(s, al[3], "wmma_load_16x16x16_f16_a_shared", true, &st), st,
                "wrong scope: source A_shared_dyn is in 'shared.dyn', the intrinsic needs 'shared'");
  CHECK_REJECTS(s, sched_tensorize(s, al[3], "wmma_load_16x16x16_f16_b_shared_dyn", true, &st),
                st,
                "wrong scope: destination A_shared_dyn_wmma_matrix_a is in 'wmma.matrix_a', the "
                "intrinsic needs 'wmma.matrix_b'");
  CHECK_REJECTS(s, sched_tensorize(s, al[3], "wmma_fill_16x16x16_f16", true, &st), st,
                "body pattern mismatch: the stored value is not 0");
  CHECK_REJECTS(s, sched_tensorize(s, al[3], "wmma_load_16x16x16_f16_a_shared_dn", true, &st), st,
                "Tensorize: unknown tensor intrinsic 'wmma_load_16x16x16_f16_a_shared_dn' (closest: "
                "wmma_load_16x16x16_f16_a_shared_dyn, ");

  /* the real thing */
  CHECK(sched_tensorize(s, li[1], "wmma_sync_16x16x16_f16f16f32", true, &st));
  int il[8];
  n = sched_get_loops(s, init, il, 8, &st);
  CHECK_EQ(n, 4);
  CHECK(sched_tensorize(s, il[2], "wmma_fill_16x16x16_f32", true, &st));
  CHECK(sched_tensorize(s, al[3], "wmma_load_16x16x16_f16_a_shared_dyn", true, &st));
  n = sched_get_loops(s, bfr, il, 8, &st);
  CHECK(sched_tensorize(s, il[n - 2], "wmma_load_16x16x16_f16_b_shared_dyn", true, &st));
  n = sched_get_loops(s, acc, il, 8, &st);
  CHECK_EQ(n, 4);
  /* Blockize then Tensorize on the block is the same as Tensorize on the loop */
  int so = sched_blockize(s, il[2], true, &st);
  CHECK(so >= 0);
  CHECK(sched_tensorize(s, so, "wmma_store_16x16x16_f32_global", true, &st));
  CHECK_OK(st);
  CHECK_REJECTS(s, sched_tensorize(s, so, "wmma_store_16x16x16_f32_global", true, &st), st,
                "block C_wmma_accumulator_o is already tensorized");
  CHECK(ts_verified(s));

  dg_func *g = sched_func(s);
  static const char *const tagged[][2] = {
      {"C_update_o", "wmma_sync_16x16x16_f16f16f32"},
      {"C_init_o", "wmma_fill_16x16x16_f32"},
      {"A_shared_dyn_wmma_matrix_a_o", "wmma_load_16x16x16_f16_a_shared_dyn"},
      {"B_shared_dyn_wmma_matrix_b_o", "wmma_load_16x16x16_f16_b_shared_dyn"},
      {"C_wmma_accumulator_o", "wmma_store_16x16x16_f32_global"}};
  for (size_t i = 0; i < DG_ARRAY_LEN(tagged); i++) {
    dg_block *blk = ir_find_block(g, tagged[i][0]);
    CHECK_MSG(blk, "no block %s", tagged[i][0]);
    const dg_ann *a = ir_anns_get(&blk->anns, "tensor_intrin");
    CHECK(a && a->kind == DG_ANN_STR);
    CHECK_STREQ(a->s, tagged[i][1]);
    char why[256];
    CHECK_MSG(intrin_match(intrin_find(tagged[i][1]), g, blk, why, sizeof why), "%s", why);
  }
  char *txt = ir_print(g);
  CHECK(strstr(txt,
               "        block C_update_o(v_i_o: S(4) = i_0, v_j_o: S(4) = j_0, v_k_o: R(4) = k_0):\n"
               "          reads C_wmma_accumulator[v_i_o * 16:v_i_o * 16 + 16, v_j_o * 16:v_j_o * 16 + 16], "
               "A_shared_dyn_wmma_matrix_a[v_i_o * 16:v_i_o * 16 + 16, v_k_o * 16:v_k_o * 16 + 16], "
               "B_shared_dyn_wmma_matrix_b[v_k_o * 16:v_k_o * 16 + 16, v_j_o * 16:v_j_o * 16 + 16]\n"
               "          writes C_wmma_accumulator[v_i_o * 16:v_i_o * 16 + 16, v_j_o * 16:v_j_o * 16 + 16]\n"
               "          attr tensor_intrin = \"wmma_sync_16x16x16_f16f16f32\"\n"
               "          for i_1, j_1, k_1 in grid(16, 16, 16):\n") != NULL);
  free(txt);

  /* what the lowering gets: operands, tile origins, leading dimensions */
  intrin_binding bd;
  char why[256];
  dg_block *mma = ir_find_block(g, "C_update_o");
  CHECK(intrin_bind(intrin_find("wmma_sync_16x16x16_f16f16f32"), g, mma, &bd, why, sizeof why));
  CHECK_EQ(bd.n, 3);
  CHECK_STREQ(bd.ops[0].buf->name, "A_shared_dyn_wmma_matrix_a");
  CHECK_STREQ(bd.ops[1].buf->name, "B_shared_dyn_wmma_matrix_b");
  CHECK_STREQ(bd.ops[2].buf->name, "C_wmma_accumulator");
  CHECK_STREQ(bd.inner->name, "C_update");
  dg_str o;
  dg_str_init(&o);
  ir_print_expr(&o, bd.ops[0].origin[0]);
  dg_str_puts(&o, ", ");
  ir_print_expr(&o, bd.ops[0].origin[1]);
  CHECK_STREQ(o.s, "v_i_o * 16, v_k_o * 16");
  dg_str_free(&o);
  dg_block *store = ir_find_block(g, "C_wmma_accumulator_o");
  CHECK(intrin_bind(intrin_find("wmma_store_16x16x16_f32_global"), g, store, &bd, why, sizeof why));
  CHECK(bd.n == 2 && bd.ops[1].ldm == 64 && strcmp(bd.ops[1].buf->name, "C") == 0);

  CHECK(ts_same_numbers_seed(f, g, 7));
  CHECK(ts_replays(f, s));
  sched_free(s);
  ir_func_free(f);
}

/* Fragments written directly in kernel text: the transposed f16f16f16 mma,
 * and an s32 fill of a 32x32 accumulator in 16x16 tiles. */
DG_TEST(sched_tensorize_kernel_text_fragments) {
  dg_func *f = ts_parse(
      "kernel main(A: f16[16, 16] wmma.matrix_a, B: f16[16, 16] wmma.matrix_b, "
      "C: f16[16, 16] wmma.accumulator):\n"
      "  block root:\n"
      "    for i, j, k in grid(16, 16, 16):\n"
      "      block C(vi: S(16) = i, vj: S(16) = j, vk: R(16) = k):\n"
      "        reads C[vi, vj], A[vi, vk], B[vj, vk]\n"
      "        writes C[vi, vj]\n"
      "        C[vi, vj] = C[vi, vj] + A[vi, vk] * B[vj, vk]\n");
  CHECK(f);
  sched *s = sched_new(f, 1);
  dg_status st;
  int b = sched_get_block(s, "C", NULL, &st);
  int l[3];
  sched_get_loops(s, b, l, 3, &st);
  int o = sched_blockize(s, l[0], true, &st);
  CHECK(o >= 0);
  CHECK_REJECTS(s, sched_tensorize(s, o, "wmma_sync_16x16x16_f16f16f16", true, &st), st,
                "body pattern mismatch: index 0 of operand B B is vj_i");
  CHECK_REJECTS(s, sched_tensorize(s, o, "wmma_sync_16x16x16_f16f16f32_trans", true, &st), st,
                "dtype mismatch: accumulator C is f16, the intrinsic needs f32");
  CHECK(sched_tensorize(s, o, "wmma_sync_16x16x16_f16f16f16_trans", false, &st));
  CHECK(ts_verified(s));
  CHECK(ts_replays(f, s));
  sched_free(s);
  ir_func_free(f);

  f = ts_parse("kernel main(C: i32[32, 32] wmma.accumulator):\n"
            "  block root:\n"
            "    for i, j in grid(32, 32):\n"
            "      block C(vi: S(32) = i, vj: S(32) = j):\n"
            "        writes C[vi, vj]\n"
            "        C[vi, vj] = 0\n");
  CHECK(f);
  s = sched_new(f, 1);
  b = sched_get_block(s, "C", NULL, &st);
  sched_get_loops(s, b, l, 2, &st);
  int li[2], lj[2];
  CHECK(split2(s, l[0], 16, li));
  CHECK(split2(s, l[1], 16, lj));
  int order[4] = {li[0], lj[0], li[1], lj[1]};
  CHECK(sched_reorder(s, order, 4, &st));
  CHECK_REJECTS(s, sched_tensorize(s, li[1], "wmma_fill_16x16x16_f32", true, &st), st,
                "dtype mismatch: output C is i32, the intrinsic needs f32");
  CHECK_REJECTS(s, sched_tensorize(s, lj[1], "wmma_fill_16x16x16_s32", true, &st), st,
                "shape mismatch: the intrinsic computes a 16x16 tile, the block's loops are 16");
  CHECK(sched_tensorize(s, li[1], "wmma_fill_16x16x16_s32", true, &st));
  CHECK(ts_verified(s));
  CHECK(ts_same_numbers_seed(f, sched_func(s), 7));
  CHECK(ts_replays(f, s));
  sched_free(s);
  ir_func_free(f);
}
