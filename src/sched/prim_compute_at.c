/* prim_compute_at.c: ComputeAt, ReverseComputeAt and SampleComputeLocation
 * (TVM's compute_at.cc, sampling.cc and analysis.cc CollectComputeLocation).
 *
 * ComputeAt moves a producer block under a loop of its consumers and
 * regenerates the producer's loops so that, per iteration of that loop, it
 * computes exactly the part of its output the consumers under the loop read:
 * their read regions relaxed over the loops inside the target loop (and,
 * for shared memory, over the thread loops above it) give a required
 * region; matching it against the producer's own write region, dimension by
 * dimension, gives each iteration variable a range; a range that may leave
 * the variable's domain or the buffer's shape becomes a block predicate.
 * New loops are named ax0, ax1, ... (made unique) and are serial. The block
 * goes before the first consumer (index -1), after the last producer (-2),
 * or at a given statement index between the two. ReverseComputeAt is the
 * mirror: a consumer moved under a loop of its producers, its loops covering
 * what the producers under the loop write.
 *
 * The loop handles SampleComputeLocation makes for "root" (-1) and "inline"
 * (-2) are understood: ComputeAt at root does nothing, at inline it inlines.
 * A recorded location must be one of the legal ones; only a repairing
 * replay (SCHED_REPLAY_REPAIR) moves a stale one to the nearest earlier
 * legal location, as TVM does.
 *
 * Assumes dimension-wise index patterns (v, v + c, v * c, v // c, v % c of
 * one iteration variable v) in the moved block's regions, as TVM's
 * dimension-wise solver does; other patterns are rejected, never guessed.
 * Loops have constant extents here: a symbolic extent is replaced by its
 * constant upper bound and a predicate. TVM's stage-pipeline property of the
 * scope (every consumer region covered by its producers) is not checked:
 * dependences come from the blocks' declared regions.
 */
#include <string.h>

#include "sched/region.h"

/* A symbolic closed interval; lo == NULL is the empty set ("nothing"). */
typedef struct {
  dg_expr *lo, *hi;
} ivl;

typedef struct {
  ivl dom, bound;
} var_dom;

typedef struct {
  /* inputs */
  sched *s;
  dg_func *f;
  dg_block *block;
  dg_stmt *loop;
  bool compute_at; /* false: reverse */
  bool preserve_unit_loops;
  int64_t index;
  /* the plan */
  sched_path bp, lp;
  dg_block *scope;
  dg_ranges known; /* loops at and above the target loop */
  sched_removal removal;
  int insert_at;
  var_dom doms[64];
  dg_expr *mins[64], *extents[64];
  int64_t const_ext[64];
  bool pred_ext[64]; /* the extent is an upper bound: predicate the real one */
} at_ctx;

static const char *what(const at_ctx *c) {
  return c->compute_at ? "consumer" : "producer";
}

/* ---- symbolic intervals ---------------------------------------------------------- */

static dg_expr *simp(at_ctx *c, dg_expr *e) { return ir_simplify(c->f, e, &c->known); }

static bool prove_eq(at_ctx *c, dg_expr *a, dg_expr *b) {
  int64_t v;
  return ir_is_const_int(simp(c, ir_sub(c->f, a, b)), &v) && v == 0;
}

static ivl ivl_union(at_ctx *c, ivl a, ivl b) {
  if (!a.lo) return b;
  if (!b.lo) return a;
  return (ivl){simp(c, ir_bin(c->f, DG_EXPR_MIN, a.lo, b.lo)),
               simp(c, ir_bin(c->f, DG_EXPR_MAX, a.hi, b.hi))};
}

static ivl ivl_intersect(at_ctx *c, ivl a, ivl b) {
  return (ivl){simp(c, ir_bin(c->f, DG_EXPR_MAX, a.lo, b.lo)),
               simp(c, ir_bin(c->f, DG_EXPR_MIN, a.hi, b.hi))};
}

static dg_expr *cint(at_ctx *c, int64_t v, const dg_expr *like) {
  return ir_int_t(c->f, v, like->dtype);
}

/* ---- solving an iteration variable's range from one dimension ------------------------ */

typedef enum { SOLVE_FAIL, SOLVE_SKIP, SOLVE_VAR } solve_result;

