/* evolve.c: MetaSchedule's EvolutionarySearch (GenerateMeasureCandidates).
 *
 * One round: PickBestFromDatabase (the best measured schedules, replayed
 * and postprocessed again), SampleInitPopulation (design spaces with every
 * decision re-drawn), EvolveWithCostModel (genetic_num_iters generations:
 * parents drawn in proportion to predicted score, mutated with
 * genetic_mutate_prob through the mutators' probabilities, each parent
 * copied unchanged at most once per generation; every new schedule scored
 * and kept in a best-first list of distinct kernels), then PickWithEpsGreedy
 * (floor(n * eps_greedy) random initial schedules, the rest best predicted).
 * Kernels are told apart by ir_func_hash of the postprocessed kernel
 * (structural: two traces giving one kernel are one candidate); a kernel
 * measured before, in this run or in the database, is never picked again.
 * An empty round counts toward the early stop.
 *
 * Pool entries keep a candidate's trace, hash, features and score; only the
 * picked candidates get their kernel rebuilt (replaying the full trace),
 * which bounds memory by the population, not by the kernels. Single
 * threaded: the machine's cores go to measurement and XGBoost.
 */
#include "dragon/search.h"

#include <math.h>
#include <string.h>

typedef struct {
  sched_trace *trace; /* full: design part + postprocessing */
  uint64_t hash;
  search_features feats;
  double score;
} ev_entry;

typedef struct {
  sched_trace *design; /* postprocessing removed */
  double secs;
} ev_measured;

/* An open-addressing set of kernel hashes (0 is mapped to 1). */
typedef struct {
  uint64_t *slots;
  size_t cap, n;
} hset;

static uint64_t hkey(uint64_t h) { return h ? h : 1; }

static bool hset_has(const hset *s, uint64_t h) {
  if (!s->cap) return false;
  h = hkey(h);
  for (size_t i = (h * 0x9E3779B97F4A7C15ull) & (s->cap - 1);; i = (i + 1) & (s->cap - 1)) {
    if (s->slots[i] == h) return true;
    if (!s->slots[i]) return false;
  }
}

static void hset_add(hset *s, uint64_t h);
static void hset_grow(hset *s) {
  hset n = {dg_calloc(s->cap ? 2 * s->cap : 256, 8), s->cap ? 2 * s->cap : 256, 0};
  for (size_t i = 0; i < s->cap; i++)
    if (s->slots[i]) hset_add(&n, s->slots[i]);
  free(s->slots);
  *s = n;
}

static void hset_add(hset *s, uint64_t h) {
  if (2 * (s->n + 1) > s->cap) hset_grow(s);
  h = hkey(h);
  size_t i = (h * 0x9E3779B97F4A7C15ull) & (s->cap - 1);
  while (s->slots[i] && s->slots[i] != h) i = (i + 1) & (s->cap - 1);
  if (!s->slots[i]) {
    s->slots[i] = h;
    s->n++;
  }
}

static void hset_free(hset *s) {
  free(s->slots);
  memset(s, 0, sizeof *s);
}

struct search_evolve {
  search_task t;
  search_evolve_opts o;
  dg_rng rng;
  sched_trace **spaces;
  int n_spaces;
  double mut_cum[SEARCH_MUT_COUNT]; /* cumulative, over the mutation branch */
  hset measured;
  DG_VEC(ev_measured) pool;
  search_evolve_stats stats;
};

void search_evolve_opts_default(search_evolve_opts *o) {
  o->population_size = 512;
  o->init_measured_ratio = 0.2;
  o->init_min_unmeasured = 50;
  o->max_fail_count = 5;
  o->genetic_num_iters = 4;
  o->genetic_mutate_prob = 0.85;
  o->genetic_max_fail_count = 10;
  o->eps_greedy = 0.05;
  o->num_trials_per_iter = 64;
  o->num_empty_iters_before_early_stop = 5;
}

search_evolve *search_evolve_new(const search_task *task, const search_evolve_opts *o) {
  search_evolve *ev = dg_calloc(1, sizeof *ev);
  ev->t = *task;
  if (o) ev->o = *o;
  else search_evolve_opts_default(&ev->o);
  dg_rng_seed(&ev->rng, task->seed);
  ev->n_spaces = task->n_spaces;
  ev->spaces = dg_calloc((size_t)(task->n_spaces ? task->n_spaces : 1), sizeof(sched_trace *));
  for (int i = 0; i < task->n_spaces; i++)
    ev->spaces[i] = sched_trace_simplified(task->spaces[i], true);
  double sum = 0;
  for (int m = 0; m < SEARCH_MUT_COUNT; m++) sum += task->mutator_probs[m];
  double acc = 0;
  for (int m = 0; m < SEARCH_MUT_COUNT; m++) {
    double p = sum > 0 ? task->mutator_probs[m] : search_mutator_cuda_prob((search_mutator)m);
    acc += p;
    ev->mut_cum[m] = acc;
  }
  for (int m = 0; m < SEARCH_MUT_COUNT; m++) ev->mut_cum[m] /= acc > 0 ? acc : 1;
  return ev;
}

