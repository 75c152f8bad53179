/* test_db.c: the tuning database: append and reload, dedup, torn and
 * garbage lines, best records, TVM export, and a tuning run killed with
 * SIGKILL and resumed (nothing lost, nothing measured twice). */
#include <fcntl.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "dragon/search.h"
#include "dragon/wl.h"
#include "test.h"

static const char *tdir(const char *name) {
  static char buf[4][512];
  static int k;
  char *b = buf[k++ % 4];
  snprintf(b, 512, "%s/%s", dg_test_tmpdir(), name);
  return b;
}

static const char *T1 = "[[[\"GetBlock\",[],[\"Z\",\"main\"],[\"b0\"]],[\"EnterPostproc\",[],[],[]]],[]]";
static const char *T2 =
    "[[[\"GetBlock\",[],[\"Z\",\"main\"],[\"b0\"]],[\"GetLoops\",[\"b0\"],[],[\"l1\",\"l2\",\"l3\",\"l4\"]],"
    "[\"EnterPostproc\",[],[],[]]],[]]";
static const char *T3 = "[[[\"EnterPostproc\",[],[],[]]],[]]";

static bool add(search_db *db, const char *wl, const char *trace, double secs, const char *err,
                bool *added, dg_status *st) {
  search_record r = {wl, trace, &secs, err ? 0 : 1, err, "cpu", NULL, 0};
  return search_db_add_record(db, &r, added, st);
}

DG_TEST(db_roundtrip_dedup_best) {
  dg_status st;
  const char *dir = tdir("db1");
  search_db *db;
  CHECK(search_db_open(dir, &db, &st));
  dg_func *f = wl_build("batch_matmul:b=1,n=8,m=8,k=8,dtype=f32", &st);
  CHECK_MSG(f, "%s", st.msg);
  char h[21];
  CHECK(search_db_add_workload(db, "batch_matmul:b=1,n=8,m=8,k=8,dtype=f32", f, h, &st));
  char want[32];
  snprintf(want, sizeof want, "%llu", (unsigned long long)ir_func_hash(f));
  CHECK_STREQ(h, want);
  bool added;
  CHECK(add(db, h, T1, 3e-3, NULL, &added, &st));
  CHECK(added);
  CHECK(add(db, h, T2, 1e-3, NULL, &added, &st));
  CHECK(add(db, h, T1, 5e-3, NULL, &added, &st)); /* same trace: not added */
  CHECK(!added);
  CHECK(add(db, h, T3, 0, "compile error: x", &added, &st));
  CHECK(add(db, "other", T1, 1e-6, NULL, &added, &st));
  CHECK_EQ(search_db_record_count(db), 4);
  CHECK_EQ(search_db_workload_trials(db, h), 3);
  const search_record *top[4];
  CHECK_EQ(search_db_top_k(db, h, 4, top), 2); /* the failure is not valid */
  CHECK(search_record_secs(top[0]) == 1e-3);
  CHECK(search_record_secs(top[1]) == 3e-3);
  search_db_close(db);

  /* reload: the same records, the same dedup */
  CHECK(search_db_open(dir, &db, &st));
  CHECK_EQ(search_db_warning_count(db), 0);
  CHECK_EQ(search_db_record_count(db), 4);
  CHECK_EQ(search_db_workload_count(db), 1);
  CHECK_STREQ(search_db_workload_spec(db, h), "batch_matmul:b=1,n=8,m=8,k=8,dtype=f32");
  CHECK(add(db, h, T2, 9e-3, NULL, &added, &st));
  CHECK(!added);
  CHECK_EQ(search_db_top_k(db, h, 1, top), 1);
  CHECK_STREQ(top[0]->trace, T2);
  CHECK_STREQ(top[0]->target, "cpu");
  CHECK(strlen(top[0]->date) == 20 && top[0]->date[10] == 'T');
  const search_record *fail = NULL;
  for (int i = 0; i < search_db_record_count(db); i++)
    if (search_db_record_at(db, i)->error) fail = search_db_record_at(db, i);
  CHECK(fail && fail->n_secs == 0);
  CHECK_STREQ(fail->error, "compile error: x");
  CHECK(search_record_secs(fail) == SEARCH_FAILED_SECS);
  search_db_close(db);
  ir_func_free(f);
}

