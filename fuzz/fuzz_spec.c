/* fuzz_spec.c: libFuzzer target for workload specs. Feeds arbitrary bytes
 * (cut at the first NUL) to wl_canonical and wl_build; neither may crash,
 * every refusal must carry a message, and the canonical form must be a
 * fixed point that builds the same kernel as the input. Kernels are built
 * only for accepted specs, which WL_MAX_BYTES keeps small enough in IR. */
#include <stdlib.h>
#include <string.h>

#include "dragon/wl.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  char *s = malloc(size + 1);
  if (!s) return 0;
  memcpy(s, data, size);
  s[size] = 0;
  dg_status st;
  char *c = wl_canonical(s, &st);
  if (!c) {
    DG_ASSERT(st.code != DG_OK && st.msg[0] != 0);
    DG_ASSERT(wl_build(s, &st) == NULL);
  } else {
    char *c2 = wl_canonical(c, &st);
    DG_ASSERT(c2 != NULL && strcmp(c, c2) == 0);
    dg_func *f = wl_build(s, &st);
    dg_func *g = wl_build(c, &st);
    DG_ASSERT(f != NULL && g != NULL);
    char *pf = ir_print(f), *pg = ir_print(g);
    DG_ASSERT(strcmp(pf, pg) == 0);
    free(pf);
    free(pg);
    ir_func_free(f);
    ir_func_free(g);
    free(c2);
  }
  free(c);
  free(s);
  return 0;
}
