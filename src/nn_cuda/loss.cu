/* loss.cu: the classifier's softmax + cross-entropy with per-token
 * weights, fused with the start of the backward pass (llm.c's
 * fused_classifier, with a per-token dloss instead of one scalar).
 *
 * One block per row of bf16 logits: an online max/sum pass, the row's
 * -log p(target) = log(sum) + max - z[target] into losses, then, when
 * dlosses (w / norm per token) is given, the logits are overwritten in
 * place by their gradient (softmax - onehot(target)) * dloss, so the
 * probabilities are never stored. The weighted loss sum(dloss * nll) is a
 * second, single-block pass in double in a fixed order (deterministic).
 *
 * N rows, V vocab.
 */
#include <math.h>

#include "common.cuh"

enum { CLS_THREADS = 512, SUM_THREADS = 1024 };

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

void nc_classifier(bf16 *logits, float *losses, const float *dlosses, const int *targets, int N,
                   int V, cudaStream_t s) {
  classifier_kernel<<<N, CLS_THREADS, 0, s>>>(logits, losses, dlosses, targets, V);
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
