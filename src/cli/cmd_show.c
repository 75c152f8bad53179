/* cmd_show.c: placeholder until the show command lands. */
#include "cli/cli.h"

int cmd_show(int argc, char **argv) {
  (void)argc;
  (void)argv;
  fprintf(stderr, "dragon show: not built yet\n");
  return CLI_ERROR;
}
