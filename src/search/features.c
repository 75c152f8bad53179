/* features.c: MetaSchedule's PerStoreFeature on dragon's scheduled IR.
 *
 * One row of 164 values per buffer written by a non-constant store (the
 * last such store wins, rows in order of first store), in TVM's five
 * groups: computation (arithmetic counts times the loop product, vectorize
 * / unroll / parallel loops, GPU extents), buffer access (5 buffers x 18:
 * bytes, unique bytes, cache lines, reuse, stride), the arithmetic
 * intensity curve, the allocation of the written buffer and the outer loop
 * scope. Definitions follow src/meta_schedule/feature_extractor/
 * per_store_feature.cc; see docs/search.md for the exact list.
 *
 * TVM runs a lowering pass list first; here the scheduled kernel is read
 * as it is, with these equivalents: block iteration variables are replaced
 * by their bindings (ConvertBlocksToOpaque), so index arithmetic counts as
 * integer ops as in TVM; serial unit loops without annotations are not
 * part of the loop nest and selects without loads count as a constant
 * (SimplifyForFeatureExtraction); init statements run in their block's loop
 * nest (LowerInitBlock; their constant stores are skipped anyway); a
 * buffer allocated inside the kernel is sized by the region its accesses
 * touch under the loops all of them share (PlanAndUpdateBufferAllocation-
 * Location + CompactBufferAllocation). Cross-thread reductions are not
 * lowered to allreduce first. Per-dimension relaxed extents are clamped to
 * the buffer's shape. Deterministic: no hashing of pointers decides order.
 */
#include "dragon/search.h"

#include <math.h>
#include <string.h>

#define BUFS_PER_STORE 5
#define CURVE_SAMPLES 10
#define CACHE_LINE 64
#define MAX_NEST 64

double search_slog(double x) { return x >= 0 ? log2(x + 1) : log2(-x + 1); }

/* ---- the loop nest ------------------------------------------------------- */

typedef struct {
  const dg_stmt *s;
  const dg_var *var;
  int64_t extent;
  dg_loop_kind kind;
  dg_thread_tag tag;
  int64_t auto_unroll; /* pragma_auto_unroll_max_step, or -1 */
} fx_loop;

/* One buffer access: the loops around it and its indices over loop vars. */
typedef struct {
  const dg_buffer *buf;
  const dg_stmt **path; /* (depth) enclosing loops, outermost first */
  int depth;
  dg_expr **idx;
} fx_access;

/* buffer_touched_under_loop: for a loop and a buffer, the numel touched by
 * every store so far that runs under that loop. */
typedef struct {
  const dg_stmt *loop;
  const dg_buffer *buf;
  DG_VEC(int64_t) numels;
} fx_under;

typedef struct {
  const dg_buffer *buf;
  int order;
  bool stored;
  double g1[57], g2[5 * 18], g3[CURVE_SAMPLES], g5[3];
  int64_t outer_prod;
  bool has_alloc;
  double alloc_size, alloc_prod, alloc_outer_prod;
} fx_row;

/* A buffer's shape for features: the compacted one for allocations. */
typedef struct {
  const dg_buffer *buf;
  int64_t shape[DG_MAX_DIMS];
  int64_t outer_prod; /* loops above its allocation point */
  bool allocated;
} fx_shape;

typedef struct {
  dg_func *f; /* a private clone: substitutions allocate here */
  bool is_gpu;
  fx_loop nest[MAX_NEST];
  int depth;
  const dg_stmt *path[MAX_NEST];
  int pdepth;            /* path includes unit loops; nest does not */
  dg_var *unit_vars[MAX_NEST];
  int n_unit;
  dg_subst *map;         /* iteration var -> binding over loop vars */
  int n_map, cap_map;
  bool collect;          /* pass 1: only collect accesses */
  DG_VEC(fx_access) acc;
  DG_VEC(fx_shape) shapes;
  DG_VEC(fx_under) under;
  DG_VEC(fx_row) rows;
  int64_t prod;
  bool too_deep;
} fx;

/* ---- pass 1: accesses and compacted shapes ------------------------------- */

static void collect_loads(fx *x, dg_expr *e) {
  if (!e) return;
  if (e->kind == DG_EXPR_LOAD) {
    fx_access a = {e->buf, dg_arena_memdup(x->f->arena, x->path, sizeof(*x->path) * (size_t)x->pdepth),
                   x->pdepth, e->args};
    DG_VEC_PUSH(&x->acc, a);
  }
  collect_loads(x, e->a);
  collect_loads(x, e->b);
  collect_loads(x, e->c);
  for (int i = 0; i < e->nargs; i++) collect_loads(x, e->args[i]);
}

static fx_shape *shape_of(fx *x, const dg_buffer *b) {
  for (size_t i = 0; i < x->shapes.len; i++)
    if (x->shapes.data[i].buf == b) return &x->shapes.data[i];
  return NULL;
}

