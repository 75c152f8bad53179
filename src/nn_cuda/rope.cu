/* rope.cu: rotary position embedding, HF's rotate-half convention, in
 * place on bf16 query or key rows (as nn_rope_rotate): for i < HD/2 the
 * pair (x[i], x[i + HD/2]) is rotated by pos * theta^(-2i/HD), pos = t,
 * restarting in every row of the batch. The cos/sin tables are the C
 * reference's (computed in double on the host, rounded once); arithmetic
 * is fp32, rounded to bf16 once. dir = -1 rotates back, which is the
 * backward pass (training fuses that one into the attention backward).
 * Does not do Llama-3 frequency scaling.
 *
 * One thread rotates 8 pairs of a row with 16-byte loads and stores; q and
 * k go through one launch. Rows whose HD is not a multiple of 16, or
 * unaligned buffers, take a pair-per-thread path.
 *
 * q (B, T, NH, HD), k (B, T, NKV, HD), tokens `ld` elements apart (the
 * model's fused q|k|v rows); cos, sin (max T, HD/2).
 */
#include <stdint.h>

#include "common.cuh"

/* Row r of x's (b, t, h) rows: token r / nh, head r % nh; tokens ld apart. */
static __device__ __forceinline__ bf16 *head_row(bf16 *x, size_t r, int nh, size_t ld, int HD) {
  return x + (r / (size_t)nh) * ld + (r % (size_t)nh) * (size_t)HD;
}

static __global__ void rope_kernel(bf16 *x, size_t ld, const float *cosb, const float *sinb, int B,
                                   int T, int nh, int HD, float dir) {
  int hd2 = HD / 2;
  size_t total = (size_t)B * T * nh * hd2;
  for (size_t idx = blockIdx.x * (size_t)blockDim.x + threadIdx.x; idx < total;
       idx += (size_t)gridDim.x * blockDim.x) {
    int i = (int)(idx % (size_t)hd2);
    size_t row = idx / (size_t)hd2; /* (b, t, h) */
    int t = (int)((row / (size_t)nh) % (size_t)T);
    bf16 *v = head_row(x, row, nh, ld, HD);
    float c = cosb[(size_t)t * hd2 + i], s = dir * sinb[(size_t)t * hd2 + i];
    float x1 = __bfloat162float(v[i]), x2 = __bfloat162float(v[i + hd2]);
    v[i] = __float2bfloat16(x1 * c - x2 * s);
    v[i + hd2] = __float2bfloat16(x2 * c + x1 * s);
  }
}

/* Items are (row, group of 8 pairs), first those of x (nx items, nhx
 * heads a row), then those of y (nhy heads); tokens ld apart in both. */
static __global__ void rope_vec_kernel(bf16 *x, int nhx, size_t nx, bf16 *y, int nhy, size_t total,
                                       size_t ld, const float *cosb, const float *sinb, int T,
                                       int HD, float dir) {
  const int hd2 = HD / 2, groups = hd2 / 8;
  for (size_t idx = blockIdx.x * (size_t)blockDim.x + threadIdx.x; idx < total;
       idx += (size_t)gridDim.x * blockDim.x) {
    bool in_x = idx < nx;
    size_t it = in_x ? idx : idx - nx;
    int nh = in_x ? nhx : nhy, i = (int)(it % (size_t)groups) * 8;
    size_t row = it / (size_t)groups;
    int t = (int)((row / (size_t)nh) % (size_t)T);
    bf16 *v = head_row(in_x ? x : y, row, nh, ld, HD) + i;
    uint4 a = *(const uint4 *)v, b = *(const uint4 *)(v + hd2);
    const float4 *cp = (const float4 *)(cosb + (size_t)t * hd2 + i);
    const float4 *sp = (const float4 *)(sinb + (size_t)t * hd2 + i);
    float4 c4[2] = {cp[0], cp[1]}, s4[2] = {sp[0], sp[1]};
    const float *c = (const float *)c4, *s = (const float *)s4;
    __nv_bfloat162 *a2 = (__nv_bfloat162 *)&a, *b2 = (__nv_bfloat162 *)&b;
#pragma unroll
    for (int j = 0; j < 4; j++) {
      float2 x1 = __bfloat1622float2(a2[j]), x2 = __bfloat1622float2(b2[j]);
      float c0 = c[2 * j], c1 = c[2 * j + 1], s0 = dir * s[2 * j], s1 = dir * s[2 * j + 1];
      a2[j] = __floats2bfloat162_rn(x1.x * c0 - x2.x * s0, x1.y * c1 - x2.y * s1);
      b2[j] = __floats2bfloat162_rn(x2.x * c0 + x1.x * s0, x2.y * c1 + x1.y * s1);
    }
    *(uint4 *)v = a;
    *(uint4 *)(v + hd2) = b;
  }
}

static bool vec_ok(const void *p, size_t ld, const float *cosb, const float *sinb, int HD) {
  return HD % 16 == 0 && ld % 8 == 0 &&
         ((uintptr_t)p | (uintptr_t)cosb | (uintptr_t)sinb) % 16 == 0;
}

void nc_rope_qk(bf16 *q, bf16 *k, size_t ld, const float *cosb, const float *sinb, int B, int T,
                int NH, int NKV, int HD, cudaStream_t s) {
  if (!vec_ok(q, ld, cosb, sinb, HD) || !vec_ok(k, ld, cosb, sinb, HD)) {
    size_t nq = (size_t)B * T * NH * (HD / 2), nk = (size_t)B * T * NKV * (HD / 2);
    rope_kernel<<<nc_grid(nq, 256), 256, 0, s>>>(q, ld, cosb, sinb, B, T, NH, HD, 1.0f);
    rope_kernel<<<nc_grid(nk, 256), 256, 0, s>>>(k, ld, cosb, sinb, B, T, NKV, HD, 1.0f);
    NC_LAUNCHED();
    return;
  }
  size_t nq = (size_t)B * T * NH * (HD / 16), total = nq + (size_t)B * T * NKV * (HD / 16);
  rope_vec_kernel<<<nc_grid(total, 256), 256, 0, s>>>(q, NH, nq, k, NKV, total, ld, cosb, sinb, T,
                                                      HD, 1.0f);
  NC_LAUNCHED();
}
