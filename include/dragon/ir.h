/* ir.h: the TensorIR-style kernel IR.
 *
 * A kernel (dg_func) is a list of parameter buffers and a body whose root is
 * a block named "root". Blocks carry iteration variables (spatial or reduce,
 * each with a domain [0, extent) and a binding expression over the enclosing
 * loop variables), read and write regions, an optional init statement, the
 * buffers they allocate and annotations. Loops run from 0 to a constant
 * extent and have a kind (serial, parallel, vectorized, unrolled,
 * thread-bound with a tag).
 *
 * Everything of one kernel lives in the kernel's arena. Nodes are plain
 * structs: schedule primitives rewrite them in place on their own copy
 * (ir_func_clone). Variables and buffers are identified by pointer; their
 * names are unique within a kernel (the verifier checks it), which is what
 * lets the kernel text refer to them by name.
 *
 * Dimension letters and units: extents and shapes in elements, int64.
 */
#ifndef DRAGON_IR_H
#define DRAGON_IR_H

#include "dragon/base.h"

/* ---- dtypes -------------------------------------------------------------- */

/* X(enum suffix, text name, bytes, is_float) */
#define DG_DTYPE_LIST(X)   \
  X(BOOL, "bool", 1, 0)    \
  X(I8, "i8", 1, 0)        \
  X(I32, "i32", 4, 0)      \
  X(I64, "i64", 8, 0)      \
  X(F16, "f16", 2, 1)      \
  X(F32, "f32", 4, 1)      \
  X(F64, "f64", 8, 1)

typedef enum {
#define X(e, s, b, f) DG_##e,
  DG_DTYPE_LIST(X)
#undef X
  DG_DTYPE_COUNT
} dg_dtype;

const char *dg_dtype_name(dg_dtype t);
int dg_dtype_bytes(dg_dtype t);
bool dg_dtype_is_float(dg_dtype t);
bool dg_dtype_is_int(dg_dtype t); /* i8 i32 i64 (not bool) */
/* Looks up "f32" etc.; returns false if unknown. */
bool dg_dtype_from_name(const char *s, size_t n, dg_dtype *out);

/* ---- storage scopes ------------------------------------------------------ */

#define DG_SCOPE_LIST(X)                  \
  X(GLOBAL, "global")                     \
  X(SHARED, "shared")                     \
  X(SHARED_DYN, "shared.dyn")             \
  X(LOCAL, "local")                       \
  X(WMMA_A, "wmma.matrix_a")              \
  X(WMMA_B, "wmma.matrix_b")              \
  X(WMMA_ACC, "wmma.accumulator")

typedef enum {
#define X(e, s) DG_SCOPE_##e,
  DG_SCOPE_LIST(X)
#undef X
  DG_SCOPE_COUNT
} dg_scope;

const char *dg_scope_name(dg_scope s);
bool dg_scope_from_name(const char *s, size_t n, dg_scope *out);

/* ---- loops and thread tags ----------------------------------------------- */

#define DG_LOOP_KIND_LIST(X) \
  X(SERIAL, "serial")        \
  X(PARALLEL, "parallel")    \
  X(VECTORIZED, "vectorized") \
  X(UNROLLED, "unrolled")    \
  X(THREAD, "bind")

typedef enum {
#define X(e, s) DG_LOOP_##e,
  DG_LOOP_KIND_LIST(X)
#undef X
  DG_LOOP_KIND_COUNT
} dg_loop_kind;

const char *dg_loop_kind_name(dg_loop_kind k);

#define DG_THREAD_TAG_LIST(X)        \
  X(NONE, "")                        \
  X(BLOCK_X, "blockIdx.x")           \
  X(BLOCK_Y, "blockIdx.y")           \
  X(BLOCK_Z, "blockIdx.z")           \
  X(THREAD_X, "threadIdx.x")         \
  X(THREAD_Y, "threadIdx.y")         \
  X(THREAD_Z, "threadIdx.z")         \
  X(VTHREAD_X, "vthread.x")          \
  X(VTHREAD_Y, "vthread.y")          \
  X(VTHREAD_Z, "vthread.z")

typedef enum {
#define X(e, s) DG_TAG_##e,
  DG_THREAD_TAG_LIST(X)
#undef X
  DG_TAG_COUNT
} dg_thread_tag;

