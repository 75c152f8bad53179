/* test_rt_cuda.c: the CUDA runtime and the workers.
 *
 * cuda_*: what runs without a GPU: NVRTC compiling real kernels to CUBIN and
 * PTX (skipped where libnvrtc is absent), its error log, batch
 * and grouped compilation, the worker pool with a fake job handler that
 * crashes, hangs, exits or succeeds, a crashing CPU kernel run through a
 * worker, the GPU job path up to the point where a GPU is needed, data
 * set files whole or absent when their writer is killed in the middle.
 * gpu_*: on a GPU (skipped elsewhere; `make test-gpu` runs
 * them): vector add, tiled matmul and a two-launch program with an
 * intermediate buffer, each checked against the CPU's float64 reference; a
 * faulting and a hanging kernel that cost one job each while the pool goes
 * on; the empty kernel's launch latency.
 */
#include <dirent.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include "dragon/lower.h"
#include "dragon/rt_cuda.h"
#include "dragon/wl.h"
#include "rt/cuda_api.h"
#include "test.h"

static bool have_nvrtc(void) {
  dg_status st;
  if (rt_nvrtc_available(&st)) return true;
  dg_test_skip("NVRTC is not here: %s", st.msg);
  return false;
}

static const char *const vadd_src =
    "extern \"C\" __global__ void vadd(const float *a, const float *b, float *c, int n) {\n"
    "  int i = blockIdx.x * blockDim.x + threadIdx.x;\n"
    "  if (i < n) c[i] = a[i] + b[i];\n"
    "}\n";

DG_TEST(cuda_nvrtc_cubin_and_ptx) {
  if (!have_nvrtc()) return;
  rt_cubin b;
  dg_status st;
  bool ok = rt_nvrtc_compile(vadd_src, "vadd", "sm_90", &b, &st);
  CHECK_OK(st);
  CHECK(ok);
  CHECK(!b.is_ptx);
  CHECK(b.size > 64);
  CHECK(memcmp(b.image, "\177ELF", 4) == 0);
  CHECK(memmem(b.image, b.size, "vadd", 4) != NULL);
  CHECK_STREQ(b.arch, "sm_90");
  CHECK(b.log != NULL);
  rt_cubin_free(&b);

  ok = rt_nvrtc_compile(vadd_src, "vadd", "compute_90", &b, &st);
  CHECK_OK(st);
  CHECK(ok && b.is_ptx);
  CHECK(strstr(b.image, ".entry vadd") != NULL);
  CHECK(strstr(b.image, ".target sm_90") != NULL);
  CHECK_EQ(b.size, strlen(b.image) + 1); /* PTX counts its NUL */
  rt_cubin_free(&b);
}

/* A compilation past its time limit is stopped and says so; the same
 * source without a limit (and with a generous one) compiles. */
DG_TEST(cuda_nvrtc_time_limit) {
  if (!have_nvrtc()) return;
  if (!rt_nvrtc_can_cancel()) {
    SKIP("this NVRTC cannot stop a compilation (before CUDA 12.8)");
  }
  bool cached = rt_nvrtc_cache_set(false); /* every call compiles */
  /* a body NVVM takes a while over: 512 unrolled dependent updates */
  dg_str src;
  dg_str_init(&src);
  dg_str_puts(&src, "extern \"C\" __global__ void slow(float *x) {\n  float v = x[threadIdx.x];\n"
                    "#pragma unroll\n  for (int i = 0; i < 512; i++) v = v * 1.0001f + "
                    "__sinf(v + i);\n  x[threadIdx.x] = v;\n}\n");
  rt_cubin b;
  dg_status st;
  bool ok = rt_nvrtc_compile_within(src.s, "slow", "sm_90", 1e-6, &b, &st);
  CHECK(!ok);
  CHECK_MSG(strstr(st.msg, "nvrtc: slow.cu: stopped after") != NULL, "%s", st.msg);
  CHECK(b.image == NULL);
  rt_cubin_free(&b);
  ok = rt_nvrtc_compile_within(src.s, "slow", "sm_90", 600, &b, &st);
  CHECK_MSG(ok, "%s", st.msg);
  CHECK(b.size > 64);
  rt_cubin_free(&b);
  dg_str_free(&src);
  rt_nvrtc_cache_set(cached);
}

DG_TEST(cuda_nvrtc_f16_header) {
  if (!have_nvrtc()) return;
  static const char *const src =
      "#include <cuda_fp16.h>\n"
      "extern \"C\" __global__ void h(const __half *a, __half *b) {\n"
      "  b[threadIdx.x] = __float2half(__half2float(a[threadIdx.x]) * 2.0f);\n"
      "}\n";
  rt_cubin b;
  dg_status st;
  bool ok = rt_nvrtc_compile(src, "half", "sm_90", &b, &st);
  CHECK_OK(st);
  CHECK(ok);
  rt_cubin_free(&b);
}

DG_TEST(cuda_nvrtc_error_log) {
  if (!have_nvrtc()) return;
  static const char *const src =
      "extern \"C\" __global__ void bad(float *p) {\n"
      "  p[threadIdx.x] = undeclared_thing + 1;\n"
      "}\n";
  rt_cubin b;
  dg_status st;
  CHECK(!rt_nvrtc_compile(src, "broken", "sm_90", &b, &st));
  CHECK_ERR(st, "nvrtc: broken.cu for sm_90 failed");
  CHECK_ERR(st, "broken.cu(2)");
  CHECK_ERR(st, "undeclared_thing");
  CHECK(b.image == NULL);
  CHECK(b.log && strstr(b.log, "undeclared_thing") && strstr(b.log, "error"));
  rt_cubin_free(&b);

  CHECK(!rt_nvrtc_compile(vadd_src, "vadd", "sm_nine", &b, &st));
  CHECK_ERR(st, "unknown target 'sm_nine'");
  rt_cubin_free(&b);
}

/* Compilations in NVRTC worker processes give what this process gives:
 * the same CUBIN and PTX bytes, the same errors and logs, the same limit;
 * and many threads share fewer processes. */
