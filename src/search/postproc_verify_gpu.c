/* postproc_verify_gpu.c: VerifyGPUCode (postproc/verify_gpu_code.cc).
 *
 * First TVM's ThreadExtentChecker on the scheduled kernel: at every block
 * annotated with meta_schedule.thread_extent_low/high_inclusive, the
 * product of the enclosing threadIdx.x/y/z extents (x taken as the warp
 * size inside a warp_execution block) must lie within the bounds. It is
 * cheap and rejects most bad samples. Then the schedule is lowered to
 * device launches (lower_check: lower/ with its verifier on, its verdict
 * without the unrolled program; TVM lowers a copy with
 * its own pass list at this point) and rejected if that fails or a launch
 * breaks sm_90's limits: threads per block (1024) and per dimension,
 * shared memory (48 KiB static, 227 KiB dynamic) as allocated after
 * software pipelining (a stage multi-buffered into n versions counts n
 * times, as in TVM, whose pass list runs InjectSoftwarePipeline before
 * the check), vector accesses (16 bytes). Like TVM it refuses no vthread
 * extent (TVM expands virtual threads before it checks). Records nothing
 * and changes nothing.
 */
#include <inttypes.h>

#include "dragon/lower.h"
#include "search/space_impl.h"

typedef struct {
  int64_t x, y, z;
  int64_t warp;
  const dg_block *bad;
  int64_t bad_threads, bad_lo, bad_hi;
} extent_walk;

static bool check_extents(const dg_stmt *s, extent_walk *w) {
  if (!s) return true;
  switch (s->kind) {
    case DG_STMT_FOR: {
      if (s->loop_kind != DG_LOOP_THREAD || !dg_thread_tag_is_thread(s->tag))
        return check_extents(s->body, w);
      int64_t *dim = s->tag == DG_TAG_THREAD_X ? &w->x : s->tag == DG_TAG_THREAD_Y ? &w->y : &w->z;
      int64_t old = *dim;
      *dim = s->extent;
      bool ok = check_extents(s->body, w);
      *dim = old;
      return ok;
    }
    case DG_STMT_SEQ:
      for (int i = 0; i < s->n; i++)
        if (!check_extents(s->stmts[i], w)) return false;
      return true;
    case DG_STMT_IF: return check_extents(s->then_s, w) && check_extents(s->else_s, w);
    case DG_STMT_BLOCK: {
      const dg_block *b = s->block;
      int64_t old_x = w->x;
      if (ir_anns_get(&b->anns, "warp_execution")) w->x = w->warp;
      const dg_ann *lo = ir_anns_get(&b->anns, "meta_schedule.thread_extent_low_inclusive");
      const dg_ann *hi = ir_anns_get(&b->anns, "meta_schedule.thread_extent_high_inclusive");
      if (lo && hi && lo->kind == DG_ANN_INT && hi->kind == DG_ANN_INT) {
        int64_t threads = w->x * w->y * w->z;
        if (threads < lo->i || threads > hi->i) {
          w->bad = b;
          w->bad_threads = threads;
          w->bad_lo = lo->i;
          w->bad_hi = hi->i;
          return false;
        }
      }
      bool ok = check_extents(b->init, w) && check_extents(b->body, w);
      w->x = old_x;
      return ok;
    }
    case DG_STMT_STORE: return true;
  }
  return true;
}

bool search_thread_extents_ok(const dg_func *f, const search_target *t, dg_status *st) {
  if (!t) t = &search_target_sm90;
  extent_walk w = {.x = 1, .y = 1, .z = 1, .warp = t->warp_size};
  if (!check_extents(f->body, &w))
    return dg_fail(st, DG_ERR_INVALID,
                   "block %s runs on %" PRId64 " threads, outside its bounds [%" PRId64 ", %" PRId64
                   "]",
                   w.bad->name, w.bad_threads, w.bad_lo, w.bad_hi);
  return true;
}

bool postproc_verify_gpu(sched *s, const search_target *t, dg_status *st) {
  if (!search_thread_extents_ok(sched_func(s), t, st)) return false;
  lw_limits lim = lower_limits_sm90;
  lim.max_threads_per_block = t->max_threads_per_block;
  lim.warp_size = t->warp_size;
  lower_opts o = {.limits = &lim};
  return lower_check(sched_func(s), &o, st);
}
