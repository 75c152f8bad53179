/* test_nn.c: the model's C reference: known values of single layers, the
 * gradient check against a double-precision reference forward by central
 * differences, overfitting a tiny model, optimizer schedule, checkpoints
 * (exact resume, corrupt and truncated files) and safetensors round trips.
 *
 * B batch, T time, C d_model, V vocab, L layers, HD head dim.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "dragon/nn.h"
#include "dragon/tokenizer.h"
#include "test.h"

/* ---- known values -------------------------------------------------------- */

DG_TEST(nn_rmsnorm_known) {
  float x[4] = {1, 2, 3, 4}, w[4] = {1, 0.5f, 2, -1}, y[4], rstd;
  /* mean(x^2) = 7.5; + eps 0.5 = 8; rstd = 1/sqrt(8) */
  nn_rmsnorm_forward(y, &rstd, x, w, 1, 4, 0.5f);
  CHECK_NEAR(rstd, 0.35355339, 1e-7);
  CHECK_NEAR(y[0], 0.35355339, 1e-6);
  CHECK_NEAR(y[1], 0.35355339, 1e-6);
  CHECK_NEAR(y[2], 2.12132034, 1e-6);
  CHECK_NEAR(y[3], -1.41421356, 1e-6);
}

DG_TEST(nn_rope_known) {
  /* HD 4, theta 100: freq 1 and 0.1; at position 2 the pairs (x0, x2) and
   * (x1, x3) turn by 2 and 0.2 radians. */
  float cosb[3 * 2], sinb[3 * 2];
  nn_rope_table(cosb, sinb, 100.0f, 4, 3);
  CHECK_NEAR(cosb[0], 1.0, 0);
  CHECK_NEAR(sinb[2 * 2 + 1], 0.19866933, 1e-7);
  float x[3 * 4] = {1, 2, 3, 4, 1, 2, 3, 4, 1, 2, 3, 4};
  nn_rope_rotate(x, cosb, sinb, 1, 3, 1, 4, 1.0f);
  for (int i = 0; i < 4; i++) CHECK_NEAR(x[i], (float)(i + 1), 0); /* position 0 */
  float *y = x + 8;
  CHECK_NEAR(y[0], -3.14403912, 1e-6);
  CHECK_NEAR(y[1], 1.16545583, 1e-6);
  CHECK_NEAR(y[2], -0.33914308, 1e-6);
  CHECK_NEAR(y[3], 4.31760497, 1e-6);
  nn_rope_rotate(x, cosb, sinb, 1, 3, 1, 4, -1.0f);
  for (int i = 0; i < 12; i++) CHECK_NEAR(x[i], (float)(i % 4 + 1), 1e-6);
}

DG_TEST(nn_attention_known) {
  /* T 2, HD 2, two query heads sharing one kv head (GQA). Head 0 at t=1:
   * scores (0, 2/sqrt 2), p = (0.1955703, 0.8044297); head 1 has q = 0 and
   * so averages v. */
  float q[2 * 2 * 2] = {1, 0, 5, 5, /* t0: h0, h1 */ 0, 1, 0, 0 /* t1 */};
  float k[2 * 2] = {1, 0, 0, 2}, v[2 * 2] = {1, 2, 3, -1};
  float out[2 * 2 * 2], att[2 * 2 * 2];
  nn_attention_forward(out, att, q, k, v, 1, 2, 2, 1, 2);
  CHECK_NEAR(out[0], 1, 1e-6); /* t0 sees only itself */
  CHECK_NEAR(out[1], 2, 1e-6);
  CHECK_NEAR(out[2], 1, 1e-6);
  CHECK_NEAR(out[3], 2, 1e-6);
  CHECK_NEAR(att[0 * 4 + 1 * 2 + 0], 0.1955703, 1e-6);
  CHECK_NEAR(att[0 * 4 + 1 * 2 + 1], 0.8044297, 1e-6);
  CHECK_NEAR(att[0 * 4 + 0 * 2 + 1], 0, 0); /* causal mask */
  CHECK_NEAR(out[4], 2.6088594, 1e-5);
  CHECK_NEAR(out[5], -0.4132891, 1e-5);
  CHECK_NEAR(out[6], 2.0, 1e-6);
  CHECK_NEAR(out[7], 0.5, 1e-6);
}

/* ---- configs ------------------------------------------------------------- */

DG_TEST(nn_config_named_counts) {
  dg_status st;
  dg_status_ok(&st);
  nn_config c;
  CHECK(nn_config_named("tiny", &c, &st));
  CHECK_EQ(nn_config_param_count(&c), 106816);
  /* the anchors of torch_llama_train.py, counted like sum(p.numel()) */
  CHECK(nn_config_named("19m", &c, &st));
  CHECK_EQ(nn_config_param_count(&c), 18880896);
  CHECK(nn_config_named("88M", &c, &st));
  CHECK_EQ(nn_config_param_count(&c), 88099584);
  CHECK_EQ(c.n_kv_heads, 4);
  CHECK(!nn_config_named("huge", &c, &st));
  CHECK_ERR(st, "'huge'");
}

DG_TEST(nn_config_parse_print) {
  dg_status st;
  dg_status_ok(&st);
  nn_config c, d;
  CHECK(nn_config_parse("# small\nvocab_size = 100\nd_model=32\nn_layers = 3\nn_heads=4\n"
                        "n_kv_heads = 2\nffn_hidden = 64\nmax_seq_len = 16\nrope_theta = 500000\n",
                        "a.cfg", &c, &st));
  CHECK_OK(st);
  CHECK_EQ(c.head_dim, 8);
  CHECK_NEAR(c.norm_eps, 1e-6, 1e-12);
  CHECK_NEAR(c.rope_theta, 500000, 0);
  dg_str s;
  dg_str_init(&s);
  nn_config_print(&c, &s);
  CHECK(nn_config_parse(s.s, "printed", &d, &st));
  dg_str_free(&s);
  CHECK(memcmp(&c, &d, sizeof c) == 0);
  CHECK(nn_config_parse("base = tiny\nn_layers = 5\n", "b.cfg", &d, &st));
  CHECK_EQ(d.n_layers, 5);
  CHECK_EQ(d.d_model, 64);

  CHECK(!nn_config_parse("base = tiny\nn_heads = 3\n", "c.cfg", &d, &st));
  CHECK_ERR(st, "n_heads = 3 is not a multiple of n_kv_heads = 2");
  CHECK(!nn_config_parse("base = tiny\nhead_dim = 7\n", "c.cfg", &d, &st));
  CHECK_ERR(st, "head_dim = 7 must be even");
  CHECK(!nn_config_parse("vocab_size = 10\n", "d.cfg", &d, &st));
  CHECK_ERR(st, "d.cfg: missing key 'd_model'");
  CHECK(!nn_config_parse("base = tiny\n\nwidth = 3\n", "e.cfg", &d, &st));
  CHECK_ERR(st, "e.cfg:3: unknown key 'width'");
  CHECK(!nn_config_parse("base = tiny\nd_model = 0\n", "f.cfg", &d, &st));
  CHECK_ERR(st, "f.cfg:2: d_model: 0 is out of range");
  CHECK(!nn_config_parse("base = tiny\nnorm_eps = -1\n", "g.cfg", &d, &st));
  CHECK_ERR(st, "g.cfg:2: norm_eps");
  CHECK(!nn_config_parse("n_layers = 2\nbase = tiny\n", "h.cfg", &d, &st));
  CHECK_ERR(st, "h.cfg:2: 'base' must come before");
  CHECK(!nn_config_parse("base = tiny\nn_layers = 2\nn_layers = 3\n", "i.cfg", &d, &st));
  CHECK_ERR(st, "i.cfg:3: n_layers: given twice");
  CHECK(!nn_config_parse("base = tiny\nrope_theta 3\n", "j.cfg", &d, &st));
  CHECK_ERR(st, "j.cfg:2: expected 'key = value'");
}

DG_TEST(nn_config_too_big) {
  dg_status st;
  dg_status_ok(&st);
  nn_config c;
  CHECK(nn_config_named("tiny", &c, &st));
  c.vocab_size = 1 << 24;
  c.d_model = 1 << 16; /* 2^40 parameters per embedding: terabytes */
  nn_model m;
  memset(&m, 0x5a, sizeof m);
  unsigned char before[sizeof m];
  memcpy(before, &m, sizeof m);
  CHECK(!nn_model_init(&m, &c, true, &st));
  CHECK_ERR(st, "more than this machine's");
  CHECK(memcmp(before, &m, sizeof m) == 0);
  /* activations are checked too */
  CHECK(nn_config_named("tiny", &c, &st));
  c.max_seq_len = 1 << 16;
  CHECK(nn_model_init(&m, &c, false, &st));
  CHECK(!nn_model_reserve(&m, 1 << 20, 1 << 16, &st));
  CHECK_ERR(st, "parameters and activations need");
  CHECK(!nn_model_reserve(&m, 1, (1 << 16) + 1, &st));
  CHECK_ERR(st, "sequence length");
  nn_model_free(&m);
}

