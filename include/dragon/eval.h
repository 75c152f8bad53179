/* eval.h: judging schedules: the one road from a TSEL graph to a measured
 * kernel, and (later sections) the evaluation's metrics.
 *
 * Whoever wrote a graph (the search, the model, a user), it walks the same
 * gates in the same order: the text parses; its header names the kernel;
 * it type-checks against the kernel; it lowers to a trace (equal to an
 * expected one, where the caller has it); the trace replays exactly on the
 * kernel; the scheduled kernel builds (lowering, VerifyGPUCode, code for
 * the target, compiled); its outputs match the float64 reference on fresh
 * inputs; it is timed on the GPU. The result names the first gate that
 * failed and why, or that every gate asked for passed, with the times.
 * Example admission (`dragon data build`), `dragon optimize`, `dragon eval`
 * and the GRPO reward all call eval_score_tsel, so the model is trained and
 * judged by the same rules.
 */
#ifndef DRAGON_EVAL_H
#define DRAGON_EVAL_H

#include "dragon/ir.h"
#include "dragon/sched.h"
#include "dragon/tsel.h"

/* X(enum suffix, name), in the order a graph walks them. */
#define EVAL_GATE_LIST(X)                                                    \
  X(PARSE, "parse")     /* TSEL text -> graph */                             \
  X(HEADER, "header")   /* `tsel 1 kernel SPEC` names the kernel */          \
  X(CHECK, "check")     /* typed against the kernel (tsel_check) */          \
  X(LOWER, "lower")     /* graph -> trace (equal to the expected one) */      \
  X(REPLAY, "replay")   /* the trace replays exactly on the kernel */        \
  X(BUILD, "build")     /* lowered, VerifyGPUCode, emitted, compiled */      \
  X(NUMERIC, "numeric") /* outputs match the float64 reference */            \
  X(MEASURE, "measure") /* timed on the GPU */

typedef enum {
#define X(e, name) EVAL_GATE_##e,
  EVAL_GATE_LIST(X)
#undef X
  EVAL_GATE_COUNT,
  EVAL_PASSED = EVAL_GATE_COUNT, /* every gate asked for passed */
} eval_gate;

/* "parse", ..., "measure"; "passed" for EVAL_PASSED. */
const char *eval_gate_name(eval_gate g);
/* The gate (or EVAL_PASSED) of a name eval_gate_name gives; false if none. */
bool eval_gate_from_name(const char *name, eval_gate *out);

struct search_cuda_measure;

/* A card's ceilings: no kernel writes its outputs faster than the memory's
 * bandwidth, nor executes its statements' iterations (each at least a
 * multiply-add) faster than the card's peak (the tensor cores' dense
 * f16 rate, the highest, whatever the kernel's dtype). A time measured
 * below EVAL_ROOFLINE_SLACK of the bound is measured again, and refused
 * if it still is (a timing that physics forbids is a broken measurement,
 * or a kernel that skipped its work): a reward or a speedup is never
 * taken from one. */
typedef struct {
  double bytes_per_s;
  double fma_per_s;
} eval_roofline;
#define EVAL_ROOFLINE_SLACK 0.5
/* The ceilings of the card a measurement names (search_cuda_measure's
 * device: "NVIDIA H200 ...", "NVIDIA H100 80GB HBM3 ..."), from its
 * specification; false where the card is not known (then nothing is
 * refused). */
bool eval_roofline_of(const char *device, eval_roofline *out);
/* The fewest seconds kernel f can take under r: its outputs' bytes over
 * the bandwidth, the iterations of its blocks' bodies (none under a
 * condition) over the multiply-add rate, the larger. */
double eval_roofline_secs(const dg_func *f, const eval_roofline *r);

typedef struct {
  const dg_func *kernel;   /* the unscheduled kernel the graph is for */
  const char *spec;        /* HEADER: the graph must name this spec (NULL: any) */
  eval_gate last;          /* the last gate to run (EVAL_GATE_BUILD: no numbers) */
  /* LOWER: the trace must be exactly this trace JSON (NULL: any) */
  const char *expect_trace;
  /* BUILD: compile the emitted code (CUDA through NVRTC); false stops at
   * the verified, emitted source */
  bool compile;
  /* NUMERIC and MEASURE: on the GPU through this measurement (checked on
   * its first run against the float64 reference of its seed, then timed);
   * NULL: NUMERIC in the C emulation of the GPU program on the CPU, one
   * check per seed, and no MEASURE */
  struct search_cuda_measure *gpu;
  /* NUMERIC on the CPU: the kernel whose float64 results are expected
   * (NULL: kernel itself, unscheduled) */
  const dg_func *reference;
  const uint64_t *seeds;   /* NUMERIC on the CPU: fresh inputs per seed */
  int n_seeds;             /* 0: seeds 1 and 2 */
  /* MEASURE: the card's ceilings (NULL: eval_roofline_of gpu's device) */
  const eval_roofline *roofline;
} eval_score_opts;

