/* test_data_label.c: the labelling campaign on the CPU (compiled C
 * emulation of the GPU schedules), the same loop the GPU runs: every
 * workload gets its baseline and at least trials_min records naming the
 * build and the device; a rerun measures nothing again; a run killed in
 * the middle resumes without measuring anything twice; the budget stops a
 * run between rounds; heavy references are deferred; the command merges
 * committed shards first and packs what is new. */
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "cli/cli.h"
#include "dragon/data.h"
#include "dragon/lower.h"
#include "dragon/search.h"
#include "dragon/wl.h"
#include "test.h"

static const char *ldir(const char *name) {
  static char buf[4][512];
  static int k;
  char *b = buf[k++ % 4];
  snprintf(b, 512, "%s/%s", dg_test_tmpdir(), name);
  return b;
}

static const char *const SPECS[] = {
    "batch_matmul:b=1,n=16,m=16,k=16,dtype=f32",
    "softmax:m=8,n=32,dtype=f32",
    "gemm:m=512,n=512,k=512,trans_a=0,trans_b=0,dtype=f32",
};

static void opts_for(data_label_opts *o, search_db *db, int n) {
  data_label_opts_default(o);
  o->db = db;
  o->specs = SPECS;
  o->n_specs = n;
  o->trials_min = 4;
  o->trials_max = 4;
  o->population = 16;
  o->repeats = 1;
  o->threads = 2;
  o->max_work = 1e7; /* the 512^3 gemm (1.3e8) is deferred */
}

DG_TEST(data_label_cpu_labels_and_resumes) {
  dg_status st;
  search_db *db;
  CHECK(search_db_open(ldir("label1"), &db, &st));
  data_label_opts o;
  opts_for(&o, db, 3);
  data_label_stats s;
  CHECK_MSG(data_label_run(&o, &s, &st), "%s", st.msg);
  CHECK_MSG(s.failed == 0, "%s", s.first_failure);
  CHECK_EQ(s.labelled, 2);
  CHECK_EQ(s.deferred, 1);
  CHECK_EQ(s.already, 0);
  CHECK_EQ(search_db_workload_count(db), 2);
  CHECK_EQ(search_db_baseline_count(db), 2);
  for (int w = 0; w < 2; w++) {
    const char *h = search_db_workload_hash(db, w);
    CHECK(search_db_workload_trials(db, h) >= 4);
    CHECK(search_db_baseline_secs(db, h, NULL) < SEARCH_FAILED_SECS);
  }
  int n = search_db_record_count(db);
  CHECK_EQ(s.measured, n + 2);
  for (int i = 0; i < n; i++) {
    const search_record *r = search_db_record_at(db, i);
    CHECK_STREQ(r->device, "cpu");
    CHECK_STREQ(r->build, search_build_id());
    /* no software-pipeline sketch reaches a label while the lowering
     * does not pipeline */
    if (!LOWER_HAS_SOFTWARE_PIPELINE) CHECK(!strstr(r->trace, "software_pipeline"));
  }
  /* the baseline's trace is DefaultGPUSchedule's: binds, no sampling */
  const search_record *b = search_db_baseline_at(db, 0);
  CHECK(strstr(b->trace, "\"Bind\"") && !strstr(b->trace, "Sample"));
  /* a rerun finds both labelled and measures nothing */
  CHECK(data_label_run(&o, &s, &st));
  CHECK_EQ(s.already, 2);
  CHECK_EQ(s.measured, 0);
  CHECK_EQ(search_db_record_count(db), n);
  search_db_close(db);
}