DG_TEST(db_torn_and_garbage_lines) {
  dg_status st;
  const char *dir = tdir("db2");
  search_db *db;
  CHECK(search_db_open(dir, &db, &st));
  bool added;
  CHECK(add(db, "w", T1, 1e-3, NULL, &added, &st));
  CHECK(add(db, "w", T2, 2e-3, NULL, &added, &st));
  search_db_close(db);
  char path[600];
  snprintf(path, sizeof path, "%s/records.jsonl", dir);
  size_t len;
  char *text = dg_read_file(path, &len, &st);
  CHECK(text);
  /* a garbage line in the middle, a record without a trace, and a torn tail */
  dg_str s;
  dg_str_init(&s);
  char *nl = strchr(text, '\n');
  dg_str_putn(&s, text, (size_t)(nl - text) + 1);
  dg_str_puts(&s, "this is not json\n{\"workload\":\"w\"}\n");
  dg_str_puts(&s, nl + 1);
  dg_str_puts(&s, "{\"workload\":\"w\",\"trace\":[[[\"GetBl");
  CHECK(dg_write_file_atomic(path, s.s, s.len, &st));
  dg_str_free(&s);
  free(text);
  CHECK(search_db_open(dir, &db, &st));
  CHECK_EQ(search_db_warning_count(db), 3);
  CHECK_EQ(search_db_record_count(db), 2);
  /* the torn tail was cut: the next append is a line of its own */
  CHECK(add(db, "w", T3, 0, "x", &added, &st));
  CHECK(added);
  search_db_close(db);
  CHECK(search_db_open(dir, &db, &st));
  CHECK_EQ(search_db_warning_count(db), 2); /* the two bad lines remain */
  CHECK_EQ(search_db_record_count(db), 3);
  search_db_close(db);
}

DG_TEST(db_garbage_warning_names_line) {
  /* the warning names file:line: check through the CLI, which prints it */
  const char *dir = tdir("db3");
  dg_status st;
  CHECK(dg_mkdirs(dir, &st));
  char path[600];
  snprintf(path, sizeof path, "%s/records.jsonl", dir);
  CHECK(dg_write_file_atomic(path, "[1,2]\n", 6, &st));
  char args[1024];
  snprintf(args, sizeof args, "db best GMM/0 --db %s", dir);
  char *out = NULL;
  int rc = dg_test_run_dragon(args, NULL, &out);
  CHECK(out);
  CHECK_MSG(strstr(out, "records.jsonl:1: not a JSON object"), "%s", out);
  CHECK_EQ(rc, 1); /* no record of GMM/0 */
  free(out);
}

DG_TEST(db_export_tvm) {
  dg_status st;
  const char *dir = tdir("db4");
  search_db *db;
  CHECK(search_db_open(dir, &db, &st));
  dg_func *f = wl_build("batch_matmul:b=1,n=4,m=4,k=4,dtype=f32", &st);
  CHECK_MSG(f, "%s", st.msg);
  char h[21];
  CHECK(search_db_add_workload(db, "batch_matmul:b=1,n=4,m=4,k=4,dtype=f32", f, h, &st));
  bool added;
  CHECK(add(db, h, T2, 0.25, NULL, &added, &st));
  CHECK(add(db, h, T1, 0, "boom", &added, &st));
  const char *out = tdir("db4_tvm");
  CHECK(search_db_export_tvm(db, out, &st));
  char p[600];
  snprintf(p, sizeof p, "%s/database_workload.json", out);
  size_t len;
  char *wl = dg_read_file(p, &len, &st);
  CHECK(wl);
  char pre[64];
  snprintf(pre, sizeof pre, "[\"%s\",\"", h);
  CHECK(strncmp(wl, pre, strlen(pre)) == 0);
  /* base64 of "kernel main(" */
  CHECK_MSG(strstr(wl, "a2VybmVsIG1haW4o"), "%s", wl);
  free(wl);
  snprintf(p, sizeof p, "%s/database_tuning_record.json", out);
  char *rec = dg_read_file(p, &len, &st);
  CHECK(rec);
  char *second = strchr(rec, '\n');
  CHECK(second);
  *second = 0;
  CHECK_MSG(strncmp(rec, "[0,[[[[\"GetBlock\"", 17) == 0, "%s", rec);
  CHECK_MSG(strstr(rec, "[0.25],{\"keys\":[\"cpu\"],\"kind\":\"c\",\"tag\":\"\"},"
                        "[[\"TENSOR\",\"float32\",[1,4,4]],[\"TENSOR\",\"float32\",[1,4,4]],"
                        "[\"TENSOR\",\"float32\",[1,4,4]]]]]"),
            "%s", rec);
  CHECK(strstr(second + 1, "[10000000000"));
  free(rec);
  search_db_close(db);
  ir_func_free(f);
}

