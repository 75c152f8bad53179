/* stmt.c: lowered statements: construction, substitution, queries, fresh
 * names and the readable printing of a program (lower_print).
 *
 * Nodes live in the program function's arena. Substitution builds new
 * nodes and shares unchanged subtrees, so a statement is never mutated
 * after another one refers to it.
 */
#include <inttypes.h>
#include <string.h>

#include "lower/lower_impl.h"

/* ---- construction -------------------------------------------------------- */

lw_stmt *lw_copy(dg_func *f, const lw_stmt *s) {
  lw_stmt *c = DG_ANEW(f->arena, lw_stmt);
  *c = *s;
  return c;
}

static lw_stmt *new_stmt(dg_func *f, lw_stmt_kind k) {
  lw_stmt *s = DG_ANEW(f->arena, lw_stmt);
  s->kind = k;
  s->unroll_max_step = -1;
  s->unroll_explicit = -1;
  s->lanes = 1;
  return s;
}

lw_stmt *lw_seq(dg_func *f, lw_stmt **stmts, int n) {
  int total = 0;
  for (int i = 0; i < n; i++) {
    if (!stmts[i]) continue;
    total += stmts[i]->kind == LW_SEQ ? stmts[i]->n : 1;
  }
  if (total == 1)
    for (int i = 0; i < n; i++)
      if (stmts[i] && stmts[i]->kind != LW_SEQ) return stmts[i];
  lw_stmt *s = new_stmt(f, LW_SEQ);
  s->stmts = DG_ANEWN(f->arena, lw_stmt *, total > 0 ? total : 1);
  for (int i = 0; i < n; i++) {
    if (!stmts[i]) continue;
    if (stmts[i]->kind == LW_SEQ)
      for (int j = 0; j < stmts[i]->n; j++) s->stmts[s->n++] = stmts[i]->stmts[j];
    else
      s->stmts[s->n++] = stmts[i];
  }
  return s;
}

lw_stmt *lw_for(dg_func *f, dg_var *v, int64_t extent, lw_loop_kind k, lw_stmt *body) {
  lw_stmt *s = new_stmt(f, LW_FOR);
  s->var = v;
  s->extent = extent;
  s->loop_kind = k;
  s->body = body;
  return s;
}

lw_stmt *lw_if(dg_func *f, dg_expr *cond, lw_stmt *then_s, lw_stmt *else_s) {
  lw_stmt *s = new_stmt(f, LW_IF);
  s->cond = cond;
  s->then_s = then_s;
  s->else_s = else_s;
  return s;
}

lw_stmt *lw_store(dg_func *f, dg_buffer *b, dg_expr **idx, int n, dg_expr *value) {
  lw_stmt *s = new_stmt(f, LW_STORE);
  s->buf = b;
  s->idx = DG_ANEWN(f->arena, dg_expr *, n > 0 ? n : 1);
  if (n) memcpy(s->idx, idx, sizeof(*idx) * (size_t)n);
  s->nidx = n;
  s->value = value;
  return s;
}

lw_stmt *lw_barrier(dg_func *f) { return new_stmt(f, LW_BARRIER); }

lw_stmt *lw_async_commit(dg_func *f) { return new_stmt(f, LW_ASYNC_COMMIT); }

lw_stmt *lw_async_wait(dg_func *f, int64_t count, dg_buffer *const *bufs, int n) {
  lw_stmt *s = new_stmt(f, LW_ASYNC_WAIT);
  s->wait_count = count;
  s->wait_bufs = DG_ANEWN(f->arena, dg_buffer *, n > 0 ? n : 1);
  if (n) memcpy(s->wait_bufs, bufs, sizeof(*bufs) * (size_t)n);
  s->n_wait_bufs = n;
  return s;
}

lw_stmt *lw_wmma(dg_func *f, const dg_intrin *in, const char *block, lw_stmt *body) {
  lw_stmt *s = new_stmt(f, LW_WMMA);
  s->intrin = in;
  s->wmma_block = block;
  s->body = body;
  return s;
}

lw_stmt *lw_with_unroll(dg_func *f, const lw_stmt *s, int64_t max_step, int expl) {
  if (!s || (max_step < 0 && expl < 0)) return (lw_stmt *)s;
  lw_stmt *c;
  switch (s->kind) {
    case LW_SEQ:
      c = lw_copy(f, s);
      c->stmts = DG_ANEWN(f->arena, lw_stmt *, s->n > 0 ? s->n : 1);
      for (int i = 0; i < s->n; i++) c->stmts[i] = lw_with_unroll(f, s->stmts[i], max_step, expl);
      return c;
    case LW_IF:
      c = lw_copy(f, s);
      c->then_s = lw_with_unroll(f, s->then_s, max_step, expl);
      c->else_s = lw_with_unroll(f, s->else_s, max_step, expl);
      return c;
    case LW_FOR:
      c = lw_copy(f, s);
      if (c->unroll_max_step < 0) c->unroll_max_step = max_step;
      if (c->unroll_explicit < 0) c->unroll_explicit = expl;
      return c;
    default: return (lw_stmt *)s;
  }
}

