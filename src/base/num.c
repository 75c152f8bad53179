/* num.c: checked number parsing, hashing and IEEE half-precision conversion. */
#include "dragon/base.h"

#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

bool dg_parse_i64(const char *s, int64_t lo, int64_t hi, int64_t *out,
                  const char *what, dg_status *st) {
  if (!s || !*s) return dg_fail(st, DG_ERR_USAGE, "%s: expected an integer, got nothing", what);
  char *end;
  errno = 0;
  long long v = strtoll(s, &end, 10);
  if (*end || errno == ERANGE || end == s)
    return dg_fail(st, DG_ERR_USAGE, "%s: '%s' is not an integer", what, s);
  if (v < lo || v > hi)
    return dg_fail(st, DG_ERR_USAGE, "%s: %lld is out of range [%lld, %lld]",
                   what, v, (long long)lo, (long long)hi);
  *out = v;
  return true;
}

bool dg_parse_f64(const char *s, double *out, const char *what, dg_status *st) {
  if (!s || !*s) return dg_fail(st, DG_ERR_USAGE, "%s: expected a number, got nothing", what);
  char *end;
  errno = 0;
  double v = strtod(s, &end);
  if (*end || end == s || errno == ERANGE || isnan(v))
    return dg_fail(st, DG_ERR_USAGE, "%s: '%s' is not a number", what, s);
  *out = v;
  return true;
}

/* FNV-1a over bytes, then a splitmix finaliser: cheap and well mixed. */
uint64_t dg_hash_bytes(const void *p, size_t n, uint64_t seed) {
  const unsigned char *b = p;
  uint64_t h = 1469598103934665603ull ^ seed;
  for (size_t i = 0; i < n; i++) {
    h ^= b[i];
    h *= 1099511628211ull;
  }
  h ^= h >> 30;
  h *= 0xbf58476d1ce4e5b9ull;
  h ^= h >> 27;
  h *= 0x94d049bb133111ebull;
  return h ^ (h >> 31);
}

uint64_t dg_hash_combine(uint64_t h, uint64_t v) {
  h ^= v + 0x9e3779b97f4a7c15ull + (h << 6) + (h >> 2);
  h ^= h >> 29;
  h *= 0xbf58476d1ce4e5b9ull;
  return h ^ (h >> 32);
}

uint16_t dg_f32_to_f16(float f) {
  uint32_t x;
  memcpy(&x, &f, 4);
  uint32_t sign = (x >> 16) & 0x8000u;
  uint32_t exp = (x >> 23) & 0xffu;
  uint32_t man = x & 0x7fffffu;
  if (exp == 0xff) return (uint16_t)(sign | 0x7c00u | (man ? 0x200u : 0));
  int e = (int)exp - 127 + 15;
  if (e >= 31) return (uint16_t)(sign | 0x7c00u);
  if (e <= 0) {
    if (e < -10) return (uint16_t)sign;
    man |= 0x800000u;
    int shift = 14 - e;
    uint32_t h = man >> shift;
    uint32_t rem = man & ((1u << shift) - 1);
    uint32_t half = 1u << (shift - 1);
    if (rem > half || (rem == half && (h & 1))) h++;
    return (uint16_t)(sign | h);
  }
  uint32_t h = ((uint32_t)e << 10) | (man >> 13);
  uint32_t rem = man & 0x1fffu;
  if (rem > 0x1000u || (rem == 0x1000u && (h & 1))) h++; /* may carry into exp: correct */
  return (uint16_t)(sign | h);
}

float dg_f16_to_f32(uint16_t h) {
  uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
  uint32_t exp = (h >> 10) & 0x1fu;
  uint32_t man = h & 0x3ffu;
  uint32_t x;
  if (exp == 0) {
    if (man == 0) {
      x = sign;
    } else {
      int e = -1;
      do {
        man <<= 1;
        e++;
      } while (!(man & 0x400u));
      x = sign | ((uint32_t)(127 - 15 - e) << 23) | ((man & 0x3ffu) << 13);
    }
  } else if (exp == 31) {
    x = sign | 0x7f800000u | (man << 13);
  } else {
    x = sign | ((exp - 15 + 127) << 23) | (man << 13);
  }
  float f;
  memcpy(&f, &x, 4);
  return f;
}
