/* prim_reindex.c: ReIndex (TVM's reindex in cache_read_write.cc).
 *
 * ReIndex(block, i, read|write) gives the buffer the block reads (writes) at
 * index i a new intermediate `<buf>_reindex` indexed exactly by the block's
 * iteration variables that occur in its indices (in iteration order), and a
 * copy block: for a read it copies the buffer into the new one right before
 * the block's loop nest, for a write it copies the new one into the buffer
 * right after. The block then accesses the new buffer at its iteration
 * variables. The copy block has one loop (ax0, ...) and one spatial
 * iteration variable (v0, ...) per covered iteration variable, over the same
 * domains, and is named after the buffer it writes plus "_reindex", as in
 * TVM ("C_reindex" for a write of C, "A_reindex_reindex" for a read of A).
 *
 * Assumes a verified kernel. Requires what TVM requires: a leaf block under
 * a chain of loops directly in its scope, every access of the buffer in the
 * block's body with the same indices. The new buffer keeps the buffer's
 * storage scope. Does not check that the block's bindings are affine.
 */
#include <string.h>

#include "sched/sched_impl.h"

typedef struct {
  const dg_buffer *buf;
  dg_expr **idx; /* the first access's indices */
  int n_access;
  bool mismatch, nested;
} collect_ctx;

static void collect_expr(collect_ctx *c, const dg_expr *e);

static void access(collect_ctx *c, dg_expr *const *idx) {
  if (c->n_access++ == 0) {
    c->idx = (dg_expr **)idx;
    return;
  }
  for (int i = 0; i < c->buf->ndim; i++)
    if (!ir_expr_equal(c->idx[i], idx[i])) c->mismatch = true;
}

static void collect_expr(collect_ctx *c, const dg_expr *e) {
  if (!e) return;
  collect_expr(c, e->a);
  collect_expr(c, e->b);
  collect_expr(c, e->c);
  for (int i = 0; i < e->nargs; i++) collect_expr(c, e->args[i]);
  if (e->kind == DG_EXPR_LOAD && e->buf == c->buf) access(c, e->args);
}

static void collect_stmt(collect_ctx *c, const dg_stmt *s) {
  if (!s) return;
  switch (s->kind) {
    case DG_STMT_FOR: collect_stmt(c, s->body); break;
    case DG_STMT_SEQ:
      for (int i = 0; i < s->n; i++) collect_stmt(c, s->stmts[i]);
      break;
    case DG_STMT_IF:
      collect_expr(c, s->cond);
      collect_stmt(c, s->then_s);
      collect_stmt(c, s->else_s);
      break;
    case DG_STMT_STORE:
      for (int i = 0; i < s->nidx; i++) collect_expr(c, s->idx[i]);
      collect_expr(c, s->value);
      if (s->buf == c->buf) access(c, s->idx);
      break;
    case DG_STMT_BLOCK: c->nested = true; break;
  }
}

/* Marks the iteration variables of b that e uses; returns a variable of e
 * that is not one of them (NULL if none). */
static const dg_var *add_vars(const dg_expr *e, const dg_block *b, bool *covered) {
  if (!e) return NULL;
  const dg_var *stray = NULL;
  if (e->kind == DG_EXPR_VAR) {
    stray = e->var;
    for (int i = 0; i < b->n_iters; i++)
      if (b->iters[i].var == e->var) {
        covered[i] = true;
        stray = NULL;
      }
  }
  const dg_var *x;
  if ((x = add_vars(e->a, b, covered))) stray = x;
  if ((x = add_vars(e->b, b, covered))) stray = x;
  if ((x = add_vars(e->c, b, covered))) stray = x;
  for (int i = 0; i < e->nargs; i++)
    if ((x = add_vars(e->args[i], b, covered))) stray = x;
  return stray;
}

