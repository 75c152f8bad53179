/* run.c: `dragon eval`'s tasks and their numbers (eval.h, eval_run).
 *
 * A task is one held-out workload. Its writer (the model, or a file of
 * graphs) writes one first output; eval_pick_best judges it with the
 * untuned baseline in the same batch, exactly as `dragon optimize` would
 * judge a first sample, so the numbers here are those a user gets: the
 * gate it reached, and on the GPU its time and the baseline's, measured in
 * the same run. The output is judged on its own: a task passes only if
 * the writer's graph itself passes, never because the baseline did. On
 * the GPU the outputs written ahead are judged 32 tasks at a time in one
 * batch (judge_batch: the same gates and measurements, each output beside
 * its baseline, compiled on every core while the GPU measures), by
 * judges on threads of their own (judge_batches; two batches at once
 * where the graphs were written before the judging).
 * Outcomes go to JSON (every task, for tables and plots elsewhere) and to
 * a Markdown table by family.
 */
#include <errno.h>
#include <jansson.h>
#include <math.h>
#include <pthread.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "dragon/eval.h"
#include "dragon/rt_cuda.h"
#include "dragon/sched.h"
#include "dragon/search.h"
#include "dragon/tsel.h"
#include "dragon/wl.h"

static void family_of(const char *spec, char *out, size_t n) {
  const char *colon = strchr(spec, ':');
  size_t len = colon ? (size_t)(colon - spec) : strlen(spec);
  if (len >= n) len = n - 1;
  memcpy(out, spec, len);
  out[len] = 0;
}

/* A task's output, written ahead (write_threads > 1). */
typedef struct {
  char *graph;
  dg_status st;
  int64_t tokens;
  double t_write;
  bool built; /* the spec built (else st says why) */
} written;

static void write_task(const eval_run_opts *o, int i, written *w) {
  dg_status_ok(&w->st);
  dg_func *f = wl_build(o->specs[i], &w->st);
  if (!f) return;
  w->built = true;
  double t0 = dg_now();
  w->graph = o->write(o->write_ctx, f, o->specs[i], o->priors ? o->priors[i] : NULL, o->seed + (uint64_t)i,
                      &w->tokens, &w->st);
  w->t_write = dg_now() - t0;
  ir_func_free(f);
}

typedef struct {
  const eval_run_opts *o;
  written *w;
  const int *unwritten; /* groups: the tasks to write, group g from unwritten[g * size] */
  int n_unwritten, size;
  /* where not NULL, group g holds unwritten[start[g] .. start[g + 1]) (the
   * lazy writer's growing groups) instead */
  const int *start;
} write_ctx;

static int group_lo(const write_ctx *c, int g) { return c->start ? c->start[g] : g * c->size; }
static int group_n(const write_ctx *c, int g) {
  if (c->start) return c->start[g + 1] - c->start[g];
  return c->n_unwritten - g * c->size < c->size ? c->n_unwritten - g * c->size : c->size;
}

static void write_on_thread(void *p, int i) {
  write_ctx *c = p;
  if (c->o->done && c->o->done[i]) return; /* resumed */
  write_task(c->o, i, &c->w[i]);
}

/* Group g's tasks, written by one call of write_group. */
static void write_group_on_thread(void *p, int g) {
  write_ctx *c = p;
  const eval_run_opts *o = c->o;
  int lo = group_lo(c, g), n = group_n(c, g);
  dg_func **f = dg_calloc((size_t)n, sizeof *f);
  const char **specs = dg_calloc((size_t)n, sizeof *specs);
  const char **priors = dg_calloc((size_t)n, sizeof *priors);
  uint64_t *seeds = dg_calloc((size_t)n, sizeof *seeds);
  char **texts = dg_calloc((size_t)n, sizeof *texts);
  int64_t *tokens = dg_calloc((size_t)n, sizeof *tokens);
  dg_status *sts = dg_calloc((size_t)n, sizeof *sts);
  int *at = dg_calloc((size_t)n, sizeof *at);
  int m = 0;
  for (int r = 0; r < n; r++) {
    int i = c->unwritten[lo + r];
    written *w = &c->w[i];
    dg_status_ok(&w->st);
    dg_func *k = wl_build(o->specs[i], &w->st);
    if (!k) continue;
    w->built = true;
    priors[m] = o->priors ? o->priors[i] : NULL;
    f[m] = k, specs[m] = o->specs[i], seeds[m] = o->seed + (uint64_t)i, at[m++] = i;
  }
  double t0 = dg_now();
  if (m > 0)
    o->write_group(o->write_ctx, (const dg_func *const *)f, specs, o->priors ? priors : NULL, seeds, m, texts,
                   tokens, sts);
  double each = (dg_now() - t0) / (m ? m : 1); /* written together: the group's time shared */
  for (int r = 0; r < m; r++) {
    written *w = &c->w[at[r]];
    w->graph = texts[r];
    w->tokens = tokens[r];
    w->t_write = each;
    if (!texts[r]) w->st = sts[r];
    ir_func_free(f[r]);
  }
  free(f);
  free(specs);
  free(priors);
  free(seeds);
  free(texts);
  free(tokens);
  free(sts);
  free(at);
}

/* The other writer's output's outcome, on task t. */
static void against_of(eval_task *t, const eval_score *a) {
  t->has_against = true;
  t->against_gate = a->failed;
  t->against_secs = a->failed == EVAL_PASSED ? a->secs : 0;
}

