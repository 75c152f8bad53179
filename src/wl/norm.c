/* norm.c: the row-reduction families: norm_bmn (MetaSchedule NRM:
 * C = sum A², D = sqrt C), softmax over rows (SFM, TOPI's four blocks
 * T_softmax_maxelem, T_softmax_exp, T_softmax_expsum, T_softmax_norm, the
 * last annotated axis=1), layernorm, rmsnorm, and the plain row reductions
 * reduce_sum / reduce_max (TOPI's A_red over ax0 with reduce axis k1).
 *
 * dtype=f16: inputs (and gamma/beta/weight) are f16; every reduction and
 * intermediate is f32; the normalised output is cast back to f16. The
 * plain reductions write their f32 accumulator as the output.
 *
 * Letters: B batch, M rows, N the reduced row length.
 */
#include "wl/wl_impl.h"

#define DIM(name) WL_REQ(name, 1, WL_DIM_MAX)
#define EPS 1e-5

static dg_expr *f32(te_ctx *c, dg_expr *e) { return te_cast(c, DG_F32, e); }
static dg_expr *fdiv(te_ctx *c, dg_expr *a, dg_expr *b) { return ir_bin(c->f, DG_EXPR_DIV, a, b); }
static dg_expr *fconst(te_ctx *c, double x) { return te_float(c, x, DG_F32); }

/* ---- norm_bmn: A (b, m, n) -> C (b) -> D (b) ------------------------------- */

enum { NB_B, NB_M, NB_N, NB_DT };
static const wl_key nb_keys[] = {DIM("b"), DIM("m"), DIM("n"), WL_DTYPE};

static bool nb_check(const int64_t *v, int64_t *bytes, dg_status *st) {
  (void)st;
  dg_dtype t = wl_dtype_of(v[NB_DT]);
  wl_bytes_add(bytes, t, 3, v[NB_B], v[NB_M], v[NB_N]);
  wl_bytes_add(bytes, DG_F32, 1, v[NB_B]);
  wl_bytes_add(bytes, t, 1, v[NB_B]);
  return true;
}

static dg_func *nb_build(const int64_t *v) {
  dg_dtype t = wl_dtype_of(v[NB_DT]);
  te_ctx c;
  te_init(&c);
  int64_t sa[3] = {v[NB_B], v[NB_M], v[NB_N]};
  dg_buffer *A = te_placeholder(&c, "A", t, 3, sa);
  te_axis sb[] = {{"b", v[NB_B]}}, rd[] = {{"i", v[NB_M]}, {"j", v[NB_N]}};
  dg_expr **x = te_begin(&c, "C", DG_F32, false, sb, 1, rd, 2, TE_SUM);
  dg_buffer *C = te_end(&c, ir_mul(c.f, f32(&c, te_load(&c, A, x[0], x[1], x[2])),
                                   f32(&c, te_load(&c, A, x[0], x[1], x[2]))));
  x = te_begin(&c, "D", t, true, sb, 1, NULL, 0, TE_ASSIGN);
  te_end(&c, te_cast(&c, t, ir_call1(c.f, DG_MATH_SQRT, te_load(&c, C, x[0]))));
  return te_finish(&c);
}

static void nb_gen(dg_rng *r, int64_t *v) {
  v[NB_B] = wl_gen_batch(r);
  v[NB_M] = wl_gen_dim(r, 1, 8192);
  v[NB_N] = dg_rng_uniform(r) < 0.5 ? wl_gen_hidden(r) : wl_gen_dim(r, 1, 8192);
  v[NB_DT] = wl_gen_dtype(r);
}

const wl_family wl_family_norm_bmn = {
    "norm_bmn", "L2 norm of each batch matrix, D[b] = sqrt(sum A[b]^2) (MetaSchedule NRM)",
    "norm_bmn:b=1,m=256,n=256,dtype=f32",
    nb_keys, DG_ARRAY_LEN(nb_keys), 2, nb_check, nb_build, nb_gen};

/* ---- row families: A (m, n) ------------------------------------------------ */

enum { RW_M, RW_N, RW_DT };
static const wl_key row_keys[] = {DIM("m"), DIM("n"), WL_DTYPE};

static void row_gen(dg_rng *r, int64_t *v) {
  v[RW_M] = dg_rng_uniform(r) < 0.6 ? wl_gen_tokens(r) : wl_gen_dim(r, 1, 16384);
  v[RW_N] = dg_rng_uniform(r) < 0.6 ? wl_gen_hidden(r) : wl_gen_dim(r, 1, 32768);
  v[RW_DT] = wl_gen_dtype(r);
}

/* ---- softmax --------------------------------------------------------------- */

static bool sfm_check(const int64_t *v, int64_t *bytes, dg_status *st) {
  (void)st;
  dg_dtype t = wl_dtype_of(v[RW_DT]);
  wl_bytes_add(bytes, t, 2, v[RW_M], v[RW_N]);             /* A */
  wl_bytes_add(bytes, DG_F32, 1, 2 * v[RW_M]);            /* maxelem, expsum */
  wl_bytes_add(bytes, DG_F32, 2, v[RW_M], v[RW_N]);        /* exp */
  wl_bytes_add(bytes, t, 2, v[RW_M], v[RW_N]);             /* norm */
  return true;
}

