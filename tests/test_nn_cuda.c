/* test_nn_cuda.c: the CUDA model (nn_cuda.h) against the C reference.
 *
 * gpu_nn_*: run on a GPU (make test-gpu), skipped elsewhere or in a
 * build without nvcc. Four configs cover the attention kernel's head dims
 * (16, 32, 64, 128), grouped-query and plain heads, QD != C, and T that is
 * and is not a multiple of the 64-row tile. Each checks, against the fp32
 * C reference from the same weights and batch: the logits of a forward
 * without targets, the weighted loss and per-token losses, every gradient
 * tensor, then 10 AdamW steps (losses at every step, parameters at the
 * end). Tolerances are written down below and in docs/model-cuda.md; each
 * comparison prints its worst ratio to the bound, so a run shows the
 * margin. Also: the attention kernels alone against a double-precision
 * attention (T off and on the tile size, GQA ratios, head dims, the fused
 * RoPE backward); two runs are bitwise equal; checkpoints move between the
 * C reference and the CUDA model exactly; bad batches are errors with
 * messages; two GPUs with half the batch each train as one GPU with all
 * of it (through bench/train_bench --dp-check, which forks the ranks).
 *
 * nn_cuda_config_check runs on the CPU tier in CUDA builds.
 */
#include <math.h>
#include <stdlib.h>
#include <unistd.h>
#include <string.h>

#include "dragon/nn.h"
#include "nn_cuda_support.h"
#include "test.h"
#ifdef DG_HAVE_CUDA
#include "dragon/nn_cuda.h"
#endif

#ifdef DG_HAVE_CUDA

/* Gradient tolerances per tensor (elementwise thr as a fraction of the
 * tensor's largest |value|, relative L2). bf16 operands carry ~0.4%
 * rounding per element; the bounds leave room for the error growing
 * through two layers, and a wrong kernel gives a relative L2 near 1. */
static const nt_tolerance grad_tol[NN_PARAM_COUNT] = {
    [NN_PARAM_WTE] = {0.05, NT_BF16_REL, 0.05},  [NN_PARAM_LN1W] = {0.05, NT_BF16_REL, 0.05},
    [NN_PARAM_WQ] = {0.05, NT_BF16_REL, 0.06},   [NN_PARAM_WK] = {0.05, NT_BF16_REL, 0.06},
    [NN_PARAM_WV] = {0.05, NT_BF16_REL, 0.05},   [NN_PARAM_WO] = {0.05, NT_BF16_REL, 0.05},
    [NN_PARAM_LN2W] = {0.05, NT_BF16_REL, 0.05}, [NN_PARAM_W1] = {0.05, NT_BF16_REL, 0.05},
    [NN_PARAM_W3] = {0.05, NT_BF16_REL, 0.05},   [NN_PARAM_W2] = {0.05, NT_BF16_REL, 0.05},
    [NN_PARAM_LNFW] = {0.03, NT_BF16_REL, 0.03}, [NN_PARAM_WLM] = {0.03, NT_BF16_REL, 0.03},
};
static const nt_tolerance logits_tol = {0.02, NT_BF16_REL, 0.02};
static const nt_tolerance losses_tol = {0.01, NT_BF16_REL, 0.01};
static const double LOSS_TOL = 1e-2;       /* |loss_cuda - loss_c| at step 0 */
static const double TRAIN_LOSS_TOL = 3e-2; /* the same over 10 AdamW steps */
static const nt_tolerance params_tol = {0.05, NT_BF16_REL, 0.05}; /* after 10 steps */

/* Parameters after AdamW steps: an element whose gradient is near zero may
 * take its Adam step (about lr in size, whatever the gradient's magnitude)
 * with opposite signs on the two sides when bf16 rounding flips the
 * gradient's sign, so an element may legitimately differ by up to twice
 * the sum of the step sizes. A thousandth of the elements may exceed
 * params_tol's elementwise bound up to that cap; the relative L2 bound
 * (which a wrong kernel misses by far) holds for the whole tensor. */
static bool compare_params(const char *what, const float *a, const float *b, size_t n,
                           double adam_cap) {
  nt_tolerance t = params_tol;
  double maxb = 0, num = 0, den = 0;
  for (size_t i = 0; i < n; i++) {
    maxb = fmax(maxb, fabs(b[i]));
    num += ((double)a[i] - b[i]) * ((double)a[i] - b[i]);
    den += (double)b[i] * b[i];
  }
  size_t over = 0, at = 0;
  double worst = 0;
  for (size_t i = 0; i < n; i++) {
    double d = fabs((double)a[i] - b[i]);
    if (!(d <= t.thr * maxb + t.rel * fabs(b[i]))) over++;
    if (!(d <= worst)) worst = d, at = i; /* NaN counts as worst */
  }
  double l2 = den > 0 ? sqrt(num / den) : sqrt(num);
  bool ok = worst <= adam_cap && (double)over <= 1e-3 * (double)n && l2 <= t.l2 && maxb > 0;
  printf("  %-8s max|ref| %-10.3g beyond bound %zu of %zu, worst %-8.2e (cap %.1e) rel L2 %-9.2e "
         "(<= %.0e)%s\n", what, maxb, over, n, worst, adam_cap, l2, t.l2, ok ? "" : "  <-- FAILS");
  if (!ok)
    dg_test_fail(__FILE__, __LINE__, "%s: element %zu: cuda %.6g vs c %.6g; %zu beyond bound; rel L2 %.3g",
                 what, at, (double)a[at], (double)b[at], over, l2);
  return ok;
}

