/* nvrtc.c: CUDA C source to CUBIN or PTX through NVRTC, one source at a
 * time, many on a thread pool, or many kernels per compilation.
 *
 * Options: the target (--gpu-architecture=sm_90 gives a CUBIN the driver
 * loads as is; compute_90 gives PTX it compiles at load), C++17, and -I for
 * the toolkit's headers when they sit beside the library. No fast-math: the
 * numeric check holds kernels to the reference's tolerances.
 *
 * Where a compilation's time goes (bench/bench_nvrtc on sampled GMM, C2D,
 * T2D and SFM candidates, CUDA 13.0, sm_90): about 25 ms fixed (front end
 * start-up and the built-in headers; cuda_fp16.h cost 7 ms more and is now
 * left out of programs without f16), the rest grows with the kernel body:
 * NVVM's optimizer about three quarters, ptxas about a sixth, the C++ front
 * end a twentieth. Options measured and not taken: -default-device,
 * --minimal, --no-source-include and --builtin-initializer-list=false
 * change nothing measurable; --pch saves a few ms of header work per
 * compilation at the price of one process-wide PCH heap shared by the
 * compiling threads; --fast-compile and ptxas -O levels change the
 * machine code. -G, -lineinfo and --extra-device-vectorization are off by
 * default and stay off.
 *
 * Why group: NVRTC pays a fixed cost per compilation (front end start-up,
 * the built-in headers) that dwarfs a small kernel, so 16 kernels in one
 * compilation cost far less than 16 compilations (on the H200 machine: 51
 * kernels/s one per compilation, 185/s sixteen per compilation, 16 threads).
 * A group fails as a whole on one bad kernel, so a failed group is compiled
 * again kernel by kernel to pin the failure on the kernel that has it.
 *
 * NVRTC programs are independent, so compilations run on plain threads;
 * rt_tasks hands finished ones back as they come, for a caller that
 * starts using the first module while the others still compile. NVRTC
 * itself serialises the compilations of one process, so where processes
 * are allowed (nvrtc_pool.c) each thread's compilation runs in a worker
 * process of its own.
 */
#include "rt/cuda_api.h"

#include <pthread.h>
#include <stdatomic.h>
#include <string.h>
#include <unistd.h>

int rt_cpu_count(void) {
  long n = sysconf(_SC_NPROCESSORS_ONLN);
  return n < 1 ? 1 : n > 1024 ? 1024 : (int)n;
}

void rt_cubin_free(rt_cubin *b) {
  if (!b) return;
  free(b->image);
  free(b->log);
  memset(b, 0, sizeof *b);
}

/* sm_NN, sm_NNa, compute_NN, compute_NNa with NN two or three digits. */
static bool arch_ok(const char *arch, bool *is_ptx) {
  const char *p;
  if (strncmp(arch, "sm_", 3) == 0) {
    p = arch + 3;
    *is_ptx = false;
  } else if (strncmp(arch, "compute_", 8) == 0) {
    p = arch + 8;
    *is_ptx = true;
  } else {
    return false;
  }
  int digits = 0;
  while (p[digits] >= '0' && p[digits] <= '9') digits++;
  if (digits < 2 || digits > 3) return false;
  p += digits;
  return *p == 0 || ((*p == 'a' || *p == 'f') && p[1] == 0);
}

/* The first lines of a log, for a status message; the whole log stays in
 * the rt_cubin. */
static void log_head(const char *log, char *out, size_t n, int max_lines) {
  size_t len = 0;
  int lines = 0;
  const char *p = log;
  while (*p && lines < max_lines && len + 1 < n) {
    const char *e = strchr(p, '\n');
    size_t l = e ? (size_t)(e - p) : strlen(p);
    if (l > 0) {
      size_t take = l < n - 1 - len ? l : n - 1 - len;
      memcpy(out + len, p, take);
      len += take;
      if (len + 1 < n) out[len++] = '\n';
      lines++;
    }
    if (!e) break;
    p = e + 1;
  }
  while (len && out[len - 1] == '\n') len--;
  out[len] = 0;
}

/* The flow callback's payload: when the compilation must stop. */
typedef struct {
  double deadline;
  atomic_bool stopped;
} flow_limit;

/* Polled by NVRTC on its own threads too: reads the clock, keeps saying
 * stop once it has said it (as NVRTC asks). */
static int flow_check(void *payload, void *reserved) {
  (void)reserved;
  flow_limit *f = payload;
  if (atomic_load(&f->stopped)) return 1;
  if (dg_now() < f->deadline) return 0;
  atomic_store(&f->stopped, true);
  return 1;
}

bool rt_nvrtc_can_cancel(void) {
  dg_status st;
  const rt_nvrtc_api *nv = rt_nvrtc_api_load(&st);
  return nv && nv->SetFlowCallback;
}

