/* conv.c: the convolution families, each built like the te_workload.py /
 * TOPI definition of the same name: conv1d_nlc (C1D), conv2d_nhwc (C2D, and
 * GRP/DIL through groups/dilation), conv3d_ndhwc (C3D), conv2d_nchw (TOPI's
 * classic layout: pad_temp, conv2d_nchw), depthwise_conv2d_nhwc (DEP: the
 * unnamed placeholders "placeholder" and "placeholder_1", block
 * depth_conv2d_nhwc), conv2d_transpose_nhwc (T2D: pad, then a dilated read
 * guarded by a select), conv2d_capsule_nhwijc (CAP) and conv2d_bias_bn_relu
 * (CBR: PaddedInput, Conv2dOutput, bias_add, bn_mul, bn_add, compute).
 *
 * Every family pads with a separate block even when the padding is zero,
 * as topi.nn.pad does. Output sizes use TVM's formula
 * (in + 2p - dil*(k-1) - 1) // stride + 1, and a kernel that does not fit the
 * padded input is an error. The convolution output is f32; with dtype=f16
 * inputs, weights and the padded copy are f16 and products are cast to f32.
 *
 * Letters: N batch, C channels (CI in, CO out), D/H/W/L spatial, K kernel,
 * S stride, P padding.
 */
#include "wl/wl_impl.h"

#define DIM(name) WL_REQ(name, 1, WL_DIM_MAX)
#define KERNEL WL_REQ("kernel", 1, 64)
#define STRIDE WL_OPT("stride", 1, 16, 1)
#define PAD WL_OPT("pad", 0, 64, 0)
#define DILATION WL_OPT("dilation", 1, 16, 1)
#define GROUPS WL_OPT("groups", 1, WL_DIM_MAX, 1)

static dg_expr *mul_acc(te_ctx *c, dg_expr *a, dg_expr *b) {
  return ir_mul(c->f, te_cast(c, DG_F32, a), te_cast(c, DG_F32, b));
}

static int64_t conv_out(int64_t in, int64_t k, int64_t s, int64_t p, int64_t dil) {
  return (in + 2 * p - dil * (k - 1) - 1) / s + 1;
}

/* The dilated kernel must fit the padded input along each named axis. */
static bool fits(const char *axis, int64_t in, int64_t k, int64_t p, int64_t dil,
                 dg_status *st) {
  int64_t span = dil * (k - 1) + 1;
  if (span > in + 2 * p) {
    if (dil > 1)
      return dg_fail(st, DG_ERR_INVALID,
                     "kernel=%lld with dilation=%lld spans %lld, larger than the padded input "
                     "%s=%lld+2*%lld",
                     (long long)k, (long long)dil, (long long)span, axis, (long long)in,
                     (long long)p);
    return dg_fail(st, DG_ERR_INVALID, "kernel=%lld is larger than the padded input %s=%lld+2*%lld",
                   (long long)k, axis, (long long)in, (long long)p);
  }
  return true;
}

static bool groups_ok(int64_t ci, int64_t co, int64_t g, dg_status *st) {
  if (ci % g != 0)
    return dg_fail(st, DG_ERR_INVALID, "ci=%lld is not divisible by groups=%lld", (long long)ci,
                   (long long)g);
  if (co % g != 0)
    return dg_fail(st, DG_ERR_INVALID, "co=%lld is not divisible by groups=%lld", (long long)co,
                   (long long)g);
  return true;
}

/* ---- channels-last convolutions in 1, 2 and 3 dimensions -------------------
 * Keys: n, spatial..., ci, co, kernel, stride, pad, dilation, groups, dtype. */

typedef struct {
  int ns;                 /* spatial dimensions */
  const char *out;        /* block and output buffer */
  const char *sp[3];      /* spatial axis names */
  const char *rsp[3];     /* reduce axis names of the kernel window */
} nd_conv;

static const nd_conv conv1d = {1, "conv1d_nlc", {"l"}, {"rl"}};
static const nd_conv conv2d = {2, "conv2d_nhwc", {"h", "w"}, {"rh", "rw"}};
static const nd_conv conv3d = {3, "conv3d_ndhwc", {"d", "h", "w"}, {"rd", "rh", "rw"}};

/* Values: v[0] n, v[1..ns] spatial, then ci, co, kernel, stride, pad,
 * dilation, groups, dtype. */
#define NDV(o, i) (v[(o)->ns + 1 + (i)])
enum { ND_CI, ND_CO, ND_K, ND_S, ND_P, ND_DIL, ND_G, ND_DT };

