/* decode.cu: batched KV-cache decoding and sampling on the GPU with the
 * weights of a CUDA training model (nn_cuda.h, docs/model-cuda.md).
 *
 * Prefill: the prompts of a group of rows, right-padded to the group's
 * longest, go through the training forward's kernels (embedding, RMSNorm,
 * cuBLASLt matmuls, RoPE, the flash-style causal attention, SwiGLU). The
 * padding comes after each row's tokens, so causal attention never lets a
 * real token see it; the keys and values of every position are copied
 * into the cache, and the padded ones are overwritten by later steps
 * before anything reads them. Only the hidden state at each row's last
 * prompt token goes on to the final norm and the LM head.
 *
 * Step: one token per row, each at its own position. A kernel rotates q
 * and k (RoPE at the row's position) and appends k and v to the cache; the
 * decode attention kernel (one block per row and kv head, up to 8 query
 * heads of the group together, so a cache row is read once per group)
 * scores the query against the row's cached keys, softmaxes in fp32 and
 * sums the values. Rows that are not fed get position -1 and are skipped.
 *
 * Precision: as the training forward (docs/model-cuda.md): fp32 residual
 * stream, bf16 matmul operands, the cache in bf16 (k after RoPE), scores
 * and softmax in fp32, logits in fp32.
 *
 * Sampling on the device with the C reference's rule (sample_rule.h):
 * greedy is an argmax per row; otherwise the (logit / temperature, id)
 * keys of each row are sorted by CUB's segmented radix sort, exp(z - z0)
 * is computed for every candidate in parallel, and one thread per row runs
 * the reference's sequential top-k / top-p / draw in double. The uniform
 * draws come from the host, from each row's own RNG, so a row draws
 * exactly what nn_generate's row draws.
 *
 * Not here: paged or shared prompt caches, CUDA graphs, split-K
 * attention for very long caches, speculative decoding.
 *
 * B rows (capacity), n rows in use, T positions per row; the config's
 * letters are nn.h's.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include <cub/device/device_segmented_radix_sort.cuh>

#include "common.cuh"
#include "model_view.cuh"
#include "sample_rule.h"

enum {
  PREFILL_TOKENS = 32768, /* default rows x padded length per prefill group */
  SORT_ROWS = 256,        /* rows per segmented sort */
  ATT_THREADS = 256,      /* decode attention block */
  ATT_GMAX = 8,           /* query heads per decode attention block */
  ALIGN_BYTES = 256,
};

/* ---- memory ------------------------------------------------------------- */

/* One allocation per group from a size table: each item's pointer and
 * bytes, carved in order at ALIGN_BYTES. */
typedef struct {
  void **ptr;
  double bytes;
} carve_item;

static double carve_total(const carve_item *it, int n) {
  double t = 0;
  for (int i = 0; i < n; i++) t += ceil(it[i].bytes / ALIGN_BYTES) * ALIGN_BYTES;
  return t;
}

/* Points the items into mem, in order. */
static void carve_at(unsigned char *mem, const carve_item *it, int n) {
  for (int i = 0; i < n; i++) {
    *it[i].ptr = mem;
    mem += (size_t)(ceil(it[i].bytes / ALIGN_BYTES) * ALIGN_BYTES);
  }
}

static bool carve(unsigned char **mem, const carve_item *it, int n, const char *what) {
  double total = carve_total(it, n);
  cudaError_t e = cudaMalloc((void **)mem, (size_t)total);
  if (e != cudaSuccess) {
    cudaGetLastError();
    *mem = NULL;
    nc_error_set("out of device memory allocating %s (%.3g GiB): %s", what, total / 1073741824.0,
                 cudaGetErrorString(e));
    return false;
  }
  carve_at(*mem, it, n);
  return true;
}

struct nn_cuda_kv {
  nc_model_view w;
  nn_config cfg;
  int B, T, n;   /* capacity rows and positions; rows of the last prefill */
  int prefill_tokens; /* rows x padded length per prefill group */
  int *pos;      /* (B) host: positions filled per row */
  nc_blas *blas; /* own handle and workspace, on the model's stream */
  unsigned char *cache_mem, *step_mem, *pre_mem, *samp_mem;
  double pre_bytes;
  int samp_rows;
  /* the cache, (L, B, T, KVD) each */
  bf16 *kc, *vc;
  /* one step of B rows */
  float *x;      /* (B, C) residual stream */
  bf16 *ln;      /* (B, C) */
  float *rstd;   /* (B) */
  bf16 *qkv;     /* (B, QD|KVD|KVD) the new position's q, k, v */
  bf16 *q;       /* (B, QD) its q after RoPE */
  bf16 *atty;    /* (B, QD) */
  bf16 *h13;     /* (B, F|F) gate, up */
  bf16 *hg;      /* (B, F) */
  float *logits; /* (B, V) */
  float *att;    /* (B, NH, T) scores, then probabilities */
  int *io;       /* (2B) tokens, then positions (-1: row not fed) */
  int *tok;      /* (B) sampled tokens */
  int *gather;   /* (2B) prefill: the row of each prompt's last token, then each prompt's cache row */
  double *u;     /* (B) uniform draws, -1 for rows not sampled */
  int *h_io;     /* pinned (2B) */
  int *h_tok;    /* pinned (B) */
  double *h_u;   /* pinned (B) */
  /* prefill scratch for N = rows x padded length */
  float *px, *prstd, *plse;
  bf16 *pln, *pqkv, *patty, *ph13, *phg;
  int *pin;
  /* sampling scratch for samp_rows rows */
  uint64_t *keys, *sorted;
  double *e;
  int *seg;
  void *sort_tmp;
  size_t sort_tmp_bytes;
};

/* Layer l of a tensor (l = 0 for the global ones): fp32 and bf16. */
static const float *wf(const nn_cuda_kv *c, nn_param_id id, int l) {
  return c->w.params + nc_at(&c->w.layout, id, l);
}
static const bf16 *wb(const nn_cuda_kv *c, nn_param_id id, int l) {
  return c->w.params_bf + nc_at(&c->w.layout, id, l);
}

extern "C" void nn_cuda_kv_free(nn_cuda_kv *c) {
  if (!c) return;
  cudaFree(c->cache_mem);
  cudaFree(c->step_mem);
  cudaFree(c->pre_mem);
  cudaFree(c->samp_mem);
  if (c->h_io) cudaFreeHost(c->h_io);
  if (c->h_tok) cudaFreeHost(c->h_tok);
  if (c->h_u) cudaFreeHost(c->h_u);
  nc_blas_free(c->blas);
  free(c->pos);
  free(c);
}

