/* program.c: lower_program, the driver: a scheduled kernel split into
 * device launches (TVM's SplitHostDevice: every statement of the root block
 * is one launch), the root's global allocations turned into device
 * allocations of the program, shared copies given their register stages
 * (local_stage.c, on the blocks), and the passes run on every launch in TVM's
 * order (software pipelining after compaction, before the launch's limits
 * are checked, so that they count the multi-buffered stages), then the
 * GPU's limits checked.
 *
 * It works on a private copy of the kernel; the input is not changed. A
 * shared or local buffer of the root used by two launches is an error
 * (shared memory does not outlive a launch).
 */
#include <string.h>

#include "lower/lower_impl.h"

static bool stmt_uses_buf(const dg_stmt *s, const dg_buffer *b);

static bool expr_uses_buf(const dg_expr *e, const dg_buffer *b) {
  if (!e) return false;
  if (e->kind == DG_EXPR_LOAD && e->buf == b) return true;
  if (e->kind == DG_EXPR_LOAD || e->kind == DG_EXPR_CALL) {
    for (int i = 0; i < e->nargs; i++)
      if (expr_uses_buf(e->args[i], b)) return true;
    return false;
  }
  return expr_uses_buf(e->a, b) || expr_uses_buf(e->b, b) || expr_uses_buf(e->c, b);
}

static bool stmt_uses_buf(const dg_stmt *s, const dg_buffer *b) {
  if (!s) return false;
  switch (s->kind) {
    case DG_STMT_FOR: return stmt_uses_buf(s->body, b);
    case DG_STMT_SEQ:
      for (int i = 0; i < s->n; i++)
        if (stmt_uses_buf(s->stmts[i], b)) return true;
      return false;
    case DG_STMT_BLOCK:
      return expr_uses_buf(s->block->predicate, b) || stmt_uses_buf(s->block->init, b) ||
             stmt_uses_buf(s->block->body, b);
    case DG_STMT_STORE:
      if (s->buf == b || expr_uses_buf(s->value, b)) return true;
      for (int i = 0; i < s->nidx; i++)
        if (expr_uses_buf(s->idx[i], b)) return true;
      return false;
    case DG_STMT_IF:
      return expr_uses_buf(s->cond, b) || stmt_uses_buf(s->then_s, b) ||
             stmt_uses_buf(s->else_s, b);
  }
  return false;
}

/* Which of the buffers want[0..n) a launch body reads (loads, allreduce
 * src and scratch) or writes (stores, allreduce dst), in one walk that stops
 * once all are seen: used[i] set for want[i]; left counts the unseen. */
typedef struct {
  dg_buffer *const *want;
  bool *used;
  int n, left;
} buf_use;

static void use_buf(buf_use *u, const dg_buffer *b) {
  for (int i = 0; i < u->n; i++)
    if (u->want[i] == b && !u->used[i]) {
      u->used[i] = true;
      u->left--;
    }
}

static void use_expr(buf_use *u, const dg_expr *e) {
  if (!e || !u->left) return;
  if (e->kind == DG_EXPR_LOAD) use_buf(u, e->buf);
  if (e->kind == DG_EXPR_LOAD || e->kind == DG_EXPR_CALL) {
    for (int i = 0; i < e->nargs; i++) use_expr(u, e->args[i]);
    return;
  }
  use_expr(u, e->a);
  use_expr(u, e->b);
  use_expr(u, e->c);
}

static void use_stmt(buf_use *u, const lw_stmt *s) {
  if (!s || !u->left) return;
  switch (s->kind) {
    case LW_SEQ:
      for (int i = 0; i < s->n; i++) use_stmt(u, s->stmts[i]);
      return;
    case LW_FOR:
    case LW_WMMA: use_stmt(u, s->body); return;
    case LW_IF:
      use_expr(u, s->cond);
      use_stmt(u, s->then_s);
      use_stmt(u, s->else_s);
      return;
    case LW_STORE:
      use_buf(u, s->buf);
      for (int i = 0; i < s->nidx; i++) use_expr(u, s->idx[i]);
      use_expr(u, s->value);
      return;
    case LW_BARRIER:
    case LW_ASYNC_COMMIT:
    case LW_ASYNC_WAIT: return;
    case LW_ALLREDUCE:
      use_buf(u, s->src);
      use_buf(u, s->dst);
      use_buf(u, s->scratch);
      return;
  }
}

