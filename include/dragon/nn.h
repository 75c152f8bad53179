/* nn.h: the Llama-style decoder's C reference (fp32): configuration,
 * parameters, forward, backward, AdamW, checkpoints and safetensors.
 *
 * The model: token embedding -> L x (RMSNorm -> Q, K, V projections -> RoPE
 * (rotate-half, as Hugging Face) -> causal attention with grouped-query
 * heads -> output projection -> residual; RMSNorm -> SwiGLU MLP -> residual)
 * -> final RMSNorm -> untied LM head -> cross-entropy with per-token loss
 * weights. No biases, no dropout. docs/model.md has the details.
 *
 * Memory follows llm.c: a size table and one allocation per group
 * (parameters, gradients, AdamW m, AdamW v, activations). Per-layer tensors
 * are stored (L, ...) contiguous, weights [out, in] (y = x . W^T), in the
 * fixed order of NN_PARAM_LIST. The model struct is public so that other
 * back ends (CUDA) can share the layout; callers treat its buffers as
 * read-only except through the functions below.
 *
 * Dimension letters, fixed throughout: B batch, T time, C d_model, V vocab,
 * L layers, NH query heads, NKV key/value heads, HD head dim, F ffn hidden,
 * QD = NH*HD, KVD = NKV*HD.
 */
#ifndef DRAGON_NN_H
#define DRAGON_NN_H

#include "dragon/base.h"

/* ---- configuration ------------------------------------------------------- */

typedef struct {
  int vocab_size;   /* V */
  int d_model;      /* C */
  int n_layers;     /* L */
  int n_heads;      /* NH */
  int n_kv_heads;   /* NKV; NH % NKV == 0 */
  int head_dim;     /* HD, even */
  int ffn_hidden;   /* F */
  int max_seq_len;  /* longest T; RoPE tables are this long */
  float rope_theta; /* RoPE base */
  float norm_eps;   /* RMSNorm epsilon */
} nn_config;

/* Built-in configs: "tiny" (CPU tests), "19m" and "88m" (the two configs of
 * anchors/torch_llama_train.py, named after their parameter counts). */
int nn_config_named_count(void);
const char *nn_config_named_name(int i);
bool nn_config_named(const char *name, nn_config *cfg, dg_status *st);

/* Parses `key = value` lines ('#' starts a comment). An optional first key
 * `base = NAME` starts from a built-in config; otherwise every key without a
 * default must be given (n_kv_heads defaults to n_heads, head_dim to
 * d_model / n_heads, rope_theta to 10000, norm_eps to 1e-6). `where` names
 * the source in messages ("cfg.txt:3: ..."). Validates the result. */
bool nn_config_parse(const char *text, const char *where, nn_config *cfg,
                     dg_status *st);
/* A built-in name, or else a path to a config file. */
bool nn_config_load(const char *name_or_path, nn_config *cfg, dg_status *st);
/* Ranges, divisibility and that every size fits the index types. */
bool nn_config_validate(const nn_config *cfg, dg_status *st);
/* Writes the config as text that nn_config_parse reads back exactly. */
void nn_config_print(const nn_config *cfg, dg_str *out);
int64_t nn_config_param_count(const nn_config *cfg);

/* ---- parameters ---------------------------------------------------------- */

/* X(ENUM, field, per_layer, decays, hf_name) in storage order. hf_name is
 * the Hugging Face LlamaForCausalLM name; "%d" stands for the layer.
 * `decays`: AdamW applies weight decay (matrices only, not norm gains). */
