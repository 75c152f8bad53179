/* cuda_run.c: running a compiled program on the GPU, checking and timing
 * it: the CUDA context, the run, the statistics of its times, and the
 * program of a lowered kernel.
 *
 * A run (rt_cuda_run_bufs): set the buffers up on the stream (inputs
 * restored from a pristine device copy or uploaded, outputs and
 * intermediates poisoned: all-ones bytes are NaN in f16, f32 and f64; 0xA5
 * for integers, as data.c poisons on the CPU), run once and copy the
 * outputs back through page-locked memory (the checked run), then queue the
 * warm-up runs and the timed runs and, while the GPU works through them,
 * compare the outputs on the CPU. A timed run is bracketed by two events on
 * the stream around the launches only; before it, when asked, a memset of a
 * buffer four times the L2 (at least 256 MiB) evicts what the previous run
 * left there, so every run starts from device memory as a kernel in a real
 * model would. Up to RT_CUDA_RING timed runs are queued at once; each one's
 * time is read from its events when it has finished, so the host never
 * stalls the stream between repeats. Every run drains the stream before it
 * returns: a buffer or a module is never reused or freed under a kernel.
 *
 * Failures are classified for the search: the launch refused (bad dims,
 * too many resources), an illegal or misaligned address, another error
 * while running, a run past its deadline. A sticky error or a timeout
 * leaves the context unusable; the result says so, and a worker that sees
 * it retires (worker.c) so that its replacement starts clean. Waiting polls
 * the event with a deadline, so a hanging kernel is reported, not waited on.
 *
 * The GPU job that workers run over the device buffers they keep across
 * jobs is cuda_job.c's; the data it runs on, cuda_data.c's.
 *
 * It does not pick a GPU among several (device 0 for workers), capture
 * graphs, or rotate input sets.
 */
#include "rt/cuda_api.h"

#include "dragon/codegen.h"
#include "dragon/lower.h"

#include <math.h>
#include <sched.h>
#include <string.h>
#include <time.h>

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

/* struct rt_cuda_ctx is in cuda_api.h: the GPU job's handler uses its
 * stream, scratch block and state too. */

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
  ok = ok && RT_CU_CHECK(cu, cu->CtxGetLimit(&c->stack0, CU_LIMIT_STACK_SIZE), st,
                         "cuda: reading the stack limit");
  /* a blocking stream: it waits for the synchronous copies of the legacy
   * stream that upload data sets */
  ok = ok && RT_CU_CHECK(cu, cu->StreamCreate(&c->stream, 0), st, "cuda: cuStreamCreate");
  ok = ok && RT_CU_CHECK(cu, cu->EventCreate(&c->ev_out, 0), st, "cuda: cuEventCreate");
  ok = ok && RT_CU_CHECK(cu, cu->EventCreate(&c->ev_warm, 0), st, "cuda: cuEventCreate");
  ok = ok && RT_CU_CHECK(cu, cu->EventCreate(&c->ev_done, 0), st, "cuda: cuEventCreate");
  for (int i = 0; i < 2 * RT_CUDA_RING && ok; i++)
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
    for (int i = 0; i < 2 * RT_CUDA_RING; i++)
      if (c->ev_t[i]) cu->EventDestroy(c->ev_t[i]);
    if (c->stream) cu->StreamDestroy(c->stream);
    if (c->ctx) cu->DevicePrimaryCtxRelease(c->dev);
  }
  free(c);
}

const rt_cuda_device *rt_cuda_ctx_device(const rt_cuda_ctx *c) { return &c->info; }
bool rt_cuda_ctx_broken(const rt_cuda_ctx *c) { return c->broken; }

bool rt_cuda_memory(rt_cuda_ctx *c, size_t *free_bytes, size_t *total_bytes, dg_status *st) {
  *free_bytes = *total_bytes = 0;
  return RT_CU_CHECK(c->cu, c->cu->MemGetInfo(free_bytes, total_bytes), st,
                     "cuda: cuMemGetInfo");
}

/* ---- a run ----------------------------------------------------------------- */