/* Every variable and buffer name of the kernel, so that fresh ones differ. */
static void collect_names_stmt(lw_program *p, const dg_stmt *s) {
  if (!s) return;
  switch (s->kind) {
    case DG_STMT_FOR:
      lower_names_add(p, s->loop_var->name);
      collect_names_stmt(p, s->body);
      return;
    case DG_STMT_SEQ:
      for (int i = 0; i < s->n; i++) collect_names_stmt(p, s->stmts[i]);
      return;
    case DG_STMT_BLOCK: {
      const dg_block *b = s->block;
      for (int i = 0; i < b->n_iters; i++) lower_names_add(p, b->iters[i].var->name);
      for (int i = 0; i < b->n_allocs; i++) lower_names_add(p, b->allocs[i]->name);
      collect_names_stmt(p, b->init);
      collect_names_stmt(p, b->body);
      return;
    }
    case DG_STMT_IF:
      collect_names_stmt(p, s->then_s);
      collect_names_stmt(p, s->else_s);
      return;
    case DG_STMT_STORE: return;
  }
}

static void kernel_free(lw_kernel *k) {
  free(k->params);
  free(k->shared);
  free(k->local);
  free(k->checks);
  free(k->aligns);
}

void lower_program_free(lw_program *p) {
  if (!p) return;
  for (int i = 0; i < p->n_kernels; i++) kernel_free(&p->kernels[i]);
  free(p->kernels);
  free(p->allocs);
  lower_names_free(p);
  if (p->f) ir_func_free(p->f);
  free(p);
}

typedef bool (*pass_fn)(lw_program *, lw_kernel *, dg_status *);

/* check: only the verdict is wanted; the launches' bodies are left
 * rolled (unrolling, barriers and the fragment indices only checked) and
 * without parameters. */
