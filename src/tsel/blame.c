/* blame.c: which edit of a graph decides the threads of its blocks.
 *
 * A block's threads are the extents of the loops bound to threadIdx, and
 * those extents were written as factors some edits earlier (a multi-level
 * tiling: three `tile` lines, then the `fuse_bind` of their third loops
 * several lines on). When the threads fall outside the block's bounds the
 * line that breaks them is not the line that chose them; the line guard of
 * constrained decoding takes the graph back to the chooser instead of
 * trying the lines in between, which cannot mend it.
 *
 * Shared memory past the device's limit grows with the tiles' inner
 * extents (a stage's region under its compute-at loop); the guard blames
 * the widest tile and caps it, and a block with threads out of bounds has
 * the blamed tile's thread factor narrowed (tsel_prefix_narrow_tile).
 *
 * A copy annotated for a cooperative fetch and later inlined is refused
 * only by the postprocessors at the end: the blame goes to the inline.
 */
#include <math.h>
#include <string.h>

#include "tsel/tsel_impl.h"

static bool is_decision(int op) {
  return op == TSEL_OP_TILE || op == TSEL_OP_SPLIT || op == TSEL_OP_THREAD_SPLIT ||
         op == TSEL_OP_SAMPLE_TILE;
}

/* The latest decision edit among edit n and what its handles come from
 * (refs always name earlier edits in a graph that parses; anything else is
 * not followed). */
static int latest_decision(const tsel_graph *g, int n, int depth) {
  if (n < 1 || n > g->n_edits || depth > 64) return 0;
  const tsel_edit *e = &g->edits[n - 1];
  int best = is_decision(e->op) ? n : 0;
  for (int i = 0; i < e->n_args; i++) {
    const tsel_val *v = &e->args[i];
    int lo = 0, hi = 1;
    if (v->kind == TV_LIST) hi = v->n;
    for (int k = lo; k < hi; k++) {
      const tsel_val *r = v->kind == TV_LIST ? &v->items[k] : v;
      if (r->kind != TV_REF || r->i >= n) continue;
      int d = latest_decision(g, (int)r->i, depth + 1);
      if (d > best) best = d;
    }
  }
  return best;
}

static bool binds_threads(const tsel_edit *e) {
  if (e->op == TSEL_OP_THREAD_SPLIT) return true;
  if (e->op != TSEL_OP_BIND && e->op != TSEL_OP_FUSE_BIND) return false;
  const tsel_val *axis = e->n_args > 0 ? &e->args[e->n_args - 1] : NULL;
  return axis && axis->kind == TV_WORD && axis->s && strncmp(axis->s, "threadIdx.", 10) == 0;
}

int tsel_last_decision(const tsel_graph *g) {
  for (int n = g->n_edits; n >= 1; n--)
    if (is_decision(g->edits[n - 1].op)) return n;
  return 0;
}

int tsel_thread_decision(const tsel_graph *g) {
  int best = 0;
  for (int n = 1; n <= g->n_edits; n++)
    if (binds_threads(&g->edits[n - 1])) {
      int d = latest_decision(g, n, 0);
      if (d > best) best = d;
    }
  return best;
}

/* The product of a tile's factors from the from-th on, 0 where one is not
 * a number or the product is past 2^40. */
static int64_t factors_product(const tsel_edit *e, int from) {
  if (e->op != TSEL_OP_TILE || e->n_args < 2 || e->args[1].kind != TV_LIST) return 0;
  const tsel_val *f = &e->args[1];
  int64_t w = 1;
  for (int k = from; k < f->n; k++) {
    if (f->items[k].kind != TV_INT || f->items[k].i < 1 || f->items[k].i > (INT64_C(1) << 31)) return 0;
    w *= f->items[k].i;
    if (w > (INT64_C(1) << 40)) return 0;
  }
  return w;
}

/* A tile's inner extent (the product of its factors after the first;
 * 0 for a tile of one factor). */
