/* attention.cu: causal grouped-query attention, tiled in the manner of
 * FlashAttention-2, so no T x T matrix is ever stored: the forward keeps
 * one 64 x 64 tile of scores per block in shared memory, a running row
 * max and sum, and the row's log-sum-exp for the backward.
 *
 * Tensor cores through WMMA (bf16 16x16x16, fp32 accumulation). Each block
 * has 4 warps; a warp owns 16 rows of the block's 64-row tile. Scores go
 * through shared memory for the softmax (WMMA fragments have no public
 * element layout), the output accumulator too, so every step is plain and
 * checkable.
 *
 * Backward without atomics, so it is deterministic: one kernel per key
 * tile for dK and dV (looping over the query heads of its group and the
 * query tiles at or after it), one per query tile for dQ (looping over the
 * key tiles up to it). This recomputes QK^T and dO V^T once more than an
 * atomic version would; in return there is no float atomic anywhere.
 *
 * Assumes HD in {16, 32, 64, 128} (nc_attention_supported); scale
 * 1/sqrt(HD); query head h reads kv head h / (NH/NKV) as the C reference.
 * q (B, T, NH, HD), k, v (B, T, NKV, HD), out (B, T, NH, HD) bf16; lse and
 * delta (B, NH, T) fp32.
 */
#include <math.h>
#include <mma.h>

#include "common.cuh"

using namespace nvcuda;

enum { TILE = 64, WARPS = 4, THREADS = WARPS * 32 };
enum { LDS = TILE + 4, LDP = TILE + 8 }; /* fp32 and bf16 rows of a 64-wide tile */

typedef wmma::fragment<wmma::matrix_a, 16, 16, 16, bf16, wmma::row_major> frag_a;
typedef wmma::fragment<wmma::matrix_b, 16, 16, 16, bf16, wmma::row_major> frag_b_row;
typedef wmma::fragment<wmma::matrix_b, 16, 16, 16, bf16, wmma::col_major> frag_b_col;
typedef wmma::fragment<wmma::accumulator, 16, 16, 16, float> frag_c;

bool nc_attention_supported(int HD) { return HD == 16 || HD == 32 || HD == 64 || HD == 128; }

static constexpr size_t align128(size_t x) { return (x + 127) / 128 * 128; }

/* 64 rows of HD bf16 from global rows `stride` elements apart (nvalid of
 * them real, the rest zero) into shared rows HD + 8 apart, 16 bytes at a
 * time. */
template <int HD>
static __device__ void load_tile(bf16 *dst, const bf16 *src, int stride, int nvalid) {
  constexpr int VPR = HD / 8, LDH = HD + 8;
  for (int i = threadIdx.x; i < TILE * VPR; i += THREADS) {
    int r = i / VPR, c = (i % VPR) * 8;
    uint4 val = make_uint4(0u, 0u, 0u, 0u);
    if (r < nvalid) val = *(const uint4 *)(src + (size_t)r * stride + c);
    *(uint4 *)(dst + r * LDH + c) = val;
  }
}

/* Per-row values (lse, delta) of a 64-row tile; 0 past T. */
static __device__ void load_rows(float *dst, const float *src, int nvalid) {
  for (int i = threadIdx.x; i < TILE; i += THREADS) dst[i] = i < nvalid ? src[i] : 0.0f;
}

/* Scores of one warp: out (16 x 64, fp32, ld LDS) = A (16 x HD, shared,
 * ld HD + 8) . Bt^T where Bt holds 64 rows of HD (shared, ld HD + 8). */
template <int HD>
static __device__ void warp_scores(float *out, const bf16 *a, const bf16 *bt) {
  constexpr int LDH = HD + 8;
  for (int nc = 0; nc < TILE / 16; nc++) {
    frag_c acc;
    wmma::fill_fragment(acc, 0.0f);
#pragma unroll
    for (int kc = 0; kc < HD / 16; kc++) {
      frag_a fa;
      frag_b_col fb;
      wmma::load_matrix_sync(fa, a + kc * 16, LDH);
      wmma::load_matrix_sync(fb, bt + nc * 16 * LDH + kc * 16, LDH);
      wmma::mma_sync(acc, fa, fb, acc);
    }
    wmma::store_matrix_sync(out + nc * 16, acc, LDS, wmma::mem_row_major);
  }
}

