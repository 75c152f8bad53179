/* rmsnorm.cu: RMSNorm forward and backward, fused.
 *
 * Forward: one warp per row reads the fp32 residual stream and the fp32
 * gain, writes the bf16 normalised row (the next matmul's operand) and the
 * row's rstd. The residual add variant first adds a block's bf16 output
 * to the fp32 stream and writes the sum (the next residual row) as well:
 * the matmul before it then writes 2 bytes an element instead of reading
 * and writing 4 each through its epilogue. Backward, in one pass over the rows, from the bf16 gradient
 * of the normalised row (a matmul's output): one warp per row adds
 * the input gradient into the fp32 residual gradient and refreshes its
 * bf16 copy (the next matmul's operand), and keeps the row's share of the
 * gain's gradient in registers; each block (a fixed chunk of rows) sums
 * its warps' shares in a fixed order into one partial row, and a second
 * kernel adds the partials in a fixed order, so the result is the same from
 * run to run (no atomics).
 *
 * Where C is a multiple of 4 up to 1024 a lane holds its 16-byte pieces of
 * the row in registers (one read of each input); other widths take a plain
 * strided path with a separate pass for the gain's gradient.
 *
 * N rows, C channels. y = x * r * w, r = (mean(x^2) + eps)^(-1/2);
 * dx += r * w * dy - x * r^3 / C * sum(dy * w * x); dw += sum_n dy * x * r.
 */
#include <stdint.h>

#include "common.cuh"

enum { ROW_WARPS = 8, MAX_NJ = 8, COL_TILE = 32, SUM_ROWS = 16 };

static bool aligned16(const void *p) { return (uintptr_t)p % 16 == 0; }

/* The fast path's float4 pieces per lane for C, or 0 when it does not apply. */
static int pieces(int C) {
  if (C % 4 != 0 || C > 128 * MAX_NJ) return 0;
  return (C + 127) / 128;
}

static __device__ __forceinline__ float4 load_bf16x4(const bf16 *p) {
  uint2 u = *(const uint2 *)p;
  float2 lo = __bfloat1622float2(*(const __nv_bfloat162 *)&u.x);
  float2 hi = __bfloat1622float2(*(const __nv_bfloat162 *)&u.y);
  return make_float4(lo.x, lo.y, hi.x, hi.y);
}

static __device__ __forceinline__ void store_bf16x4(bf16 *p, float4 v) {
  __nv_bfloat162 lo = __floats2bfloat162_rn(v.x, v.y), hi = __floats2bfloat162_rn(v.z, v.w);
  uint2 u;
  u.x = (uint32_t)__bfloat16_as_ushort(lo.x) | ((uint32_t)__bfloat16_as_ushort(lo.y) << 16);
  u.y = (uint32_t)__bfloat16_as_ushort(hi.x) | ((uint32_t)__bfloat16_as_ushort(hi.y) << 16);
  *(uint2 *)p = u;
}

/* ---- forward ------------------------------------------------------------- */

/* With add non-NULL the row is inp + add, stored to sum first. */
static __global__ void rmsnorm_forward_kernel(bf16 *out, float *rstd, float *sum, const float *inp,
                                              const bf16 *add, const float *w, int N, int C,
                                              float eps) {
  int row = blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32, lane = threadIdx.x % 32;
  if (row >= N) return;
  const float *x = inp + (size_t)row * C;
  if (add) {
    const bf16 *a = add + (size_t)row * C;
    float *xs = sum + (size_t)row * C;
    for (int i = lane; i < C; i += 32) xs[i] = x[i] + __bfloat162float(a[i]);
    __syncwarp();
    x = xs;
  }
  float ss = 0.0f;
  for (int i = lane; i < C; i += 32) ss += x[i] * x[i];
  ss = nc_warp_sum(ss);
  float r = 1.0f / sqrtf(ss / (float)C + eps);
  bf16 *y = out + (size_t)row * C;
  for (int i = lane; i < C; i += 32) y[i] = __float2bfloat16(x[i] * r * w[i]);
  if (lane == 0) rstd[row] = r;
}

