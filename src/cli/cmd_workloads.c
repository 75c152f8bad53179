/* cmd_workloads.c: placeholder until the workloads command lands. */
#include "cli/cli.h"

int cmd_workloads(int argc, char **argv) {
  (void)argc;
  (void)argv;
  fprintf(stderr, "dragon workloads: not built yet\n");
  return CLI_ERROR;
}
