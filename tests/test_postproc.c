/* test_postproc.c: the CUDA postprocessors (search/postproc_*.c). Each one's
 * effect on a small kernel against expected kernel text and the steps it
 * records; rejections and their counts; and TVM's own postprocessed
 * samples of the 13 test workloads (scripts/tvm_spaces.py): their design
 * part replayed in dragon and postprocessed by dragon gives TVM's trace,
 * instruction for instruction, and a kernel that computes what the
 * workload computes. */
#include <stdlib.h>
#include <string.h>

#include "dragon/rt.h"
#include "dragon/search.h"
#include "dragon/wl.h"
#include "test.h"
#include "tvm_traces.h"

static sched *parsed(const char *text) {
  dg_status st;
  dg_func *f = ir_parse(text, "test", &st);
  if (!f) {
    fprintf(stderr, "%s\n", st.msg);
    return NULL;
  }
  sched *s = sched_new(f, 1);
  ir_func_free(f);
  return s;
}

/* The trace JSON from instruction `from` on (as a list of instructions). */
static char *tail_json(sched *s, int from) {
  const sched_trace *t = sched_get_trace(s);
  char *all = sched_trace_to_json(t);
  sched_trace *part = sched_trace_new();
  for (int i = from; i < t->n; i++) sched_trace_append(part, &t->insts[i]);
  free(all);
  char *js = sched_trace_to_json(part);
  sched_trace_free(part);
  return js;
}

static bool text_has(sched *s, const char *want) {
  char *txt = ir_print(sched_func(s));
  bool ok = strstr(txt, want) != NULL;
  if (!ok) fprintf(stderr, "--- kernel\n%s--- lacks\n%s\n", txt, want);
  free(txt);
  return ok;
}

static const char *COPY =
    "kernel main(A: f32[64, 64], B: f32[64, 64]):\n"
    "  block root:\n"
    "    for i, j in grid(64, 64):\n"
    "      block B(vi: S(64) = i, vj: S(64) = j):\n"
    "        reads A[vi, vj]\n"
    "        writes B[vi, vj]\n"
    "        B[vi, vj] = A[vi, vj]\n";

DG_TEST(postproc_unbound_block) {
  /* an unbound block: looked up by name, its loops fused and split by
   * min(extent, 1024), bound to blockIdx.x / threadIdx.x */
  sched *s = parsed(COPY);
  CHECK(s);
  dg_status st;
  CHECK(sched_enter_postproc(s, &st));
  CHECK(search_postproc_apply(SEARCH_POSTPROC_REWRITE_UNBOUND_BLOCK, s, NULL, &st));
  char *js = tail_json(s, 1);
  CHECK(strstr(js, "[\"GetBlock\",[],[\"B\",\"main\"],[\"b0\"]],[\"GetLoops\",[\"b0\"],[],[\"l1\",\"l2\"]],"
                   "[\"Fuse\",[\"l1\",\"l2\"],[1],[\"l3\"]],[\"Split\",[\"l3\",\"None\",1024],[1,0],[\"l4\",\"l5\"]],"
                   "[\"Bind\",[\"l4\"],[\"blockIdx.x\"],[]],[\"Bind\",[\"l5\"],[\"threadIdx.x\"],[]]"));
  free(js);
  CHECK(text_has(s, "    for i_j_fused_0 in 4 bind(blockIdx.x):\n"
                    "      for i_j_fused_1 in 1024 bind(threadIdx.x):\n"));
  /* a second run finds nothing left to bind */
  int n = sched_get_trace(s)->n;
  CHECK(search_postproc_apply(SEARCH_POSTPROC_REWRITE_UNBOUND_BLOCK, s, NULL, &st));
  CHECK_EQ(sched_get_trace(s)->n, n);
  CHECK(ir_verify(sched_func(s), &st));
  sched_free(s);
}

static const char *ROWSUM =
    "kernel main(A: f32[64, 256], D: f32[64]):\n"
    "  block root:\n"
    "    alloc B: f32[64]\n"
    "    attr meta_schedule.unroll_explicit = 64\n"
    "    for i, k in grid(64, 256):\n"
    "      block B(vi: S(64) = i, vk: R(256) = k):\n"
    "        reads A[vi, vk]\n"
    "        writes B[vi]\n"
    "        init:\n"
    "          B[vi] = 0.0\n"
    "        B[vi] = B[vi] + A[vi, vk]\n"
    "    for i_1 in 64:\n"
    "      block C(ui: S(64) = i_1):\n"
    "        reads B[ui]\n"
    "        writes D[ui]\n"
    "        D[ui] = B[ui] * 2.0\n";

