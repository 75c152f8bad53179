/* prim_cache.c: CacheRead and CacheWrite (TVM's cache_read_write.cc), and
 * the helpers the data-movement primitives (prim_reindex.c, prim_buffer.c)
 * share: buffer operands, storage scopes, stage insertion and the rewriting
 * of buffer accesses.
 *
 * CacheRead(block, i, scope, consumers) copies the buffer the block reads
 * at index i into a new buffer `<buf>_<scope>` through a new copy block of
 * the same name, and makes the consumers (every reader when the list is
 * empty) read the copy. CacheWrite(block, i, scope, consumers) makes the
 * block write `<buf>_<scope>` and copies it back into the buffer right
 * after, the listed consumers reading the cache. Where the copy goes is
 * TVM's CacheLocDetector: an input buffer is copied at the top of the
 * scope; a buffer written in the scope is copied at the lowest common
 * ancestor of its writer and the first related block (consumer for a read,
 * a reader that does not take the cache for a write), right before the
 * related block's subtree, or at the end of the scope when there is none.
 * The copied region is the writer's region relaxed over the loops between
 * it and that place (the full buffer for an input). Copied at the scope
 * root, the cache is compact (the region's shape, indices shifted by its
 * minimum); copied under a loop it has the buffer's full shape.
 *
 * Assumes the kernel passes ir_verify. Does not handle predicates when
 * relaxing regions (the region stays a valid over-approximation) and does
 * not check TVM's region-cover property in general: it rejects the case
 * that matters, a copy inside the reduction loops of the buffer's writer,
 * which would copy partial sums. Names with a dotted scope use '_'
 * ("A_shared_dyn"), as TVM's script printer does.
 */
#include <string.h>

#include "sched/sched_impl.h"

/* ---- operands ------------------------------------------------------------ */

bool sched_scope_arg(const sched_val *v, dg_scope *out, dg_status *st) {
  if (v->kind != SV_STR) return dg_fail(st, DG_ERR_INVALID, "storage scope must be a string");
  if (!dg_scope_from_name(v->s, strlen(v->s), out))
    return dg_fail(st, DG_ERR_INVALID,
                   "unknown storage scope '%s' (global, shared, shared.dyn, local, "
                   "wmma.matrix_a, wmma.matrix_b, wmma.accumulator)",
                   v->s);
  return true;
}

dg_buffer *sched_access_buffer(sched *s, const dg_block *b, const sched_val *index,
                               bool is_write, int *index_out, dg_status *st) {
  const char *what = is_write ? "write" : "read";
  int64_t i;
  if (!sched_val_int(s, index, is_write ? "write buffer index" : "read buffer index", &i, st))
    return NULL;
  int n = is_write ? b->n_writes : b->n_reads;
  if (i < 0 || i >= n) {
    dg_fail(st, DG_ERR_INVALID, "block %s has %d %s region%s, so the buffer index must be in [0, %d), got %lld",
            b->name, n, what, n == 1 ? "" : "s", n, (long long)i);
    return NULL;
  }
  if (index_out) *index_out = (int)i;
  return is_write ? b->writes[i].buf : b->reads[i].buf;
}

/* Where a stage's name comes from: `<base>_<scope>` with the scope's dots as
 * underscores, so that the name is an identifier of the kernel text. */
const char *sched_scoped_name(dg_func *f, const char *base, dg_scope scope) {
  char *n = dg_arena_printf(f->arena, "%s_%s", base, dg_scope_name(scope));
  for (char *p = n; *p; p++)
    if (*p == '.') *p = '_';
  return n;
}

/* ---- inserting a stage ----------------------------------------------------- */

void sched_stmt_insert(dg_func *f, dg_stmt **slot, int pos, dg_stmt *stage) {
  dg_stmt *body = *slot;
  if (body && body->kind == DG_STMT_SEQ) {
    DG_ASSERT(pos >= 0 && pos <= body->n);
    dg_stmt **v = DG_ANEWN(f->arena, dg_stmt *, body->n + 1);
    for (int i = 0, k = 0; i <= body->n; i++) v[i] = i == pos ? stage : body->stmts[k++];
    body->stmts = v;
    body->n++;
    return;
  }
  DG_ASSERT(pos == 0 || pos == 1);
  dg_stmt *two[2] = {pos == 0 ? stage : body, pos == 0 ? body : stage};
  *slot = body ? ir_seq(f, two, 2) : stage;
}

