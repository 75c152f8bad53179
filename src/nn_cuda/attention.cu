/* attention.cu: causal grouped-query attention in the manner of
 * FlashAttention-2: no T x T matrix is ever stored, score tiles live in
 * registers, the softmax is online, and the backward recomputes the
 * probabilities from the forward's row log-sum-exp.
 *
 * Tensor cores through mma.sync m16n8k16 (bf16 operands, fp32
 * accumulators), fed by ldmatrix from shared memory; K/V (forward, dQ) and
 * Q/dO (dK/dV) tiles are double-buffered with cp.async, so the next tile
 * loads while the current one is multiplied. Tiles are 64 rows; a block
 * has 4 warps and each warp owns 16 rows of the block's tile, so a warp
 * computes its 16 x 64 tile of scores, their softmax and its share of the
 * products without any exchange with the other warps. Shared rows are
 * padded to HD + 8 elements, which makes every ldmatrix phase hit 8
 * distinct 16-byte bank groups.
 *
 * Forward: grid (B*NH, query tiles), the heaviest (last) query tiles
 * first. Scores are scaled by scale*log2(e) so the softmax uses exp2;
 * only the diagonal tile is masked and no tile past it is visited. The
 * row's natural log-sum-exp goes to lse for the backward.
 *
 * Backward, deterministic (no atomics): a dQ kernel per query tile (which
 * first computes delta = rowsum(dO * O) of its rows, for itself and for
 * the dK/dV kernel) loops over the key tiles up to the diagonal; then a
 * dK/dV kernel per key tile of one kv head loops over the query heads of
 * its group and the query tiles from the diagonal on. This recomputes
 * Q K^T and dO V^T once more than an atomic dQ would. When RoPE tables
 * are given, dQ and dK leave the kernels rotated back (the RoPE backward),
 * applied to the fp32 accumulators before the one rounding to bf16.
 *
 * Fragment layouts (PTX ISA, mma.m16n8k16 with .bf16; lane l, g = l / 4,
 * t = l % 4): A (16 x 16, row-major) in 4 registers of 2 elements: rows
 * g, g+8, g, g+8 and columns 2t..2t+1, 2t..2t+1, 2t+8.., 2t+8..; B (16 x
 * 8, "col") in 2 registers: k rows 2t..2t+1 and 2t+8..2t+9 of column g;
 * C (16 x 8, fp32) in 4: (g, 2t), (g, 2t+1), (g+8, 2t), (g+8, 2t+1). The
 * lower half of a register holds the lower column (A) or row (B). Hence a
 * C tile of scores over 16 keys is, pair by pair, the A operand of P V
 * without any data movement.
 *
 * Assumes HD in {16, 32, 64, 128} (nc_attention_supported); head dims up
 * to 64 keep the warp's Q (K, V in dK/dV) fragments in registers, 128
 * reads them from shared memory at each use. Scale 1/sqrt(HD); query
 * head h reads kv head h / (NH/NKV) as the C reference. q (B, T, NH, HD),
 * k, v (B, T, NKV, HD), each with rows `ld` elements apart (the model
 * keeps a row's q, k and v side by side, and so dq, dk, dv); out and dout
 * (B, T, NH, HD) packed, bf16; lse, delta (B, NH, T) fp32; RoPE tables
 * (max T, HD/2) fp32.
 */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>

#include "common.cuh"

enum { TILE = 64, WARPS = 4, THREADS = WARPS * 32, NB = TILE / 8, KBT = TILE / 16 };
static constexpr float LOG2E = 1.4426950408889634f, LN2 = 0.6931471805599453f;

bool nc_attention_supported(int HD) { return HD == 16 || HD == 32 || HD == 64 || HD == 128; }

/* ---- PTX ----------------------------------------------------------------- */

static __device__ __forceinline__ uint32_t smem_addr(const void *p) {
  return (uint32_t)__cvta_generic_to_shared(p);
}

/* Four 8 x 8 b16 matrices; lanes 8i..8i+7 give the row addresses of
 * matrix i, r[i] receives it: lane l holds row l/4, elements 2(l%4) and
 * 2(l%4)+1 (with .trans: of the transposed matrix). */
static __device__ __forceinline__ void ldsm_x4(uint32_t r[4], uint32_t addr) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(addr)
               : "memory");
}

static __device__ __forceinline__ void ldsm_x4_trans(uint32_t r[4], uint32_t addr) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(addr)
               : "memory");
}

/* c (16 x 8) += a (16 x 16) . b (16 x 8) */
static __device__ __forceinline__ void mma_bf16(float c[4], const uint32_t a[4], uint32_t b0,
                                                uint32_t b1) {
  asm("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, "
      "{%8, %9}, {%0, %1, %2, %3};\n"
      : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

/* 16 bytes global -> shared, or 16 zero bytes when !valid (src is then
 * not read but must still be a mapped address). */
static __device__ __forceinline__ void cp_async16(uint32_t dst, const void *src, bool valid) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(src),
               "r"(valid ? 16 : 0)
               : "memory");
}

static __device__ __forceinline__ void cp_async4(uint32_t dst, const void *src, bool valid) {
  asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;\n" ::"r"(dst), "l"(src),
               "r"(valid ? 4 : 0)
               : "memory");
}

static __device__ __forceinline__ void cp_async_commit(void) {
  asm volatile("cp.async.commit_group;\n" ::: "memory");
}

/* Waits for all of this thread's committed copies. */
static __device__ __forceinline__ void cp_async_wait_all(void) {
  asm volatile("cp.async.wait_group 0;\n" ::: "memory");
}

