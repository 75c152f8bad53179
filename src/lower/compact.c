/* compact.c: shared and local buffers shrunk to the region they use (TVM's
 * PlanAndUpdateBufferAllocationLocation + CompactBufferAllocation).
 *
 * A cache buffer is declared with the shape of the tensor it caches, but a
 * launch uses only a tile of it. The tile is found where TVM finds it: at
 * the innermost loop enclosing every access (the lowest common ancestor).
 * Loops above it are fixed (their variables stay in the tile's offset);
 * loops below it are relaxed over their ranges; so are the thread indices
 * and virtual threads for a shared buffer, which all threads of a block
 * share. A local buffer is per thread: its thread indices stay fixed, and
 * each enclosing virtual thread gets a leading dimension of its own (as
 * InjectVirtualThread gives every virtual thread its own copy).
 *
 * Per access and dimension: the index with relaxed variables at 0 is the
 * tile's anchor, and interval analysis bounds the index minus the anchor
 * (sound for any index, tight for affine ones); under a condition on the
 * relaxed variables (a cooperative fetch's predicate) the offsets are
 * enumerated instead, as TVM bounds them with the predicate (see
 * exact_box); accesses whose anchors differ by a constant are merged. Where that does not hold the
 * dimension keeps its full extent, which is always correct. Every access is
 * then re-indexed relative to the tile.
 *
 * Like TVM it assumes the schedule does not carry a tile's values from one
 * iteration of a fixed loop to the next.
 *
 * StorageAlign requests (lw_kernel.aligns) pad the tile's last dimension
 * so that the stride of the one before it is factor * k + offset (TVM's
 * shared-memory padding against bank conflicts); a request on another axis
 * is not applied (dense row-major buffers have no other stride to pad).
 * Fragments (wmma.* scopes) are compacted as local buffers are: per warp,
 * with the thread indices fixed.
 */
#include <string.h>

#include "lower/lower_impl.h"

#define MAX_DEPTH 64
#define MAX_VT 3
#define MAX_CONDS 8
/* The most points the exact bound of a predicated access enumerates. */
#define MAX_POINTS (1 << 14)

typedef struct {
  dg_expr **idx;
  int n;
  const lw_stmt *loops[MAX_DEPTH];
  int depth;
  const dg_expr *conds[MAX_CONDS]; /* the conditions of the ifs around it */
  int ncond;
} access;

typedef struct {
  const dg_buffer *buf;
  DG_VEC(access) acc;
  const lw_stmt *stack[MAX_DEPTH];
  int depth;
  const dg_expr *conds[MAX_CONDS];
  int ncond;
  bool too_deep;
} collector;

static void add_access(collector *c, dg_expr **idx, int n) {
  access a = {.idx = idx, .n = n, .depth = c->depth, .ncond = c->ncond};
  memcpy(a.loops, c->stack, sizeof(a.loops[0]) * (size_t)c->depth);
  memcpy(a.conds, c->conds, sizeof(a.conds[0]) * (size_t)c->ncond);
  DG_VEC_PUSH(&c->acc, a);
}

static void collect_expr(collector *c, const dg_expr *e) {
  if (!e) return;
  if (e->kind == DG_EXPR_LOAD || e->kind == DG_EXPR_CALL) {
    for (int i = 0; i < e->nargs; i++) collect_expr(c, e->args[i]);
    if (e->kind == DG_EXPR_LOAD && e->buf == c->buf) add_access(c, e->args, e->nargs);
    return;
  }
  collect_expr(c, e->a);
  collect_expr(c, e->b);
  collect_expr(c, e->c);
}

