/* fuzz_kernel_text.c: libFuzzer target for the kernel text parser.
 *
 * Any input: parsing must not crash, leak or hang. An input that parses
 * must print canonically: print, reparse, reprint gives the same text and a
 * structurally equal kernel. Embedded NUL bytes end the text, as they do
 * for ir_parse's callers.
 */
#include <stdlib.h>
#include <string.h>

#include "dragon/ir.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  char *text = malloc(size + 1);
  if (!text) return 0;
  memcpy(text, data, size);
  text[size] = 0;
  dg_status st;
  dg_func *f = ir_parse(text, "fuzz.kt", &st);
  free(text);
  if (!f) {
    DG_ASSERT(st.code == DG_ERR_PARSE && strncmp(st.msg, "fuzz.kt:", 8) == 0);
    return 0;
  }
  char *p1 = ir_print(f);
  dg_func *g = ir_parse(p1, "reprint.kt", &st);
  if (!g) dg_panic(__FILE__, __LINE__, "reprint does not parse: %s\n%s", st.msg, p1);
  char *p2 = ir_print(g);
  if (strcmp(p1, p2) != 0) dg_panic(__FILE__, __LINE__, "print is not stable:\n%s---\n%s", p1, p2);
  char why[256];
  if (!ir_func_equal_explain(f, g, why, sizeof why))
    dg_panic(__FILE__, __LINE__, "reparse is not structurally equal: %s\n%s", why, p1);
  free(p1);
  free(p2);
  ir_func_free(f);
  ir_func_free(g);
  return 0;
}
