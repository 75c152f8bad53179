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
 * On a compute capability 9.0 device with HD 64 the launchers below run
 * the warpgroup (wgmma) kernels of attention_wgmma.cu instead, by default
 * (nn_cuda_attention_tiles chooses); these kernels run everywhere else.
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

#include "attention_common.cuh"

enum { TILE = 64, WARPS = 4, THREADS = WARPS * 32, NB = TILE / 8, KBT = TILE / 16 };

bool nc_attention_supported(int HD) { return HD == 16 || HD == 32 || HD == 64 || HD == 128; }

/* ---- PTX ----------------------------------------------------------------- */

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

/* ---- end PTX ------------------------------------------------------------- */

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

/* ROWS (default one 64-row tile) rows of HD bf16 from global rows
 * `stride` elements apart (the first nvalid real, the rest zero) into
 * shared rows HD + 8 apart, by cp.async; the caller commits. */
template <int HD, int ROWS = TILE>
static __device__ __forceinline__ void tile_async(bf16 *dst, const bf16 *src, size_t stride,
                                                  int nvalid) {
  constexpr int CPR = HD / 8, LDH = HD + 8;
#pragma unroll
  for (int i = threadIdx.x; i < ROWS * CPR; i += THREADS) {
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

/* The same for MR A operands (the warp's MR 16-row m-tiles) sharing each
 * B fragment: one ldmatrix feeds 2 * MR products. */
template <int LDH, int N, int MR>
static __device__ __forceinline__ void mma_row_b_mr(float (*c)[N][4], const uint32_t (*a)[4],
                                                    const bf16 *b, int lane) {
#pragma unroll
  for (int np = 0; np < N / 2; np++) {
    uint32_t r[4];
    ldsm_x4(r, smem_addr(b + np * 16 * LDH + b_lane<LDH>(lane)));
#pragma unroll
    for (int mr = 0; mr < MR; mr++) {
      mma_bf16(c[mr][2 * np], a[mr], r[0], r[1]);
      mma_bf16(c[mr][2 * np + 1], a[mr], r[2], r[3]);
    }
  }
}

template <int LDH, int N, int MR>
static __device__ __forceinline__ void mma_trans_b_mr(float (*c)[N][4], const uint32_t (*a)[4],
                                                      const bf16 *b, int lane) {
#pragma unroll
  for (int np = 0; np < N / 2; np++) {
    uint32_t r[4];
    ldsm_x4_trans(r, smem_addr(b + np * 16 + a_lane<LDH>(lane)));
#pragma unroll
    for (int mr = 0; mr < MR; mr++) {
      mma_bf16(c[mr][2 * np], a[mr], r[0], r[1]);
      mma_bf16(c[mr][2 * np + 1], a[mr], r[2], r[3]);
    }
  }
}

/* The A operands of k-block kk of the warp's MR m-tiles (rows warp * 16 +
 * 64 mr of a block tile): the fragment held in registers (REGS, one
 * m-tile), or by ldmatrix from the tile in shared memory. */
template <int LDH, int MR, bool REGS>
static __device__ __forceinline__ void a_operands(uint32_t (*a)[4], const uint32_t held[4],
                                                  const bf16 *tile, int kk, int warp, int lane) {
#pragma unroll
  for (int mr = 0; mr < MR; mr++) {
    if constexpr (REGS) {
#pragma unroll
      for (int e = 0; e < 4; e++) a[mr][e] = held[e];
    } else {
      ldsm_x4(a[mr], smem_addr(tile + (warp * 16 + mr * TILE) * LDH + kk * 16 + a_lane<LDH>(lane)));
    }
  }
}

/* ---- forward ------------------------------------------------------------- */

/* A block of MR * 64 query rows: each warp owns MR m-tiles of 16 rows,
 * m-tile mr of warp w being the block's rows 16 w + 64 mr, so that every
 * K and V fragment loaded from shared memory feeds MR products. */
template <int HD, int MR>
struct fwd_smem {
  static constexpr int TS = TILE * (HD + 8);                    /* elements of a tile */
  static constexpr size_t bytes = (MR + 4) * TS * sizeof(bf16); /* Q, K x 2, V x 2 */
};

/* grid (B*NH, query blocks). With one m-tile a warp and HD up to 64 the
 * registers are capped at 128 so that 4 blocks share an SM (16 warps to
 * hide the softmax's latency); with two, a warp has the independent work
 * itself and 2 blocks share an SM. */
template <int HD, int MR>
static __global__ void __launch_bounds__(THREADS, HD <= 64 ? (MR == 1 ? 4 : 2) : 1)
    attention_forward_kernel(bf16 *out, float *lse, const bf16 *q, const bf16 *k, const bf16 *v,
                             size_t ld, int T, int NH, int NKV, float sl2) {
  constexpr int LDH = HD + 8, KB = HD / 16, DB = HD / 8, TS = fwd_smem<HD, MR>::TS;
  constexpr int BM = MR * TILE;
  constexpr bool QREGS = HD <= 64;
  extern __shared__ __align__(16) unsigned char smem[];
  bf16 *Qs = (bf16 *)smem, *Ks = Qs + MR * TS, *Vs = Ks + 2 * TS;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, tq = lane % 4;
  const int qb = (int)(gridDim.y - 1 - blockIdx.y), bh = (int)blockIdx.x;
  const int b = bh / NH, h = bh % NH, kvh = h / (NH / NKV), q0 = qb * BM;
  /* key tiles 0 .. nkt - 1 reach the block's last query (or T) */
  const int nkt = min((T + TILE - 1) / TILE, (q0 + BM - 1) / TILE + 1);
  const size_t QD = (size_t)NH * HD;
  const bf16 *kb = k + (size_t)b * T * ld + (size_t)kvh * HD;
  const bf16 *vb = v + (size_t)b * T * ld + (size_t)kvh * HD;

  tile_async<HD, BM>(Qs, q + ((size_t)b * T + q0) * ld + (size_t)h * HD, ld, min(BM, T - q0));
  tile_async<HD>(Ks, kb, ld, min(TILE, T));
  tile_async<HD>(Vs, vb, ld, min(TILE, T));
  cp_async_commit();

  uint32_t qf[QREGS ? MR : 1][QREGS ? KB : 1][4];
  float o[MR][DB][4];
  /* the lane's rows g and g + 8 of each m-tile: running max (scaled, log2
   * units) and its partial sum over the lane's columns */
  float m_run[MR][2], l_run[MR][2];
  int qi0[MR];
#pragma unroll
  for (int mr = 0; mr < MR; mr++) {
#pragma unroll
    for (int nb = 0; nb < DB; nb++) o[mr][nb][0] = o[mr][nb][1] = o[mr][nb][2] = o[mr][nb][3] = 0.0f;
    m_run[mr][0] = m_run[mr][1] = -INFINITY;
    l_run[mr][0] = l_run[mr][1] = 0.0f;
    qi0[mr] = q0 + warp * 16 + mr * TILE + g;
  }

  for (int kt = 0; kt < nkt; kt++) {
    cp_async_wait_all();
    __syncthreads(); /* tile kt is here; everyone is done with tile kt - 1 */
    if (kt + 1 < nkt) {
      int k0 = (kt + 1) * TILE, nb_ = (kt + 1) & 1;
      tile_async<HD>(Ks + nb_ * TS, kb + (size_t)k0 * ld, ld, min(TILE, T - k0));
      tile_async<HD>(Vs + nb_ * TS, vb + (size_t)k0 * ld, ld, min(TILE, T - k0));
    }
    cp_async_commit();
    if constexpr (QREGS) {
      if (kt == 0) {
#pragma unroll
        for (int mr = 0; mr < MR; mr++)
#pragma unroll
          for (int kk = 0; kk < KB; kk++)
            ldsm_x4(qf[mr][kk],
                    smem_addr(Qs + (warp * 16 + mr * TILE) * LDH + kk * 16 + a_lane<LDH>(lane)));
      }
    }
    const bf16 *Kt = Ks + (kt & 1) * TS, *Vt = Vs + (kt & 1) * TS;

    float s[MR][NB][4];
#pragma unroll
    for (int mr = 0; mr < MR; mr++)
#pragma unroll
      for (int nb = 0; nb < NB; nb++) s[mr][nb][0] = s[mr][nb][1] = s[mr][nb][2] = s[mr][nb][3] = 0.0f;
#pragma unroll
    for (int kk = 0; kk < KB; kk++) {
      if constexpr (QREGS) {
        uint32_t a[MR][4];
#pragma unroll
        for (int mr = 0; mr < MR; mr++)
#pragma unroll
          for (int e = 0; e < 4; e++) a[mr][e] = qf[mr][kk][e];
        mma_row_b_mr<LDH, NB, MR>(s, a, Kt + kk * 16, lane);
      } else {
        uint32_t a[MR][4];
#pragma unroll
        for (int mr = 0; mr < MR; mr++)
          ldsm_x4(a[mr], smem_addr(Qs + (warp * 16 + mr * TILE) * LDH + kk * 16 + a_lane<LDH>(lane)));
        mma_row_b_mr<LDH, NB, MR>(s, a, Kt + kk * 16, lane);
      }
    }
    if (kt * TILE + TILE - 1 > q0) /* tiles reaching past the block's first query, and past T */
#pragma unroll
      for (int mr = 0; mr < MR; mr++)
#pragma unroll
        for (int nb = 0; nb < NB; nb++)
#pragma unroll
          for (int e = 0; e < 4; e++) {
            int key = kt * TILE + nb * 8 + 2 * tq + (e & 1), qi = qi0[mr] + 8 * (e >> 1);
            if (key > qi || key >= T) s[mr][nb][e] = -INFINITY;
          }

    uint32_t pf[MR][KBT][4];
#pragma unroll
    for (int mr = 0; mr < MR; mr++) {
      float mx[2] = {-INFINITY, -INFINITY};
#pragma unroll
      for (int nb = 0; nb < NB; nb++) {
        mx[0] = fmaxf(mx[0], fmaxf(s[mr][nb][0], s[mr][nb][1]));
        mx[1] = fmaxf(mx[1], fmaxf(s[mr][nb][2], s[mr][nb][3]));
      }
      float mb[2], alpha[2];
#pragma unroll
      for (int r = 0; r < 2; r++) { /* the row's 4 lanes are adjacent */
        mx[r] = fmaxf(mx[r], __shfl_xor_sync(0xffffffffu, mx[r], 1));
        mx[r] = fmaxf(mx[r], __shfl_xor_sync(0xffffffffu, mx[r], 2));
        float m_new = fmaxf(m_run[mr][r], mx[r] * sl2);
        mb[r] = m_new == -INFINITY ? 0.0f : m_new; /* a row with nothing yet */
        alpha[r] = exp2f(m_run[mr][r] - mb[r]);
        m_run[mr][r] = m_new;
      }
      float rs[2] = {0.0f, 0.0f};
#pragma unroll
      for (int nb = 0; nb < NB; nb++) {
        float p0 = exp2f(fmaf(s[mr][nb][0], sl2, -mb[0])), p1 = exp2f(fmaf(s[mr][nb][1], sl2, -mb[0]));
        float p2 = exp2f(fmaf(s[mr][nb][2], sl2, -mb[1])), p3 = exp2f(fmaf(s[mr][nb][3], sl2, -mb[1]));
        rs[0] += p0 + p1;
        rs[1] += p2 + p3;
        pf[mr][nb / 2][(nb & 1) * 2] = pack_bf16(p0, p1);
        pf[mr][nb / 2][(nb & 1) * 2 + 1] = pack_bf16(p2, p3);
      }
#pragma unroll
      for (int r = 0; r < 2; r++) l_run[mr][r] = l_run[mr][r] * alpha[r] + rs[r];
#pragma unroll
      for (int nb = 0; nb < DB; nb++) {
        o[mr][nb][0] *= alpha[0];
        o[mr][nb][1] *= alpha[0];
        o[mr][nb][2] *= alpha[1];
        o[mr][nb][3] *= alpha[1];
      }
    }
#pragma unroll
    for (int kk = 0; kk < KBT; kk++) {
      uint32_t a[MR][4];
#pragma unroll
      for (int mr = 0; mr < MR; mr++)
#pragma unroll
        for (int e = 0; e < 4; e++) a[mr][e] = pf[mr][kk][e];
      mma_trans_b_mr<LDH, DB, MR>(o, a, Vt + kk * 16 * LDH, lane);
    }
  }

#pragma unroll
  for (int mr = 0; mr < MR; mr++) {
#pragma unroll
    for (int r = 0; r < 2; r++) {
      l_run[mr][r] += __shfl_xor_sync(0xffffffffu, l_run[mr][r], 1);
      l_run[mr][r] += __shfl_xor_sync(0xffffffffu, l_run[mr][r], 2);
    }
#pragma unroll
    for (int r = 0; r < 2; r++) {
      int qi = qi0[mr] + 8 * r;
      if (qi >= T) continue;
      float inv = 1.0f / l_run[mr][r];
      bf16 *orow = out + ((size_t)b * T + qi) * QD + (size_t)h * HD + 2 * tq;
#pragma unroll
      for (int nb = 0; nb < DB; nb++)
        *(uint32_t *)(orow + nb * 8) =
            pack_bf16(o[mr][nb][2 * r] * inv, o[mr][nb][2 * r + 1] * inv);
      if (tq == 0) lse[((size_t)b * NH + h) * T + qi] = (m_run[mr][r] + log2f(l_run[mr][r])) * LN2;
    }
  }
}

/* ---- backward: dQ (and delta) -------------------------------------------- */

/* dQ: Q and dO (MR tiles each), K x 2, V x 2, then the block's delta */
template <int HD, int MR>
struct dq_smem {
  static constexpr int TS = TILE * (HD + 8);
  static constexpr size_t rows = (2 * MR + 4) * TS * sizeof(bf16);
  static constexpr size_t bytes = rows + MR * TILE * sizeof(float);
};

/* grid (B*NH, query blocks of MR * 64 rows, m-tiles laid out as in the
 * forward): dQ of the block's queries of one head, and their delta =
 * rowsum(dO * O) into delta (B, NH, T). With one m-tile a warp and HD up
 * to 64 the warp keeps its Q and dO fragments in registers; with two it
 * reads them from shared memory at each use, and each K and V fragment
 * feeds both m-tiles. */
template <int HD, int MR>
static __global__ void __launch_bounds__(THREADS, MR == 1 ? (HD <= 64 ? 3 : 1) : 2)
    attention_dq_kernel(bf16 *dq, float *delta, const bf16 *q, const bf16 *k, const bf16 *v,
                        size_t ld, const bf16 *out, const bf16 *dout, const float *lse,
                        const float *rcos, const float *rsin, int T, int NH, int NKV, float sl2,
                        float scale) {
  constexpr int LDH = HD + 8, KB = HD / 16, DB = HD / 8, TS = dq_smem<HD, MR>::TS;
  constexpr int BM = MR * TILE;
  constexpr bool AREGS = HD <= 64 && MR == 1;
  extern __shared__ __align__(16) unsigned char smem[];
  bf16 *Qs = (bf16 *)smem, *dOs = Qs + MR * TS, *Ks = dOs + MR * TS, *Vs = Ks + 2 * TS;
  float *dl_s = (float *)(smem + dq_smem<HD, MR>::rows);
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, tq = lane % 4;
  const int qb = (int)(gridDim.y - 1 - blockIdx.y), bh = (int)blockIdx.x;
  const int b = bh / NH, h = bh % NH, kvh = h / (NH / NKV), q0 = qb * BM;
  const int nkt = min((T + TILE - 1) / TILE, (q0 + BM - 1) / TILE + 1);
  const size_t QD = (size_t)NH * HD;
  const bf16 *kb = k + (size_t)b * T * ld + (size_t)kvh * HD;
  const bf16 *vb = v + (size_t)b * T * ld + (size_t)kvh * HD;
  /* row q0 of head h: in q and dq (rows ld apart), in out and dout (QD) */
  const size_t qoff = ((size_t)b * T + q0) * ld + (size_t)h * HD;
  const size_t ooff = ((size_t)b * T + q0) * QD + (size_t)h * HD;
  const float *lse_bh = lse + ((size_t)b * NH + h) * T;
  float *delta_bh = delta + ((size_t)b * NH + h) * T;

  tile_async<HD, BM>(Qs, q + qoff, ld, min(BM, T - q0));
  tile_async<HD, BM>(dOs, dout + ooff, QD, min(BM, T - q0));
  tile_async<HD>(Ks, kb, ld, min(TILE, T));
  tile_async<HD>(Vs, vb, ld, min(TILE, T));
  cp_async_commit();

  /* delta of the warp's rows while the tiles load */
#pragma unroll
  for (int mr = 0; mr < MR; mr++)
    warp_delta<HD>(dl_s, delta_bh, out, dout, ooff, QD, q0, warp * 16 + mr * TILE, T, lane);
  __syncwarp();
  int qi0[MR];
  float dl[MR][2], ls[MR][2]; /* delta and lse * log2(e) of rows g, g + 8 */
#pragma unroll
  for (int mr = 0; mr < MR; mr++) {
    qi0[mr] = q0 + warp * 16 + mr * TILE + g;
#pragma unroll
    for (int r = 0; r < 2; r++) {
      dl[mr][r] = dl_s[warp * 16 + mr * TILE + g + 8 * r];
      ls[mr][r] = qi0[mr] + 8 * r < T ? lse_bh[qi0[mr] + 8 * r] * LOG2E : INFINITY;
    }
  }

  uint32_t qf[AREGS ? KB : 1][4], df[AREGS ? KB : 1][4];
  float acc[MR][DB][4];
#pragma unroll
  for (int mr = 0; mr < MR; mr++)
#pragma unroll
    for (int nb = 0; nb < DB; nb++) acc[mr][nb][0] = acc[mr][nb][1] = acc[mr][nb][2] = acc[mr][nb][3] = 0.0f;

  for (int kt = 0; kt < nkt; kt++) {
    cp_async_wait_all();
    __syncthreads();
    if (kt + 1 < nkt) {
      int k0 = (kt + 1) * TILE, nb_ = (kt + 1) & 1;
      tile_async<HD>(Ks + nb_ * TS, kb + (size_t)k0 * ld, ld, min(TILE, T - k0));
      tile_async<HD>(Vs + nb_ * TS, vb + (size_t)k0 * ld, ld, min(TILE, T - k0));
    }
    cp_async_commit();
    if constexpr (AREGS) {
      if (kt == 0) {
#pragma unroll
        for (int kk = 0; kk < KB; kk++) {
          ldsm_x4(qf[kk], smem_addr(Qs + warp * 16 * LDH + kk * 16 + a_lane<LDH>(lane)));
          ldsm_x4(df[kk], smem_addr(dOs + warp * 16 * LDH + kk * 16 + a_lane<LDH>(lane)));
        }
      }
    }
    const bf16 *Kt = Ks + (kt & 1) * TS, *Vt = Vs + (kt & 1) * TS;

    float s[MR][NB][4], dp[MR][NB][4];
#pragma unroll
    for (int mr = 0; mr < MR; mr++)
#pragma unroll
      for (int nb = 0; nb < NB; nb++)
#pragma unroll
        for (int e = 0; e < 4; e++) s[mr][nb][e] = dp[mr][nb][e] = 0.0f;
#pragma unroll
    for (int kk = 0; kk < KB; kk++) {
      uint32_t a[MR][4];
      a_operands<LDH, MR, AREGS>(a, qf[AREGS ? kk : 0], Qs, kk, warp, lane);
      mma_row_b_mr<LDH, NB, MR>(s, a, Kt + kk * 16, lane); /* S = Q K^T */
      a_operands<LDH, MR, AREGS>(a, df[AREGS ? kk : 0], dOs, kk, warp, lane);
      mma_row_b_mr<LDH, NB, MR>(dp, a, Vt + kk * 16, lane); /* dP = dO V^T */
    }
    const bool mask = kt * TILE + TILE - 1 > q0;
#pragma unroll
    for (int mr = 0; mr < MR; mr++)
#pragma unroll
      for (int nb = 0; nb < NB; nb++)
#pragma unroll
        for (int e = 0; e < 4; e++) {
          int r = e >> 1;
          float p = exp2f(fmaf(s[mr][nb][e], sl2, -ls[mr][r]));
          if (mask) {
            int key = kt * TILE + nb * 8 + 2 * tq + (e & 1);
            if (key > qi0[mr] + 8 * r || key >= T) p = 0.0f;
          }
          s[mr][nb][e] = p * (dp[mr][nb][e] - dl[mr][r]); /* dS, unscaled */
        }
#pragma unroll
    for (int kk = 0; kk < KBT; kk++) { /* dQ += dS K */
      uint32_t a[MR][4];
#pragma unroll
      for (int mr = 0; mr < MR; mr++) c_to_a(a[mr], s[mr], kk);
      mma_trans_b_mr<LDH, DB, MR>(acc, a, Kt + kk * 16 * LDH, lane);
    }
  }
#pragma unroll
  for (int mr = 0; mr < MR; mr++) {
    const int rb = warp * 16 + mr * TILE;
    store_rows<HD>(dq + qoff + (size_t)rb * ld, ld, q0 + rb, T, acc[mr], scale, rcos, rsin, lane);
  }
}

/* ---- backward: dK, dV ---------------------------------------------------- */

template <int HD>
struct bwd_smem {
  static constexpr int TS = TILE * (HD + 8);
  /* six tiles (K, V, Q x 2, dO x 2), then per-row floats (lse x 2,
   * delta x 2) */
  static constexpr size_t rows = 6 * TS * sizeof(bf16);
  static constexpr size_t bytes = rows + 4 * TILE * sizeof(float);
};

/* grid (B*NKV, key tiles): dK, dV of 64 keys of one kv head, the heaviest
 * (first) key tiles first. The warp's 16 keys are the rows of its
 * transposed scores S^T = K Q^T, so P^T and dS^T come out of the
 * accumulators as the A operands of dV += P^T dO and dK += dS^T Q.
 * BPS 2: up to HD 64 the warp keeps its K and V fragments in registers
 * (2 blocks an SM); BPS 3: it reads them from shared memory at each use,
 * with the registers capped so that 3 blocks share an SM. */
template <int HD, int BPS>
static __global__ void __launch_bounds__(THREADS, HD <= 64 ? BPS : 1)
    attention_dkdv_kernel(bf16 *dk, bf16 *dv, const bf16 *q, const bf16 *k, const bf16 *v,
                          size_t ld, const bf16 *dout, const float *lse, const float *delta,
                          const float *rcos, const float *rsin, int T, int NH, int NKV, float sl2,
                          float scale) {
  constexpr int LDH = HD + 8, KB = HD / 16, DB = HD / 8, TS = bwd_smem<HD>::TS;
  constexpr bool AREGS = HD <= 64 && BPS == 2;
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
    dkdv_probs(s, dp, ls, dl, q0, key0, T, mask, sl2, tq); /* P^T, dS^T */
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

/* m-tiles a warp owns (1 or 2) and dK/dV blocks an SM (2 or 3): the given
 * choice, or the default measured fastest on the H200 at the 19m and 88m
 * shapes (bench/RESULTS.md, bench/attention_bench): two m-tiles in the
 * forward (6% faster than one), one in the dQ pass (two: 2% slower), 2
 * dK/dV blocks (3: the same). Two m-tiles only up to HD 64, where the
 * fragments fit in the registers. */
static int fwd_mtiles(int HD, int want) { return HD > 64 ? 1 : want > 0 ? want : 2; }
static int dq_mtiles(int HD, int want) { return HD > 64 ? 1 : want > 0 ? want : 1; }
static int dkdv_blocks(int HD, int want) { return HD > 64 ? 2 : want > 0 ? want : 2; }

template <int HD, int MR>
static bool forward_hd(bf16 *out, float *lse, const bf16 *q, const bf16 *k, const bf16 *v,
                       size_t ld, int B, int T, int NH, int NKV, cudaStream_t s) {
  size_t smem = fwd_smem<HD, MR>::bytes;
  if (!set_smem(attention_forward_kernel<HD, MR>, smem)) return false;
  dim3 grid((unsigned)(B * NH), (unsigned)((T + MR * TILE - 1) / (MR * TILE)));
  attention_forward_kernel<HD, MR><<<grid, THREADS, smem, s>>>(out, lse, q, k, v, ld, T, NH, NKV,
                                                               LOG2E / sqrtf((float)HD));
  return NC_LAUNCHED();
}

template <int HD, int MR, int BPS>
static bool backward_hd(bf16 *dq, bf16 *dk, bf16 *dv, float *delta, const bf16 *dout,
                        const bf16 *out, const float *lse, const bf16 *q, const bf16 *k,
                        const bf16 *v, size_t ld, int B, int T, int NH, int NKV,
                        const float *rcos, const float *rsin, cudaStream_t s) {
  size_t dq_bytes = dq_smem<HD, MR>::bytes, kv_bytes = bwd_smem<HD>::bytes;
  if (!set_smem(attention_dq_kernel<HD, MR>, dq_bytes) ||
      !set_smem(attention_dkdv_kernel<HD, BPS>, kv_bytes))
    return false;
  float scale = 1.0f / sqrtf((float)HD), sl2 = scale * LOG2E;
  unsigned tiles = (unsigned)((T + TILE - 1) / TILE);
  unsigned qblocks = (unsigned)((T + MR * TILE - 1) / (MR * TILE));
  attention_dq_kernel<HD, MR><<<dim3((unsigned)(B * NH), qblocks), THREADS, dq_bytes, s>>>(
      dq, delta, q, k, v, ld, out, dout, lse, rcos, rsin, T, NH, NKV, sl2, scale);
  if (!NC_LAUNCHED()) return false;
  attention_dkdv_kernel<HD, BPS><<<dim3((unsigned)(B * NKV), tiles), THREADS, kv_bytes, s>>>(
      dk, dv, q, k, v, ld, dout, lse, delta, rcos, rsin, T, NH, NKV, sl2, scale);
  return NC_LAUNCHED();
}

/* The warpgroup kernels: asked for (engine 2), or by default where they
 * can run (head_dim 64, compute capability 9.0). */
static bool wgmma_chosen(int HD, const nn_cuda_attention_tiles *t) {
  int engine = t ? t->engine : 0;
  return engine == 2 || (engine == 0 && nc_attention_wgmma_usable(HD));
}
/* one warpgroup a block unless two are asked for: one measured faster in
 * all three kernels (bench/RESULTS.md) */
static int groups(int want) { return want == 2 ? 2 : 1; }

/* t NULL: the defaults */
static bool forward_tiles(bf16 *out, float *lse, const bf16 *q, const bf16 *k, const bf16 *v,
                          size_t ld, int B, int T, int NH, int NKV, int HD,
                          const nn_cuda_attention_tiles *t, cudaStream_t s) {
  if (wgmma_chosen(HD, t))
    return nc_attention_wgmma_forward(out, lse, q, k, v, ld, B, T, NH, NKV,
                                      groups(t ? t->fwd_groups : 0), s);
#define FWD(hd, mr) forward_hd<hd, mr>(out, lse, q, k, v, ld, B, T, NH, NKV, s)
  bool two = fwd_mtiles(HD, t ? t->fwd_mtiles : 0) == 2;
  switch (HD) {
    case 16: return two ? FWD(16, 2) : FWD(16, 1);
    case 32: return two ? FWD(32, 2) : FWD(32, 1);
    case 64: return two ? FWD(64, 2) : FWD(64, 1);
    case 128: return FWD(128, 1);
  }
#undef FWD
  DG_UNREACHABLE();
}

static bool backward_tiles(bf16 *dq, bf16 *dk, bf16 *dv, float *delta, const bf16 *dout,
                           const bf16 *out, const float *lse, const bf16 *q, const bf16 *k,
                           const bf16 *v, size_t ld, int B, int T, int NH, int NKV, int HD,
                           const float *rope_cos, const float *rope_sin,
                           const nn_cuda_attention_tiles *t, cudaStream_t s) {
  if (wgmma_chosen(HD, t))
    return nc_attention_wgmma_backward(dq, dk, dv, delta, dout, out, lse, q, k, v, ld, B, T, NH,
                                       NKV, rope_cos, rope_sin, groups(t ? t->dq_groups : 0),
                                       groups(t ? t->dkdv_groups : 0),
                                       t && t->dkdv_blocks == 2 ? 2 : 3, s);
#define BWD(hd, mr, bps)                                                                     \
  backward_hd<hd, mr, bps>(dq, dk, dv, delta, dout, out, lse, q, k, v, ld, B, T, NH, NKV,   \
                           rope_cos, rope_sin, s)
  bool two = dq_mtiles(HD, t ? t->dq_mtiles : 0) == 2;
  bool three = dkdv_blocks(HD, t ? t->dkdv_blocks : 0) == 3;
  switch (HD) {
    case 16: return two ? (three ? BWD(16, 2, 3) : BWD(16, 2, 2)) : (three ? BWD(16, 1, 3) : BWD(16, 1, 2));
    case 32: return two ? (three ? BWD(32, 2, 3) : BWD(32, 2, 2)) : (three ? BWD(32, 1, 3) : BWD(32, 1, 2));
    case 64: return two ? (three ? BWD(64, 2, 3) : BWD(64, 2, 2)) : (three ? BWD(64, 1, 3) : BWD(64, 1, 2));
    case 128: return BWD(128, 1, 2);
  }
#undef BWD
  DG_UNREACHABLE();
}

bool nc_attention_forward(bf16 *out, float *lse, const bf16 *q, const bf16 *k, const bf16 *v,
                          size_t ld, int B, int T, int NH, int NKV, int HD, cudaStream_t s) {
  return forward_tiles(out, lse, q, k, v, ld, B, T, NH, NKV, HD, NULL, s);
}

bool nc_attention_backward(bf16 *dq, bf16 *dk, bf16 *dv, float *delta, const bf16 *dout,
                           const bf16 *out, const float *lse, const bf16 *q, const bf16 *k,
                           const bf16 *v, size_t ld, int B, int T, int NH, int NKV, int HD,
                           const float *rope_cos, const float *rope_sin, cudaStream_t s) {
  return backward_tiles(dq, dk, dv, delta, dout, out, lse, q, k, v, ld, B, T, NH, NKV, HD,
                        rope_cos, rope_sin, NULL, s);
}

/* ---- the kernels alone, on host arrays (for checks) ---------------------- */

extern "C" bool nn_cuda_attention_wgmma(int head_dim) {
  return nc_attention_wgmma_usable(head_dim);
}

static bool shape_ok(int B, int T, int NH, int NKV, int HD, const nn_cuda_attention_tiles *t,
                     const char *what, dg_status *st) {
  if (!nc_attention_supported(HD) || B < 1 || T < 1 || NKV < 1 || NH % NKV != 0 ||
      (double)B * NH > 65535 || (double)B * T * NH * HD > 1e9)
    return dg_fail(st, DG_ERR_INVALID, "%s: unsupported shape B %d T %d heads %d/%d head_dim %d",
                   what, B, T, NH, NKV, HD);
  if (t && (t->fwd_mtiles < 0 || t->fwd_mtiles > 2 || t->dq_mtiles < 0 || t->dq_mtiles > 2))
    return dg_fail(st, DG_ERR_INVALID, "%s: m-tiles a warp %d/%d (0, 1 or 2)", what,
                   t->fwd_mtiles, t->dq_mtiles);
  if (t && t->dkdv_blocks != 0 && t->dkdv_blocks != 2 && t->dkdv_blocks != 3)
    return dg_fail(st, DG_ERR_INVALID, "%s: dK/dV blocks an SM %d (0, 2 or 3)", what,
                   t->dkdv_blocks);
  if (t && (t->engine < 0 || t->engine > 2))
    return dg_fail(st, DG_ERR_INVALID, "%s: engine %d (0 default, 1 mma.sync, 2 wgmma)", what,
                   t->engine);
  if (t && (t->fwd_groups < 0 || t->fwd_groups > 2 || t->dq_groups < 0 || t->dq_groups > 2 ||
            t->dkdv_groups < 0 || t->dkdv_groups > 2))
    return dg_fail(st, DG_ERR_INVALID, "%s: warpgroups a block %d/%d/%d (0, 1 or 2)", what,
                   t->fwd_groups, t->dq_groups, t->dkdv_groups);
  if (t && t->engine == 2 && !nc_attention_wgmma_usable(HD))
    return dg_fail(st, DG_ERR_INVALID,
                   "%s: the wgmma kernels need head_dim 64 on a compute capability 9.0 device "
                   "(head_dim %d)",
                   what, HD);
  return true;
}

extern "C" bool nn_cuda_attention_run(const float *q, const float *k, const float *v,
                                      const float *dout, int B, int T, int NH, int NKV, int HD,
                                      const float *rope_cos, const float *rope_sin,
                                      const nn_cuda_attention_tiles *tiles, float *out,
                                      float *lse, float *dq, float *dk, float *dv,
                                      dg_status *st) {
  if (!shape_ok(B, T, NH, NKV, HD, tiles, "attention run", st)) return false;
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
  /* outputs poisoned with NaN (all-ones bytes), so a row a kernel leaves
   * unwritten fails the comparison */
  ok = ok && NC_CUDA(cudaMemset(go, 0xff, sizeof(bf16) * (nq + nqkv))) &&
       NC_CUDA(cudaMemset(glse, 0xff, sizeof(float) * 2 * nr));
  ok = ok && forward_tiles(go, glse, gqkv, gqkv + QD, gqkv + QD + KVD, ld, B, T, NH, NKV, HD,
                           tiles, s);
  if (ok && dout)
    ok = backward_tiles(gdqkv, gdqkv + QD, gdqkv + QD + KVD, gdelta, gdo, go, glse, gqkv,
                        gqkv + QD, gqkv + QD + KVD, ld, B, T, NH, NKV, HD, rope ? gcos : NULL,
                        rope ? gsin : NULL, tiles, s);
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

/* ---- timing (bench/attention_bench) ------------------------------------------ */

extern "C" bool nn_cuda_attention_time(int B, int T, int NH, int NKV, int HD,
                                       const nn_cuda_attention_tiles *tiles, int reps,
                                       double *fwd_ms, double *bwd_ms, dg_status *st) {
  if (!shape_ok(B, T, NH, NKV, HD, tiles, "attention timing", st)) return false;
  if (reps < 1 || reps > 1000)
    return dg_fail(st, DG_ERR_INVALID, "attention timing: reps %d out of range", reps);
  size_t N = (size_t)B * T, QD = (size_t)NH * HD, KVD = (size_t)NKV * HD, ld = QD + 2 * KVD;
  size_t nqkv = N * ld, nq = N * QD, nr = (size_t)B * NH * T, nrope = (size_t)T * (HD / 2);
  bf16 *qkv = NULL, *dqkv = NULL, *o = NULL, *dout = NULL;
  float *lse = NULL, *delta = NULL, *rope = NULL;
  cudaEvent_t ev[3] = {NULL, NULL, NULL};
  float *ms = (float *)calloc(2 * (size_t)reps, sizeof(float));
  cudaStream_t s = 0;
  bool ok = ms && NC_CUDA(cudaMalloc(&qkv, sizeof(bf16) * nqkv)) &&
            NC_CUDA(cudaMalloc(&dqkv, sizeof(bf16) * nqkv)) &&
            NC_CUDA(cudaMalloc(&o, sizeof(bf16) * nq)) &&
            NC_CUDA(cudaMalloc(&dout, sizeof(bf16) * nq)) &&
            NC_CUDA(cudaMalloc(&lse, sizeof(float) * nr)) &&
            NC_CUDA(cudaMalloc(&delta, sizeof(float) * nr)) &&
            NC_CUDA(cudaMalloc(&rope, sizeof(float) * 2 * nrope));
  for (int i = 0; ok && i < 3; i++) ok = NC_CUDA(cudaEventCreate(&ev[i]));
  ok = ok && nc_fill_uniform(qkv, nqkv, 1u, 2.0f, s) && nc_fill_uniform(dout, nq, 2u, 1.0f, s) &&
       NC_CUDA(cudaMemsetAsync(rope, 0, sizeof(float) * 2 * nrope, s));
  const float *rcos = rope, *rsin = rope + nrope;
  for (int i = 0; ok && i < reps + 2; i++) { /* two warm-up runs */
    ok = NC_CUDA(cudaEventRecord(ev[0], s)) &&
         forward_tiles(o, lse, qkv, qkv + QD, qkv + QD + KVD, ld, B, T, NH, NKV, HD, tiles, s) &&
         NC_CUDA(cudaEventRecord(ev[1], s)) &&
         backward_tiles(dqkv, dqkv + QD, dqkv + QD + KVD, delta, dout, o, lse, qkv, qkv + QD,
                        qkv + QD + KVD, ld, B, T, NH, NKV, HD, rcos, rsin, tiles, s) &&
         NC_CUDA(cudaEventRecord(ev[2], s)) && NC_CUDA(cudaEventSynchronize(ev[2]));
    if (ok && i >= 2)
      ok = NC_CUDA(cudaEventElapsedTime(&ms[i - 2], ev[0], ev[1])) &&
           NC_CUDA(cudaEventElapsedTime(&ms[reps + i - 2], ev[1], ev[2]));
  }
  if (ok) {
    qsort(ms, (size_t)reps, sizeof(float), nc_cmp_float);
    qsort(ms + reps, (size_t)reps, sizeof(float), nc_cmp_float);
    *fwd_ms = ms[reps / 2];
    *bwd_ms = ms[reps + reps / 2];
  }
  for (int i = 0; i < 3; i++)
    if (ev[i]) cudaEventDestroy(ev[i]);
  cudaFree(qkv);
  cudaFree(dqkv);
  cudaFree(o);
  cudaFree(dout);
  cudaFree(lse);
  cudaFree(delta);
  cudaFree(rope);
  free(ms);
  if (!ms) return dg_fail(st, DG_ERR_RUNTIME, "attention timing: out of host memory");
  return nc_error_take(st, "attention timing");
}