typedef struct {
  const char *name;
  nn_config cfg;
  int B, T;
} case_def;

static nn_config small_config(int V, int C, int L, int NH, int NKV, int HD, int F, int maxT) {
  nn_config c;
  memset(&c, 0, sizeof c);
  c.vocab_size = V, c.d_model = C, c.n_layers = L, c.n_heads = NH, c.n_kv_heads = NKV;
  c.head_dim = HD, c.ffn_hidden = F, c.max_seq_len = maxT, c.rope_theta = 10000.0f;
  c.norm_eps = 1e-6f;
  return c;
}

/* The C model with the reference's initial weights, q and k projections
 * scaled up so that attention is far from uniform, and a batch with
 * weights (a fifth of them zero). */
static bool make_c_model(nn_model *m, const nn_config *cfg, int B, int T, uint64_t seed) {
  dg_status st;
  if (!nn_model_init(m, cfg, true, &st) || !nn_model_reserve(m, B, T, &st)) {
    dg_test_fail(__FILE__, __LINE__, "C model: %s", st.msg);
    return false;
  }
  nn_model_init_weights(m, seed);
  for (size_t i = 0; i < m->param_sizes[NN_PARAM_WQ]; i++) m->params.wq[i] *= 4.0f;
  for (size_t i = 0; i < m->param_sizes[NN_PARAM_WK]; i++) m->params.wk[i] *= 4.0f;
  return true;
}

static void make_batch(int32_t *in, int32_t *tg, float *w, int n, int V, uint64_t seed) {
  dg_rng r;
  dg_rng_seed(&r, seed);
  for (int i = 0; i < n; i++) {
    in[i] = (int32_t)dg_rng_below(&r, (uint64_t)V);
    tg[i] = (int32_t)dg_rng_below(&r, (uint64_t)V);
    w[i] = dg_rng_below(&r, 5) == 0 ? 0.0f : (float)(0.25 + 1.5 * dg_rng_uniform(&r));
  }
}

static nn_cuda_model *cuda_from(const nn_model *ref, int B, int T) {
  dg_status st;
  nn_cuda_model *g = NULL;
  if (!nn_cuda_model_init(&g, &ref->cfg, B, T, &st) || !nn_cuda_model_load(g, ref, false, &st)) {
    dg_test_fail(__FILE__, __LINE__, "CUDA model: %s", st.msg);
    nn_cuda_model_free(g);
    return NULL;
  }
  return g;
}

static void run_case(const case_def *c) {
  printf("  -- %s: V %d C %d L %d heads %d/%d HD %d F %d, batch %dx%d\n", c->name,
         c->cfg.vocab_size, c->cfg.d_model, c->cfg.n_layers, c->cfg.n_heads, c->cfg.n_kv_heads,
         c->cfg.head_dim, c->cfg.ffn_hidden, c->B, c->T);
  int B = c->B, T = c->T, N = B * T, V = c->cfg.vocab_size;
  nn_model ref;
  memset(&ref, 0, sizeof ref);
  if (!make_c_model(&ref, &c->cfg, B, T, 1234)) return;
  nn_cuda_model *g = cuda_from(&ref, B, T);
  size_t P = ref.num_params;
  int32_t *in = malloc(sizeof(int32_t) * N), *tg = malloc(sizeof(int32_t) * N);
  float *w = malloc(sizeof(float) * N), *buf = malloc(sizeof(float) * ((size_t)N * V + P));
  make_batch(in, tg, w, N, V, 99);
  float loss_g = 0, loss_c = 0, loss_first = 0;
  if (!g) goto done;

  /* logits (a forward without targets keeps them) */
  nn_forward(&ref, in, NULL, NULL, B, T);
  CHECK_GPU(nn_cuda_forward(g, in, NULL, NULL, B, T, &loss_g, ST));
  CHECK(loss_g == -1.0f);
  CHECK_GPU(nn_cuda_copy_logits(g, buf, ST));
  if (!nt_compare("logits", buf, ref.acts.logits, (size_t)N * V, logits_tol)) goto done;

  /* loss with per-token weights, and the per-token losses */
  loss_c = nn_forward(&ref, in, tg, w, B, T);
  CHECK_GPU(nn_cuda_forward(g, in, tg, w, B, T, &loss_g, ST));
  printf("  loss     cuda %.6f c %.6f diff %.2e (<= %.0e)\n", loss_g, loss_c,
         fabs((double)loss_g - loss_c), LOSS_TOL);
  CHECK_NEAR(loss_g, loss_c, LOSS_TOL);
  CHECK_GPU(nn_cuda_copy_losses(g, buf, ST));
  if (!nt_compare("losses", buf, ref.acts.losses, (size_t)N, losses_tol)) goto done;

  /* every gradient tensor */
  nn_zero_grad(&ref);
  nn_backward(&ref);
  CHECK_GPU(nn_cuda_zero_grad(g, ST) && nn_cuda_backward(g, ST));
  CHECK_GPU(nn_cuda_copy_grads(g, buf, ST));
  {
    size_t off = 0;
    bool all = true;
    for (int i = 0; i < NN_PARAM_COUNT; i++) {
      all &= nt_compare(nn_param_name((nn_param_id)i), buf + off, ref.grads_mem + off,
                     ref.param_sizes[i], grad_tol[i]);
      off += ref.param_sizes[i];
    }
    if (!all) goto done;
  }

  /* 10 AdamW steps on the same batch: the gradients above are step 0's */
  nn_optim o;
  nn_optim_default(&o);
  o.lr = 1e-3f;
  o.warmup_steps = 2;
  o.total_steps = 10;
  ref.opt = o;
  *nn_cuda_model_optim(g) = o;
  loss_first = loss_c;
  double adam_steps = 0; /* the sum of the learning rates of the steps */
  {
    double worst = 0;
    for (int step = 0; step < 10; step++) {
      if (step > 0) {
        loss_c = nn_forward(&ref, in, tg, w, B, T);
        nn_zero_grad(&ref);
        nn_backward(&ref);
        CHECK_GPU(nn_cuda_forward(g, in, tg, w, B, T, &loss_g, ST) && nn_cuda_zero_grad(g, ST) &&
                  nn_cuda_backward(g, ST));
        worst = fmax(worst, fabs((double)loss_g - loss_c));
        CHECK_MSG(fabs((double)loss_g - loss_c) <= TRAIN_LOSS_TOL,
                  "step %d: loss cuda %.6f vs c %.6f", step, (double)loss_g, (double)loss_c);
      }
      adam_steps += nn_optim_lr(&o, step);
      float norm_g = 0, norm_c = nn_update(&ref, step);
      CHECK_GPU(nn_cuda_update(g, step, &norm_g, ST));
      CHECK_MSG(fabs((double)norm_g - norm_c) <= 0.05 * norm_c, "step %d: grad norm %.6g vs %.6g",
                step, (double)norm_g, (double)norm_c);
    }
    printf("  train    10 steps, loss c %.4f -> %.4f, worst |loss diff| %.2e (<= %.0e)\n",
           loss_first, loss_c, worst, TRAIN_LOSS_TOL);
    CHECK(loss_c < loss_first); /* the steps did train */
  }
  CHECK_GPU(nn_cuda_copy_params(g, buf, ST));
  {
    size_t off = 0;
    for (int i = 0; i < NN_PARAM_COUNT; i++) {
      char name[32];
      snprintf(name, sizeof name, "p.%s", nn_param_name((nn_param_id)i));
      compare_params(name, buf + off, ref.params_mem + off, ref.param_sizes[i], 2 * adam_steps);
      off += ref.param_sizes[i];
    }
  }
done:
  nn_cuda_model_free(g);
  nn_model_free(&ref);
  free(in);
  free(tg);
  free(w);
  free(buf);
}

