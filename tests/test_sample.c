/* test_sample.c: KV-cache decoding and sampling (src/nn/sample.c): cached
 * logits against the full forward at every position, greedy and top-k=1,
 * temperature 0, the top-k/top-p cut on a known distribution, seeded and
 * row-independent generation, greedy generation of an overfitted sequence,
 * and bad prompts.
 *
 * T time, V vocab.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "dragon/nn.h"
#include "dragon/train.h"
#include "test.h"

/* GQA (4 query heads over 2), QD != C, two layers. */
static nn_config gqa_config(void) {
  nn_config c = {40, 24, 2, 4, 2, 8, 48, 64, 10000.0f, 1e-6f};
  return c;
}

/* Random weights large enough that the logits differ by whole units. */
static bool random_model(nn_model *m, bool training, dg_status *st) {
  nn_config c = gqa_config();
  if (!nn_model_init(m, &c, training, st)) return false;
  dg_rng r;
  dg_rng_seed(&r, 7);
  for (size_t i = 0; i < m->num_params; i++) m->params_mem[i] = (float)(0.3 * dg_rng_normal(&r));
  return true;
}

DG_TEST(sample_kv_matches_forward) {
  dg_status st;
  dg_status_ok(&st);
  nn_model m;
  CHECK(random_model(&m, false, &st));
  enum { T = 20, V = 40 };
  CHECK(nn_model_reserve(&m, 2, T, &st));
  int32_t seq[2][T];
  for (int t = 0; t < T; t++) seq[0][t] = (t * 7 + 3) % V, seq[1][t] = (t * t + 11) % V;
  nn_forward(&m, &seq[0][0], NULL, NULL, 2, T); /* both rows at once */
  nn_kv_cache c;
  CHECK(nn_kv_init(&c, &m, 2, T, &st));
  double worst = 0, spread = 0;
  /* Interleave the rows to check that they do not share state. */
  for (int t = 0; t < T; t++)
    for (int b = 1; b >= 0; b--) {
      nn_kv_feed(&c, b, &seq[b][t], 1);
      const float *got = nn_kv_logits(&c, b), *want = m.acts.logits + ((size_t)b * T + t) * V;
      for (int j = 0; j < V; j++) {
        double d = fabs((double)got[j] - want[j]);
        if (d > worst) worst = d;
        if (fabs(want[j] - want[0]) > spread) spread = fabs(want[j] - want[0]);
      }
    }
  CHECK_MSG(worst <= 1e-5, "KV-cached logits differ from the full forward by %g", worst);
  CHECK(spread > 1.0); /* the logits are not all alike: the comparison means something */
  /* A reset row starts over: prefill in one call gives the same last logits. */
  nn_kv_reset(&c, 0);
  nn_kv_feed(&c, 0, seq[0], T);
  const float *last = nn_kv_logits(&c, 0);
  for (int j = 0; j < V; j++) CHECK_NEAR(last[j], m.acts.logits[(size_t)(T - 1) * V + j], 1e-5);
  nn_kv_free(&c);
  nn_model_free(&m);
}

/* Tokens fed together (a prompt at once, rows in step, more than one pass
 * of 32) leave every row exactly as tokens fed one at a time do, bit for
 * bit; a copied row continues as its source. */
