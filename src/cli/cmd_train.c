/* cmd_train.c: `dragon train sft`: supervised fine-tuning on an examples
 * file or a token shard, into a run directory, resumable. The loop itself
 * is train_sft_run (src/train/sft.c); this file is its command line.
 * `dragon train export`: a trained checkpoint as a model directory
 * (safetensors and the tokenizer), the form dragon ships its model in.
 * `dragon train grpo`: reinforcement learning on the gates' rewards
 * (grpo_run, src/train/grpo_run.c). */
#include <jansson.h>
#include <math.h>
#include <string.h>

#include "cli/cli.h"
#include "dragon/data.h"
#include "dragon/rt_cuda.h"
#include "dragon/search.h"
#include "dragon/train.h"

static int sub_sft(int argc, char **argv) {
  const char *data = NULL, *config = "tiny", *out = NULL, *tokenizer = NULL, *device = "cpu",
             *init = NULL;
  bool resume = false, quiet = false;
  int64_t steps = 0, stop_after = 0, vocab = 1024;
  const cli_opt opts[] = {
      {"--data", CLI_OPT_STR, &data, 0, 0, "examples (.jsonl) or a token shard (required for a new run)"},
      {"--config", CLI_OPT_STR, &config, 0, 0, "built-in 'tiny' or a config file (model + training keys)"},
      {"--out", CLI_OPT_STR, &out, 0, 0, "run directory (required)"},
      {"--resume", CLI_OPT_FLAG, &resume, 0, 0, "continue the run in --out from its latest checkpoint"},
      {"--steps", CLI_OPT_INT, &steps, 0, 1000000000000, "total steps; 0: the config's"},
      {"--tokenizer", CLI_OPT_STR, &tokenizer, 0, 0, "tokenizer file; default: trained on the examples"},
      {"--vocab", CLI_OPT_INT, &vocab, 262, 1 << 20, "vocabulary size when training the tokenizer"},
      {"--stop-after", CLI_OPT_INT, &stop_after, 0, 1000000000000, "end this session after N steps (checkpointed); 0: run to the end"},
      {"--device", CLI_OPT_STR, &device, 0, 0, "cpu (the C reference) or cuda (the GPU model; resumes either way)"},
      {"--init", CLI_OPT_STR, &init, 0, 0, "a new run starts from this checkpoint's weights (fine-tuning after pretraining; give its --tokenizer)"},
      {"--quiet", CLI_OPT_FLAG, &quiet, 0, 0, "no progress lines on stderr"},
  };
  const cli_spec spec = {
      "train sft", "--data D --out DIR [--config tiny|FILE] [--resume] [--steps N] [--device cpu|cuda] ...",
      "Supervised fine-tuning of the schedule-writing model on (prompt, target)\n"
      "examples, with per-segment loss weights (edit 1.0, expect 0.5, why 0.2, prompt 0\n"
      "by default). Runs on the CPU with the C reference model, or with --device cuda\n"
      "on the GPU with the CUDA model (bf16 matmuls); checkpoints are the same files,\n"
      "so a run resumes on either. Writes config.txt, tokenizer.bin, data.shard,\n"
      "model_<step>.bin, state_<step>.bin, latest and log.jsonl into --out; progress\n"
      "(loss, val loss, tokens/s, MFU, ETA) on stderr. docs/training.md describes the\n"
      "config keys and the formats.",
      opts, DG_ARRAY_LEN(opts), 0, 0};
  char **pos;
  int npos;
  int rc = cli_parse(&spec, argc, argv, &pos, &npos);
  if (rc) return rc < 0 ? CLI_OK : rc;
  free(pos);
  if (!out) {
    fprintf(stderr, "dragon train sft: --out is required\n");
    return CLI_USAGE;
  }
  train_result res;
  dg_status st;
  dg_status_ok(&st);
  train_device dev;
  if (!train_device_parse(device, &dev, &st)) return cli_report("train sft", &st);
  if (init && resume) {
    fprintf(stderr, "dragon train sft: --init starts a new run; a resumed run has its weights\n");
    return CLI_USAGE;
  }
  if (init && !tokenizer) {
    fprintf(stderr, "dragon train sft: --init needs the --tokenizer the model was trained with\n");
    return CLI_USAGE;
  }
  train_sft_args a = {data, config, tokenizer, (int)vocab, out, resume, steps, stop_after, quiet, dev, init};
  if (!train_sft_run(&a, &res, &st)) {
    train_result_free(&res);
    return cli_report("train sft", &st);
  }
  int64_t n = res.last_step - res.first_step;
  printf("steps %lld..%lld of %s: train %lld examples, val %lld, left out %lld\n",
         (long long)res.first_step, (long long)res.last_step, out, (long long)res.n_train,
         (long long)res.n_val, (long long)res.n_dropped);
  if (n > 0) printf("last loss %.6f\n", (double)res.losses[n - 1]);
  if (res.val_loss >= 0) printf("val loss %.6f\n", (double)res.val_loss);
  train_result_free(&res);
  return CLI_OK;
}

