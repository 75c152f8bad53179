/* convert.c: one root statement of a scheduled kernel -> the body of one
 * device launch.
 *
 * Blocks disappear: their iteration variables are replaced by their
 * bindings (substituted and simplified, rather than kept as scalar lets, so
 * that the later passes see every index as an expression of loop and thread
 * variables), the predicate becomes an `if`, and the init statement runs
 * under `if (every reduce binding == 0)` as TVM's LowerInitBlock does.
 * Loops bound to blockIdx/threadIdx become the launch's dims: every loop
 * bound to one tag must have the same extent, and its variable is replaced
 * by the tag's index variable (so nested loops bound to one tag, as
 * MetaSchedule's cooperative fetch makes them, name the same thread).
 * vthread and vectorized loops stay loops for their own passes, and so does
 * a loop annotated software_pipeline_stage/order (one of one iteration
 * included), its annotations and the boundaries of its body's statements
 * kept for pipeline.c. Buffers allocated by blocks inside the launch become
 * its shared or per-thread local allocations.
 *
 * It assumes a kernel the verifier accepts. It does not compact buffers or
 * insert barriers (compact.c, sync.c); cross-thread reductions are handed to
 * allreduce.c.
 */
#include <inttypes.h>
#include <string.h>

#include "lower/lower_impl.h"

