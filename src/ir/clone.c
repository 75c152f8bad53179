/* clone.c: deep copy of a kernel into a fresh arena (ir_func_clone).
 *
 * Every node, array, string and annotation is copied, so the clone shares no
 * memory with the original and outlives it. Variables and buffers are
 * copied once each (a pointer map keeps every use pointing at the one copy)
 * and keep their ids, names, dtypes, shapes and scopes; the id counters are
 * carried over so that new variables in the clone get fresh ids. A node
 * shared by two places of the original becomes two nodes in the clone.
 */
#include <stdlib.h>
#include <string.h>

#include "dragon/ir.h"

/* ---- a pointer map (open addressing, grows at half full) ----------------- */

typedef struct {
  const void **key;
  void **val;
  size_t cap, n;
} pmap;

static size_t ptr_hash(const void *p) {
  uint64_t x = (uint64_t)(uintptr_t)p;
  x ^= x >> 33;
  x *= 0xff51afd7ed558ccdull;
  x ^= x >> 33;
  return (size_t)x;
}

static void pmap_free(pmap *m) {
  free(m->key);
  free(m->val);
  memset(m, 0, sizeof *m);
}

static void *pmap_get(const pmap *m, const void *k) {
  if (!m->cap) return NULL;
  for (size_t i = ptr_hash(k) & (m->cap - 1);; i = (i + 1) & (m->cap - 1)) {
    if (m->key[i] == k) return m->val[i];
    if (!m->key[i]) return NULL;
  }
}

static void pmap_put(pmap *m, const void *k, void *v) {
  if (2 * (m->n + 1) > m->cap) {
    pmap g = {0};
    g.cap = m->cap ? 2 * m->cap : 64;
    g.key = dg_calloc(g.cap, sizeof(void *));
    g.val = dg_calloc(g.cap, sizeof(void *));
    for (size_t i = 0; i < m->cap; i++)
      if (m->key[i]) pmap_put(&g, m->key[i], m->val[i]);
    pmap_free(m);
    *m = g;
  }
  size_t i = ptr_hash(k) & (m->cap - 1);
  while (m->key[i] && m->key[i] != k) i = (i + 1) & (m->cap - 1);
  if (!m->key[i]) m->n++;
  m->key[i] = k;
  m->val[i] = v;
}

/* ---- copying ------------------------------------------------------------- */

typedef struct {
  dg_func *g; /* the clone */
  pmap vars, bufs;
} cl_ctx;

static const char *str(cl_ctx *c, const char *s) {
  return s ? dg_arena_strdup(c->g->arena, s) : NULL;
}

static dg_var *cl_var(cl_ctx *c, const dg_var *v) {
  if (!v) return NULL;
  dg_var *n = pmap_get(&c->vars, v);
  if (n) return n;
  n = DG_ANEW(c->g->arena, dg_var);
  n->name = str(c, v->name);
  n->dtype = v->dtype;
  n->id = v->id;
  pmap_put(&c->vars, v, n);
  return n;
}

static dg_buffer *cl_buf(cl_ctx *c, const dg_buffer *b) {
  if (!b) return NULL;
  dg_buffer *n = pmap_get(&c->bufs, b);
  if (n) return n;
  n = DG_ANEW(c->g->arena, dg_buffer);
  *n = *b;
  n->name = str(c, b->name);
  pmap_put(&c->bufs, b, n);
  return n;
}

static dg_expr *cl_expr(cl_ctx *c, const dg_expr *e) {
  if (!e) return NULL;
  dg_expr *n = DG_ANEW(c->g->arena, dg_expr);
  *n = *e;
  n->var = cl_var(c, e->var);
  n->buf = cl_buf(c, e->buf);
  n->a = cl_expr(c, e->a);
  n->b = cl_expr(c, e->b);
  n->c = cl_expr(c, e->c);
  if (e->args) {
    n->args = DG_ANEWN(c->g->arena, dg_expr *, e->nargs > 0 ? e->nargs : 1);
    for (int i = 0; i < e->nargs; i++) n->args[i] = cl_expr(c, e->args[i]);
  }
  return n;
}

static dg_expr **cl_exprs(cl_ctx *c, dg_expr *const *v, int n) {
  if (!v) return NULL;
  dg_expr **out = DG_ANEWN(c->g->arena, dg_expr *, n > 0 ? n : 1);
  for (int i = 0; i < n; i++) out[i] = cl_expr(c, v[i]);
  return out;
}