enum { STEP_ITEMS = 14 };

/* Bytes of the cache and of the step buffers for B rows of T positions. */
static void kv_sizes(const nn_config *g, int B, int T, double *cache, carve_item *it, int *n_it,
                     nn_cuda_kv *c) {
  double L = g->n_layers, C = g->d_model, V = g->vocab_size, F = g->ffn_hidden, NH = g->n_heads;
  double QD = NH * g->head_dim, KVD = (double)g->n_kv_heads * g->head_dim, Bd = B, Td = T;
  *cache = 2.0 * 2.0 * L * Bd * Td * KVD;
  carve_item t[] = {
      {(void **)&c->x, 4 * Bd * C},       {(void **)&c->ln, 2 * Bd * C},
      {(void **)&c->rstd, 4 * Bd},        {(void **)&c->q, 2 * Bd * QD},
      {(void **)&c->qkv, 2 * Bd * (QD + 2 * KVD)},
      {(void **)&c->atty, 2 * Bd * QD},   {(void **)&c->h13, 2 * Bd * 2 * F},
      {(void **)&c->hg, 2 * Bd * F},
      {(void **)&c->logits, 4 * Bd * V},  {(void **)&c->att, 4 * Bd * NH * Td},
      {(void **)&c->io, 4 * 2 * Bd},      {(void **)&c->tok, 4 * Bd},
      {(void **)&c->gather, 8 * Bd},      {(void **)&c->u, 8 * Bd},
  };
  static_assert(sizeof t / sizeof t[0] == STEP_ITEMS, "the step buffer table");
  *n_it = STEP_ITEMS;
  memcpy(it, t, sizeof t);
}

extern "C" bool nn_cuda_kv_init(nn_cuda_kv **out, nn_cuda_model *m, int B, int T, dg_status *st) {
  *out = NULL;
  const nn_config *g = nn_cuda_model_config(m);
  if (!nn_cuda_config_check(g, st)) return false;
  if (B < 1 || B > 65535)
    return dg_fail(st, DG_ERR_INVALID, "CUDA KV cache: %d rows is out of range [1, 65535]", B);
  if (T < 1 || T > g->max_seq_len)
    return dg_fail(st, DG_ERR_INVALID, "CUDA KV cache: %d positions is out of range [1, %d]", T,
                   g->max_seq_len);
  if ((double)B * g->vocab_size > 1.0e12 || (double)B * g->n_heads * T > 1.0e12)
    return dg_fail(st, DG_ERR_INVALID, "CUDA KV cache: %d rows of %d positions is too large", B, T);
  nn_cuda_kv *c = (nn_cuda_kv *)calloc(1, sizeof *c);
  if (!c) return dg_fail(st, DG_ERR_RUNTIME, "CUDA KV cache: out of host memory");
  nc_model_view_get(m, &c->w);
  c->cfg = *g;
  c->B = B;
  c->T = T;
  c->prefill_tokens = PREFILL_TOKENS;
  carve_item it[STEP_ITEMS];
  int n_it = 0;
  double cache = 0;
  kv_sizes(g, B, T, &cache, it, &n_it, c);
  DG_ASSERT(n_it == STEP_ITEMS);
  double need = cache + carve_total(it, n_it);
  size_t free_b = 0, total_b = 0;
  bool ok = NC_CUDA(cudaMemGetInfo(&free_b, &total_b));
  if (ok && need > (double)free_b) {
    nn_cuda_kv_free(c);
    return dg_fail(st, DG_ERR_INVALID,
                   "CUDA KV cache: %d rows of %d positions need %.3g GiB of device memory, %.3g "
                   "GiB are free",
                   B, T, need / 1073741824.0, (double)free_b / 1073741824.0);
  }
  carve_item kv[] = {{(void **)&c->kc, cache / 2}, {(void **)&c->vc, cache / 2}};
  c->pos = (int *)calloc((size_t)B, sizeof(int));
  if (ok && !c->pos) {
    nc_error_set("out of host memory");
    ok = false;
  }
  ok = ok && nc_blas_init(&c->blas) && carve(&c->cache_mem, kv, 2, "the KV cache") &&
       carve(&c->step_mem, it, n_it, "the decode buffers") &&
       NC_CUDA(cudaMallocHost((void **)&c->h_io, sizeof(int) * 2 * (size_t)B)) &&
       NC_CUDA(cudaMallocHost((void **)&c->h_tok, sizeof(int) * (size_t)B)) &&
       NC_CUDA(cudaMallocHost((void **)&c->h_u, sizeof(double) * (size_t)B));
  if (!ok) {
    nn_cuda_kv_free(c);
    return nc_error_take(st, "CUDA KV cache");
  }
  *out = c;
  return true;
}

extern "C" void nn_cuda_kv_set_prefill_tokens(nn_cuda_kv *c, int tokens) {
  DG_ASSERT(tokens >= 1);
  c->prefill_tokens = tokens;
}

extern "C" int nn_cuda_kv_pos(const nn_cuda_kv *c, int b) {
  DG_ASSERT(b >= 0 && b < c->B);
  return c->pos[b];
}

/* Positions live on the host and go with each step's tokens, so taking a
 * row back is setting its count: the next step writes over what followed. */
extern "C" void nn_cuda_kv_set_pos(nn_cuda_kv *c, int b, int pos) {
  DG_ASSERT(b >= 0 && b < c->n && pos >= 1 && pos <= c->pos[b]);
  c->pos[b] = pos;
}

/* ---- kernels -------------------------------------------------------------- */

/* 8 bf16 (16 bytes) to float: a bf16 is the top half of a float, and the
 * first element of a pair sits in the low half of its word. */
static __device__ __forceinline__ void load8(uint4 raw, float *f) {
  unsigned w[4] = {raw.x, raw.y, raw.z, raw.w};
#pragma unroll
  for (int i = 0; i < 4; i++) {
    f[2 * i] = __uint_as_float(w[i] << 16);
    f[2 * i + 1] = __uint_as_float(w[i] & 0xffff0000u);
  }
}

/* dst row to[r] = src row rows[r], r < n (rows of C floats) */
static __global__ void move_rows_kernel(float *dst, const int *to, const float *src, const int *rows, int n,
                                        int C) {
  size_t total = (size_t)n * C;
  for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < total;
       i += (size_t)gridDim.x * blockDim.x) {
    size_t r = i / (size_t)C, col = i % (size_t)C;
    dst[(size_t)to[r] * C + col] = src[(size_t)rows[r] * C + col];
  }
}

