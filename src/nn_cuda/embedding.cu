/* embedding.cu: the token embedding's forward (a gather of fp32 master
 * rows, so the residual stream starts exactly as the C reference's) and
 * its backward.
 *
 * The backward is deterministic without atomics: the host groups the
 * batch's positions by token (nc_embedding_plan, at forward time, since
 * the tokens are on the host anyway) and one block column per distinct
 * token sums that token's rows in ascending position order. Assumes token
 * ids were checked to lie in [0, V).
 *
 * N = B*T rows, C d_model, U distinct tokens in the batch.
 */
#include <stdlib.h>
#include <string.h>

#include "common.cuh"

static __global__ void embedding_forward_kernel(float *x, const int *inp, const float *wte, int N,
                                                int C) {
  size_t total = (size_t)N * C;
  for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < total;
       i += (size_t)gridDim.x * blockDim.x) {
    size_t n = i / (size_t)C, c = i % (size_t)C;
    x[i] = wte[(size_t)inp[n] * C + c];
  }
}

void nc_embedding_forward(float *x, const int *inp, const float *wte, int N, int C, cudaStream_t s) {
  embedding_forward_kernel<<<nc_grid((size_t)N * C, 256), 256, 0, s>>>(x, inp, wte, N, C);
  NC_LAUNCHED();
}

/* grid (U, column blocks): block u sums the rows of token uniq[u]. */
static __global__ void embedding_backward_kernel(float *dwte, const float *dx, const int *order,
                                                 const int *uniq, const int *start, int C) {
  int u = blockIdx.x;
  int c = blockIdx.y * blockDim.x + threadIdx.x;
  if (c >= C) return;
  float sum = 0.0f;
  for (int j = start[u]; j < start[u + 1]; j++) sum += dx[(size_t)order[j] * C + c];
  dwte[(size_t)uniq[u] * C + c] += sum;
}

void nc_embedding_backward(float *dwte, const float *dx, const int *order, const int *uniq,
                           const int *start, int U, int C, cudaStream_t s) {
  if (U == 0) return;
  dim3 grid((unsigned)U, (unsigned)((C + 127) / 128));
  embedding_backward_kernel<<<grid, 128, 0, s>>>(dwte, dx, order, uniq, start, C);
  NC_LAUNCHED();
}

static int cmp_u64(const void *a, const void *b) {
  unsigned long long x = *(const unsigned long long *)a, y = *(const unsigned long long *)b;
  return x < y ? -1 : x > y;
}

/* Positions grouped by token, ascending within a token: a counting sort
 * when the vocabulary is not much larger than the batch (O(N + V), the
 * training case), else a sort of (token << 32 | position) keys. */
int nc_embedding_plan(const int32_t *inp, int N, int V, int *order, int *uniq, int *start) {
  int U = 0;
  if (V <= 4 * N + 1024) {
    int *count = (int *)dg_calloc((size_t)V + 1, sizeof(int));
    for (int i = 0; i < N; i++) count[inp[i] + 1]++;
    for (int v = 0; v < V; v++) {
      if (count[v + 1] > 0) {
        uniq[U] = v;
        start[U] = count[v];
        U++;
      }
      count[v + 1] += count[v]; /* count[v] becomes the first slot of token v */
    }
    for (int i = 0; i < N; i++) order[count[inp[i]]++] = i;
    free(count);
  } else {
    unsigned long long *keys =
        (unsigned long long *)dg_malloc(sizeof(unsigned long long) * (size_t)(N > 0 ? N : 1));
    for (int i = 0; i < N; i++)
      keys[i] = ((unsigned long long)(uint32_t)inp[i] << 32) | (unsigned long long)(uint32_t)i;
    qsort(keys, (size_t)N, sizeof *keys, cmp_u64);
    for (int i = 0; i < N; i++) {
      int tok = (int)(keys[i] >> 32);
      order[i] = (int)(keys[i] & 0xffffffffu);
      if (U == 0 || uniq[U - 1] != tok) {
        uniq[U] = tok;
        start[U] = i;
        U++;
      }
    }
    free(keys);
  }
  start[U] = N;
  return U;
}
