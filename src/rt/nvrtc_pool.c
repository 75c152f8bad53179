/* nvrtc_pool.c: compilations in NVRTC worker processes.
 *
 * NVRTC serialises the compilations of one process: on the H200 machine
 * (CUDA 13.0, 16 cores) 8 sampled conv1d candidates took 0.70 s one after
 * another and 0.61 s on 15 threads (bench/nvrtc_scaling.sh), and a
 * labelling window spent 236 of its 335 s waiting for compiles while the
 * GPU worker was busy 17 s. Processes do not share that lock, so where
 * rt_nvrtc_set_processes (or DRAGON_NVRTC_PROCS) allows it,
 * rt_nvrtc_compile_within sends each compilation to an exec'd worker
 * ("nvrtc", worker.c) and blocks its thread until the reply: callers keep
 * their threads (the tuner's compile pipeline is unchanged) and each thread
 * that compiles holds one worker process while it does.
 *
 * Workers are started on demand, up to the number allowed, and kept for
 * the life of the process: an exec'd worker pays NVRTC's start-up (the
 * library and its built-in headers) once, not per compilation. They are
 * started by one thread of their own that never exits: a worker dies with
 * the thread that forked it (PR_SET_PDEATHSIG), and started from a
 * compiling thread it was killed when that thread's round ended (128
 * candidates of the labelling windows of 2026-12-02 were lost so, "the
 * compiler process died: killed by SIGKILL"). A worker that crashes or
 * hangs costs its compilation alone ("the compiler process died: killed by
 * SIGSEGV") and is replaced by the spawner. Where no worker can start, the
 * compilation runs in this process as before.
 *
 * The result is the one rt_nvrtc_compile_here gives in this process: the
 * same options, the same CUBIN, the same log and messages.
 */
#include "rt/cuda_api.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>

enum { JOB_MAGIC = 0x314a564e /* "NVJ1" */, REPLY_MAGIC = 0x3152564e /* "NVR1" */ };

/* ---- the worker's side ------------------------------------------------------ */

/* A compiler process yields the cores to the process that times kernels:
 * where compilations outnumber the cores (several labelling processes on
 * one machine), a GPU worker preempted between its timing events and its
 * launch would time the wait. */
enum { WORKER_NICE = 10 };

void rt_nvrtc_worker_init(void) {
  dg_status st;
  (void)setpriority(PRIO_PROCESS, 0, WORKER_NICE); /* best effort */
  (void)rt_nvrtc_api_load(&st); /* the library is open before the first job */
}

bool rt_nvrtc_job_handle(void *ctx, const void *job, size_t len, dg_str *reply) {
  (void)ctx;
  dg_arena *a = dg_arena_new();
  rt_wire_reader r = {job, len, 0, false};
  int32_t magic = rt_wire_get_i32(&r);
  double limit_s = rt_wire_get_f64(&r);
  char *arch = rt_wire_get_text(&r, a);
  char *name = rt_wire_get_text(&r, a);
  char *src = rt_wire_get_text(&r, a);
  rt_cubin b;
  dg_status st;
  bool ok = false;
  if (r.bad || magic != JOB_MAGIC) {
    memset(&b, 0, sizeof b);
    dg_fail(&st, DG_ERR_RUNTIME, "nvrtc worker: a damaged job (%zu bytes)", len);
  } else {
    ok = rt_nvrtc_compile_here(src, name, arch, limit_s, &b, &st);
  }
  rt_wire_put_i32(reply, REPLY_MAGIC);
  rt_wire_put_i32(reply, ok);
  rt_wire_put_i32(reply, (int32_t)st.code);
  rt_wire_put_text(reply, st.msg);
  rt_wire_put_i32(reply, b.is_ptx);
  rt_wire_put_text(reply, b.arch);
  rt_wire_put_f64(reply, b.seconds);
  rt_wire_put_text(reply, b.log);
  rt_wire_put_bytes(reply, b.image, b.image ? b.size : 0);
  rt_cubin_free(&b);
  dg_arena_free(a);
  return true;
}

/* ---- the parent's side ------------------------------------------------------ */

