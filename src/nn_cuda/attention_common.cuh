/* attention_common.cuh: what the two families of attention kernels share
 * (attention.cu: mma.sync, any sm_80+ device; attention_wgmma.cu: the
 * sm_90 warpgroup products): cp.async copies, bf16 packing, the
 * accumulator-to-operand conversion and the rows' store with the RoPE
 * backward, and the launchers of the sm_90 kernels.
 *
 * Both use the same fragment layout for a warp's 16 rows: an fp32
 * accumulator over 8N columns is float[N][4], lane l (g = l / 4, t = l %
 * 4) holding (g, 8n + 2t), (g, 8n + 2t + 1), (g + 8, 8n + 2t), (g + 8, 8n
 * + 2t + 1) of n-block n; a bf16 A operand over 16 columns is 4 registers
 * of 2 elements: rows g, g + 8, g, g + 8 and columns 2t.., 2t.., 2t + 8..,
 * 2t + 8.. (mma.m16n8k16 and wgmma.m64nNk16, whose warp w owns rows 16w..
 * 16w + 15 of the 64, alike).
 */
#ifndef DRAGON_NN_CUDA_ATTENTION_COMMON_CUH
#define DRAGON_NN_CUDA_ATTENTION_COMMON_CUH

#include <stdint.h>

#include "common.cuh"

static constexpr float LOG2E = 1.4426950408889634f, LN2 = 0.6931471805599453f;

static __device__ __forceinline__ uint32_t smem_addr(const void *p) {
  return (uint32_t)__cvta_generic_to_shared(p);
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

/* Two floats as a bf16 pair, the first in the lower half, each rounded
 * to nearest even: one cvt.rn.bf16x2.f32. */
static __device__ __forceinline__ uint32_t pack_bf16(float lo, float hi) {
  __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
  return *(const uint32_t *)&v;
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

/* delta = rowsum(dO * O) of a warp's 16 rows (HD / 8 lanes a row, 16
 * bytes each, summed over the row's lanes): the block's rows rb.. rb + 15,
 * global rows q0 + rb.., whose first element sits at ooff + rb * QD in out
 * and dout; into dl_s[rb..] and, rows < T, delta_bh[q0 + rb..]. */
template <int HD>
static __device__ __forceinline__ void warp_delta(float *dl_s, float *delta_bh, const bf16 *out,
                                                  const bf16 *dout, size_t ooff, size_t QD,
                                                  int q0, int rb, int T, int lane) {
  constexpr int CPR = HD / 8;
  for (int i = lane; i < 16 * CPR; i += 32) {
    int rr = i / CPR, c = (i % CPR) * 8, qi = q0 + rb + rr;
    float sum = 0.0f;
    if (qi < T) {
      size_t off = ooff + (size_t)(rb + rr) * QD + c;
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
      dl_s[rb + rr] = sum;
      if (qi < T) delta_bh[qi] = sum;
    }
  }
}

/* In the dK/dV pass, from a warp's S^T and dP^T over 64 queries (rows:
 * keys key0 and key0 + 8 of this lane; columns: the queries q0 + j of the
 * tile, with their lse and delta in ls[j], dl[j]): P^T into s and dS^T
 * (unscaled) into dp. mask: the tile reaches the diagonal or T (rows past
 * T have zero-filled lse and delta). */
static __device__ __forceinline__ void dkdv_probs(float (*s)[4], float (*dp)[4], const float *ls,
                                                  const float *dl, int q0, int key0, int T,
                                                  bool mask, float sl2, int tq) {
#pragma unroll
  for (int nb = 0; nb < 8; nb++) {
    int j = nb * 8 + 2 * tq; /* the lane's queries j, j + 1 of the tile */
    float2 l2 = *(const float2 *)(ls + j), d2 = *(const float2 *)(dl + j);
#pragma unroll
    for (int e = 0; e < 4; e++) {
      int c = e & 1, qi = q0 + j + c, key = key0 + 8 * (e >> 1);
      float lz = (c ? l2.y : l2.x) * LOG2E, dz = c ? d2.y : d2.x;
      float p = exp2f(fmaf(s[nb][e], sl2, -lz));
      if (mask && (key > qi || qi >= T)) p = 0.0f;
      s[nb][e] = p;
      dp[nb][e] = p * (dp[nb][e] - dz);
    }
  }
}

/* ---- the sm_90 kernels (attention_wgmma.cu) ------------------------------ */

/* Whether the warpgroup kernels can run: head dim 64 on a compute
 * capability 9.0 device (they are built for sm_90a only). */
bool nc_attention_wgmma_usable(int HD);
/* The same arguments as nc_attention_forward / backward (HD 64); groups:
 * 64-row warpgroups a block (1 or 2) of the forward, the dQ pass and the
 * dK/dV pass; dkdv_blocks: dK/dV blocks an SM with one warpgroup (2 or 3;
 * two warpgroups: 1). */
bool nc_attention_wgmma_forward(bf16 *out, float *lse, const bf16 *q, const bf16 *k,
                                const bf16 *v, size_t ld, int B, int T, int NH, int NKV,
                                int groups, cudaStream_t s);
bool nc_attention_wgmma_backward(bf16 *dq, bf16 *dk, bf16 *dv, float *delta, const bf16 *dout,
                                 const bf16 *out, const float *lse, const bf16 *q, const bf16 *k,
                                 const bf16 *v, size_t ld, int B, int T, int NH, int NKV,
                                 const float *rope_cos, const float *rope_sin, int dq_groups,
                                 int dkdv_groups, int dkdv_blocks, cudaStream_t s);

#endif
