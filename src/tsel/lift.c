/* lift.c: trace -> canonical graph. Walking the trace from the front, lift
 * tries, at each instruction, the folds of TSEL.md (thread_split, tile,
 * fuse_bind, cache_read_at, cache_write_at, coop, unroll_steps), then the
 * typed edit of the instruction's kind, then `raw`. A candidate is taken
 * only if it type-checks where it stands, expands (lower.c) to exactly the
 * instructions it replaces (kinds, inputs, attrs, outputs, decisions), and
 * its hidden sampled values are used nowhere else in the trace; so
 * lower(lift(T)) == T holds by construction, and the first candidate that
 * passes makes the text unique. `postproc default` is emitted when the
 * default postprocessors reproduce the tail exactly (postproc.c); otherwise
 * EnterPostproc and what follows stay as
 * they are. */
#include <string.h>

#include "tsel/tsel_impl.h"

typedef struct {
  const sched_trace *t;
  tsel_graph *g;
  tsel_env env;
  int *ref_edit, *ref_sub; /* per handle: defining edit number (0: hidden), output index */
  int *uses;               /* per handle: occurrences among all inputs */
  dg_arena *a;             /* candidate operands */
} lifter;

static tsel_val tv(tsel_vkind k) { return (tsel_val){.kind = k, .sub = -1}; }
static tsel_val tv_int(int64_t x) { tsel_val v = tv(TV_INT); v.i = x; return v; }
static tsel_val tv_word(const char *s) { tsel_val v = tv(TV_WORD); v.s = s; return v; }
static tsel_val tv_str(const char *s) { tsel_val v = tv(TV_STR); v.s = s; return v; }
static tsel_val tv_count(int64_t n) { tsel_val v = tv(TV_COUNT); v.i = n; return v; }

static bool from_val(lifter *L, const sched_val *s, tsel_val *o) {
  *o = tv(TV_NONE);
  switch (s->kind) {
    case SV_NONE: return true;
    case SV_INT: *o = tv_int(s->i); return true;
    case SV_FLOAT: o->kind = TV_FLOAT; o->f = s->f; return true;
    case SV_BOOL: o->kind = TV_BOOL; o->i = s->i != 0; return s->i == 0 || s->i == 1;
    case SV_STR: *o = tv_str(s->s); return true;
    case SV_RV: {
      if (s->i < 0 || s->i >= L->t->n_rvs || L->ref_edit[s->i] == 0) return false;
      int e = L->ref_edit[s->i];
      o->kind = TV_REF;
      o->i = e;
      o->sub = L->env.outs[e - 1].n_out == 1 ? -1 : L->ref_sub[s->i];
      return true;
    }
    case SV_ARRAY:
      o->kind = TV_LIST;
      o->n = s->n;
      o->items = DG_ANEWN(L->a, tsel_val, s->n ? s->n : 1);
      for (int i = 0; i < s->n; i++)
        if (!from_val(L, &s->items[i], &o->items[i])) return false;
      return true;
  }
  return false;
}

static bool is_int(const sched_val *v, int64_t x) { return v->kind == SV_INT && v->i == x; }

/* ---- candidates ----------------------------------------------------------- */

typedef struct {
  tsel_val args[72];
  tsel_kw kws[4];
  tsel_edit e;
} cand;

static void cand_init(cand *c, int op) {
  memset(&c->e, 0, sizeof c->e);
  c->e.op = op;
  c->e.args = c->args;
  c->e.kws = c->kws;
}
static void arg(cand *c, tsel_val v) {
  if (c->e.n_args < (int)DG_ARRAY_LEN(c->args)) c->args[c->e.n_args] = v;
  c->e.n_args++;
}
static void kw(cand *c, const char *key, tsel_val v) {
  c->kws[c->e.n_kws++] = (tsel_kw){.key = key, .val = v};
}
static bool arg_val(lifter *L, cand *c, const sched_val *s) {
  tsel_val v;
  if (!from_val(L, s, &v)) return false;
  arg(c, v);
  return true;
}
static bool kw_val(lifter *L, cand *c, const char *key, const sched_val *s) {
  tsel_val v;
  if (!from_val(L, s, &v)) return false;
  kw(c, key, v);
  return true;
}