/* ---- a double-precision reference forward -------------------------------- */

/* Written independently of model.c, straight from the formulas, in double;
 * parameters in the model's layout. Returns sum(w * nll) / norm. */
static double ref_loss(const nn_config *c, const size_t *sizes, const double *P, const int32_t *in,
                       const int32_t *tg, const float *wt, double norm, int B, int T) {
  const double *t[NN_PARAM_COUNT];
  size_t off = 0;
  for (int i = 0; i < NN_PARAM_COUNT; i++) {
    t[i] = P + off;
    off += sizes[i];
  }
  int C = c->d_model, V = c->vocab_size, F = c->ffn_hidden, NH = c->n_heads, NKV = c->n_kv_heads;
  int HD = c->head_dim, QD = NH * HD, KVD = NKV * HD, G = NH / NKV;
  double *x = calloc((size_t)T * C, sizeof(double)), *n = calloc((size_t)T * C, sizeof(double));
  double *q = calloc((size_t)T * QD, sizeof(double)), *k = calloc((size_t)T * KVD, sizeof(double));
  double *v = calloc((size_t)T * KVD, sizeof(double)), *o = calloc((size_t)T * QD, sizeof(double));
  double *h = calloc((size_t)T * F, sizeof(double)), *z = calloc((size_t)V, sizeof(double));
  double total = 0;
  for (int b = 0; b < B; b++) {
    for (int s = 0; s < T; s++)
      for (int i = 0; i < C; i++) x[s * C + i] = t[NN_PARAM_WTE][(size_t)in[b * T + s] * C + i];
    for (int l = 0; l < c->n_layers; l++) {
      const double *ln1 = t[NN_PARAM_LN1W] + l * C, *ln2 = t[NN_PARAM_LN2W] + l * C;
      const double *wq = t[NN_PARAM_WQ] + (size_t)l * QD * C, *wk = t[NN_PARAM_WK] + (size_t)l * KVD * C;
      const double *wv = t[NN_PARAM_WV] + (size_t)l * KVD * C, *wo = t[NN_PARAM_WO] + (size_t)l * C * QD;
      const double *w1 = t[NN_PARAM_W1] + (size_t)l * F * C, *w3 = t[NN_PARAM_W3] + (size_t)l * F * C;
      const double *w2 = t[NN_PARAM_W2] + (size_t)l * C * F;
      for (int s = 0; s < T; s++) {
        double ss = 0;
        for (int i = 0; i < C; i++) ss += x[s * C + i] * x[s * C + i];
        double r = 1 / sqrt(ss / C + c->norm_eps);
        for (int i = 0; i < C; i++) n[s * C + i] = x[s * C + i] * r * ln1[i];
        for (int j = 0; j < QD; j++) {
          q[s * QD + j] = 0;
          for (int i = 0; i < C; i++) q[s * QD + j] += n[s * C + i] * wq[j * C + i];
        }
        for (int j = 0; j < KVD; j++) {
          k[s * KVD + j] = v[s * KVD + j] = 0;
          for (int i = 0; i < C; i++) {
            k[s * KVD + j] += n[s * C + i] * wk[j * C + i];
            v[s * KVD + j] += n[s * C + i] * wv[j * C + i];
          }
        }
        for (int hh = 0; hh < NH + NKV; hh++) { /* rotate-half RoPE on q and k heads */
          double *u = hh < NH ? q + s * QD + hh * HD : k + s * KVD + (hh - NH) * HD;
          for (int i = 0; i < HD / 2; i++) {
            double a = s * pow(c->rope_theta, -2.0 * i / HD), u1 = u[i], u2 = u[i + HD / 2];
            u[i] = u1 * cos(a) - u2 * sin(a);
            u[i + HD / 2] = u2 * cos(a) + u1 * sin(a);
          }
        }
      }
      for (int s = 0; s < T; s++)
        for (int hh = 0; hh < NH; hh++) {
          double sc[64], mx = -1e300, sum = 0;
          for (int s2 = 0; s2 <= s; s2++) {
            sc[s2] = 0;
            for (int i = 0; i < HD; i++) sc[s2] += q[s * QD + hh * HD + i] * k[s2 * KVD + (hh / G) * HD + i];
            sc[s2] /= sqrt(HD);
            mx = sc[s2] > mx ? sc[s2] : mx;
          }
          for (int s2 = 0; s2 <= s; s2++) sum += (sc[s2] = exp(sc[s2] - mx));
          for (int i = 0; i < HD; i++) {
            double acc = 0;
            for (int s2 = 0; s2 <= s; s2++) acc += sc[s2] / sum * v[s2 * KVD + (hh / G) * HD + i];
            o[s * QD + hh * HD + i] = acc;
          }
        }
      for (int s = 0; s < T; s++) {
        for (int i = 0; i < C; i++)
          for (int j = 0; j < QD; j++) x[s * C + i] += o[s * QD + j] * wo[i * QD + j];
        double ss = 0;
        for (int i = 0; i < C; i++) ss += x[s * C + i] * x[s * C + i];
        double r = 1 / sqrt(ss / C + c->norm_eps);
        for (int i = 0; i < C; i++) n[s * C + i] = x[s * C + i] * r * ln2[i];
        for (int j = 0; j < F; j++) {
          double g = 0, u = 0;
          for (int i = 0; i < C; i++) {
            g += n[s * C + i] * w1[j * C + i];
            u += n[s * C + i] * w3[j * C + i];
          }
          h[s * F + j] = g / (1 + exp(-g)) * u;
        }
        for (int i = 0; i < C; i++)
          for (int j = 0; j < F; j++) x[s * C + i] += h[s * F + j] * w2[i * F + j];
      }
    }
    for (int s = 0; s < T; s++) {
      double ss = 0;
      for (int i = 0; i < C; i++) ss += x[s * C + i] * x[s * C + i];
      double r = 1 / sqrt(ss / C + c->norm_eps), mx = -1e300, sum = 0;
      for (int j = 0; j < V; j++) {
        z[j] = 0;
        for (int i = 0; i < C; i++)
          z[j] += x[s * C + i] * r * t[NN_PARAM_LNFW][i] * t[NN_PARAM_WLM][(size_t)j * C + i];
        mx = z[j] > mx ? z[j] : mx;
      }
      for (int j = 0; j < V; j++) sum += exp(z[j] - mx);
      double nll = log(sum) + mx - z[tg[b * T + s]];
      total += (wt ? wt[b * T + s] : 1.0) * nll;
    }
  }
  free(x), free(n), free(q), free(k), free(v), free(o), free(h), free(z);
  return total / norm;
}

/* A config with every feature in play: GQA groups of 2, QD != C, 2 layers. */
static nn_config gc_config(void) {
  nn_config c = {11, 8, 2, 4, 2, 4, 12, 8, 100.0f, 1e-5f};
  return c;
}

/* Random parameters large enough that every nonlinearity bends. */
static void random_params(nn_model *m, uint64_t seed) {
  dg_rng r;
  dg_rng_seed(&r, seed);
  float *p = m->params_mem;
  for (int i = 0; i < NN_PARAM_COUNT; i++) {
    bool gain = i == NN_PARAM_LN1W || i == NN_PARAM_LN2W || i == NN_PARAM_LNFW;
    for (size_t j = 0; j < m->param_sizes[i]; j++)
      *p++ = (float)(gain ? 1.0 + 0.3 * dg_rng_normal(&r) : 0.5 * dg_rng_normal(&r));
  }
}

/* Central differences in double on the reference loss at the model's (fp32)
 * parameters, for every coordinate of every tensor, against nn_backward.
 * Bound per coordinate: |g - fd| <= 1e-5 * max|fd of the tensor| + 2e-4 * |fd|
 * (fp32 backward vs an exact-to-1e-9 derivative). Returns the worst ratio
 * error / bound (must be <= 1). */
