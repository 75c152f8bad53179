/* cmd_data.c: `dragon data SUBCOMMAND`: the data stage, one subcommand per
 * step, from a table (a new step is a function and a row):
 *   split   the universe of workloads and its splits: builds the table for
 *           a seed and count and writes data/splits.tsv.zst, or with
 *           --check FILE regenerates a file from its header's parameters
 *           and compares; prints the workloads per split and per family.
 * Summaries go to stdout, errors to stderr; exit 0 ok, 1 error, 2 usage.
 */
#include <string.h>
#include <sys/stat.h>

#include "cli/cli.h"
#include "dragon/data.h"
#include "dragon/wl.h"

/* ---- split ---------------------------------------------------------------- */

static int family_of(const char *spec) {
  size_t n = strcspn(spec, ":");
  for (int k = 0; k < wl_family_count(); k++)
    if (strlen(wl_family_name(k)) == n && strncmp(wl_family_name(k), spec, n) == 0) return k;
  return -1;
}

static void print_summary(const data_splits *t, FILE *out) {
  int64_t n = data_splits_count(t);
  double total = n ? (double)n : 1;
  fprintf(out, "universe: wl_generate seed=%llu count=%lld\n\n",
          (unsigned long long)data_splits_seed(t), (long long)n);
  fprintf(out, "%-16s %9s %7s\n", "split", "workloads", "share");
  for (int s = 0; s < DATA_SPLIT_COUNT; s++)
    fprintf(out, "%-16s %9lld %6.2f%%\n", data_split_name((data_split)s),
            (long long)data_splits_size(t, (data_split)s),
            100.0 * (double)data_splits_size(t, (data_split)s) / total);
  /* a loaded table does not know the guard's moves (-1) */
  bool built = data_splits_moved(t, DATA_SPLIT_TRAIN, DATA_SPLIT_TRAIN) >= 0;
  int64_t moved = 0;
  for (int a = 0; a < DATA_SPLIT_COUNT && built; a++)
    for (int b = 0; b < DATA_SPLIT_COUNT; b++)
      moved += data_splits_moved(t, (data_split)a, (data_split)b);
  if (built) {
    fprintf(out, "\nstructural guard: %lld workloads moved (kernel shared with a more sealed split)\n",
            (long long)moved);
    for (int a = 0; a < DATA_SPLIT_COUNT; a++)
      for (int b = 0; b < DATA_SPLIT_COUNT; b++)
        if (data_splits_moved(t, (data_split)a, (data_split)b) > 0)
          fprintf(out, "  %s -> %s: %lld\n", data_split_name((data_split)a),
                  data_split_name((data_split)b),
                  (long long)data_splits_moved(t, (data_split)a, (data_split)b));
  }

  int nf = wl_family_count();
  int64_t(*per)[DATA_SPLIT_COUNT] = dg_calloc((size_t)nf, sizeof *per);
  for (int64_t i = 0; i < n; i++) {
    const data_split_entry *e = data_splits_at(t, i);
    int k = family_of(e->spec);
    if (k >= 0) per[k][e->split]++;
  }
  fprintf(out, "\n%-24s %6s %6s %5s %5s %7s %7s %7s  %s\n", "family", "total", "train", "val",
          "test", "h_shape", "h_fam", "held", "band");
  for (int k = 0; k < nf; k++) {
    int64_t tot = 0;
    for (int s = 0; s < DATA_SPLIT_COUNT; s++) tot += per[k][s];
    int64_t held = per[k][DATA_SPLIT_HELDOUT_SHAPE] + per[k][DATA_SPLIT_HELDOUT_FAMILY];
    const char *key;
    int64_t lo, hi;
    char band[64];
    if (data_split_band(wl_family_name(k), &key, &lo, &hi))
      snprintf(band, sizeof band, "%s in [%lld, %lld]", key, (long long)lo, (long long)hi);
    else if (strcmp(wl_family_name(k), data_split_heldout_family()) == 0)
      snprintf(band, sizeof band, "the whole family");
    else
      snprintf(band, sizeof band, "-");
    fprintf(out, "%-24s %6lld %6lld %5lld %5lld %7lld %7lld %6.2f%%  %s\n", wl_family_name(k),
            (long long)tot, (long long)per[k][DATA_SPLIT_TRAIN], (long long)per[k][DATA_SPLIT_VAL],
            (long long)per[k][DATA_SPLIT_TEST], (long long)per[k][DATA_SPLIT_HELDOUT_SHAPE],
            (long long)per[k][DATA_SPLIT_HELDOUT_FAMILY], 100.0 * (double)held / (tot ? (double)tot : 1),
            band);
  }
  free(per);
}

/* The first line where two texts differ (1-based), or 0 if they are equal. */
static int64_t first_difference(const char *a, const char *b, const char **la, const char **lb) {
  int64_t ln = 1;
  const char *sa = a, *sb = b;
  for (;; a++, b++) {
    if (*a != *b) {
      *la = sa;
      *lb = sb;
      return ln;
    }
    if (*a == 0) return 0;
    if (*a == '\n') {
      ln++;
      sa = a + 1;
      sb = b + 1;
    }
  }
}

static void print_line(FILE *out, const char *what, const char *line) {
  int n = (int)strcspn(line, "\n");
  fprintf(out, "  %-12s %.*s%s\n", what, n > 200 ? 200 : n, line, *line ? "" : "(end of file)");
}

