/* baseline.c: the untuned baseline, TVM's DefaultGPUSchedule
 * (tir/transforms/default_gpu_schedule.cc), as a schedule.
 *
 * The pass works on a traced schedule. MetaSchedule's BlockCollector takes
 * every block of the kernel in post-order (children before parents, the
 * root last) and records a GetBlock for each; then, block by block, a
 * GetChildBlocks skips every block that has child blocks, and ThreadBind
 * schedules the others:
 *   - GetLoops; a block with a loop already bound to a thread axis is left
 *     as it is;
 *   - the data-parallel loops are those whose iteration variable of the
 *     same position is spatial (loops[i] goes with iter_vars[i]); with none,
 *     a unit loop is added (above loops[0], or above the block);
 *   - they are fused (preserve_unit_iters off) into one loop of extent P;
 *   - P > max_threadblocks * max_threads_per_block: Split [None,
 *     max_threadblocks, max_threads_per_block], Reorder the two inner ones
 *     outermost, Bind them to blockIdx.x and threadIdx.x (the remainder
 *     runs serially inside each thread);
 *   - otherwise Split [None, min(P, max_threads_per_block)] and Bind the
 *     two to blockIdx.x and threadIdx.x.
 * Splits keep unit iterators (TVM's default).
 *
 * The schedule handed back carries that trace simplified as TVM simplifies
 * traces for its database (Trace::Simplified): the lookups whose results
 * nothing uses (the GetChildBlocks checks, the root's GetBlock, the
 * lookups of blocks left alone) are dropped, so for a single block the
 * trace is GetBlock, GetLoops, Fuse, Split, Bind, Bind. Dropping pure steps
 * does not change the kernel.
 *
 * TVM stops with an internal check where a block's loops and iteration
 * variables do not pair up, and raises a schedule error where a primitive
 * refuses a step (data-parallel loops that are not directly nested, say);
 * here both are a status naming the block. Not done: the pass's selection
 * of the functions that run on the GPU (a dg_func is one kernel).
 */
#include "search/space_impl.h"

/* The names of every block under s, post-order (BlockCollector). */
static void collect_blocks(const dg_stmt *s, const char **names, int *n, int max) {
  if (!s) return;
  switch (s->kind) {
    case DG_STMT_FOR: collect_blocks(s->body, names, n, max); break;
    case DG_STMT_SEQ:
      for (int i = 0; i < s->n; i++) collect_blocks(s->stmts[i], names, n, max);
      break;
    case DG_STMT_IF:
      collect_blocks(s->then_s, names, n, max);
      collect_blocks(s->else_s, names, n, max);
      break;
    case DG_STMT_BLOCK:
      collect_blocks(s->block->body, names, n, max);
      if (*n < max) names[*n] = s->block->name;
      (*n)++;
      break;
    case DG_STMT_STORE: break;
  }
}

enum { BASELINE_MAX_LOOPS = 256 };

/* Binds the fused loop (TVM's ThreadBind after the Fuse). */
static bool bind_fused(sched *s, int fused, const search_target *t, dg_status *st) {
  int64_t product = space_loop(s, fused)->extent;
  if (product > t->max_threadblocks * t->max_threads_per_block) {
    sched_val f[3] = {{.kind = SV_NONE},
                      {.kind = SV_INT, .i = t->max_threadblocks},
                      {.kind = SV_INT, .i = t->max_threads_per_block}};
    int sp[3];
    if (sched_split(s, fused, f, 3, true, false, sp, st) != 3) return false;
    int order[3] = {sp[1], sp[2], sp[0]};
    return sched_reorder(s, order, 3, st) && sched_bind(s, sp[1], DG_TAG_BLOCK_X, st) &&
           sched_bind(s, sp[2], DG_TAG_THREAD_X, st);
  }
  int64_t threads = product < t->max_threads_per_block ? product : t->max_threads_per_block;
  sched_val f[2] = {{.kind = SV_NONE}, {.kind = SV_INT, .i = threads}};
  int sp[2];
  return sched_split(s, fused, f, 2, true, false, sp, st) == 2 &&
         sched_bind(s, sp[0], DG_TAG_BLOCK_X, st) && sched_bind(s, sp[1], DG_TAG_THREAD_X, st);
}

