/* measure_cuda.c: measuring candidates on the GPU for the tuner.
 *
 * Per workload, once: the inputs are drawn from the seed, the unscheduled
 * kernel's float64 reference is computed on the CPU (compiled C), and both
 * are written to a data file that the GPU workers map (and keep on the
 * device across candidates). The files of the last 64 workloads are kept,
 * and search_cuda_measure_prepare makes those of a batch of workloads at
 * once on threads (a batch of many workloads would otherwise wait for
 * each reference in turn); search_measure_cuda_many makes them on threads
 * while the candidates build, holding a candidate built before its data.
 * Per round, a pipeline: threads build each
 * candidate (rt_program_build: lowered, checked against the limits and
 * CUDA emitted, for every candidate first; then compiled by NVRTC for the
 * device's architecture, the largest sources first, cand_lower and
 * cand_compile) and encode its job; the calling thread hands each job to the worker pool as soon as
 * it is ready and collects results as they come, matched by job id, so the
 * GPU works while the rest still compiles. One long-lived worker process
 * runs the jobs one at a time (crash-isolated: a fault or a hang costs that
 * candidate, the worker is replaced): checked against the reference on
 * their first run, then timed with the L2 flushed before each repeat. A candidate that does not lower, compile, run or
 * match costs a failure reason, never the run; so does one whose NVRTC
 * compilation passes compile_limit_s (stopped through NVRTC's flow
 * callback), which would otherwise hold up the whole round.
 *
 * The threads share nothing but the read-only round description: each
 * candidate's kernel is read by its own thread only (lower_program works
 * on a private copy), and lowering, emission and NVRTC keep no global
 * state of their own.
 */
#include <stdint.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "dragon/rt_cuda.h"
#include "dragon/search.h"

/* A workload's data file: its inputs and float64 reference. */
typedef struct {
  uint64_t hash; /* ir_func_hash of the workload */
  char path[64];
  uint64_t used; /* the state's clock when last asked for */
} data_file;

enum { DATA_FILES = 64 }; /* kept at once; the least recently used goes */
/* Workloads whose data files one round of search_measure_cuda_many uses at
 * most, and one prepare_start makes: well within those kept, so none is
 * dropped while its candidates wait in the round, nor when a batch
 * prepared while the round measures is kept after it. */
enum { MANY_WORKLOADS = DATA_FILES / 2 };

struct search_cuda_measure_state {
  struct rt_worker_pool *pool;
  data_file files[DATA_FILES];
  int n_files;
  uint64_t clock;
  uint64_t next_id; /* job ids are never reused, so a stale result is known */
};

/* Draws workload f's inputs from the seed, computes the unscheduled
 * kernel's float64 reference and its own result (the baseline of the
 * check) on the CPU (compiled C) and writes them to
 * the file path (whole or not at all). Thread-safe. */
static bool data_fill(const search_cuda_measure *m, const dg_func *f, const char *path, double secs[2],
                      dg_status *st) {
  rt_tensors ts;
  if (!rt_tensors_init(&ts, f, st)) return false;
  rt_data_fill(&ts, m->seed, rt_data_dist_for(f));
  rt_data_poison(&ts);
  bool ok = rt_reference_run(f, &ts, secs, st) &&
            rt_cuda_data_write(&ts, rt_check_reduce_len(f), path, st);
  rt_tensors_free(&ts);
  return ok;
}

/* A new, empty data file's name into path. */
static bool data_reserve(char path[64], dg_status *st) {
  snprintf(path, 64, "/tmp/dragon-tune-%ld-XXXXXX", (long)getpid());
  int fd = mkstemp(path);
  if (fd < 0) {
    dg_fail(st, DG_ERR_IO, "%s: cannot create the data file", path);
    path[0] = 0;
    return false;
  }
  close(fd);
  return true;
}

/* data_fill into a new file, its name into path ("" on failure). */
static bool data_make(const search_cuda_measure *m, const dg_func *f, char path[64], dg_status *st) {
  if (!data_reserve(path, st)) return false;
  if (data_fill(m, f, path, NULL, st)) return true;
  unlink(path);
  path[0] = 0;
  return false;
}

