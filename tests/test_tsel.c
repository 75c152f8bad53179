/* test_tsel.c: TSEL's four guarantees and its checker.
 *  - lossless: lower(lift(T)) == T (canonical JSON, byte for byte) for
 *    thousands of random traces of small workloads of every family, the
 *    hand-written MetaSchedule-shaped traces and unknown instruction kinds;
 *  - canonical: lift(lower(G)) == G and print(parse(G)) == G;
 *  - typed: every broken graph in tests/data/tsel/broken/ is rejected with
 *    exactly the message in its .err file, every graph in valid/ accepted;
 *    tensor intrinsic names registered ones;
 *  - total: unknown kinds become raw edits and come back unchanged.
 * Also explanations (values known in advance for the GMM design trace),
 * records, the Python form, the CLI and the saved fuzzer inputs. */
#include <dirent.h>
#include <stdlib.h>
#include <string.h>

#include "dragon/intrin.h"
#include "dragon/rt.h"
#include "dragon/search.h"
#include "dragon/tsel.h"
#include "dragon/wl.h"
#include "test.h"

static char *read_data(const char *name) {
  dg_status st;
  return dg_read_file(dg_test_data(name), NULL, &st);
}

/* lift -> print -> parse -> print, lower, lift again; false with a reason. */
static bool roundtrip(const sched_trace *t, const char *spec, const dg_func *kernel, char *why, size_t n) {
  dg_status st;
  bool ok = false;
  char *js = sched_trace_to_json(t), *text = NULL, *text2 = NULL, *js2 = NULL, *text3 = NULL;
  tsel_graph *g = NULL, *g2 = NULL, *g3 = NULL;
  sched_trace *t2 = NULL;
  if (!(g = tsel_lift(t, spec, kernel, NULL, &st))) {
    snprintf(why, n, "lift: %s", st.msg);
    goto done;
  }
  text = tsel_print(g);
  if (!(g2 = tsel_parse(text, "lifted", &st))) {
    snprintf(why, n, "parse of lifted text: %s\n%s", st.msg, text);
    goto done;
  }
  text2 = tsel_print(g2);
  if (strcmp(text, text2) != 0) {
    snprintf(why, n, "print(parse(G)) != G:\n%s\n---\n%s", text, text2);
    goto done;
  }
  if (!(t2 = tsel_lower(g2, &st))) {
    snprintf(why, n, "lower: %s\n%s", st.msg, text);
    goto done;
  }
  js2 = sched_trace_to_json(t2);
  if (strcmp(js, js2) != 0) {
    snprintf(why, n, "lower(lift(T)) != T:\n%s\n---\n%s\n---\n%s", js, js2, text);
    goto done;
  }
  if (!(g3 = tsel_lift(t2, spec, kernel, NULL, &st))) {
    snprintf(why, n, "lift of lowered: %s", st.msg);
    goto done;
  }
  text3 = tsel_print(g3);
  if (strcmp(text, text3) != 0) {
    snprintf(why, n, "lift(lower(G)) != G:\n%s\n---\n%s", text, text3);
    goto done;
  }
  if (kernel && !tsel_check(g2, kernel, TSEL_TARGET_CUDA, &st)) {
    snprintf(why, n, "the checker rejects a valid trace: %s\n%s", st.msg, text);
    goto done;
  }
  ok = true;
done:
  free(js);
  free(js2);
  free(text);
  free(text2);
  free(text3);
  tsel_graph_free(g);
  tsel_graph_free(g2);
  tsel_graph_free(g3);
  sched_trace_free(t2);
  return ok;
}

typedef struct {
  char *v[64];
  int n;
} specs;

static void add_spec(const char *s, void *ctx) {
  specs *p = ctx;
  if (p->n < 64) p->v[p->n++] = dg_strdup(s);
}

/* Random traces of small workloads of every family: per family a few
 * specs, per spec `per` schedules; with_kernel every `every`-th. */