/* lane holds float4 pieces lane + 32j, j < NJ, of its row */
template <int NJ>
static __global__ void rmsnorm_forward_vec_kernel(bf16 *out, float *rstd, float *sum,
                                                  const float *inp, const bf16 *add,
                                                  const float *w, int N, int C, float eps) {
  int row = blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32, lane = threadIdx.x % 32;
  if (row >= N) return;
  const float4 *x4 = (const float4 *)(inp + (size_t)row * C), *w4 = (const float4 *)w;
  int C4 = C / 4;
  float4 xv[NJ];
  float ss = 0.0f;
#pragma unroll
  for (int j = 0; j < NJ; j++) {
    int i = lane + 32 * j;
    xv[j] = i < C4 ? x4[i] : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
    if (add && i < C4) {
      float4 a = load_bf16x4(add + (size_t)row * C + 4 * i);
      xv[j] = make_float4(xv[j].x + a.x, xv[j].y + a.y, xv[j].z + a.z, xv[j].w + a.w);
      ((float4 *)(sum + (size_t)row * C))[i] = xv[j];
    }
    ss += xv[j].x * xv[j].x + xv[j].y * xv[j].y + xv[j].z * xv[j].z + xv[j].w * xv[j].w;
  }
  ss = nc_warp_sum(ss);
  float r = 1.0f / sqrtf(ss / (float)C + eps);
  bf16 *y = out + (size_t)row * C;
#pragma unroll
  for (int j = 0; j < NJ; j++) {
    int i = lane + 32 * j;
    if (i >= C4) continue;
    float4 g = w4[i], v = xv[j];
    store_bf16x4(y + 4 * i,
                 make_float4(v.x * r * g.x, v.y * r * g.y, v.z * r * g.z, v.w * r * g.w));
  }
  if (lane == 0) rstd[row] = r;
}

template <int NJ>
static void forward_vec(bf16 *out, float *rstd, float *sum, const float *inp, const bf16 *add,
                        const float *w, int N, int C, float eps, cudaStream_t s) {
  rmsnorm_forward_vec_kernel<NJ><<<(N + ROW_WARPS - 1) / ROW_WARPS, ROW_WARPS * 32, 0, s>>>(
      out, rstd, sum, inp, add, w, N, C, eps);
}

void nc_rmsnorm_forward_add(bf16 *out, float *rstd, float *sum, const float *inp, const bf16 *add,
                            const float *w, int N, int C, float eps, cudaStream_t s) {
  int nj = pieces(C);
  if (!aligned16(inp) || !aligned16(w) || (uintptr_t)out % 8 != 0) nj = 0;
  if (add && (!aligned16(sum) || (uintptr_t)add % 8 != 0)) nj = 0;
  switch (nj) {
    case 1: forward_vec<1>(out, rstd, sum, inp, add, w, N, C, eps, s); break;
    case 2: forward_vec<2>(out, rstd, sum, inp, add, w, N, C, eps, s); break;
    case 3: forward_vec<3>(out, rstd, sum, inp, add, w, N, C, eps, s); break;
    case 4: forward_vec<4>(out, rstd, sum, inp, add, w, N, C, eps, s); break;
    case 5: forward_vec<5>(out, rstd, sum, inp, add, w, N, C, eps, s); break;
    case 6: forward_vec<6>(out, rstd, sum, inp, add, w, N, C, eps, s); break;
    case 7: forward_vec<7>(out, rstd, sum, inp, add, w, N, C, eps, s); break;
    case 8: forward_vec<8>(out, rstd, sum, inp, add, w, N, C, eps, s); break;
    default:
      rmsnorm_forward_kernel<<<(N + ROW_WARPS - 1) / ROW_WARPS, ROW_WARPS * 32, 0, s>>>(
          out, rstd, sum, inp, add, w, N, C, eps);
  }
  NC_LAUNCHED();
}

void nc_rmsnorm_forward(bf16 *out, float *rstd, const float *inp, const float *w, int N, int C,
                        float eps, cudaStream_t s) {
  nc_rmsnorm_forward_add(out, rstd, NULL, inp, NULL, w, N, C, eps, s);
}

/* ---- backward ------------------------------------------------------------ */

/* grid (NC_NORM_ROW_CHUNKS): block b owns rows [b * per, (b + 1) * per),
 * warp w of them the rows w, w + ROW_WARPS, ... The block's partial sum of
 * dw goes to part[b]. */
