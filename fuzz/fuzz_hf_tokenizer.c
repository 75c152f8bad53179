/* fuzz_hf_tokenizer.c: libFuzzer target for the tokenizer loaders: a
 * Hugging Face tokenizer.json (tok_load_hf, src/nn/hf_tokenizer.c) and
 * dragon's binary tokenizer file (tok_load, src/nn/tokenizer.c).
 *
 * The first byte of an input is a mode, the rest is the file: bit 0 clear,
 * tokenizer.json; set, the binary format. Nothing may crash or leak; a
 * refusal carries a message that starts with the path. An accepted
 * tokenizer must decode what it encodes back to the same bytes, and save
 * and reload (binary format) to a tokenizer with the same vocabulary that
 * encodes the same text to the same ids. tests/test_reliability.c replays
 * tests/fuzz/hf_tokenizer/.
 */
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "dragon/tokenizer.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static const char tok_sample[] = "for i in range(0, 128):\n  C[i] = A[i] * 2.5 + B[i]  # \xc3\xa9t\xc3\xa9\n";

/* Scratch files under $TMPDIR (or /tmp), one pair per process. */
static const char *tok_path(int which) {
  static char p[2][512];
  if (!p[which][0]) {
    const char *t = getenv("TMPDIR");
    snprintf(p[which], sizeof p[which], "%s/dragon-fuzz-tok-%ld-%d", t && *t ? t : "/tmp",
             (long)getpid(), which);
  }
  return p[which];
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (size < 1) return 0;
  const char *path = tok_path(0);
  FILE *f = fopen(path, "wb");
  DG_ASSERT(f && fwrite(data + 1, 1, size - 1, f) == size - 1 && fclose(f) == 0);
  dg_status st;
  tok_tokenizer *t = data[0] & 1 ? tok_load(path, &st) : tok_load_hf(path, &st);
  if (!t) {
    DG_ASSERT(st.code != DG_OK && strncmp(st.msg, path, strlen(path)) == 0);
    return 0;
  }
  tok_ids ids = {0};
  bool enc = tok_encode(t, tok_sample, sizeof tok_sample - 1, &ids, &st);
  if (enc) {
    dg_str back;
    dg_str_init(&back);
    DG_ASSERT(tok_decode(t, ids.data, ids.len, &back, &st));
    DG_ASSERT(back.len == sizeof tok_sample - 1 && memcmp(back.s, tok_sample, back.len) == 0);
    dg_str_free(&back);
  }
  const char *again = tok_path(1);
  DG_ASSERT(tok_save(t, again, &st));
  tok_tokenizer *u = tok_load(again, &st);
  if (!u) dg_panic(__FILE__, __LINE__, "a saved tokenizer does not load: %s", st.msg);
  DG_ASSERT(tok_vocab_size(u) == tok_vocab_size(t));
  tok_ids ids2 = {0};
  DG_ASSERT(tok_encode(u, tok_sample, sizeof tok_sample - 1, &ids2, &st) == enc);
  DG_ASSERT(ids2.len == ids.len && (!ids.len || memcmp(ids.data, ids2.data, 4 * ids.len) == 0));
  tok_ids_free(&ids);
  tok_ids_free(&ids2);
  tok_free(u);
  tok_free(t);
  return 0;
}
