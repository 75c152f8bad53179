/* sync.c: barrier insertion for shared memory (TVM's ThreadSync("shared")).
 *
 * Walking each statement sequence in order, the pass tracks the shared
 * buffers written and read since the last barrier. A statement that reads
 * a buffer written since then (read after write), or writes one read since
 * then (write after read), gets a barrier in front of it, placed in the
 * outermost sequence that holds the statement, so a barrier never lands
 * deeper than needed. A loop whose next iteration would conflict with what
 * its previous iteration left gets a barrier at the end of its body: the
 * cooperative fetch of MetaSchedule comes out as
 *   for k0 { X_shared = ...; Y_shared = ...; sync; compute; sync }.
 * Conditions that depend on the thread index are never entered (a barrier
 * there could deadlock); their accesses count as one statement.
 *
 * Asynchronous copies (cp.async) write shared memory at some point before
 * the ASYNC_WAIT that completes them: the store counts as a write where it
 * is issued (a barrier must separate it from earlier reads), and the wait
 * counts as writing the buffers it completes again, so that a read after
 * it gets a barrier between the two (the wait itself never needs one
 * before it). Software pipelining places a wait before every reader of
 * asynchronously written data (pipeline.c).
 *
 * It is conservative: it does not prove that a thread reads only what it
 * wrote itself, so it may add a barrier TVM would leave out. Global memory
 * is not synchronised (threads of different blocks cannot be).
 */
#include "lower/lower_impl.h"

typedef struct {
  DG_VEC(const dg_buffer *) w, r;
} pend;

typedef struct {
  dg_func *f;
  const lw_kernel *k;
} sctx;

static bool has(const pend *p, const dg_buffer *b, bool write) {
  const dg_buffer *const *d = write ? p->w.data : p->r.data;
  size_t n = write ? p->w.len : p->r.len;
  for (size_t i = 0; i < n; i++)
    if (d[i] == b) return true;
  return false;
}

static void add(pend *p, const dg_buffer *b, bool write) {
  if (has(p, b, write)) return;
  if (write) DG_VEC_PUSH(&p->w, b);
  else DG_VEC_PUSH(&p->r, b);
}

static void clear(pend *p) { p->w.len = p->r.len = 0; }

static void copy(pend *dst, const pend *src) {
  clear(dst);
  for (size_t i = 0; i < src->w.len; i++) add(dst, src->w.data[i], true);
  for (size_t i = 0; i < src->r.len; i++) add(dst, src->r.data[i], false);
}

static void pend_free(pend *p) {
  DG_VEC_FREE(&p->w);
  DG_VEC_FREE(&p->r);
}

static bool is_shared(const dg_buffer *b) {
  return b->scope == DG_SCOPE_SHARED || b->scope == DG_SCOPE_SHARED_DYN;
}

/* The shared buffers an expression or a whole statement reads and writes. */
static void expr_acc(const dg_expr *e, pend *a) {
  if (!e) return;
  if (e->kind == DG_EXPR_LOAD && is_shared(e->buf)) add(a, e->buf, false);
  if (e->kind == DG_EXPR_LOAD || e->kind == DG_EXPR_CALL) {
    for (int i = 0; i < e->nargs; i++) expr_acc(e->args[i], a);
    return;
  }
  expr_acc(e->a, a);
  expr_acc(e->b, a);
  expr_acc(e->c, a);
}

static void stmt_acc(const lw_stmt *s, pend *a) {
  if (!s) return;
  switch (s->kind) {
    case LW_SEQ:
      for (int i = 0; i < s->n; i++) stmt_acc(s->stmts[i], a);
      return;
    case LW_FOR: stmt_acc(s->body, a); return;
    case LW_IF:
      expr_acc(s->cond, a);
      stmt_acc(s->then_s, a);
      stmt_acc(s->else_s, a);
      return;
    case LW_STORE:
      for (int i = 0; i < s->nidx; i++) expr_acc(s->idx[i], a);
      expr_acc(s->value, a);
      if (is_shared(s->buf)) add(a, s->buf, true);
      return;
    case LW_WMMA: stmt_acc(s->body, a); return; /* what the tile op reads and writes */
    case LW_ASYNC_WAIT: /* asynchronous writes land here */
      for (int i = 0; i < s->n_wait_bufs; i++)
        if (is_shared(s->wait_bufs[i])) add(a, s->wait_bufs[i], true);
      return;
    case LW_BARRIER:
    case LW_ALLREDUCE:
    case LW_ASYNC_COMMIT: return;
  }
}

static bool thread_dependent(const sctx *c, const dg_expr *e) {
  for (int t = DG_TAG_THREAD_X; t <= DG_TAG_THREAD_Z; t++)
    if (c->k->tag_var[t] && ir_expr_uses_var(e, c->k->tag_var[t])) return true;
  return false;
}

/* Whether s (treated as one unit) conflicts with the pending accesses. */
static bool unit_conflicts(const lw_stmt *s, const pend *p) {
  pend a = {0};
  stmt_acc(s, &a);
  bool c = false;
  for (size_t i = 0; i < a.r.len && !c; i++) c = has(p, a.r.data[i], true);
  for (size_t i = 0; i < a.w.len && !c; i++) c = has(p, a.w.data[i], false);
  pend_free(&a);
  return c;
}

