/* test_sched_compute.c: the compute-location primitives: ComputeAt,
 * ReverseComputeAt, SampleComputeLocation, ComputeInline,
 * ReverseComputeInline, and the region analysis under them. Each scheduled
 * kernel is compared with hand-written kernel text, verified after every
 * step, run against the unscheduled kernel in the interpreter, and its trace
 * is round-tripped through JSON and replayed. */
#include <stdlib.h>

#include "dragon/rt.h"
#include "dragon/sched.h"
#include "dragon/wl.h"
#include "sched/region.h"
#include "test.h"

/* matmul C = A * B (a reduction) then D = C + 1 */
static const char *MM =
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

/* the matmul block as it prints, indented to `pad` levels of its realize */
#define MM_C_BODY(ind)                                   \
  ind "  reads A[vi, vk], B[vk, vj]\n"                   \
  ind "  writes C[vi, vj]\n"                             \
  ind "  init:\n"                                        \
  ind "    C[vi, vj] = 0.0\n"                            \
  ind "  C[vi, vj] = C[vi, vj] + A[vi, vk] * B[vk, vj]\n"
#define MM_D_BODY(ind)                                   \
  ind "  reads C[ui, uj]\n"                              \
  ind "  writes D[ui, uj]\n"                             \
  ind "  D[ui, uj] = C[ui, uj] + 1.0\n"
#define MM_HEAD                                                      \
  "kernel main(A: f32[16, 16], B: f32[16, 16], D: f32[16, 16]):\n"  \
  "  block root:\n"                                                  \
  "    alloc C: f32[16, 16]\n"

/* a small strided conv with its padding block (C2D's shape) */
static const char *CONV_SPEC =
    "conv2d_nhwc:n=1,h=8,w=8,ci=2,co=4,kernel=3,stride=2,pad=1,dilation=1,groups=1,dtype=f32";

#define CONV_HEAD                                                                          \
  "kernel main(inputs: f32[1, 8, 8, 2], weight: f32[3, 3, 2, 4], conv2d_nhwc: f32[1, 4, "  \
  "4, 4]):\n"                                                                              \
  "  block root:\n"
#define CONV_BLOCK_HEAD(ind)                                                                \
  ind "block conv2d_nhwc(v_n: S(1) = n, v_h: S(4) = h, v_w: S(4) = w, v_co: S(4) = co, "   \
      "v_rh: R(3) = rh, v_rw: R(3) = rw, v_rc: R(2) = rc):\n"
#define CONV_BLOCK_TAIL(ind)                                                               \
  ind "  writes conv2d_nhwc[v_n, v_h, v_w, v_co]\n"                                        \
  ind "  init:\n"                                                                          \
  ind "    conv2d_nhwc[v_n, v_h, v_w, v_co] = 0.0\n"

static dg_func *parse(const char *text) {
  dg_status st;
  dg_func *f = ir_parse(text, "test", &st);
  if (!f) fprintf(stderr, "parse: %s\n", st.msg);
  return f;
}

static dg_func *build(const char *spec) {
  dg_status st;
  dg_func *f = wl_build(spec, &st);
  if (!f) fprintf(stderr, "wl_build: %s\n", st.msg);
  return f;
}

/* The kernel verifies and prints as `want`. */
static bool text_is(sched *s, const char *want) {
  dg_status st;
  CHECKR(ir_verify(sched_func(s), &st), false);
  char *got = ir_print(sched_func(s));
  bool same = strcmp(got, want) == 0;
  if (!same) fprintf(stderr, "--- got\n%s--- want\n%s", got, want);
  free(got);
  return same;
}

/* a and b compute the same outputs from the same inputs (interpreter). */
static bool same_outputs(const dg_func *a, const dg_func *b) {
  dg_status st;
  rt_tensors ta, tb;
  CHECKR(rt_tensors_init(&ta, a, &st), false);
  CHECKR(rt_tensors_init(&tb, b, &st), false);
  rt_data_fill(&ta, 11, RT_DIST_UNIFORM);
  rt_data_fill(&tb, 11, RT_DIST_UNIFORM);
  bool ok = rt_interp_run(a, ta.args, false, &st);
  if (ok) ok = rt_interp_run(b, tb.args, false, &st);
  if (!ok) fprintf(stderr, "interp: %s\n", st.msg);
  int64_t checked = 0;
  for (int i = 0; ok && i < ta.n; i++) {
    if (!ta.t[i].is_output) continue;
    for (int64_t k = 0; ok && k < ta.t[i].numel; k++, checked++) {
      double x = rt_data_get(&ta.t[i], k, false), y = rt_data_get(&tb.t[i], k, false);
      if (!(x == y)) {
        fprintf(stderr, "%s[%lld]: %g vs %g\n", ta.t[i].buf->name, (long long)k, x, y);
        ok = false;
      }
    }
  }
  rt_tensors_free(&ta);
  rt_tensors_free(&tb);
  return ok && checked > 0;
}