#define NN_PARAM_LIST(X)                                                      \
  X(WTE, wte, 0, 1, "model.embed_tokens.weight")       /* (V, C) */          \
  X(LN1W, ln1w, 1, 0, "model.layers.%d.input_layernorm.weight") /* (L, C) */ \
  X(WQ, wq, 1, 1, "model.layers.%d.self_attn.q_proj.weight") /* (L, QD, C) */ \
  X(WK, wk, 1, 1, "model.layers.%d.self_attn.k_proj.weight") /* (L, KVD, C) */ \
  X(WV, wv, 1, 1, "model.layers.%d.self_attn.v_proj.weight") /* (L, KVD, C) */ \
  X(WO, wo, 1, 1, "model.layers.%d.self_attn.o_proj.weight") /* (L, C, QD) */ \
  X(LN2W, ln2w, 1, 0, "model.layers.%d.post_attention_layernorm.weight")      \
  X(W1, w1, 1, 1, "model.layers.%d.mlp.gate_proj.weight") /* (L, F, C) */    \
  X(W3, w3, 1, 1, "model.layers.%d.mlp.up_proj.weight")   /* (L, F, C) */    \
  X(W2, w2, 1, 1, "model.layers.%d.mlp.down_proj.weight") /* (L, C, F) */    \
  X(LNFW, lnfw, 0, 0, "model.norm.weight")                /* (C) */          \
  X(WLM, wlm, 0, 1, "lm_head.weight")                     /* (V, C) */

typedef enum {
#define X(e, f, pl, d, hf) NN_PARAM_##e,
  NN_PARAM_LIST(X)
#undef X
  NN_PARAM_COUNT
} nn_param_id;

/* Pointers into one block (parameters or gradients), by name. */
typedef struct {
#define X(e, f, pl, d, hf) float *f;
  NN_PARAM_LIST(X)
#undef X
} nn_weights;

const char *nn_param_name(nn_param_id i); /* "wte" */
const char *nn_param_hf_name(nn_param_id i);
bool nn_param_per_layer(nn_param_id i);
bool nn_param_decays(nn_param_id i);
/* Shape of one tensor, per layer (without the leading L): 1 or 2 dims. */
int nn_param_shape(const nn_config *cfg, nn_param_id i, int64_t dims[2]);

/* ---- activations --------------------------------------------------------- */

/* X(field, size) with the shape as comment; size uses B, T and the config. */
#define NN_ACT_LIST(X)                                                        \
  X(x, (L + 1) * BT * C)  /* (L+1, B, T, C) residual entering each layer */   \
  X(ln1, L * BT * C)      /* (L, B, T, C) */                                  \
  X(rstd1, L * BT)        /* (L, B, T) */                                     \
  X(q, L * BT * QD)       /* (L, B, T, QD) after RoPE */                      \
  X(k, L * BT * KVD)      /* (L, B, T, KVD) after RoPE */                     \
  X(v, L * BT * KVD)      /* (L, B, T, KVD) */                                \
  X(att, L * B * NH * T * T) /* (L, B, NH, T, T) softmax, 0 above diagonal */ \
  X(atty, L * BT * QD)    /* (L, B, T, QD) attention output */                \
  X(xmid, L * BT * C)     /* (L, B, T, C) residual after attention */         \
  X(ln2, L * BT * C)      /* (L, B, T, C) */                                  \
  X(rstd2, L * BT)        /* (L, B, T) */                                     \
  X(h1, L * BT * F)       /* (L, B, T, F) gate pre-activation */              \
  X(h3, L * BT * F)       /* (L, B, T, F) up projection */                    \
  X(hg, L * BT * F)       /* (L, B, T, F) silu(h1) * h3 */                    \
  X(lnf, BT * C)          /* (B, T, C) */                                     \
  X(rstdf, BT)            /* (B, T) */                                        \
  X(logits, BT * V)       /* (B, T, V) */                                     \
  X(probs, BT * V)        /* (B, T, V) */                                     \
  X(losses, BT)           /* (B, T) per-token -log p(target) */               \
  X(dlosses, BT)          /* (B, T) d loss / d losses = w / norm */           \
  X(dx, BT * C)           /* backward scratch: residual gradient */           \
  X(dn, BT * C)           /* backward scratch: norm output gradient */        \
  X(dq, BT * QD)                                                              \
  X(dk, BT * KVD)                                                             \
  X(dv, BT * KVD)                                                             \
  X(datty, BT * QD)                                                           \
  X(drow, B * NH * T)     /* one softmax row per (b, h) */                    \
  X(dh1, BT * F)                                                              \
  X(dh3, BT * F)                                                              \
  X(dhg, BT * F)                                                              \
  X(dlogits, BT * V)