void search_evolve_free(search_evolve *ev) {
  if (!ev) return;
  for (int i = 0; i < ev->n_spaces; i++) sched_trace_free(ev->spaces[i]);
  free(ev->spaces);
  for (size_t i = 0; i < ev->pool.len; i++) sched_trace_free(ev->pool.data[i].design);
  DG_VEC_FREE(&ev->pool);
  hset_free(&ev->measured);
  free(ev);
}

const search_evolve_stats *search_evolve_get_stats(const search_evolve *ev) { return &ev->stats; }

bool search_evolve_stopped(const search_evolve *ev) {
  return ev->stats.empty_rounds >= ev->o.num_empty_iters_before_early_stop;
}

void search_cands_free(search_cand *c, int n) {
  if (!c) return;
  for (int i = 0; i < n; i++) {
    sched_trace_free(c[i].trace);
    ir_func_free(c[i].func);
  }
  free(c);
}

/* ---- building schedules --------------------------------------------------- */

/* Replays the design part of t (decisions kept unless resample), then the
 * postprocessors. On success fills e (trace, hash) and, if func, the kernel. */
static bool build(search_evolve *ev, const sched_trace *t, bool resample, ev_entry *e,
                  dg_func **func) {
  sched *s = sched_new(ev->t.f, dg_rng_next(&ev->rng));
  dg_status st;
  bool ok = sched_replay(s, t, resample, true, &st);
  if (ok) ok = ev->t.postproc ? ev->t.postproc(s, ev->t.postproc_ctx, &st)
                              : sched_enter_postproc(s, &st);
  ev->stats.n_replayed++;
  if (!ok) {
    ev->stats.n_rejected++;
    sched_free(s);
    return false;
  }
  memset(e, 0, sizeof *e);
  e->trace = sched_trace_clone(sched_get_trace(s));
  e->hash = ir_func_hash(sched_func(s));
  if (func) *func = ir_func_clone(sched_func(s));
  if (ev->t.model) {
    double t0 = dg_now();
    dg_status fst;
    if (!search_features_extract(sched_func(s), ev->t.is_gpu, &e->feats, &fst)) e->feats.n = 0;
    ev->stats.t_model += dg_now() - t0;
  }
  sched_free(s);
  return true;
}

static void entry_free(ev_entry *e) {
  sched_trace_free(e->trace);
  search_features_free(&e->feats);
  e->trace = NULL;
}

typedef DG_VEC(ev_entry) ev_entries;

static bool score_all(search_evolve *ev, ev_entries *v, size_t from, dg_status *st) {
  size_t n = v->len - from;
  if (!n) return true;
  double t0 = dg_now();
  bool ok = true;
  if (!ev->t.model) {
    for (size_t i = from; i < v->len; i++) v->data[i].score = dg_rng_uniform(&ev->rng);
  } else {
    search_features *f = dg_malloc(sizeof *f * n);
    double *sc = dg_malloc(sizeof(double) * n);
    for (size_t i = 0; i < n; i++) f[i] = v->data[from + i].feats;
    ok = search_cost_model_predict(ev->t.model, f, (int)n, sc, st);
    for (size_t i = 0; ok && i < n; i++) v->data[from + i].score = sc[i] > 0 ? sc[i] : 0;
    free(f);
    free(sc);
  }
  ev->stats.t_model += dg_now() - t0;
  return ok;
}

/* ---- the measured pool ------------------------------------------------------ */

bool search_evolve_add_measured(search_evolve *ev, const sched_trace *trace, double secs,
                                uint64_t kernel_hash, dg_status *st) {
  dg_status_ok(st);
  if (kernel_hash) hset_add(&ev->measured, kernel_hash);
  if (!(secs < SEARCH_FAILED_SECS)) return true;
  ev_measured m = {sched_trace_simplified(trace, true), secs};
  DG_VEC_PUSH(&ev->pool, m);
  return true;
}

static int cmp_measured(const void *a, const void *b) {
  double x = ((const ev_measured *)a)->secs, y = ((const ev_measured *)b)->secs;
  return x < y ? -1 : x > y;
}

/* ---- one round ---------------------------------------------------------------- */

