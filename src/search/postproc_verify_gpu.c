/* postproc_verify_gpu.c: VerifyGPUCode (postproc/verify_gpu_code.cc): the
 * schedule is lowered to device launches (lower/, with its verifier on)
 * and rejected if that fails or a launch breaks sm_90's limits: threads
 * per block (1024) and per dimension, the thread-extent bounds MetaSchedule
 * annotates on tiled blocks, shared memory (48 KiB static, 227 KiB
 * dynamic), vthread extents (8), vector accesses (16 bytes). TVM lowers a
 * copy with its own pass list first; lower_program is dragon's. Records
 * nothing and changes nothing.
 */
#include "dragon/lower.h"
#include "search/space_impl.h"

bool postproc_verify_gpu(sched *s, const search_target *t, dg_status *st) {
  lw_limits lim = lower_limits_sm90;
  lim.max_threads_per_block = t->max_threads_per_block;
  lim.warp_size = t->warp_size;
  lower_opts o = {.limits = &lim};
  lw_program *p = lower_program(sched_func(s), &o, st);
  if (!p) return false;
  lower_program_free(p);
  return true;
}
