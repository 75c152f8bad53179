/* nn_cuda.h: the Llama-style decoder of nn.h on an NVIDIA GPU: bf16
 * matmuls (cuBLASLt) with fp32 master weights, fp32 gradients and fp32
 * AdamW state; fused RMSNorm, RoPE, SwiGLU and classifier kernels; a tiled
 * (flash-style) causal attention that never holds a T x T matrix; data
 * parallel training over NCCL, one process per GPU; and batched KV-cache
 * generation with sampling on the device, from the same weights.
 *
 * The model is the C reference's (nn.h, docs/model.md): the same parameter
 * order and layout, so parameters move between the two with
 * nn_cuda_model_load / nn_cuda_model_store and checkpoints are shared
 * through nn_checkpoint_save / _load. docs/model-cuda.md describes the
 * precision of each tensor and the tolerances against the C reference.
 *
 * Exists only where the build found nvcc (the C side sees DG_HAVE_CUDA).
 * Calls use the current CUDA device of the calling process. GPU faults and
 * CUDA, cuBLASLt and NCCL failures come back as DG_ERR_RUNTIME with the call
 * that failed; bad batches and configs as DG_ERR_INVALID. One model is used
 * by one thread at a time.
 *
 * B batch, T time, V vocab; the config's letters are nn.h's.
 */
#ifndef DRAGON_NN_CUDA_H
#define DRAGON_NN_CUDA_H

