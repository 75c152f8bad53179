/* wl_impl.h: the workload module's private contract.
 *
 * A family is a table entry: its keys (in canonical order, with ranges and
 * defaults), a consistency check that also counts the bytes of every tensor
 * the kernel will hold, the kernel builder, and a shape sampler for the
 * generator. Families live one group per file (matmul.c, conv.c, pool.c,
 * norm.c, elementwise.c); spec.c owns the table, parsing and canonical form.
 *
 * The TE helper (te.c) builds one block per compute the way TVM's
 * create_prim_func does: loops over the spatial axes then the reduce axes in
 * declaration order, loop variables named after the axes, block iteration
 * variables named "v_" + axis, each bound to its loop variable; reads
 * collected from the loads of the value (points in the iteration
 * variables), the write a point, an init for reductions. A name already used
 * in the kernel gets the first free suffix "_1", "_2", ... (what TVM's
 * printer does with duplicate names), so names are unique kernel-wide.
 * Instead of a callback, a compute is opened with te_begin (which hands back
 * the iteration variables) and closed with te_end (which takes the value).
 */
#ifndef DRAGON_WL_IMPL_H
#define DRAGON_WL_IMPL_H

#include "dragon/wl.h"

/* ---- families ------------------------------------------------------------ */

typedef enum {
  WL_KEY_INT,   /* an integer in [lo, hi] */
  WL_KEY_FLAG,  /* 0 or 1 */
  WL_KEY_DTYPE, /* f32 (0) or f16 (1) */
} wl_key_kind;

typedef struct {
  const char *name;
  wl_key_kind kind;
  int64_t lo, hi;
  bool required;
  int64_t def; /* when not required */
} wl_key;

#define WL_MAX_KEYS 12
#define WL_DIM_MAX 65536

/* Shorthands for key tables. */
#define WL_REQ(name, lo, hi) {name, WL_KEY_INT, lo, hi, true, 0}
#define WL_OPT(name, lo, hi, def) {name, WL_KEY_INT, lo, hi, false, def}
#define WL_FLAG(name) {name, WL_KEY_FLAG, 0, 1, false, 0}
#define WL_DTYPE {"dtype", WL_KEY_DTYPE, 0, 1, false, 0}

typedef struct wl_family {
  const char *name;
  const char *about;   /* one line */
  const char *example; /* canonical */
  const wl_key *keys;
  int nkeys;
  double weight; /* share in the generator's mix */
  /* Checks what per-key ranges cannot (kernel fits the padded input,
   * channels divide by groups, ...) and adds the bytes of every tensor,
   * parameters and intermediates, to *bytes. Messages name the keys. */
  bool (*check)(const int64_t *v, int64_t *bytes, dg_status *st);
  /* Builds the kernel of checked values. */
  dg_func *(*build)(const int64_t *v);
  /* Draws values (every key) from realistic shapes; may be rejected by
   * check, and then is drawn again. */
  void (*gen)(dg_rng *r, int64_t *v);
} wl_family;

extern const wl_family wl_family_gemm, wl_family_batch_matmul, wl_family_gemv,
    wl_family_transpose_batch_matmul;
extern const wl_family wl_family_conv1d_nlc, wl_family_conv2d_nhwc,
    wl_family_conv2d_nchw, wl_family_conv3d_ndhwc,
    wl_family_depthwise_conv2d_nhwc, wl_family_conv2d_transpose_nhwc,
    wl_family_conv2d_capsule_nhwijc, wl_family_conv2d_bias_bn_relu;
extern const wl_family wl_family_max_pool2d, wl_family_avg_pool2d;
extern const wl_family wl_family_norm_bmn, wl_family_softmax,
    wl_family_layernorm, wl_family_rmsnorm, wl_family_reduce_sum,
    wl_family_reduce_max;
extern const wl_family wl_family_bias_gelu, wl_family_silu_mul, wl_family_rope;

/* The family table (spec.c). */
const wl_family *wl_family_at(int i);
const wl_family *wl_family_find(const char *name, size_t n);

/* A parsed workload: its family and one value per key, in key order. */
typedef struct {
  const wl_family *fam;
  int64_t v[WL_MAX_KEYS];
} wl_params;

/* Parses a spec or alias into checked values (spec.c). */
bool wl_params_parse(const char *spec, wl_params *p, dg_status *st);
/* Range, consistency and size checks of values (spec.c). */
bool wl_params_check(const wl_params *p, dg_status *st);
/* Writes the canonical spec of values (spec.c). */
void wl_params_print(const wl_params *p, dg_str *out);

/* The spec an alias stands for ("GMM/1" -> "batch_matmul:..."), or NULL if
 * `name` (n bytes, without "/idx") is not an alias; idx out of range gives
 * NULL and sets *bad_idx (alias.c). */
const char *wl_alias_spec(const char *name, size_t n, int idx, bool *bad_idx);

/* The dtype a dtype key value stands for. */
static inline dg_dtype wl_dtype_of(int64_t v) { return v ? DG_F16 : DG_F32; }

