/* fuzz_tsel_prefix.c: libFuzzer target for the prefix checker of
 * constrained decoding (src/tsel/prefix.c), on a fixed GMM kernel. The
 * input is fed after the forced header in pieces (the first byte picks the
 * piece length), as a model's tokens would come. Invariants: nothing
 * crashes; a refused piece leaves the checker as it was (its text
 * unchanged); whatever the checker has read can be completed
 * (tsel_prefix_completion feeds back and ends a graph: no dead end), and
 * every graph it calls complete parses and passes tsel_check. */
#include <stdlib.h>
#include <string.h>

#include "dragon/tsel.h"
#include "dragon/wl.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* A complete graph's text passes the real parser and checker. */
static void check_complete(const tsel_prefix *p, const dg_func *kernel) {
  size_t len;
  const char *text = tsel_prefix_text(p, &len);
  char *copy = malloc(len + 1);
  DG_ASSERT(copy);
  memcpy(copy, text, len);
  copy[len] = 0;
  dg_status st;
  tsel_graph *g = tsel_parse(copy, "fuzz.tsel", &st);
  DG_ASSERT(g != NULL);
  DG_ASSERT(tsel_check(g, kernel, TSEL_TARGET_CUDA, &st));
  tsel_graph_free(g);
  free(copy);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  static dg_func *kernel;
  static char *spec;
  dg_status st;
  if (!kernel) {
    kernel = wl_build("GMM/0", &st);
    spec = wl_canonical("GMM/0", &st);
  }
  DG_ASSERT(kernel && spec);
  if (size == 0) return 0;
  size_t piece = 1 + data[0] % 16;
  data++;
  size--;
  tsel_prefix *p = tsel_prefix_new(kernel, spec, TSEL_TARGET_CUDA, &st);
  DG_ASSERT(p);
  const char *forced = tsel_prefix_forced(p);
  DG_ASSERT(tsel_prefix_feed(p, forced, strlen(forced)));
  for (size_t at = 0; at < size; at += piece) {
    size_t n = size - at < piece ? size - at : piece;
    size_t before;
    tsel_prefix_text(p, &before);
    if (!tsel_prefix_feed(p, (const char *)data + at, n)) {
      size_t after;
      tsel_prefix_text(p, &after);
      DG_ASSERT(after == before);
    }
    if (tsel_prefix_complete(p)) check_complete(p, kernel);
  }
  /* no dead end: the checker's completion ends a graph that checks */
  dg_str fin;
  dg_str_init(&fin);
  DG_ASSERT(tsel_prefix_completion(p, &fin));
  DG_ASSERT(tsel_prefix_feed(p, fin.s ? fin.s : "", fin.len));
  DG_ASSERT(tsel_prefix_complete(p));
  check_complete(p, kernel);
  dg_str_free(&fin);
  tsel_prefix_free(p);
  return 0;
}