bool rt_nvrtc_compile(const char *src, const char *name, const char *arch, rt_cubin *out,
                      dg_status *st) {
  return rt_nvrtc_compile_within(src, name, arch, 0, out, st);
}

bool rt_nvrtc_compile_within(const char *src, const char *name, const char *arch, double limit_s,
                             rt_cubin *out, dg_status *st) {
  char dev_arch[16];
  if (!arch) {
    rt_build_arch(dev_arch, sizeof dev_arch); /* the device's, or the one default */
    arch = dev_arch;
  }
  return rt_nvrtc_compile_cached(src, name, arch, limit_s, out, st);
}

bool rt_nvrtc_compile_uncached(const char *src, const char *name, const char *arch,
                               double limit_s, rt_cubin *out, dg_status *st) {
  bool done = false;
  bool ok = rt_nvrtc_compile_pooled(src, name, arch, limit_s, out, st, &done);
  return done ? ok : rt_nvrtc_compile_here(src, name, arch, limit_s, out, st);
}

bool rt_nvrtc_compile_here(const char *src, const char *name, const char *arch, double limit_s,
                           rt_cubin *out, dg_status *st) {
  memset(out, 0, sizeof *out);
  out->log = dg_strdup("");
  dg_status_ok(st);
  if (!name || !*name) name = "kernel";
  bool is_ptx = false;
  if (!arch_ok(arch, &is_ptx))
    return dg_fail(st, DG_ERR_INVALID,
                   "nvrtc: %s: unknown target '%s' (want sm_NN, sm_NNa or compute_NN)", name,
                   arch);
  const rt_nvrtc_api *nv = rt_nvrtc_api_load(st);
  if (!nv) return false;
  snprintf(out->arch, sizeof out->arch, "%s", arch);
  out->is_ptx = is_ptx;

  double t0 = dg_now();
  char fname[200];
  snprintf(fname, sizeof fname, "%s.cu", name);
  nvrtc_prog prog = NULL;
  int r = nv->CreateProgram(&prog, src, fname, 0, NULL, NULL);
  if (r != 0)
    return dg_fail(st, DG_ERR_RUNTIME, "nvrtc: %s: cannot create the program: %s", fname,
                   nv->GetErrorString(r));
  char arch_opt[64];
  snprintf(arch_opt, sizeof arch_opt, "--gpu-architecture=%s", arch);
  const char *opts[4];
  int n_opts = 0;
  opts[n_opts++] = arch_opt;
  opts[n_opts++] = "-std=c++17";
  if (nv->include_opt[0]) opts[n_opts++] = nv->include_opt;
  flow_limit limit = {.deadline = t0 + limit_s};
  atomic_init(&limit.stopped, false);
  if (limit_s > 0 && nv->SetFlowCallback) nv->SetFlowCallback(prog, flow_check, &limit);
  int cr = nv->CompileProgram(prog, n_opts, opts);

  size_t log_n = 0;
  if (nv->GetProgramLogSize(prog, &log_n) == 0 && log_n > 1) {
    free(out->log);
    out->log = dg_calloc(log_n + 1, 1);
    if (nv->GetProgramLog(prog, out->log) != 0) out->log[0] = 0;
  }
  bool ok = false;
  if (cr != 0 && atomic_load(&limit.stopped)) {
    dg_fail(st, DG_ERR_RUNTIME, "nvrtc: %s: stopped after %.1f s (limit %.1f s)", fname,
            dg_now() - t0, limit_s);
  } else if (cr != 0) {
    char head[400];
    log_head(out->log, head, sizeof head, 6);
    dg_fail(st, DG_ERR_RUNTIME, "nvrtc: %s for %s failed (%s):\n%s", fname, arch,
            nv->GetErrorString(cr), head[0] ? head : "(empty log)");
  } else {
    size_t n = 0;
    int gr = is_ptx ? nv->GetPTXSize(prog, &n) : nv->GetCUBINSize(prog, &n);
    if (gr == 0 && n > 0) {
      out->image = dg_malloc(n + 1);
      gr = is_ptx ? nv->GetPTX(prog, out->image) : nv->GetCUBIN(prog, out->image);
      out->image[n] = 0;
      out->size = n;
    }
    if (gr != 0 || n == 0) {
      dg_fail(st, DG_ERR_RUNTIME, "nvrtc: %s: no %s from the compilation: %s", fname,
              is_ptx ? "PTX" : "CUBIN", gr ? nv->GetErrorString(gr) : "empty");
      free(out->image);
      out->image = NULL;
      out->size = 0;
    } else {
      ok = true;
    }
  }
  nv->DestroyProgram(&prog);
  out->seconds = dg_now() - t0;
  return ok;
}

/* ---- many sources on threads ---------------------------------------------- */