static void random_roundtrips(int per, int every, int *count, int *explained) {
  int nfam = wl_family_count();
  dg_status st;
  char why[4096];
  for (int fam = 0; fam < nfam; fam++) {
    specs all = {.n = 0}, small = {.n = 0};
    wl_generate(77 + (uint64_t)fam, 24, wl_family_name(fam), add_spec, &all, &st);
    add_spec(wl_family_example(fam), &all);
    for (int i = 0; i < all.n; i++) {
      dg_func *f = wl_build(all.v[i], &st);
      if (f && rt_kernel_iterations(f) <= (1 << 14) && small.n < 3) add_spec(all.v[i], &small);
      ir_func_free(f);
      free(all.v[i]);
    }
    for (int i = 0; i < small.n; i++) {
      dg_func *f = wl_build(small.v[i], &st);
      CHECK_MSG(f, "%s: %s", small.v[i], st.msg);
      for (int k = 0; k < per; k++) {
        uint64_t seed = (uint64_t)(fam * 1000 + i * 100 + k + 1);
        sched *s = sched_new(f, seed);
        dg_rng r;
        dg_rng_seed(&r, seed);
        sched_random_steps(s, &r, 6 + k % 20);
        bool with_kernel = k % every == 0;
        bool ok = roundtrip(sched_get_trace(s), small.v[i], with_kernel ? f : NULL, why, sizeof why);
        sched_free(s);
        CHECK_MSG(ok, "%s seed %llu: %s", small.v[i], (unsigned long long)seed, why);
        (*count)++;
        *explained += with_kernel;
      }
      ir_func_free(f);
    }
    for (int i = 0; i < small.n; i++) free(small.v[i]);
  }
}

DG_TEST(tsel_roundtrip_random) {
  int count = 0, explained = 0;
  random_roundtrips(100, 8, &count, &explained);
  CHECK_MSG(count >= 2000, "only %d traces", count);
  CHECK(explained >= 250);
}

static sched_trace *load_trace(const char *name) {
  char *js = read_data(name);
  if (!js) return NULL;
  dg_status st;
  sched_trace *t = sched_trace_from_json(js, &st);
  free(js);
  return t;
}

DG_TEST(tsel_roundtrip_hand_traces) {
  dg_status st;
  dg_func *f = wl_build("GMM/0", &st);
  CHECK(f);
  /* every GMM/0 trace kept in tests/data/traces, and ours */
  char names[16][300];
  int n = 0;
  snprintf(names[n++], sizeof names[0], "tsel/gmm0_design.json");
  DIR *d = opendir("tests/data/traces");
  CHECK(d);
  for (struct dirent *e; (e = readdir(d)) && n < 16;)
    if (strncmp(e->d_name, "gmm0_", 5) == 0 && strstr(e->d_name, ".json"))
      snprintf(names[n++], sizeof names[0], "traces/%.200s", e->d_name);
  closedir(d);
  CHECK(n >= 2);
  char why[4096];
  for (int i = 0; i < n; i++) {
    sched_trace *t = load_trace(names[i]);
    CHECK_MSG(t, "cannot read %s", names[i]);
    bool ok = roundtrip(t, "batch_matmul:b=1,n=128,m=128,k=128,dtype=f32", f, why, sizeof why);
    bool ok2 = ok && roundtrip(t, "GMM/0", NULL, why, sizeof why);
    sched_trace_free(t);
    CHECK_MSG(ok && ok2, "%s: %s", names[i], why);
  }
  /* the design trace lifts to exactly the reviewed text (folds, aliases,
   * explanations with the numbers worked out by hand: 16 blocks of 128
   * threads, X and Y tiles of 32x8 and 8x32 f32 = 1 KiB each, 2x4 outputs
   * per thread in registers) */
  sched_trace *t = load_trace("tsel/gmm0_design.json");
  CHECK(t);
  tsel_graph *g = tsel_lift(t, "batch_matmul:b=1,n=128,m=128,k=128,dtype=f32", f, NULL, &st);
  CHECK_OK(st);
  char *text = tsel_print(g), *want = read_data("tsel/valid/gmm0_design.tsel");
  CHECK_STREQ(text, want);
  CHECK(strstr(text, "t15 cache_write_at t1 0 local t12\n"));
  CHECK(strstr(text, "expect p1: 128 threads/block, 2 KiB shared, 8 registers/thread, vectors of 4, unroll 1024\n"));
  free(text);
  free(want);
  tsel_graph_free(g);
  sched_trace_free(t);
  ir_func_free(f);
}

/* The trace JSON js round-trips and lifts (kernel-free) to the text want. */
static void lifts_to(const char *js, const char *want) {
  dg_status st;
  sched_trace *t = sched_trace_from_json(js, &st);
  CHECK_OK(st);
  char why[4096];
  CHECK_MSG(roundtrip(t, "GMM/0", NULL, why, sizeof why), "%s", why);
  tsel_graph *g = tsel_lift(t, "GMM/0", NULL, NULL, &st);
  CHECK_OK(st);
  char *text = tsel_print(g);
  CHECK_STREQ(text, want);
  free(text);
  tsel_graph_free(g);
  sched_trace_free(t);
}

