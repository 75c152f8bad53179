/* cmd_run.c: `dragon run SPEC --target cpu`: builds the workload's kernel,
 * emits it as C together with its float64 reference, compiles both at once,
 * fills the inputs from a seed, runs the reference once and the kernel
 * --repeat times, checks the kernel's first run against the reference and
 * prints the checksum, the errors, pass/fail and the time (median, min, max).
 * Exit 0 if the check passes, 1 if it fails or anything goes wrong, 2 for
 * usage errors (a spec that does not parse included).
 *
 * Targets: `cpu` and `c` (the same C path). The CUDA target and --trace come
 * later and will be more rows of the same flow; until then they are usage
 * errors.
 */
#include <stdlib.h>
#include <string.h>

#include "cli/cli.h"
#include "dragon/codegen.h"
#include "dragon/rt.h"
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

static int run_cpu(const char *spec, int64_t seed, int64_t repeat, const char *dist_name) {
  dg_status st;
  dg_status_ok(&st);
  char *canon = wl_canonical(spec, &st);
  if (!canon) {
    fprintf(stderr, "dragon run: %s\n", st.msg);
    return CLI_USAGE;
  }
  dg_func *f = wl_build(canon, &st);
  if (!f) {
    free(canon);
    return cli_report("run", &st);
  }
  rt_dist dist;
  if (strcmp(dist_name, "auto") == 0) dist = rt_data_dist_for(f);
  else if (strcmp(dist_name, "uniform") == 0) dist = RT_DIST_UNIFORM;
  else dist = RT_DIST_POSITIVE;

  int rc = CLI_ERROR;
  char *src = NULL;
  rt_cpu_kernel *k[2] = {NULL, NULL};
  rt_tensors ts = {0};
  double *times = NULL;

  src = codegen_emit_source(f, f, &codegen_lang_c, &st);
  static const char *const names[2] = {CODEGEN_KERNEL_FN, CODEGEN_REFERENCE_FN};
  if (!src || !rt_cpu_compile_many(src, names, 2, k, &st) || !rt_tensors_init(&ts, f, &st)) {
    rc = cli_report("run", &st);
    goto done;
  }
  rt_data_fill(&ts, (uint64_t)seed, dist);
  rt_cpu_call(k[1], ts.ref_args);

  times = dg_malloc(sizeof(double) * (size_t)repeat);
  double t0 = dg_now();
  rt_cpu_call(k[0], ts.args);
  times[0] = dg_now() - t0;
  rt_check chk;
  rt_check_outputs(&ts, rt_check_reduce_len(f), &chk);
  rt_checksum sum = rt_data_checksum(&ts);
  for (int64_t i = 1; i < repeat; i++) {
    t0 = dg_now();
    rt_cpu_call(k[0], ts.args);
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
  rt_cpu_free(k[0]);
  rt_cpu_free(k[1]);
  free(src);
  ir_func_free(f);
  free(canon);
  return rc;
}

int cmd_run(int argc, char **argv) {
  const char *target = "cpu";
  int64_t seed = 0, repeat = 10;
  const char *dist = "auto";
  const cli_opt opts[] = {
      {"--target", CLI_OPT_STR, &target, 0, 0, "where to run: cpu or c (the same C path)"},
      {"--seed", CLI_OPT_INT, &seed, 0, INT64_MAX, "seed of the random inputs"},
      {"--repeat", CLI_OPT_INT, &repeat, 1, 100000, "timed runs of the kernel"},
      {"--dist", CLI_OPT_STR, &dist, 0, 0,
       "float inputs: uniform [-1, 1], positive [0.5, 2], or auto (positive if the "
       "kernel takes log, sqrt, rsqrt or pow)"},
  };
  const cli_spec spec = {
      "run",
      "SPEC [--target cpu] [--seed S] [--repeat N] [--dist D]",
      "Builds the kernel of a workload spec (or alias such as GMM/0), runs it on\n"
      "the target and checks its outputs against the float64 reference run on the\n"
      "same seeded inputs. Prints the checksum of the outputs, the largest\n"
      "absolute and relative errors, pass/fail and the median time of the runs.\n"
      "Exits 0 if the check passes, 1 otherwise.",
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
  const char *wl = pos[0];
  free(pos);
  if (strcmp(target, "cpu") != 0 && strcmp(target, "c") != 0) {
    fprintf(stderr, "dragon run: --target: '%s' is not supported (choose cpu or c)\n", target);
    return CLI_USAGE;
  }
  if (strcmp(dist, "auto") != 0 && strcmp(dist, "uniform") != 0 &&
      strcmp(dist, "positive") != 0) {
    fprintf(stderr, "dragon run: --dist: '%s' is not one of auto, uniform, positive\n", dist);
    return CLI_USAGE;
  }
  return run_cpu(wl, seed, repeat, dist);
}
