/* check.c: the kernel-free checker: every operand typed against its edit's
 * signature (handles block/loop/int, literal int, str, axis, scope, int
 * lists, annotation keys and values), references defined before use in
 * replay order, `tN` bare only for one-output edits and `tN.K` in range
 * otherwise, stale handles (a loop consumed by split/fuse/tile/
 * thread_split/fuse_bind, a block consumed by inline/reverse_inline) located
 * at the use with the edit that consumed them, keywords known, typed and
 * given once, sampled values among the candidates, tensor intrinsics
 * registered, strings UTF-8, and why/expect links.
 *
 * The environment it builds (handle ids and types of every edit's outputs)
 * is what lower and lift step through. `raw` operands are only checked for
 * def-before-use: raw is the form for anything the typed edits cannot say,
 * including instructions that use handles in ways the compiler would reject.
 * Kernel facts (extents, buffers, limits, scopes) are semantic.c's. */
#include <stdarg.h>
#include <string.h>

#include "dragon/intrin.h"
#include "tsel/tsel_impl.h"

enum { MAX_COUNT = 4096 };

static const char *const type_names[] = {"block", "loop", "int"};

bool tsel_fail_at(dg_status *st, const tsel_graph *g, int line, int col, const tsel_edit *e,
                  int edit_number, const char *fmt, ...) {
  char msg[400];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  if (line <= 0 && e) line = e->line;
  if (col <= 0) col = e && e->op_col ? e->op_col : 1;
  char where[300] = "";
  if (g && g->filename) snprintf(where, sizeof where, "%s:", g->filename);
  if (e)
    return dg_fail(st, DG_ERR_INVALID, "%s%d:%d: t%d %s: %s", where, line, col, edit_number,
                   tsel_ops[e->op].name, msg);
  return dg_fail(st, DG_ERR_INVALID, "%s%d:%d: %s", where, line, col, msg);
}

void tsel_env_init(tsel_env *env, int cap) {
  memset(env, 0, sizeof *env);
  env->cap = cap > 0 ? cap : 1;
  env->outs = dg_calloc((size_t)env->cap, sizeof(tsel_out));
  env->a = dg_arena_new();
}

void tsel_env_free(tsel_env *env) {
  free(env->outs);
  dg_arena_free(env->a);
  memset(env, 0, sizeof *env);
}

int tsel_env_ref_rv(const tsel_env *env, const tsel_val *ref) {
  DG_ASSERT(ref->kind == TV_REF && ref->i >= 1 && ref->i <= env->n_done);
  const tsel_out *o = &env->outs[ref->i - 1];
  int k = ref->sub < 0 ? 0 : ref->sub;
  DG_ASSERT(k < o->n_out);
  return o->rv[k];
}

typedef struct {
  tsel_env *env;
  const tsel_graph *g;
  const tsel_edit *e;
  int num; /* this edit's number */
  dg_status *st;
} ctx;

#define FAIL_AT(c, v, ...) tsel_fail_at((c)->st, (c)->g, (v)->line, (v)->col, (c)->e, (c)->num, __VA_ARGS__)
#define FAIL(c, ...) tsel_fail_at((c)->st, (c)->g, 0, 0, (c)->e, (c)->num, __VA_ARGS__)

static const char *vkind_name(tsel_vkind k) {
  static const char *const n[] = {"_", "an int", "a float", "a bool", "a string", "a word",
                                  "a reference", "a count", "a list"};
  return n[k];
}

/* A reference defined before this edit, with a valid output index; its
 * kind in *kind. Stale handles are allowed only when allow_stale. */
