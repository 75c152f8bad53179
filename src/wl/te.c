/* te.c: a small compute-definition helper that builds TensorIR blocks the
 * way TVM's te.create_prim_func lays them out, so that the families stay
 * short and their kernels match TVM's block for block.
 *
 * Each compute becomes one loop nest (spatial axes, then reduce axes, all
 * serial) around one block whose iteration variables are bound one-to-one
 * to the loops. Reads are the loads of the value in order of first
 * appearance; a buffer loaded at two different points reads, in each
 * dimension where the points differ, the whole extent (a sound hull that
 * stays exact for every workload here, where at most rope loads one
 * buffer twice). Reductions get an init (0 for sums, the dtype's lowest
 * finite value for max). Assumes the caller passes well-formed, checked
 * shapes: misuse is a bug and asserts. Does no simplification beyond the
 * constant folding TVM's operator overloads perform.
 */
#include <float.h>
#include <stdarg.h>
#include <string.h>

#include "wl/wl_impl.h"

/* ---- names --------------------------------------------------------------- */

static bool name_taken(te_ctx *c, const char *s) {
  for (size_t i = 0; i < c->names.len; i++)
    if (strcmp(c->names.data[i], s) == 0) return true;
  return false;
}

/* The name itself if free, else the first free "name_N". */
static const char *unique_name(te_ctx *c, const char *base) {
  const char *s = dg_arena_strdup(c->f->arena, base);
  for (int k = 1; name_taken(c, s); k++) s = dg_arena_printf(c->f->arena, "%s_%d", base, k);
  DG_VEC_PUSH(&c->names, s);
  return s;
}

/* ---- kernel -------------------------------------------------------------- */

void te_init(te_ctx *c) {
  memset(c, 0, sizeof *c);
  c->f = ir_func_new("main");
  c->root = ir_block_new(c->f, "root");
}

dg_func *te_finish(te_ctx *c) {
  DG_ASSERT(!c->cur.open && c->body.len > 0);
  dg_func *f = c->f;
  c->root->body = c->body.len == 1 ? c->body.data[0]
                                   : ir_seq(f, c->body.data, (int)c->body.len);
  f->body = ir_block_stmt(f, c->root);
  DG_VEC_FREE(&c->body);
  DG_VEC_FREE(&c->names);
  c->f = NULL;
  return f;
}

dg_buffer *te_placeholder(te_ctx *c, const char *name, dg_dtype t, int ndim,
                          const int64_t *shape) {
  DG_ASSERT(!name_taken(c, name));
  dg_buffer *b = ir_buffer_new(c->f, unique_name(c, name), t, ndim, shape, DG_SCOPE_GLOBAL);
  ir_func_add_param(c->f, b);
  return b;
}

/* ---- computes ------------------------------------------------------------ */

dg_expr **te_begin(te_ctx *c, const char *name, dg_dtype t, bool output,
                   const te_axis *sp, int nsp, const te_axis *rd, int nrd,
                   te_reduce red) {
  DG_ASSERT(!c->cur.open);
  DG_ASSERT(nsp >= 1 && nsp <= DG_MAX_DIMS && nrd >= 0 && nrd <= DG_MAX_DIMS);
  DG_ASSERT((red == TE_ASSIGN) == (nrd == 0));
  dg_func *f = c->f;
  int64_t shape[DG_MAX_DIMS];
  for (int i = 0; i < nsp; i++) shape[i] = sp[i].extent;
  DG_ASSERT(!name_taken(c, name));
  dg_buffer *out = ir_buffer_new(f, unique_name(c, name), t, nsp, shape, DG_SCOPE_GLOBAL);
  if (output) ir_func_add_param(f, out);
  else ir_block_add_alloc(f, c->root, out);

  dg_block *b = ir_block_new(f, name);
  int n = nsp + nrd;
  for (int i = 0; i < n; i++) {
    const te_axis *ax = i < nsp ? &sp[i] : &rd[i - nsp];
    DG_ASSERT(ax->extent >= 1);
    char vname[64];
    snprintf(vname, sizeof vname, "v_%s", ax->name);
    dg_var *lv = ir_var_new(f, unique_name(c, ax->name), DG_I32);
    dg_var *bv = ir_var_new(f, unique_name(c, vname), DG_I32);
    ir_block_add_iter(f, b, bv, ax->extent, i < nsp ? DG_ITER_SPATIAL : DG_ITER_REDUCE,
                      ir_var(f, lv));
    c->cur.loop[i] = lv;
    c->cur.ext[i] = ax->extent;
    c->cur.iv[i] = ir_var(f, bv);
  }
  c->cur.open = true;
  c->cur.out = out;
  c->cur.block = b;
  c->cur.red = red;
  c->cur.n = n;
  return c->cur.iv;
}

