/* sched_impl.h: what the primitive files share: the schedule's state, the
 * handle table, locating nodes in the kernel, and the registry of
 * instruction kinds.
 *
 * Identity rules every primitive keeps (they are what keep handles valid):
 *  - a block that survives a step stays the same dg_block struct (rewrite it
 *    in place: bindings, regions, body);
 *  - a loop that survives stays the same dg_stmt (FOR) struct; loops that a
 *    step creates are new structs; re-linking (reorder) moves the structs,
 *    never swaps their contents;
 *  - nothing is freed (the arena keeps removed nodes), so a removed node's
 *    address is never reused, and a handle is stale exactly when its node is
 *    no longer reachable from the kernel's body.
 */
#ifndef DRAGON_SCHED_IMPL_H
#define DRAGON_SCHED_IMPL_H

#include "dragon/sched.h"

typedef struct {
  sched_rv_kind kind;
  dg_block *block;  /* SCHED_RV_BLOCK */
  dg_stmt *loop;    /* SCHED_RV_LOOP (NULL with special = root/inline mark) */
  int special;      /* loops from SampleComputeLocation: 0, -1 root, -2 inline */
  int64_t value;    /* SCHED_RV_EXPR */
} sched_rv;

struct sched {
  dg_func *f;
  sched_trace *trace;
  dg_rng rng;
  sched_rv *rvs;
  int n_rvs, cap_rvs;
  char brief[160];
};

/* A path from the kernel body down to a node: stmts[0] is f->body (the root
 * block realize), stmts[n-1] the node; slots[i] is where stmts[i] is stored
 * (so that a primitive can replace it). */
typedef struct {
  dg_stmt *stmts[256];
  dg_stmt **slots[256];
  int n;
} sched_path;

/* Finds a loop (FOR stmt) or a block realize (the BLOCK stmt, given either
 * the stmt or its dg_block). Returns false if not in the kernel. */
bool sched_locate_stmt(const dg_func *f, const dg_stmt *node, sched_path *p);
bool sched_locate_block(const dg_func *f, const dg_block *b, sched_path *p);
/* The block realize stmt of a block (NULL if not in the kernel). */
dg_stmt *sched_block_realize(const dg_func *f, const dg_block *b);
/* The nearest enclosing block of path element i (searching upward). */
dg_block *sched_path_parent_block(const sched_path *p, int i);

/* Handles. New handles are appended; their ids are serial. */
int sched_rv_new_block(sched *s, dg_block *b);
int sched_rv_new_loop(sched *s, dg_stmt *loop);
int sched_rv_new_special_loop(sched *s, int special); /* -1 root, -2 inline */
int sched_rv_new_expr(sched *s, int64_t v);
/* Resolves a value that must be a handle of the kind, live in the kernel;
 * `what` names the operand in errors. */
dg_block *sched_rv_block(sched *s, const sched_val *v, const char *what,
                         dg_status *st);
/* The loop of handle rv where it is a live loop, else NULL (no error). */
dg_stmt *sched_live_loop(sched *s, int rv);
dg_stmt *sched_rv_loop(sched *s, const sched_val *v, const char *what,
                       dg_status *st);
/* An integer operand: a constant or an int handle. */
bool sched_val_int(sched *s, const sched_val *v, const char *what,
                   int64_t *out, dg_status *st);
/* Human name of a handle for messages: "l5 (i_0)", "b3 (Z)". */
const char *sched_rv_label(sched *s, int rv);

/* Fresh names unique in the kernel: base, base_1, base_2 ... */
const char *sched_fresh_var_name(dg_func *f, const char *base);
const char *sched_fresh_buffer_name(dg_func *f, const char *base);
const char *sched_fresh_block_name(dg_func *f, const char *base);

/* Substitutes loop variables (map) in the bindings and predicates of the
 * blocks under `subtree` (not entering them), in IF conditions and stores
 * outside blocks, simplifying what changed under ranges r (loops inside the
 * subtree are pushed as it descends); pred, if not NULL, is conjoined to
 * the predicate of every block reached. In place: blocks keep identity. */
void sched_rewrite_bindings(dg_func *f, dg_stmt *subtree, const dg_subst *map, int n,
                            dg_ranges *r, dg_expr *pred);

/* One call of a primitive. */
typedef struct {
  sched *s;
  const sched_inst *inst; /* inputs in terms of this schedule's handles */
  bool has_decision;      /* in: a decision was given; out: one was taken */
  sched_val decision;     /* in/out */
  bool repair;            /* a given decision that is no longer valid may be
                             repaired (SCHED_REPLAY_REPAIR); else an error */
  int *out;               /* output handles created */
  int n_out, max_out;
} prim_call;

typedef bool (*prim_apply_fn)(prim_call *c, dg_status *st);

/* Adds an output handle to the call. */
void prim_out(prim_call *c, int rv);

/* The apply function of each kind (NULL: not supported by this build). */
extern const prim_apply_fn sched_prim_table[SCHED_INST_COUNT];

