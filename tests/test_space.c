/* test_space.c: MetaSchedule's CUDA design spaces (search/space.c and the
 * rules): the GMM/0 sketch against the hand-written trace, byte for byte;
 * the 13 test workloads against TVM's own design spaces (written by
 * scripts/tvm_spaces.py from apache-tvm 0.27): the same sketches in the
 * same order, instruction for instruction once TVM's decisions are taken;
 * the sketches replay, verify and compute what the kernel computes; single
 * rules on small kernels against expected traces; and `dragon sample` on
 * every alias and on a small workload of every family, each sample checked
 * through the C emulation of its GPU launches. */
#include <stdlib.h>
#include <string.h>

#include "dragon/rt.h"
#include "dragon/search.h"
#include "dragon/wl.h"
#include "test.h"
#include "tvm_traces.h"

static dg_func *build(const char *spec) {
  dg_status st;
  dg_func *f = wl_build(spec, &st);
  if (!f) fprintf(stderr, "%s: %s\n", spec, st.msg);
  return f;
}

/* A fresh schedule of f with t replayed (decisions kept). */
static sched *replayed(const dg_func *f, const sched_trace *t) {
  sched *s = sched_new(f, 1);
  dg_status st;
  if (!sched_replay(s, t, false, false, &st) || !ir_verify(sched_func(s), &st)) {
    fprintf(stderr, "replay: %s\n", st.msg);
    sched_free(s);
    return NULL;
  }
  return s;
}

static bool same_numbers(const dg_func *f, const dg_func *g) {
  rt_check chk;
  dg_status st;
  if (!rt_compare_cpu(f, g, 7, true, &chk, NULL, &st)) {
    fprintf(stderr, "compare: %s\n", st.msg);
    return false;
  }
  if (!chk.pass) fprintf(stderr, "mismatch: %s\n", chk.first_bad);
  return chk.pass;
}

DG_TEST(space_gmm0_reference_trace) {
  /* MultiLevelTiling's GMM/0 sketch with the decisions of TVM's gmm_0 test
   * is tests/data/traces/gmm0_space.json, byte for byte */
  dg_func *f = build("GMM/0");
  CHECK(f);
  search_space sp;
  dg_status st;
  search_space_opts o = {.seed = 5};
  CHECK(search_space_generate(f, &o, &sp, &st));
  CHECK_EQ(sp.n, 3); /* sm_90: without and with a 4- and 5-stage pipeline */
  CHECK_EQ(sp.n_undone, 0);
  char *want = dg_read_file(dg_test_data("traces/gmm0_space.json"), NULL, &st);
  CHECK(want);
  size_t len = strlen(want);
  while (len && want[len - 1] == '\n') want[--len] = 0;
  sched_trace *ref = sched_trace_from_json(want, &st);
  CHECK(ref);
  sched_trace *mine = tvm_with_decisions(sp.sketches[0], ref);
  CHECK(mine);
  char *got = sched_trace_to_json(mine);
  CHECK_STREQ(got, want);
  sched *s = replayed(f, mine);
  CHECK(s);
  CHECK(same_numbers(f, sched_func(s)));
  /* the pipelined sketches: the outer reduction tile annotated */
  char *p1 = sched_trace_to_json(sp.sketches[1]);
  /* (as TVM: the one reduction tile is fused, which renames it, then annotated) */
  CHECK(strstr(p1, "[\"Fuse\",[\"l39\"],[1],[\"l66\"]],"
                   "[\"Annotate\",[\"l66\",[0,0,2]],[\"software_pipeline_stage\"],[]],"
                   "[\"Annotate\",[\"l66\",[0,1,2]],[\"software_pipeline_order\"],[]],"
                   "[\"Annotate\",[\"l66\",[0]],[\"software_pipeline_async_stages\"],[]]"));
  free(p1);
  sched_free(s);
  free(got);
  free(want);
  sched_trace_free(mine);
  sched_trace_free(ref);
  search_space_free(&sp);
  ir_func_free(f);
}

/* What the replayed sketch must show (block names, scopes, bindings,
 * extents), for the aliases whose sketches test_meta_schedule_space_cuda.py
 * spells out. */