/* ---- end PTX ------------------------------------------------------------- */

/* Two floats as a bf16 pair, the first in the lower half. */
static __device__ __forceinline__ uint32_t pack_bf16(float lo, float hi) {
  return (uint32_t)__bfloat16_as_ushort(__float2bfloat16(lo)) |
         ((uint32_t)__bfloat16_as_ushort(__float2bfloat16(hi)) << 16);
}

/* Element offsets of lane l's ldmatrix.x4 row address in a tile with rows
 * LDH apart, for a 16 x 16 block at the tile's origin:
 * - a_lane: matrices (rows 0-7, cols 0-7), (8-15, 0-7), (0-7, 8-15),
 *   (8-15, 8-15): an A operand (rows m, cols k) without .trans, or with
 *   .trans a B operand stored with k as rows: (r[0], r[1]) is B for
 *   columns 0-7, (r[2], r[3]) for columns 8-15;
 * - b_lane: matrices (rows 0-7, cols 0-7), (0-7, 8-15), (8-15, 0-7),
 *   (8-15, 8-15): a B operand stored with n as rows and k as columns,
 *   without .trans: (r[0], r[1]) is B for n rows 0-7, (r[2], r[3]) for 8-15. */
template <int LDH>
static __device__ __forceinline__ int a_lane(int l) {
  return (l & 15) * LDH + (l >> 4) * 8;
}
template <int LDH>
static __device__ __forceinline__ int b_lane(int l) {
  return ((l & 7) + (l >> 4) * 8) * LDH + ((l >> 3) & 1) * 8;
}

/* 64 rows of HD bf16 from global rows `stride` elements apart (the first
 * nvalid real, the rest zero) into shared rows HD + 8 apart, by cp.async;
 * the caller commits. */
template <int HD>
static __device__ __forceinline__ void tile_async(bf16 *dst, const bf16 *src, size_t stride,
                                                  int nvalid) {
  constexpr int CPR = HD / 8, LDH = HD + 8;
#pragma unroll
  for (int i = threadIdx.x; i < TILE * CPR; i += THREADS) {
    int r = i / CPR, c = (i % CPR) * 8;
    bool ok = r < nvalid;
    cp_async16(smem_addr(dst + r * LDH + c), src + (size_t)(ok ? r : 0) * stride + c, ok);
  }
}

/* c[0..N) (each 16 x 8) += a (16 x 16 of the warp's rows) times the 16 x
 * (8N) B operand stored in shared rows (n) of 16 k-columns: one ldmatrix
 * per pair of n-blocks. */
template <int LDH, int N>
static __device__ __forceinline__ void mma_row_b(float (*c)[4], const uint32_t a[4],
                                                 const bf16 *b, int lane) {
#pragma unroll
  for (int np = 0; np < N / 2; np++) {
    uint32_t r[4];
    ldsm_x4(r, smem_addr(b + np * 16 * LDH + b_lane<LDH>(lane)));
    mma_bf16(c[2 * np], a, r[0], r[1]);
    mma_bf16(c[2 * np + 1], a, r[2], r[3]);
  }
}

/* c[0..N) += a (16 x 16) times the 16 x (8N) B operand stored with its 16
 * k as shared rows and n as columns (.trans). */
template <int LDH, int N>
static __device__ __forceinline__ void mma_trans_b(float (*c)[4], const uint32_t a[4],
                                                   const bf16 *b, int lane) {
#pragma unroll
  for (int np = 0; np < N / 2; np++) {
    uint32_t r[4];
    ldsm_x4_trans(r, smem_addr(b + np * 16 + a_lane<LDH>(lane)));
    mma_bf16(c[2 * np], a, r[0], r[1]);
    mma_bf16(c[2 * np + 1], a, r[2], r[3]);
  }
}

/* The A operand of k-block kk from a 16 x 64 fp32 C tile (n-blocks 2kk
 * and 2kk + 1), rounded to bf16. */
static __device__ __forceinline__ void c_to_a(uint32_t a[4], const float (*c)[4], int kk) {
  a[0] = pack_bf16(c[2 * kk][0], c[2 * kk][1]);
  a[1] = pack_bf16(c[2 * kk][2], c[2 * kk][3]);
  a[2] = pack_bf16(c[2 * kk + 1][0], c[2 * kk + 1][1]);
  a[3] = pack_bf16(c[2 * kk + 1][2], c[2 * kk + 1][3]);
}

/* A warp's 16 x HD accumulator (rows g, g + 8 of this lane: row0 + g and
 * row0 + g + 8) times mul to global rows `stride` apart, rows < T only;
 * with rope tables, rotated back by each row's position first (the pair
 * (d, d + HD/2) sits in n-blocks nb and nb + HD/16 of the same lane). */
