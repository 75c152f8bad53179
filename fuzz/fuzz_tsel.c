/* fuzz_tsel.c: libFuzzer target for the TSEL parser, checker, lower and
 * lift. Feeds arbitrary bytes (cut at the first NUL) to tsel_parse; none of
 * the stages may crash, every refusal must carry a message, printing is a
 * fixed point (print(parse(print(G))) == print(G)), the kernel-free checker
 * accepts exactly what lower accepts, the semantic checker runs on a fixed
 * GMM kernel, and a lowered trace lifts and lowers back to the same JSON.
 * tests/test_tsel.c replays the saved inputs in tests/fuzz/tsel/ with the
 * same invariants. */
#include <stdlib.h>
#include <string.h>

#include "dragon/search.h"
#include "dragon/tsel.h"
#include "dragon/wl.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  static dg_func *kernel;
  dg_status st;
  if (!kernel) {
    tsel_set_postprocessor(search_postproc_cuda, NULL);
    kernel = wl_build("GMM/0", &st);
  }
  DG_ASSERT(kernel);
  char *s = malloc(size + 1);
  if (!s) return 0;
  memcpy(s, data, size);
  s[size] = 0;
  tsel_graph *g = tsel_parse(s, "fuzz.tsel", &st);
  if (!g) {
    DG_ASSERT(st.code != DG_OK && st.msg[0] != 0);
    free(s);
    return 0;
  }
  char *p = tsel_print(g);
  tsel_graph *g2 = tsel_parse(p, NULL, &st);
  DG_ASSERT(g2 != NULL);
  char *p2 = tsel_print(g2);
  DG_ASSERT(strcmp(p, p2) == 0);
  bool ok = tsel_check(g, NULL, TSEL_TARGET_CUDA, &st);
  DG_ASSERT(ok || st.msg[0] != 0);
  sched_trace *t = tsel_lower(g, &st);
  DG_ASSERT(ok == (t != NULL));
  if (t) {
    if (!tsel_check(g, kernel, TSEL_TARGET_CUDA, &st)) DG_ASSERT(st.msg[0] != 0);
    tsel_check(g, kernel, TSEL_TARGET_CPU, &st);
    tsel_graph *l = tsel_lift(t, "x", NULL, NULL, &st);
    DG_ASSERT(l != NULL);
    sched_trace *t2 = tsel_lower(l, &st);
    DG_ASSERT(t2 != NULL);
    char *a = sched_trace_to_json(t), *b = sched_trace_to_json(t2);
    DG_ASSERT(strcmp(a, b) == 0);
    free(a);
    free(b);
    sched_trace_free(t2);
    tsel_graph_free(l);
    sched_trace_free(t);
  }
  free(p);
  free(p2);
  tsel_graph_free(g);
  tsel_graph_free(g2);
  free(s);
  return 0;
}
