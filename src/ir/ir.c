/* ir.c: the IR's enumeration tables, constructors, annotation sets and
 * simple queries. Analysis lives in simplify.c/bounds.c, equality in
 * equal.c, the verifier in verify.c, the kernel text in printer.c/parser.c. */
#include "dragon/ir.h"

#include <string.h>

/* ---- tables -------------------------------------------------------------- */

static const struct {
  const char *name;
  int bytes, is_float;
} dtype_tab[] = {
#define X(e, s, b, f) {s, b, f},
    DG_DTYPE_LIST(X)
#undef X
};
_Static_assert(DG_ARRAY_LEN(dtype_tab) == DG_DTYPE_COUNT, "dtype table");

const char *dg_dtype_name(dg_dtype t) { return dtype_tab[t].name; }
int dg_dtype_bytes(dg_dtype t) { return dtype_tab[t].bytes; }
bool dg_dtype_is_float(dg_dtype t) { return dtype_tab[t].is_float; }
bool dg_dtype_is_int(dg_dtype t) { return t == DG_I8 || t == DG_I32 || t == DG_I64; }

static bool lookup(const char *const *names, int count, const char *s, size_t n,
                   int *out) {
  for (int i = 0; i < count; i++)
    if (strlen(names[i]) == n && memcmp(names[i], s, n) == 0) {
      *out = i;
      return true;
    }
  return false;
}

bool dg_dtype_from_name(const char *s, size_t n, dg_dtype *out) {
  const char *names[DG_DTYPE_COUNT];
  for (int i = 0; i < DG_DTYPE_COUNT; i++) names[i] = dtype_tab[i].name;
  int k;
  if (!lookup(names, DG_DTYPE_COUNT, s, n, &k)) return false;
  *out = (dg_dtype)k;
  return true;
}

static const char *const scope_tab[] = {
#define X(e, s) s,
    DG_SCOPE_LIST(X)
#undef X
};
_Static_assert(DG_ARRAY_LEN(scope_tab) == DG_SCOPE_COUNT, "scope table");

const char *dg_scope_name(dg_scope s) { return scope_tab[s]; }
bool dg_scope_from_name(const char *s, size_t n, dg_scope *out) {
  int k;
  if (!lookup(scope_tab, DG_SCOPE_COUNT, s, n, &k)) return false;
  *out = (dg_scope)k;
  return true;
}

static const char *const loop_kind_tab[] = {
#define X(e, s) s,
    DG_LOOP_KIND_LIST(X)
#undef X
};
_Static_assert(DG_ARRAY_LEN(loop_kind_tab) == DG_LOOP_KIND_COUNT, "loop kinds");
const char *dg_loop_kind_name(dg_loop_kind k) { return loop_kind_tab[k]; }

static const char *const tag_tab[] = {
#define X(e, s) s,
    DG_THREAD_TAG_LIST(X)
#undef X
};
_Static_assert(DG_ARRAY_LEN(tag_tab) == DG_TAG_COUNT, "thread tags");

const char *dg_thread_tag_name(dg_thread_tag t) { return tag_tab[t]; }
bool dg_thread_tag_from_name(const char *s, size_t n, dg_thread_tag *out) {
  int k;
  if (n == 0 || !lookup(tag_tab, DG_TAG_COUNT, s, n, &k)) return false;
  *out = (dg_thread_tag)k;
  return true;
}
bool dg_thread_tag_is_block(dg_thread_tag t) {
  return t == DG_TAG_BLOCK_X || t == DG_TAG_BLOCK_Y || t == DG_TAG_BLOCK_Z;
}
bool dg_thread_tag_is_thread(dg_thread_tag t) {
  return t == DG_TAG_THREAD_X || t == DG_TAG_THREAD_Y || t == DG_TAG_THREAD_Z;
}
bool dg_thread_tag_is_vthread(dg_thread_tag t) {
  return t == DG_TAG_VTHREAD_X || t == DG_TAG_VTHREAD_Y || t == DG_TAG_VTHREAD_Z;
}

static const struct {
  const char *name;
  int arity;
} math_tab[] = {
#define X(e, s, n) {s, n},
    DG_MATH_LIST(X)
#undef X
};
_Static_assert(DG_ARRAY_LEN(math_tab) == DG_MATH_COUNT, "math table");