/* The trace survives JSON and replays to the same kernel and trace. */
static bool replays(sched *s, const dg_func *orig) {
  dg_status st;
  char *js = sched_trace_to_json(sched_get_trace(s));
  sched_trace *t = sched_trace_from_json(js, &st);
  CHECKR(t != NULL, false);
  sched *r = sched_new(orig, 12345);
  bool ok = sched_replay(r, t, false, false, &st);
  if (!ok) fprintf(stderr, "replay: %s\n", st.msg);
  ok = ok && ir_func_equal(sched_func(s), sched_func(r));
  char *js2 = sched_trace_to_json(sched_get_trace(r));
  ok = ok && strcmp(js, js2) == 0;
  free(js);
  free(js2);
  sched_trace_free(t);
  sched_free(r);
  return ok;
}

/* ---- region analysis ----------------------------------------------------------- */

DG_TEST(sched_compute_region_relax) {
  dg_func *f = ir_func_new("r");
  dg_var *i = ir_var_new(f, "i", DG_I32), *ii = ir_var_new(f, "ii", DG_I32),
         *c = ir_var_new(f, "c", DG_I32);
  dg_ranges relax = {.n = 0}, known = {.n = 0};
  ir_ranges_push(&known, i, 0, 3);
  ir_ranges_push(&relax, ii, 0, 7);
  ir_ranges_push(&relax, c, 0, 63);
  /* i*8 + ii -> [i*8, i*8 + 7] */
  dg_expr *lo, *hi;
  sched_region_relax(f, ir_add(f, ir_mul(f, ir_var(f, i), ir_int(f, 8)), ir_var(f, ii)), &relax,
                     &known, &lo, &hi);
  dg_str s;
  dg_str_init(&s);
  ir_print_expr(&s, lo);
  dg_str_puts(&s, " .. ");
  ir_print_expr(&s, hi);
  CHECK_STREQ(s.s, "i * 8 .. i * 8 + 7");
  /* c // 64 * 3 + ii - i -> [-i, 7 - i]: the floordiv stays in one period */
  dg_str_clear(&s);
  dg_expr *e = ir_sub(f,
                      ir_add(f, ir_mul(f, ir_bin(f, DG_EXPR_FLOORDIV, ir_var(f, c), ir_int(f, 64)),
                                       ir_int(f, 3)),
                             ir_var(f, ii)),
                      ir_var(f, i));
  sched_region_relax(f, e, &relax, &known, &lo, &hi);
  int64_t a;
  CHECK(ir_is_const_int(ir_simplify(f, ir_add(f, lo, ir_var(f, i)), NULL), &a) && a == 0);
  CHECK(ir_is_const_int(ir_simplify(f, ir_add(f, hi, ir_var(f, i)), NULL), &a) && a == 7);
  /* a product of two relaxed variables falls back to constant bounds */
  sched_region_relax(f, ir_mul(f, ir_var(f, ii), ir_var(f, c)), &relax, &known, &lo, &hi);
  CHECK(ir_is_const_int(lo, &a) && a == 0);
  CHECK(ir_is_const_int(hi, &a) && a == 7 * 63);
  /* a point stays as written */
  dg_expr *pt = ir_add(f, ir_var(f, i), ir_int(f, 1));
  sched_region_relax(f, pt, &relax, &known, &lo, &hi);
  CHECK(lo == pt && hi == pt);
  dg_str_free(&s);
  ir_func_free(f);
}

DG_TEST(sched_compute_region_of_block) {
  dg_func *f = parse(MM);
  CHECK(f);
  dg_block *d = ir_find_block(f, "D");
  dg_buffer *C = ir_find_buffer(f, "C");
  sched_path p;
  CHECK(sched_locate_block(f, d, &p));
  /* path: root realize, SEQ, i_1, j_1, D: relaxed below i_1 (index 2) */
  CHECK_EQ(p.n, 5);
  sched_region r;
  dg_ranges known;
  CHECK(sched_region_of_block(f, &p, 2, C, false, false, &r, &known));
  CHECK_EQ(known.n, 1);
  dg_str s;
  dg_str_init(&s);
  for (int k = 0; k < 2; k++) {
    ir_print_expr(&s, r.lo[k]);
    dg_str_puts(&s, ":");
    ir_print_expr(&s, r.hi[k]);
    dg_str_puts(&s, k ? "" : ", ");
  }
  CHECK_STREQ(s.s, "i_1:i_1, 0:15");
  CHECK(!sched_region_of_block(f, &p, 2, C, true, false, &r, NULL));
  /* the whole second nest reads all of C; the first writes all of it */
  dg_block *root = ir_func_root(f);
  CHECK(sched_region_of_subtree(f, root->body, NULL, C, false, &r));
  int64_t a, z;
  CHECK(ir_is_const_int(r.lo[0], &a) && a == 0 && ir_is_const_int(r.hi[0], &z) && z == 15);
  CHECK(sched_region_of_subtree(f, root->body->stmts[0], NULL, C, true, &r));
  CHECK(ir_is_const_int(r.hi[1], &z) && z == 15);
  CHECK(!sched_region_of_subtree(f, root->body->stmts[0], NULL, C, false, &r));
  /* detection from the body gives back the declared regions */
  dg_block *c = ir_find_block(f, "C");
  char *before = ir_print(f);
  sched_region_detect(f, c);
  sched_region_detect(f, d);
  char *after = ir_print(f);
  CHECK_STREQ(after, before);
  free(before);
  free(after);
  dg_str_free(&s);
  ir_func_free(f);
}

