/* search.h: MetaSchedule-class schedule search.
 *
 * Design spaces (schedule rules applied over a kernel's blocks) and the
 * postprocessors that make a sampled schedule legal; the tuning database
 * (JSON lines, append-only); per-store features and the XGBoost cost
 * model; mutators of trace decisions and the evolutionary search; the
 * tuning loop, which drives candidate generation, measurement (a callback:
 * compiled C on the CPU, the GPU runtime) and postprocessing (a callback)
 * and records every result in the database.
 *
 * A schedule is data: everything here manipulates traces (sched.h) and the
 * kernels they produce; measured times are seconds.
 */
#ifndef DRAGON_SEARCH_H
#define DRAGON_SEARCH_H

#include "dragon/ir.h"
#include "dragon/sched.h"

/* ---- database ---- */

/* A directory of JSON-lines files (docs/search.md):
 *   workloads.jsonl  {"workload": hash, "spec": ..., "kernel": kernel text}
 *   records.jsonl    {"workload": hash, "trace": trace JSON, "run_secs":
 *                     [...] or null, "error": reason or null, "target": ...,
 *                     "date": ISO 8601 UTC, "kernel_hash": decimal,
 *                     "build": the compiler, "device": what measured it}
 *   baselines.jsonl  the same fields: measurements of the workload's
 *                    untuned kernel (search_baseline_schedule)
 * The workload hash is ir_func_hash of the unscheduled kernel, in decimal.
 * Each line is appended by one write() with O_APPEND and fsync'd, so a kill
 * loses at most the line being written; on open a torn last line is cut off
 * (a writer) or skipped (a reader), with a warning, and any other unreadable
 * line is skipped with a warning naming file:line. Records are unique by
 * (workload, trace JSON), and so are baselines; where old files repeat a
 * pair, the first line is the record and its time is the median over the
 * copies (search_record_secs). One writer at a time: search_db_open locks
 * the directory (flock on DIR/writer.lock) and refuses a second writer,
 * naming the directory and the holder's pid; readers take no lock and never
 * write. */

#define SEARCH_FAILED_SECS 1e10 /* TVM's run time of a failed candidate */

typedef struct {
  const char *workload;   /* decimal hash */
  const char *trace;      /* compact trace JSON, postprocessing included */
  const double *run_secs; /* (n_secs) seconds; n_secs 0 when it failed */
  int n_secs;
  const char *error;      /* why it failed, or NULL */
  const char *target;     /* "cpu", "cuda" */
  const char *date;       /* ISO 8601 UTC; NULL in search_db_add_record: now */
  uint64_t kernel_hash;   /* ir_func_hash of the scheduled kernel, 0: unknown */
  /* The compiler that built it (search_build_id: "dragon <commit> lower
   * <LOWER_VERSION>"); NULL in search_db_add_record: this binary's. "" in
   * records written before builds were recorded. */
  const char *build;
  /* What measured it ("NVIDIA H200 sm_90 driver 13000", "cpu"); NULL or
   * "": not recorded. */
  const char *device;
  /* Set by the database, ignored by search_db_add_record: the lines of its
   * file that hold this (workload, trace), 1 but in files written by
   * concurrent writers before the lock; when more, copies_secs is the
   * median over the copies that ran of each one's mean time
   * (SEARCH_FAILED_SECS when none ran), and it is the record's time. */
  int n_copies;
  double copies_secs;
} search_record;

/* "dragon <commit> lower <LOWER_VERSION>": this binary's compiler. */
const char *search_build_id(void);

typedef struct search_db search_db;

/* Opens a database for writing (creating the directory and files if
 * needed) and loads it. Takes the directory's writer lock first: a second
 * writer (another process, or another handle in this one) fails with
 * "DIR: the database is open for writing by another process (pid N)". The
 * lock is released by search_db_close or when the process ends; children
 * forked while it is held do not hold it. Warnings about skipped lines go
 * to stderr and are counted. */
bool search_db_open(const char *dir, search_db **out, dg_status *st);
/* Opens a database for reading: writes nothing (a torn last line is
 * skipped, not cut off), takes no lock, and fails naming the directory
 * when it does not exist. The functions that write fail on it. */
bool search_db_open_readonly(const char *dir, search_db **out, dg_status *st);
/* A database with no files: everything added or merged is held in memory
 * only (no lock, nothing written), for commands that read shards and
 * write none of them back (data build, data card, eval --search-db). */