/* TVM's SolveBlockVarDomain: provided [plo, phi] is one dimension of what one
 * instance of the block touches (in its iteration variables), required
 * [rlo, rhi] what the other blocks need. */
static solve_result solve(at_ctx *c, dg_expr *plo, dg_expr *phi, dg_expr *rlo, dg_expr *rhi,
                          int64_t dim_max, dg_var **var, var_dom *out) {
  dg_func *f = c->f;
  plo = ir_simplify(f, plo, NULL);
  phi = ir_simplify(f, phi, NULL);
  int64_t k, k2;
  *out = (var_dom){{NULL, NULL}, {NULL, NULL}};
  if (ir_is_const_int(plo, &k) && ir_is_const_int(phi, &k2) && k == k2) {
    if (prove_eq(c, rlo, plo) && prove_eq(c, rhi, plo)) return SOLVE_SKIP;
    return SOLVE_FAIL;
  }
  if (plo->kind == DG_EXPR_MUL) {
    const dg_expr *v = plo->a, *e = plo->b;
    if (v->kind != DG_EXPR_VAR) v = plo->b, e = plo->a;
    if (v->kind == DG_EXPR_VAR && ir_is_const_int(e, &k) && k > 0) {
      *var = v->var;
      dg_expr *ke = cint(c, k, plo);
      out->dom = (ivl){simp(c, ir_bin(f, DG_EXPR_FLOORDIV, rlo, ke)),
                       simp(c, ir_bin(f, DG_EXPR_FLOORDIV, rhi, ke))};
      out->bound = (ivl){cint(c, 0, plo), cint(c, dim_max / k, plo)};
      return SOLVE_VAR;
    }
  }
  if (!prove_eq(c, plo, phi)) return SOLVE_FAIL;
  if (plo->kind == DG_EXPR_VAR) {
    *var = plo->var;
    out->dom = (ivl){rlo, rhi};
    out->bound = (ivl){cint(c, 0, plo), cint(c, dim_max, plo)};
    return SOLVE_VAR;
  }
  if ((plo->kind == DG_EXPR_ADD || plo->kind == DG_EXPR_SUB) && plo->a->kind == DG_EXPR_VAR &&
      ir_is_const_int(plo->b, &k)) {
    /* v + k: the affine inverse, v = x - k */
    if (plo->kind == DG_EXPR_SUB) k = -k;
    *var = plo->a->var;
    dg_expr *ke = cint(c, k, plo);
    out->dom = (ivl){simp(c, ir_sub(f, rlo, ke)), simp(c, ir_sub(f, rhi, ke))};
    out->bound = (ivl){cint(c, -k, plo), cint(c, dim_max - k, plo)};
    return SOLVE_VAR;
  }
  if (plo->kind == DG_EXPR_FLOORDIV && ir_is_const_int(plo->b, &k) && k >= 1) {
    dg_expr *lo = simp(c, ir_mul(f, rlo, plo->b));
    dg_expr *hi = simp(c, ir_add(f, ir_mul(f, rhi, plo->b), cint(c, k - 1, plo)));
    if (plo->a->kind == DG_EXPR_VAR) {
      *var = plo->a->var;
      out->dom = (ivl){lo, hi};
      out->bound = (ivl){cint(c, 0, plo), cint(c, dim_max * k + k - 1, plo)};
      return SOLVE_VAR;
    }
    return solve(c, plo->a, plo->a, lo, hi, dim_max, var, out);
  }
  if (plo->kind == DG_EXPR_FLOORMOD && plo->a->kind == DG_EXPR_VAR) {
    *var = plo->a->var; /* x % k says nothing about the range of x */
    return SOLVE_VAR;
  }
  return SOLVE_FAIL;
}

/* ---- the plan -------------------------------------------------------------------------- */

static int iter_index(const dg_block *b, const dg_var *v) {
  for (int i = 0; i < b->n_iters; i++)
    if (b->iters[i].var == v) return i;
  return -1;
}

static bool path_has(const sched_path *p, const dg_stmt *s) {
  for (int i = 0; i < p->n; i++)
    if (p->stmts[i] == s) return true;
  return false;
}

