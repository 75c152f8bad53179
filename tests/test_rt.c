/* test_rt.c: running kernels on the CPU: hand-built kernels with results
 * known in advance (matmul, padded conv, softmax, max with init, f16
 * rounding, floordiv of negatives), the compiled code against the
 * interpreter, the poison and NaN rules of the check, data filling, compile
 * errors, and `dragon run`. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "dragon/codegen.h"
#include "dragon/rt.h"
#include "dragon/rt_cuda.h"
#include "dragon/sched.h"
#include "dragon/search.h"
#include "dragon/wl.h"
#include "test.h"

/* ---- building kernels ---------------------------------------------------- */

static dg_buffer *param(dg_func *f, const char *name, dg_dtype t, int nd, int64_t d0,
                        int64_t d1) {
  int64_t shape[2] = {d0, d1};
  dg_buffer *b = ir_buffer_new(f, name, t, nd, shape, DG_SCOPE_GLOBAL);
  ir_func_add_param(f, b);
  return b;
}

static dg_buffer *local(dg_func *f, const char *name, dg_dtype t, int64_t n) {
  return ir_buffer_new(f, name, t, 1, (int64_t[]){n}, DG_SCOPE_GLOBAL);
}

static dg_expr *ld(dg_func *f, dg_buffer *b, dg_expr *i0, dg_expr *i1) {
  dg_expr *ix[2] = {i0, i1};
  return ir_load(f, b, ix, b->ndim);
}

static dg_stmt *st(dg_func *f, dg_buffer *b, dg_expr *i0, dg_expr *i1, dg_expr *v) {
  dg_expr *ix[2] = {i0, i1};
  return ir_store(f, b, ix, b->ndim, v);
}

/* A loop nest of n loops around one block with one iteration variable per
 * loop, kinds given as "S"/"R" letters; the block's body is set later. */
typedef struct {
  dg_func *f;
  dg_block *b;
  dg_var *l[3], *v[3];
  int64_t ext[3];
  int n;
} nest;

static void nest_begin(nest *x, dg_func *f, const char *name, const char *kinds,
                       const int64_t *ext) {
  x->f = f;
  x->n = (int)strlen(kinds);
  x->b = ir_block_new(f, name);
  for (int k = 0; k < x->n; k++) {
    char ln[64], vn[64];
    snprintf(ln, sizeof ln, "%s_l%d", name, k);
    snprintf(vn, sizeof vn, "%s_v%d", name, k);
    x->l[k] = ir_var_new(f, ln, DG_I32);
    x->v[k] = ir_var_new(f, vn, DG_I32);
    x->ext[k] = ext[k];
    ir_block_add_iter(f, x->b, x->v[k], ext[k],
                      kinds[k] == 'R' ? DG_ITER_REDUCE : DG_ITER_SPATIAL, ir_var(f, x->l[k]));
  }
}

static dg_expr *iv(nest *x, int k) { return ir_var(x->f, x->v[k]); }

static dg_stmt *nest_end(nest *x, dg_stmt *init, dg_stmt *body) {
  x->b->init = init;
  x->b->body = body;
  dg_stmt *s = ir_block_stmt(x->f, x->b);
  for (int k = x->n; k-- > 0;) s = ir_for(x->f, x->l[k], x->ext[k], DG_LOOP_SERIAL, DG_TAG_NONE, s);
  return s;
}

static void finish(dg_func *f, dg_stmt **stages, int n, dg_buffer **allocs, int na) {
  dg_block *root = ir_block_new(f, "root");
  for (int i = 0; i < na; i++) ir_block_add_alloc(f, root, allocs[i]);
  root->body = n == 1 ? stages[0] : ir_seq(f, stages, n);
  f->body = ir_block_stmt(f, root);
}

static dg_expr *I(dg_func *f, int64_t v) { return ir_int(f, v); }
static dg_expr *F(dg_func *f, double v) { return ir_float(f, v, DG_F32); }

/* C (M, N) = A (M, K) · B (K, N), f32. */
static dg_func *matmul(int64_t M, int64_t N, int64_t K) {
  dg_func *f = ir_func_new("matmul");
  dg_buffer *A = param(f, "A", DG_F32, 2, M, K);
  dg_buffer *B = param(f, "B", DG_F32, 2, K, N);
  dg_buffer *C = param(f, "C", DG_F32, 2, M, N);
  nest x;
  nest_begin(&x, f, "C", "SSR", (int64_t[]){M, N, K});
  dg_stmt *s = nest_end(
      &x, st(f, C, iv(&x, 0), iv(&x, 1), F(f, 0)),
      st(f, C, iv(&x, 0), iv(&x, 1),
         ir_add(f, ld(f, C, iv(&x, 0), iv(&x, 1)),
                ir_mul(f, ld(f, A, iv(&x, 0), iv(&x, 2)), ld(f, B, iv(&x, 2), iv(&x, 1))))));
  finish(f, &s, 1, NULL, 0);
  return f;
}