static int cmp_score(const void *a, const void *b) {
  double x = ((const ev_entry *)a)->score, y = ((const ev_entry *)b)->score;
  return x > y ? -1 : x < y;
}

static size_t pick_parent(search_evolve *ev, const ev_entries *pop) {
  double *w = dg_malloc(sizeof(double) * pop->len);
  double sum = 0;
  for (size_t i = 0; i < pop->len; i++) sum += w[i] = pop->data[i].score;
  size_t k;
  if (sum > 0) k = dg_rng_weighted(&ev->rng, w, pop->len);
  else k = (size_t)dg_rng_below(&ev->rng, pop->len);
  free(w);
  return k;
}

static search_mutator pick_mutator(search_evolve *ev) {
  double u = dg_rng_uniform(&ev->rng);
  for (int m = 0; m < SEARCH_MUT_COUNT; m++)
    if (u < ev->mut_cum[m]) return (search_mutator)m;
  return (search_mutator)(SEARCH_MUT_COUNT - 1);
}

static ev_entry entry_copy(const ev_entry *e) {
  ev_entry c = *e;
  c.trace = sched_trace_clone(e->trace);
  c.feats.rows = NULL;
  c.feats.n = 0;
  if (e->feats.n) {
    size_t n = (size_t)e->feats.n * SEARCH_FEATURE_LEN;
    c.feats.rows = dg_malloc(n * sizeof(double));
    memcpy(c.feats.rows, e->feats.rows, n * sizeof(double));
    c.feats.n = e->feats.n;
  }
  return c;
}

static void entries_free(ev_entries *v) {
  for (size_t i = 0; i < v->len; i++) entry_free(&v->data[i]);
  DG_VEC_FREE(v);
}

