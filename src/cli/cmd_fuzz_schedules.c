/* cmd_fuzz_schedules.c: `dragon fuzz-schedules --count N --seed S`: random
 * schedules (sched_random_steps) of random small workloads of every family,
 * each checked three ways: the verifier accepts the scheduled kernel, it
 * computes what the unscheduled kernel computes (float64 reference, fresh
 * inputs), and its trace -> JSON -> replay gives a structurally equal kernel.
 * Prints `N schedules, K checked, M mismatches`; exits 1 on any mismatch. */
#include <string.h>

#include "cli/cli.h"
#include "dragon/rt.h"
#include "dragon/wl.h"

typedef struct {
  char **specs;
  int n, cap;
} spec_pool;

static void pool_add(const char *spec, void *ctx) {
  spec_pool *p = ctx;
  if (p->n == p->cap) {
    p->cap = p->cap ? 2 * p->cap : 64;
    p->specs = dg_realloc(p->specs, sizeof(char *) * (size_t)p->cap);
  }
  p->specs[p->n++] = dg_strdup(spec);
}

/* A smaller workload of the same family: halves the largest numeric value
 * of the spec that still gives a valid workload, until the kernel is within
 * the work limit. NULL if no such shrinking works. Caller frees. */
static char *shrink_spec(const char *spec, int64_t max_iters) {
  char *cur = dg_strdup(spec);
  for (int round = 0; round < 200; round++) {
    dg_status st;
    dg_func *f = wl_build(cur, &st);
    if (!f) break;
    int64_t it = rt_kernel_iterations(f);
    ir_func_free(f);
    if (it <= max_iters) return cur;
    /* candidates: numeric values > 1, largest first */
    const char *colon = strchr(cur, ':');
    if (!colon) break;
    bool progressed = false;
    for (int attempt = 0; attempt < 16 && !progressed; attempt++) {
      /* the attempt-th largest numeric value */
      int64_t vals[64];
      const char *pos[64];
      int n = 0;
      for (const char *p = colon + 1; *p && n < 64;) {
        const char *eq = strchr(p, '=');
        if (!eq) break;
        char *end;
        long long v = strtoll(eq + 1, &end, 10);
        if (end != eq + 1 && (*end == ',' || *end == 0) && v > 1) {
          vals[n] = v;
          pos[n++] = eq + 1;
        }
        const char *comma = strchr(eq, ',');
        if (!comma) break;
        p = comma + 1;
      }
      if (attempt >= n) break;
      for (int a = 0; a < n; a++)
        for (int b = a + 1; b < n; b++)
          if (vals[b] > vals[a]) {
            int64_t tv = vals[a];
            vals[a] = vals[b];
            vals[b] = tv;
            const char *tp = pos[a];
            pos[a] = pos[b];
            pos[b] = tp;
          }
      dg_str next;
      dg_str_init(&next);
      dg_str_putn(&next, cur, (size_t)(pos[attempt] - cur));
      dg_str_printf(&next, "%lld", (long long)(vals[attempt] / 2));
      const char *rest = pos[attempt];
      while (*rest >= '0' && *rest <= '9') rest++;
      dg_str_puts(&next, rest);
      dg_func *g = wl_build(next.s, &st);
      if (g) {
        ir_func_free(g);
        free(cur);
        cur = dg_str_take(&next);
        progressed = true;
      } else {
        dg_str_free(&next);
      }
    }
    if (!progressed) break;
  }
  free(cur);
  return NULL;
}

/* Small workloads of one family: generated ones under the work limit, the
 * family's example if it is small enough, else a shrunk example. */
static void family_pool(int fam, uint64_t seed, int64_t max_iters, spec_pool *out) {
  spec_pool all = {0};
  dg_status st;
  wl_generate(seed, 400, wl_family_name(fam), pool_add, &all, &st);
  pool_add(wl_family_example(fam), &all);
  for (int i = 0; i < all.n; i++) {
    dg_func *f = wl_build(all.specs[i], &st);
    if (f && rt_kernel_iterations(f) <= max_iters) pool_add(all.specs[i], out);
    ir_func_free(f);
    free(all.specs[i]);
  }
  free(all.specs);
  if (out->n == 0) {
    char *small = shrink_spec(wl_family_example(fam), max_iters);
    if (small) {
      char *canon = wl_canonical(small, &st);
      if (canon) pool_add(canon, out);
      free(canon);
      free(small);
    }
  }
}

typedef enum { FZ_OK, FZ_VERIFY, FZ_NUMBERS, FZ_REPLAY, FZ_RUN } fz_result;

