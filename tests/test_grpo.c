/* test_grpo.c: GRPO's objective (src/train/grpo.c): rewards by gate,
 * group-normalised advantages (a group of equal rewards is dropped), and
 * the token weights whose weighted cross-entropy has the gradient of the
 * clipped surrogate with the KL penalty: against finite differences of the
 * loss itself through the C reference model, with ratios clipped on both
 * sides and a reference, in the token-level and per-sequence forms. */
#include <math.h>
#include <string.h>
#include <sys/stat.h>

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

/* ---- runs ------------------------------------------------------------------ */

#include <stdlib.h>
#include <unistd.h>

#include "dragon/data.h"
#include "dragon/wl.h"

static const data_splits *the_splits(void) {
  static data_splits *t;
  dg_status st;
  if (!t) t = data_splits_load(DATA_SPLIT_FILE, &st);
  return t;
}

/* A random tiny model and a tokenizer trained on kernel and TSEL text, in
 * the test's directory (model.bin, tokenizer.bin). */
static bool tiny_files(char *model, char *tok_path, size_t n) {
  dg_status st;
  dg_str corpus;
  dg_str_init(&corpus);
  const data_splits *t = the_splits();
  if (!t) return false;
  for (int64_t i = data_splits_next(t, DATA_SPLIT_TRAIN, 0), k = 0; i >= 0 && k < 6;
       i = data_splits_next(t, DATA_SPLIT_TRAIN, i + 1), k++) {
    dg_func *f = wl_build(data_splits_at(t, i)->spec, &st);
    if (!f) continue;
    char *kt = ir_print(f);
    dg_str_puts(&corpus, kt);
    free(kt);
    ir_func_free(f);
  }
  static const char *const tsel =
      "tsel 1 kernel x\nt1 block \"C\"\nt2 loops t1 x2\nt3 fuse t2.0 t2.1\nt4 split t3 [_ 32]\n"
      "t5 bind t4.0 blockIdx.x\nt6 bind t4.1 threadIdx.x\nt7 unroll_steps t1 [0 16 64] =16\n"
      "t8 postproc default\n";
  for (int i = 0; i < 20; i++) dg_str_puts(&corpus, tsel);
  tok_tokenizer *tok = tok_train(corpus.s, corpus.len, 500, NULL, &st);
  dg_str_free(&corpus);
  if (!tok) return false;
  nn_config c = {tok_vocab_size(tok), 32, 1, 2, 2, 16, 64, 1024, 10000.0f, 1e-6f};
  nn_model m;
  bool ok = nn_model_init(&m, &c, false, &st);
  if (ok) {
    nn_model_init_weights(&m, 3);
    snprintf(model, n, "%s/tiny_model.bin", dg_test_tmpdir());
    snprintf(tok_path, n, "%s/tiny_tokenizer.bin", dg_test_tmpdir());
    ok = nn_checkpoint_save(&m, model, &st) && tok_save(tok, tok_path, &st);
    nn_model_free(&m);
  }
  tok_free(tok);
  return ok;
}

static int edit_count(const char *g) {
  int n = 0;
  for (const char *p = g; p && *p; p = strchr(p, '\n') ? strchr(p, '\n') + 1 : p + strlen(p))
    n += p[0] == 't' && p[1] >= '1' && p[1] <= '9';
  return n;
}

/* A planted reward: fewer edits earn more; the first prompt's family earns
 * the same whatever it writes (its groups are dropped). */
static const char *flat_family;
static float fewer_edits(void *ctx, const char *spec, const dg_func *f, const char *graph, eval_gate *gate,
                         double *speedup) {
  (void)ctx;
  (void)f;
  *gate = graph ? EVAL_PASSED : EVAL_GATE_PARSE;
  *speedup = 0;
  if (flat_family && strcmp(spec, flat_family) == 0) return 0.5f;
  return graph ? -(float)edit_count(graph) / 10.0f : -5.0f;
}

static void run_args(grpo_run_args *a, const char *model, const char *tok, const char *dir) {
  grpo_run_args_default(a);
  a->out_dir = dir;
  a->init = model;
  a->init_tokenizer = tok;
  a->splits = the_splits();
  a->prompts = 2;
  a->samples = 6;
  a->max_tokens = 200;
  a->lr = 3e-3f;
  a->warmup = 1;
  a->reward = fewer_edits;
  a->threads = 2;
}

