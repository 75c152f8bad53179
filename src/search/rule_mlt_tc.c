/* rule_mlt_tc.c: MultiLevelTilingTensorCore with MetaSchedule's WMMA groups
 * (schedule_rule/multi_level_tiling_tensor_core.cc), written with the steps
 * of dragon's hand-written WMMA GEMM (schedules/gemm_f16_4096.json).
 *
 * TVM first asks which WMMA group's compute intrinsic the block matches
 * (GetAutoTensorizeMappingInfo): a multiply-accumulate C += A * B of f16
 * operands (cast to the accumulator's f32 or f16), with iterators that
 * index C and A only (the tile's rows), C and B only (its columns), A and B
 * only (the reduction) and, optionally, all three (batch).
 * rule_mlt_tc_match does that match.
 *
 * TVM's sketch then starts with ReIndex of the three buffers and
 * TransformLayout / TransformBlockLayout to the intrinsic's [m, n, k] form
 * (padding extents to multiples of 16), and blockizes the 16x16x16 tile.
 * dragon has neither TransformLayout nor padding, so the sketch here
 * applies only to blocks already in GEMM form: one row, one column and one
 * reduction iterator, each a multiple of 16, indexed as C[.., i, j],
 * A[.., i, k] and B[.., k, j] (or B[.., j, k]: the _trans group), other
 * iterators indexing all three in leading dimensions only. There the
 * ReIndex and layout steps would be identities, and what is left is TVM's
 * tiling, caching and tensorization, recorded as the hand-written schedule
 * records it (direct Tensorize of loops instead of Blockize plus
 * meta_schedule.auto_tensorize marks, which RewriteTensorize would only
 * turn into the same Tensorize):
 *
 *   i, j, k split [None, 16]: the 16x16x16 tile, innermost; the outer
 *   parts tiled by SamplePerfectTile (max innermost factor 4) as
 *   "SSSRRSRS": i0 j0 | i1 j1 | i2 j2 | k0 | k1 | i3 j3 | k2 | i4 j4;
 *   level 0 (with any batch loops) fused to blockIdx.y, level 1 fused to
 *   blockIdx.x, level 2 fused to threadIdx.y (the warps; the lanes stay
 *   implicit: warp_execution);
 *   the output accumulated in wmma.accumulator under the warp loop,
 *   stored by wmma to global memory (one sketch, as the hand-written
 *   schedule does) or to a shared.dyn tile under blockIdx.x that the
 *   block copies out cooperatively (the other, TVM's write path, with a
 *   sampled vector length);
 *   A and B read into shared.dyn under k0 (StorageAlign 32, 8 on their
 *   rows, a cooperative fetch with a sampled vector length), and into
 *   wmma.matrix_a / matrix_b fragments under k1;
 *   the init decomposed at k0; fill, loads, mma and store tensorized, and
 *   the loops around them below the warp loop unrolled, so that fragment
 *   indices are constants.
 *
 * The only decisions are the three tiles and the vector lengths; the 16s
 * are literal Split factors, so a mutated or repaired tile keeps the WMMA
 * shape. Blocks that match but are not in that form (an extent that is not
 * a multiple of 16, a transposed A, an index that is not a plain iterator)
 * are left to MultiLevelTiling, which tiles them like any other GEMM, and
 * the fallback is reported (search_space.n_fallbacks). Non-matching blocks
 * are left alone, as in TVM. docs/design-spaces.md ("The tensor-core
 * sketch") has the details and the other differences from TVM.
 */
#include <inttypes.h>
#include <string.h>

#include "search/space_impl.h"

enum { TILE = 16, MAX_LOOPS = 64, MAX_INNERMOST = 4 };

/* The vector lengths of cooperative copies of f16 and f32 data
 * (MultiLevelTiling's list filtered by dtype). */
static const int64_t fetch_lens_f16[] = {1, 2, 4, 8};
static const int64_t fetch_lens_f32[] = {1, 2, 4};