/* The primitives, one file per family (prim_*.c). Each checks every
 * precondition before it changes anything, so a failed step leaves the
 * kernel as it was. */
bool prim_get_block(prim_call *c, dg_status *st);
bool prim_get_loops(prim_call *c, dg_status *st);
bool prim_get_child_blocks(prim_call *c, dg_status *st);
bool prim_get_producers(prim_call *c, dg_status *st);
bool prim_get_consumers(prim_call *c, dg_status *st);
bool prim_split(prim_call *c, dg_status *st);
bool prim_fuse(prim_call *c, dg_status *st);
bool prim_reorder(prim_call *c, dg_status *st);
bool prim_add_unit_loop(prim_call *c, dg_status *st);
bool prim_parallel(prim_call *c, dg_status *st);
bool prim_vectorize(prim_call *c, dg_status *st);
bool prim_unroll(prim_call *c, dg_status *st);
bool prim_bind(prim_call *c, dg_status *st);
bool prim_annotate(prim_call *c, dg_status *st);
bool prim_unannotate(prim_call *c, dg_status *st);
bool prim_sample_perfect_tile(prim_call *c, dg_status *st);
bool prim_sample_categorical(prim_call *c, dg_status *st);
bool prim_enter_postproc(prim_call *c, dg_status *st);
bool prim_cache_read(prim_call *c, dg_status *st);
bool prim_cache_write(prim_call *c, dg_status *st);
bool prim_reindex(prim_call *c, dg_status *st);
bool prim_set_scope(prim_call *c, dg_status *st);
bool prim_storage_align(prim_call *c, dg_status *st);
bool prim_compute_at(prim_call *c, dg_status *st);
bool prim_reverse_compute_at(prim_call *c, dg_status *st);
bool prim_sample_compute_location(prim_call *c, dg_status *st);
bool prim_compute_inline(prim_call *c, dg_status *st);
bool prim_reverse_compute_inline(prim_call *c, dg_status *st);
bool prim_decompose_reduction(prim_call *c, dg_status *st);
bool prim_rfactor(prim_call *c, dg_status *st);
bool prim_blockize(prim_call *c, dg_status *st);
bool prim_tensorize(prim_call *c, dg_status *st);
/* ComputeInline (reverse: ReverseComputeInline) of a live block, for
 * ComputeAt's inline mark and SampleComputeLocation (prim_inline.c);
 * check_only answers whether it is legal and changes nothing. */
bool sched_inline_block(sched *s, dg_block *b, bool reverse, bool check_only, dg_status *st);

/* What the data-movement primitives share (prim_cache.c). */
/* A storage scope operand (a string naming a dg_scope). */
bool sched_scope_arg(const sched_val *v, dg_scope *out, dg_status *st);
/* The buffer of block b's read (or write) region number `index`; the
 * index is checked against the block's regions. */
dg_buffer *sched_access_buffer(sched *s, const dg_block *b, const sched_val *index,
                               bool is_write, int *index_out, dg_status *st);
/* "<base>_<scope>" with the scope's dots as underscores (not made unique). */
const char *sched_scoped_name(dg_func *f, const char *base, dg_scope scope);
/* Inserts stage at position pos of the statement in *slot: into it if it is
 * a SEQ (pos in [0, n]), else pos 0 (before) or 1 (after) in a new SEQ. */
void sched_stmt_insert(dg_func *f, dg_stmt **slot, int pos, dg_stmt *stage);
/* Redirecting accesses of buffer `from` to `to`: every index (and region
 * minimum) shifted down by offset[d] (when offset is set), or replaced by
 * fixed[d] (when fixed is set: regions become those points). */
typedef struct {
  dg_func *f;
  const dg_buffer *from;
  dg_buffer *to;
  dg_expr *const *offset;
  dg_expr *const *fixed;
} sched_access_map;
typedef enum {
  SCHED_ACCESS_SKIP,    /* leave the block and everything under it */
  SCHED_ACCESS_PASS,    /* leave the block's own accesses, visit its sub-blocks */
  SCHED_ACCESS_REWRITE, /* rewrite its regions, loads and stores */
} sched_access_mode;
/* Decides for each block met; in_rewrite: the enclosing block is rewritten. */
typedef sched_access_mode (*sched_access_pick)(const dg_block *b, bool in_rewrite, void *ctx);
/* Copy-on-write rewriting of loads in e (unchanged trees are returned). */
dg_expr *sched_access_expr(const sched_access_map *m, dg_expr *e);
/* Rewrites the regions of `from` in the array *rs (n entries; a new array). */
void sched_access_regions(const sched_access_map *m, dg_region **rs, int n);
/* Walks *slot: loads and stores outside blocks are rewritten when `on`;
 * each block met is handled as pick says (pick NULL: as `on` says). Loops,
 * SEQs and blocks keep their identity; changed stores are new nodes. */
void sched_access_stmt(const sched_access_map *m, dg_stmt **slot, bool on,
                       sched_access_pick pick, void *ctx);

#endif
