/* gen_schedules.c: writes the hand-written GPU schedules in schedules/,
 * one TVM-format trace per MetaSchedule workload (config /0, fp32).
 *
 * Each trace is what MetaSchedule's CUDA design space followed by its
 * postprocessors produces, with decisions chosen by hand for the H200:
 * the design-space part (MultiLevelTiling "SSSRRSRS" with a local write
 * cache and shared read caches, AutoInline, CrossThreadReduction,
 * ParallelizeVectorizeUnroll, AutoBind: sampling instructions carrying the
 * chosen decisions), EnterPostproc, then the postprocessing part
 * (RewriteCooperativeFetch, RewriteUnboundBlock,
 * RewriteParallelVectorizeUnroll, RewriteReductionBlock). The schedules are
 * applied through the schedule API on the real workloads, so a decision
 * that does not fit fails here, not at replay. Why each decision was taken
 * is in schedules/README.md.
 *
 * Not part of the build (the Makefile compiles src/ and tests/ only):
 *   cc -std=c11 -O1 -D_GNU_SOURCE -Iinclude -Isrc scripts/gen_schedules.c \
 *      build/libdragon.a -lm -ldl -lpthread -ljansson -lxgboost -o /tmp/gen
 *   /tmp/gen schedules        (writes schedules/C1D.json ... TBG.json)
 * With a workload name after the directory it writes that one only.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dragon/sched.h"
#include "dragon/wl.h"

#define MAXL 64

/* ---- the schedule under construction; any failure ends the program ---- */

static sched *S;
static const char *CUR;
static dg_status ST;

static void die(const char *what) {
  fprintf(stderr, "gen_schedules: %s: %s: %s\n", CUR, what, ST.msg);
  exit(1);
}

static int chk(int r, const char *what) {
  if (r < 0) die(what);
  return r;
}

static void chkb(bool ok, const char *what) {
  if (!ok) die(what);
}

static sched_val v_int(int64_t x) { return (sched_val){.kind = SV_INT, .i = x}; }
static sched_val v_rv(int x) { return (sched_val){.kind = SV_RV, .i = x}; }
static sched_val v_str(const char *x) { return (sched_val){.kind = SV_STR, .s = x}; }
static sched_val v_none(void) { return (sched_val){.kind = SV_NONE}; }

static int get_block(const char *name) { return chk(sched_get_block(S, name, "main", &ST), name); }
static int get_loops(int b, int *out) { return chk(sched_get_loops(S, b, out, MAXL, &ST), "GetLoops"); }
static int fuse(const int *l, int n) { return n == 1 ? l[0] : chk(sched_fuse(S, l, n, true, &ST), "Fuse"); }
static void bind(int l, dg_thread_tag t) { chkb(sched_bind(S, l, t, &ST), "Bind"); }
static void annotate(int b, const char *key, sched_val v) {
  chkb(sched_annotate(S, b, key, &v, &ST), key);
}

/* Split with constant factors; 0 stands for None (inferred). */
static int split(int loop, const int64_t *f, int n, int *out) {
  sched_val v[8];
  for (int i = 0; i < n; i++) v[i] = f[i] ? v_int(f[i]) : v_none();
  return chk(sched_split(S, loop, v, n, true, false, out, &ST), "Split");
}

/* SamplePerfectTile with a decision, then Split by the sampled handles. */
static void tile(int loop, int n, const int64_t *dec, int *out) {
  int rv[8];
  chk(sched_sample_perfect_tile(S, loop, n, 64, dec, rv, &ST), "SamplePerfectTile");
  sched_val v[8];
  for (int i = 0; i < n; i++) v[i] = v_rv(rv[i]);
  chk(sched_split(S, loop, v, n, true, false, out, &ST), "Split");
}

