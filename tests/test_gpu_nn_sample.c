/* test_gpu_nn_sample.c: KV-cache generation on the GPU (nn_cuda.h,
 * src/nn_cuda/decode.cu) against the C reference's (src/nn/sample.c).
 *
 * CPU tier (any build): the sampling rule the GPU runs (sample_rule.h:
 * ranking keys, top-k, top-p, the draw) gives nn_sample_token's token for
 * the same logits and the same uniform draw; `sample-model --device`
 * rejects unknown devices and says why cuda cannot be used here.
 *
 * GPU tier (gpu_nn_sample_*, skipped without a GPU):
 * - logits: prompts of different lengths (1 to 90 tokens, padded together
 *   in one prefill, and again in many small prefill groups), then 19 steps
 *   fed the C reference's greedy tokens; every step's logits of every row
 *   against nn_kv_cache's, with the training forward's logits tolerance
 *   (docs/model-cuda.md): |gpu - c| <= 0.02 max|c| + 0.079 |c| and
 *   relative L2 <= 0.02. Four configs: head dims 16, 32, 64, 128; GQA,
 *   plain heads, and 12 query heads on one kv head (two head groups in
 *   the decode attention kernel).
 * - greedy tokens: nn_cuda_generate at temperature 0 equals the C
 *   reference's greedy tokens in every row up to the first step where
 *   bf16 tips a near-tie; there the GPU's token must be the argmax of the
 *   GPU's own teacher-forced logits at that step (same prefix, so the same
 *   arithmetic), and the C reference's top-2 margin at most twice the
 *   largest logit difference there; the row is not compared after it.
 *   top-k 1 at temperature 0.7 (the sort path) gives the same tokens as
 *   temperature 0 (the argmax path).
 * - limits: lengths at max_tokens and at max_seq_len equal the C
 *   reference's; a stop token truncates each row exactly where the run
 *   without it emitted it; seeded sampling is reproducible.
 * - draws: the device sampler and nn_sample_token on the same logits with
 *   the same uniform draws pick the same tokens, for greedy, temperature,
 *   top-k, top-p and their mixes, with V 8192 over 300 rows (two sort
 *   chunks).
 * - bad input: messages for empty prompts, bad ids, too many rows, full
 *   rows, steps before a prefill.
 *
 * V vocab, S steps.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "dragon/nn.h"
#include "dragon/train.h"
#include "nn_cuda/sample_rule.h"
#include "nn_cuda_support.h"
#include "test.h"
#ifdef DG_HAVE_CUDA
#include "dragon/nn_cuda.h"
#endif

/* ---- the sampling rule, on the CPU --------------------------------------- */

static int key_desc(const void *a, const void *b) {
  uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
  return x > y ? -1 : x < y;
}

