/* data.h: the data stage: the universe of workloads and its splits, then
 * (the sections after) the steps that read them: labelling, examples.
 *
 * The splits are deterministic: the same parameters give the same bytes,
 * so their file is committed and checked by regenerating it.
 * docs/data.md describes the files and the commands.
 */
#ifndef DRAGON_DATA_H
#define DRAGON_DATA_H

#include "dragon/base.h"

/* ---- splits ---- */

/* The universe is wl_generate(seed, count) of every family; each of its
 * workloads gets exactly one split:
 *   heldout_family  every workload of one family (layernorm; its nearest
 *                   sibling, rmsnorm, trains);
 *   heldout_shape   one band [lo, hi] of one key per other family;
 *   train/val/test  the rest, 94/3/3% by a hash of the canonical spec.
 * Then the structural guard: workloads whose kernels are structurally
 * equal (ir_func_hash) all take the most sealed of their splits, in the
 * order train < val < test < heldout_shape < heldout_family, so no kernel
 * the model trains on is one it is judged on.
 *
 * The file (data/splits.tsv.zst) is zstd-compressed text: a header line
 * "# dragon splits v1 seed=S count=N", then one line per workload in
 * generator order, "split<TAB>kernel_hash<TAB>canonical spec", the hash in
 * decimal. The loader refuses any other magic, version or line with a
 * message naming file:line. */

#define DATA_SPLIT_LIST(X)                                                    \
  X(DATA_SPLIT_TRAIN, "train")                                                \
  X(DATA_SPLIT_VAL, "val")                                                    \
  X(DATA_SPLIT_TEST, "test")                                                  \
  X(DATA_SPLIT_HELDOUT_SHAPE, "heldout_shape")                                \
  X(DATA_SPLIT_HELDOUT_FAMILY, "heldout_family")

/* In order of sealing: the guard moves a workload only up this list. */
typedef enum {
#define X(e, name) e,
  DATA_SPLIT_LIST(X)
#undef X
  DATA_SPLIT_COUNT
} data_split;

#define DATA_SPLIT_SEED 7      /* the committed universe's seed */
#define DATA_SPLIT_UNIVERSE 60000 /* and its count */
#define DATA_SPLIT_FILE "data/splits.tsv.zst"
#define DATA_SPLIT_VERSION 1

const char *data_split_name(data_split s);
/* The split named by n bytes of name; false if there is none. */
bool data_split_from_name(const char *name, size_t n, data_split *out);
/* True only for train: the one split a model may learn from. */
bool data_split_is_training(data_split s);

/* The held-out family, and the held-out band of a family: false (and no
 * band) for the held-out family and for a family without one. */
const char *data_split_heldout_family(void);
bool data_split_band(const char *family, const char **key, int64_t *lo,
                     int64_t *hi);

/* The split the rules give a canonical spec, before the structural guard.
 * Fails for a spec that is not canonical or whose family has no band. */
bool data_split_rule(const char *spec, data_split *out, dg_status *st);

/* The structural guard over n workloads: every group of equal kernel
 * hashes takes the largest split of its members. moves[from][to] (may be
 * NULL) is set to the number of workloads moved. */
void data_split_guard(data_split *split, const uint64_t *kernel_hash,
                      int64_t n,
                      int64_t moves[DATA_SPLIT_COUNT][DATA_SPLIT_COUNT]);

typedef struct {
  data_split split;
  uint64_t kernel_hash; /* ir_func_hash of wl_build(spec) */
  const char *spec;     /* canonical */
} data_split_entry;

/* The splits of a universe: built, or loaded from a file. */
typedef struct data_splits data_splits;

/* Generates the universe, builds every kernel, applies the rules and the
 * guard. */
data_splits *data_splits_build(uint64_t seed, int64_t count, dg_status *st);
/* Loads a file; errors name file:line (or the file, for the zstd stream). */
data_splits *data_splits_load(const char *path, dg_status *st);
/* Loads the bytes of a file (zstd); `name` stands for the file in
 * messages. */
data_splits *data_splits_parse(const void *bytes, size_t n, const char *name,
                               dg_status *st);