/* Counts the given blocks among the first-level blocks of a subtree. */
static int count_in(const dg_stmt *s, const sched_blocks *set) {
  if (!s) return 0;
  switch (s->kind) {
    case DG_STMT_FOR: return count_in(s->body, set);
    case DG_STMT_SEQ: {
      int n = 0;
      for (int i = 0; i < s->n; i++) n += count_in(s->stmts[i], set);
      return n;
    }
    case DG_STMT_IF: return count_in(s->then_s, set) + count_in(s->else_s, set);
    case DG_STMT_BLOCK:
      for (size_t i = 0; i < set->len; i++)
        if (set->data[i] == s->block) return 1;
      return 0;
    case DG_STMT_STORE: return 0;
  }
  return 0;
}

static bool find_insertion(at_ctx *c, const sched_blocks *prod, const sched_blocks *cons,
                           dg_status *st) {
  dg_stmt *body = c->loop->body;
  int n = body->kind == DG_STMT_SEQ ? body->n : 1;
  int last_prod = -1, first_cons = n, n_prod = 0, n_cons = 0;
  for (int i = 0; i < n; i++) {
    const dg_stmt *sub = body->kind == DG_STMT_SEQ ? body->stmts[i] : body;
    int np = count_in(sub, prod), nc = count_in(sub, cons);
    if (np) last_prod = i;
    if (nc && first_cons == n) first_cons = i;
    n_prod += np;
    n_cons += nc;
  }
  const sched_blocks *req = c->compute_at ? cons : prod;
  int n_req = c->compute_at ? n_cons : n_prod;
  if (n_req < (int)req->len) {
    for (size_t i = 0; i < req->len; i++)
      if (!count_in(body, &(sched_blocks){.data = &req->data[i], .len = 1}))
        return dg_fail(st, DG_ERR_INVALID, "%s %s of block %s is not under loop %s", what(c),
                       req->data[i]->name, c->block->name, c->loop->loop_var->name);
  }
  if (last_prod >= first_cons)
    return dg_fail(st, DG_ERR_INVALID,
                   "no place for block %s under loop %s: a producer is in statement %d of the "
                   "loop body, a consumer in statement %d",
                   c->block->name, c->loop->loop_var->name, last_prod, first_cons);
  if (c->index == -1)
    c->insert_at = first_cons;
  else if (c->index == -2)
    c->insert_at = last_prod + 1;
  else if (c->index >= last_prod + 1 && c->index <= first_cons)
    c->insert_at = (int)c->index;
  else
    return dg_fail(st, DG_ERR_INVALID,
                   "index %lld is not a place for block %s under loop %s: valid are -1, -2 "
                   "and [%d, %d]",
                   (long long)c->index, c->block->name, c->loop->loop_var->name, last_prod + 1,
                   first_cons);
  return true;
}

/* Same scope, loop not an ancestor; binds the ranges of the loops at and
 * above the target loop into c->known. */
static bool check_scope(at_ctx *c, dg_status *st) {
  const char *bn = c->block->name, *ln = c->loop->loop_var->name;
  if (path_has(&c->bp, c->loop))
    return dg_fail(st, DG_ERR_INVALID, "loop %s contains block %s: it must be outside it", ln, bn);
  bool reached = false;
  for (int i = c->lp.n - 1; i >= 0 && !reached; i--) {
    const dg_stmt *s = c->lp.stmts[i];
    if (s->kind == DG_STMT_BLOCK) {
      if (s->block != c->scope)
        return dg_fail(st, DG_ERR_INVALID,
                       "block %s and loop %s are not in the same block scope (the loop is "
                       "under block %s)",
                       bn, ln, s->block->name);
      reached = true;
    } else if (s->kind == DG_STMT_IF) {
      return dg_fail(st, DG_ERR_INVALID, "loop %s is under an if statement", ln);
    }
  }
  DG_ASSERT(reached);
  c->known.n = 0;
  for (int i = 0; i < c->lp.n; i++) {
    const dg_stmt *s = c->lp.stmts[i];
    if (s->kind == DG_STMT_FOR) ir_ranges_push(&c->known, s->loop_var, 0, s->extent - 1);
    if (s->kind == DG_STMT_BLOCK)
      for (int k = 0; k < s->block->n_iters; k++)
        ir_ranges_push(&c->known, s->block->iters[k].var, 0, s->block->iters[k].extent - 1);
  }
  return true;
}