/* acc[dc] += A (16 x 64 bf16, ld LDP) . Bm (64 x HD, shared, ld HD + 8). */
template <int HD>
static __device__ void warp_accumulate(frag_c *acc, const bf16 *a, const bf16 *bm) {
  constexpr int LDH = HD + 8;
#pragma unroll
  for (int dc = 0; dc < HD / 16; dc++)
    for (int kc = 0; kc < TILE / 16; kc++) {
      frag_a fa;
      frag_b_row fb;
      wmma::load_matrix_sync(fa, a + kc * 16, LDP);
      wmma::load_matrix_sync(fb, bm + kc * 16 * LDH + dc * 16, LDH);
      wmma::mma_sync(acc[dc], fa, fb, acc[dc]);
    }
}

/* Writes a warp's 16 x HD accumulator, times mul, to global rows (row0 +
 * i < T) through the staging area (16 x (HD + 4) fp32). */
template <int HD>
static __device__ void warp_store_rows(bf16 *dst, int stride, int row0, int T, frag_c *acc,
                                       float *stage, float mul) {
  constexpr int LDO = HD + 4;
  int lane = threadIdx.x % 32;
#pragma unroll
  for (int dc = 0; dc < HD / 16; dc++)
    wmma::store_matrix_sync(stage + dc * 16, acc[dc], LDO, wmma::mem_row_major);
  __syncwarp();
  for (int i = lane; i < 16 * HD; i += 32) {
    int r = i / HD, d = i % HD;
    if (row0 + r < T) dst[(size_t)r * stride + d] = __float2bfloat16(stage[r * LDO + d] * mul);
  }
  __syncwarp();
}

/* ---- forward ------------------------------------------------------------- */

template <int HD>
struct fwd_layout {
  static constexpr size_t LDH = HD + 8, LDO = HD + 4;
  static constexpr size_t q = 0, k = q + align128(TILE * LDH * 2), v = k + align128(TILE * LDH * 2);
  static constexpr size_t s = v + align128(TILE * LDH * 2);
  static constexpr size_t p = s + align128(WARPS * 16 * LDS * 4);
  static constexpr size_t o = p + align128(WARPS * 16 * LDP * 2);
  static constexpr size_t bytes = o + align128(WARPS * 16 * LDO * 4);
};

