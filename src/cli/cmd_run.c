/* cmd_run.c: `dragon run KERNEL [--trace T.json] --target cpu|c|cuda`:
 * builds the kernel (a workload spec or alias, or a kernel-text file),
 * replays a schedule trace on it if given, runs it and checks its outputs
 * against the unscheduled kernel's float64 reference on the same seeded
 * inputs, and prints the errors, pass/fail and the time. On the c and
 * cuda targets a kernel without a trace runs under the untuned baseline,
 * TVM's DefaultGPUSchedule (search_baseline_schedule): what speedups are
 * measured against.
 *
 * Targets (each built by rt_program_build, rt_cuda.h):
 *   cpu   the kernel as plain C on the CPU (loops as written; timing is CPU
 *         time of the kernel, median of --repeat runs);
 *   c     the GPU's program emulated on the CPU: lowered to device kernels,
 *         blocks and threads as loops split at barriers (a check, no timing);
 *   cuda  the lowered program compiled with NVRTC for the device's
 *         architecture and run on the GPU by a worker process, L2 flushed
 *         before each timed run.
 * Exit 0 if the check passes, 1 if it fails or anything goes wrong, 2 for
 * usage errors (a spec that does not parse included).
 */
#include <stdlib.h>
#include <string.h>

#include "cli/cli.h"
#include "dragon/rt.h"
#include "dragon/rt_cuda.h"
#include "dragon/search.h"
#include "dragon/wl.h"

static int cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return x < y ? -1 : x > y;
}

static void print_shape(const dg_buffer *b) {
  printf("%s %s[", b->name, dg_dtype_name(b->dtype));
  for (int d = 0; d < b->ndim; d++) printf("%s%lld", d ? ", " : "", (long long)b->shape[d]);
  printf("]");
}

static int run_cpu(const char *canon, const dg_func *ref, const dg_func *f, int64_t seed,
                   int64_t repeat, const char *dist_name) {
  dg_status st;
  dg_status_ok(&st);
  rt_dist dist;
  if (strcmp(dist_name, "auto") == 0) dist = rt_data_dist_for(f);
  else if (strcmp(dist_name, "uniform") == 0) dist = RT_DIST_UNIFORM;
  else dist = RT_DIST_POSITIVE;

  int rc = CLI_ERROR;
  rt_build b;
  rt_tensors ts = {0};
  double *times = NULL;

  /* the kernel as plain loops, beside the reference */
  rt_build_opts bo = {.target = RT_BUILD_C, .compile = true, .reference = ref};
  if (!rt_program_build(f, &bo, &b, &st) || !rt_tensors_init(&ts, f, &st)) {
    rc = cli_report("run", &st);
    goto done;
  }
  rt_data_fill(&ts, (uint64_t)seed, dist);
  rt_cpu_call(b.ref_fn, ts.ref_args);

  times = dg_malloc(sizeof(double) * (size_t)repeat);
  double t0 = dg_now();
  rt_cpu_call(b.fn, ts.args);
  times[0] = dg_now() - t0;
  rt_check chk;
  if (!rt_check_outputs_for(ref, &ts, true, &chk, &st)) {
    rc = cli_report("run", &st);
    goto done;
  }
  rt_checksum sum = rt_data_checksum(&ts);
  for (int64_t i = 1; i < repeat; i++) {
    t0 = dg_now();
    rt_cpu_call(b.fn, ts.args);
    times[i] = dg_now() - t0;
  }
  qsort(times, (size_t)repeat, sizeof(double), cmp_double);
  double median = repeat % 2 ? times[repeat / 2]
                             : 0.5 * (times[repeat / 2 - 1] + times[repeat / 2]);

  printf("spec      %s\n", canon);
  printf("target    cpu (C through $CC, -O2 -march=native)\n");
  printf("inputs    seed %lld, %s\n", (long long)seed, rt_dist_name(dist));
  for (int i = 0; i < ts.n; i++) {
    if (!ts.t[i].is_output) continue;
    printf("output    ");
    print_shape(ts.t[i].buf);
    printf("\n");
  }
  printf("checksum  sum %.9g  hash %016llx\n", sum.sum, (unsigned long long)sum.hash);
  printf("error     max abs %.3g  max rel %.3g  (K = %lld, float64 reference)\n", chk.max_abs,
         chk.max_rel, (long long)chk.K);
  if (chk.pass) {
    printf("check     pass\n");
  } else {
    printf("check     FAIL  %lld of %lld elements out of tolerance; first %s\n",
           (long long)chk.n_bad, (long long)chk.n_checked,
           chk.first_bad[0] ? chk.first_bad : "(no outputs)");
  }
  printf("time      median %.2f us  min %.2f us  max %.2f us  (%lld runs)\n", median * 1e6,
         times[0] * 1e6, times[repeat - 1] * 1e6, (long long)repeat);
  rc = chk.pass ? CLI_OK : CLI_ERROR;

done:
  free(times);
  rt_tensors_free(&ts);
  rt_build_free(&b);
  return rc;
}