static double grad_check(bool explicit_norm, double *worst_loss_diff) {
  dg_status st;
  dg_status_ok(&st);
  nn_config c = gc_config();
  nn_model m;
  if (!nn_model_init(&m, &c, true, &st) || !nn_model_reserve(&m, 2, 6, &st)) return 1e9;
  random_params(&m, 7);
  enum { B = 2, T = 6, N = B * T };
  int32_t in[N], tg[N];
  float w[N];
  dg_rng r;
  dg_rng_seed(&r, 11);
  for (int i = 0; i < N; i++) {
    in[i] = (int32_t)dg_rng_below(&r, (uint64_t)c.vocab_size);
    tg[i] = (int32_t)dg_rng_below(&r, (uint64_t)c.vocab_size);
    /* prompt-like zeros, and negative weights with an explicit normaliser */
    static const float pos[] = {0, 1, 2, 0.5f}, neg[] = {0, 1, -1.5f, 0.5f};
    w[i] = (explicit_norm ? neg : pos)[i % 4];
  }
  double norm = 0;
  for (int i = 0; i < N; i++) norm += w[i];
  if (explicit_norm) norm = 3.0;
  float loss = explicit_norm ? nn_forward_weighted(&m, in, tg, w, norm, B, T)
                             : nn_forward(&m, in, tg, w, B, T);
  nn_zero_grad(&m);
  nn_backward(&m);
  double *P = malloc(sizeof(double) * m.num_params);
  for (size_t j = 0; j < m.num_params; j++) P[j] = m.params_mem[j];
  double L0 = ref_loss(&c, m.param_sizes, P, in, tg, w, norm, B, T);
  *worst_loss_diff = fabs(L0 - loss) / fabs(L0);
  double worst = 0;
  double *fd = malloc(sizeof(double) * m.num_params);
  const double h = 1e-5;
  for (size_t j = 0; j < m.num_params; j++) {
    double p0 = P[j];
    P[j] = p0 + h;
    double lp = ref_loss(&c, m.param_sizes, P, in, tg, w, norm, B, T);
    P[j] = p0 - h;
    double lm = ref_loss(&c, m.param_sizes, P, in, tg, w, norm, B, T);
    P[j] = p0;
    fd[j] = (lp - lm) / (2 * h);
  }
  size_t off = 0;
  for (int i = 0; i < NN_PARAM_COUNT; i++) {
    double scale = 0;
    for (size_t j = off; j < off + m.param_sizes[i]; j++) scale = fmax(scale, fabs(fd[j]));
    if (scale < 1e-4) {
      fprintf(stderr, "grad check: tensor %s has no gradient to check\n", nn_param_name((nn_param_id)i));
      worst = 1e9;
    }
    for (size_t j = off; j < off + m.param_sizes[i]; j++) {
      double err = fabs(m.grads_mem[j] - fd[j]), bound = 1e-5 * scale + 2e-4 * fabs(fd[j]);
      if (err / bound > worst) worst = err / bound;
      if (err > bound)
        fprintf(stderr, "grad check: %s[%zu]: backward %.8g, differences %.8g\n",
                nn_param_name((nn_param_id)i), j - off, (double)m.grads_mem[j], fd[j]);
    }
    off += m.param_sizes[i];
  }
  free(P);
  free(fd);
  nn_model_free(&m);
  return worst;
}

DG_TEST(nn_gradient_check) {
  double ldiff, worst = grad_check(false, &ldiff);
  CHECK_MSG(ldiff < 1e-5, "fp32 forward vs double reference: relative loss difference %g", ldiff);
  CHECK_MSG(worst <= 1.0, "gradient error reaches %.3g x the bound", worst);
}

DG_TEST(nn_gradient_check_signed_weights) {
  double ldiff, worst = grad_check(true, &ldiff);
  CHECK_MSG(ldiff < 1e-5, "fp32 forward vs double reference: relative loss difference %g", ldiff);
  CHECK_MSG(worst <= 1.0, "gradient error reaches %.3g x the bound", worst);
}

/* ---- loss weights, batches ----------------------------------------------- */

DG_TEST(nn_loss_weights) {
  dg_status st;
  dg_status_ok(&st);
  nn_config c = gc_config();
  nn_model m;
  CHECK(nn_model_init(&m, &c, true, &st));
  CHECK(nn_model_reserve(&m, 2, 6, &st));
  random_params(&m, 3);
  int32_t in[12], tg[12];
  float w[12];
  for (int i = 0; i < 12; i++) in[i] = i % 11, tg[i] = (i * 5 + 2) % 11, w[i] = i < 4 ? 0.0f : 1.0f;
  float loss = nn_forward(&m, in, tg, w, 2, 6);
  double mean = 0;
  for (int i = 4; i < 12; i++) mean += m.acts.losses[i] / 8.0;
  CHECK_NEAR(loss, mean, 1e-6);
  nn_zero_grad(&m);
  nn_backward(&m);
  float *g1 = malloc(sizeof(float) * m.num_params);
  memcpy(g1, m.grads_mem, sizeof(float) * m.num_params);
  /* the target of a weight-0 (prompt) token changes nothing */
  tg[1] = (tg[1] + 3) % 11;
  CHECK(nn_forward(&m, in, tg, w, 2, 6) == loss);
  nn_zero_grad(&m);
  nn_backward(&m);
  CHECK(memcmp(g1, m.grads_mem, sizeof(float) * m.num_params) == 0);
  free(g1);
  /* all weights zero: loss 0, no gradient */
  for (int i = 0; i < 12; i++) w[i] = 0;
  CHECK(nn_forward(&m, in, tg, w, 2, 6) == 0.0f);
  nn_zero_grad(&m);
  nn_backward(&m);
  CHECK(nn_grad_norm(&m) == 0.0f);
  /* no targets: logits only */
  CHECK(nn_forward(&m, in, NULL, NULL, 2, 6) == -1.0f);

  CHECK(!nn_batch_check(&m, in, tg, NULL, 3, 6, &st));
  CHECK_ERR(st, "batch 3x6 exceeds the reserved 2x6");
  in[7] = 11;
  CHECK(!nn_batch_check(&m, in, tg, NULL, 2, 6, &st));
  CHECK_ERR(st, "inputs[1][1] = 11 is outside the vocabulary [0, 11)");
  in[7] = 0;
  tg[0] = -1;
  CHECK(!nn_batch_check(&m, in, tg, NULL, 2, 6, &st));
  CHECK_ERR(st, "targets[0][0] = -1");
  tg[0] = 0;
  w[3] = -1;
  CHECK(!nn_batch_check(&m, in, tg, w, 2, 6, &st));
  CHECK_ERR(st, "weights[0][3] = -1 must be finite and >= 0");
  w[3] = 1;
  CHECK(nn_batch_check(&m, in, tg, w, 2, 6, &st));
  nn_model_free(&m);
}

DG_TEST(nn_init_loss) {
  /* at initialisation the logits are near 0: loss ~ ln V */
  dg_status st;
  dg_status_ok(&st);
  nn_config c;
  CHECK(nn_config_named("tiny", &c, &st));
  nn_model m;
  CHECK(nn_model_init(&m, &c, false, &st));
  CHECK(nn_model_reserve(&m, 2, 16, &st));
  nn_model_init_weights(&m, 1);
  CHECK_NEAR(m.params.ln1w[0], 1.0, 0);
  int32_t in[32], tg[32];
  for (int i = 0; i < 32; i++) in[i] = (i * 37) % 256, tg[i] = (i * 91 + 5) % 256;
  CHECK_NEAR(nn_forward(&m, in, tg, NULL, 2, 16), log(256.0), 0.1);
  nn_model_free(&m);
}

/* ---- optimizer ----------------------------------------------------------- */

DG_TEST(nn_lr_schedule) {
  nn_optim o;
  nn_optim_default(&o);
  o.lr = 1.0f, o.lr_min = 0.1f, o.warmup_steps = 10, o.total_steps = 110;
  CHECK_NEAR(nn_optim_lr(&o, 0), 0.1, 1e-7);
  CHECK_NEAR(nn_optim_lr(&o, 4), 0.5, 1e-7);
  CHECK_NEAR(nn_optim_lr(&o, 9), 1.0, 1e-7);
  CHECK_NEAR(nn_optim_lr(&o, 10), 1.0, 1e-7);
  CHECK_NEAR(nn_optim_lr(&o, 60), 0.55, 1e-6);
  CHECK_NEAR(nn_optim_lr(&o, 35), 0.1 + 0.9 * 0.5 * (1 + cos(M_PI / 4)), 1e-6);
  CHECK_NEAR(nn_optim_lr(&o, 110), 0.1, 1e-7);
  CHECK_NEAR(nn_optim_lr(&o, 5000), 0.1, 1e-7);
  o.warmup_steps = 0;
  CHECK_NEAR(nn_optim_lr(&o, 0), 1.0, 1e-7);
}