static const struct {
  const char *alias;
  int sketch;
  const char *text;
} structure[] = {
    {"C1D", 0, "alloc PadInput_shared: f32[1, 258, 64] shared"},
    {"C1D", 0, "bind(threadIdx.x):"},
    {"C2D", 0, "alloc conv2d_nhwc_local: f32[1, 112, 112, 64] local"},
    {"C2D", 0, "block PadInput_shared("},
    {"GMM", 0, "for k_1, b_3, i_3, j_3, k_2, b_4, i_4, j_4 in grid("},
    {"GMM", 0, "alloc Y_shared: f32[1, 128, 128] shared"},
    {"NRM", 1, "alloc C: f32[1] shared"},
    {"NRM", 1, "bind(threadIdx.x):"},
    {"SFM", 3, "alloc T_softmax_maxelem: f32[256] shared"},
    {"SFM", 3, "alloc T_softmax_expsum: f32[256] shared"},
    {"C2D", 0, "for n_2_h_2_w_2_co_2_fused in 224 bind(threadIdx.x):"},
    {"CBR", 0, "alloc Conv2dOutput_local: f32[1, 112, 112, 64] local"},
    {"CBR", 0, "alloc PaddedInput_shared: f32[1, 230, 230, 3] shared"},
    {"CBR", 0, "compute[v0, v1, v2, v3] = max((Conv2dOutput_local[v0, v1, v2, v3] + bias[v3])"},
    {"TBG", 0, "alloc query_T_shared: f32[1, 12, 128, 64] shared"},
    {"TBG", 0, "for b_2_1_h_2_1_i_1_j_1_fused in 64 bind(vthread.x):"},
};

DG_TEST(space_tvm_design_spaces) {
  /* each alias: TVM's sketches, in TVM's order, are dragon's, instruction
   * for instruction, once TVM's decisions are taken */
  for (size_t w = 0; w < DG_ARRAY_LEN(tvm_aliases); w++) {
    const char *alias = tvm_aliases[w];
    json_t *doc = tvm_load(alias);
    CHECK(doc);
    char spec[32];
    snprintf(spec, sizeof spec, "%s/0", alias);
    dg_func *f = build(spec);
    CHECK(f);
    search_space sp;
    dg_status st;
    search_space_opts o = {.seed = 11};
    CHECK_MSG(search_space_generate(f, &o, &sp, &st), "%s: %s", alias, st.msg);
    CHECK_MSG(sp.n_undone == 0, "%s: %s", alias, sp.undone);
    json_t *sketches = json_object_get(doc, "sketches");
    CHECK_MSG((int)json_array_size(sketches) == sp.n, "%s: TVM has %zu sketches, dragon %d", alias,
              json_array_size(sketches), sp.n);
    for (int k = 0; k < sp.n; k++) {
      sched_trace *theirs = tvm_trace(json_array_get(sketches, (size_t)k));
      CHECK(theirs);
      sched_trace *tn = tvm_normal(theirs), *mn = tvm_normal(sp.sketches[k]);
      sched_trace *mine = tvm_with_decisions(mn, tn);
      char why[128] = "kinds differ";
      CHECK_MSG(mine && tvm_first_difference(mine, tn, why, sizeof why) < 0,
                "%s sketch %d: %s", alias, k, why);
      char *a = sched_trace_to_json(mine), *b = sched_trace_to_json(tn);
      CHECK_MSG(strcmp(a, b) == 0, "%s sketch %d differs", alias, k);
      free(a);
      free(b);
      /* dragon's sketch with TVM's decisions replays and verifies */
      sched *s = replayed(f, mine);
      CHECK_MSG(s, "%s sketch %d does not replay", alias, k);
      char *txt = ir_print(sched_func(s));
      for (size_t i = 0; i < DG_ARRAY_LEN(structure); i++)
        if (strcmp(structure[i].alias, alias) == 0 && structure[i].sketch == k)
          CHECK_MSG(strstr(txt, structure[i].text), "%s sketch %d lacks '%s':\n%s", alias, k,
                    structure[i].text, txt);
      free(txt);
      if (k == 0 && (strcmp(alias, "GMM") == 0 || strcmp(alias, "NRM") == 0 ||
                     strcmp(alias, "SFM") == 0))
        CHECK_MSG(same_numbers(f, sched_func(s)), "%s sketch %d computes something else", alias, k);
      sched_free(s);
      sched_trace_free(mine);
      sched_trace_free(mn);
      sched_trace_free(tn);
      sched_trace_free(theirs);
    }
    search_space_free(&sp);
    ir_func_free(f);
    json_decref(doc);
  }
}

