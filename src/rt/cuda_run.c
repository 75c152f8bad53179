/* cuda_run.c: running a compiled program on the GPU, checking and timing
 * it, and the GPU job that workers run.
 *
 * A run (run_core): set the buffers up on the stream (inputs restored from
 * a pristine device copy or uploaded, outputs and intermediates poisoned:
 * all-ones bytes are NaN in f16, f32 and f64; 0xA5 for integers, as data.c
 * poisons on the CPU), run once and copy the outputs back through
 * page-locked memory (the checked run), then queue the warm-up runs and the
 * timed runs and, while the GPU works through them, compare the outputs on
 * the CPU. A timed run is bracketed by two events on the stream around the
 * launches only; before it, when asked, a memset of a buffer four times the
 * L2 (at least 256 MiB) evicts what the previous run left there, so every
 * run starts from device memory as a kernel in a real model would. Up to
 * RING timed runs are queued at once; each one's time is read from its
 * events when it has finished, so the host never stalls the stream between
 * repeats. Every run drains the stream before it returns: a buffer or a
 * module is never reused or freed under a kernel.
 *
 * Failures are classified for the search: the launch refused (bad dims,
 * too many resources), an illegal or misaligned address, another error
 * while running, a run past its deadline. A sticky error or a timeout
 * leaves the context unusable; the result says so, and a worker that sees
 * it retires (worker.c) so that its replacement starts clean. Waiting polls
 * the event with a deadline, so a hanging kernel is reported, not waited on.
 *
 * The GPU job (second half): the job message, the data set file that
 * carries inputs and reference outputs from the parent to the workers (the
 * reference is computed once per workload, in float64 on the CPU, by the
 * same rt_data_* helpers as the CPU path), and the handler workers run. A
 * worker keeps the device side of its last data set across jobs
 * (device_data): allocated and uploaded once, restored per job by device
 * copies (rt_cuda.h says what is restored and why).
 *
 * It does not pick a GPU among several (device 0 for workers), capture
 * graphs, or rotate input sets.
 */
#include "rt/cuda_api.h"

#include "dragon/codegen.h"
#include "dragon/lower.h"

#include <fcntl.h>
#include <math.h>
#include <sched.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

const char *rt_fail_name(rt_fail f) {
  static const char *const names[] = {
#define X(id, name) name,
      RT_FAIL_LIST(X)
#undef X
  };
  _Static_assert(DG_ARRAY_LEN(names) == RT_FAIL_COUNT, "one name per failure kind");
  return (unsigned)f < RT_FAIL_COUNT ? names[f] : "?";
}

/* ---- statistics ------------------------------------------------------------ */

static int cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

/* The q-quantile of sorted s, interpolated between order statistics. */
static double quantile(const double *s, int n, double q) {
  double pos = q * (n - 1);
  int lo = (int)floor(pos);
  int hi = lo + 1 < n ? lo + 1 : lo;
  return s[lo] + (pos - lo) * (s[hi] - s[lo]);
}

void rt_time_stats_of(const double *samples, int n, rt_time_stats *out) {
  memset(out, 0, sizeof *out);
  if (n <= 0) return;
  double *s = dg_malloc(sizeof(double) * (size_t)n);
  memcpy(s, samples, sizeof(double) * (size_t)n);
  qsort(s, (size_t)n, sizeof(double), cmp_double);
  out->n = n;
  out->min = s[0];
  out->max = s[n - 1];
  out->median = quantile(s, n, 0.5);
  out->q1 = quantile(s, n, 0.25);
  out->q3 = quantile(s, n, 0.75);
  free(s);
}

/* ---- context --------------------------------------------------------------- */

/* Timed runs in flight at once: each holds a pair of events until its time
 * is read, so at most this many are queued ahead of the host. */
enum { RING = 64 };

struct rt_cuda_ctx {
  const rt_cu_api *cu;
  int dev;
  cu_handle ctx, stream;
  cu_handle ev_out;         /* the checked run's outputs are back */
  cu_handle ev_warm;        /* the warm-up runs are done */
  cu_handle ev_done;        /* everything queued so far is done */
  cu_handle ev_t[2 * RING]; /* timed run k: start ev_t[2 (k % RING)], end the next */
  rt_cuda_device info;
  cu_devptr flush; /* written before each timed run to evict the L2 */
  size_t flush_bytes;
  cu_devptr scratch; /* a program's intermediate buffers, carved out of one block */
  size_t scratch_bytes;
  void *pinned; /* page-locked staging for outputs on their way back */
  size_t pinned_bytes;
  bool broken;
};

bool rt_cuda_ctx_new(int device, rt_cuda_ctx **out, dg_status *st) {
  *out = NULL;
  const rt_cu_api *cu = rt_cu_api_load(st);
  if (!cu) return false;
  rt_cuda_ctx *c = dg_calloc(1, sizeof *c);
  c->cu = cu;
  int n = 0;
  bool ok = RT_CU_CHECK(cu, cu->Init(0), st, "cuda: cuInit") &&
            RT_CU_CHECK(cu, cu->DeviceGetCount(&n), st, "cuda: cuDeviceGetCount");
  if (ok && (device < 0 || device >= n))
    ok = dg_fail(st, DG_ERR_RUNTIME, "cuda: there is no device %d (the driver sees %d)", device, n);
  ok = ok && RT_CU_CHECK(cu, cu->DeviceGet(&c->dev, device), st, "cuda: cuDeviceGet");
  if (ok) rt_cu_describe(cu, c->dev, &c->info);
  ok = ok && RT_CU_CHECK(cu, cu->DevicePrimaryCtxRetain(&c->ctx, c->dev), st,
                         "cuda: retaining the primary context");
  ok = ok && RT_CU_CHECK(cu, cu->CtxSetCurrent(c->ctx), st, "cuda: cuCtxSetCurrent");
  /* a blocking stream: it waits for the synchronous copies of the legacy
   * stream that upload data sets */
  ok = ok && RT_CU_CHECK(cu, cu->StreamCreate(&c->stream, 0), st, "cuda: cuStreamCreate");
  ok = ok && RT_CU_CHECK(cu, cu->EventCreate(&c->ev_out, 0), st, "cuda: cuEventCreate");
  ok = ok && RT_CU_CHECK(cu, cu->EventCreate(&c->ev_warm, 0), st, "cuda: cuEventCreate");
  ok = ok && RT_CU_CHECK(cu, cu->EventCreate(&c->ev_done, 0), st, "cuda: cuEventCreate");
  for (int i = 0; i < 2 * RING && ok; i++)
    ok = RT_CU_CHECK(cu, cu->EventCreate(&c->ev_t[i], 0), st, "cuda: cuEventCreate");
  if (!ok) {
    rt_cuda_ctx_free(c);
    return false;
  }
  *out = c;
  return true;
}

void rt_cuda_ctx_free(rt_cuda_ctx *c) {
  if (!c) return;
  const rt_cu_api *cu = c->cu;
  /* after a sticky error every call fails, and after a timeout the kernel
   * still runs: leave it all to process exit */
  if (!c->broken) {
    if (c->stream) cu->StreamSynchronize(c->stream);
    if (c->flush) cu->MemFree(c->flush);
    if (c->scratch) cu->MemFree(c->scratch);
    if (c->pinned) cu->MemFreeHost(c->pinned);
    cu_handle evs[3] = {c->ev_out, c->ev_warm, c->ev_done};
    for (int i = 0; i < 3; i++)
      if (evs[i]) cu->EventDestroy(evs[i]);
    for (int i = 0; i < 2 * RING; i++)
      if (c->ev_t[i]) cu->EventDestroy(c->ev_t[i]);
    if (c->stream) cu->StreamDestroy(c->stream);
    if (c->ctx) cu->DevicePrimaryCtxRelease(c->dev);
  }
  free(c);
}

const rt_cuda_device *rt_cuda_ctx_device(const rt_cuda_ctx *c) { return &c->info; }
bool rt_cuda_ctx_broken(const rt_cuda_ctx *c) { return c->broken; }

/* ---- a run ----------------------------------------------------------------- */

