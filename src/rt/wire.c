/* wire.c: the byte layout of the messages between a parent and its worker
 * processes (rt_cuda_job for the GPU workers, compilations for the NVRTC
 * workers): little-endian fixed-width numbers and length-prefixed byte
 * strings, read back with bounds checks. Both ends are the same program,
 * so the layout is the machine's own; a short or damaged message sets the
 * reader's bad flag, and every read after it yields zeros. */
#include "rt/cuda_api.h"

#include <string.h>

static void put(dg_str *s, const void *p, size_t n) { dg_str_putn(s, (const char *)p, n); }
void rt_wire_put_i32(dg_str *s, int32_t v) { put(s, &v, 4); }
void rt_wire_put_i64(dg_str *s, int64_t v) { put(s, &v, 8); }
void rt_wire_put_f64(dg_str *s, double v) { put(s, &v, 8); }
void rt_wire_put_bytes(dg_str *s, const void *p, size_t n) {
  rt_wire_put_i64(s, (int64_t)n);
  if (n) put(s, p, n);
}
void rt_wire_put_text(dg_str *s, const char *t) {
  rt_wire_put_bytes(s, t ? t : "", t ? strlen(t) : 0);
}

const void *rt_wire_take(rt_wire_reader *r, size_t n) {
  if (r->bad || n > r->n - r->at) {
    r->bad = true;
    return NULL;
  }
  const void *p = r->p + r->at;
  r->at += n;
  return p;
}
int32_t rt_wire_get_i32(rt_wire_reader *r) {
  int32_t v = 0;
  const void *p = rt_wire_take(r, 4);
  if (p) memcpy(&v, p, 4);
  return v;
}
int64_t rt_wire_get_i64(rt_wire_reader *r) {
  int64_t v = 0;
  const void *p = rt_wire_take(r, 8);
  if (p) memcpy(&v, p, 8);
  return v;
}
double rt_wire_get_f64(rt_wire_reader *r) {
  double v = 0;
  const void *p = rt_wire_take(r, 8);
  if (p) memcpy(&v, p, 8);
  return v;
}
const void *rt_wire_get_bytes(rt_wire_reader *r, size_t *n) {
  int64_t len = rt_wire_get_i64(r);
  *n = 0;
  if (len < 0) {
    r->bad = true;
    return NULL;
  }
  const void *p = rt_wire_take(r, (size_t)len);
  if (p) *n = (size_t)len;
  return p;
}
char *rt_wire_get_text(rt_wire_reader *r, dg_arena *a) {
  size_t n = 0;
  const char *p = rt_wire_get_bytes(r, &n);
  return p ? dg_arena_strndup(a, p, n) : dg_arena_strdup(a, "");
}