static void collect(collector *c, const lw_stmt *s) {
  if (!s) return;
  switch (s->kind) {
    case LW_SEQ:
      for (int i = 0; i < s->n; i++) collect(c, s->stmts[i]);
      return;
    case LW_FOR:
      if (c->depth == MAX_DEPTH) {
        c->too_deep = true;
        return;
      }
      c->stack[c->depth++] = s;
      collect(c, s->body);
      c->depth--;
      return;
    case LW_IF: {
      collect_expr(c, s->cond);
      int n0 = c->ncond;
      if (c->ncond < MAX_CONDS) c->conds[c->ncond++] = s->cond;
      collect(c, s->then_s);
      c->ncond = n0;
      collect(c, s->else_s);
      return;
    }
    case LW_STORE:
      for (int i = 0; i < s->nidx; i++) collect_expr(c, s->idx[i]);
      collect_expr(c, s->value);
      if (s->buf == c->buf) add_access(c, s->idx, s->nidx);
      return;
    case LW_WMMA: collect(c, s->body); return; /* its scalar body spans the tiles */
    case LW_BARRIER:
    case LW_ALLREDUCE:
    case LW_ASYNC_COMMIT:
    case LW_ASYNC_WAIT: return; /* compaction runs before the pipeline makes these */
  }
}

/* The new index of a dimension: old - min (simplified), with the virtual
 * thread variables in front for local buffers under vthreads. */
typedef struct {
  dg_expr *min[DG_MAX_DIMS];
  dg_var *vt[MAX_VT];
  int nvt;
  const dg_ranges *r;
} reindex_ctx;

static dg_expr **reindex(dg_func *f, dg_expr *const *idx, int n, void *vctx) {
  reindex_ctx *x = vctx;
  dg_expr **out = DG_ANEWN(f->arena, dg_expr *, n + x->nvt);
  for (int i = 0; i < x->nvt; i++) out[i] = ir_var(f, x->vt[i]);
  for (int d = 0; d < n; d++)
    out[x->nvt + d] = ir_simplify(f, ir_sub(f, idx[d], x->min[d]), x->r);
  return out;
}

static lw_stmt *rewrite(dg_func *f, const lw_stmt *s, const dg_buffer *from, dg_buffer *to,
                        reindex_ctx *x) {
  if (!s) return NULL;
  lw_stmt *c = lw_copy(f, s);
  switch (s->kind) {
    case LW_SEQ:
      c->stmts = DG_ANEWN(f->arena, lw_stmt *, s->n > 0 ? s->n : 1);
      for (int i = 0; i < s->n; i++) c->stmts[i] = rewrite(f, s->stmts[i], from, to, x);
      break;
    case LW_FOR: c->body = rewrite(f, s->body, from, to, x); break;
    case LW_IF:
      c->cond = lw_expr_rebuf(f, s->cond, from, to, reindex, x);
      c->then_s = rewrite(f, s->then_s, from, to, x);
      c->else_s = rewrite(f, s->else_s, from, to, x);
      break;
    case LW_STORE: {
      dg_expr **idx = DG_ANEWN(f->arena, dg_expr *, s->nidx > 0 ? s->nidx : 1);
      for (int i = 0; i < s->nidx; i++) idx[i] = lw_expr_rebuf(f, s->idx[i], from, to, reindex, x);
      c->value = lw_expr_rebuf(f, s->value, from, to, reindex, x);
      if (s->buf == from) {
        c->buf = to;
        c->idx = reindex(f, idx, s->nidx, x);
        c->nidx = to->ndim;
      } else {
        c->idx = idx;
      }
      break;
    }
    case LW_WMMA:
      c->body = rewrite(f, s->body, from, to, x);
      for (int i = 0; i < s->wmma_n; i++)
        if (s->wmma_buf[i] == from) {
          c->wmma_buf[i] = to;
          c->wmma_origin[i] = reindex(f, s->wmma_origin[i], from->ndim, x);
        }
      break;
    case LW_BARRIER:
    case LW_ALLREDUCE:
    case LW_ASYNC_COMMIT:
    case LW_ASYNC_WAIT: break;
  }
  return c;
}

