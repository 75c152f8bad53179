/* simplify.c: variable ranges, the integer simplifier (ir_simplify) and the
 * prover built on it (ir_prove).
 *
 * Integer expressions are brought to a canonical linear form: a constant
 * plus a sum of integer multiples of "terms" (variables, loads, non-linear
 * products, floordiv/floormod by constants, min/max, selects, casts), with
 * like terms merged and terms ordered by a fixed structural order (variables
 * by name), the constant last. Division and modulo by a positive constant c
 * move multiples of c out of the numerator, use the variables' ranges to
 * drop a remainder that stays inside one period, split off a factor g of c
 * when the rest of the numerator lies in [0, g), merge nested floordivs and
 * floormods, and fold c*(x // c) + x % c back into x: this is what brings
 * the substitutions of split (i -> i0*f + i1) and fuse (i -> f // E,
 * j -> f % E) back to simple forms. Comparisons, min and max are decided
 * from the bounds of the difference of their operands, else rewritten as
 * "positive terms op negative terms + constant".
 *
 * Every rewrite is an identity of integer arithmetic under the ranges given
 * (floordiv/floormod round toward negative infinity); where an intermediate
 * constant would overflow int64 the node is kept as it is. Floats are never
 * reassociated: only constant operations whose result is exact in the dtype
 * are folded, and x * 1 -> x. The result is built from fresh nodes in f's
 * arena. Bools and other non-integer types only get constant folding and
 * boolean identities.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "dragon/ir.h"

/* ---- ranges -------------------------------------------------------------- */

void ir_ranges_push(dg_ranges *r, const dg_var *v, int64_t lo, int64_t hi) {
  DG_ASSERT(r->n < (int)DG_ARRAY_LEN(r->var));
  r->var[r->n] = v;
  r->iv[r->n] = (dg_interval){lo, hi};
  r->n++;
}

void ir_ranges_pop(dg_ranges *r, int n) {
  DG_ASSERT(n >= 0 && n <= r->n);
  r->n -= n;
}

bool ir_ranges_get(const dg_ranges *r, const dg_var *v, dg_interval *out) {
  if (!r) return false;
  for (int i = r->n; i-- > 0;)
    if (r->var[i] == v) {
      *out = r->iv[i];
      return true;
    }
  return false;
}

/* ---- integer helpers ----------------------------------------------------- */

static bool is_int(dg_dtype t) { return dg_dtype_is_int(t); }

/* Floor division and modulo; b != 0 and not (a == INT64_MIN && b == -1). */
static int64_t floor_div(int64_t a, int64_t b) {
  int64_t q = a / b;
  if (a % b != 0 && ((a < 0) != (b < 0))) q--;
  return q;
}

static int64_t floor_mod(int64_t a, int64_t b) {
  int64_t m = a % b;
  if (m != 0 && ((m < 0) != (b < 0))) m += b;
  return m;
}

static int64_t gcd64(int64_t a, int64_t b) {
  uint64_t x = a < 0 ? -(uint64_t)a : (uint64_t)a;
  uint64_t y = b < 0 ? -(uint64_t)b : (uint64_t)b;
  while (y) {
    uint64_t t = x % y;
    x = y;
    y = t;
  }
  return x > INT64_MAX ? 0 : (int64_t)x;
}

/* ---- context and node construction --------------------------------------- */

typedef struct {
  dg_func *f;
  const dg_ranges *r;
} ctx;

static dg_expr *mk_int(ctx *c, int64_t v, dg_dtype t) { return ir_int_t(c->f, v, t); }

static dg_expr *mk_bool(ctx *c, bool v) { return ir_bool(c->f, v); }

static dg_expr *mk2(ctx *c, dg_expr_kind k, dg_dtype t, dg_expr *a, dg_expr *b) {
  dg_expr *e = DG_ANEW(c->f->arena, dg_expr);
  e->kind = k;
  e->dtype = t;
  e->a = a;
  e->b = b;
  return e;
}

/* A copy of the node e with new operands (keeps e's dtype and payload). */
static dg_expr *rebuild(ctx *c, const dg_expr *e, dg_expr *a, dg_expr *b, dg_expr *x) {
  dg_expr *n = ir_expr_copy(c->f, e);
  n->a = a;
  n->b = b;
  n->c = x;
  return n;
}

static bool is_const(const dg_expr *e, int64_t *v) {
  if (e->kind != DG_EXPR_INT) return false;
  if (v) *v = e->ival;
  return true;
}

static bool is_true(const dg_expr *e) { return e->kind == DG_EXPR_INT && e->ival != 0; }
static bool is_false(const dg_expr *e) { return e->kind == DG_EXPR_INT && e->ival == 0; }

/* ---- the structural order of terms --------------------------------------- */

static int kind_rank(dg_expr_kind k) {
  switch (k) {
    case DG_EXPR_VAR: return 0;
    case DG_EXPR_LOAD: return 1;
    case DG_EXPR_INT: return 1000; /* constants last: min(i, 100) */
    case DG_EXPR_FLOAT: return 1001;
    default: return 2 + (int)k;
  }
}