DG_TEST(nn_adamw_step) {
  dg_status st;
  dg_status_ok(&st);
  nn_config c = gc_config();
  nn_model m;
  CHECK(nn_model_init(&m, &c, true, &st));
  random_params(&m, 5);
  m.opt.lr = 0.01f, m.opt.warmup_steps = 0, m.opt.total_steps = 100;
  m.opt.weight_decay = 0.1f, m.opt.grad_clip = 1.0f;
  float *p = malloc(sizeof(float) * m.num_params);
  memcpy(p, m.params_mem, sizeof(float) * m.num_params);
  nn_zero_grad(&m);
  m.grads.wte[0] = 3, m.grads.wte[1] = -4; /* clipped to norm 1 */
  m.grads.ln1w[0] = 0.5f;                   /* gains do not decay */
  double norm = sqrt(3 * 3 + 4 * 4 + 0.5 * 0.5);
  CHECK_NEAR(nn_update(&m, 0), norm, 1e-6);
  /* first step: m/(1-b1) = g, v/(1-b2) = g^2, so the step is lr * sign(g) */
  CHECK_NEAR(m.params.wte[0], p[0] - 0.01 * (1 + 0.1 * p[0]), 1e-6);
  CHECK_NEAR(m.params.wte[1], p[1] - 0.01 * (-1 + 0.1 * p[1]), 1e-6);
  CHECK_NEAR(m.m_mem[0], 0.1 * 3 / norm, 1e-7);
  CHECK_NEAR(m.v_mem[1], 0.05 * (4 / norm) * (4 / norm), 1e-7);
  CHECK_NEAR(m.params.wte[2], p[2] * (1 - 0.01 * 0.1), 1e-7); /* decay only */
  size_t ln1 = (size_t)(m.params.ln1w - m.params_mem);
  CHECK_NEAR(m.params.ln1w[0], p[ln1] - 0.01, 1e-6);
  CHECK(m.params.ln1w[1] == p[ln1 + 1]); /* no gradient, no decay */
  free(p);
  nn_model_free(&m);
}

/* A small corpus: characters of a text mapped to 32 ids (a-z, space, . , ;). */
static const char corpus[] =
    "one small step for a kernel, one giant leap for the schedule. tile the loop, bind the threads, "
    "vectorize the inner axis and unroll what is left. the model writes the script; dragon checks it.";

static int32_t char_id(char ch) {
  return ch >= 'a' && ch <= 'z' ? ch - 'a' : ch == ' ' ? 26 : ch == '.' ? 27 : ch == ',' ? 28 : 29;
}

/* B windows of T tokens spread over the corpus, with next-token targets. */
static void corpus_batch(int32_t *in, int32_t *tg, int B, int T) {
  int n = (int)strlen(corpus), stride = (n - 1 - T) / (B - 1);
  for (int b = 0; b < B; b++)
    for (int t = 0; t < T; t++) {
      in[b * T + t] = char_id(corpus[b * stride + t]);
      tg[b * T + t] = char_id(corpus[b * stride + t + 1]);
    }
}

/* About 5.7k parameters: 2 layers, 4 query heads over 2 kv heads. */
static nn_config small_config(void) {
  nn_config c = {32, 16, 2, 4, 2, 4, 32, 64, 10000.0f, 1e-6f};
  return c;
}

DG_TEST(nn_overfit_tiny) {
  dg_status st;
  dg_status_ok(&st);
  nn_config c = small_config();
  nn_model m;
  enum { B = 4, T = 64 };
  CHECK(nn_model_init(&m, &c, true, &st));
  CHECK(nn_model_reserve(&m, B, T, &st));
  CHECK(m.num_params < 6000);
  nn_model_init_weights(&m, 42);
  m.opt.lr = 1e-2f, m.opt.lr_min = 1e-3f, m.opt.warmup_steps = 20, m.opt.total_steps = 600;
  m.opt.weight_decay = 0.0f;
  int32_t in[B * T], tg[B * T];
  corpus_batch(in, tg, B, T);
  float first = 0, loss = 0;
  int step;
  for (step = 0; step < 400; step++) {
    loss = nn_forward(&m, in, tg, NULL, B, T);
    if (step == 0) first = loss;
    if (loss < 0.02f) break;
    nn_zero_grad(&m);
    nn_backward(&m);
    nn_update(&m, step);
  }
  CHECK_NEAR(first, log(32.0), 0.1);
  CHECK_MSG(loss < 0.02f, "loss %g after %d steps", (double)loss, step);
  nn_model_free(&m);
}

/* ---- checkpoints --------------------------------------------------------- */

static char *tmp_path(const char *name) {
  static char buf[4][512];
  static int k;
  char *p = buf[k++ % 4];
  snprintf(p, 512, "%s/%s", dg_test_tmpdir(), name);
  return p;
}

static char *slurp(const char *path, size_t *len) {
  dg_status st;
  return dg_read_file(path, len, &st);
}

static void spit(const char *path, const void *data, size_t len) {
  FILE *f = fopen(path, "wb");
  DG_ASSERT(f);
  DG_ASSERT(fwrite(data, 1, len, f) == len);
  fclose(f);
}

/* One training step on a batch drawn from rng; returns the loss. */
static float train_step(nn_model *m, dg_rng *rng, int64_t step) {
  int32_t in[2 * 16], tg[2 * 16];
  for (int i = 0; i < 32; i++) {
    in[i] = (int32_t)dg_rng_below(rng, 32);
    tg[i] = (int32_t)((in[i] * 7 + 3) % 32);
  }
  float loss = nn_forward(m, in, tg, NULL, 2, 16);
  nn_zero_grad(m);
  nn_backward(m);
  nn_update(m, step);
  return loss;
}

static bool make_trainer(nn_model *m, dg_status *st) {
  nn_config c = small_config();
  if (!nn_model_init(m, &c, true, st) || !nn_model_reserve(m, 2, 16, st)) return false;
  nn_model_init_weights(m, 9);
  m->opt.lr = 3e-3f, m->opt.warmup_steps = 3, m->opt.total_steps = 20;
  return true;
}

DG_TEST(nn_checkpoint_resume_exact) {
  dg_status st;
  dg_status_ok(&st);
  nn_model a, b;
  CHECK(make_trainer(&a, &st));
  dg_rng rng, rng2;
  dg_rng_seed(&rng, 1234);
  for (int64_t s = 0; s < 5; s++) train_step(&a, &rng, s);
  const char *ck = tmp_path("resume.bin"), *sf = tmp_path("resume.state");
  CHECK(nn_checkpoint_save(&a, ck, &st));
  CHECK_OK(st);
  CHECK(nn_state_save(&a, 5, &rng, sf, &st));
  float la[3];
  for (int64_t s = 5; s < 8; s++) la[s - 5] = train_step(&a, &rng, s);

  nn_config c;
  CHECK(nn_checkpoint_read_config(ck, &c, &st));
  CHECK(memcmp(&c, &a.cfg, sizeof c) == 0);
  CHECK(nn_checkpoint_load(&b, ck, true, &st));
  CHECK_OK(st);
  CHECK(nn_model_reserve(&b, 2, 16, &st));
  b.opt = a.opt;
  int64_t step = -1;
  CHECK(nn_state_load(&b, sf, &step, &rng2, &st));
  CHECK_EQ(step, 5);
  for (int64_t s = step; s < 8; s++) {
    float lb = train_step(&b, &rng2, s);
    CHECK_MSG(memcmp(&lb, &la[s - 5], sizeof lb) == 0, "step %lld: loss %.9g after reload, %.9g before",
              (long long)s, (double)lb, (double)la[s - 5]);
  }
  CHECK(memcmp(a.params_mem, b.params_mem, sizeof(float) * a.num_params) == 0);
  CHECK(memcmp(a.v_mem, b.v_mem, sizeof(float) * a.num_params) == 0);
  nn_model_free(&a);
  nn_model_free(&b);
}