/* The keys and values of a prefill group: row r's positions 0..Tc-1 of
 * qkv (rows x Tc tokens of QD|KVD|KVD) into row to[r] of the layer's
 * cache (B, T, KVD). Eight elements (16 bytes) a thread. */
static __global__ void cache_fill_kernel(bf16 *kc, bf16 *vc, const bf16 *qkv, int rows, int Tc,
                                         int T, const int *to, int QD, int KVD) {
  int ld = QD + 2 * KVD, per = KVD / 8;
  size_t total = (size_t)rows * Tc * per;
  for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < total;
       i += (size_t)gridDim.x * blockDim.x) {
    int c8 = (int)(i % (size_t)per) * 8;
    size_t tok = i / (size_t)per; /* r * Tc + p */
    size_t r = tok / (size_t)Tc, p = tok % (size_t)Tc;
    const bf16 *src = qkv + tok * ld + QD + c8;
    size_t dst = ((size_t)to[r] * T + p) * KVD + c8;
    *(uint4 *)(kc + dst) = *(const uint4 *)src;
    *(uint4 *)(vc + dst) = *(const uint4 *)(src + KVD);
  }
}

/* RoPE of the new q (into q (n, QD)) and k at each row's position, as
 * rope.cu (same tables and formula), read from the rows of qkv (n,
 * QD|KVD|KVD); k and v go into the layer's cache (B, T, KVD) at that
 * position. Rows at position -1 are left alone. One thread per rotated
 * pair (or copied pair of v). */
static __global__ void rope_append_kernel(bf16 *q, const bf16 *qkv, bf16 *kc, bf16 *vc,
                                          const int *pos, const float *cosb, const float *sinb,
                                          int n, int NH, int NKV, int HD, int T) {
  int hd2 = HD / 2, slots = NH + 2 * NKV, QD = NH * HD, KVD = NKV * HD, ld = QD + 2 * KVD;
  size_t total = (size_t)n * slots * hd2;
  for (size_t idx = blockIdx.x * (size_t)blockDim.x + threadIdx.x; idx < total;
       idx += (size_t)gridDim.x * blockDim.x) {
    int i = (int)(idx % (size_t)hd2);
    size_t r = idx / (size_t)hd2;
    int slot = (int)(r % (size_t)slots), b = (int)(r / (size_t)slots);
    int p = pos[b];
    if (p < 0) continue;
    if (slot < NH + NKV) {
      const bf16 *src;
      bf16 *dst;
      if (slot < NH) {
        dst = q + (size_t)b * QD + (size_t)slot * HD;
        src = qkv + (size_t)b * ld + (size_t)slot * HD;
      } else {
        int h = slot - NH;
        src = qkv + (size_t)b * ld + QD + (size_t)h * HD;
        dst = kc + ((size_t)b * T + p) * KVD + (size_t)h * HD;
      }
      float cs = cosb[(size_t)p * hd2 + i], sn = sinb[(size_t)p * hd2 + i];
      float x1 = __bfloat162float(src[i]), x2 = __bfloat162float(src[i + hd2]);
      dst[i] = __float2bfloat16(x1 * cs - x2 * sn);
      dst[i + hd2] = __float2bfloat16(x2 * cs + x1 * sn);
    } else {
      int h = slot - NH - NKV;
      const bf16 *src = qkv + (size_t)b * ld + QD + KVD + (size_t)h * HD;
      bf16 *dst = vc + ((size_t)b * T + p) * KVD + (size_t)h * HD;
      dst[i] = src[i];
      dst[i + hd2] = src[i + hd2];
    }
  }
}

/* One query per (row, head) against the row's cached positions 0..pos.
 * grid (NKV * ceil(G / ATT_GMAX), n): a block takes one kv head and up to
 * ATT_GMAX of its G query heads. Phase 1: a thread per key computes the
 * scaled scores of all the block's heads (the key row read once, 16 bytes
 * at a time), keeping them in att and a running max; phase 2 turns them
 * into exp(s - max) and sums; phase 3: HD / 8 threads per value row, 8
 * dims each, strided over the keys, then the key strides are added in a
 * fixed order. Deterministic. out (n, QD) bf16. */