DG_TEST(sample_kv_feed_rows_bitwise) {
  dg_status st;
  dg_status_ok(&st);
  nn_model m;
  CHECK(random_model(&m, false, &st));
  enum { T = 60, V = 40, R = 3 };
  int32_t seq[R][T];
  for (int r = 0; r < R; r++)
    for (int t = 0; t < T; t++) seq[r][t] = (t * (7 + r) + 3 * r + t * t) % V;
  nn_kv_cache one, all;
  CHECK(nn_kv_init(&one, &m, R, T, &st));
  CHECK(nn_kv_init(&all, &m, R + 1, T, &st));
  /* one token at a time, row after row */
  for (int r = 0; r < R; r++)
    for (int t = 0; t < T; t++) nn_kv_feed(&one, r, &seq[r][t], 1);
  /* row 0's first 45 tokens at once (two passes), then every row in step:
   * rows 1 and 2 take 5 tokens together, then all three one at a time */
  nn_kv_feed(&all, 0, seq[0], 45);
  int rows[R] = {1, 2, 0}, n[R] = {5, 5, 0};
  const int32_t *tk[R] = {seq[1], seq[2], seq[0]};
  nn_kv_feed_rows(&all, rows, tk, n, 2);
  for (int t = 0; t < T; t++) {
    int cnt = 0, fed[R];
    for (int r = 0; r < R; r++) {
      int b = (r + t) % R, at = all.pos[b]; /* in a different order each time */
      if (at >= T) continue;
      tk[cnt] = &seq[b][at];
      fed[cnt] = b;
      n[cnt++] = 1;
    }
    if (cnt) nn_kv_feed_rows(&all, fed, tk, n, cnt);
  }
  for (int r = 0; r < R; r++) {
    CHECK_EQ(all.pos[r], T);
    CHECK(memcmp(nn_kv_logits(&one, r), nn_kv_logits(&all, r), sizeof(float) * V) == 0);
  }
  /* a copy of row 1 taken back to 30 and fed row 1's tokens again ends
   * where row 1 ends */
  int32_t back[1];
  nn_kv_cache mid;
  CHECK(nn_kv_init(&mid, &m, 1, T, &st));
  nn_kv_feed(&mid, 0, seq[1], 30);
  float at30[V];
  memcpy(at30, nn_kv_logits(&mid, 0), sizeof at30);
  nn_kv_copy_row(&all, R, 1);
  CHECK_EQ(all.pos[R], T);
  CHECK(memcmp(nn_kv_logits(&all, R), nn_kv_logits(&one, 1), sizeof(float) * V) == 0);
  nn_kv_rewind(&all, R, 30, at30);
  nn_kv_feed(&all, R, seq[1] + 30, T - 30);
  CHECK(memcmp(nn_kv_logits(&all, R), nn_kv_logits(&one, 1), sizeof(float) * V) == 0);
  back[0] = (seq[1][T - 1] + 1) % V; /* and a different last token differs */
  nn_kv_rewind(&all, R, T - 1, at30);
  nn_kv_feed(&all, R, back, 1);
  CHECK(memcmp(nn_kv_logits(&all, R), nn_kv_logits(&one, 1), sizeof(float) * V) != 0);
  nn_kv_free(&mid);
  nn_kv_free(&one);
  nn_kv_free(&all);
  nn_model_free(&m);
}

/* A row taken back to an earlier position (with the logits it had there)
 * and fed other tokens gives the logits of the full forward over the new
 * sequence: the positions past the rewind are overwritten, not mixed in. */
DG_TEST(sample_kv_rewind) {
  dg_status st;
  dg_status_ok(&st);
  nn_model m;
  CHECK(random_model(&m, false, &st));
  enum { T = 16, V = 40, AT = 6 };
  CHECK(nn_model_reserve(&m, 1, T, &st));
  int32_t a[T], b[T];
  for (int t = 0; t < T; t++) a[t] = (t * 7 + 3) % V, b[t] = t < AT ? a[t] : (t * t + 5) % V;
  nn_kv_cache c;
  CHECK(nn_kv_init(&c, &m, 1, T, &st));
  nn_kv_feed(&c, 0, a, AT);
  float saved[V];
  memcpy(saved, nn_kv_logits(&c, 0), sizeof saved);
  nn_kv_feed(&c, 0, a + AT, T - AT); /* a's tail, then back to AT */
  nn_kv_rewind(&c, 0, AT, saved);
  CHECK(memcmp(nn_kv_logits(&c, 0), saved, sizeof saved) == 0);
  nn_forward(&m, b, NULL, NULL, 1, T);
  double worst = 0;
  for (int t = AT; t < T; t++) {
    nn_kv_feed(&c, 0, &b[t], 1);
    const float *got = nn_kv_logits(&c, 0), *want = m.acts.logits + (size_t)t * V;
    for (int j = 0; j < V; j++)
      if (fabs((double)got[j] - want[j]) > worst) worst = fabs((double)got[j] - want[j]);
  }
  CHECK_MSG(worst <= 1e-5, "rewound logits differ from the full forward by %g", worst);
  nn_kv_free(&c);
  nn_model_free(&m);
}

