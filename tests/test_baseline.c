/* test_baseline.c: the untuned baseline, TVM's DefaultGPUSchedule
 * (search_baseline_schedule).
 *
 * For a small workload of every family: the schedule builds, its trace
 * round-trips through trace JSON and replays to an equal kernel, every
 * block sits under blockIdx.x and threadIdx.x loops of the extents TVM's
 * ThreadBind gives it (worked out here from the unscheduled block's
 * iteration variables, not from the schedule), the program lowers within
 * sm_90's limits and its C emulation matches the float64 reference. Then
 * the exact traces TVM records (gemm; softmax's four blocks; a block with
 * no spatial loop; no loop at all), the three-way split beyond 256 x 1024
 * iterations and its boundary, the target's limits, the blocks the pass
 * leaves alone (already bound; with child blocks), the errors, and the
 * `dragon run` / `dragon emit` defaults.
 */
#include <stdlib.h>
#include <string.h>

#include "dragon/codegen.h"
#include "dragon/lower.h"
#include "dragon/search.h"
#include "dragon/wl.h"
#include "sched_support.h"
#include "test.h"

/* One small workload per family (every family must be here). */
static const char *const family_specs[] = {
    "gemm:m=24,n=40,k=16,trans_a=0,trans_b=1,dtype=f32",
    "batch_matmul:b=2,n=16,m=24,k=8,dtype=f32",
    "gemv:n=1100,k=16,dtype=f32",
    "transpose_batch_matmul:batch=1,seq=16,heads=2,dim=8,dtype=f32",
    "conv1d_nlc:n=1,l=32,ci=8,co=16,kernel=3,stride=2,pad=1,dilation=1,groups=1,dtype=f32",
    "conv2d_nhwc:n=1,h=12,w=12,ci=4,co=8,kernel=3,stride=1,pad=1,dilation=2,groups=2,dtype=f32",
    "conv2d_nchw:n=1,h=10,w=10,ci=4,co=8,kernel=3,stride=1,pad=1,dilation=1,dtype=f32",
    "conv3d_ndhwc:n=1,d=4,h=6,w=6,ci=4,co=8,kernel=3,stride=1,pad=1,dilation=1,groups=1,dtype=f32",
    "depthwise_conv2d_nhwc:n=1,h=10,w=10,c=8,kernel=3,stride=2,pad=1,dilation=1,dtype=f32",
    "conv2d_transpose_nhwc:n=1,h=4,w=4,ci=8,co=4,kernel=4,stride=2,pad=1,dtype=f32",
    "conv2d_capsule_nhwijc:n=1,h=4,w=4,ci=4,co=4,kernel=3,stride=1,pad=1,capsule=2,dtype=f32",
    "conv2d_bias_bn_relu:n=1,h=8,w=8,ci=4,co=8,kernel=3,stride=1,pad=1,dilation=1,dtype=f32",
    "max_pool2d:n=1,c=4,h=12,w=12,kernel=3,stride=2,pad=1,dtype=f32",
    "avg_pool2d:n=1,c=4,h=8,w=8,kernel=2,stride=2,pad=0,dtype=f32",
    "norm_bmn:b=2,m=16,n=16,dtype=f32",
    "softmax:m=16,n=40,dtype=f32",
    "layernorm:m=8,n=64,dtype=f32",
    "rmsnorm:m=8,n=64,dtype=f32",
    "reduce_sum:m=40,n=16,dtype=f32",
    "reduce_max:m=40,n=16,dtype=f32",
    "bias_gelu:m=16,n=80,dtype=f32",
    "silu_mul:m=16,n=80,dtype=f32",
    "rope:b=1,s=8,h=2,d=16,dtype=f32",
};

/* Beyond one per family: f16 inputs, several thread blocks of 1024. */
static const char *const extra_specs[] = {
    "gemm:m=48,n=64,k=32,trans_a=1,trans_b=0,dtype=f16",
    "softmax:m=8,n=48,dtype=f16",
    "bias_gelu:m=64,n=96,dtype=f32",
};

/* ---- helpers -------------------------------------------------------------------- */

