/* apply.c: applying instructions (the one path every step takes: checks,
 * the primitive, recording in the trace), replaying traces (exactly, with
 * every decision drawn anew, or repairing stale decisions as TVM does for
 * the search's mutants: sched_replay_mode), and the typed primitive API,
 * which only builds instructions and applies them. */
#include <stdlib.h>
#include <string.h>

#include "sched/sched_impl.h"

enum { MAX_OUT = 4096 };

static void set_brief(sched *s, sched_inst_kind k, const char *msg) {
  /* the short rendering: the kind and the message up to its first ':' */
  const char *colon = strchr(msg, ':');
  int n = colon ? (int)(colon - msg) : (int)strlen(msg);
  if (n > 100) n = 100;
  snprintf(s->brief, sizeof s->brief, "%s: %.*s", sched_inst_name(k), n, msg);
}

/* The one path: `repair` says whether a given decision that is no longer
 * valid may be repaired (SCHED_REPLAY_REPAIR) or is an error. */
static bool apply_inst(sched *s, const sched_inst *inst, bool repair, int *out, int max_out,
                       int *n_out, dg_status *st) {
  dg_status_ok(st);
  sched_inst_kind k = inst->kind;
  if (k >= SCHED_INST_COUNT) {
    dg_fail(st, DG_ERR_INVALID, "%s: instruction kind not implemented by dragon",
            inst->kind_name ? inst->kind_name : "?");
    snprintf(s->brief, sizeof s->brief, "%s: unknown kind", inst->kind_name ? inst->kind_name : "?");
    return false;
  }
  const char *name = sched_inst_name(k);
  static const int n_in[] = {
#define X(e, nm, fn, pure, nin, nattr, dec, outk) nin,
      SCHED_INST_LIST(X)
#undef X
  };
  static const int n_at[] = {
#define X(e, nm, fn, pure, nin, nattr, dec, outk) nattr,
      SCHED_INST_LIST(X)
#undef X
  };
  if (n_in[k] >= 0 && inst->n_inputs != n_in[k]) {
    dg_fail(st, DG_ERR_INVALID, "%s: expected %d inputs, got %d", name, n_in[k], inst->n_inputs);
    set_brief(s, k, "wrong number of inputs");
    return false;
  }
  if (inst->n_attrs != n_at[k]) {
    dg_fail(st, DG_ERR_INVALID, "%s: expected %d attrs, got %d", name, n_at[k], inst->n_attrs);
    set_brief(s, k, "wrong number of attrs");
    return false;
  }
  prim_apply_fn fn = sched_prim_table[k];
  if (!fn) {
    dg_fail(st, DG_ERR_INVALID, "%s: not supported by this build", name);
    set_brief(s, k, "not supported");
    return false;
  }
  int tmp[MAX_OUT];
  prim_call c = {.s = s,
                 .inst = inst,
                 .has_decision = inst->has_decision,
                 .decision = inst->decision,
                 .repair = repair,
                 .out = tmp,
                 .max_out = MAX_OUT};
  if (!fn(&c, st)) {
    set_brief(s, k, st ? st->msg : "failed");
    dg_status_prefix(st, "%s", name);
    return false;
  }
  sched_inst rec = *inst;
  rec.kind_name = name;
  rec.outputs = tmp;
  rec.n_outputs = c.n_out;
  sched_rv_kind kinds[MAX_OUT];
  for (int i = 0; i < c.n_out; i++) kinds[i] = s->rvs[tmp[i]].kind;
  rec.out_kinds = kinds;
  rec.has_decision = c.has_decision;
  rec.decision = c.decision;
  sched_trace_append(s->trace, &rec);
  if (n_out) *n_out = c.n_out;
  if (out) {
    if (c.n_out > max_out) {
      dg_fail(st, DG_ERR_INVALID, "%s: %d outputs, room for %d", name, c.n_out, max_out);
      return false;
    }
    memcpy(out, tmp, sizeof(int) * (size_t)c.n_out);
  }
  return true;
}

bool sched_apply(sched *s, const sched_inst *inst, int *out, int max_out, int *n_out,
                 dg_status *st) {
  return apply_inst(s, inst, true, out, max_out, n_out, st);
}

/* ---- replay ------------------------------------------------------------------ */