/* Y (n) = sum over r of X[i + r - 1] · W[r], zero padding through select. */
static dg_func *conv1d(int64_t n) {
  dg_func *f = ir_func_new("conv1d");
  dg_buffer *X = param(f, "X", DG_F32, 1, n, 0);
  dg_buffer *W = param(f, "W", DG_F32, 1, 3, 0);
  dg_buffer *Y = param(f, "Y", DG_F32, 1, n, 0);
  nest x;
  nest_begin(&x, f, "Y", "SR", (int64_t[]){n, 3});
  dg_expr *p = ir_sub(f, ir_add(f, iv(&x, 0), iv(&x, 1)), I(f, 1));
  dg_expr *inb = ir_bin(f, DG_EXPR_AND, ir_bin(f, DG_EXPR_GE, p, I(f, 0)),
                        ir_bin(f, DG_EXPR_LT, p, I(f, n)));
  dg_expr *xv = ir_select(f, inb, ld(f, X, p, NULL), F(f, 0));
  dg_stmt *s = nest_end(&x, st(f, Y, iv(&x, 0), NULL, F(f, 0)),
                        st(f, Y, iv(&x, 0), NULL,
                           ir_add(f, ld(f, Y, iv(&x, 0), NULL),
                                  ir_mul(f, xv, ld(f, W, iv(&x, 1), NULL)))));
  finish(f, &s, 1, NULL, 0);
  return f;
}

/* Y (n) = softmax(X (n)) in four stages over root-allocated buffers. */
static dg_func *softmax(int64_t n, dg_dtype t) {
  dg_func *f = ir_func_new("softmax");
  dg_buffer *X = param(f, "X", t, 1, n, 0);
  dg_buffer *Y = param(f, "Y", t, 1, n, 0);
  dg_buffer *M = local(f, "M", t, 1), *E = local(f, "E", t, n), *S = local(f, "S", t, 1);
  dg_expr *z;
  nest a, b, c, d;
  nest_begin(&a, f, "M", "R", &n);
  z = I(f, 0);
  dg_stmt *s0 = nest_end(&a, st(f, M, z, NULL, ir_float(f, -INFINITY, t)),
                         st(f, M, z, NULL,
                            ir_bin(f, DG_EXPR_MAX, ld(f, M, z, NULL), ld(f, X, iv(&a, 0), NULL))));
  nest_begin(&b, f, "E", "S", &n);
  dg_stmt *s1 = nest_end(
      &b, NULL,
      st(f, E, iv(&b, 0), NULL,
         ir_call1(f, DG_MATH_EXP, ir_sub(f, ld(f, X, iv(&b, 0), NULL), ld(f, M, z, NULL)))));
  nest_begin(&c, f, "S", "R", &n);
  dg_stmt *s2 = nest_end(
      &c, st(f, S, z, NULL, ir_float(f, 0, t)),
      st(f, S, z, NULL, ir_add(f, ld(f, S, z, NULL), ld(f, E, iv(&c, 0), NULL))));
  nest_begin(&d, f, "Y", "S", &n);
  dg_stmt *s3 = nest_end(
      &d, NULL,
      st(f, Y, iv(&d, 0), NULL,
         ir_bin(f, DG_EXPR_DIV, ld(f, E, iv(&d, 0), NULL), ld(f, S, z, NULL))));
  dg_stmt *stages[4] = {s0, s1, s2, s3};
  dg_buffer *allocs[3] = {M, E, S};
  finish(f, stages, 4, allocs, 3);
  return f;
}

/* Y (m) = max over k of X (m, k), init -inf. */
static dg_func *rowmax(int64_t m, int64_t k) {
  dg_func *f = ir_func_new("rowmax");
  dg_buffer *X = param(f, "X", DG_F32, 2, m, k);
  dg_buffer *Y = param(f, "Y", DG_F32, 1, m, 0);
  nest x;
  nest_begin(&x, f, "Y", "SR", (int64_t[]){m, k});
  dg_stmt *s = nest_end(&x, st(f, Y, iv(&x, 0), NULL, F(f, -INFINITY)),
                        st(f, Y, iv(&x, 0), NULL,
                           ir_bin(f, DG_EXPR_MAX, ld(f, Y, iv(&x, 0), NULL),
                                  ld(f, X, iv(&x, 0), iv(&x, 1)))));
  finish(f, &s, 1, NULL, 0);
  return f;
}

/* C (n) = (A + B) + B, all f16. */
static dg_func *f16_chain(int64_t n) {
  dg_func *f = ir_func_new("hadd");
  dg_buffer *A = param(f, "A", DG_F16, 1, n, 0);
  dg_buffer *B = param(f, "B", DG_F16, 1, n, 0);
  dg_buffer *C = param(f, "C", DG_F16, 1, n, 0);
  nest x;
  nest_begin(&x, f, "C", "S", &n);
  dg_expr *b = ld(f, B, iv(&x, 0), NULL);
  dg_stmt *s = nest_end(&x, NULL,
                        st(f, C, iv(&x, 0), NULL, ir_add(f, ir_add(f, ld(f, A, iv(&x, 0), NULL), b), b)));
  finish(f, &s, 1, NULL, 0);
  return f;
}

