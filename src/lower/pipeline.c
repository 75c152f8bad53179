/* pipeline.c: software pipelining (TVM's InjectSoftwarePipeline) and the
 * asynchronous copies of its asynchronous stages (InjectPTXAsyncCopy).
 *
 * A loop annotated software_pipeline_stage = [s0 ..], software_pipeline_order
 * = [o0 ..] has a body of n statements (parts); part i runs in stage s_i,
 * and within an iteration the parts run in the order o. With M the largest
 * stage and E the extent, iteration t of the pipelined loop, t in [0, E + M),
 * runs part i for original iteration j = t - s_i when 0 <= j < E: the parts
 * of later stages work on earlier iterations, so that a copy issued for
 * iteration j + M overlaps the compute of iteration j. The loop becomes
 *   prologue  t in [0, M)               unrolled, parts out of range left out
 *   body      t in [M, E)               a loop (the original's kind and
 *                                       unroll region), every part present
 *   epilogue  t in [max(E, M), E + M)   unrolled, as the prologue
 * as TVM emits it (its prologue and epilogue are kUnrolled loops, which
 * UnrollLoop unrolls; here they are written out, constants folded).
 *
 * Multi-buffering, as TVM decides it: a buffer allocated for the loop (all
 * its accesses inside the loop body, in at least two parts) written first
 * in stage d and read last in stage u gets u - d + 1 versions (2 only if
 * some writer precedes a reader in order and stage; otherwise 1), a new
 * leading dimension indexed by j % versions: what part i reads in
 * iteration j is what the writer wrote for that j, never overwritten in
 * between. Verification sees the multi-buffered allocations (the pass runs
 * before the launch's limits are checked), so VerifyGPUCode counts them.
 * The order is checked as TVM checks it: a part that reads what an earlier
 * part writes is in the same or a later stage, and after it if in the same.
 *
 * Asynchronous stages (software_pipeline_async_stages): the stores of their
 * parts are marked in_async; after vectorization lower_async_copies makes
 * those that copy 4, 8 or 16 bytes from a global buffer to shared memory
 * cp.async (on targets that have it). Consecutive asynchronous parts of one
 * stage form one commit group, committed (ASYNC_COMMIT) after them in every
 * iteration t, present or not (an empty group completes at once), so that
 * the groups are counted alike in prologue, body and epilogue. A part that
 * reads a buffer written asynchronously is preceded by ASYNC_WAIT of the
 * number of groups that may still be in flight: with C groups an
 * iteration, its producer's group committed R-th in iteration j + p and B
 * groups committed before the reader in iteration j + s, that is
 * (s - p) * C + B - R - 1, constant across iterations (TVM's body gets the
 * same count; its epilogue counts down without committing, which waits
 * for the same groups). Copies that cannot be asynchronous (width, a cast
 * or select, a non-global source) stay plain stores, still multi-buffered,
 * and complete before the wait as before.
 *
 * Barriers: the pass adds none; barrier insertion (sync.c) runs later over
 * the new structure and counts an ASYNC_WAIT as writing the buffers it
 * completes, so every read of an asynchronously written buffer has a
 * barrier between the wait and itself.
 *
 * Not done: TVM's double_buffer_scope override, the zero-filling cp.async
 * of a select with a zero else (such copies stay synchronous), region
 * analysis for the two-version case (any writer before a reader in order
 * and stage counts as conflicting).
 */
#include <inttypes.h>
#include <string.h>

#include "lower/lower_impl.h"

enum { MAX_PARTS = 64, MAX_BUFS = 64 };

static bool is_shared_scope(dg_scope s) { return s == DG_SCOPE_SHARED || s == DG_SCOPE_SHARED_DYN; }

/* ---- buffer accesses of a statement ------------------------------------------ */

typedef struct {
  const dg_buffer *r[MAX_BUFS], *w[MAX_BUFS];
  int nr, nw;
  bool overflow;
} acc_set;

static void acc_add(acc_set *a, const dg_buffer *b, bool write) {
  const dg_buffer **arr = write ? a->w : a->r;
  int *n = write ? &a->nw : &a->nr;
  for (int i = 0; i < *n; i++)
    if (arr[i] == b) return;
  if (*n == MAX_BUFS) {
    a->overflow = true;
    return;
  }
  arr[(*n)++] = b;
}

static bool acc_has(const acc_set *a, const dg_buffer *b, bool write) {
  const dg_buffer *const *arr = write ? a->w : a->r;
  int n = write ? a->nw : a->nr;
  for (int i = 0; i < n; i++)
    if (arr[i] == b) return true;
  return false;
}