/* Pushes ranges for the loops of a path: the first `fixed` at 0, the rest
 * over their extents; unit vars at 0. */
static void push_path_ranges(const fx *x, dg_ranges *r, const dg_stmt *const *path, int n,
                             int fixed) {
  r->n = 0;
  for (int i = 0; i < x->n_unit && r->n < 64; i++) ir_ranges_push(r, x->unit_vars[i], 0, 0);
  for (int i = 0; i < n && r->n < 64; i++)
    ir_ranges_push(r, path[i]->loop_var, 0, i < fixed ? 0 : path[i]->extent - 1);
}

static void compute_shapes(fx *x) {
  for (size_t s = 0; s < x->shapes.len; s++) {
    fx_shape *sh = &x->shapes.data[s];
    if (!sh->allocated) continue;
    /* the longest loop path shared by every access */
    int lca = -1;
    const fx_access *first = NULL;
    for (size_t i = 0; i < x->acc.len; i++) {
      const fx_access *a = &x->acc.data[i];
      if (a->buf != sh->buf) continue;
      if (!first) {
        first = a;
        lca = a->depth;
        continue;
      }
      int k = 0;
      while (k < lca && k < a->depth && a->path[k] == first->path[k]) k++;
      lca = k;
    }
    if (!first) continue;
    int64_t lo[DG_MAX_DIMS], hi[DG_MAX_DIMS];
    for (int d = 0; d < sh->buf->ndim; d++) {
      lo[d] = INT64_MAX;
      hi[d] = INT64_MIN;
    }
    dg_ranges r;
    for (size_t i = 0; i < x->acc.len; i++) {
      const fx_access *a = &x->acc.data[i];
      if (a->buf != sh->buf) continue;
      push_path_ranges(x, &r, a->path, a->depth, lca);
      for (int d = 0; d < sh->buf->ndim; d++) {
        dg_interval iv = ir_expr_bounds(a->idx[d], &r);
        if (iv.lo < lo[d]) lo[d] = iv.lo;
        if (iv.hi > hi[d]) hi[d] = iv.hi;
      }
    }
    for (int d = 0; d < sh->buf->ndim; d++) {
      int64_t e = hi[d] >= lo[d] && hi[d] - lo[d] < sh->buf->shape[d] ? hi[d] - lo[d] + 1
                                                                         : sh->buf->shape[d];
      sh->shape[d] = e < 1 ? 1 : e;
    }
    int64_t p = 1;
    for (int k = 0; k < lca; k++) p *= first->path[k]->extent;
    sh->outer_prod = p;
  }
}

/* ---- group 1: arithmetic ------------------------------------------------- */

enum {
  A_FLOAT_MAD, A_FLOAT_ADD_SUB, A_FLOAT_MUL, A_FLOAT_DIV_MOD, A_FLOAT_CMP, A_FLOAT_MATH,
  A_FLOAT_OTHER, A_INT_MAD, A_INT_ADD_SUB, A_INT_MUL, A_INT_DIV_MOD, A_INT_CMP, A_INT_MATH,
  A_INT_OTHER, A_BOOL, A_SELECT, A_COUNT
};

static bool has_load(const dg_expr *e) {
  if (!e) return false;
  if (e->kind == DG_EXPR_LOAD) return true;
  if (has_load(e->a) || has_load(e->b) || has_load(e->c)) return true;
  for (int i = 0; i < e->nargs; i++)
    if (has_load(e->args[i])) return true;
  return false;
}

static void count_ops(const dg_expr *e, double prod, double *c) {
  if (!e) return;
  bool fl = dg_dtype_is_float(e->dtype);
  switch (e->kind) {
    case DG_EXPR_SELECT:
      /* a select without loads is a constant after simplification */
      if (!has_load(e->a) && !has_load(e->b) && !has_load(e->c)) return;
      c[A_SELECT] += prod;
      break;
    case DG_EXPR_AND:
    case DG_EXPR_OR:
    case DG_EXPR_NOT: c[A_BOOL] += prod; break;
    case DG_EXPR_ADD:
    case DG_EXPR_SUB: c[fl ? A_FLOAT_ADD_SUB : A_INT_ADD_SUB] += prod; break;
    case DG_EXPR_MUL: c[fl ? A_FLOAT_MUL : A_INT_MUL] += prod; break;
    case DG_EXPR_DIV:
    case DG_EXPR_FLOORDIV:
    case DG_EXPR_FLOORMOD: c[fl ? A_FLOAT_DIV_MOD : A_INT_DIV_MOD] += prod; break;
    case DG_EXPR_MIN:
    case DG_EXPR_MAX:
    case DG_EXPR_EQ:
    case DG_EXPR_NE:
    case DG_EXPR_LT:
    case DG_EXPR_LE:
    case DG_EXPR_GT:
    case DG_EXPR_GE: c[fl ? A_FLOAT_CMP : A_INT_CMP] += prod; break;
    case DG_EXPR_CALL: c[fl ? A_FLOAT_MATH : A_INT_MATH] += prod; break;
    default: break;
  }
  count_ops(e->a, prod, c);
  count_ops(e->b, prod, c);
  count_ops(e->c, prod, c);
  for (int i = 0; i < e->nargs; i++) count_ops(e->args[i], prod, c);
}

