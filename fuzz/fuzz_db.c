/* fuzz_db.c: libFuzzer target for the tuning database loader
 * (search_db_open, search_db_open_readonly; src/search/db.c).
 *
 * The first byte of an input is a mode, the rest is split at its first three
 * NUL bytes into workloads.jsonl, records.jsonl, baselines.jsonl and
 * exhausted.jsonl of a scratch database directory. Mode bit 0: open it for writing (else
 * read-only); bit 1: also write it as a shard and merge that into an empty
 * database; bit 2 (read-only opens): also open it as a view of the workloads
 * whose spec has an even length (search_db_open_some). Nothing may crash or leak; a read-only open changes no byte of
 * the files; the best records come back valid and in order; a record
 * appended by a writer is there after reopening; a shard of the database
 * merges into an empty one with the same records and baselines; a view
 * holds records of its workloads (or of unnamed ones) only, no more than
 * the whole database, and refuses to be packed.
 * tests/test_reliability.c replays tests/fuzz/db/.
 */
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "dragon/search.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static const char *const db_files[] = {"workloads.jsonl", "records.jsonl", "baselines.jsonl",
                                       "exhausted.jsonl", "writer.lock"};
enum { DB_DATA_FILES = 4 }; /* the files an input fills */


/* The loader's warnings (thousands a second) go to /dev/null while an
 * input runs, unless DRAGON_FUZZ_VERBOSE is set (the test suite's replay
 * sets it); a crash still leaves its input as an artifact to rerun. */
static int db_quiet(void) {
  static int null = -2;
  if (null == -2) null = getenv("DRAGON_FUZZ_VERBOSE") ? -1 : open("/dev/null", O_WRONLY);
  if (null < 0) return -1;
  fflush(stderr);
  int saved = dup(2);
  dup2(null, 2);
  return saved;
}

static void db_loud(int saved) {
  if (saved < 0) return;
  fflush(stderr);
  dup2(saved, 2);
  close(saved);
}

static char *db_path_in(const char *dir, const char *name) {
  dg_str s;
  dg_str_init(&s);
  dg_str_printf(&s, "%s/%s", dir, name);
  return dg_str_take(&s);
}

static void db_clear_dir(const char *dir) {
  mkdir(dir, 0755);
  for (size_t i = 0; i < DG_ARRAY_LEN(db_files); i++) {
    char *p = db_path_in(dir, db_files[i]);
    unlink(p);
    free(p);
  }
}

/* The data files' bytes, concatenated with their lengths. */
static char *db_snapshot(const char *dir, size_t *n) {
  dg_str s;
  dg_str_init(&s);
  for (int i = 0; i < DB_DATA_FILES; i++) {
    char *p = db_path_in(dir, db_files[i]);
    size_t len = 0;
    char *t = dg_read_file(p, &len, NULL);
    dg_str_printf(&s, "%zu:", t ? len : (size_t)-1);
    if (t) dg_str_putn(&s, t, len);
    free(t);
    free(p);
  }
  *n = s.len;
  return dg_str_take(&s);
}

static void db_check_queries(const search_db *db) {
  for (int w = 0; w < search_db_workload_count(db); w++) {
    const char *h = search_db_workload_hash(db, w);
    DG_ASSERT(search_db_workload_spec(db, h) && search_db_workload_kernel(db, h));
    const search_record *top[8];
    int k = search_db_top_k(db, h, 8, top);
    DG_ASSERT(k >= 0 && k <= 8 && k <= search_db_workload_trials(db, h));
    for (int i = 0; i < k; i++) {
      DG_ASSERT(search_record_valid(top[i]) && strcmp(top[i]->workload, h) == 0);
      DG_ASSERT(search_record_secs(top[i]) < SEARCH_FAILED_SECS);
      if (i) DG_ASSERT(search_record_secs(top[i - 1]) <= search_record_secs(top[i]));
    }
    int n;
    double b = search_db_baseline_secs(db, h, &n);
    DG_ASSERT(n >= 0 && (b > 0 || n == 0));
  }
  for (int i = 0; i < search_db_record_count(db); i++) {
    const search_record *r = search_db_record_at(db, i);
    DG_ASSERT(r->workload && r->trace && r->target && r->n_secs >= 0);
    for (int j = 0; j < r->n_secs; j++) DG_ASSERT(r->run_secs[j] > 0);
  }
}

static bool db_keep_even(const char *spec, void *ctx) {
  (void)ctx;
  return strlen(spec) % 2 == 0;
}