/* ---- substitution and queries -------------------------------------------- */

/* Substitution, simplified where it changed something (constants from
 * unrolling and vthread copies fold away). */
dg_expr *lw_subst_expr(dg_func *f, dg_expr *e, const dg_subst *map, int n) {
  dg_expr *x = ir_subst_expr(f, e, map, n);
  return x == e ? e : ir_simplify(f, x, NULL);
}

lw_stmt *lw_subst(dg_func *f, const lw_stmt *s, const dg_subst *map, int n) {
  if (!s) return NULL;
  lw_stmt *c = lw_copy(f, s);
  switch (s->kind) {
    case LW_SEQ:
      c->stmts = DG_ANEWN(f->arena, lw_stmt *, s->n > 0 ? s->n : 1);
      for (int i = 0; i < s->n; i++) c->stmts[i] = lw_subst(f, s->stmts[i], map, n);
      break;
    case LW_FOR: c->body = lw_subst(f, s->body, map, n); break;
    case LW_IF:
      c->cond = lw_subst_expr(f, s->cond, map, n);
      c->then_s = lw_subst(f, s->then_s, map, n);
      c->else_s = lw_subst(f, s->else_s, map, n);
      break;
    case LW_STORE:
      c->idx = DG_ANEWN(f->arena, dg_expr *, s->nidx > 0 ? s->nidx : 1);
      for (int i = 0; i < s->nidx; i++) c->idx[i] = lw_subst_expr(f, s->idx[i], map, n);
      c->value = lw_subst_expr(f, s->value, map, n);
      break;
    case LW_BARRIER:
    case LW_ALLREDUCE:
    case LW_ASYNC_COMMIT:
    case LW_ASYNC_WAIT: break;
    case LW_WMMA:
      for (int i = 0; i < s->wmma_n; i++) {
        int nd = s->wmma_buf[i]->ndim;
        c->wmma_origin[i] = DG_ANEWN(f->arena, dg_expr *, nd > 0 ? nd : 1);
        for (int d = 0; d < nd; d++)
          c->wmma_origin[i][d] = lw_subst_expr(f, s->wmma_origin[i][d], map, n);
        if (s->wmma_frag[i]) c->wmma_frag[i] = lw_subst_expr(f, s->wmma_frag[i], map, n);
      }
      c->body = lw_subst(f, s->body, map, n);
      break;
  }
  return c;
}

bool lw_uses_var(const lw_stmt *s, const dg_var *v) {
  if (!s) return false;
  switch (s->kind) {
    case LW_SEQ:
      for (int i = 0; i < s->n; i++)
        if (lw_uses_var(s->stmts[i], v)) return true;
      return false;
    case LW_FOR: return lw_uses_var(s->body, v);
    case LW_IF:
      return ir_expr_uses_var(s->cond, v) || lw_uses_var(s->then_s, v) ||
             lw_uses_var(s->else_s, v);
    case LW_STORE:
      for (int i = 0; i < s->nidx; i++)
        if (ir_expr_uses_var(s->idx[i], v)) return true;
      return ir_expr_uses_var(s->value, v);
    case LW_BARRIER:
    case LW_ALLREDUCE:
    case LW_ASYNC_COMMIT:
    case LW_ASYNC_WAIT: return false;
    case LW_WMMA:
      for (int i = 0; i < s->wmma_n; i++) {
        for (int d = 0; d < s->wmma_buf[i]->ndim; d++)
          if (ir_expr_uses_var(s->wmma_origin[i][d], v)) return true;
        if (s->wmma_frag[i] && ir_expr_uses_var(s->wmma_frag[i], v)) return true;
      }
      return lw_uses_var(s->body, v);
  }
  return false;
}

bool lw_expr_reads_buf(const dg_expr *e, const dg_buffer *b) {
  if (!e) return false;
  if (e->kind == DG_EXPR_LOAD && e->buf == b) return true;
  if (e->kind == DG_EXPR_LOAD || e->kind == DG_EXPR_CALL) {
    for (int i = 0; i < e->nargs; i++)
      if (lw_expr_reads_buf(e->args[i], b)) return true;
    return false;
  }
  return lw_expr_reads_buf(e->a, b) || lw_expr_reads_buf(e->b, b) || lw_expr_reads_buf(e->c, b);
}

