/* lower.c: graph -> trace. Each typed edit expands to the instructions it
 * stands for, with TVM's attrs (defaults filled in: Split [1, 0], Fuse [1],
 * ComputeAt [1, -1], Blockize/Tensorize true, uniform probabilities) and
 * decisions; handles are numbered by one serial counter in the order the
 * instructions define them, hidden sampled values included. Lowering runs
 * the kernel-free checker first, so expansion only meets well-typed edits;
 * `postproc default` is expanded by replaying the edits before it on the
 * graph's kernel and running the default postprocessors (postproc.c). */
#include <string.h>

#include "dragon/wl.h"
#include "tsel/tsel_impl.h"

typedef struct {
  const tsel_env *env;
  dg_arena *a;
  sched_trace *t;
} lowerer;

static sched_val to_val(lowerer *lw, const tsel_val *v) {
  sched_val o;
  memset(&o, 0, sizeof o);
  switch (v->kind) {
    case TV_NONE: o.kind = SV_NONE; break;
    case TV_INT: o.kind = SV_INT; o.i = v->i; break;
    case TV_FLOAT: o.kind = SV_FLOAT; o.f = v->f; break;
    case TV_BOOL: o.kind = SV_BOOL; o.i = v->i; break;
    case TV_STR: case TV_WORD: o.kind = SV_STR; o.s = v->s; break;
    case TV_REF: o.kind = SV_RV; o.i = tsel_env_ref_rv(lw->env, v); break;
    case TV_LIST:
      o.kind = SV_ARRAY;
      o.n = v->n;
      o.items = DG_ANEWN(lw->a, sched_val, v->n ? v->n : 1);
      for (int i = 0; i < v->n; i++) o.items[i] = to_val(lw, &v->items[i]);
      break;
    case TV_COUNT: DG_UNREACHABLE();
  }
  return o;
}

static sched_val vint(int64_t x) { return (sched_val){.kind = SV_INT, .i = x}; }
static sched_val vrv(int x) { return (sched_val){.kind = SV_RV, .i = x}; }
static sched_val vstr(const char *s) { return (sched_val){.kind = SV_STR, .s = s}; }

/* A flag keyword as written, or the default. */
static sched_val flag(lowerer *lw, const tsel_edit *e, const char *key, sched_val dflt) {
  const tsel_kw *k = tsel_edit_kw(e, key);
  return k ? to_val(lw, &k->val) : dflt;
}

static void emit(lowerer *lw, sched_inst_kind k, const char *name, sched_val *in, int nin,
                 sched_val *at, int nat, const int *outs, const sched_rv_kind *kinds, int nout,
                 const sched_val *dec) {
  sched_inst inst = {.kind = k,
                     .kind_name = name ? name : sched_inst_name(k),
                     .inputs = in,
                     .n_inputs = nin,
                     .attrs = at,
                     .n_attrs = nat,
                     .outputs = (int *)outs,
                     .out_kinds = (sched_rv_kind *)kinds,
                     .n_outputs = nout};
  if (dec) {
    inst.has_decision = true;
    inst.decision = *dec;
  }
  sched_trace_append(lw->t, &inst);
}

static sched_val list_of(lowerer *lw, const int *rvs, int n) {
  sched_val a = {.kind = SV_ARRAY, .n = n, .items = DG_ANEWN(lw->a, sched_val, n ? n : 1)};
  for (int i = 0; i < n; i++) a.items[i] = vrv(rvs[i]);
  return a;
}

static sched_val uniform_probs(lowerer *lw, int n) {
  sched_val a = {.kind = SV_ARRAY, .n = n, .items = DG_ANEWN(lw->a, sched_val, n ? n : 1)};
  for (int i = 0; i < n; i++) a.items[i] = (sched_val){.kind = SV_FLOAT, .f = 1.0 / n};
  return a;
}