/* ---- rewriting accesses ------------------------------------------------------ */

static bool is_zero(const dg_expr *e) {
  int64_t v;
  return ir_is_const_int(e, &v) && v == 0;
}

/* a op b for integer index expressions whose dtypes may differ (i32 loop
 * variables against i64 indices): b is converted to a's dtype. */
static dg_expr *index_op(dg_func *f, dg_expr_kind k, dg_expr *a, dg_expr *b) {
  int64_t v;
  if (b->dtype != a->dtype)
    b = ir_is_const_int(b, &v) ? ir_int_t(f, v, a->dtype) : ir_cast(f, a->dtype, b);
  return ir_simplify(f, ir_bin(f, k, a, b), NULL);
}

/* The new indices of an access (m->to->ndim of them): fixed, or the old
 * ones shifted by the offset. */
static dg_expr **map_indices(const sched_access_map *m, dg_expr *const *idx) {
  int n = m->to->ndim;
  dg_expr **v = DG_ANEWN(m->f->arena, dg_expr *, n ? n : 1);
  if (m->fixed) {
    memcpy(v, m->fixed, sizeof(*v) * (size_t)n);
    return v;
  }
  for (int i = 0; i < n; i++) {
    if (m->offset && !is_zero(m->offset[i]))
      v[i] = index_op(m->f, DG_EXPR_SUB, idx[i], m->offset[i]);
    else v[i] = idx[i];
  }
  return v;
}

dg_expr *sched_access_expr(const sched_access_map *m, dg_expr *e) {
  if (!e) return NULL;
  switch (e->kind) {
    case DG_EXPR_INT:
    case DG_EXPR_FLOAT:
    case DG_EXPR_VAR: return e;
    case DG_EXPR_LOAD:
    case DG_EXPR_CALL: {
      dg_expr **args = NULL;
      for (int i = 0; i < e->nargs; i++) {
        dg_expr *x = sched_access_expr(m, e->args[i]);
        if (x == e->args[i] && !args) continue;
        if (!args) {
          args = DG_ANEWN(m->f->arena, dg_expr *, e->nargs);
          memcpy(args, e->args, sizeof(*args) * (size_t)e->nargs);
        }
        args[i] = x;
      }
      if (e->kind == DG_EXPR_LOAD && e->buf == m->from) {
        dg_expr **idx = map_indices(m, args ? args : e->args);
        return ir_load(m->f, m->to, idx, m->to->ndim);
      }
      if (!args) return e;
      dg_expr *c = ir_expr_copy(m->f, e);
      c->args = args;
      return c;
    }
    default: {
      dg_expr *a = sched_access_expr(m, e->a), *b = sched_access_expr(m, e->b),
              *c = sched_access_expr(m, e->c);
      if (a == e->a && b == e->b && c == e->c) return e;
      dg_expr *x = ir_expr_copy(m->f, e);
      x->a = a;
      x->b = b;
      x->c = c;
      return x;
    }
  }
}

void sched_access_regions(const sched_access_map *m, dg_region **rs, int n) {
  bool any = false;
  for (int i = 0; i < n; i++) any |= (*rs)[i].buf == m->from;
  if (!any) return;
  dg_region *v = DG_ANEWN(m->f->arena, dg_region, n);
  memcpy(v, *rs, sizeof(dg_region) * (size_t)n);
  for (int i = 0; i < n; i++) {
    if (v[i].buf != m->from) continue;
    dg_region r = {m->to, NULL, NULL};
    int nd = m->to->ndim;
    r.min = DG_ANEWN(m->f->arena, dg_expr *, nd ? nd : 1);
    r.ext = DG_ANEWN(m->f->arena, dg_expr *, nd ? nd : 1);
    for (int d = 0; d < nd; d++) {
      if (m->fixed) {
        r.min[d] = m->fixed[d];
        r.ext[d] = ir_int(m->f, 1);
      } else {
        r.min[d] = m->offset && !is_zero(m->offset[d])
                       ? index_op(m->f, DG_EXPR_SUB, v[i].min[d], m->offset[d])
                       : v[i].min[d];
        r.ext[d] = v[i].ext[d];
      }
    }
    v[i] = r;
  }
  *rs = v;
}