/* The part of the plan after the checks: the iteration ranges. */
static bool solve_domains(at_ctx *c, const sched_blocks *req, dg_status *st) {
  dg_func *f = c->f;
  dg_block *b = c->block;
  if (b->n_iters > (int)DG_ARRAY_LEN(c->doms))
    return dg_fail(st, DG_ERR_INVALID, "block %s has too many iteration variables", b->name);
  for (int i = 0; i < b->n_iters; i++) c->doms[i] = (var_dom){{NULL, NULL}, {NULL, NULL}};
  const dg_region *prov = c->compute_at ? b->writes : b->reads;
  int n_prov = c->compute_at ? b->n_writes : b->n_reads;
  for (int r = 0; r < n_prov; r++) {
    dg_buffer *buf = prov[r].buf;
    bool first = true;
    for (int q = 0; q < r; q++)
      if (prov[q].buf == buf) first = false;
    if (!first) continue;
    /* what one instance of the block provides */
    sched_region p = {.buf = NULL};
    for (int q = r; q < n_prov; q++) {
      if (prov[q].buf != buf) continue;
      sched_region one = {.buf = buf};
      for (int d = 0; d < buf->ndim; d++) {
        one.lo[d] = prov[q].min[d];
        one.hi[d] = ir_simplify(
            f, ir_sub(f, ir_add(f, prov[q].min[d], prov[q].ext[d]), cint(c, 1, prov[q].min[d])),
            NULL);
      }
      sched_region_union(f, &p, &one, NULL);
    }
    /* what the blocks under the loop require */
    sched_region need = {.buf = NULL};
    for (size_t k = 0; k < req->len; k++) {
      sched_path rp;
      DG_ASSERT(sched_locate_block(f, req->data[k], &rp));
      int top = -1;
      for (int i = 0; i < rp.n; i++)
        if (rp.stmts[i] == c->loop) top = i;
      DG_ASSERT(top >= 0);
      sched_region one;
      if (sched_region_of_block(f, &rp, top, buf, !c->compute_at, c->compute_at, &one, NULL))
        sched_region_union(f, &need, &one, &c->known);
    }
    if (!need.buf) continue;
    for (int d = 0; d < buf->ndim; d++) {
      dg_var *v = NULL;
      var_dom vd;
      solve_result res = solve(c, p.lo[d], p.hi[d], simp(c, need.lo[d]), simp(c, need.hi[d]),
                               buf->shape[d] > 0 ? buf->shape[d] - 1 : 0, &v, &vd);
      if (res == SOLVE_SKIP) continue;
      int it = res == SOLVE_VAR ? iter_index(b, v) : -1;
      if (res == SOLVE_VAR && it < 0 && prove_eq(c, p.lo[d], need.lo[d]) &&
          prove_eq(c, p.hi[d], need.hi[d]))
        continue;
      if (it < 0) {
        dg_str e;
        dg_str_init(&e);
        ir_print_expr(&e, p.lo[d]);
        dg_fail(st, DG_ERR_INVALID,
                "cannot cover the region of %s the %ss under loop %s need with block %s: "
                "dimension %d is indexed by %s",
                buf->name, what(c), c->loop->loop_var->name, b->name, d, e.s);
        dg_str_free(&e);
        return false;
      }
      c->doms[it].dom = ivl_union(c, c->doms[it].dom, vd.dom);
      c->doms[it].bound = ivl_union(c, c->doms[it].bound, vd.bound);
    }
  }
  /* final ranges, TVM's BlockVarDomainInfo::Simplify */
  for (int i = 0; i < b->n_iters; i++) {
    var_dom *vd = &c->doms[i];
    dg_expr *zero = ir_int_t(f, 0, b->iters[i].var->dtype);
    ivl whole = {zero, ir_int_t(f, b->iters[i].extent - 1, zero->dtype)};
    vd->bound = vd->bound.lo ? ivl_intersect(c, vd->bound, whole) : whole;
    if (!vd->dom.lo) {
      vd->dom = vd->bound;
      vd->bound = (ivl){NULL, NULL};
    } else {
      ivl in = ivl_intersect(c, vd->dom, vd->bound);
      int64_t a, z;
      if (prove_eq(c, vd->dom.lo, in.lo) && prove_eq(c, vd->dom.hi, in.hi)) {
        vd->bound = (ivl){NULL, NULL};
      } else if (prove_eq(c, vd->bound.lo, in.lo) && prove_eq(c, vd->bound.hi, in.hi)) {
        vd->dom = vd->bound;
        vd->bound = (ivl){NULL, NULL};
      } else if (ir_is_const_int(in.lo, &a) && ir_is_const_int(in.hi, &z)) {
        vd->dom = in;
        vd->bound = (ivl){NULL, NULL};
      }
    }
    c->mins[i] = vd->dom.lo;
    c->extents[i] = simp(c, ir_add(f, ir_sub(f, vd->dom.hi, vd->dom.lo), cint(c, 1, vd->dom.lo)));
    int64_t e;
    c->pred_ext[i] = !ir_is_const_int(c->extents[i], &e);
    if (c->pred_ext[i]) e = ir_expr_bounds(c->extents[i], &c->known).hi;
    if (e < 1)
      return dg_fail(st, DG_ERR_INVALID,
                     "the %ss under loop %s need no instance of block %s (iteration variable %s "
                     "gets an empty range)",
                     what(c), c->loop->loop_var->name, b->name, b->iters[i].var->name);
    if (e > INT32_MAX)
      return dg_fail(st, DG_ERR_INVALID,
                     "cannot bound the range of iteration variable %s of block %s under loop %s",
                     b->iters[i].var->name, b->name, c->loop->loop_var->name);
    c->const_ext[i] = e;
  }
  return true;
}

