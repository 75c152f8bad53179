/* str.c: growable strings and whole-file I/O.
 *
 * Every file that must not be lost or seen half-written (databases' shards,
 * checkpoints, token shards, tokenizers, `latest` pointers, configs) is
 * written by dg_write_parts_atomic: a temporary file "PATH.tmp.PID" in the
 * same directory, fsync, rename over PATH, fsync of the directory. A
 * process killed before the rename leaves its temporary file behind;
 * dg_remove_stale_tmp removes those of processes that are gone.
 */
#include "dragon/base.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
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
  struct stat sb;
  if (f != stdin && fstat(fileno(f), &sb) == 0 && S_ISDIR(sb.st_mode)) {
    fclose(f);
    dg_fail(st, DG_ERR_IO, "%s: is a directory, not a file", path);
    return NULL;
  }
  dg_str b;
  dg_str_init(&b);
  char buf[65536];
  size_t n;
  errno = 0;
  while ((n = fread(buf, 1, sizeof buf, f)) > 0) dg_str_putn(&b, buf, n);
  bool err = ferror(f);
  int why = errno;
  if (f != stdin) fclose(f);
  if (err) {
    dg_str_free(&b);
    dg_fail(st, DG_ERR_IO, "%s: read error: %s", path, why ? strerror(why) : "unknown");
    return NULL;
  }
  if (len) *len = b.len;
  return dg_str_take(&b);
}

/* The directory part of path ("." for a bare name), for its fsync. */
static char *dir_of(const char *path) {
  const char *slash = strrchr(path, '/');
  if (!slash) return dg_strdup(".");
  if (slash == path) return dg_strdup("/");
  size_t n = (size_t)(slash - path);
  char *d = dg_malloc(n + 1);
  memcpy(d, path, n);
  d[n] = 0;
  return d;
}

/* fsync of a directory, so that a rename in it survives a crash. File
 * systems that cannot sync a directory (EINVAL) have nothing to sync. */
static bool sync_dir(const char *dir, dg_status *st) {
  int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) return dg_fail(st, DG_ERR_IO, "%s: cannot open the directory to sync it: %s", dir,
                             strerror(errno));
  bool ok = fsync(fd) == 0 || errno == EINVAL;
  int err = errno;
  close(fd);
  if (!ok) return dg_fail(st, DG_ERR_IO, "%s: fsync of the directory: %s", dir, strerror(err));
  return true;
}

bool dg_write_parts_atomic(const char *path, const dg_part *parts, int n_parts, dg_status *st) {
  size_t n = strlen(path) + 32;
  char *tmp = dg_malloc(n);
  snprintf(tmp, n, "%s.tmp.%ld", path, (long)getpid());
  int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) {
    dg_fail(st, DG_ERR_IO, "%s: %s", tmp, strerror(errno));
    free(tmp);
    return false;
  }
  bool ok = true;
  for (int i = 0; i < n_parts && ok; i++) {
    const char *p = parts[i].data;
    size_t left = parts[i].len;
    while (left > 0) {
      ssize_t w = write(fd, p, left);
      if (w < 0 && errno == EINTR) continue;
      if (w <= 0) {
        ok = dg_fail(st, DG_ERR_IO, "%s: %s", tmp, w < 0 ? strerror(errno) : "short write");
        break;
      }
      p += w;
      left -= (size_t)w;
    }
  }
  if (ok && fsync(fd) != 0) ok = dg_fail(st, DG_ERR_IO, "%s: fsync: %s", tmp, strerror(errno));
  if (close(fd) != 0 && ok) ok = dg_fail(st, DG_ERR_IO, "%s: %s", tmp, strerror(errno));
  if (ok && rename(tmp, path) != 0)
    ok = dg_fail(st, DG_ERR_IO, "%s: rename from %s: %s", path, tmp, strerror(errno));
  if (!ok) unlink(tmp);
  free(tmp);
  if (!ok) return false;
  char *dir = dir_of(path);
  ok = sync_dir(dir, st);
  free(dir);
  return ok;
}

bool dg_write_file_atomic(const char *path, const void *data, size_t len,
                          dg_status *st) {
  dg_part part = {data, len};
  return dg_write_parts_atomic(path, &part, 1, st);
}

bool dg_pid_alive(long pid) {
  if (pid <= 0 || (long)(pid_t)pid != pid) return false;
  return kill((pid_t)pid, 0) == 0 || errno == EPERM;
}

/* The writer's pid in a temporary file's name "NAME.tmp.PID", or -1. */
static long tmp_owner(const char *name) {
  const char *t = NULL;
  for (const char *p = strstr(name, ".tmp."); p; p = strstr(p + 1, ".tmp.")) t = p;
  if (!t || t == name) return -1;
  const char *d = t + 5;
  if (*d < '1' || *d > '9') return -1;
  long pid = 0;
  for (; *d; d++) {
    if (*d < '0' || *d > '9' || pid > 100000000) return -1;
    pid = pid * 10 + (*d - '0');
  }
  return pid;
}

int dg_remove_stale_tmp(const char *dir) {
  DIR *d = opendir(dir);
  if (!d) return 0;
  int removed = 0;
  struct dirent *e;
  while ((e = readdir(d))) {
    long pid = tmp_owner(e->d_name);
    if (pid < 0 || dg_pid_alive(pid)) continue;
    dg_str p;
    dg_str_init(&p);
    dg_str_printf(&p, "%s/%s", dir, e->d_name);
    struct stat sb;
    if (lstat(p.s, &sb) == 0 && S_ISREG(sb.st_mode) && unlink(p.s) == 0) removed++;
    dg_str_free(&p);
  }
  closedir(d);
  return removed;
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

bool dg_append_lines(const char *path, const char *text, size_t n, dg_status *st) {
  if (n == 0) return true;
  int fd = open(path, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0644);
  if (fd < 0) return dg_fail(st, DG_ERR_IO, "%s: %s", path, strerror(errno));
  ssize_t w = write(fd, text, n);
  bool ok = w == (ssize_t)n;
  int err = ok ? 0 : w < 0 ? errno : ENOSPC;
  if (ok && fsync(fd) != 0) {
    ok = false;
    err = errno;
  }
  close(fd);
  if (!ok) return dg_fail(st, DG_ERR_IO, "%s: append failed: %s", path, strerror(err));
  return true;
}