DG_TEST(sample_greedy_and_top_k_one) {
  enum { V = 50 };
  float z[V];
  dg_rng r;
  dg_rng_seed(&r, 3);
  nn_sample_opts g, k1;
  nn_sample_opts_default(&g);
  g.temperature = 0;
  nn_sample_opts_default(&k1);
  k1.top_k = 1;
  k1.temperature = 1.3f;
  for (int trial = 0; trial < 200; trial++) {
    int32_t best = 0;
    for (int j = 0; j < V; j++) {
      z[j] = (float)dg_rng_normal(&r);
      if (z[j] > z[best]) best = j;
    }
    CHECK_EQ(nn_sample_token(z, V, &g, &r), best);
    CHECK_EQ(nn_sample_token(z, V, &k1, &r), best);
  }
  /* ties go to the lowest id, in both */
  for (int j = 0; j < V; j++) z[j] = j == 9 || j == 31 ? 2.0f : 0.0f;
  CHECK_EQ(nn_sample_token(z, V, &g, &r), 9);
  CHECK_EQ(nn_sample_token(z, V, &k1, &r), 9);
  /* temperature 0 draws nothing from the RNG */
  dg_rng a = r;
  nn_sample_token(z, V, &g, &r);
  CHECK(memcmp(&a, &r, sizeof a) == 0);
  float p[V];
  nn_sample_probs(z, V, &g, p);
  CHECK_NEAR(p[9], 1.0, 0);
  CHECK_NEAR(p[31], 0.0, 0);
}

DG_TEST(sample_top_p_known) {
  /* p = (0.5, 0.3, 0.15, 0.05), given out of order */
  const float z[4] = {logf(0.15f), logf(0.5f), logf(0.05f), logf(0.3f)};
  float p[4];
  nn_sample_opts o;
  nn_sample_opts_default(&o);
  nn_sample_probs(z, 4, &o, p);
  CHECK_NEAR(p[1], 0.5, 1e-6);
  CHECK_NEAR(p[2], 0.05, 1e-6);
  o.top_p = 0.75f; /* 0.5 + 0.3 reaches it: keep two */
  nn_sample_probs(z, 4, &o, p);
  CHECK_NEAR(p[1], 0.625, 1e-6);
  CHECK_NEAR(p[3], 0.375, 1e-6);
  CHECK_NEAR(p[0], 0, 0);
  CHECK_NEAR(p[2], 0, 0);
  o.top_p = 0.85f; /* needs the third */
  nn_sample_probs(z, 4, &o, p);
  CHECK_NEAR(p[0], 0.15 / 0.95, 1e-6);
  CHECK_NEAR(p[2], 0, 0);
  o.top_p = 0.4f; /* the first alone */
  nn_sample_probs(z, 4, &o, p);
  CHECK_NEAR(p[1], 1, 1e-6);
  /* top-k before top-p, and temperature: T=2 flattens to sqrt(p) */
  o.top_p = 1;
  o.top_k = 2;
  o.temperature = 2;
  nn_sample_probs(z, 4, &o, p);
  double a = sqrt(0.5), b = sqrt(0.3);
  CHECK_NEAR(p[1], a / (a + b), 1e-6);
  CHECK_NEAR(p[3], b / (a + b), 1e-6);
  CHECK_NEAR(p[0], 0, 0);
  /* draws follow the cut distribution */
  nn_sample_opts_default(&o);
  o.top_p = 0.75f;
  dg_rng r;
  dg_rng_seed(&r, 11);
  int count[4] = {0};
  for (int i = 0; i < 20000; i++) count[nn_sample_token(z, 4, &o, &r)]++;
  CHECK_EQ(count[0] + count[2], 0);
  CHECK_NEAR(count[1] / 20000.0, 0.625, 0.02);
}