template <int NJ>
static __global__ void __launch_bounds__(ROW_WARPS * 32)
    rmsnorm_backward_vec_kernel(float *dinp, bf16 *dinp_bf, float *part, const bf16 *dout,
                                const float *inp, const float *w, const float *rstd, int N, int C,
                                int per) {
  __shared__ float4 red[ROW_WARPS][32 * NJ];
  int warp = threadIdx.x / 32, lane = threadIdx.x % 32, C4 = C / 4;
  int r0 = blockIdx.x * per, r1 = min(N, r0 + per);
  const float4 *w4 = (const float4 *)w;
  float4 wv[NJ], acc[NJ];
#pragma unroll
  for (int j = 0; j < NJ; j++) {
    int i = lane + 32 * j;
    wv[j] = i < C4 ? w4[i] : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
    acc[j] = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
  }
  for (int row = r0 + warp; row < r1; row += ROW_WARPS) {
    const bf16 *dyr = dout + (size_t)row * C;
    const float4 *x4 = (const float4 *)(inp + (size_t)row * C);
    float4 *dx4 = (float4 *)(dinp + (size_t)row * C);
    float4 dy[NJ], xv[NJ], dxv[NJ];
    float dot = 0.0f, r = rstd[row];
#pragma unroll
    for (int j = 0; j < NJ; j++) {
      int i = lane + 32 * j;
      bool ok = i < C4;
      float4 z = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
      dy[j] = ok ? load_bf16x4(dyr + 4 * i) : z;
      xv[j] = ok ? x4[i] : z;
      dxv[j] = ok ? dx4[i] : z;
      dot += dy[j].x * wv[j].x * xv[j].x + dy[j].y * wv[j].y * xv[j].y +
             dy[j].z * wv[j].z * xv[j].z + dy[j].w * wv[j].w * xv[j].w;
    }
    dot = nc_warp_sum(dot);
    float c = dot * r * r * r / (float)C;
    bf16 *dxb = dinp_bf + (size_t)row * C;
#pragma unroll
    for (int j = 0; j < NJ; j++) {
      int i = lane + 32 * j;
      if (i >= C4) continue;
      float4 v = dxv[j];
      v.x += r * wv[j].x * dy[j].x - c * xv[j].x;
      v.y += r * wv[j].y * dy[j].y - c * xv[j].y;
      v.z += r * wv[j].z * dy[j].z - c * xv[j].z;
      v.w += r * wv[j].w * dy[j].w - c * xv[j].w;
      dx4[i] = v;
      store_bf16x4(dxb + 4 * i, v);
      acc[j].x += dy[j].x * xv[j].x * r;
      acc[j].y += dy[j].y * xv[j].y * r;
      acc[j].z += dy[j].z * xv[j].z * r;
      acc[j].w += dy[j].w * xv[j].w * r;
    }
  }
#pragma unroll
  for (int j = 0; j < NJ; j++) red[warp][lane + 32 * j] = acc[j];
  __syncthreads();
  for (int i = threadIdx.x; i < C4; i += blockDim.x) {
    float4 t = red[0][i];
    for (int k = 1; k < ROW_WARPS; k++) {
      float4 u = red[k][i];
      t.x += u.x;
      t.y += u.y;
      t.z += u.z;
      t.w += u.w;
    }
    ((float4 *)(part + (size_t)blockIdx.x * C))[i] = t;
  }
}

static __global__ void rmsnorm_backward_kernel(float *dinp, bf16 *dinp_bf, const bf16 *dout,
                                               const float *inp, const float *w,
                                               const float *rstd, int N, int C) {
  int row = blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32, lane = threadIdx.x % 32;
  if (row >= N) return;
  const bf16 *dy = dout + (size_t)row * C;
  const float *x = inp + (size_t)row * C;
  float *dx = dinp + (size_t)row * C;
  bf16 *dxb = dinp_bf + (size_t)row * C;
  float r = rstd[row], dot = 0.0f;
  for (int i = lane; i < C; i += 32) dot += __bfloat162float(dy[i]) * w[i] * x[i];
  dot = nc_warp_sum(dot);
  float c = dot * r * r * r / (float)C;
  for (int i = lane; i < C; i += 32) {
    float v = dx[i] + (r * w[i] * __bfloat162float(dy[i]) - c * x[i]);
    dx[i] = v;
    dxb[i] = __float2bfloat16(v);
  }
}

/* grid (column tiles, chunks), block (COL_TILE, ROW_WARPS): each block sums
 * its chunk of rows of one column tile; threads stride rows, then the
 * block adds the ROW_WARPS partials in order. */