/* ---- the exact region of a predicated access ------------------------------------
 *
 * A cooperative fetch whose fused copy loop does not divide by the threads
 * runs under a predicate (fused < extent); interval analysis of each index
 * ignores it and over-approximates the tile (a 55-row tile becomes 58).
 * TVM bounds such accesses with the predicate (EstimateRegionStrictBound
 * over the fused iterator). Here, when an index's offset from the tile's
 * anchor depends only on the relaxed variables and the conjuncts of the
 * enclosing conditions that do too, the points of those variables are
 * enumerated (at most MAX_POINTS) and the offsets of those that satisfy
 * every such conjunct bound the tile: exact, whatever the form. */

typedef struct {
  const dg_var *var[MAX_DEPTH + DG_TAG_COUNT];
  int64_t extent[MAX_DEPTH + DG_TAG_COUNT];
  int64_t value[MAX_DEPTH + DG_TAG_COUNT];
  int n;
} points;

static int point_var(const points *p, const dg_var *v) {
  for (int i = 0; i < p->n; i++)
    if (p->var[i] == v) return i;
  return -1;
}

/* The value of an integer expression at the current point; false where it
 * has something else (a load, a float, a division by zero). */
static bool eval_int(const dg_expr *e, const points *p, int64_t *out) {
  int64_t a = 0, b = 0;
  switch (e->kind) {
    case DG_EXPR_INT: *out = e->ival; return true;
    case DG_EXPR_VAR: {
      int i = point_var(p, e->var);
      if (i < 0) return false;
      *out = p->value[i];
      return true;
    }
    case DG_EXPR_NOT:
      if (!eval_int(e->a, p, &a)) return false;
      *out = !a;
      return true;
    case DG_EXPR_SELECT:
      if (!eval_int(e->a, p, &a)) return false;
      return eval_int(a ? e->b : e->c, p, out);
    case DG_EXPR_CAST:
      if (!dg_dtype_is_int(e->dtype) && e->dtype != DG_BOOL) return false;
      return eval_int(e->a, p, out);
    case DG_EXPR_ADD: case DG_EXPR_SUB: case DG_EXPR_MUL: case DG_EXPR_FLOORDIV:
    case DG_EXPR_FLOORMOD: case DG_EXPR_MIN: case DG_EXPR_MAX: case DG_EXPR_EQ:
    case DG_EXPR_NE: case DG_EXPR_LT: case DG_EXPR_LE: case DG_EXPR_GT: case DG_EXPR_GE:
    case DG_EXPR_AND: case DG_EXPR_OR:
      if (!eval_int(e->a, p, &a) || !eval_int(e->b, p, &b)) return false;
      break;
    default: return false;
  }
  switch (e->kind) {
    case DG_EXPR_ADD: *out = a + b; return true;
    case DG_EXPR_SUB: *out = a - b; return true;
    case DG_EXPR_MUL: *out = a * b; return true;
    case DG_EXPR_FLOORDIV:
    case DG_EXPR_FLOORMOD: {
      if (b == 0) return false;
      int64_t q = a / b, r = a % b;
      if (r != 0 && ((r < 0) != (b < 0))) {
        q--;
        r += b;
      }
      *out = e->kind == DG_EXPR_FLOORDIV ? q : r;
      return true;
    }
    case DG_EXPR_MIN: *out = a < b ? a : b; return true;
    case DG_EXPR_MAX: *out = a > b ? a : b; return true;
    case DG_EXPR_EQ: *out = a == b; return true;
    case DG_EXPR_NE: *out = a != b; return true;
    case DG_EXPR_LT: *out = a < b; return true;
    case DG_EXPR_LE: *out = a <= b; return true;
    case DG_EXPR_GT: *out = a > b; return true;
    case DG_EXPR_GE: *out = a >= b; return true;
    case DG_EXPR_AND: *out = a && b; return true;
    case DG_EXPR_OR: *out = a || b; return true;
    default: return false;
  }
}

/* Whether every variable of e is one of p's; `used` marks those it names. */
static bool vars_within(const dg_expr *e, const points *p, bool *used) {
  if (!e) return true;
  if (e->kind == DG_EXPR_VAR) {
    int i = point_var(p, e->var);
    if (i < 0) return false;
    used[i] = true;
    return true;
  }
  if (e->kind == DG_EXPR_LOAD || e->kind == DG_EXPR_CALL) return false;
  return vars_within(e->a, p, used) && vars_within(e->b, p, used) && vars_within(e->c, p, used);
}