/* ---- the attention kernels alone ------------------------------------------ */

/* x rounded to bf16 (to nearest, ties to even) as the upload rounds it, so
 * the reference sees the kernels' inputs. */
static float round_bf16(float x) {
  uint32_t u;
  memcpy(&u, &x, sizeof u);
  if ((u & 0x7f800000u) != 0x7f800000u) u += 0x7fffu + ((u >> 16) & 1u);
  u &= 0xffff0000u;
  memcpy(&x, &u, sizeof x);
  return x;
}

typedef struct {
  int B, T, NH, NKV, HD;
  bool rope;
} att_case;

/* Causal GQA attention in double, the plain way: probabilities row by
 * row, then out, lse and the gradients (dq, dk rotated back by RoPE with
 * the tables when given). q (B, T, NH, HD), k, v (B, T, NKV, HD). */
static void attention_ref(const att_case *c, const float *q, const float *k, const float *v,
                          const float *dout, const float *cosb, const float *sinb, double *out,
                          double *lse, double *dq, double *dk, double *dv) {
  int B = c->B, T = c->T, NH = c->NH, NKV = c->NKV, HD = c->HD, G = NH / NKV, H2 = HD / 2;
  size_t QD = (size_t)NH * HD, KVD = (size_t)NKV * HD;
  double scale = 1.0 / sqrt((double)HD), *p = malloc(sizeof(double) * T);
  memset(out, 0, sizeof(double) * B * T * QD);
  memset(dq, 0, sizeof(double) * B * T * QD);
  memset(dk, 0, sizeof(double) * B * T * KVD);
  memset(dv, 0, sizeof(double) * B * T * KVD);
  for (int b = 0; b < B; b++)
    for (int h = 0; h < NH; h++)
      for (int t = 0; t < T; t++) {
        const float *qr = q + ((size_t)b * T + t) * QD + (size_t)h * HD;
        const float *dor = dout + ((size_t)b * T + t) * QD + (size_t)h * HD;
        double *o = out + ((size_t)b * T + t) * QD + (size_t)h * HD, mx = -INFINITY, sum = 0;
        for (int j = 0; j <= t; j++) {
          const float *kr = k + ((size_t)b * T + j) * KVD + (size_t)(h / G) * HD;
          double sc = 0;
          for (int d = 0; d < HD; d++) sc += (double)qr[d] * kr[d];
          p[j] = sc * scale;
          mx = fmax(mx, p[j]);
        }
        for (int j = 0; j <= t; j++) sum += (p[j] = exp(p[j] - mx));
        lse[((size_t)b * NH + h) * T + t] = mx + log(sum);
        for (int j = 0; j <= t; j++) {
          p[j] /= sum;
          const float *vr = v + ((size_t)b * T + j) * KVD + (size_t)(h / G) * HD;
          for (int d = 0; d < HD; d++) o[d] += p[j] * vr[d];
        }
        double delta = 0;
        for (int d = 0; d < HD; d++) delta += dor[d] * o[d];
        for (int j = 0; j <= t; j++) {
          size_t kv = ((size_t)b * T + j) * KVD + (size_t)(h / G) * HD;
          double dp = 0;
          for (int d = 0; d < HD; d++) dp += (double)dor[d] * v[kv + d];
          double ds = p[j] * (dp - delta) * scale;
          for (int d = 0; d < HD; d++) {
            dq[((size_t)b * T + t) * QD + (size_t)h * HD + d] += ds * k[kv + d];
            dk[kv + d] += ds * qr[d];
            dv[kv + d] += p[j] * dor[d];
          }
        }
      }
  free(p);
  if (!cosb) return;
  for (int b = 0; b < B; b++)
    for (int t = 0; t < T; t++)
      for (int which = 0; which < 2; which++) {
        int nh = which ? NKV : NH;
        for (int h = 0; h < nh; h++) {
          double *r = (which ? dk : dq) + (((size_t)b * T + t) * nh + h) * HD;
          for (int i = 0; i < H2; i++) { /* the RoPE backward: rotate by -angle */
            double cs = cosb[(size_t)t * H2 + i], sn = sinb[(size_t)t * H2 + i];
            double x1 = r[i], x2 = r[i + H2];
            r[i] = x1 * cs + x2 * sn;
            r[i + H2] = x2 * cs - x1 * sn;
          }
        }
      }
}