static bool plan(at_ctx *c, dg_status *st) {
  dg_func *f = c->f;
  DG_ASSERT(sched_locate_block(f, c->block, &c->bp));
  DG_ASSERT(sched_locate_stmt(f, c->loop, &c->lp));
  c->scope = sched_path_parent_block(&c->bp, c->bp.n - 1);
  if (!c->scope) return dg_fail(st, DG_ERR_INVALID, "cannot move the root block");
  if (!sched_block_check_complete_or_reduction(c->scope, c->block, st)) return false;
  if (!check_scope(c, st)) return false;
  if (c->compute_at) {
    dg_buffer *out = sched_block_output(f, c->scope, c->block);
    if (out)
      return dg_fail(st, DG_ERR_INVALID,
                     "block %s is an output block (it writes %s, which outlives its scope) and "
                     "cannot be computed at a loop",
                     c->block->name, out->name);
  }
  if (!sched_removal_plan(f, &c->bp, &c->removal, st)) return false;
  sched_blocks prod = {0}, cons = {0};
  sched_scope_producers(c->scope, c->block, &prod);
  sched_scope_consumers(c->scope, c->block, &cons);
  bool ok = find_insertion(c, &prod, &cons, st) &&
            solve_domains(c, c->compute_at ? &cons : &prod, st);
  DG_VEC_FREE(&prod);
  DG_VEC_FREE(&cons);
  return ok;
}

/* ---- the transformation -------------------------------------------------------------------- */

static dg_expr *and_pred(dg_func *f, dg_expr *p, dg_expr *q) { return p ? ir_bin(f, DG_EXPR_AND, p, q) : q; }