bool search_db_open_memory(search_db **out);
/* Opens a database, as search_db_open, for work on some workloads only (a
 * labelling process and its shard of a split): the record and baseline
 * lines of every workload whose spec keep() refuses are left unread (a line
 * that opens `{"workload":"HASH",` is not even parsed), the others are held
 * as search_db_open holds them; every workload line and exhausted mark is
 * held, and records of a workload no line names too. Appends go on as
 * usual. Such a view cannot be packed, merged into or from, or exported
 * (search_db_write_shard, search_db_merge*, search_db_export_tvm refuse
 * it): each would miss or repeat the records it left unread. */
typedef bool (*search_db_keep_fn)(const char *spec, void *ctx);
bool search_db_open_some(const char *dir, search_db_keep_fn keep, void *ctx, search_db **out,
                         dg_status *st);
/* Record and baseline lines a view left unread (0: a whole database). */
int64_t search_db_unread_count(const search_db *db);
void search_db_close(search_db *db);
int search_db_warning_count(const search_db *db);

/* The workload's hash as decimal into hash (21 bytes); appends the
 * workload line the first time. */
bool search_db_add_workload(search_db *db, const char *spec, const dg_func *f,
                            char hash[21], dg_status *st);
int search_db_workload_count(const search_db *db);
const char *search_db_workload_hash(const search_db *db, int i);
/* NULL if the workload is unknown. */
const char *search_db_workload_spec(const search_db *db, const char *hash);
const char *search_db_workload_kernel(const search_db *db, const char *hash);

/* Appends a record unless one with the same (workload, trace) exists;
 * *added (may be NULL) says which. The trace is stored canonically. */
bool search_db_add_record(search_db *db, const search_record *r, bool *added,
                          dg_status *st);
int search_db_record_count(const search_db *db);
const search_record *search_db_record_at(const search_db *db, int i);
/* Records of one workload (all, failures included). */
int search_db_workload_trials(const search_db *db, const char *workload);
/* The indices (for search_db_record_at) of one workload's records, failures
 * included, in the order the database filed them; *n of them, NULL when
 * none. Found by an index, not a scan: valid until a record is added. */
const int *search_db_workload_records(const search_db *db, const char *workload, int *n);
/* Mean run time, SEARCH_FAILED_SECS for a failure; for a record with
 * copies (n_copies > 1), the median of theirs (copies_secs). */
double search_record_secs(const search_record *r);
/* A record counts (TVM's IsValid) if it ran (for one with copies: one of
 * them did) and its trace has at least one instruction before
 * EnterPostproc. */
bool search_record_valid(const search_record *r);
/* The k best valid records of a workload, best first; returns how many. */
int search_db_top_k(const search_db *db, const char *workload, int k,
                    const search_record **out);
/* Baselines: measurements of a workload's untuned kernel, kept apart from
 * the search's records (they never seed a search nor count as its trials).
 * Unique by (workload, trace) as records are. */
bool search_db_add_baseline(search_db *db, const search_record *r, bool *added,
                            dg_status *st);
int search_db_baseline_count(const search_db *db);
const search_record *search_db_baseline_at(const search_db *db, int i);
/* The median over the workload's baseline records that ran, of each one's
 * mean time; SEARCH_FAILED_SECS when none ran. *n (may be NULL) gets the
 * number of baseline records of the workload, failures included. */
double search_db_baseline_secs(const search_db *db, const char *workload, int *n);

/* Exhausted searches: a workload whose search ran out of new kernels
 * (a small space, measured whole) is marked once, with its record count
 * then, the build and the date (exhausted.jsonl: {"workload", "exhausted",
 * "build", "date"}), so that a labelling run does not search it again to
 * learn the same; the first mark of a workload stands. */
bool search_db_mark_exhausted(search_db *db, const char *workload, int64_t kernels,
                              dg_status *st);
/* The workload's record count when its search ran out; -1 if unmarked. */
int64_t search_db_workload_exhausted(const search_db *db, const char *workload);
int search_db_exhausted_count(const search_db *db);

/* Shards: a database's lines in one zstd-compressed JSON-lines file (with
 * zstd's content checksum), the form measured records are committed in: a
 * header {"t": "shard", "version": 1, "build": ..., "date": ..., counts},
 * then {"t": "workload", ...}, {"t": "record", ...}, {"t": "baseline",
 * ...} and {"t": "exhausted", ...} lines with the fields of the database
 * files (the header counts "exhausted" lines where there are some). */

/* Writes every record, baseline and exhausted mark of db that `except`
 * (may be NULL) does not hold, with the workload line of each workload they
 * name, to path (atomically: temporary file, fsync, rename). *n_lines (may
 * be NULL) gets the lines written besides the workloads'; with none, no
 * file is written. */
