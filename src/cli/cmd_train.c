/* cmd_train.c: `dragon train sft`: supervised fine-tuning on an examples
 * file or a token shard, into a run directory, resumable. The loop itself
 * is train_sft_run (src/train/sft.c); this file is its command line. */
#include <string.h>

#include "cli/cli.h"
#include "dragon/train.h"

static int sub_sft(int argc, char **argv) {
  const char *data = NULL, *config = "tiny", *out = NULL, *tokenizer = NULL, *device = "cpu";
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
  train_sft_args a = {data, config, tokenizer, (int)vocab, out, resume, steps, stop_after, quiet, dev};
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

int cmd_train(int argc, char **argv) {
  if (argc >= 2 && strcmp(argv[1], "sft") == 0) return sub_sft(argc - 1, argv + 1);
  FILE *o = argc >= 2 && (strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "-h") == 0) ? stdout : stderr;
  fprintf(o, "usage: dragon train sft [options]   (dragon train sft --help)\n");
  if (argc >= 2 && o == stderr) fprintf(stderr, "dragon train: unknown subcommand '%s'\n", argv[1]);
  return o == stdout ? CLI_OK : CLI_USAGE;
}
