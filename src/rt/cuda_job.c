/* cuda_job.c: the GPU job that workers run: its message and its reply
 * (laid out with wire.c's helpers), the handler of exec'd "cuda" workers
 * (worker.c), and the pool of such workers.
 *
 * A worker keeps the device side of its last data set across jobs
 * (device_data): allocated and uploaded once, restored per job by device
 * copies (rt_cuda.h says what is restored and why). While a worker runs a
 * job the GPU is that job's alone, whatever other processes measure on it
 * (gpu_lock.c). The run itself is cuda_run.c's, the data set cuda_data.c's.
 */
#include "rt/cuda_api.h"

#include <string.h>

/* ---- messages ---------------------------------------------------------------- */

enum { JOB_MAGIC = 0x31424a43 /* "CJB1" */, REPLY_MAGIC = 0x33525243 /* "CRR3" */ };

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
  rt_wire_put_f64(out, res->held_s);
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
  res->held_s = rt_wire_get_f64(&r);
  dg_arena_free(a);
  return ok && !r.bad && r.at == r.n;
}

/* ---- the worker's side ---------------------------------------------------------- */

/* The device side of a data set, kept by a worker across jobs: per tensor a
 * working buffer the kernels get and, for inputs, a pristine copy that
 * each job restores the working buffer from (device to device), so that
 * a kernel that writes where it should not cannot leak into the next
 * job. Outputs are poisoned again before every run. Built from one mapping
 * of the data set (its generation); rebuilt when the file changes. */
typedef struct {
  uint64_t gen;        /* rt_cuda_data.gen it was built from; 0: none */
  int n;
  cu_devptr *work;     /* (n) */
  cu_devptr *pristine; /* (n) inputs only, 0 for outputs */
  size_t *bytes;       /* (n) in the kernel's storage, at least 1 */
} device_data;

/* Per worker process: its CUDA context, the last data set it mapped and
 * that data set's device buffers. */
static rt_cuda_ctx *worker_ctx;
static char worker_ctx_err[512];
static rt_cuda_data worker_data;
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
static bool device_data_build(rt_cuda_ctx *c, device_data *d, const rt_cuda_data *m,
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
      rt_cuda_fail(res, RT_FAIL_SETUP, "%s: allocating %s (%zu bytes) on the device: %s", m->path,
                   t->buf->name, d->bytes[i], text);
      device_data_free(c, d);
      return false;
    }
    if (!t->is_output && bytes) {
      r = cu->MemcpyHtoD(d->pristine[i], t->data, bytes);
      if (r != CU_SUCCESS) {
        rt_cuda_run_error(c, res, r, "uploading the data set");
        device_data_free(c, d);
        return false;
      }
    }
  }
  cu_result r = cu->CtxSynchronize();
  if (r != CU_SUCCESS) {
    rt_cuda_run_error(c, res, r, "uploading the data set");
    device_data_free(c, d);
    return false;
  }
  d->gen = m->gen;
  return true;
}

/* Whether the pristine inputs still hold the data set's bytes (a kernel
 * writing far out of bounds could reach them). */
static bool device_data_intact(rt_cuda_ctx *c, const device_data *d, const rt_cuda_data *m) {
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
    rt_cuda_fail(res, RT_FAIL_WRONG, "%lld of %lld elements wrong (max abs error %.3g); first %s",
                 (long long)res->check.n_bad, (long long)res->check.n_checked, res->check.max_abs,
                 res->check.first_bad[0] ? res->check.first_bad : "(no outputs)");
}

/* A run over the worker's device buffers of the data set: parameters are
 * the data set's tensors, intermediates carved out of the context's
 * scratch block; checked against the data set's reference. */