static int64_t inner_extent(const tsel_edit *e) {
  return e->op == TSEL_OP_TILE && e->n_args >= 2 && e->args[1].kind == TV_LIST && e->args[1].n >= 2
             ? factors_product(e, 1)
             : 0;
}

/* Whether a tile's thread factor can be rewritten to a value in [lo,
 * hi]: some divisor of the tile's extent (the product of its factors) is
 * in the range. */
static bool tile_can_meet(const tsel_edit *t, int64_t lo, int64_t hi) {
  int64_t extent = factors_product(t, 0);
  if (lo < 1) lo = 1;
  /* thread ranges are a few thousand wide at most; a wider one is read
   * only to its first 2^16 */
  for (int64_t d = lo; d <= hi && d <= extent && d - lo < (INT64_C(1) << 16); d++)
    if (extent % d == 0) return true;
  return false;
}

int tsel_thread_blame(const tsel_graph *g, int64_t threads, int64_t lo, int64_t hi,
                      tsel_tile_narrowing *narrow) {
  if (narrow) memset(narrow, 0, sizeof *narrow);
  /* the tiles the loops bound to threadIdx come from, latest first */
  for (int tile = g->n_edits; tile >= 1; tile--) {
    const tsel_edit *t = &g->edits[tile - 1];
    if (t->op != TSEL_OP_TILE) continue;
    int64_t f = 0;
    int k = tsel_thread_factor(g, tile, &f);
    if (k < 0 || f < 1 || threads % f != 0) continue;
    int64_t others = threads / f, flo = (lo + others - 1) / others, fhi = hi / others;
    if (flo > fhi || !tile_can_meet(t, flo, fhi)) continue;
    if (narrow) narrow->factor = k, narrow->lo = flo, narrow->hi = fhi;
    return tile;
  }
  /* No one tile can (a batch_matmul with b=12, n=2049, m=2 on 2 threads:
   * its m tile reaches 2 at most, its n tile 3 with m's kept; 195
   * refusals of the same line until the guard's budget ran out): the
   * latest thread tile that can, with the thread tiles after it written
   * again (each up to its extent), those before it kept; its range is the
   * one that leaves the later tiles a way in. */
  enum { MAX_TILES = 64 };
  int tiles[MAX_TILES], ks[MAX_TILES], m = 0;
  int64_t fs[MAX_TILES], es[MAX_TILES];
  for (int tile = 1; tile <= g->n_edits && m < MAX_TILES; tile++) {
    int64_t f = 0;
    int k = tsel_thread_factor(g, tile, &f);
    int64_t e = k >= 0 ? factors_product(&g->edits[tile - 1], 0) : 0;
    if (k < 0 || f < 1 || e < 1) continue;
    tiles[m] = tile, ks[m] = k, fs[m] = f, es[m++] = e;
  }
  double prod = 1;
  for (int i = 0; i < m; i++) prod *= (double)fs[i];
  if (m == 0 || prod > (double)threads || threads % (int64_t)prod != 0) return 0;
  double kept = (double)threads / prod; /* threads from other edits (a thread_split) */
  for (int i = 0; i + 1 < m; i++) kept *= (double)fs[i];
  double later = 1;
  for (int j = m - 1; j >= 0; j--) {
    if (j < m - 1) {
      kept /= (double)fs[j];
      later *= (double)es[j + 1];
    }
    double flo = ceil((double)lo / (kept * later)), fhi = floor((double)hi / kept);
    if (flo < 1) flo = 1;
    if (flo > fhi || fhi < 1 || !tile_can_meet(&g->edits[tiles[j] - 1], (int64_t)flo, (int64_t)fhi)) continue;
    if (narrow) narrow->factor = ks[j], narrow->lo = (int64_t)flo, narrow->hi = (int64_t)fhi;
    return tiles[j];
  }
  return 0;
}

int tsel_widest_tile(const tsel_graph *g, int64_t *inner) {
  int best = 0;
  int64_t widest = 1;
  for (int n = 1; n <= g->n_edits; n++) {
    int64_t w = inner_extent(&g->edits[n - 1]);
    if (w > 1 && w >= widest) best = n, widest = w;
  }
  if (inner) *inner = best ? widest : 0;
  return best;
}