typedef struct {
#define X(f, n) float *f;
  NN_ACT_LIST(X)
#undef X
} nn_acts;

/* ---- optimizer ----------------------------------------------------------- */

/* AdamW with global-norm clipping and linear warmup + cosine decay. */
typedef struct {
  float lr;             /* peak learning rate */
  float lr_min;         /* floor reached at total_steps */
  int64_t warmup_steps; /* lr rises linearly over steps 0 .. warmup-1 */
  int64_t total_steps;  /* cosine ends here; lr_min afterwards */
  float beta1, beta2, eps;
  float weight_decay;   /* decoupled; only tensors with nn_param_decays */
  float grad_clip;      /* max global L2 norm; 0 = off */
} nn_optim;

/* lr 3e-4, lr_min 3e-5, warmup 100, total 10000, betas (0.9, 0.95),
 * eps 1e-8, weight decay 0.1, clip 1.0. */
void nn_optim_default(nn_optim *o);
/* Learning rate of 0-based step `step`. */
float nn_optim_lr(const nn_optim *o, int64_t step);

/* ---- the model ----------------------------------------------------------- */

typedef struct {
  nn_config cfg;
  size_t param_sizes[NN_PARAM_COUNT]; /* floats, all layers */
  size_t num_params;
  float *params_mem; /* one allocation each */
  float *grads_mem;  /* NULL unless training */
  float *m_mem, *v_mem;
  nn_weights params, grads;
  float *rope_cos, *rope_sin; /* (max_seq_len, HD/2) */
  int B, T;                   /* activation capacity (0 before reserve) */
  size_t num_acts;
  float *acts_mem;
  nn_acts acts;
  int32_t *tokens; /* (2, B, T): the last forward's inputs and targets */
  nn_optim opt;
  /* Set by the last nn_forward. */
  int last_B, last_T;
  bool last_has_targets;
  float loss;
} nn_model;

/* Validates cfg and allocates parameters (and, when training, gradients
 * and AdamW state) with zeroed contents. Fails with a message, allocating
 * nothing, if the config is invalid or does not fit in this machine's
 * memory. */
bool nn_model_init(nn_model *m, const nn_config *cfg, bool training,
                   dg_status *st);
void nn_model_free(nn_model *m);
/* Random initial weights from a seed: N(0, 0.02) for matrices, the
 * residual-output projections (wo, w2) scaled by 1/sqrt(2L), norm gains 1. */
void nn_model_init_weights(nn_model *m, uint64_t seed);
/* Allocates activations for batches up to B x T (T <= max_seq_len). */
bool nn_model_reserve(nn_model *m, int B, int T, dg_status *st);
/* Bytes the model needs for a config: parameters (x4 with training) and
 * activations for B x T (0 x 0 for none). Saturates at INT64_MAX. */
int64_t nn_model_bytes(const nn_config *cfg, bool training, int B, int T);

/* Checks a batch from outside: B, T within the reserved capacity, tokens in
 * [0, V), weights finite and >= 0. nn_forward asserts these. */
bool nn_batch_check(const nn_model *m, const int32_t *inputs,
                    const int32_t *targets, const float *weights, int B,
                    int T, dg_status *st);

/* Forward over inputs (B, T). With targets (B, T) returns the weighted mean
 * loss sum(w * nll) / sum(w) (weights NULL: all 1; a zero total weight gives
 * loss 0 and zero gradients); without targets computes logits only and
 * returns -1. */
float nn_forward(nn_model *m, const int32_t *inputs, const int32_t *targets,
                 const float *weights, int B, int T);
/* Same with an explicit normaliser: loss = sum(w * nll) / norm, weights any
 * finite value (negative ones too, for policy gradients), norm > 0. This is
 * how several micro-batches share one normaliser. */
float nn_forward_weighted(nn_model *m, const int32_t *inputs,
                          const int32_t *targets, const float *weights,
                          double norm, int B, int T);
void nn_zero_grad(nn_model *m);
/* Adds the gradient of the last forward's loss (which must have had
 * targets) to the gradients, so micro-batches accumulate. */
