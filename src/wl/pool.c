/* pool.c: 2-D pooling in NCHW, as TOPI's pool2d builds it: an optional
 * pad_temp block (only when pad > 0; padded with the dtype's lowest value
 * for max and 0 for avg), then pool_max, or pool_sum and pool_avg, over
 * output axes ax0..ax3 and window axes rv0, rv1. The average divides by the
 * whole window (count_include_pad). With dtype=f16 the input is f16;
 * pool_max and pool_sum accumulate in f32 (pool_max is then the f32
 * output), and pool_avg casts back to f16.
 *
 * Letters: N batch, C channels, H/W spatial, K window, S stride, P padding.
 */
#include "wl/wl_impl.h"

enum { PL_N, PL_C, PL_H, PL_W, PL_K, PL_S, PL_P, PL_DT };
static const wl_key pool_keys[] = {
    WL_REQ("n", 1, WL_DIM_MAX), WL_REQ("c", 1, WL_DIM_MAX), WL_REQ("h", 1, WL_DIM_MAX),
    WL_REQ("w", 1, WL_DIM_MAX), WL_REQ("kernel", 1, 64),    WL_OPT("stride", 1, 16, 1),
    WL_OPT("pad", 0, 64, 0),    WL_DTYPE};

static int64_t pool_out(const int64_t *v, int64_t in) {
  return (in + 2 * v[PL_P] - v[PL_K]) / v[PL_S] + 1;
}

static bool pool_check_common(const int64_t *v, int64_t *bytes, dg_status *st) {
  int64_t k = v[PL_K], p = v[PL_P];
  if (p >= k)
    return dg_fail(st, DG_ERR_INVALID, "pad=%lld must be smaller than kernel=%lld", (long long)p,
                   (long long)k);
  if (k > v[PL_H] + 2 * p || k > v[PL_W] + 2 * p)
    return dg_fail(st, DG_ERR_INVALID, "kernel=%lld is larger than the padded input %s=%lld+2*%lld",
                   (long long)k, k > v[PL_H] + 2 * p ? "h" : "w",
                   (long long)(k > v[PL_H] + 2 * p ? v[PL_H] : v[PL_W]), (long long)p);
  dg_dtype t = wl_dtype_of(v[PL_DT]);
  wl_bytes_add(bytes, t, 4, v[PL_N], v[PL_C], v[PL_H], v[PL_W]);
  if (p > 0) wl_bytes_add(bytes, t, 4, v[PL_N], v[PL_C], v[PL_H] + 2 * p, v[PL_W] + 2 * p);
  wl_bytes_add(bytes, DG_F32, 4, v[PL_N], v[PL_C], pool_out(v, v[PL_H]), pool_out(v, v[PL_W]));
  return true;
}

/* Builds the padding and the window reduction; returns its buffer. */
static dg_buffer *pool_window(te_ctx *c, const int64_t *v, bool is_max, bool output) {
  int64_t k = v[PL_K], s = v[PL_S], p = v[PL_P];
  dg_dtype t = wl_dtype_of(v[PL_DT]);
  int64_t sx[4] = {v[PL_N], v[PL_C], v[PL_H], v[PL_W]}, pb[4] = {0, 0, p, p};
  dg_buffer *X = te_placeholder(c, "X", t, 4, sx);
  dg_buffer *in = p > 0 ? te_pad(c, "pad_temp", X, pb, pb, is_max ? te_lowest(t) : 0.0) : X;
  te_axis sp[] = {{"ax0", v[PL_N]}, {"ax1", v[PL_C]}, {"ax2", pool_out(v, v[PL_H])},
                  {"ax3", pool_out(v, v[PL_W])}};
  te_axis rd[] = {{"rv0", k}, {"rv1", k}};
  dg_expr **x = te_begin(c, is_max ? "pool_max" : "pool_sum", DG_F32, output, sp, 4, rd, 2,
                         is_max ? TE_MAX : TE_SUM);
  dg_expr *a = te_load(c, in, x[0], x[1], te_add(c, te_muli(c, x[2], s), x[4]),
                       te_add(c, te_muli(c, x[3], s), x[5]));
  return te_end(c, te_cast(c, DG_F32, a));
}

static void pool_gen(dg_rng *r, int64_t *v) {
  v[PL_N] = wl_gen_batch(r);
  v[PL_C] = wl_gen_channels(r);
  v[PL_H] = v[PL_W] = wl_gen_image(r);
  v[PL_K] = WL_PICK(r, ((const int64_t[]){2, 2, 3, 3, 3, 5, 7}));
  v[PL_S] = dg_rng_uniform(r) < 0.7 ? 2 : dg_rng_range(r, 1, 3);
  v[PL_P] = dg_rng_uniform(r) < 0.5 ? 0 : v[PL_K] / 2;
  v[PL_DT] = wl_gen_dtype(r);
}

/* ---- max_pool2d ---------------------------------------------------------- */

static bool max_check(const int64_t *v, int64_t *bytes, dg_status *st) {
  return pool_check_common(v, bytes, st);
}

static dg_func *max_build(const int64_t *v) {
  te_ctx c;
  te_init(&c);
  pool_window(&c, v, true, true);
  return te_finish(&c);
}

const wl_family wl_family_max_pool2d = {
    "max_pool2d", "2-D max pooling, NCHW layout (TOPI pool2d: pad_temp, pool_max), f32 output",
    "max_pool2d:n=1,c=64,h=112,w=112,kernel=3,stride=2,pad=1,dtype=f32",
    pool_keys, DG_ARRAY_LEN(pool_keys), 3, max_check, max_build, pool_gen};

/* ---- avg_pool2d ---------------------------------------------------------- */

static bool avg_check(const int64_t *v, int64_t *bytes, dg_status *st) {
  if (!pool_check_common(v, bytes, st)) return false;
  wl_bytes_add(bytes, wl_dtype_of(v[PL_DT]), 4, v[PL_N], v[PL_C], pool_out(v, v[PL_H]),
               pool_out(v, v[PL_W]));
  return true;
}

static dg_func *avg_build(const int64_t *v) {
  dg_dtype t = wl_dtype_of(v[PL_DT]);
  te_ctx c;
  te_init(&c);
  dg_buffer *sum = pool_window(&c, v, false, false);
  te_axis sp[] = {{"ax0", v[PL_N]}, {"ax1", v[PL_C]}, {"ax2", sum->shape[2]},
                  {"ax3", sum->shape[3]}};
  dg_expr **x = te_begin(&c, "pool_avg", t, true, sp, 4, NULL, 0, TE_ASSIGN);
  dg_expr *avg = ir_bin(c.f, DG_EXPR_DIV, te_loadv(&c, sum, x),
                        te_float(&c, (double)(v[PL_K] * v[PL_K]), DG_F32));
  te_end(&c, te_cast(&c, t, avg));
  return te_finish(&c);
}

const wl_family wl_family_avg_pool2d = {
    "avg_pool2d",
    "2-D average pooling, NCHW layout (TOPI pool2d: pad_temp, pool_sum, pool_avg)",
    "avg_pool2d:n=1,c=64,h=56,w=56,kernel=2,stride=2,pad=0,dtype=f32",
    pool_keys, DG_ARRAY_LEN(pool_keys), 3, avg_check, avg_build, pool_gen};
