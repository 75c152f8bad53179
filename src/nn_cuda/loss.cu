/* loss.cu: the classifier's softmax + cross-entropy with per-token
 * weights, fused with the start of the backward pass (llm.c's
 * fused_classifier, with a per-token dloss instead of one scalar).
 *
 * One block per row of bf16 logits: the row's max and sum of exp, the
 * row's -log p(target) = log(sum) + max - z[target] into losses, then,
 * when dlosses (w / norm per token) is given, the logits are overwritten
 * in place by their gradient (softmax - onehot(target)) * dloss, so the
 * probabilities are never stored. Where V is a multiple of 8 up to 32768
 * the row is read once, 16 bytes at a time, and kept in registers (one
 * read and one write of the logits); otherwise an online max/sum pass
 * reads it twice. Block reductions run in a fixed order. The weighted loss
 * sum(dloss * nll) is a second, single-block pass in double in a fixed
 * order (deterministic).
 *
 * N rows, V vocab.
 */
#include <math.h>
#include <stdint.h>

#include "common.cuh"

enum { CLS_THREADS = 512, SUM_THREADS = 1024, VEC_THREADS = 256, VEC_MAX = 16 };

/* The same value in every thread: the block's max (or sum) of v, warps
 * combined in order. red holds VEC_THREADS / 32 floats. */
static __device__ __forceinline__ float block_reduce(float v, bool is_max, float *red) {
  v = is_max ? nc_warp_max(v) : nc_warp_sum(v);
  __syncthreads(); /* red's last readers are done */
  if (threadIdx.x % 32 == 0) red[threadIdx.x / 32] = v;
  __syncthreads();
  float t = red[0];
  for (int w = 1; w < VEC_THREADS / 32; w++) t = is_max ? fmaxf(t, red[w]) : t + red[w];
  return t;
}

/* Thread x holds the 8-element pieces x + j * VEC_THREADS, j < NV. */
template <int NV>
static __global__ void __launch_bounds__(VEC_THREADS)
    classifier_vec_kernel(bf16 *logits, float *losses, const float *dlosses, const int *targets,
                          int V) {
  __shared__ float red[VEC_THREADS / 32];
  size_t row = blockIdx.x;
  uint4 *z8 = (uint4 *)(logits + row * (size_t)V);
  int V8 = V / 8;
  uint4 raw[NV];
  float mx = -INFINITY;
#pragma unroll
  for (int j = 0; j < NV; j++) {
    int i = threadIdx.x + j * VEC_THREADS;
    if (i >= V8) continue;
    raw[j] = z8[i];
    const __nv_bfloat162 *h = (const __nv_bfloat162 *)&raw[j];
#pragma unroll
    for (int e = 0; e < 4; e++) {
      float2 f = __bfloat1622float2(h[e]);
      mx = fmaxf(mx, fmaxf(f.x, f.y));
    }
  }
  float M = block_reduce(mx, true, red);
  /* up to 4 pieces (V <= 8192) the exponentials stay in registers for the
   * gradient, so each is computed once */
  constexpr bool KEEP = NV <= 4;
  float ex[KEEP ? NV : 1][8];
  float sum = 0.0f;
#pragma unroll
  for (int j = 0; j < NV; j++) {
    int i = threadIdx.x + j * VEC_THREADS;
    if (i >= V8) continue;
    const __nv_bfloat162 *h = (const __nv_bfloat162 *)&raw[j];
#pragma unroll
    for (int e = 0; e < 4; e++) {
      float2 f = __bfloat1622float2(h[e]);
      float e0 = __expf(f.x - M), e1 = __expf(f.y - M);
      if (KEEP) ex[KEEP ? j : 0][2 * e] = e0, ex[KEEP ? j : 0][2 * e + 1] = e1;
      sum += e0 + e1;
    }
  }
  float S = block_reduce(sum, false, red);
  int tg = targets[row];
  float inv = 1.0f / S, d = dlosses ? dlosses[row] : 0.0f;
#pragma unroll
  for (int j = 0; j < NV; j++) {
    int i = threadIdx.x + j * VEC_THREADS;
    if (i >= V8) continue;
    __nv_bfloat162 *h = (__nv_bfloat162 *)&raw[j];
    if (i == tg / 8) {
      float2 f = __bfloat1622float2(h[(tg % 8) / 2]);
      losses[row] = logf(S) + M - (tg % 2 ? f.y : f.x);
    }
    if (!dlosses) continue;
#pragma unroll
    for (int e = 0; e < 4; e++) {
      int c = i * 8 + 2 * e;
      float e0, e1;
      if (KEEP) {
        e0 = ex[KEEP ? j : 0][2 * e];
        e1 = ex[KEEP ? j : 0][2 * e + 1];
      } else {
        float2 f = __bfloat1622float2(h[e]);
        e0 = __expf(f.x - M);
        e1 = __expf(f.y - M);
      }
      float g0 = (e0 * inv - (c == tg ? 1.0f : 0.0f)) * d;
      float g1 = (e1 * inv - (c + 1 == tg ? 1.0f : 0.0f)) * d;
      h[e] = __floats2bfloat162_rn(g0, g1);
    }
    z8[i] = raw[j];
  }
}

