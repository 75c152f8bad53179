/* test_gpu_cache.c: the GPU worker's data-set cache and what feeds it.
 *
 * cuda_*: without a GPU: tasks handed back as they finish (rt_tasks, the
 * compile pipeline's thread pool) and the pool's choice of worker (the one
 * with warm caches first, a fresh replacement last).
 * gpu_*: on a GPU (skipped elsewhere, SKIP): jobs that share a data
 * set reuse its device buffers (data_cached), and the cache never lets one
 * job's values reach another's check: a fault or a hang retires the worker
 * and the next job rebuilds; two data sets and a rewritten data file in
 * one worker each get their own reference; a wrong kernel, one that writes
 * nothing, one that clobbers an input and one that skips an intermediate
 * are all still caught after a correct kernel ran on the same buffers;
 * more timed repeats than the runtime queues at once.
 */
#include <signal.h>
#include <unistd.h>

#include "dragon/rt_cuda.h"
#include "dragon/wl.h"
#include "test.h"

/* ---- tasks handed back as they finish ---------------------------------------- */

typedef struct {
  int n;
  int *out; /* (n) task i writes out[i] */
} square_ctx;

static void square_work(void *p, int i) {
  square_ctx *c = p;
  if (i % 3 == 0) usleep(2000); /* finish out of order */
  c->out[i] = i * i;
}

DG_TEST(cuda_tasks_hand_back_each_once) {
  enum { N = 40 };
  int out[N];
  static const int threads[] = {3, 1, 0};
  for (size_t t = 0; t < DG_ARRAY_LEN(threads); t++) {
    memset(out, 0xff, sizeof out);
    square_ctx c = {N, out};
    rt_tasks *tk = rt_tasks_start(N, threads[t], square_work, &c);
    bool seen[N] = {false};
    int got = 0, i;
    while ((i = rt_tasks_next(tk, got % 2 == 0)) >= 0 || got < N) {
      if (i < 0) continue; /* none finished yet: ask again */
      CHECK(i < N && !seen[i]);
      CHECK_EQ(out[i], i * i); /* handed back only once written */
      seen[i] = true;
      got++;
    }
    CHECK_EQ(got, N);
    CHECK_EQ(rt_tasks_next(tk, true), -1);
    CHECK_EQ(rt_tasks_next(tk, false), -1);
    rt_tasks_free(tk);
  }
  /* none, and freed before any is taken (every one still runs) */
  rt_tasks *tk = rt_tasks_start(0, 2, square_work, NULL);
  CHECK_EQ(rt_tasks_next(tk, true), -1);
  rt_tasks_free(tk);
  memset(out, 0xff, sizeof out);
  square_ctx c = {N, out};
  tk = rt_tasks_start(N, 2, square_work, &c);
  rt_tasks_free(tk);
  for (int k = 0; k < N; k++) CHECK_EQ(out[k], k * k);
}

/* "ok N" replies "2N from PID"; "segv" dies. */
static bool pid_fn(void *ctx, const void *job, size_t len, dg_str *reply) {
  (void)ctx;
  char buf[32];
  snprintf(buf, sizeof buf, "%.*s", (int)(len < 31 ? len : 31), (const char *)job);
  if (strcmp(buf, "segv") == 0) raise(SIGSEGV);
  dg_str_printf(reply, "%d", (int)getpid());
  return true;
}

static int run_for_pid(rt_worker_pool *p, const char *job, rt_worker_outcome want) {
  rt_worker_pool_submit(p, 1, job, strlen(job), 0);
  rt_worker_result r;
  dg_status st;
  if (!rt_worker_pool_next(p, &r, &st)) return -1;
  int pid = r.outcome == RT_WORKER_REPLIED ? atoi(r.reply) : 0;
  bool ok = r.outcome == want;
  rt_worker_result_free(&r);
  return ok ? pid : -1;
}

