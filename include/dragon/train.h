/* train.h: supervised fine-tuning of the schedule-writing model: examples
 * to token shards, the data loader, the training configuration and the SFT
 * loop with its pluggable back end.
 *
 * An example is a (prompt, target) pair. Its tokens are laid out as
 *   <|kernel|> prompt [<|prior|> prior graph] <|graph|> target <|end|>
 * and every token carries a segment id (prompt, edit, expect, why); the
 * loss weight of a token is its segment's weight from the training config
 * (TSEL.md's defaults: edit 1.0, expect 0.5, why 0.2, prompt 0). Batches
 * are padded, one example per row, so no token attends across examples and
 * padding carries weight 0. docs/training.md has the formats and the loop.
 */
#ifndef DRAGON_TRAIN_H
#define DRAGON_TRAIN_H

#include "dragon/base.h"
#include "dragon/nn.h"
#include "dragon/tokenizer.h"
#include "dragon/eval.h"
#include "dragon/tsel.h"

/* ---- segments ------------------------------------------------------------ */

/* X(ENUM, name, default weight). The <|end|> token counts as an edit (the
 * model must learn to stop); padding is not a segment (weight 0 always). */
#define TRAIN_SEG_LIST(X)                                                     \
  X(PROMPT, "prompt", 0.0f)                                                   \
  X(EDIT, "edit", 1.0f)                                                       \
  X(EXPECT, "expect", 0.5f)                                                   \
  X(WHY, "why", 0.2f)

typedef enum {
#define X(e, n, w) TRAIN_SEG_##e,
  TRAIN_SEG_LIST(X)
#undef X
  TRAIN_SEG_COUNT
} train_seg;

const char *train_seg_name(train_seg s);
/* The segment by name ("why"), or -1. */
int train_seg_from_name(const char *name);

/* The segment of one target line (without its '\n'): `t<N> ` edits, `why `
 * and `expect ` lines; the header, `#` comments and anything else count as
 * edits. */
train_seg train_line_segment(const char *line, size_t len);
/* The segment of every byte of a target text: each byte of a line,
 * including the '\n' that ends it, gets the line's segment. */
void train_text_segments(const char *text, size_t n, uint8_t *seg);

/* ---- token shards -------------------------------------------------------- */

#define TRAIN_SHARD_MAGIC 20260510
#define TRAIN_SHARD_VERSION 1

/* Examples as tokens: example i is tokens[offsets[i] .. offsets[i+1]) with
 * one segment id per token. */
typedef struct {
  int64_t n_examples;
  int64_t n_tokens;
  int32_t vocab_size; /* every token id is below this */
  int64_t *offsets;   /* (n_examples + 1), offsets[0] = 0 */
  int32_t *tokens;    /* (n_tokens) */
  uint8_t *segs;      /* (n_tokens) train_seg */
} train_shard;

void train_shard_free(train_shard *s);
/* Appends one example (n >= 2 tokens) to a shard being built. */
void train_shard_append(train_shard *s, const int32_t *tokens, const uint8_t *segs, int64_t n);
/* Binary file: a 256-int32 header (magic, version, counts, vocab size,
 * data checksum, header checksum), int64 offsets, uint32 tokens, uint8
 * segment ids; written through a temporary file and rename. */
bool train_shard_save(const train_shard *s, const char *path, dg_status *st);
/* Loads and checks everything (header, sizes, offsets, ids, checksum);
 * errors name the file. On failure *s is untouched. */
bool train_shard_load(train_shard *s, const char *path, dg_status *st);
/* True when the file starts with the shard magic (to tell shards from
 * examples files). */
bool train_shard_sniff(const char *path);

/* ---- examples ------------------------------------------------------------ */

/* Tokenizes one example into the shard. kind_refine adds the prior graph
 * (prior must be non-NULL then). */
bool train_example_tokenize(tok_tokenizer *tok, const char *prompt, const char *prior,
                            const char *target, train_shard *out, dg_status *st);