/* Q = A // B, R = A % B, i32. */
static dg_func *divmod(int64_t n) {
  dg_func *f = ir_func_new("divmod");
  dg_buffer *A = param(f, "A", DG_I32, 1, n, 0);
  dg_buffer *B = param(f, "B", DG_I32, 1, n, 0);
  dg_buffer *Q = param(f, "Q", DG_I32, 1, n, 0);
  dg_buffer *R = param(f, "R", DG_I32, 1, n, 0);
  nest x;
  nest_begin(&x, f, "QR", "S", &n);
  dg_expr *a = ld(f, A, iv(&x, 0), NULL), *b = ld(f, B, iv(&x, 0), NULL);
  dg_stmt *two[2] = {st(f, Q, iv(&x, 0), NULL, ir_bin(f, DG_EXPR_FLOORDIV, a, b)),
                     st(f, R, iv(&x, 0), NULL, ir_bin(f, DG_EXPR_FLOORMOD, a, b))};
  dg_stmt *s = nest_end(&x, NULL, ir_seq(f, two, 2));
  finish(f, &s, 1, NULL, 0);
  return f;
}

/* Y (n) = X[(3i - 7) mod n] * f32((i - 4) // 3): negative floordiv/floormod
 * operands in index and value arithmetic. */
static dg_func *gather(int64_t n) {
  dg_func *f = ir_func_new("gather");
  dg_buffer *X = param(f, "X", DG_F32, 1, n, 0);
  dg_buffer *Y = param(f, "Y", DG_F32, 1, n, 0);
  nest x;
  nest_begin(&x, f, "Y", "S", &n);
  dg_expr *j = ir_bin(f, DG_EXPR_FLOORMOD, ir_sub(f, ir_mul(f, iv(&x, 0), I(f, 3)), I(f, 7)),
                      I(f, n));
  dg_expr *q = ir_bin(f, DG_EXPR_FLOORDIV, ir_sub(f, iv(&x, 0), I(f, 4)), I(f, 3));
  dg_stmt *s = nest_end(&x, NULL, st(f, Y, iv(&x, 0), NULL,
                                     ir_mul(f, ld(f, X, j, NULL), ir_cast(f, DG_F32, q))));
  finish(f, &s, 1, NULL, 0);
  return f;
}

/* Y (n) = X (n) written only for i < written: the rest stays unwritten. */
static dg_func *partial_copy(int64_t n, int64_t written) {
  dg_func *f = ir_func_new("copy");
  dg_buffer *X = param(f, "X", DG_F32, 1, n, 0);
  dg_buffer *Y = param(f, "Y", DG_F32, 1, n, 0);
  nest x;
  nest_begin(&x, f, "Y", "S", &written);
  dg_stmt *s = nest_end(&x, NULL, st(f, Y, iv(&x, 0), NULL, ld(f, X, iv(&x, 0), NULL)));
  finish(f, &s, 1, NULL, 0);
  return f;
}

/* ---- running ------------------------------------------------------------- */

/* Compiles kernel and reference (may be the same kernel) in one source. */
static bool compile2(const dg_func *kernel, const dg_func *ref, rt_cpu_kernel **k) {
  dg_status s;
  dg_status_ok(&s);
  char *src = codegen_emit_source(kernel, ref, &codegen_lang_c, &s);
  if (!src) {
    fprintf(stderr, "%s\n", s.msg);
    return false;
  }
  static const char *const names[2] = {CODEGEN_KERNEL_FN, CODEGEN_REFERENCE_FN};
  bool ok = rt_cpu_compile_many(src, names, 2, k, &s);
  if (!ok) fprintf(stderr, "%s\n", s.msg);
  free(src);
  return ok;
}

/* Sets the inputs from `values` (one array per parameter, NULL for
 * outputs), poisons the outputs, runs the compiled kernel and reference. */
static bool run_known(const dg_func *f, const double *const *values, rt_tensors *ts) {
  dg_status s;
  if (!rt_tensors_init(ts, f, &s)) return false;
  rt_data_poison(ts);
  for (int i = 0; i < ts->n; i++)
    if (values[i])
      for (int64_t k = 0; k < ts->t[i].numel; k++) rt_data_set(&ts->t[i], k, values[i][k]);
  rt_cpu_kernel *k[2];
  if (!compile2(f, f, k)) return false;
  rt_cpu_call(k[0], ts->args);
  rt_cpu_call(k[1], ts->ref_args);
  rt_cpu_free(k[0]);
  rt_cpu_free(k[1]);
  return true;
}

/* ---- known values -------------------------------------------------------- */

DG_TEST(rt_matmul_known) {
  dg_func *f = matmul(2, 2, 3);
  const double a[] = {1, 2, 3, 4, 5, 6}, b[] = {7, 8, 9, 10, 11, 12};
  const double *v[] = {a, b, NULL};
  rt_tensors ts;
  bool ok = run_known(f, v, &ts);
  CHECK(ok);
  const double want[] = {58, 64, 139, 154};
  for (int i = 0; i < 4; i++) {
    CHECK_NEAR(rt_data_get(&ts.t[2], i, false), want[i], 0);
    CHECK_NEAR(rt_data_get(&ts.t[2], i, true), want[i], 0);
  }
  rt_check c;
  rt_check_outputs(&ts, rt_check_reduce_len(f), &c);
  CHECK(c.pass);
  CHECK_EQ(c.K, 3);
  CHECK_EQ(c.n_checked, 4);
  /* The interpreter, from poisoned outputs again, gets the same. */
  rt_data_poison(&ts);
  dg_status s;
  CHECK(rt_interp_run(f, ts.args, false, &s));
  for (int i = 0; i < 4; i++) CHECK_NEAR(rt_data_get(&ts.t[2], i, false), want[i], 0);
  rt_tensors_free(&ts);
  ir_func_free(f);
}