template <int HD>
static __global__ void __launch_bounds__(ATT_THREADS)
    decode_attention_kernel(bf16 *out, float *att, const bf16 *q, const bf16 *kc, const bf16 *vc,
                            const int *pos, int NH, int NKV, int T, float scale) {
  constexpr int VEC = 8, TPR = HD / VEC, NS = ATT_THREADS / TPR, WARPS = ATT_THREADS / 32;
  constexpr int KUNROLL = TPR >= 8 ? 4 : 1;
  __shared__ float qs[ATT_GMAX][HD];
  __shared__ float red[WARPS][ATT_GMAX];
  __shared__ float mx[ATT_GMAX], sm[ATT_GMAX];
  __shared__ float part[NS][HD];
  int G = NH / NKV, nchunk = (G + ATT_GMAX - 1) / ATT_GMAX;
  int kvh = blockIdx.x / nchunk, g0 = (blockIdx.x % nchunk) * ATT_GMAX;
  int ng = min(ATT_GMAX, G - g0), h0 = kvh * G + g0, b = blockIdx.y;
  int QD = NH * HD, KVD = NKV * HD, tid = threadIdx.x, lane = tid % 32, warp = tid / 32;
  bf16 *o = out + (size_t)b * QD + (size_t)h0 * HD;
  int p = pos[b];
  if (p < 0) { /* row not fed: the whole block leaves */
    for (int i = tid; i < ng * HD; i += ATT_THREADS) o[i] = __float2bfloat16(0.0f);
    return;
  }
  int S = p + 1;
  const bf16 *qb = q + (size_t)b * QD + (size_t)h0 * HD;
  for (int i = tid; i < ng * HD; i += ATT_THREADS) qs[i / HD][i % HD] = __bfloat162float(qb[i]);
  __syncthreads();
  const bf16 *kb = kc + (size_t)b * T * KVD + (size_t)kvh * HD;
  const bf16 *vb = vc + (size_t)b * T * KVD + (size_t)kvh * HD;
  float *sc = att + ((size_t)b * NH + h0) * T; /* head g's scores at sc + g * T */

  float lm[ATT_GMAX];
#pragma unroll
  for (int g = 0; g < ATT_GMAX; g++) lm[g] = -INFINITY;
  for (int t = tid; t < S; t += ATT_THREADS) {
    const uint4 *kr = (const uint4 *)(kb + (size_t)t * KVD);
    float acc[ATT_GMAX];
#pragma unroll
    for (int g = 0; g < ATT_GMAX; g++) acc[g] = 0.0f;
    /* four 16-byte loads in flight for long rows, but not a full unroll:
     * that makes the compiler hoist every q value into registers */
#pragma unroll KUNROLL
    for (int cc = 0; cc < TPR; cc++) {
      float kf[VEC];
      load8(kr[cc], kf);
#pragma unroll
      for (int g = 0; g < ATT_GMAX; g++)
        if (g < ng)
#pragma unroll
          for (int e = 0; e < VEC; e++) acc[g] += qs[g][cc * VEC + e] * kf[e];
    }
#pragma unroll
    for (int g = 0; g < ATT_GMAX; g++)
      if (g < ng) {
        float s = acc[g] * scale;
        sc[(size_t)g * T + t] = s;
        lm[g] = fmaxf(lm[g], s);
      }
  }
#pragma unroll
  for (int g = 0; g < ATT_GMAX; g++) {
    float v = nc_warp_max(lm[g]);
    if (lane == 0) red[warp][g] = v;
  }
  __syncthreads();
  if (tid < ATT_GMAX) {
    float v = -INFINITY;
    for (int i = 0; i < WARPS; i++) v = fmaxf(v, red[i][tid]);
    mx[tid] = v;
  }
  __syncthreads();
  float ls[ATT_GMAX];
#pragma unroll
  for (int g = 0; g < ATT_GMAX; g++) ls[g] = 0.0f;
  for (int t = tid; t < S; t += ATT_THREADS) {
#pragma unroll
    for (int g = 0; g < ATT_GMAX; g++)
      if (g < ng) {
        float e = __expf(sc[(size_t)g * T + t] - mx[g]);
        sc[(size_t)g * T + t] = e;
        ls[g] += e;
      }
  }
#pragma unroll
  for (int g = 0; g < ATT_GMAX; g++) {
    float v = nc_warp_sum(ls[g]);
    if (lane == 0) red[warp][g] = v;
  }
  __syncthreads(); /* also makes every thread's probabilities visible */
  if (tid < ATT_GMAX) {
    float v = 0.0f;
    for (int i = 0; i < WARPS; i++) v += red[i][tid];
    sm[tid] = v;
  }
  __syncthreads();

  int d8 = tid % TPR, s0 = tid / TPR;
  float acc[ATT_GMAX][VEC];
#pragma unroll
  for (int g = 0; g < ATT_GMAX; g++)
#pragma unroll
    for (int e = 0; e < VEC; e++) acc[g][e] = 0.0f;
  for (int t = s0; t < S; t += NS) {
    float vf[VEC];
    load8(((const uint4 *)(vb + (size_t)t * KVD))[d8], vf);
#pragma unroll
    for (int g = 0; g < ATT_GMAX; g++)
      if (g < ng) {
        float pg = sc[(size_t)g * T + t];
#pragma unroll
        for (int e = 0; e < VEC; e++) acc[g][e] += pg * vf[e];
      }
  }
#pragma unroll
  for (int g = 0; g < ATT_GMAX; g++)
    if (g < ng) { /* ng is the same for the whole block */
#pragma unroll
      for (int e = 0; e < VEC; e++) part[s0][d8 * VEC + e] = acc[g][e];
      __syncthreads();
      for (int i = tid; i < HD; i += ATT_THREADS) {
        float tot = 0.0f;
        for (int k = 0; k < NS; k++) tot += part[k][i];
        o[(size_t)g * HD + i] = __float2bfloat16(tot / sm[g]);
      }
      __syncthreads();
    }
}

static bool decode_attention(bf16 *out, float *att, const bf16 *q, const bf16 *kc, const bf16 *vc,
                             const int *pos, int n, int NH, int NKV, int HD, int T,
                             cudaStream_t s) {
  int G = NH / NKV, nchunk = (G + ATT_GMAX - 1) / ATT_GMAX;
  dim3 grid((unsigned)(NKV * nchunk), (unsigned)n);
  float scale = 1.0f / sqrtf((float)HD);
  switch (HD) {
    case 16:
      decode_attention_kernel<16><<<grid, ATT_THREADS, 0, s>>>(out, att, q, kc, vc, pos, NH, NKV, T, scale);
      break;
    case 32:
      decode_attention_kernel<32><<<grid, ATT_THREADS, 0, s>>>(out, att, q, kc, vc, pos, NH, NKV, T, scale);
      break;
    case 64:
      decode_attention_kernel<64><<<grid, ATT_THREADS, 0, s>>>(out, att, q, kc, vc, pos, NH, NKV, T, scale);
      break;
    case 128:
      decode_attention_kernel<128><<<grid, ATT_THREADS, 0, s>>>(out, att, q, kc, vc, pos, NH, NKV, T, scale);
      break;
    default: DG_UNREACHABLE();
  }
  return NC_LAUNCHED();
}

/* tok[b] = argmax of row b of logits (n, V), the lowest id on ties (as the
 * reference's argmax). One block of 256 per row. */
static __global__ void argmax_kernel(int *tok, const float *logits, int V) {
  __shared__ float bv[256];
  __shared__ int bi[256];
  const float *z = logits + (size_t)blockIdx.x * V;
  int tid = threadIdx.x;
  float v = -INFINITY;
  int id = -1;
  for (int j = tid; j < V; j += 256)
    if (id < 0 || z[j] > v) v = z[j], id = j;
  bv[tid] = v;
  bi[tid] = id;
  __syncthreads();
  for (int s = 128; s > 0; s >>= 1) {
    if (tid < s) {
      float v2 = bv[tid + s];
      int i2 = bi[tid + s];
      if (i2 >= 0 && (bi[tid] < 0 || v2 > bv[tid] || (v2 == bv[tid] && i2 < bi[tid]))) {
        bv[tid] = v2;
        bi[tid] = i2;
      }
    }
    __syncthreads();
  }
  if (tid == 0) tok[blockIdx.x] = bi[0];
}

/* keys (rows, V) of (logit / temperature, id), the division rounded as
 * the reference's float division */