/* The loops above block `name` (outermost first) into out; false if absent. */
static bool loops_above(const dg_stmt *s, const char *name, const dg_stmt **stack, int depth,
                        const dg_stmt **out, int *n_out) {
  if (!s) return false;
  switch (s->kind) {
    case DG_STMT_FOR:
      if (depth >= 64) return false;
      stack[depth] = s;
      return loops_above(s->body, name, stack, depth + 1, out, n_out);
    case DG_STMT_SEQ:
      for (int i = 0; i < s->n; i++)
        if (loops_above(s->stmts[i], name, stack, depth, out, n_out)) return true;
      return false;
    case DG_STMT_IF:
      return loops_above(s->then_s, name, stack, depth, out, n_out) ||
             loops_above(s->else_s, name, stack, depth, out, n_out);
    case DG_STMT_BLOCK:
      if (strcmp(s->block->name, name) == 0) {
        memcpy(out, stack, sizeof(*stack) * (size_t)depth);
        *n_out = depth;
        return true;
      }
      return loops_above(s->block->body, name, stack, depth, out, n_out);
    case DG_STMT_STORE: return false;
  }
  return false;
}

typedef struct {
  const dg_block *items[64];
  int n;
} block_set;

static bool add_block(dg_block *b, dg_stmt *s, void *ctx) {
  (void)s;
  block_set *bs = ctx;
  if (strcmp(b->name, "root") != 0 && bs->n < 64) bs->items[bs->n++] = b;
  return true;
}

static int count_kind(const sched_trace *t, sched_inst_kind k) {
  int n = 0;
  for (int i = 0; i < t->n; i++) n += t->insts[i].kind == k;
  return n;
}

/* Block b of the unscheduled kernel sits in g as ThreadBind puts it, with
 * the target's limits: the two outermost loops above it are blockIdx.x and
 * threadIdx.x, threadIdx.x has min(P, max threads) iterations for P the
 * product of b's spatial extents, blockIdx.x enough to cover P (at most
 * max blocks, the rest in one serial loop), and the other loops above it
 * are that remainder and the reduction loops. Prints why not. */
static bool bound_as_tvm(const dg_func *g, const dg_block *b, const search_target *t) {
  int64_t P = 1, R = 1;
  for (int i = 0; i < b->n_iters; i++) {
    if (b->iters[i].kind == DG_ITER_SPATIAL) P *= b->iters[i].extent;
    else R *= b->iters[i].extent;
  }
  const dg_stmt *stack[64], *loops[64];
  int n = 0;
  if (!loops_above(g->body, b->name, stack, 0, loops, &n)) {
    fprintf(stderr, "block %s: not in the scheduled kernel\n", b->name);
    return false;
  }
  int64_t limit = t->max_threadblocks * t->max_threads_per_block;
  int64_t want_t = P < t->max_threads_per_block ? P : t->max_threads_per_block;
  int64_t want_b = P > limit ? t->max_threadblocks : (P + want_t - 1) / want_t;
  int64_t want_rest = (P > limit ? (P + limit - 1) / limit : 1) * R;
  if (n < 2 || loops[0]->loop_kind != DG_LOOP_THREAD || loops[0]->tag != DG_TAG_BLOCK_X ||
      loops[1]->loop_kind != DG_LOOP_THREAD || loops[1]->tag != DG_TAG_THREAD_X) {
    fprintf(stderr, "block %s: the outer loops are not blockIdx.x, threadIdx.x\n", b->name);
    return false;
  }
  int64_t rest = 1;
  for (int i = 2; i < n; i++) {
    if (loops[i]->loop_kind != DG_LOOP_SERIAL) {
      fprintf(stderr, "block %s: loop %s is not serial\n", b->name, loops[i]->loop_var->name);
      return false;
    }
    rest *= loops[i]->extent;
  }
  if (loops[0]->extent != want_b || loops[1]->extent != want_t || rest != want_rest) {
    fprintf(stderr,
            "block %s (P %lld, R %lld): blockIdx.x %lld, threadIdx.x %lld, other loops %lld; "
            "want %lld, %lld, %lld\n",
            b->name, (long long)P, (long long)R, (long long)loops[0]->extent,
            (long long)loops[1]->extent, (long long)rest, (long long)want_b, (long long)want_t,
            (long long)want_rest);
    return false;
  }
  return true;
}

/* trace -> JSON -> trace -> replay on a fresh schedule of f: the same
 * kernel (equal, same hash) and the same JSON. Prints why not. */
