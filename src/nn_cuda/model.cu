/* model.cu: the CUDA model: its memory (a size table and one allocation
 * per group, as the C reference), forward, backward and update, and the
 * copies to and from the C reference's nn_model.
 *
 * Precision (docs/model-cuda.md): fp32 master weights, gradients and AdamW
 * state in the device layout (model_view.cuh: a layer's q/k/v projections
 * are one matrix, and so are its gate and up projections, each used by one
 * matmul); a bf16 copy of the weights for the matmuls; the
 * residual stream (x, xmid) and its gradient in fp32; a block's output
 * projection (wo, w2) is a bf16 product, added to the stream by the next
 * RMSNorm, which writes the sum (cheaper than a matmul epilogue reading
 * and writing the fp32 stream); matmul operands
 * (normalised rows, q, k, v, attention output, MLP activations, logits and
 * their gradients) in bf16; norms' rstd, attention's log-sum-exp, losses
 * in fp32. Every kernel and the update are deterministic, so two runs from
 * the same state give bitwise the same results on one device.
 *
 * Errors: CUDA/cuBLASLt failures are recorded by the check macros and
 * returned by the public function that saw them; a model whose device
 * faulted should be freed.
 *
 * B batch, T time, N = B*T rows; the config's letters are nn.h's.
 */
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common.cuh"
#include "model_view.cuh"

/* ---- errors -------------------------------------------------------------- */

static char err_msg[400];
static bool err_set;

void nc_error_set(const char *fmt, ...) {
  if (err_set) return; /* the first failure is the cause */
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(err_msg, sizeof err_msg, fmt, ap);
  va_end(ap);
  err_set = true;
}

static const char *base_name(const char *path) {
  const char *s = strrchr(path, '/');
  return s ? s + 1 : path;
}

bool nc_cuda_ok(cudaError_t e, const char *expr, const char *file, int line) {
  if (e == cudaSuccess) return true;
  nc_error_set("%s:%d: %s: %s (%s)", base_name(file), line, expr, cudaGetErrorString(e),
               cudaGetErrorName(e));
  return false;
}

bool nc_blas_ok(cublasStatus_t s, const char *expr, const char *file, int line) {
  if (s == CUBLAS_STATUS_SUCCESS) return true;
  nc_error_set("%s:%d: %s: cuBLAS status %d", base_name(file), line, expr, (int)s);
  return false;
}

bool nc_error_pending(void) { return err_set; }

bool nc_error_take(dg_status *st, const char *where) {
  if (!err_set) return true;
  err_set = false;
  return dg_fail(st, DG_ERR_RUNTIME, "%s: %s", where, err_msg);
}

extern "C" int nn_cuda_device_count(dg_status *st) {
  int n = 0;
  cudaError_t e = cudaGetDeviceCount(&n);
  if (e != cudaSuccess) {
    cudaGetLastError();
    dg_fail(st, DG_ERR_RUNTIME, "no CUDA device: %s", cudaGetErrorString(e));
    return 0;
  }
  if (n == 0) dg_fail(st, DG_ERR_RUNTIME, "no CUDA device: the driver reports none");
  return n;
}

extern "C" int nn_cuda_current_device(void) {
  int d = 0;
  if (cudaGetDevice(&d) != cudaSuccess) {
    cudaGetLastError();
    d = 0;
  }
  return d;
}

/* ---- memory table -------------------------------------------------------- */

/* X(type, field, count) of the activations and scratch, for N rows. */
#define NC_ACT_LIST(X)                                                        \
  X(float, x, (L + 1) * N * C)   /* (L+1, N, C) residual entering layers */   \
  X(float, xmid, L * N * C)      /* (L, N, C) after attention */              \
  X(bf16, ln1, L * N * C)        /* (L, N, C) */                              \
  X(float, rstd1, L * N)                                                      \
  X(bf16, qkv, L * N * QKVD)     /* (L, N, QD|KVD|KVD) q, k after RoPE */     \
  X(bf16, atty, L * N * QD)      /* (L, N, QD) attention output */            \
  X(float, lse, L * N * NH)      /* (L, B, NH, T) row log-sum-exp */          \
  X(bf16, ln2, L * N * C)                                                     \
  X(float, rstd2, L * N)                                                      \
  X(bf16, h13, L * N * 2 * F)    /* (L, N, F|F) gate, up */                   \
  X(bf16, hg, L * N * F)         /* (L, N, F) silu(h1) * h3 */                \
  X(bf16, lnf, N * C)                                                         \
  X(float, rstdf, N)                                                          \
  X(bf16, logits, N * V)         /* (N, V) logits, then their gradient */     \
  X(float, losses, N)                                                         \
  X(float, dlosses, N)           /* w / norm */                               \
  X(int, inputs, N)                                                           \
  X(int, targets, N)                                                          \
  X(int, emb_order, N)                                                        \
  X(int, emb_uniq, N)                                                         \
  X(int, emb_start, N + 1)                                                    \
  X(float, dx, N * C)            /* residual gradient */                      \
  X(bf16, dxb, N * C)            /* its bf16 copy, a matmul operand */        \
  X(bf16, dn, N * C)             /* gradient of a norm's output; in the      \
                                    forward a block's output projection */    \
  X(bf16, datty, N * QD)                                                      \
  X(bf16, dqkv, N * QKVD)        /* (N, QD|KVD|KVD) */                        \
  X(float, delta, N * NH)                                                     \
  X(bf16, dhg, N * F)                                                         \
  X(bf16, dh13, N * 2 * F)       /* (N, F|F) */                               \
  X(float, norm_part, (double)NC_NORM_ROW_CHUNKS * C)                               \
  X(double, scal, NC_NORM_BLOCKS + 2.0) /* norm partials, sumsq, loss */

typedef struct {
#define X(type, f, n) type *f;
  NC_ACT_LIST(X)
#undef X
} nc_acts;

#define COUNT_ONE(type, f, n) +1
enum { ACT_COUNT = 0 NC_ACT_LIST(COUNT_ONE) };
#undef COUNT_ONE

enum { ALIGN = 256 };

static double round_up(double bytes) { return ceil(bytes / ALIGN) * ALIGN; }

