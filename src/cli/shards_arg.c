/* shards_arg.c: a RECORDS argument of the commands that merge measured
 * records into a database: a shard file (*.jsonl.zst), a directory of
 * shards (merged in name order), or a database directory (read, never
 * written: it may have a writer of its own). */
#include <dirent.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "cli/cli.h"
#include "dragon/search.h"

static int cmp_str(const void *a, const void *b) {
  return strcmp(*(const char *const *)a, *(const char *const *)b);
}

static bool is_shard_name(const char *name) {
  size_t n = strlen(name);
  return n > 10 && strcmp(name + n - 10, ".jsonl.zst") == 0;
}

/* One shard: merged, or reported and counted. */
static void merge_one(search_db *db, const char *path, const char *cmd, int64_t *added,
                      int *n_ok, int *bad) {
  int64_t k = 0;
  dg_status st;
  if (search_db_merge_shard(db, path, &k, &st)) {
    *added += k;
    (*n_ok)++;
  } else {
    fprintf(stderr, "dragon %s: %s; shard skipped\n", cmd, st.msg);
    (*bad)++;
  }
}

int cli_merge_records(search_db *db, const char *records, const char *cmd, bool quiet) {
  if (!records) return CLI_OK;
  int64_t added = 0;
  int n_shards = 0;
  dg_status st;
  int bad = cli_merge_shards(db, records, cmd, &added, &n_shards, &st);
  if (bad < 0) return cli_report(cmd, &st);
  if (!quiet)
    fprintf(stderr, "records: %d shards of %s merged (%lld lines new to the database)%s\n",
            n_shards, records, (long long)added, bad ? ", some shards skipped (above)" : "");
  return CLI_OK;
}

int cli_merge_shards(search_db *db, const char *path, const char *cmd, int64_t *added, int *n_ok,
                     dg_status *st) {
  dg_status_ok(st);
  *added = 0;
  *n_ok = 0;
  int bad = 0;
  struct stat sb;
  if (stat(path, &sb) != 0) {
    dg_fail(st, DG_ERR_IO, "%s: no such file or directory", path);
    return -1;
  }
  if (!S_ISDIR(sb.st_mode)) {
    merge_one(db, path, cmd, added, n_ok, &bad);
    return bad;
  }
  dg_str probe;
  dg_str_init(&probe);
  dg_str_printf(&probe, "%s/workloads.jsonl", path);
  bool is_db = stat(probe.s, &sb) == 0;
  dg_str_free(&probe);
  if (is_db) {
    search_db *src;
    if (!search_db_open_readonly(path, &src, st)) return -1;
    bool ok = search_db_merge(db, src, added, st);
    search_db_close(src);
    if (!ok) return -1;
    *n_ok = 1;
    return 0;
  }
  DIR *d = opendir(path);
  if (!d) {
    dg_fail(st, DG_ERR_IO, "%s: cannot open the directory", path);
    return -1;
  }
  DG_VEC(char *) names = {0};
  struct dirent *e;
  while ((e = readdir(d))) {
    if (!is_shard_name(e->d_name)) continue;
    dg_str p;
    dg_str_init(&p);
    dg_str_printf(&p, "%s/%s", path, e->d_name);
    DG_VEC_PUSH(&names, dg_str_take(&p));
  }
  closedir(d);
  if (names.len > 1) qsort(names.data, names.len, sizeof(char *), cmp_str);
  for (size_t i = 0; i < names.len; i++) {
    merge_one(db, names.data[i], cmd, added, n_ok, &bad);
    free(names.data[i]);
  }
  DG_VEC_FREE(&names);
  return bad;
}