static dg_func *sfm_build(const int64_t *v) {
  int64_t m = v[RW_M], n = v[RW_N];
  dg_dtype t = wl_dtype_of(v[RW_DT]);
  te_ctx c;
  te_init(&c);
  int64_t sa[2] = {m, n};
  dg_buffer *A = te_placeholder(&c, "A", t, 2, sa);
  te_axis rows[] = {{"i0", m}}, full[] = {{"i0", m}, {"i1", n}}, rk[] = {{"k", n}};
  dg_expr **x = te_begin(&c, "T_softmax_maxelem", DG_F32, false, rows, 1, rk, 1, TE_MAX);
  dg_buffer *mx = te_end(&c, f32(&c, te_load(&c, A, x[0], x[1])));
  x = te_begin(&c, "T_softmax_exp", DG_F32, false, full, 2, NULL, 0, TE_ASSIGN);
  dg_buffer *ex = te_end(&c, ir_call1(c.f, DG_MATH_EXP, ir_sub(c.f, f32(&c, te_load(&c, A, x[0], x[1])),
                                                            te_load(&c, mx, x[0]))));
  x = te_begin(&c, "T_softmax_expsum", DG_F32, false, rows, 1, rk, 1, TE_SUM);
  dg_buffer *es = te_end(&c, te_load(&c, ex, x[0], x[1]));
  x = te_begin(&c, "T_softmax_norm", t, true, full, 2, NULL, 0, TE_ASSIGN);
  te_end(&c, te_cast(&c, t, fdiv(&c, te_load(&c, ex, x[0], x[1]), te_load(&c, es, x[0]))));
  ir_anns_set_int(c.f, &te_last_block(&c)->anns, "axis", 1);
  return te_finish(&c);
}

const wl_family wl_family_softmax = {
    "softmax", "softmax over the rows of A (m, n) (TOPI softmax axis 1; MetaSchedule SFM)",
    "softmax:m=256,n=256,dtype=f32",
    row_keys, DG_ARRAY_LEN(row_keys), 5, sfm_check, sfm_build, row_gen};

/* ---- layernorm: (A - mean) * rsqrt(var + eps) * gamma + beta --------------- */

static bool ln_check(const int64_t *v, int64_t *bytes, dg_status *st) {
  (void)st;
  dg_dtype t = wl_dtype_of(v[RW_DT]);
  wl_bytes_add(bytes, t, 2, v[RW_M], v[RW_N]);  /* A */
  wl_bytes_add(bytes, t, 1, 2 * v[RW_N]);       /* gamma, beta */
  wl_bytes_add(bytes, DG_F32, 1, 2 * v[RW_M]);  /* sums */
  wl_bytes_add(bytes, t, 2, v[RW_M], v[RW_N]);  /* output */
  return true;
}

/* A[i, j] - mean[i] in f32 */
static dg_expr *centred(te_ctx *c, dg_buffer *A, dg_buffer *sum, dg_expr *i, dg_expr *j, int64_t n) {
  dg_expr *mean = fdiv(c, te_load(c, sum, i), fconst(c, (double)n));
  return ir_sub(c->f, f32(c, te_load(c, A, i, j)), mean);
}

static dg_func *ln_build(const int64_t *v) {
  int64_t m = v[RW_M], n = v[RW_N];
  dg_dtype t = wl_dtype_of(v[RW_DT]);
  te_ctx c;
  te_init(&c);
  int64_t sa[2] = {m, n};
  dg_buffer *A = te_placeholder(&c, "A", t, 2, sa);
  dg_buffer *gamma = te_placeholder(&c, "gamma", t, 1, &n);
  dg_buffer *beta = te_placeholder(&c, "beta", t, 1, &n);
  te_axis rows[] = {{"ax0", m}}, rk[] = {{"k", n}}, full[] = {{"i", m}, {"j", n}};
  dg_expr **x = te_begin(&c, "T_mean_sum", DG_F32, false, rows, 1, rk, 1, TE_SUM);
  dg_buffer *s1 = te_end(&c, f32(&c, te_load(&c, A, x[0], x[1])));
  x = te_begin(&c, "T_var_sum", DG_F32, false, rows, 1, rk, 1, TE_SUM);
  dg_buffer *s2 = te_end(&c, ir_mul(c.f, centred(&c, A, s1, x[0], x[1], n),
                                    centred(&c, A, s1, x[0], x[1], n)));
  x = te_begin(&c, "T_layer_norm", t, true, full, 2, NULL, 0, TE_ASSIGN);
  dg_expr *var = fdiv(&c, te_load(&c, s2, x[0]), fconst(&c, (double)n));
  dg_expr *inv = ir_call1(c.f, DG_MATH_RSQRT, ir_add(c.f, var, fconst(&c, EPS)));
  dg_expr *y = ir_mul(c.f, ir_mul(c.f, centred(&c, A, s1, x[0], x[1], n), inv),
                      f32(&c, te_load(&c, gamma, x[1])));
  te_end(&c, te_cast(&c, t, ir_add(c.f, y, f32(&c, te_load(&c, beta, x[1])))));
  return te_finish(&c);
}

