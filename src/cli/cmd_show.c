/* cmd_show.c: `dragon show SPEC|FILE|-`: the canonical kernel text of a
 * workload spec or alias, or of a kernel-text file (or stdin) reprinted.
 *
 * An argument that is "-" or names an existing file is read as kernel text;
 * anything else is a workload spec. Parse errors print the located message
 * with the offending line and a caret, and exit 1. Does not verify the
 * kernel beyond what the parser checks.
 */
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "cli/cli.h"
#include "dragon/ir.h"
#include "dragon/wl.h"

static const cli_spec show_spec = {
    "show",
    "SPEC|FILE|-",
    "Prints a kernel in canonical kernel text (docs/kernel-text.md). The argument is\n"
    "a workload spec or alias (gemm:m=64,n=64,k=64, GMM/0), a kernel-text file, or\n"
    "- for kernel text on stdin, which is then parsed and reprinted canonically.",
    NULL,
    0,
    1,
    1,
};

/* Shows the line a "<file>:line:col: ..." message points at, with a caret. */
static void show_context(const char *text, const char *file, const char *msg) {
  size_t fl = strlen(file);
  int line, col;
  if (strncmp(msg, file, fl) != 0 || sscanf(msg + fl, ":%d:%d:", &line, &col) != 2 || line < 1 || col < 1)
    return;
  const char *s = text;
  for (int i = 1; i < line && s; i++) {
    s = strchr(s, '\n');
    if (s) s++;
  }
  if (!s || !*s) return;
  const char *e = strchr(s, '\n');
  int n = e ? (int)(e - s) : (int)strlen(s);
  if (n > 0 && s[n - 1] == '\r') n--;
  if (n > 200 || col > n + 1) return;
  fprintf(stderr, "  %.*s\n  %*s^\n", n, s, col - 1, "");
}

/* Reads and parses kernel text; NULL after printing the error. */
static dg_func *parse_file(const char *path) {
  dg_status st;
  size_t len;
  char *text = dg_read_file(path, &len, &st);
  if (!text) {
    cli_report("show", &st);
    return NULL;
  }
  const char *name = strcmp(path, "-") == 0 ? "<stdin>" : path;
  const char *nul = memchr(text, 0, len);
  if (nul) {
    int line = 1, col = 1;
    for (const char *q = text; q < nul; q++) {
      if (*q == '\n') line++, col = 1;
      else col++;
    }
    fprintf(stderr, "%s:%d:%d: NUL byte in kernel text\n", name, line, col);
    free(text);
    return NULL;
  }
  dg_func *f = ir_parse(text, name, &st);
  if (!f) {
    fprintf(stderr, "%s\n", st.msg);
    show_context(text, name, st.msg);
  }
  free(text);
  return f;
}

int cmd_show(int argc, char **argv) {
  char **pos;
  int npos;
  int rc = cli_parse(&show_spec, argc, argv, &pos, &npos);
  if (rc == -1) return CLI_OK;
  if (rc != CLI_OK) return rc;
  const char *arg = pos[0];
  free(pos);
  struct stat sb;
  dg_func *f;
  if (strcmp(arg, "-") == 0 || stat(arg, &sb) == 0) {
    f = parse_file(arg);
    if (!f) return CLI_ERROR;
  } else {
    dg_status st;
    f = cli_load_kernel(arg, &st); /* not a file: a spec or an alias */
    if (!f) return cli_report("show", &st);
  }
  char *text = ir_print(f);
  fputs(text, stdout);
  free(text);
  ir_func_free(f);
  return fflush(stdout) == 0 ? CLI_OK : CLI_ERROR;
}
