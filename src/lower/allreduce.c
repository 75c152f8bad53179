/* allreduce.c: cross-thread reductions (TVM's LowerCrossThreadReduction).
 *
 * A reduction block whose reduce binding uses a loop bound to threadIdx is
 * computed by several threads together. The pattern recognised is the one
 * MetaSchedule's CrossThreadReduction rule writes: starting at a loop L,
 * loops perfectly nested down to the block, each used only by the block's
 * reduce bindings, one of them bound to threadIdx (the reduction threads),
 * and a body `B[i] = B[i] op rhs` with op one of + * min max. It becomes:
 *
 *   acc[0] = identity(op)                       per thread
 *   for the serial loops of the nest:
 *     if (predicate on the reduction) acc[0] = acc[0] op rhs
 *   red[0] = allreduce(op, acc[0]) over the reduction threads
 *   if (the rest of the predicate)              (thread 0 only for shared/global B)
 *     B[i] = (first iteration ? init : B[i]) op red[0]
 *
 * "first iteration" is the init condition of the block with the nest's
 * variables at 0, so a reduction loop outside L still accumulates. The
 * allreduce itself (warp shuffles, shared memory across warps) is written
 * by codegen; the C target emulates the same tree of operations.
 *
 * It does not handle reductions over two thread tags at once or over a tag
 * whose lower tags have more than one thread (the threads of one group must
 * be consecutive lanes); those are rejected with the reason.
 */
#include <math.h>
#include <string.h>

#include "lower/lower_impl.h"

#define MAX_CHAIN 32

static bool expr_uses_any(const dg_expr *e, dg_var *const *vs, int n) {
  for (int i = 0; i < n; i++)
    if (ir_expr_uses_var(e, vs[i])) return true;
  return false;
}

static bool uses_other_var(const dg_expr *e, dg_var *const *vs, int n) {
  if (!e) return false;
  if (e->kind == DG_EXPR_VAR) {
    for (int i = 0; i < n; i++)
      if (vs[i] == e->var) return false;
    return true;
  }
  if (e->kind == DG_EXPR_LOAD || e->kind == DG_EXPR_CALL) {
    for (int i = 0; i < e->nargs; i++)
      if (uses_other_var(e->args[i], vs, n)) return true;
    return false;
  }
  return uses_other_var(e->a, vs, n) || uses_other_var(e->b, vs, n) ||
         uses_other_var(e->c, vs, n);
}

static bool same_indices(dg_expr *const *a, dg_expr *const *b, int n) {
  for (int i = 0; i < n; i++)
    if (!ir_expr_equal(a[i], b[i])) return false;
  return true;
}

static dg_expr *identity(dg_func *f, dg_expr_kind op, dg_dtype t) {
  bool fl = dg_dtype_is_float(t);
  switch (op) {
    case DG_EXPR_ADD: return fl ? ir_float(f, 0, t) : ir_int_t(f, 0, t);
    case DG_EXPR_MUL: return fl ? ir_float(f, 1, t) : ir_int_t(f, 1, t);
    case DG_EXPR_MIN:
      if (fl) return ir_float(f, INFINITY, t);
      return ir_int_t(f, t == DG_I64 ? INT64_MAX : t == DG_I32 ? INT32_MAX : 127, t);
    case DG_EXPR_MAX:
      if (fl) return ir_float(f, -INFINITY, t);
      return ir_int_t(f, t == DG_I64 ? INT64_MIN : t == DG_I32 ? INT32_MIN : -128, t);
    default: DG_UNREACHABLE();
  }
}

static void flatten_and(dg_expr *e, dg_expr **out, int *n, int max) {
  if (e->kind == DG_EXPR_AND) {
    flatten_and(e->a, out, n, max);
    flatten_and(e->b, out, n, max);
  } else if (*n < max) {
    out[(*n)++] = e;
  }
}

