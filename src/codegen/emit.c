/* emit.c: kernel IR -> one source function, through a language table.
 *
 * Loops of every kind become plain loops unless the table names a hardware
 * index for a thread tag. A block becomes a scope: its iteration variables
 * as `const` bindings, its allocations, then its predicate as an `if` around
 * the init (run when every reduce iteration variable is 0, as TVM's
 * LowerInitBlock does) and the body. Loads and stores flatten their indices
 * row-major (buffers are dense). Allocations up to the table's stack limit
 * are local arrays, bigger ones come from malloc; if that fails the block is
 * skipped, so the outputs stay poisoned and the check fails instead of the
 * process crashing.
 *
 * Every compound expression is parenthesised, so the text never depends on
 * C's precedence. f16 values are floats rounded after every operation; in
 * reference mode every float is a double and nothing is rounded.
 *
 * In reference mode two things make a large workload affordable without
 * changing a bit of its results: OpenMP pragmas on the outer loops whose
 * iterations are independent, and, in a nest of spatial loops over
 * reduction loops (a GEMM's i, j over k), the innermost spatial loop moved
 * inside the reduction loops where that walks memory more closely (j over
 * a row of B instead of k down a column). Every output element still
 * takes its init and then its terms in the same order.
 *
 * It assumes a kernel the verifier accepts; what it cannot express it
 * reports, and it does not lower thread bindings or insert barriers (that is
 * lower/'s job).
 */
#include "codegen/emit_impl.h"

#include <inttypes.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

typedef cg_emitter emitter;

