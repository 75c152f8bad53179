/* vectorize.c: vectorized loops -> vector stores (TVM's VectorizeLoop, for
 * the accesses CUDA can do as one instruction).
 *
 * A vectorized loop whose body is one store becomes a vector store of
 * `extent` lanes when the lanes are 2, 4 or 8, lanes x element bytes is at
 * most 16, and the store's flat index is base + lane with base a multiple
 * of the lanes (so a float4/uint4 access is aligned). Each load of the
 * value that is contiguous and aligned in the same way is listed as a
 * vector load; other loads stay per lane (lane-invariant or gathers).
 * Anything else (a condition inside, a strided store, 3 lanes) is
 * scalarised into a serial loop, as VectorizeLoop scalarises.
 */
#include "lower/lower_impl.h"

typedef struct {
  dg_func *f;
  dg_ranges r;
  DG_VEC(int) vl;
  int ordinal;
} vctx;

/* Whether buf[idx] is base + lane with base % lanes == 0. */
static bool contiguous(vctx *c, const dg_buffer *b, dg_expr *const *idx, int n, dg_var *lane,
                       int64_t lanes) {
  dg_func *f = c->f;
  dg_expr *fi = lw_flat_index(f, b, idx, n);
  dg_subst z = {lane, ir_int_t(f, 0, lane->dtype)};
  dg_expr *base = ir_simplify(f, ir_subst_expr(f, fi, &z, 1), &c->r);
  dg_expr *rest = ir_simplify(f, ir_sub(f, ir_sub(f, fi, base), ir_var(f, lane)), &c->r);
  int64_t v;
  if (!ir_is_const_int(rest, &v) || v != 0) return false;
  dg_expr *al = ir_bin(f, DG_EXPR_EQ,
                       ir_bin(f, DG_EXPR_FLOORMOD, base, ir_int_t(f, lanes, base->dtype)),
                       ir_int_t(f, 0, base->dtype));
  return ir_prove(f, al, &c->r);
}

static void find_vloads(vctx *c, const dg_expr *e, dg_var *lane, int64_t lanes) {
  if (!e) return;
  if (e->kind == DG_EXPR_LOAD || e->kind == DG_EXPR_CALL) {
    if (e->kind == DG_EXPR_LOAD) {
      int ord = c->ordinal++;
      if (ir_expr_uses_var(e, lane) && contiguous(c, e->buf, e->args, e->nargs, lane, lanes))
        DG_VEC_PUSH(&c->vl, ord);
    }
    for (int i = 0; i < e->nargs; i++) find_vloads(c, e->args[i], lane, lanes);
    return;
  }
  find_vloads(c, e->a, lane, lanes);
  find_vloads(c, e->b, lane, lanes);
  find_vloads(c, e->c, lane, lanes);
}

static lw_stmt *vec(vctx *c, const lw_stmt *s) {
  if (!s) return NULL;
  dg_func *f = c->f;
  switch (s->kind) {
    case LW_SEQ: {
      lw_stmt **xs = DG_ANEWN(f->arena, lw_stmt *, s->n > 0 ? s->n : 1);
      for (int i = 0; i < s->n; i++) xs[i] = vec(c, s->stmts[i]);
      return lw_seq(f, xs, s->n);
    }
    case LW_FOR: {
      if (c->r.n >= (int)DG_ARRAY_LEN(c->r.var)) return (lw_stmt *)s;
      ir_ranges_push(&c->r, s->var, 0, s->extent - 1);
      lw_stmt *body = vec(c, s->body);
      lw_stmt *out = NULL;
      if (s->loop_kind == LW_LOOP_VECTORIZED) {
        const lw_stmt *st = body;
        int64_t n = s->extent;
        if (st->kind == LW_STORE && st->lanes == 1 && (n == 2 || n == 4 || n == 8) &&
            n * dg_dtype_bytes(st->buf->dtype) <= 16 &&
            contiguous(c, st->buf, st->idx, st->nidx, s->var, n)) {
          c->vl.len = 0;
          c->ordinal = 0;
          find_vloads(c, st->value, s->var, n);
          out = lw_copy(f, st);
          out->lanes = (int)n;
          out->lane_var = s->var;
          out->n_vloads = (int)c->vl.len;
          out->vloads = DG_ANEWN(f->arena, int, c->vl.len > 0 ? c->vl.len : 1);
          for (size_t i = 0; i < c->vl.len; i++) out->vloads[i] = c->vl.data[i];
        }
      }
      if (!out) {
        out = lw_copy(f, s);
        out->body = body;
        if (out->loop_kind == LW_LOOP_VECTORIZED) out->loop_kind = LW_LOOP_SERIAL;
      }
      ir_ranges_pop(&c->r, 1);
      return out;
    }
    case LW_IF: {
      lw_stmt *x = lw_copy(f, s);
      x->then_s = vec(c, s->then_s);
      x->else_s = vec(c, s->else_s);
      return x;
    }
    default: return (lw_stmt *)s;
  }
}

bool lower_vectorize(lw_program *p, lw_kernel *k, dg_status *st) {
  (void)st;
  vctx c = {.f = p->f};
  for (int t = 0; t < DG_TAG_COUNT; t++) {
    dg_var *tv = k->tag_var[t];
    if (!tv) continue;
    int d = t == DG_TAG_BLOCK_X || t == DG_TAG_THREAD_X ? 0 : t == DG_TAG_BLOCK_Y || t == DG_TAG_THREAD_Y ? 1 : 2;
    ir_ranges_push(&c.r, tv, 0, (dg_thread_tag_is_block((dg_thread_tag)t) ? k->grid : k->block)[d] - 1);
  }
  k->body = vec(&c, k->body);
  DG_VEC_FREE(&c.vl);
  return true;
}