static bool ann_key(lifter *L, cand *c, const sched_val *k) {
  (void)L;
  if (k->kind != SV_STR) return false;
  const char *alias = tsel_ann_alias(k->s);
  arg(c, alias ? tv_word(alias) : tv_str(k->s));
  return true;
}

/* The =V (and probs=/index= for `sample`) of a SampleCategorical. */
static bool categorical(lifter *L, cand *c, const sched_inst *in, bool extras) {
  if (!in->has_decision || in->decision.kind != SV_INT || in->n_attrs != 2 ||
      in->attrs[0].kind != SV_ARRAY || in->attrs[1].kind != SV_ARRAY)
    return false;
  const sched_val *cs = &in->attrs[0];
  int64_t idx = in->decision.i;
  if (idx < 0 || idx >= cs->n || cs->items[idx].kind != SV_INT) return false;
  if (!arg_val(L, c, cs)) return false;
  kw(c, "", tv_int(cs->items[idx].i));
  if (!extras) return true;
  const sched_val *ps = &in->attrs[1];
  bool uniform = ps->n == cs->n;
  for (int i = 0; uniform && i < ps->n; i++)
    uniform = ps->items[i].kind == SV_FLOAT && ps->items[i].f == 1.0 / ps->n;
  if (!uniform && !kw_val(L, c, "probs", ps)) return false;
  bool repeats = false;
  for (int i = 0; i < cs->n; i++)
    for (int j = 0; j < i; j++)
      if (cs->items[i].kind == SV_INT && cs->items[j].kind == SV_INT && cs->items[i].i == cs->items[j].i)
        repeats = true;
  if (repeats) kw(c, "index", tv_int(idx));
  return true;
}