/* ---- killed and resumed --------------------------------------------------------- */

typedef struct {
  sched_trace *space;
} space_ctx;

static bool space_fn(void *ctx, const dg_func *f, sched_trace ***out, int *n, dg_status *st) {
  (void)f;
  (void)st;
  *out = dg_malloc(sizeof(sched_trace *));
  (*out)[0] = sched_trace_clone(((space_ctx *)ctx)->space);
  *n = 1;
  return true;
}

/* A measurement that takes delay_us a candidate and hands each result
 * over as it is done, as the real ones do. */
static void slow_measure(void *ctx, const dg_func *f, const search_cand *c, int n,
                         search_measure_result *out, const search_measure_sink *sink) {
  (void)f;
  int delay_us = *(int *)ctx;
  for (int i = 0; i < n; i++) {
    memset(&out[i], 0, sizeof out[i]);
    out[i].secs[0] = 1e-6 * (double)(1 + c[i].hash % 1000);
    out[i].n_secs = 1;
    if (delay_us) usleep((useconds_t)delay_us);
    if (sink) sink->fn(sink->ctx, i, &out[i]);
  }
}

static int count_lines(const char *path) {
  dg_status st;
  size_t len;
  char *t = dg_read_file(path, &len, &st);
  if (!t) return 0;
  int n = 0;
  for (size_t i = 0; i < len; i++) n += t[i] == '\n';
  free(t);
  return n;
}

/* The small batch_matmul the tuning tests search and its design space
 * (the committed trace): the workload, or NULL with st set. */
static dg_func *gmm_with_space(space_ctx *sc, dg_status *st) {
  sc->space = NULL;
  dg_func *f = wl_build("batch_matmul:b=1,n=16,m=16,k=16,dtype=f32", st);
  char *json = f ? dg_read_file(dg_test_data("traces/gmm0_space.json"), NULL, st) : NULL;
  if (json) sc->space = sched_trace_from_json(json, st);
  free(json);
  return f;
}

static bool tune_with(const char *dir, const dg_func *f, space_ctx *sc, search_measure_fn measure,
                      void *measure_ctx, int trials, int per_round, search_tune_result *res,
                      dg_status *st) {
  search_db *db;
  if (!search_db_open(dir, &db, st)) return false;
  search_tune_opts o;
  search_tune_opts_default(&o);
  o.evolve.population_size = 32;
  o.evolve.init_min_unmeasured = 8;
  o.evolve.num_trials_per_iter = per_round;
  o.spec = "batch_matmul:b=1,n=16,m=16,k=16,dtype=f32";
  o.f = f;
  o.max_trials = trials;
  o.space = space_fn;
  o.space_ctx = sc;
  o.measure = measure;
  o.measure_ctx = measure_ctx;
  bool ok = search_tune(db, &o, res, st);
  search_db_close(db);
  return ok;
}

static bool tune_per_round(const char *dir, const dg_func *f, space_ctx *sc, int *delay,
                           int trials, int per_round, search_tune_result *res, dg_status *st) {
  return tune_with(dir, f, sc, slow_measure, delay, trials, per_round, res, st);
}

static bool tune(const char *dir, const dg_func *f, space_ctx *sc, int *delay, int trials,
                 search_tune_result *res, dg_status *st) {
  return tune_per_round(dir, f, sc, delay, trials, 4, res, st);
}

/* A measurement whose GPU memory fills up after `ok` candidates: the rest
 * come back not measured, memory_full, as measure_cuda reports them. */
static void filling_measure(void *ctx, const dg_func *f, const search_cand *c, int n,
                            search_measure_result *out, const search_measure_sink *sink) {
  int *ok = ctx;
  slow_measure(&(int){0}, f, c, n, out, NULL);
  for (int i = 0; i < n; i++) {
    if (*ok > 0) {
      (*ok)--;
    } else {
      memset(&out[i], 0, sizeof out[i]);
      snprintf(out[i].error, sizeof out[i].error,
               "device error: restoring inputs: CUDA_ERROR_OUT_OF_MEMORY (out of memory)");
      out[i].not_measured = out[i].memory_full = true;
    }
    if (sink) sink->fn(sink->ctx, i, &out[i]);
  }
}

