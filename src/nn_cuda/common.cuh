/* common.cuh: what the CUDA model's files share: the check macros that
 * turn CUDA and cuBLASLt failures into a recorded error, warp and block
 * reductions, and the host-side launchers of each layer family.
 *
 * Errors: every CUDA and cuBLASLt call goes through NC_CUDA / NC_BLAS,
 * which record the first failure (call, file:line, message) in a
 * per-process slot; the public functions end with nc_error_take, which
 * moves it into their dg_status. Launchers are asynchronous on the stream
 * they are given; none synchronizes.
 *
 * Shapes: N = B*T rows; bf16 is __nv_bfloat16. Row-major throughout.
 */
#ifndef DRAGON_NN_CUDA_COMMON_CUH
#define DRAGON_NN_CUDA_COMMON_CUH

#include <cublasLt.h>
#include <cuda_bf16.h>
#include <cuda_runtime.h>

extern "C" {
#include "dragon/base.h"
#include "dragon/nn.h"
}
#include "dragon/nn_cuda.h"

typedef __nv_bfloat16 bf16;

/* ---- errors -------------------------------------------------------------- */

bool nc_cuda_ok(cudaError_t e, const char *expr, const char *file, int line);
bool nc_blas_ok(cublasStatus_t s, const char *expr, const char *file, int line);
void nc_error_set(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
bool nc_error_pending(void);
/* Moves a recorded error into st (prefixed with `where`) and returns
 * false; returns true when none was recorded. */
bool nc_error_take(dg_status *st, const char *where);

#define NC_CUDA(x) nc_cuda_ok((x), #x, __FILE__, __LINE__)
#define NC_BLAS(x) nc_blas_ok((x), #x, __FILE__, __LINE__)
#define NC_LAUNCHED() nc_cuda_ok(cudaGetLastError(), "kernel launch", __FILE__, __LINE__)

/* Blocks for n items at `threads` per block, capped for grid-stride loops. */
static inline unsigned nc_grid(size_t n, int threads) {
  size_t g = (n + (size_t)threads - 1) / (size_t)threads;
  if (g < 1) g = 1;
  return g > 65535u * 16u ? 65535u * 16u : (unsigned)g;
}

/* ---- reductions ---------------------------------------------------------- */

__device__ __forceinline__ float nc_warp_sum(float v) {
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}
__device__ __forceinline__ float nc_warp_max(float v) {
  for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
  return v;
}

/* ---- matmul (matmul.cu) -------------------------------------------------- */

/* cuBLASLt handle, workspace and a cache of descriptors and algorithms. */
typedef struct nc_blas nc_blas;
bool nc_blas_init(nc_blas **out);
void nc_blas_free(nc_blas *b);
/* Column-major D (m x n) = op(A) . op(B) + beta * C with A, B bf16, fp32
 * accumulation; D and C of type dtype (CUDA_R_16BF or CUDA_R_32F); C may
 * equal D, or be NULL when beta is 0. Packed: lda = ta ? k : m, ldb = tb ?
 * n : k, ldc = m. */
bool nc_matmul(nc_blas *b, void *d, cudaDataType_t dtype, const void *c, float beta, const bf16 *a,
               bool ta, const bf16 *bm, bool tb, int m, int n, int k, cudaStream_t s);

/* Row-major wrappers for y = x . W^T with W (OUT, IN):
 * out (N, OUT) = inp (N, IN) . w^T + beta * cin */
bool nc_mm_forward(nc_blas *b, void *out, cudaDataType_t otype, const void *cin, float beta,
                   const bf16 *inp, const bf16 *w, int N, int IN, int OUT, cudaStream_t s);
/* dinp (N, IN) = dout (N, OUT) . w + beta * dinp */
bool nc_mm_backward_input(nc_blas *b, void *dinp, cudaDataType_t dtype, float beta,
                          const bf16 *dout, const bf16 *w, int N, int IN, int OUT, cudaStream_t s);
/* Benchmark inputs: x[i] uniform in [-amp, amp), a hash of i and seed. */
bool nc_fill_uniform(bf16 *x, size_t n, uint32_t seed, float amp, cudaStream_t s);
/* qsort's comparison for ascending floats (medians of timed runs) */
int nc_cmp_float(const void *a, const void *b);
/* dw (OUT, IN) += dout^T . inp, fp32 */
bool nc_mm_backward_weight(nc_blas *b, float *dw, const bf16 *dout, const bf16 *inp, int N, int IN,
                           int OUT, cudaStream_t s);

/* ---- layers -------------------------------------------------------------- */

/* embedding.cu: x (N, C) = wte[inp]; dwte[tok] += sum of dx over the
 * positions of tok, in position order (order (N), uniq (U), start (U+1)
 * from nc_embedding_plan: positions grouped by token, ascending). */
void nc_embedding_forward(float *x, const int *inp, const float *wte, int N, int C, cudaStream_t s);
void nc_embedding_backward(float *dwte, const float *dx, const int *order, const int *uniq,
                           const int *start, int U, int C, cudaStream_t s);
/* Host side: groups positions by token (tokens in [0, V)). order and uniq
 * hold N ints, start N + 1; returns U. */
int nc_embedding_plan(const int32_t *inp, int N, int V, int *order, int *uniq, int *start);

/* rmsnorm.cu: out = inp * rstd * w (bf16 out, fp32 in). Backward from
 * dout (bf16): dinp += ..., dinp_bf = bf16(dinp), and dw += sum over rows of
 * dout * inp * rstd through `part` (NC_NORM_ROW_CHUNKS * C floats, one
 * partial row per chunk of rows). */
void nc_rmsnorm_forward(bf16 *out, float *rstd, const float *inp, const float *w, int N, int C,
                        float eps, cudaStream_t s);
/* The same on the row inp + add (add bf16), which goes to sum as well. */
void nc_rmsnorm_forward_add(bf16 *out, float *rstd, float *sum, const float *inp, const bf16 *add,
                            const float *w, int N, int C, float eps, cudaStream_t s);
enum { NC_NORM_ROW_CHUNKS = 1024 };
void nc_rmsnorm_backward(float *dinp, bf16 *dinp_bf, float *dw, float *part, const bf16 *dout,
                         const float *inp, const float *w, const float *rstd, int N, int C,
                         cudaStream_t s);

/* rope.cu: rotate-half RoPE in place on q (B, T, NH, HD) and k (B, T,
 * NKV, HD), whose tokens are ld elements apart, in one launch. */
void nc_rope_qk(bf16 *q, bf16 *k, size_t ld, const float *cosb, const float *sinb, int B, int T,
                int NH, int NKV, int HD, cudaStream_t s);

/* swiglu.cu: out (N, F) = silu(h1) * h3 where a row of h13 (N, 2F) is h1
 * then h3; the backward writes dh13 in the same layout. */
void nc_swiglu_forward(bf16 *out, const bf16 *h13, int N, int F, cudaStream_t s);
void nc_swiglu_backward(bf16 *dh13, const bf16 *dout, const bf16 *h13, int N, int F,
                        cudaStream_t s);

/* attention.cu: causal attention, q (B, T, NH, HD), k and v (B, T, NKV,
 * HD), each with tokens ld elements apart (ld a multiple of 8: the model's
 * fused q|k|v rows), out (B, T, NH, HD) packed, lse (B, NH, T) the
 * log-sum-exp of each row of scaled scores. Backward: delta (B, NH, T)
 * scratch; writes dq, dk, dv (tokens ld apart too); with
 * rope_cos/rope_sin (max T, HD/2) non-NULL, dq and dk come out rotated
 * back by RoPE (q and k being the rotated ones), else as they are. */
bool nc_attention_supported(int HD);
bool nc_attention_forward(bf16 *out, float *lse, const bf16 *q, const bf16 *k, const bf16 *v,
                          size_t ld, int B, int T, int NH, int NKV, int HD, cudaStream_t s);
bool nc_attention_backward(bf16 *dq, bf16 *dk, bf16 *dv, float *delta, const bf16 *dout,
                           const bf16 *out, const float *lse, const bf16 *q, const bf16 *k,
                           const bf16 *v, size_t ld, int B, int T, int NH, int NKV, int HD,
                           const float *rope_cos, const float *rope_sin, cudaStream_t s);

/* loss.cu: per row of logits (N, V): losses = -log softmax[target]; with
 * dlosses non-NULL overwrites logits with (softmax - onehot) * dlosses.
 * nc_loss_sum: *out = sum dlosses * losses (fixed order, double). */
void nc_classifier(bf16 *logits, float *losses, const float *dlosses, const int *targets, int N,
                   int V, cudaStream_t s);
void nc_loss_sum(double *out, const float *losses, const float *dlosses, int N, cudaStream_t s);

/* adamw.cu: sum of squares of g (n floats) into *out (fixed order, double
 * via `part` of NC_NORM_BLOCKS doubles); AdamW over one tensor reading the
 * clip scale from the device norm. */
enum { NC_NORM_BLOCKS = 512 };
void nc_sumsq(double *out, double *part, const float *g, size_t n, cudaStream_t s);
void nc_adamw(float *p, bf16 *p_bf, float *mom, float *var, const float *g, size_t n,
              const double *sumsq, float clip, float lr, float beta1, float beta2, float eps,
              float wd, float bc1, float bc2, cudaStream_t s);
/* out = bf16(in), n floats */
void nc_to_bf16(bf16 *out, const float *in, size_t n, cudaStream_t s);

/* nccl.cu: sum over the ranks, in place on the device. */
bool nc_dp_allreduce(nn_cuda_dp *dp, void *buf, size_t count, bool f64, cudaStream_t s);

#endif