static void set_fail(rt_cuda_result *res, rt_fail f, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static void set_fail(rt_cuda_result *res, rt_fail f, const char *fmt, ...) {
  if (res->fail != RT_FAIL_NONE) return; /* the first failure is the reason */
  res->fail = f;
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(res->reason, sizeof res->reason, fmt, ap);
  va_end(ap);
}

static bool is_sticky(cu_result r) {
  switch (r) {
    case CU_ERR_ILLEGAL_ADDRESS:
    case CU_ERR_LAUNCH_TIMEOUT:
    case CU_ERR_ASSERT:
    case CU_ERR_HARDWARE_STACK_ERROR:
    case CU_ERR_ILLEGAL_INSTRUCTION:
    case CU_ERR_MISALIGNED_ADDRESS:
    case CU_ERR_INVALID_ADDRESS_SPACE:
    case CU_ERR_INVALID_PC:
    case CU_ERR_LAUNCH_FAILED:
    case CU_ERR_UNKNOWN: return true;
    default: return false;
  }
}

/* An error seen while or after kernels ran. */
static void run_error(rt_cuda_ctx *c, rt_cuda_result *res, cu_result r, const char *where) {
  char text[200];
  rt_cu_error_text(c->cu, r, text, sizeof text);
  rt_fail f = (r == CU_ERR_ILLEGAL_ADDRESS || r == CU_ERR_MISALIGNED_ADDRESS ||
               r == CU_ERR_INVALID_ADDRESS_SPACE)
                  ? RT_FAIL_ILLEGAL_ADDRESS
                  : RT_FAIL_DEVICE;
  set_fail(res, f, "%s: %s", where, text);
  if (is_sticky(r)) c->broken = true;
  res->ctx_broken = c->broken;
}

/* Waits for ev with a deadline; polls, so a hang is seen, not waited on. */
static cu_result wait_event(rt_cuda_ctx *c, cu_handle ev, double deadline, bool *timed_out) {
  *timed_out = false;
  for (int spins = 0;; spins++) {
    cu_result r = c->cu->EventQuery(ev);
    if (r != CU_ERR_NOT_READY) return r;
    if (dg_now() > deadline) {
      *timed_out = true;
      return r;
    }
    if (spins < 2000) {
      sched_yield();
    } else {
      struct timespec ts = {0, 100000};
      nanosleep(&ts, NULL);
    }
  }
}

/* Waits for an event recorded after the work of `what`, at most timeout_s.
 * A timeout leaves the kernel running: the context is unusable. */
static bool wait_for(rt_cuda_ctx *c, cu_handle ev, double timeout_s, rt_cuda_result *res,
                     const char *what) {
  bool timed_out = false;
  cu_result r = wait_event(c, ev, dg_now() + timeout_s, &timed_out);
  if (timed_out) {
    set_fail(res, RT_FAIL_TIMEOUT, "%s: still running after %.2f s", what, timeout_s);
    c->broken = true;
    res->ctx_broken = true;
    return false;
  }
  if (r != CU_SUCCESS) {
    run_error(c, res, r, what);
    return false;
  }
  return true;
}

/* Records ev on the stream and waits for it. */
static bool record_and_wait(rt_cuda_ctx *c, cu_handle ev, double timeout_s, rt_cuda_result *res,
                            const char *what) {
  cu_result r = c->cu->EventRecord(ev, c->stream);
  if (r != CU_SUCCESS) {
    run_error(c, res, r, what);
    return false;
  }
  return wait_for(c, ev, timeout_s, res, what);
}

typedef union {
  cu_devptr p;
  int32_t i32;
  int64_t i64;
  float f32;
} arg_value;

typedef struct {
  cu_handle fn;
  arg_value *vals; /* (n_args) */
  void **params;   /* (n_args) &vals[i] */
} prepared_launch;

/* Launches every kernel of the program on the stream. */
static bool launch_all(rt_cuda_ctx *c, const rt_cuda_program *prog, const prepared_launch *pl,
                       rt_cuda_result *res) {
  for (int i = 0; i < prog->n_launches; i++) {
    const rt_cuda_launch *l = &prog->launches[i];
    cu_result r = c->cu->LaunchKernel(pl[i].fn, (unsigned)l->grid[0], (unsigned)l->grid[1],
                                      (unsigned)l->grid[2], (unsigned)l->block[0],
                                      (unsigned)l->block[1], (unsigned)l->block[2],
                                      (unsigned)l->shared_bytes, c->stream, pl[i].params, NULL);
    if (r != CU_SUCCESS) {
      char text[200];
      rt_cu_error_text(c->cu, r, text, sizeof text);
      if (is_sticky(r)) {
        run_error(c, res, r, "launch");
      } else {
        set_fail(res, RT_FAIL_LAUNCH, "launch %d (%s, grid %dx%dx%d, block %dx%dx%d, %d B shared): %s",
                 i, l->kernel, l->grid[0], l->grid[1], l->grid[2], l->block[0], l->block[1],
                 l->block[2], l->shared_bytes, text);
      }
      return false;
    }
  }
  return true;
}

/* Checks the program's shape before anything reaches the driver. */
static bool program_ok(const rt_cuda_ctx *c, const rt_cuda_program *prog, rt_cuda_result *res) {
  if (prog->n_launches < 1) {
    set_fail(res, RT_FAIL_SETUP, "program: no launches");
    return false;
  }
  if (prog->n_bufs < 0 || (prog->n_bufs > 0 && !prog->bufs)) {
    set_fail(res, RT_FAIL_SETUP, "program: %d buffers", prog->n_bufs);
    return false;
  }
  for (int b = 0; b < prog->n_bufs; b++) {
    const rt_cuda_buf *bf = &prog->bufs[b];
    if ((unsigned)bf->dtype >= DG_DTYPE_COUNT || bf->numel < 0 || bf->numel > ((int64_t)1 << 40)) {
      set_fail(res, RT_FAIL_SETUP, "program: buffer %d (%s): bad dtype or size", b,
               bf->name ? bf->name : "?");
      return false;
    }
  }
  for (int i = 0; i < prog->n_launches; i++) {
    const rt_cuda_launch *l = &prog->launches[i];
    const char *k = l->kernel ? l->kernel : "?";
    if (!l->kernel || !*l->kernel) {
      set_fail(res, RT_FAIL_SETUP, "program: launch %d has no kernel name", i);
      return false;
    }
    int64_t threads = (int64_t)l->block[0] * l->block[1] * l->block[2];
    if (l->grid[0] < 1 || l->grid[1] < 1 || l->grid[2] < 1 || l->grid[1] > 65535 ||
        l->grid[2] > 65535) {
      set_fail(res, RT_FAIL_LAUNCH, "launch %d (%s): grid %dx%dx%d is out of range", i, k,
               l->grid[0], l->grid[1], l->grid[2]);
      return false;
    }
    if (l->block[0] < 1 || l->block[1] < 1 || l->block[2] < 1 || l->block[2] > 64 ||
        threads > 1024) {
      set_fail(res, RT_FAIL_LAUNCH,
               "launch %d (%s): block %dx%dx%d is out of range (at most 1024 threads)", i, k,
               l->block[0], l->block[1], l->block[2]);
      return false;
    }
    int limit = c->info.smem_optin > 0 ? c->info.smem_optin : 48 * 1024;
    if (l->shared_bytes < 0 || l->shared_bytes > limit) {
      set_fail(res, RT_FAIL_LAUNCH, "launch %d (%s): %d bytes of dynamic shared memory (limit %d)",
               i, k, l->shared_bytes, limit);
      return false;
    }
    if (l->n_args < 0 || l->n_args > 1024 || (l->n_args > 0 && !l->args)) {
      set_fail(res, RT_FAIL_SETUP, "launch %d (%s): %d arguments", i, k, l->n_args);
      return false;
    }
    for (int a = 0; a < l->n_args; a++)
      if (l->args[a].kind == RT_CUDA_ARG_BUF &&
          (l->args[a].buf < 0 || l->args[a].buf >= prog->n_bufs)) {
        set_fail(res, RT_FAIL_SETUP, "launch %d (%s): argument %d names buffer %d of %d", i, k,
                 a, l->args[a].buf, prog->n_bufs);
        return false;
      }
  }
  return true;
}

static size_t buf_bytes(const rt_cuda_buf *b) {
  size_t n = (size_t)b->numel * (size_t)dg_dtype_bytes(b->dtype);
  return n ? n : 1;
}

static size_t align_up(size_t x, size_t a) { return (x + a - 1) / a * a; }

/* Grows a device block to `want` bytes. Only between runs: nothing queued
 * may still use the old block (every run drains the stream before it
 * returns). */
static bool grow_device(rt_cuda_ctx *c, cu_devptr *p, size_t *have, size_t want, const char *what,
                        rt_cuda_result *res) {
  if (*have >= want) return true;
  if (*p) c->cu->MemFree(*p);
  *p = 0;
  *have = 0;
  cu_result r = c->cu->MemAlloc(p, want);
  if (r != CU_SUCCESS) {
    *p = 0;
    char text[200];
    rt_cu_error_text(c->cu, r, text, sizeof text);
    set_fail(res, RT_FAIL_SETUP, "allocating %s (%zu bytes): %s", what, want, text);
    return false;
  }
  *have = want;
  return true;
}

/* The module of bin and the function of each launch of prog (fns: n_launches). */
static bool load_module(rt_cuda_ctx *c, const rt_cubin *bin, const rt_cuda_program *prog,
                        cu_handle *mod, cu_handle *fns, rt_cuda_result *res) {
  const rt_cu_api *cu = c->cu;
  char text[200];
  *mod = NULL;
  if (!bin || !bin->image || bin->size == 0) {
    set_fail(res, RT_FAIL_COMPILE, "no compiled module");
    return false;
  }
  cu_result r = cu->ModuleLoadData(mod, bin->image);
  if (r != CU_SUCCESS) {
    *mod = NULL;
    rt_cu_error_text(cu, r, text, sizeof text);
    set_fail(res, RT_FAIL_LOAD, "loading the %s module (%zu bytes): %s", bin->arch, bin->size, text);
    if (is_sticky(r)) run_error(c, res, r, "loading the module");
    return false;
  }
  for (int i = 0; i < prog->n_launches; i++) {
    const rt_cuda_launch *l = &prog->launches[i];
    r = cu->ModuleGetFunction(&fns[i], *mod, l->kernel);
    if (r != CU_SUCCESS) {
      set_fail(res, RT_FAIL_LOAD, "launch %d: the module has no kernel named '%s'", i, l->kernel);
      return false;
    }
    if (l->shared_bytes > 48 * 1024) {
      r = cu->FuncSetAttribute(fns[i], CU_FUNC_ATTR_MAX_DYNAMIC_SHARED, l->shared_bytes);
      if (r != CU_SUCCESS) {
        rt_cu_error_text(cu, r, text, sizeof text);
        set_fail(res, RT_FAIL_LAUNCH, "launch %d (%s): raising dynamic shared memory to %d: %s",
                 i, l->kernel, l->shared_bytes, text);
        return false;
      }
    }
  }
  return true;
}

static void unload_module(rt_cuda_ctx *c, cu_handle mod) {
  if (mod && !c->broken) c->cu->ModuleUnload(mod);
}

/* One buffer of a run: where it lives and how it is set before the run. */
typedef struct {
  cu_devptr ptr;
  size_t bytes;
  cu_devptr pristine; /* != 0: copied from here, device to device */
  bool poison;        /* else, true: poisoned; false: left as it is (uploaded) */
  void *back;         /* != NULL: the checked run's values are copied here */
} run_buf;

/* Called while the timed runs are on the GPU, once the checked run's
 * outputs are back on the host: compares them (sets res->check and, on a
 * mismatch, RT_FAIL_WRONG). */
typedef void (*run_check_fn)(void *ctx, rt_cuda_result *res);

/* The seconds a drain may take: everything a run queues ahead. */
static double queued_runs_s(const rt_cuda_timing *tm) {
  int queued = 1 + tm->warmup + (tm->repeats < RING ? tm->repeats : RING);
  return tm->timeout_s * queued;
}

/* Enqueues timed run k: the L2 flush, then the launches between the events
 * of slot k % RING. */
static bool enqueue_timed(rt_cuda_ctx *c, const rt_cuda_program *prog, const prepared_launch *pl,
                          const rt_cuda_timing *tm, int k, rt_cuda_result *res) {
  const rt_cu_api *cu = c->cu;
  int s = k % RING;
  cu_result r;
  if (tm->flush_l2) {
    r = cu->MemsetD32Async(c->flush, (unsigned)k, c->flush_bytes / 4, c->stream);
    if (r != CU_SUCCESS) {
      run_error(c, res, r, "flushing L2");
      return false;
    }
  }
  r = cu->EventRecord(c->ev_t[2 * s], c->stream);
  if (r != CU_SUCCESS) {
    run_error(c, res, r, "timing");
    return false;
  }
  if (!launch_all(c, prog, pl, res)) return false;
  r = cu->EventRecord(c->ev_t[2 * s + 1], c->stream);
  if (r != CU_SUCCESS) {
    run_error(c, res, r, "timing");
    return false;
  }
  return true;
}

/* A run over buffers that exist: set them up (restore, poison), run once,
 * copy the outputs back through page-locked staging, then queue the
 * warm-up and timed runs and, while the GPU works on them, call check.
 * Timed runs are queued up to RING ahead and their times read from their
 * events as they finish, so the host never stalls the stream between
 * repeats. The stream is drained before it returns (unless the context
 * broke). */
static void run_core(rt_cuda_ctx *c, const rt_cuda_program *prog, const cu_handle *fns,
                     const run_buf *rb, const rt_cuda_timing *tm, run_check_fn check,
                     void *check_ctx, rt_cuda_result *res) {
  const rt_cu_api *cu = c->cu;
  cu_result r;
  prepared_launch *pl = dg_calloc((size_t)prog->n_launches, sizeof *pl);
  double *samples = dg_calloc((size_t)(tm->repeats ? tm->repeats : 1), sizeof(double));
  size_t back_bytes = 0, off = 0;
  int queued = 0; /* timed runs queued so far */
  for (int b = 0; b < prog->n_bufs; b++)
    if (rb[b].back) back_bytes += align_up(rb[b].bytes, 256);

  /* what must exist before anything is queued */
  if (tm->repeats > 0 && tm->flush_l2) {
    size_t want = (size_t)256 << 20;
    if ((size_t)c->info.l2_bytes * 4 > want) want = (size_t)c->info.l2_bytes * 4;
    if (!grow_device(c, &c->flush, &c->flush_bytes, want, "the L2 flush buffer", res)) goto done;
  }
  if (back_bytes > c->pinned_bytes) {
    if (c->pinned) cu->MemFreeHost(c->pinned);
    c->pinned = NULL;
    c->pinned_bytes = 0;
    r = cu->MemAllocHost(&c->pinned, back_bytes);
    if (r != CU_SUCCESS) {
      c->pinned = NULL;
      char text[200];
      rt_cu_error_text(cu, r, text, sizeof text);
      set_fail(res, RT_FAIL_SETUP, "allocating %zu bytes of page-locked host memory: %s",
               back_bytes, text);
      goto done;
    }
    c->pinned_bytes = back_bytes;
  }
  for (int i = 0; i < prog->n_launches; i++) {
    const rt_cuda_launch *l = &prog->launches[i];
    int na = l->n_args;
    pl[i].fn = fns[i];
    pl[i].vals = dg_calloc((size_t)(na ? na : 1), sizeof(arg_value));
    pl[i].params = dg_calloc((size_t)(na ? na : 1), sizeof(void *));
    for (int a = 0; a < na; a++) {
      const rt_cuda_arg *g = &l->args[a];
      switch (g->kind) {
        case RT_CUDA_ARG_BUF: pl[i].vals[a].p = rb[g->buf].ptr; break;
        case RT_CUDA_ARG_I32: pl[i].vals[a].i32 = (int32_t)g->i; break;
        case RT_CUDA_ARG_I64: pl[i].vals[a].i64 = g->i; break;
        case RT_CUDA_ARG_F32: pl[i].vals[a].f32 = (float)g->f; break;
      }
      pl[i].params[a] = &pl[i].vals[a];
    }
  }

  /* set-up, the checked run, its outputs back */
  for (int b = 0; b < prog->n_bufs; b++) {
    const run_buf *x = &rb[b];
    if (x->pristine) {
      r = cu->MemcpyDtoDAsync(x->ptr, x->pristine, x->bytes, c->stream);
    } else if (x->poison) {
      unsigned char poison = dg_dtype_is_float(prog->bufs[b].dtype) ? 0xFF : 0xA5;
      r = cu->MemsetD8Async(x->ptr, poison, x->bytes, c->stream);
    } else {
      continue;
    }
    if (r != CU_SUCCESS) {
      run_error(c, res, r, x->pristine ? "restoring inputs" : "poisoning outputs");
      goto drain;
    }
  }
  if (!launch_all(c, prog, pl, res)) goto drain;
  for (int b = 0; b < prog->n_bufs; b++) {
    if (!rb[b].back) continue;
    r = cu->MemcpyDtoHAsync((char *)c->pinned + off, rb[b].ptr, rb[b].bytes, c->stream);
    if (r != CU_SUCCESS) {
      run_error(c, res, r, "copying outputs back");
      goto drain;
    }
    off += align_up(rb[b].bytes, 256);
  }
  if (!record_and_wait(c, c->ev_out, tm->timeout_s, res, "run")) goto drain;
  off = 0;
  for (int b = 0; b < prog->n_bufs; b++) {
    if (!rb[b].back) continue;
    memcpy(rb[b].back, (char *)c->pinned + off, rb[b].bytes);
    off += align_up(rb[b].bytes, 256);
  }

  /* warm-up and timed runs queued; the check runs beside them */
  for (int w = 0; w < tm->warmup; w++)
    if (!launch_all(c, prog, pl, res)) goto drain;
  if (tm->warmup) {
    r = cu->EventRecord(c->ev_warm, c->stream);
    if (r != CU_SUCCESS) {
      run_error(c, res, r, "warm-up");
      goto drain;
    }
  }
  while (queued < tm->repeats && queued < RING) {
    if (!enqueue_timed(c, prog, pl, tm, queued, res)) goto drain;
    queued++;
  }
  if (check) check(check_ctx, res);
  if (tm->warmup && !wait_for(c, c->ev_warm, tm->timeout_s * tm->warmup, res, "warm-up"))
    goto drain;
  for (int k = 0; k < tm->repeats; k++) {
    int s = k % RING;
    if (!wait_for(c, c->ev_t[2 * s + 1], tm->timeout_s, res, "timed run")) goto drain;
    float ms = 0;
    r = cu->EventElapsedTime(&ms, c->ev_t[2 * s], c->ev_t[2 * s + 1]);
    if (r != CU_SUCCESS) {
      run_error(c, res, r, "reading the events");
      goto drain;
    }
    samples[k] = ms * 1e-3;
    if (queued < tm->repeats) { /* slot s is free again */
      if (!enqueue_timed(c, prog, pl, tm, queued, res)) goto drain;
      queued++;
    }
  }
  if (res->fail == RT_FAIL_NONE) rt_time_stats_of(samples, tm->repeats, &res->t);

drain:
  /* nothing may still run when buffers are reused or the module unloaded */
  if (!c->broken) record_and_wait(c, c->ev_done, queued_runs_s(tm), res, "finishing");
done:
  res->ctx_broken = c->broken;
  for (int i = 0; i < prog->n_launches; i++) {
    free(pl[i].vals);
    free(pl[i].params);
  }
  free(pl);
  free(samples);
}

static void timing_defaults(const rt_cuda_timing *in, rt_cuda_timing *tm) {
  *tm = in ? *in : (rt_cuda_timing){0, 0, false, 0};
  if (tm->timeout_s <= 0) tm->timeout_s = 10;
  if (tm->warmup < 0) tm->warmup = 0;
  if (tm->repeats < 0) tm->repeats = 0;
}

void rt_cuda_run(rt_cuda_ctx *c, const rt_cubin *bin, const rt_cuda_program *prog,
                 void **host, const rt_cuda_timing *tm_in, rt_cuda_result *res) {
  memset(res, 0, sizeof *res);
  rt_cuda_timing tm;
  timing_defaults(tm_in, &tm);
  const rt_cu_api *cu = c->cu;
  if (c->broken) {
    set_fail(res, RT_FAIL_SETUP, "cuda: the context is unusable after an earlier error");
    res->ctx_broken = true;
    return;
  }
  if (!bin || !bin->image || bin->size == 0) {
    set_fail(res, RT_FAIL_COMPILE, "no compiled module");
    return;
  }
  if (!program_ok(c, prog, res)) return;
  cu->CtxSetCurrent(c->ctx);

  cu_handle mod = NULL;
  cu_handle *fns = dg_calloc((size_t)prog->n_launches, sizeof *fns);
  run_buf *rb = dg_calloc((size_t)(prog->n_bufs ? prog->n_bufs : 1), sizeof *rb);
  char text[200];
  cu_result r;
  if (!load_module(c, bin, prog, &mod, fns, res)) goto done;
  for (int b = 0; b < prog->n_bufs; b++) {
    const rt_cuda_buf *bf = &prog->bufs[b];
    size_t n = buf_bytes(bf);
    r = cu->MemAlloc(&rb[b].ptr, n);
    if (r != CU_SUCCESS) {
      rb[b].ptr = 0;
      rt_cu_error_text(cu, r, text, sizeof text);
      set_fail(res, RT_FAIL_SETUP, "allocating buffer %s (%zu bytes): %s",
               bf->name ? bf->name : "?", n, text);
      goto done;
    }
    rb[b].bytes = n;
    bool upload = host && host[b] && !bf->is_output && bf->param >= 0;
    rb[b].poison = !upload;
    rb[b].back = host && host[b] && bf->is_output ? host[b] : NULL;
    if (upload) {
      r = cu->MemcpyHtoD(rb[b].ptr, host[b], n);
      if (r != CU_SUCCESS) {
        run_error(c, res, r, "uploading inputs");
        goto done;
      }
    }
  }
  r = cu->CtxSynchronize();
  if (r != CU_SUCCESS) {
    run_error(c, res, r, "setting buffers up");
    goto done;
  }
  run_core(c, prog, fns, rb, &tm, NULL, NULL, res);

done:
  if (!c->broken)
    for (int b = 0; b < prog->n_bufs; b++)
      if (rb[b].ptr) cu->MemFree(rb[b].ptr);
  unload_module(c, mod);
  res->ctx_broken = c->broken;
  free(rb);
  free(fns);
}

void rt_cuda_bufs_for_params(const rt_tensors *ts, rt_cuda_buf *out) {
  for (int i = 0; i < ts->n; i++)
    out[i] = (rt_cuda_buf){ts->t[i].buf->name, ts->t[i].buf->dtype, ts->t[i].numel, i,
                           ts->t[i].is_output};
}

void rt_cuda_host_from_tensors(const rt_cuda_program *prog, const rt_tensors *ts,
                               void **host) {
  for (int b = 0; b < prog->n_bufs; b++) {
    int p = prog->bufs[b].param;
    host[b] = p >= 0 && p < ts->n ? ts->args[p] : NULL;
  }
}

bool rt_cuda_program_from_lowered(const lw_program *lp, dg_arena *a, rt_cuda_program *out,
                                  dg_status *st) {
  memset(out, 0, sizeof *out);
  int nb = lp->n_params + lp->n_allocs;
  rt_cuda_buf *bufs = DG_ANEWN(a, rt_cuda_buf, nb ? nb : 1);
  for (int i = 0; i < nb; i++) {
    bool is_param = i < lp->n_params;
    const dg_buffer *b = is_param ? lp->params[i] : lp->allocs[i - lp->n_params];
    bufs[i] = (rt_cuda_buf){b->name, b->dtype, ir_buffer_numel(b), is_param ? i : -1,
                            is_param && codegen_param_written(lp->f, i)};
  }
  rt_cuda_launch *ls = DG_ANEWN(a, rt_cuda_launch, lp->n_kernels ? lp->n_kernels : 1);
  for (int k = 0; k < lp->n_kernels; k++) {
    const lw_kernel *kn = &lp->kernels[k];
    rt_cuda_launch *l = &ls[k];
    l->kernel = kn->name;
    for (int d = 0; d < 3; d++) {
      if (kn->grid[d] < 1 || kn->grid[d] > INT32_MAX || kn->block[d] < 1 || kn->block[d] > 1024)
        return dg_fail(st, DG_ERR_INVALID, "%s: launch dims %lldx%lldx%lld / %lldx%lldx%lld out of range",
                       kn->name, (long long)kn->grid[0], (long long)kn->grid[1],
                       (long long)kn->grid[2], (long long)kn->block[0], (long long)kn->block[1],
                       (long long)kn->block[2]);
      l->grid[d] = (int)kn->grid[d];
      l->block[d] = (int)kn->block[d];
    }
    int64_t dyn = lower_kernel_shared_bytes(kn, true);
    if (dyn < 0 || dyn > INT32_MAX)
      return dg_fail(st, DG_ERR_INVALID, "%s: %lld bytes of dynamic shared memory", kn->name,
                     (long long)dyn);
    l->shared_bytes = (int)dyn;
    rt_cuda_arg *args = DG_ANEWN(a, rt_cuda_arg, kn->n_params ? kn->n_params : 1);
    for (int j = 0; j < kn->n_params; j++) {
      int found = -1;
      for (int i = 0; i < nb && found < 0; i++) {
        const dg_buffer *b = i < lp->n_params ? lp->params[i] : lp->allocs[i - lp->n_params];
        if (b == kn->params[j]) found = i;
      }
      if (found < 0)
        return dg_fail(st, DG_ERR_INVALID, "%s: parameter %s is neither a parameter nor an "
                       "allocation of the program", kn->name, kn->params[j]->name);
      args[j] = (rt_cuda_arg){RT_CUDA_ARG_BUF, found, 0, 0};
    }
    l->args = args;
    l->n_args = kn->n_params;
  }
  *out = (rt_cuda_program){bufs, nb, ls, lp->n_kernels};
  return true;
}

/* ---- messages ---------------------------------------------------------------- */

enum { JOB_MAGIC = 0x31424a43 /* "CJB1" */, REPLY_MAGIC = 0x32525243 /* "CRR2" */ };

void rt_cuda_job_encode(const rt_cuda_job *job, dg_str *out) {
  const rt_cuda_program *prog = job->prog;
  rt_wire_put_i32(out, JOB_MAGIC);
  rt_wire_put_i32(out, job->timing.warmup);
  rt_wire_put_i32(out, job->timing.repeats);
  rt_wire_put_i32(out, job->timing.flush_l2);
  rt_wire_put_f64(out, job->timing.timeout_s);
  rt_wire_put_i64(out, (int64_t)job->seed);
  rt_wire_put_text(out, job->data_path);
  rt_wire_put_text(out, job->bin ? job->bin->arch : "");
  rt_wire_put_bytes(out, job->bin ? job->bin->image : NULL, job->bin && job->bin->image ? job->bin->size : 0);
  rt_wire_put_i32(out, prog->n_bufs);
  for (int b = 0; b < prog->n_bufs; b++) {
    const rt_cuda_buf *bf = &prog->bufs[b];
    rt_wire_put_text(out, bf->name);
    rt_wire_put_i32(out, (int32_t)bf->dtype);
    rt_wire_put_i64(out, bf->numel);
    rt_wire_put_i32(out, bf->param);
    rt_wire_put_i32(out, bf->is_output);
  }
  rt_wire_put_i32(out, prog->n_launches);
  for (int i = 0; i < prog->n_launches; i++) {
    const rt_cuda_launch *l = &prog->launches[i];
    rt_wire_put_text(out, l->kernel);
    for (int d = 0; d < 3; d++) rt_wire_put_i32(out, l->grid[d]);
    for (int d = 0; d < 3; d++) rt_wire_put_i32(out, l->block[d]);
    rt_wire_put_i32(out, l->shared_bytes);
    rt_wire_put_i32(out, l->n_args);
    for (int a = 0; a < l->n_args; a++) {
      rt_wire_put_i32(out, (int32_t)l->args[a].kind);
      rt_wire_put_i32(out, l->args[a].buf);
      rt_wire_put_i64(out, l->args[a].i);
      rt_wire_put_f64(out, l->args[a].f);
    }
  }
}

typedef struct {
  rt_cuda_job job;
  rt_cubin bin; /* image in the arena, aligned as ELF wants */
  rt_cuda_program prog;
} decoded_job;

static bool job_decode(const void *p, size_t n, dg_arena *a, decoded_job *d) {
  rt_wire_reader r = {p, n, 0, false};
  memset(d, 0, sizeof *d);
  if (rt_wire_get_i32(&r) != JOB_MAGIC) return false;
  d->job.timing.warmup = rt_wire_get_i32(&r);
  d->job.timing.repeats = rt_wire_get_i32(&r);
  d->job.timing.flush_l2 = rt_wire_get_i32(&r) != 0;
  d->job.timing.timeout_s = rt_wire_get_f64(&r);
  d->job.seed = (uint64_t)rt_wire_get_i64(&r);
  char *path = rt_wire_get_text(&r, a);
  d->job.data_path = *path ? path : NULL;
  snprintf(d->bin.arch, sizeof d->bin.arch, "%s", rt_wire_get_text(&r, a));
  size_t img_n = 0;
  const void *img = rt_wire_get_bytes(&r, &img_n);
  if (img && img_n) {
    d->bin.image = dg_arena_memdup(a, img, img_n + 1);
    d->bin.image[img_n] = 0;
    d->bin.size = img_n;
    d->bin.is_ptx = strncmp(d->bin.arch, "compute_", 8) == 0;
  }
  int nb = rt_wire_get_i32(&r);
  if (r.bad || nb < 0 || nb > 1 << 16) return false;
  rt_cuda_buf *bufs = DG_ANEWN(a, rt_cuda_buf, nb ? nb : 1);
  for (int b = 0; b < nb; b++) {
    bufs[b].name = rt_wire_get_text(&r, a);
    bufs[b].dtype = (dg_dtype)rt_wire_get_i32(&r);
    bufs[b].numel = rt_wire_get_i64(&r);
    bufs[b].param = rt_wire_get_i32(&r);
    bufs[b].is_output = rt_wire_get_i32(&r) != 0;
  }
  int nl = rt_wire_get_i32(&r);
  if (r.bad || nl < 0 || nl > 1 << 16) return false;
  rt_cuda_launch *ls = DG_ANEWN(a, rt_cuda_launch, nl ? nl : 1);
  for (int i = 0; i < nl && !r.bad; i++) {
    rt_cuda_launch *l = &ls[i];
    l->kernel = rt_wire_get_text(&r, a);
    for (int k = 0; k < 3; k++) l->grid[k] = rt_wire_get_i32(&r);
    for (int k = 0; k < 3; k++) l->block[k] = rt_wire_get_i32(&r);
    l->shared_bytes = rt_wire_get_i32(&r);
    l->n_args = rt_wire_get_i32(&r);
    if (r.bad || l->n_args < 0 || l->n_args > 1024) return false;
    rt_cuda_arg *args = DG_ANEWN(a, rt_cuda_arg, l->n_args ? l->n_args : 1);
    for (int k = 0; k < l->n_args; k++) {
      int kind = rt_wire_get_i32(&r);
      if (kind < RT_CUDA_ARG_BUF || kind > RT_CUDA_ARG_F32) r.bad = true;
      args[k].kind = (rt_cuda_arg_kind)kind;
      args[k].buf = rt_wire_get_i32(&r);
      args[k].i = rt_wire_get_i64(&r);
      args[k].f = rt_wire_get_f64(&r);
    }
    l->args = args;
  }
  d->prog = (rt_cuda_program){bufs, nb, ls, nl};
  d->job.bin = &d->bin;
  d->job.prog = &d->prog;
  return !r.bad && r.at == r.n;
}

static void result_encode(const rt_cuda_result *res, dg_str *out) {
  rt_wire_put_i32(out, REPLY_MAGIC);
  rt_wire_put_i32(out, (int32_t)res->fail);
  rt_wire_put_text(out, res->reason);
  rt_wire_put_i32(out, res->t.n);
  rt_wire_put_f64(out, res->t.median);
  rt_wire_put_f64(out, res->t.min);
  rt_wire_put_f64(out, res->t.max);
  rt_wire_put_f64(out, res->t.q1);
  rt_wire_put_f64(out, res->t.q3);
  rt_wire_put_i32(out, res->checked);
  rt_wire_put_i64(out, res->check.K);
  rt_wire_put_f64(out, res->check.max_abs);
  rt_wire_put_f64(out, res->check.max_rel);
  rt_wire_put_i64(out, res->check.n_checked);
  rt_wire_put_i64(out, res->check.n_bad);
  rt_wire_put_text(out, res->check.first_bad);
  rt_wire_put_i32(out, res->check.pass);
  rt_wire_put_i32(out, res->ctx_broken);
  rt_wire_put_i32(out, res->data_cached);
  rt_wire_put_f64(out, res->setup_s);
  rt_wire_put_f64(out, res->worker_s);
}

static bool result_decode(const void *p, size_t n, rt_cuda_result *res) {
  rt_wire_reader r = {p, n, 0, false};
  dg_arena *a = dg_arena_new();
  memset(res, 0, sizeof *res);
  bool ok = rt_wire_get_i32(&r) == REPLY_MAGIC;
  int f = rt_wire_get_i32(&r);
  res->fail = f >= 0 && f < RT_FAIL_COUNT ? (rt_fail)f : RT_FAIL_CRASH;
  snprintf(res->reason, sizeof res->reason, "%s", rt_wire_get_text(&r, a));
  res->t.n = rt_wire_get_i32(&r);
  res->t.median = rt_wire_get_f64(&r);
  res->t.min = rt_wire_get_f64(&r);
  res->t.max = rt_wire_get_f64(&r);
  res->t.q1 = rt_wire_get_f64(&r);
  res->t.q3 = rt_wire_get_f64(&r);
  res->checked = rt_wire_get_i32(&r) != 0;
  res->check.K = rt_wire_get_i64(&r);
  res->check.max_abs = rt_wire_get_f64(&r);
  res->check.max_rel = rt_wire_get_f64(&r);
  res->check.n_checked = rt_wire_get_i64(&r);
  res->check.n_bad = rt_wire_get_i64(&r);
  snprintf(res->check.first_bad, sizeof res->check.first_bad, "%s", rt_wire_get_text(&r, a));
  res->check.pass = rt_wire_get_i32(&r) != 0;
  res->ctx_broken = rt_wire_get_i32(&r) != 0;
  res->data_cached = rt_wire_get_i32(&r) != 0;
  res->setup_s = rt_wire_get_f64(&r);
  res->worker_s = rt_wire_get_f64(&r);
  dg_arena_free(a);
  return ok && !r.bad && r.at == r.n;
}

/* ---- data set files ------------------------------------------------------------ */

/* Layout: magic "DGCUDAT1", u32 version, u32 n, i64 K, header size u64;
 * per tensor: name (i64 length + bytes), i32 dtype, i32 ndim, i64
 * shape[ndim], i32 is_output, i64 numel, u64 offset and u64 bytes of its
 * array (inputs: the kernel's storage; outputs: the reference's). Arrays
 * follow the header, each 64-byte aligned. */
static const char data_magic[8] = {'D', 'G', 'C', 'U', 'D', 'A', 'T', '1'};
enum { DATA_VERSION = 1 };

static size_t ref_elem_bytes(dg_dtype t) { return dg_dtype_is_float(t) ? 8 : (size_t)dg_dtype_bytes(t); }

static size_t align64(size_t x) { return (x + 63) & ~(size_t)63; }

static void data_header(const rt_tensors *ts, int64_t K, size_t hdr, dg_str *h) {
  dg_str_putn(h, data_magic, 8);
  rt_wire_put_i32(h, DATA_VERSION);
  rt_wire_put_i32(h, ts->n);
  rt_wire_put_i64(h, K);
  rt_wire_put_i64(h, (int64_t)hdr);
  size_t off = align64(hdr);
  for (int i = 0; i < ts->n; i++) {
    const rt_tensor *t = &ts->t[i];
    const dg_buffer *b = t->buf;
    rt_wire_put_text(h, b->name);
    rt_wire_put_i32(h, (int32_t)b->dtype);
    rt_wire_put_i32(h, b->ndim);
    for (int d = 0; d < b->ndim; d++) rt_wire_put_i64(h, b->shape[d]);
    rt_wire_put_i32(h, t->is_output);
    rt_wire_put_i64(h, t->numel);
    size_t bytes = (size_t)t->numel *
                   (t->is_output ? ref_elem_bytes(b->dtype) : (size_t)dg_dtype_bytes(b->dtype));
    rt_wire_put_i64(h, (int64_t)off);
    rt_wire_put_i64(h, (int64_t)bytes);
    off = align64(off + bytes);
  }
}

bool rt_cuda_data_write(const rt_tensors *ts, int64_t K, const char *path, dg_status *st) {
  dg_str h;
  dg_str_init(&h);
  data_header(ts, K, 0, &h);
  size_t hdr = h.len; /* offsets do not change the header's size */
  dg_str_clear(&h);
  data_header(ts, K, hdr, &h);
  DG_ASSERT(h.len == hdr);

  dg_str tmp;
  dg_str_init(&tmp);
  dg_str_printf(&tmp, "%s.tmp%d", path, (int)getpid());
  FILE *f = fopen(tmp.s, "wb");
  bool ok = f != NULL;
  if (!ok) dg_fail(st, DG_ERR_IO, "%s: cannot write the data set", path);
  static const char zeros[64];
  size_t at = 0;
  if (ok) {
    ok = fwrite(h.s, 1, h.len, f) == h.len;
    at = h.len;
  }
  for (int i = 0; i < ts->n && ok; i++) {
    const rt_tensor *t = &ts->t[i];
    size_t pad = align64(at) - at;
    ok = fwrite(zeros, 1, pad, f) == pad;
    at += pad;
    size_t bytes = (size_t)t->numel * (t->is_output ? ref_elem_bytes(t->buf->dtype)
                                                    : (size_t)dg_dtype_bytes(t->buf->dtype));
    const void *src = t->is_output ? t->ref : t->data;
    ok = ok && fwrite(src, 1, bytes, f) == bytes;
    at += bytes;
  }
  if (f) {
    ok = fflush(f) == 0 && ok;
    ok = fclose(f) == 0 && ok;
  }
  if (ok && rename(tmp.s, path) != 0) ok = false;
  if (!ok) {
    if (f) dg_fail(st, DG_ERR_IO, "%s: cannot write the data set (disk full?)", path);
    unlink(tmp.s);
  }
  dg_str_free(&tmp);
  dg_str_free(&h);
  return ok;
}

/* A mapped data set: tensors whose inputs and references point into the
 * mapping; outputs get their own host arrays (the GPU's results). */
typedef struct {
  char path[512];
  dev_t dev;
  ino_t ino;
  struct timespec mtime;
  off_t size;
  void *map;
  size_t map_len;
  dg_arena *arena;
  rt_tensors ts;
  int64_t K;
  uint64_t gen; /* a number of its own for each mapping this process made */
} mapped_data;

static void data_unmap(mapped_data *m) {
  if (m->ts.t)
    for (int i = 0; i < m->ts.n; i++)
      if (m->ts.t[i].is_output) free(m->ts.t[i].data);
  if (m->map) munmap(m->map, m->map_len);
  if (m->arena) dg_arena_free(m->arena);
  memset(m, 0, sizeof *m);
}

static bool data_map(mapped_data *m, const char *path, dg_status *st) {
  struct stat sb;
  if (stat(path, &sb) != 0) return dg_fail(st, DG_ERR_IO, "%s: no such data set", path);
  if (m->map && strcmp(m->path, path) == 0 && m->dev == sb.st_dev && m->ino == sb.st_ino &&
      m->size == sb.st_size && m->mtime.tv_sec == sb.st_mtim.tv_sec &&
      m->mtime.tv_nsec == sb.st_mtim.tv_nsec)
    return true;
  data_unmap(m);
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return dg_fail(st, DG_ERR_IO, "%s: cannot open the data set", path);
  size_t len = (size_t)sb.st_size;
  void *map = len ? mmap(NULL, len, PROT_READ, MAP_PRIVATE, fd, 0) : MAP_FAILED;
  close(fd);
  if (map == MAP_FAILED) return dg_fail(st, DG_ERR_IO, "%s: cannot map the data set", path);
  m->map = map;
  m->map_len = len;
  m->arena = dg_arena_new();
  rt_wire_reader r = {map, len, 0, false};
  const char *magic = rt_wire_take(&r, 8);
  if (!magic || memcmp(magic, data_magic, 8) != 0 || rt_wire_get_i32(&r) != DATA_VERSION) {
    data_unmap(m);
    return dg_fail(st, DG_ERR_PARSE, "%s: not a dragon data set (bad magic or version)", path);
  }
  int n = rt_wire_get_i32(&r);
  m->K = rt_wire_get_i64(&r);
  rt_wire_get_i64(&r);
  if (r.bad || n < 0 || n > 1 << 16) {
    data_unmap(m);
    return dg_fail(st, DG_ERR_PARSE, "%s: corrupt header", path);
  }
  rt_tensors *ts = &m->ts;
  ts->n = n;
  ts->t = DG_ANEWN(m->arena, rt_tensor, n ? n : 1);
  ts->args = DG_ANEWN(m->arena, void *, n ? n : 1);
  ts->ref_args = DG_ANEWN(m->arena, void *, n ? n : 1);
  for (int i = 0; i < n && !r.bad; i++) {
    dg_buffer *b = DG_ANEW(m->arena, dg_buffer);
    b->name = rt_wire_get_text(&r, m->arena);
    int dt = rt_wire_get_i32(&r);
    b->ndim = rt_wire_get_i32(&r);
    if (dt < 0 || dt >= DG_DTYPE_COUNT || b->ndim < 0 || b->ndim > DG_MAX_DIMS) {
      r.bad = true;
      break;
    }
    b->dtype = (dg_dtype)dt;
    for (int d = 0; d < b->ndim; d++) b->shape[d] = rt_wire_get_i64(&r);
    rt_tensor *t = &ts->t[i];
    t->buf = b;
    t->is_output = rt_wire_get_i32(&r) != 0;
    t->numel = rt_wire_get_i64(&r);
    int64_t off = rt_wire_get_i64(&r), bytes = rt_wire_get_i64(&r);
    size_t want = (size_t)(t->numel < 0 ? 0 : t->numel) *
                  (t->is_output ? ref_elem_bytes(b->dtype) : (size_t)dg_dtype_bytes(b->dtype));
    if (r.bad || t->numel < 0 || off < 0 || bytes < 0 || (size_t)bytes != want ||
        (size_t)off > len || (size_t)bytes > len - (size_t)off) {
      r.bad = true;
      break;
    }
    void *arr = (char *)map + off;
    if (t->is_output) {
      t->ref = arr;
      t->data = malloc(want ? (size_t)t->numel * (size_t)dg_dtype_bytes(b->dtype) : 1);
      if (!t->data) {
        r.bad = true;
        break;
      }
    } else {
      t->data = arr;
      t->ref = NULL; /* inputs' references are not needed by the check */
    }
    ts->args[i] = t->data;
  }
  if (r.bad) {
    data_unmap(m);
    return dg_fail(st, DG_ERR_PARSE, "%s: corrupt tensor table", path);
  }
  snprintf(m->path, sizeof m->path, "%s", path);
  m->dev = sb.st_dev;
  m->ino = sb.st_ino;
  m->size = sb.st_size;
  m->mtime = sb.st_mtim;
  static uint64_t last_gen;
  m->gen = ++last_gen;
  return true;
}

/* ---- the worker's side ---------------------------------------------------------- */

/* The device side of a data set, kept by a worker across jobs: per tensor a
 * working buffer the kernels get and, for inputs, a pristine copy that
 * each job restores the working buffer from (device to device), so that
 * a kernel that writes where it should not cannot leak into the next
 * job. Outputs are poisoned again before every run. Built from one mapping
 * of the data set (its generation); rebuilt when the file changes. */
typedef struct {
  uint64_t gen;        /* mapped_data.gen it was built from; 0: none */
  int n;
  cu_devptr *work;     /* (n) */
  cu_devptr *pristine; /* (n) inputs only, 0 for outputs */
  size_t *bytes;       /* (n) in the kernel's storage, at least 1 */
} device_data;

/* Per worker process: its CUDA context, the last data set it mapped and
 * that data set's device buffers. */
static rt_cuda_ctx *worker_ctx;
static char worker_ctx_err[512];
static mapped_data worker_data;
static device_data worker_dev;

static void device_data_free(rt_cuda_ctx *c, device_data *d) {
  if (c && !c->broken)
    for (int i = 0; i < d->n; i++) {
      if (d->work[i]) c->cu->MemFree(d->work[i]);
      if (d->pristine[i]) c->cu->MemFree(d->pristine[i]);
    }
  free(d->work);
  free(d->pristine);
  free(d->bytes);
  memset(d, 0, sizeof *d);
}

/* Allocates and uploads the device side of m. */
static bool device_data_build(rt_cuda_ctx *c, device_data *d, const mapped_data *m,
                              rt_cuda_result *res) {
  const rt_cu_api *cu = c->cu;
  device_data_free(c, d);
  int n = m->ts.n;
  d->n = n;
  d->work = dg_calloc((size_t)(n ? n : 1), sizeof *d->work);
  d->pristine = dg_calloc((size_t)(n ? n : 1), sizeof *d->pristine);
  d->bytes = dg_calloc((size_t)(n ? n : 1), sizeof *d->bytes);
  char text[200];
  for (int i = 0; i < n; i++) {
    const rt_tensor *t = &m->ts.t[i];
    size_t bytes = (size_t)t->numel * (size_t)dg_dtype_bytes(t->buf->dtype);
    d->bytes[i] = bytes ? bytes : 1;
    cu_devptr w = 0, p = 0;
    cu_result r = cu->MemAlloc(&w, d->bytes[i]);
    if (r != CU_SUCCESS) w = 0;
    if (r == CU_SUCCESS && !t->is_output) {
      r = cu->MemAlloc(&p, d->bytes[i]);
      if (r != CU_SUCCESS) p = 0;
    }
    d->work[i] = w;
    d->pristine[i] = p;
    if (r != CU_SUCCESS) {
      rt_cu_error_text(cu, r, text, sizeof text);
      set_fail(res, RT_FAIL_SETUP, "%s: allocating %s (%zu bytes) on the device: %s", m->path,
               t->buf->name, d->bytes[i], text);
      device_data_free(c, d);
      return false;
    }
    if (!t->is_output && bytes) {
      r = cu->MemcpyHtoD(d->pristine[i], t->data, bytes);
      if (r != CU_SUCCESS) {
        run_error(c, res, r, "uploading the data set");
        device_data_free(c, d);
        return false;
      }
    }
  }
  cu_result r = cu->CtxSynchronize();
  if (r != CU_SUCCESS) {
    run_error(c, res, r, "uploading the data set");
    device_data_free(c, d);
    return false;
  }
  d->gen = m->gen;
  return true;
}

/* Whether the pristine inputs still hold the data set's bytes (a kernel
 * writing far out of bounds could reach them). */
static bool device_data_intact(rt_cuda_ctx *c, const device_data *d, const mapped_data *m) {
  bool ok = true;
  for (int i = 0; i < d->n && ok; i++) {
    const rt_tensor *t = &m->ts.t[i];
    size_t bytes = (size_t)t->numel * (size_t)dg_dtype_bytes(t->buf->dtype);
    if (t->is_output || !bytes) continue;
    void *tmp = malloc(bytes);
    if (!tmp) return false; /* cannot tell: rebuild to be sure */
    ok = c->cu->MemcpyDtoH(tmp, d->pristine[i], bytes) == CU_SUCCESS &&
         memcmp(tmp, t->data, bytes) == 0;
    free(tmp);
  }
  return ok;
}

typedef struct {
  const rt_tensors *ts;
  int64_t K;
} check_ctx;

static void check_outputs(void *p, rt_cuda_result *res) {
  const check_ctx *k = p;
  rt_check_outputs(k->ts, k->K, &res->check);
  res->checked = true;
  if (!res->check.pass)
    set_fail(res, RT_FAIL_WRONG, "%lld of %lld elements wrong (max abs error %.3g); first %s",
             (long long)res->check.n_bad, (long long)res->check.n_checked, res->check.max_abs,
             res->check.first_bad[0] ? res->check.first_bad : "(no outputs)");
}

/* A run over the worker's device buffers of the data set: parameters are
 * the data set's tensors, intermediates carved out of the context's
 * scratch block; checked against the data set's reference. */
static void run_cached(rt_cuda_ctx *c, const device_data *d, const mapped_data *m,
                       const rt_cuda_program *prog, const cu_handle *fns, const rt_cuda_timing *tm,
                       rt_cuda_result *res) {
  run_buf *rb = dg_calloc((size_t)(prog->n_bufs ? prog->n_bufs : 1), sizeof *rb);
  size_t scratch = 0;
  for (int b = 0; b < prog->n_bufs; b++)
    if (prog->bufs[b].param < 0) scratch += align_up(buf_bytes(&prog->bufs[b]), 256);
  if (scratch && !grow_device(c, &c->scratch, &c->scratch_bytes, scratch,
                              "intermediate buffers", res)) {
    free(rb);
    return;
  }
  size_t off = 0;
  for (int b = 0; b < prog->n_bufs; b++) {
    const rt_cuda_buf *bf = &prog->bufs[b];
    run_buf *x = &rb[b];
    if (bf->param < 0) {
      x->ptr = c->scratch + off;
      x->bytes = buf_bytes(bf);
      x->poison = true;
      off += align_up(x->bytes, 256);
      continue;
    }
    /* matches() said the parameter is the data set's tensor of that size */
    const rt_tensor *t = &m->ts.t[bf->param];
    x->ptr = d->work[bf->param];
    x->bytes = d->bytes[bf->param];
    x->pristine = d->pristine[bf->param];
    x->poison = !x->pristine;
    x->back = t->is_output ? t->data : NULL;
  }
  /* an output the program does not copy back must not pass on the values
   * of an earlier job: every output on the host starts poisoned */
  for (int i = 0; i < m->ts.n; i++) {
    const rt_tensor *t = &m->ts.t[i];
    if (t->is_output)
      memset(t->data, dg_dtype_is_float(t->buf->dtype) ? 0xFF : 0xA5,
             (size_t)t->numel * (size_t)dg_dtype_bytes(t->buf->dtype));
  }
  check_ctx k = {&m->ts, m->K};
  run_core(c, prog, fns, rb, tm, check_outputs, &k, res);
  free(rb);
}

/* Inputs drawn from the seed, for a job without a data set: one tensor per
 * parameter buffer of the program, as rt_data_fill fills them. */
static bool seeded_tensors(const rt_cuda_program *prog, uint64_t seed, dg_arena *a,
                           rt_tensors *ts, dg_status *st) {
  int n = 0;
  for (int b = 0; b < prog->n_bufs; b++)
    if (prog->bufs[b].param >= n) n = prog->bufs[b].param + 1;
  memset(ts, 0, sizeof *ts);
  ts->n = n;
  ts->t = DG_ANEWN(a, rt_tensor, n ? n : 1);
  ts->args = DG_ANEWN(a, void *, n ? n : 1);
  ts->ref_args = DG_ANEWN(a, void *, n ? n : 1);
  for (int b = 0; b < prog->n_bufs; b++) {
    const rt_cuda_buf *bf = &prog->bufs[b];
    if (bf->param < 0) continue;
    rt_tensor *t = &ts->t[bf->param];
    if (t->buf) return dg_fail(st, DG_ERR_INVALID, "program: two buffers for parameter %d", bf->param);
    dg_buffer *db = DG_ANEW(a, dg_buffer);
    db->name = bf->name ? bf->name : "?";
    db->dtype = bf->dtype;
    db->ndim = 1;
    db->shape[0] = bf->numel;
    t->buf = db;
    t->numel = bf->numel;
    t->is_output = bf->is_output;
    size_t n1 = (size_t)bf->numel * (size_t)dg_dtype_bytes(bf->dtype);
    size_t n2 = (size_t)bf->numel * ref_elem_bytes(bf->dtype);
    t->data = malloc(n1 ? n1 : 1);
    t->ref = malloc(n2 ? n2 : 1);
    if (!t->data || !t->ref) return dg_fail(st, DG_ERR_RUNTIME, "out of host memory for %s", db->name);
    ts->args[bf->param] = t->data;
  }
  for (int i = 0; i < n; i++)
    if (!ts->t[i].buf) return dg_fail(st, DG_ERR_INVALID, "program: no buffer for parameter %d", i);
  rt_data_fill(ts, seed, RT_DIST_UNIFORM);
  return true;
}

static void seeded_free(rt_tensors *ts) {
  for (int i = 0; i < ts->n; i++) {
    free(ts->t[i].data);
    free(ts->t[i].ref);
  }
}

/* The program's parameter buffers must match the data set's tensors. */
static bool matches(const rt_cuda_program *prog, const rt_tensors *ts, dg_status *st) {
  for (int b = 0; b < prog->n_bufs; b++) {
    const rt_cuda_buf *bf = &prog->bufs[b];
    if (bf->param < 0) continue;
    if (bf->param >= ts->n)
      return dg_fail(st, DG_ERR_INVALID, "buffer %s: parameter %d, the data set has %d", bf->name,
                     bf->param, ts->n);
    const rt_tensor *t = &ts->t[bf->param];
    if (t->buf->dtype != bf->dtype || t->numel != bf->numel || t->is_output != bf->is_output)
      return dg_fail(st, DG_ERR_INVALID,
                     "buffer %s: %s[%lld]%s in the program, %s %s[%lld]%s in the data set",
                     bf->name, dg_dtype_name(bf->dtype), (long long)bf->numel,
                     bf->is_output ? " output" : "", t->buf->name, dg_dtype_name(t->buf->dtype),
                     (long long)t->numel, t->is_output ? " output" : "");
  }
  return true;
}

/* Brings CUDA up in this worker unless it is up; false with the reason in
 * worker_ctx_err. Tried again on each job while it fails: what kept it
 * from starting (a GPU held by a process that has since gone) may pass. */
static int worker_gpu_lock = -2; /* the GPU's lock file; -2: not opened yet */

static bool worker_ctx_up(void) {
  if (worker_ctx) return true;
  dg_status st;
  if (rt_cuda_ctx_new(0, &worker_ctx, &st)) return true;
  snprintf(worker_ctx_err, sizeof worker_ctx_err, "%s", st.msg);
  return false;
}

void rt_cuda_worker_init(void) { worker_ctx_up(); }

/* A job with a data set: its device buffers (built on the first job of the
 * data set), the module, the run. Should the check fail on inputs that an
 * earlier job damaged on the device, they are rebuilt and the job run again. */
static void job_cached(rt_cuda_ctx *c, const decoded_job *d, rt_cuda_result *res) {
  const mapped_data *m = &worker_data;
  rt_cuda_timing tm;
  timing_defaults(&d->job.timing, &tm);
  res->data_cached = worker_dev.gen == m->gen && worker_dev.gen != 0;
  if (!res->data_cached) {
    double t0 = dg_now();
    if (!device_data_build(c, &worker_dev, m, res)) return;
    res->setup_s = dg_now() - t0;
  }
  cu_handle mod = NULL;
  cu_handle *fns = dg_calloc((size_t)d->prog.n_launches, sizeof *fns);
  if (load_module(c, &d->bin, &d->prog, &mod, fns, res)) {
    run_cached(c, &worker_dev, m, &d->prog, fns, &tm, res);
    if (res->fail == RT_FAIL_WRONG && !c->broken && !device_data_intact(c, &worker_dev, m)) {
      rt_cuda_result again;
      memset(&again, 0, sizeof again);
      double t0 = dg_now();
      if (device_data_build(c, &worker_dev, m, &again)) {
        again.setup_s = res->setup_s + dg_now() - t0;
        run_cached(c, &worker_dev, m, &d->prog, fns, &tm, &again);
      }
      *res = again;
      res->data_cached = false;
    }
  }
  unload_module(c, mod);
  res->ctx_broken = c->broken;
  free(fns);
}

bool rt_cuda_job_handle(void *ctx, const void *job, size_t len, dg_str *reply) {
  (void)ctx;
  double t_start = dg_now();
  rt_cuda_result res;
  memset(&res, 0, sizeof res);
  dg_arena *a = dg_arena_new();
  decoded_job d;
  dg_status st;
  dg_status_ok(&st);
  if (!job_decode(job, len, a, &d)) {
    set_fail(&res, RT_FAIL_SETUP, "worker: malformed job (%zu bytes)", len);
    goto reply;
  }
  rt_tensors seeded = {0};
  const rt_tensors *ts = NULL;
  if (d.job.data_path) {
    if (!data_map(&worker_data, d.job.data_path, &st)) {
      set_fail(&res, RT_FAIL_SETUP, "%s", st.msg);
      goto reply;
    }
    ts = &worker_data.ts;
  } else {
    if (!seeded_tensors(&d.prog, d.job.seed, a, &seeded, &st)) {
      seeded_free(&seeded);
      set_fail(&res, RT_FAIL_SETUP, "%s", st.msg);
      goto reply;
    }
    ts = &seeded;
  }
  /* CUDA comes up when the worker starts (rt_cuda_worker_init) or else on
   * a job that gets this far, so that a bad job is reported the same with
   * or without a GPU */
  worker_ctx_up();
  if (!matches(&d.prog, ts, &st)) {
    set_fail(&res, RT_FAIL_SETUP, "%s", st.msg);
  } else if (!worker_ctx) {
    set_fail(&res, RT_FAIL_SETUP, "%s", worker_ctx_err);
  } else if (worker_ctx->broken) {
    set_fail(&res, RT_FAIL_SETUP, "cuda: the context is unusable after an earlier error");
    res.ctx_broken = true;
  } else if (!program_ok(worker_ctx, &d.prog, &res)) {
    /* res says why */
  } else {
    /* the GPU is this job's alone while it runs, whatever other processes
     * measure on it (gpu_lock.c) */
    if (worker_gpu_lock == -2) worker_gpu_lock = rt_gpu_lock_open(worker_ctx->cu, worker_ctx->dev);
    rt_gpu_lock(worker_gpu_lock);
    if (d.job.data_path) {
      worker_ctx->cu->CtxSetCurrent(worker_ctx->ctx);
      job_cached(worker_ctx, &d, &res);
    } else {
      void **host = DG_ANEWN(a, void *, d.prog.n_bufs ? d.prog.n_bufs : 1);
      rt_cuda_host_from_tensors(&d.prog, ts, host);
      rt_cuda_run(worker_ctx, &d.bin, &d.prog, host, &d.job.timing, &res);
    }
    rt_gpu_unlock(worker_gpu_lock);
  }
  if (ts == &seeded) seeded_free(&seeded);
reply:
  res.worker_s = dg_now() - t_start;
  result_encode(&res, reply);
  dg_arena_free(a);
  return !res.ctx_broken;
}

bool rt_cuda_pool_new(int n_workers, int max_active, double timeout_s, rt_worker_pool **out,
                      dg_status *st) {
  rt_worker_opts o = {n_workers, max_active, timeout_s, NULL, NULL, "cuda"};
  return rt_worker_pool_new(&o, out, st);
}

void rt_cuda_result_from_worker(const rt_worker_result *wr, rt_cuda_result *out) {
  memset(out, 0, sizeof *out);
  switch (wr->outcome) {
    case RT_WORKER_REPLIED:
      if (!result_decode(wr->reply, wr->reply_len, out)) {
        memset(out, 0, sizeof *out);
        out->fail = RT_FAIL_CRASH;
        snprintf(out->reason, sizeof out->reason, "worker: malformed reply (%zu bytes)", wr->reply_len);
      }
      break;
    case RT_WORKER_CRASHED:
      out->fail = RT_FAIL_CRASH;
      snprintf(out->reason, sizeof out->reason, "worker %s", wr->reason);
      break;
    case RT_WORKER_TIMED_OUT:
      out->fail = RT_FAIL_TIMEOUT;
      snprintf(out->reason, sizeof out->reason, "worker %s", wr->reason);
      break;
  }
}
