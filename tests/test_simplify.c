/* test_simplify.c: the integer simplifier, the prover and interval bounds.
 *
 * Expected results are written as text by a small printer of this file
 * (precedence-aware, so "a + (b + c)" shows the tree's shape), and every
 * random test compares values against a naive evaluator of this file.
 */
#include <math.h>
#include <stdlib.h>

#include "dragon/ir.h"
#include "test.h"

/* ---- a printer that shows structure ------------------------------------- */

static int prec(dg_expr_kind k) {
  switch (k) {
    case DG_EXPR_OR: return 1;
    case DG_EXPR_AND: return 2;
    case DG_EXPR_EQ: case DG_EXPR_NE: case DG_EXPR_LT:
    case DG_EXPR_LE: case DG_EXPR_GT: case DG_EXPR_GE: return 3;
    case DG_EXPR_ADD: case DG_EXPR_SUB: return 4;
    case DG_EXPR_MUL: case DG_EXPR_DIV: case DG_EXPR_FLOORDIV:
    case DG_EXPR_FLOORMOD: return 5;
    default: return 9;
  }
}

static void pr_rec(dg_str *s, const dg_expr *e, int parent, bool right) {
  int p = prec(e->kind);
  bool paren = p < parent || (right && p == parent && p < 9);
  if (paren) dg_str_putc(s, '(');
  switch (e->kind) {
    case DG_EXPR_INT:
      if (e->dtype == DG_BOOL) dg_str_puts(s, e->ival ? "true" : "false");
      else dg_str_printf(s, "%lld", (long long)e->ival);
      break;
    case DG_EXPR_FLOAT: dg_str_printf(s, "%.17g", e->fval); break;
    case DG_EXPR_VAR: dg_str_puts(s, e->var->name); break;
    case DG_EXPR_LOAD:
    case DG_EXPR_CALL:
      dg_str_puts(s, e->kind == DG_EXPR_LOAD ? e->buf->name : dg_math_name(e->fn));
      dg_str_putc(s, e->kind == DG_EXPR_LOAD ? '[' : '(');
      for (int i = 0; i < e->nargs; i++) {
        if (i) dg_str_puts(s, ", ");
        pr_rec(s, e->args[i], 0, false);
      }
      dg_str_putc(s, e->kind == DG_EXPR_LOAD ? ']' : ')');
      break;
    case DG_EXPR_MIN:
    case DG_EXPR_MAX:
      dg_str_printf(s, "%s(", dg_expr_kind_name(e->kind));
      pr_rec(s, e->a, 0, false);
      dg_str_puts(s, ", ");
      pr_rec(s, e->b, 0, false);
      dg_str_putc(s, ')');
      break;
    case DG_EXPR_SELECT:
      dg_str_puts(s, "select(");
      pr_rec(s, e->a, 0, false);
      dg_str_puts(s, ", ");
      pr_rec(s, e->b, 0, false);
      dg_str_puts(s, ", ");
      pr_rec(s, e->c, 0, false);
      dg_str_putc(s, ')');
      break;
    case DG_EXPR_CAST:
      dg_str_printf(s, "%s(", dg_dtype_name(e->dtype));
      pr_rec(s, e->a, 0, false);
      dg_str_putc(s, ')');
      break;
    case DG_EXPR_NOT:
      dg_str_putc(s, '!');
      pr_rec(s, e->a, 9, false);
      break;
    default:
      pr_rec(s, e->a, p, false);
      dg_str_printf(s, e->kind == DG_EXPR_MUL ? "%s" : " %s ", dg_expr_kind_name(e->kind));
      pr_rec(s, e->b, p, true);
      break;
  }
  if (paren) dg_str_putc(s, ')');
}

/* Prints into one of a few rotating static buffers (fine for CHECK_STREQ). */
static const char *pr(const dg_expr *e) {
  static char bufs[4][512];
  static int next;
  char *out = bufs[next++ % 4];
  dg_str s;
  dg_str_init(&s);
  pr_rec(&s, e, 0, false);
  snprintf(out, 512, "%s", s.s);
  dg_str_free(&s);
  return out;
}

/* ---- a naive evaluator ---------------------------------------------------- */

typedef struct {
  const dg_var *var[8];
  int64_t val[8];
  int n;
  bool undefined; /* division by zero met */
} env;

static int64_t ev_fdiv(int64_t a, int64_t b) {
  int64_t q = a / b;
  if (a % b != 0 && ((a < 0) != (b < 0))) q--;
  return q;
}