static int cmp_i64(int64_t a, int64_t b) { return a < b ? -1 : a > b; }

/* A total order on expressions that depends only on structure, constants
 * and names (never on pointers), so that simplification is deterministic. */
static int expr_cmp(const dg_expr *a, const dg_expr *b) {
  if (a == b) return 0;
  if (!a || !b) return a ? 1 : -1;
  int d = kind_rank(a->kind) - kind_rank(b->kind);
  if (d) return d < 0 ? -1 : 1;
  if (a->dtype != b->dtype) return a->dtype < b->dtype ? -1 : 1;
  switch (a->kind) {
    case DG_EXPR_INT: return cmp_i64(a->ival, b->ival);
    case DG_EXPR_FLOAT: {
      uint64_t x, y;
      memcpy(&x, &a->fval, 8);
      memcpy(&y, &b->fval, 8);
      return x < y ? -1 : x > y;
    }
    case DG_EXPR_VAR: {
      if (a->var == b->var) return 0;
      if (!a->var || !b->var) return a->var ? 1 : -1;
      int s = strcmp(a->var->name ? a->var->name : "", b->var->name ? b->var->name : "");
      if (s) return s < 0 ? -1 : 1;
      if ((d = cmp_i64(a->var->id, b->var->id))) return d;
      return (uintptr_t)a->var < (uintptr_t)b->var ? -1 : 1; /* mixed kernels */
    }
    case DG_EXPR_LOAD:
    case DG_EXPR_CALL: {
      if (a->kind == DG_EXPR_LOAD && a->buf != b->buf) {
        if (!a->buf || !b->buf) return a->buf ? 1 : -1;
        int s = strcmp(a->buf->name, b->buf->name);
        if (s) return s < 0 ? -1 : 1;
        d = cmp_i64(a->buf->id, b->buf->id);
        if (d) return d;
        return (uintptr_t)a->buf < (uintptr_t)b->buf ? -1 : 1;
      }
      if (a->kind == DG_EXPR_CALL && a->fn != b->fn) return a->fn < b->fn ? -1 : 1;
      if (a->nargs != b->nargs) return a->nargs < b->nargs ? -1 : 1;
      for (int i = 0; i < a->nargs; i++)
        if ((d = expr_cmp(a->args[i], b->args[i]))) return d;
      return 0;
    }
    default:
      if ((d = expr_cmp(a->a, b->a))) return d;
      if ((d = expr_cmp(a->b, b->b))) return d;
      return expr_cmp(a->c, b->c);
  }
}

/* ---- linear forms -------------------------------------------------------- */

typedef struct {
  int64_t coef;
  dg_expr *t;
} lterm;

typedef struct {
  lterm *v;
  int n, cap;
  int64_t c;
  bool ovf; /* a coefficient overflowed: the form is not to be used */
} lin;

static void lin_free(lin *L) {
  free(L->v);
  memset(L, 0, sizeof *L);
}

static void lin_term(lin *L, int64_t coef, dg_expr *t) {
  if (L->n == L->cap) {
    L->cap = L->cap ? 2 * L->cap : 8;
    L->v = dg_realloc(L->v, sizeof(lterm) * (size_t)L->cap);
  }
  L->v[L->n++] = (lterm){coef, t};
}

static void lin_const(lin *L, int64_t k) {
  if (__builtin_add_overflow(L->c, k, &L->c)) L->ovf = true;
}

static int64_t lin_mul(lin *L, int64_t a, int64_t b) {
  int64_t r;
  if (__builtin_mul_overflow(a, b, &r)) {
    L->ovf = true;
    return 0;
  }
  return r;
}

/* Adds scale * e to L, decomposing sums and constant multiples. */
static void lin_add(lin *L, dg_expr *e, int64_t scale) {
  int64_t k;
  switch (e->kind) {
    case DG_EXPR_INT: lin_const(L, lin_mul(L, scale, e->ival)); return;
    case DG_EXPR_ADD:
      lin_add(L, e->a, scale);
      lin_add(L, e->b, scale);
      return;
    case DG_EXPR_SUB:
      lin_add(L, e->a, scale);
      lin_add(L, e->b, lin_mul(L, scale, -1));
      return;
    case DG_EXPR_MUL:
      if (is_const(e->b, &k)) {
        lin_add(L, e->a, lin_mul(L, scale, k));
        return;
      }
      if (is_const(e->a, &k)) {
        lin_add(L, e->b, lin_mul(L, scale, k));
        return;
      }
      break;
    default: break;
  }
  if (scale) lin_term(L, scale, e);
}

static void lin_add_lin(lin *L, const lin *M, int64_t scale) {
  for (int i = 0; i < M->n; i++) lin_term(L, lin_mul(L, M->v[i].coef, scale), M->v[i].t);
  lin_const(L, lin_mul(L, M->c, scale));
  if (M->ovf) L->ovf = true;
}

static int lterm_cmp(const void *x, const void *y) {
  return expr_cmp(((const lterm *)x)->t, ((const lterm *)y)->t);
}