void sched_access_stmt(const sched_access_map *m, dg_stmt **slot, bool on,
                       sched_access_pick pick, void *ctx) {
  dg_stmt *s = *slot;
  if (!s) return;
  switch (s->kind) {
    case DG_STMT_FOR: sched_access_stmt(m, &s->body, on, pick, ctx); break;
    case DG_STMT_SEQ:
      for (int i = 0; i < s->n; i++) sched_access_stmt(m, &s->stmts[i], on, pick, ctx);
      break;
    case DG_STMT_IF:
      if (on) s->cond = sched_access_expr(m, s->cond);
      sched_access_stmt(m, &s->then_s, on, pick, ctx);
      sched_access_stmt(m, &s->else_s, on, pick, ctx);
      break;
    case DG_STMT_STORE: {
      if (!on) break;
      dg_expr *value = sched_access_expr(m, s->value);
      bool here = s->buf == m->from;
      dg_expr **idx = NULL;
      for (int i = 0; i < s->nidx; i++) {
        dg_expr *x = sched_access_expr(m, s->idx[i]);
        if (x == s->idx[i] && !idx) continue;
        if (!idx) {
          idx = DG_ANEWN(m->f->arena, dg_expr *, s->nidx);
          memcpy(idx, s->idx, sizeof(*idx) * (size_t)s->nidx);
        }
        idx[i] = x;
      }
      if (!here && !idx && value == s->value) break;
      if (here) *slot = ir_store(m->f, m->to, map_indices(m, idx ? idx : s->idx), m->to->ndim, value);
      else *slot = ir_store(m->f, s->buf, idx ? idx : s->idx, s->nidx, value);
      break;
    }
    case DG_STMT_BLOCK: {
      dg_block *b = s->block;
      sched_access_mode mode = pick ? pick(b, on, ctx) : (on ? SCHED_ACCESS_REWRITE : SCHED_ACCESS_PASS);
      if (mode == SCHED_ACCESS_SKIP) break;
      bool r = mode == SCHED_ACCESS_REWRITE;
      if (r) {
        sched_access_regions(m, &b->reads, b->n_reads);
        sched_access_regions(m, &b->writes, b->n_writes);
      }
      sched_access_stmt(m, &b->init, r, pick, ctx);
      sched_access_stmt(m, &b->body, r, pick, ctx);
      break;
    }
  }
}

/* ---- blocks of a scope --------------------------------------------------------- */

typedef DG_VEC(dg_block *) block_vec;

/* The child blocks of a statement (program order, not entering blocks). */
static void child_blocks(const dg_stmt *s, block_vec *out) {
  if (!s) return;
  switch (s->kind) {
    case DG_STMT_FOR: child_blocks(s->body, out); break;
    case DG_STMT_SEQ:
      for (int i = 0; i < s->n; i++) child_blocks(s->stmts[i], out);
      break;
    case DG_STMT_IF:
      child_blocks(s->then_s, out);
      child_blocks(s->else_s, out);
      break;
    case DG_STMT_BLOCK: DG_VEC_PUSH(out, s->block); break;
    case DG_STMT_STORE: break;
  }
}

static bool in_vec(const block_vec *v, const dg_block *b) {
  for (size_t i = 0; i < v->len; i++)
    if (v->data[i] == b) return true;
  return false;
}

static bool region_has(const dg_region *r, int n, const dg_buffer *buf) {
  for (int i = 0; i < n; i++)
    if (r[i].buf == buf) return true;
  return false;
}

static bool reads_buf(const dg_block *b, const dg_buffer *buf) {
  return region_has(b->reads, b->n_reads, buf);
}

static bool writes_buf(const dg_block *b, const dg_buffer *buf) {
  return region_has(b->writes, b->n_writes, buf);
}

/* Blocks after w in the scope that read a buffer w writes (TVM's RAW
 * dependencies of w), minus those in `except`. */
static void raw_readers(const block_vec *kids, const dg_block *w, const block_vec *except,
                        block_vec *out) {
  bool after = false;
  for (size_t i = 0; i < kids->len; i++) {
    dg_block *k = kids->data[i];
    if (k == w) {
      after = true;
      continue;
    }
    if (!after || (except && in_vec(except, k))) continue;
    for (int j = 0; j < w->n_writes; j++)
      if (reads_buf(k, w->writes[j].buf)) {
        DG_VEC_PUSH(out, k);
        break;
      }
  }
}

/* ---- where the stage goes (TVM's CacheLocDetector) --------------------------- */

