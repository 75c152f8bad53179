/* test_db_shard.c: baselines, shards (the committed form of measured
 * records) and merges: a shard carries every field and reads back equal,
 * holds only what the excepted database lacks, and a corrupt, truncated or
 * foreign shard is refused naming the file, adding nothing. */
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <zstd.h>

#include "dragon/search.h"
#include "dragon/wl.h"
#include "test.h"

static const char *sdir(const char *name) {
  static char buf[8][512];
  static int k;
  char *b = buf[k++ % 8];
  snprintf(b, 512, "%s/%s", dg_test_tmpdir(), name);
  return b;
}

static const char *TA = "[[[\"GetBlock\",[],[\"Z\",\"main\"],[\"b0\"]],[\"EnterPostproc\",[],[],[]]],[]]";
static const char *TB =
    "[[[\"GetBlock\",[],[\"Z\",\"main\"],[\"b0\"]],[\"GetLoops\",[\"b0\"],[],[\"l1\",\"l2\",\"l3\",\"l4\"]],"
    "[\"EnterPostproc\",[],[],[]]],[]]";

static bool put(search_db *db, const char *wl, const char *trace, double secs, bool base,
                dg_status *st) {
  search_record r = {wl,   trace, &secs, secs > 0 ? 1 : 0, secs > 0 ? NULL : "wrong numbers",
                     "cuda", "2026-12-01T00:00:00Z", 42, "dragon test lower 1", "GPU X"};
  bool added;
  return base ? search_db_add_baseline(db, &r, &added, st)
              : search_db_add_record(db, &r, &added, st);
}

/* A database of two workloads with records and baselines. */
static search_db *sample_db(const char *dir, char h1[21], char h2[21]) {
  dg_status st;
  search_db *db;
  if (!search_db_open(dir, &db, &st)) return NULL;
  dg_func *f1 = wl_build("batch_matmul:b=1,n=8,m=8,k=8,dtype=f32", &st);
  dg_func *f2 = wl_build("softmax:m=4,n=8,dtype=f32", &st);
  bool ok = f1 && f2 && search_db_add_workload(db, "batch_matmul:b=1,n=8,m=8,k=8,dtype=f32", f1, h1, &st) &&
            search_db_add_workload(db, "softmax:m=4,n=8,dtype=f32", f2, h2, &st) &&
            put(db, h1, TA, 3e-6, false, &st) && put(db, h1, TB, 0, false, &st) &&
            put(db, h2, TA, 5e-6, false, &st) && put(db, h1, TA, 9e-6, true, &st) &&
            put(db, h1, TB, 7e-6, true, &st);
  ir_func_free(f1);
  ir_func_free(f2);
  if (!ok) {
    search_db_close(db);
    return NULL;
  }
  return db;
}

DG_TEST(db_baseline_median_apart_from_records) {
  char h1[21], h2[21];
  search_db *db = sample_db(sdir("base1"), h1, h2);
  CHECK(db);
  CHECK_EQ(search_db_record_count(db), 3);
  CHECK_EQ(search_db_workload_trials(db, h1), 2); /* baselines are no trials */
  CHECK_EQ(search_db_baseline_count(db), 2);
  int n = 0;
  CHECK_NEAR(search_db_baseline_secs(db, h1, &n), 8e-6, 1e-12);
  CHECK_EQ(n, 2);
  CHECK(search_db_baseline_secs(db, h2, &n) == SEARCH_FAILED_SECS);
  CHECK_EQ(n, 0);
  search_db_close(db);
  /* reloaded from the files, with the provenance fields */
  dg_status st;
  CHECK(search_db_open(sdir("base1"), &db, &st));
  CHECK_EQ(search_db_warning_count(db), 0);
  CHECK_EQ(search_db_baseline_count(db), 2);
  CHECK_STREQ(search_db_baseline_at(db, 0)->device, "GPU X");
  CHECK_STREQ(search_db_record_at(db, 0)->build, "dragon test lower 1");
  search_db_close(db);
}

DG_TEST(db_record_build_defaults_to_this_binary) {
  dg_status st;
  search_db *db;
  CHECK(search_db_open(sdir("build1"), &db, &st));
  double secs = 1e-6;
  search_record r = {"1", TA, &secs, 1, NULL, "cpu", NULL, 0};
  CHECK(search_db_add_record(db, &r, NULL, &st));
  CHECK_STREQ(search_db_record_at(db, 0)->build, search_build_id());
  CHECK(strncmp(search_build_id(), "dragon ", 7) == 0 && strstr(search_build_id(), " lower "));
  /* a time that is not positive is refused */
  double bad = -1e-3;
  search_record b = {"1", TB, &bad, 1, NULL, "cpu", NULL, 0};
  CHECK(!search_db_add_record(db, &b, NULL, &st));
  CHECK(strstr(st.msg, "not positive"));
  CHECK_EQ(search_db_record_count(db), 1);
  search_db_close(db);
}