static bool map_val(dg_arena *a, const sched_val *v, sched_val *o, const int *map, int n_map,
                    dg_status *st) {
  *o = *v;
  if (v->kind == SV_RV) {
    if (v->i < 0 || v->i >= n_map || map[v->i] < 0)
      return dg_fail(st, DG_ERR_INVALID, "handle %lld is used before it is defined", (long long)v->i);
    o->i = map[v->i];
  } else if (v->kind == SV_ARRAY) {
    o->items = DG_ANEWN(a, sched_val, v->n ? v->n : 1);
    for (int i = 0; i < v->n; i++)
      if (!map_val(a, &v->items[i], &o->items[i], map, n_map, st)) return false;
  }
  return true;
}

static bool replay(sched *s, const sched_trace *t, sched_replay_mode mode, bool remove_postproc,
                   int *map_out, dg_status *st) {
  dg_status_ok(st);
  DG_ASSERT(mode == SCHED_REPLAY_EXACT || mode == SCHED_REPLAY_RESAMPLE ||
            mode == SCHED_REPLAY_REPAIR);
  int n_map = t->n_rvs;
  int *map = dg_malloc(sizeof(int) * (size_t)(n_map + 1));
  for (int i = 0; i <= n_map; i++) map[i] = -1;
  dg_arena *a = dg_arena_new();
  bool ok = true;
  for (int i = 0; i < t->n && ok; i++) {
    const sched_inst *old = &t->insts[i];
    if (remove_postproc && old->kind == SCHED_INST_ENTER_POSTPROC) break;
    sched_inst in = *old;
    in.inputs = DG_ANEWN(a, sched_val, old->n_inputs ? old->n_inputs : 1);
    for (int k = 0; k < old->n_inputs && ok; k++)
      ok = map_val(a, &old->inputs[k], &in.inputs[k], map, n_map, st);
    if (!ok) {
      dg_status_prefix(st, "instruction %d (%s)", i, old->kind_name);
      break;
    }
    in.has_decision = old->has_decision && mode != SCHED_REPLAY_RESAMPLE;
    int out[MAX_OUT], n_out = 0;
    if (!apply_inst(s, &in, mode == SCHED_REPLAY_REPAIR, out, MAX_OUT, &n_out, st)) {
      dg_status_prefix(st, "instruction %d", i);
      ok = false;
      break;
    }
    if (n_out != old->n_outputs) {
      dg_fail(st, DG_ERR_INVALID, "instruction %d (%s): produced %d outputs, the trace has %d", i,
              old->kind_name, n_out, old->n_outputs);
      ok = false;
      break;
    }
    for (int k = 0; k < n_out; k++)
      if (old->outputs[k] >= 0 && old->outputs[k] < n_map) map[old->outputs[k]] = out[k];
  }
  dg_arena_free(a);
  if (map_out) memcpy(map_out, map, sizeof(int) * (size_t)n_map);
  free(map);
  return ok;
}

bool sched_replay_with(sched *s, const sched_trace *t, sched_replay_mode mode,
                       bool remove_postproc, dg_status *st) {
  return replay(s, t, mode, remove_postproc, NULL, st);
}

bool sched_replay_map(sched *s, const sched_trace *t, bool remove_postproc, int *map,
                      dg_status *st) {
  return replay(s, t, SCHED_REPLAY_EXACT, remove_postproc, map, st);
}

bool sched_replay(sched *s, const sched_trace *t, bool resample, bool remove_postproc,
                  dg_status *st) {
  return sched_replay_with(s, t, resample ? SCHED_REPLAY_RESAMPLE : SCHED_REPLAY_EXACT,
                           remove_postproc, st);
}

/* ---- the typed API --------------------------------------------------------------- */

static sched_val vint(int64_t x) { return (sched_val){.kind = SV_INT, .i = x}; }
static sched_val vbool(bool x) { return (sched_val){.kind = SV_BOOL, .i = x}; }
static sched_val vrv(int x) { return (sched_val){.kind = SV_RV, .i = x}; }
static sched_val vstr(const char *x) { return (sched_val){.kind = SV_STR, .s = x}; }