DG_TEST(tsel_raw_unknown_kinds) {
  const char *js =
      "[[[\"GetBlock\",[],[\"Z\",\"main\"],[\"b0\"]],"
      "[\"PadEinsum\",[\"b0\",\"None\",\"\\\"q\\\"\",[1,2.5]],[[1,2],true,null],[\"l1\",\"b2\"]],"
      "[\"GetLoops\",[\"b2\"],[],[\"b3\"]],"
      "[\"Split\",[\"l1\",\"None\",4],[0,0],[\"l4\",\"l5\"]],"
      "[\"Fuse\",[\"l4\"],[1],[\"l6\"]],"
      "[\"SamplePerfectTile\",[\"l5\"],[2,16],[\"v7\",\"v8\"]],"
      "[\"Split\",[\"l5\",\"v7\",\"v8\"],[1,0],[\"l9\",\"l10\"]],"
      "[\"Annotate\",[\"l9\",\"v7\"],[\"pragma_auto_unroll_max_step\"],[]],"
      "[\"SampleCategorical\",[],[[2,2,4],[0.5,0.25,0.25]],[\"v11\"]],"
      "[\"Annotate\",[\"b0\",\"v11\"],[\"meta_schedule.cooperative_fetch\"],[]],"
      "[\"Mystery\",[],[],[]]],"
      "[[1,[7,\"x\"]],[5,[4,4]],[8,1]]]";
  /* an unknown kind, a GetLoops whose output names say block, a one-loop
   * Fuse, sampled values used twice and non-uniform probabilities all stay
   * unfolded and exact */
  lifts_to(js,
           "tsel 1 kernel GMM/0\n"
           "t1 block \"Z\"\n"
           "t2 raw \"PadEinsum\" [t1 _ \"q\" [1 2.5]] [[1 2] true _] x2 decision=[7 \"x\"] kinds=\"lb\"\n"
           "t3 raw \"GetLoops\" [t2.1] [] x1 kinds=\"b\"\n"
           "t4 split t2.0 [_ 4] unit=0\n"
           "t5 fuse t4.0\n"
           "t6 sample_tile t4.1 [4 4] max=16\n"
           "t7 split t4.1 [t6.0 t6.1]\n"
           "t8 annotate t7.0 auto_unroll t6.0\n"
           "t9 sample [2 2 4] =2 probs=[0.5 0.25 0.25] index=1\n"
           "t10 annotate t1 coop t9\n"
           "t11 raw \"Mystery\" [] [] x0\n");
}

/* Parses and checks (kernel-free) one graph of GMM/0; the message in why
 * ("" when it checks). */
static bool checks_free(const char *body, char *why, size_t n) {
  dg_str t;
  dg_str_init(&t);
  dg_str_printf(&t, "tsel 1 kernel GMM/0\n%s", body);
  dg_status st;
  tsel_graph *g = tsel_parse(t.s, "g.tsel", &st);
  bool ok = g && tsel_check(g, NULL, TSEL_TARGET_CUDA, &st);
  snprintf(why, n, "%s", ok ? "" : st.msg);
  tsel_graph_free(g);
  dg_str_free(&t);
  return ok;
}

/* Strings that name a tensor intrinsic (tensorize, the tensorize_as and
 * tensorize_init annotations) must name a registered one: each registered
 * name checks, "" only as an annotation's value, anything else is refused
 * at the string with replay's message; the check needs no kernel. Other
 * annotations take any string. A trace with an unknown name still lifts
 * (to raw edits) and comes back exactly. */