DG_TEST(db_shard_roundtrip_and_except) {
  char h1[21], h2[21];
  search_db *db = sample_db(sdir("shard_src"), h1, h2);
  CHECK(db);
  dg_status st;
  const char *shard = sdir("one.jsonl.zst");
  int64_t n = 0;
  CHECK(search_db_write_shard(db, NULL, shard, &n, &st));
  CHECK_EQ(n, 5);
  search_db *dst;
  CHECK(search_db_open(sdir("shard_dst"), &dst, &st));
  int64_t added = 0;
  CHECK(search_db_merge_shard(dst, shard, &added, &st));
  CHECK_OK(st);
  CHECK_EQ(added, 5);
  CHECK_EQ(search_db_workload_count(dst), 2);
  CHECK_EQ(search_db_record_count(dst), 3);
  CHECK_EQ(search_db_baseline_count(dst), 2);
  for (int i = 0; i < 3; i++) {
    const search_record *a = search_db_record_at(db, i), *b = search_db_record_at(dst, i);
    CHECK_STREQ(a->workload, b->workload);
    CHECK_STREQ(a->trace, b->trace);
    CHECK_STREQ(a->build, b->build);
    CHECK_STREQ(a->device, b->device);
    CHECK_STREQ(a->date, b->date);
    CHECK_EQ(a->n_secs, b->n_secs);
    CHECK((a->error == NULL) == (b->error == NULL));
    CHECK(a->kernel_hash == b->kernel_hash);
    if (a->n_secs) CHECK(a->run_secs[0] == b->run_secs[0]);
  }
  CHECK_STREQ(search_db_workload_kernel(dst, h2), search_db_workload_kernel(db, h2));
  /* merging again adds nothing */
  CHECK(search_db_merge_shard(dst, shard, &added, &st));
  CHECK_EQ(added, 0);
  /* the merged database reopens from its files with everything */
  search_db_close(dst);
  CHECK(search_db_open(sdir("shard_dst"), &dst, &st));
  CHECK_EQ(search_db_record_count(dst), 3);
  CHECK_EQ(search_db_baseline_count(dst), 2);
  /* a shard of what dst lacks: nothing, and no file */
  const char *none = sdir("none.jsonl.zst");
  CHECK(search_db_write_shard(db, dst, none, &n, &st));
  CHECK_EQ(n, 0);
  CHECK(access(none, F_OK) != 0);
  /* one new record: the shard holds it and its workload only */
  CHECK(put(db, h2, TB, 2e-6, false, &st));
  const char *two = sdir("two.jsonl.zst");
  CHECK(search_db_write_shard(db, dst, two, &n, &st));
  CHECK_EQ(n, 1);
  search_db *fresh;
  CHECK(search_db_open(sdir("shard_fresh"), &fresh, &st));
  CHECK(search_db_merge_shard(fresh, two, &added, &st));
  CHECK_EQ(added, 1);
  CHECK_EQ(search_db_workload_count(fresh), 1);
  CHECK_STREQ(search_db_workload_hash(fresh, 0), h2);
  /* two databases merge into one */
  int64_t m = 0;
  CHECK(search_db_merge(dst, fresh, &m, &st));
  CHECK_EQ(m, 1);
  CHECK_EQ(search_db_record_count(dst), 4);
  search_db_close(fresh);
  search_db_close(dst);
  search_db_close(db);
}

/* Writes a shard whose bytes are changed by edit, and expects a refusal
 * naming the file that adds nothing. */
