/* cmd_tokenizer.c: `dragon tokenizer train|encode|decode`: byte-level BPE
 * on a corpus file, text to ids, ids to text (include/dragon/tokenizer.h).
 * Ids are written and read as whitespace-separated decimal numbers; a bad
 * one is named by its position counted from 1 ("<stdin>: id 3: ..."). */
#include <string.h>

#include "cli/cli.h"
#include "dragon/tokenizer.h"

static int sub_train(int argc, char **argv) {
  const char *corpus = NULL, *out = NULL;
  int64_t vocab = 4096, minf = 2;
  const cli_opt opts[] = {
      {"--corpus", CLI_OPT_STR, &corpus, 0, 0, "text file to learn the merges from (required)"},
      {"--vocab", CLI_OPT_INT, &vocab, 262, TOK_MAX_VOCAB, "vocabulary size: bytes + merges + specials (upper bound)"},
      {"--min-frequency", CLI_OPT_INT, &minf, 1, 1000000000, "stop when the best pair occurs fewer times"},
      {"--out", CLI_OPT_STR, &out, 0, 0, "tokenizer file to write (required)"},
  };
  const cli_spec spec = {"tokenizer train", "--corpus FILE --vocab N --out FILE",
                         "Trains a byte-level BPE tokenizer (dragon pre-tokenizer, the six special\n"
                         "tokens) and writes it in dragon's binary format.",
                         opts, DG_ARRAY_LEN(opts), 0, 0};
  char **pos;
  int npos;
  int rc = cli_parse(&spec, argc, argv, &pos, &npos);
  if (rc) return rc < 0 ? CLI_OK : rc;
  free(pos);
  if (!corpus || !out) {
    fprintf(stderr, "dragon tokenizer train: --corpus and --out are required\n");
    return CLI_USAGE;
  }
  dg_status st;
  size_t n;
  char *text = dg_read_file(corpus, &n, &st);
  if (!text) return cli_report("tokenizer train", &st);
  tok_train_opts o = {(int)minf, NULL, 0, true};
  tok_tokenizer *t = tok_train(text, n, (int)vocab, &o, &st);
  free(text);
  if (!t) return cli_report("tokenizer train", &st);
  bool ok = tok_save(t, out, &st);
  if (ok) printf("%d tokens (%d merges) -> %s\n", tok_vocab_size(t), tok_merge_count(t), out);
  tok_free(t);
  return ok ? CLI_OK : cli_report("tokenizer train", &st);
}

static tok_tokenizer *load(const char *path, dg_status *st) {
  if (!path) {
    dg_fail(st, DG_ERR_USAGE, "--tokenizer is required");
    return NULL;
  }
  return tok_load(path, st);
}

static int sub_encode(int argc, char **argv) {
  const char *tokp = NULL;
  const cli_opt opts[] = {{"--tokenizer", CLI_OPT_STR, &tokp, 0, 0, "tokenizer file (required)"}};
  const cli_spec spec = {"tokenizer encode", "--tokenizer FILE [TEXT_FILE|-]",
                         "Prints the ids of a file's bytes (stdin by default), space-separated.",
                         opts, DG_ARRAY_LEN(opts), 0, 1};
  char **pos;
  int npos;
  int rc = cli_parse(&spec, argc, argv, &pos, &npos);
  if (rc) return rc < 0 ? CLI_OK : rc;
  const char *in = npos ? pos[0] : "-";
  free(pos);
  dg_status st;
  tok_tokenizer *t = load(tokp, &st);
  if (!t) return cli_report("tokenizer encode", &st);
  size_t n;
  char *text = dg_read_file(in, &n, &st);
  tok_ids ids = {0};
  bool ok = text && tok_encode(t, text, n, &ids, &st);
  if (ok) {
    for (size_t i = 0; i < ids.len; i++) printf("%s%d", i ? " " : "", (int)ids.data[i]);
    printf("\n");
  }
  free(text);
  tok_ids_free(&ids);
  tok_free(t);
  return ok ? CLI_OK : cli_report("tokenizer encode", &st);
}

static int sub_decode(int argc, char **argv) {
  const char *tokp = NULL;
  const cli_opt opts[] = {{"--tokenizer", CLI_OPT_STR, &tokp, 0, 0, "tokenizer file (required)"}};
  const cli_spec spec = {"tokenizer decode", "--tokenizer FILE [IDS_FILE|-]",
                         "Reads whitespace-separated ids (stdin by default) and writes their bytes;\n"
                         "special tokens appear as their names.",
                         opts, DG_ARRAY_LEN(opts), 0, 1};
  char **pos;
  int npos;
  int rc = cli_parse(&spec, argc, argv, &pos, &npos);
  if (rc) return rc < 0 ? CLI_OK : rc;
  const char *in = npos ? pos[0] : "-";
  free(pos);
  dg_status st;
  tok_tokenizer *t = load(tokp, &st);
  if (!t) return cli_report("tokenizer decode", &st);
  char *text = dg_read_file(in, NULL, &st);
  bool ok = text != NULL;
  DG_VEC(int32_t) ids = {0};
  if (ok) {
    char *save = NULL;
    int k = 0;
    for (char *w = strtok_r(text, " \t\r\n", &save); w && ok; w = strtok_r(NULL, " \t\r\n", &save)) {
      char what[64];
      snprintf(what, sizeof what, "%s: id %d", strcmp(in, "-") ? in : "<stdin>", ++k);
      int64_t v;
      ok = dg_parse_i64(w, 0, INT32_MAX, &v, what, &st);
      if (!ok) st.code = DG_ERR_PARSE; /* bad input, not bad usage */
      if (ok) DG_VEC_PUSH(&ids, (int32_t)v);
    }
  }
  /* Ids are numbered from 1 in every message, as they are counted above
   * (tok_decode would name a bad one by its index from 0). */
  for (size_t i = 0; i < ids.len && ok; i++)
    if (!tok_token_bytes(t, ids.data[i], NULL)) {
      const char *where = strcmp(in, "-") ? in : "<stdin>";
      if (ids.data[i] >= tok_vocab_size(t))
        ok = dg_fail(&st, DG_ERR_INVALID, "%s: id %zu: %d is out of range [0, %d)", where, i + 1,
                     (int)ids.data[i], tok_vocab_size(t));
      else
        ok = dg_fail(&st, DG_ERR_INVALID, "%s: id %zu: %d is not in the vocabulary", where, i + 1,
                     (int)ids.data[i]);
    }
  dg_str out;
  dg_str_init(&out);
  if (ok) ok = tok_decode(t, ids.data, ids.len, &out, &st);
  if (ok) fwrite(out.s, 1, out.len, stdout);
  dg_str_free(&out);
  DG_VEC_FREE(&ids);
  free(text);
  tok_free(t);
  return ok ? CLI_OK : cli_report("tokenizer decode", &st);
}

int cmd_tokenizer(int argc, char **argv) {
  if (argc >= 2) {
    if (strcmp(argv[1], "train") == 0) return sub_train(argc - 1, argv + 1);
    if (strcmp(argv[1], "encode") == 0) return sub_encode(argc - 1, argv + 1);
    if (strcmp(argv[1], "decode") == 0) return sub_decode(argc - 1, argv + 1);
  }
  bool help = argc >= 2 && (strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "-h") == 0);
  FILE *o = help ? stdout : stderr;
  fprintf(o, "usage: dragon tokenizer train|encode|decode [options]   (each with --help)\n");
  if (argc >= 2 && !help) fprintf(stderr, "dragon tokenizer: unknown subcommand '%s'\n", argv[1]);
  return help ? CLI_OK : CLI_USAGE;
}