static lw_program *lower(const dg_func *in, const lower_opts *o, bool check, dg_status *st) {
  lower_opts defaults = {0};
  if (!o) o = &defaults;
  dg_status_ok(st);
  if (!ir_verify(in, st)) {
    dg_status_prefix(st, "lower");
    return NULL;
  }
  lw_program *p = dg_calloc(1, sizeof(*p));
  p->f = ir_func_clone(in);
  p->name = p->f->name;
  p->params = p->f->params;
  p->n_params = p->f->n_params;
  p->async_copy = (o->limits ? o->limits : &lower_limits_sm90)->async_copy;
  dg_block *root = ir_func_root(p->f);
  for (int i = 0; i < p->f->n_params; i++) lower_names_add(p, p->f->params[i]->name);
  for (int i = 0; i < root->n_allocs; i++) lower_names_add(p, root->allocs[i]->name);
  collect_names_stmt(p, root->body);
  /* TVM runs ManifestSharedMemoryLocalStage on block-level TIR, before
   * CompactBufferAllocation and InjectSoftwarePipeline: here on the
   * kernel's blocks, before conversion, so that the stages are launch
   * statements like the others and their buffers root allocations */
  if (!lower_manifest_local_stage(p, st)) goto fail;
  if (root->init || root->predicate || root->n_iters) {
    dg_fail(st, DG_ERR_INVALID, "lower: the root block has iteration variables, a predicate "
                                "or an init");
    goto fail;
  }
  /* the launches: one per statement of the root block */
  dg_stmt *const *tops = &root->body;
  int n_tops = 1;
  if (root->body && root->body->kind == DG_STMT_SEQ) {
    tops = root->body->stmts;
    n_tops = root->body->n;
  }
  p->kernels = dg_calloc((size_t)(n_tops > 0 ? n_tops : 1), sizeof(lw_kernel));
  for (int i = 0; i < root->n_allocs; i++)
    if (root->allocs[i]->scope == DG_SCOPE_GLOBAL) {
      p->allocs = dg_realloc(p->allocs, sizeof(*p->allocs) * (size_t)(p->n_allocs + 1));
      p->allocs[p->n_allocs++] = root->allocs[i];
    }
  for (int t = 0; t < n_tops; t++) {
    lw_kernel *k = &p->kernels[p->n_kernels++];
    k->name = dg_arena_printf(p->f->arena, "%s_kernel%d", p->name, t);
    /* the root's shared and local buffers this launch uses */
    for (int i = 0; i < root->n_allocs; i++) {
      dg_buffer *b = root->allocs[i];
      if (b->scope == DG_SCOPE_GLOBAL || !stmt_uses_buf(tops[t], b)) continue;
      for (int u = 0; u < n_tops; u++)
        if (u != t && stmt_uses_buf(tops[u], b)) {
          dg_fail(st, DG_ERR_INVALID,
                  "lower: buffer %s (scope %s) is used by launches %d and %d; it does not "
                  "outlive one launch",
                  b->name, dg_scope_name(b->scope), t < u ? t : u, t < u ? u : t);
          goto fail;
        }
      if (b->scope == DG_SCOPE_SHARED || b->scope == DG_SCOPE_SHARED_DYN) {
        k->shared = dg_realloc(k->shared, sizeof(*k->shared) * (size_t)(k->n_shared + 1));
        k->shared[k->n_shared++] = b;
      } else if (b->scope == DG_SCOPE_LOCAL || lower_scope_is_fragment(b->scope)) {
        k->local = dg_realloc(k->local, sizeof(*k->local) * (size_t)(k->n_local + 1));
        k->local[k->n_local++] = b;
      } else {
        dg_fail(st, DG_ERR_INVALID,
                "lower: buffer %s in scope %s cannot be allocated by a launch",
                b->name, dg_scope_name(b->scope));
        goto fail;
      }
    }
    if (!lower_convert_kernel(p, k, tops[t], st)) goto fail;
    static const pass_fn passes[] = {lower_wmma_lanes,      lower_compact_buffers,
                                     lower_inject_software_pipeline,
                                     lower_expand_vthreads, lower_vectorize,
                                     lower_async_copies,    lower_unroll,
                                     lower_insert_barriers, lower_wmma_finalize};
    /* the buffers are sized by compaction and multi-buffered by the
     * pipeline, and the other facts the limits need were collected by
     * conversion */
    size_t n_passes = DG_ARRAY_LEN(passes), n_sized = 3, n_rolled = 6;
    DG_ASSERT(passes[n_sized - 1] == lower_inject_software_pipeline &&
              passes[n_rolled] == lower_unroll);
    if (check) n_passes = n_rolled; /* unroll, barriers, finalize: checked below */
    for (size_t i = 0; i < n_sized; i++)
      if (!passes[i](p, k, st)) goto fail;
    /* the limits first: a launch past them (a convolution tile over the
     * shared memory, a tensor-core tile with hundreds of fragments) would
     * make vthread expansion and unrolling costly for nothing */
    if (!o->skip_verify && !lower_verify_kernel(k, o->limits, st)) goto fail;
    for (size_t i = n_sized; i < n_passes; i++)
      if (!passes[i](p, k, st)) goto fail;
    if (check) {
      int r = lower_wmma_check_unrolled(p, k, st);
      if (r == 0) goto fail;
      if (r < 0)
        for (size_t i = n_passes; i < DG_ARRAY_LEN(passes); i++)
          if (!passes[i](p, k, st)) goto fail;
      continue;
    }
    /* parameters: the program's and its device allocations this launch uses */
    int cap = p->n_params + p->n_allocs;
    k->params = dg_malloc(sizeof(*k->params) * (size_t)(cap > 0 ? cap : 1));
    dg_buffer **want = dg_malloc(sizeof(*want) * (size_t)(cap > 0 ? cap : 1));
    bool *used = dg_calloc((size_t)(cap > 0 ? cap : 1), sizeof(*used));
    for (int i = 0; i < p->n_params; i++) want[i] = p->params[i];
    for (int i = 0; i < p->n_allocs; i++) want[p->n_params + i] = p->allocs[i];
    buf_use u = {want, used, cap, cap};
    use_stmt(&u, k->body);
    for (int i = 0; i < cap; i++)
      if (used[i]) k->params[k->n_params++] = want[i];
    free(want);
    free(used);
  }
  if (!o->skip_verify && !lower_verify(p, o->limits, st)) goto fail;
  return p;
fail:
  lower_program_free(p);
  return NULL;
}

lw_program *lower_program(const dg_func *in, const lower_opts *o, dg_status *st) {
  return lower(in, o, false, st);
}

bool lower_check(const dg_func *in, const lower_opts *o, dg_status *st) {
  lw_program *p = lower(in, o, true, st);
  bool ok = p != NULL;
  lower_program_free(p);
  return ok;
}