/* The GPU's memory full is no verdict: the tuner records nothing for those
 * candidates, stops the workload (not at a deadline), and a later run
 * measures it on. */
DG_TEST(db_tune_memory_full_records_nothing) {
  dg_status st;
  space_ctx sc;
  dg_func *f = gmm_with_space(&sc, &st);
  CHECK_MSG(f && sc.space, "%s", st.msg);
  const char *dir = tdir("db_memory_full");
  int ok = 6;
  search_tune_result res;
  CHECK(tune_with(dir, f, &sc, filling_measure, &ok, 16, 4, &res, &st));
  CHECK(res.memory_full && !res.deadline_hit && !res.exhausted);
  CHECK_EQ(res.trials, 6);
  search_db *db;
  CHECK(search_db_open(dir, &db, &st));
  CHECK_EQ(search_db_record_count(db), 6);
  for (int i = 0; i < 6; i++) CHECK(search_db_record_at(db, i)->n_secs == 1);
  search_db_close(db);
  /* measured on once the memory is free again */
  int delay = 0;
  CHECK(tune_with(dir, f, &sc, slow_measure, &delay, 16, 4, &res, &st));
  CHECK(!res.memory_full);
  CHECK_EQ(res.trials, 16);
  sched_trace_free(sc.space);
  ir_func_free(f);
}

/* Records are written as each candidate is measured, not once a round is
 * done: killed in the middle of a round of 32, the database holds the
 * candidates measured so far, each line whole. */
DG_TEST(db_kill_mid_round_keeps_each_record) {
  dg_status st;
  space_ctx sc;
  dg_func *f = gmm_with_space(&sc, &st);
  CHECK_MSG(f && sc.space, "%s", st.msg);
  const char *dir = tdir("db_kill_mid");
  char recs[600];
  snprintf(recs, sizeof recs, "%s/records.jsonl", dir);
  fflush(NULL);
  pid_t pid = fork();
  CHECK(pid >= 0);
  if (pid == 0) {
    int delay = 50000; /* 50 ms a candidate, 1.6 s a round of 32 */
    search_tune_result res;
    dg_status cst;
    tune_per_round(dir, f, &sc, &delay, 64, 32, &res, &cst);
    _exit(0);
  }
  double t0 = dg_now();
  while (count_lines(recs) < 3 && dg_now() - t0 < 60) usleep(2000);
  kill(pid, SIGKILL);
  int status;
  waitpid(pid, &status, 0);
  CHECK(WIFSIGNALED(status));
  int kept = count_lines(recs);
  CHECK_MSG(kept >= 3 && kept < 32, "%d records after a kill in the first round", kept);
  search_db *db;
  CHECK(search_db_open(dir, &db, &st));
  CHECK_EQ(search_db_warning_count(db), 0);
  CHECK_EQ(search_db_record_count(db), kept);
  for (int i = 0; i < kept; i++) CHECK(search_db_record_at(db, i)->n_secs == 1);
  search_db_close(db);
  sched_trace_free(sc.space);
  ir_func_free(f);
}

DG_TEST(db_kill_and_resume) {
  dg_status st;
  space_ctx sc;
  dg_func *f = gmm_with_space(&sc, &st);
  CHECK_MSG(f && sc.space, "%s", st.msg);
  const char *dir = tdir("db_kill");
  char recs[600];
  snprintf(recs, sizeof recs, "%s/records.jsonl", dir);
  fflush(NULL);
  pid_t pid = fork();
  CHECK(pid >= 0);
  if (pid == 0) {
    int delay = 20000; /* 20 ms per candidate: the parent kills mid-run */
    search_tune_result res;
    dg_status cst;
    tune(dir, f, &sc, &delay, 1000, &res, &cst);
    _exit(0);
  }
  double t0 = dg_now();
  while (count_lines(recs) < 10 && dg_now() - t0 < 60) usleep(5000);
  kill(pid, SIGKILL);
  int status;
  waitpid(pid, &status, 0);
  CHECK(WIFSIGNALED(status));
  int before = count_lines(recs);
  CHECK(before >= 10 && before < 1000);

  /* resume to 40 trials in total */
  int delay = 0;
  search_tune_result res;
  CHECK(tune(dir, f, &sc, &delay, 40, &res, &st));
  CHECK_OK(st);
  CHECK_EQ(res.trials, 40);
  CHECK_EQ(res.new_trials, 40 - before);
  search_db *db;
  CHECK(search_db_open(dir, &db, &st));
  CHECK_EQ(search_db_warning_count(db), 0);
  CHECK_EQ(search_db_record_count(db), 40);
  CHECK_EQ(count_lines(recs), 40); /* nothing written twice */
  for (int i = 0; i < 40; i++)
    for (int j = i + 1; j < 40; j++)
      CHECK(search_db_record_at(db, i)->kernel_hash != search_db_record_at(db, j)->kernel_hash);
  search_db_close(db);
  /* a rerun with the same budget measures nothing */
  CHECK(tune(dir, f, &sc, &delay, 40, &res, &st));
  CHECK_EQ(res.new_trials, 0);
  sched_trace_free(sc.space);
  ir_func_free(f);
}

