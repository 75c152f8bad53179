/* backend_cuda.c: the SFT loop's back end on the GPU (nn_cuda.h), and the
 * choice of device.
 *
 * The CUDA model trains; a host nn_model of the same config (a training
 * one: parameters, AdamW m and v) is the staging area for checkpoints: a
 * save copies the fp32 parameters and the AdamW state back into it and
 * writes them with the C reference's writers (temporary file, fsync,
 * rename), so checkpoints are the same files on both devices and a run
 * can resume on either. At creation the host model's parameters and AdamW
 * state go to the GPU (a new run's initial weights, or a resumed run's
 * checkpoint). The loss of a step is nn_cuda_forward's, sum(w * nll) /
 * sum(w) over the batch; a validation sum copies the per-token losses to
 * the host and adds them in double as the CPU back end does. Training
 * steps are queued whole (queue_step) and their loss and norm read later
 * (step_result, nn_cuda_step_stats), so the loop fills the next batch
 * while the device works.
 *
 * The loop's calls return no status, so the first failure (a GPU fault, a
 * CUDA error) is kept, later calls do nothing, and the loop reads it with
 * check(). In a build without CUDA, or on a machine without a GPU,
 * train_cuda_init fails with a message saying which.
 */
#include <math.h>
#include <string.h>

#include "dragon/train.h"
#ifdef DG_HAVE_CUDA
#include "dragon/nn_cuda.h"
#endif

static const char *const device_names[] = {"cpu", "cuda"};

const char *train_device_name(train_device d) {
  DG_ASSERT((int)d >= 0 && (int)d < (int)DG_ARRAY_LEN(device_names));
  return device_names[d];
}

bool train_device_parse(const char *name, train_device *d, dg_status *st) {
  for (int i = 0; i < (int)DG_ARRAY_LEN(device_names); i++)
    if (strcmp(name, device_names[i]) == 0) {
      *d = (train_device)i;
      return true;
    }
  return dg_fail(st, DG_ERR_USAGE, "--device: '%s' is not a device (cpu or cuda)", name);
}

bool train_device_available(train_device d, dg_status *st) {
  if (d == TRAIN_DEVICE_CPU) return true;
#ifdef DG_HAVE_CUDA
  dg_status why;
  dg_status_ok(&why);
  if (nn_cuda_device_count(&why) > 0) return true;
  return dg_fail(st, DG_ERR_RUNTIME, "--device cuda: %s", why.msg);
#else
  return dg_fail(st, DG_ERR_RUNTIME,
                 "--device cuda: this dragon was built without CUDA (nvcc was not found when it "
                 "was built)");
#endif
}

#ifdef DG_HAVE_CUDA

struct train_cuda {
  nn_model *host;
  nn_cuda_model *g;
  float *losses; /* (cap) host copy of the per-token losses */
  size_t cap;
  bool frozen; /* scores only: no AdamW state on the GPU or the host */
  bool failed;
  dg_status err; /* the first failure */
};

static bool init(train_cuda **out, nn_model *host, int B, int T, bool frozen, dg_status *st) {
  *out = NULL;
  if (!frozen && (!host->m_mem || !host->v_mem))
    return dg_fail(st, DG_ERR_INVALID, "CUDA back end: the host model is not a training model");
  if (!train_device_available(TRAIN_DEVICE_CUDA, st)) return false;
  nn_cuda_model *g = NULL;
  if (!nn_cuda_model_init(&g, &host->cfg, B, T, st)) return false;
  if (!nn_cuda_model_load(g, host, !frozen, st)) {
    nn_cuda_model_free(g);
    return false;
  }
  train_cuda *c = dg_calloc(1, sizeof *c);
  c->host = host;
  c->g = g;
  c->cap = (size_t)B * (size_t)T;
  c->losses = dg_malloc(sizeof(float) * c->cap);
  c->frozen = frozen;
  dg_status_ok(&c->err);
  *out = c;
  return true;
}

bool train_cuda_init(train_cuda **out, nn_model *host, int B, int T, dg_status *st) {
  return init(out, host, B, T, false, st);
}

bool train_cuda_init_frozen(train_cuda **out, nn_model *host, int B, int T, dg_status *st) {
  return init(out, host, B, T, true, st);
}

void train_cuda_free(train_cuda *c) {
  if (!c) return;
  nn_cuda_model_free(c->g);
  free(c->losses);
  free(c);
}

static bool fail_once(train_cuda *c, const dg_status *st) {
  if (!c->failed) {
    c->err = *st;
    c->failed = true;
  }
  return false;
}

static float cuda_forward(void *ctx, const int32_t *in, const int32_t *tg, const float *w, int B,
                          int T) {
  train_cuda *c = ctx;
  float loss = NAN;
  dg_status st;
  dg_status_ok(&st);
  if (!c->failed && !nn_cuda_forward(c->g, in, tg, w, B, T, &loss, &st)) fail_once(c, &st);
  return c->failed ? NAN : loss;
}

static double cuda_weighted_sum(void *ctx, const float *w, int B, int T) {
  train_cuda *c = ctx;
  size_t n = (size_t)B * (size_t)T;
  dg_status st;
  dg_status_ok(&st);
  DG_ASSERT(n <= c->cap);
  if (c->failed) return NAN;
  if (!nn_cuda_copy_losses(c->g, c->losses, &st)) {
    fail_once(c, &st);
    return NAN;
  }
  double s = 0;
  for (size_t i = 0; i < n; i++) s += (double)w[i] * c->losses[i];
  return s;
}

static void cuda_backward(void *ctx) {
  train_cuda *c = ctx;
  dg_status st;
  dg_status_ok(&st);
  if (!c->failed && !(nn_cuda_zero_grad(c->g, &st) && nn_cuda_backward(c->g, &st)))
    fail_once(c, &st);
}