const char *dg_math_name(dg_math m) { return math_tab[m].name; }
int dg_math_arity(dg_math m) { return math_tab[m].arity; }
bool dg_math_from_name(const char *s, size_t n, dg_math *out) {
  const char *names[DG_MATH_COUNT];
  for (int i = 0; i < DG_MATH_COUNT; i++) names[i] = math_tab[i].name;
  int k;
  if (!lookup(names, DG_MATH_COUNT, s, n, &k)) return false;
  *out = (dg_math)k;
  return true;
}

static const char *const expr_kind_tab[] = {
#define X(e, s, n) s,
    DG_EXPR_LIST(X)
#undef X
};
_Static_assert(DG_ARRAY_LEN(expr_kind_tab) == DG_EXPR_COUNT, "expr kinds");
const char *dg_expr_kind_name(dg_expr_kind k) { return expr_kind_tab[k]; }

/* ---- kernels, variables, buffers ----------------------------------------- */

dg_func *ir_func_new(const char *name) {
  dg_arena *a = dg_arena_new();
  dg_func *f = DG_ANEW(a, dg_func);
  f->arena = a;
  f->name = dg_arena_strdup(a, name);
  return f;
}

void ir_func_free(dg_func *f) {
  if (f) dg_arena_free(f->arena);
}

dg_var *ir_var_new(dg_func *f, const char *name, dg_dtype dtype) {
  dg_var *v = DG_ANEW(f->arena, dg_var);
  v->name = dg_arena_strdup(f->arena, name);
  v->dtype = dtype;
  v->id = f->next_var_id++;
  return v;
}

dg_buffer *ir_buffer_new(dg_func *f, const char *name, dg_dtype dtype,
                         int ndim, const int64_t *shape, dg_scope scope) {
  DG_ASSERT(ndim >= 0 && ndim <= DG_MAX_DIMS);
  dg_buffer *b = DG_ANEW(f->arena, dg_buffer);
  b->name = dg_arena_strdup(f->arena, name);
  b->dtype = dtype;
  b->ndim = ndim;
  for (int i = 0; i < ndim; i++) b->shape[i] = shape[i];
  b->scope = scope;
  b->id = f->next_buf_id++;
  return b;
}

void ir_func_add_param(dg_func *f, dg_buffer *b) {
  dg_buffer **p = DG_ANEWN(f->arena, dg_buffer *, f->n_params + 1);
  if (f->n_params) memcpy(p, f->params, sizeof(*p) * (size_t)f->n_params);
  p[f->n_params++] = b;
  f->params = p;
}

int64_t ir_buffer_numel(const dg_buffer *b) {
  /* Shapes from kernel text and specs are bounded by WL_MAX_BYTES, so a
   * product that overflows is a bug upstream, not a user's input. */
  int64_t n = 1;
  for (int i = 0; i < b->ndim; i++)
    if (__builtin_mul_overflow(n, b->shape[i], &n))
      dg_panic(__FILE__, __LINE__, "buffer %s: the element count of its shape overflows", b->name);
  return n;
}

/* ir_func_iterations below s, under loops of outer iterations. */
static double stmt_iterations(const dg_stmt *s, double outer, bool all) {
  if (!s) return 0;
  switch (s->kind) {
    case DG_STMT_FOR:
      return stmt_iterations(s->body, outer * (double)s->extent, all);
    case DG_STMT_SEQ: {
      double w = 0;
      for (int i = 0; i < s->n; i++) w += stmt_iterations(s->stmts[i], outer, all);
      return w;
    }
    case DG_STMT_BLOCK:
      if (!all) return s->block->predicate ? 0 : stmt_iterations(s->block->body, outer, all);
      return stmt_iterations(s->block->init, outer, all) + stmt_iterations(s->block->body, outer, all);
    case DG_STMT_IF:
      return all ? stmt_iterations(s->body, outer, all) + outer : 0;
    case DG_STMT_STORE:
      return outer;
  }
  return all ? outer : 0;
}

double ir_func_iterations(const dg_func *f, bool all) { return stmt_iterations(f->body, 1, all); }

/* ---- expressions --------------------------------------------------------- */

static dg_expr *node(dg_func *f, dg_expr_kind k, dg_dtype t) {
  dg_expr *e = DG_ANEW(f->arena, dg_expr);
  e->kind = k;
  e->dtype = t;
  return e;
}

dg_expr *ir_int_t(dg_func *f, int64_t v, dg_dtype t) {
  dg_expr *e = node(f, DG_EXPR_INT, t);
  e->ival = v;
  return e;
}
dg_expr *ir_int(dg_func *f, int64_t v) { return ir_int_t(f, v, DG_I32); }
dg_expr *ir_bool(dg_func *f, bool v) { return ir_int_t(f, v ? 1 : 0, DG_BOOL); }