static int64_t eval(const dg_expr *e, env *v) {
  int64_t a, b;
  switch (e->kind) {
    case DG_EXPR_INT: return e->ival;
    case DG_EXPR_VAR:
      for (int i = 0; i < v->n; i++)
        if (v->var[i] == e->var) return v->val[i];
      v->undefined = true;
      return 0;
    case DG_EXPR_NOT: return !eval(e->a, v);
    case DG_EXPR_SELECT: return eval(e->a, v) ? eval(e->b, v) : eval(e->c, v);
    case DG_EXPR_CAST: return eval(e->a, v);
    default: break;
  }
  a = eval(e->a, v);
  b = eval(e->b, v);
  switch (e->kind) {
    case DG_EXPR_ADD: return a + b;
    case DG_EXPR_SUB: return a - b;
    case DG_EXPR_MUL: return a * b;
    case DG_EXPR_FLOORDIV:
      if (b == 0) { v->undefined = true; return 0; }
      return ev_fdiv(a, b);
    case DG_EXPR_FLOORMOD:
      if (b == 0) { v->undefined = true; return 0; }
      return a - ev_fdiv(a, b) * b;
    case DG_EXPR_MIN: return a < b ? a : b;
    case DG_EXPR_MAX: return a > b ? a : b;
    case DG_EXPR_EQ: return a == b;
    case DG_EXPR_NE: return a != b;
    case DG_EXPR_LT: return a < b;
    case DG_EXPR_LE: return a <= b;
    case DG_EXPR_GT: return a > b;
    case DG_EXPR_GE: return a >= b;
    case DG_EXPR_AND: return a && b;
    case DG_EXPR_OR: return a || b;
    default: DG_UNREACHABLE();
  }
}

/* ---- fixtures ------------------------------------------------------------ */

typedef struct {
  dg_func *f;
  dg_var *i, *j, *k, *i0, *i1, *x, *c;
  dg_ranges r;
} fix;

static void fix_init(fix *t) {
  memset(t, 0, sizeof *t);
  t->f = ir_func_new("t");
  t->i = ir_var_new(t->f, "i", DG_I32);
  t->j = ir_var_new(t->f, "j", DG_I32);
  t->k = ir_var_new(t->f, "k", DG_I32);
  t->i0 = ir_var_new(t->f, "i0", DG_I32);
  t->i1 = ir_var_new(t->f, "i1", DG_I32);
  t->x = ir_var_new(t->f, "x", DG_I32);
  t->c = ir_var_new(t->f, "c", DG_BOOL);
}

#define V(v) ir_var(t.f, t.v)
#define I(n) ir_int(t.f, n)
#define ADD(a, b) ir_add(t.f, a, b)
#define SUB(a, b) ir_sub(t.f, a, b)
#define MUL(a, b) ir_mul(t.f, a, b)
#define DIV(a, b) ir_bin(t.f, DG_EXPR_FLOORDIV, a, b)
#define MOD(a, b) ir_bin(t.f, DG_EXPR_FLOORMOD, a, b)
#define BIN(k, a, b) ir_bin(t.f, DG_EXPR_##k, a, b)
#define S(e) ir_simplify(t.f, e, &t.r)
#define S0(e) ir_simplify(t.f, e, NULL)

/* ---- constant folding ---------------------------------------------------- */

DG_TEST(simplify_fold_int) {
  fix t;
  fix_init(&t);
  CHECK_STREQ(pr(S0(ADD(I(2), MUL(I(3), I(4))))), "14");
  CHECK_STREQ(pr(S0(DIV(I(-7), I(2)))), "-4");
  CHECK_STREQ(pr(S0(MOD(I(-7), I(2)))), "1");
  CHECK_STREQ(pr(S0(DIV(I(7), I(-2)))), "-4");
  CHECK_STREQ(pr(S0(MOD(I(7), I(-2)))), "-1");
  CHECK_STREQ(pr(S0(MOD(I(-8), I(4)))), "0");
  CHECK_STREQ(pr(S0(BIN(MIN, I(3), I(-5)))), "-5");
  CHECK_STREQ(pr(S0(BIN(MAX, I(3), I(-5)))), "3");
  CHECK_STREQ(pr(S0(BIN(LT, I(3), I(5)))), "true");
  CHECK_STREQ(pr(S0(BIN(GE, I(3), I(5)))), "false");
  CHECK_STREQ(pr(S0(BIN(EQ, I(5), I(5)))), "true");
  CHECK_STREQ(pr(S0(BIN(NE, I(5), I(5)))), "false");
  CHECK_STREQ(pr(S0(BIN(AND, ir_bool(t.f, true), ir_bool(t.f, false)))), "false");
  CHECK_STREQ(pr(S0(BIN(OR, ir_bool(t.f, true), ir_bool(t.f, false)))), "true");
  CHECK_STREQ(pr(S0(ir_not(t.f, ir_bool(t.f, false)))), "true");
  CHECK_STREQ(pr(S0(ir_select(t.f, BIN(LT, I(1), I(2)), I(7), I(9)))), "7");
  /* division by zero is left alone, never folded and never a crash */
  CHECK_STREQ(pr(S0(DIV(I(7), I(0)))), "7 // 0");
  CHECK_STREQ(pr(S0(MOD(V(x), I(0)))), "x % 0");
  /* i64 constants keep their dtype */
  dg_expr *big = ir_add(t.f, ir_int_t(t.f, INT64_C(1) << 40, DG_I64), ir_int_t(t.f, 5, DG_I64));
  dg_expr *s = S0(big);
  CHECK(s->kind == DG_EXPR_INT && s->ival == (INT64_C(1) << 40) + 5 && s->dtype == DG_I64);
  /* an overflowing constant is not folded into a wrong value */
  dg_expr *ov = ir_mul(t.f, ir_int_t(t.f, INT64_MAX, DG_I64), ir_int_t(t.f, 4, DG_I64));
  s = S0(ov);
  CHECK(s->kind == DG_EXPR_MUL);
  ir_func_free(t.f);
}

