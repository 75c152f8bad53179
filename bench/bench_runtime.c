/* bench_runtime.c: measurement throughput of the CUDA runtime.
 *
 * N variants of a tiled fp32 matmul (different tile constants, one
 * extern "C" kernel each, the tile code a template in a shared preamble, as
 * generated kernels share theirs) are compiled by NVRTC with 1, 4 and 16
 * kernels per compilation on T threads, and each is handed to the
 * crash-isolated worker pool as soon as its compilation is done, as the
 * tuner's measurement does: run on the GPU, checked against the float64
 * CPU reference and timed (warm-up, L2 flushed, median of repeats), the
 * worker keeping the data set on the device across jobs. Prints one row per
 * kernels-per-compilation setting: compile rate, GPU rate (jobs per second
 * of the worker's own time), end-to-end candidates per second; the
 * worker's time per job; then the empty kernel's time between events (the
 * floor under any measured time).
 *
 * Without a GPU it measures the compile rate alone and says so.
 *
 * usage: bench_runtime [--variants N] [--size S] [--threads T] [--repeats R]
 */
#include <string.h>
#include <unistd.h>

#include "dragon/codegen.h"
#include "dragon/rt_cuda.h"
#include "dragon/wl.h"

/* M = N = K = size; every tile divides it (size a multiple of 128). */
static const char *const preamble =
    "template <int BM, int BN, int BK, int TM, int TN>\n"
    "__device__ __forceinline__ void mm_tile(const float *__restrict__ A,\n"
    "    const float *__restrict__ B, float *__restrict__ C, int N, int K) {\n"
    "  __shared__ float As[BK][BM];\n"
    "  __shared__ float Bs[BK][BN];\n"
    "  const int tx = threadIdx.x, ty = threadIdx.y;\n"
    "  const int nthreads = (BM / TM) * (BN / TN);\n"
    "  const int tid = ty * (BN / TN) + tx;\n"
    "  const int row0 = blockIdx.y * BM, col0 = blockIdx.x * BN;\n"
    "  float acc[TM][TN];\n"
    "#pragma unroll\n"
    "  for (int i = 0; i < TM; i++)\n"
    "#pragma unroll\n"
    "    for (int j = 0; j < TN; j++) acc[i][j] = 0.f;\n"
    "  for (int k0 = 0; k0 < K; k0 += BK) {\n"
    "    for (int e = tid; e < BM * BK; e += nthreads) {\n"
    "      int r = e / BK, k = e % BK;\n"
    "      As[k][r] = A[(row0 + r) * K + k0 + k];\n"
    "    }\n"
    "    for (int e = tid; e < BK * BN; e += nthreads) {\n"
    "      int k = e / BN, c = e % BN;\n"
    "      Bs[k][c] = B[(k0 + k) * N + col0 + c];\n"
    "    }\n"
    "    __syncthreads();\n"
    "#pragma unroll\n"
    "    for (int k = 0; k < BK; k++) {\n"
    "      float a[TM], b[TN];\n"
    "#pragma unroll\n"
    "      for (int i = 0; i < TM; i++) a[i] = As[k][ty * TM + i];\n"
    "#pragma unroll\n"
    "      for (int j = 0; j < TN; j++) b[j] = Bs[k][tx * TN + j];\n"
    "#pragma unroll\n"
    "      for (int i = 0; i < TM; i++)\n"
    "#pragma unroll\n"
    "        for (int j = 0; j < TN; j++) acc[i][j] += a[i] * b[j];\n"
    "    }\n"
    "    __syncthreads();\n"
    "  }\n"
    "#pragma unroll\n"
    "  for (int i = 0; i < TM; i++)\n"
    "#pragma unroll\n"
    "    for (int j = 0; j < TN; j++)\n"
    "      C[(row0 + ty * TM + i) * N + col0 + tx * TN + j] = acc[i][j];\n"
    "}\n";

typedef struct {
  int bm, bn, bk, tm, tn;
} variant;

/* The tile shapes that keep 64..1024 threads per block. */
static int variants_all(variant *out, int max) {
  static const int bmn[] = {32, 64, 128}, bks[] = {8, 16, 32}, ts[] = {1, 2, 4, 8};
  int n = 0;
  for (int a = 0; a < 3; a++)
    for (int b = 0; b < 3; b++)
      for (int c = 0; c < 3; c++)
        for (int d = 0; d < 4; d++)
          for (int e = 0; e < 4; e++) {
            variant v = {bmn[a], bmn[b], bks[c], ts[d], ts[e]};
            int threads = (v.bm / v.tm) * (v.bn / v.tn);
            if (threads < 64 || threads > 1024 || n >= max) continue;
            out[n++] = v;
          }
  return n;
}