static data_file *data_find(search_cuda_measure_state *s, uint64_t h) {
  for (int i = 0; i < s->n_files; i++)
    if (s->files[i].hash == h) {
      s->files[i].used = ++s->clock;
      return &s->files[i];
    }
  return NULL;
}

/* Keeps a made file, in place of the least recently used one when full. */
static data_file *data_keep(search_cuda_measure_state *s, uint64_t h, const char *path) {
  data_file *d = &s->files[0];
  if (s->n_files < DATA_FILES) {
    d = &s->files[s->n_files++];
  } else {
    for (int i = 1; i < DATA_FILES; i++)
      if (s->files[i].used < d->used) d = &s->files[i];
    unlink(d->path);
  }
  d->hash = h;
  snprintf(d->path, sizeof d->path, "%s", path);
  d->used = ++s->clock;
  return d;
}

/* Workload f's data file: kept from before, else made now. */
static const char *prepare(search_cuda_measure *m, const dg_func *f, dg_status *st) {
  search_cuda_measure_state *s = m->state;
  uint64_t h = ir_func_hash(f);
  data_file *d = data_find(s, h);
  if (d) return d->path;
  char path[64];
  double t0 = dg_now();
  bool made = data_make(m, f, path, st);
  m->stats.t_data += dg_now() - t0;
  if (!made) return NULL;
  return data_keep(s, h, path)->path;
}

static void set_error(char *dst, size_t n, const char *why) {
  if (!why || !*why) why = "failed";
  size_t len = strlen(why);
  if (len > n - 1) len = n - 1;
  memcpy(dst, why, len);
  dst[len] = 0;
}

/* The data files of nw workloads: those kept from before, and those made
 * on threads (each file's name reserved first, so that a job can be
 * encoded before its data exists: search_measure_cuda_many builds the
 * candidates meanwhile, and holds one compiled before its data until the
 * data is made). */
typedef struct {
  const search_cuda_measure *m;
  const dg_func *const *f; /* (nw) the workloads */
  char (*path)[64];     /* (nw) each one's data file */
  int8_t *state;        /* (nw) 1 made, 0 being made, -1 failed (err) */
  char (*err)[256];     /* (nw) written by the workload's thread */
  bool *ok;             /* (nw) written by the workload's thread */
  double (*secs)[2];    /* (nw) its reference's compile and run seconds */
  int *task_w;          /* data task t makes workload task_w[t] */
  int n_tasks;
  rt_tasks *tasks;      /* NULL: no file is being made */
  const int *wl_of;     /* a round's candidate i has workload wl_of[i] */
  double t0, t_ready;   /* the start, the last file made (in a round) */
} round_data;

/* On a thread: workload task_w[t]'s data. The thread (and the OpenMP
 * threads its reference starts, which inherit it) yields the cores to the
 * GPU worker timing other workloads meanwhile, as the compiler processes
 * do (nvrtc_pool.c): a worker preempted between its timing events would
 * time the wait. */
static void data_task(void *p, int t) {
  round_data *d = p;
  int w = d->task_w[t];
  /* this thread only, best effort; not the process's main thread, which
   * runs a task where no thread could be started and starts the workers */
  long tid = syscall(SYS_gettid);
  if (tid != (long)getpid()) (void)setpriority(PRIO_PROCESS, (id_t)tid, 10);
  dg_status st;
  d->ok[w] = data_fill(d->m, d->f[w], d->path[w], d->secs[w], &st);
  if (!d->ok[w]) set_error(d->err[w], sizeof d->err[w], st.msg);
}

/* Starts making the data files of workloads f[0..nw) (hashes hs) that
 * are not kept yet. */
