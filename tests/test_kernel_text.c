/* test_kernel_text.c: the kernel text printer and parser and `dragon show`.
 *
 * Sample kernels in the .kt files of tests/data/kernels/ round-trip byte for byte;
 * malformed texts give located messages; non-canonical texts reprint
 * canonically; precedence and float literals print exactly as expected;
 * fuzzer regression inputs in tests/fuzz/kernel_text/ parse without
 * crashing and, when they parse, round-trip.
 */
#include <dirent.h>
#include <float.h>
#include <math.h>
#include <stdlib.h>

#include "dragon/ir.h"
#include "dragon/wl.h"
#include "test.h"

/* Parses, prints, reparses, reprints; both prints must agree and the two
 * kernels must be structurally equal. Returns the first print (caller
 * frees) or NULL with st set when the text does not parse. */
static char *roundtrip(const char *text, dg_status *st, bool *stable) {
  *stable = false;
  dg_func *f = ir_parse(text, "k.kt", st);
  if (!f) return NULL;
  char *p1 = ir_print(f);
  dg_status st2;
  dg_func *g = ir_parse(p1, "reprint", &st2);
  if (g) {
    char *p2 = ir_print(g);
    char why[256] = "";
    *stable = strcmp(p1, p2) == 0 && ir_func_equal_explain(f, g, why, sizeof why);
    if (!*stable) fprintf(stderr, "unstable: %s\n--- first\n%s--- second\n%s", why, p1, p2);
    free(p2);
    ir_func_free(g);
  } else {
    fprintf(stderr, "reprint does not parse: %s\n%s", st2.msg, p1);
  }
  ir_func_free(f);
  return p1;
}

static char *read_data(const char *name) {
  dg_status st;
  return dg_read_file(dg_test_data(name), NULL, &st);
}

DG_TEST(kt_roundtrip_samples) {
  static const char *const files[] = {"kernels/matmul.kt", "kernels/conv_pad.kt", "kernels/softmax.kt",
                                      "kernels/scheduled.kt", "kernels/ranges.kt"};
  for (size_t i = 0; i < DG_ARRAY_LEN(files); i++) {
    char *text = read_data(files[i]);
    CHECK_MSG(text, "cannot read %s", files[i]);
    dg_status st;
    bool stable;
    char *out = roundtrip(text, &st, &stable);
    CHECK_MSG(out, "%s: %s", files[i], st.msg);
    CHECK_MSG(stable, "%s does not round-trip", files[i]);
    CHECK_STREQ(out, text);
    free(out);
    free(text);
  }
}

DG_TEST(kt_parse_structure) {
  char *text = read_data("kernels/matmul.kt");
  CHECK(text);
  dg_status st;
  dg_func *f = ir_parse(text, "matmul.kt", &st);
  free(text);
  CHECK_OK(st);
  CHECK_STREQ(f->name, "main");
  CHECK_EQ(f->n_params, 3);
  CHECK_EQ(f->params[1]->ndim, 3);
  CHECK_EQ(f->params[1]->shape[2], 128);
  CHECK_EQ(f->params[1]->dtype, DG_F32);
  dg_block *z = ir_find_block(f, "Z");
  CHECK(z);
  CHECK_EQ(z->n_iters, 4);
  CHECK_EQ(z->iters[3].kind, DG_ITER_REDUCE);
  CHECK_EQ(z->iters[1].extent, 128);
  CHECK_EQ(z->n_reads, 2);
  CHECK(z->init && z->init->kind == DG_STMT_STORE);
  CHECK(z->body->kind == DG_STMT_STORE && z->body->value->kind == DG_EXPR_ADD);
  /* the grid is four nested serial loops */
  dg_stmt *s = ir_func_root(f)->body;
  for (int i = 0; i < 4; i++) {
    CHECK(s->kind == DG_STMT_FOR && s->loop_kind == DG_LOOP_SERIAL);
    s = s->body;
  }
  CHECK(s->kind == DG_STMT_BLOCK && s->block == z);
  ir_func_free(f);

  text = read_data("kernels/scheduled.kt");
  f = ir_parse(text, "scheduled.kt", &st);
  free(text);
  CHECK_OK(st);
  dg_stmt *l = ir_func_root(f)->body;
  CHECK(l->kind == DG_STMT_FOR && l->loop_kind == DG_LOOP_THREAD && l->tag == DG_TAG_BLOCK_X);
  l = l->body;
  CHECK(l->tag == DG_TAG_THREAD_X && l->anns.n == 3);
  const dg_ann *a = ir_anns_get(&l->anns, "pragma_auto_unroll_max_step");
  CHECK(a && a->kind == DG_ANN_INT && a->i == 64);
  dg_buffer *sh = ir_find_buffer(f, "A_shared");
  CHECK(sh && sh->scope == DG_SCOPE_SHARED && sh->dtype == DG_F16);
  dg_block *c = ir_find_block(f, "C");
  CHECK(c && c->predicate && c->predicate->kind == DG_EXPR_LT);
  ir_func_free(f);

  text = read_data("kernels/ranges.kt");
  f = ir_parse(text, "ranges.kt", &st);
  free(text);
  CHECK_OK(st);
  dg_block *t = ir_find_block(f, "tile");
  int64_t v;
  CHECK(ir_is_const_int(t->reads[0].ext[0], &v) && v == 4);
  CHECK(ir_is_const_int(t->reads[0].ext[1], &v) && v == 64);
  CHECK(ir_is_const_int(t->reads[0].min[1], &v) && v == 0);
  CHECK_EQ(t->n_allocs, 1);
  ir_func_free(f);
}