DG_TEST(nn_checkpoint_rejects_bad_files) {
  dg_status st;
  dg_status_ok(&st);
  nn_model a;
  CHECK(make_trainer(&a, &st));
  const char *ck = tmp_path("good.bin"), *bad = tmp_path("bad.bin"), *sf = tmp_path("good.state");
  CHECK(nn_checkpoint_save(&a, ck, &st));
  CHECK(nn_state_save(&a, 3, NULL, sf, &st));
  size_t len;
  char *good = slurp(ck, &len);
  CHECK(good && len == 1024 + 4 * a.num_params);
  nn_model m;
  memset(&m, 0x5a, sizeof m);
  unsigned char sentinel[sizeof m];
  memcpy(sentinel, &m, sizeof m);

  /* truncated at several places: inside the header, at its end, in the data */
  size_t cuts[] = {0, 7, 1023, 1024, 1025, len / 2, len - 1};
  for (size_t i = 0; i < DG_ARRAY_LEN(cuts); i++) {
    spit(bad, good, cuts[i]);
    CHECK_MSG(!nn_checkpoint_load(&m, bad, false, &st), "accepted a file cut at %zu", cuts[i]);
    CHECK_ERR(st, "truncated");
    CHECK_ERR(st, bad);
    CHECK(memcmp(sentinel, &m, sizeof m) == 0);
  }
  char *buf = malloc(len + 4);
  /* trailing bytes */
  memcpy(buf, good, len);
  memset(buf + len, 0, 4);
  spit(bad, buf, len + 4);
  CHECK(!nn_checkpoint_load(&m, bad, false, &st));
  CHECK_ERR(st, "trailing data");
  /* a flipped bit in the data */
  memcpy(buf, good, len);
  buf[1024 + 4 * 100] ^= 0x10;
  spit(bad, buf, len);
  CHECK(!nn_checkpoint_load(&m, bad, false, &st));
  CHECK_ERR(st, "parameter checksum mismatch");
  /* a changed config field */
  memcpy(buf, good, len);
  float theta = 500000.0f;
  memcpy(buf + 4 * 10, &theta, 4);
  spit(bad, buf, len);
  CHECK(!nn_checkpoint_load(&m, bad, false, &st));
  CHECK_ERR(st, "header checksum mismatch");
  /* magic and version */
  memcpy(buf, good, len);
  buf[0] ^= 1;
  spit(bad, buf, len);
  CHECK(!nn_checkpoint_load(&m, bad, false, &st));
  CHECK_ERR(st, "not a dragon model checkpoint");
  memcpy(buf, good, len);
  int32_t v2 = 2;
  memcpy(buf + 4, &v2, 4);
  spit(bad, buf, len);
  CHECK(!nn_checkpoint_load(&m, bad, false, &st));
  CHECK_ERR(st, "version 2; this build reads version 1");
  CHECK(memcmp(sentinel, &m, sizeof m) == 0);
  /* the wrong kind of file, both ways */
  CHECK(!nn_checkpoint_load(&m, sf, false, &st));
  CHECK_ERR(st, "is an optimizer state file, not a dragon model checkpoint");
  int64_t step = 77;
  CHECK(!nn_state_load(&a, ck, &step, NULL, &st));
  CHECK_ERR(st, "is a model checkpoint");
  CHECK(!nn_checkpoint_load(&m, tmp_path("missing.bin"), false, &st));
  CHECK_ERR(st, "missing.bin");
  /* a state file of another config, and a truncated one: m, v, step untouched */
  nn_config c = small_config();
  c.ffn_hidden = 48;
  nn_model o;
  CHECK(nn_model_init(&o, &c, true, &st));
  CHECK(!nn_state_load(&o, sf, &step, NULL, &st));
  CHECK_ERR(st, "written for another model config");
  nn_model_free(&o);
  size_t slen;
  char *state = slurp(sf, &slen);
  spit(bad, state, slen - 8);
  a.m_mem[0] = 42.0f;
  CHECK(!nn_state_load(&a, bad, &step, NULL, &st));
  CHECK_ERR(st, "truncated");
  CHECK(a.m_mem[0] == 42.0f && step == 77);
  state[slen - 1] ^= 0x40;
  spit(bad, state, slen);
  CHECK(!nn_state_load(&a, bad, &step, NULL, &st));
  CHECK_ERR(st, "optimizer state checksum mismatch");
  CHECK(a.m_mem[0] == 42.0f && step == 77);
  /* the good files were never touched */
  size_t len2;
  char *again = slurp(ck, &len2);
  CHECK(again && len2 == len && memcmp(again, good, len) == 0);
  free(again);
  free(state);
  free(buf);
  free(good);
  nn_model_free(&a);
}

/* ---- safetensors ---------------------------------------------------------- */

DG_TEST(nn_safetensors_round_trip) {
  dg_status st;
  dg_status_ok(&st);
  nn_config c = gc_config();
  nn_model a, b;
  CHECK(nn_model_init(&a, &c, false, &st));
  CHECK(nn_model_init(&b, &c, false, &st));
  random_params(&a, 17);
  const char *p = tmp_path("model.safetensors");
  CHECK(nn_safetensors_export(&a, p, NN_ST_F32, &st));
  CHECK_OK(st);
  nn_config d;
  CHECK(nn_safetensors_read_config(p, &d, &st));
  CHECK(memcmp(&c, &d, sizeof c) == 0);
  CHECK(nn_safetensors_import(&b, p, &st));
  CHECK_OK(st);
  CHECK(memcmp(a.params_mem, b.params_mem, sizeof(float) * a.num_params) == 0);

  /* the layout a Python reader sees: length, JSON, data at known offsets */
  size_t len;
  char *f = slurp(p, &len);
  CHECK(f);
  uint64_t hlen;
  memcpy(&hlen, f, 8);
  CHECK(hlen % 8 == 0 && 8 + hlen + 4 * a.num_params == len);
  CHECK(strstr(f + 8, "\"model.layers.1.self_attn.k_proj.weight\":{\"dtype\":\"F32\",\"shape\":[8,8]"));
  CHECK(strstr(f + 8, "\"model.layers.0.mlp.down_proj.weight\":{\"dtype\":\"F32\",\"shape\":[8,12]"));
  CHECK(strstr(f + 8, "\"lm_head.weight\""));
  float first;
  memcpy(&first, f + 8 + hlen, 4); /* model.embed_tokens.weight[0][0] */
  CHECK(first == a.params.wte[0]);
  free(f);

  /* BF16 and F16: values come back rounded to the format */
  CHECK(nn_safetensors_export(&a, p, NN_ST_BF16, &st));
  CHECK(nn_safetensors_import(&b, p, &st));
  for (size_t j = 0; j < a.num_params; j++)
    CHECK_NEAR(b.params_mem[j], a.params_mem[j], fabs(a.params_mem[j]) * (1.0 / 256));
  CHECK(nn_safetensors_export(&a, p, NN_ST_F16, &st));
  CHECK(nn_safetensors_import(&b, p, &st));
  for (size_t j = 0; j < a.num_params; j++)
    CHECK_NEAR(b.params_mem[j], a.params_mem[j], fabs(a.params_mem[j]) * (1.0 / 2048) + 1e-7);
  nn_model_free(&a);
  nn_model_free(&b);
}

/* A zstd-packed safetensors file (as dragon ships its model) reads as the
 * file it packs; a packed file cut short or a corrupt frame is refused
 * naming the file, and the model is left as it was. */
DG_TEST(nn_safetensors_packed) {
  dg_status st;
  dg_status_ok(&st);
  nn_config c = gc_config();
  nn_model a, b;
  CHECK(nn_model_init(&a, &c, false, &st));
  CHECK(nn_model_init(&b, &c, false, &st));
  random_params(&a, 23);
  const char *p = tmp_path("packed.safetensors"), *z = tmp_path("packed.safetensors.zst");
  CHECK(nn_safetensors_export(&a, p, NN_ST_F32, &st));
  size_t len;
  char *raw = slurp(p, &len);
  CHECK(raw);
  dg_str packed;
  dg_str_init(&packed);
  CHECK(dg_zstd_pack(raw, len, 3, &packed, &st));
  CHECK(dg_write_file_atomic(z, packed.s, packed.len, &st));
  nn_config d;
  CHECK(nn_safetensors_read_config(z, &d, &st));
  CHECK(memcmp(&c, &d, sizeof c) == 0);
  CHECK_MSG(nn_safetensors_import(&b, z, &st), "%s", st.msg);
  CHECK(memcmp(a.params_mem, b.params_mem, sizeof(float) * a.num_params) == 0);
  /* cut short, then a byte of the frame changed */
  memset(b.params_mem, 0, sizeof(float) * b.num_params);
  CHECK(dg_write_file_atomic(z, packed.s, packed.len / 2, &st));
  CHECK(!nn_safetensors_import(&b, z, &st));
  CHECK_ERR(st, "packed.safetensors.zst");
  packed.s[packed.len / 2] ^= 0x5a;
  CHECK(dg_write_file_atomic(z, packed.s, packed.len, &st));
  CHECK(!nn_safetensors_import(&b, z, &st));
  CHECK_ERR(st, "packed.safetensors.zst");
  for (size_t j = 0; j < b.num_params; j++) CHECK(b.params_mem[j] == 0);
  dg_str_free(&packed);
  free(raw);
  nn_model_free(&a);
  nn_model_free(&b);
}

