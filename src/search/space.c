/* space.c: design spaces (TVM's PostOrderApply), samples of them, the
 * registries of rules and postprocessors, and the block analyses the rules
 * share (space_impl.h).
 *
 * Generation follows post_order_apply.cc exactly, because the order of the
 * sketches depends on it: every block gets a GetBlock in post-order
 * (children before parents, the root last); then for each rule, every
 * current sketch is pushed on a stack with the whole block list, and the
 * top of the stack takes the next block from the back of its list (the
 * root first); each schedule a rule returns is pushed back with the rest of
 * the list. Blocks that no longer exist, or that carry a `schedule_rule`
 * annotation, are skipped.
 *
 * Copies of a schedule are made by replaying its trace on a fresh schedule
 * of the same kernel: handles are serial, so the copy's handles are the
 * original's. A rule that fails midway (a primitive refused a step TVM
 * would have taken) is undone the same way, from the trace before it, and
 * counted; TVM would raise there, dragon keeps the sketch without it.
 *
 * Not here: the rules themselves (rule_*.c), the postprocessors
 * (postproc_*.c), mutation and search (mutate.c, evolve.c).
 */
#include <string.h>

#include "search/space_impl.h"

const search_target search_target_sm90 = {
    .arch = 90, .max_threads_per_block = 1024, .warp_size = 32, .max_threadblocks = 256};

/* ---- registries ------------------------------------------------------------------ */

static const char *const rule_names[] = {
#define X(e, name) name,
    SEARCH_RULE_LIST(X)
#undef X
};
static const space_rule_fn rule_fns[] = {
    rule_mlt_tc_apply, rule_mlt_apply,    rule_inline_const_scalars_apply, rule_auto_inline_apply,
    rule_ctr_apply,    rule_unroll_apply, rule_bind_apply,
};
_Static_assert(DG_ARRAY_LEN(rule_names) == SEARCH_RULE_COUNT, "rule names");
_Static_assert(DG_ARRAY_LEN(rule_fns) == SEARCH_RULE_COUNT, "rule functions");

const char *search_rule_name(search_rule r) {
  DG_ASSERT(r >= 0 && r < SEARCH_RULE_COUNT);
  return rule_names[r];
}

bool search_rule_from_name(const char *s, search_rule *out) {
  for (int i = 0; i < SEARCH_RULE_COUNT; i++)
    if (strcmp(s, rule_names[i]) == 0) {
      *out = (search_rule)i;
      return true;
    }
  return false;
}

typedef bool (*postproc_fn)(sched *s, const search_target *t, dg_status *st);

static const char *const postproc_names[] = {
#define X(e, name) name,
    SEARCH_POSTPROC_LIST(X)
#undef X
};
static const postproc_fn postproc_fns[] = {
    postproc_disallow_dynamic_loop, postproc_cooperative_fetch, postproc_unbound_block,
    postproc_unroll,                postproc_reduction_block,   postproc_verify_gpu,
    postproc_tensorize,
};
_Static_assert(DG_ARRAY_LEN(postproc_names) == SEARCH_POSTPROC_COUNT, "postproc names");
_Static_assert(DG_ARRAY_LEN(postproc_fns) == SEARCH_POSTPROC_COUNT, "postproc functions");

const char *search_postproc_name(search_postproc p) {
  DG_ASSERT(p >= 0 && p < SEARCH_POSTPROC_COUNT);
  return postproc_names[p];
}

bool search_postproc_apply(search_postproc p, sched *s, const search_target *t, dg_status *st) {
  DG_ASSERT(p >= 0 && p < SEARCH_POSTPROC_COUNT);
  dg_status_ok(st);
  if (!postproc_fns[p](s, t ? t : &search_target_sm90, st)) {
    dg_status_prefix(st, "%s", postproc_names[p]);
    return false;
  }
  return true;
}

/* The counts are added atomically: the evolutionary search calls this from
 * several threads at once with one ctx. */
