/* test_eval_score.c: the one road from a TSEL graph to a checked kernel
 * (src/eval/score.c). A good graph passes every gate the CPU can run; a
 * failure planted at each gate is reported at that gate, with its reason,
 * and no later gate runs. */
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dragon/eval.h"
#include "dragon/rt_cuda.h"
#include "dragon/search.h"
#include "dragon/tsel.h"
#include "dragon/wl.h"
#include "sched_support.h"
#include "test.h"

#define GMM "batch_matmul:b=1,n=128,m=128,k=128,dtype=f32"


static void opts_for(eval_score_opts *o, const dg_func *f, eval_gate last) {
  memset(o, 0, sizeof *o);
  o->kernel = f;
  o->spec = GMM;
  o->last = last;
}

/* Replaces the first occurrence of `from` in text by `to` (a new string). */
static char *edit(const char *text, const char *from, const char *to) {
  const char *p = strstr(text, from);
  if (!p) return NULL;
  dg_str s;
  dg_str_init(&s);
  dg_str_putn(&s, text, (size_t)(p - text));
  dg_str_puts(&s, to);
  dg_str_puts(&s, p + strlen(from));
  return dg_str_take(&s);
}

DG_TEST(eval_score_good_graph_passes_each_gate) {
  dg_status st;
  dg_func *f = wl_build(GMM, &st);
  CHECK_MSG(f, "%s", st.msg);
  char *text = ts_graph_of("schedules/GMM.json", GMM, f);
  CHECK(text);
  for (int last = EVAL_GATE_PARSE; last <= EVAL_GATE_NUMERIC; last++) {
    eval_score_opts o;
    opts_for(&o, f, (eval_gate)last);
    eval_score r;
    bool ok = eval_score_tsel(text, "GMM.tsel", &o, &r);
    CHECK_MSG(ok && r.failed == EVAL_PASSED, "up to %s: failed at %s: %s",
              eval_gate_name((eval_gate)last), eval_gate_name(r.failed), r.reason);
    if (last >= EVAL_GATE_REPLAY) CHECK(r.scheduled && r.kernel_hash == ir_func_hash(r.scheduled));
    eval_score_free(&r);
  }
  /* the lowered trace is the hand schedule's, exactly */
  size_t len;
  char *json = dg_read_file("schedules/GMM.json", &len, &st);
  CHECK(json);
  eval_score_opts o;
  opts_for(&o, f, EVAL_GATE_LOWER);
  o.expect_trace = json;
  eval_score r;
  CHECK_MSG(eval_score_tsel(text, "GMM.tsel", &o, &r), "%s", r.reason);
  eval_score_free(&r);
  free(json);
  free(text);
  ir_func_free(f);
}

/* Expects the graph to fail at gate g with a reason containing want. */
static void expect_gate(const char *text, const eval_score_opts *o, eval_gate g, const char *want) {
  eval_score r;
  bool ok = eval_score_tsel(text, "planted.tsel", o, &r);
  CHECK_MSG(!ok && r.failed == g, "want %s, got %s: %s", eval_gate_name(g),
            eval_gate_name(r.failed), r.reason);
  CHECK_MSG(strstr(r.reason, want), "reason: %s (want '%s')", r.reason, want);
  /* no later gate ran: nothing built past the failure */
  if (g <= EVAL_GATE_LOWER) CHECK(r.scheduled == NULL);
  CHECK(r.secs == 0);
  eval_score_free(&r);
}

DG_TEST(eval_score_planted_failure_at_each_gate) {
  dg_status st;
  dg_func *f = wl_build(GMM, &st);
  CHECK_MSG(f, "%s", st.msg);
  char *good = ts_graph_of("schedules/GMM.json", GMM, f);
  CHECK(good);
  eval_score_opts o;
  opts_for(&o, f, EVAL_GATE_NUMERIC);

  /* parse: not TSEL at all; the place is named */
  expect_gate("tsel 1 kernel " GMM "\nhello world\n", &o, EVAL_GATE_PARSE, "planted.tsel:2:");
  /* header: a graph for another workload */
  char *other = edit(good, "n=128,", "n=64,");
  CHECK(other);
  expect_gate(other, &o, EVAL_GATE_HEADER, "not '" GMM "'");
  free(other);
  /* check: a tile with one factor more than its loop's extent allows */
  const char *p = strstr(good, " tile ");
  CHECK(p);
  const char *lb = strchr(p, '[');
  CHECK(lb);
  dg_str s;
  dg_str_init(&s);
  dg_str_putn(&s, good, (size_t)(lb - good));
  dg_str_puts(&s, "[7 ");
  dg_str_puts(&s, lb + 1);
  char *bad_tile = dg_str_take(&s);
  expect_gate(bad_tile, &o, EVAL_GATE_CHECK, "tile");
  free(bad_tile);
  /* replay: a graph that types but that the primitive refuses (the output
   * reduction block cannot be inlined) */
  expect_gate("tsel 1 kernel " GMM "\nt1 block \"Z\"\nt2 inline t1\n", &o, EVAL_GATE_REPLAY,
              "nline");
  /* lower: the graph lowers, but not to the trace the record holds */
  size_t len;
  char *space = dg_read_file("tests/data/traces/gmm0_space.json", &len, &st);
  CHECK(space);
  o.expect_trace = space;
  expect_gate(good, &o, EVAL_GATE_LOWER, "other than the expected");
  o.expect_trace = NULL;
  free(space);
  /* build: a schedule past the shared-memory limit of VerifyGPUCode */
  char *big = ts_graph_of("tests/data/traces/gmm0_space.json", GMM, f);
  CHECK(big);
  expect_gate(big, &o, EVAL_GATE_BUILD, "shared memory");
  free(big);
  /* numeric: the scheduled kernel against another computation's reference
   * (the same buffers and block names, another reduction) */
  dg_func *rsum = wl_build("reduce_sum:m=64,n=256,dtype=f32", &st);
  dg_func *rmax = wl_build("reduce_max:m=64,n=256,dtype=f32", &st);
  CHECK(rsum && rmax);
  char *rgraph = NULL;
  {
    /* the untuned baseline, written as a graph */
    eval_score_opts ro;
    memset(&ro, 0, sizeof ro);
    ro.kernel = rsum;
    ro.last = EVAL_GATE_NUMERIC;
    sched *bs = NULL;
    CHECK_MSG(search_baseline_schedule(rsum, NULL, &bs, &st), "%s", st.msg);
    tsel_graph *g = tsel_lift(sched_get_trace(bs), "reduce_sum:m=64,n=256,dtype=f32", rsum, NULL,
                              &st);
    CHECK(g);
    rgraph = tsel_print(g);
    tsel_graph_free(g);
    sched_free(bs);
    eval_score r;
    CHECK_MSG(eval_score_tsel(rgraph, "rsum.tsel", &ro, &r), "%s: %s", eval_gate_name(r.failed),
              r.reason);
    eval_score_free(&r);
    ro.reference = rmax;
    expect_gate(rgraph, &ro, EVAL_GATE_NUMERIC, "wrong numbers");
  }
  free(rgraph);
  ir_func_free(rsum);
  ir_func_free(rmax);
  free(good);
  ir_func_free(f);
}