/* grid (query tiles, B*NH). */
template <int HD>
static __global__ void __launch_bounds__(THREADS)
    attention_forward_kernel(bf16 *out, float *lse, const bf16 *q, const bf16 *k, const bf16 *v,
                             int T, int NH, int NKV, float scale) {
  typedef fwd_layout<HD> Ly;
  constexpr int LDH = HD + 8, LDO = HD + 4;
  extern __shared__ __align__(128) unsigned char smem[];
  bf16 *Qs = (bf16 *)(smem + Ly::q), *Ks = (bf16 *)(smem + Ly::k), *Vs = (bf16 *)(smem + Ly::v);
  int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  float *Sw = (float *)(smem + Ly::s) + warp * 16 * LDS;
  bf16 *Pw = (bf16 *)(smem + Ly::p) + warp * 16 * LDP;
  float *Ow = (float *)(smem + Ly::o) + warp * 16 * LDO;

  int qt = blockIdx.x, b = blockIdx.y / NH, h = blockIdx.y % NH, kvh = h / (NH / NKV);
  int QD = NH * HD, KVD = NKV * HD, q0 = qt * TILE;
  load_tile<HD>(Qs, q + ((size_t)b * T + q0) * QD + (size_t)h * HD, QD, min(TILE, T - q0));
  for (int i = lane; i < 16 * LDO; i += 32) Ow[i] = 0.0f;
  /* lanes 2r and 2r+1 own row r of the warp's 16: its running max and sum */
  int r = lane / 2, par = lane % 2, qrow = q0 + warp * 16 + r;
  float m_run = -INFINITY, l_run = 0.0f;

  for (int kt = 0; kt <= qt; kt++) {
    int k0 = kt * TILE;
    __syncthreads(); /* everyone is done with the previous K, V tiles */
    load_tile<HD>(Ks, k + ((size_t)b * T + k0) * KVD + (size_t)kvh * HD, KVD, min(TILE, T - k0));
    load_tile<HD>(Vs, v + ((size_t)b * T + k0) * KVD + (size_t)kvh * HD, KVD, min(TILE, T - k0));
    __syncthreads();
    warp_scores<HD>(Sw, Qs + warp * 16 * LDH, Ks);
    __syncwarp();

    float *srow = Sw + r * LDS;
    bool diag = kt == qt;
    float mx = -INFINITY;
    for (int j = par; j < TILE; j += 2) {
      float sv = srow[j] * scale;
      if (diag && (k0 + j > qrow || k0 + j >= T)) sv = -INFINITY;
      srow[j] = sv;
      mx = fmaxf(mx, sv);
    }
    mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
    /* column k0 + 0 <= qrow is never masked in the first tile, so m_new is
     * finite from the first tile on */
    float m_new = fmaxf(m_run, mx);
    float alpha = __expf(m_run - m_new);
    float sum = 0.0f;
    bf16 *prow = Pw + r * LDP;
    for (int j = par; j < TILE; j += 2) {
      float p = __expf(srow[j] - m_new);
      prow[j] = __float2bfloat16(p);
      sum += p;
    }
    sum += __shfl_xor_sync(0xffffffffu, sum, 1);
    l_run = l_run * alpha + sum;
    m_run = m_new;
    float *orow = Ow + r * LDO;
    for (int j = par; j < HD; j += 2) orow[j] *= alpha;
    __syncwarp();

    frag_c acc[HD / 16];
#pragma unroll
    for (int dc = 0; dc < HD / 16; dc++)
      wmma::load_matrix_sync(acc[dc], Ow + dc * 16, LDO, wmma::mem_row_major);
    warp_accumulate<HD>(acc, Pw, Vs);
#pragma unroll
    for (int dc = 0; dc < HD / 16; dc++)
      wmma::store_matrix_sync(Ow + dc * 16, acc[dc], LDO, wmma::mem_row_major);
    __syncwarp();
  }
  if (qrow < T) {
    float inv = 1.0f / l_run;
    bf16 *og = out + ((size_t)b * T + qrow) * QD + (size_t)h * HD;
    for (int j = par; j < HD; j += 2) og[j] = __float2bfloat16(Ow[r * LDO + j] * inv);
    if (par == 0) lse[((size_t)b * NH + h) * T + qrow] = m_run + logf(l_run);
  }
}

/* ---- backward ------------------------------------------------------------ */

/* delta (B, NH, T) = rowsum(dout * out), one warp per (b, t, h). */
static __global__ void attention_delta_kernel(float *delta, const bf16 *dout, const bf16 *out,
                                              int B, int T, int NH, int HD) {
  size_t row = (size_t)blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32;
  int lane = threadIdx.x % 32;
  if (row >= (size_t)B * T * NH) return;
  const bf16 *d = dout + row * HD, *o = out + row * HD;
  float s = 0.0f;
  for (int i = lane; i < HD; i += 32) s += __bfloat162float(d[i]) * __bfloat162float(o[i]);
  s = nc_warp_sum(s);
  int h = (int)(row % (size_t)NH);
  size_t bt = row / (size_t)NH, b = bt / (size_t)T, t = bt % (size_t)T;
  if (lane == 0) delta[(b * NH + h) * T + t] = s;
}

