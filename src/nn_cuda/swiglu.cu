/* swiglu.cu: the SwiGLU gate, elementwise in fp32 on bf16 operands:
 * out = silu(h1) * h3 with silu(a) = a * sigmoid(a); the backward writes
 * dh3 = dout * silu(h1) and dh1 = dout * h3 * s * (1 + h1 * (1 - s)),
 * s = sigmoid(h1), as the C reference. h1 is the gate (w1) projection, h3
 * the up (w3) projection. Two elements per thread where the count allows,
 * so loads are 4 bytes wide.
 */
#include "common.cuh"

static __device__ __forceinline__ float sigmoidf_(float a) { return 1.0f / (1.0f + __expf(-a)); }

static __global__ void swiglu_forward_kernel(bf16 *out, const bf16 *h1, const bf16 *h3, size_t n) {
  for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
       i += (size_t)gridDim.x * blockDim.x) {
    float a = __bfloat162float(h1[i]), u = __bfloat162float(h3[i]);
    out[i] = __float2bfloat16(a * sigmoidf_(a) * u);
  }
}

static __global__ void swiglu_forward_kernel2(__nv_bfloat162 *out, const __nv_bfloat162 *h1,
                                              const __nv_bfloat162 *h3, size_t n2) {
  for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n2;
       i += (size_t)gridDim.x * blockDim.x) {
    float2 a = __bfloat1622float2(h1[i]), u = __bfloat1622float2(h3[i]);
    out[i] = __floats2bfloat162_rn(a.x * sigmoidf_(a.x) * u.x, a.y * sigmoidf_(a.y) * u.y);
  }
}

void nc_swiglu_forward(bf16 *out, const bf16 *h1, const bf16 *h3, size_t n, cudaStream_t s) {
  if (n % 2 == 0)
    swiglu_forward_kernel2<<<nc_grid(n / 2, 256), 256, 0, s>>>(
        (__nv_bfloat162 *)out, (const __nv_bfloat162 *)h1, (const __nv_bfloat162 *)h3, n / 2);
  else
    swiglu_forward_kernel<<<nc_grid(n, 256), 256, 0, s>>>(out, h1, h3, n);
  NC_LAUNCHED();
}

static __device__ __forceinline__ void swiglu_grad(float d, float a, float u, float *da, float *du) {
  float sg = sigmoidf_(a);
  *du = d * a * sg;
  *da = d * u * sg * (1.0f + a * (1.0f - sg));
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

static __global__ void swiglu_backward_kernel2(__nv_bfloat162 *dh1, __nv_bfloat162 *dh3,
                                               const __nv_bfloat162 *dout,
                                               const __nv_bfloat162 *h1, const __nv_bfloat162 *h3,
                                               size_t n2) {
  for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n2;
       i += (size_t)gridDim.x * blockDim.x) {
    float2 d = __bfloat1622float2(dout[i]), a = __bfloat1622float2(h1[i]),
           u = __bfloat1622float2(h3[i]);
    float da0, du0, da1, du1;
    swiglu_grad(d.x, a.x, u.x, &da0, &du0);
    swiglu_grad(d.y, a.y, u.y, &da1, &du1);
    dh1[i] = __floats2bfloat162_rn(da0, da1);
    dh3[i] = __floats2bfloat162_rn(du0, du1);
  }
}

void nc_swiglu_backward(bf16 *dh1, bf16 *dh3, const bf16 *dout, const bf16 *h1, const bf16 *h3,
                        size_t n, cudaStream_t s) {
  if (n % 2 == 0)
    swiglu_backward_kernel2<<<nc_grid(n / 2, 256), 256, 0, s>>>(
        (__nv_bfloat162 *)dh1, (__nv_bfloat162 *)dh3, (const __nv_bfloat162 *)dout,
        (const __nv_bfloat162 *)h1, (const __nv_bfloat162 *)h3, n / 2);
  else
    swiglu_backward_kernel<<<nc_grid(n, 256), 256, 0, s>>>(dh1, dh3, dout, h1, h3, n);
  NC_LAUNCHED();
}