typedef struct {
  eval_gate failed;        /* the first gate that failed, or EVAL_PASSED */
  char reason[512];        /* why it failed ("" when it passed) */
  sched_trace *trace;      /* from LOWER on (owned) */
  dg_func *scheduled;      /* from REPLAY on (owned) */
  uint64_t kernel_hash;    /* ir_func_hash of the scheduled kernel */
  double secs;             /* MEASURE: the median of the timed runs */
  double t_total;          /* wall seconds in eval_score_tsel */
} eval_score;

/* Runs the gates up to o->last on a graph's text (name stands for it in
 * messages, e.g. a file name or "sample 3"). Returns true when every gate
 * asked for passed; false with out->failed and out->reason otherwise. Never
 * crashes on any text. */
bool eval_score_tsel(const char *text, const char *name, const eval_score_opts *o,
                     eval_score *out);
void eval_score_free(eval_score *s);

/* The line guard of constrained decoding (train_decode_opts.guard, ctx an
 * eval_guard): the graph written so far through the gates up to the
 * replay and, once it has its `postproc` edit, up to the build (lowered
 * and VerifyGPUCode, nothing compiled). A block whose bound threads fall
 * outside its bounds (meta_schedule.thread_extent_low/high_inclusive) is
 * refused as soon as they are bound, with *back_to the edit whose factors
 * set them (tsel_thread_decision); a build refused at the postproc line
 * (the device's limits) is blamed on the latest edit that wrote factors
 * (tsel_last_decision), and one refused for shared memory on the widest
 * tile (tsel_widest_tile) with narrow->cap its inner extent scaled by the
 * limit over the bytes (at least 1). Threads out of bounds narrow the
 * blamed tile's thread factor (tsel_thread_factor) to the range that
 * brings them within the bounds, the other thread factors kept. */
typedef struct eval_guard_log eval_guard_log;
typedef struct {
  const dg_func *kernel;
  const char *spec;
  eval_guard_log *log; /* NULL: the refusals are not written down */
} eval_guard;
bool eval_guard_line(void *ctx, const char *text, size_t len, bool postprocessed, int *back_to,
                     tsel_tile_narrowing *narrow);

/* The guard's refusals written down (`dragon eval|optimize --guard-log
 * FILE`), to see where decoding spends its take-backs: one JSON line a
 * refusal, {"spec", "edits" (the graph's edits so far), "line" (the last
 * edit line, the one refused), "gate", "reason", "blame" (the edit taken
 * back to, 0: the refused line alone), "graph" (the text judged)}, each
 * appended whole under a lock
 * by any number of writers. Opened for appending: a resumed run adds to
 * it. eval_guard_log_close flushes and closes (also NULL). */
eval_guard_log *eval_guard_log_open(const char *path, dg_status *st);
bool eval_guard_log_close(eval_guard_log *log, dg_status *st);

/* One graph of a batch: its text and the kernel it is for. */
typedef struct {
  const char *text;
  const char *name;
  const dg_func *kernel;
  const char *spec;         /* NULL: the header is not checked */
  const char *expect_trace; /* NULL: any */
} eval_item;

/* Scores n graphs, of any workloads, as eval_score_tsel would one by one
 * (o's kernel, spec and expect_trace are ignored: each item has its own):
 * the gates up to the build on `threads` threads (<= 0: every core), then,
 * with o->gpu and o->last >= EVAL_GATE_NUMERIC, every graph that built is
 * checked and timed in one round on the GPU (search_measure_cuda_many:
 * the workloads' data made at once, every graph compiled by the
 * measurement on its threads as the GPU runs the ones ready). out[i] for
 * items[i] (each freed with eval_score_free). */
void eval_score_batch(const eval_item *items, int n, const eval_score_opts *o, int threads,
                      eval_score *out);