static bool nd_check(const nd_conv *o, const int64_t *v, int64_t *bytes, dg_status *st) {
  int64_t ci = NDV(o, ND_CI), co = NDV(o, ND_CO), k = NDV(o, ND_K), s = NDV(o, ND_S),
          p = NDV(o, ND_P), dil = NDV(o, ND_DIL), g = NDV(o, ND_G);
  if (!groups_ok(ci, co, g, st)) return false;
  int64_t in[5], pad[5], out[5], w[5];
  int nd = o->ns + 2;
  in[0] = pad[0] = out[0] = v[0];
  for (int i = 0; i < o->ns; i++) {
    if (!fits(o->sp[i], v[1 + i], k, p, dil, st)) return false;
    in[1 + i] = v[1 + i];
    pad[1 + i] = v[1 + i] + 2 * p;
    out[1 + i] = conv_out(v[1 + i], k, s, p, dil);
    w[i] = k;
  }
  in[nd - 1] = pad[nd - 1] = ci;
  out[nd - 1] = co;
  w[o->ns] = ci / g;
  w[o->ns + 1] = co;
  dg_dtype t = wl_dtype_of(NDV(o, ND_DT));
  wl_bytes_add(bytes, t, 1, wl_numel(nd, in));
  wl_bytes_add(bytes, t, 1, wl_numel(nd, pad));
  wl_bytes_add(bytes, t, 1, wl_numel(o->ns + 2, w));
  wl_bytes_add(bytes, DG_F32, 1, wl_numel(nd, out));
  return true;
}

static dg_func *nd_build(const nd_conv *o, const int64_t *v) {
  int ns = o->ns, nd = ns + 2;
  int64_t ci = NDV(o, ND_CI), co = NDV(o, ND_CO), k = NDV(o, ND_K), s = NDV(o, ND_S),
          p = NDV(o, ND_P), dil = NDV(o, ND_DIL), g = NDV(o, ND_G);
  dg_dtype t = wl_dtype_of(NDV(o, ND_DT));
  te_ctx c;
  te_init(&c);
  int64_t in[5], ws[5], before[5] = {0}, after[5] = {0};
  in[0] = v[0];
  for (int i = 0; i < ns; i++) {
    in[1 + i] = v[1 + i];
    ws[i] = k;
    before[1 + i] = after[1 + i] = p;
  }
  in[nd - 1] = ci;
  ws[ns] = ci / g;
  ws[ns + 1] = co;
  dg_buffer *X = te_placeholder(&c, "inputs", t, nd, in);
  dg_buffer *W = te_placeholder(&c, "weight", t, ns + 2, ws);
  dg_buffer *P = te_pad(&c, "PadInput", X, before, after, 0.0);

  te_axis sp[5], rd[4];
  sp[0] = (te_axis){"n", v[0]};
  for (int i = 0; i < ns; i++) {
    sp[1 + i] = (te_axis){o->sp[i], conv_out(v[1 + i], k, s, p, dil)};
    rd[i] = (te_axis){o->rsp[i], k};
  }
  sp[nd - 1] = (te_axis){"co", co};
  rd[ns] = (te_axis){"rc", ci / g};
  dg_expr **x = te_begin(&c, o->out, DG_F32, true, sp, nd, rd, ns + 1, TE_SUM);
  dg_expr **r = x + nd; /* reduce vars: window..., rc */
  dg_expr *pi[5], *wi[5];
  pi[0] = x[0];
  for (int i = 0; i < ns; i++) {
    pi[1 + i] = te_add(&c, te_muli(&c, x[1 + i], s), te_muli(&c, r[i], dil));
    wi[i] = r[i];
  }
  pi[nd - 1] = te_add(&c, te_muli(&c, te_floordiv(&c, x[nd - 1], co / g), ci / g), r[ns]);
  wi[ns] = r[ns];
  wi[ns + 1] = x[nd - 1];
  te_end(&c, mul_acc(&c, te_loadv(&c, P, pi), te_loadv(&c, W, wi)));
  return te_finish(&c);
}

/* Shapes from CNNs: image sizes 7..224, channels 3..2048, small kernels. */
static void nd_gen(const nd_conv *o, dg_rng *r, int64_t *v) {
  static const int64_t kernels[] = {1, 1, 3, 3, 3, 5, 7};
  v[0] = wl_gen_batch(r);
  int64_t hw = wl_gen_image(r);
  for (int i = 0; i < o->ns; i++) v[1 + i] = hw;
  if (o->ns == 3) v[1] = WL_PICK(r, ((const int64_t[]){4, 8, 16, 16, 32}));
  if (dg_rng_uniform(r) < 0.15) v[o->ns] = wl_gen_image(r); /* non-square */
  int64_t k = WL_PICK(r, kernels);
  int64_t g = dg_rng_uniform(r) < 0.8 ? 1 : WL_PICK(r, ((const int64_t[]){2, 4, 8, 32}));
  NDV(o, ND_CI) = wl_gen_channels(r);
  NDV(o, ND_CO) = wl_gen_channels(r);
  NDV(o, ND_K) = k;
  NDV(o, ND_S) = dg_rng_uniform(r) < 0.7 ? 1 : 2;
  NDV(o, ND_P) = dg_rng_uniform(r) < 0.8 ? k / 2 : dg_rng_range(r, 0, k - 1);
  NDV(o, ND_DIL) = dg_rng_uniform(r) < 0.85 ? 1 : dg_rng_range(r, 2, 3);
  NDV(o, ND_G) = g;
  NDV(o, ND_DT) = wl_gen_dtype(r);
}