/* SampleCategorical, uniform over the candidates; returns the handle. */
static int categorical(const int64_t *cands, int n, int64_t choice) {
  double p[16];
  int64_t idx = -1;
  for (int i = 0; i < n; i++) {
    p[i] = 1.0 / n;
    if (cands[i] == choice) idx = i;
  }
  if (idx < 0) {
    snprintf(ST.msg, sizeof ST.msg, "%lld is not a candidate", (long long)choice);
    die("SampleCategorical");
  }
  return chk(sched_sample_categorical(S, cands, p, n, &idx, &ST), "SampleCategorical");
}

static const int64_t UNROLL_STEPS[5] = {0, 16, 64, 512, 1024};
static const int64_t FETCH_LANES[4] = {1, 2, 3, 4};
static const int64_t REDUCE_THREADS[8] = {4, 8, 16, 32, 64, 128, 256, 512};

/* ParallelizeVectorizeUnroll on the root: sample the unroll step. */
static void unroll_rule(int root, int64_t step) {
  int v = categorical(UNROLL_STEPS, 5, step);
  annotate(root, "meta_schedule.unroll_implicit", v_rv(v));
}

/* RewriteParallelVectorizeUnroll: the step moves from the root onto the
 * outermost loop of each block that is not purely spatial. */
static void unroll_postproc(const char *const *reduction_blocks, int n, int64_t step) {
  int root = get_block("root");
  chkb(sched_unannotate(S, root, "meta_schedule.unroll_implicit", &ST), "Unannotate");
  int kids[MAXL];
  chk(sched_get_child_blocks(S, root, kids, MAXL, &ST), "GetChildBlocks");
  if (step == 0) return;
  for (int i = 0; i < n; i++) {
    int loops[MAXL];
    get_loops(get_block(reduction_blocks[i]), loops);
    annotate(loops[0], "pragma_auto_unroll_max_step", v_int(step));
    annotate(loops[0], "pragma_unroll_explicit", v_int(0));
  }
}

/* ---- MultiLevelTiling "SSSRRSRS" + its postprocessing ------------------- */

typedef struct {
  const char *block;     /* the block to tile */
  int64_t tiles[10][5];  /* per loop of the block: 5 factors (spatial), 3 (reduce) */
  int64_t lanes[4];      /* per read buffer: cooperative-fetch vector lanes (1..4) */
  int64_t unroll;        /* pragma_auto_unroll_max_step: 0, 16, 64, 512, 1024 */
  const char *inline_blocks[6]; /* AutoInline: ComputeInline in this order */
  const char *reverse_inline;   /* AutoInline: ReverseComputeInline (an epilogue) */
} mlt_cfg;

typedef struct {
  int block, root;
  int thread_loop;      /* the fused threadIdx.x loop */
  int64_t threads;
  int n_reads;
  int cache[4];         /* the shared read-cache blocks */
  int fetch_rv[4];      /* their cooperative-fetch handles */
} mlt_state;

