/* test_sched_cache.c: the data-movement primitives: CacheRead, CacheWrite,
 * ReIndex, SetScope, StorageAlign. Each is checked against kernel text
 * written by hand (what TVM produces, in our printing), ir_verify after every
 * step, the interpreter (the scheduled kernel computes bit for bit what the
 * unscheduled one computes), a trace JSON round trip with replay, and its
 * invalid uses with their messages (a failed step leaves the kernel and the
 * trace as they were). */
#include <stdlib.h>

#include "dragon/rt.h"
#include "dragon/sched.h"
#include "dragon/wl.h"
#include "test.h"

/* C = A·B (a reduction into an allocated buffer), then D = C + 1. */
static const char *MATMUL =
    "kernel main(A: f32[16, 16], B: f32[16, 16], D: f32[16, 16]):\n"
    "  block root:\n"
    "    alloc C: f32[16, 16]\n"
    "    for i, j, k in grid(16, 16, 16):\n"
    "      block C(vi: S(16) = i, vj: S(16) = j, vk: R(16) = k):\n"
    "        reads A[vi, vk], B[vk, vj]\n"
    "        writes C[vi, vj]\n"
    "        init:\n"
    "          C[vi, vj] = 0.0\n"
    "        C[vi, vj] = C[vi, vj] + A[vi, vk] * B[vk, vj]\n"
    "    for i_1, j_1 in grid(16, 16):\n"
    "      block D(ui: S(16) = i_1, uj: S(16) = j_1):\n"
    "        reads C[ui, uj]\n"
    "        writes D[ui, uj]\n"
    "        D[ui, uj] = C[ui, uj] + 1.0\n";

/* A producer and its consumer under one common loop i. */
static const char *FUSED =
    "kernel main(A: f32[16, 16], Q: f32[16, 16]):\n"
    "  block root:\n"
    "    alloc P: f32[16, 16]\n"
    "    for i in 16:\n"
    "      for j in 16:\n"
    "        block P(vi: S(16) = i, vj: S(16) = j):\n"
    "          reads A[vi, vj]\n"
    "          writes P[vi, vj]\n"
    "          P[vi, vj] = A[vi, vj] * 2.0\n"
    "      for j_1 in 16:\n"
    "        block Q(ui: S(16) = i, uj: S(16) = j_1):\n"
    "          reads P[ui, uj]\n"
    "          writes Q[ui, uj]\n"
    "          Q[ui, uj] = P[ui, uj] + 1.0\n";

static const char *SMALL_CONV =
    "conv2d_nhwc:n=1,h=6,w=6,ci=2,co=4,kernel=3,stride=1,pad=1,dilation=1,groups=1,dtype=f32";

static dg_func *parse(const char *text) {
  dg_status st;
  dg_func *f = ir_parse(text, "test", &st);
  if (!f) fprintf(stderr, "%s\n", st.msg);
  return f;
}

static dg_func *build(const char *spec) {
  dg_status st;
  dg_func *f = wl_build(spec, &st);
  if (!f) fprintf(stderr, "%s\n", st.msg);
  return f;
}

static bool verified(sched *s) {
  dg_status st;
  if (ir_verify(sched_func(s), &st)) return true;
  fprintf(stderr, "verify: %s\n", st.msg);
  return false;
}

static bool text_is(sched *s, const char *want) {
  char *got = ir_print(sched_func(s));
  bool ok = strcmp(got, want) == 0;
  if (!ok) fprintf(stderr, "--- got\n%s--- want\n%s", got, want);
  free(got);
  return ok;
}

/* The outputs of one run of f on the inputs of seed 5 (caller frees). */
static rt_tensors *run(const dg_func *f) {
  dg_status st;
  rt_tensors *ts = dg_calloc(1, sizeof *ts);
  if (!rt_tensors_init(ts, f, &st)) {
    free(ts);
    return NULL;
  }
  rt_data_fill(ts, 5, rt_data_dist_for(f));
  rt_data_poison(ts);
  if (!rt_interp_run(f, ts->args, false, &st)) {
    fprintf(stderr, "interp: %s\n", st.msg);
    rt_tensors_free(ts);
    free(ts);
    return NULL;
  }
  return ts;
}

/* The scheduled kernel g computes exactly what f computes (the copies do
 * not reorder any arithmetic, so the outputs agree bit for bit). */
static bool same_numbers(const dg_func *f, const dg_func *g) {
  rt_tensors *a = run(f), *b = run(g);
  bool ok = a && b;
  int64_t checked = 0;
  for (int i = 0; ok && i < a->n; i++) {
    if (!a->t[i].is_output) continue;
    for (int64_t k = 0; ok && k < a->t[i].numel; k++) {
      double x = rt_data_get(&a->t[i], k, false), y = rt_data_get(&b->t[i], k, false);
      if (x != y) {
        fprintf(stderr, "%s[%lld]: %g, want %g\n", a->t[i].buf->name, (long long)k, y, x);
        ok = false;
      }
      checked++;
    }
  }
  if (a) rt_tensors_free(a);
  if (b) rt_tensors_free(b);
  free(a);
  free(b);
  return ok && checked > 0;
}

/* Trace -> JSON -> trace -> replay on a fresh schedule of f: the same
 * kernel and the same JSON. */
static bool replays(const dg_func *f, sched *s) {
  dg_status st;
  char *js = sched_trace_to_json(sched_get_trace(s));
  sched_trace *t = sched_trace_from_json(js, &st);
  sched *s2 = sched_new(f, 9);
  bool ok = t && sched_replay(s2, t, false, false, &st);
  if (!ok) fprintf(stderr, "replay: %s\n", st.msg);
  ok = ok && ir_func_equal(sched_func(s), sched_func(s2));
  char *js2 = sched_trace_to_json(sched_get_trace(s2));
  ok = ok && strcmp(js, js2) == 0;
  free(js);
  free(js2);
  sched_trace_free(t);
  sched_free(s2);
  return ok;
}

/* The trace's JSON holds `want` (one instruction, TVM's layout). */
static bool trace_has(sched *s, const char *want) {
  char *js = sched_trace_to_json(sched_get_trace(s));
  bool ok = strstr(js, want) != NULL;
  if (!ok) fprintf(stderr, "trace %s lacks %s\n", js, want);
  free(js);
  return ok;
}

/* ---- CacheRead ------------------------------------------------------------ */

