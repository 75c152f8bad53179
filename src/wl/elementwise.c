/* elementwise.c: elementwise chains from transformer layers: bias_gelu
 * (T_add then T_gelu, the erf form), silu_mul (SwiGLU's T_silu then
 * T_multiply) and rope (rotary embedding, rotate-half form, one block
 * T_rope). Chains are kept as separate blocks so that inlining and fusion
 * stay the schedule's decision, as with TOPI's broadcast ops (axes ax0..).
 *
 * dtype=f16: inputs and the output are f16, the math and the intermediate
 * blocks are f32 (casts at the loads and before the final store).
 *
 * Letters: M rows, N columns; rope: B batch, S sequence, H heads, D head
 * dimension (even).
 */
#include "wl/wl_impl.h"

#define DIM(name) WL_REQ(name, 1, WL_DIM_MAX)

static dg_expr *f32(te_ctx *c, dg_expr *e) { return te_cast(c, DG_F32, e); }
static dg_expr *fconst(te_ctx *c, double x) { return te_float(c, x, DG_F32); }

enum { EW_M, EW_N, EW_DT };
static const wl_key ew_keys[] = {DIM("m"), DIM("n"), WL_DTYPE};

static void ew_gen(dg_rng *r, int64_t *v) {
  v[EW_M] = dg_rng_uniform(r) < 0.7 ? wl_gen_tokens(r) : wl_gen_dim(r, 1, 16384);
  if (dg_rng_uniform(r) < 0.6) {
    int64_t h = wl_gen_hidden(r);
    v[EW_N] = 4 * h / (dg_rng_uniform(r) < 0.5 ? 4 : 1);
  } else {
    v[EW_N] = wl_gen_dim(r, 1, 32768);
  }
  if (v[EW_N] > WL_DIM_MAX) v[EW_N] = WL_DIM_MAX;
  v[EW_DT] = wl_gen_dtype(r);
}

/* ---- bias_gelu: T_add = A + bias; T_gelu = x * 0.5 * (1 + erf(x / sqrt 2)) -- */

static bool bg_check(const int64_t *v, int64_t *bytes, dg_status *st) {
  (void)st;
  dg_dtype t = wl_dtype_of(v[EW_DT]);
  wl_bytes_add(bytes, t, 2, v[EW_M], v[EW_N]);
  wl_bytes_add(bytes, t, 1, v[EW_N]);
  wl_bytes_add(bytes, DG_F32, 2, v[EW_M], v[EW_N]);
  wl_bytes_add(bytes, t, 2, v[EW_M], v[EW_N]);
  return true;
}

static dg_func *bg_build(const int64_t *v) {
  int64_t m = v[EW_M], n = v[EW_N];
  dg_dtype t = wl_dtype_of(v[EW_DT]);
  te_ctx c;
  te_init(&c);
  int64_t sa[2] = {m, n};
  dg_buffer *A = te_placeholder(&c, "A", t, 2, sa);
  dg_buffer *bias = te_placeholder(&c, "bias", t, 1, &n);
  te_axis ax[] = {{"ax0", m}, {"ax1", n}};
  dg_expr **x = te_begin(&c, "T_add", DG_F32, false, ax, 2, NULL, 0, TE_ASSIGN);
  dg_buffer *s = te_end(&c, ir_add(c.f, f32(&c, te_load(&c, A, x[0], x[1])),
                                   f32(&c, te_load(&c, bias, x[1]))));
  x = te_begin(&c, "T_gelu", t, true, ax, 2, NULL, 0, TE_ASSIGN);
  dg_expr *e = ir_call1(c.f, DG_MATH_ERF,
                        ir_mul(c.f, te_load(&c, s, x[0], x[1]), fconst(&c, 0.70710678118654752)));
  dg_expr *g = ir_mul(c.f, ir_mul(c.f, te_load(&c, s, x[0], x[1]), fconst(&c, 0.5)),
                      ir_add(c.f, fconst(&c, 1.0), e));
  te_end(&c, te_cast(&c, t, g));
  return te_finish(&c);
}

const wl_family wl_family_bias_gelu = {
    "bias_gelu", "bias add then GELU (erf form) over A (m, n), two blocks",
    "bias_gelu:m=2048,n=3072,dtype=f32",
    ew_keys, DG_ARRAY_LEN(ew_keys), 3, bg_check, bg_build, ew_gen};

/* ---- silu_mul: T_silu = gate * sigmoid(gate); T_multiply = T_silu * up ------ */

static bool sm_check(const int64_t *v, int64_t *bytes, dg_status *st) {
  (void)st;
  dg_dtype t = wl_dtype_of(v[EW_DT]);
  wl_bytes_add(bytes, t, 2, v[EW_M], 2 * v[EW_N]);
  wl_bytes_add(bytes, DG_F32, 2, v[EW_M], v[EW_N]);
  wl_bytes_add(bytes, t, 2, v[EW_M], v[EW_N]);
  return true;
}