static bool check_ref(ctx *c, const tsel_val *v, bool allow_stale, sched_rv_kind *kind) {
  if (v->kind != TV_REF) return FAIL_AT(c, v, "expected a handle reference tN, found %s", vkind_name(v->kind));
  if (v->i >= c->num) {
    if (v->i <= c->g->n_edits)
      return FAIL_AT(c, v, "t%lld is used before it is defined (replay order)", (long long)v->i);
    return FAIL_AT(c, v, "there is no edit t%lld", (long long)v->i);
  }
  const tsel_out *o = &c->env->outs[v->i - 1];
  const tsel_edit *d = &c->g->edits[v->i - 1];
  if (o->n_out == 0)
    return FAIL_AT(c, v, "t%lld (%s) has no outputs", (long long)v->i, tsel_ops[d->op].name);
  if (v->sub < 0 && o->n_out > 1)
    return FAIL_AT(c, v, "t%lld (%s) has %d outputs: write t%lld.0 ... t%lld.%d", (long long)v->i,
                   tsel_ops[d->op].name, o->n_out, (long long)v->i, (long long)v->i, o->n_out - 1);
  if (v->sub >= 0 && o->n_out == 1)
    return FAIL_AT(c, v, "t%lld (%s) has one output: write t%lld", (long long)v->i,
                   tsel_ops[d->op].name, (long long)v->i);
  if (v->sub >= o->n_out)
    return FAIL_AT(c, v, "t%lld (%s) has %d outputs; t%lld.%d does not exist", (long long)v->i,
                   tsel_ops[d->op].name, o->n_out, (long long)v->i, v->sub);
  int k = v->sub < 0 ? 0 : v->sub;
  if (!allow_stale && o->consumed[k]) {
    int by = o->consumed[k];
    return FAIL_AT(c, v, "%s is stale: the %s was consumed by t%d (%s)",
                   v->sub < 0 ? dg_arena_printf(c->env->a, "t%lld", (long long)v->i)
                              : dg_arena_printf(c->env->a, "t%lld.%d", (long long)v->i, v->sub),
                   type_names[o->kind[k]], by, tsel_ops[c->g->edits[by - 1].op].name);
  }
  *kind = o->kind[k];
  return true;
}

static bool check_handle(ctx *c, const tsel_val *v, char code) {
  sched_rv_kind k;
  if (!check_ref(c, v, false, &k)) return false;
  bool ok = code == 'B' ? k == SCHED_RV_BLOCK
            : code == 'L' ? k == SCHED_RV_LOOP
            : code == 'X' ? k != SCHED_RV_EXPR
                          : k == SCHED_RV_EXPR;
  if (!ok)
    return FAIL_AT(c, v, "%s is %s handle, expected %s", v->sub < 0 ? dg_arena_printf(c->env->a, "t%lld", (long long)v->i)
                                                             : dg_arena_printf(c->env->a, "t%lld.%d", (long long)v->i, v->sub),
                   k == SCHED_RV_BLOCK ? "a block" : k == SCHED_RV_LOOP ? "a loop" : "an int",
                   code == 'B' ? "a block" : code == 'L' ? "a loop" : code == 'X' ? "a block or a loop" : "an int");
  return true;
}

/* Literal values (raw lists, annotation values): no words or counts;
 * references per `refs`: 0 none, 1 int handles only, 2 any defined handle. */
static bool check_value(ctx *c, const tsel_val *v, int refs, int depth) {
  switch (v->kind) {
    case TV_WORD: return FAIL_AT(c, v, "unexpected word '%s' (strings are quoted)", v->s);
    case TV_COUNT: return FAIL_AT(c, v, "a count xN is not a value here");
    case TV_REF: {
      if (refs == 0) return FAIL_AT(c, v, "handles are not allowed here");
      if (refs == 1) return check_handle(c, v, 'V');
      sched_rv_kind k;
      return check_ref(c, v, true, &k);
    }
    case TV_LIST:
      if (depth > 16) return FAIL_AT(c, v, "nested too deeply");
      for (int i = 0; i < v->n; i++)
        if (!check_value(c, &v->items[i], refs, depth + 1)) return false;
      return true;
    default: return true;
  }
}