static void mlt_space(const mlt_cfg *c, mlt_state *m) {
  m->block = get_block(c->block);
  m->root = get_block("root");
  annotate(m->block, "meta_schedule.tiling_structure", v_str("SSSRRSRS"));
  const dg_block *blk = ir_find_block(sched_func(S), c->block);
  int n_iters = blk->n_iters;
  bool is_red[10];
  int64_t spatial_extent = 1;
  for (int i = 0; i < n_iters; i++) {
    is_red[i] = blk->iters[i].kind == DG_ITER_REDUCE;
    if (!is_red[i]) spatial_extent *= blk->iters[i].extent;
  }
  m->n_reads = blk->n_reads;
  int loops[MAXL];
  if (get_loops(m->block, loops) != n_iters) die("loops and iterators differ");
  int pieces[10][5];
  for (int i = 0; i < n_iters; i++) tile(loops[i], is_red[i] ? 3 : 5, c->tiles[i], pieces[i]);
  /* S0 S1 S2 R0 R1 S3 R2 S4 */
  static const char order[] = "SSSRRSRS";
  int ord[64], no = 0, slot_first[8], slot_n[8];
  int s_level = 0, r_level = 0;
  for (int k = 0; k < 8; k++) {
    bool red = order[k] == 'R';
    int level = red ? r_level++ : s_level++;
    slot_first[k] = no;
    for (int i = 0; i < n_iters; i++)
      if (is_red[i] == red) ord[no++] = pieces[i][level];
    slot_n[k] = no - slot_first[k];
  }
  chkb(sched_reorder(S, ord, no, &ST), "Reorder");
  static const dg_thread_tag binds[3] = {DG_TAG_BLOCK_X, DG_TAG_VTHREAD_X, DG_TAG_THREAD_X};
  int fused[3];
  for (int k = 0; k < 3; k++) {
    fused[k] = fuse(&ord[slot_first[k]], slot_n[k]);
    bind(fused[k], binds[k]);
  }
  m->thread_loop = fused[2];
  m->threads = 1;
  for (int i = 0; i < n_iters; i++)
    if (!is_red[i]) m->threads *= c->tiles[i][2];
  annotate(m->block, "meta_schedule.thread_extent_low_inclusive",
           v_int(spatial_extent > 64 ? 32 : 1));
  annotate(m->block, "meta_schedule.thread_extent_high_inclusive", v_int(1024));
  /* write reuse: local, under the threadIdx loop */
  int wc = chk(sched_cache_write(S, m->block, 0, DG_SCOPE_LOCAL, NULL, 0, &ST), "CacheWrite");
  chkb(sched_reverse_compute_at(S, wc, m->thread_loop, true, -1, &ST), "ReverseComputeAt");
  /* read reuse: shared, under the last loop of R0 */
  int r0_last = ord[slot_first[3] + slot_n[3] - 1];
  for (int i = 0; i < m->n_reads; i++) {
    int cr = chk(sched_cache_read(S, m->block, i, DG_SCOPE_SHARED, &m->block, 1, &ST), "CacheRead");
    chkb(sched_compute_at(S, cr, r0_last, true, -1, &ST), "ComputeAt");
    int cl[MAXL];
    int ncl = get_loops(cr, cl);
    int ndim = blk->reads[i].buf->ndim;
    fuse(&cl[ncl - ndim], ndim);
    m->fetch_rv[i] = categorical(FETCH_LANES, 4, c->lanes[i]);
    annotate(cr, "meta_schedule.cooperative_fetch", v_rv(m->fetch_rv[i]));
    m->cache[i] = cr;
  }
  /* AutoInline */
  for (int i = 0; i < 6 && c->inline_blocks[i]; i++)
    chkb(sched_compute_inline(S, get_block(c->inline_blocks[i]), &ST), c->inline_blocks[i]);
  if (c->reverse_inline)
    chkb(sched_reverse_compute_inline(S, get_block(c->reverse_inline), &ST), c->reverse_inline);
  unroll_rule(m->root, c->unroll);
}

static void mlt_postproc(const mlt_cfg *c, mlt_state *m) {
  /* RewriteCooperativeFetch: [None, threads, lanes], lanes vectorized */
  for (int i = 0; i < m->n_reads; i++) {
    chkb(sched_unannotate(S, m->cache[i], "meta_schedule.cooperative_fetch", &ST), "Unannotate");
    int cl[MAXL];
    int ncl = get_loops(m->cache[i], cl);
    int out[3];
    int64_t f[3] = {0, m->threads, c->lanes[i]};
    if (c->lanes[i] > 1) {
      split(cl[ncl - 1], f, 3, out);
      chkb(sched_vectorize(S, out[2], &ST), "Vectorize");
    } else {
      split(cl[ncl - 1], f, 2, out);
    }
    bind(out[1], DG_TAG_THREAD_X);
  }
  /* RewriteParallelVectorizeUnroll */
  unroll_postproc(&c->block, 1, c->unroll);
  /* RewriteReductionBlock: decompose at the first reduction loop */
  int loops[MAXL];
  get_loops(m->block, loops);
  chk(sched_decompose_reduction(S, m->block, loops[3], &ST), "DecomposeReduction");
}

