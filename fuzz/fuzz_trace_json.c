/* fuzz_trace_json.c: libFuzzer target for the trace JSON loader and replay.
 * Arbitrary bytes (cut at the first NUL) go to sched_trace_from_json; a
 * refusal must carry a message; an accepted trace must re-serialize to
 * JSON that reads back to an equal trace, and replaying it on a small
 * kernel must either succeed or fail with a message, never crash. */
#include <stdlib.h>
#include <string.h>

#include "dragon/sched.h"
#include "dragon/wl.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static dg_func *kernel;

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (!kernel) {
    dg_status st;
    kernel = wl_build("batch_matmul:b=1,n=16,m=16,k=16,dtype=f32", &st);
    DG_ASSERT(kernel);
  }
  char *s = malloc(size + 1);
  if (!s) return 0;
  memcpy(s, data, size);
  s[size] = 0;
  dg_status st;
  sched_trace *t = sched_trace_from_json(s, &st);
  if (!t) {
    DG_ASSERT(st.code != DG_OK && st.msg[0] != 0);
  } else {
    char *js = sched_trace_to_json(t);
    sched_trace *t2 = sched_trace_from_json(js, &st);
    DG_ASSERT(t2 != NULL && sched_trace_equal(t, t2));
    char *js2 = sched_trace_to_json(t2);
    DG_ASSERT(strcmp(js, js2) == 0);
    if (t->n <= 64) {
      sched *sc = sched_new(kernel, 1);
      if (!sched_replay(sc, t, false, false, &st)) DG_ASSERT(st.msg[0] != 0);
      sched_free(sc);
    }
    free(js);
    free(js2);
    sched_trace_free(t2);
    sched_trace_free(t);
  }
  free(s);
  return 0;
}