static void data_start(search_cuda_measure *m, const dg_func *const *f, const uint64_t *hs, int nw,
                       round_data *d) {
  *d = (round_data){m, f, dg_calloc((size_t)nw, sizeof *d->path), dg_calloc((size_t)nw, 1),
                    dg_calloc((size_t)nw, sizeof *d->err), dg_calloc((size_t)nw, sizeof(bool)),
                    dg_calloc((size_t)nw, sizeof *d->secs), dg_calloc((size_t)nw, sizeof(int)), 0, NULL, NULL,
                    dg_now(), 0};
  for (int w = 0; w < nw; w++) {
    data_file *df = data_find(m->state, hs[w]);
    dg_status st;
    if (df) {
      snprintf(d->path[w], sizeof d->path[w], "%s", df->path);
      d->state[w] = 1;
    } else if (data_reserve(d->path[w], &st)) {
      d->task_w[d->n_tasks++] = w;
    } else {
      set_error(d->err[w], sizeof d->err[w], st.msg);
      d->state[w] = -1;
    }
  }
  int threads = m->threads > 0 ? m->threads : rt_cpu_count();
  if (d->n_tasks > 0)
    d->tasks = rt_tasks_start(d->n_tasks, threads < d->n_tasks ? threads : d->n_tasks, data_task, d);
}

/* Waits for the files still being made, keeps those made for later calls
 * (a failed one goes: it is made again, and reported, when its workload is
 * measured; one kept meanwhile by a measurement goes too) and frees d. */
static void data_finish(search_cuda_measure *m, const uint64_t *hs, round_data *d) {
  if (d->tasks) rt_tasks_free(d->tasks);
  if (d->n_tasks > 0) m->stats.t_data += (d->t_ready > d->t0 ? d->t_ready : dg_now()) - d->t0;
  for (int t = 0; t < d->n_tasks; t++) {
    int w = d->task_w[t];
    m->stats.t_data_build += d->secs[w][0];
    m->stats.t_data_run += d->secs[w][1];
    if (d->ok[w] && !data_find(m->state, hs[w])) data_keep(m->state, hs[w], d->path[w]);
    else unlink(d->path[w]);
  }
  free(d->path);
  free(d->state);
  free(d->err);
  free(d->ok);
  free(d->secs);
  free(d->task_w);
}

struct search_cuda_data {
  dg_func **wl; /* (nw) the workloads, each once, copies */
  uint64_t *hs;
  int nw;
  round_data d;
};

search_cuda_data *search_cuda_measure_prepare_start(search_cuda_measure *m, const dg_func *const *f, int n) {
  if (!m->state || n <= 0) return NULL;
  /* the workloads, each once, no more than a round measures at once */
  search_cuda_data *x = dg_calloc(1, sizeof *x);
  x->wl = dg_malloc(sizeof *x->wl * (size_t)n);
  x->hs = dg_malloc(sizeof *x->hs * (size_t)n);
  for (int i = 0; i < n && x->nw < MANY_WORKLOADS; i++) {
    uint64_t h = ir_func_hash(f[i]);
    bool seen = false;
    for (int j = 0; j < x->nw && !seen; j++) seen = x->hs[j] == h;
    if (!seen) x->wl[x->nw] = ir_func_clone(f[i]), x->hs[x->nw++] = h;
  }
  data_start(m, (const dg_func *const *)x->wl, x->hs, x->nw, &x->d);
  return x;
}

void search_cuda_measure_prepare_finish(search_cuda_measure *m, search_cuda_data *x) {
  if (!x) return;
  data_finish(m, x->hs, &x->d);
  for (int w = 0; w < x->nw; w++) ir_func_free(x->wl[w]);
  free(x->wl);
  free(x->hs);
  free(x);
}

void search_cuda_measure_prepare(search_cuda_measure *m, const dg_func *const *f, int n) {
  search_cuda_measure_prepare_finish(m, search_cuda_measure_prepare_start(m, f, n));
}

/* One worker, one job at a time. No warm spare: where the GPU is in an
 * exclusive compute mode a second process could not hold a context. A
 * fault costs the replacement's start (CUDA and the data set again). */
static bool pool_start(search_cuda_measure *m, dg_status *st) {
  return rt_cuda_pool_new(1, 1, m->timeout_s, &m->state->pool, st);
}

