/* cmd_schedule.c: `dragon schedule KERNEL --trace T.json`: replays a trace
 * (TVM's trace JSON) and prints the scheduled kernel's text; with --json
 * prints the replayed trace canonically instead. */
#include "cli/cli.h"

int cmd_schedule(int argc, char **argv) {
  const char *trace = NULL;
  bool json = false;
  const cli_opt opts[] = {
      {"--trace", CLI_OPT_STR, &trace, 0, 0, "trace JSON file (TVM's layout) to replay"},
      {"--json", CLI_OPT_FLAG, &json, 0, 0, "print the replayed trace canonically instead of the kernel"},
  };
  const cli_spec spec = {"schedule", "KERNEL --trace T.json [--json]",
                         "Replays a schedule trace on a kernel (a workload spec or alias such as GMM/0,\n"
                         "a kernel-text file, or - for stdin) and prints the scheduled kernel text.",
                         opts, DG_ARRAY_LEN(opts), 1, 1};
  char **pos;
  int npos;
  int rc = cli_parse(&spec, argc, argv, &pos, &npos);
  if (rc) return rc < 0 ? CLI_OK : rc;
  if (!trace) {
    fprintf(stderr, "dragon schedule: --trace is required\n");
    free(pos);
    return CLI_USAGE;
  }
  dg_status st;
  dg_func *f = cli_load_kernel(pos[0], &st);
  free(pos);
  if (!f) return cli_report("schedule", &st);
  sched *s = cli_schedule(f, trace, &st);
  if (!s) {
    ir_func_free(f);
    return cli_report("schedule", &st);
  }
  char *out = json ? sched_trace_to_json(sched_get_trace(s)) : ir_print(sched_func(s));
  fputs(out, stdout);
  if (json) fputc('\n', stdout);
  free(out);
  sched_free(s);
  ir_func_free(f);
  return CLI_OK;
}
