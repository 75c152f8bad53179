/* interp.c: the kernel IR evaluated directly, no compiler needed.
 *
 * Semantics are those of the emitted C (src/codegen/emit.c and the helpers
 * of src/codegen/lang.c), so the two agree bit for bit: f32 values are
 * computed in double and rounded to float after every operation (which for
 * + - * / equals float arithmetic, double having more than twice float's
 * precision), f16 likewise through float to half, math functions call the
 * float versions of libm for f32 and f16, integers wrap to their width.
 * In reference mode every float is a double and nothing is rounded.
 *
 * Unlike the compiled code it checks what it can: every access against the
 * buffer's shape, every iteration variable against its domain (where the
 * block's predicate holds), divisions by zero, buffers used outside their
 * allocating block; each is an error naming the block. Allocated float
 * buffers start as NaN so that reading one before writing it shows.
 *
 * It is meant for small kernels: one tree walk per element, no caching.
 */
#include "dragon/rt.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
  int64_t i; /* integers and bools */
  double f;  /* floats */
} val;

typedef struct {
  const dg_func *f;
  bool ref;
  dg_status *st;
  bool failed;
  val *vars;
  int n_vars;
  void **bufs;
  int n_bufs;
  const dg_block *block;
} interp;

static void fail(interp *in, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void fail(interp *in, const char *fmt, ...) {
  if (in->failed) return;
  in->failed = true;
  va_list ap;
  va_start(ap, fmt);
  dg_vfail(in->st, DG_ERR_RUNTIME, fmt, ap);
  va_end(ap);
  dg_status_prefix(in->st, "interp: block %s", in->block ? in->block->name : "(none)");
}

/* ---- dtype rules --------------------------------------------------------- */

static double rnd(const interp *in, dg_dtype t, double v) {
  if (in->ref) return v;
  if (t == DG_F32) return (double)(float)v;
  if (t == DG_F16) return (double)dg_f16_to_f32(dg_f32_to_f16((float)v));
  return v;
}

static int64_t wrap(dg_dtype t, int64_t v) {
  switch (t) {
    case DG_BOOL: return v != 0;
    case DG_I8: return (int8_t)(uint8_t)(uint64_t)v;
    case DG_I32: return (int32_t)(uint32_t)(uint64_t)v;
    default: return v;
  }
}

static int64_t floordiv64(int64_t a, int64_t b) {
  if (b == -1) return (int64_t)(0ull - (uint64_t)a);
  int64_t q = a / b;
  if (a % b != 0 && ((a < 0) != (b < 0))) q--;
  return q;
}

static int64_t floormod64(int64_t a, int64_t b) {
  if (b == -1) return 0;
  int64_t r = a % b;
  if (r != 0 && ((r < 0) != (b < 0))) r += b;
  return r;
}

static int64_t f2i(double x, dg_dtype t) {
  int64_t lo = t == DG_I8 ? INT8_MIN : t == DG_I32 ? INT32_MIN : INT64_MIN;
  int64_t hi = t == DG_I8 ? INT8_MAX : t == DG_I32 ? INT32_MAX : INT64_MAX;
  if (x != x) return 0;
  if (x <= (double)lo) return lo;
  if (x >= (double)hi) return hi;
  return (int64_t)x;
}

static double math64(dg_math fn, double a, double b) {
  switch (fn) {
    case DG_MATH_EXP: return exp(a);
    case DG_MATH_LOG: return log(a);
    case DG_MATH_SQRT: return sqrt(a);
    case DG_MATH_RSQRT: return 1.0 / sqrt(a);
    case DG_MATH_TANH: return tanh(a);
    case DG_MATH_ERF: return erf(a);
    case DG_MATH_POW: return pow(a, b);
    case DG_MATH_FABS: return fabs(a);
    case DG_MATH_SIGMOID: return 1.0 / (1.0 + exp(-a));
    case DG_MATH_COS: return cos(a);
    case DG_MATH_SIN: return sin(a);
    case DG_MATH_COUNT: break;
  }
  DG_UNREACHABLE();
}

static float math32(dg_math fn, float a, float b) {
  switch (fn) {
    case DG_MATH_EXP: return expf(a);
    case DG_MATH_LOG: return logf(a);
    case DG_MATH_SQRT: return sqrtf(a);
    case DG_MATH_RSQRT: return 1.0f / sqrtf(a);
    case DG_MATH_TANH: return tanhf(a);
    case DG_MATH_ERF: return erff(a);
    case DG_MATH_POW: return powf(a, b);
    case DG_MATH_FABS: return fabsf(a);
    case DG_MATH_SIGMOID: return 1.0f / (1.0f + expf(-a));
    case DG_MATH_COS: return cosf(a);
    case DG_MATH_SIN: return sinf(a);
    case DG_MATH_COUNT: break;
  }
  DG_UNREACHABLE();
}

/* ---- storage ------------------------------------------------------------- */

static void *buffer_data(interp *in, const dg_buffer *b) {
  if (b->id < 0 || b->id >= in->n_bufs || !in->bufs[b->id]) {
    fail(in, "buffer %s is used outside the block that allocates it", b->name);
    return NULL;
  }
  return in->bufs[b->id];
}

/* Flat offset of buf[idx...], or -1 after reporting an out-of-bounds access. */
static int64_t offset(interp *in, const dg_buffer *b, dg_expr *const *idx, int n,
                      const char *what);

static val read_elem(const interp *in, const dg_buffer *b, const void *p, int64_t k) {
  val v = {0, 0};
  if (in->ref && dg_dtype_is_float(b->dtype)) {
    v.f = ((const double *)p)[k];
    return v;
  }
  switch (b->dtype) {
    case DG_BOOL: v.i = ((const uint8_t *)p)[k] != 0; break;
    case DG_I8: v.i = ((const int8_t *)p)[k]; break;
    case DG_I32: v.i = ((const int32_t *)p)[k]; break;
    case DG_I64: v.i = ((const int64_t *)p)[k]; break;
    case DG_F16: v.f = dg_f16_to_f32(((const uint16_t *)p)[k]); break;
    case DG_F32: v.f = ((const float *)p)[k]; break;
    case DG_F64: v.f = ((const double *)p)[k]; break;
    case DG_DTYPE_COUNT: DG_UNREACHABLE();
  }
  return v;
}

static void write_elem(const interp *in, const dg_buffer *b, void *p, int64_t k, val v) {
  if (in->ref && dg_dtype_is_float(b->dtype)) {
    ((double *)p)[k] = v.f;
    return;
  }
  switch (b->dtype) {
    case DG_BOOL: ((uint8_t *)p)[k] = v.i != 0; break;
    case DG_I8: ((int8_t *)p)[k] = (int8_t)wrap(DG_I8, v.i); break;
    case DG_I32: ((int32_t *)p)[k] = (int32_t)wrap(DG_I32, v.i); break;
    case DG_I64: ((int64_t *)p)[k] = v.i; break;
    case DG_F16: ((uint16_t *)p)[k] = dg_f32_to_f16((float)v.f); break;
    case DG_F32: ((float *)p)[k] = (float)v.f; break;
    case DG_F64: ((double *)p)[k] = v.f; break;
    case DG_DTYPE_COUNT: DG_UNREACHABLE();
  }
}

/* ---- expressions --------------------------------------------------------- */

static val eval(interp *in, const dg_expr *x);

static val ival(int64_t i) { return (val){i, 0}; }
static val fval(double f) { return (val){0, f}; }

static bool truth(const dg_expr *x, val v) {
  return dg_dtype_is_float(x->dtype) ? v.f != 0 : v.i != 0;
}

static int64_t offset(interp *in, const dg_buffer *b, dg_expr *const *idx, int n,
                      const char *what) {
  if (n != b->ndim) {
    fail(in, "%s of %s with %d indices (it has %d dimensions)", what, b->name, n, b->ndim);
    return -1;
  }
  int64_t v[DG_MAX_DIMS], k = 0;
  for (int d = 0; d < n; d++) {
    v[d] = eval(in, idx[d]).i;
    if (in->failed) return -1;
  }
  for (int d = 0; d < n; d++) {
    if (v[d] < 0 || v[d] >= b->shape[d]) {
      char where[160];
      size_t len = 0;
      for (int j = 0; j < n && len < sizeof where; j++)
        len += (size_t)snprintf(where + len, sizeof where - len, "%s%lld", j ? ", " : "",
                                (long long)v[j]);
      fail(in, "%s %s[%s] is out of bounds (dimension %d has extent %lld)", what, b->name,
           where, d, (long long)b->shape[d]);
      return -1;
    }
    k = k * b->shape[d] + v[d];
  }
  return k;
}

static val arith(interp *in, const dg_expr *x) {
  dg_dtype t = x->dtype;
  if (t == DG_BOOL) {
    fail(in, "arithmetic '%s' on bool values", dg_expr_kind_name(x->kind));
    return ival(0);
  }
  val a = eval(in, x->a), b = eval(in, x->b);
  if (in->failed) return ival(0);
  if (dg_dtype_is_float(t)) {
    double r;
    switch (x->kind) {
      case DG_EXPR_ADD: r = a.f + b.f; break;
      case DG_EXPR_SUB: r = a.f - b.f; break;
      case DG_EXPR_MUL: r = a.f * b.f; break;
      default: r = a.f / b.f; break;
    }
    return fval(rnd(in, t, r));
  }
  uint64_t ua = (uint64_t)a.i, ub = (uint64_t)b.i, r;
  switch (x->kind) {
    case DG_EXPR_ADD: r = ua + ub; break;
    case DG_EXPR_SUB: r = ua - ub; break;
    case DG_EXPR_MUL: r = ua * ub; break;
    default:
      fail(in, "true division '/' of %s values (integers use '//')", dg_dtype_name(t));
      return ival(0);
  }
  return ival(wrap(t, (int64_t)r));
}

static val compare(interp *in, const dg_expr *x) {
  val a = eval(in, x->a), b = eval(in, x->b);
  if (in->failed) return ival(0);
  bool fl = dg_dtype_is_float(x->a->dtype);
  double p = fl ? a.f : 0, q = fl ? b.f : 0;
  int64_t i = a.i, j = b.i;
  bool r;
  switch (x->kind) {
    case DG_EXPR_EQ: r = fl ? p == q : i == j; break;
    case DG_EXPR_NE: r = fl ? p != q : i != j; break;
    case DG_EXPR_LT: r = fl ? p < q : i < j; break;
    case DG_EXPR_LE: r = fl ? p <= q : i <= j; break;
    case DG_EXPR_GT: r = fl ? p > q : i > j; break;
    default: r = fl ? p >= q : i >= j; break;
  }
  return ival(r);
}

static val cast(interp *in, const dg_expr *x) {
  val a = eval(in, x->a);
  if (in->failed) return ival(0);
  dg_dtype to = x->dtype, from = x->a->dtype;
  bool ffrom = dg_dtype_is_float(from);
  if (to == DG_BOOL) return ival(ffrom ? a.f != 0 : a.i != 0);
  if (dg_dtype_is_float(to)) {
    double v = ffrom ? a.f : (double)a.i;
    if (in->ref) return fval(v);
    if (to == DG_F16 && from == DG_F16) return fval(v);
    return fval(rnd(in, to, v));
  }
  if (ffrom) return ival(f2i(a.f, to));
  return ival(wrap(to, a.i));
}

static val call(interp *in, const dg_expr *x) {
  if (!dg_dtype_is_float(x->dtype) || x->nargs != dg_math_arity(x->fn) || x->nargs < 1) {
    fail(in, "math function %s of %d %s values", dg_math_name(x->fn), x->nargs,
         dg_dtype_name(x->dtype));
    return ival(0);
  }
  double a = eval(in, x->args[0]).f;
  double b = x->nargs > 1 ? eval(in, x->args[1]).f : 0;
  if (in->failed) return ival(0);
  if (in->ref || x->dtype == DG_F64) return fval(math64(x->fn, a, b));
  float r = math32(x->fn, (float)a, (float)b);
  return fval(rnd(in, x->dtype, (double)r));
}

static val eval(interp *in, const dg_expr *x) {
  if (in->failed) return ival(0);
  switch (x->kind) {
    case DG_EXPR_INT:
      if (dg_dtype_is_float(x->dtype)) return fval(rnd(in, x->dtype, (double)x->ival));
      return ival(wrap(x->dtype, x->ival));
    case DG_EXPR_FLOAT: return fval(rnd(in, x->dtype, x->fval));
    case DG_EXPR_VAR:
      if (x->var->id < 0 || x->var->id >= in->n_vars) {
        fail(in, "variable %s does not belong to the kernel", x->var->name);
        return ival(0);
      }
      return in->vars[x->var->id];
    case DG_EXPR_LOAD: {
      void *p = buffer_data(in, x->buf);
      if (!p) return ival(0);
      int64_t k = offset(in, x->buf, x->args, x->nargs, "load");
      if (k < 0) return ival(0);
      return read_elem(in, x->buf, p, k);
    }
    case DG_EXPR_ADD:
    case DG_EXPR_SUB:
    case DG_EXPR_MUL:
    case DG_EXPR_DIV: return arith(in, x);
    case DG_EXPR_FLOORDIV:
    case DG_EXPR_FLOORMOD: {
      if (!dg_dtype_is_int(x->dtype)) {
        fail(in, "'%s' of %s values (integers only)", dg_expr_kind_name(x->kind),
             dg_dtype_name(x->dtype));
        return ival(0);
      }
      val a = eval(in, x->a), b = eval(in, x->b);
      if (in->failed) return ival(0);
      if (b.i == 0) {
        fail(in, "division by zero in '%s'", dg_expr_kind_name(x->kind));
        return ival(0);
      }
      int64_t r = x->kind == DG_EXPR_FLOORDIV ? floordiv64(a.i, b.i) : floormod64(a.i, b.i);
      return ival(wrap(x->dtype, r));
    }
    case DG_EXPR_MIN:
    case DG_EXPR_MAX: {
      val a = eval(in, x->a), b = eval(in, x->b);
      bool mn = x->kind == DG_EXPR_MIN;
      if (dg_dtype_is_float(x->dtype)) {
        bool take_a = (mn ? a.f < b.f : a.f > b.f) || a.f != a.f;
        return take_a ? a : b;
      }
      return (mn ? a.i < b.i : a.i > b.i) ? a : b;
    }
    case DG_EXPR_EQ:
    case DG_EXPR_NE:
    case DG_EXPR_LT:
    case DG_EXPR_LE:
    case DG_EXPR_GT:
    case DG_EXPR_GE: return compare(in, x);
    case DG_EXPR_AND:
      if (!truth(x->a, eval(in, x->a))) return ival(0);
      return ival(truth(x->b, eval(in, x->b)));
    case DG_EXPR_OR:
      if (truth(x->a, eval(in, x->a))) return ival(1);
      return ival(truth(x->b, eval(in, x->b)));
    case DG_EXPR_NOT: return ival(!truth(x->a, eval(in, x->a)));
    case DG_EXPR_SELECT:
      return truth(x->a, eval(in, x->a)) ? eval(in, x->b) : eval(in, x->c);
    case DG_EXPR_CAST: return cast(in, x);
    case DG_EXPR_CALL: return call(in, x);
    case DG_EXPR_COUNT: break;
  }
  fail(in, "unknown expression kind %d", (int)x->kind);
  return ival(0);
}

/* ---- statements ---------------------------------------------------------- */

static void exec(interp *in, const dg_stmt *s);

static bool set_var(interp *in, const dg_var *v, val x) {
  if (v->id < 0 || v->id >= in->n_vars) {
    fail(in, "variable %s does not belong to the kernel", v->name);
    return false;
  }
  in->vars[v->id] = x;
  return true;
}

static void exec_block(interp *in, const dg_block *b) {
  const dg_block *outer = in->block;
  in->block = b;
  val bind[64];
  if (b->n_iters > (int)DG_ARRAY_LEN(bind)) {
    fail(in, "%d iteration variables (at most %d)", b->n_iters, (int)DG_ARRAY_LEN(bind));
    goto out;
  }
  for (int i = 0; i < b->n_iters; i++) bind[i] = eval(in, b->iters[i].binding);
  for (int i = 0; i < b->n_iters && !in->failed; i++) set_var(in, b->iters[i].var, bind[i]);
  if (in->failed) goto out;
  if (b->predicate && !truth(b->predicate, eval(in, b->predicate))) goto out;
  if (in->failed) goto out;
  bool at_start = true;
  for (int i = 0; i < b->n_iters; i++) {
    const dg_iter *it = &b->iters[i];
    if (bind[i].i < 0 || bind[i].i >= it->extent) {
      fail(in, "iteration variable %s = %lld is outside its domain [0, %lld)", it->var->name,
           (long long)bind[i].i, (long long)it->extent);
      goto out;
    }
    if (it->kind == DG_ITER_REDUCE && bind[i].i != 0) at_start = false;
  }
  int n_alloc = 0;
  for (; n_alloc < b->n_allocs; n_alloc++) {
    const dg_buffer *a = b->allocs[n_alloc];
    int64_t n = ir_buffer_numel(a);
    size_t eb = in->ref && dg_dtype_is_float(a->dtype) ? 8 : (size_t)dg_dtype_bytes(a->dtype);
    void *p = NULL;
    if (a->id < 0 || a->id >= in->n_bufs || in->bufs[a->id])
      fail(in, "buffer %s is allocated twice or does not belong to the kernel", a->name);
    else if (n < 0 || n > ((int64_t)1 << 34) || !(p = calloc((size_t)(n ? n : 1), eb)))
      fail(in, "cannot allocate buffer %s (%lld elements)", a->name, (long long)n);
    if (in->failed) break;
    in->bufs[a->id] = p;
    if (dg_dtype_is_float(a->dtype))
      for (int64_t k = 0; k < n; k++) write_elem(in, a, p, k, fval(NAN));
  }
  if (!in->failed) {
    if (b->init && at_start) exec(in, b->init);
    exec(in, b->body);
  }
  for (int i = 0; i < n_alloc; i++) {
    free(in->bufs[b->allocs[i]->id]);
    in->bufs[b->allocs[i]->id] = NULL;
  }
out:
  in->block = outer;
}

static void exec(interp *in, const dg_stmt *s) {
  if (in->failed || !s) return;
  switch (s->kind) {
    case DG_STMT_FOR:
      for (int64_t i = 0; i < s->extent && !in->failed; i++) {
        if (!set_var(in, s->loop_var, ival(i))) return;
        exec(in, s->body);
      }
      return;
    case DG_STMT_SEQ:
      for (int i = 0; i < s->n && !in->failed; i++) exec(in, s->stmts[i]);
      return;
    case DG_STMT_BLOCK: exec_block(in, s->block); return;
    case DG_STMT_STORE: {
      void *p = buffer_data(in, s->buf);
      if (!p) return;
      int64_t k = offset(in, s->buf, s->idx, s->nidx, "store");
      if (k < 0) return;
      val v = eval(in, s->value);
      if (!in->failed) write_elem(in, s->buf, p, k, v);
      return;
    }
    case DG_STMT_IF:
      if (truth(s->cond, eval(in, s->cond))) exec(in, s->then_s);
      else exec(in, s->else_s);
      return;
  }
  fail(in, "unknown statement kind %d", (int)s->kind);
}

bool rt_interp_run(const dg_func *f, void **args, bool reference, dg_status *st) {
  interp in = {.f = f, .ref = reference, .st = st};
  if (!f->body || f->body->kind != DG_STMT_BLOCK)
    return dg_fail(st, DG_ERR_INVALID, "interp: kernel %s has no root block", f->name);
  in.n_vars = f->next_var_id;
  in.n_bufs = f->next_buf_id;
  in.vars = dg_calloc((size_t)(in.n_vars ? in.n_vars : 1), sizeof(val));
  in.bufs = dg_calloc((size_t)(in.n_bufs ? in.n_bufs : 1), sizeof(void *));
  for (int i = 0; i < f->n_params && !in.failed; i++) {
    const dg_buffer *b = f->params[i];
    if (b->id < 0 || b->id >= in.n_bufs || !args[i])
      fail(&in, "parameter %d (%s) has no data", i, b->name);
    else
      in.bufs[b->id] = args[i];
  }
  if (!in.failed) exec(&in, f->body);
  /* Allocations of blocks left by an error were freed on the way out;
   * parameters belong to the caller. */
  free(in.vars);
  free(in.bufs);
  return !in.failed;
}
