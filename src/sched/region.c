/* region.c: buffer-region analysis (symbolic relaxation of index
 * expressions, block and subtree regions, unions, detection of a block's
 * regions from its body) and the block-scope facts the primitives check
 * (children, producers and consumers, complete and reduction blocks, output
 * blocks, removal of a leaf block). See region.h for the conventions.
 *
 * Relaxation is interval arithmetic on the simplified expression, symbolic
 * where the operation is monotone in its operands (+, -, * and // by a
 * constant, % inside one period, min, max) and constant (ir_expr_bounds)
 * elsewhere. It does not relate variables to each other beyond what the
 * simplifier's canonical form already cancels.
 */
#include <string.h>

#include "sched/region.h"

/* ---- relaxation ----------------------------------------------------------------- */

typedef struct {
  dg_func *f;
  const dg_ranges *relax;
  dg_ranges all; /* relax and known together: for constant fallbacks */
} relax_ctx;

static bool uses_ranged(const dg_expr *e, const dg_ranges *r) {
  if (!e || !r || r->n == 0) return false;
  if (e->kind == DG_EXPR_VAR) {
    dg_interval iv;
    return ir_ranges_get(r, e->var, &iv);
  }
  if (uses_ranged(e->a, r) || uses_ranged(e->b, r) || uses_ranged(e->c, r)) return true;
  for (int i = 0; i < e->nargs; i++)
    if (uses_ranged(e->args[i], r)) return true;
  return false;
}

static dg_expr *cint(relax_ctx *c, int64_t v, dg_dtype t) { return ir_int_t(c->f, v, t); }

static int64_t floordiv64(int64_t a, int64_t b) {
  int64_t q = a / b;
  if (a % b != 0 && ((a < 0) != (b < 0))) q--;
  return q;
}

static void relax_const(relax_ctx *c, const dg_expr *e, dg_expr **lo, dg_expr **hi) {
  dg_interval iv = ir_expr_bounds(e, &c->all);
  *lo = cint(c, iv.lo, e->dtype);
  *hi = cint(c, iv.hi, e->dtype);
}

static void relax_rec(relax_ctx *c, const dg_expr *e, dg_expr **lo, dg_expr **hi) {
  dg_func *f = c->f;
  if (!uses_ranged(e, c->relax)) {
    *lo = *hi = (dg_expr *)e;
    return;
  }
  dg_expr *alo, *ahi, *blo, *bhi;
  int64_t k;
  switch (e->kind) {
    case DG_EXPR_VAR: {
      dg_interval iv;
      DG_ASSERT(ir_ranges_get(c->relax, e->var, &iv));
      *lo = cint(c, iv.lo, e->dtype);
      *hi = cint(c, iv.hi, e->dtype);
      return;
    }
    case DG_EXPR_ADD:
      relax_rec(c, e->a, &alo, &ahi);
      relax_rec(c, e->b, &blo, &bhi);
      *lo = ir_add(f, alo, blo);
      *hi = ir_add(f, ahi, bhi);
      return;
    case DG_EXPR_SUB:
      relax_rec(c, e->a, &alo, &ahi);
      relax_rec(c, e->b, &blo, &bhi);
      *lo = ir_sub(f, alo, bhi);
      *hi = ir_sub(f, ahi, blo);
      return;
    case DG_EXPR_MUL: {
      const dg_expr *x = e->a;
      if (!ir_is_const_int(e->b, &k)) {
        if (!ir_is_const_int(e->a, &k)) break;
        x = e->b;
      }
      relax_rec(c, x, &alo, &ahi);
      dg_expr *kk = cint(c, k, e->dtype);
      *lo = ir_mul(f, k >= 0 ? alo : ahi, kk);
      *hi = ir_mul(f, k >= 0 ? ahi : alo, kk);
      return;
    }
    case DG_EXPR_FLOORDIV:
      if (!ir_is_const_int(e->b, &k) || k == 0) break;
      relax_rec(c, e->a, &alo, &ahi);
      *lo = ir_bin(f, DG_EXPR_FLOORDIV, k > 0 ? alo : ahi, e->b);
      *hi = ir_bin(f, DG_EXPR_FLOORDIV, k > 0 ? ahi : alo, e->b);
      return;
    case DG_EXPR_FLOORMOD: {
      if (!ir_is_const_int(e->b, &k) || k <= 0) break;
      dg_interval iv = ir_expr_bounds(e->a, &c->all);
      if (iv.lo > INT64_MIN && iv.hi < INT64_MAX && floordiv64(iv.lo, k) == floordiv64(iv.hi, k)) {
        /* one period: x % k is x minus a constant */
        dg_expr *shift = cint(c, floordiv64(iv.lo, k) * k, e->dtype);
        relax_rec(c, e->a, &alo, &ahi);
        *lo = ir_sub(f, alo, shift);
        *hi = ir_sub(f, ahi, shift);
      } else {
        *lo = cint(c, 0, e->dtype);
        *hi = cint(c, k - 1, e->dtype);
      }
      return;
    }
    case DG_EXPR_MIN:
    case DG_EXPR_MAX:
      relax_rec(c, e->a, &alo, &ahi);
      relax_rec(c, e->b, &blo, &bhi);
      *lo = ir_bin(f, e->kind, alo, blo);
      *hi = ir_bin(f, e->kind, ahi, bhi);
      return;
    default: break;
  }
  relax_const(c, e, lo, hi);
}