static bool convfail(lw_conv *c, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static bool convfail(lw_conv *c, const char *fmt, ...) {
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

/* ---- allocations ------------------------------------------------------------ */

static void add_buf(dg_buffer ***arr, int *n, dg_buffer *b) {
  for (int i = 0; i < *n; i++)
    if ((*arr)[i] == b) return;
  dg_buffer **na = dg_malloc(sizeof(*na) * (size_t)(*n + 1));
  if (*n) memcpy(na, *arr, sizeof(*na) * (size_t)*n);
  free(*arr);
  na[(*n)++] = b;
  *arr = na;
}

static bool register_alloc(lw_conv *c, dg_buffer *b) {
  switch (b->scope) {
    case DG_SCOPE_SHARED:
    case DG_SCOPE_SHARED_DYN: add_buf(&c->k->shared, &c->k->n_shared, b); return true;
    case DG_SCOPE_LOCAL:
    case DG_SCOPE_WMMA_A:
    case DG_SCOPE_WMMA_B:
    case DG_SCOPE_WMMA_ACC: add_buf(&c->k->local, &c->k->n_local, b); return true;
    case DG_SCOPE_GLOBAL:
      return convfail(c, "buffer %s of scope global is allocated inside the launch "
                         "(allocate it in the root block)", b->name);
    default:
      return convfail(c, "buffer %s in scope %s cannot be allocated inside a launch", b->name,
                      dg_scope_name(b->scope));
  }
}

dg_buffer *lower_new_local(lw_program *p, lw_kernel *k, const char *base, dg_dtype t) {
  int64_t one = 1;
  dg_buffer *b = ir_buffer_new(p->f, lw_fresh_name(p, base), t, 1, &one, DG_SCOPE_LOCAL);
  add_buf(&k->local, &k->n_local, b);
  return b;
}

dg_buffer *lower_new_shared(lw_program *p, lw_kernel *k, const char *base, dg_dtype t,
                            int64_t n) {
  dg_buffer *b = ir_buffer_new(p->f, lw_fresh_name(p, base), t, 1, &n, DG_SCOPE_SHARED);
  add_buf(&k->shared, &k->n_shared, b);
  return b;
}

/* ---- tags ------------------------------------------------------------------- */

static int tag_dim(dg_thread_tag t) {
  switch (t) {
    case DG_TAG_BLOCK_X: case DG_TAG_THREAD_X: case DG_TAG_VTHREAD_X: return 0;
    case DG_TAG_BLOCK_Y: case DG_TAG_THREAD_Y: case DG_TAG_VTHREAD_Y: return 1;
    default: return 2;
  }
}

dg_var *lower_conv_bind(lw_conv *c, dg_thread_tag tag, int64_t extent, const char *loop,
                        dg_status *st) {
  lw_kernel *k = c->k;
  int64_t *dims = dg_thread_tag_is_block(tag) ? k->grid : k->block;
  int d = tag_dim(tag);
  if (k->tag_var[tag]) {
    if (dims[d] != extent) {
      dg_fail(st, DG_ERR_INVALID,
              "lower: kernel %s: loop %s is bound to %s with extent %" PRId64
              ", but another loop bound to it has extent %" PRId64,
              k->name, loop, dg_thread_tag_name(tag), extent, dims[d]);
      return NULL;
    }
    return k->tag_var[tag];
  }
  dims[d] = extent;
  k->tag_var[tag] = ir_var_new(c->p->f, dg_thread_tag_name(tag), DG_I32);
  return k->tag_var[tag];
}

/* Records every blockIdx/threadIdx loop of the launch before converting,
 * so that the tag variables' ranges hold everywhere. blockIdx loops must
 * not sit under other loops (the launch starts at the grid). */
static bool prescan(lw_conv *c, const dg_stmt *s, bool under_other) {
  if (!s) return true;
  switch (s->kind) {
    case DG_STMT_FOR: {
      bool bound = s->loop_kind == DG_LOOP_THREAD &&
                   (dg_thread_tag_is_block(s->tag) || dg_thread_tag_is_thread(s->tag));
      if (bound) {
        if (dg_thread_tag_is_block(s->tag) && under_other)
          return convfail(c, "loop %s is bound to %s under a loop that is not bound to blockIdx",
                          s->loop_var->name, dg_thread_tag_name(s->tag));
        if (!lower_conv_bind(c, s->tag, s->extent, s->loop_var->name, c->st)) {
          c->failed = true;
          return false;
        }
      }
      bool other = under_other || !(bound && dg_thread_tag_is_block(s->tag));
      return prescan(c, s->body, other);
    }
    case DG_STMT_SEQ:
      for (int i = 0; i < s->n; i++)
        if (!prescan(c, s->stmts[i], under_other)) return false;
      return true;
    case DG_STMT_BLOCK:
      return prescan(c, s->block->init, true) && prescan(c, s->block->body, true);
    case DG_STMT_IF:
      return prescan(c, s->then_s, true) && prescan(c, s->else_s, true);
    case DG_STMT_STORE: return true;
  }
  return true;
}

/* ---- expressions -------------------------------------------------------------- */

dg_expr *lower_conv_expr(lw_conv *c, dg_expr *e) {
  if (!e) return NULL;
  dg_expr *x = ir_subst_expr(c->p->f, e, c->map, c->n_map);
  return ir_simplify(c->p->f, x, &c->ranges);
}

static bool push_map(lw_conv *c, const dg_var *from, dg_expr *to) {
  if (c->n_map >= (int)DG_ARRAY_LEN(c->map))
    return convfail(c, "too many nested loops and iteration variables (limit %d)",
                    (int)DG_ARRAY_LEN(c->map));
  c->map[c->n_map++] = (dg_subst){from, to};
  return true;
}

static bool push_range(lw_conv *c, const dg_var *v, int64_t extent) {
  if (c->ranges.n >= (int)DG_ARRAY_LEN(c->ranges.var))
    return convfail(c, "loop nest too deep (more than %d loops)", (int)DG_ARRAY_LEN(c->ranges.var));
  ir_ranges_push(&c->ranges, v, 0, extent - 1);
  return true;
}

/* ---- statements ----------------------------------------------------------------- */

static bool uses_thread_tag(const lw_conv *c, const dg_expr *e) {
  for (int t = DG_TAG_THREAD_X; t <= DG_TAG_THREAD_Z; t++)
    if (c->k->tag_var[t] && ir_expr_uses_var(e, c->k->tag_var[t])) return true;
  return false;
}

/* StorageAlign requests (buffer_dim_align: quadruples [write index, axis,
 * factor, offset]) for compaction to apply to the allocation. */
static void record_aligns(lw_conv *c, const dg_block *b) {
  const dg_ann *a = ir_anns_get(&b->anns, "buffer_dim_align");
  if (!a || a->kind != DG_ANN_INTS || a->nints % 4) return;
  lw_kernel *k = c->k;
  for (int i = 0; i + 3 < a->nints; i += 4) {
    int64_t wi = a->ints[i];
    if (wi < 0 || wi >= b->n_writes || a->ints[i + 2] <= 0) continue;
    k->aligns = dg_realloc(k->aligns, sizeof(*k->aligns) * (size_t)(k->n_aligns + 1));
    k->aligns[k->n_aligns++] = (lw_align){.buf = b->writes[wi].buf,
                                          .axis = (int)a->ints[i + 1],
                                          .factor = a->ints[i + 2],
                                          .offset = a->ints[i + 3]};
  }
}

static lw_stmt *conv_block(lw_conv *c, const dg_stmt *s) {
  dg_block *b = s->block;
  dg_func *f = c->p->f;
  if (ir_anns_get(&b->anns, "tensor_intrin")) return lower_wmma_block(c, s);
  record_aligns(c, b);
  const dg_block *outer = c->block;
  c->block = b;
  int map0 = c->n_map;
  lw_stmt *out = NULL;
  const dg_ann *lo = ir_anns_get(&b->anns, "meta_schedule.thread_extent_low_inclusive");
  const dg_ann *hi = ir_anns_get(&b->anns, "meta_schedule.thread_extent_high_inclusive");
  if ((lo && lo->kind == DG_ANN_INT) || (hi && hi->kind == DG_ANN_INT)) {
    int64_t threads = 1;
    for (int t = DG_TAG_THREAD_X; t <= DG_TAG_THREAD_Z; t++)
      if (c->tags_in_scope & (1u << t)) threads *= c->k->block[tag_dim((dg_thread_tag)t)];
    lw_kernel *k = c->k;
    k->checks = dg_realloc(k->checks, sizeof(*k->checks) * (size_t)(k->n_checks + 1));
    k->checks[k->n_checks++] = (lw_thread_check){
        .block = b->name,
        .low = lo && lo->kind == DG_ANN_INT ? lo->i : -1,
        .high = hi && hi->kind == DG_ANN_INT ? hi->i : -1,
        .threads = threads,
    };
  }
  for (int i = 0; i < b->n_allocs; i++)
    if (!register_alloc(c, b->allocs[i])) goto done;
  /* Bindings first (they refer only to enclosing loops), then the map. */
  dg_expr **bind = DG_ANEWN(f->arena, dg_expr *, b->n_iters > 0 ? b->n_iters : 1);
  for (int i = 0; i < b->n_iters; i++) bind[i] = lower_conv_expr(c, b->iters[i].binding);
  for (int i = 0; i < b->n_iters; i++) {
    if (b->iters[i].kind == DG_ITER_REDUCE && uses_thread_tag(c, bind[i])) {
      convfail(c, "its reduction variable %s is bound to a thread index, but the loops "
                  "around it do not form a cross-thread reduction (perfectly nested "
                  "reduction loops over a `+ * min max` update)", b->iters[i].var->name);
      goto done;
    }
    if (!push_map(c, b->iters[i].var, bind[i])) goto done;
  }
  lw_stmt *parts[2] = {NULL, NULL};
  if (b->init) {
    dg_expr *cond = NULL;
    for (int i = 0; i < b->n_iters; i++) {
      if (b->iters[i].kind != DG_ITER_REDUCE) continue;
      dg_expr *eq = ir_bin(f, DG_EXPR_EQ, bind[i], ir_int_t(f, 0, bind[i]->dtype));
      cond = cond ? ir_bin(f, DG_EXPR_AND, cond, eq) : eq;
    }
    lw_stmt *init = lower_conv_stmt(c, b->init);
    if (c->failed) goto done;
    if (cond) {
      cond = ir_simplify(f, cond, &c->ranges);
      int64_t v;
      if (ir_is_const_int(cond, &v) && cond->dtype == DG_BOOL) init = v ? init : NULL;
      else init = lw_if(f, cond, init, NULL);
    }
    parts[0] = init;
  }
  parts[1] = lower_conv_stmt(c, b->body);
  if (c->failed) goto done;
  out = lw_seq(f, parts, 2);
  if (b->predicate) {
    dg_expr *p = lower_conv_expr(c, b->predicate);
    int64_t v;
    if (!(ir_is_const_int(p, &v) && v)) out = lw_if(f, p, out, NULL);
  }
done:
  c->n_map = map0;
  c->block = outer;
  return c->failed ? NULL : out;
}

/* A statement that is a software-pipelined loop: in the body of another
 * pipelined loop it stands for three parts, the prologue, body and
 * epilogue it becomes (TVM's InjectSoftwarePipeline rewrites inner loops
 * first and flattens the block of a nested pipeline into the outer's
 * parts). */
static bool nested_pipeline(const dg_stmt *s) {
  return s->kind == DG_STMT_FOR && ir_anns_get(&s->anns, "software_pipeline_stage");
}

/* A loop's software-pipeline annotations (software_pipeline_stage/order,
 * software_pipeline_async_stages): 1 with *stage, *order (n entries) and
 * *async (n_async) set, 0 when it has none, -1 (c->failed) when they are
 * malformed. */
static int pipeline_anns(lw_conv *c, const dg_stmt *s, const dg_ann **stage, const dg_ann **order,
                         const dg_ann **async) {
  *stage = ir_anns_get(&s->anns, "software_pipeline_stage");
  *order = ir_anns_get(&s->anns, "software_pipeline_order");
  *async = ir_anns_get(&s->anns, "software_pipeline_async_stages");
  if (!*stage && !*order) return 0;
  const char *name = s->loop_var->name;
  if (!*stage || !*order)
    return convfail(c, "loop %s has software_pipeline_%s but no software_pipeline_%s", name,
                    *stage ? "stage" : "order", *stage ? "order" : "stage"), -1;
  if ((*stage)->kind != DG_ANN_INTS || (*order)->kind != DG_ANN_INTS ||
      (*async && (*async)->kind != DG_ANN_INTS))
    return convfail(c, "loop %s: software pipeline annotations must be integer arrays", name), -1;
  if ((*stage)->nints != (*order)->nints)
    return convfail(c, "loop %s: software_pipeline_stage has %d entries, software_pipeline_order "
                       "%d", name, (*stage)->nints, (*order)->nints), -1;
  if (s->loop_kind != DG_LOOP_SERIAL && s->loop_kind != DG_LOOP_UNROLLED)
    return convfail(c, "loop %s is software-pipelined but is not a serial loop", name), -1;
  int n = (*stage)->nints;
  int nb = s->body && s->body->kind == DG_STMT_SEQ ? s->body->n : 1;
  int parts = 0;
  for (int i = 0; s->body && i < nb; i++)
    parts += nested_pipeline(s->body->kind == DG_STMT_SEQ ? s->body->stmts[i] : s->body) ? 3 : 1;
  /* one entry per statement (a nested loop one part, pipelined whole by
   * the outer loop) or TVM's count of the flattened parts */
  if (!s->body || s->body->kind != DG_STMT_SEQ || (parts != n && nb != n))
    return convfail(c, "loop %s: its software pipeline annotations name %d statements, its body "
                       "has %d (TVM's InjectSoftwarePipeline needs a sequence of as many, a "
                       "nested pipelined loop counting as its prologue, body and epilogue)",
                    name, n, parts), -1;
  return 1;
}

/* The pipelined loop's body, converted part by part so that the pipeline
 * pass finds each annotated statement (dg_stmt) among the flattened ones. */
static lw_stmt *conv_pipeline_body(lw_conv *c, const dg_stmt *s, int *len) {
  dg_func *f = c->p->f;
  const dg_stmt *b = s->body;
  lw_stmt **xs = DG_ANEWN(f->arena, lw_stmt *, b->n);
  const dg_ann *pst = ir_anns_get(&s->anns, "software_pipeline_stage");
  bool flat = pst->nints != b->n; /* TVM's count: nested loops flattened */
  for (int i = 0, j = 0; i < b->n; i++) {
    xs[i] = lower_conv_stmt(c, b->stmts[i]);
    if (c->failed) return NULL;
    len[j++] = !xs[i] ? 0 : xs[i]->kind == LW_SEQ ? xs[i]->n : 1;
    /* a nested pipelined loop: one statement, the loop, and two empty
     * entries that the pipeline pass fills with its body and epilogue */
    if (flat && nested_pipeline(b->stmts[i])) {
      len[j++] = 0;
      len[j++] = 0;
    }
  }
  return lw_seq(f, xs, b->n);
}

static lw_stmt *conv_for(lw_conv *c, const dg_stmt *s) {
  dg_func *f = c->p->f;
  const dg_ann *pst, *por, *pas;
  int piped = pipeline_anns(c, s, &pst, &por, &pas);
  if (piped < 0) return NULL;
  bool matched = false;
  lw_stmt *red = lower_cross_thread_reduction(c, s, &matched, c->st);
  if (matched) {
    if (!red) c->failed = true;
    return red;
  }
  const dg_ann *ms = ir_anns_get(&s->anns, "pragma_auto_unroll_max_step");
  const dg_ann *ex = ir_anns_get(&s->anns, "pragma_unroll_explicit");
  int64_t max_step = ms && ms->kind == DG_ANN_INT ? ms->i : -1;
  int expl = ex && ex->kind == DG_ANN_INT ? ex->i != 0 : -1;
  if (s->loop_kind == DG_LOOP_THREAD &&
      (dg_thread_tag_is_block(s->tag) || dg_thread_tag_is_thread(s->tag))) {
    dg_var *tv = c->k->tag_var[s->tag];
    DG_ASSERT(tv); /* prescan saw every bound loop */
    unsigned saved = c->tags_in_scope;
    c->tags_in_scope |= 1u << s->tag;
    if (!push_map(c, s->loop_var, ir_var(f, tv))) return NULL;
    lw_stmt *body = lower_conv_stmt(c, s->body);
    c->n_map--;
    c->tags_in_scope = saved;
    /* The loop goes, its unroll region stays: every loop under it. */
    body = lw_with_unroll(f, body, max_step, expl);
    return body;
  }
  /* A serial loop of one iteration is its body with the variable at 0
   * (one that is pipelined stays, as in TVM: its stages are still
   * multi-buffered). */
  if (s->extent == 1 && !piped &&
      (s->loop_kind == DG_LOOP_SERIAL || s->loop_kind == DG_LOOP_UNROLLED ||
       s->loop_kind == DG_LOOP_PARALLEL)) {
    if (!push_map(c, s->loop_var, ir_int_t(f, 0, s->loop_var->dtype))) return NULL;
    lw_stmt *body = lower_conv_stmt(c, s->body);
    c->n_map--;
    body = lw_with_unroll(f, body, max_step, expl);
    return body;
  }
  lw_loop_kind kind = LW_LOOP_SERIAL;
  if (s->loop_kind == DG_LOOP_UNROLLED) kind = LW_LOOP_UNROLLED;
  else if (s->loop_kind == DG_LOOP_VECTORIZED) kind = LW_LOOP_VECTORIZED;
  else if (s->loop_kind == DG_LOOP_THREAD) kind = LW_LOOP_VTHREAD;
  if (kind == LW_LOOP_VTHREAD && s->extent > c->k->max_vthread) c->k->max_vthread = s->extent;
  if (!push_range(c, s->loop_var, s->extent)) return NULL;
  int n = piped ? pst->nints : 0;
  int *len = piped ? DG_ANEWN(f->arena, int, n) : NULL;
  lw_stmt *body = piped ? conv_pipeline_body(c, s, len) : lower_conv_stmt(c, s->body);
  ir_ranges_pop(&c->ranges, 1);
  if (c->failed) return NULL;
  lw_stmt *l = lw_for(f, s->loop_var, s->extent, kind, body);
  l->tag = kind == LW_LOOP_VTHREAD ? s->tag : DG_TAG_NONE;
  if (max_step >= 0) l->unroll_max_step = max_step;
  if (expl >= 0) l->unroll_explicit = expl;
  if (piped) {
    l->pipe_n = n;
    l->pipe_len = len;
    l->pipe_stage = DG_ANEWN(f->arena, int, n);
    l->pipe_order = DG_ANEWN(f->arena, int, n);
    for (int i = 0; i < n; i++) {
      int64_t st = pst->ints[i], od = por->ints[i];
      if (st < 0 || st > 64 || od < 0 || od >= n)
        return convfail(c, "loop %s: software pipeline stage %" PRId64 " / order %" PRId64
                           " of statement %d out of range (stages 0..64, orders 0..%d)",
                        s->loop_var->name, st, od, i, n - 1), NULL;
      l->pipe_stage[i] = (int)st;
      l->pipe_order[i] = (int)od;
    }
    l->pipe_n_async = pas ? pas->nints : 0;
    l->pipe_async = DG_ANEWN(f->arena, int, l->pipe_n_async > 0 ? l->pipe_n_async : 1);
    for (int i = 0; i < l->pipe_n_async; i++)
      l->pipe_async[i] = pas->ints[i] < 0 || pas->ints[i] > 64 ? -1 : (int)pas->ints[i];
  }
  return l;
}

lw_stmt *lower_conv_stmt(lw_conv *c, const dg_stmt *s) {
  if (!s || c->failed) return NULL;
  dg_func *f = c->p->f;
  switch (s->kind) {
    case DG_STMT_FOR: return conv_for(c, s);
    case DG_STMT_SEQ: {
      lw_stmt **xs = DG_ANEWN(f->arena, lw_stmt *, s->n > 0 ? s->n : 1);
      for (int i = 0; i < s->n; i++) {
        xs[i] = lower_conv_stmt(c, s->stmts[i]);
        if (c->failed) return NULL;
      }
      return lw_seq(f, xs, s->n);
    }
    case DG_STMT_BLOCK: return conv_block(c, s);
    case DG_STMT_STORE: {
      if (!c->in_tensorized && !lower_wmma_check_store(c, s)) return NULL;
      dg_expr **idx = DG_ANEWN(f->arena, dg_expr *, s->nidx > 0 ? s->nidx : 1);
      for (int i = 0; i < s->nidx; i++) idx[i] = lower_conv_expr(c, s->idx[i]);
      return lw_store(f, s->buf, idx, s->nidx, lower_conv_expr(c, s->value));
    }
    case DG_STMT_IF: {
      lw_stmt *t = lower_conv_stmt(c, s->then_s);
      lw_stmt *e = lower_conv_stmt(c, s->else_s);
      if (c->failed) return NULL;
      return lw_if(f, lower_conv_expr(c, s->cond), t, e);
    }
  }
  return NULL;
}

/* The largest vectorized access: lanes times the widest element stored or
 * loaded under the loop. */
static int64_t widest_bytes(const dg_expr *e) {
  if (!e) return 0;
  int64_t w = 0;
  if (e->kind == DG_EXPR_LOAD) w = dg_dtype_bytes(e->buf->dtype);
  if (e->kind == DG_EXPR_LOAD || e->kind == DG_EXPR_CALL)
    for (int i = 0; i < e->nargs; i++) {
      int64_t x = widest_bytes(e->args[i]);
      if (x > w) w = x;
    }
  int64_t a = widest_bytes(e->a), b = widest_bytes(e->b), cc = widest_bytes(e->c);
  if (a > w) w = a;
  if (b > w) w = b;
  if (cc > w) w = cc;
  return w;
}

static int64_t stmt_widest(const lw_stmt *s) {
  if (!s) return 0;
  int64_t w = 0;
  switch (s->kind) {
    case LW_SEQ:
      for (int i = 0; i < s->n; i++) {
        int64_t x = stmt_widest(s->stmts[i]);
        if (x > w) w = x;
      }
      return w;
    case LW_FOR: return stmt_widest(s->body);
    case LW_IF: {
      int64_t a = stmt_widest(s->then_s), b = stmt_widest(s->else_s);
      return a > b ? a : b;
    }
    case LW_STORE: {
      w = dg_dtype_bytes(s->buf->dtype);
      int64_t x = widest_bytes(s->value);
      return x > w ? x : w;
    }
    default: return 0;
  }
}

static void vector_facts(lw_kernel *k, const lw_stmt *s) {
  if (!s) return;
  switch (s->kind) {
    case LW_SEQ:
      for (int i = 0; i < s->n; i++) vector_facts(k, s->stmts[i]);
      return;
    case LW_FOR:
      if (s->loop_kind == LW_LOOP_VECTORIZED) {
        int64_t bytes = s->extent * stmt_widest(s->body);
        if (bytes > k->max_vector_bytes) {
          k->max_vector_bytes = bytes;
          k->vector_loop = s->var->name;
        }
      }
      vector_facts(k, s->body);
      return;
    case LW_IF:
      vector_facts(k, s->then_s);
      vector_facts(k, s->else_s);
      return;
    default: return;
  }
}

bool lower_convert_kernel(lw_program *p, lw_kernel *k, const dg_stmt *root_stmt,
                          dg_status *st) {
  lw_conv *c = dg_calloc(1, sizeof(*c));
  c->p = p;
  c->k = k;
  c->st = st;
  for (int d = 0; d < 3; d++) k->grid[d] = k->block[d] = 1;
  k->max_vthread = 1;
  bool ok = prescan(c, root_stmt, false);
  bool any_bound = false;
  for (int t = 0; t < DG_TAG_COUNT; t++)
    if (k->tag_var[t]) {
      any_bound = true;
      ir_ranges_push(&c->ranges, k->tag_var[t], 0,
                     (dg_thread_tag_is_block((dg_thread_tag)t) ? k->grid : k->block)
                         [tag_dim((dg_thread_tag)t)] - 1);
    }
  if (ok && !any_bound)
    ok = convfail(c, "no loop is bound to blockIdx or threadIdx (bind the loops of every "
                     "block, as MetaSchedule's RewriteUnboundBlock does)");
  if (ok) {
    k->body = lower_conv_stmt(c, root_stmt);
    ok = !c->failed && k->body;
    if (!ok && !c->failed) ok = convfail(c, "nothing to run");
  }
  if (ok) vector_facts(k, k->body);
  free(c);
  return ok;
}