template <int HD>
static __device__ __forceinline__ void store_rows(bf16 *dst, size_t stride, int row0, int T,
                                                  float (*acc)[4], float mul, const float *rcos,
                                                  const float *rsin, int lane) {
  constexpr int DB = HD / 8, H2 = HD / 2;
  int g = lane / 4, tq = lane % 4;
#pragma unroll
  for (int nb = 0; nb < DB; nb++)
#pragma unroll
    for (int e = 0; e < 4; e++) acc[nb][e] *= mul;
#pragma unroll
  for (int r = 0; r < 2; r++) {
    int row = row0 + g + 8 * r;
    if (row >= T) continue;
    if (rcos) {
#pragma unroll
      for (int nb = 0; nb < DB / 2; nb++) {
        int i = nb * 8 + 2 * tq;
        float2 c = *(const float2 *)(rcos + (size_t)row * H2 + i);
        float2 s = *(const float2 *)(rsin + (size_t)row * H2 + i);
        float x0 = acc[nb][2 * r], y0 = acc[nb + DB / 2][2 * r];
        float x1 = acc[nb][2 * r + 1], y1 = acc[nb + DB / 2][2 * r + 1];
        acc[nb][2 * r] = x0 * c.x + y0 * s.x;
        acc[nb + DB / 2][2 * r] = y0 * c.x - x0 * s.x;
        acc[nb][2 * r + 1] = x1 * c.y + y1 * s.y;
        acc[nb + DB / 2][2 * r + 1] = y1 * c.y - x1 * s.y;
      }
    }
    bf16 *o = dst + (size_t)(g + 8 * r) * stride + 2 * tq;
#pragma unroll
    for (int nb = 0; nb < DB; nb++)
      *(uint32_t *)(o + nb * 8) = pack_bf16(acc[nb][2 * r], acc[nb][2 * r + 1]);
  }
}

/* ---- forward ------------------------------------------------------------- */

template <int HD>
struct fwd_smem {
  static constexpr int TS = TILE * (HD + 8);               /* elements of a tile */
  static constexpr size_t bytes = 5 * TS * sizeof(bf16); /* Q, K x 2, V x 2 */
};

/* grid (B*NH, query tiles). Up to HD 64 the registers are capped at 128
 * so that 4 blocks share an SM (16 warps to hide the softmax's latency). */
template <int HD>
static __global__ void __launch_bounds__(THREADS, HD <= 64 ? 4 : 1)
    attention_forward_kernel(bf16 *out, float *lse, const bf16 *q, const bf16 *k, const bf16 *v,
                             size_t ld, int T, int NH, int NKV, float sl2) {
  constexpr int LDH = HD + 8, KB = HD / 16, DB = HD / 8, TS = fwd_smem<HD>::TS;
  constexpr bool QREGS = HD <= 64;
  extern __shared__ __align__(16) unsigned char smem[];
  bf16 *Qs = (bf16 *)smem, *Ks = Qs + TS, *Vs = Ks + 2 * TS;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, tq = lane % 4;
  const int qt = (int)(gridDim.y - 1 - blockIdx.y), bh = (int)blockIdx.x;
  const int b = bh / NH, h = bh % NH, kvh = h / (NH / NKV), q0 = qt * TILE;
  const size_t QD = (size_t)NH * HD;
  const bf16 *kb = k + (size_t)b * T * ld + (size_t)kvh * HD;
  const bf16 *vb = v + (size_t)b * T * ld + (size_t)kvh * HD;

  tile_async<HD>(Qs, q + ((size_t)b * T + q0) * ld + (size_t)h * HD, ld, min(TILE, T - q0));
  tile_async<HD>(Ks, kb, ld, min(TILE, T));
  tile_async<HD>(Vs, vb, ld, min(TILE, T));
  cp_async_commit();

  const bf16 *Qw = Qs + warp * 16 * LDH; /* this warp's 16 query rows */
  uint32_t qf[QREGS ? KB : 1][4];
  float o[DB][4];
#pragma unroll
  for (int nb = 0; nb < DB; nb++) o[nb][0] = o[nb][1] = o[nb][2] = o[nb][3] = 0.0f;
  /* the lane's rows g and g + 8: running max (scaled, log2 units) and its
   * partial sum over the lane's columns */
  float m_run[2] = {-INFINITY, -INFINITY}, l_run[2] = {0.0f, 0.0f};
  const int qi0 = q0 + warp * 16 + g;

  for (int kt = 0; kt <= qt; kt++) {
    cp_async_wait_all();
    __syncthreads(); /* tile kt is here; everyone is done with tile kt - 1 */
    if (kt < qt) {
      int k0 = (kt + 1) * TILE, nb_ = (kt + 1) & 1;
      tile_async<HD>(Ks + nb_ * TS, kb + (size_t)k0 * ld, ld, min(TILE, T - k0));
      tile_async<HD>(Vs + nb_ * TS, vb + (size_t)k0 * ld, ld, min(TILE, T - k0));
    }
    cp_async_commit();
    if constexpr (QREGS) {
      if (kt == 0) {
#pragma unroll
        for (int kk = 0; kk < KB; kk++)
          ldsm_x4(qf[kk], smem_addr(Qw + kk * 16 + a_lane<LDH>(lane)));
      }
    }
    const bf16 *Kt = Ks + (kt & 1) * TS, *Vt = Vs + (kt & 1) * TS;

    float s[NB][4];
#pragma unroll
    for (int nb = 0; nb < NB; nb++) s[nb][0] = s[nb][1] = s[nb][2] = s[nb][3] = 0.0f;
#pragma unroll
    for (int kk = 0; kk < KB; kk++) {
      if constexpr (QREGS) {
        mma_row_b<LDH, NB>(s, qf[kk], Kt + kk * 16, lane);
      } else {
        uint32_t a[4];
        ldsm_x4(a, smem_addr(Qw + kk * 16 + a_lane<LDH>(lane)));
        mma_row_b<LDH, NB>(s, a, Kt + kk * 16, lane);
      }
    }
    if (kt == qt) /* the diagonal tile: keys after the query, and past T */
#pragma unroll
      for (int nb = 0; nb < NB; nb++)
#pragma unroll
        for (int e = 0; e < 4; e++) {
          int key = kt * TILE + nb * 8 + 2 * tq + (e & 1), qi = qi0 + 8 * (e >> 1);
          if (key > qi || key >= T) s[nb][e] = -INFINITY;
        }

    float mx[2] = {-INFINITY, -INFINITY};
#pragma unroll
    for (int nb = 0; nb < NB; nb++) {
      mx[0] = fmaxf(mx[0], fmaxf(s[nb][0], s[nb][1]));
      mx[1] = fmaxf(mx[1], fmaxf(s[nb][2], s[nb][3]));
    }
    float mb[2], alpha[2];
#pragma unroll
    for (int r = 0; r < 2; r++) { /* the row's 4 lanes are adjacent */
      mx[r] = fmaxf(mx[r], __shfl_xor_sync(0xffffffffu, mx[r], 1));
      mx[r] = fmaxf(mx[r], __shfl_xor_sync(0xffffffffu, mx[r], 2));
      float m_new = fmaxf(m_run[r], mx[r] * sl2);
      mb[r] = m_new == -INFINITY ? 0.0f : m_new; /* a row with nothing yet */
      alpha[r] = exp2f(m_run[r] - mb[r]);
      m_run[r] = m_new;
    }
    uint32_t pf[KBT][4];
    float rs[2] = {0.0f, 0.0f};
#pragma unroll
    for (int nb = 0; nb < NB; nb++) {
      float p0 = exp2f(fmaf(s[nb][0], sl2, -mb[0])), p1 = exp2f(fmaf(s[nb][1], sl2, -mb[0]));
      float p2 = exp2f(fmaf(s[nb][2], sl2, -mb[1])), p3 = exp2f(fmaf(s[nb][3], sl2, -mb[1]));
      rs[0] += p0 + p1;
      rs[1] += p2 + p3;
      pf[nb / 2][(nb & 1) * 2] = pack_bf16(p0, p1);
      pf[nb / 2][(nb & 1) * 2 + 1] = pack_bf16(p2, p3);
    }
#pragma unroll
    for (int r = 0; r < 2; r++) l_run[r] = l_run[r] * alpha[r] + rs[r];
#pragma unroll
    for (int nb = 0; nb < DB; nb++) {
      o[nb][0] *= alpha[0];
      o[nb][1] *= alpha[0];
      o[nb][2] *= alpha[1];
      o[nb][3] *= alpha[1];
    }
#pragma unroll
    for (int kk = 0; kk < KBT; kk++) mma_trans_b<LDH, DB>(o, pf[kk], Vt + kk * 16 * LDH, lane);
  }

#pragma unroll
  for (int r = 0; r < 2; r++) {
    l_run[r] += __shfl_xor_sync(0xffffffffu, l_run[r], 1);
    l_run[r] += __shfl_xor_sync(0xffffffffu, l_run[r], 2);
  }
#pragma unroll
  for (int r = 0; r < 2; r++) {
    int qi = qi0 + 8 * r;
    if (qi >= T) continue;
    float inv = 1.0f / l_run[r];
    bf16 *orow = out + ((size_t)b * T + qi) * QD + (size_t)h * HD + 2 * tq;
#pragma unroll
    for (int nb = 0; nb < DB; nb++)
      *(uint32_t *)(orow + nb * 8) = pack_bf16(o[nb][2 * r] * inv, o[nb][2 * r + 1] * inv);
    if (tq == 0) lse[((size_t)b * NH + h) * T + qi] = (m_run[r] + log2f(l_run[r])) * LN2;
  }
}

