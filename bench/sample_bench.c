/* sample_bench.c: throughput of KV-cache generation on the GPU
 * (nn_cuda_generate, src/nn_cuda/decode.cu).
 *
 * For each config (default 19m and 88m, the models of bench/train_bench.c,
 * with the C reference's random initial weights) and each mode (greedy:
 * argmax on the device; sample: temperature 1 over the whole vocabulary,
 * the device's sort-and-draw path), a batch of random prompts (default 64
 * of 1000 tokens) generates a fixed number of tokens each (default 500; no
 * stop token, so every row runs to the end). max_seq_len is raised to
 * prompt + gen where the config's is shorter (it only sizes the RoPE
 * tables). One warm-up generation of 4 tokens, then timed runs; prints the
 * prefill time and rate, the decode time, tokens/s and ms per step, and
 * the total, for the median run by total time.
 *
 * usage: sample_bench [--configs 19m,88m] [--batch 64] [--prompt 1000]
 *        [--gen 500] [--modes greedy,sample] [--temperature 1] [--top-k 0]
 *        [--top-p 1] [--reps 3]
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
  const char *configs, *modes;
  int64_t batch, prompt, gen, reps, top_k;
  double temperature, top_p;
} options;

static const char usage[] =
    "usage: sample_bench [--configs 19m,88m] [--batch B (64)] [--prompt T (1000)] [--gen N (500)]\n"
    "       [--modes greedy,sample] [--temperature X (1, sample mode)] [--top-k K (0: all)]\n"
    "       [--top-p P (1)] [--reps R (3)]\n"
    "KV-cache generation on the GPU: B random prompts of T tokens, N new tokens each, with\n"
    "random weights; prints prefill time, decode tokens/s and the total (median of R runs).\n";

static bool arg_int(int argc, char **argv, int *i, const char *name, int64_t lo, int64_t hi,
                    int64_t *out, bool *bad) {
  if (strcmp(argv[*i], name) != 0) return false;
  dg_status st;
  if (*i + 1 >= argc || !dg_parse_i64(argv[*i + 1], lo, hi, out, name, &st)) {
    fprintf(stderr, "sample_bench: %s\n", *i + 1 >= argc ? "a flag needs a value" : st.msg);
    *bad = true;
  }
  (*i)++;
  return true;
}

static bool arg_f64(int argc, char **argv, int *i, const char *name, double lo, double hi,
                    double *out, bool *bad) {
  if (strcmp(argv[*i], name) != 0) return false;
  dg_status st;
  if (*i + 1 >= argc || !dg_parse_f64(argv[*i + 1], out, name, &st) || !(*out >= lo && *out <= hi)) {
    fprintf(stderr, "sample_bench: %s needs a number in [%g, %g]\n", name, lo, hi);
    *bad = true;
  }
  (*i)++;
  return true;
}

static bool arg_str(int argc, char **argv, int *i, const char *name, const char **out, bool *bad) {
  if (strcmp(argv[*i], name) != 0) return false;
  if (*i + 1 >= argc) {
    fprintf(stderr, "sample_bench: %s needs a value\n", name);
    *bad = true;
  } else {
    *out = argv[*i + 1];
  }
  (*i)++;
  return true;
}

#ifdef DG_HAVE_CUDA

typedef struct {
  nn_cuda_gen_stats s;
  double total;
} run_time;

static int by_total(const void *a, const void *b) {
  double x = ((const run_time *)a)->total, y = ((const run_time *)b)->total;
  return x < y ? -1 : x > y;
}

/* One config: the model on the GPU, then every mode. */
static bool bench_config(const char *name, const options *o, dg_status *st) {
  nn_config cfg;
  if (!nn_config_load(name, &cfg, st) || !nn_cuda_config_check(&cfg, st)) return false;
  int B = (int)o->batch, P = (int)o->prompt, N = (int)o->gen;
  if (cfg.max_seq_len < P + N) cfg.max_seq_len = P + N;
  nn_model ref;
  if (!nn_model_init(&ref, &cfg, false, st)) return false;
  nn_model_init_weights(&ref, 1);
  nn_cuda_model *g = NULL;
  bool ok = nn_cuda_model_init(&g, &cfg, 1, 1, st) && nn_cuda_model_load(g, &ref, false, st);
  nn_model_free(&ref);
  int32_t **prompts = dg_malloc(sizeof(int32_t *) * (size_t)B);
  int *lens = dg_malloc(sizeof(int) * (size_t)B), *out_lens = dg_malloc(sizeof(int) * (size_t)B);
  int32_t *out = dg_malloc(sizeof(int32_t) * (size_t)B * (size_t)N);
  run_time *runs = dg_malloc(sizeof(run_time) * (size_t)o->reps);
  dg_rng r;
  dg_rng_seed(&r, 42);
  for (int b = 0; b < B; b++) {
    lens[b] = P;
    prompts[b] = dg_malloc(sizeof(int32_t) * (size_t)P);
    for (int j = 0; j < P; j++) prompts[b][j] = (int32_t)dg_rng_below(&r, (uint64_t)cfg.vocab_size);
  }
  double kv_gib = 2.0 * 2.0 * cfg.n_layers * (double)B * (P + N) * cfg.n_kv_heads * cfg.head_dim /
                  1073741824.0;
  char *modes = dg_strdup(o->modes), *save = NULL;
  for (char *mode = strtok_r(modes, ",", &save); ok && mode; mode = strtok_r(NULL, ",", &save)) {
    nn_sample_opts so;
    nn_sample_opts_default(&so);
    if (strcmp(mode, "greedy") == 0) {
      so.temperature = 0;
    } else if (strcmp(mode, "sample") == 0) {
      so.temperature = (float)o->temperature;
      so.top_k = (int)o->top_k;
      so.top_p = (float)o->top_p;
    } else {
      ok = dg_fail(st, DG_ERR_USAGE, "--modes: '%s' is not greedy or sample", mode);
      break;
    }
    so.stop_token = -1;
    so.max_tokens = 4; /* warm-up: modules, clocks */
    ok = nn_cuda_generate(g, (const int32_t *const *)prompts, lens, B, &so, 1, out, out_lens, NULL, st);
    so.max_tokens = N;
    for (int k = 0; ok && k < o->reps; k++) {
      double t0 = dg_now();
      ok = nn_cuda_generate(g, (const int32_t *const *)prompts, lens, B, &so, 1 + (uint64_t)k, out,
                            out_lens, &runs[k].s, st);
      runs[k].total = dg_now() - t0;
      if (ok && runs[k].s.new_tokens != (int64_t)B * N)
        ok = dg_fail(st, DG_ERR_RUNTIME, "%lld tokens generated, expected %lld",
                     (long long)runs[k].s.new_tokens, (long long)B * N);
    }
    if (!ok) break;
    qsort(runs, (size_t)o->reps, sizeof *runs, by_total);
    const run_time *m = &runs[o->reps / 2];
    char label[48];
    if (so.temperature > 0)
      snprintf(label, sizeof label, "T=%g k=%d p=%g", (double)so.temperature, so.top_k, (double)so.top_p);
    else
      snprintf(label, sizeof label, "greedy");
    printf("%-5s %-18s %5d %6d %5d %8.3f %10.0f %8.3f %10.0f %8.3f %8.3f %10.0f %6.2f\n", name, label,
           B, P, N, m->s.prefill_s, (double)m->s.prompt_tokens / m->s.prefill_s, m->s.decode_s,
           (double)m->s.new_tokens / m->s.decode_s, 1e3 * m->s.decode_s / (double)m->s.steps,
           m->total, (double)m->s.new_tokens / m->total, kv_gib);
    fflush(stdout);
  }
  free(modes);
  for (int b = 0; b < B; b++) free(prompts[b]);
  free(prompts);
  free(lens);
  free(out_lens);
  free(out);
  free(runs);
  nn_cuda_model_free(g);
  return ok;
}

