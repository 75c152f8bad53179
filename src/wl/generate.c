/* generate.c: the workload generator: N distinct canonical specs for a
 * seed, drawn from realistic shapes, and the sampling helpers the families'
 * samplers share.
 *
 * One RNG stream per call, seeded from `seed`; each draw picks a family by
 * its weight (or the one requested), lets it sample values, checks them
 * (ranges, consistency, WL_MAX_BYTES) and keeps the canonical spec if it is
 * new, drawing again from the same family until it is. Distinctness is
 * exact: a hash set of the specs themselves. The order is the draw order,
 * so a seed always yields the same list, and a shorter count is a prefix of
 * a longer one. A family that keeps yielding rejects or duplicates
 * (MISS_LIMIT draws in a row, or a recent rate of new shapes too low to
 * reach the count) has run out of distinct shapes, and the call fails
 * saying how many it found.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "wl/wl_impl.h"

#define MISS_LIMIT 20000
/* Draws per window of the rate check, and the most windows a projected
 * finish may need before the family counts as exhausted. */
#define WINDOW 100000
#define MAX_WINDOWS 50

/* ---- sampling helpers ------------------------------------------------------ */

int64_t wl_pick(dg_rng *r, const int64_t *vals, size_t n) {
  return vals[dg_rng_below(r, n)];
}

static int64_t log_uniform(dg_rng *r, int64_t lo, int64_t hi) {
  double x = exp(log((double)lo) + dg_rng_uniform(r) * (log((double)hi + 1) - log((double)lo)));
  int64_t v = (int64_t)x;
  return v < lo ? lo : v > hi ? hi : v;
}

static const int64_t model_dims[] = {64,   128,  256,   512,   768,   1024,  1536,  2048,
                                     2560, 3072, 3584,  4096,  5120,  6144,  8192,  11008,
                                     12288, 13824, 14336, 16384, 18944, 28672, 32000, 32768};
static const int64_t odd_dims[] = {3,    7,    13,   17,   33,   65,   100,  127,  129,
                                   200,  255,  257,  300,  511,  513,  999,  1000, 1023,
                                   1025, 2047, 2049, 3000, 4095, 4097, 8191, 8193, 50257};

int64_t wl_gen_dim(dg_rng *r, int64_t lo, int64_t hi) {
  DG_ASSERT(lo >= 1 && lo <= hi);
  for (int tries = 0; tries < 8; tries++) {
    double u = dg_rng_uniform(r);
    int64_t v;
    if (u < 0.35) v = WL_PICK(r, model_dims);
    else if (u < 0.65) v = (int64_t)1 << dg_rng_below(r, 17);
    else if (u < 0.80) v = WL_PICK(r, odd_dims);
    else if (u < 0.90) v = 8 * log_uniform(r, (lo + 7) / 8 ? (lo + 7) / 8 : 1, hi / 8 ? hi / 8 : 1);
    else v = log_uniform(r, lo, hi);
    if (v >= lo && v <= hi) return v;
  }
  return log_uniform(r, lo, hi);
}

int64_t wl_gen_batch(dg_rng *r) {
  static const int64_t common[] = {1, 1, 1, 1, 2, 4, 8, 8, 16, 32, 64};
  return dg_rng_uniform(r) < 0.75 ? WL_PICK(r, common) : dg_rng_range(r, 1, 64);
}

int64_t wl_gen_tokens(dg_rng *r) {
  static const int64_t seqs[] = {1,   16,  32,   64,   128,  256,  512,  1024,
                                 2048, 4096, 8192, 77,  197,  384,  1000, 577};
  if (dg_rng_uniform(r) < 0.2) return wl_gen_dim(r, 1, 16384);
  int64_t b = wl_gen_batch(r);
  int64_t t = b * WL_PICK(r, seqs);
  return t > 65536 ? 65536 : t;
}

int64_t wl_gen_hidden(dg_rng *r) {
  static const int64_t hidden[] = {768,  1024, 1280, 1536, 2048,  2560,  3072,  4096, 5120,
                                   6144, 8192, 3584, 11008, 13824, 14336, 16384, 18944, 28672};
  return WL_PICK(r, hidden);
}

int64_t wl_gen_image(dg_rng *r) {
  static const int64_t sizes[] = {7,  14, 28, 56, 112, 224, 8,  16, 32, 64,  128,
                                  13, 17, 19, 27, 35,  71,  73, 75, 147, 149, 150};
  return dg_rng_uniform(r) < 0.75 ? WL_PICK(r, sizes) : dg_rng_range(r, 7, 224);
}

int64_t wl_gen_channels(dg_rng *r) {
  static const int64_t ch[] = {3,   16,  24,  32,  40,  48,  64,  80,  96,   112,  128, 144,
                               160, 192, 256, 320, 384, 512, 576, 640, 768, 960, 1024, 1280, 2048};
  return dg_rng_uniform(r) < 0.75 ? WL_PICK(r, ch) : log_uniform(r, 3, 2048);
}