static void loop_kind_feature(const fx *x, dg_loop_kind kind, double *out) {
  int64_t num = 0, prod = 1, len = 0;
  for (int i = 0; i < x->depth; i++)
    if (x->nest[i].kind == kind) {
      num++;
      prod *= x->nest[i].extent;
      len = x->nest[i].extent;
    }
  memset(out, 0, 11 * sizeof(double));
  if (!num) {
    out[3] = 1; /* position: none */
    return;
  }
  out[0] = search_slog((double)num);
  out[1] = search_slog((double)prod);
  out[2] = search_slog((double)len);
  out[10] = 1; /* position: mixed, the only other value TVM sets */
}

static int64_t first_extent(const fx *x, dg_thread_tag a, dg_thread_tag b) {
  for (int i = 0; i < x->depth; i++)
    if (x->nest[i].kind == DG_LOOP_THREAD && x->nest[i].tag >= a && x->nest[i].tag <= b)
      return x->nest[i].extent;
  return 1;
}

/* ---- group 2: buffer access ---------------------------------------------- */

typedef struct {
  const dg_buffer *buf;
  int access; /* 0 read, 1 write, 2 read-write */
  DG_VEC(dg_expr **) idx;
  int64_t *numel_at;   /* (depth) elements touched under loop i */
  int64_t access_shape[DG_MAX_DIMS];
  int64_t shape[DG_MAX_DIMS];
  int64_t cont_bytes, min_stride, innermost_stride, prod_non_strided;
  int reuse_type; /* 0 loop-invariant, 1 serial, 2 none */
  double reuse_iter, reuse_bytes;
  int64_t reuse_ct;
  double bytes, unique_bytes, lines, unique_lines;
} fx_sub;

typedef DG_VEC(fx_sub) fx_subs;

static void gather_subs(const dg_expr *e, fx_subs *subs) {
  if (!e) return;
  if (e->kind == DG_EXPR_LOAD) {
    fx_sub *s = NULL;
    for (size_t i = 0; i < subs->len; i++)
      if (subs->data[i].buf == e->buf) s = &subs->data[i];
    if (!s) {
      fx_sub n = {0};
      n.buf = e->buf;
      n.access = 0;
      DG_VEC_PUSH(subs, n);
      s = &subs->data[subs->len - 1];
    } else if (s->access == 1) {
      s->access = 2;
    }
    if (s->access != 2) DG_VEC_PUSH(&s->idx, e->args);
  }
  gather_subs(e->a, subs);
  gather_subs(e->b, subs);
  gather_subs(e->c, subs);
  for (int i = 0; i < e->nargs; i++) gather_subs(e->args[i], subs);
}

static fx_under *under_get(fx *x, const dg_stmt *loop, const dg_buffer *b, bool create) {
  for (size_t i = 0; i < x->under.len; i++)
    if (x->under.data[i].loop == loop && x->under.data[i].buf == b) return &x->under.data[i];
  if (!create) return NULL;
  fx_under u = {loop, b, {0}};
  DG_VEC_PUSH(&x->under, u);
  return &x->under.data[x->under.len - 1];
}

/* The loop variable's coefficient in an index, as TVM's CoefficientExtractor
 * finds it for linear forms (1 where the form is not linear). */
static int64_t coef_of(const dg_expr *e, const dg_var *v) {
  if (!e || !ir_expr_uses_var(e, v)) return 0;
  int64_t c;
  switch (e->kind) {
    case DG_EXPR_VAR: return 1;
    case DG_EXPR_ADD: return coef_of(e->a, v) + coef_of(e->b, v);
    case DG_EXPR_SUB: return coef_of(e->a, v) - coef_of(e->b, v);
    case DG_EXPR_MUL:
      if (ir_is_const_int(e->a, &c)) return c * coef_of(e->b, v);
      if (ir_is_const_int(e->b, &c)) return coef_of(e->a, v) * c;
      return 1;
    case DG_EXPR_FLOORDIV:
      if (ir_is_const_int(e->b, &c) && c != 0) {
        int64_t k = coef_of(e->a, v);
        return k % c == 0 && k / c != 0 ? k / c : 1;
      }
      return 1;
    case DG_EXPR_FLOORMOD: {
      int64_t k = coef_of(e->a, v);
      return k ? k : 1;
    }
    default: return 1;
  }
}