/* A graph's text with its plan first: its `expect` lines moved, in their
 * order, to right after the header line (the first line); every other line
 * as it was. The layout of a target under train_config.plan_first: the
 * model writes what it expects of the schedule (threads a block, shared
 * memory, vectors, unrolling, its time) before the edits that make it.
 * Caller frees. */
char *train_plan_first(const char *graph);
/* Reads a JSON-lines examples file ({task, kind: construct|refine, workload,
 * prompt, prior (refine), target, weights_by_segment, source_records}) and
 * tokenizes every example, each target with its plan first where plan_first
 * (train_plan_first; the prior in a prompt stays as it is). Errors name
 * file:line. */
bool train_examples_load(const char *path, tok_tokenizer *tok, bool plan_first, train_shard *out,
                         dg_status *st);
/* The prompts, priors and targets of an examples file as one corpus (for
 * training a tokenizer on the data). Caller frees. */
char *train_examples_corpus(const char *path, size_t *len, dg_status *st);

/* ---- batches ------------------------------------------------------------- */

/* A padded batch: row b holds one example's inputs tokens[0..n-1) and
 * targets tokens[1..n), then <|pad|> with weight 0 up to T. */
typedef struct {
  int B, T;         /* rows used, longest row (T <= capacity) */
  int cap_B, cap_T; /* allocated */
  int32_t *inputs;  /* (cap_B, cap_T) as (B, T) */
  int32_t *targets;
  float *weights;
  int64_t n_real;   /* non-padding positions */
} train_batch;

void train_batch_init(train_batch *b, int cap_B, int cap_T);
void train_batch_free(train_batch *b);
/* Fills the batch with examples idx[0..n) of the shard (each at most
 * cap_T + 1 tokens), weights from seg_weights. */
void train_batch_fill(train_batch *b, const train_shard *s, const int64_t *idx, int n,
                      const float *seg_weights, int32_t pad_id);

/* ---- configuration ------------------------------------------------------- */

typedef struct {
  nn_config model;  /* vocab_size is replaced by the tokenizer's */
  float lr, lr_min;
  int64_t warmup_steps, steps;
  int batch;        /* examples per step */
  int seq_len;      /* longest row; longer examples are left out */
  float grad_clip, weight_decay;
  float seg_weights[TRAIN_SEG_COUNT];
  int64_t eval_every, ckpt_every, log_every;
  double val_fraction;
  uint64_t seed;
  double peak_flops; /* for MFU; 0: not reported */
  /* 1: each target's expect lines come right after its header, before the
   * edits (train_plan_first); the model then writes its plan first, and
   * decoding lets it (train_decode_opts.plan_first) */
  int plan_first;
} train_config;

/* The built-in "tiny" config: the tiny model (max_seq_len 512), CPU-sized
 * hyperparameters. */
void train_config_default(train_config *c);
/* Parses `key = value` lines: the training keys (docs/training.md), and
 * every other line is the model config (nn_config_parse; without model keys
 * the model is the built-in tiny). `where` names the source in messages. */
bool train_config_parse(const char *text, const char *where, train_config *c, dg_status *st);
/* "tiny" or a file. */
bool train_config_load(const char *name_or_path, train_config *c, dg_status *st);
/* The training config that goes with a model file: TRAIN_MODEL_CONFIG in
 * its directory (a model directory, `dragon train export`), else
 * config.txt there (a run directory's checkpoint). Caller frees; NULL
 * where there is neither. */
#define TRAIN_MODEL_CONFIG "train_config.txt"
char *train_model_config_path(const char *model_path);
/* Whether the model at model_path was trained with its plan first
 * (train_config.plan_first, from train_model_config_path; false where it
 * has no config). False with st where that config does not parse. */