DG_TEST(eval_score_any_text_is_judged_not_crashed) {
  dg_status st;
  dg_func *f = wl_build(GMM, &st);
  CHECK(f);
  static const char *const texts[] = {"", "\n", "tsel", "tsel 1 kernel", "tsel 1 kernel " GMM,
                                      "tsel 1 kernel " GMM "\nt1 loops t9 x3\n",
                                      "tsel 2 kernel " GMM "\n", "\xff\xfe"};
  for (size_t i = 0; i < DG_ARRAY_LEN(texts); i++) {
    eval_score_opts o;
    opts_for(&o, f, EVAL_GATE_NUMERIC);
    eval_score r;
    bool ok = eval_score_tsel(texts[i], "x.tsel", &o, &r);
    /* an empty graph of the right kernel is the unscheduled kernel, which
     * does not build for the GPU; everything else fails earlier */
    CHECK_MSG(!ok && r.failed != EVAL_PASSED && r.reason[0], "text %zu passed", i);
    eval_score_free(&r);
  }
  ir_func_free(f);
}

/* A batch of graphs of two workloads gives, item by item, what scoring
 * each alone gives. */
DG_TEST(eval_score_batch_matches_one_by_one) {
  dg_status st;
  dg_func *gmm = wl_build(GMM, &st);
  dg_func *rsum = wl_build("reduce_sum:m=64,n=256,dtype=f32", &st);
  CHECK(gmm && rsum);
  char *good = ts_graph_of("schedules/GMM.json", GMM, gmm);
  char *big = ts_graph_of("tests/data/traces/gmm0_space.json", GMM, gmm);
  sched *bs = NULL;
  CHECK(search_baseline_schedule(rsum, NULL, &bs, &st));
  tsel_graph *g = tsel_lift(sched_get_trace(bs), "reduce_sum:m=64,n=256,dtype=f32", rsum, NULL, &st);
  CHECK(g && good && big);
  char *rgraph = tsel_print(g);
  tsel_graph_free(g);
  sched_free(bs);
  const eval_item items[] = {
      {good, "good", gmm, GMM, NULL},
      {big, "big", gmm, GMM, NULL},
      {rgraph, "rsum", rsum, "reduce_sum:m=64,n=256,dtype=f32", NULL},
      {"nonsense", "junk", rsum, NULL, NULL},
      {rgraph, "rsum on gmm", gmm, GMM, NULL},
  };
  int n = (int)DG_ARRAY_LEN(items);
  eval_score_opts o;
  memset(&o, 0, sizeof o);
  o.last = EVAL_GATE_NUMERIC;
  eval_score *batch = dg_calloc((size_t)n, sizeof *batch);
  eval_score_batch(items, n, &o, 2, batch);
  static const eval_gate want[] = {EVAL_PASSED, EVAL_GATE_BUILD, EVAL_PASSED, EVAL_GATE_PARSE,
                                   EVAL_GATE_HEADER};
  for (int i = 0; i < n; i++) {
    eval_score_opts one = o;
    one.kernel = items[i].kernel;
    one.spec = items[i].spec;
    eval_score r;
    eval_score_tsel(items[i].text, items[i].name, &one, &r);
    CHECK_MSG(batch[i].failed == want[i] && r.failed == want[i], "%s: batch %s, alone %s (%s)",
              items[i].name, eval_gate_name(batch[i].failed), eval_gate_name(r.failed),
              batch[i].reason);
    CHECK_STREQ(batch[i].reason, r.reason);
    CHECK(batch[i].kernel_hash == r.kernel_hash);
    eval_score_free(&r);
    eval_score_free(&batch[i]);
  }
  free(batch);
  free(good);
  free(big);
  free(rgraph);
  ir_func_free(gmm);
  ir_func_free(rsum);
}

/* The graph a model wrote for batch_matmul b=12 n=m=21 k=256 (validation
 * split): a well-formed multi-level tiling whose thread tiles (the third
 * factor of t5, t6, t7) give 3 x 1 x 7 = 21 threads, where the sketch's
 * bounds (t13, t14) are 32 to 1,024. */
