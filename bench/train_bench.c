/* train_bench.c: training throughput of the CUDA model, and the check that
 * data-parallel training over two GPUs matches one GPU.
 *
 * Bench (default): for each config (19m, 88m: the models of the PyTorch
 * anchor, anchors/torch_llama_train.py, at its batch sizes 64 and 32 x
 * 1024 per GPU) and each GPU count, random tokens as the anchor uses,
 * warm-up steps, then timed steps of forward + backward + AdamW, queued
 * without waiting for the device (the loss and gradient norm are read
 * after the last step, as the anchor reads nothing in its loop); prints
 * tokens/s and MFU against the card's bf16 matmul rate, measured with
 * cuBLASLt (8192^3) in the same run unless --peak-tflops is given. FLOPs
 * per step are the anchor's formula: 6 * params * tokens + the causal
 * attention's 12 * L * QD * T * tokens / 2. Several GPUs are data parallel
 * (the same per-GPU batch on each: weak scaling).
 *
 * --dp-check: a small GQA model (V 512, C 128, L 2, 4/2 heads, HD 32)
 * trained 10 AdamW steps on one fixed batch of B 8 x T 96 with per-token
 * loss weights (zeros included), on one GPU with the whole batch and on two
 * with half each; the losses must agree within 5e-3 and the gradient norms
 * within 1% (bf16 matmuls over different row counts round differently).
 *
 * Each measurement runs in processes forked by nn_cuda_dp_launch; this
 * process never initialises CUDA itself. Without a CUDA build it says so
 * and exits 1.
 *
 * usage: train_bench [--configs 19m,88m] [--gpus 1,2] [--batch B] [--seq T]
 *        [--steps N] [--warmup N] [--peak-tflops X] [--timeout S] [--dp-check]
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dragon/base.h"
#include "dragon/nn.h"
#ifdef DG_HAVE_CUDA
#include "dragon/nn_cuda.h"
#endif

typedef struct {
  const char *configs, *gpus;
  int64_t batch, seq, steps, warmup, timeout;
  double peak;
  bool dp_check;
} options;

static bool arg_int(int argc, char **argv, int *i, const char *name, int64_t lo, int64_t hi,
                    int64_t *out, bool *bad) {
  if (strcmp(argv[*i], name) != 0) return false;
  dg_status st;
  if (*i + 1 >= argc || !dg_parse_i64(argv[*i + 1], lo, hi, out, name, &st)) {
    fprintf(stderr, "train_bench: %s\n", *i + 1 >= argc ? "a flag needs a value" : st.msg);
    *bad = true;
  }
  (*i)++;
  return true;
}

static bool arg_str(int argc, char **argv, int *i, const char *name, const char **out, bool *bad) {
  if (strcmp(argv[*i], name) != 0) return false;
  if (*i + 1 >= argc) {
    fprintf(stderr, "train_bench: %s needs a value\n", name);
    *bad = true;
  } else {
    *out = argv[*i + 1];
  }
  (*i)++;
  return true;
}

static const char usage[] =
    "usage: train_bench [--configs 19m,88m] [--gpus 1,2] [--batch B (per GPU; 0: the anchor's, 64 "
    "for 19m, 32 otherwise)] [--seq T (1024)] [--steps N (20)] [--warmup N (3)] [--peak-tflops X "
    "(0: measure)] [--timeout S (600)] [--dp-check]\n";

#ifdef DG_HAVE_CUDA

/* ---- a bench run (one rank) ------------------------------------------------ */

typedef struct {
  nn_config cfg;
  int B, T, steps, warmup;
} bench_arg;

static void random_tokens(int32_t *x, size_t n, int V, uint64_t seed) {
  dg_rng r;
  dg_rng_seed(&r, seed);
  for (size_t i = 0; i < n; i++) x[i] = (int32_t)dg_rng_below(&r, (uint64_t)V);
}

/* A CUDA model with the C reference's random initial weights. */
static nn_cuda_model *make_model(const nn_config *cfg, int B, int T, uint64_t seed, dg_status *st) {
  nn_model ref;
  if (!nn_model_init(&ref, cfg, false, st)) return NULL;
  nn_model_init_weights(&ref, seed);
  nn_cuda_model *m = NULL;
  if (nn_cuda_model_init(&m, cfg, B, T, st) && !nn_cuda_model_load(m, &ref, false, st)) {
    nn_cuda_model_free(m);
    m = NULL;
  }
  nn_model_free(&ref);
  return m;
}