DG_TEST(cuda_nvrtc_processes) {
  if (!have_nvrtc()) return;
  static const char *const bad =
      "extern \"C\" __global__ void bad(float *p) {\n  p[0] = undeclared_thing;\n}\n";
  const char *archs[] = {"sm_90", "compute_90"};
  rt_cubin here[2], there[2], bh, bt;
  dg_status st, sh, stt;
  bool cached = rt_nvrtc_cache_set(false); /* every call compiles */
  rt_nvrtc_set_processes(0);
  for (int a = 0; a < 2; a++) {
    CHECK(rt_nvrtc_compile(vadd_src, "vadd", archs[a], &here[a], &st));
    CHECK_OK(st);
  }
  CHECK(!rt_nvrtc_compile(bad, "broken", "sm_90", &bh, &sh));
  rt_nvrtc_set_processes(2);
  CHECK_EQ(rt_nvrtc_processes(), 2);
  for (int a = 0; a < 2; a++) {
    CHECK(rt_nvrtc_compile(vadd_src, "vadd", archs[a], &there[a], &st));
    CHECK_OK(st);
    CHECK_EQ(there[a].size, here[a].size);
    CHECK(there[a].image && memcmp(there[a].image, here[a].image, here[a].size) == 0);
    CHECK_EQ(there[a].is_ptx, here[a].is_ptx);
    CHECK_STREQ(there[a].arch, here[a].arch);
    CHECK(there[a].seconds > 0);
    rt_cubin_free(&here[a]);
    rt_cubin_free(&there[a]);
  }
  char why[512];
  rt_nvrtc_processes_error(why, sizeof why);
  /* the workers started (a failure sets 0 and says why) */
  CHECK_MSG(rt_nvrtc_processes() == 2, "no NVRTC worker: %s", why);
  CHECK(!rt_nvrtc_compile(bad, "broken", "sm_90", &bt, &stt));
  CHECK_EQ(stt.code, sh.code);
  CHECK_STREQ(stt.msg, sh.msg);
  CHECK_STREQ(bt.log, bh.log);
  CHECK(bt.image == NULL);
  rt_cubin_free(&bh);
  rt_cubin_free(&bt);
  CHECK(!rt_nvrtc_compile(vadd_src, "vadd", "sm_nine", &bt, &stt));
  CHECK_ERR(stt, "unknown target 'sm_nine'");
  rt_cubin_free(&bt);
  if (rt_nvrtc_can_cancel()) {
    /* a body NVVM takes a while over, as in cuda_nvrtc_time_limit */
    static const char *const slow =
        "extern \"C\" __global__ void slow(float *x) {\n  float v = x[threadIdx.x];\n"
        "#pragma unroll\n  for (int i = 0; i < 512; i++) v = v * 1.0001f + __sinf(v + i);\n"
        "  x[threadIdx.x] = v;\n}\n";
    CHECK(!rt_nvrtc_compile_within(slow, "slow", "sm_90", 1e-6, &bt, &stt));
    CHECK_ERR(stt, "nvrtc: slow.cu: stopped after");
    rt_cubin_free(&bt);
  }
  /* six compilations on three threads, two processes */
  enum { N = 6 };
  rt_nvrtc_job jobs[N];
  rt_cubin out[N];
  dg_status sts[N];
  for (int i = 0; i < N; i++) jobs[i] = (rt_nvrtc_job){i == 4 ? bad : vadd_src, "many", "sm_90"};
  CHECK_EQ(rt_nvrtc_compile_batch(jobs, N, 3, out, sts), N - 1);
  for (int i = 0; i < N; i++) {
    CHECK_EQ(sts[i].code == DG_OK, i != 4);
    rt_cubin_free(&out[i]);
  }
  rt_nvrtc_set_processes(0);
  rt_nvrtc_cache_set(cached);
}

static const char *const slow_src =
    "extern \"C\" __global__ void slow(float *x) {\n  float v = x[threadIdx.x];\n"
    "#pragma unroll\n  for (int i = 0; i < 512; i++) v = v * 1.0001f + __sinf(v + i);\n"
    "  x[threadIdx.x] = v;\n}\n";

typedef struct {
  const char *src;
  bool ok;
  atomic_int *step; /* the first thread: compile, tell, wait a moment, exit */
} compile_job;

static void *compile_in_thread(void *arg) {
  compile_job *j = arg;
  rt_cubin b;
  dg_status st;
  j->ok = rt_nvrtc_compile(j->src, "t", "sm_90", &b, &st);
  rt_cubin_free(&b);
  if (j->step) {
    atomic_store(j->step, 1);
    while (atomic_load(j->step) < 2) usleep(1000);
    usleep(50 * 1000); /* the other thread's compilation is under way */
  }
  return NULL;
}

/* A worker outlives the thread whose compilation started it: the threads
 * that compile come and go within a round of the tuner, and a worker
 * forked by one of them died with it (PR_SET_PDEATHSIG), taking with it
 * the compilation another thread had sent it. */
DG_TEST(cuda_nvrtc_processes_outlive_threads) {
  if (!have_nvrtc()) return;
  bool cached = rt_nvrtc_cache_set(false); /* both rounds compile */
  rt_nvrtc_set_processes(1);
  for (int round = 0; round < 2; round++) {
    atomic_int step;
    atomic_init(&step, 0);
    compile_job first = {vadd_src, false, &step}, second = {slow_src, false, NULL};
    pthread_t a, b;
    CHECK(pthread_create(&a, NULL, compile_in_thread, &first) == 0);
    while (atomic_load(&step) < 1) usleep(1000);
    CHECK(pthread_create(&b, NULL, compile_in_thread, &second) == 0);
    usleep(20 * 1000);
    atomic_store(&step, 2); /* the first thread exits while the second compiles */
    pthread_join(a, NULL);
    pthread_join(b, NULL);
    CHECK_MSG(first.ok && second.ok, "round %d: %d %d", round, first.ok, second.ok);
  }
  char why[512];
  rt_nvrtc_processes_error(why, sizeof why);
  CHECK_MSG(rt_nvrtc_processes() == 1, "no NVRTC worker: %s", why);
  rt_nvrtc_set_processes(0);
  rt_nvrtc_cache_set(cached);
}

typedef struct {
  const char *src, *arch;
  rt_cubin b;
  bool ok;
} cache_job;

static void *cache_compile(void *arg) {
  cache_job *j = arg;
  dg_status st;
  j->ok = rt_nvrtc_compile(j->src, "c", j->arch, &j->b, &st);
  return NULL;
}

/* A source is compiled once: again (on this thread or on several at once)
 * it comes from the cache with the same bytes; another architecture, name
 * or source compiles; a failure is never kept. */
DG_TEST(cuda_nvrtc_cache) {
  if (!have_nvrtc()) return;
  bool was = rt_nvrtc_cache_set(true);
  rt_nvrtc_cache_clear();
  int64_t hits, misses;
  rt_cubin a, b, c;
  dg_status st;
  CHECK(rt_nvrtc_compile(slow_src, "c", "sm_90", &a, &st));
  CHECK(rt_nvrtc_compile(slow_src, "c", "sm_90", &b, &st));
  rt_nvrtc_cache_stats(&hits, &misses);
  CHECK_EQ(hits, 1);
  CHECK_EQ(misses, 1);
  CHECK_EQ(a.size, b.size);
  CHECK(memcmp(a.image, b.image, a.size) == 0);
  CHECK_STREQ(a.log, b.log);
  CHECK(b.seconds < a.seconds);
  rt_cubin_free(&b);
  /* another architecture, another name, another source */
  CHECK(rt_nvrtc_compile(slow_src, "c", "compute_90", &b, &st) && b.is_ptx);
  rt_cubin_free(&b);
  CHECK(rt_nvrtc_compile(slow_src, "d", "sm_90", &b, &st));
  rt_cubin_free(&b);
  CHECK(rt_nvrtc_compile(vadd_src, "c", "sm_90", &b, &st));
  rt_nvrtc_cache_stats(&hits, &misses);
  CHECK_EQ(hits, 1);
  CHECK_EQ(misses, 4);
  CHECK(b.size != a.size || memcmp(a.image, b.image, a.size) != 0);
  rt_cubin_free(&b);
  /* a failure, twice: compiled twice */
  static const char *const bad = "extern \"C\" __global__ void k(float *p) { p[0] = nope; }\n";
  CHECK(!rt_nvrtc_compile(bad, "c", "sm_90", &c, &st));
  rt_cubin_free(&c);
  CHECK(!rt_nvrtc_compile(bad, "c", "sm_90", &c, &st));
  CHECK_ERR(st, "nope");
  rt_cubin_free(&c);
  rt_nvrtc_cache_stats(&hits, &misses);
  CHECK_EQ(misses, 6);
  /* four threads at once on a new source: one compiles, three wait */
  rt_nvrtc_cache_clear();
  enum { T = 4 };
  cache_job jobs[T];
  pthread_t th[T];
  for (int i = 0; i < T; i++) {
    jobs[i] = (cache_job){slow_src, "sm_90", {0}, false};
    CHECK(pthread_create(&th[i], NULL, cache_compile, &jobs[i]) == 0);
  }
  for (int i = 0; i < T; i++) pthread_join(th[i], NULL);
  rt_nvrtc_cache_stats(&hits, &misses);
  CHECK_EQ(misses, 1);
  CHECK_EQ(hits, T - 1);
  for (int i = 0; i < T; i++) {
    CHECK(jobs[i].ok);
    CHECK_EQ(jobs[i].b.size, a.size);
    CHECK(jobs[i].b.image && memcmp(jobs[i].b.image, a.image, a.size) == 0);
    rt_cubin_free(&jobs[i].b);
  }
  /* off: every call compiles */
  rt_nvrtc_cache_set(false);
  rt_nvrtc_cache_clear();
  CHECK(rt_nvrtc_compile(slow_src, "c", "sm_90", &b, &st));
  rt_cubin_free(&b);
  rt_nvrtc_cache_stats(&hits, &misses);
  CHECK_EQ(hits + misses, 0);
  rt_cubin_free(&a);
  rt_nvrtc_cache_set(was);
}