DG_TEST(sched_cache_read_input_and_intermediate) {
  dg_func *f = parse(MATMUL);
  CHECK(f);
  sched *s = sched_new(f, 1);
  dg_status st;
  int c = sched_get_block(s, "C", NULL, &st);
  int d = sched_get_block(s, "D", NULL, &st);
  /* an input: copied whole, first thing in the root; MetaSchedule's form */
  int a_sh = sched_cache_read(s, c, 0, DG_SCOPE_SHARED, &c, 1, &st);
  CHECK_OK(st);
  CHECK(a_sh >= 0 && verified(s));
  /* an intermediate: copied after its writer, before its reader */
  int c_loc = sched_cache_read(s, d, 0, DG_SCOPE_LOCAL, NULL, 0, &st);
  CHECK_OK(st);
  CHECK(verified(s));
  CHECK(text_is(s,
      "kernel main(A: f32[16, 16], B: f32[16, 16], D: f32[16, 16]):\n"
      "  block root:\n"
      "    alloc C: f32[16, 16]\n"
      "    alloc A_shared: f32[16, 16] shared\n"
      "    alloc C_local: f32[16, 16] local\n"
      "    for ax0, ax1 in grid(16, 16):\n"
      "      block A_shared(v0: S(16) = ax0, v1: S(16) = ax1):\n"
      "        reads A[v0, v1]\n"
      "        writes A_shared[v0, v1]\n"
      "        A_shared[v0, v1] = A[v0, v1]\n"
      "    for i, j, k in grid(16, 16, 16):\n"
      "      block C(vi: S(16) = i, vj: S(16) = j, vk: R(16) = k):\n"
      "        reads A_shared[vi, vk], B[vk, vj]\n"
      "        writes C[vi, vj]\n"
      "        init:\n"
      "          C[vi, vj] = 0.0\n"
      "        C[vi, vj] = C[vi, vj] + A_shared[vi, vk] * B[vk, vj]\n"
      "    for ax0_1, ax1_1 in grid(16, 16):\n"
      "      block C_local(v0_1: S(16) = ax0_1, v1_1: S(16) = ax1_1):\n"
      "        reads C[v0_1, v1_1]\n"
      "        writes C_local[v0_1, v1_1]\n"
      "        C_local[v0_1, v1_1] = C[v0_1, v1_1]\n"
      "    for i_1, j_1 in grid(16, 16):\n"
      "      block D(ui: S(16) = i_1, uj: S(16) = j_1):\n"
      "        reads C_local[ui, uj]\n"
      "        writes D[ui, uj]\n"
      "        D[ui, uj] = C_local[ui, uj] + 1.0\n"));
  /* the outputs are the new blocks, usable by later steps */
  int loops[4];
  CHECK_EQ(sched_get_loops(s, a_sh, loops, 4, &st), 2);
  CHECK_EQ(sched_get_loops(s, c_loc, loops, 4, &st), 2);
  CHECK(trace_has(s, "[\"CacheRead\",[\"b0\",[\"b0\"]],[0,\"shared\"],[\"b2\"]]"));
  CHECK(trace_has(s, "[\"CacheRead\",[\"b1\",[]],[0,\"local\"],[\"b3\"]]"));
  CHECK(same_numbers(f, sched_func(s)));
  CHECK(replays(f, s));
  sched_free(s);
  ir_func_free(f);
}

DG_TEST(sched_cache_read_under_common_loop) {
  /* writer and reader under loop i: the copy goes between them inside i,
   * covers the writer's region relaxed over j only (one row), and keeps the
   * buffer's full shape (TVM's cache_full_region) */
  dg_func *f = parse(FUSED);
  CHECK(f);
  sched *s = sched_new(f, 1);
  dg_status st;
  int q = sched_get_block(s, "Q", NULL, &st);
  CHECK(sched_cache_read(s, q, 0, DG_SCOPE_LOCAL, NULL, 0, &st) >= 0);
  CHECK_OK(st);
  CHECK(verified(s));
  CHECK(text_is(s,
      "kernel main(A: f32[16, 16], Q: f32[16, 16]):\n"
      "  block root:\n"
      "    alloc P: f32[16, 16]\n"
      "    alloc P_local: f32[16, 16] local\n"
      "    for i in 16:\n"
      "      for j in 16:\n"
      "        block P(vi: S(16) = i, vj: S(16) = j):\n"
      "          reads A[vi, vj]\n"
      "          writes P[vi, vj]\n"
      "          P[vi, vj] = A[vi, vj] * 2.0\n"
      "      for ax0, ax1 in grid(1, 16):\n"
      "        block P_local(v0: S(16) = ax0 + i, v1: S(16) = ax1):\n"
      "          reads P[v0, v1]\n"
      "          writes P_local[v0, v1]\n"
      "          P_local[v0, v1] = P[v0, v1]\n"
      "      for j_1 in 16:\n"
      "        block Q(ui: S(16) = i, uj: S(16) = j_1):\n"
      "          reads P_local[ui, uj]\n"
      "          writes Q[ui, uj]\n"
      "          Q[ui, uj] = P_local[ui, uj] + 1.0\n"));
  CHECK(same_numbers(f, sched_func(s)));
  CHECK(replays(f, s));
  /* a cache write of the same producer: the copy back goes before Q's
   * subtree, inside loop i as well */
  int p = sched_get_block(s, "P", NULL, &st);
  CHECK(sched_cache_write(s, p, 0, DG_SCOPE_SHARED, NULL, 0, &st) >= 0);
  CHECK_OK(st);
  CHECK(verified(s));
  CHECK(text_is(s,
      "kernel main(A: f32[16, 16], Q: f32[16, 16]):\n"
      "  block root:\n"
      "    alloc P: f32[16, 16]\n"
      "    alloc P_local: f32[16, 16] local\n"
      "    alloc P_shared: f32[16, 16] shared\n"
      "    for i in 16:\n"
      "      for j in 16:\n"
      "        block P(vi: S(16) = i, vj: S(16) = j):\n"
      "          reads A[vi, vj]\n"
      "          writes P_shared[vi, vj]\n"
      "          P_shared[vi, vj] = A[vi, vj] * 2.0\n"
      "      for ax0_1, ax1_1 in grid(1, 16):\n"
      "        block P_shared(v0_1: S(16) = ax0_1 + i, v1_1: S(16) = ax1_1):\n"
      "          reads P_shared[v0_1, v1_1]\n"
      "          writes P[v0_1, v1_1]\n"
      "          P[v0_1, v1_1] = P_shared[v0_1, v1_1]\n"
      "      for ax0, ax1 in grid(1, 16):\n"
      "        block P_local(v0: S(16) = ax0 + i, v1: S(16) = ax1):\n"
      "          reads P[v0, v1]\n"
      "          writes P_local[v0, v1]\n"
      "          P_local[v0, v1] = P[v0, v1]\n"
      "      for j_1 in 16:\n"
      "        block Q(ui: S(16) = i, uj: S(16) = j_1):\n"
      "          reads P_local[ui, uj]\n"
      "          writes Q[ui, uj]\n"
      "          Q[ui, uj] = P_local[ui, uj] + 1.0\n"));
  CHECK(same_numbers(f, sched_func(s)));
  CHECK(replays(f, s));
  sched_free(s);
  ir_func_free(f);
}