/* Bytes of each activation for N rows, in double so that checks cannot
 * overflow. */
static void act_bytes(const nn_config *c, double N, double out[ACT_COUNT]) {
  double L = c->n_layers, C = c->d_model, V = c->vocab_size, F = c->ffn_hidden;
  double NH = c->n_heads, QD = NH * c->head_dim, KVD = (double)c->n_kv_heads * c->head_dim;
  double QKVD = QD + 2 * KVD;
  int i = 0;
#define X(type, f, n) out[i++] = round_up((double)sizeof(type) * (n));
  NC_ACT_LIST(X)
#undef X
}

static double params_bytes(const nn_config *c) {
  double P = (double)nn_config_param_count(c);
  double rope = 2.0 * c->max_seq_len * (c->head_dim / 2);
  /* params, grads, m, v in fp32, a bf16 copy, RoPE tables */
  return 4 * round_up(4.0 * P) + round_up(2.0 * P) + round_up(4.0 * rope);
}

struct nn_cuda_model {
  nn_config cfg;
  int B, T; /* capacity */
  nc_layout lay;
  size_t num_params;
  float *params, *grads, *mom, *var; /* fp32, device layout */
  bf16 *params_bf;
  float *rope_cos, *rope_sin; /* (max T, HD/2) */
  unsigned char *acts_mem;
  nc_acts a;
  cudaStream_t stream;
  nc_blas *blas;
  nn_optim opt;
  nn_cuda_dp *dp;
  /* data parallelism: the backward sums each layer's gradient block over
   * the ranks on `comm` as soon as it is complete, overlapping the next
   * layers' backward; grads_reduced until the next zero_grad */
  cudaStream_t comm;
  cudaEvent_t ev_grads, ev_comm;
  bool grads_reduced;
  /* pinned host staging for a batch, copied to the device asynchronously;
   * h2d_done marks the end of the last batch's copies, before which the
   * staging is not written again */
  int *h_inputs, *h_targets;
  float *h_dlosses;
  int *h_order, *h_uniq, *h_start;
  cudaEvent_t h2d_done;
  bool h2d_pending;
  int emb_u;
  /* the last forward */
  int last_B, last_T;
  bool last_has_targets, logits_valid;
  /* a loss (forward with targets) and a gradient norm (update) on the device */
  bool loss_valid, norm_valid;
  /* each update also copies its gradient sum of squares and the loss sum
   * of the forward before it into a pinned slot (two, alternating), so
   * that a step's results can be read after the next step is queued;
   * stats_step[i] is the step in slot i (-1: none), stats_loss[i] whether
   * its loss is one (the forward had targets) */
  double *h_stats;  /* (2, 2): sum of squares, loss sum */
  cudaEvent_t stats_done[2];
  int64_t stats_step[2];
  bool stats_loss[2];
  int stats_next;
};

/* ---- the device layout (model_view.cuh) ---------------------------------- */

void nc_layout_make(const nn_config *cfg, nc_layout *lay) {
  memset(lay, 0, sizeof *lay);
  size_t L = (size_t)cfg->n_layers, block = 0, at = 0;
  for (int i = 0; i < NN_PARAM_COUNT; i++) {
    int64_t dims[2];
    nn_param_shape(cfg, (nn_param_id)i, dims);
    lay->size[i] = (size_t)(dims[0] * dims[1]);
  }
  /* decaying global tensors */
  for (int i = 0; i < NN_PARAM_COUNT; i++)
    if (nn_param_decays((nn_param_id)i) && !nn_param_per_layer((nn_param_id)i)) {
      lay->off[i] = at;
      at += lay->size[i];
    }
  /* one block a layer of the decaying per-layer tensors, in list order */
  for (int i = 0; i < NN_PARAM_COUNT; i++)
    if (nn_param_decays((nn_param_id)i) && nn_param_per_layer((nn_param_id)i)) {
      lay->off[i] = at + block;
      block += lay->size[i];
    }
  for (int i = 0; i < NN_PARAM_COUNT; i++)
    if (nn_param_decays((nn_param_id)i) && nn_param_per_layer((nn_param_id)i))
      lay->stride[i] = block;
  lay->layer_off = at;
  lay->layer_block = block;
  at += L * block;
  lay->n_decay = at;
  /* the rest, each tensor's layers contiguous */
  for (int i = 0; i < NN_PARAM_COUNT; i++)
    if (!nn_param_decays((nn_param_id)i)) {
      bool per = nn_param_per_layer((nn_param_id)i);
      lay->off[i] = at;
      lay->stride[i] = per ? lay->size[i] : 0;
      at += lay->size[i] * (per ? L : 1);
    }
  lay->total = at;
}

/* Copies a parameter-shaped block between the C layout (host, at `host`)
 * and the device layout (at `dev`), one tensor layer at a time. */
static bool copy_permuted(const nn_cuda_model *m, float *dev, float *host, bool to_device) {
  const nc_layout *lay = &m->lay;
  size_t c_off = 0;
  bool ok = true;
  for (int i = 0; ok && i < NN_PARAM_COUNT; i++) {
    int layers = nn_param_per_layer((nn_param_id)i) ? m->cfg.n_layers : 1;
    size_t bytes = sizeof(float) * lay->size[i];
    for (int l = 0; ok && l < layers; l++, c_off += lay->size[i]) {
      float *d = dev + nc_at(lay, (nn_param_id)i, l), *h = host + c_off;
      ok = to_device ? NC_CUDA(cudaMemcpyAsync(d, h, bytes, cudaMemcpyHostToDevice, m->stream))
                     : NC_CUDA(cudaMemcpyAsync(h, d, bytes, cudaMemcpyDeviceToHost, m->stream));
    }
  }
  return ok && NC_CUDA(cudaStreamSynchronize(m->stream));
}

/* ---- creation ------------------------------------------------------------ */

extern "C" bool nn_cuda_config_check(const nn_config *cfg, dg_status *st) {
  if (!nn_config_validate(cfg, st)) return false;
  if (!nc_attention_supported(cfg->head_dim))
    return dg_fail(st, DG_ERR_INVALID,
                   "CUDA model: head_dim %d is not supported by the attention kernel (16, 32, 64 "
                   "or 128)",
                   cfg->head_dim);
  return true;
}