bool search_db_write_shard(const search_db *db, const search_db *except, const char *path,
                           int64_t *n_lines, dg_status *st);
/* Adds a shard's lines that db does not hold yet (appended to its files in
 * one write each). Unreadable lines are skipped with a warning naming
 * path:line; a corrupt or truncated stream, a bad checksum, or a header of
 * another version fail naming the file, adding nothing. *n_added (may be
 * NULL) gets the records and baselines added. */
bool search_db_merge_shard(search_db *db, const char *path, int64_t *n_added, dg_status *st);
/* Adds src's workloads, records, baselines and exhausted marks that dst
 * does not hold; *n_added counts all but the workloads. */
bool search_db_merge(search_db *dst, const search_db *src, int64_t *n_added, dg_status *st);

/* TVM's JSONDatabase files database_workload.json and
 * database_tuning_record.json in out_dir (created), with base64 of the
 * kernel text where TVM has base64 of SaveJSON(IRModule). */
bool search_db_export_tvm(const search_db *db, const char *out_dir,
                          dg_status *st);

/* ---- features and cost model ---- */

/* PerStoreFeature (docs/search.md): one row of SEARCH_FEATURE_LEN values
 * per buffer written by a non-constant store, in order of first store:
 * group 1 (57) arithmetic counts, loop kinds, GPU extents; group 2 (5 x 18)
 * buffer accesses; group 3 (10) arithmetic-intensity curve; group 4 (4)
 * allocation; group 5 (3) outer scope. */
#define SEARCH_FEATURE_LEN 164
#define SEARCH_FEAT_G2 57   /* first value of group 2 */
#define SEARCH_FEAT_G3 147  /* group 3 */
#define SEARCH_FEAT_G4 157  /* group 4 */
#define SEARCH_FEAT_G5 161  /* group 5 */

typedef struct {
  double *rows; /* (n, SEARCH_FEATURE_LEN) */
  int n;
} search_features;

/* Features of a scheduled kernel; is_gpu sets the GPU group. Deterministic. */
bool search_features_extract(const dg_func *f, bool is_gpu, search_features *out,
                             dg_status *st);
void search_features_free(search_features *x);
/* "float_add_sub", "B0.bytes", "arith_intensity_3", ... */
const char *search_feature_name(int i, char *buf, size_t n);
/* slog(x) = log2(|x| + 1), the scale of almost every feature. */
double search_slog(double x);

/* XGBModel: pack-sum XGBoost regression of normalised throughput. */
typedef struct {
  int max_depth;             /* 10 */
  double gamma;              /* 0.001 */
  double min_child_weight;   /* 0 */
  double eta;                /* 0.2 */
  int seed;                  /* 43 */
  int nthread;               /* 1 (0: XGBoost's default, all cores) */
  int num_warmup_samples;    /* 100: random scores below */
  int num_boost_round;       /* 10000 */
  int early_stopping_rounds; /* 50, on the training pack-sum RMSE */
  bool adaptive_training;    /* retrain only when data grew by >= 20% */
} search_xgb_opts;

void search_xgb_opts_default(search_xgb_opts *o);

typedef struct search_cost_model search_cost_model;

search_cost_model *search_cost_model_new(const search_xgb_opts *o, uint64_t seed);
void search_cost_model_free(search_cost_model *m);
/* Adds measured candidates of one workload group (costs in seconds,
 * >= SEARCH_FAILED_SECS for failures; candidates without rows are dropped)
 * and retrains as XGBModel does. */
bool search_cost_model_update(search_cost_model *m, const char *group,
                              const search_features *feats, const double *costs, int n,
                              dg_status *st);
/* The same data added without training, and a training on all of it. */
void search_cost_model_add(search_cost_model *m, const char *group,
                           const search_features *feats, const double *costs, int n);
bool search_cost_model_retrain(search_cost_model *m, dg_status *st);
/* Predicted scores, higher is faster; uniform random in [0, 1) until the
 * model is trained. */
bool search_cost_model_predict(search_cost_model *m, const search_features *feats, int n,
                               double *scores, dg_status *st);
bool search_cost_model_trained(const search_cost_model *m);
int search_cost_model_samples(const search_cost_model *m);
/* Saves to / loads from a directory: model.json (XGBoost) and data.bin
 * (the training data, magic + version), so that training continues from
 * the data of earlier workloads (warm start). */
bool search_cost_model_save(const search_cost_model *m, const char *dir, dg_status *st);
bool search_cost_model_load(search_cost_model *m, const char *dir, dg_status *st);

/* Features of records [first, first + n) of db (feats: n, group: n), each
 * trace replayed on its workload's kernel on `threads` threads (<= 0: one
 * per CPU). group[i] is the record's workload index in db, or -1 when it
 * has no features (unknown workload, kernel or trace that does not
 * replay). */