DG_TEST(sched_cache_read_tiled_region) {
  /* rows split by 4 under loop i0: the copy inside i0 covers the writer's
   * rows i0 * 4 .. i0 * 4 + 3 (relaxed over i1 and j) */
  static const char *const TILED =
      "kernel main(A: f32[16, 16], Q: f32[16, 16]):\n"
      "  block root:\n"
      "    alloc P: f32[16, 16]\n"
      "    for i0 in 4:\n"
      "      for i1, j in grid(4, 16):\n"
      "        block P(vi: S(16) = i0 * 4 + i1, vj: S(16) = j):\n"
      "          reads A[vi, vj]\n"
      "          writes P[vi, vj]\n"
      "          P[vi, vj] = A[vi, vj] * 2.0\n"
      "      for i1_1, j_1 in grid(4, 16):\n"
      "        block Q(ui: S(16) = i0 * 4 + i1_1, uj: S(16) = j_1):\n"
      "          reads P[ui, uj]\n"
      "          writes Q[ui, uj]\n"
      "          Q[ui, uj] = P[ui, uj] - 1.0\n";
  dg_func *f = parse(TILED);
  CHECK(f);
  sched *s = sched_new(f, 1);
  dg_status st;
  int q = sched_get_block(s, "Q", NULL, &st);
  CHECK(sched_cache_read(s, q, 0, DG_SCOPE_SHARED, &q, 1, &st) >= 0);
  CHECK_OK(st);
  CHECK(verified(s));
  CHECK(text_is(s,
      "kernel main(A: f32[16, 16], Q: f32[16, 16]):\n"
      "  block root:\n"
      "    alloc P: f32[16, 16]\n"
      "    alloc P_shared: f32[16, 16] shared\n"
      "    for i0 in 4:\n"
      "      for i1, j in grid(4, 16):\n"
      "        block P(vi: S(16) = i0 * 4 + i1, vj: S(16) = j):\n"
      "          reads A[vi, vj]\n"
      "          writes P[vi, vj]\n"
      "          P[vi, vj] = A[vi, vj] * 2.0\n"
      "      for ax0, ax1 in grid(4, 16):\n"
      "        block P_shared(v0: S(16) = ax0 + i0 * 4, v1: S(16) = ax1):\n"
      "          reads P[v0, v1]\n"
      "          writes P_shared[v0, v1]\n"
      "          P_shared[v0, v1] = P[v0, v1]\n"
      "      for i1_1, j_1 in grid(4, 16):\n"
      "        block Q(ui: S(16) = i0 * 4 + i1_1, uj: S(16) = j_1):\n"
      "          reads P_shared[ui, uj]\n"
      "          writes Q[ui, uj]\n"
      "          Q[ui, uj] = P_shared[ui, uj] - 1.0\n"));
  CHECK(same_numbers(f, sched_func(s)));
  CHECK(replays(f, s));
  sched_free(s);
  ir_func_free(f);
}

DG_TEST(sched_cache_read_conv_padding) {
  /* the padded input (an intermediate the whole conv reads) and the raw
   * input of the padding block */
  dg_func *f = build(SMALL_CONV);
  CHECK(f);
  sched *s = sched_new(f, 1);
  dg_status st;
  int conv = sched_get_block(s, "conv2d_nhwc", NULL, &st);
  int pad = sched_get_block(s, "PadInput", NULL, &st);
  CHECK(sched_cache_read(s, conv, 0, DG_SCOPE_SHARED, &conv, 1, &st) >= 0);
  CHECK(verified(s));
  CHECK(sched_cache_read(s, pad, 0, DG_SCOPE_LOCAL, &pad, 1, &st) >= 0);
  CHECK(verified(s));
  CHECK(sched_cache_read(s, conv, 1, DG_SCOPE_SHARED, &conv, 1, &st) >= 0);
  CHECK_OK(st);
  CHECK(verified(s));
  CHECK(text_is(s,
      "kernel main(inputs: f32[1, 6, 6, 2], weight: f32[3, 3, 2, 4], conv2d_nhwc: f32[1, 6, 6, 4]):\n"
      "  block root:\n"
      "    alloc PadInput: f32[1, 8, 8, 2]\n"
      "    alloc PadInput_shared: f32[1, 8, 8, 2] shared\n"
      "    alloc inputs_local: f32[1, 6, 6, 2] local\n"
      "    alloc weight_shared: f32[3, 3, 2, 4] shared\n"
      "    for ax0_2, ax1_2, ax2_2, ax3_2 in grid(3, 3, 2, 4):\n"
      "      block weight_shared(v0_2: S(3) = ax0_2, v1_2: S(3) = ax1_2, v2_2: S(2) = ax2_2, v3_2: S(4) = ax3_2):\n"
      "        reads weight[v0_2, v1_2, v2_2, v3_2]\n"
      "        writes weight_shared[v0_2, v1_2, v2_2, v3_2]\n"
      "        weight_shared[v0_2, v1_2, v2_2, v3_2] = weight[v0_2, v1_2, v2_2, v3_2]\n"
      "    for ax0_1, ax1_1, ax2_1, ax3_1 in grid(1, 6, 6, 2):\n"
      "      block inputs_local(v0_1: S(1) = ax0_1, v1_1: S(6) = ax1_1, v2_1: S(6) = ax2_1, v3_1: S(2) = ax3_1):\n"
      "        reads inputs[v0_1, v1_1, v2_1, v3_1]\n"
      "        writes inputs_local[v0_1, v1_1, v2_1, v3_1]\n"
      "        inputs_local[v0_1, v1_1, v2_1, v3_1] = inputs[v0_1, v1_1, v2_1, v3_1]\n"
      "    for i0, i1, i2, i3 in grid(1, 8, 8, 2):\n"
      "      block PadInput(v_i0: S(1) = i0, v_i1: S(8) = i1, v_i2: S(8) = i2, v_i3: S(2) = i3):\n"
      "        reads inputs_local[v_i0, v_i1 - 1, v_i2 - 1, v_i3]\n"
      "        writes PadInput[v_i0, v_i1, v_i2, v_i3]\n"
      "        PadInput[v_i0, v_i1, v_i2, v_i3] = select(v_i1 >= 1 && v_i1 < 7 && v_i2 >= 1 && v_i2 < 7, inputs_local[v_i0, v_i1 - 1, v_i2 - 1, v_i3], 0.0)\n"
      "    for ax0, ax1, ax2, ax3 in grid(1, 8, 8, 2):\n"
      "      block PadInput_shared(v0: S(1) = ax0, v1: S(8) = ax1, v2: S(8) = ax2, v3: S(2) = ax3):\n"
      "        reads PadInput[v0, v1, v2, v3]\n"
      "        writes PadInput_shared[v0, v1, v2, v3]\n"
      "        PadInput_shared[v0, v1, v2, v3] = PadInput[v0, v1, v2, v3]\n"
      "    for n, h, w, co, rh, rw, rc in grid(1, 6, 6, 4, 3, 3, 2):\n"
      "      block conv2d_nhwc(v_n: S(1) = n, v_h: S(6) = h, v_w: S(6) = w, v_co: S(4) = co, v_rh: R(3) = rh, v_rw: R(3) = rw, v_rc: R(2) = rc):\n"
      "        reads PadInput_shared[v_n, v_h + v_rh, v_w + v_rw, v_co // 4 * 2 + v_rc], weight_shared[v_rh, v_rw, v_rc, v_co]\n"
      "        writes conv2d_nhwc[v_n, v_h, v_w, v_co]\n"
      "        init:\n"
      "          conv2d_nhwc[v_n, v_h, v_w, v_co] = 0.0\n"
      "        conv2d_nhwc[v_n, v_h, v_w, v_co] = conv2d_nhwc[v_n, v_h, v_w, v_co] + PadInput_shared[v_n, v_h + v_rh, v_w + v_rw, v_co // 4 * 2 + v_rc] * weight_shared[v_rh, v_rw, v_rc, v_co]\n"));
  CHECK(same_numbers(f, sched_func(s)));
  CHECK(replays(f, s));
  sched_free(s);
  ir_func_free(f);
}