DG_TEST(tsel_checker_tensor_intrinsics) {
  const char *head = "t1 block \"Z\"\nt2 loops t1 x4\n";
  char body[512], why[600];
  CHECK(intrin_count() >= 30);
  for (int i = 0; i < intrin_count(); i++) {
    const char *name = intrin_at(i)->name;
    snprintf(body, sizeof body, "%st3 tensorize t2.3 \"%s\"\nt4 annotate t1 tensorize_as \"%s\"\n"
             "t5 annotate t1 tensorize_init \"%s\"\n", head, name, name, name);
    CHECK_MSG(checks_free(body, why, sizeof why), "%s: %s", name, why);
  }
  snprintf(body, sizeof body, "%st3 annotate t1 tensorize_as \"\"\nt4 annotate t1 tensorize_init \"\"\n"
           "t5 annotate t1 \"k\" \"wmma\"\nt6 annotate t1 tensorize_as 1\n", head);
  CHECK_MSG(checks_free(body, why, sizeof why), "%s", why);
  static const struct {
    const char *line, *msg;
  } bad[] = {
      {"t3 tensorize t2.3 \"\"\n",
       "g.tsel:4:19: t3 tensorize: unknown tensor intrinsic '' (closest: wmma_fill_16x16x16_f32, "
       "wmma_fill_16x16x16_f16, wmma_fill_16x16x16_s32)"},
      {"t3 tensorize t1 \"wmma_fill_16x16x16_f64\"\n",
       "g.tsel:4:17: t3 tensorize: unknown tensor intrinsic 'wmma_fill_16x16x16_f64' (closest: "
       "wmma_fill_16x16x16_f32, wmma_fill_16x16x16_f16, wmma_fill_16x16x16_s32)"},
      {"t3 annotate t1 tensorize_as \"cit t2 threadIdx1: 512 threads/block\"\n",
       "g.tsel:4:29: t3 annotate: unknown tensor intrinsic 'cit t2 threadIdx1: 512 threads/block' (closest: "
       "wmma_store_16x16x16_f32_shared, wmma_store_16x16x16_f32_shared_dyn, wmma_store_16x16x16_f32_global)"},
      {"t3 annotate t1 tensorize_init \"wmma_sync_16x16x16_f16f16f33\"\n",
       "g.tsel:4:31: t3 annotate: unknown tensor intrinsic 'wmma_sync_16x16x16_f16f16f33' (closest: "
       "wmma_sync_16x16x16_f16f16f32, wmma_sync_16x16x16_f16f16f16, wmma_sync_16x16x16_f16f16f32_trans)"},
  };
  for (size_t i = 0; i < DG_ARRAY_LEN(bad); i++) {
    snprintf(body, sizeof body, "%s%s", head, bad[i].line);
    CHECK_MSG(!checks_free(body, why, sizeof why), "'%s' checks", bad[i].line);
    CHECK_STREQ(why, bad[i].msg);
  }
  /* replay says the same */
  dg_status st;
  dg_func *f = wl_build("GMM/0", &st);
  CHECK(f);
  sched *s = sched_new(f, 0);
  int b = sched_get_block(s, "Z", "main", &st);
  CHECK(b >= 0);
  CHECK(!sched_tensorize(s, b, "wmma_fill_16x16x16_f64", true, &st));
  CHECK_MSG(strstr(st.msg, strstr(bad[1].msg, "unknown")), "replay says '%s'", st.msg);
  sched_free(s);
  ir_func_free(f);
  const char *js =
      "[[[\"GetBlock\",[],[\"Z\",\"main\"],[\"b0\"]],"
      "[\"GetLoops\",[\"b0\"],[],[\"l1\",\"l2\",\"l3\",\"l4\"]],"
      "[\"Tensorize\",[\"l4\"],[\"wmma_fill_16x16x16_f64\",true],[]],"
      "[\"Annotate\",[\"b0\",\"\\\"x\\\"\"],[\"meta_schedule.auto_tensorize\"],[]],"
      "[\"Annotate\",[\"b0\",\"\\\"\\\"\"],[\"meta_schedule.auto_tensorize\"],[]],"
      "[\"Tensorize\",[\"b0\"],[\"wmma_fill_16x16x16_f32\",true],[]]],[]]";
  lifts_to(js,
           "tsel 1 kernel GMM/0\n"
           "t1 block \"Z\"\n"
           "t2 loops t1 x4\n"
           "t3 raw \"Tensorize\" [t2.3] [\"wmma_fill_16x16x16_f64\" true] x0\n"
           "t4 raw \"Annotate\" [t1 \"x\"] [\"meta_schedule.auto_tensorize\"] x0\n"
           "t5 annotate t1 tensorize_as \"\"\n"
           "t6 tensorize t1 \"wmma_fill_16x16x16_f32\"\n");
}

/* Every broken graph is rejected with exactly its expected message; every
 * valid one is accepted (kernel from its header) and prints back as is. */
