/* worker.c: crash-isolated worker processes.
 *
 * A pool forks K workers; each has one UNIX stream socket to the parent.
 * The parent sends a job (a length-prefixed message), the worker runs the
 * pool's handler on it and sends the reply back the same way. A worker that
 * dies (a signal, an exit, a closed socket) or passes its job's deadline
 * costs that job alone: the parent kills it, reaps it, records why, starts a
 * replacement and carries on. A handler may retire its worker after the
 * reply (a sticky CUDA error leaves a context that cannot be used again).
 *
 * Message: u32 magic, u32 flags (reply: 1 = the worker retires), u64
 * length, then the bytes. Sockets instead of pipes so that one descriptor
 * carries both directions and sends can say MSG_NOSIGNAL: a dead worker
 * gives EPIPE, never a SIGPIPE in the parent.
 *
 * Two kinds of worker. Forked: the handler and its context are inherited,
 * so they must exist before the pool starts (a replacement is forked later
 * and sees the state of that moment); fork from a process whose other
 * threads hold no locks the handler needs. Exec'd: the child execs
 * /proc/self/exe with DRAGON_WORKER=NAME:FD in its environment, and a
 * constructor here, before main, runs the handler registered under NAME on
 * socket FD; nothing of the parent survives, which is what CUDA needs (a
 * child forked after its parent used NVRTC cannot initialise the driver).
 * A named handler may have an init, run as the worker starts, before its
 * first job (CUDA comes up while the parent carries on). The parent may be
 * compiling on other threads when it forks, so the exec'd child's
 * environment is made before the fork and the child calls nothing but
 * async-signal-safe functions until execve. A worker stuck at start-up is
 * caught by the job deadline like any other hang. Workers exit with _exit
 * (never the parent's atexit handlers) and die with the parent
 * (PR_SET_PDEATHSIG, kept across exec).
 *
 * A job goes to the idle worker that has done the most jobs (its caches,
 * such as a GPU worker's data set on the device, are warm), the longest
 * running among equals, so that a spare started with the pool takes over
 * from a worker that died while the replacement starts. When a job ends
 * the next queued one is sent at once, before the caller sees the result.
 */
#include "rt/cuda_api.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

enum { MSG_JOB = 0x4a574744u /* "DGWJ" */, MSG_REPLY = 0x52574744u /* "DGWR" */ };
enum { REPLY_RETIRE = 1 };
#define HDR_BYTES 16
#define MAX_MSG ((uint64_t)1 << 32)

typedef struct {
  uint64_t id;
  char *job;
  size_t len;
  double timeout_s;
} queued_job;

typedef struct {
  pid_t pid; /* 0: no process */
  int fd;
  bool busy;
  queued_job job; /* the job it runs (bytes freed once sent) */
  double t0, deadline;
  dg_str in; /* reply bytes received so far */
  double started;    /* when the process was started */
  int64_t jobs_done; /* replies it sent */
} worker_slot;

struct rt_worker_pool {
  rt_worker_opts o;
  worker_slot *w;
  DG_VEC(queued_job) queue;
  size_t head; /* queue[head..] still to dispatch */
  int restarts;
};

/* ---- both sides ------------------------------------------------------------ */

static bool send_all(int fd, const void *p, size_t n) {
  const char *c = p;
  while (n > 0) {
    ssize_t w = send(fd, c, n, MSG_NOSIGNAL);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) return false;
    c += w;
    n -= (size_t)w;
  }
  return true;
}

static bool send_msg(int fd, uint32_t magic, uint32_t flags, const void *p, size_t n) {
  unsigned char h[HDR_BYTES];
  uint64_t len = n;
  memcpy(h, &magic, 4);
  memcpy(h + 4, &flags, 4);
  memcpy(h + 8, &len, 8);
  return send_all(fd, h, sizeof h) && send_all(fd, p, n);
}

/* ---- the worker ------------------------------------------------------------ */

static bool recv_all(int fd, void *p, size_t n) {
  char *c = p;
  while (n > 0) {
    ssize_t r = recv(fd, c, n, 0);
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) return false;
    c += r;
    n -= (size_t)r;
  }
  return true;
}