static bool enc_single(lifter *L, const sched_inst *in, cand *c) {
  const sched_val *I = in->inputs, *A = in->attrs;
  int ni = in->n_inputs, na = in->n_attrs;
  if (in->has_decision && in->kind != SCHED_INST_SAMPLE_PERFECT_TILE &&
      in->kind != SCHED_INST_SAMPLE_CATEGORICAL && in->kind != SCHED_INST_SAMPLE_COMPUTE_LOCATION)
    return false;
  switch (in->kind) {
    case SCHED_INST_GET_BLOCK:
      cand_init(c, TSEL_OP_BLOCK);
      if (ni != 0 || na != 2 || A[0].kind != SV_STR || A[1].kind != SV_STR) return false;
      arg(c, tv_str(A[0].s));
      if (strcmp(A[1].s, "main") != 0) kw(c, "func", tv_str(A[1].s));
      return true;
    case SCHED_INST_GET_LOOPS: case SCHED_INST_GET_CHILD_BLOCKS: case SCHED_INST_GET_PRODUCERS:
    case SCHED_INST_GET_CONSUMERS:
      cand_init(c, in->kind == SCHED_INST_GET_LOOPS ? TSEL_OP_LOOPS
                   : in->kind == SCHED_INST_GET_CHILD_BLOCKS ? TSEL_OP_CHILDREN
                   : in->kind == SCHED_INST_GET_PRODUCERS ? TSEL_OP_PRODUCERS : TSEL_OP_CONSUMERS);
      if (ni != 1 || !arg_val(L, c, &I[0])) return false;
      arg(c, tv_count(in->n_outputs));
      return true;
    case SCHED_INST_SPLIT: {
      cand_init(c, TSEL_OP_SPLIT);
      if (ni < 2 || na != 2 || !arg_val(L, c, &I[0])) return false;
      sched_val fs = {.kind = SV_ARRAY, .items = (sched_val *)I + 1, .n = ni - 1};
      if (!arg_val(L, c, &fs)) return false;
      if (!is_int(&A[0], 1) && !kw_val(L, c, "unit", &A[0])) return false;
      if (!is_int(&A[1], 0) && !kw_val(L, c, "nopred", &A[1])) return false;
      return true;
    }
    case SCHED_INST_FUSE: case SCHED_INST_REORDER:
      cand_init(c, in->kind == SCHED_INST_FUSE ? TSEL_OP_FUSE : TSEL_OP_REORDER);
      if (ni > 64) return false;
      for (int i = 0; i < ni; i++)
        if (!arg_val(L, c, &I[i])) return false;
      if (in->kind == SCHED_INST_FUSE && (na != 1 || (!is_int(&A[0], 1) && !kw_val(L, c, "unit", &A[0]))))
        return false;
      return true;
    case SCHED_INST_ADD_UNIT_LOOP: case SCHED_INST_PARALLEL: case SCHED_INST_VECTORIZE:
    case SCHED_INST_UNROLL: case SCHED_INST_COMPUTE_INLINE: case SCHED_INST_REVERSE_COMPUTE_INLINE: {
      static const int ops[SCHED_INST_COUNT] = {
          [SCHED_INST_ADD_UNIT_LOOP] = TSEL_OP_ADD_UNIT_LOOP, [SCHED_INST_PARALLEL] = TSEL_OP_PARALLEL,
          [SCHED_INST_VECTORIZE] = TSEL_OP_VECTORIZE, [SCHED_INST_UNROLL] = TSEL_OP_UNROLL,
          [SCHED_INST_COMPUTE_INLINE] = TSEL_OP_INLINE,
          [SCHED_INST_REVERSE_COMPUTE_INLINE] = TSEL_OP_REVERSE_INLINE};
      cand_init(c, ops[in->kind]);
      return ni == 1 && arg_val(L, c, &I[0]);
    }
    case SCHED_INST_BIND:
      cand_init(c, TSEL_OP_BIND);
      if (ni != 1 || na != 1 || A[0].kind != SV_STR || !arg_val(L, c, &I[0])) return false;
      arg(c, tv_word(A[0].s));
      return true;
    case SCHED_INST_CACHE_READ: case SCHED_INST_CACHE_WRITE:
      cand_init(c, in->kind == SCHED_INST_CACHE_READ ? TSEL_OP_CACHE_READ : TSEL_OP_CACHE_WRITE);
      if (ni != 2 || na != 2 || A[1].kind != SV_STR || !arg_val(L, c, &I[0]) || !arg_val(L, c, &A[0]))
        return false;
      arg(c, tv_word(A[1].s));
      return arg_val(L, c, &I[1]);
    case SCHED_INST_REINDEX:
      cand_init(c, TSEL_OP_REINDEX);
      if (ni != 1 || na != 2 || !(is_int(&A[1], 0) || is_int(&A[1], 1)) || !arg_val(L, c, &I[0]) ||
          !arg_val(L, c, &A[0]))
        return false;
      arg(c, tv_word(A[1].i ? "write" : "read"));
      return true;
    case SCHED_INST_SET_SCOPE:
      cand_init(c, TSEL_OP_SET_SCOPE);
      if (ni != 1 || na != 2 || A[1].kind != SV_STR || !arg_val(L, c, &I[0]) || !arg_val(L, c, &A[0]))
        return false;
      arg(c, tv_word(A[1].s));
      return true;
    case SCHED_INST_STORAGE_ALIGN:
      cand_init(c, TSEL_OP_STORAGE_ALIGN);
      if (ni != 1 || na != 4 || !arg_val(L, c, &I[0])) return false;
      for (int i = 0; i < 4; i++)
        if (!arg_val(L, c, &A[i])) return false;
      return true;
    case SCHED_INST_COMPUTE_AT: case SCHED_INST_REVERSE_COMPUTE_AT:
      cand_init(c, in->kind == SCHED_INST_COMPUTE_AT ? TSEL_OP_COMPUTE_AT : TSEL_OP_REVERSE_COMPUTE_AT);
      if (ni != 2 || na != 2 || !arg_val(L, c, &I[0]) || !arg_val(L, c, &I[1])) return false;
      if (!is_int(&A[0], 1) && !kw_val(L, c, "unit", &A[0])) return false;
      if (!is_int(&A[1], -1) && !kw_val(L, c, "index", &A[1])) return false;
      return true;
    case SCHED_INST_DECOMPOSE_REDUCTION:
      cand_init(c, TSEL_OP_DECOMPOSE_REDUCTION);
      return ni == 2 && na == 0 && arg_val(L, c, &I[0]) && arg_val(L, c, &I[1]);
    case SCHED_INST_RFACTOR:
      cand_init(c, TSEL_OP_RFACTOR);
      return ni == 1 && na == 1 && arg_val(L, c, &I[0]) && arg_val(L, c, &A[0]);
    case SCHED_INST_BLOCKIZE: case SCHED_INST_TENSORIZE: {
      bool tz = in->kind == SCHED_INST_TENSORIZE;
      cand_init(c, tz ? TSEL_OP_TENSORIZE : TSEL_OP_BLOCKIZE);
      if (ni != 1 || na != (tz ? 2 : 1) || !arg_val(L, c, &I[0])) return false;
      if (tz && !arg_val(L, c, &A[0])) return false;
      const sched_val *u = &A[tz ? 1 : 0];
      if (!(u->kind == SV_BOOL && u->i == 1) && !kw_val(L, c, "unit", u)) return false;
      return true;
    }
    case SCHED_INST_ANNOTATE: case SCHED_INST_UNANNOTATE: {
      bool an = in->kind == SCHED_INST_ANNOTATE;
      cand_init(c, an ? TSEL_OP_ANNOTATE : TSEL_OP_UNANNOTATE);
      if (ni != (an ? 2 : 1) || na != 1 || !arg_val(L, c, &I[0]) || !ann_key(L, c, &A[0])) return false;
      return !an || arg_val(L, c, &I[1]);
    }
    case SCHED_INST_SAMPLE_PERFECT_TILE:
      cand_init(c, TSEL_OP_SAMPLE_TILE);
      if (ni != 1 || na != 2 || !in->has_decision || in->decision.kind != SV_ARRAY ||
          !is_int(&A[0], in->decision.n) || !arg_val(L, c, &I[0]) || !arg_val(L, c, &in->decision))
        return false;
      return kw_val(L, c, "max", &A[1]);
    case SCHED_INST_SAMPLE_CATEGORICAL:
      cand_init(c, TSEL_OP_SAMPLE);
      return ni == 0 && categorical(L, c, in, true);
    case SCHED_INST_SAMPLE_COMPUTE_LOCATION:
      cand_init(c, TSEL_OP_SAMPLE_LOC);
      return ni == 1 && na == 0 && in->has_decision && arg_val(L, c, &I[0]) &&
             kw_val(L, c, "", &in->decision);
    case SCHED_INST_ENTER_POSTPROC:
      cand_init(c, TSEL_OP_POSTPROC);
      return ni == 0 && na == 0;
    default: return false;
  }
}