static struct {
  pthread_mutex_t mu;
  pthread_cond_t cv;
  bool configured; /* DRAGON_NVRTC_PROCS read */
  bool env_set;    /* it was set: it wins over rt_nvrtc_set_processes */
  int allowed;     /* worker processes at most; 0: compile in this process */
  int live;        /* started (idle or busy) */
  rt_worker_pool **idle;
  int n_idle, cap_idle;
  char spawn_err[512]; /* why the last worker could not start ("" if none failed) */
  /* Workers are started by one thread that lives as long as the process:
   * a worker dies with the thread that forked it (PR_SET_PDEATHSIG), and
   * the threads that compile come and go with each round. */
  pthread_cond_t spawn_cv;
  int want_spawn; /* workers asked of the spawner */
  bool spawner_up;
} g = {PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER, false, false, 0, 0, NULL, 0, 0, "",
       PTHREAD_COND_INITIALIZER, 0, false};

static void configure_locked(void) {
  if (g.configured) return;
  g.configured = true;
  const char *e = getenv("DRAGON_NVRTC_PROCS");
  if (e && *e) {
    char *end;
    long v = strtol(e, &end, 10);
    if (*end == 0 && v >= 0 && v <= 1024) {
      g.allowed = (int)v;
      g.env_set = true;
    }
  }
}

void rt_nvrtc_set_processes(int n) {
  pthread_mutex_lock(&g.mu);
  configure_locked();
  if (!g.env_set) g.allowed = n < 0 ? 0 : n > 1024 ? 1024 : n;
  pthread_cond_broadcast(&g.cv);
  pthread_mutex_unlock(&g.mu);
}

int rt_nvrtc_processes(void) {
  pthread_mutex_lock(&g.mu);
  configure_locked();
  int n = g.allowed;
  pthread_mutex_unlock(&g.mu);
  return n;
}

void rt_nvrtc_processes_error(char *out, size_t n) {
  pthread_mutex_lock(&g.mu);
  snprintf(out, n, "%s", g.spawn_err);
  pthread_mutex_unlock(&g.mu);
}

static void push_idle_locked(rt_worker_pool *p) {
  if (g.n_idle == g.cap_idle) {
    g.cap_idle = g.cap_idle ? 2 * g.cap_idle : 16;
    g.idle = dg_realloc(g.idle, (size_t)g.cap_idle * sizeof *g.idle);
  }
  g.idle[g.n_idle++] = p;
}

/* The spawner: starts the workers asked for, one at a time, and never
 * exits. A worker that cannot start ends the tries: from then on the
 * compilations run in this process. */
static void *spawner(void *arg) {
  (void)arg;
  pthread_mutex_lock(&g.mu);
  for (;;) {
    while (g.want_spawn == 0) pthread_cond_wait(&g.spawn_cv, &g.mu);
    g.want_spawn--;
    pthread_mutex_unlock(&g.mu);
    /* a compilation's own limit is enforced in the worker (NVRTC's flow
     * callback); this deadline only catches a worker that hangs */
    rt_worker_opts o = {1, 1, 900, NULL, NULL, "nvrtc"};
    rt_worker_pool *p = NULL;
    dg_status st;
    bool ok = rt_worker_pool_new(&o, &p, &st);
    pthread_mutex_lock(&g.mu);
    if (ok) {
      push_idle_locked(p);
    } else {
      snprintf(g.spawn_err, sizeof g.spawn_err, "%s", st.msg);
      g.live--;
      g.allowed = g.live;
    }
    pthread_cond_broadcast(&g.cv);
  }
  return NULL;
}

/* An idle worker, a new one, or NULL: none allowed or none could start (then
 * the caller compiles in this process). */
static rt_worker_pool *acquire(void) {
  pthread_mutex_lock(&g.mu);
  configure_locked();
  for (;;) {
    if (g.n_idle > 0 && g.allowed > 0) {
      rt_worker_pool *p = g.idle[--g.n_idle];
      pthread_mutex_unlock(&g.mu);
      return p;
    }
    if (g.allowed <= 0) break;
    if (g.live < g.allowed) {
      if (!g.spawner_up) {
        pthread_t th;
        pthread_attr_t at;
        pthread_attr_init(&at);
        pthread_attr_setdetachstate(&at, PTHREAD_CREATE_DETACHED);
        g.spawner_up = pthread_create(&th, &at, spawner, NULL) == 0;
        pthread_attr_destroy(&at);
        if (!g.spawner_up) {
          snprintf(g.spawn_err, sizeof g.spawn_err, "nvrtc workers: no thread to start them");
          g.allowed = 0;
          break;
        }
      }
      g.live++;
      g.want_spawn++;
      pthread_cond_signal(&g.spawn_cv);
    }
    pthread_cond_wait(&g.cv, &g.mu);
  }
  pthread_mutex_unlock(&g.mu);
  return NULL;
}