/* Judges task i's output (written now, or ahead in *ahead). */
static void run_task(const eval_run_opts *o, int i, eval_task *t, written *ahead, dg_status *st) {
  dg_func *f = wl_build(o->specs[i], st);
  if (!f) return;
  written now = {0};
  if (!ahead) {
    write_task(o, i, &now);
    ahead = &now;
  }
  char *graph = ahead->graph;
  ahead->graph = NULL;
  t->tokens = ahead->tokens;
  t->t_write = ahead->t_write;
  double t0 = dg_now();
  /* the other writer's output, where there is one, judged in the same
   * batch (on the GPU timed in the same run) */
  const char *other = o->against ? o->against[i] : NULL;
  if (!graph) {
    t->gate = EVAL_GATE_PARSE;
    snprintf(t->reason, sizeof t->reason, "no graph: %.480s", ahead->st.msg);
  }
  if (graph || other) {
    /* the baseline only for its time: without a GPU it is not scored */
    eval_pick_opts po = {f, o->specs[i], o->gpu, 0, o->threads, o->gpu == NULL,
                         o->no_numbers && !o->gpu};
    eval_pick p;
    const char *two[2];
    int n = 0;
    if (graph) two[n++] = graph;
    if (other) two[n++] = other;
    dg_status pst;
    eval_pick_best(two, n, NULL, &po, &p, &pst);
    if (graph) {
      t->gate = p.scores[0].failed;
      snprintf(t->reason, sizeof t->reason, "%s", p.scores[0].reason);
      if (t->gate == EVAL_PASSED) t->secs = p.scores[0].secs;
    }
    if (other) against_of(t, &p.scores[n - 1]);
    t->baseline_secs = p.baseline_secs;
    eval_pick_free(&p);
  }
  t->t_check = dg_now() - t0;
  t->graph = graph;
  ir_func_free(f);
}

/* On the GPU, the tasks [lo, hi) written ahead and not resumed are judged
 * together: each output beside its workload's untuned baseline (lifted to
 * a graph), the gates up to the build on every core, then one queue on
 * the GPU (eval_score_batch), compiling the next while the GPU measures.
 * The same gates and numbers as eval_pick_best, task by task. False (st
 * set) only when a task's spec does not build. */
#define EVAL_BATCH 32
/* Batches judged at once by default where every graph was written
 * before the judging (eval_run_opts.judges; beside the GPU's writer, 1). */
#define EVAL_JUDGES 2
static bool judge_batch(const eval_run_opts *o, search_cuda_measure *gpu, int lo, int hi, eval_task *tasks,
                        written *ahead, dg_status *st) {
  int n = 0, idx[EVAL_BATCH];
  for (int i = lo; i < hi; i++)
    if (!(o->done && o->done[i])) idx[n++] = i;
  if (n == 0) return true;
  dg_func *f[EVAL_BATCH] = {0};
  char *base[EVAL_BATCH] = {0};
  /* each task's output and baseline, its label and its prior where it has them */
  eval_item items[5 * EVAL_BATCH];
  eval_score sc[5 * EVAL_BATCH];
  int at_item[EVAL_BATCH], at_label[EVAL_BATCH], at_prior[EVAL_BATCH], at_against[EVAL_BATCH], n_items = 0;
  bool ok = true;
  for (int k = 0; k < n && ok; k++) {
    int i = idx[k];
    eval_task *t = &tasks[i];
    t->spec = dg_strdup(o->specs[i]);
    t->name = o->names && o->names[i] ? dg_strdup(o->names[i]) : NULL;
    family_of(t->spec, t->family, sizeof t->family);
    if (!(f[k] = wl_build(o->specs[i], st))) {
      ok = false;
      break;
    }
    sched *bs = NULL;
    dg_status bst;
    if (search_baseline_schedule(f[k], NULL, &bs, &bst)) {
      tsel_graph *bg = tsel_lift(sched_get_trace(bs), o->specs[i], f[k], NULL, &bst);
      if (bg) base[k] = tsel_print(bg);
      tsel_graph_free(bg);
    }
    sched_free(bs);
    const char *graph = ahead[i].graph;
    at_item[k] = n_items;
    items[n_items++] = (eval_item){graph ? graph : "", "graph", f[k], o->specs[i], NULL};
    items[n_items++] = (eval_item){base[k] ? base[k] : "", "baseline", f[k], o->specs[i], NULL};
    at_label[k] = -1;
    if (o->labels && o->labels[i]) {
      at_label[k] = n_items;
      items[n_items++] = (eval_item){o->labels[i], "label", f[k], o->specs[i], NULL};
    }
    at_prior[k] = -1;
    if (o->priors && o->priors[i]) {
      at_prior[k] = n_items;
      items[n_items++] = (eval_item){o->priors[i], "prior", f[k], o->specs[i], NULL};
    }
    at_against[k] = -1;
    if (o->against && o->against[i]) {
      at_against[k] = n_items;
      items[n_items++] = (eval_item){o->against[i], "against", f[k], o->specs[i], NULL};
    }
  }
  if (ok) {
    eval_score_opts eo;
    memset(&eo, 0, sizeof eo);
    eo.last = EVAL_GATE_MEASURE;
    eo.gpu = gpu;
    double t0 = dg_now();
    double w0 = gpu->stats.t_wall, d0 = gpu->stats.t_data, g0 = gpu->stats.t_gpu_wait,
           c0 = gpu->stats.t_compile_wait, b0 = gpu->stats.t_data_build, r0 = gpu->stats.t_data_run;
    eval_score_batch(items, n_items, &eo, o->threads, sc);
    double each = (dg_now() - t0) / n;
    if (o->progress) {
      /* where a batch's time goes: the gates up to the build, then the
       * GPU round (the workloads' data, inputs and float64 references,
       * made while the candidates build) */
      double w = gpu->stats.t_wall - w0, d = gpu->stats.t_data - d0;
      fprintf(o->progress,
              "judged tasks %d to %d in %.1f s: gates %.1f s, measuring %.1f s (the workloads' "
              "data made after %.1f s: references compiled in %.1f and run in %.1f thread-s; waiting "
              "for the GPU %.1f s, for a compile or data %.1f s)\n",
              lo + 1, hi, each * n, each * n - w, w, d, gpu->stats.t_data_build - b0,
              gpu->stats.t_data_run - r0, gpu->stats.t_gpu_wait - g0, gpu->stats.t_compile_wait - c0);
    }
    for (int k = 0; k < n; k++) {
      int i = idx[k];
      eval_task *t = &tasks[i];
      written *w = &ahead[i];
      const eval_score *y = &sc[at_item[k]], *b = &sc[at_item[k] + 1];
      t->tokens = w->tokens;
      t->t_write = w->t_write;
      t->t_check = each;
      if (!w->graph) {
        t->gate = EVAL_GATE_PARSE;
        snprintf(t->reason, sizeof t->reason, "no graph: %.480s", w->st.msg);
      } else {
        t->gate = y->failed;
        snprintf(t->reason, sizeof t->reason, "%s", y->reason);
        if (t->gate == EVAL_PASSED) t->secs = y->secs;
      }
      t->baseline_secs = b->failed == EVAL_PASSED ? b->secs : 0;
      /* a label that does not pass here (it was measured correct when it
       * was made) is no label of this run */
      t->label_secs = at_label[k] >= 0 && sc[at_label[k]].failed == EVAL_PASSED ? sc[at_label[k]].secs : 0;
      t->prior_secs = at_prior[k] >= 0 && sc[at_prior[k]].failed == EVAL_PASSED ? sc[at_prior[k]].secs : 0;
      if (at_against[k] >= 0) against_of(t, &sc[at_against[k]]);
      t->graph = w->graph;
      w->graph = NULL;
    }
    for (int k = 0; k < n_items; k++) eval_score_free(&sc[k]);
  }
  for (int k = 0; k < n; k++) {
    ir_func_free(f[k]);
    free(base[k]);
    if (!ok) { /* the run stops before these: nothing of them is kept */
      free(tasks[idx[k]].spec);
      free(tasks[idx[k]].name);
      tasks[idx[k]].spec = tasks[idx[k]].name = NULL;
    }
  }
  return ok;
}