/* ---- ComputeAt -------------------------------------------------------------------- */

DG_TEST(sched_compute_at_matmul) {
  dg_func *f = parse(MM);
  CHECK(f);
  sched *s = sched_new(f, 1);
  dg_status st;
  int c = sched_get_block(s, "C", NULL, &st), d = sched_get_block(s, "D", NULL, &st);
  int l[2];
  CHECK_EQ(sched_get_loops(s, d, l, 2, &st), 2);
  int old[3];
  CHECK_EQ(sched_get_loops(s, c, old, 3, &st), 3);
  CHECK(sched_compute_at(s, c, l[0], true, -1, &st));
  CHECK(text_is(s, MM_HEAD
                "    for i_1 in 16:\n"
                "      for ax0, ax1, ax2 in grid(1, 16, 16):\n"
                "        block C(vi: S(16) = i_1 + ax0, vj: S(16) = ax1, vk: R(16) = ax2):\n"
                MM_C_BODY("        ")
                "      for j_1 in 16:\n"
                "        block D(ui: S(16) = i_1, uj: S(16) = j_1):\n"
                MM_D_BODY("        ")));
  CHECK(same_outputs(f, sched_func(s)));
  /* the producer's old loops are gone */
  CHECK(!sched_parallel(s, old[0], &st));
  CHECK_ERR(st, "is stale");
  /* deeper: under j_1, the block handle still good */
  CHECK(sched_compute_at(s, c, l[1], true, -1, &st));
  CHECK(text_is(s, MM_HEAD
                "    for i_1, j_1 in grid(16, 16):\n"
                "      for ax0, ax1, ax2 in grid(1, 1, 16):\n"
                "        block C(vi: S(16) = i_1 + ax0, vj: S(16) = j_1 + ax1, vk: R(16) = ax2):\n"
                MM_C_BODY("        ")
                "      block D(ui: S(16) = i_1, uj: S(16) = j_1):\n"
                MM_D_BODY("      ")));
  CHECK(same_outputs(f, sched_func(s)));
  CHECK(replays(s, f));
  sched_free(s);
  ir_func_free(f);
}

DG_TEST(sched_compute_at_split_predicate) {
  /* a split that does not divide: the producer gets a predicate */
  dg_func *f = parse(MM);
  CHECK(f);
  sched *s = sched_new(f, 1);
  dg_status st;
  int c = sched_get_block(s, "C", NULL, &st), d = sched_get_block(s, "D", NULL, &st);
  int l[2], o[2];
  CHECK_EQ(sched_get_loops(s, d, l, 2, &st), 2);
  sched_val fac[2] = {{.kind = SV_NONE}, {.kind = SV_INT, .i = 5}};
  CHECK_EQ(sched_split(s, l[0], fac, 2, true, false, o, &st), 2);
  CHECK(sched_compute_at(s, c, o[0], false, -1, &st));
  CHECK(text_is(s, MM_HEAD
                "    for i_1_0 in 4:\n"
                "      for ax0, ax1, ax2 in grid(5, 16, 16):\n"
                "        block C(vi: S(16) = i_1_0 * 5 + ax0, vj: S(16) = ax1, vk: R(16) = ax2):\n"
                "          reads A[vi, vk], B[vk, vj]\n"
                "          writes C[vi, vj]\n"
                "          where ax0 + i_1_0 * 5 < 16\n"
                "          init:\n"
                "            C[vi, vj] = 0.0\n"
                "          C[vi, vj] = C[vi, vj] + A[vi, vk] * B[vk, vj]\n"
                "      for i_1_1, j_1 in grid(5, 16):\n"
                "        block D(ui: S(16) = i_1_0 * 5 + i_1_1, uj: S(16) = j_1):\n"
                "          reads C[ui, uj]\n"
                "          writes D[ui, uj]\n"
                "          where i_1_0 * 5 + i_1_1 < 16\n"
                "          D[ui, uj] = C[ui, uj] + 1.0\n"));
  CHECK(same_outputs(f, sched_func(s)));
  CHECK(replays(s, f));
  sched_free(s);
  ir_func_free(f);
}