static fz_result fuzz_one(const dg_func *f, uint64_t seed, int steps, bool compiled, int *applied,
                          char *why, size_t nwhy) {
  sched *s = sched_new(f, seed);
  dg_rng r;
  dg_rng_seed(&r, seed);
  *applied = sched_random_steps(s, &r, steps);
  dg_status st;
  fz_result res = FZ_OK;
  rt_check chk;
  if (!ir_verify(sched_func(s), &st)) {
    res = FZ_VERIFY;
    snprintf(why, nwhy, "verifier: %s", st.msg);
  } else if (!rt_compare_cpu(f, sched_func(s), seed, compiled, &chk, NULL, &st)) {
    res = FZ_RUN;
    snprintf(why, nwhy, "run: %s", st.msg);
  } else if (!chk.pass) {
    res = FZ_NUMBERS;
    snprintf(why, nwhy, "numbers: %s (max abs %.3g)", chk.first_bad, chk.max_abs);
  } else {
    char *js = sched_trace_to_json(sched_get_trace(s));
    sched_trace *t = sched_trace_from_json(js, &st);
    sched *s2 = sched_new(f, 0);
    if (!t || !sched_replay(s2, t, false, false, &st)) {
      res = FZ_REPLAY;
      snprintf(why, nwhy, "replay: %s", st.msg);
    } else if (!ir_func_equal(sched_func(s), sched_func(s2))) {
      res = FZ_REPLAY;
      ir_func_equal_explain(sched_func(s), sched_func(s2), why, nwhy);
    }
    free(js);
    sched_trace_free(t);
    sched_free(s2);
  }
  if (res != FZ_OK) {
    char *js = sched_trace_to_json(sched_get_trace(s));
    fprintf(stderr, "trace: %s\n", js);
    free(js);
  }
  sched_free(s);
  return res;
}

int cmd_fuzz_schedules(int argc, char **argv) {
  int64_t count = 100, seed = 1, steps = 12, max_iters = 1 << 16;
  bool compiled = false, verbose = false;
  const cli_opt opts[] = {
      {"--count", CLI_OPT_INT, &count, 1, 10000000, "number of schedules"},
      {"--seed", CLI_OPT_INT, &seed, 0, INT64_MAX, "seed of workloads, schedules and inputs"},
      {"--steps", CLI_OPT_INT, &steps, 1, 1000, "random steps drawn per schedule"},
      {"--max-iters", CLI_OPT_INT, &max_iters, 1, INT64_MAX, "largest workload, in block executions"},
      {"--compiled", CLI_OPT_FLAG, &compiled, 0, 0, "run through generated C instead of the interpreter"},
      {"--verbose", CLI_OPT_FLAG, &verbose, 0, 0, "print one line per schedule"},
  };
  const cli_spec spec = {"fuzz-schedules", "[--count N] [--seed S] [--steps K]",
                         "Applies random sequences of schedule primitives to random small workloads\n"
                         "of every family and checks each schedule: the verifier, the numbers against\n"
                         "the unscheduled kernel (float64 reference), and trace -> JSON -> replay.\n"
                         "Prints `N schedules, K checked, M mismatches`; exits 1 on any mismatch.",
                         opts, DG_ARRAY_LEN(opts), 0, 0};
  char **pos;
  int npos;
  int rc = cli_parse(&spec, argc, argv, &pos, &npos);
  if (rc) return rc < 0 ? CLI_OK : rc;
  free(pos);
  int nfam = wl_family_count();
  spec_pool *pools = dg_calloc((size_t)nfam, sizeof(spec_pool));
  for (int i = 0; i < nfam; i++) {
    family_pool(i, (uint64_t)seed * 1000003u + (uint64_t)i, max_iters, &pools[i]);
    if (pools[i].n == 0)
      fprintf(stderr, "dragon fuzz-schedules: no workload of family %s within %lld iterations\n",
              wl_family_name(i), (long long)max_iters);
  }
  dg_rng r;
  dg_rng_seed(&r, (uint64_t)seed);
  int64_t checked = 0, mismatches = 0, steps_applied = 0;
  int64_t *per_family = dg_calloc((size_t)nfam, sizeof(int64_t));
  dg_progress prog;
  dg_progress_init(&prog, "fuzz-schedules", count);
  for (int64_t i = 0; i < count; i++) {
    int fam = (int)(i % nfam);
    for (int k = 0; k < nfam && pools[fam].n == 0; k++) fam = (fam + 1) % nfam;
    if (pools[fam].n == 0) break;
    const char *sp = pools[fam].specs[dg_rng_below(&r, (uint64_t)pools[fam].n)];
    dg_status st;
    dg_func *f = wl_build(sp, &st);
    if (!f) {
      fprintf(stderr, "dragon fuzz-schedules: %s: %s\n", sp, st.msg);
      mismatches++;
      continue;
    }
    char why[600] = "";
    int applied = 0;
    uint64_t sseed = dg_rng_next(&r);
    fz_result res = fuzz_one(f, sseed, (int)steps, compiled, &applied, why, sizeof why);
    steps_applied += applied;
    if (res != FZ_RUN) checked++;
    per_family[fam]++;
    if (res != FZ_OK) {
      mismatches++;
      fprintf(stderr, "MISMATCH %s seed %llu: %s\n", sp, (unsigned long long)sseed, why);
    } else if (verbose) {
      printf("ok %s seed %llu, %d steps\n", sp, (unsigned long long)sseed, applied);
    }
    ir_func_free(f);
    char extra[64];
    snprintf(extra, sizeof extra, "%lld mismatches", (long long)mismatches);
    dg_progress_step(&prog, 1, extra);
  }
  dg_progress_done(&prog);
  int covered = 0;
  for (int i = 0; i < nfam; i++) covered += per_family[i] > 0;
  printf("families  %d of %d covered, %.1f steps applied per schedule\n", covered, nfam,
         count ? (double)steps_applied / (double)count : 0.0);
  printf("%lld schedules, %lld checked, %lld mismatches\n", (long long)count, (long long)checked,
         (long long)mismatches);
  for (int i = 0; i < nfam; i++) {
    for (int k = 0; k < pools[i].n; k++) free(pools[i].specs[k]);
    free(pools[i].specs);
  }
  free(pools);
  free(per_family);
  return mismatches ? CLI_ERROR : CLI_OK;
}
