/* cli.h: the subcommands of `dragon` and their shared option parser.
 *
 * Each subcommand is `int cmd_NAME(int argc, char **argv)` (argv[0] is the
 * subcommand's name) in its own file, listed once in main.c's table.
 * Exit codes: 0 ok, 1 error, 2 usage.
 */
#ifndef DRAGON_CLI_H
#define DRAGON_CLI_H

#include "dragon/base.h"
#include "dragon/ir.h"
#include "dragon/nn.h"
#include "dragon/sched.h"
#include "dragon/tokenizer.h"
#include "dragon/train.h"

enum { CLI_OK = 0, CLI_ERROR = 1, CLI_USAGE = 2 };

typedef enum {
  CLI_OPT_FLAG, /* bool, no value */
  CLI_OPT_INT,  /* int64_t, range-checked */
  CLI_OPT_F64,  /* double */
  CLI_OPT_STR,  /* const char * */
} cli_opt_type;

typedef struct {
  const char *name; /* "--count" */
  cli_opt_type type;
  void *dst;        /* holds the default on entry */
  int64_t lo, hi;   /* CLI_OPT_INT range */
  const char *help;
} cli_opt;

typedef struct {
  const char *name;     /* "workloads" */
  const char *synopsis; /* "[--count N] [--seed S]" */
  const char *about;    /* one paragraph */
  const cli_opt *opts;
  int n_opts;
  int min_pos, max_pos; /* positional argument count bounds (-1: any) */
} cli_spec;

/* Parses argv[1..]: options (--name value or --name=value) and positional
 * arguments in any order; "--" ends options. Returns CLI_OK and fills
 * pos/npos (pointers into argv), or CLI_USAGE after printing the error, or
 * -1 after printing --help (the caller exits 0). */
int cli_parse(const cli_spec *spec, int argc, char **argv, char ***pos,
              int *npos);
void cli_print_help(const cli_spec *spec, FILE *out);
/* Prints "dragon NAME: message" for a failed status; returns CLI_ERROR, or
 * CLI_USAGE for usage errors. */
int cli_report(const char *cmd, const dg_status *st);

/* A KERNEL argument: "-" (kernel text on stdin), a kernel-text file, or a
 * workload spec or alias. */
dg_func *cli_load_kernel(const char *arg, dg_status *st);
/* Reads a trace JSON file; errors name the file. */
sched_trace *cli_load_trace(const char *path, dg_status *st);
/* A schedule of f with the trace of a file replayed; errors name the file
 * and the instruction. */
sched *cli_schedule(const dg_func *f, const char *trace_path, dg_status *st);

/* A model argument (model_arg.c): a model directory (its model.safetensors
 * or model.safetensors.zst, as `dragon train export` writes them), a run
 * directory (its latest checkpoint) or a model file (a checkpoint, or a
 * .safetensors file with dragon's config, zstd-packed or not); the
 * tokenizer is tokp, or tokenizer.bin beside it;
 * flag ("--ckpt") names it in messages.
 * cli_model_paths names the files (caller frees both); cli_model_load
 * loads them and checks that they belong together (on failure nothing is
 * left to free; on success free m with nn_model_free, *tok with tok_free,
 * *model_path with free). */
#define CLI_MODEL_FILE "model.safetensors"
bool cli_is_safetensors(const char *path);
bool cli_model_paths(const char *flag, const char *arg, const char *tokp, char **model, char **tok,
                     dg_status *st);
bool cli_model_load(const char *flag, const char *arg, const char *tokp, nn_model *m,
                    tok_tokenizer **tok, char **model_path, dg_status *st);
/* The model dragon ships, where none is named; cli_model_arg(arg) is arg,
 * else $DRAGON_MODEL, else this. */
#define CLI_DEFAULT_MODEL "models/little-dragon"
const char *cli_model_arg(const char *arg);

/* The model as a writer of graphs: loaded with its tokenizer and, when
 * constrained, the token mask (tsel.h). cli_model_write writes k graphs
 * for a kernel (the prompt: its text, and the prior if not NULL) with seeds
 * seed, seed + 1, ...: texts[i] is NULL where decoding failed, its reason
 * appended to errs; returns the seconds spent, adds the tokens fed and the
 * lines the guard took back (stats, may be NULL). Constrained decoding is
 * guarded (eval_guard_line) unless no_guard. Thread-safe: the model is
 * read only, and each call takes a tokenizer and a mask of its own from a
 * pool (encoding and masking keep scratch state), made as needed; ws and
 * errs are the caller's. */