/* The command itself: `dragon tune` killed with SIGKILL in the middle of
 * its first round of 32 leaves every candidate it measured on disk, each
 * line whole, and a rerun measures none of them again. */
DG_TEST(db_tune_command_killed_mid_round) {
  const char *bin = getenv("DRAGON_BIN");
  if (!bin) bin = "./dragon";
  const char *dir = tdir("tune_cli_kill");
  char recs[600];
  snprintf(recs, sizeof recs, "%s/records.jsonl", dir);
  fflush(NULL);
  pid_t pid = fork();
  CHECK(pid >= 0);
  if (pid == 0) {
    int devnull = open("/dev/null", O_WRONLY);
    if (devnull >= 0) {
      dup2(devnull, 1);
      dup2(devnull, 2);
    }
    execl(bin, bin, "tune", "batch_matmul:b=1,n=16,m=16,k=16,dtype=f32", "--target", "cpu",
          "--trials", "64", "--per-round", "32", "--population", "64", "--db", dir,
          (char *)NULL);
    _exit(127);
  }
  double t0 = dg_now();
  while (count_lines(recs) < 3 && dg_now() - t0 < 120) usleep(5000);
  kill(pid, SIGKILL);
  int status;
  waitpid(pid, &status, 0);
  CHECK(WIFSIGNALED(status));
  int kept = count_lines(recs);
  CHECK_MSG(kept >= 3 && kept < 32, "%d records after a kill in the first round of 32", kept);
  dg_status st;
  search_db *db;
  CHECK(search_db_open(dir, &db, &st));
  CHECK(search_db_warning_count(db) <= 1); /* at most the line being written is torn */
  int n = search_db_record_count(db);
  CHECK(n >= kept - 1);
  search_db_close(db);
  /* the rerun resumes: nothing measured twice */
  char args[1024];
  snprintf(args, sizeof args,
           "tune batch_matmul:b=1,n=16,m=16,k=16,dtype=f32 --target cpu --trials %d --db %s "
           "--quiet",
           n + 4, dir);
  char *out = NULL;
  int rc = dg_test_run_dragon(args, NULL, &out);
  CHECK_MSG(rc == 0, "rc %d: %s", rc, out);
  free(out);
  CHECK(search_db_open(dir, &db, &st));
  CHECK_EQ(search_db_record_count(db), n + 4);
  for (int i = 0; i < n + 4; i++)
    for (int j = i + 1; j < n + 4; j++)
      CHECK(search_db_record_at(db, i)->kernel_hash != search_db_record_at(db, j)->kernel_hash);
  search_db_close(db);
}

/* A records file large enough to be parsed on every core: the records
 * come back in file order with their copies, each bad line is warned once,
 * and a shard of it reads back the same (the threads build records, this
 * thread files them in order). */
enum { LARGE_N = 6000 };

/* A database of LARGE_N record lines (over 1 MiB: parsed on threads) of
 * workloads w0..w6 (specs s0..s6), line i of workload w(i % 7) with kernel
 * hash i; every 1000th line repeats the line before it (a copy), and two bad
 * lines. */