#define HDR "kernel k(A: f32[8, 8], B: f32[8, 8], N: i32[8]):\n  block root:\n"
#define LOOP HDR "    for i in 8:\n      block b(v: S(8) = i):\n"

static const struct {
  const char *text, *want;
} bad[] = {
    {"", "k.kt:1:1: expected 'kernel' at the start of the text, found end of input"},
    {"kernal k():\n", "k.kt:1:1: expected 'kernel' at the start of the text, found 'kernal'"},
    {LOOP "        Q[v, v] = 1.0\n", "k.kt:5:9: unknown buffer 'Q'"},
    {LOOP "        A[v, v, v] = 1.0\n", "k.kt:5:15: expected ']' after index list, found ','"},
    {LOOP "        A[v] = 1.0\n", "k.kt:5:10: 'A' has 2 dimensions, found 1 index"},
    {LOOP "\tA[v, v] = 1.0\n", "k.kt:5:1: tab in indentation"},
    {LOOP "         A[v, v] = 1.0\n", "k.kt:5:1: indentation of 9 spaces is not a multiple of 2"},
    {LOOP "        A[v, v] = A[v, v] + 1\n", "k.kt:5:27: operands of '+' have different dtypes (f32 and i32)"},
    {LOOP "        A[v, v] = 0\n", "k.kt:5:19: cannot store i32 into f32 buffer 'A' (a float literal has a '.': write 0.0)"},
    {LOOP "        A[w, v] = 1.0\n", "k.kt:5:11: unknown variable 'w'"},
    {HDR "    for i in 8:\n      for i in 8:\n", "k.kt:4:11: duplicate variable name 'i' (first defined at 3:9)"},
    {LOOP "        A[v, v] = 5f32\n", "k.kt:5:19: a float literal needs a '.' or an exponent: write 5.0f32"},
    {LOOP "        A[v, v] = 5u8\n", "k.kt:5:20: unknown literal suffix 'u8'"},
    {LOOP "        N[v] = N[v] / 2\n", "k.kt:5:21: '/' is division of floats; use '//' to divide i32 values"},
    {LOOP "        if v:\n          N[v] = 1\n", "k.kt:5:12: an if condition must be bool, found i32"},
    {LOOP "        if 0 < v < 4:\n", "k.kt:5:18: comparisons do not chain"},
    {HDR "    for i in 8\n", "k.kt:3:15: expected ':' at the end of the loop header, found end of line"},
    {HDR "    for i in 0:\n", "k.kt:3:14: a loop extent (a positive integer or grid(...)) must be at least 1, found 0"},
    {HDR "    for i in 8 bind(threadIdx.w):\n", "k.kt:3:21: unknown thread tag 'threadIdx.w'"},
    {HDR "    for i in 8 paralel:\n", "k.kt:3:16: unknown loop kind 'paralel'"},
    {LOOP "        N[v] = foo(v)\n", "k.kt:5:16: unknown function 'foo'"},
    {LOOP "        N[v] = min(v)\n", "k.kt:5:16: 'min' takes 2 arguments, found 1"},
    {LOOP "        attr x = \"abc\n", "k.kt:5:18: unterminated string"},
    {LOOP "        else:\n", "k.kt:5:9: 'else' without a matching 'if'"},
    {LOOP "        N[v] = 1\n        reads A[v, v]\n", "k.kt:6:9: 'reads' must come before the block's statements"},
    {LOOP "        N[v] = 1\n          N[v] = 2\n", "k.kt:6:11: unexpected indentation (expected 8 spaces, found 10)"},
    {HDR "    alloc T: f33[4]\n", "k.kt:3:14: unknown dtype 'f33'"},
    {HDR "    for i in 8:\n      block b(v: S(8) = 3i64):\n", "k.kt:4:25: the binding of 'v' must be an i32 expression, found i64"},
    {HDR "    for i in 8:\n      N[i] = 1\n    for j in 8:\n      N[i] = 2\n",
     "k.kt:6:9: variable 'i' (defined at 3:9) is not in scope here"},
    {LOOP "        N[v] = 3000000000\n", "k.kt:5:16: 3000000000 is out of range for i32"},
    {LOOP "        N[v] = 99999999999999999999i64\n", "k.kt:5:16: integer literal '99999999999999999999' is too large"},
    {LOOP "        A[v, v] = exp(v)\n", "k.kt:5:19: 'exp' needs float arguments, found i32"},
    {HDR "    pass\n", "k.kt:3:5: expected a statement (for, block, if or Buf[...] = value), found 'pass'"},
    {"kernel k():\n  block root:\nkernel j():\n", "k.kt:3:1: expected end of input (one kernel per text), found 'kernel'"},
    {LOOP "        A[v, v] = 1.0 $\n", "k.kt:5:23: unexpected character '$'"},
    {LOOP "        A[v, v] = select(v < 4, 1.0, 2)\n", "k.kt:5:19: the arms of 'select' have different dtypes (f32 and i32)"},
    {HDR "    block b(v: Q(8) = 0):\n", "k.kt:3:16: expected 'S' (spatial) or 'R' (reduce), found 'Q'"},
    {HDR "    block b:\n    block b:\n", "k.kt:4:11: duplicate block name 'b' (first defined at 3:11)"},
    {HDR "    for i in 8:\n      block b(v: S(8) = v):\n", "k.kt:4:25: variable 'v' (defined at 4:15) is not in scope here"},
    {HDR "    for inf in 8:\n", "k.kt:3:9: 'inf' is a literal and cannot name a variable"},
    {LOOP "        reads A[v:v + 2:3, v]\n", "k.kt:5:24: expected ']' after region, found ':'"},
    {HDR "    for a, b in grid(2):\n", "k.kt:3:17: grid has 1 extent for 2 loop variables"},
    {HDR "    for a, b in grid(2, 2) parallel:\n", "k.kt:3:28: a loop kind or annotations need a single loop variable"},
    {LOOP "        attr k = 1\n        attr k = 2\n", "k.kt:6:14: duplicate annotation key 'k'"},
    {"kernel k(A: f32[8], A: f32[8]):\n", "k.kt:1:21: duplicate buffer name 'A' (first defined at 1:10)"},
};