DG_TEST(sched_compute_at_conv_padding) {
  dg_func *f = build(CONV_SPEC);
  CHECK(f);
  sched *s = sched_new(f, 1);
  dg_status st;
  int p = sched_get_block(s, "PadInput", NULL, &st), cv = sched_get_block(s, "conv2d_nhwc", NULL, &st);
  int l[7];
  CHECK_EQ(sched_get_loops(s, cv, l, 7, &st), 7);
  CHECK(sched_compute_at(s, p, l[2], true, -1, &st));
  CHECK(text_is(s, CONV_HEAD
      "    alloc PadInput: f32[1, 10, 10, 2]\n"
      "    for n, h, w in grid(1, 4, 4):\n"
      "      for ax0, ax1, ax2, ax3 in grid(1, 3, 3, 2):\n"
      "        block PadInput(v_i0: S(1) = ax0, v_i1: S(10) = h * 2 + ax1, v_i2: S(10) = w * 2 + "
      "ax2, v_i3: S(2) = ax3):\n"
      "          reads inputs[v_i0, v_i1 - 1, v_i2 - 1, v_i3]\n"
      "          writes PadInput[v_i0, v_i1, v_i2, v_i3]\n"
      "          PadInput[v_i0, v_i1, v_i2, v_i3] = select(v_i1 >= 1 && v_i1 < 9 && v_i2 >= 1 && "
      "v_i2 < 9, inputs[v_i0, v_i1 - 1, v_i2 - 1, v_i3], 0.0)\n"
      "      for co, rh, rw, rc in grid(4, 3, 3, 2):\n"
      CONV_BLOCK_HEAD("        ")
      "          reads PadInput[v_n, v_h * 2 + v_rh, v_w * 2 + v_rw, v_co // 4 * 2 + v_rc], "
      "weight[v_rh, v_rw, v_rc, v_co]\n"
      CONV_BLOCK_TAIL("        ")
      "          conv2d_nhwc[v_n, v_h, v_w, v_co] = conv2d_nhwc[v_n, v_h, v_w, v_co] + "
      "PadInput[v_n, v_h * 2 + v_rh, v_w * 2 + v_rw, v_co // 4 * 2 + v_rc] * weight[v_rh, v_rw, "
      "v_rc, v_co]\n"));
  CHECK(same_outputs(f, sched_func(s)));
  /* index -2 and an explicit index: the first (only) place under co */
  CHECK(sched_compute_at(s, p, l[3], false, -2, &st));
  CHECK(same_outputs(f, sched_func(s)));
  /* once under co, the block is inside h: it cannot go back out */
  CHECK(!sched_compute_at(s, p, l[1], false, 0, &st));
  CHECK_ERR(st, "ComputeAt: loop h contains block PadInput");
  dg_block *pb = ir_find_block(sched_func(s), "PadInput");
  CHECK(pb && pb->iters[0].binding->kind == DG_EXPR_INT); /* no unit loop kept */
  CHECK(replays(s, f));
  sched_free(s);
  ir_func_free(f);
}

DG_TEST(sched_compute_reverse_at) {
  dg_func *f = parse(MM);
  CHECK(f);
  sched *s = sched_new(f, 1);
  dg_status st;
  int c = sched_get_block(s, "C", NULL, &st), d = sched_get_block(s, "D", NULL, &st);
  int l[3];
  CHECK_EQ(sched_get_loops(s, c, l, 3, &st), 3);
  CHECK(sched_reverse_compute_at(s, d, l[0], false, -1, &st));
  CHECK(text_is(s, MM_HEAD
                "    for i in 16:\n"
                "      for j, k in grid(16, 16):\n"
                "        block C(vi: S(16) = i, vj: S(16) = j, vk: R(16) = k):\n"
                MM_C_BODY("        ")
                "      for ax0 in 16:\n"
                "        block D(ui: S(16) = i, uj: S(16) = ax0):\n"
                MM_D_BODY("        ")));
  CHECK(same_outputs(f, sched_func(s)));
  CHECK(sched_reverse_compute_at(s, d, l[1], true, -1, &st));
  CHECK(text_is(s, MM_HEAD
                "    for i, j in grid(16, 16):\n"
                "      for k in 16:\n"
                "        block C(vi: S(16) = i, vj: S(16) = j, vk: R(16) = k):\n"
                MM_C_BODY("        ")
                "      for ax0, ax1 in grid(1, 1):\n"
                "        block D(ui: S(16) = i + ax0, uj: S(16) = j + ax1):\n"
                MM_D_BODY("        ")));
  CHECK(same_outputs(f, sched_func(s)));
  CHECK(replays(s, f));
  sched_free(s);
  ir_func_free(f);
}

/* ---- ComputeInline / ReverseComputeInline -------------------------------------------- */

