/* evolve.c: MetaSchedule's EvolutionarySearch (GenerateMeasureCandidates).
 *
 * One round: PickBestFromDatabase (the best measured schedules, replayed
 * exactly and postprocessed again), SampleInitPopulation (design spaces
 * with every decision re-drawn), EvolveWithCostModel (genetic_num_iters
 * generations: parents drawn in proportion to predicted score, mutated with
 * genetic_mutate_prob through the mutators' probabilities, each parent
 * copied unchanged at most once per generation; every new schedule scored
 * and kept in a best-first list of distinct kernels), then PickWithEpsGreedy
 * (floor(n * eps_greedy) random initial schedules, the rest best predicted).
 * Mutants are the one place decisions may be repaired (SCHED_REPLAY_REPAIR,
 * as TVM's replay of a mutated trace); the trace a candidate carries holds
 * the decisions taken, so it replays exactly everywhere else.
 * Kernels are told apart by ir_func_hash of the postprocessed kernel
 * (structural: two traces giving one kernel are one candidate); a kernel
 * measured before, in this run or in the database, is never picked again.
 * An empty round counts toward the early stop.
 *
 * Pool entries keep a candidate's trace, hash, features and score; only the
 * picked candidates get their kernel rebuilt (replaying the full trace),
 * which bounds memory by the population, not by the kernels.
 *
 * Building a schedule (replay, postprocessors, hash, features) is the
 * costly part; it runs on opts.threads threads, and a seed gives the same
 * candidates whatever their number. Every random draw comes from ev->rng
 * in a fixed serial order, or from a per-item generator seeded that way;
 * items are built in any order on any thread and merged in index order.
 * A genetic slot runs its tries with its own generator until a mutant
 * builds or it draws an unchanged copy; copies are then granted serially
 * in slot order (a parent at most once per generation), and the slots
 * refused one continue with their next try, until every slot is filled.
 * Statistics are per item and added up after each parallel part. The cost
 * model is queried on the calling thread only.
 */
#include "dragon/search.h"

#include <math.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <string.h>
#include <unistd.h>

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
  int threads; /* o.threads resolved: >= 1 */
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
  o->threads = 0;
}

/* The CPUs this process may run on. */
static int cpu_count(void) {
  cpu_set_t set;
  if (sched_getaffinity(0, sizeof set, &set) == 0 && CPU_COUNT(&set) > 0) return CPU_COUNT(&set);
  long n = sysconf(_SC_NPROCESSORS_ONLN);
  return n > 0 ? (int)n : 1;
}