DG_TEST(kt_parse_errors) {
  for (size_t i = 0; i < DG_ARRAY_LEN(bad); i++) {
    dg_status st;
    dg_func *f = ir_parse(bad[i].text, "k.kt", &st);
    if (f) ir_func_free(f);
    CHECK_MSG(!f && st.code == DG_ERR_PARSE, "case %zu parsed:\n%s", i, bad[i].text);
    CHECK_MSG(strstr(st.msg, bad[i].want), "case %zu:\n%s\n--- got\n%s\n--- want\n%s", i, bad[i].text, st.msg,
              bad[i].want);
  }
}

static const struct {
  const char *text, *want;
} canon[] = {
    /* separate nested serial loops fold into a grid; comments, blank lines,
     * CRLF and trailing spaces vanish; grid(1 extent) is a plain loop */
    {"# a comment\nkernel k(A: f32[8, 8]):   \r\n\n  block root:  # root\n    for i in grid(8):\n"
     "      for j in 8 serial:\n\n        block b(vi: S(8) = i, vj: S(8) = j):\n"
     "          A[vi, vj] = ((1.50))\n",
     "kernel k(A: f32[8, 8]):\n  block root:\n    for i, j in grid(8, 8):\n"
     "      block b(vi: S(8) = i, vj: S(8) = j):\n        A[vi, vj] = 1.5\n"},
    /* header lines in any order reprint in the fixed order; annotations sort;
     * an odd key stays quoted; suffixes that are defaults vanish */
    {HDR "    block b:\n      attr z = 1\n      writes A[0, 0]\n      attr \"odd key\" = [1, -2]\n"
         "      reads B[0:1, 2:2 + 6]\n      where 1i32 < 2\n      alloc T: f32[4] global\n"
         "      A[0, 0] = inff32\n",
     HDR "    block b:\n      reads B[0, 2:8]\n      writes A[0, 0]\n      where 1 < 2\n"
         "      alloc T: f32[4]\n      attr \"odd key\" = [1, -2]\n      attr z = 1\n      A[0, 0] = inf\n"},
    /* minimum parentheses, left associativity kept, negation as 0 - x,
     * elif as else + if, a body without root gets one */
    {"kernel k(N: i32[8]):\n  for i in 8:\n    if (i < 2):\n      N[i] = ((i - 1) - 2) - (i - (1 - 2))\n"
     "    elif !(i == 3) && (i > 4 || i < 1):\n      N[i] = -i + -(5) * (i * (i // 2))\n"
     "    else:\n      N[i] = -3 - -4\n",
     "kernel k(N: i32[8]):\n  block root:\n    for i in 8:\n      if i < 2:\n"
     "        N[i] = i - 1 - 2 - (i - (1 - 2))\n      else:\n        if !i == 3 && (i > 4 || i < 1):\n"
     "          N[i] = 0 - i + (0 - 5) * (i * (i // 2))\n        else:\n          N[i] = -3 - -4\n"},
    /* float literal spellings */
    {"kernel k(A: f64[4], H: f16[4]):\n  block root:\n    A[0] = 1e3f64 + 0.10000f64 * 2.f64\n"
     "    H[0] = 65504.0f16 - 0.1f16\n    A[1] = -0.0f64\n",
     "kernel k(A: f64[4], H: f16[4]):\n  block root:\n    A[0] = 1000.0f64 + 0.1f64 * 2.0f64\n"
     "    H[0] = 65504.0f16 - 0.0999755859375f16\n    A[1] = -0.0f64\n"},
    /* empty bodies, a block with only a header, a param with a scope */
    {"kernel k(S: f32[2] shared):\n  block root:\n    block empty():\n    for i in 2:\n",
     "kernel k(S: f32[2] shared):\n  block root:\n    block empty:\n    for i in 2:\n"},
};