static void worker_main(const rt_worker_opts *o, int fd) __attribute__((noreturn));
static void worker_main(const rt_worker_opts *o, int fd) {
  for (;;) {
    unsigned char h[HDR_BYTES];
    if (!recv_all(fd, h, sizeof h)) _exit(0); /* the parent is gone or done */
    uint32_t magic;
    uint64_t len;
    memcpy(&magic, h, 4);
    memcpy(&len, h + 8, 8);
    if (magic != MSG_JOB || len > MAX_MSG) _exit(3);
    char *job = malloc(len ? len : 1);
    if (!job || !recv_all(fd, job, len)) _exit(3);
    dg_str reply;
    dg_str_init(&reply);
    bool keep = o->fn(o->ctx, job, len, &reply);
    free(job);
    bool sent = send_msg(fd, MSG_REPLY, keep ? 0 : REPLY_RETIRE, reply.s, reply.len);
    dg_str_free(&reply);
    if (!sent || !keep) _exit(0);
  }
}

/* Handlers an exec'd worker can run, by name: a fresh image has no
 * pointers from its parent. */
static const struct {
  const char *name;
  rt_worker_fn fn;
  void (*init)(void); /* run once before the first job, or NULL */
} named_handlers[] = {
    {"cuda", rt_cuda_job_handle, rt_cuda_worker_init},
    {"cuda-probe", rt_cuda_probe_handle, NULL},
    {"nvrtc", rt_nvrtc_job_handle, rt_nvrtc_worker_init},
};

/* Runs before main in every program linked with this file: a process
 * started as an exec'd worker becomes one here and never reaches main. */
__attribute__((constructor)) static void worker_exec_entry(void) {
  const char *w = getenv("DRAGON_WORKER");
  if (!w) return;
  char name[64];
  snprintf(name, sizeof name, "%s", w);
  char *colon = strrchr(name, ':');
  int fd = colon ? atoi(colon + 1) : -1;
  if (colon) *colon = 0;
  unsetenv("DRAGON_WORKER"); /* not for the worker's own children */
  for (size_t i = 0; i < DG_ARRAY_LEN(named_handlers); i++) {
    if (strcmp(named_handlers[i].name, name) != 0 || fd < 0) continue;
    if (named_handlers[i].init) named_handlers[i].init();
    rt_worker_opts o = {1, 1, 0, named_handlers[i].fn, NULL, NULL};
    worker_main(&o, fd);
  }
  _exit(126);
}

/* ---- the parent ------------------------------------------------------------ */

/* The environment of an exec'd worker: this one's, DRAGON_WORKER set. Made
 * before fork: other threads of this process (compilers) may hold locks
 * that malloc or setenv would need in the child, so between fork and exec
 * the child makes only async-signal-safe calls. */
static char **worker_env(const char *handler, int fd, char *val, size_t val_n) {
  snprintf(val, val_n, "DRAGON_WORKER=%s:%d", handler, fd);
  size_t n = 0;
  while (environ[n]) n++;
  char **env = dg_calloc(n + 2, sizeof *env);
  size_t m = 0;
  for (size_t i = 0; i < n; i++)
    if (strncmp(environ[i], "DRAGON_WORKER=", 14) != 0) env[m++] = environ[i];
  env[m++] = val;
  env[m] = NULL;
  return env;
}

static bool spawn(rt_worker_pool *p, int k, dg_status *st) {
  int sv[2];
  if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) != 0)
    return dg_fail(st, DG_ERR_RUNTIME, "workers: socketpair failed: %s", strerror(errno));
  pid_t parent = getpid();
  char val[128];
  char **env = p->o.exec_handler ? worker_env(p->o.exec_handler, sv[1], val, sizeof val) : NULL;
  char *const argv[] = {(char *)"dragon-worker", NULL};
  fflush(NULL); /* buffered output must not be written twice */
  pid_t pid = fork();
  if (pid < 0) {
    close(sv[0]);
    close(sv[1]);
    free(env);
    return dg_fail(st, DG_ERR_RUNTIME, "workers: fork failed: %s", strerror(errno));
  }
  if (pid == 0) {
    close(sv[0]);
    for (int j = 0; j < p->o.n_workers; j++)
      if (j != k && p->w[j].pid > 0) close(p->w[j].fd);
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (getppid() != parent) _exit(0);
    /* the parent may ignore SIGPIPE or catch SIGINT; the worker must not */
    signal(SIGPIPE, SIG_DFL);
    signal(SIGINT, SIG_DFL);
    signal(SIGTERM, SIG_DFL);
    if (env) {
      if (fcntl(sv[1], F_SETFD, 0) == 0) execve("/proc/self/exe", argv, env);
      _exit(127);
    }
    worker_main(&p->o, sv[1]);
  }
  free(env);
  close(sv[1]);
  worker_slot *w = &p->w[k];
  w->pid = pid;
  w->fd = sv[0];
  w->busy = false;
  w->started = dg_now();
  w->jobs_done = 0;
  dg_str_clear(&w->in);
  return true;
}