static void print_check(const rt_check *chk) {
  printf("error     max abs %.3g  max rel %.3g  (K = %lld, float64 reference)\n", chk->max_abs,
         chk->max_rel, (long long)chk->K);
  if (chk->pass)
    printf("check     pass\n");
  else
    printf("check     FAIL  %lld of %lld elements out of tolerance; first %s\n",
           (long long)chk->n_bad, (long long)chk->n_checked,
           chk->first_bad[0] ? chk->first_bad : "(no outputs)");
}

static int run_emulated(const char *canon, const dg_func *ref, const dg_func *f, int64_t seed,
                        const char *schedule) {
  dg_status st;
  rt_check chk;
  if (!rt_program_check_c(ref, f, (uint64_t)seed, &chk, &st)) return cli_report("run", &st);
  printf("spec      %s\n", canon);
  printf("schedule  %s\n", schedule);
  printf("target    c (the lowered GPU program, blocks and threads emulated on the CPU)\n");
  printf("inputs    seed %lld\n", (long long)seed);
  print_check(&chk);
  return chk.pass ? CLI_OK : CLI_ERROR;
}

static int run_cuda(const char *canon, const dg_func *ref, const dg_func *f, int64_t seed,
                    int64_t repeat, bool check, const char *schedule) {
  dg_status st;
  rt_cuda_result res;
  if (!rt_program_run_cuda(ref, f, (uint64_t)seed, (int)repeat, check, 10.0, &res, &st))
    return cli_report("run", &st);
  printf("spec      %s\n", canon);
  printf("schedule  %s\n", schedule);
  char arch[16];
  rt_build_arch(arch, sizeof arch); /* what rt_program_run_cuda compiled for */
  printf("target    cuda (NVRTC %s, one worker process, L2 flushed before each timed run)\n",
         arch);
  printf("inputs    seed %lld\n", (long long)seed);
  if (res.fail != RT_FAIL_NONE) {
    printf("result    FAIL  %s: %s\n", rt_fail_name(res.fail), res.reason);
    if (res.checked) print_check(&res.check);
    return CLI_ERROR;
  }
  if (res.checked) print_check(&res.check);
  else printf("check     skipped (--no-check)\n");
  printf("time      median %.2f us  q1 %.2f us  q3 %.2f us  min %.2f us  max %.2f us  (%d runs)\n",
         res.t.median * 1e6, res.t.q1 * 1e6, res.t.q3 * 1e6, res.t.min * 1e6, res.t.max * 1e6,
         res.t.n);
  return !check || (res.checked && res.check.pass) ? CLI_OK : CLI_ERROR;
}

