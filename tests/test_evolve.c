/* test_evolve.c: mutators and the evolutionary search, on the hand-written
 * GMM design space (tests/data/traces/gmm0_space.json) replayed on small
 * batch matmuls, with measurement callbacks that score tile decisions by a
 * known function, and one real run of the CPU measurement. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "dragon/search.h"
#include "dragon/wl.h"
#include "test.h"

#define SMALL_GMM "batch_matmul:b=1,n=16,m=16,k=16,dtype=f32"

static sched_trace *load_space(void) {
  dg_status st;
  size_t len;
  char *text = dg_read_file(dg_test_data("traces/gmm0_space.json"), &len, &st);
  if (!text) return NULL;
  sched_trace *t = sched_trace_from_json(text, &st);
  free(text);
  return t;
}

/* A schedule of the space with decisions drawn from seed. */
static sched_trace *sample(const dg_func *f, const sched_trace *space, uint64_t seed) {
  sched *s = sched_new(f, seed);
  dg_status st;
  sched_trace *t = NULL;
  if (sched_replay(s, space, true, true, &st)) t = sched_trace_clone(sched_get_trace(s));
  sched_free(s);
  return t;
}

/* The n-th SamplePerfectTile decision of a trace (design part). */
static const sched_val *tile_decision(const sched_trace *t, int nth) {
  for (int i = 0; i < t->n; i++) {
    if (t->insts[i].kind == SCHED_INST_ENTER_POSTPROC) break;
    if (t->insts[i].kind == SCHED_INST_SAMPLE_PERFECT_TILE && nth-- == 0)
      return &t->insts[i].decision;
  }
  return NULL;
}

static int differing_decisions(const sched_trace *a, const sched_trace *b, int *which) {
  int n = 0;
  for (int i = 0; i < a->n && i < b->n; i++) {
    if (!a->insts[i].has_decision) continue;
    const sched_val *u = &a->insts[i].decision, *v = &b->insts[i].decision;
    bool same = u->kind == v->kind && u->n == v->n && u->i == v->i;
    for (int k = 0; same && k < u->n; k++) same = u->items[k].i == v->items[k].i;
    if (!same) {
      n++;
      *which = i;
    }
  }
  return n;
}

DG_TEST(evolve_mutate_tile_size_keeps_product) {
  dg_status st;
  dg_func *f = wl_build(SMALL_GMM, &st);
  CHECK_MSG(f, "%s", st.msg);
  sched_trace *space = load_space();
  CHECK(space);
  dg_rng r;
  dg_rng_seed(&r, 7);
  int tiles = 0, lanes = 0;
  for (int trial = 0; trial < 200; trial++) {
    sched_trace *t = sample(f, space, 100 + (uint64_t)trial);
    CHECK(t);
    sched_trace *m = search_mutate(SEARCH_MUT_TILE_SIZE, t, &r);
    CHECK(m);
    int which = -1;
    CHECK_EQ(differing_decisions(t, m, &which), 1);
    const sched_inst *in = &m->insts[which];
    if (in->kind == SCHED_INST_SAMPLE_PERFECT_TILE) {
      tiles++;
      int64_t p = 1, q = 1;
      for (int k = 0; k < in->decision.n; k++) p *= in->decision.items[k].i;
      for (int k = 0; k < t->insts[which].decision.n; k++) q *= t->insts[which].decision.items[k].i;
      CHECK_EQ(p, q); /* still multiplies to the loop's extent */
      CHECK(in->decision.items[in->decision.n - 1].i <= in->attrs[1].i);
    } else {
      CHECK_EQ(in->kind, SCHED_INST_SAMPLE_CATEGORICAL); /* cooperative fetch */
      lanes++;
      CHECK(in->decision.i != t->insts[which].decision.i);
      CHECK(in->decision.i >= 0 && in->decision.i < 4);
    }
    /* the mutated trace replays */
    sched *s = sched_new(f, 0);
    CHECK(sched_replay(s, m, false, true, &st));
    sched_free(s);
    sched_trace_free(m);
    sched_trace_free(t);
  }
  /* 4 tile decisions and 2 lane choices: both kinds get picked */
  CHECK(tiles > 100 && lanes > 20);
  sched_trace_free(space);
  ir_func_free(f);
}