/* ---- CacheWrite ------------------------------------------------------------ */

DG_TEST(sched_cache_write_reduction_and_output) {
  dg_func *f = parse(MATMUL);
  CHECK(f);
  sched *s = sched_new(f, 1);
  dg_status st;
  int c = sched_get_block(s, "C", NULL, &st);
  int d = sched_get_block(s, "D", NULL, &st);
  /* the reduction accumulates in the cache (init included); the copy back
   * goes right before its reader D */
  CHECK(sched_cache_write(s, c, 0, DG_SCOPE_LOCAL, NULL, 0, &st) >= 0);
  CHECK_OK(st);
  CHECK(verified(s));
  /* an output with no reader: the copy back goes last; a dotted scope */
  CHECK(sched_cache_write(s, d, 0, DG_SCOPE_SHARED_DYN, NULL, 0, &st) >= 0);
  CHECK_OK(st);
  CHECK(verified(s));
  CHECK(text_is(s,
      "kernel main(A: f32[16, 16], B: f32[16, 16], D: f32[16, 16]):\n"
      "  block root:\n"
      "    alloc C: f32[16, 16]\n"
      "    alloc C_local: f32[16, 16] local\n"
      "    alloc D_shared_dyn: f32[16, 16] shared.dyn\n"
      "    for i, j, k in grid(16, 16, 16):\n"
      "      block C(vi: S(16) = i, vj: S(16) = j, vk: R(16) = k):\n"
      "        reads A[vi, vk], B[vk, vj]\n"
      "        writes C_local[vi, vj]\n"
      "        init:\n"
      "          C_local[vi, vj] = 0.0\n"
      "        C_local[vi, vj] = C_local[vi, vj] + A[vi, vk] * B[vk, vj]\n"
      "    for ax0, ax1 in grid(16, 16):\n"
      "      block C_local(v0: S(16) = ax0, v1: S(16) = ax1):\n"
      "        reads C_local[v0, v1]\n"
      "        writes C[v0, v1]\n"
      "        C[v0, v1] = C_local[v0, v1]\n"
      "    for i_1, j_1 in grid(16, 16):\n"
      "      block D(ui: S(16) = i_1, uj: S(16) = j_1):\n"
      "        reads C[ui, uj]\n"
      "        writes D_shared_dyn[ui, uj]\n"
      "        D_shared_dyn[ui, uj] = C[ui, uj] + 1.0\n"
      "    for ax0_1, ax1_1 in grid(16, 16):\n"
      "      block D_shared_dyn(v0_1: S(16) = ax0_1, v1_1: S(16) = ax1_1):\n"
      "        reads D_shared_dyn[v0_1, v1_1]\n"
      "        writes D[v0_1, v1_1]\n"
      "        D[v0_1, v1_1] = D_shared_dyn[v0_1, v1_1]\n"));
  CHECK(trace_has(s, "[\"CacheWrite\",[\"b0\",[]],[0,\"local\"],[\"b2\"]]"));
  CHECK(trace_has(s, "[\"CacheWrite\",[\"b1\",[]],[0,\"shared.dyn\"],[\"b3\"]]"));
  CHECK(same_numbers(f, sched_func(s)));
  CHECK(replays(f, s));
  sched_free(s);
  ir_func_free(f);
}