static void expect_refused(const char *name, void (*edit)(dg_str *z), const char *want) {
  char h1[21], h2[21];
  char src[64];
  snprintf(src, sizeof src, "bad_src_%s", name);
  search_db *db = sample_db(sdir(src), h1, h2);
  CHECK(db);
  dg_status st;
  const char *good = sdir("good.jsonl.zst");
  CHECK(search_db_write_shard(db, NULL, good, NULL, &st));
  search_db_close(db);
  size_t len;
  char *bytes = dg_read_file(good, &len, &st);
  CHECK(bytes);
  dg_str z;
  dg_str_init(&z);
  dg_str_putn(&z, bytes, len);
  free(bytes);
  edit(&z);
  char path[600];
  snprintf(path, sizeof path, "%s/%s.jsonl.zst", dg_test_tmpdir(), name);
  CHECK(dg_write_file_atomic(path, z.s, z.len, &st));
  dg_str_free(&z);
  search_db *dst;
  char dd[64];
  snprintf(dd, sizeof dd, "bad_dst_%s", name);
  CHECK(search_db_open(sdir(dd), &dst, &st));
  int64_t added = -1;
  CHECK(!search_db_merge_shard(dst, path, &added, &st));
  CHECK_MSG(strstr(st.msg, path) && strstr(st.msg, want), "%s", st.msg);
  CHECK_EQ(added, 0);
  CHECK_EQ(search_db_record_count(dst), 0);
  CHECK_EQ(search_db_workload_count(dst), 0);
  search_db_close(dst);
}

static void flip_middle(dg_str *z) { z->s[z->len / 2] ^= 0x5a; }
static void cut_tail(dg_str *z) { z->len -= 9; }

/* the header of another version, compressed as a shard is */
static void other_version(dg_str *z) {
  const char *text =
      "{\"t\":\"shard\",\"version\":2}\n{\"t\":\"workload\",\"workload\":\"1\",\"spec\":\"s\","
      "\"kernel\":\"k\"}\n";
  size_t cap = ZSTD_compressBound(strlen(text));
  char *buf = dg_malloc(cap);
  size_t n = ZSTD_compress(buf, cap, text, strlen(text), 3);
  dg_str_clear(z);
  dg_str_putn(z, buf, n);
  free(buf);
}

static void no_header(dg_str *z) {
  const char *text = "{\"t\":\"workload\",\"workload\":\"1\",\"spec\":\"s\",\"kernel\":\"k\"}\n";
  size_t cap = ZSTD_compressBound(strlen(text));
  char *buf = dg_malloc(cap);
  size_t n = ZSTD_compress(buf, cap, text, strlen(text), 3);
  dg_str_clear(z);
  dg_str_putn(z, buf, n);
  free(buf);
}

DG_TEST(db_shard_refuses_corrupt_truncated_foreign) {
  expect_refused("flipped", flip_middle, "zstd");
  expect_refused("cut", cut_tail, "");
  expect_refused("v2", other_version, "version");
  expect_refused("headless", no_header, "header");
}

/* Exhausted marks: appended once per workload, read back on open, carried
 * by shards and merges like records, refused read-only. */
DG_TEST(db_exhausted_marks_roundtrip_and_merge) {
  char h1[21], h2[21];
  search_db *db = sample_db(sdir("marks_src"), h1, h2);
  CHECK(db);
  dg_status st;
  CHECK_EQ(search_db_workload_exhausted(db, h1), -1);
  CHECK(search_db_mark_exhausted(db, h1, 2, &st));
  CHECK(search_db_mark_exhausted(db, h1, 7, &st)); /* the first mark stands */
  CHECK_EQ(search_db_workload_exhausted(db, h1), 2);
  CHECK_EQ(search_db_workload_exhausted(db, h2), -1);
  CHECK_EQ(search_db_exhausted_count(db), 1);
  search_db_close(db);
  CHECK(search_db_open(sdir("marks_src"), &db, &st));
  CHECK_EQ(search_db_workload_exhausted(db, h1), 2);
  CHECK_EQ(search_db_exhausted_count(db), 1);
  /* a shard carries the mark, with its workload's line */
  const char *shard = sdir("marks.jsonl.zst");
  int64_t n = 0;
  CHECK(search_db_write_shard(db, NULL, shard, &n, &st));
  CHECK_EQ(n, 6);
  search_db *dst;
  CHECK(search_db_open(sdir("marks_dst"), &dst, &st));
  int64_t added = 0;
  CHECK(search_db_merge_shard(dst, shard, &added, &st));
  CHECK_EQ(added, 6);
  CHECK_EQ(search_db_workload_exhausted(dst, h1), 2);
  CHECK_EQ(search_db_workload_exhausted(dst, h2), -1);
  CHECK(search_db_workload_spec(dst, h1));
  /* a database that holds everything but a new mark: a shard of the mark */
  CHECK(search_db_mark_exhausted(db, h2, 0, &st));
  CHECK(search_db_write_shard(db, dst, sdir("marks2.jsonl.zst"), &n, &st));
  CHECK_EQ(n, 1);
  CHECK(search_db_merge_shard(dst, sdir("marks2.jsonl.zst"), &added, &st));
  CHECK_EQ(added, 1);
  CHECK_EQ(search_db_workload_exhausted(dst, h2), 0);
  search_db_close(dst);
  CHECK(search_db_open(sdir("marks_dst"), &dst, &st));
  CHECK_EQ(search_db_exhausted_count(dst), 2);
  /* database to database */
  search_db *third;
  CHECK(search_db_open(sdir("marks_third"), &third, &st));
  CHECK(search_db_merge(third, dst, &added, &st));
  CHECK_EQ(search_db_workload_exhausted(third, h1), 2);
  CHECK_EQ(search_db_workload_exhausted(third, h2), 0);
  search_db_close(third);
  search_db_close(dst);
  search_db_close(db);
  /* read-only: read, never written */
  search_db *ro;
  CHECK(search_db_open_readonly(sdir("marks_src"), &ro, &st));
  CHECK_EQ(search_db_workload_exhausted(ro, h2), 0);
  CHECK(!search_db_mark_exhausted(ro, "123", 1, &st));
  CHECK(strstr(st.msg, "read-only"));
  search_db_close(ro);
}