static __global__ void sample_keys_kernel(uint64_t *keys, const float *logits, float temperature,
                                          int rows, int V) {
  size_t total = (size_t)rows * V;
  for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < total;
       i += (size_t)gridDim.x * blockDim.x)
    keys[i] = nc_sample_key(__fdiv_rn(logits[i], temperature), (int32_t)(i % (size_t)V));
}

/* e[r][j] = exp(z_j - z_0) in double for the first kmax ranked tokens */
static __global__ void sample_exp_kernel(double *e, const uint64_t *sorted, int rows, int V, int kmax) {
  size_t total = (size_t)rows * kmax;
  for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < total;
       i += (size_t)gridDim.x * blockDim.x) {
    size_t r = i / (size_t)kmax, j = i % (size_t)kmax;
    const uint64_t *k = sorted + r * V;
    e[r * V + j] = exp((double)nc_sample_key_z(k[j]) - (double)nc_sample_key_z(k[0]));
  }
}

/* one thread per row: the reference's sequential rule; u < 0 skips */
static __global__ void sample_pick_kernel(int *tok, const uint64_t *sorted, const double *e,
                                          const double *u, int rows, int V, int top_k, float top_p) {
  int r = blockIdx.x * blockDim.x + threadIdx.x;
  if (r >= rows) return;
  tok[r] = u[r] < 0 ? -1
                    : nc_sample_pick(sorted + (size_t)r * V, e + (size_t)r * V, V, top_k, top_p, u[r]);
}

/* ---- prefill -------------------------------------------------------------- */

/* Prefill scratch for groups of up to N tokens (rows x padded length). */
static bool prefill_reserve(nn_cuda_kv *c, int N) {
  const nn_config *g = &c->cfg;
  double Nd = N, C = g->d_model, F = g->ffn_hidden, NH = g->n_heads;
  double QD = NH * g->head_dim, KVD = (double)g->n_kv_heads * g->head_dim;
  carve_item it[] = {
      {(void **)&c->px, 4 * Nd * C},     {(void **)&c->pln, 2 * Nd * C},
      {(void **)&c->prstd, 4 * Nd},      {(void **)&c->pqkv, 2 * Nd * (QD + 2 * KVD)},
      {(void **)&c->patty, 2 * Nd * QD}, {(void **)&c->plse, 4 * Nd * NH},
      {(void **)&c->ph13, 2 * Nd * 2 * F}, {(void **)&c->phg, 2 * Nd * F},
      {(void **)&c->pin, 4 * Nd},
  };
  double bytes = carve_total(it, (int)DG_ARRAY_LEN(it));
  if (c->pre_mem && bytes <= c->pre_bytes) { /* the block is big enough: carve it for this N */
    carve_at(c->pre_mem, it, (int)DG_ARRAY_LEN(it));
    return true;
  }
  cudaFree(c->pre_mem);
  c->pre_mem = NULL;
  c->pre_bytes = 0;
  if (!carve(&c->pre_mem, it, (int)DG_ARRAY_LEN(it), "the prefill buffers")) return false;
  c->pre_bytes = bytes;
  return true;
}

/* The groups of a prefill: consecutive rows while rows x longest stays
 * within c->prefill_tokens (at least one row) and rows x NH within the
 * attention grid. Returns the rows of the group starting at b0 and its
 * padded length. */
static int prefill_group(const nn_cuda_kv *c, const int *lens, int n, int b0, int *Tc) {
  int t = lens[b0], rows = 1;
  while (b0 + rows < n) {
    int t2 = lens[b0 + rows] > t ? lens[b0 + rows] : t;
    if ((double)(rows + 1) * t2 > c->prefill_tokens || (double)(rows + 1) * c->cfg.n_heads > 65535)
      break;
    t = t2;
    rows++;
  }
  *Tc = t;
  return rows;
}

/* Prompt b goes into cache row to[b] (to NULL: row b); refill keeps the
 * rows in use (c->n) and their positions, a prefill starts over with n. */