bool train_model_plan_first(const char *model_path, bool *plan_first, dg_status *st);
/* Copies the training config that goes with model_path, where it has one
 * (checked first), to dir/TRAIN_MODEL_CONFIG: a model written elsewhere
 * (`dragon train export`, a GRPO run) keeps its layout. */
bool train_model_config_copy(const char *model_path, const char *dir, dg_status *st);
/* Writes text that train_config_parse reads back exactly. */
void train_config_print(const train_config *c, dg_str *out);

/* ---- back end ------------------------------------------------------------ */

/* What the SFT loop needs from a model implementation; the C reference is
 * one, the CUDA model plugs in the same way. */
typedef struct {
  const char *name;
  void *ctx;
  /* Weighted loss over a batch, sum(w * nll) / sum(w). */
  float (*forward)(void *ctx, const int32_t *in, const int32_t *tg, const float *w, int B, int T);
  /* Sum of w * nll of the last forward (for validation means). */
  double (*weighted_sum)(void *ctx, const float *w, int B, int T);
  void (*backward)(void *ctx); /* zeroes the gradients, then backward */
  float (*update)(void *ctx, int64_t step); /* returns the gradient norm */
  bool (*save)(void *ctx, const char *model_path, const char *state_path, int64_t step,
               dg_status *st);
  /* The first failure since creation (a GPU fault), or true; the calls
   * above do nothing after one. NULL for a back end that cannot fail. */
  bool (*check)(void *ctx, dg_status *st);
  /* Optional, for a back end that runs asynchronously (NULL: the loop
   * calls forward, backward and update itself): queue_step queues a whole
   * training step (forward with targets, backward, update at `step`)
   * without waiting for it; step_result waits for one of the last two
   * queued steps and gives its loss and gradient norm. */
  void (*queue_step)(void *ctx, const int32_t *in, const int32_t *tg, const float *w, int B, int T,
                     int64_t step);
  void (*step_result)(void *ctx, int64_t step, float *loss, float *norm);
  /* What GRPO needs besides (src/train/grpo_run.c). token_logps: the
   * log-probability of each target under the model, 0 where mask is 0
   * (mask may be NULL). forward_weighted: sum(w * nll) / norm with w of
   * any sign and norm > 0 given (one normaliser over micro-batches).
   * zero_grad, then accumulate after each forward_weighted: the gradients
   * add up until update. optim: the optimizer settings update uses.
   * pull: the trained parameters into the host model (the rollouts are
   * written with it); the C reference is its own host. */
  void (*token_logps)(void *ctx, const int32_t *in, const int32_t *tg, const uint8_t *mask, int B,
                      int T, float *logp);
  float (*forward_weighted)(void *ctx, const int32_t *in, const int32_t *tg, const float *w,
                            double norm, int B, int T);
  void (*zero_grad)(void *ctx);
  void (*accumulate)(void *ctx);
  nn_optim *(*optim)(void *ctx);
  bool (*pull)(void *ctx, dg_status *st);
} train_backend;

/* The C reference as a back end over a training model. */
train_backend train_backend_cpu(nn_model *m);

/* Where the model trains (and samples): the C reference or the CUDA model. */
typedef enum { TRAIN_DEVICE_CPU, TRAIN_DEVICE_CUDA } train_device;

const char *train_device_name(train_device d);
/* "cpu" or "cuda"; anything else is a DG_ERR_USAGE naming --device. */
bool train_device_parse(const char *name, train_device *d, dg_status *st);
/* True when the device can be used here; else a message that says why (no
 * CUDA in this build, no driver, no GPU). Initialises CUDA for "cuda". */
bool train_device_available(train_device d, dg_status *st);

/* The model's input (prompt.c), the one layout every caller uses:
 * <|kernel|> kernel [<|prior|> prior] <|graph|>, appended to out (prior
 * may be NULL). A training example continues it with the target and
 * <|end|> (train_example_tokenize). */
bool train_prompt_encode(tok_tokenizer *tok, const char *kernel, const char *prior, tok_ids *out,
                         dg_status *st);