/* Elementwise and relative L2 bounds of the kernels' bf16 results against
 * the double reference: bf16 outputs and bf16 probabilities in P V and dS
 * give ~0.3% relative L2 (measured in emulation); the bounds leave room,
 * and a wrong tile, mask or fragment gives an error near 1. */
static const nt_tolerance att_out_tol = {0.01, NT_BF16_REL, 0.01};
static const nt_tolerance att_grad_tol = {0.02, NT_BF16_REL, 0.02};
static const nt_tolerance att_lse_tol = {1e-4, 1e-4, 1e-4};

static void run_attention_case(const att_case *c, uint64_t seed) {
  int B = c->B, T = c->T, NH = c->NH, NKV = c->NKV, HD = c->HD;
  printf("  -- attention B %d T %d heads %d/%d HD %d%s\n", B, T, NH, NKV, HD,
         c->rope ? ", RoPE backward" : "");
  size_t nq = (size_t)B * T * NH * HD, nkv = (size_t)B * T * NKV * HD, nr = (size_t)B * NH * T;
  size_t nrope = (size_t)T * (HD / 2);
  size_t nf = 3 * nq + 2 * nkv + 3 * nq + 3 * nkv + nr + 2 * nrope;
  float *fbuf = malloc(sizeof(float) * nf);
  double *dbuf = malloc(sizeof(double) * (2 * nq + 2 * nkv + nr));
  float *q = fbuf, *dout = q + nq, *out = dout + nq, *k = out + nq, *v = k + nkv;
  float *dq = v + nkv, *dk = dq + nq, *dv = dk + nkv, *lse = dv + nkv, *cosb = lse + nr;
  float *sinb = cosb + nrope, *conv = sinb + nrope; /* conv: nq + 2 nkv floats of scratch */
  double *rout = dbuf, *rdq = rout + nq, *rdk = rdq + nq, *rdv = rdk + nkv, *rlse = rdv + nkv;
  dg_rng r;
  dg_rng_seed(&r, seed);
  /* q, k large enough that rows are far from uniform */
  for (size_t i = 0; i < nq; i++) q[i] = round_bf16((float)(1.5 * dg_rng_normal(&r)));
  for (size_t i = 0; i < nkv; i++) k[i] = round_bf16((float)(1.5 * dg_rng_normal(&r)));
  for (size_t i = 0; i < nkv; i++) v[i] = round_bf16((float)(2 * dg_rng_uniform(&r) - 1));
  for (size_t i = 0; i < nq; i++) dout[i] = round_bf16((float)(2 * dg_rng_uniform(&r) - 1));
  nn_rope_table(cosb, sinb, 10000.0f, HD, T);
  attention_ref(c, q, k, v, dout, c->rope ? cosb : NULL, c->rope ? sinb : NULL, rout, rlse, rdq,
                rdk, rdv);
  /* every shape of each kernel against the same reference: mma.sync with
   * one m-tile a warp and 2 dK/dV blocks an SM, then two and 3 (HD 128
   * has one shape); and where the device runs them (HD 64 on sm_90), the
   * wgmma kernels with one warpgroup a block (3 and 2 dK/dV blocks an SM),
   * then two */
  nn_cuda_attention_tiles shapes[5] = {{1, 1, 2, 1, 0, 0, 0}, {2, 2, 3, 1, 0, 0, 0}};
  int nshapes = HD <= 64 ? 2 : 1;
  if (nn_cuda_attention_wgmma(HD)) {
    shapes[nshapes++] = (nn_cuda_attention_tiles){0, 0, 3, 2, 1, 1, 1};
    shapes[nshapes++] = (nn_cuda_attention_tiles){0, 0, 2, 2, 1, 1, 1};
    shapes[nshapes++] = (nn_cuda_attention_tiles){0, 0, 0, 2, 2, 2, 2};
  }
  for (int si = 0; si < nshapes; si++) {
    const nn_cuda_attention_tiles tiles = shapes[si];
    if (tiles.engine == 2)
      printf("     wgmma, %d warpgroup(s) a block, %d dK/dV blocks an SM\n", tiles.fwd_groups,
             tiles.dkdv_groups == 2 ? 1 : tiles.dkdv_blocks);
    else
      printf("     mma.sync, %d m-tile(s) a warp, %d dK/dV blocks an SM\n", tiles.fwd_mtiles,
             tiles.dkdv_blocks);
    dg_status st;
    dg_status_ok(&st);
    bool ran = nn_cuda_attention_run(q, k, v, dout, B, T, NH, NKV, HD, c->rope ? cosb : NULL,
                                     c->rope ? sinb : NULL, &tiles, out, lse, dq, dk, dv, &st);
    if (!ran) {
      dg_test_fail(__FILE__, __LINE__, "nn_cuda_attention_run: %s", st.msg);
      break;
    }
    struct {
      const char *name;
      const float *got;
      const double *want;
      size_t n;
      nt_tolerance tol;
    } cmp[] = {{"out", out, rout, nq, att_out_tol},    {"lse", lse, rlse, nr, att_lse_tol},
               {"dq", dq, rdq, nq, att_grad_tol},      {"dk", dk, rdk, nkv, att_grad_tol},
               {"dv", dv, rdv, nkv, att_grad_tol}};
    for (size_t i = 0; i < sizeof cmp / sizeof cmp[0]; i++) {
      for (size_t j = 0; j < cmp[i].n; j++) conv[j] = (float)cmp[i].want[j];
      nt_compare(cmp[i].name, cmp[i].got, conv, cmp[i].n, cmp[i].tol);
    }
  }
  free(fbuf);
  free(dbuf);
}