static const char *const BMM_SPEC = "batch_matmul:b=12,n=21,m=21,k=256,dtype=f32";
static const char *const BMM_GRAPH =
    "tsel 1 kernel batch_matmul:b=12,n=21,m=21,k=256,dtype=f32\n"
    "t1 block \"Z\"\n"
    "t2 block \"root\"\n"
    "t3 annotate t1 tiling \"SSSRRSRS\"\n"
    "t4 loops t1 x4\n"
    "t5 tile t4.0 [4 1 3 1 1] max=64\n"
    "t6 tile t4.1 [3 1 1 1 7] max=64\n"
    "t7 tile t4.2 [1 1 7 3 1] max=64\n"
    "t8 tile t4.3 [16 2 8] max=64\n"
    "t9 reorder t5.0 t6.0 t7.0 t5.1 t6.1 t7.1 t5.2 t6.2 t7.2 t8.0 t8.1 t5.3 t6.3 t7.3 t8.2 t5.4 t6.4 t7.4\n"
    "t10 fuse_bind t5.0 t6.0 t7.0 blockIdx.x\n"
    "t11 fuse_bind t5.1 t6.1 t7.1 vthread.x\n"
    "t12 fuse_bind t5.2 t6.2 t7.2 threadIdx.x\n"
    "t13 annotate t1 tx_lo 32\n"
    "t14 annotate t1 tx_hi 1024\n";

/* The first `edits` edit lines of BMM_GRAPH. */
static char *bmm_prefix(int edits) {
  const char *p = strchr(BMM_GRAPH, '\n') + 1;
  for (int i = 0; i < edits; i++) p = strchr(p, '\n') + 1;
  size_t n = (size_t)(p - BMM_GRAPH);
  char *s = malloc(n + 1);
  memcpy(s, BMM_GRAPH, n);
  s[n] = 0;
  return s;
}

/* The line guard refuses the threads as soon as their bounds are given
 * (not 15 lines later at the postproc line), and blames t7, the last tile
 * whose factors set them; the lines before pass; tsel_thread_decision
 * follows the bound loops back through fuse_bind to their tiles. */
DG_TEST(eval_guard_blames_the_thread_tiles) {
  dg_status st;
  dg_func *f = wl_build(BMM_SPEC, &st);
  CHECK_MSG(f, "%s", st.msg);
  eval_guard g = {f, BMM_SPEC};
  for (int e = 1; e <= 14; e++) {
    char *text = bmm_prefix(e);
    int back_to = 0;
    bool pass = eval_guard_line(&g, text, strlen(text), false, &back_to, NULL);
    CHECK_MSG(pass == (e < 14), "%d edits: %s", e, pass ? "passed" : "refused");
    CHECK_MSG(back_to == (e < 14 ? 0 : 7), "%d edits: back to %d", e, back_to);
    free(text);
  }
  tsel_graph *gr = tsel_parse(BMM_GRAPH, NULL, &st);
  CHECK_MSG(gr, "%s", st.msg);
  CHECK_EQ(tsel_thread_decision(gr), 7);
  tsel_graph_free(gr);
  /* no thread bound yet: nothing to blame */
  char *text = bmm_prefix(11);
  gr = tsel_parse(text, NULL, &st);
  CHECK(gr);
  CHECK_EQ(tsel_thread_decision(gr), 0);
  tsel_graph_free(gr);
  free(text);
  /* a fuse of tiles bound later, and a thread_split: their decisions */
  gr = tsel_parse("tsel 1 kernel x\nt1 block \"C\"\nt2 loops t1 x2\nt3 tile t2.0 [4 8] max=64\n"
                  "t4 split t2.1 [_ 32]\nt5 fuse t3.1 t4.1\nt6 bind t5 threadIdx.x\n",
                  NULL, &st);
  CHECK_MSG(gr, "%s", st.msg);
  CHECK_EQ(tsel_thread_decision(gr), 4);
  tsel_graph_free(gr);
  gr = tsel_parse("tsel 1 kernel x\nt1 block \"C\"\nt2 loops t1 x2\nt3 fuse t2.0 t2.1\n"
                  "t4 thread_split t3 [1 32 64] =32\nt5 tile t2.0 [4 8] max=64\n",
                  NULL, &st);
  CHECK_MSG(gr, "%s", st.msg);
  CHECK_EQ(tsel_thread_decision(gr), 4);
  tsel_graph_free(gr);
  ir_func_free(f);
}

/* The guard's log: a line for each refusal and none for a pass, whole JSON
 * lines with the refused edit, the gate, the reason and the edit blamed;
 * a second opening appends; an unwritable path is refused by name. */
DG_TEST(eval_guard_log_writes_each_refusal) {
  dg_status st;
  dg_func *f = wl_build(BMM_SPEC, &st);
  CHECK_MSG(f, "%s", st.msg);
  char path[512];
  snprintf(path, sizeof path, "%s/guard.jsonl", dg_test_tmpdir());
  remove(path);
  for (int round = 0; round < 2; round++) {
    eval_guard_log *log = eval_guard_log_open(path, &st);
    CHECK_MSG(log, "%s", st.msg);
    eval_guard g = {f, BMM_SPEC, log};
    for (int e = 13; e <= 14; e++) {
      char *text = bmm_prefix(e);
      int back_to = 0;
      CHECK(eval_guard_line(&g, text, strlen(text), false, &back_to, NULL) == (e < 14));
      free(text);
    }
    CHECK_MSG(eval_guard_log_close(log, &st), "%s", st.msg);
  }
  size_t len = 0;
  char *got = dg_read_file(path, &len, &st);
  CHECK_MSG(got, "%s", st.msg);
  int lines = 0;
  for (size_t i = 0; i < len; i++) lines += got[i] == '\n';
  CHECK_EQ(lines, 2); /* one refusal a round, the pass not written */
  json_error_t je;
  char *nl = strchr(got, '\n');
  CHECK(nl);
  json_t *o = json_loadb(got, (size_t)(nl - got), 0, &je);
  CHECK_MSG(o, "%s", je.text);
  CHECK_STREQ(json_string_value(json_object_get(o, "spec")), BMM_SPEC);
  CHECK_EQ(json_integer_value(json_object_get(o, "edits")), 14);
  CHECK(strncmp(json_string_value(json_object_get(o, "line")), "t14 ", 4) == 0);
  CHECK_STREQ(json_string_value(json_object_get(o, "gate")), "build");
  CHECK(strstr(json_string_value(json_object_get(o, "reason")), "outside its bounds"));
  CHECK_EQ(json_integer_value(json_object_get(o, "blame")), 7);
  CHECK(strstr(json_string_value(json_object_get(o, "graph")), "t14 annotate t1 tx_hi 1024\n"));
  json_decref(o);
  free(got);
  CHECK(!eval_guard_log_open("/nonexistent-dir/guard.jsonl", &st));
  CHECK(strstr(st.msg, "/nonexistent-dir/guard.jsonl"));
  ir_func_free(f);
}

