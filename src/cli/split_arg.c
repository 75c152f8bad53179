/* split_arg.c: the workloads of a split that `data label` and `data plan`
 * take: the split file's order, after --skip, every S-th from the R-th
 * (--shard R/S), at most --first. Both commands take the same ones, so
 * that a plan compiled ahead covers the workloads a labelling run begins. */
#include <dirent.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "cli/cli.h"
#include "dragon/data.h"

/* A non-negative decimal variable: its value, or -1 (unset or not a number). */
static long env_long(const char *name) {
  const char *v = getenv(name);
  if (!v || !*v) return -1;
  char *end;
  errno = 0;
  long x = strtol(v, &end, 10);
  return *end || errno || x < 0 ? -1 : x;
}

bool cli_launch_from_env(cli_launch *out, char *why, size_t why_cap) {
  static const struct {
    const char *launcher, *rank, *size, *local;
  } known[] = {
      {"Open MPI", "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_RANK"},
      {"PMI", "PMI_RANK", "PMI_SIZE", "MPI_LOCALRANKID"},
      {"Slurm", "SLURM_PROCID", "SLURM_NTASKS", "SLURM_LOCALID"},
  };
  for (size_t k = 0; k < DG_ARRAY_LEN(known); k++) {
    if (!getenv(known[k].rank)) continue;
    long rank = env_long(known[k].rank), size = env_long(known[k].size);
    if (rank < 0 || size < 1 || rank >= size) {
      snprintf(why, why_cap, "%s=%s and %s=%s are not a rank below a size", known[k].rank,
               getenv(known[k].rank), known[k].size,
               getenv(known[k].size) ? getenv(known[k].size) : "(unset)");
      return false;
    }
    out->rank = rank;
    out->size = size;
    out->local = env_long(known[k].local);
    out->launcher = known[k].launcher;
    return true;
  }
  snprintf(why, why_cap,
           "no MPI launcher seen (none of OMPI_COMM_WORLD_RANK, PMI_RANK, SLURM_PROCID is set: "
           "start it with mpirun or srun, or give R/S)");
  return false;
}

int cli_launch_gpu(long local, int n_gpus) {
  if (local < 0 || n_gpus < 2) return -1;
  return (int)(local % n_gpus);
}

int cli_node_gpu_count(void) {
  DIR *d = opendir("/proc/driver/nvidia/gpus");
  if (!d) return 0;
  int n = 0;
  for (struct dirent *e; (e = readdir(d));)
    if (e->d_name[0] != '.') n++;
  closedir(d);
  return n;
}

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