DG_TEST(cuda_worker_prefers_warm) {
  /* one job at a time over two workers: jobs go to the worker that has run
   * jobs; after it dies, to the other one started with the pool, not to
   * the replacement that is still starting */
  rt_worker_opts o = {2, 1, 5.0, pid_fn, NULL};
  rt_worker_pool *p;
  dg_status st;
  CHECK(rt_worker_pool_new(&o, &p, &st));
  int a = run_for_pid(p, "ok", RT_WORKER_REPLIED);
  CHECK(a > 0);
  CHECK_EQ(run_for_pid(p, "ok", RT_WORKER_REPLIED), a);
  CHECK_EQ(run_for_pid(p, "ok", RT_WORKER_REPLIED), a);
  CHECK_EQ(run_for_pid(p, "segv", RT_WORKER_CRASHED), 0);
  int b = run_for_pid(p, "ok", RT_WORKER_REPLIED);
  CHECK(b > 0 && b != a);
  CHECK_EQ(run_for_pid(p, "ok", RT_WORKER_REPLIED), b);
  CHECK_EQ(rt_worker_pool_restarts(p), 1);
  rt_worker_pool_free(p);
}

/* ---- on the GPU ------------------------------------------------------------------- */

static bool have_gpu(void) {
  dg_status st;
  if (!rt_cuda_available(&st)) {
    dg_test_skip("no GPU: %s", st.msg);
    return false;
  }
  if (!rt_nvrtc_available(&st)) {
    dg_test_skip("NVRTC is not here: %s", st.msg);
    return false;
  }
  return true;
}

static bool compile_or_fail(const char *src, const char *name, rt_cubin *b) {
  dg_status st;
  if (rt_nvrtc_compile(src, name, "sm_90", b, &st)) return true;
  dg_test_fail(__FILE__, __LINE__, "%s", st.msg);
  return false;
}

/* A data set file: the kernel's inputs from `seed` and its float64
 * reference (interpreted), with the program buffers of its parameters. */
typedef struct {
  rt_cuda_buf bufs[8];
  char path[300];
} data_case;

static bool data_case_write(data_case *c, const char *text_or_spec, bool is_spec,
                            const char *file, uint64_t seed, dg_status *st) {
  memset(c, 0, sizeof c->bufs);
  dg_func *f = is_spec ? wl_build(text_or_spec, st) : ir_parse(text_or_spec, "k", st);
  if (!f) return false;
  rt_tensors ts;
  bool ok = rt_tensors_init(&ts, f, st);
  if (ok) {
    rt_data_fill(&ts, seed, rt_data_dist_for(f));
    ok = rt_interp_run(f, ts.ref_args, true, st);
    DG_ASSERT(ts.n <= 8);
    rt_cuda_bufs_for_params(&ts, c->bufs);
    snprintf(c->path, sizeof c->path, "%s/%s", dg_test_tmpdir(), file);
    ok = ok && rt_cuda_data_write(&ts, rt_check_reduce_len(f), c->path, st);
    rt_tensors_free(&ts);
  }
  /* the buffer names point into f: keep them */
  for (int i = 0; i < 8; i++)
    if (c->bufs[i].name) c->bufs[i].name = strdup(c->bufs[i].name);
  ir_func_free(f);
  return ok;
}

static void data_case_free(data_case *c) {
  for (int i = 0; i < 8; i++) free((char *)c->bufs[i].name);
}

static bool job_run(rt_worker_pool *p, const rt_cubin *b, const rt_cuda_program *prog,
                    const char *path, const rt_cuda_timing *tm, rt_cuda_result *res) {
  rt_cuda_job job = {b, prog, path, 1, *tm};
  dg_str msg;
  dg_str_init(&msg);
  rt_cuda_job_encode(&job, &msg);
  rt_worker_pool_submit(p, 1, msg.s, msg.len, 0);
  dg_str_free(&msg);
  rt_worker_result wr;
  dg_status st;
  if (!rt_worker_pool_next(p, &wr, &st)) return false;
  rt_cuda_result_from_worker(&wr, res);
  rt_worker_result_free(&wr);
  printf("  %-34s %-16s cached %d  setup %.2f ms  worker %.2f ms  %s\n",
         prog->launches[0].kernel, rt_fail_name(res->fail), res->data_cached, res->setup_s * 1e3,
         res->worker_s * 1e3, res->reason);
  return true;
}

static const char *const vadd_text =
    "kernel vadd(A: f32[1000], B: f32[1000], C: f32[1000]):\n"
    "  block root:\n"
    "    for i in 1000:\n"
    "      block C(v_i: S(1000) = i):\n"
    "        reads A[v_i], B[v_i]\n"
    "        writes C[v_i]\n"
    "        C[v_i] = A[v_i] + B[v_i]\n";

