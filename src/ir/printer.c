/* printer.c: the canonical kernel text of a kernel (docs/kernel-text.md).
 *
 * One IR, one text: the printer decides every choice the format leaves open
 * (loop chains folded into grid(...), header lines in a fixed order, minimum
 * parentheses, shortest round-tripping float literals) so that
 * print(parse(print(f))) == print(f) byte for byte. ir_print_stmt's indent
 * counts levels of 2 spaces.
 *
 * Assumes names are identifiers (the verifier's job); prints whatever it is
 * given without judging it, so an invalid kernel may print as a text the
 * parser rejects, but printing never crashes. Region upper bounds are
 * chosen through ir_text_range_extent so that they reparse to the same
 * extent whatever the simplifier does.
 */
#include "dragon/ir.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
  dg_str *out;
  dg_func *scratch; /* holds region bounds built while printing; lazily made */
} printer;

/* ---- structural equality (variables and buffers by pointer) -------------- */

static bool expr_same(const dg_expr *a, const dg_expr *b) {
  if (a == b) return true;
  if (!a || !b || a->kind != b->kind || a->dtype != b->dtype) return false;
  switch (a->kind) {
    case DG_EXPR_INT: return a->ival == b->ival;
    case DG_EXPR_FLOAT: return memcmp(&a->fval, &b->fval, sizeof a->fval) == 0;
    case DG_EXPR_VAR: return a->var == b->var;
    case DG_EXPR_LOAD:
    case DG_EXPR_CALL:
      if (a->buf != b->buf || a->nargs != b->nargs) return false;
      if (a->kind == DG_EXPR_CALL && a->fn != b->fn) return false;
      for (int i = 0; i < a->nargs; i++)
        if (!expr_same(a->args[i], b->args[i])) return false;
      return true;
    default:
      return expr_same(a->a, b->a) && expr_same(a->b, b->b) && expr_same(a->c, b->c);
  }
}

dg_expr *ir_text_range_extent(dg_func *f, dg_expr *lo, dg_expr *hi) {
  DG_ASSERT(lo->dtype == hi->dtype);
  if (hi->kind == DG_EXPR_ADD && expr_same(hi->a, lo)) return hi->b;
  return ir_simplify(f, ir_sub(f, hi, lo), NULL);
}

/* ---- literals ------------------------------------------------------------ */

static bool is_ident(const char *s) {
  if (!s || !(*s == '_' || (*s >= 'A' && *s <= 'Z') || (*s >= 'a' && *s <= 'z'))) return false;
  for (s++; *s; s++)
    if (!(*s == '_' || (*s >= 'A' && *s <= 'Z') || (*s >= 'a' && *s <= 'z') ||
          (*s >= '0' && *s <= '9')))
      return false;
  return true;
}

/* An annotation key printed bare when it is dot-separated identifiers. */
static bool is_dotted(const char *s) {
  const char *p = s;
  char part[256];
  for (;;) {
    const char *dot = strchr(p, '.');
    size_t n = dot ? (size_t)(dot - p) : strlen(p);
    if (n == 0 || n >= sizeof part) return false;
    memcpy(part, p, n);
    part[n] = 0;
    if (!is_ident(part)) return false;
    if (!dot) return true;
    p = dot + 1;
  }
}

/* Writes v as a literal of float dtype t without its suffix: the shortest
 * %g form that reads back to the same value (f16: its exact decimal value),
 * always with a '.' or an exponent. */