/* On the GPU (o->gpu), the graphs out[idx[0..k)] of a batch of n that
 * passed are measured `times` times more in one round (their images cached
 * from the first), and each one's time becomes the median of its
 * measurements: where a selection ranks noisy times (a GRPO group's
 * fastest samples) a lucky outlier is measured again before it wins. One
 * that fails a new measurement (wrong numbers on another run: a race)
 * fails with its reason. Every other output of the batch whose scheduled
 * kernel is equal (its kernel hash) takes the same outcome, as it shared
 * the first measurement. Nothing happens without a GPU. */
void eval_score_measure_again(const eval_item *items, eval_score *out, int n, const int *idx, int k,
                              const eval_score_opts *o, int times);

/* ---- choosing a schedule (optimize.c) ------------------------------------------ */

/* What `dragon optimize` keeps of a kernel's candidates: graphs written by
 * the model (samples), the user's prior, and the untuned baseline
 * (DefaultGPUSchedule, lifted to a graph), all walked through the one road
 * in one batch. With a GPU every candidate that passes is timed and the
 * fastest sample is kept if it beats the prior by min_gain (else the
 * prior is kept) and the baseline at all (else the baseline is kept).
 * Without one the numbers are checked in the C emulation and nothing is
 * timed: the first sample that passes is kept, else the prior, else the
 * baseline. */
typedef enum { EVAL_PICK_SAMPLE, EVAL_PICK_PRIOR, EVAL_PICK_BASELINE } eval_pick_kind;

typedef struct {
  const dg_func *kernel;
  const char *spec;                  /* the header every graph must carry */
  struct search_cuda_measure *gpu;   /* NULL: checked on the CPU, not timed */
  double min_gain;                   /* over the prior; <= 0: 1.03 */
  int threads;                       /* <= 0: every core */
  /* the samples alone, no baseline to fall back on: for a caller that
   * judges samples and needs the baseline only for its time (dragon eval
   * without a GPU); then false when no sample passes */
  bool no_baseline;
  /* without a GPU: stop each sample after the build gate (no numbers in
   * the C emulation): what the decoding gets through, quickly; a sample
   * that passes then passed no numeric check */
  bool no_numbers;
} eval_pick_opts;

typedef struct {
  eval_pick_kind kind;
  int sample;            /* SAMPLE: which one (0-based) */
  char *graph;           /* the kept graph's TSEL text (owned) */
  char *trace_json;      /* its trace (owned) */
  double secs;           /* its time (0: not timed) */
  double baseline_secs;  /* 0: not timed */
  double prior_secs;     /* 0: no prior or not timed */
  int n_samples, n_passed;       /* samples, and those that passed every gate */
  int failed_at[EVAL_GATE_COUNT]; /* samples stopped at each gate */
  eval_score *scores;    /* (n_samples) each sample's walk */
  eval_score prior;      /* the prior's walk (failed == EVAL_PASSED if none given) */
  bool has_prior;
  char why[512];         /* why this candidate was kept */
} eval_pick;

/* Scores the candidates and keeps one as above. prior may be NULL. False
 * (st set) only when not even the baseline passes; out is then still
 * filled for the report. */
bool eval_pick_best(const char *const *samples, int n, const char *prior,
                    const eval_pick_opts *o, eval_pick *out, dg_status *st);
void eval_pick_free(eval_pick *p);

/* ---- evaluation (run.c) --------------------------------------------------------- */

/* `dragon eval`: for each task (a held-out workload) the writer's first
 * output, judged as `dragon optimize` judges it (eval_pick_best with that
 * one sample: every gate, and on the GPU the time beside the baseline's,
 * measured in the same batch). Correct@1 counts first outputs that pass
 * every gate; fast_2 and fast_10 those that are also 2x / 10x faster than
 * the baseline (timed runs only). */

/* Writes the first output for a kernel (a refinement of prior where prior
 * is not NULL): the graph's text (caller frees), or NULL with st set (the
 * task then fails at the parse gate with st's message); *tokens gets what
 * it fed the model (0 for another writer). */
typedef char *(*eval_writer_fn)(void *ctx, const dg_func *f, const char *spec, const char *prior,
                                uint64_t seed, int64_t *tokens, dg_status *st);

/* Writes the first outputs of n kernels together (kernel i with seeds[i]
 * and priors[i], priors NULL for none): texts[i] as eval_writer_fn gives
 * kernel i alone, or NULL with sts[i]; tokens[i] what it fed the model. */
