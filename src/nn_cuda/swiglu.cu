/* swiglu.cu: the SwiGLU gate, elementwise in fp32 on bf16 operands:
 * out = silu(h1) * h3 with silu(a) = a * sigmoid(a); the backward writes
 * dh3 = dout * silu(h1) and dh1 = dout * h3 * s * (1 + h1 * (1 - s)),
 * s = sigmoid(h1), as the C reference. h1 is the gate (w1) projection, h3
 * the up (w3) projection; they come out of one matmul, so a row of h13
 * (N, 2F) holds h1 then h3 (and a row of dh13 their gradients). Eight
 * elements per thread (16-byte loads and stores) where F and the buffers'
 * alignment allow, else one.
 */
#include <stdint.h>

#include "common.cuh"

enum { VEC = 8 };

static __device__ __forceinline__ float sigmoidf_(float a) { return 1.0f / (1.0f + __expf(-a)); }

static __device__ __forceinline__ void swiglu_grad(float d, float a, float u, float *da, float *du) {
  float sg = sigmoidf_(a);
  *du = d * a * sg;
  *da = d * u * sg * (1.0f + a * (1.0f - sg));
}

static bool vec_ok(int F, const void *a, const void *b, const void *c) {
  uintptr_t p = (uintptr_t)a | (uintptr_t)b | (uintptr_t)c;
  return F % VEC == 0 && p % 16 == 0;
}

/* element i of (N, F): row i / F, column i % F; h1 at 2F * row + col, h3 F
 * further */
static __device__ __forceinline__ size_t gate_at(size_t i, int F) {
  /* 32-bit division where it fits: 64-bit division is a long routine */
  size_t row = i <= 0xffffffffu ? (unsigned)i / (unsigned)F : i / (size_t)F;
  return i + row * (size_t)F;
}

static __global__ void swiglu_forward_kernel(bf16 *out, const bf16 *h13, int F, size_t n) {
  for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
       i += (size_t)gridDim.x * blockDim.x) {
    size_t j = gate_at(i, F);
    float a = __bfloat162float(h13[j]), u = __bfloat162float(h13[j + F]);
    out[i] = __float2bfloat16(a * sigmoidf_(a) * u);
  }
}

/* n8 groups of 8 elements; F8 = F / 8 groups a row */
static __global__ void swiglu_forward_vec_kernel(uint4 *out, const uint4 *h13, int F8, size_t n8) {
  for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n8;
       i += (size_t)gridDim.x * blockDim.x) {
    size_t j = gate_at(i, F8);
    uint4 av = h13[j], uv = h13[j + F8], ov;
    const __nv_bfloat162 *a2 = (const __nv_bfloat162 *)&av, *u2 = (const __nv_bfloat162 *)&uv;
    __nv_bfloat162 *o2 = (__nv_bfloat162 *)&ov;
#pragma unroll
    for (int k = 0; k < 4; k++) {
      float2 a = __bfloat1622float2(a2[k]), u = __bfloat1622float2(u2[k]);
      o2[k] = __floats2bfloat162_rn(a.x * sigmoidf_(a.x) * u.x, a.y * sigmoidf_(a.y) * u.y);
    }
    out[i] = ov;
  }
}

void nc_swiglu_forward(bf16 *out, const bf16 *h13, int N, int F, cudaStream_t s) {
  size_t n = (size_t)N * F;
  if (vec_ok(F, out, h13, h13))
    swiglu_forward_vec_kernel<<<nc_grid(n / VEC, 256), 256, 0, s>>>(
        (uint4 *)out, (const uint4 *)h13, F / VEC, n / VEC);
  else
    swiglu_forward_kernel<<<nc_grid(n, 256), 256, 0, s>>>(out, h13, F, n);
  NC_LAUNCHED();
}

static __global__ void swiglu_backward_kernel(bf16 *dh13, const bf16 *dout, const bf16 *h13, int F,
                                              size_t n) {
  for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
       i += (size_t)gridDim.x * blockDim.x) {
    size_t j = gate_at(i, F);
    float da, du;
    swiglu_grad(__bfloat162float(dout[i]), __bfloat162float(h13[j]), __bfloat162float(h13[j + F]),
                &da, &du);
    dh13[j] = __float2bfloat16(da);
    dh13[j + F] = __float2bfloat16(du);
  }
}

static __global__ void swiglu_backward_vec_kernel(uint4 *dh13, const uint4 *dout, const uint4 *h13,
                                                  int F8, size_t n8) {
  for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n8;
       i += (size_t)gridDim.x * blockDim.x) {
    size_t j = gate_at(i, F8);
    uint4 dv = dout[i], av = h13[j], uv = h13[j + F8], r1, r3;
    const __nv_bfloat162 *d2 = (const __nv_bfloat162 *)&dv, *a2 = (const __nv_bfloat162 *)&av,
                         *u2 = (const __nv_bfloat162 *)&uv;
    __nv_bfloat162 *o1 = (__nv_bfloat162 *)&r1, *o3 = (__nv_bfloat162 *)&r3;
#pragma unroll
    for (int k = 0; k < 4; k++) {
      float2 d = __bfloat1622float2(d2[k]), a = __bfloat1622float2(a2[k]),
             u = __bfloat1622float2(u2[k]);
      float da0, du0, da1, du1;
      swiglu_grad(d.x, a.x, u.x, &da0, &du0);
      swiglu_grad(d.y, a.y, u.y, &da1, &du1);
      o1[k] = __floats2bfloat162_rn(da0, da1);
      o3[k] = __floats2bfloat162_rn(du0, du1);
    }
    dh13[j] = r1;
    dh13[j + F8] = r3;
  }
}

void nc_swiglu_backward(bf16 *dh13, const bf16 *dout, const bf16 *h13, int N, int F,
                        cudaStream_t s) {
  size_t n = (size_t)N * F;
  if (vec_ok(F, dh13, dout, h13))
    swiglu_backward_vec_kernel<<<nc_grid(n / VEC, 256), 256, 0, s>>>(
        (uint4 *)dh13, (const uint4 *)dout, (const uint4 *)h13, F / VEC, n / VEC);
  else
    swiglu_backward_kernel<<<nc_grid(n, 256), 256, 0, s>>>(dh13, dout, h13, F, n);
  NC_LAUNCHED();
}