static void acc_expr(acc_set *a, const dg_expr *e) {
  if (!e) return;
  if (e->kind == DG_EXPR_LOAD) acc_add(a, e->buf, false);
  if (e->kind == DG_EXPR_LOAD || e->kind == DG_EXPR_CALL) {
    for (int i = 0; i < e->nargs; i++) acc_expr(a, e->args[i]);
    return;
  }
  acc_expr(a, e->a);
  acc_expr(a, e->b);
  acc_expr(a, e->c);
}

/* skip: a subtree left out of the walk (the pipelined loop itself). */
static void acc_stmt(acc_set *a, const lw_stmt *s, const lw_stmt *skip) {
  if (!s || s == skip) return;
  switch (s->kind) {
    case LW_SEQ:
      for (int i = 0; i < s->n; i++) acc_stmt(a, s->stmts[i], skip);
      return;
    case LW_FOR: acc_stmt(a, s->body, skip); return;
    case LW_IF:
      acc_expr(a, s->cond);
      acc_stmt(a, s->then_s, skip);
      acc_stmt(a, s->else_s, skip);
      return;
    case LW_STORE:
      for (int i = 0; i < s->nidx; i++) acc_expr(a, s->idx[i]);
      acc_expr(a, s->value);
      acc_add(a, s->buf, true);
      return;
    case LW_WMMA:
      for (int i = 0; i < s->wmma_n; i++)
        for (int d = 0; d < s->wmma_buf[i]->ndim; d++) acc_expr(a, s->wmma_origin[i][d]);
      acc_stmt(a, s->body, skip);
      return;
    case LW_ALLREDUCE:
      acc_add(a, s->src, false);
      acc_add(a, s->dst, true);
      if (s->scratch) {
        acc_add(a, s->scratch, false);
        acc_add(a, s->scratch, true);
      }
      return;
    case LW_BARRIER:
    case LW_ASYNC_COMMIT: return;
    case LW_ASYNC_WAIT:
      for (int i = 0; i < s->n_wait_bufs; i++) acc_add(a, s->wait_bufs[i], true);
      return;
  }
}

/* Buffers an allreduce names (they have no indices to version). */
static void allreduce_bufs(acc_set *a, const lw_stmt *s) {
  if (!s) return;
  switch (s->kind) {
    case LW_SEQ:
      for (int i = 0; i < s->n; i++) allreduce_bufs(a, s->stmts[i]);
      return;
    case LW_FOR: allreduce_bufs(a, s->body); return;
    case LW_IF:
      allreduce_bufs(a, s->then_s);
      allreduce_bufs(a, s->else_s);
      return;
    case LW_ALLREDUCE:
      acc_add(a, s->src, true);
      acc_add(a, s->dst, true);
      if (s->scratch) acc_add(a, s->scratch, true);
      return;
    default: return;
  }
}

/* ---- rewriting a part for one iteration ---------------------------------------- */

typedef struct {
  const dg_buffer *from[MAX_BUFS];
  dg_buffer *to[MAX_BUFS];
  int64_t versions[MAX_BUFS];
  int n;
  const dg_var *var; /* the pipelined loop's variable */
} remap;

static dg_expr **prepend_version(dg_func *f, dg_expr *const *idx, int n, void *ctx) {
  dg_expr **out = DG_ANEWN(f->arena, dg_expr *, n + 1);
  out[0] = ctx;
  if (n) memcpy(out + 1, idx, sizeof(*idx) * (size_t)n);
  return out;
}

static dg_expr *version_expr(dg_func *f, const remap *m, int i) {
  dg_expr *v = ir_var(f, (dg_var *)m->var);
  return ir_bin(f, DG_EXPR_FLOORMOD, v, ir_int_t(f, m->versions[i], v->dtype));
}

static dg_expr *rebuf_expr(dg_func *f, const remap *m, dg_expr *e) {
  for (int i = 0; i < m->n && e; i++)
    e = lw_expr_rebuf(f, e, m->from[i], m->to[i], prepend_version, version_expr(f, m, i));
  return e;
}

/* s with every access to a multi-buffered buffer given its version index
 * (floormod(var, versions)), and its stores marked in_async if asked. */