extern "C" int64_t nn_cuda_model_bytes(const nn_config *cfg, int B, int T) {
  double sizes[ACT_COUNT], n = params_bytes(cfg);
  act_bytes(cfg, (double)B * T, sizes);
  for (int i = 0; i < ACT_COUNT; i++) n += sizes[i];
  return n >= 9.2e18 ? INT64_MAX : (int64_t)n;
}

extern "C" void nn_cuda_model_free(nn_cuda_model *m) {
  if (!m) return;
  cudaFree(m->params);
  cudaFree(m->grads);
  cudaFree(m->mom);
  cudaFree(m->var);
  cudaFree(m->params_bf);
  cudaFree(m->rope_cos);
  cudaFree(m->rope_sin);
  cudaFree(m->acts_mem);
  nc_blas_free(m->blas);
  if (m->stream) cudaStreamDestroy(m->stream);
  if (m->comm) cudaStreamDestroy(m->comm);
  if (m->ev_grads) cudaEventDestroy(m->ev_grads);
  if (m->ev_comm) cudaEventDestroy(m->ev_comm);
  if (m->h2d_done) cudaEventDestroy(m->h2d_done);
  for (int i = 0; i < 2; i++)
    if (m->stats_done[i]) cudaEventDestroy(m->stats_done[i]);
  cudaFreeHost(m->h_stats);
  cudaFreeHost(m->h_inputs);
  cudaFreeHost(m->h_targets);
  cudaFreeHost(m->h_dlosses);
  cudaFreeHost(m->h_order);
  cudaFreeHost(m->h_uniq);
  cudaFreeHost(m->h_start);
  free(m);
}

static bool dev_alloc(void *pp, double bytes, const char *what) {
  void **p = (void **)pp;
  cudaError_t e = cudaMalloc(p, (size_t)bytes);
  if (e == cudaSuccess) return true;
  cudaGetLastError();
  nc_error_set("out of device memory allocating %s (%.3g GiB): %s", what, bytes / 1073741824.0,
               cudaGetErrorString(e));
  *p = NULL;
  return false;
}

extern "C" bool nn_cuda_model_init(nn_cuda_model **out, const nn_config *cfg, int B, int T,
                                   dg_status *st) {
  *out = NULL;
  if (!nn_cuda_config_check(cfg, st)) return false;
  if (B < 1 || T < 1 || T > cfg->max_seq_len)
    return dg_fail(st, DG_ERR_INVALID, "CUDA model: batch %dx%d is out of range (T <= %d)", B, T,
                   cfg->max_seq_len);
  if ((double)B * cfg->n_heads > 65535)
    return dg_fail(st, DG_ERR_INVALID,
                   "CUDA model: batch size %d with %d heads exceeds the kernels' grid (B * NH <= "
                   "65535)",
                   B, cfg->n_heads);
  if ((double)B * T * cfg->vocab_size > 9.0e15 || (double)B * T > 1073741824.0)
    return dg_fail(st, DG_ERR_INVALID, "CUDA model: batch %dx%d is too large", B, T);
  double sizes[ACT_COUNT], total = 0;
  act_bytes(cfg, (double)B * T, sizes);
  for (int i = 0; i < ACT_COUNT; i++) total += sizes[i];
  size_t free_b = 0, total_b = 0;
  if (!NC_CUDA(cudaMemGetInfo(&free_b, &total_b))) return nc_error_take(st, "CUDA model");
  double need = total + params_bytes(cfg);
  if (need > (double)free_b)
    return dg_fail(st, DG_ERR_INVALID,
                   "CUDA model: needs %.3g GiB of device memory for batches of %dx%d, %.3g GiB "
                   "are free",
                   need / 1073741824.0, B, T, (double)free_b / 1073741824.0);

  nn_cuda_model *m = (nn_cuda_model *)calloc(1, sizeof *m);
  if (!m) return dg_fail(st, DG_ERR_RUNTIME, "CUDA model: out of host memory");
  m->cfg = *cfg;
  m->B = B;
  m->T = T;
  nn_optim_default(&m->opt);
  nc_layout_make(cfg, &m->lay);
  m->num_params = m->lay.total;
  DG_ASSERT((int64_t)m->num_params == nn_config_param_count(cfg));
  size_t P = m->num_params, N = (size_t)B * T, hd2 = (size_t)cfg->head_dim / 2;
  size_t nrope = (size_t)cfg->max_seq_len * hd2;
  bool ok = NC_CUDA(cudaStreamCreateWithFlags(&m->stream, cudaStreamNonBlocking)) &&
            NC_CUDA(cudaStreamCreateWithFlags(&m->comm, cudaStreamNonBlocking)) &&
            NC_CUDA(cudaEventCreateWithFlags(&m->ev_grads, cudaEventDisableTiming)) &&
            NC_CUDA(cudaEventCreateWithFlags(&m->ev_comm, cudaEventDisableTiming)) &&
            nc_blas_init(&m->blas) && dev_alloc(&m->params, 4.0 * P, "parameters") &&
            dev_alloc(&m->grads, 4.0 * P, "gradients") &&
            dev_alloc(&m->mom, 4.0 * P, "AdamW m") && dev_alloc(&m->var, 4.0 * P, "AdamW v") &&
            dev_alloc(&m->params_bf, 2.0 * P, "bf16 parameters") &&
            dev_alloc(&m->rope_cos, 4.0 * nrope, "RoPE table") &&
            dev_alloc(&m->rope_sin, 4.0 * nrope, "RoPE table") &&
            dev_alloc(&m->acts_mem, total, "activations");
  if (ok) {
    unsigned char *p = m->acts_mem;
    int i = 0;
#define X(type, f, n)                                                         \
  m->a.f = (type *)p;                                                         \
  p += (size_t)sizes[i++];
    NC_ACT_LIST(X)
#undef X
    float *cosb = (float *)malloc(sizeof(float) * nrope), *sinb = (float *)malloc(sizeof(float) * nrope);
    ok = NC_CUDA(cudaMallocHost((void **)&m->h_inputs, sizeof(int) * N)) &&
         NC_CUDA(cudaMallocHost((void **)&m->h_targets, sizeof(int) * N)) &&
         NC_CUDA(cudaMallocHost((void **)&m->h_dlosses, sizeof(float) * N)) &&
         NC_CUDA(cudaMallocHost((void **)&m->h_order, sizeof(int) * N)) &&
         NC_CUDA(cudaMallocHost((void **)&m->h_uniq, sizeof(int) * N)) &&
         NC_CUDA(cudaMallocHost((void **)&m->h_start, sizeof(int) * (N + 1))) &&
         NC_CUDA(cudaEventCreateWithFlags(&m->h2d_done, cudaEventDisableTiming)) &&
         NC_CUDA(cudaMallocHost((void **)&m->h_stats, sizeof(double) * 4)) &&
         NC_CUDA(cudaEventCreateWithFlags(&m->stats_done[0], cudaEventDisableTiming)) &&
         NC_CUDA(cudaEventCreateWithFlags(&m->stats_done[1], cudaEventDisableTiming));
    m->stats_step[0] = m->stats_step[1] = -1;
    if (ok && (!cosb || !sinb)) {
      nc_error_set("out of host memory for the RoPE tables");
      ok = false;
    } else if (ok) {
      nn_rope_table(cosb, sinb, cfg->rope_theta, cfg->head_dim, cfg->max_seq_len);
      ok = NC_CUDA(cudaMemcpy(m->rope_cos, cosb, sizeof(float) * nrope, cudaMemcpyHostToDevice)) &&
           NC_CUDA(cudaMemcpy(m->rope_sin, sinb, sizeof(float) * nrope, cudaMemcpyHostToDevice)) &&
           NC_CUDA(cudaMemsetAsync(m->params, 0, 4 * P, m->stream)) &&
           NC_CUDA(cudaMemsetAsync(m->grads, 0, 4 * P, m->stream)) &&
           NC_CUDA(cudaMemsetAsync(m->mom, 0, 4 * P, m->stream)) &&
           NC_CUDA(cudaMemsetAsync(m->var, 0, 4 * P, m->stream)) &&
           NC_CUDA(cudaMemsetAsync(m->params_bf, 0, 2 * P, m->stream)) &&
           NC_CUDA(cudaStreamSynchronize(m->stream));
    }
    free(cosb);
    free(sinb);
  }
  if (!ok) {
    nn_cuda_model_free(m);
    return nc_error_take(st, "CUDA model");
  }
  *out = m;
  return true;
}