DG_TEST(data_label_cpu_budget_stops_between_workloads) {
  dg_status st;
  search_db *db;
  CHECK(search_db_open(ldir("label_budget"), &db, &st));
  data_label_opts o;
  opts_for(&o, db, 2);
  o.budget_s = 1e-9; /* spent before the first workload */
  data_label_stats s;
  CHECK(data_label_run(&o, &s, &st));
  CHECK(s.budget_hit);
  CHECK_EQ(s.labelled, 0);
  CHECK_EQ(search_db_record_count(db), 0);
  search_db_close(db);
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

/* Killed while it labels, then rerun: the first run's records stay, none
 * is measured again, and both workloads end labelled. */
DG_TEST(data_label_cpu_kill_and_resume) {
  const char *dir = ldir("label_kill");
  char recs[600];
  snprintf(recs, sizeof recs, "%s/records.jsonl", dir);
  fflush(NULL);
  pid_t pid = fork();
  CHECK(pid >= 0);
  if (pid == 0) {
    dg_status cst;
    search_db *cdb;
    if (!search_db_open(dir, &cdb, &cst)) _exit(1);
    data_label_opts o;
    opts_for(&o, cdb, 2);
    o.trials_min = o.trials_max = 12;
    data_label_stats s;
    data_label_run(&o, &s, &cst);
    _exit(0);
  }
  double t0 = dg_now();
  while (count_lines(recs) < 2 && dg_now() - t0 < 120) usleep(5000);
  kill(pid, SIGKILL);
  int status;
  waitpid(pid, &status, 0);
  int before = count_lines(recs);
  CHECK_MSG(before >= 2, "%d records before the kill", before);
  dg_status st;
  search_db *db;
  CHECK(search_db_open(dir, &db, &st));
  /* at most the line being written when the kill came is torn */
  CHECK(search_db_warning_count(db) <= 1);
  data_label_opts o;
  opts_for(&o, db, 2);
  o.trials_min = o.trials_max = 12;
  data_label_stats s;
  CHECK(data_label_run(&o, &s, &st));
  CHECK_EQ(s.labelled + s.already, 2);
  int n = search_db_record_count(db);
  CHECK_EQ(count_lines(recs), n); /* nothing written twice */
  for (int i = 0; i < n; i++)
    for (int j = i + 1; j < n; j++) {
      const search_record *a = search_db_record_at(db, i), *c = search_db_record_at(db, j);
      CHECK(strcmp(a->workload, c->workload) != 0 || a->kernel_hash != c->kernel_hash);
    }
  CHECK_EQ(search_db_baseline_count(db), 2);
  search_db_close(db);
}

/* A small splits file (seed 7, 40 workloads) saved as NAME in the test's
 * folder, its path in path; NULL with the reason printed. */
static data_splits *small_splits(const char *name, char *path, size_t cap) {
  dg_status st;
  data_splits *t = data_splits_build(7, 40, &st);
  snprintf(path, cap, "%s/%s", dg_test_tmpdir(), name);
  if (!t || !data_splits_save(t, path, &st)) {
    fprintf(stderr, "small splits: %s\n", st.msg);
    data_splits_free(t);
    return NULL;
  }
  return t;
}

/* The command: a small splits file, committed shards merged first, a new
 * shard packed with only what the run measured. */
DG_TEST(data_label_cli_merges_and_packs) {
  dg_status st;
  char splits[600];
  data_splits *t = small_splits("small_splits.tsv.zst", splits, sizeof splits);
  CHECK(t);
  /* the first small train workload, labelled by hand into a shard */
  const char *first = NULL;
  for (int64_t i = data_splits_next(t, DATA_SPLIT_TRAIN, 0); i >= 0 && !first;
       i = data_splits_next(t, DATA_SPLIT_TRAIN, i + 1)) {
    dg_func *f = wl_build(data_splits_at(t, i)->spec, &st);
    if (f && data_label_work(f) < 1e6) first = data_splits_at(t, i)->spec;
    ir_func_free(f);
  }
  CHECK(first);
  char args[2048];
  snprintf(args, sizeof args,
           "data label --db %s --splits %s --target cpu --first 1 --trials-min 3 "
           "--trials-max 3 --population 16 --repeats 1 --max-work 1e6 --quiet",
           ldir("cli_label"), splits);
  char *out = NULL;
  int rc = dg_test_run_dragon(args, NULL, &out);
  CHECK_MSG(rc == 0, "rc %d: %s", rc, out);
  CHECK_MSG(strstr(out, "labelled 1 workloads"), "%s", out);
  free(out);
  /* pack it as the committed shards */
  char shards[600];
  snprintf(shards, sizeof shards, "%s/shards", dg_test_tmpdir());
  CHECK(dg_mkdirs(shards, &st));
  snprintf(args, sizeof args, "db pack --db %s --out %s/one.jsonl.zst", ldir("cli_label"), shards);
  rc = dg_test_run_dragon(args, NULL, &out);
  CHECK_MSG(rc == 0 && strstr(out, "wrote"), "rc %d: %s", rc, out);
  free(out);
  /* a fresh database from the shards: the workload is already labelled */
  snprintf(args, sizeof args,
           "data label --db %s --records %s --splits %s --target cpu --first 1 --trials-min 3 "
           "--trials-max 3 --population 16 --repeats 1 --max-work 1e6",
           ldir("cli_fresh"), shards, splits);
  rc = dg_test_run_dragon(args, NULL, &out);
  CHECK_MSG(rc == 0, "rc %d: %s", rc, out);
  CHECK_MSG(strstr(out, "1 already labelled") && strstr(out, "0 candidates measured"), "%s", out);
  free(out);
  /* nothing new to pack */
  snprintf(args, sizeof args, "db pack --db %s --out %s/two.jsonl.zst --except %s",
           ldir("cli_fresh"), dg_test_tmpdir(), shards);
  rc = dg_test_run_dragon(args, NULL, &out);
  CHECK_MSG(rc == 0 && strstr(out, "nothing new"), "rc %d: %s", rc, out);
  free(out);
  /* the warm start done once (db model) and loaded by a run in its place */
  snprintf(args, sizeof args, "db model --db %s --out %s", ldir("cli_label"), ldir("cli_model"));
  rc = dg_test_run_dragon(args, NULL, &out);
  CHECK_MSG(rc == 0 && strstr(out, "wrote the cost model") && strstr(out, "3 records with"),
            "rc %d: %s", rc, out);
  free(out);
  snprintf(args, sizeof args,
           "data label --db %s --cost-model %s --splits %s --target cpu --first 1 --trials-min 3 "
           "--trials-max 3 --population 16 --repeats 1 --max-work 1e6",
           ldir("cli_fresh"), ldir("cli_model"), splits);
  rc = dg_test_run_dragon(args, NULL, &out);
  CHECK_MSG(rc == 0 && strstr(out, "samples, loaded in") && !strstr(out, "warm start"),
            "rc %d: %s", rc, out);
  /* with a saved model the database is its shard's view: the labelled
   * workload's records are held (it is labelled already) */
  CHECK_MSG(strstr(out, "(those of the 1 workloads labelled here;") &&
                strstr(out, "1 already labelled"),
            "%s", out);
  free(out);
  /* a workload line written in another spelling of the spec (its first
   * two parameters swapped) names the same kernel: held by the view too */
  char wpath[600];
  snprintf(wpath, sizeof wpath, "%s/workloads.jsonl", ldir("cli_fresh"));
  size_t wlen;
  char *wtext = dg_read_file(wpath, &wlen, &st);
  CHECK_MSG(wtext, "%s", st.msg);
  const char *colon = strchr(first, ':'), *comma = colon ? strchr(colon, ',') : NULL;
  const char *comma2 = comma ? strchr(comma + 1, ',') : NULL;
  CHECK(comma && comma2);
  char swapped[512];
  snprintf(swapped, sizeof swapped, "%.*s%.*s,%.*s%s", (int)(colon + 1 - first), first,
           (int)(comma2 - comma - 1), comma + 1, (int)(comma - colon - 1), colon + 1, comma2);
  char *at = strstr(wtext, first);
  CHECK(at != NULL);
  dg_str w2;
  dg_str_init(&w2);
  dg_str_printf(&w2, "%.*s%s%s", (int)(at - wtext), wtext, swapped, at + strlen(first));
  CHECK(dg_write_file_atomic(wpath, w2.s, w2.len, &st));
  dg_str_free(&w2);
  free(wtext);
  rc = dg_test_run_dragon(args, NULL, &out);
  CHECK_MSG(rc == 0 && strstr(out, "1 already labelled") && strstr(out, "0 candidates measured"),
            "rc %d: %s (%s)", rc, out, swapped);
  free(out);
  snprintf(args, sizeof args, "data label --db %s --cost-model %s/nope --splits %s --target cpu",
           ldir("cli_fresh"), dg_test_tmpdir(), splits);
  rc = dg_test_run_dragon(args, NULL, &out);
  CHECK_MSG(rc == 1 && strstr(out, "nope/data.bin"), "rc %d: %s", rc, out);
  free(out);
  /* bad flags get usage errors naming them */
  rc = dg_test_run_dragon("data label --db /tmp/x --shard 3/2", NULL, &out);
  CHECK(rc == 2 && strstr(out, "--shard"));
  free(out);
  rc = dg_test_run_dragon("data label --db /tmp/x --split nope", NULL, &out);
  CHECK(rc == 2 && strstr(out, "not a split"));
  free(out);
  rc = dg_test_run_dragon("data label --db /tmp/x --trials-min 8 --trials-max 4", NULL, &out);
  CHECK(rc == 2 && strstr(out, "--trials-max"));
  free(out);
  data_splits_free(t);
}

static bool copy_db_file(const char *from_dir, const char *to_dir, const char *name) {
  char a[600], b[600];
  snprintf(a, sizeof a, "%s/%s", from_dir, name);
  snprintf(b, sizeof b, "%s/%s", to_dir, name);
  dg_status st;
  size_t len;
  char *t = dg_read_file(a, &len, &st);
  if (!t) return false;
  bool ok = dg_write_file_atomic(b, t, len, &st);
  free(t);
  return ok;
}

/* A space smaller than trials_min is measured whole once and marked: a
 * rerun skips it without searching. Without the mark (a database from
 * before marks), --find-exhausted finds it again measuring nothing. */
DG_TEST(data_label_cpu_marks_a_space_measured_whole) {
  static const char *const tiny[] = {"bias_gelu:m=4,n=8,dtype=f32"};
  dg_status st;
  search_db *db;
  CHECK(search_db_open(ldir("label_marks"), &db, &st));
  data_label_opts o;
  opts_for(&o, db, 1);
  o.specs = tiny;
  o.trials_min = o.trials_max = 64;
  data_label_stats s;
  CHECK_MSG(data_label_run(&o, &s, &st), "%s", st.msg);
  CHECK_MSG(s.failed == 0, "%s", s.first_failure);
  CHECK_EQ(s.labelled, 1);
  char h[21];
  snprintf(h, sizeof h, "%s", search_db_workload_hash(db, 0));
  int64_t n = search_db_workload_trials(db, h);
  CHECK(n > 0 && n < 64);
  CHECK_EQ(search_db_workload_exhausted(db, h), n);
  /* the rerun: skipped for its mark, nothing searched or measured */
  CHECK(data_label_run(&o, &s, &st));
  CHECK_EQ(s.already, 1);
  CHECK_EQ(s.exhausted, 1);
  CHECK_EQ(s.measured, 0);
  CHECK(s.t_search == 0);
  /* retried on request: searched, found nothing new, measured nothing */
  o.retry_exhausted = true;
  CHECK(data_label_run(&o, &s, &st));
  CHECK_EQ(s.already, 0);
  CHECK_EQ(s.measured, 0);
  CHECK(s.t_search > 0);
  search_db_close(db);
  /* the same records without the marks file */
  CHECK(dg_mkdirs(ldir("label_nomarks"), &st));
  CHECK(copy_db_file(ldir("label_marks"), ldir("label_nomarks"), "workloads.jsonl"));
  CHECK(copy_db_file(ldir("label_marks"), ldir("label_nomarks"), "records.jsonl"));
  CHECK(copy_db_file(ldir("label_marks"), ldir("label_nomarks"), "baselines.jsonl"));
  CHECK(search_db_open(ldir("label_nomarks"), &db, &st));
  CHECK_EQ(search_db_workload_exhausted(db, h), -1);
  opts_for(&o, db, 1);
  o.specs = tiny;
  o.trials_min = o.trials_max = 64;
  o.find_exhausted = true;
  CHECK(data_label_run(&o, &s, &st));
  CHECK_EQ(s.exhausted, 1);
  CHECK_EQ(s.measured, 0);
  CHECK_EQ(search_db_workload_exhausted(db, h), n);
  CHECK_EQ(search_db_workload_trials(db, h), n);
  /* a workload never begun is left alone: not built into the database */
  static const char *const other[] = {"softmax:m=8,n=32,dtype=f32"};
  o.specs = other;
  CHECK(data_label_run(&o, &s, &st));
  CHECK_EQ(s.exhausted, 0);
  CHECK_EQ(search_db_workload_count(db), 1);
  search_db_close(db);
}

/* Clears the variables of every MPI launcher this test sets or could
 * inherit. */
static void clear_launcher_env(void) {
  static const char *const vars[] = {"OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE",
                                     "OMPI_COMM_WORLD_LOCAL_RANK", "PMI_RANK", "PMI_SIZE",
                                     "MPI_LOCALRANKID", "SLURM_PROCID", "SLURM_NTASKS",
                                     "SLURM_LOCALID"};
  for (size_t i = 0; i < DG_ARRAY_LEN(vars); i++) unsetenv(vars[i]);
}

/* The launcher's place of a process: Open MPI first, then PMI, then
 * Slurm; numbers that do not hold are refused naming the variables; the
 * GPU of a rank is its local rank modulo the node's GPUs. */
DG_TEST(data_label_mpi_launch_from_env) {
  clear_launcher_env();
  cli_launch L;
  char why[300];
  CHECK(!cli_launch_from_env(&L, why, sizeof why));
  CHECK(strstr(why, "OMPI_COMM_WORLD_RANK") && strstr(why, "SLURM_PROCID"));
  setenv("SLURM_PROCID", "5", 1);
  setenv("SLURM_NTASKS", "8", 1);
  setenv("SLURM_LOCALID", "1", 1);
  CHECK(cli_launch_from_env(&L, why, sizeof why));
  CHECK(L.rank == 5 && L.size == 8 && L.local == 1 && strcmp(L.launcher, "Slurm") == 0);
  setenv("OMPI_COMM_WORLD_RANK", "2", 1);
  setenv("OMPI_COMM_WORLD_SIZE", "3", 1);
  CHECK(cli_launch_from_env(&L, why, sizeof why));
  CHECK(L.rank == 2 && L.size == 3 && L.local == -1 && strcmp(L.launcher, "Open MPI") == 0);
  setenv("OMPI_COMM_WORLD_RANK", "3", 1);
  CHECK(!cli_launch_from_env(&L, why, sizeof why));
  CHECK_MSG(strstr(why, "OMPI_COMM_WORLD_RANK=3") && strstr(why, "OMPI_COMM_WORLD_SIZE=3"), "%s", why);
  setenv("OMPI_COMM_WORLD_RANK", "x1", 1);
  CHECK(!cli_launch_from_env(&L, why, sizeof why));
  clear_launcher_env();
  CHECK_EQ(cli_launch_gpu(5, 4), 1);
  CHECK_EQ(cli_launch_gpu(3, 4), 3);
  CHECK_EQ(cli_launch_gpu(0, 1), -1); /* one GPU: nothing to choose */
  CHECK_EQ(cli_launch_gpu(-1, 8), -1); /* no local rank: the launcher's choice stands */
  CHECK(cli_node_gpu_count() >= 0);
}

/* Two ranks of an MPI job (`--shard mpi`, the launcher's variables set as
 * mpirun sets them): each labels its shard into DIR/rank-R, the two
 * shards are disjoint and cover the split's first workloads, and
 * `db merge` of the two databases holds both. */
DG_TEST(data_label_mpi_ranks_label_disjoint_shards_and_merge) {
  dg_status st;
  char splits[600];
  data_splits *t = small_splits("mpi_splits.tsv.zst", splits, sizeof splits);
  CHECK(t);
  char args[2048], *out = NULL;
  int labelled = 0;
  for (int r = 0; r < 2; r++) {
    clear_launcher_env();
    char v[16];
    snprintf(v, sizeof v, "%d", r);
    setenv("OMPI_COMM_WORLD_RANK", v, 1);
    setenv("OMPI_COMM_WORLD_SIZE", "2", 1);
    setenv("OMPI_COMM_WORLD_LOCAL_RANK", v, 1);
    snprintf(args, sizeof args,
             "data label --db %s --shard mpi --splits %s --target cpu --first 2 --trials-min 2 "
             "--trials-max 2 --population 16 --repeats 1 --max-work 1e6",
             ldir("mpi"), splits);
    int rc = dg_test_run_dragon(args, NULL, &out);
    clear_launcher_env();
    char want[700];
    snprintf(want, sizeof want, "Open MPI rank %d of 2: shard %d/2, database %s/rank-%d", r, r,
             ldir("mpi"), r);
    CHECK_MSG(rc == 0 && strstr(out, want), "rc %d: %s", rc, out);
    int n = 0;
    const char *at = strstr(out, "labelled ");
    CHECK_MSG(at && sscanf(at, "labelled %d workloads", &n) == 1, "%s", out);
    labelled += n;
    free(out);
  }
  CHECK_MSG(labelled >= 1, "no workload labelled by either rank");
  /* each rank's workloads are its shard's: every other of the split's first four */
  const char *first4[4];
  int k = 0;
  for (int64_t i = data_splits_next(t, DATA_SPLIT_TRAIN, 0); i >= 0 && k < 4;
       i = data_splits_next(t, DATA_SPLIT_TRAIN, i + 1))
    first4[k++] = data_splits_at(t, i)->spec;
  CHECK_EQ(k, 4);
  int total = 0;
  for (int r = 0; r < 2; r++) {
    char dir[600];
    snprintf(dir, sizeof dir, "%s/rank-%d", ldir("mpi"), r);
    search_db *db;
    CHECK_MSG(search_db_open_readonly(dir, &db, &st), "%s", st.msg);
    for (int w = 0; w < search_db_workload_count(db); w++) {
      const char *spec = search_db_workload_spec(db, search_db_workload_hash(db, w));
      CHECK_MSG(spec && (strcmp(spec, first4[r]) == 0 || strcmp(spec, first4[r + 2]) == 0),
                "rank %d labelled %s, not of its shard", r, spec ? spec : "(none)");
    }
    total += search_db_record_count(db);
    search_db_close(db);
  }
  snprintf(args, sizeof args, "db merge %s/rank-0 %s/rank-1 --db %s", ldir("mpi"), ldir("mpi"),
           ldir("mpi_all"));
  int rc = dg_test_run_dragon(args, NULL, &out);
  CHECK_MSG(rc == 0, "rc %d: %s", rc, out);
  free(out);
  search_db *all;
  CHECK(search_db_open_readonly(ldir("mpi_all"), &all, &st));
  CHECK_EQ(search_db_record_count(all), total);
  search_db_close(all);
  /* --shard mpi without a launcher is a usage error that says what was looked for */
  rc = dg_test_run_dragon("data label --db /tmp/x --shard mpi", NULL, &out);
  CHECK_MSG(rc == 2 && strstr(out, "no MPI launcher seen"), "rc %d: %s", rc, out);
  free(out);
  data_splits_free(t);
}