bool search_cuda_measure_init(search_cuda_measure *m, dg_status *st) {
  m->state = NULL;
  memset(&m->stats, 0, sizeof m->stats);
  m->arch[0] = 0;
  snprintf(m->device, sizeof m->device, "no GPU");
  if (!rt_nvrtc_available(st)) return false;
  if (!rt_cuda_available(st) && !m->allow_no_gpu) return false;
  /* the architecture compiled for and the name every record carries come
   * from the device itself (the build's default where there is none) */
  rt_build_arch(m->arch, sizeof m->arch);
  rt_cuda_device d;
  dg_status dst;
  if (rt_cuda_device_info(&d, &dst))
    snprintf(m->device, sizeof m->device, "%s %s driver %d", d.name, m->arch, d.driver_version);
  m->state = dg_calloc(1, sizeof *m->state);
  m->state->next_id = 1;
  if (!pool_start(m, st)) {
    free(m->state);
    m->state = NULL;
    return false;
  }
  return true;
}

void search_cuda_measure_free(search_cuda_measure *m) {
  if (!m->state) return;
  if (m->state->pool) rt_worker_pool_free(m->state->pool);
  for (int i = 0; i < m->state->n_files; i++) unlink(m->state->files[i].path);
  free(m->state);
  m->state = NULL;
}

void search_cuda_measure_add_stats(search_cuda_measure *into, const search_cuda_measure *from) {
#define ADD(f) into->stats.f += from->stats.f
  ADD(candidates), ADD(lowered), ADD(compiled), ADD(ran), ADD(passed), ADD(cached), ADD(memory_full);
  ADD(t_lower), ADD(t_compile), ADD(t_gpu_wait), ADD(t_compile_wait), ADD(t_worker), ADD(t_held);
  ADD(t_wall), ADD(t_data), ADD(t_data_build), ADD(t_data_run);
#undef ADD
  _Static_assert(sizeof into->stats == 17 * 8, "a stat added here too");
}

static void fail(search_measure_result *r, const char *why) {
  r->n_secs = 0;
  size_t n = strlen(why);
  if (n > sizeof r->error - 1) n = sizeof r->error - 1;
  memcpy(r->error, why, n);
  r->error[n] = 0;
}

/* ---- the round ------------------------------------------------------------ */

/* What a thread makes of one candidate. */
typedef struct {
  rt_build b;        /* lowered and emitted (cand_lower), then compiled */
  bool emitted;      /* b.source is there, to compile */
  dg_str msg;        /* the encoded job; empty: it failed before the GPU */
  char error[256];   /* why, then */
  bool skipped;      /* not built: the deadline had passed */
  bool lowered, compiled;
  double t_lower, t_compile;
} cand_job;

typedef struct {
  const search_cand *cand;   /* all the call's candidates */
  const char *const *paths;  /* each candidate's data file */
  const int *idx;            /* the round's candidate i is cand[idx[i]] */
  uint64_t seed;
  rt_cuda_timing timing;
  cand_job *jobs; /* (n) jobs[i] written by candidate i's thread only */
  double compile_limit_s;
  const char *arch; /* search_cuda_measure.arch */
  double deadline;  /* search_cuda_measure.deadline */
  const int *order; /* the compiles' order: the k-th compiled is candidate order[k] */
} round_ctx;

/* A round's builds in two passes on the threads: every candidate lowered,
 * checked and emitted (milliseconds), then compiled largest source first.
 * A round ends with its slowest compile, and the size of a source is what
 * its compile time follows (bench/RESULTS.md: the 4% of sources past 300
 * KB hold most of NVRTC's time), so the long ones begin at once, beside
 * the rest, instead of wherever they fall in the round. */
static rt_build_opts build_opts(const round_ctx *r) {
  return (rt_build_opts){.target = RT_BUILD_CUDA,
                         .arch = r->arch,
                         .compile_limit_s = r->compile_limit_s,
                         .compile = true,
                         .name = "cand"};
}