/* A load of an f16 buffer, possibly cast to `acc`; its buffer or NULL. */
static const dg_expr *f16_operand(const dg_expr *e, dg_dtype acc) {
  if (e->kind == DG_EXPR_CAST && e->dtype == acc) e = e->a;
  return e->kind == DG_EXPR_LOAD && e->buf->dtype == DG_F16 ? e : NULL;
}

static bool load_uses(const dg_expr *load, const dg_var *v) {
  for (int i = 0; i < load->nargs; i++)
    if (ir_expr_uses_var(load->args[i], v)) return true;
  return false;
}

static bool store_uses(const dg_stmt *st, const dg_var *v) {
  for (int i = 0; i < st->nidx; i++)
    if (ir_expr_uses_var(st->idx[i], v)) return true;
  return false;
}

/* The operands of C += A * B with f16 A and B, or false. */
static bool mac_operands(const dg_block *b, const dg_expr **a_out, const dg_expr **b_out) {
  if (b->n_writes != 1 || !b->init || !b->body || b->body->kind != DG_STMT_STORE) return false;
  const dg_stmt *st = b->body;
  dg_dtype acc = st->buf->dtype;
  if (acc != DG_F32 && acc != DG_F16) return false;
  const dg_stmt *init = b->init;
  if (init->kind != DG_STMT_STORE || init->buf != st->buf || init->value->kind != DG_EXPR_FLOAT ||
      init->value->fval != 0)
    return false;
  const dg_expr *v = st->value;
  if (v->kind != DG_EXPR_ADD || v->a->kind != DG_EXPR_LOAD || v->a->buf != st->buf ||
      v->b->kind != DG_EXPR_MUL)
    return false;
  const dg_expr *a = f16_operand(v->b->a, acc), *bb = f16_operand(v->b->b, acc);
  if (!a || !bb || a->buf == bb->buf) return false;
  *a_out = a;
  *b_out = bb;
  return true;
}

const char *rule_mlt_tc_match(const dg_block *b) {
  const dg_expr *a, *bb;
  if (!mac_operands(b, &a, &bb)) return NULL;
  const dg_stmt *st = b->body;
  bool rows = false, cols = false, red = false;
  for (int i = 0; i < b->n_iters; i++) {
    const dg_var *x = b->iters[i].var;
    bool in_c = store_uses(st, x), in_a = load_uses(a, x), in_b = load_uses(bb, x);
    if (b->iters[i].kind == DG_ITER_REDUCE) {
      if (in_c || !in_a || !in_b) return NULL;
      red = true;
    } else if (in_c && in_a && !in_b) {
      rows = true;
    } else if (in_c && in_b && !in_a) {
      cols = true;
    } else if (!(in_c && in_a && in_b) && b->iters[i].extent != 1) {
      return NULL;
    }
  }
  if (!rows || !cols || !red) return NULL;
  return st->buf->dtype == DG_F32 ? "wmma_sync_16x16x16_f16f16f32_trans"
                                  : "wmma_sync_16x16x16_f16f16f16_trans";
}

/* ---- the GEMM form the sketch needs ------------------------------------------ */

typedef struct {
  int row, col, red;      /* iterator (= loop) indices */
  int outer[MAX_LOOPS];   /* every other iterator, in order */
  int n_outer;
  int a_read, b_read;     /* read-region indices of A and B */
  bool trans_b;           /* B is indexed [.., j, k] */
  bool f32_out;           /* the accumulator and C are f32 (else f16) */
  const char *sync, *fill, *load_a, *load_b, *store_global, *store_shared;
} tc_gemm;

static bool is_var(const dg_expr *e, const dg_var *v) { return e->kind == DG_EXPR_VAR && e->var == v; }

