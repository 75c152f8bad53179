/* prim_table.c: the registry: instruction kind -> apply function, made
 * from the one list of instructions (SCHED_INST_LIST in sched.h), so that
 * a kind without its function, or a function without its kind, does not
 * compile. */
#include "sched/sched_impl.h"

const prim_apply_fn sched_prim_table[SCHED_INST_COUNT] = {
#define X(e, name, fn, pure, nin, nattr, dec, out) [SCHED_INST_##e] = prim_##fn,
    SCHED_INST_LIST(X)
#undef X
};

/* every kind has its entry: the list and the enum are one */
#define X(e, name, fn, pure, nin, nattr, dec, out) +1
_Static_assert(0 SCHED_INST_LIST(X) == SCHED_INST_COUNT, "an apply function per instruction kind");
#undef X
