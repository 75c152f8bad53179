/* intrin.h: the registry of tensor intrinsics (TVM's WMMA TensorIntrins of
 * python/tvm/tir/tensor_intrin/cuda.py) and the contract of a tensorized
 * block.
 *
 * Each intrinsic is a named description of what one warp-wide tensor-core
 * operation computes on one tile: its kind (fill, load_a, load_b, mma,
 * store), the tile shape m x n x k (16x16x16 for WMMA), the dtypes of its
 * operands, their storage scopes and the layout of the source operand. The
 * names are exactly TVM's, so that MetaSchedule traces naming them replay.
 * Only the description lives here; nothing is emitted (the CUDA lowering
 * maps a block carrying the annotation `tensor_intrin` to the WMMA call).
 *
 * What a block tensorized with intrinsic I looks like (Tensorize checks it;
 * intrin_bind gives the lowering the operands):
 *   - the block (usually `<name>_o`, made by Blockize) has no init and an
 *     annotation tensor_intrin = "<I's name>";
 *   - its body is a chain of loops with the tile's extents, outermost first:
 *     (m, n) for fill, load and store, (m, n, k) for mma; innermost, one
 *     block with as many iteration variables, bound to those loops in order
 *     (kinds S S, or S S R for mma), no predicate, no init, and as body one
 *     store:
 *        fill   D[b + i, b + j] = 0
 *        load   D[b + i, b + j] = S[b' + i, b' + j]
 *        store  D[b + i, b + j] = S[b' + i, b' + j]
 *        mma    C[b + i, b + j] = C[b + i, b + j] + A[b + i, b + k] * B[b + k, b + j]
 *               (B[b + j, b + k] for the _trans variants; each product
 *               operand cast to C's dtype when A's dtype differs)
 *     where each b is an expression free of the tile's variables (the
 *     tile's origin in that buffer, in terms of the outer block's iteration
 *     variables) and buffers may have extra leading dimensions indexed only
 *     by such expressions;
 *   - its reads and writes are exactly those tiles: extent 1 in every
 *     leading dimension, the tile's extents (16, 16) in the last two, the
 *     minimum = the origin b. mma reads C, A and B and writes C; the others
 *     read their source (fill: nothing) and write their destination.
 * Operands, in the order intrin_bind gives them: fill [D]; load [S, D];
 * store [S, D]; mma [A, B, C]. Fragments (wmma.matrix_a / wmma.matrix_b /
 * wmma.accumulator buffers) are whole buffers whose tiles the lowering
 * indexes by origin / 16; the leading dimension passed to
 * load_matrix_sync / store_matrix_sync is the row stride of the
 * non-fragment operand, its last dimension (intrin_operand.ldm). Layout:
 * row-major everywhere, except loads named `_trans`, whose source holds the
 * tile transposed (wmma::col_major).
 *
 * Dimension letters: m rows of the output tile, n its columns, k the
 * reduction.
 */
#ifndef DRAGON_INTRIN_H
#define DRAGON_INTRIN_H

#include "dragon/ir.h"

#define DG_INTRIN_KIND_LIST(X) \
  X(FILL, "fill")              \
  X(LOAD_A, "load_a")          \
  X(LOAD_B, "load_b")          \
  X(MMA, "mma")                \
  X(STORE, "store")

typedef enum {
#define X(e, s) DG_INTRIN_##e,
  DG_INTRIN_KIND_LIST(X)
#undef X
  DG_INTRIN_KIND_COUNT
} dg_intrin_kind;

const char *dg_intrin_kind_name(dg_intrin_kind k);

/* One intrinsic. in_dtype: the A/B operand dtype (loads: the copied dtype);
 * out_dtype: the accumulator's (fill, store: the copied dtype; loads: equal
 * to in_dtype). src_scope: where a load or store reads from (mma and fill:
 * unused, DG_SCOPE_COUNT); dst_scope: where it writes (mma: the
 * accumulator). */
typedef struct {
  const char *name;
  dg_intrin_kind kind;
  int m, n, k;
  dg_dtype in_dtype, out_dtype;
  dg_scope src_scope, dst_scope;
  bool trans;         /* mma: B is [n, k]; load: the source is col-major */
  const char *layout; /* "row_major" or "col_major": the source's layout */
} dg_intrin;

/* Every registered intrinsic, in registry order. */
int intrin_count(void);
const dg_intrin *intrin_at(int i);
/* NULL if there is no intrinsic of that name. */
const dg_intrin *intrin_find(const char *name);
/* Up to max names closest to `name` (edit distance), closest first; returns
 * how many were written. For "did you mean" messages. */
int intrin_suggest(const char *name, const char **out, int max);
/* The message for a name that is not registered: "unknown tensor intrinsic
 * 'NAME' (closest: a, b, c)", what replay and the TSEL checker say. */
void intrin_unknown_message(const char *name, char *buf, size_t n);
/* Whether the n bytes at s begin some registered name (n == 0: true). */
bool intrin_is_name_prefix(const char *s, size_t n);

/* An operand of a tensorized block (see the contract above). */
typedef struct {
  dg_buffer *buf;
  dg_expr *origin[DG_MAX_DIMS]; /* the tile's first element, per dimension */
  int64_t ldm;                  /* buf's row stride: its last dimension */
} intrin_operand;

typedef struct {
  intrin_operand ops[3];
  int n;
  const dg_block *inner; /* the innermost block of the tile */
} intrin_binding;

/* Whether block b of kernel f computes exactly what `in` describes: tile
 * shape, body pattern, dtypes, storage scopes, regions. On a mismatch writes
 * the reason into why (n bytes; may be NULL) and returns false. Builds
 * scratch expressions in f's arena; changes nothing in the kernel. */
bool intrin_match(const dg_intrin *in, const dg_func *f, const dg_block *b, char *why,
                  size_t n);
/* intrin_match that also gives the operands (out may be NULL). */
bool intrin_bind(const dg_intrin *in, const dg_func *f, const dg_block *b,
                 intrin_binding *out, char *why, size_t n);

#endif