static const wl_key conv1d_keys[] = {DIM("n"), DIM("l"), DIM("ci"), DIM("co"), KERNEL, STRIDE,
                                     PAD, DILATION, GROUPS, WL_DTYPE};
static bool conv1d_check(const int64_t *v, int64_t *b, dg_status *st) {
  return nd_check(&conv1d, v, b, st);
}
static dg_func *conv1d_build(const int64_t *v) { return nd_build(&conv1d, v); }
static void conv1d_gen(dg_rng *r, int64_t *v) {
  nd_gen(&conv1d, r, v);
  v[1] = wl_gen_dim(r, 8, 4096); /* sequence lengths rather than images */
}
const wl_family wl_family_conv1d_nlc = {
    "conv1d_nlc", "1-D convolution, NLC layout, with stride/pad/dilation/groups (MetaSchedule C1D)",
    "conv1d_nlc:n=1,l=256,ci=64,co=128,kernel=3,stride=2,pad=1,dilation=1,groups=1,dtype=f32",
    conv1d_keys, DG_ARRAY_LEN(conv1d_keys), 4, conv1d_check, conv1d_build, conv1d_gen};

static const wl_key conv2d_keys[] = {DIM("n"), DIM("h"), DIM("w"), DIM("ci"), DIM("co"), KERNEL,
                                     STRIDE, PAD, DILATION, GROUPS, WL_DTYPE};
static bool conv2d_check(const int64_t *v, int64_t *b, dg_status *st) {
  return nd_check(&conv2d, v, b, st);
}
static dg_func *conv2d_build(const int64_t *v) { return nd_build(&conv2d, v); }
static void conv2d_gen(dg_rng *r, int64_t *v) { nd_gen(&conv2d, r, v); }
const wl_family wl_family_conv2d_nhwc = {
    "conv2d_nhwc",
    "2-D convolution, NHWC layout, with stride/pad/dilation/groups (MetaSchedule C2D, GRP, DIL)",
    "conv2d_nhwc:n=1,h=224,w=224,ci=3,co=64,kernel=7,stride=2,pad=3,dilation=1,groups=1,dtype=f32",
    conv2d_keys, DG_ARRAY_LEN(conv2d_keys), 12, conv2d_check, conv2d_build, conv2d_gen};

static const wl_key conv3d_keys[] = {DIM("n"), DIM("d"), DIM("h"), DIM("w"), DIM("ci"), DIM("co"),
                                     KERNEL, STRIDE, PAD, DILATION, GROUPS, WL_DTYPE};
static bool conv3d_check(const int64_t *v, int64_t *b, dg_status *st) {
  return nd_check(&conv3d, v, b, st);
}
static dg_func *conv3d_build(const int64_t *v) { return nd_build(&conv3d, v); }
static void conv3d_gen(dg_rng *r, int64_t *v) { nd_gen(&conv3d, r, v); }
const wl_family wl_family_conv3d_ndhwc = {
    "conv3d_ndhwc", "3-D convolution, NDHWC layout (MetaSchedule C3D)",
    "conv3d_ndhwc:n=1,d=16,h=56,w=56,ci=64,co=64,kernel=3,stride=1,pad=1,dilation=1,groups=1,"
    "dtype=f32",
    conv3d_keys, DG_ARRAY_LEN(conv3d_keys), 3, conv3d_check, conv3d_build, conv3d_gen};

/* ---- conv2d_nchw: X (n, ci, h, w), W (co, ci, k, k) ------------------------- */

enum { CN_N, CN_H, CN_W, CN_CI, CN_CO, CN_K, CN_S, CN_P, CN_DIL, CN_DT };
static const wl_key nchw_keys[] = {DIM("n"), DIM("h"), DIM("w"), DIM("ci"), DIM("co"), KERNEL,
                                   STRIDE, PAD, DILATION, WL_DTYPE};

static bool nchw_check(const int64_t *v, int64_t *bytes, dg_status *st) {
  int64_t k = v[CN_K], p = v[CN_P], dil = v[CN_DIL], s = v[CN_S];
  if (!fits("h", v[CN_H], k, p, dil, st) || !fits("w", v[CN_W], k, p, dil, st)) return false;
  dg_dtype t = wl_dtype_of(v[CN_DT]);
  wl_bytes_add(bytes, t, 4, v[CN_N], v[CN_CI], v[CN_H], v[CN_W]);
  wl_bytes_add(bytes, t, 4, v[CN_CO], v[CN_CI], k, k);
  wl_bytes_add(bytes, t, 4, v[CN_N], v[CN_CI], v[CN_H] + 2 * p, v[CN_W] + 2 * p);
  wl_bytes_add(bytes, DG_F32, 4, v[CN_N], v[CN_CO], conv_out(v[CN_H], k, s, p, dil),
               conv_out(v[CN_W], k, s, p, dil));
  return true;
}

