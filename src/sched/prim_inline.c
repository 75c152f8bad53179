/* prim_inline.c: ComputeInline and ReverseComputeInline (TVM's
 * compute_inline.cc).
 *
 * ComputeInline removes a producer block whose body is one store
 * B[v0, v1, ...] = f(v0, v1, ...) over distinct iteration variables, and
 * replaces every load B[e0, e1, ...] in its scope by f(e0, e1, ...). The
 * blocks that accessed B get their regions recomputed from their bodies, the
 * scope stops allocating B, and loops left empty go with the block.
 *
 * ReverseComputeInline removes a consumer block D[g(v)] = h(B[v + c], ...)
 * whose only producer is a complete block storing B[p] = x, and makes that
 * producer store D[g(p - c)] = h(x, ...) instead, with a predicate keeping
 * it to the consumer's iteration domain. The consumer's load indices must be
 * distinct iteration variables plus constants covering all its non-unit
 * variables (the bijective affine maps TVM accepts, restricted to the shape
 * they have in practice); other patterns are rejected.
 *
 * Both check every condition first (check_only stops there: it answers
 * "can this block be inlined" for SampleComputeLocation) and fail with a
 * message naming the block and the reason.
 */
#include <string.h>

#include "sched/region.h"

typedef struct {
  dg_func *f;
  dg_block *block;  /* the block that goes */
  dg_block *scope;
  dg_buffer *buf;   /* the buffer inlined away */
  sched_path bp;
  sched_removal removal;
  /* ComputeInline */
  const dg_stmt *store; /* the producer's store */
  /* ReverseComputeInline */
  dg_block *producer;
  dg_subst sub[64];     /* consumer iteration variable -> producer expression */
  int nsub;
  dg_expr *pred;        /* the producer's new predicate, NULL for true */
} inl_ctx;

/* ---- expression rewriting ------------------------------------------------------------ */

static bool loads_buf(const dg_expr *e, const dg_buffer *buf) {
  if (!e) return false;
  if (e->kind == DG_EXPR_LOAD && e->buf == buf) return true;
  if (loads_buf(e->a, buf) || loads_buf(e->b, buf) || loads_buf(e->c, buf)) return true;
  for (int i = 0; i < e->nargs; i++)
    if (loads_buf(e->args[i], buf)) return true;
  return false;
}

typedef struct {
  dg_func *f;
  const dg_buffer *buf;
  /* ComputeInline: a load of buf becomes value with idx_vars := indices */
  const dg_stmt *store;
  /* ReverseComputeInline: a load of buf becomes value; variables map */
  dg_expr *value;
  const dg_subst *sub;
  int nsub;
} rw_ctx;

static dg_expr *rw_expr(rw_ctx *c, dg_expr *e) {
  if (!e) return NULL;
  if (!c->sub && !loads_buf(e, c->buf)) return e;
  if (e->kind == DG_EXPR_VAR && c->sub) return ir_subst_expr(c->f, e, c->sub, c->nsub);
  if (e->kind == DG_EXPR_LOAD && e->buf == c->buf) {
    if (c->value) return c->value;
    dg_subst map[DG_MAX_DIMS];
    for (int i = 0; i < e->nargs; i++)
      map[i] = (dg_subst){c->store->idx[i]->var, rw_expr(c, e->args[i])};
    return ir_subst_expr(c->f, c->store->value, map, e->nargs);
  }
  dg_expr *n = ir_expr_copy(c->f, e);
  n->a = rw_expr(c, e->a);
  n->b = rw_expr(c, e->b);
  n->c = rw_expr(c, e->c);
  if (e->nargs) {
    n->args = DG_ANEWN(c->f->arena, dg_expr *, e->nargs);
    for (int i = 0; i < e->nargs; i++) n->args[i] = rw_expr(c, e->args[i]);
  }
  return n;
}

static bool touches(const dg_block *b, const dg_buffer *buf) {
  return sched_block_reads(b, buf) || sched_block_writes(b, buf);
}

/* Rewrites the loads of the inlined buffer in place, blocks keeping their
 * identity; blocks that accessed it get their regions recomputed, inner
 * blocks first. */