/* On the GPU, a batch's workloads' data (their inputs and float64
 * references, compiled C run on the CPU) is made ahead: the first batch's
 * while the model writes it, each next one's while the batch before it is
 * judged (search_cuda_measure_prepare_start), and kept just before its
 * own judging (prepare_finish), which otherwise waited for it with the GPU
 * idle. A workload of the batch being judged is left to that judging. */
typedef struct {
  search_cuda_data *x;
  int lo, hi; /* its tasks */
} batch_data;

static bool spec_in(const eval_run_opts *o, const char *spec, int lo, int hi) {
  for (int k = lo; k < hi; k++)
    if (strcmp(o->specs[k], spec) == 0) return true;
  return false;
}

static void data_ahead_start(const eval_run_opts *o, search_cuda_measure *gpu, int lo, int hi, int skip_lo,
                             int skip_hi, batch_data *d) {
  dg_func *f[EVAL_BATCH] = {0};
  int n = 0;
  for (int k = lo; k < hi && n < EVAL_BATCH; k++) {
    dg_status st;
    /* a spec that does not build is reported by its judging */
    if (!(o->done && o->done[k]) && !spec_in(o, o->specs[k], skip_lo, skip_hi) &&
        (f[n] = wl_build(o->specs[k], &st)))
      n++;
  }
  *d = (batch_data){search_cuda_measure_prepare_start(gpu, (const dg_func *const *)f, n), lo, hi};
  for (int k = 0; k < n; k++) ir_func_free(f[k]);
}

static void data_ahead_finish(const eval_run_opts *o, search_cuda_measure *gpu, batch_data *d) {
  if (!d->x) return;
  double t0 = dg_now(), b0 = gpu->stats.t_data_build, r0 = gpu->stats.t_data_run;
  search_cuda_measure_prepare_finish(gpu, d->x);
  d->x = NULL;
  if (o->progress)
    fprintf(o->progress,
            "tasks %d to %d: their data made ahead (waited %.1f s for it; references compiled in %.1f and run in "
            "%.1f thread-s)\n",
            d->lo + 1, d->hi, dg_now() - t0, gpu->stats.t_data_build - b0, gpu->stats.t_data_run - r0);
}

static void write_progress(const eval_run_opts *o, int done, int n, double secs) {
  if (!o->progress) return;
  fprintf(o->progress, "written %d of %d (%.1f s, ETA %.0f s)\n", done, n, secs,
          done ? secs / done * (n - done) : 0.0);
  fflush(o->progress);
}

/* On the GPU with one writer, the groups are written on a thread of their
 * own, in order, while the main thread judges the batches of the groups
 * written before (the writer's steps on the GPU and the measuring jobs take
 * the GPU's lock in turn, gpu_lock.c, so that every kernel is timed alone):
 * one after the other, writing and judging took some 200 s and 430 s of
 * the test split's evaluation on 2026-12-07; side by side the same H100
 * judged 1.5-1.9 tasks a second, against 1.1-1.5. The groups grow from two
 * batches to write_group_size, so that the judging starts after a small
 * one. A batch waits until the groups holding its tasks are written. */
typedef struct {
  write_ctx *wc;
  int groups;
  pthread_t thread;
  bool started;
  pthread_mutex_t mu;
  pthread_cond_t cv;
  int done;  /* groups written */
  bool stop; /* no group is begun once it is set */
  double t0;
  int written_n;
} lazy_writer;