void rt_cuda_fail(rt_cuda_result *res, rt_fail f, const char *fmt, ...) {
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
void rt_cuda_run_error(rt_cuda_ctx *c, rt_cuda_result *res, cu_result r, const char *where) {
  char text[200];
  rt_cu_error_text(c->cu, r, text, sizeof text);
  rt_fail f = (r == CU_ERR_ILLEGAL_ADDRESS || r == CU_ERR_MISALIGNED_ADDRESS ||
               r == CU_ERR_INVALID_ADDRESS_SPACE)
                  ? RT_FAIL_ILLEGAL_ADDRESS
                  : RT_FAIL_DEVICE;
  rt_cuda_fail(res, f, "%s: %s", where, text);
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
    rt_cuda_fail(res, RT_FAIL_TIMEOUT, "%s: still running after %.2f s", what, timeout_s);
    c->broken = true;
    res->ctx_broken = true;
    return false;
  }
  if (r != CU_SUCCESS) {
    rt_cuda_run_error(c, res, r, what);
    return false;
  }
  return true;
}

/* Records ev on the stream and waits for it. */
static bool record_and_wait(rt_cuda_ctx *c, cu_handle ev, double timeout_s, rt_cuda_result *res,
                            const char *what) {
  cu_result r = c->cu->EventRecord(ev, c->stream);
  if (r != CU_SUCCESS) {
    rt_cuda_run_error(c, res, r, what);
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
        rt_cuda_run_error(c, res, r, "launch");
      } else {
        rt_cuda_fail(res, RT_FAIL_LAUNCH,
                     "launch %d (%s, grid %dx%dx%d, block %dx%dx%d, %d B shared): %s", i, l->kernel,
                     l->grid[0], l->grid[1], l->grid[2], l->block[0], l->block[1], l->block[2],
                     l->shared_bytes, text);
      }
      return false;
    }
  }
  return true;
}

/* Checks the program's shape before anything reaches the driver. */
bool rt_cuda_program_ok(const rt_cuda_ctx *c, const rt_cuda_program *prog, rt_cuda_result *res) {
  if (prog->n_launches < 1) {
    rt_cuda_fail(res, RT_FAIL_SETUP, "program: no launches");
    return false;
  }
  if (prog->n_bufs < 0 || (prog->n_bufs > 0 && !prog->bufs)) {
    rt_cuda_fail(res, RT_FAIL_SETUP, "program: %d buffers", prog->n_bufs);
    return false;
  }
  for (int b = 0; b < prog->n_bufs; b++) {
    const rt_cuda_buf *bf = &prog->bufs[b];
    if ((unsigned)bf->dtype >= DG_DTYPE_COUNT || bf->numel < 0 || bf->numel > ((int64_t)1 << 40)) {
      rt_cuda_fail(res, RT_FAIL_SETUP, "program: buffer %d (%s): bad dtype or size", b,
                   bf->name ? bf->name : "?");
      return false;
    }
  }
  for (int i = 0; i < prog->n_launches; i++) {
    const rt_cuda_launch *l = &prog->launches[i];
    const char *k = l->kernel ? l->kernel : "?";
    if (!l->kernel || !*l->kernel) {
      rt_cuda_fail(res, RT_FAIL_SETUP, "program: launch %d has no kernel name", i);
      return false;
    }
    int64_t threads = (int64_t)l->block[0] * l->block[1] * l->block[2];
    if (l->grid[0] < 1 || l->grid[1] < 1 || l->grid[2] < 1 || l->grid[1] > 65535 ||
        l->grid[2] > 65535) {
      rt_cuda_fail(res, RT_FAIL_LAUNCH, "launch %d (%s): grid %dx%dx%d is out of range", i, k,
                   l->grid[0], l->grid[1], l->grid[2]);
      return false;
    }
    if (l->block[0] < 1 || l->block[1] < 1 || l->block[2] < 1 || l->block[2] > 64 ||
        threads > 1024) {
      rt_cuda_fail(res, RT_FAIL_LAUNCH,
                   "launch %d (%s): block %dx%dx%d is out of range (at most 1024 threads)", i, k,
                   l->block[0], l->block[1], l->block[2]);
      return false;
    }
    int limit = c->info.smem_optin > 0 ? c->info.smem_optin : 48 * 1024;
    if (l->shared_bytes < 0 || l->shared_bytes > limit) {
      rt_cuda_fail(res, RT_FAIL_LAUNCH,
                   "launch %d (%s): %d bytes of dynamic shared memory (limit %d)", i, k,
                   l->shared_bytes, limit);
      return false;
    }
    if (l->n_args < 0 || l->n_args > 1024 || (l->n_args > 0 && !l->args)) {
      rt_cuda_fail(res, RT_FAIL_SETUP, "launch %d (%s): %d arguments", i, k, l->n_args);
      return false;
    }
    for (int a = 0; a < l->n_args; a++)
      if (l->args[a].kind == RT_CUDA_ARG_BUF &&
          (l->args[a].buf < 0 || l->args[a].buf >= prog->n_bufs)) {
        rt_cuda_fail(res, RT_FAIL_SETUP, "launch %d (%s): argument %d names buffer %d of %d", i, k,
                     a, l->args[a].buf, prog->n_bufs);
        return false;
      }
  }
  return true;
}

