/* cmd_data_card.c: `dragon data card`: the dataset card (data_card_write)
 * of the committed records and examples, written to data/CARD.md, and its
 * plot (data/card.png, through gnuplot: the histograms of the best over
 * baseline and target over prior speedups, log scale). Without gnuplot the
 * card is written without the plot, and the command says so. */
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli/cli.h"
#include "dragon/data.h"
#include "dragon/search.h"

/* Histograms of log2 speedups: one panel each, bins of a quarter octave. */
static bool plot(const char *points_path, const char *png, dg_status *st) {
  dg_str sc;
  dg_str_init(&sc);
  dg_str_printf(&sc,
                "set terminal pngcairo size 1100,420 noenhanced\n"
                "set output '%s'\n"
                "set multiplot layout 1,2\n"
                "bw = 0.25\n"
                "bin(x) = bw * floor(log(x) / log(2) / bw) + bw / 2\n"
                "set style fill solid 0.6\n"
                "set boxwidth bw\n"
                "set ylabel 'count'\n"
                "set xlabel 'log2(best / baseline)'\n"
                "set title 'labelled workloads: best correct over the untuned baseline'\n"
                "plot '< grep ^best %s' using (bin($3)):(1) smooth freq with boxes notitle\n"
                "set xlabel 'log2(target / prior)'\n"
                "set title 'refinement examples: target over prior'\n"
                "plot '< grep ^gain %s' using (bin($3)):(1) smooth freq with boxes notitle\n"
                "unset multiplot\n",
                png, points_path, points_path);
  bool ok = cli_gnuplot(sc.s, st);
  dg_str_free(&sc);
  return ok;
}

int cmd_data_card(int argc, char **argv) {
  const char *records = "data/records", *splits_path = DATA_SPLIT_FILE;
  const char *examples = "data/examples", *out = "data/CARD.md", *png = "data/card.png";
  bool no_plot = false;
  const cli_opt opts[] = {
      {"--records", CLI_OPT_STR, &records, 0, 0, "the committed shards"},
      {"--splits", CLI_OPT_STR, &splits_path, 0, 0, "the splits file"},
      {"--examples", CLI_OPT_STR, &examples, 0, 0, "the examples directory (SPLIT.jsonl.zst)"},
      {"--out", CLI_OPT_STR, &out, 0, 0, "the card (Markdown)"},
      {"--plot", CLI_OPT_STR, &png, 0, 0, "the plot (PNG, beside the card)"},
      {"--no-plot", CLI_OPT_FLAG, &no_plot, 0, 0, "no plot"},
  };
  const cli_spec spec = {
      "data card", "[--records DIR] [--examples DIR] [--out CARD.md] [--plot PNG]",
      "Writes the dataset card: the records and their provenance (builds, devices,\n"
      "dates), the labelled workloads per family, split and dtype, the speedups of\n"
      "the best correct records over the untuned baselines and of refinement targets\n"
      "over their priors, the examples per split and kind, and a plot of both\n"
      "speedup distributions (gnuplot).",
      opts, (int)DG_ARRAY_LEN(opts), 0, 0};
  char **pos;
  int npos;
  int rc = cli_parse(&spec, argc, argv, &pos, &npos);
  if (rc == -1) return CLI_OK;
  if (rc != CLI_OK) return rc;
  free(pos);
  dg_status st;
  data_splits *t = data_splits_load(splits_path, &st);
  if (!t) return cli_report("data card", &st);
  char scratch[] = "/tmp/dragon-card-XXXXXX";
  search_db *db = NULL;
  rc = CLI_OK;
  if (!mkdtemp(scratch)) {
    fprintf(stderr, "dragon data card: cannot create a scratch directory in /tmp\n");
    data_splits_free(t);
    return CLI_ERROR;
  }
  int64_t added;
  int n_ok;
  search_db_open_memory(&db); /* the shards merged in memory; the scratch holds the plot's points */
  if (cli_merge_shards(db, records, "data card", &added, &n_ok, &st) != 0)
    rc = st.code != DG_OK ? cli_report("data card", &st) : CLI_ERROR;
  static const char *const names[] = {"train", "val", "test"};
  char *texts[3] = {NULL, NULL, NULL};
  const char *tv[3], *nv[3];
  int n_ex = 0;
  for (int i = 0; i < 3 && rc == CLI_OK; i++) {
    char path[4096];
    snprintf(path, sizeof path, "%s/%s.jsonl.zst", examples, names[i]);
    if (access(path, F_OK) != 0) continue;
    size_t zn, len;
    char *z = dg_read_file(path, &zn, &st);
    texts[i] = z ? dg_zstd_unpack(z, zn, path, 0, &len, &st) : NULL;
    free(z);
    if (!texts[i]) {
      rc = cli_report("data card", &st);
      break;
    }
    tv[n_ex] = texts[i];
    nv[n_ex++] = names[i];
  }
  if (rc == CLI_OK) {
    const char *slash = strrchr(png, '/');
    data_card_opts o = {db, t, tv, nv, n_ex, no_plot ? NULL : slash ? slash + 1 : png};
    dg_str md, pts;
    dg_str_init(&md);
    dg_str_init(&pts);
    char pts_path[64];
    snprintf(pts_path, sizeof pts_path, "%s/points.txt", scratch);
    bool ok = data_card_write(&o, &md, &pts, &st);
    if (ok && !no_plot) {
      ok = dg_write_file_atomic(pts_path, pts.s ? pts.s : "", pts.len, &st);
      if (ok && !plot(pts_path, png, &st)) {
        fprintf(stderr, "dragon data card: no plot: %s\n", st.msg);
        dg_status_ok(&st);
      }
      unlink(pts_path);
    }
    if (ok) ok = dg_write_file_atomic(out, md.s, md.len, &st);
    if (ok) printf("wrote %s%s%s\n", out, no_plot ? "" : " and ", no_plot ? "" : png);
    else rc = cli_report("data card", &st);
    dg_str_free(&md);
    dg_str_free(&pts);
  }
  for (int i = 0; i < 3; i++) free(texts[i]);
  search_db_close(db);
  rmdir(scratch); /* empty: the plot's points are removed once plotted */
  data_splits_free(t);
  return rc;
}