static int run(const options *o) {
  dg_status st;
  dg_status_ok(&st);
  if (nn_cuda_device_count(&st) < 1) {
    fprintf(stderr, "sample_bench: %s\n", st.msg);
    return 1;
  }
  printf("KV-cache generation, median of %lld run(s); random weights, random prompts, no stop token\n\n",
         (long long)o->reps);
  printf("%-5s %-18s %5s %6s %5s %8s %10s %8s %10s %8s %8s %10s %6s\n", "model", "mode", "batch",
         "prompt", "gen", "prefill", "prompt", "decode", "decode", "ms/step", "total", "total",
         "KV");
  printf("%-5s %-18s %5s %6s %5s %8s %10s %8s %10s %8s %8s %10s %6s\n", "", "", "", "", "", "s",
         "tok/s", "s", "tok/s", "", "s", "tok/s", "GiB");
  int rc = 0;
  char *cfgs = dg_strdup(o->configs), *save = NULL;
  for (char *name = strtok_r(cfgs, ",", &save); name; name = strtok_r(NULL, ",", &save))
    if (!bench_config(name, o, &st)) {
      printf("%-5s failed: %s\n", name, st.msg);
      rc = st.code == DG_ERR_USAGE ? 2 : 1;
    }
  free(cfgs);
  return rc;
}

#endif

int main(int argc, char **argv) {
  options o = {"19m,88m", "greedy,sample", 64, 1000, 500, 3, 0, 1.0, 1.0};
  bool bad = false;
  for (int i = 1; i < argc && !bad; i++) {
    if (arg_str(argc, argv, &i, "--configs", &o.configs, &bad) ||
        arg_str(argc, argv, &i, "--modes", &o.modes, &bad) ||
        arg_int(argc, argv, &i, "--batch", 1, 65535, &o.batch, &bad) ||
        arg_int(argc, argv, &i, "--prompt", 1, 1 << 20, &o.prompt, &bad) ||
        arg_int(argc, argv, &i, "--gen", 1, 1 << 20, &o.gen, &bad) ||
        arg_int(argc, argv, &i, "--reps", 1, 100, &o.reps, &bad) ||
        arg_int(argc, argv, &i, "--top-k", 0, 1 << 24, &o.top_k, &bad) ||
        arg_f64(argc, argv, &i, "--temperature", 1e-6, 1e6, &o.temperature, &bad) ||
        arg_f64(argc, argv, &i, "--top-p", 1e-9, 1, &o.top_p, &bad))
      continue;
    if (strcmp(argv[i], "--help") == 0 || strcmp(argv[i], "-h") == 0) {
      fputs(usage, stdout);
      return 0;
    }
    fprintf(stderr, "sample_bench: unknown argument '%s'\n", argv[i]);
    bad = true;
  }
  if (bad) {
    fputs(usage, stderr);
    return 2;
  }
  if (o.prompt + o.gen > 1 << 20) {
    fprintf(stderr, "sample_bench: --prompt + --gen exceeds 2^20 positions\n");
    return 2;
  }
#ifdef DG_HAVE_CUDA
  return run(&o);
#else
  fprintf(stderr, "sample_bench: this build has no CUDA (nvcc was not found when it was built)\n");
  return 1;
#endif
}