bool search_db_features(const search_db *db, int first, int n, int threads,
                        search_features *feats, int *group, dg_status *st);
/* Adds the db's last max_records records (<= 0: all), grouped by workload,
 * and trains once: the warm start of a run that begins on a fresh machine.
 * *n_used (may be NULL) gets the records with features. */
bool search_cost_model_fit_db(search_cost_model *m, const search_db *db, int max_records,
                              int threads, int *n_used, dg_status *st);

/* Ranking quality on held-out candidates: per group (group_of[i]), top-1
 * recall = 1 if the predicted best is the measured best; top-5 recall =
 * |predicted top 5 ∩ measured top 5| / min(5, group size); averaged over
 * groups with a valid measurement. */
typedef struct {
  double top1, top5;
  int n_groups;
} search_recall;
bool search_cost_model_recall(search_cost_model *m, const search_features *feats,
                              const double *costs, const int *group_of, int n,
                              search_recall *out, dg_status *st);

/* ---- mutators and evolutionary search ---- */

#define SEARCH_MUTATOR_LIST(X)                              \
  X(TILE_SIZE, "MutateTileSize", 0.9)                        \
  X(UNROLL, "MutateUnroll", 0.08)                            \
  X(THREAD_BINDING, "MutateThreadBinding", 0.02)

typedef enum {
#define X(e, name, p) SEARCH_MUT_##e,
  SEARCH_MUTATOR_LIST(X)
#undef X
  SEARCH_MUT_COUNT
} search_mutator;

const char *search_mutator_name(search_mutator m);
/* MetaSchedule's CUDA probability of each mutator. */
double search_mutator_cuda_prob(search_mutator m);
/* A new trace (postprocessing removed, one decision changed) or NULL when
 * the mutator finds nothing to change. Works on the trace alone. */
sched_trace *search_mutate(search_mutator m, const sched_trace *t, dg_rng *r);

/* Runs on a schedule whose design-space part was just replayed: enters the
 * postprocessing part (sched_enter_postproc) and applies the
 * postprocessors; false rejects the candidate. */
typedef bool (*search_postproc_fn)(sched *s, void *ctx, dg_status *st);

typedef struct {
  int population_size;        /* 512 */
  double init_measured_ratio; /* 0.2 */
  int init_min_unmeasured;    /* 50 */
  int max_fail_count;         /* 5 */
  int genetic_num_iters;      /* 4 */
  double genetic_mutate_prob; /* 0.85 */
  int genetic_max_fail_count; /* 10 */
  double eps_greedy;          /* 0.05 */
  int num_trials_per_iter;    /* 64 */
  int num_empty_iters_before_early_stop; /* 5 */
  /* 0: all the CPUs the process may use. Threads that build schedules
   * (replay, postprocessors, hash, features); a seed gives the same
   * candidates whatever the count. The task's postproc callback runs on
   * them concurrently, so it must be thread-safe (search_postproc_cuda is). */
  int threads;
} search_evolve_opts;

void search_evolve_opts_default(search_evolve_opts *o);

typedef struct {
  const dg_func *f;            /* the workload */
  sched_trace *const *spaces;  /* design spaces (decisions are re-drawn) */
  int n_spaces;
  search_postproc_fn postproc; /* NULL: just EnterPostproc */
  void *postproc_ctx;
  search_cost_model *model;    /* NULL: random scores */
  const char *group;           /* the workload's group in the model */
  bool is_gpu;                 /* features */
  double mutator_probs[SEARCH_MUT_COUNT];
  uint64_t seed;
} search_task;

/* A candidate: its full trace, its postprocessed kernel and that kernel's
 * structural hash (what dedup compares). */
typedef struct {
  sched_trace *trace;
  dg_func *func;
  uint64_t hash;
  double score;  /* the cost model's prediction */
  bool random;   /* an eps-greedy random pick */
} search_cand;

void search_cands_free(search_cand *c, int n);

typedef struct {
  double t_sample;  /* initial population: replay + postprocessing */
  double t_evolve;  /* mutation, replay, postprocessing */
  double t_model;   /* features, prediction, training */
  int64_t n_replayed, n_rejected; /* candidates built / refused */
  int64_t n_picked_best, n_picked_random; /* eps-greedy */
  int64_t n_dup_skipped;           /* already measured */
  int empty_rounds;
} search_evolve_stats;

typedef struct search_evolve search_evolve;