/* Generation on a device (generate.c): one entry whatever the device, for
 * every caller that samples the model. For CUDA the model is loaded onto
 * the GPU once, here, and kept until freed; m must outlive the generator.
 * train_generate takes nn_generate's arguments and limits (nn.h) and
 * gives the same per-row draws. */
typedef struct train_generator train_generator;
bool train_generator_new(const nn_model *m, train_device d, train_generator **out,
                         dg_status *st);
bool train_generate(train_generator *g, const int32_t *const *prompts, const int *lens, int n,
                    const nn_sample_opts *o, uint64_t seed, int32_t *out, int *out_lens,
                    dg_status *st);
void train_generator_free(train_generator *g);

/* Constrained decoding (decode.c): the model writes a TSEL graph for one
 * kernel under the token mask of tsel.h (tsel_prefix, tsel_mask), so that
 * every output parses and type-checks; `dragon optimize` writes with it. */
typedef struct {
  nn_sample_opts sample; /* temperature, top_k, top_p; max_tokens: tokens after the prompt */
  bool unconstrained;    /* no mask: the forced header, then plain sampling (for comparison) */
  bool explain;          /* why and expect lines may follow the edits (decoded) */
  /* after the edits, dragon writes the why/expect lines itself, from the
   * compiler's facts on the finished graph (tsel_explain), instead of the
   * model (with explain false: the model stops after its edits) */
  bool explain_after;
  /* the model writes the schedule's plan, one expect line, right after the
   * header and before its edits (tsel_prefix_set_plan): a model trained
   * with train_config.plan_first (train_model_plan_first says which) */
  bool plan_first;
  /* The line guard (constrained decoding only; NULL: none): called with
   * the graph's committed text each time an edit line is complete
   * (postprocessed: the graph has its `postproc` edit). A line it refuses
   * is taken back (the checker and the KV cache return to the line's
   * start) and written again, sampled at retry_temperature at least; a
   * line refused line_retries times takes the line before it back too.
   * A guard that knows which earlier line made the refused one fail (its
   * edit number N of tN, before the refused line) sets *back_to to it
   * (it is 0 on the call: the refused line itself), and the graph goes
   * back to that line's start at once. A guard that blames a `tile` may
   * also fill *narrow (zeroed on the call): the tile is then written
   * again under it (tsel_prefix_narrow_tile: its inner extent capped, a
   * thread factor's range; lifted when a line before it is taken back).
   * After max_backtracks lines taken back the guard is no longer asked. */
  bool (*guard)(void *ctx, const char *text, size_t len, bool postprocessed, int *back_to,
                tsel_tile_narrowing *narrow);
  void *guard_ctx;
  int line_retries;        /* default 4 */
  int max_backtracks;      /* default 64 */
  float retry_temperature; /* default 1.0 */
  /* when the guard reaches max_backtracks, the graph is written again from
   * its first edit line, each line sampled at retry_temperature at least,
   * with a fresh backtrack count, up to this many times (default 0: the
   * rest is written unguarded) */
  int restarts;
  float restart_temperature; /* the lines of a graph written again (default 1.0) */
  /* where to keep the tokens after the prompt, as fed (lines taken back
   * are not kept), and which of them were drawn (not forced); the final
   * <|end|> counts as drawn. NULL: not kept. A graph the token budget
   * ended has the checker's completion in its text and not here. */
  struct train_decode_trace *trace;
  /* train_decode_jobs_cuda's cache rows (0: a row a job): with fewer rows
   * than jobs, a row whose graph is done takes the next job (its prompt
   * prefilled while the other rows decode on), so a slow graph holds up
   * one row, not the rest of the jobs */
  int gpu_rows;
} train_decode_opts;

typedef struct train_decode_trace {
  int32_t *ids;
  uint8_t *sampled;
  int n, cap;
} train_decode_trace;
void train_decode_trace_free(train_decode_trace *t);