DG_TEST(simplify_fold_float_and_cast) {
  fix t;
  fix_init(&t);
  dg_func *f = t.f;
  dg_var *y = ir_var_new(f, "y", DG_F32);
  dg_expr *s = S0(ir_add(f, ir_float(f, 1.5, DG_F32), ir_float(f, 2.25, DG_F32)));
  CHECK(s->kind == DG_EXPR_FLOAT && s->fval == 3.75 && s->dtype == DG_F32);
  s = S0(ir_mul(f, ir_float(f, 3.0, DG_F16), ir_float(f, 0.5, DG_F16)));
  CHECK(s->kind == DG_EXPR_FLOAT && s->fval == 1.5);
  s = S0(ir_bin(f, DG_EXPR_DIV, ir_float(f, 3.0, DG_F64), ir_float(f, 4.0, DG_F64)));
  CHECK(s->kind == DG_EXPR_FLOAT && s->fval == 0.75);
  /* inexact: 0.1 + 0.2 rounds in f64; 1/3 rounds; f16 2049 is not a half */
  s = S0(ir_add(f, ir_float(f, 0.1, DG_F64), ir_float(f, 0.2, DG_F64)));
  CHECK(s->kind == DG_EXPR_ADD);
  s = S0(ir_bin(f, DG_EXPR_DIV, ir_float(f, 1.0, DG_F32), ir_float(f, 3.0, DG_F32)));
  CHECK(s->kind == DG_EXPR_DIV);
  s = S0(ir_add(f, ir_float(f, 2048.0, DG_F16), ir_float(f, 1.0, DG_F16)));
  CHECK(s->kind == DG_EXPR_ADD);
  s = S0(ir_mul(f, ir_float(f, 60000.0, DG_F16), ir_float(f, 2.0, DG_F16)));
  CHECK(s->kind == DG_EXPR_MUL); /* overflows f16 */
  /* floats are never reassociated: (y + 1) + 2 stays */
  dg_expr *yy = ir_var(f, y);
  s = S0(ir_add(f, ir_add(f, yy, ir_float(f, 1.0, DG_F32)), ir_float(f, 2.0, DG_F32)));
  CHECK_STREQ(pr(s), "y + 1 + 2");
  s = S0(ir_sub(f, yy, yy));
  CHECK_STREQ(pr(s), "y - y");
  s = S0(ir_mul(f, yy, ir_float(f, 1.0, DG_F32)));
  CHECK_STREQ(pr(s), "y");
  s = S0(ir_bin(f, DG_EXPR_LT, ir_float(f, 1.0, DG_F32), ir_float(f, 2.0, DG_F32)));
  CHECK_STREQ(pr(s), "true");
  /* float comparisons are not negated (NaN) */
  s = S0(ir_not(f, ir_bin(f, DG_EXPR_LT, yy, ir_float(f, 2.0, DG_F32))));
  CHECK(s->kind == DG_EXPR_NOT);
  /* casts of constants */
  s = S0(ir_cast(f, DG_F32, I(3)));
  CHECK(s->kind == DG_EXPR_FLOAT && s->fval == 3.0 && s->dtype == DG_F32);
  s = S0(ir_cast(f, DG_I32, ir_float(f, -2.75, DG_F32)));
  CHECK(s->kind == DG_EXPR_INT && s->ival == -2);
  s = S0(ir_cast(f, DG_I64, I(-9)));
  CHECK(s->kind == DG_EXPR_INT && s->ival == -9 && s->dtype == DG_I64);
  s = S0(ir_cast(f, DG_I8, I(300)));
  CHECK(s->kind == DG_EXPR_CAST); /* would wrap: left alone */
  s = S0(ir_cast(f, DG_BOOL, I(5)));
  CHECK(s->kind == DG_EXPR_INT && s->ival == 1 && s->dtype == DG_BOOL);
  s = S0(ir_cast(f, DG_F16, ir_float(f, 0.1, DG_F32)));
  CHECK(s->kind == DG_EXPR_CAST); /* would round twice through f32: left */
  s = S0(ir_cast(f, DG_F32, ir_float(f, 0.5, DG_F16)));
  CHECK(s->kind == DG_EXPR_FLOAT && s->fval == 0.5 && s->dtype == DG_F32);
  s = S0(ir_cast(f, DG_I32, V(i)));
  CHECK_STREQ(pr(s), "i");
  ir_func_free(f);
}

/* ---- linear forms -------------------------------------------------------- */