const char *dg_thread_tag_name(dg_thread_tag t);
bool dg_thread_tag_from_name(const char *s, size_t n, dg_thread_tag *out);
bool dg_thread_tag_is_block(dg_thread_tag t);   /* blockIdx.* */
bool dg_thread_tag_is_thread(dg_thread_tag t);  /* threadIdx.* */
bool dg_thread_tag_is_vthread(dg_thread_tag t); /* vthread.* */

/* ---- math functions ------------------------------------------------------ */

/* X(enum suffix, name, arity) */
#define DG_MATH_LIST(X) \
  X(EXP, "exp", 1)      \
  X(LOG, "log", 1)      \
  X(SQRT, "sqrt", 1)    \
  X(RSQRT, "rsqrt", 1)  \
  X(TANH, "tanh", 1)    \
  X(ERF, "erf", 1)      \
  X(POW, "pow", 2)      \
  X(FABS, "fabs", 1)    \
  X(SIGMOID, "sigmoid", 1) \
  X(COS, "cos", 1)      \
  X(SIN, "sin", 1)

typedef enum {
#define X(e, s, n) DG_MATH_##e,
  DG_MATH_LIST(X)
#undef X
  DG_MATH_COUNT
} dg_math;

const char *dg_math_name(dg_math m);
int dg_math_arity(dg_math m);
bool dg_math_from_name(const char *s, size_t n, dg_math *out);

/* ---- expressions --------------------------------------------------------- */

/* X(enum suffix, operator text or name, operand count; -1 = variadic) */
#define DG_EXPR_LIST(X)      \
  X(INT, "int", 0)           \
  X(FLOAT, "float", 0)       \
  X(VAR, "var", 0)           \
  X(LOAD, "load", -1)        \
  X(ADD, "+", 2)             \
  X(SUB, "-", 2)             \
  X(MUL, "*", 2)             \
  X(DIV, "/", 2)             \
  X(FLOORDIV, "//", 2)       \
  X(FLOORMOD, "%", 2)        \
  X(MIN, "min", 2)           \
  X(MAX, "max", 2)           \
  X(EQ, "==", 2)             \
  X(NE, "!=", 2)             \
  X(LT, "<", 2)              \
  X(LE, "<=", 2)             \
  X(GT, ">", 2)              \
  X(GE, ">=", 2)             \
  X(AND, "&&", 2)            \
  X(OR, "||", 2)             \
  X(NOT, "!", 1)             \
  X(SELECT, "select", 3)     \
  X(CAST, "cast", 1)         \
  X(CALL, "call", -1)

typedef enum {
#define X(e, s, n) DG_EXPR_##e,
  DG_EXPR_LIST(X)
#undef X
  DG_EXPR_COUNT
} dg_expr_kind;

const char *dg_expr_kind_name(dg_expr_kind k);

typedef struct dg_var dg_var;
typedef struct dg_buffer dg_buffer;
typedef struct dg_expr dg_expr;
typedef struct dg_stmt dg_stmt;
typedef struct dg_block dg_block;
typedef struct dg_func dg_func;

struct dg_var {
  const char *name;
  dg_dtype dtype; /* i32 for loop and iteration variables */
  int id;         /* serial within the kernel; stable under clone */
};

#define DG_MAX_DIMS 8

struct dg_buffer {
  const char *name;
  dg_dtype dtype;
  int ndim;
  int64_t shape[DG_MAX_DIMS];
  dg_scope scope;
  int id; /* serial within the kernel */
};

/* Semantics:
 *  DIV is true division for floats (ints must use FLOORDIV);
 *  FLOORDIV/FLOORMOD round toward negative infinity (ints only);
 *  comparisons and AND/OR/NOT give bool; SELECT(c, a, b) evaluates only the
 *  chosen arm (so it may guard an out-of-bounds load, as padding needs);
 *  CAST converts to e->dtype; CALL applies a math function to floats. */
struct dg_expr {
  dg_expr_kind kind;
  dg_dtype dtype;
  int64_t ival;    /* INT */
  double fval;     /* FLOAT (f16 values are exactly representable halves) */
  dg_var *var;     /* VAR */
  dg_expr *a, *b, *c; /* operands: binary a,b; unary/CAST a; SELECT c?a:b as (a=cond,b,c) */
  dg_buffer *buf;  /* LOAD */
  dg_expr **args;  /* LOAD indices, CALL arguments */
  int nargs;
  dg_math fn;      /* CALL */
};