/* Kernel i: a uniquely named kernel; `broken` plants an error in one. */
static char *numbered_kernel(int i, bool broken) {
  dg_str s;
  dg_str_init(&s);
  dg_str_printf(&s,
                "extern \"C\" __global__ void dg_k%d(float *p) {\n"
                "  p[threadIdx.x] = SCALE * %d.0f%s;\n"
                "}\n",
                i, i, broken ? " + not_declared" : "");
  return dg_str_take(&s);
}

DG_TEST(cuda_nvrtc_batch) {
  if (!have_nvrtc()) return;
  enum { N = 6 };
  char *src[N];
  rt_nvrtc_job jobs[N];
  char names[N][16];
  for (int i = 0; i < N; i++) {
    dg_str s;
    dg_str_init(&s);
    dg_str_puts(&s, "#define SCALE 2.0f\n");
    char *k = numbered_kernel(i, i == 3);
    dg_str_puts(&s, k);
    free(k);
    src[i] = dg_str_take(&s);
    snprintf(names[i], sizeof names[i], "b%d", i);
    jobs[i] = (rt_nvrtc_job){src[i], names[i], "sm_90"};
  }
  rt_cubin out[N];
  dg_status sts[N];
  int ok = rt_nvrtc_compile_batch(jobs, N, 2, out, sts);
  CHECK_EQ(ok, N - 1);
  for (int i = 0; i < N; i++) {
    if (i == 3) {
      CHECK(sts[i].code != DG_OK && strstr(sts[i].msg, "b3.cu"));
      CHECK(out[i].image == NULL);
    } else {
      CHECK(sts[i].code == DG_OK && out[i].image != NULL);
      char want[16];
      snprintf(want, sizeof want, "dg_k%d", i);
      CHECK(memmem(out[i].image, out[i].size, want, strlen(want)) != NULL);
    }
    rt_cubin_free(&out[i]);
    free(src[i]);
  }
}

DG_TEST(cuda_nvrtc_grouped) {
  if (!have_nvrtc()) return;
  enum { N = 9, BAD = 5 };
  char *k[N];
  for (int i = 0; i < N; i++) k[i] = numbered_kernel(i, i == BAD);
  rt_nvrtc_grouped g;
  rt_nvrtc_compile_grouped("#define SCALE 3.0f\n", (const char *const *)k, N, 4, 2, "sm_90", &g);
  CHECK_EQ(g.n, N);
  CHECK_EQ(g.n_ok, N - 1);
  CHECK_EQ(g.bin_of[BAD], -1);
  CHECK(g.st[BAD].code != DG_OK && strstr(g.st[BAD].msg, "not_declared"));
  /* groups 0 and 2 compiled whole; the group of the broken kernel was
   * split, so its three good kernels sit in modules of their own */
  CHECK_EQ(g.bin_of[0], g.bin_of[3]);
  CHECK_EQ(g.bin_of[8], 2);
  CHECK(g.bin_of[4] != g.bin_of[6] && g.bin_of[4] >= 3 && g.bin_of[6] >= 3);
  for (int i = 0; i < N; i++) {
    if (i == BAD) continue;
    CHECK(g.st[i].code == DG_OK);
    const rt_cubin *b = &g.bins[g.bin_of[i]];
    char want[16];
    snprintf(want, sizeof want, "dg_k%d", i);
    CHECK(b->image && memmem(b->image, b->size, want, strlen(want)) != NULL);
  }
  rt_nvrtc_grouped_free(&g);
  for (int i = 0; i < N; i++) free(k[i]);
}

/* ---- workers ----------------------------------------------------------------- */

/* The fake job handler: "ok N" replies 2N, "segv" dies of SIGSEGV, "hang"
 * sleeps forever, "exit" exits 3, "retire N" replies and retires. */
static bool fake_fn(void *ctx, const void *job, size_t len, dg_str *reply) {
  (void)ctx;
  char buf[64];
  snprintf(buf, sizeof buf, "%.*s", (int)(len < 63 ? len : 63), (const char *)job);
  int n = 0;
  if (sscanf(buf, "ok %d", &n) == 1) {
    dg_str_printf(reply, "%d from %d", 2 * n, (int)getpid());
    return true;
  }
  if (strcmp(buf, "segv") == 0) raise(SIGSEGV);
  if (strcmp(buf, "hang") == 0)
    for (;;) pause();
  if (strcmp(buf, "exit") == 0) _exit(3);
  if (sscanf(buf, "retire %d", &n) == 1) {
    dg_str_printf(reply, "%d", n);
    return false;
  }
  dg_str_puts(reply, "?");
  return true;
}

DG_TEST(cuda_worker_pool_survives) {
  rt_worker_opts o = {2, 0, 5.0, fake_fn, NULL};
  rt_worker_pool *p;
  dg_status st;
  CHECK(rt_worker_pool_new(&o, &p, &st));
  static const char *const jobs[] = {"ok 1", "segv", "ok 2", "hang", "ok 3", "exit",
                                     "retire 7", "ok 4", "ok 5"};
  enum { N = (int)DG_ARRAY_LEN(jobs) };
  for (int i = 0; i < N; i++)
    rt_worker_pool_submit(p, (uint64_t)i, jobs[i], strlen(jobs[i]), i == 3 ? 0.3 : 0);
  CHECK_EQ(rt_worker_pool_pending(p), N);
  rt_worker_result r[N];
  bool seen[N] = {false};
  int got = 0;
  rt_worker_result one;
  while (rt_worker_pool_next(p, &one, &st)) {
    CHECK(one.id < N && !seen[one.id]);
    seen[one.id] = true;
    r[one.id] = one;
    got++;
  }
  CHECK_OK(st);
  CHECK_EQ(got, N);
  CHECK_EQ(rt_worker_pool_pending(p), 0);
  for (int i = 0; i < N; i++) {
    int n = 0;
    if (sscanf(jobs[i], "ok %d", &n) == 1) {
      CHECK_MSG(r[i].outcome == RT_WORKER_REPLIED, "job %d: %s", i, r[i].reason);
      CHECK(atoi(r[i].reply) == 2 * n);
    }
  }
  CHECK_EQ(r[1].outcome, RT_WORKER_CRASHED);
  CHECK(strstr(r[1].reason, "SIGSEGV") || strstr(r[1].reason, "exited")); /* ASan exits */
  CHECK_EQ(r[3].outcome, RT_WORKER_TIMED_OUT);
  CHECK(strstr(r[3].reason, "timed out after 0.30 s") != NULL);
  CHECK_EQ(r[5].outcome, RT_WORKER_CRASHED);
  CHECK_STREQ(r[5].reason, "exited with status 3");
  CHECK_EQ(r[6].outcome, RT_WORKER_REPLIED);
  CHECK_STREQ(r[6].reply, "7");
  CHECK_EQ(rt_worker_pool_restarts(p), 4); /* segv, hang, exit, retire */

  /* the pool keeps going after all that */
  rt_worker_pool_submit(p, 100, "ok 21", 5, 0);
  CHECK(rt_worker_pool_next(p, &one, &st));
  CHECK(one.id == 100 && one.outcome == RT_WORKER_REPLIED && atoi(one.reply) == 42);
  rt_worker_result_free(&one);
  for (int i = 0; i < N; i++) rt_worker_result_free(&r[i]);
  rt_worker_pool_free(p);
}