/* The file's uncompressed text (caller frees); *len may be NULL. */
char *data_splits_text(const data_splits *t, size_t *len);
/* Writes the file: compressed, through a temporary file, fsync, rename. */
bool data_splits_save(const data_splits *t, const char *path, dg_status *st);
void data_splits_free(data_splits *t);

uint64_t data_splits_seed(const data_splits *t);
int64_t data_splits_count(const data_splits *t);
const data_split_entry *data_splits_at(const data_splits *t, int64_t i);
/* The entry of a canonical spec, or NULL. */
const data_split_entry *data_splits_find(const data_splits *t,
                                         const char *spec);
/* The index of the first workload of split s at or after `from`, or -1:
 *   for (int64_t i = data_splits_next(t, s, 0); i >= 0;
 *        i = data_splits_next(t, s, i + 1)) ... */
int64_t data_splits_next(const data_splits *t, data_split s, int64_t from);
/* Workloads in split s. */
int64_t data_splits_size(const data_splits *t, data_split s);
/* Workloads the guard moved from one split to another when the table was
 * built; -1 for a loaded table (the file does not record them). */
int64_t data_splits_moved(const data_splits *t, data_split from,
                          data_split to);

/* ---- labelling ---- */

/* The labelling campaign (label.c, `dragon data label`): the workloads
 * given, in order, each with its baseline (the untuned kernel, TVM's
 * DefaultGPUSchedule) measured once and MetaSchedule's search with a cost
 * model shared across workloads and warm-started from the database, into
 * one database, within a wall-clock budget. A workload is labelled once it
 * has trials_min records and a baseline, or once its search ran out of new
 * kernels (marked in the database, search_db_mark_exhausted: its space was
 * measured whole, or no design space yields a valid schedule); a rerun
 * skips those and resumes the rest. */
typedef struct search_db search_db;
typedef struct dg_func dg_func;
typedef struct data_plan data_plan; /* below */

typedef struct {
  search_db *db;
  const char *const *specs; /* (n_specs) canonical specs, in labelling order */
  int64_t n_specs;
  int64_t trials_min;  /* 64: measured candidates every workload gets */
  int64_t trials_max;  /* 192 */
  double plateau;      /* 0.02: past trials_min, one more round while the last
                          one improved the best by more than this fraction */
  double budget_s;     /* wall seconds for the run (0: none) */
  double t_start;      /* dg_now() when the budget began: the command's start,
                          so that opening the database counts (a window's
                          `timeout` counts it too); 0: the run's own start */
  double max_work;     /* deferred above this many reference operations (0: none) */
  bool on_gpu;         /* measure on the GPU, else compiled C on the CPU */
  bool no_software_pipeline; /* no pipeline sketches (default: where the lowering
                                 does not pipeline, LOWER_HAS_SOFTWARE_PIPELINE) */
  int threads;         /* building and compiling candidates; 0: every core */
  int population;      /* 256: the evolutionary search's */
  int repeats;         /* 3: timed runs per candidate */
  uint64_t seed;
  int warm_records;    /* 20000: the cost model starts from the db's last records */
  const char *cost_model; /* or from this saved model (`dragon db model`), NULL: none */
  double compile_limit_s; /* 60: NVRTC seconds before a candidate is stopped */
  bool retry_exhausted;   /* search the workloads marked exhausted again (after
                             the design spaces grew) */
  const data_plan *plan;  /* compiled ahead (plan.c): a workload it holds that has
                             no record yet measures its planned candidates as
                             its first round, their compilations taken (GPU) */
  bool find_exhausted;    /* measure nothing: search each workload that has a
                             baseline and fewer than trials_min records, and
                             mark those with nothing new left (no GPU) */
  FILE *progress;      /* one line per workload; NULL: quiet */
} data_label_opts;