static int64_t var_stride(const fx_sub *s, const int64_t *buf_stride, const dg_var *v) {
  int64_t best = INT64_MAX;
  int nd = s->buf->ndim;
  for (size_t k = 0; k < s->idx.len; k++)
    for (int d = nd - 1; d >= 0; d--) {
      int64_t c = coef_of(s->idx.data[k][d], v);
      if (c != 0) {
        int64_t a = (c < 0 ? -c : c) * buf_stride[d];
        if (a < best) best = a;
        break;
      }
    }
  return best == INT64_MAX ? 0 : best;
}

static bool idx_uses(const fx_sub *s, const dg_var *v) {
  for (size_t k = 0; k < s->idx.len; k++)
    for (int d = 0; d < s->buf->ndim; d++)
      if (ir_expr_uses_var(s->idx.data[k][d], v)) return true;
  return false;
}

static int cmp_sub(const void *pa, const void *pb) {
  const fx_sub *a = pa, *b = pb;
  if (a->lines != b->lines) return a->lines > b->lines ? -1 : 1;
  if (a->bytes != b->bytes) return a->bytes > b->bytes ? -1 : 1;
  return strcmp(a->buf->name, b->buf->name);
}

/* Group 2 into row->g2 and the touched bytes per loop (outermost first). */
static void group2(fx *x, const dg_buffer *wbuf, dg_expr **widx, const dg_expr *value,
                   fx_row *row, int64_t *touched) {
  int n = x->depth;
  fx_subs subs = {0};
  fx_sub w = {0};
  w.buf = wbuf;
  w.access = 1;
  DG_VEC_PUSH(&w.idx, widx);
  DG_VEC_PUSH(&subs, w);
  gather_subs(value, &subs);

  for (size_t k = 0; k < subs.len; k++) {
    fx_sub *s = &subs.data[k];
    s->numel_at = dg_calloc((size_t)(n ? n : 1), sizeof(int64_t));
    const fx_shape *sh = shape_of(x, s->buf);
    for (int d = 0; d < s->buf->ndim; d++) {
      s->shape[d] = sh && sh->allocated ? sh->shape[d] : s->buf->shape[d];
      s->access_shape[d] = 1;
    }
  }
  /* regions, inner -> outer: loops i..n-1 relaxed, the outer ones at 0 */
  dg_ranges r;
  for (int i = n - 1; i >= 0; i--) {
    r.n = 0;
    for (int u = 0; u < x->n_unit && r.n < 64; u++) ir_ranges_push(&r, x->unit_vars[u], 0, 0);
    for (int l = 0; l < n && r.n < 64; l++)
      ir_ranges_push(&r, x->nest[l].var, 0, l < i ? 0 : x->nest[l].extent - 1);
    touched[i] = 0;
    for (size_t k = 0; k < subs.len; k++) {
      fx_sub *s = &subs.data[k];
      int64_t numel = 1;
      for (int d = 0; d < s->buf->ndim; d++) {
        int64_t lo = INT64_MAX, hi = INT64_MIN;
        for (size_t a = 0; a < s->idx.len; a++) {
          dg_interval iv = ir_expr_bounds(s->idx.data[a][d], &r);
          if (iv.lo < lo) lo = iv.lo;
          if (iv.hi > hi) hi = iv.hi;
        }
        int64_t e = hi >= lo && hi - lo < s->shape[d] ? hi - lo + 1 : s->shape[d];
        s->access_shape[d] = e;
        numel *= e;
      }
      s->numel_at[i] = numel;
      touched[i] += numel * dg_dtype_bytes(s->buf->dtype);
      fx_under *u = under_get(x, x->nest[i].s, s->buf, true);
      DG_VEC_PUSH(&u->numels, numel);
    }
  }
  /* strides */
  for (size_t k = 0; k < subs.len; k++) {
    fx_sub *s = &subs.data[k];
    int nd = s->buf->ndim, bytes = dg_dtype_bytes(s->buf->dtype);
    int64_t bstride[DG_MAX_DIMS];
    if (nd >= 1) {
      bstride[nd - 1] = 1;
      for (int d = nd - 2; d >= 0; d--) bstride[d] = bstride[d + 1] * s->shape[d + 1];
    }
    s->cont_bytes = 1;
    for (int d = nd - 1; d >= 0; d--)
      if (s->access_shape[d] == s->shape[d]) {
        s->cont_bytes = s->shape[d] * bytes;
        break;
      }
    int i;
    s->min_stride = 0;
    for (i = n - 1; i >= 0; i--) {
      s->min_stride = var_stride(s, bstride, x->nest[i].var);
      if (s->min_stride != 0) break;
    }
    s->innermost_stride = i == n - 1 ? s->min_stride : 0;
    s->prod_non_strided = 1;
    for (int j = n - 1; j > i; j--) s->prod_non_strided *= x->nest[j].extent;
  }
  /* reuse */
  int64_t top_touch = 0;
  if (n > 0)
    for (size_t k = 0; k < subs.len; k++) top_touch += dg_dtype_bytes(subs.data[k].buf->dtype);
  for (size_t k = 0; k < subs.len; k++) {
    fx_sub *s = &subs.data[k];
    s->reuse_type = 2;
    s->reuse_iter = s->reuse_bytes = 0;
    s->reuse_ct = 0;
    for (int i = n - 1; i >= 0; i--) {
      if (!idx_uses(s, x->nest[i].var)) {
        s->reuse_type = 0;
        s->reuse_ct = x->nest[i].extent;
        s->reuse_iter = 1;
        for (int j = n - 1; j > i; j--) s->reuse_iter *= (double)x->nest[j].extent;
        if (i == n - 1) {
          s->reuse_bytes = (double)top_touch;
        } else {
          for (size_t q = 0; q < x->under.len; q++)
            if (x->under.data[q].loop == x->nest[i + 1].s) {
              int64_t sum = 0;
              for (size_t z = 0; z < x->under.data[q].numels.len; z++)
                sum += x->under.data[q].numels.data[z];
              s->reuse_bytes += (double)sum * dg_dtype_bytes(x->under.data[q].buf->dtype);
            }
        }
        break;
      }
      fx_under *u = under_get(x, x->nest[i].s, s->buf, false);
      if (u && u->numels.len >= 2) {
        s->reuse_type = 1;
        s->reuse_ct = (int64_t)u->numels.len - 1;
        int64_t mn = INT64_MAX;
        for (size_t z = 0; z < u->numels.len; z++)
          if (u->numels.data[z] < mn) mn = u->numels.data[z];
        s->reuse_iter = (double)mn;
        for (size_t q = 0; q < x->under.len; q++)
          if (x->under.data[q].loop == x->nest[i].s) {
            int64_t sum = 0;
            for (size_t z = 0; z < x->under.data[q].numels.len; z++)
              sum += x->under.data[q].numels.data[z];
            s->reuse_bytes += (double)sum * dg_dtype_bytes(x->under.data[q].buf->dtype);
          }
        s->reuse_iter /= (double)x->nest[i].extent;
        s->reuse_bytes /= (double)x->nest[i].extent;
        break;
      }
    }
  }
  /* the values */
  for (size_t k = 0; k < subs.len; k++) {
    fx_sub *s = &subs.data[k];
    int bytes = dg_dtype_bytes(s->buf->dtype);
    s->bytes = (double)bytes * (double)x->prod;
    if (n == 0) {
      s->unique_bytes = s->lines = s->unique_lines = 1;
    } else {
      s->unique_bytes = (double)s->numel_at[0] * bytes;
      double f = (double)s->min_stride * bytes / CACHE_LINE;
      s->lines = (double)x->prod / (double)s->prod_non_strided * (f < 1 ? f : 1);
      if (s->lines < 1) s->lines = 1;
      double cl = s->cont_bytes < CACHE_LINE ? (double)s->cont_bytes : CACHE_LINE;
      s->unique_lines = s->unique_bytes / cl;
      if (s->unique_lines < 1) s->unique_lines = 1;
    }
  }
  qsort(subs.data, subs.len, sizeof *subs.data, cmp_sub);
  memset(row->g2, 0, sizeof row->g2);
  for (size_t k = 0; k < subs.len && k < BUFS_PER_STORE; k++) {
    const fx_sub *s = &subs.data[k];
    double *v = row->g2 + 18 * k;
    double rc = s->reuse_ct > 0 ? (double)s->reuse_ct : 0.5;
    v[s->access] = 1;
    v[3] = search_slog(s->bytes);
    v[4] = search_slog(s->unique_bytes);
    v[5] = search_slog(s->lines);
    v[6] = search_slog(s->unique_lines);
    v[7 + s->reuse_type] = 1;
    v[10] = search_slog(s->reuse_iter);
    v[11] = search_slog(s->reuse_bytes);
    v[12] = search_slog((double)s->reuse_ct);
    v[13] = search_slog(s->bytes / rc);
    v[14] = search_slog(s->unique_bytes / rc);
    v[15] = search_slog(s->lines / rc);
    v[16] = search_slog(s->unique_lines / rc);
    v[17] = search_slog((double)s->innermost_stride);
  }
  for (size_t k = 0; k < subs.len; k++) {
    free(subs.data[k].numel_at);
    DG_VEC_FREE(&subs.data[k].idx);
  }
  DG_VEC_FREE(&subs);
}