extern "C" const nn_config *nn_cuda_model_config(const nn_cuda_model *m) { return &m->cfg; }
extern "C" size_t nn_cuda_model_num_params(const nn_cuda_model *m) { return m->num_params; }
extern "C" nn_optim *nn_cuda_model_optim(nn_cuda_model *m) { return &m->opt; }
extern "C" void nn_cuda_model_set_dp(nn_cuda_model *m, nn_cuda_dp *dp) { m->dp = dp; }

static bool same_config(const nn_config *a, const nn_config *b) {
  return a->vocab_size == b->vocab_size && a->d_model == b->d_model &&
         a->n_layers == b->n_layers && a->n_heads == b->n_heads &&
         a->n_kv_heads == b->n_kv_heads && a->head_dim == b->head_dim &&
         a->ffn_hidden == b->ffn_hidden && a->max_seq_len == b->max_seq_len &&
         a->rope_theta == b->rope_theta && a->norm_eps == b->norm_eps;
}

extern "C" bool nn_cuda_model_load(nn_cuda_model *m, const nn_model *ref, bool with_state,
                                   dg_status *st) {
  if (!same_config(&m->cfg, &ref->cfg) || ref->num_params != m->num_params)
    return dg_fail(st, DG_ERR_INVALID, "CUDA model load: the C model has another config");
  if (with_state && (!ref->m_mem || !ref->v_mem))
    return dg_fail(st, DG_ERR_INVALID, "CUDA model load: the C model has no AdamW state");
  size_t bytes = sizeof(float) * m->num_params;
  cudaStream_t s = m->stream;
  bool ok = copy_permuted(m, m->params, ref->params_mem, true);
  if (ok) nc_to_bf16(m->params_bf, m->params, m->num_params, s);
  ok = ok && !nc_error_pending();
  if (ok && with_state)
    ok = copy_permuted(m, m->mom, ref->m_mem, true) && copy_permuted(m, m->var, ref->v_mem, true);
  else if (ok)
    ok = NC_CUDA(cudaMemsetAsync(m->mom, 0, bytes, s)) && NC_CUDA(cudaMemsetAsync(m->var, 0, bytes, s));
  ok = ok && NC_CUDA(cudaMemsetAsync(m->grads, 0, bytes, s)) && NC_CUDA(cudaStreamSynchronize(s));
  if (ok) m->opt = ref->opt;
  m->logits_valid = m->last_has_targets = m->loss_valid = m->norm_valid = false;
  return nc_error_take(st, "CUDA model load");
}

static bool copy_to_host(const nn_cuda_model *m, void *dst, const void *src, size_t bytes) {
  return NC_CUDA(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToHost, m->stream)) &&
         NC_CUDA(cudaStreamSynchronize(m->stream));
}

extern "C" bool nn_cuda_model_store(const nn_cuda_model *m, nn_model *ref, bool with_state,
                                    dg_status *st) {
  if (!same_config(&m->cfg, &ref->cfg) || ref->num_params != m->num_params)
    return dg_fail(st, DG_ERR_INVALID, "CUDA model store: the C model has another config");
  if (with_state && (!ref->m_mem || !ref->v_mem))
    return dg_fail(st, DG_ERR_INVALID, "CUDA model store: the C model has no AdamW state");
  if (copy_permuted(m, m->params, ref->params_mem, false) && with_state &&
      copy_permuted(m, m->mom, ref->m_mem, false))
    copy_permuted(m, m->var, ref->v_mem, false);
  return nc_error_take(st, "CUDA model store");
}

/* ---- forward ------------------------------------------------------------- */