typedef struct {
  int64_t labelled;   /* workloads that reached trials_min in this run */
  int64_t already;    /* labelled before this run (skipped) */
  int64_t exhausted;  /* of those, skipped for their mark: a space measured
                         whole or with no valid schedule; find_exhausted: the
                         workloads marked by this run */
  int64_t deferred;   /* above max_work */
  int64_t failed;     /* could not be built or searched (first_failure says why) */
  int64_t measured;   /* candidates measured in this run, baselines included */
  int64_t passed;     /* of which ran and matched the reference (GPU) */
  double wall_s;
  /* where the time went: the search (sampling, evolution), the cost model,
   * measurement (wall); on the GPU, thread-seconds lowering and in NVRTC
   * and wall seconds waiting for the GPU or for a compile, and the GPU
   * worker's own seconds */
  double t_search, t_model, t_measure;
  double t_lower, t_compile, t_gpu_wait, t_compile_wait, t_worker;
  double t_held; /* of the worker's seconds, those holding the GPU */
  double t_data_build, t_data_run; /* the float64 references: compiled, run (thread-s) */
  int64_t compiled, cached; /* candidates compiled; of them from the NVRTC cache */
  int64_t memory_full; /* candidates that found the GPU's memory full: not recorded */
  int64_t planned, planned_cands; /* workloads begun from the plan, their candidates */
  bool budget_hit;
  char first_failure[256];
} data_label_stats;

void data_label_opts_default(data_label_opts *o);
/* False only when the run cannot go on (the GPU cannot be set up, the
 * database cannot be written); a workload's failure is counted. */
bool data_label_run(const data_label_opts *o, data_label_stats *out, dg_status *st);
/* Operations of f's float64 reference, estimated (statements executed). */
double data_label_work(const dg_func *f);

/* ---- a labelling round compiled ahead (plan.c) ---- */

/* Plans: the first round of the workloads a labelling run would begin next,
 * drawn by the search and compiled by NVRTC for the GPU's architecture on a
 * machine without a GPU, in a directory of part files that the GPU
 * machine's run takes (`data label --plan DIR`: the compilations go into
 * its NVRTC cache, the traces are its first round). plan.c says more. */
typedef struct {
  char *trace;           /* compact trace JSON, postprocessing included */
  uint64_t kernel_hash;  /* ir_func_hash of the scheduled kernel */
  char *source;          /* the CUDA source NVRTC compiled */
  unsigned char *image;  /* what it gave (a cubin) */
  size_t image_len;
} data_plan_cand;

typedef struct {
  char workload[21];   /* decimal hash */
  char arch[16];       /* compiled for: "sm_90" */
  char date[32];
  char *spec, *build;  /* build: the planner's search_build_id */
  int n;
  data_plan_cand *cands;
} data_plan_entry;

typedef struct data_plan data_plan;

/* Every part file (plan-*.zst) of dir; with missing_ok a missing dir is an
 * empty plan. A part that does not read is refused naming the file and
 * the byte. A workload in two parts: the first stands. */
data_plan *data_plan_load(const char *dir, bool missing_ok, dg_status *st);
/* The same reading of one part file's unpacked bytes, added to into. */
bool data_plan_parse(const char *name, const void *bytes, size_t len, data_plan *into,
                     dg_status *st);
void data_plan_free(data_plan *p);
int data_plan_count(const data_plan *p);
const data_plan_entry *data_plan_at(const data_plan *p, int i);
const data_plan_entry *data_plan_find(const data_plan *p, const char *workload);
size_t data_plan_bytes(const data_plan *p); /* the part files' sizes */
/* One part file of entries, written whole (temporary file, rename). */
bool data_plan_write(const char *path, const data_plan_entry *const *e, int n, dg_status *st);

typedef struct {
  search_db *db;          /* the committed records: what is begun is not planned */
  const char *const *specs; /* the split's workloads, in labelling order */
  int64_t n_specs;
  const char *out_dir;    /* the plan's directory (created; a rerun adds to it) */
  int64_t trials_min;     /* 64: the first round's candidates */
  int population;         /* 256 */
  uint64_t seed;
  int threads;            /* searching and compiling; 0: every core */
  const char *cost_model; /* the saved cost model (`dragon db model`); NULL: none */
  const char *arch;       /* "sm_90" */
  double compile_limit_s; /* 5, as the labeller's */
  double budget_s;        /* wall seconds (0: none) */
  double max_work;        /* workloads past it are left out, as the labeller defers them */
  int64_t max_bytes;      /* the plan's size on disk at most (16 MiB: what a GPU call can take) */
  int flush_every;        /* workloads a part file (8) */
  bool no_software_pipeline;
  FILE *progress;
} data_plan_opts;

void data_plan_opts_default(data_plan_opts *o);