static char *variant_kernel(const variant *v, int i, int size) {
  dg_str s;
  dg_str_init(&s);
  int threads = (v->bm / v->tm) * (v->bn / v->tn);
  dg_str_printf(&s,
                "extern \"C\" __global__ void __launch_bounds__(%d) mm_%d(const float *A, "
                "const float *B, float *C) {\n"
                "  mm_tile<%d, %d, %d, %d, %d>(A, B, C, %d, %d);\n"
                "}\n",
                threads, i, v->bm, v->bn, v->bk, v->tm, v->tn, size, size);
  return dg_str_take(&s);
}

/* One compilation group: kernels [lo, hi) through NVRTC on one thread. */
typedef struct {
  const char *const *kernels;
  int n, per_call;
  rt_nvrtc_grouped *g; /* (groups) */
  double *seconds;     /* (groups) */
} group_compile;

static void compile_group(void *p, int gi) {
  group_compile *c = p;
  int lo = gi * c->per_call, hi = lo + c->per_call < c->n ? lo + c->per_call : c->n;
  double t0 = dg_now();
  rt_nvrtc_compile_grouped(preamble, c->kernels + lo, hi - lo, c->per_call, 1, "sm_90", &c->g[gi]);
  c->seconds[gi] = dg_now() - t0;
}

typedef struct {
  int n_ok_compile, n_ran, n_pass, n_cached;
  double t_compile_thread; /* thread-seconds */
  double t_compile_wall;   /* start to the last compilation done */
  double t_worker;         /* the worker's own seconds over all jobs */
  double t_setup;          /* of that, building the data set's device buffers */
  double t_total;
  double best_median;
  int best;
} row;

static bool arg_int(int argc, char **argv, int *i, const char *name, int64_t lo, int64_t hi,
                    int *out) {
  if (strcmp(argv[*i], name) != 0) return false;
  dg_status st;
  int64_t v = 0;
  if (*i + 1 >= argc || !dg_parse_i64(argv[*i + 1], lo, hi, &v, name, &st)) {
    fprintf(stderr, "bench_runtime: %s\n", *i + 1 >= argc ? "missing value" : st.msg);
    exit(2);
  }
  *out = (int)v;
  (*i)++;
  return true;
}