static void lin_sort_merge(lin *L) {
  if (L->n > 1) qsort(L->v, (size_t)L->n, sizeof(lterm), lterm_cmp);
  int w = 0;
  for (int i = 0; i < L->n; i++) {
    if (w > 0 && expr_cmp(L->v[w - 1].t, L->v[i].t) == 0) {
      if (__builtin_add_overflow(L->v[w - 1].coef, L->v[i].coef, &L->v[w - 1].coef))
        L->ovf = true;
    } else {
      L->v[w++] = L->v[i];
    }
    if (L->v[w - 1].coef == 0) w--;
  }
  L->n = w;
}

static void lin_remove(lin *L, int i) {
  memmove(L->v + i, L->v + i + 1, sizeof(lterm) * (size_t)(L->n - i - 1));
  L->n--;
}

static bool is_div_by_const(const dg_expr *e, dg_expr_kind k, int64_t *c) {
  return e->kind == k && is_const(e->b, c) && *c > 0;
}

/* Sorts and merges like terms, and folds k*c*(Y // c) + k*(Y % c) into k*Y
 * until nothing changes. */
static void lin_normalize(lin *L) {
  for (;;) {
    lin_sort_merge(L);
    bool changed = false;
    for (int i = 0; i < L->n && !changed; i++) {
      int64_t c, c2;
      if (!is_div_by_const(L->v[i].t, DG_EXPR_FLOORMOD, &c)) continue;
      int64_t k = L->v[i].coef, kc;
      if (__builtin_mul_overflow(k, c, &kc)) continue;
      for (int j = 0; j < L->n; j++) {
        const dg_expr *d = L->v[j].t;
        if (L->v[j].coef != kc || !is_div_by_const(d, DG_EXPR_FLOORDIV, &c2) ||
            c2 != c || expr_cmp(d->a, L->v[i].t->a) != 0)
          continue;
        dg_expr *y = L->v[i].t->a;
        lin_remove(L, i > j ? i : j);
        lin_remove(L, i > j ? j : i);
        lin_add(L, y, k);
        changed = true;
        break;
      }
    }
    if (!changed) return;
  }
}

static dg_interval lin_bounds(const lin *L, const dg_ranges *r) {
  dg_interval s = {L->c, L->c};
  for (int i = 0; i < L->n; i++) {
    dg_interval b = ir_expr_bounds(L->v[i].t, r);
    int64_t k = L->v[i].coef, p, q;
    bool o1 = __builtin_mul_overflow(k, b.lo, &p), o2 = __builtin_mul_overflow(k, b.hi, &q);
    if (o1 || o2) return (dg_interval){INT64_MIN, INT64_MAX};
    if (k < 0) {
      int64_t t = p;
      p = q;
      q = t;
    }
    if (__builtin_add_overflow(s.lo, p, &s.lo) || __builtin_add_overflow(s.hi, q, &s.hi))
      return (dg_interval){INT64_MIN, INT64_MAX};
  }
  return s;
}

static dg_expr *scaled(ctx *c, dg_expr *t, int64_t k, dg_dtype dt) {
  return k == 1 ? t : mk2(c, DG_EXPR_MUL, dt, t, mk_int(c, k, dt));
}

/* Builds the canonical expression of a normalized form: the first term with
 * a positive coefficient leads, the others follow in order (subtracted when
 * negative), the constant comes last. */
static dg_expr *lin_build(ctx *c, const lin *L, dg_dtype dt) {
  if (L->n == 0) return mk_int(c, L->c, dt);
  int lead = 0;
  for (int i = 0; i < L->n; i++)
    if (L->v[i].coef > 0) {
      lead = i;
      break;
    }
  dg_expr *e = scaled(c, L->v[lead].t, L->v[lead].coef, dt);
  for (int i = 0; i < L->n; i++) {
    if (i == lead) continue;
    int64_t k = L->v[i].coef;
    if (k < 0 && k != INT64_MIN)
      e = mk2(c, DG_EXPR_SUB, dt, e, scaled(c, L->v[i].t, -k, dt));
    else
      e = mk2(c, DG_EXPR_ADD, dt, e, scaled(c, L->v[i].t, k, dt));
  }
  if (L->c > 0 || L->c == INT64_MIN)
    e = mk2(c, DG_EXPR_ADD, dt, e, mk_int(c, L->c, dt));
  else if (L->c < 0)
    e = mk2(c, DG_EXPR_SUB, dt, e, mk_int(c, -L->c, dt));
  return e;
}

/* ---- floordiv and floormod by a positive constant ------------------------ */

static dg_expr *div_lin(ctx *c, const lin *L, int64_t d, dg_dtype dt);
static dg_expr *mod_lin(ctx *c, const lin *L, int64_t d, dg_dtype dt);

/* Collects the candidate factors g of d (gcds of d with the coefficients,
 * and with all of them together), largest first. */