static void mlt(const mlt_cfg *c) {
  mlt_state m;
  memset(&m, 0, sizeof m);
  mlt_space(c, &m);
  chkb(sched_enter_postproc(S, &ST), "EnterPostproc");
  mlt_postproc(c, &m);
}

/* ---- CrossThreadReduction ---------------------------------------------- */

/* A reduction block computed at `at` (a loop of its consumer), its buffer
 * in shared memory, its reduction loops fused and split [None, t] with the
 * inner part bound to threadIdx.x. */
static void cross_thread(const char *name, int at, int t_rv) {
  int b = get_block(name);
  chkb(sched_compute_at(S, b, at, true, -1, &ST), "ComputeAt");
  chkb(sched_set_scope(S, b, 0, DG_SCOPE_SHARED, &ST), "SetScope");
  const dg_block *blk = ir_find_block(sched_func(S), name);
  int n_red = 0;
  for (int i = 0; i < blk->n_iters; i++) n_red += blk->iters[i].kind == DG_ITER_REDUCE;
  int loops[MAXL];
  int n = get_loops(b, loops);
  int f = fuse(&loops[n - n_red], n_red);
  sched_val fac[2] = {v_none(), v_rv(t_rv)};
  int out[2];
  chk(sched_split(S, f, fac, 2, true, false, out, &ST), "Split");
  bind(out[1], DG_TAG_THREAD_X);
}

/* ---- the workloads -------------------------------------------------------- */

/* Tile decisions: {S0 blockIdx, S1 vthread, S2 threadIdx, S3, S4} for a
 * spatial loop, {R0, R1, R2} for a reduction loop. */

static void gen_c1d(void) {
  /* n l co | rl rc */
  mlt_cfg c = {.block = "conv1d_nlc",
               .tiles = {{1, 1, 1, 1, 1}, {16, 1, 4, 1, 2}, {4, 1, 8, 2, 2}, {1, 1, 3}, {4, 4, 4}},
               .lanes = {1, 4},
               .unroll = 512,
               .inline_blocks = {"PadInput"}};
  mlt(&c);
}

static void gen_c2d(void) {
  /* n h w co | rh rw rc */
  mlt_cfg c = {.block = "conv2d_nhwc",
               .tiles = {{1, 1, 1, 1, 1},
                         {14, 1, 4, 2, 1},
                         {14, 1, 8, 1, 1},
                         {2, 1, 4, 2, 4},
                         {1, 7, 1},
                         {1, 1, 7},
                         {1, 1, 3}},
               .lanes = {1, 1},
               .unroll = 512,
               .inline_blocks = {"PadInput"}};
  mlt(&c);
}

static void gen_c3d(void) {
  /* n d h w co | rd rh rw rc */
  mlt_cfg c = {.block = "conv3d_ndhwc",
               .tiles = {{1, 1, 1, 1, 1},
                         {8, 1, 1, 1, 1},
                         {14, 1, 4, 2, 1},
                         {14, 1, 8, 1, 1},
                         {1, 1, 8, 2, 4},
                         {7, 1, 1},
                         {1, 7, 1},
                         {1, 1, 7},
                         {1, 1, 3}},
               .lanes = {1, 1},
               .unroll = 512,
               .inline_blocks = {"PadInput"}};
  mlt(&c);
}

static void gen_cap(void) {
  /* n h w cap_i cap_j co | rh rw cap_k rc */
  mlt_cfg c = {.block = "conv2d_capsule_nhwijc",
               .tiles = {{1, 1, 1, 1, 1},
                         {8, 1, 1, 1, 1},
                         {4, 1, 2, 1, 1},
                         {1, 1, 4, 1, 1},
                         {1, 1, 4, 1, 1},
                         {4, 1, 4, 1, 2},
                         {3, 1, 1},
                         {3, 1, 1},
                         {1, 4, 1},
                         {2, 8, 2}},
               .lanes = {1, 4},
               .unroll = 512,
               .inline_blocks = {"PadInput"}};
  mlt(&c);
}

