/* trace_json.c: traces in TVM's JSON layout.
 *
 *   [[[kind, inputs, attrs, outputs], ...], [[inst_index, decision], ...]]
 *
 * Inputs: a handle by name ("b0", "l1", "v2": prefix by kind, number = one
 * serial counter over all handles in order of definition), None as "None",
 * a string constant with its quotes inside the JSON string ("\"SSSRRSRS\""),
 * numbers as numbers, arrays recursively. Attrs are written as they are
 * (strings plain, booleans true/false). Output is compact and canonical;
 * floats in the shortest form that reads back exactly. Reading is done with
 * jansson; writing by hand, so that the bytes are ours to fix.
 */
#include <jansson.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "sched/sched_impl.h"

/* ---- writing --------------------------------------------------------------- */

static const char rv_prefix[] = {'b', 'l', 'v'};

static void put_json_string(dg_str *o, const char *s, bool extra_quotes) {
  dg_str_putc(o, '"');
  if (extra_quotes) dg_str_puts(o, "\\\"");
  for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
    switch (*p) {
      case '"': dg_str_puts(o, "\\\""); break;
      case '\\': dg_str_puts(o, "\\\\"); break;
      case '\n': dg_str_puts(o, "\\n"); break;
      case '\t': dg_str_puts(o, "\\t"); break;
      case '\r': dg_str_puts(o, "\\r"); break;
      default:
        if (*p < 0x20) dg_str_printf(o, "\\u%04x", *p);
        else dg_str_putc(o, (char)*p);
    }
  }
  if (extra_quotes) dg_str_puts(o, "\\\"");
  dg_str_putc(o, '"');
}

static void put_float(dg_str *o, double f) {
  char buf[64];
  if (!isfinite(f)) { /* JSON has no inf/nan; TVM never writes them */
    dg_str_puts(o, f > 0 ? "1e999" : f < 0 ? "-1e999" : "0.0");
    return;
  }
  for (int prec = 1; prec <= 17; prec++) {
    snprintf(buf, sizeof buf, "%.*g", prec, f);
    if (strtod(buf, NULL) == f) break;
  }
  dg_str_puts(o, buf);
  if (!strpbrk(buf, ".eEn")) dg_str_puts(o, ".0");
}

/* kinds_of[rv] gives a handle's kind for naming. */
static void put_val(dg_str *o, const sched_val *v, bool is_input, const sched_rv_kind *kinds_of,
                    int n_rvs) {
  switch (v->kind) {
    case SV_NONE: dg_str_puts(o, is_input ? "\"None\"" : "null"); break;
    case SV_INT: dg_str_printf(o, "%lld", (long long)v->i); break;
    case SV_BOOL: dg_str_puts(o, v->i ? "true" : "false"); break;
    case SV_FLOAT: put_float(o, v->f); break;
    case SV_STR: put_json_string(o, v->s, is_input); break;
    case SV_RV: {
      char p = v->i >= 0 && v->i < n_rvs ? rv_prefix[kinds_of[v->i]] : 'v';
      dg_str_printf(o, "\"%c%lld\"", p, (long long)v->i);
      break;
    }
    case SV_ARRAY:
      dg_str_putc(o, '[');
      for (int i = 0; i < v->n; i++) {
        if (i) dg_str_putc(o, ',');
        put_val(o, &v->items[i], is_input, kinds_of, n_rvs);
      }
      dg_str_putc(o, ']');
      break;
  }
}

char *sched_trace_to_json(const sched_trace *t) {
  int n_rvs = t->n_rvs;
  sched_rv_kind *kinds_of = dg_calloc((size_t)(n_rvs + 1), sizeof(sched_rv_kind));
  for (int i = 0; i < t->n; i++)
    for (int k = 0; k < t->insts[i].n_outputs; k++) {
      int o = t->insts[i].outputs[k];
      if (o >= 0 && o < n_rvs) kinds_of[o] = t->insts[i].out_kinds[k];
    }
  dg_str o;
  dg_str_init(&o);
  dg_str_puts(&o, "[[");
  for (int i = 0; i < t->n; i++) {
    const sched_inst *in = &t->insts[i];
    if (i) dg_str_putc(&o, ',');
    dg_str_putc(&o, '[');
    put_json_string(&o, in->kind_name, false);
    dg_str_puts(&o, ",[");
    for (int k = 0; k < in->n_inputs; k++) {
      if (k) dg_str_putc(&o, ',');
      put_val(&o, &in->inputs[k], true, kinds_of, n_rvs);
    }
    dg_str_puts(&o, "],[");
    for (int k = 0; k < in->n_attrs; k++) {
      if (k) dg_str_putc(&o, ',');
      put_val(&o, &in->attrs[k], false, kinds_of, n_rvs);
    }
    dg_str_puts(&o, "],[");
    for (int k = 0; k < in->n_outputs; k++) {
      if (k) dg_str_putc(&o, ',');
      dg_str_printf(&o, "\"%c%d\"", rv_prefix[in->out_kinds[k]], in->outputs[k]);
    }
    dg_str_puts(&o, "]]");
  }
  dg_str_puts(&o, "],[");
  bool first = true;
  for (int i = 0; i < t->n; i++) {
    const sched_inst *in = &t->insts[i];
    if (!in->has_decision) continue;
    if (!first) dg_str_putc(&o, ',');
    first = false;
    dg_str_printf(&o, "[%d,", i);
    put_val(&o, &in->decision, false, kinds_of, n_rvs);
    dg_str_putc(&o, ']');
  }
  dg_str_puts(&o, "]]");
  free(kinds_of);
  return dg_str_take(&o);
}