static void rw_stmt(rw_ctx *c, dg_stmt *s) {
  if (!s) return;
  switch (s->kind) {
    case DG_STMT_FOR: rw_stmt(c, s->body); break;
    case DG_STMT_SEQ:
      for (int i = 0; i < s->n; i++) rw_stmt(c, s->stmts[i]);
      break;
    case DG_STMT_IF:
      s->cond = rw_expr(c, s->cond);
      rw_stmt(c, s->then_s);
      rw_stmt(c, s->else_s);
      break;
    case DG_STMT_STORE:
      for (int i = 0; i < s->nidx; i++) s->idx[i] = rw_expr(c, s->idx[i]);
      s->value = rw_expr(c, s->value);
      break;
    case DG_STMT_BLOCK: {
      dg_block *b = s->block;
      b->predicate = rw_expr(c, b->predicate);
      for (int i = 0; i < b->n_iters; i++) b->iters[i].binding = rw_expr(c, b->iters[i].binding);
      rw_stmt(c, b->init);
      rw_stmt(c, b->body);
      if (touches(b, c->buf)) sched_region_detect(c->f, b);
      break;
    }
  }
}

static void drop_alloc(dg_block *scope, const dg_buffer *buf) {
  int m = 0;
  for (int i = 0; i < scope->n_allocs; i++)
    if (scope->allocs[i] != buf) scope->allocs[m++] = scope->allocs[i];
  scope->n_allocs = m;
}

/* ---- shared checks ---------------------------------------------------------------------- */

static bool check_common(inl_ctx *c, dg_status *st) {
  dg_block *b = c->block;
  DG_ASSERT(sched_locate_block(c->f, b, &c->bp));
  c->scope = sched_path_parent_block(&c->bp, c->bp.n - 1);
  if (!c->scope) return dg_fail(st, DG_ERR_INVALID, "cannot inline the root block");
  if (b->init)
    return dg_fail(st, DG_ERR_INVALID, "cannot inline a reduction block: %s has an init statement",
                   b->name);
  for (int i = 0; i < b->n_iters; i++)
    if (b->iters[i].kind == DG_ITER_REDUCE)
      return dg_fail(st, DG_ERR_INVALID,
                     "cannot inline a reduction block: %s has reduction variable %s", b->name,
                     b->iters[i].var->name);
  return true;
}

static bool vars_within(const dg_expr *e, const dg_var *const *ok, int n) {
  if (!e) return true;
  if (e->kind == DG_EXPR_VAR) {
    for (int i = 0; i < n; i++)
      if (ok[i] == e->var) return true;
    return false;
  }
  if (!vars_within(e->a, ok, n) || !vars_within(e->b, ok, n) || !vars_within(e->c, ok, n))
    return false;
  for (int i = 0; i < e->nargs; i++)
    if (!vars_within(e->args[i], ok, n)) return false;
  return true;
}

/* ---- ComputeInline ----------------------------------------------------------------------- */

static bool plan_inline(inl_ctx *c, dg_status *st) {
  dg_block *b = c->block;
  if (!check_common(c, st)) return false;
  if (b->n_writes != 1)
    return dg_fail(st, DG_ERR_INVALID,
                   "block %s writes %d buffer regions; only a block that writes one can be "
                   "inlined",
                   b->name, b->n_writes);
  c->buf = b->writes[0].buf;
  dg_buffer *out = sched_block_output(c->f, c->scope, b);
  if (out)
    return dg_fail(st, DG_ERR_INVALID,
                   "block %s writes %s, which outlives its scope (an output); it cannot be "
                   "inlined",
                   b->name, out->name);
  if (!sched_block_check_complete(c->scope, b, st)) return false;
  const dg_stmt *s = b->body;
  bool ok = s && s->kind == DG_STMT_STORE && s->buf == c->buf;
  const dg_var *vars[DG_MAX_DIMS];
  for (int i = 0; ok && i < s->nidx; i++) {
    ok = s->idx[i]->kind == DG_EXPR_VAR;
    for (int k = 0; ok && k < i; k++) ok = vars[k] != s->idx[i]->var;
    if (ok) vars[i] = s->idx[i]->var;
  }
  if (ok) ok = vars_within(s->value, vars, s->nidx);
  if (!ok)
    return dg_fail(st, DG_ERR_INVALID,
                   "the body of block %s is not one store %s[v0, v1, ...] = f(v0, v1, ...) with "
                   "distinct variables as indices and no other variables",
                   b->name, c->buf->name);
  c->store = s;
  return sched_removal_plan(c->f, &c->bp, &c->removal, st);
}