static void format_float(char *buf, size_t n, double v, dg_dtype t) {
  if (isnan(v)) {
    snprintf(buf, n, signbit(v) ? "-nan" : "nan");
    return;
  }
  if (isinf(v)) {
    snprintf(buf, n, v > 0 ? "inf" : "-inf");
    return;
  }
  if (t == DG_F32) {
    float x = (float)v;
    for (int prec = 1; prec <= 9; prec++) {
      snprintf(buf, n, "%.*g", prec, (double)x);
      if (strtof(buf, NULL) == x) break;
    }
  } else if (t == DG_F16) {
    snprintf(buf, n, "%.30g", v);
  } else {
    for (int prec = 1; prec <= 17; prec++) {
      snprintf(buf, n, "%.*g", prec, v);
      if (strtod(buf, NULL) == v) break;
    }
  }
  /* below 1e7, positional digits read better than an exponent */
  char *e = strchr(buf, 'e');
  if (e && e[1] == '+' && atoi(e + 2) < 7) {
    int digits = atoi(e + 2) + 1;
    snprintf(buf, n, "%.*g", digits, t == DG_F32 ? (double)(float)v : v);
  }
  if (!strpbrk(buf, ".e")) {
    size_t len = strlen(buf);
    if (len + 3 <= n) memcpy(buf + len, ".0", 3);
  }
}

static const char *float_suffix(dg_dtype t) {
  return t == DG_F16 ? "f16" : t == DG_F64 ? "f64" : "";
}

static void print_literal(dg_str *o, const dg_expr *e) {
  char buf[64];
  if (e->kind == DG_EXPR_INT && !dg_dtype_is_float(e->dtype)) {
    if (e->dtype == DG_BOOL) dg_str_puts(o, e->ival ? "true" : "false");
    else if (e->dtype == DG_I32) dg_str_printf(o, "%lld", (long long)e->ival);
    else dg_str_printf(o, "%lld%s", (long long)e->ival, dg_dtype_name(e->dtype));
    return;
  }
  double v = e->kind == DG_EXPR_INT ? (double)e->ival : e->fval;
  dg_dtype t = dg_dtype_is_float(e->dtype) ? e->dtype : DG_F64;
  format_float(buf, sizeof buf, v, t);
  dg_str_printf(o, "%s%s", buf, float_suffix(t));
}

static void print_string(dg_str *o, const char *s) {
  dg_str_putc(o, '"');
  for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
    switch (*p) {
      case '"': dg_str_puts(o, "\\\""); break;
      case '\\': dg_str_puts(o, "\\\\"); break;
      case '\n': dg_str_puts(o, "\\n"); break;
      case '\t': dg_str_puts(o, "\\t"); break;
      default:
        if (*p < 0x20 || *p == 0x7f) dg_str_printf(o, "\\x%02x", *p);
        else dg_str_putc(o, (char)*p);
    }
  }
  dg_str_putc(o, '"');
}

static void print_ann_value(dg_str *o, const dg_ann *a) {
  char buf[64];
  switch (a->kind) {
    case DG_ANN_INT: dg_str_printf(o, "%lld", (long long)a->i); break;
    case DG_ANN_FLOAT:
      format_float(buf, sizeof buf, a->f, DG_F64);
      dg_str_puts(o, buf);
      break;
    case DG_ANN_STR: print_string(o, a->s ? a->s : ""); break;
    case DG_ANN_INTS:
      dg_str_putc(o, '[');
      for (int i = 0; i < a->nints; i++)
        dg_str_printf(o, "%s%lld", i ? ", " : "", (long long)a->ints[i]);
      dg_str_putc(o, ']');
      break;
  }
}

static void print_ann(dg_str *o, const dg_ann *a) {
  if (is_dotted(a->key)) dg_str_puts(o, a->key);
  else print_string(o, a->key);
  dg_str_puts(o, " = ");
  print_ann_value(o, a);
}

/* ---- expressions --------------------------------------------------------- */

/* Precedence levels, low to high; atoms (and negative literals) bind
 * tightest. */
enum { PREC_OR = 1, PREC_AND, PREC_NOT, PREC_CMP, PREC_ADD, PREC_MUL, PREC_ATOM };