static void write_large_db(const char *dir) {
  dg_status st;
  CHECK(dg_mkdirs(dir, &st));
  dg_str s;
  dg_str_init(&s);
  enum { N = LARGE_N };
  for (int i = 0; i < N; i++) {
    /* every 1000th line repeats the line before it (a copy); two bad lines */
    int k = i % 1000 == 999 ? i - 1 : i;
    if (i == 2500) dg_str_puts(&s, "not json at all\n");
    if (i == 4000) dg_str_puts(&s, "{\"workload\":\"w1\",\"target\":\"cpu\"}\n");
    dg_str_printf(&s,
                  "{\"workload\":\"w%d\",\"trace\":[[[\"GetBlock\",[],[\"Z\",\"main\"],[\"b0\"]],"
                  "[\"SamplePerfectTile\",[\"l1\"],[\"I\",%d,\"I\",4],[\"v%d\",\"v%d\"]],"
                  "[\"EnterPostproc\",[],[],[]]],[]],\"run_secs\":[%d.5e-6],\"error\":null,"
                  "\"target\":\"cuda\",\"date\":\"d\",\"kernel_hash\":\"%d\",\"build\":\"b\","
                  "\"device\":\"g\"}\n",
                  k % 7, k, k, k + 1, i + 1, k);
  }
  CHECK(s.len > (1u << 20));
  char path[600];
  snprintf(path, sizeof path, "%s/records.jsonl", dir);
  CHECK(dg_write_file_atomic(path, s.s, s.len, &st));
  dg_str_free(&s);
  /* the workloads named (records of unnamed ones are warned about, apart) */
  dg_str w;
  dg_str_init(&w);
  for (int i = 0; i < 7; i++)
    dg_str_printf(&w, "{\"workload\":\"w%d\",\"spec\":\"s%d\",\"kernel\":\"k\"}\n", i, i);
  snprintf(path, sizeof path, "%s/workloads.jsonl", dir);
  CHECK(dg_write_file_atomic(path, w.s, w.len, &st));
  dg_str_free(&w);
}

DG_TEST(db_large_file_parsed_on_threads_in_order) {
  dg_status st;
  const char *dir = tdir("db_large");
  write_large_db(dir);
  enum { N = LARGE_N };
  search_db *db;
  CHECK(search_db_open_readonly(dir, &db, &st));
  CHECK_EQ(search_db_warning_count(db), 3); /* the two bad lines, and the copies */
  CHECK_EQ(search_db_record_count(db), N - N / 1000);
  for (int i = 0, n = 0; i < N; i++) {
    if (i % 1000 == 999) continue;
    const search_record *r = search_db_record_at(db, n++);
    char want[32];
    snprintf(want, sizeof want, "w%d", i % 7);
    CHECK_STREQ(r->workload, want);
    CHECK_EQ((int64_t)r->kernel_hash, i);
    /* the copy's time joins the record's: the median of its two */
    if (i % 1000 == 998) {
      CHECK_EQ(r->n_copies, 2);
      CHECK(r->copies_secs > (i + 1) * 1e-6 && r->copies_secs < (i + 2.1) * 1e-6);
    } else {
      CHECK_EQ(r->n_copies, 1);
    }
  }
  /* the same through a shard, read the same way */
  const char *shard = tdir("large.jsonl.zst");
  int64_t n = 0;
  CHECK(search_db_write_shard(db, NULL, shard, &n, &st));
  CHECK_EQ(n, N - N / 1000);
  search_db *dst;
  CHECK(search_db_open(tdir("db_large_dst"), &dst, &st));
  int64_t added = 0;
  CHECK(search_db_merge_shard(dst, shard, &added, &st));
  CHECK_EQ(added, n);
  for (int i = 0; i < search_db_record_count(db); i++) {
    const search_record *a = search_db_record_at(db, i), *b = search_db_record_at(dst, i);
    CHECK_STREQ(a->trace, b->trace);
    CHECK(a->kernel_hash == b->kernel_hash);
  }
  search_db_close(dst);
  search_db_close(db);
}

static bool keep_s1_s3(const char *spec, void *ctx) {
  (void)ctx;
  return strcmp(spec, "s1") == 0 || strcmp(spec, "s3") == 0;
}

/* A view (search_db_open_some) holds the records of its workloads as the
 * whole database holds them, leaves the others unread, appends to the same
 * files, and refuses what needs every record. */