/* ---- group 3: arithmetic intensity curve --------------------------------- */

static void group3(const fx *x, const double *arith, const int64_t *touched, double *out) {
  int n = x->depth;
  memset(out, 0, CURVE_SAMPLES * sizeof(double));
  if (n == 0) return;
  double total = arith[A_FLOAT_MAD] + arith[A_FLOAT_ADD_SUB] + arith[A_FLOAT_MUL] +
                 arith[A_FLOAT_DIV_MOD] + arith[A_FLOAT_CMP] + arith[A_FLOAT_MATH] +
                 arith[A_FLOAT_OTHER];
  total /= (double)x->prod;
  double *ops = dg_malloc(sizeof(double) * (size_t)n);
  double *mem = dg_malloc(sizeof(double) * (size_t)n);
  /* a loop level touching no memory would divide by zero */
  for (int i = 0; i < n; i++) mem[n - 1 - i] = touched[i] > 0 ? (double)touched[i] : 1;
  for (int i = n - 1, k = 0; i >= 0; i--, k++) {
    total *= (double)x->nest[i].extent;
    ops[k] = total;
  }
  if (total > 0) {
    total = ops[n - 1];
    int p = 0;
    for (int i = 0; i < CURVE_SAMPLES; i++) {
      double cur = (double)(i + 1) / CURVE_SAMPLES * total;
      while (p < n && ops[p] < cur - 1e-4) p++;
      if (p >= n) p = n - 1;
      if (p == 0) {
        out[i] = search_slog(ops[0] / mem[0]);
      } else {
        double base = ops[p - 1] / mem[p - 1];
        double slope = (ops[p] / mem[p] - base) / (ops[p] - ops[p - 1]);
        out[i] = search_slog(base + slope * (cur - ops[p - 1]));
      }
    }
  }
  free(ops);
  free(mem);
}

