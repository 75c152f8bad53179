/* test_grpo.c: GRPO's objective (src/train/grpo.c): rewards by gate,
 * group-normalised advantages (a group of equal rewards is dropped), and
 * the token weights whose weighted cross-entropy has the gradient of the
 * clipped surrogate with the KL penalty: against finite differences of the
 * loss itself through the C reference model, with ratios clipped on both
 * sides and a reference, in the token-level and per-sequence forms. */
#include <math.h>
#include <string.h>

#include "dragon/train.h"
#include "test.h"

DG_TEST(grpo_rewards_by_gate) {
  grpo_opts o;
  grpo_opts_default(&o);
  /* every failure below every success, later gates above earlier ones */
  float prev = -2;
  for (int g = 0; g < EVAL_GATE_COUNT; g++) {
    float r = grpo_reward(&o, (eval_gate)g, 0);
    CHECK_MSG(r > prev && r < 0, "gate %s: %g", eval_gate_name((eval_gate)g), (double)r);
    prev = r;
  }
  CHECK_NEAR(grpo_reward(&o, EVAL_GATE_PARSE, 5), -1.0, 1e-6);
  CHECK_NEAR(grpo_reward(&o, EVAL_GATE_NUMERIC, 5), -0.4, 1e-6);
  CHECK_NEAR(grpo_reward(&o, EVAL_PASSED, 0), 1.0, 1e-6);          /* not timed */
  CHECK_NEAR(grpo_reward(&o, EVAL_PASSED, 2.0), 1.0 + log(2.0), 1e-6);
  CHECK_NEAR(grpo_reward(&o, EVAL_PASSED, 0.5), 1.0 - log(2.0), 1e-6); /* slower than the baseline */
  CHECK_NEAR(grpo_reward(&o, EVAL_PASSED, 1e9), 4.0, 1e-6);         /* clipped */
}

DG_TEST(grpo_group_advantages_and_dropped_groups) {
  float adv[4];
  const float r[4] = {1, 0, 0, 1};
  CHECK(grpo_group_advantages(r, 4, true, adv));
  double sd = sqrt(4 * 0.25 / 3); /* Bessel */
  for (int i = 0; i < 4; i++) CHECK_NEAR(adv[i], (r[i] - 0.5) / (sd + 1e-4), 1e-5);
  CHECK(grpo_group_advantages(r, 4, false, adv)); /* Dr. GRPO: no std */
  for (int i = 0; i < 4; i++) CHECK_NEAR(adv[i], r[i] - 0.5, 1e-6);
  const float same[3] = {-0.7f, -0.7f, -0.7f};
  float a3[3] = {9, 9, 9};
  CHECK(!grpo_group_advantages(same, 3, true, a3));
  for (int i = 0; i < 3; i++) CHECK(a3[i] == 0);
  float one;
  CHECK(!grpo_group_advantages(same, 1, true, &one));
}

/* ---- the gradient against finite differences ------------------------------ */

enum { B = 3, T = 7, V = 11 };

static nn_config tiny_config(void) {
  nn_config c = {V, 8, 2, 4, 2, 4, 12, 8, 100.0f, 1e-5f};
  return c;
}

typedef struct {
  int32_t in[B * T], tg[B * T];
  uint8_t mask[B * T];
  float old[B * T], ref[B * T], adv[B];
} batch;

/* The loss at the model's parameters (weights into w when not NULL). */
static double loss_at(nn_model *m, const batch *b, const grpo_opts *o, float *w) {
  nn_forward(m, b->in, NULL, NULL, B, T);
  float logp[B * T], wl[B * T];
  grpo_token_logps(m->acts.logits, b->tg, b->mask, B * T, V, logp);
  grpo_tokens tk = {B, T, b->mask, logp, b->old, o->beta > 0 ? b->ref : NULL, b->adv, 0, 0};
  grpo_stats s;
  double l = grpo_token_weights(o, &tk, w ? w : wl, &s);
  return l;
}