static bool check_word(ctx *c, const tsel_val *v, char code) {
  if (v->kind != TV_WORD) {
    const char *what = code == 'a' ? "a thread axis (blockIdx.x, threadIdx.x, vthread.x, ...)"
                       : code == 'p' ? "a storage scope (global, shared, local, ...)"
                       : code == 'w' ? "read or write" : "default";
    return FAIL_AT(c, v, "expected %s, found %s", what, vkind_name(v->kind));
  }
  if (code == 'a') {
    dg_thread_tag t;
    if (!dg_thread_tag_from_name(v->s, strlen(v->s), &t) || t == DG_TAG_NONE)
      return FAIL_AT(c, v, "unknown thread axis '%s' (blockIdx.x|y|z, threadIdx.x|y|z, vthread.x|y|z)", v->s);
  } else if (code == 'p') {
    dg_scope sc;
    if (!dg_scope_from_name(v->s, strlen(v->s), &sc))
      return FAIL_AT(c, v, "unknown storage scope '%s' (global shared shared.dyn local wmma.matrix_a wmma.matrix_b wmma.accumulator)", v->s);
  } else if (code == 'w') {
    if (strcmp(v->s, "read") != 0 && strcmp(v->s, "write") != 0)
      return FAIL_AT(c, v, "expected read or write, found '%s'", v->s);
  } else if (code == 'd') {
    if (strcmp(v->s, "default") != 0) return FAIL_AT(c, v, "expected 'default', found '%s'", v->s);
  }
  return true;
}

static bool check_int_list(ctx *c, const tsel_val *v, const char *what, bool positive) {
  if (v->kind != TV_LIST) return FAIL_AT(c, v, "expected %s [a b ...], found %s", what, vkind_name(v->kind));
  if (v->n == 0) return FAIL_AT(c, v, "%s is empty", what);
  for (int i = 0; i < v->n; i++) {
    const tsel_val *it = &v->items[i];
    if (it->kind != TV_INT) return FAIL_AT(c, it, "%s holds integers, found %s", what, vkind_name(it->kind));
    if (positive && it->i < 1) return FAIL_AT(c, it, "%s must be positive, found %lld", what, (long long)it->i);
  }
  return true;
}

static bool check_arg(ctx *c, const tsel_val *v, char code) {
  switch (code) {
    case 'B': case 'L': case 'X': return check_handle(c, v, code);
    case 'i':
      if (v->kind != TV_INT) return FAIL_AT(c, v, "expected an int, found %s", vkind_name(v->kind));
      return true;
    case 's':
      if (v->kind != TV_STR) return FAIL_AT(c, v, "expected a string \"...\", found %s", vkind_name(v->kind));
      return true;
    case 'a': case 'p': case 'w': case 'd': return check_word(c, v, code);
    case 'k':
      if (v->kind == TV_WORD) {
        if (!tsel_ann_full(v->s))
          return FAIL_AT(c, v, "unknown annotation alias '%s' (other keys are written quoted, in full)", v->s);
        return true;
      }
      if (v->kind != TV_STR) return FAIL_AT(c, v, "expected an annotation key, found %s", vkind_name(v->kind));
      if (tsel_ann_alias(v->s))
        return FAIL_AT(c, v, "write the alias %s for \"%s\"", tsel_ann_alias(v->s), v->s);
      return true;
    case 'v': return check_value(c, v, 1, 0);
    case 'f': {
      if (v->kind != TV_LIST) return FAIL_AT(c, v, "expected factors [f ...], found %s", vkind_name(v->kind));
      if (v->n == 0) return FAIL_AT(c, v, "a split needs at least one factor");
      int nones = 0;
      for (int i = 0; i < v->n; i++) {
        const tsel_val *it = &v->items[i];
        if (it->kind == TV_NONE) {
          if (++nones > 1) return FAIL_AT(c, it, "at most one factor may be _ (inferred)");
        } else if (it->kind == TV_INT) {
          if (it->i < 1) return FAIL_AT(c, it, "factors must be positive, found %lld", (long long)it->i);
        } else if (it->kind == TV_REF) {
          if (!check_handle(c, it, 'V')) return false;
        } else {
          return FAIL_AT(c, it, "a factor is an int, an int handle or _, found %s", vkind_name(it->kind));
        }
      }
      return true;
    }
    case 'c': return check_int_list(c, v, "the list", false);
    case 'q':
      if (v->kind != TV_LIST) return FAIL_AT(c, v, "expected a list of blocks [tN ...], found %s", vkind_name(v->kind));
      for (int i = 0; i < v->n; i++)
        if (!check_handle(c, &v->items[i], 'B')) return false;
      return true;
    case 'n':
      if (v->kind != TV_COUNT) return FAIL_AT(c, v, "expected a count xN, found %s", vkind_name(v->kind));
      if (v->i > MAX_COUNT) return FAIL_AT(c, v, "at most x%d outputs", MAX_COUNT);
      return true;
    case 'g':
    case 'h':
      if (v->kind != TV_LIST) return FAIL_AT(c, v, "expected a list [...], found %s", vkind_name(v->kind));
      return check_value(c, v, code == 'g' ? 2 : 0, 0);
  }
  DG_UNREACHABLE();
}