/* ---- backward: dQ (and delta) -------------------------------------------- */

template <int HD>
struct bwd_smem {
  static constexpr int TS = TILE * (HD + 8);
  /* six tiles (dQ: Q, dO, K x 2, V x 2; dK/dV: K, V, Q x 2, dO x 2), then
   * per-row floats (dQ: delta; dK/dV: lse x 2, delta x 2) */
  static constexpr size_t rows = 6 * TS * sizeof(bf16);
  static constexpr size_t bytes = rows + 4 * TILE * sizeof(float);
};

/* grid (B*NH, query tiles): dQ of 64 queries of one head, and their
 * delta = rowsum(dO * O) into delta (B, NH, T). */
template <int HD>
static __global__ void __launch_bounds__(THREADS)
    attention_dq_kernel(bf16 *dq, float *delta, const bf16 *q, const bf16 *k, const bf16 *v,
                        size_t ld, const bf16 *out, const bf16 *dout, const float *lse,
                        const float *rcos, const float *rsin, int T, int NH, int NKV, float sl2,
                        float scale) {
  constexpr int LDH = HD + 8, KB = HD / 16, DB = HD / 8, TS = bwd_smem<HD>::TS, CPR = HD / 8;
  constexpr bool AREGS = HD <= 64;
  extern __shared__ __align__(16) unsigned char smem[];
  bf16 *Qs = (bf16 *)smem, *dOs = Qs + TS, *Ks = dOs + TS, *Vs = Ks + 2 * TS;
  float *dl_s = (float *)(smem + bwd_smem<HD>::rows);
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, tq = lane % 4;
  const int qt = (int)(gridDim.y - 1 - blockIdx.y), bh = (int)blockIdx.x;
  const int b = bh / NH, h = bh % NH, kvh = h / (NH / NKV), q0 = qt * TILE;
  const size_t QD = (size_t)NH * HD;
  const bf16 *kb = k + (size_t)b * T * ld + (size_t)kvh * HD;
  const bf16 *vb = v + (size_t)b * T * ld + (size_t)kvh * HD;
  /* row q0 of head h: in q and dq (rows ld apart), in out and dout (QD) */
  const size_t qoff = ((size_t)b * T + q0) * ld + (size_t)h * HD;
  const size_t ooff = ((size_t)b * T + q0) * QD + (size_t)h * HD;
  const float *lse_bh = lse + ((size_t)b * NH + h) * T;
  float *delta_bh = delta + ((size_t)b * NH + h) * T;

  tile_async<HD>(Qs, q + qoff, ld, min(TILE, T - q0));
  tile_async<HD>(dOs, dout + ooff, QD, min(TILE, T - q0));
  tile_async<HD>(Ks, kb, ld, min(TILE, T));
  tile_async<HD>(Vs, vb, ld, min(TILE, T));
  cp_async_commit();

  /* delta of the warp's 16 rows while the tiles load: CPR lanes per row,
   * 16 bytes each, summed over the row's lanes */
  for (int i = lane; i < 16 * CPR; i += 32) {
    int rr = i / CPR, c = (i % CPR) * 8, qi = q0 + warp * 16 + rr;
    float sum = 0.0f;
    if (qi < T) {
      size_t off = ooff + (size_t)(warp * 16 + rr) * QD + c;
      uint4 ov = *(const uint4 *)(out + off), dv = *(const uint4 *)(dout + off);
      const __nv_bfloat162 *o2 = (const __nv_bfloat162 *)&ov, *d2 = (const __nv_bfloat162 *)&dv;
#pragma unroll
      for (int j = 0; j < 4; j++) {
        float2 a = __bfloat1622float2(o2[j]), d = __bfloat1622float2(d2[j]);
        sum += a.x * d.x + a.y * d.y;
      }
    }
#pragma unroll
    for (int off = 1; off < CPR; off <<= 1) sum += __shfl_xor_sync(0xffffffffu, sum, off);
    if (c == 0) {
      dl_s[warp * 16 + rr] = sum;
      if (qi < T) delta_bh[qi] = sum;
    }
  }
  __syncwarp();
  const int qi0 = q0 + warp * 16 + g;
  float dl[2], ls[2]; /* delta and lse * log2(e) of rows g, g + 8 */
#pragma unroll
  for (int r = 0; r < 2; r++) {
    dl[r] = dl_s[warp * 16 + g + 8 * r];
    ls[r] = qi0 + 8 * r < T ? lse_bh[qi0 + 8 * r] * LOG2E : INFINITY;
  }

  const bf16 *Qw = Qs + warp * 16 * LDH, *dOw = dOs + warp * 16 * LDH;
  uint32_t qf[AREGS ? KB : 1][4], df[AREGS ? KB : 1][4];
  float acc[DB][4];
#pragma unroll
  for (int nb = 0; nb < DB; nb++) acc[nb][0] = acc[nb][1] = acc[nb][2] = acc[nb][3] = 0.0f;

  for (int kt = 0; kt <= qt; kt++) {
    cp_async_wait_all();
    __syncthreads();
    if (kt < qt) {
      int k0 = (kt + 1) * TILE, nb_ = (kt + 1) & 1;
      tile_async<HD>(Ks + nb_ * TS, kb + (size_t)k0 * ld, ld, min(TILE, T - k0));
      tile_async<HD>(Vs + nb_ * TS, vb + (size_t)k0 * ld, ld, min(TILE, T - k0));
    }
    cp_async_commit();
    if constexpr (AREGS) {
      if (kt == 0) {
#pragma unroll
        for (int kk = 0; kk < KB; kk++) {
          ldsm_x4(qf[kk], smem_addr(Qw + kk * 16 + a_lane<LDH>(lane)));
          ldsm_x4(df[kk], smem_addr(dOw + kk * 16 + a_lane<LDH>(lane)));
        }
      }
    }
    const bf16 *Kt = Ks + (kt & 1) * TS, *Vt = Vs + (kt & 1) * TS;

    float s[NB][4], dp[NB][4];
#pragma unroll
    for (int nb = 0; nb < NB; nb++)
#pragma unroll
      for (int e = 0; e < 4; e++) s[nb][e] = dp[nb][e] = 0.0f;
#pragma unroll
    for (int kk = 0; kk < KB; kk++) {
      if constexpr (AREGS) {
        mma_row_b<LDH, NB>(s, qf[kk], Kt + kk * 16, lane);  /* S = Q K^T */
        mma_row_b<LDH, NB>(dp, df[kk], Vt + kk * 16, lane); /* dP = dO V^T */
      } else {
        uint32_t a[4];
        ldsm_x4(a, smem_addr(Qw + kk * 16 + a_lane<LDH>(lane)));
        mma_row_b<LDH, NB>(s, a, Kt + kk * 16, lane);
        ldsm_x4(a, smem_addr(dOw + kk * 16 + a_lane<LDH>(lane)));
        mma_row_b<LDH, NB>(dp, a, Vt + kk * 16, lane);
      }
    }
    const bool diag = kt == qt;
#pragma unroll
    for (int nb = 0; nb < NB; nb++)
#pragma unroll
      for (int e = 0; e < 4; e++) {
        int r = e >> 1;
        float p = exp2f(fmaf(s[nb][e], sl2, -ls[r]));
        if (diag) {
          int key = kt * TILE + nb * 8 + 2 * tq + (e & 1);
          if (key > qi0 + 8 * r || key >= T) p = 0.0f;
        }
        s[nb][e] = p * (dp[nb][e] - dl[r]); /* dS, unscaled */
      }
#pragma unroll
    for (int kk = 0; kk < KBT; kk++) { /* dQ += dS K */
      uint32_t a[4];
      c_to_a(a, s, kk);
      mma_trans_b<LDH, DB>(acc, a, Kt + kk * 16 * LDH, lane);
    }
  }
  store_rows<HD>(dq + qoff + (size_t)warp * 16 * ld, ld, q0 + warp * 16, T, acc, scale, rcos,
                 rsin, lane);
}

