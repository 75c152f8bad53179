/* local_stage.c: TVM's ManifestSharedMemoryLocalStage. A block annotated
 * tirx.manifest_shared_memory_local_stage, a copy whose body stores to
 * shared memory (the read caches of MultiLevelTilingTensorCore's pipelined
 * sketch), gets a register stage: the loaded value is first stored to a
 * new local buffer by a copy of the block's loop nest placed right before
 * it, and the block then stores from that buffer.
 *
 *   for f0 in 8:                              for f0' in 8: ..: for v' in 2 vectorized:
 *     ..threadIdx loops..                        X_local[f0', v'] = A[..f0', v'..]
 *       for v in 2 vectorized:          ->    for f0 in 8: ..: for v in 2 vectorized:
 *         X_shared[..] = A[..]                   X_shared[..] = X_local[f0, v]
 *
 * The local buffer has one dimension per serial or vectorized loop of the
 * nest (their extents, outermost first), indexed by their variables: what
 * TVM's CollectRelaxedOuterLoops finds after LiftThreadBinding has moved
 * the thread loops out of the nest, so threadIdx loops are copied but add
 * no dimension (each thread keeps its own registers). The nest is the
 * chain of single-child loops above the block up to the statement
 * sequence that holds it: where TVM places the stage, before the child of
 * the block that allocates the shared buffer (the outer reduction loop's
 * body in the sketch). The copy keeps the block's predicate; the block
 * keeps its annotations but this one.
 *
 * It runs on the scheduled kernel (blocks and their annotations), before
 * conversion, as TVM runs it on block-level TIR before
 * CompactBufferAllocation and InjectSoftwarePipeline: compaction shrinks
 * the local buffer, and the pipeline sees the two new statements as parts
 * of the loop (the sketch's annotations count them).
 *
 * Not done: a nest with other loop kinds (unrolled, vthread, blockIdx) is
 * refused, as TVM refuses it; predicated stores do not occur in dragon.
 */
#include <string.h>

#include "lower/lower_impl.h"

#define LOCAL_STAGE_KEY "tirx.manifest_shared_memory_local_stage"

enum { MAX_NEST = 32 };

typedef struct {
  lw_program *p;
  dg_block *root;
  dg_status *st;
  bool failed;
} ls_ctx;

static bool ls_fail(ls_ctx *c, const char *block, const char *why) {
  if (!c->failed)
    dg_fail(c->st, DG_ERR_INVALID, "lower: block %s is annotated %s but %s", block,
            LOCAL_STAGE_KEY, why);
  c->failed = true;
  return false;
}

static bool is_annotated(const dg_stmt *s) {
  return s && s->kind == DG_STMT_BLOCK && ir_anns_get(&s->block->anns, LOCAL_STAGE_KEY);
}

static bool nest_loop(const dg_stmt *s) {
  if (s->kind != DG_STMT_FOR) return false;
  if (s->loop_kind == DG_LOOP_SERIAL || s->loop_kind == DG_LOOP_VECTORIZED) return true;
  return s->loop_kind == DG_LOOP_THREAD && dg_thread_tag_is_thread(s->tag);
}

/* The loops from s down to an annotated block (n loops, the block in
 * *blk), or false when s does not head such a nest. */
static bool nest_of(dg_stmt *s, dg_stmt **loops, int *n, dg_stmt **blk) {
  *n = 0;
  while (s && nest_loop(s) && *n < MAX_NEST) {
    loops[(*n)++] = s;
    s = s->body;
  }
  if (!is_annotated(s)) return false;
  *blk = s;
  return true;
}

static dg_stmt *copy_for(dg_func *f, const dg_stmt *l, dg_var *v, dg_stmt *body) {
  dg_stmt *x = ir_for(f, v, l->extent, l->loop_kind, l->tag, body);
  for (int i = 0; i < l->anns.n; i++) ir_anns_set(f, &x->anns, &l->anns.items[i]);
  return x;
}

/* The register stage of the nest loops[0..n) -> blk; rewrites the block to
 * read from it. */
