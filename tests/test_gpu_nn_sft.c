/* test_gpu_nn_sft.c: supervised fine-tuning on the GPU (the CUDA back end,
 * src/train/backend_cuda.c) against the C reference's run.
 *
 * CPU tier: device names; on a machine without a GPU (or a build without
 * CUDA), `--device cuda` fails before the run directory is written, with
 * a message that says why; the fixture below trains on the CPU with a
 * validation split.
 *
 * GPU tier (gpu_nn_sft_*, skipped without a GPU): six kernel
 * examples, a GQA model with head_dim 16 (the CUDA attention's smallest),
 * 10 AdamW steps at lr 1e-3 with warmup 2 (the setting of
 * test_nn_cuda.c's training check):
 * - the GPU's loss at every step and its validation loss within 3e-2 of
 *   the C reference's (docs/model-cuda.md's bound for 10 steps), and the
 *   loss falls;
 * - a GPU run stopped after 3 steps and resumed on the GPU takes every
 *   later step with bitwise the loss of the run that was not stopped (the
 *   checkpoint holds the fp32 parameters and AdamW state exactly; the bf16
 *   copies are rounded from them alike); a run resumed on the other
 *   device stays within 3e-2;
 * - `dragon train sft --device cuda` and `dragon sample-model --device
 *   cuda` on its run directory: seeded samples repeat.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "dragon/ir.h"
#include "dragon/train.h"
#include "dragon/wl.h"
#include "test.h"

/* ---- fixture ---------------------------------------------------------------- */

static const char *path_in_tmp(const char *name) {
  static char buf[32][512];
  static int k;
  char *p = buf[k++ % 32];
  snprintf(p, 512, "%s/sftgpu_%s", dg_test_tmpdir(), name);
  return p;
}

static const char *const specs[] = {"GMM/0",          "gemv:n=64,k=32", "reduce_sum:m=16,n=32",
                                    "gemv:n=32,k=16", "reduce_sum:m=8,n=64", "gemv:n=128,k=64"};

static void put_json_string(dg_str *out, const char *s) {
  dg_str_putc(out, '"');
  for (const char *p = s; *p; p++) {
    if (*p == '"' || *p == '\\') dg_str_putc(out, '\\'), dg_str_putc(out, *p);
    else if (*p == '\n') dg_str_puts(out, "\\n");
    else dg_str_putc(out, *p);
  }
  dg_str_putc(out, '"');
}

/* Six examples: each kernel's text and a short TSEL-like target (header,
 * edits, why, expect). Returns the file's path, or NULL. */
static const char *write_examples(void) {
  const char *path = path_in_tmp("examples.jsonl");
  if (access(path, R_OK) == 0) return path;
  dg_str out;
  dg_str_init(&out);
  for (int i = 0; i < (int)DG_ARRAY_LEN(specs); i++) {
    dg_status st;
    dg_func *f = wl_build(specs[i], &st);
    if (!f) {
      dg_str_free(&out);
      return NULL;
    }
    char *k = ir_print(f);
    ir_func_free(f);
    char target[512];
    snprintf(target, sizeof target,
             "tsel 1 kernel %s\nt1 block \"B\"\nt2 loops t1 x%d\nt3 tile t2.0 [1 %d %d] max=64\n"
             "why t3: tile of %d\nexpect p1: %d.5x over the unscheduled kernel\n",
             specs[i], 2 + i % 3, 2 << (i % 3), 16 >> (i % 3), 8 * (i + 1), i + 2);
    dg_str_printf(&out, "{\"task\": \"t%d\", \"kind\": \"construct\", \"prompt\": ", i);
    put_json_string(&out, k);
    dg_str_puts(&out, ", \"target\": ");
    put_json_string(&out, target);
    dg_str_puts(&out, "}\n");
    free(k);
  }
  dg_status st;
  bool ok = dg_write_file_atomic(path, out.s, out.len, &st);
  dg_str_free(&out);
  return ok ? path : NULL;
}

/* A GQA model with head_dim 16 (the CUDA attention needs 16, 32, 64 or
 * 128), 10 steps of AdamW at lr 1e-3 after a 2-step warmup. */