DG_TEST(simplify_linear) {
  fix t;
  fix_init(&t);
  CHECK_STREQ(pr(S0(SUB(MUL(ADD(V(i), I(2)), I(3)), V(i)))), "i*2 + 6");
  CHECK_STREQ(pr(S0(SUB(V(i), V(i)))), "0");
  CHECK_STREQ(pr(S0(MUL(V(x), I(0)))), "0");
  CHECK_STREQ(pr(S0(MUL(I(1), V(x)))), "x");
  CHECK_STREQ(pr(S0(ADD(I(4), ADD(V(j), V(i))))), "i + j + 4");
  CHECK_STREQ(pr(S0(SUB(V(j), V(i)))), "j - i");
  CHECK_STREQ(pr(S0(SUB(I(0), V(i)))), "i*-1");
  CHECK_STREQ(pr(S0(SUB(SUB(I(1), V(i)), MUL(V(j), I(3))))), "i*-1 - j*3 + 1");
  CHECK_STREQ(pr(S0(SUB(V(i), I(5)))), "i - 5");
  /* products of non-constant factors are ordered terms with a coefficient */
  CHECK_STREQ(pr(S0(MUL(MUL(V(j), I(2)), MUL(I(3), V(i))))), "i*j*6");
  CHECK_STREQ(pr(S0(ADD(MUL(V(j), V(i)), MUL(V(i), V(j))))), "i*j*2");
  /* equal linear expressions written differently give equal results */
  dg_expr *e1 = ADD(ADD(MUL(V(i), I(4)), V(j)), SUB(I(7), MUL(V(k), I(2))));
  dg_expr *e2 = SUB(ADD(V(j), ADD(I(3), MUL(I(2), MUL(V(i), I(2))))),
                    SUB(MUL(V(k), I(2)), I(4)));
  dg_expr *s1 = S0(e1), *s2 = S0(e2);
  CHECK(ir_expr_equal(s1, s2));
  CHECK_STREQ(pr(s1), "i*4 + j - k*2 + 7");
  CHECK(ir_expr_equal(S0(s1), s1));
  /* a range pins a variable of extent one */
  ir_ranges_push(&t.r, t.k, 0, 0);
  CHECK_STREQ(pr(S(ADD(V(i), MUL(V(k), I(8))))), "i");
  ir_func_free(t.f);
}

/* ---- division and modulo with ranges ------------------------------------- */

DG_TEST(simplify_divmod) {
  fix t;
  fix_init(&t);
  ir_ranges_push(&t.r, t.i0, 0, 3);
  ir_ranges_push(&t.r, t.i1, 0, 31);
  dg_expr *fused = ADD(MUL(V(i0), I(32)), V(i1));
  CHECK_STREQ(pr(S(DIV(fused, I(32)))), "i0");
  CHECK_STREQ(pr(S(MOD(fused, I(32)))), "i1");
  CHECK_STREQ(pr(S(BIN(LT, fused, I(128)))), "true");
  CHECK_STREQ(pr(S(BIN(LT, fused, I(127)))), "i0*32 + i1 < 127");
  CHECK(ir_prove(t.f, BIN(LT, fused, I(128)), &t.r));
  CHECK(!ir_prove(t.f, BIN(LT, fused, I(127)), &t.r));
  /* without ranges the quotient keeps the remainder's floordiv */
  CHECK_STREQ(pr(S0(DIV(fused, I(32)))), "i0 + i1 // 32");
  CHECK_STREQ(pr(S0(MOD(fused, I(32)))), "i1 % 32");
  /* (i*4 + j) // 2 with j in [0, 1] */
  ir_ranges_push(&t.r, t.j, 0, 1);
  CHECK_STREQ(pr(S(DIV(ADD(MUL(V(i), I(4)), V(j)), I(2)))), "i*2");
  CHECK_STREQ(pr(S(MOD(ADD(MUL(V(i), I(4)), V(j)), I(2)))), "j");
  /* (x // 8) * 8 + x % 8 -> x, with or without ranges */
  CHECK_STREQ(pr(S0(ADD(MUL(DIV(V(x), I(8)), I(8)), MOD(V(x), I(8))))), "x");
  CHECK_STREQ(pr(S0(ADD(MOD(V(x), I(8)), MUL(I(8), DIV(V(x), I(8)))))), "x");
  CHECK_STREQ(pr(S0(SUB(V(x), MUL(DIV(V(x), I(8)), I(8))))), "x - x // 8*8");
  CHECK_STREQ(pr(S0(DIV(V(x), I(1)))), "x");
  CHECK_STREQ(pr(S0(MOD(V(x), I(1)))), "0");
  CHECK_STREQ(pr(S0(DIV(DIV(V(x), I(4)), I(8)))), "x // 32");
  CHECK_STREQ(pr(S0(DIV(ADD(DIV(V(x), I(4)), I(3)), I(8)))), "(x + 12) // 32");
  CHECK_STREQ(pr(S0(MOD(MOD(V(x), I(32)), I(8)))), "x % 8");
  CHECK_STREQ(pr(S0(DIV(MOD(V(x), I(32)), I(4)))), "x % 32 // 4");
  CHECK_STREQ(pr(S0(MOD(DIV(V(x), I(4)), I(8)))), "x // 4 % 8");
  /* constants are moved out by whole periods */
  CHECK_STREQ(pr(S0(DIV(ADD(V(x), I(70)), I(32)))), "(x + 6) // 32 + 2");
  CHECK_STREQ(pr(S0(MOD(ADD(V(x), I(70)), I(32)))), "(x + 6) % 32");
  CHECK_STREQ(pr(S0(DIV(SUB(V(x), I(1)), I(32)))), "(x + 31) // 32 - 1");
  /* common factors: (x*4 + 2) // 8 = (x*2 + 1) // 4 = x // 2 */
  CHECK_STREQ(pr(S0(DIV(ADD(MUL(V(x), I(4)), I(2)), I(8)))), "x // 2");
  CHECK_STREQ(pr(S0(MOD(ADD(MUL(V(x), I(4)), I(2)), I(8)))), "x % 2*4 + 2");
  /* a remainder that stays in one period with an offset */
  ir_ranges_push(&t.r, t.k, 8, 15);
  CHECK_STREQ(pr(S(DIV(V(k), I(8)))), "1");
  CHECK_STREQ(pr(S(MOD(V(k), I(8)))), "k - 8");
  /* non-constant divisor with a known-small numerator */
  CHECK_STREQ(pr(S(DIV(V(j), V(k)))), "0");
  CHECK_STREQ(pr(S(MOD(V(j), V(k)))), "j");
  ir_func_free(t.f);
}