search_evolve *search_evolve_new(const search_task *task, const search_evolve_opts *o);
void search_evolve_free(search_evolve *ev);
/* A measured schedule (from the database): its kernel hash joins the
 * measured set and its trace the pool PickBestFromDatabase draws from. */
bool search_evolve_add_measured(search_evolve *ev, const sched_trace *trace, double secs,
                                uint64_t kernel_hash, dg_status *st);
/* Whether a kernel (ir_func_hash) was measured: in the database's records
 * the search was seeded with, or notified since. */
bool search_evolve_measured(const search_evolve *ev, uint64_t kernel_hash);
/* One round (GenerateMeasureCandidates): up to max new candidates into
 * *out (caller frees with search_cands_free). Returns the count; 0 when
 * nothing new was found (an empty round), -1 with st set when no design
 * space yields a schedule at all. */
int search_evolve_generate(search_evolve *ev, int max, search_cand **out, dg_status *st);
/* The words of generate's failure when every sample of every design space
 * is refused (the same on every try: labelling marks such a workload). */
#define SEARCH_NO_VALID_SCHEDULE "no design space yields a valid schedule"
/* Measured seconds of the last round's candidates (>= SEARCH_FAILED_SECS:
 * failed): they join the measured pool and train the cost model. */
bool search_evolve_notify(search_evolve *ev, const search_cand *c, const double *secs, int n,
                          dg_status *st);
/* True once num_empty_iters_before_early_stop rounds came back empty. */
bool search_evolve_stopped(const search_evolve *ev);
const search_evolve_stats *search_evolve_get_stats(const search_evolve *ev);

/* The tuning loop (tune.c). */
typedef struct {
  double secs[8]; /* repeats, seconds */
  int n_secs;     /* 0: failed */
  char error[256];
  /* never built: the measurement's deadline came first (n_secs 0). Not a
   * result: the tuner records nothing and the search may draw it again. */
  bool not_measured;
  /* with not_measured: the GPU's memory was full when it ran (another
   * process held it), so it was neither built nor refused */
  bool memory_full;
} search_measure_result;

/* Whether a measurement's error says the GPU's memory was full
 * (CUDA_ERROR_OUT_OF_MEMORY): a failure of the moment, not a verdict on
 * the kernel. Such a result is never recorded, and a record or baseline
 * line that says so (written before this rule) is not loaded: the kernel
 * counts as unmeasured, and its workload is labelled again. */
bool search_error_memory_full(const char *error);

/* Where a measurement hands each candidate's result the moment it is
 * final, so that the tuner records it at once and a kill loses at most the
 * candidates in flight. */
typedef struct {
  void (*fn)(void *ctx, int i, const search_measure_result *r);
  void *ctx;
} search_measure_sink;

/* Measures n candidates of workload f (out[i] for cand[i]). With a sink
 * (may be NULL), calls it once for each i as soon as out[i] is final. */
typedef void (*search_measure_fn)(void *ctx, const dg_func *f, const search_cand *cand, int n,
                                  search_measure_result *out, const search_measure_sink *sink);
/* Design spaces of f: *out gets n traces (the caller frees each and the
 * array). */
typedef bool (*search_space_fn)(void *ctx, const dg_func *f, sched_trace ***out, int *n,
                                dg_status *st);

typedef struct search_tune_result search_tune_result; /* below */

typedef struct {
  const char *spec;            /* the workload, as recorded in the database */
  const dg_func *f;
  int64_t max_trials;          /* in total for the workload, earlier runs included */
  search_space_fn space;
  void *space_ctx;
  search_postproc_fn postproc;
  void *postproc_ctx;
  search_measure_fn measure;
  void *measure_ctx;
  search_cost_model *model;    /* NULL: random scores */
  const char *target;          /* recorded: "cpu", "cuda" */
  bool is_gpu;
  search_evolve_opts evolve;
  double mutator_probs[SEARCH_MUT_COUNT];
  uint64_t seed;
  FILE *progress;              /* per-round lines; NULL: quiet */
  const char *device;          /* recorded: what measures ("cpu", the GPU); NULL: "" */
  double deadline;             /* dg_now() after which no round starts; 0: none */
  /* Asked after each round whether to go on (NULL: until max_trials). */
  bool (*keep_going)(void *ctx, const search_tune_result *so_far);
  void *keep_going_ctx;
  /* Measure nothing: stop at the first round that has candidates, so that
   * the result's exhausted says whether the search has anything new left
   * (labelling's search for spaces measured whole, without a GPU). That
   * round's candidates go to probe (may be NULL) before they are freed:
   * a plan compiled ahead (data_plan_run). */
  bool probe_only;
  void (*probe)(void *ctx, const search_cand *c, int n);
  void *probe_ctx;
  /* A first round chosen beforehand (a plan compiled ahead, measured on
   * another machine): compact trace JSONs, each replayed on f exactly; the
   * kernels measured already are left out, and the search draws its own
   * rounds after it. NULL: none. */
  const char *const *planned;
  int n_planned;
} search_tune_opts;