#include "dragon/base.h"
#include "dragon/nn.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Number of CUDA devices; 0 (with the reason in st, which may be NULL)
 * where there is no driver or no device. It initialises CUDA in this
 * process: a process that will later fork GPU workers must not call it
 * (nn_cuda_dp_launch's workers check the devices themselves). */
int nn_cuda_device_count(dg_status *st);
/* The CUDA device ordinal this thread's kernels go to (0 where unknown). */
int nn_cuda_current_device(void);

typedef struct nn_cuda_model nn_cuda_model;

/* Checks that the CUDA model supports cfg (nn_config_validate, and
 * head_dim a multiple of 16 up to 128 for the attention kernel), without
 * touching the GPU. */
bool nn_cuda_config_check(const nn_config *cfg, dg_status *st);
/* Device memory the model needs for batches up to B x T. */
int64_t nn_cuda_model_bytes(const nn_config *cfg, int B, int T);
/* Creates a training model on the current device with activations for
 * batches up to B x T; parameters are zero until nn_cuda_model_load; the
 * optimizer settings are nn_optim_default's. On failure nothing stays
 * allocated and *out is NULL. */
bool nn_cuda_model_init(nn_cuda_model **out, const nn_config *cfg, int B, int T, dg_status *st);
void nn_cuda_model_free(nn_cuda_model *m);
const nn_config *nn_cuda_model_config(const nn_cuda_model *m);
size_t nn_cuda_model_num_params(const nn_cuda_model *m);
/* The optimizer settings used by nn_cuda_update; the caller may change them. */
nn_optim *nn_cuda_model_optim(nn_cuda_model *m);

/* Copies the parameters of a C model of the same config to the GPU (and
 * its AdamW m and v when with_state, which needs a training C model); the
 * optimizer settings (ref->opt) come along. */
bool nn_cuda_model_load(nn_cuda_model *m, const nn_model *ref, bool with_state, dg_status *st);
/* Copies the fp32 parameters (and AdamW m, v when with_state) back into a
 * C model of the same config, e.g. to write a checkpoint. */
bool nn_cuda_model_store(const nn_cuda_model *m, nn_model *ref, bool with_state, dg_status *st);

/* Checks a batch as nn_batch_check does: B, T within the reserved size,
 * tokens in [0, V), weights finite and >= 0. */
bool nn_cuda_batch_check(const nn_cuda_model *m, const int32_t *inputs, const int32_t *targets,
                         const float *weights, int B, int T, dg_status *st);
/* Forward over host arrays inputs (B, T). With targets, *loss is
 * sum(w * nll) / sum(w) as nn_forward's (weights NULL: all 1; a zero total
 * gives 0); without targets only the logits are computed and *loss is -1.
 * Under data parallelism (nn_cuda_model_set_dp) sums run over all ranks'
 * batches, so the loss is the one of the global batch. Checks the batch.
 *
 * Asynchronous use: with targets and loss NULL the forward only queues its
 * work (nn_cuda_last_loss reads the loss later), and backward and an
 * update with norm NULL do not wait for the device either, so the host
 * prepares the next batch while the device works (at most one batch
 * ahead); a device fault then surfaces at the next call that waits. */
bool nn_cuda_forward(nn_cuda_model *m, const int32_t *inputs, const int32_t *targets,
                     const float *weights, int B, int T, float *loss, dg_status *st);
/* Same with an explicit normaliser, as nn_forward_weighted: weights any
 * finite value, norm > 0 (already global under data parallelism). */
bool nn_cuda_forward_weighted(nn_cuda_model *m, const int32_t *inputs, const int32_t *targets,
                              const float *weights, double norm, int B, int T, float *loss,
                              dg_status *st);
bool nn_cuda_zero_grad(nn_cuda_model *m, dg_status *st);
/* Adds the gradient of the last forward's loss (which had targets). */
bool nn_cuda_backward(nn_cuda_model *m, dg_status *st);
/* One AdamW step at 0-based step `step` as nn_update: under data
 * parallelism first sums the gradients over the ranks; clips by the global
 * norm, which *norm receives (may be NULL). */
bool nn_cuda_update(nn_cuda_model *m, int64_t step, float *norm, dg_status *st);
/* The loss of the last forward with targets, and the gradient norm of the
 * last update (before clipping), waiting for the device. */
bool nn_cuda_last_loss(nn_cuda_model *m, float *loss, dg_status *st);
bool nn_cuda_last_norm(nn_cuda_model *m, float *norm, dg_status *st);
/* The results of update `step`, one of the last two: the loss of the
 * forward before it and the gradient norm, waiting only for that step
 * (the next one may be queued behind it). Either pointer may be NULL.
 * Under data parallelism every rank asks for the same steps in the same
 * order (the loss is summed over the ranks). */
bool nn_cuda_step_stats(nn_cuda_model *m, int64_t step, float *loss, float *norm, dg_status *st);

/* Host copies, for checks against the C reference. Logits (B, T, V) exist
 * after a forward without targets (a forward with targets turns them into
 * their gradient in place); losses (B, T) are the last forward's per-token
 * -log p(target); params, grads, AdamW m and v have the C layout and
 * nn_cuda_model_num_params floats. */
bool nn_cuda_copy_logits(const nn_cuda_model *m, float *out, dg_status *st);
bool nn_cuda_copy_losses(const nn_cuda_model *m, float *out, dg_status *st);
bool nn_cuda_copy_params(const nn_cuda_model *m, float *out, dg_status *st);
bool nn_cuda_copy_grads(const nn_cuda_model *m, float *out, dg_status *st);

/* The attention kernels' shapes, 0 for each default.
 * engine: 1 mma.sync (any head_dim, any sm_80+ device), 2 the sm_90
 * warpgroup products (wgmma: head_dim 64 on a compute capability 9.0
 * device); 0: the default, wgmma where it can run.
 * mma.sync (defaults 2, 1, 2): how many 16-row m-tiles of queries a warp
 * owns in the forward and in the dQ pass (1 or 2; head_dim 128 always 1):
 * two share each K and V fragment loaded from shared memory between twice
 * the rows, at the cost of registers; and how many dK/dV blocks share an
 * SM (2: a warp keeps its K and V fragments in registers; 3: it reads
 * them from shared memory, in fewer registers; head_dim 128 always 2).
 * wgmma (defaults 1, 1, 1): how many 64-row warpgroups a block of the
 * forward, the dQ pass and the dK/dV pass has (1 or 2); and dkdv_blocks,
 * with one warpgroup a dK/dV block, how many share an SM (2 or 3; default
 * 3: registers capped at 168 a thread). */
typedef struct {
  int fwd_mtiles, dq_mtiles, dkdv_blocks;
  int engine, fwd_groups, dq_groups, dkdv_groups;
} nn_cuda_attention_tiles;

/* Whether the wgmma attention kernels (engine 2) can run here: head_dim
 * 64 on a compute capability 9.0 device. */
bool nn_cuda_attention_wgmma(int head_dim);

/* The attention kernels alone, for checks against a reference: causal
 * grouped-query attention of host arrays q (B, T, NH, HD), k and v (B, T,
 * NKV, HD), each rounded to bf16 on the way in, into out (B, T, NH, HD)
 * and lse (B, NH, T), the natural log-sum-exp of each row of scores
 * scaled by 1/sqrt(HD). With dout non-NULL also the backward into dq, dk,
 * dv; with rope_cos and rope_sin (T, HD/2) non-NULL as well, dq and dk
 * come out rotated back by RoPE as in training (q and k are taken as
 * already rotated). tiles NULL: the defaults. Outputs are the kernels'
 * bf16 values as floats. */
bool nn_cuda_attention_run(const float *q, const float *k, const float *v, const float *dout,
                           int B, int T, int NH, int NKV, int HD, const float *rope_cos,
                           const float *rope_sin, const nn_cuda_attention_tiles *tiles,
                           float *out, float *lse, float *dq, float *dk, float *dv,
                           dg_status *st);

/* The attention kernels' time on random bf16 inputs of that shape (the
 * model's fused q|k|v rows, RoPE backward on): median of reps runs after
 * two warm-up runs, forward and backward apart, in ms. */
bool nn_cuda_attention_time(int B, int T, int NH, int NKV, int HD,
                            const nn_cuda_attention_tiles *tiles, int reps, double *fwd_ms,
                            double *bwd_ms, dg_status *st);

/* cuBLASLt bf16 matmul rate on the current device: n x n x n, fp32
 * accumulate, median of reps timed products after warm-up, in TFLOP/s. */
bool nn_cuda_matmul_tflops(int n, int reps, double *tflops, dg_status *st);

/* ---- KV-cache decoding and sampling (decode.cu) -------------------------- */

/* Batched incremental decoding with the weights of a CUDA model (the
 * current ones: a model being trained generates with its latest update).
 * Each of up to B rows keeps the keys (after RoPE) and values of its
 * positions in a bf16 cache on the device, (L, B, T, KVD) each. A prefill
 * runs the prompts, right-padded to the longest, through the training
 * forward's kernels (padding sits after a row's tokens, so causal attention
 * never reads it) and fills the cache; each step then feeds one token per
 * row at that row's own position (RoPE and attention length per row).
 * Logits are fp32 (B, V). docs/model-cuda.md has the precision and the
 * tolerances against the C reference's nn_kv_cache. */
typedef struct nn_cuda_kv nn_cuda_kv;

/* A cache for B rows of up to T positions (T <= max_seq_len) on m's
 * device; m must outlive it. Fails with a message when it does not fit in
 * the free device memory. */
bool nn_cuda_kv_init(nn_cuda_kv **out, nn_cuda_model *m, int B, int T, dg_status *st);
void nn_cuda_kv_free(nn_cuda_kv *c);
/* Rows 0..n-1 (n <= B) restart with prompts[b] (lens[b] >= 1 tokens, ids
 * in [0, V), lens[b] <= T) at positions 0..lens[b]-1; the logits of each
 * row are then those after its last prompt token. Later steps run n rows. */
bool nn_cuda_kv_prefill(nn_cuda_kv *c, const int32_t *const *prompts, const int *lens, int n,
                        dg_status *st);
/* Rows rows[0..n) (distinct, each below the rows of the last prefill)
 * restart with prompts[b] as a prefill would, the other rows keeping
 * their cache and position: a finished row takes a new job while the
 * rest decode on. The logits of the restarted rows are then those after
 * their prompts (the other rows' are not to be read). */
bool nn_cuda_kv_refill(nn_cuda_kv *c, const int *rows, const int32_t *const *prompts, const int *lens,
                       int n, dg_status *st);
/* Feeds tokens[b] to each active row b < n (active NULL: all) at its next
 * position (which must be < T). Inactive rows keep their cache and
 * position; their logits afterwards are meaningless. */
bool nn_cuda_kv_step(nn_cuda_kv *c, const int32_t *tokens, const bool *active, dg_status *st);
/* Tokens (rows x padded prompt length) a prefill runs through the model
 * at once, default 32768: prompts go in groups of consecutive rows within
 * it (a longer prompt goes alone). Smaller saves device memory. */
void nn_cuda_kv_set_prefill_tokens(nn_cuda_kv *c, int tokens);
/* Positions filled in row b. */
int nn_cuda_kv_pos(const nn_cuda_kv *c, int b);
/* Takes row b (< the rows of the last prefill) back to its first pos
 * positions (1 <= pos <= nn_cuda_kv_pos): the next step feeds position
 * pos. The logits are not restored (the caller keeps those it needs). */
void nn_cuda_kv_set_pos(nn_cuda_kv *c, int b, int pos);
/* The next-token logits of rows 0..n-1, (n, V) fp32, to the host. */
bool nn_cuda_kv_logits(const nn_cuda_kv *c, float *out, dg_status *st);
/* Draws one token per active row (b < n; active NULL: all) on the device
 * from its logits with nn_sample_token's rule (src/nn_cuda/sample_rule.h):
 * greedy (temperature <= 0: argmax, lowest id on ties; u unused, may be
 * NULL), else softmax(logits / temperature) cut to top-k then top-p,
 * drawing with u[b] in [0, 1) as nn_sample_token draws with
 * dg_rng_uniform. tokens[b] is -1 for inactive rows. */
bool nn_cuda_kv_sample(nn_cuda_kv *c, const nn_sample_opts *o, const double *u, const bool *active,
                       int32_t *tokens, dg_status *st);

typedef struct {
  double prefill_s;      /* prompts in, first logits out */
  double decode_s;       /* sampling and the token-by-token steps */
  int64_t prompt_tokens; /* sum of the prompt lengths */
  int64_t new_tokens;    /* tokens generated (the stop tokens not counted) */
  int64_t steps;         /* decode steps (each feeds every running row) */
} nn_cuda_gen_stats;

/* nn_generate on the GPU: the same arguments, limits and per-row RNGs
 * (row i draws from the i-th fork of seed), all n prompts in one batch;
 * a row stops at o->stop_token (not included), o->max_tokens or the
 * model's max_seq_len. Tokens match the C reference's where the logits
 * agree to the precision of bf16 (near-ties can differ). stats may be
 * NULL. */
bool nn_cuda_generate(nn_cuda_model *m, const int32_t *const *prompts, const int *prompt_lens,
                      int n, const nn_sample_opts *o, uint64_t seed, int32_t *out, int *out_lens,
                      nn_cuda_gen_stats *stats, dg_status *st);

/* ---- data parallel ------------------------------------------------------- */

/* One rank of a data-parallel group: its NCCL communicator and device. */
typedef struct nn_cuda_dp nn_cuda_dp;
int nn_cuda_dp_rank(const nn_cuda_dp *dp);
int nn_cuda_dp_size(const nn_cuda_dp *dp);

/* A rank's work; text it appends to out comes back to the launcher from
 * rank 0. Returns false with st set on failure. */
typedef bool (*nn_cuda_dp_fn)(nn_cuda_dp *dp, void *arg, dg_str *out, dg_status *st);

/* Forks nranks processes, one per GPU (rank r uses device r). Rank 0
 * creates the NCCL unique id and sends it to the others over pipes; each
 * builds its communicator and runs fn. The caller must not have used CUDA
 * before (see nn_cuda_device_count). NCCL is loaded at run time:
 * $DRAGON_NCCL_LIB, else libnccl.so.2 on the library path (with one rank
 * no NCCL is needed). NVLink multicast stays off (NCCL_NVLS_ENABLE=0
 * unless set). Waits at most timeout_s seconds, then kills the ranks.
 * Rank 0's text goes to out; a failing rank's message to st. */
bool nn_cuda_dp_launch(int nranks, nn_cuda_dp_fn fn, void *arg, int timeout_s, dg_str *out,
                       dg_status *st);
/* Makes the model's forward and update act on the global batch of the
 * group: normalisers and losses are summed over the ranks and gradients
 * summed before the update. NULL detaches. */
void nn_cuda_model_set_dp(nn_cuda_model *m, nn_cuda_dp *dp);
/* Sums n doubles on the host over the ranks (in place). */
bool nn_cuda_dp_sum(nn_cuda_dp *dp, double *vals, int n, dg_status *st);

#ifdef __cplusplus
}
#endif

#endif
