/* test_sched_random.c: random schedules of small kernels: every one must
 * compute what the unscheduled kernel computes, pass the verifier, and
 * replay from its JSON to an equal kernel. */
#include <stdlib.h>

#include "dragon/rt.h"
#include "dragon/sched.h"
#include "dragon/wl.h"
#include "test.h"

static bool check_one(const dg_func *f, uint64_t seed, int steps, int *applied) {
  sched *s = sched_new(f, seed);
  dg_rng r;
  dg_rng_seed(&r, seed);
  *applied = sched_random_steps(s, &r, steps);
  dg_status st;
  bool ok = ir_verify(sched_func(s), &st);
  if (!ok) fprintf(stderr, "seed %llu verify: %s\n", (unsigned long long)seed, st.msg);
  rt_tensors ts;
  if (ok && rt_tensors_init(&ts, f, &st)) {
    rt_data_fill(&ts, seed, rt_data_dist_for(f));
    rt_data_poison(&ts);
    ok = rt_interp_run(f, ts.ref_args, true, &st) && rt_interp_run(sched_func(s), ts.args, false, &st);
    if (!ok) fprintf(stderr, "seed %llu run: %s\n", (unsigned long long)seed, st.msg);
    rt_check chk;
    if (ok) {
      rt_check_outputs(&ts, rt_check_reduce_len(f), &chk);
      ok = chk.pass;
      if (!ok) fprintf(stderr, "seed %llu mismatch: %s\n", (unsigned long long)seed, chk.first_bad);
    }
    rt_tensors_free(&ts);
  }
  if (ok) {
    char *js = sched_trace_to_json(sched_get_trace(s));
    sched_trace *t = sched_trace_from_json(js, &st);
    sched *s2 = sched_new(f, 0);
    ok = t && sched_replay(s2, t, false, false, &st) && ir_func_equal(sched_func(s), sched_func(s2));
    if (!ok) {
      fprintf(stderr, "seed %llu replay: %s\n%s\n", (unsigned long long)seed, st.msg, js);
    }
    free(js);
    sched_trace_free(t);
    sched_free(s2);
  }
  if (!ok) {
    char *txt = ir_print(sched_func(s));
    fprintf(stderr, "%s", txt);
    free(txt);
  }
  sched_free(s);
  return ok;
}

DG_TEST(sched_random_small_kernels) {
  const char *specs[] = {
      "batch_matmul:b=2,n=12,m=10,k=8,dtype=f32",
      "conv1d_nlc:n=1,l=16,ci=4,co=8,kernel=3,stride=2,pad=1,dilation=1,groups=1,dtype=f32",
      "softmax:m=6,n=10,dtype=f32",
  };
  int total = 0;
  for (size_t i = 0; i < DG_ARRAY_LEN(specs); i++) {
    dg_status st;
    dg_func *f = wl_build(specs[i], &st);
    CHECK_MSG(f, "%s: %s", specs[i], st.msg);
    for (uint64_t seed = 1; seed <= 12; seed++) {
      int applied;
      CHECK_MSG(check_one(f, seed * 7919 + i, 12, &applied), "%s seed %llu", specs[i],
                (unsigned long long)seed);
      total += applied;
    }
    ir_func_free(f);
  }
  CHECK(total > 50); /* the steps are mostly applicable */
}