/* vadd and kernels that get it wrong in every way the cache could hide. */
static const char *const vadd_kernels_src =
    "extern \"C\" __global__ void vadd(const float *a, const float *b, float *c, int n) {\n"
    "  int i = blockIdx.x * blockDim.x + threadIdx.x;\n"
    "  if (i < n) c[i] = a[i] + b[i];\n"
    "}\n"
    "extern \"C\" __global__ void nothing(const float *a, const float *b, float *c, int n) {\n"
    "  (void)a; (void)b; (void)c; (void)n;\n"
    "}\n"
    "extern \"C\" __global__ void clobber(float *a, const float *b, float *c, int n) {\n"
    "  int i = blockIdx.x * blockDim.x + threadIdx.x;\n"
    "  if (i < n) { c[i] = a[i] + b[i]; a[i] = 0.0f; }\n"
    "}\n"
    "extern \"C\" __global__ void fault(float *p) {\n"
    "  ((volatile float *)0x10)[threadIdx.x * 1024] = p[0];\n"
    "}\n"
    "extern \"C\" __global__ void hang(volatile unsigned *p) {\n"
    "  while (p[0] != 12345u) { }\n"
    "}\n";

typedef struct {
  rt_cuda_arg args[4];
  rt_cuda_launch l;
  rt_cuda_program prog;
} vadd_prog;

/* `kernel` over the data set's A, B, C (n elements computed). */
static void vadd_prog_init(vadd_prog *v, const data_case *c, const char *kernel, int n) {
  rt_cuda_arg args[4] = {{RT_CUDA_ARG_BUF, 0, 0, 0}, {RT_CUDA_ARG_BUF, 1, 0, 0},
                         {RT_CUDA_ARG_BUF, 2, 0, 0}, {RT_CUDA_ARG_I32, 0, n, 0}};
  memcpy(v->args, args, sizeof args);
  int n_args = 4;
  if (strcmp(kernel, "fault") == 0 || strcmp(kernel, "hang") == 0) n_args = 1;
  v->l = (rt_cuda_launch){kernel, {4, 1, 1}, {256, 1, 1}, 0, v->args, n_args};
  if (strcmp(kernel, "hang") == 0) v->l = (rt_cuda_launch){kernel, {1, 1, 1}, {1, 1, 1}, 0, v->args, 1};
  v->prog = (rt_cuda_program){c->bufs, 3, &v->l, 1};
}

DG_TEST(gpu_cache_fault_and_hang_then_cached) {
  if (!have_gpu()) return;
  dg_status st;
  data_case c;
  bool made = data_case_write(&c, vadd_text, false, "cache_a.dat", 7, &st);
  CHECK_MSG(made, "%s", st.msg);
  rt_cubin b;
  if (!compile_or_fail(vadd_kernels_src, "vaddk", &b)) return;
  vadd_prog good, fault, hang;
  vadd_prog_init(&good, &c, "vadd", 1000);
  vadd_prog_init(&fault, &c, "fault", 1000);
  vadd_prog_init(&hang, &c, "hang", 1000);
  rt_cuda_timing tm = {1, 3, true, 1.0};
  rt_worker_pool *p;
  CHECK(rt_cuda_pool_new(1, 1, 30, &p, &st));
  /* program, what it must give, and whether the data set's buffers must
   * have been there already */
  const struct {
    const rt_cuda_program *prog;
    rt_fail want;
    int cached; /* 1: the buffers were there from an earlier job */
  } steps[] = {
      {&good.prog, RT_FAIL_NONE, 0},   {&good.prog, RT_FAIL_NONE, 1},
      {&fault.prog, RT_FAIL_ILLEGAL_ADDRESS, 1}, {&good.prog, RT_FAIL_NONE, 0},
      {&good.prog, RT_FAIL_NONE, 1},   {&hang.prog, RT_FAIL_TIMEOUT, 1},
      {&good.prog, RT_FAIL_NONE, 0},   {&good.prog, RT_FAIL_NONE, 1},
  };
  for (size_t i = 0; i < DG_ARRAY_LEN(steps); i++) {
    rt_cuda_result r;
    CHECK(job_run(p, &b, steps[i].prog, c.path, &tm, &r));
    CHECK_MSG(r.fail == steps[i].want, "step %zu: %s: %s", i, rt_fail_name(r.fail), r.reason);
    CHECK_MSG(r.data_cached == (steps[i].cached == 1), "step %zu: cached %d", i, r.data_cached);
    if (steps[i].want == RT_FAIL_NONE) {
      CHECK(r.checked && r.check.pass && r.check.n_checked == 1000);
      CHECK(r.t.n == 3 && r.t.min > 0 && r.t.median <= r.t.max);
      if (!r.data_cached) CHECK(r.setup_s > 0);
    } else {
      CHECK(r.ctx_broken);
    }
  }
  CHECK_EQ(rt_worker_pool_restarts(p), 2); /* the fault and the hang */
  rt_worker_pool_free(p);
  rt_cubin_free(&b);
  data_case_free(&c);
}