static const char *write_config(void) {
  const char *path = path_in_tmp("config.txt");
  static const char text[] =
      "base = tiny\n"
      "d_model = 64\n"
      "n_heads = 4\n"
      "n_kv_heads = 2\n"
      "head_dim = 16\n"
      "ffn_hidden = 128\n"
      "max_seq_len = 512\n"
      "seq_len = 512\n"
      "batch = 3\n"
      "lr = 0.001\n"
      "lr_min = 0.0001\n"
      "warmup_steps = 2\n"
      "steps = 10\n"
      "val_fraction = 0.3\n"
      "eval_every = 5\n"
      "ckpt_every = 5\n"
      "log_every = 5\n"
      "seed = 3\n";
  dg_status st;
  return dg_write_file_atomic(path, text, sizeof text - 1, &st) ? path : NULL;
}

static train_sft_args run_args(const char *ex, const char *cfg, const char *out, train_device dev) {
  train_sft_args a;
  memset(&a, 0, sizeof a);
  a.data = ex;
  a.config = cfg;
  a.tok_vocab = 600;
  a.out_dir = out;
  a.quiet = true;
  a.device = dev;
  return a;
}

static bool dir_exists(const char *p) {
  struct stat sb;
  return stat(p, &sb) == 0;
}

/* ---- CPU tier ----------------------------------------------------------------- */

DG_TEST(train_device_selection) {
  dg_status st;
  dg_status_ok(&st);
  train_device d = TRAIN_DEVICE_CUDA;
  CHECK(train_device_parse("cpu", &d, &st) && d == TRAIN_DEVICE_CPU);
  CHECK(train_device_parse("cuda", &d, &st) && d == TRAIN_DEVICE_CUDA);
  CHECK(!train_device_parse("gpu", &d, &st));
  CHECK_ERR(st, "--device: 'gpu' is not a device (cpu or cuda)");
  CHECK(st.code == DG_ERR_USAGE);
  CHECK_STREQ(train_device_name(TRAIN_DEVICE_CUDA), "cuda");
  CHECK(train_device_available(TRAIN_DEVICE_CPU, &st));

  const char *ex = write_examples(), *cfg = write_config();
  CHECK(ex && cfg);
  /* the fixture trains on the CPU and holds out a validation set */
  train_sft_args a = run_args(ex, cfg, path_in_tmp("cpu2"), TRAIN_DEVICE_CPU);
  a.steps = 2;
  train_result r;
  CHECK_MSG(train_sft_run(&a, &r, &st), "%s", st.msg);
  CHECK_EQ(r.n_train + r.n_val, 6);
  CHECK(r.n_val >= 1 && r.n_train >= 3);
  CHECK(r.val_loss > 0);
  train_result_free(&r);

  char args[1024], *out = NULL;
  snprintf(args, sizeof args, "train sft --data %s --out %s --device tpu", ex, path_in_tmp("tpu"));
  CHECK_EQ(dg_test_run_dragon(args, NULL, &out), 2);
  CHECK(strstr(out, "'tpu' is not a device"));
  free(out);
  CHECK(!dir_exists(path_in_tmp("tpu")));

  dg_status why;
  dg_status_ok(&why);
  if (train_device_available(TRAIN_DEVICE_CUDA, &why)) {
    printf("  a GPU is here: the refusal is not tested (gpu_nn_sft_* train on it)\n");
    return;
  }
  /* no GPU: refused before anything is written, saying why */
  a = run_args(ex, cfg, path_in_tmp("nogpu"), TRAIN_DEVICE_CUDA);
  CHECK(!train_sft_run(&a, &r, &st));
  train_result_free(&r);
  CHECK_ERR(st, "--device cuda: ");
  CHECK_STREQ(st.msg, why.msg);
  CHECK(!dir_exists(a.out_dir));
  snprintf(args, sizeof args, "train sft --data %s --config %s --out %s --device cuda", ex, cfg,
           path_in_tmp("nogpu_cli"));
  CHECK_EQ(dg_test_run_dragon(args, NULL, &out), 1);
  CHECK_MSG(strstr(out, "dragon train sft: --device cuda: "), "%s", out);
  free(out);
  CHECK(!dir_exists(path_in_tmp("nogpu_cli")));
  printf("  refused: %s\n", st.msg);
}