/* A gemm's multi-level tiling as the model writes it, with its three
 * tiles (spec's extents), the second read stage's vector lanes and the
 * unroll choice; the caller frees. */
static char *gemm_tiling_graph(const char *spec, const char *ti, const char *tj, const char *tk, int coop2,
                               int unroll) {
  dg_str t;
  dg_str_init(&t);
  dg_str_printf(&t,
                "tsel 1 kernel %s\n"
                "t1 block \"C\"\nt2 block \"root\"\nt3 annotate t1 tiling \"SSSRRSRS\"\nt4 loops t1 x3\n"
                "t5 tile t4.0 [%s] max=64\nt6 tile t4.1 [%s] max=64\nt7 tile t4.2 [%s] max=64\n"
                "t8 reorder t5.0 t6.0 t5.1 t6.1 t5.2 t6.2 t7.0 t7.1 t5.3 t6.3 t7.2 t5.4 t6.4\n"
                "t9 fuse_bind t5.0 t6.0 blockIdx.x\nt10 fuse_bind t5.1 t6.1 vthread.x\n"
                "t11 fuse_bind t5.2 t6.2 threadIdx.x\n"
                "t12 annotate t1 tx_lo 32\nt13 annotate t1 tx_hi 1024\nt14 cache_write_at t1 0 local t11\n"
                "t15 cache_read_at t1 0 shared t7.0\nt16 loops t15 x6\nt17 fuse t16.4 t16.5\n"
                "t18 coop t15 [1 2 3 4] =4\n"
                "t19 cache_read_at t1 1 shared t7.0\nt20 loops t19 x6\nt21 fuse t20.4 t20.5\n"
                "t22 coop t19 [1 2 3 4] =%d\n"
                "t23 fuse t7.0\nt24 annotate t23 \"software_pipeline_stage\" [0 0 3]\n"
                "t25 annotate t23 \"software_pipeline_order\" [0 1 2]\n"
                "t26 annotate t23 \"software_pipeline_async_stages\" [0]\n"
                "t27 unroll_steps t2 [0 16 64 512 1024] =%d\nt28 postproc default\n",
                spec, ti, tj, tk, coop2, unroll);
  return dg_str_take(&t);
}

/* A graph the model wrote for a test gemv: its copy t18, annotated for a
 * cooperative fetch (t23), inlined at t30. Only the postprocessors refuse
 * it ("an annotated copy block is gone"); the blame goes to the inline,
 * which the guard takes back with everything after it. */
DG_TEST(eval_guard_blames_an_inlined_copy_on_its_inline) {
  const char *spec = "gemv:n=8297,k=6144,dtype=f32";
  const char *text =
      "tsel 1 kernel gemv:n=8297,k=6144,dtype=f32\n"
      "t1 block \"C\"\nt2 block \"root\"\nt3 annotate t1 tiling \"SSSRRSRS\"\nt4 loops t1 x2\n"
      "t5 tile t4.0 [1 1 1 8297 1] max=64\nt6 tile t5.0 [1 1 1 1] max=64\nt7 tile t5.1 [1 1 1 1] max=64\n"
      "t8 tile t5.3 [8297 1] max=64\nt9 reorder t6.0 t7.0 t5.2 t6.1 t7.1 t5.4\nt10 tile t5.2 [1 1 1] max=64\n"
      "t11 reorder t6.0 t7.0 t8.0 t5.4\n"
      "t12 reorder t6.0 t7.0 t5.4 t6.1 t7.1 t10.0 t6.2 t7.3 t8.1 t6.3 t7.2 t8.0 t10.1 t10.2 t4.1\n"
      "t13 fuse_bind t6.0 t7.0 blockIdx.x\nt14 fuse_bind t5.4 t6.1 t7.1 threadIdx.x\n"
      "t15 fuse_bind t6.2 t7.3 t8.1 t6.3 t7.2 t8.0 blockIdx.x\nt16 fuse_bind t10.1 t10.2 threadIdx.x\n"
      "t17 annotate t2 \"warp_execution\" 1\nt18 cache_read_at t1 0 shared t10.0\nt19 loops t18 x5\n"
      "t20 fuse t4.1\nt21 loops t18 x5\nt22 fuse t21.4\nt23 coop t18 [1 2 3 4] =4\n"
      "t24 cache_read_at t1 1 shared t10.0\nt25 loops t1 x6\nt26 fuse t25.5\n"
      "t27 annotate t24 \"tirx.manifest_shared_memory_local_stage\" 1\nt28 annotate t24 \"double_buffer_scope\" 0\n"
      "t29 annotate t1 \"warp_execution\" 1\nt30 inline t18\nt31 unroll_steps t2 [0 16 64 512 1024] =512\n"
      "t32 postproc default\n";
  dg_status st;
  dg_func *f = wl_build(spec, &st);
  CHECK_MSG(f, "%s", st.msg);
  if (!f) return;
  eval_guard g = {f, spec};
  int back_to = 0;
  tsel_tile_narrowing nw = {0};
  CHECK(!eval_guard_line(&g, text, strlen(text), true, &back_to, &nw));
  CHECK_EQ(back_to, 30);
  tsel_graph *gr = tsel_parse(text, NULL, &st);
  CHECK_MSG(gr, "%s", st.msg);
  CHECK_EQ(tsel_copy_gone_blame(gr), 30);
  tsel_graph_free(gr);
  /* an inline of a copy that no coop named is no such blame */
  gr = tsel_parse("tsel 1 kernel gemv:n=8297,k=6144,dtype=f32\nt1 block \"C\"\n"
                  "t2 cache_read t1 0 shared [t1]\nt3 inline t2\n", NULL, &st);
  CHECK_MSG(gr, "%s", st.msg);
  CHECK_EQ(tsel_copy_gone_blame(gr), 0);
  tsel_graph_free(gr);
  ir_func_free(f);
}