/* ---- backward: dK, dV ---------------------------------------------------- */

/* grid (B*NKV, key tiles): dK, dV of 64 keys of one kv head, the heaviest
 * (first) key tiles first. The warp's 16 keys are the rows of its
 * transposed scores S^T = K Q^T, so P^T and dS^T come out of the
 * accumulators as the A operands of dV += P^T dO and dK += dS^T Q. */
template <int HD>
static __global__ void __launch_bounds__(THREADS)
    attention_dkdv_kernel(bf16 *dk, bf16 *dv, const bf16 *q, const bf16 *k, const bf16 *v,
                          size_t ld, const bf16 *dout, const float *lse, const float *delta,
                          const float *rcos, const float *rsin, int T, int NH, int NKV, float sl2,
                          float scale) {
  constexpr int LDH = HD + 8, KB = HD / 16, DB = HD / 8, TS = bwd_smem<HD>::TS;
  constexpr bool AREGS = HD <= 64;
  extern __shared__ __align__(16) unsigned char smem[];
  bf16 *Ks = (bf16 *)smem, *Vs = Ks + TS, *Qs = Vs + TS, *dOs = Qs + 2 * TS;
  float *ls_s = (float *)(smem + bwd_smem<HD>::rows), *dl_s = ls_s + 2 * TILE;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, tq = lane % 4;
  const int kt = (int)blockIdx.y, bk = (int)blockIdx.x;
  const int b = bk / NKV, kvh = bk % NKV, G = NH / NKV, k0 = kt * TILE;
  const int ntiles = (T + TILE - 1) / TILE, nq = ntiles - kt, steps = G * nq;
  const size_t QD = (size_t)NH * HD;
  const size_t koff = ((size_t)b * T + k0) * ld + (size_t)kvh * HD;

  /* step st: query head kvh*G + st / nq, query tile kt + st % nq, into
   * buffer st & 1 */
  auto load_step = [&](int st) {
    int h = kvh * G + st / nq, q0 = (kt + st % nq) * TILE, buf = st & 1, nv = min(TILE, T - q0);
    size_t qoff = ((size_t)b * T + q0) * ld + (size_t)h * HD;
    size_t ooff = ((size_t)b * T + q0) * QD + (size_t)h * HD;
    tile_async<HD>(Qs + buf * TS, q + qoff, ld, nv);
    tile_async<HD>(dOs + buf * TS, dout + ooff, QD, nv);
    int i = threadIdx.x % TILE;
    bool ok = i < nv;
    size_t roff = ((size_t)b * NH + h) * T + q0 + (ok ? i : 0);
    if (threadIdx.x < TILE) cp_async4(smem_addr(ls_s + buf * TILE + i), lse + roff, ok);
    else cp_async4(smem_addr(dl_s + buf * TILE + i), delta + roff, ok);
  };

  tile_async<HD>(Ks, k + koff, ld, min(TILE, T - k0));
  tile_async<HD>(Vs, v + koff, ld, min(TILE, T - k0));
  load_step(0);
  cp_async_commit();

  const bf16 *Kw = Ks + warp * 16 * LDH, *Vw = Vs + warp * 16 * LDH;
  uint32_t kf[AREGS ? KB : 1][4], vf[AREGS ? KB : 1][4];
  float dka[DB][4], dva[DB][4];
#pragma unroll
  for (int nb = 0; nb < DB; nb++)
#pragma unroll
    for (int e = 0; e < 4; e++) dka[nb][e] = dva[nb][e] = 0.0f;
  const int key0 = k0 + warp * 16 + g; /* keys of the lane's rows: key0, key0 + 8 */

  for (int st = 0; st < steps; st++) {
    const int q0 = (kt + st % nq) * TILE;
    cp_async_wait_all();
    __syncthreads();
    if (st + 1 < steps) load_step(st + 1);
    cp_async_commit();
    if constexpr (AREGS) {
      if (st == 0) {
#pragma unroll
        for (int kk = 0; kk < KB; kk++) {
          ldsm_x4(kf[kk], smem_addr(Kw + kk * 16 + a_lane<LDH>(lane)));
          ldsm_x4(vf[kk], smem_addr(Vw + kk * 16 + a_lane<LDH>(lane)));
        }
      }
    }
    const int buf = st & 1;
    const bf16 *Qt = Qs + buf * TS, *dOt = dOs + buf * TS;
    const float *ls = ls_s + buf * TILE, *dl = dl_s + buf * TILE;

    float s[NB][4], dp[NB][4];
#pragma unroll
    for (int nb = 0; nb < NB; nb++)
#pragma unroll
      for (int e = 0; e < 4; e++) s[nb][e] = dp[nb][e] = 0.0f;
#pragma unroll
    for (int kk = 0; kk < KB; kk++) {
      if constexpr (AREGS) {
        mma_row_b<LDH, NB>(s, kf[kk], Qt + kk * 16, lane);   /* S^T = K Q^T */
        mma_row_b<LDH, NB>(dp, vf[kk], dOt + kk * 16, lane); /* dP^T = V dO^T */
      } else {
        uint32_t a[4];
        ldsm_x4(a, smem_addr(Kw + kk * 16 + a_lane<LDH>(lane)));
        mma_row_b<LDH, NB>(s, a, Qt + kk * 16, lane);
        ldsm_x4(a, smem_addr(Vw + kk * 16 + a_lane<LDH>(lane)));
        mma_row_b<LDH, NB>(dp, a, dOt + kk * 16, lane);
      }
    }
    /* the diagonal tile masks later keys; a partial last tile its rows
     * past T (whose lse and delta were zero-filled) */
    const bool mask = q0 == k0 || q0 + TILE > T;
#pragma unroll
    for (int nb = 0; nb < NB; nb++) {
      int j = nb * 8 + 2 * tq; /* the lane's queries j, j + 1 of the tile */
      float2 l2 = *(const float2 *)(ls + j), d2 = *(const float2 *)(dl + j);
#pragma unroll
      for (int e = 0; e < 4; e++) {
        int c = e & 1, qi = q0 + j + c, key = key0 + 8 * (e >> 1);
        float lz = (c ? l2.y : l2.x) * LOG2E, dz = c ? d2.y : d2.x;
        float p = exp2f(fmaf(s[nb][e], sl2, -lz));
        if (mask && (key > qi || qi >= T)) p = 0.0f;
        s[nb][e] = p;
        dp[nb][e] = p * (dp[nb][e] - dz); /* dS^T, unscaled */
      }
    }
#pragma unroll
    for (int kk = 0; kk < KBT; kk++) { /* over the tile's queries */
      uint32_t a[4];
      c_to_a(a, s, kk);
      mma_trans_b<LDH, DB>(dva, a, dOt + kk * 16 * LDH, lane); /* dV += P^T dO */
      c_to_a(a, dp, kk);
      mma_trans_b<LDH, DB>(dka, a, Qt + kk * 16 * LDH, lane); /* dK += dS^T Q */
    }
  }
  size_t off = koff + (size_t)warp * 16 * ld;
  store_rows<HD>(dk + off, ld, k0 + warp * 16, T, dka, scale, rcos, rsin, lane);
  store_rows<HD>(dv + off, ld, k0 + warp * 16, T, dva, 1.0f, NULL, NULL, lane);
}