/* Applies a kind with the given inputs/attrs; returns the output count or -1. */
static int run(sched *s, sched_inst_kind k, sched_val *in, int nin, sched_val *at, int nat,
               const sched_val *dec, int *out, int max_out, dg_status *st) {
  sched_inst inst = {.kind = k,
                     .kind_name = sched_inst_name(k),
                     .inputs = in,
                     .n_inputs = nin,
                     .attrs = at,
                     .n_attrs = nat};
  if (dec) {
    inst.has_decision = true;
    inst.decision = *dec;
  }
  int tmp[1];
  int n = 0;
  if (!sched_apply(s, &inst, out ? out : tmp, out ? max_out : 0, &n, st)) return -1;
  return n;
}

static int run1(sched *s, sched_inst_kind k, sched_val *in, int nin, sched_val *at, int nat,
                dg_status *st) {
  int o[1];
  int n = run(s, k, in, nin, at, nat, NULL, o, 1, st);
  return n == 1 ? o[0] : -1;
}

int sched_get_block(sched *s, const char *name, const char *func, dg_status *st) {
  sched_val at[2] = {vstr(name), vstr(func ? func : "main")};
  return run1(s, SCHED_INST_GET_BLOCK, NULL, 0, at, 2, st);
}

int sched_get_loops(sched *s, int block, int *out, int max, dg_status *st) {
  sched_val in[1] = {vrv(block)};
  return run(s, SCHED_INST_GET_LOOPS, in, 1, NULL, 0, NULL, out, max, st);
}

int sched_get_child_blocks(sched *s, int bl, int *out, int max, dg_status *st) {
  sched_val in[1] = {vrv(bl)};
  return run(s, SCHED_INST_GET_CHILD_BLOCKS, in, 1, NULL, 0, NULL, out, max, st);
}

int sched_get_producers(sched *s, int block, int *out, int max, dg_status *st) {
  sched_val in[1] = {vrv(block)};
  return run(s, SCHED_INST_GET_PRODUCERS, in, 1, NULL, 0, NULL, out, max, st);
}

int sched_get_consumers(sched *s, int block, int *out, int max, dg_status *st) {
  sched_val in[1] = {vrv(block)};
  return run(s, SCHED_INST_GET_CONSUMERS, in, 1, NULL, 0, NULL, out, max, st);
}

int sched_split(sched *s, int loop, const sched_val *factors, int n, bool preserve_unit_iters,
                bool disable_predication, int *out, dg_status *st) {
  sched_val *in = dg_malloc(sizeof(sched_val) * (size_t)(n + 1));
  in[0] = vrv(loop);
  for (int i = 0; i < n; i++) in[i + 1] = factors[i];
  sched_val at[2] = {vint(preserve_unit_iters), vint(disable_predication)};
  int r = run(s, SCHED_INST_SPLIT, in, n + 1, at, 2, NULL, out, n, st);
  free(in);
  return r;
}

int sched_fuse(sched *s, const int *loops, int n, bool preserve_unit_iters, dg_status *st) {
  sched_val *in = dg_malloc(sizeof(sched_val) * (size_t)(n ? n : 1));
  for (int i = 0; i < n; i++) in[i] = vrv(loops[i]);
  sched_val at[1] = {vint(preserve_unit_iters)};
  int r = run1(s, SCHED_INST_FUSE, in, n, at, 1, st);
  free(in);
  return r;
}

bool sched_reorder(sched *s, const int *loops, int n, dg_status *st) {
  sched_val *in = dg_malloc(sizeof(sched_val) * (size_t)(n ? n : 1));
  for (int i = 0; i < n; i++) in[i] = vrv(loops[i]);
  int r = run(s, SCHED_INST_REORDER, in, n, NULL, 0, NULL, NULL, 0, st);
  free(in);
  return r >= 0;
}

int sched_add_unit_loop(sched *s, int bl, dg_status *st) {
  sched_val in[1] = {vrv(bl)};
  return run1(s, SCHED_INST_ADD_UNIT_LOOP, in, 1, NULL, 0, st);
}

static bool loop_only(sched *s, sched_inst_kind k, int loop, dg_status *st) {
  sched_val in[1] = {vrv(loop)};
  return run(s, k, in, 1, NULL, 0, NULL, NULL, 0, st) >= 0;
}
bool sched_parallel(sched *s, int loop, dg_status *st) { return loop_only(s, SCHED_INST_PARALLEL, loop, st); }
bool sched_vectorize(sched *s, int loop, dg_status *st) { return loop_only(s, SCHED_INST_VECTORIZE, loop, st); }
bool sched_unroll(sched *s, int loop, dg_status *st) { return loop_only(s, SCHED_INST_UNROLL, loop, st); }