void search_tune_opts_default(search_tune_opts *o);

struct search_tune_result {
  int64_t trials;      /* records of the workload now */
  int64_t new_trials;  /* measured by this call */
  int rounds;
  double best_secs;    /* SEARCH_FAILED_SECS if none ran */
  double best_before_round; /* best_secs before the last round */
  bool deadline_hit;   /* stopped by opts.deadline */
  bool memory_full;    /* stopped: the GPU's memory was full (search_error_memory_full) */
  bool exhausted;      /* the search stopped early: rounds found nothing new */
  int planned;         /* of the planned traces, measured as the first round */
  double t_sample, t_model, t_measure, t_total;
};

bool search_tune(search_db *db, const search_tune_opts *o, search_tune_result *out,
                 dg_status *st);

/* Measurement by compiled C on the CPU (the C emulation of GPU-bound
 * kernels): compile with rt_cpu_compile, check against the float64
 * reference, time `repeats` runs; each candidate runs in a child process
 * with a timeout so a crash or a hang costs one candidate. With workers >
 * 1 the candidates are split over that many processes. */
typedef struct {
  int repeats;      /* 3 */
  double timeout_s; /* 10 */
  uint64_t seed;    /* data */
  int workers;      /* 1 */
} search_cpu_measure;
void search_measure_cpu(void *ctx, const dg_func *f, const search_cand *cand, int n,
                        search_measure_result *out, const search_measure_sink *sink);

/* Measurement on the GPU (measure_cuda.c): per workload the inputs and the
 * float64 reference are computed once on the CPU; per round the candidates
 * are lowered, emitted as CUDA and compiled by NVRTC on `threads` threads,
 * each handed to a crash-isolated worker as soon as it is compiled (the
 * worker keeps the workload's device buffers across candidates) and run
 * one at a time on the GPU: checked on the first run, then `repeats` runs
 * timed with the L2 flushed before each (the median is recorded). Init
 * fails clearly where there is no GPU or NVRTC. */
typedef struct search_cuda_measure_state search_cuda_measure_state;
typedef struct search_cuda_measure {
  int repeats;      /* timed runs, 1..8 */
  double timeout_s; /* per run of a candidate */
  uint64_t seed;    /* data */
  search_cuda_measure_state *state;
  int threads;      /* lowering and compiling; 0: one per CPU but one */
  /* init succeeds where no GPU is seen: every candidate that compiles then
   * fails with the worker's reason (tests of the pipeline without a GPU) */
  bool allow_no_gpu;
  /* NVRTC seconds a candidate may take before its compilation is stopped
   * (it then fails, "stopped after ..."); 0: no limit */
  double compile_limit_s;
  /* dg_now() after which no candidate is built (0: none): the ones not
   * begun come back not_measured, those begun are measured, so that a
   * round ends within a compile of the deadline (a labelling window's
   * end) */
  double deadline;
  /* Set by init: the GPU that measures ("NVIDIA H200 sm_90 driver 13000"),
   * recorded with every record; the architecture compiled for ("sm_90"). */
  char device[160];
  char arch[16];
  /* Since init, over every call: where candidates got to and where the
   * time went. Thread-seconds are summed over the threads; the waits are
   * wall time of the calling thread, which waits either for the GPU worker
   * (a job is running) or for a compile (none is ready to run). */
  struct {
    int64_t candidates, lowered, compiled, ran, passed;
    int64_t cached; /* of the compiled, how many came from the NVRTC cache */
    int64_t memory_full; /* of the ran, how many found the GPU's memory full (not recorded) */
    double t_lower;        /* thread-seconds lowering and emitting CUDA */
    double t_compile;      /* thread-seconds in NVRTC */
    double t_gpu_wait;     /* waiting for a worker's result */
    double t_compile_wait; /* the GPU idle, waiting for a compile (or a workload's data) */
    double t_worker;       /* seconds in the worker's jobs, by its clock */
    double t_held;         /* of those, holding the GPU: the GPU's own cost */
    double t_wall;         /* seconds in search_measure_cuda */
    double t_data;         /* of those, until the workloads' data (inputs, references)
                              was made: search_measure_cuda_many builds meanwhile */
    double t_data_build;   /* thread-seconds compiling the float64 references (C) */
    double t_data_run;     /* thread-seconds running them (and writing the files) */
  } stats;
} search_cuda_measure;
bool search_cuda_measure_init(search_cuda_measure *m, dg_status *st);
void search_cuda_measure_free(search_cuda_measure *m);
/* Adds from's stats to into's (contexts measuring side by side). */
void search_cuda_measure_add_stats(search_cuda_measure *into, const search_cuda_measure *from);
/* Makes, at once on m->threads threads (0: every core), the data files
 * (inputs and float64 reference) of the workloads that search_measure_cuda
 * is about to measure and has not kept (it keeps the last 64). A workload
 * whose file cannot be made is tried again, and its candidates fail with
 * the reason, when it is measured. */