void sched_region_relax(dg_func *f, const dg_expr *e, const dg_ranges *relax,
                        const dg_ranges *known, dg_expr **lo, dg_expr **hi) {
  DG_ASSERT(dg_dtype_is_int(e->dtype));
  if (!uses_ranged(e, relax)) {
    /* a point: kept as written, as TVM's EvalSet keeps it */
    *lo = *hi = (dg_expr *)e;
    return;
  }
  relax_ctx c = {.f = f, .relax = relax};
  if (known)
    for (int i = 0; i < known->n; i++)
      ir_ranges_push(&c.all, known->var[i], known->iv[i].lo, known->iv[i].hi);
  if (relax)
    for (int i = 0; i < relax->n; i++)
      ir_ranges_push(&c.all, relax->var[i], relax->iv[i].lo, relax->iv[i].hi);
  dg_expr *s = ir_simplify(f, e, &c.all);
  relax_rec(&c, s, lo, hi);
  *lo = ir_simplify(f, *lo, known);
  *hi = ir_simplify(f, *hi, known);
}

/* ---- regions of blocks and subtrees ------------------------------------------------ */

void sched_region_union(dg_func *f, sched_region *acc, const sched_region *r,
                        const dg_ranges *known) {
  if (!r->buf) return;
  if (!acc->buf) {
    *acc = *r;
    return;
  }
  DG_ASSERT(acc->buf == r->buf);
  for (int d = 0; d < r->buf->ndim; d++) {
    acc->lo[d] = ir_simplify(f, ir_bin(f, DG_EXPR_MIN, acc->lo[d], r->lo[d]), known);
    acc->hi[d] = ir_simplify(f, ir_bin(f, DG_EXPR_MAX, acc->hi[d], r->hi[d]), known);
  }
}

/* The union of b's declared regions of buf (reads or writes), bindings
 * substituted, relaxed over `relax`. False if there is none. */
static bool block_access(dg_func *f, const dg_block *b, const dg_buffer *buf, bool writes,
                         const dg_ranges *relax, const dg_ranges *known, sched_region *out) {
  const dg_region *rs = writes ? b->writes : b->reads;
  int n = writes ? b->n_writes : b->n_reads;
  dg_subst map[64];
  int nmap = 0;
  for (int i = 0; i < b->n_iters && nmap < (int)DG_ARRAY_LEN(map); i++)
    map[nmap++] = (dg_subst){b->iters[i].var, b->iters[i].binding};
  bool found = false;
  for (int i = 0; i < n; i++) {
    if (rs[i].buf != buf) continue;
    sched_region one = {.buf = (dg_buffer *)buf};
    for (int d = 0; d < buf->ndim; d++) {
      dg_expr *mn = ir_subst_expr(f, rs[i].min[d], map, nmap);
      int64_t unit;
      dg_expr *last = mn;
      if (!ir_is_const_int(rs[i].ext[d], &unit) || unit != 1)
        last = ir_simplify(
            f, ir_sub(f, ir_add(f, mn, ir_subst_expr(f, rs[i].ext[d], map, nmap)),
                      ir_int_t(f, 1, mn->dtype)),
            NULL);
      dg_expr *ignore;
      sched_region_relax(f, mn, relax, known, &one.lo[d], &ignore);
      sched_region_relax(f, last, relax, known, &ignore, &one.hi[d]);
    }
    sched_region_union(f, out, &one, known);
    found = true;
  }
  return found;
}