DG_TEST(cuda_worker_one_active) {
  /* max_active 1: jobs run one at a time even with three workers, so two
   * hangs cost two timeouts in turn and the rest still finish */
  rt_worker_opts o = {3, 1, 0.2, fake_fn, NULL};
  rt_worker_pool *p;
  dg_status st;
  CHECK(rt_worker_pool_new(&o, &p, &st));
  static const char *const jobs[] = {"hang", "ok 1", "hang", "ok 2"};
  for (int i = 0; i < 4; i++) rt_worker_pool_submit(p, (uint64_t)i, jobs[i], strlen(jobs[i]), 0);
  rt_worker_result r;
  int order[4], n = 0;
  while (rt_worker_pool_next(p, &r, &st) && n < 4) {
    order[n++] = (int)r.id;
    CHECK_EQ(r.outcome, (r.id % 2 == 0) ? RT_WORKER_TIMED_OUT : RT_WORKER_REPLIED);
    rt_worker_result_free(&r);
  }
  CHECK_EQ(n, 4);
  for (int i = 0; i < 4; i++) CHECK_EQ(order[i], i); /* one at a time: in order */
  rt_worker_pool_free(p);
}

/* A CPU kernel through a worker: args are in the context, the reply is the
 * output's bytes. */
typedef struct {
  rt_cpu_kernel *k;
  float *out;
  int n;
} cpu_job;

static bool cpu_job_fn(void *ctx, const void *job, size_t len, dg_str *reply) {
  (void)job;
  (void)len;
  cpu_job *c = ctx;
  void *args[1] = {c->out};
  rt_cpu_call(c->k, args);
  dg_str_putn(reply, (const char *)c->out, sizeof(float) * (size_t)c->n);
  return true;
}

DG_TEST(cuda_worker_cpu_kernel_crash) {
  static const char *const src =
      "void good(void **args) { float *o = args[0]; for (int i = 0; i < 4; i++) o[i] = i * 1.5f; }\n"
      "void bad(void **args) { (void)args; volatile float *o = (float *)0; o[3] = 1.0f; }\n";
  static const char *const names[2] = {"good", "bad"};
  rt_cpu_kernel *k[2] = {NULL, NULL};
  dg_status st;
  dg_status_ok(&st);
  CHECK(rt_cpu_compile_many(src, names, 2, k, &st));
  CHECK_OK(st);
  float out[4] = {0};
  cpu_job bad = {k[1], out, 4}, good = {k[0], out, 4};
  rt_worker_result r;
  CHECK(rt_worker_call(cpu_job_fn, &bad, "", 0, 10, &r, &st));
  CHECK_EQ(r.outcome, RT_WORKER_CRASHED);
  rt_worker_result_free(&r);
  CHECK(rt_worker_call(cpu_job_fn, &good, "", 0, 10, &r, &st));
  CHECK_EQ(r.outcome, RT_WORKER_REPLIED);
  CHECK_EQ(r.reply_len, sizeof out);
  float got[4];
  memcpy(got, r.reply, sizeof got);
  CHECK(got[0] == 0.0f && got[3] == 4.5f);
  CHECK(out[3] == 0.0f); /* the kernel ran in the child, not here */
  rt_worker_result_free(&r);
  rt_cpu_free(k[0]);
  rt_cpu_free(k[1]);
}

DG_TEST(cuda_time_stats) {
  double s[] = {5, 1, 4, 2, 3};
  rt_time_stats t;
  rt_time_stats_of(s, 5, &t);
  CHECK_EQ(t.n, 5);
  CHECK_NEAR(t.median, 3, 0);
  CHECK_NEAR(t.min, 1, 0);
  CHECK_NEAR(t.max, 5, 0);
  CHECK_NEAR(t.q1, 2, 0);
  CHECK_NEAR(t.q3, 4, 0);
  double e[] = {4, 1, 2, 3};
  rt_time_stats_of(e, 4, &t);
  CHECK_NEAR(t.median, 2.5, 1e-12);
  CHECK_NEAR(t.q1, 1.75, 1e-12);
  CHECK_NEAR(t.q3, 3.25, 1e-12);
  rt_time_stats_of(e, 0, &t);
  CHECK_EQ(t.n, 0);
  CHECK_STREQ(rt_fail_name(RT_FAIL_ILLEGAL_ADDRESS), "illegal address");
  CHECK_STREQ(rt_fail_name(RT_FAIL_WRONG), "wrong numbers");
}

DG_TEST(cuda_result_from_worker) {
  rt_worker_result w = {7, RT_WORKER_CRASHED, "killed by SIGSEGV", NULL, 0, 0.1};
  rt_cuda_result r;
  rt_cuda_result_from_worker(&w, &r);
  CHECK_EQ(r.fail, RT_FAIL_CRASH);
  CHECK_STREQ(r.reason, "worker killed by SIGSEGV");
  w.outcome = RT_WORKER_TIMED_OUT;
  snprintf(w.reason, sizeof w.reason, "timed out after 2.00 s");
  rt_cuda_result_from_worker(&w, &r);
  CHECK_EQ(r.fail, RT_FAIL_TIMEOUT);
  w.outcome = RT_WORKER_REPLIED;
  w.reply = "garbage";
  w.reply_len = 7;
  rt_cuda_result_from_worker(&w, &r);
  CHECK_EQ(r.fail, RT_FAIL_CRASH);
  CHECK(strstr(r.reason, "malformed reply") != NULL);
}

/* ---- kernels with a reference -------------------------------------------------- */

static const char *const vadd_text =
    "kernel vadd(A: f32[1000], B: f32[1000], C: f32[1000]):\n"
    "  block root:\n"
    "    for i in 1000:\n"
    "      block C(v_i: S(1000) = i):\n"
    "        reads A[v_i], B[v_i]\n"
    "        writes C[v_i]\n"
    "        C[v_i] = A[v_i] + B[v_i]\n";

/* A kernel, its tensors with the float64 reference computed, and the data
 * set file the workers read. */
typedef struct {
  dg_func *f;
  rt_tensors ts;
  rt_cuda_buf bufs[8];
  char path[300];
} ref_case;

static bool ref_case_init(ref_case *c, dg_func *f, const char *file, uint64_t seed,
                          dg_status *st) {
  memset(c, 0, sizeof *c);
  if (f) dg_status_ok(st);
  c->f = f;
  if (!f || !rt_tensors_init(&c->ts, f, st)) return false;
  rt_data_fill(&c->ts, seed, rt_data_dist_for(f));
  if (!rt_interp_run(f, c->ts.ref_args, true, st)) return false;
  DG_ASSERT(c->ts.n <= 8);
  rt_cuda_bufs_for_params(&c->ts, c->bufs);
  snprintf(c->path, sizeof c->path, "%s/%s", dg_test_tmpdir(), file);
  return rt_cuda_data_write(&c->ts, rt_check_reduce_len(f), c->path, st);
}