static int split_factors(const lin *R, int64_t d, int64_t *out, int max) {
  int n = 0;
  int64_t all = d;
  for (int i = 0; i <= R->n && n < max; i++) {
    int64_t g;
    if (i < R->n) {
      g = gcd64(d, R->v[i].coef);
      all = gcd64(all, R->v[i].coef);
    } else {
      g = all;
    }
    if (g <= 1 || g >= d) continue;
    bool dup = false;
    for (int j = 0; j < n; j++) dup |= out[j] == g;
    if (!dup) out[n++] = g;
  }
  for (int i = 1; i < n; i++)
    for (int j = i; j > 0 && out[j] > out[j - 1]; j--) {
      int64_t t = out[j];
      out[j] = out[j - 1];
      out[j - 1] = t;
    }
  return n;
}

/* Splits R = g*Y + Z where Y holds the terms whose coefficient g divides
 * (divided by g) and Z the rest, with R's constant split so that Z's part is
 * in [0, g). True if Y has a term and 0 <= Z < g under the ranges. */
static bool split_by(ctx *c, const lin *R, int64_t g, lin *Y, lin *Z) {
  memset(Y, 0, sizeof *Y);
  memset(Z, 0, sizeof *Z);
  for (int i = 0; i < R->n; i++) {
    if (R->v[i].coef % g == 0) lin_term(Y, R->v[i].coef / g, R->v[i].t);
    else lin_term(Z, R->v[i].coef, R->v[i].t);
  }
  Y->c = floor_div(R->c, g);
  Z->c = floor_mod(R->c, g);
  dg_interval b = lin_bounds(Z, c->r);
  if (Y->n > 0 && b.lo >= 0 && b.hi < g) return true;
  lin_free(Y);
  lin_free(Z);
  return false;
}

/* floordiv(L, d), d > 0; NULL where a constant would overflow. */
static dg_expr *div_lin(ctx *c, const lin *L, int64_t d, dg_dtype dt) {
  lin Q = {0}, R = {0};
  for (int i = 0; i < L->n; i++) {
    if (L->v[i].coef % d == 0) lin_term(&Q, L->v[i].coef / d, L->v[i].t);
    else lin_term(&R, L->v[i].coef, L->v[i].t);
  }
  Q.c = floor_div(L->c, d);
  R.c = floor_mod(L->c, d);
  dg_expr *rest = NULL;
  dg_interval b = lin_bounds(&R, c->r);
  int64_t factors[16];
  int nf;
  if (floor_div(b.lo, d) == floor_div(b.hi, d)) {
    lin_const(&Q, floor_div(b.lo, d));
  } else if ((nf = split_factors(&R, d, factors, 16)) > 0) {
    /* floor((g*Y + Z) / (g*d')) = floor(Y / d') when 0 <= Z < g */
    for (int i = 0; i < nf && !rest; i++) {
      lin Y, Z;
      if (!split_by(c, &R, factors[i], &Y, &Z)) continue;
      lin_normalize(&Y);
      if (!Y.ovf) rest = div_lin(c, &Y, d / factors[i], dt);
      lin_free(&Y);
      lin_free(&Z);
    }
  }
  if (!rest && floor_div(b.lo, d) != floor_div(b.hi, d)) {
    int64_t a, ad;
    if (R.n == 1 && R.v[0].coef == 1 && is_div_by_const(R.v[0].t, DG_EXPR_FLOORDIV, &a) &&
        !__builtin_mul_overflow(a, d, &ad) && !__builtin_mul_overflow(R.c, a, &(int64_t){0})) {
      /* floor((floor(Y/a) + k) / d) = floor((Y + k*a) / (a*d)) */
      lin Y = {0};
      lin_add(&Y, R.v[0].t->a, 1);
      lin_const(&Y, R.c * a);
      lin_normalize(&Y);
      if (!Y.ovf) rest = div_lin(c, &Y, ad, dt);
      lin_free(&Y);
    }
    if (!rest)
      rest = mk2(c, DG_EXPR_FLOORDIV, dt, lin_build(c, &R, dt), mk_int(c, d, dt));
  }
  if (rest) lin_add(&Q, rest, 1);
  lin_normalize(&Q);
  dg_expr *e = Q.ovf || R.ovf ? NULL : lin_build(c, &Q, dt);
  lin_free(&Q);
  lin_free(&R);
  return e;
}