const wl_family wl_family_layernorm = {
    "layernorm", "layer normalisation of the rows of A (m, n) with gamma and beta, eps 1e-5",
    "layernorm:m=2048,n=4096,dtype=f32",
    row_keys, DG_ARRAY_LEN(row_keys), 5, ln_check, ln_build, row_gen};

/* ---- rmsnorm: A * rsqrt(mean(A²) + eps) * weight ---------------------------- */

static bool rms_check(const int64_t *v, int64_t *bytes, dg_status *st) {
  (void)st;
  dg_dtype t = wl_dtype_of(v[RW_DT]);
  wl_bytes_add(bytes, t, 2, v[RW_M], v[RW_N]);
  wl_bytes_add(bytes, t, 1, v[RW_N]);
  wl_bytes_add(bytes, DG_F32, 1, v[RW_M]);
  wl_bytes_add(bytes, t, 2, v[RW_M], v[RW_N]);
  return true;
}

static dg_func *rms_build(const int64_t *v) {
  int64_t m = v[RW_M], n = v[RW_N];
  dg_dtype t = wl_dtype_of(v[RW_DT]);
  te_ctx c;
  te_init(&c);
  int64_t sa[2] = {m, n};
  dg_buffer *A = te_placeholder(&c, "A", t, 2, sa);
  dg_buffer *w = te_placeholder(&c, "weight", t, 1, &n);
  te_axis rows[] = {{"ax0", m}}, rk[] = {{"k", n}}, full[] = {{"i", m}, {"j", n}};
  dg_expr **x = te_begin(&c, "T_sq_sum", DG_F32, false, rows, 1, rk, 1, TE_SUM);
  dg_buffer *sq = te_end(&c, ir_mul(c.f, f32(&c, te_load(&c, A, x[0], x[1])),
                                    f32(&c, te_load(&c, A, x[0], x[1]))));
  x = te_begin(&c, "T_rms_norm", t, true, full, 2, NULL, 0, TE_ASSIGN);
  dg_expr *ms = fdiv(&c, te_load(&c, sq, x[0]), fconst(&c, (double)n));
  dg_expr *inv = ir_call1(c.f, DG_MATH_RSQRT, ir_add(c.f, ms, fconst(&c, EPS)));
  dg_expr *y = ir_mul(c.f, ir_mul(c.f, f32(&c, te_load(&c, A, x[0], x[1])), inv),
                      f32(&c, te_load(&c, w, x[1])));
  te_end(&c, te_cast(&c, t, y));
  return te_finish(&c);
}

const wl_family wl_family_rmsnorm = {
    "rmsnorm", "RMS normalisation of the rows of A (m, n) with a weight, eps 1e-5",
    "rmsnorm:m=2048,n=4096,dtype=f32",
    row_keys, DG_ARRAY_LEN(row_keys), 5, rms_check, rms_build, row_gen};

/* ---- reduce_sum / reduce_max: A (m, n) -> A_red (m), f32 -------------------- */

static bool red_check(const int64_t *v, int64_t *bytes, dg_status *st) {
  (void)st;
  wl_bytes_add(bytes, wl_dtype_of(v[RW_DT]), 2, v[RW_M], v[RW_N]);
  wl_bytes_add(bytes, DG_F32, 1, v[RW_M]);
  return true;
}

static dg_func *red_build(const int64_t *v, te_reduce red) {
  int64_t m = v[RW_M], n = v[RW_N];
  te_ctx c;
  te_init(&c);
  int64_t sa[2] = {m, n};
  dg_buffer *A = te_placeholder(&c, "A", wl_dtype_of(v[RW_DT]), 2, sa);
  te_axis rows[] = {{"ax0", m}}, rk[] = {{"k1", n}};
  dg_expr **x = te_begin(&c, "A_red", DG_F32, true, rows, 1, rk, 1, red);
  te_end(&c, f32(&c, te_load(&c, A, x[0], x[1])));
  return te_finish(&c);
}

static dg_func *rsum_build(const int64_t *v) { return red_build(v, TE_SUM); }
static dg_func *rmax_build(const int64_t *v) { return red_build(v, TE_MAX); }

const wl_family wl_family_reduce_sum = {
    "reduce_sum", "sum of each row of A (m, n) (TOPI sum axis 1: A_red), f32 output",
    "reduce_sum:m=4096,n=4096,dtype=f32",
    row_keys, DG_ARRAY_LEN(row_keys), 3, red_check, rsum_build, row_gen};

const wl_family wl_family_reduce_max = {
    "reduce_max", "maximum of each row of A (m, n) (TOPI max axis 1: A_red), f32 output",
    "reduce_max:m=4096,n=4096,dtype=f32",
    row_keys, DG_ARRAY_LEN(row_keys), 2, red_check, rmax_build, row_gen};
