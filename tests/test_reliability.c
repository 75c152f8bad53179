/* test_reliability.c: what bad input and kills used to break, each fed
 * again and its fix expected: the database's writer lock, readers that
 * never write, the median of repeated records, records of unnamed
 * workloads, the one atomic write and the removal of stale temporary
 * files, the SFT log after resumes, kernel-text size limits and zero
 * divisors, kernels without outputs, located messages, a compiler that dies
 * with its parent; and the inputs kept by the loader fuzzers
 * (fuzz/fuzz_{checkpoint,safetensors,token_shard,hf_tokenizer,db,db_shard,cost_model,plan,
 *  cuda_data}.c),
 * replayed through the fuzzers' own code, each in a child process.
 */
#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "dragon/ir.h"
#include "dragon/search.h"
#include "dragon/wl.h"
#include "test.h"

/* ---- helpers --------------------------------------------------------------- */

static const char *rdir(const char *name) {
  static char buf[8][512];
  static int k;
  char *b = buf[k++ % 8];
  snprintf(b, 512, "%s/%s", dg_test_tmpdir(), name);
  return b;
}

static bool put_text(const char *path, const char *text) {
  FILE *f = fopen(path, "wb");
  if (!f) return false;
  size_t n = strlen(text);
  bool ok = fwrite(text, 1, n, f) == n;
  return fclose(f) == 0 && ok;
}

static bool exists(const char *path) {
  struct stat sb;
  return stat(path, &sb) == 0;
}

