/* main.c: the test runner. One table of named tests (generated from the
 * DG_TEST lines); runs those whose name contains the filter argument; prints
 * failures as they happen, each test as `ok`, `FAIL` or `skip NAME  reason`,
 * and `N passed, N failed, N skipped` alone on its last line; exits non-zero
 * on any failure (a skip is not one). */
#include <stdarg.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

#include "dragon/search.h"
#include "dragon/tsel.h"
#include "test.h"

#define X(name) void test_##name(void);
#include "test_list.h"
#undef X

static const struct {
  const char *name;
  void (*fn)(void);
} tests[] = {
#define X(name) {#name, test_##name},
#include "test_list.h"
#undef X
};

static int current_failed;
static bool current_skipped;
static char current_skip_reason[512];
static const char *current_name;
static char tmpdir[256];

void dg_test_fail(const char *file, int line, const char *fmt, ...) {
  va_list ap;
  fprintf(stderr, "FAIL %s  %s:%d: ", current_name, file, line);
  va_start(ap, fmt);
  vfprintf(stderr, fmt, ap);
  va_end(ap);
  fputc('\n', stderr);
  current_failed = 1;
}

void dg_test_skip(const char *fmt, ...) {
  if (current_skipped) return;
  current_skipped = true;
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(current_skip_reason, sizeof current_skip_reason, fmt, ap);
  va_end(ap);
  /* one line: the reason is printed after the name */
  for (char *p = current_skip_reason; *p; p++)
    if (*p == '\n') *p = ' ';
}

int dg_test_run_dragon(const char *args, const char *input, char **out) {
  const char *bin = getenv("DRAGON_BIN");
  if (!bin) bin = "./dragon";
  char inpath[300] = "/dev/null";
  if (input) {
    snprintf(inpath, sizeof inpath, "%s/stdin.txt", dg_test_tmpdir());
    FILE *f = fopen(inpath, "wb");
    if (!f) return -1;
    fputs(input, f);
    fclose(f);
  }
  dg_str cmd;
  dg_str_init(&cmd);
  dg_str_printf(&cmd, "%s %s < %s 2>&1", bin, args, inpath);
  FILE *p = popen(cmd.s, "r");
  dg_str_free(&cmd);
  if (!p) return -1;
  dg_str o;
  dg_str_init(&o);
  char buf[4096];
  size_t n;
  while ((n = fread(buf, 1, sizeof buf, p)) > 0) dg_str_putn(&o, buf, n);
  int rc = pclose(p);
  if (out) *out = dg_str_take(&o);
  else dg_str_free(&o);
  return WIFEXITED(rc) ? WEXITSTATUS(rc) : -1;
}

const char *dg_test_data(const char *name) {
  static char path[512];
  snprintf(path, sizeof path, "tests/data/%s", name);
  return path;
}

const char *dg_test_tmpdir(void) {
  if (!tmpdir[0]) {
    snprintf(tmpdir, sizeof tmpdir, "/tmp/dragon-test-XXXXXX");
    if (!mkdtemp(tmpdir)) dg_panic(__FILE__, __LINE__, "mkdtemp failed");
  }
  return tmpdir;
}

static void cleanup(void) {
  if (tmpdir[0]) {
    char cmd[300];
    snprintf(cmd, sizeof cmd, "rm -rf %s", tmpdir);
    if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", tmpdir);
  }
}

int main(int argc, char **argv) {
  tsel_set_postprocessor(search_postproc_cuda, NULL); /* as dragon's main does */
  atexit(cleanup);
  int passed = 0, failed = 0, skipped = 0;
  double t_all = dg_now();
  for (size_t i = 0; i < DG_ARRAY_LEN(tests); i++) {
    /* the tests whose names hold any of the arguments (all without one) */
    bool wanted = argc < 2;
    for (int k = 1; k < argc && !wanted; k++) wanted = strstr(tests[i].name, argv[k]) != NULL;
    if (!wanted) continue;
    current_name = tests[i].name;
    current_failed = 0;
    current_skipped = false;
    current_skip_reason[0] = 0;
    double t0 = dg_now();
    tests[i].fn();
    double dt = dg_now() - t0;
    if (current_failed) {
      failed++;
      printf("FAIL %-40s %6.2fs\n", tests[i].name, dt);
    } else if (current_skipped) {
      skipped++;
      printf("skip %-40s  %s\n", tests[i].name, current_skip_reason);
    } else {
      passed++;
      printf("ok   %-40s %6.2fs\n", tests[i].name, dt);
    }
    fflush(stdout);
  }
  printf("total %.1fs\n", dg_now() - t_all);
  printf("%d passed, %d failed, %d skipped\n", passed, failed, skipped);
  return failed ? 1 : 0;
}