DG_TEST(sched_cache_write_with_consumers) {
  /* D reads the cache itself; nothing else reads C, so the copy back goes
   * to the end of the scope (TVM's CacheLocDetector without related blocks) */
  dg_func *f = parse(MATMUL);
  CHECK(f);
  sched *s = sched_new(f, 1);
  dg_status st;
  int c = sched_get_block(s, "C", NULL, &st);
  int d = sched_get_block(s, "D", NULL, &st);
  CHECK(sched_cache_write(s, c, 0, DG_SCOPE_SHARED, &d, 1, &st) >= 0);
  CHECK_OK(st);
  CHECK(verified(s));
  CHECK(text_is(s,
      "kernel main(A: f32[16, 16], B: f32[16, 16], D: f32[16, 16]):\n"
      "  block root:\n"
      "    alloc C: f32[16, 16]\n"
      "    alloc C_shared: f32[16, 16] shared\n"
      "    for i, j, k in grid(16, 16, 16):\n"
      "      block C(vi: S(16) = i, vj: S(16) = j, vk: R(16) = k):\n"
      "        reads A[vi, vk], B[vk, vj]\n"
      "        writes C_shared[vi, vj]\n"
      "        init:\n"
      "          C_shared[vi, vj] = 0.0\n"
      "        C_shared[vi, vj] = C_shared[vi, vj] + A[vi, vk] * B[vk, vj]\n"
      "    for i_1, j_1 in grid(16, 16):\n"
      "      block D(ui: S(16) = i_1, uj: S(16) = j_1):\n"
      "        reads C_shared[ui, uj]\n"
      "        writes D[ui, uj]\n"
      "        D[ui, uj] = C_shared[ui, uj] + 1.0\n"
      "    for ax0, ax1 in grid(16, 16):\n"
      "      block C_shared(v0: S(16) = ax0, v1: S(16) = ax1):\n"
      "        reads C_shared[v0, v1]\n"
      "        writes C[v0, v1]\n"
      "        C[v0, v1] = C_shared[v0, v1]\n"));
  CHECK(trace_has(s, "[\"CacheWrite\",[\"b0\",[\"b1\"]],[0,\"shared\"],[\"b2\"]]"));
  CHECK(same_numbers(f, sched_func(s)));
  CHECK(replays(f, s));
  sched_free(s);
  ir_func_free(f);
}

DG_TEST(sched_cache_gmm_metaschedule_steps) {
  /* the data movement of MetaSchedule's MultiLevelTiling on GMM/0: a local
   * write cache, then shared read caches of both operands for [block] */
  dg_func *f = build("GMM/0");
  CHECK(f);
  sched *s = sched_new(f, 1);
  dg_status st;
  int z = sched_get_block(s, "Z", NULL, &st);
  int zl = sched_cache_write(s, z, 0, DG_SCOPE_LOCAL, NULL, 0, &st);
  CHECK(zl >= 0 && verified(s));
  int xs = sched_cache_read(s, z, 0, DG_SCOPE_SHARED, &z, 1, &st);
  CHECK(xs >= 0 && verified(s));
  int ys = sched_cache_read(s, z, 1, DG_SCOPE_SHARED, &z, 1, &st);
  CHECK(ys >= 0 && verified(s));
  CHECK_OK(st);
  CHECK(text_is(s,
      "kernel main(X: f32[1, 128, 128], Y: f32[1, 128, 128], Z: f32[1, 128, 128]):\n"
      "  block root:\n"
      "    alloc Z_local: f32[1, 128, 128] local\n"
      "    alloc X_shared: f32[1, 128, 128] shared\n"
      "    alloc Y_shared: f32[1, 128, 128] shared\n"
      "    for ax0_2, ax1_2, ax2_2 in grid(1, 128, 128):\n"
      "      block Y_shared(v0_2: S(1) = ax0_2, v1_2: S(128) = ax1_2, v2_2: S(128) = ax2_2):\n"
      "        reads Y[v0_2, v1_2, v2_2]\n"
      "        writes Y_shared[v0_2, v1_2, v2_2]\n"
      "        Y_shared[v0_2, v1_2, v2_2] = Y[v0_2, v1_2, v2_2]\n"
      "    for ax0_1, ax1_1, ax2_1 in grid(1, 128, 128):\n"
      "      block X_shared(v0_1: S(1) = ax0_1, v1_1: S(128) = ax1_1, v2_1: S(128) = ax2_1):\n"
      "        reads X[v0_1, v1_1, v2_1]\n"
      "        writes X_shared[v0_1, v1_1, v2_1]\n"
      "        X_shared[v0_1, v1_1, v2_1] = X[v0_1, v1_1, v2_1]\n"
      "    for b, i, j, k in grid(1, 128, 128, 128):\n"
      "      block Z(v_b: S(1) = b, v_i: S(128) = i, v_j: S(128) = j, v_k: R(128) = k):\n"
      "        reads X_shared[v_b, v_i, v_k], Y_shared[v_b, v_k, v_j]\n"
      "        writes Z_local[v_b, v_i, v_j]\n"
      "        init:\n"
      "          Z_local[v_b, v_i, v_j] = 0.0\n"
      "        Z_local[v_b, v_i, v_j] = Z_local[v_b, v_i, v_j] + X_shared[v_b, v_i, v_k] * Y_shared[v_b, v_k, v_j]\n"
      "    for ax0, ax1, ax2 in grid(1, 128, 128):\n"
      "      block Z_local(v0: S(1) = ax0, v1: S(128) = ax1, v2: S(128) = ax2):\n"
      "        reads Z_local[v0, v1, v2]\n"
      "        writes Z[v0, v1, v2]\n"
      "        Z[v0, v1, v2] = Z_local[v0, v1, v2]\n"));
  /* TVM's trace JSON for these steps, and a replay of it */
  char *js = sched_trace_to_json(sched_get_trace(s));
  CHECK_STREQ(js,
      "[[[\"GetBlock\",[],[\"Z\",\"main\"],[\"b0\"]],"
      "[\"CacheWrite\",[\"b0\",[]],[0,\"local\"],[\"b1\"]],"
      "[\"CacheRead\",[\"b0\",[\"b0\"]],[0,\"shared\"],[\"b2\"]],"
      "[\"CacheRead\",[\"b0\",[\"b0\"]],[1,\"shared\"],[\"b3\"]]],[]]");
  free(js);
  CHECK(replays(f, s));
  sched_free(s);
  ir_func_free(f);
}

/* ---- ReIndex ------------------------------------------------------------------ */