/* The file at path, zstd-packed in place (one frame, level 19). */
static bool pack_file(const char *path, dg_status *st) {
  size_t n;
  char *raw = dg_read_file(path, &n, st);
  if (!raw) return false;
  dg_str z;
  dg_str_init(&z);
  bool ok = dg_zstd_pack(raw, n, 19, &z, st) && dg_write_file_atomic(path, z.s, z.len, st);
  free(raw);
  dg_str_free(&z);
  return ok;
}

/* `dragon train export`: a checkpoint as a model directory. */
static int sub_export(int argc, char **argv) {
  const char *model_arg = NULL, *tokp = NULL, *out = NULL, *dtype = "bf16";
  bool pack = false;
  const cli_opt opts[] = {
      {"--model", CLI_OPT_STR, &model_arg, 0, 0, "run directory (its latest checkpoint) or checkpoint file (required)"},
      {"--tokenizer", CLI_OPT_STR, &tokp, 0, 0, "tokenizer file; default: tokenizer.bin beside the model"},
      {"--out", CLI_OPT_STR, &out, 0, 0, "the model directory to write (required)"},
      {"--dtype", CLI_OPT_STR, &dtype, 0, 0, "bf16 (default), f16 or f32"},
      {"--pack", CLI_OPT_FLAG, &pack, 0, 0, "write " CLI_MODEL_FILE ".zst, zstd-packed (as the shipped model)"},
  };
  const cli_spec spec = {
      "train export", "--model RUN --out DIR [--dtype bf16|f16|f32] [--pack]",
      "Writes a trained model as a model directory: DIR/" CLI_MODEL_FILE " (the\n"
      "parameters with Hugging Face Llama names in the given dtype, rounded to\n"
      "nearest even, and the config in its metadata), DIR/tokenizer.bin and, where\n"
      "the run has one, its training config as DIR/" TRAIN_MODEL_CONFIG " (how its\n"
      "graphs are laid out: plan_first). Every\n"
      "command that takes --model reads such a directory; dragon's shipped model is\n"
      "one. Prints the largest change a parameter saw in the conversion.",
      opts, DG_ARRAY_LEN(opts), 0, 0};
  char **pos;
  int npos;
  int rc = cli_parse(&spec, argc, argv, &pos, &npos);
  if (rc) return rc < 0 ? CLI_OK : rc;
  free(pos);
  if (!model_arg || !out) {
    fprintf(stderr, "dragon train export: --model and --out are required\n");
    return CLI_USAGE;
  }
  nn_st_dtype dt;
  if (strcmp(dtype, "bf16") == 0) dt = NN_ST_BF16;
  else if (strcmp(dtype, "f16") == 0) dt = NN_ST_F16;
  else if (strcmp(dtype, "f32") == 0) dt = NN_ST_F32;
  else {
    fprintf(stderr, "dragon train export: --dtype %s: bf16, f16 or f32\n", dtype);
    return CLI_USAGE;
  }
  dg_status st;
  nn_model m, back;
  tok_tokenizer *tok = NULL;
  char *model_path = NULL;
  if (!cli_model_load("--model", model_arg, tokp, &m, &tok, &model_path, &st))
    return cli_report("train export", &st);
  char path[4096], tpath[4096];
  snprintf(path, sizeof path, "%s/" CLI_MODEL_FILE "%s", out, pack ? ".zst" : "");
  snprintf(tpath, sizeof tpath, "%s/tokenizer.bin", out);
  bool ok = cli_out_dir(out, &st) && nn_safetensors_export(&m, path, dt, &st) &&
            (!pack || pack_file(path, &st)) && tok_save(tok, tpath, &st);
  ok = ok && train_model_config_copy(model_path, out, &st); /* the layout its graphs are written in */
  /* read back: the directory loads, and what the rounding changed */
  if (ok) {
    tok_tokenizer *tok2 = NULL;
    char *p2 = NULL;
    ok = cli_model_load("--out", out, NULL, &back, &tok2, &p2, &st);
    if (ok) {
      double worst = 0;
      for (size_t i = 0; i < m.num_params; i++) {
        double d = fabs((double)m.params_mem[i] - (double)back.params_mem[i]);
        double r = d / (fabs((double)m.params_mem[i]) + 1e-30);
        if (d > 0 && r > worst) worst = r;
      }
      printf("wrote %s: %s%s (%zu parameters, %s), tokenizer.bin; largest relative change %.3g\n",
             out, CLI_MODEL_FILE, pack ? ".zst" : "", m.num_params, dtype, worst);
      nn_model_free(&back);
      tok_free(tok2);
      free(p2);
    }
  }
  nn_model_free(&m);
  tok_free(tok);
  free(model_path);
  return ok ? CLI_OK : cli_report("train export", &st);
}