typedef struct {
  const dg_block *scope, *writer;
  const block_vec *related;
  bool visited_block, visited_related;
  int pos;            /* -1 until found */
  dg_stmt *seq;       /* the SEQ the position is in; NULL: the scope's body */
  dg_stmt *loop;      /* the innermost loop around it; NULL: the scope block */
  bool loc_set;
} loc_detector;

static void detect(loc_detector *d, dg_stmt *s) {
  if (!s) return;
  switch (s->kind) {
    case DG_STMT_FOR:
      detect(d, s->body);
      if (d->visited_block && d->visited_related && !d->loc_set && d->pos != -1) {
        d->loop = s;
        d->loc_set = true;
      }
      break;
    case DG_STMT_SEQ: {
      bool prev = d->visited_block;
      d->visited_block = false;
      for (int i = 0; i < s->n; i++) {
        if (d->pos != -1) break;
        detect(d, s->stmts[i]);
        if (d->visited_block && d->visited_related && d->pos == -1) {
          d->pos = i;
          d->seq = s;
          break;
        }
        if (d->visited_related) break;
      }
      d->visited_block = d->visited_block || prev;
      break;
    }
    case DG_STMT_IF:
      detect(d, s->then_s);
      detect(d, s->else_s);
      break;
    case DG_STMT_BLOCK:
      if (s->block == d->writer) d->visited_block = true;
      else if (in_vec(d->related, s->block)) d->visited_related = true;
      break;
    case DG_STMT_STORE: break;
  }
}

/* Fills the insertion point of a stage for `writer` in `scope`. Returns false
 * if none is found (the related blocks are not after the writer). */
static bool detect_location(dg_block *scope, dg_block *writer, const block_vec *related,
                            loc_detector *d) {
  memset(d, 0, sizeof *d);
  d->scope = scope;
  d->writer = writer;
  d->related = related;
  d->pos = -1;
  if (related->len == 0) {
    d->pos = scope->body && scope->body->kind == DG_STMT_SEQ ? scope->body->n : 1;
    return true;
  }
  detect(d, scope->body);
  if (d->visited_related && !d->loc_set) {
    d->loop = NULL;
    d->loc_set = true;
    if (!d->visited_block && d->pos == -1) d->pos = 0;
  }
  return d->loc_set && d->pos != -1;
}

/* ---- the cached region ----------------------------------------------------------- */

static void push_range(dg_ranges *r, const dg_var *v, int64_t ext) {
  if (r->n < (int)DG_ARRAY_LEN(r->var)) ir_ranges_push(r, v, 0, ext - 1);
}

typedef struct {
  const dg_var *vars[256];
  int n;
} var_list;

static bool only_vars(const dg_expr *e, const var_list *ok) {
  if (!e) return true;
  if (e->kind == DG_EXPR_VAR) {
    for (int i = 0; i < ok->n; i++)
      if (ok->vars[i] == e->var) return true;
    return false;
  }
  if (!only_vars(e->a, ok) || !only_vars(e->b, ok) || !only_vars(e->c, ok)) return false;
  for (int i = 0; i < e->nargs; i++)
    if (!only_vars(e->args[i], ok)) return false;
  return true;
}

/* The region of w's region r relaxed over the loops on w's path p strictly
 * between path element `loc` and w (TVM's RelaxBufferRegion): bindings
 * substituted, each dimension an interval [min, min + ext). Dimensions the
 * analysis cannot bound within the buffer take the whole dimension. */
