/* bench_nvrtc.c: where NVRTC's time goes on generated kernels.
 *
 * Compiles each CUDA source file given (as `dragon emit --target cuda`
 * prints it) one at a time on one thread, and prints the process's CPU
 * seconds (all threads) and wall seconds per compilation; files are grouped by their name up to the first
 * '.' (GMM_0.3.cu is in group GMM_0) and each group's median is printed.
 *
 * By default a file goes through rt_nvrtc_compile, exactly as the tuner
 * compiles it. With --opt the options are given instead: the target
 * (--arch, default sm_90; compute_90 stops at PTX), -std=c++17 and the
 * toolkit's -I, then each --opt in order, so one option's cost or saving
 * is measured against the same base.
 *
 * With --threads T the files are compiled at once instead, on T threads of
 * this process (rt_nvrtc_compile_batch, as the tuner compiles a round);
 * with --procs P, by P processes each compiling its share one at a time:
 * the wall time of the whole set and the files a second, to tell whether
 * compilations in one process slow each other down on a machine.
 *
 * usage: bench_nvrtc [--arch A] [--repeat R] [--raw] [--opt O]...
 *                    [--threads T | --procs P] FILE...
 *   --raw      use the base options plus --opt, not rt_nvrtc_compile's
 *   --repeat R compile each file R times and keep the fastest (default 1)
 */
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "dragon/base.h"
#include "rt/cuda_api.h"

/* The process's CPU time: NVRTC may work on threads of its own. */
static double cpu_seconds(void) {
  struct timespec ts;
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static char *read_all(const char *path) {
  FILE *fp = fopen(path, "rb");
  if (!fp) return NULL;
  dg_str s;
  dg_str_init(&s);
  char buf[65536];
  size_t n;
  while ((n = fread(buf, 1, sizeof buf, fp)) > 0) dg_str_putn(&s, buf, n);
  fclose(fp);
  return dg_str_take(&s);
}

/* One compilation with the base options and `extra`; false with the log's
 * first line printed on failure. */
static bool compile_raw(const rt_nvrtc_api *nv, const char *src, const char *arch,
                        const char *const *extra, int n_extra, size_t *image_bytes) {
  nvrtc_prog prog = NULL;
  if (nv->CreateProgram(&prog, src, "bench.cu", 0, NULL, NULL) != 0) return false;
  const char *opts[64];
  char arch_opt[64];
  snprintf(arch_opt, sizeof arch_opt, "--gpu-architecture=%s", arch);
  int n = 0;
  opts[n++] = arch_opt;
  opts[n++] = "-std=c++17";
  if (nv->include_opt[0]) opts[n++] = nv->include_opt;
  for (int i = 0; i < n_extra && n < 64; i++) opts[n++] = extra[i];
  int r = nv->CompileProgram(prog, n, opts);
  bool ptx = strncmp(arch, "compute_", 8) == 0;
  size_t sz = 0;
  if (r == 0) r = ptx ? nv->GetPTXSize(prog, &sz) : nv->GetCUBINSize(prog, &sz);
  if (r != 0) {
    size_t ln = 0;
    nv->GetProgramLogSize(prog, &ln);
    char *log = dg_calloc(ln + 1, 1);
    nv->GetProgramLog(prog, log);
    char *nl = strchr(log, '\n');
    if (nl) *nl = 0;
    fprintf(stderr, "bench_nvrtc: %s\n", log);
    free(log);
  }
  *image_bytes = sz;
  nv->DestroyProgram(&prog);
  return r == 0;
}

static int cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return x < y ? -1 : x > y;
}

static void group_name(const char *path, char *out, size_t n) {
  const char *base = strrchr(path, '/');
  base = base ? base + 1 : path;
  size_t l = strcspn(base, ".");
  if (l >= n) l = n - 1;
  memcpy(out, base, l);
  out[l] = 0;
}

/* The files at once: on `threads` threads of this process, or by `procs`
 * processes each compiling its share in turn. */
static int compile_set(char **paths, int n, const char *arch, int threads, int procs) {
  char **srcs = dg_calloc((size_t)n, sizeof(char *));
  for (int i = 0; i < n; i++)
    if (!(srcs[i] = read_all(paths[i]))) {
      fprintf(stderr, "bench_nvrtc: cannot read %s\n", paths[i]);
      return 1;
    }
  int ok = 0;
  double w0 = dg_now();
  if (threads > 0) {
    rt_nvrtc_job *jobs = dg_calloc((size_t)n, sizeof *jobs);
    rt_cubin *out = dg_calloc((size_t)n, sizeof *out);
    dg_status *sts = dg_calloc((size_t)n, sizeof *sts);
    for (int i = 0; i < n; i++) jobs[i] = (rt_nvrtc_job){srcs[i], "bench", arch};
    ok = rt_nvrtc_compile_batch(jobs, n, threads, out, sts);
    for (int i = 0; i < n; i++) rt_cubin_free(&out[i]);
    free(jobs);
    free(out);
    free(sts);
  } else {
    fflush(NULL);
    for (int p = 0; p < procs; p++) {
      if (fork() != 0) continue;
      int good = 0;
      for (int i = p; i < n; i += procs) {
        rt_cubin b;
        dg_status st;
        good += rt_nvrtc_compile(srcs[i], "bench", arch, &b, &st);
        rt_cubin_free(&b);
      }
      _exit(good == (n - p + procs - 1) / procs ? 0 : 1);
    }
    int status;
    ok = n;
    while (wait(&status) > 0)
      if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) ok = -1;
  }
  double w = dg_now() - w0;
  printf("%d files on %d %s: %.2f s wall, %.2f files/s%s\n", n, threads > 0 ? threads : procs,
         threads > 0 ? "threads" : "processes", w, n / w, ok == n ? "" : "  (FAILURES)");
  for (int i = 0; i < n; i++) free(srcs[i]);
  free(srcs);
  return ok == n ? 0 : 1;
}

