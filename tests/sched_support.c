/* sched_support.c: the helpers of sched_support.h. */
#include <glob.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "dragon/codegen.h"
#include "dragon/rt.h"
#include "dragon/rt_cuda.h"
#include "dragon/search.h"
#include "dragon/tsel.h"
#include "dragon/wl.h"
#include "sched_support.h"
#include "test.h"

sched *ts_replay(const dg_func *f, const sched_trace *t) {
  sched *s = sched_new(f, 1);
  dg_status st;
  if (!sched_replay(s, t, false, false, &st)) {
    fprintf(stderr, "replay: %s\n", st.msg);
    sched_free(s);
    return NULL;
  }
  return s;
}

dg_func *ts_parse(const char *text) {
  dg_status st;
  dg_func *f = ir_parse(text, "test", &st);
  if (!f) fprintf(stderr, "%s\n", st.msg);
  return f;
}

bool ts_same_numbers_seed(const dg_func *orig, const dg_func *g, uint64_t seed) {
  rt_tensors ts;
  dg_status st;
  if (!rt_tensors_init(&ts, orig, &st)) return false;
  rt_data_fill(&ts, seed, rt_data_dist_for(orig));
  rt_data_poison(&ts);
  bool ok = rt_interp_run(orig, ts.ref_args, true, &st) && rt_interp_run(g, ts.args, false, &st);
  rt_check chk;
  if (ok) {
    rt_check_outputs(&ts, rt_check_reduce_len(orig), &chk);
    ok = chk.pass;
    if (!ok) fprintf(stderr, "mismatch: %s\n", chk.first_bad);
  } else {
    fprintf(stderr, "run failed: %s\n", st.msg);
  }
  rt_tensors_free(&ts);
  return ok;
}

bool ts_same_numbers(const dg_func *orig, const dg_func *g) {
  return ts_same_numbers_seed(orig, g, 11);
}

bool ts_replays(const dg_func *orig, sched *s) {
  dg_status st;
  char *js = sched_trace_to_json(sched_get_trace(s));
  sched_trace *t = sched_trace_from_json(js, &st);
  bool ok = t != NULL;
  sched *s2 = sched_new(orig, 1);
  if (ok) ok = sched_replay(s2, t, false, false, &st);
  if (!ok) fprintf(stderr, "replay: %s\n", st.msg);
  char why[256] = "";
  if (ok && !ir_func_equal_explain(sched_func(s), sched_func(s2), why, sizeof why)) {
    fprintf(stderr, "replayed kernel differs: %s\n", why);
    ok = false;
  }
  char *js2 = ok ? sched_trace_to_json(sched_get_trace(s2)) : NULL;
  if (ok) ok = strcmp(js, js2) == 0;
  free(js);
  free(js2);
  sched_trace_free(t);
  sched_free(s2);
  return ok;
}

bool ts_verified(sched *s) {
  dg_status st;
  if (ir_verify(sched_func(s), &st)) return true;
  fprintf(stderr, "verify: %s\n", st.msg);
  return false;
}

bool ts_text_is(sched *s, const char *want) {
  char *got = ir_print(sched_func(s));
  bool ok = strcmp(got, want) == 0;
  if (!ok) fprintf(stderr, "--- got\n%s--- want\n%s", got, want);
  free(got);
  return ok;
}

bool ts_source_matches(const dg_func *ref, const char *src, rt_dist dist) {
  static const char *const names[2] = {CODEGEN_PROGRAM_FN, CODEGEN_REFERENCE_FN};
  rt_cpu_kernel *k[2] = {NULL, NULL};
  dg_status st;
  if (!rt_cpu_compile_many(src, names, 2, k, &st)) {
    fprintf(stderr, "cc: %s\n", st.msg);
    return false;
  }
  rt_tensors ts;
  bool pass = false;
  if (rt_tensors_init(&ts, ref, &st)) {
    rt_data_fill(&ts, 3, dist);
    rt_data_poison(&ts);
    rt_cpu_call(k[1], ts.ref_args);
    rt_cpu_call(k[0], ts.args);
    rt_check chk;
    rt_check_outputs(&ts, rt_check_reduce_len(ref), &chk);
    rt_tensors_free(&ts);
    pass = chk.pass;
    if (!pass) fprintf(stderr, "wrong numbers: %s\n", chk.first_bad);
  } else {
    fprintf(stderr, "tensors: %s\n", st.msg);
  }
  rt_cpu_free(k[0]);
  rt_cpu_free(k[1]);
  return pass;
}

char *ts_graph_of(const char *trace_path, const char *spec, const dg_func *f) {
  dg_status st;
  size_t len;
  char *json = dg_read_file(trace_path, &len, &st);
  if (!json) return NULL;
  sched_trace *t = sched_trace_from_json(json, &st);
  free(json);
  if (!t) return NULL;
  tsel_graph *g = tsel_lift(t, spec, f, NULL, &st);
  sched_trace_free(t);
  if (!g) return NULL;
  char *text = tsel_print(g);
  tsel_graph_free(g);
  return text;
}

int ts_tune_data_files(void) {
  char pat[96];
  snprintf(pat, sizeof pat, "/tmp/dragon-tune-%ld-*", (long)getpid());
  glob_t g;
  int n = glob(pat, 0, NULL, &g) == 0 ? (int)g.gl_pathc : 0;
  globfree(&g);
  return n;
}

bool ts_gmm_judging_open(bool need_gpu, dg_func **gmm, char **good, search_cuda_measure *m, char *why, size_t n) {
  static const char spec[] = "batch_matmul:b=1,n=128,m=128,k=128,dtype=f32";
  dg_status st;
  *gmm = NULL, *good = NULL;
  *m = (search_cuda_measure){3, 10, 1, NULL};
  m->threads = 2;
  m->allow_no_gpu = !need_gpu;
  if (need_gpu ? !rt_cuda_available(&st) : !rt_nvrtc_available(&st)) {
    snprintf(why, n, "%s: %.200s", need_gpu ? "no GPU" : "NVRTC is not here", st.msg);
    return false;
  }
  *gmm = wl_build(spec, &st);
  *good = *gmm ? ts_graph_of("schedules/GMM.json", spec, *gmm) : NULL;
  bool up = *good && search_cuda_measure_init(m, &st);
  if (up && m->state) return true;
  if (!up) dg_test_fail(__FILE__, __LINE__, "%.200s", *good ? st.msg : "GMM or its graph does not build");
  else search_cuda_measure_free(m);
  free(*good);
  ir_func_free(*gmm);
  *good = NULL, *gmm = NULL;
  snprintf(why, n, "no GPU measurement set up");
  return false;
}
