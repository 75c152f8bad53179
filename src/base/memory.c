/* memory.c: checked heap allocation and the arena.
 *
 * The arena hands out zeroed memory from 64 KiB chunks (bigger requests get a
 * chunk of their own) and frees everything at once. With -DDG_ARENA_MALLOC
 * each allocation is its own malloc, so ASan sees its bounds.
 */
#include "dragon/base.h"

#include <stdlib.h>
#include <string.h>

void *dg_malloc(size_t n) {
  void *p = malloc(n ? n : 1);
  if (!p) dg_panic(__FILE__, __LINE__, "out of memory (%zu bytes)", n);
  return p;
}

void *dg_calloc(size_t n, size_t size) {
  void *p = calloc(n ? n : 1, size ? size : 1);
  if (!p) dg_panic(__FILE__, __LINE__, "out of memory (%zu x %zu bytes)", n, size);
  return p;
}

void *dg_realloc(void *p, size_t n) {
  void *q = realloc(p, n ? n : 1);
  if (!q) dg_panic(__FILE__, __LINE__, "out of memory (%zu bytes)", n);
  return q;
}

char *dg_strdup(const char *s) {
  size_t n = strlen(s) + 1;
  return memcpy(dg_malloc(n), s, n);
}

typedef struct chunk {
  struct chunk *next;
  size_t used, cap;
  max_align_t data[];
} chunk;

struct dg_arena {
  chunk *head;
  size_t bytes;
};

enum { CHUNK_BYTES = 64 * 1024 };

dg_arena *dg_arena_new(void) { return dg_calloc(1, sizeof(dg_arena)); }

void dg_arena_free(dg_arena *a) {
  if (!a) return;
  for (chunk *c = a->head, *n; c; c = n) {
    n = c->next;
    free(c);
  }
  free(a);
}

void *dg_arena_alloc(dg_arena *a, size_t n) {
  a->bytes += n;
#ifdef DG_ARENA_MALLOC
  chunk *c = dg_calloc(1, sizeof(chunk) + (n ? n : 1));
  c->next = a->head;
  a->head = c;
  return c->data;
#else
  size_t al = sizeof(max_align_t);
  n = (n + al - 1) / al * al;
  if (n == 0) n = al;
  chunk *c = a->head;
  if (!c || c->cap - c->used < n) {
    size_t cap = n > CHUNK_BYTES / 2 ? n : CHUNK_BYTES;
    chunk *nc = dg_malloc(sizeof(chunk) + cap);
    nc->used = 0;
    nc->cap = cap;
    if (c && cap != CHUNK_BYTES) { /* big one-off: keep the current chunk on top */
      nc->next = c->next;
      c->next = nc;
      nc->used = n;
      memset(nc->data, 0, n);
      return nc->data;
    }
    nc->next = c;
    a->head = c = nc;
  }
  void *p = (char *)c->data + c->used;
  c->used += n;
  memset(p, 0, n);
  return p;
#endif
}

size_t dg_arena_bytes(const dg_arena *a) { return a->bytes; }

char *dg_arena_strndup(dg_arena *a, const char *s, size_t n) {
  char *p = dg_arena_alloc(a, n + 1);
  memcpy(p, s, n);
  p[n] = 0;
  return p;
}

char *dg_arena_strdup(dg_arena *a, const char *s) {
  return dg_arena_strndup(a, s, strlen(s));
}

void *dg_arena_memdup(dg_arena *a, const void *p, size_t n) {
  void *q = dg_arena_alloc(a, n);
  if (n) memcpy(q, p, n);
  return q;
}

char *dg_arena_printf(dg_arena *a, const char *fmt, ...) {
  va_list ap, ap2;
  va_start(ap, fmt);
  va_copy(ap2, ap);
  int n = vsnprintf(NULL, 0, fmt, ap);
  va_end(ap);
  char *p = dg_arena_alloc(a, (size_t)n + 1);
  vsnprintf(p, (size_t)n + 1, fmt, ap2);
  va_end(ap2);
  return p;
}
