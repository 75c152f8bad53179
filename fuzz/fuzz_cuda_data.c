/* fuzz_cuda_data.c: libFuzzer target for mapping a GPU job's data set
 * (rt_cuda_data_map; src/rt/cuda_data.c): the file the parent writes with
 * a workload's inputs, float64 reference outputs and their baselines, and
 * every measuring worker maps.
 *
 * The input is the file as it is. Nothing may crash or leak; a refused
 * file carries a message naming it; an accepted one is checked end to end
 * (every array it names is read: the inputs, each output's reference and
 * baseline), written back, and maps again to the same tensors, byte for
 * byte. tests/test_reliability.c replays tests/fuzz/cuda_data/.
 */
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "rt/cuda_api.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* Whether a and b hold the same tensors: names, dtypes, shapes, roles and
 * every array's bytes. */
static bool cuda_data_same(const rt_cuda_data *a, const rt_cuda_data *b) {
  if (a->K != b->K || a->ts.n != b->ts.n) return false;
  for (int i = 0; i < a->ts.n; i++) {
    const rt_tensor *x = &a->ts.t[i], *y = &b->ts.t[i];
    const dg_buffer *p = x->buf, *q = y->buf;
    if (strcmp(p->name, q->name) || p->dtype != q->dtype || p->ndim != q->ndim ||
        x->numel != y->numel || x->is_output != y->is_output || !x->base != !y->base)
      return false;
    for (int d = 0; d < p->ndim; d++)
      if (p->shape[d] != q->shape[d]) return false;
    size_t own = (size_t)x->numel * (size_t)dg_dtype_bytes(p->dtype);
    size_t ref = (size_t)x->numel * (dg_dtype_is_float(p->dtype) ? 8 : (size_t)dg_dtype_bytes(p->dtype));
    if (x->is_output ? memcmp(x->ref, y->ref, ref) || (x->base && memcmp(x->base, y->base, own))
                     : memcmp(x->data, y->data, own))
      return false;
  }
  return true;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  static char path[512], back[530]; /* under $TMPDIR (or /tmp), per process */
  if (!path[0]) {
    const char *t = getenv("TMPDIR");
    t = t && *t ? t : "/tmp";
    snprintf(path, sizeof path, "%s/dragon-fuzz-cuda-data-%ld.dat", t, (long)getpid());
    snprintf(back, sizeof back, "%s.back", path);
  }
  dg_status st;
  DG_ASSERT(dg_write_file_atomic(path, data, size, &st));
  rt_cuda_data m;
  memset(&m, 0, sizeof m);
  if (!rt_cuda_data_map(&m, path, &st)) {
    DG_ASSERT(st.code != DG_OK && strstr(st.msg, path));
    unlink(path);
    return 0;
  }
  /* the check reads every array the file names: the outputs as the
   * kernel left them (zeros), their references and baselines */
  for (int i = 0; i < m.ts.n; i++) {
    rt_tensor *t = &m.ts.t[i];
    if (t->is_output) memset(t->data, 0, (size_t)t->numel * (size_t)dg_dtype_bytes(t->buf->dtype));
  }
  rt_check chk;
  rt_check_outputs(&m.ts, m.K, &chk);
  int64_t sum = 0;
  for (int i = 0; i < m.ts.n; i++) {
    const rt_tensor *t = &m.ts.t[i];
    if (!t->is_output)
      for (int64_t k = 0; k < t->numel; k++) sum += (int64_t)(rt_data_get(t, k, false) != 0);
  }
  (void)sum;
  /* written back (outputs: the reference and the baseline), the same */
  for (int i = 0; i < m.ts.n; i++) m.ts.args[i] = m.ts.t[i].data;
  DG_ASSERT(rt_cuda_data_write(&m.ts, m.K, back, &st));
  rt_cuda_data n;
  memset(&n, 0, sizeof n);
  if (!rt_cuda_data_map(&n, back, &st)) dg_panic(__FILE__, __LINE__, "a written data set does not map: %s", st.msg);
  DG_ASSERT(cuda_data_same(&m, &n));
  rt_cuda_data_unmap(&n);
  rt_cuda_data_unmap(&m);
  unlink(back);
  unlink(path);
  return 0;
}