static void fail(emitter *e, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void fail(emitter *e, const char *fmt, ...) {
  if (e->failed) return;
  e->failed = true;
  va_list ap;
  va_start(ap, fmt);
  dg_vfail(e->st, DG_ERR_INVALID, fmt, ap);
  va_end(ap);
  if (!e->block && e->where) dg_status_prefix(e->st, "codegen %s: %s", e->L->name, e->where);
  else dg_status_prefix(e->st, "codegen %s: block %s", e->L->name,
                        e->block ? e->block->name : "(none)");
}

/* ---- names --------------------------------------------------------------- */

static const char *const reserved[] = {
    "auto", "break", "case", "char", "const", "continue", "default", "do",
    "double", "else", "enum", "extern", "float", "for", "goto", "if", "inline",
    "int", "long", "register", "restrict", "return", "short", "signed",
    "sizeof", "static", "struct", "switch", "typedef", "union", "unsigned",
    "void", "volatile", "while", "bool", "true", "false", "args", "main",
    "int8_t", "int16_t", "int32_t", "int64_t", "uint8_t", "uint16_t",
    "uint32_t", "uint64_t", "size_t", "malloc", "free", "memcpy", "NAN",
    "INFINITY", "floor", "half", "float4", "threadIdx", "blockIdx",
    "blockDim", "gridDim",
};

static bool is_ident(const char *s) {
  if (!s || !*s) return false;
  if (!((*s >= 'a' && *s <= 'z') || (*s >= 'A' && *s <= 'Z') || *s == '_')) return false;
  for (const char *p = s; *p; p++)
    if (!((*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z') ||
          (*p >= '0' && *p <= '9') || *p == '_'))
      return false;
  return true;
}

/* A name of the kernel may be used as written unless it could collide with
 * C, the helpers (all dg_...) or a math function; otherwise it is replaced
 * by one made from its id, which no kept name can equal. */
static bool name_usable(const emitter *e, const char *s) {
  if (!is_ident(s) || s[0] == '_' || strncmp(s, "dg_", 3) == 0) return false;
  for (size_t i = 0; i < DG_ARRAY_LEN(reserved); i++)
    if (strcmp(s, reserved[i]) == 0) return false;
  for (int i = 0; i < DG_MATH_COUNT; i++)
    if ((e->L->math_f32[i] && strcmp(s, e->L->math_f32[i]) == 0) ||
        (e->L->math_f64[i] && strcmp(s, e->L->math_f64[i]) == 0))
      return false;
  return true;
}

/* Variables and buffers have separate name spaces in the IR, one in C. */
static bool names_a_buffer(const emitter *e, const char *s) {
  for (size_t i = 0; i < e->buf_names.len; i++)
    if (strcmp(e->buf_names.data[i], s) == 0) return true;
  return false;
}

static void put_var(emitter *e, const dg_var *v) {
  if (e->var_hook && e->var_hook(e, v)) return;
  if (name_usable(e, v->name) && !names_a_buffer(e, v->name)) dg_str_puts(&e->out, v->name);
  else dg_str_printf(&e->out, "dg_v%d", v->id);
}

static void put_buf(emitter *e, const dg_buffer *b) {
  if (name_usable(e, b->name)) dg_str_puts(&e->out, b->name);
  else dg_str_printf(&e->out, "dg_b%d", b->id);
}

static void put_indent(emitter *e) { dg_str_indent(&e->out, 2 * e->indent); }

/* ---- types --------------------------------------------------------------- */

static bool is_f16_value(const emitter *e, dg_dtype t) { return t == DG_F16 && !e->ref; }

/* Element type of a buffer in memory. */
static const char *storage_type(const emitter *e, dg_dtype t) {
  switch (t) {
    case DG_BOOL: return "uint8_t";
    case DG_I8: return "int8_t";
    case DG_I32: return "int32_t";
    case DG_I64: return "int64_t";
    case DG_F16: return e->ref ? "double" : e->L->half_type;
    case DG_F32: return e->ref ? "double" : "float";
    case DG_F64: return "double";
    case DG_DTYPE_COUNT: break;
  }
  DG_UNREACHABLE();
}

/* Type of a value of dtype t in an expression. */
static const char *value_type(const emitter *e, dg_dtype t) {
  switch (t) {
    case DG_BOOL: return "int";
    case DG_F16: return e->ref ? "double" : "float";
    default: return storage_type(e, t);
  }
}

/* Suffix of the helper for a value of dtype t. */
static const char *helper_suffix(const emitter *e, dg_dtype t) {
  switch (t) {
    case DG_BOOL:
    case DG_I8:
    case DG_I32: return "_i32";
    case DG_I64: return "_i64";
    case DG_F16:
    case DG_F32: return e->ref ? "_f64" : "_f32";
    case DG_F64: return "_f64";
    case DG_DTYPE_COUNT: break;
  }
  DG_UNREACHABLE();
}

/* ---- expressions --------------------------------------------------------- */

static void expr(emitter *e, const dg_expr *x);

static void put_int(emitter *e, int64_t v, dg_dtype t) {
  if (t == DG_I64) {
    if (v == INT64_MIN) dg_str_puts(&e->out, "(-INT64_C(9223372036854775807) - 1)");
    else if (v < 0) dg_str_printf(&e->out, "(-INT64_C(%" PRId64 "))", -v);
    else dg_str_printf(&e->out, "INT64_C(%" PRId64 ")", v);
    return;
  }
  if (v == INT32_MIN) dg_str_puts(&e->out, "(-2147483647 - 1)");
  else if (v < 0) dg_str_printf(&e->out, "(%" PRId64 ")", v);
  else dg_str_printf(&e->out, "%" PRId64, v);
}

static void put_float(emitter *e, double v, dg_dtype t) {
  bool dbl = e->ref || t == DG_F64;
  /* A constant has its dtype's value, as the interpreter rounds it. */
  if (!e->ref && t == DG_F32) v = (double)(float)v;
  if (!e->ref && t == DG_F16) v = (double)dg_f16_to_f32(dg_f32_to_f16((float)v));
  if (isnan(v)) {
    dg_str_puts(&e->out, e->L->nan_literal);
    return;
  }
  if (isinf(v)) {
    dg_str_printf(&e->out, "%s%s", v < 0 ? "(-" : "", e->L->inf_literal);
    if (v < 0) dg_str_putc(&e->out, ')');
    return;
  }
  /* %.9g round-trips a float, %.17g a double. */
  char buf[64];
  snprintf(buf, sizeof buf, dbl ? "%.17g" : "%.9g", v);
  bool has_point = strpbrk(buf, ".e") != NULL;
  if (v < 0) dg_str_putc(&e->out, '(');
  dg_str_puts(&e->out, buf);
  if (!has_point) dg_str_puts(&e->out, ".0");
  if (!dbl) dg_str_putc(&e->out, 'f');
  if (v < 0) dg_str_putc(&e->out, ')');
}

static bool buffer_live(const emitter *e, const dg_buffer *b) {
  for (size_t i = 0; i < e->live.len; i++)
    if (e->live.data[i] == b) return true;
  return false;
}

/* buf[idx...] as a flat row-major offset. */
static void access(emitter *e, const dg_buffer *b, dg_expr *const *idx, int n) {
  if (!buffer_live(e, b)) {
    fail(e, "buffer %s is used outside the block that allocates it", b->name);
    return;
  }
  if (n != b->ndim) {
    fail(e, "buffer %s has %d dimensions, accessed with %d indices", b->name, b->ndim, n);
    return;
  }
  bool wide = ir_buffer_numel(b) > INT32_MAX;
  put_buf(e, b);
  dg_str_putc(&e->out, '[');
  if (e->offset_hook) e->offset_hook(e, b);
  int64_t stride = 1;
  int64_t strides[DG_MAX_DIMS];
  for (int d = n; d-- > 0;) {
    strides[d] = stride;
    stride *= b->shape[d];
  }
  bool any = false;
  for (int d = 0; d < n; d++) {
    int64_t c;
    if (ir_is_const_int(idx[d], &c) && c == 0) continue;
    if (any) dg_str_puts(&e->out, " + ");
    any = true;
    if (wide) dg_str_puts(&e->out, "(int64_t)");
    expr(e, idx[d]);
    if (strides[d] != 1) {
      dg_str_puts(&e->out, " * ");
      put_int(e, strides[d], wide ? DG_I64 : DG_I32);
    }
  }
  if (!any) dg_str_putc(&e->out, '0');
  dg_str_putc(&e->out, ']');
}

static const char *binop_text(dg_expr_kind k) {
  switch (k) {
    case DG_EXPR_ADD: return " + ";
    case DG_EXPR_SUB: return " - ";
    case DG_EXPR_MUL: return " * ";
    case DG_EXPR_DIV: return " / ";
    case DG_EXPR_EQ: return " == ";
    case DG_EXPR_NE: return " != ";
    case DG_EXPR_LT: return " < ";
    case DG_EXPR_LE: return " <= ";
    case DG_EXPR_GT: return " > ";
    case DG_EXPR_GE: return " >= ";
    case DG_EXPR_AND: return " && ";
    case DG_EXPR_OR: return " || ";
    default: DG_UNREACHABLE();
  }
}

static void binop(emitter *e, const dg_expr *x) {
  dg_str_putc(&e->out, '(');
  expr(e, x->a);
  dg_str_puts(&e->out, binop_text(x->kind));
  expr(e, x->b);
  dg_str_putc(&e->out, ')');
}

/* + - * / with the result type's rounding: f16 back to half, i8 wrapped. */
static void arith(emitter *e, const dg_expr *x) {
  if (x->kind == DG_EXPR_DIV && !dg_dtype_is_float(x->dtype)) {
    fail(e, "true division '/' of %s values (integers use '//')", dg_dtype_name(x->dtype));
    return;
  }
  if (x->dtype == DG_BOOL) {
    fail(e, "arithmetic '%s' on bool values", dg_expr_kind_name(x->kind));
    return;
  }
  if (is_f16_value(e, x->dtype)) {
    dg_str_printf(&e->out, "%s(", e->L->round_half);
    binop(e, x);
    dg_str_putc(&e->out, ')');
  } else if (x->dtype == DG_I8) {
    dg_str_puts(&e->out, "((int8_t)");
    binop(e, x);
    dg_str_putc(&e->out, ')');
  } else {
    binop(e, x);
  }
}

static void helper2(emitter *e, const char *fn, const dg_expr *x) {
  bool narrow = x->dtype == DG_I8;
  if (narrow) dg_str_puts(&e->out, "((int8_t)");
  dg_str_printf(&e->out, "%s%s(", fn, helper_suffix(e, x->dtype));
  expr(e, x->a);
  dg_str_puts(&e->out, ", ");
  expr(e, x->b);
  dg_str_putc(&e->out, ')');
  if (narrow) dg_str_putc(&e->out, ')');
}

static void int_limits(dg_dtype t, int64_t *lo, int64_t *hi) {
  switch (t) {
    case DG_I8: *lo = INT8_MIN, *hi = INT8_MAX; break;
    case DG_I32: *lo = INT32_MIN, *hi = INT32_MAX; break;
    default: *lo = INT64_MIN, *hi = INT64_MAX; break;
  }
}

static void cast(emitter *e, const dg_expr *x) {
  dg_dtype to = x->dtype, from = x->a->dtype;
  if (to == DG_BOOL) {
    dg_str_puts(&e->out, "(");
    expr(e, x->a);
    dg_str_puts(&e->out, " != 0)");
    return;
  }
  if (dg_dtype_is_float(to)) {
    if (is_f16_value(e, to) && from != DG_F16) {
      dg_str_printf(&e->out, "%s((float)", e->L->round_half);
      expr(e, x->a);
      dg_str_putc(&e->out, ')');
    } else {
      dg_str_printf(&e->out, "((%s)", value_type(e, to));
      expr(e, x->a);
      dg_str_putc(&e->out, ')');
    }
    return;
  }
  /* to an integer */
  if (dg_dtype_is_float(from)) {
    int64_t lo, hi;
    int_limits(to, &lo, &hi);
    dg_str_printf(&e->out, "((%s)%s((double)", value_type(e, to), e->L->float_to_int_fn);
    expr(e, x->a);
    dg_str_puts(&e->out, ", ");
    put_int(e, lo, DG_I64);
    dg_str_puts(&e->out, ", ");
    put_int(e, hi, DG_I64);
    dg_str_puts(&e->out, "))");
    return;
  }
  dg_str_printf(&e->out, "((%s)", value_type(e, to));
  expr(e, x->a);
  dg_str_putc(&e->out, ')');
}

static void call(emitter *e, const dg_expr *x) {
  if (!dg_dtype_is_float(x->dtype)) {
    fail(e, "math function %s of %s values", dg_math_name(x->fn), dg_dtype_name(x->dtype));
    return;
  }
  if (x->nargs != dg_math_arity(x->fn)) {
    fail(e, "math function %s takes %d arguments, given %d", dg_math_name(x->fn),
         dg_math_arity(x->fn), x->nargs);
    return;
  }
  bool round = false;
  const char *name;
  if (e->ref || x->dtype == DG_F64) {
    name = e->L->math_f64[x->fn];
  } else if (x->dtype == DG_F16 && e->L->math_f16[x->fn]) {
    name = e->L->math_f16[x->fn];
  } else {
    name = e->L->math_f32[x->fn];
    round = x->dtype == DG_F16;
  }
  if (round) dg_str_printf(&e->out, "%s(", e->L->round_half);
  dg_str_printf(&e->out, "%s(", name);
  for (int i = 0; i < x->nargs; i++) {
    if (i) dg_str_puts(&e->out, ", ");
    expr(e, x->args[i]);
  }
  dg_str_putc(&e->out, ')');
  if (round) dg_str_putc(&e->out, ')');
}

static void expr(emitter *e, const dg_expr *x) {
  if (e->failed) return;
  switch (x->kind) {
    case DG_EXPR_INT:
      if (dg_dtype_is_float(x->dtype)) put_float(e, (double)x->ival, x->dtype);
      else put_int(e, x->ival, x->dtype);
      return;
    case DG_EXPR_FLOAT:
      if (!dg_dtype_is_float(x->dtype)) {
        fail(e, "float constant of dtype %s", dg_dtype_name(x->dtype));
        return;
      }
      put_float(e, x->fval, x->dtype);
      return;
    case DG_EXPR_VAR: put_var(e, x->var); return;
    case DG_EXPR_LOAD: {
      if (e->load_hook && e->load_hook(e, x)) return;
      bool conv = is_f16_value(e, x->buf->dtype);
      if (conv) dg_str_printf(&e->out, "%s(", e->L->half_to_float);
      access(e, x->buf, x->args, x->nargs);
      if (conv) dg_str_putc(&e->out, ')');
      return;
    }
    case DG_EXPR_ADD:
    case DG_EXPR_SUB:
    case DG_EXPR_MUL:
    case DG_EXPR_DIV: arith(e, x); return;
    case DG_EXPR_FLOORDIV:
    case DG_EXPR_FLOORMOD:
      if (!dg_dtype_is_int(x->dtype)) {
        fail(e, "'%s' of %s values (integers only)", dg_expr_kind_name(x->kind),
             dg_dtype_name(x->dtype));
        return;
      }
      if (e->ranges && x->b->kind == DG_EXPR_INT && x->b->ival > 0 && x->dtype != DG_I8 &&
          ir_expr_bounds(x->a, e->ranges).lo >= 0) {
        /* non-negative by a positive constant: floor and truncation agree */
        dg_str_putc(&e->out, '(');
        expr(e, x->a);
        dg_str_puts(&e->out, x->kind == DG_EXPR_FLOORDIV ? " / " : " % ");
        expr(e, x->b);
        dg_str_putc(&e->out, ')');
        return;
      }
      helper2(e, x->kind == DG_EXPR_FLOORDIV ? e->L->floordiv_fn : e->L->floormod_fn, x);
      return;
    case DG_EXPR_MIN:
    case DG_EXPR_MAX:
      helper2(e, x->kind == DG_EXPR_MIN ? e->L->min_fn : e->L->max_fn, x);
      return;
    case DG_EXPR_EQ:
    case DG_EXPR_NE:
    case DG_EXPR_LT:
    case DG_EXPR_LE:
    case DG_EXPR_GT:
    case DG_EXPR_GE:
    case DG_EXPR_AND:
    case DG_EXPR_OR: binop(e, x); return;
    case DG_EXPR_NOT:
      dg_str_puts(&e->out, "(!");
      expr(e, x->a);
      dg_str_putc(&e->out, ')');
      return;
    case DG_EXPR_SELECT:
      dg_str_putc(&e->out, '(');
      expr(e, x->a);
      dg_str_puts(&e->out, " ? ");
      expr(e, x->b);
      dg_str_puts(&e->out, " : ");
      expr(e, x->c);
      dg_str_putc(&e->out, ')');
      return;
    case DG_EXPR_CAST: cast(e, x); return;
    case DG_EXPR_CALL: call(e, x); return;
    case DG_EXPR_COUNT: break;
  }
  fail(e, "unknown expression kind %d", (int)x->kind);
}

/* ---- statements ---------------------------------------------------------- */

static void stmt(emitter *e, const dg_stmt *s);

/* ---- a reference that walks memory in order -------------------------------- */

/* What of a block emit_block writes: all of it, or (for the interchanged
 * nest below) only its init or only its body. */
typedef enum { BLOCK_WHOLE, BLOCK_INIT, BLOCK_UPDATE } block_part;

static void emit_block(emitter *e, const dg_stmt *s, bool is_root, block_part part);

static bool stmt_uses_var(const dg_stmt *s, const dg_var *v) {
  if (!s) return false;
  switch (s->kind) {
    case DG_STMT_FOR: return s->loop_var == v || stmt_uses_var(s->body, v);
    case DG_STMT_SEQ:
      for (int i = 0; i < s->n; i++)
        if (stmt_uses_var(s->stmts[i], v)) return true;
      return false;
    case DG_STMT_BLOCK: return true; /* nested blocks: not judged */
    case DG_STMT_STORE:
      for (int i = 0; i < s->nidx; i++)
        if (ir_expr_uses_var(s->idx[i], v)) return true;
      return ir_expr_uses_var(s->value, v);
    case DG_STMT_IF:
      return ir_expr_uses_var(s->cond, v) || stmt_uses_var(s->then_s, v) ||
             stmt_uses_var(s->else_s, v);
  }
  return true;
}

static bool expr_has_load(const dg_expr *x) {
  if (!x) return false;
  if (x->kind == DG_EXPR_LOAD) return true;
  for (int i = 0; x->kind == DG_EXPR_CALL && i < x->nargs; i++)
    if (expr_has_load(x->args[i])) return true;
  return expr_has_load(x->a) || expr_has_load(x->b) || expr_has_load(x->c);
}

/* Whether every load of b in x has exactly variable v as index d. */
static bool loads_at(const dg_expr *x, const dg_buffer *b, const dg_var *v, int d) {
  if (!x) return true;
  if (x->kind == DG_EXPR_LOAD && x->buf == b &&
      !(d < x->nargs && x->args[d]->kind == DG_EXPR_VAR && x->args[d]->var == v))
    return false;
  if (x->kind == DG_EXPR_LOAD || x->kind == DG_EXPR_CALL) {
    for (int i = 0; i < x->nargs; i++)
      if (!loads_at(x->args[i], b, v, d)) return false;
  }
  return loads_at(x->a, b, v, d) && loads_at(x->b, b, v, d) && loads_at(x->c, b, v, d);
}

/* Whether every access to b under s, store or load, has exactly variable v
 * as index d. */
static bool accesses_at(const dg_stmt *s, const dg_buffer *b, const dg_var *v, int d) {
  if (!s) return true;
  switch (s->kind) {
    case DG_STMT_FOR: return accesses_at(s->body, b, v, d);
    case DG_STMT_SEQ:
      for (int i = 0; i < s->n; i++)
        if (!accesses_at(s->stmts[i], b, v, d)) return false;
      return true;
    case DG_STMT_BLOCK: return false; /* nested blocks: not judged */
    case DG_STMT_STORE:
      if (s->buf == b &&
          !(d < s->nidx && s->idx[d]->kind == DG_EXPR_VAR && s->idx[d]->var == v))
        return false;
      for (int i = 0; i < s->nidx; i++)
        if (!loads_at(s->idx[i], b, v, d)) return false;
      return loads_at(s->value, b, v, d);
    case DG_STMT_IF:
      return loads_at(s->cond, b, v, d) && accesses_at(s->then_s, b, v, d) &&
             accesses_at(s->else_s, b, v, d);
  }
  return false;
}

/* Whether block blk's iterations with distinct values of its iteration
 * variable v touch distinct elements of every buffer it writes: each store
 * under s (its init or body) has v as some index d at which every access
 * of the block to that buffer has v too. */
static bool stores_private(const dg_stmt *s, const dg_block *blk, const dg_var *v) {
  if (!s) return true;
  switch (s->kind) {
    case DG_STMT_FOR: return stores_private(s->body, blk, v);
    case DG_STMT_SEQ:
      for (int i = 0; i < s->n; i++)
        if (!stores_private(s->stmts[i], blk, v)) return false;
      return true;
    case DG_STMT_BLOCK: return false;
    case DG_STMT_STORE:
      for (int d = 0; d < s->nidx; d++)
        if (s->idx[d]->kind == DG_EXPR_VAR && s->idx[d]->var == v &&
            accesses_at(blk->init, s->buf, v, d) && accesses_at(blk->body, s->buf, v, d))
          return true;
      return false;
    case DG_STMT_IF: return stores_private(s->then_s, blk, v) && stores_private(s->else_s, blk, v);
  }
  return false;
}

/* The coefficient *c of v in x when x is affine in v (sums, differences,
 * products by constants); false when it is not. */
static bool affine_in(const dg_expr *x, const dg_var *v, int64_t *c) {
  if (!ir_expr_uses_var(x, v)) {
    *c = 0;
    return true;
  }
  int64_t a, b, k;
  switch (x->kind) {
    case DG_EXPR_VAR: *c = 1; return true;
    case DG_EXPR_ADD:
    case DG_EXPR_SUB:
      if (!affine_in(x->a, v, &a) || !affine_in(x->b, v, &b)) return false;
      return x->kind == DG_EXPR_ADD ? !__builtin_add_overflow(a, b, c)
                                    : !__builtin_sub_overflow(a, b, c);
    case DG_EXPR_MUL:
      if (ir_is_const_int(x->a, &k) && affine_in(x->b, v, &b))
        return !__builtin_mul_overflow(k, b, c);
      if (ir_is_const_int(x->b, &k) && affine_in(x->a, v, &a))
        return !__builtin_mul_overflow(k, a, c);
      return false;
    default: return false;
  }
}

/* Whether buf[idx...] moves by more than 8 elements (a cache line of
 * doubles), or not affinely, as v steps by one. */
static bool access_far(const dg_buffer *b, dg_expr *const *idx, int n, const dg_var *v) {
  int64_t stride = 1, step = 0;
  for (int d = n; d-- > 0;) {
    int64_t c, t;
    if (!affine_in(idx[d], v, &c) || __builtin_mul_overflow(c, stride, &t) ||
        __builtin_add_overflow(step, t, &step))
      return true;
    stride *= b->shape[d];
  }
  return step > 8 || step < -8;
}

static int far_loads(const dg_expr *x, const dg_var *v) {
  if (!x) return 0;
  int n = x->kind == DG_EXPR_LOAD && access_far(x->buf, x->args, x->nargs, v);
  if (x->kind == DG_EXPR_LOAD || x->kind == DG_EXPR_CALL)
    for (int i = 0; i < x->nargs; i++) n += far_loads(x->args[i], v);
  return n + far_loads(x->a, v) + far_loads(x->b, v) + far_loads(x->c, v);
}

/* How many accesses under s jump far as v steps (see access_far). */
static int far_accesses(const dg_stmt *s, const dg_var *v) {
  if (!s) return 0;
  int n = 0;
  switch (s->kind) {
    case DG_STMT_FOR: return far_accesses(s->body, v);
    case DG_STMT_SEQ:
      for (int i = 0; i < s->n; i++) n += far_accesses(s->stmts[i], v);
      return n;
    case DG_STMT_BLOCK: return 0;
    case DG_STMT_STORE:
      n = access_far(s->buf, s->idx, s->nidx, v);
      for (int i = 0; i < s->nidx; i++) n += far_loads(s->idx[i], v);
      return n + far_loads(s->value, v);
    case DG_STMT_IF:
      return far_loads(s->cond, v) + far_accesses(s->then_s, v) + far_accesses(s->else_s, v);
  }
  return 0;
}

/* The iteration variable of b of the given kind bound to exactly v, or NULL. */
static const dg_iter *iter_bound_to(const dg_block *b, const dg_var *v, dg_iter_kind kind) {
  for (int i = 0; i < b->n_iters; i++) {
    const dg_iter *it = &b->iters[i];
    if (it->kind == kind && it->binding->kind == DG_EXPR_VAR && it->binding->var == v) return it;
  }
  return NULL;
}

#define REFERENCE_MAX_NEST 64

/* The loop of the perfect loop nest starting at s that the reference runs
 * innermost instead, or NULL where the nest stays as it is. The nest must
 * be loops s_1 .. s_p, r_1 .. r_q down to one block with an init (no
 * predicate, no allocations), where
 *  - each r_j binds a reduce iteration variable, and every reduce iteration
 *    variable is bound to exactly some r_j: the init runs at the first
 *    iteration of the r loops, as it will before them;
 *  - s_p binds a spatial iteration variable v at which every store of the
 *    block, and every load of a buffer it stores, indexes the same
 *    dimension: distinct iterations of s_p touch distinct elements of what
 *    the block writes, so they may run in any order, and the r loops (which
 *    ascend as before) give each element its terms in the same order;
 *  - no spatial binding nor the init uses the r loops (the init is emitted
 *    outside them) and no binding loads;
 *  - p >= 2: the loops above s_p keep the nest parallel (a lone spatial
 *    loop over a reduction stays the parallel loop it is);
 *  - v does not walk memory farther than r_q does (see access_far): a row
 *    reduction over contiguous elements keeps its order.
 * Then s_p, r_1 .. r_q are emitted as
 *   for s_p: init;   for r_1 .. r_q: for s_p: body */
static const dg_stmt *reference_swap_loop(const emitter *e, const dg_stmt *s) {
  if (!e->fast || e->in_order) return NULL;
  const dg_stmt *loops[REFERENCE_MAX_NEST];
  int n = 0;
  const dg_stmt *t = s;
  for (; t && t->kind == DG_STMT_FOR; t = t->body) {
    if (n == REFERENCE_MAX_NEST) return NULL;
    loops[n++] = t;
  }
  if (!t || t->kind != DG_STMT_BLOCK) return NULL;
  const dg_block *b = t->block;
  if (!b->init || b->predicate || b->n_allocs) return NULL;
  int p = n;
  while (p > 0 && iter_bound_to(b, loops[p - 1]->loop_var, DG_ITER_REDUCE)) p--;
  if (p == n || p < 2) return NULL;
  const dg_stmt *sp = loops[p - 1];
  const dg_iter *vs = iter_bound_to(b, sp->loop_var, DG_ITER_SPATIAL);
  if (!vs) return NULL;
  for (int j = p - 1; j < n; j++)
    if (loops[j]->loop_kind != DG_LOOP_SERIAL && loops[j]->loop_kind != DG_LOOP_PARALLEL)
      return NULL;
  for (int i = 0; i < b->n_iters; i++) {
    const dg_iter *it = &b->iters[i];
    if (expr_has_load(it->binding)) return NULL;
    if (it->kind == DG_ITER_REDUCE) {
      bool bound = false;
      for (int j = p; j < n && !bound; j++)
        bound = it->binding->kind == DG_EXPR_VAR && it->binding->var == loops[j]->loop_var;
      if (!bound || stmt_uses_var(b->init, it->var)) return NULL;
    } else {
      for (int j = p; j < n; j++)
        if (ir_expr_uses_var(it->binding, loops[j]->loop_var)) return NULL;
    }
  }
  for (int j = p; j < n; j++)
    if (stmt_uses_var(b->init, loops[j]->loop_var)) return NULL;
  if (!stores_private(b->init, b, vs->var) || !stores_private(b->body, b, vs->var))
    return NULL;
  const dg_iter *vr = iter_bound_to(b, loops[n - 1]->loop_var, DG_ITER_REDUCE);
  if (far_accesses(b->body, vs->var) > far_accesses(b->body, vr->var)) return NULL;
  return sp;
}

/* ---- a parallel reference ------------------------------------------------ */

/* Whether every store under s writes, at some index, exactly iteration
 * variable v (so distinct values of v write distinct elements). */
static bool stores_indexed_by(const dg_stmt *s, const dg_var *v) {
  if (!s) return true;
  switch (s->kind) {
    case DG_STMT_FOR: return stores_indexed_by(s->body, v);
    case DG_STMT_SEQ:
      for (int i = 0; i < s->n; i++)
        if (!stores_indexed_by(s->stmts[i], v)) return false;
      return true;
    case DG_STMT_BLOCK: return false; /* nested blocks: not judged */
    case DG_STMT_STORE:
      for (int i = 0; i < s->nidx; i++)
        if (s->idx[i]->kind == DG_EXPR_VAR && s->idx[i]->var == v) return true;
      return false;
    case DG_STMT_IF: return stores_indexed_by(s->then_s, v) && stores_indexed_by(s->else_s, v);
  }
  return false;
}

/* The one block realize under a loop nest (through loops only), or NULL. */
static const dg_block *sole_block(const dg_stmt *s) {
  while (s && s->kind == DG_STMT_FOR) s = s->body;
  return s && s->kind == DG_STMT_BLOCK ? s->block : NULL;
}

/* How many of the loops starting at s, an outermost loop nest of the
 * reference, have independent iterations: perfectly nested loops down to
 * one block, each binding a spatial iterator of it that indexes every store
 * the block makes (so distinct iterations write distinct elements). They
 * may run in parallel, collapsed (an OpenMP pragma, in effect only where
 * the C compiler is given -fopenmp: see rt_cpu_compile's DRAGON_CFLAGS),
 * which is what makes the float64 reference of a large workload
 * affordable; a batch of 1 outermost is why more than one loop counts.
 * They stop above `swap`, the loop moved inside the reduction loops. */
static int reference_parallel_depth(const emitter *e, const dg_stmt *s, const dg_stmt *swap) {
  if (!e->fast || e->for_depth != 0) return 0;
  const dg_block *b = sole_block(s);
  if (!b) return 0;
  int depth = 0;
  for (const dg_stmt *t = s; t->kind == DG_STMT_FOR && t != swap && depth < 4; t = t->body) {
    if (t->loop_kind != DG_LOOP_SERIAL && t->loop_kind != DG_LOOP_PARALLEL) break;
    bool ok = false;
    for (int i = 0; i < b->n_iters && !ok; i++) {
      const dg_iter *it = &b->iters[i];
      ok = it->kind == DG_ITER_SPATIAL && it->binding->kind == DG_EXPR_VAR &&
           it->binding->var == t->loop_var && stores_indexed_by(b->init, it->var) &&
           stores_indexed_by(b->body, it->var);
    }
    if (!ok) break;
    depth++;
  }
  return depth;
}

/* Opens loop s (its header, or the binding of a hardware index) with `par`
 * loops from it collapsed into an OpenMP parallel loop (0: none); false
 * after a failure. */
static bool for_open(emitter *e, const dg_stmt *s, int par) {
  const char *idx = s->loop_kind == DG_LOOP_THREAD ? e->L->thread_index[s->tag] : NULL;
  if (s->extent <= 0 || s->extent > INT32_MAX) {
    fail(e, "loop %s has extent %" PRId64 " (must be in [1, 2^31))", s->loop_var->name,
         s->extent);
    return false;
  }
  if (par == 1) {
    put_indent(e);
    dg_str_puts(&e->out, "#pragma omp parallel for schedule(static)\n");
  } else if (par > 1) {
    put_indent(e);
    dg_str_printf(&e->out, "#pragma omp parallel for collapse(%d) schedule(static)\n", par);
  }
  put_indent(e);
  if (idx) {
    dg_str_printf(&e->out, "{  /* %s */\n", dg_thread_tag_name(s->tag));
    e->indent++;
    put_indent(e);
    dg_str_printf(&e->out, "const %s ", value_type(e, s->loop_var->dtype));
    put_var(e, s->loop_var);
    dg_str_printf(&e->out, " = %s;\n", idx);
  } else {
    const char *t = value_type(e, s->loop_var->dtype);
    dg_str_printf(&e->out, "for (%s ", t);
    put_var(e, s->loop_var);
    dg_str_puts(&e->out, " = 0; ");
    put_var(e, s->loop_var);
    dg_str_puts(&e->out, " < ");
    put_int(e, s->extent, s->loop_var->dtype == DG_I64 ? DG_I64 : DG_I32);
    dg_str_puts(&e->out, "; ");
    put_var(e, s->loop_var);
    dg_str_puts(&e->out, "++) {");
    if (s->loop_kind == DG_LOOP_THREAD)
      dg_str_printf(&e->out, "  /* %s */", dg_thread_tag_name(s->tag));
    else if (s->loop_kind != DG_LOOP_SERIAL)
      dg_str_printf(&e->out, "  /* %s */", dg_loop_kind_name(s->loop_kind));
    dg_str_putc(&e->out, '\n');
    e->indent++;
  }
  e->for_depth++;
  return true;
}

static void for_close(emitter *e) {
  e->for_depth--;
  e->indent--;
  put_indent(e);
  dg_str_puts(&e->out, "}\n");
}

/* Loop sp of reference_swap_loop, the reduction loops below it and their
 * block: sp with the init, then the reduction loops with sp innermost. */
static void emit_swapped(emitter *e, const dg_stmt *sp) {
  const dg_stmt *realize = sp->body;
  while (realize->kind == DG_STMT_FOR) realize = realize->body;
  if (!for_open(e, sp, 0)) return;
  emit_block(e, realize, false, BLOCK_INIT);
  for_close(e);
  int opened = 0;
  for (const dg_stmt *r = sp->body; r->kind == DG_STMT_FOR; r = r->body, opened++)
    if (!for_open(e, r, 0)) return;
  if (!for_open(e, sp, 0)) return;
  emit_block(e, realize, false, BLOCK_UPDATE);
  for_close(e);
  for (; opened > 0; opened--) for_close(e);
}

/* Loop s; `swap` (NULL: none) is the loop of its nest to emit with
 * emit_swapped, found at the outermost loop of the nest. */
static void emit_for(emitter *e, const dg_stmt *s, const dg_stmt *swap) {
  if (s == swap) {
    emit_swapped(e, s);
    return;
  }
  if (!for_open(e, s, reference_parallel_depth(e, s, swap))) return;
  if (swap && s->body->kind == DG_STMT_FOR) emit_for(e, s->body, swap);
  else stmt(e, s->body);
  for_close(e);
}

static bool alloc_on_heap(const emitter *e, const dg_buffer *b) {
  int64_t bytes = ir_buffer_numel(b) * (e->ref && dg_dtype_is_float(b->dtype)
                                            ? 8 : dg_dtype_bytes(b->dtype));
  return e->L->max_stack_bytes > 0 && bytes > e->L->max_stack_bytes;
}

static void emit_block(emitter *e, const dg_stmt *s, bool is_root, block_part part) {
  const dg_block *b = s->block;
  const dg_block *outer = e->block;
  e->block = b;
  size_t live0 = e->live.len;
  if (!is_root) {
    put_indent(e);
    dg_str_printf(&e->out, "{  /* block %s%s */\n", b->name,
                  part == BLOCK_INIT ? ", init" : part == BLOCK_UPDATE ? ", update" : "");
    e->indent++;
  }
  for (int i = 0; i < b->n_iters; i++) {
    const dg_iter *it = &b->iters[i];
    /* an init of its own runs where the reduce loops are not */
    if (part == BLOCK_INIT && it->kind == DG_ITER_REDUCE) continue;
    put_indent(e);
    dg_str_printf(&e->out, "const %s ", value_type(e, it->var->dtype));
    put_var(e, it->var);
    dg_str_puts(&e->out, " = ");
    expr(e, it->binding);
    dg_str_puts(&e->out, ";\n");
  }
  int n_heap = 0;
  for (int i = 0; i < b->n_allocs; i++) {
    const dg_buffer *a = b->allocs[i];
    int64_t n = ir_buffer_numel(a);
    if (n <= 0 || n > INT32_MAX) {
      fail(e, "buffer %s has %" PRId64 " elements", a->name, n);
      break;
    }
    const char *pre = e->L->scope_prefix[a->scope] ? e->L->scope_prefix[a->scope] : "";
    const char *t = storage_type(e, a->dtype);
    put_indent(e);
    if (alloc_on_heap(e, a)) {
      dg_str_printf(&e->out, "%s%s *", pre, t);
      put_buf(e, a);
      dg_str_printf(&e->out, " = (%s *)%s((size_t)%" PRId64 " * sizeof(%s));\n", t,
                    e->L->malloc_fn, n, t);
      n_heap++;
    } else {
      dg_str_printf(&e->out, "%s%s ", pre, t);
      put_buf(e, a);
      dg_str_printf(&e->out, "[%" PRId64 "];\n", n);
    }
    DG_VEC_PUSH(&e->live, a);
  }
  int opened = 0;
  if (n_heap) {
    put_indent(e);
    dg_str_puts(&e->out, "if (");
    bool first = true;
    for (int i = 0; i < b->n_allocs; i++)
      if (alloc_on_heap(e, b->allocs[i])) {
        if (!first) dg_str_puts(&e->out, " && ");
        first = false;
        put_buf(e, b->allocs[i]);
      }
    dg_str_puts(&e->out, ") {\n");
    e->indent++;
    opened++;
  }
  if (b->predicate) {
    put_indent(e);
    dg_str_puts(&e->out, "if (");
    expr(e, b->predicate);
    dg_str_puts(&e->out, ") {\n");
    e->indent++;
    opened++;
  }
  if (b->init && part != BLOCK_UPDATE) {
    int n_reduce = 0;
    for (int i = 0; i < b->n_iters; i++) n_reduce += b->iters[i].kind == DG_ITER_REDUCE;
    if (n_reduce && part == BLOCK_WHOLE) {
      put_indent(e);
      dg_str_puts(&e->out, "if (");
      bool first = true;
      for (int i = 0; i < b->n_iters; i++) {
        if (b->iters[i].kind != DG_ITER_REDUCE) continue;
        if (!first) dg_str_puts(&e->out, " && ");
        first = false;
        put_var(e, b->iters[i].var);
        dg_str_puts(&e->out, " == 0");
      }
      dg_str_puts(&e->out, ") {\n");
      e->indent++;
      stmt(e, b->init);
      e->indent--;
      put_indent(e);
      dg_str_puts(&e->out, "}\n");
    } else {
      stmt(e, b->init);
    }
  }
  if (part != BLOCK_INIT) stmt(e, b->body);
  for (; opened > 0; opened--) {
    e->indent--;
    put_indent(e);
    dg_str_puts(&e->out, "}\n");
  }
  for (int i = 0; i < b->n_allocs && n_heap; i++)
    if (alloc_on_heap(e, b->allocs[i])) {
      put_indent(e);
      dg_str_printf(&e->out, "%s(", e->L->free_fn);
      put_buf(e, b->allocs[i]);
      dg_str_puts(&e->out, ");\n");
    }
  if (!is_root) {
    e->indent--;
    put_indent(e);
    dg_str_puts(&e->out, "}\n");
  }
  e->live.len = live0;
  e->block = outer;
}

static void stmt(emitter *e, const dg_stmt *s) {
  if (e->failed || !s) return;
  switch (s->kind) {
    case DG_STMT_FOR: emit_for(e, s, reference_swap_loop(e, s)); return;
    case DG_STMT_SEQ:
      for (int i = 0; i < s->n; i++) stmt(e, s->stmts[i]);
      return;
    case DG_STMT_BLOCK: emit_block(e, s, false, BLOCK_WHOLE); return;
    case DG_STMT_STORE: {
      bool conv = is_f16_value(e, s->buf->dtype);
      put_indent(e);
      access(e, s->buf, s->idx, s->nidx);
      dg_str_puts(&e->out, " = ");
      if (conv) dg_str_printf(&e->out, "%s(", e->L->float_to_half);
      expr(e, s->value);
      if (conv) dg_str_putc(&e->out, ')');
      dg_str_puts(&e->out, ";\n");
      return;
    }
    case DG_STMT_IF:
      put_indent(e);
      dg_str_puts(&e->out, "if (");
      expr(e, s->cond);
      dg_str_puts(&e->out, ") {\n");
      e->indent++;
      stmt(e, s->then_s);
      e->indent--;
      put_indent(e);
      if (s->else_s) {
        dg_str_puts(&e->out, "} else {\n");
        e->indent++;
        stmt(e, s->else_s);
        e->indent--;
        put_indent(e);
      }
      dg_str_puts(&e->out, "}\n");
      return;
  }
  fail(e, "unknown statement kind %d", (int)s->kind);
}

/* ---- entry points -------------------------------------------------------- */

static bool written_in(const dg_stmt *s, const dg_buffer *b) {
  if (!s) return false;
  switch (s->kind) {
    case DG_STMT_FOR: return written_in(s->body, b);
    case DG_STMT_SEQ:
      for (int i = 0; i < s->n; i++)
        if (written_in(s->stmts[i], b)) return true;
      return false;
    case DG_STMT_BLOCK: return written_in(s->block->init, b) || written_in(s->block->body, b);
    case DG_STMT_STORE: return s->buf == b;
    case DG_STMT_IF: return written_in(s->then_s, b) || written_in(s->else_s, b);
  }
  return false;
}

static bool collect_names(dg_block *b, dg_stmt *s, void *ctx) {
  (void)s;
  emitter *e = ctx;
  for (int i = 0; i < b->n_allocs; i++) DG_VEC_PUSH(&e->buf_names, b->allocs[i]->name);
  return true;
}

bool codegen_param_written(const dg_func *f, int i) {
  DG_ASSERT(i >= 0 && i < f->n_params);
  return written_in(f->body, f->params[i]);
}

char *codegen_emit(const dg_func *f, const dg_lang *lang, const codegen_opts *o,
                   dg_status *st) {
  codegen_opts defaults = {0};
  if (!o) o = &defaults;
  if (o->fn_name && !is_ident(o->fn_name))
    return dg_fail(st, DG_ERR_INVALID, "codegen %s: '%s' is not a valid function name",
                   lang->name, o->fn_name),
           NULL;
  if (!f->body || f->body->kind != DG_STMT_BLOCK)
    return dg_fail(st, DG_ERR_INVALID, "codegen %s: kernel %s has no root block",
                   lang->name, f->name),
           NULL;
  emitter e = {.L = lang,
               .ref = o->reference,
               .in_order = o->reference_in_order,
               .fast = o->reference || o->fast_loops,
               .st = st};
  for (int i = 0; i < f->n_params; i++) DG_VEC_PUSH(&e.buf_names, f->params[i]->name);
  ir_visit_blocks(f->body, collect_names, &e);
  dg_str_init(&e.out);
  /* The kernel's own name may be `main` (as workloads are named) or no C
   * identifier at all; an explicit fn_name is used as given. */
  dg_str_printf(&e.out, "%svoid ", lang->kernel_prefix);
  if (o->fn_name) dg_str_puts(&e.out, o->fn_name);
  else if (name_usable(&e, f->name)) dg_str_puts(&e.out, f->name);
  else dg_str_printf(&e.out, "dg_%s", is_ident(f->name) ? f->name : "kernel");
  dg_str_puts(&e.out, "(void **args) {\n");
  e.indent = 1;
  for (int i = 0; i < f->n_params; i++) {
    const dg_buffer *b = f->params[i];
    const char *t = storage_type(&e, b->dtype);
    const char *c = codegen_param_written(f, i) ? "" : "const ";
    put_indent(&e);
    dg_str_printf(&e.out, "%s%s *%s ", c, t, lang->restrict_kw);
    put_buf(&e, b);
    dg_str_printf(&e.out, " = (%s%s *)args[%d];\n", c, t, i);
    DG_VEC_PUSH(&e.live, b);
  }
  emit_block(&e, f->body, true, BLOCK_WHOLE);
  dg_str_puts(&e.out, "}\n");
  DG_VEC_FREE(&e.live);
  DG_VEC_FREE(&e.buf_names);
  if (e.failed) {
    dg_str_free(&e.out);
    return NULL;
  }
  return dg_str_take(&e.out);
}

static bool same_params(const dg_func *a, const dg_func *b) {
  if (a->n_params != b->n_params) return false;
  for (int i = 0; i < a->n_params; i++) {
    const dg_buffer *x = a->params[i], *y = b->params[i];
    if (x->dtype != y->dtype || ir_buffer_numel(x) != ir_buffer_numel(y)) return false;
  }
  return true;
}

/* codegen_emit_source, the kernel with fast_loops where `fast`. */
static char *emit_unit(const dg_func *kernel, bool fast, const dg_func *reference, const dg_lang *lang,
                       dg_status *st) {
  DG_ASSERT(kernel || reference);
  if (kernel && reference && !same_params(kernel, reference))
    return dg_fail(st, DG_ERR_INVALID,
                   "codegen %s: kernel %s and its reference %s have different parameters",
                   lang->name, kernel->name, reference->name),
           NULL;
  char *k = NULL, *r = NULL;
  if (kernel) {
    codegen_opts ko = {.fast_loops = fast, .fn_name = CODEGEN_KERNEL_FN};
    if (!(k = codegen_emit(kernel, lang, &ko, st))) return NULL;
  }
  if (reference) {
    codegen_opts ro = {.reference = true, .fn_name = CODEGEN_REFERENCE_FN};
    if (!(r = codegen_emit(reference, lang, &ro, st))) {
      free(k);
      return NULL;
    }
  }
  dg_str out;
  dg_str_init(&out);
  dg_str_puts(&out, lang->preamble);
  if (k) {
    dg_str_putc(&out, '\n');
    dg_str_puts(&out, k);
  }
  if (r) {
    dg_str_putc(&out, '\n');
    dg_str_puts(&out, r);
  }
  free(k);
  free(r);
  return dg_str_take(&out);
}

char *codegen_emit_source(const dg_func *kernel, const dg_func *reference,
                          const dg_lang *lang, dg_status *st) {
  return emit_unit(kernel, false, reference, lang, st);
}

char *codegen_emit_baseline(const dg_func *f, bool with_reference, const dg_lang *lang,
                            dg_status *st) {
  return emit_unit(f, true, with_reference ? f : NULL, lang, st);
}

/* ---- the interface of emit_impl.h ------------------------------------------ */

void codegen_em_fail(cg_emitter *e, const char *fmt, ...) {
  if (e->failed) return;
  char msg[400];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  fail(e, "%s", msg);
}
void codegen_em_expr(cg_emitter *e, const dg_expr *x) { expr(e, x); }
void codegen_em_access(cg_emitter *e, const dg_buffer *b, dg_expr *const *idx, int n) {
  access(e, b, idx, n);
}
void codegen_em_var(cg_emitter *e, const dg_var *v) { put_var(e, v); }
void codegen_em_buf(cg_emitter *e, const dg_buffer *b) { put_buf(e, b); }
void codegen_em_int(cg_emitter *e, int64_t v, dg_dtype t) { put_int(e, v, t); }
void codegen_em_indent(cg_emitter *e) { put_indent(e); }
const char *codegen_em_storage_type(const cg_emitter *e, dg_dtype t) { return storage_type(e, t); }
const char *codegen_em_value_type(const cg_emitter *e, dg_dtype t) { return value_type(e, t); }
bool codegen_em_is_ident(const char *s) { return is_ident(s); }
bool codegen_em_name_usable(const cg_emitter *e, const char *s) { return name_usable(e, s); }
