/* wmma.c: tensorized blocks lowered for the tensor cores (TVM's lowering of
 * blocks tensorized with the WMMA intrinsics, InferFragment, and
 * MetaSchedule's warp_execution rule).
 *
 * A block annotated tensor_intrin = I (checked again with intrin_bind: a
 * later schedule step may have broken the match) becomes one LW_WMMA
 * statement: the intrinsic, its operands (buffer and the tile's first
 * element, in terms of loop and thread variables) and, as its body, the
 * block's own scalar statement converted as any block is. The body is the
 * operation's meaning: the passes see through it (compaction sizes the
 * buffers from its accesses, barrier insertion sees what it reads and
 * writes) and the C target runs it, once per warp, to emulate the warp's
 * fragment operation. The CUDA target prints the nvcuda::wmma call instead.
 *
 * Warp execution. A tile is computed by the 32 lanes of a warp together,
 * so a tensorized block must not sit under a threadIdx.x loop; warps are
 * threadIdx.y/z (MetaSchedule's tensor-core sketch binds threadIdx.y and
 * leaves threadIdx.x implicit). In a launch with tensorized blocks
 * threadIdx.x is either bound with extent 32 (the lanes: cooperative fetch
 * binds it so) or bound nowhere; then the launch gets 32 lanes here and
 * every other statement, written for one thread per warp, runs on lane 0.
 *
 * Fragments (scopes wmma.matrix_a, wmma.matrix_b, wmma.accumulator) are
 * kept in the kernel's `local` list: compaction shrinks them per warp as it
 * shrinks local buffers per thread. The last pass checks that each is a
 * whole number of 16x16 tiles, gives every fragment operand its index in
 * the warp's fragment array (tile row * tiles per row + tile column, over
 * any leading dimensions), checks that a matrix_b fragment is loaded in the
 * layout its mma reads (col-major for the _trans mma, row-major otherwise;
 * matrix_a always row-major) and that memory operands are 32-byte aligned
 * tiles with a row stride that is a multiple of 16 bytes, as
 * load_matrix_sync and store_matrix_sync require.
 *
 * It does not lower fragments touched by anything but tensor intrinsics,
 * partial tiles (a predicate on the block), or the m16n8k8 MMA intrinsics
 * (not registered); each is rejected with the reason.
 */
#include <inttypes.h>
#include <string.h>

#include "lower/lower_impl.h"

#define WARP 32
#define TILE 16

bool lower_scope_is_fragment(dg_scope s) {
  return s == DG_SCOPE_WMMA_A || s == DG_SCOPE_WMMA_B || s == DG_SCOPE_WMMA_ACC;
}

