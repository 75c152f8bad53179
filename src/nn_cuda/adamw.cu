/* adamw.cu: the optimizer on the GPU: the gradients' global L2 norm and
 * AdamW with clipping, bias correction and decoupled weight decay, in the
 * C reference's formula and order (nn_update):
 *   g = grad * scale, scale = clip / norm when norm > clip > 0, else 1
 *   m = b1 m + (1 - b1) g;  v = b2 v + (1 - b2) g^2
 *   p -= lr (m / bc1 / (sqrt(v / bc2) + eps) + wd p)
 * on the fp32 master weights, then refreshes their bf16 copy.
 *
 * The norm is summed in double, first per block of a fixed grid
 * (NC_NORM_BLOCKS), then by one block in a fixed tree, so it is the same
 * from run to run; the update reads it from device memory, so a step needs
 * no host round trip. The schedule (lr, bias corrections) is the host's.
 */
#include "common.cuh"

enum { NORM_THREADS = 512 };

static __global__ void sumsq_partial_kernel(double *part, const float *g, size_t n) {
  __shared__ double buf[NORM_THREADS];
  double t = 0.0;
  /* unrolled so that the loads are in flight together; the adds keep
   * their order */
#pragma unroll 4
  for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
       i += (size_t)gridDim.x * blockDim.x)
    t += (double)g[i] * (double)g[i];
  buf[threadIdx.x] = t;
  __syncthreads();
  for (int w = NORM_THREADS / 2; w > 0; w >>= 1) {
    if ((int)threadIdx.x < w) buf[threadIdx.x] += buf[threadIdx.x + w];
    __syncthreads();
  }
  if (threadIdx.x == 0) part[blockIdx.x] = buf[0];
}

static __global__ void sumsq_final_kernel(double *out, const double *part) {
  __shared__ double buf[NC_NORM_BLOCKS];
  buf[threadIdx.x] = part[threadIdx.x];
  __syncthreads();
  for (int w = NC_NORM_BLOCKS / 2; w > 0; w >>= 1) {
    if ((int)threadIdx.x < w) buf[threadIdx.x] += buf[threadIdx.x + w];
    __syncthreads();
  }
  if (threadIdx.x == 0) *out = buf[0];
}

void nc_sumsq(double *out, double *part, const float *g, size_t n, cudaStream_t s) {
  sumsq_partial_kernel<<<NC_NORM_BLOCKS, NORM_THREADS, 0, s>>>(part, g, n);
  NC_LAUNCHED();
  sumsq_final_kernel<<<1, NC_NORM_BLOCKS, 0, s>>>(out, part);
  NC_LAUNCHED();
}

static __global__ void adamw_kernel(float *p, bf16 *p_bf, float *mom, float *var, const float *g,
                                    size_t n, const double *sumsq, float clip, float lr, float b1,
                                    float b2, float eps, float wd, float bc1, float bc2) {
  float norm = (float)sqrt(*sumsq);
  float scale = clip > 0.0f && norm > clip ? clip / norm : 1.0f;
  for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
       i += (size_t)gridDim.x * blockDim.x) {
    float gi = g[i] * scale;
    float mi = b1 * mom[i] + (1.0f - b1) * gi;
    float vi = b2 * var[i] + (1.0f - b2) * gi * gi;
    mom[i] = mi;
    var[i] = vi;
    float mhat = mi / bc1, vhat = vi / bc2;
    float pi = p[i];
    pi -= lr * (mhat / (sqrtf(vhat) + eps) + wd * pi);
    p[i] = pi;
    p_bf[i] = __float2bfloat16(pi);
  }
}

void nc_adamw(float *p, bf16 *p_bf, float *mom, float *var, const float *g, size_t n,
              const double *sumsq, float clip, float lr, float beta1, float beta2, float eps,
              float wd, float bc1, float bc2, cudaStream_t s) {
  if (n == 0) return;
  adamw_kernel<<<nc_grid(n, 256), 256, 0, s>>>(p, p_bf, mom, var, g, n, sumsq, clip, lr, beta1,
                                                beta2, eps, wd, bc1, bc2);
  NC_LAUNCHED();
}

static __global__ void to_bf16_kernel(bf16 *out, const float *in, size_t n) {
  for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
       i += (size_t)gridDim.x * blockDim.x)
    out[i] = __float2bfloat16(in[i]);
}

void nc_to_bf16(bf16 *out, const float *in, size_t n, cudaStream_t s) {
  if (n == 0) return;
  to_bf16_kernel<<<nc_grid(n, 256), 256, 0, s>>>(out, in, n);
  NC_LAUNCHED();
}