static int check_dir(const char *dir, bool broken, int *failures) {
  DIR *d = opendir(dir);
  if (!d) return -1;
  struct dirent *e;
  int n = 0;
  dg_func *gmm = wl_build("GMM/0", &(dg_status){0});
  while ((e = readdir(d))) {
    size_t l = strlen(e->d_name);
    if (l < 6 || strcmp(e->d_name + l - 5, ".tsel") != 0) continue;
    char path[600], errp[600];
    snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
    snprintf(errp, sizeof errp, "%s/%.*s.err", dir, (int)(l - 5), e->d_name);
    dg_status st;
    char *text = dg_read_file(path, NULL, &st);
    if (!text) continue;
    n++;
    tsel_graph *g = tsel_parse(text, e->d_name, &st);
    if (g) {
      char *p = tsel_print(g);
      if (strcmp(p, text) != 0) {
        dg_test_fail(__FILE__, __LINE__, "%s does not print back as written:\n%s", path, p);
        (*failures)++;
      }
      free(p);
      dg_func *k = wl_build(tsel_graph_kernel(g), &st);
      tsel_check(g, k ? k : gmm, TSEL_TARGET_CUDA, &st);
      ir_func_free(k);
    }
    if (broken) {
      char *want = dg_read_file(errp, NULL, &(dg_status){0});
      if (want && strchr(want, '\n')) *strchr(want, '\n') = 0;
      if (!want || st.code == DG_OK || strcmp(st.msg, want) != 0) {
        dg_test_fail(__FILE__, __LINE__, "%s: expected '%s', got %s'%s'", path, want ? want : "(no .err)",
                     st.code == DG_OK ? "ok " : "", st.msg);
        (*failures)++;
      }
      free(want);
    } else if (st.code != DG_OK) {
      dg_test_fail(__FILE__, __LINE__, "%s is rejected: %s", path, st.msg);
      (*failures)++;
    }
    tsel_graph_free(g);
    free(text);
  }
  closedir(d);
  ir_func_free(gmm);
  return n;
}

DG_TEST(tsel_checker_broken_graphs) {
  int failures = 0;
  int n = check_dir("tests/data/tsel/broken", true, &failures);
  CHECK_EQ(failures, 0);
  CHECK(n >= 30);
}

DG_TEST(tsel_checker_valid_graphs) {
  int failures = 0;
  int n = check_dir("tests/data/tsel/valid", false, &failures);
  CHECK_EQ(failures, 0);
  CHECK(n >= 2);
  /* a valid hand-written graph lowers, and its trace lifts back to a graph
   * that lowers to the same trace */
  char *text = read_data("tsel/valid/hand_raw.tsel");
  CHECK(text);
  dg_status st;
  tsel_graph *g = tsel_parse(text, "hand_raw.tsel", &st);
  CHECK_OK(st);
  sched_trace *t = tsel_lower(g, &st);
  CHECK_OK(st);
  char why[4096];
  CHECK_MSG(roundtrip(t, "x", NULL, why, sizeof why), "%s", why);
  CHECK_EQ(t->n, 16);
  CHECK_STREQ(t->insts[7].kind_name, "SampleCategorical"); /* thread_split expands to 3 */
  CHECK_STREQ(t->insts[9].kind_name, "Bind");
  sched_trace_free(t);
  tsel_graph_free(g);
  free(text);
}

DG_TEST(tsel_targets_and_postproc) {
  dg_status st;
  dg_func *f = wl_build("GMM/0", &st);
  CHECK(f);
  tsel_graph *g = tsel_parse("tsel 1 kernel GMM/0\nt1 block \"Z\"\nt2 loops t1 x4\n"
                             "t3 cache_read_at t1 0 shared t2.1\n",
                             NULL, &st);
  CHECK_OK(st);
  CHECK(tsel_check(g, f, TSEL_TARGET_CUDA, &st));
  CHECK(!tsel_check(g, f, TSEL_TARGET_CPU, &st));
  CHECK_STREQ(st.msg, "4:23: t3 cache_read_at: scope shared is not available on the cpu target (global, local)");
  tsel_graph_free(g);
  /* `postproc default` expands to what the default postprocessors record on
   * the kernel, and lift folds exactly that tail back */
  g = tsel_parse("tsel 1 kernel GMM/0\nt1 postproc default\n", NULL, &st);
  CHECK_OK(st);
  sched_trace *t = tsel_lower(g, &st);
  CHECK_MSG(t, "%s", st.msg);
  CHECK(t->n > 2 && t->insts[0].kind == SCHED_INST_ENTER_POSTPROC);
  tsel_graph *g2 = tsel_lift(t, "GMM/0", NULL, NULL, &st);
  CHECK(g2);
  char *p1 = tsel_print(g), *p2 = tsel_print(g2);
  CHECK_STREQ(p2, p1);
  free(p1);
  free(p2);
  tsel_graph_free(g2);
  /* a tail that is not the default one stays written out */
  sched_trace *t2 = sched_trace_clone(t);
  t2->n--;
  t2->n_rvs = 0;
  for (int i = 0; i < t2->n; i++)
    for (int k = 0; k < t2->insts[i].n_outputs; k++)
      if (t2->insts[i].outputs[k] + 1 > t2->n_rvs) t2->n_rvs = t2->insts[i].outputs[k] + 1;
  g2 = tsel_lift(t2, "GMM/0", NULL, NULL, &st);
  CHECK(g2);
  p2 = tsel_print(g2);
  CHECK(strstr(p2, "postproc default") == NULL && strstr(p2, "t1 postproc\n") != NULL);
  free(p2);
  tsel_graph_free(g2);
  sched_trace_free(t2);
  /* a program that hands in no postprocessors: lift spells the tail out
   * (lossless), lower refuses the fold and says why */
  tsel_set_postprocessor(NULL, NULL);
  g2 = tsel_lift(t, "GMM/0", NULL, NULL, &st);
  CHECK(g2);
  p2 = tsel_print(g2);
  CHECK(strstr(p2, "postproc default") == NULL && strstr(p2, "t1 postproc\n") != NULL);
  sched_trace *t3 = tsel_lower(g2, &st);
  CHECK(t3 && sched_trace_equal(t3, t));
  sched_trace_free(t3);
  free(p2);
  tsel_graph_free(g2);
  CHECK(!tsel_lower(g, &st));
  CHECK_ERR(st, "2:4: t1 postproc default");
  CHECK_ERR(st, "no default postprocessors are set");
  tsel_set_postprocessor(search_postproc_cuda, NULL);
  sched_trace_free(t);
  tsel_graph_free(g);
  ir_func_free(f);
}