int tsel_shared_blame(const tsel_graph *g, int64_t bytes, int64_t limit, int64_t *cap) {
  *cap = 0;
  if (bytes <= 0 || limit <= 0) return 0;
  int best = 0;
  int64_t widest = 1;
  for (int n = 1; n <= g->n_edits; n++) {
    int64_t w = inner_extent(&g->edits[n - 1]);
    if (w <= 1 || w < widest) continue;
    int64_t c = (int64_t)((double)w * (double)limit / (double)bytes), f = 1;
    if (c < 1) c = 1;
    if (tsel_thread_factor(g, n, &f) < 0 || f < 1) f = 1;
    if (c < f) continue; /* capped, it could not keep its threads */
    best = n, widest = w, *cap = c;
  }
  if (best) return best;
  int64_t inner = 0;
  best = tsel_widest_tile(g, &inner);
  if (best) {
    int64_t c = (int64_t)((double)inner * (double)limit / (double)bytes);
    *cap = c >= 1 ? c : 1;
  }
  return best;
}

/* The factor of tile edit `tile` that edit n's loops come from (through
 * fuse and the like), or -1. */
static int factor_of(const tsel_graph *g, int n, int tile, int depth) {
  if (n < 1 || n > g->n_edits || depth > 64) return -1;
  const tsel_edit *e = &g->edits[n - 1];
  for (int i = 0; i < e->n_args; i++) {
    const tsel_val *v = &e->args[i];
    int hi = v->kind == TV_LIST ? v->n : 1;
    for (int k = 0; k < hi; k++) {
      const tsel_val *r = v->kind == TV_LIST ? &v->items[k] : v;
      if (r->kind != TV_REF || r->i >= n) continue;
      if (r->i == tile && r->sub >= 0) return r->sub;
      if (r->i == tile) continue;
      int f = factor_of(g, (int)r->i, tile, depth + 1);
      if (f >= 0) return f;
    }
  }
  return -1;
}

int tsel_thread_factor(const tsel_graph *g, int tile, int64_t *value) {
  if (value) *value = 0;
  if (tile < 1 || tile > g->n_edits) return -1;
  const tsel_edit *t = &g->edits[tile - 1];
  if (t->op != TSEL_OP_TILE || t->n_args < 2 || t->args[1].kind != TV_LIST) return -1;
  for (int n = tile + 1; n <= g->n_edits; n++) {
    if (!binds_threads(&g->edits[n - 1])) continue;
    int k = factor_of(g, n, tile, 0);
    if (k < 0 || k >= t->args[1].n || t->args[1].items[k].kind != TV_INT) continue;
    if (value) *value = t->args[1].items[k].i;
    return k;
  }
  return -1;
}

static bool same_ref(const tsel_val *a, const tsel_val *b) {
  return a->kind == TV_REF && b->kind == TV_REF && a->i == b->i && a->sub == b->sub;
}

/* Whether edit e annotates its first operand for a cooperative fetch. */
static bool marks_coop(const tsel_edit *e) {
  if (e->op == TSEL_OP_COOP) return e->n_args > 0;
  if (e->op != TSEL_OP_ANNOTATE || e->n_args < 2) return false;
  const tsel_val *k = &e->args[1];
  const char *key = k->kind == TV_WORD ? tsel_ann_full(k->s) : k->kind == TV_STR ? k->s : NULL;
  return key && strcmp(key, "meta_schedule.cooperative_fetch") == 0;
}

int tsel_copy_gone_blame(const tsel_graph *g) {
  for (int n = g->n_edits; n >= 1; n--) {
    const tsel_edit *e = &g->edits[n - 1];
    if ((e->op != TSEL_OP_INLINE && e->op != TSEL_OP_REVERSE_INLINE) || e->n_args < 1) continue;
    for (int m = 1; m < n; m++) {
      const tsel_edit *a = &g->edits[m - 1];
      if (marks_coop(a) && same_ref(&a->args[0], &e->args[0])) return n;
    }
  }
  return 0;
}
