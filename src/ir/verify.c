/* verify.c: the IR verifier (ir_verify).
 *
 * Checks, in one walk from the root, the invariants every pass relies on:
 * the root is a block named "root"; names of variables, buffers and blocks
 * are unique; every variable used is defined by an enclosing loop or block
 * (lexical scope); iteration bindings use only enclosing loop variables and
 * iteration variables of enclosing blocks (never the block's own, so that
 * blockize's inner bindings over the outer block's variables are allowed);
 * extents are positive; expressions are well typed (operands agree, indices
 * are integers, loads and stores have the buffer's dtype and rank);
 * every store is inside a block other than the root and goes to a buffer
 * that block writes or allocates; a buffer is a parameter or is allocated
 * by an enclosing block; some store writes a parameter (the kernel has an
 * output); no integer division or modulo is by the constant 0. The first
 * violation found is reported as a
 * DG_ERR_INVALID status naming the block and loop at fault. It does not
 * check that regions cover the accesses or that bindings are affine.
 */
#include <stdlib.h>
#include <string.h>

#include "dragon/ir.h"

/* ---- a set of strings ---------------------------------------------------- */

typedef struct {
  const char **key;
  size_t cap, n;
} sset;

static void sset_free(sset *s) {
  free(s->key);
  memset(s, 0, sizeof *s);
}

/* Adds s; false if it was already there. */
static bool sset_add(sset *s, const char *k) {
  if (2 * (s->n + 1) > s->cap) {
    sset g = {dg_calloc(s->cap ? 2 * s->cap : 64, sizeof(char *)), s->cap ? 2 * s->cap : 64, 0};
    for (size_t i = 0; i < s->cap; i++)
      if (s->key[i]) sset_add(&g, s->key[i]);
    sset_free(s);
    *s = g;
  }
  size_t i = dg_hash_bytes(k, strlen(k), 0) & (s->cap - 1);
  for (; s->key[i]; i = (i + 1) & (s->cap - 1))
    if (strcmp(s->key[i], k) == 0) return false;
  s->key[i] = k;
  s->n++;
  return true;
}

/* ---- the walk ------------------------------------------------------------ */

typedef struct {
  const dg_var *var;
  const dg_block *owner; /* the block whose iteration variable it is; NULL for loops */
} scoped;

typedef struct {
  const dg_func *f;
  dg_status *st;
  DG_VEC(scoped) scope;
  DG_VEC(const dg_block *) blocks; /* enclosing blocks, innermost last */
  sset var_names, buf_names, block_names;
  DG_VEC(const dg_buffer *) params;
  const char *loop; /* innermost loop variable's name, for messages */
  const dg_block *binding_block; /* set while a block's bindings are checked */
  const dg_iter *binding;
  bool writes_param; /* some store goes to a parameter: the kernel has an output */
} vctx;

static const char *vname(const dg_var *v) { return v && v->name ? v->name : "?"; }

