/* print.c: the canonical text of a TSEL graph. One spelling per graph:
 * single spaces, no trailing spaces, keywords in the order the parser met
 * them (lift emits the table's order), floats in the shortest form that
 * reads back exactly (always with '.' or 'e'), strings with C escapes for
 * '"', '\\' and control bytes. The printer writes what the tree holds;
 * choosing defaults and folds is lift's job. */
#include <math.h>
#include <string.h>

#include "tsel/tsel_impl.h"

void tsel_print_float(dg_str *o, double f) {
  if (isnan(f)) {
    dg_str_puts(o, "nan");
    return;
  }
  if (isinf(f)) {
    dg_str_puts(o, f > 0 ? "inf" : "-inf");
    return;
  }
  char buf[64];
  for (int prec = 1; prec <= 17; prec++) {
    snprintf(buf, sizeof buf, "%.*g", prec, f);
    if (strtod(buf, NULL) == f) break;
  }
  dg_str_puts(o, buf);
  if (!strpbrk(buf, ".e")) dg_str_puts(o, ".0");
}

static void print_str(dg_str *o, const char *s) {
  dg_str_putc(o, '"');
  for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
    switch (*p) {
      case '"': dg_str_puts(o, "\\\""); break;
      case '\\': dg_str_puts(o, "\\\\"); break;
      case '\n': dg_str_puts(o, "\\n"); break;
      case '\t': dg_str_puts(o, "\\t"); break;
      case '\r': dg_str_puts(o, "\\r"); break;
      default:
        if (*p < 0x20 || *p == 0x7f) dg_str_printf(o, "\\x%02x", *p);
        else dg_str_putc(o, (char)*p);
    }
  }
  dg_str_putc(o, '"');
}

void tsel_print_val(dg_str *o, const tsel_val *v) {
  switch (v->kind) {
    case TV_NONE: dg_str_putc(o, '_'); break;
    case TV_INT: dg_str_printf(o, "%lld", (long long)v->i); break;
    case TV_FLOAT: tsel_print_float(o, v->f); break;
    case TV_BOOL: dg_str_puts(o, v->i ? "true" : "false"); break;
    case TV_STR: print_str(o, v->s); break;
    case TV_WORD: dg_str_puts(o, v->s); break;
    case TV_REF:
      if (v->sub < 0) dg_str_printf(o, "t%lld", (long long)v->i);
      else dg_str_printf(o, "t%lld.%d", (long long)v->i, v->sub);
      break;
    case TV_COUNT: dg_str_printf(o, "x%lld", (long long)v->i); break;
    case TV_LIST:
      dg_str_putc(o, '[');
      for (int i = 0; i < v->n; i++) {
        if (i) dg_str_putc(o, ' ');
        tsel_print_val(o, &v->items[i]);
      }
      dg_str_putc(o, ']');
      break;
  }
}

char *tsel_print(const tsel_graph *g) {
  dg_str o;
  dg_str_init(&o);
  dg_str_printf(&o, "tsel 1 kernel %s\n", g->kernel);
  for (int i = 0; i < g->n_lines; i++) {
    const tsel_line *l = &g->lines[i];
    switch (l->kind) {
      case TL_EDIT: {
        const tsel_edit *e = &g->edits[l->edit];
        dg_str_printf(&o, "t%d %s", l->edit + 1, tsel_ops[e->op].name);
        for (int k = 0; k < e->n_args; k++) {
          dg_str_putc(&o, ' ');
          tsel_print_val(&o, &e->args[k]);
        }
        for (int k = 0; k < e->n_kws; k++) {
          dg_str_printf(&o, " %s=", e->kws[k].key);
          tsel_print_val(&o, &e->kws[k].val);
        }
        break;
      }
      case TL_WHY:
        dg_str_puts(&o, "why");
        for (int k = 0; k < l->n_refs; k++) dg_str_printf(&o, " t%d", l->refs[k]);
        dg_str_printf(&o, ": %s", l->text);
        break;
      case TL_EXPECT: dg_str_printf(&o, "expect p%d: %s", l->num, l->text); break;
      case TL_COMMENT: dg_str_printf(&o, "#%s", l->text); break;
    }
    dg_str_putc(&o, '\n');
  }
  return dg_str_take(&o);
}