/* A run stopped after 2 steps and resumed to 4 logs what a run of 4 logs,
 * and refuses what it should: a directory that holds a run, a resume of
 * none, a tokenizer of another vocabulary. */
DG_TEST(grpo_run_resumes_exactly) {
  char model[600], tok[600];
  CHECK(tiny_files(model, tok, sizeof model));
  char d1[700], d2[700];
  snprintf(d1, sizeof d1, "%s/grpo_full", dg_test_tmpdir());
  snprintf(d2, sizeof d2, "%s/grpo_split", dg_test_tmpdir());
  grpo_run_args a;
  grpo_result full, part, rest;
  dg_status st;
  flat_family = NULL;
  run_args(&a, model, tok, d1);
  a.steps = 4;
  CHECK_MSG(grpo_run(&a, &full, &st), "%s", st.msg);
  CHECK_EQ(full.n, 4);
  run_args(&a, model, tok, d2);
  a.steps = 2;
  CHECK_MSG(grpo_run(&a, &part, &st), "%s", st.msg);
  run_args(&a, NULL, NULL, d2);
  a.resume = true;
  a.steps = 4;
  CHECK_MSG(grpo_run(&a, &rest, &st), "%s", st.msg);
  CHECK(rest.first_step == 2 && rest.last_step == 4 && rest.n == 2);
  for (int i = 0; i < 4; i++) {
    const grpo_step_stats *x = &full.steps[i], *y = i < 2 ? &part.steps[i] : &rest.steps[i - 2];
    CHECK_MSG(x->reward_mean == y->reward_mean && x->loss == y->loss && x->tokens == y->tokens &&
                  x->grad_norm == y->grad_norm,
              "step %d: reward %g/%g loss %g/%g", i, x->reward_mean, y->reward_mean, x->loss, y->loss);
  }
  CHECK(full.steps[3].tokens > 0 && full.steps[0].grad_norm > 0);
  /* the log: one line a step, across the resume */
  char lp[800];
  snprintf(lp, sizeof lp, "%s/log.jsonl", d2);
  size_t n;
  char *log = dg_read_file(lp, &n, &st);
  CHECK(log);
  int lines = 0;
  for (size_t i = 0; i < n; i++) lines += log[i] == '\n';
  CHECK_EQ(lines, 4);
  CHECK(strstr(log, "\"step\": 3,"));
  free(log);
  grpo_result_free(&full);
  grpo_result_free(&part);
  grpo_result_free(&rest);
  /* refusals */
  run_args(&a, model, tok, d1);
  CHECK(!grpo_run(&a, &full, &st));
  CHECK_ERR(st, "already holds a run");
  grpo_result_free(&full);
  char d3[700];
  snprintf(d3, sizeof d3, "%s/grpo_none", dg_test_tmpdir());
  run_args(&a, NULL, NULL, d3);
  a.resume = true;
  CHECK(!grpo_run(&a, &full, &st));
  CHECK_ERR(st, "grpo.cfg");
  grpo_result_free(&full);
  run_args(&a, model, "tests/data/tokenizer/../../../models/little-dragon/tokenizer.bin", d3);
  CHECK(!grpo_run(&a, &full, &st));
  CHECK_ERR(st, "a vocabulary of another size");
  grpo_result_free(&full);
}

/* Dynamic sampling: a group whose rewards are all equal is dropped and
 * the step takes the next prompt; and the rewards rise under a planted
 * reward the tiny model can learn (fewer edits). */