DG_TEST(sched_cache_reindex_read_and_write) {
  dg_func *f = parse(MATMUL);
  CHECK(f);
  sched *s = sched_new(f, 1);
  dg_status st;
  int c = sched_get_block(s, "C", NULL, &st);
  CHECK(sched_reindex(s, c, 0, true, &st) >= 0);
  CHECK_OK(st);
  CHECK(verified(s));
  /* B is read as B[vk, vj]: the new buffer follows the iteration order */
  CHECK(sched_reindex(s, c, 1, false, &st) >= 0);
  CHECK_OK(st);
  CHECK(verified(s));
  CHECK(text_is(s,
      "kernel main(A: f32[16, 16], B: f32[16, 16], D: f32[16, 16]):\n"
      "  block root:\n"
      "    alloc C: f32[16, 16]\n"
      "    alloc C_reindex: f32[16, 16]\n"
      "    alloc B_reindex: f32[16, 16]\n"
      "    for ax0_1, ax1_1 in grid(16, 16):\n"
      "      block B_reindex_reindex(v0_1: S(16) = ax0_1, v1_1: S(16) = ax1_1):\n"
      "        reads B[v1_1, v0_1]\n"
      "        writes B_reindex[v0_1, v1_1]\n"
      "        B_reindex[v0_1, v1_1] = B[v1_1, v0_1]\n"
      "    for i, j, k in grid(16, 16, 16):\n"
      "      block C(vi: S(16) = i, vj: S(16) = j, vk: R(16) = k):\n"
      "        reads A[vi, vk], B_reindex[vj, vk]\n"
      "        writes C_reindex[vi, vj]\n"
      "        init:\n"
      "          C_reindex[vi, vj] = 0.0\n"
      "        C_reindex[vi, vj] = C_reindex[vi, vj] + A[vi, vk] * B_reindex[vj, vk]\n"
      "    for ax0, ax1 in grid(16, 16):\n"
      "      block C_reindex(v0: S(16) = ax0, v1: S(16) = ax1):\n"
      "        reads C_reindex[v0, v1]\n"
      "        writes C[v0, v1]\n"
      "        C[v0, v1] = C_reindex[v0, v1]\n"
      "    for i_1, j_1 in grid(16, 16):\n"
      "      block D(ui: S(16) = i_1, uj: S(16) = j_1):\n"
      "        reads C[ui, uj]\n"
      "        writes D[ui, uj]\n"
      "        D[ui, uj] = C[ui, uj] + 1.0\n"));
  CHECK(trace_has(s, "[\"ReIndex\",[\"b0\"],[0,1],[\"b1\"]]"));
  CHECK(trace_has(s, "[\"ReIndex\",[\"b0\"],[1,0],[\"b2\"]]"));
  CHECK(same_numbers(f, sched_func(s)));
  CHECK(replays(f, s));
  sched_free(s);
  ir_func_free(f);
}

DG_TEST(sched_cache_reindex_conv_and_unit_iter) {
  /* conv: the padded input is read at [v_n, v_h + v_rh, v_w + v_rw,
   * v_co // 4 * 2 + v_rc]; v_co // 4 is 0 on v_co's domain, so the reindex
   * buffer has one dimension per other iteration variable, in iteration
   * order; the weight's misses n, h and w */
  dg_func *f = build(SMALL_CONV);
  CHECK(f);
  sched *s = sched_new(f, 1);
  dg_status st;
  int conv = sched_get_block(s, "conv2d_nhwc", NULL, &st);
  int r = sched_reindex(s, conv, 1, false, &st);
  CHECK_OK(st);
  CHECK(r >= 0 && verified(s));
  dg_func *g = sched_func(s);
  dg_buffer *wr = ir_find_buffer(g, "weight_reindex");
  CHECK(wr && wr->ndim == 4);
  CHECK(wr->shape[0] == 4 && wr->shape[1] == 3 && wr->shape[2] == 3 && wr->shape[3] == 2);
  CHECK(sched_reindex(s, conv, 0, false, &st) >= 0);
  CHECK(verified(s));
  dg_buffer *pr = ir_find_buffer(g, "PadInput_reindex");
  CHECK(pr && pr->ndim == 6);
  const int64_t pshape[6] = {1, 6, 6, 3, 3, 2};
  for (int i = 0; i < 6; i++) CHECK_EQ(pr->shape[i], pshape[i]);
  CHECK(same_numbers(f, sched_func(s)));
  CHECK(replays(f, s));
  sched_free(s);
  ir_func_free(f);
  /* GMM/0: v_b has a unit domain and stays an index (TVM keeps it) */
  f = build("GMM/0");
  CHECK(f);
  s = sched_new(f, 1);
  int z = sched_get_block(s, "Z", NULL, &st);
  CHECK(sched_reindex(s, z, 0, true, &st) >= 0);
  CHECK(verified(s));
  CHECK(text_is(s,
      "kernel main(X: f32[1, 128, 128], Y: f32[1, 128, 128], Z: f32[1, 128, 128]):\n"
      "  block root:\n"
      "    alloc Z_reindex: f32[1, 128, 128]\n"
      "    for b, i, j, k in grid(1, 128, 128, 128):\n"
      "      block Z(v_b: S(1) = b, v_i: S(128) = i, v_j: S(128) = j, v_k: R(128) = k):\n"
      "        reads X[v_b, v_i, v_k], Y[v_b, v_k, v_j]\n"
      "        writes Z_reindex[v_b, v_i, v_j]\n"
      "        init:\n"
      "          Z_reindex[v_b, v_i, v_j] = 0.0\n"
      "        Z_reindex[v_b, v_i, v_j] = Z_reindex[v_b, v_i, v_j] + X[v_b, v_i, v_k] * Y[v_b, v_k, v_j]\n"
      "    for ax0, ax1, ax2 in grid(1, 128, 128):\n"
      "      block Z_reindex(v0: S(1) = ax0, v1: S(128) = ax1, v2: S(128) = ax2):\n"
      "        reads Z_reindex[v0, v1, v2]\n"
      "        writes Z[v0, v1, v2]\n"
      "        Z[v0, v1, v2] = Z_reindex[v0, v1, v2]\n"));
  CHECK(replays(f, s));
  sched_free(s);
  ir_func_free(f);
}

/* ---- SetScope and StorageAlign -------------------------------------------------- */

DG_TEST(sched_cache_set_scope) {
  dg_func *f = parse(MATMUL);
  CHECK(f);
  sched *s = sched_new(f, 1);
  dg_status st;
  int c = sched_get_block(s, "C", NULL, &st);
  int d = sched_get_block(s, "D", NULL, &st);
  CHECK(sched_set_scope(s, c, 0, DG_SCOPE_SHARED, &st));
  CHECK(verified(s));
  char *t = ir_print(sched_func(s));
  CHECK(strstr(t, "    alloc C: f32[16, 16] shared\n") != NULL);
  free(t);
  CHECK(ir_find_buffer(sched_func(s), "C")->scope == DG_SCOPE_SHARED);
  /* the scope it already has: nothing to do, even for a parameter (TVM) */
  CHECK(sched_set_scope(s, d, 0, DG_SCOPE_GLOBAL, &st));
  CHECK(!sched_set_scope(s, d, 0, DG_SCOPE_LOCAL, &st));
  CHECK_ERR(st, "SetScope: buffer D written by block D is a kernel parameter");
  CHECK(!sched_set_scope(s, c, 1, DG_SCOPE_LOCAL, &st));
  CHECK_ERR(st, "SetScope: block C has 1 write region, so the buffer index must be in [0, 1), got 1");
  CHECK(trace_has(s, "[\"SetScope\",[\"b0\"],[0,\"shared\"],[]]"));
  CHECK(same_numbers(f, sched_func(s)));
  CHECK(replays(f, s));
  sched_free(s);
  ir_func_free(f);
}