static void *lazy_write(void *arg) {
  lazy_writer *L = arg;
  for (int g = 0; g < L->groups; g++) {
    pthread_mutex_lock(&L->mu);
    bool stop = L->stop;
    pthread_mutex_unlock(&L->mu);
    if (stop) break;
    write_group_on_thread(L->wc, g);
    pthread_mutex_lock(&L->mu);
    L->written_n += group_n(L->wc, g);
    L->done = g + 1;
    write_progress(L->wc->o, L->written_n, L->wc->n_unwritten, dg_now() - L->t0);
    pthread_cond_broadcast(&L->cv);
    pthread_mutex_unlock(&L->mu);
  }
  pthread_mutex_lock(&L->mu);
  L->done = L->groups; /* stopped or finished: nothing more will come */
  pthread_cond_broadcast(&L->cv);
  pthread_mutex_unlock(&L->mu);
  return NULL;
}

/* The groups a batch ending before task index hi needs written. */
static int groups_below(const write_ctx *c, int groups, int hi) {
  int g = 0;
  while (g < groups && c->unwritten[group_lo(c, g)] < hi) g++;
  return g;
}

static bool lazy_written(lazy_writer *L, int need) {
  pthread_mutex_lock(&L->mu);
  bool done = L->done >= need;
  pthread_mutex_unlock(&L->mu);
  return done;
}

static double lazy_wait(lazy_writer *L, int need) {
  double t0 = dg_now();
  pthread_mutex_lock(&L->mu);
  while (L->done < need) pthread_cond_wait(&L->cv, &L->mu);
  pthread_mutex_unlock(&L->mu);
  return dg_now() - t0;
}

static void lazy_stop(lazy_writer *L) {
  if (!L->started) return;
  pthread_mutex_lock(&L->mu);
  L->stop = true;
  pthread_mutex_unlock(&L->mu);
  pthread_join(L->thread, NULL);
  pthread_mutex_destroy(&L->mu);
  pthread_cond_destroy(&L->cv);
  L->started = false;
}

/* The lazy writer's group starts: two batches, then doubling up to size. */
static int *growing_groups(int n_unwritten, int size, int *groups) {
  int cap = 2, g = 0;
  int *start = dg_malloc(sizeof(int) * (size_t)cap);
  int at = 0, want = 2 * EVAL_BATCH < size ? 2 * EVAL_BATCH : size;
  while (at < n_unwritten) {
    if (g + 2 > cap) start = dg_realloc(start, sizeof(int) * (size_t)(cap *= 2));
    start[g++] = at;
    at += want < n_unwritten - at ? want : n_unwritten - at;
    want = 2 * want < size ? 2 * want : size;
  }
  start[g] = at;
  *groups = g;
  return start;
}

/* On the GPU, the batches are judged by judges (eval_run_opts.judges), each
 * on a thread of its own with a measuring context of its own (its worker
 * on the GPU, its data files), taking the next batch not taken: a batch
 * waits for its slowest compile (16-42 s where its GPU work is 4-6 s, the
 * test split on 2026-12-07), and meanwhile another judge compiles and
 * measures the next. The measuring jobs of every judge take the GPU's lock
 * in turn (gpu_lock.c), so each kernel is still timed alone, and NVRTC's
 * processes are shared (nvrtc_pool.c: a compile waits for a free one).
 * Each judge makes the data of the batch it takes next while it judges
 * the one before. The main thread takes the judged batches in order.
 * Beside the GPU's writer one judge is the default: on an H100 on
 * 2026-12-07 two judges judged a batch in 13-32 s but waited 18-83 s for
 * graphs, the writer's steps waiting behind two measuring workers for the
 * GPU's lock (448 tasks written in 218 s where beside one judge it wrote
 * them in 182 s). */
typedef struct {
  const eval_run_opts *o;
  eval_task *tasks;
  written *ahead;
  lazy_writer *lw; /* NULL: every graph was written before the judging */
  write_ctx *wc;
  int groups;
  int n_batches;
  pthread_mutex_t mu;
  pthread_cond_t cv;
  int next;           /* the next batch no judge took */
  signed char *state; /* per batch: 0 not judged, 1 judged, -1 a spec did not build */
  dg_status *why;     /* per batch, for -1 */
  bool stop;          /* no batch is taken once it is set */
  int busy, peak;     /* batches being judged now, at most */
} judging;

typedef struct {
  judging *J;
  search_cuda_measure *gpu;
  pthread_t thread;
  bool started;
} judge;

/* The next batch for a judge, or -1: none left, or stopped. */
static int judge_take(judging *J) {
  pthread_mutex_lock(&J->mu);
  int b = J->stop || J->next >= J->n_batches ? -1 : J->next++;
  pthread_mutex_unlock(&J->mu);
  return b;
}

static bool judging_stopped(judging *J) {
  pthread_mutex_lock(&J->mu);
  bool stop = J->stop;
  pthread_mutex_unlock(&J->mu);
  return stop;
}

static int batch_hi(const eval_run_opts *o, int b) {
  return (b + 1) * EVAL_BATCH < o->n ? (b + 1) * EVAL_BATCH : o->n;
}

static void *judge_batches(void *arg) {
  judge *jd = arg;
  judging *J = jd->J;
  const eval_run_opts *o = J->o;
  batch_data data = {0};
  int b = judge_take(J);
  while (b >= 0) {
    int lo = b * EVAL_BATCH, hi = batch_hi(o, b);
    /* where the batch's graphs are still to write, its data is made meanwhile */
    if (J->lw) {
      int need = groups_below(J->wc, J->groups, hi);
      if (!lazy_written(J->lw, need)) {
        if (!data.x) data_ahead_start(o, jd->gpu, lo, hi, 0, 0, &data);
        double waited = lazy_wait(J->lw, need);
        if (o->progress) fprintf(o->progress, "tasks %d to %d: waited %.1f s for their graphs\n", lo + 1, hi, waited);
      }
    }
    if (judging_stopped(J)) break;
    data_ahead_finish(o, jd->gpu, &data);
    int next = judge_take(J);
    if (next >= 0) data_ahead_start(o, jd->gpu, next * EVAL_BATCH, batch_hi(o, next), lo, hi, &data);
    pthread_mutex_lock(&J->mu);
    if (++J->busy > J->peak) J->peak = J->busy;
    pthread_mutex_unlock(&J->mu);
    dg_status st;
    dg_status_ok(&st);
    bool ok = judge_batch(o, jd->gpu, lo, hi, J->tasks, J->ahead, &st);
    pthread_mutex_lock(&J->mu);
    J->busy--;
    J->state[b] = ok ? 1 : -1;
    if (!ok) J->why[b] = st;
    pthread_cond_broadcast(&J->cv);
    pthread_mutex_unlock(&J->mu);
    if (!ok) break; /* the run stops at this batch */
    b = next;
  }
  data_ahead_finish(o, jd->gpu, &data); /* taken, then stopped before it */
  return NULL;
}

