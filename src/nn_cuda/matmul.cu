/* matmul.cu: every matmul of the CUDA model, through cuBLASLt: bf16
 * operands, fp32 accumulation, bf16 or fp32 results, optionally adding a
 * matrix C (fused residual adds and gradient accumulation).
 *
 * Descriptors and the heuristic's algorithm are cached per shape, types,
 * accumulation and pointer alignment, so a training step asks the
 * heuristic only in its first iteration. The alignment is part of the key
 * because an algorithm chosen for 256-byte aligned buffers may not run on
 * a per-layer slice that is less aligned. Also measures the card's bf16
 * matmul rate for MFU figures. Does not do bias or activation epilogues.
 */
#include <stdarg.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "common.cuh"

enum { WORKSPACE_BYTES = 32 << 20, PLAN_CAP = 256 };

typedef struct {
  int m, n, k;
  bool ta, tb, has_c;
  cudaDataType_t dtype;
  int align_a, align_b, align_c, align_d;
} plan_key;

typedef struct {
  plan_key key;
  cublasLtMatmulDesc_t op;
  cublasLtMatrixLayout_t la, lb, lc;
  cublasLtMatmulAlgo_t algo;
} plan;

struct nc_blas {
  cublasLtHandle_t handle;
  void *workspace;
  plan plans[PLAN_CAP];
  int n_plans;
};

bool nc_blas_init(nc_blas **out) {
  *out = NULL;
  nc_blas *b = (nc_blas *)calloc(1, sizeof *b);
  if (!b) {
    nc_error_set("out of host memory for the cuBLASLt state");
    return false;
  }
  if (!NC_BLAS(cublasLtCreate(&b->handle))) {
    free(b);
    return false;
  }
  if (!NC_CUDA(cudaMalloc(&b->workspace, WORKSPACE_BYTES))) {
    cublasLtDestroy(b->handle);
    free(b);
    return false;
  }
  *out = b;
  return true;
}

static void plan_free(plan *p) {
  if (p->op) cublasLtMatmulDescDestroy(p->op);
  if (p->la) cublasLtMatrixLayoutDestroy(p->la);
  if (p->lb) cublasLtMatrixLayoutDestroy(p->lb);
  if (p->lc) cublasLtMatrixLayoutDestroy(p->lc);
  memset(p, 0, sizeof *p);
}

void nc_blas_free(nc_blas *b) {
  if (!b) return;
  for (int i = 0; i < b->n_plans; i++) plan_free(&b->plans[i]);
  cudaFree(b->workspace);
  cublasLtDestroy(b->handle);
  free(b);
}

static int alignment(const void *p) {
  uintptr_t a = (uintptr_t)p;
  int al = 256;
  while (al > 1 && a % (uintptr_t)al) al /= 2;
  return al;
}

static bool key_eq(const plan_key *a, const plan_key *b) {
  return a->m == b->m && a->n == b->n && a->k == b->k && a->ta == b->ta && a->tb == b->tb &&
         a->has_c == b->has_c && a->dtype == b->dtype && a->align_a == b->align_a &&
         a->align_b == b->align_b && a->align_c == b->align_c && a->align_d == b->align_d;
}