static dg_func *nchw_build(const int64_t *v) {
  int64_t k = v[CN_K], p = v[CN_P], dil = v[CN_DIL], s = v[CN_S];
  dg_dtype t = wl_dtype_of(v[CN_DT]);
  te_ctx c;
  te_init(&c);
  int64_t sx[4] = {v[CN_N], v[CN_CI], v[CN_H], v[CN_W]}, sw[4] = {v[CN_CO], v[CN_CI], k, k};
  int64_t pb[4] = {0, 0, p, p};
  dg_buffer *X = te_placeholder(&c, "X", t, 4, sx);
  dg_buffer *W = te_placeholder(&c, "W", t, 4, sw);
  dg_buffer *P = te_pad(&c, "pad_temp", X, pb, pb, 0.0);
  te_axis sp[] = {{"nn", v[CN_N]},
                  {"ff", v[CN_CO]},
                  {"yy", conv_out(v[CN_H], k, s, p, dil)},
                  {"xx", conv_out(v[CN_W], k, s, p, dil)}};
  te_axis rd[] = {{"rc", v[CN_CI]}, {"ry", k}, {"rx", k}};
  dg_expr **x = te_begin(&c, "conv2d_nchw", DG_F32, true, sp, 4, rd, 3, TE_SUM);
  dg_expr *a = te_load(&c, P, x[0], x[4], te_add(&c, te_muli(&c, x[2], s), te_muli(&c, x[5], dil)),
                       te_add(&c, te_muli(&c, x[3], s), te_muli(&c, x[6], dil)));
  te_end(&c, mul_acc(&c, a, te_load(&c, W, x[1], x[4], x[5], x[6])));
  return te_finish(&c);
}

static void nchw_gen(dg_rng *r, int64_t *v) {
  int64_t t[11];
  nd_gen(&conv2d, r, t); /* n h w ci co k s p dil g dt */
  v[CN_N] = t[0], v[CN_H] = t[1], v[CN_W] = t[2], v[CN_CI] = t[3], v[CN_CO] = t[4];
  v[CN_K] = t[5], v[CN_S] = t[6], v[CN_P] = t[7], v[CN_DIL] = t[8], v[CN_DT] = t[10];
}

const wl_family wl_family_conv2d_nchw = {
    "conv2d_nchw", "2-D convolution, NCHW layout (TOPI conv2d_nchw: pad_temp, conv2d_nchw)",
    "conv2d_nchw:n=1,h=56,w=56,ci=64,co=64,kernel=3,stride=1,pad=1,dilation=1,dtype=f32",
    nchw_keys, DG_ARRAY_LEN(nchw_keys), 5, nchw_check, nchw_build, nchw_gen};

/* ---- depthwise_conv2d_nhwc (channel multiplier 1) --------------------------- */

enum { DW_N, DW_H, DW_W, DW_C, DW_K, DW_S, DW_P, DW_DIL, DW_DT };
static const wl_key dw_keys[] = {DIM("n"), DIM("h"), DIM("w"), DIM("c"), KERNEL,
                                 STRIDE, PAD, DILATION, WL_DTYPE};

static bool dw_check(const int64_t *v, int64_t *bytes, dg_status *st) {
  int64_t k = v[DW_K], p = v[DW_P], dil = v[DW_DIL], s = v[DW_S];
  if (!fits("h", v[DW_H], k, p, dil, st) || !fits("w", v[DW_W], k, p, dil, st)) return false;
  dg_dtype t = wl_dtype_of(v[DW_DT]);
  int64_t one = 1;
  wl_bytes_add(bytes, t, 4, v[DW_N], v[DW_H], v[DW_W], v[DW_C]);
  wl_bytes_add(bytes, t, 4, one, k, k, v[DW_C]);
  wl_bytes_add(bytes, t, 4, v[DW_N], v[DW_H] + 2 * p, v[DW_W] + 2 * p, v[DW_C]);
  wl_bytes_add(bytes, DG_F32, 4, v[DW_N], conv_out(v[DW_H], k, s, p, dil),
               conv_out(v[DW_W], k, s, p, dil), v[DW_C]);
  return true;
}