/* ---- launchers ----------------------------------------------------------- */

template <typename K>
static bool set_smem(K kernel, size_t bytes) {
  return NC_CUDA(
      cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)bytes));
}

template <int HD>
static bool forward_hd(bf16 *out, float *lse, const bf16 *q, const bf16 *k, const bf16 *v,
                       size_t ld, int B, int T, int NH, int NKV, cudaStream_t s) {
  size_t smem = fwd_smem<HD>::bytes;
  if (!set_smem(attention_forward_kernel<HD>, smem)) return false;
  dim3 grid((unsigned)(B * NH), (unsigned)((T + TILE - 1) / TILE));
  attention_forward_kernel<HD><<<grid, THREADS, smem, s>>>(out, lse, q, k, v, ld, T, NH, NKV,
                                                           LOG2E / sqrtf((float)HD));
  return NC_LAUNCHED();
}

template <int HD>
static bool backward_hd(bf16 *dq, bf16 *dk, bf16 *dv, float *delta, const bf16 *dout,
                        const bf16 *out, const float *lse, const bf16 *q, const bf16 *k,
                        const bf16 *v, size_t ld, int B, int T, int NH, int NKV,
                        const float *rcos, const float *rsin, cudaStream_t s) {
  size_t smem = bwd_smem<HD>::bytes;
  if (!set_smem(attention_dq_kernel<HD>, smem) || !set_smem(attention_dkdv_kernel<HD>, smem))
    return false;
  float scale = 1.0f / sqrtf((float)HD), sl2 = scale * LOG2E;
  unsigned tiles = (unsigned)((T + TILE - 1) / TILE);
  attention_dq_kernel<HD><<<dim3((unsigned)(B * NH), tiles), THREADS, smem, s>>>(
      dq, delta, q, k, v, ld, out, dout, lse, rcos, rsin, T, NH, NKV, sl2, scale);
  if (!NC_LAUNCHED()) return false;
  attention_dkdv_kernel<HD><<<dim3((unsigned)(B * NKV), tiles), THREADS, smem, s>>>(
      dk, dv, q, k, v, ld, dout, lse, delta, rcos, rsin, T, NH, NKV, sl2, scale);
  return NC_LAUNCHED();
}