static void commit(at_ctx *c) {
  dg_func *f = c->f;
  dg_block *b = c->block;
  dg_stmt *realize = c->bp.stmts[c->bp.n - 1];
  sched_removal_apply(&c->removal);
  dg_var *vars[64];
  int64_t exts[64];
  int nv = 0;
  dg_ranges r = c->known;
  dg_expr *pred = NULL;
  for (int i = 0; i < b->n_iters; i++) {
    dg_expr *value = c->mins[i];
    if (c->preserve_unit_loops || c->const_ext[i] != 1 || c->pred_ext[i]) {
      /* named once the nest is in the tree, so the name is unique there */
      dg_var *v = ir_var_new(f, "", c->mins[i]->dtype);
      vars[nv] = v;
      exts[nv++] = c->const_ext[i];
      ir_ranges_push(&r, v, 0, c->const_ext[i] - 1);
      int64_t m;
      /* min + v as TVM builds it: folded only when min is 0 */
      value = ir_is_const_int(c->mins[i], &m) && m == 0 ? ir_var(f, v)
                                                      : ir_add(f, c->mins[i], ir_var(f, v));
    }
    b->iters[i].binding = value;
    const var_dom *vd = &c->doms[i];
    dg_expr *one = ir_int_t(f, 1, value->dtype);
    if (c->pred_ext[i]) {
      dg_expr *upper = ir_bin(f, DG_EXPR_LT, value, ir_add(f, vd->dom.hi, one));
      if (!ir_prove(f, upper, &r)) pred = and_pred(f, pred, upper);
    }
    if (vd->bound.lo) {
      dg_expr *lower = ir_bin(f, DG_EXPR_GE, value, vd->bound.lo);
      if (!ir_prove(f, lower, &r)) pred = and_pred(f, pred, lower);
      dg_expr *upper = ir_bin(f, DG_EXPR_LT, value, ir_add(f, vd->bound.hi, one));
      if (!ir_prove(f, upper, &r)) pred = and_pred(f, pred, upper);
    }
  }
  if (pred) {
    pred = ir_simplify(f, pred, &r);
    int64_t t;
    if (ir_is_const_int(pred, &t) && t != 0) pred = NULL;
  }
  b->predicate = pred;
  dg_stmt *nest = realize;
  for (int i = nv - 1; i >= 0; i--)
    nest = ir_for(f, vars[i], exts[i], DG_LOOP_SERIAL, DG_TAG_NONE, nest);
  dg_stmt *body = c->loop->body;
  int n = body->kind == DG_STMT_SEQ ? body->n : 1;
  dg_stmt **items = DG_ANEWN(f->arena, dg_stmt *, n + 1);
  for (int i = 0, k = 0; i <= n; i++) {
    if (i == c->insert_at) items[i] = nest;
    else items[i] = body->kind == DG_STMT_SEQ ? body->stmts[k++] : (k++, body);
  }
  c->loop->body = ir_seq(f, items, n + 1);
  for (int i = 0; i < nv; i++) {
    char base[32];
    snprintf(base, sizeof base, "ax%d", i);
    vars[i]->name = sched_fresh_var_name(f, base);
  }
}

/* ---- the instructions -------------------------------------------------------------------------- */

static bool attr_int(const sched_val *v, const char *name, int64_t *out, dg_status *st) {
  if (v->kind != SV_INT && v->kind != SV_BOOL)
    return dg_fail(st, DG_ERR_INVALID, "%s must be an integer", name);
  *out = v->i;
  return true;
}

/* The location mark of a loop operand: 0 for a real loop, -1 root, -2 inline. */
static int loop_mark(const sched *s, const sched_val *v) {
  if (v->kind != SV_RV || v->i < 0 || v->i >= s->n_rvs) return 0;
  const sched_rv *rv = &s->rvs[v->i];
  return rv->kind == SCHED_RV_LOOP && !rv->loop ? rv->special : 0;
}

static bool at_run(at_ctx *c, bool check_only, dg_status *st) {
  if (!plan(c, st)) return false;
  if (!check_only) commit(c);
  return true;
}

static bool compute_at_common(prim_call *c, bool compute_at, dg_status *st) {
  sched *s = c->s;
  const sched_inst *in = c->inst;
  int64_t preserve = 0, index = -1;
  if (!attr_int(&in->attrs[0], "preserve_unit_loops", &preserve, st) ||
      !attr_int(&in->attrs[1], "index", &index, st))
    return false;
  dg_block *b = sched_rv_block(s, &in->inputs[0], "block", st);
  if (!b) return false;
  int mark = loop_mark(s, &in->inputs[1]);
  if (mark == -1) return true;
  if (mark == -2) return sched_inline_block(s, b, !compute_at, false, st);
  dg_stmt *l = sched_rv_loop(s, &in->inputs[1], "loop", st);
  if (!l) return false;
  at_ctx *x = dg_calloc(1, sizeof *x);
  *x = (at_ctx){.s = s, .f = s->f, .block = b, .loop = l, .compute_at = compute_at,
                .preserve_unit_loops = preserve != 0, .index = index};
  bool ok = at_run(x, false, st);
  free(x);
  return ok;
}

bool prim_compute_at(prim_call *c, dg_status *st) { return compute_at_common(c, true, st); }
bool prim_reverse_compute_at(prim_call *c, dg_status *st) {
  return compute_at_common(c, false, st);
}

/* ---- SampleComputeLocation ------------------------------------------------------------------- */