DG_TEST(kt_canonical) {
  for (size_t i = 0; i < DG_ARRAY_LEN(canon); i++) {
    dg_status st;
    bool stable;
    char *out = roundtrip(canon[i].text, &st, &stable);
    CHECK_MSG(out, "case %zu: %s", i, st.msg);
    CHECK_MSG(stable, "case %zu does not round-trip", i);
    CHECK_MSG(strcmp(out, canon[i].want) == 0, "case %zu:\n--- got\n%s--- want\n%s", i, out, canon[i].want);
    free(out);
  }
}

DG_TEST(kt_expr_precedence) {
  dg_func *f = ir_func_new("t");
  dg_var *x = ir_var_new(f, "x", DG_I32), *y = ir_var_new(f, "y", DG_I32);
  dg_expr *X = ir_var(f, x), *Y = ir_var(f, y), *one = ir_int(f, 1);
  static const struct {
    int id;
    const char *want;
  } want[] = {
      {0, "x - y - 1"},       {1, "x - (y - 1)"},         {2, "(x + y) * 1"},
      {3, "x + y * 1"},       {4, "x // (y * 1)"},        {5, "x * y % 1"},
      {6, "!x < y"},          {7, "(!x < y) == (x < y)"}, {8, "x < y || x < 1 && y < 1"},
      {9, "(x < y || x < 1) && y < 1"}, {10, "!(x < y && y < 1)"}, {11, "x - -1"},
      {12, "min(x + y, -1) * max(x, y)"}, {13, "select(x < y, x, y) + x"},
      {14, "i64(x) - -9223372036854775808i64"}, {15, "exp(f32(x) * -0.5) + pow(f32(y), 2.0)"},
  };
  dg_expr *m1 = ir_int(f, -1);
  dg_expr *e[16];
  e[0] = ir_sub(f, ir_sub(f, X, Y), one);
  e[1] = ir_sub(f, X, ir_sub(f, Y, one));
  e[2] = ir_mul(f, ir_add(f, X, Y), one);
  e[3] = ir_add(f, X, ir_mul(f, Y, one));
  e[4] = ir_bin(f, DG_EXPR_FLOORDIV, X, ir_mul(f, Y, one));
  e[5] = ir_bin(f, DG_EXPR_FLOORMOD, ir_mul(f, X, Y), one);
  dg_expr *lt = ir_bin(f, DG_EXPR_LT, X, Y);
  e[6] = ir_not(f, lt);
  e[7] = ir_bin(f, DG_EXPR_EQ, ir_not(f, lt), lt);
  dg_expr *l2 = ir_bin(f, DG_EXPR_LT, X, one), *l3 = ir_bin(f, DG_EXPR_LT, Y, one);
  e[8] = ir_bin(f, DG_EXPR_OR, lt, ir_bin(f, DG_EXPR_AND, l2, l3));
  e[9] = ir_bin(f, DG_EXPR_AND, ir_bin(f, DG_EXPR_OR, lt, l2), l3);
  e[10] = ir_not(f, ir_bin(f, DG_EXPR_AND, lt, l3));
  e[11] = ir_sub(f, X, m1);
  e[12] = ir_mul(f, ir_bin(f, DG_EXPR_MIN, ir_add(f, X, Y), m1), ir_bin(f, DG_EXPR_MAX, X, Y));
  e[13] = ir_add(f, ir_select(f, lt, X, Y), X);
  e[14] = ir_sub(f, ir_cast(f, DG_I64, X), ir_int_t(f, INT64_MIN, DG_I64));
  dg_expr *pw[2] = {ir_cast(f, DG_F32, Y), ir_float(f, 2.0, DG_F32)};
  e[15] = ir_add(f, ir_call1(f, DG_MATH_EXP, ir_mul(f, ir_cast(f, DG_F32, X), ir_float(f, -0.5, DG_F32))),
                 ir_call(f, DG_MATH_POW, pw, 2));
  for (size_t i = 0; i < DG_ARRAY_LEN(want); i++) {
    dg_str s;
    dg_str_init(&s);
    ir_print_expr(&s, e[want[i].id]);
    const char *w = want[i].want;
    CHECK_MSG(strcmp(s.s, w) == 0, "expr %d: got '%s', want '%s'", want[i].id, s.s, w);
    dg_str_free(&s);
  }
  ir_func_free(f);
}