DG_TEST(rt_conv1d_padding) {
  dg_func *f = conv1d(5);
  const double x[] = {1, 2, 3, 4, 5}, w[] = {1, 2, 3};
  const double *v[] = {x, w, NULL};
  rt_tensors ts;
  bool ok = run_known(f, v, &ts);
  CHECK(ok);
  const double want[] = {8, 14, 20, 26, 14};
  for (int i = 0; i < 5; i++) CHECK_NEAR(rt_data_get(&ts.t[2], i, false), want[i], 0);
  /* The select must be lazy: the interpreter checks every access, and the
   * padded loads X[-1] and X[5] are never made. */
  rt_data_poison(&ts);
  dg_status s;
  bool iok = rt_interp_run(f, ts.args, false, &s);
  CHECK_MSG(iok, "%s", s.msg);
  for (int i = 0; i < 5; i++) CHECK_NEAR(rt_data_get(&ts.t[2], i, false), want[i], 0);
  rt_tensors_free(&ts);
  ir_func_free(f);
}

DG_TEST(rt_softmax_known) {
  dg_func *f = softmax(4, DG_F32);
  const double x[] = {1, 2, 3, 4};
  const double *v[] = {x, NULL};
  rt_tensors ts;
  bool ok = run_known(f, v, &ts);
  CHECK(ok);
  const double want[] = {0.032058603280, 0.087144318742, 0.236882818090, 0.643914259888};
  for (int i = 0; i < 4; i++) {
    CHECK_NEAR(rt_data_get(&ts.t[1], i, false), want[i], 1e-6);
    CHECK_NEAR(rt_data_get(&ts.t[1], i, true), want[i], 1e-11);
  }
  rt_check c;
  rt_check_outputs(&ts, rt_check_reduce_len(f), &c);
  CHECK(c.pass);
  CHECK(c.max_abs < 1e-7);
  rt_tensors_free(&ts);
  ir_func_free(f);
}

DG_TEST(rt_max_reduce_init) {
  dg_func *f = rowmax(2, 3);
  const double x[] = {-5, -2, -9, 3, 7, 1};
  const double *v[] = {x, NULL};
  rt_tensors ts;
  bool ok = run_known(f, v, &ts);
  CHECK(ok);
  CHECK_NEAR(rt_data_get(&ts.t[1], 0, false), -2, 0);
  CHECK_NEAR(rt_data_get(&ts.t[1], 1, false), 7, 0);
  rt_tensors_free(&ts);
  /* Without its init the block reads the NaN poison, which max propagates:
   * the check must fail. */
  dg_func *g = rowmax(2, 3);
  g->body->block->body->body->body->block->init = NULL;
  ok = run_known(g, v, &ts);
  CHECK(ok);
  CHECK(isnan(rt_data_get(&ts.t[1], 0, false)));
  rt_check c;
  rt_check_outputs(&ts, 3, &c);
  CHECK(!c.pass);
  CHECK_EQ(c.n_bad, 2);
  rt_tensors_free(&ts);
  ir_func_free(g);
  ir_func_free(f);
}

DG_TEST(rt_f16_rounds_every_op) {
  dg_func *f = f16_chain(4);
  /* (a + b) + b with ties at each step: rounding after every operation
   * gives `want`; one rounding at the end would give 1.0009765625, 2050 and
   * -0.99951171875 for elements 0, 2, 3. */
  const double a[] = {1, 1.0009765625, 2048, -1};
  const double b[] = {0.00048828125, 0.00048828125, 1, 0.000244140625};
  const double want[] = {1, 1.001953125, 2048, -1};
  const double exact[] = {1.0009765625, 1.001953125, 2050, -0.99951171875};
  const double *v[] = {a, b, NULL};
  rt_tensors ts;
  bool ok = run_known(f, v, &ts);
  CHECK(ok);
  for (int i = 0; i < 4; i++) {
    CHECK_NEAR(rt_data_get(&ts.t[2], i, false), want[i], 0);
    CHECK_NEAR(rt_data_get(&ts.t[2], i, true), exact[i], 0);
  }
  rt_data_poison(&ts);
  dg_status s;
  CHECK(rt_interp_run(f, ts.args, false, &s));
  for (int i = 0; i < 4; i++) CHECK_NEAR(rt_data_get(&ts.t[2], i, false), want[i], 0);
  rt_tensors_free(&ts);
  ir_func_free(f);
}