/* Whether the design space of a kernel (kernel text) is the one TVM
 * generates for the same kernel (`want`: its sketches as trace JSON lines,
 * from TVM 0.27 through scripts/tvm_spaces.py's rules), decisions aside. */
static bool space_is(const char *text, const char *want) {
  dg_status st;
  dg_func *f = ir_parse(text, "test", &st);
  if (!f) {
    fprintf(stderr, "%s\n", st.msg);
    return false;
  }
  search_space sp;
  search_space_opts o = {.seed = 3};
  bool ok = search_space_generate(f, &o, &sp, &st);
  if (!ok) fprintf(stderr, "%s\n", st.msg);
  const char *line = want;
  for (int i = 0; ok && i < sp.n; i++) {
    const char *nl = strchr(line, '\n');
    if (!nl) {
      fprintf(stderr, "dragon has more than the %d sketches TVM has\n", i);
      ok = false;
      break;
    }
    char *one = strndup(line, (size_t)(nl - line));
    line = nl + 1;
    sched_trace *theirs = sched_trace_from_json(one, &st);
    free(one);
    if (!theirs) {
      fprintf(stderr, "%s\n", st.msg);
      ok = false;
      break;
    }
    sched_trace *tn = tvm_normal(theirs), *mn = tvm_normal(sp.sketches[i]);
    sched_trace *mine = tvm_with_decisions(mn, tn);
    char why[128] = "kinds differ";
    if (!mine || tvm_first_difference(mine, tn, why, sizeof why) >= 0) {
      char *js = sched_trace_to_json(sp.sketches[i]);
      fprintf(stderr, "sketch %d: %s\ndragon: %s\n", i, why, js);
      free(js);
      ok = false;
    }
    if (mine) sched_trace_free(mine);
    sched_trace_free(mn);
    sched_trace_free(tn);
    sched_trace_free(theirs);
  }
  if (ok && *line) {
    fprintf(stderr, "TVM has more than the %d sketches dragon has\n", sp.n);
    ok = false;
  }
  search_space_free(&sp);
  ir_func_free(f);
  return ok;
}

DG_TEST(space_rules_elementwise) {
  /* Q = P + 1 goes into its producer P = A * 2 (AutoInline, visiting the
   * blocks from the back); P's loops are fused and split by a thread
   * extent sampled from those <= 1024 (AutoBind); no unrolling in a purely
   * spatial kernel */
  CHECK(space_is(
      "kernel main(A: f32[64, 32], Q: f32[64, 32]):\n"
      "  block root:\n"
      "    alloc P: f32[64, 32]\n"
      "    for i, j in grid(64, 32):\n"
      "      block P(vi: S(64) = i, vj: S(32) = j):\n"
      "        reads A[vi, vj]\n"
      "        writes P[vi, vj]\n"
      "        P[vi, vj] = A[vi, vj] * 2.0\n"
      "    for i_1, j_1 in grid(64, 32):\n"
      "      block Q(ui: S(64) = i_1, uj: S(32) = j_1):\n"
      "        reads P[ui, uj]\n"
      "        writes Q[ui, uj]\n"
      "        Q[ui, uj] = P[ui, uj] + 1.0\n",
      "[[[\"GetBlock\",[],[\"P\",\"main\"],[\"b0\"]],[\"GetBlock\",[],[\"Q\",\"main\"],[\"b1\"]],"
      "[\"GetBlock\",[],[\"root\",\"main\"],[\"b2\"]],[\"ReverseComputeInline\",[\"b1\"],[],[]],"
      "[\"GetLoops\",[\"b0\"],[],[\"l3\",\"l4\"]],[\"Fuse\",[\"l3\",\"l4\"],[1],[\"l5\"]],"
      "[\"SampleCategorical\",[],[[32,64,128,256,512,1024],[0.16666666666666666,"
      "0.16666666666666666,0.16666666666666666,0.16666666666666666,0.16666666666666666,"
      "0.16666666666666666]],[\"v6\"]],[\"Split\",[\"l5\",\"None\",\"v6\"],[1,0],[\"l7\",\"l8\"]],"
      "[\"Bind\",[\"l7\"],[\"blockIdx.x\"],[]],[\"Bind\",[\"l8\"],[\"threadIdx.x\"],[]]],"
      "[[6,0]]]\n"));
}

