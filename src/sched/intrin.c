/* intrin.c: the registry of tensor intrinsics (TVM's WMMA set of
 * python/tvm/tir/tensor_intrin/cuda.py: every 16x16x16 fill, load, sync and
 * store of the f16 and s8 families, the shared, shared.dyn and global
 * variants) and the matcher that checks a block against one (the role of
 * TVM's TensorizeComparator against the intrinsic's description).
 *
 * The matcher works on meaning, not on a description kernel: it reads the
 * block's loop nest, its innermost block and that block's one store, and
 * checks them against the contract in include/dragon/intrin.h, in the order
 * shape, body pattern, dtypes, storage scopes, regions, so that the first
 * reason given is the most basic one. It does not look at loop kinds (they
 * do not change what is computed) and does not accept reorderings of the
 * pattern that TVM's structural comparison would refuse either (C + A*B
 * with C's load on the left). */
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "dragon/intrin.h"

/* X(name, kind, m, n, k, in dtype, out dtype, src scope, dst scope, trans) */
#define F32 DG_F32
#define F16 DG_F16
#define I8 DG_I8
#define I32 DG_I32
#define NOSCOPE DG_SCOPE_COUNT
#define SH DG_SCOPE_SHARED
#define SHD DG_SCOPE_SHARED_DYN
#define GL DG_SCOPE_GLOBAL
#define MA DG_SCOPE_WMMA_A
#define MB DG_SCOPE_WMMA_B
#define ACC DG_SCOPE_WMMA_ACC
#define DG_INTRIN_LIST(X)                                                           \
  X("wmma_fill_16x16x16_f32", FILL, 16, 16, 16, F32, F32, NOSCOPE, ACC, 0)          \
  X("wmma_fill_16x16x16_f16", FILL, 16, 16, 16, F16, F16, NOSCOPE, ACC, 0)          \
  X("wmma_fill_16x16x16_s32", FILL, 16, 16, 16, I32, I32, NOSCOPE, ACC, 0)          \
  X("wmma_load_16x16x16_f16_a_shared", LOAD_A, 16, 16, 16, F16, F16, SH, MA, 0)     \
  X("wmma_load_16x16x16_f16_a_shared_dyn", LOAD_A, 16, 16, 16, F16, F16, SHD, MA, 0) \
  X("wmma_load_16x16x16_f16_b_shared", LOAD_B, 16, 16, 16, F16, F16, SH, MB, 0)     \
  X("wmma_load_16x16x16_f16_b_shared_dyn", LOAD_B, 16, 16, 16, F16, F16, SHD, MB, 0) \
  X("wmma_load_16x16x16_f16_a_trans_shared", LOAD_A, 16, 16, 16, F16, F16, SH, MA, 1) \
  X("wmma_load_16x16x16_f16_a_trans_shared_dyn", LOAD_A, 16, 16, 16, F16, F16, SHD, MA, 1) \
  X("wmma_load_16x16x16_f16_b_trans_shared", LOAD_B, 16, 16, 16, F16, F16, SH, MB, 1) \
  X("wmma_load_16x16x16_f16_b_trans_shared_dyn", LOAD_B, 16, 16, 16, F16, F16, SHD, MB, 1) \
  X("wmma_load_16x16x16_s8_a_shared", LOAD_A, 16, 16, 16, I8, I8, SH, MA, 0)        \
  X("wmma_load_16x16x16_s8_a_shared_dyn", LOAD_A, 16, 16, 16, I8, I8, SHD, MA, 0)   \
  X("wmma_load_16x16x16_s8_b_shared", LOAD_B, 16, 16, 16, I8, I8, SH, MB, 0)        \
  X("wmma_load_16x16x16_s8_b_shared_dyn", LOAD_B, 16, 16, 16, I8, I8, SHD, MB, 0)   \
  X("wmma_load_16x16x16_s8_a_trans_shared", LOAD_A, 16, 16, 16, I8, I8, SH, MA, 1)  \
  X("wmma_load_16x16x16_s8_a_trans_shared_dyn", LOAD_A, 16, 16, 16, I8, I8, SHD, MA, 1) \
  X("wmma_load_16x16x16_s8_b_trans_shared", LOAD_B, 16, 16, 16, I8, I8, SH, MB, 1)  \
  X("wmma_load_16x16x16_s8_b_trans_shared_dyn", LOAD_B, 16, 16, 16, I8, I8, SHD, MB, 1) \
  X("wmma_sync_16x16x16_f16f16f32", MMA, 16, 16, 16, F16, F32, NOSCOPE, ACC, 0)     \
  X("wmma_sync_16x16x16_f16f16f32_trans", MMA, 16, 16, 16, F16, F32, NOSCOPE, ACC, 1) \
  X("wmma_sync_16x16x16_f16f16f16", MMA, 16, 16, 16, F16, F16, NOSCOPE, ACC, 0)     \
  X("wmma_sync_16x16x16_f16f16f16_trans", MMA, 16, 16, 16, F16, F16, NOSCOPE, ACC, 1) \
  X("wmma_sync_16x16x16_s8s8s32", MMA, 16, 16, 16, I8, I32, NOSCOPE, ACC, 0)        \
  X("wmma_sync_16x16x16_s8s8s32_trans", MMA, 16, 16, 16, I8, I32, NOSCOPE, ACC, 1)  \
  X("wmma_store_16x16x16_f32_shared", STORE, 16, 16, 16, F32, F32, ACC, SH, 0)      \
  X("wmma_store_16x16x16_f32_shared_dyn", STORE, 16, 16, 16, F32, F32, ACC, SHD, 0) \
  X("wmma_store_16x16x16_f32_global", STORE, 16, 16, 16, F32, F32, ACC, GL, 0)      \
  X("wmma_store_16x16x16_f16_shared", STORE, 16, 16, 16, F16, F16, ACC, SH, 0)      \
  X("wmma_store_16x16x16_f16_shared_dyn", STORE, 16, 16, 16, F16, F16, ACC, SHD, 0) \
  X("wmma_store_16x16x16_f16_global", STORE, 16, 16, 16, F16, F16, ACC, GL, 0)      \
  X("wmma_store_16x16x16_s32_shared", STORE, 16, 16, 16, I32, I32, ACC, SH, 0)      \
  X("wmma_store_16x16x16_s32_shared_dyn", STORE, 16, 16, 16, I32, I32, ACC, SHD, 0) \
  X("wmma_store_16x16x16_s32_global", STORE, 16, 16, 16, I32, I32, ACC, GL, 0)