DG_TEST(rt_floordiv_negative) {
  dg_func *f = divmod(6);
  const double a[] = {-7, 7, -7, 7, 0, -1}, b[] = {2, -2, -2, 2, 3, 3};
  const double q[] = {-4, -4, 3, 3, 0, -1}, r[] = {1, -1, -1, 1, 0, 2};
  const double *v[] = {a, b, NULL, NULL};
  rt_tensors ts;
  bool ok = run_known(f, v, &ts);
  CHECK(ok);
  for (int i = 0; i < 6; i++) {
    CHECK_EQ(rt_data_get(&ts.t[2], i, false), q[i]);
    CHECK_EQ(rt_data_get(&ts.t[3], i, false), r[i]);
  }
  rt_check c;
  rt_check_outputs(&ts, 1, &c);
  CHECK(c.pass);
  rt_data_poison(&ts);
  dg_status s;
  CHECK(rt_interp_run(f, ts.args, false, &s));
  for (int i = 0; i < 6; i++) {
    CHECK_EQ(rt_data_get(&ts.t[2], i, false), q[i]);
    CHECK_EQ(rt_data_get(&ts.t[3], i, false), r[i]);
  }
  /* Division by zero is an error in the interpreter (0 in compiled code). */
  rt_data_set(&ts.t[1], 4, 0);
  CHECK(!rt_interp_run(f, ts.args, false, &s));
  CHECK_ERR(s, "block QR: division by zero");
  rt_tensors_free(&ts);
  ir_func_free(f);
}

/* ---- the check ----------------------------------------------------------- */

DG_TEST(rt_check_poison_unwritten) {
  dg_func *full = partial_copy(4, 4), *half = partial_copy(4, 2);
  rt_tensors ts;
  dg_status s;
  CHECK(rt_tensors_init(&ts, half, &s));
  rt_data_fill(&ts, 1, RT_DIST_UNIFORM);
  rt_cpu_kernel *k[2];
  CHECK(compile2(half, full, k));
  rt_cpu_call(k[0], ts.args);
  rt_cpu_call(k[1], ts.ref_args);
  rt_check c;
  rt_check_outputs(&ts, 1, &c);
  CHECK(!c.pass);
  CHECK_EQ(c.n_bad, 2);
  CHECK_MSG(strstr(c.first_bad, "Y[2]: got nan") != NULL, "%s", c.first_bad);
  /* The full kernel passes on the same tensors. */
  rt_data_poison(&ts);
  rt_cpu_call(k[1], ts.ref_args);
  CHECK(rt_interp_run(full, ts.args, false, &s));
  rt_check_outputs(&ts, 1, &c);
  CHECK(c.pass);
  CHECK_EQ(c.max_abs, 0);
  rt_cpu_free(k[0]);
  rt_cpu_free(k[1]);
  rt_tensors_free(&ts);
  ir_func_free(full);
  ir_func_free(half);
}

DG_TEST(rt_check_nan_never_passes) {
  dg_func *f = partial_copy(3, 3);
  rt_tensors ts;
  dg_status s;
  CHECK(rt_tensors_init(&ts, f, &s));
  rt_tensor *y = &ts.t[1];
  CHECK(y->is_output && !ts.t[0].is_output);
  rt_check c;
  /* Finite and equal passes; a tiny error within tolerance passes. */
  for (int i = 0; i < 3; i++) rt_data_set(y, i, 0.5);
  ((float *)y->data)[1] = 0.5f + 1e-7f;
  rt_check_outputs(&ts, 1, &c);
  CHECK(c.pass);
  CHECK(c.max_abs > 0 && c.max_abs < 1e-6);
  /* NaN where the reference is finite. */
  ((float *)y->data)[0] = NAN;
  rt_check_outputs(&ts, 1, &c);
  CHECK(!c.pass);
  CHECK_EQ(c.n_bad, 1);
  /* NaN where the reference is NaN too. */
  ((double *)y->ref)[0] = NAN;
  rt_check_outputs(&ts, 1, &c);
  CHECK(!c.pass);
  /* Equal infinities pass; infinity against a finite value does not. */
  rt_data_set(y, 0, INFINITY);
  rt_check_outputs(&ts, 1, &c);
  CHECK(c.pass);
  ((double *)y->ref)[0] = 1e30;
  rt_check_outputs(&ts, 1, &c);
  CHECK(!c.pass);
  /* A real error (1e-3 at scale 0.5) fails f32's tolerance. */
  rt_data_set(y, 0, 0.5);
  ((float *)y->data)[2] = 0.501f;
  rt_check_outputs(&ts, 1, &c);
  CHECK(!c.pass);
  CHECK_MSG(strstr(c.first_bad, "Y[2]") != NULL, "%s", c.first_bad);
  rt_tensors_free(&ts);
  ir_func_free(f);
}

/* The baseline of the check: a layernorm over rows of two values, where a
 * row whose values nearly agree leaves x - mean to cancellation and then
 * multiplies it by up to 316 (rsqrt of var + 1e-5). In f32 the unscheduled
 * kernel itself misses the float64 reference by more than the tolerance at
 * T_layer_norm[81, 1] on seed 0; an element within 4 times the baseline's
 * own error there passes, every other element still must be right, and
 * every path of the check (the C emulation of the untuned GPU program, the
 * compiled kernel, the interpreter, the GPU's data set) judges the same. */