static void ref_case_free(ref_case *c) {
  rt_tensors_free(&c->ts);
  ir_func_free(c->f);
}

/* One job through the pool, its result decoded. */
static bool pool_run(rt_worker_pool *p, const rt_cuda_job *job, rt_cuda_result *res,
                     dg_status *st) {
  dg_str msg;
  dg_str_init(&msg);
  rt_cuda_job_encode(job, &msg);
  rt_worker_pool_submit(p, 1, msg.s, msg.len, 0);
  dg_str_free(&msg);
  rt_worker_result wr;
  if (!rt_worker_pool_next(p, &wr, st)) return false;
  rt_cuda_result_from_worker(&wr, res);
  rt_worker_result_free(&wr);
  return true;
}

DG_TEST(cuda_job_path_without_gpu) {
  dg_status st;
  if (rt_cuda_available(&st)) {
    SKIP("a GPU is here; the gpu_ tests cover this path");
  }
  CHECK(st.msg[0] != 0 && strstr(st.msg, "cuda") != NULL);
  ref_case c;
  bool made = ref_case_init(&c, ir_parse(vadd_text, "vadd", &st), "vadd.dat", 1, &st);
  CHECK_OK(st);
  CHECK(made);
  rt_cubin fake = {"not a module", 12, false, "sm_90", NULL, 0};
  rt_cuda_arg args[4] = {{RT_CUDA_ARG_BUF, 0, 0, 0}, {RT_CUDA_ARG_BUF, 1, 0, 0},
                         {RT_CUDA_ARG_BUF, 2, 0, 0}, {RT_CUDA_ARG_I32, 0, 1000, 0}};
  rt_cuda_launch l = {"vadd", {4, 1, 1}, {256, 1, 1}, 0, args, 4};
  rt_cuda_program prog = {c.bufs, 3, &l, 1};
  rt_cuda_job job = {&fake, &prog, c.path, 1, {1, 3, true, 2.0}};
  rt_worker_pool *p;
  CHECK(rt_cuda_pool_new(1, 1, 20, &p, &st));

  /* the job and the data set decode and match; only CUDA is missing */
  rt_cuda_result r;
  CHECK(pool_run(p, &job, &r, &st));
  CHECK_EQ(r.fail, RT_FAIL_SETUP);
  CHECK(strstr(r.reason, "cuda") != NULL && !strstr(r.reason, "malformed"));

  /* a program that disagrees with the data set is named */
  rt_cuda_buf wrong[3] = {c.bufs[0], c.bufs[1], c.bufs[2]};
  wrong[1].numel = 999;
  rt_cuda_program prog2 = {wrong, 3, &l, 1};
  job.prog = &prog2;
  CHECK(pool_run(p, &job, &r, &st));
  CHECK_EQ(r.fail, RT_FAIL_SETUP);
  CHECK(strstr(r.reason, "buffer B: f32[999] in the program, B f32[1000] in the data set") != NULL);

  /* a missing data set, and one that is not a data set */
  job.prog = &prog;
  job.data_path = "/nonexistent/x.dat";
  CHECK(pool_run(p, &job, &r, &st));
  CHECK(r.fail == RT_FAIL_SETUP && strstr(r.reason, "/nonexistent/x.dat: no such data set"));
  char junk[300];
  snprintf(junk, sizeof junk, "%s/junk.dat", dg_test_tmpdir());
  CHECK(dg_write_file_atomic(junk, "hello world, not data", 21, &st));
  job.data_path = junk;
  CHECK(pool_run(p, &job, &r, &st));
  CHECK(r.fail == RT_FAIL_SETUP && strstr(r.reason, "not a dragon data set"));
  /* the worker survived all of that */
  CHECK_EQ(rt_worker_pool_restarts(p), 0);
  rt_worker_pool_free(p);
  ref_case_free(&c);
}

/* Whether the data set file at path maps and holds K, ts's inputs, its
 * float64 reference outputs and their baselines (every dtype of ts a float
 * one). */
static bool data_file_holds(const char *path, const rt_tensors *ts, int64_t K) {
  rt_cuda_data m;
  memset(&m, 0, sizeof m);
  dg_status st;
  bool ok = rt_cuda_data_map(&m, path, &st) && m.K == K && m.ts.n == ts->n;
  for (int i = 0; ok && i < ts->n; i++) {
    const rt_tensor *got = &m.ts.t[i], *want = &ts->t[i];
    bool out = want->is_output;
    size_t n = (size_t)want->numel *
               (out ? sizeof(double) : (size_t)dg_dtype_bytes(want->buf->dtype));
    ok = got->numel == want->numel && got->is_output == out &&
         memcmp(out ? got->ref : got->data, out ? want->ref : want->data, n) == 0;
    /* an output's baseline comes whole, or not at all where it has none */
    size_t nb = (size_t)want->numel * (size_t)dg_dtype_bytes(want->buf->dtype);
    if (ok && out) ok = want->base ? got->base && memcmp(got->base, want->base, nb) == 0 : !got->base;
  }
  rt_cuda_data_unmap(&m);
  return ok;
}

/* Files of dir named NAME.tmp.* (a writer's temporary files for NAME). */
static int tmp_files(const char *dir, const char *name) {
  char prefix[300];
  snprintf(prefix, sizeof prefix, "%s.tmp.", name);
  DIR *d = opendir(dir);
  if (!d) return -1;
  int n = 0;
  struct dirent *e;
  while ((e = readdir(d))) n += strncmp(e->d_name, prefix, strlen(prefix)) == 0;
  closedir(d);
  return n;
}

/* Writes ts to path in a child that the kernel kills with SIGXFSZ once
 * the file it writes passes 4 KiB: a writer killed in the middle of the
 * file. True once the child is gone that way. */
static bool data_write_killed(const rt_tensors *ts, int64_t K, const char *path) {
  pid_t pid = fork();
  if (pid == 0) {
    struct rlimit no_core = {0, 0}, small = {4096, 4096};
    setrlimit(RLIMIT_CORE, &no_core);
    signal(SIGXFSZ, SIG_DFL);
    setrlimit(RLIMIT_FSIZE, &small);
    dg_status st;
    rt_cuda_data_write(ts, K, path, &st);
    _exit(0);
  }
  int ws = 0;
  if (pid < 0 || waitpid(pid, &ws, 0) != pid) return false;
  return WIFSIGNALED(ws) && WTERMSIG(ws) == SIGXFSZ;
}

/* A data set file is whole or absent: a writer killed in the middle of
 * replacing one leaves the old file as it was, one killed writing a new
 * one leaves none, each leaves only its temporary file, which
 * dg_remove_stale_tmp removes; a rewrite replaces the file whole. */