DG_TEST(sample_gpu_rule_matches_cpu) {
  enum { V = 300 };
  float logits[V];
  dg_rng r;
  dg_rng_seed(&r, 11);
  for (int j = 0; j < V; j++) logits[j] = (float)(2.0 * dg_rng_normal(&r));
  for (int j = 11; j < V; j += 11) logits[j] = logits[j - 7]; /* ties, ranked by id */
  logits[5] = -0.0f;
  logits[6] = 0.0f; /* -0 and +0 compare equal: ranked by id too */
  /* the keys decode back, and their order is the reference's ranking */
  for (int j = 0; j < V; j++) {
    uint64_t k = nc_sample_key(logits[j], j);
    CHECK(nc_sample_key_id(k) == j);
    CHECK(nc_sample_key_z(k) == logits[j]);
  }
  const struct {
    float temperature;
    int top_k;
    float top_p;
  } opts[] = {{1.0f, 0, 1.0f},   {0.7f, 5, 1.0f},   {1.3f, 0, 0.9f},  {1.0f, 50, 0.5f},
              {1.0f, 1, 1.0f},   {0.5f, V, 1.0f},   {2.0f, 0, 1e-6f}, {1.0f, 400, 0.99f},
              {0.25f, 3, 0.7f}, {1.0f, 0, 0.3f}};
  uint64_t keys[V];
  double e[V];
  int tested = 0, distinct = 0;
  for (size_t oi = 0; oi < DG_ARRAY_LEN(opts); oi++) {
    nn_sample_opts o;
    nn_sample_opts_default(&o);
    o.temperature = opts[oi].temperature;
    o.top_k = opts[oi].top_k;
    o.top_p = opts[oi].top_p;
    for (int j = 0; j < V; j++) keys[j] = nc_sample_key(logits[j] / o.temperature, j);
    qsort(keys, V, sizeof keys[0], key_desc);
    for (int j = 1; j < V; j++) /* the reference's order: z descending, then id ascending */
      CHECK(nc_sample_key_z(keys[j - 1]) > nc_sample_key_z(keys[j]) ||
            (nc_sample_key_z(keys[j - 1]) == nc_sample_key_z(keys[j]) &&
             nc_sample_key_id(keys[j - 1]) < nc_sample_key_id(keys[j])));
    int kmax = nc_sample_kept_max(V, o.top_k);
    for (int j = 0; j < kmax; j++)
      e[j] = exp((double)nc_sample_key_z(keys[j]) - (double)nc_sample_key_z(keys[0]));
    int32_t seen[8] = {-1, -1, -1, -1, -1, -1, -1, -1};
    int nseen = 0;
    dg_rng rr;
    dg_rng_seed(&rr, 100 + oi);
    for (int draw = 0; draw < 60; draw++) {
      dg_rng copy = rr;
      int32_t want = nn_sample_token(logits, V, &o, &rr);
      double u = dg_rng_uniform(&copy);
      CHECK(memcmp(&copy, &rr, sizeof copy) == 0); /* one draw per token, as assumed */
      int32_t got = nc_sample_pick(keys, NULL, V, o.top_k, o.top_p, u);
      int32_t got_e = nc_sample_pick(keys, e, V, o.top_k, o.top_p, u);
      CHECK_MSG(got == want && got_e == want,
                "options %zu draw %d (u %.17g): rule %d / %d, nn_sample_token %d", oi, draw, u,
                (int)got, (int)got_e, (int)want);
      tested++;
      bool known = false;
      for (int k = 0; k < nseen; k++) known |= seen[k] == got;
      if (!known && nseen < 8) seen[nseen++] = got, distinct++;
    }
  }
  printf("  %d draws over %zu option sets agree; %d distinct tokens seen\n", tested,
         DG_ARRAY_LEN(opts), distinct);
  CHECK(distinct > 20); /* the draws were not all the same token */
}

DG_TEST(sample_device_option) {
  char *out = NULL;
  CHECK_EQ(dg_test_run_dragon("sample-model --ckpt x --prompt y --device tpu", NULL, &out), 2);
  CHECK(strstr(out, "'tpu' is not a device"));
  free(out);
  dg_status st;
  dg_status_ok(&st);
  bool gpu = train_device_available(TRAIN_DEVICE_CUDA, &st);
  char args[512];
  snprintf(args, sizeof args, "sample-model --ckpt %s/nothing --prompt y --device cuda", dg_test_tmpdir());
  CHECK_EQ(dg_test_run_dragon(args, NULL, &out), 1);
  if (gpu) {
    CHECK_MSG(!strstr(out, "--device cuda"), "%s", out); /* on to the missing checkpoint */
  } else {
    printf("  no GPU here: %s\n", st.msg);
    CHECK_MSG(strstr(out, "--device cuda: "), "%s", out);
#ifndef DG_HAVE_CUDA
    CHECK(strstr(out, "built without CUDA"));
#endif
  }
  free(out);
}

/* ---- on the GPU ------------------------------------------------------------ */

#ifdef DG_HAVE_CUDA

/* The training forward's logits tolerance (docs/model-cuda.md). */
static const nt_tolerance LOGITS_TOL = {0.02, NT_BF16_REL, 0.02};

static nn_config small_config(int V, int C, int L, int NH, int NKV, int HD, int F, int maxT) {
  nn_config c;
  memset(&c, 0, sizeof c);
  c.vocab_size = V, c.d_model = C, c.n_layers = L, c.n_heads = NH, c.n_kv_heads = NKV;
  c.head_dim = HD, c.ffn_hidden = F, c.max_seq_len = maxT, c.rope_theta = 10000.0f;
  c.norm_eps = 1e-6f;
  return c;
}

