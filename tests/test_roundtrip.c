/* test_roundtrip.c: every workload prints to kernel text that parses back
 * to the same kernel and reprints byte for byte: all families' examples,
 * all 52 MetaSchedule aliases, and 2,000 generated workloads. */
#include <stdlib.h>

#include "dragon/wl.h"
#include "test.h"

static bool roundtrip(const char *spec, char *why, size_t n) {
  dg_status st;
  dg_func *f = wl_build(spec, &st);
  if (!f) {
    snprintf(why, n, "%s: %s", spec, st.msg);
    return false;
  }
  bool ok = ir_verify(f, &st);
  if (!ok) snprintf(why, n, "%s: verify: %s", spec, st.msg);
  char *t1 = ok ? ir_print(f) : NULL;
  dg_func *g = ok ? ir_parse(t1, spec, &st) : NULL;
  if (ok && !g) {
    snprintf(why, n, "%s: reparse: %s", spec, st.msg);
    ok = false;
  }
  char *t2 = g ? ir_print(g) : NULL;
  if (ok && strcmp(t1, t2) != 0) {
    snprintf(why, n, "%s: reprint differs", spec);
    ok = false;
  }
  if (ok && !ir_func_equal_explain(f, g, why, n)) ok = false;
  if (ok && ir_func_hash(f) != ir_func_hash(g)) {
    snprintf(why, n, "%s: hash differs after reparse", spec);
    ok = false;
  }
  free(t1);
  free(t2);
  ir_func_free(f);
  ir_func_free(g);
  return ok;
}

DG_TEST(roundtrip_families_and_aliases) {
  char why[600];
  for (int i = 0; i < wl_family_count(); i++)
    CHECK_MSG(roundtrip(wl_family_example(i), why, sizeof why), "%s", why);
  for (int i = 0; i < wl_alias_count(); i++)
    for (int c = 0; c < 4; c++) {
      char spec[64];
      snprintf(spec, sizeof spec, "%s/%d", wl_alias_name(i), c);
      CHECK_MSG(roundtrip(spec, why, sizeof why), "%s", why);
    }
}

typedef struct {
  char **v;
  int n;
} list;

static void add(const char *s, void *ctx) {
  list *l = ctx;
  l->v = dg_realloc(l->v, sizeof(char *) * (size_t)(l->n + 1));
  l->v[l->n++] = dg_strdup(s);
}

DG_TEST(roundtrip_generated) {
  list l = {NULL, 0};
  dg_status st;
  CHECK(wl_generate(2024, 2000, NULL, add, &l, &st));
  CHECK_EQ(l.n, 2000);
  char why[600];
  bool ok = true;
  for (int i = 0; i < l.n && ok; i++) {
    ok = roundtrip(l.v[i], why, sizeof why);
    if (!ok) dg_test_fail(__FILE__, __LINE__, "%s", why);
  }
  for (int i = 0; i < l.n; i++) free(l.v[i]);
  free(l.v);
}

DG_TEST(roundtrip_show_cli) {
  /* ./dragon show X | ./dragon show - reproduces the text byte for byte */
  const char *specs[] = {"C2D/0", "SFM/1", "CBR/3", "TBG/2", "rope:b=1,s=32,h=4,d=64,dtype=f16"};
  for (size_t i = 0; i < DG_ARRAY_LEN(specs); i++) {
    char args[128], *a = NULL, *b = NULL;
    snprintf(args, sizeof args, "show %s", specs[i]);
    int rc = dg_test_run_dragon(args, NULL, &a);
    CHECK_MSG(rc == 0, "%s: %s", specs[i], a);
    rc = dg_test_run_dragon("show -", a, &b);
    CHECK_MSG(rc == 0 && strcmp(a, b) == 0, "%s: show - differs:\n%s\n---\n%s", specs[i], a, b);
    free(a);
    free(b);
  }
}