/* ---- reading ----------------------------------------------------------------- */

typedef struct {
  sched_trace *t;
  /* name -> handle id */
  char **names;
  int *ids;
  int n, cap;
  dg_status *st;
  int inst;
  const char *kind;
} reader;

static int name_lookup(reader *r, const char *name) {
  for (int i = r->n; i-- > 0;)
    if (strcmp(r->names[i], name) == 0) return r->ids[i];
  return -1;
}

static bool rfail(reader *r, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static bool rfail(reader *r, const char *fmt, ...) {
  char msg[400];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  if (r->inst >= 0)
    return dg_fail(r->st, DG_ERR_PARSE, "trace JSON: instruction %d (%s): %s", r->inst,
                   r->kind ? r->kind : "?", msg);
  return dg_fail(r->st, DG_ERR_PARSE, "trace JSON: %s", msg);
}

static bool read_val(reader *r, json_t *j, bool is_input, sched_val *out, const char *where,
                     int depth) {
  memset(out, 0, sizeof *out);
  if (depth > 32) return rfail(r, "%s: nested too deeply", where);
  if (json_is_integer(j)) {
    out->kind = SV_INT;
    out->i = json_integer_value(j);
  } else if (json_is_real(j)) {
    out->kind = SV_FLOAT;
    out->f = json_real_value(j);
  } else if (json_is_boolean(j)) {
    out->kind = SV_BOOL;
    out->i = json_is_true(j);
  } else if (json_is_null(j)) {
    out->kind = SV_NONE;
  } else if (json_is_string(j)) {
    const char *s = json_string_value(j);
    size_t n = json_string_length(j);
    if (!is_input) {
      out->kind = SV_STR;
      out->s = dg_arena_strndup(r->t->arena, s, n);
    } else if (strcmp(s, "None") == 0) {
      out->kind = SV_NONE;
    } else if (n >= 2 && s[0] == '"' && s[n - 1] == '"') {
      out->kind = SV_STR;
      out->s = dg_arena_strndup(r->t->arena, s + 1, n - 2);
    } else {
      int id = name_lookup(r, s);
      if (id < 0) return rfail(r, "%s: '%s' is not a handle defined earlier", where, s);
      out->kind = SV_RV;
      out->i = id;
    }
  } else if (json_is_array(j)) {
    out->kind = SV_ARRAY;
    out->n = (int)json_array_size(j);
    out->items = DG_ANEWN(r->t->arena, sched_val, out->n ? out->n : 1);
    for (int i = 0; i < out->n; i++)
      if (!read_val(r, json_array_get(j, (size_t)i), is_input, &out->items[i], where, depth + 1))
        return false;
  } else {
    return rfail(r, "%s: objects are not supported here", where);
  }
  return true;
}

static sched_rv_kind kind_from_name(const char *name, sched_inst_kind k, bool *ok) {
  *ok = true;
  if (name[0] == 'b') return SCHED_RV_BLOCK;
  if (name[0] == 'l') return SCHED_RV_LOOP;
  if (name[0] == 'v') return SCHED_RV_EXPR;
  (void)k;
  *ok = false;
  return SCHED_RV_EXPR;
}

sched_trace *sched_trace_from_json(const char *text, dg_status *st) {
  dg_status_ok(st);
  json_error_t err;
  json_t *root = json_loads(text, JSON_DECODE_ANY | JSON_REJECT_DUPLICATES, &err);
  if (!root) {
    dg_fail(st, DG_ERR_PARSE, "trace JSON:%d:%d: %s", err.line, err.column, err.text);
    return NULL;
  }
  reader r = {.t = sched_trace_new(), .st = st, .inst = -1};
  bool ok = false;
  json_t *insts, *decs;
  if (!json_is_array(root) || json_array_size(root) != 2 ||
      !json_is_array(insts = json_array_get(root, 0)) ||
      !json_is_array(decs = json_array_get(root, 1))) {
    rfail(&r, "expected [instructions, decisions]");
    goto done;
  }
  for (size_t i = 0; i < json_array_size(insts); i++) {
    json_t *ji = json_array_get(insts, i);
    r.inst = (int)i;
    r.kind = NULL;
    if (json_is_array(ji) && json_is_string(json_array_get(ji, 0)))
      r.kind = json_string_value(json_array_get(ji, 0));
    json_t *jk, *jin, *jat, *jout;
    if (!json_is_array(ji) || json_array_size(ji) != 4 ||
        !json_is_string(jk = json_array_get(ji, 0)) ||
        !json_is_array(jin = json_array_get(ji, 1)) ||
        !json_is_array(jat = json_array_get(ji, 2)) ||
        !json_is_array(jout = json_array_get(ji, 3))) {
      rfail(&r, "expected [kind, inputs, attrs, outputs]");
      goto done;
    }
    sched_inst in;
    memset(&in, 0, sizeof in);
    in.kind_name = json_string_value(jk);
    r.kind = in.kind_name;
    if (!sched_inst_from_name(in.kind_name, &in.kind)) in.kind = SCHED_INST_UNKNOWN;
    in.n_inputs = (int)json_array_size(jin);
    in.inputs = DG_ANEWN(r.t->arena, sched_val, in.n_inputs ? in.n_inputs : 1);
    for (int k = 0; k < in.n_inputs; k++) {
      char where[32];
      snprintf(where, sizeof where, "input %d", k);
      if (!read_val(&r, json_array_get(jin, (size_t)k), true, &in.inputs[k], where, 0)) goto done;
    }
    in.n_attrs = (int)json_array_size(jat);
    in.attrs = DG_ANEWN(r.t->arena, sched_val, in.n_attrs ? in.n_attrs : 1);
    for (int k = 0; k < in.n_attrs; k++) {
      char where[32];
      snprintf(where, sizeof where, "attr %d", k);
      if (!read_val(&r, json_array_get(jat, (size_t)k), false, &in.attrs[k], where, 0)) goto done;
    }
    in.n_outputs = (int)json_array_size(jout);
    in.outputs = DG_ANEWN(r.t->arena, int, in.n_outputs ? in.n_outputs : 1);
    in.out_kinds = DG_ANEWN(r.t->arena, sched_rv_kind, in.n_outputs ? in.n_outputs : 1);
    for (int k = 0; k < in.n_outputs; k++) {
      json_t *jo = json_array_get(jout, (size_t)k);
      if (!json_is_string(jo)) {
        rfail(&r, "output %d: expected a handle name", k);
        goto done;
      }
      const char *name = json_string_value(jo);
      if (name_lookup(&r, name) >= 0) {
        rfail(&r, "output %d: handle '%s' is defined twice", k, name);
        goto done;
      }
      bool kok;
      sched_rv_kind kk = kind_from_name(name, in.kind, &kok);
      if (!kok) {
        rfail(&r, "output %d: handle '%s' must start with b, l or v", k, name);
        goto done;
      }
      if (r.n == r.cap) {
        r.cap = r.cap ? 2 * r.cap : 64;
        r.names = dg_realloc(r.names, sizeof(char *) * (size_t)r.cap);
        r.ids = dg_realloc(r.ids, sizeof(int) * (size_t)r.cap);
      }
      r.names[r.n] = dg_arena_strdup(r.t->arena, name);
      r.ids[r.n] = r.t->n_rvs;
      r.n++;
      in.outputs[k] = r.t->n_rvs++;
      in.out_kinds[k] = kk;
    }
    sched_trace_append(r.t, &in);
  }
  r.inst = -1;
  for (size_t i = 0; i < json_array_size(decs); i++) {
    json_t *jd = json_array_get(decs, i);
    json_t *jidx;
    if (!json_is_array(jd) || json_array_size(jd) != 2 ||
        !json_is_integer(jidx = json_array_get(jd, 0))) {
      rfail(&r, "decision %zu: expected [instruction_index, decision]", i);
      goto done;
    }
    json_int_t idx = json_integer_value(jidx);
    if (idx < 0 || idx >= r.t->n) {
      rfail(&r, "decision %zu: instruction index %lld out of range", i, (long long)idx);
      goto done;
    }
    sched_inst *in = &r.t->insts[idx];
    if (in->has_decision) {
      rfail(&r, "decision %zu: instruction %lld has two decisions", i, (long long)idx);
      goto done;
    }
    if (in->kind != SCHED_INST_UNKNOWN && !sched_inst_has_decision(in->kind)) {
      rfail(&r, "decision %zu: instruction %lld (%s) takes no decision", i, (long long)idx,
            in->kind_name);
      goto done;
    }
    char where[48];
    snprintf(where, sizeof where, "decision of instruction %lld", (long long)idx);
    if (!read_val(&r, json_array_get(jd, 1), false, &in->decision, where, 0)) goto done;
    in->has_decision = true;
  }
  ok = true;
done:
  json_decref(root);
  free(r.names);
  free(r.ids);
  if (!ok) {
    sched_trace_free(r.t);
    return NULL;
  }
  return r.t;
}