/* Leading indices use none of the tile's variables. */
static bool leading_free(dg_expr *const *idx, int n, const dg_block *b, const tc_gemm *g) {
  for (int d = 0; d < n - 2; d++)
    if (ir_expr_uses_var(idx[d], b->iters[g->row].var) ||
        ir_expr_uses_var(idx[d], b->iters[g->col].var) ||
        ir_expr_uses_var(idx[d], b->iters[g->red].var))
      return false;
  return true;
}

static int read_index(const dg_block *b, const dg_buffer *buf) {
  for (int i = 0; i < b->n_reads; i++)
    if (b->reads[i].buf == buf) return i;
  return -1;
}

/* Fills g when the block is a GEMM the sketch can tile as it is; otherwise
 * writes why not. */
static bool gemm_form(sched *s, const dg_block *b, tc_gemm *g, char *why, size_t n) {
  memset(g, 0, sizeof *g);
  g->row = g->col = g->red = -1;
  const dg_expr *a, *bb;
  if (!mac_operands(b, &a, &bb)) {
    snprintf(why, n, "it is not C += A * B");
    return false;
  }
  if (!space_trivial_binding(s, b)) {
    snprintf(why, n, "its loops are not its iterators");
    return false;
  }
  if (b->n_iters > MAX_LOOPS) {
    snprintf(why, n, "it has more than %d iterators", MAX_LOOPS);
    return false;
  }
  const dg_stmt *st = b->body;
  for (int i = 0; i < b->n_iters; i++) {
    const dg_var *x = b->iters[i].var;
    bool in_c = store_uses(st, x), in_a = load_uses(a, x), in_b = load_uses(bb, x);
    int *slot = b->iters[i].kind == DG_ITER_REDUCE ? &g->red
                : in_c && in_a && !in_b            ? &g->row
                : in_c && in_b && !in_a            ? &g->col
                                                   : NULL;
    if (!slot) {
      g->outer[g->n_outer++] = i;
      continue;
    }
    if (*slot >= 0) {
      snprintf(why, n, "it has more than one %s iterator",
               slot == &g->red ? "reduction" : slot == &g->row ? "row" : "column");
      return false;
    }
    *slot = i;
  }
  if (g->row < 0 || g->col < 0 || g->red < 0) {
    snprintf(why, n, "it lacks a row, column or reduction iterator");
    return false;
  }
  const dg_var *vi = b->iters[g->row].var, *vj = b->iters[g->col].var, *vk = b->iters[g->red].var;
  if (st->nidx < 2 || !is_var(st->idx[st->nidx - 2], vi) || !is_var(st->idx[st->nidx - 1], vj) ||
      !leading_free(st->idx, st->nidx, b, g)) {
    snprintf(why, n, "%s is not indexed [.., %s, %s]", st->buf->name, vi->name, vj->name);
    return false;
  }
  if (a->nargs < 2 || !is_var(a->args[a->nargs - 2], vi) || !is_var(a->args[a->nargs - 1], vk) ||
      !leading_free(a->args, a->nargs, b, g)) {
    snprintf(why, n, "%s is not indexed [.., %s, %s]", a->buf->name, vi->name, vk->name);
    return false;
  }
  bool kj = bb->nargs >= 2 && is_var(bb->args[bb->nargs - 2], vk) &&
            is_var(bb->args[bb->nargs - 1], vj);
  bool jk = bb->nargs >= 2 && is_var(bb->args[bb->nargs - 2], vj) &&
            is_var(bb->args[bb->nargs - 1], vk);
  if ((!kj && !jk) || !leading_free(bb->args, bb->nargs, b, g)) {
    snprintf(why, n, "%s is not indexed [.., %s, %s] or [.., %s, %s]", bb->buf->name, vk->name,
             vj->name, vj->name, vk->name);
    return false;
  }
  g->trans_b = jk;
  const int ext_of[3] = {g->row, g->col, g->red};
  for (int d = 0; d < 3; d++) {
    int64_t e = b->iters[ext_of[d]].extent;
    if (e % TILE != 0) {
      snprintf(why, n, "its extent %s = %" PRId64 " is not a multiple of %d (TVM pads with TransformLayout)",
               b->iters[ext_of[d]].var->name, e, TILE);
      return false;
    }
  }
  g->a_read = read_index(b, a->buf);
  g->b_read = read_index(b, bb->buf);
  if (g->a_read < 0 || g->b_read < 0) {
    snprintf(why, n, "its read regions do not list A and B");
    return false;
  }
  bool f32 = g->f32_out = st->buf->dtype == DG_F32;
  g->sync = f32 ? (jk ? "wmma_sync_16x16x16_f16f16f32_trans" : "wmma_sync_16x16x16_f16f16f32")
                : (jk ? "wmma_sync_16x16x16_f16f16f16_trans" : "wmma_sync_16x16x16_f16f16f16");
  g->fill = f32 ? "wmma_fill_16x16x16_f32" : "wmma_fill_16x16x16_f16";
  g->load_a = "wmma_load_16x16x16_f16_a_shared_dyn";
  g->load_b = jk ? "wmma_load_16x16x16_f16_b_trans_shared_dyn" : "wmma_load_16x16x16_f16_b_shared_dyn";
  g->store_global = f32 ? "wmma_store_16x16x16_f32_global" : "wmma_store_16x16x16_f16_global";
  g->store_shared = f32 ? "wmma_store_16x16x16_f32_shared_dyn" : "wmma_store_16x16x16_f16_shared_dyn";
  return true;
}

