/* semantic.c: checks against the kernel, before anything runs. After the
 * kernel-free typing, one symbolic pass follows the edits: blocks named by
 * `block` must exist; `loops` of a kernel block whose loop nest no earlier
 * edit changed gets the kernel's extents (and its count must match);
 * extents then follow split (factors, `_` inferred), tile, thread_split and
 * fuse (products). With those: tile and sample_tile factors multiply to the
 * loop's extent and respect max=; explicit split factors cover it; thread
 * extents stay within CUDA's limits (threadIdx.x/y 1024, threadIdx.z 64,
 * blockIdx.y/z 65535); buffer indices exist in the block's regions; scopes
 * suit the target and the stage (wmma.accumulator is written, matrix_a/b
 * are read; the CPU target has global and local only).
 *
 * Soundness over reach: when an edit could change what the pass tracks
 * (raw, rfactor, blockize, tensorize, add_unit_loop, a loop of unknown
 * origin), the facts it touches become unknown and nothing is checked
 * against them; replay remains the final judge. */
#include <string.h>

#include "tsel/tsel_impl.h"

typedef struct {
  const dg_block *b;
  const dg_stmt *loops[64];
  int n_loops;
  bool dirty; /* its loop nest may differ from the kernel's */
} kblock;

typedef struct {
  const tsel_graph *g;
  const dg_func *k;
  tsel_target target;
  dg_status *st;
  tsel_env env;
  tsel_facts *F;
  kblock *kb;
  int n_kb, cap_kb;
  bool all_dirty, regions_dirty, blocks_created;
  const tsel_edit *e;
  int num;
} sem;

static void collect(sem *S, const dg_stmt *s, const dg_stmt **stack, int depth) {
  if (!s) return;
  switch (s->kind) {
    case DG_STMT_FOR:
      if (depth < 64) stack[depth] = s;
      collect(S, s->body, stack, depth + 1);
      break;
    case DG_STMT_SEQ:
      for (int i = 0; i < s->n; i++) collect(S, s->stmts[i], stack, depth);
      break;
    case DG_STMT_IF:
      collect(S, s->then_s, stack, depth);
      collect(S, s->else_s, stack, depth);
      break;
    case DG_STMT_BLOCK: {
      if (S->n_kb == S->cap_kb) {
        S->cap_kb = S->cap_kb ? 2 * S->cap_kb : 16;
        S->kb = dg_realloc(S->kb, sizeof(kblock) * (size_t)S->cap_kb);
      }
      kblock *k = &S->kb[S->n_kb++];
      memset(k, 0, sizeof *k);
      k->b = s->block;
      k->n_loops = depth > 64 ? 64 : depth;
      memcpy(k->loops, stack, sizeof(dg_stmt *) * (size_t)k->n_loops);
      /* loops restart below a block (GetLoops stops at the nearest block) */
      collect(S, s->block->body, stack, 0);
      break;
    }
    case DG_STMT_STORE: break;
  }
}

static int kb_index(const sem *S, const dg_block *b) {
  for (int i = 0; i < S->n_kb; i++)
    if (S->kb[i].b == b) return i;
  return -1;
}

#define EFAIL_AT(S, v, ...) tsel_fail_at((S)->st, (S)->g, (v)->line, (v)->col, (S)->e, (S)->num, __VA_ARGS__)

static tsel_ofact *fact(sem *S, const tsel_val *ref) {
  DG_ASSERT(ref->kind == TV_REF);
  return &S->F->of[ref->i - 1][ref->sub < 0 ? 0 : ref->sub];
}

static const char *refname(sem *S, const tsel_val *r) {
  return r->sub < 0 ? dg_arena_printf(S->F->a, "t%lld", (long long)r->i)
                    : dg_arena_printf(S->F->a, "t%lld.%d", (long long)r->i, r->sub);
}

/* A loop's structure changes: the nests of the kernel blocks under it. */
static void mark_dirty(sem *S, const tsel_val *loop) {
  const dg_stmt *o = fact(S, loop)->orig;
  if (!o) {
    S->all_dirty = true;
    return;
  }
  for (int i = 0; i < S->n_kb; i++)
    for (int k = 0; k < S->kb[i].n_loops; k++)
      if (S->kb[i].loops[k] == o) S->kb[i].dirty = true;
}

enum { PROD_LIMIT = 40 }; /* products beyond 2^40 are not extents of anything */

/* *prod *= x for x >= 1; false when it would pass 2^40. */
static bool mul_ok(int64_t *prod, int64_t x) {
  if (x > (INT64_C(1) << PROD_LIMIT) / *prod) return false;
  *prod *= x;
  return true;
}

static int64_t int_of(sem *S, const tsel_val *v) {
  if (v->kind == TV_INT) return v->i;
  if (v->kind == TV_REF) return fact(S, v)->val;
  return -1;
}