bool nc_attention_forward(bf16 *out, float *lse, const bf16 *q, const bf16 *k, const bf16 *v,
                          size_t ld, int B, int T, int NH, int NKV, int HD, cudaStream_t s) {
  switch (HD) {
    case 16: return forward_hd<16>(out, lse, q, k, v, ld, B, T, NH, NKV, s);
    case 32: return forward_hd<32>(out, lse, q, k, v, ld, B, T, NH, NKV, s);
    case 64: return forward_hd<64>(out, lse, q, k, v, ld, B, T, NH, NKV, s);
    case 128: return forward_hd<128>(out, lse, q, k, v, ld, B, T, NH, NKV, s);
  }
  DG_UNREACHABLE();
}

bool nc_attention_backward(bf16 *dq, bf16 *dk, bf16 *dv, float *delta, const bf16 *dout,
                           const bf16 *out, const float *lse, const bf16 *q, const bf16 *k,
                           const bf16 *v, size_t ld, int B, int T, int NH, int NKV, int HD,
                           const float *rope_cos, const float *rope_sin, cudaStream_t s) {
#define BWD(hd)                                                                              \
  case hd:                                                                                   \
    return backward_hd<hd>(dq, dk, dv, delta, dout, out, lse, q, k, v, ld, B, T, NH, NKV,    \
                           rope_cos, rope_sin, s)
  switch (HD) {
    BWD(16);
    BWD(32);
    BWD(64);
    BWD(128);
  }
#undef BWD
  DG_UNREACHABLE();
}