static void gen_dep(void) {
  /* n h w c | rh rw */
  mlt_cfg c = {.block = "depth_conv2d_nhwc",
               .tiles = {{1, 1, 1, 1, 1}, {14, 1, 8, 1, 1}, {14, 1, 2, 4, 1}, {1, 1, 8, 1, 4}, {1, 1, 3}, {1, 1, 3}},
               .lanes = {1, 1},
               .unroll = 512,
               .inline_blocks = {"PadInput"}};
  mlt(&c);
}

static void gen_dil(void) {
  /* n h w co | rh rw rc (109 = 109 x 1: one output row per block) */
  mlt_cfg c = {.block = "conv2d_nhwc",
               .tiles = {{1, 1, 1, 1, 1},
                         {109, 1, 1, 1, 1},
                         {1, 1, 109, 1, 1},
                         {2, 1, 2, 4, 4},
                         {7, 1, 1},
                         {1, 7, 1},
                         {1, 1, 3}},
               .lanes = {1, 1},
               .unroll = 512,
               .inline_blocks = {"PadInput"}};
  mlt(&c);
}

static void gen_gmm(void) {
  /* b i j | k */
  mlt_cfg c = {.block = "Z",
               .tiles = {{1, 1, 1, 1, 1}, {8, 1, 8, 2, 1}, {8, 1, 8, 1, 2}, {1, 32, 4}},
               .lanes = {4, 4},
               .unroll = 512};
  mlt(&c);
}

static void gen_grp(void) {
  /* n h w co | rh rw rc */
  mlt_cfg c = {.block = "conv2d_nhwc",
               .tiles = {{1, 1, 1, 1, 1},
                         {7, 1, 4, 1, 1},
                         {4, 1, 7, 1, 1},
                         {8, 1, 4, 1, 4},
                         {1, 3, 1},
                         {1, 1, 3},
                         {1, 4, 4}},
               .lanes = {1, 1},
               .unroll = 512,
               .inline_blocks = {"PadInput"}};
  mlt(&c);
}

static void gen_t2d(void) {
  /* n h w co | rh rw rc */
  mlt_cfg c = {.block = "conv2d_transpose_nhwc",
               .tiles = {{1, 1, 1, 1, 1},
                         {1, 1, 8, 1, 1},
                         {1, 1, 8, 1, 1},
                         {64, 1, 2, 1, 2},
                         {1, 1, 4},
                         {1, 1, 4},
                         {8, 8, 8}},
               .lanes = {1, 4},
               .unroll = 512,
               .inline_blocks = {"PadInput"}};
  mlt(&c);
}

static void gen_cbr(void) {
  /* nn yy xx ff | ry rx rc: C2D's tiling, the epilogue in the write-back */
  mlt_cfg c = {.block = "Conv2dOutput",
               .tiles = {{1, 1, 1, 1, 1},
                         {14, 1, 4, 2, 1},
                         {14, 1, 8, 1, 1},
                         {2, 1, 4, 2, 4},
                         {1, 7, 1},
                         {1, 1, 7},
                         {1, 1, 3}},
               .lanes = {1, 1},
               .unroll = 512,
               .inline_blocks = {"PaddedInput", "bias_add", "bn_mul", "bn_add"},
               .reverse_inline = "compute"};
  mlt(&c);
}

static void gen_tbg(void) {
  /* b h i j | k */
  mlt_cfg c = {.block = "C",
               .tiles = {{1, 1, 1, 1, 1}, {12, 1, 1, 1, 1}, {4, 1, 8, 2, 2}, {4, 1, 8, 1, 4}, {1, 16, 4}},
               .lanes = {4, 1},
               .unroll = 512,
               .inline_blocks = {"query_T", "value_T"}};
  mlt(&c);
}

/* NRM: the sum of squares as one cross-thread reduction in one block,
 * computed at its consumer D (the sqrt), as CrossThreadReduction does. */