/* The reference's initial weights with wq, wk x4 (attention far from
 * uniform, as test_nn_cuda.c) and wlm x8 (logits of a few units, so that
 * greedy choices are mostly clear). */
static bool make_model(nn_model *m, const nn_config *cfg, uint64_t seed) {
  dg_status st;
  if (!nn_model_init(m, cfg, false, &st)) {
    dg_test_fail(__FILE__, __LINE__, "C model: %s", st.msg);
    return false;
  }
  nn_model_init_weights(m, seed);
  for (size_t i = 0; i < m->param_sizes[NN_PARAM_WQ]; i++) m->params.wq[i] *= 4.0f;
  for (size_t i = 0; i < m->param_sizes[NN_PARAM_WK]; i++) m->params.wk[i] *= 4.0f;
  for (size_t i = 0; i < m->param_sizes[NN_PARAM_WLM]; i++) m->params.wlm[i] *= 8.0f;
  return true;
}

static nn_cuda_model *to_gpu(const nn_model *ref) {
  dg_status st;
  nn_cuda_model *g = NULL;
  if (!nn_cuda_model_init(&g, &ref->cfg, 1, 1, &st) || !nn_cuda_model_load(g, ref, false, &st)) {
    dg_test_fail(__FILE__, __LINE__, "CUDA model: %s", st.msg);
    nn_cuda_model_free(g);
    return NULL;
  }
  return g;
}

/* n prompts of the given lengths, random ids */
static int32_t **make_prompts(const int *lens, int n, int V, uint64_t seed) {
  dg_rng r;
  dg_rng_seed(&r, seed);
  int32_t **p = malloc(sizeof(int32_t *) * (size_t)n);
  for (int i = 0; i < n; i++) {
    p[i] = malloc(sizeof(int32_t) * (size_t)lens[i]);
    for (int j = 0; j < lens[i]; j++) p[i][j] = (int32_t)dg_rng_below(&r, (uint64_t)V);
  }
  return p;
}

static void free_prompts(int32_t **p, int n) {
  for (int i = 0; p && i < n; i++) free(p[i]);
  free(p);
}

static int32_t argmax(const float *z, int V) {
  int32_t best = 0;
  for (int32_t j = 1; j < V; j++)
    if (z[j] > z[best]) best = j;
  return best;
}

/* GPU logits (n, S, V): prefill, then S - 1 steps fed tokens (n, S). */
static bool gpu_teacher_forced(nn_cuda_model *g, int32_t *const *prompts, const int *lens, int n,
                               int T, const int32_t *tokens, int S, int prefill_tokens,
                               float *logits, dg_status *st) {
  int V = nn_cuda_model_config(g)->vocab_size;
  nn_cuda_kv *c = NULL;
  float *row = malloc(sizeof(float) * (size_t)n * V);
  int32_t *feed = malloc(sizeof(int32_t) * (size_t)n);
  bool ok = nn_cuda_kv_init(&c, g, n, T, st);
  if (ok && prefill_tokens > 0) nn_cuda_kv_set_prefill_tokens(c, prefill_tokens);
  ok = ok && nn_cuda_kv_prefill(c, (const int32_t *const *)prompts, lens, n, st);
  for (int s = 0; ok && s < S; s++) {
    if (s > 0) {
      for (int b = 0; b < n; b++) feed[b] = tokens[(size_t)b * S + s - 1];
      ok = nn_cuda_kv_step(c, feed, NULL, st);
    }
    for (int b = 0; ok && b < n; b++)
      if (nn_cuda_kv_pos(c, b) != lens[b] + s)
        ok = dg_fail(st, DG_ERR_INVALID, "row %d at position %d after %d steps, expected %d", b,
                     nn_cuda_kv_pos(c, b), s, lens[b] + s);
    ok = ok && nn_cuda_kv_logits(c, row, st);
    for (int b = 0; ok && b < n; b++)
      memcpy(logits + ((size_t)b * S + s) * V, row + (size_t)b * V, sizeof(float) * (size_t)V);
  }
  nn_cuda_kv_free(c);
  free(row);
  free(feed);
  return ok;
}

