/* fuzz_token_shard.c: libFuzzer target for the token shard loader
 * (train_shard_load, src/train/data.c).
 *
 * The first byte of an input is a mode, the rest is the file. Mode bit 0:
 * the harness rewrites the data checksum (over the arrays the header's
 * counts describe, where the file holds them) and the header checksum
 * first, so that mutations reach the checks behind them: counts, sizes,
 * offsets, ids and segments. Nothing may crash or leak; a refusal carries
 * a message that starts with the path; an accepted shard saves and
 * reloads to the same arrays. tests/test_reliability.c replays
 * tests/fuzz/token_shard/.
 */
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "dragon/train.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

enum { SHARD_HDR_BYTES = 1024, SHARD_NEX = 2, SHARD_NTOK = 4, SHARD_DATASUM = 8, SHARD_HDRSUM = 255 };

static uint64_t shard_get64(const int32_t *h, int slot) {
  return (uint64_t)(uint32_t)h[slot] | (uint64_t)(uint32_t)h[slot + 1] << 32;
}

static void shard_put64(int32_t *h, int slot, uint64_t v) {
  h[slot] = (int32_t)(uint32_t)v;
  h[slot + 1] = (int32_t)(uint32_t)(v >> 32);
}

/* The checksums as data.c computes them. */
static void shard_fix_sums(uint8_t *file, size_t n) {
  if (n < SHARD_HDR_BYTES) return;
  int32_t h[256];
  memcpy(h, file, SHARD_HDR_BYTES);
  uint64_t ne = shard_get64(h, SHARD_NEX), nt = shard_get64(h, SHARD_NTOK);
  size_t body = n - SHARD_HDR_BYTES;
  if (ne < body && nt < body && 8 * (ne + 1) + 5 * nt <= body) {
    const uint8_t *off = file + SHARD_HDR_BYTES, *tok = off + 8 * (ne + 1), *seg = tok + 4 * nt;
    uint64_t s = dg_hash_bytes(off, 8 * (ne + 1), 0x5348);
    s = dg_hash_bytes(tok, 4 * nt, s);
    shard_put64(h, SHARD_DATASUM, dg_hash_bytes(seg, nt, s));
  }
  h[SHARD_HDRSUM] = (int32_t)(uint32_t)dg_hash_bytes(h, 4 * SHARD_HDRSUM, 0x5348);
  memcpy(file, h, SHARD_HDR_BYTES);
}

/* Scratch files under $TMPDIR (or /tmp), one pair per process. */
static const char *shard_path(int which) {
  static char p[2][512];
  if (!p[which][0]) {
    const char *t = getenv("TMPDIR");
    snprintf(p[which], sizeof p[which], "%s/dragon-fuzz-shard-%ld-%d", t && *t ? t : "/tmp",
             (long)getpid(), which);
  }
  return p[which];
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (size < 1) return 0;
  size_t n = size - 1;
  uint8_t *file = malloc(n ? n : 1);
  if (!file) return 0;
  memcpy(file, data + 1, n);
  if (data[0] & 1) shard_fix_sums(file, n);
  const char *path = shard_path(0);
  FILE *f = fopen(path, "wb");
  DG_ASSERT(f && fwrite(file, 1, n, f) == n && fclose(f) == 0);
  free(file);
  dg_status st;
  train_shard s;
  if (!train_shard_load(&s, path, &st)) {
    DG_ASSERT(st.code != DG_OK && strncmp(st.msg, path, strlen(path)) == 0);
    return 0;
  }
  DG_ASSERT(s.offsets[0] == 0 && s.offsets[s.n_examples] == s.n_tokens);
  const char *again = shard_path(1);
  DG_ASSERT(train_shard_save(&s, again, &st));
  train_shard r;
  DG_ASSERT(train_shard_load(&r, again, &st));
  DG_ASSERT(r.n_examples == s.n_examples && r.n_tokens == s.n_tokens &&
            r.vocab_size == s.vocab_size);
  DG_ASSERT(memcmp(r.offsets, s.offsets, sizeof(int64_t) * (size_t)(s.n_examples + 1)) == 0);
  DG_ASSERT(memcmp(r.tokens, s.tokens, sizeof(int32_t) * (size_t)s.n_tokens) == 0);
  DG_ASSERT(memcmp(r.segs, s.segs, (size_t)s.n_tokens) == 0);
  train_shard_free(&r);
  train_shard_free(&s);
  return 0;
}