int cmd_run(int argc, char **argv) {
  const char *target = "cpu";
  const char *trace = NULL;
  int64_t seed = 0, repeat = 10;
  const char *dist = "auto";
  bool no_check = false;
  const cli_opt opts[] = {
      {"--trace", CLI_OPT_STR, &trace, 0, 0,
       "schedule trace (TVM's JSON) to replay first (default, c and cuda targets: the untuned "
       "baseline, TVM's DefaultGPUSchedule)"},
      {"--no-check", CLI_OPT_FLAG, &no_check, 0, 0,
       "cuda target: time only, no float64 reference (for shapes whose CPU reference is slow)"},
      {"--target", CLI_OPT_STR, &target, 0, 0,
       "cpu (plain C), c (the GPU program emulated on the CPU) or cuda (the GPU)"},
      {"--seed", CLI_OPT_INT, &seed, 0, INT64_MAX, "seed of the random inputs"},
      {"--repeat", CLI_OPT_INT, &repeat, 1, 100000, "timed runs of the kernel"},
      {"--dist", CLI_OPT_STR, &dist, 0, 0,
       "float inputs (cpu target): uniform [-1, 1], positive [0.5, 2], or auto (positive if "
       "the kernel takes log, sqrt, rsqrt or pow)"},
  };
  const cli_spec spec = {
      "run",
      "KERNEL [--trace T.json] [--target cpu|c|cuda] [--seed S] [--repeat N]",
      "Builds a kernel (a workload spec or alias such as GMM/0, or a kernel-text\n"
      "file), replays a schedule trace on it if given, runs it on the target and\n"
      "checks its outputs against the unscheduled kernel's float64 reference on the\n"
      "same seeded inputs (outputs poisoned first; NaN never passes). Prints the\n"
      "largest errors, pass/fail and the time. Exits 0 if the check passes, 1\n"
      "otherwise. Targets: cpu runs the kernel as plain C; c lowers it to GPU\n"
      "kernels and emulates blocks and threads on the CPU; cuda runs those kernels\n"
      "on the GPU (median and spread of --repeat runs, L2 flushed before each).\n"
      "Without --trace, the c and cuda targets run the untuned baseline: TVM's\n"
      "DefaultGPUSchedule, each block's data-parallel loops fused and bound to\n"
      "blockIdx.x/threadIdx.x (up to 1024 threads, 256 blocks), the kernel as TVM\n"
      "runs it untuned; the cpu target runs the loops as written.",
      opts,
      (int)DG_ARRAY_LEN(opts),
      1,
      1,
  };
  char **pos;
  int npos;
  int r = cli_parse(&spec, argc, argv, &pos, &npos);
  if (r < 0) return CLI_OK;
  if (r != CLI_OK) return r;
  const char *arg = pos[0];
  free(pos);
  if (strcmp(target, "cpu") != 0 && strcmp(target, "c") != 0 && strcmp(target, "cuda") != 0) {
    fprintf(stderr, "dragon run: --target: '%s' is not one of cpu, c, cuda\n", target);
    return CLI_USAGE;
  }
  if (strcmp(dist, "auto") != 0 && strcmp(dist, "uniform") != 0 &&
      strcmp(dist, "positive") != 0) {
    fprintf(stderr, "dragon run: --dist: '%s' is not one of auto, uniform, positive\n", dist);
    return CLI_USAGE;
  }
  dg_status st;
  dg_status_ok(&st);
  dg_func *ref = cli_load_kernel(arg, &st);
  if (!ref) {
    fprintf(stderr, "dragon run: %s\n", st.msg);
    return st.code == DG_ERR_PARSE && !strchr(arg, '/') ? CLI_USAGE : CLI_ERROR;
  }
  char *canon = wl_canonical(arg, &st);
  if (!canon) canon = dg_strdup(arg);
  sched *s = NULL;
  const dg_func *f = ref;
  bool gpu = strcmp(target, "cpu") != 0;
  const char *schedule = trace;
  if (trace) {
    s = cli_schedule(ref, trace, &st);
  } else if (gpu) {
    schedule = "DefaultGPUSchedule (untuned baseline)";
    if (!search_baseline_schedule(ref, NULL, &s, &st)) s = NULL;
  }
  if ((trace || gpu) && !s) {
    free(canon);
    ir_func_free(ref);
    return cli_report("run", &st);
  }
  if (s) f = sched_func(s);
  int rc;
  if (strcmp(target, "cuda") == 0) rc = run_cuda(canon, ref, f, seed, repeat, !no_check, schedule);
  else if (strcmp(target, "c") == 0) rc = run_emulated(canon, ref, f, seed, schedule);
  else rc = run_cpu(canon, ref, f, seed, repeat, dist);
  sched_free(s);
  ir_func_free(ref);
  free(canon);
  return rc;
}