static void unit_add(const lw_stmt *s, pend *p) {
  pend a = {0};
  stmt_acc(s, &a);
  for (size_t i = 0; i < a.r.len; i++) add(p, a.r.data[i], false);
  for (size_t i = 0; i < a.w.len; i++) add(p, a.w.data[i], true);
  pend_free(&a);
}

static bool is_unit(const sctx *c, const lw_stmt *s) {
  return s->kind == LW_STORE || s->kind == LW_WMMA ||
         (s->kind == LW_IF && thread_dependent(c, s->cond));
}

static bool clears(const lw_stmt *s) {
  return s->kind == LW_BARRIER || (s->kind == LW_ALLREDUCE && s->scratch);
}

/* Dry run: does s, entered with the pending accesses p, touch one of them
 * before it reaches a barrier of its own? (Conflicts among its own
 * accesses are the business of the scan inside it.) *stopped is set once
 * a barrier is reached. */
static bool conflicts_first(const sctx *c, const lw_stmt *s, const pend *p, bool *stopped) {
  if (!s || *stopped) return false;
  if (clears(s)) {
    *stopped = true;
    return false;
  }
  if (s->kind == LW_ALLREDUCE) return false;
  if (is_unit(c, s)) return unit_conflicts(s, p);
  switch (s->kind) {
    case LW_SEQ:
      for (int i = 0; i < s->n; i++)
        if (conflicts_first(c, s->stmts[i], p, stopped)) return true;
      return false;
    case LW_FOR: return conflicts_first(c, s->body, p, stopped);
    case LW_IF: {
      bool s1 = false, s2 = false;
      bool r = conflicts_first(c, s->then_s, p, &s1) || conflicts_first(c, s->else_s, p, &s2);
      if (s1 && s2) *stopped = true;
      return r;
    }
    default: return false;
  }
}

static lw_stmt *scan(sctx *c, const lw_stmt *s, pend *p);

static void scan_seq_child(sctx *c, const lw_stmt *s, pend *p, lw_stmt **out, int *n) {
  if (clears(s)) {
    clear(p);
    out[(*n)++] = (lw_stmt *)s;
    return;
  }
  if (s->kind == LW_ALLREDUCE || s->kind == LW_ASYNC_COMMIT) {
    out[(*n)++] = (lw_stmt *)s;
    return;
  }
  if (s->kind == LW_ASYNC_WAIT) { /* no barrier before it: it writes nothing new */
    unit_add(s, p);
    out[(*n)++] = (lw_stmt *)s;
    return;
  }
  bool conflict;
  if (is_unit(c, s)) {
    conflict = unit_conflicts(s, p);
  } else {
    bool stopped = false;
    conflict = conflicts_first(c, s, p, &stopped);
  }
  if (conflict) {
    out[(*n)++] = lw_barrier(c->f);
    clear(p);
  }
  if (is_unit(c, s)) {
    unit_add(s, p);
    out[(*n)++] = (lw_stmt *)s;
  } else {
    out[(*n)++] = scan(c, s, p);
  }
}

static lw_stmt *scan(sctx *c, const lw_stmt *s, pend *p) {
  if (!s) return NULL;
  dg_func *f = c->f;
  switch (s->kind) {
    case LW_SEQ: {
      lw_stmt **out = DG_ANEWN(f->arena, lw_stmt *, 2 * s->n + 1);
      int n = 0;
      for (int i = 0; i < s->n; i++) scan_seq_child(c, s->stmts[i], p, out, &n);
      return lw_seq(f, out, n);
    }
    case LW_FOR: {
      lw_stmt *body = scan(c, s->body, p);
      bool stopped = false;
      if (s->extent > 1 && conflicts_first(c, body, p, &stopped)) {
        lw_stmt *parts[2] = {body, lw_barrier(f)};
        body = lw_seq(f, parts, 2);
        clear(p);
      }
      lw_stmt *x = lw_copy(f, s);
      x->body = body;
      return x;
    }
    case LW_IF: {
      if (thread_dependent(c, s->cond)) {
        unit_add(s, p);
        return (lw_stmt *)s;
      }
      pend q = {0};
      copy(&q, p);
      lw_stmt *x = lw_copy(f, s);
      x->then_s = scan(c, s->then_s, p);
      x->else_s = scan(c, s->else_s, &q);
      for (size_t i = 0; i < q.w.len; i++) add(p, q.w.data[i], true);
      for (size_t i = 0; i < q.r.len; i++) add(p, q.r.data[i], false);
      pend_free(&q);
      return x;
    }
    case LW_STORE:
    case LW_WMMA: unit_add(s, p); return (lw_stmt *)s;
    case LW_BARRIER: clear(p); return (lw_stmt *)s;
    case LW_ASYNC_COMMIT: return (lw_stmt *)s;
    case LW_ASYNC_WAIT: unit_add(s, p); return (lw_stmt *)s;
    case LW_ALLREDUCE:
      if (s->scratch) clear(p);
      return (lw_stmt *)s;
  }
  return (lw_stmt *)s;
}

bool lower_insert_barriers(lw_program *p, lw_kernel *k, dg_status *st) {
  (void)st;
  bool any_shared = false;
  for (int i = 0; i < k->n_shared; i++) any_shared |= k->shared[i]->ndim > 0;
  if (!any_shared) return true;
  sctx c = {.f = p->f, .k = k};
  pend pd = {0};
  lw_stmt *parts[1] = {k->body};
  k->body = scan(&c, lw_seq(p->f, parts, 1), &pd);
  pend_free(&pd);
  return true;
}
