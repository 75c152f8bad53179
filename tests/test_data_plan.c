/* test_data_plan.c: a labelling round compiled ahead (plan.c): part files
 * written and read back, damaged ones refused naming the file and the
 * byte; a plan of a small workload compiled by NVRTC (where it is), not
 * planned twice, its compilations taken by the NVRTC cache; the search
 * measuring the planned traces as its first round and no kernel twice. */
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "dragon/data.h"
#include "dragon/rt_cuda.h"
#include "dragon/sched.h"
#include "dragon/search.h"
#include "dragon/wl.h"
#include "test.h"

static const char *pdir(const char *name) {
  static char buf[4][512];
  static int k;
  char *b = buf[k++ % 4];
  snprintf(b, 512, "%s/%s", dg_test_tmpdir(), name);
  return b;
}

static const char *TRACE = "[[[\"GetBlock\",[],[\"Z\",\"main\"],[\"b0\"]],[\"EnterPostproc\",[],[],[]]],[]]";

static data_plan_entry *fake_entry(const char *wl, int n) {
  data_plan_entry *e = dg_calloc(1, sizeof *e);
  snprintf(e->workload, sizeof e->workload, "%s", wl);
  snprintf(e->arch, sizeof e->arch, "sm_90");
  snprintf(e->date, sizeof e->date, "2026-12-06T00:00:00Z");
  e->spec = dg_strdup("softmax:m=8,n=32,dtype=f32");
  e->build = dg_strdup("dragon test lower 2");
  e->n = n;
  e->cands = dg_calloc((size_t)n, sizeof *e->cands);
  for (int i = 0; i < n; i++) {
    e->cands[i].trace = dg_strdup(TRACE);
    e->cands[i].kernel_hash = 1000 + (uint64_t)i;
    char src[64];
    snprintf(src, sizeof src, "extern \"C\" __global__ void k%d() {}\n", i);
    e->cands[i].source = dg_strdup(src);
    e->cands[i].image_len = 40 + (size_t)i;
    e->cands[i].image = dg_malloc(e->cands[i].image_len);
    for (size_t b = 0; b < e->cands[i].image_len; b++) e->cands[i].image[b] = (unsigned char)(b * 7 + (size_t)i);
  }
  return e;
}

static void free_entry(data_plan_entry *e) {
  for (int i = 0; i < e->n; i++) {
    free(e->cands[i].trace);
    free(e->cands[i].source);
    free(e->cands[i].image);
  }
  free(e->cands);
  free(e->spec);
  free(e->build);
  free(e);
}

DG_TEST(data_plan_parts_round_trip_and_refuse_damage) {
  dg_status st;
  const char *dir = pdir("plan_rt");
  CHECK(dg_mkdirs(dir, &st));
  data_plan_entry *a = fake_entry("111", 3), *b = fake_entry("222", 0), *c = fake_entry("111", 1);
  const data_plan_entry *first[2] = {a, b}, *second[1] = {c};
  char p1[600], p2[600];
  snprintf(p1, sizeof p1, "%s/plan-a-0000.zst", dir);
  snprintf(p2, sizeof p2, "%s/plan-b-0000.zst", dir);
  CHECK(data_plan_write(p1, first, 2, &st));
  CHECK(data_plan_write(p2, second, 1, &st));
  data_plan *p = data_plan_load(dir, false, &st);
  CHECK_MSG(p, "%s", st.msg);
  CHECK_EQ(data_plan_count(p), 2); /* "111" of the second part: the first stands */
  const data_plan_entry *e = data_plan_find(p, "111");
  CHECK(e && e->n == 3 && strcmp(e->spec, a->spec) == 0 && strcmp(e->arch, "sm_90") == 0);
  for (int i = 0; i < 3; i++) {
    CHECK_STREQ(e->cands[i].trace, TRACE);
    CHECK_STREQ(e->cands[i].source, a->cands[i].source);
    CHECK(e->cands[i].kernel_hash == a->cands[i].kernel_hash);
    CHECK(e->cands[i].image_len == a->cands[i].image_len &&
          memcmp(e->cands[i].image, a->cands[i].image, a->cands[i].image_len) == 0);
  }
  CHECK(data_plan_find(p, "222") && data_plan_find(p, "222")->n == 0);
  CHECK(!data_plan_find(p, "333"));
  CHECK(data_plan_bytes(p) > 0);
  data_plan_free(p);

  /* the unpacked bytes, damaged: each refusal names the input and the byte */
  dg_str raw;
  dg_str_init(&raw);
  size_t zlen, len;
  char *z = dg_read_file(p1, &zlen, &st);
  char *text = dg_zstd_unpack(z, zlen, p1, 0, &len, &st);
  free(z);
  CHECK(text);
  data_plan *q = data_plan_load(pdir("plan_none"), true, &st);
  CHECK(q && data_plan_count(q) == 0);
  CHECK(data_plan_parse("whole", text, len, q, &st));
  CHECK_EQ(data_plan_count(q), 2);
  data_plan_free(q);
  q = data_plan_load(pdir("plan_none"), true, &st);
  CHECK(!data_plan_parse("cut", text, len - 3, q, &st));
  CHECK_MSG(strstr(st.msg, "cut: byte ") && strstr(st.msg, "past the end"), "%s", st.msg);
  CHECK(!data_plan_parse("short", text, 5, q, &st));
  CHECK(strstr(st.msg, "not a plan"));
  text[8] = 'Q'; /* the first item's tag */
  CHECK(!data_plan_parse("tag", text, len, q, &st));
  CHECK_MSG(strstr(st.msg, "tag: byte 8: item 'Q' where 'W' was expected"), "%s", st.msg);
  CHECK_EQ(data_plan_count(q), 0);
  data_plan_free(q);
  free(text);
  dg_str_free(&raw);
  /* a part file that is not zstd: refused naming it */
  char bad[600];
  snprintf(bad, sizeof bad, "%s/plan-c-0000.zst", dir);
  CHECK(dg_write_file_atomic(bad, "DGPLAN1\n", 8, &st));
  CHECK(!data_plan_load(dir, false, &st));
  CHECK_MSG(strstr(st.msg, "plan-c-0000.zst"), "%s", st.msg);
  CHECK(!data_plan_load(pdir("plan_missing"), false, &st));
  CHECK(strstr(st.msg, "no such plan directory"));
  free_entry(a);
  free_entry(b);
  free_entry(c);
}