template <int HD>
struct bwd_layout {
  static constexpr size_t LDH = HD + 8;
  static constexpr size_t tile = align128(TILE * LDH * 2);
  static constexpr size_t a = 0, b = a + tile, c = b + tile, d = c + tile; /* four 64 x HD tiles */
  static constexpr size_t rows = d + tile;                                /* lse, delta */
  static constexpr size_t s = rows + align128(2 * TILE * 4);
  /* per warp: scores and their gradient (fp32, adjacent: the staging area
   * for the output), then P and dS as bf16 */
  static constexpr size_t warp_f32 = 2 * 16 * LDS;
  static constexpr size_t pb = s + align128(WARPS * warp_f32 * 4);
  static constexpr size_t bytes = pb + align128(WARPS * 2 * 16 * LDP * 2);
  static_assert(16 * (HD + 4) <= warp_f32, "staging area");
};

/* grid (key tiles, B*NKV): dK, dV of 64 keys of one kv head. Warp w owns
 * keys k0 + 16w ... The scores are computed transposed (keys as rows). */
template <int HD>
static __global__ void __launch_bounds__(THREADS)
    attention_dkdv_kernel(bf16 *dk, bf16 *dv, const bf16 *q, const bf16 *k, const bf16 *v,
                          const bf16 *dout, const float *lse, const float *delta, int T, int NH,
                          int NKV, float scale) {
  typedef bwd_layout<HD> Ly;
  constexpr int LDH = HD + 8;
  extern __shared__ __align__(128) unsigned char smem[];
  bf16 *Ks = (bf16 *)(smem + Ly::a), *Vs = (bf16 *)(smem + Ly::b);
  bf16 *Qs = (bf16 *)(smem + Ly::c), *dOs = (bf16 *)(smem + Ly::d);
  float *lse_s = (float *)(smem + Ly::rows), *dl_s = lse_s + TILE;
  int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  float *St = (float *)(smem + Ly::s) + warp * Ly::warp_f32, *dPt = St + 16 * LDS;
  bf16 *Pb = (bf16 *)(smem + Ly::pb) + warp * 2 * 16 * LDP, *dSb = Pb + 16 * LDP;

  int kt = blockIdx.x, b = blockIdx.y / NKV, kvh = blockIdx.y % NKV, G = NH / NKV;
  int QD = NH * HD, KVD = NKV * HD, k0 = kt * TILE, ntiles = (T + TILE - 1) / TILE;
  load_tile<HD>(Ks, k + ((size_t)b * T + k0) * KVD + (size_t)kvh * HD, KVD, min(TILE, T - k0));
  load_tile<HD>(Vs, v + ((size_t)b * T + k0) * KVD + (size_t)kvh * HD, KVD, min(TILE, T - k0));
  frag_c dK[HD / 16], dV[HD / 16];
#pragma unroll
  for (int dc = 0; dc < HD / 16; dc++) {
    wmma::fill_fragment(dK[dc], 0.0f);
    wmma::fill_fragment(dV[dc], 0.0f);
  }
  for (int h = kvh * G; h < (kvh + 1) * G; h++)
    for (int qt = kt; qt < ntiles; qt++) {
      int q0 = qt * TILE, nq = min(TILE, T - q0);
      __syncthreads(); /* everyone is done with the previous Q, dO tiles */
      load_tile<HD>(Qs, q + ((size_t)b * T + q0) * QD + (size_t)h * HD, QD, nq);
      load_tile<HD>(dOs, dout + ((size_t)b * T + q0) * QD + (size_t)h * HD, QD, nq);
      load_rows(lse_s, lse + ((size_t)b * NH + h) * T + q0, nq);
      load_rows(dl_s, delta + ((size_t)b * NH + h) * T + q0, nq);
      __syncthreads();
      warp_scores<HD>(St, Ks + warp * 16 * LDH, Qs);   /* S^T: keys x queries */
      warp_scores<HD>(dPt, Vs + warp * 16 * LDH, dOs); /* dP^T = V dO^T */
      __syncwarp();
      for (int i = lane; i < 16 * TILE; i += 32) {
        int rr = i / TILE, j = i % TILE, kv = k0 + warp * 16 + rr, qi = q0 + j;
        float p = 0.0f, ds = 0.0f;
        if (qi < T && kv <= qi) {
          p = __expf(St[rr * LDS + j] * scale - lse_s[j]);
          ds = p * (dPt[rr * LDS + j] - dl_s[j]);
        }
        Pb[rr * LDP + j] = __float2bfloat16(p);
        dSb[rr * LDP + j] = __float2bfloat16(ds);
      }
      __syncwarp();
      warp_accumulate<HD>(dV, Pb, dOs); /* dV += P^T dO */
      warp_accumulate<HD>(dK, dSb, Qs); /* dK += dS^T Q (times scale below) */
    }
  int row0 = k0 + warp * 16;
  size_t off = ((size_t)b * T + row0) * KVD + (size_t)kvh * HD;
  warp_store_rows<HD>(dk + off, KVD, row0, T, dK, St, scale);
  warp_store_rows<HD>(dv + off, KVD, row0, T, dV, St, 1.0f);
}

