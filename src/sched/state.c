/* state.c: the schedule's state: its kernel copy, the handle table, and
 * locating nodes in the kernel tree (there are no parent pointers: a path is
 * found by walking down from the body, which is cheap at kernel sizes). */
#include <stdlib.h>
#include <string.h>

#include "sched/sched_impl.h"

sched *sched_new(const dg_func *f, uint64_t seed) {
  sched *s = dg_calloc(1, sizeof *s);
  s->f = ir_func_clone(f);
  s->trace = sched_trace_new();
  dg_rng_seed(&s->rng, seed);
  return s;
}

void sched_free(sched *s) {
  if (!s) return;
  ir_func_free(s->f);
  sched_trace_free(s->trace);
  free(s->rvs);
  free(s);
}

dg_func *sched_func(sched *s) { return s->f; }
const sched_trace *sched_get_trace(const sched *s) { return s->trace; }
const char *sched_error_brief(const sched *s) { return s->brief; }

/* ---- locating nodes -------------------------------------------------------- */

static bool find(dg_stmt **slot, const void *target, bool by_block, sched_path *p) {
  dg_stmt *s = *slot;
  if (!s) return false;
  if (p->n >= (int)DG_ARRAY_LEN(p->stmts)) return false;
  p->stmts[p->n] = s;
  p->slots[p->n] = slot;
  p->n++;
  if (by_block ? (s->kind == DG_STMT_BLOCK && s->block == target) : s == target) return true;
  switch (s->kind) {
    case DG_STMT_FOR:
      if (find(&s->body, target, by_block, p)) return true;
      break;
    case DG_STMT_SEQ:
      for (int i = 0; i < s->n; i++)
        if (find(&s->stmts[i], target, by_block, p)) return true;
      break;
    case DG_STMT_BLOCK:
      if (find(&s->block->init, target, by_block, p)) return true;
      if (find(&s->block->body, target, by_block, p)) return true;
      break;
    case DG_STMT_IF:
      if (find(&s->then_s, target, by_block, p)) return true;
      if (find(&s->else_s, target, by_block, p)) return true;
      break;
    case DG_STMT_STORE: break;
  }
  p->n--;
  return false;
}

bool sched_locate_stmt(const dg_func *f, const dg_stmt *node, sched_path *p) {
  p->n = 0;
  dg_func *mf = (dg_func *)f;
  return node && find(&mf->body, node, false, p);
}

bool sched_locate_block(const dg_func *f, const dg_block *b, sched_path *p) {
  p->n = 0;
  dg_func *mf = (dg_func *)f;
  return b && find(&mf->body, b, true, p);
}

dg_stmt *sched_block_realize(const dg_func *f, const dg_block *b) {
  sched_path p;
  return sched_locate_block(f, b, &p) ? p.stmts[p.n - 1] : NULL;
}

dg_block *sched_path_parent_block(const sched_path *p, int i) {
  for (int k = i - 1; k >= 0; k--)
    if (p->stmts[k]->kind == DG_STMT_BLOCK) return p->stmts[k]->block;
  return NULL;
}

/* ---- handles ----------------------------------------------------------------- */

static int rv_new(sched *s, sched_rv rv) {
  if (s->n_rvs == s->cap_rvs) {
    s->cap_rvs = s->cap_rvs ? 2 * s->cap_rvs : 64;
    s->rvs = dg_realloc(s->rvs, sizeof(sched_rv) * (size_t)s->cap_rvs);
  }
  s->rvs[s->n_rvs] = rv;
  return s->n_rvs++;
}

int sched_rv_new_block(sched *s, dg_block *b) {
  return rv_new(s, (sched_rv){.kind = SCHED_RV_BLOCK, .block = b});
}
int sched_rv_new_loop(sched *s, dg_stmt *loop) {
  return rv_new(s, (sched_rv){.kind = SCHED_RV_LOOP, .loop = loop});
}
int sched_rv_new_special_loop(sched *s, int special) {
  return rv_new(s, (sched_rv){.kind = SCHED_RV_LOOP, .special = special});
}
int sched_rv_new_expr(sched *s, int64_t v) {
  return rv_new(s, (sched_rv){.kind = SCHED_RV_EXPR, .value = v});
}

sched_rv_kind sched_rv_get_kind(const sched *s, int rv) {
  DG_ASSERT(rv >= 0 && rv < s->n_rvs);
  return s->rvs[rv].kind;
}

bool sched_rv_value(const sched *s, int rv, int64_t *out) {
  if (rv < 0 || rv >= s->n_rvs || s->rvs[rv].kind != SCHED_RV_EXPR) return false;
  *out = s->rvs[rv].value;
  return true;
}

static const char prefix[] = {'b', 'l', 'v'};

const char *sched_rv_label(sched *s, int rv) {
  if (rv < 0 || rv >= s->n_rvs) return dg_arena_printf(s->f->arena, "#%d", rv);
  sched_rv *r = &s->rvs[rv];
  switch (r->kind) {
    case SCHED_RV_BLOCK: return dg_arena_printf(s->f->arena, "b%d (%s)", rv, r->block->name);
    case SCHED_RV_LOOP:
      if (!r->loop) return dg_arena_printf(s->f->arena, "l%d (%s)", rv, r->special == -1 ? "root" : "inline");
      return dg_arena_printf(s->f->arena, "l%d (%s)", rv, r->loop->loop_var->name);
    case SCHED_RV_EXPR:
      return dg_arena_printf(s->f->arena, "v%d (=%lld)", rv, (long long)r->value);
  }
  return "?";
}