/* Prints a literal, parses it back as the value of a store and checks that
 * the value is bit-identical. */
static bool float_roundtrip(double v, dg_dtype t, const char *want) {
  dg_func *f = ir_func_new("t");
  dg_expr *lit = ir_float(f, v, t);
  dg_str s;
  dg_str_init(&s);
  ir_print_expr(&s, lit);
  bool ok = !want || strcmp(s.s, want) == 0;
  if (!ok) fprintf(stderr, "literal %.17g %s printed '%s', want '%s'\n", v, dg_dtype_name(t), s.s, want);
  char text[256];
  snprintf(text, sizeof text, "kernel k(A: %s[1]):\n  block root:\n    A[0] = %s\n", dg_dtype_name(t), s.s);
  dg_status st;
  dg_func *g = ir_parse(text, "lit", &st);
  if (!g) {
    fprintf(stderr, "literal '%s': %s\n", s.s, st.msg);
    ok = false;
  } else {
    dg_expr *back = ir_func_root(g)->body->value;
    bool same = back->kind == DG_EXPR_FLOAT && back->dtype == t &&
                (isnan(v) ? isnan(back->fval) && !signbit(back->fval) == !signbit(lit->fval) : memcmp(&back->fval, &lit->fval, sizeof(double)) == 0);
    if (!same) fprintf(stderr, "literal '%s' read back as %.17g\n", s.s, back->fval);
    ok = ok && same;
    ir_func_free(g);
  }
  dg_str_free(&s);
  ir_func_free(f);
  return ok;
}

DG_TEST(kt_float_literals) {
  CHECK(float_roundtrip(0.1, DG_F32, "0.1"));
  CHECK(float_roundtrip(1.0 / 3.0, DG_F32, "0.33333334"));
  CHECK(float_roundtrip(1000.0, DG_F32, "1000.0"));
  CHECK(float_roundtrip(1234567.0, DG_F32, "1234567.0"));
  CHECK(float_roundtrip(12345678.0, DG_F32, "12345678.0"));
  CHECK(float_roundtrip(1e7, DG_F32, "1e+07"));
  CHECK(float_roundtrip(1e-5, DG_F32, "1e-05"));
  CHECK(float_roundtrip(0.0001, DG_F32, "0.0001"));
  CHECK(float_roundtrip(16777216.0, DG_F32, "16777216.0"));
  CHECK(float_roundtrip(1e10, DG_F32, "1e+10"));
  CHECK(float_roundtrip(-0.0, DG_F32, "-0.0"));
  CHECK(float_roundtrip(FLT_MAX, DG_F32, "3.4028235e+38"));
  CHECK(float_roundtrip(FLT_MIN, DG_F32, "1.1754944e-38"));
  CHECK(float_roundtrip(1.40129846e-45, DG_F32, "1e-45"));
  CHECK(float_roundtrip(INFINITY, DG_F32, "inf"));
  CHECK(float_roundtrip(-INFINITY, DG_F32, "-inf"));
  CHECK(float_roundtrip(NAN, DG_F32, "nan"));
  CHECK(float_roundtrip(0.1, DG_F64, "0.1f64"));
  CHECK(float_roundtrip(1.0 / 3.0, DG_F64, "0.3333333333333333f64"));
  CHECK(float_roundtrip(DBL_MAX, DG_F64, "1.7976931348623157e+308f64"));
  CHECK(float_roundtrip(5e-324, DG_F64, "5e-324f64"));
  CHECK(float_roundtrip(1e23, DG_F64, "1e+23f64"));
  CHECK(float_roundtrip(9007199254740993.0, DG_F64, "9007199254740992.0f64"));
  CHECK(float_roundtrip(-INFINITY, DG_F64, "-inff64"));
  CHECK(float_roundtrip(65504.0, DG_F16, "65504.0f16"));
  CHECK(float_roundtrip(0.1, DG_F16, "0.0999755859375f16"));
  CHECK(float_roundtrip(ldexp(1.0, -24), DG_F16, "5.9604644775390625e-08f16"));
  CHECK(float_roundtrip(ldexp(2047.0, -24), DG_F16, "0.000122010707855224609375f16"));
  CHECK(float_roundtrip(-1.0 / 3.0, DG_F16, "-0.333251953125f16"));
  CHECK(float_roundtrip(NAN, DG_F16, "nanf16"));
  CHECK(float_roundtrip(-NAN, DG_F64, "-nanf64"));
  /* every f16 bit pattern that is a number survives */
  for (uint32_t h = 0; h < 0x10000; h += 7) {
    float v = dg_f16_to_f32((uint16_t)h);
    if (isnan(v)) continue;
    CHECK_MSG(float_roundtrip(v, DG_F16, NULL), "f16 bits 0x%04x", h);
  }
  /* a spread of f32 values, including subnormals */
  dg_rng r;
  dg_rng_seed(&r, 11);
  for (int i = 0; i < 2000; i++) {
    uint32_t bits = (uint32_t)dg_rng_next(&r);
    float v;
    memcpy(&v, &bits, sizeof v);
    if (isnan(v)) continue;
    CHECK_MSG(float_roundtrip(v, DG_F32, NULL), "f32 bits 0x%08x", bits);
    double d;
    uint64_t b64 = dg_rng_next(&r);
    memcpy(&d, &b64, sizeof d);
    if (isnan(d)) continue;
    CHECK_MSG(float_roundtrip(d, DG_F64, NULL), "f64 bits 0x%016llx", (unsigned long long)b64);
  }
}