/* floormod(L, d), d > 0; NULL where a constant would overflow. */
static dg_expr *mod_lin(ctx *c, const lin *L, int64_t d, dg_dtype dt) {
  lin R = {0};
  for (int i = 0; i < L->n; i++)
    if (L->v[i].coef % d != 0) lin_term(&R, L->v[i].coef, L->v[i].t);
  R.c = floor_mod(L->c, d);
  dg_interval b = lin_bounds(&R, c->r);
  dg_expr *e = NULL;
  if (floor_div(b.lo, d) == floor_div(b.hi, d)) {
    lin_const(&R, lin_mul(&R, -floor_div(b.lo, d), d));
    lin_normalize(&R);
    if (!R.ovf) e = lin_build(c, &R, dt);
    lin_free(&R);
    return e;
  }
  int64_t factors[16];
  int nf = split_factors(&R, d, factors, 16);
  for (int i = 0; i < nf; i++) {
    /* (g*Y + Z) mod (g*d') = g*(Y mod d') + Z when 0 <= Z < g */
    lin Y, Z;
    if (!split_by(c, &R, factors[i], &Y, &Z)) continue;
    lin_normalize(&Y);
    dg_expr *inner = Y.ovf ? NULL : mod_lin(c, &Y, d / factors[i], dt);
    if (inner) {
      lin_add(&Z, inner, factors[i]);
      lin_normalize(&Z);
      if (!Z.ovf) e = lin_build(c, &Z, dt);
    }
    lin_free(&Y);
    lin_free(&Z);
    if (e) {
      lin_free(&R);
      return e;
    }
  }
  /* (Y mod a) mod d = Y mod d when d divides a */
  for (int i = 0; i < R.n; i++) {
    int64_t a;
    if (is_div_by_const(R.v[i].t, DG_EXPR_FLOORMOD, &a) && a % d == 0) {
      lin S = {0};
      lin_add_lin(&S, &R, 1);
      dg_expr *y = S.v[i].t->a;
      int64_t k = S.v[i].coef;
      lin_remove(&S, i);
      lin_add(&S, y, k);
      lin_normalize(&S);
      if (!S.ovf) e = mod_lin(c, &S, d, dt);
      lin_free(&S);
      if (e) break;
    }
  }
  if (!e && !R.ovf)
    e = mk2(c, DG_EXPR_FLOORMOD, dt, lin_build(c, &R, dt), mk_int(c, d, dt));
  lin_free(&R);
  return e;
}

/* ---- floats -------------------------------------------------------------- */

static bool float_fits(dg_dtype t, double v) {
  if (!isfinite(v)) return false;
  if (t == DG_F64) return true;
  if (t == DG_F32) return (double)(float)v == v;
  if (t == DG_F16) {
    if (fabs(v) > 65504.0) return false;
    return (double)dg_f16_to_f32(dg_f32_to_f16((float)v)) == v;
  }
  return false;
}

/* The exact result of x op y if it is representable in t. */
static bool float_fold(dg_expr_kind k, dg_dtype t, double x, double y, double *out) {
  double r;
  switch (k) {
    case DG_EXPR_ADD:
    case DG_EXPR_SUB: {
      if (k == DG_EXPR_SUB) y = -y;
      r = x + y;
      double bb = r - x;
      if (!isfinite(r) || (x - (r - bb)) + (y - bb) != 0.0) return false;
      break;
    }
    case DG_EXPR_MUL:
      r = x * y;
      if (!isfinite(r) || fma(x, y, -r) != 0.0) return false;
      break;
    case DG_EXPR_DIV:
      if (y == 0.0) return false;
      r = x / y;
      if (!isfinite(r) || fma(r, y, -x) != 0.0) return false;
      break;
    default: return false;
  }
  if (!float_fits(t, r)) return false;
  *out = r;
  return true;
}

/* ---- casts of constants -------------------------------------------------- */

static bool int_fits(dg_dtype t, int64_t v) {
  switch (t) {
    case DG_I8: return v >= INT8_MIN && v <= INT8_MAX;
    case DG_I32: return v >= INT32_MIN && v <= INT32_MAX;
    case DG_I64: return true;
    case DG_BOOL: return v == 0 || v == 1;
    default: return false;
  }
}

static dg_expr *fold_cast(ctx *c, dg_dtype t, const dg_expr *a) {
  dg_dtype s = a->dtype;
  if (a->kind == DG_EXPR_INT) {
    int64_t v = a->ival;
    if (t == DG_BOOL) return mk_bool(c, v != 0);
    if (is_int(t)) return int_fits(t, v) ? mk_int(c, v, t) : NULL;
    if (dg_dtype_is_float(t)) {
      double d = (double)v;
      if (d >= 9.2e18 || d <= -9.2e18 || (int64_t)d != v || !float_fits(t, d)) return NULL;
      return ir_float(c->f, d, t);
    }
    return NULL;
  }
  if (a->kind == DG_EXPR_FLOAT && dg_dtype_is_float(s)) {
    double v = a->fval;
    if (t == DG_BOOL) return isnan(v) ? NULL : mk_bool(c, v != 0.0);
    if (is_int(t)) {
      if (!isfinite(v)) return NULL;
      double tr = trunc(v);
      if (tr >= 9.2e18 || tr <= -9.2e18) return NULL;
      return int_fits(t, (int64_t)tr) ? mk_int(c, (int64_t)tr, t) : NULL;
    }
    if (float_fits(t, v)) return ir_float(c->f, v, t);
    /* f64 -> f32 rounds correctly in one step, as the generated code does */
    if (t == DG_F32 && s == DG_F64 && isfinite(v) && fabs(v) < 3.4e38)
      return ir_float(c->f, v, t);
  }
  return NULL;
}

/* ---- comparisons --------------------------------------------------------- */

static bool is_cmp(dg_expr_kind k) {
  return k == DG_EXPR_EQ || k == DG_EXPR_NE || k == DG_EXPR_LT || k == DG_EXPR_LE ||
         k == DG_EXPR_GT || k == DG_EXPR_GE;
}