static bool thread_limit(sem *S, const tsel_val *at, const char *axis, int64_t ext) {
  if (ext < 0) return true;
  dg_thread_tag t;
  if (!dg_thread_tag_from_name(axis, strlen(axis), &t)) return true;
  int64_t lim = -1;
  switch (t) {
    case DG_TAG_THREAD_X: case DG_TAG_THREAD_Y: lim = 1024; break;
    case DG_TAG_THREAD_Z: lim = 64; break;
    case DG_TAG_BLOCK_X: lim = INT64_C(2147483647); break;
    case DG_TAG_BLOCK_Y: case DG_TAG_BLOCK_Z: lim = 65535; break;
    default: break;
  }
  if (lim > 0 && ext > lim)
    return EFAIL_AT(S, at, "%lld %s exceeds the limit of %lld", (long long)ext, axis, (long long)lim);
  if (dg_thread_tag_is_thread(t)) {
    int ax = t - DG_TAG_THREAD_X;
    if (ext > S->F->thread_ext[ax]) S->F->thread_ext[ax] = ext;
  }
  return true;
}

static bool scope_ok(sem *S, const tsel_val *at, const char *scope, bool is_read, bool is_write) {
  if (S->target == TSEL_TARGET_CPU && strcmp(scope, "global") != 0 && strcmp(scope, "local") != 0)
    return EFAIL_AT(S, at, "scope %s is not available on the cpu target (global, local)", scope);
  if (is_read && strcmp(scope, "wmma.accumulator") == 0)
    return EFAIL_AT(S, at, "a read stage cannot be wmma.accumulator (use wmma.matrix_a or wmma.matrix_b)");
  if (is_write && (strcmp(scope, "wmma.matrix_a") == 0 || strcmp(scope, "wmma.matrix_b") == 0))
    return EFAIL_AT(S, at, "a write stage cannot be %s (use wmma.accumulator)", scope);
  return true;
}

/* Checks region index i of block ref b; sets *buf to the buffer if known. */
static bool region_ok(sem *S, const tsel_val *bref, const tsel_val *iv, bool write, const dg_buffer **buf) {
  *buf = NULL;
  tsel_ofact *b = fact(S, bref);
  int n = write ? b->n_writes : b->n_reads;
  if (b->block && S->regions_dirty) n = -1;
  if (n < 0) return true;
  if (iv->i < 0 || iv->i >= n)
    return EFAIL_AT(S, iv, "block %s has %d %s buffer%s; index %lld does not exist",
                    b->block ? b->block->name : refname(S, bref), n, write ? "write" : "read",
                    n == 1 ? "" : "s", (long long)iv->i);
  if (b->block) *buf = write ? b->block->writes[iv->i].buf : b->block->reads[iv->i].buf;
  else if (b->buf) *buf = b->buf;
  return true;
}

static void set_cache_out(sem *S, tsel_ofact *o, const dg_buffer *buf) {
  o->n_reads = o->n_writes = 1;
  o->buf = buf;
  S->blocks_created = true;
}

static bool tile_ok(sem *S, const tsel_val *loop, const tsel_val *fs, const tsel_val *maxv) {
  int64_t ext = fact(S, loop)->ext, prod = 1;
  for (int i = 0; i < fs->n; i++)
    if (!mul_ok(&prod, fs->items[i].i)) return EFAIL_AT(S, fs, "tile factors are too large");
  if (ext >= 0 && prod != ext)
    return EFAIL_AT(S, fs, "tile factors multiply to %lld, but loop %s has extent %lld", (long long)prod,
                    refname(S, loop), (long long)ext);
  if (maxv && maxv->i > 0 && fs->items[fs->n - 1].i > maxv->i)
    return EFAIL_AT(S, &fs->items[fs->n - 1], "innermost factor %lld exceeds max=%lld",
                    (long long)fs->items[fs->n - 1].i, (long long)maxv->i);
  return true;
}

