/* fuzz_splits.c: libFuzzer target for the splits file loader. An input
 * that begins with zstd's frame magic is fed to data_splits_parse as it is
 * (the stream checks: truncation, corruption, the size cap); anything else
 * is compressed first, so that the fuzzer works on the text (header, lines,
 * fields, specs). Nothing may crash, every refusal must carry a message,
 * and an accepted table prints to a text that parses to the same text.
 * tests/test_data_split.c replays the inputs kept in tests/fuzz/splits/
 * the same way. */
#include <stdlib.h>
#include <string.h>
#include <zstd.h>

#include "dragon/data.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static data_splits *parse_packed(const void *text, size_t n, dg_status *st) {
  size_t cap = ZSTD_compressBound(n);
  char *z = malloc(cap);
  if (!z) return NULL;
  size_t zn = ZSTD_compress(z, cap, text, n, 1);
  DG_ASSERT(!ZSTD_isError(zn));
  data_splits *t = data_splits_parse(z, zn, "fuzz.tsv.zst", st);
  free(z);
  return t;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  static const uint8_t zmagic[4] = {0x28, 0xb5, 0x2f, 0xfd};
  dg_status st;
  st.msg[0] = 0;
  data_splits *t = size >= 4 && memcmp(data, zmagic, 4) == 0
                       ? data_splits_parse(data, size, "fuzz.tsv.zst", &st)
                       : parse_packed(data, size, &st);
  if (!t) {
    DG_ASSERT(st.code != DG_OK && st.msg[0] != 0);
    return 0;
  }
  size_t n;
  char *text = data_splits_text(t, &n);
  data_splits *u = parse_packed(text, n, &st);
  DG_ASSERT(u != NULL);
  DG_ASSERT(data_splits_count(u) == data_splits_count(t));
  char *text2 = data_splits_text(u, NULL);
  DG_ASSERT(strcmp(text, text2) == 0);
  for (int64_t i = 0; i < data_splits_count(t); i++)
    DG_ASSERT(data_splits_find(t, data_splits_at(t, i)->spec) == data_splits_at(t, i));
  free(text2);
  free(text);
  data_splits_free(u);
  data_splits_free(t);
  return 0;
}