static int prec_of(const dg_expr *e) {
  switch (e->kind) {
    case DG_EXPR_OR: return PREC_OR;
    case DG_EXPR_AND: return PREC_AND;
    case DG_EXPR_NOT: return PREC_NOT;
    case DG_EXPR_EQ: case DG_EXPR_NE: case DG_EXPR_LT:
    case DG_EXPR_LE: case DG_EXPR_GT: case DG_EXPR_GE: return PREC_CMP;
    case DG_EXPR_ADD: case DG_EXPR_SUB: return PREC_ADD;
    case DG_EXPR_MUL: case DG_EXPR_DIV: case DG_EXPR_FLOORDIV:
    case DG_EXPR_FLOORMOD: return PREC_MUL;
    default: return PREC_ATOM;
  }
}

static void print_expr(dg_str *o, const dg_expr *e, int min_prec);

static void print_args(dg_str *o, dg_expr *const *args, int n) {
  for (int i = 0; i < n; i++) {
    if (i) dg_str_puts(o, ", ");
    print_expr(o, args[i], 0);
  }
}

static void print_expr(dg_str *o, const dg_expr *e, int min_prec) {
  if (!e) {
    dg_str_puts(o, "<null>");
    return;
  }
  int prec = prec_of(e);
  bool paren = prec < min_prec;
  if (paren) dg_str_putc(o, '(');
  switch (e->kind) {
    case DG_EXPR_INT:
    case DG_EXPR_FLOAT: print_literal(o, e); break;
    case DG_EXPR_VAR: dg_str_puts(o, e->var ? e->var->name : "<null>"); break;
    case DG_EXPR_LOAD:
      dg_str_puts(o, e->buf ? e->buf->name : "<null>");
      dg_str_putc(o, '[');
      print_args(o, e->args, e->nargs);
      dg_str_putc(o, ']');
      break;
    case DG_EXPR_EQ: case DG_EXPR_NE: case DG_EXPR_LT:
    case DG_EXPR_LE: case DG_EXPR_GT: case DG_EXPR_GE:
      print_expr(o, e->a, PREC_ADD);
      dg_str_printf(o, " %s ", dg_expr_kind_name(e->kind));
      print_expr(o, e->b, PREC_ADD);
      break;
    case DG_EXPR_ADD: case DG_EXPR_SUB: case DG_EXPR_MUL: case DG_EXPR_DIV:
    case DG_EXPR_FLOORDIV: case DG_EXPR_FLOORMOD: case DG_EXPR_AND: case DG_EXPR_OR:
      print_expr(o, e->a, prec);
      dg_str_printf(o, " %s ", dg_expr_kind_name(e->kind));
      print_expr(o, e->b, prec + 1);
      break;
    case DG_EXPR_NOT:
      dg_str_putc(o, '!');
      print_expr(o, e->a, PREC_NOT);
      break;
    case DG_EXPR_MIN:
    case DG_EXPR_MAX:
      dg_str_puts(o, e->kind == DG_EXPR_MIN ? "min(" : "max(");
      print_expr(o, e->a, 0);
      dg_str_puts(o, ", ");
      print_expr(o, e->b, 0);
      dg_str_putc(o, ')');
      break;
    case DG_EXPR_SELECT:
      dg_str_puts(o, "select(");
      print_expr(o, e->a, 0);
      dg_str_puts(o, ", ");
      print_expr(o, e->b, 0);
      dg_str_puts(o, ", ");
      print_expr(o, e->c, 0);
      dg_str_putc(o, ')');
      break;
    case DG_EXPR_CAST:
      dg_str_printf(o, "%s(", dg_dtype_name(e->dtype));
      print_expr(o, e->a, 0);
      dg_str_putc(o, ')');
      break;
    case DG_EXPR_CALL:
      dg_str_printf(o, "%s(", dg_math_name(e->fn));
      print_args(o, e->args, e->nargs);
      dg_str_putc(o, ')');
      break;
    case DG_EXPR_COUNT: break;
  }
  if (paren) dg_str_putc(o, ')');
}

void ir_print_expr(dg_str *out, const dg_expr *e) { print_expr(out, e, 0); }

/* ---- statements ---------------------------------------------------------- */

static void indent(printer *p, int level) { dg_str_indent(p->out, 2 * level); }