/* SampleCategorical of a sample-like edit; its output is `out`. */
static void emit_categorical(lowerer *lw, const tsel_edit *e, const tsel_val *cands, int out) {
  sched_val at[2] = {to_val(lw, cands), uniform_probs(lw, cands->n)};
  const tsel_kw *pr = tsel_edit_kw(e, "probs");
  if (pr) at[1] = to_val(lw, &pr->val);
  sched_val dec = vint(tsel_sample_index(e));
  sched_rv_kind k = SCHED_RV_EXPR;
  emit(lw, SCHED_INST_SAMPLE_CATEGORICAL, NULL, NULL, 0, at, 2, &out, &k, 1, &dec);
}

void tsel_expand_edit(const tsel_env *env, const tsel_edit *e, int num, sched_trace *t) {
  DG_ASSERT(num >= 1 && num <= env->n_done);
  const tsel_out *o = &env->outs[num - 1];
  dg_arena *a = dg_arena_new();
  lowerer lw0 = {.env = env, .a = a, .t = t}, *lw = &lw0;
  sched_val in[8], at[4];
  const tsel_val *args = e->args;
  int n = e->n_args;
  /* variadic inputs (split factors, fuse/reorder loops) */
  size_t need = (size_t)n + 2;
  for (int i = 0; i < n; i++)
    if (args[i].kind == TV_LIST) need += (size_t)args[i].n;
  sched_val *vin = DG_ANEWN(a, sched_val, need);
  sched_rv_kind lk[2] = {SCHED_RV_LOOP, SCHED_RV_LOOP};
  switch ((tsel_op)e->op) {
    case TSEL_OP_BLOCK: {
      const tsel_kw *fk = tsel_edit_kw(e, "func");
      at[0] = vstr(args[0].s);
      at[1] = vstr(fk ? fk->val.s : "main");
      emit(lw, SCHED_INST_GET_BLOCK, NULL, NULL, 0, at, 2, o->rv, o->kind, o->n_out, NULL);
      break;
    }
    case TSEL_OP_LOOPS: case TSEL_OP_CHILDREN: case TSEL_OP_PRODUCERS: case TSEL_OP_CONSUMERS:
    case TSEL_OP_ADD_UNIT_LOOP: case TSEL_OP_PARALLEL: case TSEL_OP_VECTORIZE: case TSEL_OP_UNROLL:
    case TSEL_OP_INLINE: case TSEL_OP_REVERSE_INLINE: {
      static const sched_inst_kind kinds[TSEL_OP_COUNT] = {
          [TSEL_OP_LOOPS] = SCHED_INST_GET_LOOPS, [TSEL_OP_CHILDREN] = SCHED_INST_GET_CHILD_BLOCKS,
          [TSEL_OP_PRODUCERS] = SCHED_INST_GET_PRODUCERS, [TSEL_OP_CONSUMERS] = SCHED_INST_GET_CONSUMERS,
          [TSEL_OP_ADD_UNIT_LOOP] = SCHED_INST_ADD_UNIT_LOOP, [TSEL_OP_PARALLEL] = SCHED_INST_PARALLEL,
          [TSEL_OP_VECTORIZE] = SCHED_INST_VECTORIZE, [TSEL_OP_UNROLL] = SCHED_INST_UNROLL,
          [TSEL_OP_INLINE] = SCHED_INST_COMPUTE_INLINE,
          [TSEL_OP_REVERSE_INLINE] = SCHED_INST_REVERSE_COMPUTE_INLINE};
      in[0] = to_val(lw, &args[0]);
      emit(lw, kinds[e->op], NULL, in, 1, NULL, 0, o->rv, o->kind, o->n_out, NULL);
      break;
    }
    case TSEL_OP_SPLIT:
      vin[0] = to_val(lw, &args[0]);
      for (int i = 0; i < args[1].n; i++) vin[i + 1] = to_val(lw, &args[1].items[i]);
      at[0] = flag(lw, e, "unit", vint(1));
      at[1] = flag(lw, e, "nopred", vint(0));
      emit(lw, SCHED_INST_SPLIT, NULL, vin, args[1].n + 1, at, 2, o->rv, o->kind, o->n_out, NULL);
      break;
    case TSEL_OP_FUSE: case TSEL_OP_REORDER:
      for (int i = 0; i < n; i++) vin[i] = to_val(lw, &args[i]);
      at[0] = flag(lw, e, "unit", vint(1));
      emit(lw, e->op == TSEL_OP_FUSE ? SCHED_INST_FUSE : SCHED_INST_REORDER, NULL, vin, n, at,
           e->op == TSEL_OP_FUSE ? 1 : 0, o->rv, o->kind, o->n_out, NULL);
      break;
    case TSEL_OP_BIND:
      in[0] = to_val(lw, &args[0]);
      at[0] = to_val(lw, &args[1]);
      emit(lw, SCHED_INST_BIND, NULL, in, 1, at, 1, NULL, NULL, 0, NULL);
      break;
    case TSEL_OP_CACHE_READ: case TSEL_OP_CACHE_WRITE:
      in[0] = to_val(lw, &args[0]);
      in[1] = to_val(lw, &args[3]);
      at[0] = to_val(lw, &args[1]);
      at[1] = to_val(lw, &args[2]);
      emit(lw, e->op == TSEL_OP_CACHE_READ ? SCHED_INST_CACHE_READ : SCHED_INST_CACHE_WRITE, NULL,
           in, 2, at, 2, o->rv, o->kind, 1, NULL);
      break;
    case TSEL_OP_REINDEX:
      in[0] = to_val(lw, &args[0]);
      at[0] = to_val(lw, &args[1]);
      at[1] = vint(strcmp(args[2].s, "write") == 0);
      emit(lw, SCHED_INST_REINDEX, NULL, in, 1, at, 2, o->rv, o->kind, 1, NULL);
      break;
    case TSEL_OP_COMPUTE_AT: case TSEL_OP_REVERSE_COMPUTE_AT:
      in[0] = to_val(lw, &args[0]);
      in[1] = to_val(lw, &args[1]);
      at[0] = flag(lw, e, "unit", vint(1));
      at[1] = flag(lw, e, "index", vint(-1));
      emit(lw, e->op == TSEL_OP_COMPUTE_AT ? SCHED_INST_COMPUTE_AT : SCHED_INST_REVERSE_COMPUTE_AT,
           NULL, in, 2, at, 2, NULL, NULL, 0, NULL);
      break;
    case TSEL_OP_DECOMPOSE_REDUCTION:
      in[0] = to_val(lw, &args[0]);
      in[1] = to_val(lw, &args[1]);
      emit(lw, SCHED_INST_DECOMPOSE_REDUCTION, NULL, in, 2, NULL, 0, o->rv, o->kind, 1, NULL);
      break;
    case TSEL_OP_RFACTOR:
      in[0] = to_val(lw, &args[0]);
      at[0] = to_val(lw, &args[1]);
      emit(lw, SCHED_INST_RFACTOR, NULL, in, 1, at, 1, o->rv, o->kind, 1, NULL);
      break;
    case TSEL_OP_STORAGE_ALIGN:
      in[0] = to_val(lw, &args[0]);
      for (int i = 0; i < 4; i++) at[i] = to_val(lw, &args[i + 1]);
      emit(lw, SCHED_INST_STORAGE_ALIGN, NULL, in, 1, at, 4, NULL, NULL, 0, NULL);
      break;
    case TSEL_OP_SET_SCOPE:
      in[0] = to_val(lw, &args[0]);
      at[0] = to_val(lw, &args[1]);
      at[1] = to_val(lw, &args[2]);
      emit(lw, SCHED_INST_SET_SCOPE, NULL, in, 1, at, 2, NULL, NULL, 0, NULL);
      break;
    case TSEL_OP_BLOCKIZE:
      in[0] = to_val(lw, &args[0]);
      at[0] = flag(lw, e, "unit", (sched_val){.kind = SV_BOOL, .i = 1});
      emit(lw, SCHED_INST_BLOCKIZE, NULL, in, 1, at, 1, o->rv, o->kind, 1, NULL);
      break;
    case TSEL_OP_TENSORIZE:
      in[0] = to_val(lw, &args[0]);
      at[0] = to_val(lw, &args[1]);
      at[1] = flag(lw, e, "unit", (sched_val){.kind = SV_BOOL, .i = 1});
      emit(lw, SCHED_INST_TENSORIZE, NULL, in, 1, at, 2, NULL, NULL, 0, NULL);
      break;
    case TSEL_OP_ANNOTATE: case TSEL_OP_UNANNOTATE: {
      in[0] = to_val(lw, &args[0]);
      const char *key = args[1].kind == TV_WORD ? tsel_ann_full(args[1].s) : args[1].s;
      at[0] = vstr(key);
      if (e->op == TSEL_OP_ANNOTATE) {
        in[1] = to_val(lw, &args[2]);
        emit(lw, SCHED_INST_ANNOTATE, NULL, in, 2, at, 1, NULL, NULL, 0, NULL);
      } else {
        emit(lw, SCHED_INST_UNANNOTATE, NULL, in, 1, at, 1, NULL, NULL, 0, NULL);
      }
      break;
    }
    case TSEL_OP_SAMPLE_TILE: case TSEL_OP_TILE: {
      bool fold = e->op == TSEL_OP_TILE;
      int nt = args[1].n;
      in[0] = to_val(lw, &args[0]);
      at[0] = vint(nt);
      at[1] = to_val(lw, &tsel_edit_kw(e, "max")->val);
      sched_val dec = to_val(lw, &args[1]);
      int *vs = DG_ANEWN(a, int, nt);
      sched_rv_kind *vk = DG_ANEWN(a, sched_rv_kind, nt);
      for (int i = 0; i < nt; i++) {
        vs[i] = fold ? o->hidden_rv + i : o->rv[i];
        vk[i] = SCHED_RV_EXPR;
      }
      emit(lw, SCHED_INST_SAMPLE_PERFECT_TILE, NULL, in, 1, at, 2, vs, vk, nt, &dec);
      if (fold) {
        vin[0] = in[0];
        for (int i = 0; i < nt; i++) vin[i + 1] = vrv(vs[i]);
        at[0] = vint(1);
        at[1] = vint(0);
        emit(lw, SCHED_INST_SPLIT, NULL, vin, nt + 1, at, 2, o->rv, o->kind, nt, NULL);
      }
      break;
    }
    case TSEL_OP_SAMPLE: emit_categorical(lw, e, &args[0], o->rv[0]); break;
    case TSEL_OP_SAMPLE_LOC: {
      in[0] = to_val(lw, &args[0]);
      sched_val dec = to_val(lw, &tsel_edit_kw(e, "")->val);
      emit(lw, SCHED_INST_SAMPLE_COMPUTE_LOCATION, NULL, in, 1, NULL, 0, o->rv, o->kind, 1, &dec);
      break;
    }
    case TSEL_OP_POSTPROC:
      DG_ASSERT(n == 0); /* `postproc default` is expanded by tsel_lower */
      emit(lw, SCHED_INST_ENTER_POSTPROC, NULL, NULL, 0, NULL, 0, NULL, NULL, 0, NULL);
      break;
    case TSEL_OP_RAW: {
      sched_inst_kind k;
      if (!sched_inst_from_name(args[0].s, &k)) k = SCHED_INST_UNKNOWN;
      sched_val ins = to_val(lw, &args[1]), ats = to_val(lw, &args[2]);
      const tsel_kw *dk = tsel_edit_kw(e, "decision");
      sched_val dec = dk ? to_val(lw, &dk->val) : (sched_val){0};
      emit(lw, k, args[0].s, ins.items, ins.n, ats.items, ats.n, o->rv, o->kind, o->n_out,
           dk ? &dec : NULL);
      break;
    }
    case TSEL_OP_FUSE_BIND: {
      int nl = n - 1;
      at[0] = to_val(lw, &args[nl]);
      if (nl == 1) {
        in[0] = to_val(lw, &args[0]);
      } else {
        for (int i = 0; i < nl; i++) vin[i] = to_val(lw, &args[i]);
        sched_val u = vint(1);
        emit(lw, SCHED_INST_FUSE, NULL, vin, nl, &u, 1, o->rv, o->kind, 1, NULL);
        in[0] = vrv(o->rv[0]);
      }
      emit(lw, SCHED_INST_BIND, NULL, in, 1, at, 1, NULL, NULL, 0, NULL);
      break;
    }
    case TSEL_OP_CACHE_READ_AT: case TSEL_OP_CACHE_WRITE_AT: {
      bool rd = e->op == TSEL_OP_CACHE_READ_AT;
      in[0] = to_val(lw, &args[0]);
      in[1] = rd ? list_of(lw, &(int){(int)in[0].i}, 1) : list_of(lw, NULL, 0);
      at[0] = to_val(lw, &args[1]);
      at[1] = to_val(lw, &args[2]);
      emit(lw, rd ? SCHED_INST_CACHE_READ : SCHED_INST_CACHE_WRITE, NULL, in, 2, at, 2, o->rv,
           o->kind, 1, NULL);
      in[0] = vrv(o->rv[0]);
      in[1] = to_val(lw, &args[3]);
      at[0] = vint(1);
      at[1] = vint(-1);
      emit(lw, rd ? SCHED_INST_COMPUTE_AT : SCHED_INST_REVERSE_COMPUTE_AT, NULL, in, 2, at, 2, NULL,
           NULL, 0, NULL);
      break;
    }
    case TSEL_OP_COOP: case TSEL_OP_UNROLL_STEPS:
      emit_categorical(lw, e, &args[1], o->hidden_rv);
      in[0] = to_val(lw, &args[0]);
      in[1] = vrv(o->hidden_rv);
      at[0] = vstr(e->op == TSEL_OP_COOP ? "meta_schedule.cooperative_fetch" : "meta_schedule.unroll_explicit");
      emit(lw, SCHED_INST_ANNOTATE, NULL, in, 2, at, 1, NULL, NULL, 0, NULL);
      break;
    case TSEL_OP_THREAD_SPLIT:
      emit_categorical(lw, e, &args[1], o->hidden_rv);
      in[0] = to_val(lw, &args[0]);
      in[1] = (sched_val){.kind = SV_NONE};
      in[2] = vrv(o->hidden_rv);
      at[0] = vint(1);
      at[1] = vint(0);
      emit(lw, SCHED_INST_SPLIT, NULL, in, 3, at, 2, o->rv, lk, 2, NULL);
      in[0] = vrv(o->rv[1]);
      at[0] = vstr("threadIdx.x");
      emit(lw, SCHED_INST_BIND, NULL, in, 1, at, 1, NULL, NULL, 0, NULL);
      break;
    case TSEL_OP_COUNT: DG_UNREACHABLE();
  }
  dg_arena_free(a);
}