void nn_backward(nn_model *m);
/* Global L2 norm of the gradients (summed in double). */
float nn_grad_norm(const nn_model *m);
/* One AdamW step with m->opt at 0-based step `step`: clips the gradients to
 * opt.grad_clip by global norm, bias-corrects with t = step + 1. Returns
 * the norm before clipping. */
float nn_update(nn_model *m, int64_t step);

/* ---- layer kernels --------------------------------------------------------- */

/* The reference's layers, exported so that other back ends and tests can
 * check against them one at a time. */
/* The reference's one dot product (every forward matmul and the KV-cache
 * decoder's, so that the two agree bitwise): eight running sums, one a
 * lane, combined pairwise in a fixed order. */
float nn_dot(const float *x, const float *w, int n);
/* out (N, C) = inp * rstd * w, rstd (N) = (mean(inp^2) + eps)^(-1/2). */
void nn_rmsnorm_forward(float *out, float *rstd, const float *inp,
                        const float *w, int N, int C, float eps);
/* cos, sin (T, HD/2) tables of angle pos * theta^(-2i/HD). */
void nn_rope_table(float *cosb, float *sinb, float theta, int HD, int T);
/* Rotate-half RoPE in place on x (B, T, nh, HD): (x[i], x[i + HD/2]) is
 * rotated by the angle of (t, i); dir = -1 rotates back. */
void nn_rope_rotate(float *x, const float *cosb, const float *sinb, int B,
                    int T, int nh, int HD, float dir);
/* Causal attention: q (B, T, NH, HD), k and v (B, T, NKV, HD); writes out
 * (B, T, NH, HD) and the probabilities att (B, NH, T, T). */
void nn_attention_forward(float *out, float *att, const float *q,
                          const float *k, const float *v, int B, int T,
                          int NH, int NKV, int HD);

/* ---- checkpoints --------------------------------------------------------- */

#define NN_CKPT_MAGIC 20260501
#define NN_STATE_MAGIC 20260502
#define NN_CKPT_VERSION 1

/* Model file: a 256-int32 header (magic, version, config, counts, checksum)
 * and the parameters. Written to a temporary file, fsynced and renamed. */
bool nn_checkpoint_save(const nn_model *m, const char *path, dg_status *st);
/* Reads only the header's config. */
bool nn_checkpoint_read_config(const char *path, nn_config *cfg,
                               dg_status *st);
/* Creates a model (training or not) from a checkpoint into *m, which must
 * not hold one. On failure nothing is allocated and *m is untouched. */
bool nn_checkpoint_load(nn_model *m, const char *path, bool training,
                        dg_status *st);

/* Optimizer state file: header (magic, version, config, step, RNG state,
 * checksum), then AdamW m and v. rng may be NULL (stored as zeros). */
bool nn_state_save(const nn_model *m, int64_t step, const dg_rng *rng,
                   const char *path, dg_status *st);
/* Loads into a training model of the same config; on failure the model,
 * *step and *rng are untouched (rng also when the file holds none). The
 * optimizer's hyperparameters (m->opt) are the caller's to restore. */
bool nn_state_load(nn_model *m, const char *path, int64_t *step, dg_rng *rng,
                   dg_status *st);

/* A file written from pieces through a temporary file, fsync and rename
 * (dg_write_file_atomic without first copying everything into one buffer). */
typedef struct {
  const void *data;
  size_t len;
} nn_file_part;
bool nn_file_write_atomic(const char *path, const nn_file_part *parts,
                          int n_parts, dg_status *st);

/* ---- safetensors ---------------------------------------------------------- */

typedef enum { NN_ST_F32, NN_ST_BF16, NN_ST_F16 } nn_st_dtype;

/* Writes the parameters with Hugging Face Llama names in the given dtype
 * (BF16 and F16 round to nearest even); the config goes into __metadata__
 * under "dragon.config". Atomic like checkpoints. */
bool nn_safetensors_export(const nn_model *m, const char *path,
                           nn_st_dtype dtype, dg_status *st);
/* Reads the config stored by nn_safetensors_export. */
bool nn_safetensors_read_config(const char *path, nn_config *cfg,
                                dg_status *st);