static dg_expr_kind cmp_mirror(dg_expr_kind k) {
  switch (k) {
    case DG_EXPR_LT: return DG_EXPR_GT;
    case DG_EXPR_LE: return DG_EXPR_GE;
    case DG_EXPR_GT: return DG_EXPR_LT;
    case DG_EXPR_GE: return DG_EXPR_LE;
    default: return k;
  }
}

static dg_expr_kind cmp_negate(dg_expr_kind k) {
  switch (k) {
    case DG_EXPR_LT: return DG_EXPR_GE;
    case DG_EXPR_LE: return DG_EXPR_GT;
    case DG_EXPR_GT: return DG_EXPR_LE;
    case DG_EXPR_GE: return DG_EXPR_LT;
    case DG_EXPR_EQ: return DG_EXPR_NE;
    default: return DG_EXPR_EQ;
  }
}

/* The truth of (d op 0) when d lies in b: 1, 0, or -1 if undecided. */
static int cmp_decide(dg_expr_kind k, dg_interval b) {
  switch (k) {
    case DG_EXPR_LT: return b.hi < 0 ? 1 : b.lo >= 0 ? 0 : -1;
    case DG_EXPR_LE: return b.hi <= 0 ? 1 : b.lo > 0 ? 0 : -1;
    case DG_EXPR_GT: return b.lo > 0 ? 1 : b.hi <= 0 ? 0 : -1;
    case DG_EXPR_GE: return b.lo >= 0 ? 1 : b.hi < 0 ? 0 : -1;
    case DG_EXPR_EQ: return (b.lo == 0 && b.hi == 0) ? 1 : (b.lo > 0 || b.hi < 0) ? 0 : -1;
    case DG_EXPR_NE: return (b.lo == 0 && b.hi == 0) ? 0 : (b.lo > 0 || b.hi < 0) ? 1 : -1;
    default: return -1;
  }
}

static bool cmp_consts(dg_expr_kind k, double x, double y) {
  switch (k) {
    case DG_EXPR_EQ: return x == y;
    case DG_EXPR_NE: return x != y;
    case DG_EXPR_LT: return x < y;
    case DG_EXPR_LE: return x <= y;
    case DG_EXPR_GT: return x > y;
    default: return x >= y;
  }
}

static bool cmp_ints(dg_expr_kind k, int64_t x, int64_t y) {
  switch (k) {
    case DG_EXPR_EQ: return x == y;
    case DG_EXPR_NE: return x != y;
    case DG_EXPR_LT: return x < y;
    case DG_EXPR_LE: return x <= y;
    case DG_EXPR_GT: return x > y;
    default: return x >= y;
  }
}

/* Both operands simplified. */
static dg_expr *simp_cmp(ctx *c, dg_expr_kind k, dg_expr *a, dg_expr *b) {
  if (a->kind == DG_EXPR_INT && b->kind == DG_EXPR_INT)
    return mk_bool(c, cmp_ints(k, a->ival, b->ival));
  if (a->kind == DG_EXPR_FLOAT && b->kind == DG_EXPR_FLOAT)
    return mk_bool(c, cmp_consts(k, a->fval, b->fval));
  if (!is_int(a->dtype) || a->dtype != b->dtype) return mk2(c, k, DG_BOOL, a, b);
  dg_dtype dt = a->dtype;
  lin D = {0};
  lin_add(&D, a, 1);
  lin_add(&D, b, -1);
  lin_normalize(&D);
  if (D.ovf) {
    lin_free(&D);
    return mk2(c, k, DG_BOOL, a, b);
  }
  int t = cmp_decide(k, lin_bounds(&D, c->r));
  if (t >= 0) {
    lin_free(&D);
    return mk_bool(c, t == 1);
  }
  /* P - N + konst op 0, written as P op N - konst */
  lin P = {0}, N = {0};
  for (int i = 0; i < D.n; i++) {
    if (D.v[i].coef > 0) lin_term(&P, D.v[i].coef, D.v[i].t);
    else lin_term(&N, -D.v[i].coef, D.v[i].t);
  }
  dg_expr *e;
  if (P.n == 0) {
    e = mk2(c, cmp_mirror(k), DG_BOOL, lin_build(c, &N, dt), mk_int(c, D.c, dt));
  } else {
    N.c = -D.c;
    e = mk2(c, k, DG_BOOL, lin_build(c, &P, dt), lin_build(c, &N, dt));
  }
  lin_free(&P);
  lin_free(&N);
  lin_free(&D);
  return e;
}

/* ---- the simplifier ------------------------------------------------------ */

static dg_expr *simp(ctx *c, const dg_expr *e);

/* An integer constant when the bounds pin the value down. */
static dg_expr *pin(ctx *c, dg_expr *e) {
  if (!is_int(e->dtype) || e->kind == DG_EXPR_INT) return e;
  dg_interval b = ir_expr_bounds(e, c->r);
  /* a bound at a dtype limit may come from saturation or clipping, which
   * only says the true value overflowed: keep the expression then */
  int64_t lim = e->dtype == DG_I8 ? INT8_MAX : e->dtype == DG_I32 ? INT32_MAX : INT64_MAX;
  if (b.lo == b.hi && b.lo < lim && b.lo > -lim - 1) return mk_int(c, b.lo, e->dtype);
  return e;
}

