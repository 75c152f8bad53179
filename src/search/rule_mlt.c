/* rule_mlt.c: MultiLevelTiling, MetaSchedule's CUDA configuration
 * (schedule_rule/multi_level_tiling.cc): structure "SSSRRSRS", the first
 * three tile levels fused and bound to blockIdx.x, vthread.x, threadIdx.x,
 * innermost tile factors <= 64, a "local" write cache under the threadIdx
 * level, "shared" read caches of every input under the outer reduction
 * tile, each with a sampled cooperative-fetch vector length, and on sm_80+
 * two more sketches with a 4- and 5-stage software pipeline.
 *
 * The sub-rules run in TVM's order on a list of states (a schedule and its
 * tiles): TileLoopNest, AddWriteReuse, AddReadReuse, AddAsyncPipeline; a
 * sub-rule with several outcomes copies the state (space_copy). Every step
 * is recorded exactly as TVM records it, so that TVM's decisions replay on
 * dragon's sketch.
 *
 * Assumes what NeedsMultiLevelTiling checks (a trivial binding: loop i
 * binds iteration variable i). The tensor-core variant is rule_mlt_tc.c.
 */
#include <string.h>

#include "search/space_impl.h"

enum { MAX_SLOTS = 16, MAX_PER_SLOT = 32, MAX_STATES = SPACE_MAX_OUT };

typedef struct {
  const char *structure;
  dg_thread_tag binds[3];
  int n_binds;
  int max_innermost;
  int write_level;  /* 1-based tile level of the write cache */
  dg_scope write_scope;
  int read_level;   /* 1-based tile level of the read caches */
  dg_scope read_scope;
} mlt_config;

static const mlt_config cuda_config = {
    .structure = "SSSRRSRS",
    .binds = {DG_TAG_BLOCK_X, DG_TAG_VTHREAD_X, DG_TAG_THREAD_X},
    .n_binds = 3,
    .max_innermost = 64,
    .write_level = 3,
    .write_scope = DG_SCOPE_LOCAL,
    .read_level = 4,
    .read_scope = DG_SCOPE_SHARED,
};

static const int64_t vector_load_lens[] = {1, 2, 3, 4, 8, 16};

typedef struct {
  sched *s;
  int tiles[MAX_SLOTS][MAX_PER_SLOT];
  int n_tiles[MAX_SLOTS];
} mlt_state;

static int last_tile(const mlt_state *m, int level) {
  DG_ASSERT(level >= 1 && m->n_tiles[level - 1] > 0);
  return m->tiles[level - 1][m->n_tiles[level - 1] - 1];
}

static bool push_tile(mlt_state *m, int slot, int loop, dg_status *st) {
  if (m->n_tiles[slot] == MAX_PER_SLOT)
    return dg_fail(st, DG_ERR_INVALID, "MultiLevelTiling: more than %d loops in one tile level",
                   MAX_PER_SLOT);
  m->tiles[slot][m->n_tiles[slot]++] = loop;
  return true;
}

/* TileLoopNest: split every spatial loop into the S levels and every
 * reduction loop into the R levels, reorder by level, fuse and bind the
 * first levels; the thread-extent bounds go on the block. */
