/* attention_bench.c: the CUDA attention kernels alone (src/nn_cuda/
 * attention.cu), forward and backward, at the shapes of the configs'
 * training steps, for each choice of kernels and their shapes.
 *
 * Shapes: 19m (B 64, T 1024, 6 query / 2 kv heads, head_dim 64) and 88m
 * (B 32, T 1024, 12/4, 64), as bench/train_bench.c runs them; the model's
 * fused q|k|v rows and the RoPE backward as in training. Per variant the
 * median of --reps runs after two warm-up runs (cudaEvent timing), with
 * TFLOP/s counting the causal half of the products: 2 for the forward
 * (Q K^T, P V), 5 for the backward (S, dP, dV, dK, dQ; the recomputation
 * in the dQ pass is not counted).
 *
 * usage: attention_bench [--shapes 19m,88m] [--tiles F/D/K,...] [--reps 20]
 * (F/D/K: the mma.sync kernels with m-tiles a warp in the forward and the
 * dQ pass and dK/dV blocks an SM; wF/D/K[/S]: the wgmma kernels with
 * warpgroups a block in the three, and S dK/dV blocks an SM;
 * nn_cuda_attention_tiles)
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dragon/base.h"
#ifdef DG_HAVE_CUDA
#include "dragon/nn_cuda.h"
#endif

static const char usage[] =
    "usage: attention_bench [--shapes 19m,88m] [--tiles F/D/K,... (2/1/2,w2/2/2)]\n"
    "       [--reps R (20)]\n"
    "The CUDA attention kernels alone at the training shapes of the 19m and 88m configs;\n"
    "F/D/K: the mma.sync kernels with m-tiles a warp in the forward and the dQ pass (1 or 2)\n"
    "and dK/dV blocks an SM (2 or 3); wF/D/K[/S]: the sm_90 wgmma kernels with warpgroups a\n"
    "block in the forward, the dQ pass and the dK/dV pass (1 or 2) and, with one warpgroup,\n"
    "S dK/dV blocks an SM (2 or 3); 0 for a default.\n";

typedef struct {
  const char *name;
  int B, T, NH, NKV, HD;
} shape;

static const shape shapes[] = {{"19m", 64, 1024, 6, 2, 64}, {"88m", 32, 1024, 12, 4, 64}};

#ifdef DG_HAVE_CUDA
static int run(const char *names, const char *tiles, int reps) {
  int rc = 0;
  printf("%-5s %5s %9s %9s %9s %9s %9s\n", "shape", "tiles", "fwd ms", "TFLOP/s", "bwd ms",
         "TFLOP/s", "total ms");
  char *nl = dg_strdup(names), *s1 = NULL;
  for (char *name = strtok_r(nl, ",", &s1); name; name = strtok_r(NULL, ",", &s1)) {
    const shape *sh = NULL;
    for (size_t i = 0; i < sizeof shapes / sizeof shapes[0]; i++)
      if (strcmp(shapes[i].name, name) == 0) sh = &shapes[i];
    if (!sh) {
      fprintf(stderr, "attention_bench: unknown shape '%s' (19m, 88m)\n", name);
      rc = 2;
      break;
    }
    /* one causal product: 2 * B * NH * T * T / 2 * HD */
    double flop = (double)sh->B * sh->NH * sh->T * sh->T * sh->HD;
    char *tl = dg_strdup(tiles), *s2 = NULL;
    for (char *t = strtok_r(tl, ",", &s2); t; t = strtok_r(NULL, ",", &s2)) {
      nn_cuda_attention_tiles at = {0, 0, 0, 1, 0, 0, 0};
      char end = 0;
      int nf = t[0] == 'w' ? sscanf(t + 1, "%d/%d/%d/%d%c", &at.fwd_groups, &at.dq_groups,
                                    &at.dkdv_groups, &at.dkdv_blocks, &end)
                           : sscanf(t, "%d/%d/%d%c", &at.fwd_mtiles, &at.dq_mtiles,
                                    &at.dkdv_blocks, &end);
      bool ok = nf == 3 || (t[0] == 'w' && nf == 4);
      if (t[0] == 'w') at.engine = 2;
      if (!ok) {
        fprintf(stderr, "attention_bench: --tiles entry '%s' is not F/D/K or wF/D/K[/S]\n", t);
        rc = 2;
        break;
      }
      double f = 0, b = 0;
      dg_status st;
      dg_status_ok(&st);
      if (!nn_cuda_attention_time(sh->B, sh->T, sh->NH, sh->NKV, sh->HD, &at, reps, &f, &b, &st)) {
        fprintf(stderr, "attention_bench: %s %s: %s\n", name, t, st.msg);
        rc = 1;
        continue;
      }
      printf("%-5s %5s %9.3f %9.1f %9.3f %9.1f %9.3f\n", name, t, f, 2 * flop / (f * 1e9), b,
             5 * flop / (b * 1e9), f + b);
      fflush(stdout);
    }
    free(tl);
    if (rc == 2) break;
  }
  free(nl);
  return rc;
}
#endif

int main(int argc, char **argv) {
  const char *names = "19m,88m", *tiles = "2/1/2,w2/2/2";
  int64_t reps = 20;
  dg_status st;
  for (int i = 1; i < argc; i++) {
    if (strcmp(argv[i], "--help") == 0 || strcmp(argv[i], "-h") == 0) {
      fputs(usage, stdout);
      return 0;
    }
    if (i + 1 >= argc) {
      fprintf(stderr, "attention_bench: '%s' needs a value\n%s", argv[i], usage);
      return 2;
    }
    if (strcmp(argv[i], "--shapes") == 0) names = argv[++i];
    else if (strcmp(argv[i], "--tiles") == 0) tiles = argv[++i];
    else if (strcmp(argv[i], "--reps") == 0) {
      if (!dg_parse_i64(argv[++i], 1, 1000, &reps, "--reps", &st)) {
        fprintf(stderr, "attention_bench: %s\n", st.msg);
        return 2;
      }
    } else {
      fprintf(stderr, "attention_bench: unknown argument '%s'\n%s", argv[i], usage);
      return 2;
    }
  }
#ifdef DG_HAVE_CUDA
  return run(names, tiles, (int)reps);
#else
  (void)names;
  (void)tiles;
  fprintf(stderr, "attention_bench: built without CUDA (no nvcc)\n");
  return 1;
#endif
}
