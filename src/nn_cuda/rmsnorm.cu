/* rmsnorm.cu: RMSNorm forward and backward, fused.
 *
 * Forward: one warp per row reads the fp32 residual stream and the fp32
 * gain, writes the bf16 normalised row (the next matmul's operand) and the
 * row's rstd. Backward: one warp per row adds the input gradient into the
 * fp32 residual gradient and refreshes its bf16 copy (the next matmul's
 * operand); the gain's gradient, a sum over rows, goes through per-chunk
 * partial sums and a second pass that adds them in a fixed order, so the
 * result is the same from run to run (no atomics).
 *
 * N rows, C channels. y = x * r * w, r = (mean(x^2) + eps)^(-1/2);
 * dx += r * w * dy - x * r^3 / C * sum(dy * w * x); dw += sum_n dy * x * r.
 */
#include "common.cuh"

enum { ROW_CHUNKS = NC_NORM_ROW_CHUNKS, COL_TILE = 32, ROW_THREADS = 8 };

static __global__ void rmsnorm_forward_kernel(bf16 *out, float *rstd, const float *inp,
                                              const float *w, int N, int C, float eps) {
  int row = blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32, lane = threadIdx.x % 32;
  if (row >= N) return;
  const float *x = inp + (size_t)row * C;
  float ss = 0.0f;
  for (int i = lane; i < C; i += 32) ss += x[i] * x[i];
  ss = nc_warp_sum(ss);
  float r = 1.0f / sqrtf(ss / (float)C + eps);
  bf16 *y = out + (size_t)row * C;
  for (int i = lane; i < C; i += 32) y[i] = __float2bfloat16(x[i] * r * w[i]);
  if (lane == 0) rstd[row] = r;
}

void nc_rmsnorm_forward(bf16 *out, float *rstd, const float *inp, const float *w, int N, int C,
                        float eps, cudaStream_t s) {
  int warps = 8;
  rmsnorm_forward_kernel<<<(N + warps - 1) / warps, warps * 32, 0, s>>>(out, rstd, inp, w, N, C,
                                                                         eps);
  NC_LAUNCHED();
}

static __global__ void rmsnorm_backward_kernel(float *dinp, bf16 *dinp_bf, const float *dout,
                                               const float *inp, const float *w,
                                               const float *rstd, int N, int C) {
  int row = blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32, lane = threadIdx.x % 32;
  if (row >= N) return;
  const float *dy = dout + (size_t)row * C, *x = inp + (size_t)row * C;
  float *dx = dinp + (size_t)row * C;
  bf16 *dxb = dinp_bf + (size_t)row * C;
  float r = rstd[row], dot = 0.0f;
  for (int i = lane; i < C; i += 32) dot += dy[i] * w[i] * x[i];
  dot = nc_warp_sum(dot);
  float c = dot * r * r * r / (float)C;
  for (int i = lane; i < C; i += 32) {
    float v = dx[i] + (r * w[i] * dy[i] - c * x[i]);
    dx[i] = v;
    dxb[i] = __float2bfloat16(v);
  }
}

/* grid (column tiles, ROW_CHUNKS), block (COL_TILE, ROW_THREADS): each
 * block sums its rows of one column tile; threads stride rows, then the
 * block adds the ROW_THREADS partials in order. */
static __global__ void rmsnorm_dw_partial_kernel(float *part, const float *dout, const float *inp,
                                                 const float *rstd, int N, int C) {
  __shared__ float acc[ROW_THREADS][COL_TILE];
  int c = blockIdx.x * COL_TILE + threadIdx.x;
  int rows_per = (N + ROW_CHUNKS - 1) / ROW_CHUNKS;
  int r0 = blockIdx.y * rows_per, r1 = min(N, r0 + rows_per);
  float s = 0.0f;
  if (c < C)
    for (int r = r0 + (int)threadIdx.y; r < r1; r += ROW_THREADS)
      s += dout[(size_t)r * C + c] * inp[(size_t)r * C + c] * rstd[r];
  acc[threadIdx.y][threadIdx.x] = s;
  __syncthreads();
  if (threadIdx.y == 0 && c < C) {
    float t = 0.0f;
    for (int i = 0; i < ROW_THREADS; i++) t += acc[i][threadIdx.x];
    part[(size_t)blockIdx.y * C + c] = t;
  }
}

static __global__ void rmsnorm_dw_final_kernel(float *dw, const float *part, int C) {
  int c = blockIdx.x * blockDim.x + threadIdx.x;
  if (c >= C) return;
  float t = 0.0f;
  for (int i = 0; i < ROW_CHUNKS; i++) t += part[(size_t)i * C + c];
  dw[c] += t;
}

void nc_rmsnorm_backward(float *dinp, bf16 *dinp_bf, float *dw, float *part, const float *dout,
                         const float *inp, const float *w, const float *rstd, int N, int C,
                         cudaStream_t s) {
  int warps = 8;
  rmsnorm_backward_kernel<<<(N + warps - 1) / warps, warps * 32, 0, s>>>(dinp, dinp_bf, dout, inp,
                                                                          w, rstd, N, C);
  NC_LAUNCHED();
  dim3 grid((unsigned)((C + COL_TILE - 1) / COL_TILE), ROW_CHUNKS), block(COL_TILE, ROW_THREADS);
  rmsnorm_dw_partial_kernel<<<grid, block, 0, s>>>(part, dout, inp, rstd, N, C);
  NC_LAUNCHED();
  rmsnorm_dw_final_kernel<<<(C + 255) / 256, 256, 0, s>>>(dw, part, C);
  NC_LAUNCHED();
}