static bool prefill_rows(nn_cuda_kv *c, const int *to, const int32_t *const *prompts, const int *lens,
                         int n, bool refill, dg_status *st) {
  const nn_config *g = &c->cfg;
  int L = g->n_layers, C = g->d_model, V = g->vocab_size, F = g->ffn_hidden;
  int NH = g->n_heads, NKV = g->n_kv_heads, HD = g->head_dim, QD = NH * HD, KVD = NKV * HD;
  int QKVD = QD + 2 * KVD, B = c->B, T = c->T;
  if (n < 1 || n > B)
    return dg_fail(st, DG_ERR_INVALID, "CUDA prefill: %d rows, the cache holds %d", n, B);
  if (refill && c->n < 1) return dg_fail(st, DG_ERR_INVALID, "CUDA refill: no prefill yet");
  for (int b = 0; b < n; b++) {
    int row = to ? to[b] : b;
    if (row < 0 || row >= (refill ? c->n : B))
      return dg_fail(st, DG_ERR_INVALID, "CUDA prefill: prompt %d's row %d is outside [0, %d)", b, row,
                     refill ? c->n : B);
    for (int j = 0; j < b; j++)
      if ((to ? to[j] : j) == row)
        return dg_fail(st, DG_ERR_INVALID, "CUDA prefill: prompts %d and %d share row %d", j, b, row);
    if (lens[b] < 1 || lens[b] > T)
      return dg_fail(st, DG_ERR_INVALID, "CUDA prefill: prompt %d has %d tokens, outside [1, %d]", b,
                     lens[b], T);
    for (int j = 0; j < lens[b]; j++)
      if (prompts[b][j] < 0 || prompts[b][j] >= V)
        return dg_fail(st, DG_ERR_INVALID,
                       "CUDA prefill: prompt %d token %d = %d is outside the vocabulary [0, %d)", b,
                       j, (int)prompts[b][j], V);
  }
  int maxN = 0;
  for (int b0 = 0; b0 < n;) {
    int Tc, rows = prefill_group(c, lens, n, b0, &Tc);
    if (rows * Tc > maxN) maxN = rows * Tc;
    b0 += rows;
  }
  int32_t *hin = (int32_t *)malloc(sizeof(int32_t) * (size_t)maxN);
  int *hg = (int *)malloc(sizeof(int) * 2 * (size_t)n);
  if (!hin || !hg) {
    free(hin);
    free(hg);
    return dg_fail(st, DG_ERR_RUNTIME, "CUDA prefill: out of host memory");
  }
  cudaStream_t s = c->w.stream;
  nc_blas *bl = c->blas;
  if (!refill) c->n = 0; /* until this prefill is complete */
  bool ok = prefill_reserve(c, maxN);
  for (int b0 = 0; ok && b0 < n;) {
    int Tc, rows = prefill_group(c, lens, n, b0, &Tc), N = rows * Tc;
    for (int r = 0; r < rows; r++) {
      int len = lens[b0 + r];
      memcpy(hin + (size_t)r * Tc, prompts[b0 + r], sizeof(int32_t) * (size_t)len);
      for (int j = len; j < Tc; j++) hin[(size_t)r * Tc + j] = 0; /* padding after the row */
      hg[r] = r * Tc + len - 1;
      hg[rows + r] = to ? to[b0 + r] : b0 + r;
    }
    /* pageable sources: the copies take the data before returning */
    ok = NC_CUDA(cudaMemcpyAsync(c->pin, hin, sizeof(int) * (size_t)N, cudaMemcpyHostToDevice, s)) &&
         NC_CUDA(cudaMemcpyAsync(c->gather, hg, sizeof(int) * (size_t)rows, cudaMemcpyHostToDevice, s)) &&
         NC_CUDA(cudaMemcpyAsync(c->gather + B, hg + rows, sizeof(int) * (size_t)rows,
                                 cudaMemcpyHostToDevice, s));
    if (!ok) break;
    nc_embedding_forward(c->px, c->pin, wf(c, NN_PARAM_WTE, 0), N, C, s);
    bf16 *pq = c->pqkv, *pk = pq + QD, *pv = pk + KVD;
    for (int l = 0; ok && l < L; l++) {
      nc_rmsnorm_forward(c->pln, c->prstd, c->px, wf(c, NN_PARAM_LN1W, l), N, C, g->norm_eps, s);
      ok = nc_mm_forward(bl, c->pqkv, CUDA_R_16BF, NULL, 0.0f, c->pln, wb(c, NN_PARAM_WQ, l), N, C,
                         QKVD, s);
      if (!ok) break;
      nc_rope_qk(pq, pk, QKVD, c->w.rope_cos, c->w.rope_sin, rows, Tc, NH, NKV, HD, s);
      ok = nc_attention_forward(c->patty, c->plse, pq, pk, pv, QKVD, rows, Tc, NH, NKV, HD, s);
      if (!ok) break;
      /* the group's rows of this layer's cache, positions 0..Tc-1 */
      size_t items = (size_t)rows * Tc * (KVD / 8);
      cache_fill_kernel<<<nc_grid(items, 256), 256, 0, s>>>(c->kc + (size_t)l * B * T * KVD,
                                                            c->vc + (size_t)l * B * T * KVD,
                                                            c->pqkv, rows, Tc, T, c->gather + B, QD, KVD);
      /* x += atty . wo^T, in place */
      ok = NC_LAUNCHED() && nc_mm_forward(bl, c->px, CUDA_R_32F, c->px, 1.0f, c->patty,
                                          wb(c, NN_PARAM_WO, l), N, QD, C, s);
      if (!ok) break;
      nc_rmsnorm_forward(c->pln, c->prstd, c->px, wf(c, NN_PARAM_LN2W, l), N, C, g->norm_eps, s);
      ok = nc_mm_forward(bl, c->ph13, CUDA_R_16BF, NULL, 0.0f, c->pln, wb(c, NN_PARAM_W1, l), N, C,
                         2 * F, s);
      if (!ok) break;
      nc_swiglu_forward(c->phg, c->ph13, N, F, s);
      ok = nc_mm_forward(bl, c->px, CUDA_R_32F, c->px, 1.0f, c->phg, wb(c, NN_PARAM_W2, l), N, F, C,
                         s);
    }
    if (!ok) break;
    move_rows_kernel<<<nc_grid((size_t)rows * C, 256), 256, 0, s>>>(c->x, c->gather + B, c->px,
                                                                    c->gather, rows, C);
    ok = NC_LAUNCHED();
    b0 += rows;
  }
  /* the logits of every row in use (a refill's other rows get those of
   * their last hidden state, which no caller reads) */
  int used = refill ? c->n : n;
  if (ok) {
    nc_rmsnorm_forward(c->ln, c->rstd, c->x, wf(c, NN_PARAM_LNFW, 0), used, C, g->norm_eps, s);
    ok = nc_mm_forward(bl, c->logits, CUDA_R_32F, NULL, 0.0f, c->ln, wb(c, NN_PARAM_WLM, 0), used, C,
                       V, s) &&
         NC_CUDA(cudaStreamSynchronize(s));
  }
  free(hin);
  free(hg);
  if (!ok || nc_error_pending()) return nc_error_take(st, "CUDA prefill");
  for (int b = 0; b < n; b++) c->pos[to ? to[b] : b] = lens[b];
  c->n = used;
  return true;
}

extern "C" bool nn_cuda_kv_prefill(nn_cuda_kv *c, const int32_t *const *prompts, const int *lens,
                                   int n, dg_status *st) {
  return prefill_rows(c, NULL, prompts, lens, n, false, st);
}

extern "C" bool nn_cuda_kv_refill(nn_cuda_kv *c, const int *rows, const int32_t *const *prompts,
                                  const int *lens, int n, dg_status *st) {
  return prefill_rows(c, rows, prompts, lens, n, true, st);
}

/* ---- a step --------------------------------------------------------------- */