/* ---- the sketch ------------------------------------------------------------------ */

/* Split(loop, [None, 16]): out[0] the tiles, out[1] the 16 inside one. */
static bool split16(sched *s, int loop, int *out, dg_status *st) {
  sched_val f[2] = {{.kind = SV_NONE}, {.kind = SV_INT, .i = TILE}};
  return sched_split(s, loop, f, 2, true, false, out, st) == 2;
}

/* SamplePerfectTile + Split into n levels. */
static bool tile(sched *s, int loop, int n, int *out, dg_status *st) {
  int v[8];
  DG_ASSERT(n <= 8);
  if (sched_sample_perfect_tile(s, loop, n, MAX_INNERMOST, NULL, v, st) != n) return false;
  sched_val f[8];
  for (int i = 0; i < n; i++) f[i] = (sched_val){.kind = SV_RV, .i = v[i]};
  return sched_split(s, loop, f, n, true, false, out, st) == n;
}

static bool annotate_int(sched *s, int rv, const char *key, int64_t v, dg_status *st) {
  sched_val val = {.kind = SV_INT, .i = v};
  return sched_annotate(s, rv, key, &val, st);
}

/* A sampled vector length for the cooperative copy of block `cache`. */
static bool cooperative_fetch(sched *s, int cache, const int64_t *lens, int n, dg_status *st) {
  int v = space_sample_uniform(s, lens, n, st);
  if (v < 0) return false;
  sched_val val = {.kind = SV_RV, .i = v};
  return sched_annotate(s, cache, "meta_schedule.cooperative_fetch", &val, st);
}

/* A 2-D tile copy (fragment load or store) under the loops of `block`: its
 * last two loops split by 16, the 16x16 inside tensorized with `intrin`,
 * the tile loops unrolled. */
static bool tensorize_copy(sched *s, int block, const char *intrin, dg_status *st) {
  int loops[MAX_LOOPS];
  int n = sched_get_loops(s, block, loops, MAX_LOOPS, st);
  if (n < 2) return n >= 0 && dg_fail(st, DG_ERR_INVALID, "a fragment copy has %d loops", n);
  int r[2], c[2];
  if (!split16(s, loops[n - 2], r, st) || !split16(s, loops[n - 1], c, st)) return false;
  int order[4] = {r[0], c[0], r[1], c[1]};
  return sched_reorder(s, order, 4, st) && sched_tensorize(s, r[1], intrin, true, st) &&
         sched_unroll(s, r[0], st) && sched_unroll(s, c[0], st);
}