/* ---- annotations --------------------------------------------------------- */

typedef enum {
  DG_ANN_INT,
  DG_ANN_FLOAT,
  DG_ANN_STR,
  DG_ANN_INTS,
} dg_ann_kind;

typedef struct {
  const char *key;
  dg_ann_kind kind;
  int64_t i;
  double f;
  const char *s;
  int64_t *ints;
  int nints;
} dg_ann;

/* A set of annotations, kept sorted by key (a map: one value per key). */
typedef struct {
  dg_ann *items;
  int n;
} dg_anns;

/* ---- blocks, regions, statements ----------------------------------------- */

typedef enum {
  DG_ITER_SPATIAL,
  DG_ITER_REDUCE,
} dg_iter_kind;

typedef struct {
  dg_var *var;
  int64_t extent;    /* domain [0, extent) */
  dg_iter_kind kind;
  dg_expr *binding;  /* over enclosing loop variables */
} dg_iter;

/* A rectangular region of a buffer: per dimension [min, min + extent). */
typedef struct {
  dg_buffer *buf;
  dg_expr **min;  /* buf->ndim entries */
  dg_expr **ext;  /* buf->ndim entries */
} dg_region;

struct dg_block {
  const char *name;
  dg_iter *iters;
  int n_iters;
  dg_expr *predicate; /* NULL means true */
  dg_region *reads;
  int n_reads;
  dg_region *writes;
  int n_writes;
  dg_buffer **allocs;
  int n_allocs;
  dg_anns anns;
  dg_stmt *init; /* NULL: none. Runs when every reduce iter var is 0. */
  dg_stmt *body;
};

typedef enum {
  DG_STMT_FOR,
  DG_STMT_SEQ,
  DG_STMT_BLOCK, /* a block realize: the block with its bindings and predicate */
  DG_STMT_STORE,
  DG_STMT_IF,
} dg_stmt_kind;

struct dg_stmt {
  dg_stmt_kind kind;
  /* FOR */
  dg_var *loop_var;
  int64_t extent; /* [0, extent) */
  dg_loop_kind loop_kind;
  dg_thread_tag tag; /* DG_LOOP_THREAD only */
  dg_anns anns;
  dg_stmt *body; /* FOR body */
  /* SEQ */
  dg_stmt **stmts;
  int n;
  /* BLOCK */
  dg_block *block;
  /* STORE: buf[idx...] = value */
  dg_buffer *buf;
  dg_expr **idx;
  int nidx;
  dg_expr *value;
  /* IF */
  dg_expr *cond;
  dg_stmt *then_s, *else_s; /* else_s may be NULL */
};

struct dg_func {
  dg_arena *arena;
  const char *name;
  dg_buffer **params;
  int n_params;
  dg_stmt *body; /* a DG_STMT_BLOCK whose block is named "root" */
  int next_var_id, next_buf_id;
};

/* ---- construction -------------------------------------------------------- */

/* A new, empty kernel with its own arena; body is NULL until set. */
dg_func *ir_func_new(const char *name);
void ir_func_free(dg_func *f);
/* Deep copy into a fresh arena; ids are preserved. */
dg_func *ir_func_clone(const dg_func *f);

dg_var *ir_var_new(dg_func *f, const char *name, dg_dtype dtype);
dg_buffer *ir_buffer_new(dg_func *f, const char *name, dg_dtype dtype,
                         int ndim, const int64_t *shape, dg_scope scope);
void ir_func_add_param(dg_func *f, dg_buffer *b);
int64_t ir_buffer_numel(const dg_buffer *b);
/* Iterations of f's statements under their loops, summed. all: every
 * statement (a block's init, what a condition guards, and each condition
 * once an iteration): what its reference executes, within a small factor;
 * !all: what every run must execute, a lower bound (the blocks' bodies,
 * none under a condition or a block predicate; an init, which runs once
 * an output under the reduction loops, not counted). */
double ir_func_iterations(const dg_func *f, bool all);

/* Expressions. Binary helpers infer the result dtype (comparisons: bool;
 * otherwise the operands', which must agree; DG_ASSERT otherwise). */