static dg_stmt *local_stage(ls_ctx *c, dg_stmt **loops, int n, dg_stmt *blk) {
  dg_func *f = c->p->f;
  dg_block *b = blk->block;
  dg_stmt *store = b->body;
  if (!store || store->kind != DG_STMT_STORE ||
      (store->buf->scope != DG_SCOPE_SHARED && store->buf->scope != DG_SCOPE_SHARED_DYN))
    return ls_fail(c, b->name, "its body is not a store to shared memory"), NULL;
  dg_subst map[MAX_NEST + 64];
  int nm = 0;
  if (b->n_iters > 64) return ls_fail(c, b->name, "it has more than 64 iterators"), NULL;
  int64_t shape[DG_MAX_DIMS];
  dg_expr *old_idx[DG_MAX_DIMS], *new_idx[DG_MAX_DIMS];
  int nd = 0;
  dg_var *nv[MAX_NEST];
  for (int i = 0; i < n; i++) {
    const dg_var *v = loops[i]->loop_var;
    nv[i] = ir_var_new(f, lw_fresh_name(c->p, v->name), v->dtype);
    map[nm++] = (dg_subst){v, ir_var(f, nv[i])};
    if (loops[i]->loop_kind == DG_LOOP_THREAD) continue;
    if (nd == DG_MAX_DIMS)
      return ls_fail(c, b->name, "its loop nest has more serial and vectorized loops than a "
                                 "buffer has dimensions"), NULL;
    shape[nd] = loops[i]->extent;
    old_idx[nd] = ir_var(f, (dg_var *)v);
    new_idx[nd] = ir_var(f, nv[i]);
    nd++;
  }
  if (nd == 0) {
    shape[0] = 1;
    old_idx[0] = new_idx[0] = ir_int(f, 0);
    nd = 1;
  }
  const char *sname = dg_arena_printf(f->arena, "%s_local", store->buf->name);
  dg_buffer *buf = ir_buffer_new(f, lw_fresh_name(c->p, sname), store->buf->dtype, nd, shape,
                                 DG_SCOPE_LOCAL);
  ir_block_add_alloc(f, c->root, buf);

  /* the stage's block: the copy's iterators (fresh) over the copied loops */
  int nl = nm;
  dg_block *lb = ir_block_new(f, lw_fresh_name(c->p, dg_arena_printf(f->arena, "%s_local",
                                                                      b->name)));
  for (int i = 0; i < b->n_iters; i++) {
    const dg_iter *it = &b->iters[i];
    dg_var *v = ir_var_new(f, lw_fresh_name(c->p, it->var->name), it->var->dtype);
    ir_block_add_iter(f, lb, v, it->extent, it->kind, ir_subst_expr(f, it->binding, map, nl));
    map[nm++] = (dg_subst){it->var, ir_var(f, v)};
  }
  dg_subst *imap = map + nl;
  int ni = nm - nl;
  for (int r = 0; r < b->n_reads; r++) {
    const dg_region *g = &b->reads[r];
    dg_expr *mn[DG_MAX_DIMS], *ex[DG_MAX_DIMS];
    for (int d = 0; d < g->buf->ndim; d++) {
      mn[d] = ir_subst_expr(f, g->min[d], imap, ni);
      ex[d] = g->ext ? ir_subst_expr(f, g->ext[d], imap, ni) : ir_int(f, 1);
    }
    ir_block_add_read(f, lb, g->buf, mn, ex);
  }
  ir_block_add_write(f, lb, buf, new_idx, NULL);
  if (b->predicate) lb->predicate = ir_subst_expr(f, b->predicate, map, nl);
  lb->body = ir_store(f, buf, new_idx, nd, ir_subst_expr(f, store->value, imap, ni));
  dg_stmt *s = ir_block_stmt(f, lb);
  for (int i = n - 1; i >= 0; i--) s = copy_for(f, loops[i], nv[i], s);

  /* the copy stores what the stage loaded */
  b->body = ir_store(f, store->buf, store->idx, store->nidx, ir_load(f, buf, old_idx, nd));
  ir_anns_remove(&b->anns, LOCAL_STAGE_KEY);
  return s;
}

static void visit(ls_ctx *c, dg_stmt *s);

/* A statement in a position where a nest may start: the stage and the
 * nest in a sequence, or NULL when s heads none (then visited inside). */
static dg_stmt *at_position(ls_ctx *c, dg_stmt *s) {
  dg_stmt *loops[MAX_NEST], *blk;
  int n;
  if (!s || !nest_of(s, loops, &n, &blk)) {
    visit(c, s);
    return NULL;
  }
  dg_stmt *stage = local_stage(c, loops, n, blk);
  if (!stage) return NULL;
  dg_stmt *two[2] = {stage, s};
  return ir_seq(c->p->f, two, 2);
}

static void visit(ls_ctx *c, dg_stmt *s) {
  if (!s || c->failed) return;
  dg_func *f = c->p->f;
  switch (s->kind) {
    case DG_STMT_SEQ: {
      dg_stmt **xs = NULL;
      int nx = 0;
      for (int i = 0; i < s->n; i++) {
        dg_stmt *r = at_position(c, s->stmts[i]);
        if (c->failed) return;
        if (r && !xs) {
          xs = DG_ANEWN(f->arena, dg_stmt *, 2 * s->n);
          memcpy(xs, s->stmts, sizeof(*xs) * (size_t)i);
          nx = i;
        }
        if (!xs) continue;
        if (r) {
          xs[nx++] = r->stmts[0];
          xs[nx++] = r->stmts[1];
        } else {
          xs[nx++] = s->stmts[i];
        }
      }
      if (xs) {
        s->stmts = xs;
        s->n = nx;
      }
      return;
    }
    case DG_STMT_FOR: {
      /* a nest under a loop that cannot be one of its loops (the loop
       * would be a relaxed loop of TVM's, which refuses it) */
      dg_stmt *loops[MAX_NEST], *blk;
      int n;
      if (s->body && nest_of(s->body, loops, &n, &blk)) {
        ls_fail(c, blk->block->name,
                dg_arena_printf(f->arena, "loop %s above it is not a serial, vectorized or threadIdx "
                                   "loop", s->loop_var->name));
        return;
      }
      visit(c, s->body);
      return;
    }
    case DG_STMT_IF: {
      dg_stmt *t = at_position(c, s->then_s);
      if (t) s->then_s = t;
      dg_stmt *e = at_position(c, s->else_s);
      if (e) s->else_s = e;
      return;
    }
    case DG_STMT_BLOCK:
      if (is_annotated(s))
        ls_fail(c, s->block->name, "the loops above it up to a statement sequence are not "
                                   "serial, vectorized or threadIdx loops");
      visit(c, s->block->body);
      return;
    case DG_STMT_STORE: return;
  }
}

bool lower_manifest_local_stage(lw_program *p, dg_status *st) {
  ls_ctx c = {.p = p, .root = ir_func_root(p->f), .st = st};
  visit(&c, c.root->body);
  return !c.failed;
}