/* The run's curves (OUT/grpo.png and .svg): mean reward and correct share
 * a step, and their means over the last ten steps, from its log. */
static bool plot_grpo(const char *dir, dg_status *st) {
  char log[4096], pts[4200];
  snprintf(log, sizeof log, "%s/log.jsonl", dir);
  snprintf(pts, sizeof pts, "%s/grpo.plot.tsv", dir);
  size_t n;
  char *text = dg_read_file(log, &n, st);
  if (!text) return false;
  dg_str out, sc;
  dg_str_init(&out);
  dg_str_init(&sc);
  double rw[10] = {0}, co[10] = {0};
  int k = 0;
  for (char *p = text, *nl; *p; p = nl + 1) {
    nl = strchr(p, '\n');
    if (!nl) break;
    json_t *j = json_loadb(p, (size_t)(nl - p), 0, NULL);
    if (j) {
      double r = json_number_value(json_object_get(j, "reward")),
             c = json_number_value(json_object_get(j, "correct"));
      rw[k % 10] = r;
      co[k % 10] = c;
      k++;
      int w = k < 10 ? k : 10;
      double mr = 0, mc = 0;
      for (int i = 0; i < w; i++) mr += rw[i], mc += co[i];
      dg_str_printf(&out, "%lld\t%.6g\t%.6g\t%.6g\t%.6g\n",
                    (long long)json_integer_value(json_object_get(j, "step")), r, c, mr / w, mc / w);
      json_decref(j);
    }
  }
  free(text);
  bool ok = dg_write_file_atomic(pts, out.s ? out.s : "", out.len, st);
  for (int fmt = 0; ok && k > 0 && fmt < 2; fmt++) {
    dg_str_clear(&sc);
    dg_str_printf(&sc,
                  "%s\nset output '%s/grpo.%s'\nset datafile separator '\\t'\n"
                  "set multiplot layout 1,2 title 'GRPO: %d steps'\nset xlabel 'step'\n"
                  "set ylabel 'mean reward'\nplot '%s' using 1:2 with points pt 7 ps 0.5 title 'a step', "
                  "'' using 1:4 with lines lw 2 title 'mean of ten'\n"
                  "set ylabel 'correct share'\nset yrange [0:1]\nplot '%s' using 1:3 with points pt 7 ps 0.5 "
                  "title 'a step', '' using 1:5 with lines lw 2 title 'mean of ten'\nunset multiplot\n",
                  fmt ? "set terminal svg size 1100,420 noenhanced" : "set terminal pngcairo size 1100,420 noenhanced",
                  dir, fmt ? "svg" : "png", k, pts, pts);
    ok = cli_gnuplot(sc.s, st);
  }
  dg_str_free(&out);
  dg_str_free(&sc);
  return ok;
}

