/* kernel_arg.c: what a KERNEL argument names: "-" (kernel text on stdin),
 * a kernel-text file, or a workload spec / alias; and reading a trace.
 * When it names none of them, the message says what it looked like: an
 * alias with an unknown config ("GMM/9"), a spec with a bad key, or a
 * file that does not exist. */
#include <string.h>
#include <sys/stat.h>

#include "cli/cli.h"
#include "dragon/wl.h"

/* Whether arg reads as a MetaSchedule alias: the part before its '/'
 * names one ("GMM/9" is an alias with a bad config, not a path). */
static bool alias_like(const char *arg) {
  const char *slash = strchr(arg, '/');
  if (!slash) return false;
  size_t n = (size_t)(slash - arg);
  for (int i = 0; i < wl_alias_count(); i++) {
    const char *a = wl_alias_name(i);
    if (strlen(a) == n && memcmp(a, arg, n) == 0) return true;
  }
  return false;
}

dg_func *cli_load_kernel(const char *arg, dg_status *st) {
  struct stat sb;
  if (strcmp(arg, "-") == 0 || stat(arg, &sb) == 0) {
    char *text = dg_read_file(arg, NULL, st);
    if (!text) return NULL;
    dg_func *f = ir_parse(text, strcmp(arg, "-") == 0 ? "<stdin>" : arg, st);
    free(text);
    return f;
  }
  dg_func *f = wl_build(arg, st);
  if (f) return f;
  /* Neither a file nor a workload: say which it was meant to be. An
   * alias keeps the workload's message (unknown config); something with
   * a '/' or a .kt ending that is no alias was a file. */
  size_t n = strlen(arg);
  bool path_like = strchr(arg, '/') || (n > 3 && strcmp(arg + n - 3, ".kt") == 0);
  if (!strchr(arg, ':') && path_like && !alias_like(arg))
    dg_fail(st, DG_ERR_IO, "%s: no such file (nor a workload spec or alias)", arg);
  return NULL;
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