/* Adds the bytes of a tensor of `ndim` dims of type t to *acc, saturating
 * (values are range-checked but their products can overflow). */
void wl_bytes_add(int64_t *acc, dg_dtype t, int ndim, ...);
/* The product of n dims, saturating like wl_bytes_add. */
int64_t wl_numel(int n, const int64_t *d);

/* Sampling helpers for the generators (generate.c). */
int64_t wl_pick(dg_rng *r, const int64_t *vals, size_t n);
#define WL_PICK(r, arr) wl_pick((r), (arr), DG_ARRAY_LEN(arr))
/* A model dimension: hidden sizes, powers of two, odd sizes, multiples. */
int64_t wl_gen_dim(dg_rng *r, int64_t lo, int64_t hi);
int64_t wl_gen_batch(dg_rng *r);       /* 1-64, mostly small */
int64_t wl_gen_tokens(dg_rng *r);      /* batch * sequence rows */
int64_t wl_gen_hidden(dg_rng *r);      /* 768 .. 8192 and FFN sizes */
int64_t wl_gen_image(dg_rng *r);       /* 7 .. 224 */
int64_t wl_gen_channels(dg_rng *r);    /* 3 .. 2048 */
int64_t wl_gen_dtype(dg_rng *r);       /* 0 (f32) or 1 (f16) */

/* ---- the TE helper (te.c) ------------------------------------------------ */

typedef struct {
  const char *name;
  int64_t extent;
} te_axis;

typedef enum {
  TE_ASSIGN, /* no reduce axes */
  TE_SUM,
  TE_MAX,
} te_reduce;

typedef struct te_ctx {
  dg_func *f;
  dg_block *root;
  DG_VEC(dg_stmt *) body;
  DG_VEC(const char *) names;
  /* the compute between te_begin and te_end */
  struct {
    bool open;
    dg_buffer *out;
    dg_block *block;
    te_reduce red;
    int n;
    dg_var *loop[DG_MAX_DIMS * 2];
    int64_t ext[DG_MAX_DIMS * 2];
    dg_expr *iv[DG_MAX_DIMS * 2];
  } cur;
} te_ctx;

/* A kernel named "main" with a root block named "root". */
void te_init(te_ctx *c);
/* Finishes the root block and hands the kernel over. */
dg_func *te_finish(te_ctx *c);
/* A parameter buffer (inputs, in parameter order). */
dg_buffer *te_placeholder(te_ctx *c, const char *name, dg_dtype t, int ndim,
                          const int64_t *shape);
/* Opens a compute named `name` (block and buffer) over spatial axes sp and
 * reduce axes rd; the result buffer is a parameter if `output`, else an
 * intermediate allocated by the root block. Returns the iteration
 * variables, spatial first, then reduce. */
dg_expr **te_begin(te_ctx *c, const char *name, dg_dtype t, bool output,
                   const te_axis *sp, int nsp, const te_axis *rd, int nrd,
                   te_reduce red);
/* Closes the open compute with its value (of the buffer's dtype); returns
 * the result buffer. */
dg_buffer *te_end(te_ctx *c, dg_expr *value);
/* The block of the last compute (for annotations). */
dg_block *te_last_block(te_ctx *c);

/* topi.nn.pad: a compute named `name` over axes i0.. with zero-based
 * padding before/after each dimension; pad_value fills the border. */
dg_buffer *te_pad(te_ctx *c, const char *name, dg_buffer *in,
                  const int64_t *before, const int64_t *after,
                  double pad_value);

/* Integer index arithmetic folding the trivial cases the way TVM's operator
 * overloads do (x*1, x*0, x+0, x//1, x%1, constant operands). */
dg_expr *te_int(te_ctx *c, int64_t v);
dg_expr *te_add(te_ctx *c, dg_expr *a, dg_expr *b);
dg_expr *te_sub(te_ctx *c, dg_expr *a, dg_expr *b);
dg_expr *te_mul(te_ctx *c, dg_expr *a, dg_expr *b);
dg_expr *te_muli(te_ctx *c, dg_expr *a, int64_t k);
dg_expr *te_addi(te_ctx *c, dg_expr *a, int64_t k);
dg_expr *te_floordiv(te_ctx *c, dg_expr *a, int64_t k);
dg_expr *te_floormod(te_ctx *c, dg_expr *a, int64_t k);
/* Left-associated conjunction of n conditions (n > 0). */
dg_expr *te_all(te_ctx *c, dg_expr **conds, int n);

/* Values. */
dg_expr *te_load(te_ctx *c, dg_buffer *b, ...); /* b->ndim index exprs */
dg_expr *te_loadv(te_ctx *c, dg_buffer *b, dg_expr **idx);
dg_expr *te_cast(te_ctx *c, dg_dtype t, dg_expr *a); /* no-op if same */
dg_expr *te_float(te_ctx *c, double v, dg_dtype t);
/* The lowest finite value of a float dtype (the init of a max). */
double te_lowest(dg_dtype t);

#endif