search_evolve *search_evolve_new(const search_task *task, const search_evolve_opts *o) {
  search_evolve *ev = dg_calloc(1, sizeof *ev);
  ev->t = *task;
  if (o) ev->o = *o;
  else search_evolve_opts_default(&ev->o);
  ev->threads = ev->o.threads > 0 ? ev->o.threads : cpu_count();
  if (ev->threads > 1024) ev->threads = 1024;
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

/* ---- running items on several threads ---------------------------------------- */

typedef void (*par_fn)(void *ctx, size_t i);

typedef struct {
  par_fn fn;
  void *ctx;
  size_t n;
  atomic_size_t next; /* the next item to take */
} par_job;

static void *par_run(void *arg) {
  par_job *j = arg;
  for (size_t i; (i = atomic_fetch_add_explicit(&j->next, 1, memory_order_relaxed)) < j->n;)
    j->fn(j->ctx, i);
  return NULL;
}

/* fn(ctx, i) for every i in [0, n) on up to `threads` threads, the caller
 * being one; items are taken one at a time, so which thread runs which is
 * left to chance, and fn must not care. If a thread cannot be started the
 * others do its share. */
static void par_for(int threads, size_t n, par_fn fn, void *ctx) {
  par_job j = {fn, ctx, n};
  atomic_init(&j.next, 0);
  size_t k = threads > 1 ? (size_t)threads : 1;
  if (k > n) k = n;
  pthread_t *tid = k > 1 ? dg_malloc(sizeof *tid * (k - 1)) : NULL;
  size_t started = 0;
  while (started + 1 < k && pthread_create(&tid[started], NULL, par_run, &j) == 0) started++;
  par_run(&j);
  for (size_t w = 0; w < started; w++) pthread_join(tid[w], NULL);
  free(tid);
}

/* ---- building schedules --------------------------------------------------- */

/* What building costs, per item; added to ev->stats after a parallel part. */
typedef struct {
  int64_t n_replayed, n_rejected;
  double t_feat, t_all; /* seconds of feature extraction, of building */
} ev_acct;

static void acct_add(ev_acct *a, const ev_acct *b) {
  a->n_replayed += b->n_replayed;
  a->n_rejected += b->n_rejected;
  a->t_feat += b->t_feat;
  a->t_all += b->t_all;
}

/* Adds a parallel part's counts to the statistics; its wall time `wall` is
 * shared out between the cost model (feature extraction) and the rest in
 * proportion to the time the items spent in each. */
static void acct_commit(search_evolve *ev, const ev_acct *a, double wall) {
  ev->stats.n_replayed += a->n_replayed;
  ev->stats.n_rejected += a->n_rejected;
  if (a->t_all > 0) ev->stats.t_model += wall * (a->t_feat / a->t_all);
}

/* Replays the design part of t (decisions as `mode` says) on a schedule
 * seeded with seed, then the postprocessors. On success fills e (trace,
 * hash, features). Reads ev, never writes it: runs on any thread. */
static bool build(const search_evolve *ev, const sched_trace *t, sched_replay_mode mode,
                  uint64_t seed, ev_entry *e, ev_acct *acct) {
  double t0 = dg_now();
  sched *s = sched_new(ev->t.f, seed);
  dg_status st;
  bool ok = sched_replay_with(s, t, mode, true, &st);
  if (ok) ok = ev->t.postproc ? ev->t.postproc(s, ev->t.postproc_ctx, &st)
                              : sched_enter_postproc(s, &st);
  acct->n_replayed++;
  if (!ok) {
    acct->n_rejected++;
    sched_free(s);
    acct->t_all += dg_now() - t0;
    return false;
  }
  memset(e, 0, sizeof *e);
  e->trace = sched_trace_clone(sched_get_trace(s));
  e->hash = ir_func_hash(sched_func(s));
  if (ev->t.model) {
    double t1 = dg_now();
    dg_status fst;
    if (!search_features_extract(sched_func(s), ev->t.is_gpu, &e->feats, &fst)) e->feats.n = 0;
    acct->t_feat += dg_now() - t1;
  }
  sched_free(s);
  acct->t_all += dg_now() - t0;
  return true;
}

/* One schedule to build: the inputs are drawn serially, a worker fills the
 * rest. */
typedef struct {
  const sched_trace *trace; /* NULL: nothing to build */
  sched_replay_mode mode;
  uint64_t seed;
  bool ok;
  ev_entry e; /* when ok */
  ev_acct acct;
} ev_job;

typedef struct {
  const search_evolve *ev;
  ev_job *jobs;
} jobs_ctx;

static void job_run(void *ctx, size_t i) {
  jobs_ctx *c = ctx;
  ev_job *j = &c->jobs[i];
  j->ok = j->trace && build(c->ev, j->trace, j->mode, j->seed, &j->e, &j->acct);
}

static void build_all(search_evolve *ev, ev_job *jobs, size_t n) {
  double t0 = dg_now();
  jobs_ctx c = {ev, jobs};
  par_for(ev->threads, n, job_run, &c);
  ev_acct sum = {0};
  for (size_t i = 0; i < n; i++) acct_add(&sum, &jobs[i].acct);
  acct_commit(ev, &sum, dg_now() - t0);
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

bool search_evolve_measured(const search_evolve *ev, uint64_t kernel_hash) {
  return hset_has(&ev->measured, kernel_hash);
}

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

static search_mutator pick_mutator(const double *mut_cum, dg_rng *r) {
  double u = dg_rng_uniform(r);
  for (int m = 0; m < SEARCH_MUT_COUNT; m++)
    if (u < mut_cum[m]) return (search_mutator)m;
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

/* PickBestFromDatabase: the best measured schedules, rebuilt, until pop
 * holds want of them or the pool is used up. Built in batches of what is
 * still missing, so no schedule past the last one kept is built. */
static void pick_best_from_db(search_evolve *ev, int want, ev_entries *pop) {
  if (ev->pool.len > 1) qsort(ev->pool.data, ev->pool.len, sizeof *ev->pool.data, cmp_measured);
  size_t next = 0;
  while ((int)pop->len < want && next < ev->pool.len) {
    size_t k = (size_t)want - pop->len;
    if (k > ev->pool.len - next) k = ev->pool.len - next;
    ev_job *jobs = dg_calloc(k, sizeof *jobs);
    for (size_t i = 0; i < k; i++) {
      jobs[i].trace = ev->pool.data[next + i].design;
      jobs[i].mode = SCHED_REPLAY_EXACT; /* measured: its decisions were taken here */
      jobs[i].seed = dg_rng_next(&ev->rng);
    }
    build_all(ev, jobs, k);
    for (size_t i = 0; i < k; i++)
      if (jobs[i].ok) DG_VEC_PUSH(pop, jobs[i].e);
    free(jobs);
    next += k;
  }
}

/* SampleInitPopulation: rounds of `need` schedules, each of a design
 * space drawn uniformly with every decision drawn anew, until min of them
 * built or max_fail_count rounds built none. */
static void sample_init_population(search_evolve *ev, int need, ev_entries *inits) {
  const search_evolve_opts *o = &ev->o;
  int fails = 0;
  size_t n = need > 0 ? (size_t)need : 0;
  while ((int)inits->len < o->init_min_unmeasured && fails < o->max_fail_count) {
    size_t before = inits->len;
    ev_job *jobs = dg_calloc(n ? n : 1, sizeof *jobs);
    for (size_t i = 0; i < n; i++) {
      int sp = (int)dg_rng_below(&ev->rng, (uint64_t)(ev->n_spaces ? ev->n_spaces : 1));
      jobs[i].trace = ev->n_spaces ? ev->spaces[sp] : NULL;
      jobs[i].mode = SCHED_REPLAY_RESAMPLE;
      jobs[i].seed = dg_rng_next(&ev->rng);
    }
    build_all(ev, jobs, n);
    for (size_t i = 0; i < n; i++)
      if (jobs[i].ok) DG_VEC_PUSH(inits, jobs[i].e);
    free(jobs);
    if (inits->len == before) fails++;
  }
}

/* A slot of the next generation. */
typedef enum {
  SLOT_PENDING,   /* tries left to run */
  SLOT_WANTS,     /* drew an unchanged copy of parent, not yet granted */
  SLOT_COPIED,    /* the copy was granted */
  SLOT_BUILT,     /* a mutant of parent built: e */
  SLOT_EXHAUSTED, /* every try failed: the last parent, copied */
} slot_state;

typedef struct {
  dg_rng rng;
  int tries;     /* run so far */
  size_t parent; /* the last one drawn */
  slot_state state;
  ev_entry e;
  ev_acct acct;
} ev_slot;

typedef struct {
  const search_evolve *ev;
  const ev_entries *pop;
  const double *w; /* parents' weights (their scores); NULL: uniform */
  ev_slot *slots;
  const size_t *pending; /* the slots to run */
} gen_ctx;

/* Runs a slot's tries from where it stopped: draw a parent, then either
 * an unchanged copy (stops: the copy is granted serially) or a mutant,
 * built; stops at the first mutant that builds or when tries run out. */
static void slot_run(void *ctx, size_t k) {
  const gen_ctx *c = ctx;
  const search_evolve_opts *o = &c->ev->o;
  ev_slot *sl = &c->slots[c->pending[k]];
  size_t n = c->pop->len;
  while (sl->tries <= o->genetic_max_fail_count) {
    sl->tries++;
    sl->parent = c->w ? dg_rng_weighted(&sl->rng, c->w, n) : (size_t)dg_rng_below(&sl->rng, n);
    if (dg_rng_uniform(&sl->rng) >= o->genetic_mutate_prob) {
      sl->state = SLOT_WANTS;
      return;
    }
    search_mutator m = pick_mutator(c->ev->mut_cum, &sl->rng);
    sched_trace *t = search_mutate(m, c->pop->data[sl->parent].trace, &sl->rng);
    if (!t) continue;
    /* a mutant may carry a decision made stale by a change upstream of
     * it: repaired as TVM repairs it (sched.h, SCHED_REPLAY_REPAIR) */
    bool ok = build(c->ev, t, SCHED_REPLAY_REPAIR, dg_rng_next(&sl->rng), &sl->e, &sl->acct);
    sched_trace_free(t);
    if (ok) {
      sl->state = SLOT_BUILT;
      return;
    }
  }
  sl->state = SLOT_EXHAUSTED;
}

/* One generation: pop_size slots filled from pop (scored, non-empty). */
static void next_generation(search_evolve *ev, const ev_entries *pop, int pop_size,
                            ev_entries *next) {
  size_t n = pop_size > 0 ? (size_t)pop_size : 0;
  ev_slot *slots = dg_calloc(n ? n : 1, sizeof *slots);
  size_t *pending = dg_malloc(sizeof(size_t) * (n ? n : 1));
  for (size_t i = 0; i < n; i++) {
    dg_rng_seed(&slots[i].rng, dg_rng_next(&ev->rng));
    pending[i] = i;
  }
  DG_ASSERT(pop->len > 0);
  double *w = dg_malloc(sizeof(double) * pop->len);
  double sum = 0;
  for (size_t i = 0; i < pop->len; i++) sum += w[i] = pop->data[i].score;
  bool *copied = dg_calloc(pop->len, 1);
  gen_ctx c = {ev, pop, sum > 0 ? w : NULL, slots, pending};
  double t0 = dg_now();
  for (size_t n_pending = n; n_pending > 0;) {
    par_for(ev->threads, n_pending, slot_run, &c);
    size_t left = 0;
    for (size_t k = 0; k < n_pending; k++) {
      ev_slot *sl = &slots[pending[k]];
      if (sl->state != SLOT_WANTS) continue;
      if (!copied[sl->parent]) {
        copied[sl->parent] = true;
        sl->state = SLOT_COPIED;
      } else {
        sl->state = SLOT_PENDING; /* refused: the next try */
        pending[left++] = pending[k];
      }
    }
    n_pending = left;
  }
  ev_acct sum_acct = {0};
  for (size_t i = 0; i < n; i++) {
    ev_slot *sl = &slots[i];
    acct_add(&sum_acct, &sl->acct);
    if (sl->state == SLOT_BUILT) DG_VEC_PUSH(next, sl->e);
    else DG_VEC_PUSH(next, entry_copy(&pop->data[sl->parent]));
  }
  acct_commit(ev, &sum_acct, dg_now() - t0);
  free(copied);
  free(w);
  free(pending);
  free(slots);
}

/* A candidate picked: its kernel is rebuilt from the full trace. */
typedef struct {
  const ev_entry *e;
  bool random;
  dg_func *func; /* NULL: the replay failed */
} ev_pick;

typedef struct {
  const search_evolve *ev;
  ev_pick *picks;
} picks_ctx;

static void pick_run(void *ctx, size_t i) {
  const picks_ctx *c = ctx;
  ev_pick *p = &c->picks[i];
  sched *s = sched_new(c->ev->t.f, 0);
  dg_status st;
  if (sched_replay_with(s, p->e->trace, SCHED_REPLAY_EXACT, false, &st))
    p->func = ir_func_clone(sched_func(s));
  sched_free(s);
}

static bool taken(const search_evolve *ev, const hset *picked, uint64_t h) {
  return hset_has(&ev->measured, h) || hset_has(picked, h);
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

  double t0 = dg_now();
  pick_best_from_db(ev, (int)floor(pop_size * o->init_measured_ratio), &pop);
  sample_init_population(ev, pop_size - (int)pop.len, &inits);
  ev->stats.t_sample += dg_now() - t0;
  if (inits.len == 0) {
    entries_free(&pop);
    dg_fail(st, DG_ERR_INVALID,
            "evolutionary search: " SEARCH_NO_VALID_SCHEDULE " (%lld of %lld rejected)",
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
    next_generation(ev, &pop, pop_size, &next);
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

  /* PickWithEpsGreedy: the picks are chosen serially, then their kernels
   * rebuilt in parallel */
  int num_rands = (int)floor(sample_num * o->eps_greedy);
  int num_bests = sample_num - num_rands;
  for (size_t i = inits.len; i > 1; i--) { /* shuffle the random initial population */
    size_t j = (size_t)dg_rng_below(&ev->rng, i);
    ev_entry tmp = inits.data[i - 1];
    inits.data[i - 1] = inits.data[j];
    inits.data[j] = tmp;
  }
  ev_pick *sel = dg_calloc((size_t)sample_num, sizeof *sel);
  hset picked = {0};
  int n_sel = 0;
  size_t ib = 0, ir = 0;
  for (int i = 0; i < sample_num; i++) {
    const ev_entry *e = NULL;
    bool random = false;
    if (i < num_bests) {
      while (ib < best.len && taken(ev, &picked, best.data[ib].hash)) {
        ib++;
        ev->stats.n_dup_skipped++;
      }
      if (ib < best.len) e = &best.data[ib++];
    }
    if (!e) {
      while (ir < inits.len && taken(ev, &picked, inits.data[ir].hash)) {
        ir++;
        ev->stats.n_dup_skipped++;
      }
      if (ir < inits.len) {
        e = &inits.data[ir++];
        random = true;
      }
    }
    if (!e) {
      while (ib < best.len && taken(ev, &picked, best.data[ib].hash)) ib++;
      if (ib < best.len) e = &best.data[ib++];
    }
    if (!e) break;
    hset_add(&picked, e->hash);
    sel[n_sel].e = e;
    sel[n_sel].random = random;
    n_sel++;
  }
  hset_free(&picked);
  double t2 = dg_now();
  picks_ctx pc = {ev, sel};
  par_for(ev->threads, (size_t)n_sel, pick_run, &pc);
  ev->stats.t_sample += dg_now() - t2;
  search_cand *picks = dg_calloc((size_t)sample_num, sizeof *picks);
  int n = 0;
  for (int i = 0; i < n_sel; i++) {
    const ev_entry *e = sel[i].e;
    if (!sel[i].func) { /* a kernel whose full trace no longer replays */
      ev->stats.n_rejected++;
      continue;
    }
    hset_add(&ev->measured, e->hash);
    picks[n].trace = sched_trace_clone(e->trace);
    picks[n].func = sel[i].func;
    picks[n].hash = e->hash;
    picks[n].score = e->score;
    picks[n].random = sel[i].random;
    if (sel[i].random) ev->stats.n_picked_random++;
    else ev->stats.n_picked_best++;
    n++;
  }
  free(sel);
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