bool prim_reindex(prim_call *c, dg_status *st) {
  sched *s = c->s;
  dg_func *f = s->f;
  const sched_inst *in = c->inst;
  dg_block *b = sched_rv_block(s, &in->inputs[0], "block", st);
  if (!b) return false;
  int64_t kind;
  if (!sched_val_int(s, &in->attrs[1], "buffer index type", &kind, st)) return false;
  if (kind != 0 && kind != 1)
    return dg_fail(st, DG_ERR_INVALID, "buffer index type must be 0 (read) or 1 (write), got %lld",
                   (long long)kind);
  bool is_write = kind == 1;
  dg_buffer *buf = sched_access_buffer(s, b, &in->attrs[0], is_write, NULL, st);
  if (!buf) return false;
  sched_path p;
  DG_ASSERT(sched_locate_block(f, b, &p));
  dg_block *scope = sched_path_parent_block(&p, p.n - 1);
  if (!scope) return dg_fail(st, DG_ERR_INVALID, "block %s is the root block", b->name);

  /* every access of the buffer, with one pattern of indices */
  collect_ctx cc = {buf, NULL, 0, false, false};
  collect_stmt(&cc, b->body);
  if (cc.nested) return dg_fail(st, DG_ERR_INVALID, "block %s is not a leaf block", b->name);
  if (cc.n_access == 0)
    return dg_fail(st, DG_ERR_INVALID, "block %s does not load or store buffer %s in its body",
                   b->name, buf->name);
  if (cc.mismatch)
    return dg_fail(st, DG_ERR_INVALID,
                   "block %s accesses buffer %s with different indices: ReIndex needs one pattern",
                   b->name, buf->name);

  /* the block's loops must be a chain directly in the scope's body */
  int si = p.n - 2;
  while (si >= 0 && !(p.stmts[si]->kind == DG_STMT_BLOCK && p.stmts[si]->block == scope)) si--;
  DG_ASSERT(si >= 0);
  int top = si + 1, pos = 0;
  if (p.stmts[top]->kind == DG_STMT_SEQ) {
    dg_stmt *seq = p.stmts[top];
    top++;
    while (seq->stmts[pos] != p.stmts[top]) pos++;
  }
  for (int k = top; k < p.n - 1; k++) {
    if (p.stmts[k]->kind == DG_STMT_FOR) continue;
    const dg_stmt *up = k > top ? p.stmts[k - 1] : NULL;
    return dg_fail(st, DG_ERR_INVALID, "block %s is not under a chain of single loops in scope %s%s%s%s",
                   b->name, scope->name, up ? ": the body of loop " : "",
                   up ? up->loop_var->name : "", up ? " is not a single loop or block" : "");
  }
  if (is_write) pos++;

  /* the indices, simplified as TVM's SimplifyNonTrivialExpr (a variable of
   * a unit domain is kept rather than folded to 0) */
  dg_ranges rng = {.n = 0};
  for (int i = 0; i < b->n_iters && rng.n < (int)DG_ARRAY_LEN(rng.var); i++)
    ir_ranges_push(&rng, b->iters[i].var, 0, b->iters[i].extent - 1);
  int nd = buf->ndim;
  dg_expr **orig = DG_ANEWN(f->arena, dg_expr *, nd ? nd : 1);
  for (int d = 0; d < nd; d++) {
    dg_expr *x = ir_simplify(f, cc.idx[d], &rng);
    int64_t v;
    orig[d] = ir_is_const_int(x, &v) && !ir_is_const_int(cc.idx[d], &v) ? cc.idx[d] : x;
  }
  bool covered[256] = {false};
  if (b->n_iters > (int)DG_ARRAY_LEN(covered))
    return dg_fail(st, DG_ERR_INVALID, "block %s has too many iteration variables", b->name);
  for (int d = 0; d < nd; d++) {
    const dg_var *stray = add_vars(orig[d], b, covered);
    if (stray)
      return dg_fail(st, DG_ERR_INVALID,
                     "block %s indexes buffer %s with %s, which is not one of its iteration variables",
                     b->name, buf->name, stray->name);
  }
  int nc = 0;
  int64_t shape[DG_MAX_DIMS];
  for (int i = 0; i < b->n_iters; i++)
    if (covered[i]) {
      if (nc == DG_MAX_DIMS)
        return dg_fail(st, DG_ERR_INVALID, "buffer %s would need more than %d dimensions",
                       buf->name, DG_MAX_DIMS);
      shape[nc++] = b->iters[i].extent;
    }

  /* the new buffer and the copy stage */
  const char *bname = dg_arena_printf(f->arena, "%s_reindex", buf->name);
  dg_buffer *rb = ir_buffer_new(f, sched_fresh_buffer_name(f, bname), buf->dtype, nc, shape, buf->scope);
  dg_buffer *dst = is_write ? buf : rb, *src = is_write ? rb : buf;
  const char *stage_name = dg_arena_printf(f->arena, "%s_reindex", is_write ? buf->name : rb->name);
  dg_block *sb = ir_block_new(f, sched_fresh_block_name(f, stage_name));
  dg_subst *map = DG_ANEWN(f->arena, dg_subst, b->n_iters ? b->n_iters : 1);
  dg_expr **ridx = DG_ANEWN(f->arena, dg_expr *, nc ? nc : 1);
  dg_expr **own = DG_ANEWN(f->arena, dg_expr *, nc ? nc : 1);
  dg_var **loops = DG_ANEWN(f->arena, dg_var *, nc ? nc : 1);
  int64_t *exts = DG_ANEWN(f->arena, int64_t, nc ? nc : 1);
  int nmap = 0;
  for (int i = 0, k = 0; i < b->n_iters; i++) {
    if (!covered[i]) continue;
    dg_var *v = ir_var_new(f, sched_fresh_var_name(f, dg_arena_printf(f->arena, "v%d", k)), DG_I32);
    loops[k] = ir_var_new(f, sched_fresh_var_name(f, dg_arena_printf(f->arena, "ax%d", k)), DG_I32);
    exts[k] = b->iters[i].extent;
    ir_block_add_iter(f, sb, v, b->iters[i].extent, DG_ITER_SPATIAL, ir_var(f, loops[k]));
    map[nmap++] = (dg_subst){b->iters[i].var, ir_var(f, v)};
    ridx[k] = ir_var(f, v);
    own[k] = ir_var(f, b->iters[i].var);
    k++;
  }
  dg_expr **tidx = DG_ANEWN(f->arena, dg_expr *, nd ? nd : 1);
  for (int d = 0; d < nd; d++) tidx[d] = ir_subst_expr(f, orig[d], map, nmap);
  dg_expr **si_ = is_write ? ridx : tidx, **di = is_write ? tidx : ridx;
  ir_block_add_read(f, sb, src, si_, NULL);
  ir_block_add_write(f, sb, dst, di, NULL);
  sb->body = ir_store(f, dst, di, dst->ndim, ir_load(f, src, si_, src->ndim));
  dg_stmt *stage = ir_block_stmt(f, sb);
  for (int k = nc - 1; k >= 0; k--) stage = ir_for(f, loops[k], exts[k], DG_LOOP_SERIAL, DG_TAG_NONE, stage);

  /* the block accesses the new buffer at its own iteration variables */
  sched_access_map m = {f, buf, rb, NULL, own};
  sched_access_regions(&m, &b->reads, b->n_reads);
  sched_access_regions(&m, &b->writes, b->n_writes);
  sched_access_stmt(&m, &b->init, true, NULL, NULL);
  sched_access_stmt(&m, &b->body, true, NULL, NULL);
  sched_stmt_insert(f, &scope->body, pos, stage);
  ir_block_add_alloc(f, scope, rb);
  prim_out(c, sched_rv_new_block(s, sb));
  return true;
}