/* A graph a model wrote for gemm m=896 n=64 k=8192 (validation split):
 * its shared stages, pipelined four deep, need 65,536 bytes, past the 48 KiB
 * VerifyGPUCode allows; the guard refuses its postproc line and blames the
 * latest tile (t7, the reduction loop's: the stages' depth in k). */
DG_TEST(eval_guard_blames_a_refused_build_on_the_tiles) {
  const char *spec = "gemm:m=896,n=64,k=8192,trans_a=0,trans_b=1,dtype=f32";
  char *text = gemm_tiling_graph(spec, "16 1 14 1 4", "8 1 8 1 1", "128 1 64", 1, 64);
  dg_status st;
  dg_func *f = wl_build(spec, &st);
  CHECK_MSG(f, "%s", st.msg);
  eval_guard g = {f, spec};
  int back_to = 0;
  tsel_tile_narrowing nw = {0};
  CHECK(!eval_guard_line(&g, text, strlen(text), true, &back_to, &nw));
  /* t7 is also the widest tile (64 of k at a stage against 56 of m): its
   * inner extent capped to 64 * 49152 / 65536 */
  CHECK_EQ(back_to, 7);
  CHECK_EQ(nw.cap, 48);
  /* written again within the cap, the graph passes */
  char *capped = gemm_tiling_graph(spec, "16 1 14 1 4", "8 1 8 1 1", "256 1 32", 1, 64);
  back_to = 0;
  nw = (tsel_tile_narrowing){0};
  CHECK(eval_guard_line(&g, capped, strlen(capped), true, &back_to, &nw));
  CHECK(back_to == 0 && nw.cap == 0 && nw.hi == 0);
  free(capped);
  /* a wide row tile (m=896 in one block) is the one blamed */
  char *wide = gemm_tiling_graph(spec, "1 1 14 1 64", "8 1 8 1 1", "512 2 8", 1, 64);
  CHECK(!eval_guard_line(&g, wide, strlen(wide), true, &back_to, &nw));
  CHECK_MSG(back_to == 5 && nw.cap >= 1 && nw.cap < 896, "blamed t%d, cap %lld", back_to, (long long)nw.cap);
  free(wide);
  /* the same edits without the postproc line pass the replay */
  const char *cut = strstr(text, "t28 postproc");
  char *head = malloc((size_t)(cut - text) + 1);
  memcpy(head, text, (size_t)(cut - text));
  head[cut - text] = 0;
  back_to = 0;
  CHECK(eval_guard_line(&g, head, strlen(head), false, &back_to, NULL));
  CHECK_EQ(back_to, 0);
  free(head);
  free(text);
  ir_func_free(f);
}

/* A build refused for the threads of a block the postprocessors made (the
 * init block of the decomposed reduction, under a thread tile of 16) is
 * blamed on the thread tile, not on the latest tile. */
DG_TEST(eval_guard_blames_a_refused_init_block_on_the_thread_tile) {
  const char *spec = "gemm:m=512,n=128,k=3584,trans_a=0,trans_b=1,dtype=f32";
  char *text = gemm_tiling_graph(spec, "512 1 1 1 1", "2 1 16 4 1", "256 14 1", 4, 512);
  dg_status st;
  dg_func *f = wl_build(spec, &st);
  CHECK_MSG(f, "%s", st.msg);
  eval_guard g = {f, spec};
  int back_to = 0;
  tsel_tile_narrowing nw = {0};
  CHECK(!eval_guard_line(&g, text, strlen(text), true, &back_to, &nw));
  CHECK_EQ(nw.cap, 0); /* threads, not shared memory: nothing capped */
  tsel_graph *gr = tsel_parse(text, NULL, &st);
  CHECK(gr);
  CHECK_MSG(back_to == tsel_thread_decision(gr) && back_to != tsel_last_decision(gr), "blamed t%d (threads t%d)",
            back_to, gr ? tsel_thread_decision(gr) : -1);
  /* its thread factor (the third, 16 threads) narrowed to [32, 1024] */
  CHECK_MSG(back_to == 6 && nw.factor == 2 && nw.lo == 32 && nw.hi == 1024, "t%d factor %d in [%lld, %lld]",
            back_to, nw.factor, (long long)nw.lo, (long long)nw.hi);
  tsel_graph_free(gr);
  /* written again within it, the build passes */
  char *mended = gemm_tiling_graph(spec, "512 1 1 1 1", "1 1 32 4 1", "256 14 1", 4, 512);
  back_to = 0;
  nw = (tsel_tile_narrowing){0};
  CHECK(eval_guard_line(&g, mended, strlen(mended), true, &back_to, &nw));
  free(mended);
  free(text);
  ir_func_free(f);
}

