/* tsel_impl.h: what the TSEL files share: the graph's syntax tree, the
 * table of edits (their operand signatures, keywords and defaults), the
 * typing environment that the checker, lower and lift step through edit by
 * edit, and the expansion of one edit into trace instructions.
 *
 * Handles: each edit's outputs get trace handle ids in the order lower
 * emits the instructions; folded edits also create hidden handles (the
 * sampled values of tile, coop, unroll_steps, thread_split) that no edit
 * can name.
 */
#ifndef DRAGON_TSEL_IMPL_H
#define DRAGON_TSEL_IMPL_H

#include "dragon/tsel.h"

/* ---- syntax tree ------------------------------------------------------------ */

typedef enum {
  TV_NONE,  /* _ */
  TV_INT,
  TV_FLOAT,
  TV_BOOL,  /* true / false */
  TV_STR,   /* "..." (s holds the decoded bytes) */
  TV_WORD,  /* a bare word: axis, scope, read/write, annotation alias, default */
  TV_REF,   /* tN or tN.k */
  TV_COUNT, /* xN */
  TV_LIST,  /* [a b ...] */
} tsel_vkind;

typedef struct tsel_val tsel_val;
struct tsel_val {
  tsel_vkind kind;
  int64_t i;       /* INT, BOOL (0/1), COUNT; REF: the edit number N of tN */
  int sub;         /* REF: output index k of tN.k, -1 when written bare */
  double f;        /* FLOAT */
  const char *s;   /* STR, WORD */
  tsel_val *items; /* LIST */
  int n;
  int line, col;   /* where it starts (0 when built by lift) */
};

typedef struct {
  const char *key; /* "" for =V */
  tsel_val val;
  int line, col;
} tsel_kw;

typedef struct {
  int op; /* tsel_op */
  tsel_val *args;
  int n_args;
  tsel_kw *kws;
  int n_kws;
  int line, col, op_col;
} tsel_edit;

typedef enum { TL_EDIT, TL_WHY, TL_EXPECT, TL_COMMENT } tsel_line_kind;

typedef struct {
  tsel_line_kind kind;
  int edit;        /* TL_EDIT: index into edits */
  int *refs;       /* TL_WHY: edit numbers */
  int *ref_cols;
  int n_refs;
  int num;         /* TL_EXPECT: N of pN */
  const char *text; /* TL_WHY, TL_EXPECT, TL_COMMENT */
  int line;
} tsel_line;

struct tsel_graph {
  dg_arena *arena;
  const char *filename; /* for messages; may be NULL */
  const char *kernel;
  tsel_edit *edits;
  int n_edits, cap_edits;
  tsel_line *lines;
  int n_lines, cap_lines;
};

tsel_graph *tsel_graph_new(const char *kernel);
/* The next edit line where the graph so far fixes it (without its `tN `
 * and newline), appended to out: the reorder of a multi-level tiling
 * once its last tile is written (determined.c). False where the next line
 * is the model's to choose. */
bool tsel_determined_line(const tsel_graph *g, dg_str *out);
/* The tiling structure ("SSSRRSRS") annotated on block edit b, or NULL. */
const char *tsel_tiling_of(const tsel_graph *g, int b);
/* Appends an edit (args and kws copied into the graph's arena). */
tsel_edit *tsel_graph_add_edit(tsel_graph *g, const tsel_edit *e);
void tsel_graph_add_why(tsel_graph *g, const int *refs, int n, const char *text);
void tsel_graph_add_expect(tsel_graph *g, const char *text);
tsel_val tsel_val_copy(dg_arena *a, const tsel_val *v);
/* The length (1 to 4) of the UTF-8 sequence at s[0..n), or 0 if the bytes
 * there are not one: overlong forms, surrogates and code points past
 * U+10FFFF are refused, as the trace JSON loader refuses them (parse.c). */
int tsel_utf8_len(const unsigned char *s, size_t n);
/* The offset of the first byte of s[0..n) that is not valid UTF-8, or n. */
size_t tsel_utf8_bad(const char *s, size_t n);

/* ---- the edits -------------------------------------------------------------- */