typedef struct {
  int n;
  atomic_int next;
  void (*work)(void *ctx, int i);
  void *ctx;
} task_pool;

static void *task_thread(void *arg) {
  task_pool *tp = arg;
  for (;;) {
    int i = atomic_fetch_add(&tp->next, 1);
    if (i >= tp->n) break;
    tp->work(tp->ctx, i);
  }
  return NULL;
}

/* Runs work(ctx, i) for i in [0, n) on up to `threads` threads (the caller's
 * thread is one of them). */
static void run_tasks(int n, int threads, void (*work)(void *, int), void *ctx) {
  if (threads <= 0) threads = rt_cpu_count();
  if (threads > n) threads = n;
  task_pool tp = {n, 0, work, ctx};
  atomic_init(&tp.next, 0);
  pthread_t *th = dg_calloc((size_t)(threads > 1 ? threads - 1 : 1), sizeof *th);
  int started = 0;
  for (int t = 0; t + 1 < threads; t++) {
    if (pthread_create(&th[started], NULL, task_thread, &tp) != 0) break;
    started++;
  }
  task_thread(&tp);
  for (int t = 0; t < started; t++) pthread_join(th[t], NULL);
  free(th);
}

/* ---- tasks handed back as they finish ------------------------------------ */

struct rt_tasks {
  int n;
  atomic_int next; /* the next task to start */
  void (*work)(void *ctx, int i);
  void *ctx;
  pthread_t *th;
  int n_threads; /* started */
  pthread_mutex_t mu;
  pthread_cond_t cv;
  int *done;     /* (n) finished tasks, in order; under mu */
  int n_done;    /* under mu */
  int n_taken;   /* handed back so far (the caller's thread only) */
};

/* Claims and runs tasks until none is left; returns after each one when
 * `one` (the caller running tasks itself). */
static void tasks_run(rt_tasks *t, bool one) {
  for (;;) {
    int i = atomic_fetch_add(&t->next, 1);
    if (i >= t->n) return;
    t->work(t->ctx, i);
    pthread_mutex_lock(&t->mu);
    t->done[t->n_done++] = i;
    pthread_cond_signal(&t->cv);
    pthread_mutex_unlock(&t->mu);
    if (one) return;
  }
}

static void *tasks_thread(void *arg) {
  tasks_run(arg, false);
  return NULL;
}

rt_tasks *rt_tasks_start(int n, int threads, void (*work)(void *ctx, int i), void *ctx) {
  rt_tasks *t = dg_calloc(1, sizeof *t);
  t->n = n > 0 ? n : 0;
  t->work = work;
  t->ctx = ctx;
  atomic_init(&t->next, 0);
  pthread_mutex_init(&t->mu, NULL);
  pthread_cond_init(&t->cv, NULL);
  t->done = dg_calloc((size_t)(t->n ? t->n : 1), sizeof(int));
  if (threads <= 0) threads = rt_cpu_count();
  if (threads > t->n) threads = t->n;
  t->th = dg_calloc((size_t)(threads ? threads : 1), sizeof(pthread_t));
  for (int k = 0; k < threads; k++) {
    if (pthread_create(&t->th[t->n_threads], NULL, tasks_thread, t) != 0) break;
    t->n_threads++;
  }
  return t;
}

int rt_tasks_next(rt_tasks *t, bool wait) {
  pthread_mutex_lock(&t->mu);
  for (;;) {
    if (t->n_taken < t->n_done) {
      int i = t->done[t->n_taken++];
      pthread_mutex_unlock(&t->mu);
      return i;
    }
    if (!wait || t->n_taken == t->n) break;
    if (t->n_threads == 0) {
      /* no thread could start: the caller runs the next task itself */
      pthread_mutex_unlock(&t->mu);
      tasks_run(t, true);
      pthread_mutex_lock(&t->mu);
      continue;
    }
    pthread_cond_wait(&t->cv, &t->mu);
  }
  pthread_mutex_unlock(&t->mu);
  return -1;
}

void rt_tasks_free(rt_tasks *t) {
  if (!t) return;
  for (int k = 0; k < t->n_threads; k++) pthread_join(t->th[k], NULL);
  tasks_run(t, false); /* what no thread was there to run */
  pthread_mutex_destroy(&t->mu);
  pthread_cond_destroy(&t->cv);
  free(t->done);
  free(t->th);
  free(t);
}

/* ---- many sources on threads, all at once ---------------------------------- */

typedef struct {
  const rt_nvrtc_job *jobs;
  rt_cubin *out;
  dg_status *sts;
} batch_ctx;

static void batch_work(void *p, int i) {
  batch_ctx *b = p;
  rt_nvrtc_compile(b->jobs[i].src, b->jobs[i].name, b->jobs[i].arch, &b->out[i], &b->sts[i]);
}