static bool tile_loop_nest(space_ctx *c, mlt_state *m, int block, dg_status *st) {
  sched *s = m->s;
  const mlt_config *cfg = &cuda_config;
  int n_slots = (int)strlen(cfg->structure);
  int s_idx[MAX_SLOTS], r_idx[MAX_SLOTS], ns = 0, nr = 0;
  for (int i = 0; i < n_slots; i++) {
    if (cfg->structure[i] == 'S') s_idx[ns++] = i;
    else r_idx[nr++] = i;
  }
  int loops[64];
  int n = sched_get_loops(s, block, loops, 64, st);
  if (n < 0) return false;
  dg_block *b = space_block(s, block);
  if (n != b->n_iters)
    return dg_fail(st, DG_ERR_INVALID, "MultiLevelTiling: block %s has %d loops for %d iterators",
                   b->name, n, b->n_iters);
  int64_t spatial_product = 1;
  for (int i = 0; i < n; i++) {
    const int *idx;
    int nt;
    if (b->iters[i].kind == DG_ITER_SPATIAL) {
      idx = s_idx;
      nt = ns;
      spatial_product *= space_loop(s, loops[i])->extent;
    } else {
      idx = r_idx;
      nt = nr;
    }
    if (nt == 1) {
      if (!push_tile(m, idx[0], loops[i], st)) return false;
      continue;
    }
    int factors[MAX_SLOTS], splits[MAX_SLOTS];
    if (sched_sample_perfect_tile(s, loops[i], nt, cfg->max_innermost, NULL, factors, st) != nt)
      return false;
    sched_val fv[MAX_SLOTS];
    for (int j = 0; j < nt; j++) fv[j] = (sched_val){.kind = SV_RV, .i = factors[j]};
    if (sched_split(s, loops[i], fv, nt, true, false, splits, st) != nt) return false;
    for (int j = 0; j < nt; j++)
      if (!push_tile(m, idx[j], splits[j], st)) return false;
  }
  int order[MAX_SLOTS * MAX_PER_SLOT], no = 0;
  for (int i = 0; i < n_slots; i++)
    for (int j = 0; j < m->n_tiles[i]; j++) order[no++] = m->tiles[i][j];
  if (!sched_reorder(s, order, no, st)) return false;
  int n_binds = cfg->n_binds < n_slots ? cfg->n_binds : n_slots;
  for (int i = 0; i < n_binds; i++) {
    int fused = space_fuse(s, m->tiles[i], m->n_tiles[i], st);
    if (fused < 0 || !sched_bind(s, fused, cfg->binds[i], st)) return false;
    m->tiles[i][0] = fused;
    m->n_tiles[i] = 1;
  }
  if (c->t->warp_size > 0) {
    sched_val lo = {.kind = SV_INT, .i = spatial_product > 2 * c->t->warp_size ? c->t->warp_size : 1};
    sched_val hi = {.kind = SV_INT, .i = c->t->max_threads_per_block};
    if (!sched_annotate(s, block, "meta_schedule.thread_extent_low_inclusive", &lo, st) ||
        !sched_annotate(s, block, "meta_schedule.thread_extent_high_inclusive", &hi, st))
      return false;
  }
  return true;
}

/* The vector lengths a cooperative fetch of dtype t may use. */
static int fetch_lens(dg_dtype t, int64_t *out) {
  int n = 0;
  for (size_t i = 0; i < DG_ARRAY_LEN(vector_load_lens); i++) {
    int64_t v = vector_load_lens[i];
    bool keep = t == DG_F32   ? v <= 4
                : t == DG_F16 ? (v == 1 || v % 2 == 0) && v <= 8
                : t == DG_I8  ? v <= 16
                              : true;
    if (keep) out[n++] = v;
  }
  return n;
}

static bool cooperative_fetch(sched *s, int cache, dg_status *st) {
  dg_block *b = space_block(s, cache);
  DG_ASSERT(b && b->n_writes == 1);
  int64_t lens[DG_ARRAY_LEN(vector_load_lens)];
  int n = fetch_lens(b->writes[0].buf->dtype, lens);
  if (n == 0) return true;
  int v = space_sample_uniform(s, lens, n, st);
  if (v < 0) return false;
  sched_val val = {.kind = SV_RV, .i = v};
  return sched_annotate(s, cache, "meta_schedule.cooperative_fetch", &val, st);
}

/* AddWriteReuse ("must"): one write cache under the tile level. */
static bool add_write_reuse(mlt_state *m, int block, dg_status *st) {
  const mlt_config *cfg = &cuda_config;
  sched *s = m->s;
  int level = cfg->write_level;
  const dg_ann *a = ir_anns_get(&space_block(s, block)->anns, "meta_schedule.write_cache_level");
  if (a && a->kind == DG_ANN_INTS && a->nints == 1) level = (int)a->ints[0];
  if (level < 1 || level > (int)strlen(cfg->structure))
    return dg_fail(st, DG_ERR_INVALID, "MultiLevelTiling: write cache level %d out of range", level);
  int cache = sched_cache_write(s, block, 0, cfg->write_scope, NULL, 0, st);
  return cache >= 0 && sched_reverse_compute_at(s, cache, last_tile(m, level), true, -1, st);
}

/* AddReadReuse ("must"): a cache of every input (not the output) under the
 * tile level, its loops over the buffer fused, its fetch vectorized. */
