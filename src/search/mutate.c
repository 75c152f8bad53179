/* mutate.c: MetaSchedule's mutators for CUDA, on traces alone.
 *
 * Each finds the sampling instructions it may change, picks one uniformly,
 * draws a new decision and returns sched_trace_with_decision(...,
 * remove_postproc = true), or NULL when there is nothing to change:
 *   MutateTileSize       a SamplePerfectTile decision: a divisor d > 1 of
 *                        one factor moves to another slot (the innermost
 *                        slot stays <= max_innermost_factor); or the
 *                        SampleCategorical of a cooperative-fetch Annotate
 *                        (vector lanes): another index, probabilities
 *                        renormalised without the current one
 *   MutateUnroll         the SampleCategorical feeding an Annotate of
 *                        meta_schedule.unroll_explicit / unroll_implicit
 *   MutateThreadBinding  v = SampleCategorical, Split(l, [None, v]),
 *                        Bind(inner, "threadIdx.x"): another index for v
 * The new decisions are valid where they stand (a tile keeps its product
 * and its innermost limit, an index stays among the candidates); the search
 * replays mutants with SCHED_REPLAY_REPAIR (sched.h) only for decisions
 * further down that a change upstream may have made stale. A mutated trace
 * that the postprocessors reject is the caller's business.
 * MutateComputeLocation and MutateParallel (CPU only in MetaSchedule) are
 * not implemented.
 */
#include "dragon/search.h"

#include <string.h>

static const struct {
  const char *name;
  double cuda_prob;
} mut_tab[] = {
#define X(e, name, p) {name, p},
    SEARCH_MUTATOR_LIST(X)
#undef X
};
_Static_assert(DG_ARRAY_LEN(mut_tab) == SEARCH_MUT_COUNT, "mutator table");

const char *search_mutator_name(search_mutator m) { return mut_tab[m].name; }
double search_mutator_cuda_prob(search_mutator m) { return mut_tab[m].cuda_prob; }

/* producer[rv] = index of the instruction that defines handle rv. */
static int *producers(const sched_trace *t) {
  int *p = dg_malloc(sizeof(int) * (size_t)(t->n_rvs + 1));
  for (int i = 0; i <= t->n_rvs; i++) p[i] = -1;
  for (int i = 0; i < t->n; i++)
    for (int k = 0; k < t->insts[i].n_outputs; k++) {
      int o = t->insts[i].outputs[k];
      if (o >= 0 && o <= t->n_rvs) p[o] = i;
    }
  return p;
}

/* The postprocessing part is never mutated. */
static int design_len(const sched_trace *t) {
  for (int i = 0; i < t->n; i++)
    if (t->insts[i].kind == SCHED_INST_ENTER_POSTPROC) return i;
  return t->n;
}

static bool is_categorical(const sched_inst *in) {
  return in->kind == SCHED_INST_SAMPLE_CATEGORICAL && in->has_decision &&
         in->decision.kind == SV_INT && in->n_attrs == 2 && in->attrs[0].kind == SV_ARRAY &&
         in->attrs[1].kind == SV_ARRAY && in->attrs[0].n == in->attrs[1].n;
}

/* The categorical producing an Annotate's value (input 1), or -1. */
static int annotate_source(const sched_inst *in, const int *prod, int n_rvs) {
  if (in->n_inputs < 2 || in->inputs[1].kind != SV_RV) return -1;
  int64_t rv = in->inputs[1].i;
  return rv >= 0 && rv <= n_rvs ? prod[rv] : -1;
}

static bool annotate_key_is(const sched_inst *in, const char *key) {
  return in->kind == SCHED_INST_ANNOTATE && in->n_attrs >= 1 && in->attrs[0].kind == SV_STR &&
         strcmp(in->attrs[0].s, key) == 0;
}