static int split_and(const dg_expr *e, const dg_expr **out, int n, int cap) {
  if (e->kind == DG_EXPR_AND) {
    n = split_and(e->a, out, n, cap);
    return split_and(e->b, out, n, cap);
  }
  if (n < cap) out[n++] = e;
  return n;
}

/* The offsets diff[0..nd) of an access over the points of p that satisfy
 * the usable conjuncts of its conditions: true with box[d] set when a
 * conjunct was usable and some point satisfies them all. */
static bool exact_box(const access *a, dg_expr *const *diff, int nd, points *p,
                      dg_interval *box) {
  const dg_expr *conj[32], *use[32];
  int nc = 0, nu = 0;
  for (int i = 0; i < a->ncond; i++) nc = split_and(a->conds[i], conj, nc, 32);
  bool used[MAX_DEPTH + DG_TAG_COUNT] = {false};
  for (int d = 0; d < nd; d++)
    if (!vars_within(diff[d], p, used)) return false;
  for (int i = 0; i < nc; i++) {
    bool u2[MAX_DEPTH + DG_TAG_COUNT] = {false};
    if (!vars_within(conj[i], p, u2)) continue;
    for (int j = 0; j < p->n; j++) used[j] |= u2[j];
    use[nu++] = conj[i];
  }
  if (nu == 0) return false;
  int64_t total = 1;
  for (int j = 0; j < p->n; j++) {
    p->value[j] = 0;
    if (!used[j]) continue;
    if (p->extent[j] <= 0) return false;
    total *= p->extent[j];
    if (total > MAX_POINTS) return false;
  }
  bool any = false;
  for (int64_t k = 0; k < total; k++) {
    int64_t rest = k;
    for (int j = 0; j < p->n; j++) {
      if (!used[j]) continue;
      p->value[j] = rest % p->extent[j];
      rest /= p->extent[j];
    }
    bool ok = true;
    for (int i = 0; i < nu && ok; i++) {
      int64_t v;
      if (!eval_int(use[i], p, &v)) return false;
      ok = v != 0;
    }
    if (!ok) continue;
    for (int d = 0; d < nd; d++) {
      int64_t v;
      if (!eval_int(diff[d], p, &v)) return false;
      if (!any || v < box[d].lo) box[d].lo = v;
      if (!any || v > box[d].hi) box[d].hi = v;
      if (d == nd - 1) any = true;
    }
    if (nd == 0) any = true;
  }
  return any;
}

static bool is_shared(const dg_buffer *b) {
  return b->scope == DG_SCOPE_SHARED || b->scope == DG_SCOPE_SHARED_DYN;
}

/* The relaxed variables of access a (loops below the common ancestor,
 * vthreads and thread indices for a shared buffer): their ranges pushed
 * on r, the map setting them to 0 (returns its length), and pt. */
static int relax(dg_func *f, const lw_kernel *k, const access *a, int lca, bool shared,
                 dg_ranges *r, dg_subst *zmap, points *pt) {
  int nz = 0;
  pt->n = 0;
  for (int j = 0; j < a->depth; j++) {
    const lw_stmt *l = a->loops[j];
    bool relaxed = j >= lca || (shared && l->loop_kind == LW_LOOP_VTHREAD);
    if (!relaxed) continue;
    zmap[nz++] = (dg_subst){l->var, ir_int_t(f, 0, l->var->dtype)};
    if (r->n < (int)DG_ARRAY_LEN(r->var)) ir_ranges_push(r, l->var, 0, l->extent - 1);
    pt->var[pt->n] = l->var;
    pt->extent[pt->n++] = l->extent;
  }
  if (shared)
    for (int t = DG_TAG_THREAD_X; t <= DG_TAG_THREAD_Z; t++) {
      dg_var *tv = k->tag_var[t];
      if (!tv) continue;
      zmap[nz++] = (dg_subst){tv, ir_int_t(f, 0, tv->dtype)};
      if (r->n < (int)DG_ARRAY_LEN(r->var))
        ir_ranges_push(r, tv, 0, k->block[t - DG_TAG_THREAD_X] - 1);
      pt->var[pt->n] = tv;
      pt->extent[pt->n++] = k->block[t - DG_TAG_THREAD_X];
    }
  return nz;
}