static bool enc_raw(lifter *L, const sched_inst *in, cand *c) {
  cand_init(c, TSEL_OP_RAW);
  arg(c, tv_str(in->kind_name));
  sched_val ins = {.kind = SV_ARRAY, .items = in->inputs, .n = in->n_inputs};
  sched_val ats = {.kind = SV_ARRAY, .items = in->attrs, .n = in->n_attrs};
  if (!arg_val(L, c, &ins) || !arg_val(L, c, &ats)) return false;
  arg(c, tv_count(in->n_outputs));
  if (in->has_decision && !kw_val(L, c, "decision", &in->decision)) return false;
  static const sched_rv_kind outk[] = {
#define X(en, nm, fn, pure, nin, nattr, dec, out) out,
      SCHED_INST_LIST(X)
#undef X
  };
  sched_rv_kind dflt = in->kind < SCHED_INST_COUNT ? outk[in->kind] : SCHED_RV_EXPR;
  bool differ = false;
  for (int k = 0; k < in->n_outputs; k++) differ |= in->out_kinds[k] != dflt;
  if (differ) {
    char *s = dg_arena_alloc(L->a, (size_t)in->n_outputs + 1);
    for (int k = 0; k < in->n_outputs; k++)
      s[k] = in->out_kinds[k] == SCHED_RV_BLOCK ? 'b' : in->out_kinds[k] == SCHED_RV_LOOP ? 'l' : 'v';
    kw(c, "kinds", tv_str(s));
  }
  return true;
}