DG_TEST(evolve_mutate_innermost_limit) {
  /* a tile whose innermost slot is at the limit never grows past it */
  dg_status st;
  dg_func *f = wl_build("batch_matmul:b=1,n=256,m=16,k=16,dtype=f32", &st);
  CHECK_MSG(f, "%s", st.msg);
  sched_trace *space = load_space();
  sched *s = sched_new(f, 1);
  /* the GMM/0 space's recorded decisions, repaired to this smaller kernel */
  CHECK(sched_replay_with(s, space, SCHED_REPLAY_REPAIR, true, &st));
  sched_trace *t = sched_trace_clone(sched_get_trace(s));
  sched_free(s);
  /* n = 256: put 64 (the max_innermost_factor) in the innermost slot */
  int idx = -1;
  for (int i = 0, k = 0; i < t->n; i++)
    if (t->insts[i].kind == SCHED_INST_SAMPLE_PERFECT_TILE && k++ == 1) idx = i;
  CHECK(idx >= 0);
  sched_val items[5] = {{.kind = SV_INT, .i = 1}, {.kind = SV_INT, .i = 2}, {.kind = SV_INT, .i = 2},
                        {.kind = SV_INT, .i = 1}, {.kind = SV_INT, .i = 64}};
  sched_val dec = {.kind = SV_ARRAY, .items = items, .n = 5};
  sched_trace *t2 = sched_trace_with_decision(t, idx, &dec, true);
  dg_rng r;
  dg_rng_seed(&r, 3);
  int checked = 0;
  for (int k = 0; k < 300; k++) {
    sched_trace *m = search_mutate(SEARCH_MUT_TILE_SIZE, t2, &r);
    CHECK(m);
    const sched_val *d = &m->insts[idx].decision;
    CHECK(d->items[4].i <= 64);
    int64_t p = 1;
    for (int j = 0; j < 5; j++) p *= d->items[j].i;
    CHECK_EQ(p, 256);
    checked++;
    sched_trace_free(m);
  }
  CHECK_EQ(checked, 300);
  sched_trace_free(t2);
  sched_trace_free(t);
  sched_trace_free(space);
  ir_func_free(f);
}

DG_TEST(evolve_mutate_unroll_changes_index) {
  dg_status st;
  dg_func *f = wl_build(SMALL_GMM, &st);
  CHECK_MSG(f, "%s", st.msg);
  sched_trace *space = load_space();
  dg_rng r;
  dg_rng_seed(&r, 11);
  sched_trace *t = sample(f, space, 5);
  CHECK(t);
  int unroll_idx = -1;
  for (int i = 0; i < t->n; i++)
    if (t->insts[i].kind == SCHED_INST_SAMPLE_CATEGORICAL && t->insts[i].attrs[0].n == 5)
      unroll_idx = i;
  CHECK(unroll_idx >= 0);
  int seen[5] = {0};
  for (int k = 0; k < 100; k++) {
    sched_trace *m = search_mutate(SEARCH_MUT_UNROLL, t, &r);
    CHECK(m);
    int which = -1;
    CHECK_EQ(differing_decisions(t, m, &which), 1);
    CHECK_EQ(which, unroll_idx);
    CHECK(m->insts[which].decision.i != t->insts[which].decision.i);
    seen[m->insts[which].decision.i]++;
    sched_trace_free(m);
  }
  int distinct = 0;
  for (int i = 0; i < 5; i++) distinct += seen[i] > 0;
  CHECK_EQ(distinct, 4); /* every other index, never the current one */
  /* no Split [None, v] bound to threadIdx.x in this space */
  CHECK(search_mutate(SEARCH_MUT_THREAD_BINDING, t, &r) == NULL);
  sched_trace_free(t);
  sched_trace_free(space);
  ir_func_free(f);
}

DG_TEST(evolve_mutate_thread_binding) {
  /* AutoBind's pattern written by hand: v = SampleCategorical, Split(l,
   * [None, v]), Bind(inner, threadIdx.x) */
  const char *json =
      "[[[\"GetBlock\",[],[\"T_add\",\"main\"],[\"b0\"]],"
      "[\"GetLoops\",[\"b0\"],[],[\"l1\",\"l2\"]],"
      "[\"Fuse\",[\"l1\",\"l2\"],[1],[\"l3\"]],"
      "[\"SampleCategorical\",[],[[32,64,128],[0.5,0.25,0.25]],[\"v4\"]],"
      "[\"Split\",[\"l3\",\"None\",\"v4\"],[1,0],[\"l5\",\"l6\"]],"
      "[\"Bind\",[\"l5\"],[\"blockIdx.x\"],[]],"
      "[\"Bind\",[\"l6\"],[\"threadIdx.x\"],[]]],[[3,0]]]";
  dg_status st;
  sched_trace *t = sched_trace_from_json(json, &st);
  CHECK_OK(st);
  dg_rng r;
  dg_rng_seed(&r, 1);
  int seen[3] = {0};
  for (int k = 0; k < 60; k++) {
    sched_trace *m = search_mutate(SEARCH_MUT_THREAD_BINDING, t, &r);
    CHECK(m);
    CHECK(m->insts[3].decision.i != 0);
    seen[m->insts[3].decision.i]++;
    sched_trace_free(m);
  }
  CHECK(seen[1] > 0 && seen[2] > 0);
  CHECK(search_mutate(SEARCH_MUT_UNROLL, t, &r) == NULL);
  sched_trace_free(t);
}

