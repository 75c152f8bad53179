/* test_sched.c: the schedule core: handles, the lookups, loop kinds,
 * annotations, sampling (distributions, decisions, TVM's tile repair), the
 * trace (Simplified, WithDecision) and TVM's trace JSON. */
#include <dirent.h>
#include <stdlib.h>

#include "dragon/sched.h"
#include "dragon/wl.h"
#include "test.h"

/* matmul 16x16x16 under a root block:
 *   for i, j, k: block C(vi S, vj S, vk R) { init C = 0; C += A*B }
 * followed by a second block D = C + 1 (an elementwise consumer). */
static dg_func *matmul_kernel(void) {
  dg_func *f = ir_func_new("main");
  int64_t sh[2] = {16, 16};
  dg_buffer *A = ir_buffer_new(f, "A", DG_F32, 2, sh, DG_SCOPE_GLOBAL);
  dg_buffer *B = ir_buffer_new(f, "B", DG_F32, 2, sh, DG_SCOPE_GLOBAL);
  dg_buffer *C = ir_buffer_new(f, "C", DG_F32, 2, sh, DG_SCOPE_GLOBAL);
  dg_buffer *D = ir_buffer_new(f, "D", DG_F32, 2, sh, DG_SCOPE_GLOBAL);
  ir_func_add_param(f, A);
  ir_func_add_param(f, B);
  ir_func_add_param(f, D);
  dg_var *i = ir_var_new(f, "i", DG_I32), *j = ir_var_new(f, "j", DG_I32),
         *k = ir_var_new(f, "k", DG_I32);
  dg_var *vi = ir_var_new(f, "vi", DG_I32), *vj = ir_var_new(f, "vj", DG_I32),
         *vk = ir_var_new(f, "vk", DG_I32);
  dg_block *bc = ir_block_new(f, "C");
  ir_block_add_iter(f, bc, vi, 16, DG_ITER_SPATIAL, ir_var(f, i));
  ir_block_add_iter(f, bc, vj, 16, DG_ITER_SPATIAL, ir_var(f, j));
  ir_block_add_iter(f, bc, vk, 16, DG_ITER_REDUCE, ir_var(f, k));
  dg_expr *ik[2] = {ir_var(f, vi), ir_var(f, vk)}, *kj[2] = {ir_var(f, vk), ir_var(f, vj)},
          *ij[2] = {ir_var(f, vi), ir_var(f, vj)};
  ir_block_add_read(f, bc, A, ik, NULL);
  ir_block_add_read(f, bc, B, kj, NULL);
  ir_block_add_write(f, bc, C, ij, NULL);
  bc->init = ir_store(f, C, ij, 2, ir_float(f, 0, DG_F32));
  bc->body = ir_store(f, C, ij, 2,
                      ir_add(f, ir_load(f, C, ij, 2),
                             ir_mul(f, ir_load(f, A, ik, 2), ir_load(f, B, kj, 2))));
  dg_stmt *nest = ir_for(f, i, 16, DG_LOOP_SERIAL, DG_TAG_NONE,
                         ir_for(f, j, 16, DG_LOOP_SERIAL, DG_TAG_NONE,
                                ir_for(f, k, 16, DG_LOOP_SERIAL, DG_TAG_NONE, ir_block_stmt(f, bc))));
  dg_var *i2 = ir_var_new(f, "i_1", DG_I32), *j2 = ir_var_new(f, "j_1", DG_I32);
  dg_var *ui = ir_var_new(f, "ui", DG_I32), *uj = ir_var_new(f, "uj", DG_I32);
  dg_block *bd = ir_block_new(f, "D");
  ir_block_add_iter(f, bd, ui, 16, DG_ITER_SPATIAL, ir_var(f, i2));
  ir_block_add_iter(f, bd, uj, 16, DG_ITER_SPATIAL, ir_var(f, j2));
  dg_expr *uij[2] = {ir_var(f, ui), ir_var(f, uj)};
  ir_block_add_read(f, bd, C, uij, NULL);
  ir_block_add_write(f, bd, D, uij, NULL);
  bd->body = ir_store(f, D, uij, 2, ir_add(f, ir_load(f, C, uij, 2), ir_float(f, 1, DG_F32)));
  dg_stmt *nest2 = ir_for(f, i2, 16, DG_LOOP_SERIAL, DG_TAG_NONE,
                          ir_for(f, j2, 16, DG_LOOP_SERIAL, DG_TAG_NONE, ir_block_stmt(f, bd)));
  dg_block *root = ir_block_new(f, "root");
  ir_block_add_alloc(f, root, C);
  dg_stmt *both[2] = {nest, nest2};
  root->body = ir_seq(f, both, 2);
  f->body = ir_block_stmt(f, root);
  return f;
}