DG_TEST(sched_cache_storage_align) {
  dg_func *f = parse(MATMUL);
  CHECK(f);
  sched *s = sched_new(f, 1);
  dg_status st;
  int c = sched_get_block(s, "C", NULL, &st);
  int a = sched_cache_read(s, c, 0, DG_SCOPE_SHARED, &c, 1, &st);
  CHECK(a >= 0);
  CHECK(sched_storage_align(s, a, 0, 0, 32, 8, &st));
  CHECK(sched_storage_align(s, a, 0, -1, 16, 1, &st)); /* axis 1 */
  CHECK(sched_storage_align(s, a, 0, 0, 64, 4, &st));  /* replaces axis 0 */
  CHECK(verified(s));
  const dg_ann *ann = ir_anns_get(&ir_find_block(sched_func(s), "A_shared")->anns, "buffer_dim_align");
  CHECK(ann && ann->kind == DG_ANN_INTS && ann->nints == 8);
  const int64_t want[8] = {0, 0, 64, 4, 0, 1, 16, 1};
  for (int i = 0; i < 8; i++) CHECK_EQ(ann->ints[i], want[i]);
  char *t = ir_print(sched_func(s));
  CHECK(strstr(t, "        attr buffer_dim_align = [0, 0, 64, 4, 0, 1, 16, 1]\n") != NULL);
  free(t);
  CHECK(trace_has(s, "[\"StorageAlign\",[\"b1\"],[0,-1,16,1],[]]"));
  /* invalid uses */
  CHECK(!sched_storage_align(s, a, 0, 2, 32, 8, &st));
  CHECK_ERR(st, "StorageAlign: buffer A_shared has 2 dimensions, so axis must be in [-2, 2), got 2");
  CHECK(!sched_storage_align(s, a, 0, 0, 0, 0, &st));
  CHECK_ERR(st, "StorageAlign: factor must be a positive integer, got 0");
  CHECK(!sched_storage_align(s, a, 0, 0, 32, 32, &st));
  CHECK_ERR(st, "StorageAlign: offset must be in [0, 32) for factor 32, got 32");
  CHECK(!sched_storage_align(s, a, 1, 0, 32, 8, &st));
  CHECK_ERR(st, "block A_shared has 1 write region");
  int d = sched_get_block(s, "D", NULL, &st);
  CHECK(!sched_storage_align(s, d, 0, 0, 32, 8, &st));
  CHECK_ERR(st, "StorageAlign: buffer D written by block D is a kernel parameter");
  CHECK(same_numbers(f, sched_func(s)));
  CHECK(replays(f, s));
  sched_free(s);
  ir_func_free(f);
}

/* ---- invalid uses --------------------------------------------------------------- */

/* Expects a failed step that left the kernel and the trace as they were. */
static bool unchanged(sched *s, const dg_func *before, int n_trace) {
  if (!ir_func_equal(sched_func(s), before)) {
    fprintf(stderr, "a failed step changed the kernel\n");
    return false;
  }
  return sched_get_trace(s)->n == n_trace;
}

DG_TEST(sched_cache_invalid_uses) {
  dg_func *f = parse(MATMUL);
  CHECK(f);
  sched *s = sched_new(f, 1);
  dg_status st;
  int c = sched_get_block(s, "C", NULL, &st);
  int d = sched_get_block(s, "D", NULL, &st);
  int root = sched_get_block(s, "root", NULL, &st);
  int n = sched_get_trace(s)->n;
  dg_func *before = ir_func_clone(sched_func(s));
  CHECK(sched_cache_read(s, c, 2, DG_SCOPE_SHARED, NULL, 0, &st) < 0);
  CHECK_ERR(st, "CacheRead: block C has 2 read regions, so the buffer index must be in [0, 2), got 2");
  CHECK_STREQ(sched_error_brief(s), "CacheRead: block C has 2 read regions, so the buffer index must be in [0, 2), got 2");
  CHECK(sched_cache_write(s, c, -1, DG_SCOPE_LOCAL, NULL, 0, &st) < 0);
  CHECK_ERR(st, "CacheWrite: block C has 1 write region, so the buffer index must be in [0, 1), got -1");
  CHECK(sched_cache_read(s, c, 0, DG_SCOPE_WMMA_ACC, NULL, 0, &st) < 0);
  CHECK_ERR(st, "CacheRead: cannot cache buffer A into wmma.accumulator");
  CHECK(sched_cache_write(s, c, 0, DG_SCOPE_WMMA_A, NULL, 0, &st) < 0);
  CHECK_ERR(st, "CacheWrite: cannot cache the writes of buffer C into wmma.matrix_a");
  CHECK(sched_cache_read(s, c, 0, DG_SCOPE_SHARED, &d, 1, &st) < 0);
  CHECK_ERR(st, "CacheRead: consumer block D does not read buffer A");
  CHECK(sched_cache_write(s, c, 0, DG_SCOPE_LOCAL, &root, 1, &st) < 0);
  CHECK_ERR(st, "CacheWrite: consumer block root is not in the scope of block C (root)");
  CHECK(sched_cache_write(s, c, 0, DG_SCOPE_LOCAL, &c, 1, &st) < 0);
  CHECK_ERR(st, "CacheWrite: consumer block C does not read buffer C");
  CHECK(sched_set_scope(s, root, 0, DG_SCOPE_LOCAL, &st) == false);
  CHECK_ERR(st, "SetScope: block root has 0 write regions");
  CHECK(sched_reindex(s, c, 5, false, &st) < 0);
  CHECK_ERR(st, "ReIndex: block C has 2 read regions");
  CHECK(unchanged(s, before, n));
  ir_func_free(before);
  CHECK(sched_cache_read(s, c, 0, DG_SCOPE_SHARED, &c, 1, &st) >= 0); /* still fine */
  CHECK(verified(s));
  /* unknown scopes and kinds come from traces */
  sched_trace *t = sched_trace_from_json(
      "[[[\"GetBlock\",[],[\"C\",\"main\"],[\"b0\"]],"
      "[\"CacheRead\",[\"b0\",[]],[0,\"texture\"],[\"b1\"]]],[]]", &st);
  CHECK_OK(st);
  sched *s2 = sched_new(f, 1);
  CHECK(!sched_replay(s2, t, false, false, &st));
  CHECK_ERR(st, "instruction 1: CacheRead: unknown storage scope 'texture'");
  sched_trace_free(t);
  t = sched_trace_from_json(
      "[[[\"GetBlock\",[],[\"C\",\"main\"],[\"b0\"]],"
      "[\"ReIndex\",[\"b0\"],[0,2],[\"b1\"]]],[]]", &st);
  CHECK(t && !sched_replay(s2, t, false, false, &st));
  CHECK_ERR(st, "ReIndex: buffer index type must be 0 (read) or 1 (write), got 2");
  sched_trace_free(t);
  sched_free(s2);
  sched_free(s);
  ir_func_free(f);
}