/* A judge on a thread of its own runs below the writer's threads (their
 * nice + JUDGE_NICE, inherited by the threads it starts: the gates', the
 * compiles'): a batch is judged only once it is written, and the judging
 * waited 101 s for graphs in the test split's first 768 tasks on
 * 2026-12-07, where the writer, sharing the cores with the compiles, took
 * 115 s for 512 tasks it wrote in 44 s alone. */
enum { JUDGE_NICE = 5 };
static void *judge_thread(void *arg) {
  id_t tid = (id_t)syscall(SYS_gettid);
  errno = 0;
  int nice = getpriority(PRIO_PROCESS, tid);
  if (errno == 0) (void)setpriority(PRIO_PROCESS, tid, nice + JUDGE_NICE); /* best effort */
  return judge_batches(arg);
}

/* Batch b judged: true, or false with st set (a spec that did not build). */
static bool judged_wait(judging *J, int b, dg_status *st) {
  pthread_mutex_lock(&J->mu);
  while (J->state[b] == 0) pthread_cond_wait(&J->cv, &J->mu);
  bool ok = J->state[b] > 0;
  if (!ok) *st = J->why[b];
  pthread_mutex_unlock(&J->mu);
  return ok;
}

/* The judges' measuring contexts: o->gpu the first, the others set up as
 * it is (a context that cannot be set up leaves fewer judges, said why). */
static int judges_open(const eval_run_opts *o, int want, search_cuda_measure **more) {
  *more = want > 1 ? dg_calloc((size_t)(want - 1), sizeof **more) : NULL;
  int n = 1;
  for (; n < want; n++) {
    search_cuda_measure *m = &(*more)[n - 1];
    const search_cuda_measure *g = o->gpu;
    *m = (search_cuda_measure){g->repeats, g->timeout_s, g->seed, NULL, g->threads, g->allow_no_gpu,
                               g->compile_limit_s, g->deadline};
    dg_status st;
    if (!search_cuda_measure_init(m, &st)) {
      if (o->progress) fprintf(o->progress, "judging with %d judges, not %d: %s\n", n, want, st.msg);
      break;
    }
  }
  return n;
}

static void judges_close(const eval_run_opts *o, int n, search_cuda_measure *more) {
  for (int k = 0; k + 1 < n; k++) {
    search_cuda_measure_add_stats(o->gpu, &more[k]);
    search_cuda_measure_free(&more[k]);
  }
  free(more);
}