DG_TEST(sched_lookups) {
  dg_func *f = matmul_kernel();
  sched *s = sched_new(f, 1);
  ir_func_free(f);
  dg_status st;
  int b = sched_get_block(s, "C", "main", &st);
  CHECK_OK(st);
  CHECK(b == 0);
  int loops[8];
  CHECK_EQ(sched_get_loops(s, b, loops, 8, &st), 3);
  CHECK(loops[0] == 1 && loops[2] == 3);
  int d = sched_get_block(s, "D", "main", &st);
  int out[8];
  CHECK_EQ(sched_get_consumers(s, b, out, 8, &st), 1);
  CHECK(out[0] != d); /* a new handle to the same block */
  CHECK_EQ(sched_get_producers(s, d, out, 8, &st), 1);
  CHECK_EQ(sched_get_producers(s, b, out, 8, &st), 0);
  int root = sched_get_block(s, "root", "main", &st);
  CHECK_EQ(sched_get_child_blocks(s, root, out, 8, &st), 2);
  CHECK_EQ(sched_get_child_blocks(s, loops[0], out, 8, &st), 1);
  /* errors name what is wrong */
  CHECK(sched_get_block(s, "nope", "main", &st) < 0);
  CHECK_ERR(st, "GetBlock: no block named 'nope'");
  CHECK(sched_get_block(s, "C", "other", &st) < 0);
  CHECK_ERR(st, "no function 'other'");
  CHECK(sched_get_loops(s, loops[0], out, 8, &st) < 0);
  CHECK_ERR(st, "is a loop handle, expected a block");
  CHECK_STREQ(sched_error_brief(s), "GetLoops: block");
  sched_free(s);
}

DG_TEST(sched_loop_kinds) {
  dg_func *f = matmul_kernel();
  sched *s = sched_new(f, 1);
  ir_func_free(f);
  dg_status st;
  int b = sched_get_block(s, "C", NULL, &st);
  int l[3];
  sched_get_loops(s, b, l, 3, &st);
  CHECK(sched_parallel(s, l[0], &st));
  CHECK(sched_bind(s, l[1], DG_TAG_THREAD_X, &st));
  CHECK(!sched_vectorize(s, l[2], &st));
  CHECK_ERR(st, "Vectorize: loop k cannot be vectorized: block C binds it to reduction variable vk");
  CHECK(!sched_bind(s, l[2], DG_TAG_BLOCK_X, &st));
  CHECK_ERR(st, "reduction variable vk");
  CHECK(sched_bind(s, l[2], DG_TAG_THREAD_Y, &st)); /* cross-thread reduction */
  CHECK(sched_unroll(s, l[2], &st));
  dg_func *g = sched_func(s);
  dg_stmt *outer = ir_func_root(g)->body->stmts[0];
  CHECK(outer->loop_kind == DG_LOOP_PARALLEL);
  CHECK(outer->body->loop_kind == DG_LOOP_THREAD && outer->body->tag == DG_TAG_THREAD_X);
  CHECK(outer->body->body->loop_kind == DG_LOOP_UNROLLED);
  sched_free(s);
}

DG_TEST(sched_annotate) {
  dg_func *f = matmul_kernel();
  sched *s = sched_new(f, 1);
  ir_func_free(f);
  dg_status st;
  int b = sched_get_block(s, "C", NULL, &st);
  sched_val v = {.kind = SV_STR, .s = "SSSRRSRS"};
  CHECK(sched_annotate(s, b, "meta_schedule.tiling_structure", &v, &st));
  int64_t cands[4] = {1, 2, 3, 4};
  double probs[4] = {0.25, 0.25, 0.25, 0.25};
  int64_t dec = 2;
  int x = sched_sample_categorical(s, cands, probs, 4, &dec, &st);
  CHECK(x >= 0);
  sched_val rv = {.kind = SV_RV, .i = x};
  CHECK(sched_annotate(s, b, "meta_schedule.cooperative_fetch", &rv, &st));
  dg_block *blk = ir_find_block(sched_func(s), "C");
  const dg_ann *a = ir_anns_get(&blk->anns, "meta_schedule.cooperative_fetch");
  CHECK(a && a->kind == DG_ANN_INT && a->i == 3);
  CHECK(blk->anns.n == 2);
  CHECK(sched_unannotate(s, b, "meta_schedule.cooperative_fetch", &st));
  CHECK(!sched_unannotate(s, b, "meta_schedule.cooperative_fetch", &st));
  CHECK_ERR(st, "C has no annotation 'meta_schedule.cooperative_fetch'");
  sched_free(s);
}

