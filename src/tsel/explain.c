/* explain.c: why and expect lines from compiler-derived facts, by template.
 * The numbers come from two places: the symbolic pass of semantic.c (tile
 * factors and products, extents bound to thread axes, cooperative-fetch
 * vector widths, unroll steps) and a replay of the lowered trace on the
 * kernel (the elements each cache stage holds: the product of the extents
 * of the stage block's loops that its partner block does not share, i.e.
 * the tile staged per iteration of the compute-at loop, or the registers
 * per thread of a local stage). A measured record adds latency and speedup
 * over the unscheduled kernel. Nothing is free text: the same graph, kernel
 * and record always give the same lines. When replay fails, stage sizes are
 * left out rather than guessed. Registers per thread count only local
 * stages (4-byte registers), not the compiler's allocation. */
#include <jansson.h>
#include <math.h>
#include <string.h>

#include "tsel/tsel_impl.h"

/* ---- records ------------------------------------------------------------- */

static int cmp_d(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return x < y ? -1 : x > y;
}

static bool secs(json_t *j, const char *key, double *out, dg_status *st) {
  if (json_is_number(j)) {
    *out = json_number_value(j);
  } else if (json_is_array(j) && json_array_size(j) > 0) {
    size_t n = json_array_size(j);
    double *v = dg_malloc(sizeof(double) * n);
    for (size_t i = 0; i < n; i++) {
      if (!json_is_number(json_array_get(j, i))) {
        free(v);
        return dg_fail(st, DG_ERR_PARSE, "record: %s[%zu] is not a number", key, i);
      }
      v[i] = json_number_value(json_array_get(j, i));
    }
    qsort(v, n, sizeof(double), cmp_d);
    *out = n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
    free(v);
  } else {
    return dg_fail(st, DG_ERR_PARSE, "record: %s must be a number of seconds or a non-empty list", key);
  }
  if (!(*out > 0) || !isfinite(*out)) return dg_fail(st, DG_ERR_PARSE, "record: %s must be positive", key);
  return true;
}

bool tsel_record_parse(const char *text, tsel_record *out, dg_status *st) {
  dg_status_ok(st);
  memset(out, 0, sizeof *out);
  json_error_t err;
  json_t *root = json_loads(text, JSON_REJECT_DUPLICATES, &err);
  if (!root) return dg_fail(st, DG_ERR_PARSE, "record:%d:%d: %s", err.line, err.column, err.text);
  bool ok = true;
  if (!json_is_object(root)) {
    ok = dg_fail(st, DG_ERR_PARSE, "record: expected a JSON object");
  } else {
    static const char *const lat[] = {"run_secs", "latency_s"};
    static const char *const base[] = {"unscheduled_secs", "unscheduled_latency_s"};
    for (int i = 0; i < 2 && ok; i++) {
      json_t *j = json_object_get(root, lat[i]);
      if (j && !out->has_latency) ok = out->has_latency = secs(j, lat[i], &out->latency_s, st);
      j = json_object_get(root, base[i]);
      if (ok && j && !out->has_base) ok = out->has_base = secs(j, base[i], &out->base_latency_s, st);
    }
  }
  json_decref(root);
  return ok;
}

/* ---- stages in the scheduled kernel ------------------------------------------ */

typedef struct {
  const dg_block *b;
  const dg_stmt **loops; /* every enclosing loop, outermost first */
  int n;
} bpath;

typedef struct {
  bpath *p;
  int n, cap;
  dg_arena *a;
} bpaths;

static void walk(bpaths *P, const dg_stmt *s, const dg_stmt **stack, int depth) {
  if (!s) return;
  switch (s->kind) {
    case DG_STMT_FOR:
      if (depth < 256) stack[depth] = s;
      walk(P, s->body, stack, depth + 1);
      break;
    case DG_STMT_SEQ:
      for (int i = 0; i < s->n; i++) walk(P, s->stmts[i], stack, depth);
      break;
    case DG_STMT_IF:
      walk(P, s->then_s, stack, depth);
      walk(P, s->else_s, stack, depth);
      break;
    case DG_STMT_BLOCK: {
      if (P->n == P->cap) {
        P->cap = P->cap ? 2 * P->cap : 16;
        P->p = dg_realloc(P->p, sizeof(bpath) * (size_t)P->cap);
      }
      bpath *b = &P->p[P->n++];
      b->b = s->block;
      b->n = depth > 256 ? 256 : depth;
      b->loops = dg_arena_memdup(P->a, stack, sizeof(dg_stmt *) * (size_t)(b->n ? b->n : 1));
      walk(P, s->block->body, stack, depth);
      break;
    }
    case DG_STMT_STORE: break;
  }
}