size_t rt_cuda_buf_bytes(const rt_cuda_buf *b) {
  size_t n = (size_t)b->numel * (size_t)dg_dtype_bytes(b->dtype);
  return n ? n : 1;
}

/* Grows a device block to `want` bytes. Only between runs: nothing queued
 * may still use the old block (every run drains the stream before it
 * returns). */
bool rt_cuda_device_grow(rt_cuda_ctx *c, cu_devptr *p, size_t *have, size_t want, const char *what,
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
    rt_cuda_fail(res, RT_FAIL_SETUP, "allocating %s (%zu bytes): %s", what, want, text);
    return false;
  }
  *have = want;
  return true;
}

/* The module of bin and the function of each launch of prog (fns: n_launches). */
bool rt_cuda_module_load(rt_cuda_ctx *c, const rt_cubin *bin, const rt_cuda_program *prog,
                         cu_handle *mod, cu_handle *fns, rt_cuda_result *res) {
  const rt_cu_api *cu = c->cu;
  char text[200];
  *mod = NULL;
  if (!bin || !bin->image || bin->size == 0) {
    rt_cuda_fail(res, RT_FAIL_COMPILE, "no compiled module");
    return false;
  }
  cu_result r = cu->ModuleLoadData(mod, bin->image);
  if (r != CU_SUCCESS) {
    *mod = NULL;
    rt_cu_error_text(cu, r, text, sizeof text);
    rt_cuda_fail(res, RT_FAIL_LOAD, "loading the %s module (%zu bytes): %s", bin->arch, bin->size,
                 text);
    if (is_sticky(r)) rt_cuda_run_error(c, res, r, "loading the module");
    return false;
  }
  for (int i = 0; i < prog->n_launches; i++) {
    const rt_cuda_launch *l = &prog->launches[i];
    r = cu->ModuleGetFunction(&fns[i], *mod, l->kernel);
    if (r != CU_SUCCESS) {
      rt_cuda_fail(res, RT_FAIL_LOAD, "launch %d: the module has no kernel named '%s'", i,
                   l->kernel);
      return false;
    }
    int local = 0;
    r = cu->FuncGetAttribute(&local, CU_FUNC_ATTR_LOCAL_SIZE_BYTES, fns[i]);
    if (r != CU_SUCCESS) {
      rt_cu_error_text(cu, r, text, sizeof text);
      rt_cuda_fail(res, RT_FAIL_LOAD, "launch %d (%s): reading its local memory size: %s", i,
                   l->kernel, text);
      return false;
    }
    if (local > RT_CUDA_LOCAL_MAX) {
      int threads = c->info.sm_count * c->info.threads_per_sm;
      rt_cuda_fail(res, RT_FAIL_LAUNCH,
                   "launch %d (%s): %d bytes of local memory a thread (limit %d): %.1f GiB "
                   "reserved for the GPU's %d resident threads",
                   i, l->kernel, local, RT_CUDA_LOCAL_MAX,
                   (double)local * threads / 1073741824.0, threads);
      return false;
    }
    if ((size_t)local > c->stack0) c->stack_grown = true;
    if (l->shared_bytes > 48 * 1024) {
      r = cu->FuncSetAttribute(fns[i], CU_FUNC_ATTR_MAX_DYNAMIC_SHARED, l->shared_bytes);
      if (r != CU_SUCCESS) {
        rt_cu_error_text(cu, r, text, sizeof text);
        rt_cuda_fail(res, RT_FAIL_LAUNCH, "launch %d (%s): raising dynamic shared memory to %d: %s",
                     i, l->kernel, l->shared_bytes, text);
        return false;
      }
    }
  }
  return true;
}

void rt_cuda_module_unload(rt_cuda_ctx *c, cu_handle mod) {
  if (mod && !c->broken) c->cu->ModuleUnload(mod);
  /* the local memory a kernel of this module grew goes back to the GPU */
  if (c->stack_grown && !c->broken && c->cu->CtxSetLimit(CU_LIMIT_STACK_SIZE, c->stack0) == CU_SUCCESS)
    c->stack_grown = false;
}