static bool expr_same(const dg_expr *a, const dg_expr *b) {
  if (a == b) return true;
  if (!a || !b || a->kind != b->kind || a->dtype != b->dtype) return false;
  switch (a->kind) {
    case DG_EXPR_INT: return a->ival == b->ival;
    case DG_EXPR_FLOAT: return a->fval == b->fval;
    case DG_EXPR_VAR: return a->var == b->var;
    default: break;
  }
  if (a->buf != b->buf || a->fn != b->fn || a->nargs != b->nargs) return false;
  for (int i = 0; i < a->nargs; i++)
    if (!expr_same(a->args[i], b->args[i])) return false;
  return expr_same(a->a, b->a) && expr_same(a->b, b->b) && expr_same(a->c, b->c);
}

typedef struct {
  dg_buffer *buf;
  dg_expr **idx; /* NULL entry: the whole dimension */
} te_access;

typedef DG_VEC(te_access) te_accesses;

static void collect_loads(te_ctx *c, const dg_expr *e, te_accesses *acc) {
  if (!e) return;
  if (e->kind == DG_EXPR_LOAD) {
    te_access *hit = NULL;
    for (size_t i = 0; i < acc->len; i++)
      if (acc->data[i].buf == e->buf) hit = &acc->data[i];
    if (!hit) {
      te_access a = {e->buf, DG_ANEWN(c->f->arena, dg_expr *, e->nargs)};
      memcpy(a.idx, e->args, sizeof(dg_expr *) * (size_t)e->nargs);
      DG_VEC_PUSH(acc, a);
    } else {
      for (int d = 0; d < e->nargs; d++)
        if (hit->idx[d] && !expr_same(hit->idx[d], e->args[d])) hit->idx[d] = NULL;
    }
  }
  for (int i = 0; i < e->nargs; i++) collect_loads(c, e->args[i], acc);
  collect_loads(c, e->a, acc);
  collect_loads(c, e->b, acc);
  collect_loads(c, e->c, acc);
}

dg_buffer *te_end(te_ctx *c, dg_expr *value) {
  DG_ASSERT(c->cur.open);
  dg_func *f = c->f;
  dg_buffer *out = c->cur.out;
  dg_block *b = c->cur.block;
  dg_expr **iv = c->cur.iv;
  int nsp = out->ndim;
  if (value->dtype != out->dtype)
    dg_panic(__FILE__, __LINE__, "te_end %s: value is %s, buffer %s", b->name,
             dg_dtype_name(value->dtype), dg_dtype_name(out->dtype));

  te_accesses acc = {0};
  collect_loads(c, value, &acc);
  for (size_t i = 0; i < acc.len; i++) {
    te_access *a = &acc.data[i];
    DG_ASSERT(a->buf != out);
    int nd = a->buf->ndim;
    dg_expr **mn = DG_ANEWN(f->arena, dg_expr *, nd);
    dg_expr **ex = DG_ANEWN(f->arena, dg_expr *, nd);
    for (int d = 0; d < nd; d++) {
      mn[d] = a->idx[d] ? a->idx[d] : ir_int(f, 0);
      ex[d] = ir_int(f, a->idx[d] ? 1 : a->buf->shape[d]);
    }
    ir_block_add_read(f, b, a->buf, mn, ex);
  }
  DG_VEC_FREE(&acc);
  ir_block_add_write(f, b, out, iv, NULL);

  switch (c->cur.red) {
    case TE_ASSIGN: b->body = ir_store(f, out, iv, nsp, value); break;
    case TE_SUM:
      b->init = ir_store(f, out, iv, nsp, te_float(c, 0.0, out->dtype));
      b->body = ir_store(f, out, iv, nsp, ir_add(f, ir_load(f, out, iv, nsp), value));
      break;
    case TE_MAX:
      b->init = ir_store(f, out, iv, nsp, te_float(c, te_lowest(out->dtype), out->dtype));
      b->body = ir_store(f, out, iv, nsp,
                         ir_bin(f, DG_EXPR_MAX, ir_load(f, out, iv, nsp), value));
      break;
  }

  dg_stmt *s = ir_block_stmt(f, b);
  for (int i = c->cur.n - 1; i >= 0; i--)
    s = ir_for(f, c->cur.loop[i], c->cur.ext[i], DG_LOOP_SERIAL, DG_TAG_NONE, s);
  DG_VEC_PUSH(&c->body, s);
  c->cur.open = false;
  return out;
}

dg_block *te_last_block(te_ctx *c) {
  DG_ASSERT(!c->cur.open && c->cur.block);
  return c->cur.block;
}