/* A kernel built with the IR constructors, with things no sample text
 * has: odd annotation strings and floats, a range whose extent the
 * simplifier cannot fold, every literal dtype. */
DG_TEST(kt_constructed_roundtrip) {
  dg_func *f = ir_func_new("built");
  int64_t shape[2] = {16, 16};
  dg_buffer *a = ir_buffer_new(f, "A", DG_F32, 2, shape, DG_SCOPE_GLOBAL);
  dg_buffer *n = ir_buffer_new(f, "N", DG_I64, 1, shape, DG_SCOPE_GLOBAL);
  dg_buffer *q = ir_buffer_new(f, "Q", DG_I8, 1, shape, DG_SCOPE_GLOBAL);
  ir_func_add_param(f, a);
  ir_func_add_param(f, n);
  ir_func_add_param(f, q);
  dg_block *root = ir_block_new(f, "root");
  dg_buffer *w = ir_buffer_new(f, "W", DG_F32, 1, shape, DG_SCOPE_WMMA_ACC);
  ir_block_add_alloc(f, root, w);
  dg_var *i = ir_var_new(f, "i", DG_I32), *j = ir_var_new(f, "j", DG_I32);
  dg_var *vi = ir_var_new(f, "vi", DG_I32);
  dg_block *b = ir_block_new(f, "b");
  ir_block_add_iter(f, b, vi, 16, DG_ITER_SPATIAL, ir_var(f, i));
  dg_expr *mn[2] = {ir_var(f, vi), ir_int(f, 0)};
  dg_expr *ex[2] = {ir_bin(f, DG_EXPR_FLOORMOD, ir_var(f, vi), ir_int(f, 3)), ir_int(f, 16)};
  ir_block_add_read(f, b, a, mn, ex);
  dg_expr *nidx[1] = {ir_var(f, vi)};
  ir_block_add_write(f, b, n, nidx, NULL);
  ir_anns_set_str(f, &b->anns, "s", "tab\there \x01 \"q\" \\ \xc3\xa9");
  ir_anns_set_float(f, &b->anns, "f", 1e-300);
  ir_anns_set_float(f, &b->anns, "g", -INFINITY);
  ir_anns_set_ints(f, &b->anns, "e", NULL, 0);
  dg_expr *idx0[1] = {ir_var(f, vi)};
  dg_expr *val = ir_add(f, ir_cast(f, DG_I64, ir_load(f, q, idx0, 1)), ir_int_t(f, -7, DG_I64));
  dg_stmt *st1 = ir_store(f, n, idx0, 1, val);
  dg_expr *qv = ir_int_t(f, -128, DG_I8);
  dg_stmt *st2 = ir_store(f, q, idx0, 1, ir_select(f, ir_bool(f, false), qv, ir_int_t(f, 127, DG_I8)));
  dg_stmt *body[2] = {st1, st2};
  b->body = ir_seq(f, body, 2);
  b->predicate = ir_not(f, ir_bool(f, true));
  dg_stmt *inner = ir_for(f, j, 1, DG_LOOP_VECTORIZED, DG_TAG_NONE, ir_block_stmt(f, b));
  dg_stmt *outer = ir_for(f, i, 16, DG_LOOP_THREAD, DG_TAG_VTHREAD_Z, inner);
  ir_anns_set_int(f, &outer->anns, "a.b.c", INT64_MIN);
  root->body = outer;
  f->body = ir_block_stmt(f, root);

  char *p1 = ir_print(f);
  dg_status st;
  dg_func *g = ir_parse(p1, "built.kt", &st);
  CHECK_MSG(g, "%s\n%s", st.msg, p1);
  char *p2 = ir_print(g);
  CHECK_STREQ(p2, p1);
  char why[256];
  CHECK_MSG(ir_func_equal_explain(f, g, why, sizeof why), "%s", why);
  CHECK(strstr(p1, "attr s = \"tab\\there \\x01 \\\"q\\\" \\\\ \xc3\xa9\"\n"));
  CHECK(strstr(p1, "for i in 16 bind(vthread.z) {a.b.c = -9223372036854775808}:\n"));
  CHECK(strstr(p1, "alloc W: f32[16] wmma.accumulator\n"));
  CHECK(strstr(p1, "attr e = []\n") && strstr(p1, "attr f = 1e-300\n") && strstr(p1, "attr g = -inf\n"));
  CHECK(strstr(p1, "N[vi] = i64(Q[vi]) + -7i64\n"));
  CHECK(strstr(p1, "Q[vi] = select(false, -128i8, 127i8)\n"));
  CHECK(strstr(p1, "where !true\n"));
  free(p1);
  free(p2);
  ir_func_free(g);
  ir_func_free(f);
}