/* The seconds a drain may take: everything a run queues ahead. */
static double queued_runs_s(const rt_cuda_timing *tm) {
  int queued = 1 + tm->warmup + (tm->repeats < RT_CUDA_RING ? tm->repeats : RT_CUDA_RING);
  return tm->timeout_s * queued;
}

/* Enqueues timed run k: the L2 flush, then the launches between the events
 * of slot k % RT_CUDA_RING. */
static bool enqueue_timed(rt_cuda_ctx *c, const rt_cuda_program *prog, const prepared_launch *pl,
                          const rt_cuda_timing *tm, int k, rt_cuda_result *res) {
  const rt_cu_api *cu = c->cu;
  int s = k % RT_CUDA_RING;
  cu_result r;
  if (tm->flush_l2) {
    r = cu->MemsetD32Async(c->flush, (unsigned)k, c->flush_bytes / 4, c->stream);
    if (r != CU_SUCCESS) {
      rt_cuda_run_error(c, res, r, "flushing L2");
      return false;
    }
  }
  r = cu->EventRecord(c->ev_t[2 * s], c->stream);
  if (r != CU_SUCCESS) {
    rt_cuda_run_error(c, res, r, "timing");
    return false;
  }
  if (!launch_all(c, prog, pl, res)) return false;
  r = cu->EventRecord(c->ev_t[2 * s + 1], c->stream);
  if (r != CU_SUCCESS) {
    rt_cuda_run_error(c, res, r, "timing");
    return false;
  }
  return true;
}

/* A run over buffers that exist: set them up (restore, poison), run once,
 * copy the outputs back through page-locked staging, then queue the
 * warm-up and timed runs and, while the GPU works on them, call check.
 * Timed runs are queued up to RT_CUDA_RING ahead and their times read
 * from their events as they finish, so the host never stalls the stream
 * between repeats. The stream is drained before it returns (unless the
 * context broke). */