/* The shipped model (models/little-dragon) loads: its config is the one
 * its card names, its tokenizer is its vocabulary's, and its parameters
 * are finite and not all alike. */
DG_TEST(nn_shipped_model_loads) {
  dg_status st;
  dg_status_ok(&st);
  const char *p = "models/little-dragon/model.safetensors.zst";
  nn_config c;
  CHECK_MSG(nn_safetensors_read_config(p, &c, &st), "%s", st.msg);
  CHECK(c.d_model == 384 && c.n_layers == 8 && c.n_heads == 6 && c.n_kv_heads == 2 && c.head_dim == 64 &&
        c.ffn_hidden == 1024 && c.max_seq_len == 3072);
  nn_model m;
  CHECK(nn_model_init(&m, &c, false, &st));
  CHECK_MSG(nn_safetensors_import(&m, p, &st), "%s", st.msg);
  CHECK_EQ((long long)m.num_params, 14162304LL);
  tok_tokenizer *tok = tok_load("models/little-dragon/tokenizer.bin", &st);
  CHECK_MSG(tok, "%s", st.msg);
  CHECK_EQ(tok_vocab_size(tok), c.vocab_size);
  double lo = 0, hi = 0;
  for (size_t j = 0; j < m.num_params; j++) {
    CHECK(isfinite(m.params_mem[j]));
    if (m.params_mem[j] < lo) lo = m.params_mem[j];
    if (m.params_mem[j] > hi) hi = m.params_mem[j];
  }
  CHECK(hi - lo > 0.1);
  tok_free(tok);
  nn_model_free(&m);
}

/* Rewrites an exported file: applies `edit` to the parsed header, keeps the
 * data bytes [0, keep) (all when keep < 0). */
#include <jansson.h>
static void rewrite(const char *src, const char *dst, void (*edit)(json_t *), long keep) {
  size_t len;
  char *f = slurp(src, &len);
  DG_ASSERT(f);
  uint64_t hlen;
  memcpy(&hlen, f, 8);
  json_t *h = json_loadb(f + 8, hlen, 0, NULL);
  DG_ASSERT(h);
  edit(h);
  char *js = json_dumps(h, JSON_COMPACT);
  json_decref(h);
  uint64_t n = strlen(js), pad = (n + 7) / 8 * 8;
  size_t data = len - 8 - hlen, k = keep < 0 ? data : (size_t)keep;
  char *out = malloc(8 + pad + k);
  memcpy(out, &pad, 8);
  memcpy(out + 8, js, n);
  memset(out + 8 + n, ' ', pad - n);
  memcpy(out + 8 + pad, f + 8 + hlen, k);
  spit(dst, out, 8 + pad + k);
  free(out);
  free(js);
  free(f);
}

static void edit_none(json_t *h) { (void)h; }
static void edit_drop_lm_head(json_t *h) { json_object_del(h, "lm_head.weight"); }
static void edit_shape(json_t *h) {
  json_t *s = json_object_get(json_object_get(h, "model.embed_tokens.weight"), "shape");
  json_array_set_new(s, 0, json_integer(8));
  json_array_set_new(s, 1, json_integer(11));
}
static void edit_dtype(json_t *h) {
  json_object_set_new(json_object_get(h, "model.norm.weight"), "dtype", json_string("I32"));
}
static void edit_offsets(json_t *h) {
  json_t *o = json_object_get(json_object_get(h, "lm_head.weight"), "data_offsets");
  json_array_set_new(o, 1, json_integer(1 << 30));
}
static void edit_unknown(json_t *h) {
  json_object_set(h, "model.layers.0.self_attn.q_norm.weight", json_object_get(h, "model.norm.weight"));
}
static void edit_missing(json_t *h) { json_object_del(h, "model.layers.1.mlp.up_proj.weight"); }
static void edit_metadata(json_t *h) {
  json_object_set_new(json_object_get(h, "__metadata__"), "n", json_integer(3));
}

DG_TEST(nn_safetensors_rejects_bad_files) {
  dg_status st;
  dg_status_ok(&st);
  nn_config c = gc_config();
  nn_model a, b;
  CHECK(nn_model_init(&a, &c, false, &st));
  CHECK(nn_model_init(&b, &c, false, &st));
  random_params(&a, 17);
  random_params(&b, 18);
  float *keep = malloc(sizeof(float) * b.num_params);
  memcpy(keep, b.params_mem, sizeof(float) * b.num_params);
  const char *p = tmp_path("src.safetensors"), *q = tmp_path("bad.safetensors");
  CHECK(nn_safetensors_export(&a, p, NN_ST_F32, &st));
  long lm_bytes = 4L * 11 * 8;
  long all = (long)(4 * a.num_params);

  /* tied embeddings: no lm_head.weight, it is filled from the embedding */
  rewrite(p, q, edit_drop_lm_head, all - lm_bytes);
  CHECK(nn_safetensors_import(&b, q, &st));
  CHECK(memcmp(b.params.wlm, a.params.wte, (size_t)lm_bytes) == 0);
  memcpy(b.params_mem, keep, sizeof(float) * b.num_params);

  static const struct {
    void (*edit)(json_t *);
    long cut; /* bytes of data dropped from the end */
    const char *err;
  } cases[] = {
      {edit_none, 4, "data_offsets [5888, 6240] outside the 6236-byte data"},
      {edit_shape, 0, "'model.embed_tokens.weight': shape does not match the model's [11, 8]"},
      {edit_dtype, 0, "'model.norm.weight': dtype I32 not supported"},
      {edit_offsets, 0, "'lm_head.weight': data_offsets [5888, 1073741824] outside"},
      {edit_unknown, 0, "unknown tensor 'model.layers.0.self_attn.q_norm.weight'"},
      {edit_missing, 0, "leave a gap"},
      {edit_metadata, 0, "__metadata__ must map strings to strings"},
      {edit_drop_lm_head, 0, "tensors cover 5888 bytes of data but the file holds 6240"},
  };
  for (size_t i = 0; i < DG_ARRAY_LEN(cases); i++) {
    rewrite(p, q, cases[i].edit, all - cases[i].cut);
    CHECK_MSG(!nn_safetensors_import(&b, q, &st), "case %zu accepted", i);
    CHECK_ERR(st, cases[i].err);
    CHECK_ERR(st, q);
    CHECK(memcmp(keep, b.params_mem, sizeof(float) * b.num_params) == 0);
  }
  /* broken JSON, an impossible header length, a file shorter than 8 bytes */
  size_t len;
  char *f = slurp(p, &len);
  f[8] = '[';
  spit(q, f, len);
  CHECK(!nn_safetensors_import(&b, q, &st));
  CHECK_ERR(st, "header JSON:1:");
  memset(f, 0xff, 8);
  spit(q, f, len);
  CHECK(!nn_safetensors_import(&b, q, &st));
  CHECK_ERR(st, "header length 18446744073709551615 exceeds the file");
  spit(q, f, 5);
  CHECK(!nn_safetensors_import(&b, q, &st));
  CHECK_ERR(st, "too short for the 8-byte header length");
  CHECK(memcmp(keep, b.params_mem, sizeof(float) * b.num_params) == 0);
  /* a file without dragon's metadata has no config to read */
  rewrite(p, q, edit_metadata, -1);
  CHECK(!nn_safetensors_read_config(q, &c, &st));
  CHECK_ERR(st, "__metadata__ must map strings to strings");
  free(f);
  free(keep);
  nn_model_free(&a);
  nn_model_free(&b);
}

/* ---- a file written by Hugging Face transformers -------------------------- */

/* LlamaForCausalLM (V 16, C 8, 2 layers, 2 heads over 1 kv head, head_dim 4,
 * intermediate 8, eps 1e-5, theta 10000, untied) with random bf16-exact
 * weights, saved by safetensors.torch.save_file in BF16, and the logits
 * transformers computed in fp32 (eager attention) for 7 tokens. Pins the
 * names, the [out, in] layout, rotate-half RoPE, the GQA head mapping,
 * SwiGLU and RMSNorm to the Python implementation. */
