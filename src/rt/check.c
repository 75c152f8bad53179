/* check.c: a kernel's outputs against the float64 reference.
 *
 * Tolerances per dtype (rt.h gives the rule). The absolute part grows with
 * sqrt(K), K the longest reduction, because rounding errors of a sum of K
 * terms grow like a random walk, and with the tensor's scale, the largest
 * |ref|, because an error is only small relative to the values around it.
 * The bounds sit about an order of magnitude above what correct kernels
 * reach on seeded inputs (f32 accumulation of 4096 products of [-1, 1]
 * values: about 1e-6 * sqrt(K) * scale; f16 storage rounding alone: 2^-11
 * relative) and far below what a wrong index or a missing term gives
 * (errors of the order of the scale). A NaN in the output never passes, even
 * where the reference is NaN too: the reference never produces one from
 * seeded inputs unless it is itself unwritten.
 */
#include "dragon/rt.h"

#include <math.h>
#include <string.h>

rt_tol rt_check_tolerance(dg_dtype t) {
  switch (t) {
    case DG_F16: return (rt_tol){1e-3, 1e-2};
    case DG_F32: return (rt_tol){1e-6, 1e-5};
    case DG_F64: return (rt_tol){1e-12, 1e-11};
    default: return (rt_tol){0, 0};
  }
}

static bool reduce_len_fn(dg_block *b, dg_stmt *s, void *ctx) {
  (void)s;
  int64_t *k = ctx, p = 1;
  for (int i = 0; i < b->n_iters; i++)
    if (b->iters[i].kind == DG_ITER_REDUCE && b->iters[i].extent > 0) p *= b->iters[i].extent;
  if (p > *k) *k = p;
  return true;
}

int64_t rt_check_reduce_len(const dg_func *f) {
  int64_t k = 1;
  ir_visit_blocks(f->body, reduce_len_fn, &k);
  return k;
}

/* "C[1, 2]" for flat element i of t. */
static void element_name(const rt_tensor *t, int64_t i, char *out, size_t n) {
  const dg_buffer *b = t->buf;
  int64_t idx[DG_MAX_DIMS];
  for (int d = b->ndim; d-- > 0;) {
    idx[d] = b->shape[d] ? i % b->shape[d] : 0;
    i = b->shape[d] ? i / b->shape[d] : 0;
  }
  size_t len = (size_t)snprintf(out, n, "%s[", b->name);
  for (int d = 0; d < b->ndim && len < n; d++)
    len += (size_t)snprintf(out + len, n - len, "%s%lld", d ? ", " : "", (long long)idx[d]);
  if (len < n) snprintf(out + len, n - len, "]");
}

/* t->base (may be NULL): the same tensor as computed by the unscheduled
 * kernel in its own dtypes; an element also passes when its error is within
 * BASE_FACTOR times the unscheduled kernel's own error there. That keeps
 * ill-conditioned elements (a layernorm over two values whose variance
 * cancels) from failing a correct schedule, while an element that the
 * unscheduled kernel gets right must be right. */
enum { BASE_FACTOR = 4 };

/* What the verdict on one element needs, and what it accumulates (kept in
 * locals of the loops below, not in the rt_check, so that stores to it do
 * not alias the tensors' arrays). */
typedef struct {
  const rt_tensor *t; /* its base: the baseline's result */
  bool is_float;
  double atol, rtol, rel_floor;
  double max_abs, max_rel;
  int64_t n_bad, first_bad;
  double first_out, first_ref;
} verdict;

static inline void note_error(verdict *v, double err, double ref) {
  /* ref is finite here; the division only where rel may be a new maximum
   * (the test is conservative, the result the same) */
  double den = fabs(ref) > v->rel_floor ? fabs(ref) : v->rel_floor;
  if (err > v->max_abs) v->max_abs = err;
  if (err >= v->max_rel * den * 0.999999) {
    double rel = err / den;
    if (rel > v->max_rel) v->max_rel = rel;
  }
}