int rt_nvrtc_compile_batch(const rt_nvrtc_job *jobs, int n, int threads, rt_cubin *out,
                           dg_status *sts) {
  if (n <= 0) return 0;
  /* load once up front so that the threads do not queue on the loader */
  dg_status st;
  if (!rt_nvrtc_api_load(&st)) {
    for (int i = 0; i < n; i++) {
      memset(&out[i], 0, sizeof out[i]);
      out[i].log = dg_strdup("");
      sts[i] = st;
    }
    return 0;
  }
  batch_ctx b = {jobs, out, sts};
  run_tasks(n, threads, batch_work, &b);
  int ok = 0;
  for (int i = 0; i < n; i++) ok += sts[i].code == DG_OK;
  return ok;
}

/* ---- many kernels per compilation ----------------------------------------- */

typedef struct {
  const char *preamble;
  const char *const *kernels;
  int n, per_call;
  const char *arch;
  rt_nvrtc_grouped *g;
  /* retries of failed groups: one module per kernel, made by the group's
   * thread, merged into g->bins afterwards */
  rt_cubin *single;    /* (n) */
  bool *has_single;    /* (n) */
} group_ctx;

static char *group_source(const group_ctx *c, int lo, int hi) {
  dg_str s;
  dg_str_init(&s);
  if (c->preamble) {
    dg_str_puts(&s, c->preamble);
    dg_str_putc(&s, '\n');
  }
  for (int i = lo; i < hi; i++) {
    dg_str_printf(&s, "// kernel %d\n", i);
    dg_str_puts(&s, c->kernels[i]);
    dg_str_putc(&s, '\n');
  }
  return dg_str_take(&s);
}

static void group_work(void *p, int gi) {
  group_ctx *c = p;
  rt_nvrtc_grouped *g = c->g;
  int lo = gi * c->per_call;
  int hi = lo + c->per_call < c->n ? lo + c->per_call : c->n;
  char *src = group_source(c, lo, hi);
  char name[64];
  snprintf(name, sizeof name, "group%d", gi);
  dg_status st;
  bool ok = rt_nvrtc_compile(src, name, c->arch, &g->bins[gi], &st);
  free(src);
  if (ok || hi - lo == 1) {
    for (int i = lo; i < hi; i++) {
      g->bin_of[i] = ok ? gi : -1;
      g->st[i] = st;
    }
    return;
  }
  rt_cubin_free(&g->bins[gi]);
  for (int i = lo; i < hi; i++) {
    src = group_source(c, i, i + 1);
    snprintf(name, sizeof name, "kernel%d", i);
    c->has_single[i] = rt_nvrtc_compile(src, name, c->arch, &c->single[i], &g->st[i]);
    if (!c->has_single[i]) rt_cubin_free(&c->single[i]);
    free(src);
  }
}

void rt_nvrtc_compile_grouped(const char *preamble, const char *const *kernels, int n,
                              int per_call, int threads, const char *arch,
                              rt_nvrtc_grouped *out) {
  memset(out, 0, sizeof *out);
  if (n <= 0) return;
  if (per_call < 1) per_call = 1;
  int n_groups = (n + per_call - 1) / per_call;
  out->n = n;
  out->bin_of = dg_calloc((size_t)n, sizeof(int));
  out->st = dg_calloc((size_t)n, sizeof(dg_status));
  out->bins = dg_calloc((size_t)n_groups, sizeof(rt_cubin));
  out->n_bins = n_groups;
  for (int i = 0; i < n; i++) out->bin_of[i] = -1;
  dg_status st;
  if (!rt_nvrtc_api_load(&st)) {
    for (int i = 0; i < n; i++) out->st[i] = st;
    return;
  }
  group_ctx c = {preamble, kernels, n, per_call, arch, out, NULL, NULL};
  c.single = dg_calloc((size_t)n, sizeof(rt_cubin));
  c.has_single = dg_calloc((size_t)n, sizeof(bool));
  run_tasks(n_groups, threads, group_work, &c);
  int extra = 0;
  for (int i = 0; i < n; i++) extra += c.has_single[i];
  if (extra) {
    out->bins = dg_realloc(out->bins, sizeof(rt_cubin) * (size_t)(n_groups + extra));
    for (int i = 0; i < n; i++) {
      if (!c.has_single[i]) continue;
      out->bins[out->n_bins] = c.single[i];
      out->bin_of[i] = out->n_bins++;
    }
  }
  for (int i = 0; i < n; i++) out->n_ok += out->bin_of[i] >= 0;
  free(c.single);
  free(c.has_single);
}

void rt_nvrtc_grouped_free(rt_nvrtc_grouped *g) {
  if (!g) return;
  for (int i = 0; i < g->n_bins; i++) rt_cubin_free(&g->bins[i]);
  free(g->bins);
  free(g->bin_of);
  free(g->st);
  memset(g, 0, sizeof *g);
}