/* grid (query tiles, B*NH): dQ of 64 queries of one head. */
template <int HD>
static __global__ void __launch_bounds__(THREADS)
    attention_dq_kernel(bf16 *dq, const bf16 *q, const bf16 *k, const bf16 *v, const bf16 *dout,
                        const float *lse, const float *delta, int T, int NH, int NKV, float scale) {
  typedef bwd_layout<HD> Ly;
  constexpr int LDH = HD + 8;
  extern __shared__ __align__(128) unsigned char smem[];
  bf16 *Qs = (bf16 *)(smem + Ly::a), *dOs = (bf16 *)(smem + Ly::b);
  bf16 *Ks = (bf16 *)(smem + Ly::c), *Vs = (bf16 *)(smem + Ly::d);
  float *lse_s = (float *)(smem + Ly::rows), *dl_s = lse_s + TILE;
  int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  float *S = (float *)(smem + Ly::s) + warp * Ly::warp_f32, *dP = S + 16 * LDS;
  bf16 *dSb = (bf16 *)(smem + Ly::pb) + warp * 2 * 16 * LDP;

  int qt = blockIdx.x, b = blockIdx.y / NH, h = blockIdx.y % NH, kvh = h / (NH / NKV);
  int QD = NH * HD, KVD = NKV * HD, q0 = qt * TILE, nq = min(TILE, T - q0);
  load_tile<HD>(Qs, q + ((size_t)b * T + q0) * QD + (size_t)h * HD, QD, nq);
  load_tile<HD>(dOs, dout + ((size_t)b * T + q0) * QD + (size_t)h * HD, QD, nq);
  load_rows(lse_s, lse + ((size_t)b * NH + h) * T + q0, nq);
  load_rows(dl_s, delta + ((size_t)b * NH + h) * T + q0, nq);
  frag_c dQ[HD / 16];
#pragma unroll
  for (int dc = 0; dc < HD / 16; dc++) wmma::fill_fragment(dQ[dc], 0.0f);
  for (int kt = 0; kt <= qt; kt++) {
    int k0 = kt * TILE;
    __syncthreads();
    load_tile<HD>(Ks, k + ((size_t)b * T + k0) * KVD + (size_t)kvh * HD, KVD, min(TILE, T - k0));
    load_tile<HD>(Vs, v + ((size_t)b * T + k0) * KVD + (size_t)kvh * HD, KVD, min(TILE, T - k0));
    __syncthreads();
    warp_scores<HD>(S, Qs + warp * 16 * LDH, Ks);
    warp_scores<HD>(dP, dOs + warp * 16 * LDH, Vs);
    __syncwarp();
    for (int i = lane; i < 16 * TILE; i += 32) {
      int rr = i / TILE, j = i % TILE, qr = warp * 16 + rr, qi = q0 + qr, kv = k0 + j;
      float ds = 0.0f;
      if (qi < T && kv <= qi) {
        float p = __expf(S[rr * LDS + j] * scale - lse_s[qr]);
        ds = p * (dP[rr * LDS + j] - dl_s[qr]);
      }
      dSb[rr * LDP + j] = __float2bfloat16(ds);
    }
    __syncwarp();
    warp_accumulate<HD>(dQ, dSb, Ks); /* dQ += dS K (times scale below) */
  }
  int row0 = q0 + warp * 16;
  warp_store_rows<HD>(dq + ((size_t)b * T + row0) * QD + (size_t)h * HD, QD, row0, T, dQ, S,
                      scale);
}