/* Element i of t's baseline as a double. */
static double base_get(const rt_tensor *t, int64_t i) {
  rt_tensor b = *t;
  b.data = t->base;
  return rt_data_get(&b, i, false);
}

static inline void judge(verdict *v, int64_t i, double out, double ref) {
  double err = fabs(out - ref);
  /* the common case: within tolerance (false for any NaN or infinity) */
  if (v->is_float && err <= v->atol + v->rtol * fabs(ref)) {
    note_error(v, err, ref);
    return;
  }
  bool ok;
  if (!v->is_float) {
    ok = out == ref;
  } else if (isnan(out)) {
    ok = false;
  } else if (out == ref) {
    ok = true;
    err = 0;
  } else {
    ok = isfinite(out) && isfinite(ref) && err <= v->atol + v->rtol * fabs(ref);
    if (!ok && v->t->base && isfinite(out) && isfinite(ref)) {
      double berr = fabs(base_get(v->t, i) - ref);
      ok = isfinite(berr) && err <= BASE_FACTOR * berr;
    }
  }
  if (isnan(err) || isinf(err)) {
    v->max_abs = INFINITY;
    v->max_rel = INFINITY;
  } else {
    note_error(v, err, ref);
  }
  if (!ok) {
    if (v->n_bad == 0) {
      v->first_bad = i;
      v->first_out = out;
      v->first_ref = ref;
    }
    v->n_bad++;
  }
}

/* Every output element of every candidate goes through here: the common
 * float dtypes read their arrays directly, the rest through rt_data_get. */
static void check_tensor(const rt_tensor *t, int64_t K, rt_check *c) {
  dg_dtype d = t->buf->dtype;
  bool is_float = dg_dtype_is_float(d);
  const double *rf = is_float ? t->ref : NULL; /* a float reference is double */
  double scale = 0;
  for (int64_t i = 0; is_float && i < t->numel; i++) {
    double r = fabs(rf[i]);
    if (r > scale && isfinite(r)) scale = r;
  }
  if (scale == 0) scale = 1;
  rt_tol tol = rt_check_tolerance(d);
  verdict v = {.t = t,
               .is_float = is_float,
               .atol = tol.atol * sqrt((double)K) * scale,
               .rtol = tol.rtol,
               .rel_floor = 1e-3 * scale,
               .max_abs = c->max_abs,
               .max_rel = c->max_rel};
  int64_t n = t->numel;
  switch (d) {
    case DG_F32: {
      const float *o = t->data;
      for (int64_t i = 0; i < n; i++) judge(&v, i, o[i], rf[i]);
      break;
    }
    case DG_F64: {
      const double *o = t->data;
      for (int64_t i = 0; i < n; i++) judge(&v, i, o[i], rf[i]);
      break;
    }
    case DG_F16: {
      const uint16_t *o = t->data;
      for (int64_t i = 0; i < n; i++) judge(&v, i, dg_f16_to_f32(o[i]), rf[i]);
      break;
    }
    default:
      for (int64_t i = 0; i < n; i++) judge(&v, i, rt_data_get(t, i, false), rt_data_get(t, i, true));
  }
  if (v.n_bad && c->n_bad == 0) {
    char name[96];
    element_name(t, v.first_bad, name, sizeof name);
    snprintf(c->first_bad, sizeof c->first_bad, "%s: got %.9g, want %.9g", name, v.first_out,
             v.first_ref);
  }
  c->n_checked += n;
  c->n_bad += v.n_bad;
  c->max_abs = v.max_abs;
  c->max_rel = v.max_rel;
}

void rt_check_outputs(const rt_tensors *ts, int64_t K, rt_check *out) {
  memset(out, 0, sizeof *out);
  out->K = K < 1 ? 1 : K;
  for (int i = 0; i < ts->n; i++)
    if (ts->t[i].is_output) check_tensor(&ts->t[i], out->K, out);
  out->pass = out->n_bad == 0 && out->n_checked > 0;
}