DG_TEST(db_view_holds_the_records_of_its_workloads) {
  dg_status st;
  char dir[512]; /* tdir's buffers turn over */
  snprintf(dir, sizeof dir, "%s", tdir("db_view"));
  write_large_db(dir);
  /* a line whose fields come in another order is parsed whole, then left
   * out; a record of a workload no line names is held */
  char path[600];
  snprintf(path, sizeof path, "%s/records.jsonl", dir);
  FILE *fp = fopen(path, "a");
  CHECK(fp != NULL);
  fputs("{\"trace\":[[[\"EnterPostproc\",[],[],[]]],[]],\"workload\":\"w2\",\"run_secs\":[1e-6],"
        "\"target\":\"cuda\"}\n"
        "{\"workload\":\"wx\",\"trace\":[[[\"EnterPostproc\",[],[],[]]],[]],\"run_secs\":[1e-6],"
        "\"target\":\"cuda\"}\n",
        fp);
  fclose(fp);
  search_db *whole_db, *view;
  CHECK(search_db_open_readonly(dir, &whole_db, &st));
  CHECK(search_db_open_some(dir, keep_s1_s3, NULL, &view, &st));
  int held = 0;
  for (int i = 0; i < search_db_record_count(whole_db); i++) {
    const char *w = search_db_record_at(whole_db, i)->workload;
    held += strcmp(w, "w1") == 0 || strcmp(w, "w3") == 0 || strcmp(w, "wx") == 0;
  }
  CHECK(held > 1000);
  CHECK_EQ(search_db_record_count(view), held);
  CHECK_EQ(search_db_unread_count(whole_db), 0);
  /* every line of the others, the copies among them, and the reordered one */
  int64_t unread = 1;
  for (int i = 0; i < LARGE_N; i++) {
    int k = i % 1000 == 999 ? i - 1 : i;
    unread += k % 7 != 1 && k % 7 != 3;
  }
  CHECK_EQ(search_db_unread_count(view), unread);
  const char *keep[] = {"w1", "w3", "wx"};
  for (int k = 0; k < 3; k++) {
    CHECK_EQ(search_db_workload_trials(view, keep[k]), search_db_workload_trials(whole_db, keep[k]));
    const search_record *a[3], *b[3];
    int na = search_db_top_k(whole_db, keep[k], 3, a), nb = search_db_top_k(view, keep[k], 3, b);
    CHECK_EQ(na, nb);
    for (int i = 0; i < na; i++) {
      CHECK_STREQ(a[i]->trace, b[i]->trace);
      CHECK(search_record_secs(a[i]) == search_record_secs(b[i]));
    }
  }
  CHECK_EQ(search_db_workload_trials(view, "w2"), 0);
  CHECK_EQ(search_db_workload_count(view), 7); /* every workload line */
  /* appends go to the same files */
  bool added = false;
  CHECK(add(view, "w1", T3, 2e-6, NULL, &added, &st));
  CHECK(added);
  /* what needs every record is refused, naming why */
  CHECK(!search_db_write_shard(view, NULL, tdir("view.jsonl.zst"), NULL, &st));
  CHECK(strstr(st.msg, "some workloads only") != NULL);
  CHECK(!search_db_write_shard(whole_db, view, tdir("view2.jsonl.zst"), NULL, &st));
  CHECK(!search_db_merge_shard(view, tdir("view.jsonl.zst"), NULL, &st));
  CHECK(!search_db_export_tvm(view, tdir("view_tvm"), &st));
  search_db *other;
  CHECK(search_db_open(tdir("db_view_other"), &other, &st));
  CHECK(!search_db_merge(other, view, NULL, &st));
  search_db_close(other);
  search_db *none = NULL;
  CHECK(!search_db_open_some(dir, NULL, NULL, &none, &st));
  CHECK(none == NULL);
  int64_t before = search_db_record_count(whole_db);
  int64_t w1_before = search_db_workload_trials(whole_db, "w1");
  search_db_close(view);
  search_db_close(whole_db);
  /* reopened whole: nothing lost, the append there */
  CHECK_MSG(search_db_open_readonly(dir, &whole_db, &st), "%s", st.msg);
  CHECK_EQ(search_db_record_count(whole_db), before + 1);
  CHECK_EQ(search_db_workload_trials(whole_db, "w1"), w1_before + 1);
  search_db_close(whole_db);
}

/* A workload's records as a scan of the whole table finds them, in order. */
static void check_index_is_a_scan(const search_db *db, const char *wl) {
  int n = -1;
  const int *idx = search_db_workload_records(db, wl, &n);
  int k = 0;
  for (int i = 0; i < search_db_record_count(db); i++) {
    if (strcmp(search_db_record_at(db, i)->workload, wl) != 0) continue;
    CHECK_MSG(k < n && idx[k] == i, "%s: record %d is not its index's %d-th", wl, i, k);
    k++;
  }
  CHECK_EQ(n, k);
  CHECK_EQ(search_db_workload_trials(db, wl), k);
  if (!n) CHECK(idx == NULL);
}

