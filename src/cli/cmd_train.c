/* cmd_train.c: `dragon train sft`: supervised fine-tuning on an examples
 * file or a token shard, into a run directory, resumable. The loop itself
 * is train_sft_run (src/train/sft.c); this file is its command line.
 * `dragon train export`: a trained checkpoint as a model directory
 * (safetensors and the tokenizer), the form dragon ships its model in. */
#include <math.h>
#include <string.h>

#include "cli/cli.h"
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
      "nearest even, and the config in its metadata) and DIR/tokenizer.bin. Every\n"
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

int cmd_train(int argc, char **argv) {
  if (argc >= 2 && strcmp(argv[1], "sft") == 0) return sub_sft(argc - 1, argv + 1);
  if (argc >= 2 && strcmp(argv[1], "export") == 0) return sub_export(argc - 1, argv + 1);
  FILE *o = argc >= 2 && (strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "-h") == 0) ? stdout : stderr;
  fprintf(o, "usage: dragon train sft|export [options]   (dragon train sft --help, dragon train export --help)\n");
  if (argc >= 2 && o == stderr) fprintf(stderr, "dragon train: unknown subcommand '%s'\n", argv[1]);
  return o == stdout ? CLI_OK : CLI_USAGE;
}