DG_TEST(grpo_run_drops_flat_groups_and_learns) {
  char model[600], tok[600];
  CHECK(tiny_files(model, tok, sizeof model));
  char d[700];
  snprintf(d, sizeof d, "%s/grpo_flat", dg_test_tmpdir());
  const data_splits *t = the_splits();
  /* the first training workload earns the same for anything */
  flat_family = data_splits_at(t, data_splits_next(t, DATA_SPLIT_TRAIN, 0))->spec;
  grpo_run_args a;
  run_args(&a, model, tok, d);
  a.steps = 1;
  grpo_result r;
  dg_status st;
  CHECK_MSG(grpo_run(&a, &r, &st), "%s", st.msg);
  flat_family = NULL;
  CHECK_MSG(r.steps[0].dropped_groups == 1 && r.steps[0].groups == 2, "%d dropped, %d kept",
            r.steps[0].dropped_groups, r.steps[0].groups);
  char cp[800];
  snprintf(cp, sizeof cp, "%s/cursor_1.txt", d);
  char *cur = dg_read_file(cp, NULL, &st);
  CHECK_MSG(cur && atoi(cur) == 3, "cursor %s", cur ? cur : st.msg); /* 3 prompts taken */
  free(cur);
  grpo_result_free(&r);
  /* learning */
  snprintf(d, sizeof d, "%s/grpo_learn", dg_test_tmpdir());
  run_args(&a, model, tok, d);
  a.steps = 10;
  a.lr = 3e-2f;
  CHECK_MSG(grpo_run(&a, &r, &st), "%s", st.msg);
  double early = (r.steps[0].reward_mean + r.steps[1].reward_mean) / 2,
         late = (r.steps[8].reward_mean + r.steps[9].reward_mean) / 2;
  CHECK_MSG(late > early + 0.05, "reward %.3f early, %.3f late", early, late);
  grpo_result_free(&r);
}

/* The gates as the reward (the C emulation: correctness, no latency): a
 * step on the first training workload; every sample's reward is one the
 * gates give (a failure's -1 + 0.1 x gate, or 1 for a correct graph). */
DG_TEST(grpo_run_gate_rewards) {
  char model[600], tok[600];
  CHECK(tiny_files(model, tok, sizeof model));
  char d[700];
  snprintf(d, sizeof d, "%s/grpo_gates", dg_test_tmpdir());
  grpo_run_args a;
  run_args(&a, model, tok, d);
  a.reward = NULL;
  a.prompts = 1;
  a.samples = 3;
  a.steps = 1;
  a.max_tokens = 300;
  grpo_result r;
  dg_status st;
  CHECK_MSG(grpo_run(&a, &r, &st), "%s", st.msg);
  CHECK_EQ(r.n, 1);
  /* the mean of three gate rewards: a multiple of 0.1/3 within [-1, 1] */
  double m3 = r.steps[0].reward_mean * 3 * 10;
  CHECK_MSG(fabs(m3 - round(m3)) < 1e-3 && r.steps[0].reward_mean >= -1 && r.steps[0].reward_mean <= 1,
            "mean reward %g", r.steps[0].reward_mean);
  CHECK(r.steps[0].correct >= 0 && r.steps[0].correct <= 1);
  CHECK(r.steps[0].groups + r.steps[0].dropped_groups >= 1);
  grpo_result_free(&r);
}

/* The command: a step end to end, its log and plot; bad options refused. */
DG_TEST(grpo_cli_step_log_and_plot) {
  char model[600], tok[600];
  CHECK(tiny_files(model, tok, sizeof model));
  char args[2000], *out = NULL;
  snprintf(args, sizeof args,
           "train grpo --init %s --tokenizer %s --out %s/grpo_cli --steps 1 --prompts 1 --samples 2 "
           "--max-tokens 120 --quiet",
           model, tok, dg_test_tmpdir());
  int rc = dg_test_run_dragon(args, NULL, &out);
  CHECK_MSG(rc == 0 && strstr(out, "steps 0..1 of"), "rc %d: %s", rc, out);
  free(out);
  char p[800];
  snprintf(p, sizeof p, "%s/grpo_cli/log.jsonl", dg_test_tmpdir());
  dg_status st;
  char *log = dg_read_file(p, NULL, &st);
  CHECK_MSG(log && strstr(log, "\"step\": 0,") && strstr(log, "\"reward\":"), "%s", log ? log : st.msg);
  free(log);
  if (system("command -v gnuplot >/dev/null 2>&1") == 0) {
    snprintf(p, sizeof p, "%s/grpo_cli/grpo.png", dg_test_tmpdir());
    CHECK_MSG(access(p, R_OK) == 0, "no %s", p);
  }
  snprintf(args, sizeof args, "train grpo --out %s/grpo_bad --samples 1", dg_test_tmpdir());
  rc = dg_test_run_dragon(args, NULL, &out);
  CHECK_MSG(rc == 2, "rc %d: %s", rc, out);
  free(out);
  snprintf(args, sizeof args, "train grpo --out %s/grpo_bad --norm mean", dg_test_tmpdir());
  rc = dg_test_run_dragon(args, NULL, &out);
  CHECK_MSG(rc == 2 && strstr(out, "token or sequence"), "rc %d: %s", rc, out);
  free(out);
  snprintf(args, sizeof args, "train grpo --out %s/grpo_bad --write gpu", dg_test_tmpdir());
  rc = dg_test_run_dragon(args, NULL, &out);
  CHECK_MSG(rc == 2 && strstr(out, "--write gpu: cpu or cuda"), "rc %d: %s", rc, out);
  free(out);
  snprintf(args, sizeof args, "train grpo --out %s/grpo_bad --write cuda", dg_test_tmpdir());
  rc = dg_test_run_dragon(args, NULL, &out);
  CHECK_MSG(rc == 2 && strstr(out, "it needs --device cuda"), "rc %d: %s", rc, out);
  free(out);
}