/* Back to the idle ones; a worker that died is dropped instead (its
 * replacement, if worker.c started one, goes with it) and the spawner
 * starts a new one when one is needed. */
static void release(rt_worker_pool *p, bool healthy) {
  if (!healthy) rt_worker_pool_free(p);
  pthread_mutex_lock(&g.mu);
  if (healthy) push_idle_locked(p);
  else g.live--;
  pthread_cond_broadcast(&g.cv);
  pthread_mutex_unlock(&g.mu);
}

/* Fills out and st from a worker's reply; false if the reply is damaged. */
static bool decode_reply(const rt_worker_result *wr, const char *fname, rt_cubin *out,
                         dg_status *st, bool *compiled) {
  dg_arena *a = dg_arena_new();
  rt_wire_reader r = {wr->reply, wr->reply_len, 0, false};
  int32_t magic = rt_wire_get_i32(&r);
  int32_t ok = rt_wire_get_i32(&r);
  int32_t code = rt_wire_get_i32(&r);
  char *msg = rt_wire_get_text(&r, a);
  int32_t is_ptx = rt_wire_get_i32(&r);
  char *arch = rt_wire_get_text(&r, a);
  double seconds = rt_wire_get_f64(&r);
  char *log = rt_wire_get_text(&r, a);
  size_t n = 0;
  const void *image = rt_wire_get_bytes(&r, &n);
  bool good = !r.bad && magic == REPLY_MAGIC && r.at == r.n;
  if (good) {
    free(out->log);
    out->log = dg_strdup(log);
    out->is_ptx = is_ptx != 0;
    snprintf(out->arch, sizeof out->arch, "%s", arch);
    out->seconds = seconds;
    if (ok && n > 0) {
      out->image = dg_malloc(n + 1);
      memcpy(out->image, image, n);
      out->image[n] = 0;
      out->size = n;
    }
    *compiled = ok && n > 0;
    if (*compiled) {
      dg_status_ok(st);
    } else {
      st->code = code != DG_OK ? (dg_code)code : DG_ERR_RUNTIME;
      snprintf(st->msg, sizeof st->msg, "%s", msg[0] ? msg : "nvrtc: the worker gave no CUBIN");
    }
  } else {
    dg_fail(st, DG_ERR_RUNTIME, "nvrtc: %s: a damaged reply from the compiler process", fname);
  }
  dg_arena_free(a);
  return good;
}

bool rt_nvrtc_compile_pooled(const char *src, const char *name, const char *arch, double limit_s,
                             rt_cubin *out, dg_status *st, bool *done) {
  *done = false;
  rt_worker_pool *p = acquire();
  if (!p) return false;
  *done = true;
  memset(out, 0, sizeof *out);
  out->log = dg_strdup("");
  char fname[200];
  snprintf(fname, sizeof fname, "%s.cu", name && *name ? name : "kernel");
  dg_str job;
  dg_str_init(&job);
  rt_wire_put_i32(&job, JOB_MAGIC);
  rt_wire_put_f64(&job, limit_s);
  rt_wire_put_text(&job, arch ? arch : "");
  rt_wire_put_text(&job, name);
  rt_wire_put_text(&job, src);
  double t0 = dg_now();
  /* NVRTC's flow callback stops a compilation at its limit in most of its
   * phases but not all: the worker is killed 10 s past it (60 s let one
   * conv1d candidate hold a round of the test split 92 s on 2026-12-07) */
  rt_worker_pool_submit(p, 1, job.s, job.len, limit_s > 0 ? limit_s + 10 : 0);
  dg_str_free(&job);
  rt_worker_result wr;
  memset(&wr, 0, sizeof wr);
  bool compiled = false;
  dg_status pst;
  if (!rt_worker_pool_next(p, &wr, &pst)) {
    dg_fail(st, DG_ERR_RUNTIME, "nvrtc: %s: the compiler process did not run: %s", fname,
            pst.msg);
  } else if (wr.outcome != RT_WORKER_REPLIED) {
    dg_fail(st, DG_ERR_RUNTIME, "nvrtc: %s: the compiler process %s%s", fname,
            wr.outcome == RT_WORKER_TIMED_OUT ? "" : "died: ", wr.reason);
  } else {
    decode_reply(&wr, fname, out, st, &compiled);
  }
  if (!compiled && out->seconds == 0) out->seconds = dg_now() - t0;
  bool healthy = wr.outcome == RT_WORKER_REPLIED;
  rt_worker_result_free(&wr);
  release(p, healthy);
  return compiled;
}