DG_TEST(gpu_cache_wrong_after_correct) {
  if (!have_gpu()) return;
  dg_status st;
  data_case c;
  bool made = data_case_write(&c, vadd_text, false, "cache_w.dat", 11, &st);
  CHECK_MSG(made, "%s", st.msg);
  rt_cubin b;
  if (!compile_or_fail(vadd_kernels_src, "vaddk", &b)) return;
  vadd_prog good, short_by_one, nothing, clobber;
  vadd_prog_init(&good, &c, "vadd", 1000);
  vadd_prog_init(&short_by_one, &c, "vadd", 999);
  vadd_prog_init(&nothing, &c, "nothing", 1000);
  vadd_prog_init(&clobber, &c, "clobber", 1000);
  rt_cuda_timing tm = {1, 3, true, 2.0};
  rt_worker_pool *p;
  CHECK(rt_cuda_pool_new(1, 1, 30, &p, &st));
  rt_cuda_result r;
  CHECK(job_run(p, &b, &good.prog, c.path, &tm, &r));
  CHECK_MSG(r.fail == RT_FAIL_NONE, "%s", r.reason);
  /* the last element was right in the buffer a moment ago: poisoned again */
  CHECK(job_run(p, &b, &short_by_one.prog, c.path, &tm, &r));
  CHECK(r.data_cached && r.fail == RT_FAIL_WRONG);
  CHECK_MSG(r.check.n_bad == 1 && strstr(r.check.first_bad, "C[999]: got ") &&
                strstr(r.check.first_bad, "nan"),
            "%lld bad, first %s", (long long)r.check.n_bad, r.check.first_bad);
  CHECK(!r.t.n); /* no times for a wrong kernel */
  CHECK(job_run(p, &b, &nothing.prog, c.path, &tm, &r));
  CHECK(r.data_cached && r.fail == RT_FAIL_WRONG && r.check.n_bad == 1000);
  /* a kernel that zeroes an input after using it passes its own check, and
   * the next job still gets the data set's input */
  CHECK(job_run(p, &b, &clobber.prog, c.path, &tm, &r));
  CHECK_MSG(r.data_cached && r.fail == RT_FAIL_NONE, "%s", r.reason);
  CHECK(job_run(p, &b, &good.prog, c.path, &tm, &r));
  CHECK_MSG(r.data_cached && r.fail == RT_FAIL_NONE && r.check.n_bad == 0, "%s", r.reason);
  CHECK(job_run(p, &b, &short_by_one.prog, c.path, &tm, &r));
  CHECK(r.fail == RT_FAIL_WRONG && r.check.n_bad == 1);
  /* more timed runs than the runtime queues at once, read in turn */
  rt_cuda_timing many = {2, 150, true, 2.0};
  CHECK(job_run(p, &b, &good.prog, c.path, &many, &r));
  CHECK_MSG(r.fail == RT_FAIL_NONE, "%s", r.reason);
  CHECK(r.t.n == 150 && r.t.min > 0 && r.t.q1 <= r.t.median && r.t.median <= r.t.q3);
  printf("  vadd 1000, 150 runs after L2 flushes: median %.2f us (IQR %.2f..%.2f)\n",
         r.t.median * 1e6, r.t.q1 * 1e6, r.t.q3 * 1e6);
  CHECK_EQ(rt_worker_pool_restarts(p), 0);
  rt_worker_pool_free(p);
  rt_cubin_free(&b);
  data_case_free(&c);
}