dg_expr *ir_float(dg_func *f, double v, dg_dtype t) {
  DG_ASSERT(dg_dtype_is_float(t));
  dg_expr *e = node(f, DG_EXPR_FLOAT, t);
  if (t == DG_F32) v = (double)(float)v;
  if (t == DG_F16) v = (double)dg_f16_to_f32(dg_f32_to_f16((float)v));
  e->fval = v;
  return e;
}

dg_expr *ir_var(dg_func *f, dg_var *v) {
  dg_expr *e = node(f, DG_EXPR_VAR, v->dtype);
  e->var = v;
  return e;
}

static bool is_cmp(dg_expr_kind k) {
  return k == DG_EXPR_EQ || k == DG_EXPR_NE || k == DG_EXPR_LT ||
         k == DG_EXPR_LE || k == DG_EXPR_GT || k == DG_EXPR_GE;
}

dg_expr *ir_bin(dg_func *f, dg_expr_kind k, dg_expr *a, dg_expr *b) {
  if (a->dtype != b->dtype)
    dg_panic(__FILE__, __LINE__, "ir_bin %s: operand dtypes differ (%s, %s)",
             dg_expr_kind_name(k), dg_dtype_name(a->dtype), dg_dtype_name(b->dtype));
  dg_dtype t = is_cmp(k) ? DG_BOOL : a->dtype;
  dg_expr *e = node(f, k, t);
  e->a = a;
  e->b = b;
  return e;
}
dg_expr *ir_add(dg_func *f, dg_expr *a, dg_expr *b) { return ir_bin(f, DG_EXPR_ADD, a, b); }
dg_expr *ir_sub(dg_func *f, dg_expr *a, dg_expr *b) { return ir_bin(f, DG_EXPR_SUB, a, b); }
dg_expr *ir_mul(dg_func *f, dg_expr *a, dg_expr *b) { return ir_bin(f, DG_EXPR_MUL, a, b); }

dg_expr *ir_not(dg_func *f, dg_expr *a) {
  DG_ASSERT(a->dtype == DG_BOOL);
  dg_expr *e = node(f, DG_EXPR_NOT, DG_BOOL);
  e->a = a;
  return e;
}

dg_expr *ir_select(dg_func *f, dg_expr *c, dg_expr *a, dg_expr *b) {
  DG_ASSERT(c->dtype == DG_BOOL && a->dtype == b->dtype);
  dg_expr *e = node(f, DG_EXPR_SELECT, a->dtype);
  e->a = c;
  e->b = a;
  e->c = b;
  return e;
}

dg_expr *ir_cast(dg_func *f, dg_dtype t, dg_expr *a) {
  dg_expr *e = node(f, DG_EXPR_CAST, t);
  e->a = a;
  return e;
}

dg_expr *ir_call(dg_func *f, dg_math fn, dg_expr **args, int n) {
  DG_ASSERT(n == dg_math_arity(fn) && n > 0);
  dg_expr *e = node(f, DG_EXPR_CALL, args[0]->dtype);
  e->fn = fn;
  e->nargs = n;
  e->args = dg_arena_memdup(f->arena, args, sizeof(*args) * (size_t)n);
  return e;
}
dg_expr *ir_call1(dg_func *f, dg_math fn, dg_expr *a) { return ir_call(f, fn, &a, 1); }

dg_expr *ir_load(dg_func *f, dg_buffer *b, dg_expr **idx, int n) {
  DG_ASSERT(n == b->ndim);
  dg_expr *e = node(f, DG_EXPR_LOAD, b->dtype);
  e->buf = b;
  e->nargs = n;
  e->args = dg_arena_memdup(f->arena, idx, sizeof(*idx) * (size_t)n);
  return e;
}

dg_expr *ir_expr_copy(dg_func *f, const dg_expr *e) {
  return dg_arena_memdup(f->arena, e, sizeof *e);
}

/* ---- statements and blocks ----------------------------------------------- */

static dg_stmt *stmt(dg_func *f, dg_stmt_kind k) {
  dg_stmt *s = DG_ANEW(f->arena, dg_stmt);
  s->kind = k;
  return s;
}

dg_stmt *ir_for(dg_func *f, dg_var *v, int64_t extent, dg_loop_kind k,
                dg_thread_tag tag, dg_stmt *body) {
  DG_ASSERT((k == DG_LOOP_THREAD) == (tag != DG_TAG_NONE));
  dg_stmt *s = stmt(f, DG_STMT_FOR);
  s->loop_var = v;
  s->extent = extent;
  s->loop_kind = k;
  s->tag = tag;
  s->body = body;
  return s;
}