/* ---- launchers ----------------------------------------------------------- */

template <int HD>
static bool forward_hd(bf16 *out, float *lse, const bf16 *q, const bf16 *k, const bf16 *v, int B,
                       int T, int NH, int NKV, cudaStream_t s) {
  size_t smem = fwd_layout<HD>::bytes;
  if (!NC_CUDA(cudaFuncSetAttribute(attention_forward_kernel<HD>,
                                    cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem)))
    return false;
  dim3 grid((unsigned)((T + TILE - 1) / TILE), (unsigned)(B * NH));
  attention_forward_kernel<HD><<<grid, THREADS, smem, s>>>(out, lse, q, k, v, T, NH, NKV,
                                                           1.0f / sqrtf((float)HD));
  return NC_LAUNCHED();
}

template <int HD>
static bool backward_hd(bf16 *dq, bf16 *dk, bf16 *dv, float *delta, const bf16 *dout,
                        const float *lse, const bf16 *q, const bf16 *k, const bf16 *v, int B, int T,
                        int NH, int NKV, cudaStream_t s) {
  size_t smem = bwd_layout<HD>::bytes;
  if (!NC_CUDA(cudaFuncSetAttribute(attention_dkdv_kernel<HD>,
                                    cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem)) ||
      !NC_CUDA(cudaFuncSetAttribute(attention_dq_kernel<HD>,
                                    cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem)))
    return false;
  float scale = 1.0f / sqrtf((float)HD);
  unsigned tiles = (unsigned)((T + TILE - 1) / TILE);
  attention_dkdv_kernel<HD><<<dim3(tiles, (unsigned)(B * NKV)), THREADS, smem, s>>>(
      dk, dv, q, k, v, dout, lse, delta, T, NH, NKV, scale);
  if (!NC_LAUNCHED()) return false;
  attention_dq_kernel<HD><<<dim3(tiles, (unsigned)(B * NH)), THREADS, smem, s>>>(
      dq, q, k, v, dout, lse, delta, T, NH, NKV, scale);
  return NC_LAUNCHED();
}

bool nc_attention_forward(bf16 *out, float *lse, const bf16 *q, const bf16 *k, const bf16 *v, int B,
                          int T, int NH, int NKV, int HD, cudaStream_t s) {
  switch (HD) {
    case 16: return forward_hd<16>(out, lse, q, k, v, B, T, NH, NKV, s);
    case 32: return forward_hd<32>(out, lse, q, k, v, B, T, NH, NKV, s);
    case 64: return forward_hd<64>(out, lse, q, k, v, B, T, NH, NKV, s);
    case 128: return forward_hd<128>(out, lse, q, k, v, B, T, NH, NKV, s);
  }
  DG_UNREACHABLE();
}

bool nc_attention_backward(bf16 *dq, bf16 *dk, bf16 *dv, float *delta, const bf16 *dout,
                           const bf16 *out, const float *lse, const bf16 *q, const bf16 *k,
                           const bf16 *v, int B, int T, int NH, int NKV, int HD, cudaStream_t s) {
  size_t rows = (size_t)B * T * NH;
  attention_delta_kernel<<<(unsigned)((rows + 7) / 8), 256, 0, s>>>(delta, dout, out, B, T, NH, HD);
  if (!NC_LAUNCHED()) return false;
  switch (HD) {
    case 16: return backward_hd<16>(dq, dk, dv, delta, dout, lse, q, k, v, B, T, NH, NKV, s);
    case 32: return backward_hd<32>(dq, dk, dv, delta, dout, lse, q, k, v, B, T, NH, NKV, s);
    case 64: return backward_hd<64>(dq, dk, dv, delta, dout, lse, q, k, v, B, T, NH, NKV, s);
    case 128: return backward_hd<128>(dq, dk, dv, delta, dout, lse, q, k, v, B, T, NH, NKV, s);
  }
  DG_UNREACHABLE();
}