/* A small workload planned: its first round compiled by NVRTC as the GPU
 * machine would, not planned again, and the cache takes its images. */
DG_TEST(data_plan_compiles_the_first_round_ahead) {
  dg_status st;
  if (!rt_nvrtc_available(&st)) {
    SKIP("NVRTC is not here: %s", st.msg);
  }
  static const char *const specs[] = {"softmax:m=8,n=32,dtype=f32",
                                      "batch_matmul:b=1,n=16,m=16,k=16,dtype=f32"};
  search_db *db;
  CHECK(search_db_open(pdir("plan_db"), &db, &st));
  data_plan_opts o;
  data_plan_opts_default(&o);
  o.db = db;
  o.specs = specs;
  o.n_specs = 2;
  o.out_dir = pdir("plan_made");
  o.trials_min = 4;
  o.population = 16;
  o.threads = 2;
  o.flush_every = 1;
  data_plan_stats s;
  CHECK_MSG(data_plan_run(&o, &s, &st), "%s", st.msg);
  CHECK_MSG(s.failed == 0, "%s", s.first_failure);
  CHECK_EQ(s.planned, 2);
  CHECK_EQ(s.files, 2);
  CHECK(s.cands >= 2 && s.bytes > 0);
  data_plan *p = data_plan_load(o.out_dir, false, &st);
  CHECK_MSG(p, "%s", st.msg);
  CHECK_EQ(data_plan_count(p), 2);
  const data_plan_entry *e = data_plan_at(p, 1);
  CHECK_STREQ(e->spec, specs[1]);
  CHECK_STREQ(e->arch, "sm_90");
  CHECK_STREQ(e->build, search_build_id());
  CHECK(e->n >= 1 && e->n <= 4);
  for (int i = 0; i < e->n; i++) {
    CHECK(strstr(e->cands[i].source, "__global__"));
    CHECK(e->cands[i].image_len > 4 && memcmp(e->cands[i].image, "\x7f" "ELF", 4) == 0);
    CHECK(e->cands[i].kernel_hash != 0);
  }
  /* the cache takes a planned image for its source: no compilation */
  rt_nvrtc_cache_clear();
  rt_cubin img = {(char *)e->cands[0].image, e->cands[0].image_len, false, "sm_90", (char *)"", 0};
  rt_nvrtc_cache_put(e->cands[0].source, "cand", "sm_90", &img);
  int64_t h0, h1;
  rt_nvrtc_cache_stats(&h0, NULL);
  rt_cubin got;
  CHECK(rt_nvrtc_compile_within(e->cands[0].source, "cand", "sm_90", 0, &got, &st));
  rt_nvrtc_cache_stats(&h1, NULL);
  CHECK_EQ(h1, h0 + 1);
  CHECK(got.size == e->cands[0].image_len && memcmp(got.image, e->cands[0].image, got.size) == 0);
  rt_cubin_free(&got);
  /* the labeller's build of each planned trace (measure_cuda.c's) takes
   * the plan's image: the same source, no compilation */
  rt_nvrtc_cache_clear();
  for (int i = 0; i < e->n; i++) {
    rt_cubin pi = {(char *)e->cands[i].image, e->cands[i].image_len, false, "sm_90", (char *)"", 0};
    rt_nvrtc_cache_put(e->cands[i].source, "cand", "sm_90", &pi);
  }
  dg_func *f = wl_build(e->spec, &st);
  CHECK(f);
  rt_nvrtc_cache_stats(&h0, NULL);
  for (int i = 0; i < e->n; i++) {
    sched_trace *t = sched_trace_from_json(e->cands[i].trace, &st);
    sched *sc = t ? sched_new(f, 0) : NULL;
    CHECK(sc && sched_replay(sc, t, false, false, &st));
    CHECK(ir_func_hash(sched_func(sc)) == e->cands[i].kernel_hash);
    rt_build_opts bo = {.target = RT_BUILD_CUDA, .arch = "sm_90", .compile_limit_s = 5,
                        .compile = true, .name = "cand"};
    rt_build b;
    CHECK_MSG(rt_program_build(sched_func(sc), &bo, &b, &st), "%s", st.msg);
    CHECK(b.bin.size == e->cands[i].image_len &&
          memcmp(b.bin.image, e->cands[i].image, b.bin.size) == 0);
    rt_build_free(&b);
    sched_free(sc);
    sched_trace_free(t);
  }
  rt_nvrtc_cache_stats(&h1, NULL);
  CHECK_EQ(h1, h0 + e->n);
  ir_func_free(f);
  rt_nvrtc_cache_clear();
  data_plan_free(p);
  /* a rerun plans nothing new */
  CHECK(data_plan_run(&o, &s, &st));
  CHECK_EQ(s.planned, 0);
  CHECK_EQ(s.already, 2);
  CHECK_EQ(s.files, 0);
  search_db_close(db);
}