DG_TEST(postproc_unroll_and_reduction) {
  sched *s = parsed(ROWSUM);
  CHECK(s);
  dg_status st;
  CHECK(sched_enter_postproc(s, &st));
  /* the root's mark becomes pragmas on the outermost loop of the blocks
   * that reduce (not on the purely spatial C) */
  CHECK(search_postproc_apply(SEARCH_POSTPROC_REWRITE_PARALLEL_VECTORIZE_UNROLL, s, NULL, &st));
  char *js = tail_json(s, 1);
  CHECK_STREQ(js,
              "[[[\"GetBlock\",[],[\"root\",\"main\"],[\"b0\"]],"
              "[\"Unannotate\",[\"b0\"],[\"meta_schedule.unroll_explicit\"],[]],"
              "[\"GetChildBlocks\",[\"b0\"],[],[\"b1\",\"b2\"]],"
              "[\"GetLoops\",[\"b1\"],[],[\"l3\",\"l4\"]],"
              "[\"Annotate\",[\"l3\",64],[\"pragma_auto_unroll_max_step\"],[]],"
              "[\"Annotate\",[\"l3\",1],[\"pragma_unroll_explicit\"],[]],"
              "[\"GetLoops\",[\"b2\"],[],[\"l5\"]]],[]]");
  free(js);
  CHECK(text_has(s, "    for i in 64 {pragma_auto_unroll_max_step = 64, pragma_unroll_explicit = 1}:\n"));
  char *txt = ir_print(sched_func(s));
  CHECK(!strstr(txt, "meta_schedule.unroll_explicit"));
  free(txt);
  /* the init of the reduction goes out at its first reduction loop */
  int n = sched_get_trace(s)->n;
  CHECK(search_postproc_apply(SEARCH_POSTPROC_REWRITE_REDUCTION_BLOCK, s, NULL, &st));
  js = tail_json(s, n);
  CHECK_STREQ(js,
              "[[[\"GetBlock\",[],[\"B\",\"main\"],[\"b6\"]],[\"GetLoops\",[\"b6\"],[],[\"l7\",\"l8\"]],"
              "[\"DecomposeReduction\",[\"b6\",\"l8\"],[],[\"b9\"]]],[]]");
  free(js);
  CHECK(text_has(s, "      block B_init(vi_1: S(64) = i):\n"));
  CHECK(ir_verify(sched_func(s), &st));
  sched_free(s);
}

DG_TEST(postproc_cooperative_fetch) {
  /* GMM/0's sketch with gmm_0's decisions: each shared copy is split by
   * the threadIdx.x extent (1 x 1 x 2 = 2 threads) and its vector length
   * (fetch decisions 1 and 0: 2 and 1 lanes), vectorized and bound */
  dg_status st;
  dg_func *f = wl_build("GMM/0", &st);
  CHECK(f);
  char *js = dg_read_file(dg_test_data("traces/gmm0_space.json"), NULL, &st);
  CHECK(js);
  sched_trace *t = sched_trace_from_json(js, &st);
  free(js);
  CHECK(t);
  sched *s = sched_new(f, 1);
  CHECK(sched_replay(s, t, false, false, &st));
  CHECK(sched_enter_postproc(s, &st));
  int n = sched_get_trace(s)->n;
  CHECK(search_postproc_apply(SEARCH_POSTPROC_REWRITE_COOPERATIVE_FETCH, s, NULL, &st));
  js = tail_json(s, n);
  CHECK(strstr(js, "[\"Unannotate\",[\"b46\"],[\"meta_schedule.cooperative_fetch\"],[]],"
                   "[\"GetLoops\",[\"b46\"],[],[\"l67\",\"l68\",\"l69\",\"l70\",\"l71\"]],"
                   "[\"Split\",[\"l71\",\"None\",2,2],[1,0],[\"l72\",\"l73\",\"l74\"]],"
                   "[\"Vectorize\",[\"l74\"],[],[]],[\"Bind\",[\"l73\"],[\"threadIdx.x\"],[]],"));
  CHECK(strstr(js, "[\"Split\",[\"l79\",\"None\",2],[1,0],[\"l80\",\"l81\"]],"
                   "[\"Bind\",[\"l81\"],[\"threadIdx.x\"],[]]"));
  free(js);
  CHECK(text_has(s, "            for ax0_1_ax1_1_ax2_1_fused_0 in 4096:\n"
                    "              for ax0_1_ax1_1_ax2_1_fused_1_1 in 2 bind(threadIdx.x):\n"
                    "                for ax0_1_ax1_1_ax2_1_fused_2 in 2 vectorized:\n"));
  /* two threads are too few for a block that tiles 16384 outputs */
  CHECK(!search_postproc_apply(SEARCH_POSTPROC_VERIFY_GPU_CODE, s, NULL, &st));
  CHECK_ERR(st, "block Z runs on 2 threads, outside its bounds [32, 1024]");
  sched_free(s);
  sched_trace_free(t);
  ir_func_free(f);
}

