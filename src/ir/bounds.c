/* bounds.c: interval analysis of integer expressions (ir_expr_bounds).
 *
 * Each node gets a closed interval [lo, hi] that contains every value it can
 * take when its variables lie in the given ranges. Arithmetic saturates at
 * the int64 limits instead of overflowing, and every integer result is
 * clipped to its dtype's range (an expression that overflowed its dtype has
 * no defined value anyway). Assumes floordiv/floormod round toward negative
 * infinity. Does not relate variables to each other: i - i gets the bounds
 * of i minus those of i (the simplifier cancels such terms first). Float
 * parts, loads and unknown variables give the dtype's full range.
 */
#include "dragon/ir.h"

static const dg_interval FULL = {INT64_MIN, INT64_MAX};

static dg_interval dtype_range(dg_dtype t) {
  switch (t) {
    case DG_BOOL: return (dg_interval){0, 1};
    case DG_I8: return (dg_interval){INT8_MIN, INT8_MAX};
    case DG_I32: return (dg_interval){INT32_MIN, INT32_MAX};
    default: return FULL;
  }
}

static dg_interval clip(dg_interval x, dg_dtype t) {
  dg_interval d = dtype_range(t);
  if (x.lo < d.lo) x.lo = d.lo;
  if (x.hi > d.hi) x.hi = d.hi;
  if (x.lo > x.hi) return d; /* disjoint: the analysis cannot say more */
  return x;
}

static int64_t sat_add(int64_t a, int64_t b) {
  int64_t r;
  if (__builtin_add_overflow(a, b, &r)) return a > 0 ? INT64_MAX : INT64_MIN;
  return r;
}

static int64_t sat_sub(int64_t a, int64_t b) {
  int64_t r;
  if (__builtin_sub_overflow(a, b, &r)) return a >= 0 ? INT64_MAX : INT64_MIN;
  return r;
}

static int64_t sat_mul(int64_t a, int64_t b) {
  int64_t r;
  if (__builtin_mul_overflow(a, b, &r))
    return ((a < 0) != (b < 0)) ? INT64_MIN : INT64_MAX;
  return r;
}

/* Floor division, b != 0, saturating the one overflowing case. */
static int64_t floor_div(int64_t a, int64_t b) {
  if (b == -1) return a == INT64_MIN ? INT64_MAX : -a;
  int64_t q = a / b;
  if (a % b != 0 && ((a < 0) != (b < 0))) q--;
  return q;
}

static int64_t min4(int64_t a, int64_t b, int64_t c, int64_t d) {
  int64_t m = a < b ? a : b;
  if (c < m) m = c;
  return d < m ? d : m;
}

static int64_t max4(int64_t a, int64_t b, int64_t c, int64_t d) {
  int64_t m = a > b ? a : b;
  if (c > m) m = c;
  return d > m ? d : m;
}

static dg_interval iv_floordiv(dg_interval a, dg_interval b) {
  if (b.lo <= 0 && b.hi >= 0) return FULL;
  /* floor(x / y) is monotone in x, and in y for fixed x, on a rectangle
   * where y keeps one sign: the extremes are at the corners. */
  int64_t q1 = floor_div(a.lo, b.lo), q2 = floor_div(a.lo, b.hi);
  int64_t q3 = floor_div(a.hi, b.lo), q4 = floor_div(a.hi, b.hi);
  return (dg_interval){min4(q1, q2, q3, q4), max4(q1, q2, q3, q4)};
}

static dg_interval iv_floormod(dg_interval a, dg_interval b) {
  if (b.lo > 0) {
    if (b.lo == b.hi) {
      int64_t c = b.lo;
      int64_t m = floor_div(a.lo, c);
      if (m == floor_div(a.hi, c))
        return (dg_interval){a.lo - m * c, a.hi - m * c};
      return (dg_interval){0, c - 1};
    }
    if (a.lo >= 0 && a.hi < b.lo) return a;
    return (dg_interval){0, b.hi - 1};
  }
  if (b.hi < 0) {
    if (a.hi <= 0 && a.lo > b.hi) return a;
    return (dg_interval){b.lo + 1, 0};
  }
  return FULL;
}

/* A comparison's truth from its operands' intervals: [1,1], [0,0] or [0,1]. */
static dg_interval iv_compare(dg_expr_kind k, dg_interval a, dg_interval b) {
  bool t = false, fl = false;
  switch (k) {
    case DG_EXPR_LT: t = a.hi < b.lo; fl = a.lo >= b.hi; break;
    case DG_EXPR_LE: t = a.hi <= b.lo; fl = a.lo > b.hi; break;
    case DG_EXPR_GT: t = a.lo > b.hi; fl = a.hi <= b.lo; break;
    case DG_EXPR_GE: t = a.lo >= b.hi; fl = a.hi < b.lo; break;
    case DG_EXPR_EQ:
      t = a.lo == a.hi && b.lo == b.hi && a.lo == b.lo;
      fl = a.hi < b.lo || b.hi < a.lo;
      break;
    case DG_EXPR_NE:
      t = a.hi < b.lo || b.hi < a.lo;
      fl = a.lo == a.hi && b.lo == b.hi && a.lo == b.lo;
      break;
    default: break;
  }
  if (t) return (dg_interval){1, 1};
  if (fl) return (dg_interval){0, 0};
  return (dg_interval){0, 1};
}

static bool int_like(dg_dtype t) { return dg_dtype_is_int(t) || t == DG_BOOL; }