DG_TEST(sched_compute_inline_padding) {
  dg_func *f = build(CONV_SPEC);
  CHECK(f);
  sched *s = sched_new(f, 1);
  dg_status st;
  int p = sched_get_block(s, "PadInput", NULL, &st);
  CHECK(sched_compute_inline(s, p, &st));
  CHECK(text_is(s, CONV_HEAD
      "    for n, h, w, co, rh, rw, rc in grid(1, 4, 4, 4, 3, 3, 2):\n"
      CONV_BLOCK_HEAD("      ")
      "        reads inputs[v_n, v_h * 2 + v_rh - 1, v_w * 2 + v_rw - 1, v_co // 4 * 2 + v_rc], "
      "weight[v_rh, v_rw, v_rc, v_co]\n"
      CONV_BLOCK_TAIL("      ")
      "        conv2d_nhwc[v_n, v_h, v_w, v_co] = conv2d_nhwc[v_n, v_h, v_w, v_co] + "
      "select(v_h * 2 + v_rh >= 1 && v_h * 2 + v_rh < 9 && v_w * 2 + v_rw >= 1 && v_w * 2 + "
      "v_rw < 9, inputs[v_n, v_h * 2 + v_rh - 1, v_w * 2 + v_rw - 1, v_co // 4 * 2 + v_rc], "
      "0.0) * weight[v_rh, v_rw, v_rc, v_co]\n"));
  CHECK(same_outputs(f, sched_func(s)));
  /* the inlined block's handle is stale */
  CHECK(!sched_compute_inline(s, p, &st));
  CHECK_ERR(st, "is stale");
  CHECK(replays(s, f));
  sched_free(s);
  ir_func_free(f);
}

/* B = A * 2 over 9 elements, C[u] = B[u + 1] * 3 over 8 */
static const char *SHIFT =
    "kernel main(A: f32[9], C: f32[8]):\n"
    "  block root:\n"
    "    alloc B: f32[9]\n"
    "    for i in 9:\n"
    "      block B(v: S(9) = i):\n"
    "        reads A[v]\n"
    "        writes B[v]\n"
    "        B[v] = A[v] * 2.0\n"
    "    for i_1 in 8:\n"
    "      block C(u: S(8) = i_1):\n"
    "        reads B[u + 1]\n"
    "        writes C[u]\n"
    "        C[u] = B[u + 1] * 3.0\n";

DG_TEST(sched_compute_inline_shifted) {
  dg_func *f = parse(SHIFT);
  CHECK(f);
  dg_status st;
  sched *s = sched_new(f, 1);
  CHECK(sched_compute_inline(s, sched_get_block(s, "B", NULL, &st), &st));
  CHECK(text_is(s, "kernel main(A: f32[9], C: f32[8]):\n"
                   "  block root:\n"
                   "    for i_1 in 8:\n"
                   "      block C(u: S(8) = i_1):\n"
                   "        reads A[u + 1]\n"
                   "        writes C[u]\n"
                   "        C[u] = A[u + 1] * 2.0 * 3.0\n"));
  CHECK(same_outputs(f, sched_func(s)));
  CHECK(replays(s, f));
  sched_free(s);
  /* reverse: the producer stores C[v - 1] where the consumer's domain is */
  s = sched_new(f, 1);
  CHECK(sched_reverse_compute_inline(s, sched_get_block(s, "C", NULL, &st), &st));
  CHECK(text_is(s, "kernel main(A: f32[9], C: f32[8]):\n"
                   "  block root:\n"
                   "    for i in 9:\n"
                   "      block B(v: S(9) = i):\n"
                   "        reads A[v]\n"
                   "        writes C[v - 1]\n"
                   "        where i >= 1\n"
                   "        C[v - 1] = A[v] * 2.0 * 3.0\n"));
  CHECK(same_outputs(f, sched_func(s)));
  CHECK(replays(s, f));
  sched_free(s);
  /* compute-at with an offset: the producer computes v = i_1 + 1 */
  s = sched_new(f, 1);
  int l[1];
  int c = sched_get_block(s, "C", NULL, &st);
  CHECK_EQ(sched_get_loops(s, c, l, 1, &st), 1);
  CHECK(sched_compute_at(s, sched_get_block(s, "B", NULL, &st), l[0], false, -1, &st));
  CHECK(text_is(s, "kernel main(A: f32[9], C: f32[8]):\n"
                   "  block root:\n"
                   "    alloc B: f32[9]\n"
                   "    for i_1 in 8:\n"
                   "      block B(v: S(9) = i_1 + 1):\n"
                   "        reads A[v]\n"
                   "        writes B[v]\n"
                   "        B[v] = A[v] * 2.0\n"
                   "      block C(u: S(8) = i_1):\n"
                   "        reads B[u + 1]\n"
                   "        writes C[u]\n"
                   "        C[u] = B[u + 1] * 3.0\n"));
  CHECK(same_outputs(f, sched_func(s)));
  sched_free(s);
  ir_func_free(f);
}

