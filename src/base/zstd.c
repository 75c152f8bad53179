/* zstd.c: the one pair of zstd helpers every compressed file goes through
 * (shards of records, splits, examples): one frame with zstd's content
 * checksum at a given level, and a reader of every frame of a buffer that
 * names the file in its errors and refuses a stream that is empty, not
 * zstd, corrupt, truncated or larger than a limit once decompressed.
 * Single-threaded compression, so the same bytes give the same file.
 * dg_read_text reads a file that may be either: zstd (known by its frame
 * magic) is unpacked, anything else is returned as it is. */
#include <string.h>
#include <zstd.h>

#include "dragon/base.h"

bool dg_zstd_pack(const void *data, size_t n, int level, dg_str *out, dg_status *st) {
  size_t cap = ZSTD_compressBound(n);
  char *z = dg_malloc(cap ? cap : 1);
  ZSTD_CCtx *cx = ZSTD_createCCtx();
  DG_ASSERT(cx != NULL);
  ZSTD_CCtx_setParameter(cx, ZSTD_c_compressionLevel, level);
  ZSTD_CCtx_setParameter(cx, ZSTD_c_checksumFlag, 1);
  size_t zn = ZSTD_compress2(cx, z, cap, data, n);
  ZSTD_freeCCtx(cx);
  bool ok = !ZSTD_isError(zn);
  if (ok) dg_str_putn(out, z, zn);
  else dg_fail(st, DG_ERR_RUNTIME, "zstd: %s", ZSTD_getErrorName(zn));
  free(z);
  return ok;
}

char *dg_zstd_unpack(const void *bytes, size_t n, const char *name, size_t max_len, size_t *len,
                     dg_status *st) {
  static const unsigned char zmagic[4] = {0x28, 0xb5, 0x2f, 0xfd};
  if (n == 0) {
    dg_fail(st, DG_ERR_PARSE, "%s: empty file", name);
    return NULL;
  }
  if (n < 4 || memcmp(bytes, zmagic, 4) != 0) {
    dg_fail(st, DG_ERR_PARSE, "%s: not a zstd stream (bad frame magic)", name);
    return NULL;
  }
  ZSTD_DCtx *dx = ZSTD_createDCtx();
  DG_ASSERT(dx != NULL);
  dg_str out;
  dg_str_init(&out);
  ZSTD_inBuffer in = {bytes, n, 0};
  size_t ret = 0;
  char buf[1 << 16];
  bool ok = true;
  /* stop when the input is used up and the frame gives no more output */
  for (;;) {
    ZSTD_outBuffer o = {buf, sizeof buf, 0};
    ret = ZSTD_decompressStream(dx, &o, &in);
    if (ZSTD_isError(ret)) {
      ok = dg_fail(st, DG_ERR_PARSE, "%s: corrupt zstd stream: %s", name, ZSTD_getErrorName(ret));
      break;
    }
    if (max_len && out.len + o.pos > max_len) {
      ok = dg_fail(st, DG_ERR_PARSE, "%s: more than %zu MiB uncompressed", name, max_len >> 20);
      break;
    }
    dg_str_putn(&out, buf, o.pos);
    if (in.pos == in.size && o.pos < o.size) break;
  }
  ZSTD_freeDCtx(dx);
  if (ok && ret != 0) ok = dg_fail(st, DG_ERR_PARSE, "%s: truncated zstd stream", name);
  if (!ok) {
    dg_str_free(&out);
    return NULL;
  }
  if (!out.s) dg_str_puts(&out, "");
  *len = out.len;
  return dg_str_take(&out);
}

char *dg_read_text(const char *path, size_t max_len, size_t *len, dg_status *st) {
  static const unsigned char zmagic[4] = {0x28, 0xb5, 0x2f, 0xfd};
  size_t n;
  char *bytes = dg_read_file(path, &n, st);
  if (!bytes || n < 4 || memcmp(bytes, zmagic, 4) != 0) {
    if (bytes && max_len && n > max_len) {
      free(bytes);
      dg_fail(st, DG_ERR_PARSE, "%s: more than %zu MiB", path, max_len >> 20);
      return NULL;
    }
    if (bytes) *len = n;
    return bytes;
  }
  char *text = dg_zstd_unpack(bytes, n, path, max_len, len, st);
  free(bytes);
  return text;
}
