/* data.c: a kernel's tensors: allocation, seeded inputs, poisoned outputs,
 * element access and the output checksum.
 *
 * Every parameter has two arrays: `data` in the kernel's storage (bool as
 * uint8, f16 as binary16 bits) and `ref` in the reference's (double for every
 * float dtype, integers as they are). Inputs hold the same values in both,
 * rounded to the dtype first, so the reference sees exactly what the kernel
 * sees. A parameter is an output if some block stores to it; outputs are
 * poisoned, never filled, so a kernel that reads an output before writing
 * it (an in-place update without init) reads poison and fails the check.
 *
 * Integer inputs are small and non-negative ([0, 7]) so that integer inputs
 * used as indices stay in bounds of any dimension of at least 8.
 */
#include "dragon/rt.h"

#include "dragon/codegen.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

static size_t storage_bytes(dg_dtype t, bool ref) {
  if (ref && dg_dtype_is_float(t)) return 8;
  return (size_t)dg_dtype_bytes(t);
}

bool rt_tensors_init(rt_tensors *ts, const dg_func *f, dg_status *st) {
  memset(ts, 0, sizeof *ts);
  int n = f->n_params;
  ts->n = n;
  ts->t = dg_calloc((size_t)(n ? n : 1), sizeof(rt_tensor));
  ts->args = dg_calloc((size_t)(n ? n : 1), sizeof(void *));
  ts->ref_args = dg_calloc((size_t)(n ? n : 1), sizeof(void *));
  for (int i = 0; i < n; i++) {
    rt_tensor *t = &ts->t[i];
    const dg_buffer *b = f->params[i];
    t->buf = b;
    t->numel = ir_buffer_numel(b);
    t->is_output = codegen_param_written(f, i);
    size_t n1 = (size_t)t->numel * storage_bytes(b->dtype, false);
    size_t n2 = (size_t)t->numel * storage_bytes(b->dtype, true);
    if (t->numel < 0 || t->numel > ((int64_t)1 << 40)) {
      rt_tensors_free(ts);
      return dg_fail(st, DG_ERR_INVALID, "tensors: parameter %s has %lld elements", b->name,
                     (long long)t->numel);
    }
    t->data = malloc(n1 ? n1 : 1);
    t->ref = malloc(n2 ? n2 : 1);
    if (!t->data || !t->ref) {
      rt_tensors_free(ts);
      return dg_fail(st, DG_ERR_RUNTIME, "tensors: out of memory for parameter %s (%zu bytes)",
                     b->name, n1 + n2);
    }
    memset(t->data, 0, n1);
    memset(t->ref, 0, n2);
    ts->args[i] = t->data;
    ts->ref_args[i] = t->ref;
  }
  return true;
}

void rt_tensors_free(rt_tensors *ts) {
  if (!ts->t) return;
  for (int i = 0; i < ts->n; i++) {
    free(ts->t[i].data);
    free(ts->t[i].ref);
    free(ts->t[i].base);
  }
  free(ts->t);
  free(ts->args);
  free(ts->ref_args);
  memset(ts, 0, sizeof *ts);
}

/* ---- element access ------------------------------------------------------ */

static double round_to(dg_dtype t, double v) {
  switch (t) {
    case DG_F16: return (double)dg_f16_to_f32(dg_f32_to_f16((float)v));
    case DG_F32: return (double)(float)v;
    default: return v;
  }
}

double rt_data_get(const rt_tensor *t, int64_t i, bool ref) {
  DG_ASSERT(i >= 0 && i < t->numel);
  dg_dtype d = t->buf->dtype;
  const void *p = ref ? t->ref : t->data;
  if (ref && dg_dtype_is_float(d)) return ((const double *)p)[i];
  switch (d) {
    case DG_BOOL: return ((const uint8_t *)p)[i];
    case DG_I8: return ((const int8_t *)p)[i];
    case DG_I32: return ((const int32_t *)p)[i];
    case DG_I64: return (double)((const int64_t *)p)[i];
    case DG_F16: return dg_f16_to_f32(((const uint16_t *)p)[i]);
    case DG_F32: return ((const float *)p)[i];
    case DG_F64: return ((const double *)p)[i];
    case DG_DTYPE_COUNT: break;
  }
  DG_UNREACHABLE();
}

static void put(void *p, dg_dtype d, bool ref, int64_t i, double v) {
  if (ref && dg_dtype_is_float(d)) {
    ((double *)p)[i] = v;
    return;
  }
  switch (d) {
    case DG_BOOL: ((uint8_t *)p)[i] = v != 0; break;
    case DG_I8: ((int8_t *)p)[i] = (int8_t)v; break;
    case DG_I32: ((int32_t *)p)[i] = (int32_t)v; break;
    case DG_I64: ((int64_t *)p)[i] = (int64_t)v; break;
    case DG_F16: ((uint16_t *)p)[i] = dg_f32_to_f16((float)v); break;
    case DG_F32: ((float *)p)[i] = (float)v; break;
    case DG_F64: ((double *)p)[i] = v; break;
    case DG_DTYPE_COUNT: DG_UNREACHABLE();
  }
}

static double clamp_int(dg_dtype d, double v) {
  double lo = d == DG_I8 ? -128.0 : d == DG_I32 ? -2147483648.0 : -9.2233720368547758e18;
  double hi = d == DG_I8 ? 127.0 : d == DG_I32 ? 2147483647.0 : 9.2233720368547748e18;
  if (isnan(v)) return 0;
  return v < lo ? lo : v > hi ? hi : trunc(v);
}