static void print_shape(dg_str *o, const dg_buffer *b) {
  dg_str_printf(o, "%s: %s[", b->name, dg_dtype_name(b->dtype));
  for (int i = 0; i < b->ndim; i++) dg_str_printf(o, "%s%lld", i ? ", " : "", (long long)b->shape[i]);
  dg_str_putc(o, ']');
  if (b->scope != DG_SCOPE_GLOBAL) dg_str_printf(o, " %s", dg_scope_name(b->scope));
}

/* The upper bound printed for [min, min + ext): simplified when that reads
 * back to the same extent, else the plain sum (which always does). */
static const dg_expr *range_hi(printer *p, const dg_expr *min, const dg_expr *ext) {
  if (!p->scratch) p->scratch = ir_func_new("print");
  dg_func *f = p->scratch;
  dg_expr *sum = DG_ANEW(f->arena, dg_expr);
  sum->kind = DG_EXPR_ADD;
  sum->dtype = min->dtype;
  sum->a = (dg_expr *)min;
  sum->b = (dg_expr *)ext;
  if (min->dtype != ext->dtype || !dg_dtype_is_int(min->dtype)) return sum;
  dg_expr *hi = ir_simplify(f, sum, NULL);
  if (hi->dtype != min->dtype) return sum;
  if (expr_same(ir_text_range_extent(f, (dg_expr *)min, hi), ext)) return hi;
  return sum;
}

static void print_region(printer *p, const dg_region *r) {
  dg_str *o = p->out;
  dg_str_puts(o, r->buf ? r->buf->name : "<null>");
  dg_str_putc(o, '[');
  int n = r->buf ? r->buf->ndim : 0;
  for (int i = 0; i < n; i++) {
    if (i) dg_str_puts(o, ", ");
    const dg_expr *mn = r->min[i], *ext = r->ext[i];
    print_expr(o, mn, 0);
    if (ext && !(ext->kind == DG_EXPR_INT && ext->dtype == DG_I32 && ext->ival == 1)) {
      dg_str_putc(o, ':');
      print_expr(o, mn ? range_hi(p, mn, ext) : ext, 0);
    }
  }
  dg_str_putc(o, ']');
}

static void print_regions(printer *p, const char *what, const dg_region *r, int n, int level) {
  if (n == 0) return;
  indent(p, level);
  dg_str_printf(p->out, "%s ", what);
  for (int i = 0; i < n; i++) {
    if (i) dg_str_puts(p->out, ", ");
    print_region(p, &r[i]);
  }
  dg_str_putc(p->out, '\n');
}

static void print_stmt(printer *p, const dg_stmt *s, int level);

static bool is_plain_loop(const dg_stmt *s) {
  return s && s->kind == DG_STMT_FOR && s->loop_kind == DG_LOOP_SERIAL && s->anns.n == 0;
}

static void print_for(printer *p, const dg_stmt *s, int level) {
  dg_str *o = p->out;
  indent(p, level);
  const dg_stmt *last = s;
  if (is_plain_loop(s) && is_plain_loop(s->body)) {
    /* a chain of plain serial loops, each the whole body of the last */
    int n = 1;
    while (is_plain_loop(last->body)) last = last->body, n++;
    dg_str_puts(o, "for ");
    const dg_stmt *l = s;
    for (int i = 0; i < n; i++, l = l->body) dg_str_printf(o, "%s%s", i ? ", " : "", l->loop_var->name);
    dg_str_puts(o, " in grid(");
    l = s;
    for (int i = 0; i < n; i++, l = l->body) dg_str_printf(o, "%s%lld", i ? ", " : "", (long long)l->extent);
    dg_str_puts(o, "):\n");
  } else {
    dg_str_printf(o, "for %s in %lld", s->loop_var ? s->loop_var->name : "<null>",
                  (long long)s->extent);
    switch (s->loop_kind) {
      case DG_LOOP_SERIAL: break;
      case DG_LOOP_THREAD: dg_str_printf(o, " bind(%s)", dg_thread_tag_name(s->tag)); break;
      default: dg_str_printf(o, " %s", dg_loop_kind_name(s->loop_kind)); break;
    }
    if (s->anns.n) {
      dg_str_puts(o, " {");
      for (int i = 0; i < s->anns.n; i++) {
        if (i) dg_str_puts(o, ", ");
        print_ann(o, &s->anns.items[i]);
      }
      dg_str_putc(o, '}');
    }
    dg_str_puts(o, ":\n");
  }
  print_stmt(p, last->body, level + 1);
}