static int split_check(const char *path) {
  dg_status st;
  data_splits *file = data_splits_load(path, &st);
  if (!file) return cli_report("data split", &st);
  data_splits *re = data_splits_build(data_splits_seed(file), data_splits_count(file), &st);
  if (!re) {
    data_splits_free(file);
    return cli_report("data split", &st);
  }
  char *ta = data_splits_text(file, NULL), *tb = data_splits_text(re, NULL);
  const char *la = NULL, *lb = NULL;
  int64_t ln = first_difference(ta, tb, &la, &lb);
  int rc = CLI_OK;
  if (ln) {
    fprintf(stderr, "dragon data split: %s:%lld: differs from its regeneration (seed=%llu count=%lld)\n",
            path, (long long)ln, (unsigned long long)data_splits_seed(file),
            (long long)data_splits_count(file));
    print_line(stderr, "file:", la);
    print_line(stderr, "regenerated:", lb);
    rc = CLI_ERROR;
  } else {
    print_summary(re, stdout);
    printf("\n%s: identical to its regeneration (%lld workloads)\n", path,
           (long long)data_splits_count(file));
  }
  free(ta);
  free(tb);
  data_splits_free(file);
  data_splits_free(re);
  return rc;
}

static int sub_split(int argc, char **argv) {
  int64_t seed = DATA_SPLIT_SEED, count = DATA_SPLIT_UNIVERSE;
  const char *out = DATA_SPLIT_FILE, *check = NULL;
  const cli_opt opts[] = {
      {"--seed", CLI_OPT_INT, &seed, 0, INT64_MAX, "the generator's seed"},
      {"--count", CLI_OPT_INT, &count, 1, 100000000, "workloads in the universe"},
      {"--out", CLI_OPT_STR, &out, 0, 0, "the file to write (zstd; written atomically)"},
      {"--check", CLI_OPT_STR, &check, 0, 0,
       "regenerate FILE from its header's seed and count and compare, writing nothing"},
  };
  const cli_spec spec = {
      "data split",
      "[--seed S] [--count N] [--out FILE] | --check FILE",
      "Draws the universe of workloads (wl_generate for the seed and count, every\n"
      "family), builds each kernel, and gives each workload one split: the held-out\n"
      "family (layernorm), a held-out shape band of every other family, else train,\n"
      "val or test (94/3/3%) by a hash of the spec. Workloads with structurally equal\n"
      "kernels then share the most sealed of their splits. Writes the table as\n"
      "zstd-compressed lines 'split<TAB>kernel_hash<TAB>spec' and prints the workloads\n"
      "per split and per family. docs/data.md gives the bands and their reasons.",
      opts, (int)DG_ARRAY_LEN(opts), 0, 0};
  char **pos;
  int npos;
  int rc = cli_parse(&spec, argc, argv, &pos, &npos);
  if (rc == -1) return CLI_OK;
  if (rc != CLI_OK) return rc;
  free(pos);
  if (check) return split_check(check);

  dg_status st;
  data_splits *t = data_splits_build((uint64_t)seed, count, &st);
  if (!t) return cli_report("data split", &st);
  const char *slash = strrchr(out, '/');
  if (slash && slash != out) {
    char *dir = dg_strdup(out);
    dir[slash - out] = 0;
    bool ok = dg_mkdirs(dir, &st);
    free(dir);
    if (!ok) {
      data_splits_free(t);
      return cli_report("data split", &st);
    }
  }
  if (!data_splits_save(t, out, &st)) {
    data_splits_free(t);
    return cli_report("data split", &st);
  }
  print_summary(t, stdout);
  struct stat sb;
  long long bytes = stat(out, &sb) == 0 ? (long long)sb.st_size : -1;
  printf("\nwrote %s (%lld workloads, %lld bytes)\n", out, (long long)data_splits_count(t), bytes);
  data_splits_free(t);
  if (fflush(stdout) != 0) {
    fprintf(stderr, "dragon data split: writing stdout failed\n");
    return CLI_ERROR;
  }
  return CLI_OK;
}

/* ---- the subcommands ------------------------------------------------------ */

int cmd_data(int argc, char **argv) {
  static const struct {
    const char *name;
    int (*fn)(int, char **);
    const char *help;
  } subs[] = {
      {"split", sub_split, "the universe of workloads and its train/val/test/held-out splits"},
      {"label", cmd_data_label, "tune a split's workloads with small budgets into one database"},
      {"build", cmd_data_build, "construction and refinement examples from the committed records"},
      {"card", cmd_data_card, "the dataset card: counts, speedups, provenance, and its plot"},
      {"pretrain", cmd_data_pretrain, "structure examples: design-space samples of the training split, no measurement"},
      {"plan", cmd_data_plan, "the next workloads' first labelling round compiled ahead, without a GPU"},
  };
  if (argc >= 2)
    for (size_t i = 0; i < DG_ARRAY_LEN(subs); i++)
      if (strcmp(argv[1], subs[i].name) == 0) return subs[i].fn(argc - 1, argv + 1);
  bool help = argc >= 2 && (strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "-h") == 0);
  FILE *out = help ? stdout : stderr;
  if (argc >= 2 && !help) fprintf(stderr, "dragon data: unknown subcommand '%s'\n", argv[1]);
  fprintf(out, "usage: dragon data SUBCOMMAND ...\n\nThe data stage (docs/data.md):\n\n");
  for (size_t i = 0; i < DG_ARRAY_LEN(subs); i++)
    fprintf(out, "  %-7s %s\n", subs[i].name, subs[i].help);
  fprintf(out, "\n`dragon data SUBCOMMAND --help` describes each one.\n");
  return help ? CLI_OK : CLI_USAGE;
}