/* Loads F32, F16 or BF16 tensors into a model of matching shapes. A missing
 * lm_head.weight (tied embeddings) is filled from model.embed_tokens.weight;
 * rotary_emb.inv_freq buffers are ignored; any other unknown or missing
 * tensor is an error. On failure the model is untouched. */
bool nn_safetensors_import(nn_model *m, const char *path, dg_status *st);

/* ---- KV-cache decoding and sampling (src/nn/sample.c) ---------------------- */

/* Incremental decoding for the C reference: each row keeps the keys (after
 * RoPE) and values of every position it has seen, so one more token costs
 * one position's work. Logits equal those of nn_forward over the whole
 * sequence (same arithmetic, same order). Rows are independent. */
typedef struct {
  const nn_model *m;
  int B, T;       /* rows, positions per row */
  float *k, *v;   /* (L, B, T, KVD) */
  int *pos;       /* (B) positions filled per row */
  float *logits;  /* (B, V) next-token logits of each row */
  float *scratch; /* one row's per-token buffers */
} nn_kv_cache;

/* Allocates a cache for B rows of up to T positions (T <= max_seq_len);
 * fails with a message if it does not fit in memory. */
bool nn_kv_init(nn_kv_cache *c, const nn_model *m, int B, int T, dg_status *st);
void nn_kv_free(nn_kv_cache *c);
void nn_kv_reset(nn_kv_cache *c, int b);
/* Feeds tokens[0..n) to row b at its next positions (pos + n <= T, ids in
 * [0, V)); the row's logits are then those after the last one. */
void nn_kv_feed(nn_kv_cache *c, int b, const int32_t *tokens, int n);
/* Feeds tokens[r][0..n[r]) to row rows[r] for each of count distinct rows,
 * in passes over the weights shared by up to 32 tokens (decoding is bound
 * by reading the weights: rows written in step, or a prompt fed at once,
 * read them once for many tokens). Each row ends as nn_kv_feed would
 * leave it, bit for bit. */
void nn_kv_feed_rows(nn_kv_cache *c, const int *rows, const int32_t *const *tokens, const int *n,
                     int count);
/* Row dst becomes a copy of row src (its positions, keys, values and
 * logits): a prompt fed once serves every row that continues it. */
void nn_kv_copy_row(nn_kv_cache *c, int dst, int src);
const float *nn_kv_logits(const nn_kv_cache *c, int b);
/* Takes row b back to its first pos positions (pos <= the positions it
 * holds), with logits (V floats) as its next-token logits: those the row
 * had at pos, kept by the caller. The positions past pos are overwritten
 * by the next feed. */
void nn_kv_rewind(nn_kv_cache *c, int b, int pos, const float *logits);

typedef struct {
  float temperature;  /* <= 0: greedy */
  int top_k;          /* keep the k most likely; 0: all */
  float top_p;        /* keep the smallest most-likely set with mass >= p; 1: all */
  int max_tokens;     /* tokens generated per row at most */
  int32_t stop_token; /* ends a row (not included in its output); -1: none */
} nn_sample_opts;

/* temperature 1, top_k 0, top_p 1, max_tokens 256, stop_token -1. */
void nn_sample_opts_default(nn_sample_opts *o);
/* The distribution a token is drawn from: softmax(logits / temperature)
 * cut to top-k, then to top-p, renormalised (ties ranked by lower id);
 * greedy puts 1 on the argmax (lowest id on ties). */
void nn_sample_probs(const float *logits, int V, const nn_sample_opts *o, float *probs);
/* One token from that distribution; greedy draws nothing from rng. */
int32_t nn_sample_token(const float *logits, int V, const nn_sample_opts *o, dg_rng *rng);
/* Generates for n prompts at once with a KV cache: row i draws from an RNG
 * seeded by (seed, i), stops at o->stop_token, o->max_tokens or the model's
 * max_seq_len. out (n, max_tokens) receives the tokens, out_lens[i] their
 * count. Fails (st) on an empty or too long prompt or a bad token id. */
bool nn_generate(const nn_model *m, const int32_t *const *prompts, const int *prompt_lens,
                 int n, const nn_sample_opts *o, uint64_t seed, int32_t *out, int *out_lens,
                 dg_status *st);

#endif