DG_TEST(sched_cache_invalid_leaves_kernel) {
  /* every rejected step leaves the kernel and the trace untouched */
  static const char *const TWO_WRITERS =
      "kernel main(A: f32[16], Q: f32[16]):\n"
      "  block root:\n"
      "    alloc P: f32[16]\n"
      "    for i in 16:\n"
      "      block P0(vi: S(16) = i):\n"
      "        writes P[vi]\n"
      "        P[vi] = 0.0\n"
      "    for i_1 in 16:\n"
      "      block P1(wi: S(16) = i_1):\n"
      "        reads P[wi], A[wi]\n"
      "        writes P[wi]\n"
      "        P[wi] = P[wi] + A[wi]\n"
      "    for i_2 in 16:\n"
      "      block Q(qi: S(16) = i_2):\n"
      "        reads P[qi]\n"
      "        writes Q[qi]\n"
      "        Q[qi] = P[qi] * 2.0\n";
  dg_func *f = parse(TWO_WRITERS);
  CHECK(f);
  sched *s = sched_new(f, 1);
  dg_status st;
  int q = sched_get_block(s, "Q", NULL, &st);
  int p0 = sched_get_block(s, "P0", NULL, &st);
  int p1 = sched_get_block(s, "P1", NULL, &st);
  int n = sched_get_trace(s)->n;
  CHECK(sched_cache_read(s, q, 0, DG_SCOPE_LOCAL, NULL, 0, &st) < 0);
  CHECK_ERR(st, "CacheRead: buffer P is written by 2 blocks in scope root (P0, P1), a cache needs a single writer");
  CHECK(sched_cache_write(s, p0, 0, DG_SCOPE_LOCAL, NULL, 0, &st) < 0);
  CHECK_ERR(st, "CacheWrite: buffer P is written by 2 blocks in scope root (P0, P1)");
  CHECK(sched_cache_read(s, p1, 0, DG_SCOPE_LOCAL, NULL, 0, &st) < 0);
  CHECK_ERR(st, "written by 2 blocks");
  CHECK(unchanged(s, f, n));
  sched_free(s);
  ir_func_free(f);

  /* the consumer sits inside the reduction loop of the writer */
  static const char *const PARTIAL =
      "kernel main(A: f32[16, 16], T: f32[16]):\n"
      "  block root:\n"
      "    alloc S: f32[16]\n"
      "    for i in 16:\n"
      "      for k in 16:\n"
      "        block S(vi: S(16) = i, vk: R(16) = k):\n"
      "          reads A[vi, vk]\n"
      "          writes S[vi]\n"
      "          init:\n"
      "            S[vi] = 0.0\n"
      "          S[vi] = S[vi] + A[vi, vk]\n"
      "        block T(ti: S(16) = i):\n"
      "          reads S[ti]\n"
      "          writes T[ti]\n"
      "          T[ti] = S[ti] * 2.0\n";
  f = parse(PARTIAL);
  CHECK(f);
  s = sched_new(f, 1);
  int tb = sched_get_block(s, "T", NULL, &st);
  int sb = sched_get_block(s, "S", NULL, &st);
  n = sched_get_trace(s)->n;
  CHECK(sched_cache_read(s, tb, 0, DG_SCOPE_LOCAL, NULL, 0, &st) < 0);
  CHECK_ERR(st, "CacheRead: buffer S is reduced by block S over loop k, and its consumers are inside that loop");
  CHECK(unchanged(s, f, n));
  /* ReIndex needs a chain of single loops: S and T share loop k */
  CHECK(sched_reindex(s, sb, 0, true, &st) < 0);
  CHECK_ERR(st, "ReIndex: block S is not under a chain of single loops in scope root: the body of loop k is not a single loop or block");
  CHECK(unchanged(s, f, n));
  sched_free(s);
  ir_func_free(f);

  static const char *const SELF =
      "kernel main(A: f32[16], C: f32[16]):\n"
      "  block root:\n"
      "    for i, k in grid(16, 16):\n"
      "      block C(vi: S(16) = i, vk: R(16) = k):\n"
      "        reads C[vi], A[vk]\n"
      "        writes C[vi]\n"
      "        init:\n"
      "          C[vi] = 0.0\n"
      "        C[vi] = C[vi] + A[vk] * A[vi]\n";
  f = parse(SELF);
  CHECK(f);
  s = sched_new(f, 1);
  int cb = sched_get_block(s, "C", NULL, &st);
  n = sched_get_trace(s)->n;
  CHECK(sched_cache_read(s, cb, 0, DG_SCOPE_LOCAL, NULL, 0, &st) < 0);
  CHECK_ERR(st, "CacheRead: block C both reads and writes buffer C: cache its writes (CacheWrite) instead");
  /* A is loaded at two different indices */
  CHECK(sched_reindex(s, cb, 1, false, &st) < 0);
  CHECK_ERR(st, "ReIndex: block C accesses buffer A with different indices: ReIndex needs one pattern");
  CHECK(unchanged(s, f, n));
  /* the root has no scope */
  int root = sched_get_block(s, "root", NULL, &st);
  n = sched_get_trace(s)->n;
  CHECK(sched_cache_write(s, root, 0, DG_SCOPE_LOCAL, NULL, 0, &st) < 0);
  CHECK_ERR(st, "CacheWrite: block root has 0 write regions");
  CHECK(unchanged(s, f, n));
  /* the cache write of the reduction itself works on this kernel */
  CHECK(sched_cache_write(s, cb, 0, DG_SCOPE_LOCAL, NULL, 0, &st) >= 0);
  CHECK(verified(s));
  CHECK(same_numbers(f, sched_func(s)));
  sched_free(s);
  ir_func_free(f);
}
