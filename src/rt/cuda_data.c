/* cuda_data.c: the data a GPU job runs on.
 *
 * A data set file carries the inputs, the reference outputs and their
 * baselines from the parent to the workers: the reference (float64) and
 * the baseline (the unscheduled kernel in its own dtypes, which the check
 * allows a schedule's error a small factor of) are computed once per
 * workload on the CPU (rt_reference_run), and
 * written once (rt_cuda_data_write, through dg_write_parts_atomic: the
 * file is whole or absent, and a writer killed in the middle leaves only
 * its temporary NAME.tmp.PID, which dg_remove_stale_tmp removes); each
 * worker maps the file and keeps the mapping while the file (path, inode,
 * size, modification time) stays the same, each new mapping with a
 * generation of its own, which the worker's device buffers are keyed by
 * (cuda_job.c). A job without a data
 * set gets inputs drawn from its seed in the worker instead, and no check.
 * Either way the program's parameter buffers must match the tensors.
 */
#include "rt/cuda_api.h"

#include <fcntl.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

/* ---- data set files ------------------------------------------------------------ */

/* Layout: magic "DGCUDAT1", u32 version, u32 n, i64 K, header size u64;
 * per tensor: name (i64 length + bytes), i32 dtype, i32 ndim, i64
 * shape[ndim], i32 is_output, i64 numel, u64 offset and u64 bytes of its
 * array (inputs: the kernel's storage; outputs: the reference's), and for
 * an output u64 offset and u64 bytes of its baseline (the unscheduled
 * kernel's result in the kernel's storage; 0 bytes: none). Arrays follow
 * the header, each 64-byte aligned. */
static const char data_magic[8] = {'D', 'G', 'C', 'U', 'D', 'A', 'T', '1'};
enum { DATA_VERSION = 2 };

static size_t ref_elem_bytes(dg_dtype t) { return dg_dtype_is_float(t) ? 8 : (size_t)dg_dtype_bytes(t); }

static size_t align64(size_t x) { return (x + 63) & ~(size_t)63; }

/* The bytes of tensor t's array (which 0) and, for an output with a
 * baseline, of that (which 1). */
static size_t array_bytes(const rt_tensor *t, int which) {
  dg_dtype d = t->buf->dtype;
  if (which == 1) return t->is_output && t->base ? (size_t)t->numel * (size_t)dg_dtype_bytes(d) : 0;
  return (size_t)t->numel * (t->is_output ? ref_elem_bytes(d) : (size_t)dg_dtype_bytes(d));
}

static void data_header(const rt_tensors *ts, int64_t K, size_t hdr, dg_str *h) {
  dg_str_putn(h, data_magic, 8);
  rt_wire_put_i32(h, DATA_VERSION);
  rt_wire_put_i32(h, ts->n);
  rt_wire_put_i64(h, K);
  rt_wire_put_i64(h, (int64_t)hdr);
  size_t off = align64(hdr);
  for (int i = 0; i < ts->n; i++) {
    const rt_tensor *t = &ts->t[i];
    const dg_buffer *b = t->buf;
    rt_wire_put_text(h, b->name);
    rt_wire_put_i32(h, (int32_t)b->dtype);
    rt_wire_put_i32(h, b->ndim);
    for (int d = 0; d < b->ndim; d++) rt_wire_put_i64(h, b->shape[d]);
    rt_wire_put_i32(h, t->is_output);
    rt_wire_put_i64(h, t->numel);
    for (int w = 0; w < (t->is_output ? 2 : 1); w++) {
      size_t bytes = array_bytes(t, w);
      rt_wire_put_i64(h, (int64_t)off);
      rt_wire_put_i64(h, (int64_t)bytes);
      off = align64(off + bytes);
    }
  }
}

bool rt_cuda_data_write(const rt_tensors *ts, int64_t K, const char *path, dg_status *st) {
  dg_str h;
  dg_str_init(&h);
  data_header(ts, K, 0, &h);
  size_t hdr = h.len; /* offsets do not change the header's size */
  dg_str_clear(&h);
  data_header(ts, K, hdr, &h);
  DG_ASSERT(h.len == hdr);

  /* the header, then each array after its padding to 64 bytes, written
   * from where they are through the one atomic write: a worker maps a
   * whole data set or none, never a part of one */
  static const char zeros[64];
  /* the header, and a padding and an array for each input, two for each output */
  dg_part *parts = dg_malloc(sizeof *parts * (size_t)(1 + 4 * ts->n));
  parts[0] = (dg_part){h.s, h.len};
  int n_parts = 1;
  size_t at = h.len;
  for (int i = 0; i < ts->n; i++) {
    const rt_tensor *t = &ts->t[i];
    for (int w = 0; w < (t->is_output ? 2 : 1); w++) {
      size_t pad = align64(at) - at, bytes = array_bytes(t, w);
      const void *arr = w ? t->base : t->is_output ? t->ref : t->data;
      parts[n_parts++] = (dg_part){zeros, pad};
      parts[n_parts++] = (dg_part){arr, bytes};
      at += pad + bytes;
    }
  }
  bool ok = dg_write_parts_atomic(path, parts, n_parts, st);
  free(parts);
  dg_str_free(&h);
  return ok;
}