DG_TEST(sample_generate_seeded_rows_independent) {
  dg_status st;
  dg_status_ok(&st);
  nn_model m;
  CHECK(random_model(&m, false, &st));
  int32_t p0[3] = {1, 2, 3}, p1[5] = {9, 8, 7, 6, 5};
  const int32_t *prompts[2] = {p0, p1};
  int lens[2] = {3, 5}, outl[2], outl2[2];
  nn_sample_opts o;
  nn_sample_opts_default(&o);
  o.max_tokens = 12;
  int32_t out[2 * 12], out2[2 * 12];
  CHECK(nn_generate(&m, prompts, lens, 2, &o, 5, out, outl, &st));
  CHECK_EQ(outl[0], 12);
  CHECK(nn_generate(&m, prompts, lens, 2, &o, 5, out2, outl2, &st));
  CHECK(memcmp(out, out2, sizeof out) == 0);
  CHECK(nn_generate(&m, prompts, lens, 1, &o, 5, out2, outl2, &st)); /* row 0 alone */
  CHECK(memcmp(out, out2, sizeof(int32_t) * 12) == 0);
  CHECK(nn_generate(&m, prompts, lens, 2, &o, 6, out2, outl2, &st));
  CHECK(memcmp(out, out2, sizeof out) != 0); /* another seed, other samples */
  /* the stop token ends a row and is left out */
  o.stop_token = out[4];
  CHECK(nn_generate(&m, prompts, lens, 1, &o, 5, out2, outl2, &st));
  CHECK(outl2[0] <= 4);
  for (int i = 0; i < outl2[0]; i++) CHECK(out2[i] == out[i] && out2[i] != o.stop_token);
  /* the model's max_seq_len (64) ends a row too */
  int32_t longp[62] = {0};
  const int32_t *lp[1] = {longp};
  int ll[1] = {62};
  o.stop_token = -1;
  o.max_tokens = 12;
  CHECK(nn_generate(&m, lp, ll, 1, &o, 5, out2, outl2, &st));
  CHECK_EQ(outl2[0], 3); /* fed up to position 64, plus the token drawn from its logits */
  nn_model_free(&m);
}

DG_TEST(sample_generate_bad_prompts) {
  dg_status st;
  dg_status_ok(&st);
  nn_model m;
  CHECK(random_model(&m, false, &st));
  nn_sample_opts o;
  nn_sample_opts_default(&o);
  o.max_tokens = 4;
  int32_t out[4], p[70] = {0}, bad[2] = {1, 40};
  int outl[1], n0 = 0, n70 = 70, n2 = 2;
  const int32_t *pp[1] = {p}, *pb[1] = {bad};
  CHECK(!nn_generate(&m, pp, &n0, 1, &o, 1, out, outl, &st));
  CHECK_ERR(st, "prompt 0 is empty");
  CHECK(!nn_generate(&m, pp, &n70, 1, &o, 1, out, outl, &st));
  CHECK_ERR(st, "max_seq_len 64");
  CHECK(!nn_generate(&m, pb, &n2, 1, &o, 1, out, outl, &st));
  CHECK_ERR(st, "outside the vocabulary");
  nn_kv_cache c;
  CHECK(!nn_kv_init(&c, &m, 1, 65, &st));
  CHECK_ERR(st, "out of range");
  nn_model_free(&m);
}

/* A sequence where every token is predictable from the one before only
 * after the first few (a cycle with a twist), learned by heart; greedy
 * generation from its first 4 tokens must give back the rest exactly. */