/* The search measures planned traces as its first round (here on the CPU),
 * each kernel once: a rerun with the same plan measures nothing again. */
DG_TEST(search_tune_measures_the_planned_round_first) {
  dg_status st;
  const char *spec = "batch_matmul:b=1,n=16,m=16,k=16,dtype=f32";
  dg_func *f = wl_build(spec, &st);
  CHECK(f);
  /* three traces the search would draw: its own first round, probed */
  search_db *db;
  CHECK(search_db_open(pdir("planned_db"), &db, &st));
  search_space_opts so = {0};
  search_postprocs pp = {0};
  search_cpu_measure cm = {1, 10, 1, 1};
  search_tune_opts to;
  search_tune_opts_default(&to);
  to.spec = spec;
  to.f = f;
  to.max_trials = 3;
  to.space = search_space_cuda;
  to.space_ctx = &so;
  to.postproc = search_postproc_cuda;
  to.postproc_ctx = &pp;
  to.measure = search_measure_cpu;
  to.measure_ctx = &cm;
  to.target = "cpu";
  to.is_gpu = true;
  to.evolve.population_size = 16;
  to.evolve.num_trials_per_iter = 3;
  to.seed = 77;
  to.probe_only = true;
  search_tune_result res;
  CHECK_MSG(search_tune(db, &to, &res, &st), "%s", st.msg);
  CHECK_EQ(search_db_record_count(db), 0);
  search_db_close(db);
  /* the same search draws other candidates with another seed; given the
   * plan it measures the planned ones first */
  sched_trace *t[3] = {0};
  char *json[3] = {0};
  int n = 0;
  dg_rng rng;
  dg_rng_seed(&rng, 5);
  search_space sp;
  search_space_opts so2 = {0};
  CHECK(search_space_generate(f, &so2, &sp, &st));
  for (int tries = 0; n < 3 && tries < 200; tries++) {
    sched *s = search_sample(f, &sp, &pp, &rng, NULL, &st);
    if (!s) continue;
    char *j = sched_trace_to_json(sched_get_trace(s));
    bool dup = false;
    for (int k = 0; k < n; k++) dup = dup || strcmp(json[k], j) == 0;
    if (dup) {
      free(j);
    } else {
      json[n] = j;
      t[n++] = sched_trace_clone(sched_get_trace(s));
    }
    sched_free(s);
  }
  search_space_free(&sp);
  CHECK(n >= 2);
  CHECK(search_db_open(pdir("planned_db2"), &db, &st));
  to.probe_only = false;
  to.seed = 1;
  to.planned = (const char *const *)json;
  to.n_planned = n;
  to.max_trials = n;
  CHECK_MSG(search_tune(db, &to, &res, &st), "%s", st.msg);
  CHECK_EQ(res.planned, n);
  CHECK_EQ(res.rounds, 1);
  CHECK_EQ(search_db_record_count(db), n);
  for (int i = 0; i < n; i++) {
    /* the records are the planned traces, in the database's canonical form */
    bool found = false;
    sched_trace *want = sched_trace_from_json(json[i], &st);
    char *w = sched_trace_to_json(want);
    for (int r = 0; r < search_db_record_count(db) && !found; r++) {
      sched_trace *got = sched_trace_from_json(search_db_record_at(db, r)->trace, &st);
      char *g = sched_trace_to_json(got);
      found = strcmp(g, w) == 0;
      free(g);
      sched_trace_free(got);
    }
    CHECK_MSG(found, "planned trace %d not recorded", i);
    free(w);
    sched_trace_free(want);
  }
  /* again with the same plan and one more trial: nothing planned is left,
   * the search draws its own */
  to.max_trials = n + 1;
  CHECK(search_tune(db, &to, &res, &st));
  CHECK_EQ(res.planned, 0);
  CHECK_EQ(search_db_record_count(db), n + 1);
  search_db_close(db);
  for (int i = 0; i < n; i++) {
    free(json[i]);
    sched_trace_free(t[i]);
  }
  ir_func_free(f);
}