static bool fail(vctx *c, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

static bool fail(vctx *c, const char *fmt, ...) {
  char what[400];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(what, sizeof what, fmt, ap);
  va_end(ap);
  const char *block = c->blocks.len ? c->blocks.data[c->blocks.len - 1]->name : NULL;
  const char *fname = c->f->name ? c->f->name : "?";
  if (c->binding_block)
    return dg_fail(c->st, DG_ERR_INVALID, "%s: block \"%s\", binding of %s: %s", fname,
                   c->binding_block->name, vname(c->binding->var), what);
  if (block && c->loop)
    return dg_fail(c->st, DG_ERR_INVALID, "%s: block \"%s\", loop %s: %s", fname, block,
                   c->loop, what);
  if (block) return dg_fail(c->st, DG_ERR_INVALID, "%s: block \"%s\": %s", fname, block, what);
  return dg_fail(c->st, DG_ERR_INVALID, "%s: %s", fname, what);
}


static bool define_var(vctx *c, const dg_var *v, const dg_block *owner) {
  if (!v) return fail(c, "missing variable");
  if (!v->name || !v->name[0]) return fail(c, "a variable has no name");
  if (!sset_add(&c->var_names, v->name))
    return fail(c, "variable name %s is defined twice", v->name);
  if (!dg_dtype_is_int(v->dtype))
    return fail(c, "%s variable %s has dtype %s, not an integer type",
                owner ? "iteration" : "loop", v->name, dg_dtype_name(v->dtype));
  DG_VEC_PUSH(&c->scope, ((scoped){v, owner}));
  return true;
}

static const scoped *find_var(const vctx *c, const dg_var *v) {
  for (size_t i = c->scope.len; i-- > 0;)
    if (c->scope.data[i].var == v) return &c->scope.data[i];
  return NULL;
}

/* A buffer use is legal if the buffer is a parameter or allocated by an
 * enclosing block. */
static bool check_buf(vctx *c, const dg_buffer *b, const char *use) {
  if (!b) return fail(c, "%s of a missing buffer", use);
  for (size_t i = 0; i < c->params.len; i++)
    if (c->params.data[i] == b) return true;
  for (size_t i = 0; i < c->blocks.len; i++) {
    const dg_block *k = c->blocks.data[i];
    for (int j = 0; j < k->n_allocs; j++)
      if (k->allocs[j] == b) return true;
  }
  /* allocated by a block that does not enclose this use */
  if (b->name && ir_find_buffer(c->f, b->name) == b)
    return fail(c, "%s of buffer %s outside the block that allocates it", use, b->name);
  return fail(c, "%s of buffer %s, which is neither a parameter nor allocated", use,
              b->name ? b->name : "?");
}

static bool is_int(dg_dtype t) { return dg_dtype_is_int(t); }

static bool check_expr(vctx *c, const dg_expr *e);

static bool check_operand(vctx *c, const dg_expr *e, const dg_expr *x) {
  if (!x) return fail(c, "%s is missing an operand", dg_expr_kind_name(e->kind));
  return check_expr(c, x);
}

static bool check_expr(vctx *c, const dg_expr *e) {
  if (!e) return fail(c, "missing expression");
  if ((unsigned)e->kind >= DG_EXPR_COUNT) return fail(c, "bad expression kind %d", (int)e->kind);
  if ((unsigned)e->dtype >= DG_DTYPE_COUNT) return fail(c, "bad dtype %d", (int)e->dtype);
  const char *op = dg_expr_kind_name(e->kind);
  const char *dt = dg_dtype_name(e->dtype);
  switch (e->kind) {
    case DG_EXPR_INT:
      if (!is_int(e->dtype) && e->dtype != DG_BOOL) return fail(c, "integer constant of dtype %s", dt);
      return true;
    case DG_EXPR_FLOAT:
      if (!dg_dtype_is_float(e->dtype)) return fail(c, "float constant of dtype %s", dt);
      return true;
    case DG_EXPR_VAR:
      if (!e->var) return fail(c, "variable reference without a variable");
      if (!find_var(c, e->var)) return fail(c, "variable %s is not defined in scope", vname(e->var));
      if (e->var->dtype != e->dtype)
        return fail(c, "variable %s used as %s but has dtype %s", vname(e->var), dt,
                    dg_dtype_name(e->var->dtype));
      return true;
    case DG_EXPR_LOAD:
      if (!check_buf(c, e->buf, "load")) return false;
      if (e->nargs != e->buf->ndim)
        return fail(c, "load of %s with %d indices, buffer has rank %d", e->buf->name, e->nargs,
                    e->buf->ndim);
      if (e->dtype != e->buf->dtype)
        return fail(c, "load of %s as %s, buffer has dtype %s", e->buf->name, dt,
                    dg_dtype_name(e->buf->dtype));
      for (int i = 0; i < e->nargs; i++) {
        if (!check_operand(c, e, e->args[i])) return false;
        if (!is_int(e->args[i]->dtype))
          return fail(c, "load of %s: index %d has dtype %s", e->buf->name, i,
                      dg_dtype_name(e->args[i]->dtype));
      }
      return true;
    case DG_EXPR_CALL:
      if ((unsigned)e->fn >= DG_MATH_COUNT) return fail(c, "bad math function %d", (int)e->fn);
      if (e->nargs != dg_math_arity(e->fn))
        return fail(c, "%s with %d arguments, wants %d", dg_math_name(e->fn), e->nargs,
                    dg_math_arity(e->fn));
      if (!dg_dtype_is_float(e->dtype)) return fail(c, "%s of dtype %s", dg_math_name(e->fn), dt);
      for (int i = 0; i < e->nargs; i++) {
        if (!check_operand(c, e, e->args[i])) return false;
        if (e->args[i]->dtype != e->dtype)
          return fail(c, "%s argument of dtype %s, call is %s", dg_math_name(e->fn),
                      dg_dtype_name(e->args[i]->dtype), dt);
      }
      return true;
    case DG_EXPR_NOT:
      if (!check_operand(c, e, e->a)) return false;
      if (e->dtype != DG_BOOL || e->a->dtype != DG_BOOL) return fail(c, "! of a non-bool");
      return true;
    case DG_EXPR_CAST: return check_operand(c, e, e->a);
    case DG_EXPR_SELECT:
      if (!check_operand(c, e, e->a) || !check_operand(c, e, e->b) || !check_operand(c, e, e->c))
        return false;
      if (e->a->dtype != DG_BOOL) return fail(c, "select condition of dtype %s", dg_dtype_name(e->a->dtype));
      if (e->b->dtype != e->dtype || e->c->dtype != e->dtype)
        return fail(c, "select arms of dtypes %s and %s, select is %s",
                    dg_dtype_name(e->b->dtype), dg_dtype_name(e->c->dtype), dt);
      return true;
    default: break;
  }
  /* binary */
  if (!check_operand(c, e, e->a) || !check_operand(c, e, e->b)) return false;
  dg_dtype ta = e->a->dtype, tb = e->b->dtype;
  if (ta != tb)
    return fail(c, "%s of operands with dtypes %s and %s", op, dg_dtype_name(ta), dg_dtype_name(tb));
  switch (e->kind) {
    case DG_EXPR_EQ:
    case DG_EXPR_NE:
    case DG_EXPR_LT:
    case DG_EXPR_LE:
    case DG_EXPR_GT:
    case DG_EXPR_GE:
      if (e->dtype != DG_BOOL) return fail(c, "comparison %s of dtype %s", op, dt);
      return true;
    case DG_EXPR_AND:
    case DG_EXPR_OR:
      if (e->dtype != DG_BOOL || ta != DG_BOOL) return fail(c, "%s of non-bool operands", op);
      return true;
    case DG_EXPR_DIV:
      if (!dg_dtype_is_float(ta)) return fail(c, "/ of %s operands (integers use //)", dg_dtype_name(ta));
      break;
    case DG_EXPR_FLOORDIV:
    case DG_EXPR_FLOORMOD:
      if (!is_int(ta)) return fail(c, "%s of %s operands (integers only)", op, dg_dtype_name(ta));
      /* the interpreter reports a zero divisor and generated code yields
       * 0: a constant one is refused here, before they can disagree */
      if (e->b->kind == DG_EXPR_INT && e->b->ival == 0)
        return fail(c, "%s by the constant 0 (division by zero)", op);
      break;
    default:
      if (ta == DG_BOOL) return fail(c, "%s of bool operands", op);
      break;
  }
  if (e->dtype != ta) return fail(c, "%s of %s operands has dtype %s", op, dg_dtype_name(ta), dt);
  return true;
}

/* Bindings may use loop variables and enclosing blocks' iteration
 * variables; this block's own are not in scope yet when they are checked. */
static bool check_binding_vars(vctx *c, const dg_block *b, const dg_iter *it, const dg_expr *e) {
  if (!e) return true;
  switch (e->kind) {
    case DG_EXPR_VAR:
      for (int i = 0; i < b->n_iters; i++)
        if (b->iters[i].var == e->var)
          return fail(c, "uses the block's own iteration variable %s", vname(e->var));
      return true;
    case DG_EXPR_LOAD:
      return fail(c, "reads buffer %s", e->buf ? e->buf->name : "?");
    case DG_EXPR_CALL:
      for (int i = 0; i < e->nargs; i++)
        if (!check_binding_vars(c, b, it, e->args[i])) return false;
      return true;
    default:
      return check_binding_vars(c, b, it, e->a) && check_binding_vars(c, b, it, e->b) &&
             check_binding_vars(c, b, it, e->c);
  }
}

static bool check_region(vctx *c, const dg_region *r, const char *what) {
  if (!check_buf(c, r->buf, what)) return false;
  for (int i = 0; i < r->buf->ndim; i++) {
    if (!r->min || !r->ext || !r->min[i] || !r->ext[i])
      return fail(c, "%s region of %s is missing dimension %d", what, r->buf->name, i);
    if (!check_expr(c, r->min[i]) || !check_expr(c, r->ext[i])) return false;
    if (!is_int(r->min[i]->dtype) || !is_int(r->ext[i]->dtype))
      return fail(c, "%s region of %s: dimension %d is not an integer", what, r->buf->name, i);
  }
  return true;
}

static bool check_stmt(vctx *c, const dg_stmt *s);

static bool check_block(vctx *c, const dg_block *b, bool is_root) {
  if (!b->name || !b->name[0]) return fail(c, "a block has no name");
  if (!sset_add(&c->block_names, b->name)) return fail(c, "block name %s is used twice", b->name);
  /* the bindings are evaluated outside the block */
  for (int i = 0; i < b->n_iters; i++) {
    const dg_iter *it = &b->iters[i];
    c->binding_block = b;
    c->binding = it;
    if (!it->binding) return fail(c, "missing");
    if (!check_binding_vars(c, b, it, it->binding)) return false;
    if (!check_expr(c, it->binding)) return false;
    if (!is_int(it->binding->dtype))
      return fail(c, "dtype %s is not an integer type", dg_dtype_name(it->binding->dtype));
    c->binding_block = NULL;
  }
  if (b->predicate) {
    if (!check_expr(c, b->predicate)) return false;
    if (b->predicate->dtype != DG_BOOL) return fail(c, "block \"%s\": predicate is not bool", b->name);
  }
  size_t scope_mark = c->scope.len;
  const char *saved_loop = c->loop;
  DG_VEC_PUSH(&c->blocks, b);
  c->loop = NULL;
  bool ok = false;
  if (is_root && b->n_iters > 0) {
    fail(c, "the root block has iteration variables");
    goto out;
  }
  for (int i = 0; i < b->n_iters; i++) {
    const dg_iter *it = &b->iters[i];
    if (!define_var(c, it->var, b)) goto out;
    if (it->extent <= 0) {
      fail(c, "iteration variable %s has extent %lld", vname(it->var), (long long)it->extent);
      goto out;
    }
    if (it->kind != DG_ITER_SPATIAL && it->kind != DG_ITER_REDUCE) {
      fail(c, "iteration variable %s has a bad kind", vname(it->var));
      goto out;
    }
  }
  for (int i = 0; i < b->n_allocs; i++) {
    const dg_buffer *a = b->allocs[i];
    if (!a || !a->name || !a->name[0]) {
      fail(c, "allocates an unnamed buffer");
      goto out;
    }
    if (!sset_add(&c->buf_names, a->name)) {
      fail(c, "buffer name %s is used twice", a->name);
      goto out;
    }
    if (a->ndim < 0 || a->ndim > DG_MAX_DIMS) {
      fail(c, "buffer %s has rank %d", a->name, a->ndim);
      goto out;
    }
    for (int d = 0; d < a->ndim; d++)
      if (a->shape[d] <= 0) {
        fail(c, "buffer %s has shape[%d] = %lld", a->name, d, (long long)a->shape[d]);
        goto out;
      }
  }
  for (int i = 0; i < b->n_reads; i++)
    if (!check_region(c, &b->reads[i], "read")) goto out;
  for (int i = 0; i < b->n_writes; i++)
    if (!check_region(c, &b->writes[i], "write")) goto out;
  if (b->init && !check_stmt(c, b->init)) goto out;
  if (!b->body) {
    fail(c, "the block has no body");
    goto out;
  }
  if (!check_stmt(c, b->body)) goto out;
  ok = true;
out:
  c->blocks.len--;
  c->scope.len = scope_mark;
  c->loop = saved_loop;
  return ok;
}

static bool store_allowed(const dg_block *b, const dg_buffer *buf) {
  for (int i = 0; i < b->n_writes; i++)
    if (b->writes[i].buf == buf) return true;
  for (int i = 0; i < b->n_allocs; i++)
    if (b->allocs[i] == buf) return true;
  return false;
}

static bool check_stmt(vctx *c, const dg_stmt *s) {
  if (!s) return fail(c, "missing statement");
  switch (s->kind) {
    case DG_STMT_FOR: {
      if (!define_var(c, s->loop_var, NULL)) return false;
      const char *saved = c->loop;
      c->loop = vname(s->loop_var);
      if (s->extent <= 0) return fail(c, "loop extent %lld is not positive", (long long)s->extent);
      if ((unsigned)s->loop_kind >= DG_LOOP_KIND_COUNT || (unsigned)s->tag >= DG_TAG_COUNT)
        return fail(c, "bad loop kind or thread tag");
      if ((s->loop_kind == DG_LOOP_THREAD) != (s->tag != DG_TAG_NONE))
        return fail(c, "loop kind %s with thread tag '%s'", dg_loop_kind_name(s->loop_kind),
                    dg_thread_tag_name(s->tag));
      if (!s->body) return fail(c, "the loop has no body");
      if (!check_stmt(c, s->body)) return false;
      c->scope.len--;
      c->loop = saved;
      return true;
    }
    case DG_STMT_SEQ:
      if (s->n < 0 || (s->n > 0 && !s->stmts)) return fail(c, "malformed sequence");
      for (int i = 0; i < s->n; i++)
        if (!check_stmt(c, s->stmts[i])) return false;
      return true;
    case DG_STMT_BLOCK:
      if (!s->block) return fail(c, "block statement without a block");
      return check_block(c, s->block, false);
    case DG_STMT_STORE: {
      if (!check_buf(c, s->buf, "store")) return false;
      for (size_t i = 0; i < c->params.len; i++)
        if (c->params.data[i] == s->buf) c->writes_param = true;
      if (c->blocks.len <= 1)
        return fail(c, "store to %s outside any block but the root", s->buf->name);
      const dg_block *b = c->blocks.data[c->blocks.len - 1];
      if (!store_allowed(b, s->buf))
        return fail(c, "store to %s, which the block neither writes nor allocates", s->buf->name);
      if (s->nidx != s->buf->ndim)
        return fail(c, "store to %s with %d indices, buffer has rank %d", s->buf->name, s->nidx,
                    s->buf->ndim);
      for (int i = 0; i < s->nidx; i++) {
        if (!check_expr(c, s->idx[i])) return false;
        if (!is_int(s->idx[i]->dtype))
          return fail(c, "store to %s: index %d has dtype %s", s->buf->name, i,
                      dg_dtype_name(s->idx[i]->dtype));
      }
      if (!s->value) return fail(c, "store to %s without a value", s->buf->name);
      if (!check_expr(c, s->value)) return false;
      if (s->value->dtype != s->buf->dtype)
        return fail(c, "store of a %s value to %s of dtype %s", dg_dtype_name(s->value->dtype),
                    s->buf->name, dg_dtype_name(s->buf->dtype));
      return true;
    }
    case DG_STMT_IF:
      if (!s->cond || !check_expr(c, s->cond)) return s->cond ? false : fail(c, "if without a condition");
      if (s->cond->dtype != DG_BOOL) return fail(c, "if condition of dtype %s", dg_dtype_name(s->cond->dtype));
      if (!s->then_s) return fail(c, "if without a then branch");
      if (!check_stmt(c, s->then_s)) return false;
      return !s->else_s || check_stmt(c, s->else_s);
  }
  return fail(c, "bad statement kind %d", (int)s->kind);
}

bool ir_verify(const dg_func *f, dg_status *st) {
  vctx c = {0};
  c.f = f;
  c.st = st;
  bool ok = true;
  if (!f->body || f->body->kind != DG_STMT_BLOCK || !f->body->block) {
    ok = fail(&c, "the body is not a root block");
  } else if (!f->body->block->name || strcmp(f->body->block->name, "root") != 0) {
    ok = fail(&c, "the root block is named \"%s\", not \"root\"",
              f->body->block->name ? f->body->block->name : "");
  }
  for (int i = 0; ok && i < f->n_params; i++) {
    const dg_buffer *b = f->params[i];
    if (!b || !b->name || !b->name[0]) ok = fail(&c, "parameter %d has no buffer or name", i);
    else if (!sset_add(&c.buf_names, b->name)) ok = fail(&c, "buffer name %s is used twice", b->name);
    else if (b->ndim < 0 || b->ndim > DG_MAX_DIMS) ok = fail(&c, "parameter %s has rank %d", b->name, b->ndim);
    else {
      for (int d = 0; ok && d < b->ndim; d++)
        if (b->shape[d] <= 0)
          ok = fail(&c, "parameter %s has shape[%d] = %lld", b->name, d, (long long)b->shape[d]);
      DG_VEC_PUSH(&c.params, b);
    }
  }
  if (ok) ok = check_block(&c, f->body->block, true);
  /* a kernel that stores to none of its parameters computes nothing a
   * caller can see (and its check would compare zero elements) */
  if (ok && !c.writes_param)
    ok = fail(&c, "no store writes a parameter: the kernel has no output");
  if (ok) dg_status_ok(st);
  DG_VEC_FREE(&c.scope);
  DG_VEC_FREE(&c.blocks);
  DG_VEC_FREE(&c.params);
  sset_free(&c.var_names);
  sset_free(&c.buf_names);
  sset_free(&c.block_names);
  return ok;
}