bool search_postproc_cuda(sched *s, void *ctx, dg_status *st) {
  search_postprocs *pp = ctx;
  const search_target *t = pp && pp->target ? pp->target : &search_target_sm90;
  if (!sched_enter_postproc(s, st)) return false;
  for (int p = 0; p < SEARCH_POSTPROC_COUNT; p++)
    if (!search_postproc_apply((search_postproc)p, s, t, st)) {
      if (pp) __atomic_fetch_add(&pp->rejected[p], 1, __ATOMIC_RELAXED);
      return false;
    }
  if (pp) __atomic_fetch_add(&pp->accepted, 1, __ATOMIC_RELAXED);
  return true;
}

/* ---- schedules -------------------------------------------------------------------- */

sched *space_replay_prefix(const dg_func *f, uint64_t seed, const sched_trace *t, int n,
                           dg_status *st) {
  sched_trace *pre = sched_trace_new();
  for (int i = 0; i < n && i < t->n; i++) sched_trace_append(pre, &t->insts[i]);
  sched *s = sched_new(f, seed);
  bool ok = sched_replay(s, pre, false, false, st);
  sched_trace_free(pre);
  if (!ok) {
    sched_free(s);
    return NULL;
  }
  return s;
}

sched *space_copy(space_ctx *c, sched *s, dg_status *st) {
  const sched_trace *t = sched_get_trace(s);
  sched *cp = space_replay_prefix(c->f, c->seed + (uint64_t)++c->n_copies, t, t->n, st);
  if (!cp) {
    dg_status_prefix(st, "copying a schedule");
    return NULL;
  }
  if (cp->n_rvs != s->n_rvs) {
    sched_free(cp);
    dg_fail(st, DG_ERR_INVALID, "copying a schedule: %d handles, the original has %d",
            cp->n_rvs, s->n_rvs);
    return NULL;
  }
  cp->rng = dg_rng_fork(&s->rng);
  return cp;
}

/* ---- handles and the kernel ---------------------------------------------------------- */

dg_block *space_block(sched *s, int rv) {
  if (rv < 0 || rv >= s->n_rvs || s->rvs[rv].kind != SCHED_RV_BLOCK) return NULL;
  sched_val v = {.kind = SV_RV, .i = rv};
  dg_status tmp;
  return sched_rv_block(s, &v, "block", &tmp);
}

dg_stmt *space_loop(sched *s, int rv) {
  if (rv < 0 || rv >= s->n_rvs || s->rvs[rv].kind != SCHED_RV_LOOP || !s->rvs[rv].loop)
    return NULL;
  sched_val v = {.kind = SV_RV, .i = rv};
  dg_status tmp;
  return sched_rv_loop(s, &v, "loop", &tmp);
}

dg_block *space_scope(sched *s, const dg_block *b) {
  sched_path p;
  if (!sched_locate_block(s->f, b, &p)) return NULL;
  return sched_path_parent_block(&p, p.n - 1);
}

int space_block_loops(sched *s, const dg_block *b, dg_stmt **out, int max) {
  sched_path p;
  if (!sched_locate_block(s->f, b, &p)) return 0;
  int first = p.n - 1;
  while (first > 0 && p.stmts[first - 1]->kind != DG_STMT_BLOCK) first--;
  int n = 0;
  for (int i = first; i < p.n - 1; i++)
    if (p.stmts[i]->kind == DG_STMT_FOR && n < max) out[n++] = p.stmts[i];
  return n;
}

static void count_uses(const dg_stmt *s, const dg_var *v, int *sp, int *red) {
  if (!s) return;
  switch (s->kind) {
    case DG_STMT_FOR: count_uses(s->body, v, sp, red); break;
    case DG_STMT_SEQ:
      for (int i = 0; i < s->n; i++) count_uses(s->stmts[i], v, sp, red);
      break;
    case DG_STMT_IF:
      count_uses(s->then_s, v, sp, red);
      count_uses(s->else_s, v, sp, red);
      break;
    case DG_STMT_BLOCK:
      for (int i = 0; i < s->block->n_iters; i++)
        if (ir_expr_uses_var(s->block->iters[i].binding, v)) {
          if (s->block->iters[i].kind == DG_ITER_REDUCE) (*red)++;
          else (*sp)++;
        }
      break;
    case DG_STMT_STORE: break;
  }
}