typedef struct {
  int64_t planned, already, deferred, failed;
  int64_t cands, not_compiled;  /* candidates kept; those that did not build here */
  int64_t bytes, files;         /* the plan's part files (those before this run included) */
  int64_t pending_bytes;        /* (run state) the unflushed entries' estimate */
  double wall_s, t_search, t_compile;
  bool budget_hit, full;
  char first_failure[256];
} data_plan_stats;

bool data_plan_run(const data_plan_opts *o, data_plan_stats *out, dg_status *st);

/* ---- examples ---- */

/* Construction and refinement examples from a database's records
 * (examples.c, `dragon data build`): for each workload of the split, in the
 * split file's order, the best correct record's graph as a construction
 * target, and up to max_priors refinements towards it from records
 * min_gain to max_prior_ratio times slower (measured by the same device
 * and build). Targets and priors are admitted through the one road
 * (eval_score_tsel up to the build, lowering to exactly the record's
 * trace). One JSON object a line, in docs/training.md's format, plus
 * "speedup_over_baseline" / "speedup_over_prior". Deterministic. */
typedef struct {
  const search_db *db;
  const data_splits *splits;
  data_split split;     /* train */
  int max_priors;       /* 3 */
  double min_gain;      /* 1.1 */
  double max_prior_ratio; /* 10 */
  int threads;          /* workloads built at once (0: every core); the bytes do not depend on it */
  FILE *progress;       /* a line every 200 workloads (rate, ETA); NULL: quiet */
} data_build_opts;

typedef struct {
  int64_t workloads;    /* with at least one correct record */
  int64_t construct, refine;
  int64_t no_valid;     /* workloads without a correct record */
  int64_t unreadable;   /* whose kernel does not parse or is not the split's */
  int64_t refused[8];   /* targets and priors refused, by the gate (eval_gate) */
  char first_refusal[256];
} data_build_stats;

void data_build_opts_default(data_build_opts *o);
/* Appends the examples to out. False only for missing inputs. */
bool data_build_examples(const data_build_opts *o, dg_str *out, data_build_stats *s,
                         dg_status *st);

/* ---- pretraining examples ---- */

/* Structure examples (pretrain.c, `dragon data pretrain`): for each of the
 * first `count` workloads of the training split, `per` samples of its
 * CUDA design space, lifted to TSEL with why/expect lines from compiler
 * facts (nothing measured) and admitted through the one road up to the
 * build. One JSON object a line, docs/training.md's format with task
 * "pretrain". Deterministic for the splits, count, per and seed, whatever
 * the threads. */
typedef struct {
  const data_splits *splits;
  int64_t count;   /* workloads (1000) */
  int per;         /* samples a workload (2) */
  uint64_t seed;   /* 1 */
  int threads;     /* 0: every core */
  FILE *progress;  /* a line every 200 workloads; NULL: quiet */
} data_pretrain_opts;

typedef struct {
  int64_t workloads, examples;
  int64_t refused;      /* samples the road refused (first_refusal says why) */
  int64_t unbuildable;  /* workloads without a kernel or a design space */
  int64_t no_sample;    /* samples never drawn: every draw rejected */
  char first_refusal[256];
  double seconds;
} data_pretrain_stats;

void data_pretrain_opts_default(data_pretrain_opts *o);
/* Appends the examples to out. False only for bad options. */
bool data_pretrain_examples(const data_pretrain_opts *o, dg_str *out, data_pretrain_stats *s,
                            dg_status *st);

/* ---- the dataset card ---- */

/* The card (card.c, `dragon data card`): records and their provenance,
 * labelled workloads per family, split and dtype, the best-over-baseline
 * and target-over-prior speedups, the examples per split and kind, as
 * Markdown into md; with points, one line per plotted value ("best FAMILY
 * X" and "gain SPLIT X"). Deterministic. */
typedef struct {
  const search_db *db;
  const data_splits *splits;
  const char *const *examples;      /* (n_examples) the examples files' texts */
  const char *const *example_names; /* their splits' names */
  int n_examples;
  const char *plot_name;            /* the plot's file name for the card, or NULL */
} data_card_opts;

bool data_card_write(const data_card_opts *o, dg_str *md, dg_str *points, dg_status *st);

#endif