/* Folds starting at instruction i. */
static bool enc_fold(lifter *L, int op, int i, cand *c) {
  const sched_trace *t = L->t;
  int need = op == TSEL_OP_THREAD_SPLIT ? 3 : 2;
  if (i + need > t->n) return false;
  const sched_inst *a = &t->insts[i], *b = &t->insts[i + 1];
  cand_init(c, op);
  switch (op) {
    case TSEL_OP_THREAD_SPLIT:
      if (a->kind != SCHED_INST_SAMPLE_CATEGORICAL || b->kind != SCHED_INST_SPLIT ||
          t->insts[i + 2].kind != SCHED_INST_BIND || b->n_inputs != 3 || !arg_val(L, c, &b->inputs[0]))
        return false;
      return categorical(L, c, a, false);
    case TSEL_OP_TILE:
      if (a->kind != SCHED_INST_SAMPLE_PERFECT_TILE || b->kind != SCHED_INST_SPLIT || a->n_inputs != 1 ||
          a->n_attrs != 2 || !a->has_decision || !arg_val(L, c, &a->inputs[0]) ||
          !arg_val(L, c, &a->decision))
        return false;
      return kw_val(L, c, "max", &a->attrs[1]);
    case TSEL_OP_FUSE_BIND:
      if (a->kind != SCHED_INST_FUSE || b->kind != SCHED_INST_BIND || a->n_inputs < 2 || a->n_inputs > 64 ||
          b->n_attrs != 1 || b->attrs[0].kind != SV_STR)
        return false;
      for (int k = 0; k < a->n_inputs; k++)
        if (!arg_val(L, c, &a->inputs[k])) return false;
      arg(c, tv_word(b->attrs[0].s));
      return true;
    case TSEL_OP_CACHE_READ_AT: case TSEL_OP_CACHE_WRITE_AT: {
      bool rd = op == TSEL_OP_CACHE_READ_AT;
      if (a->kind != (rd ? SCHED_INST_CACHE_READ : SCHED_INST_CACHE_WRITE) ||
          b->kind != (rd ? SCHED_INST_COMPUTE_AT : SCHED_INST_REVERSE_COMPUTE_AT) || a->n_inputs != 2 ||
          a->n_attrs != 2 || a->attrs[1].kind != SV_STR || b->n_inputs != 2)
        return false;
      if (!arg_val(L, c, &a->inputs[0]) || !arg_val(L, c, &a->attrs[0])) return false;
      arg(c, tv_word(a->attrs[1].s));
      return arg_val(L, c, &b->inputs[1]);
    }
    case TSEL_OP_COOP: case TSEL_OP_UNROLL_STEPS: {
      const char *key = op == TSEL_OP_COOP ? "meta_schedule.cooperative_fetch" : "meta_schedule.unroll_explicit";
      if (a->kind != SCHED_INST_SAMPLE_CATEGORICAL || b->kind != SCHED_INST_ANNOTATE || b->n_inputs != 2 ||
          b->n_attrs != 1 || b->attrs[0].kind != SV_STR || strcmp(b->attrs[0].s, key) != 0 ||
          !arg_val(L, c, &b->inputs[0]))
        return false;
      return categorical(L, c, a, false);
    }
  }
  return false;
}

static bool val_eq(const sched_val *a, const sched_val *b) {
  if (a->kind != b->kind) return false;
  switch (a->kind) {
    case SV_NONE: return true;
    case SV_INT: case SV_BOOL: case SV_RV: return a->i == b->i;
    case SV_FLOAT: return memcmp(&a->f, &b->f, sizeof a->f) == 0 || a->f == b->f;
    case SV_STR: return strcmp(a->s, b->s) == 0;
    case SV_ARRAY:
      if (a->n != b->n) return false;
      for (int i = 0; i < a->n; i++)
        if (!val_eq(&a->items[i], &b->items[i])) return false;
      return true;
  }
  return false;
}

