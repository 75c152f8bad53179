/* rule_inline.c: AutoInline and InlineConstantScalars
 * (schedule_rule/auto_inline.cc) in MetaSchedule's CUDA configuration:
 * into_producer, into_consumer and inline_const_tensor on; no disallowed
 * operators, if-then-else allowed, no injectivity or order requirement
 * (so conditions 3 to 5 of TVM's CheckInline never reject).
 *
 * A block with one write is inlined into its consumers when it has some and
 * ComputeInline is legal; otherwise, with exactly one producer that is a
 * complete block not marked for tensorization, it is inlined into that
 * producer when ReverseComputeInline is legal. The annotation
 * meta_schedule.inline_rule = "disable" keeps a block. Only the inlining
 * step itself is recorded: the questions asked on the way are analyses.
 */
#include <string.h>

#include "search/space_impl.h"

static bool can_inline(sched *s, dg_block *b, bool reverse) {
  dg_status tmp;
  return sched_inline_block(s, b, reverse, true, &tmp);
}

static bool has_consumers(sched *s, dg_block *b) {
  sched_blocks v = {0};
  space_consumers(s, b, &v);
  bool any = v.len > 0;
  DG_VEC_FREE(&v);
  return any;
}

typedef enum { INLINE_NONE, INLINE_INTO_CONSUMER, INLINE_INTO_PRODUCER } inline_kind;

static inline_kind check_inline(sched *s, dg_block *b) {
  if (space_is_root(s, b) || b->n_writes != 1) return INLINE_NONE;
  /* a block computing a constant tensor goes into its consumers first */
  if (b->n_reads == 0 && has_consumers(s, b) && can_inline(s, b, false))
    return INLINE_INTO_CONSUMER;
  const char *rule = space_ann_str(b, "meta_schedule.inline_rule");
  if (rule && strcmp(rule, "disable") == 0) return INLINE_NONE;
  if (has_consumers(s, b) && can_inline(s, b, false)) return INLINE_INTO_CONSUMER;
  sched_blocks prod = {0};
  space_producers(s, b, &prod);
  inline_kind k = INLINE_NONE;
  if (prod.len == 1 && space_is_complete(s, prod.data[0]) &&
      !ir_anns_get(&prod.data[0]->anns, "meta_schedule.auto_tensorize") &&
      can_inline(s, b, true))
    k = INLINE_INTO_PRODUCER;
  DG_VEC_FREE(&prod);
  return k;
}

int rule_auto_inline_apply(space_ctx *c, sched *s, int block, sched **out, dg_status *st) {
  (void)c;
  out[0] = s;
  dg_block *b = space_block(s, block);
  if (!b) return 1;
  switch (check_inline(s, b)) {
    case INLINE_INTO_CONSUMER: return sched_compute_inline(s, block, st) ? 1 : -1;
    case INLINE_INTO_PRODUCER: return sched_reverse_compute_inline(s, block, st) ? 1 : -1;
    case INLINE_NONE: return 1;
  }
  return 1;
}

/* A block that writes a 0-d constant (reads nothing) and is not an output
 * is inlined into its consumers. */
int rule_inline_const_scalars_apply(space_ctx *c, sched *s, int block, sched **out,
                                    dg_status *st) {
  (void)c;
  out[0] = s;
  dg_block *b = space_block(s, block);
  if (!b || space_is_root(s, b) || b->n_reads != 0 || b->n_writes != 1 ||
      b->writes[0].buf->ndim != 0 || space_is_output(s, b))
    return 1;
  /* TVM would raise where inlining is illegal; leaving the block is the same sketch minus a step */
  if (!can_inline(s, b, false)) return 1;
  return sched_compute_inline(s, block, st) ? 1 : -1;
}