/* ---- GPU tier ------------------------------------------------------------------ */

static bool gpu_here(void) {
  dg_status st;
  dg_status_ok(&st);
  if (train_device_available(TRAIN_DEVICE_CUDA, &st)) return true;
  dg_test_skip("%s", st.msg);
  return false;
}

static const double SFT_LOSS_TOL = 3e-2; /* docs/model-cuda.md: loss over 10 AdamW steps */

DG_TEST(gpu_nn_sft_matches_cpu) {
  if (!gpu_here()) return;
  const char *ex = write_examples(), *cfg = write_config();
  CHECK(ex && cfg);
  dg_status st;
  dg_status_ok(&st);
  train_result rc, rg;
  train_sft_args a = run_args(ex, cfg, path_in_tmp("match_cpu"), TRAIN_DEVICE_CPU);
  CHECK_MSG(train_sft_run(&a, &rc, &st), "cpu: %s", st.msg);
  a = run_args(ex, cfg, path_in_tmp("match_gpu"), TRAIN_DEVICE_CUDA);
  CHECK_MSG(train_sft_run(&a, &rg, &st), "cuda: %s", st.msg);
  CHECK_EQ(rg.last_step - rg.first_step, 10);
  CHECK_EQ(rc.last_step - rc.first_step, 10);
  CHECK(rg.n_val == rc.n_val && rg.n_val > 0);
  double worst = 0;
  printf("  %4s %10s %10s %9s\n", "step", "cpu", "cuda", "diff");
  for (int i = 0; i < 10; i++) {
    double d = fabs((double)rg.losses[i] - rc.losses[i]);
    worst = fmax(worst, d);
    printf("  %4d %10.6f %10.6f %9.2e\n", i, (double)rc.losses[i], (double)rg.losses[i], d);
  }
  double dv = fabs((double)rg.val_loss - rc.val_loss);
  printf("  val  %10.6f %10.6f %9.2e   (bound %.0e; worst step %.2e)\n", (double)rc.val_loss,
         (double)rg.val_loss, dv, SFT_LOSS_TOL, worst);
  for (int i = 0; i < 10; i++)
    CHECK_MSG(fabs((double)rg.losses[i] - rc.losses[i]) <= SFT_LOSS_TOL,
              "step %d: cuda %.6f vs cpu %.6f", i, (double)rg.losses[i], (double)rc.losses[i]);
  CHECK(dv <= SFT_LOSS_TOL);
  CHECK(rg.losses[9] < rg.losses[0]);
  CHECK(isfinite(rg.val_loss) && rg.val_loss > 0);
  char p[700];
  snprintf(p, sizeof p, "%s/model_10.bin", a.out_dir);
  CHECK(access(p, R_OK) == 0);
  snprintf(p, sizeof p, "%s/state_10.bin", a.out_dir);
  CHECK(access(p, R_OK) == 0);
  train_result_free(&rc);
  train_result_free(&rg);
}

/* Runs `steps` steps in a new directory on dev_a, stopping after `cut`,
 * then resumes there on dev_b; fills the losses of both sessions. */
static bool split_run(const char *ex, const char *cfg, const char *dir, train_device dev_a,
                      train_device dev_b, int cut, float *losses, dg_status *st) {
  train_sft_args a = run_args(ex, cfg, dir, dev_a);
  a.steps = 8;
  a.stop_after = cut;
  train_result r1, r2;
  if (!train_sft_run(&a, &r1, st)) return false;
  memcpy(losses, r1.losses, sizeof(float) * (size_t)cut);
  train_result_free(&r1);
  a.resume = true;
  a.stop_after = 0;
  a.data = a.config = NULL;
  a.device = dev_b;
  if (!train_sft_run(&a, &r2, st)) return false;
  bool ok = r2.first_step == cut && r2.last_step == 8;
  if (ok) memcpy(losses + cut, r2.losses, sizeof(float) * (size_t)(8 - cut));
  else dg_fail(st, DG_ERR_INVALID, "resumed steps %lld..%lld", (long long)r2.first_step,
               (long long)r2.last_step);
  train_result_free(&r2);
  return ok;
}

