/* progress.c: monotonic time, the wall-clock date, and a progress line for long work
 * (items done, rate, time left), drawn on stderr only when it is a terminal. */
#include "dragon/base.h"

#include <time.h>
#include <unistd.h>

double dg_now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

char *dg_now_iso(void) {
  time_t t = time(NULL);
  struct tm tm;
  gmtime_r(&t, &tm);
  char buf[32];
  strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", &tm);
  return dg_strdup(buf);
}

void dg_progress_init(dg_progress *p, const char *what, int64_t total) {
  p->what = what;
  p->total = total;
  p->done = 0;
  p->t0 = p->last = dg_now();
  p->tty = isatty(2);
  p->drawn = false;
}

static void fmt_eta(char *buf, size_t n, double s) {
  if (s < 0 || s > 1e7) snprintf(buf, n, "--");
  else if (s < 60) snprintf(buf, n, "%.0fs", s);
  else if (s < 3600) snprintf(buf, n, "%dm%02ds", (int)s / 60, (int)s % 60);
  else snprintf(buf, n, "%dh%02dm", (int)s / 3600, ((int)s % 3600) / 60);
}

static void draw(dg_progress *p, const char *extra) {
  double el = dg_now() - p->t0;
  double rate = el > 0 ? (double)p->done / el : 0;
  char eta[32];
  fmt_eta(eta, sizeof eta, rate > 0 ? (double)(p->total - p->done) / rate : -1);
  fprintf(stderr, "\r%s %lld/%lld  %.1f/s  ETA %s%s%s\033[K", p->what,
          (long long)p->done, (long long)p->total, rate, eta,
          extra ? "  " : "", extra ? extra : "");
  fflush(stderr);
  p->drawn = true;
}

void dg_progress_step(dg_progress *p, int64_t n, const char *extra) {
  p->done += n;
  if (!p->tty) return;
  double t = dg_now();
  if (t - p->last < 0.2 && p->done < p->total) return;
  p->last = t;
  draw(p, extra);
}

void dg_progress_done(dg_progress *p) {
  if (!p->tty) return;
  draw(p, NULL);
  fputc('\n', stderr);
}