void rt_cuda_data_unmap(rt_cuda_data *m) {
  if (m->ts.t)
    for (int i = 0; i < m->ts.n; i++)
      if (m->ts.t[i].is_output) free(m->ts.t[i].data);
  if (m->map) munmap(m->map, m->map_len);
  if (m->arena) dg_arena_free(m->arena);
  memset(m, 0, sizeof *m);
}

bool rt_cuda_data_map(rt_cuda_data *m, const char *path, dg_status *st) {
  struct stat sb;
  if (stat(path, &sb) != 0) return dg_fail(st, DG_ERR_IO, "%s: no such data set", path);
  if (m->map && strcmp(m->path, path) == 0 && m->dev == sb.st_dev && m->ino == sb.st_ino &&
      m->size == sb.st_size && m->mtime.tv_sec == sb.st_mtim.tv_sec &&
      m->mtime.tv_nsec == sb.st_mtim.tv_nsec)
    return true;
  rt_cuda_data_unmap(m);
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return dg_fail(st, DG_ERR_IO, "%s: cannot open the data set", path);
  size_t len = (size_t)sb.st_size;
  void *map = len ? mmap(NULL, len, PROT_READ, MAP_PRIVATE, fd, 0) : MAP_FAILED;
  close(fd);
  if (map == MAP_FAILED) return dg_fail(st, DG_ERR_IO, "%s: cannot map the data set", path);
  m->map = map;
  m->map_len = len;
  m->arena = dg_arena_new();
  rt_wire_reader r = {map, len, 0, false};
  const char *magic = rt_wire_take(&r, 8);
  if (!magic || memcmp(magic, data_magic, 8) != 0 || rt_wire_get_i32(&r) != DATA_VERSION) {
    rt_cuda_data_unmap(m);
    return dg_fail(st, DG_ERR_PARSE, "%s: not a dragon data set (bad magic or version)", path);
  }
  int n = rt_wire_get_i32(&r);
  m->K = rt_wire_get_i64(&r);
  rt_wire_get_i64(&r);
  if (r.bad || n < 0 || n > 1 << 16) {
    rt_cuda_data_unmap(m);
    return dg_fail(st, DG_ERR_PARSE, "%s: corrupt header", path);
  }
  rt_tensors *ts = &m->ts;
  ts->n = n;
  ts->t = DG_ANEWN(m->arena, rt_tensor, n ? n : 1);
  ts->args = DG_ANEWN(m->arena, void *, n ? n : 1);
  ts->ref_args = DG_ANEWN(m->arena, void *, n ? n : 1);
  for (int i = 0; i < n && !r.bad; i++) {
    dg_buffer *b = DG_ANEW(m->arena, dg_buffer);
    b->name = rt_wire_get_text(&r, m->arena);
    int dt = rt_wire_get_i32(&r);
    b->ndim = rt_wire_get_i32(&r);
    if (dt < 0 || dt >= DG_DTYPE_COUNT || b->ndim < 0 || b->ndim > DG_MAX_DIMS) {
      r.bad = true;
      break;
    }
    b->dtype = (dg_dtype)dt;
    for (int d = 0; d < b->ndim; d++) b->shape[d] = rt_wire_get_i64(&r);
    rt_tensor *t = &ts->t[i];
    t->buf = b;
    t->is_output = rt_wire_get_i32(&r) != 0;
    t->numel = rt_wire_get_i64(&r);
    if (r.bad || t->numel < 0 || t->numel > ((int64_t)1 << 40)) {
      r.bad = true;
      break;
    }
    void *arr[2] = {NULL, NULL};
    for (int w = 0; w < (t->is_output ? 2 : 1) && !r.bad; w++) {
      int64_t off = rt_wire_get_i64(&r), bytes = rt_wire_get_i64(&r);
      size_t each = w == 0 && t->is_output ? ref_elem_bytes(b->dtype) : (size_t)dg_dtype_bytes(b->dtype);
      size_t want = (size_t)t->numel * each;
      /* a baseline is there whole or not at all */
      r.bad = r.bad || off < 0 || off % 64 != 0 || bytes < 0 ||
              ((size_t)bytes != want && !(w == 1 && bytes == 0)) ||
              (size_t)off > len || (size_t)bytes > len - (size_t)off;
      if (!r.bad && (w == 0 || bytes > 0)) arr[w] = (char *)map + off;
    }
    if (r.bad) break;
    size_t want = (size_t)t->numel * (size_t)dg_dtype_bytes(b->dtype);
    if (t->is_output) {
      t->ref = arr[0];
      t->base = arr[1];
      t->data = malloc(want ? want : 1);
      if (!t->data) {
        r.bad = true;
        break;
      }
    } else {
      t->data = arr[0];
      t->ref = NULL; /* inputs' references are not needed by the check */
    }
    ts->args[i] = t->data;
  }
  if (r.bad) {
    rt_cuda_data_unmap(m);
    return dg_fail(st, DG_ERR_PARSE, "%s: corrupt tensor table", path);
  }
  snprintf(m->path, sizeof m->path, "%s", path);
  m->dev = sb.st_dev;
  m->ino = sb.st_ino;
  m->size = sb.st_size;
  m->mtime = sb.st_mtim;
  static uint64_t last_gen;
  m->gen = ++last_gen;
  return true;
}

