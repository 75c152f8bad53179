/* matmul.c: the contraction families without windows: gemm, batch_matmul
 * (MetaSchedule's GMM, batch_matmul_nkkm), gemv and transpose_batch_matmul
 * (TBG). Names follow te_workload.py: batch_matmul reads X (b, n, k) and
 * Y (b, k, m) into block/buffer Z; gemm follows its `matmul` (A, B -> C).
 * The output is always f32: with dtype=f16 the inputs are f16 and the
 * products are cast to f32 before accumulation (WMMA f16·f16 -> f32).
 *
 * Letters: B batch, M/N output rows/columns, K the reduced dimension.
 */
#include "wl/wl_impl.h"

#define DIM(name) WL_REQ(name, 1, WL_DIM_MAX)

static dg_expr *mul_acc(te_ctx *c, dg_expr *a, dg_expr *b) {
  return ir_mul(c->f, te_cast(c, DG_F32, a), te_cast(c, DG_F32, b));
}

/* ---- gemm: C (m, n) = A (m, k) · B (k, n) ---------------------------------- */

enum { GM_M, GM_N, GM_K, GM_TA, GM_TB, GM_DT };
static const wl_key gemm_keys[] = {DIM("m"), DIM("n"), DIM("k"), WL_FLAG("trans_a"),
                                   WL_FLAG("trans_b"), WL_DTYPE};

static bool gemm_check(const int64_t *v, int64_t *bytes, dg_status *st) {
  (void)st;
  dg_dtype t = wl_dtype_of(v[GM_DT]);
  wl_bytes_add(bytes, t, 2, v[GM_M], v[GM_K]);
  wl_bytes_add(bytes, t, 2, v[GM_K], v[GM_N]);
  wl_bytes_add(bytes, DG_F32, 2, v[GM_M], v[GM_N]);
  return true;
}

static dg_func *gemm_build(const int64_t *v) {
  int64_t m = v[GM_M], n = v[GM_N], k = v[GM_K];
  dg_dtype t = wl_dtype_of(v[GM_DT]);
  te_ctx c;
  te_init(&c);
  int64_t sa[2] = {v[GM_TA] ? k : m, v[GM_TA] ? m : k};
  int64_t sb[2] = {v[GM_TB] ? n : k, v[GM_TB] ? k : n};
  dg_buffer *A = te_placeholder(&c, "A", t, 2, sa);
  dg_buffer *B = te_placeholder(&c, "B", t, 2, sb);
  te_axis sp[] = {{"i", m}, {"j", n}}, rd[] = {{"k", k}};
  dg_expr **x = te_begin(&c, "C", DG_F32, true, sp, 2, rd, 1, TE_SUM);
  dg_expr *a = v[GM_TA] ? te_load(&c, A, x[2], x[0]) : te_load(&c, A, x[0], x[2]);
  dg_expr *b = v[GM_TB] ? te_load(&c, B, x[1], x[2]) : te_load(&c, B, x[2], x[1]);
  te_end(&c, mul_acc(&c, a, b));
  return te_finish(&c);
}

static void gemm_gen(dg_rng *r, int64_t *v) {
  v[GM_M] = dg_rng_uniform(r) < 0.6 ? wl_gen_tokens(r) : wl_gen_dim(r, 1, 16384);
  v[GM_N] = dg_rng_uniform(r) < 0.6 ? wl_gen_hidden(r) : wl_gen_dim(r, 1, 16384);
  v[GM_K] = dg_rng_uniform(r) < 0.6 ? wl_gen_hidden(r) : wl_gen_dim(r, 1, 16384);
  v[GM_TA] = dg_rng_uniform(r) < 0.1;
  v[GM_TB] = dg_rng_uniform(r) < 0.35;
  v[GM_DT] = wl_gen_dtype(r);
}

const wl_family wl_family_gemm = {
    "gemm", "matrix multiply C = A·B (optionally transposed operands), f32 output",
    "gemm:m=1024,n=1024,k=1024,trans_a=0,trans_b=0,dtype=f32",
    gemm_keys, DG_ARRAY_LEN(gemm_keys), 12, gemm_check, gemm_build, gemm_gen};

/* ---- batch_matmul: Z (b, n, m) = X (b, n, k) · Y (b, k, m) ----------------- */

enum { BM_B, BM_N, BM_M, BM_K, BM_DT };
static const wl_key bmm_keys[] = {DIM("b"), DIM("n"), DIM("m"), DIM("k"), WL_DTYPE};