static const char hf_fixture_hex[] =
    "e8070000000000007b225f5f6d657461646174615f5f223a7b22666f726d6174223a227074227d2c226c6d5f68656164"
    "2e776569676874223a7b226474797065223a2242463136222c227368617065223a5b31362c385d2c22646174615f6f66"
    "6673657473223a5b302c3235365d7d2c226d6f64656c2e656d6265645f746f6b656e732e776569676874223a7b226474"
    "797065223a2242463136222c227368617065223a5b31362c385d2c22646174615f6f666673657473223a5b3235362c35"
    "31325d7d2c226d6f64656c2e6c61796572732e302e696e7075745f6c617965726e6f726d2e776569676874223a7b2264"
    "74797065223a2242463136222c227368617065223a5b385d2c22646174615f6f666673657473223a5b3531322c353238"
    "5d7d2c226d6f64656c2e6c61796572732e302e6d6c702e646f776e5f70726f6a2e776569676874223a7b226474797065"
    "223a2242463136222c227368617065223a5b382c385d2c22646174615f6f666673657473223a5b3532382c3635365d7d"
    "2c226d6f64656c2e6c61796572732e302e6d6c702e676174655f70726f6a2e776569676874223a7b226474797065223a"
    "2242463136222c227368617065223a5b382c385d2c22646174615f6f666673657473223a5b3635362c3738345d7d2c22"
    "6d6f64656c2e6c61796572732e302e6d6c702e75705f70726f6a2e776569676874223a7b226474797065223a22424631"
    "36222c227368617065223a5b382c385d2c22646174615f6f666673657473223a5b3738342c3931325d7d2c226d6f6465"
    "6c2e6c61796572732e302e706f73745f617474656e74696f6e5f6c617965726e6f726d2e776569676874223a7b226474"
    "797065223a2242463136222c227368617065223a5b385d2c22646174615f6f666673657473223a5b3931322c3932385d"
    "7d2c226d6f64656c2e6c61796572732e302e73656c665f6174746e2e6b5f70726f6a2e776569676874223a7b22647479"
    "7065223a2242463136222c227368617065223a5b342c385d2c22646174615f6f666673657473223a5b3932382c393932"
    "5d7d2c226d6f64656c2e6c61796572732e302e73656c665f6174746e2e6f5f70726f6a2e776569676874223a7b226474"
    "797065223a2242463136222c227368617065223a5b382c385d2c22646174615f6f666673657473223a5b3939322c3131"
    "32305d7d2c226d6f64656c2e6c61796572732e302e73656c665f6174746e2e715f70726f6a2e776569676874223a7b22"
    "6474797065223a2242463136222c227368617065223a5b382c385d2c22646174615f6f666673657473223a5b31313230"
    "2c313234385d7d2c226d6f64656c2e6c61796572732e302e73656c665f6174746e2e765f70726f6a2e77656967687422"
    "3a7b226474797065223a2242463136222c227368617065223a5b342c385d2c22646174615f6f666673657473223a5b31"
    "3234382c313331325d7d2c226d6f64656c2e6c61796572732e312e696e7075745f6c617965726e6f726d2e7765696768"
    "74223a7b226474797065223a2242463136222c227368617065223a5b385d2c22646174615f6f666673657473223a5b31"
    "3331322c313332385d7d2c226d6f64656c2e6c61796572732e312e6d6c702e646f776e5f70726f6a2e77656967687422"
    "3a7b226474797065223a2242463136222c227368617065223a5b382c385d2c22646174615f6f666673657473223a5b31"
    "3332382c313435365d7d2c226d6f64656c2e6c61796572732e312e6d6c702e676174655f70726f6a2e77656967687422"
    "3a7b226474797065223a2242463136222c227368617065223a5b382c385d2c22646174615f6f666673657473223a5b31"
    "3435362c313538345d7d2c226d6f64656c2e6c61796572732e312e6d6c702e75705f70726f6a2e776569676874223a7b"
    "226474797065223a2242463136222c227368617065223a5b382c385d2c22646174615f6f666673657473223a5b313538"
    "342c313731325d7d2c226d6f64656c2e6c61796572732e312e706f73745f617474656e74696f6e5f6c617965726e6f72"
    "6d2e776569676874223a7b226474797065223a2242463136222c227368617065223a5b385d2c22646174615f6f666673"
    "657473223a5b313731322c313732385d7d2c226d6f64656c2e6c61796572732e312e73656c665f6174746e2e6b5f7072"
    "6f6a2e776569676874223a7b226474797065223a2242463136222c227368617065223a5b342c385d2c22646174615f6f"
    "666673657473223a5b313732382c313739325d7d2c226d6f64656c2e6c61796572732e312e73656c665f6174746e2e6f"
    "5f70726f6a2e776569676874223a7b226474797065223a2242463136222c227368617065223a5b382c385d2c22646174"
    "615f6f666673657473223a5b313739322c313932305d7d2c226d6f64656c2e6c61796572732e312e73656c665f617474"
    "6e2e715f70726f6a2e776569676874223a7b226474797065223a2242463136222c227368617065223a5b382c385d2c22"
    "646174615f6f666673657473223a5b313932302c323034385d7d2c226d6f64656c2e6c61796572732e312e73656c665f"
    "6174746e2e765f70726f6a2e776569676874223a7b226474797065223a2242463136222c227368617065223a5b342c38"
    "5d2c22646174615f6f666673657473223a5b323034382c323131325d7d2c226d6f64656c2e6e6f726d2e776569676874"
    "223a7b226474797065223a2242463136222c227368617065223a5b385d2c22646174615f6f666673657473223a5b3231"
    "31322c323132385d7d7d202020202020ac3ebb3e1cbf533ecdbe173fa1be41be04bf143f14be3a3f973e603e883daa3f"
    "aa3de7bf253d703f43bfb23ed13d6e3f33beab3e583f2dbf5d3e253fefbe4ebd5fbfa5bf2ebe6ebdc6be94bf0ebe813c"
    "ab3f983ebdbf62bc4f3f483fb1be593f81bfdb3db13ed0bea23e503f87bdb93e06bff8bd873d413f25bf2a3f72bf23bf"
    "583fbc3ed73ed43e74be6b3fdcbe163f84be293d593d38bfd73e093e3f3f0cbf563eadbe76bf03bf1b3fbdbe2e3e19bf"
    "1abf6ebfe6be553e503f4b3fadbed23d6d3e263fb4bdc83e21bec23da93eaebea83edabe78be033f2b3fd6bd0fbedcbd"
    "09bf88be89bfe63e3ebfda3e2e3fbb3cf23e163e233cb03e0f3edc3e16bf55bf2abeeeb950bf84bf323ff0bd463f4f3e"
    "d3be8dbf98bfe0bf193e563ecd3f98be9f3e223f6d3f903f553e1e3e87bf55bf8f3e93be8e3f01bf83be49be393f6ebe"
    "27be313fbc3e2b3feb3d8dbf7abe87be41be493f233f823ff73ea8bf8e3f003f213f40bfafbe45be8c3e6bbf8ebf933f"
    "7c3f863e9fbe0a3f02bfab3ec6be113f93bfd1bdd63e363e86bf33bff8befabda1beb3be0ebf48be283f6c3e55bf843e"
    "d7be2f3ea23d963e45bf73be05bf25be8d3ed33be2bca93ee83c36bf0abf453f723d99bf373fec3e6f3f6e3f233fe93d"
    "5a3ef6beb5bdb7bf8ebe3dbe05bf153fa83e303fcebeedbe24bedd3cd7bedabf8f3ef13c46beabbe033fb53f06bf8abe"
    "a03f823f8d3f893f673f9c3f8d3f6d3fa13f46beb33d5fbe003facbe6dbf03be163f873f363e10bf133fae3e9fbe15bf"
    "60bc65bf4fbd92be70bfd0be0e3f533f983e3d3fbf3eb43de83bff3c883ff33e84bd38bf29bf243d8bbb87be90bf2a3d"
    "bf3eb03ec03ee73e20bf243fc1be423eeabfecbd17bf773fc7bee43d8bbf53be3e3fc7bef8bd5bbf753f1f3e60bec5be"
    "c2bfb93d273e303ef03e113f1ebf47bf193fe9bd38be333fbb3ff43e183f623d493fddbd823ccebcd8beecbe833f6ebe"
    "8c3fffbb97bfd93e1ebf013f623eb2bdbcbe4d3f733f88bf963e263ee63d2dbff3be363f1dbfbc3e883f7bbe3dbdb6be"
    "ec3e763dc33d29bc69bf053f84be6cbf983e433f9cbe8c3f1fbfa6bede3d4b3fa73f383fec3eabbe39bee43e703d863e"
    "533fb1be463fdbbe0cbe27bfcebeb93e93be57be453e033f473bcd3eafbea9bf6abfcc3e333f033e6d3e453ff6bd9ebf"
    "e9bee1beb9be593ea23e383f1c3d2e3ea9bf243ff83ede3e0d3f393fdc3d403df0be8f3f84bd993f6cbed6be5abc733e"
    "13bd26bfd83ea0bea23d243f2abf47be843f733f663f933f223f9d3f863f883f323f5f3f823eeabc7e3ea7befabfb9be"
    "093fac3f21bf0fbf01bfe53db33f1abf1ebf0b3f04bfd6be683e39be95beeb3eaabe12bd28bffc3b863e113f283e0e3f"
    "1a3f9fbeb43dd63dcd3e75be91bea03f853e6a3f94bf35bf2a3e30bee8bda9bef9be0b3f023f733f28bfcdbee6bec43e"
    "f9be46bfda3e8c3fe6bc993d2b3f5cbe033f063f46bf1d3f6abd9cbea5be413f51bf0c3edcbd1abebfbe633f32be163e"
    "4f3ed8be30bdecbe2fbfb93e05bf68be443fabbfb3bf073f183f023f63be2ebf24bf493ffbbe1fbf42bebebe27bf4fbf"
    "c93c213f7d3d8e3f993e7a3e1ebf3a3fc0bd123ec4bad73b313f0e3e9a3ff43ea83edd3e7dbe9e3c34bf843f843e133f"
    "93bf973f003f383f253f27bf87bf78be21bfb7be2c3f0abc9c3f5c3f223e84beb93dd53ea93cdb3e623e9a3ccd3f923d"
    "5e3f52bc783f3cbf1dbf163d8e3f043f4fbf96bfd4bef1befa3e9dbfb83ebbbdb73c42be783f2b3ea43ee4bf033f2fbe"
    "4bbf44be98be1e3f8c3d5abf243f4a3f703fa5bed5bede3e34bf243f5fbe9b3c6e3f4b3f643f993f483f8f3f843f983f"
    "f13ec5be573fbf3db23ebd3e8bbfa83c1f3f40be98bd243c16be9dbe42be593f77bf643fa3be82be97bba1bed13e0d3d"
    "793dd0becebeabbebb3ed23e35bf73bfbc3e9abe1c3e353f9b3e56be1cbf29bd09bf4b3ef23b4b3e673e183ff73d16be"
    "e93ee9bd89becabe773f633e22be54be053f56bd963d5b3e52bf253f5fbde73e913f2e3f903ef0babfbe523fc1bee83e"
    "3a3fa4be5d3d9c3e85bfbebe373f2b3d433ff9be1bbfa53d573f253c45bfe03eaabefe3e30be3d3e513f483fc8be7c3f"
    "843f1a3fe13e7fbf99bf0abfec3ee7be51be2b3fa4bec6ba82be9c3b6f3f803f87bede3e4e3f873e51bdd4bc063e9a3d"
    "d83cf2be773e543e6c3fa13d7a3ffcbc243da6bed3bdf83e8bbe013ecc3e94bda8be69bfa1be81be153d0cbc2d3e383f"
    "52be223da13e08be0d3f35bf0cbf09be38beb13e1d3c20bdbebfc63e57bf07bf973f0dbe033ef43cdb3e233fa03e97be"
    "45be063df83e3d3fd2bfccbf2ebe603e78be3ebeb5bf1abd533fae3e033f25bf003f283f223e4cbe13bf4b3dcfbe983f"
    "a73f9e3fa33f3c3f803f843f463f6e3f4c3e16beb0bf543f73be9b3efe3e7c3f5ebea0bdecbe72bfbfbf5d3f53bfdbbd"
    "3ebea7bd173fbd3ed5bd6fbd62bef3bef7beddbd45be763c00c0193fc9be803f68bebebeb63eb7be9fbe613e9c3d093f"
    "e43ea23f0dbf85bf88bd3fbf993f013f0e3f21bf1e3dc9be033e263f653e6abe5b3e833fd1bd71be54bf26bf79bf573f"
    "3b3c1e3f2dbf233f1b3f313f4f3e2d3eeebeb13c15be3b3e87bdb43e8b3f9dbe61bf88bf59bf0bbe7bbe2fbfaabda2bf"
    "043f30bfeb3d0d3e733e6ebf513d3fbf90bff6be50bdf5be61be4ebf58bfdd3e3f3ebf3e08bed6be37bf733e823ef2be"
    "c83edd3611bfc5bf0bbf2fbf3e3e07bf2abf363e163f29bd8f3e553f8cbeaf3e0cbf4abf7cbeb63e2a3f80be95bdaabf"
    "2dbe6fbf4a3f9d3e593fc6be09c0513db6be00bf58beb33e8cbf2b3e99bff4bed23e5d3ebe3e443e91be1c3eddbd6c3f"
    "9a3f533ed1be6abe42bf763d053e773f67bf13bf233f2fbe46bf0a3c84bf2c3f3dbfbf3ff4be443fb9bfdd3ca13f9ebe"
    "07bf583f9ebe063e0cbfa9bfe73e243e6b3f773f623f6c3f513f463fa23f3a3f"
