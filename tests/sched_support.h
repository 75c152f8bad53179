/* sched_support.h: what the schedule tests share: parsing kernel text,
 * checking a scheduled kernel's numbers against the unscheduled one,
 * checking that its trace replays, graphs of trace files, and small value
 * constructors. */
#ifndef DRAGON_TEST_SCHED_SUPPORT_H
#define DRAGON_TEST_SCHED_SUPPORT_H

#include "dragon/rt.h"
#include "dragon/sched.h"

/* Parses kernel text; prints the error and returns NULL on failure. */
dg_func *ts_parse(const char *text);
/* g computes what orig computes: the interpreter on inputs from `seed`,
 * outputs poisoned, orig in float64; prints the first mismatch. */
bool ts_same_numbers_seed(const dg_func *orig, const dg_func *g, uint64_t seed);
bool ts_same_numbers(const dg_func *orig, const dg_func *g); /* seed 11 */
/* s's trace -> JSON -> replay on a fresh schedule of orig gives an equal
 * kernel and the same JSON; prints why not. */
bool ts_replays(const dg_func *orig, sched *s);
/* t replayed exactly on a fresh schedule of f (postprocessing included);
 * NULL after printing why it does not replay. */
sched *ts_replay(const dg_func *f, const sched_trace *t);
/* The scheduled kernel passes the verifier; prints why not. */
bool ts_verified(sched *s);
/* The scheduled kernel prints as `want`; prints both if not. */
bool ts_text_is(sched *s, const char *want);
/* A program's C source (codegen_emit_program_source: the program and the
 * float64 reference of ref) compiled on the CPU: both run on inputs drawn
 * from dist with outputs poisoned, and the program's outputs match;
 * prints why not. */
bool ts_source_matches(const dg_func *ref, const char *src, rt_dist dist);

/* The TSEL graph of a trace file on kernel f (spec in its header), as
 * dragon writes labels (no why/expect lines); NULL on failure. */
char *ts_graph_of(const char *trace_path, const char *spec, const dg_func *f);

/* GMM (batch_matmul b=1, 128^3, f32), its hand schedule's graph
 * (schedules/GMM.json) and a measurement on two threads, for the tests
 * that judge on the GPU: true, or false with the reason to skip. need_gpu:
 * a GPU must be seen; else NVRTC is enough, and without a GPU every
 * candidate that compiles fails with the worker's reason. A set-up that
 * fails is a failure of the test (false, nothing left to free). */
struct search_cuda_measure;
bool ts_gmm_judging_open(bool need_gpu, dg_func **gmm, char **good, struct search_cuda_measure *m, char *why,
                         size_t n);

/* This process's measurement data files (search_cuda_measure's inputs
 * and references, /tmp/dragon-tune-PID-*). */
int ts_tune_data_files(void);

static inline sched_val ts_int(int64_t v) { return (sched_val){.kind = SV_INT, .i = v}; }
static const sched_val TS_NONE = {.kind = SV_NONE};

#endif
