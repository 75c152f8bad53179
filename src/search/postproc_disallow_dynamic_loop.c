/* postproc_disallow_dynamic_loop.c: DisallowDynamicLoop
 * (postproc/disallow_dynamic_loop.cc): a schedule whose loops do not all
 * have a constant extent is rejected. Dragon's loops always have an int64
 * extent, so what can fail here is an extent that is not positive (which
 * ir_verify also forbids); the walk is kept so that the postprocessor list
 * is TVM's and a kernel that slipped past the verifier is still refused.
 * Records nothing.
 */
#include <inttypes.h>

#include "search/space_impl.h"

static const dg_stmt *bad_loop(const dg_stmt *s) {
  if (!s) return NULL;
  switch (s->kind) {
    case DG_STMT_FOR: return s->extent <= 0 ? s : bad_loop(s->body);
    case DG_STMT_SEQ:
      for (int i = 0; i < s->n; i++) {
        const dg_stmt *b = bad_loop(s->stmts[i]);
        if (b) return b;
      }
      return NULL;
    case DG_STMT_IF: {
      const dg_stmt *b = bad_loop(s->then_s);
      return b ? b : bad_loop(s->else_s);
    }
    case DG_STMT_BLOCK: {
      const dg_stmt *b = bad_loop(s->block->init);
      return b ? b : bad_loop(s->block->body);
    }
    case DG_STMT_STORE: return NULL;
  }
  return NULL;
}

bool postproc_disallow_dynamic_loop(sched *s, const search_target *t, dg_status *st) {
  (void)t;
  const dg_stmt *l = bad_loop(sched_func(s)->body);
  if (l)
    return dg_fail(st, DG_ERR_INVALID, "loop %s has extent %" PRId64 ", not a positive constant",
                   l->loop_var->name, l->extent);
  return true;
}
