/* data_impl.h: what the data stage's files share and no one else needs. */
#ifndef DRAGON_DATA_IMPL_H
#define DRAGON_DATA_IMPL_H

#include "dragon/data.h"
#include "dragon/search.h"

/* The search a labelling run gives the i-th workload (spec, f) of its
 * list: MetaSchedule's CUDA design spaces (so) and postprocessors (pp),
 * the run's one cost model, the evolutionary search's population and
 * threads, the workload's seed. The measurement, the trial counts and
 * the stopping rules are the caller's. A plan (plan.c) draws its first
 * round with the same, so that it is the round the labeller would draw. */
void data_label_search(search_tune_opts *to, const char *spec, const dg_func *f, int64_t i,
                       search_space_opts *so, search_postprocs *pp, search_cost_model *model,
                       int population, int threads, uint64_t seed);

#endif