/* A mark line without its count is skipped with a warning naming the line. */
DG_TEST(db_exhausted_bad_line_is_skipped) {
  dg_status st;
  char path[600];
  CHECK(dg_mkdirs(sdir("marks_bad"), &st));
  snprintf(path, sizeof path, "%s/exhausted.jsonl", sdir("marks_bad"));
  const char *text = "{\"workload\":\"1\",\"exhausted\":3}\n{\"workload\":\"2\"}\n"
                     "{\"workload\":\"3\",\"exhausted\":-1}\n";
  CHECK(dg_write_file_atomic(path, text, strlen(text), &st));
  search_db *db;
  CHECK(search_db_open_readonly(sdir("marks_bad"), &db, &st));
  CHECK_EQ(search_db_exhausted_count(db), 1);
  CHECK_EQ(search_db_workload_exhausted(db, "1"), 3);
  CHECK_EQ(search_db_warning_count(db), 2);
  search_db_close(db);
}

/* A failure that says the GPU's memory was full (another process held it)
 * is no verdict on the kernel: neither its record nor its baseline is
 * loaded, from the database's files or from a shard, so the kernel counts
 * as unmeasured and the workload as not begun. Other failures stay. */
DG_TEST(db_memory_full_failures_are_no_verdict) {
  CHECK(search_error_memory_full("device error: restoring inputs: CUDA_ERROR_OUT_OF_MEMORY (out of memory)"));
  CHECK(!search_error_memory_full("wrong numbers: C[3]: got nan"));
  CHECK(!search_error_memory_full(NULL));
  dg_status st;
  search_db *db;
  CHECK(search_db_open(sdir("full_src"), &db, &st));
  dg_func *f = wl_build("softmax:m=4,n=8,dtype=f32", &st);
  CHECK(f);
  char h[21];
  CHECK(search_db_add_workload(db, "softmax:m=4,n=8,dtype=f32", f, h, &st));
  ir_func_free(f);
  double secs = 4e-6;
  search_record ok = {h, TA, &secs, 1, NULL, "cuda", "2026-12-06T00:00:00Z", 42, "dragon test lower 1", "GPU X"};
  search_record full = {h, TB, NULL, 0,
                        "setup error: /tmp/x: allocating A (1024 bytes) on the device: "
                        "CUDA_ERROR_OUT_OF_MEMORY (out of memory)",
                        "cuda", "2026-12-06T00:00:00Z", 43, "dragon test lower 1", "GPU X"};
  search_record wrong = full;
  wrong.trace = TA;
  wrong.error = "wrong numbers: Y[0]: got nan";
  bool added;
  CHECK(search_db_add_record(db, &ok, &added, &st));
  CHECK(search_db_add_record(db, &full, &added, &st));
  CHECK(search_db_add_baseline(db, &full, &added, &st));
  const char *shard = sdir("full.jsonl.zst");
  int64_t n = 0;
  CHECK(search_db_write_shard(db, NULL, shard, &n, &st));
  search_db_close(db);

  /* from the files */
  CHECK(search_db_open(sdir("full_src"), &db, &st));
  CHECK_EQ(search_db_record_count(db), 1);
  CHECK_EQ(search_db_workload_trials(db, h), 1);
  int nb = -1;
  CHECK(search_db_baseline_secs(db, h, &nb) == SEARCH_FAILED_SECS);
  CHECK_EQ(nb, 0);
  /* a failure of another kind is kept */
  search_record base_wrong = wrong;
  CHECK(search_db_add_baseline(db, &base_wrong, &added, &st));
  search_db_baseline_secs(db, h, &nb);
  CHECK_EQ(nb, 1);
  search_db_close(db);

  /* from a shard */
  search_db *dst;
  CHECK(search_db_open(sdir("full_dst"), &dst, &st));
  int64_t got = 0;
  CHECK(search_db_merge_shard(dst, shard, &got, &st));
  CHECK_OK(st);
  CHECK_EQ(search_db_record_count(dst), 1);
  CHECK_EQ(search_db_baseline_count(dst), 0);
  CHECK_EQ(search_db_warning_count(dst), 0);
  search_db_close(dst);
}