DG_TEST(tsel_explain_record) {
  dg_status st;
  tsel_record rec;
  CHECK(tsel_record_parse("{\"run_secs\": [1.2e-5, 1e-5, 0.9e-5], \"unscheduled_secs\": 1.42e-4}", &rec, &st));
  CHECK(rec.has_latency && rec.has_base);
  CHECK_NEAR(rec.latency_s, 1e-5, 1e-12);
  CHECK(!tsel_record_parse("{\"run_secs\": []}", &rec, &st));
  CHECK_ERR(st, "run_secs");
  CHECK(!tsel_record_parse("[1]", &rec, &st));
  CHECK(tsel_record_parse("{\"run_secs\": [1e-5], \"unscheduled_secs\": 1.42e-4}", &rec, &st));
  dg_func *f = wl_build("GMM/0", &st);
  sched_trace *t = load_trace("tsel/gmm0_design.json");
  CHECK(f && t);
  tsel_graph *g = tsel_lift(t, "GMM/0", f, &rec, &st);
  CHECK_OK(st);
  char *a = tsel_print(g);
  CHECK(strstr(a, "expect p1: 128 threads/block, 2 KiB shared, 8 registers/thread, vectors of 4, unroll 1024, "
                  "10 us, 14.2x over the unscheduled kernel\n"));
  /* deterministic, and explanations are replaced, not appended */
  CHECK(tsel_explain(g, f, &rec, &st));
  char *b = tsel_print(g);
  CHECK_STREQ(a, b);
  free(a);
  free(b);
  tsel_graph_free(g);
  sched_trace_free(t);
  ir_func_free(f);
}

DG_TEST(tsel_python_form) {
  sched_trace *t = load_trace("traces/gmm0_tiling.json");
  CHECK(t);
  char *py = tsel_trace_to_python(t);
  CHECK(strncmp(py, "b0 = sch.get_block(name=\"Z\", func_name=\"main\")\nl1, l2, l3, l4 = sch.get_loops(block=b0)\n"
                    "v5, v6, v7, v8, v9 = sch.sample_perfect_tile(loop=l1, n=5, max_innermost_factor=64, "
                    "decision=[1, 1, 1, 1, 1])\n"
                    "l10, l11, l12, l13, l14 = sch.split(loop=l1, factors=[v5, v6, v7, v8, v9], "
                    "preserve_unit_iters=True, disable_predication=False)\n",
                strlen("b0 = sch.get_block(name=\"Z\", func_name=\"main\")\nl1, l2, l3, l4 = sch.get_loops(block=b0)\n"
                       "v5, v6, v7, v8, v9 = sch.sample_perfect_tile(loop=l1, n=5, max_innermost_factor=64, "
                       "decision=[1, 1, 1, 1, 1])\n"
                       "l10, l11, l12, l13, l14 = sch.split(loop=l1, factors=[v5, v6, v7, v8, v9], "
                       "preserve_unit_iters=True, disable_predication=False)\n")) == 0);
  CHECK(strstr(py, "l41 = sch.fuse(l10, l20, l30, preserve_unit_iters=True)\nsch.bind(loop=l41, thread_axis=\"blockIdx.x\")\n"));
  free(py);
  sched_trace_free(t);
}