static dg_anns cl_anns(cl_ctx *c, const dg_anns *a) {
  dg_anns out = {NULL, a->n};
  if (!a->n) return out;
  out.items = DG_ANEWN(c->g->arena, dg_ann, a->n);
  for (int i = 0; i < a->n; i++) {
    const dg_ann *x = &a->items[i];
    dg_ann *y = &out.items[i];
    *y = *x;
    y->key = str(c, x->key);
    y->s = str(c, x->s);
    /* an empty list copies nothing (its pointer may own no bytes) */
    y->ints = x->ints && x->nints > 0
                  ? dg_arena_memdup(c->g->arena, x->ints, sizeof(int64_t) * (size_t)x->nints)
                  : NULL;
  }
  return out;
}

static dg_region *cl_regions(cl_ctx *c, const dg_region *r, int n) {
  if (!r || n <= 0) return NULL;
  dg_region *out = DG_ANEWN(c->g->arena, dg_region, n);
  for (int i = 0; i < n; i++) {
    int nd = r[i].buf ? r[i].buf->ndim : 0;
    out[i].buf = cl_buf(c, r[i].buf);
    out[i].min = cl_exprs(c, r[i].min, nd);
    out[i].ext = cl_exprs(c, r[i].ext, nd);
  }
  return out;
}

static dg_stmt *cl_stmt(cl_ctx *c, const dg_stmt *s);

static dg_block *cl_block(cl_ctx *c, const dg_block *b) {
  if (!b) return NULL;
  dg_block *n = DG_ANEW(c->g->arena, dg_block);
  *n = *b;
  n->name = str(c, b->name);
  if (b->n_iters > 0) {
    n->iters = DG_ANEWN(c->g->arena, dg_iter, b->n_iters);
    for (int i = 0; i < b->n_iters; i++) {
      n->iters[i] = b->iters[i];
      n->iters[i].var = cl_var(c, b->iters[i].var);
      n->iters[i].binding = cl_expr(c, b->iters[i].binding);
    }
  } else {
    n->iters = NULL;
  }
  n->predicate = cl_expr(c, b->predicate);
  n->reads = cl_regions(c, b->reads, b->n_reads);
  n->writes = cl_regions(c, b->writes, b->n_writes);
  if (b->n_allocs > 0) {
    n->allocs = DG_ANEWN(c->g->arena, dg_buffer *, b->n_allocs);
    for (int i = 0; i < b->n_allocs; i++) n->allocs[i] = cl_buf(c, b->allocs[i]);
  } else {
    n->allocs = NULL;
  }
  n->anns = cl_anns(c, &b->anns);
  n->init = cl_stmt(c, b->init);
  n->body = cl_stmt(c, b->body);
  return n;
}

static dg_stmt *cl_stmt(cl_ctx *c, const dg_stmt *s) {
  if (!s) return NULL;
  dg_stmt *n = DG_ANEW(c->g->arena, dg_stmt);
  *n = *s;
  n->loop_var = cl_var(c, s->loop_var);
  n->anns = cl_anns(c, &s->anns);
  n->body = cl_stmt(c, s->body);
  if (s->stmts) {
    n->stmts = DG_ANEWN(c->g->arena, dg_stmt *, s->n > 0 ? s->n : 1);
    for (int i = 0; i < s->n; i++) n->stmts[i] = cl_stmt(c, s->stmts[i]);
  }
  n->block = cl_block(c, s->block);
  n->buf = cl_buf(c, s->buf);
  n->idx = cl_exprs(c, s->idx, s->nidx);
  n->value = cl_expr(c, s->value);
  n->cond = cl_expr(c, s->cond);
  n->then_s = cl_stmt(c, s->then_s);
  n->else_s = cl_stmt(c, s->else_s);
  return n;
}

dg_func *ir_func_clone(const dg_func *f) {
  cl_ctx c = {0};
  c.g = ir_func_new(f->name ? f->name : "");
  if (!f->name) c.g->name = NULL;
  /* parameters first, in order, so their copies exist before any use */
  for (int i = 0; i < f->n_params; i++) ir_func_add_param(c.g, cl_buf(&c, f->params[i]));
  c.g->body = cl_stmt(&c, f->body);
  c.g->next_var_id = f->next_var_id;
  c.g->next_buf_id = f->next_buf_id;
  pmap_free(&c.vars);
  pmap_free(&c.bufs);
  return c.g;
}
