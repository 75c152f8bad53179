/* status.c: the error convention (dg_status) and dg_panic for invariants. */
#include "dragon/base.h"

#include <stdlib.h>
#include <string.h>

void dg_panic(const char *file, int line, const char *fmt, ...) {
  va_list ap;
  fprintf(stderr, "dragon: internal error at %s:%d: ", file, line);
  va_start(ap, fmt);
  vfprintf(stderr, fmt, ap);
  va_end(ap);
  fputc('\n', stderr);
  fflush(stderr);
  abort();
}

void dg_status_ok(dg_status *st) {
  if (!st) return;
  st->code = DG_OK;
  st->msg[0] = 0;
}

bool dg_vfail(dg_status *st, dg_code code, const char *fmt, va_list ap) {
  if (!st) return false;
  st->code = code;
  vsnprintf(st->msg, sizeof st->msg, fmt, ap);
  return false;
}

bool dg_fail(dg_status *st, dg_code code, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  dg_vfail(st, code, fmt, ap);
  va_end(ap);
  return false;
}

void dg_status_prefix(dg_status *st, const char *fmt, ...) {
  if (!st) return;
  char pre[256], old[sizeof st->msg];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(pre, sizeof pre, fmt, ap);
  va_end(ap);
  memcpy(old, st->msg, sizeof old);
  /* pre + ": " + old, cut to fit */
  size_t n = strlen(pre), cap = sizeof st->msg - 1;
  if (n > cap) n = cap;
  memcpy(st->msg, pre, n);
  size_t k = n;
  for (const char *q = ": "; *q && k < cap; q++) st->msg[k++] = *q;
  for (const char *q = old; *q && k < cap; q++) st->msg[k++] = *q;
  st->msg[k] = 0;
}