#endif /* DG_HAVE_CUDA */

#ifndef DG_HAVE_CUDA
static void no_cuda_note(void) { dg_test_skip("built without CUDA (no nvcc)"); }
#endif

DG_TEST(gpu_nn_matches_c_tiny) {
#ifdef DG_HAVE_CUDA
  if (!nt_gpu_here()) return;
  case_def c = {"tiny", {0}, 4, 64};
  dg_status st;
  CHECK(nn_config_named("tiny", &c.cfg, &st));
  run_case(&c);
#else
  no_cuda_note();
#endif
}

DG_TEST(gpu_nn_matches_c_gqa) {
#ifdef DG_HAVE_CUDA
  if (!nt_gpu_here()) return;
  /* HD 64 as the 19m and 88m configs, QD 256 != C 128, T 150: three
   * query tiles, the last one partial */
  case_def c = {"gqa-hd64", small_config(384, 128, 2, 4, 2, 64, 352, 160), 3, 150};
  run_case(&c);
#else
  no_cuda_note();
#endif
}

DG_TEST(gpu_nn_matches_c_head_dims) {
#ifdef DG_HAVE_CUDA
  if (!nt_gpu_here()) return;
  case_def c32 = {"mha-hd32", small_config(200, 96, 1, 4, 4, 32, 200, 128), 2, 100};
  case_def c128 = {"gqa-hd128", small_config(256, 128, 1, 4, 1, 128, 256, 128), 2, 128};
  run_case(&c32);
  run_case(&c128);
#else
  no_cuda_note();
#endif
}

/* The attention kernels against a double reference: T not a multiple of
 * the 64-row tile (and of the two-warpgroup 128-row block: 65 leaves one
 * row to the second warpgroup) and T = 1024 (the production length, 16
 * tiles), GQA ratios 1, 2 and 3, head dims 64 and 32, and the other two
 * head dims; with and without the RoPE backward fused into dQ and dK. */
DG_TEST(gpu_nn_attention_matches_reference) {
#ifdef DG_HAVE_CUDA
  if (!nt_gpu_here()) return;
  const att_case cases[] = {
      {2, 100, 4, 4, 64, true},    {2, 100, 6, 2, 32, false}, {1, 1024, 6, 2, 64, true},
      {1, 1024, 2, 2, 32, false},  {2, 77, 3, 1, 128, true},  {1, 130, 2, 1, 16, true},
      {3, 65, 2, 1, 64, false},    {2, 300, 6, 3, 64, true},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) run_attention_case(&cases[i], 40 + i);
#else
  no_cuda_note();
#endif
}

