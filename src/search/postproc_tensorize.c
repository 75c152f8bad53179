/* postproc_tensorize.c: RewriteTensorize (postproc/rewrite_tensorize.cc,
 * vectorize_init_loop off as on CUDA): every block marked
 * meta_schedule.auto_tensorize with a non-empty intrinsic name, in
 * post-order, is looked up (GetBlock), unmarked (Unannotate) and
 * tensorized with that intrinsic. As in TVM a Tensorize that fails is not a
 * rejection (the block stays as it is, correct but not on tensor cores);
 * nothing is recorded for it.
 */
#include <string.h>

#include "search/space_impl.h"

typedef struct {
  const char *block, *intrin;
} tz_job;
typedef DG_VEC(tz_job) job_list;

static void collect(const dg_stmt *s, job_list *out) {
  if (!s) return;
  switch (s->kind) {
    case DG_STMT_FOR: collect(s->body, out); break;
    case DG_STMT_SEQ:
      for (int i = 0; i < s->n; i++) collect(s->stmts[i], out);
      break;
    case DG_STMT_IF:
      collect(s->then_s, out);
      collect(s->else_s, out);
      break;
    case DG_STMT_BLOCK: {
      collect(s->block->init, out);
      collect(s->block->body, out);
      const char *in = space_ann_str(s->block, "meta_schedule.auto_tensorize");
      if (in && in[0]) DG_VEC_PUSH(out, ((tz_job){s->block->name, in}));
      break;
    }
    case DG_STMT_STORE: break;
  }
}

bool postproc_tensorize(sched *s, const search_target *t, dg_status *st) {
  (void)t;
  dg_func *f = sched_func(s);
  job_list jobs = {0};
  collect(f->body, &jobs);
  bool ok = true;
  for (size_t i = 0; i < jobs.len && ok; i++) {
    int b = sched_get_block(s, jobs.data[i].block, f->name, st);
    ok = b >= 0 && sched_unannotate(s, b, "meta_schedule.auto_tensorize", st);
    if (ok) {
      dg_status ignored;
      sched_tensorize(s, b, jobs.data[i].intrin, true, &ignored);
    }
  }
  DG_VEC_FREE(&jobs);
  return ok;
}