static bool roundtrips(const dg_func *f, sched *s) {
  dg_status st;
  char *js = sched_trace_to_json(sched_get_trace(s));
  sched_trace *t = sched_trace_from_json(js, &st);
  sched *s2 = sched_new(f, 5);
  bool ok = t && sched_replay(s2, t, false, false, &st);
  if (!ok) fprintf(stderr, "replay: %s\n", st.msg);
  char why[256] = "";
  if (ok && !ir_func_equal_explain(sched_func(s), sched_func(s2), why, sizeof why)) {
    fprintf(stderr, "replayed kernel differs: %s\n", why);
    ok = false;
  }
  if (ok && ir_func_hash(sched_func(s)) != ir_func_hash(sched_func(s2))) {
    fprintf(stderr, "replayed kernel hashes differently\n");
    ok = false;
  }
  char *js2 = ok ? sched_trace_to_json(sched_get_trace(s2)) : NULL;
  if (ok && strcmp(js, js2) != 0) {
    fprintf(stderr, "JSON differs:\n%s\n%s\n", js, js2);
    ok = false;
  }
  free(js);
  free(js2);
  sched_trace_free(t);
  sched_free(s2);
  return ok;
}

/* Lowers within sm_90's limits, and the C emulation matches the float64
 * reference; the CUDA source is emitted. Prints why not. */
static bool runs_right(const dg_func *ref, const dg_func *g) {
  dg_status st;
  lw_program *p = lower_program(g, NULL, &st);
  bool ok = p && lower_verify(p, &lower_limits_sm90, &st);
  if (!ok) fprintf(stderr, "lower: %s\n", st.msg);
  char *cu = ok ? codegen_emit_program(p, &codegen_lang_cuda, &st) : NULL;
  if (ok && (!cu || !strstr(cu, "__global__"))) {
    fprintf(stderr, "cuda: %s\n", cu ? "no kernel" : st.msg);
    ok = false;
  }
  char *src = ok ? codegen_emit_program_source(p, ref, &st) : NULL;
  if (ok && !src) {
    fprintf(stderr, "emulation: %s\n", st.msg);
    ok = false;
  }
  if (ok) ok = ts_source_matches(ref, src, rt_data_dist_for(ref));
  free(src);
  free(cu);
  lower_program_free(p);
  return ok;
}

/* Builds the baseline of spec and checks all of the above. */
static bool check_spec(const char *spec) {
  dg_status st;
  dg_func *f = wl_build(spec, &st);
  if (!f) {
    fprintf(stderr, "%s: %s\n", spec, st.msg);
    return false;
  }
  sched *s = NULL, *again = NULL;
  bool ok = search_baseline_schedule(f, NULL, &s, &st);
  if (!ok) fprintf(stderr, "%s: %s\n", spec, st.msg);
  block_set bs = {.n = 0};
  ir_visit_blocks(f->body, add_block, &bs);
  if (ok) {
    const sched_trace *t = sched_get_trace(s);
    /* every block scheduled once: one lookup, one fuse, two binds each */
    ok = count_kind(t, SCHED_INST_GET_BLOCK) == bs.n && count_kind(t, SCHED_INST_FUSE) == bs.n &&
         count_kind(t, SCHED_INST_BIND) == 2 * bs.n && count_kind(t, SCHED_INST_GET_CHILD_BLOCKS) == 0;
    if (!ok) {
      char *js = sched_trace_to_json(t);
      fprintf(stderr, "%s: %d blocks, trace %s\n", spec, bs.n, js);
      free(js);
    }
  }
  for (int i = 0; i < bs.n && ok; i++) ok = bound_as_tvm(sched_func(s), bs.items[i], &search_target_sm90);
  if (ok) ok = ts_verified(s) && roundtrips(f, s);
  if (ok) {
    /* deterministic */
    ok = search_baseline_schedule(f, NULL, &again, &st) &&
         sched_trace_equal(sched_get_trace(s), sched_get_trace(again));
    if (!ok) fprintf(stderr, "%s: a second baseline differs\n", spec);
  }
  if (ok) ok = runs_right(f, sched_func(s));
  if (!ok) fprintf(stderr, "  (in %s)\n", spec);
  sched_free(again);
  sched_free(s);
  ir_func_free(f);
  return ok;
}

static bool starts_family(const char *spec, const char *family) {
  size_t n = strlen(family);
  return strncmp(spec, family, n) == 0 && spec[n] == ':';
}

/* ---- every family ------------------------------------------------------------- */