dg_expr *ir_int(dg_func *f, int64_t v);                 /* i32 */
dg_expr *ir_int_t(dg_func *f, int64_t v, dg_dtype t);
dg_expr *ir_float(dg_func *f, double v, dg_dtype t);
dg_expr *ir_bool(dg_func *f, bool v);
dg_expr *ir_var(dg_func *f, dg_var *v);
dg_expr *ir_bin(dg_func *f, dg_expr_kind k, dg_expr *a, dg_expr *b);
dg_expr *ir_add(dg_func *f, dg_expr *a, dg_expr *b);
dg_expr *ir_sub(dg_func *f, dg_expr *a, dg_expr *b);
dg_expr *ir_mul(dg_func *f, dg_expr *a, dg_expr *b);
dg_expr *ir_not(dg_func *f, dg_expr *a);
dg_expr *ir_select(dg_func *f, dg_expr *c, dg_expr *a, dg_expr *b);
dg_expr *ir_cast(dg_func *f, dg_dtype t, dg_expr *a);
dg_expr *ir_call(dg_func *f, dg_math fn, dg_expr **args, int n);
dg_expr *ir_call1(dg_func *f, dg_math fn, dg_expr *a);
dg_expr *ir_load(dg_func *f, dg_buffer *b, dg_expr **idx, int n);
/* Shallow node copy (children shared). */
dg_expr *ir_expr_copy(dg_func *f, const dg_expr *e);

/* Statements. Arrays passed in are copied into the arena. */
dg_stmt *ir_for(dg_func *f, dg_var *v, int64_t extent, dg_loop_kind k,
                dg_thread_tag tag, dg_stmt *body);
dg_stmt *ir_seq(dg_func *f, dg_stmt **stmts, int n);
dg_stmt *ir_store(dg_func *f, dg_buffer *b, dg_expr **idx, int n,
                  dg_expr *value);
dg_stmt *ir_if(dg_func *f, dg_expr *cond, dg_stmt *then_s, dg_stmt *else_s);
dg_block *ir_block_new(dg_func *f, const char *name);
dg_stmt *ir_block_stmt(dg_func *f, dg_block *b);
void ir_block_add_iter(dg_func *f, dg_block *b, dg_var *v, int64_t extent,
                       dg_iter_kind kind, dg_expr *binding);
/* min/ext arrays of buf->ndim entries; ext NULL means all ones. */
void ir_block_add_read(dg_func *f, dg_block *b, dg_buffer *buf,
                       dg_expr **min, dg_expr **ext);
void ir_block_add_write(dg_func *f, dg_block *b, dg_buffer *buf,
                        dg_expr **min, dg_expr **ext);
void ir_block_add_alloc(dg_func *f, dg_block *b, dg_buffer *buf);

/* Annotation sets stay sorted by key; setting an existing key replaces. */
void ir_anns_set_int(dg_func *f, dg_anns *a, const char *key, int64_t v);
void ir_anns_set_float(dg_func *f, dg_anns *a, const char *key, double v);
void ir_anns_set_str(dg_func *f, dg_anns *a, const char *key, const char *v);
void ir_anns_set_ints(dg_func *f, dg_anns *a, const char *key,
                      const int64_t *v, int n);
void ir_anns_set(dg_func *f, dg_anns *a, const dg_ann *v); /* deep copies */
const dg_ann *ir_anns_get(const dg_anns *a, const char *key);
bool ir_anns_remove(dg_anns *a, const char *key);

/* ---- queries ------------------------------------------------------------- */

/* The root block (f->body->block). */
dg_block *ir_func_root(const dg_func *f);
/* True and *v set if e is an integer constant (after no simplification). */
bool ir_is_const_int(const dg_expr *e, int64_t *v);
/* Visits every block in pre-order (the root first). Stop by returning false. */
typedef bool (*dg_block_visit)(dg_block *b, dg_stmt *realize, void *ctx);
void ir_visit_blocks(dg_stmt *s, dg_block_visit fn, void *ctx);
/* Finds a block by name (NULL if none). */
dg_block *ir_find_block(const dg_func *f, const char *name);
/* Looks up a buffer by name among the params and every block's allocs. */
dg_buffer *ir_find_buffer(const dg_func *f, const char *name);