/* ---- what split and fuse produce ----------------------------------------- */

/* Substitutes v := to in e (the tests do not depend on subst.c). */
static dg_expr *sub1(dg_func *f, dg_expr *e, dg_var *v, dg_expr *to) {
  dg_subst m = {v, to};
  return ir_subst_expr(f, e, &m, 1);
}

DG_TEST(simplify_split_fuse) {
  fix t;
  fix_init(&t);
  dg_func *f = t.f;
  dg_var *fu = ir_var_new(f, "f", DG_I32), *f0 = ir_var_new(f, "f0", DG_I32);
  dg_var *f1 = ir_var_new(f, "f1", DG_I32);
  /* split i (64) by 8 then fuse (i0, i1) back: i -> f */
  ir_ranges_push(&t.r, fu, 0, 63);
  dg_expr *split = ADD(MUL(V(i0), I(8)), V(i1));
  dg_expr *e = sub1(f, split, t.i0, DIV(ir_var(f, fu), I(8)));
  e = sub1(f, e, t.i1, MOD(ir_var(f, fu), I(8)));
  CHECK_STREQ(pr(S(e)), "f");
  ir_ranges_pop(&t.r, 1);

  /* fuse (i: 4, j: 16) -> f in [0, 64), then split f by 4: f = f0*4 + f1 */
  ir_ranges_push(&t.r, f0, 0, 15);
  ir_ranges_push(&t.r, f1, 0, 3);
  dg_expr *fsplit = ADD(MUL(ir_var(f, f0), I(4)), ir_var(f, f1));
  dg_expr *ie = S(DIV(fsplit, I(16))), *je = S(MOD(fsplit, I(16)));
  CHECK_STREQ(pr(ie), "f0 // 4");
  CHECK_STREQ(pr(je), "f1 + f0 % 4*4");
  /* the original flat index i*16 + j comes back */
  CHECK_STREQ(pr(S(ADD(MUL(ie, I(16)), je))), "f0*4 + f1");
  /* split f by 32 instead (a multiple of j's extent) */
  ir_ranges_pop(&t.r, 2);
  ir_ranges_push(&t.r, f0, 0, 1);
  ir_ranges_push(&t.r, f1, 0, 31);
  fsplit = ADD(MUL(ir_var(f, f0), I(32)), ir_var(f, f1));
  ie = S(DIV(fsplit, I(16)));
  je = S(MOD(fsplit, I(16)));
  CHECK_STREQ(pr(ie), "f0*2 + f1 // 16");
  CHECK_STREQ(pr(je), "f1 % 16");
  CHECK_STREQ(pr(S(ADD(MUL(ie, I(16)), je))), "f0*32 + f1");
  /* split of a split: i -> (a*4 + b)*8 + c, then // 32 and % 32 */
  dg_var *a = ir_var_new(f, "a", DG_I32), *b = ir_var_new(f, "b", DG_I32);
  dg_var *cc = ir_var_new(f, "cc", DG_I32);
  ir_ranges_push(&t.r, a, 0, 7);
  ir_ranges_push(&t.r, b, 0, 3);
  ir_ranges_push(&t.r, cc, 0, 7);
  dg_expr *nest = ADD(MUL(ADD(MUL(ir_var(f, a), I(4)), ir_var(f, b)), I(8)), ir_var(f, cc));
  CHECK_STREQ(pr(S(DIV(nest, I(32)))), "a");
  CHECK_STREQ(pr(S(MOD(nest, I(32)))), "b*8 + cc");
  CHECK_STREQ(pr(S(DIV(MOD(nest, I(32)), I(8)))), "b");
  CHECK_STREQ(pr(S(DIV(nest, I(8)))), "a*4 + b");
  CHECK(ir_prove(f, BIN(LT, nest, I(256)), &t.r));
  CHECK(ir_prove(f, BIN(GE, nest, I(0)), &t.r));
  ir_func_free(f);
}

/* ---- comparisons, min/max, booleans -------------------------------------- */