static bool check_kw(ctx *c, const tsel_kw *kw, char type) {
  const tsel_val *v = &kw->val;
  switch (type) {
    case 'f':
      if (v->kind != TV_INT && v->kind != TV_BOOL)
        return FAIL_AT(c, v, "%s= takes 0, 1, true or false, found %s", kw->key, vkind_name(v->kind));
      return true;
    case 'i':
    case 'v':
      if (v->kind != TV_INT) return FAIL_AT(c, v, "%s= takes an int, found %s", kw->key, vkind_name(v->kind));
      return true;
    case 's':
      if (v->kind != TV_STR) return FAIL_AT(c, v, "%s= takes a string, found %s", kw->key, vkind_name(v->kind));
      return true;
    case 'F':
      if (v->kind != TV_LIST) return FAIL_AT(c, v, "%s= takes a list of floats", kw->key);
      for (int i = 0; i < v->n; i++)
        if (v->items[i].kind != TV_FLOAT)
          return FAIL_AT(c, &v->items[i], "%s= holds floats, found %s", kw->key, vkind_name(v->items[i].kind));
      return true;
    case 'g': return check_value(c, v, 0, 0);
    case 'k':
      if (v->kind != TV_STR) return FAIL_AT(c, v, "kinds= takes a string of b, l, v letters");
      for (const char *p = v->s; *p; p++)
        if (*p != 'b' && *p != 'l' && *p != 'v')
          return FAIL_AT(c, v, "kinds= holds only the letters b (block), l (loop), v (int)");
      return true;
  }
  DG_UNREACHABLE();
}

static bool check_sample(ctx *c, const tsel_val *cands) {
  const tsel_kw *vk = tsel_edit_kw(c->e, "");
  const tsel_kw *ix = tsel_edit_kw(c->e, "index");
  const tsel_kw *pr = tsel_edit_kw(c->e, "probs");
  int64_t v = vk->val.i;
  int count = 0, first = -1;
  for (int i = 0; i < cands->n; i++)
    if (cands->items[i].i == v) {
      if (first < 0) first = i;
      count++;
    }
  if (count == 0) return FAIL_AT(c, &vk->val, "the chosen value %lld is not among the candidates", (long long)v);
  if (ix) {
    if (ix->val.i < 0 || ix->val.i >= cands->n)
      return FAIL_AT(c, &ix->val, "index=%lld is out of range for %d candidates", (long long)ix->val.i, cands->n);
    if (cands->items[ix->val.i].i != v)
      return FAIL_AT(c, &ix->val, "candidate %lld is %lld, not the chosen value %lld", (long long)ix->val.i,
                     (long long)cands->items[ix->val.i].i, (long long)v);
  } else if (count > 1) {
    return FAIL_AT(c, &vk->val, "the chosen value %lld occurs %d times among the candidates: give index=", (long long)v, count);
  }
  if (pr && pr->val.n != cands->n)
    return FAIL_AT(c, &pr->val, "probs= has %d entries for %d candidates", pr->val.n, cands->n);
  return true;
}

/* A string that names a tensor intrinsic (tensorize, the tensorize_as and
 * tensorize_init annotations) names a registered one, as replay will look
 * it up; an annotation may be "" (no intrinsic: RewriteReductionBlock
 * writes it on an init block). */
static bool check_intrin(const ctx *c, const tsel_val *v, bool empty_ok) {
  if (v->kind != TV_STR || (empty_ok && !v->s[0]) || intrin_find(v->s)) return true;
  char msg[300];
  intrin_unknown_message(v->s, msg, sizeof msg);
  return FAIL_AT(c, v, "%s", msg);
}

/* Strings reach the trace JSON as they are: they must be UTF-8 (the parser
 * makes sure for text; this covers graphs built otherwise). */