/* The records of each workload are found by an index, not a scan: the
 * same records in the same order as a scan, whether appended, reopened
 * from the files (read on threads past 1 MiB) or merged; baselines too. */
DG_TEST(db_workload_records_index_matches_a_scan) {
  dg_status st;
  const char *dir = tdir("db_index");
  search_db *db;
  CHECK(search_db_open(dir, &db, &st));
  enum { W = 150, R = 40 };
  char pad[1200];
  memset(pad, 'x', sizeof pad - 1);
  pad[sizeof pad - 1] = 0;
  /* records interleaved across workloads; W groups grow the index past its first size */
  for (int r = 0; r < R; r++)
    for (int w = 0; w < W; w++) {
      if ((w + r) % 9 == 0) continue; /* not every workload every round */
      char wl[16], trace[1400];
      snprintf(wl, sizeof wl, "w%d", (w * 7) % W);
      snprintf(trace, sizeof trace, "[[[\"GetBlock\",[],[\"Z\",\"%s%d\"],[\"b0\"]],[\"EnterPostproc\",[],[],[]]],[]]",
               r % 3 ? "main" : pad, r);
      bool added;
      CHECK(add(db, wl, trace, (1 + (r * 13 + w) % 17) * 1e-6, r == 5 ? "compile error" : NULL, &added,
                &st));
      CHECK(added);
    }
  /* three baselines a workload, after its records */
  for (int r = 0; r < 3; r++)
    for (int w = 0; w < W; w++) {
      char wl[16], trace[48];
      snprintf(wl, sizeof wl, "w%d", w);
      snprintf(trace, sizeof trace, "[[[\"B%d\",[],[],[]]],[]]", r);
      double secs = (r + 1) * 1e-5;
      search_record b = {wl, trace, &secs, 1, NULL, "cpu", NULL, 0};
      bool added;
      CHECK(search_db_add_baseline(db, &b, &added, &st));
      CHECK(added);
    }
  CHECK_EQ(search_db_workload_records(db, "nobody", &(int){0}), NULL);
  for (int pass = 0; pass < 2; pass++) {
    for (int w = 0; w < W; w++) {
      char wl[16];
      snprintf(wl, sizeof wl, "w%d", w);
      check_index_is_a_scan(db, wl);
      /* the best valid record, as a scan finds it */
      const search_record *best = NULL, *top = NULL;
      for (int i = 0; i < search_db_record_count(db); i++) {
        const search_record *r = search_db_record_at(db, i);
        if (strcmp(r->workload, wl) || !search_record_valid(r)) continue;
        if (!best || search_record_secs(r) < search_record_secs(best)) best = r;
      }
      CHECK_EQ(search_db_top_k(db, wl, 1, &top), best ? 1 : 0);
      if (best) CHECK(search_record_secs(top) == search_record_secs(best));
      int nb = 0;
      CHECK(search_db_baseline_secs(db, wl, &nb) == 2e-5); /* the median of 1, 2 and 3 */
      CHECK_EQ(nb, 3);
    }
    if (pass == 0) { /* again from the files */
      search_db_close(db);
      CHECK(search_db_open_readonly(dir, &db, &st));
      CHECK_EQ(search_db_warning_count(db), 0);
    }
  }
  /* a merge files the copies under the same index */
  search_db *dst;
  CHECK(search_db_open(tdir("db_index_dst"), &dst, &st));
  CHECK(add(dst, "w3", T1, 1e-6, NULL, NULL, &st)); /* dst has one of its own first */
  int64_t n_added = 0;
  CHECK(search_db_merge(dst, db, &n_added, &st));
  /* no workload line names them: one warning a workload, with its count */
  CHECK_EQ(search_db_warning_count(dst), W);
  check_index_is_a_scan(dst, "w3");
  check_index_is_a_scan(dst, "w149");
  int n3 = 0, n3_src = 0;
  search_db_workload_records(dst, "w3", &n3);
  search_db_workload_records(db, "w3", &n3_src);
  CHECK_EQ(n3, n3_src + 1);
  search_db_close(dst);
  search_db_close(db);
}