bool sched_bind(sched *s, int loop, dg_thread_tag tag, dg_status *st) {
  sched_val in[1] = {vrv(loop)};
  sched_val at[1] = {vstr(dg_thread_tag_name(tag))};
  return run(s, SCHED_INST_BIND, in, 1, at, 1, NULL, NULL, 0, st) >= 0;
}

static int cache(sched *s, sched_inst_kind k, int block, int index, dg_scope scope,
                 const int *consumers, int n, dg_status *st) {
  sched_val *items = dg_malloc(sizeof(sched_val) * (size_t)(n ? n : 1));
  for (int i = 0; i < n; i++) items[i] = vrv(consumers[i]);
  sched_val in[2] = {vrv(block), {.kind = SV_ARRAY, .items = items, .n = n}};
  sched_val at[2] = {vint(index), vstr(dg_scope_name(scope))};
  int r = run1(s, k, in, 2, at, 2, st);
  free(items);
  return r;
}

int sched_cache_read(sched *s, int block, int read_index, dg_scope scope, const int *consumers,
                     int n_consumers, dg_status *st) {
  return cache(s, SCHED_INST_CACHE_READ, block, read_index, scope, consumers, n_consumers, st);
}

int sched_cache_write(sched *s, int block, int write_index, dg_scope scope,
                      const int *consumers, int n_consumers, dg_status *st) {
  return cache(s, SCHED_INST_CACHE_WRITE, block, write_index, scope, consumers, n_consumers, st);
}

int sched_reindex(sched *s, int block, int buffer_index, bool is_write, dg_status *st) {
  sched_val in[1] = {vrv(block)};
  sched_val at[2] = {vint(buffer_index), vint(is_write ? 1 : 0)};
  return run1(s, SCHED_INST_REINDEX, in, 1, at, 2, st);
}

bool sched_set_scope(sched *s, int block, int buffer_index, dg_scope scope, dg_status *st) {
  sched_val in[1] = {vrv(block)};
  sched_val at[2] = {vint(buffer_index), vstr(dg_scope_name(scope))};
  return run(s, SCHED_INST_SET_SCOPE, in, 1, at, 2, NULL, NULL, 0, st) >= 0;
}

bool sched_storage_align(sched *s, int block, int buffer_index, int axis, int factor, int offset,
                         dg_status *st) {
  sched_val in[1] = {vrv(block)};
  sched_val at[4] = {vint(buffer_index), vint(axis), vint(factor), vint(offset)};
  return run(s, SCHED_INST_STORAGE_ALIGN, in, 1, at, 4, NULL, NULL, 0, st) >= 0;
}

static bool at_loop(sched *s, sched_inst_kind k, int block, int loop, bool preserve, int index,
                    dg_status *st) {
  sched_val in[2] = {vrv(block), vrv(loop)};
  sched_val at[2] = {vint(preserve), vint(index)};
  return run(s, k, in, 2, at, 2, NULL, NULL, 0, st) >= 0;
}
bool sched_compute_at(sched *s, int block, int loop, bool preserve_unit_loops, int index,
                      dg_status *st) {
  return at_loop(s, SCHED_INST_COMPUTE_AT, block, loop, preserve_unit_loops, index, st);
}
bool sched_reverse_compute_at(sched *s, int block, int loop, bool preserve_unit_loops, int index,
                              dg_status *st) {
  return at_loop(s, SCHED_INST_REVERSE_COMPUTE_AT, block, loop, preserve_unit_loops, index, st);
}

bool sched_compute_inline(sched *s, int block, dg_status *st) {
  sched_val in[1] = {vrv(block)};
  return run(s, SCHED_INST_COMPUTE_INLINE, in, 1, NULL, 0, NULL, NULL, 0, st) >= 0;
}
bool sched_reverse_compute_inline(sched *s, int block, dg_status *st) {
  sched_val in[1] = {vrv(block)};
  return run(s, SCHED_INST_REVERSE_COMPUTE_INLINE, in, 1, NULL, 0, NULL, NULL, 0, st) >= 0;
}

int sched_decompose_reduction(sched *s, int block, int loop, dg_status *st) {
  sched_val in[2] = {vrv(block), vrv(loop)};
  return run1(s, SCHED_INST_DECOMPOSE_REDUCTION, in, 2, NULL, 0, st);
}