enum { GS = 20, GN = 6 }; /* steps and rows of the greedy test */

/* One config: teacher-forced logits, then greedy tokens. */
static void greedy_case(const char *name, nn_config cfg) {
  static const int lens[GN] = {1, 5, 17, 64, 65, 90};
  int V = cfg.vocab_size, longest = 90, T = longest + GS;
  printf("  -- %s: V %d C %d L %d heads %d/%d HD %d F %d\n", name, V, cfg.d_model, cfg.n_layers,
         cfg.n_heads, cfg.n_kv_heads, cfg.head_dim, cfg.ffn_hidden);
  nn_model ref;
  if (!make_model(&ref, &cfg, 1234)) return;
  nn_cuda_model *g = to_gpu(&ref);
  int32_t **prompts = make_prompts(lens, GN, V, 77);
  size_t NSV = (size_t)GN * GS * V;
  float *lc = malloc(sizeof(float) * NSV), *lg = malloc(sizeof(float) * NSV);
  float *lg2 = malloc(sizeof(float) * NSV);
  int32_t *tc = malloc(sizeof(int32_t) * GN * GS), *tg = malloc(sizeof(int32_t) * GN * GS);
  int32_t *tk = malloc(sizeof(int32_t) * GN * GS), *tref = malloc(sizeof(int32_t) * GN * GS);
  int lens_g[GN], lens_k[GN], lens_ref[GN], flips = 0;
  nn_kv_cache kv;
  memset(&kv, 0, sizeof kv);
  if (!g) goto done;

  /* the C reference: logits at every step along its greedy tokens */
  {
    dg_status st;
    CHECK(nn_kv_init(&kv, &ref, GN, T, &st));
    for (int b = 0; b < GN; b++) {
      nn_kv_feed(&kv, b, prompts[b], lens[b]);
      for (int s = 0; s < GS; s++) {
        const float *z = nn_kv_logits(&kv, b);
        memcpy(lc + ((size_t)b * GS + s) * V, z, sizeof(float) * (size_t)V);
        tc[b * GS + s] = argmax(z, V);
        if (s + 1 < GS) nn_kv_feed(&kv, b, &tc[b * GS + s], 1);
      }
    }
  }
  nn_sample_opts o;
  nn_sample_opts_default(&o);
  o.temperature = 0;
  o.max_tokens = GS;
  CHECK_GPU(nn_generate(&ref, (const int32_t *const *)prompts, lens, GN, &o, 1, tref, lens_ref, ST));
  for (int b = 0; b < GN; b++) {
    CHECK(lens_ref[b] == GS);
    CHECK(memcmp(tref + b * GS, tc + b * GS, sizeof(int32_t) * GS) == 0); /* nn_generate agrees */
  }

  /* GPU logits along the same tokens: one prefill group, then groups of at
   * most 96 tokens (several groups, one row alone) */
  CHECK_GPU(gpu_teacher_forced(g, prompts, lens, GN, T, tc, GS, 0, lg, ST));
  if (!nt_compare("logits", lg, lc, NSV, LOGITS_TOL)) goto done;
  CHECK_GPU(gpu_teacher_forced(g, prompts, lens, GN, T, tc, GS, 96, lg2, ST));
  if (!nt_compare("logits/96", lg2, lc, NSV, LOGITS_TOL)) goto done;

  /* greedy generation: argmax path, and top-k 1 through the sort path */
  CHECK_GPU(nn_cuda_generate(g, (const int32_t *const *)prompts, lens, GN, &o, 1, tg, lens_g, NULL, ST));
  o.temperature = 0.7f;
  o.top_k = 1;
  CHECK_GPU(nn_cuda_generate(g, (const int32_t *const *)prompts, lens, GN, &o, 1, tk, lens_k, NULL, ST));
  for (int b = 0; b < GN; b++) {
    CHECK_EQ(lens_g[b], GS);
    CHECK_EQ(lens_k[b], GS);
    CHECK_MSG(memcmp(tg + b * GS, tk + b * GS, sizeof(int32_t) * GS) == 0,
              "row %d: top-k 1 differs from greedy", b);
    for (int s = 0; s < GS; s++) {
      if (tg[b * GS + s] == tc[b * GS + s]) continue;
      const float *zg = lg + ((size_t)b * GS + s) * V, *zc = lc + ((size_t)b * GS + s) * V;
      int32_t gt = tg[b * GS + s], ct = tc[b * GS + s];
      double err = 0;
      for (int j = 0; j < V; j++) err = fmax(err, fabs((double)zg[j] - zc[j]));
      double margin = (double)zc[ct] - zc[gt];
      printf("  row %d step %d: near-tie: gpu %d, c %d, c margin %.4f, largest logit diff %.4f\n",
             b, s, (int)gt, (int)ct, margin, err);
      CHECK_MSG(gt == argmax(zg, V), "row %d step %d: generated %d but the teacher-forced "
                "logits' argmax is %d", b, s, (int)gt, (int)argmax(zg, V));
      CHECK_MSG(margin <= 2 * err, "row %d step %d: c margin %.4f beyond 2 x %.4f", b, s, margin, err);
      flips++;
      break; /* the sequences differ from here on */
    }
  }
  printf("  greedy: %d rows x %d tokens, %d row(s) tipped at a near-tie\n", GN, GS, flips);
done:
  nn_kv_free(&kv);
  nn_cuda_model_free(g);
  nn_model_free(&ref);
  free_prompts(prompts, GN);
  free(lc);
  free(lg);
  free(lg2);
  free(tc);
  free(tg);
  free(tk);
  free(tref);
}