dg_stmt *ir_seq(dg_func *f, dg_stmt **stmts, int n) {
  dg_stmt *s = stmt(f, DG_STMT_SEQ);
  s->n = n;
  s->stmts = dg_arena_memdup(f->arena, stmts, sizeof(*stmts) * (size_t)n);
  return s;
}

dg_stmt *ir_store(dg_func *f, dg_buffer *b, dg_expr **idx, int n,
                  dg_expr *value) {
  DG_ASSERT(n == b->ndim);
  dg_stmt *s = stmt(f, DG_STMT_STORE);
  s->buf = b;
  s->nidx = n;
  s->idx = dg_arena_memdup(f->arena, idx, sizeof(*idx) * (size_t)n);
  s->value = value;
  return s;
}

dg_stmt *ir_if(dg_func *f, dg_expr *cond, dg_stmt *then_s, dg_stmt *else_s) {
  dg_stmt *s = stmt(f, DG_STMT_IF);
  s->cond = cond;
  s->then_s = then_s;
  s->else_s = else_s;
  return s;
}

dg_block *ir_block_new(dg_func *f, const char *name) {
  dg_block *b = DG_ANEW(f->arena, dg_block);
  b->name = dg_arena_strdup(f->arena, name);
  return b;
}

dg_stmt *ir_block_stmt(dg_func *f, dg_block *b) {
  dg_stmt *s = stmt(f, DG_STMT_BLOCK);
  s->block = b;
  return s;
}

#define GROW(f, arr, n)                                                       \
  do {                                                                        \
    void *p_ = dg_arena_alloc((f)->arena, sizeof(*(arr)) * (size_t)((n) + 1)); \
    if (n) memcpy(p_, (arr), sizeof(*(arr)) * (size_t)(n));                   \
    (arr) = p_;                                                               \
  } while (0)

void ir_block_add_iter(dg_func *f, dg_block *b, dg_var *v, int64_t extent,
                       dg_iter_kind kind, dg_expr *binding) {
  GROW(f, b->iters, b->n_iters);
  b->iters[b->n_iters++] = (dg_iter){v, extent, kind, binding};
}

static dg_region region(dg_func *f, dg_buffer *buf, dg_expr **min, dg_expr **ext) {
  dg_region r = {buf, NULL, NULL};
  int n = buf->ndim;
  r.min = DG_ANEWN(f->arena, dg_expr *, n ? n : 1);
  r.ext = DG_ANEWN(f->arena, dg_expr *, n ? n : 1);
  for (int i = 0; i < n; i++) {
    r.min[i] = min[i];
    r.ext[i] = ext ? ext[i] : ir_int(f, 1);
  }
  return r;
}

void ir_block_add_read(dg_func *f, dg_block *b, dg_buffer *buf, dg_expr **min,
                       dg_expr **ext) {
  GROW(f, b->reads, b->n_reads);
  b->reads[b->n_reads++] = region(f, buf, min, ext);
}

void ir_block_add_write(dg_func *f, dg_block *b, dg_buffer *buf, dg_expr **min,
                        dg_expr **ext) {
  GROW(f, b->writes, b->n_writes);
  b->writes[b->n_writes++] = region(f, buf, min, ext);
}

void ir_block_add_alloc(dg_func *f, dg_block *b, dg_buffer *buf) {
  GROW(f, b->allocs, b->n_allocs);
  b->allocs[b->n_allocs++] = buf;
}

/* ---- annotations --------------------------------------------------------- */

static dg_ann *anns_slot(dg_func *f, dg_anns *a, const char *key) {
  int i = 0;
  while (i < a->n && strcmp(a->items[i].key, key) < 0) i++;
  if (i < a->n && strcmp(a->items[i].key, key) == 0) {
    memset(&a->items[i], 0, sizeof a->items[i]);
  } else {
    dg_ann *p = DG_ANEWN(f->arena, dg_ann, a->n + 1);
    if (i) memcpy(p, a->items, sizeof(dg_ann) * (size_t)i);
    if (a->n > i) memcpy(p + i + 1, a->items + i, sizeof(dg_ann) * (size_t)(a->n - i));
    a->items = p;
    a->n++;
  }
  a->items[i].key = dg_arena_strdup(f->arena, key);
  return &a->items[i];
}