/* A database in memory: shards merge into it twice over (the second time
 * adding nothing), records and marks are added, every field reads back as
 * in a database on disk, a shard written from it merges into a database on
 * disk equal, and nothing is written anywhere but that shard. */
DG_TEST(db_memory_merges_shards_and_writes_nothing) {
  char h1[21], h2[21];
  search_db *disk = sample_db(sdir("mem_src"), h1, h2);
  CHECK(disk);
  dg_status st;
  CHECK(search_db_mark_exhausted(disk, h2, 1, &st));
  const char *shard = sdir("mem_src.jsonl.zst");
  int64_t n = 0;
  CHECK(search_db_write_shard(disk, NULL, shard, &n, &st));
  CHECK_EQ(n, 6);
  search_db *mem;
  CHECK(search_db_open_memory(&mem));
  int64_t added = 0;
  CHECK(search_db_merge_shard(mem, shard, &added, &st));
  CHECK_EQ(added, 6);
  CHECK(search_db_merge_shard(mem, shard, &added, &st));
  CHECK_EQ(added, 0);
  CHECK_EQ(search_db_workload_count(mem), 2);
  CHECK_EQ(search_db_record_count(mem), 3);
  CHECK_EQ(search_db_baseline_count(mem), 2);
  CHECK(search_db_workload_exhausted(mem, h2) >= 0);
  for (int i = 0; i < 3; i++) {
    const search_record *a = search_db_record_at(disk, i), *b = search_db_record_at(mem, i);
    CHECK_STREQ(a->workload, b->workload);
    CHECK_STREQ(a->trace, b->trace);
    CHECK_STREQ(a->device, b->device);
    CHECK_EQ(a->n_secs, b->n_secs);
    CHECK_EQ(b->n_copies, 1);
    CHECK(a->kernel_hash == b->kernel_hash);
  }
  CHECK_STREQ(search_db_workload_kernel(mem, h1), search_db_workload_kernel(disk, h1));
  int k = 0;
  search_db_workload_records(mem, h1, &k);
  CHECK_EQ(k, 2);
  CHECK_NEAR(search_db_baseline_secs(mem, h1, NULL), 8e-6, 1e-12);
  /* appends go to memory only */
  CHECK(put(mem, h2, TB, 4e-6, false, &st));
  CHECK_EQ(search_db_record_count(mem), 4);
  /* the memory database's shard, into a fresh database on disk */
  const char *out = sdir("mem_out.jsonl.zst");
  CHECK(search_db_write_shard(mem, disk, out, &n, &st));
  CHECK_EQ(n, 1); /* what the disk database lacks: the new record */
  search_db *back;
  CHECK(search_db_open(sdir("mem_back"), &back, &st));
  CHECK(search_db_merge_shard(back, out, &added, &st));
  CHECK_EQ(search_db_record_count(back), 1);
  CHECK_STREQ(search_db_record_at(back, 0)->trace, TB);
  search_db_close(back);
  search_db_close(mem);
  search_db_close(disk);
  /* a refused shard adds nothing to memory either */
  CHECK(search_db_open_memory(&mem));
  const char *bad = sdir("mem_bad.jsonl.zst");
  FILE *f = fopen(bad, "wb");
  CHECK(f);
  if (f) {
    fputs("not zstd", f);
    fclose(f);
  }
  CHECK(!search_db_merge_shard(mem, bad, &added, &st));
  CHECK_EQ(search_db_record_count(mem), 0);
  search_db_close(mem);
}