/* Deep nesting and long chains end in an error, never a stack overflow. */
DG_TEST(kt_limits) {
  dg_str s;
  dg_str_init(&s);
  dg_str_puts(&s, LOOP "        N[v] = ");
  for (int i = 0; i < 100000; i++) dg_str_putc(&s, '(');
  dg_status st;
  dg_func *f = ir_parse(s.s, "k.kt", &st);
  CHECK(!f);
  CHECK_ERR(st, "nested too deeply");
  dg_str_clear(&s);
  dg_str_puts(&s, LOOP "        N[v] = v");
  for (int i = 0; i < 100000; i++) dg_str_puts(&s, " + v");
  dg_str_putc(&s, '\n');
  f = ir_parse(s.s, "k.kt", &st);
  CHECK(!f);
  CHECK_ERR(st, "k.kt:5:");
  CHECK_ERR(st, "nested too deeply");
  dg_str_clear(&s);
  dg_str_puts(&s, LOOP "        if ");
  for (int i = 0; i < 100000; i++) dg_str_puts(&s, "!");
  f = ir_parse(s.s, "k.kt", &st);
  CHECK(!f);
  CHECK_ERR(st, "nested too deeply");
  dg_str_clear(&s);
  dg_str_puts(&s, LOOP "        N[v] = ");
  for (int i = 0; i < 100000; i++) dg_str_puts(&s, "-");
  dg_str_puts(&s, "v\n");
  f = ir_parse(s.s, "k.kt", &st);
  CHECK(!f);
  CHECK_ERR(st, "nested too deeply");
  dg_str_clear(&s);
  dg_str_puts(&s, "kernel k():\n");
  for (int d = 1; d < 200; d++) {
    dg_str_indent(&s, 2 * d);
    dg_str_printf(&s, "for i%d in 2:\n", d);
  }
  f = ir_parse(s.s, "k.kt", &st);
  CHECK(!f);
  CHECK_ERR(st, "statements nested too deeply");
  /* a wide kernel is fine: many parameters and statements */
  dg_str_clear(&s);
  dg_str_puts(&s, "kernel k(");
  for (int i = 0; i < 3000; i++) dg_str_printf(&s, "%sB%d: f32[1]", i ? ", " : "", i);
  dg_str_puts(&s, "):\n  block root:\n");
  for (int i = 0; i < 3000; i++) dg_str_printf(&s, "    B%d[0] = %d.5\n", i, i);
  bool stable;
  char *out = roundtrip(s.s, &st, &stable);
  CHECK_MSG(out, "%s", st.msg);
  CHECK(stable);
  CHECK_STREQ(out, s.s);
  free(out);
  dg_str_free(&s);
  /* embedded NUL ends the text */
  f = ir_parse("kernel k():\n\0garbage", "k.kt", &st);
  CHECK_OK(st);
  ir_func_free(f);
}

