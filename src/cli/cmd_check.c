/* cmd_check.c: `dragon check KERNEL --trace T.json`: replays the trace,
 * runs the scheduled kernel on the CPU and compares it with the unscheduled
 * kernel run as the float64 reference. Exit 0 when it matches, 1 otherwise. */
#include "cli/cli.h"
#include "dragon/rt.h"

int cmd_check(int argc, char **argv) {
  const char *trace = NULL;
  int64_t seed = 1;
  bool interp = false;
  const cli_opt opts[] = {
      {"--trace", CLI_OPT_STR, &trace, 0, 0, "trace JSON file (TVM's layout) to replay"},
      {"--seed", CLI_OPT_INT, &seed, 0, INT64_MAX, "seed of the random inputs"},
      {"--interp", CLI_OPT_FLAG, &interp, 0, 0, "use the interpreter instead of compiled C"},
  };
  const cli_spec spec = {"check", "KERNEL --trace T.json [--seed S] [--interp]",
                         "Replays a schedule trace on a kernel, runs the scheduled kernel on the CPU\n"
                         "on fresh random inputs (outputs poisoned first) and compares it with the\n"
                         "unscheduled kernel run in float64. Prints the max errors; exits 0 when every\n"
                         "output is within its dtype's tolerance, 1 otherwise.",
                         opts, DG_ARRAY_LEN(opts), 1, 1};
  char **pos;
  int npos;
  int rc = cli_parse(&spec, argc, argv, &pos, &npos);
  if (rc) return rc < 0 ? CLI_OK : rc;
  if (!trace) {
    fprintf(stderr, "dragon check: --trace is required\n");
    free(pos);
    return CLI_USAGE;
  }
  dg_status st;
  dg_func *f = cli_load_kernel(pos[0], &st);
  free(pos);
  if (!f) return cli_report("check", &st);
  sched *s = cli_schedule(f, trace, &st);
  if (!s) {
    ir_func_free(f);
    return cli_report("check", &st);
  }
  rt_check chk;
  double secs = 0;
  if (!ir_verify(sched_func(s), &st) ||
      !rt_compare_cpu(f, sched_func(s), (uint64_t)seed, !interp, &chk, &secs, &st)) {
    sched_free(s);
    ir_func_free(f);
    return cli_report("check", &st);
  }
  printf("steps     %d\n", sched_get_trace(s)->n);
  printf("error     max abs %.3g  max rel %.3g  (K = %lld, float64 reference, seed %lld)\n",
         chk.max_abs, chk.max_rel, (long long)chk.K, (long long)seed);
  if (chk.pass)
    printf("check     pass\n");
  else
    printf("check     FAIL  %lld of %lld elements out of tolerance; first %s\n",
           (long long)chk.n_bad, (long long)chk.n_checked, chk.first_bad[0] ? chk.first_bad : "-");
  sched_free(s);
  ir_func_free(f);
  return chk.pass ? CLI_OK : CLI_ERROR;
}