static const char *const silu_mul_src =
    "extern \"C\" __global__ void silu(const float *g, float *t, int n) {\n"
    "  int i = blockIdx.x * blockDim.x + threadIdx.x;\n"
    "  if (i < n) { float x = g[i]; t[i] = x / (1.0f + expf(-x)); }\n"
    "}\n"
    "extern \"C\" __global__ void skip(const float *g, float *t, int n) {\n"
    "  (void)g; (void)t; (void)n;\n"
    "}\n"
    "extern \"C\" __global__ void mul(const float *t, const float *u, float *o, int n) {\n"
    "  int i = blockIdx.x * blockDim.x + threadIdx.x;\n"
    "  if (i < n) o[i] = t[i] * u[i];\n"
    "}\n";

DG_TEST(gpu_cache_intermediate_poisoned_again) {
  if (!have_gpu()) return;
  dg_status st;
  data_case c;
  bool made = data_case_write(&c, "silu_mul:m=64,n=96,dtype=f32", true, "cache_s.dat", 5, &st);
  CHECK_MSG(made, "%s", st.msg);
  rt_cubin b;
  if (!compile_or_fail(silu_mul_src, "silu_mul", &b)) return;
  int n = 64 * 96;
  /* params gate, up, T_multiply; then the intermediate T_silu */
  c.bufs[3] = (rt_cuda_buf){NULL, DG_F32, n, -1, false};
  rt_cuda_arg a1[3] = {{RT_CUDA_ARG_BUF, 0, 0, 0}, {RT_CUDA_ARG_BUF, 3, 0, 0}, {RT_CUDA_ARG_I32, 0, n, 0}};
  rt_cuda_arg a2[4] = {{RT_CUDA_ARG_BUF, 3, 0, 0}, {RT_CUDA_ARG_BUF, 1, 0, 0},
                       {RT_CUDA_ARG_BUF, 2, 0, 0}, {RT_CUDA_ARG_I32, 0, n, 0}};
  rt_cuda_launch l[2] = {{"silu", {(n + 127) / 128, 1, 1}, {128, 1, 1}, 0, a1, 3},
                         {"mul", {(n + 127) / 128, 1, 1}, {128, 1, 1}, 0, a2, 4}};
  rt_cuda_program prog = {c.bufs, 4, l, 2};
  rt_cuda_timing tm = {1, 3, true, 2.0};
  rt_worker_pool *p;
  CHECK(rt_cuda_pool_new(1, 1, 30, &p, &st));
  rt_cuda_result r;
  CHECK(job_run(p, &b, &prog, c.path, &tm, &r));
  CHECK_MSG(r.fail == RT_FAIL_NONE && r.check.n_checked == n, "%s", r.reason);
  /* the intermediate held the right values a moment ago: poisoned again */
  l[0].kernel = "skip";
  CHECK(job_run(p, &b, &prog, c.path, &tm, &r));
  CHECK_MSG(r.data_cached && r.fail == RT_FAIL_WRONG && r.check.n_bad == n, "%s", r.reason);
  l[0].kernel = "silu";
  CHECK(job_run(p, &b, &prog, c.path, &tm, &r));
  CHECK_MSG(r.data_cached && r.fail == RT_FAIL_NONE, "%s", r.reason);
  CHECK_EQ(rt_worker_pool_restarts(p), 0);
  rt_worker_pool_free(p);
  rt_cubin_free(&b);
  data_case_free(&c);
}

static const char *const matmul_src =
    "extern \"C\" __global__ void mm(const float *A, const float *B, float *C, int M, int N, int K) {\n"
    "  int r = blockIdx.y * 16 + threadIdx.y, c = blockIdx.x * 16 + threadIdx.x;\n"
    "  if (r >= M || c >= N) return;\n"
    "  float acc = 0.f;\n"
    "  for (int k = 0; k < K; k++) acc += A[r * K + k] * B[k * N + c];\n"
    "  C[r * N + c] = acc;\n"
    "}\n";