static bool strings_utf8(const ctx *c, const tsel_val *v) {
  if (v->kind == TV_STR) {
    size_t n = strlen(v->s), bad = tsel_utf8_bad(v->s, n);
    if (bad < n)
      return FAIL_AT(c, v, "the string is not valid UTF-8 (byte 0x%02x at offset %zu)",
                     (unsigned char)v->s[bad], bad);
  }
  for (int i = 0; v->kind == TV_LIST && i < v->n; i++)
    if (!strings_utf8(c, &v->items[i])) return false;
  return true;
}

/* Checks edit e (number n_done+1) and commits its outputs. */
bool tsel_env_step(tsel_env *env, const tsel_graph *g, const tsel_edit *e, dg_status *st) {
  ctx cc = {.env = env, .g = g, .e = e, .num = env->n_done + 1, .st = st};
  ctx *c = &cc;
  DG_ASSERT(env->n_done < env->cap);
  const tsel_opspec *op = &tsel_ops[e->op];
  for (int i = 0; i < e->n_args; i++)
    if (!strings_utf8(c, &e->args[i])) return false;
  for (int i = 0; i < e->n_kws; i++)
    if (!strings_utf8(c, &e->kws[i].val)) return false;
  /* keywords */
  for (int i = 0; i < e->n_kws; i++) {
    const tsel_kw *kw = &e->kws[i];
    int found = -1;
    for (int k = 0; k < 4 && op->kws[k].key; k++)
      if (strcmp(op->kws[k].key, kw->key) == 0) found = k;
    if (found < 0) {
      char allowed[120] = "";
      for (int k = 0; k < 4 && op->kws[k].key; k++) {
        size_t l = strlen(allowed);
        snprintf(allowed + l, sizeof allowed - l, "%s%s=", l ? ", " : "", op->kws[k].key);
      }
      if (kw->key[0] == 0)
        return tsel_fail_at(st, g, kw->line, kw->col, e, c->num, "%s takes no =V", op->name);
      return tsel_fail_at(st, g, kw->line, kw->col, e, c->num, "unknown keyword '%s=' (%s takes %s)", kw->key,
                          op->name, allowed[0] ? allowed : "none");
    }
    for (int k = 0; k < i; k++)
      if (strcmp(e->kws[k].key, kw->key) == 0)
        return tsel_fail_at(st, g, kw->line, kw->col, e, c->num, "keyword '%s=' given twice", kw->key);
    if (!check_kw(c, kw, op->kws[found].type)) return false;
  }
  for (int k = 0; k < 4 && op->kws[k].key; k++)
    if (op->kws[k].required && !tsel_edit_kw(e, op->kws[k].key)) {
      if (op->kws[k].key[0] == 0) return FAIL(c, "needs =V, the chosen value");
      return FAIL(c, "needs %s=", op->kws[k].key);
    }
  /* positional operands against the signature */
  const char *sig = op->args;
  int n_codes = 0, rep = -1;
  char codes[8];
  for (const char *p = sig; *p; p++) {
    if (*p == '+') rep = n_codes - 1;
    else codes[n_codes++] = *p;
  }
  int n = e->n_args;
  bool arity_ok = rep >= 0 ? n >= n_codes : (n == n_codes || (n_codes == 1 && codes[0] == 'd' && n == 0));
  if (!arity_ok) {
    const tsel_val *at = n > 0 ? &e->args[n - 1] : NULL;
    if (rep >= 0)
      return tsel_fail_at(st, g, at ? at->line : 0, at ? at->col : 0, e, c->num,
                          "expected at least %d operands, found %d", n_codes, n);
    return tsel_fail_at(st, g, at ? at->line : 0, at ? at->col : 0, e, c->num,
                        "expected %d operand%s, found %d", n_codes, n_codes == 1 ? "" : "s", n);
  }
  for (int i = 0; i < n; i++) {
    int ci = rep < 0 || i <= rep ? i : (i >= n - (n_codes - 1 - rep) ? i - (n - n_codes) : rep);
    if (!check_arg(c, &e->args[i], codes[ci])) return false;
  }
  /* edit-specific rules */
  switch (e->op) {
    case TSEL_OP_FUSE:
      if (n < 1) return FAIL(c, "fuse needs at least one loop");
      /* fallthrough */
    case TSEL_OP_REORDER:
    case TSEL_OP_FUSE_BIND: {
      int nl = e->op == TSEL_OP_FUSE_BIND ? n - 1 : n;
      for (int i = 0; i < nl; i++)
        for (int j = 0; j < i; j++)
          if (tsel_env_ref_rv(env, &e->args[i]) == tsel_env_ref_rv(env, &e->args[j]))
            return FAIL_AT(c, &e->args[i], "the same loop is given twice");
      break;
    }
    case TSEL_OP_SAMPLE: if (!check_sample(c, &e->args[0])) return false; break;
    case TSEL_OP_COOP:
    case TSEL_OP_UNROLL_STEPS:
    case TSEL_OP_THREAD_SPLIT:
      if (!check_sample(c, &e->args[1])) return false;
      if (e->op == TSEL_OP_THREAD_SPLIT && tsel_edit_kw(e, "")->val.i < 1)
        return FAIL_AT(c, &tsel_edit_kw(e, "")->val, "a thread count must be positive");
      break;
    case TSEL_OP_TILE:
    case TSEL_OP_SAMPLE_TILE:
      if (!check_int_list(c, &e->args[1], "the tile", true)) return false;
      break;
    case TSEL_OP_TENSORIZE:
      if (!check_intrin(c, &e->args[1], false)) return false;
      break;
    case TSEL_OP_ANNOTATE:
      if (e->args[1].kind == TV_WORD && tsel_ann_names_intrin(e->args[1].s) && !check_intrin(c, &e->args[2], true))
        return false;
      break;
    case TSEL_OP_POSTPROC:
      if (n == 1 && c->num != c->g->n_edits)
        return FAIL_AT(c, &e->args[0], "postproc default must be the last edit");
      break;
    case TSEL_OP_RAW: {
      const tsel_kw *kk = tsel_edit_kw(e, "kinds");
      if (kk && (int64_t)strlen(kk->val.s) != e->args[3].i)
        return FAIL_AT(c, &kk->val, "kinds= names %zu outputs, the edit has x%lld", strlen(kk->val.s),
                       (long long)e->args[3].i);
      break;
    }
    default: break;
  }
  /* outputs */
  tsel_out *o = &env->outs[env->n_done];
  memset(o, 0, sizeof *o);
  o->alias_of = -1;
  sched_rv_kind kind = SCHED_RV_LOOP;
  int n_out = 0, n_hidden = 0;
  switch (e->op) {
    case TSEL_OP_BLOCK: case TSEL_OP_CACHE_READ: case TSEL_OP_CACHE_WRITE: case TSEL_OP_REINDEX:
    case TSEL_OP_DECOMPOSE_REDUCTION: case TSEL_OP_RFACTOR: case TSEL_OP_BLOCKIZE:
    case TSEL_OP_CACHE_READ_AT: case TSEL_OP_CACHE_WRITE_AT:
      kind = SCHED_RV_BLOCK;
      n_out = 1;
      break;
    case TSEL_OP_LOOPS: n_out = (int)e->args[1].i; break;
    case TSEL_OP_CHILDREN: case TSEL_OP_PRODUCERS: case TSEL_OP_CONSUMERS:
      kind = SCHED_RV_BLOCK;
      n_out = (int)e->args[1].i;
      break;
    case TSEL_OP_SPLIT: n_out = e->args[1].n; break;
    case TSEL_OP_FUSE: case TSEL_OP_ADD_UNIT_LOOP: case TSEL_OP_SAMPLE_LOC: n_out = 1; break;
    case TSEL_OP_FUSE_BIND: n_out = 1; break;
    case TSEL_OP_SAMPLE_TILE: kind = SCHED_RV_EXPR; n_out = e->args[1].n; break;
    case TSEL_OP_SAMPLE: kind = SCHED_RV_EXPR; n_out = 1; break;
    case TSEL_OP_RAW: n_out = (int)e->args[3].i; break;
    case TSEL_OP_TILE: n_hidden = e->args[1].n; n_out = e->args[1].n; break;
    case TSEL_OP_COOP: case TSEL_OP_UNROLL_STEPS: n_hidden = 1; break;
    case TSEL_OP_THREAD_SPLIT: n_hidden = 1; n_out = 2; break;
    default: break;
  }
  o->n_out = n_out;
  o->rv = DG_ANEWN(env->a, int, n_out ? n_out : 1);
  o->kind = DG_ANEWN(env->a, sched_rv_kind, n_out ? n_out : 1);
  o->consumed = DG_ANEWN(env->a, int, n_out ? n_out : 1);
  o->hidden_rv = env->next_rv;
  o->n_hidden = n_hidden;
  int next = env->next_rv + n_hidden;
  const tsel_kw *kinds = e->op == TSEL_OP_RAW ? tsel_edit_kw(e, "kinds") : NULL;
  for (int k = 0; k < n_out; k++) {
    o->kind[k] = kind;
    if (kinds) o->kind[k] = kinds->val.s[k] == 'b' ? SCHED_RV_BLOCK : kinds->val.s[k] == 'l' ? SCHED_RV_LOOP : SCHED_RV_EXPR;
    else if (e->op == TSEL_OP_RAW) {
      sched_inst_kind ik;
      o->kind[k] = SCHED_RV_EXPR;
      if (sched_inst_from_name(e->args[0].s, &ik)) {
        static const sched_rv_kind outk[] = {
#define X(en, nm, fn, pure, nin, nattr, dec, out) out,
            SCHED_INST_LIST(X)
#undef X
        };
        o->kind[k] = outk[ik];
      }
    }
    o->rv[k] = next++;
  }
  if (e->op == TSEL_OP_FUSE_BIND && n == 2) { /* one loop: Bind only, the output is that loop */
    o->alias_of = tsel_env_ref_rv(env, &e->args[0]);
    o->rv[0] = o->alias_of;
    next--;
  }
  env->next_rv = next;
  /* consumption */
  env->n_undo = 0;
  int first = 0, last = -1;
  switch (e->op) {
    case TSEL_OP_SPLIT: case TSEL_OP_TILE: case TSEL_OP_THREAD_SPLIT: case TSEL_OP_INLINE:
    case TSEL_OP_REVERSE_INLINE:
      last = 0;
      break;
    case TSEL_OP_FUSE: last = n - 1; break;
    case TSEL_OP_FUSE_BIND: last = n >= 3 ? n - 2 : -1; break;
    default: break;
  }
  for (int i = first; i <= last; i++) {
    const tsel_val *r = &e->args[i];
    int k = r->sub < 0 ? 0 : r->sub;
    env->outs[r->i - 1].consumed[k] = c->num;
    if (env->n_undo < 64) {
      env->undo_edit[env->n_undo] = (int)r->i - 1;
      env->undo_sub[env->n_undo++] = k;
    }
  }
  env->n_done++;
  return true;
}

