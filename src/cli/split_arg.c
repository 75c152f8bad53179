/* split_arg.c: the workloads of a split that `data label` and `data plan`
 * take: the split file's order, after --skip, every S-th from the R-th
 * (--shard R/S), at most --first. Both commands take the same ones, so
 * that a plan compiled ahead covers the workloads a labelling run begins. */
#include <stdlib.h>
#include <string.h>

#include "cli/cli.h"
#include "dragon/data.h"

int cli_split_specs(const char *cmd, const cli_split_args *a, data_splits **t_out,
                    const char ***specs, int64_t *n) {
  *t_out = NULL;
  *specs = NULL;
  *n = 0;
  data_split which;
  if (!data_split_from_name(a->split, strlen(a->split), &which)) {
    fprintf(stderr, "dragon %s: --split: '%s' is not a split (", cmd, a->split);
    for (int s = 0; s < DATA_SPLIT_COUNT; s++)
      fprintf(stderr, "%s%s", s ? ", " : "", data_split_name((data_split)s));
    fprintf(stderr, ")\n");
    return CLI_USAGE;
  }
  long rank = 0, size = 1;
  if (a->shard) {
    char *end;
    rank = strtol(a->shard, &end, 10);
    if (end == a->shard || *end != '/' || (size = strtol(end + 1, &end, 10)) < 1 || *end ||
        rank < 0 || rank >= size) {
      fprintf(stderr, "dragon %s: --shard: '%s' is not R/S with 0 <= R < S\n", cmd, a->shard);
      return CLI_USAGE;
    }
  }
  dg_status st;
  data_splits *t = data_splits_load(a->splits_path, &st);
  if (!t) return cli_report(cmd, &st);
  DG_VEC(const char *) v = {0};
  int64_t k = 0;
  for (int64_t i = data_splits_next(t, which, 0); i >= 0; i = data_splits_next(t, which, i + 1)) {
    int64_t at = k++;
    if (at < a->skip || (at - a->skip) % size != rank) continue;
    DG_VEC_PUSH(&v, data_splits_at(t, i)->spec);
    if (a->first > 0 && (int64_t)v.len >= a->first) break;
  }
  *t_out = t;
  *specs = v.data;
  *n = (int64_t)v.len;
  return CLI_OK;
}
