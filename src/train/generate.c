/* generate.c: the model's generation on a device, one entry for every
 * caller (`dragon sample-model`, and the model's later users: optimize,
 * eval, GRPO), so that none of them dispatches on the device itself: the C
 * reference's KV-cache sampler on the CPU (nn_generate), or the CUDA model
 * (nn_cuda_generate), loaded onto the GPU once when the generator is made
 * and kept across calls. Both take the same arguments and draw row i from
 * the same per-row RNG; the CUDA model's tokens match the reference's
 * where the logits agree to bf16's precision. */
#include "dragon/train.h"

#ifdef DG_HAVE_CUDA
#include "dragon/nn_cuda.h"
#endif

struct train_generator {
  const nn_model *m;
  train_device device;
#ifdef DG_HAVE_CUDA
  nn_cuda_model *g;
#endif
};

bool train_generator_new(const nn_model *m, train_device d, train_generator **out,
                         dg_status *st) {
  dg_status_ok(st);
  *out = NULL;
  if (!train_device_available(d, st)) return false;
  train_generator *g = dg_calloc(1, sizeof *g);
  g->m = m;
  g->device = d;
#ifdef DG_HAVE_CUDA
  if (d == TRAIN_DEVICE_CUDA) {
    /* the training buffers at their smallest: generation sizes its own */
    if (!nn_cuda_model_init(&g->g, &m->cfg, 1, 1, st) || !nn_cuda_model_load(g->g, m, false, st)) {
      train_generator_free(g);
      return false;
    }
  }
#endif
  *out = g;
  return true;
}

bool train_generate(train_generator *g, const int32_t *const *prompts, const int *lens, int n,
                    const nn_sample_opts *o, uint64_t seed, int32_t *out, int *out_lens,
                    dg_status *st) {
  if (g->device == TRAIN_DEVICE_CPU)
    return nn_generate(g->m, prompts, lens, n, o, seed, out, out_lens, st);
#ifdef DG_HAVE_CUDA
  return nn_cuda_generate(g->g, prompts, lens, n, o, seed, out, out_lens, NULL, st);
#else
  return train_device_available(g->device, st);
#endif
}

void train_generator_free(train_generator *g) {
  if (!g) return;
#ifdef DG_HAVE_CUDA
  nn_cuda_model_free(g->g);
#endif
  free(g);
}
