/* random.c: random schedules for fuzzing the primitives: each step draws a
 * primitive among those this build supports and operands from the current
 * kernel (blocks, their loops, factors, orders, thread axes, annotations,
 * buffers, locations). Steps the primitive rejects are skipped; rejection
 * leaves the kernel untouched and unrecorded, which is itself under test. */
#include <string.h>

#include "sched/sched_impl.h"

typedef struct {
  const char *names[512];
  int n;
} block_names;

static bool collect(dg_block *b, dg_stmt *s, void *ctx) {
  (void)s;
  block_names *bn = ctx;
  if (strcmp(b->name, "root") != 0 && bn->n < 512) bn->names[bn->n++] = b->name;
  return true;
}

static bool supported(sched_inst_kind k) { return sched_prim_table[k] != NULL; }

/* A random non-root block and its loops; false if none. */
static bool pick_block(sched *s, dg_rng *r, int *block, int *loops, int *n_loops, dg_status *st) {
  block_names bn = {.n = 0};
  ir_visit_blocks(s->f->body, collect, &bn);
  if (bn.n == 0) return false;
  const char *name = bn.names[dg_rng_below(r, (uint64_t)bn.n)];
  *block = sched_get_block(s, name, s->f->name, st);
  if (*block < 0) return false;
  *n_loops = sched_get_loops(s, *block, loops, 64, st);
  return *n_loops >= 0;
}

static dg_stmt *loop_of(sched *s, int rv) { return s->rvs[rv].loop; }

static bool step_split(sched *s, dg_rng *r, const int *loops, int nl, dg_status *st) {
  if (nl == 0) return false;
  int l = loops[dg_rng_below(r, (uint64_t)nl)];
  int64_t ext = loop_of(s, l)->extent;
  int n = (int)dg_rng_range(r, 2, 4);
  sched_val f[4];
  int out[4];
  if (dg_rng_below(r, 2) == 0) { /* a sampled perfect tile, as the search does */
    int v[4];
    int64_t maxi = dg_rng_below(r, 2) ? 64 : -1;
    if (sched_sample_perfect_tile(s, l, n, (int)maxi, NULL, v, st) != n) return false;
    for (int k = 0; k < n; k++) f[k] = (sched_val){.kind = SV_RV, .i = v[k]};
  } else { /* arbitrary factors, one inferred: imperfect splits and predicates */
    int none = (int)dg_rng_below(r, (uint64_t)n);
    for (int k = 0; k < n; k++)
      f[k] = k == none ? (sched_val){.kind = SV_NONE}
                       : (sched_val){.kind = SV_INT, .i = dg_rng_range(r, 1, ext < 8 ? ext : 8)};
  }
  /* disable_predication is only sound for perfect splits: never drawn here */
  return sched_split(s, l, f, n, dg_rng_below(r, 4) != 0, false, out, st) == n;
}

static bool step_fuse(sched *s, dg_rng *r, const int *loops, int nl, dg_status *st) {
  if (nl < 2) return false;
  int i = (int)dg_rng_below(r, (uint64_t)(nl - 1));
  int n = (int)dg_rng_range(r, 2, nl - i < 4 ? nl - i : 4);
  return sched_fuse(s, loops + i, n, dg_rng_below(r, 4) != 0, st) >= 0;
}

static bool step_reorder(sched *s, dg_rng *r, const int *loops, int nl, dg_status *st) {
  if (nl < 2) return false;
  int i = (int)dg_rng_below(r, (uint64_t)(nl - 1));
  int n = (int)dg_rng_range(r, 2, nl - i);
  int sel[64];
  memcpy(sel, loops + i, sizeof(int) * (size_t)n);
  for (int k = n - 1; k > 0; k--) { /* Fisher-Yates */
    int j = (int)dg_rng_below(r, (uint64_t)k + 1);
    int t = sel[k];
    sel[k] = sel[j];
    sel[j] = t;
  }
  return sched_reorder(s, sel, n, st);
}

static bool step_kind(sched *s, dg_rng *r, const int *loops, int nl, dg_status *st) {
  if (nl == 0) return false;
  int l = loops[dg_rng_below(r, (uint64_t)nl)];
  switch (dg_rng_below(r, 4)) {
    case 0: return sched_parallel(s, l, st);
    case 1: return sched_vectorize(s, l, st);
    case 2: return sched_unroll(s, l, st);
    default: {
      static const dg_thread_tag tags[] = {DG_TAG_BLOCK_X, DG_TAG_BLOCK_Y, DG_TAG_THREAD_X,
                                           DG_TAG_THREAD_Y, DG_TAG_VTHREAD_X};
      return sched_bind(s, l, tags[dg_rng_below(r, DG_ARRAY_LEN(tags))], st);
    }
  }
}