static int64_t prod(const int64_t *v, int n) {
  int64_t p = 1;
  for (int i = 0; i < n; i++) p *= v[i];
  return p;
}

DG_TEST(sched_sample_perfect_tile) {
  dg_func *f = matmul_kernel();
  sched *s = sched_new(f, 42);
  ir_func_free(f);
  dg_status st;
  int b = sched_get_block(s, "C", NULL, &st);
  int l[3];
  sched_get_loops(s, b, l, 3, &st);
  int seen_inner[17] = {0};
  for (int t = 0; t < 400; t++) {
    int o[5];
    CHECK_EQ(sched_sample_perfect_tile(s, l[0], 5, 4, NULL, o, &st), 5);
    int64_t v[5];
    for (int i = 0; i < 5; i++) CHECK(sched_rv_value(s, o[i], &v[i]));
    CHECK_EQ(prod(v, 5), 16);
    CHECK(v[4] <= 4);
    seen_inner[v[4]]++;
  }
  CHECK(seen_inner[1] > 0 && seen_inner[2] > 0 && seen_inner[4] > 0);
  CHECK(seen_inner[8] == 0 && seen_inner[16] == 0);
  /* a recorded decision is taken as is */
  int64_t dec[3] = {2, 4, 2};
  int o[3];
  CHECK_EQ(sched_sample_perfect_tile(s, l[1], 3, 64, dec, o, &st), 3);
  int64_t x;
  CHECK(sched_rv_value(s, o[1], &x) && x == 4);
  /* a stale one is repaired innermost first: extent 16, [1, 32, 1, 2, 2]
   * -> len 16: 2 | 16 -> 8; 2 | 8 -> 4; 1 -> 4; 32 does not divide 4 -> 4, len 1;
   * slot 0 takes 1: [1, 4, 1, 2, 2] */
  int64_t stale[5] = {1, 32, 1, 2, 2};
  int o5[5];
  CHECK_EQ(sched_sample_perfect_tile(s, l[2], 5, 64, stale, o5, &st), 5);
  int64_t want[5] = {1, 4, 1, 2, 2};
  for (int i = 0; i < 5; i++) CHECK(sched_rv_value(s, o5[i], &x) && x == want[i]);
  const sched_trace *t = sched_get_trace(s);
  const sched_inst *last = &t->insts[t->n - 1];
  CHECK(last->has_decision && last->decision.n == 5 && last->decision.items[1].i == 4);
  /* bad decisions */
  int64_t bad[3] = {0, 4, 4};
  CHECK(sched_sample_perfect_tile(s, l[2], 3, 64, bad, o5, &st) < 0);
  CHECK_ERR(st, "decision entry 0 must be a positive integer");
  sched_free(s);
}

DG_TEST(sched_sample_categorical_distribution) {
  dg_func *f = matmul_kernel();
  sched *s = sched_new(f, 3);
  ir_func_free(f);
  dg_status st;
  int64_t c[3] = {10, 20, 30};
  double p[3] = {0.0, 0.25, 0.75};
  int hist[3] = {0};
  for (int t = 0; t < 2000; t++) {
    int v = sched_sample_categorical(s, c, p, 3, NULL, &st);
    int64_t x;
    CHECK(sched_rv_value(s, v, &x));
    hist[x / 10 - 1]++;
  }
  CHECK(hist[0] == 0);
  CHECK(hist[2] > 2 * hist[1]);
  int64_t bad = 3;
  CHECK(sched_sample_categorical(s, c, p, 3, &bad, &st) < 0);
  CHECK_ERR(st, "decision must be an index in [0, 3)");
  sched_free(s);
}