void rt_data_set(rt_tensor *t, int64_t i, double v) {
  DG_ASSERT(i >= 0 && i < t->numel);
  dg_dtype d = t->buf->dtype;
  if (dg_dtype_is_int(d)) v = clamp_int(d, v);
  v = round_to(d, v);
  put(t->data, d, false, i, v);
  put(t->ref, d, true, i, v);
}

/* ---- filling ------------------------------------------------------------- */

static void poison(rt_tensor *t) {
  dg_dtype d = t->buf->dtype;
  if (!dg_dtype_is_float(d)) {
    memset(t->data, 0xA5, (size_t)t->numel * storage_bytes(d, false));
    memset(t->ref, 0xA5, (size_t)t->numel * storage_bytes(d, true));
    return;
  }
  for (int64_t i = 0; i < t->numel; i++) {
    put(t->data, d, false, i, NAN);
    put(t->ref, d, true, i, NAN);
  }
}

bool rt_tensors_base_args(rt_tensors *ts, void **args, dg_status *st) {
  for (int i = 0; i < ts->n; i++) {
    rt_tensor *t = &ts->t[i];
    args[i] = t->data;
    if (!t->is_output) continue;
    dg_dtype d = t->buf->dtype;
    size_t n = (size_t)t->numel * storage_bytes(d, false);
    if (!t->base && !(t->base = malloc(n ? n : 1)))
      return dg_fail(st, DG_ERR_RUNTIME, "tensors: out of memory for the baseline of %s (%zu bytes)",
                     t->buf->name, n);
    if (!dg_dtype_is_float(d)) memset(t->base, 0xA5, n);
    else
      for (int64_t k = 0; k < t->numel; k++) put(t->base, d, false, k, NAN);
    args[i] = t->base;
  }
  return true;
}

void rt_data_poison(rt_tensors *ts) {
  for (int i = 0; i < ts->n; i++)
    if (ts->t[i].is_output) poison(&ts->t[i]);
}

void rt_data_fill(rt_tensors *ts, uint64_t seed, rt_dist dist) {
  for (int i = 0; i < ts->n; i++) {
    rt_tensor *t = &ts->t[i];
    if (t->is_output) {
      poison(t);
      free(t->base); /* computed from other inputs */
      t->base = NULL;
      continue;
    }
    dg_rng rng;
    dg_rng_seed(&rng, dg_hash_combine(seed, (uint64_t)i));
    dg_dtype d = t->buf->dtype;
    for (int64_t k = 0; k < t->numel; k++) {
      double v;
      if (dg_dtype_is_float(d)) {
        double u = dg_rng_uniform(&rng);
        v = dist == RT_DIST_POSITIVE ? 0.5 + 1.5 * u : 2.0 * u - 1.0;
        v = round_to(d, v);
      } else if (d == DG_BOOL) {
        v = (double)dg_rng_below(&rng, 2);
      } else {
        v = (double)dg_rng_below(&rng, 8);
      }
      put(t->data, d, false, k, v);
      put(t->ref, d, true, k, v);
    }
  }
}

typedef struct {
  bool positive;
} dist_ctx;

static void scan_expr(const dg_expr *e, dist_ctx *c) {
  if (!e || c->positive) return;
  if (e->kind == DG_EXPR_CALL &&
      (e->fn == DG_MATH_LOG || e->fn == DG_MATH_SQRT || e->fn == DG_MATH_RSQRT ||
       e->fn == DG_MATH_POW))
    c->positive = true;
  scan_expr(e->a, c);
  scan_expr(e->b, c);
  scan_expr(e->c, c);
  for (int i = 0; i < e->nargs; i++) scan_expr(e->args[i], c);
}

static void scan_stmt(const dg_stmt *s, dist_ctx *c) {
  if (!s || c->positive) return;
  switch (s->kind) {
    case DG_STMT_FOR: scan_stmt(s->body, c); break;
    case DG_STMT_SEQ:
      for (int i = 0; i < s->n; i++) scan_stmt(s->stmts[i], c);
      break;
    case DG_STMT_BLOCK:
      scan_expr(s->block->predicate, c);
      scan_stmt(s->block->init, c);
      scan_stmt(s->block->body, c);
      break;
    case DG_STMT_STORE: scan_expr(s->value, c); break;
    case DG_STMT_IF:
      scan_expr(s->cond, c);
      scan_stmt(s->then_s, c);
      scan_stmt(s->else_s, c);
      break;
  }
}

rt_dist rt_data_dist_for(const dg_func *f) {
  dist_ctx c = {false};
  scan_stmt(f->body, &c);
  return c.positive ? RT_DIST_POSITIVE : RT_DIST_UNIFORM;
}

const char *rt_dist_name(rt_dist d) {
  return d == RT_DIST_POSITIVE ? "positive [0.5, 2]" : "uniform [-1, 1]";
}

rt_checksum rt_data_checksum(const rt_tensors *ts) {
  rt_checksum c = {0, 0};
  for (int i = 0; i < ts->n; i++) {
    const rt_tensor *t = &ts->t[i];
    if (!t->is_output) continue;
    for (int64_t k = 0; k < t->numel; k++) c.sum += rt_data_get(t, k, false);
    c.hash = dg_hash_combine(
        c.hash, dg_hash_bytes(t->data, (size_t)t->numel * storage_bytes(t->buf->dtype, false),
                              (uint64_t)i));
  }
  return c;
}
