/* fuzz_db_shard.c: libFuzzer target for merging a shard into a database
 * (search_db_merge_shard; src/search/db.c).
 *
 * An input that begins with zstd's frame magic is the shard file as it is
 * (the stream checks: truncation, corruption, checksums); anything else is
 * compressed first, so that the fuzzer works on the lines (header,
 * version, workload, record, baseline and exhausted lines, their fields). The shard
 * is merged into an empty database. Nothing may crash or leak; a refused
 * shard carries a message and adds nothing; an accepted one adds what it
 * says, and the database reopens with the same workloads, records and
 * baselines and no warning; merged into a database in memory, the same
 * verdict and contents. tests/test_reliability.c replays
 * tests/fuzz/db_shard/.
 */
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zstd.h>

#include "dragon/search.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static const char *const dbshard_files[] = {"workloads.jsonl", "records.jsonl", "baselines.jsonl",
                                            "exhausted.jsonl", "writer.lock"};


/* The loader's warnings (thousands a second) go to /dev/null while an
 * input runs, unless DRAGON_FUZZ_VERBOSE is set (the test suite's replay
 * sets it); a crash still leaves its input as an artifact to rerun. */
static int dbshard_quiet(void) {
  static int null = -2;
  if (null == -2) null = getenv("DRAGON_FUZZ_VERBOSE") ? -1 : open("/dev/null", O_WRONLY);
  if (null < 0) return -1;
  fflush(stderr);
  int saved = dup(2);
  dup2(null, 2);
  return saved;
}

static void dbshard_loud(int saved) {
  if (saved < 0) return;
  fflush(stderr);
  dup2(saved, 2);
  close(saved);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  static char dir[512], shard[512]; /* under $TMPDIR (or /tmp), per process */
  if (!dir[0]) {
    const char *t = getenv("TMPDIR");
    t = t && *t ? t : "/tmp";
    snprintf(dir, sizeof dir, "%s/dragon-fuzz-dbshard-%ld", t, (long)getpid());
    snprintf(shard, sizeof shard, "%s/dragon-fuzz-dbshard-%ld.jsonl.zst", t, (long)getpid());
  }
  int saved = dbshard_quiet();
  mkdir(dir, 0755);
  for (size_t i = 0; i < DG_ARRAY_LEN(dbshard_files); i++) {
    char p[600];
    snprintf(p, sizeof p, "%s/%s", dir, dbshard_files[i]);
    unlink(p);
  }
  static const uint8_t zmagic[4] = {0x28, 0xb5, 0x2f, 0xfd};
  FILE *f = fopen(shard, "wb");
  DG_ASSERT(f);
  if (size >= 4 && memcmp(data, zmagic, 4) == 0) {
    DG_ASSERT(fwrite(data, 1, size, f) == size);
  } else {
    size_t cap = ZSTD_compressBound(size);
    char *z = malloc(cap);
    DG_ASSERT(z);
    size_t zn = ZSTD_compress(z, cap, data, size, 1);
    DG_ASSERT(!ZSTD_isError(zn) && fwrite(z, 1, zn, f) == zn);
    free(z);
  }
  DG_ASSERT(fclose(f) == 0);
  dg_status st;
  search_db *db;
  DG_ASSERT(search_db_open(dir, &db, &st));
  int64_t added = -1;
  bool ok = search_db_merge_shard(db, shard, &added, &st);
  int nw = search_db_workload_count(db), nr = search_db_record_count(db),
      nb = search_db_baseline_count(db), nm = search_db_exhausted_count(db);
  if (!ok) {
    DG_ASSERT(st.code != DG_OK && st.msg[0]);
    DG_ASSERT(added == 0 && nw == 0 && nr == 0 && nb == 0 && nm == 0);
  } else {
    DG_ASSERT(added == nr + nb + nm);
  }
  search_db_close(db);
  DG_ASSERT(search_db_open_readonly(dir, &db, &st));
  DG_ASSERT(search_db_warning_count(db) == 0);
  DG_ASSERT(search_db_workload_count(db) == nw && search_db_record_count(db) == nr &&
            search_db_baseline_count(db) == nb && search_db_exhausted_count(db) == nm);
  /* merged into a database in memory (the shard's records moved, not
   * copied), the same verdict and the same contents, each record found
   * under its workload */
  search_db *mem;
  DG_ASSERT(search_db_open_memory(&mem));
  int64_t madded = -1;
  dg_status mst;
  DG_ASSERT(search_db_merge_shard(mem, shard, &madded, &mst) == ok);
  DG_ASSERT(madded == added);
  DG_ASSERT(search_db_workload_count(mem) == nw && search_db_record_count(mem) == nr &&
            search_db_baseline_count(mem) == nb && search_db_exhausted_count(mem) == nm);
  for (int i = 0; i < nr; i++) {
    const search_record *a = search_db_record_at(db, i), *b = search_db_record_at(mem, i);
    DG_ASSERT(strcmp(a->workload, b->workload) == 0 && strcmp(a->trace, b->trace) == 0);
    int n = 0;
    const int *idx = search_db_workload_records(mem, b->workload, &n);
    bool found = false;
    for (int k = 0; k < n; k++) found |= idx[k] == i;
    DG_ASSERT(found);
  }
  search_db_close(mem);
  search_db_close(db);
  dbshard_loud(saved);
  return 0;
}