static dg_expr *simp_int_arith(ctx *c, const dg_expr *e, dg_expr *a, dg_expr *b) {
  dg_dtype dt = e->dtype;
  int64_t x = 0, y = 0;
  bool ca = is_const(a, &x), cb = is_const(b, &y);
  lin L = {0};
  dg_expr *out = NULL;
  switch (e->kind) {
    case DG_EXPR_ADD:
    case DG_EXPR_SUB:
      lin_add(&L, a, 1);
      lin_add(&L, b, e->kind == DG_EXPR_ADD ? 1 : -1);
      break;
    case DG_EXPR_MUL:
      if (ca || cb) {
        lin_add(&L, ca ? b : a, ca ? x : y);
        break;
      }
      {
        /* a product of two non-constant factors is one term; a single
         * scaled term on each side contributes its coefficient */
        lin A = {0}, B = {0};
        lin_add(&A, a, 1);
        lin_add(&B, b, 1);
        lin_normalize(&A);
        lin_normalize(&B);
        dg_expr *ta = a, *tb = b;
        int64_t k = 1;
        if (!A.ovf && !B.ovf && A.n == 1 && A.c == 0 && B.n == 1 && B.c == 0) {
          ta = A.v[0].t;
          tb = B.v[0].t;
          k = lin_mul(&L, A.v[0].coef, B.v[0].coef);
        }
        if (expr_cmp(ta, tb) > 0) {
          dg_expr *t = ta;
          ta = tb;
          tb = t;
        }
        lin_term(&L, k, mk2(c, DG_EXPR_MUL, dt, ta, tb));
        lin_free(&A);
        lin_free(&B);
      }
      break;
    case DG_EXPR_FLOORDIV:
    case DG_EXPR_FLOORMOD:
      if (ca && cb) {
        if (y != 0 && !(x == INT64_MIN && y == -1))
          out = mk_int(c, e->kind == DG_EXPR_FLOORDIV ? floor_div(x, y) : floor_mod(x, y), dt);
      } else if (cb && y > 0) {
        lin_add(&L, a, 1);
        lin_normalize(&L);
        if (!L.ovf)
          out = e->kind == DG_EXPR_FLOORDIV ? div_lin(c, &L, y, dt) : mod_lin(c, &L, y, dt);
      } else if (!cb) {
        /* a non-constant divisor: 0 <= a < b gives a // b = 0, a % b = a */
        dg_interval ia = ir_expr_bounds(a, c->r), ib = ir_expr_bounds(b, c->r);
        if (ib.lo > 0 && ia.lo >= 0 && ia.hi < ib.lo)
          out = e->kind == DG_EXPR_FLOORDIV ? mk_int(c, 0, dt) : a;
      }
      lin_free(&L);
      return out ? out : rebuild(c, e, a, b, NULL);
    default: break;
  }
  lin_normalize(&L);
  if (!L.ovf) out = lin_build(c, &L, dt);
  lin_free(&L);
  return out ? out : rebuild(c, e, a, b, NULL);
}

static dg_expr *simp_minmax(ctx *c, const dg_expr *e, dg_expr *a, dg_expr *b) {
  bool is_min = e->kind == DG_EXPR_MIN;
  if (a->kind == DG_EXPR_INT && b->kind == DG_EXPR_INT)
    return (a->ival < b->ival) == is_min ? a : b;
  if (a->kind == DG_EXPR_FLOAT && b->kind == DG_EXPR_FLOAT && !isnan(a->fval) &&
      !isnan(b->fval)) {
    if (a->fval != b->fval) return (a->fval < b->fval) == is_min ? a : b;
    if (memcmp(&a->fval, &b->fval, sizeof(double)) == 0) return a;
  }
  if (expr_cmp(a, b) == 0) return a;
  if (is_int(e->dtype) && a->dtype == e->dtype && b->dtype == e->dtype) {
    lin D = {0};
    lin_add(&D, a, 1);
    lin_add(&D, b, -1);
    lin_normalize(&D);
    dg_interval d = D.ovf ? (dg_interval){INT64_MIN, INT64_MAX} : lin_bounds(&D, c->r);
    lin_free(&D);
    if (d.hi <= 0) return is_min ? a : b;
    if (d.lo >= 0) return is_min ? b : a;
    if (expr_cmp(a, b) > 0) {
      dg_expr *t = a;
      a = b;
      b = t;
    }
  }
  return rebuild(c, e, a, b, NULL);
}

static dg_expr *simp_not(ctx *c, const dg_expr *e, dg_expr *a) {
  if (a->kind == DG_EXPR_INT) return mk_bool(c, a->ival == 0);
  if (a->kind == DG_EXPR_NOT) return a->a;
  if (is_cmp(a->kind) && a->a && (!dg_dtype_is_float(a->a->dtype) ||
                                  a->kind == DG_EXPR_EQ || a->kind == DG_EXPR_NE))
    return simp_cmp(c, cmp_negate(a->kind), a->a, a->b);
  return rebuild(c, e, a, NULL, NULL);
}