space_loop_type space_loop_iter_type(const dg_stmt *loop) {
  int sp = 0, red = 0;
  count_uses(loop->body, loop->loop_var, &sp, &red);
  if (sp && red) return SPACE_LOOP_OPAQUE;
  return red ? SPACE_LOOP_REDUCE : SPACE_LOOP_SPATIAL;
}

bool space_is_root(sched *s, const dg_block *b) { return b == ir_func_root(s->f); }

bool space_block_is_spatial(const dg_block *b) {
  for (int i = 0; i < b->n_iters; i++)
    if (b->iters[i].kind != DG_ITER_SPATIAL) return false;
  return true;
}

static bool spatial_visit(dg_block *b, dg_stmt *realize, void *ctx) {
  (void)realize;
  if (!space_block_is_spatial(b)) {
    *(bool *)ctx = false;
    return false;
  }
  return true;
}

bool space_func_is_spatial(const dg_func *f) {
  bool yes = true;
  ir_visit_blocks(f->body, spatial_visit, &yes);
  return yes;
}

const char *space_ann_str(const dg_block *b, const char *key) {
  const dg_ann *a = ir_anns_get(&b->anns, key);
  return a && a->kind == DG_ANN_STR ? a->s : NULL;
}

bool space_block_is_tiled(const dg_block *b) {
  return ir_anns_get(&b->anns, "meta_schedule.tiling_structure") != NULL;
}

bool space_trivial_binding(sched *s, const dg_block *b) {
  dg_stmt *loops[64];
  int n = space_block_loops(s, b, loops, 64);
  if (n != b->n_iters) return false;
  for (int i = 0; i < n; i++) {
    const dg_expr *e = b->iters[i].binding;
    if (!e || e->kind != DG_EXPR_VAR || e->var != loops[i]->loop_var) return false;
  }
  return true;
}

static bool const_extent(dg_func *f, dg_expr *e) {
  int64_t v;
  if (ir_is_const_int(e, &v)) return true;
  return ir_is_const_int(ir_simplify(f, e, NULL), &v);
}

bool space_needs_mlt(sched *s, const dg_block *b) {
  if (space_block_is_tiled(b) || b->n_writes != 1 || b->n_reads == 0 ||
      space_block_is_spatial(b) || !space_trivial_binding(s, b))
    return false;
  const dg_buffer *wbuf = b->writes[0].buf;
  /* spatial variables of a non-trivial domain */
  const dg_var *vars[64];
  int nv = 0;
  for (int i = 0; i < b->n_iters && nv < 64; i++)
    if (b->iters[i].kind == DG_ITER_SPATIAL && b->iters[i].extent != 1) vars[nv++] = b->iters[i].var;
  int unused = 0;
  for (int r = 0; r < b->n_reads; r++) {
    const dg_region *rg = &b->reads[r];
    for (int q = 0; q < r; q++)
      if (b->reads[q].buf == rg->buf) return false;
    if (rg->buf == wbuf) continue;
    for (int d = 0; d < rg->buf->ndim; d++)
      if (!const_extent(s->f, rg->ext[d])) return false;
    for (int k = 0; k < nv; k++) {
      bool used = false;
      for (int d = 0; d < rg->buf->ndim && !used; d++) used = ir_expr_uses_var(rg->min[d], vars[k]);
      if (!used) unused++;
    }
  }
  return unused >= 1;
}

bool space_is_reduction(sched *s, const dg_block *b) {
  dg_block *scope = space_scope(s, b);
  dg_status tmp;
  return scope && sched_block_check_reduction(scope, b, &tmp);
}

bool space_is_complete(sched *s, const dg_block *b) {
  dg_block *scope = space_scope(s, b);
  dg_status tmp;
  return scope && sched_block_check_complete(scope, b, &tmp);
}

void space_consumers(sched *s, const dg_block *b, sched_blocks *out) {
  dg_block *scope = space_scope(s, b);
  if (scope) sched_scope_consumers(scope, b, out);
}