/* The view of db's directory: its records are those of its workloads. */
static void db_check_view(const char *dir, const search_db *db, const char *shard) {
  dg_status st;
  search_db *v;
  if (!search_db_open_some(dir, db_keep_even, NULL, &v, &st)) {
    DG_ASSERT(st.code != DG_OK && st.msg[0]);
    return;
  }
  db_check_queries(v);
  DG_ASSERT(search_db_record_count(v) <= search_db_record_count(db));
  for (int i = 0; i < search_db_record_count(v); i++) {
    const char *spec = search_db_workload_spec(v, search_db_record_at(v, i)->workload);
    DG_ASSERT(!spec || db_keep_even(spec, NULL));
  }
  DG_ASSERT(!search_db_write_shard(v, NULL, shard, NULL, &st));
  search_db_close(v);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  static char dir[512], other[512], shard[512]; /* under $TMPDIR (or /tmp), per process */
  if (!dir[0]) {
    const char *t = getenv("TMPDIR");
    t = t && *t ? t : "/tmp";
    snprintf(dir, sizeof dir, "%s/dragon-fuzz-db-%ld", t, (long)getpid());
    snprintf(other, sizeof other, "%s/dragon-fuzz-db-%ld-merged", t, (long)getpid());
    snprintf(shard, sizeof shard, "%s/dragon-fuzz-db-%ld.jsonl.zst", t, (long)getpid());
  }
  if (size < 1) return 0;
  int saved = db_quiet();
  int mode = data[0];
  db_clear_dir(dir);
  const uint8_t *p = data + 1, *end = data + size;
  for (int i = 0; i < DB_DATA_FILES; i++) {
    const uint8_t *nul = i < DB_DATA_FILES - 1 ? memchr(p, 0, (size_t)(end - p)) : NULL;
    const uint8_t *stop = nul ? nul : end;
    char *fp = db_path_in(dir, db_files[i]);
    FILE *f = fopen(fp, "wb");
    DG_ASSERT(f && fwrite(p, 1, (size_t)(stop - p), f) == (size_t)(stop - p) && fclose(f) == 0);
    free(fp);
    p = nul ? nul + 1 : end;
  }
  dg_status st;
  search_db *db;
  if (!(mode & 1)) {
    size_t n0, n1;
    char *before = db_snapshot(dir, &n0);
    bool ok = search_db_open_readonly(dir, &db, &st);
    char *after = db_snapshot(dir, &n1);
    DG_ASSERT(n0 == n1 && memcmp(before, after, n0) == 0); /* readers never write */
    free(before);
    free(after);
    if (!ok) {
      DG_ASSERT(st.code != DG_OK && st.msg[0]);
      db_loud(saved);
      return 0;
    }
    db_check_queries(db);
    search_record r = {"1", "[[[\"GetBlock\",[],[\"Z\",\"main\"],[\"b0\"]]],[]]", NULL, 0, "x",
                       "cpu", NULL, 0};
    bool added;
    DG_ASSERT(!search_db_add_record(db, &r, &added, &st) || !added);
    if (mode & 4) db_check_view(dir, db, shard);
  } else {
    if (!search_db_open(dir, &db, &st)) {
      DG_ASSERT(st.code != DG_OK && st.msg[0]);
      db_loud(saved);
      return 0;
    }
    db_check_queries(db);
    int n = search_db_record_count(db);
    double secs = 1e-3;
    search_record r = {"fuzz", "[[[\"GetBlock\",[],[\"Z\",\"main\"],[\"b0\"]]],[]]", &secs, 1,
                       NULL, "cpu", NULL, 0};
    bool added = false;
    DG_ASSERT(search_db_add_record(db, &r, &added, &st));
    search_db_close(db);
    DG_ASSERT(search_db_open(dir, &db, &st));
    DG_ASSERT(search_db_record_count(db) == n + (added ? 1 : 0));
    db_check_queries(db);
  }
  if (mode & 2) {
    unlink(shard);
    int64_t lines = 0;
    DG_ASSERT(search_db_write_shard(db, NULL, shard, &lines, &st));
    DG_ASSERT(lines == search_db_record_count(db) + search_db_baseline_count(db) +
                           search_db_exhausted_count(db));
    if (lines > 0) {
      db_clear_dir(other);
      search_db *m;
      DG_ASSERT(search_db_open(other, &m, &st));
      int64_t added = 0;
      if (!search_db_merge_shard(m, shard, &added, &st))
        dg_panic(__FILE__, __LINE__, "a written shard does not merge: %s", st.msg);
      DG_ASSERT(added == lines);
      DG_ASSERT(search_db_record_count(m) == search_db_record_count(db));
      DG_ASSERT(search_db_baseline_count(m) == search_db_baseline_count(db));
      DG_ASSERT(search_db_exhausted_count(m) == search_db_exhausted_count(db));
      search_db_close(m);
    }
  }
  search_db_close(db);
  db_loud(saved);
  return 0;
}
