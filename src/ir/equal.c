/* equal.c: structural equality and hashing of kernels and expressions.
 *
 * Two kernels are equal when their trees have the same shape and every node
 * agrees in kind, dtype, constant (floats bit for bit), extent, loop kind,
 * thread tag, iteration kind, scope, shape, annotation and name (kernel,
 * blocks, buffers, variables). Variables and buffers are matched by where
 * they are defined (parameter order, loop, block iteration, block
 * allocation), so two kernels built separately compare equal; a variable or
 * buffer used without a definition is matched at its first use. The hash
 * walks the tree in the same order and numbers variables and buffers by
 * definition, so it depends on structure, names, shapes, dtypes and
 * constants but never on pointers or ids; equal kernels hash equally.
 * ir_expr_equal compares variables and buffers by pointer instead.
 */
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

#include "dragon/ir.h"

/* ---- a pointer map (open addressing, grows at half full) ----------------- */

typedef struct {
  const void **key;
  const void **val;
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

static const void *pmap_get(const pmap *m, const void *k) {
  if (!m->cap) return NULL;
  for (size_t i = ptr_hash(k) & (m->cap - 1);; i = (i + 1) & (m->cap - 1)) {
    if (m->key[i] == k) return m->val[i];
    if (!m->key[i]) return NULL;
  }
}

static void pmap_put(pmap *m, const void *k, const void *v) {
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

/* ---- expressions by pointer ---------------------------------------------- */

static bool same_bits(double a, double b) { return memcmp(&a, &b, sizeof a) == 0; }

bool ir_expr_equal(const dg_expr *a, const dg_expr *b) {
  if (a == b) return true;
  if (!a || !b || a->kind != b->kind || a->dtype != b->dtype) return false;
  switch (a->kind) {
    case DG_EXPR_INT: return a->ival == b->ival;
    case DG_EXPR_FLOAT: return same_bits(a->fval, b->fval);
    case DG_EXPR_VAR: return a->var == b->var;
    case DG_EXPR_LOAD:
    case DG_EXPR_CALL:
      if (a->buf != b->buf || a->nargs != b->nargs) return false;
      if (a->kind == DG_EXPR_CALL && a->fn != b->fn) return false;
      for (int i = 0; i < a->nargs; i++)
        if (!ir_expr_equal(a->args[i], b->args[i])) return false;
      return true;
    default:
      return ir_expr_equal(a->a, b->a) && ir_expr_equal(a->b, b->b) &&
             ir_expr_equal(a->c, b->c);
  }
}

/* ---- kernels ------------------------------------------------------------- */

typedef struct {
  pmap var, var_rev, buf, buf_rev; /* a -> b and b -> a */
  char *why;
  size_t n;
  const char *block, *loop; /* where the walk is, in a */
} eq_ctx;

static bool differ(eq_ctx *c, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

static bool differ(eq_ctx *c, const char *fmt, ...) {
  if (!c->why || !c->n) return false;
  char what[400];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(what, sizeof what, fmt, ap);
  va_end(ap);
  if (c->block && c->loop)
    snprintf(c->why, c->n, "block \"%s\", loop %s: %s", c->block, c->loop, what);
  else if (c->block)
    snprintf(c->why, c->n, "block \"%s\": %s", c->block, what);
  else
    snprintf(c->why, c->n, "kernel: %s", what);
  return false;
}

static bool str_eq(const char *a, const char *b) {
  return a == b || (a && b && strcmp(a, b) == 0);
}

static const char *nz(const char *s) { return s ? s : "(none)"; }

static bool buf_decl_eq(eq_ctx *c, const dg_buffer *a, const dg_buffer *b) {
  if (!str_eq(a->name, b->name))
    return differ(c, "buffer name %s vs %s", nz(a->name), nz(b->name));
  if (a->dtype != b->dtype)
    return differ(c, "buffer %s dtype %s vs %s", a->name, dg_dtype_name(a->dtype),
                  dg_dtype_name(b->dtype));
  if (a->ndim != b->ndim)
    return differ(c, "buffer %s rank %d vs %d", a->name, a->ndim, b->ndim);
  for (int i = 0; i < a->ndim; i++)
    if (a->shape[i] != b->shape[i])
      return differ(c, "buffer %s shape[%d] %lld vs %lld", a->name, i,
                    (long long)a->shape[i], (long long)b->shape[i]);
  if (a->scope != b->scope)
    return differ(c, "buffer %s scope %s vs %s", a->name, dg_scope_name(a->scope),
                  dg_scope_name(b->scope));
  return true;
}

static bool buf_def(eq_ctx *c, const dg_buffer *a, const dg_buffer *b) {
  if (!buf_decl_eq(c, a, b)) return false;
  pmap_put(&c->buf, a, b);
  pmap_put(&c->buf_rev, b, a);
  return true;
}

static bool buf_use(eq_ctx *c, const dg_buffer *a, const dg_buffer *b) {
  if (!a || !b) return a == b ? true : differ(c, "missing buffer");
  const void *m = pmap_get(&c->buf, a);
  if (m) return m == b ? true : differ(c, "buffer %s vs %s", a->name, b->name);
  if (pmap_get(&c->buf_rev, b)) return differ(c, "buffer %s vs %s", a->name, b->name);
  return buf_def(c, a, b);
}

static bool var_def(eq_ctx *c, const dg_var *a, const dg_var *b) {
  if (!a || !b) return a == b ? true : differ(c, "missing variable");
  if (!str_eq(a->name, b->name))
    return differ(c, "variable %s vs %s", nz(a->name), nz(b->name));
  if (a->dtype != b->dtype)
    return differ(c, "variable %s dtype %s vs %s", a->name, dg_dtype_name(a->dtype),
                  dg_dtype_name(b->dtype));
  pmap_put(&c->var, a, b);
  pmap_put(&c->var_rev, b, a);
  return true;
}

static bool var_use(eq_ctx *c, const dg_var *a, const dg_var *b) {
  if (!a || !b) return a == b ? true : differ(c, "missing variable");
  const void *m = pmap_get(&c->var, a);
  if (m) return m == b ? true : differ(c, "variable %s vs %s", nz(a->name), nz(b->name));
  if (pmap_get(&c->var_rev, b)) return differ(c, "variable %s vs %s", nz(a->name), nz(b->name));
  return var_def(c, a, b);
}

static bool expr_eq(eq_ctx *c, const dg_expr *a, const dg_expr *b) {
  if (!a || !b) return a == b ? true : differ(c, "expression missing on one side");
  if (a->kind != b->kind)
    return differ(c, "expression %s vs %s", dg_expr_kind_name(a->kind),
                  dg_expr_kind_name(b->kind));
  if (a->dtype != b->dtype)
    return differ(c, "%s of dtype %s vs %s", dg_expr_kind_name(a->kind),
                  dg_dtype_name(a->dtype), dg_dtype_name(b->dtype));
  switch (a->kind) {
    case DG_EXPR_INT:
      if (a->ival != b->ival)
        return differ(c, "constant %lld vs %lld", (long long)a->ival, (long long)b->ival);
      return true;
    case DG_EXPR_FLOAT:
      if (!same_bits(a->fval, b->fval))
        return differ(c, "constant %.17g vs %.17g", a->fval, b->fval);
      return true;
    case DG_EXPR_VAR: return var_use(c, a->var, b->var);
    case DG_EXPR_LOAD:
    case DG_EXPR_CALL:
      if (a->kind == DG_EXPR_LOAD && !buf_use(c, a->buf, b->buf)) return false;
      if (a->kind == DG_EXPR_CALL && a->fn != b->fn)
        return differ(c, "call %s vs %s", dg_math_name(a->fn), dg_math_name(b->fn));
      if (a->nargs != b->nargs)
        return differ(c, "%s with %d vs %d operands", dg_expr_kind_name(a->kind), a->nargs,
                      b->nargs);
      for (int i = 0; i < a->nargs; i++)
        if (!expr_eq(c, a->args[i], b->args[i])) return false;
      return true;
    default:
      return expr_eq(c, a->a, b->a) && expr_eq(c, a->b, b->b) && expr_eq(c, a->c, b->c);
  }
}

static bool anns_eq(eq_ctx *c, const dg_anns *a, const dg_anns *b, const char *what) {
  if (a->n != b->n) return differ(c, "%s has %d vs %d annotations", what, a->n, b->n);
  for (int i = 0; i < a->n; i++) {
    const dg_ann *x = &a->items[i], *y = &b->items[i];
    if (!str_eq(x->key, y->key))
      return differ(c, "%s annotation %s vs %s", what, nz(x->key), nz(y->key));
    bool same = x->kind == y->kind;
    if (same) switch (x->kind) {
        case DG_ANN_INT: same = x->i == y->i; break;
        case DG_ANN_FLOAT: same = same_bits(x->f, y->f); break;
        case DG_ANN_STR: same = str_eq(x->s, y->s); break;
        case DG_ANN_INTS:
          same = x->nints == y->nints &&
                 (x->nints == 0 || memcmp(x->ints, y->ints, sizeof(int64_t) * (size_t)x->nints) == 0);
          break;
      }
    if (!same) return differ(c, "%s annotation %s differs", what, x->key);
  }
  return true;
}

static bool region_eq(eq_ctx *c, const dg_region *a, const dg_region *b, const char *what) {
  if (!buf_use(c, a->buf, b->buf)) return false;
  for (int i = 0; a->buf && i < a->buf->ndim; i++) {
    if (!expr_eq(c, a->min[i], b->min[i]) || !expr_eq(c, a->ext[i], b->ext[i])) {
      char tmp[300];
      if (c->why && c->n) {
        snprintf(tmp, sizeof tmp, "%s", c->why);
        snprintf(c->why, c->n, "%s (%s region of %s, dim %d)", tmp, what, a->buf->name, i);
      }
      return false;
    }
  }
  return true;
}

static bool stmt_eq(eq_ctx *c, const dg_stmt *a, const dg_stmt *b);

static bool block_eq(eq_ctx *c, const dg_block *a, const dg_block *b) {
  if (!str_eq(a->name, b->name))
    return differ(c, "block name %s vs %s", nz(a->name), nz(b->name));
  const char *saved_block = c->block, *saved_loop = c->loop;
  c->block = a->name;
  c->loop = NULL;
  bool ok = false;
  if (a->n_iters != b->n_iters) {
    differ(c, "%d vs %d iteration variables", a->n_iters, b->n_iters);
    goto out;
  }
  for (int i = 0; i < a->n_iters; i++) {
    const dg_iter *x = &a->iters[i], *y = &b->iters[i];
    if (!expr_eq(c, x->binding, y->binding)) goto out;
    if (!var_def(c, x->var, y->var)) goto out;
    if (x->extent != y->extent || x->kind != y->kind) {
      differ(c, "iteration variable %s: %s(%lld) vs %s(%lld)", nz(x->var ? x->var->name : NULL),
             x->kind == DG_ITER_SPATIAL ? "S" : "R", (long long)x->extent,
             y->kind == DG_ITER_SPATIAL ? "S" : "R", (long long)y->extent);
      goto out;
    }
  }
  if (a->n_allocs != b->n_allocs) {
    differ(c, "%d vs %d allocated buffers", a->n_allocs, b->n_allocs);
    goto out;
  }
  for (int i = 0; i < a->n_allocs; i++)
    if (!buf_def(c, a->allocs[i], b->allocs[i])) goto out;
  if (!expr_eq(c, a->predicate, b->predicate)) goto out;
  if (a->n_reads != b->n_reads || a->n_writes != b->n_writes) {
    differ(c, "%d/%d vs %d/%d read/write regions", a->n_reads, a->n_writes, b->n_reads,
           b->n_writes);
    goto out;
  }
  for (int i = 0; i < a->n_reads; i++)
    if (!region_eq(c, &a->reads[i], &b->reads[i], "read")) goto out;
  for (int i = 0; i < a->n_writes; i++)
    if (!region_eq(c, &a->writes[i], &b->writes[i], "write")) goto out;
  if (!anns_eq(c, &a->anns, &b->anns, "block")) goto out;
  if (!a->init != !b->init) {
    differ(c, "init %s vs %s", a->init ? "present" : "absent", b->init ? "present" : "absent");
    goto out;
  }
  if (!stmt_eq(c, a->init, b->init) || !stmt_eq(c, a->body, b->body)) goto out;
  ok = true;
out:
  c->block = saved_block;
  c->loop = saved_loop;
  return ok;
}

static const char *stmt_kind_name(dg_stmt_kind k) {
  static const char *const names[] = {"for", "sequence", "block", "store", "if"};
  return (unsigned)k < DG_ARRAY_LEN(names) ? names[k] : "?";
}

static bool stmt_eq(eq_ctx *c, const dg_stmt *a, const dg_stmt *b) {
  if (!a || !b) return a == b ? true : differ(c, "statement missing on one side");
  if (a->kind != b->kind)
    return differ(c, "%s vs %s", stmt_kind_name(a->kind), stmt_kind_name(b->kind));
  switch (a->kind) {
    case DG_STMT_FOR: {
      if (!var_def(c, a->loop_var, b->loop_var)) return false;
      const char *saved = c->loop;
      c->loop = a->loop_var ? a->loop_var->name : "?";
      if (a->extent != b->extent)
        return differ(c, "extent %lld vs %lld", (long long)a->extent, (long long)b->extent);
      if (a->loop_kind != b->loop_kind || a->tag != b->tag)
        return differ(c, "loop kind %s%s%s vs %s%s%s", dg_loop_kind_name(a->loop_kind),
                      a->tag ? " " : "", dg_thread_tag_name(a->tag),
                      dg_loop_kind_name(b->loop_kind), b->tag ? " " : "",
                      dg_thread_tag_name(b->tag));
      if (!anns_eq(c, &a->anns, &b->anns, "loop")) return false;
      if (!stmt_eq(c, a->body, b->body)) return false;
      c->loop = saved;
      return true;
    }
    case DG_STMT_SEQ:
      if (a->n != b->n) return differ(c, "sequence of %d vs %d statements", a->n, b->n);
      for (int i = 0; i < a->n; i++)
        if (!stmt_eq(c, a->stmts[i], b->stmts[i])) return false;
      return true;
    case DG_STMT_BLOCK: return block_eq(c, a->block, b->block);
    case DG_STMT_STORE:
      if (!buf_use(c, a->buf, b->buf)) return false;
      if (a->nidx != b->nidx) return differ(c, "store with %d vs %d indices", a->nidx, b->nidx);
      for (int i = 0; i < a->nidx; i++)
        if (!expr_eq(c, a->idx[i], b->idx[i])) return false;
      return expr_eq(c, a->value, b->value);
    case DG_STMT_IF:
      return expr_eq(c, a->cond, b->cond) && stmt_eq(c, a->then_s, b->then_s) &&
             stmt_eq(c, a->else_s, b->else_s);
  }
  return true;
}

bool ir_func_equal_explain(const dg_func *a, const dg_func *b, char *why, size_t n) {
  eq_ctx c = {0};
  c.why = why;
  c.n = n;
  if (why && n) why[0] = 0;
  bool ok = false;
  if (!str_eq(a->name, b->name)) {
    differ(&c, "name %s vs %s", nz(a->name), nz(b->name));
  } else if (a->n_params != b->n_params) {
    differ(&c, "%d vs %d parameters", a->n_params, b->n_params);
  } else {
    ok = true;
    for (int i = 0; i < a->n_params && ok; i++) ok = buf_def(&c, a->params[i], b->params[i]);
    ok = ok && stmt_eq(&c, a->body, b->body);
  }
  pmap_free(&c.var);
  pmap_free(&c.var_rev);
  pmap_free(&c.buf);
  pmap_free(&c.buf_rev);
  return ok;
}

bool ir_func_equal(const dg_func *a, const dg_func *b) {
  return ir_func_equal_explain(a, b, NULL, 0);
}

/* ---- hashing ------------------------------------------------------------- */

typedef struct {
  pmap var, buf; /* pointer -> definition number + 1 */
  uintptr_t nvar, nbuf;
  uint64_t h;
} hash_ctx;

static void mix(hash_ctx *c, uint64_t v) { c->h = dg_hash_combine(c->h, v); }

static void mix_str(hash_ctx *c, const char *s) {
  mix(c, s ? dg_hash_bytes(s, strlen(s), 0x5eed) : 0x6e756c6cull);
}

static void mix_f64(hash_ctx *c, double d) {
  uint64_t x;
  memcpy(&x, &d, 8);
  mix(c, x);
}

static void hash_buf_decl(hash_ctx *c, const dg_buffer *b) {
  mix_str(c, b->name);
  mix(c, (uint64_t)b->dtype);
  mix(c, (uint64_t)b->ndim);
  for (int i = 0; i < b->ndim; i++) mix(c, (uint64_t)b->shape[i]);
  mix(c, (uint64_t)b->scope);
}

static void hash_buf_def(hash_ctx *c, const dg_buffer *b) {
  hash_buf_decl(c, b);
  pmap_put(&c->buf, b, (const void *)++c->nbuf);
}

static void hash_buf_use(hash_ctx *c, const dg_buffer *b) {
  if (!b) {
    mix(c, 0);
    return;
  }
  const void *m = pmap_get(&c->buf, b);
  if (!m) {
    hash_buf_def(c, b); /* same as equality's first-use definition */
    m = pmap_get(&c->buf, b);
  }
  mix(c, (uint64_t)(uintptr_t)m);
}

static void hash_var_def(hash_ctx *c, const dg_var *v) {
  if (!v) {
    mix(c, 0);
    return;
  }
  mix_str(c, v->name);
  mix(c, (uint64_t)v->dtype);
  pmap_put(&c->var, v, (const void *)++c->nvar);
}

static void hash_var_use(hash_ctx *c, const dg_var *v) {
  if (!v) {
    mix(c, 0);
    return;
  }
  const void *m = pmap_get(&c->var, v);
  if (!m) {
    hash_var_def(c, v);
    m = pmap_get(&c->var, v);
  }
  mix(c, (uint64_t)(uintptr_t)m);
}

static void hash_expr(hash_ctx *c, const dg_expr *e) {
  if (!e) {
    mix(c, 0xe0);
    return;
  }
  mix(c, 0x100 + (uint64_t)e->kind);
  mix(c, (uint64_t)e->dtype);
  switch (e->kind) {
    case DG_EXPR_INT: mix(c, (uint64_t)e->ival); return;
    case DG_EXPR_FLOAT: mix_f64(c, e->fval); return;
    case DG_EXPR_VAR: hash_var_use(c, e->var); return;
    case DG_EXPR_LOAD:
    case DG_EXPR_CALL:
      if (e->kind == DG_EXPR_LOAD) hash_buf_use(c, e->buf);
      else mix(c, (uint64_t)e->fn);
      mix(c, (uint64_t)e->nargs);
      for (int i = 0; i < e->nargs; i++) hash_expr(c, e->args[i]);
      return;
    default:
      hash_expr(c, e->a);
      hash_expr(c, e->b);
      hash_expr(c, e->c);
  }
}

static void hash_anns(hash_ctx *c, const dg_anns *a) {
  mix(c, (uint64_t)a->n);
  for (int i = 0; i < a->n; i++) {
    const dg_ann *x = &a->items[i];
    mix_str(c, x->key);
    mix(c, (uint64_t)x->kind);
    switch (x->kind) {
      case DG_ANN_INT: mix(c, (uint64_t)x->i); break;
      case DG_ANN_FLOAT: mix_f64(c, x->f); break;
      case DG_ANN_STR: mix_str(c, x->s); break;
      case DG_ANN_INTS:
        mix(c, (uint64_t)x->nints);
        for (int k = 0; k < x->nints; k++) mix(c, (uint64_t)x->ints[k]);
        break;
    }
  }
}

static void hash_region(hash_ctx *c, const dg_region *r) {
  hash_buf_use(c, r->buf);
  for (int i = 0; r->buf && i < r->buf->ndim; i++) {
    hash_expr(c, r->min[i]);
    hash_expr(c, r->ext[i]);
  }
}

static void hash_stmt(hash_ctx *c, const dg_stmt *s) {
  if (!s) {
    mix(c, 0x5e);
    return;
  }
  mix(c, 0x200 + (uint64_t)s->kind);
  switch (s->kind) {
    case DG_STMT_FOR:
      hash_var_def(c, s->loop_var);
      mix(c, (uint64_t)s->extent);
      mix(c, (uint64_t)s->loop_kind);
      mix(c, (uint64_t)s->tag);
      hash_anns(c, &s->anns);
      hash_stmt(c, s->body);
      return;
    case DG_STMT_SEQ:
      mix(c, (uint64_t)s->n);
      for (int i = 0; i < s->n; i++) hash_stmt(c, s->stmts[i]);
      return;
    case DG_STMT_BLOCK: {
      const dg_block *b = s->block;
      mix_str(c, b->name);
      mix(c, (uint64_t)b->n_iters);
      for (int i = 0; i < b->n_iters; i++) {
        hash_expr(c, b->iters[i].binding);
        hash_var_def(c, b->iters[i].var);
        mix(c, (uint64_t)b->iters[i].extent);
        mix(c, (uint64_t)b->iters[i].kind);
      }
      mix(c, (uint64_t)b->n_allocs);
      for (int i = 0; i < b->n_allocs; i++) hash_buf_def(c, b->allocs[i]);
      hash_expr(c, b->predicate);
      mix(c, (uint64_t)b->n_reads);
      mix(c, (uint64_t)b->n_writes);
      for (int i = 0; i < b->n_reads; i++) hash_region(c, &b->reads[i]);
      for (int i = 0; i < b->n_writes; i++) hash_region(c, &b->writes[i]);
      hash_anns(c, &b->anns);
      hash_stmt(c, b->init);
      hash_stmt(c, b->body);
      return;
    }
    case DG_STMT_STORE:
      hash_buf_use(c, s->buf);
      mix(c, (uint64_t)s->nidx);
      for (int i = 0; i < s->nidx; i++) hash_expr(c, s->idx[i]);
      hash_expr(c, s->value);
      return;
    case DG_STMT_IF:
      hash_expr(c, s->cond);
      hash_stmt(c, s->then_s);
      hash_stmt(c, s->else_s);
      return;
  }
}

uint64_t ir_func_hash(const dg_func *f) {
  hash_ctx c = {0};
  c.h = 0x6472616730ull; /* "drag0" */
  mix_str(&c, f->name);
  mix(&c, (uint64_t)f->n_params);
  for (int i = 0; i < f->n_params; i++) hash_buf_def(&c, f->params[i]);
  hash_stmt(&c, f->body);
  pmap_free(&c.var);
  pmap_free(&c.buf);
  return c.h;
}