void ir_anns_set_int(dg_func *f, dg_anns *a, const char *key, int64_t v) {
  dg_ann *x = anns_slot(f, a, key);
  x->kind = DG_ANN_INT;
  x->i = v;
}
void ir_anns_set_float(dg_func *f, dg_anns *a, const char *key, double v) {
  dg_ann *x = anns_slot(f, a, key);
  x->kind = DG_ANN_FLOAT;
  x->f = v;
}
void ir_anns_set_str(dg_func *f, dg_anns *a, const char *key, const char *v) {
  dg_ann *x = anns_slot(f, a, key);
  x->kind = DG_ANN_STR;
  x->s = dg_arena_strdup(f->arena, v);
}
void ir_anns_set_ints(dg_func *f, dg_anns *a, const char *key,
                      const int64_t *v, int n) {
  dg_ann *x = anns_slot(f, a, key);
  x->kind = DG_ANN_INTS;
  x->nints = n;
  x->ints = dg_arena_memdup(f->arena, v, sizeof(int64_t) * (size_t)n);
}
void ir_anns_set(dg_func *f, dg_anns *a, const dg_ann *v) {
  switch (v->kind) {
    case DG_ANN_INT: ir_anns_set_int(f, a, v->key, v->i); break;
    case DG_ANN_FLOAT: ir_anns_set_float(f, a, v->key, v->f); break;
    case DG_ANN_STR: ir_anns_set_str(f, a, v->key, v->s); break;
    case DG_ANN_INTS: ir_anns_set_ints(f, a, v->key, v->ints, v->nints); break;
  }
}

const dg_ann *ir_anns_get(const dg_anns *a, const char *key) {
  for (int i = 0; i < a->n; i++)
    if (strcmp(a->items[i].key, key) == 0) return &a->items[i];
  return NULL;
}

bool ir_anns_remove(dg_anns *a, const char *key) {
  for (int i = 0; i < a->n; i++)
    if (strcmp(a->items[i].key, key) == 0) {
      memmove(a->items + i, a->items + i + 1, sizeof(dg_ann) * (size_t)(a->n - i - 1));
      a->n--;
      return true;
    }
  return false;
}

/* ---- queries ------------------------------------------------------------- */

dg_block *ir_func_root(const dg_func *f) {
  DG_ASSERT(f->body && f->body->kind == DG_STMT_BLOCK);
  return f->body->block;
}

bool ir_is_const_int(const dg_expr *e, int64_t *v) {
  if (e->kind != DG_EXPR_INT) return false;
  if (v) *v = e->ival;
  return true;
}

static bool visit(dg_stmt *s, dg_block_visit fn, void *ctx) {
  if (!s) return true;
  switch (s->kind) {
    case DG_STMT_FOR: return visit(s->body, fn, ctx);
    case DG_STMT_SEQ:
      for (int i = 0; i < s->n; i++)
        if (!visit(s->stmts[i], fn, ctx)) return false;
      return true;
    case DG_STMT_BLOCK:
      if (!fn(s->block, s, ctx)) return false;
      if (!visit(s->block->init, fn, ctx)) return false;
      return visit(s->block->body, fn, ctx);
    case DG_STMT_STORE: return true;
    case DG_STMT_IF:
      if (!visit(s->then_s, fn, ctx)) return false;
      return visit(s->else_s, fn, ctx);
  }
  return true;
}

void ir_visit_blocks(dg_stmt *s, dg_block_visit fn, void *ctx) { visit(s, fn, ctx); }

typedef struct {
  const char *name;
  dg_block *found;
  dg_buffer *buf;
} find_ctx;

static bool find_block_fn(dg_block *b, dg_stmt *s, void *ctx) {
  (void)s;
  find_ctx *c = ctx;
  if (strcmp(b->name, c->name) == 0) {
    c->found = b;
    return false;
  }
  return true;
}

dg_block *ir_find_block(const dg_func *f, const char *name) {
  find_ctx c = {name, NULL, NULL};
  ir_visit_blocks(f->body, find_block_fn, &c);
  return c.found;
}

static bool find_buf_fn(dg_block *b, dg_stmt *s, void *ctx) {
  (void)s;
  find_ctx *c = ctx;
  for (int i = 0; i < b->n_allocs; i++)
    if (strcmp(b->allocs[i]->name, c->name) == 0) {
      c->buf = b->allocs[i];
      return false;
    }
  return true;
}

dg_buffer *ir_find_buffer(const dg_func *f, const char *name) {
  for (int i = 0; i < f->n_params; i++)
    if (strcmp(f->params[i]->name, name) == 0) return f->params[i];
  find_ctx c = {name, NULL, NULL};
  ir_visit_blocks(f->body, find_buf_fn, &c);
  return c.buf;
}