bool eval_run(const eval_run_opts *o, eval_result *out, dg_status *st) {
  memset(out, 0, sizeof *out);
  dg_status_ok(st);
  double t_start = dg_now();
  out->timed = o->gpu != NULL;
  out->refine = o->priors != NULL;
  out->tasks = dg_calloc((size_t)(o->n > 0 ? o->n : 1), sizeof *out->tasks);
  /* the outputs first, on threads, where asked; then each judged in order
   * (on the GPU with one writer: the groups written on a thread beside the
   * judging, lazy_writer, unless o->write_first; an evaluation cut short
   * keeps what it judged) */
  written *ahead = NULL;
  write_ctx wc = {0};
  int groups = 0, n_unwritten = 0, written_n = 0;
  bool lazy = false;
  lazy_writer lw = {0};
  int *lazy_start = NULL;
  if (o->write_group && o->n > 0) {
    /* the tasks to write (not resumed), in groups of write_group_size, or
     * of up to 16, four groups a thread at least (a group takes as long as
     * its slowest graph: more groups than threads keep the threads busy) */
    ahead = dg_calloc((size_t)o->n, sizeof *ahead);
    int *unwritten = dg_malloc(sizeof(int) * (size_t)o->n);
    for (int i = 0; i < o->n; i++)
      if (!(o->done && o->done[i])) unwritten[n_unwritten++] = i;
    int threads = o->write_threads > 1 ? o->write_threads : 1;
    int size = (n_unwritten + 4 * threads - 1) / (4 * threads);
    if (size > 16) size = 16;
    if (o->write_group_size > 0) size = o->write_group_size;
    if (size < 1) size = 1;
    groups = (n_unwritten + size - 1) / size;
    wc = (write_ctx){o, ahead, unwritten, n_unwritten, size, NULL};
    lazy = o->gpu && threads == 1 && !o->write_first;
    if (lazy && groups > 0) {
      lazy_start = growing_groups(n_unwritten, size, &groups);
      wc.start = lazy_start;
      lw = (lazy_writer){.wc = &wc, .groups = groups, .t0 = t_start};
      pthread_mutex_init(&lw.mu, NULL);
      pthread_cond_init(&lw.cv, NULL);
      if (pthread_create(&lw.thread, NULL, lazy_write, &lw) == 0) {
        lw.started = true;
      } else { /* no thread: every group written here, then judged */
        pthread_mutex_destroy(&lw.mu);
        pthread_cond_destroy(&lw.cv);
        lazy = false;
      }
    }
    if (!lazy) {
      rt_tasks *tk = rt_tasks_start(groups, threads, write_group_on_thread, &wc);
      int g;
      while ((g = rt_tasks_next(tk, true)) >= 0) {
        written_n += group_n(&wc, g);
        write_progress(o, written_n, n_unwritten, dg_now() - t_start);
      }
      rt_tasks_free(tk);
    }
  } else if (o->write_threads > 1 && o->n > 1) {
    ahead = dg_calloc((size_t)o->n, sizeof *ahead);
    wc = (write_ctx){o, ahead, NULL, 0, 0};
    rt_tasks *tk = rt_tasks_start(o->n, o->write_threads, write_on_thread, &wc);
    int done = 0;
    while (rt_tasks_next(tk, true) >= 0)
      if (++done % 10 == 0 || done == o->n) write_progress(o, done, o->n, dg_now() - t_start);
    rt_tasks_free(tk);
  }
  bool ok = true;
  bool batched = o->gpu && ahead;
  judging J = {0};
  judge *jd = NULL;
  search_cuda_measure *more = NULL;
  int n_judges = 0, started = 0;
  if (batched && o->n > 0) {
    /* by default one judge beside the GPU's writer: a second one's
     * measurements hold the GPU's lock against the writer's steps, and
     * the writer is then the slower (bench/RESULTS.md, 2026-12-07) */
    n_judges = judges_open(o, o->judges > 0 ? o->judges : lw.started ? 1 : EVAL_JUDGES, &more);
    J = (judging){.o = o, .tasks = out->tasks, .ahead = ahead, .lw = lw.started ? &lw : NULL, .wc = &wc,
                  .groups = groups, .n_batches = (o->n + EVAL_BATCH - 1) / EVAL_BATCH};
    J.state = dg_calloc((size_t)J.n_batches, 1);
    J.why = dg_calloc((size_t)J.n_batches, sizeof *J.why);
    pthread_mutex_init(&J.mu, NULL);
    pthread_cond_init(&J.cv, NULL);
    jd = dg_calloc((size_t)n_judges, sizeof *jd);
    for (int k = 0; k < n_judges; k++) {
      jd[k] = (judge){&J, k == 0 ? o->gpu : &more[k - 1]};
      jd[k].started = pthread_create(&jd[k].thread, NULL, judge_thread, &jd[k]) == 0;
      started += jd[k].started;
    }
    if (started == 0) judge_batches(&jd[0]); /* no thread: every batch judged here first */
  }
  for (int i = 0; i < o->n && ok; i++) {
    eval_task *t = &out->tasks[i];
    bool resumed = o->done && o->done[i];
    if (batched && i % EVAL_BATCH == 0 && !judged_wait(&J, i / EVAL_BATCH, st)) {
      dg_status_prefix(st, "tasks %d to %d", i + 1, batch_hi(o, i / EVAL_BATCH));
      out->t_total = dg_now() - t_start;
      ok = false;
      break;
    }
    if (resumed) {
      *t = *o->done[i];
      t->spec = dg_strdup(o->specs[i]);
      t->name = o->names && o->names[i] ? dg_strdup(o->names[i]) : NULL;
      t->graph = o->done[i]->graph ? dg_strdup(o->done[i]->graph) : NULL;
    } else if (!batched) {
      t->spec = dg_strdup(o->specs[i]);
      t->name = o->names && o->names[i] ? dg_strdup(o->names[i]) : NULL;
      family_of(t->spec, t->family, sizeof t->family);
      run_task(o, i, t, ahead ? &ahead[i] : NULL, st);
    }
    out->n = i + 1;
    if (st->code == DG_OK && !resumed && o->on_task && !o->on_task(o->on_task_ctx, i, t, st))
      dg_status_prefix(st, "keeping the outcome");
    if (st->code != DG_OK) {
      dg_status_prefix(st, "task %d (%s)", i + 1, o->specs[i]);
      out->t_total = dg_now() - t_start;
      ok = false;
      break;
    }
    bool passed = t->gate == EVAL_PASSED;
    out->correct += passed;
    double speedup = passed && t->secs > 0 && t->baseline_secs > 0 ? t->baseline_secs / t->secs : 0;
    out->fast_2 += speedup >= 2;
    out->fast_10 += speedup >= 10;
    double gain = eval_task_vs_prior(t);
    out->faster += gain >= EVAL_REFINE_GAIN;
    out->faster_2 += gain >= 2;
    if (t->has_against) {
      bool other = t->against_gate == EVAL_PASSED;
      out->against_n++;
      out->against_either += passed || other;
      out->against_only += passed && !other;
      out->against_faster += eval_task_vs_against(t) > 1;
    }
    if (o->progress) {
      fprintf(o->progress, "[%d/%d] %s  %s%s", i + 1, o->n, t->name ? t->name : t->spec, eval_gate_name(t->gate),
              resumed ? " (resumed)" : "");
      if (speedup > 0) fprintf(o->progress, "  %.2fx over the baseline", speedup);
      if (gain > 0) fprintf(o->progress, ", %.2fx over the prior", gain);
      fprintf(o->progress, "  (%.1f s) | correct %d of %d\n", t->t_write + t->t_check,
              out->correct, i + 1);
      fflush(o->progress);
    }
  }
  if (jd) { /* a run stopped early waits for the batches being judged */
    pthread_mutex_lock(&J.mu);
    J.stop = true;
    pthread_mutex_unlock(&J.mu);
  }
  lazy_stop(&lw); /* and for the group being written (the judges waiting for it go on) */
  if (jd) {
    for (int k = 0; k < n_judges; k++)
      if (jd[k].started) pthread_join(jd[k].thread, NULL);
    out->judges = n_judges;
    out->judged_at_once = J.peak;
    judges_close(o, n_judges, more);
    pthread_mutex_destroy(&J.mu);
    pthread_cond_destroy(&J.cv);
    free(J.state);
    free(J.why);
    free(jd);
  }
  free(lazy_start);
  if (ahead) {
    for (int i = 0; i < o->n; i++) free(ahead[i].graph);
    free(ahead);
  }
  free((int *)wc.unwritten);
  out->t_total = dg_now() - t_start;
  return ok;
}