/* The copy of a shared.dyn cache moved under loop `at` (if >= 0); with
 * align its rows padded as MetaSchedule asks for f16 operands
 * (StorageAlign 32, 8 on the second-to-last axis); its last two loops
 * (over the tile) fused for the cooperative fetch. */
static bool place_shared(sched *s, int cache, int at, bool align, dg_status *st) {
  if (at >= 0 && !sched_compute_at(s, cache, at, true, -1, st)) return false;
  if (align) {
    dg_block *b = space_block(s, cache);
    DG_ASSERT(b && b->n_writes == 1);
    if (!sched_storage_align(s, cache, 0, b->writes[0].buf->ndim - 2, 32, 8, st)) return false;
  }
  int loops[MAX_LOOPS];
  int n = sched_get_loops(s, cache, loops, MAX_LOOPS, st);
  if (n < 2) return n >= 0 && dg_fail(st, DG_ERR_INVALID, "a shared copy has %d loops", n);
  return space_fuse(s, loops + n - 2, 2, st) >= 0;
}

/* The steps of the hand-written schedule, reordered where dragon's
 * primitives need it: Blockize (inside Tensorize) divides bindings that
 * are linear in the loops, which fused loops are not, so every Tensorize
 * comes before the Fuse and Bind of the levels; ComputeAt relaxes a
 * shared.dyn region over the thread loops above it, so the operand copies
 * are moved under k0 after the Bind (until then they are whole-buffer
 * copies at the root); the cooperative-fetch marks come last, as
 * RewriteCooperativeFetch reads the thread extents bound before them. */
static bool annotate_ints(sched *s, int rv, const char *key, const int64_t *v, int n,
                          dg_status *st) {
  sched_val it[8];
  DG_ASSERT(n <= 8);
  for (int i = 0; i < n; i++) it[i] = (sched_val){.kind = SV_INT, .i = v[i]};
  sched_val val = {.kind = SV_ARRAY, .items = it, .n = n};
  return sched_annotate(s, rv, key, &val, st);
}

/* AddSoftwarePipeline (use_software_pipeline, WMMA groups): the shared
 * read caches get their register stage and double buffer; k1 prefetches
 * the fragments one iteration ahead (stages 0, 0, 1 over the two fragment
 * loads and the compute); k0, whose body is then the two register stages,
 * the two shared stores and the inner pipeline's prologue, body and
 * epilogue, runs the register loads of tile k0 + 1 before the inner body
 * of tile k0 and the shared stores and the next inner prologue after it. */
static bool add_software_pipeline(sched *s, int sa, int sb, int k0, int k1, dg_status *st) {
  static const int64_t inner_stage[] = {0, 0, 1}, inner_order[] = {0, 1, 2};
  static const int64_t outer_stage[] = {0, 0, 0, 0, 0, 1, 1}, outer_order[] = {0, 3, 1, 4, 5, 2, 6};
  const int caches[2] = {sa, sb};
  for (int i = 0; i < 2; i++)
    if (!annotate_int(s, caches[i], "tirx.manifest_shared_memory_local_stage", 1, st) ||
        !annotate_int(s, caches[i], "double_buffer_scope", 0, st))
      return false;
  return annotate_ints(s, k1, "software_pipeline_stage", inner_stage, 3, st) &&
         annotate_ints(s, k1, "software_pipeline_order", inner_order, 3, st) &&
         annotate_ints(s, k0, "software_pipeline_stage", outer_stage, 7, st) &&
         annotate_ints(s, k0, "software_pipeline_order", outer_order, 7, st);
}