static dg_func *dw_build(const int64_t *v) {
  int64_t k = v[DW_K], p = v[DW_P], dil = v[DW_DIL], s = v[DW_S], C = v[DW_C];
  dg_dtype t = wl_dtype_of(v[DW_DT]);
  te_ctx c;
  te_init(&c);
  int64_t sx[4] = {v[DW_N], v[DW_H], v[DW_W], C}, sw[4] = {1, k, k, C}, pb[4] = {0, p, p, 0};
  dg_buffer *X = te_placeholder(&c, "placeholder", t, 4, sx);
  dg_buffer *W = te_placeholder(&c, "placeholder_1", t, 4, sw);
  dg_buffer *P = te_pad(&c, "PadInput", X, pb, pb, 0.0);
  te_axis sp[] = {{"n", v[DW_N]},
                  {"h", conv_out(v[DW_H], k, s, p, dil)},
                  {"w", conv_out(v[DW_W], k, s, p, dil)},
                  {"c", C}};
  te_axis rd[] = {{"rh", k}, {"rw", k}};
  dg_expr **x = te_begin(&c, "depth_conv2d_nhwc", DG_F32, true, sp, 4, rd, 2, TE_SUM);
  /* factor 1: c // factor folds to c and c % factor to 0, as in TVM */
  dg_expr *a = te_load(&c, P, x[0], te_add(&c, te_muli(&c, x[1], s), te_muli(&c, x[4], dil)),
                       te_add(&c, te_muli(&c, x[2], s), te_muli(&c, x[5], dil)),
                       te_floordiv(&c, x[3], 1));
  dg_expr *w = te_load(&c, W, te_floormod(&c, x[3], 1), x[4], x[5], te_floordiv(&c, x[3], 1));
  te_end(&c, mul_acc(&c, a, w));
  return te_finish(&c);
}

static void dw_gen(dg_rng *r, int64_t *v) {
  static const int64_t kernels[] = {3, 3, 3, 5, 7};
  v[DW_N] = wl_gen_batch(r);
  v[DW_H] = v[DW_W] = wl_gen_image(r);
  v[DW_C] = wl_gen_channels(r);
  v[DW_K] = WL_PICK(r, kernels);
  v[DW_S] = dg_rng_uniform(r) < 0.7 ? 1 : 2;
  v[DW_P] = v[DW_K] / 2;
  v[DW_DIL] = dg_rng_uniform(r) < 0.9 ? 1 : 2;
  v[DW_DT] = wl_gen_dtype(r);
}

const wl_family wl_family_depthwise_conv2d_nhwc = {
    "depthwise_conv2d_nhwc", "depthwise 2-D convolution, NHWC layout (MetaSchedule DEP)",
    "depthwise_conv2d_nhwc:n=1,h=112,w=112,c=32,kernel=3,stride=1,pad=1,dilation=1,dtype=f32",
    dw_keys, DG_ARRAY_LEN(dw_keys), 5, dw_check, dw_build, dw_gen};

/* ---- conv2d_transpose_nhwc (T2D) -------------------------------------------
 * The input is padded by ceil((k-1-p)/s) on each side; the kernel then reads
 * the stride-dilated input through a select that is zero off the grid. */

enum { TR_N, TR_H, TR_W, TR_CI, TR_CO, TR_K, TR_S, TR_P, TR_DT };
static const wl_key tr_keys[] = {DIM("n"), DIM("h"), DIM("w"), DIM("ci"), DIM("co"),
                                 KERNEL, STRIDE, PAD, WL_DTYPE};

static int64_t tr_pad(const int64_t *v) { /* input padding per side */
  return (v[TR_K] - 1 - v[TR_P] + v[TR_S] - 1) / v[TR_S];
}
static int64_t tr_out(const int64_t *v, int64_t in) {
  return (in - 1) * v[TR_S] - 2 * v[TR_P] + v[TR_K];
}

static bool tr_check(const int64_t *v, int64_t *bytes, dg_status *st) {
  if (v[TR_P] > v[TR_K] - 1)
    return dg_fail(st, DG_ERR_INVALID, "pad=%lld must be smaller than kernel=%lld",
                   (long long)v[TR_P], (long long)v[TR_K]);
  if (tr_out(v, v[TR_H]) < 1 || tr_out(v, v[TR_W]) < 1)
    return dg_fail(st, DG_ERR_INVALID, "pad=%lld leaves no output for h=%lld, w=%lld",
                   (long long)v[TR_P], (long long)v[TR_H], (long long)v[TR_W]);
  dg_dtype t = wl_dtype_of(v[TR_DT]);
  int64_t q = 2 * tr_pad(v);
  wl_bytes_add(bytes, t, 4, v[TR_N], v[TR_H], v[TR_W], v[TR_CI]);
  wl_bytes_add(bytes, t, 4, v[TR_K], v[TR_K], v[TR_CI], v[TR_CO]);
  wl_bytes_add(bytes, t, 4, v[TR_N], v[TR_H] + q, v[TR_W] + q, v[TR_CI]);
  wl_bytes_add(bytes, DG_F32, 4, v[TR_N], tr_out(v, v[TR_H]), tr_out(v, v[TR_W]), v[TR_CO]);
  return true;
}