static const dg_intrin registry[] = {
#define X(nm, kd, mm, nn, kk, in, out, src, dst, tr)                                 \
  {.name = nm,                                                                       \
   .kind = DG_INTRIN_##kd,                                                           \
   .m = mm,                                                                          \
   .n = nn,                                                                          \
   .k = kk,                                                                          \
   .in_dtype = in,                                                                   \
   .out_dtype = out,                                                                 \
   .src_scope = src,                                                                 \
   .dst_scope = dst,                                                                 \
   .trans = tr,                                                                      \
   .layout = tr ? "col_major" : "row_major"},
    DG_INTRIN_LIST(X)
#undef X
};

#define X(nm, kd, mm, nn, kk, in, out, src, dst, tr) +1
enum { N_INTRIN = 0 DG_INTRIN_LIST(X) };
#undef X
_Static_assert(sizeof registry / sizeof registry[0] == N_INTRIN, "one descriptor per intrinsic");

static const char *const kind_names[] = {
#define X(e, s) s,
    DG_INTRIN_KIND_LIST(X)
#undef X
};
_Static_assert(sizeof kind_names / sizeof kind_names[0] == DG_INTRIN_KIND_COUNT,
               "one name per intrinsic kind");

const char *dg_intrin_kind_name(dg_intrin_kind k) {
  return (unsigned)k < DG_INTRIN_KIND_COUNT ? kind_names[k] : "?";
}