DG_TEST(rt_check_allows_the_baselines_own_error) {
  dg_status s;
  dg_func *f = wl_build("layernorm:m=384,n=2,dtype=f32", &s);
  CHECK_MSG(f != NULL, "%s", s.msg);
  rt_tensors ts;
  CHECK(rt_tensors_init(&ts, f, &s));
  rt_data_fill(&ts, 0, rt_data_dist_for(f));
  CHECK_MSG(rt_reference_run(f, &ts, NULL, &s), "%s", s.msg);
  rt_tensor *y = &ts.t[3];
  CHECK(y->is_output && y->base && strcmp(y->buf->name, "T_layer_norm") == 0);
  const int64_t at = 81 * 2 + 1;
  size_t bytes = (size_t)y->numel * sizeof(float);
  void *base = y->base;
  float *out = y->data;
  memcpy(out, base, bytes);
  double want = ((double *)y->ref)[at], berr = fabs(out[at] - want);
  CHECK_MSG(berr > 1e-5, "the baseline's own error at [81, 1]: %g", berr);

  /* without the baseline the unscheduled kernel's own result fails there */
  rt_check c;
  y->base = NULL;
  rt_check_outputs(&ts, rt_check_reduce_len(f), &c);
  CHECK(!c.pass && c.n_bad == 1);
  CHECK_MSG(strstr(c.first_bad, "T_layer_norm[81, 1]") != NULL, "%s", c.first_bad);
  y->base = base;
  rt_check_outputs(&ts, rt_check_reduce_len(f), &c);
  CHECK_MSG(c.pass, "%s", c.first_bad);
  /* within 4 times its error passes, past it fails */
  out[at] = (float)(want + 3.5 * berr);
  rt_check_outputs(&ts, rt_check_reduce_len(f), &c);
  CHECK_MSG(c.pass, "%s", c.first_bad);
  out[at] = (float)(want - 5 * berr);
  rt_check_outputs(&ts, rt_check_reduce_len(f), &c);
  CHECK(!c.pass && c.n_bad == 1);
  /* an element the baseline gets right must be right */
  out[at] = ((float *)base)[at];
  out[0] = (float)(((double *)y->ref)[0] + 10 * berr);
  rt_check_outputs(&ts, rt_check_reduce_len(f), &c);
  CHECK(!c.pass && c.n_bad == 1);
  CHECK_MSG(strstr(c.first_bad, "T_layer_norm[0, 0]") != NULL, "%s", c.first_bad);
  /* a NaN never passes, whatever the baseline did */
  out[0] = ((float *)base)[0];
  out[at] = NAN;
  rt_check_outputs(&ts, rt_check_reduce_len(f), &c);
  CHECK(!c.pass);

  /* the paths that compute the baseline when a first check fails: the
   * untuned GPU program emulated, the kernel compiled and interpreted */
  rt_data_poison(&ts);
  y->base = NULL;
  free(base);
  CHECK(rt_interp_run(f, ts.ref_args, true, &s) && rt_interp_run(f, ts.args, false, &s));
  CHECK(rt_check_outputs_for(f, &ts, false, &c, &s));
  CHECK_MSG(c.pass && y->base, "%s", c.first_bad);
  for (int compiled = 0; compiled < 2; compiled++) {
    CHECK(rt_compare_cpu(f, f, 0, compiled, &c, NULL, &s));
    CHECK_MSG(c.pass, "%s", c.first_bad);
  }
  sched *gpu = NULL;
  CHECK_MSG(search_baseline_schedule(f, NULL, &gpu, &s), "%s", s.msg);
  CHECK_MSG(rt_program_check_c(f, sched_func(gpu), 0, &c, &s), "%s", s.msg);
  CHECK_MSG(c.pass, "%s", c.first_bad);
  sched_free(gpu);
  rt_tensors_free(&ts);
  ir_func_free(f);
}

/* ---- compiled code against the interpreter ------------------------------- */

/* Runs f (kernel k[0], reference k[1]) compiled and interpreted on the same
 * seeded inputs, kernel and reference mode; every output must agree bit for
 * bit, and the compiled kernel must pass the check. */
static void agree(dg_func *f, rt_cpu_kernel *const *k, uint64_t seed) {
  rt_tensors a, b;
  dg_status s;
  rt_dist dist = rt_data_dist_for(f);
  CHECK(rt_tensors_init(&a, f, &s) && rt_tensors_init(&b, f, &s));
  rt_data_fill(&a, seed, dist);
  rt_data_fill(&b, seed, dist);
  rt_cpu_call(k[0], a.args);
  rt_cpu_call(k[1], a.ref_args);
  bool ok = rt_interp_run(f, b.args, false, &s) && rt_interp_run(f, b.ref_args, true, &s);
  CHECK_MSG(ok, "%s", s.msg);
  for (int i = 0; i < a.n; i++) {
    if (!a.t[i].is_output) continue;
    for (int64_t j = 0; j < a.t[i].numel; j++) {
      double x = rt_data_get(&a.t[i], j, false), y = rt_data_get(&b.t[i], j, false);
      double xr = rt_data_get(&a.t[i], j, true), yr = rt_data_get(&b.t[i], j, true);
      CHECK_MSG(x == y && xr == yr && !isnan(x), "%s %s[%lld]: compiled %.17g/%.17g, interp %.17g/%.17g",
                f->name, a.t[i].buf->name, (long long)j, x, xr, y, yr);
    }
  }
  rt_check c;
  rt_check_outputs(&a, rt_check_reduce_len(f), &c);
  CHECK_MSG(c.pass, "%s: %s", f->name, c.first_bad);
  rt_checksum h1 = rt_data_checksum(&a), h2 = rt_data_checksum(&b);
  CHECK(h1.hash == h2.hash && h1.sum == h2.sum);
  rt_tensors_free(&a);
  rt_tensors_free(&b);
}