DG_TEST(space_rules_reduction) {
  /* a row sum: CrossThreadReduction returns the cross-thread copy and the
   * original, which the post-order stack puts first; ParallelizeVectorize-
   * Unroll marks the root; AutoBind binds what is left (a thread extent of
   * 8 = the extent, the only candidate) */
  CHECK(space_is(
      "kernel main(A: f32[8, 64], B: f32[8]):\n"
      "  block root:\n"
      "    for i, k in grid(8, 64):\n"
      "      block B(vi: S(8) = i, vk: R(64) = k):\n"
      "        reads A[vi, vk]\n"
      "        writes B[vi]\n"
      "        init:\n"
      "          B[vi] = 0.0\n"
      "        B[vi] = B[vi] + A[vi, vk]\n",
      "[[[\"GetBlock\",[],[\"B\",\"main\"],[\"b0\"]],[\"GetBlock\",[],[\"root\",\"main\"],[\"b1\"]],"
      "[\"SampleCategorical\",[],[[0,16,64,512,1024],[0.2,0.2,0.2,0.2,0.2]],[\"v2\"]],"
      "[\"Annotate\",[\"b1\",\"v2\"],[\"meta_schedule.unroll_explicit\"],[]],"
      "[\"GetLoops\",[\"b0\"],[],[\"l3\",\"l4\"]],[\"Fuse\",[\"l3\"],[1],[\"l5\"]],"
      "[\"Split\",[\"l5\",\"None\",8],[1,0],[\"l6\",\"l7\"]],[\"Bind\",[\"l6\"],[\"blockIdx.x\"],[]],"
      "[\"Bind\",[\"l7\"],[\"threadIdx.x\"],[]]],[[2,3]]]\n"
      "[[[\"GetBlock\",[],[\"B\",\"main\"],[\"b0\"]],[\"GetBlock\",[],[\"root\",\"main\"],[\"b1\"]],"
      "[\"GetConsumers\",[\"b0\"],[],[]],[\"SampleCategorical\",[],[[4,8,16,32,64,128,256,512],"
      "[0.125,0.125,0.125,0.125,0.125,0.125,0.125,0.125]],[\"v2\"]],"
      "[\"GetLoops\",[\"b0\"],[],[\"l3\",\"l4\"]],[\"Split\",[\"l4\",\"None\",\"v2\"],[1,0],[\"l5\",\"l6\"]],"
      "[\"Bind\",[\"l6\"],[\"threadIdx.x\"],[]],"
      "[\"SampleCategorical\",[],[[0,16,64,512,1024],[0.2,0.2,0.2,0.2,0.2]],[\"v7\"]],"
      "[\"Annotate\",[\"b1\",\"v7\"],[\"meta_schedule.unroll_explicit\"],[]],"
      "[\"GetLoops\",[\"b0\"],[],[\"l8\",\"l9\",\"l10\"]],[\"GetLoops\",[\"b0\"],[],[\"l11\",\"l12\",\"l13\"]],"
      "[\"Fuse\",[\"l11\"],[1],[\"l14\"]],[\"Bind\",[\"l14\"],[\"blockIdx.x\"],[]]],[[3,4],[7,1]]]\n"));
}

DG_TEST(space_deterministic) {
  dg_func *f = build("softmax:m=16,n=64,dtype=f32");
  CHECK(f);
  search_space a, b, c;
  dg_status st;
  search_space_opts o1 = {.seed = 4}, o2 = {.seed = 9};
  CHECK(search_space_generate(f, &o1, &a, &st));
  CHECK(search_space_generate(f, &o1, &b, &st));
  CHECK(search_space_generate(f, &o2, &c, &st));
  CHECK_EQ(a.n, 4);
  CHECK(a.n == b.n && a.n == c.n);
  bool all_same = true;
  for (int i = 0; i < a.n; i++) {
    CHECK(sched_trace_equal(a.sketches[i], b.sketches[i]));
    all_same = all_same && sched_trace_equal(a.sketches[i], c.sketches[i]);
  }
  CHECK(!all_same); /* another seed draws other decisions */
  /* samples: deterministic for the RNG, and they check */
  dg_rng r1, r2;
  dg_rng_seed(&r1, 5);
  dg_rng_seed(&r2, 5);
  search_postprocs pp = {0};
  for (int i = 0; i < 3; i++) {
    sched *s1 = search_sample(f, &a, &pp, &r1, NULL, &st);
    CHECK_MSG(s1, "%s", st.msg);
    sched *s2 = search_sample(f, &a, NULL, &r2, NULL, &st);
    CHECK(s2);
    /* the same draws: the design-space parts agree */
    sched_trace *t1 = sched_trace_simplified(sched_get_trace(s1), true);
    sched_trace *t2 = sched_trace_simplified(sched_get_trace(s2), true);
    bool same = sched_trace_equal(t1, t2);
    sched_trace_free(t1);
    sched_trace_free(t2);
    CHECK(same);
    sched_free(s1);
    sched_free(s2);
  }
  search_space_free(&a);
  search_space_free(&b);
  search_space_free(&c);
  ir_func_free(f);
}