static void commit_inline(inl_ctx *c) {
  sched_removal_apply(&c->removal);
  rw_ctx r = {.f = c->f, .buf = c->buf, .store = c->store};
  rw_stmt(&r, c->scope->body);
  drop_alloc(c->scope, c->buf);
}

/* ---- ReverseComputeInline ------------------------------------------------------------------ */

/* TVM's dependency edges into (or out of) b, one per region entry and
 * earlier (or later) block: RAW, WAW and WAR. */
static int count_edges(const dg_block *src, const dg_block *dst, bool *raw_only) {
  int n = 0;
  for (int i = 0; i < dst->n_reads; i++)
    if (sched_block_writes(src, dst->reads[i].buf)) n++;
  int raw = n;
  for (int i = 0; i < dst->n_writes; i++) {
    if (sched_block_writes(src, dst->writes[i].buf)) n++;
    if (sched_block_reads(src, dst->writes[i].buf)) n++;
  }
  if (raw_only) *raw_only = raw == n;
  return n;
}

static bool single_producer(inl_ctx *c, dg_status *st) {
  sched_blocks all = {0};
  sched_scope_blocks(c->scope, &all);
  size_t self = 0;
  while (all.data[self] != c->block) self++;
  int n_in = 0;
  bool raw = true;
  for (size_t i = 0; i < self; i++) {
    bool r;
    int e = count_edges(all.data[i], c->block, &r);
    if (e) {
      n_in += e;
      raw = raw && r;
      c->producer = all.data[i];
    }
  }
  bool ok = n_in == 1 && raw;
  if (ok) {
    dg_status tmp;
    ok = sched_block_check_complete(c->scope, c->producer, &tmp);
    size_t p = 0;
    while (all.data[p] != c->producer) p++;
    int n_out = 0;
    for (size_t i = p + 1; ok && i < all.len; i++) n_out += count_edges(c->producer, all.data[i], NULL);
    ok = ok && n_out == 1;
  }
  DG_VEC_FREE(&all);
  if (!ok)
    return dg_fail(st, DG_ERR_INVALID,
                   "block %s must have exactly one producer, a complete block of which it is "
                   "the only consumer",
                   c->block->name);
  return true;
}

/* Finds the loads of buf in e: *first is the first one, *same whether the
 * others have its indices. */
static void same_loads(const dg_expr *e, const dg_buffer *buf, const dg_expr **first, bool *same) {
  if (!e) return;
  if (e->kind == DG_EXPR_LOAD && e->buf == buf) {
    if (!*first) *first = e;
    for (int i = 0; i < e->nargs; i++)
      if (!ir_expr_equal((*first)->args[i], e->args[i])) *same = false;
  }
  same_loads(e->a, buf, first, same);
  same_loads(e->b, buf, first, same);
  same_loads(e->c, buf, first, same);
  for (int i = 0; i < e->nargs; i++) same_loads(e->args[i], buf, first, same);
}