extern "C" bool nn_cuda_batch_check(const nn_cuda_model *m, const int32_t *inputs,
                                    const int32_t *targets, const float *weights, int B, int T,
                                    dg_status *st) {
  if (B < 1 || T < 1 || B > m->B || T > m->T)
    return dg_fail(st, DG_ERR_INVALID, "batch %dx%d exceeds the reserved %dx%d", B, T, m->B, m->T);
  int V = m->cfg.vocab_size;
  for (int i = 0; i < B * T; i++) {
    if (inputs[i] < 0 || inputs[i] >= V)
      return dg_fail(st, DG_ERR_INVALID, "batch: inputs[%d][%d] = %d is outside the vocabulary [0, %d)",
                     i / T, i % T, (int)inputs[i], V);
    if (targets && (targets[i] < 0 || targets[i] >= V))
      return dg_fail(st, DG_ERR_INVALID, "batch: targets[%d][%d] = %d is outside the vocabulary [0, %d)",
                     i / T, i % T, (int)targets[i], V);
    if (weights && (!isfinite(weights[i]) || weights[i] < 0))
      return dg_fail(st, DG_ERR_INVALID, "batch: weights[%d][%d] = %g must be finite and >= 0",
                     i / T, i % T, (double)weights[i]);
  }
  return true;
}

static bool forward_impl(nn_cuda_model *m, const int32_t *inputs, const int32_t *targets,
                         const float *weights, double norm, int B, int T, float *loss,
                         dg_status *st) {
  const nn_config *c = &m->cfg;
  int L = c->n_layers, C = c->d_model, V = c->vocab_size, F = c->ffn_hidden;
  int NH = c->n_heads, NKV = c->n_kv_heads, HD = c->head_dim, QD = NH * HD, KVD = NKV * HD;
  int QKVD = QD + 2 * KVD, N = B * T;
  size_t NC = (size_t)N * C;
  cudaStream_t s = m->stream;
  nc_acts *a = &m->a;
  const nc_layout *lay = &m->lay;
  const float *pf = m->params;
  const bf16 *pb = m->params_bf;
  nc_blas *bl = m->blas;
  m->logits_valid = m->last_has_targets = m->loss_valid = false;

  /* the staging is free once the last batch's copies are done (the host
   * runs at most one batch ahead of the device) */
  bool ok = !m->h2d_pending || NC_CUDA(cudaEventSynchronize(m->h2d_done));
  m->h2d_pending = false;
  if (ok) {
    memcpy(m->h_inputs, inputs, sizeof(int) * N);
    ok = NC_CUDA(cudaMemcpyAsync(a->inputs, m->h_inputs, sizeof(int) * N, cudaMemcpyHostToDevice, s));
  }
  if (ok && targets) {
    for (int i = 0; i < N; i++)
      m->h_dlosses[i] = norm > 0 ? (float)((weights ? weights[i] : 1.0f) / norm) : 0.0f;
    m->emb_u = nc_embedding_plan(inputs, N, V, m->h_order, m->h_uniq, m->h_start);
    memcpy(m->h_targets, targets, sizeof(int) * N);
    ok = NC_CUDA(cudaMemcpyAsync(a->targets, m->h_targets, sizeof(int) * N, cudaMemcpyHostToDevice, s)) &&
         NC_CUDA(cudaMemcpyAsync(a->dlosses, m->h_dlosses, sizeof(float) * N, cudaMemcpyHostToDevice, s)) &&
         NC_CUDA(cudaMemcpyAsync(a->emb_order, m->h_order, sizeof(int) * N, cudaMemcpyHostToDevice, s)) &&
         NC_CUDA(cudaMemcpyAsync(a->emb_uniq, m->h_uniq, sizeof(int) * m->emb_u, cudaMemcpyHostToDevice, s)) &&
         NC_CUDA(cudaMemcpyAsync(a->emb_start, m->h_start, sizeof(int) * (m->emb_u + 1),
                                 cudaMemcpyHostToDevice, s));
  }
  if (ok) ok = NC_CUDA(cudaEventRecord(m->h2d_done, s));
  if (!ok) return nc_error_take(st, "CUDA forward");
  m->h2d_pending = true;

  nc_embedding_forward(a->x, a->inputs, pf + nc_at(lay, NN_PARAM_WTE, 0), N, C, s);
  for (int l = 0; ok && l < L; l++) {
    float *x = a->x + l * NC, *xmid = a->xmid + l * NC;
    bf16 *ln1 = a->ln1 + l * NC, *ln2 = a->ln2 + l * NC;
    bf16 *qkv = a->qkv + (size_t)l * N * QKVD, *q = qkv, *k = qkv + QD, *v = qkv + QD + KVD;
    bf16 *atty = a->atty + (size_t)l * N * QD;
    float *lse = a->lse + (size_t)l * N * NH;
    bf16 *h13 = a->h13 + (size_t)l * N * 2 * F, *hg = a->hg + (size_t)l * N * F;

    /* x = the last layer's xmid + its MLP output (in dn), added here */
    if (l == 0)
      nc_rmsnorm_forward(ln1, a->rstd1, x, pf + nc_at(lay, NN_PARAM_LN1W, 0), N, C, c->norm_eps, s);
    else
      nc_rmsnorm_forward_add(ln1, a->rstd1 + (size_t)l * N, x, a->xmid + (l - 1) * NC, a->dn,
                             pf + nc_at(lay, NN_PARAM_LN1W, l), N, C, c->norm_eps, s);
    /* q|k|v = ln1 . [wq; wk; wv]^T, one matmul */
    ok = nc_mm_forward(bl, qkv, CUDA_R_16BF, NULL, 0.0f, ln1, pb + nc_at(lay, NN_PARAM_WQ, l), N,
                       C, QKVD, s);
    if (!ok) break;
    nc_rope_qk(q, k, QKVD, m->rope_cos, m->rope_sin, B, T, NH, NKV, HD, s);
    /* xmid = x + atty . wo^T: the product in bf16 (dn is free until the
     * backward), added by the norm that reads xmid */
    ok = nc_attention_forward(atty, lse, q, k, v, QKVD, B, T, NH, NKV, HD, s) &&
         nc_mm_forward(bl, a->dn, CUDA_R_16BF, NULL, 0.0f, atty, pb + nc_at(lay, NN_PARAM_WO, l), N,
                       QD, C, s);
    if (!ok) break;
    nc_rmsnorm_forward_add(ln2, a->rstd2 + (size_t)l * N, xmid, x, a->dn,
                           pf + nc_at(lay, NN_PARAM_LN2W, l), N, C, c->norm_eps, s);
    /* gate|up = ln2 . [w1; w3]^T */
    ok = nc_mm_forward(bl, h13, CUDA_R_16BF, NULL, 0.0f, ln2, pb + nc_at(lay, NN_PARAM_W1, l), N, C,
                       2 * F, s);
    if (!ok) break;
    nc_swiglu_forward(hg, h13, N, F, s);
    /* x[l + 1] = xmid + hg . w2^T, added by the next norm */
    ok = nc_mm_forward(bl, a->dn, CUDA_R_16BF, NULL, 0.0f, hg, pb + nc_at(lay, NN_PARAM_W2, l), N,
                       F, C, s);
  }
  if (ok) {
    if (L == 0)
      nc_rmsnorm_forward(a->lnf, a->rstdf, a->x, pf + nc_at(lay, NN_PARAM_LNFW, 0), N, C,
                         c->norm_eps, s);
    else
      nc_rmsnorm_forward_add(a->lnf, a->rstdf, a->x + L * NC, a->xmid + (L - 1) * NC, a->dn,
                             pf + nc_at(lay, NN_PARAM_LNFW, 0), N, C, c->norm_eps, s);
    ok = nc_mm_forward(bl, a->logits, CUDA_R_16BF, NULL, 0.0f, a->lnf,
                       pb + nc_at(lay, NN_PARAM_WLM, 0), N, C, V, s);
  }
  if (!ok || nc_error_pending()) return nc_error_take(st, "CUDA forward");
  m->last_B = B;
  m->last_T = T;
  if (!targets) {
    m->logits_valid = true;
    if (loss) *loss = -1.0f;
    return NC_CUDA(cudaStreamSynchronize(s)) ? true : nc_error_take(st, "CUDA forward");
  }
  nc_classifier(a->logits, a->losses, a->dlosses, a->targets, N, V, s);
  nc_loss_sum(a->scal + NC_NORM_BLOCKS + 1, a->losses, a->dlosses, N, s);
  if (nc_error_pending()) return nc_error_take(st, "CUDA forward");
  m->last_has_targets = m->loss_valid = true;
  return !loss || nn_cuda_last_loss(m, loss, st);
}