DG_TEST(postproc_verify_rejects) {
  /* 2048 threads in a block: rejected, with the launch named */
  sched *s = parsed(
      "kernel main(A: f32[4096], B: f32[4096]):\n"
      "  block root:\n"
      "    for i_0 in 2 bind(blockIdx.x):\n"
      "      for i_1 in 2048 bind(threadIdx.x):\n"
      "        block B(vi: S(4096) = i_0 * 2048 + i_1):\n"
      "          reads A[vi]\n"
      "          writes B[vi]\n"
      "          B[vi] = A[vi] + 1.0\n");
  CHECK(s);
  dg_status st;
  CHECK(!search_postproc_apply(SEARCH_POSTPROC_VERIFY_GPU_CODE, s, NULL, &st));
  CHECK_ERR(st, "VerifyGPUCode: lower: kernel");
  CHECK_ERR(st, "2048 threads per block (limit 1024)");
  /* counted per postprocessor by search_postproc_cuda */
  search_postprocs pp = {0};
  CHECK(!search_postproc_cuda(s, &pp, &st));
  CHECK_EQ(pp.rejected[SEARCH_POSTPROC_VERIFY_GPU_CODE], 1);
  CHECK_EQ(pp.accepted, 0);
  sched_free(s);
  /* a tiled block outside its thread-extent bounds */
  s = parsed(
      "kernel main(A: f32[64], B: f32[64]):\n"
      "  block root:\n"
      "    for i_0 in 4 bind(blockIdx.x):\n"
      "      for i_1 in 16 bind(threadIdx.x):\n"
      "        block B(vi: S(64) = i_0 * 16 + i_1):\n"
      "          reads A[vi]\n"
      "          writes B[vi]\n"
      "          attr meta_schedule.thread_extent_high_inclusive = 1024\n"
      "          attr meta_schedule.thread_extent_low_inclusive = 32\n"
      "          B[vi] = A[vi] + 1.0\n");
  CHECK(s);
  CHECK(!search_postproc_apply(SEARCH_POSTPROC_VERIFY_GPU_CODE, s, NULL, &st));
  CHECK_ERR(st, "VerifyGPUCode: block B runs on 16 threads, outside its bounds [32, 1024]");
  sched_free(s);
}

DG_TEST(postproc_disallow_dynamic_loop) {
  sched *s = parsed(COPY);
  CHECK(s);
  dg_status st;
  CHECK(search_postproc_apply(SEARCH_POSTPROC_DISALLOW_DYNAMIC_LOOP, s, NULL, &st));
  /* a loop of extent 0 (which the verifier refuses too) */
  dg_func *f = sched_func(s);
  dg_stmt *loop = ir_func_root(f)->body;
  CHECK(loop->kind == DG_STMT_FOR);
  loop->extent = 0;
  CHECK(!search_postproc_apply(SEARCH_POSTPROC_DISALLOW_DYNAMIC_LOOP, s, NULL, &st));
  CHECK_ERR(st, "DisallowDynamicLoop: loop i has extent 0");
  loop->extent = 64;
  sched_free(s);
}

