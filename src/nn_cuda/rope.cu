/* rope.cu: rotary position embedding, HF's rotate-half convention, in
 * place on bf16 query or key rows (as nn_rope_rotate): for i < HD/2 the
 * pair (x[i], x[i + HD/2]) is rotated by pos * theta^(-2i/HD), pos = t,
 * restarting in every row of the batch. The cos/sin tables are the C
 * reference's (computed in double on the host, rounded once); arithmetic
 * is fp32, rounded to bf16 once. dir = -1 rotates back, which is the
 * backward pass. Does not do Llama-3 frequency scaling.
 *
 * x (B, T, nh, HD); cos, sin (max T, HD/2).
 */
#include "common.cuh"

static __global__ void rope_kernel(bf16 *x, const float *cosb, const float *sinb, int B, int T,
                                   int nh, int HD, float dir) {
  int hd2 = HD / 2;
  size_t total = (size_t)B * T * nh * hd2;
  for (size_t idx = blockIdx.x * (size_t)blockDim.x + threadIdx.x; idx < total;
       idx += (size_t)gridDim.x * blockDim.x) {
    int i = (int)(idx % (size_t)hd2);
    size_t row = idx / (size_t)hd2; /* (b, t, h) */
    int t = (int)((row / (size_t)nh) % (size_t)T);
    bf16 *v = x + row * (size_t)HD;
    float c = cosb[(size_t)t * hd2 + i], s = dir * sinb[(size_t)t * hd2 + i];
    float x1 = __bfloat162float(v[i]), x2 = __bfloat162float(v[i + hd2]);
    v[i] = __float2bfloat16(x1 * c - x2 * s);
    v[i + hd2] = __float2bfloat16(x2 * c + x1 * s);
  }
}

void nc_rope(bf16 *x, const float *cosb, const float *sinb, int B, int T, int nh, int HD, float dir,
             cudaStream_t s) {
  size_t total = (size_t)B * T * nh * (HD / 2);
  rope_kernel<<<nc_grid(total, 256), 256, 0, s>>>(x, cosb, sinb, B, T, nh, HD, dir);
  NC_LAUNCHED();
}
