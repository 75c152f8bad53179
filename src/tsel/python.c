/* python.c: a trace as TVM's Trace.as_python prints it, for comparing the
 * size of TSEL with the form people read today:
 *   l10, l11 = sch.split(loop=l1, factors=[v5, v6], preserve_unit_iters=True)
 * Handle names are b/l/v plus the serial id, as in the trace JSON;
 * flags print as True/False; decisions are passed as decision=...;
 * instruction kinds this build does not know print as snake_case methods
 * with positional inputs and attrs. Only the byte count matters to the
 * caller, but the text follows TVM's spelling so the count is honest. */
#include <ctype.h>
#include <math.h>
#include <string.h>

#include "tsel/tsel_impl.h"

typedef enum { PY_PLAIN, PY_SPLIT, PY_STAR, PY_CACHE, PY_REINDEX } py_mode;

typedef struct {
  sched_inst_kind kind;
  const char *method;
  const char *inputs; /* comma-separated parameter names */
  const char *attrs;  /* names; a leading '?' marks a flag (True/False) */
  py_mode mode;
} py_form;

static const py_form forms[] = {
    {SCHED_INST_GET_BLOCK, "get_block", "", "name,func_name", PY_PLAIN},
    {SCHED_INST_GET_LOOPS, "get_loops", "block", "", PY_PLAIN},
    {SCHED_INST_GET_CHILD_BLOCKS, "get_child_blocks", "block_or_loop", "", PY_PLAIN},
    {SCHED_INST_GET_PRODUCERS, "get_producers", "block", "", PY_PLAIN},
    {SCHED_INST_GET_CONSUMERS, "get_consumers", "block", "", PY_PLAIN},
    {SCHED_INST_SPLIT, "split", "loop", "?preserve_unit_iters,?disable_predication", PY_SPLIT},
    {SCHED_INST_FUSE, "fuse", "", "?preserve_unit_iters", PY_STAR},
    {SCHED_INST_REORDER, "reorder", "", "", PY_STAR},
    {SCHED_INST_ADD_UNIT_LOOP, "add_unit_loop", "block_or_loop", "", PY_PLAIN},
    {SCHED_INST_PARALLEL, "parallel", "loop", "", PY_PLAIN},
    {SCHED_INST_VECTORIZE, "vectorize", "loop", "", PY_PLAIN},
    {SCHED_INST_UNROLL, "unroll", "loop", "", PY_PLAIN},
    {SCHED_INST_BIND, "bind", "loop", "thread_axis", PY_PLAIN},
    {SCHED_INST_CACHE_READ, "cache_read", "block", "read_buffer_index,storage_scope", PY_CACHE},
    {SCHED_INST_CACHE_WRITE, "cache_write", "block", "write_buffer_index,storage_scope", PY_CACHE},
    {SCHED_INST_REINDEX, "reindex", "block", "", PY_REINDEX},
    {SCHED_INST_SET_SCOPE, "set_scope", "block", "buffer_index,storage_scope", PY_PLAIN},
    {SCHED_INST_STORAGE_ALIGN, "storage_align", "block", "buffer_index,axis,factor,offset", PY_PLAIN},
    {SCHED_INST_COMPUTE_AT, "compute_at", "block,loop", "?preserve_unit_loops,index", PY_PLAIN},
    {SCHED_INST_REVERSE_COMPUTE_AT, "reverse_compute_at", "block,loop", "?preserve_unit_loops,index", PY_PLAIN},
    {SCHED_INST_COMPUTE_INLINE, "compute_inline", "block", "", PY_PLAIN},
    {SCHED_INST_REVERSE_COMPUTE_INLINE, "reverse_compute_inline", "block", "", PY_PLAIN},
    {SCHED_INST_DECOMPOSE_REDUCTION, "decompose_reduction", "block,loop", "", PY_PLAIN},
    {SCHED_INST_RFACTOR, "rfactor", "loop", "factor_axis", PY_PLAIN},
    {SCHED_INST_BLOCKIZE, "blockize", "target", "?preserve_unit_iters", PY_PLAIN},
    {SCHED_INST_TENSORIZE, "tensorize", "block_or_loop", "tensor_intrin,?preserve_unit_iters", PY_PLAIN},
    {SCHED_INST_ANNOTATE, "annotate", "block_or_loop,ann_val", "ann_key", PY_PLAIN},
    {SCHED_INST_UNANNOTATE, "unannotate", "block_or_loop", "ann_key", PY_PLAIN},
    {SCHED_INST_SAMPLE_PERFECT_TILE, "sample_perfect_tile", "loop", "n,max_innermost_factor", PY_PLAIN},
    {SCHED_INST_SAMPLE_CATEGORICAL, "sample_categorical", "", "candidates,probs", PY_PLAIN},
    {SCHED_INST_SAMPLE_COMPUTE_LOCATION, "sample_compute_location", "block", "", PY_PLAIN},
    {SCHED_INST_ENTER_POSTPROC, "enter_postproc", "", "", PY_PLAIN},
};