/* ---- the kernels alone, on host arrays (for checks) ---------------------- */

extern "C" bool nn_cuda_attention_run(const float *q, const float *k, const float *v,
                                      const float *dout, int B, int T, int NH, int NKV, int HD,
                                      const float *rope_cos, const float *rope_sin, float *out,
                                      float *lse, float *dq, float *dk, float *dv,
                                      dg_status *st) {
  if (!nc_attention_supported(HD) || B < 1 || T < 1 || NKV < 1 || NH % NKV != 0 ||
      (double)B * NH > 65535 || (double)B * T * NH * HD > 1e9)
    return dg_fail(st, DG_ERR_INVALID,
                   "attention run: unsupported shape B %d T %d heads %d/%d head_dim %d", B, T, NH,
                   NKV, HD);
  /* q, k, v side by side in each row, as the model keeps them (and dq,
   * dk, dv the same way): rows ld apart */
  size_t N = (size_t)B * T, QD = (size_t)NH * HD, KVD = (size_t)NKV * HD, ld = QD + 2 * KVD;
  size_t nq = N * QD, nqkv = N * ld, nr = (size_t)B * NH * T;
  size_t nrope = (size_t)T * (HD / 2);
  /* one bf16 block: qkv, dout, out, dqkv; one fp32 block: lse, delta,
   * cos, sin */
  size_t nb16 = 2 * nqkv + 2 * nq, nf32 = 2 * nr + 2 * nrope;
  bf16 *hb = (bf16 *)malloc(sizeof(bf16) * nb16), *db = NULL;
  float *df = NULL;
  if (!hb) return dg_fail(st, DG_ERR_RUNTIME, "attention run: out of host memory");
  /* qkv and dout are uploaded as one block */
  bf16 *hqkv = hb, *hdo = hqkv + nqkv, *ho = hdo + nq, *hdqkv = ho + nq;
  for (size_t r = 0; r < N; r++) {
    bf16 *row = hqkv + r * ld;
    for (size_t i = 0; i < QD; i++) row[i] = __float2bfloat16(q[r * QD + i]);
    for (size_t i = 0; i < KVD; i++) {
      row[QD + i] = __float2bfloat16(k[r * KVD + i]);
      row[QD + KVD + i] = __float2bfloat16(v[r * KVD + i]);
    }
  }
  for (size_t i = 0; dout && i < nq; i++) hdo[i] = __float2bfloat16(dout[i]);
  bool rope = dout && rope_cos && rope_sin;
  cudaStream_t s = 0;
  bool ok = NC_CUDA(cudaMalloc(&db, sizeof(bf16) * nb16)) &&
            NC_CUDA(cudaMalloc(&df, sizeof(float) * nf32)) &&
            NC_CUDA(cudaMemcpy(db, hb, sizeof(bf16) * (nqkv + (dout ? nq : 0)),
                               cudaMemcpyHostToDevice));
  bf16 *gqkv = db, *gdo = gqkv + nqkv, *go = gdo + nq, *gdqkv = go + nq;
  float *glse = df, *gdelta = glse + nr, *gcos = gdelta + nr, *gsin = gcos + nrope;
  if (ok && rope)
    ok = NC_CUDA(cudaMemcpy(gcos, rope_cos, sizeof(float) * nrope, cudaMemcpyHostToDevice)) &&
         NC_CUDA(cudaMemcpy(gsin, rope_sin, sizeof(float) * nrope, cudaMemcpyHostToDevice));
  ok = ok && nc_attention_forward(go, glse, gqkv, gqkv + QD, gqkv + QD + KVD, ld, B, T, NH, NKV,
                                  HD, s);
  if (ok && dout)
    ok = nc_attention_backward(gdqkv, gdqkv + QD, gdqkv + QD + KVD, gdelta, gdo, go, glse, gqkv,
                               gqkv + QD, gqkv + QD + KVD, ld, B, T, NH, NKV, HD,
                               rope ? gcos : NULL, rope ? gsin : NULL, s);
  ok = ok && NC_CUDA(cudaDeviceSynchronize()) &&
       NC_CUDA(cudaMemcpy(ho, go, sizeof(bf16) * (nq + (dout ? nqkv : 0)),
                          cudaMemcpyDeviceToHost)) &&
       NC_CUDA(cudaMemcpy(lse, glse, sizeof(float) * nr, cudaMemcpyDeviceToHost));
  if (ok) {
    for (size_t i = 0; i < nq; i++) out[i] = __bfloat162float(ho[i]);
    for (size_t r = 0; dout && r < N; r++) {
      const bf16 *row = hdqkv + r * ld;
      for (size_t i = 0; i < QD; i++) dq[r * QD + i] = __bfloat162float(row[i]);
      for (size_t i = 0; i < KVD; i++) {
        dk[r * KVD + i] = __bfloat162float(row[QD + i]);
        dv[r * KVD + i] = __bfloat162float(row[QD + KVD + i]);
      }
    }
  }
  cudaFree(db);
  cudaFree(df);
  free(hb);
  return nc_error_take(st, "attention run");
}