lw_stmt *lower_cross_thread_reduction(lw_conv *c, const dg_stmt *loop, bool *matched,
                                      dg_status *st) {
  *matched = false;
  const dg_stmt *chain[MAX_CHAIN];
  int n = 0;
  const dg_stmt *s = loop;
  while (s->kind == DG_STMT_FOR) {
    if (n == MAX_CHAIN) return NULL;
    chain[n++] = s;
    s = s->body;
  }
  if (s->kind != DG_STMT_BLOCK) return NULL;
  const dg_block *b = s->block;
  dg_var *vars[MAX_CHAIN];
  int thread_at = -1;
  for (int i = 0; i < n; i++) {
    vars[i] = chain[i]->loop_var;
    const dg_stmt *l = chain[i];
    if (l->loop_kind == DG_LOOP_THREAD && !dg_thread_tag_is_thread(l->tag)) return NULL;
  }
  bool any_reduce = false;
  for (int i = 0; i < b->n_iters; i++) {
    const dg_iter *it = &b->iters[i];
    if (it->kind == DG_ITER_SPATIAL && expr_uses_any(it->binding, vars, n)) return NULL;
    any_reduce |= it->kind == DG_ITER_REDUCE;
  }
  if (!any_reduce) return NULL;
  for (int i = 0; i < n; i++) {
    if (chain[i]->loop_kind != DG_LOOP_THREAD) continue;
    bool used = false;
    for (int j = 0; j < b->n_iters; j++)
      used |= b->iters[j].kind == DG_ITER_REDUCE && ir_expr_uses_var(b->iters[j].binding, vars[i]);
    if (!used) return NULL;
    if (thread_at >= 0) {
      *matched = true;
      dg_fail(st, DG_ERR_INVALID,
              "lower: kernel %s: block %s: reduction over two thread-bound loops (%s, %s)",
              c->k->name, b->name, vars[thread_at]->name, vars[i]->name);
      return NULL;
    }
    thread_at = i;
  }
  if (thread_at < 0) return NULL;
  *matched = true;

  lw_program *p = c->p;
  lw_kernel *k = c->k;
  dg_func *f = p->f;
#define RFAIL(...)                                                                \
  do {                                                                            \
    dg_fail(st, DG_ERR_INVALID, __VA_ARGS__);                                     \
    dg_status_prefix(st, "lower: kernel %s: block %s: cross-thread reduction", k->name, \
                     b->name);                                                    \
    return NULL;                                                                  \
  } while (0)

  const dg_stmt *body = b->body;
  if (body->kind != DG_STMT_STORE) RFAIL("the body is not a single store");
  dg_expr *v = body->value;
  dg_expr_kind op = v->kind;
  if (op != DG_EXPR_ADD && op != DG_EXPR_MUL && op != DG_EXPR_MIN && op != DG_EXPR_MAX)
    RFAIL("the update is not one of + * min max");
  dg_expr *self = NULL, *rhs = NULL;
  if (v->a->kind == DG_EXPR_LOAD && v->a->buf == body->buf &&
      same_indices(v->a->args, body->idx, body->nidx)) {
    self = v->a;
    rhs = v->b;
  } else if (v->b->kind == DG_EXPR_LOAD && v->b->buf == body->buf &&
             same_indices(v->b->args, body->idx, body->nidx)) {
    self = v->b;
    rhs = v->a;
  }
  if (!self || lw_expr_reads_buf(rhs, body->buf))
    RFAIL("the update is not `%s[...] = %s[...] %s rhs`", body->buf->name, body->buf->name,
          dg_expr_kind_name(op));
  if (b->init && (b->init->kind != DG_STMT_STORE || b->init->buf != body->buf ||
                  !same_indices(b->init->idx, body->idx, body->nidx)))
    RFAIL("the init is not a store to %s at the updated element", body->buf->name);
  dg_thread_tag tag = chain[thread_at]->tag;
  int64_t ext = chain[thread_at]->extent;
  if ((ext & (ext - 1)) != 0)
    RFAIL("over %lld threads (a power of two is needed)", (long long)ext);
  if ((tag == DG_TAG_THREAD_Y && k->block[0] != 1) ||
      (tag == DG_TAG_THREAD_Z && (k->block[0] != 1 || k->block[1] != 1)))
    RFAIL("over %s while threadIdx.x%s has more than one thread (the threads of one "
          "reduction must be consecutive)", dg_thread_tag_name(tag),
          tag == DG_TAG_THREAD_Z ? "/y" : "");
  if (k->block[0] * k->block[1] * k->block[2] > 32 &&
      (k->block[0] * k->block[1] * k->block[2]) % 32 != 0)
    RFAIL("in a block of %lld threads (warp shuffles need whole warps)",
          (long long)(k->block[0] * k->block[1] * k->block[2]));
  if (ext > 32 && (k->block[0] * k->block[1] * k->block[2]) != ext)
    RFAIL("over %lld threads of a block of %lld (more than one warp: the reduction must "
          "span the whole block)", (long long)ext,
          (long long)(k->block[0] * k->block[1] * k->block[2]));

  /* The chain's variables: the thread loop names its tag, the others stay. */
  int map0 = c->n_map, r0 = c->ranges.n;
  dg_var *tv = k->tag_var[tag];
  DG_ASSERT(tv);
  c->map[c->n_map++] = (dg_subst){chain[thread_at]->loop_var, ir_var(f, tv)};
  for (int i = 0; i < n; i++)
    if (i != thread_at) ir_ranges_push(&c->ranges, vars[i], 0, chain[i]->extent - 1);
  dg_expr **bind = DG_ANEWN(f->arena, dg_expr *, b->n_iters);
  for (int i = 0; i < b->n_iters; i++) bind[i] = lower_conv_expr(c, b->iters[i].binding);
  for (int i = 0; i < b->n_iters; i++) c->map[c->n_map++] = (dg_subst){b->iters[i].var, bind[i]};
  dg_var *cv[MAX_CHAIN + 1];
  int ncv = 0;
  for (int i = 0; i < n; i++) cv[ncv++] = i == thread_at ? tv : vars[i];

  dg_buffer *acc = lower_new_local(p, k, "normal_reduce_temp", body->buf->dtype);
  dg_buffer *red = lower_new_local(p, k, "red_buf", body->buf->dtype);
  dg_expr *zero = ir_int(f, 0);
  dg_expr *acc_ld = ir_load(f, acc, &zero, 1);
  dg_expr *rhs_c = lower_conv_expr(c, rhs);
  dg_expr *idx_c[DG_MAX_DIMS];
  for (int i = 0; i < body->nidx; i++) idx_c[i] = lower_conv_expr(c, body->idx[i]);
  dg_expr *acc_pred = NULL, *out_pred = NULL;
  if (b->predicate) {
    dg_expr *conj[64];
    int nc = 0;
    flatten_and(lower_conv_expr(c, b->predicate), conj, &nc, 64);
    for (int i = 0; i < nc; i++) {
      bool on_chain = expr_uses_any(conj[i], cv, ncv);
      if (on_chain && uses_other_var(conj[i], cv, ncv)) {
        c->n_map = map0;
        ir_ranges_pop(&c->ranges, c->ranges.n - r0);
        RFAIL("its predicate mixes reduction and other variables in one condition");
      }
      acc_pred = acc_pred ? ir_bin(f, DG_EXPR_AND, acc_pred, conj[i]) : conj[i];
      if (!on_chain) out_pred = out_pred ? ir_bin(f, DG_EXPR_AND, out_pred, conj[i]) : conj[i];
    }
  }
  /* first iteration: the reduce bindings with the nest's variables at 0 */
  dg_subst zmap[MAX_CHAIN + 1];
  for (int i = 0; i < ncv; i++) zmap[i] = (dg_subst){cv[i], ir_int_t(f, 0, cv[i]->dtype)};
  dg_expr *first = NULL;
  for (int i = 0; i < b->n_iters; i++) {
    if (b->iters[i].kind != DG_ITER_REDUCE) continue;
    dg_expr *z = ir_subst_expr(f, bind[i], zmap, ncv);
    dg_expr *eq = ir_bin(f, DG_EXPR_EQ, z, ir_int_t(f, 0, z->dtype));
    first = first ? ir_bin(f, DG_EXPR_AND, first, eq) : eq;
  }
  first = ir_simplify(f, first, &c->ranges);
  dg_expr *init_val = b->init ? lower_conv_expr(c, b->init->value) : NULL;
  c->n_map = map0;
  ir_ranges_pop(&c->ranges, c->ranges.n - r0);

  lw_stmt *update = lw_store(f, acc, &zero, 1, ir_bin(f, op, acc_ld, rhs_c));
  if (acc_pred) update = lw_if(f, acc_pred, update, NULL);
  for (int i = n; i-- > 0;)
    if (i != thread_at) {
      lw_loop_kind lk = chain[i]->loop_kind == DG_LOOP_UNROLLED ? LW_LOOP_UNROLLED : LW_LOOP_SERIAL;
      update = lw_for(f, vars[i], chain[i]->extent, lk, update);
    }
  lw_stmt *ar = lw_copy(f, lw_barrier(f));
  ar->kind = LW_ALLREDUCE;
  ar->combiner = op;
  ar->src = acc;
  ar->dst = red;
  ar->red_tag = tag;
  ar->red_extent = ext;
  if (ext > 32) {
    int64_t nthreads = k->block[0] * k->block[1] * k->block[2];
    ar->scratch = lower_new_shared(p, k, "red_buf_shared", body->buf->dtype, nthreads / 32);
  }
  dg_expr *red_ld = ir_load(f, red, &zero, 1);
  dg_expr *old = ir_load(f, body->buf, idx_c, body->nidx);
  int64_t fv;
  lw_stmt *wb;
  if (!init_val) {
    wb = lw_store(f, body->buf, idx_c, body->nidx, ir_bin(f, op, old, red_ld));
  } else if (ir_is_const_int(first, &fv)) {
    wb = lw_store(f, body->buf, idx_c, body->nidx, ir_bin(f, op, fv ? init_val : old, red_ld));
  } else {
    wb = lw_if(f, first, lw_store(f, body->buf, idx_c, body->nidx, ir_bin(f, op, init_val, red_ld)),
               lw_store(f, body->buf, idx_c, body->nidx, ir_bin(f, op, old, red_ld)));
  }
  if (body->buf->scope != DG_SCOPE_LOCAL) {
    dg_expr *t0 = ir_bin(f, DG_EXPR_EQ, ir_var(f, tv), ir_int(f, 0));
    out_pred = out_pred ? ir_bin(f, DG_EXPR_AND, out_pred, t0) : t0;
  }
  if (out_pred) wb = lw_if(f, out_pred, wb, NULL);
  lw_stmt *parts[4] = {lw_store(f, acc, &zero, 1, identity(f, op, body->buf->dtype)), update,
                       ar, wb};
  return lw_seq(f, parts, 4);
#undef RFAIL
}