/* With --device cuda on a machine without a GPU (or a build without CUDA)
 * the run is refused before its directory is written, saying why. */
DG_TEST(grpo_device_refused_without_gpu) {
  dg_status st;
  dg_status_ok(&st);
  if (train_device_available(TRAIN_DEVICE_CUDA, &st)) {
    dg_test_skip("a GPU is here (gpu_grpo_matches_cpu runs instead)");
    return;
  }
  char model[600], tok[600];
  CHECK(tiny_files(model, tok, sizeof model));
  char d[700];
  snprintf(d, sizeof d, "%s/grpo_nogpu", dg_test_tmpdir());
  grpo_run_args a;
  run_args(&a, model, tok, d);
  a.device = TRAIN_DEVICE_CUDA;
  a.steps = 1;
  grpo_result r;
  CHECK(!grpo_run(&a, &r, &st));
  CHECK_ERR(st, "--device cuda: ");
  grpo_result_free(&r);
  struct stat sb;
  CHECK(stat(d, &sb) != 0);
  char args[2000], *out = NULL;
  snprintf(args, sizeof args, "train grpo --init %s --tokenizer %s --out %s --steps 1 --device cuda --quiet",
           model, tok, d);
  int rc = dg_test_run_dragon(args, NULL, &out);
  CHECK_MSG(rc != 0 && strstr(out, "--device cuda: "), "rc %d: %s", rc, out);
  free(out);
  snprintf(args, sizeof args, "train grpo --out %s --device tpu", d);
  rc = dg_test_run_dragon(args, NULL, &out);
  CHECK_MSG(rc == 2 && strstr(out, "not a device"), "rc %d: %s", rc, out);
  free(out);
  CHECK(stat(d, &sb) != 0);
}

/* The parameters of a run's checkpoint after `step` steps. */
static float *params_at(const char *dir, int step, size_t *n) {
  char p[800];
  if (step < 0) snprintf(p, sizeof p, "%s", dir);
  else snprintf(p, sizeof p, "%s/model_%d.bin", dir, step);
  nn_model m;
  dg_status st;
  if (!nn_checkpoint_load(&m, p, false, &st)) return NULL;
  float *x = dg_malloc(sizeof(float) * m.num_params);
  memcpy(x, m.params_mem, sizeof(float) * m.num_params);
  *n = m.num_params;
  nn_model_free(&m);
  return x;
}

/* GPU tier: GRPO on the GPU's model beside the same run on the C
 * reference (the planted reward, so both judge alike):
 * - the first step's rollouts are written with the same starting model,
 *   so its rewards and loss tokens are equal; its loss and gradient norm
 *   agree within the CUDA model's bf16 rounding, and its update points
 *   the same way (cosine of the two parameter changes >= 0.9);
 * - a GPU run stopped after a step and resumed on the GPU logs its second
 *   step exactly as the run that was not stopped (the checkpoint holds
 *   the fp32 parameters and AdamW state; the rollouts are written with
 *   the parameters the GPU holds); a run resumed on the CPU goes on
 *   (these runs write their rollouts on the CPU, write_on_cpu);
 * - with the rollouts written on the GPU (the default there), a run of
 *   two steps, and one of one resumed to two, log the same steps. */