void search_cuda_measure_prepare(search_cuda_measure *m, const dg_func *const *f, int n);
/* The same in two halves, so that the files are made on threads while m
 * measures other workloads: start reads what m keeps and starts the
 * threads (the first 32 distinct workloads of f, copied); finish, called
 * where m is not measuring, waits for them and keeps what they made (a
 * workload m kept meanwhile keeps its own file). The threads touch m only
 * to read its seed. NULL from start (no measurement set up, n <= 0) is
 * finished as nothing. */
typedef struct search_cuda_data search_cuda_data;
search_cuda_data *search_cuda_measure_prepare_start(search_cuda_measure *m, const dg_func *const *f, int n);
void search_cuda_measure_prepare_finish(search_cuda_measure *m, search_cuda_data *x);
void search_measure_cuda(void *ctx, const dg_func *f, const search_cand *cand, int n,
                         search_measure_result *out, const search_measure_sink *sink);
/* As search_measure_cuda, for candidates of many workloads (f[i] is
 * cand[i]'s): their data files made at once on threads, then every
 * candidate built on every core in one round while the GPU measures those
 * ready, instead of a round per workload (whose builds would wait for one
 * another and leave cores idle). The sink is called with i as above. */
void search_measure_cuda_many(void *ctx, const dg_func *const *f, const search_cand *cand, int n,
                              search_measure_result *out, const search_measure_sink *sink);

/* A design space read from a trace JSON file (the hand-written ones). */
typedef struct {
  const char *path;
} search_space_file;
bool search_space_from_file(void *ctx, const dg_func *f, sched_trace ***out, int *n,
                            dg_status *st);

/* ---- design spaces ---- */

/* MetaSchedule's schedule rules applied to a kernel's blocks in post-order
 * (PostOrderApply; docs/design-spaces.md says where dragon differs). A rule
 * may turn one schedule into several (CrossThreadReduction: with and
 * without; MultiLevelTiling on sm_80+: without and with a software
 * pipeline of 4 or 5 stages); each is a sketch, and the design space is the
 * list of sketch traces with the decisions drawn while generating. */

/* The target attributes the rules and postprocessors read. */
typedef struct {
  int arch;                      /* sm_XX: 90 */
  int64_t max_threads_per_block; /* 1024 */
  int64_t warp_size;             /* 32 */
  int64_t max_threadblocks;      /* 256: AutoBind, RewriteUnboundBlock */
} search_target;

extern const search_target search_target_sm90;

/* X(enum suffix, TVM name), in the order of MetaSchedule's CUDA tensor-core
 * defaults (DefaultCUDATensorCore without ApplyCustomRule). */
#define SEARCH_RULE_LIST(X)                                  \
  X(MLT_TC, "MultiLevelTilingTensorCore")                    \
  X(MLT, "MultiLevelTiling")                                 \
  X(INLINE_CONST_SCALARS, "InlineConstantScalars")           \
  X(AUTO_INLINE, "AutoInline")                               \
  X(CROSS_THREAD_REDUCTION, "CrossThreadReduction")          \
  X(PARALLEL_VECTORIZE_UNROLL, "ParallelizeVectorizeUnroll") \
  X(AUTO_BIND, "AutoBind")

typedef enum {
#define X(e, name) SEARCH_RULE_##e,
  SEARCH_RULE_LIST(X)
#undef X
  SEARCH_RULE_COUNT
} search_rule;

const char *search_rule_name(search_rule r);
bool search_rule_from_name(const char *s, search_rule *out);

typedef struct {
  const search_target *target; /* NULL: search_target_sm90 */
  const search_rule *rules;    /* NULL: every rule, in SEARCH_RULE_LIST order */
  int n_rules;
  uint64_t seed;               /* the decisions drawn while generating */
  /* No software-pipeline sketches (MultiLevelTiling's 4- and 5-stage
   * variants): for labels measured by a lowering that does not pipeline,
   * so that no sketch carries annotations that change nothing. */
  bool no_software_pipeline;
} search_space_opts;

