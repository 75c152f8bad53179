/* kernel_arg.c: what a KERNEL argument names: "-" (kernel text on stdin),
 * a kernel-text file, or a workload spec / alias; and reading a trace. */
#include <string.h>
#include <sys/stat.h>

#include "cli/cli.h"
#include "dragon/wl.h"

dg_func *cli_load_kernel(const char *arg, dg_status *st) {
  struct stat sb;
  if (strcmp(arg, "-") == 0 || stat(arg, &sb) == 0) {
    char *text = dg_read_file(arg, NULL, st);
    if (!text) return NULL;
    dg_func *f = ir_parse(text, strcmp(arg, "-") == 0 ? "<stdin>" : arg, st);
    free(text);
    return f;
  }
  return wl_build(arg, st);
}

sched_trace *cli_load_trace(const char *path, dg_status *st) {
  char *text = dg_read_file(path, NULL, st);
  if (!text) return NULL;
  sched_trace *t = sched_trace_from_json(text, st);
  free(text);
  if (!t) dg_status_prefix(st, "%s", path);
  return t;
}

sched *cli_schedule(const dg_func *f, const char *trace_path, dg_status *st) {
  sched_trace *t = cli_load_trace(trace_path, st);
  if (!t) return NULL;
  sched *s = sched_new(f, 0);
  bool ok = sched_replay(s, t, false, false, st);
  sched_trace_free(t);
  if (!ok) {
    dg_status_prefix(st, "%s", trace_path);
    sched_free(s);
    return NULL;
  }
  return s;
}