void space_producers(sched *s, const dg_block *b, sched_blocks *out) {
  dg_block *scope = space_scope(s, b);
  if (scope) sched_scope_producers(scope, b, out);
}

bool space_is_output(sched *s, const dg_block *b) {
  dg_block *scope = space_scope(s, b);
  return scope && sched_block_output(s->f, scope, b) != NULL;
}

/* ---- shared recorded steps ------------------------------------------------------------ */

int space_fuse(sched *s, const int *loops, int n, dg_status *st) {
  if (n < 1) {
    dg_fail(st, DG_ERR_INVALID, "Fuse: no loops to fuse");
    return -1;
  }
  int r = sched_fuse(s, loops, n, true, st);
  if (r < 0 && n == 1 && space_loop(s, loops[0])) {
    dg_status_ok(st);
    return loops[0];
  }
  return r;
}

int space_sample_uniform(sched *s, const int64_t *cands, int n, dg_status *st) {
  double probs[64];
  DG_ASSERT(n > 0 && n <= 64);
  for (int i = 0; i < n; i++) probs[i] = 1.0 / n;
  return sched_sample_categorical(s, cands, probs, n, NULL, st);
}

/* ---- generation ------------------------------------------------------------------------ */

typedef DG_VEC(const char *) name_list;

static void post_order(dg_stmt *s, name_list *names) {
  if (!s) return;
  switch (s->kind) {
    case DG_STMT_FOR: post_order(s->body, names); break;
    case DG_STMT_SEQ:
      for (int i = 0; i < s->n; i++) post_order(s->stmts[i], names);
      break;
    case DG_STMT_IF:
      post_order(s->then_s, names);
      post_order(s->else_s, names);
      break;
    case DG_STMT_BLOCK:
      post_order(s->block->body, names);
      DG_VEC_PUSH(names, s->block->name);
      break;
    case DG_STMT_STORE: break;
  }
}

typedef struct {
  sched *s;
  int left; /* blocks not yet visited: blocks[0 .. left) */
} space_item;

enum { SPACE_MAX_SKETCHES = 256 };

void search_space_free(search_space *sp) {
  for (int i = 0; i < sp->n; i++) sched_trace_free(sp->sketches[i]);
  free(sp->sketches);
  sp->sketches = NULL;
  sp->n = 0;
}