DG_TEST(gpu_nn_sft_resume) {
  if (!gpu_here()) return;
  const char *ex = write_examples(), *cfg = write_config();
  CHECK(ex && cfg);
  dg_status st;
  dg_status_ok(&st);
  train_sft_args a = run_args(ex, cfg, path_in_tmp("resume_full"), TRAIN_DEVICE_CUDA);
  a.steps = 8;
  train_result full;
  CHECK_MSG(train_sft_run(&a, &full, &st), "%s", st.msg);
  float gg[8], gc[8], cg[8];
  CHECK_MSG(split_run(ex, cfg, path_in_tmp("resume_gg"), TRAIN_DEVICE_CUDA, TRAIN_DEVICE_CUDA, 3,
                      gg, &st), "%s", st.msg);
  CHECK_MSG(split_run(ex, cfg, path_in_tmp("resume_gc"), TRAIN_DEVICE_CUDA, TRAIN_DEVICE_CPU, 3, gc,
                      &st), "%s", st.msg);
  CHECK_MSG(split_run(ex, cfg, path_in_tmp("resume_cg"), TRAIN_DEVICE_CPU, TRAIN_DEVICE_CUDA, 3, cg,
                      &st), "%s", st.msg);
  printf("  %4s %10s %10s %10s %10s\n", "step", "cuda", "cuda>cuda", "cuda>cpu", "cpu>cuda");
  for (int i = 0; i < 8; i++)
    printf("  %4d %10.6f %10.6f %10.6f %10.6f\n", i, (double)full.losses[i], (double)gg[i],
           (double)gc[i], (double)cg[i]);
  for (int i = 0; i < 8; i++) {
    CHECK_MSG(memcmp(&gg[i], &full.losses[i], sizeof(float)) == 0,
              "step %d: %.9g after a GPU resume, %.9g without", i, (double)gg[i],
              (double)full.losses[i]);
    CHECK_MSG(fabs((double)gc[i] - full.losses[i]) <= SFT_LOSS_TOL, "step %d: resumed on the CPU %.6f",
              i, (double)gc[i]);
    if (i < 3) CHECK(memcmp(&gc[i], &full.losses[i], sizeof(float)) == 0);
    CHECK_MSG(fabs((double)cg[i] - full.losses[i]) <= SFT_LOSS_TOL, "step %d: CPU then GPU %.6f", i,
              (double)cg[i]);
  }
  CHECK(full.losses[7] < full.losses[0]);
  train_result_free(&full);

  /* the command line: train on the GPU, then sample there (seeded) and on the CPU */
  const char *dir = path_in_tmp("cli"), *prompt = path_in_tmp("prompt.txt");
  dg_func *f = wl_build("gemv:n=64,k=32", &st);
  CHECK(f);
  char *k = ir_print(f);
  ir_func_free(f);
  CHECK(dg_write_file_atomic(prompt, k, strlen(k), &st));
  free(k);
  char args[2048], *out = NULL, *again = NULL;
  snprintf(args, sizeof args, "train sft --data %s --config %s --out %s --steps 3 --device cuda", ex,
           cfg, dir);
  int rc = dg_test_run_dragon(args, NULL, &out);
  CHECK_MSG(rc == 0 && strstr(out, "steps 0..3 of"), "rc %d: %s", rc, out);
  free(out);
  snprintf(args, sizeof args,
           "sample-model --ckpt %s --prompt %s --n 3 --max-tokens 12 --temperature 0.8 --top-k 20 "
           "--seed 4 --device cuda",
           dir, prompt);
  rc = dg_test_run_dragon(args, NULL, &out);
  CHECK_MSG(rc == 0, "rc %d: %s", rc, out);
  CHECK(strstr(out, "# sample 1/3\n") && strstr(out, "# sample 3/3\n"));
  rc = dg_test_run_dragon(args, NULL, &again);
  CHECK(rc == 0);
  CHECK_STREQ(again, out);
  free(out);
  free(again);
  snprintf(args, sizeof args, "sample-model --ckpt %s --prompt %s --max-tokens 12 --temperature 0 --device cpu",
           dir, prompt);
  rc = dg_test_run_dragon(args, NULL, &out);
  CHECK_MSG(rc == 0, "rc %d: %s", rc, out);
  free(out);
}