/* Runs dragon with printf-style arguments; *out gets stdout+stderr. */
static int run(char **out, const char *input, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static int run(char **out, const char *input, const char *fmt, ...) {
  char args[2048];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(args, sizeof args, fmt, ap);
  va_end(ap);
  return dg_test_run_dragon(args, input, out);
}

static int count_sub(const char *s, const char *sub) {
  int n = 0;
  for (const char *p = strstr(s, sub); p; p = strstr(p + 1, sub)) n++;
  return n;
}

/* The pid of a process that has exited (and been reaped). */
static pid_t dead_pid(void) {
  pid_t p = fork();
  if (p == 0) _exit(0);
  waitpid(p, NULL, 0);
  return p;
}

static const char *GEMM = "batch_matmul:b=1,n=8,m=8,k=8,dtype=f32";
static const char *TA = "[[[\"GetBlock\",[],[\"Z\",\"main\"],[\"b0\"]],[\"EnterPostproc\",[],[],[]]],[]]";
static const char *TB =
    "[[[\"GetBlock\",[],[\"Z\",\"main\"],[\"b0\"]],[\"GetLoops\",[\"b0\"],[],[\"l1\",\"l2\",\"l3\",\"l4\"]],"
    "[\"EnterPostproc\",[],[],[]]],[]]";

/* A database in dir that names the GEMM workload; its hash into hash. */
static bool gemm_db(const char *dir, char hash[21]) {
  dg_status st;
  search_db *db;
  if (!search_db_open(dir, &db, &st)) return false;
  dg_func *f = wl_build(GEMM, &st);
  bool ok = f && search_db_add_workload(db, GEMM, f, hash, &st);
  ir_func_free(f);
  search_db_close(db);
  return ok;
}

static void record_line(dg_str *s, const char *wl, const char *trace, double secs) {
  dg_str_printf(s,
                "{\"workload\":\"%s\",\"trace\":%s,\"run_secs\":[%.17g],\"error\":null,"
                "\"target\":\"cpu\"}\n",
                wl, trace, secs);
}

/* ---- 1. one writer per database ---------------------------------------------- */

/* A second writer, in this process or a forked one, is refused naming the
 * directory and the holder's pid; readers go on; the lock is free again
 * once the writer closes. */
DG_TEST(rel_db_second_writer_refused) {
  const char *dir = rdir("lock1");
  dg_status st;
  search_db *db, *db2;
  CHECK(search_db_open(dir, &db, &st));
  char pid[32];
  snprintf(pid, sizeof pid, "pid %ld", (long)getpid());
  CHECK(!search_db_open(dir, &db2, &st));
  CHECK_ERR(st, dir);
  CHECK_ERR(st, pid);
  CHECK_ERR(st, "open for writing by another process");
  CHECK(search_db_open_readonly(dir, &db2, &st));
  search_db_close(db2);
  fflush(NULL);
  pid_t c = fork();
  CHECK(c >= 0);
  if (c == 0) {
    dg_status cst;
    search_db *cdb;
    if (search_db_open(dir, &cdb, &cst)) _exit(1);
    if (!strstr(cst.msg, dir) || !strstr(cst.msg, pid)) _exit(2);
    if (!search_db_open_readonly(dir, &cdb, &cst)) _exit(3);
    search_db_close(cdb);
    _exit(0);
  }
  int status;
  waitpid(c, &status, 0);
  CHECK_MSG(WIFEXITED(status) && WEXITSTATUS(status) == 0, "child status %d", status);
  search_db_close(db);
  CHECK(search_db_open(dir, &db, &st));
  search_db_close(db);
}

/* A child forked while the writer holds the lock does not keep it: the
 * writer closes, the child lives on, and the next writer gets in. */
DG_TEST(rel_db_lock_not_kept_by_forked_child) {
  const char *dir = rdir("lock2");
  dg_status st;
  search_db *db;
  CHECK(search_db_open(dir, &db, &st));
  int p[2], q[2];
  CHECK(pipe(p) == 0 && pipe(q) == 0);
  fflush(NULL);
  pid_t c = fork();
  CHECK(c >= 0);
  if (c == 0) {
    close(p[1]);
    close(q[0]);
    char b = 1;
    if (write(q[1], &b, 1) != 1) _exit(1);
    ssize_t r = read(p[0], &b, 1); /* lives on until the parent is done */
    _exit(r < 0);
  }
  close(p[0]);
  close(q[1]);
  char b;
  CHECK(read(q[0], &b, 1) == 1); /* the child runs: fork is done in it */
  close(q[0]);
  search_db_close(db);
  bool reopened = search_db_open(dir, &db, &st);
  if (reopened) search_db_close(db);
  close(p[1]);
  waitpid(c, NULL, 0);
  CHECK_MSG(reopened, "%s", st.msg);
}

/* Two tuners on one database: the second is refused (exit 1, naming the
 * directory and the first one's pid) and measures nothing; the budget is
 * a total, so a rerun adds nothing either. */
DG_TEST(rel_db_tune_second_writer_refused_budget_kept) {
  const char *dir = rdir("lock_tune");
  dg_status st;
  search_db *db;
  CHECK(search_db_open(dir, &db, &st));
  char *out;
  const char *spec = "batch_matmul:b=1,n=16,m=16,k=16,dtype=f32";
  int rc = run(&out, NULL, "tune %s --trials 4 --db %s --target cpu", spec, dir);
  char pid[32];
  snprintf(pid, sizeof pid, "pid %ld", (long)getpid());
  CHECK_MSG(rc == 1 && strstr(out, dir) && strstr(out, pid), "rc %d: %s", rc, out);
  free(out);
  CHECK_EQ(search_db_record_count(db), 0);
  search_db_close(db);
  CHECK(search_db_open_readonly(dir, &db, &st));
  CHECK_EQ(search_db_record_count(db), 0);
  search_db_close(db);
  rc = run(&out, NULL, "tune %s --trials 4 --db %s --target cpu", spec, dir);
  CHECK_MSG(rc == 0, "%s", out);
  free(out);
  rc = run(&out, NULL, "tune %s --trials 4 --db %s --target cpu", spec, dir);
  CHECK_MSG(rc == 0, "%s", out);
  free(out);
  CHECK(search_db_open_readonly(dir, &db, &st));
  CHECK_EQ(search_db_record_count(db), 4);
  search_db_close(db);
}

/* Repeated (workload, trace) lines (old files, concurrent writers): db best
 * takes the median of the copies, not the first of them. */
DG_TEST(rel_db_best_median_of_copies) {
  const char *dir = rdir("copies");
  char h[21];
  CHECK(gemm_db(dir, h));
  char recs[600];
  snprintf(recs, sizeof recs, "%s/records.jsonl", dir);
  /* TA: 1, 5, 3 us (median 3), TB: 2.5 us: TB is the best */
  dg_str s;
  dg_str_init(&s);
  record_line(&s, h, TA, 1e-6);
  record_line(&s, h, TB, 2.5e-6);
  record_line(&s, h, TA, 5e-6);
  record_line(&s, h, TA, 3e-6);
  CHECK(put_text(recs, s.s));
  char *out;
  int rc = run(&out, NULL, "db best %s --db %s", GEMM, dir);
  CHECK_MSG(rc == 0 && strstr(out, "best 2.500 us") && strstr(out, "GetLoops"), "%s", out);
  CHECK(strstr(out, "2 lines repeat"));
  free(out);
  /* TA: 9, 1, 2 us (median 2, the first copy the slowest): TA is the best */
  dg_str_clear(&s);
  record_line(&s, h, TA, 9e-6);
  record_line(&s, h, TB, 2.5e-6);
  record_line(&s, h, TA, 1e-6);
  record_line(&s, h, TA, 2e-6);
  CHECK(put_text(recs, s.s));
  dg_str_free(&s);
  rc = run(&out, NULL, "db best %s --db %s", GEMM, dir);
  CHECK_MSG(rc == 0 && strstr(out, "best 2.000 us (the median of 3 copies"), "%s", out);
  CHECK(!strstr(out, "GetLoops"));
  free(out);
  dg_status st;
  search_db *db;
  CHECK(search_db_open_readonly(dir, &db, &st));
  CHECK_EQ(search_db_record_count(db), 2);
  const search_record *top[2];
  CHECK_EQ(search_db_top_k(db, h, 2, top), 2);
  CHECK_EQ(top[0]->n_copies, 3);
  CHECK_NEAR(search_record_secs(top[0]), 2e-6, 1e-15);
  CHECK_EQ(top[1]->n_copies, 1);
  search_db_close(db);
}

/* ---- 2. readers never write ----------------------------------------------------- */

static char *db_bytes(const char *dir) {
  dg_str s;
  dg_str_init(&s);
  static const char *const names[] = {"workloads.jsonl", "records.jsonl", "baselines.jsonl"};
  for (size_t i = 0; i < DG_ARRAY_LEN(names); i++) {
    char p[600];
    snprintf(p, sizeof p, "%s/%s", dir, names[i]);
    char *t = dg_read_file(p, NULL, NULL);
    dg_str_printf(&s, "%s\n--\n", t ? t : "(none)");
    free(t);
  }
  return dg_str_take(&s);
}

/* best, export, recall and pack leave a database as it is: a torn last
 * line (a writer may be finishing it) is skipped, not cut, and no lock
 * file appears; a missing --db is an error naming it, not created. */
/* The four reading actions of `dragon db` on dir (args for
 * dg_test_run_dragon into buf). */
static const char *reader_args(int i, const char *dir, char *buf, size_t n) {
  switch (i) {
    case 0: snprintf(buf, n, "db best %s --db %s", GEMM, dir); break;
    case 1: snprintf(buf, n, "db export --db %s --tvm %s-tvm", dir, dir); break;
    case 2: snprintf(buf, n, "db recall --db %s", dir); break;
    default: snprintf(buf, n, "db pack --db %s --out %s.jsonl.zst", dir, dir); break;
  }
  return buf;
}

DG_TEST(rel_db_readers_never_write) {
  const char *dir = rdir("readers");
  char h[21];
  CHECK(gemm_db(dir, h));
  char recs[600], lock[600];
  snprintf(recs, sizeof recs, "%s/records.jsonl", dir);
  snprintf(lock, sizeof lock, "%s/writer.lock", dir);
  dg_str whole, s;
  dg_str_init(&whole);
  record_line(&whole, h, TA, 2e-6);
  dg_str_init(&s);
  dg_str_puts(&s, whole.s);
  dg_str_printf(&s, "{\"workload\":\"%s\",\"trace\":[[[\"GetBl", h);
  CHECK(put_text(recs, s.s));
  dg_str_free(&s);
  unlink(lock);
  char *before = db_bytes(dir);
  char args[1300], *out;
  for (int i = 0; i < 4; i++) {
    reader_args(i, dir, args, sizeof args);
    int rc = dg_test_run_dragon(args, NULL, &out);
    CHECK_MSG(rc == 0 || (i == 2 && rc == 1), "%s: rc %d: %s", args, rc, out);
    CHECK_MSG(strstr(out, "torn last line") && strstr(out, "skipped"), "%s: %s", args, out);
    free(out);
    char *after = db_bytes(dir);
    CHECK_MSG(strcmp(before, after) == 0, "%s changed the database", args);
    free(after);
    CHECK_MSG(!exists(lock), "%s took the writer lock", args);
  }
  free(before);
  /* a writer (merge) does cut the torn line off */
  CHECK_EQ(run(&out, NULL, "db merge %s.jsonl.zst --db %s", dir, dir), 0);
  free(out);
  char *text = dg_read_file(recs, NULL, NULL);
  CHECK_STREQ(text, whole.s);
  free(text);
  dg_str_free(&whole);

  const char *missing = rdir("readers_missing/db");
  for (int i = 0; i < 4; i++) {
    reader_args(i, missing, args, sizeof args);
    int rc = dg_test_run_dragon(args, NULL, &out);
    CHECK_MSG(rc == 1 && strstr(out, missing) && strstr(out, "no such database directory"),
              "%s: rc %d: %s", args, rc, out);
    free(out);
    CHECK_MSG(!exists(missing), "%s created %s", args, missing);
  }
}

/* ---- 3. records of workloads no line names ------------------------------------ */

DG_TEST(rel_db_unnamed_workload_warned_once_with_count) {
  const char *dir = rdir("unnamed");
  char h[21];
  CHECK(gemm_db(dir, h));
  char recs[600];
  snprintf(recs, sizeof recs, "%s/records.jsonl", dir);
  dg_str s;
  dg_str_init(&s);
  record_line(&s, h, TA, 2e-6);
  record_line(&s, "424242", TA, 1e-6);
  record_line(&s, "424242", TB, 1e-6);
  record_line(&s, "777", TA, 1e-6);
  CHECK(put_text(recs, s.s));
  dg_str_clear(&s);
  record_line(&s, "424242", TA, 5e-6); /* a baseline of it too */
  char bases[600];
  snprintf(bases, sizeof bases, "%s/baselines.jsonl", dir);
  CHECK(put_text(bases, s.s));
  dg_str_free(&s);
  char *out;
  int rc = run(&out, NULL, "db export --db %s --tvm %s-tvm", dir, dir);
  CHECK_MSG(rc == 0, "%s", out);
  CHECK_EQ(count_sub(out, "workload 424242"), 1);
  CHECK(strstr(out, "3 records of workload 424242, which workloads.jsonl does not name"));
  CHECK(strstr(out, "1 record of workload 777,"));
  free(out);
  char tvm[700];
  snprintf(tvm, sizeof tvm, "%s-tvm/database_tuning_record.json", dir);
  char *t = dg_read_file(tvm, NULL, NULL);
  CHECK(t && count_sub(t, "\n") == 1); /* only the named workload's record */
  free(t);
}

/* ---- 4. one atomic write, stale temporary files ------------------------------- */

DG_TEST(rel_atomic_write_and_stale_tmp) {
  const char *dir = rdir("atomic");
  dg_status st;
  CHECK(dg_mkdirs(dir, &st));
  char path[600];
  snprintf(path, sizeof path, "%s/f.bin", dir);
  dg_part parts[3] = {{"ab", 2}, {"", 0}, {"cde", 3}};
  CHECK(dg_write_parts_atomic(path, parts, 3, &st));
  size_t n;
  char *t = dg_read_file(path, &n, &st);
  CHECK(t && n == 5 && memcmp(t, "abcde", 5) == 0);
  free(t);
  char bad[700];
  snprintf(bad, sizeof bad, "%s/no/such/dir/f", dir);
  CHECK(!dg_write_file_atomic(bad, "x", 1, &st));
  CHECK_ERR(st, "no/such/dir");
  /* the temporary files of a dead writer go, a live one's stay */
  char dead[700], live[700], other[700];
  snprintf(dead, sizeof dead, "%s/model_4.bin.tmp.%ld", dir, (long)dead_pid());
  snprintf(live, sizeof live, "%s/state_4.bin.tmp.%ld", dir, (long)getpid());
  snprintf(other, sizeof other, "%s/notes.tmp.txt", dir);
  CHECK(put_text(dead, "x") && put_text(live, "y") && put_text(other, "z"));
  CHECK_EQ(dg_remove_stale_tmp(dir), 1);
  CHECK(!exists(dead) && exists(live) && exists(other) && exists(path));
  DIR *d = opendir(dir);
  CHECK(d);
  int tmps = 0;
  struct dirent *e;
  while ((e = readdir(d))) tmps += strstr(e->d_name, "f.bin.tmp") != NULL;
  closedir(d);
  CHECK_EQ(tmps, 0);
}

/* A small SFT run directory: examples, a config of 4 steps with a
 * checkpoint every 2, a tokenizer trained on the examples. */
static bool sft_inputs(const char *dir, char *ex, char *cfg, size_t n) {
  dg_status st;
  if (!dg_mkdirs(dir, &st)) return false;
  snprintf(ex, n, "%s/ex.jsonl", dir);
  snprintf(cfg, n, "%s/cfg.txt", dir);
  return put_text(ex,
                  "{\"prompt\": \"kernel k(A: f32[4]):\\n\", \"target\": \"t1 split i 2\\n\"}\n"
                  "{\"prompt\": \"kernel m(B: f32[8]):\\n\", \"target\": \"t2 fuse i j\\n\"}\n"
                  "{\"prompt\": \"kernel q(C: f32[2]):\\n\", \"target\": \"why fast\\n\"}\n") &&
         put_text(cfg,
                  "steps = 4\nckpt_every = 2\neval_every = 0\nlog_every = 1\nbatch = 2\n"
                  "seq_len = 128\nval_fraction = 0\n");
}

static int log_steps(const char *logp, int64_t *steps, int max) {
  char *t = dg_read_file(logp, NULL, NULL);
  if (!t) return -1;
  int n = 0;
  for (char *p = t; (p = strstr(p, "{\"step\": ")) && n < max; p++) steps[n++] = atoll(p + 9);
  free(t);
  return n;
}

/* Killed after logging a step beyond its last checkpoint, with a torn
 * line and a stale checkpoint temporary file: the resumed run logs each
 * step once, the stale file is gone; then --steps below the run's step is
 * an error, and a corrupt `latest` an error (exit 1), not a usage error. */
DG_TEST(rel_sft_resume_log_and_stale_tmp) {
  const char *base = rdir("sft");
  char ex[600], cfg[600];
  CHECK(sft_inputs(base, ex, cfg, sizeof ex));
  char out_dir[600], logp[700], latest[700];
  snprintf(out_dir, sizeof out_dir, "%s/run", base);
  snprintf(logp, sizeof logp, "%s/log.jsonl", out_dir);
  snprintf(latest, sizeof latest, "%s/latest", out_dir);
  char *out;
  int rc = run(&out, NULL, "train sft --data %s --config %s --out %s --vocab 300 --stop-after 2 --quiet",
               ex, cfg, out_dir);
  CHECK_MSG(rc == 0, "%s", out);
  free(out);
  char *log = dg_read_file(logp, NULL, NULL);
  CHECK(log && count_sub(log, "\n") == 2);
  /* as left by resumes before the fix and a kill after step 3 was logged */
  dg_str s;
  dg_str_init(&s);
  dg_str_puts(&s, log);
  dg_str_puts(&s, log);
  dg_str_puts(&s, "{\"step\": 3, \"loss\": 123, \"lr\": 1, \"grad_norm\": 1, \"tokens_per_s\": 1.0}\n");
  dg_str_puts(&s, "{\"step\": 4, \"lo");
  free(log);
  CHECK(put_text(logp, s.s));
  dg_str_free(&s);
  char stale[800];
  snprintf(stale, sizeof stale, "%s/model_4.bin.tmp.%ld", out_dir, (long)dead_pid());
  CHECK(put_text(stale, "half a checkpoint"));
  rc = run(&out, NULL, "train sft --resume --out %s --quiet", out_dir);
  CHECK_MSG(rc == 0, "%s", out);
  free(out);
  CHECK(!exists(stale));
  int64_t steps[16];
  int n = log_steps(logp, steps, 16);
  CHECK_EQ(n, 4);
  for (int i = 0; i < n; i++) CHECK_EQ(steps[i], i + 1);
  log = dg_read_file(logp, NULL, NULL);
  CHECK(log && !strstr(log, "\"loss\": 123") && !strstr(log, "\"lo\n"));
  free(log);

  rc = run(&out, NULL, "train sft --resume --out %s --steps 2 --quiet", out_dir);
  CHECK_MSG(rc == 1 && strstr(out, "already at step 4") && strstr(out, "--steps 2"), "rc %d: %s", rc,
            out);
  free(out);
  rc = run(&out, NULL, "train sft --resume --out %s", out_dir);
  CHECK_MSG(rc == 0 && strstr(out, "done all its 4 steps"), "rc %d: %s", rc, out);
  free(out);
  CHECK_EQ(log_steps(logp, steps, 16), 4);

  CHECK(put_text(latest, "four\n"));
  rc = run(&out, NULL, "train sft --resume --out %s --quiet", out_dir);
  CHECK_MSG(rc == 1 && strstr(out, "corrupt checkpoint pointer") && strstr(out, "latest"),
            "rc %d: %s", rc, out);
  free(out);
  rc = run(&out, NULL, "sample-model --ckpt %s --prompt %s", out_dir, ex);
  CHECK_MSG(rc == 1 && strstr(out, "corrupt checkpoint pointer"), "rc %d: %s", rc, out);
  free(out);
}

/* ---- 5, 6. kernel text: sizes, zero divisors, outputs --------------------------- */

static const char *K_HEAD = "kernel k(A: i32[4], B: i32[4]):\n  block root:\n    for i in 4:\n"
                            "      block b(vi: S(4) = i):\n        reads A[vi]\n        writes B[vi]\n";

DG_TEST(rel_kernel_text_size_limit) {
  char *out;
  const char *huge = "kernel k(A: f32[4294967296, 4294967296, 4294967296], B: f32[4]):\n  block root:\n";
  int rc = dg_test_run_dragon("show -", huge, &out);
  CHECK_MSG(rc == 1 && strstr(out, "<stdin>:1:10: buffer 'A' takes more than 2^63 bytes"), "%s", out);
  free(out);
  const char *kt = rdir("huge.kt");
  CHECK(put_text(kt, huge));
  rc = run(&out, NULL, "run %s --target cpu", kt);
  CHECK_MSG(rc == 1 && strstr(out, "huge.kt:1:10: buffer 'A'"), "rc %d: %s", rc, out);
  free(out);
  rc = dg_test_run_dragon("show -", "kernel k(A: f32[4], B: f32[65536, 4096]):\n  block root:\n", &out);
  CHECK_MSG(rc == 1 && strstr(out, "<stdin>:1:21: buffer 'B' takes 1024.0 MiB"), "%s", out);
  free(out);
  rc = dg_test_run_dragon(
      "show -", "kernel k(A: f32[52428800], B: f32[52428800]):\n  block root:\n", &out);
  CHECK_MSG(rc == 1 && strstr(out, "<stdin>:1:28: the parameters up to 'B' take 400.0 MiB"), "%s",
            out);
  free(out);
  /* exactly the limit is allowed (the parser does not verify) */
  rc = dg_test_run_dragon("show -", "kernel k(A: f32[67108864]):\n  block root:\n", &out);
  CHECK_MSG(rc == 0, "%s", out);
  free(out);
  dg_status st;
  dg_func *f = ir_parse("kernel k(A: f32[8, 16, 4]):\n  block root:\n", "k.kt", &st);
  CHECK_MSG(f, "%s", st.msg);
  CHECK_EQ(ir_buffer_numel(f->params[0]), 512);
  ir_func_free(f);
}

static dg_expr *find_kind(dg_expr *e, dg_expr_kind k) {
  if (!e) return NULL;
  if (e->kind == k) return e;
  dg_expr *r = find_kind(e->a, k);
  if (!r) r = find_kind(e->b, k);
  if (!r) r = find_kind(e->c, k);
  for (int i = 0; !r && i < e->nargs; i++) r = find_kind(e->args[i], k);
  return r;
}

static dg_expr *find_in_stmt(dg_stmt *s, dg_expr_kind k) {
  if (!s) return NULL;
  switch (s->kind) {
    case DG_STMT_FOR: return find_in_stmt(s->body, k);
    case DG_STMT_SEQ:
      for (int i = 0; i < s->n; i++) {
        dg_expr *r = find_in_stmt(s->stmts[i], k);
        if (r) return r;
      }
      return NULL;
    case DG_STMT_BLOCK: return find_in_stmt(s->block->body, k);
    case DG_STMT_STORE: return find_kind(s->value, k);
    case DG_STMT_IF: {
      dg_expr *r = find_in_stmt(s->then_s, k);
      return r ? r : find_in_stmt(s->else_s, k);
    }
  }
  return NULL;
}

/* A constant zero divisor is refused where it is written (kernel text:
 * line:col) and by the verifier (any IR); the interpreter and generated
 * code never get to disagree about it. */
DG_TEST(rel_zero_divisor_refused) {
  const char *ops[] = {"%", "//"};
  for (int i = 0; i < 2; i++) {
    char text[600], want[80], *out;
    snprintf(text, sizeof text, "%s        B[vi] = A[vi] %s 0\n", K_HEAD, ops[i]);
    snprintf(want, sizeof want, "div0.kt:7:23: '%s' by the constant 0", ops[i]);
    const char *kt = rdir("div0.kt");
    CHECK(put_text(kt, text));
    int rc = run(&out, NULL, "run %s --target cpu", kt);
    CHECK_MSG(rc == 1 && strstr(out, want), "want '%s', rc %d: %s", want, rc, out);
    free(out);
    rc = run(&out, NULL, "run %s --target c", kt);
    CHECK_MSG(rc == 1 && strstr(out, want), "rc %d: %s", rc, out);
    free(out);
    rc = dg_test_run_dragon("show -", text, &out);
    CHECK_MSG(rc == 1 && strstr(out, "<stdin>:7:23:"), "rc %d: %s", rc, out);
    free(out);
  }
  char text[600];
  snprintf(text, sizeof text, "%s        B[vi] = A[vi] %% 3\n", K_HEAD);
  dg_status st;
  dg_func *f = ir_parse(text, "k.kt", &st);
  CHECK_MSG(f, "%s", st.msg);
  CHECK_MSG(ir_verify(f, &st), "%s", st.msg);
  dg_expr *m = find_in_stmt(f->body, DG_EXPR_FLOORMOD);
  CHECK(m && m->b->kind == DG_EXPR_INT);
  m->b->ival = 0;
  CHECK(!ir_verify(f, &st));
  CHECK_ERR(st, "block \"b\"");
  CHECK_ERR(st, "by the constant 0");
  ir_func_free(f);
}

/* A kernel that stores to none of its parameters is refused, not run and
 * reported as "FAIL 0 of 0 elements". */
DG_TEST(rel_kernel_without_output_refused) {
  const char *text =
      "kernel k(A: f32[4]):\n  block root:\n    alloc T: f32[4]\n    for i in 4:\n"
      "      block b(vi: S(4) = i):\n        reads A[vi]\n        writes T[vi]\n        T[vi] = A[vi]\n";
  char *out;
  const char *kt = rdir("no_output.kt");
  CHECK(put_text(kt, text));
  int rc = run(&out, NULL, "run %s --target cpu", kt);
  CHECK_MSG(rc == 1 && strstr(out, "k: no store writes a parameter: the kernel has no output") &&
                !strstr(out, "0 of 0"),
            "rc %d: %s", rc, out);
  free(out);
  dg_status st;
  dg_func *f = ir_parse(text, "k.kt", &st);
  CHECK_MSG(f, "%s", st.msg);
  CHECK(!ir_verify(f, &st));
  CHECK_ERR(st, "has no output");
  ir_func_free(f);
}

/* ---- 7. messages ---------------------------------------------------------------- */

DG_TEST(rel_messages_name_the_fault) {
  char *out;
  int rc = run(&out, NULL, "sample-model --ckpt /nonexistent/run --prompt x.kt");
  CHECK_MSG(rc == 1 && strstr(out, "--ckpt /nonexistent/run: no such run directory or model file") &&
                !strstr(out, "tokenizer.bin"),
            "rc %d: %s", rc, out);
  free(out);
  rc = run(&out, NULL, "show GMM/99");
  CHECK_MSG(rc == 1 && strstr(out, "config") && !strstr(out, "no such file"), "%s", out);
  free(out);
  rc = run(&out, NULL, "run GMM/7 --target cpu");
  CHECK_MSG(rc == 1 && strstr(out, "config") && !strstr(out, "no such file"), "%s", out);
  free(out);
  rc = run(&out, NULL, "show no/such/kernel.kt");
  CHECK_MSG(rc == 1 && strstr(out, "no/such/kernel.kt: no such file"), "%s", out);
  free(out);
  rc = run(&out, NULL, "show gemm:m=0,n=4,k=4");
  CHECK_MSG(rc == 1 && !strstr(out, "no such file"), "%s", out);
  free(out);

  /* records.jsonl that is a directory */
  const char *dir = rdir("recs_dir");
  char p[600];
  snprintf(p, sizeof p, "%s/records.jsonl", dir);
  dg_status st;
  CHECK(dg_mkdirs(p, &st));
  rc = run(&out, NULL, "db best %s --db %s", GEMM, dir);
  CHECK_MSG(rc == 1 && strstr(out, p) && strstr(out, "is a directory"), "rc %d: %s", rc, out);
  free(out);
  CHECK(!dg_read_file(p, NULL, &st));
  CHECK_ERR(st, "is a directory");

  /* tokenizer decode counts ids from 1 in every message */
  const char *tdir = rdir("tok");
  CHECK(dg_mkdirs(tdir, &st));
  char corpus[600], tok[600];
  snprintf(corpus, sizeof corpus, "%s/corpus.txt", tdir);
  snprintf(tok, sizeof tok, "%s/tok.bin", tdir);
  CHECK(put_text(corpus, "for i in range(4): A[i] = B[i] + C[i]\nfor j in range(4): A[j] = 0\n"));
  rc = run(&out, NULL, "tokenizer train --corpus %s --vocab 300 --out %s", corpus, tok);
  CHECK_MSG(rc == 0, "%s", out);
  free(out);
  rc = run(&out, "65 99999 66\n", "tokenizer decode --tokenizer %s", tok);
  CHECK_MSG(rc == 1 && strstr(out, "<stdin>: id 2: 99999 is out of range"), "rc %d: %s", rc, out);
  free(out);
  rc = run(&out, "65 x 66\n", "tokenizer decode --tokenizer %s", tok);
  CHECK_MSG(rc == 1 && strstr(out, "<stdin>: id 2: 'x'"), "rc %d: %s", rc, out);
  free(out);
}

/* ---- 8. the compiler dies with its parent ---------------------------------------- */

/* The pid of a child of ppid whose command is comm, or -1. */
static pid_t child_named(pid_t ppid, const char *comm) {
  DIR *d = opendir("/proc");
  if (!d) return -1;
  pid_t found = -1;
  struct dirent *e;
  while (found < 0 && (e = readdir(d))) {
    if (e->d_name[0] < '1' || e->d_name[0] > '9') continue;
    char p[300], buf[512];
    snprintf(p, sizeof p, "/proc/%s/stat", e->d_name);
    FILE *f = fopen(p, "r");
    if (!f) continue;
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    buf[n] = 0;
    char *open = strchr(buf, '('), *close = strrchr(buf, ')');
    if (!open || !close || close < open) continue;
    *close = 0;
    long pp = 0;
    char state;
    if (sscanf(close + 2, "%c %ld", &state, &pp) == 2 && pp == ppid && strcmp(open + 1, comm) == 0)
      found = (pid_t)atol(e->d_name);
  }
  closedir(d);
  return found;
}

/* `dragon run` killed while its C compiler runs (a stand-in that sleeps):
 * the compiler is killed too. A helper process adopts orphans (it is a
 * child subreaper), so it sees how the compiler ended. */
DG_TEST(rel_cc_dies_with_its_parent) {
  const char *bin = getenv("DRAGON_BIN");
  if (!bin) bin = "./dragon";
  fflush(NULL);
  pid_t helper = fork();
  CHECK(helper >= 0);
  if (helper == 0) {
    prctl(PR_SET_CHILD_SUBREAPER, 1);
    setenv("CC", "sleep 60 #", 1);
    pid_t d = fork();
    if (d == 0) {
      int fd = open("/dev/null", O_WRONLY);
      dup2(fd, 1);
      dup2(fd, 2);
      execl(bin, "dragon", "run", GEMM, "--target", "cpu", (char *)NULL);
      _exit(127);
    }
    pid_t cc = -1;
    for (int i = 0; i < 3000 && cc < 0; i++) {
      cc = child_named(d, "sleep");
      if (cc < 0) usleep(10000);
    }
    kill(d, SIGKILL);
    waitpid(d, NULL, 0);
    if (cc < 0) _exit(2);
    for (int i = 0; i < 1000; i++) {
      int status;
      if (waitpid(cc, &status, WNOHANG) == cc)
        _exit(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL ? 0 : 3);
      usleep(10000);
    }
    kill(cc, SIGKILL);
    waitpid(cc, NULL, 0);
    _exit(4);
  }
  int status;
  waitpid(helper, &status, 0);
  CHECK_MSG(WIFEXITED(status) && WEXITSTATUS(status) == 0,
            "helper exit %d (2: no compiler seen, 4: the compiler outlived dragon)",
            WIFEXITED(status) ? WEXITSTATUS(status) : -1);
}

/* Compiler directories of processes that are gone are removed by the next
 * run; those of live processes, and other names, stay. */
DG_TEST(rel_cc_stale_dirs_removed) {
  const char *tmp = rdir("cctmp");
  dg_status st;
  char dead[700], live[700], other[700], f[800];
  snprintf(dead, sizeof dead, "%s/dragon-cc-%ld-AbC123", tmp, (long)dead_pid());
  snprintf(live, sizeof live, "%s/dragon-cc-%ld-AbC123", tmp, (long)getpid());
  snprintf(other, sizeof other, "%s/dragon-cc-XyZ789", tmp);
  CHECK(dg_mkdirs(dead, &st) && dg_mkdirs(live, &st) && dg_mkdirs(other, &st));
  snprintf(f, sizeof f, "%s/k.c", dead);
  CHECK(put_text(f, "int x;\n"));
  snprintf(f, sizeof f, "%s/k.so", dead);
  CHECK(put_text(f, "junk"));
  const char *old = getenv("TMPDIR");
  char *saved = old ? dg_strdup(old) : NULL;
  setenv("TMPDIR", tmp, 1);
  char *out;
  int rc = run(&out, NULL, "run %s --target cpu", GEMM);
  if (saved) setenv("TMPDIR", saved, 1);
  else unsetenv("TMPDIR");
  free(saved);
  CHECK_MSG(rc == 0, "%s", out);
  free(out);
  CHECK(!exists(dead));
  CHECK(exists(live) && exists(other));
  DIR *d = opendir(tmp);
  CHECK(d);
  int n = 0;
  struct dirent *e;
  while ((e = readdir(d))) n += strncmp(e->d_name, "dragon-cc-", 10) == 0;
  closedir(d);
  CHECK_EQ(n, 2); /* and the run's own directory is gone */
}

/* ---- 9. the loader fuzzers' kept inputs ------------------------------------------- */

#define LLVMFuzzerTestOneInput fuzz_one_checkpoint
#include "../fuzz/fuzz_checkpoint.c"
#undef LLVMFuzzerTestOneInput
#define LLVMFuzzerTestOneInput fuzz_one_safetensors
#include "../fuzz/fuzz_safetensors.c"
#undef LLVMFuzzerTestOneInput
#define LLVMFuzzerTestOneInput fuzz_one_token_shard
#include "../fuzz/fuzz_token_shard.c"
#undef LLVMFuzzerTestOneInput
#define LLVMFuzzerTestOneInput fuzz_one_hf_tokenizer
#include "../fuzz/fuzz_hf_tokenizer.c"
#undef LLVMFuzzerTestOneInput
#define LLVMFuzzerTestOneInput fuzz_one_db
#include "../fuzz/fuzz_db.c"
#undef LLVMFuzzerTestOneInput
#define LLVMFuzzerTestOneInput fuzz_one_db_shard
#include "../fuzz/fuzz_db_shard.c"
#undef LLVMFuzzerTestOneInput
#define LLVMFuzzerTestOneInput fuzz_one_cost_model
#include "../fuzz/fuzz_cost_model.c"
#undef LLVMFuzzerTestOneInput
#define LLVMFuzzerTestOneInput fuzz_one_plan
#include "../fuzz/fuzz_plan.c"
#undef LLVMFuzzerTestOneInput
#define LLVMFuzzerTestOneInput fuzz_one_cuda_data
#include "../fuzz/fuzz_cuda_data.c"
#undef LLVMFuzzerTestOneInput

/* Every input in tests/fuzz/NAME/ through the fuzzer's own function, each
 * in a child process (with its scratch files in the test's directory): it
 * must return normally, its checks holding. */
static void replay(const char *name, int (*one)(const uint8_t *, size_t)) {
  char dir[300];
  snprintf(dir, sizeof dir, "tests/fuzz/%s", name);
  DIR *d = opendir(dir);
  CHECK_MSG(d, "%s: missing", dir);
  int n = 0;
  struct dirent *e;
  while ((e = readdir(d))) {
    if (e->d_name[0] == '.') continue;
    char path[600];
    snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
    size_t len;
    dg_status st;
    char *data = dg_read_file(path, &len, &st);
    CHECK_MSG(data, "%s", st.msg);
    char errp[600];
    snprintf(errp, sizeof errp, "%s/replay-%s.err", dg_test_tmpdir(), name);
    fflush(NULL);
    pid_t c = fork();
    if (c == 0) {
      setenv("TMPDIR", dg_test_tmpdir(), 1);
      setenv("DRAGON_FUZZ_VERBOSE", "1", 1);
      int fd = open(errp, O_WRONLY | O_CREAT | O_TRUNC, 0644);
      if (fd >= 0) dup2(fd, 2); /* the loaders' warnings, or why a check failed */
      one((const uint8_t *)data, len);
      _exit(0);
    }
    free(data);
    int status;
    waitpid(c, &status, 0);
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
      char *err = dg_read_file(errp, NULL, NULL);
      size_t el = err ? strlen(err) : 0;
      dg_test_fail(__FILE__, __LINE__, "%s: the fuzzer's checks fail (status %d):\n%s", path, status,
                   err ? err + (el > 2000 ? el - 2000 : 0) : "");
      free(err);
    }
    n++;
  }
  closedir(d);
  CHECK_MSG(n > 0, "%s: no inputs", dir);
}

DG_TEST(rel_fuzz_checkpoint_inputs) { replay("checkpoint", fuzz_one_checkpoint); }
DG_TEST(rel_fuzz_safetensors_inputs) { replay("safetensors", fuzz_one_safetensors); }
DG_TEST(rel_fuzz_token_shard_inputs) { replay("token_shard", fuzz_one_token_shard); }
DG_TEST(rel_fuzz_hf_tokenizer_inputs) { replay("hf_tokenizer", fuzz_one_hf_tokenizer); }
DG_TEST(rel_fuzz_db_inputs) { replay("db", fuzz_one_db); }
DG_TEST(rel_fuzz_db_shard_inputs) { replay("db_shard", fuzz_one_db_shard); }
DG_TEST(rel_fuzz_cost_model_inputs) { replay("cost_model", fuzz_one_cost_model); }
DG_TEST(rel_fuzz_plan_inputs) { replay("plan", fuzz_one_plan); }
DG_TEST(rel_fuzz_cuda_data_inputs) { replay("cuda_data", fuzz_one_cuda_data); }