static lw_stmt *rebuf_stmt(dg_func *f, const remap *m, const lw_stmt *s, bool async) {
  if (!s) return NULL;
  lw_stmt *c = lw_copy(f, s);
  switch (s->kind) {
    case LW_SEQ:
      c->stmts = DG_ANEWN(f->arena, lw_stmt *, s->n > 0 ? s->n : 1);
      for (int i = 0; i < s->n; i++) c->stmts[i] = rebuf_stmt(f, m, s->stmts[i], async);
      break;
    case LW_FOR: c->body = rebuf_stmt(f, m, s->body, async); break;
    case LW_IF:
      c->cond = rebuf_expr(f, m, s->cond);
      c->then_s = rebuf_stmt(f, m, s->then_s, async);
      c->else_s = rebuf_stmt(f, m, s->else_s, async);
      break;
    case LW_STORE:
      c->idx = DG_ANEWN(f->arena, dg_expr *, s->nidx + 1);
      for (int i = 0; i < s->nidx; i++) c->idx[i] = rebuf_expr(f, m, s->idx[i]);
      c->value = rebuf_expr(f, m, s->value);
      for (int i = 0; i < m->n; i++)
        if (s->buf == m->from[i]) {
          c->buf = m->to[i];
          c->idx = prepend_version(f, c->idx, s->nidx, version_expr(f, m, i));
          c->nidx = s->nidx + 1;
        }
      if (async) c->in_async = true;
      break;
    case LW_WMMA:
      c->body = rebuf_stmt(f, m, s->body, async);
      for (int k = 0; k < s->wmma_n; k++) {
        const dg_buffer *b = s->wmma_buf[k];
        int nd = b->ndim;
        c->wmma_origin[k] = DG_ANEWN(f->arena, dg_expr *, nd + 1);
        for (int d = 0; d < nd; d++) c->wmma_origin[k][d] = rebuf_expr(f, m, s->wmma_origin[k][d]);
        for (int i = 0; i < m->n; i++)
          if (b == m->from[i]) {
            c->wmma_buf[k] = m->to[i];
            c->wmma_origin[k] =
                prepend_version(f, c->wmma_origin[k], nd, version_expr(f, m, i));
          }
      }
      break;
    case LW_BARRIER:
    case LW_ALLREDUCE:
    case LW_ASYNC_COMMIT:
    case LW_ASYNC_WAIT: break;
  }
  return c;
}

/* ---- the plan of one iteration ----------------------------------------------------- */

typedef enum { ACT_PART, ACT_COMMIT, ACT_WAIT } act_kind;

typedef struct {
  act_kind kind;
  int part;           /* PART: the part; WAIT: the part it is for */
  int64_t count;      /* WAIT */
  dg_buffer **bufs;   /* WAIT: the asynchronously written buffers the part reads */
  int n_bufs;
} action;

typedef struct {
  lw_program *p;
  lw_kernel *k;
  dg_status *st;
  const lw_stmt *loop;
  int n;                       /* parts */
  lw_stmt *part[MAX_PARTS];    /* as converted, before the version rewrite */
  lw_stmt *vpart[MAX_PARTS];   /* multi-buffered, async stores marked */
  acc_set acc[MAX_PARTS];
  int stage[MAX_PARTS], order[MAX_PARTS];
  bool async[MAX_PARTS];
  int by_order[MAX_PARTS];
  int max_stage;
  remap m;
  action plan[3 * MAX_PARTS + 1];
  int n_plan;
  bool unconsumed_async; /* an asynchronously written buffer no part reads */
  dg_buffer *async_bufs[MAX_BUFS]; /* the shared buffers written asynchronously */
  int n_async_bufs;
} pipe;