extern "C" bool nn_cuda_kv_step(nn_cuda_kv *c, const int32_t *tokens, const bool *active,
                                dg_status *st) {
  const nn_config *g = &c->cfg;
  int L = g->n_layers, C = g->d_model, V = g->vocab_size, F = g->ffn_hidden;
  int NH = g->n_heads, NKV = g->n_kv_heads, HD = g->head_dim, QD = NH * HD, KVD = NKV * HD;
  int n = c->n, B = c->B, T = c->T;
  if (n < 1) return dg_fail(st, DG_ERR_INVALID, "CUDA decode step: no prefill yet");
  for (int b = 0; b < n; b++) {
    bool on = !active || active[b];
    if (on && (tokens[b] < 0 || tokens[b] >= V))
      return dg_fail(st, DG_ERR_INVALID,
                     "CUDA decode step: row %d token %d is outside the vocabulary [0, %d)", b,
                     (int)tokens[b], V);
    if (on && c->pos[b] >= T)
      return dg_fail(st, DG_ERR_INVALID, "CUDA decode step: row %d is full (%d positions)", b, T);
    c->h_io[b] = on ? tokens[b] : 0;
    c->h_io[n + b] = on ? c->pos[b] : -1;
  }
  cudaStream_t s = c->w.stream;
  nc_blas *bl = c->blas;
  int *tok = c->io, *pos = c->io + n;
  bool ok = NC_CUDA(cudaMemcpyAsync(c->io, c->h_io, sizeof(int) * 2 * (size_t)n,
                                    cudaMemcpyHostToDevice, s));
  if (ok) nc_embedding_forward(c->x, tok, wf(c, NN_PARAM_WTE, 0), n, C, s);
  for (int l = 0; ok && l < L; l++) {
    bf16 *kc = c->kc + (size_t)l * B * T * KVD, *vc = c->vc + (size_t)l * B * T * KVD;
    nc_rmsnorm_forward(c->ln, c->rstd, c->x, wf(c, NN_PARAM_LN1W, l), n, C, g->norm_eps, s);
    ok = nc_mm_forward(bl, c->qkv, CUDA_R_16BF, NULL, 0.0f, c->ln, wb(c, NN_PARAM_WQ, l), n, C,
                       QD + 2 * KVD, s);
    if (!ok) break;
    size_t pairs = (size_t)n * (NH + 2 * NKV) * (HD / 2);
    rope_append_kernel<<<nc_grid(pairs, 256), 256, 0, s>>>(c->q, c->qkv, kc, vc, pos,
                                                           c->w.rope_cos, c->w.rope_sin, n, NH,
                                                           NKV, HD, T);
    ok = NC_LAUNCHED() &&
         decode_attention(c->atty, c->att, c->q, kc, vc, pos, n, NH, NKV, HD, T, s) &&
         nc_mm_forward(bl, c->x, CUDA_R_32F, c->x, 1.0f, c->atty, wb(c, NN_PARAM_WO, l), n, QD, C,
                       s);
    if (!ok) break;
    nc_rmsnorm_forward(c->ln, c->rstd, c->x, wf(c, NN_PARAM_LN2W, l), n, C, g->norm_eps, s);
    ok = nc_mm_forward(bl, c->h13, CUDA_R_16BF, NULL, 0.0f, c->ln, wb(c, NN_PARAM_W1, l), n, C,
                       2 * F, s);
    if (!ok) break;
    nc_swiglu_forward(c->hg, c->h13, n, F, s);
    ok = nc_mm_forward(bl, c->x, CUDA_R_32F, c->x, 1.0f, c->hg, wb(c, NN_PARAM_W2, l), n, F, C, s);
  }
  if (ok) {
    nc_rmsnorm_forward(c->ln, c->rstd, c->x, wf(c, NN_PARAM_LNFW, 0), n, C, g->norm_eps, s);
    /* the sync also frees the pinned h_io for the next step */
    ok = nc_mm_forward(bl, c->logits, CUDA_R_32F, NULL, 0.0f, c->ln, wb(c, NN_PARAM_WLM, 0), n, C,
                       V, s) &&
         NC_CUDA(cudaStreamSynchronize(s));
  }
  if (!ok || nc_error_pending()) return nc_error_take(st, "CUDA decode step");
  for (int b = 0; b < n; b++)
    if (!active || active[b]) c->pos[b]++;
  return true;
}

extern "C" bool nn_cuda_kv_logits(const nn_cuda_kv *c, float *out, dg_status *st) {
  if (c->n < 1) return dg_fail(st, DG_ERR_INVALID, "CUDA KV logits: no prefill yet");
  size_t bytes = sizeof(float) * (size_t)c->n * c->cfg.vocab_size;
  if (NC_CUDA(cudaMemcpyAsync(out, c->logits, bytes, cudaMemcpyDeviceToHost, c->w.stream)))
    NC_CUDA(cudaStreamSynchronize(c->w.stream));
  return nc_error_take(st, "CUDA KV logits");
}

/* ---- sampling ------------------------------------------------------------- */

/* Sort buffers for `rows` rows (kept across calls; grown when needed). */
static bool sample_reserve(nn_cuda_kv *c, int rows) {
  int V = c->cfg.vocab_size;
  size_t tmp = 0;
  if (!NC_CUDA(cub::DeviceSegmentedRadixSort::SortKeysDescending(
          (void *)NULL, tmp, (const unsigned long long *)NULL, (unsigned long long *)NULL,
          rows * V, rows, (const int *)NULL, (const int *)NULL, 0, 64, c->w.stream)))
    return false;
  if (c->samp_mem && rows <= c->samp_rows && tmp <= c->sort_tmp_bytes) return true;
  cudaFree(c->samp_mem);
  c->samp_mem = NULL;
  c->samp_rows = 0;
  double R = rows, Vd = V;
  carve_item it[] = {
      {(void **)&c->keys, 8 * R * Vd},
      {(void **)&c->sorted, 8 * R * Vd},
      {(void **)&c->e, 8 * R * Vd},
      {(void **)&c->seg, 4 * (R + 1)},
      {(void **)&c->sort_tmp, (double)tmp},
  };
  if (!carve(&c->samp_mem, it, (int)DG_ARRAY_LEN(it), "the sampling buffers")) return false;
  int *h = (int *)malloc(sizeof(int) * (size_t)(rows + 1));
  if (!h) {
    nc_error_set("out of host memory");
    return false;
  }
  for (int i = 0; i <= rows; i++) h[i] = i * V;
  bool ok = NC_CUDA(cudaMemcpy(c->seg, h, sizeof(int) * (size_t)(rows + 1), cudaMemcpyHostToDevice));
  free(h);
  if (!ok) return false;
  c->samp_rows = rows;
  c->sort_tmp_bytes = tmp;
  return true;
}

