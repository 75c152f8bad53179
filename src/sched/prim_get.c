/* prim_get.c: the pure lookups: GetBlock, GetLoops, GetChildBlocks,
 * GetProducers, GetConsumers (TVM's get_block.cc semantics: loops up to the
 * nearest enclosing block; producers/consumers by read-after-write within
 * the block's scope, in program order). */
#include <stdlib.h>
#include <string.h>

#include "sched/sched_impl.h"

typedef struct {
  const char *name;
  dg_block *found;
  int count;
} name_find;

static bool by_name(dg_block *b, dg_stmt *s, void *ctx) {
  (void)s;
  name_find *c = ctx;
  if (strcmp(b->name, c->name) == 0) {
    if (!c->found) c->found = b;
    c->count++;
  }
  return true;
}

bool prim_get_block(prim_call *c, dg_status *st) {
  const sched_val *name = &c->inst->attrs[0], *func = &c->inst->attrs[1];
  if (name->kind != SV_STR) return dg_fail(st, DG_ERR_INVALID, "block name must be a string");
  if (func->kind != SV_STR) return dg_fail(st, DG_ERR_INVALID, "function name must be a string");
  dg_func *f = c->s->f;
  if (strcmp(func->s, f->name) != 0)
    return dg_fail(st, DG_ERR_INVALID, "no function '%s' (the kernel is '%s')", func->s, f->name);
  name_find nf = {name->s, NULL, 0};
  ir_visit_blocks(f->body, by_name, &nf);
  if (!nf.found) return dg_fail(st, DG_ERR_INVALID, "no block named '%s'", name->s);
  if (nf.count > 1)
    return dg_fail(st, DG_ERR_INVALID, "%d blocks are named '%s'", nf.count, name->s);
  prim_out(c, sched_rv_new_block(c->s, nf.found));
  return true;
}

bool prim_get_loops(prim_call *c, dg_status *st) {
  dg_block *b = sched_rv_block(c->s, &c->inst->inputs[0], "block", st);
  if (!b) return false;
  sched_path p;
  DG_ASSERT(sched_locate_block(c->s->f, b, &p));
  int first = p.n - 1;
  while (first > 0 && p.stmts[first - 1]->kind != DG_STMT_BLOCK) first--;
  for (int i = first; i < p.n - 1; i++)
    if (p.stmts[i]->kind == DG_STMT_FOR) prim_out(c, sched_rv_new_loop(c->s, p.stmts[i]));
  return true;
}

int sched_block_loop_count(sched *s, int rv) {
  if (rv < 0 || rv >= s->n_rvs || s->rvs[rv].kind != SCHED_RV_BLOCK) return -1;
  sched_val v = {.kind = SV_RV, .i = rv};
  dg_status tmp;
  dg_block *b = sched_rv_block(s, &v, "block", &tmp);
  sched_path p;
  if (!b || !sched_locate_block(s->f, b, &p)) return -1;
  int first = p.n - 1, n = 0;
  while (first > 0 && p.stmts[first - 1]->kind != DG_STMT_BLOCK) first--;
  for (int i = first; i < p.n - 1; i++) n += p.stmts[i]->kind == DG_STMT_FOR;
  return n;
}

static void child_blocks(dg_stmt *s, prim_call *c) {
  if (!s) return;
  switch (s->kind) {
    case DG_STMT_FOR: child_blocks(s->body, c); break;
    case DG_STMT_SEQ:
      for (int i = 0; i < s->n; i++) child_blocks(s->stmts[i], c);
      break;
    case DG_STMT_IF:
      child_blocks(s->then_s, c);
      child_blocks(s->else_s, c);
      break;
    case DG_STMT_BLOCK: prim_out(c, sched_rv_new_block(c->s, s->block)); break;
    case DG_STMT_STORE: break;
  }
}