void tsel_env_undo(tsel_env *env) {
  DG_ASSERT(env->n_done > 0);
  env->n_done--;
  tsel_out *o = &env->outs[env->n_done];
  env->next_rv = o->hidden_rv;
  for (int i = 0; i < env->n_undo; i++) env->outs[env->undo_edit[i]].consumed[env->undo_sub[i]] = 0;
  env->n_undo = 0;
}

bool tsel_typecheck(const tsel_graph *g, tsel_env *env, dg_status *st) {
  dg_status_ok(st);
  for (int i = 0; i < g->n_edits; i++)
    if (!tsel_env_step(env, g, &g->edits[i], st)) return false;
  for (int i = 0; i < g->n_lines; i++) {
    const tsel_line *l = &g->lines[i];
    if (l->kind != TL_WHY) continue;
    if (l->n_refs == 0) return tsel_fail_at(st, g, l->line, 1, NULL, 0, "why needs at least one edit");
    for (int k = 0; k < l->n_refs; k++)
      if (l->refs[k] < 1 || l->refs[k] > g->n_edits)
        return tsel_fail_at(st, g, l->line, l->ref_cols[k] ? l->ref_cols[k] : 1, NULL, 0,
                            "why names t%d, but the graph has %d edits", l->refs[k], g->n_edits);
  }
  return true;
}

bool tsel_check(const tsel_graph *g, const dg_func *kernel, tsel_target target, dg_status *st) {
  if (kernel) return tsel_semantic(g, kernel, target, NULL, st);
  tsel_env env;
  tsel_env_init(&env, g->n_edits);
  bool ok = tsel_typecheck(g, &env, st);
  tsel_env_free(&env);
  return ok;
}