static void check_gradient(grpo_norm norm, float beta, double *clipped_seen) {
  dg_status st;
  nn_config c = tiny_config();
  nn_model m;
  CHECK(nn_model_init(&m, &c, true, &st));
  dg_rng r;
  dg_rng_seed(&r, 11);
  for (size_t i = 0; i < m.num_params; i++) m.params_mem[i] = (float)(0.5 * dg_rng_normal(&r));
  CHECK(nn_model_reserve(&m, B, T, &st));
  batch b;
  for (int i = 0; i < B * T; i++) {
    b.in[i] = (int32_t)dg_rng_range(&r, 0, V - 1);
    b.tg[i] = (int32_t)dg_rng_range(&r, 0, V - 1);
    b.mask[i] = (i % T) >= 2; /* the prompt is not trained on */
  }
  b.mask[B * T - 1] = 0; /* a padded tail */
  const float advs[B] = {1.3f, -0.8f, 0.4f};
  memcpy(b.adv, advs, sizeof advs);
  /* the sampling policy: the current one shifted, so that some ratios fall
   * outside [0.8, 1.2] on both sides; the reference another shift */
  nn_forward(&m, b.in, NULL, NULL, B, T);
  float logp[B * T];
  grpo_token_logps(m.acts.logits, b.tg, NULL, B * T, V, logp);
  for (int i = 0; i < B * T; i++) {
    double shift = (i % 5 == 0) ? -0.6 : (i % 5 == 1) ? 0.5 : 0.1 * dg_rng_normal(&r);
    b.old[i] = (float)(logp[i] + shift);
    b.ref[i] = (float)(logp[i] + 0.3 * dg_rng_normal(&r));
  }
  grpo_opts o;
  grpo_opts_default(&o);
  o.norm = norm;
  o.beta = beta;
  o.eps_high = 0.28f;
  /* the analytic gradient: the weights' cross-entropy, backward */
  float w[B * T];
  loss_at(&m, &b, &o, w);
  {
    float lp[B * T];
    grpo_token_logps(m.acts.logits, b.tg, b.mask, B * T, V, lp);
    grpo_tokens tk = {B, T, b.mask, lp, b.old, beta > 0 ? b.ref : NULL, b.adv, 0, 0};
    grpo_stats s;
    grpo_token_weights(&o, &tk, w, &s);
    *clipped_seen += s.clipped_frac;
  }
  nn_zero_grad(&m);
  nn_forward_weighted(&m, b.in, b.tg, w, 1.0, B, T);
  nn_backward(&m);
  /* finite differences on the parameters with the largest gradients */
  int checked = 0;
  double worst = 0;
  for (int pass = 0; pass < 40 && checked < 12; pass++) {
    size_t j = (size_t)dg_rng_range(&r, 0, (int64_t)m.num_params - 1);
    double g = m.grads_mem[j];
    if (fabs(g) < 1e-3) continue;
    float keep = m.params_mem[j];
    double h = 1e-2;
    m.params_mem[j] = (float)(keep + h);
    double lp = loss_at(&m, &b, &o, NULL);
    m.params_mem[j] = (float)(keep - h);
    double lm = loss_at(&m, &b, &o, NULL);
    m.params_mem[j] = keep;
    double fd = (lp - lm) / (2 * h);
    double rel = fabs(fd - g) / (fabs(fd) + fabs(g));
    if (rel > worst) worst = rel;
    CHECK_MSG(rel < 0.05 || fabs(fd - g) < 2e-4, "param %zu: analytic %.6g, finite difference %.6g", j, g, fd);
    checked++;
  }
  CHECK_MSG(checked >= 6, "only %d parameters had a gradient", checked);
  nn_model_free(&m);
}

DG_TEST(grpo_gradient_matches_finite_differences) {
  double clipped = 0;
  check_gradient(GRPO_NORM_TOKEN, 0, &clipped);
  check_gradient(GRPO_NORM_TOKEN, 0.5f, &clipped); /* a KL large enough to matter */
  check_gradient(GRPO_NORM_SEQUENCE, 0.5f, &clipped);
  CHECK(clipped > 0); /* the clipped branch was exercised */
}

/* On-policy (ratio 1) without a KL, the weights are the advantages over
 * the normaliser: every loss token of the batch (DAPO), or each sample's
 * tokens then the samples (GRPO); masked tokens weigh 0. */
DG_TEST(grpo_weights_on_policy) {
  uint8_t mask[2 * 4] = {0, 1, 1, 1, 0, 0, 1, 0};
  float logp[8] = {0, -1, -2, -0.5f, 0, 0, -3, 0};
  float adv[2] = {2, -1};
  grpo_opts o;
  grpo_opts_default(&o);
  grpo_tokens tk = {2, 4, mask, logp, NULL, NULL, adv, 0, 0};
  float w[8];
  grpo_stats s;
  double loss = grpo_token_weights(&o, &tk, w, &s);
  CHECK_EQ((int)s.tokens, 4);
  for (int i = 0; i < 8; i++) CHECK_NEAR(w[i], mask[i] ? adv[i / 4] / 4.0 : 0.0, 1e-7);
  CHECK_NEAR(loss, -(3 * 2 - 1) / 4.0, 1e-7);
  CHECK_NEAR(s.clipped_frac, 0, 0);
  o.norm = GRPO_NORM_SEQUENCE;
  grpo_token_weights(&o, &tk, w, &s);
  for (int i = 0; i < 8; i++) CHECK_NEAR(w[i], mask[i] ? adv[i / 4] / ((i < 4 ? 3.0 : 1.0) * 2) : 0.0, 1e-7);
  /* a step cut in two batches normalises by the step's tokens */
  o.norm = GRPO_NORM_TOKEN;
  tk.norm_tokens = 10;
  grpo_token_weights(&o, &tk, w, &s);
  CHECK_NEAR(w[1], 2 / 10.0, 1e-7);
}
