/* kv.c: the one reader of `key = value` text (the model and training
 * configs): '#' starts a comment, blank lines are skipped, spaces and tabs
 * around the key and the value are trimmed, and every pair goes to the
 * caller with its line number, in order. A line that is not a pair, or
 * text with a NUL byte in it, is an error naming the place. What the keys
 * mean is the caller's. */
#include <string.h>

#include "dragon/base.h"

static char *trim(char *s) {
  while (*s == ' ' || *s == '\t' || *s == '\r') s++;
  size_t n = strlen(s);
  while (n > 0 && (s[n - 1] == ' ' || s[n - 1] == '\t' || s[n - 1] == '\r')) s[--n] = 0;
  return s;
}

bool dg_kv_parse(const char *text, size_t len, const char *where, dg_kv_fn fn, void *ctx,
                 dg_status *st) {
  dg_status_ok(st);
  if (memchr(text, 0, len))
    return dg_fail(st, DG_ERR_PARSE, "%s: not a text file (contains a NUL byte)", where);
  char *buf = dg_malloc(len + 1);
  memcpy(buf, text, len);
  buf[len] = 0;
  bool ok = true;
  int lineno = 1;
  for (char *line = buf; line && ok; lineno++) {
    char *nl = strchr(line, '\n');
    if (nl) *nl = 0;
    char *hash = strchr(line, '#');
    if (hash) *hash = 0;
    char *s = trim(line);
    if (*s) {
      char *eq = strchr(s, '=');
      if (!eq) {
        ok = dg_fail(st, DG_ERR_PARSE, "%s:%d: expected 'key = value', got '%.200s'", where,
                     lineno, s);
      } else {
        *eq = 0;
        char *key = trim(s), *val = trim(eq + 1);
        if (!*key) ok = dg_fail(st, DG_ERR_PARSE, "%s:%d: a value without a key", where, lineno);
        else ok = fn(ctx, key, val, lineno, st);
      }
    }
    line = nl ? nl + 1 : NULL;
  }
  free(buf);
  return ok;
}