DG_TEST(gpu_cache_data_sets_change) {
  if (!have_gpu()) return;
  dg_status st;
  data_case a, bb, m;
  bool made = data_case_write(&a, vadd_text, false, "ds_a.dat", 21, &st) &&
              data_case_write(&bb, vadd_text, false, "ds_b.dat", 22, &st) &&
              data_case_write(&m, "gemm:m=40,n=24,k=72,dtype=f32", true, "ds_m.dat", 23, &st);
  CHECK_MSG(made, "%s", st.msg);
  rt_cubin kb, mb;
  if (!compile_or_fail(vadd_kernels_src, "vaddk", &kb)) return;
  if (!compile_or_fail(matmul_src, "mm", &mb)) return;
  vadd_prog va, vb;
  vadd_prog_init(&va, &a, "vadd", 1000);
  vadd_prog_init(&vb, &bb, "vadd", 1000);
  rt_cuda_arg margs[6] = {{RT_CUDA_ARG_BUF, 0, 0, 0}, {RT_CUDA_ARG_BUF, 1, 0, 0},
                          {RT_CUDA_ARG_BUF, 2, 0, 0}, {RT_CUDA_ARG_I32, 0, 40, 0},
                          {RT_CUDA_ARG_I32, 0, 24, 0}, {RT_CUDA_ARG_I32, 0, 72, 0}};
  rt_cuda_launch ml = {"mm", {2, 3, 1}, {16, 16, 1}, 0, margs, 6};
  rt_cuda_program mprog = {m.bufs, 3, &ml, 1};
  rt_cuda_timing tm = {1, 3, true, 2.0};
  rt_worker_pool *p;
  CHECK(rt_cuda_pool_new(1, 1, 30, &p, &st));
  /* one worker, three data sets in turn: each job checked against its own
   * reference (a and b have the same shapes, different numbers) */
  const struct {
    const rt_cubin *bin;
    const rt_cuda_program *prog;
    const char *path;
    bool cached;
  } steps[] = {
      {&kb, &va.prog, a.path, false}, {&kb, &va.prog, a.path, true},
      {&kb, &vb.prog, bb.path, false}, {&kb, &va.prog, a.path, false},
      {&mb, &mprog, m.path, false}, {&mb, &mprog, m.path, true},
      {&kb, &vb.prog, bb.path, false}, {&kb, &vb.prog, bb.path, true},
  };
  rt_cuda_result r;
  for (size_t i = 0; i < DG_ARRAY_LEN(steps); i++) {
    CHECK(job_run(p, steps[i].bin, steps[i].prog, steps[i].path, &tm, &r));
    CHECK_MSG(r.fail == RT_FAIL_NONE && r.checked && r.check.pass, "step %zu: %s", i, r.reason);
    CHECK_MSG(r.data_cached == steps[i].cached, "step %zu: cached %d", i, r.data_cached);
  }
  /* b's program on a's file would be right too (same shapes): run a's
   * file, then rewrite it in place with other numbers: the worker must
   * see the new file, not its buffers of the old one */
  CHECK(job_run(p, &kb, &va.prog, a.path, &tm, &r));
  CHECK(r.fail == RT_FAIL_NONE);
  data_case again;
  made = data_case_write(&again, vadd_text, false, "ds_a.dat", 99, &st);
  CHECK_MSG(made, "%s", st.msg);
  CHECK_STREQ(again.path, a.path);
  CHECK(job_run(p, &kb, &va.prog, a.path, &tm, &r));
  CHECK_MSG(r.fail == RT_FAIL_NONE && !r.data_cached, "%s (cached %d)", r.reason, r.data_cached);
  CHECK(job_run(p, &kb, &va.prog, a.path, &tm, &r));
  CHECK_MSG(r.fail == RT_FAIL_NONE && r.data_cached, "%s", r.reason);
  /* a program that disagrees with the data set is refused, and the worker
   * goes on with its buffers */
  CHECK(job_run(p, &mb, &mprog, a.path, &tm, &r));
  CHECK(r.fail == RT_FAIL_SETUP && strstr(r.reason, "in the data set"));
  CHECK(job_run(p, &kb, &va.prog, a.path, &tm, &r));
  CHECK_MSG(r.fail == RT_FAIL_NONE && r.data_cached, "%s", r.reason);
  CHECK_EQ(rt_worker_pool_restarts(p), 0);
  rt_worker_pool_free(p);
  rt_cubin_free(&kb);
  rt_cubin_free(&mb);
  data_case_free(&a);
  data_case_free(&bb);
  data_case_free(&m);
  data_case_free(&again);
}