DG_TEST(baseline_every_family) {
  for (int fam = 0; fam < wl_family_count(); fam++) {
    const char *spec = NULL;
    for (size_t i = 0; i < DG_ARRAY_LEN(family_specs) && !spec; i++)
      if (starts_family(family_specs[i], wl_family_name(fam))) spec = family_specs[i];
    CHECK_MSG(spec != NULL, "family %s has no workload in family_specs", wl_family_name(fam));
    CHECK_MSG(check_spec(spec), "%s", spec);
  }
  for (size_t i = 0; i < DG_ARRAY_LEN(extra_specs); i++)
    CHECK_MSG(check_spec(extra_specs[i]), "%s", extra_specs[i]);
}

/* ---- the exact traces ------------------------------------------------------------ */

static char *baseline_json(const char *spec_or_text, const search_target *t, dg_status *st) {
  dg_func *f = strchr(spec_or_text, '\n') ? ir_parse(spec_or_text, "test", st)
                                          : wl_build(spec_or_text, st);
  if (!f) return NULL;
  sched *s = NULL;
  char *js = NULL;
  if (search_baseline_schedule(f, t, &s, st)) js = sched_trace_to_json(sched_get_trace(s));
  sched_free(s);
  ir_func_free(f);
  return js;
}

/* What TVM records for a gemm (Trace::Simplified): GetBlock, GetLoops,
 * Fuse of i and j (k is a reduction), Split by 1024, Bind, Bind. */
DG_TEST(baseline_gemm_trace_is_tvms) {
  dg_status st;
  char *js = baseline_json("gemm:m=64,n=48,k=16,dtype=f32", NULL, &st);
  CHECK_MSG(js != NULL, "%s", st.msg);
  CHECK_STREQ(js,
              "[[[\"GetBlock\",[],[\"C\",\"main\"],[\"b0\"]],"
              "[\"GetLoops\",[\"b0\"],[],[\"l1\",\"l2\",\"l3\"]],"
              "[\"Fuse\",[\"l1\",\"l2\"],[0],[\"l4\"]],"
              "[\"Split\",[\"l4\",\"None\",1024],[1,0],[\"l5\",\"l6\"]],"
              "[\"Bind\",[\"l5\"],[\"blockIdx.x\"],[]],"
              "[\"Bind\",[\"l6\"],[\"threadIdx.x\"],[]]],[]]");
  free(js);
  /* fewer iterations than threads: one block of all of them */
  js = baseline_json("gemm:m=16,n=20,k=16,dtype=f32", NULL, &st);
  CHECK_MSG(js != NULL, "%s", st.msg);
  CHECK(strstr(js, "[\"Split\",[\"l4\",\"None\",320],[1,0],[\"l5\",\"l6\"]]") != NULL);
  free(js);
}

/* Several blocks: BlockCollector's lookups all come first (post-order,
 * which for blocks under the root is program order), then each block's
 * steps; a reduction block fuses its spatial loop alone. */
DG_TEST(baseline_softmax_trace_is_tvms) {
  dg_status st;
  char *js = baseline_json("softmax:m=4,n=8,dtype=f32", NULL, &st);
  CHECK_MSG(js != NULL, "%s", st.msg);
  CHECK_STREQ(js,
              "[[[\"GetBlock\",[],[\"T_softmax_maxelem\",\"main\"],[\"b0\"]],"
              "[\"GetBlock\",[],[\"T_softmax_exp\",\"main\"],[\"b1\"]],"
              "[\"GetBlock\",[],[\"T_softmax_expsum\",\"main\"],[\"b2\"]],"
              "[\"GetBlock\",[],[\"T_softmax_norm\",\"main\"],[\"b3\"]],"
              "[\"GetLoops\",[\"b0\"],[],[\"l4\",\"l5\"]],"
              "[\"Fuse\",[\"l4\"],[0],[\"l6\"]],"
              "[\"Split\",[\"l6\",\"None\",4],[1,0],[\"l7\",\"l8\"]],"
              "[\"Bind\",[\"l7\"],[\"blockIdx.x\"],[]],"
              "[\"Bind\",[\"l8\"],[\"threadIdx.x\"],[]],"
              "[\"GetLoops\",[\"b1\"],[],[\"l9\",\"l10\"]],"
              "[\"Fuse\",[\"l9\",\"l10\"],[0],[\"l11\"]],"
              "[\"Split\",[\"l11\",\"None\",32],[1,0],[\"l12\",\"l13\"]],"
              "[\"Bind\",[\"l12\"],[\"blockIdx.x\"],[]],"
              "[\"Bind\",[\"l13\"],[\"threadIdx.x\"],[]],"
              "[\"GetLoops\",[\"b2\"],[],[\"l14\",\"l15\"]],"
              "[\"Fuse\",[\"l14\"],[0],[\"l16\"]],"
              "[\"Split\",[\"l16\",\"None\",4],[1,0],[\"l17\",\"l18\"]],"
              "[\"Bind\",[\"l17\"],[\"blockIdx.x\"],[]],"
              "[\"Bind\",[\"l18\"],[\"threadIdx.x\"],[]],"
              "[\"GetLoops\",[\"b3\"],[],[\"l19\",\"l20\"]],"
              "[\"Fuse\",[\"l19\",\"l20\"],[0],[\"l21\"]],"
              "[\"Split\",[\"l21\",\"None\",32],[1,0],[\"l22\",\"l23\"]],"
              "[\"Bind\",[\"l22\"],[\"blockIdx.x\"],[]],"
              "[\"Bind\",[\"l23\"],[\"threadIdx.x\"],[]]],[]]");
  free(js);
}