static void gen_nrm(void) {
  int c = get_block("C");
  int d = get_block("D");
  int root = get_block("root");
  (void)c;
  int t = categorical(REDUCE_THREADS, 8, 512);
  int dl[MAXL];
  get_loops(d, dl);
  sched_val fac[2] = {v_none(), v_rv(t)};
  int dout[2];
  chk(sched_split(S, dl[0], fac, 2, true, false, dout, &ST), "Split");
  bind(dout[1], DG_TAG_THREAD_X);
  cross_thread("C", dout[0], t);
  unroll_rule(root, 1024);
  /* AutoBind: the consumer's outer loop */
  bind(dout[0], DG_TAG_BLOCK_X);
  chkb(sched_enter_postproc(S, &ST), "EnterPostproc");
  static const char *const red[1] = {"C"};
  unroll_postproc(red, 1, 1024);
}

/* SFM: one block per row; the exp inlined, max and sum as cross-thread
 * reductions in shared memory computed at the row, the normalisation
 * spread over the same threads. */
static void gen_sfm(void) {
  int root = get_block("root");
  chkb(sched_compute_inline(S, get_block("T_softmax_exp"), &ST), "ComputeInline");
  int t = categorical(REDUCE_THREADS, 8, 64);
  int norm = get_block("T_softmax_norm");
  int nl[MAXL];
  get_loops(norm, nl);
  sched_val fac[2] = {v_none(), v_rv(t)};
  int nout[2];
  chk(sched_split(S, nl[1], fac, 2, true, false, nout, &ST), "Split");
  bind(nout[1], DG_TAG_THREAD_X);
  cross_thread("T_softmax_expsum", nl[0], t);
  cross_thread("T_softmax_maxelem", nl[0], t);
  unroll_rule(root, 512);
  bind(nl[0], DG_TAG_BLOCK_X);
  chkb(sched_enter_postproc(S, &ST), "EnterPostproc");
  static const char *const red[1] = {"T_softmax_maxelem"};
  unroll_postproc(red, 1, 512);
}

typedef struct {
  const char *name;
  void (*fn)(void);
} workload;

static const workload WORKLOADS[] = {
    {"C1D", gen_c1d}, {"C2D", gen_c2d}, {"C3D", gen_c3d}, {"CAP", gen_cap}, {"DEP", gen_dep},
    {"DIL", gen_dil}, {"GMM", gen_gmm}, {"GRP", gen_grp}, {"T2D", gen_t2d}, {"NRM", gen_nrm},
    {"SFM", gen_sfm}, {"CBR", gen_cbr}, {"TBG", gen_tbg},
};

int main(int argc, char **argv) {
  if (argc < 2) {
    fprintf(stderr, "usage: gen_schedules DIR [WORKLOAD]\n");
    return 2;
  }
  int written = 0;
  for (size_t i = 0; i < DG_ARRAY_LEN(WORKLOADS); i++) {
    const workload *w = &WORKLOADS[i];
    if (argc > 2 && strcmp(argv[2], w->name) != 0) continue;
    CUR = w->name;
    char spec[16];
    snprintf(spec, sizeof spec, "%s/0", w->name);
    dg_func *f = wl_build(spec, &ST);
    if (!f) die("wl_build");
    S = sched_new(f, 0);
    w->fn();
    char *json = sched_trace_to_json(sched_get_trace(S));
    char path[512];
    snprintf(path, sizeof path, "%s/%s.json", argv[1], w->name);
    size_t len = strlen(json);
    char *text = dg_malloc(len + 2);
    memcpy(text, json, len);
    text[len] = '\n';
    text[len + 1] = 0;
    if (!dg_write_file_atomic(path, text, len + 1, &ST)) die(path);
    free(text);
    free(json);
    sched_free(S);
    ir_func_free(f);
    written++;
  }
  fprintf(stderr, "gen_schedules: %d schedules written to %s\n", written, argv[1]);
  return written ? 0 : 1;
}