DG_TEST(gpu_nn_deterministic) {
#ifdef DG_HAVE_CUDA
  if (!nt_gpu_here()) return;
  nn_config cfg = small_config(384, 128, 2, 4, 2, 64, 352, 160);
  int B = 2, T = 130, N = B * T;
  nn_model ref;
  memset(&ref, 0, sizeof ref);
  if (!make_c_model(&ref, &cfg, B, T, 5)) return;
  nn_cuda_model *g[2] = {cuda_from(&ref, B, T), cuda_from(&ref, B, T)};
  size_t P = ref.num_params;
  float *pa = malloc(sizeof(float) * P), *pb = malloc(sizeof(float) * P);
  int32_t *in = malloc(sizeof(int32_t) * N), *tg = malloc(sizeof(int32_t) * N);
  float *w = malloc(sizeof(float) * N);
  make_batch(in, tg, w, N, cfg.vocab_size, 3);
  float loss[2][3], norm[2][3], x;
  dg_status st;
  if (!g[0] || !g[1]) goto done;
  /* nothing to read before a forward with targets and an update */
  CHECK(!nn_cuda_last_loss(g[1], &x, &st) && strstr(st.msg, "no forward"));
  CHECK(!nn_cuda_last_norm(g[1], &x, &st) && strstr(st.msg, "no update"));
  /* model 0 waits at every step; model 1 queues its three steps without
   * waiting and reads the last step's loss and norm afterwards (its
   * parameters and gradients are compared below): the same bits */
  for (int step = 0; step < 3; step++)
    CHECK_GPU(nn_cuda_forward(g[0], in, tg, w, B, T, &loss[0][step], ST) &&
              nn_cuda_zero_grad(g[0], ST) && nn_cuda_backward(g[0], ST) &&
              nn_cuda_update(g[0], step, &norm[0][step], ST));
  /* each step's results are read once the next one is queued (as the SFT
   * loop does), the last step's after it */
  for (int step = 0; step < 3; step++) {
    CHECK_GPU(nn_cuda_forward(g[1], in, tg, w, B, T, NULL, ST) && nn_cuda_zero_grad(g[1], ST) &&
              nn_cuda_backward(g[1], ST) && nn_cuda_update(g[1], step, NULL, ST));
    if (step > 0)
      CHECK_GPU(nn_cuda_step_stats(g[1], step - 1, &loss[1][step - 1], &norm[1][step - 1], ST));
  }
  CHECK_GPU(nn_cuda_step_stats(g[1], 2, &loss[1][2], NULL, ST) &&
            nn_cuda_step_stats(g[1], 2, NULL, &norm[1][2], ST) &&
            nn_cuda_last_loss(g[1], &x, ST));
  CHECK(memcmp(&x, &loss[1][2], sizeof x) == 0);
  for (int step = 0; step < 3; step++) {
    CHECK_MSG(memcmp(&loss[0][step], &loss[1][step], sizeof(float)) == 0,
              "step %d: loss %.9g vs %.9g", step, (double)loss[0][step], (double)loss[1][step]);
    CHECK_MSG(memcmp(&norm[0][step], &norm[1][step], sizeof(float)) == 0,
              "step %d: norm %.9g vs %.9g", step, (double)norm[0][step], (double)norm[1][step]);
  }
  /* only the last two updates are kept */
  CHECK(!nn_cuda_step_stats(g[1], 0, &x, NULL, &st) && strstr(st.msg, "step 0 is not one"));
  CHECK_GPU(nn_cuda_copy_params(g[0], pa, ST) && nn_cuda_copy_params(g[1], pb, ST));
  CHECK(memcmp(pa, pb, sizeof(float) * P) == 0);
  CHECK_GPU(nn_cuda_copy_grads(g[0], pa, ST) && nn_cuda_copy_grads(g[1], pb, ST));
  CHECK(memcmp(pa, pb, sizeof(float) * P) == 0);
done:
  nn_cuda_model_free(g[0]);
  nn_cuda_model_free(g[1]);
  nn_model_free(&ref);
  free(pa);
  free(pb);
  free(in);
  free(tg);
  free(w);
#else
  no_cuda_note();
#endif
}