/* No data-parallel loop: a unit loop is added above the first loop (or
 * above the block when it has none) and fused, split by 1 and bound. */
static const char reduce_only[] =
    "kernel total(A: f32[16], B: f32[1]):\n"
    "  block root:\n"
    "    for k in 16:\n"
    "      block B(vk: R(16) = k):\n"
    "        reads A[vk]\n"
    "        writes B[0]\n"
    "        init:\n"
    "          B[0] = 0.0\n"
    "        B[0] = B[0] + A[vk]\n";

static const char no_loops[] =
    "kernel twice(A: f32[1], B: f32[1]):\n"
    "  block root:\n"
    "    block B:\n"
    "      reads A[0]\n"
    "      writes B[0]\n"
    "      B[0] = A[0] * 2.0\n";

DG_TEST(baseline_unit_loop) {
  dg_status st;
  char *js = baseline_json(reduce_only, NULL, &st);
  CHECK_MSG(js != NULL, "%s", st.msg);
  CHECK_STREQ(js,
              "[[[\"GetBlock\",[],[\"B\",\"total\"],[\"b0\"]],"
              "[\"GetLoops\",[\"b0\"],[],[\"l1\"]],"
              "[\"AddUnitLoop\",[\"l1\"],[],[\"l2\"]],"
              "[\"Fuse\",[\"l2\"],[0],[\"l3\"]],"
              "[\"Split\",[\"l3\",\"None\",1],[1,0],[\"l4\",\"l5\"]],"
              "[\"Bind\",[\"l4\"],[\"blockIdx.x\"],[]],"
              "[\"Bind\",[\"l5\"],[\"threadIdx.x\"],[]]],[]]");
  free(js);
  /* an empty GetLoops defines nothing: Simplified drops it */
  js = baseline_json(no_loops, NULL, &st);
  CHECK_MSG(js != NULL, "%s", st.msg);
  CHECK_STREQ(js,
              "[[[\"GetBlock\",[],[\"B\",\"twice\"],[\"b0\"]],"
              "[\"AddUnitLoop\",[\"b0\"],[],[\"l1\"]],"
              "[\"Fuse\",[\"l1\"],[0],[\"l2\"]],"
              "[\"Split\",[\"l2\",\"None\",1],[1,0],[\"l3\",\"l4\"]],"
              "[\"Bind\",[\"l3\"],[\"blockIdx.x\"],[]],"
              "[\"Bind\",[\"l4\"],[\"threadIdx.x\"],[]]],[]]");
  free(js);
  /* both run right */
  const char *texts[2] = {reduce_only, no_loops};
  for (int i = 0; i < 2; i++) {
    dg_func *f = ts_parse(texts[i]);
    CHECK(f != NULL);
    sched *s = NULL;
    CHECK_MSG(search_baseline_schedule(f, NULL, &s, &st), "%s", st.msg);
    CHECK(roundtrips(f, s));
    CHECK(runs_right(f, sched_func(s)));
    sched_free(s);
    ir_func_free(f);
  }
}

/* ---- the three-way split ------------------------------------------------------------ */

static char *elementwise(int64_t m, int64_t n) {
  dg_str k;
  dg_str_init(&k);
  dg_str_printf(&k,
                "kernel ew(A: f32[%lld, %lld], B: f32[%lld, %lld]):\n"
                "  block root:\n"
                "    for i, j in grid(%lld, %lld):\n"
                "      block B(vi: S(%lld) = i, vj: S(%lld) = j):\n"
                "        reads A[vi, vj]\n"
                "        writes B[vi, vj]\n"
                "        B[vi, vj] = A[vi, vj] * 3.0 + 1.0\n",
                (long long)m, (long long)n, (long long)m, (long long)n, (long long)m,
                (long long)n, (long long)m, (long long)n);
  return k.s;
}

