/* cmd_data_pretrain.c: `dragon data pretrain`: structure examples for the
 * first stage of training (data_pretrain_examples): design-space samples
 * of the training split's workloads, admitted through the one road,
 * written zstd-packed and atomically. No GPU, no records. */
#include <stdlib.h>
#include <string.h>

#include "cli/cli.h"
#include "dragon/data.h"

int cmd_data_pretrain(int argc, char **argv) {
  const char *splits_path = DATA_SPLIT_FILE, *out = "data/examples/pretrain.jsonl.zst";
  int64_t count = 1000, per = 2, seed = 1, threads = 0;
  bool quiet = false;
  const cli_opt opts[] = {
      {"--count", CLI_OPT_INT, &count, 1, 10000000, "workloads: the training split's first N (default 1000)"},
      {"--per", CLI_OPT_INT, &per, 1, 1000, "design-space samples a workload (default 2)"},
      {"--seed", CLI_OPT_INT, &seed, 0, INT64_MAX, "seed of the samples (default 1)"},
      {"--threads", CLI_OPT_INT, &threads, 0, 1024, "threads (default: every core; the bytes do not depend on it)"},
      {"--splits", CLI_OPT_STR, &splits_path, 0, 0, "the splits file (default " DATA_SPLIT_FILE ")"},
      {"--out", CLI_OPT_STR, &out, 0, 0, "the examples file to write, zstd (default data/examples/pretrain.jsonl.zst)"},
      {"--quiet", CLI_OPT_FLAG, &quiet, 0, 0, "no progress lines"},
  };
  const cli_spec spec = {
      "data pretrain", "[--count N] [--per K] [--seed S] [--out FILE]",
      "Writes structure examples for the first stage of training: for each of the\n"
      "training split's first N workloads, K samples of its CUDA design space (a\n"
      "sketch drawn uniformly, every decision drawn anew, postprocessed), lifted to\n"
      "TSEL with why/expect lines from compiler facts (nothing is measured) and\n"
      "admitted through the one road up to the build. Valid schedules on many\n"
      "shapes, not fast ones: the labels come after (dragon data build). Only the\n"
      "training split is read. Deterministic for the splits, N, K and the seed.",
      opts, (int)DG_ARRAY_LEN(opts), 0, 0};
  char **pos;
  int npos;
  int rc = cli_parse(&spec, argc, argv, &pos, &npos);
  if (rc == -1) return CLI_OK;
  if (rc != CLI_OK) return rc;
  free(pos);
  dg_status st;
  data_splits *t = data_splits_load(splits_path, &st);
  if (!t) return cli_report("data pretrain", &st);
  data_pretrain_opts o;
  data_pretrain_opts_default(&o);
  o.splits = t;
  o.count = count;
  o.per = (int)per;
  o.seed = (uint64_t)seed;
  o.threads = (int)threads;
  o.progress = quiet ? NULL : stderr;
  dg_str text, z;
  dg_str_init(&text);
  dg_str_init(&z);
  data_pretrain_stats s;
  bool ok = data_pretrain_examples(&o, &text, &s, &st) && dg_zstd_pack(text.s ? text.s : "", text.len, 19, &z, &st) &&
            dg_write_file_atomic(out, z.s, z.len, &st);
  if (ok) {
    printf("%s: %lld workloads -> %lld examples (%zu bytes, %zu compressed) in %.1f s", out,
           (long long)s.workloads, (long long)s.examples, text.len, z.len, s.seconds);
    if (s.refused) printf("; %lld refused (first: %s)", (long long)s.refused, s.first_refusal);
    if (s.unbuildable) printf("; %lld without a design space", (long long)s.unbuildable);
    if (s.no_sample) printf("; %lld samples never drawn", (long long)s.no_sample);
    putchar('\n');
  }
  dg_str_free(&text);
  dg_str_free(&z);
  data_splits_free(t);
  return ok ? CLI_OK : cli_report("data pretrain", &st);
}