static bool bench_rank(nn_cuda_dp *dp, void *argp, dg_str *out, dg_status *st) {
  const bench_arg *a = argp;
  int B = a->B, T = a->T, rank = nn_cuda_dp_rank(dp);
  nn_cuda_model *m = make_model(&a->cfg, B, T, 1, st);
  if (!m) return false;
  nn_cuda_model_set_dp(m, dp);
  size_t n = (size_t)B * T;
  int32_t *in = dg_malloc(sizeof(int32_t) * n), *tg = dg_malloc(sizeof(int32_t) * n);
  random_tokens(in, n, a->cfg.vocab_size, 1000 + 2 * (uint64_t)rank);
  random_tokens(tg, n, a->cfg.vocab_size, 1001 + 2 * (uint64_t)rank);
  bool ok = true;
  float loss = 0, norm = 0;
  double t0 = 0;
  /* asynchronous steps, as the anchor's: the loss and the norm are read
   * (waiting for the device) only at the end of the warm-up, so that the
   * timed steps start on an idle device, and after the last step */
  int last = a->warmup + a->steps - 1;
  for (int step = 0; ok && step <= last; step++) {
    if (step == a->warmup) t0 = dg_now();
    bool wait = step == last || step == a->warmup - 1;
    ok = nn_cuda_forward(m, in, tg, NULL, B, T, wait ? &loss : NULL, st) &&
         nn_cuda_zero_grad(m, st) && nn_cuda_backward(m, st) &&
         nn_cuda_update(m, step, wait ? &norm : NULL, st);
  }
  double dt = dg_now() - t0;
  if (ok) dg_str_printf(out, "%.6f %.6f %.6f\n", dt / a->steps, (double)loss, (double)norm);
  free(in);
  free(tg);
  nn_cuda_model_free(m);
  return ok;
}

static bool peak_rank(nn_cuda_dp *dp, void *argp, dg_str *out, dg_status *st) {
  (void)dp;
  (void)argp;
  double tf = 0;
  if (!nn_cuda_matmul_tflops(8192, 20, &tf, st)) return false;
  dg_str_printf(out, "%.3f\n", tf);
  return true;
}

static int run_bench(const options *o) {
  dg_status st;
  double peak = o->peak;
  const char *peak_src = "given";
  if (peak <= 0) {
    dg_str out;
    dg_str_init(&out);
    if (!nn_cuda_dp_launch(1, peak_rank, NULL, (int)o->timeout, &out, &st)) {
      fprintf(stderr, "train_bench: measuring the matmul rate: %s\n", st.msg);
      dg_str_free(&out);
      return 1;
    }
    peak = atof(out.s);
    dg_str_free(&out);
    peak_src = "measured: cuBLASLt bf16 8192^3, median of 20";
  }
  printf("peak bf16 matmul rate: %.1f TFLOP/s (%s)\n\n", peak, peak_src);
  printf("%-6s %4s %5s %5s %9s %12s %9s %6s %8s\n", "config", "gpus", "batch", "seq", "ms/step",
         "tokens/s", "TFLOP/s", "MFU", "loss");
  fflush(stdout);
  int rc = 0;
  char *cfgs = dg_strdup(o->configs), *save = NULL;
  for (char *name = strtok_r(cfgs, ",", &save); name; name = strtok_r(NULL, ",", &save)) {
    bench_arg a;
    if (!nn_config_load(name, &a.cfg, &st) || !nn_cuda_config_check(&a.cfg, &st)) {
      fprintf(stderr, "train_bench: %s: %s\n", name, st.msg);
      rc = 1;
      continue;
    }
    a.B = o->batch > 0 ? (int)o->batch : strcmp(name, "19m") == 0 ? 64 : 32;
    a.T = (int)o->seq;
    a.steps = (int)o->steps;
    a.warmup = (int)o->warmup;
    if (a.T > a.cfg.max_seq_len) {
      fprintf(stderr, "train_bench: %s: --seq %d exceeds max_seq_len %d\n", name, a.T,
              a.cfg.max_seq_len);
      rc = 1;
      continue;
    }
    char *gl = dg_strdup(o->gpus), *s2 = NULL;
    for (char *g = strtok_r(gl, ",", &s2); g; g = strtok_r(NULL, ",", &s2)) {
      int64_t ngpu;
      if (!dg_parse_i64(g, 1, 64, &ngpu, "--gpus", &st)) {
        fprintf(stderr, "train_bench: %s\n", st.msg);
        rc = 1;
        continue;
      }
      dg_str out;
      dg_str_init(&out);
      if (!nn_cuda_dp_launch((int)ngpu, bench_rank, &a, (int)o->timeout, &out, &st)) {
        printf("%-6s %4d  failed: %s\n", name, (int)ngpu, st.msg);
        rc = 1;
      } else {
        double sec = 0, loss = 0, norm = 0;
        sscanf(out.s, "%lf %lf %lf", &sec, &loss, &norm);
        double tokens = (double)ngpu * a.B * a.T;
        double params = (double)nn_config_param_count(&a.cfg);
        double qd = (double)a.cfg.n_heads * a.cfg.head_dim;
        double flops = 6.0 * params * tokens + 12.0 * a.cfg.n_layers * qd * a.T * tokens / 2.0;
        double tflops = flops / sec / 1e12;
        printf("%-6s %4d %5d %5d %9.2f %12.0f %9.1f %5.1f%% %8.4f\n", name, (int)ngpu, a.B, a.T,
               sec * 1e3, tokens / sec, tflops, 100.0 * tflops / (peak * (double)ngpu), loss);
      }
      fflush(stdout);
      dg_str_free(&out);
    }
    free(gl);
  }
  free(cfgs);
  return rc;
}