/* 262145 = 256 * 1024 + 1 iterations: Split [None, 256, 1024] (the first
 * of extent 2, predicated), Reorder to 256, 1024, 2, and the binds; 262144
 * exactly still takes the two-way split. */
DG_TEST(baseline_three_way_split) {
  dg_status st;
  char *text = elementwise(5, 52429); /* 262145 */
  char *js = baseline_json(text, NULL, &st);
  CHECK_MSG(js != NULL, "%s", st.msg);
  CHECK_STREQ(js,
              "[[[\"GetBlock\",[],[\"B\",\"ew\"],[\"b0\"]],"
              "[\"GetLoops\",[\"b0\"],[],[\"l1\",\"l2\"]],"
              "[\"Fuse\",[\"l1\",\"l2\"],[0],[\"l3\"]],"
              "[\"Split\",[\"l3\",\"None\",256,1024],[1,0],[\"l4\",\"l5\",\"l6\"]],"
              "[\"Reorder\",[\"l5\",\"l6\",\"l4\"],[],[]],"
              "[\"Bind\",[\"l5\"],[\"blockIdx.x\"],[]],"
              "[\"Bind\",[\"l6\"],[\"threadIdx.x\"],[]]],[]]");
  free(js);
  dg_func *f = ts_parse(text);
  CHECK(f != NULL);
  sched *s = NULL;
  CHECK_MSG(search_baseline_schedule(f, NULL, &s, &st), "%s", st.msg);
  block_set bs = {.n = 0};
  ir_visit_blocks(f->body, add_block, &bs);
  CHECK_EQ(bs.n, 1);
  CHECK(bound_as_tvm(sched_func(s), bs.items[0], &search_target_sm90));
  CHECK(roundtrips(f, s));
  CHECK(runs_right(f, sched_func(s)));
  sched_free(s);
  ir_func_free(f);
  free(text);

  text = elementwise(256, 1024); /* 262144: not more than the limit */
  js = baseline_json(text, NULL, &st);
  CHECK_MSG(js != NULL, "%s", st.msg);
  CHECK(strstr(js, "[\"Split\",[\"l3\",\"None\",1024],[1,0],[\"l4\",\"l5\"]]") != NULL);
  CHECK(strstr(js, "Reorder") == NULL);
  free(js);
  free(text);

  /* a workload that big: bias_gelu's two blocks, 2048 * 256 each */
  f = wl_build("bias_gelu:m=2048,n=256,dtype=f32", &st);
  CHECK_MSG(f != NULL, "%s", st.msg);
  CHECK_MSG(search_baseline_schedule(f, NULL, &s, &st), "%s", st.msg);
  CHECK_EQ(count_kind(sched_get_trace(s), SCHED_INST_REORDER), 2);
  bs.n = 0;
  ir_visit_blocks(f->body, add_block, &bs);
  for (int i = 0; i < bs.n; i++) CHECK(bound_as_tvm(sched_func(s), bs.items[i], &search_target_sm90));
  sched_free(s);
  ir_func_free(f);
}

/* The limits come from the target. */
DG_TEST(baseline_target_limits) {
  search_target small = search_target_sm90;
  small.max_threads_per_block = 64;
  small.max_threadblocks = 4;
  dg_status st;
  char *text = elementwise(16, 40); /* 640 > 4 * 64 */
  char *js = baseline_json(text, &small, &st);
  CHECK_MSG(js != NULL, "%s", st.msg);
  CHECK(strstr(js, "[\"Split\",[\"l3\",\"None\",4,64],[1,0],[\"l4\",\"l5\",\"l6\"]]") != NULL);
  CHECK(strstr(js, "[\"Reorder\",[\"l5\",\"l6\",\"l4\"],[],[]]") != NULL);
  free(js);
  free(text);
  text = elementwise(4, 12); /* 48 < 64 */
  js = baseline_json(text, &small, &st);
  CHECK_MSG(js != NULL, "%s", st.msg);
  CHECK(strstr(js, "[\"Split\",[\"l3\",\"None\",48],[1,0],[\"l4\",\"l5\"]]") != NULL);
  free(js);
  free(text);
  small.max_threadblocks = 0;
  CHECK(baseline_json(reduce_only, &small, &st) == NULL);
  CHECK_ERR(st, "DefaultGPUSchedule");
}