int main(int argc, char **argv) {
  int n_var = 96, size = 1024, threads = rt_cpu_count(), repeats = 10;
  for (int i = 1; i < argc; i++) {
    if (arg_int(argc, argv, &i, "--variants", 1, 432, &n_var) ||
        arg_int(argc, argv, &i, "--size", 128, 8192, &size) ||
        arg_int(argc, argv, &i, "--threads", 1, 1024, &threads) ||
        arg_int(argc, argv, &i, "--repeats", 1, 1000, &repeats))
      continue;
    fprintf(stderr,
            "usage: bench_runtime [--variants N (96)] [--size S (1024, a multiple of 128)] "
            "[--threads T (all CPUs)] [--repeats R (10)]\n");
    return 2;
  }
  if (size % 128) {
    fprintf(stderr, "bench_runtime: --size must be a multiple of 128\n");
    return 2;
  }
  dg_status st;
  if (!rt_nvrtc_available(&st)) {
    fprintf(stderr, "bench_runtime: %s\n", st.msg);
    return 1;
  }
  rt_cuda_device dev;
  bool gpu = rt_cuda_device_info(&dev, &st);
  printf("bench_runtime: %d matmul variants %dx%dx%d fp32, %d compile threads, %d repeats\n", n_var,
         size, size, size, threads, repeats);
  if (gpu)
    printf("GPU: %s, sm_%d%d, %d SMs, L2 %lld MiB, driver %d\n", dev.name, dev.cc_major,
           dev.cc_minor, dev.sm_count, (long long)(dev.l2_bytes >> 20), dev.driver_version);
  else
    printf("no GPU (%s): compile rates only\n", st.msg);

  variant all[432];
  n_var = variants_all(all, n_var);
  char **kernels = dg_calloc((size_t)n_var, sizeof(char *));
  for (int i = 0; i < n_var; i++) kernels[i] = variant_kernel(&all[i], i, size);

  /* inputs and the float64 reference, once, by the CPU path's helpers */
  char data_path[256] = "";
  rt_cuda_buf bufs[3];
  rt_worker_pool *pool = NULL;
  if (gpu) {
    char spec[96];
    snprintf(spec, sizeof spec, "gemm:m=%d,n=%d,k=%d,dtype=f32", size, size, size);
    dg_func *f = wl_build(spec, &st);
    rt_tensors ts;
    if (!f || !rt_tensors_init(&ts, f, &st)) {
      fprintf(stderr, "bench_runtime: %s\n", st.msg);
      return 1;
    }
    rt_data_fill(&ts, 1, rt_data_dist_for(f));
    double t0 = dg_now();
    char *src = codegen_emit_source(f, f, &codegen_lang_c, &st);
    static const char *const ref_name = CODEGEN_REFERENCE_FN;
    rt_cpu_kernel *ref = NULL;
    if (!src || !rt_cpu_compile_many(src, &ref_name, 1, &ref, &st)) {
      fprintf(stderr, "bench_runtime: reference: %s\n", st.msg);
      return 1;
    }
    rt_cpu_call(ref, ts.ref_args);
    rt_cpu_free(ref);
    free(src);
    const char *tmp = getenv("TMPDIR");
    snprintf(data_path, sizeof data_path, "%s/dragon-bench-%d.dat", tmp && *tmp ? tmp : "/tmp",
             (int)getpid());
    if (!rt_cuda_data_write(&ts, rt_check_reduce_len(f), data_path, &st)) {
      fprintf(stderr, "bench_runtime: %s\n", st.msg);
      return 1;
    }
    printf("reference (float64, compiled C): %.2f s\n", dg_now() - t0);
    rt_cuda_bufs_for_params(&ts, bufs);
    rt_tensors_free(&ts);
    ir_func_free(f);
    /* one worker, as the tuner's measurement has */
    if (!rt_cuda_pool_new(1, 1, 30, &pool, &st)) {
      fprintf(stderr, "bench_runtime: %s\n", st.msg);
      return 1;
    }
  }

  static const int per_calls[] = {1, 4, 16};
  int n_failed = 0;
  row rows[3];
  for (int pc = 0; pc < 3; pc++) {
    row *rw = &rows[pc];
    memset(rw, 0, sizeof *rw);
    rw->best = -1;
    int per_call = per_calls[pc];
    int n_groups = (n_var + per_call - 1) / per_call;
    group_compile gc = {(const char *const *)kernels, n_var, per_call,
                        dg_calloc((size_t)n_groups, sizeof(rt_nvrtc_grouped)),
                        dg_calloc((size_t)n_groups, sizeof(double))};
    double t_all = dg_now();
    /* groups compile on the threads; each group's kernels go to the GPU
     * queue the moment it is done, while the others still compile */
    rt_tasks *tasks = rt_tasks_start(n_groups, threads, compile_group, &gc);
    int groups_done = 0;
    while (groups_done < n_groups || (pool && rt_worker_pool_pending(pool) > 0)) {
      int gi = rt_tasks_next(tasks, !pool || rt_worker_pool_pending(pool) == 0);
      if (gi >= 0) {
        groups_done++;
        if (groups_done == n_groups) rw->t_compile_wall = dg_now() - t_all;
        const rt_nvrtc_grouped *g = &gc.g[gi];
        rw->n_ok_compile += g->n_ok;
        for (int i = 0; i < g->n && pool; i++) {
          int b = g->bin_of[i];
          if (b < 0) continue;
          int k = gi * per_call + i;
          char name[32];
          snprintf(name, sizeof name, "mm_%d", k);
          rt_cuda_arg args[3] = {{RT_CUDA_ARG_BUF, 0, 0, 0}, {RT_CUDA_ARG_BUF, 1, 0, 0},
                                 {RT_CUDA_ARG_BUF, 2, 0, 0}};
          const variant *v = &all[k];
          rt_cuda_launch l = {name, {size / v->bn, size / v->bm, 1}, {v->bn / v->tn, v->bm / v->tm, 1},
                              0, args, 3};
          rt_cuda_program prog = {bufs, 3, &l, 1};
          rt_cuda_job job = {&g->bins[b], &prog, data_path, 1, {2, repeats, true, 5.0}};
          dg_str msg;
          dg_str_init(&msg);
          rt_cuda_job_encode(&job, &msg);
          rt_worker_pool_submit(pool, (uint64_t)k, msg.s, msg.len, 0);
          dg_str_free(&msg);
        }
        continue;
      }
      if (!pool || rt_worker_pool_pending(pool) == 0) continue;
      rt_worker_result wr;
      if (!rt_worker_pool_next(pool, &wr, &st)) {
        fprintf(stderr, "bench_runtime: %s\n", st.code != DG_OK ? st.msg : "the jobs were lost");
        return 1;
      }
      int k = (int)wr.id;
      rt_cuda_result r;
      rt_cuda_result_from_worker(&wr, &r);
      rt_worker_result_free(&wr);
      rw->n_ran++;
      rw->t_worker += r.worker_s;
      rw->t_setup += r.setup_s;
      rw->n_cached += r.data_cached;
      if (r.fail == RT_FAIL_NONE) {
        rw->n_pass += r.checked && r.check.pass;
        if (rw->best < 0 || r.t.median < rw->best_median) {
          rw->best = k;
          rw->best_median = r.t.median;
        }
      } else if (++n_failed <= 5) {
        fprintf(stderr, "  mm_%d: %s: %s\n", k, rt_fail_name(r.fail), r.reason);
      }
    }
    rt_tasks_free(tasks);
    rw->t_total = dg_now() - t_all;
    for (int gi = 0; gi < n_groups; gi++) {
      rw->t_compile_thread += gc.seconds[gi];
      rt_nvrtc_grouped_free(&gc.g[gi]);
    }
    free(gc.g);
    free(gc.seconds);
  }

  printf("\ncompile/s: kernels compiled per second of compiling (all threads); gpu/s: candidates\n"
         "run, checked and timed per second of the worker's time; end-to-end/s: passed candidates\n"
         "per second of wall time, each compiled group queued for the GPU as soon as it is done;\n"
         "worker ms: the worker's time per job (its first job also builds the data set's device\n"
         "buffers: setup); s/call: seconds per NVRTC compilation on its thread (rising with\n"
         "--threads means the threads contend).\n");
  printf("%-9s %8s %11s %8s %11s %13s %9s %9s %10s %10s\n", "per_call", "kernels", "compile/s",
         "s/call", "gpu/s", "end-to-end/s", "compiled", "passed", "worker ms", "setup ms");
  for (int pc = 0; pc < 3; pc++) {
    const row *rw = &rows[pc];
    int calls = (n_var + per_calls[pc] - 1) / per_calls[pc];
    double per_call_s = rw->t_compile_thread / calls;
    double compile_rate = n_var / (rw->t_compile_wall > 0 ? rw->t_compile_wall : 1);
    if (pool)
      printf("%-9d %8d %11.1f %8.3f %11.1f %13.1f %9d %9d %10.2f %10.1f\n", per_calls[pc], n_var,
             compile_rate, per_call_s, rw->n_ran / (rw->t_worker > 0 ? rw->t_worker : 1),
             rw->n_pass / rw->t_total, rw->n_ok_compile, rw->n_pass,
             rw->n_ran ? rw->t_worker / rw->n_ran * 1e3 : 0, rw->t_setup * 1e3);
    else
      printf("%-9d %8d %11.1f %8.3f %11s %13s %9d %9s %10s %10s\n", per_calls[pc], n_var,
             compile_rate, per_call_s, "-", "-", rw->n_ok_compile, "-", "-", "-");
  }
  if (pool) {
    const row *rw = &rows[2];
    if (rw->best >= 0) {
      const variant *v = &all[rw->best];
      double flops = 2.0 * size * size * (double)size;
      printf("\nbest variant mm_%d (BM %d BN %d BK %d TM %d TN %d): median %.1f us, %.1f TFLOP/s\n",
             rw->best, v->bm, v->bn, v->bk, v->tm, v->tn, rw->best_median * 1e6,
             flops / rw->best_median * 1e-12);
    }
    /* the empty kernel between its two events, the runs queued back to back
     * (no host latency between them), alone and after an L2 flush */
    rt_cubin eb;
    if (rt_nvrtc_compile("extern \"C\" __global__ void empty() {}\n", "empty", "sm_90", &eb, &st)) {
      rt_cuda_launch l = {"empty", {1, 1, 1}, {32, 1, 1}, 0, NULL, 0};
      rt_cuda_program prog = {NULL, 0, &l, 1};
      for (int flush = 0; flush < 2; flush++) {
        rt_cuda_job job = {&eb, &prog, NULL, 0, {100, 1000, flush == 1, 5.0}};
        dg_str msg;
        dg_str_init(&msg);
        rt_cuda_job_encode(&job, &msg);
        rt_worker_pool_submit(pool, 1000000, msg.s, msg.len, 0);
        dg_str_free(&msg);
        rt_worker_result wr;
        if (!rt_worker_pool_next(pool, &wr, &st)) break;
        rt_cuda_result r;
        rt_cuda_result_from_worker(&wr, &r);
        rt_worker_result_free(&wr);
        if (r.fail == RT_FAIL_NONE)
          printf("empty kernel%s: median %.2f us, IQR %.2f..%.2f us, min %.2f us (%d runs)\n",
                 flush ? " after an L2 flush" : ", back to back", r.t.median * 1e6, r.t.q1 * 1e6, r.t.q3 * 1e6,
                 r.t.min * 1e6, r.t.n);
        else
          printf("empty kernel: %s: %s\n", rt_fail_name(r.fail), r.reason);
      }
    }
    rt_cubin_free(&eb);
    rt_worker_pool_free(pool);
    unlink(data_path);
  }
  for (int i = 0; i < n_var; i++) free(kernels[i]);
  free(kernels);
  return 0;
}