/* Merges running (max, sum of exp(z - max)) pairs. */
static __device__ __forceinline__ void ms_merge(float &m, float &s, float m2, float s2) {
  float mx = fmaxf(m, m2);
  if (mx == -INFINITY) return; /* both empty */
  s = s * __expf(m - mx) + s2 * __expf(m2 - mx);
  m = mx;
}

static __global__ void classifier_kernel(bf16 *logits, float *losses, const float *dlosses,
                                         const int *targets, int V) {
  __shared__ float sm[CLS_THREADS / 32], ss[CLS_THREADS / 32];
  __shared__ float row_m, row_s;
  size_t row = blockIdx.x;
  bf16 *z = logits + row * (size_t)V;
  float m = -INFINITY, s = 0.0f;
  for (int j = threadIdx.x; j < V; j += blockDim.x) {
    float v = __bfloat162float(z[j]);
    if (v > m) {
      s = s * __expf(m - v) + 1.0f;
      m = v;
    } else {
      s += __expf(v - m);
    }
  }
  for (int o = 16; o > 0; o >>= 1) {
    float m2 = __shfl_xor_sync(0xffffffffu, m, o), s2 = __shfl_xor_sync(0xffffffffu, s, o);
    ms_merge(m, s, m2, s2);
  }
  int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  if (lane == 0) sm[warp] = m, ss[warp] = s;
  __syncthreads();
  if (threadIdx.x == 0) {
    float M = sm[0], S = ss[0];
    for (int w = 1; w < (int)blockDim.x / 32; w++) ms_merge(M, S, sm[w], ss[w]);
    row_m = M;
    row_s = S;
    int tg = targets[row];
    losses[row] = logf(S) + M - __bfloat162float(z[tg]);
  }
  __syncthreads();
  if (!dlosses) return;
  float M = row_m, inv = 1.0f / row_s, d = dlosses[row];
  int tg = targets[row];
  for (int j = threadIdx.x; j < V; j += blockDim.x) {
    float p = __expf(__bfloat162float(z[j]) - M) * inv;
    z[j] = __float2bfloat16((p - (j == tg ? 1.0f : 0.0f)) * d);
  }
}

template <int NV>
static void classifier_vec(bf16 *logits, float *losses, const float *dlosses, const int *targets,
                           int N, int V, cudaStream_t s) {
  classifier_vec_kernel<NV><<<N, VEC_THREADS, 0, s>>>(logits, losses, dlosses, targets, V);
}

void nc_classifier(bf16 *logits, float *losses, const float *dlosses, const int *targets, int N,
                   int V, cudaStream_t s) {
  int nv = (V / 8 + VEC_THREADS - 1) / VEC_THREADS;
  if (V % 8 != 0 || (uintptr_t)logits % 16 != 0 || nv > VEC_MAX) nv = 0;
  if (nv == 0) classifier_kernel<<<N, CLS_THREADS, 0, s>>>(logits, losses, dlosses, targets, V);
  else if (nv <= 1) classifier_vec<1>(logits, losses, dlosses, targets, N, V, s);
  else if (nv <= 2) classifier_vec<2>(logits, losses, dlosses, targets, N, V, s);
  else if (nv <= 4) classifier_vec<4>(logits, losses, dlosses, targets, N, V, s);
  else if (nv <= 8) classifier_vec<8>(logits, losses, dlosses, targets, N, V, s);
  else classifier_vec<16>(logits, losses, dlosses, targets, N, V, s);
  NC_LAUNCHED();
}

static __global__ void loss_sum_kernel(double *out, const float *losses, const float *dlosses,
                                       int N) {
  __shared__ double buf[SUM_THREADS];
  double t = 0.0;
  for (int i = threadIdx.x; i < N; i += blockDim.x) t += (double)dlosses[i] * (double)losses[i];
  buf[threadIdx.x] = t;
  __syncthreads();
  for (int w = SUM_THREADS / 2; w > 0; w >>= 1) {
    if ((int)threadIdx.x < w) buf[threadIdx.x] += buf[threadIdx.x + w];
    __syncthreads();
  }
  if (threadIdx.x == 0) *out = buf[0];
}

void nc_loss_sum(double *out, const float *losses, const float *dlosses, int N, cudaStream_t s) {
  loss_sum_kernel<<<1, SUM_THREADS, 0, s>>>(out, losses, dlosses, N);
  NC_LAUNCHED();
}
