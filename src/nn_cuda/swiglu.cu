/* swiglu.cu: the SwiGLU gate, elementwise in fp32 on bf16 operands:
 * out = silu(h1) * h3 with silu(a) = a * sigmoid(a); the backward writes
 * dh3 = dout * silu(h1) and dh1 = dout * h3 * s * (1 + h1 * (1 - s)),
 * s = sigmoid(h1), as the C reference. h1 is the gate (w1) projection, h3
 * the up (w3) projection. Eight elements per thread (16-byte loads and
 * stores) where the count and the buffers' alignment allow, else one.
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

static bool vec_ok(size_t n, const void *a, const void *b, const void *c, const void *d,
                   const void *e) {
  uintptr_t p = (uintptr_t)a | (uintptr_t)b | (uintptr_t)c | (uintptr_t)d | (uintptr_t)e;
  return n % VEC == 0 && p % 16 == 0;
}

static __global__ void swiglu_forward_kernel(bf16 *out, const bf16 *h1, const bf16 *h3, size_t n) {
  for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
       i += (size_t)gridDim.x * blockDim.x) {
    float a = __bfloat162float(h1[i]), u = __bfloat162float(h3[i]);
    out[i] = __float2bfloat16(a * sigmoidf_(a) * u);
  }
}

/* n8 groups of 8 elements */
static __global__ void swiglu_forward_vec_kernel(uint4 *out, const uint4 *h1, const uint4 *h3,
                                                 size_t n8) {
  for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n8;
       i += (size_t)gridDim.x * blockDim.x) {
    uint4 av = h1[i], uv = h3[i], ov;
    const __nv_bfloat162 *a2 = (const __nv_bfloat162 *)&av, *u2 = (const __nv_bfloat162 *)&uv;
    __nv_bfloat162 *o2 = (__nv_bfloat162 *)&ov;
#pragma unroll
    for (int j = 0; j < 4; j++) {
      float2 a = __bfloat1622float2(a2[j]), u = __bfloat1622float2(u2[j]);
      o2[j] = __floats2bfloat162_rn(a.x * sigmoidf_(a.x) * u.x, a.y * sigmoidf_(a.y) * u.y);
    }
    out[i] = ov;
  }
}

void nc_swiglu_forward(bf16 *out, const bf16 *h1, const bf16 *h3, size_t n, cudaStream_t s) {
  if (vec_ok(n, out, h1, h3, h1, h3))
    swiglu_forward_vec_kernel<<<nc_grid(n / VEC, 256), 256, 0, s>>>(
        (uint4 *)out, (const uint4 *)h1, (const uint4 *)h3, n / VEC);
  else
    swiglu_forward_kernel<<<nc_grid(n, 256), 256, 0, s>>>(out, h1, h3, n);
  NC_LAUNCHED();
}

static __global__ void swiglu_backward_kernel(bf16 *dh1, bf16 *dh3, const bf16 *dout, const bf16 *h1,
                                              const bf16 *h3, size_t n) {
  for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
       i += (size_t)gridDim.x * blockDim.x) {
    float da, du;
    swiglu_grad(__bfloat162float(dout[i]), __bfloat162float(h1[i]), __bfloat162float(h3[i]), &da,
                &du);
    dh1[i] = __float2bfloat16(da);
    dh3[i] = __float2bfloat16(du);
  }
}

static __global__ void swiglu_backward_vec_kernel(uint4 *dh1, uint4 *dh3, const uint4 *dout,
                                                  const uint4 *h1, const uint4 *h3, size_t n8) {
  for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n8;
       i += (size_t)gridDim.x * blockDim.x) {
    uint4 dv = dout[i], av = h1[i], uv = h3[i], r1, r3;
    const __nv_bfloat162 *d2 = (const __nv_bfloat162 *)&dv, *a2 = (const __nv_bfloat162 *)&av,
                         *u2 = (const __nv_bfloat162 *)&uv;
    __nv_bfloat162 *o1 = (__nv_bfloat162 *)&r1, *o3 = (__nv_bfloat162 *)&r3;
#pragma unroll
    for (int j = 0; j < 4; j++) {
      float2 d = __bfloat1622float2(d2[j]), a = __bfloat1622float2(a2[j]),
             u = __bfloat1622float2(u2[j]);
      float da0, du0, da1, du1;
      swiglu_grad(d.x, a.x, u.x, &da0, &du0);
      swiglu_grad(d.y, a.y, u.y, &da1, &du1);
      o1[j] = __floats2bfloat162_rn(da0, da1);
      o3[j] = __floats2bfloat162_rn(du0, du1);
    }
    dh1[i] = r1;
    dh3[i] = r3;
  }
}

void nc_swiglu_backward(bf16 *dh1, bf16 *dh3, const bf16 *dout, const bf16 *h1, const bf16 *h3,
                        size_t n, cudaStream_t s) {
  if (vec_ok(n, dh1, dh3, dout, h1, h3))
    swiglu_backward_vec_kernel<<<nc_grid(n / VEC, 256), 256, 0, s>>>(
        (uint4 *)dh1, (uint4 *)dh3, (const uint4 *)dout, (const uint4 *)h1, (const uint4 *)h3,
        n / VEC);
  else
    swiglu_backward_kernel<<<nc_grid(n, 256), 256, 0, s>>>(dh1, dh3, dout, h1, h3, n);
  NC_LAUNCHED();
}