DG_TEST(cuda_data_file_complete_or_absent) {
  dg_status st;
  char dir[300];
  snprintf(dir, sizeof dir, "%s/data_atomic", dg_test_tmpdir());
  CHECK(dg_mkdirs(dir, &st));
  ref_case a, b; /* vadd: 16 KB with its header, inputs from seeds 1 and 2 */
  bool made = ref_case_init(&a, ir_parse(vadd_text, "vadd", &st), "data_atomic/v.dat", 1, &st);
  CHECK_OK(st);
  made = made && ref_case_init(&b, ir_parse(vadd_text, "vadd", &st), "data_atomic/w.dat", 2, &st);
  CHECK_OK(st);
  CHECK(made);
  /* b with its baseline, a without */
  CHECK(rt_reference_run(b.f, &b.ts, NULL, &st));
  CHECK(rt_cuda_data_write(&b.ts, rt_check_reduce_len(b.f), b.path, &st));
  int64_t K = rt_check_reduce_len(a.f);
  CHECK(data_file_holds(b.path, &b.ts, K));
  CHECK(data_file_holds(a.path, &a.ts, K));
  CHECK(!data_file_holds(a.path, &b.ts, K));
  CHECK_EQ(tmp_files(dir, "v.dat"), 0);

  /* killed while replacing v.dat with b's tensors: the old file stands */
  CHECK(data_write_killed(&b.ts, K, a.path));
  CHECK_EQ(tmp_files(dir, "v.dat"), 1);
  CHECK(data_file_holds(a.path, &a.ts, K));
  /* killed while writing a new file: there is none */
  char fresh[400];
  snprintf(fresh, sizeof fresh, "%s/fresh.dat", dir);
  CHECK(data_write_killed(&b.ts, K, fresh));
  CHECK(access(fresh, F_OK) != 0);
  CHECK_EQ(tmp_files(dir, "fresh.dat"), 1);
  /* the dead writers' temporary files go */
  CHECK_EQ(dg_remove_stale_tmp(dir), 2);
  CHECK_EQ(tmp_files(dir, "v.dat") + tmp_files(dir, "fresh.dat"), 0);

  /* rewritten: the new file whole, no temporary file left */
  CHECK(rt_cuda_data_write(&b.ts, K, a.path, &st));
  CHECK(data_file_holds(a.path, &b.ts, K));
  CHECK_EQ(tmp_files(dir, "v.dat"), 0);
  ref_case_free(&a);
  ref_case_free(&b);
}

/* ---- on the GPU ---------------------------------------------------------------- */

static bool have_gpu(void) {
  dg_status st;
  if (!rt_cuda_available(&st)) {
    dg_test_skip("no GPU: %s", st.msg);
    return false;
  }
  return have_nvrtc();
}

static bool compile_or_fail(const char *src, const char *name, rt_cubin *b) {
  dg_status st;
  if (rt_nvrtc_compile(src, name, "sm_90", b, &st)) return true;
  dg_test_fail(__FILE__, __LINE__, "%s", st.msg);
  return false;
}

DG_TEST(gpu_vector_add) {
  if (!have_gpu()) return;
  dg_status st;
  ref_case c;
  bool made = ref_case_init(&c, ir_parse(vadd_text, "vadd", &st), "gvadd.dat", 7, &st);
  CHECK_OK(st);
  CHECK(made);
  rt_cubin b;
  if (!compile_or_fail(vadd_src, "vadd", &b)) return;
  rt_cuda_arg args[4] = {{RT_CUDA_ARG_BUF, 0, 0, 0}, {RT_CUDA_ARG_BUF, 1, 0, 0},
                         {RT_CUDA_ARG_BUF, 2, 0, 0}, {RT_CUDA_ARG_I32, 0, 1000, 0}};
  rt_cuda_launch l = {"vadd", {4, 1, 1}, {256, 1, 1}, 0, args, 4};
  rt_cuda_program prog = {c.bufs, 3, &l, 1};
  rt_cuda_job job = {&b, &prog, c.path, 7, {2, 5, true, 5.0}};
  rt_worker_pool *p;
  CHECK(rt_cuda_pool_new(1, 1, 60, &p, &st));
  rt_cuda_result r;
  CHECK(pool_run(p, &job, &r, &st));
  CHECK_MSG(r.fail == RT_FAIL_NONE, "%s: %s", rt_fail_name(r.fail), r.reason);
  CHECK(r.checked && r.check.pass && r.check.n_checked == 1000);
  CHECK_EQ(r.t.n, 5);
  CHECK(r.t.min > 0 && r.t.min <= r.t.median && r.t.median <= r.t.max);

  /* the check can fail: n = 999 leaves the last element poisoned */
  args[3].i = 999;
  CHECK(pool_run(p, &job, &r, &st));
  CHECK_EQ(r.fail, RT_FAIL_WRONG);
  /* the device's poison is all-ones bytes: a NaN that prints as -nan */
  CHECK_MSG(r.check.n_bad == 1 && strstr(r.check.first_bad, "C[999]: got ") &&
                strstr(r.check.first_bad, "nan"),
            "%lld bad, first %s", (long long)r.check.n_bad, r.check.first_bad);
  rt_worker_pool_free(p);
  rt_cubin_free(&b);
  ref_case_free(&c);
}

static const char *const matmul_src =
    "#define T 16\n"
    "extern \"C\" __global__ void mm(const float *A, const float *B, float *C, int M, int N, int K) {\n"
    "  __shared__ float As[T][T], Bs[T][T];\n"
    "  int r = blockIdx.y * T + threadIdx.y, c = blockIdx.x * T + threadIdx.x;\n"
    "  float acc = 0.f;\n"
    "  for (int k0 = 0; k0 < K; k0 += T) {\n"
    "    As[threadIdx.y][threadIdx.x] = (r < M && k0 + threadIdx.x < K) ? A[r * K + k0 + threadIdx.x] : 0.f;\n"
    "    Bs[threadIdx.y][threadIdx.x] = (c < N && k0 + threadIdx.y < K) ? B[(k0 + threadIdx.y) * N + c] : 0.f;\n"
    "    __syncthreads();\n"
    "    for (int k = 0; k < T; k++) acc += As[threadIdx.y][k] * Bs[k][threadIdx.x];\n"
    "    __syncthreads();\n"
    "  }\n"
    "  if (r < M && c < N) C[r * N + c] = acc;\n"
    "}\n";

DG_TEST(gpu_matmul) {
  if (!have_gpu()) return;
  dg_status st;
  ref_case c;
  bool made = ref_case_init(&c, wl_build("gemm:m=100,n=72,k=40,dtype=f32", &st), "gmm.dat", 3, &st);
  CHECK_OK(st);
  CHECK(made);
  rt_cubin b;
  if (!compile_or_fail(matmul_src, "mm", &b)) return;
  rt_cuda_arg args[6] = {{RT_CUDA_ARG_BUF, 0, 0, 0}, {RT_CUDA_ARG_BUF, 1, 0, 0},
                         {RT_CUDA_ARG_BUF, 2, 0, 0}, {RT_CUDA_ARG_I32, 0, 100, 0},
                         {RT_CUDA_ARG_I32, 0, 72, 0}, {RT_CUDA_ARG_I32, 0, 40, 0}};
  rt_cuda_launch l = {"mm", {(72 + 15) / 16, (100 + 15) / 16, 1}, {16, 16, 1}, 0, args, 6};
  rt_cuda_program prog = {c.bufs, 3, &l, 1};
  rt_cuda_job job = {&b, &prog, c.path, 3, {2, 10, true, 5.0}};
  rt_worker_pool *p;
  CHECK(rt_cuda_pool_new(1, 1, 60, &p, &st));
  rt_cuda_result r;
  CHECK(pool_run(p, &job, &r, &st));
  CHECK_MSG(r.fail == RT_FAIL_NONE, "%s: %s", rt_fail_name(r.fail), r.reason);
  CHECK(r.checked && r.check.pass && r.check.n_checked == 100 * 72 && r.check.K == 40);
  printf("  matmul 100x72x40: median %.2f us (IQR %.2f..%.2f), max rel error %.2g\n",
         r.t.median * 1e6, r.t.q1 * 1e6, r.t.q3 * 1e6, r.check.max_rel);
  rt_worker_pool_free(p);
  rt_cubin_free(&b);
  ref_case_free(&c);
}