/* ---- the search on a synthetic objective ------------------------------------ */

/* Cost 1 + the distance, in log2 steps, of the tile products per level
 * (i tile x j tile: blockIdx, vthread, threadIdx, then the two inner
 * levels) from a target: cost 1 is the optimum, reached by several
 * (i, j) tile pairs, and every other schedule costs at least 3. */
static const int64_t target_prod[5] = {2, 8, 16, 4, 4};

static double synthetic_cost(const sched_trace *t) {
  const sched_val *di = tile_decision(t, 1), *dj = tile_decision(t, 2);
  if (!di || !dj) return 1e3;
  double c = 1;
  for (int k = 0; k < 5; k++)
    c += fabs(log2((double)(di->items[k].i * dj->items[k].i)) - log2((double)target_prod[k]));
  return c;
}

typedef struct {
  int calls, n;
  int64_t measured_hashes[4096];
  double costs[4096];
  int n_hashes;
} synth_ctx;

static void synth_measure(void *ctx, const dg_func *f, const search_cand *c, int n,
                          search_measure_result *out, const search_measure_sink *sink) {
  (void)sink; /* the tuner records whatever is not handed over */
  (void)f;
  synth_ctx *x = ctx;
  x->calls++;
  for (int i = 0; i < n; i++) {
    memset(&out[i], 0, sizeof out[i]);
    out[i].secs[0] = synthetic_cost(c[i].trace) * 1e-6;
    out[i].n_secs = 1;
    if (x->n_hashes < 4096) {
      x->costs[x->n_hashes] = synthetic_cost(c[i].trace);
      x->measured_hashes[x->n_hashes++] = (int64_t)c[i].hash;
    }
    x->n++;
  }
}

typedef struct {
  sched_trace *space;
} space_ctx;

static bool space_fn(void *ctx, const dg_func *f, sched_trace ***out, int *n, dg_status *st) {
  (void)f;
  (void)st;
  space_ctx *s = ctx;
  *out = dg_malloc(sizeof(sched_trace *));
  (*out)[0] = sched_trace_clone(s->space);
  *n = 1;
  return true;
}

static void small_opts(search_tune_opts *o) {
  search_tune_opts_default(o);
  o->evolve.population_size = 128;
  o->evolve.init_min_unmeasured = 32;
}

static double mean(const double *v, int n) {
  double s = 0;
  for (int i = 0; i < n; i++) s += v[i];
  return s / n;
}

DG_TEST(evolve_finds_synthetic_optimum) {
  dg_status st;
  dg_func *f = wl_build("batch_matmul:b=1,n=64,m=64,k=16,dtype=f32", &st);
  CHECK_MSG(f, "%s", st.msg);
  space_ctx sc = {load_space()};
  CHECK(sc.space);
  search_db *db;
  char dir[512];
  snprintf(dir, sizeof dir, "%s/evolve_opt", dg_test_tmpdir());
  CHECK(search_db_open(dir, &db, &st));
  search_xgb_opts xo;
  search_xgb_opts_default(&xo);
  xo.nthread = 1;
  search_cost_model *model = search_cost_model_new(&xo, 5);
  synth_ctx mc = {0};
  search_tune_opts o;
  small_opts(&o);
  o.spec = "batch_matmul:b=1,n=64,m=64,k=16,dtype=f32";
  o.f = f;
  o.max_trials = 320;
  o.space = space_fn;
  o.space_ctx = &sc;
  o.measure = synth_measure;
  o.measure_ctx = &mc;
  o.model = model;
  o.is_gpu = true;
  o.seed = 2024;
  o.progress = getenv("DRAGON_VERBOSE") ? stderr : NULL;
  search_tune_result res;
  CHECK(search_tune(db, &o, &res, &st));
  CHECK_OK(st);
  /* the optimum is cost 1 (1e-6 s) */
  CHECK_MSG(res.best_secs < 1.0000001e-6, "best %.3g after %lld trials", res.best_secs,
            (long long)res.trials);
  CHECK(res.trials <= 320);
  /* the model steers: the last round's picks are far better than the
   * first round's (random: about 8.8 on average) */
  CHECK_EQ(mc.n_hashes, 320);
  double first = mean(mc.costs, 64), last = mean(mc.costs + 256, 64);
  if (getenv("DRAGON_VERBOSE")) fprintf(stderr, "mean cost: first round %.2f, last %.2f\n", first, last);
  CHECK_MSG(last < first - 2, "mean cost: first round %.2f, last %.2f", first, last);
  /* dedup: no kernel was measured twice */
  for (int i = 0; i < mc.n_hashes; i++)
    for (int j = i + 1; j < mc.n_hashes; j++) CHECK(mc.measured_hashes[i] != mc.measured_hashes[j]);
  CHECK_EQ(search_db_record_count(db), mc.n);
  search_cost_model_free(model);
  search_db_close(db);
  sched_trace_free(sc.space);
  ir_func_free(f);
}