static bool bmm_check(const int64_t *v, int64_t *bytes, dg_status *st) {
  (void)st;
  dg_dtype t = wl_dtype_of(v[BM_DT]);
  wl_bytes_add(bytes, t, 3, v[BM_B], v[BM_N], v[BM_K]);
  wl_bytes_add(bytes, t, 3, v[BM_B], v[BM_K], v[BM_M]);
  wl_bytes_add(bytes, DG_F32, 3, v[BM_B], v[BM_N], v[BM_M]);
  return true;
}

static dg_func *bmm_build(const int64_t *v) {
  dg_dtype t = wl_dtype_of(v[BM_DT]);
  te_ctx c;
  te_init(&c);
  int64_t sx[3] = {v[BM_B], v[BM_N], v[BM_K]}, sy[3] = {v[BM_B], v[BM_K], v[BM_M]};
  dg_buffer *X = te_placeholder(&c, "X", t, 3, sx);
  dg_buffer *Y = te_placeholder(&c, "Y", t, 3, sy);
  te_axis sp[] = {{"b", v[BM_B]}, {"i", v[BM_N]}, {"j", v[BM_M]}}, rd[] = {{"k", v[BM_K]}};
  dg_expr **x = te_begin(&c, "Z", DG_F32, true, sp, 3, rd, 1, TE_SUM);
  te_end(&c, mul_acc(&c, te_load(&c, X, x[0], x[1], x[3]), te_load(&c, Y, x[0], x[3], x[2])));
  return te_finish(&c);
}

static void bmm_gen(dg_rng *r, int64_t *v) {
  static const int64_t heads[] = {1, 8, 12, 16, 20, 24, 32, 40, 48, 64};
  static const int64_t seqs[] = {64, 128, 256, 384, 512, 1024, 2048, 4096, 77, 197, 577};
  static const int64_t hd[] = {64, 64, 128, 128, 80, 96, 256, 32};
  if (dg_rng_uniform(r) < 0.7) {
    int64_t b = wl_gen_batch(r);
    v[BM_B] = b * WL_PICK(r, heads);
  } else {
    v[BM_B] = wl_gen_dim(r, 1, 256);
  }
  if (dg_rng_uniform(r) < 0.5) { /* attention: (seq, hd) x (hd, seq) or (seq, seq) x (seq, hd) */
    int64_t s = dg_rng_uniform(r) < 0.7 ? WL_PICK(r, seqs) : wl_gen_dim(r, 1, 4096);
    int64_t d = WL_PICK(r, hd);
    bool scores = dg_rng_uniform(r) < 0.5;
    v[BM_N] = s;
    v[BM_M] = scores ? s : d;
    v[BM_K] = scores ? d : s;
  } else {
    v[BM_N] = wl_gen_dim(r, 1, 4096);
    v[BM_M] = wl_gen_dim(r, 1, 4096);
    v[BM_K] = wl_gen_dim(r, 1, 4096);
  }
  v[BM_DT] = wl_gen_dtype(r);
}

const wl_family wl_family_batch_matmul = {
    "batch_matmul", "batched matmul Z[b] = X[b]·Y[b] (MetaSchedule GMM), f32 output",
    "batch_matmul:b=1,n=128,m=128,k=128,dtype=f32",
    bmm_keys, DG_ARRAY_LEN(bmm_keys), 8, bmm_check, bmm_build, bmm_gen};

/* ---- gemv: C (n) = A (n, k) · B (k) ---------------------------------------- */

enum { GV_N, GV_K, GV_DT };
static const wl_key gemv_keys[] = {DIM("n"), DIM("k"), WL_DTYPE};

static bool gemv_check(const int64_t *v, int64_t *bytes, dg_status *st) {
  (void)st;
  dg_dtype t = wl_dtype_of(v[GV_DT]);
  wl_bytes_add(bytes, t, 2, v[GV_N], v[GV_K]);
  wl_bytes_add(bytes, t, 1, v[GV_K]);
  wl_bytes_add(bytes, DG_F32, 1, v[GV_N]);
  return true;
}

static dg_func *gemv_build(const int64_t *v) {
  dg_dtype t = wl_dtype_of(v[GV_DT]);
  te_ctx c;
  te_init(&c);
  int64_t sa[2] = {v[GV_N], v[GV_K]};
  dg_buffer *A = te_placeholder(&c, "A", t, 2, sa);
  dg_buffer *B = te_placeholder(&c, "B", t, 1, sa + 1);
  te_axis sp[] = {{"i", v[GV_N]}}, rd[] = {{"k", v[GV_K]}};
  dg_expr **x = te_begin(&c, "C", DG_F32, true, sp, 1, rd, 1, TE_SUM);
  te_end(&c, mul_acc(&c, te_load(&c, A, x[0], x[1]), te_load(&c, B, x[1])));
  return te_finish(&c);
}

