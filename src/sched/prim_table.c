/* prim_table.c: the registry: instruction kind -> apply function. */
#include "sched/sched_impl.h"

const prim_apply_fn sched_prim_table[SCHED_INST_COUNT] = {
    [SCHED_INST_GET_BLOCK] = prim_get_block,
    [SCHED_INST_GET_LOOPS] = prim_get_loops,
    [SCHED_INST_GET_CHILD_BLOCKS] = prim_get_child_blocks,
    [SCHED_INST_GET_PRODUCERS] = prim_get_producers,
    [SCHED_INST_GET_CONSUMERS] = prim_get_consumers,
    [SCHED_INST_SPLIT] = prim_split,
    [SCHED_INST_FUSE] = prim_fuse,
    [SCHED_INST_REORDER] = prim_reorder,
    [SCHED_INST_ADD_UNIT_LOOP] = prim_add_unit_loop,
    [SCHED_INST_PARALLEL] = prim_parallel,
    [SCHED_INST_VECTORIZE] = prim_vectorize,
    [SCHED_INST_UNROLL] = prim_unroll,
    [SCHED_INST_BIND] = prim_bind,
    [SCHED_INST_ANNOTATE] = prim_annotate,
    [SCHED_INST_UNANNOTATE] = prim_unannotate,
    [SCHED_INST_SAMPLE_PERFECT_TILE] = prim_sample_perfect_tile,
    [SCHED_INST_SAMPLE_CATEGORICAL] = prim_sample_categorical,
    [SCHED_INST_ENTER_POSTPROC] = prim_enter_postproc,
};