DG_TEST(gpu_nn_checkpoint_round_trip) {
#ifdef DG_HAVE_CUDA
  if (!nt_gpu_here()) return;
  dg_status st;
  nn_config cfg;
  CHECK(nn_config_named("tiny", &cfg, &st));
  int B = 2, T = 32, N = B * T;
  char path_a[300], path_b[300], path_s[300];
  snprintf(path_a, sizeof path_a, "%s/cuda_a.ckpt", dg_test_tmpdir());
  snprintf(path_b, sizeof path_b, "%s/cuda_b.ckpt", dg_test_tmpdir());
  snprintf(path_s, sizeof path_s, "%s/cuda_b.state", dg_test_tmpdir());
  nn_model a, b, c;
  memset(&a, 0, sizeof a);
  memset(&b, 0, sizeof b);
  memset(&c, 0, sizeof c);
  nn_cuda_model *g = NULL, *h = NULL;
  size_t P = 0;
  float *pg = NULL;
  int32_t in[64], tg[64];
  float w[64], l1 = 0, l2 = 0;
  make_batch(in, tg, w, N, cfg.vocab_size, 11);
  CHECK(nn_model_init(&a, &cfg, true, &st));
  nn_model_init_weights(&a, 77);
  CHECK(nn_checkpoint_save(&a, path_a, &st));
  /* C checkpoint -> C model -> GPU: the parameters arrive exactly */
  CHECK_GPU(nn_checkpoint_load(&b, path_a, true, ST));
  g = cuda_from(&b, B, T);
  if (!g) goto done;
  P = b.num_params;
  pg = malloc(sizeof(float) * P);
  CHECK_GPU(nn_cuda_copy_params(g, pg, ST));
  CHECK(memcmp(pg, a.params_mem, sizeof(float) * P) == 0);
  /* two steps on the GPU, then GPU -> C model -> checkpoint -> C model */
  for (int step = 0; step < 2; step++)
    CHECK_GPU(nn_cuda_forward(g, in, tg, w, B, T, &l1, ST) && nn_cuda_zero_grad(g, ST) &&
              nn_cuda_backward(g, ST) && nn_cuda_update(g, step, NULL, ST));
  CHECK_GPU(nn_cuda_model_store(g, &b, true, ST));
  CHECK_GPU(nn_checkpoint_save(&b, path_b, ST) && nn_state_save(&b, 2, NULL, path_s, ST));
  CHECK_GPU(nn_checkpoint_load(&c, path_b, true, ST));
  int64_t step_read = 0;
  CHECK_GPU(nn_state_load(&c, path_s, &step_read, NULL, ST));
  CHECK_EQ(step_read, 2);
  CHECK_GPU(nn_cuda_copy_params(g, pg, ST));
  CHECK(memcmp(pg, c.params_mem, sizeof(float) * P) == 0);
  CHECK(memcmp(pg, a.params_mem, sizeof(float) * P) != 0); /* training moved them */
  /* resuming from the files continues exactly as the model that stayed */
  c.opt = *nn_cuda_model_optim(g);
  h = NULL;
  CHECK_GPU(nn_cuda_model_init(&h, &cfg, B, T, ST) && nn_cuda_model_load(h, &c, true, ST));
  CHECK_GPU(nn_cuda_forward(g, in, tg, w, B, T, &l1, ST) && nn_cuda_zero_grad(g, ST) &&
            nn_cuda_backward(g, ST) && nn_cuda_update(g, 2, NULL, ST));
  CHECK_GPU(nn_cuda_forward(h, in, tg, w, B, T, &l2, ST) && nn_cuda_zero_grad(h, ST) &&
            nn_cuda_backward(h, ST) && nn_cuda_update(h, 2, NULL, ST));
  CHECK(memcmp(&l1, &l2, sizeof l1) == 0);
  CHECK_GPU(nn_cuda_copy_params(g, pg, ST));
  {
    float *ph = malloc(sizeof(float) * P);
    bool same = nn_cuda_copy_params(h, ph, &st) && memcmp(pg, ph, sizeof(float) * P) == 0;
    free(ph);
    CHECK(same);
  }
done:
  nn_cuda_model_free(g);
  nn_cuda_model_free(h);
  nn_model_free(&a);
  nn_model_free(&b);
  nn_model_free(&c);
  free(pg);
#else
  no_cuda_note();
#endif
}

DG_TEST(gpu_nn_rejects_bad_input) {
#ifdef DG_HAVE_CUDA
  if (!nt_gpu_here()) return;
  dg_status st;
  nn_config cfg, other;
  CHECK(nn_config_named("tiny", &cfg, &st));
  other = cfg;
  other.ffn_hidden = 64;
  nn_model ref, ref2;
  memset(&ref, 0, sizeof ref);
  memset(&ref2, 0, sizeof ref2);
  nn_cuda_model *g = NULL;
  int32_t in[32], tg[32];
  float w[32], loss = 0;
  static float logits[32 * 256];
  make_batch(in, tg, w, 32, cfg.vocab_size, 1);
  CHECK(nn_model_init(&ref, &cfg, true, &st) && nn_model_init(&ref2, &other, false, &st));
  nn_model_init_weights(&ref, 3);
  g = cuda_from(&ref, 2, 16);
  if (!g) goto done;
  CHECK(!nn_cuda_model_load(g, &ref2, false, &st));
  CHECK_ERR(st, "another config");
  CHECK(!nn_cuda_forward(g, in, tg, w, 4, 16, &loss, &st));
  CHECK_ERR(st, "exceeds the reserved 2x16");
  in[5] = cfg.vocab_size;
  CHECK(!nn_cuda_forward(g, in, tg, w, 2, 16, &loss, &st));
  CHECK_ERR(st, "inputs[0][5] = 256 is outside the vocabulary");
  in[5] = 0;
  tg[17] = -1;
  CHECK(!nn_cuda_forward(g, in, tg, w, 2, 16, &loss, &st));
  CHECK_ERR(st, "targets[1][1] = -1");
  tg[17] = 0;
  w[3] = -1.0f;
  CHECK(!nn_cuda_forward(g, in, tg, w, 2, 16, &loss, &st));
  CHECK_ERR(st, "weights[0][3]");
  CHECK(!nn_cuda_forward_weighted(g, in, tg, w, 0.0, 2, 16, &loss, &st));
  CHECK_ERR(st, "normaliser");
  w[3] = 1.0f;
  CHECK(nn_cuda_forward(g, in, NULL, NULL, 2, 16, &loss, &st));
  CHECK(!nn_cuda_backward(g, &st));
  CHECK_ERR(st, "no targets");
  CHECK(nn_cuda_forward(g, in, tg, w, 2, 16, &loss, &st));
  CHECK(!nn_cuda_copy_logits(g, logits, &st));
  CHECK_ERR(st, "last forward had targets");
  CHECK(isfinite(loss) && loss > 0);
  /* zero total weight: loss 0, as the reference */
  for (int i = 0; i < 32; i++) w[i] = 0.0f;
  CHECK(nn_cuda_forward(g, in, tg, w, 2, 16, &loss, &st));
  CHECK(loss == 0.0f);
done:
  nn_cuda_model_free(g);
  nn_model_free(&ref);
  nn_model_free(&ref2);
#else
  no_cuda_note();
#endif
}

