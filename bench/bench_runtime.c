/* bench_runtime.c: measurement throughput of the CUDA runtime.
 *
 * N variants of a tiled fp32 matmul (different tile constants, one
 * extern "C" kernel each, the tile code a template in a shared preamble, as
 * generated kernels share theirs) are compiled by NVRTC with 1, 4 and 16
 * kernels per compilation on all CPUs, then each is run on the GPU through
 * the crash-isolated worker pool, checked against the float64 CPU reference
 * and timed (warm-up, L2 flushed, median of repeats). Compilation of the
 * next chunk overlaps the GPU work of the current one, as a tuner would run
 * it. Prints one row per kernels-per-compilation setting: compile rate,
 * GPU rate, end-to-end candidates per second; then the empty kernel's
 * launch latency (the floor under any measured time).
 *
 * Without a GPU it measures the compile rate alone and says so.
 *
 * usage: bench_runtime [--variants N] [--size S] [--threads T] [--repeats R]
 */
#include <pthread.h>
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

typedef struct {
  const char *const *kernels;
  int lo, hi, per_call, threads;
  rt_nvrtc_grouped g;
  double seconds;
} chunk_compile;

static void *compile_chunk(void *arg) {
  chunk_compile *c = arg;
  double t0 = dg_now();
  rt_nvrtc_compile_grouped(preamble, c->kernels + c->lo, c->hi - c->lo, c->per_call, c->threads,
                           "sm_90", &c->g);
  c->seconds = dg_now() - t0;
  return NULL;
}

typedef struct {
  int n_ok_compile, n_ok_run, n_pass;
  double t_compile, t_gpu, t_total;
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
    /* the pool forks before any compile thread exists */
    if (!rt_cuda_pool_new(2, 1, 30, &pool, &st)) {
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
    /* a chunk keeps every thread busy, but at least four chunks are made
     * so that compiling one overlaps the GPU work on another */
    int chunk = threads * per_call;
    int quarter = (n_var / 4 + per_call - 1) / per_call * per_call;
    if (chunk > quarter) chunk = quarter > per_call ? quarter : per_call;
    double t_all = dg_now();
    chunk_compile cur = {(const char *const *)kernels, 0, chunk < n_var ? chunk : n_var, per_call, threads};
    compile_chunk(&cur);
    rw->t_compile += cur.seconds;
    while (cur.lo < n_var) {
      chunk_compile next = {(const char *const *)kernels, cur.hi, cur.hi + chunk < n_var ? cur.hi + chunk : n_var,
                            per_call, threads};
      pthread_t th;
      bool started = next.lo < n_var && pthread_create(&th, NULL, compile_chunk, &next) == 0;
      rw->n_ok_compile += cur.g.n_ok;
      if (pool) {
        double t0 = dg_now();
        for (int i = 0; i < cur.g.n; i++) {
          int b = cur.g.bin_of[i];
          if (b < 0) continue;
          int k = cur.lo + i;
          char name[32];
          snprintf(name, sizeof name, "mm_%d", k);
          rt_cuda_arg args[3] = {{RT_CUDA_ARG_BUF, 0, 0, 0}, {RT_CUDA_ARG_BUF, 1, 0, 0},
                                 {RT_CUDA_ARG_BUF, 2, 0, 0}};
          const variant *v = &all[k];
          rt_cuda_launch l = {name, {size / v->bn, size / v->bm, 1}, {v->bn / v->tn, v->bm / v->tm, 1},
                              0, args, 3};
          rt_cuda_program prog = {bufs, 3, &l, 1};
          rt_cuda_job job = {&cur.g.bins[b], &prog, data_path, 1, {2, repeats, true, 5.0}};
          dg_str msg;
          dg_str_init(&msg);
          rt_cuda_job_encode(&job, &msg);
          rt_worker_pool_submit(pool, (uint64_t)k, msg.s, msg.len, 0);
          dg_str_free(&msg);
        }
        rt_worker_result wr;
        while (rt_worker_pool_next(pool, &wr, &st)) {
          rt_cuda_result r;
          rt_cuda_result_from_worker(&wr, &r);
          rt_worker_result_free(&wr);
          if (r.fail == RT_FAIL_NONE) {
            rw->n_ok_run++;
            rw->n_pass += r.checked && r.check.pass;
            if (rw->best < 0 || r.t.median < rw->best_median) {
              rw->best = (int)wr.id;
              rw->best_median = r.t.median;
            }
          } else if (++n_failed <= 5) {
            fprintf(stderr, "  mm_%d: %s: %s\n", (int)wr.id, rt_fail_name(r.fail), r.reason);
          }
        }
        rw->t_gpu += dg_now() - t0;
      }
      if (started) pthread_join(th, NULL);
      rw->t_compile += started ? next.seconds : 0;
      rt_nvrtc_grouped_free(&cur.g);
      cur = next;
      if (!started) break;
    }
    rt_nvrtc_grouped_free(&cur.g);
    rw->t_total = dg_now() - t_all;
  }

  printf("\ncompile/s: kernels compiled per second of compiling; gpu/s: candidates run, checked\n"
         "and timed per second of GPU work; end-to-end/s: passed candidates per second of wall\n"
         "time, compilation of the next chunk overlapping the GPU work on this one.\n");
  printf("%-9s %8s %11s %11s %13s %9s %9s\n", "per_call", "kernels", "compile/s", "gpu/s",
         "end-to-end/s", "compiled", "passed");
  for (int pc = 0; pc < 3; pc++) {
    const row *rw = &rows[pc];
    if (pool)
      printf("%-9d %8d %11.1f %11.1f %13.1f %9d %9d\n", per_calls[pc], n_var,
             n_var / rw->t_compile, rw->n_ok_run / (rw->t_gpu > 0 ? rw->t_gpu : 1),
             rw->n_pass / rw->t_total, rw->n_ok_compile, rw->n_pass);
    else
      printf("%-9d %8d %11.1f %11s %13s %9d %9s\n", per_calls[pc], n_var, n_var / rw->t_compile,
             "-", "-", rw->n_ok_compile, "-");
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
    /* the empty kernel: launch overhead between two events */
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
                 flush ? " after an L2 flush" : "", r.t.median * 1e6, r.t.q1 * 1e6, r.t.q3 * 1e6,
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