static bool wfail(lw_conv *c, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static bool wfail(lw_conv *c, const char *fmt, ...) {
  if (c->failed) return false;
  c->failed = true;
  va_list ap;
  va_start(ap, fmt);
  dg_vfail(c->st, DG_ERR_INVALID, fmt, ap);
  va_end(ap);
  if (c->block) dg_status_prefix(c->st, "lower: kernel %s: block %s", c->k->name, c->block->name);
  else dg_status_prefix(c->st, "lower: kernel %s", c->k->name);
  return false;
}

/* ---- conversion -------------------------------------------------------------- */

static const dg_buffer *expr_fragment(const dg_expr *e) {
  if (!e) return NULL;
  if (e->kind == DG_EXPR_LOAD && lower_scope_is_fragment(e->buf->scope)) return e->buf;
  if (e->kind == DG_EXPR_LOAD || e->kind == DG_EXPR_CALL) {
    for (int i = 0; i < e->nargs; i++) {
      const dg_buffer *b = expr_fragment(e->args[i]);
      if (b) return b;
    }
    return NULL;
  }
  const dg_buffer *b = expr_fragment(e->a);
  if (!b) b = expr_fragment(e->b);
  if (!b) b = expr_fragment(e->c);
  return b;
}

bool lower_wmma_check_store(lw_conv *c, const dg_stmt *s) {
  const dg_buffer *b = lower_scope_is_fragment(s->buf->scope) ? s->buf : expr_fragment(s->value);
  for (int i = 0; !b && i < s->nidx; i++) b = expr_fragment(s->idx[i]);
  if (!b) return true;
  return wfail(c, "it accesses %s (scope %s) element by element; a fragment is reachable only "
                  "through tensor intrinsics (tensorize the block)",
               b->name, dg_scope_name(b->scope));
}

lw_stmt *lower_wmma_block(lw_conv *c, const dg_stmt *s) {
  dg_block *b = s->block;
  dg_func *f = c->p->f;
  lw_kernel *k = c->k;
  const dg_block *outer = c->block;
  int map0 = c->n_map;
  lw_stmt *out = NULL;
  c->block = b;
  const dg_ann *a = ir_anns_get(&b->anns, "tensor_intrin");
  const dg_intrin *in = a && a->kind == DG_ANN_STR ? intrin_find(a->s) : NULL;
  intrin_binding bd;
  char why[400];
  if (!in) {
    if (a && a->kind == DG_ANN_STR) wfail(c, "unknown tensor intrinsic '%s'", a->s);
    else wfail(c, "its annotation tensor_intrin is not an intrinsic's name");
    goto done;
  }
  if (!intrin_bind(in, f, b, &bd, why, sizeof why)) {
    wfail(c, "it is tagged tensor_intrin = \"%s\" but no longer matches it: %s", in->name, why);
    goto done;
  }
  for (int i = 0; i < bd.n; i++)
    for (int j = 0; j < c->p->n_params; j++)
      if (bd.ops[i].buf == c->p->params[j] && lower_scope_is_fragment(bd.ops[i].buf->scope)) {
        wfail(c, "fragment %s is a kernel parameter, but fragments live in the registers of a "
                 "warp (cache the operand into one with CacheRead or CacheWrite)",
              bd.ops[i].buf->name);
        goto done;
      }
  if (c->tags_in_scope & (1u << DG_TAG_THREAD_X)) {
    wfail(c, "it is under a loop bound to threadIdx.x, but the 32 lanes of a warp compute "
             "its tile together (warp execution): bind warps to threadIdx.y or threadIdx.z "
             "and leave threadIdx.x to the lanes");
    goto done;
  }
  if (k->tag_var[DG_TAG_THREAD_X] && k->block[0] != WARP) {
    wfail(c, "threadIdx.x has extent %" PRId64 " in this launch, but a tensorized block runs "
             "on whole warps: threadIdx.x must be %d (the lanes of a warp) or unbound",
          k->block[0], WARP);
    goto done;
  }
  if (b->n_allocs) {
    wfail(c, "it allocates buffer %s; a tensorized block cannot allocate", b->allocs[0]->name);
    goto done;
  }
  /* the iteration variables, then the operands' origins and the body */
  dg_expr **bind = DG_ANEWN(f->arena, dg_expr *, b->n_iters > 0 ? b->n_iters : 1);
  for (int i = 0; i < b->n_iters; i++) bind[i] = lower_conv_expr(c, b->iters[i].binding);
  if (c->n_map + b->n_iters > (int)DG_ARRAY_LEN(c->map)) {
    wfail(c, "too many nested loops and iteration variables (limit %d)", (int)DG_ARRAY_LEN(c->map));
    goto done;
  }
  for (int i = 0; i < b->n_iters; i++) c->map[c->n_map++] = (dg_subst){b->iters[i].var, bind[i]};
  if (b->predicate) {
    dg_expr *p = lower_conv_expr(c, b->predicate);
    int64_t v;
    if (!(ir_is_const_int(p, &v) && v)) {
      dg_str t;
      dg_str_init(&t);
      ir_print_expr(&t, b->predicate);
      wfail(c, "its predicate %s cuts the tile, but tensor cores compute whole tiles (split the "
               "loops by the tile so that no predicate is needed)", t.s);
      dg_str_free(&t);
      goto done;
    }
  }
  c->in_tensorized++;
  lw_stmt *body = lower_conv_stmt(c, b->body);
  c->in_tensorized--;
  if (c->failed) goto done;
  out = lw_wmma(f, in, b->name, body);
  out->wmma_n = bd.n;
  for (int i = 0; i < bd.n; i++) {
    dg_buffer *buf = bd.ops[i].buf;
    out->wmma_buf[i] = buf;
    out->wmma_origin[i] = DG_ANEWN(f->arena, dg_expr *, buf->ndim);
    for (int d = 0; d < buf->ndim; d++)
      out->wmma_origin[i][d] = lower_conv_expr(c, bd.ops[i].origin[d]);
  }
done:
  c->n_map = map0;
  c->block = outer;
  return c->failed ? NULL : out;
}

/* ---- warp lanes -------------------------------------------------------------- */

static bool has_kind(const lw_stmt *s, lw_stmt_kind kind) {
  if (!s) return false;
  if (s->kind == kind) return true;
  switch (s->kind) {
    case LW_SEQ:
      for (int i = 0; i < s->n; i++)
        if (has_kind(s->stmts[i], kind)) return true;
      return false;
    case LW_FOR: return has_kind(s->body, kind);
    case LW_IF: return has_kind(s->then_s, kind) || has_kind(s->else_s, kind);
    default: return false;
  }
}

/* Every statement outside the tensorized ones on lane 0 only. */
static lw_stmt *lane0(dg_func *f, const lw_stmt *s, dg_var *tx) {
  if (!s) return NULL;
  if (!has_kind(s, LW_WMMA)) {
    if (!has_kind(s, LW_STORE)) return (lw_stmt *)s;
    dg_expr *cond = ir_bin(f, DG_EXPR_EQ, ir_var(f, tx), ir_int(f, 0));
    return lw_if(f, cond, (lw_stmt *)s, NULL);
  }
  lw_stmt *c = lw_copy(f, s);
  switch (s->kind) {
    case LW_SEQ:
      c->stmts = DG_ANEWN(f->arena, lw_stmt *, s->n > 0 ? s->n : 1);
      for (int i = 0; i < s->n; i++) c->stmts[i] = lane0(f, s->stmts[i], tx);
      return c;
    case LW_FOR: c->body = lane0(f, s->body, tx); return c;
    case LW_IF:
      c->then_s = lane0(f, s->then_s, tx);
      c->else_s = lane0(f, s->else_s, tx);
      return c;
    default: return c;
  }
}

bool lower_wmma_lanes(lw_program *p, lw_kernel *k, dg_status *st) {
  if (k->tag_var[DG_TAG_THREAD_X] || !has_kind(k->body, LW_WMMA)) return true;
  if (has_kind(k->body, LW_ALLREDUCE))
    return dg_fail(st, DG_ERR_INVALID,
                   "lower: kernel %s: a cross-thread reduction beside tensorized blocks needs "
                   "threadIdx.x bound to the %d lanes of a warp",
                   k->name, WARP);
  k->tag_var[DG_TAG_THREAD_X] = ir_var_new(p->f, dg_thread_tag_name(DG_TAG_THREAD_X), DG_I32);
  k->block[0] = WARP;
  k->implicit_lanes = true;
  k->body = lane0(p->f, k->body, k->tag_var[DG_TAG_THREAD_X]);
  return true;
}

/* ---- fragments: indices, layouts, alignment ----------------------------------- */

typedef struct {
  lw_program *p;
  lw_kernel *k;
  dg_status *st;
  dg_ranges r;
  /* the layout each matrix_a/b fragment is loaded in */
  const dg_buffer *frag[64];
  bool trans[64];
  const char *by[64]; /* the block of its first load */
  int n_frag;
  bool failed;
  /* Scratch for the proofs and simplifications: what they build is garbage
   * once its statement is done, so it goes to an arena dropped when full,
   * not to the program's (a long unrolled body would pile it up there). */
  dg_func scratch;
  bool check_only; /* fragment indices are not kept */
} fin;

enum { SCRATCH_BYTES = 32 << 10 }; /* renewed past this: about one chunk, kept warm */

/* Before the work of one statement: what the scratch holds is no longer
 * used, so a full one is dropped. */
static void scratch_begin(fin *x) {
  if (x->scratch.arena && dg_arena_bytes(x->scratch.arena) > SCRATCH_BYTES) {
    dg_arena_free(x->scratch.arena);
    x->scratch.arena = NULL;
  }
  if (!x->scratch.arena) x->scratch.arena = dg_arena_new();
}

static void fin_free(fin *x) {
  dg_arena_free(x->scratch.arena);
  free(x);
}

/* e with every node copied into f (variables and buffers shared). */
static dg_expr *expr_deep_copy(dg_func *f, const dg_expr *e) {
  if (!e) return NULL;
  dg_expr *c = ir_expr_copy(f, e);
  c->a = expr_deep_copy(f, e->a);
  c->b = expr_deep_copy(f, e->b);
  c->c = expr_deep_copy(f, e->c);
  if (e->args) {
    c->args = DG_ANEWN(f->arena, dg_expr *, e->nargs > 0 ? e->nargs : 1);
    for (int i = 0; i < e->nargs; i++) c->args[i] = expr_deep_copy(f, e->args[i]);
  }
  return c;
}

static bool ffail(fin *x, const char *block, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static bool ffail(fin *x, const char *block, const char *fmt, ...) {
  if (x->failed) return false;
  x->failed = true;
  va_list ap;
  va_start(ap, fmt);
  dg_vfail(x->st, DG_ERR_INVALID, fmt, ap);
  va_end(ap);
  if (block) dg_status_prefix(x->st, "lower: kernel %s: block %s", x->k->name, block);
  else dg_status_prefix(x->st, "lower: kernel %s", x->k->name);
  return false;
}

static int frag_slot(fin *x, const dg_buffer *b) {
  for (int i = 0; i < x->n_frag; i++)
    if (x->frag[i] == b) return i;
  return -1;
}

static void collect_layout(fin *x, const lw_stmt *s);

static void collect_layouts(fin *x, const lw_stmt *s) {
  if (!s || x->failed) return;
  switch (s->kind) {
    case LW_SEQ:
      for (int i = 0; i < s->n; i++) collect_layouts(x, s->stmts[i]);
      return;
    case LW_FOR: collect_layouts(x, s->body); return;
    case LW_IF:
      collect_layouts(x, s->then_s);
      collect_layouts(x, s->else_s);
      return;
    case LW_WMMA: collect_layout(x, s); return;
    default: return;
  }
}

/* A tensorized load's fragment layout, checked against the first one. */
static void collect_layout(fin *x, const lw_stmt *s) {
  dg_intrin_kind kind = s->intrin->kind;
  if (kind != DG_INTRIN_LOAD_A && kind != DG_INTRIN_LOAD_B) return;
  const dg_buffer *d = s->wmma_buf[1];
  int i = frag_slot(x, d);
  if (i < 0) {
    if (x->n_frag == (int)DG_ARRAY_LEN(x->frag)) {
      ffail(x, s->wmma_block, "more than %d fragment arrays", (int)DG_ARRAY_LEN(x->frag));
      return;
    }
    i = x->n_frag++;
    x->frag[i] = d;
    x->trans[i] = s->intrin->trans;
    x->by[i] = s->wmma_block;
  } else if (x->trans[i] != s->intrin->trans) {
    ffail(x, s->wmma_block,
          "it loads fragment %s %s, but block %s loads it %s; one fragment has one layout",
          d->name, s->intrin->layout, x->by[i], x->trans[i] ? "col_major" : "row_major");
  }
}

static void print_origin(dg_str *o, const lw_stmt *s, int i) {
  dg_str_putc(o, '[');
  for (int d = 0; d < s->wmma_buf[i]->ndim; d++) {
    if (d) dg_str_puts(o, ", ");
    ir_print_expr(o, s->wmma_origin[i][d]);
  }
  dg_str_putc(o, ']');
}

static bool provably_multiple(fin *x, dg_expr *e, int64_t m) {
  dg_func *f = &x->scratch;
  dg_expr *mod = ir_bin(f, DG_EXPR_FLOORMOD, e, ir_int_t(f, m, e->dtype));
  return ir_prove(f, ir_bin(f, DG_EXPR_EQ, mod, ir_int_t(f, 0, e->dtype)), &x->r);
}

/* The index of operand i's 16x16 tile in its fragment array. */
static dg_expr *fragment_index(fin *x, const lw_stmt *s, int i) {
  dg_func *f = &x->scratch;
  const dg_buffer *b = s->wmma_buf[i];
  dg_expr *const *o = s->wmma_origin[i];
  int nd = b->ndim;
  for (int d = nd - 2; d < nd; d++)
    if (!provably_multiple(x, o[d], TILE)) {
      dg_str t;
      dg_str_init(&t);
      print_origin(&t, s, i);
      ffail(x, s->wmma_block, "its tile of fragment %s starts at %s, not on a %dx%d tile of the "
                              "fragment array",
            b->name, t.s, TILE, TILE);
      dg_str_free(&t);
      return NULL;
    }
  if (x->check_only) return o[0]; /* proved to be a tile; the index is not wanted */
  dg_expr *idx = NULL;
  for (int d = 0; d < nd; d++) {
    dg_expr *v = d >= nd - 2 ? ir_bin(f, DG_EXPR_FLOORDIV, o[d], ir_int_t(f, TILE, o[d]->dtype))
                             : o[d];
    int64_t ext = d >= nd - 2 ? b->shape[d] / TILE : b->shape[d];
    idx = idx ? ir_add(f, ir_mul(f, idx, ir_int_t(f, ext, idx->dtype)), v) : v;
  }
  dg_expr *r = ir_simplify(f, idx, &x->r);
  return x->check_only ? r : expr_deep_copy(x->p->f, r);
}

/* A memory operand of load_matrix_sync / store_matrix_sync. */
static bool check_memory(fin *x, const lw_stmt *s, int i) {
  dg_func *f = &x->scratch;
  const dg_buffer *b = s->wmma_buf[i];
  int64_t bytes = dg_dtype_bytes(b->dtype);
  int64_t ldm = b->shape[b->ndim - 1];
  if (ldm * bytes % 16 != 0)
    return ffail(x, s->wmma_block,
                 "the rows of %s are %" PRId64 " elements (%" PRId64 " bytes) apart; "
                 "load_matrix_sync and store_matrix_sync need a multiple of 16 bytes",
                 b->name, ldm, ldm * bytes);
  dg_expr *flat = lw_flat_index(f, b, s->wmma_origin[i], b->ndim);
  if (!provably_multiple(x, flat, 32 / bytes)) {
    dg_str t;
    dg_str_init(&t);
    print_origin(&t, s, i);
    ffail(x, s->wmma_block, "its tile of %s at %s is not 32-byte aligned, as tensor-core loads "
                            "and stores need",
          b->name, t.s);
    dg_str_free(&t);
    return false;
  }
  return true;
}

static bool loaded_as(fin *x, const lw_stmt *s, int i, bool want_trans) {
  const dg_buffer *b = s->wmma_buf[i];
  int slot = frag_slot(x, b);
  if (slot < 0)
    return ffail(x, s->wmma_block, "it reads fragment %s, which no tensorized load writes",
                 b->name);
  if (x->trans[slot] != want_trans)
    return ffail(x, s->wmma_block,
                 "%s reads fragment %s %s, but block %s loads it %s (a matrix_a fragment is "
                 "row-major; matrix_b is col-major exactly for the _trans mma)",
                 s->intrin->name, b->name, want_trans ? "col-major" : "row-major", x->by[slot],
                 x->trans[slot] ? "col-major" : "row-major");
  return true;
}

static lw_stmt *finish(fin *x, const lw_stmt *s, bool under_lane_cond) {
  if (!s || x->failed) return (lw_stmt *)s;
  dg_func *f = x->p->f;
  lw_stmt *c;
  switch (s->kind) {
    case LW_SEQ: {
      /* unchanged subtrees are shared, not copied */
      lw_stmt **xs = NULL;
      for (int i = 0; i < s->n; i++) {
        lw_stmt *y = finish(x, s->stmts[i], under_lane_cond);
        if (y != s->stmts[i] && !xs) {
          xs = DG_ANEWN(f->arena, lw_stmt *, s->n);
          memcpy(xs, s->stmts, sizeof(*xs) * (size_t)i);
        }
        if (xs) xs[i] = y;
      }
      if (!xs) return (lw_stmt *)s;
      c = lw_copy(f, s);
      c->stmts = xs;
      return c;
    }
    case LW_FOR: {
      if (x->r.n >= (int)DG_ARRAY_LEN(x->r.var)) {
        ffail(x, NULL, "loop nest too deep (more than %d loops)", (int)DG_ARRAY_LEN(x->r.var));
        return (lw_stmt *)s;
      }
      ir_ranges_push(&x->r, s->var, 0, s->extent - 1);
      lw_stmt *body = finish(x, s->body, under_lane_cond);
      ir_ranges_pop(&x->r, 1);
      if (body == s->body) return (lw_stmt *)s;
      c = lw_copy(f, s);
      c->body = body;
      return c;
    }
    case LW_IF: {
      bool lane = under_lane_cond || ir_expr_uses_var(s->cond, x->k->tag_var[DG_TAG_THREAD_X]);
      lw_stmt *then_s = finish(x, s->then_s, lane);
      lw_stmt *else_s = finish(x, s->else_s, lane);
      if (then_s == s->then_s && else_s == s->else_s) return (lw_stmt *)s;
      c = lw_copy(f, s);
      c->then_s = then_s;
      c->else_s = else_s;
      return c;
    }
    case LW_WMMA: {
      if (under_lane_cond) {
        ffail(x, s->wmma_block, "it runs under a condition on threadIdx.x, but all 32 lanes of "
                                "a warp must take part in a tensor-core operation");
        return (lw_stmt *)s;
      }
      c = lw_copy(f, s);
      scratch_begin(x);
      for (int i = 0; i < s->wmma_n && !x->failed; i++) {
        if (lower_scope_is_fragment(s->wmma_buf[i]->scope)) c->wmma_frag[i] = fragment_index(x, s, i);
        else check_memory(x, s, i);
      }
      if (!x->failed && s->intrin->kind == DG_INTRIN_MMA)
        if (loaded_as(x, s, 0, false)) loaded_as(x, s, 1, s->intrin->trans);
      return c;
    }
    default: return (lw_stmt *)s;
  }
}

/* The start of finalize: fragment shapes and the ranges of the tags. */
static fin *fin_new(lw_program *p, lw_kernel *k, dg_status *st) {
  fin *x = dg_calloc(1, sizeof(*x));
  x->p = p;
  x->k = k;
  x->st = st;
  for (int i = 0; i < k->n_local && !x->failed; i++) {
    const dg_buffer *b = k->local[i];
    if (!lower_scope_is_fragment(b->scope)) continue;
    int nd = b->ndim;
    if (nd < 2 || b->shape[nd - 2] % TILE || b->shape[nd - 1] % TILE)
      ffail(x, NULL, "fragment %s is %" PRId64 " x %" PRId64 " per warp after compaction; "
                     "fragments hold whole %dx%d tiles",
            b->name, nd >= 2 ? b->shape[nd - 2] : 1, b->shape[nd - 1], TILE, TILE);
  }
  for (int t = 0; t < DG_TAG_COUNT; t++) {
    dg_var *tv = k->tag_var[t];
    if (!tv) continue;
    int d = t == DG_TAG_BLOCK_X || t == DG_TAG_THREAD_X ? 0
            : t == DG_TAG_BLOCK_Y || t == DG_TAG_THREAD_Y ? 1 : 2;
    ir_ranges_push(&x->r, tv, 0, (dg_thread_tag_is_block((dg_thread_tag)t) ? k->grid : k->block)[d] - 1);
  }
  return x;
}

bool lower_wmma_finalize(lw_program *p, lw_kernel *k, dg_status *st) {
  if (!has_kind(k->body, LW_WMMA)) return true;
  fin *x = fin_new(p, k, st);
  collect_layouts(x, k->body);
  lw_stmt *body = finish(x, k->body, false);
  bool ok = !x->failed;
  if (ok) k->body = body;
  fin_free(x);
  return ok;
}

/* ---- the same verdict on the rolled body ------------------------------------------
 *
 * Finalize only reads the tensorized statements, the conditions above them
 * and the loops that stay loops; barriers do not matter to it. So its
 * verdict on the unrolled body can be had by walking the rolled one: each
 * loop lower_unroll replaces by copies is walked once per value with its
 * variable substituted (innermost first, simplified where it changed, as
 * lw_subst does), and only the expressions finalize reads are built, in a
 * scratch arena dropped after each statement. */

typedef struct {
  fin *x;
  dg_subst map[64]; /* the copied loops in scope: var -> its value, outer first */
  dg_expr value[64];
  int n_map;
  bool too_deep; /* more copied loops than map holds: no verdict */
} vwalk;

static dg_expr *unrolled_expr(vwalk *w, dg_expr *e) {
  for (int j = w->n_map; j-- > 0;) e = lw_subst_expr(&w->x->scratch, e, &w->map[j], 1);
  return e;
}

static lw_unroll_state seq_part(const lw_unroll_state *us) {
  lw_unroll_state c = *us;
  c.step_count = c.unroll_depth = c.normal_depth = 0;
  return c;
}

static lw_unroll_state else_part(const lw_stmt *s, const lw_unroll_state *us) {
  lw_unroll_state c = *us;
  lower_unroll_skip(s->then_s, &c);
  return c;
}

/* has_kind(unrolled s, LW_WMMA) */
static bool vhas_wmma(const lw_stmt *s, const lw_unroll_state *us) {
  if (!s) return false;
  switch (s->kind) {
    case LW_WMMA: return true;
    case LW_SEQ:
      for (int i = 0; i < s->n; i++) {
        lw_unroll_state c = seq_part(us);
        if (vhas_wmma(s->stmts[i], &c)) return true;
      }
      return false;
    case LW_FOR: {
      lw_unroll_state be;
      if (lower_unroll_loop(s, us, &be) == LW_UNROLL_COPIES && s->extent <= 0) return false;
      return vhas_wmma(s->body, &be);
    }
    case LW_IF: {
      if (vhas_wmma(s->then_s, us)) return true;
      lw_unroll_state c = else_part(s, us);
      return vhas_wmma(s->else_s, &c);
    }
    default: return false;
  }
}

/* collect_layouts(unrolled s) */
static void vcollect(vwalk *w, const lw_stmt *s, const lw_unroll_state *us) {
  fin *x = w->x;
  if (!s || x->failed) return;
  switch (s->kind) {
    case LW_SEQ:
      for (int i = 0; i < s->n; i++) {
        lw_unroll_state c = seq_part(us);
        vcollect(w, s->stmts[i], &c);
      }
      return;
    case LW_FOR: {
      lw_unroll_state be;
      int64_t times = lower_unroll_loop(s, us, &be) == LW_UNROLL_COPIES ? s->extent : 1;
      for (int64_t i = 0; i < times; i++) vcollect(w, s->body, &be);
      return;
    }
    case LW_IF: {
      vcollect(w, s->then_s, us);
      lw_unroll_state c = else_part(s, us);
      vcollect(w, s->else_s, &c);
      return;
    }
    case LW_WMMA: collect_layout(x, s); return;
    default: return;
  }
}

/* finish(unrolled s), checks only */
static void vfinish(vwalk *w, const lw_stmt *s, bool under_lane_cond, const lw_unroll_state *us) {
  fin *x = w->x;
  if (!s || x->failed || w->too_deep) return;
  switch (s->kind) {
    case LW_SEQ:
      for (int i = 0; i < s->n; i++) {
        lw_unroll_state c = seq_part(us);
        vfinish(w, s->stmts[i], under_lane_cond, &c);
      }
      return;
    case LW_FOR: {
      lw_unroll_state be;
      if (lower_unroll_loop(s, us, &be) == LW_UNROLL_COPIES) {
        if (w->n_map == (int)DG_ARRAY_LEN(w->map)) {
          w->too_deep = true;
          return;
        }
        int j = w->n_map++;
        w->value[j] = (dg_expr){.kind = DG_EXPR_INT, .dtype = s->var->dtype};
        w->map[j] = (dg_subst){s->var, &w->value[j]};
        for (int64_t i = 0; i < s->extent && !x->failed && !w->too_deep; i++) {
          w->value[j].ival = i;
          vfinish(w, s->body, under_lane_cond, &be);
        }
        w->n_map--;
        return;
      }
      if (x->r.n >= (int)DG_ARRAY_LEN(x->r.var)) {
        ffail(x, NULL, "loop nest too deep (more than %d loops)", (int)DG_ARRAY_LEN(x->r.var));
        return;
      }
      ir_ranges_push(&x->r, s->var, 0, s->extent - 1);
      vfinish(w, s->body, under_lane_cond, &be);
      ir_ranges_pop(&x->r, 1);
      return;
    }
    case LW_IF: {
      scratch_begin(x);
      bool lane = under_lane_cond ||
                  ir_expr_uses_var(unrolled_expr(w, s->cond), x->k->tag_var[DG_TAG_THREAD_X]);
      vfinish(w, s->then_s, lane, us);
      lw_unroll_state c = else_part(s, us);
      vfinish(w, s->else_s, lane, &c);
      return;
    }
    case LW_WMMA: {
      if (under_lane_cond) {
        ffail(x, s->wmma_block, "it runs under a condition on threadIdx.x, but all 32 lanes of "
                                "a warp must take part in a tensor-core operation");
        return;
      }
      scratch_begin(x);
      lw_stmt c = *s; /* the copy's operands */
      for (int i = 0; i < s->wmma_n; i++) {
        int nd = s->wmma_buf[i]->ndim;
        c.wmma_origin[i] = DG_ANEWN(x->scratch.arena, dg_expr *, nd > 0 ? nd : 1);
        for (int d = 0; d < nd; d++) c.wmma_origin[i][d] = unrolled_expr(w, s->wmma_origin[i][d]);
      }
      for (int i = 0; i < s->wmma_n && !x->failed; i++) {
        if (lower_scope_is_fragment(s->wmma_buf[i]->scope)) fragment_index(x, &c, i);
        else check_memory(x, &c, i);
      }
      if (!x->failed && s->intrin->kind == DG_INTRIN_MMA)
        if (loaded_as(x, s, 0, false)) loaded_as(x, s, 1, s->intrin->trans);
      return;
    }
    default: return;
  }
}

int lower_wmma_check_unrolled(lw_program *p, lw_kernel *k, dg_status *st) {
  lw_unroll_state us;
  lower_unroll_begin(&us);
  if (!vhas_wmma(k->body, &us)) return 1;
  fin *x = fin_new(p, k, st);
  x->check_only = true;
  vwalk *w = dg_calloc(1, sizeof(*w));
  w->x = x;
  vcollect(w, k->body, &us);
  vfinish(w, k->body, false, &us);
  int r = w->too_deep ? -1 : x->failed ? 0 : 1;
  if (r < 0) dg_status_ok(st);
  free(w);
  fin_free(x);
  return r;
}