#endif /* DG_HAVE_CUDA */

#ifndef DG_HAVE_CUDA
static void no_cuda_note(void) { dg_test_skip("built without CUDA (no nvcc)"); }
#endif

DG_TEST(gpu_nn_sample_greedy_matches_cpu) {
#ifdef DG_HAVE_CUDA
  if (!nt_gpu_here()) return;
  greedy_case("tiny-gqa", small_config(256, 64, 2, 4, 2, 16, 128, 128));
  greedy_case("gqa-hd64", small_config(384, 128, 2, 4, 2, 64, 352, 160));
  greedy_case("mha-hd32", small_config(200, 96, 1, 4, 4, 32, 200, 128));
  greedy_case("g12-hd128", small_config(256, 128, 1, 12, 1, 128, 256, 128));
#else
  no_cuda_note();
#endif
}

#ifdef DG_HAVE_CUDA
/* out (n, max) truncated at the first stop token: what a run with that
 * stop token must give */
static void truncate_at(const int32_t *out, const int *lens, int n, int max, int32_t stop,
                        int *want_lens) {
  for (int b = 0; b < n; b++) {
    want_lens[b] = lens[b];
    for (int j = 0; j < lens[b]; j++)
      if (out[(size_t)b * max + j] == stop) {
        want_lens[b] = j;
        break;
      }
  }
}
#endif