static bool step(sem *S, const tsel_edit *e, int num) {
  S->e = e;
  S->num = num;
  const tsel_out *o = &S->env.outs[num - 1];
  tsel_ofact *of = DG_ANEWN(S->F->a, tsel_ofact, o->n_out ? o->n_out : 1);
  for (int k = 0; k < o->n_out; k++) of[k] = (tsel_ofact){.ext = -1, .val = -1, .n_reads = -1, .n_writes = -1};
  S->F->of[num - 1] = of;
  S->F->value[num - 1] = -1;
  const tsel_val *A = e->args;
  const dg_buffer *buf;
  switch ((tsel_op)e->op) {
    case TSEL_OP_BLOCK: {
      const tsel_kw *fk = tsel_edit_kw(e, "func");
      if (fk && strcmp(fk->val.s, S->k->name) != 0)
        return EFAIL_AT(S, &fk->val, "no function '%s' (the kernel is '%s')", fk->val.s, S->k->name);
      const dg_block *b = ir_find_block(S->k, A[0].s);
      if (!b && !S->blocks_created) {
        char names[200] = "";
        for (int i = 0; i < S->n_kb; i++) {
          size_t l = strlen(names);
          if (l + 40 < sizeof names) snprintf(names + l, sizeof names - l, "%s%s", l ? ", " : "", S->kb[i].b->name);
        }
        return EFAIL_AT(S, &A[0], "the kernel has no block \"%s\" (blocks: %s)", A[0].s, names);
      }
      if (b) {
        of[0].block = b;
        of[0].n_reads = b->n_reads;
        of[0].n_writes = b->n_writes;
      }
      break;
    }
    case TSEL_OP_LOOPS: {
      const tsel_ofact *b = fact(S, &A[0]);
      int ki = b->block ? kb_index(S, b->block) : -1;
      if (ki < 0 || S->kb[ki].dirty || S->all_dirty) break;
      const kblock *kb = &S->kb[ki];
      if (kb->n_loops != o->n_out)
        return EFAIL_AT(S, &A[1], "block %s has %d loops here, not %d", kb->b->name, kb->n_loops, o->n_out);
      for (int k = 0; k < o->n_out; k++) {
        of[k].ext = kb->loops[k]->extent;
        of[k].orig = kb->loops[k];
      }
      break;
    }
    case TSEL_OP_SPLIT: {
      int64_t ext = fact(S, &A[0])->ext, prod = 1;
      int none = -1;
      bool known = true;
      for (int i = 0; i < A[1].n; i++) {
        const tsel_val *f = &A[1].items[i];
        int64_t v = int_of(S, f);
        if (f->kind == TV_NONE) none = i;
        else if (v < 1) known = false; /* replay rejects non-positive factors */
        else if (!mul_ok(&prod, v)) return EFAIL_AT(S, f, "factors are too large");
        of[i].ext = v >= 1 ? v : -1;
        of[i].orig = fact(S, &A[0])->orig;
      }
      if (known && ext >= 0) {
        if (none >= 0) of[none].ext = ext / prod + (ext % prod != 0);
        else if (prod < ext)
          return EFAIL_AT(S, &A[1], "factors multiply to %lld, less than the extent %lld of loop %s",
                          (long long)prod, (long long)ext, refname(S, &A[0]));
      } else if (none >= 0) {
        of[none].ext = -1;
      }
      mark_dirty(S, &A[0]);
      break;
    }
    case TSEL_OP_TILE: case TSEL_OP_SAMPLE_TILE: {
      const tsel_kw *mk = tsel_edit_kw(e, "max");
      if (!tile_ok(S, &A[0], &A[1], &mk->val)) return false;
      for (int k = 0; k < o->n_out; k++) {
        if (e->op == TSEL_OP_TILE) {
          of[k].ext = A[1].items[k].i;
          of[k].orig = fact(S, &A[0])->orig;
        } else {
          of[k].val = A[1].items[k].i;
        }
      }
      if (e->op == TSEL_OP_TILE) mark_dirty(S, &A[0]);
      break;
    }
    case TSEL_OP_THREAD_SPLIT: {
      int64_t v = tsel_edit_kw(e, "")->val.i, ext = fact(S, &A[0])->ext;
      S->F->value[num - 1] = v;
      if (!thread_limit(S, &tsel_edit_kw(e, "")->val, "threadIdx.x", v)) return false;
      of[0].ext = ext >= 0 ? ext / v + (ext % v != 0) : -1;
      of[1].ext = v;
      of[0].orig = of[1].orig = fact(S, &A[0])->orig;
      mark_dirty(S, &A[0]);
      break;
    }
    case TSEL_OP_FUSE: case TSEL_OP_FUSE_BIND: {
      int nl = e->op == TSEL_OP_FUSE_BIND ? e->n_args - 1 : e->n_args;
      int64_t prod = 1;
      for (int i = 0; i < nl; i++) {
        int64_t x = fact(S, &A[i])->ext;
        if (x < 1 || prod < 0 || !mul_ok(&prod, x)) prod = -1;
      }
      of[0].ext = prod;
      of[0].orig = fact(S, &A[0])->orig;
      if (e->op == TSEL_OP_FUSE_BIND && !thread_limit(S, &A[nl], A[nl].s, prod)) return false;
      if (nl > 1)
        for (int i = 0; i < nl; i++) mark_dirty(S, &A[i]);
      break;
    }
    case TSEL_OP_REORDER:
      for (int i = 0; i < e->n_args; i++) mark_dirty(S, &A[i]);
      break;
    case TSEL_OP_BIND:
      if (!thread_limit(S, &A[1], A[1].s, fact(S, &A[0])->ext)) return false;
      break;
    case TSEL_OP_CACHE_READ: case TSEL_OP_CACHE_WRITE: case TSEL_OP_CACHE_READ_AT: case TSEL_OP_CACHE_WRITE_AT: {
      bool rd = e->op == TSEL_OP_CACHE_READ || e->op == TSEL_OP_CACHE_READ_AT;
      if (!region_ok(S, &A[0], &A[1], !rd, &buf) || !scope_ok(S, &A[2], A[2].s, rd, !rd)) return false;
      set_cache_out(S, &of[0], buf);
      break;
    }
    case TSEL_OP_REINDEX:
      if (!region_ok(S, &A[0], &A[1], strcmp(A[2].s, "write") == 0, &buf)) return false;
      set_cache_out(S, &of[0], buf);
      break;
    case TSEL_OP_SET_SCOPE:
      if (!region_ok(S, &A[0], &A[1], true, &buf) || !scope_ok(S, &A[2], A[2].s, false, false)) return false;
      break;
    case TSEL_OP_STORAGE_ALIGN:
      if (!region_ok(S, &A[0], &A[1], true, &buf)) return false;
      if (buf && (A[2].i < 0 || A[2].i >= buf->ndim))
        return EFAIL_AT(S, &A[2], "buffer %s has %d dimensions; axis %lld does not exist", buf->name, buf->ndim,
                        (long long)A[2].i);
      if (A[3].i < 1) return EFAIL_AT(S, &A[3], "the alignment factor must be positive");
      break;
    case TSEL_OP_COMPUTE_AT: case TSEL_OP_REVERSE_COMPUTE_AT: {
      const tsel_ofact *b = fact(S, &A[0]);
      int ki = b->block ? kb_index(S, b->block) : -1;
      if (ki >= 0) S->kb[ki].dirty = true;
      break;
    }
    case TSEL_OP_INLINE: case TSEL_OP_REVERSE_INLINE: S->regions_dirty = true; break;
    case TSEL_OP_DECOMPOSE_REDUCTION: S->blocks_created = true; break;
    case TSEL_OP_SAMPLE: case TSEL_OP_COOP: case TSEL_OP_UNROLL_STEPS:
      S->F->value[num - 1] = tsel_edit_kw(e, "")->val.i;
      if (e->op == TSEL_OP_SAMPLE) of[0].val = S->F->value[num - 1];
      break;
    case TSEL_OP_ADD_UNIT_LOOP: case TSEL_OP_RFACTOR: case TSEL_OP_BLOCKIZE: case TSEL_OP_TENSORIZE:
    case TSEL_OP_RAW:
      S->all_dirty = S->regions_dirty = S->blocks_created = true;
      break;
    case TSEL_OP_CHILDREN: case TSEL_OP_PRODUCERS: case TSEL_OP_CONSUMERS: case TSEL_OP_PARALLEL:
    case TSEL_OP_VECTORIZE: case TSEL_OP_UNROLL: case TSEL_OP_ANNOTATE: case TSEL_OP_UNANNOTATE:
    case TSEL_OP_SAMPLE_LOC: case TSEL_OP_POSTPROC:
      break;
    case TSEL_OP_COUNT: DG_UNREACHABLE();
  }
  if (o->alias_of >= 0) of[0] = *fact(S, &A[0]);
  return true;
}