static dg_func *tr_build(const int64_t *v) {
  int64_t k = v[TR_K], s = v[TR_S], q = tr_pad(v);
  int64_t bpad = k - 1 - v[TR_P], border = (s - bpad % s) % s;
  dg_dtype t = wl_dtype_of(v[TR_DT]);
  te_ctx c;
  te_init(&c);
  int64_t sx[4] = {v[TR_N], v[TR_H], v[TR_W], v[TR_CI]}, sw[4] = {k, k, v[TR_CI], v[TR_CO]};
  int64_t pb[4] = {0, q, q, 0};
  dg_buffer *X = te_placeholder(&c, "inputs", t, 4, sx);
  dg_buffer *W = te_placeholder(&c, "weight", t, 4, sw);
  dg_buffer *P = te_pad(&c, "PadInput", X, pb, pb, 0.0);
  te_axis sp[] = {{"n", v[TR_N]}, {"h", tr_out(v, v[TR_H])}, {"w", tr_out(v, v[TR_W])},
                  {"co", v[TR_CO]}};
  te_axis rd[] = {{"rh", k}, {"rw", k}, {"rc", v[TR_CI]}};
  dg_expr **x = te_begin(&c, "conv2d_transpose_nhwc", DG_F32, true, sp, 4, rd, 3, TE_SUM);
  dg_expr *eh = te_addi(&c, te_add(&c, x[1], x[4]), border);
  dg_expr *ew = te_addi(&c, te_add(&c, x[2], x[5]), border);
  dg_expr *a;
  if (s == 1) {
    a = te_load(&c, P, x[0], eh, ew, x[6]);
  } else {
    dg_expr *cond[2] = {
        ir_bin(c.f, DG_EXPR_EQ, te_floormod(&c, eh, s), te_int(&c, 0)),
        ir_bin(c.f, DG_EXPR_EQ, te_floormod(&c, ew, s), te_int(&c, 0)),
    };
    a = ir_select(c.f, te_all(&c, cond, 2),
                  te_load(&c, P, x[0], te_floordiv(&c, eh, s), te_floordiv(&c, ew, s), x[6]),
                  te_float(&c, 0.0, t));
  }
  dg_expr *w = te_load(&c, W, te_sub(&c, te_int(&c, k - 1), x[4]),
                       te_sub(&c, te_int(&c, k - 1), x[5]), x[6], x[3]);
  te_end(&c, mul_acc(&c, a, w));
  return te_finish(&c);
}

static void tr_gen(dg_rng *r, int64_t *v) {
  static const int64_t sizes[] = {4, 7, 8, 14, 16, 28, 32, 56, 64, 112};
  v[TR_N] = wl_gen_batch(r);
  v[TR_H] = v[TR_W] = dg_rng_uniform(r) < 0.8 ? WL_PICK(r, sizes) : dg_rng_range(r, 2, 128);
  v[TR_CI] = wl_gen_channels(r);
  v[TR_CO] = wl_gen_channels(r);
  v[TR_K] = WL_PICK(r, ((const int64_t[]){2, 3, 4, 4, 5}));
  v[TR_S] = dg_rng_uniform(r) < 0.8 ? 2 : 1;
  v[TR_P] = dg_rng_range(r, 0, v[TR_K] - 1);
  v[TR_DT] = wl_gen_dtype(r);
}

const wl_family wl_family_conv2d_transpose_nhwc = {
    "conv2d_transpose_nhwc", "transposed 2-D convolution, NHWC layout (MetaSchedule T2D)",
    "conv2d_transpose_nhwc:n=1,h=4,w=4,ci=512,co=256,kernel=4,stride=2,pad=1,dtype=f32",
    tr_keys, DG_ARRAY_LEN(tr_keys), 3, tr_check, tr_build, tr_gen};

/* ---- conv2d_capsule_nhwijc (CAP) --------------------------------------------
 * inputs (n, h, w, cap, cap, ci), weight (k, k, cap, cap, ci, co). */

enum { CP_N, CP_H, CP_W, CP_CI, CP_CO, CP_K, CP_S, CP_P, CP_CAP, CP_DT };
static const wl_key cap_keys[] = {DIM("n"), DIM("h"), DIM("w"), DIM("ci"), DIM("co"), KERNEL,
                                  STRIDE, PAD, WL_OPT("capsule", 1, 16, 4), WL_DTYPE};

static bool cap_check(const int64_t *v, int64_t *bytes, dg_status *st) {
  int64_t k = v[CP_K], p = v[CP_P], s = v[CP_S], cp = v[CP_CAP];
  if (!fits("h", v[CP_H], k, p, 1, st) || !fits("w", v[CP_W], k, p, 1, st)) return false;
  dg_dtype t = wl_dtype_of(v[CP_DT]);
  int64_t in[6] = {v[CP_N], v[CP_H], v[CP_W], cp, cp, v[CP_CI]};
  int64_t pd[6] = {v[CP_N], v[CP_H] + 2 * p, v[CP_W] + 2 * p, cp, cp, v[CP_CI]};
  int64_t w[6] = {k, k, cp, cp, v[CP_CI], v[CP_CO]};
  int64_t out[6] = {v[CP_N], conv_out(v[CP_H], k, s, p, 1), conv_out(v[CP_W], k, s, p, 1),
                    cp, cp, v[CP_CO]};
  wl_bytes_add(bytes, t, 1, wl_numel(6, in));
  wl_bytes_add(bytes, t, 1, wl_numel(6, pd));
  wl_bytes_add(bytes, t, 1, wl_numel(6, w));
  wl_bytes_add(bytes, DG_F32, 1, wl_numel(6, out));
  return true;
}