int sched_rfactor(sched *s, int loop, int factor_axis, dg_status *st) {
  sched_val in[1] = {vrv(loop)};
  sched_val at[1] = {vint(factor_axis)};
  return run1(s, SCHED_INST_RFACTOR, in, 1, at, 1, st);
}

int sched_blockize(sched *s, int loop, bool preserve_unit_iters, dg_status *st) {
  sched_val in[1] = {vrv(loop)};
  sched_val at[1] = {vbool(preserve_unit_iters)};
  return run1(s, SCHED_INST_BLOCKIZE, in, 1, at, 1, st);
}

bool sched_tensorize(sched *s, int bl, const char *intrin, bool preserve_unit_iters,
                     dg_status *st) {
  sched_val in[1] = {vrv(bl)};
  sched_val at[2] = {vstr(intrin), vbool(preserve_unit_iters)};
  return run(s, SCHED_INST_TENSORIZE, in, 1, at, 2, NULL, NULL, 0, st) >= 0;
}

bool sched_annotate(sched *s, int bl, const char *key, const sched_val *value, dg_status *st) {
  sched_val in[2] = {vrv(bl), *value};
  sched_val at[1] = {vstr(key)};
  return run(s, SCHED_INST_ANNOTATE, in, 2, at, 1, NULL, NULL, 0, st) >= 0;
}

bool sched_unannotate(sched *s, int bl, const char *key, dg_status *st) {
  sched_val in[1] = {vrv(bl)};
  sched_val at[1] = {vstr(key)};
  return run(s, SCHED_INST_UNANNOTATE, in, 1, at, 1, NULL, NULL, 0, st) >= 0;
}

static sched_val int_array(const int64_t *v, int n, sched_val *items) {
  for (int i = 0; i < n; i++) items[i] = vint(v[i]);
  return (sched_val){.kind = SV_ARRAY, .items = items, .n = n};
}

int sched_sample_perfect_tile(sched *s, int loop, int n, int max_innermost,
                              const int64_t *decision, int *out, dg_status *st) {
  sched_val in[1] = {vrv(loop)};
  sched_val at[2] = {vint(n), vint(max_innermost)};
  sched_val *items = dg_malloc(sizeof(sched_val) * (size_t)(n > 0 ? n : 1));
  sched_val dec = decision ? int_array(decision, n, items) : (sched_val){0};
  int r = run(s, SCHED_INST_SAMPLE_PERFECT_TILE, in, 1, at, 2, decision ? &dec : NULL, out, n, st);
  free(items);
  return r;
}

int sched_sample_categorical(sched *s, const int64_t *candidates, const double *probs, int n,
                             const int64_t *decision, dg_status *st) {
  sched_val *c = dg_malloc(sizeof(sched_val) * (size_t)(n ? n : 1));
  sched_val *p = dg_malloc(sizeof(sched_val) * (size_t)(n ? n : 1));
  for (int i = 0; i < n; i++) {
    c[i] = vint(candidates[i]);
    p[i] = (sched_val){.kind = SV_FLOAT, .f = probs[i]};
  }
  sched_val at[2] = {{.kind = SV_ARRAY, .items = c, .n = n}, {.kind = SV_ARRAY, .items = p, .n = n}};
  sched_val dec = decision ? vint(*decision) : (sched_val){0};
  int o[1];
  int r = run(s, SCHED_INST_SAMPLE_CATEGORICAL, NULL, 0, at, 2, decision ? &dec : NULL, o, 1, st);
  free(c);
  free(p);
  return r == 1 ? o[0] : -1;
}

int sched_sample_compute_location(sched *s, int block, const int64_t *decision, dg_status *st) {
  sched_val in[1] = {vrv(block)};
  sched_val dec = decision ? vint(*decision) : (sched_val){0};
  int o[1];
  int r = run(s, SCHED_INST_SAMPLE_COMPUTE_LOCATION, in, 1, NULL, 0, decision ? &dec : NULL, o, 1, st);
  return r == 1 ? o[0] : -1;
}

bool sched_enter_postproc(sched *s, dg_status *st) {
  return run(s, SCHED_INST_ENTER_POSTPROC, NULL, 0, NULL, 0, NULL, NULL, 0, st) >= 0;
}
