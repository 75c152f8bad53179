/* prim_sampling.c: SamplePerfectTile and SampleCategorical with
 * MetaSchedule's distributions (sampling.cc), drawn from the schedule's
 * seeded RNG. A recorded decision is validated against the loop it tiles
 * or the candidates it indexes; one that is not valid is an error unless
 * the call may repair it (SCHED_REPLAY_REPAIR, sched.h), in which case a
 * tile is repaired the way TVM repairs it (innermost first: a factor that
 * no longer divides what is left becomes what is left; slot 0 takes the
 * rest). A categorical index out of range is an error in every mode, as in
 * TVM. SampleComputeLocation lives with compute_at, whose legality it
 * needs. */
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

/* "[1,32,1,2,4]", cut with "..." past about 160 bytes. */
static const char *tiles_text(const int64_t *f, int n, char *buf, size_t cap) {
  size_t k = 0;
  buf[k++] = '[';
  for (int i = 0; i < n && k + 24 < cap; i++) {
    if (k > 160) {
      k += (size_t)snprintf(buf + k, cap - k, ",...");
      break;
    }
    k += (size_t)snprintf(buf + k, cap - k, "%s%lld", i ? "," : "", (long long)f[i]);
  }
  snprintf(buf + k, cap - k, "]");
  return buf;
}

/* TVM's repair of a stale tile decision (sampling.cc, SamplePerfectTile):
 * innermost first, a factor that does not divide what is left of the
 * extent becomes what is left; slot 0 takes the rest. A no-op on a
 * decision that multiplies to the extent. */
static void tiles_repair(int64_t extent, int n, int64_t *f) {
  int64_t len = extent;
  for (int i = n - 1; i > 0; i--) {
    if (len % f[i] != 0) f[i] = len;
    len /= f[i];
  }
  f[0] = len;
}

/* The decision taken, f (given: as recorded; f differs only if repaired),
 * must multiply to the extent of the loop (handle `loop`) and keep its
 * innermost factor within maxi (when positive). */
static bool tiles_valid(sched *s, int64_t loop, int64_t extent, int64_t maxi,
                        const int64_t *given, const int64_t *f, int n, dg_status *st) {
  int64_t prod = 1;
  bool overflow = false;
  for (int i = 0; i < n && !overflow; i++) {
    if (f[i] > INT64_MAX / prod) overflow = true;
    else prod *= f[i];
  }
  bool inner_ok = maxi <= 0 || f[n - 1] <= maxi;
  if (!overflow && prod == extent && inner_ok) return true;
  char g[200], t[200];
  tiles_text(given, n, g, sizeof g);
  const char *l = sched_rv_label(s, (int)loop);
  if (overflow)
    return dg_fail(st, DG_ERR_INVALID,
                   "decision %s multiplies to more than 2^63-1, the loop %s has extent %lld", g, l,
                   (long long)extent);
  if (prod != extent)
    return dg_fail(st, DG_ERR_INVALID,
                   "decision %s multiplies to %lld, the loop %s has extent %lld", g,
                   (long long)prod, l, (long long)extent);
  if (memcmp(given, f, sizeof(int64_t) * (size_t)n) != 0)
    return dg_fail(st, DG_ERR_INVALID,
                   "decision %s, repaired to %s for the loop %s of extent %lld, has the innermost "
                   "factor %lld, above max_innermost_factor %lld",
                   g, tiles_text(f, n, t, sizeof t), l, (long long)extent, (long long)f[n - 1],
                   (long long)maxi);
  return dg_fail(st, DG_ERR_INVALID,
                 "decision %s for the loop %s has the innermost factor %lld, above "
                 "max_innermost_factor %lld",
                 g, l, (long long)f[n - 1], (long long)maxi);
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
    int64_t given[64];
    memcpy(given, f, sizeof(int64_t) * (size_t)n);
    if (c->repair) tiles_repair(extent, n, f);
    if (!tiles_valid(c->s, c->inst->inputs[0].i, extent, maxi, given, f, n, st)) return false;
  } else {
    if (maxi != -1 && maxi < 1)
      return dg_fail(st, DG_ERR_INVALID, "max_innermost_factor must be -1 or positive");
    if (n == 1 && maxi != -1 && extent > maxi)
      return dg_fail(st, DG_ERR_INVALID,
                     "one factor leaves the whole extent %lld innermost, above "
                     "max_innermost_factor %lld",
                     (long long)extent, (long long)maxi);
    for (int tries = 0;; tries++) {
      sample_tile_once(&c->s->rng, extent, n, f);
      if (maxi == -1 || f[n - 1] <= maxi) break;
      DG_ASSERT(tries < 1000000); /* n >= 2: P(innermost == 1) > 0, never reached */
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
    if (c->decision.kind != SV_INT)
      return dg_fail(st, DG_ERR_INVALID, "decision must be an index in [0, %d)", n);
    if (c->decision.i < 0 || c->decision.i >= n)
      return dg_fail(st, DG_ERR_INVALID, "decision must be an index in [0, %d), got %lld", n,
                     (long long)c->decision.i);
    idx = c->decision.i;
  } else {
    idx = (int64_t)dg_rng_weighted(&c->s->rng, w, (size_t)n);
  }
  c->has_decision = true;
  c->decision = (sched_val){.kind = SV_INT, .i = idx};
  prim_out(c, sched_rv_new_expr(c->s, cand->items[idx].i));
  return true;
}