/* A gemm with n=1 (test split): its j tile is all ones, so the threads
 * (16 of the i tile) below the block's 32 cannot be mended there; the
 * guard blames the latest thread tile that can bring them in (t5, whose
 * 256 has 32 among its divisors) with its thread factor narrowed to
 * [32, 1024], not the latest thread tile (t6, which it would write again
 * as it was: 65 refusals of one line until the guard's budget ran out). */
DG_TEST(eval_guard_blames_a_thread_tile_that_can_mend_it) {
  const char *spec = "gemm:m=256,n=1,k=128,trans_a=0,trans_b=0,dtype=f32";
  char *text = gemm_tiling_graph(spec, "16 1 16 1 1", "1 1 1 1 1", "4 4 8", 4, 1024);
  char *head = strdup(text);
  *(strstr(head, "t14 ")) = 0; /* up to the thread bounds */
  dg_status st;
  dg_func *f = wl_build(spec, &st);
  CHECK_MSG(f, "%s", st.msg);
  eval_guard g = {f, spec};
  int back_to = 0;
  tsel_tile_narrowing nw = {0};
  CHECK(!eval_guard_line(&g, head, strlen(head), false, &back_to, &nw));
  CHECK_MSG(back_to == 5 && nw.factor == 2 && nw.lo == 32 && nw.hi == 1024, "t%d factor %d in [%lld, %lld]",
            back_to, nw.factor, (long long)nw.lo, (long long)nw.hi);
  tsel_graph *gr = tsel_parse(head, NULL, &st);
  CHECK(gr);
  CHECK_EQ(tsel_thread_decision(gr), 6); /* the latest thread tile, which cannot */
  tsel_tile_narrowing tn;
  CHECK_EQ(tsel_thread_blame(gr, 16, 32, 1024, &tn), 5);
  /* no tile can bring 16 threads to 2,048 and more */
  CHECK_EQ(tsel_thread_blame(gr, 16, 2048, 4096, &tn), 0);
  tsel_graph_free(gr);
  /* written again within the range, the bounds pass */
  char *mended = gemm_tiling_graph(spec, "8 1 32 1 1", "1 1 1 1 1", "4 4 8", 4, 1024);
  *(strstr(mended, "t14 ")) = 0;
  back_to = 0;
  CHECK(eval_guard_line(&g, mended, strlen(mended), false, &back_to, &nw));
  free(mended);
  free(head);
  free(text);
  ir_func_free(f);
}

/* A conv1d of the test split with co=3 on 3 threads: its co tile (t8)
 * reaches 3 at most and its l tile (t7, 1538 = 2 x 769) has no divisor in
 * [11, 341] with co's 3 kept, so no one tile can bring the block to 32;
 * the guard blames t7 with the range that leaves t8 a way in ([11, 1024]:
 * 769 threads, or 769 x 3 for t8 to narrow next), not t8 (195 refusals of
 * one line until the guard's budget ran out). */
DG_TEST(eval_guard_blames_thread_tiles_that_can_mend_it_together) {
  const char *spec = "conv1d_nlc:n=1,l=1536,ci=48,co=3,kernel=3,stride=1,pad=2,dilation=1,groups=1,dtype=f32";
  char text[2048];
  snprintf(text, sizeof text,
           "tsel 1 kernel %s\nt1 block \"PadInput\"\nt2 block \"conv1d_nlc\"\nt3 block \"root\"\n"
           "t4 annotate t2 tiling \"SSSRRSRS\"\nt5 loops t2 x5\nt6 tile t5.0 [1 1 1 1 1] max=64\n"
           "t7 tile t5.1 [769 1 1 1 2] max=64\nt8 tile t5.2 [1 1 3 1 1] max=64\nt9 tile t5.3 [1 1 3] max=64\n"
           "t10 tile t5.4 [2 6 4] max=64\nt11 reorder t6.0 t7.0 t8.0 t6.1 t7.1 t8.1 t6.2 t7.2 t8.2 t9.0 t10.0 "
           "t9.1 t10.1 t6.3 t7.3 t8.3 t9.2 t10.2 t6.4 t7.4 t8.4\nt12 fuse_bind t6.0 t7.0 t8.0 blockIdx.x\n"
           "t13 fuse_bind t6.1 t7.1 t8.1 vthread.x\nt14 fuse_bind t6.2 t7.2 t8.2 threadIdx.x\n"
           "t15 annotate t2 tx_lo 32\nt16 annotate t2 tx_hi 1024\n",
           spec);
  dg_status st;
  dg_func *f = wl_build(spec, &st);
  CHECK_MSG(f, "%s", st.msg);
  eval_guard g = {f, spec, NULL};
  int back_to = 0;
  tsel_tile_narrowing nw = {0};
  CHECK(!eval_guard_line(&g, text, strlen(text), false, &back_to, &nw));
  CHECK_MSG(back_to == 7 && nw.factor == 2 && nw.lo == 11 && nw.hi == 1024, "t%d factor %d in [%lld, %lld]",
            back_to, nw.factor, (long long)nw.lo, (long long)nw.hi);
  tsel_graph *gr = tsel_parse(text, NULL, &st);
  CHECK_MSG(gr, "%s", st.msg);
  tsel_tile_narrowing tn;
  /* 5,000 threads and more: the tiles reach 1538 x 3 = 4,614 at most */
  CHECK_EQ(tsel_thread_blame(gr, 3, 5000, 8192, &tn), 0);
  CHECK_EQ(tsel_thread_blame(gr, 3, 4096, 8192, &tn), 7);
  CHECK(tn.lo == 1366 && tn.hi == 2730); /* t8 kept: t7 alone can (1538) */
  tsel_graph_free(gr);
  /* t7 written again with 769 threads and t8 with 1: the bounds pass */
  char *p = strstr(text, "[769 1 1 1 2]");
  CHECK(p);
  memcpy(p, "[1 1 769 1 2]", 13);
  p = strstr(text, "[1 1 3 1 1]");
  CHECK(p);
  memcpy(p, "[3 1 1 1 1]", 11);
  back_to = 0;
  CHECK(eval_guard_line(&g, text, strlen(text), false, &back_to, &nw));
  ir_func_free(f);
}