void rt_cuda_run_bufs(rt_cuda_ctx *c, const rt_cuda_program *prog, const cu_handle *fns,
                      const rt_cuda_run_buf *rb, const rt_cuda_timing *tm, rt_cuda_check_fn check,
                      void *check_ctx, rt_cuda_result *res) {
  const rt_cu_api *cu = c->cu;
  cu_result r;
  prepared_launch *pl = dg_calloc((size_t)prog->n_launches, sizeof *pl);
  double *samples = dg_calloc((size_t)(tm->repeats ? tm->repeats : 1), sizeof(double));
  size_t back_bytes = 0, off = 0;
  int queued = 0; /* timed runs queued so far */
  for (int b = 0; b < prog->n_bufs; b++)
    if (rb[b].back) back_bytes += rt_cuda_align_up(rb[b].bytes, 256);

  /* what must exist before anything is queued */
  if (tm->repeats > 0 && tm->flush_l2) {
    size_t want = (size_t)256 << 20;
    if ((size_t)c->info.l2_bytes * 4 > want) want = (size_t)c->info.l2_bytes * 4;
    if (!rt_cuda_device_grow(c, &c->flush, &c->flush_bytes, want, "the L2 flush buffer", res))
      goto done;
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
      rt_cuda_fail(res, RT_FAIL_SETUP, "allocating %zu bytes of page-locked host memory: %s",
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
    const rt_cuda_run_buf *x = &rb[b];
    if (x->pristine) {
      r = cu->MemcpyDtoDAsync(x->ptr, x->pristine, x->bytes, c->stream);
    } else if (x->poison) {
      unsigned char poison = dg_dtype_is_float(prog->bufs[b].dtype) ? 0xFF : 0xA5;
      r = cu->MemsetD8Async(x->ptr, poison, x->bytes, c->stream);
    } else {
      continue;
    }
    if (r != CU_SUCCESS) {
      rt_cuda_run_error(c, res, r, x->pristine ? "restoring inputs" : "poisoning outputs");
      goto drain;
    }
  }
  if (!launch_all(c, prog, pl, res)) goto drain;
  for (int b = 0; b < prog->n_bufs; b++) {
    if (!rb[b].back) continue;
    r = cu->MemcpyDtoHAsync((char *)c->pinned + off, rb[b].ptr, rb[b].bytes, c->stream);
    if (r != CU_SUCCESS) {
      rt_cuda_run_error(c, res, r, "copying outputs back");
      goto drain;
    }
    off += rt_cuda_align_up(rb[b].bytes, 256);
  }
  if (!record_and_wait(c, c->ev_out, tm->timeout_s, res, "run")) goto drain;
  off = 0;
  for (int b = 0; b < prog->n_bufs; b++) {
    if (!rb[b].back) continue;
    memcpy(rb[b].back, (char *)c->pinned + off, rb[b].bytes);
    off += rt_cuda_align_up(rb[b].bytes, 256);
  }

  /* warm-up and timed runs queued; the check runs beside them */
  for (int w = 0; w < tm->warmup; w++)
    if (!launch_all(c, prog, pl, res)) goto drain;
  if (tm->warmup) {
    r = cu->EventRecord(c->ev_warm, c->stream);
    if (r != CU_SUCCESS) {
      rt_cuda_run_error(c, res, r, "warm-up");
      goto drain;
    }
  }
  while (queued < tm->repeats && queued < RT_CUDA_RING) {
    if (!enqueue_timed(c, prog, pl, tm, queued, res)) goto drain;
    queued++;
  }
  if (check) check(check_ctx, res);
  if (tm->warmup && !wait_for(c, c->ev_warm, tm->timeout_s * tm->warmup, res, "warm-up"))
    goto drain;
  for (int k = 0; k < tm->repeats; k++) {
    int s = k % RT_CUDA_RING;
    if (!wait_for(c, c->ev_t[2 * s + 1], tm->timeout_s, res, "timed run")) goto drain;
    float ms = 0;
    r = cu->EventElapsedTime(&ms, c->ev_t[2 * s], c->ev_t[2 * s + 1]);
    if (r != CU_SUCCESS) {
      rt_cuda_run_error(c, res, r, "reading the events");
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

void rt_cuda_timing_defaults(const rt_cuda_timing *in, rt_cuda_timing *tm) {
  *tm = in ? *in : (rt_cuda_timing){0, 0, false, 0};
  if (tm->timeout_s <= 0) tm->timeout_s = 10;
  if (tm->warmup < 0) tm->warmup = 0;
  if (tm->repeats < 0) tm->repeats = 0;
}

void rt_cuda_run(rt_cuda_ctx *c, const rt_cubin *bin, const rt_cuda_program *prog,
                 void **host, const rt_cuda_timing *tm_in, rt_cuda_result *res) {
  memset(res, 0, sizeof *res);
  rt_cuda_timing tm;
  rt_cuda_timing_defaults(tm_in, &tm);
  const rt_cu_api *cu = c->cu;
  if (c->broken) {
    rt_cuda_fail(res, RT_FAIL_SETUP, "cuda: the context is unusable after an earlier error");
    res->ctx_broken = true;
    return;
  }
  if (!bin || !bin->image || bin->size == 0) {
    rt_cuda_fail(res, RT_FAIL_COMPILE, "no compiled module");
    return;
  }
  if (!rt_cuda_program_ok(c, prog, res)) return;
  cu->CtxSetCurrent(c->ctx);

  cu_handle mod = NULL;
  cu_handle *fns = dg_calloc((size_t)prog->n_launches, sizeof *fns);
  rt_cuda_run_buf *rb = dg_calloc((size_t)(prog->n_bufs ? prog->n_bufs : 1), sizeof *rb);
  char text[200];
  cu_result r;
  if (!rt_cuda_module_load(c, bin, prog, &mod, fns, res)) goto done;
  for (int b = 0; b < prog->n_bufs; b++) {
    const rt_cuda_buf *bf = &prog->bufs[b];
    size_t n = rt_cuda_buf_bytes(bf);
    r = cu->MemAlloc(&rb[b].ptr, n);
    if (r != CU_SUCCESS) {
      rb[b].ptr = 0;
      rt_cu_error_text(cu, r, text, sizeof text);
      rt_cuda_fail(res, RT_FAIL_SETUP, "allocating buffer %s (%zu bytes): %s",
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
        rt_cuda_run_error(c, res, r, "uploading inputs");
        goto done;
      }
    }
  }
  r = cu->CtxSynchronize();
  if (r != CU_SUCCESS) {
    rt_cuda_run_error(c, res, r, "setting buffers up");
    goto done;
  }
  rt_cuda_run_bufs(c, prog, fns, rb, &tm, NULL, NULL, res);

done:
  if (!c->broken)
    for (int b = 0; b < prog->n_bufs; b++)
      if (rb[b].ptr) cu->MemFree(rb[b].ptr);
  rt_cuda_module_unload(c, mod);
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