static void print_block(printer *p, const dg_block *b, int level) {
  dg_str *o = p->out;
  indent(p, level);
  dg_str_printf(o, "block %s", b->name);
  if (b->n_iters) {
    dg_str_putc(o, '(');
    for (int i = 0; i < b->n_iters; i++) {
      const dg_iter *it = &b->iters[i];
      dg_str_printf(o, "%s%s: %c(%lld) = ", i ? ", " : "", it->var ? it->var->name : "<null>",
                    it->kind == DG_ITER_REDUCE ? 'R' : 'S', (long long)it->extent);
      print_expr(o, it->binding, 0);
    }
    dg_str_putc(o, ')');
  }
  dg_str_puts(o, ":\n");
  print_regions(p, "reads", b->reads, b->n_reads, level + 1);
  print_regions(p, "writes", b->writes, b->n_writes, level + 1);
  if (b->predicate) {
    indent(p, level + 1);
    dg_str_puts(o, "where ");
    print_expr(o, b->predicate, 0);
    dg_str_putc(o, '\n');
  }
  for (int i = 0; i < b->n_allocs; i++) {
    indent(p, level + 1);
    dg_str_puts(o, "alloc ");
    print_shape(o, b->allocs[i]);
    dg_str_putc(o, '\n');
  }
  for (int i = 0; i < b->anns.n; i++) {
    indent(p, level + 1);
    dg_str_puts(o, "attr ");
    print_ann(o, &b->anns.items[i]);
    dg_str_putc(o, '\n');
  }
  if (b->init) {
    indent(p, level + 1);
    dg_str_puts(o, "init:\n");
    print_stmt(p, b->init, level + 2);
  }
  print_stmt(p, b->body, level + 1);
}

static void print_stmt(printer *p, const dg_stmt *s, int level) {
  if (!s) return;
  dg_str *o = p->out;
  switch (s->kind) {
    case DG_STMT_FOR: print_for(p, s, level); break;
    case DG_STMT_SEQ:
      for (int i = 0; i < s->n; i++) print_stmt(p, s->stmts[i], level);
      break;
    case DG_STMT_BLOCK: print_block(p, s->block, level); break;
    case DG_STMT_STORE:
      indent(p, level);
      dg_str_printf(o, "%s[", s->buf ? s->buf->name : "<null>");
      print_args(o, s->idx, s->nidx);
      dg_str_puts(o, "] = ");
      print_expr(o, s->value, 0);
      dg_str_putc(o, '\n');
      break;
    case DG_STMT_IF:
      indent(p, level);
      dg_str_puts(o, "if ");
      print_expr(o, s->cond, 0);
      dg_str_puts(o, ":\n");
      print_stmt(p, s->then_s, level + 1);
      if (s->else_s) {
        indent(p, level);
        dg_str_puts(o, "else:\n");
        print_stmt(p, s->else_s, level + 1);
      }
      break;
  }
}

void ir_print_stmt(dg_str *out, const dg_stmt *s, int indent_levels) {
  printer p = {out, NULL};
  print_stmt(&p, s, indent_levels);
  ir_func_free(p.scratch);
}

char *ir_print(const dg_func *f) {
  dg_str o;
  dg_str_init(&o);
  dg_str_printf(&o, "kernel %s(", f->name);
  for (int i = 0; i < f->n_params; i++) {
    if (i) dg_str_puts(&o, ", ");
    print_shape(&o, f->params[i]);
  }
  dg_str_puts(&o, "):\n");
  ir_print_stmt(&o, f->body, 1);
  return dg_str_take(&o);
}