static bool step_annotate(sched *s, dg_rng *r, int block, const int *loops, int nl,
                          dg_status *st) {
  static const char *const keys[] = {"pragma_auto_unroll_max_step", "pragma_unroll_explicit",
                                     "meta_schedule.cooperative_fetch"};
  int target = nl > 0 && dg_rng_below(r, 2) ? loops[dg_rng_below(r, (uint64_t)nl)] : block;
  sched_val v = {.kind = SV_INT, .i = dg_rng_range(r, 0, 64)};
  return sched_annotate(s, target, keys[dg_rng_below(r, DG_ARRAY_LEN(keys))], &v, st);
}

static bool step_cache(sched *s, dg_rng *r, int block, dg_status *st) {
  dg_block *b = s->rvs[block].block;
  static const dg_scope scopes[] = {DG_SCOPE_SHARED, DG_SCOPE_LOCAL, DG_SCOPE_GLOBAL};
  dg_scope sc = scopes[dg_rng_below(r, DG_ARRAY_LEN(scopes))];
  if (dg_rng_below(r, 2) && b->n_reads > 0 && supported(SCHED_INST_CACHE_READ))
    return sched_cache_read(s, block, (int)dg_rng_below(r, (uint64_t)b->n_reads), sc, &block, 1, st) >= 0;
  if (b->n_writes > 0 && supported(SCHED_INST_CACHE_WRITE))
    return sched_cache_write(s, block, 0, sc, NULL, 0, st) >= 0;
  return false;
}

static bool step_location(sched *s, dg_rng *r, int block, dg_status *st) {
  switch (dg_rng_below(r, 4)) {
    case 0:
      return supported(SCHED_INST_COMPUTE_INLINE) && sched_compute_inline(s, block, st);
    case 1:
      return supported(SCHED_INST_REVERSE_COMPUTE_INLINE) &&
             sched_reverse_compute_inline(s, block, st);
    default: {
      if (!supported(SCHED_INST_SAMPLE_COMPUTE_LOCATION) || !supported(SCHED_INST_COMPUTE_AT))
        return false;
      /* a consumer's loop: sample a location, as RandomComputeLocation does */
      int loc = sched_sample_compute_location(s, block, NULL, st);
      if (loc < 0) return false;
      return sched_compute_at(s, block, loc, dg_rng_below(r, 2) != 0, -1, st);
    }
  }
}

static bool step_reduction(sched *s, dg_rng *r, int block, const int *loops, int nl,
                           dg_status *st) {
  if (nl == 0) return false;
  int l = loops[dg_rng_below(r, (uint64_t)nl)];
  if (dg_rng_below(r, 2) && supported(SCHED_INST_DECOMPOSE_REDUCTION))
    return sched_decompose_reduction(s, block, l, st) >= 0;
  if (supported(SCHED_INST_RFACTOR)) return sched_rfactor(s, l, 0, st) >= 0;
  return false;
}

int sched_random_steps(sched *s, dg_rng *r, int n_steps) {
  int applied = 0;
  dg_status st;
  for (int i = 0; i < n_steps; i++) {
    int block, loops[64], nl;
    if (!pick_block(s, r, &block, loops, &nl, &st)) break;
    bool ok;
    switch (dg_rng_below(r, 16)) {
      case 0: case 1: case 2: case 3: ok = step_split(s, r, loops, nl, &st); break;
      case 4: case 5: ok = step_fuse(s, r, loops, nl, &st); break;
      case 6: case 7: ok = step_reorder(s, r, loops, nl, &st); break;
      case 8: case 9: ok = step_kind(s, r, loops, nl, &st); break;
      case 10: ok = step_annotate(s, r, block, loops, nl, &st); break;
      case 11: ok = sched_add_unit_loop(s, nl > 0 && dg_rng_below(r, 2) ? loops[0] : block, &st) >= 0; break;
      case 12: case 13: ok = step_cache(s, r, block, &st); break;
      case 14: ok = step_location(s, r, block, &st); break;
      default: ok = step_reduction(s, r, block, loops, nl, &st); break;
    }
    applied += ok;
  }
  return applied;
}