static bool inst_eq(const sched_inst *x, const sched_inst *y) {
  if (x->kind != y->kind || strcmp(x->kind_name, y->kind_name) != 0 || x->n_inputs != y->n_inputs ||
      x->n_attrs != y->n_attrs || x->n_outputs != y->n_outputs || x->has_decision != y->has_decision)
    return false;
  for (int k = 0; k < x->n_inputs; k++)
    if (!val_eq(&x->inputs[k], &y->inputs[k])) return false;
  for (int k = 0; k < x->n_attrs; k++)
    if (!val_eq(&x->attrs[k], &y->attrs[k])) return false;
  for (int k = 0; k < x->n_outputs; k++)
    if (x->outputs[k] != y->outputs[k] || x->out_kinds[k] != y->out_kinds[k]) return false;
  return !x->has_decision || val_eq(&x->decision, &y->decision);
}

static int max_rv(const sched_val *v) {
  int m = v->kind == SV_RV ? (int)(v->i > INT32_MAX ? INT32_MAX : v->i < -1 ? -1 : v->i) : -1;
  if (v->kind == SV_ARRAY)
    for (int i = 0; i < v->n; i++) {
      int x = max_rv(&v->items[i]);
      if (x > m) m = x;
    }
  return m;
}

static void count_uses(const sched_val *v, int *uses, int n) {
  if (v->kind == SV_RV && v->i >= 0 && v->i < n) uses[v->i]++;
  if (v->kind == SV_ARRAY)
    for (int i = 0; i < v->n; i++) count_uses(&v->items[i], uses, n);
}

/* Takes the candidate if it types, expands to exactly insts [i, i+n) and
 * its hidden values are used only there. */
static bool try_cand(lifter *L, int i, cand *c, int *n_insts) {
  if (c->e.n_args > (int)DG_ARRAY_LEN(c->args)) return false;
  dg_status st;
  if (!tsel_env_step(&L->env, L->g, &c->e, &st)) return false;
  int num = L->env.n_done;
  sched_trace *x = sched_trace_new();
  tsel_expand_edit(&L->env, &c->e, num, x);
  bool ok = i + x->n <= L->t->n;
  for (int k = 0; ok && k < x->n; k++) ok = inst_eq(&x->insts[k], &L->t->insts[i + k]);
  const tsel_out *o = &L->env.outs[num - 1];
  if (ok && o->n_hidden) {
    int *local = dg_calloc((size_t)L->t->n_rvs + 1, sizeof(int));
    for (int k = 0; k < x->n; k++)
      for (int j = 0; j < x->insts[k].n_inputs; j++) count_uses(&x->insts[k].inputs[j], local, L->t->n_rvs);
    for (int h = o->hidden_rv; ok && h < o->hidden_rv + o->n_hidden; h++)
      ok = h < L->t->n_rvs && local[h] == L->uses[h];
    free(local);
  }
  int n = x->n;
  sched_trace_free(x);
  if (!ok || n == 0) {
    tsel_env_undo(&L->env);
    return false;
  }
  tsel_graph_add_edit(L->g, &c->e);
  for (int k = 0; k < o->n_out; k++)
    if (o->alias_of < 0) {
      L->ref_edit[o->rv[k]] = num;
      L->ref_sub[o->rv[k]] = k;
    }
  *n_insts = n;
  return true;
}