DG_TEST(sched_trace_json_fixtures) {
  /* TVM's own test fixtures (test_tir_schedule_trace.py), compacted */
  const char *fx[] = {
      "[[[\"GetBlock\",[],[\"block\",\"main\"],[\"b0\"]],[\"GetLoops\",[\"b0\"],[],[\"l1\",\"l2\"]]],[]]",
      "[[[\"SampleCategorical\",[],[[3],[1]],[\"v0\"]]],[]]",
      "[[[\"GetBlock\",[],[\"Z\",\"main\"],[\"b0\"]],[\"Annotate\",[\"b0\",\"\\\"SSSRRSRS\\\"\"],"
      "[\"meta_schedule.tiling_structure\"],[]],[\"GetLoops\",[\"b0\"],[],[\"l1\",\"l2\"]],"
      "[\"SamplePerfectTile\",[\"l1\"],[5,64],[\"v3\",\"v4\",\"v5\",\"v6\",\"v7\"]],"
      "[\"Split\",[\"l1\",\"None\",\"v4\",\"v5\",\"v6\",\"v7\"],[1,0],[\"l8\",\"l9\",\"l10\",\"l11\",\"l12\"]],"
      "[\"SampleCategorical\",[],[[0,16,64,512,1024],[0.2,0.2,0.2,0.2,0.2]],[\"v13\"]],"
      "[\"Tensorize\",[\"b0\"],[\"dp4a\",true],[]],[\"EnterPostproc\",[],[],[]]],"
      "[[3,[1,32,1,2,2]],[5,4]]]",
  };
  for (size_t i = 0; i < DG_ARRAY_LEN(fx); i++) {
    dg_status st;
    sched_trace *t = sched_trace_from_json(fx[i], &st);
    CHECK_OK(st);
    char *back = sched_trace_to_json(t);
    CHECK_STREQ(back, fx[i]);
    free(back);
    sched_trace_free(t);
  }
  /* names are renumbered serially on the way in */
  dg_status st;
  sched_trace *t = sched_trace_from_json(
      "[[[\"GetBlock\",[],[\"C\",\"main\"],[\"b7\"]],[\"GetLoops\",[\"b7\"],[],[\"l3\",\"l9\"]]],[]]", &st);
  CHECK_OK(st);
  char *back = sched_trace_to_json(t);
  CHECK_STREQ(back, "[[[\"GetBlock\",[],[\"C\",\"main\"],[\"b0\"]],[\"GetLoops\",[\"b0\"],[],[\"l1\",\"l2\"]]],[]]");
  free(back);
  sched_trace_free(t);
}

DG_TEST(sched_trace_json_errors) {
  struct {
    const char *json, *err;
  } cases[] = {
      {"[[", "trace JSON:1:"},
      {"{}", "expected [instructions, decisions]"},
      {"[[[\"GetLoops\",[\"b0\"],[],[\"l1\"]]],[]]", "instruction 0 (GetLoops): input 0: 'b0' is not a handle defined earlier"},
      {"[[[\"GetBlock\",[],[\"C\",\"main\"]]],[]]", "instruction 0 (GetBlock): expected [kind, inputs, attrs, outputs]"},
      {"[[[\"GetBlock\",[],[\"C\",\"main\"],[\"b0\"]]],[[5,1]]]", "decision 0: instruction index 5 out of range"},
      {"[[[\"GetBlock\",[],[\"C\",\"main\"],[\"b0\"]]],[[0,1]]]", "(GetBlock) takes no decision"},
      {"[[[\"GetBlock\",[],[\"C\",\"main\"],[\"x0\"]]],[]]", "must start with b, l or v"},
      {"[[[\"GetBlock\",[],[\"C\",\"main\"],[\"b0\"]],[\"GetBlock\",[],[\"C\",\"main\"],[\"b0\"]]],[]]", "defined twice"},
      {"[[[\"Annotate\",[{}],[\"k\"],[]]],[]]", "objects are not supported"},
  };
  for (size_t i = 0; i < DG_ARRAY_LEN(cases); i++) {
    dg_status st;
    dg_status_ok(&st);
    sched_trace *t = sched_trace_from_json(cases[i].json, &st);
    CHECK(!t);
    CHECK_ERR(st, cases[i].err);
  }
}