#define TSEL_OP_LIST(X)                                                       \
  X(BLOCK, "block") X(LOOPS, "loops") X(CHILDREN, "children")                 \
  X(PRODUCERS, "producers") X(CONSUMERS, "consumers") X(SPLIT, "split")       \
  X(FUSE, "fuse") X(REORDER, "reorder") X(ADD_UNIT_LOOP, "add_unit_loop")     \
  X(PARALLEL, "parallel") X(VECTORIZE, "vectorize") X(UNROLL, "unroll")       \
  X(BIND, "bind") X(CACHE_READ, "cache_read") X(CACHE_WRITE, "cache_write")   \
  X(REINDEX, "reindex") X(COMPUTE_AT, "compute_at")                           \
  X(REVERSE_COMPUTE_AT, "reverse_compute_at") X(INLINE, "inline")             \
  X(REVERSE_INLINE, "reverse_inline")                                         \
  X(DECOMPOSE_REDUCTION, "decompose_reduction") X(RFACTOR, "rfactor")         \
  X(STORAGE_ALIGN, "storage_align") X(SET_SCOPE, "set_scope")                 \
  X(BLOCKIZE, "blockize") X(TENSORIZE, "tensorize") X(ANNOTATE, "annotate")   \
  X(UNANNOTATE, "unannotate") X(SAMPLE_TILE, "sample_tile")                   \
  X(SAMPLE, "sample") X(SAMPLE_LOC, "sample_loc") X(POSTPROC, "postproc")     \
  X(RAW, "raw") X(TILE, "tile") X(FUSE_BIND, "fuse_bind")                     \
  X(CACHE_READ_AT, "cache_read_at") X(CACHE_WRITE_AT, "cache_write_at")       \
  X(COOP, "coop") X(UNROLL_STEPS, "unroll_steps") X(THREAD_SPLIT, "thread_split")

typedef enum {
#define X(e, s) TSEL_OP_##e,
  TSEL_OP_LIST(X)
#undef X
  TSEL_OP_COUNT
} tsel_op;

/* Keyword types: 'f' a flag (int or bool literal, kept as written), 'i'
 * int, 's' str, 'v' the chosen value of a sample (=V), 'F' float list,
 * 'g' any literal (raw decision), 'k' raw output kinds ("blv" letters). */
typedef struct {
  const char *key;
  char type;
  bool required;
} tsel_kwspec;

/* Positional operand codes: B block, L loop, X block or loop, i int, s str,
 * a axis, p scope, w read|write, k annotation key, v annotation value, f
 * factor list, c int list, q block list, n count xN, g any list (raw
 * inputs), h any list without handles (raw attrs), d the word `default`
 * (optional). A code followed by '+' repeats one or more times. */
typedef struct {
  const char *name;
  const char *args;
  tsel_kwspec kws[4];
  int n_insts; /* instructions it expands to (0: varies) */
} tsel_opspec;

extern const tsel_opspec tsel_ops[TSEL_OP_COUNT];
bool tsel_op_from_name(const char *s, size_t n, int *op);

/* Annotation keys and their short aliases. */
const char *tsel_ann_alias(const char *key);       /* NULL if none */
const char *tsel_ann_full(const char *alias);      /* NULL if not an alias */
/* Whether the annotation an alias stands for takes a tensor intrinsic's
 * name (tensorize_as, tensorize_init). */
bool tsel_ann_names_intrin(const char *alias);
/* What an annotation's value is by its key (an alias, or a key written in
 * full): the kinds MetaSchedule writes; ANY for a key it never writes. */
typedef enum {
  TSEL_ANN_ANY,    /* any value */
  TSEL_ANN_INT,    /* an integer, or a handle of a sampled one */
  TSEL_ANN_STR,    /* a string */
  TSEL_ANN_TILING, /* a multi-level tiling's structure (tsel_ann_tiling_at) */
  TSEL_ANN_INTRIN, /* a tensor intrinsic's name */
  TSEL_ANN_INTS,   /* a list of integers */
} tsel_ann_kind;
tsel_ann_kind tsel_ann_value_kind(const char *key);
/* The keys without an alias that MetaSchedule writes, sorted. */
int tsel_ann_key_count(void);
const char *tsel_ann_key_at(int i);
/* The structures MultiLevelTiling writes ("SSSRRSRS", ...), sorted. */
int tsel_ann_tiling_count(void);
const char *tsel_ann_tiling_at(int i);

/* A keyword of an edit, or NULL. */
const tsel_kw *tsel_edit_kw(const tsel_edit *e, const char *key);

/* ---- typing environment (check.c) ------------------------------------------ */

typedef struct {
  int n_out;
  int *rv;                /* handle id of each output */
  sched_rv_kind *kind;    /* its type */
  int *consumed;          /* edit number that consumed it, 0 if live */
  int hidden_rv, n_hidden; /* hidden handles of folds */
  int alias_of;           /* fuse_bind of one loop: the output is the input */
} tsel_out;

typedef struct {
  tsel_out *outs; /* per edit, index = number - 1 */
  int n_done;     /* edits typed so far */
  int cap;
  int next_rv;
  dg_arena *a;
  /* undo log of the last commit: consumed slots it set */
  int undo_edit[64], undo_sub[64];
  int n_undo;
} tsel_env;

void tsel_env_init(tsel_env *env, int cap);
void tsel_env_free(tsel_env *env);
/* Types edit number n_done+1 (its operands must refer to earlier edits)
 * and, if it checks, commits its outputs. Errors are located (g's filename
 * and the operand's line:col). */
bool tsel_env_step(tsel_env *env, const tsel_graph *g, const tsel_edit *e, dg_status *st);
/* Types every edit of g in order (env fresh, cap >= g->n_edits) and the
 * why/expect links. */