bool lower_stmt_has_barrier(const lw_stmt *s) {
  if (!s) return false;
  switch (s->kind) {
    case LW_SEQ:
      for (int i = 0; i < s->n; i++)
        if (lower_stmt_has_barrier(s->stmts[i])) return true;
      return false;
    case LW_FOR: return lower_stmt_has_barrier(s->body);
    case LW_IF: return lower_stmt_has_barrier(s->then_s) || lower_stmt_has_barrier(s->else_s);
    case LW_STORE:
    case LW_WMMA:
    case LW_ASYNC_COMMIT:
    case LW_ASYNC_WAIT: return false;
    case LW_BARRIER:
    case LW_ALLREDUCE: return true;
  }
  return false;
}

dg_expr *lw_expr_rebuf(dg_func *f, dg_expr *e, const dg_buffer *from, dg_buffer *to,
                       lw_index_fn fn, void *ctx) {
  if (!e) return NULL;
  switch (e->kind) {
    case DG_EXPR_INT:
    case DG_EXPR_FLOAT:
    case DG_EXPR_VAR: return e;
    case DG_EXPR_LOAD:
    case DG_EXPR_CALL: {
      bool changed = false;
      dg_expr **args = DG_ANEWN(f->arena, dg_expr *, e->nargs > 0 ? e->nargs : 1);
      for (int i = 0; i < e->nargs; i++) {
        args[i] = lw_expr_rebuf(f, e->args[i], from, to, fn, ctx);
        changed |= args[i] != e->args[i];
      }
      if (e->kind == DG_EXPR_LOAD && e->buf == from) {
        dg_expr *c = ir_expr_copy(f, e);
        c->buf = to;
        if (fn) {
          c->args = fn(f, args, e->nargs, ctx);
          c->nargs = to->ndim;
        } else {
          c->args = args;
        }
        return c;
      }
      if (!changed) return e;
      dg_expr *c = ir_expr_copy(f, e);
      c->args = args;
      return c;
    }
    default: {
      dg_expr *a = lw_expr_rebuf(f, e->a, from, to, fn, ctx);
      dg_expr *b = lw_expr_rebuf(f, e->b, from, to, fn, ctx);
      dg_expr *c = lw_expr_rebuf(f, e->c, from, to, fn, ctx);
      if (a == e->a && b == e->b && c == e->c) return e;
      dg_expr *x = ir_expr_copy(f, e);
      x->a = a;
      x->b = b;
      x->c = c;
      return x;
    }
  }
}

dg_expr *lw_flat_index(dg_func *f, const dg_buffer *b, dg_expr *const *idx, int n) {
  DG_ASSERT(n == b->ndim);
  dg_expr *acc = NULL;
  int64_t stride = 1;
  for (int d = n; d-- > 0;) {
    dg_expr *term = idx[d];
    if (stride != 1) term = ir_mul(f, term, ir_int_t(f, stride, term->dtype));
    acc = acc ? ir_add(f, term, acc) : term;
    stride *= b->shape[d];
  }
  return acc ? acc : ir_int(f, 0);
}

/* ---- names ----------------------------------------------------------------- */

struct lw_names {
  DG_VEC(const char *) names;
};

static bool name_taken(const lw_program *p, const char *s) {
  for (size_t i = 0; i < p->names->names.len; i++)
    if (strcmp(p->names->names.data[i], s) == 0) return true;
  return false;
}

void lower_names_add(lw_program *p, const char *s) {
  if (!p->names) p->names = dg_calloc(1, sizeof(*p->names));
  DG_VEC_PUSH(&p->names->names, s);
}

void lower_names_free(lw_program *p) {
  if (!p->names) return;
  DG_VEC_FREE(&p->names->names);
  free(p->names);
  p->names = NULL;
}

const char *lw_fresh_name(lw_program *p, const char *base) {
  if (!p->names) p->names = dg_calloc(1, sizeof(*p->names));
  const char *s = base;
  for (int i = 1; name_taken(p, s); i++) s = dg_arena_printf(p->f->arena, "%s_%d", base, i);
  if (s == base) s = dg_arena_strdup(p->f->arena, base);
  DG_VEC_PUSH(&p->names->names, s);
  return s;
}

/* ---- printing --------------------------------------------------------------- */