static void cand_lower(void *p, int i) {
  round_ctx *r = p;
  cand_job *j = &r->jobs[i];
  if (r->deadline > 0 && dg_now() >= r->deadline) {
    j->skipped = true;
    return;
  }
  dg_status st;
  rt_build_opts bo = build_opts(r);
  bo.compile = false;
  bool ok = rt_program_build(r->cand[r->idx[i]].func, &bo, &j->b, &st);
  j->t_lower = j->b.t_lower + j->b.t_codegen;
  j->lowered = j->b.source != NULL;
  j->emitted = ok;
  if (!ok) {
    set_error(j->error, sizeof j->error, st.msg);
    rt_build_free(&j->b);
  }
}

/* On a thread: compile (NVRTC) and encode the k-th candidate in order. */
static void cand_compile(void *p, int k) {
  round_ctx *r = p;
  int i = r->order[k];
  cand_job *j = &r->jobs[i];
  if (!j->emitted) return; /* skipped, or failed with its reason */
  rt_build *b = &j->b;
  j->emitted = false;
  if (r->deadline > 0 && dg_now() >= r->deadline) {
    j->skipped = true;
    rt_build_free(b);
    return;
  }
  dg_status st;
  rt_build_opts bo = build_opts(r);
  bool ok = rt_build_compile(b, &bo, &st);
  j->t_compile = b->t_compile;
  j->compiled = ok;
  if (!ok) {
    set_error(j->error, sizeof j->error, st.msg);
  } else {
    dg_arena *a = dg_arena_new();
    rt_cuda_program prog;
    /* the program's names live in b.prog: encode before it is freed */
    if (!rt_cuda_program_from_lowered(b->prog, a, &prog, &st)) {
      set_error(j->error, sizeof j->error, st.msg);
    } else {
      rt_cuda_job job = {&b->bin, &prog, r->paths[r->idx[i]], r->seed, r->timing};
      rt_cuda_job_encode(&job, &j->msg);
    }
    dg_arena_free(a);
  }
  rt_build_free(b);
}

/* The compiles' order: largest source first (those that failed before
 * the compile first of all, as the largest: they are resolved at once). */
typedef struct {
  size_t len;
  int i;
} source_len;

static int cmp_source_len(const void *a, const void *b) {
  const source_len *x = a, *y = b;
  if (x->len != y->len) return x->len < y->len ? 1 : -1;
  return (x->i > y->i) - (x->i < y->i);
}

static void compile_order(const cand_job *jobs, int n, int *order) {
  source_len *s = dg_malloc(sizeof *s * (size_t)(n ? n : 1));
  for (int i = 0; i < n; i++) s[i] = (source_len){jobs[i].emitted ? strlen(jobs[i].b.source) : SIZE_MAX, i};
  qsort(s, (size_t)n, sizeof *s, cmp_source_len);
  for (int m = 0; m < n; m++) order[m] = s[m].i;
  free(s);
}

/* The calling thread's side of one round. */
typedef struct {
  search_cuda_measure *m;
  round_ctx *r;
  int n, reps;
  uint64_t base;         /* candidate i is job base + i */
  bool *submitted, *done;
  bool *held;            /* compiled, waiting for its workload's data */
  round_data *data;      /* NULL: every candidate's data file is made */
  search_measure_result *out;
  const search_measure_sink *sink; /* results as they become final, or NULL */
  char pool_err[256];    /* the workers could not be started: why */
} round_run;

/* The round's candidate i's result (the call's out[idx[i]]). */
static search_measure_result *result_of(round_run *rr, int i) {
  return &rr->out[rr->r->idx[i]];
}

/* Candidate i's result is final. */
static int resolve(round_run *rr, int i) {
  rr->done[i] = true;
  if (rr->sink) rr->sink->fn(rr->sink->ctx, rr->r->idx[i], result_of(rr, i));
  return 1;
}

/* Candidate i is compiled (or failed): fail it, or queue its job. Returns
 * how many candidates this resolved (0 or 1). */
