/* plot.c: the one way commands draw: a gnuplot script piped to gnuplot
 * (Debian's gnuplot-nox, scripts/setup.sh). Used by `dragon data card`
 * and `dragon eval`. */
#include <stdio.h>

#include "cli/cli.h"

bool cli_gnuplot(const char *script, dg_status *st) {
  FILE *gp = popen("gnuplot 2>&1", "w");
  if (!gp) return dg_fail(st, DG_ERR_IO, "cannot start gnuplot");
  fputs(script, gp);
  int rc = pclose(gp);
  if (rc != 0) return dg_fail(st, DG_ERR_RUNTIME, "gnuplot failed (exit %d; is gnuplot installed?)", rc);
  return true;
}