DG_TEST(gpu_nn_sample_stops_and_limits) {
#ifdef DG_HAVE_CUDA
  if (!nt_gpu_here()) return;
  enum { N = 5, MAXT = 40 };
  static const int lens[N] = {3, 10, 40, 90, 100};
  nn_config cfg = small_config(256, 64, 2, 4, 2, 16, 128, 128);
  nn_model ref;
  if (!make_model(&ref, &cfg, 99)) return;
  nn_cuda_model *g = to_gpu(&ref);
  int32_t **prompts = make_prompts(lens, N, cfg.vocab_size, 5);
  const int32_t *const *pp = (const int32_t *const *)prompts;
  int32_t out_c[N * MAXT], out_g[N * MAXT], out_s[N * MAXT], out_a[N * MAXT], out_b[N * MAXT];
  int lc[N], lg[N], ls[N], lw[N], la[N], lb[N];
  nn_sample_opts o;
  nn_sample_opts_default(&o);
  o.temperature = 0;
  o.max_tokens = MAXT;
  if (!g) goto done;
  /* max_tokens and max_seq_len: 100 + 40 > 128, so the longest rows stop
   * when the cache is full (at 29 and 39 tokens) */
  CHECK_GPU(nn_generate(&ref, pp, lens, N, &o, 3, out_c, lc, ST));
  CHECK_GPU(nn_cuda_generate(g, pp, lens, N, &o, 3, out_g, lg, NULL, ST));
  for (int b = 0; b < N; b++) CHECK_EQ(lg[b], lc[b]);
  CHECK_EQ(lg[4], 128 - 100 + 1);
  CHECK_EQ(lg[3], 128 - 90 + 1);
  CHECK_EQ(lg[0], MAXT);
  /* a stop token: the token row 0 emitted at step 3 */
  o.stop_token = out_g[3];
  nn_cuda_gen_stats stats;
  CHECK_GPU(nn_cuda_generate(g, pp, lens, N, &o, 3, out_s, ls, &stats, ST));
  truncate_at(out_g, lg, N, MAXT, o.stop_token, lw);
  int stopped = 0;
  for (int b = 0; b < N; b++) {
    CHECK_MSG(ls[b] == lw[b], "row %d: %d tokens with stop token %d, expected %d", b, ls[b],
              (int)o.stop_token, lw[b]);
    CHECK(memcmp(out_s + b * MAXT, out_g + b * MAXT, sizeof(int32_t) * (size_t)ls[b]) == 0);
    stopped += lw[b] < lg[b];
  }
  CHECK(ls[0] <= 3); /* 3, or earlier where row 0 emitted it before */
  int64_t made = 0;
  for (int b = 0; b < N; b++) made += ls[b];
  CHECK_EQ(stats.new_tokens, made);
  CHECK_EQ(stats.prompt_tokens, 3 + 10 + 40 + 90 + 100);
  printf("  stop token %d ends %d of %d rows early; %lld tokens in %lld steps\n", (int)o.stop_token,
         stopped, N, (long long)stats.new_tokens, (long long)stats.steps);
  /* the C reference with the same stop token truncates its own run alike */
  CHECK_GPU(nn_generate(&ref, pp, lens, N, &o, 3, out_s, ls, ST));
  truncate_at(out_c, lc, N, MAXT, o.stop_token, lw);
  for (int b = 0; b < N; b++) CHECK_EQ(ls[b], lw[b]);
  /* seeded sampling: the same seed, the same samples */
  o.stop_token = -1;
  o.temperature = 0.9f;
  o.top_k = 20;
  o.top_p = 0.9f;
  CHECK_GPU(nn_cuda_generate(g, pp, lens, N, &o, 7, out_a, la, NULL, ST));
  CHECK_GPU(nn_cuda_generate(g, pp, lens, N, &o, 7, out_b, lb, NULL, ST));
  for (int b = 0; b < N; b++) {
    CHECK_EQ(la[b], lb[b]);
    CHECK(memcmp(out_a + b * MAXT, out_b + b * MAXT, sizeof(int32_t) * (size_t)la[b]) == 0);
    for (int j = 0; j < la[b]; j++) CHECK(out_a[b * MAXT + j] >= 0 && out_a[b * MAXT + j] < 256);
  }
  /* and the C reference's draws from the same seed, for the record */
  CHECK_GPU(nn_generate(&ref, pp, lens, N, &o, 7, out_b, lb, ST));
  for (int b = 0; b < N; b++) {
    int same = 0;
    while (same < la[b] && same < lb[b] && out_a[b * MAXT + same] == out_b[b * MAXT + same]) same++;
    printf("  sampled row %d: first %d of %d tokens as the C reference's\n", b, same, la[b]);
  }
done:
  nn_cuda_model_free(g);
  nn_model_free(&ref);
  free_prompts(prompts, N);
#else
  no_cuda_note();
#endif
}