void eval_result_free(eval_result *r) {
  if (!r) return;
  for (int i = 0; i < r->n; i++) {
    free(r->tasks[i].spec);
    free(r->tasks[i].name);
    free(r->tasks[i].graph);
  }
  free(r->tasks);
  memset(r, 0, sizeof *r);
}

static double speedup_of(const eval_task *t) {
  return t->gate == EVAL_PASSED && t->secs > 0 && t->baseline_secs > 0 ? t->baseline_secs / t->secs
                                                                          : 0;
}


double eval_task_vs_prior(const eval_task *t) {
  return t->prior_secs > 0 && t->gate == EVAL_PASSED && t->secs > 0 ? t->prior_secs / t->secs : 0;
}

double eval_task_vs_against(const eval_task *t) {
  return t->against_secs > 0 && t->gate == EVAL_PASSED && t->secs > 0 ? t->against_secs / t->secs : 0;
}

double eval_task_vs_label(const eval_task *t) {
  return t->label_secs > 0 && t->gate == EVAL_PASSED && t->secs > 0 ? t->label_secs / t->secs : 0;
}

static int cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

double eval_median_ratio(double *x, int n) {
  if (n == 0) return 0;
  qsort(x, (size_t)n, sizeof *x, cmp_double);
  return n % 2 ? x[n / 2] : sqrt(x[n / 2 - 1] * x[n / 2]);
}

/* Against the search over the tasks of family (NULL: all): the labelled
 * tasks, their median vs_label over those that passed, and how many
 * passed at least 0.9x the search's speed. */
typedef struct {
  int labelled, passed, near;
  double median;
} vs_label;

static vs_label vs_label_of(const eval_result *r, const char *family) {
  vs_label v = {0};
  double *x = dg_calloc((size_t)(r->n ? r->n : 1), sizeof *x);
  for (int i = 0; i < r->n; i++) {
    const eval_task *t = &r->tasks[i];
    if (t->label_secs <= 0 || (family && strcmp(t->family, family) != 0)) continue;
    v.labelled++;
    double q = eval_task_vs_label(t);
    if (q > 0) x[v.passed++] = q;
    v.near += q >= 0.9;
  }
  v.median = eval_median_ratio(x, v.passed);
  free(x);
  return v;
}

char *eval_result_json(const eval_result *r, const char *model, const char *split, uint64_t seed,
                       double temperature) {
  json_t *tasks = json_array();
  for (int i = 0; i < r->n; i++) {
    const eval_task *t = &r->tasks[i];
    json_t *j = json_pack("{s:s, s:s, s:s, s:s, s:b, s:f, s:f, s:I}", "workload", t->spec, "family",
                          t->family, "gate", eval_gate_name(t->gate), "reason", t->reason,
                          "correct", t->gate == EVAL_PASSED, "write_s", t->t_write, "check_s",
                          t->t_check, "tokens", (json_int_t)t->tokens);
    if (t->secs > 0) json_object_set_new(j, "secs", json_real(t->secs));
    if (t->baseline_secs > 0) json_object_set_new(j, "baseline_secs", json_real(t->baseline_secs));
    if (t->graph) json_object_set_new(j, "graph", json_string(t->graph));
    double s = speedup_of(t);
    if (s > 0) json_object_set_new(j, "speedup", json_real(s));
    if (t->label_secs > 0) {
      json_object_set_new(j, "label_secs", json_real(t->label_secs));
      json_object_set_new(j, "vs_label", json_real(eval_task_vs_label(t)));
    }
    if (t->name) json_object_set_new(j, "task", json_string(t->name));
    if (t->prior_secs > 0) {
      json_object_set_new(j, "prior_secs", json_real(t->prior_secs));
      json_object_set_new(j, "vs_prior", json_real(eval_task_vs_prior(t)));
    }
    if (t->has_against) {
      json_object_set_new(j, "against_gate", json_string(eval_gate_name(t->against_gate)));
      if (t->against_secs > 0) json_object_set_new(j, "against_secs", json_real(t->against_secs));
      if (eval_task_vs_against(t) > 0) json_object_set_new(j, "vs_against", json_real(eval_task_vs_against(t)));
    }
    json_array_append_new(tasks, j);
  }
  json_t *root = json_pack("{s:s, s:s, s:s, s:I, s:f, s:b, s:i, s:i, s:f, s:o}", "model", model, "split",
                           split, "tasks_kind", r->refine ? "refine" : "construct", "seed", (json_int_t)seed,
                           "temperature", temperature, "timed", r->timed, "tasks_n", r->n, "correct",
                           r->correct, "seconds", r->t_total, "tasks", tasks);
  if (r->against_n > 0) {
    json_object_set_new(root, "against_n", json_integer(r->against_n));
    json_object_set_new(root, "against_either", json_integer(r->against_either));
    json_object_set_new(root, "against_only", json_integer(r->against_only));
  }
  if (r->timed) {
    json_object_set_new(root, "fast_2", json_integer(r->fast_2));
    json_object_set_new(root, "fast_10", json_integer(r->fast_10));
    if (r->refine) {
      json_object_set_new(root, "faster", json_integer(r->faster));
      json_object_set_new(root, "faster_2", json_integer(r->faster_2));
    }
    if (r->against_n > 0) json_object_set_new(root, "against_faster", json_integer(r->against_faster));
    vs_label v = vs_label_of(r, NULL);
    if (v.labelled > 0) {
      json_object_set_new(root, "labelled", json_integer(v.labelled));
      json_object_set_new(root, "vs_label_median", json_real(v.median));
      json_object_set_new(root, "vs_label_0.9", json_integer(v.near));
    }
  }
  char *text = json_dumps(root, JSON_INDENT(1) | JSON_PRESERVE_ORDER);
  json_decref(root);
  char *out = dg_strdup(text);
  free(text);
  return out;
}