/* A new index for a categorical, drawn by the other candidates' probs. */
static sched_trace *mutate_categorical(const sched_trace *t, int idx, dg_rng *r) {
  const sched_inst *in = &t->insts[idx];
  int n = in->attrs[1].n;
  int64_t cur = in->decision.i;
  if (n < 2) return NULL;
  double *w = dg_calloc((size_t)n, sizeof(double));
  double sum = 0;
  for (int i = 0; i < n; i++) {
    const sched_val *p = &in->attrs[1].items[i];
    double v = p->kind == SV_FLOAT ? p->f : p->kind == SV_INT ? (double)p->i : 0;
    w[i] = i == cur || v < 0 ? 0 : v;
    sum += w[i];
  }
  if (sum <= 0) {
    /* all other candidates had probability 0: uniform over them */
    for (int i = 0; i < n; i++) w[i] = i == cur ? 0 : 1;
  }
  int64_t next = (int64_t)dg_rng_weighted(r, w, (size_t)n);
  free(w);
  sched_val d = {.kind = SV_INT, .i = next};
  return sched_trace_with_decision(t, idx, &d, true);
}

static int64_t product(const sched_val *dec) {
  int64_t p = 1;
  for (int i = 0; i < dec->n; i++) p *= dec->items[i].i;
  return p;
}

static bool tile_mutable(const sched_inst *in) {
  if (in->kind != SCHED_INST_SAMPLE_PERFECT_TILE || !in->has_decision ||
      in->decision.kind != SV_ARRAY || in->decision.n < 2)
    return false;
  for (int i = 0; i < in->decision.n; i++)
    if (in->decision.items[i].kind != SV_INT || in->decision.items[i].i < 1) return false;
  return product(&in->decision) >= 2;
}

static sched_trace *mutate_tile(const sched_trace *t, int idx, dg_rng *r) {
  const sched_inst *in = &t->insts[idx];
  int n = in->decision.n;
  int64_t max_inner = in->n_attrs >= 2 && in->attrs[1].kind == SV_INT ? in->attrs[1].i : -1;
  int64_t tiles[64];
  if (n > 64) return NULL;
  for (int i = 0; i < n; i++) tiles[i] = in->decision.items[i].i;
  for (int attempt = 0; attempt < 64; attempt++) {
    int src[64], ns = 0;
    for (int i = 0; i < n; i++)
      if (tiles[i] > 1) src[ns++] = i;
    if (!ns) return NULL;
    int x = src[dg_rng_below(r, (uint64_t)ns)];
    int y = (int)dg_rng_below(r, (uint64_t)(n - 1));
    if (y >= x) y++;
    int64_t divs[64];
    int nd = 0;
    for (int64_t d = 2; d <= tiles[x] && nd < 64; d++)
      if (tiles[x] % d == 0 && (y != n - 1 || max_inner <= 0 || tiles[y] * d <= max_inner))
        divs[nd++] = d;
    if (!nd) {
      if (n <= 2) return NULL;
      continue;
    }
    int64_t d = divs[dg_rng_below(r, (uint64_t)nd)];
    tiles[x] /= d;
    tiles[y] *= d;
    sched_val items[64];
    for (int i = 0; i < n; i++) items[i] = (sched_val){.kind = SV_INT, .i = tiles[i]};
    sched_val dec = {.kind = SV_ARRAY, .items = items, .n = n};
    return sched_trace_with_decision(t, idx, &dec, true);
  }
  return NULL;
}