static int hand_over(round_run *rr, int i) {
  search_cuda_measure_state *s = rr->m->state;
  cand_job *j = &rr->r->jobs[i];
  if (j->skipped) {
    search_measure_result *o = result_of(rr, i);
    o->not_measured = true;
    set_error(o->error, sizeof o->error, "not measured: the deadline came first");
    return resolve(rr, i);
  }
  if (j->msg.len == 0 || !s->pool) {
    fail(result_of(rr, i), j->msg.len == 0 ? j->error : rr->pool_err);
    return resolve(rr, i);
  }
  round_data *d = rr->data;
  if (d) {
    int w = d->wl_of[i];
    if (d->state[w] == 0) {
      rr->held[i] = true;
      return 0;
    }
    if (d->state[w] < 0) {
      fail(result_of(rr, i), d->err[w]);
      return resolve(rr, i);
    }
  }
  /* the checked run, the warm-up, the repeats, and room for loading */
  double timeout = rr->m->timeout_s * (rr->reps + 4);
  rt_worker_pool_submit(s->pool, rr->base + (uint64_t)i, j->msg.s, j->msg.len, timeout);
  dg_str_free(&j->msg);
  dg_str_init(&j->msg);
  rr->submitted[i] = true;
  return 0;
}

/* Data task t is done: its workload's held candidates go on. Returns how
 * many candidates this resolved. */
static int data_done(round_run *rr, int t) {
  round_data *d = rr->data;
  int w = d->task_w[t];
  d->state[w] = d->ok[w] ? 1 : -1;
  d->t_ready = dg_now();
  int k = 0;
  for (int i = 0; i < rr->n; i++)
    if (rr->held[i] && d->wl_of[i] == w) {
      rr->held[i] = false;
      k += hand_over(rr, i);
    }
  return k;
}

/* A worker's result. Returns how many candidates it resolved (0 or 1). */
static int take_result(round_run *rr, const rt_worker_result *wr) {
  if (wr->id < rr->base || wr->id - rr->base >= (uint64_t)rr->n) return 0; /* stale */
  int i = (int)(wr->id - rr->base);
  if (rr->done[i]) return 0;
  rt_cuda_result res;
  rt_cuda_result_from_worker(wr, &res);
  search_cuda_measure *m = rr->m;
  m->stats.ran++;
  m->stats.t_worker += res.worker_s;
  m->stats.t_held += res.held_s;
  if (res.fail != RT_FAIL_NONE) {
    char why[256];
    snprintf(why, sizeof why, "%s: %.200s", rt_fail_name(res.fail), res.reason);
    fail(result_of(rr, i), why);
    if (search_error_memory_full(why)) {
      m->stats.memory_full++;
      result_of(rr, i)->not_measured = true;
      result_of(rr, i)->memory_full = true;
    }
  } else {
    /* the repeats' spread is summarised; the median stands for each */
    m->stats.passed++;
    search_measure_result *o = result_of(rr, i);
    o->n_secs = rr->reps;
    for (int r = 0; r < rr->reps; r++) o->secs[r] = res.t.median;
  }
  return resolve(rr, i);
}

/* The workers could not be started: every queued candidate fails with the
 * reason, and the pool is started afresh on the next round. Returns how
 * many candidates this resolved. */
static int pool_lost(round_run *rr, const char *why) {
  search_cuda_measure_state *s = rr->m->state;
  snprintf(rr->pool_err, sizeof rr->pool_err, "GPU workers: %.240s", why);
  int k = 0;
  for (int i = 0; i < rr->n; i++)
    if (rr->submitted[i] && !rr->done[i]) {
      fail(result_of(rr, i), rr->pool_err);
      k += resolve(rr, i);
    }
  rt_worker_pool_free(s->pool);
  s->pool = NULL;
  return k;
}

/* One round: the candidates cand[idx[0..n)] (each with its workload's
 * data file in paths[]) built on threads and measured as they are ready. */