static bool relax_for_scope(const dg_buffer *buf, const dg_stmt *loop) {
  if (buf->scope != DG_SCOPE_SHARED && buf->scope != DG_SCOPE_SHARED_DYN) return false;
  return loop->loop_kind == DG_LOOP_THREAD &&
         (dg_thread_tag_is_thread(loop->tag) || dg_thread_tag_is_vthread(loop->tag));
}

bool sched_region_of_block(dg_func *f, const sched_path *p, int top, const dg_buffer *buf,
                           bool writes, bool relax_scope, sched_region *out, dg_ranges *known) {
  DG_ASSERT(p->n >= 1 && p->stmts[p->n - 1]->kind == DG_STMT_BLOCK);
  const dg_block *b = p->stmts[p->n - 1]->block;
  dg_ranges relax = {.n = 0}, kn = {.n = 0};
  for (int i = 0; i < p->n - 1; i++) {
    const dg_stmt *s = p->stmts[i];
    if (s->kind == DG_STMT_FOR) {
      bool r = i > top || (relax_scope && relax_for_scope(buf, s));
      ir_ranges_push(r ? &relax : &kn, s->loop_var, 0, s->extent - 1);
    } else if (s->kind == DG_STMT_BLOCK) {
      for (int k = 0; k < s->block->n_iters; k++)
        ir_ranges_push(&kn, s->block->iters[k].var, 0, s->block->iters[k].extent - 1);
    }
  }
  memset(out, 0, sizeof *out);
  if (known) *known = kn;
  return block_access(f, b, buf, writes, &relax, &kn, out);
}

typedef struct {
  dg_func *f;
  const dg_buffer *buf;
  bool writes;
  dg_ranges relax;
  const dg_ranges *outer;
  sched_region *out;
  bool found;
} subtree_ctx;

static void subtree_walk(subtree_ctx *c, const dg_stmt *s) {
  if (!s) return;
  switch (s->kind) {
    case DG_STMT_FOR:
      ir_ranges_push(&c->relax, s->loop_var, 0, s->extent - 1);
      subtree_walk(c, s->body);
      ir_ranges_pop(&c->relax, 1);
      break;
    case DG_STMT_SEQ:
      for (int i = 0; i < s->n; i++) subtree_walk(c, s->stmts[i]);
      break;
    case DG_STMT_IF:
      subtree_walk(c, s->then_s);
      subtree_walk(c, s->else_s);
      break;
    case DG_STMT_BLOCK:
      if (block_access(c->f, s->block, c->buf, c->writes, &c->relax, c->outer, c->out))
        c->found = true;
      break;
    case DG_STMT_STORE: break;
  }
}

bool sched_region_of_subtree(dg_func *f, dg_stmt *subtree, const dg_ranges *outer,
                             const dg_buffer *buf, bool writes, sched_region *out) {
  memset(out, 0, sizeof *out);
  subtree_ctx c = {.f = f, .buf = buf, .writes = writes, .outer = outer, .out = out};
  subtree_walk(&c, subtree);
  return c.found;
}

/* ---- detecting a block's regions from its body --------------------------------------- */

typedef DG_VEC(sched_region) region_vec;

typedef struct {
  dg_func *f;
  dg_ranges relax; /* loops inside the block */
  region_vec reads, writes;
} detect_ctx;

static void add_access(detect_ctx *c, region_vec *v, const sched_region *r) {
  for (size_t i = 0; i < v->len; i++)
    if (v->data[i].buf == r->buf) {
      sched_region_union(c->f, &v->data[i], r, NULL);
      return;
    }
  DG_VEC_PUSH(v, *r);
}