#define MUL_SRC                                                                          \
  "extern \"C\" __global__ void mul(const float *t, const float *u, float *o, int n) {\n" \
  "  int i = blockIdx.x * blockDim.x + threadIdx.x;\n"                                  \
  "  if (i < n) o[i] = t[i] * u[i];\n"                                                  \
  "}\n"

static const char *const silu_mul_src =
    "extern \"C\" __global__ void silu(const float *g, float *t, int n) {\n"
    "  int i = blockIdx.x * blockDim.x + threadIdx.x;\n"
    "  if (i < n) { float x = g[i]; t[i] = x / (1.0f + expf(-x)); }\n"
    "}\n" MUL_SRC;

/* silu_mul (m=64, n=96) as two launches: silu into the intermediate
 * T_silu, then mul; c's buffers are the params gate, up, T_multiply, and
 * T_silu is added as the fourth. sp must stay where it is. */
typedef struct {
  rt_cuda_arg a1[3], a2[4];
  rt_cuda_launch l[2];
  rt_cuda_program prog;
} silu_mul_prog;

static void silu_mul_program(ref_case *c, silu_mul_prog *sp) {
  int n = 64 * 96;
  c->bufs[3] = (rt_cuda_buf){"T_silu", DG_F32, n, -1, false};
  *sp = (silu_mul_prog){{{RT_CUDA_ARG_BUF, 0, 0, 0}, {RT_CUDA_ARG_BUF, 3, 0, 0}, {RT_CUDA_ARG_I32, 0, n, 0}},
                        {{RT_CUDA_ARG_BUF, 3, 0, 0}, {RT_CUDA_ARG_BUF, 1, 0, 0},
                         {RT_CUDA_ARG_BUF, 2, 0, 0}, {RT_CUDA_ARG_I32, 0, n, 0}},
                        {{0}},
                        {0}};
  sp->l[0] = (rt_cuda_launch){"silu", {(n + 127) / 128, 1, 1}, {128, 1, 1}, 0, sp->a1, 3};
  sp->l[1] = (rt_cuda_launch){"mul", {(n + 127) / 128, 1, 1}, {128, 1, 1}, 0, sp->a2, 4};
  sp->prog = (rt_cuda_program){c->bufs, 4, sp->l, 2};
}

DG_TEST(gpu_two_launches_with_intermediate) {
  if (!have_gpu()) return;
  dg_status st;
  ref_case c;
  bool made = ref_case_init(&c, wl_build("silu_mul:m=64,n=96,dtype=f32", &st), "silu.dat", 5, &st);
  CHECK_OK(st);
  CHECK(made);
  rt_cubin b;
  if (!compile_or_fail(silu_mul_src, "silu_mul", &b)) return;
  int n = 64 * 96;
  silu_mul_prog sp;
  silu_mul_program(&c, &sp);
  rt_cuda_launch *l = sp.l;
  rt_cuda_job job = {&b, &sp.prog, c.path, 5, {1, 5, true, 5.0}};
  rt_worker_pool *p;
  CHECK(rt_cuda_pool_new(1, 1, 60, &p, &st));
  rt_cuda_result r;
  CHECK(pool_run(p, &job, &r, &st));
  CHECK_MSG(r.fail == RT_FAIL_NONE, "%s: %s", rt_fail_name(r.fail), r.reason);
  CHECK(r.checked && r.check.pass && r.check.n_checked == n);

  /* a kernel name the module lacks is a load error, not a crash */
  l[1].kernel = "nope";
  CHECK(pool_run(p, &job, &r, &st));
  CHECK(r.fail == RT_FAIL_LOAD && strstr(r.reason, "'nope'"));
  /* a block of 2048 threads is refused before the driver sees it */
  l[1].kernel = "mul";
  l[1].block[0] = 2048;
  CHECK(pool_run(p, &job, &r, &st));
  CHECK(r.fail == RT_FAIL_LAUNCH && strstr(r.reason, "block 2048x1x1"));
  CHECK_EQ(rt_worker_pool_restarts(p), 0);
  rt_worker_pool_free(p);
  rt_cubin_free(&b);
  ref_case_free(&c);
}

/* silu through a local array the compiler must keep in local memory:
 * LOCAL_N floats a thread */
static const char *const local_silu_src =
    "extern \"C\" __global__ void silu(const float *g, float *t, int n) {\n"
    "  volatile float a[LOCAL_N];\n"
    "  int i = blockIdx.x * blockDim.x + threadIdx.x;\n"
    "  if (i < n) { a[i % LOCAL_N] = g[i]; float x = a[i % LOCAL_N]; t[i] = x / (1.0f + expf(-x)); }\n"
    "}\n";

/* A kernel's local memory is reserved for every thread the GPU holds at
 * once and the driver never gives it back by itself: past 16 KiB a thread
 * the kernel is refused, and below it the reservation is released once
 * the kernel's module is unloaded (the other processes that share the GPU
 * find its memory free again). */
DG_TEST(gpu_local_memory_limit_and_release) {
  if (!have_gpu()) return;
  dg_status st;
  ref_case c;
  int n = 64 * 96;
  bool made = ref_case_init(&c, wl_build("silu_mul:m=64,n=96,dtype=f32", &st), "lsilu.dat", 5, &st);
  CHECK_OK(st);
  CHECK(made);
  silu_mul_prog sp;
  silu_mul_program(&c, &sp);
  rt_cubin big, fits;
  char src[2048];
  snprintf(src, sizeof src, "#define LOCAL_N 6000\n%s%s", local_silu_src, MUL_SRC);
  if (!compile_or_fail(src, "local_big", &big)) return;
  snprintf(src, sizeof src, "#define LOCAL_N 3000\n%s%s", local_silu_src, MUL_SRC);
  if (!compile_or_fail(src, "local_fits", &fits)) return;
  rt_worker_pool *p;
  CHECK(rt_cuda_pool_new(1, 1, 60, &p, &st));
  rt_cuda_result r;

  /* 24,000 bytes a thread: refused before its launch, named */
  rt_cuda_job job = {&big, &sp.prog, c.path, 5, {1, 5, true, 5.0}};
  CHECK(pool_run(p, &job, &r, &st));
  CHECK_MSG(r.fail == RT_FAIL_LAUNCH && strstr(r.reason, "24000 bytes of local memory a thread"),
            "%s: %s", rt_fail_name(r.fail), r.reason);

  /* 12,000 bytes a thread: runs and is right */
  rt_cuda_ctx *ctx = NULL;
  CHECK(rt_cuda_ctx_new(0, &ctx, &st));
  if (!ctx) goto out;
  size_t free0, free1, total;
  CHECK(rt_cuda_memory(ctx, &free0, &total, &st));
  job.bin = &fits;
  CHECK(pool_run(p, &job, &r, &st));
  CHECK_MSG(r.fail == RT_FAIL_NONE, "%s: %s", rt_fail_name(r.fail), r.reason);
  CHECK(r.checked && r.check.pass && r.check.n_checked == n);
  /* its 12,000 bytes for each resident thread (3.2 GB on an H100) are
   * given back once it is done: the worker, still alive, holds no more
   * than before (within 256 MiB) */
  CHECK(rt_cuda_memory(ctx, &free1, &total, &st));
  CHECK_MSG(free1 + ((size_t)256 << 20) >= free0, "free %.2f GiB before, %.2f GiB after",
            free0 / 1073741824.0, free1 / 1073741824.0);
  rt_cuda_ctx_free(ctx);
out:
  CHECK_EQ(rt_worker_pool_restarts(p), 0);
  rt_worker_pool_free(p);
  rt_cubin_free(&big);
  rt_cubin_free(&fits);
  ref_case_free(&c);
}

