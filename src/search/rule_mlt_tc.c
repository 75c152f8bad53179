/* rule_mlt_tc.c: MultiLevelTilingTensorCore with MetaSchedule's WMMA groups
 * (schedule_rule/multi_level_tiling_tensor_core.cc), as far as dragon's
 * instruction set reaches.
 *
 * TVM first asks which WMMA group's compute intrinsic the block matches
 * (GetAutoTensorizeMappingInfo): a multiply-accumulate C += A * B of f16
 * operands (cast to the accumulator's f32 or f16), with iterators that
 * index C and A only (the tile's rows), C and B only (its columns), A and B
 * only (the reduction) and, optionally, all three (batch). This file does
 * that match. The sketch TVM then builds starts with ReIndex of the three
 * buffers followed by TransformLayout and TransformBlockLayout to the
 * intrinsic's [m, n, k] form, and later re-lays the shared.dyn accumulator
 * cache into 16x16 tiles with an index map over sampled tile sizes;
 * TransformLayout and TransformBlockLayout are not instructions dragon has
 * (sched.h), so a sketch with TVM's steps cannot be recorded. A matching
 * block is therefore left to MultiLevelTiling, which tiles it like any
 * other GEMM, and the fallback is reported (search_space.n_fallbacks)
 * instead of a sketch that TVM's traces would not replay on. Non-matching
 * blocks are left alone, as in TVM. docs/design-spaces.md has the details.
 */
#include <string.h>

#include "search/space_impl.h"

/* A load of an f16 buffer, possibly cast to `acc`; its buffer or NULL. */
static const dg_expr *f16_operand(const dg_expr *e, dg_dtype acc) {
  if (e->kind == DG_EXPR_CAST && e->dtype == acc) e = e->a;
  return e->kind == DG_EXPR_LOAD && e->buf->dtype == DG_F16 ? e : NULL;
}

static bool load_uses(const dg_expr *load, const dg_var *v) {
  for (int i = 0; i < load->nargs; i++)
    if (ir_expr_uses_var(load->args[i], v)) return true;
  return false;
}

static bool store_uses(const dg_stmt *st, const dg_var *v) {
  for (int i = 0; i < st->nidx; i++)
    if (ir_expr_uses_var(st->idx[i], v)) return true;
  return false;
}

const char *rule_mlt_tc_match(const dg_block *b) {
  if (b->n_writes != 1 || !b->init || !b->body || b->body->kind != DG_STMT_STORE) return NULL;
  const dg_stmt *st = b->body;
  dg_dtype acc = st->buf->dtype;
  if (acc != DG_F32 && acc != DG_F16) return NULL;
  const dg_stmt *init = b->init;
  double zero = -1;
  if (init->kind != DG_STMT_STORE || init->buf != st->buf || init->value->kind != DG_EXPR_FLOAT)
    return NULL;
  zero = init->value->fval;
  if (zero != 0) return NULL;
  const dg_expr *v = st->value;
  if (v->kind != DG_EXPR_ADD || v->a->kind != DG_EXPR_LOAD || v->a->buf != st->buf ||
      v->b->kind != DG_EXPR_MUL)
    return NULL;
  const dg_expr *a = f16_operand(v->b->a, acc), *bb = f16_operand(v->b->b, acc);
  if (!a || !bb || a->buf == bb->buf) return NULL;
  bool rows = false, cols = false, red = false;
  for (int i = 0; i < b->n_iters; i++) {
    const dg_var *x = b->iters[i].var;
    bool in_c = store_uses(st, x), in_a = load_uses(a, x), in_b = load_uses(bb, x);
    if (b->iters[i].kind == DG_ITER_REDUCE) {
      if (in_c || !in_a || !in_b) return NULL;
      red = true;
    } else if (in_c && in_a && !in_b) {
      rows = true;
    } else if (in_c && in_b && !in_a) {
      cols = true;
    } else if (!(in_c && in_a && in_b) && b->iters[i].extent != 1) {
      return NULL;
    }
  }
  if (!rows || !cols || !red) return NULL;
  return acc == DG_F32 ? "wmma_sync_16x16x16_f16f16f32_trans" : "wmma_sync_16x16x16_f16f16f16_trans";
}

int rule_mlt_tc_apply(space_ctx *c, sched *s, int block, sched **out, dg_status *st) {
  (void)st;
  out[0] = s;
  dg_block *b = space_block(s, block);
  if (!b || space_is_root(s, b) || space_block_is_tiled(b)) return 1;
  const char *intrin = rule_mlt_tc_match(b);
  if (!intrin) return 1;
  if (!c->n_fallbacks++)
    snprintf(c->fallback, sizeof c->fallback,
             "block %.60s matches %s; its sketch needs TransformLayout, which dragon lacks, so "
             "MultiLevelTiling tiles it",
             b->name, intrin);
  return 1;
}