DG_TEST(simplify_compare_minmax_bool) {
  fix t;
  fix_init(&t);
  ir_ranges_push(&t.r, t.i, 0, 127);
  CHECK_STREQ(pr(S(BIN(MIN, V(i), I(200)))), "i");
  CHECK_STREQ(pr(S(BIN(MIN, I(200), V(i)))), "i");
  CHECK_STREQ(pr(S(BIN(MAX, V(i), I(200)))), "200");
  CHECK_STREQ(pr(S(BIN(MAX, V(i), I(0)))), "i");
  CHECK_STREQ(pr(S(BIN(MIN, V(i), I(100)))), "min(i, 100)");
  CHECK_STREQ(pr(S(BIN(MIN, I(100), V(i)))), "min(i, 100)");
  CHECK_STREQ(pr(S0(BIN(MIN, V(x), ADD(V(x), I(1))))), "x");
  CHECK_STREQ(pr(S0(BIN(MAX, V(x), ADD(V(x), I(1))))), "x + 1");
  CHECK_STREQ(pr(S0(BIN(MAX, V(x), V(x)))), "x");
  /* comparisons: decided by the bounds of the difference, else canonical */
  CHECK_STREQ(pr(S(BIN(LT, V(i), I(128)))), "true");
  CHECK_STREQ(pr(S(BIN(GE, V(i), I(0)))), "true");
  CHECK_STREQ(pr(S(BIN(GT, V(i), I(127)))), "false");
  CHECK_STREQ(pr(S0(BIN(LT, V(x), ADD(V(x), I(1))))), "true");
  CHECK_STREQ(pr(S0(BIN(EQ, V(x), V(x)))), "true");
  CHECK_STREQ(pr(S0(BIN(LT, ADD(V(x), I(3)), ADD(V(j), I(1))))), "x < j - 2");
  CHECK_STREQ(pr(S0(BIN(LT, I(10), V(x)))), "x > 10");
  CHECK_STREQ(pr(S0(BIN(LT, ADD(MUL(V(j), I(4)), V(x)), ADD(MUL(V(j), I(4)), I(8))))), "x < 8");
  /* booleans */
  dg_expr *c = ir_var(t.f, t.c);
  CHECK_STREQ(pr(S0(BIN(AND, c, ir_bool(t.f, true)))), "c");
  CHECK_STREQ(pr(S0(BIN(AND, ir_bool(t.f, false), c))), "false");
  CHECK_STREQ(pr(S0(BIN(OR, c, ir_bool(t.f, true)))), "true");
  CHECK_STREQ(pr(S0(BIN(OR, ir_bool(t.f, false), c))), "c");
  CHECK_STREQ(pr(S0(BIN(AND, c, c))), "c");
  CHECK_STREQ(pr(S0(ir_not(t.f, ir_not(t.f, c)))), "c");
  CHECK_STREQ(pr(S0(ir_not(t.f, BIN(LT, V(x), V(j))))), "x >= j");
  CHECK_STREQ(pr(S0(ir_not(t.f, BIN(EQ, V(x), V(j))))), "x != j");
  CHECK_STREQ(pr(S0(ir_not(t.f, BIN(LE, V(x), I(3))))), "x > 3");
  /* select */
  CHECK_STREQ(pr(S(ir_select(t.f, BIN(LT, V(i), I(128)), V(x), V(j)))), "x");
  CHECK_STREQ(pr(S0(ir_select(t.f, c, ADD(V(x), V(x)), MUL(V(x), I(2))))), "x*2");
  CHECK_STREQ(pr(S0(ir_select(t.f, c, V(x), V(j)))), "select(c, x, j)");
  /* prove */
  CHECK(ir_prove(t.f, BIN(AND, BIN(LT, V(i), I(128)), BIN(GE, V(i), I(0))), &t.r));
  CHECK(!ir_prove(t.f, BIN(LT, V(i), I(100)), &t.r));
  CHECK(!ir_prove(t.f, BIN(LT, V(x), I(100)), NULL));
  ir_func_free(t.f);
}

/* ---- bounds -------------------------------------------------------------- */

DG_TEST(simplify_bounds) {
  fix t;
  fix_init(&t);
  ir_ranges_push(&t.r, t.i, 0, 3);
  ir_ranges_push(&t.r, t.j, -5, 7);
  dg_interval b = ir_expr_bounds(ADD(MUL(V(i), I(8)), V(j)), &t.r);
  CHECK(b.lo == -5 && b.hi == 31);
  b = ir_expr_bounds(MUL(V(j), I(-2)), &t.r);
  CHECK(b.lo == -14 && b.hi == 10);
  b = ir_expr_bounds(MUL(V(i), V(j)), &t.r);
  CHECK(b.lo == -15 && b.hi == 21);
  b = ir_expr_bounds(DIV(V(j), I(4)), &t.r);
  CHECK(b.lo == -2 && b.hi == 1);
  b = ir_expr_bounds(MOD(V(j), I(4)), &t.r);
  CHECK(b.lo == 0 && b.hi == 3);
  b = ir_expr_bounds(MOD(V(i), I(8)), &t.r);
  CHECK(b.lo == 0 && b.hi == 3);
  b = ir_expr_bounds(BIN(MIN, V(i), V(j)), &t.r);
  CHECK(b.lo == -5 && b.hi == 3);
  b = ir_expr_bounds(BIN(MAX, V(i), V(j)), &t.r);
  CHECK(b.lo == 0 && b.hi == 7);
  b = ir_expr_bounds(ir_select(t.f, ir_var(t.f, t.c), V(i), ADD(V(j), I(100))), &t.r);
  CHECK(b.lo == 0 && b.hi == 107);
  b = ir_expr_bounds(BIN(LT, V(i), I(4)), &t.r);
  CHECK(b.lo == 1 && b.hi == 1);
  b = ir_expr_bounds(V(x), &t.r); /* unknown: the dtype's range */
  CHECK(b.lo == INT32_MIN && b.hi == INT32_MAX);
  b = ir_expr_bounds(ir_cast(t.f, DG_I64, V(i)), &t.r);
  CHECK(b.lo == 0 && b.hi == 3);
  b = ir_expr_bounds(ir_float(t.f, 1.0, DG_F32), &t.r);
  CHECK(b.lo == INT64_MIN && b.hi == INT64_MAX);
  /* saturation instead of overflow */
  dg_expr *big = ir_int_t(t.f, INT64_MAX / 2, DG_I64);
  dg_var *z = ir_var_new(t.f, "z", DG_I64);
  ir_ranges_push(&t.r, z, 0, INT64_MAX / 2);
  b = ir_expr_bounds(ir_mul(t.f, ir_add(t.f, ir_var(t.f, z), big), ir_int_t(t.f, 4, DG_I64)), &t.r);
  CHECK(b.lo == INT64_MAX);
  CHECK(b.hi == INT64_MAX);
  b = ir_expr_bounds(ir_sub(t.f, ir_int_t(t.f, INT64_MIN + 1, DG_I64), ir_var(t.f, z)), &t.r);
  CHECK(b.lo == INT64_MIN);
  ir_func_free(t.f);
}