static bool can_move(sched *s, dg_block *b, dg_stmt *loop, bool compute_at) {
  at_ctx *x = dg_calloc(1, sizeof *x);
  *x = (at_ctx){.s = s, .f = s->f, .block = b, .loop = loop, .compute_at = compute_at,
                .preserve_unit_loops = true, .index = -1};
  dg_status st;
  bool ok = at_run(x, true, &st);
  free(x);
  return ok;
}

static bool can_compute_at(sched *s, dg_block *b, dg_stmt *loop) { return can_move(s, b, loop, true); }

bool sched_compute_at_fits(sched *s, int block_rv, int loop_rv, bool reverse) {
  if (sched_rv_stale(s, loop_rv)) return false;
  if (block_rv < 0 || block_rv >= s->n_rvs || s->rvs[block_rv].kind != SCHED_RV_BLOCK) return true;
  if (loop_rv < 0 || loop_rv >= s->n_rvs || s->rvs[loop_rv].kind != SCHED_RV_LOOP) return true;
  sched_val bv = {.kind = SV_RV, .i = block_rv};
  dg_status st;
  dg_block *b = sched_rv_block(s, &bv, "block", &st);
  if (!b) return true;
  const sched_rv *l = &s->rvs[loop_rv];
  if (!l->loop) return l->special != -2 || sched_inline_block(s, b, reverse, true, &st);
  return can_move(s, b, l->loop, !reverse);
}

/* TVM's GetLoopIterType over the blocks directly under the loop: 0 spatial
 * (or unused), 1 reduction, 2 both. */
typedef struct {
  const dg_var *v;
  bool spatial, reduce;
} iter_type_ctx;

static void iter_types(const dg_stmt *s, iter_type_ctx *c) {
  if (!s) return;
  switch (s->kind) {
    case DG_STMT_FOR: iter_types(s->body, c); break;
    case DG_STMT_SEQ:
      for (int i = 0; i < s->n; i++) iter_types(s->stmts[i], c);
      break;
    case DG_STMT_IF:
      iter_types(s->then_s, c);
      iter_types(s->else_s, c);
      break;
    case DG_STMT_BLOCK:
      for (int i = 0; i < s->block->n_iters; i++)
        if (ir_expr_uses_var(s->block->iters[i].binding, c->v)) {
          if (s->block->iters[i].kind == DG_ITER_SPATIAL) c->spatial = true;
          else c->reduce = true;
        }
      break;
    case DG_STMT_STORE: break;
  }
}

static int loop_iter_type(const dg_stmt *loop) {
  iter_type_ctx c = {loop->loop_var, false, false};
  iter_types(loop->body, &c);
  return c.spatial && c.reduce ? 2 : c.reduce ? 1 : 0;
}

static bool sref_node(const dg_stmt *s) { return s->kind == DG_STMT_FOR || s->kind == DG_STMT_BLOCK; }

/* CollectComputeLocation: candidate loops (NULL for the marks) and their
 * indices, ascending; *n_pos: the loop positions there are (the first
 * consumer's loops within the scope), candidates or not. */
