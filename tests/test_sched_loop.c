/* test_sched_loop.c: Split, Fuse, Reorder, AddUnitLoop: expected kernel
 * text, numerics against the unscheduled kernel, replay, invalid uses. */
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


DG_TEST(sched_split_perfect_and_imperfect) {
  dg_func *f = ts_parse(MATMUL);
  CHECK(f);
  sched *s = sched_new(f, 1);
  dg_status st;
  int b = sched_get_block(s, "C", NULL, &st);
  int l[3];
  CHECK_EQ(sched_get_loops(s, b, l, 3, &st), 3);
  sched_val fi[2] = {TS_NONE, ts_int(4)};
  int li[2];
  CHECK_EQ(sched_split(s, l[0], fi, 2, true, false, li, &st), 2);
  sched_val fj[2] = {ts_int(4), TS_NONE}; /* 10 -> [4, 3]: imperfect, predicated */
  int lj[2];
  CHECK_EQ(sched_split(s, l[1], fj, 2, true, false, lj, &st), 2);
  CHECK(ts_verified(s));
  char *txt = ir_print(sched_func(s));
  CHECK_STREQ(txt,
              "kernel main(A: f32[12, 8], B: f32[8, 10], C: f32[12, 10]):\n"
              "  block root:\n"
              "    for i_0, i_1, j_0, j_1, k in grid(3, 4, 4, 3, 8):\n"
              "      block C(vi: S(12) = i_0 * 4 + i_1, vj: S(10) = j_0 * 3 + j_1, vk: R(8) = k):\n"
              "        reads A[vi, vk], B[vk, vj]\n"
              "        writes C[vi, vj]\n"
              "        where j_0 * 3 + j_1 < 10\n"
              "        init:\n"
              "          C[vi, vj] = 0.0\n"
              "        C[vi, vj] = C[vi, vj] + A[vi, vk] * B[vk, vj]\n");
  free(txt);
  CHECK(ts_same_numbers(f, sched_func(s)));
  CHECK(ts_replays(f, s));
  /* the consumed loops are stale now */
  CHECK(sched_split(s, l[0], fi, 2, true, false, li, &st) < 0);
  CHECK_ERR(st, "Split: loop: loop l1 (i) is stale");
  /* factors that do not cover the extent */
  sched_val small[2] = {ts_int(2), ts_int(2)};
  CHECK(sched_split(s, l[2], small, 2, true, false, li, &st) < 0);
  CHECK_ERR(st, "factors of loop k multiply to 4, less than its extent 8");
  sched_val two_none[2] = {TS_NONE, TS_NONE};
  CHECK(sched_split(s, l[2], two_none, 2, true, false, li, &st) < 0);
  CHECK_ERR(st, "at most one factor may be None");
  sched_val neg[2] = {TS_NONE, ts_int(0)};
  CHECK(sched_split(s, l[2], neg, 2, true, false, li, &st) < 0);
  CHECK_ERR(st, "factors must be positive");
  sched_free(s);
  ir_func_free(f);
}

DG_TEST(sched_fuse_and_split_back) {
  dg_func *f = ts_parse(MATMUL);
  sched *s = sched_new(f, 1);
  dg_status st;
  int b = sched_get_block(s, "C", NULL, &st);
  int l[3];
  sched_get_loops(s, b, l, 3, &st);
  int ij = sched_fuse(s, l, 2, true, &st);
  CHECK(ij >= 0);
  CHECK(ts_verified(s));
  char *txt = ir_print(sched_func(s));
  CHECK(strstr(txt, "for i_j_fused, k in grid(120, 8):") != NULL);
  CHECK(strstr(txt, "vi: S(12) = i_j_fused // 10, vj: S(10) = i_j_fused % 10") != NULL);
  free(txt);
  CHECK(ts_same_numbers(f, sched_func(s)));
  /* split the fused loop by the inner extent: the bindings come back to
   * plain loop variables */
  sched_val fs[2] = {TS_NONE, ts_int(10)};
  int lo[2];
  CHECK_EQ(sched_split(s, ij, fs, 2, true, false, lo, &st), 2);
  txt = ir_print(sched_func(s));
  CHECK(strstr(txt, "vi: S(12) = i_j_fused_0, vj: S(10) = i_j_fused_1") != NULL);
  free(txt);
  CHECK(ts_same_numbers(f, sched_func(s)));
  CHECK(ts_replays(f, s));
  /* loops that are not directly nested */
  int l2[3];
  sched_get_loops(s, b, l2, 3, &st);
  int pair[2] = {l2[0], l2[2]};
  CHECK(sched_fuse(s, pair, 2, true, &st) < 0);
  CHECK_ERR(st, "loop k is not the only child of loop i_j_fused_0");
  /* a bound loop cannot be fused */
  CHECK(sched_bind(s, l2[1], DG_TAG_THREAD_X, &st));
  CHECK(sched_fuse(s, l2, 2, true, &st) < 0);
  CHECK_ERR(st, "loop i_j_fused_1 is threadIdx.x; fuse needs a plain serial loop");
  sched_free(s);
  ir_func_free(f);
}