/* The tile of one buffer; false only on internal limits (then the buffer
 * is left as it is). */
static dg_buffer *compact_one(lw_program *p, lw_kernel *k, dg_buffer *b, lw_stmt **body) {
  dg_func *f = p->f;
  collector c = {.buf = b};
  collect(&c, *body);
  dg_buffer *out = b;
  if (c.too_deep || c.acc.len == 0) goto done;
  /* the lowest common ancestor: the common prefix of the loop stacks */
  int lca = c.acc.data[0].depth;
  for (size_t i = 1; i < c.acc.len; i++) {
    int j = 0;
    while (j < lca && j < c.acc.data[i].depth && c.acc.data[i].loops[j] == c.acc.data[0].loops[j]) j++;
    lca = j;
  }
  bool shared = is_shared(b);
  reindex_ctx x = {0};
  dg_ranges fixed = {0};
  for (int t = 0; t < DG_TAG_COUNT; t++) {
    dg_var *tv = k->tag_var[t];
    if (!tv) continue;
    bool blk = dg_thread_tag_is_block((dg_thread_tag)t);
    int d = t == DG_TAG_BLOCK_X || t == DG_TAG_THREAD_X ? 0 : t == DG_TAG_BLOCK_Y || t == DG_TAG_THREAD_Y ? 1 : 2;
    if (blk || !shared) ir_ranges_push(&fixed, tv, 0, (blk ? k->grid : k->block)[d] - 1);
  }
  for (int j = 0; j < lca; j++) {
    const lw_stmt *l = c.acc.data[0].loops[j];
    if (l->loop_kind == LW_LOOP_VTHREAD) {
      if (shared) continue;
      if (x.nvt == MAX_VT || b->ndim + x.nvt + 1 > DG_MAX_DIMS) goto done;
      x.vt[x.nvt++] = l->var;
    }
    if (fixed.n < (int)DG_ARRAY_LEN(fixed.var)) ir_ranges_push(&fixed, l->var, 0, l->extent - 1);
  }
  /* the exact offsets of predicated accesses, where they can be had */
  dg_interval *box = dg_calloc(c.acc.len * (size_t)b->ndim, sizeof(*box));
  bool *has_box = dg_calloc(c.acc.len, sizeof(*has_box));
  for (size_t i = 0; i < c.acc.len; i++) {
    const access *a = &c.acc.data[i];
    if (!a->ncond) continue;
    dg_ranges r = fixed;
    dg_subst zmap[MAX_DEPTH + DG_TAG_COUNT];
    points pt;
    int nz = relax(f, k, a, lca, shared, &r, zmap, &pt);
    dg_expr *diff[DG_MAX_DIMS];
    for (int d = 0; d < b->ndim; d++) {
      dg_expr *m = ir_simplify(f, ir_subst_expr(f, a->idx[d], zmap, nz), &r);
      diff[d] = ir_simplify(f, ir_sub(f, a->idx[d], m), &r);
    }
    has_box[i] = exact_box(a, diff, b->ndim, &pt, &box[i * (size_t)b->ndim]);
  }
  int64_t new_shape[DG_MAX_DIMS];
  for (int d = 0; d < b->ndim; d++) {
    dg_expr *m0 = NULL;
    int64_t lo = 0, hi = -1;
    bool ok = true;
    for (size_t i = 0; i < c.acc.len && ok; i++) {
      const access *a = &c.acc.data[i];
      dg_ranges r = fixed;
      dg_subst zmap[MAX_DEPTH + DG_TAG_COUNT];
      points pt;
      int nz = relax(f, k, a, lca, shared, &r, zmap, &pt);
      dg_expr *e = a->idx[d];
      dg_expr *m = ir_simplify(f, ir_subst_expr(f, e, zmap, nz), &r);
      dg_interval iv = ir_expr_bounds(ir_simplify(f, ir_sub(f, e, m), &r), &r);
      if (has_box[i]) {
        const dg_interval *bx = &box[i * (size_t)b->ndim + d];
        if (bx->lo > iv.lo) iv.lo = bx->lo;
        if (bx->hi < iv.hi) iv.hi = bx->hi;
      }
      if (iv.hi - iv.lo + 1 > b->shape[d]) {
        ok = false;
        break;
      }
      if (!m0) {
        m0 = m;
        lo = iv.lo;
        hi = iv.hi;
        continue;
      }
      int64_t delta;
      if (!ir_is_const_int(ir_simplify(f, ir_sub(f, m, m0), &r), &delta)) {
        ok = false;
        break;
      }
      if (delta + iv.lo < lo) lo = delta + iv.lo;
      if (delta + iv.hi > hi) hi = delta + iv.hi;
    }
    if (!ok || hi - lo + 1 >= b->shape[d]) {
      x.min[d] = ir_int_t(f, 0, c.acc.data[0].idx[d]->dtype);
      new_shape[d] = b->shape[d];
    } else {
      x.min[d] = ir_simplify(f, ir_add(f, m0, ir_int_t(f, lo, m0->dtype)), &fixed);
      new_shape[d] = hi - lo + 1;
    }
  }
  free(box);
  free(has_box);
  /* StorageAlign: the row stride (dimension ndim-2's) padded to
   * factor * k + offset, so that rows fall into different banks. */
  for (int i = 0; i < k->n_aligns; i++) {
    const lw_align *al = &k->aligns[i];
    if (al->buf != b || b->ndim < 2 || al->axis != b->ndim - 2) continue;
    int64_t *last = &new_shape[b->ndim - 1];
    int64_t pad = ((al->offset - *last) % al->factor + al->factor) % al->factor;
    *last += pad;
  }
  int64_t shape[DG_MAX_DIMS];
  int nd = 0;
  for (int i = 0; i < x.nvt; i++)
    for (int j = 0; j < lca; j++)
      if (c.acc.data[0].loops[j]->var == x.vt[i]) shape[nd++] = c.acc.data[0].loops[j]->extent;
  for (int d = 0; d < b->ndim; d++) shape[nd++] = new_shape[d];
  out = ir_buffer_new(f, b->name, b->dtype, nd, shape, b->scope);
  x.r = &fixed;
  *body = rewrite(f, *body, b, out, &x);
done:
  DG_VEC_FREE(&c.acc);
  return out;
}

/* The buffers of an allreduce are already one element (or one slot per
 * warp) and are named by the allreduce itself, which has no indices. */
static bool allreduce_buf(const lw_stmt *s, const dg_buffer *b) {
  if (!s) return false;
  switch (s->kind) {
    case LW_SEQ:
      for (int i = 0; i < s->n; i++)
        if (allreduce_buf(s->stmts[i], b)) return true;
      return false;
    case LW_FOR: return allreduce_buf(s->body, b);
    case LW_IF: return allreduce_buf(s->then_s, b) || allreduce_buf(s->else_s, b);
    case LW_ALLREDUCE: return s->src == b || s->dst == b || s->scratch == b;
    default: return false;
  }
}

bool lower_compact_buffers(lw_program *p, lw_kernel *k, dg_status *st) {
  (void)st;
  for (int i = 0; i < k->n_shared; i++)
    if (!allreduce_buf(k->body, k->shared[i]))
      k->shared[i] = compact_one(p, k, k->shared[i], &k->body);
  for (int i = 0; i < k->n_local; i++)
    if (!allreduce_buf(k->body, k->local[i]))
      k->local[i] = compact_one(p, k, k->local[i], &k->body);
  return true;
}