typedef struct cli_writer_slot cli_writer_slot;
typedef struct {
  nn_model m;
  tok_tokenizer *tok;
  tsel_mask *mask;
  char *path;
  bool loaded;
  bool no_guard; /* constrained decoding without the line guard (eval_guard_line) */
  bool plan_first; /* the model writes its plan first (train_model_plan_first): every write lets it */
  struct eval_guard_log *guard_log; /* the guard's refusals written down (--guard-log), or NULL */
  /* the pool: tokenizer copies (from tok_path) and their masks */
  char *tok_path;
  void *pool_lock;
  cli_writer_slot *slots; /* every slot made beyond (tok, mask), each once */
  struct train_cuda *gpu; /* set: constrained graphs are written on the GPU */
} cli_model;
bool cli_model_open(cli_model *cm, const char *flag, const char *arg, const char *tokp,
                    bool constrained, dg_status *st);
/* From now on the model's constrained graphs are written on the GPU
 * (train_decode_jobs_cuda: its weights in bf16 there, every graph of a
 * call a row of one KV cache, the writers on every core), where the build
 * has CUDA and a GPU is seen; false with st otherwise. */
bool cli_model_use_gpu(cli_model *cm, dg_status *st);
/* --write S of a command that writes graphs: "cpu", "cuda", or NULL (cuda
 * where the command measures on a GPU). Sets *gpu; false with a usage
 * message in st for another word. */
bool cli_write_device(const char *arg, bool have_gpu, bool *gpu, dg_status *st);
/* Rows of a GPU writer's KV cache: graphs written at once, the jobs of a
 * call taking the rows in turn (train_decode_opts.gpu_rows). */
#define CLI_GPU_ROWS 256
void cli_model_close(cli_model *cm); /* also on a zeroed or failed one */
/* Graphs written again when the line guard reaches its backtrack limit
 * (train_decode_opts.restarts), for `dragon optimize` and `dragon eval`:
 * two took 47 of 101 hard test tasks through the build gate to 70, and
 * 97 of 100 others to 99, for 31% more tokens (bench/RESULTS.md). */
#define CLI_RESTARTS 2
/* The two commands' help for --restarts and --restart-temperature. */
#define CLI_RESTARTS_HELP                                                                      \
  "when the line guard reaches its backtrack limit, write the graph again from its first edit " \
  "line, sampled at --restart-temperature, at most this many times"
#define CLI_RESTART_TEMPERATURE_HELP                                                            \
  "the sampling temperature of a graph written again (a line taken back is written again at 1 " \
  "still)"
/* --guard-log FILE of both commands: the guard's refusals, a JSON line each
 * (eval_guard_log), opened into cli_model.guard_log and closed with the model. */
#define CLI_GUARD_LOG_HELP                                                                       \
  "append a JSON line for each line the guard refuses (the workload, the line, the gate and its " \
  "reason, the edit blamed, the graph so far) to FILE: where decoding spends its take-backs"
typedef struct {
  int64_t tokens;     /* fed to the model */
  int64_t backtracks; /* lines the guard took back */
  int64_t narrowed;   /* of them, to a narrowed tile (tsel_tile_narrowing) */
  int gave_up;        /* graphs whose guard ran out of backtracks (and restarts) */
  int64_t restarts;   /* graphs written again from their first edit line */
  double guard_secs;
  double lock_wait_s; /* on the GPU, waiting for its lock (a measurement beside the writing) */
} cli_write_stats;
double cli_model_write(cli_model *cm, const dg_func *f, const char *spec, const char *kernel_text,
                       const char *prior, int k, const train_decode_opts *o, uint64_t seed,
                       char **texts, cli_write_stats *ws, dg_str *errs);
/* One graph for each of n kernels, kernel i with seeds[i] (a refinement of
 * priors[i] where priors and it are not NULL), all
 * in step on the calling thread (train_decode_jobs: a pass of the model
 * feeds every graph's next token; on the GPU, one cache and the writers on
 * every core); each is the graph cli_model_write gives that kernel and
 * seed. texts[i] NULL where decoding failed, why[i]
 * saying why; tokens[i] (tokens may be NULL) what graph i fed the model.
 * Thread-safe as cli_model_write. */
void cli_model_write_each(cli_model *cm, const dg_func *const *f, const char *const *specs,
                          const char *const *priors, const uint64_t *seeds, int n, const train_decode_opts *o,
                          char **texts, int64_t *tokens, cli_write_stats *ws, dg_status *why);

/* The GPU measurement of a command that judges GPU schedules: --target
 * cuda (target "cuda": a GPU is required), c (none), or NULL (cuda where a
 * GPU is seen, else the C emulation, with a note why appended to notes).
 * A candidate's NVRTC compile is stopped after gm->compile_limit_s, or
 * CLI_COMPILE_LIMIT_S where that is unset (it then fails its build).
 * False with st set only when cuda was asked for and cannot measure. */