static void relax_region(dg_func *f, const sched_path *p, int loc, const dg_block *w,
                         const dg_region *r, dg_expr **min, int64_t *ext) {
  dg_ranges rng = {.n = 0};
  var_list relaxed = {.n = 0};
  int64_t rel_ext[256];
  for (int k = 0; k < p->n - 1; k++) {
    dg_stmt *x = p->stmts[k];
    if (x->kind == DG_STMT_FOR) {
      push_range(&rng, x->loop_var, x->extent);
      if (k > loc && relaxed.n < (int)DG_ARRAY_LEN(relaxed.vars)) {
        rel_ext[relaxed.n] = x->extent;
        relaxed.vars[relaxed.n++] = x->loop_var;
      }
    } else if (x->kind == DG_STMT_BLOCK) {
      for (int i = 0; i < x->block->n_iters; i++)
        push_range(&rng, x->block->iters[i].var, x->block->iters[i].extent);
    }
  }
  dg_subst *bind = DG_ANEWN(f->arena, dg_subst, w->n_iters ? w->n_iters : 1);
  for (int i = 0; i < w->n_iters; i++) bind[i] = (dg_subst){w->iters[i].var, w->iters[i].binding};
  const dg_buffer *buf = r->buf;
  for (int d = 0; d < buf->ndim; d++) {
    min[d] = ir_int(f, 0);
    ext[d] = buf->shape[d];
    dg_expr *e = ir_simplify(f, ir_subst_expr(f, r->min[d], bind, w->n_iters), &rng);
    int64_t x;
    if (!ir_is_const_int(ir_simplify(f, ir_subst_expr(f, r->ext[d], bind, w->n_iters), &rng), &x) ||
        x < 1)
      continue;
    if (only_vars(e, &relaxed)) {
      dg_interval lo = ir_expr_bounds(e, &rng);
      if (lo.lo < 0 || lo.hi > buf->shape[d] - x) {
        if (lo.lo < 0) lo.lo = 0;
        if (lo.hi > buf->shape[d] - x) lo.hi = buf->shape[d] - x;
        if (lo.lo > lo.hi) continue;
      }
      min[d] = ir_int(f, lo.lo);
      ext[d] = lo.hi - lo.lo + x;
      continue;
    }
    /* symbolic in the loops above the stage: affine in each relaxed loop,
     * with a constant coefficient, or the whole dimension */
    dg_expr *lo_e = e;
    int64_t span = x - 1;
    bool affine = true;
    for (int i = 0; i < relaxed.n && affine; i++) {
      const dg_var *v = relaxed.vars[i];
      if (!ir_expr_uses_var(e, v)) continue;
      dg_subst up = {v, ir_add(f, ir_var(f, (dg_var *)v), ir_int(f, 1))};
      int64_t c;
      if (!ir_is_const_int(ir_simplify(f, ir_sub(f, ir_subst_expr(f, e, &up, 1), e), &rng), &c)) {
        affine = false;
        break;
      }
      dg_subst at = {v, ir_int(f, c >= 0 ? 0 : rel_ext[i] - 1)};
      lo_e = ir_subst_expr(f, lo_e, &at, 1);
      span += (c >= 0 ? c : -c) * (rel_ext[i] - 1);
    }
    if (!affine) continue;
    lo_e = ir_simplify(f, lo_e, &rng);
    dg_interval b = ir_expr_bounds(lo_e, &rng);
    if (b.lo < 0 || b.hi > buf->shape[d] - 1 - span) continue;
    min[d] = lo_e;
    ext[d] = span + 1;
  }
}

/* ---- the stage ------------------------------------------------------------------- */

/* A copy block `name` from src to dst over a region [min, min + ext) of the
 * original buffer `orig` (src for a read, dst for a write), under loops ax0..
 * with iteration variables v0.. (TVM's MakeCacheStage). */
static dg_stmt *make_stage(dg_func *f, const char *name, dg_buffer *src, dg_buffer *dst,
                           dg_buffer *orig, dg_expr **min, const int64_t *ext, bool full,
                           dg_block **out) {
  int nd = orig->ndim;
  dg_var **loops = DG_ANEWN(f->arena, dg_var *, nd ? nd : 1);
  dg_expr **oi = DG_ANEWN(f->arena, dg_expr *, nd ? nd : 1);
  dg_expr **ci = DG_ANEWN(f->arena, dg_expr *, nd ? nd : 1);
  dg_block *b = ir_block_new(f, name);
  for (int d = 0; d < nd; d++) {
    loops[d] = ir_var_new(f, sched_fresh_var_name(f, dg_arena_printf(f->arena, "ax%d", d)), DG_I32);
    dg_var *v = ir_var_new(f, sched_fresh_var_name(f, dg_arena_printf(f->arena, "v%d", d)), DG_I32);
    dg_expr *ax = ir_var(f, loops[d]);
    dg_expr *bind = full ? index_op(f, DG_EXPR_ADD, ax, min[d]) : ax;
    ir_block_add_iter(f, b, v, full ? orig->shape[d] : ext[d], DG_ITER_SPATIAL, bind);
    ci[d] = ir_var(f, v);
    oi[d] = full || is_zero(min[d]) ? ci[d] : index_op(f, DG_EXPR_ADD, ci[d], min[d]);
  }
  dg_expr **si = src == orig ? oi : ci, **di = dst == orig ? oi : ci;
  ir_block_add_read(f, b, src, si, NULL);
  ir_block_add_write(f, b, dst, di, NULL);
  b->body = ir_store(f, dst, di, nd, ir_load(f, src, si, nd));
  dg_stmt *st = ir_block_stmt(f, b);
  for (int d = nd - 1; d >= 0; d--) st = ir_for(f, loops[d], ext[d], DG_LOOP_SERIAL, DG_TAG_NONE, st);
  *out = b;
  return st;
}