/* agree() for n kernels compiled together in one source (one compiler run),
 * kernel i as k<i>, its reference as r<i>; frees the kernels. */
static void agree_all(dg_func **fs, int n, uint64_t seed) {
  dg_str src;
  dg_str_init(&src);
  dg_str_puts(&src, codegen_lang_c.preamble);
  char names[32][16];
  const char *np[32];
  CHECK(n <= 16);
  dg_status s;
  for (int i = 0; i < 2 * n; i++) {
    snprintf(names[i], sizeof names[i], "%c%d", i % 2 ? 'r' : 'k', i / 2);
    np[i] = names[i];
    codegen_opts o = {.reference = i % 2, .fn_name = names[i]};
    char *fn = codegen_emit(fs[i / 2], &codegen_lang_c, &o, &s);
    CHECK_MSG(fn != NULL, "%s", s.msg);
    dg_str_puts(&src, fn);
    free(fn);
  }
  rt_cpu_kernel *k[32];
  bool ok = rt_cpu_compile_many(src.s, np, 2 * n, k, &s);
  dg_str_free(&src);
  CHECK_MSG(ok, "%s", s.msg);
  for (int i = 0; i < n; i++) {
    agree(fs[i], k + 2 * i, seed + (uint64_t)i);
    rt_cpu_free(k[2 * i]);
    rt_cpu_free(k[2 * i + 1]);
    ir_func_free(fs[i]);
  }
}

DG_TEST(rt_interp_agrees_with_compiled) {
  dg_func *fs[] = {matmul(7, 9, 33), softmax(40, DG_F32), softmax(40, DG_F16),
                   f16_chain(50), conv1d(17), rowmax(5, 6), gather(11)};
  agree_all(fs, (int)DG_ARRAY_LEN(fs), 7);
}

/* Small workloads of the real families: compiled and interpreted agree and
 * pass the check against the reference. */
DG_TEST(rt_workloads_agree) {
  static const char *const specs[] = {
      "gemm:m=8,n=12,k=20,trans_a=1,trans_b=0,dtype=f16",
      "conv2d_nhwc:n=1,h=9,w=9,ci=4,co=6,kernel=3,stride=2,pad=1,dilation=1,groups=2,dtype=f32",
      "conv2d_transpose_nhwc:n=1,h=3,w=3,ci=4,co=4,kernel=4,stride=2,pad=1,dtype=f32",
      "max_pool2d:n=1,c=2,h=9,w=9,kernel=3,stride=2,pad=1,dtype=f16",
      "softmax:m=3,n=33,dtype=f16",
      "layernorm:m=3,n=40,dtype=f32",
      "rope:b=1,s=4,h=2,d=8,dtype=f16",
  };
  dg_func *fs[DG_ARRAY_LEN(specs)];
  for (size_t i = 0; i < DG_ARRAY_LEN(specs); i++) {
    dg_status s;
    fs[i] = wl_build(specs[i], &s);
    CHECK_MSG(fs[i] != NULL, "%s: %s", specs[i], s.msg);
  }
  agree_all(fs, (int)DG_ARRAY_LEN(fs), 11);
}

/* An intermediate over 64 KiB lives on the heap in the emitted code. */
DG_TEST(rt_heap_intermediate) {
  const int64_t n = 20000;
  dg_func *f = ir_func_new("twostage");
  dg_buffer *X = param(f, "X", DG_F32, 1, n, 0);
  dg_buffer *Y = param(f, "Y", DG_F32, 1, n, 0);
  dg_buffer *T = local(f, "T", DG_F32, n);
  nest a, b;
  nest_begin(&a, f, "T", "S", &n);
  dg_stmt *s0 = nest_end(&a, NULL, st(f, T, iv(&a, 0), NULL,
                                      ir_call1(f, DG_MATH_SQRT, ld(f, X, iv(&a, 0), NULL))));
  nest_begin(&b, f, "Y", "S", &n);
  dg_stmt *s1 = nest_end(&b, NULL, st(f, Y, iv(&b, 0), NULL,
                                      ir_add(f, ld(f, T, iv(&b, 0), NULL), F(f, 1))));
  dg_stmt *stages[2] = {s0, s1};
  finish(f, stages, 2, &T, 1);
  CHECK(rt_data_dist_for(f) == RT_DIST_POSITIVE);
  agree_all(&f, 1, 3);
}

/* ---- data ---------------------------------------------------------------- */