static dg_func *cap_build(const int64_t *v) {
  int64_t k = v[CP_K], p = v[CP_P], s = v[CP_S], cp = v[CP_CAP];
  dg_dtype t = wl_dtype_of(v[CP_DT]);
  te_ctx c;
  te_init(&c);
  int64_t in[6] = {v[CP_N], v[CP_H], v[CP_W], cp, cp, v[CP_CI]};
  int64_t w[6] = {k, k, cp, cp, v[CP_CI], v[CP_CO]};
  int64_t pb[6] = {0, p, p, 0, 0, 0};
  dg_buffer *X = te_placeholder(&c, "inputs", t, 6, in);
  dg_buffer *W = te_placeholder(&c, "weight", t, 6, w);
  dg_buffer *P = te_pad(&c, "PadInput", X, pb, pb, 0.0);
  te_axis sp[] = {{"n", v[CP_N]},
                  {"h", conv_out(v[CP_H], k, s, p, 1)},
                  {"w", conv_out(v[CP_W], k, s, p, 1)},
                  {"cap_i", cp},
                  {"cap_j", cp},
                  {"co", v[CP_CO]}};
  te_axis rd[] = {{"rh", k}, {"rw", k}, {"cap_k", cp}, {"rc", v[CP_CI]}};
  dg_expr **x = te_begin(&c, "conv2d_capsule_nhwijc", DG_F32, true, sp, 6, rd, 4, TE_SUM);
  dg_expr *pi[6] = {x[0], te_add(&c, te_muli(&c, x[1], s), x[6]),
                    te_add(&c, te_muli(&c, x[2], s), x[7]), x[3], x[8], x[9]};
  dg_expr *wi[6] = {x[6], x[7], x[8], x[4], x[9], x[5]};
  te_end(&c, mul_acc(&c, te_loadv(&c, P, pi), te_loadv(&c, W, wi)));
  return te_finish(&c);
}

static void cap_gen(dg_rng *r, int64_t *v) {
  static const int64_t sizes[] = {4, 6, 8, 12, 14, 16, 24, 32};
  static const int64_t chans[] = {4, 8, 16, 16, 32, 32, 64};
  v[CP_N] = wl_gen_batch(r);
  v[CP_H] = v[CP_W] = WL_PICK(r, sizes);
  v[CP_CI] = WL_PICK(r, chans);
  v[CP_CO] = WL_PICK(r, chans);
  v[CP_K] = WL_PICK(r, ((const int64_t[]){1, 3, 3, 5}));
  v[CP_S] = dg_rng_range(r, 1, 2);
  v[CP_P] = v[CP_K] / 2;
  v[CP_CAP] = WL_PICK(r, ((const int64_t[]){2, 4, 4, 4}));
  v[CP_DT] = wl_gen_dtype(r);
}

const wl_family wl_family_conv2d_capsule_nhwijc = {
    "conv2d_capsule_nhwijc", "capsule 2-D convolution over capsule matrices (MetaSchedule CAP)",
    "conv2d_capsule_nhwijc:n=1,h=16,w=16,ci=32,co=32,kernel=3,stride=2,pad=1,capsule=4,dtype=f32",
    cap_keys, DG_ARRAY_LEN(cap_keys), 2, cap_check, cap_build, cap_gen};

/* ---- conv2d_bias_bn_relu (CBR) ----------------------------------------------
 * te_workload's conv2d_nhwc_bn_relu: data (n, h, w, ci), kernel (k, k, ci,
 * co), bias / bn_scale / bn_offset (co) in f32 even for f16 data, as there. */

enum { CB_N, CB_H, CB_W, CB_CI, CB_CO, CB_K, CB_S, CB_P, CB_DIL, CB_DT };

static bool cbr_check(const int64_t *v, int64_t *bytes, dg_status *st) {
  int64_t k = v[CB_K], p = v[CB_P], dil = v[CB_DIL], s = v[CB_S];
  if (!fits("h", v[CB_H], k, p, dil, st) || !fits("w", v[CB_W], k, p, dil, st)) return false;
  dg_dtype t = wl_dtype_of(v[CB_DT]);
  int64_t oh = conv_out(v[CB_H], k, s, p, dil), ow = conv_out(v[CB_W], k, s, p, dil);
  wl_bytes_add(bytes, t, 4, v[CB_N], v[CB_H], v[CB_W], v[CB_CI]);
  wl_bytes_add(bytes, t, 4, k, k, v[CB_CI], v[CB_CO]);
  wl_bytes_add(bytes, DG_F32, 1, 3 * v[CB_CO]);
  wl_bytes_add(bytes, t, 4, v[CB_N], v[CB_H] + 2 * p, v[CB_W] + 2 * p, v[CB_CI]);
  for (int i = 0; i < 5; i++) /* Conv2dOutput, bias_add, bn_mul, bn_add, compute */
    wl_bytes_add(bytes, DG_F32, 4, v[CB_N], oh, ow, v[CB_CO]);
  return true;
}

