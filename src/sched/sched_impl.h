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

#endif