static dg_expr *simp_logic(ctx *c, const dg_expr *e, dg_expr *a, dg_expr *b) {
  bool is_and = e->kind == DG_EXPR_AND;
  if (e->dtype != DG_BOOL) return rebuild(c, e, a, b, NULL);
  if (is_and) {
    if (is_false(a) || is_false(b)) return mk_bool(c, false);
    if (is_true(a)) return b;
    if (is_true(b)) return a;
  } else {
    if (is_true(a) || is_true(b)) return mk_bool(c, true);
    if (is_false(a)) return b;
    if (is_false(b)) return a;
  }
  if (expr_cmp(a, b) == 0) return a;
  return rebuild(c, e, a, b, NULL);
}

static dg_expr *simp_float_arith(ctx *c, const dg_expr *e, dg_expr *a, dg_expr *b) {
  double r;
  if (a->kind == DG_EXPR_FLOAT && b->kind == DG_EXPR_FLOAT && a->dtype == e->dtype &&
      b->dtype == e->dtype && float_fold(e->kind, e->dtype, a->fval, b->fval, &r))
    return ir_float(c->f, r, e->dtype);
  if (e->kind == DG_EXPR_MUL) {
    if (b->kind == DG_EXPR_FLOAT && b->fval == 1.0 && a->dtype == e->dtype) return a;
    if (a->kind == DG_EXPR_FLOAT && a->fval == 1.0 && b->dtype == e->dtype) return b;
  }
  if (e->kind == DG_EXPR_DIV && b->kind == DG_EXPR_FLOAT && b->fval == 1.0 &&
      a->dtype == e->dtype)
    return a;
  return rebuild(c, e, a, b, NULL);
}

static dg_expr *simp_args(ctx *c, const dg_expr *e) {
  dg_expr *n = ir_expr_copy(c->f, e);
  if (e->nargs > 0) {
    n->args = DG_ANEWN(c->f->arena, dg_expr *, e->nargs);
    for (int i = 0; i < e->nargs; i++) n->args[i] = simp(c, e->args[i]);
  }
  return n;
}

static dg_expr *simp(ctx *c, const dg_expr *e) {
  DG_ASSERT(e);
  switch (e->kind) {
    case DG_EXPR_INT:
    case DG_EXPR_FLOAT: return ir_expr_copy(c->f, e);
    case DG_EXPR_VAR: return pin(c, ir_expr_copy(c->f, e));
    case DG_EXPR_LOAD:
    case DG_EXPR_CALL: return simp_args(c, e);
    case DG_EXPR_NOT: return simp_not(c, e, simp(c, e->a));
    case DG_EXPR_CAST: {
      dg_expr *a = simp(c, e->a);
      if (a->dtype == e->dtype) return a;
      dg_expr *k = fold_cast(c, e->dtype, a);
      return k ? k : pin(c, rebuild(c, e, a, NULL, NULL));
    }
    case DG_EXPR_SELECT: {
      dg_expr *cond = simp(c, e->a);
      if (is_true(cond)) return simp(c, e->b);
      if (is_false(cond)) return simp(c, e->c);
      dg_expr *x = simp(c, e->b), *y = simp(c, e->c);
      if (expr_cmp(x, y) == 0) return x;
      return pin(c, rebuild(c, e, cond, x, y));
    }
    default: break;
  }
  /* binary operators */
  dg_expr *a = simp(c, e->a), *b = simp(c, e->b);
  dg_expr_kind k = e->kind;
  if (is_cmp(k)) return simp_cmp(c, k, a, b);
  if (k == DG_EXPR_AND || k == DG_EXPR_OR) return simp_logic(c, e, a, b);
  bool ints = is_int(e->dtype) && a->dtype == e->dtype && b->dtype == e->dtype;
  if (k == DG_EXPR_MIN || k == DG_EXPR_MAX) return pin(c, simp_minmax(c, e, a, b));
  if (ints && (k == DG_EXPR_ADD || k == DG_EXPR_SUB || k == DG_EXPR_MUL ||
               k == DG_EXPR_FLOORDIV || k == DG_EXPR_FLOORMOD))
    return pin(c, simp_int_arith(c, e, a, b));
  if (dg_dtype_is_float(e->dtype)) return simp_float_arith(c, e, a, b);
  return rebuild(c, e, a, b, NULL);
}

dg_expr *ir_simplify(dg_func *f, const dg_expr *e, const dg_ranges *r) {
  ctx c = {f, r};
  return simp(&c, e);
}

bool ir_prove(dg_func *f, const dg_expr *cond, const dg_ranges *r) {
  ctx c = {f, r};
  dg_expr *s = simp(&c, cond);
  if (is_true(s)) return true;
  if (s->kind == DG_EXPR_AND) return ir_prove(f, s->a, r) && ir_prove(f, s->b, r);
  return false;
}