/* ---- what the pass leaves alone ------------------------------------------------------ */

/* A block with a loop bound already is kept as it is; the other one is
 * scheduled, and the trace does not look the kept one up. */
static const char half_bound[] =
    "kernel two(A: f32[64], B: f32[64], C: f32[64]):\n"
    "  block root:\n"
    "    for i in 64 bind(threadIdx.x):\n"
    "      block B(vi: S(64) = i):\n"
    "        reads A[vi]\n"
    "        writes B[vi]\n"
    "        B[vi] = A[vi] + 1.0\n"
    "    for i_1 in 64:\n"
    "      block C(vi_1: S(64) = i_1):\n"
    "        reads B[vi_1]\n"
    "        writes C[vi_1]\n"
    "        C[vi_1] = B[vi_1] * 2.0\n";

DG_TEST(baseline_keeps_bound_blocks) {
  dg_status st;
  dg_func *f = ts_parse(half_bound);
  CHECK(f != NULL);
  sched *s = NULL;
  CHECK_MSG(search_baseline_schedule(f, NULL, &s, &st), "%s", st.msg);
  char *js = sched_trace_to_json(sched_get_trace(s));
  CHECK_STREQ(js,
              "[[[\"GetBlock\",[],[\"C\",\"two\"],[\"b0\"]],"
              "[\"GetLoops\",[\"b0\"],[],[\"l1\"]],"
              "[\"Fuse\",[\"l1\"],[0],[\"l2\"]],"
              "[\"Split\",[\"l2\",\"None\",64],[1,0],[\"l3\",\"l4\"]],"
              "[\"Bind\",[\"l3\"],[\"blockIdx.x\"],[]],"
              "[\"Bind\",[\"l4\"],[\"threadIdx.x\"],[]]],[]]");
  free(js);
  char *text = ir_print(sched_func(s));
  CHECK(strstr(text, "for i in 64 bind(threadIdx.x):\n      block B(") != NULL);
  free(text);
  CHECK(roundtrips(f, s));
  sched_free(s);
  ir_func_free(f);
}

/* After Blockize the outer block has a child block: it is skipped, and
 * the inner block's own loops are fused and bound. */
DG_TEST(baseline_skips_blocks_with_children) {
  dg_status st;
  dg_func *f = wl_build("gemm:m=8,n=8,k=4,dtype=f32", &st);
  CHECK_MSG(f != NULL, "%s", st.msg);
  sched *pre = sched_new(f, 0);
  int b = sched_get_block(pre, "C", "main", &st);
  int l[3];
  CHECK_MSG(b >= 0 && sched_get_loops(pre, b, l, 3, &st) == 3, "%s", st.msg);
  CHECK_MSG(sched_blockize(pre, l[1], true, &st) >= 0, "%s", st.msg);
  const dg_func *g = sched_func(pre);
  sched *s = NULL;
  CHECK_MSG(search_baseline_schedule(g, NULL, &s, &st), "%s", st.msg);
  const sched_trace *t = sched_get_trace(s);
  CHECK_EQ(count_kind(t, SCHED_INST_GET_BLOCK), 1);
  CHECK_EQ(t->insts[0].kind, SCHED_INST_GET_BLOCK);
  CHECK_STREQ(t->insts[0].attrs[0].s, "C");
  CHECK_EQ(count_kind(t, SCHED_INST_FUSE), 1);
  /* the inner block's loops j, k: j fused alone, split by 8 */
  char *js = sched_trace_to_json(t);
  CHECK(strstr(js, "[\"GetLoops\",[\"b0\"],[],[\"l1\",\"l2\"]]") != NULL);
  CHECK(strstr(js, "[\"Fuse\",[\"l1\"],[0],[\"l3\"]]") != NULL);
  CHECK(strstr(js, "[\"Split\",[\"l3\",\"None\",8],[1,0],[\"l4\",\"l5\"]]") != NULL);
  free(js);
  CHECK(roundtrips(g, s));
  sched_free(s);
  sched_free(pre);
  ir_func_free(f);
}

/* ---- errors -------------------------------------------------------------------------- */

/* One loop for two iteration variables: TVM's pairing fails (it stops at
 * an internal check); here an error names the block. */