/* ---- shared preparation ----------------------------------------------------------- */

typedef struct {
  dg_func *f;
  dg_block *block, *scope;
  dg_buffer *buf;
  dg_scope mem;
  block_vec kids;      /* child blocks of the scope */
  block_vec consumers; /* the listed consumers and their child blocks */
  int n_listed;
} cache_ctx;

static void cache_ctx_free(cache_ctx *x) {
  DG_VEC_FREE(&x->kids);
  DG_VEC_FREE(&x->consumers);
}

static bool cache_prepare(prim_call *c, bool is_write, cache_ctx *x, dg_status *st) {
  sched *s = c->s;
  const sched_inst *in = c->inst;
  memset(x, 0, sizeof *x);
  x->f = s->f;
  x->block = sched_rv_block(s, &in->inputs[0], "block", st);
  if (!x->block) return false;
  x->buf = sched_access_buffer(s, x->block, &in->attrs[0], is_write, NULL, st);
  if (!x->buf) return false;
  if (!sched_scope_arg(&in->attrs[1], &x->mem, st)) return false;
  if (!is_write && x->mem == DG_SCOPE_WMMA_ACC)
    return dg_fail(st, DG_ERR_INVALID,
                   "cannot cache buffer %s into wmma.accumulator: accumulator fragments are "
                   "written by a compute block (use CacheWrite)", x->buf->name);
  if (is_write && (x->mem == DG_SCOPE_WMMA_A || x->mem == DG_SCOPE_WMMA_B))
    return dg_fail(st, DG_ERR_INVALID,
                   "cannot cache the writes of buffer %s into %s: operand fragments are only "
                   "read (use wmma.accumulator)", x->buf->name, dg_scope_name(x->mem));
  sched_path p;
  DG_ASSERT(sched_locate_block(s->f, x->block, &p));
  x->scope = sched_path_parent_block(&p, p.n - 1);
  if (!x->scope)
    return dg_fail(st, DG_ERR_INVALID, "block %s is the root block: it has no scope to cache in",
                   x->block->name);
  child_blocks(x->scope->body, &x->kids);
  const sched_val *list = &in->inputs[1];
  if (list->kind != SV_ARRAY && list->kind != SV_NONE)
    return dg_fail(st, DG_ERR_INVALID, "consumer blocks must be a list of block handles");
  int n = list->kind == SV_ARRAY ? list->n : 0;
  for (int i = 0; i < n; i++) {
    dg_block *k = sched_rv_block(s, &list->items[i], "consumer block", st);
    if (!k) return false;
    if (!in_vec(&x->kids, k))
      return dg_fail(st, DG_ERR_INVALID, "consumer block %s is not in the scope of block %s (%s)",
                     k->name, x->block->name, x->scope->name);
    block_vec sub = {0};
    child_blocks(k->body, &sub);
    bool reads = reads_buf(k, x->buf);
    for (size_t j = 0; j < sub.len; j++) reads |= reads_buf(sub.data[j], x->buf);
    if (!reads) {
      DG_VEC_FREE(&sub);
      return dg_fail(st, DG_ERR_INVALID, "consumer block %s does not read buffer %s", k->name,
                     x->buf->name);
    }
    DG_VEC_PUSH(&x->consumers, k);
    for (size_t j = 0; j < sub.len; j++) DG_VEC_PUSH(&x->consumers, sub.data[j]);
    DG_VEC_FREE(&sub);
  }
  x->n_listed = n;
  return true;
}

/* The only writer of x->buf among the scope's child blocks (NULL if none). */
static bool only_writer(cache_ctx *x, dg_block **out, dg_status *st) {
  *out = NULL;
  int n = 0;
  const char *names[2] = {NULL, NULL};
  for (size_t i = 0; i < x->kids.len; i++)
    if (writes_buf(x->kids.data[i], x->buf)) {
      if (n < 2) names[n] = x->kids.data[i]->name;
      n++;
      *out = x->kids.data[i];
    }
  if (n > 1)
    return dg_fail(st, DG_ERR_INVALID,
                   "buffer %s is written by %d blocks in scope %s (%s, %s%s), a cache needs a single writer",
                   x->buf->name, n, x->scope->name, names[0], names[1], n > 2 ? ", ..." : "");
  return true;
}

