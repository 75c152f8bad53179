/* cuda_run.c: running a compiled program on the GPU, checking and timing
 * it, and the GPU job that workers run.
 *
 * A run: load the module, allocate every buffer, upload inputs, poison
 * outputs and intermediates (all-ones bytes are NaN in f16, f32 and f64;
 * 0xA5 for integers, as data.c poisons on the CPU), run once and copy the
 * outputs back (the checked run), then warm-up runs, then timed runs. A
 * timed run is bracketed by two events on the stream around the launches
 * only; before it, when asked, a memset of a buffer four times the L2 (at
 * least 256 MiB) evicts what the previous run left there, so every run
 * starts from device memory as a kernel in a real model would.
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
 * same rt_data_* helpers as the CPU path), and the handler workers run.
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

struct rt_cuda_ctx {
  const rt_cu_api *cu;
  int dev;
  cu_handle ctx, stream, ev0, ev1;
  rt_cuda_device info;
  cu_devptr flush;
  size_t flush_bytes;
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
  /* a blocking stream: it waits for the synchronous copies and memsets of
   * the legacy stream that set the buffers up */
  ok = ok && RT_CU_CHECK(cu, cu->StreamCreate(&c->stream, 0), st, "cuda: cuStreamCreate");
  ok = ok && RT_CU_CHECK(cu, cu->EventCreate(&c->ev0, 0), st, "cuda: cuEventCreate");
  ok = ok && RT_CU_CHECK(cu, cu->EventCreate(&c->ev1, 0), st, "cuda: cuEventCreate");
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
    if (c->flush) cu->MemFree(c->flush);
    if (c->ev0) cu->EventDestroy(c->ev0);
    if (c->ev1) cu->EventDestroy(c->ev1);
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
static bool launch_all(rt_cuda_ctx *c, const rt_cuda_program *prog, prepared_launch *pl,
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

/* Records ev1 after the launches and waits for it. */
static bool finish_run(rt_cuda_ctx *c, double timeout_s, rt_cuda_result *res, const char *what) {
  cu_result r = c->cu->EventRecord(c->ev1, c->stream);
  if (r != CU_SUCCESS) {
    run_error(c, res, r, what);
    return false;
  }
  bool timed_out = false;
  r = wait_event(c, c->ev1, dg_now() + timeout_s, &timed_out);
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

/* Checks the program's shape before anything reaches the driver. */
static bool program_ok(const rt_cuda_ctx *c, const rt_cuda_program *prog, rt_cuda_result *res) {
  if (prog->n_launches < 1) {
    set_fail(res, RT_FAIL_SETUP, "program: no launches");
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
    if (l->n_args < 0 || l->n_args > 1024) {
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

void rt_cuda_run(rt_cuda_ctx *c, const rt_cubin *bin, const rt_cuda_program *prog,
                 void **host, const rt_cuda_timing *tm_in, rt_cuda_result *res) {
  memset(res, 0, sizeof *res);
  rt_cuda_timing tm = tm_in ? *tm_in : (rt_cuda_timing){0, 0, false, 0};
  if (tm.timeout_s <= 0) tm.timeout_s = 10;
  if (tm.warmup < 0) tm.warmup = 0;
  if (tm.repeats < 0) tm.repeats = 0;
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
  cu_devptr *dptr = dg_calloc((size_t)(prog->n_bufs ? prog->n_bufs : 1), sizeof *dptr);
  prepared_launch *pl = dg_calloc((size_t)prog->n_launches, sizeof *pl);
  double *samples = dg_calloc((size_t)(tm.repeats ? tm.repeats : 1), sizeof(double));
  char text[200];
  cu_result r = cu->ModuleLoadData(&mod, bin->image);
  if (r != CU_SUCCESS) {
    rt_cu_error_text(cu, r, text, sizeof text);
    set_fail(res, RT_FAIL_LOAD, "loading the %s module (%zu bytes): %s", bin->arch, bin->size, text);
    mod = NULL;
    goto done;
  }

  for (int i = 0; i < prog->n_launches; i++) {
    const rt_cuda_launch *l = &prog->launches[i];
    r = cu->ModuleGetFunction(&pl[i].fn, mod, l->kernel);
    if (r != CU_SUCCESS) {
      set_fail(res, RT_FAIL_LOAD, "launch %d: the module has no kernel named '%s'", i, l->kernel);
      goto done;
    }
    if (l->shared_bytes > 48 * 1024) {
      r = cu->FuncSetAttribute(pl[i].fn, CU_FUNC_ATTR_MAX_DYNAMIC_SHARED, l->shared_bytes);
      if (r != CU_SUCCESS) {
        rt_cu_error_text(cu, r, text, sizeof text);
        set_fail(res, RT_FAIL_LAUNCH, "launch %d (%s): raising dynamic shared memory to %d: %s",
                 i, l->kernel, l->shared_bytes, text);
        goto done;
      }
    }
  }

  for (int b = 0; b < prog->n_bufs; b++) {
    const rt_cuda_buf *bf = &prog->bufs[b];
    size_t n = buf_bytes(bf);
    r = cu->MemAlloc(&dptr[b], n);
    if (r != CU_SUCCESS) {
      dptr[b] = 0;
      rt_cu_error_text(cu, r, text, sizeof text);
      set_fail(res, RT_FAIL_SETUP, "allocating buffer %s (%zu bytes): %s",
               bf->name ? bf->name : "?", n, text);
      goto done;
    }
    bool upload = host && host[b] && !bf->is_output && bf->param >= 0;
    if (upload) {
      r = cu->MemcpyHtoD(dptr[b], host[b], n);
    } else {
      unsigned char poison = dg_dtype_is_float(bf->dtype) ? 0xFF : 0xA5;
      r = cu->MemsetD8(dptr[b], poison, n);
    }
    if (r != CU_SUCCESS) {
      run_error(c, res, r, upload ? "uploading inputs" : "poisoning outputs");
      goto done;
    }
  }
  r = cu->CtxSynchronize();
  if (r != CU_SUCCESS) {
    run_error(c, res, r, "setting buffers up");
    goto done;
  }

  for (int i = 0; i < prog->n_launches; i++) {
    const rt_cuda_launch *l = &prog->launches[i];
    int na = l->n_args;
    pl[i].vals = dg_calloc((size_t)(na ? na : 1), sizeof(arg_value));
    pl[i].params = dg_calloc((size_t)(na ? na : 1), sizeof(void *));
    for (int a = 0; a < na; a++) {
      const rt_cuda_arg *g = &l->args[a];
      switch (g->kind) {
        case RT_CUDA_ARG_BUF: pl[i].vals[a].p = dptr[g->buf]; break;
        case RT_CUDA_ARG_I32: pl[i].vals[a].i32 = (int32_t)g->i; break;
        case RT_CUDA_ARG_I64: pl[i].vals[a].i64 = g->i; break;
        case RT_CUDA_ARG_F32: pl[i].vals[a].f32 = (float)g->f; break;
      }
      pl[i].params[a] = &pl[i].vals[a];
    }
  }

  /* the checked run */
  if (!launch_all(c, prog, pl, res) || !finish_run(c, tm.timeout_s, res, "run")) goto done;
  for (int b = 0; b < prog->n_bufs && host; b++) {
    const rt_cuda_buf *bf = &prog->bufs[b];
    if (!bf->is_output || !host[b]) continue;
    r = cu->MemcpyDtoH(host[b], dptr[b], buf_bytes(bf));
    if (r != CU_SUCCESS) {
      run_error(c, res, r, "copying outputs back");
      goto done;
    }
  }

  for (int w = 0; w < tm.warmup; w++)
    if (!launch_all(c, prog, pl, res)) goto done;
  if (tm.warmup && !finish_run(c, tm.timeout_s, res, "warm-up")) goto done;

  if (tm.repeats > 0 && tm.flush_l2 && !c->flush) {
    size_t want = (size_t)256 << 20;
    if ((size_t)c->info.l2_bytes * 4 > want) want = (size_t)c->info.l2_bytes * 4;
    r = cu->MemAlloc(&c->flush, want);
    if (r != CU_SUCCESS) {
      c->flush = 0;
      rt_cu_error_text(cu, r, text, sizeof text);
      set_fail(res, RT_FAIL_SETUP, "allocating the L2 flush buffer (%zu bytes): %s", want, text);
      goto done;
    }
    c->flush_bytes = want;
  }
  for (int k = 0; k < tm.repeats; k++) {
    if (tm.flush_l2) {
      r = cu->MemsetD32Async(c->flush, (unsigned)k, c->flush_bytes / 4, c->stream);
      if (r != CU_SUCCESS) {
        run_error(c, res, r, "flushing L2");
        goto done;
      }
    }
    r = cu->EventRecord(c->ev0, c->stream);
    if (r != CU_SUCCESS) {
      run_error(c, res, r, "timing");
      goto done;
    }
    if (!launch_all(c, prog, pl, res) || !finish_run(c, tm.timeout_s, res, "timed run")) goto done;
    float ms = 0;
    r = cu->EventElapsedTime(&ms, c->ev0, c->ev1);
    if (r != CU_SUCCESS) {
      run_error(c, res, r, "reading the events");
      goto done;
    }
    samples[k] = ms * 1e-3;
  }
  rt_time_stats_of(samples, tm.repeats, &res->t);

done:
  if (!c->broken) {
    for (int b = 0; b < prog->n_bufs; b++)
      if (dptr[b]) cu->MemFree(dptr[b]);
    if (mod) cu->ModuleUnload(mod);
  }
  res->ctx_broken = c->broken;
  for (int i = 0; i < prog->n_launches; i++) {
    free(pl[i].vals);
    free(pl[i].params);
  }
  free(pl);
  free(dptr);
  free(samples);
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

static void put(dg_str *s, const void *p, size_t n) { dg_str_putn(s, (const char *)p, n); }
static void put_i32(dg_str *s, int32_t v) { put(s, &v, 4); }
static void put_i64(dg_str *s, int64_t v) { put(s, &v, 8); }
static void put_f64(dg_str *s, double v) { put(s, &v, 8); }
static void put_bytes(dg_str *s, const void *p, size_t n) {
  put_i64(s, (int64_t)n);
  if (n) put(s, p, n);
}
static void put_text(dg_str *s, const char *t) { put_bytes(s, t ? t : "", t ? strlen(t) : 0); }

typedef struct {
  const char *p;
  size_t n, at;
  bool bad;
} reader;

static const void *take(reader *r, size_t n) {
  if (r->bad || n > r->n - r->at) {
    r->bad = true;
    return NULL;
  }
  const void *p = r->p + r->at;
  r->at += n;
  return p;
}
static int32_t get_i32(reader *r) {
  int32_t v = 0;
  const void *p = take(r, 4);
  if (p) memcpy(&v, p, 4);
  return v;
}
static int64_t get_i64(reader *r) {
  int64_t v = 0;
  const void *p = take(r, 8);
  if (p) memcpy(&v, p, 8);
  return v;
}
static double get_f64(reader *r) {
  double v = 0;
  const void *p = take(r, 8);
  if (p) memcpy(&v, p, 8);
  return v;
}
static const void *get_bytes(reader *r, size_t *n) {
  int64_t len = get_i64(r);
  if (len < 0) {
    r->bad = true;
    return NULL;
  }
  *n = (size_t)len;
  return take(r, (size_t)len);
}
/* A NUL-terminated copy in the arena. */
static char *get_text(reader *r, dg_arena *a) {
  size_t n = 0;
  const char *p = get_bytes(r, &n);
  return p ? dg_arena_strndup(a, p, n) : dg_arena_strdup(a, "");
}

enum { JOB_MAGIC = 0x31424a43 /* "CJB1" */, REPLY_MAGIC = 0x31525243 /* "CRR1" */ };

void rt_cuda_job_encode(const rt_cuda_job *job, dg_str *out) {
  const rt_cuda_program *prog = job->prog;
  put_i32(out, JOB_MAGIC);
  put_i32(out, job->timing.warmup);
  put_i32(out, job->timing.repeats);
  put_i32(out, job->timing.flush_l2);
  put_f64(out, job->timing.timeout_s);
  put_i64(out, (int64_t)job->seed);
  put_text(out, job->data_path);
  put_text(out, job->bin ? job->bin->arch : "");
  put_bytes(out, job->bin ? job->bin->image : NULL, job->bin && job->bin->image ? job->bin->size : 0);
  put_i32(out, prog->n_bufs);
  for (int b = 0; b < prog->n_bufs; b++) {
    const rt_cuda_buf *bf = &prog->bufs[b];
    put_text(out, bf->name);
    put_i32(out, (int32_t)bf->dtype);
    put_i64(out, bf->numel);
    put_i32(out, bf->param);
    put_i32(out, bf->is_output);
  }
  put_i32(out, prog->n_launches);
  for (int i = 0; i < prog->n_launches; i++) {
    const rt_cuda_launch *l = &prog->launches[i];
    put_text(out, l->kernel);
    for (int d = 0; d < 3; d++) put_i32(out, l->grid[d]);
    for (int d = 0; d < 3; d++) put_i32(out, l->block[d]);
    put_i32(out, l->shared_bytes);
    put_i32(out, l->n_args);
    for (int a = 0; a < l->n_args; a++) {
      put_i32(out, (int32_t)l->args[a].kind);
      put_i32(out, l->args[a].buf);
      put_i64(out, l->args[a].i);
      put_f64(out, l->args[a].f);
    }
  }
}

typedef struct {
  rt_cuda_job job;
  rt_cubin bin; /* image in the arena, aligned as ELF wants */
  rt_cuda_program prog;
} decoded_job;

static bool job_decode(const void *p, size_t n, dg_arena *a, decoded_job *d) {
  reader r = {p, n, 0, false};
  memset(d, 0, sizeof *d);
  if (get_i32(&r) != JOB_MAGIC) return false;
  d->job.timing.warmup = get_i32(&r);
  d->job.timing.repeats = get_i32(&r);
  d->job.timing.flush_l2 = get_i32(&r) != 0;
  d->job.timing.timeout_s = get_f64(&r);
  d->job.seed = (uint64_t)get_i64(&r);
  char *path = get_text(&r, a);
  d->job.data_path = *path ? path : NULL;
  snprintf(d->bin.arch, sizeof d->bin.arch, "%s", get_text(&r, a));
  size_t img_n = 0;
  const void *img = get_bytes(&r, &img_n);
  if (img && img_n) {
    d->bin.image = dg_arena_memdup(a, img, img_n + 1);
    d->bin.image[img_n] = 0;
    d->bin.size = img_n;
    d->bin.is_ptx = strncmp(d->bin.arch, "compute_", 8) == 0;
  }
  int nb = get_i32(&r);
  if (r.bad || nb < 0 || nb > 1 << 16) return false;
  rt_cuda_buf *bufs = DG_ANEWN(a, rt_cuda_buf, nb ? nb : 1);
  for (int b = 0; b < nb; b++) {
    bufs[b].name = get_text(&r, a);
    bufs[b].dtype = (dg_dtype)get_i32(&r);
    bufs[b].numel = get_i64(&r);
    bufs[b].param = get_i32(&r);
    bufs[b].is_output = get_i32(&r) != 0;
  }
  int nl = get_i32(&r);
  if (r.bad || nl < 0 || nl > 1 << 16) return false;
  rt_cuda_launch *ls = DG_ANEWN(a, rt_cuda_launch, nl ? nl : 1);
  for (int i = 0; i < nl && !r.bad; i++) {
    rt_cuda_launch *l = &ls[i];
    l->kernel = get_text(&r, a);
    for (int k = 0; k < 3; k++) l->grid[k] = get_i32(&r);
    for (int k = 0; k < 3; k++) l->block[k] = get_i32(&r);
    l->shared_bytes = get_i32(&r);
    l->n_args = get_i32(&r);
    if (r.bad || l->n_args < 0 || l->n_args > 1024) return false;
    rt_cuda_arg *args = DG_ANEWN(a, rt_cuda_arg, l->n_args ? l->n_args : 1);
    for (int k = 0; k < l->n_args; k++) {
      int kind = get_i32(&r);
      if (kind < RT_CUDA_ARG_BUF || kind > RT_CUDA_ARG_F32) r.bad = true;
      args[k].kind = (rt_cuda_arg_kind)kind;
      args[k].buf = get_i32(&r);
      args[k].i = get_i64(&r);
      args[k].f = get_f64(&r);
    }
    l->args = args;
  }
  d->prog = (rt_cuda_program){bufs, nb, ls, nl};
  d->job.bin = &d->bin;
  d->job.prog = &d->prog;
  return !r.bad && r.at == r.n;
}

static void result_encode(const rt_cuda_result *res, dg_str *out) {
  put_i32(out, REPLY_MAGIC);
  put_i32(out, (int32_t)res->fail);
  put_text(out, res->reason);
  put_i32(out, res->t.n);
  put_f64(out, res->t.median);
  put_f64(out, res->t.min);
  put_f64(out, res->t.max);
  put_f64(out, res->t.q1);
  put_f64(out, res->t.q3);
  put_i32(out, res->checked);
  put_i64(out, res->check.K);
  put_f64(out, res->check.max_abs);
  put_f64(out, res->check.max_rel);
  put_i64(out, res->check.n_checked);
  put_i64(out, res->check.n_bad);
  put_text(out, res->check.first_bad);
  put_i32(out, res->check.pass);
  put_i32(out, res->ctx_broken);
}

static bool result_decode(const void *p, size_t n, rt_cuda_result *res) {
  reader r = {p, n, 0, false};
  dg_arena *a = dg_arena_new();
  memset(res, 0, sizeof *res);
  bool ok = get_i32(&r) == REPLY_MAGIC;
  int f = get_i32(&r);
  res->fail = f >= 0 && f < RT_FAIL_COUNT ? (rt_fail)f : RT_FAIL_CRASH;
  snprintf(res->reason, sizeof res->reason, "%s", get_text(&r, a));
  res->t.n = get_i32(&r);
  res->t.median = get_f64(&r);
  res->t.min = get_f64(&r);
  res->t.max = get_f64(&r);
  res->t.q1 = get_f64(&r);
  res->t.q3 = get_f64(&r);
  res->checked = get_i32(&r) != 0;
  res->check.K = get_i64(&r);
  res->check.max_abs = get_f64(&r);
  res->check.max_rel = get_f64(&r);
  res->check.n_checked = get_i64(&r);
  res->check.n_bad = get_i64(&r);
  snprintf(res->check.first_bad, sizeof res->check.first_bad, "%s", get_text(&r, a));
  res->check.pass = get_i32(&r) != 0;
  res->ctx_broken = get_i32(&r) != 0;
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
  put(h, data_magic, 8);
  put_i32(h, DATA_VERSION);
  put_i32(h, ts->n);
  put_i64(h, K);
  put_i64(h, (int64_t)hdr);
  size_t off = align64(hdr);
  for (int i = 0; i < ts->n; i++) {
    const rt_tensor *t = &ts->t[i];
    const dg_buffer *b = t->buf;
    put_text(h, b->name);
    put_i32(h, (int32_t)b->dtype);
    put_i32(h, b->ndim);
    for (int d = 0; d < b->ndim; d++) put_i64(h, b->shape[d]);
    put_i32(h, t->is_output);
    put_i64(h, t->numel);
    size_t bytes = (size_t)t->numel *
                   (t->is_output ? ref_elem_bytes(b->dtype) : (size_t)dg_dtype_bytes(b->dtype));
    put_i64(h, (int64_t)off);
    put_i64(h, (int64_t)bytes);
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
  reader r = {map, len, 0, false};
  const char *magic = take(&r, 8);
  if (!magic || memcmp(magic, data_magic, 8) != 0 || get_i32(&r) != DATA_VERSION) {
    data_unmap(m);
    return dg_fail(st, DG_ERR_PARSE, "%s: not a dragon data set (bad magic or version)", path);
  }
  int n = get_i32(&r);
  m->K = get_i64(&r);
  get_i64(&r);
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
    b->name = get_text(&r, m->arena);
    int dt = get_i32(&r);
    b->ndim = get_i32(&r);
    if (dt < 0 || dt >= DG_DTYPE_COUNT || b->ndim < 0 || b->ndim > DG_MAX_DIMS) {
      r.bad = true;
      break;
    }
    b->dtype = (dg_dtype)dt;
    for (int d = 0; d < b->ndim; d++) b->shape[d] = get_i64(&r);
    rt_tensor *t = &ts->t[i];
    t->buf = b;
    t->is_output = get_i32(&r) != 0;
    t->numel = get_i64(&r);
    int64_t off = get_i64(&r), bytes = get_i64(&r);
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
  return true;
}

/* ---- the worker's side ---------------------------------------------------------- */

/* Per worker process: its CUDA context and the last data set it mapped. */
static rt_cuda_ctx *worker_ctx;
static char worker_ctx_err[512];
static mapped_data worker_data;

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

bool rt_cuda_job_handle(void *ctx, const void *job, size_t len, dg_str *reply) {
  (void)ctx;
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
  /* CUDA comes up on the first job that gets this far, so that a bad job
   * is reported the same with or without a GPU */
  if (!worker_ctx && !worker_ctx_err[0] && !rt_cuda_ctx_new(0, &worker_ctx, &st))
    snprintf(worker_ctx_err, sizeof worker_ctx_err, "%s", st.msg);
  if (!matches(&d.prog, ts, &st)) {
    set_fail(&res, RT_FAIL_SETUP, "%s", st.msg);
  } else if (!worker_ctx) {
    set_fail(&res, RT_FAIL_SETUP, "%s", worker_ctx_err);
  } else {
    void **host = DG_ANEWN(a, void *, d.prog.n_bufs ? d.prog.n_bufs : 1);
    rt_cuda_host_from_tensors(&d.prog, ts, host);
    rt_cuda_run(worker_ctx, &d.bin, &d.prog, host, &d.job.timing, &res);
    if (res.fail == RT_FAIL_NONE && d.job.data_path) {
      rt_check_outputs(ts, worker_data.K, &res.check);
      res.checked = true;
      if (!res.check.pass)
        set_fail(&res, RT_FAIL_WRONG, "%lld of %lld elements wrong (max abs error %.3g); first %s",
                 (long long)res.check.n_bad, (long long)res.check.n_checked, res.check.max_abs,
                 res.check.first_bad[0] ? res.check.first_bad : "(no outputs)");
    }
  }
  if (ts == &seeded) seeded_free(&seeded);
reply:
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