static bool reads_buf(const dg_block *b, const dg_buffer *x) {
  for (int i = 0; i < b->n_reads; i++)
    if (b->reads[i].buf == x) return true;
  return false;
}
static bool writes_buf(const dg_block *b, const dg_buffer *x) {
  for (int i = 0; i < b->n_writes; i++)
    if (b->writes[i].buf == x) return true;
  return false;
}
static bool reads_name(const dg_block *b, const char *name) {
  for (int i = 0; i < b->n_reads; i++)
    if (strcmp(b->reads[i].buf->name, name) == 0) return true;
  return false;
}

/* The elements held by the occurrence-th stage of buffer `name` in scope
 * `scope` (read stage: a block reading name and writing the scoped copy;
 * write stage: a block reading the scoped copy and writing name); -1 if not
 * found. *dtype_bytes receives the stage buffer's element size. */
static int64_t stage_elems(const bpaths *P, const char *name, dg_scope scope, bool read, int occurrence,
                           int *dtype_bytes) {
  int seen = 0;
  for (int i = 0; i < P->n; i++) {
    const dg_block *b = P->p[i].b;
    const dg_buffer *c = NULL;
    if (read && b->n_writes == 1 && b->writes[0].buf->scope == scope && reads_name(b, name))
      c = b->writes[0].buf;
    if (!read && b->n_writes == 1 && strcmp(b->writes[0].buf->name, name) == 0)
      for (int r = 0; r < b->n_reads && !c; r++)
        if (b->reads[r].buf->scope == scope && strcmp(b->reads[r].buf->name, name) != 0) c = b->reads[r].buf;
    if (!c || seen++ != occurrence) continue;
    for (int j = 0; j < P->n; j++) {
      const dg_block *o = P->p[j].b;
      if (j == i || !(read ? reads_buf(o, c) : writes_buf(o, c))) continue;
      int64_t el = 1;
      for (int k = 0; k < P->p[i].n; k++) {
        bool shared = false;
        for (int m = 0; m < P->p[j].n && !shared; m++) shared = P->p[j].loops[m] == P->p[i].loops[k];
        if (!shared) el *= P->p[i].loops[k]->extent;
      }
      *dtype_bytes = dg_dtype_bytes(c->dtype);
      return el;
    }
    return -1;
  }
  return -1;
}

/* ---- templates ----------------------------------------------------------------- */

static void put_bytes(dg_str *o, int64_t b) {
  if (b >= 1024 && b % 1024 == 0) dg_str_printf(o, "%lld KiB", (long long)(b / 1024));
  else if (b >= 1024) dg_str_printf(o, "%.1f KiB", (double)b / 1024);
  else dg_str_printf(o, "%lld B", (long long)b);
}

static const char *block_label(const tsel_graph *g, const tsel_facts *F, const tsel_val *bref, dg_arena *a) {
  const tsel_ofact *b = &F->of[bref->i - 1][bref->sub < 0 ? 0 : bref->sub];
  if (b->block) return b->block->name;
  if (b->buf) return dg_arena_printf(a, "the %s stage", b->buf->name);
  (void)g;
  return dg_arena_printf(a, "block t%lld", (long long)bref->i);
}

static int64_t ext_of(const tsel_facts *F, const tsel_val *r) {
  return F->of[r->i - 1][r->sub < 0 ? 0 : r->sub].ext;
}