static const char *const planted_src =
    "extern \"C\" __global__ void fault(float *p) {\n"
    "  ((volatile float *)0x10)[threadIdx.x * 1024] = p[0];\n"
    "}\n"
    "extern \"C\" __global__ void hang(volatile unsigned *p) {\n"
    "  while (p[0] != 12345u) { }\n"
    "}\n"
    "extern \"C\" __global__ void fill(float *p, int n) {\n"
    "  int i = blockIdx.x * blockDim.x + threadIdx.x;\n"
    "  if (i < n) p[i] = 1.0f;\n"
    "}\n";

DG_TEST(gpu_fault_and_hang_cost_one_job) {
  if (!have_gpu()) return;
  dg_status st;
  rt_cubin b;
  if (!compile_or_fail(planted_src, "planted", &b)) return;
  rt_cuda_buf bufs[2] = {{"p", DG_F32, 4096, 0, true}, {"flag", DG_I32, 16, 1, true}};
  rt_cuda_arg fa[1] = {{RT_CUDA_ARG_BUF, 0, 0, 0}};
  rt_cuda_arg ha[1] = {{RT_CUDA_ARG_BUF, 1, 0, 0}};
  rt_cuda_arg ga[2] = {{RT_CUDA_ARG_BUF, 0, 0, 0}, {RT_CUDA_ARG_I32, 0, 4096, 0}};
  rt_cuda_launch fault = {"fault", {8, 1, 1}, {128, 1, 1}, 0, fa, 1};
  rt_cuda_launch hang = {"hang", {1, 1, 1}, {1, 1, 1}, 0, ha, 1};
  rt_cuda_launch good = {"fill", {16, 1, 1}, {256, 1, 1}, 0, ga, 2};
  rt_cuda_program pf = {bufs, 2, &fault, 1}, ph = {bufs, 2, &hang, 1}, pg = {bufs, 2, &good, 1};
  const rt_cuda_program *order[] = {&pg, &pf, &pg, &ph, &pg, &pf, &pg};
  enum { N = (int)DG_ARRAY_LEN(order) };
  rt_worker_pool *p;
  CHECK(rt_cuda_pool_new(2, 1, 30, &p, &st));
  for (int i = 0; i < N; i++) {
    rt_cuda_job job = {&b, order[i], NULL, (uint64_t)i, {1, 3, false, 1.0}};
    dg_str msg;
    dg_str_init(&msg);
    rt_cuda_job_encode(&job, &msg);
    rt_worker_pool_submit(p, (uint64_t)i, msg.s, msg.len, 0);
    dg_str_free(&msg);
  }
  rt_cuda_result res[N];
  rt_worker_result wr;
  int got = 0;
  while (rt_worker_pool_next(p, &wr, &st)) {
    CHECK(wr.id < N);
    rt_cuda_result_from_worker(&wr, &res[wr.id]);
    printf("  job %d: %s %s\n", (int)wr.id, rt_fail_name(res[wr.id].fail), res[wr.id].reason);
    rt_worker_result_free(&wr);
    got++;
  }
  CHECK_OK(st);
  CHECK_EQ(got, N);
  for (int i = 0; i < N; i++) {
    if (order[i] == &pg) CHECK_MSG(res[i].fail == RT_FAIL_NONE, "job %d: %s", i, res[i].reason);
    if (order[i] == &pf) CHECK_MSG(res[i].fail == RT_FAIL_ILLEGAL_ADDRESS, "job %d: %s", i, res[i].reason);
    if (order[i] == &ph) CHECK_MSG(res[i].fail == RT_FAIL_TIMEOUT, "job %d: %s", i, res[i].reason);
  }
  CHECK_EQ(rt_worker_pool_restarts(p), 3); /* each planted job retired its worker */
  rt_worker_pool_free(p);
  rt_cubin_free(&b);
}

DG_TEST(gpu_empty_kernel_latency) {
  if (!have_gpu()) return;
  rt_cubin b;
  if (!compile_or_fail("extern \"C\" __global__ void empty() {}\n", "empty", &b)) return;
  rt_cuda_launch l = {"empty", {1, 1, 1}, {32, 1, 1}, 0, NULL, 0};
  rt_cuda_program prog = {NULL, 0, &l, 1};
  rt_cuda_job job = {&b, &prog, NULL, 0, {20, 200, false, 5.0}};
  rt_worker_pool *p;
  dg_status st;
  CHECK(rt_cuda_pool_new(1, 1, 60, &p, &st));
  rt_cuda_result r;
  CHECK(pool_run(p, &job, &r, &st));
  CHECK_MSG(r.fail == RT_FAIL_NONE, "%s: %s", rt_fail_name(r.fail), r.reason);
  CHECK(!r.checked && r.t.n == 200);
  CHECK(r.t.min > 0 && r.t.q1 <= r.t.median && r.t.median <= r.t.q3);
  printf("  empty kernel: median %.2f us between events (IQR %.2f..%.2f)\n", r.t.median * 1e6,
         r.t.q1 * 1e6, r.t.q3 * 1e6);
  rt_worker_pool_free(p);
  rt_cubin_free(&b);
}

/* ---- a lowered kernel, end to end -------------------------------------------------- */

static const char *const bound_vadd_text =
    "kernel vadd(A: f32[1024], B: f32[1024], C: f32[1024]):\n"
    "  block root:\n"
    "    for bx in 8 bind(blockIdx.x):\n"
    "      for tx in 128 bind(threadIdx.x):\n"
    "        block C(v_i: S(1024) = bx * 128 + tx):\n"
    "          reads A[v_i], B[v_i]\n"
    "          writes C[v_i]\n"
    "          C[v_i] = A[v_i] + B[v_i]\n";

DG_TEST(cuda_program_from_lowered) {
  dg_status st;
  dg_func *f = ir_parse(bound_vadd_text, "bvadd", &st);
  CHECK_OK(st);
  lw_program *lp = lower_program(f, NULL, &st);
  CHECK_MSG(lp != NULL, "%s", st.msg);
  dg_arena *a = dg_arena_new();
  rt_cuda_program prog;
  CHECK_MSG(rt_cuda_program_from_lowered(lp, a, &prog, &st), "%s", st.msg);
  CHECK_EQ(prog.n_bufs, 3);
  CHECK_EQ(prog.n_launches, 1);
  CHECK(!prog.bufs[0].is_output && !prog.bufs[1].is_output && prog.bufs[2].is_output);
  CHECK_STREQ(prog.bufs[2].name, "C");
  CHECK_EQ(prog.bufs[2].numel, 1024);
  CHECK_EQ(prog.bufs[2].param, 2);
  const rt_cuda_launch *l = &prog.launches[0];
  CHECK_STREQ(l->kernel, lp->kernels[0].name);
  CHECK(l->grid[0] == 8 && l->grid[1] == 1 && l->grid[2] == 1);
  CHECK(l->block[0] == 128 && l->block[1] == 1 && l->block[2] == 1);
  CHECK_EQ(l->shared_bytes, 0);
  CHECK_EQ(l->n_args, lp->kernels[0].n_params);
  for (int i = 0; i < l->n_args; i++) {
    CHECK(l->args[i].kind == RT_CUDA_ARG_BUF);
    CHECK_STREQ(prog.bufs[l->args[i].buf].name, lp->kernels[0].params[i]->name);
  }
  dg_arena_free(a);
  lower_program_free(lp);
  ir_func_free(f);
}