DG_TEST(gpu_grpo_matches_cpu) {
  dg_status st;
  dg_status_ok(&st);
  if (!train_device_available(TRAIN_DEVICE_CUDA, &st)) {
    dg_test_skip("%s", st.msg);
    return;
  }
  char model[600], tok[600];
  CHECK(tiny_files(model, tok, sizeof model));
  char dc[700], dg[700], ds[700];
  snprintf(dc, sizeof dc, "%s/grpo_dev_cpu", dg_test_tmpdir());
  snprintf(dg, sizeof dg, "%s/grpo_dev_gpu", dg_test_tmpdir());
  snprintf(ds, sizeof ds, "%s/grpo_dev_split", dg_test_tmpdir());
  flat_family = NULL;
  grpo_run_args a;
  grpo_result rc, rg, r1, r2;
  /* one step on the CPU (its checkpoint model_1 stays: a run keeps only
   * its last step), two on the GPU */
  run_args(&a, model, tok, dc);
  a.steps = 1;
  CHECK_MSG(grpo_run(&a, &rc, &st), "cpu: %s", st.msg);
  run_args(&a, model, tok, dg);
  a.steps = 2;
  a.device = TRAIN_DEVICE_CUDA;
  a.write_on_cpu = true; /* the same rollouts as the CPU run */
  CHECK_MSG(grpo_run(&a, &rg, &st), "cuda: %s", st.msg);
  CHECK(rc.n == 1 && rg.n == 2);
  const grpo_step_stats *c0 = &rc.steps[0], *g0 = &rg.steps[0];
  CHECK_MSG(c0->reward_mean == g0->reward_mean && c0->tokens == g0->tokens && c0->groups == g0->groups,
            "reward %g/%g tokens %lld/%lld", c0->reward_mean, g0->reward_mean, (long long)c0->tokens,
            (long long)g0->tokens);
  CHECK_MSG(fabs(c0->loss - g0->loss) <= 1e-2 + 1e-2 * fabs(c0->loss), "loss %g (cpu) %g (cuda)", c0->loss,
            g0->loss);
  CHECK_MSG(fabs(c0->grad_norm - g0->grad_norm) <= 0.05 * c0->grad_norm, "grad norm %g (cpu) %g (cuda)",
            c0->grad_norm, g0->grad_norm);
  CHECK(c0->grad_norm > 0);
  /* the GPU's first update: a run of one step, the same as the first
   * step of two */
  run_args(&a, model, tok, ds);
  a.steps = 1;
  a.device = TRAIN_DEVICE_CUDA;
  a.write_on_cpu = true; /* the same rollouts as the CPU run */
  CHECK_MSG(grpo_run(&a, &r1, &st), "%s", st.msg);
  CHECK(r1.n == 1);
  CHECK_MSG(r1.steps[0].reward_mean == g0->reward_mean && r1.steps[0].loss == g0->loss &&
                r1.steps[0].grad_norm == g0->grad_norm,
            "step 0 of one and of two steps: loss %g/%g norm %g/%g", r1.steps[0].loss, g0->loss,
            r1.steps[0].grad_norm, g0->grad_norm);
  size_t n0, nc, ng;
  float *p0 = params_at(model, -1, &n0), *pc = params_at(dc, 1, &nc), *pg = params_at(ds, 1, &ng);
  CHECK(p0 && pc && pg && n0 == nc && n0 == ng);
  double dot = 0, sc = 0, sg = 0;
  for (size_t i = 0; i < n0; i++) {
    double x = (double)pc[i] - p0[i], y = (double)pg[i] - p0[i];
    dot += x * y, sc += x * x, sg += y * y;
  }
  double cosine = dot / sqrt(sc * sg + 1e-300);
  CHECK_MSG(sc > 0 && cosine >= 0.9, "cosine of the updates %g", cosine);
  free(p0);
  free(pc);
  free(pg);
  /* resume on the GPU: exact */
  run_args(&a, NULL, NULL, ds);
  a.resume = true;
  a.steps = 2;
  a.device = TRAIN_DEVICE_CUDA;
  a.write_on_cpu = true; /* the same rollouts as the CPU run */
  CHECK_MSG(grpo_run(&a, &r2, &st), "%s", st.msg);
  CHECK(r2.n == 1 && r2.first_step == 1);
  const grpo_step_stats *x = &rg.steps[1], *y = &r2.steps[0];
  CHECK_MSG(x->reward_mean == y->reward_mean && x->loss == y->loss && x->grad_norm == y->grad_norm,
            "step 1: reward %g/%g loss %g/%g norm %g/%g", x->reward_mean, y->reward_mean, x->loss, y->loss,
            x->grad_norm, y->grad_norm);
  grpo_result_free(&r1);
  grpo_result_free(&r2);
  /* and on the CPU */
  run_args(&a, NULL, NULL, ds);
  a.resume = true;
  a.steps = 3;
  CHECK_MSG(grpo_run(&a, &r2, &st), "%s", st.msg);
  CHECK(r2.n == 1 && r2.last_step == 3);
  grpo_result_free(&r2);
  grpo_result_free(&rc);
  grpo_result_free(&rg);
  /* rollouts written on the GPU (its KV cache, the policy's current
   * weights): two steps, then a run of one resumed to two logs the same
   * second step */
  char dw[700], dr[700];
  snprintf(dw, sizeof dw, "%s/grpo_write_gpu", dg_test_tmpdir());
  snprintf(dr, sizeof dr, "%s/grpo_write_gpu_split", dg_test_tmpdir());
  run_args(&a, model, tok, dw);
  a.steps = 2;
  a.device = TRAIN_DEVICE_CUDA;
  CHECK_MSG(grpo_run(&a, &rg, &st), "written on the GPU: %s", st.msg);
  CHECK(rg.n == 2 && rg.steps[0].tokens > 0 && rg.steps[1].tokens > 0);
  run_args(&a, model, tok, dr);
  a.steps = 1;
  a.device = TRAIN_DEVICE_CUDA;
  CHECK_MSG(grpo_run(&a, &r1, &st), "%s", st.msg);
  run_args(&a, NULL, NULL, dr);
  a.resume = true;
  a.steps = 2;
  a.device = TRAIN_DEVICE_CUDA;
  CHECK_MSG(grpo_run(&a, &r2, &st), "%s", st.msg);
  CHECK(r1.n == 1 && r2.n == 1);
  CHECK_MSG(r1.steps[0].reward_mean == rg.steps[0].reward_mean && r1.steps[0].tokens == rg.steps[0].tokens,
            "step 0: reward %g/%g tokens %lld/%lld", r1.steps[0].reward_mean, rg.steps[0].reward_mean,
            (long long)r1.steps[0].tokens, (long long)rg.steps[0].tokens);
  CHECK_MSG(r2.steps[0].reward_mean == rg.steps[1].reward_mean && r2.steps[0].tokens == rg.steps[1].tokens,
            "step 1 resumed: reward %g/%g tokens %lld/%lld", r2.steps[0].reward_mean, rg.steps[1].reward_mean,
            (long long)r2.steps[0].tokens, (long long)rg.steps[1].tokens);
  grpo_result_free(&r1);
  grpo_result_free(&r2);
  grpo_result_free(&rg);
}

/* A group's samples measured again before their rewards are final: its
 * fastest distinct kernels, fastest first, one sample each (an equal
 * kernel shares the measurement), none that failed or was not timed. */
DG_TEST(grpo_group_fastest_picks_distinct_kernels) {
  const double secs[] = {0, 3e-6, 1e-6, 1e-6, 2e-6, 0};
  const uint64_t hash[] = {7, 1, 2, 2, 3, 4};
  int out[4] = {-1, -1, -1, -1};
  CHECK_EQ(grpo_group_fastest(secs, hash, 6, 2, out), 2);
  CHECK_EQ(out[0], 2); /* not 3: the same kernel */
  CHECK_EQ(out[1], 4);
  CHECK_EQ(grpo_group_fastest(secs, hash, 6, 4, out), 3); /* three timed kernels in all */
  CHECK_EQ(out[2], 1);
  const double none[] = {0, 0};
  CHECK_EQ(grpo_group_fastest(none, hash, 2, 2, out), 0);
}