static void add_point(detect_ctx *c, region_vec *v, dg_buffer *buf, dg_expr **idx) {
  sched_region r = {.buf = buf};
  for (int d = 0; d < buf->ndim; d++)
    sched_region_relax(c->f, idx[d], &c->relax, NULL, &r.lo[d], &r.hi[d]);
  add_access(c, v, &r);
}

static void detect_expr(detect_ctx *c, const dg_expr *e) {
  if (!e) return;
  if (e->kind == DG_EXPR_LOAD) add_point(c, &c->reads, e->buf, e->args);
  detect_expr(c, e->a);
  detect_expr(c, e->b);
  detect_expr(c, e->c);
  for (int i = 0; i < e->nargs; i++) detect_expr(c, e->args[i]);
}

static void detect_stmt(detect_ctx *c, const dg_stmt *s) {
  if (!s) return;
  switch (s->kind) {
    case DG_STMT_FOR:
      ir_ranges_push(&c->relax, s->loop_var, 0, s->extent - 1);
      detect_stmt(c, s->body);
      ir_ranges_pop(&c->relax, 1);
      break;
    case DG_STMT_SEQ:
      for (int i = 0; i < s->n; i++) detect_stmt(c, s->stmts[i]);
      break;
    case DG_STMT_IF:
      detect_expr(c, s->cond);
      detect_stmt(c, s->then_s);
      detect_stmt(c, s->else_s);
      break;
    case DG_STMT_STORE:
      add_point(c, &c->writes, s->buf, s->idx);
      for (int i = 0; i < s->nidx; i++) detect_expr(c, s->idx[i]);
      detect_expr(c, s->value);
      break;
    case DG_STMT_BLOCK: {
      const dg_block *nb = s->block;
      for (int pass = 0; pass < 2; pass++) {
        const dg_region *rs = pass ? nb->writes : nb->reads;
        int n = pass ? nb->n_writes : nb->n_reads;
        for (int i = 0; i < n; i++) {
          sched_region r = {.buf = NULL};
          if (block_access(c->f, nb, rs[i].buf, pass == 1, &c->relax, NULL, &r))
            add_access(c, pass ? &c->writes : &c->reads, &r);
        }
      }
      break;
    }
  }
}

static dg_region *to_regions(dg_func *f, const sched_region *rs, int n, int *n_out) {
  dg_region *out = DG_ANEWN(f->arena, dg_region, n ? n : 1);
  for (int i = 0; i < n; i++) {
    dg_buffer *buf = rs[i].buf;
    out[i].buf = buf;
    out[i].min = DG_ANEWN(f->arena, dg_expr *, buf->ndim ? buf->ndim : 1);
    out[i].ext = DG_ANEWN(f->arena, dg_expr *, buf->ndim ? buf->ndim : 1);
    for (int d = 0; d < buf->ndim; d++) {
      out[i].min[d] = rs[i].lo[d];
      out[i].ext[d] = ir_simplify(
          f, ir_add(f, ir_sub(f, rs[i].hi[d], rs[i].lo[d]), ir_int_t(f, 1, rs[i].lo[d]->dtype)),
          NULL);
    }
  }
  *n_out = n;
  return out;
}

void sched_region_detect(dg_func *f, dg_block *b) {
  detect_ctx c = {.f = f};
  detect_stmt(&c, b->init);
  detect_stmt(&c, b->body);
  region_vec reads = {0};
  for (size_t i = 0; i < c.reads.len; i++) {
    bool written = false;
    for (size_t k = 0; k < c.writes.len && b->init; k++)
      if (c.writes.data[k].buf == c.reads.data[i].buf) written = true;
    if (!written) DG_VEC_PUSH(&reads, c.reads.data[i]);
  }
  b->reads = to_regions(f, reads.data, (int)reads.len, &b->n_reads);
  b->writes = to_regions(f, c.writes.data, (int)c.writes.len, &b->n_writes);
  DG_VEC_FREE(&reads);
  DG_VEC_FREE(&c.reads);
  DG_VEC_FREE(&c.writes);
}

/* ---- the block scope ------------------------------------------------------------------ */

