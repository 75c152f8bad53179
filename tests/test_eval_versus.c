/* test_eval_versus.c: the model against the search (src/eval/versus.c),
 * on planted records: the search's best after 64 and 256 trials read
 * against its label in the run's clock, its wall time from the records'
 * dates (a pause between windows left out), the trials it fits in the
 * model's seconds, the device of its best record only, an exhausted
 * search at the trial counts it never reached, and the tasks left out (a
 * failed output, one without a label, a workload without records). */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "dragon/eval.h"
#include "dragon/search.h"
#include "dragon/wl.h"
#include "test.h"

#define W "batch_matmul:b=1,n=8,m=8,k=8,dtype=f32"
#define OTHER "batch_matmul:b=1,n=16,m=8,k=8,dtype=f32"

static bool near(double a, double b) { return fabs(a - b) <= 1e-9 * fabs(b); }

/* Record i: a distinct trace, i microseconds faster than 1 ms, two
 * seconds after the one before, an hour's pause after the 101st. */
static bool plant(search_db *db, const char *h, int i, const char *device, double secs, dg_status *st) {
  char trace[256], date[32];
  snprintf(trace, sizeof trace,
           "[[[\"GetBlock\",[],[\"Z\",\"main\"],[\"b0\"]],[\"Annotate\",[\"b0\",\"\\\"v%d\\\"\"],[\"k\"],[]],"
           "[\"EnterPostproc\",[],[],[]]],[]]",
           i);
  int64_t t = 2 * i + (i > 100 ? 3600 : 0);
  snprintf(date, sizeof date, "2026-12-04T%02d:%02d:%02dZ", (int)(10 + t / 3600), (int)(t / 60 % 60), (int)(t % 60));
  search_record r = {h, trace, &secs, 1, NULL, "cuda", date, 0, "dragon test lower 2", device};
  return search_db_add_record(db, &r, NULL, st);
}

static eval_task task(const char *spec, eval_gate gate, double secs, double label_secs) {
  eval_task t;
  memset(&t, 0, sizeof t);
  t.spec = (char *)spec;
  snprintf(t.family, sizeof t.family, "batch_matmul");
  t.gate = gate;
  t.secs = secs;
  t.baseline_secs = 5e-3;
  t.label_secs = label_secs;
  t.t_write = 1.5;
  t.t_check = 2.6;
  return t;
}

DG_TEST(eval_versus_reads_the_search_from_its_records) {
  dg_status st;
  char dir[600];
  snprintf(dir, sizeof dir, "%s/versus_db", dg_test_tmpdir());
  search_db *db;
  CHECK_MSG(search_db_open(dir, &db, &st), "%s", st.msg);
  dg_func *f = wl_build(W, &st), *g = wl_build(OTHER, &st);
  CHECK(f && g);
  char h[21], h2[21];
  CHECK(search_db_add_workload(db, W, f, h, &st) && search_db_add_workload(db, OTHER, g, h2, &st));
  /* 300 trials on the H200, 1000 us down to 701 us; one of another card between them, slower */
  for (int i = 0; i < 300; i++) {
    CHECK(plant(db, h, i, "GPU A", (1000.0 - i) * 1e-6, &st));
    if (i == 50) CHECK(plant(db, h, 1000, "GPU B", 2e-3, &st));
  }
  eval_task ts[4] = {task(W, EVAL_PASSED, 500e-6, 705e-6), task(W, EVAL_GATE_LOWER, 0, 705e-6),
                     task(W, EVAL_PASSED, 500e-6, 0), task(OTHER, EVAL_PASSED, 500e-6, 705e-6)};
  eval_result r = {ts, 4, true, false, 3, 0, 0, 0, 0, 0};
  eval_versus v;
  CHECK(eval_versus_search(&r, db, &v, &st));
  CHECK_EQ(v.n, 1);
  if (v.n == 1) {
    const eval_versus_task *t = &v.tasks[0];
    CHECK_EQ(t->task, 0);
    CHECK_EQ(t->trials, 300);
    const double per = 596.0 / 299; /* the 299 gaps of 2 s but the one with the hour's pause */
    CHECK_MSG(near(t->per_trial_s, per), "%g", t->per_trial_s);
    CHECK(near(t->vs[0], 705e-6 * 937.0 / 701.0 / 500e-6));
    CHECK(near(t->vs[1], 705e-6 * 745.0 / 701.0 / 500e-6));
    CHECK_EQ(t->vs[2], 0); /* never reached 1,000 trials */
    CHECK(near(t->search_speedup[0], 5e-3 / (705e-6 * 937.0 / 701.0)));
    CHECK(near(t->wall[0], 64 * per) && near(t->wall[1], 256 * per));
    CHECK(near(t->model_cost, 4.1) && near(t->model_speedup, 10));
    CHECK_EQ(t->at_cost_trials, 2); /* 4.1 s at 1.99 s a trial */
    CHECK(near(t->vs_at_cost, 705e-6 * 999.0 / 701.0 / 500e-6));
  }
  char *table = eval_versus_table(&v);
  CHECK_MSG(strstr(table, "| batch_matmul | 1 | 4.1 | 1.88x (1) | 1.50x (1) | - | 128 | 510 | 1 | 2.01x (1) |") && strstr(table, "| **all** | 1 |"), "%s", table);
  free(table);
  dg_str pts;
  dg_str_init(&pts);
  eval_versus_points(&v, &pts);
  CHECK_MSG(pts.s && strstr(pts.s, "model\t4.1\t10\n") && strstr(pts.s, "search64\t127.5"), "%s", pts.s ? pts.s : "");
  dg_str_free(&pts);
  eval_versus_free(&v);
  /* a search that measured its whole space is at 1,000 trials with its best */
  CHECK(search_db_mark_exhausted(db, h, 300, &st));
  CHECK(eval_versus_search(&r, db, &v, &st));
  CHECK(v.n == 1 && near(v.tasks[0].vs[2], 705e-6 / 500e-6) && near(v.tasks[0].wall[2], 300 * 596.0 / 299));
  eval_versus_free(&v);
  search_db_close(db);
  ir_func_free(f);
  ir_func_free(g);
}

/* `dragon eval --search-db` where nothing is timed says so and keeps the
 * evaluation (the comparison needs the GPU's times). */
DG_TEST(eval_cli_search_db_without_times) {
  char args[1400], *out = NULL;
  snprintf(args, sizeof args,
           "eval --workloads 'softmax:m=64,n=96,dtype=f32' --target c --no-numbers --search-db %s/no_such_db "
           "--out %s/evs --quiet",
           dg_test_tmpdir(), dg_test_tmpdir());
  int rc = dg_test_run_dragon(args, NULL, &out);
  CHECK_MSG(rc == 0 && strstr(out, "--search-db: nothing timed (no GPU), no comparison with the search") &&
                strstr(out, "Correct@1"),
            "rc %d: %s", rc, out);
  free(out);
}