int intrin_count(void) { return N_INTRIN; }

const dg_intrin *intrin_at(int i) { return i >= 0 && i < N_INTRIN ? &registry[i] : NULL; }

const dg_intrin *intrin_find(const char *name) {
  if (!name) return NULL;
  for (int i = 0; i < N_INTRIN; i++)
    if (strcmp(registry[i].name, name) == 0) return &registry[i];
  return NULL;
}

/* Levenshtein distance, capped at the longer length (names are short). */
static int edit_distance(const char *a, const char *b) {
  size_t la = strlen(a), lb = strlen(b);
  if (la > 127) la = 127;
  if (lb > 127) lb = 127;
  int row[128];
  for (size_t j = 0; j <= lb; j++) row[j] = (int)j;
  for (size_t i = 1; i <= la; i++) {
    int diag = row[0];
    row[0] = (int)i;
    for (size_t j = 1; j <= lb; j++) {
      int up = row[j];
      int best = diag + (a[i - 1] != b[j - 1]);
      if (up + 1 < best) best = up + 1;
      if (row[j - 1] + 1 < best) best = row[j - 1] + 1;
      row[j] = best;
      diag = up;
    }
  }
  return row[lb];
}

int intrin_suggest(const char *name, const char **out, int max) {
  int dist[N_INTRIN], order[N_INTRIN];
  for (int i = 0; i < N_INTRIN; i++) {
    dist[i] = edit_distance(name ? name : "", registry[i].name);
    order[i] = i;
  }
  for (int i = 1; i < N_INTRIN; i++) /* stable insertion sort by distance */
    for (int j = i; j > 0 && dist[order[j]] < dist[order[j - 1]]; j--) {
      int t = order[j];
      order[j] = order[j - 1];
      order[j - 1] = t;
    }
  int n = 0;
  for (int i = 0; i < N_INTRIN && n < max; i++) out[n++] = registry[order[i]].name;
  return n;
}

void intrin_unknown_message(const char *name, char *buf, size_t n) {
  const char *close[3];
  int k = intrin_suggest(name, close, 3);
  snprintf(buf, n, "unknown tensor intrinsic '%s' (closest: %s%s%s%s%s)", name ? name : "",
           k > 0 ? close[0] : "", k > 1 ? ", " : "", k > 1 ? close[1] : "", k > 2 ? ", " : "",
           k > 2 ? close[2] : "");
}

bool intrin_is_name_prefix(const char *s, size_t n) {
  for (int i = 0; i < N_INTRIN; i++)
    if (strncmp(registry[i].name, s, n) == 0 && strlen(registry[i].name) >= n) return true;
  return false;
}

/* ---- matching ---------------------------------------------------------------- */

typedef struct {
  dg_func *f;
  const dg_intrin *in;
  const dg_block *b;
  char *why;
  size_t n;
} mctx;