int64_t wl_gen_dtype(dg_rng *r) { return dg_rng_uniform(r) < 0.35; }

/* ---- the set of specs seen ------------------------------------------------- */

typedef struct {
  uint64_t *hash;
  char **spec;
  size_t cap, len;
} spec_set;

static void set_grow(spec_set *s);

/* Inserts (taking ownership) and returns true if new; frees it otherwise. */
static bool set_insert(spec_set *s, char *spec) {
  if (2 * (s->len + 1) > s->cap) set_grow(s);
  uint64_t h = dg_hash_bytes(spec, strlen(spec), 0x5eed);
  size_t i = (size_t)h & (s->cap - 1);
  while (s->spec[i]) {
    if (s->hash[i] == h && strcmp(s->spec[i], spec) == 0) {
      free(spec);
      return false;
    }
    i = (i + 1) & (s->cap - 1);
  }
  s->hash[i] = h;
  s->spec[i] = spec;
  s->len++;
  return true;
}

static void set_grow(spec_set *s) {
  spec_set n = {0};
  n.cap = s->cap ? 2 * s->cap : 1024;
  n.hash = dg_calloc(n.cap, sizeof *n.hash);
  n.spec = dg_calloc(n.cap, sizeof *n.spec);
  for (size_t i = 0; i < s->cap; i++)
    if (s->spec[i]) set_insert(&n, s->spec[i]);
  free(s->hash);
  free(s->spec);
  *s = n;
}

static void set_free(spec_set *s) {
  for (size_t i = 0; i < s->cap; i++) free(s->spec[i]);
  free(s->hash);
  free(s->spec);
  memset(s, 0, sizeof *s);
}

/* ---- the generator --------------------------------------------------------- */

bool wl_generate(uint64_t seed, int64_t count, const char *family,
                 void (*emit)(const char *spec, void *ctx), void *ctx,
                 dg_status *st) {
  if (count < 0) return dg_fail(st, DG_ERR_INVALID, "count must be >= 0, got %lld", (long long)count);
  const wl_family *only = NULL;
  if (family) {
    only = wl_family_find(family, strlen(family));
    if (!only) {
      dg_str s;
      dg_str_init(&s);
      for (int i = 0; i < wl_family_count(); i++)
        dg_str_printf(&s, "%s%s", i ? ", " : "", wl_family_name(i));
      dg_fail(st, DG_ERR_INVALID, "unknown family '%.60s' (families: %s)", family, s.s);
      dg_str_free(&s);
      return false;
    }
  }
  int nf = wl_family_count();
  double *w = dg_malloc(sizeof(double) * (size_t)nf);
  for (int i = 0; i < nf; i++) w[i] = wl_family_at(i)->weight;

  dg_rng r;
  dg_rng_seed(&r, seed);
  spec_set set = {0};
  int64_t found = 0, misses = 0, win_draws = 0, win_new = 0;
  dg_str s;
  dg_str_init(&s);
  dg_status rej;
  bool ok = true;
  /* The family is drawn once per workload and kept through rejects and
   * duplicates, so that the output follows the documented weights. */
  const wl_family *fam = NULL;
  while (found < count) {
    wl_params p;
    memset(&p, 0, sizeof p);
    if (!fam) fam = only ? only : wl_family_at((int)dg_rng_weighted(&r, w, (size_t)nf));
    p.fam = fam;
    fam->gen(&r, p.v);
    bool fresh = false;
    if (wl_params_check(&p, &rej)) {
      dg_str_clear(&s);
      wl_params_print(&p, &s);
      char *spec = dg_strdup(s.s);
      if (set_insert(&set, spec)) {
        emit(spec, ctx);
        fresh = true;
      }
    }
    win_draws++;
    if (fresh) {
      found++;
      win_new++;
      misses = 0;
      fam = NULL;
    } else {
      misses++;
    }
    /* Near a family's capacity new shapes come ever more rarely (the
     * coupon collector's tail): give up once fewer than 1% of recent draws
     * are new and that rate projects more than MAX_WINDOWS windows to go. */
    if (win_draws == WINDOW) {
      if (win_new < WINDOW / 100 && win_new * MAX_WINDOWS < count - found) misses = MISS_LIMIT;
      win_draws = win_new = 0;
    }
    if (misses >= MISS_LIMIT) {
      ok = dg_fail(st, DG_ERR_INVALID,
                   "family %s: only %lld distinct workloads found before new ones became too "
                   "rare, cannot reach %lld",
                   fam->name, (long long)found, (long long)count);
      break;
    }
  }
  dg_str_free(&s);
  set_free(&set);
  free(w);
  return ok;
}