/* ---- inputs from the seed, and the program against the tensors ------------- */

/* Inputs drawn from the seed, for a job without a data set: one tensor per
 * parameter buffer of the program, as rt_data_fill fills them. */
bool rt_cuda_data_seeded(const rt_cuda_program *prog, uint64_t seed, dg_arena *a, rt_tensors *ts,
                         dg_status *st) {
  int n = 0;
  for (int b = 0; b < prog->n_bufs; b++)
    if (prog->bufs[b].param >= n) n = prog->bufs[b].param + 1;
  memset(ts, 0, sizeof *ts);
  ts->n = n;
  ts->t = DG_ANEWN(a, rt_tensor, n ? n : 1);
  ts->args = DG_ANEWN(a, void *, n ? n : 1);
  ts->ref_args = DG_ANEWN(a, void *, n ? n : 1);
  for (int b = 0; b < prog->n_bufs; b++) {
    const rt_cuda_buf *bf = &prog->bufs[b];
    if (bf->param < 0) continue;
    rt_tensor *t = &ts->t[bf->param];
    if (t->buf) return dg_fail(st, DG_ERR_INVALID, "program: two buffers for parameter %d", bf->param);
    dg_buffer *db = DG_ANEW(a, dg_buffer);
    db->name = bf->name ? bf->name : "?";
    db->dtype = bf->dtype;
    db->ndim = 1;
    db->shape[0] = bf->numel;
    t->buf = db;
    t->numel = bf->numel;
    t->is_output = bf->is_output;
    size_t n1 = (size_t)bf->numel * (size_t)dg_dtype_bytes(bf->dtype);
    size_t n2 = (size_t)bf->numel * ref_elem_bytes(bf->dtype);
    t->data = malloc(n1 ? n1 : 1);
    t->ref = malloc(n2 ? n2 : 1);
    if (!t->data || !t->ref) return dg_fail(st, DG_ERR_RUNTIME, "out of host memory for %s", db->name);
    ts->args[bf->param] = t->data;
  }
  for (int i = 0; i < n; i++)
    if (!ts->t[i].buf) return dg_fail(st, DG_ERR_INVALID, "program: no buffer for parameter %d", i);
  rt_data_fill(ts, seed, RT_DIST_UNIFORM);
  return true;
}

void rt_cuda_data_seeded_free(rt_tensors *ts) {
  for (int i = 0; i < ts->n; i++) {
    free(ts->t[i].data);
    free(ts->t[i].ref);
  }
}

/* The program's parameter buffers must match the data set's tensors. */
bool rt_cuda_data_matches(const rt_cuda_program *prog, const rt_tensors *ts, dg_status *st) {
  for (int b = 0; b < prog->n_bufs; b++) {
    const rt_cuda_buf *bf = &prog->bufs[b];
    if (bf->param < 0) continue;
    if (bf->param >= ts->n)
      return dg_fail(st, DG_ERR_INVALID, "buffer %s: parameter %d, the data set has %d", bf->name,
                     bf->param, ts->n);
    const rt_tensor *t = &ts->t[bf->param];
    if (t->buf->dtype != bf->dtype || t->numel != bf->numel || t->is_output != bf->is_output)
      return dg_fail(st, DG_ERR_INVALID,
                     "buffer %s: %s[%lld]%s in the program, %s %s[%lld]%s in the data set",
                     bf->name, dg_dtype_name(bf->dtype), (long long)bf->numel,
                     bf->is_output ? " output" : "", t->buf->name, dg_dtype_name(t->buf->dtype),
                     (long long)t->numel, t->is_output ? " output" : "");
  }
  return true;
}