DG_TEST(sched_reorder_keeps_handles) {
  dg_func *f = ts_parse(MATMUL);
  sched *s = sched_new(f, 1);
  dg_status st;
  int b = sched_get_block(s, "C", NULL, &st);
  int l[3];
  sched_get_loops(s, b, l, 3, &st);
  int order[3] = {l[2], l[0], l[1]};
  CHECK(sched_reorder(s, order, 3, &st));
  CHECK(ts_verified(s));
  char *txt = ir_print(sched_func(s));
  CHECK(strstr(txt, "for k, i, j in grid(8, 12, 10):") != NULL);
  free(txt);
  CHECK(ts_same_numbers(f, sched_func(s)));
  /* handles still name the same loops */
  CHECK(sched_parallel(s, l[0], &st));
  txt = ir_print(sched_func(s));
  CHECK(strstr(txt, "for i in 12 parallel:") != NULL);
  free(txt);
  /* a partial reorder: only the given loops move, among their positions */
  int two[2] = {l[1], l[2]};
  CHECK(sched_reorder(s, two, 2, &st));
  txt = ir_print(sched_func(s));
  CHECK(strstr(txt, "for j in 10:\n      for i in 12 parallel:\n        for k in 8:") != NULL);
  free(txt);
  CHECK(ts_same_numbers(f, sched_func(s)));
  CHECK(ts_replays(f, s));
  int dup[2] = {l[0], l[0]};
  CHECK(!sched_reorder(s, dup, 2, &st));
  CHECK_ERR(st, "loop i appears twice");
  sched_free(s);
  ir_func_free(f);
}

DG_TEST(sched_add_unit_loop) {
  dg_func *f = ts_parse(MATMUL);
  sched *s = sched_new(f, 1);
  dg_status st;
  int b = sched_get_block(s, "C", NULL, &st);
  int u = sched_add_unit_loop(s, b, &st);
  CHECK(u >= 0);
  int l[4];
  CHECK_EQ(sched_get_loops(s, b, l, 4, &st), 4);
  CHECK(l[3] != u);
  CHECK(ts_verified(s));
  char *txt = ir_print(sched_func(s));
  CHECK(strstr(txt, "for i, j, k, u in grid(12, 10, 8, 1):") != NULL);
  free(txt);
  CHECK(ts_same_numbers(f, sched_func(s)));
  CHECK(ts_replays(f, s));
  int root = sched_get_block(s, "root", NULL, &st);
  CHECK(sched_add_unit_loop(s, root, &st) < 0);
  CHECK_ERR(st, "cannot add a loop above the root block");
  sched_free(s);
  ir_func_free(f);
}

/* MetaSchedule's tiling of GMM/0 ("SSSRRSRS" with the decisions of TVM's
 * gmm_0 design space), loops only: split, reorder, fuse, bind. */