DG_TEST(sched_compute_reverse_inline_transpose) {
  dg_func *f = parse("kernel main(A: f32[8, 8], C: f32[8, 8]):\n"
                     "  block root:\n"
                     "    alloc B: f32[8, 8]\n"
                     "    for i, j in grid(8, 8):\n"
                     "      block B(vi: S(8) = i, vj: S(8) = j):\n"
                     "        reads A[vi, vj]\n"
                     "        writes B[vi, vj]\n"
                     "        B[vi, vj] = A[vi, vj] * 2.0\n"
                     "    for i_1, j_1 in grid(8, 8):\n"
                     "      block C(ui: S(8) = i_1, uj: S(8) = j_1):\n"
                     "        reads B[uj, ui]\n"
                     "        writes C[ui, uj]\n"
                     "        C[ui, uj] = B[uj, ui] + 1.0\n");
  CHECK(f);
  dg_status st;
  sched *s = sched_new(f, 1);
  CHECK(sched_reverse_compute_inline(s, sched_get_block(s, "C", NULL, &st), &st));
  CHECK(text_is(s, "kernel main(A: f32[8, 8], C: f32[8, 8]):\n"
                   "  block root:\n"
                   "    for i, j in grid(8, 8):\n"
                   "      block B(vi: S(8) = i, vj: S(8) = j):\n"
                   "        reads A[vi, vj]\n"
                   "        writes C[vj, vi]\n"
                   "        C[vj, vi] = A[vi, vj] * 2.0 + 1.0\n"));
  CHECK(same_outputs(f, sched_func(s)));
  CHECK(replays(s, f));
  sched_free(s);
  ir_func_free(f);
}

/* ---- invalid uses ---------------------------------------------------------------------- */

/* The step fails with `msg` and leaves the kernel as it was. */
#define CHECK_REJECTED(s, call, msg)            \
  do {                                          \
    char *before_ = ir_print(sched_func(s));    \
    int n_ = sched_get_trace(s)->n;             \
    CHECK(!(call));                             \
    CHECK_ERR(st, msg);                         \
    char *after_ = ir_print(sched_func(s));     \
    bool same_ = strcmp(before_, after_) == 0;  \
    free(before_);                              \
    free(after_);                               \
    CHECK(same_);                               \
    CHECK_EQ(sched_get_trace(s)->n, n_);        \
  } while (0)

DG_TEST(sched_compute_errors) {
  dg_func *f = parse(MM);
  CHECK(f);
  sched *s = sched_new(f, 1);
  dg_status st;
  int c = sched_get_block(s, "C", NULL, &st), d = sched_get_block(s, "D", NULL, &st);
  int lc[3], ld[2];
  CHECK_EQ(sched_get_loops(s, c, lc, 3, &st), 3);
  CHECK_EQ(sched_get_loops(s, d, ld, 2, &st), 2);
  CHECK_REJECTED(s, sched_compute_inline(s, c, &st),
                 "ComputeInline: cannot inline a reduction block: C has an init statement");
  CHECK_REJECTED(s, sched_compute_inline(s, d, &st),
                 "ComputeInline: block D writes D, which outlives its scope");
  CHECK_REJECTED(s, sched_compute_at(s, d, lc[0], true, -1, &st),
                 "ComputeAt: block D is an output block (it writes D");
  CHECK_REJECTED(s, sched_compute_at(s, c, lc[2], true, -1, &st),
                 "ComputeAt: loop k contains block C");
  CHECK_REJECTED(s, sched_compute_at(s, c, ld[0], true, 5, &st),
                 "ComputeAt: index 5 is not a place for block C under loop i_1: valid are -1, -2 "
                 "and [0, 0]");
  CHECK_REJECTED(s, sched_reverse_compute_at(s, d, ld[1], true, -1, &st),
                 "ReverseComputeAt: loop j_1 contains block D");
  CHECK_REJECTED(s, sched_reverse_compute_inline(s, d, &st),
                 "ReverseComputeInline: block D must have exactly one producer, a complete block");
  CHECK_REJECTED(s, sched_reverse_compute_inline(s, c, &st),
                 "cannot inline a reduction block");
  sched_free(s);
  ir_func_free(f);
  /* a second consumer outside the loop */
  f = parse(MM_HEAD
            "    for i, j, k in grid(16, 16, 16):\n"
            "      block C(vi: S(16) = i, vj: S(16) = j, vk: R(16) = k):\n"
            MM_C_BODY("      ")
            "    for i_1, j_1 in grid(16, 16):\n"
            "      block D(ui: S(16) = i_1, uj: S(16) = j_1):\n"
            MM_D_BODY("      ")
            "    for i_2 in 16:\n"
            "      block E(w: S(16) = i_2):\n"
            "        reads C[w, 0]\n"
            "        writes D[w, 0]\n"
            "        D[w, 0] = C[w, 0]\n");
  CHECK(f);
  s = sched_new(f, 1);
  c = sched_get_block(s, "C", NULL, &st);
  d = sched_get_block(s, "D", NULL, &st);
  CHECK_EQ(sched_get_loops(s, d, ld, 2, &st), 2);
  CHECK_REJECTED(s, sched_compute_at(s, c, ld[0], true, -1, &st),
                 "ComputeAt: consumer E of block C is not under loop i_1");
  sched_free(s);
  ir_func_free(f);
  /* the only block of its scope cannot go */
  f = parse("kernel main(A: f32[4]):\n"
            "  block root:\n"
            "    alloc T: f32[4]\n"
            "    for i in 4:\n"
            "      block T(v: S(4) = i):\n"
            "        reads A[v]\n"
            "        writes T[v]\n"
            "        T[v] = A[v] + 1.0\n");
  CHECK(f);
  s = sched_new(f, 1);
  int t = sched_get_block(s, "T", NULL, &st);
  CHECK_REJECTED(s, sched_compute_inline(s, t, &st),
                 "ComputeInline: block T is the only leaf of scope root");
  int root = sched_get_block(s, "root", NULL, &st);
  CHECK_REJECTED(s, sched_compute_inline(s, root, &st), "cannot inline the root block");
  sched_free(s);
  ir_func_free(f);
  /* GMM/0: one reduction block, an output */
  f = build("GMM/0");
  CHECK(f);
  s = sched_new(f, 1);
  int z = sched_get_block(s, "Z", NULL, &st);
  CHECK_REJECTED(s, sched_compute_inline(s, z, &st), "cannot inline a reduction block");
  int64_t dec = 2;
  int loc = sched_sample_compute_location(s, z, &dec, &st);
  CHECK(loc >= 0);
  const sched_trace *tr = sched_get_trace(s);
  CHECK(tr->insts[tr->n - 1].decision.i == -1); /* the only candidate: root */
  CHECK(sched_compute_at(s, z, loc, true, -1, &st)); /* at root: nothing */
  CHECK(replays(s, f));
  sched_free(s);
  ir_func_free(f);
}