/* Shared memory far past the limit (a batch_matmul of the test split,
 * j = 197 a prime, its 197 threads in the j tile): capping the widest tile
 * (j's) to shrink the stages would leave it below its own threads, so the
 * cap goes to the next widest that keeps them (the i tile, whose thread
 * factor is 1); the guard used to cap j's tile to 1 and then refuse its
 * threads, back and forth until its budget ran out. */
DG_TEST(eval_guard_caps_a_tile_that_keeps_its_threads) {
  const char *spec = "gemm:m=176,n=197,k=96,trans_a=0,trans_b=0,dtype=f32";
  char *text = gemm_tiling_graph(spec, "1 1 1 22 8", "1 1 197 1 1", "8 12 1", 4, 1024);
  dg_status st;
  tsel_graph *gr = tsel_parse(text, NULL, &st);
  CHECK_MSG(gr, "%s", st.msg);
  int64_t inner = 0, cap = 0;
  CHECK_EQ(tsel_widest_tile(gr, &inner), 6);
  CHECK_EQ(inner, 197);
  CHECK_EQ(tsel_shared_blame(gr, 5000000, 49152, &cap), 5);
  CHECK_EQ(cap, 1);
  /* a little past the limit still: any cap on j's tile is below its 197 */
  CHECK_EQ(tsel_shared_blame(gr, 50000, 49152, &cap), 5);
  CHECK_EQ(cap, 173);
  tsel_graph_free(gr);
  free(text);
  /* where the widest tile's threads fit under its cap, it is the one */
  text = gemm_tiling_graph(spec, "1 1 1 22 8", "1 1 1 197 1", "8 12 1", 4, 1024);
  gr = tsel_parse(text, NULL, &st);
  CHECK_MSG(gr, "%s", st.msg);
  CHECK_EQ(tsel_shared_blame(gr, 50000, 49152, &cap), 6);
  CHECK_EQ(cap, 193);
  tsel_graph_free(gr);
  free(text);
}

/* On the GPU a batch measures each scheduled kernel once: outputs whose
 * kernels are equal (a prompt's samples that agree) share one candidate of
 * the round and its outcome. Runs where NVRTC is (without a GPU every
 * measurement fails with the worker's reason, the same for the equal
 * ones). */
DG_TEST(eval_score_batch_measures_a_kernel_once) {
  dg_status st;
  if (!rt_nvrtc_available(&st)) {
    SKIP("NVRTC is not here: %s", st.msg);
  }
  dg_func *gmm = wl_build(GMM, &st);
  dg_func *rsum = wl_build("reduce_sum:m=64,n=256,dtype=f32", &st);
  CHECK(gmm && rsum);
  char *good = ts_graph_of("schedules/GMM.json", GMM, gmm);
  sched *bs = NULL;
  CHECK(search_baseline_schedule(rsum, NULL, &bs, &st));
  tsel_graph *g = tsel_lift(sched_get_trace(bs), "reduce_sum:m=64,n=256,dtype=f32", rsum, NULL, &st);
  CHECK(g && good);
  char *rgraph = tsel_print(g);
  tsel_graph_free(g);
  sched_free(bs);
  search_cuda_measure m = {3, 10, 1, NULL};
  m.threads = 2;
  m.allow_no_gpu = true;
  CHECK_MSG(search_cuda_measure_init(&m, &st), "%s", st.msg);
  const eval_item items[] = {
      {good, "a", gmm, GMM, NULL},
      {rgraph, "rsum", rsum, "reduce_sum:m=64,n=256,dtype=f32", NULL},
      {good, "b", gmm, GMM, NULL},
      {good, "c", gmm, GMM, NULL},
  };
  int n = (int)DG_ARRAY_LEN(items);
  eval_score_opts o;
  memset(&o, 0, sizeof o);
  o.last = EVAL_GATE_MEASURE;
  o.gpu = &m;
  eval_score *sc = dg_calloc((size_t)n, sizeof *sc);
  int64_t before = m.stats.candidates;
  eval_score_batch(items, n, &o, 2, sc);
  if (!m.state) {
    for (int i = 0; i < n; i++) eval_score_free(&sc[i]);
    free(sc);
    free(good);
    free(rgraph);
    ir_func_free(gmm);
    ir_func_free(rsum);
    SKIP("no GPU measurement set up");
  }
  {
    CHECK_EQ(m.stats.candidates - before, 2);
    CHECK(sc[0].kernel_hash != 0 && sc[0].kernel_hash == sc[2].kernel_hash && sc[2].kernel_hash == sc[3].kernel_hash);
    for (int i = 2; i < n; i++) {
      CHECK_EQ(sc[i].failed, sc[0].failed);
      CHECK_STREQ(sc[i].reason, sc[0].reason);
      CHECK(sc[i].secs == sc[0].secs);
    }
  }
  for (int i = 0; i < n; i++) eval_score_free(&sc[i]);
  free(sc);
  search_cuda_measure_free(&m);
  free(good);
  free(rgraph);
  ir_func_free(gmm);
  ir_func_free(rsum);
}

/* The card's roofline: the ceilings by the device's name (an unknown card
 * has none), and a kernel's bound, its outputs' bytes over the bandwidth
 * or its iterations over the multiply-add rate, whichever is longer. */
