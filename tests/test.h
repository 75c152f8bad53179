/* test.h: the tiny test runner's assertions.
 *
 * A test is `DG_TEST(name) { ... }` in tests/test_*.c; the Makefile collects
 * the names into the runner's table. A failing CHECK prints file:line and
 * returns from the current (void) function; CHECKR returns a value instead.
 * A test that cannot run here (no GPU, no NVRTC) says so with SKIP(reason)
 * or dg_test_skip: it is counted as skipped, never as passed.
 */
#ifndef DRAGON_TEST_H
#define DRAGON_TEST_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "dragon/base.h"

#define DG_TEST(name)         \
  void test_##name(void); \
  void test_##name(void)

void dg_test_fail(const char *file, int line, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* Marks the current test skipped, with why (printf format): it is listed
 * as `skip NAME  reason` and counted apart from those that passed, even if
 * part of it ran; a failing check still makes it a failure. The first
 * reason given is the one listed. */
void dg_test_skip(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
/* dg_test_skip, then return from the current (void) function. */
#define SKIP(...)                                                             \
  do {                                                                        \
    dg_test_skip(__VA_ARGS__);                                                \
    return;                                                                   \
  } while (0)

#define CHECKR(c, ret)                                                        \
  do {                                                                        \
    if (!(c)) {                                                               \
      dg_test_fail(__FILE__, __LINE__, "%s", #c);                             \
      return ret;                                                             \
    }                                                                         \
  } while (0)
#define CHECK(c) CHECKR(c, )
#define CHECK_MSG(c, ...)                                                     \
  do {                                                                        \
    if (!(c)) {                                                               \
      dg_test_fail(__FILE__, __LINE__, __VA_ARGS__);                          \
      return;                                                                 \
    }                                                                         \
  } while (0)
#define CHECK_EQ(a, b)                                                        \
  do {                                                                        \
    long long a_ = (long long)(a), b_ = (long long)(b);                       \
    if (a_ != b_) {                                                           \
      dg_test_fail(__FILE__, __LINE__, "%s == %s: %lld != %lld", #a, #b, a_,  \
                   b_);                                                       \
      return;                                                                 \
    }                                                                         \
  } while (0)
#define CHECK_STREQ(a, b)                                                     \
  do {                                                                        \
    const char *a_ = (a), *b_ = (b);                                          \
    if (!a_ || !b_ || strcmp(a_, b_) != 0) {                                  \
      dg_test_fail(__FILE__, __LINE__, "%s == %s:\n--- got\n%s\n--- want\n%s", \
                   #a, #b, a_ ? a_ : "(null)", b_ ? b_ : "(null)");           \
      return;                                                                 \
    }                                                                         \
  } while (0)
#define CHECK_NEAR(a, b, tol)                                                 \
  do {                                                                        \
    double a_ = (double)(a), b_ = (double)(b);                                \
    if (!(a_ - b_ <= (tol) && b_ - a_ <= (tol))) {                            \
      dg_test_fail(__FILE__, __LINE__, "%s ~= %s: %.9g vs %.9g (tol %g)", #a, \
                   #b, a_, b_, (double)(tol));                                \
      return;                                                                 \
    }                                                                         \
  } while (0)
/* The status must be ok; prints its message otherwise. */
#define CHECK_OK(st)                                                          \
  do {                                                                        \
    if ((st).code != DG_OK) {                                                 \
      dg_test_fail(__FILE__, __LINE__, "status not ok: %s", (st).msg);        \
      return;                                                                 \
    }                                                                         \
  } while (0)
/* The status must be an error whose message contains `sub`. */
#define CHECK_ERR(st, sub)                                                    \
  do {                                                                        \
    if ((st).code == DG_OK || !strstr((st).msg, (sub))) {                     \
      dg_test_fail(__FILE__, __LINE__, "expected an error containing '%s', got %s'%s'", \
                   (sub), (st).code == DG_OK ? "ok " : "", (st).msg);         \
      return;                                                                 \
    }                                                                         \
  } while (0)

/* Runs the dragon binary (path from $DRAGON_BIN) with a shell argument
 * string; stdin from `input` (may be NULL). Captures stdout+stderr into
 * *out (caller frees). Returns the exit status (-1 if it did not exit). */
int dg_test_run_dragon(const char *args, const char *input, char **out);
/* The path of a test data file under tests/data/. */
const char *dg_test_data(const char *name);
/* A fresh temporary directory for this test (removed at exit). */
const char *dg_test_tmpdir(void);

#endif