static void children(dg_stmt *s, sched_blocks *out) {
  if (!s) return;
  switch (s->kind) {
    case DG_STMT_FOR: children(s->body, out); break;
    case DG_STMT_SEQ:
      for (int i = 0; i < s->n; i++) children(s->stmts[i], out);
      break;
    case DG_STMT_IF:
      children(s->then_s, out);
      children(s->else_s, out);
      break;
    case DG_STMT_BLOCK: DG_VEC_PUSH(out, s->block); break;
    case DG_STMT_STORE: break;
  }
}

void sched_scope_blocks(dg_block *scope, sched_blocks *out) { children(scope->body, out); }

bool sched_block_reads(const dg_block *b, const dg_buffer *buf) {
  for (int i = 0; i < b->n_reads; i++)
    if (b->reads[i].buf == buf) return true;
  return false;
}

bool sched_block_writes(const dg_block *b, const dg_buffer *buf) {
  for (int i = 0; i < b->n_writes; i++)
    if (b->writes[i].buf == buf) return true;
  return false;
}

/* Whether `later` depends on `earlier` by RAW or WAW. */
static bool depends(const dg_block *earlier, const dg_block *later) {
  for (int i = 0; i < earlier->n_writes; i++) {
    const dg_buffer *buf = earlier->writes[i].buf;
    if (sched_block_reads(later, buf) || sched_block_writes(later, buf)) return true;
  }
  return false;
}

static void deps(dg_block *scope, const dg_block *b, bool producers, sched_blocks *out) {
  sched_blocks all = {0};
  sched_scope_blocks(scope, &all);
  size_t self = all.len;
  for (size_t i = 0; i < all.len; i++)
    if (all.data[i] == b) self = i;
  DG_ASSERT(self < all.len);
  if (producers) {
    for (size_t i = 0; i < self; i++)
      if (depends(all.data[i], b)) DG_VEC_PUSH(out, all.data[i]);
  } else {
    for (size_t i = self + 1; i < all.len; i++)
      if (depends(b, all.data[i])) DG_VEC_PUSH(out, all.data[i]);
  }
  DG_VEC_FREE(&all);
}

void sched_scope_producers(dg_block *scope, const dg_block *b, sched_blocks *out) {
  deps(scope, b, true, out);
}
void sched_scope_consumers(dg_block *scope, const dg_block *b, sched_blocks *out) {
  deps(scope, b, false, out);
}

/* The first other child of the scope that also writes a buffer b writes. */
static const dg_block *other_writer(dg_block *scope, const dg_block *b, const dg_buffer **buf) {
  sched_blocks all = {0};
  sched_scope_blocks(scope, &all);
  const dg_block *found = NULL;
  for (size_t i = 0; i < all.len && !found; i++) {
    if (all.data[i] == b) continue;
    for (int w = 0; w < b->n_writes && !found; w++)
      if (sched_block_writes(all.data[i], b->writes[w].buf)) {
        found = all.data[i];
        *buf = b->writes[w].buf;
      }
  }
  DG_VEC_FREE(&all);
  return found;
}

static bool complete_reason(dg_block *scope, const dg_block *b, char *why, size_t n) {
  for (int i = 0; i < b->n_iters; i++)
    if (b->iters[i].kind != DG_ITER_SPATIAL) {
      snprintf(why, n, "iteration variable %s is a reduction variable", b->iters[i].var->name);
      return false;
    }
  const dg_buffer *buf = NULL;
  const dg_block *w = other_writer(scope, b, &buf);
  if (w) {
    snprintf(why, n, "block %s also writes %s", w->name, buf->name);
    return false;
  }
  for (int i = 0; i < b->n_writes; i++)
    if (sched_block_reads(b, b->writes[i].buf)) {
      snprintf(why, n, "it reads and writes %s", b->writes[i].buf->name);
      return false;
    }
  return true;
}