/* Index in path p of the stage's location: the loop d->loop or the scope. */
static int loc_index(const sched_path *p, const loc_detector *d, const dg_block *scope) {
  for (int k = p->n - 1; k >= 0; k--) {
    if (d->loop ? p->stmts[k] == d->loop
                : (p->stmts[k]->kind == DG_STMT_BLOCK && p->stmts[k]->block == scope))
      return k;
  }
  DG_UNREACHABLE();
}

/* Inserts the stage, allocates the cache in the scope, returns its handle. */
static void cache_finish(prim_call *c, cache_ctx *x, const loc_detector *d, dg_stmt *stage,
                         dg_block *stage_block, dg_buffer *cache) {
  dg_stmt *seq = d->seq;
  sched_stmt_insert(x->f, seq ? &seq : &x->scope->body, d->pos, stage);
  ir_block_add_alloc(x->f, x->scope, cache);
  prim_out(c, sched_rv_new_block(c->s, stage_block));
}

/* ---- CacheRead ---------------------------------------------------------------------- */

typedef struct {
  const dg_buffer *buf;
  const block_vec *consumers; /* empty: every reader */
} read_pick_ctx;

static sched_access_mode read_pick(const dg_block *b, bool in_rewrite, void *vctx) {
  (void)in_rewrite;
  read_pick_ctx *c = vctx;
  if (writes_buf(b, c->buf)) return SCHED_ACCESS_SKIP;
  if (c->consumers->len == 0 || in_vec(c->consumers, b)) return SCHED_ACCESS_REWRITE;
  return SCHED_ACCESS_PASS;
}

bool prim_cache_read(prim_call *c, dg_status *st) {
  cache_ctx x;
  loc_detector d;
  bool ok = cache_prepare(c, false, &x, st);
  dg_block *w = NULL;
  ok = ok && only_writer(&x, &w, st);
  if (ok && w == x.block)
    ok = dg_fail(st, DG_ERR_INVALID,
                 "block %s both reads and writes buffer %s: cache its writes (CacheWrite) instead",
                 x.block->name, x.buf->name);
  if (ok && w && in_vec(&x.consumers, w))
    ok = dg_fail(st, DG_ERR_INVALID, "consumer block %s writes buffer %s", w->name, x.buf->name);
  if (!ok) {
    cache_ctx_free(&x);
    return false;
  }
  dg_func *f = x.f;
  int nd = x.buf->ndim;
  dg_expr **min = DG_ANEWN(f->arena, dg_expr *, nd ? nd : 1);
  int64_t ext[DG_MAX_DIMS];
  if (w) {
    block_vec related = {0};
    if (x.n_listed) {
      for (size_t i = 0; i < x.consumers.len; i++) DG_VEC_PUSH(&related, x.consumers.data[i]);
    } else {
      raw_readers(&x.kids, w, NULL, &related);
    }
    bool found = detect_location(x.scope, w, &related, &d);
    DG_VEC_FREE(&related);
    if (!found) {
      cache_ctx_free(&x);
      return dg_fail(st, DG_ERR_INVALID,
                     "no place for the copy of buffer %s: its consumers do not follow its writer %s",
                     x.buf->name, w->name);
    }
    sched_path p;
    DG_ASSERT(sched_locate_block(f, w, &p));
    int loc = loc_index(&p, &d, x.scope);
    /* the copy runs once per iteration of the loops down to its location:
     * inside the writer's reduction loops it would copy partial results */
    for (int k = loc; k > 0 && p.stmts[k]->kind != DG_STMT_BLOCK; k--) {
      if (p.stmts[k]->kind != DG_STMT_FOR) continue;
      const dg_var *lv = p.stmts[k]->loop_var;
      for (int i = 0; i < w->n_iters; i++)
        if (w->iters[i].kind == DG_ITER_REDUCE && ir_expr_uses_var(w->iters[i].binding, lv)) {
          cache_ctx_free(&x);
          return dg_fail(st, DG_ERR_INVALID,
                         "buffer %s is reduced by block %s over loop %s, and its consumers are "
                         "inside that loop: the copy would read partial results",
                         x.buf->name, w->name, lv->name);
        }
    }
    int wi = 0;
    while (w->writes[wi].buf != x.buf) wi++;
    relax_region(f, &p, loc, w, &w->writes[wi], min, ext);
  } else {
    memset(&d, 0, sizeof d);
    d.pos = 0; /* an input of the scope: copied first thing in it */
    const dg_region *sr = NULL;
    for (int i = 0; i < x.scope->n_reads; i++)
      if (x.scope->reads[i].buf == x.buf) sr = &x.scope->reads[i];
    for (int k = 0; k < nd; k++) {
      int64_t e;
      if (sr && ir_is_const_int(sr->ext[k], &e) && e >= 1) {
        min[k] = sr->min[k];
        ext[k] = e;
      } else {
        min[k] = ir_int(f, 0);
        ext[k] = x.buf->shape[k];
      }
    }
  }
  bool full = d.loop != NULL;
  const char *nm = sched_scoped_name(f, x.buf->name, x.mem);
  dg_buffer *cache = ir_buffer_new(f, sched_fresh_buffer_name(f, nm), x.buf->dtype, nd,
                                   full ? x.buf->shape : ext, x.mem);
  dg_block *sb;
  dg_stmt *stage = make_stage(f, sched_fresh_block_name(f, nm), x.buf, cache, x.buf, min, ext, full, &sb);
  sched_access_map m = {f, x.buf, cache, full ? NULL : min, NULL};
  read_pick_ctx pc = {x.buf, &x.consumers};
  sched_access_stmt(&m, &x.scope->body, false, read_pick, &pc);
  cache_finish(c, &x, &d, stage, sb, cache);
  cache_ctx_free(&x);
  return true;
}

