/* cmd_emit.c: `dragon emit KERNEL [--trace T.json] --target cuda|c`:
 * replays a trace (without one: the untuned baseline, TVM's
 * DefaultGPUSchedule, search_baseline_schedule), builds the scheduled
 * kernel up to its source (rt_program_build: lowered to device launches,
 * checked against the GPU's limits) and prints it: CUDA C, or the C that
 * emulates the launches on the CPU. --lowered prints the lowered program
 * instead. */
#include <string.h>

#include "cli/cli.h"
#include "dragon/lower.h"
#include "dragon/rt_cuda.h"
#include "dragon/search.h"

int cmd_emit(int argc, char **argv) {
  const char *trace = NULL;
  const char *target = "cuda";
  bool lowered = false;
  bool no_verify = false;
  const cli_opt opts[] = {
      {"--trace", CLI_OPT_STR, &trace, 0, 0,
       "trace JSON file (TVM's layout) to replay (default: the untuned baseline, TVM's "
       "DefaultGPUSchedule)"},
      {"--target", CLI_OPT_STR, &target, 0, 0, "cuda or c (default: cuda)"},
      {"--lowered", CLI_OPT_FLAG, &lowered, 0, 0, "print the lowered program instead of source"},
      {"--no-verify", CLI_OPT_FLAG, &no_verify, 0, 0, "skip the check of the GPU's limits"},
  };
  const cli_spec spec = {"emit", "KERNEL [--trace T.json] [--target cuda|c] [--lowered]",
                         "Replays a schedule trace on a kernel (a workload spec or alias, a\n"
                         "kernel-text file, or - for stdin), lowers it to device launches and\n"
                         "prints the generated source. The kernel must be bound to\n"
                         "blockIdx/threadIdx; a kernel beyond the GPU's limits is rejected.\n"
                         "Without --trace the kernel gets the untuned baseline, TVM's\n"
                         "DefaultGPUSchedule: each block's data-parallel loops fused and\n"
                         "bound to blockIdx.x/threadIdx.x (blocks already bound are kept).",
                         opts, DG_ARRAY_LEN(opts), 1, 1};
  char **pos;
  int npos;
  int rc = cli_parse(&spec, argc, argv, &pos, &npos);
  if (rc) return rc < 0 ? CLI_OK : rc;
  rt_build_opts bo = {.no_limits = no_verify};
  if (strcmp(target, "cuda") == 0) {
    bo.target = RT_BUILD_CUDA;
  } else if (strcmp(target, "c") == 0) {
    bo.target = RT_BUILD_C_EMULATION;
  } else {
    fprintf(stderr, "dragon emit: --target: unknown target '%s' (cuda or c)\n", target);
    free(pos);
    return CLI_USAGE;
  }
  dg_status st;
  dg_func *f = cli_load_kernel(pos[0], &st);
  free(pos);
  if (!f) return cli_report("emit", &st);
  sched *s = NULL;
  if (trace) s = cli_schedule(f, trace, &st);
  else if (!search_baseline_schedule(f, NULL, &s, &st)) s = NULL;
  if (!s) {
    ir_func_free(f);
    return cli_report("emit", &st);
  }
  rt_build b;
  bool built = rt_program_build(sched_func(s), &bo, &b, &st);
  /* the lowered program is printed even where the target cannot express it */
  char *out = NULL;
  if (lowered && b.prog) out = lower_print(b.prog);
  else if (built) out = b.source, b.source = NULL;
  rt_build_free(&b);
  sched_free(s);
  ir_func_free(f);
  if (!out) return cli_report("emit", &st);
  fputs(out, stdout);
  free(out);
  return CLI_OK;
}