static void run_round(search_cuda_measure *m, const search_cand *cand, const char *const *paths,
                      const int *idx, int n, round_data *data, search_measure_result *out,
                      const search_measure_sink *sink) {
  search_cuda_measure_state *s = m->state;
  dg_status st;
  dg_status_ok(&st);
  int reps = m->repeats < 1 ? 1 : m->repeats > 8 ? 8 : m->repeats;
  char arch[16]; /* the device's, as a build that compiles asks for it */
  if (m->arch[0]) snprintf(arch, sizeof arch, "%s", m->arch);
  else rt_build_arch(arch, sizeof arch);
  int *order = dg_malloc(sizeof(int) * (size_t)(n ? n : 1));
  round_ctx r = {cand, paths, idx, m->seed, {1, reps, true, m->timeout_s}, NULL, m->compile_limit_s, arch,
                 m->deadline, order};
  r.jobs = dg_calloc((size_t)n, sizeof *r.jobs);
  for (int i = 0; i < n; i++) dg_str_init(&r.jobs[i].msg);
  round_run rr = {m,
                  &r,
                  n,
                  reps,
                  s->next_id,
                  dg_calloc((size_t)n, sizeof(bool)),
                  dg_calloc((size_t)n, sizeof(bool)),
                  dg_calloc((size_t)n, sizeof(bool)),
                  data,
                  out,
                  sink,
                  ""};
  s->next_id += (uint64_t)n;
  if (!s->pool && !pool_start(m, &st))
    snprintf(rr.pool_err, sizeof rr.pool_err, "GPU workers: %.240s", st.msg);

  /* one core is left to the worker and this thread */
  int threads = m->threads > 0 ? m->threads : rt_cpu_count() - 1;
  if (threads < 1) threads = 1;
  /* NVRTC serialises the compilations of one process: each compiling
   * thread gets a compiler process of its own */
  rt_nvrtc_set_processes(threads);
  int64_t hits0 = 0, hits1 = 0;
  rt_nvrtc_cache_stats(&hits0, NULL);
  /* every candidate lowered and emitted, then compiled largest first */
  double t_low = dg_now();
  rt_tasks *lowering = rt_tasks_start(n, threads, cand_lower, &r);
  while (rt_tasks_next(lowering, true) >= 0) {
  }
  rt_tasks_free(lowering);
  m->stats.t_compile_wait += dg_now() - t_low;
  compile_order(r.jobs, n, order);
  rt_tasks *tasks = rt_tasks_start(n, threads, cand_compile, &r);
  int resolved = 0;
  rt_tasks *dtasks = data ? data->tasks : NULL;
  while (resolved < n) {
    int i;
    while (dtasks && (i = rt_tasks_next(dtasks, false)) >= 0) resolved += data_done(&rr, i);
    while ((i = rt_tasks_next(tasks, false)) >= 0) resolved += hand_over(&rr, order[i]);
    if (resolved >= n) break;
    if (s->pool && rt_worker_pool_pending(s->pool) > 0) {
      rt_worker_result wr;
      double t0 = dg_now();
      bool got = rt_worker_pool_next(s->pool, &wr, &st);
      m->stats.t_gpu_wait += dg_now() - t0;
      if (got) {
        resolved += take_result(&rr, &wr);
        rt_worker_result_free(&wr);
      } else {
        resolved += pool_lost(&rr, st.code != DG_OK ? st.msg : "the jobs were lost");
      }
    } else {
      double t0 = dg_now();
      i = rt_tasks_next(tasks, true);
      m->stats.t_compile_wait += dg_now() - t0;
      if (i >= 0) {
        resolved += hand_over(&rr, order[i]);
        continue;
      }
      /* every build was handed back: what is left waits for its data */
      t0 = dg_now();
      i = dtasks ? rt_tasks_next(dtasks, true) : -1;
      m->stats.t_compile_wait += dg_now() - t0;
      if (i < 0) break; /* nothing more will come */
      resolved += data_done(&rr, i);
    }
  }
  rt_tasks_free(tasks);
  rt_nvrtc_cache_stats(&hits1, NULL);
  m->stats.cached += hits1 - hits0;
  for (int i = 0; i < n; i++) {
    if (!rr.done[i]) {
      fail(result_of(&rr, i), "GPU measurement: the job was lost");
      resolve(&rr, i);
    }
    m->stats.lowered += r.jobs[i].lowered;
    m->stats.compiled += r.jobs[i].compiled;
    m->stats.t_lower += r.jobs[i].t_lower;
    m->stats.t_compile += r.jobs[i].t_compile;
    dg_str_free(&r.jobs[i].msg);
  }
  free(r.jobs);
  free(order);
  free(rr.submitted);
  free(rr.done);
  free(rr.held);
}