/* Every saved fuzzer input: no crash; if it parses, it round-trips. */
DG_TEST(kt_fuzz_regressions) {
  const char *dir = "tests/fuzz/kernel_text";
  DIR *d = opendir(dir);
  CHECK_MSG(d, "cannot open %s", dir);
  struct dirent *e;
  int n = 0;
  while ((e = readdir(d))) {
    if (e->d_name[0] == '.') continue;
    char path[600];
    snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
    dg_status st;
    size_t len;
    char *text = dg_read_file(path, &len, &st);
    if (!text) continue;
    bool stable;
    char *out = roundtrip(text, &st, &stable);
    if (out) CHECK_MSG(stable, "%s does not round-trip", path);
    free(out);
    free(text);
    n++;
  }
  closedir(d);
  CHECK(n > 0);
}

DG_TEST(kt_show_cli) {
  char *out = NULL;
  char *want = read_data("kernels/softmax.kt");
  CHECK(want);
  int rc = dg_test_run_dragon("show tests/data/kernels/softmax.kt", NULL, &out);
  CHECK_EQ(rc, 0);
  CHECK_STREQ(out, want);
  free(out);
  rc = dg_test_run_dragon("show -", want, &out);
  CHECK_EQ(rc, 0);
  CHECK_STREQ(out, want);
  free(out);
  free(want);
  rc = dg_test_run_dragon("show -", "kernel k(A: f32[4]):\n  block root:\n    A[0] = A[1, 2]\n", &out);
  CHECK_EQ(rc, 1);
  CHECK_STREQ(out, "<stdin>:3:15: expected ']' after index list, found ',' ('A' has 1 dimension)\n"
                   "      A[0] = A[1, 2]\n"
                   "                ^\n");
  free(out);
  rc = dg_test_run_dragon("show tests/data/kernels/nonexistent.kt", NULL, &out);
  CHECK_EQ(rc, 1);
  CHECK(strstr(out, "no such file"));
  free(out);
  rc = dg_test_run_dragon("show", NULL, &out);
  CHECK_EQ(rc, 2);
  free(out);
  rc = dg_test_run_dragon("show a b", NULL, &out);
  CHECK_EQ(rc, 2);
  free(out);
  rc = dg_test_run_dragon("show --help", NULL, &out);
  CHECK_EQ(rc, 0);
  CHECK(strstr(out, "usage: dragon show SPEC|FILE|-"));
  free(out);
}

/* Every workload family's example and every MetaSchedule alias prints,
 * reparses to a structurally equal kernel and reprints identically. */
DG_TEST(kt_workloads_roundtrip) {
  dg_str spec;
  dg_str_init(&spec);
  int n = wl_family_count() + 4 * wl_alias_count();
  for (int i = 0; i < n; i++) {
    dg_str_clear(&spec);
    if (i < wl_family_count()) dg_str_puts(&spec, wl_family_example(i));
    else dg_str_printf(&spec, "%s/%d", wl_alias_name((i - wl_family_count()) / 4), (i - wl_family_count()) % 4);
    dg_status st;
    dg_func *f = wl_build(spec.s, &st);
    CHECK_MSG(f, "%s: %s", spec.s, st.msg);
    char *p1 = ir_print(f);
    dg_func *g = ir_parse(p1, spec.s, &st);
    CHECK_MSG(g, "%s: %s\n%s", spec.s, st.msg, p1);
    char *p2 = ir_print(g);
    char why[256];
    bool eq = ir_func_equal_explain(f, g, why, sizeof why);
    CHECK_MSG(eq, "%s: %s\n%s", spec.s, why, p1);
    CHECK_MSG(strcmp(p1, p2) == 0, "%s:\n%s---\n%s", spec.s, p1, p2);
    free(p1);
    free(p2);
    ir_func_free(f);
    ir_func_free(g);
  }
  dg_str_free(&spec);
}

/* The complete example of docs/kernel-text.md parses and is canonical
 * (but for its comment line). */
DG_TEST(kt_docs_example) {
  dg_status st;
  char *doc = dg_read_file("docs/kernel-text.md", NULL, &st);
  CHECK_MSG(doc, "%s", st.msg);
  char *sec = strstr(doc, "## A complete example");
  CHECK(sec);
  char *a = strstr(sec, "```\n");
  CHECK(a);
  a += 4;
  char *b = strstr(a, "```");
  CHECK(b);
  *b = 0;
  bool stable;
  char *out = roundtrip(a, &st, &stable);
  CHECK_MSG(out, "%s", st.msg);
  CHECK(stable);
  char *nl = strchr(a, '\n'); /* the first line is a comment */
  CHECK(a[0] == '#' && nl);
  CHECK_STREQ(out, nl + 1);
  free(out);
  free(doc);
}
