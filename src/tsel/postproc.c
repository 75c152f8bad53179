/* postproc.c: the `postproc default` fold: EnterPostproc and exactly the
 * instructions that the default CUDA postprocessors record when replayed on
 * the kernel. The one fold that needs the kernel: lift folds only after
 * checking that replaying the trace's head and postprocessing reproduces
 * the whole trace; lower expands it the same way. The postprocessors are
 * the search's (search/, a later stage): the program hands them in
 * (tsel_set_postprocessor), so this stage depends on none above it. */
#include <stdatomic.h>

#include "dragon/wl.h"
#include "tsel/tsel_impl.h"

/* Set once at start-up, read by any thread. */
static struct {
  _Atomic(tsel_postproc_fn) fn;
  _Atomic(void *) ctx;
} postproc;

void tsel_set_postprocessor(tsel_postproc_fn fn, void *ctx) {
  atomic_store(&postproc.ctx, ctx);
  atomic_store(&postproc.fn, fn);
}

sched_trace *tsel_postproc_expand(const sched_trace *head, const dg_func *kernel, dg_status *st) {
  tsel_postproc_fn fn = atomic_load(&postproc.fn);
  if (!fn) {
    dg_fail(st, DG_ERR_INVALID,
            "no default postprocessors are set in this program (tsel_set_postprocessor)");
    return NULL;
  }
  sched *s = sched_new(kernel, 0);
  sched_trace *out = NULL;
  if (sched_replay(s, head, false, true, st)) {
    if (fn(s, atomic_load(&postproc.ctx), st)) out = sched_trace_clone(sched_get_trace(s));
    else dg_status_prefix(st, "the default postprocessors reject this schedule");
  }
  sched_free(s);
  return out;
}

int tsel_postproc_default_at(const sched_trace *t, const char *kernel_spec,
                             const dg_func *kernel) {
  int p = -1;
  for (int i = 0; i < t->n && p < 0; i++)
    if (t->insts[i].kind == SCHED_INST_ENTER_POSTPROC) p = i;
  if (p < 0 || !atomic_load(&postproc.fn)) return -1;
  dg_status st;
  dg_func *own = NULL;
  if (!kernel) {
    if (!kernel_spec || !*kernel_spec) return -1;
    kernel = own = wl_build(kernel_spec, &st);
    if (!kernel) return -1;
  }
  sched_trace *head = sched_trace_new();
  for (int i = 0; i < p; i++) sched_trace_append(head, &t->insts[i]);
  sched_trace *exp = tsel_postproc_expand(head, kernel, &st);
  bool same = exp && sched_trace_equal(exp, t);
  sched_trace_free(exp);
  sched_trace_free(head);
  ir_func_free(own);
  return same ? p : -1;
}