bool search_space_generate(const dg_func *f, const search_space_opts *o, search_space *out,
                           dg_status *st) {
  dg_status_ok(st);
  memset(out, 0, sizeof *out);
  static const search_rule all[] = {
#define X(e, name) SEARCH_RULE_##e,
      SEARCH_RULE_LIST(X)
#undef X
  };
  const search_rule *rules = o && o->rules ? o->rules : all;
  int n_rules = o && o->rules ? o->n_rules : (int)DG_ARRAY_LEN(all);
  space_ctx c = {.f = f,
                 .t = o && o->target ? o->target : &search_target_sm90,
                 .seed = o ? o->seed : 0,
                 .no_software_pipeline = o && o->no_software_pipeline};
  sched *s0 = sched_new(f, c.seed);
  name_list names = {0};
  post_order(sched_func(s0)->body, &names);
  int *blocks = dg_malloc(sizeof(int) * (names.len ? names.len : 1));
  for (size_t i = 0; i < names.len; i++) {
    blocks[i] = sched_get_block(s0, names.data[i], sched_func(s0)->name, st);
    if (blocks[i] < 0) {
      dg_status_prefix(st, "design space");
      DG_VEC_FREE(&names);
      free(blocks);
      sched_free(s0);
      return false;
    }
  }
  int n_blocks = (int)names.len;
  DG_VEC_FREE(&names);

  DG_VEC(sched *) result = {0};
  DG_VEC(space_item) stack = {0};
  DG_VEC_PUSH(&result, s0);
  bool ok = true;
  for (int r = 0; r < n_rules && ok; r++) {
    DG_ASSERT(rules[r] >= 0 && rules[r] < SEARCH_RULE_COUNT);
    space_rule_fn fn = rule_fns[rules[r]];
    for (size_t i = 0; i < result.len; i++) DG_VEC_PUSH(&stack, ((space_item){result.data[i], n_blocks}));
    result.len = 0;
    while (stack.len && ok) {
      space_item it = stack.data[--stack.len];
      if (it.left == 0) {
        DG_VEC_PUSH(&result, it.s);
        continue;
      }
      int b = blocks[--it.left];
      dg_block *blk = space_block(it.s, b);
      if (!blk || ir_anns_get(&blk->anns, "schedule_rule")) {
        DG_VEC_PUSH(&stack, it);
        continue;
      }
      int mark = sched_get_trace(it.s)->n;
      sched *outs[SPACE_MAX_OUT];
      dg_status rst;
      dg_status_ok(&rst);
      int n = fn(&c, it.s, b, outs, &rst);
      if (n < 0) {
        /* undo: the schedule as it was before the rule */
        if (!out->n_undone)
          snprintf(out->undone, sizeof out->undone, "%s on block %.60s: %.150s",
                   rule_names[rules[r]], blk->name, rst.msg);
        out->n_undone++;
        sched *back = space_replay_prefix(f, c.seed + (uint64_t)++c.n_copies,
                                          sched_get_trace(it.s), mark, st);
        if (!back) {
          ok = false;
          sched_free(it.s);
          break;
        }
        back->rng = it.s->rng;
        sched_free(it.s);
        DG_VEC_PUSH(&stack, ((space_item){back, it.left}));
        continue;
      }
      DG_ASSERT(n >= 1 && n <= SPACE_MAX_OUT);
      for (int i = 0; i < n; i++) DG_VEC_PUSH(&stack, ((space_item){outs[i], it.left}));
      if (stack.len + result.len > SPACE_MAX_SKETCHES) {
        dg_fail(st, DG_ERR_INVALID, "design space: more than %d sketches at rule %s",
                SPACE_MAX_SKETCHES, rule_names[rules[r]]);
        ok = false;
      }
    }
  }
  out->n_fallbacks = c.n_fallbacks;
  memcpy(out->fallback, c.fallback, sizeof out->fallback);
  if (ok) {
    out->sketches = dg_malloc(sizeof(sched_trace *) * (result.len ? result.len : 1));
    for (size_t i = 0; i < result.len; i++)
      out->sketches[out->n++] = sched_trace_clone(sched_get_trace(result.data[i]));
  }
  for (size_t i = 0; i < result.len; i++) sched_free(result.data[i]);
  for (size_t i = 0; i < stack.len; i++) sched_free(stack.data[i].s);
  DG_VEC_FREE(&result);
  DG_VEC_FREE(&stack);
  free(blocks);
  return ok;
}

bool search_space_cuda(void *ctx, const dg_func *f, sched_trace ***out, int *n, dg_status *st) {
  search_space sp;
  if (!search_space_generate(f, ctx, &sp, st)) return false;
  *out = sp.sketches;
  *n = sp.n;
  return true;
}

/* ---- samples ------------------------------------------------------------------------------ */

sched *search_sample(const dg_func *f, const search_space *sp, search_postprocs *pp,
                     dg_rng *rng, int64_t *replay_failed, dg_status *st) {
  dg_status_ok(st);
  if (sp->n == 0) {
    dg_fail(st, DG_ERR_INVALID, "sample: the design space has no sketch");
    return NULL;
  }
  int k = (int)dg_rng_below(rng, (uint64_t)sp->n);
  sched_trace *t = sched_trace_simplified(sp->sketches[k], true);
  sched *s = sched_new(f, dg_rng_next(rng));
  bool ok = sched_replay(s, t, true, true, st);
  sched_trace_free(t);
  if (!ok) {
    dg_status_prefix(st, "sample of sketch %d", k);
    if (replay_failed) (*replay_failed)++;
    sched_free(s);
    return NULL;
  }
  if (pp && !search_postproc_cuda(s, pp, st)) {
    sched_free(s);
    return NULL;
  }
  return s;
}