bool tsel_semantic(const tsel_graph *g, const dg_func *kernel, tsel_target target, tsel_facts *facts,
                   dg_status *st) {
  dg_status_ok(st);
  tsel_facts local;
  tsel_facts *F = facts ? facts : &local;
  memset(F, 0, sizeof *F);
  F->a = dg_arena_new();
  F->n_edits = g->n_edits;
  F->of = DG_ANEWN(F->a, tsel_ofact *, g->n_edits ? g->n_edits : 1);
  F->value = DG_ANEWN(F->a, int64_t, g->n_edits ? g->n_edits : 1);
  sem S = {.g = g, .k = kernel, .target = target, .st = st, .F = F};
  tsel_env_init(&S.env, g->n_edits);
  bool ok = tsel_typecheck(g, &S.env, st);
  if (ok) {
    const dg_stmt *stack[64];
    collect(&S, kernel->body, stack, 0);
    for (int i = 0; i < g->n_edits && ok; i++) ok = step(&S, &g->edits[i], i + 1);
  }
  tsel_env_free(&S.env);
  free(S.kb);
  if (!facts || !ok) tsel_facts_free(F);
  return ok;
}

void tsel_facts_free(tsel_facts *f) {
  if (!f) return;
  dg_arena_free(f->a);
  memset(f, 0, sizeof *f);
}