DG_TEST(evolve_eps_greedy_counts) {
  dg_status st;
  dg_func *f = wl_build(SMALL_GMM, &st);
  CHECK_MSG(f, "%s", st.msg);
  sched_trace *space = load_space();
  search_task task = {f, &space, 1, NULL, NULL, NULL, "g", true, {0}, 9};
  search_evolve_opts o;
  search_evolve_opts_default(&o);
  o.population_size = 128;
  o.init_min_unmeasured = 32;
  search_evolve *ev = search_evolve_new(&task, &o);
  search_cand *c = NULL;
  int n = search_evolve_generate(ev, 64, &c, &st);
  CHECK_OK(st);
  CHECK_EQ(n, 64);
  const search_evolve_stats *s = search_evolve_get_stats(ev);
  CHECK_EQ(s->n_picked_random, 3); /* floor(64 * 0.05) */
  CHECK_EQ(s->n_picked_best, 61);
  int rnd = 0;
  for (int i = 0; i < n; i++) rnd += c[i].random;
  CHECK_EQ(rnd, 3);
  /* the kernel handed out is the one that was hashed */
  for (int i = 0; i < n; i++) CHECK(ir_func_hash(c[i].func) == c[i].hash);
  /* dedup within the round and against what is measured next */
  for (int i = 0; i < n; i++)
    for (int j = i + 1; j < n; j++) CHECK(c[i].hash != c[j].hash);
  double *secs = dg_malloc(sizeof(double) * (size_t)n);
  for (int i = 0; i < n; i++) secs[i] = 1e-3;
  CHECK(search_evolve_notify(ev, c, secs, n, &st));
  search_cand *c2 = NULL;
  int n2 = search_evolve_generate(ev, 64, &c2, &st);
  CHECK(n2 > 0);
  for (int i = 0; i < n2; i++)
    for (int j = 0; j < n; j++) CHECK(c2[i].hash != c[j].hash);
  free(secs);
  search_cands_free(c, n);
  search_cands_free(c2, n2);
  search_evolve_free(ev);
  sched_trace_free(space);
  ir_func_free(f);
}

DG_TEST(evolve_tiny_space_stops_early) {
  /* a space of exactly 3 kernels (a 2-way tile of 4): the search measures
   * each once and stops after 5 empty rounds instead of looping */
  const char *json =
      "[[[\"GetBlock\",[],[\"Z\",\"main\"],[\"b0\"]],"
      "[\"GetLoops\",[\"b0\"],[],[\"l1\",\"l2\",\"l3\",\"l4\"]],"
      "[\"SamplePerfectTile\",[\"l2\"],[2,64],[\"v5\",\"v6\"]],"
      "[\"Split\",[\"l2\",\"v5\",\"v6\"],[1,0],[\"l7\",\"l8\"]]],[]]";
  dg_status st;
  dg_func *f = wl_build("batch_matmul:b=1,n=4,m=4,k=4,dtype=f32", &st);
  CHECK_MSG(f, "%s", st.msg);
  space_ctx sc = {sched_trace_from_json(json, &st)};
  CHECK(sc.space);
  char dir[512];
  snprintf(dir, sizeof dir, "%s/evolve_tiny", dg_test_tmpdir());
  search_db *db;
  CHECK(search_db_open(dir, &db, &st));
  synth_ctx mc = {0};
  search_tune_opts o;
  small_opts(&o);
  o.evolve.population_size = 16;
  o.evolve.init_min_unmeasured = 4;
  o.spec = "tiny";
  o.f = f;
  o.max_trials = 1000;
  o.space = space_fn;
  o.space_ctx = &sc;
  o.measure = synth_measure;
  o.measure_ctx = &mc;
  search_tune_result res;
  CHECK(search_tune(db, &o, &res, &st));
  CHECK_EQ(res.trials, 3);
  CHECK_EQ(mc.n, 3);
  CHECK(res.rounds >= 6); /* at least one round with picks, then 5 empty ones */
  for (int i = 0; i < mc.n_hashes; i++)
    for (int j = i + 1; j < mc.n_hashes; j++) CHECK(mc.measured_hashes[i] != mc.measured_hashes[j]);
  search_db_close(db);
  sched_trace_free(sc.space);
  ir_func_free(f);
}