sched_trace *tsel_lower(const tsel_graph *g, dg_status *st) {
  tsel_env env;
  tsel_env_init(&env, g->n_edits);
  sched_trace *t = NULL;
  /* handle ids never change once assigned, so one typing pass serves the
   * expansion of every edit */
  if (tsel_typecheck(g, &env, st)) {
    /* `postproc default` (the last edit, the checker says) stands for what
     * the default postprocessors record on the graph's kernel */
    const tsel_edit *last = g->n_edits ? &g->edits[g->n_edits - 1] : NULL;
    bool fold = last && last->op == TSEL_OP_POSTPROC && last->n_args == 1;
    int n = fold ? g->n_edits - 1 : g->n_edits;
    t = sched_trace_new();
    for (int i = 0; i < n; i++) tsel_expand_edit(&env, &g->edits[i], i + 1, t);
    t->n_rvs = env.next_rv;
    if (fold) {
      dg_func *k = wl_build(g->kernel, st);
      sched_trace *full = k ? tsel_postproc_expand(t, k, st) : NULL;
      ir_func_free(k);
      sched_trace_free(t);
      t = full;
      if (!t)
        dg_status_prefix(st, "%d:%d: t%d postproc default", last->line, last->op_col, g->n_edits);
    }
  }
  tsel_env_free(&env);
  return t;
}