static void gemv_gen(dg_rng *r, int64_t *v) {
  v[GV_N] = dg_rng_uniform(r) < 0.6 ? wl_gen_hidden(r) : wl_gen_dim(r, 1, 32768);
  v[GV_K] = dg_rng_uniform(r) < 0.6 ? wl_gen_hidden(r) : wl_gen_dim(r, 1, 32768);
  v[GV_DT] = wl_gen_dtype(r);
}

const wl_family wl_family_gemv = {
    "gemv", "matrix-vector product C = A·B, f32 output",
    "gemv:n=4096,k=4096,dtype=f32",
    gemv_keys, DG_ARRAY_LEN(gemv_keys), 4, gemv_check, gemv_build, gemv_gen};

/* ---- transpose_batch_matmul (TBG) ------------------------------------------
 * query, value (batch, seq, heads, dim) -> query_T (batch, heads, seq, dim),
 * value_T (batch, heads, dim, seq) -> C (batch, heads, seq, seq). */

enum { TB_B, TB_S, TB_H, TB_D, TB_DT };
static const wl_key tbg_keys[] = {DIM("batch"), DIM("seq"), DIM("heads"), DIM("dim"), WL_DTYPE};

static bool tbg_check(const int64_t *v, int64_t *bytes, dg_status *st) {
  (void)st;
  dg_dtype t = wl_dtype_of(v[TB_DT]);
  for (int i = 0; i < 4; i++) /* query, value, query_T, value_T */
    wl_bytes_add(bytes, t, 4, v[TB_B], v[TB_S], v[TB_H], v[TB_D]);
  wl_bytes_add(bytes, DG_F32, 4, v[TB_B], v[TB_H], v[TB_S], v[TB_S]);
  return true;
}

static dg_func *tbg_build(const int64_t *v) {
  int64_t B = v[TB_B], S = v[TB_S], H = v[TB_H], D = v[TB_D];
  dg_dtype t = wl_dtype_of(v[TB_DT]);
  te_ctx c;
  te_init(&c);
  int64_t s[4] = {B, S, H, D};
  dg_buffer *q = te_placeholder(&c, "query", t, 4, s);
  dg_buffer *val = te_placeholder(&c, "value", t, 4, s);
  te_axis aq[] = {{"b", B}, {"h", H}, {"l", S}, {"d", D}};
  dg_expr **x = te_begin(&c, "query_T", t, false, aq, 4, NULL, 0, TE_ASSIGN);
  dg_buffer *qT = te_end(&c, te_load(&c, q, x[0], x[2], x[1], x[3]));
  te_axis av[] = {{"b", B}, {"h", H}, {"d", D}, {"l", S}};
  x = te_begin(&c, "value_T", t, false, av, 4, NULL, 0, TE_ASSIGN);
  dg_buffer *vT = te_end(&c, te_load(&c, val, x[0], x[3], x[1], x[2]));
  te_axis ac[] = {{"b", B}, {"h", H}, {"i", S}, {"j", S}}, rk[] = {{"k", D}};
  x = te_begin(&c, "C", DG_F32, true, ac, 4, rk, 1, TE_SUM);
  te_end(&c, mul_acc(&c, te_load(&c, qT, x[0], x[1], x[2], x[4]),
                     te_load(&c, vT, x[0], x[1], x[4], x[3])));
  return te_finish(&c);
}

static void tbg_gen(dg_rng *r, int64_t *v) {
  static const int64_t seqs[] = {64, 128, 256, 384, 512, 1024, 2048, 77, 197, 100, 1000};
  static const int64_t heads[] = {8, 12, 16, 20, 24, 32, 40, 48, 64};
  static const int64_t dims[] = {64, 64, 128, 128, 32, 80, 96, 256};
  v[TB_B] = wl_gen_batch(r);
  v[TB_S] = dg_rng_uniform(r) < 0.8 ? WL_PICK(r, seqs) : wl_gen_dim(r, 1, 2048);
  v[TB_H] = dg_rng_uniform(r) < 0.8 ? WL_PICK(r, heads) : dg_rng_range(r, 1, 64);
  v[TB_D] = WL_PICK(r, dims);
  v[TB_DT] = wl_gen_dtype(r);
}

const wl_family wl_family_transpose_batch_matmul = {
    "transpose_batch_matmul",
    "attention scores C[b,h] = q[b,:,h]·v[b,:,h]^T after two transposes (MetaSchedule TBG)",
    "transpose_batch_matmul:batch=1,seq=128,heads=12,dim=64,dtype=f32",
    tbg_keys, DG_ARRAY_LEN(tbg_keys), 4, tbg_check, tbg_build, tbg_gen};