static plan *plan_make(nc_blas *b, const plan_key *key) {
  for (int i = 0; i < b->n_plans; i++)
    if (key_eq(&b->plans[i].key, key)) return &b->plans[i];
  if (b->n_plans == PLAN_CAP) { /* a model has far fewer shapes; start over */
    for (int i = 0; i < b->n_plans; i++) plan_free(&b->plans[i]);
    b->n_plans = 0;
  }
  plan *p = &b->plans[b->n_plans];
  memset(p, 0, sizeof *p);
  p->key = *key;
  cublasOperation_t opa = key->ta ? CUBLAS_OP_T : CUBLAS_OP_N;
  cublasOperation_t opb = key->tb ? CUBLAS_OP_T : CUBLAS_OP_N;
  int m = key->m, n = key->n, k = key->k;
  bool ok = NC_BLAS(cublasLtMatmulDescCreate(&p->op, CUBLAS_COMPUTE_32F, CUDA_R_32F)) &&
            NC_BLAS(cublasLtMatmulDescSetAttribute(p->op, CUBLASLT_MATMUL_DESC_TRANSA, &opa,
                                                   sizeof opa)) &&
            NC_BLAS(cublasLtMatmulDescSetAttribute(p->op, CUBLASLT_MATMUL_DESC_TRANSB, &opb,
                                                   sizeof opb)) &&
            /* stored shapes: op(A) is m x k, op(B) is k x n, column-major */
            NC_BLAS(cublasLtMatrixLayoutCreate(&p->la, CUDA_R_16BF, key->ta ? k : m,
                                               key->ta ? m : k, key->ta ? k : m)) &&
            NC_BLAS(cublasLtMatrixLayoutCreate(&p->lb, CUDA_R_16BF, key->tb ? n : k,
                                               key->tb ? k : n, key->tb ? n : k)) &&
            NC_BLAS(cublasLtMatrixLayoutCreate(&p->lc, key->dtype, m, n, m));
  cublasLtMatmulPreference_t pref = NULL;
  if (ok) {
    size_t ws = WORKSPACE_BYTES;
    uint32_t aa = (uint32_t)key->align_a, ab = (uint32_t)key->align_b;
    uint32_t ac = (uint32_t)key->align_c, ad = (uint32_t)key->align_d;
    ok = NC_BLAS(cublasLtMatmulPreferenceCreate(&pref)) &&
         NC_BLAS(cublasLtMatmulPreferenceSetAttribute(
             pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof ws)) &&
         NC_BLAS(cublasLtMatmulPreferenceSetAttribute(
             pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, &aa, sizeof aa)) &&
         NC_BLAS(cublasLtMatmulPreferenceSetAttribute(
             pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, &ab, sizeof ab)) &&
         NC_BLAS(cublasLtMatmulPreferenceSetAttribute(
             pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, &ac, sizeof ac)) &&
         NC_BLAS(cublasLtMatmulPreferenceSetAttribute(
             pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, &ad, sizeof ad));
  }
  if (ok) {
    cublasLtMatmulHeuristicResult_t res;
    int found = 0;
    ok = NC_BLAS(cublasLtMatmulAlgoGetHeuristic(b->handle, p->op, p->la, p->lb, p->lc, p->lc, pref,
                                                1, &res, &found));
    if (ok && found == 0) {
      nc_error_set("cuBLASLt has no algorithm for %s%s %dx%dx%d (%s out)", key->ta ? "T" : "N",
                   key->tb ? "T" : "N", m, n, k, key->dtype == CUDA_R_32F ? "fp32" : "bf16");
      ok = false;
    }
    if (ok) p->algo = res.algo;
  }
  if (pref) cublasLtMatmulPreferenceDestroy(pref);
  if (!ok) {
    plan_free(p);
    return NULL;
  }
  b->n_plans++;
  return p;
}

bool nc_matmul(nc_blas *b, void *d, cudaDataType_t dtype, const void *c, float beta, const bf16 *a,
               bool ta, const bf16 *bm, bool tb, int m, int n, int k, cudaStream_t s) {
  DG_ASSERT(m > 0 && n > 0 && k > 0 && (beta == 0.0f || c));
  if (beta == 0.0f) c = d;
  plan_key key;
  memset(&key, 0, sizeof key);
  key.m = m, key.n = n, key.k = k, key.ta = ta, key.tb = tb, key.has_c = beta != 0.0f;
  key.dtype = dtype;
  key.align_a = alignment(a), key.align_b = alignment(bm);
  key.align_c = alignment(c), key.align_d = alignment(d);
  plan *p = plan_make(b, &key);
  if (!p) return false;
  float alpha = 1.0f;
  return NC_BLAS(cublasLtMatmul(b->handle, p->op, &alpha, a, p->la, bm, p->lb, &beta, c, p->lc, d,
                                p->lc, &p->algo, b->workspace, WORKSPACE_BYTES, s));
}

/* Row-major Y (N, OUT) = X (N, IN) . W^T is column-major Y^T = W^T' . X^T
 * where W's memory read column-major is W^T (IN x OUT): so op(A) = W with
 * transpose, op(B) = X as stored. */
bool nc_mm_forward(nc_blas *b, void *out, cudaDataType_t otype, const void *cin, float beta,
                   const bf16 *inp, const bf16 *w, int N, int IN, int OUT, cudaStream_t s) {
  return nc_matmul(b, out, otype, cin, beta, w, true, inp, false, OUT, N, IN, s);
}

