/* rule_ctr.c: CrossThreadReduction (schedule_rule/cross_thread_reduction.cc)
 * with MetaSchedule's CUDA thread extents 4 ... 512.
 *
 * For a reduction block that needs it (TVM's
 * NeedsRFactorOrCrossThreadReduction: trivially bound, perfectly nested
 * spatial and reduction loops, and either too little spatial parallelism
 * for MultiLevelTiling or no reuse at all), the rule returns two sketches:
 * a copy where the reduction runs across the threads of a block, and the
 * schedule untouched. In the copy a thread extent is sampled; if the block
 * can be computed at its first consumer, the consumer's innermost loop is
 * split and bound to threadIdx.x (or the consumer's existing threadIdx.x
 * extent is reused), the block moves under it and its output goes to
 * shared memory; then the reduction loops are moved innermost, fused, split
 * by the thread extent and the inner part bound to threadIdx.x.
 *
 * The lookups TVM records (GetConsumers, GetLoops) are recorded here too;
 * the other questions are analyses.
 */
#include <string.h>

#include "search/space_impl.h"

static const int64_t thread_extents[] = {4, 8, 16, 32, 64, 128, 256, 512};

static dg_stmt *single(dg_stmt *s) {
  while (s && s->kind == DG_STMT_SEQ && s->n == 1) s = s->stmts[0];
  return s;
}

static bool needs_ctr(space_ctx *c, sched *s, dg_block *b) {
  if (b->n_writes == 0 || !space_is_reduction(s, b) || !space_trivial_binding(s, b) ||
      space_block_is_tiled(b))
    return false;
  dg_stmt *loops[64];
  int n = space_block_loops(s, b, loops, 64);
  bool has_red = false;
  int64_t space_len = 1, red_len = 1;
  for (int i = 0; i < n; i++) {
    space_loop_type t = space_loop_iter_type(loops[i]);
    if (t == SPACE_LOOP_OPAQUE) return false;
    if (t == SPACE_LOOP_REDUCE) {
      has_red = true;
      red_len *= loops[i]->extent;
    } else {
      space_len *= loops[i]->extent;
    }
    dg_stmt *body = single(loops[i]->body);
    if (i < n - 1 ? body != loops[i + 1] : !(body->kind == DG_STMT_BLOCK && body->block == b))
      return false;
  }
  if (!has_red) return false;
  if (space_needs_mlt(s, b))
    return !(space_len >= red_len || space_len > c->t->max_threads_per_block);
  return red_len > 1;
}

/* The lowest common ancestor of the consumers among the loops and blocks
 * above them (TVM's srefs: sequences do not count). */
static dg_stmt *lca_stmt(sched *s, const int *cons, int n) {
  sched_path p0, p;
  if (!sched_locate_block(s->f, space_block(s, cons[0]), &p0)) return NULL;
  int common = p0.n;
  for (int k = 1; k < n; k++) {
    if (!sched_locate_block(s->f, space_block(s, cons[k]), &p)) return NULL;
    int i = 0;
    while (i < common && i < p.n && p.stmts[i] == p0.stmts[i]) i++;
    common = i;
  }
  while (common > 0 && p0.stmts[common - 1]->kind != DG_STMT_FOR &&
         p0.stmts[common - 1]->kind != DG_STMT_BLOCK)
    common--;
  return common ? p0.stmts[common - 1] : NULL;
}

/* The threadIdx.x extent bound in the trace: the factor of the Split that
 * made the first loop bound to threadIdx.x. */
static bool thread_extent_from_trace(sched *s, sched_val *out, dg_status *st) {
  const sched_trace *t = sched_get_trace(s);
  for (int i = 0; i < t->n; i++) {
    const sched_inst *in = &t->insts[i];
    if (in->kind != SCHED_INST_BIND || in->attrs[0].kind != SV_STR ||
        strcmp(in->attrs[0].s, "threadIdx.x") != 0)
      continue;
    int loop = (int)in->inputs[0].i;
    for (int j = 0; j < t->n; j++) {
      const sched_inst *sp = &t->insts[j];
      if (sp->kind != SCHED_INST_SPLIT) continue;
      for (int k = 0; k < sp->n_outputs; k++)
        if (sp->outputs[k] == loop) {
          if (sp->inputs[1 + k].kind == SV_NONE)
            return dg_fail(st, DG_ERR_INVALID,
                           "CrossThreadReduction: the threadIdx.x extent is inferred by its Split");
          *out = sp->inputs[1 + k];
          return true;
        }
    }
  }
  return dg_fail(st, DG_ERR_INVALID, "CrossThreadReduction: no threadIdx.x extent in the trace");
}