void search_measure_cuda(void *ctx, const dg_func *f, const search_cand *cand, int n,
                         search_measure_result *out, const search_measure_sink *sink) {
  search_cuda_measure *m = ctx;
  double t_start = dg_now();
  dg_status st;
  dg_status_ok(&st);
  for (int i = 0; i < n; i++) memset(&out[i], 0, sizeof out[i]);
  if (n <= 0) return;
  m->stats.candidates += n;
  const char *data_path = m->state ? prepare(m, f, &st) : NULL;
  if (!data_path) {
    for (int i = 0; i < n; i++) {
      fail(&out[i], m->state ? st.msg : "GPU measurement not set up");
      if (sink) sink->fn(sink->ctx, i, &out[i]);
    }
    m->stats.t_wall += dg_now() - t_start;
    return;
  }
  const char **paths = dg_malloc(sizeof *paths * (size_t)n);
  int *idx = dg_malloc(sizeof(int) * (size_t)n);
  for (int i = 0; i < n; i++) paths[i] = data_path, idx[i] = i;
  run_round(m, cand, paths, idx, n, NULL, out, sink);
  free(paths);
  free(idx);
  m->stats.t_wall += dg_now() - t_start;
}

void search_measure_cuda_many(void *ctx, const dg_func *const *f, const search_cand *cand, int n,
                              search_measure_result *out, const search_measure_sink *sink) {
  search_cuda_measure *m = ctx;
  double t_start = dg_now();
  for (int i = 0; i < n; i++) memset(&out[i], 0, sizeof out[i]);
  if (n <= 0) return;
  m->stats.candidates += n;
  const char **paths = dg_calloc((size_t)n, sizeof *paths);
  int *idx = dg_malloc(sizeof(int) * (size_t)n);
  const dg_func **wl = dg_malloc(sizeof *wl * (size_t)n);
  uint64_t *hash = dg_malloc(sizeof *hash * (size_t)n), hs[MANY_WORKLOADS];
  for (int i = 0; i < n; i++) hash[i] = ir_func_hash(f[i]);
  bool *taken = dg_calloc((size_t)n, sizeof(bool));
  int *wl_of = dg_malloc(sizeof(int) * (size_t)n);
  for (int lo = 0; lo < n;) {
    /* the next candidates not taken, of at most MANY_WORKLOADS workloads */
    int k = 0, nw = 0;
    for (int i = lo; i < n; i++) {
      if (taken[i]) continue;
      int w = 0;
      while (w < nw && hs[w] != hash[i]) w++;
      if (w == nw) {
        if (nw == MANY_WORKLOADS) continue;
        hs[nw] = hash[i];
        wl[nw++] = f[i];
      }
      taken[i] = true;
      idx[k++] = i;
    }
    while (lo < n && taken[lo]) lo++;
    if (!m->state) {
      for (int j = 0; j < k; j++) {
        fail(&out[idx[j]], "GPU measurement not set up");
        if (sink) sink->fn(sink->ctx, idx[j], &out[idx[j]]);
      }
      continue;
    }
    /* the workloads' files: kept ones as they are, the others made on
     * threads while the candidates build */
    round_data d;
    data_start(m, wl, hs, nw, &d);
    d.wl_of = wl_of;
    for (int j = 0; j < k; j++) {
      int i = idx[j], w = 0;
      while (hs[w] != hash[i]) w++;
      wl_of[j] = w;
      paths[i] = d.path[w];
    }
    run_round(m, cand, paths, idx, k, &d, out, sink);
    data_finish(m, hs, &d);
  }
  free(paths);
  free(idx);
  free(wl);
  free(hash);
  free(taken);
  free(wl_of);
  m->stats.t_wall += dg_now() - t_start;
}
