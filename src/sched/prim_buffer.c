/* prim_buffer.c: SetScope and StorageAlign (TVM's block_annotate.cc): the
 * two primitives that change how a buffer is stored, not what computes it.
 *
 * SetScope(block, i, scope) moves the buffer the block writes at index i to
 * another storage scope. Buffers are shared by pointer, so changing the one
 * dg_buffer changes it everywhere it is used. Setting the scope it already
 * has is a no-op (as in TVM, even for a parameter); otherwise the buffer
 * must be allocated by the block or a block around it, never a parameter.
 *
 * StorageAlign(block, i, axis, factor, offset) records that the stride of
 * dimension `axis` of the buffer the block writes at index i must be
 * factor * k + offset. It only records: the writing block's annotation
 * "buffer_dim_align" holds a flat int list of quadruples [buffer_index,
 * axis, factor, offset], one per (buffer_index, axis), a later call for the
 * same pair replacing its quadruple (TVM keeps an array of 4-tuples; the
 * flat list is the same data in our annotation kinds). Lowering pads the
 * allocation accordingly. A negative axis counts from the end and is stored
 * normalised; factor must be positive and offset in [0, factor).
 */
#include <string.h>

#include "sched/sched_impl.h"

/* The block allocating buf: b or an enclosing block (NULL: a parameter). */
static dg_block *alloc_site(const dg_func *f, dg_block *b, const dg_buffer *buf) {
  sched_path p;
  DG_ASSERT(sched_locate_block(f, b, &p));
  for (int k = p.n - 1; k >= 0; k--) {
    if (p.stmts[k]->kind != DG_STMT_BLOCK) continue;
    dg_block *x = p.stmts[k]->block;
    for (int i = 0; i < x->n_allocs; i++)
      if (x->allocs[i] == buf) return x;
  }
  return NULL;
}

bool prim_set_scope(prim_call *c, dg_status *st) {
  sched *s = c->s;
  dg_block *b = sched_rv_block(s, &c->inst->inputs[0], "block", st);
  if (!b) return false;
  dg_buffer *buf = sched_access_buffer(s, b, &c->inst->attrs[0], true, NULL, st);
  if (!buf) return false;
  dg_scope scope;
  if (!sched_scope_arg(&c->inst->attrs[1], &scope, st)) return false;
  if (scope == buf->scope) return true;
  if (!alloc_site(s->f, b, buf))
    return dg_fail(st, DG_ERR_INVALID,
                   "buffer %s written by block %s is a kernel parameter: only buffers the "
                   "kernel allocates can change scope",
                   buf->name, b->name);
  buf->scope = scope;
  return true;
}

bool prim_storage_align(prim_call *c, dg_status *st) {
  sched *s = c->s;
  dg_func *f = s->f;
  const sched_val *at = c->inst->attrs;
  dg_block *b = sched_rv_block(s, &c->inst->inputs[0], "block", st);
  if (!b) return false;
  int index;
  dg_buffer *buf = sched_access_buffer(s, b, &at[0], true, &index, st);
  if (!buf) return false;
  int64_t axis, factor, offset;
  if (!sched_val_int(s, &at[1], "axis", &axis, st) ||
      !sched_val_int(s, &at[2], "factor", &factor, st) ||
      !sched_val_int(s, &at[3], "offset", &offset, st))
    return false;
  if (factor <= 0 || factor > INT32_MAX)
    return dg_fail(st, DG_ERR_INVALID, "factor must be a positive integer, got %lld",
                   (long long)factor);
  int nd = buf->ndim;
  if (axis < -nd || axis >= nd)
    return dg_fail(st, DG_ERR_INVALID, "buffer %s has %d dimension%s, so axis must be in [%d, %d), got %lld",
                   buf->name, nd, nd == 1 ? "" : "s", -nd, nd, (long long)axis);
  if (axis < 0) axis += nd;
  if (offset < 0 || offset >= factor)
    return dg_fail(st, DG_ERR_INVALID, "offset must be in [0, %lld) for factor %lld, got %lld",
                   (long long)factor, (long long)factor, (long long)offset);
  if (!alloc_site(f, b, buf))
    return dg_fail(st, DG_ERR_INVALID,
                   "buffer %s written by block %s is a kernel parameter: only buffers the "
                   "kernel allocates can be aligned",
                   buf->name, b->name);
  const dg_ann *old = ir_anns_get(&b->anns, "buffer_dim_align");
  if (old && (old->kind != DG_ANN_INTS || old->nints % 4 != 0))
    return dg_fail(st, DG_ERR_INVALID,
                   "block %s: annotation buffer_dim_align must be a list of quadruples "
                   "[buffer_index, axis, factor, offset]",
                   b->name);
  int n = old ? old->nints : 0;
  int64_t *v = DG_ANEWN(f->arena, int64_t, n + 4);
  if (n) memcpy(v, old->ints, sizeof(int64_t) * (size_t)n);
  int at4 = n;
  for (int i = 0; i < n; i += 4)
    if (v[i] == index && v[i + 1] == axis) at4 = i;
  v[at4] = index;
  v[at4 + 1] = axis;
  v[at4 + 2] = factor;
  v[at4 + 3] = offset;
  ir_anns_set_ints(f, &b->anns, "buffer_dim_align", v, at4 == n ? n + 4 : n);
  return true;
}