static bool mfail(mctx *c, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static bool mfail(mctx *c, const char *fmt, ...) {
  if (!c->why || !c->n) return false;
  int k = snprintf(c->why, c->n, "block %s does not match %s: ", c->b->name, c->in->name);
  if (k < 0 || (size_t)k >= c->n) return false;
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(c->why + k, c->n - (size_t)k, fmt, ap);
  va_end(ap);
  return false;
}

/* The tile an operand covers: rows x cols. */
static void tile_of(const dg_intrin *in, int operand, int64_t *rows, int64_t *cols) {
  switch (in->kind) {
    case DG_INTRIN_FILL:
    case DG_INTRIN_STORE: *rows = in->m, *cols = in->n; return;
    case DG_INTRIN_LOAD_A:
      *rows = in->trans ? in->k : in->m;
      *cols = in->trans ? in->m : in->k;
      return;
    case DG_INTRIN_LOAD_B:
      *rows = in->trans ? in->n : in->k;
      *cols = in->trans ? in->k : in->n;
      return;
    case DG_INTRIN_MMA:
      if (operand == 0) *rows = in->m, *cols = in->k;
      else if (operand == 1) *rows = in->trans ? in->n : in->k, *cols = in->trans ? in->k : in->n;
      else *rows = in->m, *cols = in->n;
      return;
    case DG_INTRIN_KIND_COUNT: break;
  }
  DG_UNREACHABLE();
}

static const char *pattern_text(const dg_intrin *in) {
  switch (in->kind) {
    case DG_INTRIN_FILL: return "C[i, j] = 0";
    case DG_INTRIN_LOAD_A:
    case DG_INTRIN_LOAD_B: return "C[i, j] = A[i, j] (a copy into the fragment)";
    case DG_INTRIN_STORE: return "C[i, j] = A[i, j] (a copy out of the accumulator)";
    case DG_INTRIN_MMA:
      if (in->in_dtype != in->out_dtype)
        return in->trans ? "C[i, j] = C[i, j] + cast(A[i, k]) * cast(B[j, k])"
                         : "C[i, j] = C[i, j] + cast(A[i, k]) * cast(B[k, j])";
      return in->trans ? "C[i, j] = C[i, j] + A[i, k] * B[j, k]"
                       : "C[i, j] = C[i, j] + A[i, k] * B[k, j]";
    case DG_INTRIN_KIND_COUNT: break;
  }
  return "?";
}

/* The origin of one index: idx - v, which must not use the tile's
 * variables (v NULL: a leading dimension, idx itself). NULL if it does. */
static dg_expr *index_origin(mctx *c, dg_expr *idx, const dg_var *v, dg_var *const *tile,
                             int nt) {
  dg_expr *o = idx;
  if (v) {
    if (idx->dtype != v->dtype) return NULL;
    o = ir_simplify(c->f, ir_sub(c->f, idx, ir_var(c->f, (dg_var *)v)), NULL);
  }
  for (int t = 0; t < nt; t++)
    if (ir_expr_uses_var(o, tile[t])) return NULL;
  return o;
}

/* An access buf[idx] of a tile indexed [.., row, col]; fills op. */
static bool access_tile(mctx *c, const char *role, dg_buffer *buf, dg_expr **idx, int nidx,
                        const dg_var *row, const dg_var *col, dg_var *const *tile, int nt,
                        intrin_operand *op) {
  if (nidx != buf->ndim || nidx < 2)
    return mfail(c, "%s %s has rank %d; a tile needs at least 2 dimensions", role, buf->name,
                 nidx);
  op->buf = buf;
  op->ldm = buf->shape[buf->ndim - 1];
  for (int d = 0; d < nidx; d++) {
    const dg_var *v = d == nidx - 2 ? row : d == nidx - 1 ? col : NULL;
    op->origin[d] = index_origin(c, idx[d], v, tile, nt);
    if (!op->origin[d]) {
      dg_str s;
      dg_str_init(&s);
      ir_print_expr(&s, idx[d]);
      bool r = mfail(c,
                     "body pattern mismatch: index %d of %s %s is %s, expected %s%s plus an "
                     "offset free of the tile's variables (the pattern is %s)",
                     d, role, buf->name, s.s, v ? "" : "no tile variable", v ? v->name : "",
                     pattern_text(c->in));
      dg_str_free(&s);
      return r;
    }
  }
  return true;
}

static bool is_zero(const dg_expr *e) {
  if (e->kind == DG_EXPR_FLOAT) return e->fval == 0.0;
  if (e->kind == DG_EXPR_INT) return e->ival == 0;
  return false;
}

static bool want_dtype(mctx *c, const char *role, const dg_buffer *buf, dg_dtype want) {
  if (buf->dtype == want) return true;
  return mfail(c, "dtype mismatch: %s %s is %s, the intrinsic needs %s", role, buf->name,
               dg_dtype_name(buf->dtype), dg_dtype_name(want));
}

static bool want_scope(mctx *c, const char *role, const dg_buffer *buf, dg_scope want) {
  if (buf->scope == want) return true;
  return mfail(c, "wrong scope: %s %s is in '%s', the intrinsic needs '%s'", role, buf->name,
               dg_scope_name(buf->scope), dg_scope_name(want));
}

/* The block's region of op->buf (among reads or writes) must be the tile. */
static bool region_is_tile(mctx *c, const intrin_operand *op, int64_t rows, int64_t cols,
                           bool write) {
  const dg_region *rs = write ? c->b->writes : c->b->reads;
  int nr = write ? c->b->n_writes : c->b->n_reads;
  const dg_region *r = NULL;
  for (int i = 0; i < nr; i++)
    if (rs[i].buf == op->buf) r = &rs[i];
  if (!r)
    return mfail(c, "the block's %s do not list %s", write ? "writes" : "reads", op->buf->name);
  int nd = op->buf->ndim;
  for (int d = 0; d < nd; d++) {
    int64_t want = d == nd - 2 ? rows : d == nd - 1 ? cols : 1, ext;
    dg_expr *diff = r->min[d]->dtype == op->origin[d]->dtype
                        ? ir_simplify(c->f, ir_sub(c->f, r->min[d], op->origin[d]), NULL)
                        : NULL;
    int64_t zero;
    if (!ir_is_const_int(r->ext[d], &ext) || ext != want || !diff ||
        !ir_is_const_int(diff, &zero) || zero != 0) {
      dg_str s;
      dg_str_init(&s);
      dg_str_puts(&s, "starts at ");
      ir_print_expr(&s, r->min[d]);
      dg_str_puts(&s, " with extent ");
      ir_print_expr(&s, r->ext[d]);
      dg_str_puts(&s, ", the tile starts at ");
      ir_print_expr(&s, op->origin[d]);
      bool res = mfail(c, "the %s region of %s in dimension %d %s with extent %lld: not the "
                          "%lldx%lld tile the body accesses",
                       write ? "write" : "read", op->buf->name, d, s.s, (long long)want,
                       (long long)rows, (long long)cols);
      dg_str_free(&s);
      return res;
    }
  }
  return true;
}

bool intrin_match(const dg_intrin *in, const dg_func *f, const dg_block *b, char *why,
                  size_t n) {
  return intrin_bind(in, f, b, NULL, why, n);
}

bool intrin_bind(const dg_intrin *in, const dg_func *f, const dg_block *b, intrin_binding *out,
                 char *why, size_t n) {
  mctx c = {(dg_func *)f, in, b, why, n};
  if (why && n) why[0] = 0;
  bool mma = in->kind == DG_INTRIN_MMA;
  int rank = mma ? 3 : 2;
  int64_t want[3];
  if (mma) {
    want[0] = in->m, want[1] = in->n, want[2] = in->k;
  } else {
    tile_of(in, 0, &want[0], &want[1]);
  }
  char shape[48];
  if (mma)
    snprintf(shape, sizeof shape, "%dx%dx%d", in->m, in->n, in->k);
  else
    snprintf(shape, sizeof shape, "%lldx%lld", (long long)want[0], (long long)want[1]);
  if (b->init)
    return mfail(&c, "the block has an init and the intrinsic has none (decompose the "
                     "reduction first)");

  /* shape: a chain of `rank` loops with the tile's extents, then one block */
  const dg_stmt *loops[3];
  int nl = 0;
  const dg_stmt *s = b->body;
  char found[96] = "";
  size_t fl = 0;
  while (s && s->kind == DG_STMT_FOR) {
    if (nl < 3) loops[nl] = s;
    nl++;
    if (fl < sizeof found)
      fl += (size_t)snprintf(found + fl, sizeof found - fl, "%s%lld", nl > 1 ? "x" : "",
                             (long long)s->extent);
    s = s->body;
  }
  if (!s || s->kind != DG_STMT_BLOCK)
    return mfail(&c, "shape mismatch: the intrinsic computes a %s tile as %d loops around one "
                     "block; the block's body is not such a loop nest",
                 shape, rank);
  bool ext_ok = nl == rank;
  for (int i = 0; ext_ok && i < rank; i++) ext_ok = loops[i]->extent == want[i];
  if (!ext_ok)
    return mfail(&c, "shape mismatch: the intrinsic computes a %s tile, the block's loops are %s",
                 shape, nl ? found : "none");
  const dg_block *ib = s->block;
  if (ib->n_iters != rank)
    return mfail(&c, "shape mismatch: inner block %s has %d iteration variables, the %s tile "
                     "needs %d",
                 ib->name, ib->n_iters, shape, rank);
  dg_var *tile[3];
  for (int i = 0; i < rank; i++) {
    const dg_iter *it = &ib->iters[i];
    dg_iter_kind k = mma && i == 2 ? DG_ITER_REDUCE : DG_ITER_SPATIAL;
    if (it->extent != want[i] || it->kind != k || it->binding->kind != DG_EXPR_VAR ||
        it->binding->var != loops[i]->loop_var)
      return mfail(&c, "shape mismatch: inner block %s's iteration variable %s must be %s(%lld) "
                       "bound to loop %s",
                   ib->name, it->var->name, k == DG_ITER_SPATIAL ? "S" : "R", (long long)want[i],
                   loops[i]->loop_var->name);
    tile[i] = it->var;
  }
  if (ib->predicate) return mfail(&c, "inner block %s has a predicate", ib->name);
  if (ib->init) return mfail(&c, "inner block %s has an init", ib->name);
  const dg_stmt *st = ib->body;
  if (!st || st->kind != DG_STMT_STORE)
    return mfail(&c, "body pattern mismatch: inner block %s's body is not one store (the "
                     "pattern is %s)",
                 ib->name, pattern_text(in));

  /* body pattern, then dtypes, then scopes, then regions */
  intrin_binding bd = {.inner = ib};
  const dg_var *vi = tile[0], *vj = tile[1], *vk = mma ? tile[2] : NULL;
  dg_expr *v = st->value;
  switch (in->kind) {
    case DG_INTRIN_FILL: {
      bd.n = 1;
      if (!access_tile(&c, "output", st->buf, st->idx, st->nidx, vi, vj, tile, rank, &bd.ops[0]))
        return false;
      if (!is_zero(v))
        return mfail(&c, "body pattern mismatch: the stored value is not 0 (the pattern is %s)",
                     pattern_text(in));
      if (!want_dtype(&c, "output", st->buf, in->out_dtype)) return false;
      if (!want_scope(&c, "output", st->buf, in->dst_scope)) return false;
      if (!region_is_tile(&c, &bd.ops[0], want[0], want[1], true)) return false;
      if (b->n_reads != 0) return mfail(&c, "the block reads %s; a fill reads nothing", b->reads[0].buf->name);
      break;
    }
    case DG_INTRIN_LOAD_A:
    case DG_INTRIN_LOAD_B:
    case DG_INTRIN_STORE: {
      bd.n = 2;
      if (v->kind != DG_EXPR_LOAD)
        return mfail(&c, "body pattern mismatch: the stored value is not a load (the pattern "
                         "is %s)",
                     pattern_text(in));
      if (!access_tile(&c, "source", v->buf, v->args, v->nargs, vi, vj, tile, rank, &bd.ops[0]) ||
          !access_tile(&c, "destination", st->buf, st->idx, st->nidx, vi, vj, tile, rank,
                       &bd.ops[1]))
        return false;
      dg_dtype t = in->kind == DG_INTRIN_STORE ? in->out_dtype : in->in_dtype;
      if (!want_dtype(&c, "source", v->buf, t) || !want_dtype(&c, "destination", st->buf, t))
        return false;
      if (!want_scope(&c, "source", v->buf, in->src_scope) ||
          !want_scope(&c, "destination", st->buf, in->dst_scope))
        return false;
      if (!region_is_tile(&c, &bd.ops[0], want[0], want[1], false) ||
          !region_is_tile(&c, &bd.ops[1], want[0], want[1], true))
        return false;
      if (b->n_reads != 1)
        return mfail(&c, "the block reads %d buffers; a %s reads only its source", b->n_reads,
                     dg_intrin_kind_name(in->kind));
      break;
    }
    case DG_INTRIN_MMA: {
      bd.n = 3;
      dg_buffer *C = st->buf;
      const dg_expr *x = NULL, *y = NULL, *xa = NULL, *ya = NULL;
      bool shape_ok = v->kind == DG_EXPR_ADD && v->a->kind == DG_EXPR_LOAD && v->a->buf == C &&
                      v->a->nargs == st->nidx && v->b->kind == DG_EXPR_MUL;
      for (int d = 0; shape_ok && d < st->nidx; d++)
        shape_ok = ir_expr_equal(v->a->args[d], st->idx[d]);
      if (shape_ok) {
        x = v->b->a, y = v->b->b;
        xa = x->kind == DG_EXPR_CAST ? x->a : x;
        ya = y->kind == DG_EXPR_CAST ? y->a : y;
        shape_ok = xa->kind == DG_EXPR_LOAD && ya->kind == DG_EXPR_LOAD;
      }
      if (!shape_ok)
        return mfail(&c, "body pattern mismatch: the pattern is %s with the load of C on the left",
                     pattern_text(in));
      if (!access_tile(&c, "operand A", xa->buf, xa->args, xa->nargs, vi, vk, tile, rank,
                       &bd.ops[0]) ||
          !access_tile(&c, "operand B", ya->buf, ya->args, ya->nargs, in->trans ? vj : vk,
                       in->trans ? vk : vj, tile, rank, &bd.ops[1]) ||
          !access_tile(&c, "accumulator", C, st->idx, st->nidx, vi, vj, tile, rank, &bd.ops[2]))
        return false;
      if (!want_dtype(&c, "operand A", xa->buf, in->in_dtype) ||
          !want_dtype(&c, "operand B", ya->buf, in->in_dtype) ||
          !want_dtype(&c, "accumulator", C, in->out_dtype))
        return false;
      bool casts = in->in_dtype != in->out_dtype;
      if ((x->kind == DG_EXPR_CAST) != casts || (y->kind == DG_EXPR_CAST) != casts ||
          (casts && (x->dtype != in->out_dtype || y->dtype != in->out_dtype)))
        return mfail(&c, "body pattern mismatch: the operands must %sbe cast to %s (the pattern "
                         "is %s)",
                     casts ? "" : "not ", dg_dtype_name(in->out_dtype), pattern_text(in));
      if (!want_scope(&c, "operand A", xa->buf, DG_SCOPE_WMMA_A) ||
          !want_scope(&c, "operand B", ya->buf, DG_SCOPE_WMMA_B) ||
          !want_scope(&c, "accumulator", C, in->dst_scope))
        return false;
      int64_t r, q;
      for (int o = 0; o < 3; o++) {
        tile_of(in, o, &r, &q);
        if (!region_is_tile(&c, &bd.ops[o], r, q, false)) return false;
      }
      if (!region_is_tile(&c, &bd.ops[2], in->m, in->n, true)) return false;
      if (b->n_reads != 3 || xa->buf == ya->buf || xa->buf == C || ya->buf == C)
        return mfail(&c, "the block must read exactly three distinct tiles (C, A, B), it reads %d "
                         "regions",
                     b->n_reads);
      break;
    }
    case DG_INTRIN_KIND_COUNT: DG_UNREACHABLE();
  }
  if (b->n_writes != 1)
    return mfail(&c, "the block writes %d buffers; the intrinsic writes one tile", b->n_writes);
  if (out) *out = bd;
  return true;
}