DG_TEST(sample_greedy_reproduces_overfit_sequence) {
  dg_status st;
  dg_status_ok(&st);
  nn_config c = {24, 32, 2, 4, 2, 8, 64, 48, 10000.0f, 1e-6f};
  nn_model m;
  enum { T = 40 };
  CHECK(nn_model_init(&m, &c, true, &st));
  CHECK(nn_model_reserve(&m, 1, T, &st));
  nn_model_init_weights(&m, 1);
  m.opt.lr = 1e-2f, m.opt.lr_min = 1e-3f, m.opt.warmup_steps = 10, m.opt.total_steps = 400;
  m.opt.weight_decay = 0;
  int32_t seq[T + 1];
  for (int t = 0; t <= T; t++) seq[t] = (int32_t)((t * 5 + t / 7) % 23);
  float loss = 1;
  for (int step = 0; step < 400 && loss > 0.01f; step++) {
    loss = nn_forward(&m, seq, seq + 1, NULL, 1, T);
    nn_zero_grad(&m);
    nn_backward(&m);
    nn_update(&m, step);
  }
  CHECK_MSG(loss <= 0.01f, "the model did not learn the sequence: loss %g", (double)loss);
  nn_sample_opts o;
  nn_sample_opts_default(&o);
  o.temperature = 0;
  o.max_tokens = T + 1 - 4;
  int32_t out[T];
  int outl;
  const int32_t *pp[1] = {seq};
  int plen = 4;
  CHECK(nn_generate(&m, pp, &plen, 1, &o, 0, out, &outl, &st));
  CHECK_EQ(outl, T + 1 - 4);
  for (int i = 0; i < outl; i++) CHECK_EQ(out[i], seq[4 + i]);
  /* top-k 1 at any temperature is the same */
  o.temperature = 0.7f;
  o.top_k = 1;
  int32_t out2[T];
  CHECK(nn_generate(&m, pp, &plen, 1, &o, 99, out2, &outl, &st));
  CHECK(memcmp(out, out2, sizeof(int32_t) * (size_t)outl) == 0);
  nn_model_free(&m);
}

/* The one generation entry: on the CPU it draws what the reference
 * sampler draws; a device this machine lacks is refused up front, saying
 * why, with no generator made. */
DG_TEST(sample_generator_one_entry) {
  dg_status st;
  dg_status_ok(&st);
  nn_model m;
  CHECK(random_model(&m, false, &st));
  int32_t p0[3] = {1, 2, 3}, p1[2] = {4, 5};
  const int32_t *prompts[2] = {p0, p1};
  int lens[2] = {3, 2}, la[2], lb[2];
  nn_sample_opts o;
  nn_sample_opts_default(&o);
  o.max_tokens = 10;
  o.temperature = 0.8f;
  int32_t a[2 * 10], b[2 * 10];
  train_generator *g = NULL;
  CHECK_MSG(train_generator_new(&m, TRAIN_DEVICE_CPU, &g, &st), "%s", st.msg);
  CHECK(train_generate(g, prompts, lens, 2, &o, 9, a, la, &st));
  CHECK(nn_generate(&m, prompts, lens, 2, &o, 9, b, lb, &st));
  CHECK(la[0] == lb[0] && la[1] == lb[1]);
  CHECK(memcmp(a, b, sizeof(int32_t) * (size_t)la[0]) == 0);
  CHECK(memcmp(a + 10, b + 10, sizeof(int32_t) * (size_t)la[1]) == 0);
  /* another seed draws other tokens (the seed reaches the sampler) */
  CHECK(train_generate(g, prompts, lens, 2, &o, 10, b, lb, &st));
  CHECK(memcmp(a, b, sizeof(int32_t) * 10) != 0 || memcmp(a + 10, b + 10, sizeof(int32_t) * 10) != 0);
  train_generator_free(g);
  dg_status why;
  if (!train_device_available(TRAIN_DEVICE_CUDA, &why)) {
    train_generator *none = (train_generator *)&why;
    CHECK(!train_generator_new(&m, TRAIN_DEVICE_CUDA, &none, &st));
    CHECK(none == NULL);
    CHECK(strstr(st.msg, "cuda"));
  }
  nn_model_free(&m);
}