static bool tc_sketch(sched *s, int block, const tc_gemm *g, bool shared_out, bool pipelined,
                      dg_status *st) {
  sched_val structure = {.kind = SV_STR, .s = "SSSRRSRS"};
  if (!sched_annotate(s, block, "meta_schedule.tiling_structure", &structure, st)) return false;
  int loops[MAX_LOOPS];
  int n = sched_get_loops(s, block, loops, MAX_LOOPS, st);
  if (n < 0) return false;
  if (n != space_block(s, block)->n_iters)
    return dg_fail(st, DG_ERR_INVALID, "block has %d loops for %d iterators", n,
                   space_block(s, block)->n_iters);
  int it[2], jt[2], kt[2], i[5], j[5], k[3];
  if (!split16(s, loops[g->row], it, st) || !split16(s, loops[g->col], jt, st) ||
      !split16(s, loops[g->red], kt, st) || !tile(s, it[0], 5, i, st) ||
      !tile(s, jt[0], 5, j, st) || !tile(s, kt[0], 3, k, st))
    return false;
  int order[MAX_LOOPS + 16], no = 0;
  for (int x = 0; x < g->n_outer; x++) order[no++] = loops[g->outer[x]];
  const int tail[] = {i[0], j[0], i[1], j[1], i[2], j[2], k[0], k[1], i[3],
                      j[3], k[2], i[4], j[4], it[1], jt[1], kt[1]};
  for (size_t x = 0; x < DG_ARRAY_LEN(tail); x++) order[no++] = tail[x];
  if (!sched_reorder(s, order, no, st)) return false;
  int n_bound = g->n_outer + 6; /* the loops that become blockIdx.y/x, threadIdx.y */

  /* the output: wmma.accumulator fragments per warp, stored to global
   * memory, or to a shared.dyn tile per block that is copied out */
  int out_shared = -1;
  if (shared_out) {
    out_shared = sched_cache_write(s, block, 0, DG_SCOPE_SHARED_DYN, NULL, 0, st);
    if (out_shared < 0 || !sched_reverse_compute_at(s, out_shared, j[1], true, -1, st) ||
        !place_shared(s, out_shared, -1, false, st))
      return false;
  }
  int acc = sched_cache_write(s, block, 0, DG_SCOPE_WMMA_ACC, NULL, 0, st);
  if (acc < 0 || !sched_reverse_compute_at(s, acc, j[2], true, -1, st)) return false;

  /* the operands: shared.dyn copies (placed below), fragments under k1 */
  int sa = sched_cache_read(s, block, g->a_read, DG_SCOPE_SHARED_DYN, &block, 1, st);
  if (sa < 0) return false;
  int sb = sched_cache_read(s, block, g->b_read, DG_SCOPE_SHARED_DYN, &block, 1, st);
  if (sb < 0) return false;
  int fa = sched_cache_read(s, block, g->a_read, DG_SCOPE_WMMA_A, &block, 1, st);
  if (fa < 0 || !sched_compute_at(s, fa, k[1], true, -1, st)) return false;
  int fb = sched_cache_read(s, block, g->b_read, DG_SCOPE_WMMA_B, &block, 1, st);
  if (fb < 0 || !sched_compute_at(s, fb, k[1], true, -1, st)) return false;

  /* the multiply-accumulate and its init */
  int init = sched_decompose_reduction(s, block, k[0], st);
  if (init < 0 || !sched_tensorize(s, it[1], g->sync, true, st)) return false;
  const int unrolled[] = {k[1], i[3], j[3], k[2], i[4], j[4]};
  for (size_t x = 0; x < DG_ARRAY_LEN(unrolled); x++)
    if (!sched_unroll(s, unrolled[x], st)) return false;
  int il[MAX_LOOPS];
  int ni = sched_get_loops(s, init, il, MAX_LOOPS, st);
  if (ni < n_bound + 2) return ni >= 0 && dg_fail(st, DG_ERR_INVALID, "the init has %d loops", ni);
  if (!sched_tensorize(s, il[ni - 2], g->fill, true, st)) return false;
  for (int x = n_bound; x < ni - 2; x++)
    if (!sched_unroll(s, il[x], st)) return false;
  if (!tensorize_copy(s, fa, g->load_a, st) || !tensorize_copy(s, fb, g->load_b, st) ||
      !tensorize_copy(s, acc, shared_out ? g->store_shared : g->store_global, st))
    return false;

  /* blockIdx.y: the batch loops and level 0; blockIdx.x: level 1;
   * threadIdx.y: level 2, one warp per iteration */
  int lv0[MAX_LOOPS + 2], n0 = 0;
  for (int x = 0; x < g->n_outer; x++) lv0[n0++] = loops[g->outer[x]];
  lv0[n0++] = i[0];
  lv0[n0++] = j[0];
  int lv1[2] = {i[1], j[1]}, lv2[2] = {i[2], j[2]};
  int by = space_fuse(s, lv0, n0, st);
  if (by < 0 || !sched_bind(s, by, DG_TAG_BLOCK_Y, st)) return false;
  int bx = space_fuse(s, lv1, 2, st);
  if (bx < 0 || !sched_bind(s, bx, DG_TAG_BLOCK_X, st)) return false;
  int ty = space_fuse(s, lv2, 2, st);
  if (ty < 0 || !sched_bind(s, ty, DG_TAG_THREAD_Y, st)) return false;
  if (!annotate_int(s, block, "warp_execution", 1, st)) return false;

  /* the operand tiles of a block, under k0 */
  if (!place_shared(s, sa, k[0], true, st) || !place_shared(s, sb, k[0], true, st))
    return false;
  bool ok = out_shared < 0 ||
            (g->f32_out ? cooperative_fetch(s, out_shared, fetch_lens_f32,
                                            (int)DG_ARRAY_LEN(fetch_lens_f32), st)
                        : cooperative_fetch(s, out_shared, fetch_lens_f16,
                                            (int)DG_ARRAY_LEN(fetch_lens_f16), st));
  return ok &&
         cooperative_fetch(s, sa, fetch_lens_f16, (int)DG_ARRAY_LEN(fetch_lens_f16), st) &&
         cooperative_fetch(s, sb, fetch_lens_f16, (int)DG_ARRAY_LEN(fetch_lens_f16), st) &&
         (!pipelined || add_software_pipeline(s, sa, sb, k[0], k[1], st));
}

