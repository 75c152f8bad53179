/* cmd_sample_model.c: `dragon sample-model`: loads a checkpoint (a run
 * directory's latest, or a model file) and its tokenizer, lays out the
 * prompt as <|kernel|> text [<|prior|> graph] <|graph|>, and prints N
 * samples generated with the KV cache until <|end|>: on the CPU with the C
 * reference (src/nn/sample.c), or with --device cuda all N at once on the
 * GPU (src/nn_cuda/decode.cu). */
#include <string.h>

#include "cli/cli.h"
#include "dragon/nn.h"
#include "dragon/tokenizer.h"
#include "dragon/train.h"

int cmd_sample_model(int argc, char **argv) {
  const char *ckpt = NULL, *prompt = NULL, *prior = NULL, *tokp = NULL, *device = "cpu";
  int64_t n = 1, top_k = 0, max_tokens = 512, seed = 0;
  double temperature = 1.0, top_p = 1.0;
  const cli_opt opts[] = {
      {"--ckpt", CLI_OPT_STR, &ckpt, 0, 0, "run directory (its latest checkpoint) or model file (required)"},
      {"--prompt", CLI_OPT_STR, &prompt, 0, 0, "kernel text file, - for stdin (required)"},
      {"--prior", CLI_OPT_STR, &prior, 0, 0, "prior TSEL graph: refine it instead of writing one"},
      {"--tokenizer", CLI_OPT_STR, &tokp, 0, 0, "tokenizer file; default: tokenizer.bin beside the checkpoint"},
      {"--n", CLI_OPT_INT, &n, 1, 4096, "number of samples"},
      {"--temperature", CLI_OPT_F64, &temperature, 0, 0, "softmax temperature; 0: greedy"},
      {"--top-k", CLI_OPT_INT, &top_k, 0, 1 << 24, "keep the k most likely tokens; 0: all"},
      {"--top-p", CLI_OPT_F64, &top_p, 0, 0, "keep the most likely tokens up to this mass, in (0, 1]"},
      {"--max-tokens", CLI_OPT_INT, &max_tokens, 1, 1 << 20, "tokens per sample at most"},
      {"--seed", CLI_OPT_INT, &seed, 0, INT64_MAX, "random seed (same seed, same samples)"},
      {"--device", CLI_OPT_STR, &device, 0, 0, "cpu (the C reference) or cuda (all samples in one batch on the GPU)"},
  };
  const cli_spec spec = {
      "sample-model", "--ckpt DIR|FILE --prompt FILE [--n N] [--temperature T] [--top-k K] [--top-p P] [--device cpu|cuda] ...",
      "Writes TSEL graphs for a kernel with a trained model (KV cache; the C reference,\n"
      "or the CUDA model with --device cuda), each until <|end|> or --max-tokens. With\n"
      "--n > 1 every sample is preceded by a '# sample I/N' line. The same seed gives\n"
      "the same samples on one device; the devices agree where bf16 rounding does not\n"
      "tip a near-tie.",
      opts, DG_ARRAY_LEN(opts), 0, 0};
  char **pos;
  int npos;
  int rc = cli_parse(&spec, argc, argv, &pos, &npos);
  if (rc) return rc < 0 ? CLI_OK : rc;
  free(pos);
  if (!ckpt || !prompt) {
    fprintf(stderr, "dragon sample-model: --ckpt and --prompt are required\n");
    return CLI_USAGE;
  }
  if (!(temperature >= 0 && temperature <= 1e6) || !(top_p > 0 && top_p <= 1)) {
    fprintf(stderr, "dragon sample-model: --temperature must be in [0, 1e6] and --top-p in (0, 1]\n");
    return CLI_USAGE;
  }
  dg_status st;
  dg_status_ok(&st);
  train_device dev;
  if (!train_device_parse(device, &dev, &st)) return cli_report("sample-model", &st);
  char *model_path = NULL;
  tok_tokenizer *t = NULL;
  nn_model m;
  bool have_model = false;
  tok_ids ids = {0};
  int32_t *out = NULL;
  int *lens = NULL;
  int ret = CLI_OK;
  if (!train_device_available(dev, &st)) goto fail;
  if (!cli_model_load("--ckpt", ckpt, tokp, &m, &t, &model_path, &st)) goto fail;
  have_model = true;
  /* No sample is longer than the model's context: bound the output buffer
   * by it rather than by the flag alone. */
  if (max_tokens > m.cfg.max_seq_len) max_tokens = m.cfg.max_seq_len;
  if ((double)n * (double)max_tokens > (double)(1 << 28)) {
    dg_fail(&st, DG_ERR_USAGE, "--n %lld x --max-tokens %lld is too many tokens at once", (long long)n,
            (long long)max_tokens);
    goto fail;
  }
  {
    /* the prompt's layout is training's (train_prompt_encode) */
    char *kernel_text = cli_read_text(prompt, &st);
    char *prior_text = kernel_text && prior ? cli_read_text(prior, &st) : NULL;
    bool enc = kernel_text && (!prior || prior_text) &&
               train_prompt_encode(t, kernel_text, prior_text, &ids, &st);
    free(kernel_text);
    free(prior_text);
    if (!enc) goto fail;
  }
  nn_sample_opts o;
  nn_sample_opts_default(&o);
  o.temperature = (float)temperature;
  o.top_k = (int)top_k;
  o.top_p = (float)top_p;
  o.max_tokens = (int)max_tokens;
  o.stop_token = tok_special(t, TOK_END);
  const int32_t **prompts = dg_malloc(sizeof(int32_t *) * (size_t)n);
  int *plens = dg_malloc(sizeof(int) * (size_t)n);
  for (int i = 0; i < n; i++) {
    prompts[i] = ids.data;
    plens[i] = (int)ids.len;
  }
  out = dg_malloc(sizeof(int32_t) * (size_t)n * (size_t)max_tokens);
  lens = dg_malloc(sizeof(int) * (size_t)n);
  train_generator *gen = NULL;
  bool ok = train_generator_new(&m, dev, &gen, &st) &&
            train_generate(gen, prompts, plens, (int)n, &o, (uint64_t)seed, out, lens, &st);
  train_generator_free(gen);
  free(prompts);
  free(plens);
  if (!ok) {
    dg_status_prefix(&st, "%s", prompt);
    goto fail;
  }
  for (int i = 0; i < n && ok; i++) {
    dg_str s;
    dg_str_init(&s);
    ok = tok_decode(t, out + (size_t)i * max_tokens, (size_t)lens[i], &s, &st);
    if (ok) {
      if (n > 1) printf("# sample %d/%d\n", i + 1, (int)n);
      fwrite(s.s, 1, s.len, stdout);
      if (s.len == 0 || s.s[s.len - 1] != '\n') putchar('\n');
    }
    dg_str_free(&s);
  }
  if (!ok) goto fail;
  goto done;
fail:
  ret = cli_report("sample-model", &st);
done:
  free(out);
  free(lens);
  tok_ids_free(&ids);
  if (have_model) nn_model_free(&m);
  tok_free(t);
  free(model_path);
  return ret;
}