DG_TEST(tsel_cli) {
  char *out = NULL, *want = read_data("tsel/valid/gmm0_design.tsel");
  CHECK(want);
  int rc = dg_test_run_dragon("tsel lift tests/data/tsel/gmm0_design.json --kernel GMM/0", NULL, &out);
  CHECK_EQ(rc, 0);
  CHECK_STREQ(out, want);
  free(out);
  /* lift | lower reproduces the trace */
  rc = dg_test_run_dragon("tsel lower -", want, &out);
  CHECK_EQ(rc, 0);
  sched_trace *t = load_trace("tsel/gmm0_design.json");
  CHECK(t);
  char *js = sched_trace_to_json(t);
  size_t n = strlen(js);
  CHECK(strncmp(out, js, n) == 0 && strcmp(out + n, "\n") == 0);
  free(js);
  sched_trace_free(t);
  free(out);
  rc = dg_test_run_dragon("tsel check tests/data/tsel/valid/gmm0_design.tsel", NULL, &out);
  CHECK_EQ(rc, 0);
  CHECK_STREQ(out, "ok: 25 edits\n");
  free(out);
  rc = dg_test_run_dragon("tsel check tests/data/tsel/broken/stale_split.tsel", NULL, &out);
  CHECK_EQ(rc, 1);
  CHECK_STREQ(out, "dragon tsel check: tests/data/tsel/broken/stale_split.tsel:5:13: t4 parallel: t2.1 is stale: "
                   "the loop was consumed by t3 (tile)\n");
  free(out);
  rc = dg_test_run_dragon("tsel lift tests/data/tsel/gmm0_design.json", NULL, &out);
  CHECK_EQ(rc, 2);
  free(out);
  rc = dg_test_run_dragon("tsel stats tests/data/tsel tests/data/traces --random 20", NULL, &out);
  CHECK_EQ(rc, 0);
  const char *files = strstr(out, "\nfiles ");
  long long nfiles = 0;
  CHECK(files && sscanf(files, " files %lld", &nfiles) == 1);
  CHECK(nfiles >= 2);
  CHECK(strstr(out, "\ntotal "));
  free(out);
  free(want);
}

/* The fuzzer's invariants (fuzz/fuzz_tsel.c), for its saved inputs. */
static void fuzz_one(const char *text, const dg_func *k) {
  dg_status st;
  tsel_graph *g = tsel_parse(text, NULL, &st);
  if (!g) {
    CHECK(st.code != DG_OK && st.msg[0]);
    return;
  }
  char *p = tsel_print(g);
  tsel_graph *g2 = tsel_parse(p, NULL, &st);
  CHECK_MSG(g2, "printed text does not parse: %s", st.msg);
  char *p2 = tsel_print(g2);
  CHECK_STREQ(p, p2);
  bool ok = tsel_check(g, NULL, TSEL_TARGET_CUDA, &st);
  sched_trace *t = tsel_lower(g, &st);
  CHECK(ok == (t != NULL));
  if (t) {
    tsel_check(g, k, TSEL_TARGET_CUDA, &st);
    tsel_graph *l = tsel_lift(t, "x", NULL, NULL, &st);
    CHECK_MSG(l, "lift of a lowered graph: %s", st.msg);
    sched_trace *t2 = tsel_lower(l, &st);
    CHECK(t2);
    char *a = sched_trace_to_json(t), *b = sched_trace_to_json(t2);
    CHECK_STREQ(a, b);
    free(a);
    free(b);
    sched_trace_free(t2);
    tsel_graph_free(l);
    sched_trace_free(t);
  }
  free(p);
  free(p2);
  tsel_graph_free(g);
  tsel_graph_free(g2);
}

DG_TEST(tsel_fuzz_regressions) {
  const char *dir = "tests/fuzz/tsel";
  DIR *d = opendir(dir);
  CHECK_MSG(d, "cannot open %s", dir);
  dg_func *k = wl_build("GMM/0", &(dg_status){0});
  struct dirent *e;
  int n = 0;
  while ((e = readdir(d))) {
    if (e->d_name[0] == '.') continue;
    char path[600];
    snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
    dg_status st;
    char *text = dg_read_file(path, NULL, &st);
    if (!text) continue;
    fuzz_one(text, k);
    free(text);
    n++;
  }
  closedir(d);
  ir_func_free(k);
  CHECK(n > 0);
}

/* lower(lift(T)) == T and lift(lower(G)) == G over design-space samples
 * (postprocessing tail included, folded into `postproc default`) of
 * several MetaSchedule workloads, and over the hand-written GPU schedules. */