bool nc_mm_backward_input(nc_blas *b, void *dinp, cudaDataType_t dtype, float beta,
                          const bf16 *dout, const bf16 *w, int N, int IN, int OUT, cudaStream_t s) {
  return nc_matmul(b, dinp, dtype, dinp, beta, w, false, dout, false, IN, N, OUT, s);
}

bool nc_mm_backward_weight(nc_blas *b, float *dw, const bf16 *dout, const bf16 *inp, int N, int IN,
                           int OUT, cudaStream_t s) {
  return nc_matmul(b, dw, CUDA_R_32F, dw, 1.0f, inp, false, dout, true, IN, OUT, N, s);
}

/* ---- the card's rate ----------------------------------------------------- */

static __global__ void fill_uniform_kernel(bf16 *x, size_t n, uint32_t seed, float amp) {
  for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
       i += (size_t)gridDim.x * blockDim.x) {
    uint32_t h = (uint32_t)i * 2654435761u ^ seed;
    h ^= h >> 15, h *= 2246822519u, h ^= h >> 13;
    x[i] = __float2bfloat16(amp * ((float)(h & 0xffff) / 32768.0f - 1.0f));
  }
}

bool nc_fill_uniform(bf16 *x, size_t n, uint32_t seed, float amp, cudaStream_t s) {
  fill_uniform_kernel<<<1024, 256, 0, s>>>(x, n, seed, amp);
  return NC_LAUNCHED();
}

int nc_cmp_float(const void *a, const void *b) {
  float x = *(const float *)a, y = *(const float *)b;
  return x < y ? -1 : x > y;
}

extern "C" bool nn_cuda_matmul_tflops(int n, int reps, double *tflops, dg_status *st) {
  if (n < 16 || n > 32768 || reps < 1 || reps > 1000)
    return dg_fail(st, DG_ERR_INVALID, "matmul rate: n %d or reps %d out of range", n, reps);
  size_t elems = (size_t)n * n;
  bf16 *a = NULL, *b = NULL, *c = NULL;
  nc_blas *bl = NULL;
  cudaEvent_t e0 = NULL, e1 = NULL;
  float *ms = (float *)calloc((size_t)reps, sizeof(float));
  bool ok = ms && NC_CUDA(cudaMalloc(&a, elems * sizeof(bf16))) &&
            NC_CUDA(cudaMalloc(&b, elems * sizeof(bf16))) &&
            NC_CUDA(cudaMalloc(&c, elems * sizeof(bf16))) && nc_blas_init(&bl) &&
            NC_CUDA(cudaEventCreate(&e0)) && NC_CUDA(cudaEventCreate(&e1));
  if (ok) {
    ok = nc_fill_uniform(a, elems, 1u, 0.5f, 0) && nc_fill_uniform(b, elems, 2u, 0.5f, 0);
  }
  for (int i = 0; ok && i < 3; i++)
    ok = nc_matmul(bl, c, CUDA_R_16BF, NULL, 0.0f, a, true, b, false, n, n, n, 0);
  for (int i = 0; ok && i < reps; i++) {
    ok = NC_CUDA(cudaEventRecord(e0, 0)) &&
         nc_matmul(bl, c, CUDA_R_16BF, NULL, 0.0f, a, true, b, false, n, n, n, 0) &&
         NC_CUDA(cudaEventRecord(e1, 0)) && NC_CUDA(cudaEventSynchronize(e1)) &&
         NC_CUDA(cudaEventElapsedTime(&ms[i], e0, e1));
  }
  if (ok) {
    qsort(ms, (size_t)reps, sizeof(float), nc_cmp_float);
    double med = ms[reps / 2];
    *tflops = 2.0 * n * (double)n * n / (med * 1e-3) / 1e12;
  }
  if (e0) cudaEventDestroy(e0);
  if (e1) cudaEventDestroy(e1);
  nc_blas_free(bl);
  cudaFree(a);
  cudaFree(b);
  cudaFree(c);
  free(ms);
  if (!ms) return dg_fail(st, DG_ERR_RUNTIME, "matmul rate: out of host memory");
  return nc_error_take(st, "matmul rate");
}