/* nn_sample_opts_default with max_tokens 2048; constrained; explain; no
 * guard (line_retries 4, max_backtracks 64, retry_temperature 1). */
void train_decode_opts_default(train_decode_opts *o);

typedef struct {
  int n_sampled, n_forced; /* tokens drawn, tokens of forced text fed */
  bool budget_completed;   /* the tokens ran out: the checker's completion was appended */
  bool complete;           /* the text is a complete graph (always, when constrained) */
  int n_masks;
  double mask_secs;        /* time spent in tsel_mask_compute */
  int n_guarded;           /* lines the guard was asked about */
  int n_blamed;            /* refusals that went back to an earlier line the guard named */
  int n_narrowed;          /* of them, with the blamed tile narrowed (tsel_tile_narrowing) */
  int n_backtracks;        /* lines taken back */
  int n_repeats;           /* lines refused at once: written again as a refused line was, after the same text */
  int n_restarts;          /* graphs written again from the first edit line (restarts) */
  bool guard_gave_up;      /* max_backtracks reached, no restart left: the rest was not guarded */
  double guard_secs;       /* time spent in the guard */
} train_decode_stats;

/* Generates a graph for the kernel with the model (the C reference, KV
 * cache) after prompt (train_prompt_encode's layout, ending in <|graph|>):
 * forced text fed as is, every other token drawn from the allowed ones,
 * until <|end|>. At most o->sample.max_tokens tokens are fed after the
 * prompt; if they run out first, the checker's completion is appended as
 * text. Returns the text (caller frees), a complete graph unless
 * o->unconstrained. Deterministic for a seed. mask may be NULL when
 * unconstrained; stats may be NULL. */
char *train_decode_graph(const nn_model *m, tok_tokenizer *tok, tsel_mask *mask,
                         const int32_t *prompt, int n_prompt, const dg_func *kernel,
                         const char *spec, tsel_target target, const train_decode_opts *o,
                         uint64_t seed, train_decode_stats *stats, dg_status *st);
/* A graph to write: its prompt, kernel, spec, seed, and its guard's
 * context (NULL: the options' guard_ctx). */
typedef struct {
  const int32_t *prompt;
  int n_prompt;
  const dg_func *kernel;
  const char *spec;
  uint64_t seed;
  void *guard_ctx;
} train_decode_job;

/* n graphs written in step on the calling thread, one a row of one cache:
 * each pass of the model feeds every graph's next tokens together (the
 * weights are read once for all of them); a prompt that several jobs
 * share is fed once and copied. Graph i is, bit for bit, the text
 * train_decode_graph gives for job i. texts[i] is NULL when graph i
 * failed (a bad prompt included), errs[i] saying why; traces and stats
 * may be NULL, else n of each (o->trace is unused). False with st only
 * when nothing could start (the tokenizer, mask or options are not the
 * model's, no memory for the cache). */
bool train_decode_jobs(const nn_model *m, tok_tokenizer *tok, tsel_mask *mask, const train_decode_job *jobs, int n,
                       tsel_target target, const train_decode_opts *o, char **texts, train_decode_trace *traces,
                       train_decode_stats *stats, dg_status *errs, dg_status *st);
/* n graphs for one prompt, written in step on the calling thread: the
 * prompt is fed once and copied to every graph's row of one cache, and
 * each pass of the model feeds every graph's next tokens together (the
 * weights are read once for all of them). Graph i is drawn with seeds[i]
 * and is the text train_decode_graph gives for that seed, bit for bit.
 * texts[i] is NULL when graph i failed, errs[i] saying why; traces
 * (o->trace is unused) and stats may be NULL, else n of each. False with
 * st when nothing could start (bad arguments, no memory for the cache). */
bool train_decode_graphs(const nn_model *m, tok_tokenizer *tok, tsel_mask *mask, const int32_t *prompt,
                         int n_prompt, const dg_func *kernel, const char *spec, tsel_target target,
                         const train_decode_opts *o, int n, const uint64_t *seeds, char **texts,
                         train_decode_trace *traces, train_decode_stats *stats, dg_status *errs,
                         dg_status *st);