DG_TEST(rt_data_fill_seeded) {
  dg_func *f = f16_chain(64);
  rt_tensors a, b;
  dg_status s;
  CHECK(rt_tensors_init(&a, f, &s) && rt_tensors_init(&b, f, &s));
  rt_data_fill(&a, 42, RT_DIST_UNIFORM);
  rt_data_fill(&b, 42, RT_DIST_UNIFORM);
  CHECK(memcmp(a.t[0].data, b.t[0].data, 64 * 2) == 0);
  CHECK(memcmp(a.t[0].data, a.t[1].data, 64 * 2) != 0); /* own stream per parameter */
  bool spread_lo = false, spread_hi = false;
  for (int i = 0; i < 64; i++) {
    double x = rt_data_get(&a.t[0], i, false);
    CHECK(x >= -1 && x <= 1);
    CHECK(x == rt_data_get(&a.t[0], i, true)); /* f16 inputs exact in the reference */
    spread_lo |= x < -0.5;
    spread_hi |= x > 0.5;
    CHECK(isnan(rt_data_get(&a.t[2], i, false)) && isnan(rt_data_get(&a.t[2], i, true)));
  }
  CHECK(spread_lo && spread_hi);
  rt_data_fill(&b, 43, RT_DIST_POSITIVE);
  CHECK(memcmp(a.t[0].data, b.t[0].data, 64 * 2) != 0);
  for (int i = 0; i < 64; i++) {
    double x = rt_data_get(&b.t[1], i, false);
    CHECK(x >= 0.5 && x <= 2);
  }
  CHECK(rt_data_dist_for(f) == RT_DIST_UNIFORM);
  rt_tensors_free(&a);
  rt_tensors_free(&b);
  ir_func_free(f);

  /* Integers: small, non-negative; outputs poisoned with the byte pattern. */
  f = divmod(32);
  CHECK(rt_tensors_init(&a, f, &s));
  rt_data_fill(&a, 5, RT_DIST_UNIFORM);
  for (int i = 0; i < 32; i++) {
    double x = rt_data_get(&a.t[0], i, false);
    CHECK(x >= 0 && x <= 7 && x == floor(x));
    CHECK_EQ(((uint32_t *)a.t[2].data)[i], 0xA5A5A5A5u);
  }
  rt_tensors_free(&a);
  ir_func_free(f);
}

/* ---- the runner's errors ------------------------------------------------- */

DG_TEST(rt_cpu_compile_errors) {
  rt_cpu_kernel *k = NULL;
  dg_status s;
  CHECK(!rt_cpu_compile("void f(void **args) { this is not C; }\n", "f", &k, &s));
  CHECK_ERR(s, "cc: compiling f failed");
  CHECK_ERR(s, "error");
  CHECK(!rt_cpu_compile("void f(void **args) { (void)args; }\n", "g", &k, &s));
  CHECK_ERR(s, "no function g");
  CHECK(rt_cpu_compile("void f(void **args) { *(int *)args[0] = 42; }\n", "f", &k, &s));
  int x = 0;
  void *args[1] = {&x};
  rt_cpu_call(k, args);
  CHECK_EQ(x, 42);
  rt_cpu_free(k);
}

DG_TEST(rt_interp_errors) {
  /* Reading X[i + 1] for i < 4 of X (4): the last access is out of bounds. */
  dg_func *f = ir_func_new("oob");
  dg_buffer *X = param(f, "X", DG_F32, 1, 4, 0);
  dg_buffer *Y = param(f, "Y", DG_F32, 1, 4, 0);
  int64_t n = 4;
  nest x;
  nest_begin(&x, f, "Y", "S", &n);
  dg_stmt *s0 = nest_end(&x, NULL, st(f, Y, iv(&x, 0), NULL,
                                      ld(f, X, ir_add(f, iv(&x, 0), I(f, 1)), NULL)));
  finish(f, &s0, 1, NULL, 0);
  rt_tensors ts;
  dg_status s;
  CHECK(rt_tensors_init(&ts, f, &s));
  rt_data_fill(&ts, 0, RT_DIST_UNIFORM);
  CHECK(!rt_interp_run(f, ts.args, false, &s));
  CHECK_ERR(s, "block Y: load X[4] is out of bounds");
  /* A binding outside the block's domain. */
  x.b->iters[0].extent = 3;
  CHECK(!rt_interp_run(f, ts.args, false, &s));
  CHECK_ERR(s, "Y_v0 = 3 is outside its domain [0, 3)");
  rt_tensors_free(&ts);
  ir_func_free(f);
}

/* ---- dragon run ---------------------------------------------------------- */

DG_TEST(rt_cmd_run) {
  char *out = NULL;
  int rc = dg_test_run_dragon("run gemm:m=16,n=24,k=40,dtype=f32 --seed 3 --repeat 3", NULL, &out);
  CHECK_MSG(rc == 0, "exit %d:\n%s", rc, out);
  CHECK_MSG(strstr(out, "check     pass") && strstr(out, "spec      gemm:m=16,n=24,k=40") &&
                strstr(out, "checksum  sum ") && strstr(out, "(K = 40") &&
                strstr(out, "(3 runs)"),
            "%s", out);
  free(out);
  rc = dg_test_run_dragon("run gemm:m=16,n=24,k=40 --target tpu", NULL, &out);
  CHECK_MSG(rc == 2 && strstr(out, "--target: 'tpu' is not one of cpu, c, cuda"), "%d %s", rc, out);
  free(out);
  rc = dg_test_run_dragon("run gemm:m=16,n=24,k=40 --repeat 0", NULL, &out);
  CHECK_EQ(rc, 2);
  free(out);
  rc = dg_test_run_dragon("run nosuchfamily:x=1", NULL, &out);
  CHECK_MSG(rc == 2, "%d %s", rc, out);
  free(out);
  rc = dg_test_run_dragon("run", NULL, &out);
  CHECK_EQ(rc, 2);
  free(out);
  rc = dg_test_run_dragon("run --help", NULL, &out);
  CHECK_MSG(rc == 0 && strstr(out, "--repeat N") && strstr(out, "default 10"), "%s", out);
  free(out);
}