static const char *signal_name(int sig) {
  static char other[32];
  switch (sig) {
    case SIGSEGV: return "SIGSEGV";
    case SIGBUS: return "SIGBUS";
    case SIGFPE: return "SIGFPE";
    case SIGILL: return "SIGILL";
    case SIGABRT: return "SIGABRT";
    case SIGKILL: return "SIGKILL";
    case SIGTERM: return "SIGTERM";
    case SIGPIPE: return "SIGPIPE";
    case SIGINT: return "SIGINT";
    default: snprintf(other, sizeof other, "signal %d", sig); return other;
  }
}

/* Kills (if asked) and reaps a worker; says how it ended. */
static void reap(worker_slot *w, bool kill_it, char *why, size_t n) {
  if (w->pid <= 0) return;
  if (kill_it) kill(w->pid, SIGKILL);
  int status = 0;
  pid_t r;
  do r = waitpid(w->pid, &status, 0);
  while (r < 0 && errno == EINTR);
  if (why) {
    if (r < 0) snprintf(why, n, "worker lost");
    else if (WIFSIGNALED(status)) {
      snprintf(why, n, "killed by %s", signal_name(WTERMSIG(status)));
    } else if (WIFEXITED(status)) {
      snprintf(why, n, "exited with status %d", WEXITSTATUS(status));
    } else {
      snprintf(why, n, "ended");
    }
  }
  close(w->fd);
  w->fd = -1;
  w->pid = 0;
  w->busy = false;
  dg_str_clear(&w->in);
}

bool rt_worker_pool_new(const rt_worker_opts *o, rt_worker_pool **out, dg_status *st) {
  DG_ASSERT((o->fn || o->exec_handler) && o->n_workers >= 1);
  rt_worker_pool *p = dg_calloc(1, sizeof *p);
  p->o = *o;
  if (p->o.max_active <= 0 || p->o.max_active > o->n_workers) p->o.max_active = o->n_workers;
  if (p->o.timeout_s <= 0) p->o.timeout_s = 60;
  p->w = dg_calloc((size_t)o->n_workers, sizeof *p->w);
  for (int k = 0; k < o->n_workers; k++) {
    p->w[k].fd = -1;
    dg_str_init(&p->w[k].in);
  }
  for (int k = 0; k < o->n_workers; k++) {
    if (!spawn(p, k, st)) {
      rt_worker_pool_free(p);
      return false;
    }
  }
  *out = p;
  return true;
}

void rt_worker_pool_free(rt_worker_pool *p) {
  if (!p) return;
  for (int k = 0; k < p->o.n_workers; k++) {
    reap(&p->w[k], true, NULL, 0);
    free(p->w[k].job.job);
    dg_str_free(&p->w[k].in);
  }
  for (size_t i = p->head; i < p->queue.len; i++) free(p->queue.data[i].job);
  DG_VEC_FREE(&p->queue);
  free(p->w);
  free(p);
}

void rt_worker_pool_submit(rt_worker_pool *p, uint64_t id, const void *job, size_t len,
                           double timeout_s) {
  queued_job q = {id, dg_malloc(len ? len : 1), len, timeout_s > 0 ? timeout_s : p->o.timeout_s};
  if (len) memcpy(q.job, job, len);
  DG_VEC_PUSH(&p->queue, q);
}

int rt_worker_pool_pending(const rt_worker_pool *p) {
  int n = (int)(p->queue.len - p->head);
  for (int k = 0; k < p->o.n_workers; k++) n += p->w[k].busy;
  return n;
}