int main(int argc, char **argv) {
  const char *arch = "sm_90";
  const char *extra[48];
  int n_extra = 0, repeat = 1, threads = 0, procs = 0;
  bool raw = false;
  int first = 1;
  for (; first < argc && argv[first][0] == '-' && argv[first][1] == '-'; first++) {
    const char *a = argv[first];
    if (strcmp(a, "--raw") == 0) raw = true;
    else if (strcmp(a, "--arch") == 0 && first + 1 < argc) arch = argv[++first];
    else if (strcmp(a, "--repeat") == 0 && first + 1 < argc) repeat = atoi(argv[++first]);
    else if (strcmp(a, "--threads") == 0 && first + 1 < argc) threads = atoi(argv[++first]);
    else if (strcmp(a, "--procs") == 0 && first + 1 < argc) procs = atoi(argv[++first]);
    else if (strcmp(a, "--opt") == 0 && first + 1 < argc && n_extra < 48) {
      extra[n_extra++] = argv[++first];
      raw = true;
    } else {
      fprintf(stderr, "usage: bench_nvrtc [--arch A] [--repeat R] [--raw] [--opt O]... "
                      "[--threads T | --procs P] FILE...\n");
      return 2;
    }
  }
  if (repeat < 1) repeat = 1;
  int n_files = argc - first;
  if (n_files <= 0) {
    fprintf(stderr, "bench_nvrtc: no source files\n");
    return 2;
  }
  dg_status st;
  const rt_nvrtc_api *nv = rt_nvrtc_api_load(&st);
  if (!nv) {
    fprintf(stderr, "%s\n", st.msg);
    return 1;
  }
  if (threads > 0 || procs > 0) return compile_set(argv + first, n_files, arch, threads, procs);
  double *sec = dg_calloc((size_t)n_files, sizeof(double));
  int failed = 0;
  for (int i = 0; i < n_files; i++) {
    const char *path = argv[first + i];
    char *src = read_all(path);
    if (!src) {
      fprintf(stderr, "bench_nvrtc: cannot read %s\n", path);
      return 1;
    }
    double best = 1e30, best_wall = 1e30;
    size_t bytes = 0;
    bool ok = true;
    for (int r = 0; r < repeat && ok; r++) {
      double t0 = cpu_seconds(), w0 = dg_now();
      if (raw) {
        ok = compile_raw(nv, src, arch, extra, n_extra, &bytes);
      } else {
        rt_cubin b;
        ok = rt_nvrtc_compile(src, "bench", arch, &b, &st);
        if (!ok) fprintf(stderr, "bench_nvrtc: %s\n", st.msg);
        bytes = b.size;
        rt_cubin_free(&b);
      }
      double t = cpu_seconds() - t0, w = dg_now() - w0;
      if (t < best) best = t;
      if (w < best_wall) best_wall = w;
    }
    free(src);
    failed += !ok;
    sec[i] = best;
    printf("%-28s %8.3f s cpu %8.3f s wall %9zu bytes%s\n", path, best, best_wall, bytes, ok ? "" : "  FAILED");
  }
  /* group medians, groups in order of first appearance */
  bool *done = dg_calloc((size_t)n_files, sizeof(bool));
  double *xs = dg_calloc((size_t)n_files, sizeof(double));
  for (int i = 0; i < n_files; i++) {
    if (done[i]) continue;
    char g[64], h[64];
    group_name(argv[first + i], g, sizeof g);
    int n = 0;
    double sum = 0;
    for (int j = i; j < n_files; j++) {
      group_name(argv[first + j], h, sizeof h);
      if (strcmp(g, h) != 0) continue;
      done[j] = true;
      xs[n++] = sec[j];
      sum += sec[j];
    }
    qsort(xs, (size_t)n, sizeof *xs, cmp_double);
    double med = n % 2 ? xs[n / 2] : 0.5 * (xs[n / 2 - 1] + xs[n / 2]);
    printf("group %-12s n=%3d median %7.3f s  mean %7.3f s  max %7.3f s\n", g, n, med,
           sum / n, xs[n - 1]);
  }
  free(done);
  free(xs);
  free(sec);
  return failed ? 1 : 0;
}