static bool add_read_reuse(mlt_state *m, int block, dg_status *st) {
  const mlt_config *cfg = &cuda_config;
  sched *s = m->s;
  int at = last_tile(m, cfg->read_level);
  dg_block *b = space_block(s, block);
  int nr = b->n_reads;
  int ndim[64];
  if (nr > 64) return dg_fail(st, DG_ERR_INVALID, "MultiLevelTiling: too many reads");
  for (int i = 0; i < nr; i++)
    ndim[i] = b->reads[i].buf == b->writes[0].buf ? -1 : b->reads[i].buf->ndim;
  for (int i = 0; i < nr; i++) {
    if (ndim[i] < 0) continue;
    int cache = sched_cache_read(s, block, i, cfg->read_scope, &block, 1, st);
    if (cache < 0 || !sched_compute_at(s, cache, at, true, -1, st)) return false;
    int loops[64];
    int n = sched_get_loops(s, cache, loops, 64, st);
    if (n < ndim[i]) return n >= 0 && dg_fail(st, DG_ERR_INVALID, "MultiLevelTiling: cache has too few loops");
    if (ndim[i] > 0 && space_fuse(s, loops + n - ndim[i], ndim[i], st) < 0) return false;
    if (!cooperative_fetch(s, cache, st)) return false;
  }
  return true;
}

/* AddAsyncPipeline: on sm_80+, when the outer reduction tile holds exactly
 * the two copies and the compute loop, sketches with 4 and 5 stages (none
 * where the options ask for no software pipeline). */
static int add_async_pipeline(space_ctx *c, mlt_state *states, int n, dg_status *st) {
  if (c->t->arch < 80 || c->no_software_pipeline) return n;
  const char *sp = cuda_config.structure;
  int r0 = (int)(strchr(sp, 'R') - sp);
  int out = n;
  for (int k = 0; k < n; k++) {
    mlt_state *m = &states[k];
    if (m->n_tiles[r0] == 0) continue;
    dg_stmt *loop = space_loop(m->s, m->tiles[r0][m->n_tiles[r0] - 1]);
    if (!loop || loop->body->kind != DG_STMT_SEQ || loop->body->n != 3) continue;
    bool all_loops = true;
    for (int i = 0; i < 3; i++) all_loops = all_loops && loop->body->stmts[i]->kind == DG_STMT_FOR;
    if (!all_loops) continue;
    static const int stages[] = {4, 5};
    for (size_t j = 0; j < DG_ARRAY_LEN(stages); j++) {
      if (out == MAX_STATES) return dg_fail(st, DG_ERR_INVALID, "MultiLevelTiling: too many sketches"), -1;
      mlt_state *cp = &states[out];
      *cp = *m;
      if (!(cp->s = space_copy(c, m->s, st))) return -1;
      out++;
      int fused = space_fuse(cp->s, cp->tiles[r0], cp->n_tiles[r0], st);
      if (fused < 0) return -1;
      sched_val it[3];
      sched_val v = {.kind = SV_ARRAY, .items = it, .n = 3};
      int64_t stage_ann[3] = {0, 0, stages[j] - 2}, order_ann[3] = {0, 1, 2};
      for (int i = 0; i < 3; i++) it[i] = (sched_val){.kind = SV_INT, .i = stage_ann[i]};
      if (!sched_annotate(cp->s, fused, "software_pipeline_stage", &v, st)) return -1;
      for (int i = 0; i < 3; i++) it[i] = (sched_val){.kind = SV_INT, .i = order_ann[i]};
      if (!sched_annotate(cp->s, fused, "software_pipeline_order", &v, st)) return -1;
      it[0] = (sched_val){.kind = SV_INT, .i = 0};
      v.n = 1;
      if (!sched_annotate(cp->s, fused, "software_pipeline_async_stages", &v, st)) return -1;
    }
  }
  return out;
}

int rule_mlt_apply(space_ctx *c, sched *s, int block, sched **out, dg_status *st) {
  dg_block *b = space_block(s, block);
  if (!b || !space_needs_mlt(s, b)) {
    out[0] = s;
    return 1;
  }
  sched_val structure = {.kind = SV_STR, .s = cuda_config.structure};
  if (!sched_annotate(s, block, "meta_schedule.tiling_structure", &structure, st)) return -1;
  mlt_state *states = dg_calloc(MAX_STATES, sizeof(mlt_state));
  states[0].s = s;
  int n = 1;
  bool ok = tile_loop_nest(c, &states[0], block, st) && add_write_reuse(&states[0], block, st) &&
            add_read_reuse(&states[0], block, st);
  if (ok) {
    n = add_async_pipeline(c, states, 1, st);
    ok = n > 0;
    if (!ok)
      for (int k = 1; k < MAX_STATES; k++)
        if (states[k].s) sched_free(states[k].s);
  }
  if (ok)
    for (int k = 0; k < n; k++) out[k] = states[k].s;
  free(states);
  return ok ? n : -1;
}