static dg_func *sm_build(const int64_t *v) {
  int64_t m = v[EW_M], n = v[EW_N];
  dg_dtype t = wl_dtype_of(v[EW_DT]);
  te_ctx c;
  te_init(&c);
  int64_t sa[2] = {m, n};
  dg_buffer *gate = te_placeholder(&c, "gate", t, 2, sa);
  dg_buffer *up = te_placeholder(&c, "up", t, 2, sa);
  te_axis ax[] = {{"ax0", m}, {"ax1", n}};
  dg_expr **x = te_begin(&c, "T_silu", DG_F32, false, ax, 2, NULL, 0, TE_ASSIGN);
  dg_buffer *s = te_end(&c, ir_mul(c.f, f32(&c, te_load(&c, gate, x[0], x[1])),
                                   ir_call1(c.f, DG_MATH_SIGMOID,
                                            f32(&c, te_load(&c, gate, x[0], x[1])))));
  x = te_begin(&c, "T_multiply", t, true, ax, 2, NULL, 0, TE_ASSIGN);
  te_end(&c, te_cast(&c, t, ir_mul(c.f, te_load(&c, s, x[0], x[1]),
                                   f32(&c, te_load(&c, up, x[0], x[1])))));
  return te_finish(&c);
}

const wl_family wl_family_silu_mul = {
    "silu_mul", "SwiGLU gate: silu(gate) * up over (m, n), two blocks",
    "silu_mul:m=1024,n=11008,dtype=f32",
    ew_keys, DG_ARRAY_LEN(ew_keys), 3, sm_check, sm_build, ew_gen};

/* ---- rope: x (b, s, h, d), cos / sin (s, d) -> T_rope (b, s, h, d) -----------
 * y = x * cos + rotate_half(x) * sin, rotate_half(x)[j] = -x[j + d/2] for
 * j < d/2 and x[j - d/2] otherwise (the select evaluates only its arm). */

enum { RP_B, RP_S, RP_H, RP_D, RP_DT };
static const wl_key rope_keys[] = {DIM("b"), DIM("s"), DIM("h"), DIM("d"), WL_DTYPE};

static bool rope_check(const int64_t *v, int64_t *bytes, dg_status *st) {
  if (v[RP_D] % 2 != 0)
    return dg_fail(st, DG_ERR_INVALID, "d=%lld must be even (rotate-half pairs j with j+d/2)",
                   (long long)v[RP_D]);
  dg_dtype t = wl_dtype_of(v[RP_DT]);
  wl_bytes_add(bytes, t, 4, v[RP_B], v[RP_S], v[RP_H], v[RP_D]);
  wl_bytes_add(bytes, t, 2, 2 * v[RP_S], v[RP_D]);
  wl_bytes_add(bytes, t, 4, v[RP_B], v[RP_S], v[RP_H], v[RP_D]);
  return true;
}

static dg_func *rope_build(const int64_t *v) {
  int64_t B = v[RP_B], S = v[RP_S], H = v[RP_H], D = v[RP_D], half = D / 2;
  dg_dtype t = wl_dtype_of(v[RP_DT]);
  te_ctx c;
  te_init(&c);
  int64_t sx[4] = {B, S, H, D}, sc[2] = {S, D};
  dg_buffer *X = te_placeholder(&c, "x", t, 4, sx);
  dg_buffer *cs = te_placeholder(&c, "cos", t, 2, sc);
  dg_buffer *sn = te_placeholder(&c, "sin", t, 2, sc);
  te_axis ax[] = {{"b", B}, {"s", S}, {"h", H}, {"d", D}};
  dg_expr **x = te_begin(&c, "T_rope", t, true, ax, 4, NULL, 0, TE_ASSIGN);
  dg_expr *lo = ir_sub(c.f, fconst(&c, 0.0),
                       f32(&c, te_load(&c, X, x[0], x[1], x[2], te_addi(&c, x[3], half))));
  dg_expr *hi = f32(&c, te_load(&c, X, x[0], x[1], x[2], te_sub(&c, x[3], te_int(&c, half))));
  dg_expr *rot = ir_select(c.f, ir_bin(c.f, DG_EXPR_LT, x[3], te_int(&c, half)), lo, hi);
  dg_expr *y = ir_add(c.f,
                      ir_mul(c.f, f32(&c, te_load(&c, X, x[0], x[1], x[2], x[3])),
                             f32(&c, te_load(&c, cs, x[1], x[3]))),
                      ir_mul(c.f, rot, f32(&c, te_load(&c, sn, x[1], x[3]))));
  te_end(&c, te_cast(&c, t, y));
  return te_finish(&c);
}

static void rope_gen(dg_rng *r, int64_t *v) {
  static const int64_t seqs[] = {1, 128, 256, 512, 1024, 2048, 4096, 8192, 77, 1000};
  static const int64_t heads[] = {8, 12, 16, 24, 32, 40, 48, 64};
  static const int64_t dims[] = {64, 64, 128, 128, 80, 96, 256};
  v[RP_B] = wl_gen_batch(r);
  v[RP_S] = dg_rng_uniform(r) < 0.8 ? WL_PICK(r, seqs) : wl_gen_dim(r, 1, 8192);
  v[RP_H] = dg_rng_uniform(r) < 0.8 ? WL_PICK(r, heads) : dg_rng_range(r, 1, 64);
  v[RP_D] = WL_PICK(r, dims);
  v[RP_DT] = wl_gen_dtype(r);
}

const wl_family wl_family_rope = {
    "rope", "rotary position embedding (rotate-half) of x (b, s, h, d) by cos/sin (s, d)",
    "rope:b=1,s=2048,h=32,d=128,dtype=f32",
    rope_keys, DG_ARRAY_LEN(rope_keys), 3, rope_check, rope_build, rope_gen};
