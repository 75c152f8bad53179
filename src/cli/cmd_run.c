/* cmd_run.c: placeholder until the run command lands. */
#include "cli/cli.h"

int cmd_run(int argc, char **argv) {
  (void)argc;
  (void)argv;
  fprintf(stderr, "dragon run: not built yet\n");
  return CLI_ERROR;
}