DG_TEST(gpu_nn_two_gpus_match_one) {
#ifdef DG_HAVE_CUDA
  dg_status st;
  dg_status_ok(&st);
  int n = nn_cuda_device_count(&st);
  if (n < 2) {
    SKIP("%d GPU(s), the two-GPU check needs 2%s%s", n, n ? "" : ": ", n ? "" : st.msg);
  }
  /* the ranks are forked by train_bench, which has not touched CUDA */
  /* train_bench sits beside the test binary (and beside $DRAGON_BIN) */
  const char *bin = getenv("DRAGON_BIN");
  char dir[300], cmd[700], self[300];
  ssize_t sl = readlink("/proc/self/exe", self, sizeof self - 1);
  if (sl > 0) self[sl] = 0;
  snprintf(dir, sizeof dir, "%s", bin ? bin : sl > 0 ? self : "build/dragon");
  char *slash = strrchr(dir, '/');
  if (slash) *slash = 0;
  else snprintf(dir, sizeof dir, ".");
  snprintf(cmd, sizeof cmd, "%s/train_bench --dp-check --timeout 300 2>&1", dir);
  FILE *p = popen(cmd, "r");
  CHECK(p != NULL);
  dg_str out;
  dg_str_init(&out);
  char buf[4096];
  size_t k;
  while ((k = fread(buf, 1, sizeof buf, p)) > 0) dg_str_putn(&out, buf, k);
  int rc = pclose(p);
  fputs(out.s, stdout);
  bool ok = rc == 0 && strstr(out.s, "dp-check: ok") != NULL;
  dg_str_free(&out);
  CHECK_MSG(ok, "%s failed (exit status %d)", cmd, rc);
#else
  no_cuda_note();
#endif
}

DG_TEST(nn_cuda_config_check) {
#ifdef DG_HAVE_CUDA
  dg_status st;
  nn_config cfg;
  CHECK(nn_config_named("19m", &cfg, &st));
  CHECK(nn_cuda_config_check(&cfg, &st));
  CHECK(nn_config_named("tiny", &cfg, &st));
  CHECK(nn_cuda_config_check(&cfg, &st));
  cfg.head_dim = 24;
  CHECK(!nn_cuda_config_check(&cfg, &st));
  CHECK_ERR(st, "head_dim 24 is not supported");
  cfg.head_dim = 16;
  cfg.n_kv_heads = 3; /* 4 heads: not a multiple */
  CHECK(!nn_cuda_config_check(&cfg, &st));
  /* the memory estimate grows with the batch and covers the parameters */
  nn_config big;
  CHECK(nn_config_named("88m", &big, &st));
  int64_t b1 = nn_cuda_model_bytes(&big, 1, 1024), b2 = nn_cuda_model_bytes(&big, 2, 1024);
  int64_t b32 = nn_cuda_model_bytes(&big, 32, 1024);
  CHECK(b1 > 18 * nn_config_param_count(&big)); /* fp32 x4 + bf16 */
  CHECK(b2 > b1 && llabs((b32 - b1) - 31 * (b2 - b1)) < b2 - b1); /* linear in B */
#else
  no_cuda_note();
#endif
}

/* The attention entry points check their arguments before touching the
 * device: kernel shapes out of range, and the timing's repetitions. */
DG_TEST(nn_cuda_attention_rejects_bad_tiles) {
#ifdef DG_HAVE_CUDA
  dg_status st;
  float x[64] = {0}, out[64], lse[4], dq[64], dk[64], dv[64];
  nn_cuda_attention_tiles bad_m = {3, 0, 0}, bad_k = {0, 0, 5};
  double f = 0, b = 0;
  CHECK(!nn_cuda_attention_run(x, x, x, x, 1, 4, 1, 1, 16, NULL, NULL, &bad_m, out, lse, dq, dk,
                               dv, &st));
  CHECK_ERR(st, "m-tiles a warp 3/0");
  CHECK(!nn_cuda_attention_run(x, x, x, NULL, 1, 4, 1, 1, 16, NULL, NULL, &bad_k, out, lse, NULL,
                               NULL, NULL, &st));
  CHECK_ERR(st, "dK/dV blocks an SM 5");
  nn_cuda_attention_tiles bad_e = {0, 0, 0, 3, 0, 0, 0}, bad_g = {0, 0, 0, 1, 0, 3, 0};
  nn_cuda_attention_tiles wg16 = {0, 0, 0, 2, 0, 0, 0};
  CHECK(!nn_cuda_attention_run(x, x, x, NULL, 1, 4, 1, 1, 16, NULL, NULL, &bad_e, out, lse, NULL,
                               NULL, NULL, &st));
  CHECK_ERR(st, "engine 3");
  CHECK(!nn_cuda_attention_run(x, x, x, NULL, 1, 4, 1, 1, 16, NULL, NULL, &bad_g, out, lse, NULL,
                               NULL, NULL, &st));
  CHECK_ERR(st, "warpgroups a block 0/3/0");
  CHECK(!nn_cuda_attention_time(1, 4, 1, 1, 16, &wg16, 5, &f, &b, &st));
  CHECK_ERR(st, "need head_dim 64");
  CHECK(!nn_cuda_attention_time(1, 4, 1, 1, 16, NULL, 0, &f, &b, &st));
  CHECK_ERR(st, "reps 0 out of range");
  CHECK(!nn_cuda_attention_time(1, 4, 1, 1, 24, NULL, 5, &f, &b, &st));
  CHECK_ERR(st, "head_dim 24");
#else
  no_cuda_note();
#endif
}