;
static const int32_t hf_fixture_tokens[7] = {3, 14, 1, 5, 9, 2, 6};
static const float hf_fixture_logits[7 * 16] = {
    0.50396663, -0.0385977328, -3.69054174, 3.37729907, -1.77401328, 0.300487548,
    2.18305755, 1.16510773, 1.11049569, -0.0358492583, -0.785325348, 0.0361839086,
    -0.581108749, -1.15183783, -2.62191725, 0.921178043, -1.32738125, 0.814972043,
    -3.54532218, 1.56692386, -0.770016789, -3.28572893, 1.33292115, -1.50737977,
    -0.694276869, 1.23451126, -1.42251933, -2.55531549, 0.503277659, -1.83941257,
    -1.46279418, -1.39657068, -0.018483704, -0.730054617, -4.67637348, 2.31408548,
    -0.162976682, -1.4391464, 1.32686067, 0.567201316, -0.832242429, 0.470551014,
    0.0577066578, -1.0771209, -0.35035938, -1.42383921, -2.1081357, 0.30223605,
    -0.301879704, 1.33630693, -1.79177928, -1.019346, -0.398140281, 2.26024914,
    -0.425554365, -3.50433517, -0.853344083, 0.720523298, 1.12174058, -1.52258825,
    0.207562834, -0.596966207, 0.501158655, -2.02486682, 1.06619072, 0.809047997,
    -4.20799446, 2.27064228, -1.76896381, 2.0083282, 1.6891129, 0.866687536,
    0.682436168, -0.347072572, 0.055457551, 0.185145095, -0.277189434, -0.815508127,
    -1.6696924, 0.770055354, 0.0893656611, -1.25780702, -1.57800841, 1.03848362,
    -3.07436442, -0.318013608, -0.320312828, -0.179221258, 1.24224818, 1.20917368,
    -0.339633346, -0.765434146, 1.24995005, 0.346507996, -1.27453876, 1.57500196,
    -0.0265131816, -1.05025053, -0.995731354, 0.856996417, -2.96349669, 0.443668514,
    -0.65255177, -0.379135728, 1.56006706, 0.762663364, -0.26300326, -0.46080935,
    1.0131346, 0.863005698, -1.73906672, 1.66882324,
};

DG_TEST(nn_safetensors_from_transformers) {
  dg_status st;
  dg_status_ok(&st);
  size_t n = strlen(hf_fixture_hex) / 2;
  unsigned char *raw = malloc(n);
  for (size_t i = 0; i < n; i++) {
    unsigned v;
    CHECK(sscanf(hf_fixture_hex + 2 * i, "%2x", &v) == 1);
    raw[i] = (unsigned char)v;
  }
  const char *p = tmp_path("hf.safetensors");
  spit(p, raw, n);
  free(raw);
  nn_config c = {16, 8, 2, 2, 1, 4, 8, 8, 10000.0f, 1e-5f}, d;
  CHECK(!nn_safetensors_read_config(p, &d, &st));
  CHECK_ERR(st, "no dragon.config in __metadata__");
  nn_model m;
  CHECK(nn_model_init(&m, &c, false, &st));
  CHECK(nn_model_reserve(&m, 1, 7, &st));
  CHECK(nn_safetensors_import(&m, p, &st));
  nn_forward(&m, hf_fixture_tokens, NULL, NULL, 1, 7);
  for (int i = 0; i < 7 * 16; i++) CHECK_NEAR(m.acts.logits[i], hf_fixture_logits[i], 2e-5);
  nn_model_free(&m);
}
