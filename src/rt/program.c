/* program.c: running a scheduled kernel the way the GPU runs it: built
 * (build.c: lowered to device kernels, checked against the GPU's limits),
 * then either emulated on the CPU through the C target (blocks and
 * threads as loops, phases split at barriers) or compiled with NVRTC and
 * run on the GPU by a crash-isolated worker. Both compare the outputs with
 * the unscheduled kernel's float64 reference on the same seeded inputs. */
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "dragon/rt.h"
#include "dragon/rt_cuda.h"

bool rt_program_check_c(const dg_func *ref, const dg_func *f, uint64_t seed, rt_check *out,
                        dg_status *st) {
  rt_build b;
  rt_build_opts o = {.target = RT_BUILD_C_EMULATION, .compile = true, .reference = ref};
  bool ok = rt_program_build(f, &o, &b, st);
  rt_tensors ts;
  if (ok && rt_tensors_init(&ts, ref, st)) {
    rt_data_fill(&ts, seed, rt_data_dist_for(ref));
    rt_data_poison(&ts);
    rt_cpu_call(b.ref_fn, ts.ref_args);
    rt_cpu_call(b.fn, ts.args);
    ok = rt_check_outputs_for(ref, &ts, true, out, st);
    rt_tensors_free(&ts);
  } else {
    ok = false;
  }
  rt_build_free(&b);
  return ok;
}

bool rt_program_run_cuda(const dg_func *ref, const dg_func *f, uint64_t seed, int repeats,
                         bool check, double timeout_s, rt_cuda_result *res, dg_status *st) {
  dg_status_ok(st);
  memset(res, 0, sizeof *res);
  if (!rt_nvrtc_available(st) || !rt_cuda_available(st)) return false;
  rt_build b;
  rt_build_opts o = {.target = RT_BUILD_CUDA, .compile = true};
  if (!rt_program_build(f, &o, &b, st)) {
    bool judged = b.stage == RT_BUILD_COMPILE;
    if (judged) { /* a recorded failure of the candidate, not of the tool */
      res->fail = RT_FAIL_COMPILE;
      memcpy(res->reason, st->msg, sizeof res->reason - 1);
      res->reason[sizeof res->reason - 1] = 0;
    }
    rt_build_free(&b);
    return judged;
  }
  bool ok = false;
  dg_arena *a = dg_arena_new();
  rt_cuda_program prog;
  rt_tensors ts = {0};
  bool have_ts = false;
  char path[64] = "";
  struct rt_worker_pool *pool = NULL;
  if (!rt_cuda_program_from_lowered(b.prog, a, &prog, st)) goto done;
  if (!check) goto submit;
  /* the reference on the CPU, float64 */
  if (!rt_tensors_init(&ts, ref, st)) goto done;
  have_ts = true;
  rt_data_fill(&ts, seed, rt_data_dist_for(ref));
  rt_data_poison(&ts);
  if (!rt_reference_run(ref, &ts, NULL, st)) goto done;
  snprintf(path, sizeof path, "/tmp/dragon-data-%ld-XXXXXX", (long)getpid());
  int fd = mkstemp(path);
  if (fd < 0) {
    dg_fail(st, DG_ERR_IO, "%s: cannot create the data file", path);
    path[0] = 0;
    goto done;
  }
  close(fd);
  if (!rt_cuda_data_write(&ts, rt_check_reduce_len(ref), path, st)) goto done;
submit:
  if (!rt_cuda_pool_new(1, 1, timeout_s, &pool, st)) goto done;
  rt_cuda_job job = {.bin = &b.bin,
                     .prog = &prog,
                     .data_path = check ? path : NULL,
                     .seed = seed,
                     .timing = {.warmup = 2, .repeats = repeats, .flush_l2 = true,
                                .timeout_s = timeout_s}};
  dg_str msg;
  dg_str_init(&msg);
  rt_cuda_job_encode(&job, &msg);
  rt_worker_pool_submit(pool, 1, msg.s, msg.len, timeout_s * (repeats + 4));
  dg_str_free(&msg);
  rt_worker_result wr;
  if (!rt_worker_pool_next(pool, &wr, st)) goto done;
  rt_cuda_result_from_worker(&wr, res);
  rt_worker_result_free(&wr);
  ok = true;
done:
  if (pool) rt_worker_pool_free(pool);
  if (path[0]) unlink(path);
  if (have_ts) rt_tensors_free(&ts);
  dg_arena_free(a);
  rt_build_free(&b);
  return ok;
}