DG_TEST(space_sample_every_alias) {
  /* the design space of every alias samples, without and with the
   * postprocessors */
  for (size_t w = 0; w < DG_ARRAY_LEN(tvm_aliases); w++) {
    char args[96], *out = NULL;
    snprintf(args, sizeof args, "sample %s/0 --count 50 --seed 3 --space-only", tvm_aliases[w]);
    int rc = dg_test_run_dragon(args, NULL, &out);
    CHECK_MSG(rc == 0, "%s: rc %d: %s", args, rc, out);
    int lines = 0;
    for (char *p = out; (p = strstr(p, "[[[\"GetBlock\"")); p++) lines++;
    CHECK_MSG(lines == 50, "%s: %d traces", args, lines);
    CHECK(strstr(out, "samples   50 printed"));
    free(out);
    /* and postprocessed samples */
    snprintf(args, sizeof args, "sample %s/0 --count 2 --seed 3", tvm_aliases[w]);
    rc = dg_test_run_dragon(args, NULL, &out);
    CHECK_MSG(rc == 0, "%s: rc %d: %s", args, rc, out);
    CHECK_MSG(strstr(out, "samples   2 printed"), "%s: %s", args, out);
    free(out);
  }
  /* and the postprocessed samples of GMM/0, with rejections counted */
  char *out = NULL;
  int rc = dg_test_run_dragon("sample GMM/0 --count 50 --seed 3", NULL, &out);
  CHECK_MSG(rc == 0, "rc %d: %s", rc, out);
  CHECK(strstr(out, "samples   50 printed"));
  CHECK(strstr(out, "[\"EnterPostproc\",[],[],[]]"));
  CHECK(strstr(out, "RewriteCooperativeFetch=0"));
  CHECK(!strstr(out, "VerifyGPUCode=0 "));
  free(out);
  rc = dg_test_run_dragon("sample GMM/0 --count 0 --sketches", NULL, &out);
  CHECK(rc == 0 && strstr(out, "sketches  3"));
  free(out);
  rc = dg_test_run_dragon("sample nosuch:x=1", NULL, &out);
  CHECK(rc == 1 && strstr(out, "dragon sample: "));
  free(out);
}

/* A small workload of every family (spatial extents <= 64 where tiling
 * applies, so most samples pass the thread-extent bounds). */
static const char *const family_specs[] = {
    "gemm:m=8,n=8,k=32,trans_a=0,trans_b=0,dtype=f16",
    "batch_matmul:b=2,n=4,m=8,k=16,dtype=f32",
    "gemv:n=64,k=128,dtype=f32",
    "transpose_batch_matmul:batch=1,seq=4,heads=2,dim=8,dtype=f32",
    "conv1d_nlc:n=1,l=16,ci=4,co=8,kernel=3,stride=2,pad=1,dilation=1,groups=1,dtype=f32",
    "conv2d_nhwc:n=1,h=4,w=4,ci=4,co=4,kernel=3,stride=1,pad=1,dilation=1,groups=1,dtype=f32",
    "conv2d_nchw:n=1,h=4,w=4,ci=4,co=4,kernel=3,stride=1,pad=1,dilation=1,dtype=f32",
    "conv3d_ndhwc:n=1,d=2,h=2,w=2,ci=2,co=2,kernel=3,stride=1,pad=1,dilation=1,groups=1,dtype=f32",
    "depthwise_conv2d_nhwc:n=1,h=4,w=4,c=4,kernel=3,stride=1,pad=1,dilation=1,dtype=f32",
    "conv2d_transpose_nhwc:n=1,h=2,w=2,ci=8,co=4,kernel=4,stride=2,pad=1,dtype=f32",
    "conv2d_capsule_nhwijc:n=1,h=4,w=4,ci=2,co=2,kernel=3,stride=2,pad=1,capsule=2,dtype=f32",
    "conv2d_bias_bn_relu:n=1,h=8,w=8,ci=3,co=4,kernel=3,stride=2,pad=1,dilation=1,dtype=f32",
    "max_pool2d:n=1,c=4,h=8,w=8,kernel=3,stride=2,pad=1,dtype=f32",
    "avg_pool2d:n=1,c=4,h=8,w=8,kernel=2,stride=2,pad=0,dtype=f32",
    "norm_bmn:b=1,m=16,n=32,dtype=f32",
    "softmax:m=16,n=64,dtype=f16",
    "layernorm:m=8,n=64,dtype=f32",
    "rmsnorm:m=8,n=64,dtype=f16",
    "reduce_sum:m=16,n=64,dtype=f32",
    "reduce_max:m=16,n=64,dtype=f32",
    "bias_gelu:m=16,n=32,dtype=f32",
    "silu_mul:m=16,n=32,dtype=f32",
    "rope:b=1,s=8,h=2,d=16,dtype=f32",
};

