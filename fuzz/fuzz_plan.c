/* fuzz_plan.c: libFuzzer target for reading a plan compiled ahead
 * (data_plan_parse, data_plan_load; src/data/plan.c).
 *
 * An input that begins with zstd's frame magic is a part file as it is
 * (written to a scratch plan directory and loaded: the stream checks);
 * anything else is a part file's unpacked bytes (the items: tags, lengths,
 * the workload and candidate JSON). Nothing may crash or leak; a refused
 * input carries a message naming it and adds nothing; an accepted one
 * writes back as a part file that loads again to the same entries, byte
 * for byte. tests/test_reliability.c replays tests/fuzz/plan/.
 */
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "dragon/data.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static bool plan_same(const data_plan *a, const data_plan *b) {
  if (data_plan_count(a) != data_plan_count(b)) return false;
  for (int i = 0; i < data_plan_count(a); i++) {
    const data_plan_entry *x = data_plan_at(a, i), *y = data_plan_at(b, i);
    if (strcmp(x->workload, y->workload) || strcmp(x->spec, y->spec) || strcmp(x->arch, y->arch) ||
        strcmp(x->build, y->build) || strcmp(x->date, y->date) || x->n != y->n)
      return false;
    for (int c = 0; c < x->n; c++) {
      const data_plan_cand *p = &x->cands[c], *q = &y->cands[c];
      if (strcmp(p->trace, q->trace) || strcmp(p->source, q->source) ||
          p->kernel_hash != q->kernel_hash || p->image_len != q->image_len ||
          memcmp(p->image, q->image, p->image_len))
        return false;
    }
  }
  return true;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  static char dir[512], part[600]; /* under $TMPDIR (or /tmp), per process */
  if (!dir[0]) {
    const char *t = getenv("TMPDIR");
    t = t && *t ? t : "/tmp";
    snprintf(dir, sizeof dir, "%s/dragon-fuzz-plan-%ld", t, (long)getpid());
    snprintf(part, sizeof part, "%s/plan-fuzz-0000.zst", dir);
  }
  mkdir(dir, 0755);
  unlink(part);
  static const uint8_t zmagic[4] = {0x28, 0xb5, 0x2f, 0xfd};
  dg_status st;
  data_plan *p = NULL;
  if (size >= 4 && memcmp(data, zmagic, 4) == 0) {
    DG_ASSERT(dg_write_file_atomic(part, data, size, &st));
    p = data_plan_load(dir, false, &st);
  } else {
    p = data_plan_load(dir, false, &st); /* an empty plan */
    DG_ASSERT(p && data_plan_count(p) == 0);
    if (!data_plan_parse("input", data, size, p, &st)) {
      DG_ASSERT(data_plan_count(p) == 0);
      data_plan_free(p);
      p = NULL;
    }
  }
  if (!p) {
    DG_ASSERT(st.code != DG_OK && st.msg[0]);
    unlink(part);
    return 0;
  }
  /* written back and read again: the same entries */
  int n = data_plan_count(p);
  const data_plan_entry **e = malloc(sizeof *e * (size_t)(n ? n : 1));
  for (int i = 0; i < n; i++) e[i] = data_plan_at(p, i);
  unlink(part);
  DG_ASSERT(data_plan_write(part, e, n, &st));
  free(e);
  data_plan *q = data_plan_load(dir, false, &st);
  if (!q) dg_panic(__FILE__, __LINE__, "a written plan does not load: %s", st.msg);
  DG_ASSERT(plan_same(p, q));
  data_plan_free(q);
  data_plan_free(p);
  unlink(part);
  return 0;
}