static __global__ void rmsnorm_dw_partial_kernel(float *part, const bf16 *dout, const float *inp,
                                                 const float *rstd, int N, int C, int per) {
  __shared__ float acc[ROW_WARPS][COL_TILE];
  int c = blockIdx.x * COL_TILE + threadIdx.x;
  int r0 = blockIdx.y * per, r1 = min(N, r0 + per);
  float s = 0.0f;
  if (c < C)
    for (int r = r0 + (int)threadIdx.y; r < r1; r += ROW_WARPS)
      s += __bfloat162float(dout[(size_t)r * C + c]) * inp[(size_t)r * C + c] * rstd[r];
  acc[threadIdx.y][threadIdx.x] = s;
  __syncthreads();
  if (threadIdx.y == 0 && c < C) {
    float t = 0.0f;
    for (int i = 0; i < ROW_WARPS; i++) t += acc[i][threadIdx.x];
    part[(size_t)blockIdx.y * C + c] = t;
  }
}

/* grid (column tiles), block (COL_TILE, SUM_ROWS): dw[c] += the `chunks`
 * partial rows, thread row y summing partials y, y + SUM_ROWS, ... then
 * the SUM_ROWS sums in order. */
static __global__ void rmsnorm_dw_final_kernel(float *dw, const float *part, int C, int chunks) {
  __shared__ float acc[SUM_ROWS][COL_TILE];
  int c = blockIdx.x * COL_TILE + threadIdx.x;
  float t = 0.0f;
  /* unrolled so that the loads are in flight together; the adds keep
   * their order */
  if (c < C)
#pragma unroll 8
    for (int i = threadIdx.y; i < chunks; i += SUM_ROWS) t += part[(size_t)i * C + c];
  acc[threadIdx.y][threadIdx.x] = t;
  __syncthreads();
  if (threadIdx.y == 0 && c < C) {
    float u = 0.0f;
    for (int i = 0; i < SUM_ROWS; i++) u += acc[i][threadIdx.x];
    dw[c] += u;
  }
}

template <int NJ>
static void backward_vec(float *dinp, bf16 *dinp_bf, float *part, const bf16 *dout,
                         const float *inp, const float *w, const float *rstd, int N, int C,
                         int per, cudaStream_t s) {
  rmsnorm_backward_vec_kernel<NJ><<<NC_NORM_ROW_CHUNKS, ROW_WARPS * 32, 0, s>>>(
      dinp, dinp_bf, part, dout, inp, w, rstd, N, C, per);
}

void nc_rmsnorm_backward(float *dinp, bf16 *dinp_bf, float *dw, float *part, const bf16 *dout,
                         const float *inp, const float *w, const float *rstd, int N, int C,
                         cudaStream_t s) {
  int chunks = NC_NORM_ROW_CHUNKS, per = (N + chunks - 1) / chunks;
  int nj = pieces(C);
  if (!aligned16(dinp) || !aligned16(part) || !aligned16(inp) || !aligned16(w) ||
      ((uintptr_t)dinp_bf | (uintptr_t)dout) % 8 != 0)
    nj = 0;
  switch (nj) {
    case 1: backward_vec<1>(dinp, dinp_bf, part, dout, inp, w, rstd, N, C, per, s); break;
    case 2: backward_vec<2>(dinp, dinp_bf, part, dout, inp, w, rstd, N, C, per, s); break;
    case 3: backward_vec<3>(dinp, dinp_bf, part, dout, inp, w, rstd, N, C, per, s); break;
    case 4: backward_vec<4>(dinp, dinp_bf, part, dout, inp, w, rstd, N, C, per, s); break;
    case 5: backward_vec<5>(dinp, dinp_bf, part, dout, inp, w, rstd, N, C, per, s); break;
    case 6: backward_vec<6>(dinp, dinp_bf, part, dout, inp, w, rstd, N, C, per, s); break;
    case 7: backward_vec<7>(dinp, dinp_bf, part, dout, inp, w, rstd, N, C, per, s); break;
    case 8: backward_vec<8>(dinp, dinp_bf, part, dout, inp, w, rstd, N, C, per, s); break;
    default: {
      rmsnorm_backward_kernel<<<(N + ROW_WARPS - 1) / ROW_WARPS, ROW_WARPS * 32, 0, s>>>(
          dinp, dinp_bf, dout, inp, w, rstd, N, C);
      NC_LAUNCHED();
      dim3 grid((unsigned)((C + COL_TILE - 1) / COL_TILE), (unsigned)chunks),
          block(COL_TILE, ROW_WARPS);
      rmsnorm_dw_partial_kernel<<<grid, block, 0, s>>>(part, dout, inp, rstd, N, C, per);
    }
  }
  NC_LAUNCHED();
  rmsnorm_dw_final_kernel<<<(C + COL_TILE - 1) / COL_TILE, dim3(COL_TILE, SUM_ROWS), 0, s>>>(
      dw, part, C, chunks);
  NC_LAUNCHED();
}