static tsel_graph *lift_trace(const sched_trace *t, const char *kernel_spec,
                              const dg_func *kernel, const tsel_record *rec, dg_status *st) {
  dg_status_ok(st);
  /* handles must be serial in order of definition and defined before use */
  int next = 0;
  int nr = t->n_rvs;
  int *uses = dg_calloc((size_t)nr + 1, sizeof(int));
  for (int i = 0; i < t->n; i++) {
    const sched_inst *in = &t->insts[i];
    for (int k = 0; k < in->n_inputs; k++) count_uses(&in->inputs[k], uses, nr);
    for (int k = 0; k < in->n_inputs; k++) {
      int m = max_rv(&in->inputs[k]);
      if (m >= next) {
        free(uses);
        dg_fail(st, DG_ERR_INVALID, "instruction %d (%s): handle %d is used before it is defined", i,
                in->kind_name, m);
        return NULL;
      }
    }
    for (int k = 0; k < in->n_outputs; k++)
      if (in->outputs[k] != next++) {
        free(uses);
        dg_fail(st, DG_ERR_INVALID,
                "instruction %d (%s): output %d is handle %d, expected %d (handles are numbered serially)",
                i, in->kind_name, k, in->outputs[k], next - 1);
        return NULL;
      }
  }
  if (next != nr) {
    free(uses);
    dg_fail(st, DG_ERR_INVALID, "the trace defines %d handles but counts %d", next, nr);
    return NULL;
  }
  lifter L = {.t = t, .g = tsel_graph_new(kernel_spec), .uses = uses, .a = dg_arena_new()};
  L.ref_edit = dg_calloc((size_t)nr + 1, sizeof(int));
  L.ref_sub = dg_calloc((size_t)nr + 1, sizeof(int));
  tsel_env_init(&L.env, t->n + 1);
  static const int folds[] = {TSEL_OP_THREAD_SPLIT, TSEL_OP_TILE, TSEL_OP_FUSE_BIND, TSEL_OP_CACHE_READ_AT,
                              TSEL_OP_CACHE_WRITE_AT, TSEL_OP_COOP, TSEL_OP_UNROLL_STEPS};
  bool ok = true;
  cand *c = dg_malloc(sizeof *c);
  for (int i = 0; i < t->n && ok;) {
    int start = L.env.n_done, used = 0;
    bool taken = false;
    for (size_t f = 0; f < DG_ARRAY_LEN(folds) && !taken; f++)
      taken = enc_fold(&L, folds[f], i, c) && try_cand(&L, i, c, &used);
    if (!taken) taken = enc_single(&L, &t->insts[i], c) && try_cand(&L, i, c, &used);
    if (!taken) taken = enc_raw(&L, &t->insts[i], c) && try_cand(&L, i, c, &used);
    if (!taken) {
      dg_fail(st, DG_ERR_INVALID, "instruction %d (%s): cannot be written in TSEL (handles in attrs or decisions)",
              i, t->insts[i].kind_name);
      ok = false;
      break;
    }
    DG_ASSERT(L.env.n_done == start + 1);
    i += used;
  }
  free(c);
  tsel_env_free(&L.env);
  free(L.ref_edit);
  free(L.ref_sub);
  free(uses);
  dg_arena_free(L.a);
  if (ok && kernel && !tsel_explain(L.g, kernel, rec, st)) ok = false;
  if (!ok) {
    tsel_graph_free(L.g);
    return NULL;
  }
  return L.g;
}

tsel_graph *tsel_lift(const sched_trace *t, const char *kernel_spec, const dg_func *kernel,
                      const tsel_record *rec, dg_status *st) {
  int p = tsel_postproc_default_at(t, kernel_spec, kernel);
  if (p < 0) return lift_trace(t, kernel_spec, kernel, rec, st);
  /* the head and its EnterPostproc, lifted; then `postproc` becomes
   * `postproc default`, standing for the whole postprocessing tail */
  sched_trace *head = sched_trace_new();
  for (int i = 0; i <= p; i++) sched_trace_append(head, &t->insts[i]);
  tsel_graph *g = lift_trace(head, kernel_spec, kernel, rec, st);
  sched_trace_free(head);
  if (!g) return NULL;
  tsel_edit *e = &g->edits[g->n_edits - 1];
  DG_ASSERT(e->op == TSEL_OP_POSTPROC && e->n_args == 0);
  e->args = DG_ANEWN(g->arena, tsel_val, 1);
  e->args[0] = (tsel_val){.kind = TV_WORD, .s = "default"};
  e->n_args = 1;
  return g;
}