bool prim_get_child_blocks(prim_call *c, dg_status *st) {
  const sched_val *v = &c->inst->inputs[0];
  if (v->kind == SV_RV && v->i >= 0 && v->i < c->s->n_rvs &&
      c->s->rvs[v->i].kind == SCHED_RV_LOOP) {
    dg_stmt *l = sched_rv_loop(c->s, v, "loop", st);
    if (!l) return false;
    child_blocks(l->body, c);
    return true;
  }
  dg_block *b = sched_rv_block(c->s, v, "block or loop", st);
  if (!b) return false;
  child_blocks(b->body, c);
  return true;
}

/* The blocks of a scope (the children of its block, program order). */
typedef struct {
  dg_block *items[1024];
  int n;
} block_list;

static void scope_blocks(dg_stmt *s, block_list *l) {
  if (!s) return;
  switch (s->kind) {
    case DG_STMT_FOR: scope_blocks(s->body, l); break;
    case DG_STMT_SEQ:
      for (int i = 0; i < s->n; i++) scope_blocks(s->stmts[i], l);
      break;
    case DG_STMT_IF:
      scope_blocks(s->then_s, l);
      scope_blocks(s->else_s, l);
      break;
    case DG_STMT_BLOCK:
      if (l->n < (int)DG_ARRAY_LEN(l->items)) l->items[l->n++] = s->block;
      break;
    case DG_STMT_STORE: break;
  }
}

static bool reads_buf(const dg_block *b, const dg_buffer *buf) {
  for (int i = 0; i < b->n_reads; i++)
    if (b->reads[i].buf == buf) return true;
  return false;
}

static bool raw_dep(const dg_block *producer, const dg_block *consumer) {
  for (int i = 0; i < producer->n_writes; i++)
    if (reads_buf(consumer, producer->writes[i].buf)) return true;
  return false;
}

/* The blocks of b's scope that it reads from (producers) or that read from
 * it, in program order, into out (the root has none). */
static void neighbours(sched *s, dg_block *b, bool producers, block_list *out) {
  out->n = 0;
  sched_path p;
  DG_ASSERT(sched_locate_block(s->f, b, &p));
  dg_block *scope = sched_path_parent_block(&p, p.n - 1);
  if (!scope) return;
  block_list *l = dg_calloc(1, sizeof *l);
  scope_blocks(scope->body, l);
  int self = -1;
  for (int i = 0; i < l->n; i++)
    if (l->items[i] == b) self = i;
  DG_ASSERT(self >= 0);
  for (int i = producers ? 0 : self + 1; i < (producers ? self : l->n); i++)
    if (producers ? raw_dep(l->items[i], b) : raw_dep(b, l->items[i])) out->items[out->n++] = l->items[i];
  free(l);
}

static bool deps(prim_call *c, bool producers, dg_status *st) {
  dg_block *b = sched_rv_block(c->s, &c->inst->inputs[0], "block", st);
  if (!b) return false;
  block_list *l = dg_calloc(1, sizeof *l);
  neighbours(c->s, b, producers, l);
  for (int i = 0; i < l->n; i++) prim_out(c, sched_rv_new_block(c->s, l->items[i]));
  free(l);
  return true;
}

int sched_block_neighbour_count(sched *s, int rv, bool producers) {
  if (rv < 0 || rv >= s->n_rvs || s->rvs[rv].kind != SCHED_RV_BLOCK) return -1;
  sched_val v = {.kind = SV_RV, .i = rv};
  dg_status tmp;
  dg_block *b = sched_rv_block(s, &v, "block", &tmp);
  if (!b) return -1;
  block_list *l = dg_calloc(1, sizeof *l);
  neighbours(s, b, producers, l);
  int n = l->n;
  free(l);
  return n;
}

bool prim_get_producers(prim_call *c, dg_status *st) { return deps(c, true, st); }
bool prim_get_consumers(prim_call *c, dg_status *st) { return deps(c, false, st); }

int sched_block_region_count(sched *s, int rv, bool write) {
  if (rv < 0 || rv >= s->n_rvs || s->rvs[rv].kind != SCHED_RV_BLOCK) return -1;
  sched_val v = {.kind = SV_RV, .i = rv};
  dg_status tmp;
  dg_block *b = sched_rv_block(s, &v, "block", &tmp);
  return !b ? -1 : write ? b->n_writes : b->n_reads;
}