typedef struct {
  sched_trace **sketches; /* (n) full traces, decisions included */
  int n;
  int n_undone;           /* rule applications that failed midway and were undone */
  char undone[256];       /* the first such failure */
  int n_fallbacks;        /* tensor-core blocks tiled by MultiLevelTiling instead */
  char fallback[256];     /* the first, with the reason */
} search_space;

/* Generates the design space of f (which must pass ir_verify). Fails only
 * if f cannot be scheduled at all; a rule step that fails midway is undone
 * (the sketch continues without it) and counted in n_undone. */
bool search_space_generate(const dg_func *f, const search_space_opts *o, search_space *out,
                           dg_status *st);
void search_space_free(search_space *sp);
/* A search_space_fn for search_tune: ctx is a search_space_opts * or NULL. */
bool search_space_cuda(void *ctx, const dg_func *f, sched_trace ***out, int *n, dg_status *st);

/* ---- postprocessors ---- */

/* X(enum suffix, TVM name), in the order of DefaultCUDATensorCore. */
#define SEARCH_POSTPROC_LIST(X)                                         \
  X(DISALLOW_DYNAMIC_LOOP, "DisallowDynamicLoop")                        \
  X(REWRITE_COOPERATIVE_FETCH, "RewriteCooperativeFetch")                \
  X(REWRITE_UNBOUND_BLOCK, "RewriteUnboundBlock")                        \
  X(REWRITE_PARALLEL_VECTORIZE_UNROLL, "RewriteParallelVectorizeUnroll") \
  X(REWRITE_REDUCTION_BLOCK, "RewriteReductionBlock")                    \
  X(VERIFY_GPU_CODE, "VerifyGPUCode")                                    \
  X(REWRITE_TENSORIZE, "RewriteTensorize")

typedef enum {
#define X(e, name) SEARCH_POSTPROC_##e,
  SEARCH_POSTPROC_LIST(X)
#undef X
  SEARCH_POSTPROC_COUNT
} search_postproc;

const char *search_postproc_name(search_postproc p);

/* TVM's ThreadExtentChecker, VerifyGPUCode's first step: at every block
 * annotated with meta_schedule.thread_extent_low/high_inclusive, the
 * product of the enclosing threadIdx extents (x taken as the warp size in
 * a warp_execution block) lies within the bounds; false with st naming the
 * block and its threads otherwise. t NULL: search_target_sm90. */
bool search_thread_extents_ok(const dg_func *f, const search_target *t, dg_status *st);

/* Applies one postprocessor to s (after EnterPostproc), recording its steps
 * in the trace as TVM records them. False: s is rejected, st says why (the
 * schedule may then be half rewritten: drop it). */
bool search_postproc_apply(search_postproc p, sched *s, const search_target *t, dg_status *st);

/* The postprocessors and their rejection counts. */
typedef struct {
  const search_target *target; /* NULL: search_target_sm90 */
  int64_t rejected[SEARCH_POSTPROC_COUNT];
  int64_t accepted;
} search_postprocs;

/* A search_postproc_fn for search_tune: EnterPostproc, then every
 * postprocessor in order until one rejects (counted in ctx, a
 * search_postprocs *, or NULL). */
bool search_postproc_cuda(sched *s, void *ctx, dg_status *st);

/* One sample of a design space: a sketch drawn uniformly, replayed with
 * every decision drawn anew from rng, then (with pp) postprocessed. NULL
 * with st set if the replay or a postprocessor rejects it (counted in
 * *pp, replay failures in *replay_failed when not NULL). */
sched *search_sample(const dg_func *f, const search_space *sp, search_postprocs *pp,
                     dg_rng *rng, int64_t *replay_failed, dg_status *st);

/* ---- the untuned baseline ---- */

/* TVM's DefaultGPUSchedule (tir.transform.DefaultGPUSchedule), the kernel
 * as TVM runs it untuned and what speedups are measured against, as a
 * schedule: every block without child blocks that is not yet bound to a
 * thread axis gets its data-parallel loops fused, split by the target's
 * thread count (and block count, beyond max_threadblocks x
 * max_threads_per_block iterations) and bound to blockIdx.x/threadIdx.x.
 * *out gets a schedule of f whose trace is the one TVM records, simplified
 * as TVM's Trace::Simplified (unused lookups dropped); src/search/
 * baseline.c has the steps. t NULL: search_target_sm90. False with st
 * naming the block where a block cannot be scheduled so. */
bool search_baseline_schedule(const dg_func *f, const search_target *t, sched **out,
                              dg_status *st);

#endif