/* ---- CacheWrite ----------------------------------------------------------------------- */

typedef struct {
  const dg_block *writer;
  const block_vec *consumers;
} write_pick_ctx;

static sched_access_mode write_pick(const dg_block *b, bool in_rewrite, void *vctx) {
  write_pick_ctx *c = vctx;
  if (in_rewrite || b == c->writer || in_vec(c->consumers, b)) return SCHED_ACCESS_REWRITE;
  return SCHED_ACCESS_SKIP;
}

bool prim_cache_write(prim_call *c, dg_status *st) {
  cache_ctx x;
  loc_detector d;
  bool ok = cache_prepare(c, true, &x, st);
  dg_block *w = NULL;
  ok = ok && only_writer(&x, &w, st);
  if (ok && in_vec(&x.consumers, x.block))
    ok = dg_fail(st, DG_ERR_INVALID, "block %s cannot be a consumer of its own cache", x.block->name);
  if (!ok) {
    cache_ctx_free(&x);
    return false;
  }
  DG_ASSERT(w == x.block);
  dg_func *f = x.f;
  block_vec related = {0};
  raw_readers(&x.kids, x.block, &x.consumers, &related);
  bool found = detect_location(x.scope, x.block, &related, &d);
  DG_VEC_FREE(&related);
  if (!found) {
    cache_ctx_free(&x);
    return dg_fail(st, DG_ERR_INVALID, "no place for the copy of buffer %s after block %s",
                   x.buf->name, x.block->name);
  }
  int nd = x.buf->ndim;
  dg_expr **min = DG_ANEWN(f->arena, dg_expr *, nd ? nd : 1);
  int64_t ext[DG_MAX_DIMS];
  sched_path p;
  DG_ASSERT(sched_locate_block(f, x.block, &p));
  int wi = 0;
  while (x.block->writes[wi].buf != x.buf) wi++;
  relax_region(f, &p, loc_index(&p, &d, x.scope), x.block, &x.block->writes[wi], min, ext);
  bool full = d.loop != NULL;
  const char *nm = sched_scoped_name(f, x.buf->name, x.mem);
  dg_buffer *cache = ir_buffer_new(f, sched_fresh_buffer_name(f, nm), x.buf->dtype, nd,
                                   full ? x.buf->shape : ext, x.mem);
  dg_block *sb;
  dg_stmt *stage = make_stage(f, sched_fresh_block_name(f, nm), cache, x.buf, x.buf, min, ext, full, &sb);
  sched_access_map m = {f, x.buf, cache, full ? NULL : min, NULL};
  write_pick_ctx pc = {x.block, &x.consumers};
  sched_access_stmt(&m, &x.scope->body, false, write_pick, &pc);
  cache_finish(c, &x, &d, stage, sb, cache);
  cache_ctx_free(&x);
  return true;
}