static dg_func *cbr_build(const int64_t *v) {
  int64_t k = v[CB_K], p = v[CB_P], dil = v[CB_DIL], s = v[CB_S], co = v[CB_CO];
  dg_dtype t = wl_dtype_of(v[CB_DT]);
  int64_t oh = conv_out(v[CB_H], k, s, p, dil), ow = conv_out(v[CB_W], k, s, p, dil);
  te_ctx c;
  te_init(&c);
  int64_t sx[4] = {v[CB_N], v[CB_H], v[CB_W], v[CB_CI]}, sw[4] = {k, k, v[CB_CI], co};
  int64_t pb[4] = {0, p, p, 0};
  dg_buffer *X = te_placeholder(&c, "data", t, 4, sx);
  dg_buffer *W = te_placeholder(&c, "kernel", t, 4, sw);
  dg_buffer *bias = te_placeholder(&c, "bias", DG_F32, 1, &co);
  dg_buffer *off = te_placeholder(&c, "bn_offset", DG_F32, 1, &co);
  dg_buffer *scale = te_placeholder(&c, "bn_scale", DG_F32, 1, &co);
  dg_buffer *P = te_pad(&c, "PaddedInput", X, pb, pb, 0.0);
  te_axis sp[] = {{"nn", v[CB_N]}, {"yy", oh}, {"xx", ow}, {"ff", co}};
  te_axis rd[] = {{"ry", k}, {"rx", k}, {"rc", v[CB_CI]}};
  dg_expr **x = te_begin(&c, "Conv2dOutput", DG_F32, false, sp, 4, rd, 3, TE_SUM);
  dg_expr *a = te_load(&c, P, x[0], te_add(&c, te_muli(&c, x[1], s), te_muli(&c, x[4], dil)),
                       te_add(&c, te_muli(&c, x[2], s), te_muli(&c, x[5], dil)), x[6]);
  dg_buffer *conv = te_end(&c, mul_acc(&c, a, te_load(&c, W, x[4], x[5], x[6], x[3])));

  te_axis e[] = {{"i", v[CB_N]}, {"j", oh}, {"k", ow}, {"l", co}};
  x = te_begin(&c, "bias_add", DG_F32, false, e, 4, NULL, 0, TE_ASSIGN);
  dg_buffer *b1 = te_end(&c, ir_add(c.f, te_loadv(&c, conv, x), te_load(&c, bias, x[3])));
  x = te_begin(&c, "bn_mul", DG_F32, false, e, 4, NULL, 0, TE_ASSIGN);
  dg_buffer *b2 = te_end(&c, ir_mul(c.f, te_loadv(&c, b1, x), te_load(&c, scale, x[3])));
  x = te_begin(&c, "bn_add", DG_F32, false, e, 4, NULL, 0, TE_ASSIGN);
  dg_buffer *b3 = te_end(&c, ir_add(c.f, te_loadv(&c, b2, x), te_load(&c, off, x[3])));
  te_axis ri[] = {{"i0", v[CB_N]}, {"i1", oh}, {"i2", ow}, {"i3", co}};
  x = te_begin(&c, "compute", DG_F32, true, ri, 4, NULL, 0, TE_ASSIGN);
  te_end(&c, ir_bin(c.f, DG_EXPR_MAX, te_loadv(&c, b3, x), te_float(&c, 0.0, DG_F32)));
  return te_finish(&c);
}

static void cbr_gen(dg_rng *r, int64_t *v) {
  int64_t t[11];
  nd_gen(&conv2d, r, t); /* n h w ci co k s p dil g dt */
  v[CB_N] = t[0], v[CB_H] = t[1], v[CB_W] = t[2], v[CB_CI] = t[3], v[CB_CO] = t[4];
  v[CB_K] = t[5], v[CB_S] = t[6], v[CB_P] = t[7], v[CB_DIL] = t[8], v[CB_DT] = t[10];
}

static const wl_key cbr_keys[] = {DIM("n"), DIM("h"), DIM("w"), DIM("ci"), DIM("co"), KERNEL,
                                  STRIDE, PAD, DILATION, WL_DTYPE};

const wl_family wl_family_conv2d_bias_bn_relu = {
    "conv2d_bias_bn_relu",
    "conv2d NHWC + bias_add + bn_mul + bn_add + relu, f32 epilogue (MetaSchedule CBR)",
    "conv2d_bias_bn_relu:n=1,h=224,w=224,ci=3,co=64,kernel=7,stride=2,pad=3,dilation=1,dtype=f32",
    cbr_keys, DG_ARRAY_LEN(cbr_keys), 4, cbr_check, cbr_build, cbr_gen};