static int collect_locations(sched *s, dg_block *b, dg_stmt **locs, int64_t *idx, int max,
                             int *n_pos) {
  dg_func *f = s->f;
  int n = 0;
  *n_pos = 0;
  dg_status st;
  if (sched_inline_block(s, b, false, true, &st)) locs[n] = NULL, idx[n++] = -2;
  locs[n] = NULL, idx[n++] = -1;
  sched_path bp;
  DG_ASSERT(sched_locate_block(f, b, &bp));
  dg_block *scope = sched_path_parent_block(&bp, bp.n - 1);
  if (!scope) return n;
  sched_blocks cons = {0};
  sched_scope_consumers(scope, b, &cons);
  if (cons.len == 0) {
    DG_VEC_FREE(&cons);
    return n;
  }
  /* the deepest loop or block above every consumer */
  sched_path first;
  DG_ASSERT(sched_locate_block(f, cons.data[0], &first));
  int common = first.n - 1; /* the consumer itself for one consumer */
  if (cons.len == 1) {
    common = first.n - 2;
  } else {
    for (size_t k = 1; k < cons.len; k++) {
      sched_path p;
      DG_ASSERT(sched_locate_block(f, cons.data[k], &p));
      int m = 0;
      while (m < p.n && m < first.n && p.stmts[m] == first.stmts[m]) m++;
      if (m - 1 < common) common = m - 1;
    }
  }
  while (common > 0 && !sref_node(first.stmts[common])) common--;
  dg_stmt *boundary = first.stmts[common];
  DG_VEC_FREE(&cons);
  if (boundary->kind != DG_STMT_FOR) return n;
  /* the loops of the first consumer, up to its scope */
  int lo = first.n - 1;
  while (lo > 0 && first.stmts[lo - 1]->kind != DG_STMT_BLOCK) lo--;
  dg_stmt *loops[256];
  int nl = 0, lca = -1;
  for (int i = lo; i < first.n - 1; i++)
    if (first.stmts[i]->kind == DG_STMT_FOR) {
      if (first.stmts[i] == boundary) lca = nl;
      loops[nl++] = first.stmts[i];
    }
  *n_pos = nl;
  if (lca < 0) return n;
  int types[256], last_spatial = -1;
  for (int i = 0; i <= lca; i++) {
    types[i] = loop_iter_type(loops[i]);
    if (types[i] == 0) last_spatial = i;
  }
  bool seen_reduce = false;
  for (int i = 0; i <= lca && n < max; i++) {
    if (loops[i]->extent == 1) continue;
    if (types[i] == 0) {
      if (seen_reduce) break;
    } else {
      seen_reduce = true;
      if (i > last_spatial) break;
    }
    if (can_compute_at(s, b, loops[i])) locs[n] = loops[i], idx[n++] = i;
  }
  return n;
}

/* A recorded location that is not among the legal ones: the error lists
 * them ("-2 (inline), -1 (root), 1 (j_0)"). */
static bool location_error(const dg_block *b, int64_t decision, int n_pos, dg_stmt *const *locs,
                           const int64_t *idx, int n, dg_status *st) {
  char legal[240];
  size_t k = 0;
  legal[0] = 0;
  for (int i = 0; i < n && k + 40 < sizeof legal; i++) {
    const char *what = idx[i] == -2 ? "inline" : idx[i] == -1 ? "root" : locs[i]->loop_var->name;
    k += (size_t)snprintf(legal + k, sizeof legal - k, "%s%lld (%.24s)", i ? ", " : "",
                          (long long)idx[i], what);
  }
  if (decision < -2 || decision >= n_pos)
    return dg_fail(st, DG_ERR_INVALID,
                   "decision %lld is out of range [-2, %d) (-2 inline, -1 root, 0.. the loops "
                   "above the first consumer); the legal locations of block %s are %s",
                   (long long)decision, n_pos, b->name, legal);
  return dg_fail(st, DG_ERR_INVALID,
                 "decision %lld is not a legal compute location of block %s; the legal ones are %s",
                 (long long)decision, b->name, legal);
}

bool prim_sample_compute_location(prim_call *c, dg_status *st) {
  sched *s = c->s;
  dg_block *b = sched_rv_block(s, &c->inst->inputs[0], "block", st);
  if (!b) return false;
  dg_stmt *locs[260];
  int64_t idx[260];
  int n_pos;
  int n = collect_locations(s, b, locs, idx, (int)DG_ARRAY_LEN(locs), &n_pos);
  int pick;
  if (c->has_decision) {
    if (c->decision.kind != SV_INT)
      return dg_fail(st, DG_ERR_INVALID, "decision must be an integer loop position");
    int64_t old = c->decision.i;
    int at = 0;
    while (at < n && idx[at] < old) at++;
    if (at < n && idx[at] == old) pick = at;
    else if (!c->repair) return location_error(b, old, n_pos, locs, idx, n, st);
    else if (at > 0) pick = at - 1; /* TVM: the nearest earlier candidate */
    else pick = -1;
  } else {
    pick = (int)dg_rng_below(&s->rng, (uint64_t)n);
  }
  int64_t decision = pick < 0 ? -1 : idx[pick];
  dg_stmt *loop = pick < 0 ? NULL : locs[pick];
  c->has_decision = true;
  c->decision = (sched_val){.kind = SV_INT, .i = decision};
  prim_out(c, loop ? sched_rv_new_loop(s, loop) : sched_rv_new_special_loop(s, (int)decision));
  return true;
}