int rt_worker_pool_restarts(const rt_worker_pool *p) { return p->restarts; }

void rt_worker_result_free(rt_worker_result *r) {
  free(r->reply);
  r->reply = NULL;
  r->reply_len = 0;
}

static int n_busy(const rt_worker_pool *p) {
  int n = 0;
  for (int k = 0; k < p->o.n_workers; k++) n += p->w[k].busy;
  return n;
}

/* Replaces a dead worker; on failure the slot stays empty and dispatch
 * tries again later. */
static bool replace(rt_worker_pool *p, int k, dg_status *st) {
  p->restarts++;
  return spawn(p, k, st);
}

/* The idle worker to send a job to: a live one that has done the most
 * jobs (its caches are warm), the longest running among equals (its start-up
 * is behind it); an empty slot last. -1 if all are busy. */
static int pick_idle(const rt_worker_pool *p) {
  int k = -1;
  for (int j = 0; j < p->o.n_workers; j++) {
    const worker_slot *w = &p->w[j];
    if (w->busy) continue;
    if (k < 0) {
      k = j;
      continue;
    }
    const worker_slot *b = &p->w[k];
    bool live = w->pid > 0, blive = b->pid > 0;
    if (live != blive) {
      if (live) k = j;
    } else if (live && (w->jobs_done > b->jobs_done ||
                        (w->jobs_done == b->jobs_done && w->started < b->started))) {
      k = j;
    }
  }
  return k;
}

/* Sends queued jobs to idle workers while the active limit allows. A worker
 * found dead on sending is replaced and the job sent to the replacement. */
static bool dispatch(rt_worker_pool *p, dg_status *st) {
  while (p->head < p->queue.len && n_busy(p) < p->o.max_active) {
    int k = pick_idle(p);
    if (k < 0) break;
    worker_slot *w = &p->w[k];
    queued_job q = p->queue.data[p->head];
    bool sent = false;
    for (int attempt = 0; attempt < 2 && !sent; attempt++) {
      if (w->pid <= 0 && !replace(p, k, st)) return false;
      sent = send_msg(w->fd, MSG_JOB, 0, q.job, q.len);
      if (!sent) reap(w, true, NULL, 0);
    }
    if (!sent)
      return dg_fail(st, DG_ERR_RUNTIME, "workers: a fresh worker refused job %llu",
                     (unsigned long long)q.id);
    p->head++;
    w->busy = true;
    w->job = q;
    free(w->job.job);
    w->job.job = NULL;
    w->t0 = dg_now();
    w->deadline = w->t0 + q.timeout_s;
    dg_str_clear(&w->in);
  }
  if (p->head == p->queue.len) {
    p->queue.len = 0;
    p->head = 0;
  }
  return true;
}

/* A whole reply in w->in: its length, or 0 if more is to come. */
static size_t reply_complete(const worker_slot *w, uint32_t *flags, bool *bad) {
  *bad = false;
  if (w->in.len < HDR_BYTES) return 0;
  uint32_t magic;
  uint64_t len;
  memcpy(&magic, w->in.s, 4);
  memcpy(flags, w->in.s + 4, 4);
  memcpy(&len, w->in.s + 8, 8);
  if (magic != MSG_REPLY || len > MAX_MSG) {
    *bad = true;
    return 0;
  }
  return w->in.len >= HDR_BYTES + len ? HDR_BYTES + (size_t)len : 0;
}

static void finish(rt_worker_pool *p, int k, rt_worker_outcome oc, const char *why,
                   rt_worker_result *r) {
  worker_slot *w = &p->w[k];
  memset(r, 0, sizeof *r);
  r->id = w->job.id;
  r->outcome = oc;
  r->seconds = dg_now() - w->t0;
  snprintf(r->reason, sizeof r->reason, "%s", why ? why : "");
  w->busy = false;
}

/* Reads what a readable worker sent. Returns true with *r filled when its
 * job ended (a reply, or the worker died). */