/* `dragon train grpo`: reinforcement learning on the gates' rewards. */
static int sub_grpo(int argc, char **argv) {
  grpo_run_args a;
  grpo_run_args_default(&a);
  const char *init = NULL, *tokp = NULL, *out = NULL, *splits_path = DATA_SPLIT_FILE, *target = "c",
             *norm = "token", *device = "cpu", *write = NULL;
  int64_t steps = 0, prompts = a.prompts, samples = a.samples, warmup = a.warmup, max_tokens = a.max_tokens,
          epochs = a.epochs, micro = a.micro_rows, seed = 1, threads = 0;
  double lr = a.lr, beta = a.obj.beta, eps_low = a.obj.eps_low, eps_high = a.obj.eps_high,
         temperature = a.temperature, bonus_clip = a.obj.bonus_clip;
  bool resume = false, no_std = false, guard = false, quiet = false;
  const cli_opt opts[] = {
      {"--init", CLI_OPT_STR, &init, 0, 0, "the model a new run starts from (a model or run directory, or a model file); default: the shipped model"},
      {"--tokenizer", CLI_OPT_STR, &tokp, 0, 0, "its tokenizer; default: tokenizer.bin beside it"},
      {"--out", CLI_OPT_STR, &out, 0, 0, "run directory (required)"},
      {"--resume", CLI_OPT_FLAG, &resume, 0, 0, "continue the run in --out (its options are kept; --steps may raise the total)"},
      {"--steps", CLI_OPT_INT, &steps, 0, 1000000000, "total steps (default 100)"},
      {"--prompts", CLI_OPT_INT, &prompts, 1, 100000, "groups a step (default 16)"},
      {"--samples", CLI_OPT_INT, &samples, 2, 256, "samples a group, G (default 8)"},
      {"--lr", CLI_OPT_F64, &lr, 0, 0, "learning rate after the warm-up (default 1e-5)"},
      {"--warmup", CLI_OPT_INT, &warmup, 0, 1000000, "steps of linear warm-up (default 10)"},
      {"--beta", CLI_OPT_F64, &beta, 0, 0, "KL penalty to the starting model (default 0: none)"},
      {"--eps-low", CLI_OPT_F64, &eps_low, 0, 0, "ratio clip below 1 (default 0.2)"},
      {"--eps-high", CLI_OPT_F64, &eps_high, 0, 0, "ratio clip above 1 (default 0.2; clip-higher: 0.28)"},
      {"--norm", CLI_OPT_STR, &norm, 0, 0, "token (every loss token of the step, DAPO; default) or sequence (GRPO)"},
      {"--no-std", CLI_OPT_FLAG, &no_std, 0, 0, "advantages not divided by the group's std (Dr. GRPO)"},
      {"--bonus-clip", CLI_OPT_F64, &bonus_clip, 0, 0, "the latency bonus log(speedup) clipped to +-this (default 3)"},
      {"--temperature", CLI_OPT_F64, &temperature, 0, 0, "of the rollouts (default 1)"},
      {"--max-tokens", CLI_OPT_INT, &max_tokens, 16, 1 << 16, "tokens a sample at most (default 2048)"},
      {"--epochs", CLI_OPT_INT, &epochs, 1, 100, "updates on a step's samples (default 1: on policy)"},
      {"--micro-rows", CLI_OPT_INT, &micro, 1, 4096, "samples a forward (default 4)"},
      {"--device", CLI_OPT_STR, &device, 0, 0, "where the policy trains: cpu (the C reference; default) or cuda (the GPU model; resumes either way)"},
      {"--write", CLI_OPT_STR, &write, 0, 0, "where the rollouts are written: cuda (the GPU's KV cache, the default with --device cuda) or cpu (the host copy on every core)"},
      {"--guard", CLI_OPT_FLAG, &guard, 0, 0, "write with the line guard (default: the policy's own lines)"},
      {"--seed", CLI_OPT_INT, &seed, 0, INT64_MAX, "seed of the rollouts (default 1)"},
      {"--target", CLI_OPT_STR, &target, 0, 0, "c (correctness in the C emulation; default) or cuda (timed on the GPU: the latency bonus)"},
      {"--threads", CLI_OPT_INT, &threads, 0, 1024, "threads writing and judging (default: every core)"},
      {"--splits", CLI_OPT_STR, &splits_path, 0, 0, "the splits file (prompts: its training split)"},
      {"--quiet", CLI_OPT_FLAG, &quiet, 0, 0, "no progress lines"},
  };
  const cli_spec spec = {
      "train grpo", "--out DIR [--init MODEL] [--steps N] [--prompts P] [--samples G] [--target c|cuda] [--resume] ...",
      "Reinforcement learning of the schedule-writing model with GRPO: each step, G graphs\n"
      "for each of P training workloads, written by constrained decoding and judged by\n"
      "the gates of dragon optimize (a failure earns less the earlier its gate; a\n"
      "correct graph 1, plus log(speedup over the untuned baseline) on a GPU); groups of\n"
      "equal rewards are replaced by new prompts; group-normalised advantages, the\n"
      "clipped ratio objective, an optional KL to the starting model. Trains on the C\n"
      "reference model or, with --device cuda, the GPU's (the rollouts are then written\n"
      "there too, every sample a row of one KV cache, the checks on every core);\n"
      "checkpoints every step and resumes exactly (on either device). Writes grpo.cfg,\n"
      "tokenizer.bin, model_<S>.bin, state_<S>.bin, cursor_<S>.txt, latest and log.jsonl\n"
      "(one line a step: reward, correct share, speedup, loss, KL, clipped share,\n"
      "entropy, dropped groups) and its plot (grpo.png, grpo.svg: reward and correct\n"
      "share a step and over ten) into --out.",
      opts, DG_ARRAY_LEN(opts), 0, 0};
  char **pos;
  int npos;
  int rc = cli_parse(&spec, argc, argv, &pos, &npos);
  if (rc) return rc < 0 ? CLI_OK : rc;
  free(pos);
  if (!out) {
    fprintf(stderr, "dragon train grpo: --out is required\n");
    return CLI_USAGE;
  }
  if (strcmp(norm, "token") != 0 && strcmp(norm, "sequence") != 0) {
    fprintf(stderr, "dragon train grpo: --norm %s: token or sequence\n", norm);
    return CLI_USAGE;
  }
  if (strcmp(target, "c") != 0 && strcmp(target, "cuda") != 0) {
    fprintf(stderr, "dragon train grpo: --target %s: c or cuda\n", target);
    return CLI_USAGE;
  }
  {
    dg_status dst;
    dg_status_ok(&dst);
    if (!train_device_parse(device, &a.device, &dst)) return cli_report("train grpo", &dst);
    train_device w = a.device;
    if (write && !train_device_parse(write, &w, &dst)) {
      fprintf(stderr, "dragon train grpo: --write %s: cpu or cuda\n", write);
      return CLI_USAGE;
    }
    if (w == TRAIN_DEVICE_CUDA && a.device != TRAIN_DEVICE_CUDA) {
      fprintf(stderr, "dragon train grpo: --write cuda writes with the GPU's policy: it needs --device cuda\n");
      return CLI_USAGE;
    }
    a.write_on_cpu = w == TRAIN_DEVICE_CPU;
  }
  a.out_dir = out;
  a.resume = resume;
  a.steps = steps > 0 ? steps : (resume ? 0 : 100);
  a.prompts = (int)prompts;
  a.samples = (int)samples;
  a.lr = (float)lr;
  a.warmup = (int)warmup;
  a.obj.beta = (float)beta;
  a.obj.eps_low = (float)eps_low;
  a.obj.eps_high = (float)eps_high;
  a.obj.norm = strcmp(norm, "token") == 0 ? GRPO_NORM_TOKEN : GRPO_NORM_SEQUENCE;
  a.obj.scale_std = !no_std;
  a.obj.bonus_clip = (float)bonus_clip;
  a.temperature = (float)temperature;
  a.max_tokens = (int)max_tokens;
  a.epochs = (int)epochs;
  a.micro_rows = (int)micro;
  a.guard = guard;
  a.seed = (uint64_t)seed;
  a.threads = (int)threads;
  a.progress = quiet ? NULL : stderr;
  dg_status st;
  dg_status_ok(&st);
  char *model_path = NULL, *tok_path = NULL;
  data_splits *t = NULL;
  search_cuda_measure gm = {5, 10, 1, NULL};
  bool have_gpu = false;
  grpo_result res;
  memset(&res, 0, sizeof res);
  int ret = CLI_OK;
  if (!resume) {
    if (!cli_model_paths("--init", cli_model_arg(init), tokp, &model_path, &tok_path, &st)) goto fail;
    a.init = model_path;
    a.init_tokenizer = tok_path;
  }
  if (!(t = data_splits_load(splits_path, &st))) goto fail;
  a.splits = t;
  {
    dg_str notes;
    dg_str_init(&notes);
    bool ok = cli_gpu_open(target, a.threads, &gm, &have_gpu, &notes, &st);
    dg_str_free(&notes);
    if (!ok) goto fail;
    a.gpu = have_gpu ? &gm : NULL;
  }
  if (!grpo_run(&a, &res, &st)) goto fail;
  printf("steps %lld..%lld of %s\n", (long long)res.first_step, (long long)res.last_step, out);
  {
    dg_status pst;
    if (!plot_grpo(out, &pst) && !quiet) fprintf(stderr, "dragon train grpo: no plot: %s\n", pst.msg);
  }
  if (res.n > 0)
    printf("last step: reward %.4f, correct %.1f%%, loss %.5f\n", res.steps[res.n - 1].reward_mean,
           100 * res.steps[res.n - 1].correct, res.steps[res.n - 1].loss);
  goto done;
fail:
  ret = cli_report("train grpo", &st);
done:
  grpo_result_free(&res);
  if (have_gpu) search_cuda_measure_free(&gm);
  data_splits_free(t);
  free(model_path);
  free(tok_path);
  return ret;
}

int cmd_train(int argc, char **argv) {
  if (argc >= 2 && strcmp(argv[1], "sft") == 0) return sub_sft(argc - 1, argv + 1);
  if (argc >= 2 && strcmp(argv[1], "export") == 0) return sub_export(argc - 1, argv + 1);
  if (argc >= 2 && strcmp(argv[1], "grpo") == 0) return sub_grpo(argc - 1, argv + 1);
  FILE *o = argc >= 2 && (strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "-h") == 0) ? stdout : stderr;
  fprintf(o, "usage: dragon train sft|grpo|export [options]   (dragon train SUB --help)\n");
  if (argc >= 2 && o == stderr) fprintf(stderr, "dragon train: unknown subcommand '%s'\n", argv[1]);
  return o == stdout ? CLI_OK : CLI_USAGE;
}