/* ---- the walk ------------------------------------------------------------ */

static fx_row *row_of(fx *x, const dg_buffer *b) {
  for (size_t i = 0; i < x->rows.len; i++)
    if (x->rows.data[i].buf == b) return &x->rows.data[i];
  fx_row r;
  memset(&r, 0, sizeof r);
  r.buf = b;
  r.order = (int)x->rows.len;
  DG_VEC_PUSH(&x->rows, r);
  return &x->rows.data[x->rows.len - 1];
}

static void on_store(fx *x, const dg_stmt *s) {
  dg_expr **idx = dg_arena_alloc(x->f->arena, sizeof(dg_expr *) * (size_t)(s->nidx ? s->nidx : 1));
  for (int i = 0; i < s->nidx; i++) idx[i] = ir_subst_expr(x->f, s->idx[i], x->map, x->n_map);
  dg_expr *value = ir_subst_expr(x->f, s->value, x->map, x->n_map);
  if (x->collect) {
    fx_access a = {s->buf, dg_arena_memdup(x->f->arena, x->path, sizeof(*x->path) * (size_t)(x->pdepth ? x->pdepth : 1)),
                   x->pdepth, idx};
    DG_VEC_PUSH(&x->acc, a);
    collect_loads(x, value);
    return;
  }
  if (value->kind == DG_EXPR_INT || value->kind == DG_EXPR_FLOAT) return;
  fx_row *row = row_of(x, s->buf);
  row->stored = true;
  double arith[A_COUNT] = {0};
  count_ops(value, (double)x->prod, arith);
  double *g1 = row->g1;
  for (int i = 0; i < A_COUNT; i++) g1[i] = search_slog(arith[i]);
  loop_kind_feature(x, DG_LOOP_VECTORIZED, g1 + 16);
  loop_kind_feature(x, DG_LOOP_UNROLLED, g1 + 27);
  loop_kind_feature(x, DG_LOOP_PARALLEL, g1 + 38);
  memset(g1 + 49, 0, 8 * sizeof(double));
  if (x->is_gpu) {
    g1[49] = 1;
    g1[50] = search_slog((double)first_extent(x, DG_TAG_BLOCK_X, DG_TAG_BLOCK_X));
    g1[51] = search_slog((double)first_extent(x, DG_TAG_BLOCK_Y, DG_TAG_BLOCK_Y));
    g1[52] = search_slog((double)first_extent(x, DG_TAG_BLOCK_Z, DG_TAG_BLOCK_Z));
    g1[53] = search_slog((double)first_extent(x, DG_TAG_THREAD_X, DG_TAG_THREAD_X));
    g1[54] = search_slog((double)first_extent(x, DG_TAG_THREAD_Y, DG_TAG_THREAD_Y));
    g1[55] = search_slog((double)first_extent(x, DG_TAG_THREAD_Z, DG_TAG_THREAD_Z));
    g1[56] = search_slog((double)first_extent(x, DG_TAG_VTHREAD_X, DG_TAG_VTHREAD_Z));
  } else {
    for (int i = 50; i < 57; i++) g1[i] = search_slog(1);
  }
  int64_t *touched = dg_calloc((size_t)(x->depth ? x->depth : 1), sizeof(int64_t));
  group2(x, s->buf, idx, value, row, touched);
  group3(x, arith, touched, row->g3);
  free(touched);
  row->outer_prod = x->prod;
  int64_t unroll = 0;
  for (int i = x->depth - 1; i >= 0; i--)
    if (x->nest[i].auto_unroll > 0) {
      unroll = x->nest[i].auto_unroll;
      break;
    }
  row->g5[0] = search_slog((double)x->prod);
  row->g5[1] = search_slog((double)x->depth);
  row->g5[2] = search_slog((double)unroll);
}