static bool plan_reverse(inl_ctx *c, dg_status *st) {
  dg_func *f = c->f;
  dg_block *b = c->block;
  if (!check_common(c, st)) return false;
  /* the one buffer read that some block of the scope writes */
  sched_blocks all = {0};
  sched_scope_blocks(c->scope, &all);
  int n_bufs = 0;
  for (int i = 0; i < b->n_reads; i++) {
    dg_buffer *buf = b->reads[i].buf;
    bool seen = false;
    for (int k = 0; k < i; k++) seen = seen || b->reads[k].buf == buf;
    if (seen) continue;
    bool written = false;
    for (size_t k = 0; k < all.len; k++)
      if (sched_block_writes(all.data[k], buf)) written = true;
    if (written) c->buf = buf, n_bufs++;
  }
  DG_VEC_FREE(&all);
  if (n_bufs != 1)
    return dg_fail(st, DG_ERR_INVALID,
                   "block %s reads %d buffers written in its scope; exactly one is needed", b->name,
                   n_bufs);
  if (!sched_block_check_complete(c->scope, b, st)) return false;
  if (!single_producer(c, st)) return false;
  if (b->predicate)
    return dg_fail(st, DG_ERR_INVALID, "block %s has a predicate and cannot be inlined", b->name);
  const dg_stmt *s = b->body;
  const dg_stmt *ps = c->producer->body;
  const char *pattern = "the body of block %s is not one store D[...] = g(%s[v0 + c0, ...], ...) "
                        "with distinct iteration variables v0, ... covering the non-unit ones";
  if (!s || s->kind != DG_STMT_STORE) return dg_fail(st, DG_ERR_INVALID, pattern, b->name, c->buf->name);
  /* the loads of buf: one index tuple */
  const dg_expr *load = NULL;
  bool same = true;
  for (int i = 0; i < s->nidx; i++) same_loads(s->idx[i], c->buf, &load, &same);
  same_loads(s->value, c->buf, &load, &same);
  if (!load || !same) return dg_fail(st, DG_ERR_INVALID, pattern, b->name, c->buf->name);
  if (!ps || ps->kind != DG_STMT_STORE || ps->buf != c->buf)
    return dg_fail(st, DG_ERR_INVALID, "the body of producer %s is not one store to %s",
                   c->producer->name, c->buf->name);
  /* invert the load indices: v + k at dimension d gives v = p[d] - k */
  if (b->n_iters > (int)DG_ARRAY_LEN(c->sub) || c->producer->n_iters > (int)DG_ARRAY_LEN(c->sub))
    return dg_fail(st, DG_ERR_INVALID, "blocks %s and %s have too many iteration variables",
                   b->name, c->producer->name);
  bool mapped[64] = {false};
  c->nsub = 0;
  for (int d = 0; d < load->nargs; d++) {
    const dg_expr *x = load->args[d];
    int64_t k = 0;
    if ((x->kind == DG_EXPR_ADD || x->kind == DG_EXPR_SUB) && ir_is_const_int(x->b, &k)) {
      if (x->kind == DG_EXPR_SUB) k = -k;
      x = x->a;
    }
    int it = -1;
    for (int i = 0; x->kind == DG_EXPR_VAR && i < b->n_iters; i++)
      if (b->iters[i].var == x->var) it = i;
    if (it < 0 || mapped[it]) return dg_fail(st, DG_ERR_INVALID, pattern, b->name, c->buf->name);
    mapped[it] = true;
    dg_expr *p = ps->idx[d];
    c->sub[c->nsub++] = (dg_subst){x->var, k ? ir_sub(f, p, ir_int_t(f, k, p->dtype)) : p};
  }
  dg_ranges pr = {.n = 0};
  for (int i = 0; i < c->producer->n_iters; i++)
    ir_ranges_push(&pr, c->producer->iters[i].var, 0, c->producer->iters[i].extent - 1);
  const dg_var *iv[64];
  for (int i = 0; i < b->n_iters; i++) {
    const dg_iter *it = &b->iters[i];
    iv[i] = it->var;
    if (!mapped[i]) {
      if (it->extent != 1) return dg_fail(st, DG_ERR_INVALID, pattern, b->name, c->buf->name);
      c->sub[c->nsub++] = (dg_subst){it->var, ir_int_t(f, 0, it->var->dtype)};
      continue;
    }
    /* the producer must cover the consumer's domain */
    dg_expr *pe = NULL;
    for (int k = 0; k < c->nsub; k++)
      if (c->sub[k].from == it->var) pe = c->sub[k].to;
    dg_interval r = ir_expr_bounds(ir_simplify(f, pe, &pr), &pr);
    if (r.lo > 0 || r.hi < it->extent - 1)
      return dg_fail(st, DG_ERR_INVALID,
                     "producer %s does not cover the domain of %s in block %s: it gives [%lld, "
                     "%lld], the domain is [0, %lld]",
                     c->producer->name, it->var->name, b->name, (long long)r.lo, (long long)r.hi,
                     (long long)it->extent - 1);
  }
  bool vars_ok = vars_within(s->value, iv, b->n_iters);
  for (int i = 0; i < s->nidx; i++) vars_ok = vars_ok && vars_within(s->idx[i], iv, b->n_iters);
  if (!vars_ok) return dg_fail(st, DG_ERR_INVALID, pattern, b->name, c->buf->name);
  /* the consumer's domain, in the producer's variables, then its loops' */
  dg_expr *in = NULL;
  for (int i = 0; i < b->n_iters; i++) {
    const dg_iter *it = &b->iters[i];
    dg_expr *v = ir_var(f, it->var);
    dg_expr *c1 = ir_bin(f, DG_EXPR_AND, ir_bin(f, DG_EXPR_GE, v, ir_int_t(f, 0, v->dtype)),
                         ir_bin(f, DG_EXPR_LT, v, ir_int_t(f, it->extent, v->dtype)));
    in = in ? ir_bin(f, DG_EXPR_AND, in, c1) : c1;
  }
  dg_expr *pred = in ? ir_simplify(f, ir_subst_expr(f, in, c->sub, c->nsub), &pr) : NULL;
  int64_t t;
  if (pred && ir_is_const_int(pred, &t) && t != 0) pred = NULL;
  if (pred) {
    dg_subst bind[64];
    int nb = 0;
    for (int i = 0; i < c->producer->n_iters; i++)
      bind[nb++] = (dg_subst){c->producer->iters[i].var, c->producer->iters[i].binding};
    pred = ir_subst_expr(f, pred, bind, nb);
  }
  if (c->producer->predicate) {
    dg_expr *implied = pred ? ir_bin(f, DG_EXPR_OR, ir_not(f, pred), c->producer->predicate)
                            : c->producer->predicate;
    if (!ir_prove(f, implied, NULL))
      return dg_fail(st, DG_ERR_INVALID,
                     "producer %s has a predicate that the inlined consumer %s does not imply",
                     c->producer->name, b->name);
  }
  c->pred = pred;
  return sched_removal_plan(f, &c->bp, &c->removal, st);
}