extern "C" bool nn_cuda_last_loss(nn_cuda_model *m, float *loss, dg_status *st) {
  if (!m->loss_valid) return dg_fail(st, DG_ERR_INVALID, "CUDA loss: no forward with targets yet");
  double sum = 0;
  if (!copy_to_host(m, &sum, m->a.scal + NC_NORM_BLOCKS + 1, sizeof sum))
    return nc_error_take(st, "CUDA loss");
  if (m->dp && !nn_cuda_dp_sum(m->dp, &sum, 1, st)) return false;
  *loss = (float)sum;
  return true;
}

extern "C" bool nn_cuda_forward(nn_cuda_model *m, const int32_t *inputs, const int32_t *targets,
                                const float *weights, int B, int T, float *loss, dg_status *st) {
  if (!nn_cuda_batch_check(m, inputs, targets, weights, B, T, st)) return false;
  double norm = (double)B * T;
  if (targets && weights) {
    norm = 0;
    for (int i = 0; i < B * T; i++) norm += weights[i];
  }
  if (targets && m->dp && !nn_cuda_dp_sum(m->dp, &norm, 1, st)) return false;
  return forward_impl(m, inputs, targets, weights, norm, B, T, loss, st);
}

extern "C" bool nn_cuda_forward_weighted(nn_cuda_model *m, const int32_t *inputs,
                                         const int32_t *targets, const float *weights, double norm,
                                         int B, int T, float *loss, dg_status *st) {
  if (!targets) return dg_fail(st, DG_ERR_INVALID, "weighted forward: targets are required");
  if (!isfinite(norm) || norm <= 0)
    return dg_fail(st, DG_ERR_INVALID, "weighted forward: normaliser %g must be finite and > 0", norm);
  if (!nn_cuda_batch_check(m, inputs, targets, NULL, B, T, st)) return false;
  for (int i = 0; weights && i < B * T; i++)
    if (!isfinite(weights[i]))
      return dg_fail(st, DG_ERR_INVALID, "batch: weights[%d][%d] = %g must be finite", i / T,
                     i % T, (double)weights[i]);
  return forward_impl(m, inputs, targets, weights, norm, B, T, loss, st);
}

/* ---- backward ------------------------------------------------------------ */

/* The model's stream waits for the gradient sums queued on comm. */
static bool join_comm(const nn_cuda_model *m) {
  return NC_CUDA(cudaEventRecord(m->ev_comm, m->comm)) &&
         NC_CUDA(cudaStreamWaitEvent(m->stream, m->ev_comm, 0));
}

/* Sums count gradients at g over the ranks on comm, after the work queued
 * so far on the model's stream. */
static bool reduce_async(nn_cuda_model *m, float *g, size_t count) {
  return count == 0 || (NC_CUDA(cudaEventRecord(m->ev_grads, m->stream)) &&
                        NC_CUDA(cudaStreamWaitEvent(m->comm, m->ev_grads, 0)) &&
                        nc_dp_allreduce(m->dp, g, count, false, m->comm));
}

extern "C" bool nn_cuda_zero_grad(nn_cuda_model *m, dg_status *st) {
  if (m->grads_reduced) join_comm(m);
  m->grads_reduced = false;
  NC_CUDA(cudaMemsetAsync(m->grads, 0, sizeof(float) * m->num_params, m->stream));
  return nc_error_take(st, "CUDA zero_grad");
}