static sched_trace *mutate_tile_size(const sched_trace *t, dg_rng *r) {
  int n = design_len(t);
  int *prod = producers(t);
  DG_VEC(int) cand = {0};
  bool *is_cat = dg_calloc((size_t)(t->n ? t->n : 1), 1);
  for (int i = 0; i < n; i++) {
    const sched_inst *in = &t->insts[i];
    if (tile_mutable(in)) DG_VEC_PUSH(&cand, i);
    if (annotate_key_is(in, "meta_schedule.cooperative_fetch")) {
      int src = annotate_source(in, prod, t->n_rvs);
      if (src >= 0 && !is_cat[src] && is_categorical(&t->insts[src]) &&
          t->insts[src].attrs[0].n > 1) {
        is_cat[src] = true;
        DG_VEC_PUSH(&cand, src);
      }
    }
  }
  sched_trace *out = NULL;
  if (cand.len) {
    int pick = cand.data[dg_rng_below(r, cand.len)];
    out = is_cat[pick] ? mutate_categorical(t, pick, r) : mutate_tile(t, pick, r);
  }
  DG_VEC_FREE(&cand);
  free(is_cat);
  free(prod);
  return out;
}

static sched_trace *mutate_unroll(const sched_trace *t, dg_rng *r) {
  int n = design_len(t);
  int *prod = producers(t);
  DG_VEC(int) cand = {0};
  for (int i = 0; i < n; i++) {
    const sched_inst *in = &t->insts[i];
    if (annotate_key_is(in, "meta_schedule.unroll_explicit") ||
        annotate_key_is(in, "meta_schedule.unroll_implicit")) {
      int src = annotate_source(in, prod, t->n_rvs);
      if (src >= 0 && is_categorical(&t->insts[src]) && t->insts[src].attrs[0].n > 1)
        DG_VEC_PUSH(&cand, src);
    }
  }
  sched_trace *out = cand.len ? mutate_categorical(t, cand.data[dg_rng_below(r, cand.len)], r)
                              : NULL;
  DG_VEC_FREE(&cand);
  free(prod);
  return out;
}

static sched_trace *mutate_thread_binding(const sched_trace *t, dg_rng *r) {
  int n = design_len(t);
  int *prod = producers(t);
  /* loops bound to threadIdx.x */
  bool *bound_tx = dg_calloc((size_t)(t->n_rvs + 1), 1);
  for (int i = 0; i < n; i++) {
    const sched_inst *in = &t->insts[i];
    if (in->kind == SCHED_INST_BIND && in->n_inputs == 1 && in->inputs[0].kind == SV_RV &&
        in->n_attrs == 1 && in->attrs[0].kind == SV_STR &&
        strcmp(in->attrs[0].s, "threadIdx.x") == 0 && in->inputs[0].i >= 0 &&
        in->inputs[0].i <= t->n_rvs)
      bound_tx[in->inputs[0].i] = true;
  }
  DG_VEC(int) cand = {0};
  for (int i = 0; i < n; i++) {
    const sched_inst *in = &t->insts[i];
    /* Split(l, [None, v]) whose inner loop is bound to threadIdx.x */
    if (in->kind != SCHED_INST_SPLIT || in->n_inputs != 3 || in->n_outputs != 2) continue;
    if (in->inputs[1].kind != SV_NONE || in->inputs[2].kind != SV_RV) continue;
    int inner = in->outputs[1];
    if (inner < 0 || inner > t->n_rvs || !bound_tx[inner]) continue;
    int64_t v = in->inputs[2].i;
    int src = v >= 0 && v <= t->n_rvs ? prod[v] : -1;
    if (src >= 0 && is_categorical(&t->insts[src]) && t->insts[src].attrs[0].n > 1)
      DG_VEC_PUSH(&cand, src);
  }
  sched_trace *out = cand.len ? mutate_categorical(t, cand.data[dg_rng_below(r, cand.len)], r)
                              : NULL;
  DG_VEC_FREE(&cand);
  free(bound_tx);
  free(prod);
  return out;
}

sched_trace *search_mutate(search_mutator m, const sched_trace *t, dg_rng *r) {
  switch (m) {
    case SEARCH_MUT_TILE_SIZE: return mutate_tile_size(t, r);
    case SEARCH_MUT_UNROLL: return mutate_unroll(t, r);
    case SEARCH_MUT_THREAD_BINDING: return mutate_thread_binding(t, r);
    case SEARCH_MUT_COUNT: break;
  }
  DG_UNREACHABLE();
}