DG_TEST(eval_roofline_bounds) {
  dg_status st;
  eval_roofline r;
  CHECK(eval_roofline_of("NVIDIA H200 sm_90 driver 13000", &r) && r.bytes_per_s == 4.8e12);
  CHECK(eval_roofline_of("NVIDIA H100 80GB HBM3 sm_90 driver 13000", &r) && r.bytes_per_s == 3.35e12);
  CHECK(eval_roofline_of("NVIDIA H100 PCIe sm_90", &r) && r.bytes_per_s == 2.0e12);
  CHECK(r.fma_per_s == 756.0e12 / 2);
  CHECK(!eval_roofline_of("no GPU", &r) && r.bytes_per_s == 0 && eval_roofline_secs(NULL, &r) == 0);
  CHECK(!eval_roofline_of(NULL, &r));
  dg_func *f = wl_build(GMM, &st); /* 128^3 multiply-adds, a 128x128 f32 output */
  CHECK(f);
  if (!f) return;
  /* compute-bound: the body's iterations over the rate (the init, under
   * the reduction loop, runs once an output: not counted) */
  eval_roofline slow_math = {1e12, 1e9};
  CHECK_MSG(fabs(eval_roofline_secs(f, &slow_math) - 128.0 * 128 * 128 / 1e9) < 1e-12, "%g",
            eval_roofline_secs(f, &slow_math));
  /* memory-bound: the output's bytes alone (the inputs need not all be read) */
  eval_roofline slow_memory = {1e6, 1e15};
  CHECK_MSG(fabs(eval_roofline_secs(f, &slow_memory) - 128.0 * 128 * 4 / 1e6) < 1e-12, "%g",
            eval_roofline_secs(f, &slow_memory));
  ir_func_free(f);
}

/* On the GPU a time under half the card's roofline is measured again and
 * refused if it still is (a MEASURE failure naming the roofline): with
 * ceilings a millionth of the card's every real kernel is "too fast";
 * with the card's own, the same graph passes. */
DG_TEST(gpu_eval_roofline_refuses_the_impossible) {
  dg_func *gmm;
  char *good, why[300];
  search_cuda_measure m;
  if (!ts_gmm_judging_open(true, &gmm, &good, &m, why, sizeof why)) SKIP("%s", why);
  eval_roofline card, tiny;
  CHECK_MSG(eval_roofline_of(m.device, &card), "%s: no ceilings known", m.device);
  tiny = (eval_roofline){card.bytes_per_s * 1e-6, card.fma_per_s * 1e-6};
  const eval_item items[] = {{good, "a", gmm, GMM, NULL}};
  for (int k = 0; k < 2; k++) {
    eval_score_opts o;
    memset(&o, 0, sizeof o);
    o.last = EVAL_GATE_MEASURE;
    o.gpu = &m;
    o.roofline = k == 0 ? &card : &tiny;
    eval_score sc;
    memset(&sc, 0, sizeof sc);
    int64_t before = m.stats.candidates;
    eval_score_batch(items, 1, &o, 2, &sc);
    if (k == 0) {
      CHECK_MSG(sc.failed == EVAL_PASSED && sc.secs > 0, "%s", sc.reason);
      CHECK_EQ(m.stats.candidates - before, 1);
    } else {
      CHECK_MSG(sc.failed == EVAL_GATE_MEASURE && strstr(sc.reason, "roofline"), "%s: %s",
                eval_gate_name(sc.failed), sc.reason);
      CHECK_EQ(m.stats.candidates - before, 2); /* measured again before it was refused */
    }
    eval_score_free(&sc);
  }
  search_cuda_measure_free(&m);
  free(good);
  ir_func_free(gmm);
}

/* On the GPU a batch's chosen graphs are measured again, their times the
 * medians: two more measurements each (the image cached), a time that is
 * one of the three, a graph that did not pass left as it was, and an
 * output of the same kernel not chosen given the same time. */
DG_TEST(gpu_eval_measure_again_takes_the_median) {
  dg_func *gmm;
  char *good, why[300];
  search_cuda_measure m;
  if (!ts_gmm_judging_open(true, &gmm, &good, &m, why, sizeof why)) SKIP("%s", why);
  const eval_item items[] = {
      {good, "a", gmm, GMM, NULL}, {"tsel 1 nonsense", "b", gmm, GMM, NULL}, {good, "c", gmm, GMM, NULL}};
  eval_score_opts o;
  memset(&o, 0, sizeof o);
  o.last = EVAL_GATE_MEASURE;
  o.gpu = &m;
  eval_score sc[3];
  memset(sc, 0, sizeof sc);
  eval_score_batch(items, 3, &o, 2, sc);
  CHECK_MSG(sc[0].failed == EVAL_PASSED && sc[0].secs > 0, "%s", sc[0].reason);
  CHECK(sc[1].failed != EVAL_PASSED);
  CHECK(sc[2].failed == EVAL_PASSED && sc[2].secs == sc[0].secs);
  double first = sc[0].secs;
  int64_t before = m.stats.candidates;
  const int idx[] = {0, 1};
  eval_score_measure_again(items, sc, 3, idx, 2, &o, 2);
  CHECK_EQ(m.stats.candidates - before, 2);
  CHECK_MSG(sc[0].failed == EVAL_PASSED && sc[0].secs > 0 && sc[0].secs < 1, "%s", sc[0].reason);
  printf("  first %.3f us, median of three %.3f us\n", first * 1e6, sc[0].secs * 1e6);
  CHECK(sc[1].failed != EVAL_PASSED && sc[1].secs == 0);
  CHECK(sc[2].failed == EVAL_PASSED && sc[2].secs == sc[0].secs);
  for (int i = 0; i < 3; i++) eval_score_free(&sc[i]);
  search_cuda_measure_free(&m);
  free(good);
  ir_func_free(gmm);
}