static bool in_thread_scope(sched *s, const int *loops, int n) {
  for (int i = 0; i < n; i++) {
    dg_stmt *l = space_loop(s, loops[i]);
    if (l && l->loop_kind == DG_LOOP_THREAD && dg_thread_tag_is_thread(l->tag)) return true;
  }
  return false;
}

static bool transform(space_ctx *c, sched *s, int block, dg_status *st) {
  (void)c;
  /* Step 2: can the block be computed at its first consumer? */
  bool fusible = false;
  int target_loop = -1, target_block = -1, innermost = -1;
  if (space_block(s, block)->n_writes == 1) {
    int cons[64];
    int nc = sched_get_consumers(s, block, cons, 64, st);
    if (nc < 0) return false;
    dg_stmt *lca = nc > 0 ? lca_stmt(s, cons, nc) : NULL;
    /* several consumers that share no loop cannot all be fused with */
    bool apart = nc > 1 && (!lca || lca->kind == DG_STMT_BLOCK);
    if (nc > 0 && !space_needs_mlt(s, space_block(s, cons[0])) && !apart) {
      int tl[64], bl[64];
      int nt = sched_get_loops(s, cons[0], tl, 64, st);
      int nb = nt < 0 ? -1 : sched_get_loops(s, block, bl, 64, st);
      if (nt < 0 || nb < 0) return false;
      int pos = -1, i;
      for (i = 0; i < nb && i < nt; i++) {
        if (space_loop_iter_type(space_loop(s, bl[i])) != SPACE_LOOP_SPATIAL) break;
        if (space_loop(s, tl[i]) == lca) {
          i++;
          break;
        }
      }
      pos = i - 1;
      if (pos >= 0) {
        fusible = true;
        target_loop = tl[pos];
        target_block = cons[0];
        innermost = tl[nt - 1];
      }
    }
  }
  /* Step 3: the thread extent, and the fusion */
  int n_ext = (int)DG_ARRAY_LEN(thread_extents);
  int ext = space_sample_uniform(s, thread_extents, n_ext, st);
  if (ext < 0) return false;
  sched_val extent = {.kind = SV_RV, .i = ext};
  if (fusible) {
    int tl[64];
    int nt = sched_get_loops(s, target_block, tl, 64, st);
    if (nt < 0) return false;
    if (!in_thread_scope(s, tl, nt)) {
      sched_val f[2] = {{.kind = SV_NONE}, extent};
      int sp[2];
      if (sched_split(s, innermost, f, 2, true, false, sp, st) != 2 ||
          !sched_bind(s, sp[1], DG_TAG_THREAD_X, st))
        return false;
      if (innermost == target_loop) target_loop = sp[0];
    } else if (!thread_extent_from_trace(s, &extent, st)) {
      return false;
    }
    if (!sched_compute_at(s, block, target_loop, true, -1, st) ||
        !sched_set_scope(s, block, 0, DG_SCOPE_SHARED, st))
      return false;
  }
  /* Step 4: reduction loops innermost, fused */
  int loops[64], order[64], red[64], no = 0, nr = 0;
  int n = sched_get_loops(s, block, loops, 64, st);
  if (n < 0) return false;
  for (int i = 0; i < n; i++)
    if (space_loop_iter_type(space_loop(s, loops[i])) == SPACE_LOOP_SPATIAL) order[no++] = loops[i];
  for (int i = 0; i < n; i++)
    if (space_loop_iter_type(space_loop(s, loops[i])) == SPACE_LOOP_REDUCE) {
      order[no++] = loops[i];
      red[nr++] = loops[i];
    }
  if (no != n || nr == 0)
    return dg_fail(st, DG_ERR_INVALID, "CrossThreadReduction: the loops are not spatial and reduction loops");
  if (memcmp(order, loops, sizeof(int) * (size_t)n) != 0 && !sched_reorder(s, order, n, st))
    return false;
  int fused = nr > 1 ? sched_fuse(s, red, nr, true, st) : red[0];
  if (fused < 0) return false;
  /* Step 5: split by the thread extent, bind the inner part */
  sched_val f[2] = {{.kind = SV_NONE}, extent};
  int sp[2];
  return sched_split(s, fused, f, 2, true, false, sp, st) == 2 &&
         sched_bind(s, sp[1], DG_TAG_THREAD_X, st);
}

int rule_ctr_apply(space_ctx *c, sched *s, int block, sched **out, dg_status *st) {
  dg_block *b = space_block(s, block);
  out[0] = s;
  if (!b || c->t->max_threads_per_block <= 0 || c->t->warp_size <= 0 || !needs_ctr(c, s, b))
    return 1;
  sched *tmp = space_copy(c, s, st);
  if (!tmp) return -1;
  if (!transform(c, tmp, block, st)) {
    sched_free(tmp);
    return -1;
  }
  out[0] = tmp;
  out[1] = s;
  return 2;
}