static const char unpaired[] =
    "kernel pairs(A: f32[4, 2], B: f32[4, 2]):\n"
    "  block root:\n"
    "    for i in 8:\n"
    "      block Bp(vi: S(4) = i // 2, vj: S(2) = i % 2):\n"
    "        reads A[vi, vj]\n"
    "        writes B[vi, vj]\n"
    "        B[vi, vj] = A[vi, vj]\n";

/* Spatial loops around a reduction loop cannot be fused. */
static const char split_spatial[] =
    "kernel rowsum(A: f32[4, 8, 2], B: f32[4, 2]):\n"
    "  block root:\n"
    "    for i, k, j in grid(4, 8, 2):\n"
    "      block Brs(vi: S(4) = i, vk: R(8) = k, vj: S(2) = j):\n"
    "        reads A[vi, vk, vj]\n"
    "        writes B[vi, vj]\n"
    "        init:\n"
    "          B[vi, vj] = 0.0\n"
    "        B[vi, vj] = B[vi, vj] + A[vi, vk, vj]\n";

DG_TEST(baseline_errors_name_the_block) {
  dg_status st;
  dg_func *f = ts_parse(unpaired);
  CHECK(f != NULL);
  sched *s = (sched *)1;
  CHECK(!search_baseline_schedule(f, NULL, &s, &st));
  CHECK(s == NULL);
  CHECK_ERR(st, "DefaultGPUSchedule: block Bp");
  CHECK_ERR(st, "1 loops above it but 2 iteration variables");
  ir_func_free(f);
  f = ts_parse(split_spatial);
  CHECK(f != NULL);
  CHECK(!search_baseline_schedule(f, NULL, &s, &st));
  CHECK_ERR(st, "DefaultGPUSchedule: block Brs: Fuse");
  ir_func_free(f);
}

/* ---- the CLI ------------------------------------------------------------------------- */

DG_TEST(baseline_cli_defaults) {
  char *out = NULL;
  int rc = dg_test_run_dragon("run 'gemm:m=64,n=48,k=32,dtype=f32' --target c", NULL, &out);
  CHECK_MSG(rc == 0, "rc %d: %s", rc, out);
  CHECK(strstr(out, "schedule  DefaultGPUSchedule (untuned baseline)\n") != NULL);
  CHECK(strstr(out, "check     pass") != NULL);
  free(out);
  rc = dg_test_run_dragon("run 'gemm:m=64,n=48,k=32,dtype=f32' --target c --trace "
                          "tests/data/traces/gemm_bind.json",
                          NULL, &out);
  CHECK_MSG(rc == 0, "rc %d: %s", rc, out);
  CHECK(strstr(out, "schedule  tests/data/traces/gemm_bind.json\n") != NULL);
  free(out);
  rc = dg_test_run_dragon("run 'gemm:m=16,n=8,k=8,dtype=f32' --target cpu --repeat 1", NULL, &out);
  CHECK_MSG(rc == 0, "rc %d: %s", rc, out);
  CHECK(strstr(out, "DefaultGPUSchedule") == NULL);
  free(out);
  /* a kernel the baseline cannot schedule: the reason, exit 1 */
  char path[300];
  snprintf(path, sizeof path, "%s/unpaired.kt", dg_test_tmpdir());
  FILE *fp = fopen(path, "w");
  CHECK(fp != NULL);
  fputs(unpaired, fp);
  fclose(fp);
  char args[400];
  snprintf(args, sizeof args, "run %s --target c", path);
  rc = dg_test_run_dragon(args, NULL, &out);
  CHECK_EQ(rc, 1);
  CHECK(strstr(out, "DefaultGPUSchedule: block Bp") != NULL);
  free(out);
  rc = dg_test_run_dragon("run --help", NULL, &out);
  CHECK(rc == 0 && strstr(out, "DefaultGPUSchedule") != NULL);
  free(out);

  /* emit: the baseline's launches */
  rc = dg_test_run_dragon("emit 'gemm:m=64,n=48,k=32,dtype=f32' --target cuda", NULL, &out);
  CHECK_MSG(rc == 0, "rc %d: %s", rc, out);
  CHECK(strstr(out, "__global__") != NULL && strstr(out, "threadIdx.x") != NULL);
  free(out);
  rc = dg_test_run_dragon("emit 'gemm:m=64,n=48,k=32,dtype=f32' --target c", NULL, &out);
  CHECK_MSG(rc == 0, "rc %d: %s", rc, out);
  free(out);
  rc = dg_test_run_dragon("emit --help", NULL, &out);
  CHECK(rc == 0 && strstr(out, "DefaultGPUSchedule") != NULL);
  free(out);
}