dg_buffer *te_pad(te_ctx *c, const char *name, dg_buffer *in,
                  const int64_t *before, const int64_t *after,
                  double pad_value) {
  int n = in->ndim;
  te_axis ax[DG_MAX_DIMS] = {{0}};
  char names[DG_MAX_DIMS][16];
  for (int i = 0; i < n; i++) {
    snprintf(names[i], sizeof names[i], "i%d", i);
    ax[i] = (te_axis){names[i], in->shape[i] + before[i] + after[i]};
  }
  dg_expr **v = te_begin(c, name, in->dtype, false, ax, n, NULL, 0, TE_ASSIGN);
  dg_expr *idx[DG_MAX_DIMS];
  dg_expr *conds[2 * DG_MAX_DIMS];
  int nc = 0;
  for (int i = 0; i < n; i++) {
    if (before[i] == 0 && after[i] == 0) {
      idx[i] = v[i];
      continue;
    }
    idx[i] = te_sub(c, v[i], te_int(c, before[i]));
    conds[nc++] = ir_bin(c->f, DG_EXPR_GE, v[i], te_int(c, before[i]));
    conds[nc++] = ir_bin(c->f, DG_EXPR_LT, v[i], te_int(c, in->shape[i] + before[i]));
  }
  dg_expr *val = te_loadv(c, in, idx);
  if (nc)
    val = ir_select(c->f, te_all(c, conds, nc), val, te_float(c, pad_value, in->dtype));
  return te_end(c, val);
}

/* ---- index arithmetic ---------------------------------------------------- */

dg_expr *te_int(te_ctx *c, int64_t v) { return ir_int(c->f, v); }

static bool cint(const dg_expr *e, int64_t v) {
  return e->kind == DG_EXPR_INT && e->ival == v;
}

dg_expr *te_add(te_ctx *c, dg_expr *a, dg_expr *b) {
  int64_t x, y;
  if (ir_is_const_int(a, &x) && ir_is_const_int(b, &y)) return te_int(c, x + y);
  if (cint(a, 0)) return b;
  if (cint(b, 0)) return a;
  return ir_add(c->f, a, b);
}

dg_expr *te_sub(te_ctx *c, dg_expr *a, dg_expr *b) {
  int64_t x, y;
  if (ir_is_const_int(a, &x) && ir_is_const_int(b, &y)) return te_int(c, x - y);
  if (cint(b, 0)) return a;
  return ir_sub(c->f, a, b);
}

dg_expr *te_mul(te_ctx *c, dg_expr *a, dg_expr *b) {
  int64_t x, y;
  if (ir_is_const_int(a, &x) && ir_is_const_int(b, &y)) return te_int(c, x * y);
  if (cint(a, 1)) return b;
  if (cint(b, 1)) return a;
  if (cint(a, 0) || cint(b, 0)) return te_int(c, 0);
  return ir_mul(c->f, a, b);
}

dg_expr *te_muli(te_ctx *c, dg_expr *a, int64_t k) { return te_mul(c, a, te_int(c, k)); }
dg_expr *te_addi(te_ctx *c, dg_expr *a, int64_t k) { return te_add(c, a, te_int(c, k)); }

static int64_t floordiv64(int64_t a, int64_t b) {
  int64_t q = a / b;
  return (a % b != 0 && ((a < 0) != (b < 0))) ? q - 1 : q;
}

dg_expr *te_floordiv(te_ctx *c, dg_expr *a, int64_t k) {
  DG_ASSERT(k > 0);
  int64_t x;
  if (ir_is_const_int(a, &x)) return te_int(c, floordiv64(x, k));
  if (k == 1) return a;
  return ir_bin(c->f, DG_EXPR_FLOORDIV, a, te_int(c, k));
}

dg_expr *te_floormod(te_ctx *c, dg_expr *a, int64_t k) {
  DG_ASSERT(k > 0);
  int64_t x;
  if (ir_is_const_int(a, &x)) return te_int(c, x - floordiv64(x, k) * k);
  if (k == 1) return te_int(c, 0);
  return ir_bin(c->f, DG_EXPR_FLOORMOD, a, te_int(c, k));
}

dg_expr *te_all(te_ctx *c, dg_expr **conds, int n) {
  DG_ASSERT(n > 0);
  dg_expr *e = conds[0];
  for (int i = 1; i < n; i++) e = ir_bin(c->f, DG_EXPR_AND, e, conds[i]);
  return e;
}

/* ---- values -------------------------------------------------------------- */

dg_expr *te_loadv(te_ctx *c, dg_buffer *b, dg_expr **idx) {
  return ir_load(c->f, b, idx, b->ndim);
}

dg_expr *te_load(te_ctx *c, dg_buffer *b, ...) {
  dg_expr *idx[DG_MAX_DIMS];
  va_list ap;
  va_start(ap, b);
  for (int i = 0; i < b->ndim; i++) idx[i] = va_arg(ap, dg_expr *);
  va_end(ap);
  return te_loadv(c, b, idx);
}

dg_expr *te_cast(te_ctx *c, dg_dtype t, dg_expr *a) {
  return a->dtype == t ? a : ir_cast(c->f, t, a);
}

dg_expr *te_float(te_ctx *c, double v, dg_dtype t) { return ir_float(c->f, v, t); }

double te_lowest(dg_dtype t) {
  switch (t) {
    case DG_F16: return -65504.0;
    case DG_F32: return -(double)FLT_MAX;
    case DG_F64: return -DBL_MAX;
    default: DG_UNREACHABLE();
  }
}