typedef void (*eval_group_writer_fn)(void *ctx, const dg_func *const *f, const char *const *specs,
                                     const char *const *priors, const uint64_t *seeds, int n, char **texts,
                                     int64_t *tokens, dg_status *sts);

typedef struct {
  const char *const *specs; /* the tasks: canonical workload specs */
  int n;
  eval_writer_fn write;
  void *write_ctx;
  /* where not NULL, the tasks are written ahead in groups of up to 16
   * (four groups a write thread at least), each group by one call on a
   * thread of its own, with write_ctx */
  eval_group_writer_fn write_group;
  int write_group_size; /* > 0: the tasks a group holds (one writer a group
                           that writes them all in one call: the GPU's,
                           its cache rows taking them in turn); with gpu
                           and one write thread, the groups grow from 64
                           tasks to it and are written on a thread beside
                           the judging */
  struct search_cuda_measure *gpu; /* NULL: the C emulation, nothing timed */
  uint64_t seed;                   /* task i's output is written with seed + i */
  int threads;                     /* the checks; <= 0: every core */
  FILE *progress;                  /* a line per task, or NULL */
  /* tasks written at once (each on a thread of its own; write must then be
   * thread-safe); <= 1: one after another. The outputs do not depend on
   * it: task i is written with seed + i. */
  int write_threads;
  /* resuming: done[i], where not NULL, is task i's outcome from an earlier
   * run of the same evaluation, taken as it is (NULL: none resumed) */
  struct eval_task *const *done;
  /* called with each task judged here, in order, as soon as it is (to keep
   * it: a run stopped later resumes after it); false stops the run */
  bool (*on_task)(void *ctx, int i, const struct eval_task *t, dg_status *st);
  void *on_task_ctx;
  /* the search's labels: labels[i], where labels and it are not NULL, is
   * task i's best measured schedule as a graph (its split's construction
   * target, data/examples/); on the GPU it is judged and timed beside the
   * output and the baseline in the same batch, so that the output's speed
   * is also read against the search's (not judged without a GPU) */
  const char *const *labels;
  /* refinement tasks: priors[i], where priors is not NULL, is task i's
   * prior graph (a correct, slower schedule of its workload), in its
   * prompt; on the GPU it is timed beside the output, which is read
   * against it (faster: at least EVAL_REFINE_GAIN times its speed) */
  const char *const *priors;
  /* the tasks' names where a workload is more than one task (refinement:
   * its examples' names); NULL: each task is named by its spec */
  const char *const *names;
  /* without a GPU: every task stops after the build gate (eval_pick_opts'
   * no_numbers); "passed" is then no Correct@1 */
  bool no_numbers;
  /* another writer's outputs: against[i], where against and it are not
   * NULL, is its graph for task i ("" where it wrote none), judged beside
   * this output (on the GPU timed in the same batch): which of the two is
   * correct, and where both are, which is faster (an SFT model's outputs
   * against an RL model's) */
  const char *const *against;
  /* on the GPU: batches judged at once, each judge with a measuring
   * context of its own set up as gpu is (its stats added to gpu's at the
   * end), while another waits for its slowest compile; <= 0: 1 beside a
   * GPU writer writing the groups (the writer's steps wait for the GPU's
   * lock behind every measuring worker), else 2 */
  int judges;
  /* on the GPU with one write thread: every group written before any batch
   * is judged (the writer alone on the GPU and the cores), then the judges
   * (2 by default), instead of the groups written beside the judging */
  bool write_first;
} eval_run_opts;

/* A refinement counts as faster than its prior when it is at least this
 * many times faster: the gain `dragon optimize` keeps a refinement for
 * (eval_pick_opts.min_gain), above the repeats' noise. */
#define EVAL_REFINE_GAIN 1.03

typedef struct eval_task {
  char *spec;
  char *name;              /* the task's name where it is not its spec (owned; NULL: the spec) */
  char family[64];
  eval_gate gate;          /* the first gate the output failed, or EVAL_PASSED */
  char reason[512];
  double secs;             /* the output's time; 0: not timed */
  double baseline_secs;    /* 0: not timed */
  double label_secs;       /* the search label's time beside it; 0: no label, or not timed */
  double prior_secs;       /* a refinement's prior's time beside it; 0: none, or not timed */
  bool has_against;        /* another writer's output was judged beside it (eval_run_opts.against) */
  eval_gate against_gate;  /* that output's first failed gate, or EVAL_PASSED */
  double against_secs;     /* its time; 0: not correct, or not timed */
  double t_write, t_check; /* seconds writing, checking and timing */
  int64_t tokens;
  char *graph;             /* the output as written (owned; NULL: none) */
} eval_task;