bool tsel_explain(tsel_graph *g, const dg_func *kernel, const tsel_record *rec, dg_status *st) {
  tsel_facts F;
  if (!tsel_semantic(g, kernel, TSEL_TARGET_CUDA, &F, st)) return false;
  tsel_graph_strip_explanations(g);
  dg_arena *a = F.a;
  /* replay for stage sizes */
  bpaths P = {.a = a};
  sched *s = NULL;
  dg_status rst;
  sched_trace *t = tsel_lower(g, &rst);
  if (t) {
    s = sched_new(kernel, 0);
    if (sched_replay(s, t, false, false, &rst)) {
      const dg_stmt *stack[256];
      walk(&P, sched_func(s)->body, stack, 0);
    }
  }
  int64_t threads = 0;
  for (int i = 0; i < 3; i++)
    if (F.thread_ext[i] > 0) threads = (threads ? threads : 1) * F.thread_ext[i];
  int64_t shared_bytes = 0, local_bytes = 0, vec = 0, unroll = -1;
  bool stage_known = false;
  dg_str o;
  dg_str_init(&o);
  DG_VEC(int) refs = {0};
  for (int i = 0; i < g->n_edits; i++) {
    const tsel_edit *e = &g->edits[i];
    const tsel_val *A = e->args;
    int num = i + 1;
    dg_str_clear(&o);
    refs.len = 0;
    switch (e->op) {
      case TSEL_OP_TILE: {
        int j = i;
        int64_t loops_edit = A[0].i;
        while (j < g->n_edits && g->edits[j].op == TSEL_OP_TILE && g->edits[j].args[0].i == loops_edit) {
          const tsel_val *fs = &g->edits[j].args[1];
          int64_t prod = 1;
          dg_str_puts(&o, j == i ? "" : ", ");
          for (int k = 0; k < fs->n; k++) {
            dg_str_printf(&o, "%s%lld", k ? "x" : "", (long long)fs->items[k].i);
            prod *= fs->items[k].i;
          }
          dg_str_printf(&o, " (%lld)", (long long)prod);
          DG_VEC_PUSH(&refs, j + 1);
          j++;
        }
        const tsel_edit *le = &g->edits[loops_edit - 1];
        const char *bn = le->op == TSEL_OP_LOOPS ? block_label(g, &F, &le->args[0], a) : "a loop nest";
        char *body = dg_str_take(&o);
        dg_str_printf(&o, "tiles of %s: %s", bn, body);
        free(body);
        i = j - 1;
        break;
      }
      case TSEL_OP_BIND: case TSEL_OP_FUSE_BIND: case TSEL_OP_THREAD_SPLIT: {
        const char *axis = e->op == TSEL_OP_THREAD_SPLIT ? "threadIdx.x" : A[e->n_args - 1].s;
        int64_t ext = e->op == TSEL_OP_THREAD_SPLIT ? F.value[i]
                      : e->op == TSEL_OP_BIND ? ext_of(&F, &A[0])
                                               : F.of[i][0].ext;
        if (ext < 0) break;
        dg_thread_tag tag;
        dg_thread_tag_from_name(axis, strlen(axis), &tag);
        const char *what = dg_thread_tag_is_block(tag) ? "thread block" : dg_thread_tag_is_thread(tag) ? "thread" : "virtual thread";
        dg_str_printf(&o, "%lld %s%s on %s", (long long)ext, what, ext == 1 ? "" : "s", axis);
        if (e->op == TSEL_OP_FUSE_BIND && e->n_args > 2) dg_str_printf(&o, " (%d loops fused)", e->n_args - 1);
        DG_VEC_PUSH(&refs, num);
        break;
      }
      case TSEL_OP_CACHE_READ: case TSEL_OP_CACHE_WRITE: case TSEL_OP_CACHE_READ_AT: case TSEL_OP_CACHE_WRITE_AT: {
        bool rd = e->op == TSEL_OP_CACHE_READ || e->op == TSEL_OP_CACHE_READ_AT;
        const dg_buffer *buf = F.of[i][0].buf;
        dg_scope sc;
        dg_scope_from_name(A[2].s, strlen(A[2].s), &sc);
        if (!buf) {
          dg_str_printf(&o, "a %s stage of t%lld", A[2].s, (long long)A[0].i);
        } else {
          int occ = 0;
          for (int k = 0; k < i; k++) {
            const tsel_edit *p = &g->edits[k];
            bool prd = p->op == TSEL_OP_CACHE_READ || p->op == TSEL_OP_CACHE_READ_AT;
            if ((p->op == TSEL_OP_CACHE_READ || p->op == TSEL_OP_CACHE_WRITE || p->op == TSEL_OP_CACHE_READ_AT ||
                 p->op == TSEL_OP_CACHE_WRITE_AT) && prd == rd && F.of[k][0].buf == buf &&
                strcmp(p->args[2].s, A[2].s) == 0)
              occ++;
          }
          int db = 0;
          int64_t el = P.n ? stage_elems(&P, buf->name, sc, rd, occ, &db) : -1;
          if (el >= 0) {
            stage_known = true;
            int64_t bytes = el * db;
            if (sc == DG_SCOPE_SHARED || sc == DG_SCOPE_SHARED_DYN) shared_bytes += bytes;
            if (sc == DG_SCOPE_LOCAL) local_bytes += bytes;
            dg_str_printf(&o, "%s tile of %lld %s (", buf->name, (long long)el, dg_dtype_name(buf->dtype));
            put_bytes(&o, bytes);
            dg_str_printf(&o, ") %s %s", rd ? "staged in" : "written back from", A[2].s);
            if ((sc == DG_SCOPE_SHARED || sc == DG_SCOPE_SHARED_DYN) && threads > 1)
              dg_str_printf(&o, ", reused by %lld threads", (long long)threads);
            if (sc == DG_SCOPE_LOCAL && threads > 0) dg_str_puts(&o, ", per thread");
          } else {
            dg_str_printf(&o, "%s %s %s", buf->name, rd ? "staged in" : "written back from", A[2].s);
          }
        }
        DG_VEC_PUSH(&refs, num);
        break;
      }
      case TSEL_OP_COOP:
        if (F.value[i] > vec) vec = F.value[i];
        dg_str_printf(&o, "cooperative fetch into %s with vectors of %lld", block_label(g, &F, &A[0], a),
                      (long long)F.value[i]);
        DG_VEC_PUSH(&refs, num);
        break;
      case TSEL_OP_UNROLL_STEPS:
        if (F.value[i] > unroll) unroll = F.value[i];
        if (F.value[i] > 0) dg_str_printf(&o, "explicit unrolling up to %lld steps", (long long)F.value[i]);
        else dg_str_puts(&o, "no explicit unrolling");
        DG_VEC_PUSH(&refs, num);
        break;
      case TSEL_OP_VECTORIZE: {
        int64_t ext = ext_of(&F, &A[0]);
        if (ext < 0) break;
        if (ext > vec) vec = ext;
        dg_str_printf(&o, "vectors of %lld lanes", (long long)ext);
        DG_VEC_PUSH(&refs, num);
        break;
      }
      default: break;
    }
    if (refs.len) tsel_graph_add_why(g, refs.data, (int)refs.len, o.s);
  }
  dg_str_clear(&o);
  if (threads > 0) dg_str_printf(&o, "%lld threads/block", (long long)threads);
  if (stage_known && shared_bytes > 0) {
    dg_str_puts(&o, o.len ? ", " : "");
    put_bytes(&o, shared_bytes);
    dg_str_puts(&o, " shared");
  }
  if (stage_known && local_bytes > 0)
    dg_str_printf(&o, "%s%lld registers/thread", o.len ? ", " : "", (long long)((local_bytes + 3) / 4));
  if (vec > 0) dg_str_printf(&o, "%svectors of %lld", o.len ? ", " : "", (long long)vec);
  if (unroll > 0) dg_str_printf(&o, "%sunroll %lld", o.len ? ", " : "", (long long)unroll);
  if (rec && rec->has_latency) {
    double us = rec->latency_s * 1e6;
    if (us >= 1000) dg_str_printf(&o, "%s%.3g ms", o.len ? ", " : "", us / 1000);
    else dg_str_printf(&o, "%s%.3g us", o.len ? ", " : "", us);
    if (rec->has_base) dg_str_printf(&o, ", %.1fx over the unscheduled kernel", rec->base_latency_s / rec->latency_s);
  }
  if (o.len == 0) dg_str_printf(&o, "%d edits, no thread binding", g->n_edits);
  tsel_graph_add_expect(g, o.s);
  dg_str_free(&o);
  free(refs.data);
  free(P.p);
  sched_free(s);
  sched_trace_free(t);
  tsel_facts_free(&F);
  return true;
}
