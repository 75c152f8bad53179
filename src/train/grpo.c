/* grpo.c: GRPO's objective on sampled graphs (include/dragon/train.h,
 * "GRPO"): rewards by gate, group-normalised advantages, and the clipped
 * policy-gradient loss with a KL penalty to a reference model, expressed
 * as weights on the tokens' negative log-likelihoods so that the model's
 * one weighted cross-entropy (nn_forward_weighted and nn_backward, or the
 * CUDA model's) computes its gradient.
 *
 * For a token with log-probability l under the policy, l_old under the
 * policy that sampled it, l_ref under the reference, and its sample's
 * advantage A, the ratio is r = exp(l - l_old) and the token's loss
 *     c * ( -min(r A, clip(r, 1 - eps_low, 1 + eps_high) A)
 *           + beta (exp(l_ref - l) - (l_ref - l) - 1) )
 * (the clipped surrogate and Schulman's k3 estimator of KL(policy || ref)),
 * where c normalises: 1 / (loss tokens of the whole batch) for the
 * token-level form (DAPO; the default), 1 / (|o_i| * samples) for the
 * per-sequence form of the original GRPO. Its derivative in l is
 *     c * ( -A r [the unclipped term is the minimum]
 *           + beta (1 - exp(l_ref - l)) ),
 * zero from the surrogate where the clipped term is the minimum (A > 0 and
 * r > 1 + eps_high, or A < 0 and r < 1 - eps_low). Since nll = -l, the
 * weight on the token's nll is minus that derivative, and
 * sum(w * nll) has the objective's gradient (tested against finite
 * differences of the loss itself).
 */
#include <math.h>
#include <string.h>

#include "dragon/eval.h"
#include "dragon/train.h"

void grpo_opts_default(grpo_opts *o) {
  memset(o, 0, sizeof *o);
  o->eps_low = 0.2f;
  o->eps_high = 0.2f;
  o->beta = 0;
  o->norm = GRPO_NORM_TOKEN;
  o->scale_std = true;
  o->bonus_clip = 3.0f;
}

/* ---- rewards and advantages --------------------------------------------- */

float grpo_reward(const grpo_opts *o, eval_gate failed, double speedup) {
  if (failed != EVAL_PASSED) {
    /* a failure, by how far the graph got: -1 at the parse, -0.3 when only
     * the measurement failed */
    return -1.0f + 0.1f * (float)failed;
  }
  float bonus = 0;
  if (speedup > 0) {
    bonus = (float)log(speedup);
    if (bonus > o->bonus_clip) bonus = o->bonus_clip;
    if (bonus < -o->bonus_clip) bonus = -o->bonus_clip;
  }
  return 1.0f + bonus;
}

int grpo_group_fastest(const double *secs, const uint64_t *hash, int g, int top, int *out) {
  int n = 0;
  while (n < top) {
    int best = -1;
    for (int j = 0; j < g; j++) {
      if (secs[j] <= 0) continue;
      bool taken = false; /* its kernel is already out */
      for (int m = 0; m < n && !taken; m++) taken = hash[out[m]] == hash[j];
      if (!taken && (best < 0 || secs[j] < secs[best])) best = j;
    }
    if (best < 0) break;
    out[n++] = best;
  }
  return n;
}

bool grpo_group_advantages(const float *r, int g, bool scale_std, float *adv) {
  double mean = 0;
  for (int i = 0; i < g; i++) mean += r[i];
  mean /= g > 0 ? g : 1;
  double var = 0;
  bool differ = false;
  for (int i = 0; i < g; i++) {
    var += (r[i] - mean) * (r[i] - mean);
    differ |= r[i] != r[0];
  }
  /* the sample standard deviation (Bessel), as TRL's */
  double sd = g > 1 ? sqrt(var / (g - 1)) : 0;
  for (int i = 0; i < g; i++) {
    double a = differ ? r[i] - mean : 0;
    if (scale_std && differ) a /= sd + 1e-4;
    adv[i] = (float)a;
  }
  return differ;
}

/* ---- log-probabilities ---------------------------------------------------- */

void grpo_token_logps(const float *logits, const int32_t *targets, const uint8_t *mask, int n, int v,
                      float *logp) {
  for (int t = 0; t < n; t++) {
    if (mask && !mask[t]) {
      logp[t] = 0;
      continue;
    }
    const float *z = logits + (size_t)t * v;
    float mx = z[0];
    for (int j = 1; j < v; j++)
      if (z[j] > mx) mx = z[j];
    double s = 0;
    for (int j = 0; j < v; j++) s += exp((double)z[j] - mx);
    logp[t] = (float)((double)z[targets[t]] - mx - log(s));
  }
}

/* ---- the loss as token weights -------------------------------------------- */

double grpo_token_weights(const grpo_opts *o, const grpo_tokens *in, float *w, grpo_stats *s) {
  memset(s, 0, sizeof *s);
  int rows = in->rows, len = in->len;
  /* the normaliser of each token */
  int64_t active = 0;
  for (int64_t i = 0; i < (int64_t)rows * len; i++) active += in->mask[i] != 0;
  int64_t norm_tokens = in->norm_tokens > 0 ? in->norm_tokens : active;
  int norm_rows = in->norm_rows > 0 ? in->norm_rows : rows;
  double loss = 0, kl = 0;
  int64_t clipped = 0;
  for (int b = 0; b < rows; b++) {
    int64_t row_active = 0;
    for (int t = 0; t < len; t++) row_active += in->mask[(size_t)b * len + t] != 0;
    double a = in->adv[b];
    for (int t = 0; t < len; t++) {
      size_t i = (size_t)b * len + t;
      if (!in->mask[i]) {
        w[i] = 0;
        continue;
      }
      double c = o->norm == GRPO_NORM_TOKEN ? 1.0 / (double)norm_tokens
                                            : 1.0 / ((double)row_active * (double)norm_rows);
      double l = in->logp[i], lo = in->logp_old ? in->logp_old[i] : l;
      double ratio = exp(l - lo);
      double clip = ratio < 1 - o->eps_low ? 1 - o->eps_low : ratio > 1 + o->eps_high ? 1 + o->eps_high : ratio;
      double surr = ratio * a, surr_c = clip * a;
      bool unclipped = surr <= surr_c;
      double dl = unclipped ? -a * ratio : 0; /* d(-min)/dl */
      double term = -(unclipped ? surr : surr_c);
      clipped += !unclipped;
      if (o->beta > 0 && in->logp_ref) {
        double d = in->logp_ref[i] - l, k3 = exp(d) - d - 1;
        term += o->beta * k3;
        dl += o->beta * (1 - exp(d));
        kl += k3;
      }
      loss += c * term;
      w[i] = (float)(-c * dl);
      s->ratio_mean += ratio;
    }
  }
  s->tokens = active;
  s->clipped_frac = active ? (double)clipped / (double)active : 0;
  s->kl_mean = active ? kl / (double)active : 0;
  s->ratio_mean = active ? s->ratio_mean / (double)active : 0;
  s->loss = loss;
  return loss;
}