dg_interval ir_expr_bounds(const dg_expr *e, const dg_ranges *r) {
  if (!e) return FULL;
  if (dg_dtype_is_float(e->dtype)) return FULL;
  dg_dtype t = e->dtype;
  switch (e->kind) {
    case DG_EXPR_INT: return (dg_interval){e->ival, e->ival};
    case DG_EXPR_VAR: {
      dg_interval v;
      if (e->var && ir_ranges_get(r, e->var, &v) && v.lo <= v.hi) return clip(v, t);
      return dtype_range(t);
    }
    case DG_EXPR_ADD:
    case DG_EXPR_SUB:
    case DG_EXPR_MUL:
    case DG_EXPR_FLOORDIV:
    case DG_EXPR_FLOORMOD:
    case DG_EXPR_MIN:
    case DG_EXPR_MAX: {
      if (!e->a || !e->b || !int_like(e->a->dtype) || !int_like(e->b->dtype))
        return dtype_range(t);
      dg_interval a = ir_expr_bounds(e->a, r), b = ir_expr_bounds(e->b, r);
      dg_interval x;
      switch (e->kind) {
        case DG_EXPR_ADD: x = (dg_interval){sat_add(a.lo, b.lo), sat_add(a.hi, b.hi)}; break;
        case DG_EXPR_SUB: x = (dg_interval){sat_sub(a.lo, b.hi), sat_sub(a.hi, b.lo)}; break;
        case DG_EXPR_MUL: {
          int64_t p1 = sat_mul(a.lo, b.lo), p2 = sat_mul(a.lo, b.hi);
          int64_t p3 = sat_mul(a.hi, b.lo), p4 = sat_mul(a.hi, b.hi);
          x = (dg_interval){min4(p1, p2, p3, p4), max4(p1, p2, p3, p4)};
          break;
        }
        case DG_EXPR_FLOORDIV: x = iv_floordiv(a, b); break;
        case DG_EXPR_FLOORMOD: x = iv_floormod(a, b); break;
        case DG_EXPR_MIN:
          x = (dg_interval){a.lo < b.lo ? a.lo : b.lo, a.hi < b.hi ? a.hi : b.hi};
          break;
        default:
          x = (dg_interval){a.lo > b.lo ? a.lo : b.lo, a.hi > b.hi ? a.hi : b.hi};
          break;
      }
      return clip(x, t);
    }
    case DG_EXPR_EQ:
    case DG_EXPR_NE:
    case DG_EXPR_LT:
    case DG_EXPR_LE:
    case DG_EXPR_GT:
    case DG_EXPR_GE:
      if (!e->a || !e->b || !int_like(e->a->dtype) || !int_like(e->b->dtype))
        return (dg_interval){0, 1};
      return iv_compare(e->kind, ir_expr_bounds(e->a, r), ir_expr_bounds(e->b, r));
    case DG_EXPR_AND:
    case DG_EXPR_OR: {
      if (!e->a || !e->b) return (dg_interval){0, 1};
      dg_interval a = ir_expr_bounds(e->a, r), b = ir_expr_bounds(e->b, r);
      bool a0 = a.lo == 0 && a.hi == 0, b0 = b.lo == 0 && b.hi == 0;
      bool a1 = a.lo > 0 || a.hi < 0, b1 = b.lo > 0 || b.hi < 0;
      if (e->kind == DG_EXPR_AND) {
        if (a0 || b0) return (dg_interval){0, 0};
        if (a1 && b1) return (dg_interval){1, 1};
      } else {
        if (a1 || b1) return (dg_interval){1, 1};
        if (a0 && b0) return (dg_interval){0, 0};
      }
      return (dg_interval){0, 1};
    }
    case DG_EXPR_NOT: {
      if (!e->a) return (dg_interval){0, 1};
      dg_interval a = ir_expr_bounds(e->a, r);
      if (a.lo == 0 && a.hi == 0) return (dg_interval){1, 1};
      if (a.lo > 0 || a.hi < 0) return (dg_interval){0, 0};
      return (dg_interval){0, 1};
    }
    case DG_EXPR_SELECT: {
      if (!e->a || !e->b || !e->c) return dtype_range(t);
      dg_interval c = ir_expr_bounds(e->a, r);
      dg_interval x = ir_expr_bounds(e->b, r), y = ir_expr_bounds(e->c, r);
      if (c.lo > 0 || c.hi < 0) return x;
      if (c.lo == 0 && c.hi == 0) return y;
      return (dg_interval){x.lo < y.lo ? x.lo : y.lo, x.hi > y.hi ? x.hi : y.hi};
    }
    case DG_EXPR_CAST: {
      if (!e->a) return dtype_range(t);
      if (t == DG_BOOL) {
        if (dg_dtype_is_float(e->a->dtype)) return (dg_interval){0, 1};
        dg_interval a = ir_expr_bounds(e->a, r);
        if (a.lo > 0 || a.hi < 0) return (dg_interval){1, 1};
        if (a.lo == 0 && a.hi == 0) return (dg_interval){0, 0};
        return (dg_interval){0, 1};
      }
      if (!int_like(e->a->dtype)) return dtype_range(t);
      dg_interval a = ir_expr_bounds(e->a, r), d = dtype_range(t);
      if (a.lo >= d.lo && a.hi <= d.hi) return a;
      return d; /* a narrowing cast may wrap */
    }
    default: return dtype_range(t);
  }
}
