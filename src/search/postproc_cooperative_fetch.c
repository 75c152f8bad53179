/* postproc_cooperative_fetch.c: RewriteCooperativeFetch
 * (postproc/rewrite_cooperative_fetch.cc).
 *
 * Walking the trace in order, it tracks the extent of the loop most
 * recently bound to threadIdx.x and threadIdx.y (an Annotate
 * warp_execution sets the x extent to the warp size). Each Annotate
 * meta_schedule.cooperative_fetch seen on the way becomes a task with the
 * extents known at that point and the annotated vector length; then every
 * task runs: the annotation is removed and the copy block's innermost
 * (fused) loop is split as [None, ty?, tx, lanes?] (lanes only if it
 * divides the extent), the lanes loop vectorized and the thread loops
 * bound, so that all threads of a GPU block copy the tile together.
 *
 * A task without a threadIdx.x extent before it, or a handle that no longer
 * resolves, rejects the schedule (TVM raises there).
 */
#include <string.h>

#include "search/space_impl.h"

typedef struct {
  int block;
  int64_t tx, ty, lanes;
} fetch_task;

static bool bound_extent(sched *s, const sched_inst *in, const char *axis, int64_t *out,
                         dg_status *st) {
  if (in->kind != SCHED_INST_BIND || in->attrs[0].kind != SV_STR || strcmp(in->attrs[0].s, axis))
    return false;
  dg_stmt *l = space_loop(s, (int)in->inputs[0].i);
  if (!l) {
    *out = -2;
    dg_fail(st, DG_ERR_INVALID, "the loop bound to %s is gone", axis);
    return true;
  }
  *out = l->extent;
  return true;
}

static bool run_task(sched *s, const fetch_task *k, dg_status *st) {
  if (!sched_unannotate(s, k->block, "meta_schedule.cooperative_fetch", st)) return false;
  int loops[64];
  int n = sched_get_loops(s, k->block, loops, 64, st);
  if (n <= 0) return n == 0 ? dg_fail(st, DG_ERR_INVALID, "the copy block has no loop") : false;
  int fused = loops[n - 1];
  int64_t extent = space_loop(s, fused)->extent;
  int64_t lanes = k->lanes > 0 && extent % k->lanes == 0 ? k->lanes : 1;
  if (k->tx < 1)
    return dg_fail(st, DG_ERR_INVALID, "block %s: no threadIdx.x extent before its annotation",
                   space_block(s, k->block)->name);
  sched_val f[4] = {{.kind = SV_NONE}};
  int nf = 1;
  if (k->ty != -1) f[nf++] = (sched_val){.kind = SV_INT, .i = k->ty};
  f[nf++] = (sched_val){.kind = SV_INT, .i = k->tx};
  if (lanes > 1) f[nf++] = (sched_val){.kind = SV_INT, .i = lanes};
  int sp[4];
  if (sched_split(s, fused, f, nf, true, false, sp, st) != nf) return false;
  int x = k->ty != -1 ? 2 : 1;
  if (lanes > 1 && !sched_vectorize(s, sp[nf - 1], st)) return false;
  if (!sched_bind(s, sp[x], DG_TAG_THREAD_X, st)) return false;
  return k->ty == -1 || sched_bind(s, sp[1], DG_TAG_THREAD_Y, st);
}

bool postproc_cooperative_fetch(sched *s, const search_target *t, dg_status *st) {
  const sched_trace *tr = sched_get_trace(s);
  int64_t tx = -1, ty = -1;
  DG_VEC(fetch_task) tasks = {0};
  bool ok = true;
  for (int i = 0; i < tr->n && ok; i++) {
    const sched_inst *in = &tr->insts[i];
    int64_t e;
    if (bound_extent(s, in, "threadIdx.x", &e, st)) {
      ok = e != -2;
      tx = e;
      continue;
    }
    if (bound_extent(s, in, "threadIdx.y", &e, st)) {
      ok = e != -2;
      ty = e;
      continue;
    }
    if (in->kind != SCHED_INST_ANNOTATE || in->attrs[0].kind != SV_STR) continue;
    if (strcmp(in->attrs[0].s, "warp_execution") == 0) {
      tx = t->warp_size;
      continue;
    }
    if (strcmp(in->attrs[0].s, "meta_schedule.cooperative_fetch") != 0) continue;
    fetch_task k = {.block = (int)in->inputs[0].i, .tx = tx, .ty = ty};
    const sched_val *v = &in->inputs[1];
    if (v->kind == SV_INT) k.lanes = v->i;
    else if (v->kind != SV_RV || !sched_rv_value(s, (int)v->i, &k.lanes))
      ok = dg_fail(st, DG_ERR_INVALID, "instruction %d: the vector length is not an integer", i);
    DG_VEC_PUSH(&tasks, k);
  }
  for (size_t i = 0; i < tasks.len && ok; i++) {
    if (!space_block(s, tasks.data[i].block)) {
      ok = dg_fail(st, DG_ERR_INVALID, "an annotated copy block is gone");
      break;
    }
    ok = run_task(s, &tasks.data[i], st);
  }
  DG_VEC_FREE(&tasks);
  return ok;
}
