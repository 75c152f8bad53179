/* cmd_sample_model.c: `dragon sample-model`: loads a checkpoint (a run
 * directory's latest, or a model file) and its tokenizer, lays out the
 * prompt as <|kernel|> text [<|prior|> graph] <|graph|>, and prints N
 * samples generated with the KV cache until <|end|>: on the CPU with the C
 * reference (src/nn/sample.c), or with --device cuda all N at once on the
 * GPU (src/nn_cuda/decode.cu). */
#include <string.h>
#include <sys/stat.h>

#include "cli/cli.h"
#include "dragon/nn.h"
#include "dragon/tokenizer.h"
#include "dragon/train.h"
#ifdef DG_HAVE_CUDA
#include "dragon/nn_cuda.h"
#endif

static bool is_dir(const char *p) {
  struct stat sb;
  return stat(p, &sb) == 0 && S_ISDIR(sb.st_mode);
}

/* The model file and the tokenizer path of --ckpt (caller frees both). */
static bool resolve(const char *ckpt, const char *tokp, char **model, char **tok, dg_status *st) {
  struct stat sb;
  if (stat(ckpt, &sb) != 0)
    return dg_fail(st, DG_ERR_IO, "--ckpt %s: no such run directory or model file", ckpt);
  char *dir;
  if (is_dir(ckpt)) {
    char *sp;
    int64_t step;
    if (!train_run_latest(ckpt, model, &sp, &step, st)) return false;
    free(sp);
    dir = dg_strdup(ckpt);
  } else {
    *model = dg_strdup(ckpt);
    dir = dg_strdup(ckpt);
    char *slash = strrchr(dir, '/');
    if (slash) slash[1] = 0;
    else strcpy(dir, ".");
  }
  if (tokp) {
    *tok = dg_strdup(tokp);
  } else {
    size_t n = strlen(dir) + 32;
    bool slash = dir[0] && dir[strlen(dir) - 1] == '/';
    *tok = dg_malloc(n);
    snprintf(*tok, n, "%s%stokenizer.bin", dir, slash ? "" : "/");
  }
  free(dir);
  return true;
}

static bool add_text(tok_tokenizer *t, tok_ids *ids, const char *special, const char *path,
                     dg_status *st) {
  int32_t id = tok_special(t, special);
  if (id < 0) return dg_fail(st, DG_ERR_INVALID, "the tokenizer has no %s token", special);
  DG_VEC_PUSH(ids, id);
  if (!path) return true;
  size_t n;
  char *text = dg_read_file(path, &n, st);
  if (!text) return false;
  bool ok = tok_encode(t, text, n, ids, st);
  free(text);
  if (!ok) dg_status_prefix(st, "%s", path);
  return ok;
}

/* The samples on the chosen device (its availability already checked). */
static bool generate(train_device dev, const nn_model *m, const int32_t *const *prompts,
                     const int *lens, int n, const nn_sample_opts *o, uint64_t seed, int32_t *out,
                     int *out_lens, dg_status *st) {
  if (dev == TRAIN_DEVICE_CPU) return nn_generate(m, prompts, lens, n, o, seed, out, out_lens, st);
#ifdef DG_HAVE_CUDA
  nn_cuda_model *g = NULL;
  bool ok = nn_cuda_model_init(&g, &m->cfg, 1, 1, st) && nn_cuda_model_load(g, m, false, st) &&
            nn_cuda_generate(g, prompts, lens, n, o, seed, out, out_lens, NULL, st);
  nn_cuda_model_free(g);
  return ok;
#else
  return train_device_available(dev, st);
#endif
}

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
  char *model_path = NULL, *tok_path = NULL;
  tok_tokenizer *t = NULL;
  nn_model m;
  bool have_model = false;
  tok_ids ids = {0};
  int32_t *out = NULL;
  int *lens = NULL;
  int ret = CLI_OK;
  if (!train_device_available(dev, &st)) goto fail;
  if (!resolve(ckpt, tokp, &model_path, &tok_path, &st)) goto fail;
  if (!(t = tok_load(tok_path, &st))) goto fail;
  if (!nn_checkpoint_load(&m, model_path, false, &st)) goto fail;
  have_model = true;
  if (m.cfg.vocab_size != tok_vocab_size(t)) {
    dg_fail(&st, DG_ERR_INVALID, "%s has a vocabulary of %d, %s one of %d: not the model's tokenizer",
            model_path, m.cfg.vocab_size, tok_path, tok_vocab_size(t));
    goto fail;
  }
  /* No sample is longer than the model's context: bound the output buffer
   * by it rather than by the flag alone. */
  if (max_tokens > m.cfg.max_seq_len) max_tokens = m.cfg.max_seq_len;
  if ((double)n * (double)max_tokens > (double)(1 << 28)) {
    dg_fail(&st, DG_ERR_USAGE, "--n %lld x --max-tokens %lld is too many tokens at once", (long long)n,
            (long long)max_tokens);
    goto fail;
  }
  if (!add_text(t, &ids, TOK_KERNEL, prompt, &st) ||
      (prior && !add_text(t, &ids, TOK_PRIOR, prior, &st)) || !add_text(t, &ids, TOK_GRAPH, NULL, &st))
    goto fail;
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
  bool ok = generate(dev, &m, prompts, plens, (int)n, &o, (uint64_t)seed, out, lens, &st);
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
  free(tok_path);
  return ret;
}