DG_TEST(sched_replay_and_simplify) {
  dg_func *f = matmul_kernel();
  sched *s = sched_new(f, 5);
  dg_status st;
  int b = sched_get_block(s, "C", NULL, &st);
  int l[3];
  sched_get_loops(s, b, l, 3, &st);
  int o[2];
  sched_sample_perfect_tile(s, l[0], 2, 4, NULL, o, &st);      /* dead: pure, unused */
  int64_t cands[2] = {0, 16};
  double probs[2] = {0.5, 0.5};
  int u = sched_sample_categorical(s, cands, probs, 2, NULL, &st);
  sched_val uv = {.kind = SV_RV, .i = u};
  int root = sched_get_block(s, "root", NULL, &st);
  CHECK(sched_annotate(s, root, "meta_schedule.unroll_explicit", &uv, &st));
  CHECK(sched_bind(s, l[1], DG_TAG_THREAD_X, &st));
  CHECK(sched_enter_postproc(s, &st));
  CHECK(sched_unroll(s, l[2], &st));
  CHECK_OK(st);
  const sched_trace *t = sched_get_trace(s);
  CHECK_EQ(t->n, 9);
  /* JSON round trip, then replay on a fresh schedule gives the same kernel */
  char *js = sched_trace_to_json(t);
  sched_trace *t2 = sched_trace_from_json(js, &st);
  CHECK_OK(st);
  CHECK(sched_trace_equal(t, t2));
  sched *s2 = sched_new(f, 999);
  CHECK(sched_replay(s2, t2, false, false, &st));
  CHECK_OK(st);
  CHECK(ir_func_equal(sched_func(s), sched_func(s2)));
  char *js2 = sched_trace_to_json(sched_get_trace(s2));
  CHECK_STREQ(js2, js);
  /* Simplified drops the unused tile sample and cuts the postproc part */
  sched_trace *simp = sched_trace_simplified(t, true);
  CHECK_EQ(simp->n, 6);
  CHECK(simp->insts[2].kind == SCHED_INST_SAMPLE_CATEGORICAL);
  /* WithDecision swaps one decision */
  sched_val d1 = {.kind = SV_INT, .i = 1};
  sched_trace *wd = sched_trace_with_decision(simp, 2, &d1, true);
  sched *s3 = sched_new(f, 1);
  CHECK(sched_replay(s3, wd, false, true, &st));
  const dg_ann *a = ir_anns_get(&ir_func_root(sched_func(s3))->anns, "meta_schedule.unroll_explicit");
  CHECK(a && a->i == 16);
  /* replay errors name the instruction */
  sched_trace *bad = sched_trace_from_json(
      "[[[\"GetBlock\",[],[\"C\",\"main\"],[\"b0\"]],[\"GetLoops\",[\"b0\"],[],[\"l1\",\"l2\",\"l3\"]],"
      "[\"Vectorize\",[\"l3\"],[],[]]],[]]", &st);
  CHECK_OK(st);
  sched *s4 = sched_new(f, 1);
  CHECK(!sched_replay(s4, bad, false, false, &st));
  CHECK_ERR(st, "instruction 2: Vectorize: loop k cannot be vectorized");
  free(js);
  free(js2);
  sched_trace_free(t2);
  sched_trace_free(simp);
  sched_trace_free(wd);
  sched_trace_free(bad);
  sched_free(s);
  sched_free(s2);
  sched_free(s3);
  sched_free(s4);
  ir_func_free(f);
}

/* The inputs kept by the trace JSON fuzzer (tests/fuzz/trace_json/): each
 * is refused with a message, or round-trips and replays (or is refused by
 * replay with a message) without a crash, as fuzz/fuzz_trace_json.c checks. */
DG_TEST(sched_trace_json_fuzz_regressions) {
  DIR *d = opendir("tests/fuzz/trace_json");
  CHECK(d);
  dg_status st;
  dg_func *k = wl_build("batch_matmul:b=1,n=16,m=16,k=16,dtype=f32", &st);
  CHECK(k);
  int n = 0;
  struct dirent *e;
  while ((e = readdir(d))) {
    if (e->d_name[0] == '.') continue;
    char path[512];
    snprintf(path, sizeof path, "tests/fuzz/trace_json/%s", e->d_name);
    char *text = dg_read_file(path, NULL, &st);
    CHECK(text);
    sched_trace *t = sched_trace_from_json(text, &st);
    if (!t) {
      CHECK_MSG(st.msg[0] != 0, "%s: refused without a message", path);
    } else {
      char *js = sched_trace_to_json(t);
      sched_trace *t2 = sched_trace_from_json(js, &st);
      CHECK_MSG(t2 && sched_trace_equal(t, t2), "%s: JSON round trip", path);
      sched *s = sched_new(k, 1);
      if (!sched_replay(s, t, false, false, &st)) CHECK(st.msg[0] != 0);
      sched_free(s);
      sched_trace_free(t2);
      free(js);
      sched_trace_free(t);
    }
    free(text);
    n++;
  }
  closedir(d);
  ir_func_free(k);
  CHECK(n >= 2);
}