static bool take_input(rt_worker_pool *p, int k, rt_worker_result *r, dg_status *st) {
  worker_slot *w = &p->w[k];
  char buf[1 << 16];
  ssize_t n = recv(w->fd, buf, sizeof buf, MSG_DONTWAIT);
  if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) return false;
  char why[128];
  if (n <= 0) {
    reap(w, true, why, sizeof why);
    finish(p, k, RT_WORKER_CRASHED, why, r);
    replace(p, k, st);
    return true;
  }
  dg_str_putn(&w->in, buf, (size_t)n);
  uint32_t flags = 0;
  bool bad = false;
  size_t whole = reply_complete(w, &flags, &bad);
  if (bad || (whole && w->in.len > whole)) {
    reap(w, true, NULL, 0);
    finish(p, k, RT_WORKER_CRASHED, "worker sent a malformed reply", r);
    replace(p, k, st);
    return true;
  }
  if (!whole) return false;
  finish(p, k, RT_WORKER_REPLIED, NULL, r);
  w->jobs_done++;
  r->reply_len = whole - HDR_BYTES;
  r->reply = dg_malloc(r->reply_len + 1);
  memcpy(r->reply, w->in.s + HDR_BYTES, r->reply_len);
  r->reply[r->reply_len] = 0;
  dg_str_clear(&w->in);
  if (flags & REPLY_RETIRE) {
    /* it exits on its own right after the reply; the kill only makes sure */
    reap(w, true, NULL, 0);
    replace(p, k, st);
  }
  return true;
}

bool rt_worker_pool_next(rt_worker_pool *p, rt_worker_result *r, dg_status *st) {
  dg_status_ok(st);
  memset(r, 0, sizeof *r);
  for (;;) {
    if (!dispatch(p, st)) return false;
    int nb = n_busy(p);
    if (nb == 0) return false;

    struct pollfd *pf = dg_calloc((size_t)nb, sizeof *pf);
    int *slot = dg_calloc((size_t)nb, sizeof *slot);
    int m = 0;
    double first_deadline = 1e300;
    for (int k = 0; k < p->o.n_workers; k++) {
      if (!p->w[k].busy) continue;
      pf[m] = (struct pollfd){p->w[k].fd, POLLIN, 0};
      slot[m++] = k;
      if (p->w[k].deadline < first_deadline) first_deadline = p->w[k].deadline;
    }
    double wait = first_deadline - dg_now();
    int ms = wait <= 0 ? 0 : wait > 1e6 ? 1000000000 : (int)(wait * 1000) + 1;
    int rc = poll(pf, (nfds_t)m, ms);
    if (rc < 0 && errno != EINTR) {
      free(pf);
      free(slot);
      return dg_fail(st, DG_ERR_RUNTIME, "workers: poll failed: %s", strerror(errno));
    }
    bool got = false;
    for (int i = 0; i < m && !got && rc > 0; i++)
      if (pf[i].revents) got = take_input(p, slot[i], r, st);
    double now = dg_now();
    for (int i = 0; i < m && !got; i++) {
      worker_slot *w = &p->w[slot[i]];
      if (!w->busy || now < w->deadline) continue;
      char why[64];
      snprintf(why, sizeof why, "timed out after %.2f s", w->job.timeout_s);
      reap(w, true, NULL, 0);
      finish(p, slot[i], RT_WORKER_TIMED_OUT, why, r);
      replace(p, slot[i], st);
      got = true;
    }
    free(pf);
    free(slot);
    if (got) {
      /* the next job starts now, not when the caller comes back; a failed
       * replacement is retried at the next dispatch */
      dispatch(p, st);
      dg_status_ok(st);
      return true;
    }
  }
}

/* ---- one job in a fresh child ---------------------------------------------- */

bool rt_worker_call(rt_worker_fn fn, void *ctx, const void *job, size_t len,
                    double timeout_s, rt_worker_result *r, dg_status *st) {
  rt_worker_opts o = {1, 1, timeout_s, fn, ctx};
  rt_worker_pool *p;
  memset(r, 0, sizeof *r);
  if (!rt_worker_pool_new(&o, &p, st)) return false;
  rt_worker_pool_submit(p, 0, job, len, timeout_s);
  bool ok = rt_worker_pool_next(p, r, st);
  rt_worker_pool_free(p);
  if (!ok && st->code == DG_OK) dg_fail(st, DG_ERR_RUNTIME, "workers: the job was lost");
  return ok;
}
