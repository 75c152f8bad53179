/* prim_sampling.c: SamplePerfectTile and SampleCategorical with
 * MetaSchedule's distributions (sampling.cc), drawn from the schedule's
 * seeded RNG; replayed decisions are validated and, for tiles, repaired the
 * way TVM repairs them (innermost first: a factor that no longer divides
 * what is left becomes what is left; slot 0 takes the rest).
 * SampleComputeLocation lives with compute_at, whose legality it needs. */
#include <string.h>

#include "sched/sched_impl.h"

/* Splits `extent` into n factors: each prime power p^e is spread over the
 * slots uniformly among all compositions of e (stars and bars). */
static void sample_tile_once(dg_rng *r, int64_t extent, int n, int64_t *out) {
  for (int i = 0; i < n; i++) out[i] = 1;
  int64_t x = extent;
  for (int64_t p = 2; x > 1; p++) {
    if (p * p > x) p = x; /* x itself is prime */
    int e = 0;
    while (x % p == 0) {
      x /= p;
      e++;
    }
    if (e == 0) continue;
    /* choose n-1 bar positions among e+n-1 slots: uniform composition */
    int m = e + n - 1;
    int bars[64], nb = 0;
    DG_ASSERT(m <= 64 * 64);
    /* Floyd's algorithm for n-1 distinct positions in [0, m) */
    int chosen[128];
    int nc = 0;
    for (int j = m - (n - 1); j < m; j++) {
      int t = (int)dg_rng_below(r, (uint64_t)j + 1);
      bool dup = false;
      for (int k = 0; k < nc; k++)
        if (chosen[k] == t) dup = true;
      chosen[nc++] = dup ? j : t;
    }
    /* sort the bars */
    for (int a = 0; a < nc; a++)
      for (int b = a + 1; b < nc; b++)
        if (chosen[b] < chosen[a]) {
          int t = chosen[a];
          chosen[a] = chosen[b];
          chosen[b] = t;
        }
    for (int k = 0; k < nc; k++) bars[nb++] = chosen[k];
    /* slot i gets the stars between bar i-1 and bar i */
    int prev = -1;
    for (int i = 0; i < n; i++) {
      int pos = i < nb ? bars[i] : m;
      int stars = pos - prev - 1;
      prev = pos;
      for (int k = 0; k < stars; k++) out[i] *= p;
    }
  }
}

bool prim_sample_perfect_tile(prim_call *c, dg_status *st) {
  dg_stmt *l = sched_rv_loop(c->s, &c->inst->inputs[0], "loop", st);
  if (!l) return false;
  const sched_val *an = &c->inst->attrs[0], *am = &c->inst->attrs[1];
  if (an->kind != SV_INT || an->i < 1 || an->i > 64)
    return dg_fail(st, DG_ERR_INVALID, "n must be an integer in [1, 64]");
  if (am->kind != SV_INT) return dg_fail(st, DG_ERR_INVALID, "max_innermost_factor must be an integer");
  int n = (int)an->i;
  int64_t maxi = am->i;
  int64_t extent = l->extent;
  int64_t f[64];
  if (c->has_decision) {
    const sched_val *d = &c->decision;
    if (d->kind != SV_ARRAY || d->n != n)
      return dg_fail(st, DG_ERR_INVALID, "decision must be a list of %d integers", n);
    for (int i = 0; i < n; i++) {
      if (d->items[i].kind != SV_INT || d->items[i].i < 1)
        return dg_fail(st, DG_ERR_INVALID, "decision entry %d must be a positive integer", i);
      f[i] = d->items[i].i;
    }
    int64_t len = extent;
    for (int i = n - 1; i > 0; i--) {
      if (len % f[i] != 0) f[i] = len;
      len /= f[i];
    }
    f[0] = len;
  } else {
    if (maxi != -1 && maxi < 1)
      return dg_fail(st, DG_ERR_INVALID, "max_innermost_factor must be -1 or positive");
    for (int tries = 0;; tries++) {
      sample_tile_once(&c->s->rng, extent, n, f);
      if (maxi == -1 || f[n - 1] <= maxi) break;
      DG_ASSERT(tries < 1000000); /* P(innermost == 1) > 0: never reached */
    }
  }
  sched_val *items = DG_ANEWN(c->s->f->arena, sched_val, n);
  for (int i = 0; i < n; i++) {
    items[i] = (sched_val){.kind = SV_INT, .i = f[i]};
    prim_out(c, sched_rv_new_expr(c->s, f[i]));
  }
  c->has_decision = true;
  c->decision = (sched_val){.kind = SV_ARRAY, .items = items, .n = n};
  return true;
}

bool prim_sample_categorical(prim_call *c, dg_status *st) {
  const sched_val *cand = &c->inst->attrs[0], *probs = &c->inst->attrs[1];
  if (cand->kind != SV_ARRAY || probs->kind != SV_ARRAY || cand->n != probs->n || cand->n == 0)
    return dg_fail(st, DG_ERR_INVALID, "candidates and probs must be non-empty lists of one length");
  int n = cand->n;
  double w[256];
  if (n > 256) return dg_fail(st, DG_ERR_INVALID, "at most 256 candidates");
  double sum = 0;
  for (int i = 0; i < n; i++) {
    if (cand->items[i].kind != SV_INT)
      return dg_fail(st, DG_ERR_INVALID, "candidate %d must be an integer", i);
    const sched_val *p = &probs->items[i];
    w[i] = p->kind == SV_FLOAT ? p->f : p->kind == SV_INT ? (double)p->i : -1;
    if (!(w[i] >= 0)) return dg_fail(st, DG_ERR_INVALID, "probability %d must be >= 0", i);
    sum += w[i];
  }
  if (!(sum > 0)) return dg_fail(st, DG_ERR_INVALID, "probabilities sum to zero");
  int64_t idx;
  if (c->has_decision) {
    if (c->decision.kind != SV_INT || c->decision.i < 0 || c->decision.i >= n)
      return dg_fail(st, DG_ERR_INVALID, "decision must be an index in [0, %d)", n);
    idx = c->decision.i;
  } else {
    idx = (int64_t)dg_rng_weighted(&c->s->rng, w, (size_t)n);
  }
  c->has_decision = true;
  c->decision = (sched_val){.kind = SV_INT, .i = idx};
  prim_out(c, sched_rv_new_expr(c->s, cand->items[idx].i));
  return true;
}