/* The CUDA model as a back end (src/train/backend_cuda.c). host is a
 * training model (parameters, AdamW m and v) whose contents are copied to
 * the GPU at creation and which receives the GPU's parameters and AdamW
 * state at every save (then written with nn_checkpoint_save and
 * nn_state_save, as the CPU back end writes them). Batches up to B x T.
 * Fails with a message where the build has no CUDA or there is no GPU. */
typedef struct train_cuda train_cuda;
bool train_cuda_init(train_cuda **out, nn_model *host, int B, int T, dg_status *st);
/* A model that only scores (GRPO's reference): host's parameters on the
 * GPU, any host model; its back end's token_logps and check alone may be
 * called. */
bool train_cuda_init_frozen(train_cuda **out, nn_model *host, int B, int T, dg_status *st);
void train_cuda_free(train_cuda *c);
/* The back end; takes host->opt as the optimizer settings (set them
 * first). */
train_backend train_backend_cuda(train_cuda *c);
/* The GPU model of a CUDA back end (NULL in a build without CUDA): its
 * current weights, those of its latest update. */
struct nn_cuda_model *train_cuda_model(train_cuda *c);

/* Where the time of train_decode_jobs_cuda went. */
typedef struct {
  double prefill_s; /* the cache made and the prompts fed */
  double decode_s;  /* the writers and the steps */
  int64_t steps;    /* GPU steps (each feeds one token of every row that has one) */
  int64_t refills;  /* prefills of rows that took the next jobs (gpu_rows) */
  int rows;         /* rows of the cache */
  int threads;      /* host threads the writers ran on */
  double lock_wait_s; /* waiting for the GPU's lock (a measurement beside the writing) */
} train_decode_gpu_stats;

/* train_decode_jobs with the model on the GPU: gpu's weights (bf16), every
 * job a row of one GPU KV cache, each step feeding the next queued token
 * of every row at once; the writers (checker, mask, draws, guard) run on
 * `threads` host threads, thread t with toks[t] and masks[t] (its own:
 * encoding and masking keep scratch state). Graph i is written as
 * train_decode_graph writes job i, with the GPU's logits: the same graph
 * where they agree with the C reference's to the precision of bf16.
 * Constrained writing only. gs may be NULL. False with st when nothing
 * could start or the GPU failed. */
bool train_decode_jobs_cuda(train_cuda *gpu, tok_tokenizer *const *toks, tsel_mask *const *masks, int threads,
                            const train_decode_job *jobs, int n, tsel_target target, const train_decode_opts *o,
                            char **texts, train_decode_trace *traces, train_decode_stats *stats, dg_status *errs,
                            train_decode_gpu_stats *gs, dg_status *st);

/* ---- the SFT run --------------------------------------------------------- */

typedef struct {
  const char *data;      /* examples .jsonl or shard; unused on resume */
  const char *config;    /* "tiny" or a file; unused on resume */
  const char *tokenizer; /* NULL: trained on the data (tok_vocab tokens) */
  int tok_vocab;
  const char *out_dir;
  bool resume;
  int64_t steps;         /* > 0: overrides the config's steps */
  int64_t stop_after;    /* > 0: end this session after so many steps (as if interrupted) */
  bool quiet;            /* no progress line */
  train_device device;   /* default (zero) the CPU */
  const char *init;      /* a new run starts from this checkpoint's weights (NULL: random) */
} train_sft_args;

typedef struct {
  int64_t first_step, last_step; /* steps run in this session: [first, last) */
  float *losses;                 /* (last_step - first_step) training losses */
  float val_loss;                /* last validation loss; -1 if none */
  int64_t n_train, n_val, n_dropped;
} train_result;

void train_result_free(train_result *r);

