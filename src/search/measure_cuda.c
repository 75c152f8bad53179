/* measure_cuda.c: measuring candidates on the GPU for the tuner.
 *
 * Per workload, once: the inputs are drawn from the seed, the unscheduled
 * kernel's float64 reference is computed on the CPU (compiled C), and both
 * are written to a data file that the GPU workers map. Per round: every
 * candidate is lowered and emitted as CUDA, the sources are compiled by
 * NVRTC on all cores at once, and the programs are run by one long-lived
 * worker process (crash-isolated: a fault or a hang costs that candidate,
 * the worker is replaced), checked against the reference on their first
 * run, then timed with the L2 flushed before each repeat. A candidate that
 * does not lower, compile, run or match costs a failure reason, never the
 * run. */
#include <string.h>
#include <unistd.h>

#include "dragon/codegen.h"
#include "dragon/lower.h"
#include "dragon/rt_cuda.h"
#include "dragon/search.h"

struct search_cuda_measure_state {
  struct rt_worker_pool *pool;
  uint64_t hash;  /* the workload the data file holds */
  char path[64];
};

static bool prepare(search_cuda_measure *m, const dg_func *f, dg_status *st) {
  search_cuda_measure_state *s = m->state;
  uint64_t h = ir_func_hash(f);
  if (s->path[0] && s->hash == h) return true;
  if (s->path[0]) unlink(s->path);
  s->path[0] = 0;
  rt_tensors ts;
  if (!rt_tensors_init(&ts, f, st)) return false;
  rt_data_fill(&ts, m->seed, rt_data_dist_for(f));
  rt_data_poison(&ts);
  char *src = codegen_emit_source(f, f, &codegen_lang_c, st);
  rt_cpu_kernel *k = NULL;
  bool ok = src && rt_cpu_compile(src, CODEGEN_REFERENCE_FN, &k, st);
  free(src);
  if (ok) {
    rt_cpu_call(k, ts.ref_args);
    snprintf(s->path, sizeof s->path, "/tmp/dragon-tune-%ld-XXXXXX", (long)getpid());
    int fd = mkstemp(s->path);
    if (fd < 0) {
      ok = dg_fail(st, DG_ERR_IO, "%s: cannot create the data file", s->path);
      s->path[0] = 0;
    } else {
      close(fd);
      ok = rt_cuda_data_write(&ts, rt_check_reduce_len(f), s->path, st);
      if (ok) s->hash = h;
    }
  }
  rt_cpu_free(k);
  rt_tensors_free(&ts);
  return ok;
}

bool search_cuda_measure_init(search_cuda_measure *m, dg_status *st) {
  if (!rt_nvrtc_available(st) || !rt_cuda_available(st)) return false;
  m->state = dg_calloc(1, sizeof *m->state);
  if (!rt_cuda_pool_new(1, 1, m->timeout_s, &m->state->pool, st)) {
    free(m->state);
    m->state = NULL;
    return false;
  }
  return true;
}

void search_cuda_measure_free(search_cuda_measure *m) {
  if (!m->state) return;
  if (m->state->pool) rt_worker_pool_free(m->state->pool);
  if (m->state->path[0]) unlink(m->state->path);
  free(m->state);
  m->state = NULL;
}

static void fail(search_measure_result *r, const char *why) {
  r->n_secs = 0;
  size_t n = strlen(why);
  if (n > sizeof r->error - 1) n = sizeof r->error - 1;
  memcpy(r->error, why, n);
  r->error[n] = 0;
}

void search_measure_cuda(void *ctx, const dg_func *f, const search_cand *cand, int n,
                         search_measure_result *out) {
  search_cuda_measure *m = ctx;
  dg_status st;
  for (int i = 0; i < n; i++) memset(&out[i], 0, sizeof out[i]);
  if (!m->state || !prepare(m, f, &st)) {
    for (int i = 0; i < n; i++) fail(&out[i], m->state ? st.msg : "GPU measurement not set up");
    return;
  }
  /* lower and emit every candidate, then compile them all at once */
  lw_program **progs = dg_calloc((size_t)n, sizeof *progs);
  char **srcs = dg_calloc((size_t)n, sizeof *srcs);
  rt_nvrtc_job *jobs = dg_calloc((size_t)n, sizeof *jobs);
  int *job_of = dg_calloc((size_t)n, sizeof *job_of);
  int nj = 0;
  for (int i = 0; i < n; i++) {
    job_of[i] = -1;
    progs[i] = lower_program(cand[i].func, NULL, &st);
    if (progs[i] && !lower_verify(progs[i], &lower_limits_sm90, &st)) {
      lower_program_free(progs[i]);
      progs[i] = NULL;
    }
    if (progs[i]) srcs[i] = codegen_emit_program(progs[i], &codegen_lang_cuda, &st);
    if (!srcs[i]) {
      fail(&out[i], st.msg);
      continue;
    }
    jobs[nj] = (rt_nvrtc_job){srcs[i], "cand", "sm_90"};
    job_of[i] = nj++;
  }
  rt_cubin *bins = dg_calloc((size_t)(nj ? nj : 1), sizeof *bins);
  dg_status *sts = dg_calloc((size_t)(nj ? nj : 1), sizeof *sts);
  if (nj) rt_nvrtc_compile_batch(jobs, nj, rt_cpu_count(), bins, sts);
  /* run one at a time on the GPU through the worker */
  for (int i = 0; i < n; i++) {
    if (job_of[i] < 0) continue;
    int j = job_of[i];
    if (sts[j].code != DG_OK) {
      fail(&out[i], sts[j].msg);
      continue;
    }
    dg_arena *a = dg_arena_new();
    rt_cuda_program prog;
    if (!rt_cuda_program_from_lowered(progs[i], a, &prog, &st)) {
      fail(&out[i], st.msg);
      dg_arena_free(a);
      continue;
    }
    int reps = m->repeats < 1 ? 1 : m->repeats > 8 ? 8 : m->repeats;
    rt_cuda_job job = {.bin = &bins[j],
                       .prog = &prog,
                       .data_path = m->state->path,
                       .seed = m->seed,
                       .timing = {.warmup = 1, .repeats = reps, .flush_l2 = true,
                                  .timeout_s = m->timeout_s}};
    dg_str msg;
    dg_str_init(&msg);
    rt_cuda_job_encode(&job, &msg);
    rt_worker_pool_submit(m->state->pool, (uint64_t)i, msg.s, msg.len, m->timeout_s * (reps + 3));
    dg_str_free(&msg);
    rt_worker_result wr;
    if (!rt_worker_pool_next(m->state->pool, &wr, &st)) {
      fail(&out[i], st.msg);
      dg_arena_free(a);
      continue;
    }
    rt_cuda_result res;
    rt_cuda_result_from_worker(&wr, &res);
    rt_worker_result_free(&wr);
    if (res.fail != RT_FAIL_NONE) {
      char why[256];
      snprintf(why, sizeof why, "%s: %.200s", rt_fail_name(res.fail), res.reason);
      fail(&out[i], why);
    } else {
      /* the repeats' spread is summarised; the median stands for each */
      out[i].n_secs = reps;
      for (int r = 0; r < reps; r++) out[i].secs[r] = res.t.median;
    }
    dg_arena_free(a);
  }
  for (int j = 0; j < nj; j++) rt_cubin_free(&bins[j]);
  for (int i = 0; i < n; i++) {
    lower_program_free(progs[i]);
    free(srcs[i]);
  }
  free(bins);
  free(sts);
  free(progs);
  free(srcs);
  free(jobs);
  free(job_of);
}