/* ---- SampleComputeLocation ---------------------------------------------------------------- */

static int64_t last_decision(sched *s) {
  const sched_trace *t = sched_get_trace(s);
  return t->insts[t->n - 1].decision.i;
}

DG_TEST(sched_compute_sample_location) {
  dg_func *f = build(CONV_SPEC);
  CHECK(f);
  sched *s = sched_new(f, 7);
  dg_status st;
  int p = sched_get_block(s, "PadInput", NULL, &st);
  /* candidates: inline, root, h, w, co (n has extent 1; rh is a reduction) */
  int seen[8] = {0};
  for (int t = 0; t < 200; t++) {
    CHECK(sched_sample_compute_location(s, p, NULL, &st) >= 0);
    int64_t x = last_decision(s);
    CHECK(x >= -2 && x <= 5);
    seen[x + 2]++;
  }
  CHECK(seen[0] && seen[1] && seen[3] && seen[4] && seen[5]);
  CHECK(!seen[2] && !seen[6] && !seen[7]);
  /* replayed decisions: a stale one falls back to the nearest earlier */
  int64_t dec = 6;
  int l = sched_sample_compute_location(s, p, &dec, &st);
  CHECK(l >= 0 && last_decision(s) == 3);
  CHECK(sched_rv_get_kind(s, l) == SCHED_RV_LOOP);
  dec = 0;
  CHECK(sched_sample_compute_location(s, p, &dec, &st) >= 0 && last_decision(s) == -1);
  dec = 2;
  l = sched_sample_compute_location(s, p, &dec, &st);
  CHECK(last_decision(s) == 2);
  /* the sampled loop is w: computing at it is the padding test's result */
  CHECK(sched_compute_at(s, p, l, true, -1, &st));
  dg_block *pb = ir_find_block(sched_func(s), "PadInput");
  CHECK(pb && pb->iters[1].binding->kind == DG_EXPR_ADD);
  CHECK(same_outputs(f, sched_func(s)));
  CHECK(replays(s, f));
  sched_free(s);
  /* matmul C: no inline (a reduction); root, i_1, j_1 */
  dg_func *g = parse(MM);
  CHECK(g);
  s = sched_new(g, 3);
  int c = sched_get_block(s, "C", NULL, &st);
  int hist[5] = {0};
  for (int t = 0; t < 100; t++) {
    CHECK(sched_sample_compute_location(s, c, NULL, &st) >= 0);
    int64_t x = last_decision(s);
    CHECK(x >= -2 && x <= 2);
    hist[x + 2]++;
  }
  CHECK(!hist[0] && hist[1] && hist[2] && hist[3] && !hist[4]);
  dec = -2;
  CHECK(sched_sample_compute_location(s, c, &dec, &st) >= 0 && last_decision(s) == -1);
  sched_free(s);
  ir_func_free(g);
  ir_func_free(f);
}