/* A whole run: checks every input before writing anything; a new run
 * refuses an out dir that already holds one. The out dir gets config.txt,
 * tokenizer.bin, data.shard, model_<step>.bin, state_<step>.bin, `latest`
 * (the step of the newest complete checkpoint) and log.jsonl. */
bool train_sft_run(const train_sft_args *args, train_result *res, dg_status *st);

/* The newest complete checkpoint of a run directory: paths of its model
 * and state files (caller frees). */
bool train_run_latest(const char *dir, char **model_path, char **state_path, int64_t *step,
                      dg_status *st);

/* ---- GRPO's objective (grpo.c) ------------------------------------------- */

typedef enum {
  GRPO_NORM_TOKEN,    /* over every loss token of the batch (DAPO; default) */
  GRPO_NORM_SEQUENCE, /* each sample's mean, then the mean over samples (GRPO) */
} grpo_norm;

typedef struct {
  float eps_low, eps_high; /* the ratio's clip, [1 - eps_low, 1 + eps_high]: 0.2, 0.2
                            * (clip-higher: eps_high 0.28) */
  float beta;              /* the KL penalty to the reference (0: none; default) */
  grpo_norm norm;
  bool scale_std;          /* advantages divided by the group's std (else Dr. GRPO) */
  float bonus_clip;        /* the latency bonus log(speedup) clipped to +-this (3) */
} grpo_opts;
void grpo_opts_default(grpo_opts *o);

/* A sample's reward from the gates (eval.h): a failure gets -1 + 0.1 x its
 * gate (-1 at the parse, -0.3 at the measurement), a correct graph 1 plus
 * log(speedup) clipped to +-bonus_clip (speedup 0: not timed, no bonus). */
float grpo_reward(const grpo_opts *o, eval_gate failed, double speedup);

/* The samples of a group to measure again before their rewards are final
 * (measurement noise would otherwise decide the group's ranking at its
 * top): of the g samples' times (secs[j] > 0: correct and timed; kernel
 * hash hash[j]), the fastest `top` distinct kernels, one sample each
 * (the first of equal kernels), fastest first, into out; returns how
 * many. */
int grpo_group_fastest(const double *secs, const uint64_t *hash, int g, int top, int *out);
/* Each such kernel is measured GRPO_MEASURE_AGAIN more times and its
 * reward read from the median of its times. */
#define GRPO_TOP_AGAIN 2
#define GRPO_MEASURE_AGAIN 2

/* The advantages of one group of g rewards: r - mean, divided by the
 * sample std + 1e-4 where scale_std. False (all 0) when every reward is
 * the same: the group teaches nothing (dynamic sampling replaces it). */
bool grpo_group_advantages(const float *r, int g, bool scale_std, float *adv);

/* logp[t] = log softmax(logits[t])[targets[t]] (logits n x v, in double);
 * 0 where mask[t] is 0 (mask may be NULL). */
void grpo_token_logps(const float *logits, const int32_t *targets, const uint8_t *mask, int n, int v,
                      float *logp);

/* A batch of samples, one a row of len positions: the loss tokens (mask),
 * their log-probabilities under the policy being trained (logp), the one
 * that sampled them (logp_old; NULL: the same, ratio 1) and the reference
 * (logp_ref; NULL: no KL), and each row's advantage. The normaliser counts
 * every loss token (norm_tokens) or sample (norm_rows) of the whole step
 * when a step is cut into several batches; 0: this batch's. */
typedef struct {
  int rows, len;
  const uint8_t *mask;
  const float *logp, *logp_old, *logp_ref;
  const float *adv;
  int64_t norm_tokens;
  int norm_rows;
} grpo_tokens;

typedef struct {
  double loss;         /* the objective's loss on this batch */
  int64_t tokens;      /* loss tokens */
  double clipped_frac; /* tokens whose clipped term was the minimum */
  double kl_mean;      /* k3 per token (with a reference) */
  double ratio_mean;
} grpo_stats;

