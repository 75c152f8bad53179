/* fuzz_checkpoint.c: libFuzzer target for the model checkpoint and
 * optimizer state loaders (src/nn/checkpoint.c).
 *
 * The first byte of an input is a mode, the rest is the file. Mode bit 0:
 * a model checkpoint (0) or an optimizer state file (1), loaded into a
 * training model of a small fixed config. Bit 1: the harness rewrites the
 * data and header checksums first, so that mutations reach the checks
 * behind them (config, counts, sizes) instead of stopping at a checksum.
 * Nothing may crash or leak; every refusal carries a message that starts
 * with the file's path; an accepted checkpoint saves and reloads to the
 * same parameters. tests/test_reliability.c replays tests/fuzz/checkpoint/.
 */
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "dragon/nn.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

enum { CKPT_HDR_BYTES = 1024, CKPT_SUM = 15, CKPT_HDRSUM = 255 };

/* The small model the state files are loaded into. */
static const nn_config ckpt_micro = {8, 4, 1, 1, 1, 4, 4, 8, 10000.0f, 1e-5f};

static void ckpt_put64(int32_t *h, int slot, uint64_t v) {
  h[slot] = (int32_t)(uint32_t)v;
  h[slot + 1] = (int32_t)(uint32_t)(v >> 32);
}

/* The checksums as checkpoint.c computes them, over whatever follows the
 * header. */
static void ckpt_fix_sums(uint8_t *file, size_t n, bool state) {
  if (n < CKPT_HDR_BYTES) return;
  int32_t h[256];
  memcpy(h, file, CKPT_HDR_BYTES);
  const uint8_t *body = file + CKPT_HDR_BYTES;
  size_t len = n - CKPT_HDR_BYTES;
  if (state) {
    size_t half = len / 8 * 4;
    ckpt_put64(h, CKPT_SUM, dg_hash_bytes(body + half, half, dg_hash_bytes(body, half, 1)));
  } else {
    ckpt_put64(h, CKPT_SUM, dg_hash_bytes(body, len / 4 * 4, 0));
  }
  h[CKPT_HDRSUM] = (int32_t)(uint32_t)dg_hash_bytes(h, 4 * CKPT_HDRSUM, 0x6468);
  memcpy(file, h, CKPT_HDR_BYTES);
}

/* Scratch files under $TMPDIR (or /tmp), one pair per process. */
static const char *ckpt_path(int which) {
  static char p[2][512];
  if (!p[which][0]) {
    const char *t = getenv("TMPDIR");
    snprintf(p[which], sizeof p[which], "%s/dragon-fuzz-ckpt-%ld-%d", t && *t ? t : "/tmp",
             (long)getpid(), which);
  }
  return p[which];
}

static void ckpt_write(const char *path, const void *d, size_t n) {
  FILE *f = fopen(path, "wb");
  DG_ASSERT(f);
  DG_ASSERT(fwrite(d, 1, n, f) == n);
  DG_ASSERT(fclose(f) == 0);
}

static void ckpt_refused(const dg_status *st, const char *path) {
  DG_ASSERT(st->code != DG_OK && strncmp(st->msg, path, strlen(path)) == 0);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (size < 1) return 0;
  int mode = data[0];
  size_t n = size - 1;
  uint8_t *file = malloc(n ? n : 1);
  if (!file) return 0;
  memcpy(file, data + 1, n);
  bool state = mode & 1;
  if (mode & 2) ckpt_fix_sums(file, n, state);
  const char *path = ckpt_path(0);
  ckpt_write(path, file, n);
  free(file);
  dg_status st;
  if (state) {
    nn_model m;
    DG_ASSERT(nn_model_init(&m, &ckpt_micro, true, &st));
    int64_t step = -7;
    if (nn_state_load(&m, path, &step, NULL, &st)) {
      DG_ASSERT(step >= 0);
    } else {
      ckpt_refused(&st, path);
      DG_ASSERT(step == -7);
    }
    nn_model_free(&m);
  } else {
    nn_config cfg;
    bool cfg_ok = nn_checkpoint_read_config(path, &cfg, &st);
    if (!cfg_ok) ckpt_refused(&st, path);
    nn_model m;
    if (!nn_checkpoint_load(&m, path, false, &st)) {
      ckpt_refused(&st, path);
      return 0;
    }
    DG_ASSERT(cfg_ok && memcmp(&cfg, &m.cfg, sizeof cfg) == 0);
    const char *again = ckpt_path(1);
    DG_ASSERT(nn_checkpoint_save(&m, again, &st));
    nn_model r;
    DG_ASSERT(nn_checkpoint_load(&r, again, false, &st));
    DG_ASSERT(r.num_params == m.num_params &&
              memcmp(r.params_mem, m.params_mem, sizeof(float) * m.num_params) == 0);
    nn_model_free(&r);
    nn_model_free(&m);
  }
  return 0;
}
