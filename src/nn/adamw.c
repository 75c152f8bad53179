/* adamw.c: the optimizer of the C reference: AdamW with bias correction
 * and decoupled weight decay, global-norm gradient clipping, and the
 * learning-rate schedule (linear warmup, cosine decay to a floor).
 *
 * Weight decay applies to the tensors whose NN_PARAM_LIST entry says so:
 * every matrix (embedding, projections, LM head), never the RMSNorm gains.
 * The update is elementwise in a fixed order, so it is deterministic; the
 * global norm is summed in double. Assumes the model was created with
 * training = true. Does not do gradient accumulation itself (forward and
 * backward accumulate) nor mixed precision.
 */
#include "dragon/nn.h"

#include <math.h>

void nn_optim_default(nn_optim *o) {
  o->lr = 3e-4f;
  o->lr_min = 3e-5f;
  o->warmup_steps = 100;
  o->total_steps = 10000;
  o->beta1 = 0.9f;
  o->beta2 = 0.95f;
  o->eps = 1e-8f;
  o->weight_decay = 0.1f;
  o->grad_clip = 1.0f;
}

float nn_optim_lr(const nn_optim *o, int64_t step) {
  if (step < 0) step = 0;
  if (step < o->warmup_steps) return o->lr * (float)(step + 1) / (float)o->warmup_steps;
  if (step >= o->total_steps) return o->lr_min;
  int64_t warm = o->warmup_steps > 0 ? o->warmup_steps : 0;
  double frac = (double)(step - warm) / (double)(o->total_steps - warm);
  double coeff = 0.5 * (1.0 + cos(M_PI * frac)); /* 1 -> 0 */
  return (float)(o->lr_min + coeff * (o->lr - o->lr_min));
}

float nn_update(nn_model *m, int64_t step) {
  DG_ASSERT(m->grads_mem && m->m_mem && m->v_mem && step >= 0);
  const nn_optim *o = &m->opt;
  float norm = nn_grad_norm(m);
  float scale = o->grad_clip > 0 && norm > o->grad_clip ? o->grad_clip / norm : 1.0f;
  float lr = nn_optim_lr(o, step);
  double t = (double)step + 1;
  float bc1 = (float)(1.0 - pow(o->beta1, t)), bc2 = (float)(1.0 - pow(o->beta2, t));
  size_t off = 0;
  for (int i = 0; i < NN_PARAM_COUNT; i++) {
    float wd = nn_param_decays((nn_param_id)i) ? o->weight_decay : 0.0f;
    size_t end = off + m->param_sizes[i];
    for (size_t j = off; j < end; j++) {
      float g = m->grads_mem[j] * scale;
      float mj = o->beta1 * m->m_mem[j] + (1.0f - o->beta1) * g;
      float vj = o->beta2 * m->v_mem[j] + (1.0f - o->beta2) * g * g;
      m->m_mem[j] = mj;
      m->v_mem[j] = vj;
      float mhat = mj / bc1, vhat = vj / bc2;
      m->params_mem[j] -= lr * (mhat / (sqrtf(vhat) + o->eps) + wd * m->params_mem[j]);
    }
    off = end;
  }
  return norm;
}
