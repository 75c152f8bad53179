/* str.c: growable strings and whole-file I/O (atomic writes). */
#include "dragon/base.h"

#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

void dg_str_init(dg_str *b) {
  b->cap = 64;
  b->len = 0;
  b->s = dg_malloc(b->cap);
  b->s[0] = 0;
}

void dg_str_free(dg_str *b) {
  free(b->s);
  b->s = NULL;
  b->len = b->cap = 0;
}

void dg_str_clear(dg_str *b) {
  b->len = 0;
  if (b->s) b->s[0] = 0;
}

static void reserve(dg_str *b, size_t extra) {
  if (!b->s) dg_str_init(b);
  if (b->len + extra + 1 <= b->cap) return;
  while (b->len + extra + 1 > b->cap) b->cap *= 2;
  b->s = dg_realloc(b->s, b->cap);
}

void dg_str_putn(dg_str *b, const char *s, size_t n) {
  reserve(b, n);
  memcpy(b->s + b->len, s, n);
  b->len += n;
  b->s[b->len] = 0;
}

void dg_str_putc(dg_str *b, char c) { dg_str_putn(b, &c, 1); }
void dg_str_puts(dg_str *b, const char *s) { dg_str_putn(b, s, strlen(s)); }

void dg_str_vprintf(dg_str *b, const char *fmt, va_list ap) {
  va_list ap2;
  va_copy(ap2, ap);
  int n = vsnprintf(NULL, 0, fmt, ap);
  reserve(b, (size_t)n);
  vsnprintf(b->s + b->len, (size_t)n + 1, fmt, ap2);
  va_end(ap2);
  b->len += (size_t)n;
}

void dg_str_printf(dg_str *b, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  dg_str_vprintf(b, fmt, ap);
  va_end(ap);
}

void dg_str_indent(dg_str *b, int n) {
  reserve(b, (size_t)(n > 0 ? n : 0));
  for (int i = 0; i < n; i++) b->s[b->len++] = ' ';
  b->s[b->len] = 0;
}

char *dg_str_take(dg_str *b) {
  if (!b->s) dg_str_init(b);
  char *s = b->s;
  b->s = NULL;
  b->len = b->cap = 0;
  return s;
}

char *dg_read_file(const char *path, size_t *len, dg_status *st) {
  FILE *f = strcmp(path, "-") == 0 ? stdin : fopen(path, "rb");
  if (!f) {
    dg_fail(st, DG_ERR_IO, "%s: %s", path, strerror(errno));
    return NULL;
  }
  dg_str b;
  dg_str_init(&b);
  char buf[65536];
  size_t n;
  while ((n = fread(buf, 1, sizeof buf, f)) > 0) dg_str_putn(&b, buf, n);
  bool err = ferror(f);
  if (f != stdin) fclose(f);
  if (err) {
    dg_str_free(&b);
    dg_fail(st, DG_ERR_IO, "%s: read error", path);
    return NULL;
  }
  if (len) *len = b.len;
  return dg_str_take(&b);
}

bool dg_write_file_atomic(const char *path, const void *data, size_t len,
                          dg_status *st) {
  size_t n = strlen(path) + 32;
  char *tmp = dg_malloc(n);
  snprintf(tmp, n, "%s.tmp.%ld", path, (long)getpid());
  int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC, 0644);
  if (fd < 0) {
    dg_fail(st, DG_ERR_IO, "%s: %s", tmp, strerror(errno));
    free(tmp);
    return false;
  }
  const char *p = data;
  size_t left = len;
  while (left > 0) {
    ssize_t w = write(fd, p, left);
    if (w < 0) {
      if (errno == EINTR) continue;
      dg_fail(st, DG_ERR_IO, "%s: %s", tmp, strerror(errno));
      close(fd);
      unlink(tmp);
      free(tmp);
      return false;
    }
    p += w;
    left -= (size_t)w;
  }
  if (fsync(fd) != 0 || close(fd) != 0 || rename(tmp, path) != 0) {
    dg_fail(st, DG_ERR_IO, "%s: %s", path, strerror(errno));
    unlink(tmp);
    free(tmp);
    return false;
  }
  free(tmp);
  return true;
}

bool dg_mkdirs(const char *path, dg_status *st) {
  char *p = dg_strdup(path);
  for (char *s = p + 1; *s; s++) {
    if (*s != '/') continue;
    *s = 0;
    if (mkdir(p, 0755) != 0 && errno != EEXIST) goto fail;
    *s = '/';
  }
  if (mkdir(p, 0755) != 0 && errno != EEXIST) goto fail;
  free(p);
  return true;
fail:
  dg_fail(st, DG_ERR_IO, "%s: %s", p, strerror(errno));
  free(p);
  return false;
}