static void py_val(dg_str *o, const sched_val *v, const char *kinds, int n_rvs, bool flag) {
  switch (v->kind) {
    case SV_NONE: dg_str_puts(o, "None"); break;
    case SV_INT:
    case SV_BOOL:
      if (flag || v->kind == SV_BOOL) dg_str_puts(o, v->i ? "True" : "False");
      else dg_str_printf(o, "%lld", (long long)v->i);
      break;
    case SV_FLOAT:
      if (isfinite(v->f)) tsel_print_float(o, v->f);
      else dg_str_puts(o, isnan(v->f) ? "float(\"nan\")" : v->f > 0 ? "float(\"inf\")" : "-float(\"inf\")");
      break;
    case SV_STR:
      dg_str_putc(o, '"');
      for (const char *p = v->s; *p; p++) {
        if (*p == '"' || *p == '\\') dg_str_putc(o, '\\');
        dg_str_putc(o, *p);
      }
      dg_str_putc(o, '"');
      break;
    case SV_RV: dg_str_printf(o, "%c%lld", v->i >= 0 && v->i < n_rvs ? kinds[v->i] : 'v', (long long)v->i); break;
    case SV_ARRAY:
      dg_str_putc(o, '[');
      for (int i = 0; i < v->n; i++) {
        if (i) dg_str_puts(o, ", ");
        py_val(o, &v->items[i], kinds, n_rvs, false);
      }
      dg_str_putc(o, ']');
      break;
  }
}

/* The k-th comma-separated name of a list; *flag if marked '?'. */
static bool nth_name(const char *list, int k, char *out, size_t n, bool *flag) {
  const char *p = list;
  for (int i = 0; i < k; i++) {
    p = strchr(p, ',');
    if (!p) return false;
    p++;
  }
  if (!*p) return false;
  *flag = *p == '?';
  if (*flag) p++;
  size_t len = strcspn(p, ",");
  snprintf(out, n, "%.*s", (int)(len < n ? len : n - 1), p);
  return true;
}

char *tsel_trace_to_python(const sched_trace *t) {
  char *kinds = dg_calloc((size_t)t->n_rvs + 1, 1);
  for (int i = 0; i < t->n; i++)
    for (int k = 0; k < t->insts[i].n_outputs; k++) {
      int r = t->insts[i].outputs[k];
      if (r >= 0 && r < t->n_rvs) kinds[r] = "blv"[t->insts[i].out_kinds[k]];
    }
  dg_str o;
  dg_str_init(&o);
  for (int i = 0; i < t->n; i++) {
    const sched_inst *in = &t->insts[i];
    const py_form *f = NULL;
    for (size_t k = 0; k < DG_ARRAY_LEN(forms); k++)
      if (forms[k].kind == in->kind) f = &forms[k];
    for (int k = 0; k < in->n_outputs; k++)
      dg_str_printf(&o, "%s%c%d", k ? ", " : "", "blv"[in->out_kinds[k]], in->outputs[k]);
    if (in->n_outputs) dg_str_puts(&o, " = ");
    bool first = true;
#define SEP() (first ? (first = false, "") : ", ")
    if (!f) {
      dg_str_puts(&o, "sch.");
      for (const char *p = in->kind_name; *p; p++) {
        if (isupper((unsigned char)*p) && p != in->kind_name) dg_str_putc(&o, '_');
        dg_str_putc(&o, (char)tolower((unsigned char)*p));
      }
      dg_str_putc(&o, '(');
      for (int k = 0; k < in->n_inputs; k++) {
        dg_str_puts(&o, SEP());
        py_val(&o, &in->inputs[k], kinds, t->n_rvs, false);
      }
      for (int k = 0; k < in->n_attrs; k++) {
        dg_str_puts(&o, SEP());
        py_val(&o, &in->attrs[k], kinds, t->n_rvs, false);
      }
    } else {
      dg_str_printf(&o, "sch.%s(", f->method);
      char name[64];
      bool flag;
      int nin = f->mode == PY_SPLIT || f->mode == PY_CACHE ? 1 : in->n_inputs;
      for (int k = 0; k < nin && k < in->n_inputs; k++) {
        dg_str_puts(&o, SEP());
        if (f->mode != PY_STAR && nth_name(f->inputs, k, name, sizeof name, &flag)) dg_str_printf(&o, "%s=", name);
        py_val(&o, &in->inputs[k], kinds, t->n_rvs, false);
      }
      if (f->mode == PY_SPLIT) {
        sched_val fs = {.kind = SV_ARRAY, .items = in->inputs + 1, .n = in->n_inputs > 0 ? in->n_inputs - 1 : 0};
        dg_str_printf(&o, "%sfactors=", SEP());
        py_val(&o, &fs, kinds, t->n_rvs, false);
      }
      if (f->mode == PY_REINDEX && in->n_attrs == 2) {
        dg_str_printf(&o, "%sbuffer=(\"%s\", ", SEP(), in->attrs[1].i ? "write" : "read");
        py_val(&o, &in->attrs[0], kinds, t->n_rvs, false);
        dg_str_putc(&o, ')');
      } else {
        for (int k = 0; k < in->n_attrs; k++) {
          dg_str_puts(&o, SEP());
          if (nth_name(f->attrs, k, name, sizeof name, &flag)) dg_str_printf(&o, "%s=", name);
          else flag = false;
          py_val(&o, &in->attrs[k], kinds, t->n_rvs, flag);
        }
      }
      if (f->mode == PY_CACHE && in->n_inputs > 1) {
        dg_str_printf(&o, "%sconsumer_blocks=", SEP());
        py_val(&o, &in->inputs[1], kinds, t->n_rvs, false);
      }
    }
    if (in->has_decision) {
      dg_str_printf(&o, "%sdecision=", SEP());
      py_val(&o, &in->decision, kinds, t->n_rvs, false);
    }
#undef SEP
    dg_str_puts(&o, ")\n");
  }
  free(kinds);
  return dg_str_take(&o);
}