static bool roundtrip_with_kernel(const sched_trace *t, const char *spec, const dg_func *f,
                                  bool *folded) {
  dg_status st;
  tsel_graph *g = tsel_lift(t, spec, f, NULL, &st);
  if (!g) {
    fprintf(stderr, "%s: lift: %s\n", spec, st.msg);
    return false;
  }
  char *text = tsel_print(g);
  *folded = strstr(text, "postproc default") != NULL;
  tsel_graph *g2 = tsel_parse(text, "rt", &st);
  sched_trace *back = g2 ? tsel_lower(g2, &st) : NULL;
  bool ok = back && sched_trace_equal(back, t);
  if (!ok) fprintf(stderr, "%s: %s\n%s", spec, back ? "trace differs" : st.msg, text);
  tsel_graph *g3 = ok ? tsel_lift(back, spec, f, NULL, &st) : NULL;
  char *text3 = g3 ? tsel_print(g3) : NULL;
  if (ok && (!text3 || strcmp(text3, text) != 0)) {
    fprintf(stderr, "%s: lift(lower(G)) != G\n", spec);
    ok = false;
  }
  free(text);
  free(text3);
  tsel_graph_free(g);
  tsel_graph_free(g2);
  tsel_graph_free(g3);
  sched_trace_free(back);
  return ok;
}

DG_TEST(tsel_roundtrip_design_spaces_and_hand_schedules) {
  const char *names[] = {"GMM/0", "C1D/0", "SFM/0", "NRM/0", "CBR/0", "TBG/0"};
  int folded_n = 0;
  for (size_t i = 0; i < DG_ARRAY_LEN(names); i++) {
    dg_status st;
    dg_func *f = wl_build(names[i], &st);
    CHECK(f);
    search_space sp;
    search_space_opts o = {.seed = 3};
    CHECK(search_space_generate(f, &o, &sp, &st));
    dg_rng rng;
    dg_rng_seed(&rng, 17 + i);
    int got = 0;
    search_postprocs pp = {0};
    for (int tries = 0; tries < 200 && got < 2; tries++) {
      sched *s = search_sample(f, &sp, &pp, &rng, NULL, &st);
      if (!s) continue;
      bool folded = false;
      bool ok = roundtrip_with_kernel(sched_get_trace(s), names[i], f, &folded);
      sched_free(s);
      CHECK_MSG(ok, "%s sample %d", names[i], got);
      folded_n += folded;
      got++;
    }
    CHECK_MSG(got == 2, "%s: no accepted samples", names[i]);
    search_space_free(&sp);
    ir_func_free(f);
  }
  CHECK_MSG(folded_n >= 6, "%d of 12 samples folded", folded_n); /* the tails are folded */
  const char *hand[] = {"C1D", "C2D", "GMM", "NRM", "SFM", "TBG"};
  for (size_t i = 0; i < DG_ARRAY_LEN(hand); i++) {
    char path[128], spec[16];
    snprintf(path, sizeof path, "schedules/%s.json", hand[i]);
    snprintf(spec, sizeof spec, "%s/0", hand[i]);
    dg_status st;
    char *js = dg_read_file(path, NULL, &st);
    CHECK_MSG(js, "%s", st.msg);
    sched_trace *t = sched_trace_from_json(js, &st);
    free(js);
    CHECK(t);
    dg_func *f = wl_build(spec, &st);
    bool folded;
    CHECK_MSG(roundtrip_with_kernel(t, spec, f, &folded), "%s", path);
    sched_trace_free(t);
    ir_func_free(f);
  }
}

/* One design-space sample of every workload family (the family's example
 * shape: nothing runs, only schedules) round-trips through TSEL. */
DG_TEST(tsel_roundtrip_every_family) {
  int families_done = 0;
  for (int fam = 0; fam < wl_family_count(); fam++) {
    const char *spec = wl_family_example(fam);
    dg_status st;
    dg_func *f = wl_build(spec, &st);
    CHECK_MSG(f, "%s: %s", spec, st.msg);
    search_space sp;
    search_space_opts o = {.seed = 9};
    CHECK_MSG(search_space_generate(f, &o, &sp, &st), "%s: %s", spec, st.msg);
    dg_rng rng;
    dg_rng_seed(&rng, 100 + (uint64_t)fam);
    search_postprocs pp = {0};
    sched *s = NULL;
    for (int tries = 0; tries < 300 && !s; tries++) s = search_sample(f, &sp, &pp, &rng, NULL, &st);
    if (s) {
      bool folded;
      CHECK_MSG(roundtrip_with_kernel(sched_get_trace(s), spec, f, &folded), "%s", spec);
      families_done++;
      sched_free(s);
    }
    search_space_free(&sp);
    ir_func_free(f);
  }
  /* a family whose example rejects every sample (e.g. a huge conv3d) may
   * be missing; nearly all must be there */
  CHECK_MSG(families_done >= wl_family_count() - 2, "%d of %d families", families_done,
            wl_family_count());
}