static bool pfail(pipe *x, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static bool pfail(pipe *x, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  dg_vfail(x->st, DG_ERR_INVALID, fmt, ap);
  va_end(ap);
  dg_status_prefix(x->st, "lower: kernel %s: software pipeline of loop %s", x->k->name,
                   x->loop->var->name);
  return false;
}

static bool stage_is_async(const lw_stmt *l, int stage) {
  for (int i = 0; i < l->pipe_n_async; i++)
    if (l->pipe_async[i] == stage) return true;
  return false;
}

/* The loop's parts: pipe_len[i] statements each, in the body's order. */
static bool split_parts(pipe *x) {
  const lw_stmt *l = x->loop;
  if (l->pipe_n > MAX_PARTS) return pfail(x, "more than %d statements", MAX_PARTS);
  lw_stmt *const *flat = &l->body;
  int nflat = l->body ? 1 : 0;
  if (l->body && l->body->kind == LW_SEQ) {
    flat = l->body->stmts;
    nflat = l->body->n;
  }
  int at = 0;
  x->n = l->pipe_n;
  for (int i = 0; i < x->n; i++) {
    if (at + l->pipe_len[i] > nflat) break;
    const lw_stmt *nest = l->pipe_len[i] == 1 ? flat[at] : NULL;
    if (nest && nest->kind == LW_SEQ && nest->pipe_n == 3 && i + 2 < x->n &&
        l->pipe_len[i + 1] == 0 && l->pipe_len[i + 2] == 0) {
      /* a nested pipeline's result: its prologue, body and epilogue are
       * parts i, i + 1, i + 2 (TVM flattens the nested block) */
      for (int q = 0, off = 0; q < 3; off += nest->pipe_len[q], q++) {
        x->part[i + q] = lw_seq(x->p->f, nest->stmts + off, nest->pipe_len[q]);
        x->stage[i + q] = l->pipe_stage[i + q];
        x->order[i + q] = l->pipe_order[i + q];
        x->async[i + q] = stage_is_async(l, x->stage[i + q]);
        if (x->stage[i + q] > x->max_stage) x->max_stage = x->stage[i + q];
      }
      at++;
      i += 2;
      continue;
    }
    x->part[i] = lw_seq(x->p->f, (lw_stmt **)flat + at, l->pipe_len[i]);
    at += l->pipe_len[i];
    x->stage[i] = l->pipe_stage[i];
    x->order[i] = l->pipe_order[i];
    x->async[i] = stage_is_async(l, x->stage[i]);
    if (x->stage[i] > x->max_stage) x->max_stage = x->stage[i];
  }
  DG_ASSERT(at == nflat); /* conversion recorded the parts' lengths */
  return true;
}

/* TVM's ValidatePipelineBody: orders unique; a part reading what an
 * earlier part writes runs in the same or a later stage, and after it in
 * the same stage. */
static bool validate(pipe *x) {
  for (int i = 0; i < x->n; i++) x->by_order[i] = -1;
  for (int i = 0; i < x->n; i++) {
    if (x->by_order[x->order[i]] >= 0)
      return pfail(x, "statements %d and %d have the same order %d", x->by_order[x->order[i]], i,
                   x->order[i]);
    x->by_order[x->order[i]] = i;
  }
  for (int d = 0; d < x->n; d++)
    for (int s = 0; s < d; s++) {
      bool dep = false;
      for (int b = 0; b < x->acc[d].nr && !dep; b++) dep = acc_has(&x->acc[s], x->acc[d].r[b], true);
      if (!dep) continue;
      if (x->stage[s] > x->stage[d])
        return pfail(x, "statement %d in stage %d reads what statement %d writes in the later "
                        "stage %d", d, x->stage[d], s, x->stage[s]);
      if (x->stage[s] == x->stage[d] && x->order[s] > x->order[d])
        return pfail(x, "statement %d reads what statement %d writes in the same stage %d, but "
                        "is ordered before it", d, s, x->stage[d]);
    }
  return true;
}

/* TVM's ComputeBufferVersions for one buffer allocated for the loop. */
static int64_t versions_of(const pipe *x, const dg_buffer *b) {
  int def = -1, use = -1;
  for (int i = 0; i < x->n; i++) {
    if (acc_has(&x->acc[i], b, true) && (def < 0 || x->stage[i] < def)) def = x->stage[i];
    if (acc_has(&x->acc[i], b, false) && x->stage[i] > use) use = x->stage[i];
  }
  if (def < 0) return 1;
  int64_t v = use - def + 1;
  if (v == 2) {
    bool need = false;
    for (int w = 0; w < x->n && !need; w++) {
      if (!acc_has(&x->acc[w], b, true)) continue;
      for (int r = 0; r < x->n && !need; r++)
        need = acc_has(&x->acc[r], b, false) && x->order[w] < x->order[r] &&
               x->stage[w] < x->stage[r];
    }
    if (!need) v = 1;
  }
  return v;
}

/* The buffers allocated for the loop (every access inside it, in two or
 * more parts) and their versions; the kernel's allocations replaced. */
static bool plan_buffers(pipe *x) {
  dg_func *f = x->p->f;
  lw_kernel *k = x->k;
  acc_set outside = {0}, named = {0};
  acc_stmt(&outside, k->body, x->loop);
  allreduce_bufs(&named, k->body);
  if (outside.overflow || named.overflow) return pfail(x, "more than %d buffers", MAX_BUFS);
  x->m.var = x->loop->var;
  for (int list = 0; list < 2; list++) {
    dg_buffer **bufs = list ? k->local : k->shared;
    int nb = list ? k->n_local : k->n_shared;
    for (int i = 0; i < nb; i++) {
      dg_buffer *b = bufs[i];
      if (acc_has(&outside, b, false) || acc_has(&outside, b, true) ||
          acc_has(&named, b, true))
        continue;
      int parts = 0;
      for (int j = 0; j < x->n; j++) parts += acc_has(&x->acc[j], b, false) || acc_has(&x->acc[j], b, true);
      if (parts < 2) continue;
      int64_t v = versions_of(x, b);
      if (v <= 1) continue;
      if (b->ndim + 1 > DG_MAX_DIMS || x->m.n == MAX_BUFS)
        return pfail(x, "buffer %s cannot take another dimension for its %" PRId64 " versions",
                     b->name, v);
      int64_t shape[DG_MAX_DIMS];
      shape[0] = v;
      memcpy(shape + 1, b->shape, sizeof(*shape) * (size_t)b->ndim);
      dg_buffer *nbuf = ir_buffer_new(f, b->name, b->dtype, b->ndim + 1, shape, b->scope);
      x->m.from[x->m.n] = b;
      x->m.to[x->m.n] = nbuf;
      x->m.versions[x->m.n] = v;
      x->m.n++;
      bufs[i] = nbuf;
    }
  }
  return true;
}

/* Whether part i reads a buffer some asynchronous part writes; the
 * buffers (shared ones, for barrier insertion) go to out. */
static int async_reads(const pipe *x, int i, dg_buffer **out) {
  int n = 0;
  for (int b = 0; b < x->acc[i].nr; b++) {
    const dg_buffer *buf = x->acc[i].r[b];
    bool async_written = false;
    for (int y = 0; y < x->n && !async_written; y++)
      async_written = x->async[y] && acc_has(&x->acc[y], buf, true);
    if (!async_written) continue;
    const dg_buffer *now = buf;
    for (int r = 0; r < x->m.n; r++)
      if (x->m.from[r] == buf) now = x->m.to[r];
    if (out) out[n] = (dg_buffer *)now;
    n++;
  }
  return n;
}

/* The actions of one iteration: parts in order, a commit after each run
 * of asynchronous parts of one stage, a wait before each reader of
 * asynchronously written buffers. */
static void plan_iteration(pipe *x) {
  dg_func *f = x->p->f;
  /* run[i]: the commit group of asynchronous part i in its iteration */
  int run[MAX_PARTS], n_runs = 0, open_stage = -1;
  for (int o = 0; o < x->n; o++) {
    int i = x->by_order[o];
    run[i] = -1;
    if (!x->async[i]) {
      open_stage = -1;
      continue;
    }
    bool reads_open = false;
    for (int q = 0; q < o && open_stage >= 0; q++) {
      int y = x->by_order[q];
      if (run[y] != n_runs - 1) continue;
      for (int b = 0; b < x->acc[i].nr && !reads_open; b++)
        reads_open = acc_has(&x->acc[y], x->acc[i].r[b], true);
    }
    if (open_stage != x->stage[i] || reads_open) n_runs++;
    open_stage = x->stage[i];
    run[i] = n_runs - 1;
  }
  int committed = 0;
  int64_t last_wait = -1; /* the count of the last wait since the last commit */
  open_stage = -1;
  int open_run = -1;
  for (int o = 0; o < x->n; o++) {
    int i = x->by_order[o];
    if (open_run >= 0 && run[i] != open_run) {
      x->plan[x->n_plan++] = (action){.kind = ACT_COMMIT};
      committed++;
      open_run = -1;
      last_wait = -1;
    }
    dg_buffer *rb[MAX_BUFS];
    int nrb = async_reads(x, i, rb);
    if (nrb) {
      int64_t need = INT64_MAX;
      for (int y = 0; y < x->n; y++) {
        if (!x->async[y]) continue;
        bool feeds = false;
        for (int b = 0; b < x->acc[i].nr && !feeds; b++) feeds = acc_has(&x->acc[y], x->acc[i].r[b], true);
        if (!feeds) continue;
        /* y's group is committed in iteration j + stage(y), the read is in
         * j + stage(i), with `committed` groups of that iteration before it */
        int64_t c = (int64_t)(x->stage[i] - x->stage[y]) * n_runs + committed - run[y] - 1;
        if (c < need) need = c;
      }
      if (need < 0) need = 0;
      if (last_wait < 0 || need < last_wait) {
        action w = {.kind = ACT_WAIT, .part = i, .count = need, .n_bufs = nrb};
        w.bufs = DG_ANEWN(f->arena, dg_buffer *, nrb);
        memcpy(w.bufs, rb, sizeof(*rb) * (size_t)nrb);
        x->plan[x->n_plan++] = w;
        last_wait = need;
      }
    }
    x->plan[x->n_plan++] = (action){.kind = ACT_PART, .part = i};
    if (run[i] >= 0) open_run = run[i];
  }
  if (open_run >= 0) x->plan[x->n_plan++] = (action){.kind = ACT_COMMIT};
  /* an asynchronous write no part waits for is waited for after the loop */
  for (int y = 0; y < x->n; y++)
    for (int b = 0; x->async[y] && b < x->acc[y].nw; b++) {
      const dg_buffer *buf = x->acc[y].w[b];
      if (!is_shared_scope(buf->scope)) continue;
      bool read = false, listed = false;
      for (int i = 0; i < x->n && !read; i++) read = acc_has(&x->acc[i], buf, false);
      if (!read) x->unconsumed_async = true;
      const dg_buffer *now = buf;
      for (int r = 0; r < x->m.n; r++)
        if (x->m.from[r] == buf) now = x->m.to[r];
      for (int i = 0; i < x->n_async_bufs && !listed; i++) listed = x->async_bufs[i] == now;
      if (!listed && x->n_async_bufs < MAX_BUFS) x->async_bufs[x->n_async_bufs++] = (dg_buffer *)now;
    }
}

/* Iteration t of the pipelined loop (t_var NULL: t is the constant t0;
 * else t = t_var + t0 over a loop where every part is present). */
static lw_stmt *emit_iteration(pipe *x, const dg_var *t_var, int64_t t0) {
  dg_func *f = x->p->f;
  const lw_stmt *l = x->loop;
  lw_stmt **out = DG_ANEWN(f->arena, lw_stmt *, x->n_plan > 0 ? x->n_plan : 1);
  int n = 0;
  for (int a = 0; a < x->n_plan; a++) {
    const action *ac = &x->plan[a];
    if (ac->kind == ACT_COMMIT) {
      if (x->p->async_copy) out[n++] = lw_async_commit(f);
      continue;
    }
    int i = ac->part;
    int64_t j = t0 - x->stage[i];
    if (!t_var && (j < 0 || j >= l->extent)) continue;
    if (ac->kind == ACT_WAIT) {
      if (x->p->async_copy) out[n++] = lw_async_wait(f, ac->count, ac->bufs, ac->n_bufs);
      continue;
    }
    dg_expr *jv = ir_int_t(f, j, l->var->dtype);
    if (t_var) jv = ir_add(f, ir_var(f, (dg_var *)t_var), jv);
    dg_subst m = {l->var, jv};
    lw_stmt *s = lw_subst(f, x->vpart[i], &m, 1);
    if (!t_var) s = lw_with_unroll(f, s, l->unroll_max_step, l->unroll_explicit);
    out[n++] = s;
  }
  return lw_seq(f, out, n);
}

static lw_stmt *build(pipe *x) {
  dg_func *f = x->p->f;
  const lw_stmt *l = x->loop;
  int64_t E = l->extent, M = x->max_stage;
  for (int i = 0; i < x->n; i++) x->vpart[i] = rebuf_stmt(f, &x->m, x->part[i], x->async[i]);
  lw_stmt *parts[4] = {NULL, NULL, NULL, NULL};
  int np = 0;
  lw_stmt **pro = DG_ANEWN(f->arena, lw_stmt *, M > 0 ? M : 1);
  for (int64_t t = 0; t < M; t++) pro[t] = emit_iteration(x, NULL, t);
  parts[np++] = lw_seq(f, pro, (int)M);
  if (E > M) {
    lw_stmt *body = lw_copy(f, l);
    body->pipe_n = body->pipe_n_async = 0;
    body->pipe_stage = body->pipe_order = body->pipe_len = body->pipe_async = NULL;
    body->extent = E - M;
    body->body = emit_iteration(x, l->var, M);
    parts[np++] = body;
  }
  int64_t e0 = E > M ? E : M, e1 = E + M;
  lw_stmt **epi = DG_ANEWN(f->arena, lw_stmt *, e1 - e0 > 0 ? e1 - e0 : 1);
  for (int64_t t = e0; t < e1; t++) epi[t - e0] = emit_iteration(x, NULL, t);
  parts[np++] = lw_seq(f, epi, (int)(e1 - e0));
  if (x->unconsumed_async && x->p->async_copy) parts[np++] = lw_async_wait(f, 0, x->async_bufs, x->n_async_bufs);
  /* the three pieces' lengths kept on the sequence (pipe_n 3), for a
   * pipelined loop around this one whose parts they are; a sequence put
   * in any other place is flattened and loses them */
  int len[3];
  lw_stmt *pro_s = parts[0], *body_s = E > M ? parts[1] : NULL;
  lw_stmt *epi_s = lw_seq(f, parts + (E > M ? 2 : 1), np - (E > M ? 2 : 1));
  lw_stmt *three[3] = {pro_s, body_s, epi_s};
  int total = 0;
  for (int q = 0; q < 3; q++) {
    len[q] = !three[q] ? 0 : three[q]->kind == LW_SEQ ? three[q]->n : 1;
    total += len[q];
  }
  lw_stmt *out = lw_seq(f, NULL, 0);
  out->stmts = DG_ANEWN(f->arena, lw_stmt *, total > 0 ? total : 1);
  for (int q = 0; q < 3; q++) {
    if (!three[q]) continue;
    if (three[q]->kind == LW_SEQ)
      for (int j = 0; j < three[q]->n; j++) out->stmts[out->n++] = three[q]->stmts[j];
    else
      out->stmts[out->n++] = three[q];
  }
  out->pipe_n = 3;
  out->pipe_len = DG_ANEWN(f->arena, int, 3);
  memcpy(out->pipe_len, len, sizeof len);
  return out;
}

static lw_stmt *pipeline_loop(lw_program *p, lw_kernel *k, const lw_stmt *l, dg_status *st) {
  pipe *x = dg_calloc(1, sizeof(*x));
  x->p = p;
  x->k = k;
  x->st = st;
  x->loop = l;
  lw_stmt *out = NULL;
  if (!split_parts(x)) goto done;
  for (int i = 0; i < x->n; i++) {
    acc_stmt(&x->acc[i], x->part[i], NULL);
    if (x->acc[i].overflow) {
      pfail(x, "statement %d accesses more than %d buffers", i, MAX_BUFS);
      goto done;
    }
  }
  if (!validate(x) || !plan_buffers(x)) goto done;
  plan_iteration(x);
  out = build(x);
done:
  free(x);
  return out;
}

/* The innermost pipelined loop of s first, one at a time. */
static const lw_stmt *find_pipelined(const lw_stmt *s) {
  if (!s) return NULL;
  switch (s->kind) {
    case LW_SEQ:
      for (int i = 0; i < s->n; i++) {
        const lw_stmt *r = find_pipelined(s->stmts[i]);
        if (r) return r;
      }
      return NULL;
    case LW_FOR: {
      const lw_stmt *r = find_pipelined(s->body);
      return r ? r : s->pipe_n > 0 ? s : NULL;
    }
    case LW_IF: {
      const lw_stmt *r = find_pipelined(s->then_s);
      return r ? r : find_pipelined(s->else_s);
    }
    default: return NULL;
  }
}

/* s with `from` replaced by `to`. A sequence that is the body of a
 * pipelined loop keeps its arity (the loop's parts are counted in its
 * statements); others are flattened. */
static lw_stmt *replace(dg_func *f, const lw_stmt *s, const lw_stmt *from, lw_stmt *to,
                        bool keep_arity) {
  if (!s) return NULL;
  if (s == from) return to;
  lw_stmt *c;
  switch (s->kind) {
    case LW_SEQ: {
      lw_stmt **xs = DG_ANEWN(f->arena, lw_stmt *, s->n > 0 ? s->n : 1);
      for (int i = 0; i < s->n; i++) xs[i] = replace(f, s->stmts[i], from, to, false);
      if (!keep_arity) return lw_seq(f, xs, s->n);
      c = lw_copy(f, s);
      c->stmts = xs;
      return c;
    }
    case LW_FOR:
      c = lw_copy(f, s);
      c->body = replace(f, s->body, from, to, s->pipe_n > 0);
      return c;
    case LW_IF:
      c = lw_copy(f, s);
      c->then_s = replace(f, s->then_s, from, to, false);
      c->else_s = replace(f, s->else_s, from, to, false);
      return c;
    default: return (lw_stmt *)s;
  }
}

bool lower_inject_software_pipeline(lw_program *p, lw_kernel *k, dg_status *st) {
  for (;;) {
    const lw_stmt *l = find_pipelined(k->body);
    if (!l) return true;
    lw_stmt *r = pipeline_loop(p, k, l, st);
    if (!r) return false;
    k->body = replace(p->f, k->body, l, r, false);
  }
}

/* ---- cp.async ------------------------------------------------------------------------ */

/* InjectPTXAsyncCopy's rule: a store to shared memory of a load from a
 * global buffer of the same dtype, 4, 8 or 16 bytes at once (a vector
 * store's value must be read as one vector too). */
static bool copy_is_async(const lw_stmt *s) {
  const dg_expr *v = s->value;
  if (!is_shared_scope(s->buf->scope) || v->kind != DG_EXPR_LOAD ||
      v->buf->scope != DG_SCOPE_GLOBAL || v->buf->dtype != s->buf->dtype)
    return false;
  int64_t bytes = (int64_t)s->lanes * dg_dtype_bytes(s->buf->dtype);
  if (bytes != 4 && bytes != 8 && bytes != 16) return false;
  return s->lanes == 1 || (s->n_vloads >= 1 && s->vloads[0] == 0);
}

static lw_stmt *async_copies(dg_func *f, const lw_stmt *s) {
  if (!s) return NULL;
  lw_stmt *c;
  switch (s->kind) {
    case LW_SEQ: {
      lw_stmt **xs = NULL;
      for (int i = 0; i < s->n; i++) {
        lw_stmt *y = async_copies(f, s->stmts[i]);
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
      lw_stmt *b = async_copies(f, s->body);
      if (b == s->body) return (lw_stmt *)s;
      c = lw_copy(f, s);
      c->body = b;
      return c;
    }
    case LW_IF: {
      lw_stmt *t = async_copies(f, s->then_s), *e = async_copies(f, s->else_s);
      if (t == s->then_s && e == s->else_s) return (lw_stmt *)s;
      c = lw_copy(f, s);
      c->then_s = t;
      c->else_s = e;
      return c;
    }
    case LW_STORE:
      if (!s->in_async || s->cp_async || !copy_is_async(s)) return (lw_stmt *)s;
      c = lw_copy(f, s);
      c->cp_async = true;
      return c;
    default: return (lw_stmt *)s;
  }
}

static bool has_cp_async(const lw_stmt *s) {
  if (!s) return false;
  switch (s->kind) {
    case LW_SEQ:
      for (int i = 0; i < s->n; i++)
        if (has_cp_async(s->stmts[i])) return true;
      return false;
    case LW_FOR: return has_cp_async(s->body);
    case LW_IF: return has_cp_async(s->then_s) || has_cp_async(s->else_s);
    case LW_STORE: return s->cp_async;
    default: return false;
  }
}

/* s without commits and waits (a launch whose copies all stayed plain). */
static lw_stmt *strip_async(dg_func *f, const lw_stmt *s) {
  if (!s) return NULL;
  lw_stmt *c;
  switch (s->kind) {
    case LW_SEQ: {
      lw_stmt **xs = DG_ANEWN(f->arena, lw_stmt *, s->n > 0 ? s->n : 1);
      int n = 0;
      for (int i = 0; i < s->n; i++) {
        lw_stmt *y = strip_async(f, s->stmts[i]);
        if (y) xs[n++] = y;
      }
      return lw_seq(f, xs, n);
    }
    case LW_FOR:
      c = lw_copy(f, s);
      c->body = strip_async(f, s->body);
      return c;
    case LW_IF:
      c = lw_copy(f, s);
      c->then_s = strip_async(f, s->then_s);
      c->else_s = strip_async(f, s->else_s);
      return c;
    case LW_ASYNC_COMMIT:
    case LW_ASYNC_WAIT: return NULL;
    default: return (lw_stmt *)s;
  }
}

static bool has_async_sync(const lw_stmt *s) {
  if (!s) return false;
  switch (s->kind) {
    case LW_SEQ:
      for (int i = 0; i < s->n; i++)
        if (has_async_sync(s->stmts[i])) return true;
      return false;
    case LW_FOR: return has_async_sync(s->body);
    case LW_IF: return has_async_sync(s->then_s) || has_async_sync(s->else_s);
    case LW_ASYNC_COMMIT:
    case LW_ASYNC_WAIT: return true;
    default: return false;
  }
}

bool lower_async_copies(lw_program *p, lw_kernel *k, dg_status *st) {
  (void)st;
  if (!has_async_sync(k->body)) return true;
  k->body = async_copies(p->f, k->body);
  if (!has_cp_async(k->body)) k->body = strip_async(p->f, k->body);
  return true;
}