static void walk(fx *x, const dg_stmt *s);

static void on_block(fx *x, const dg_stmt *s) {
  const dg_block *b = s->block;
  int saved = x->n_map;
  for (int i = 0; i < b->n_iters; i++) {
    dg_expr *to = ir_subst_expr(x->f, b->iters[i].binding, x->map, x->n_map);
    if (x->n_map == x->cap_map) {
      x->cap_map = x->cap_map ? 2 * x->cap_map : 16;
      x->map = dg_realloc(x->map, sizeof(dg_subst) * (size_t)x->cap_map);
    }
    x->map[x->n_map++] = (dg_subst){b->iters[i].var, to};
  }
  if (x->collect)
    for (int i = 0; i < b->n_allocs; i++)
      if (!shape_of(x, b->allocs[i])) {
        fx_shape sh = {b->allocs[i], {0}, 1, true};
        for (int d = 0; d < b->allocs[i]->ndim; d++) sh.shape[d] = b->allocs[i]->shape[d];
        DG_VEC_PUSH(&x->shapes, sh);
      }
  walk(x, b->init);
  walk(x, b->body);
  x->n_map = saved;
}

static void walk(fx *x, const dg_stmt *s) {
  if (!s) return;
  switch (s->kind) {
    case DG_STMT_FOR: {
      if (x->depth >= MAX_NEST || x->pdepth >= MAX_NEST) {
        x->too_deep = true;
        return;
      }
      x->path[x->pdepth++] = s;
      bool unit = s->extent == 1 && s->loop_kind == DG_LOOP_SERIAL && s->anns.n == 0;
      if (unit) {
        x->unit_vars[x->n_unit++] = s->loop_var;
        walk(x, s->body);
        x->n_unit--;
      } else {
        const dg_ann *a = ir_anns_get(&s->anns, "pragma_auto_unroll_max_step");
        x->nest[x->depth++] = (fx_loop){s, s->loop_var, s->extent, s->loop_kind, s->tag,
                                        a && a->kind == DG_ANN_INT ? a->i : -1};
        x->prod *= s->extent;
        walk(x, s->body);
        x->prod /= s->extent;
        x->depth--;
      }
      x->pdepth--;
      break;
    }
    case DG_STMT_SEQ:
      for (int i = 0; i < s->n; i++) walk(x, s->stmts[i]);
      break;
    case DG_STMT_BLOCK: on_block(x, s); break;
    case DG_STMT_STORE: on_store(x, s); break;
    case DG_STMT_IF:
      walk(x, s->then_s);
      walk(x, s->else_s);
      break;
  }
}