extern "C" bool nn_cuda_backward(nn_cuda_model *m, dg_status *st) {
  if (!m->last_has_targets)
    return dg_fail(st, DG_ERR_INVALID, "CUDA backward: the last forward had no targets");
  const nn_config *c = &m->cfg;
  int B = m->last_B, T = m->last_T, N = B * T;
  int L = c->n_layers, C = c->d_model, V = c->vocab_size, F = c->ffn_hidden;
  int NH = c->n_heads, NKV = c->n_kv_heads, HD = c->head_dim, QD = NH * HD, KVD = NKV * HD;
  int QKVD = QD + 2 * KVD;
  size_t NC = (size_t)N * C, NF = (size_t)N * F;
  cudaStream_t s = m->stream;
  nc_acts *a = &m->a;
  const nc_layout *lay = &m->lay;
  const float *pf = m->params;
  float *g = m->grads;
  const bf16 *pb = m->params_bf;
  nc_blas *bl = m->blas;
  /* under data parallelism each layer's gradients are summed over the
   * ranks as soon as they are complete, so a second backward would add to
   * sums: no accumulation across backward calls there */
  const bool overlap = m->dp && nn_cuda_dp_size(m->dp) > 1;
  if (overlap && m->grads_reduced)
    return dg_fail(st, DG_ERR_INVALID, "CUDA backward: under data parallelism the gradients are "
                                       "already summed over the ranks; zero them first");
  /* the forward with targets left d loss / d logits in a->logits */
  m->last_has_targets = false;

#define P_(id, l) nc_at(lay, NN_PARAM_##id, l)
  bool ok = nc_mm_backward_input(bl, a->dn, CUDA_R_16BF, 0.0f, a->logits, pb + P_(WLM, 0), N, C, V,
                                 s) &&
            nc_mm_backward_weight(bl, g + P_(WLM, 0), a->logits, a->lnf, N, C, V, s) &&
            /* the LM head's gradient is complete: its sum over the ranks
             * overlaps the whole backward */
            (!overlap || reduce_async(m, g + P_(WLM, 0), lay->size[NN_PARAM_WLM])) &&
            NC_CUDA(cudaMemsetAsync(a->dx, 0, sizeof(float) * NC, s));
  if (ok)
    nc_rmsnorm_backward(a->dx, a->dxb, g + P_(LNFW, 0), a->norm_part, a->dn, a->x + L * NC,
                        pf + P_(LNFW, 0), a->rstdf, N, C, s);
  bf16 *dqkv = a->dqkv;
  for (int l = L - 1; ok && l >= 0; l--) {
    float *x = a->x + l * NC, *xmid = a->xmid + l * NC;
    bf16 *ln1 = a->ln1 + l * NC, *ln2 = a->ln2 + l * NC;
    bf16 *qkv = a->qkv + (size_t)l * N * QKVD, *q = qkv, *k = qkv + QD, *v = qkv + QD + KVD;
    bf16 *atty = a->atty + (size_t)l * N * QD;
    float *lse = a->lse + (size_t)l * N * NH;
    bf16 *h13 = a->h13 + l * 2 * NF, *hg = a->hg + l * NF;

    /* x[l+1] = xmid + hg . w2^T: dx passes through the residual */
    ok = nc_mm_backward_input(bl, a->dhg, CUDA_R_16BF, 0.0f, a->dxb, pb + P_(W2, l), N, F, C, s) &&
         nc_mm_backward_weight(bl, g + P_(W2, l), a->dxb, hg, N, F, C, s);
    if (!ok) break;
    nc_swiglu_backward(a->dh13, a->dhg, h13, N, F, s);
    /* [w1; w3] is one (2F, C) matrix: one product for the input, one for
     * the weights */
    ok = nc_mm_backward_input(bl, a->dn, CUDA_R_16BF, 0.0f, a->dh13, pb + P_(W1, l), N, C, 2 * F, s) &&
         nc_mm_backward_weight(bl, g + P_(W1, l), a->dh13, ln2, N, C, 2 * F, s);
    if (!ok) break;
    nc_rmsnorm_backward(a->dx, a->dxb, g + P_(LN2W, l), a->norm_part, a->dn, xmid, pf + P_(LN2W, l),
                        a->rstd2 + (size_t)l * N, N, C, s);

    /* xmid = x + atty . wo^T */
    ok = nc_mm_backward_input(bl, a->datty, CUDA_R_16BF, 0.0f, a->dxb, pb + P_(WO, l), N, QD, C, s) &&
         nc_mm_backward_weight(bl, g + P_(WO, l), a->dxb, atty, N, QD, C, s) &&
         /* dq, dk come out rotated back by RoPE (fused into the kernels) */
         nc_attention_backward(dqkv, dqkv + QD, dqkv + QD + KVD, a->delta, a->datty, atty, lse, q,
                               k, v, QKVD, B, T, NH, NKV, HD, m->rope_cos, m->rope_sin, s);
    if (!ok) break;
    ok = nc_mm_backward_input(bl, a->dn, CUDA_R_16BF, 0.0f, dqkv, pb + P_(WQ, l), N, C, QKVD, s) &&
         nc_mm_backward_weight(bl, g + P_(WQ, l), dqkv, ln1, N, C, QKVD, s);
    /* the layer's matrices are done: their sum over the ranks overlaps the
     * layers below */
    if (ok && overlap)
      ok = reduce_async(m, g + lay->layer_off + (size_t)l * lay->layer_block, lay->layer_block);
    if (!ok) break;
    nc_rmsnorm_backward(a->dx, a->dxb, g + P_(LN1W, l), a->norm_part, a->dn, x, pf + P_(LN1W, l),
                        a->rstd1 + (size_t)l * N, N, C, s);
  }
  if (ok)
    nc_embedding_backward(g + P_(WTE, 0), a->dx, a->emb_order, a->emb_uniq, a->emb_start, m->emb_u,
                          C, s);
#undef P_
  /* the rest: the global matrices before the layer blocks but the LM
   * head (the embedding), the norm gains after them */
  if (ok && overlap) {
    size_t wlm = lay->off[NN_PARAM_WLM], wlm_end = wlm + lay->size[NN_PARAM_WLM];
    size_t end = lay->layer_off + (size_t)L * lay->layer_block;
    DG_ASSERT(wlm_end <= lay->layer_off);
    ok = reduce_async(m, g, wlm) && reduce_async(m, g + wlm_end, lay->layer_off - wlm_end) &&
         reduce_async(m, g + end, lay->total - end);
    m->grads_reduced = ok;
  }
  return nc_error_take(st, "CUDA backward");
}

/* ---- update -------------------------------------------------------------- */