typedef struct {
  eval_task *tasks;
  int n;
  bool timed;
  bool refine; /* refinement tasks: each read against its prior */
  int correct, fast_2, fast_10;
  int faster, faster_2; /* refinements correct and EVAL_REFINE_GAIN / 2x faster than their priors */
  double t_total;
  /* against another writer (eval_run_opts.against): the tasks with its
   * output, those where either output is correct, those where this one is
   * correct and the other is not, and where both are, this one faster
   * (timed only; equal kernels are measured once, so they tie) */
  int against_n, against_either, against_only, against_faster;
  int judges;         /* on the GPU: the batches' judges (eval_run_opts.judges), 0 elsewhere */
  int judged_at_once; /* batches being judged at once, at most */
} eval_result;

/* Runs every task; false (st set) only when a task cannot be set up (a
 * spec that does not build); every output, whatever it is, is judged. */
bool eval_run(const eval_run_opts *o, eval_result *out, dg_status *st);
void eval_result_free(eval_result *r);
/* Against the search (tasks with a timed label): the label's time over the
 * output's where the output passed, else 0 (the output lost). */
double eval_task_vs_label(const eval_task *t);
/* The other writer's output's time over this one's (both correct and
 * timed; > 1: this one is faster), else 0. */
double eval_task_vs_against(const eval_task *t);
/* A refinement against its prior: the prior's time over the output's
 * where both were timed and the output passed, else 0. */
double eval_task_vs_prior(const eval_task *t);
/* The outcomes as JSON (every task; the totals; what was evaluated) and
 * as a Markdown table by family; where labels were timed, each family's
 * median speed against the search over its labelled tasks that passed,
 * and the share of labelled tasks at least 0.9x the search's speed.
 * Caller frees. */
char *eval_result_json(const eval_result *r, const char *model, const char *split, uint64_t seed,
                       double temperature);
char *eval_result_table(const eval_result *r, const char *model, const char *split);
/* The median of x[0..n) (sorted in place; for an even n the geometric mean
 * of the middle two: the values are ratios or times), 0 for none. */
double eval_median_ratio(double *x, int n);

/* ---- against the search (versus.c) ----------------------------------------- */

/* The search's trial counts an output is read against: 64, 256, 1,000. */
enum { EVAL_SEARCH_POINTS = 3 };
extern const int eval_search_trials[EVAL_SEARCH_POINTS];

/* One correct output with a timed label, against its workload's search as
 * its records tell it (the labelling run on the label's device). */
typedef struct {
  int task; /* index into the eval_result */
  char family[64];
  double model_cost;    /* seconds: writing, the gates, one measurement */
  double model_speedup; /* the output over the baseline, 0: not timed */
  int trials;           /* the search's trials (records) on that device */
  double per_trial_s;   /* its mean wall seconds a trial, 0: unknown */
  /* at eval_search_trials[k] trials (0: no point there): the search's time
   * over the output's, the search's speedup over the baseline, its wall
   * seconds */
  double vs[EVAL_SEARCH_POINTS], search_speedup[EVAL_SEARCH_POINTS], wall[EVAL_SEARCH_POINTS];
  int at_cost_trials; /* trials the search's rate fits in model_cost */
  double vs_at_cost;  /* the search's best of those over the output, 0: none measured */
} eval_versus_task;

typedef struct {
  eval_versus_task *tasks;
  int n;
} eval_versus;

struct search_db;
/* Reads every task of r whose output passed beside a timed label against
 * db's records of its workload (see versus.c for how the search's time at
 * N trials is brought to the run's clock); tasks whose workload db has no
 * valid record of are left out. */
bool eval_versus_search(const eval_result *r, const struct search_db *db, eval_versus *out, dg_status *st);
void eval_versus_free(eval_versus *v);
/* The comparison as a Markdown section, a row per family and one for all.
 * Caller frees. */
char *eval_versus_table(const eval_versus *v);
/* The cost-speed plane's points, as tab-separated lines: "model COST
 * SPEEDUP" and "searchN WALL SPEEDUP" (speedups over the baseline). */
void eval_versus_points(const eval_versus *v, dg_str *out);

#endif