static float cuda_update(void *ctx, int64_t step) {
  train_cuda *c = ctx;
  float norm = NAN;
  dg_status st;
  dg_status_ok(&st);
  if (!c->failed && !nn_cuda_update(c->g, step, &norm, &st)) fail_once(c, &st);
  return c->failed ? NAN : norm;
}

static void cuda_queue_step(void *ctx, const int32_t *in, const int32_t *tg, const float *w, int B,
                            int T, int64_t step) {
  train_cuda *c = ctx;
  dg_status st;
  dg_status_ok(&st);
  if (!c->failed &&
      !(nn_cuda_forward(c->g, in, tg, w, B, T, NULL, &st) && nn_cuda_zero_grad(c->g, &st) &&
        nn_cuda_backward(c->g, &st) && nn_cuda_update(c->g, step, NULL, &st)))
    fail_once(c, &st);
}

static void cuda_step_result(void *ctx, int64_t step, float *loss, float *norm) {
  train_cuda *c = ctx;
  dg_status st;
  dg_status_ok(&st);
  *loss = *norm = NAN;
  if (!c->failed && !nn_cuda_step_stats(c->g, step, loss, norm, &st)) fail_once(c, &st);
}

static bool cuda_save(void *ctx, const char *model_path, const char *state_path, int64_t step,
                      dg_status *st) {
  train_cuda *c = ctx;
  if (c->failed) {
    *st = c->err;
    return false;
  }
  return nn_cuda_model_store(c->g, c->host, true, st) &&
         nn_checkpoint_save(c->host, model_path, st) &&
         nn_state_save(c->host, step, NULL, state_path, st);
}

static bool cuda_check(void *ctx, dg_status *st) {
  train_cuda *c = ctx;
  if (!c->failed) return true;
  *st = c->err;
  return false;
}

/* -log p of every target is the forward's per-token loss. */
static void cuda_token_logps(void *ctx, const int32_t *in, const int32_t *tg, const uint8_t *mask, int B,
                             int T, float *logp) {
  train_cuda *c = ctx;
  size_t n = (size_t)B * (size_t)T;
  DG_ASSERT(n <= c->cap);
  dg_status st;
  dg_status_ok(&st);
  float loss;
  if (!c->failed && !(nn_cuda_forward(c->g, in, tg, NULL, B, T, &loss, &st) &&
                      nn_cuda_copy_losses(c->g, c->losses, &st)))
    fail_once(c, &st);
  for (size_t i = 0; i < n; i++) logp[i] = c->failed || (mask && !mask[i]) ? 0.0f : -c->losses[i];
}

static float cuda_forward_weighted(void *ctx, const int32_t *in, const int32_t *tg, const float *w,
                                   double norm, int B, int T) {
  train_cuda *c = ctx;
  float loss = NAN;
  dg_status st;
  dg_status_ok(&st);
  if (!c->failed && !nn_cuda_forward_weighted(c->g, in, tg, w, norm, B, T, &loss, &st)) fail_once(c, &st);
  return c->failed ? NAN : loss;
}

static void cuda_zero_grad(void *ctx) {
  train_cuda *c = ctx;
  dg_status st;
  dg_status_ok(&st);
  if (!c->failed && !nn_cuda_zero_grad(c->g, &st)) fail_once(c, &st);
}

static void cuda_accumulate(void *ctx) {
  train_cuda *c = ctx;
  dg_status st;
  dg_status_ok(&st);
  if (!c->failed && !nn_cuda_backward(c->g, &st)) fail_once(c, &st);
}

static nn_optim *cuda_optim(void *ctx) { return nn_cuda_model_optim(((train_cuda *)ctx)->g); }

static bool cuda_pull(void *ctx, dg_status *st) {
  train_cuda *c = ctx;
  if (c->failed) {
    *st = c->err;
    return false;
  }
  return nn_cuda_model_store(c->g, c->host, false, st);
}

struct nn_cuda_model *train_cuda_model(train_cuda *c) { return c->g; }

train_backend train_backend_cuda(train_cuda *c) {
  if (!c->frozen) *nn_cuda_model_optim(c->g) = c->host->opt;
  train_backend b = {.name = "cuda",
                     .ctx = c,
                     .forward = cuda_forward,
                     .weighted_sum = cuda_weighted_sum,
                     .backward = cuda_backward,
                     .update = cuda_update,
                     .save = cuda_save,
                     .check = cuda_check,
                     .queue_step = cuda_queue_step,
                     .step_result = cuda_step_result,
                     .token_logps = cuda_token_logps,
                     .forward_weighted = cuda_forward_weighted,
                     .zero_grad = cuda_zero_grad,
                     .accumulate = cuda_accumulate,
                     .optim = cuda_optim,
                     .pull = cuda_pull};
  return b;
}

#else

struct train_cuda {
  int unused;
};

bool train_cuda_init(train_cuda **out, nn_model *host, int B, int T, dg_status *st) {
  (void)host, (void)B, (void)T;
  *out = NULL;
  return train_device_available(TRAIN_DEVICE_CUDA, st);
}

bool train_cuda_init_frozen(train_cuda **out, nn_model *host, int B, int T, dg_status *st) {
  return train_cuda_init(out, host, B, T, st);
}

void train_cuda_free(train_cuda *c) { (void)c; }

struct nn_cuda_model *train_cuda_model(train_cuda *c) {
  (void)c;
  return NULL;
}

train_backend train_backend_cuda(train_cuda *c) {
  (void)c;
  DG_UNREACHABLE(); /* train_cuda_init never succeeds here */
}

#endif
