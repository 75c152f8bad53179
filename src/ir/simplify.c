/* simplify.c: seed version: variable ranges and constant folding only.
 * (Replaced by the full simplifier.) */
#include "dragon/ir.h"

void ir_ranges_push(dg_ranges *r, const dg_var *v, int64_t lo, int64_t hi) {
  DG_ASSERT(r->n < (int)DG_ARRAY_LEN(r->var));
  r->var[r->n] = v;
  r->iv[r->n] = (dg_interval){lo, hi};
  r->n++;
}

void ir_ranges_pop(dg_ranges *r, int n) {
  DG_ASSERT(n <= r->n);
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

dg_expr *ir_simplify(dg_func *f, const dg_expr *e, const dg_ranges *r) {
  (void)r;
  if ((e->kind == DG_EXPR_ADD || e->kind == DG_EXPR_SUB || e->kind == DG_EXPR_MUL) &&
      e->a->kind == DG_EXPR_INT && e->b->kind == DG_EXPR_INT) {
    int64_t x = e->a->ival, y = e->b->ival;
    int64_t v = e->kind == DG_EXPR_ADD ? x + y : e->kind == DG_EXPR_SUB ? x - y : x * y;
    return ir_int_t(f, v, e->dtype);
  }
  return ir_expr_copy(f, e);
}