static bool thread_bind(sched *s, int block, const search_target *t, dg_status *st) {
  int loops[BASELINE_MAX_LOOPS];
  int n = sched_get_loops(s, block, loops, BASELINE_MAX_LOOPS, st);
  if (n < 0) return false;
  for (int i = 0; i < n; i++)
    if (space_loop(s, loops[i])->loop_kind == DG_LOOP_THREAD) return true;
  const dg_block *b = space_block(s, block);
  if (n != b->n_iters && !(n == 0 && b->n_iters == 1))
    return dg_fail(st, DG_ERR_INVALID,
                   "%d loops above it but %d iteration variables; the loops are paired with the "
                   "iteration variables one to one",
                   n, b->n_iters);
  int dp[BASELINE_MAX_LOOPS];
  int n_dp = 0;
  for (int i = 0; i < n; i++)
    if (b->iters[i].kind == DG_ITER_SPATIAL) dp[n_dp++] = loops[i];
  if (n_dp == 0) {
    int unit = sched_add_unit_loop(s, n ? loops[0] : block, st);
    if (unit < 0) return false;
    dp[n_dp++] = unit;
  }
  int fused = sched_fuse(s, dp, n_dp, false, st);
  return fused >= 0 && bind_fused(s, fused, t, st);
}

bool search_baseline_schedule(const dg_func *f, const search_target *t, sched **out,
                              dg_status *st) {
  dg_status_ok(st);
  *out = NULL;
  if (!t) t = &search_target_sm90;
  if (t->max_threads_per_block < 1 || t->max_threadblocks < 1)
    return dg_fail(st, DG_ERR_INVALID,
                   "DefaultGPUSchedule: the target allows %lld threads per block and %lld blocks",
                   (long long)t->max_threads_per_block, (long long)t->max_threadblocks);
  sched *s = sched_new(f, 0);
  int n = 0;
  collect_blocks(sched_func(s)->body, NULL, &n, 0);
  const char **names = dg_malloc(sizeof(const char *) * (size_t)(n ? n : 1));
  int *blocks = dg_malloc(sizeof(int) * (size_t)(n ? n : 1));
  int *kids = dg_malloc(sizeof(int) * (size_t)(n ? n : 1));
  int m = 0;
  collect_blocks(sched_func(s)->body, names, &m, n);
  bool ok = true;
  for (int i = 0; i < n && ok; i++) {
    blocks[i] = sched_get_block(s, names[i], sched_func(s)->name, st);
    ok = blocks[i] >= 0;
    if (!ok) dg_status_prefix(st, "DefaultGPUSchedule: block %s", names[i]);
  }
  for (int i = 0; i < n && ok; i++) {
    int k = sched_get_child_blocks(s, blocks[i], kids, n, st);
    ok = k >= 0 && (k > 0 || thread_bind(s, blocks[i], t, st));
    if (!ok) dg_status_prefix(st, "DefaultGPUSchedule: block %s", names[i]);
  }
  free(kids);
  free(blocks);
  free(names);
  if (!ok) {
    sched_free(s);
    return false;
  }
  /* the same kernel through the simplified trace */
  sched_trace *simple = sched_trace_simplified(sched_get_trace(s), true);
  sched_free(s);
  s = sched_new(f, 0);
  ok = sched_replay(s, simple, false, false, st);
  sched_trace_free(simple);
  if (!ok) {
    dg_status_prefix(st, "DefaultGPUSchedule: replaying the simplified trace");
    sched_free(s);
    return false;
  }
  *out = s;
  return true;
}