static bool rv_check(sched *s, const sched_val *v, sched_rv_kind kind, const char *what,
                     dg_status *st) {
  static const char *const kname[] = {"block", "loop", "integer"};
  if (v->kind != SV_RV)
    return dg_fail(st, DG_ERR_INVALID, "%s must be a %s handle", what, kname[kind]);
  if (v->i < 0 || v->i >= s->n_rvs)
    return dg_fail(st, DG_ERR_INVALID, "%s: unknown handle %c%lld", what, prefix[kind], (long long)v->i);
  if (s->rvs[v->i].kind != kind)
    return dg_fail(st, DG_ERR_INVALID, "%s: %s is a %s handle, expected a %s", what,
                   sched_rv_label(s, (int)v->i), kname[s->rvs[v->i].kind], kname[kind]);
  return true;
}

dg_block *sched_rv_block(sched *s, const sched_val *v, const char *what, dg_status *st) {
  if (!rv_check(s, v, SCHED_RV_BLOCK, what, st)) return NULL;
  dg_block *b = s->rvs[v->i].block;
  sched_path p;
  if (!sched_locate_block(s->f, b, &p)) {
    dg_fail(st, DG_ERR_INVALID, "%s: block %s is stale (no longer in the kernel)", what,
            sched_rv_label(s, (int)v->i));
    return NULL;
  }
  return b;
}

bool sched_rv_stale(sched *s, int rv) {
  if (rv < 0 || rv >= s->n_rvs) return false;
  const sched_rv *r = &s->rvs[rv];
  sched_path p;
  if (r->kind == SCHED_RV_BLOCK) return !sched_locate_block(s->f, r->block, &p);
  if (r->kind == SCHED_RV_LOOP && r->loop) return !sched_locate_stmt(s->f, r->loop, &p);
  return false;
}

dg_stmt *sched_rv_loop(sched *s, const sched_val *v, const char *what, dg_status *st) {
  if (!rv_check(s, v, SCHED_RV_LOOP, what, st)) return NULL;
  dg_stmt *l = s->rvs[v->i].loop;
  if (!l) {
    dg_fail(st, DG_ERR_INVALID, "%s: %s is a location mark, not a loop", what,
            sched_rv_label(s, (int)v->i));
    return NULL;
  }
  sched_path p;
  if (!sched_locate_stmt(s->f, l, &p)) {
    dg_fail(st, DG_ERR_INVALID, "%s: loop %s is stale (split, fused or removed by an earlier step)",
            what, sched_rv_label(s, (int)v->i));
    return NULL;
  }
  return l;
}

bool sched_val_int(sched *s, const sched_val *v, const char *what, int64_t *out,
                   dg_status *st) {
  if (v->kind == SV_INT) {
    *out = v->i;
    return true;
  }
  if (!rv_check(s, v, SCHED_RV_EXPR, what, st)) return false;
  *out = s->rvs[v->i].value;
  return true;
}

/* ---- fresh names --------------------------------------------------------------- */

typedef struct {
  const char *name;
  int what; /* 0 var, 1 buffer, 2 block */
  bool found;
} name_ctx;

static bool expr_has_var_name(const dg_expr *e, const char *name) {
  if (!e) return false;
  if (e->kind == DG_EXPR_VAR) return strcmp(e->var->name, name) == 0;
  if (expr_has_var_name(e->a, name) || expr_has_var_name(e->b, name) ||
      expr_has_var_name(e->c, name))
    return true;
  for (int i = 0; i < e->nargs; i++)
    if (expr_has_var_name(e->args[i], name)) return true;
  return false;
}

static void scan_names(const dg_stmt *s, name_ctx *c) {
  if (!s || c->found) return;
  switch (s->kind) {
    case DG_STMT_FOR:
      if (c->what == 0 && strcmp(s->loop_var->name, c->name) == 0) c->found = true;
      scan_names(s->body, c);
      break;
    case DG_STMT_SEQ:
      for (int i = 0; i < s->n; i++) scan_names(s->stmts[i], c);
      break;
    case DG_STMT_BLOCK: {
      const dg_block *b = s->block;
      if (c->what == 2 && strcmp(b->name, c->name) == 0) c->found = true;
      if (c->what == 0)
        for (int i = 0; i < b->n_iters; i++)
          if (strcmp(b->iters[i].var->name, c->name) == 0) c->found = true;
      if (c->what == 1)
        for (int i = 0; i < b->n_allocs; i++)
          if (strcmp(b->allocs[i]->name, c->name) == 0) c->found = true;
      scan_names(b->init, c);
      scan_names(b->body, c);
      break;
    }
    case DG_STMT_IF:
      scan_names(s->then_s, c);
      scan_names(s->else_s, c);
      break;
    case DG_STMT_STORE:
      if (c->what == 0 && expr_has_var_name(s->value, c->name)) c->found = true;
      break;
  }
}

static bool name_taken(dg_func *f, const char *name, int what) {
  if (what == 1)
    for (int i = 0; i < f->n_params; i++)
      if (strcmp(f->params[i]->name, name) == 0) return true;
  name_ctx c = {name, what, false};
  scan_names(f->body, &c);
  return c.found;
}

static const char *fresh(dg_func *f, const char *base, int what) {
  if (!name_taken(f, base, what)) return dg_arena_strdup(f->arena, base);
  for (int k = 1;; k++) {
    const char *n = dg_arena_printf(f->arena, "%s_%d", base, k);
    if (!name_taken(f, n, what)) return n;
  }
}

const char *sched_fresh_var_name(dg_func *f, const char *base) { return fresh(f, base, 0); }
const char *sched_fresh_buffer_name(dg_func *f, const char *base) { return fresh(f, base, 1); }
const char *sched_fresh_block_name(dg_func *f, const char *base) { return fresh(f, base, 2); }

void prim_out(prim_call *c, int rv) {
  DG_ASSERT(c->n_out < c->max_out);
  c->out[c->n_out++] = rv;
}