/* The loss (returned) and, in w (rows x len), the weight of each token's
 * nll such that sum(w * nll) has the loss's gradient: feed w to
 * nn_forward_weighted with norm 1 and call nn_backward. */
double grpo_token_weights(const grpo_opts *o, const grpo_tokens *in, float *w, grpo_stats *s);

/* ---- a GRPO run (grpo_run.c, `dragon train grpo`) ------------------------- */

/* What a sample earns, where the caller judges instead of the gates (tests):
 * the reward, and the gate and speedup it reached. */
typedef float (*grpo_reward_fn)(void *ctx, const char *spec, const dg_func *f, const char *graph,
                                eval_gate *gate, double *speedup);

typedef struct {
  const char *out_dir;
  bool resume;                 /* continue the run in out_dir (its grpo.cfg, not these options) */
  const char *init;            /* a new run: the model it starts from (checkpoint or .safetensors[.zst]) */
  const char *init_tokenizer;  /* and its tokenizer */
  const struct data_splits *splits; /* prompts: the training split's workloads, in order */
  int64_t steps;               /* total (100); on resume, > 0 overrides */
  int prompts, samples;        /* groups a step (16) and samples a group (8) */
  float lr;                    /* 1e-5, after `warmup` steps of linear warm-up (10) */
  int warmup;
  float grad_clip;             /* 1.0 */
  grpo_opts obj;
  float temperature;           /* of the rollouts (1.0) */
  int max_tokens;              /* a sample's tokens at most (2048) */
  int epochs;                  /* updates on a step's samples (1: on policy) */
  int micro_rows;              /* rows a forward (4) */
  train_device device;         /* where the policy trains and scores (the C reference) */
  bool write_on_cpu;           /* with device cuda: rollouts written with the host copy on the
                                  cores (default: in the GPU's cache, train_decode_jobs_cuda) */
  bool guard;                  /* decode with the line guard (off: the policy's own lines) */
  uint64_t seed;
  struct search_cuda_measure *gpu; /* NULL: correctness in the C emulation, no latency bonus */
  int threads;                 /* writing and judging (0: every core) */
  FILE *progress;
  grpo_reward_fn reward;       /* NULL: the gates (grpo_reward) */
  void *reward_ctx;
  char *tokenizer_path;        /* set by the run */
  bool plan_first;             /* set by the run: the starting model writes its plan first */
} grpo_run_args;
void grpo_run_args_default(grpo_run_args *a);

typedef struct {
  int64_t step;
  double reward_mean;  /* over every judged sample, dropped groups included */
  double correct;      /* share of judged samples that passed every gate */
  double speedup_mean; /* of the correct ones, when timed */
  double loss, kl, clipped, entropy; /* entropy: the drawn tokens' mean -log p */
  double dropped_share;
  int groups, dropped_groups;
  int64_t tokens;      /* loss tokens */
  double grad_norm, lr, seconds;
  /* where the seconds went: writing the graphs (the CPU cores), judging
   * them (builds, checks, timings), the update (log-probabilities and
   * AdamW) */
  double write_seconds, judge_seconds, update_seconds;
  /* of the judging on a GPU: NVRTC thread-seconds, and the wall seconds
   * waiting for a compile (the GPU idle) and for the GPU's runs */
  double compile_seconds, compile_wait_seconds, gpu_wait_seconds;
} grpo_step_stats;

typedef struct {
  int64_t first_step, last_step;
  grpo_step_stats *steps; /* this session's */
  int n;
} grpo_result;

/* Runs (or resumes) a GRPO run up to a->steps, on the C reference model
 * or the GPU's (a->device; the rollouts are written on the CPU cores);
 * every step is checkpointed and logged (log.jsonl) before the next. */
bool grpo_run(grpo_run_args *a, grpo_result *res, dg_status *st);
void grpo_result_free(grpo_result *r);

#endif