DG_TEST(evolve_cpu_measurement_runs) {
  /* the real thing on a tiny workload: compiled C, checked, timed */
  dg_status st;
  dg_func *f = wl_build("batch_matmul:b=1,n=8,m=8,k=8,dtype=f32", &st);
  CHECK_MSG(f, "%s", st.msg);
  space_ctx sc = {load_space()};
  char dir[512];
  snprintf(dir, sizeof dir, "%s/evolve_cpu", dg_test_tmpdir());
  search_db *db;
  CHECK(search_db_open(dir, &db, &st));
  search_cpu_measure cm = {2, 10, 1};
  search_tune_opts o;
  small_opts(&o);
  o.evolve.population_size = 32;
  o.evolve.init_min_unmeasured = 8;
  o.evolve.num_trials_per_iter = 4;
  o.spec = "batch_matmul:b=1,n=8,m=8,k=8,dtype=f32";
  o.f = f;
  o.max_trials = 4;
  o.space = space_fn;
  o.space_ctx = &sc;
  o.measure = search_measure_cpu;
  o.measure_ctx = &cm;
  search_tune_result res;
  CHECK(search_tune(db, &o, &res, &st));
  CHECK_OK(st);
  CHECK_EQ(res.trials, 4);
  for (int i = 0; i < search_db_record_count(db); i++) {
    const search_record *r = search_db_record_at(db, i);
    CHECK_MSG(r->n_secs == 2 && r->error == NULL, "record %d: %s", i, r->error ? r->error : "");
    CHECK(r->run_secs[0] > 0 && r->run_secs[0] < 1);
  }
  CHECK(res.best_secs < 1);
  search_db_close(db);
  sched_trace_free(sc.space);
  ir_func_free(f);
}

DG_TEST(evolve_cli_tune_resume) {
  /* dragon tune with the CUDA design space, measured as C on the CPU; a
   * rerun resumes; dragon db best reads the result */
  char dir[512], args[1024];
  snprintf(dir, sizeof dir, "%s/evolve_cli", dg_test_tmpdir());
  const char *spec = "batch_matmul:b=1,n=8,m=8,k=8,dtype=f32";
  snprintf(args, sizeof args, "tune %s --trials 4 --per-round 2 --population 16 --db %s --quiet",
           spec, dir);
  char *out = NULL;
  int rc = dg_test_run_dragon(args, NULL, &out);
  CHECK_MSG(rc == 0, "%s", out ? out : "");
  CHECK_MSG(strstr(out, "trials 4 (4 new)"), "%s", out);
  free(out);
  snprintf(args, sizeof args, "tune %s --trials 6 --per-round 2 --population 16 --db %s --quiet",
           spec, dir);
  rc = dg_test_run_dragon(args, NULL, &out);
  CHECK_MSG(rc == 0, "%s", out ? out : "");
  CHECK_MSG(strstr(out, "trials 6 (2 new)"), "%s", out);
  free(out);
  snprintf(args, sizeof args, "db best %s --db %s", spec, dir);
  rc = dg_test_run_dragon(args, NULL, &out);
  CHECK_MSG(rc == 0, "%s", out ? out : "");
  CHECK_MSG(strstr(out, "best ") && strstr(out, "[[[\"GetBlock\""), "%s", out);
  free(out);
  snprintf(args, sizeof args, "tune %s --db %s --target cuda", spec, dir);
  rc = dg_test_run_dragon(args, NULL, &out);
  /* on a machine without a GPU the cuda target says so and stops */
  CHECK_EQ(rc, 1);
  CHECK_MSG(strstr(out, "dragon tune: ") && (strstr(out, "cuda") || strstr(out, "nvrtc")), "%s", out);
  free(out);
}