static bool reduction_reason(dg_block *scope, const dg_block *b, char *why, size_t n) {
  if (!b->init) {
    snprintf(why, n, "it has no init statement");
    return false;
  }
  const dg_buffer *buf = NULL;
  const dg_block *w = other_writer(scope, b, &buf);
  if (w) {
    snprintf(why, n, "block %s also writes %s", w->name, buf->name);
    return false;
  }
  for (int i = 0; i < b->n_iters; i++) {
    if (b->iters[i].kind != DG_ITER_REDUCE) continue;
    for (int r = 0; r < b->n_writes; r++)
      for (int d = 0; d < b->writes[r].buf->ndim; d++)
        if (ir_expr_uses_var(b->writes[r].min[d], b->iters[i].var) ||
            ir_expr_uses_var(b->writes[r].ext[d], b->iters[i].var)) {
          snprintf(why, n, "reduction variable %s indexes the written buffer %s",
                   b->iters[i].var->name, b->writes[r].buf->name);
          return false;
        }
  }
  return true;
}

bool sched_block_check_complete(dg_block *scope, const dg_block *b, dg_status *st) {
  char why[256];
  if (complete_reason(scope, b, why, sizeof why)) return true;
  return dg_fail(st, DG_ERR_INVALID, "block %s is not a complete block: %s", b->name, why);
}

bool sched_block_check_reduction(dg_block *scope, const dg_block *b, dg_status *st) {
  char why[256];
  if (reduction_reason(scope, b, why, sizeof why)) return true;
  return dg_fail(st, DG_ERR_INVALID, "block %s is not a reduction block: %s", b->name, why);
}

bool sched_block_check_complete_or_reduction(dg_block *scope, const dg_block *b,
                                             dg_status *st) {
  char w1[200], w2[200];
  if (complete_reason(scope, b, w1, sizeof w1) || reduction_reason(scope, b, w2, sizeof w2))
    return true;
  return dg_fail(st, DG_ERR_INVALID,
                 "block %s is neither a complete block (%s) nor a reduction block (%s)", b->name,
                 w1, w2);
}

dg_buffer *sched_block_output(const dg_func *f, const dg_block *scope, const dg_block *b) {
  bool root = scope == ir_func_root(f);
  for (int i = 0; i < b->n_writes; i++) {
    dg_buffer *buf = b->writes[i].buf;
    bool inside = !root;
    if (root) {
      inside = true;
      for (int k = 0; k < f->n_params; k++)
        if (f->params[k] == buf) inside = false;
    } else {
      inside = false;
      for (int k = 0; k < scope->n_allocs; k++)
        if (scope->allocs[k] == buf) inside = true;
    }
    if (!inside) return buf;
  }
  return NULL;
}

/* ---- removing a leaf block -------------------------------------------------------------- */

bool sched_removal_plan(dg_func *f, const sched_path *p, sched_removal *out, dg_status *st) {
  DG_ASSERT(p->n >= 2 && p->stmts[p->n - 1]->kind == DG_STMT_BLOCK);
  const dg_block *b = p->stmts[p->n - 1]->block;
  for (int k = p->n - 1; k > 0; k--) {
    dg_stmt *parent = p->stmts[k - 1];
    switch (parent->kind) {
      case DG_STMT_FOR: continue;
      case DG_STMT_SEQ: {
        if (parent->n <= 1) continue;
        int at = (int)(p->slots[k] - parent->stmts);
        DG_ASSERT(at >= 0 && at < parent->n && parent->stmts[at] == p->stmts[k]);
        dg_stmt **rest = DG_ANEWN(f->arena, dg_stmt *, parent->n);
        int m = 0;
        for (int i = 0; i < parent->n; i++)
          if (i != at) rest[m++] = parent->stmts[i];
        out->slot = p->slots[k - 1];
        out->replacement = m == 1 ? rest[0] : ir_seq(f, rest, m);
        return true;
      }
      case DG_STMT_BLOCK:
        return dg_fail(st, DG_ERR_INVALID,
                       "block %s is the only leaf of scope %s: removing it would leave the "
                       "scope empty",
                       b->name, parent->block->name);
      case DG_STMT_IF:
        return dg_fail(st, DG_ERR_INVALID, "block %s is under an if statement and cannot be moved",
                       b->name);
      case DG_STMT_STORE: break;
    }
    break;
  }
  DG_UNREACHABLE();
}

void sched_removal_apply(const sched_removal *r) { *r->slot = r->replacement; }