int rule_mlt_tc_apply(space_ctx *c, sched *s, int block, sched **out, dg_status *st) {
  out[0] = s;
  dg_block *b = space_block(s, block);
  if (!b || space_is_root(s, b) || space_block_is_tiled(b)) return 1;
  const char *intrin = rule_mlt_tc_match(b);
  if (!intrin) return 1;
  tc_gemm g;
  char why[160];
  if (!gemm_form(s, b, &g, why, sizeof why)) {
    if (!c->n_fallbacks++)
      snprintf(c->fallback, sizeof c->fallback,
               "block %.60s matches %.40s but %.90s; MultiLevelTiling tiles it",
               b->name, intrin, why);
    return 1;
  }
  /* the other sketches are copies made before any step: the shared.dyn
   * output, and on sm_80+ both again with TVM's use_software_pipeline
   * (AddSoftwarePipeline needs a reduction of more than one tile) */
  bool piped = c->t->arch >= 80 && !c->no_software_pipeline && b->iters[g.red].extent > TILE;
  int n = piped ? 4 : 2;
  for (int i = 1; i < n; i++)
    if (!(out[i] = space_copy(c, s, st))) {
      for (int j = 1; j < i; j++) sched_free(out[j]);
      return -1;
    }
  for (int i = 0; i < n; i++)
    if (!tc_sketch(out[i], block, &g, i % 2 == 1, i >= 2, st)) {
      for (int j = 1; j < n; j++) sched_free(out[j]);
      out[0] = s;
      return -1;
    }
  return n;
}
