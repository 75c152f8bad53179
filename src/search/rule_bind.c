/* rule_bind.c: AutoBind (schedule_rule/auto_bind.cc) and the
 * BindBlockThreadIdx step it shares with the RewriteUnboundBlock
 * postprocessor (schedule/cuda/thread_bind.cc).
 *
 * A block that is not the root, not tiled by MultiLevelTiling and not yet
 * under both blockIdx and threadIdx gets its leading spatial loops fused
 * (up to the first loop that is not serial or holds more than one
 * statement; a unit loop is added when there is no spatial loop); if only
 * threadIdx is bound already, the fused loop is bound to blockIdx.x.
 * Otherwise the fused loop is split by a thread extent and bound to
 * blockIdx.x / threadIdx.x, or, beyond max_threadblocks x
 * max_threads_per_block iterations, split in three with the remainder
 * serial and innermost. AutoBind samples the thread extent from
 * {32, ..., 1024}.
 */
#include "search/space_impl.h"

static const int64_t thread_extents[] = {32, 64, 128, 256, 512, 1024};

static bool single_stmt(const dg_stmt *s) { return s->kind != DG_STMT_SEQ || s->n == 1; }

/* The thread extent: sampled among the candidates <= max_extent, a
 * constant when one or none is left. */
static bool factor(sched *s, const int64_t *cands, int n, int64_t max_extent, sched_val *out,
                   dg_status *st) {
  int64_t keep[64];
  int k = 0;
  for (int i = 0; i < n && k < 64; i++)
    if (cands[i] <= max_extent) keep[k++] = cands[i];
  if (k <= 1) {
    *out = (sched_val){.kind = SV_INT, .i = k ? keep[0] : max_extent};
    return true;
  }
  int v = space_sample_uniform(s, keep, k, st);
  *out = (sched_val){.kind = SV_RV, .i = v};
  return v >= 0;
}

static bool bind_spatial_loop(sched *s, int loop, const search_target *t, const int64_t *cands,
                              int n_cands, dg_status *st) {
  int64_t extent = space_loop(s, loop)->extent;
  if (extent <= t->max_threadblocks * t->max_threads_per_block) {
    int64_t cap = extent < t->max_threads_per_block ? extent : t->max_threads_per_block;
    sched_val f[2] = {{.kind = SV_NONE}};
    if (n_cands) {
      if (!factor(s, cands, n_cands, cap, &f[1], st)) return false;
    } else {
      f[1] = (sched_val){.kind = SV_INT, .i = cap};
    }
    int sp[2];
    return sched_split(s, loop, f, 2, true, false, sp, st) == 2 &&
           sched_bind(s, sp[0], DG_TAG_BLOCK_X, st) && sched_bind(s, sp[1], DG_TAG_THREAD_X, st);
  }
  sched_val f[3] = {{.kind = SV_NONE},
                    {.kind = SV_INT, .i = t->max_threadblocks},
                    {.kind = SV_INT, .i = t->max_threads_per_block}};
  int sp[3];
  if (sched_split(s, loop, f, 3, true, false, sp, st) != 3) return false;
  int order[3] = {sp[1], sp[2], sp[0]};
  return sched_reorder(s, order, 3, st) && sched_bind(s, sp[1], DG_TAG_BLOCK_X, st) &&
         sched_bind(s, sp[2], DG_TAG_THREAD_X, st);
}

bool space_bind_block_threads(sched *s, int block, const search_target *t, const int64_t *cands,
                              int n_cands, dg_status *st) {
  dg_block *b = space_block(s, block);
  if (!b || space_is_root(s, b) || space_block_is_tiled(b)) return true;
  dg_stmt *loops[64];
  int n = space_block_loops(s, b, loops, 64);
  int i_block = -1, i_thread = -1, i_multi = -1, i_spatial = -1;
  for (int i = 0; i < n; i++) {
    const dg_stmt *l = loops[i];
    bool bound = l->loop_kind == DG_LOOP_THREAD;
    if (bound && dg_thread_tag_is_block(l->tag) && i_block == -1) i_block = i;
    if (bound && dg_thread_tag_is_thread(l->tag) && i_thread == -1) i_thread = i;
    if (l->loop_kind != DG_LOOP_SERIAL && i_multi == -1) i_multi = i;
    if (!single_stmt(l->body) && i_multi == -1) i_multi = i + 1;
    if (space_loop_iter_type(l) == SPACE_LOOP_SPATIAL && i_spatial == i - 1) i_spatial++;
  }
  if (i_multi == -1) i_multi = n;
  if (i_block != -1 && i_thread != -1) return true;
  if (i_block != -1)
    return dg_fail(st, DG_ERR_INVALID, "block %s is bound to blockIdx but not to threadIdx",
                   b->name);
  int rv[65];
  int nl = sched_get_loops(s, block, rv + 1, 64, st);
  if (nl < 0) return false;
  int *lrv = rv + 1;
  if (i_spatial == -1) {
    int unit = sched_add_unit_loop(s, nl ? lrv[0] : block, st);
    if (unit < 0) return false;
    lrv = rv;
    lrv[0] = unit;
    nl++;
    i_spatial = 0;
    if (i_thread != -1) i_thread++;
    i_multi++;
  }
  if (i_thread != -1) {
    int num = i_multi < i_thread ? i_multi : i_thread;
    if (i_spatial + 1 < num) num = i_spatial + 1;
    int again[64];
    int na = sched_get_loops(s, block, again, 64, st);
    if (na < 0) return false;
    if (num < 1 || num > na)
      return dg_fail(st, DG_ERR_INVALID, "block %s has no loop to bind to blockIdx", b->name);
    int fused = space_fuse(s, again, num, st);
    return fused >= 0 && sched_bind(s, fused, DG_TAG_BLOCK_X, st);
  }
  int num = i_multi < i_spatial + 1 ? i_multi : i_spatial + 1;
  if (num < 1 || num > nl)
    return dg_fail(st, DG_ERR_INVALID, "block %s has no loop to bind to threads", b->name);
  int fused = space_fuse(s, lrv, num, st);
  return fused >= 0 && bind_spatial_loop(s, fused, t, cands, n_cands, st);
}

int rule_bind_apply(space_ctx *c, sched *s, int block, sched **out, dg_status *st) {
  out[0] = s;
  return space_bind_block_threads(s, block, c->t, thread_extents, (int)DG_ARRAY_LEN(thread_extents),
                                  st)
             ? 1
             : -1;
}