DG_TEST(postproc_tensorize_marks) {
  /* marked blocks are looked up and unmarked; a Tensorize that does not
   * match is not a rejection and records nothing; an empty name is left */
  sched *s = parsed(
      "kernel main(A: f32[64, 64], B: f32[64, 64], C: f32[64, 64]):\n"
      "  block root:\n"
      "    for i, j in grid(64, 64):\n"
      "      block B(vi: S(64) = i, vj: S(64) = j):\n"
      "        reads A[vi, vj]\n"
      "        writes B[vi, vj]\n"
      "        attr meta_schedule.auto_tensorize = \"wmma_fill_16x16x16_f32\"\n"
      "        B[vi, vj] = A[vi, vj]\n"
      "    for i_1, j_1 in grid(64, 64):\n"
      "      block C(ui: S(64) = i_1, uj: S(64) = j_1):\n"
      "        reads B[ui, uj]\n"
      "        writes C[ui, uj]\n"
      "        attr meta_schedule.auto_tensorize = \"\"\n"
      "        C[ui, uj] = B[ui, uj]\n");
  CHECK(s);
  dg_status st;
  CHECK(search_postproc_apply(SEARCH_POSTPROC_REWRITE_TENSORIZE, s, NULL, &st));
  char *js = tail_json(s, 0);
  CHECK_STREQ(js, "[[[\"GetBlock\",[],[\"B\",\"main\"],[\"b0\"]],"
                  "[\"Unannotate\",[\"b0\"],[\"meta_schedule.auto_tensorize\"],[]]],[]]");
  free(js);
  CHECK(text_has(s, "        attr meta_schedule.auto_tensorize = \"\"\n"));
  sched_free(s);
}

DG_TEST(postproc_tvm_samples) {
  /* TVM's postprocessed samples: dragon's postprocessors record what TVM's
   * recorded, and the result computes the workload (checked on the small
   * ones through the C emulation) */
  int compared = 0, vthread_rejected = 0;
  for (size_t w = 0; w < DG_ARRAY_LEN(tvm_aliases); w++) {
    const char *alias = tvm_aliases[w];
    json_t *doc = tvm_load(alias);
    CHECK(doc);
    char spec[32];
    snprintf(spec, sizeof spec, "%s/0", alias);
    dg_status st;
    dg_func *f = wl_build(spec, &st);
    CHECK(f);
    json_t *post = json_object_get(doc, "postprocessed");
    for (size_t k = 0; k < json_array_size(post); k++) {
      json_t *j = json_array_get(post, k);
      if (json_is_null(j)) continue;
      sched_trace *theirs = tvm_trace(j);
      CHECK(theirs);
      sched_trace *tn = tvm_normal(theirs);
      sched *s = sched_new(f, 1);
      CHECK_MSG(sched_replay(s, tn, false, true, &st), "%s %zu: %s", alias, k, st.msg);
      search_postprocs pp = {0};
      if (!search_postproc_cuda(s, &pp, &st)) {
        /* TVM expands virtual threads before it checks their extent, so
         * it never refuses one; dragon keeps the limit of 8 */
        CHECK_MSG(strstr(st.msg, "a vthread loop of extent"), "%s sample %zu rejected: %s", alias,
                  k, st.msg);
        vthread_rejected++;
        sched_free(s);
        sched_trace_free(tn);
        sched_trace_free(theirs);
        continue;
      }
      sched_trace *mn = tvm_normal(sched_get_trace(s));
      char why[128] = "";
      CHECK_MSG(tvm_first_difference(mn, tn, why, sizeof why) < 0, "%s sample %zu: %s", alias, k,
                why);
      compared++;
      if (k == 0 && (strcmp(alias, "GMM") == 0 || strcmp(alias, "NRM") == 0 ||
                     strcmp(alias, "SFM") == 0)) {
        rt_check chk;
        CHECK_MSG(rt_program_check_c(f, sched_func(s), 5, &chk, &st), "%s: %s", alias, st.msg);
        CHECK_MSG(chk.pass, "%s: %s", alias, chk.first_bad);
      }
      sched_trace_free(mn);
      sched_free(s);
      sched_trace_free(tn);
      sched_trace_free(theirs);
    }
    ir_func_free(f);
    json_decref(doc);
  }
  CHECK(compared >= 30 && vthread_rejected <= 2);
}