DG_TEST(gpu_nn_sample_draws_match_rule) {
#ifdef DG_HAVE_CUDA
  if (!nt_gpu_here()) return;
  enum { N = 300, V = 8192 };
  nn_config cfg = small_config(V, 64, 1, 4, 2, 16, 64, 64);
  nn_model ref;
  if (!make_model(&ref, &cfg, 3)) return;
  nn_cuda_model *g = to_gpu(&ref);
  int lens[N];
  for (int b = 0; b < N; b++) lens[b] = 1 + b % 4;
  int32_t **prompts = make_prompts(lens, N, V, 8);
  float *logits = malloc(sizeof(float) * (size_t)N * V);
  double *u = malloc(sizeof(double) * N);
  int32_t *tok = malloc(sizeof(int32_t) * N), *want = malloc(sizeof(int32_t) * N);
  bool *on = malloc(sizeof(bool) * N);
  dg_rng *rng = malloc(sizeof(dg_rng) * N);
  nn_cuda_kv *c = NULL;
  const struct {
    float temperature;
    int top_k;
    float top_p;
  } opts[] = {{0.0f, 0, 1.0f}, {1.0f, 0, 1.0f},  {0.7f, 5, 1.0f},     {1.3f, 0, 0.9f},
              {1.0f, 50, 0.5f}, {1.0f, 1, 1.0f}, {2.0f, 0, 1e-6f},    {0.5f, V, 0.95f}};
  if (!g) goto done;
  CHECK_GPU(nn_cuda_kv_init(&c, g, N, 8, ST));
  CHECK_GPU(nn_cuda_kv_prefill(c, (const int32_t *const *)prompts, lens, N, ST));
  CHECK_GPU(nn_cuda_kv_logits(c, logits, ST));
  for (int b = 0; b < N; b++) dg_rng_seed(&rng[b], 1000 + (uint64_t)b);
  for (size_t oi = 0; oi < DG_ARRAY_LEN(opts); oi++) {
    nn_sample_opts o;
    nn_sample_opts_default(&o);
    o.temperature = opts[oi].temperature;
    o.top_k = opts[oi].top_k;
    o.top_p = opts[oi].top_p;
    for (int rep = 0; rep < 2; rep++) {
      for (int b = 0; b < N; b++) {
        on[b] = (b + rep) % 7 != 0; /* some rows are not sampled */
        dg_rng copy = rng[b];
        u[b] = o.temperature > 0 ? dg_rng_uniform(&copy) : -1.0;
        want[b] = nn_sample_token(logits + (size_t)b * V, V, &o, &rng[b]);
      }
      CHECK_GPU(nn_cuda_kv_sample(c, &o, u, on, tok, ST));
      for (int b = 0; b < N; b++) {
        int32_t w = on[b] ? want[b] : -1;
        CHECK_MSG(tok[b] == w, "options %zu rep %d row %d: device %d, nn_sample_token %d (u %.17g)",
                  oi, rep, b, (int)tok[b], (int)w, u[b]);
      }
    }
  }
  printf("  %zu option sets x 2 draws x %d rows of V %d: device and nn_sample_token agree\n",
         DG_ARRAY_LEN(opts), N, V);
done:
  nn_cuda_kv_free(c);
  nn_cuda_model_free(g);
  nn_model_free(&ref);
  free_prompts(prompts, N);
  free(logits);
  free(u);
  free(tok);
  free(want);
  free(on);
  free(rng);
#else
  no_cuda_note();
#endif
}