#define CLI_COMPILE_LIMIT_S 30.0
struct search_cuda_measure;
bool cli_gpu_open(const char *target, int threads, struct search_cuda_measure *gm, bool *have,
                  dg_str *notes, dg_status *st);

/* An output directory, created with its parents where missing; a text
 * written into one atomically (dg_write_file_atomic). */
bool cli_out_dir(const char *dir, dg_status *st);
bool cli_write_in(const char *dir, const char *name, const char *text, dg_status *st);

/* A text file's contents, NUL-terminated; errors name the file. */
char *cli_read_text(const char *path, dg_status *st);

/* Merges a RECORDS argument into db: a shard file (*.jsonl.zst), a
 * directory of shards (in name order) or a database directory. A shard
 * that cannot be read is reported on stderr ("dragon CMD: ...; shard
 * skipped") and counted in the return value; -1 with st set when path
 * itself cannot be read or the database cannot be written. *added gets
 * the records and baselines added, *n_ok the sources merged. */
struct search_db;
int cli_merge_shards(struct search_db *db, const char *path, const char *cmd, int64_t *added,
                     int *n_ok, dg_status *st);
/* The labelling commands' --records (NULL: nothing): merged into db as
 * above, a line on stderr unless quiet. CLI_OK, or the error reported. */
int cli_merge_records(struct search_db *db, const char *records, const char *cmd, bool quiet);

/* The workloads of a split (split_arg.c): the split file's order, after
 * skip, every S-th from the R-th (shard "R/S", NULL: all), at most first
 * (0: all). Prints the error and returns CLI_USAGE or CLI_ERROR; on CLI_OK
 * *specs (freed with free()) point into *t (data_splits_free). */
typedef struct {
  const char *splits_path, *split, *shard;
  int64_t skip, first;
} cli_split_args;
struct data_splits;
/* --shard mpi: this process's place in a job started by an MPI launcher
 * (mpirun of Open MPI or MPICH, srun), read from the variables the
 * launcher sets: Open MPI's OMPI_COMM_WORLD_RANK / _SIZE / _LOCAL_RANK,
 * then PMI_RANK / PMI_SIZE / MPI_LOCALRANKID, then SLURM_PROCID /
 * SLURM_NTASKS / SLURM_LOCALID. *local is -1 when the launcher names no
 * rank on the node. False, with the variables looked for in why, when no
 * launcher is seen or its numbers do not hold (0 <= rank < size). */
typedef struct {
  long rank, size, local;
  const char *launcher; /* "Open MPI", "PMI" or "Slurm" */
} cli_launch;
bool cli_launch_from_env(cli_launch *out, char *why, size_t why_cap);
/* The GPU a rank on a node with n_gpus GPUs measures on: its local rank
 * modulo the GPUs (ranks beyond the GPUs share them: the GPU lock times
 * one kernel at a time); -1 where there is no choice to make. */
int cli_launch_gpu(long local, int n_gpus);
/* The node's NVIDIA GPUs as the driver lists them (/proc/driver/nvidia/gpus),
 * without initialising CUDA; 0 where there is no such driver. */
int cli_node_gpu_count(void);
int cli_split_specs(const char *cmd, const cli_split_args *a, struct data_splits **t,
                    const char ***specs, int64_t *n);

int cmd_workloads(int argc, char **argv);
int cmd_schedule(int argc, char **argv);
int cmd_check(int argc, char **argv);
int cmd_fuzz_schedules(int argc, char **argv);
int cmd_show(int argc, char **argv);
int cmd_run(int argc, char **argv);
int cmd_emit(int argc, char **argv);
int cmd_tsel(int argc, char **argv);
int cmd_train(int argc, char **argv);
int cmd_sample_model(int argc, char **argv);
int cmd_optimize(int argc, char **argv);
int cmd_eval(int argc, char **argv);
int cmd_tokenizer(int argc, char **argv);
int cmd_sample(int argc, char **argv);
int cmd_tune(int argc, char **argv);
int cmd_db(int argc, char **argv);
int cmd_data(int argc, char **argv);
int cmd_data_label(int argc, char **argv);
int cmd_data_build(int argc, char **argv);
int cmd_data_card(int argc, char **argv);
int cmd_data_pretrain(int argc, char **argv);
int cmd_data_plan(int argc, char **argv);

/* Runs a gnuplot script (plot.c); false with st when gnuplot is missing
 * or refuses it. */
bool cli_gnuplot(const char *script, dg_status *st);

#endif