DG_TEST(space_sample_every_family) {
  /* every family: postprocessed samples whose GPU launches, emulated in C,
   * compute what the kernel computes */
  bool seen[64] = {false};
  for (size_t i = 0; i < DG_ARRAY_LEN(family_specs); i++) {
    const char *spec = family_specs[i];
    for (int fam = 0; fam < wl_family_count(); fam++) {
      size_t n = strlen(wl_family_name(fam));
      if (strncmp(spec, wl_family_name(fam), n) == 0 && spec[n] == ':') seen[fam] = true;
    }
    char args[256], *out = NULL;
    snprintf(args, sizeof args, "sample '%s' --count 1 --seed 2 --check", spec);
    int rc = dg_test_run_dragon(args, NULL, &out);
    CHECK_MSG(rc == 0, "%s: rc %d: %s", spec, rc, out);
    CHECK_MSG(strstr(out, "samples   1 printed"), "%s: %s", spec, out);
    free(out);
  }
  for (int fam = 0; fam < wl_family_count(); fam++)
    CHECK_MSG(seen[fam], "no workload of family %s", wl_family_name(fam));
}

DG_TEST(space_tensor_core_fallback) {
  /* an f16 GEMM matches the f16·f16→f32 WMMA group; with k = 72, not a
   * multiple of 16, TVM's sketch would pad it with TransformLayout, so
   * MultiLevelTiling tiles it: the space is the one without the
   * tensor-core rule, and the fallback is reported (tests/test_space_tc.c
   * has the tensor-core sketch itself) */
  dg_func *f = build("gemm:m=64,n=64,k=72,trans_a=0,trans_b=0,dtype=f16");
  CHECK(f);
  dg_status st;
  search_space with, without;
  search_space_opts o = {.seed = 2};
  CHECK(search_space_generate(f, &o, &with, &st));
  static const search_rule plain[] = {
      SEARCH_RULE_MLT, SEARCH_RULE_INLINE_CONST_SCALARS, SEARCH_RULE_AUTO_INLINE,
      SEARCH_RULE_CROSS_THREAD_REDUCTION, SEARCH_RULE_PARALLEL_VECTORIZE_UNROLL,
      SEARCH_RULE_AUTO_BIND};
  search_space_opts o2 = {.seed = 2, .rules = plain, .n_rules = (int)DG_ARRAY_LEN(plain)};
  CHECK(search_space_generate(f, &o2, &without, &st));
  CHECK_EQ(with.n_fallbacks, 1);
  CHECK_EQ(without.n_fallbacks, 0);
  CHECK(strstr(with.fallback, "block C matches wmma_sync_16x16x16_f16f16f32_trans"));
  CHECK(strstr(with.fallback, "is not a multiple of 16"));
  CHECK(with.n == without.n && with.n == 3);
  for (int i = 0; i < with.n; i++) CHECK(sched_trace_equal(with.sketches[i], without.sketches[i]));
  /* f16 inputs are fetched with 1, 2, 4 or 8 lanes */
  char *js = sched_trace_to_json(with.sketches[0]);
  CHECK(strstr(js, "[\"SampleCategorical\",[],[[1,2,4,8],[0.25,0.25,0.25,0.25]]"));
  free(js);
  search_space_free(&with);
  search_space_free(&without);
  ir_func_free(f);
  /* an f32 GEMM does not match */
  f = build("GMM/0");
  CHECK(f);
  CHECK(search_space_generate(f, &o, &with, &st));
  CHECK_EQ(with.n_fallbacks, 0);
  search_space_free(&with);
  ir_func_free(f);
}