DG_TEST(sched_gmm_tiling) {
  dg_status st;
  dg_func *f = wl_build("GMM/0", &st);
  CHECK(f);
  sched *s = sched_new(f, 1);
  int b = sched_get_block(s, "Z", NULL, &st);
  int l[4];
  CHECK_EQ(sched_get_loops(s, b, l, 4, &st), 4);
  int64_t d[4][5] = {{1, 1, 1, 1, 1}, {1, 32, 1, 2, 2}, {1, 1, 2, 64, 1}, {1, 32, 4}};
  int t[4][5];
  for (int a = 0; a < 4; a++) {
    int n = a == 3 ? 3 : 5;
    int v[5];
    CHECK_EQ(sched_sample_perfect_tile(s, l[a], n, 64, d[a], v, &st), n);
    sched_val fv[5];
    for (int k = 0; k < n; k++) fv[k] = (sched_val){.kind = SV_RV, .i = v[k]};
    CHECK_EQ(sched_split(s, l[a], fv, n, true, false, t[a], &st), n);
  }
  int order[] = {t[0][0], t[1][0], t[2][0], t[0][1], t[1][1], t[2][1], t[0][2], t[1][2], t[2][2],
                 t[3][0], t[3][1], t[0][3], t[1][3], t[2][3], t[3][2], t[0][4], t[1][4], t[2][4]};
  CHECK(sched_reorder(s, order, 18, &st));
  dg_thread_tag tags[3] = {DG_TAG_BLOCK_X, DG_TAG_VTHREAD_X, DG_TAG_THREAD_X};
  for (int g = 0; g < 3; g++) {
    int fl = sched_fuse(s, &order[3 * g], 3, true, &st);
    CHECK(fl >= 0);
    CHECK(sched_bind(s, fl, tags[g], &st));
  }
  CHECK_OK(st);
  CHECK(ts_verified(s));
  char *txt = ir_print(sched_func(s));
  CHECK(strstr(txt, "bind(blockIdx.x)") && strstr(txt, "bind(vthread.x)") && strstr(txt, "bind(threadIdx.x)"));
  free(txt);
  CHECK(ts_same_numbers(f, sched_func(s)));
  CHECK(ts_replays(f, s));
  sched_free(s);
  ir_func_free(f);
}

/* A loop that carries spatial and reduction variables at once may be split
 * but not reordered: the init would no longer run on the first visit. */
DG_TEST(sched_reorder_rejects_mixed_loops) {
  dg_func *f = ts_parse(MATMUL);
  sched *s = sched_new(f, 1);
  dg_status st;
  int b = sched_get_block(s, "C", NULL, &st);
  int l[3];
  sched_get_loops(s, b, l, 3, &st);
  int jk = sched_fuse(s, l + 1, 2, true, &st);
  CHECK(jk >= 0);
  sched_val fs[2] = {{.kind = SV_INT, .i = 4}, {.kind = SV_NONE}};
  int p[2];
  CHECK_EQ(sched_split(s, jk, fs, 2, true, false, p, &st), 2);
  int swap[2] = {p[1], p[0]};
  CHECK(!sched_reorder(s, swap, 2, &st));
  CHECK_ERR(st, "loop j_k_fused_1 is bound to both spatial and reduction variables of block C");
  CHECK(ts_same_numbers(f, sched_func(s)));
  sched_free(s);
  ir_func_free(f);
}

/* Split refuses a loop nest deeper than SCHED_MAX_LOOP_DEPTH (every walk
 * of a nest keeps its loops in a bounded stack): a graph a model wrote
 * with 32-part tiles of every loop is refused at the split that would go
 * past it, with its reason, and the schedule is left as it was. */
DG_TEST(sched_split_refuses_deep_nests) {
  dg_func *f = ts_parse(MATMUL);
  CHECK(f);
  sched *s = sched_new(f, 1);
  dg_status st;
  int b = sched_get_block(s, "C", NULL, &st);
  int l[3];
  CHECK_EQ(sched_get_loops(s, b, l, 3, &st), 3);
  sched_val ones[32];
  for (int k = 0; k < 32; k++) ones[k] = ts_int(1);
  ones[0] = TS_NONE; /* 1 x ... x 1 x 12 */
  int parts[32];
  /* 3 loops -> 34: within the limit */
  CHECK_EQ(sched_split(s, l[0], ones, 32, true, false, parts, &st), 32);
  char *before = ir_print(sched_func(s));
  /* 34 -> 65: refused, nothing changed */
  int more[32];
  CHECK(sched_split(s, l[1], ones, 32, true, false, more, &st) < 0);
  CHECK_ERR(st, "would nest 65 loops, more than 48");
  char *after = ir_print(sched_func(s));
  CHECK_STREQ(after, before);
  free(before);
  free(after);
  /* a smaller split still fits */
  CHECK_EQ(sched_split(s, l[1], ones, 8, true, false, more, &st), 8);
  CHECK(ts_same_numbers(f, sched_func(s)));
  sched_free(s);
  ir_func_free(f);
}