static void print_stmt(dg_str *o, const lw_stmt *s, int ind) {
  if (!s) return;
  switch (s->kind) {
    case LW_SEQ:
      for (int i = 0; i < s->n; i++) print_stmt(o, s->stmts[i], ind);
      return;
    case LW_FOR: {
      static const char *const kinds[] = {"", " unrolled", " vectorized", " vthread"};
      dg_str_indent(o, ind);
      dg_str_printf(o, "for %s in %" PRId64 "%s", s->var->name, s->extent, kinds[s->loop_kind]);
      if (s->unroll_max_step >= 0)
        dg_str_printf(o, " auto_unroll(%" PRId64 ", %d)", s->unroll_max_step, s->unroll_explicit);
      if (s->pipe_n > 0) {
        dg_str_puts(o, " pipeline(stage");
        for (int i = 0; i < s->pipe_n; i++) dg_str_printf(o, " %d", s->pipe_stage[i]);
        dg_str_puts(o, ", order");
        for (int i = 0; i < s->pipe_n; i++) dg_str_printf(o, " %d", s->pipe_order[i]);
        dg_str_puts(o, ")");
      }
      dg_str_puts(o, ":\n");
      print_stmt(o, s->body, ind + 2);
      return;
    }
    case LW_IF:
      dg_str_indent(o, ind);
      dg_str_puts(o, "if ");
      ir_print_expr(o, s->cond);
      dg_str_puts(o, ":\n");
      print_stmt(o, s->then_s, ind + 2);
      if (s->else_s) {
        dg_str_indent(o, ind);
        dg_str_puts(o, "else:\n");
        print_stmt(o, s->else_s, ind + 2);
      }
      return;
    case LW_STORE:
      dg_str_indent(o, ind);
      if (s->cp_async) dg_str_puts(o, "cp.async ");
      else if (s->in_async) dg_str_puts(o, "async ");
      if (s->lanes > 1) dg_str_printf(o, "vector(%s in %d) ", s->lane_var->name, s->lanes);
      dg_str_printf(o, "%s[", s->buf->name);
      for (int i = 0; i < s->nidx; i++) {
        if (i) dg_str_puts(o, ", ");
        ir_print_expr(o, s->idx[i]);
      }
      dg_str_puts(o, "] = ");
      ir_print_expr(o, s->value);
      dg_str_putc(o, '\n');
      return;
    case LW_BARRIER:
      dg_str_indent(o, ind);
      dg_str_puts(o, "sync\n");
      return;
    case LW_ASYNC_COMMIT:
      dg_str_indent(o, ind);
      dg_str_puts(o, "async_commit\n");
      return;
    case LW_ASYNC_WAIT:
      dg_str_indent(o, ind);
      dg_str_printf(o, "async_wait %" PRId64 "\n", s->wait_count);
      return;
    case LW_ALLREDUCE:
      dg_str_indent(o, ind);
      dg_str_printf(o, "%s[0] = allreduce(%s, %s[0]) over %s (%" PRId64 ")\n", s->dst->name,
                    dg_expr_kind_name(s->combiner), s->src->name,
                    dg_thread_tag_name(s->red_tag), s->red_extent);
      return;
    case LW_WMMA:
      dg_str_indent(o, ind);
      dg_str_printf(o, "wmma %s(", s->intrin->name);
      for (int i = 0; i < s->wmma_n; i++) {
        dg_str_printf(o, "%s%s[", i ? ", " : "", s->wmma_buf[i]->name);
        for (int d = 0; d < s->wmma_buf[i]->ndim; d++) {
          if (d) dg_str_puts(o, ", ");
          ir_print_expr(o, s->wmma_origin[i][d]);
        }
        dg_str_putc(o, ']');
        if (s->wmma_frag[i]) {
          dg_str_puts(o, " fragment ");
          ir_print_expr(o, s->wmma_frag[i]);
        }
      }
      dg_str_printf(o, ")  # block %s\n", s->wmma_block);
      return;
  }
}

static void print_buf(dg_str *o, const char *what, const dg_buffer *b) {
  dg_str_printf(o, "  %s %s: %s[", what, b->name, dg_dtype_name(b->dtype));
  for (int d = 0; d < b->ndim; d++) dg_str_printf(o, "%s%" PRId64, d ? ", " : "", b->shape[d]);
  dg_str_puts(o, "]\n");
}

char *lower_print(const lw_program *p) {
  dg_str o;
  dg_str_init(&o);
  dg_str_printf(&o, "program %s:\n", p->name);
  for (int i = 0; i < p->n_allocs; i++) print_buf(&o, "device alloc", p->allocs[i]);
  for (int i = 0; i < p->n_kernels; i++) {
    const lw_kernel *k = &p->kernels[i];
    dg_str_printf(&o, "kernel %s grid(%" PRId64 ", %" PRId64 ", %" PRId64 ") block(%" PRId64
                  ", %" PRId64 ", %" PRId64 "):\n",
                  k->name, k->grid[0], k->grid[1], k->grid[2], k->block[0], k->block[1],
                  k->block[2]);
    for (int j = 0; j < k->n_shared; j++) print_buf(&o, "shared", k->shared[j]);
    for (int j = 0; j < k->n_local; j++) print_buf(&o, "local", k->local[j]);
    print_stmt(&o, k->body, 2);
  }
  return dg_str_take(&o);
}