/* ---- the data-parallel check ----------------------------------------------- */

enum { DPC_B = 8, DPC_T = 96, DPC_STEPS = 10 };

static void dpc_config(nn_config *c) {
  memset(c, 0, sizeof *c);
  c->vocab_size = 512;
  c->d_model = 128;
  c->n_layers = 2;
  c->n_heads = 4;
  c->n_kv_heads = 2;
  c->head_dim = 32;
  c->ffn_hidden = 256;
  c->max_seq_len = 128;
  c->rope_theta = 10000.0f;
  c->norm_eps = 1e-6f;
}

/* The global batch; rank r trains rows [r B/n, (r+1) B/n). */
static void dpc_batch(int32_t *in, int32_t *tg, float *w) {
  dg_rng r;
  dg_rng_seed(&r, 99);
  for (int i = 0; i < DPC_B * DPC_T; i++) {
    in[i] = (int32_t)dg_rng_below(&r, 512);
    tg[i] = (int32_t)dg_rng_below(&r, 512);
    w[i] = i % 7 == 0 ? 0.0f : 0.5f + (float)(i % 5) * 0.25f;
  }
}

static bool dpc_rank(nn_cuda_dp *dp, void *argp, dg_str *out, dg_status *st) {
  (void)argp;
  nn_config cfg;
  dpc_config(&cfg);
  int n = nn_cuda_dp_size(dp), r = nn_cuda_dp_rank(dp), Bl = DPC_B / n;
  nn_cuda_model *m = make_model(&cfg, Bl, DPC_T, 7, st);
  if (!m) return false;
  nn_cuda_model_set_dp(m, dp);
  nn_optim *o = nn_cuda_model_optim(m);
  o->lr = 1e-3f;
  o->warmup_steps = 2;
  o->total_steps = DPC_STEPS;
  static int32_t in[DPC_B * DPC_T], tg[DPC_B * DPC_T];
  static float w[DPC_B * DPC_T];
  dpc_batch(in, tg, w);
  size_t off = (size_t)r * Bl * DPC_T;
  bool ok = true;
  for (int step = 0; ok && step < DPC_STEPS; step++) {
    float loss = 0, norm = 0;
    ok = nn_cuda_forward(m, in + off, tg + off, w + off, Bl, DPC_T, &loss, st) &&
         nn_cuda_zero_grad(m, st) && nn_cuda_backward(m, st) &&
         nn_cuda_update(m, step, &norm, st);
    if (ok) dg_str_printf(out, "%.9g %.9g\n", (double)loss, (double)norm);
  }
  nn_cuda_model_free(m);
  return ok;
}

static bool dpc_parse(const char *s, double loss[DPC_STEPS], double norm[DPC_STEPS]) {
  for (int i = 0; i < DPC_STEPS; i++) {
    int used = 0;
    if (sscanf(s, "%lf %lf\n%n", &loss[i], &norm[i], &used) != 2 || used == 0) return false;
    s += used;
  }
  return true;
}