extern "C" bool nn_cuda_kv_sample(nn_cuda_kv *c, const nn_sample_opts *o, const double *u,
                                  const bool *active, int32_t *tokens, dg_status *st) {
  int n = c->n, V = c->cfg.vocab_size;
  if (n < 1) return dg_fail(st, DG_ERR_INVALID, "CUDA sample: no prefill yet");
  cudaStream_t s = c->w.stream;
  bool greedy = !(o->temperature > 0), ok = true;
  if (greedy) {
    argmax_kernel<<<(unsigned)n, 256, 0, s>>>(c->tok, c->logits, V);
    ok = NC_LAUNCHED();
  } else {
    for (int b = 0; b < n; b++) {
      bool on = !active || active[b];
      if (on && !(u[b] >= 0 && u[b] < 1))
        return dg_fail(st, DG_ERR_INVALID, "CUDA sample: row %d draw %g is outside [0, 1)", b, u[b]);
      c->h_u[b] = on ? u[b] : -1.0;
    }
    int R = n < SORT_ROWS ? n : SORT_ROWS;
    if ((double)R * V > 1073741824.0) R = (int)(1073741824.0 / V);
    if (R < 1) R = 1;
    int kmax = nc_sample_kept_max(V, o->top_k);
    ok = sample_reserve(c, R) &&
         NC_CUDA(cudaMemcpyAsync(c->u, c->h_u, sizeof(double) * (size_t)n, cudaMemcpyHostToDevice, s));
    for (int r0 = 0; ok && r0 < n; r0 += R) {
      int rows = n - r0 < R ? n - r0 : R;
      size_t items = (size_t)rows * V, tmp = c->sort_tmp_bytes;
      sample_keys_kernel<<<nc_grid(items, 256), 256, 0, s>>>(c->keys, c->logits + (size_t)r0 * V,
                                                              o->temperature, rows, V);
      ok = NC_LAUNCHED() &&
           NC_CUDA(cub::DeviceSegmentedRadixSort::SortKeysDescending(
               c->sort_tmp, tmp, (const unsigned long long *)c->keys,
               (unsigned long long *)c->sorted, (int)items, rows, (const int *)c->seg,
               (const int *)c->seg + 1, 0, 64, s));
      if (!ok) break;
      sample_exp_kernel<<<nc_grid((size_t)rows * kmax, 256), 256, 0, s>>>(c->e, c->sorted, rows, V,
                                                                          kmax);
      sample_pick_kernel<<<(unsigned)((rows + 63) / 64), 64, 0, s>>>(
          c->tok + r0, c->sorted, c->e, c->u + r0, rows, V, o->top_k, o->top_p);
      ok = NC_LAUNCHED();
    }
  }
  ok = ok &&
       NC_CUDA(cudaMemcpyAsync(c->h_tok, c->tok, sizeof(int) * (size_t)n, cudaMemcpyDeviceToHost, s)) &&
       NC_CUDA(cudaStreamSynchronize(s));
  if (!ok || nc_error_pending()) return nc_error_take(st, "CUDA sample");
  for (int b = 0; b < n; b++) tokens[b] = (!active || active[b]) ? c->h_tok[b] : -1;
  return true;
}

/* ---- generation ------------------------------------------------------------ */

extern "C" bool nn_cuda_generate(nn_cuda_model *m, const int32_t *const *prompts,
                                 const int *prompt_lens, int n, const nn_sample_opts *o,
                                 uint64_t seed, int32_t *out, int *out_lens,
                                 nn_cuda_gen_stats *stats, dg_status *st) {
  const nn_config *g = nn_cuda_model_config(m);
  int V = g->vocab_size, maxT = g->max_seq_len, longest = 0;
  if (n < 1) return dg_fail(st, DG_ERR_INVALID, "generate: no prompts");
  if (o->max_tokens < 1) return dg_fail(st, DG_ERR_INVALID, "generate: max_tokens must be >= 1");
  int64_t prompt_tokens = 0;
  for (int i = 0; i < n; i++) {
    if (prompt_lens[i] < 1) return dg_fail(st, DG_ERR_INVALID, "generate: prompt %d is empty", i);
    if (prompt_lens[i] > maxT)
      return dg_fail(st, DG_ERR_INVALID,
                     "generate: prompt %d has %d tokens, more than the model's max_seq_len %d", i,
                     prompt_lens[i], maxT);
    for (int j = 0; j < prompt_lens[i]; j++)
      if (prompts[i][j] < 0 || prompts[i][j] >= V)
        return dg_fail(st, DG_ERR_INVALID,
                       "generate: prompt %d token %d = %d is outside the vocabulary [0, %d)", i, j,
                       (int)prompts[i][j], V);
    if (prompt_lens[i] > longest) longest = prompt_lens[i];
    prompt_tokens += prompt_lens[i];
  }
  int T = (double)longest + o->max_tokens > maxT ? maxT : longest + o->max_tokens;
  nn_cuda_kv *c = NULL;
  if (!nn_cuda_kv_init(&c, m, n, T, st)) return false;
  double t0 = dg_now();
  if (!nn_cuda_kv_prefill(c, prompts, prompt_lens, n, st)) {
    nn_cuda_kv_free(c);
    return false;
  }
  double t1 = dg_now();
  dg_rng *rng = (dg_rng *)malloc(sizeof(dg_rng) * (size_t)n);
  double *u = (double *)malloc(sizeof(double) * (size_t)n);
  int32_t *tok = (int32_t *)malloc(sizeof(int32_t) * (size_t)n);
  bool *on = (bool *)malloc(sizeof(bool) * (size_t)n);
  if (!rng || !u || !tok || !on) {
    free(rng);
    free(u);
    free(tok);
    free(on);
    nn_cuda_kv_free(c);
    return dg_fail(st, DG_ERR_RUNTIME, "generate: out of host memory");
  }
  dg_rng base;
  dg_rng_seed(&base, seed);
  for (int i = 0; i < n; i++) {
    rng[i] = dg_rng_fork(&base); /* in row order, as nn_generate forks */
    out_lens[i] = 0;
    on[i] = true;
  }
  bool ok = true, sampled = o->temperature > 0;
  int running = n;
  int64_t steps = 0, made = 0;
  while (ok) {
    for (int i = 0; i < n; i++) u[i] = on[i] && sampled ? dg_rng_uniform(&rng[i]) : -1.0;
    if (!(ok = nn_cuda_kv_sample(c, o, u, on, tok, st))) break;
    for (int i = 0; i < n; i++) {
      if (!on[i]) continue;
      if (tok[i] == o->stop_token) {
        on[i] = false;
      } else {
        out[(size_t)i * o->max_tokens + out_lens[i]++] = tok[i];
        made++;
        if (out_lens[i] == o->max_tokens || nn_cuda_kv_pos(c, i) >= T) on[i] = false;
      }
      if (!on[i]) running--;
    }
    if (running == 0) break;
    ok = nn_cuda_kv_step(c, tok, on, st);
    steps++;
  }
  double t2 = dg_now();
  if (stats) {
    stats->prefill_s = t1 - t0;
    stats->decode_s = t2 - t1;
    stats->prompt_tokens = prompt_tokens;
    stats->new_tokens = made;
    stats->steps = steps;
  }
  free(rng);
  free(u);
  free(tok);
  free(on);
  nn_cuda_kv_free(c);
  return ok;
}