DG_TEST(sched_compute_tvm_trace) {
  /* traces as TVM writes them: the inline mark inlines, a loop computes at */
  dg_func *f = build(CONV_SPEC);
  CHECK(f);
  dg_status st;
  sched_trace *t = sched_trace_from_json(
      "[[[\"GetBlock\",[],[\"PadInput\",\"main\"],[\"b0\"]],"
      "[\"SampleComputeLocation\",[\"b0\"],[],[\"l1\"]],"
      "[\"ComputeAt\",[\"b0\",\"l1\"],[1,-1],[]]],[[1,-2]]]",
      &st);
  CHECK_OK(st);
  sched *s = sched_new(f, 1);
  CHECK(sched_replay(s, t, false, false, &st));
  CHECK(ir_find_block(sched_func(s), "PadInput") == NULL);
  CHECK(same_outputs(f, sched_func(s)));
  sched_free(s);
  sched_trace_free(t);
  t = sched_trace_from_json(
      "[[[\"GetBlock\",[],[\"PadInput\",\"main\"],[\"b0\"]],"
      "[\"GetBlock\",[],[\"conv2d_nhwc\",\"main\"],[\"b1\"]],"
      "[\"GetLoops\",[\"b1\"],[],[\"l2\",\"l3\",\"l4\",\"l5\",\"l6\",\"l7\",\"l8\"]],"
      "[\"ComputeAt\",[\"b0\",\"l5\"],[1,-1],[]],"
      "[\"ReverseComputeAt\",[\"b1\",\"l8\"],[1,-1],[]]],[]]",
      &st);
  CHECK_OK(st);
  s = sched_new(f, 1);
  CHECK(!sched_replay(s, t, false, false, &st));
  CHECK_ERR(st, "instruction 4: ReverseComputeAt: loop rc contains block conv2d_nhwc");
  CHECK(same_outputs(f, sched_func(s)));
  sched_free(s);
  sched_trace_free(t);
  ir_func_free(f);
}

/* The extents of the loops above a block, outermost first, as "1,4,4,...". */
static char *loop_extents(const dg_func *f, const char *block) {
  sched_path p;
  dg_str o;
  dg_str_init(&o);
  if (sched_locate_block(f, ir_find_block(f, block), &p))
    for (int i = 0; i < p.n; i++)
      if (p.stmts[i]->kind == DG_STMT_FOR)
        dg_str_printf(&o, "%s%lld", o.len ? "," : "", (long long)p.stmts[i]->extent);
  return dg_str_take(&o);
}

DG_TEST(sched_compute_cache_tiling) {
  /* MultiLevelTiling's pattern: tile, cache the output locally and write it
   * back per output tile, stage an input in shared memory per k tile */
  dg_func *f = build("batch_matmul:b=1,n=16,m=16,k=16,dtype=f32");
  CHECK(f);
  sched *s = sched_new(f, 1);
  dg_status st;
  int z = sched_get_block(s, "Z", NULL, &st);
  int l[4], i2[2], j2[2], k2[2];
  CHECK_EQ(sched_get_loops(s, z, l, 4, &st), 4);
  sched_val fac[2] = {{.kind = SV_NONE}, {.kind = SV_INT, .i = 4}};
  CHECK_EQ(sched_split(s, l[1], fac, 2, true, false, i2, &st), 2);
  CHECK_EQ(sched_split(s, l[2], fac, 2, true, false, j2, &st), 2);
  CHECK_EQ(sched_split(s, l[3], fac, 2, true, false, k2, &st), 2);
  int order[6] = {i2[0], j2[0], k2[0], i2[1], j2[1], k2[1]};
  CHECK(sched_reorder(s, order, 6, &st));
  int cw = sched_cache_write(s, z, 0, DG_SCOPE_LOCAL, NULL, 0, &st);
  CHECK(cw >= 0);
  CHECK(sched_reverse_compute_at(s, cw, j2[0], true, -1, &st));
  int cr = sched_cache_read(s, z, 0, DG_SCOPE_SHARED, &z, 1, &st);
  CHECK(cr >= 0);
  CHECK(sched_compute_at(s, cr, k2[0], true, -1, &st));
  CHECK_OK(st);
  CHECK(ir_verify(sched_func(s), &st));
  /* b, i_0, j_0 | write-back 1 x 4 x 4; b, i_0, j_0, k_0 | copy 1 x 4 x 4 */
  char *e1 = loop_extents(sched_func(s), "Z_local");
  char *e2 = loop_extents(sched_func(s), "X_shared");
  CHECK_STREQ(e1, "1,4,4,1,4,4");
  CHECK_STREQ(e2, "1,4,4,4,1,4,4");
  free(e1);
  free(e2);
  CHECK(same_outputs(f, sched_func(s)));
  CHECK(replays(s, f));
  sched_free(s);
  ir_func_free(f);
}