static void run_cached(rt_cuda_ctx *c, const device_data *d, const rt_cuda_data *m,
                       const rt_cuda_program *prog, const cu_handle *fns, const rt_cuda_timing *tm,
                       rt_cuda_result *res) {
  rt_cuda_run_buf *rb = dg_calloc((size_t)(prog->n_bufs ? prog->n_bufs : 1), sizeof *rb);
  size_t scratch = 0;
  for (int b = 0; b < prog->n_bufs; b++)
    if (prog->bufs[b].param < 0)
      scratch += rt_cuda_align_up(rt_cuda_buf_bytes(&prog->bufs[b]), 256);
  if (scratch && !rt_cuda_device_grow(c, &c->scratch, &c->scratch_bytes, scratch,
                                      "intermediate buffers", res)) {
    free(rb);
    return;
  }
  size_t off = 0;
  for (int b = 0; b < prog->n_bufs; b++) {
    const rt_cuda_buf *bf = &prog->bufs[b];
    rt_cuda_run_buf *x = &rb[b];
    if (bf->param < 0) {
      x->ptr = c->scratch + off;
      x->bytes = rt_cuda_buf_bytes(bf);
      x->poison = true;
      off += rt_cuda_align_up(x->bytes, 256);
      continue;
    }
    /* rt_cuda_data_matches() said the parameter is the data set's tensor of that size */
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
  rt_cuda_run_bufs(c, prog, fns, rb, tm, check_outputs, &k, res);
  free(rb);
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
  const rt_cuda_data *m = &worker_data;
  rt_cuda_timing tm;
  rt_cuda_timing_defaults(&d->job.timing, &tm);
  res->data_cached = worker_dev.gen == m->gen && worker_dev.gen != 0;
  if (!res->data_cached) {
    double t0 = dg_now();
    if (!device_data_build(c, &worker_dev, m, res)) return;
    res->setup_s = dg_now() - t0;
  }
  cu_handle mod = NULL;
  cu_handle *fns = dg_calloc((size_t)d->prog.n_launches, sizeof *fns);
  if (rt_cuda_module_load(c, &d->bin, &d->prog, &mod, fns, res)) {
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
  rt_cuda_module_unload(c, mod);
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
    rt_cuda_fail(&res, RT_FAIL_SETUP, "worker: malformed job (%zu bytes)", len);
    goto reply;
  }
  rt_tensors seeded = {0};
  const rt_tensors *ts = NULL;
  if (d.job.data_path) {
    if (!rt_cuda_data_map(&worker_data, d.job.data_path, &st)) {
      rt_cuda_fail(&res, RT_FAIL_SETUP, "%s", st.msg);
      goto reply;
    }
    ts = &worker_data.ts;
  } else {
    if (!rt_cuda_data_seeded(&d.prog, d.job.seed, a, &seeded, &st)) {
      rt_cuda_data_seeded_free(&seeded);
      rt_cuda_fail(&res, RT_FAIL_SETUP, "%s", st.msg);
      goto reply;
    }
    ts = &seeded;
  }
  /* CUDA comes up when the worker starts (rt_cuda_worker_init) or else on
   * a job that gets this far, so that a bad job is reported the same with
   * or without a GPU */
  worker_ctx_up();
  if (!rt_cuda_data_matches(&d.prog, ts, &st)) {
    rt_cuda_fail(&res, RT_FAIL_SETUP, "%s", st.msg);
  } else if (!worker_ctx) {
    rt_cuda_fail(&res, RT_FAIL_SETUP, "%s", worker_ctx_err);
  } else if (worker_ctx->broken) {
    rt_cuda_fail(&res, RT_FAIL_SETUP, "cuda: the context is unusable after an earlier error");
    res.ctx_broken = true;
  } else if (!rt_cuda_program_ok(worker_ctx, &d.prog, &res)) {
    /* res says why */
  } else {
    /* the GPU is this job's alone while it runs, whatever other processes
     * measure on it (gpu_lock.c) */
    if (worker_gpu_lock == -2) worker_gpu_lock = rt_gpu_lock_open(worker_ctx->cu, worker_ctx->dev);
    rt_gpu_lock(worker_gpu_lock);
    double t_held = dg_now();
    if (d.job.data_path) {
      worker_ctx->cu->CtxSetCurrent(worker_ctx->ctx);
      job_cached(worker_ctx, &d, &res);
    } else {
      void **host = DG_ANEWN(a, void *, d.prog.n_bufs ? d.prog.n_bufs : 1);
      rt_cuda_host_from_tensors(&d.prog, ts, host);
      rt_cuda_run(worker_ctx, &d.bin, &d.prog, host, &d.job.timing, &res);
    }
    res.held_s = dg_now() - t_held;
    rt_gpu_unlock(worker_gpu_lock);
  }
  if (ts == &seeded) rt_cuda_data_seeded_free(&seeded);
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
