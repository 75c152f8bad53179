/* cmd_emit.c: `dragon emit KERNEL [--trace T.json] --target cuda|c`:
 * replays a trace (without one: the untuned baseline, TVM's
 * DefaultGPUSchedule, search_baseline_schedule), lowers the scheduled
 * kernel to device launches (lower/) and prints the generated source: CUDA
 * C for sm_90, or the C that emulates the launches on the CPU. --lowered
 * prints the lowered program instead. */
#include <string.h>

#include "cli/cli.h"
#include "dragon/codegen.h"
#include "dragon/lower.h"
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
                         "blockIdx/threadIdx; a kernel beyond sm_90's limits is rejected.\n"
                         "Without --trace the kernel gets the untuned baseline, TVM's\n"
                         "DefaultGPUSchedule: each block's data-parallel loops fused and\n"
                         "bound to blockIdx.x/threadIdx.x (blocks already bound are kept).",
                         opts, DG_ARRAY_LEN(opts), 1, 1};
  char **pos;
  int npos;
  int rc = cli_parse(&spec, argc, argv, &pos, &npos);
  if (rc) return rc < 0 ? CLI_OK : rc;
  const dg_lang *lang = codegen_lang_find(target);
  if (!lang) {
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
  lower_opts lo = {.skip_verify = no_verify};
  lw_program *p = lower_program(sched_func(s), &lo, &st);
  char *out = NULL;
  if (p) out = lowered ? lower_print(p) : codegen_emit_program(p, lang, &st);
  lower_program_free(p);
  sched_free(s);
  ir_func_free(f);
  if (!out) return cli_report("emit", &st);
  fputs(out, stdout);
  free(out);
  return CLI_OK;
}