static int run_dp_check(const options *o) {
  dg_status st;
  double loss[2][DPC_STEPS], norm[2][DPC_STEPS];
  for (int k = 0; k < 2; k++) {
    dg_str out;
    dg_str_init(&out);
    bool ok = nn_cuda_dp_launch(k + 1, dpc_rank, NULL, (int)o->timeout, &out, &st);
    if (ok && !dpc_parse(out.s, loss[k], norm[k]))
      ok = dg_fail(&st, DG_ERR_RUNTIME, "unreadable output from rank 0: %s", out.s);
    dg_str_free(&out);
    if (!ok) {
      printf("dp-check: FAILED: %d GPU(s): %s\n", k + 1, st.msg);
      return 1;
    }
  }
  const double loss_tol = 5e-3, norm_rel = 1e-2;
  double worst_loss = 0, worst_norm = 0;
  printf("dp-check: B %d x T %d, %d AdamW steps; 1 GPU (B %d) vs 2 GPUs (B %d each)\n", DPC_B,
         DPC_T, DPC_STEPS, DPC_B, DPC_B / 2);
  printf("%4s %12s %12s %10s %12s %12s\n", "step", "loss 1 GPU", "loss 2 GPUs", "diff",
         "norm 1 GPU", "norm 2 GPUs");
  for (int i = 0; i < DPC_STEPS; i++) {
    double dl = fabs(loss[0][i] - loss[1][i]);
    double dn = fabs(norm[0][i] - norm[1][i]) / fmax(fabs(norm[0][i]), 1e-12);
    worst_loss = fmax(worst_loss, dl);
    worst_norm = fmax(worst_norm, dn);
    printf("%4d %12.6f %12.6f %10.2e %12.6f %12.6f\n", i, loss[0][i], loss[1][i], dl, norm[0][i],
           norm[1][i]);
  }
  bool pass = worst_loss <= loss_tol && worst_norm <= norm_rel && isfinite(worst_loss) &&
              loss[0][DPC_STEPS - 1] < loss[0][0];
  printf("dp-check: %s (max |loss diff| %.2e, tolerance %.0e; max relative norm diff %.2e, "
         "tolerance %.0e; loss %.4f -> %.4f)\n",
         pass ? "ok" : "FAILED", worst_loss, loss_tol, worst_norm, norm_rel, loss[0][0],
         loss[0][DPC_STEPS - 1]);
  return pass ? 0 : 1;
}

#endif

int main(int argc, char **argv) {
  options o = {"19m,88m", "1,2", 0, 1024, 20, 3, 600, 0.0, false};
  bool bad = false;
  for (int i = 1; i < argc && !bad; i++) {
    if (arg_str(argc, argv, &i, "--configs", &o.configs, &bad) ||
        arg_str(argc, argv, &i, "--gpus", &o.gpus, &bad) ||
        arg_int(argc, argv, &i, "--batch", 0, 65535, &o.batch, &bad) ||
        arg_int(argc, argv, &i, "--seq", 1, 1 << 20, &o.seq, &bad) ||
        arg_int(argc, argv, &i, "--steps", 1, 100000, &o.steps, &bad) ||
        arg_int(argc, argv, &i, "--warmup", 0, 100000, &o.warmup, &bad) ||
        arg_int(argc, argv, &i, "--timeout", 1, 86400, &o.timeout, &bad))
      continue;
    if (strcmp(argv[i], "--peak-tflops") == 0) {
      dg_status st;
      if (i + 1 >= argc || !dg_parse_f64(argv[++i], &o.peak, "--peak-tflops", &st)) {
        fprintf(stderr, "train_bench: --peak-tflops needs a number\n");
        bad = true;
      }
    } else if (strcmp(argv[i], "--dp-check") == 0) {
      o.dp_check = true;
    } else if (strcmp(argv[i], "--help") == 0 || strcmp(argv[i], "-h") == 0) {
      fputs(usage, stdout);
      return 0;
    } else {
      fprintf(stderr, "train_bench: unknown argument '%s'\n", argv[i]);
      bad = true;
    }
  }
  if (bad) {
    fputs(usage, stderr);
    return 2;
  }
#ifdef DG_HAVE_CUDA
  return o.dp_check ? run_dp_check(&o) : run_bench(&o);
#else
  fprintf(stderr, "train_bench: this build has no CUDA (nvcc was not found when it was built)\n");
  return 1;
#endif
}