/* ---- randomized: the value never changes --------------------------------- */

typedef struct {
  fix *t;
  dg_rng rng;
  dg_var *vars[3];
} gen_ctx;

static dg_expr *gen_bool(gen_ctx *g, int depth);

static dg_expr *gen_int(gen_ctx *g, int depth) {
  dg_func *f = g->t->f;
  uint64_t r = dg_rng_below(&g->rng, depth <= 0 ? 2 : 13);
  switch (r) {
    case 0: return ir_var(f, g->vars[dg_rng_below(&g->rng, 3)]);
    case 1: return ir_int(f, dg_rng_range(&g->rng, -9, 9));
    case 2: return ir_add(f, gen_int(g, depth - 1), gen_int(g, depth - 1));
    case 3: return ir_sub(f, gen_int(g, depth - 1), gen_int(g, depth - 1));
    case 4: return ir_mul(f, gen_int(g, depth - 1), ir_int(f, dg_rng_range(&g->rng, -4, 8)));
    case 5: return ir_mul(f, gen_int(g, depth - 1), gen_int(g, depth - 2));
    case 6:
    case 7: {
      static const int64_t divs[] = {1, 2, 3, 4, 6, 8, 16, 32, -3};
      dg_expr *d = ir_int(f, divs[dg_rng_below(&g->rng, DG_ARRAY_LEN(divs))]);
      return ir_bin(f, r == 6 ? DG_EXPR_FLOORDIV : DG_EXPR_FLOORMOD, gen_int(g, depth - 1), d);
    }
    case 8: /* a divisor that may be zero: compared only where defined */
      return ir_bin(f, dg_rng_below(&g->rng, 2) ? DG_EXPR_FLOORDIV : DG_EXPR_FLOORMOD,
                    gen_int(g, depth - 1), gen_int(g, depth - 2));
    case 9:
      return ir_bin(f, DG_EXPR_MIN, gen_int(g, depth - 1), gen_int(g, depth - 1));
    case 10:
      return ir_bin(f, DG_EXPR_MAX, gen_int(g, depth - 1), gen_int(g, depth - 1));
    case 11:
      return ir_select(f, gen_bool(g, depth - 1), gen_int(g, depth - 1), gen_int(g, depth - 1));
    default: {
      /* split/fuse shapes: (a*c + b) // c, % c */
      int64_t c = (int64_t)1 << dg_rng_below(&g->rng, 4);
      dg_expr *s = ir_add(f, ir_mul(f, gen_int(g, depth - 1), ir_int(f, c)), gen_int(g, depth - 1));
      return ir_bin(f, dg_rng_below(&g->rng, 2) ? DG_EXPR_FLOORDIV : DG_EXPR_FLOORMOD, s,
                    ir_int(f, c * (int64_t)(1 + dg_rng_below(&g->rng, 2))));
    }
  }
}

static dg_expr *gen_bool(gen_ctx *g, int depth) {
  dg_func *f = g->t->f;
  static const dg_expr_kind cmps[] = {DG_EXPR_EQ, DG_EXPR_NE, DG_EXPR_LT,
                                      DG_EXPR_LE, DG_EXPR_GT, DG_EXPR_GE};
  uint64_t r = dg_rng_below(&g->rng, depth <= 0 ? 1 : 5);
  switch (r) {
    case 0:
    case 1:
      return ir_bin(f, cmps[dg_rng_below(&g->rng, 6)], gen_int(g, depth - 1), gen_int(g, depth - 1));
    case 2: return ir_bin(f, DG_EXPR_AND, gen_bool(g, depth - 1), gen_bool(g, depth - 1));
    case 3: return ir_bin(f, DG_EXPR_OR, gen_bool(g, depth - 1), gen_bool(g, depth - 1));
    default: return ir_not(f, gen_bool(g, depth - 1));
  }
}

static const int64_t LO[3] = {0, 0, -3}, HI[3] = {3, 7, 5};