bool tsel_typecheck(const tsel_graph *g, tsel_env *env, dg_status *st);
/* Takes back the last successful step. */
void tsel_env_undo(tsel_env *env);
/* Resolves a ref of a typed edit. */
int tsel_env_ref_rv(const tsel_env *env, const tsel_val *ref);

/* Formats a located error: "FILE:line:col: tN OP: message". */
bool tsel_fail_at(dg_status *st, const tsel_graph *g, int line, int col, const tsel_edit *e,
                  int edit_number, const char *fmt, ...) __attribute__((format(printf, 7, 8)));

/* The chosen index of a sample-like edit (sample, coop, unroll_steps,
 * thread_split): index= if given, else the position of =V in the list. */
int tsel_sample_index(const tsel_edit *e);

/* ---- expansion (lower.c) ------------------------------------------------------ */

/* Appends the instructions of a typed edit (the last step of env) to t. */
void tsel_expand_edit(const tsel_env *env, const tsel_edit *e, int edit_number, sched_trace *t);

/* ---- kernel facts (semantic.c) ------------------------------------------------ */

/* What the symbolic pass over a graph learns about one edit output. */
typedef struct {
  int64_t ext;            /* loop: extent, -1 unknown */
  int64_t val;            /* int handle: value, -1 unknown */
  const dg_stmt *orig;    /* loop: the kernel loop it comes from, NULL unknown */
  const dg_block *block;  /* block: the kernel block, NULL if another */
  int n_reads, n_writes;  /* block: region counts, -1 unknown */
  const dg_buffer *buf;   /* cache blocks: the kernel buffer they stage */
} tsel_ofact;

typedef struct {
  tsel_ofact **of;        /* per edit, per output */
  int64_t *value;         /* per edit: the value a sample-like edit chose, -1 */
  int n_edits;
  int64_t thread_ext[3];  /* largest extent bound to threadIdx.x/y/z, 0 none */
  dg_arena *a;
} tsel_facts;

/* Types the graph and runs the semantic checks against the kernel, filling
 * facts (may be NULL). */
bool tsel_semantic(const tsel_graph *g, const dg_func *kernel, tsel_target target,
                   tsel_facts *facts, dg_status *st);
void tsel_facts_free(tsel_facts *f);

/* ---- values -------------------------------------------------------------------- */

/* Appends the canonical spelling of a value. */
void tsel_print_val(dg_str *o, const tsel_val *v);
/* Shortest decimal that reads back exactly, always with '.' or 'e'. */
void tsel_print_float(dg_str *o, double f);

/* ---- the `postproc default` fold (postproc.c) ---------------------------- */

/* head (no EnterPostproc) replayed on the kernel, then EnterPostproc and the
 * default CUDA postprocessors: the whole trace, or NULL with st set. */
sched_trace *tsel_postproc_expand(const sched_trace *head, const dg_func *kernel, dg_status *st);
/* The index of t's EnterPostproc when everything from it on is exactly what
 * the default postprocessors record on the kernel (kernel, or the workload
 * of kernel_spec when NULL); -1 otherwise. */
int tsel_postproc_default_at(const sched_trace *t, const char *kernel_spec,
                             const dg_func *kernel);

/* ---- constrained decoding (prefix.c) ----------------------------------------- */

/* A state of a prefix checker: a small struct that trial readers copy. A
 * state of checker p reads p's text buffer up to its own length and writes
 * the bytes it is fed past it. */
typedef struct tsel_pstate tsel_pstate;
size_t tsel_pstate_size(void);
/* d = s, copying only the parts in use. */
void tsel_pstate_copy(tsel_pstate *d, const tsel_pstate *s);
tsel_pstate *tsel_prefix_state(tsel_prefix *p);
/* Feeds one byte to s (a copy of a state of p); s is garbage on false. */
bool tsel_pstate_feed(tsel_prefix *p, tsel_pstate *s, unsigned char c);
bool tsel_pstate_complete(const tsel_pstate *s);
/* Free text (a why or expect line) needs only a few bytes of state: the
 * mask walks it without copying whole states. */
typedef struct {
  uint8_t need, lo, hi, last;
  bool nonempty;
} tsel_ptext;
/* s is in free text: its small state in t. */
bool tsel_pstate_text(const tsel_pstate *s, tsel_ptext *t);
/* One byte of free text other than the newline (which needs the state). */
bool tsel_ptext_step(tsel_ptext *t, unsigned char c);
/* s (in free text) after the n bytes that left it in state t (written to
 * p's text past s, so that s reads as if they had been fed). */
void tsel_pstate_set_text(tsel_prefix *p, tsel_pstate *s, const tsel_ptext *t, const unsigned char *bytes,
                          size_t n);
/* Room in p's text for extra bytes past its state. */
void tsel_prefix_reserve(tsel_prefix *p, size_t extra);
/* Frees the contexts that trial states left behind (none may be in use). */
void tsel_prefix_collect(tsel_prefix *p);

#endif
