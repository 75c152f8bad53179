/* rng.c: xoshiro256** seeded through splitmix64. Reproducible everywhere:
 * no libc rand, no floating point in the integer paths. */
#include "dragon/base.h"

#include <math.h>

static uint64_t splitmix64(uint64_t *x) {
  uint64_t z = (*x += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

void dg_rng_seed(dg_rng *r, uint64_t seed) {
  uint64_t x = seed;
  for (int i = 0; i < 4; i++) r->s[i] = splitmix64(&x);
}

static uint64_t rotl(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }

uint64_t dg_rng_next(dg_rng *r) {
  uint64_t *s = r->s;
  uint64_t out = rotl(s[1] * 5, 7) * 9;
  uint64_t t = s[1] << 17;
  s[2] ^= s[0];
  s[3] ^= s[1];
  s[1] ^= s[2];
  s[0] ^= s[3];
  s[2] ^= t;
  s[3] = rotl(s[3], 45);
  return out;
}

uint64_t dg_rng_below(dg_rng *r, uint64_t n) {
  DG_ASSERT(n > 0);
  uint64_t lim = UINT64_MAX - UINT64_MAX % n; /* reject the biased tail */
  uint64_t x;
  do x = dg_rng_next(r);
  while (x >= lim);
  return x % n;
}

int64_t dg_rng_range(dg_rng *r, int64_t lo, int64_t hi) {
  DG_ASSERT(lo <= hi);
  return lo + (int64_t)dg_rng_below(r, (uint64_t)(hi - lo) + 1);
}

double dg_rng_uniform(dg_rng *r) {
  return (double)(dg_rng_next(r) >> 11) * (1.0 / 9007199254740992.0);
}

double dg_rng_normal(dg_rng *r) {
  double u1 = dg_rng_uniform(r), u2 = dg_rng_uniform(r);
  if (u1 < 1e-300) u1 = 1e-300;
  return sqrt(-2.0 * log(u1)) * cos(6.283185307179586 * u2);
}

size_t dg_rng_weighted(dg_rng *r, const double *w, size_t n) {
  double sum = 0;
  for (size_t i = 0; i < n; i++) sum += w[i];
  DG_ASSERT(n > 0 && sum > 0);
  double x = dg_rng_uniform(r) * sum;
  for (size_t i = 0; i < n; i++) {
    if (x < w[i]) return i;
    x -= w[i];
  }
  for (size_t i = n; i-- > 0;) /* rounding: the last positive weight */
    if (w[i] > 0) return i;
  return n - 1;
}

dg_rng dg_rng_fork(dg_rng *r) {
  dg_rng c;
  dg_rng_seed(&c, dg_rng_next(r));
  return c;
}