extern "C" bool nn_cuda_update(nn_cuda_model *m, int64_t step, float *norm, dg_status *st) {
  if (step < 0) return dg_fail(st, DG_ERR_INVALID, "CUDA update: step %lld < 0", (long long)step);
  cudaStream_t s = m->stream;
  /* the gradients summed over the ranks: by the backward, or here */
  if (m->grads_reduced ? !join_comm(m)
                       : m->dp && nn_cuda_dp_size(m->dp) > 1 &&
                             !nc_dp_allreduce(m->dp, m->grads, m->num_params, false, s))
    return nc_error_take(st, "CUDA update");
  const nn_optim *o = &m->opt;
  double *part = m->a.scal, *sumsq = m->a.scal + NC_NORM_BLOCKS;
  nc_sumsq(sumsq, part, m->grads, m->num_params, s);
  float lr = nn_optim_lr(o, step);
  double t = (double)step + 1;
  float bc1 = (float)(1.0 - pow(o->beta1, t)), bc2 = (float)(1.0 - pow(o->beta2, t));
  /* the decaying tensors, then the rest (the layout puts them first) */
  size_t nd = m->lay.n_decay, P = m->num_params;
  nc_adamw(m->params, m->params_bf, m->mom, m->var, m->grads, nd, sumsq, o->grad_clip, lr,
           o->beta1, o->beta2, o->eps, o->weight_decay, bc1, bc2, s);
  nc_adamw(m->params + nd, m->params_bf + nd, m->mom + nd, m->var + nd, m->grads + nd, P - nd,
           sumsq, o->grad_clip, lr, o->beta1, o->beta2, o->eps, 0.0f, bc1, bc2, s);
  /* this step's results into the next pinned slot; the next forward
   * overwrites the loss sum only after this copy (one stream) */
  int slot = m->stats_next;
  if (!NC_CUDA(cudaMemcpyAsync(m->h_stats + 2 * slot, sumsq, 2 * sizeof(double),
                               cudaMemcpyDeviceToHost, s)) ||
      !NC_CUDA(cudaEventRecord(m->stats_done[slot], s)) || nc_error_pending())
    return nc_error_take(st, "CUDA update");
  m->stats_step[slot] = step;
  m->stats_loss[slot] = m->loss_valid;
  m->stats_next = slot ^ 1;
  m->norm_valid = true;
  return !norm || nn_cuda_last_norm(m, norm, st);
}

extern "C" bool nn_cuda_step_stats(nn_cuda_model *m, int64_t step, float *loss, float *norm,
                                   dg_status *st) {
  /* the newer slot first: a step number given twice (a repeated update)
   * reads the latest */
  int slot = m->stats_step[m->stats_next ^ 1] == step ? m->stats_next ^ 1
             : m->stats_step[m->stats_next] == step ? m->stats_next
                                                    : -1;
  if (slot < 0)
    return dg_fail(st, DG_ERR_INVALID,
                   "CUDA step results: step %lld is not one of the last two updates",
                   (long long)step);
  if (loss && !m->stats_loss[slot])
    return dg_fail(st, DG_ERR_INVALID,
                   "CUDA step results: the forward before step %lld had no targets",
                   (long long)step);
  if (!NC_CUDA(cudaEventSynchronize(m->stats_done[slot])))
    return nc_error_take(st, "CUDA step results");
  double sum = m->h_stats[2 * slot + 1];
  if (loss && m->dp && !nn_cuda_dp_sum(m->dp, &sum, 1, st)) return false;
  if (loss) *loss = (float)sum;
  if (norm) *norm = (float)sqrt(m->h_stats[2 * slot]);
  return true;
}

extern "C" bool nn_cuda_last_norm(nn_cuda_model *m, float *norm, dg_status *st) {
  if (!m->norm_valid) return dg_fail(st, DG_ERR_INVALID, "CUDA gradient norm: no update yet");
  double ss = 0;
  if (!copy_to_host(m, &ss, m->a.scal + NC_NORM_BLOCKS, sizeof ss))
    return nc_error_take(st, "CUDA gradient norm");
  *norm = (float)sqrt(ss);
  return true;
}

/* ---- host copies ----------------------------------------------------------- */

extern "C" bool nn_cuda_copy_logits(const nn_cuda_model *m, float *out, dg_status *st) {
  if (!m->logits_valid)
    return dg_fail(st, DG_ERR_INVALID, "CUDA logits: the last forward had targets (logits are "
                                       "only kept by a forward without targets)");
  size_t n = (size_t)m->last_B * m->last_T * m->cfg.vocab_size;
  uint16_t *tmp = (uint16_t *)malloc(sizeof(uint16_t) * n);
  if (!tmp) return dg_fail(st, DG_ERR_RUNTIME, "CUDA logits: out of host memory");
  if (copy_to_host(m, tmp, m->a.logits, sizeof(uint16_t) * n))
    for (size_t i = 0; i < n; i++) {
      uint32_t bits = (uint32_t)tmp[i] << 16; /* bf16 is the top half of a float */
      memcpy(&out[i], &bits, sizeof bits);
    }
  free(tmp);
  return nc_error_take(st, "CUDA logits");
}

extern "C" bool nn_cuda_copy_losses(const nn_cuda_model *m, float *out, dg_status *st) {
  copy_to_host(m, out, m->a.losses, sizeof(float) * (size_t)m->last_B * m->last_T);
  return nc_error_take(st, "CUDA losses");
}

extern "C" bool nn_cuda_copy_params(const nn_cuda_model *m, float *out, dg_status *st) {
  copy_permuted(m, m->params, out, false);
  return nc_error_take(st, "CUDA params");
}

extern "C" bool nn_cuda_copy_grads(const nn_cuda_model *m, float *out, dg_status *st) {
  if (!m->grads_reduced || join_comm(m)) copy_permuted(m, m->grads, out, false);
  return nc_error_take(st, "CUDA grads");
}

/* ---- the decoder's view (decode.cu, model_view.cuh) ------------------------ */

void nc_model_view_get(const nn_cuda_model *m, nc_model_view *v) {
  v->cfg = &m->cfg;
  v->params = m->params;
  v->params_bf = m->params_bf;
  v->layout = m->lay;
  v->rope_cos = m->rope_cos;
  v->rope_sin = m->rope_sin;
  v->stream = m->stream;
}