int search_evolve_generate(search_evolve *ev, int max, search_cand **out, dg_status *st) {
  dg_status_ok(st);
  *out = NULL;
  const search_evolve_opts *o = &ev->o;
  int sample_num = max < o->num_trials_per_iter ? max : o->num_trials_per_iter;
  if (sample_num <= 0) return 0;
  int pop_size = o->population_size;
  ev_entries pop = {0}, inits = {0}, best = {0};
  hset seen = {0};

  /* PickBestFromDatabase */
  double t0 = dg_now();
  int n_best_db = (int)floor(pop_size * o->init_measured_ratio);
  if (ev->pool.len > 1) qsort(ev->pool.data, ev->pool.len, sizeof *ev->pool.data, cmp_measured);
  for (size_t i = 0; i < ev->pool.len && (int)pop.len < n_best_db; i++) {
    ev_entry e;
    if (build(ev, ev->pool.data[i].design, false, &e, NULL)) DG_VEC_PUSH(&pop, e);
  }
  /* SampleInitPopulation */
  int need = pop_size - (int)pop.len, fails = 0;
  while ((int)inits.len < o->init_min_unmeasured && fails < o->max_fail_count) {
    size_t before = inits.len;
    for (int i = 0; i < need; i++) {
      ev_entry e;
      int sp = (int)dg_rng_below(&ev->rng, (uint64_t)(ev->n_spaces ? ev->n_spaces : 1));
      if (ev->n_spaces && build(ev, ev->spaces[sp], true, &e, NULL)) DG_VEC_PUSH(&inits, e);
    }
    if (inits.len == before) fails++;
  }
  ev->stats.t_sample += dg_now() - t0;
  if (inits.len == 0) {
    entries_free(&pop);
    dg_fail(st, DG_ERR_INVALID,
            "evolutionary search: no design space yields a valid schedule (%lld of %lld rejected)",
            (long long)ev->stats.n_rejected, (long long)ev->stats.n_replayed);
    return -1;
  }
  for (size_t i = 0; i < inits.len; i++) DG_VEC_PUSH(&pop, entry_copy(&inits.data[i]));

  /* EvolveWithCostModel */
  bool ok = score_all(ev, &pop, 0, st);
  for (int iter = 0; ok; iter++) {
    for (size_t i = 0; i < pop.len; i++) {
      ev_entry *e = &pop.data[i];
      if (hset_has(&seen, e->hash) || hset_has(&ev->measured, e->hash)) continue;
      hset_add(&seen, e->hash);
      DG_VEC_PUSH(&best, entry_copy(e));
    }
    if (iter == o->genetic_num_iters) break;
    double t1 = dg_now();
    ev_entries next = {0};
    bool *copied = dg_calloc(pop.len ? pop.len : 1, 1);
    for (int slot = 0; slot < pop_size && pop.len; slot++) {
      size_t parent = 0;
      bool done = false;
      for (int tries = 0; tries <= o->genetic_max_fail_count && !done; tries++) {
        parent = pick_parent(ev, &pop);
        if (dg_rng_uniform(&ev->rng) >= o->genetic_mutate_prob) {
          if (!copied[parent]) {
            copied[parent] = true;
            DG_VEC_PUSH(&next, entry_copy(&pop.data[parent]));
            done = true;
          }
          continue;
        }
        sched_trace *m = search_mutate(pick_mutator(ev), pop.data[parent].trace, &ev->rng);
        if (!m) continue;
        ev_entry e;
        if (build(ev, m, false, &e, NULL)) {
          DG_VEC_PUSH(&next, e);
          done = true;
        }
        sched_trace_free(m);
      }
      if (!done) DG_VEC_PUSH(&next, entry_copy(&pop.data[parent]));
    }
    free(copied);
    ev->stats.t_evolve += dg_now() - t1;
    entries_free(&pop);
    pop = next;
    ok = score_all(ev, &pop, 0, st);
  }
  entries_free(&pop);
  hset_free(&seen);
  if (!ok) {
    entries_free(&inits);
    entries_free(&best);
    return -1;
  }
  if (best.len > 1) qsort(best.data, best.len, sizeof *best.data, cmp_score);
  if ((int)best.len > sample_num) {
    for (size_t i = (size_t)sample_num; i < best.len; i++) entry_free(&best.data[i]);
    best.len = (size_t)sample_num;
  }

  /* PickWithEpsGreedy */
  int num_rands = (int)floor(sample_num * o->eps_greedy);
  int num_bests = sample_num - num_rands;
  for (size_t i = inits.len; i > 1; i--) { /* shuffle the random initial population */
    size_t j = (size_t)dg_rng_below(&ev->rng, i);
    ev_entry tmp = inits.data[i - 1];
    inits.data[i - 1] = inits.data[j];
    inits.data[j] = tmp;
  }
  search_cand *picks = dg_calloc((size_t)sample_num, sizeof *picks);
  int n = 0;
  size_t ib = 0, ir = 0;
  for (int i = 0; i < sample_num; i++) {
    const ev_entry *e = NULL;
    bool random = false;
    if (i < num_bests) {
      while (ib < best.len && hset_has(&ev->measured, best.data[ib].hash)) {
        ib++;
        ev->stats.n_dup_skipped++;
      }
      if (ib < best.len) e = &best.data[ib++];
    }
    if (!e) {
      while (ir < inits.len && hset_has(&ev->measured, inits.data[ir].hash)) {
        ir++;
        ev->stats.n_dup_skipped++;
      }
      if (ir < inits.len) {
        e = &inits.data[ir++];
        random = true;
      }
    }
    if (!e) {
      while (ib < best.len && hset_has(&ev->measured, best.data[ib].hash)) ib++;
      if (ib < best.len) e = &best.data[ib++];
    }
    if (!e) break;
    /* the kernel, rebuilt from the full trace (postprocessing included) */
    sched *s = sched_new(ev->t.f, 0);
    dg_status rst;
    if (!sched_replay(s, e->trace, false, false, &rst)) {
      sched_free(s);
      ev->stats.n_rejected++;
      continue;
    }
    hset_add(&ev->measured, e->hash);
    picks[n].trace = sched_trace_clone(e->trace);
    picks[n].func = ir_func_clone(sched_func(s));
    picks[n].hash = e->hash;
    picks[n].score = e->score;
    picks[n].random = random;
    if (random) ev->stats.n_picked_random++;
    else ev->stats.n_picked_best++;
    n++;
    sched_free(s);
  }
  entries_free(&inits);
  entries_free(&best);
  if (n == 0) {
    ev->stats.empty_rounds++;
    free(picks);
    return 0;
  }
  *out = picks;
  return n;
}

bool search_evolve_notify(search_evolve *ev, const search_cand *c, const double *secs, int n,
                          dg_status *st) {
  dg_status_ok(st);
  for (int i = 0; i < n; i++) search_evolve_add_measured(ev, c[i].trace, secs[i], c[i].hash, st);
  if (!ev->t.model || n == 0) return true;
  double t0 = dg_now();
  search_features *f = dg_calloc((size_t)n, sizeof *f);
  bool ok = true;
  for (int i = 0; i < n; i++) {
    dg_status fst;
    if (!search_features_extract(c[i].func, ev->t.is_gpu, &f[i], &fst)) f[i].n = 0;
  }
  ok = search_cost_model_update(ev->t.model, ev->t.group ? ev->t.group : "default", f, secs, n,
                                st);
  for (int i = 0; i < n; i++) search_features_free(&f[i]);
  free(f);
  ev->stats.t_model += dg_now() - t0;
  return ok;
}