/* ---- analysis (simplify.c, bounds.c) ------------------------------------- */

/* Closed integer interval; lo > hi never happens for a valid one. */
typedef struct {
  int64_t lo, hi;
} dg_interval;

/* Known ranges of variables, innermost last: loop vars [0, extent-1],
 * iteration vars [0, extent-1]. A small stack; lookups scan it. */
typedef struct {
  const dg_var *var[64];
  dg_interval iv[64];
  int n;
} dg_ranges;

void ir_ranges_push(dg_ranges *r, const dg_var *v, int64_t lo, int64_t hi);
void ir_ranges_pop(dg_ranges *r, int n);
bool ir_ranges_get(const dg_ranges *r, const dg_var *v, dg_interval *out);

/* Integer bounds of an integer expression, given ranges for its variables
 * (unknown variables and non-integer parts give the dtype's full range). */
dg_interval ir_expr_bounds(const dg_expr *e, const dg_ranges *r);

/* Simplifies an expression: constant folding, canonical linear forms
 * (sums of constant multiples of terms, ordered), floordiv/floormod
 * identities justified by the ranges (e.g. (i*32 + j) // 32 -> i when
 * 0 <= j < 32), min/max/comparison folding by bounds, boolean identities.
 * Float expressions are only constant-folded where exact. Never changes
 * the value of the expression. The result lives in f's arena; r may be NULL.
 * Idempotent: simplify(simplify(e)) == simplify(e) structurally. */
dg_expr *ir_simplify(dg_func *f, const dg_expr *e, const dg_ranges *r);
/* True if the simplifier proves a (bool) expression true under r. */
bool ir_prove(dg_func *f, const dg_expr *cond, const dg_ranges *r);

/* Substitutes variables (map[i].from -> map[i].to) in an expression or
 * statement, returning a new tree (unchanged subtrees may be shared). */
typedef struct {
  const dg_var *from;
  dg_expr *to;
} dg_subst;
dg_expr *ir_subst_expr(dg_func *f, dg_expr *e, const dg_subst *map, int n);
dg_stmt *ir_subst_stmt(dg_func *f, dg_stmt *s, const dg_subst *map, int n);
/* Whether variable v occurs in e. */
bool ir_expr_uses_var(const dg_expr *e, const dg_var *v);

/* ---- equality, hashing, verification (equal.c, verify.c) ----------------- */

/* Structural equality of kernels: same shape of tree, same kinds, dtypes,
 * constants, names of blocks, buffers and variables, annotations. Variables
 * and buffers compare by definition position, not pointer. */
bool ir_func_equal(const dg_func *a, const dg_func *b);
bool ir_expr_equal(const dg_expr *a, const dg_expr *b); /* vars by pointer */
/* Structural hash consistent with ir_func_equal. It identifies a workload. */
uint64_t ir_func_hash(const dg_func *f);
/* If not equal, writes a short description of the first difference. */
bool ir_func_equal_explain(const dg_func *a, const dg_func *b, char *why,
                           size_t n);

/* Checks the invariants every pass relies on: unique names of variables,
 * buffers and blocks; every variable used is defined in scope; dtypes agree;
 * loads/stores have the buffer's rank; bindings use only loop variables;
 * loop extents > 0; stores only inside blocks to written buffers; the root
 * block is named "root"; allocated buffers are used only under their block.
 * Returns false with a message naming the block/loop at fault. */
bool ir_verify(const dg_func *f, dg_status *st);

/* ---- kernel text (printer.c, parser.c) ----------------------------------- */

/* Canonical kernel text (docs/kernel-text.md). Caller frees. */
char *ir_print(const dg_func *f);
void ir_print_expr(dg_str *out, const dg_expr *e);
void ir_print_stmt(dg_str *out, const dg_stmt *s, int indent);
/* Parses kernel text; errors as "<file>:line:col: message". */
dg_func *ir_parse(const char *text, const char *filename, dg_status *st);
/* The extent of a region dimension written `lo:hi` in kernel text (lo, hi of
 * one integer dtype): the tail x when hi is written `lo + x`, otherwise
 * ir_simplify(hi - lo). The printer picks each hi so that this gives back
 * the region's extent exactly. */
dg_expr *ir_text_range_extent(dg_func *f, dg_expr *lo, dg_expr *hi);

#endif
