/* slots.c: the one open-addressing index (dg_slots, base.h) of the tables
 * that find an entry by its key among many: a vector the caller keeps,
 * and beside it slots holding positions + 1, at most half full, probed
 * linearly. The caller's keys decide where an entry goes and the caller's
 * comparison which of the probed entries is the one. */
#include <stdlib.h>

#include "dragon/base.h"

static void put(dg_slots *s, uint64_t key, size_t pos) {
  size_t mask = s->size - 1;
  size_t i = (size_t)key & mask;
  while (s->slot[i]) i = (i + 1) & mask;
  s->slot[i] = (int)pos + 1;
}

void dg_slots_add(dg_slots *s, size_t count, uint64_t key,
                  uint64_t (*key_of)(const void *ctx, size_t i), const void *ctx) {
  DG_ASSERT(count >= 1 && count < (size_t)1 << 30);
  if (2 * count <= s->size) {
    put(s, key, count - 1);
    return;
  }
  free(s->slot);
  s->size = s->size ? 2 * s->size : 64;
  while (2 * count > s->size) s->size *= 2;
  s->slot = dg_calloc(s->size, sizeof(int));
  for (size_t i = 0; i < count; i++) put(s, i + 1 == count ? key : key_of(ctx, i), i);
}

int dg_slots_next(const dg_slots *s, uint64_t key, size_t *step) {
  if (!s->size || *step >= s->size) return -1;
  int v = s->slot[((size_t)key + (*step)++) & (s->size - 1)];
  return v - 1; /* -1 at an empty slot */
}

void dg_slots_free(dg_slots *s) {
  free(s->slot);
  s->slot = NULL;
  s->size = 0;
}