DG_TEST(gpu_nn_sample_rejects_bad_input) {
#ifdef DG_HAVE_CUDA
  if (!nt_gpu_here()) return;
  nn_config cfg = small_config(256, 64, 1, 4, 2, 16, 64, 16);
  nn_model ref;
  if (!make_model(&ref, &cfg, 1)) return;
  nn_cuda_model *g = to_gpu(&ref);
  nn_cuda_kv *c = NULL;
  dg_status st;
  dg_status_ok(&st);
  int32_t p0[4] = {1, 2, 3, 4}, bad[2] = {5, 256}, tok[2] = {7, 8}, out[8];
  int out_lens[2];
  const int32_t *pp[3] = {p0, p0, bad};
  int lens[3] = {4, 0, 2};
  nn_sample_opts o;
  nn_sample_opts_default(&o);
  if (!g) goto done;
  CHECK(!nn_cuda_kv_init(&c, g, 2, 17, &st));
  CHECK_ERR(st, "17 positions is out of range [1, 16]");
  CHECK_GPU(nn_cuda_kv_init(&c, g, 2, 6, ST));
  CHECK(!nn_cuda_kv_step(c, tok, NULL, &st));
  CHECK_ERR(st, "no prefill yet");
  {
    int row = 0;
    CHECK(!nn_cuda_kv_refill(c, &row, pp, lens, 1, &st));
    CHECK_ERR(st, "CUDA refill: no prefill yet");
  }
  CHECK(!nn_cuda_kv_prefill(c, pp, lens, 3, &st));
  CHECK_ERR(st, "3 rows, the cache holds 2");
  CHECK(!nn_cuda_kv_prefill(c, pp, lens, 2, &st));
  CHECK_ERR(st, "prompt 1 has 0 tokens");
  CHECK(!nn_cuda_kv_prefill(c, pp + 1, lens + 1, 2, &st) && strstr(st.msg, "prompt 0 has 0"));
  lens[1] = 4;
  lens[2] = 2;
  CHECK(!nn_cuda_kv_prefill(c, pp + 1, lens + 1, 2, &st));
  CHECK_ERR(st, "prompt 1 token 1 = 256 is outside the vocabulary");
  CHECK_GPU(nn_cuda_kv_prefill(c, pp, lens, 2, ST));
  {
    /* a refill: rows of the last prefill only, each once, prompts that fit */
    int rows[2] = {2, 0}, two[2] = {1, 1}, rl[2] = {4, 4};
    const int32_t *rp[2] = {p0, p0};
    CHECK(!nn_cuda_kv_refill(c, rows, rp, rl, 1, &st));
    CHECK_ERR(st, "prompt 0's row 2 is outside [0, 2)");
    CHECK(!nn_cuda_kv_refill(c, two, rp, rl, 2, &st));
    CHECK_ERR(st, "prompts 0 and 1 share row 1");
    rl[0] = 7;
    CHECK(!nn_cuda_kv_refill(c, two, rp, rl, 1, &st));
    CHECK_ERR(st, "prompt 0 has 7 tokens, outside [1, 6]");
    rp[0] = bad;
    rl[0] = 2;
    CHECK(!nn_cuda_kv_refill(c, two, rp, rl, 1, &st));
    CHECK_ERR(st, "prompt 0 token 1 = 256 is outside the vocabulary");
    /* a refused refill changed nothing; a good one restarts its row only */
    CHECK_EQ(nn_cuda_kv_pos(c, 0), 4);
    CHECK_EQ(nn_cuda_kv_pos(c, 1), 4);
    rp[0] = p0;
    rl[0] = 3;
    CHECK_GPU(nn_cuda_kv_refill(c, two, rp, rl, 1, ST));
    CHECK_EQ(nn_cuda_kv_pos(c, 0), 4);
    CHECK_EQ(nn_cuda_kv_pos(c, 1), 3);
    rl[0] = 4;
    CHECK_GPU(nn_cuda_kv_refill(c, two, rp, rl, 1, ST));
    CHECK_EQ(nn_cuda_kv_pos(c, 1), 4);
  }
  CHECK_GPU(nn_cuda_kv_step(c, tok, NULL, ST));
  CHECK_GPU(nn_cuda_kv_step(c, tok, NULL, ST)); /* 6 positions: full */
  CHECK(!nn_cuda_kv_step(c, tok, NULL, &st));
  CHECK_ERR(st, "row 0 is full (6 positions)");
  tok[1] = -3;
  {
    bool on[2] = {true, true};
    on[0] = false;
    CHECK(!nn_cuda_kv_step(c, tok, on, &st));
    CHECK_ERR(st, "row 1 token -3 is outside the vocabulary");
  }
  {
    double u[2] = {0.5, 1.0};
    o.temperature = 1.0f;
    CHECK(!nn_cuda_kv_sample(c, &o, u, NULL, tok, &st));
    CHECK_ERR(st, "row 1 draw 1 is outside [0, 1)");
  }
  o.max_tokens = 0;
  CHECK(!nn_cuda_generate(g, pp, lens, 1, &o, 1, out, out_lens, NULL, &st));
  CHECK_ERR(st, "max_tokens must be >= 1");
  o.max_tokens = 4;
  CHECK(!nn_cuda_generate(g, pp + 2, lens + 2, 1, &o, 1, out, out_lens, NULL, &st));
  CHECK_ERR(st, "prompt 0 token 1 = 256 is outside the vocabulary");
done:
  nn_cuda_kv_free(c);
  nn_cuda_model_free(g);
  nn_model_free(&ref);
#else
  no_cuda_note();
#endif
}