/* Checks s against e on every point of the ranges; false on a mismatch. */
static bool same_values(gen_ctx *g, const dg_expr *e, const dg_expr *s) {
  env v = {.n = 3};
  for (int q = 0; q < 3; q++) v.var[q] = g->vars[q];
  for (v.val[0] = LO[0]; v.val[0] <= HI[0]; v.val[0]++)
    for (v.val[1] = LO[1]; v.val[1] <= HI[1]; v.val[1]++)
      for (v.val[2] = LO[2]; v.val[2] <= HI[2]; v.val[2]++) {
        v.undefined = false;
        int64_t want = eval(e, &v);
        if (v.undefined) continue;
        int64_t got = eval(s, &v);
        if (v.undefined || got != want) {
          dg_test_fail(__FILE__, __LINE__, "at (%lld,%lld,%lld): %s = %lld but simplified %s = %lld",
                       (long long)v.val[0], (long long)v.val[1], (long long)v.val[2], pr(e),
                       (long long)want, pr(s), (long long)got);
          return false;
        }
      }
  return true;
}

DG_TEST(simplify_random_values) {
  fix t;
  fix_init(&t);
  gen_ctx g = {&t, {{0}}, {t.i, t.j, t.k}};
  dg_rng_seed(&g.rng, 12345);
  for (int q = 0; q < 3; q++) ir_ranges_push(&t.r, g.vars[q], LO[q], HI[q]);
  int simplified_smaller = 0;
  for (int n = 0; n < 4000; n++) {
    dg_expr *e = (n % 4 == 3) ? gen_bool(&g, 4) : gen_int(&g, 4);
    dg_expr *s = ir_simplify(t.f, e, &t.r);
    if (!same_values(&g, e, s)) return;
    dg_expr *s2 = ir_simplify(t.f, s, &t.r);
    CHECK_MSG(ir_expr_equal(s, s2), "not idempotent: %s -> %s -> %s", pr(e), pr(s), pr(s2));
    /* simplified without ranges, it must hold on these points too */
    dg_expr *u = ir_simplify(t.f, e, NULL);
    if (!same_values(&g, e, u)) return;
    simplified_smaller += s->kind == DG_EXPR_INT;
    if (n % 500 == 499) { /* keep the arena small */
      ir_func_free(t.f);
      fix_init(&t);
      g.vars[0] = t.i;
      g.vars[1] = t.j;
      g.vars[2] = t.k;
      for (int q = 0; q < 3; q++) ir_ranges_push(&t.r, g.vars[q], LO[q], HI[q]);
    }
  }
  CHECK(simplified_smaller > 100); /* the generator does reach constants */
  ir_func_free(t.f);
}

/* Without ranges, values far outside any range (negative, large) too. */
DG_TEST(simplify_random_no_ranges) {
  fix t;
  fix_init(&t);
  gen_ctx g = {&t, {{0}}, {t.i, t.j, t.k}};
  dg_rng_seed(&g.rng, 777);
  for (int n = 0; n < 2000; n++) {
    dg_expr *e = gen_int(&g, 4);
    dg_expr *s = ir_simplify(t.f, e, NULL);
    env v = {.n = 3};
    for (int q = 0; q < 3; q++) v.var[q] = g.vars[q];
    for (int p = 0; p < 40; p++) {
      for (int q = 0; q < 3; q++) v.val[q] = dg_rng_range(&g.rng, -100, 100);
      v.undefined = false;
      int64_t want = eval(e, &v);
      if (v.undefined) continue;
      int64_t got = eval(s, &v);
      CHECK_MSG(!v.undefined && got == want, "%s = %lld but %s = %lld", pr(e),
                (long long)want, pr(s), (long long)got);
    }
    CHECK_MSG(ir_expr_equal(ir_simplify(t.f, s, NULL), s), "not idempotent: %s", pr(s));
  }
  ir_func_free(t.f);
}

/* Random linear combinations written two different ways simplify alike. */
DG_TEST(simplify_random_canonical) {
  fix t;
  fix_init(&t);
  dg_var *vs[4] = {t.i, t.j, t.k, t.x};
  dg_rng rng;
  dg_rng_seed(&rng, 99);
  for (int n = 0; n < 500; n++) {
    int64_t coef[4], k0 = dg_rng_range(&rng, -20, 20);
    for (int q = 0; q < 4; q++) coef[q] = dg_rng_range(&rng, -3, 3);
    /* form 1: c0*v0 + c1*v1 + ... + k0, left to right */
    dg_expr *e1 = I(k0);
    for (int q = 0; q < 4; q++) e1 = ADD(e1, MUL(ir_var(t.f, vs[q]), I(coef[q])));
    /* form 2: reversed, each coefficient as repeated additions/subtractions,
     * the constant split in two */
    dg_expr *e2 = I(k0 - 5);
    for (int q = 3; q >= 0; q--) {
      for (int64_t m = 0; m < (coef[q] < 0 ? -coef[q] : coef[q]); m++)
        e2 = coef[q] < 0 ? SUB(e2, ir_var(t.f, vs[q])) : ADD(ir_var(t.f, vs[q]), e2);
    }
    e2 = ADD(e2, I(5));
    dg_expr *s1 = S0(e1), *s2 = S0(e2);
    CHECK_MSG(ir_expr_equal(s1, s2), "%s vs %s", pr(s1), pr(s2));
  }
  ir_func_free(t.f);
}