bool search_features_extract(const dg_func *f0, bool is_gpu, search_features *out,
                             dg_status *st) {
  dg_status_ok(st);
  out->rows = NULL;
  out->n = 0;
  fx x;
  memset(&x, 0, sizeof x);
  x.f = ir_func_clone(f0);
  x.is_gpu = is_gpu;
  x.prod = 1;
  x.collect = true;
  walk(&x, x.f->body);
  compute_shapes(&x);
  x.collect = false;
  x.depth = x.pdepth = x.n_unit = x.n_map = 0;
  x.prod = 1;
  walk(&x, x.f->body);
  bool ok = !x.too_deep;
  if (!ok) dg_fail(st, DG_ERR_INVALID, "features: loop nest deeper than %d", MAX_NEST);
  /* group 4: the allocation of each row's buffer */
  for (size_t i = 0; i < x.rows.len && ok; i++) {
    fx_row *r = &x.rows.data[i];
    const fx_shape *sh = shape_of(&x, r->buf);
    int64_t numel = 1;
    for (int d = 0; d < r->buf->ndim; d++)
      numel *= sh && sh->allocated ? sh->shape[d] : r->buf->shape[d];
    bool param = false;
    for (int p = 0; p < x.f->n_params; p++)
      if (x.f->params[p] == r->buf) param = true;
    if (param || sh) {
      r->has_alloc = true;
      int64_t outer = sh && sh->allocated ? sh->outer_prod : 1;
      r->alloc_size = (double)numel * dg_dtype_bytes(r->buf->dtype);
      r->alloc_prod = (double)numel * (double)outer;
      r->alloc_outer_prod = (double)outer;
    }
  }
  if (ok) {
    out->rows = dg_calloc(x.rows.len ? x.rows.len * SEARCH_FEATURE_LEN : 1, sizeof(double));
    for (size_t i = 0; i < x.rows.len; i++) {
      const fx_row *r = &x.rows.data[i];
      double *v = out->rows + (size_t)out->n * SEARCH_FEATURE_LEN;
      memcpy(v, r->g1, sizeof r->g1);
      memcpy(v + SEARCH_FEAT_G2, r->g2, sizeof r->g2);
      memcpy(v + SEARCH_FEAT_G3, r->g3, sizeof r->g3);
      double aop = r->has_alloc ? r->alloc_outer_prod : 1;
      v[SEARCH_FEAT_G4 + 0] = search_slog(r->has_alloc ? r->alloc_size : 0);
      v[SEARCH_FEAT_G4 + 1] = search_slog(r->has_alloc ? r->alloc_prod : 0);
      v[SEARCH_FEAT_G4 + 2] = search_slog(aop);
      v[SEARCH_FEAT_G4 + 3] = search_slog((double)r->outer_prod / aop);
      memcpy(v + SEARCH_FEAT_G5, r->g5, sizeof r->g5);
      out->n++;
    }
  }
  for (size_t i = 0; i < x.under.len; i++) DG_VEC_FREE(&x.under.data[i].numels);
  DG_VEC_FREE(&x.under);
  DG_VEC_FREE(&x.rows);
  DG_VEC_FREE(&x.acc);
  DG_VEC_FREE(&x.shapes);
  free(x.map);
  ir_func_free(x.f);
  return ok;
}

void search_features_free(search_features *x) {
  free(x->rows);
  x->rows = NULL;
  x->n = 0;
}

const char *search_feature_name(int i, char *buf, size_t n) {
  static const char *const g1[] = {
      "float_mad", "float_add_sub", "float_mul", "float_div_mod", "float_cmp",
      "float_math_func", "float_other_func", "int_mad", "int_add_sub", "int_mul",
      "int_div_mod", "int_cmp", "int_math_func", "int_other_func", "bool_op", "select_op"};
  static const char *const kind[] = {"vec", "unroll", "parallel"};
  static const char *const lk[] = {"num", "prod", "len", "pos_none", "pos_inner_spatial",
                                   "pos_middle_spatial", "pos_outer_spatial", "pos_inner_reduce",
                                   "pos_middle_reduce", "pos_outer_reduce", "pos_mixed"};
  static const char *const gpu[] = {"is_gpu", "blockIdx_x_len", "blockIdx_y_len",
                                    "blockIdx_z_len", "threadIdx_x_len", "threadIdx_y_len",
                                    "threadIdx_z_len", "vthread_len"};
  static const char *const g2[] = {
      "acc_type.kRead", "acc_type.kWrite", "acc_type.kReadWrite", "bytes", "unique_bytes",
      "lines", "unique_lines", "reuse_type.kLoopMultipleRead",
      "reuse_type.kSerialMultipleReadWrite", "reuse_type.kNoReuse", "reuse_dis_iter",
      "reuse_dis_bytes", "reuse_ct", "bytes_d_reuse_ct", "unique_bytes_d_reuse_ct",
      "lines_d_reuse_ct", "unique_lines_d_reuse_ct", "stride"};
  static const char *const g4[] = {"alloc_size", "alloc_prod", "alloc_outer_prod",
                                   "alloc_inner_prod"};
  static const char *const g5[] = {"outer_prod", "num_loops", "auto_unroll_max_step"};
  if (i < 0 || i >= SEARCH_FEATURE_LEN) snprintf(buf, n, "?");
  else if (i < 16) snprintf(buf, n, "%s", g1[i]);
  else if (i < 49) snprintf(buf, n, "%s_%s", kind[(i - 16) / 11], lk[(i - 16) % 11]);
  else if (i < SEARCH_FEAT_G2) snprintf(buf, n, "%s", gpu[i - 49]);
  else if (i < SEARCH_FEAT_G3)
    snprintf(buf, n, "B%d.%s", (i - SEARCH_FEAT_G2) / 18, g2[(i - SEARCH_FEAT_G2) % 18]);
  else if (i < SEARCH_FEAT_G4) snprintf(buf, n, "arith_intensity_curve_%d", i - SEARCH_FEAT_G3);
  else if (i < SEARCH_FEAT_G5) snprintf(buf, n, "%s", g4[i - SEARCH_FEAT_G4]);
  else snprintf(buf, n, "%s", g5[i - SEARCH_FEAT_G5]);
  return buf;
}