static void table_row(dg_str *s, const char *name, const eval_result *r, const char *family,
                      bool labels) {
  int n = 0, ok = 0, f2 = 0, f10 = 0, ns = 0, g1 = 0, g2 = 0;
  double *sp = dg_calloc((size_t)(r->n ? r->n : 1), sizeof *sp);
  for (int i = 0; i < r->n; i++) {
    const eval_task *t = &r->tasks[i];
    if (family && strcmp(t->family, family) != 0) continue;
    n++;
    ok += t->gate == EVAL_PASSED;
    double x = speedup_of(t), g = eval_task_vs_prior(t);
    f2 += x >= 2;
    f10 += x >= 10;
    if (x > 0) sp[ns++] = x;
    g1 += g >= EVAL_REFINE_GAIN;
    g2 += g >= 2;
  }
  dg_str_printf(s, "| %s | %d | %.1f%% |", name, n, n ? 100.0 * ok / n : 0.0);
  if (r->timed && r->refine)
    dg_str_printf(s, " %.1f%% | %.1f%% |", n ? 100.0 * g1 / n : 0.0, n ? 100.0 * g2 / n : 0.0);
  if (r->timed) {
    double med = eval_median_ratio(sp, ns);
    dg_str_printf(s, " %.1f%% | %.1f%% | %s%.2fx |", n ? 100.0 * f2 / n : 0.0,
                  n ? 100.0 * f10 / n : 0.0, ns ? "" : "-", med);
  }
  if (labels) {
    vs_label v = vs_label_of(r, family);
    if (v.passed) dg_str_printf(s, " %.2fx (%d) |", v.median, v.labelled);
    else dg_str_printf(s, " - (%d) |", v.labelled);
  }
  dg_str_puts(s, "\n");
  free(sp);
}

char *eval_result_table(const eval_result *r, const char *model, const char *split) {
  dg_str s;
  dg_str_init(&s);
  dg_str_printf(&s, "# %s on %s: %d %stasks, Correct@1 %d (%.1f%%)%s\n\n", model, split, r->n,
                r->refine ? "refinement " : "", r->correct, r->n ? 100.0 * r->correct / r->n : 0.0,
                r->timed ? "" : "; not timed (checked in the C emulation)");
  if (r->refine && r->timed)
    dg_str_printf(&s, "Against the prior (timed beside the output in the same run): %d (%.1f%%) correct and at "
                  "least %.2fx faster than their prior, %d (%.1f%%) at least 2x.\n\n", r->faster,
                  r->n ? 100.0 * r->faster / r->n : 0.0, EVAL_REFINE_GAIN, r->faster_2,
                  r->n ? 100.0 * r->faster_2 / r->n : 0.0);
  if (r->against_n > 0) {
    dg_str_printf(&s, "Against the other writer's outputs (judged beside these in the same run): of the %d tasks "
                  "where either is correct (of %d with both outputs), this one is correct and the other not on "
                  "%d", r->against_either, r->against_n, r->against_only);
    if (r->timed)
      dg_str_printf(&s, ", both correct and this one faster on %d: better on %d (%.1f%%)", r->against_faster,
                    r->against_only + r->against_faster,
                    r->against_either ? 100.0 * (r->against_only + r->against_faster) / r->against_either : 0.0);
    else
      dg_str_puts(&s, " (which is faster where both are is read on a GPU)");
    dg_str_puts(&s, ".\n\n");
  }
  vs_label all = vs_label_of(r, NULL);
  bool labels = r->timed && all.labelled > 0;
  if (labels)
    dg_str_printf(&s, "Against the search's best label (timed beside the output in the same run) on "
                  "%d labelled tasks: median %.2fx over the %d correct; %d (%.1f%%) correct and at least "
                  "0.9x the search's speed.\n\n", all.labelled, all.median, all.passed, all.near,
                  100.0 * all.near / all.labelled);
  bool prior_cols = r->timed && r->refine;
  dg_str_puts(&s, "| family | tasks | Correct@1 |");
  if (prior_cols) dg_str_puts(&s, " faster than the prior | 2x the prior |");
  if (r->timed) dg_str_puts(&s, " fast_2 | fast_10 | median speedup |");
  dg_str_puts(&s, labels ? " vs search (labelled) |\n" : "\n");
  dg_str_puts(&s, "|---|---:|---:|");
  if (prior_cols) dg_str_puts(&s, "---:|---:|");
  if (r->timed) dg_str_puts(&s, "---:|---:|---:|");
  dg_str_puts(&s, labels ? "---:|\n" : "\n");
  /* the families in order of first appearance */
  for (int i = 0; i < r->n; i++) {
    bool seen = false;
    for (int j = 0; j < i && !seen; j++) seen = strcmp(r->tasks[j].family, r->tasks[i].family) == 0;
    if (!seen) table_row(&s, r->tasks[i].family, r, r->tasks[i].family, labels);
  }
  table_row(&s, "**all**", r, NULL, labels);
  /* where the outputs stopped */
  int at[EVAL_GATE_COUNT] = {0};
  for (int i = 0; i < r->n; i++)
    if (r->tasks[i].gate != EVAL_PASSED) at[r->tasks[i].gate]++;
  dg_str_puts(&s, "\nFailed at:");
  int any = 0;
  for (int g = 0; g < EVAL_GATE_COUNT; g++)
    if (at[g]) dg_str_printf(&s, "%s %s %d", any++ ? "," : "", eval_gate_name(g), at[g]);
  dg_str_puts(&s, any ? "\n" : " none\n");
  return dg_str_take(&s);
}