static void commit_reverse(inl_ctx *c) {
  dg_func *f = c->f;
  sched_removal_apply(&c->removal);
  const dg_stmt *s = c->block->body;
  dg_block *p = c->producer;
  rw_ctx r = {.f = f, .buf = c->buf, .value = p->body->value, .sub = c->sub, .nsub = c->nsub};
  dg_expr **idx = DG_ANEWN(f->arena, dg_expr *, s->nidx ? s->nidx : 1);
  for (int i = 0; i < s->nidx; i++) idx[i] = rw_expr(&r, s->idx[i]);
  p->body = ir_store(f, s->buf, idx, s->nidx, rw_expr(&r, s->value));
  p->predicate = c->pred;
  sched_region_detect(f, p);
  drop_alloc(c->scope, c->buf);
}

/* ---- entry points ---------------------------------------------------------------------------- */

bool sched_inline_block(sched *s, dg_block *b, bool reverse, bool check_only, dg_status *st) {
  inl_ctx *c = dg_calloc(1, sizeof *c);
  c->f = s->f;
  c->block = b;
  bool ok = reverse ? plan_reverse(c, st) : plan_inline(c, st);
  if (ok && !check_only) {
    if (reverse) commit_reverse(c);
    else commit_inline(c);
  }
  free(c);
  return ok;
}

bool prim_compute_inline(prim_call *c, dg_status *st) {
  dg_block *b = sched_rv_block(c->s, &c->inst->inputs[0], "block", st);
  return b && sched_inline_block(c->s, b, false, false, st);
}

bool prim_reverse_compute_inline(prim_call *c, dg_status *st) {
  dg_block *b = sched_rv_block(c->s, &c->inst->inputs[0], "block", st);
  return b && sched_inline_block(c->s, b, true, false, st);
}
