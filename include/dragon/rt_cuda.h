/* rt_cuda.h: the CUDA runtime and the crash-isolated workers.
 *
 * Libraries (cuda_api.c): libcuda and libnvrtc are opened with dlopen, never
 * linked, so dragon starts and runs its CPU paths where CUDA is absent.
 * NVRTC (nvrtc.c): CUDA C source to CUBIN (sm_XX) or PTX (compute_XX), one
 * source or many on a thread pool, several kernels per compilation.
 * Runs (cuda_run.c): a program (launches over device buffers) loaded,
 * launched, checked against the CPU's float64 reference and timed with
 * events, L2 flushed before each timed run. Data sets (cuda_data.c): the
 * inputs and the reference written once by the parent, mapped by workers.
 * GPU jobs (cuda_job.c): the message and the handler GPU workers run.
 * Workers (worker.c): processes that run jobs sent over a socket, so that
 * a fault, a sticky CUDA error or a hang costs one job, never the run;
 * generic, the CPU runner uses them too.
 *
 * Fork safety: a process forked from one that has initialised CUDA, or has
 * only compiled with NVRTC 13 (seen on the H200 machine: cuInit then fails
 * with CUDA_ERROR_NOT_INITIALIZED), cannot use the driver. So everything
 * that touches the driver on the parent's behalf (the GPU probe, the GPU
 * workers) runs in a freshly exec'd image of the program, and this process
 * never initialises CUDA itself. rt_cuda_ctx_new initialises CUDA in the
 * calling process and belongs in workers or in programs that never fork.
 */
#ifndef DRAGON_RT_CUDA_H
#define DRAGON_RT_CUDA_H

#include "dragon/lower.h"
#include "dragon/rt.h"

/* ---- libraries (cuda_api.c) ---------------------------------------------- */

/* Opens libnvrtc (DRAGON_CUDA_LIB_DIR, the loader's path, /usr/local/cuda
 * and its siblings). False, with a message naming what was tried, if absent. */
bool rt_nvrtc_available(dg_status *st);
/* Checks, in a fresh child process, that libcuda.so.1 opens, the driver
 * initialises and sees at least one GPU. The answer is cached. */
bool rt_cuda_available(dg_status *st);

typedef struct {
  char name[128];
  int cc_major, cc_minor;
  int sm_count;
  int threads_per_sm; /* the most threads resident on one multiprocessor */
  int64_t l2_bytes;
  int64_t mem_bytes;
  int smem_optin; /* the most dynamic shared memory a block may opt into */
  int driver_version; /* 13000 for 13.0 */
} rt_cuda_device;

/* The device seen by the probe of rt_cuda_available (device 0). */
bool rt_cuda_device_info(rt_cuda_device *out, dg_status *st);

/* ---- NVRTC (nvrtc.c) ------------------------------------------------------ */

/* A compiled module: a CUBIN image for an sm_XX target, NUL-terminated PTX
 * for a compute_XX target. The log is NVRTC's (warnings on success, the
 * errors on failure), never NULL after a compile call. */
typedef struct {
  char *image;
  size_t size;    /* bytes of image (PTX: including the NUL) */
  bool is_ptx;
  char arch[16];  /* "sm_90" */
  char *log;
  double seconds; /* wall time of the compilation */
} rt_cubin;

void rt_cubin_free(rt_cubin *b);

/* Compiles src (kernels declared extern "C" __global__) for arch ("sm_90",
 * "sm_90a", "compute_90"); name is the file name in messages. On failure
 * st says "nvrtc: NAME.cu: ..." with the first lines of the log, and
 * out->log holds the whole log (free it with rt_cubin_free either way). */
bool rt_nvrtc_compile(const char *src, const char *name, const char *arch, rt_cubin *out,
                      dg_status *st);
/* The same, stopped once it has taken limit_s seconds (<= 0: no limit):
 * then st says "nvrtc: NAME.cu: stopped after ... (limit ...)". Where the
 * NVRTC library cannot cancel (before CUDA 12.8) there is no limit. */
bool rt_nvrtc_compile_within(const char *src, const char *name, const char *arch, double limit_s,
                             rt_cubin *out, dg_status *st);
/* A source compiled once in this process (same name and architecture) is
 * not compiled again: its image comes from a bounded cache, and a
 * compilation of it running on another thread is waited for
 * (nvrtc_cache.c; DRAGON_NVRTC_CACHE=0 turns it off). Failures are not
 * kept. The counts since the start or the last clear: */
void rt_nvrtc_cache_stats(int64_t *hits, int64_t *misses);
void rt_nvrtc_cache_clear(void);
/* Puts a compilation made elsewhere (a plan compiled ahead on another
 * machine, data_plan) in the cache, as if this process had made it: the
 * same source, name and architecture then take its image. Nothing where
 * the cache is off or holds the source already. */
void rt_nvrtc_cache_put(const char *src, const char *name, const char *arch, const rt_cubin *img);
/* Turns the cache on or off (over DRAGON_NVRTC_CACHE); returns whether it
 * was on. */
bool rt_nvrtc_cache_set(bool on);
/* Whether the NVRTC library can stop a compilation (false if absent). */
bool rt_nvrtc_can_cancel(void);

/* NVRTC serialises the compilations of one process, so compilations may
 * run in worker processes instead (nvrtc_pool.c): at most n of them, one
 * per compiling thread, kept for the life of the process; 0 (the default)
 * compiles in this process. DRAGON_NVRTC_PROCS=N, where set, wins. The
 * results are the same either way. */
void rt_nvrtc_set_processes(int n);
int rt_nvrtc_processes(void);
/* Why the last NVRTC worker process could not start ("" if none failed);
 * after such a failure compilations run in this process. */
void rt_nvrtc_processes_error(char *out, size_t n);

typedef struct {
  const char *src, *name, *arch;
} rt_nvrtc_job;

/* Compiles n jobs on `threads` threads (<= 0: one per online CPU). out[i]
 * and sts[i] are job i's result. Returns how many compiled. */
int rt_nvrtc_compile_batch(const rt_nvrtc_job *jobs, int n, int threads, rt_cubin *out,
                           dg_status *sts);

/* Many kernels, `per_call` of them per NVRTC compilation: each compilation
 * is the preamble followed by its kernels' sources (each defining its own
 * uniquely named extern "C" kernels). A compilation that fails is retried
 * one kernel at a time, so that a broken kernel costs only itself. */
typedef struct {
  rt_cubin *bins;  /* (n_bins) the modules */
  int n_bins;
  int *bin_of;     /* (n) kernel i's module, or -1 if it failed */
  dg_status *st;   /* (n) kernel i's status */
  int n, n_ok;
} rt_nvrtc_grouped;

void rt_nvrtc_compile_grouped(const char *preamble, const char *const *kernels, int n,
                              int per_call, int threads, const char *arch,
                              rt_nvrtc_grouped *out);
void rt_nvrtc_grouped_free(rt_nvrtc_grouped *g);

int rt_cpu_count(void); /* online CPUs, at least 1 */

/* Tasks on background threads, handed back as they finish: work(ctx, i)
 * for every i in [0, n), started lowest i first on `threads` threads (<= 0:
 * one per CPU; none could start: each runs in the caller when it asks).
 * What a compile pipeline needs: compile on the threads, take each module
 * as soon as it is ready. */
typedef struct rt_tasks rt_tasks;
rt_tasks *rt_tasks_start(int n, int threads, void (*work)(void *ctx, int i), void *ctx);
/* A finished task, each once, in the order they finished: -1 when none has
 * finished yet (wait false) or every one has been handed back. With wait,
 * blocks until one finishes. */
int rt_tasks_next(rt_tasks *t, bool wait);
/* Waits for every task to finish and frees t (NULL is allowed). */
void rt_tasks_free(rt_tasks *t);

/* ---- programs, runs and timing (cuda_run.c) -------------------------------- */

/* Why a candidate failed; one list gives the enum and the names. */
#define RT_FAIL_LIST(X)                                                       \
  X(NONE, "ok")                                                               \
  X(COMPILE, "compile error")                                                 \
  X(SETUP, "setup error")          /* no GPU, out of memory, bad program */   \
  X(LOAD, "load error")            /* module or kernel not loadable */        \
  X(LAUNCH, "launch error")        /* the launch was refused */               \
  X(ILLEGAL_ADDRESS, "illegal address")                                       \
  X(DEVICE, "device error")        /* another error while the kernel ran */   \
  X(TIMEOUT, "timeout")                                                       \
  X(WRONG, "wrong numbers")                                                   \
  X(CRASH, "worker crashed")
typedef enum {
#define X(id, name) RT_FAIL_##id,
  RT_FAIL_LIST(X)
#undef X
  RT_FAIL_COUNT
} rt_fail;
const char *rt_fail_name(rt_fail f);

/* A device buffer of a program: a kernel parameter (param >= 0: index into
 * the kernel's parameters, the order of rt_tensors) or an intermediate
 * (param = -1), which the program allocates and nobody reads back. */
typedef struct {
  const char *name;
  dg_dtype dtype;
  int64_t numel;
  int param;
  bool is_output;
} rt_cuda_buf;

typedef enum {
  RT_CUDA_ARG_BUF, /* a buffer's device pointer: buf */
  RT_CUDA_ARG_I32, /* i */
  RT_CUDA_ARG_I64, /* i */
  RT_CUDA_ARG_F32, /* f */
} rt_cuda_arg_kind;

typedef struct {
  rt_cuda_arg_kind kind;
  int buf;
  int64_t i;
  double f;
} rt_cuda_arg;

/* One kernel launch: grid and block dims, dynamic shared memory (above 48
 * KiB the kernel's limit is raised first), and its arguments in order. */
typedef struct {
  const char *kernel;
  int grid[3], block[3];
  int shared_bytes;
  const rt_cuda_arg *args;
  int n_args;
} rt_cuda_launch;

/* A program: launches run in order on one stream over a set of buffers.
 * What the lowering of one scheduled kernel produces. */
typedef struct {
  const rt_cuda_buf *bufs;
  int n_bufs;
  const rt_cuda_launch *launches;
  int n_launches;
} rt_cuda_program;

typedef struct {
  int warmup;       /* untimed runs after the checked one */
  int repeats;      /* timed runs (0: the checked run only) */
  bool flush_l2;    /* write a buffer larger than L2 before each timed run */
  double timeout_s; /* per run of the program; 0: 10 s */
} rt_cuda_timing;

/* Seconds; quartiles interpolated between order statistics. */
typedef struct {
  int n;
  double median, min, max, q1, q3;
} rt_time_stats;

void rt_time_stats_of(const double *samples, int n, rt_time_stats *out);

typedef struct {
  rt_fail fail;
  char reason[320];  /* "" when ok */
  rt_time_stats t;   /* when repeats > 0 and ok */
  bool checked;      /* the outputs were compared with a reference */
  rt_check check;
  bool ctx_broken;   /* a sticky error: the process must be replaced */
  /* jobs with a data set: its device buffers were there from an earlier
   * job of the same worker (false: built by this one, in setup_s) */
  bool data_cached;
  double setup_s;
  double worker_s;   /* the job in the worker, from decoding to replying */
  double held_s;     /* of those, holding the GPU (gpu_lock.c): what the GPU
                        itself costs a job, whatever other processes wait */
} rt_cuda_result;

/* One measurement at a time on a GPU (gpu_lock.c): every measuring worker
 * holds the lock of its GPU while it runs a job, and a process that runs
 * kernels of its own on a GPU where another may be measuring (the model
 * writing graphs while an evaluation times the ones written before) takes
 * the same lock around them. rt_gpu_lock_open_device: the lock of CUDA
 * device ordinal dev, -1 where it cannot be opened (then rt_gpu_lock and
 * rt_gpu_unlock do nothing). */
int rt_gpu_lock_open_device(int dev);
void rt_gpu_lock(int fd); /* waits for the GPU */
void rt_gpu_unlock(int fd);

typedef struct rt_cuda_ctx rt_cuda_ctx;

/* Initialises CUDA in this process (see fork safety above), the device's
 * primary context, a stream and events. */
bool rt_cuda_ctx_new(int device, rt_cuda_ctx **out, dg_status *st);
void rt_cuda_ctx_free(rt_cuda_ctx *c);
const rt_cuda_device *rt_cuda_ctx_device(const rt_cuda_ctx *c);
bool rt_cuda_ctx_broken(const rt_cuda_ctx *c);
/* The device's free and total memory as the driver sees them now (every
 * process's allocations and reserved local memory counted). */
bool rt_cuda_memory(rt_cuda_ctx *c, size_t *free_bytes, size_t *total_bytes, dg_status *st);

/* Runs prog from bin: allocates the buffers, copies host[i] (NULL allowed:
 * then the buffer holds poison) into each non-output buffer, poisons the
 * outputs and intermediates (NaN bytes for floats, 0xA5 for integers), runs
 * the program once, copies every output with a host[i] back, then runs
 * warmup + repeats times, timing each repeat with events around the launches
 * only (the L2 flush before each, when asked, is outside the events). The
 * timed runs are queued back to back and their events read as they finish,
 * so the host does not stall the GPU between repeats. The result says ok
 * or why not; never a crash on a bad program. */
void rt_cuda_run(rt_cuda_ctx *c, const rt_cubin *bin, const rt_cuda_program *prog,
                 void **host, const rt_cuda_timing *tm, rt_cuda_result *res);

/* out[i] (ts->n of them) describes parameter i: the buffers of a program
 * before its intermediates. */
void rt_cuda_bufs_for_params(const rt_tensors *ts, rt_cuda_buf *out);

/* The program of a lowered kernel (lower.h): its parameters, then its
 * global allocations; one launch per lowered kernel, its arguments the
 * kernel's buffers in lw_kernel.params order (as codegen's CUDA target
 * declares them), its dynamic shared memory as lowered. Everything in a. */
struct lw_program_s;
bool rt_cuda_program_from_lowered(const struct lw_program_s *lp, dg_arena *a,
                                  rt_cuda_program *out, dg_status *st);

/* host[i] = ts->args[prog->bufs[i].param] for parameters, NULL otherwise. */
void rt_cuda_host_from_tensors(const rt_cuda_program *prog, const rt_tensors *ts,
                               void **host);

/* ---- data set files (cuda_data.c) ------------------------------------------- */

/* A data set file: the kernel's inputs, the reference's outputs and the
 * outputs' baselines where computed (rt_reference_run), written once by the
 * parent and mapped by workers.
 * K is the reduction length for the tolerance (rt_check_reduce_len). */
bool rt_cuda_data_write(const rt_tensors *ts, int64_t K, const char *path, dg_status *st);

/* ---- GPU jobs through workers (cuda_job.c) ---------------------------------- */

/* A job: the module, the program, the timing, and either a data set file
 * (then the outputs are checked against its reference) or, with data_path
 * NULL, inputs drawn from seed in the worker and no check.
 *
 * A worker keeps the device side of the last data set it ran (keyed by the
 * file's path, inode, size and modification time): working buffers and a
 * pristine copy of the inputs, built on the first job. Each job restores
 * every input from its pristine copy (device to device), poisons the
 * outputs and intermediates again, runs, copies the outputs back and checks
 * them on the CPU while the timed runs go on. A check that fails also
 * verifies the pristine inputs; if an earlier job damaged them, they are
 * rebuilt and the job is run again. A fault retires the worker and its
 * buffers with it. */
typedef struct {
  const rt_cubin *bin;
  const rt_cuda_program *prog;
  const char *data_path;
  uint64_t seed;
  rt_cuda_timing timing;
} rt_cuda_job;

void rt_cuda_job_encode(const rt_cuda_job *job, dg_str *out);

struct rt_worker_pool;
struct rt_worker_result;
/* A pool whose workers run rt_cuda_job messages on device 0. */
bool rt_cuda_pool_new(int n_workers, int max_active, double timeout_s,
                      struct rt_worker_pool **out, dg_status *st);
/* The result of a job run by such a pool; a crash or a timeout of the
 * worker becomes RT_FAIL_CRASH or RT_FAIL_TIMEOUT with its reason. */
void rt_cuda_result_from_worker(const struct rt_worker_result *wr, rt_cuda_result *out);

/* ---- crash-isolated workers (worker.c) ------------------------------------- */

/* Runs in the worker process: handles one job, appends its reply. Returns
 * false to retire the worker after the reply (a broken CUDA context). */
typedef bool (*rt_worker_fn)(void *ctx, const void *job, size_t len, dg_str *reply);

typedef struct {
  int n_workers;    /* processes, >= 1 */
  int max_active;   /* jobs running at once; 0: n_workers (1 for GPU timing) */
  double timeout_s; /* default per job, from dispatch; past it the worker is killed */
  rt_worker_fn fn;  /* with ctx: must exist when the pool forks (it is inherited) */
  void *ctx;
  /* Non-NULL: each worker execs a fresh image of this program and runs the
   * handler registered under this name ("cuda") instead of fn; nothing of
   * this process's state reaches it. CUDA needs this: a process forked
   * after its parent used NVRTC cannot initialise the driver. */
  const char *exec_handler;
} rt_worker_opts;

typedef enum {
  RT_WORKER_REPLIED,   /* the handler replied */
  RT_WORKER_CRASHED,   /* the worker died: a signal, an exit, a lost socket */
  RT_WORKER_TIMED_OUT, /* killed past its deadline */
} rt_worker_outcome;

typedef struct rt_worker_result {
  uint64_t id;
  rt_worker_outcome outcome;
  char reason[160]; /* "killed by SIGSEGV", "timed out after 0.30 s", "" */
  char *reply;      /* REPLIED: the reply (NUL-terminated for convenience) */
  size_t reply_len;
  double seconds;   /* dispatch to completion */
} rt_worker_result;

typedef struct rt_worker_pool rt_worker_pool;

/* Starts the workers. */
bool rt_worker_pool_new(const rt_worker_opts *o, rt_worker_pool **out, dg_status *st);
/* Kills the workers and frees everything. NULL is allowed. */
void rt_worker_pool_free(rt_worker_pool *p);
/* Queues a copy of the job. timeout_s <= 0: the pool's default. */
void rt_worker_pool_submit(rt_worker_pool *p, uint64_t id, const void *job, size_t len,
                           double timeout_s);
/* Dispatches queued jobs to idle workers and waits for the next one to
 * finish, in completion order. False with st ok when nothing is queued or
 * running; false with st set if workers cannot be started. */
bool rt_worker_pool_next(rt_worker_pool *p, rt_worker_result *r, dg_status *st);
int rt_worker_pool_pending(const rt_worker_pool *p); /* queued + running */
int rt_worker_pool_restarts(const rt_worker_pool *p); /* workers replaced so far */
void rt_worker_result_free(rt_worker_result *r);

/* One job in a fresh child process that sees this process's state as it is
 * now (for example a kernel compiled a moment ago by rt_cpu_compile). */
bool rt_worker_call(rt_worker_fn fn, void *ctx, const void *job, size_t len,
                    double timeout_s, rt_worker_result *r, dg_status *st);

/* ---- building a scheduled kernel (build.c) ----------------------------------- */

/* The one road from a scheduled kernel to compiled code, for every caller
 * (dragon emit and run, rt_program_check_c, rt_program_run_cuda, the
 * tuner's GPU measurement). Its stages, in order; the first that fails
 * stops the build and is named with its message:
 *   verify         ir_verify: the scheduled kernel is well formed
 *   lowering       lower_program: the device launches (lower.h)
 *   VerifyGPUCode  the launches within the target's limits (lower_verify)
 *   codegen        the target's source (codegen.h)
 *   compile        NVRTC (CUDA) or the system C compiler (C targets)
 * RT_BUILD_C has no lowering and no limits: the kernel as plain loops. */
#define RT_BUILD_STAGE_LIST(X) \
  X(VERIFY, "verify")          \
  X(LOWER, "lowering")         \
  X(LIMITS, "VerifyGPUCode")   \
  X(CODEGEN, "codegen")        \
  X(COMPILE, "compile")        \
  X(DONE, "built")
typedef enum {
#define X(id, name) RT_BUILD_##id,
  RT_BUILD_STAGE_LIST(X)
#undef X
  RT_BUILD_STAGE_COUNT
} rt_build_stage;
const char *rt_build_stage_name(rt_build_stage s);

typedef enum {
  RT_BUILD_C,           /* the kernel as plain C loops (dragon run --target cpu) */
  RT_BUILD_C_EMULATION, /* lowered; the C target emulating blocks and threads */
  RT_BUILD_CUDA,        /* lowered; CUDA C compiled by NVRTC */
} rt_build_target;

typedef struct {
  rt_build_target target;
  /* CUDA: "sm_90", "sm_90a", "compute_90", ...; NULL: rt_build_arch's */
  const char *arch;
  /* VerifyGPUCode's limits; NULL: those of the architecture (arch, or the
   * default one where the target is not compiled for a device) */
  const lw_limits *limits;
  bool no_limits;         /* lower without checking the limits (no such stage) */
  double compile_limit_s; /* NVRTC stops past it (<= 0: no limit) */
  bool compile;           /* false: stop once the source is there */
  /* C targets: the float64 reference (same parameters, usually the
   * unscheduled kernel) in the same translation unit; NULL: none */
  const dg_func *reference;
  const char *name;       /* the source's file name in NVRTC's messages; NULL: "dragon" */
} rt_build_opts;

/* What a build made, as far as it got. Free with rt_build_free, whether
 * the build succeeded or not. */
typedef struct {
  rt_build_target target;
  rt_build_stage stage;  /* the stage that failed; RT_BUILD_DONE once built */
  char arch[16];         /* CUDA: what it was (or would be) compiled for */
  lw_program *prog;      /* the lowered program (not for RT_BUILD_C) */
  char *source;          /* the target's source */
  rt_cubin bin;          /* CUDA, compiled; bin.log is NVRTC's even when it failed */
  /* C targets, compiled: the kernel (RT_BUILD_C: CODEGEN_KERNEL_FN) or the
   * emulated program (CODEGEN_PROGRAM_FN), and the reference when asked */
  rt_cpu_kernel *fn, *ref_fn;
  double t_lower;        /* seconds: verify, lowering and limits */
  double t_codegen, t_compile;
} rt_build;

/* Builds `scheduled` as o says. False with st set (and out->stage the
 * stage that failed) when a stage fails; every stage before it left its
 * product in *out. Safe on several threads at once. */
bool rt_program_build(const dg_func *scheduled, const rt_build_opts *o, rt_build *out,
                      dg_status *st);
/* The compile stage alone, of a build that stopped at its source
 * (rt_program_build with !o->compile; o as it was then, compile aside):
 * so that a caller can order the compilations of many builds. False with
 * st set and out->stage RT_BUILD_COMPILE when it fails. */
bool rt_build_compile(rt_build *out, const rt_build_opts *o, dg_status *st);
void rt_build_free(rt_build *b);

/* The architecture a CUDA build compiles for when none is given: the
 * device's, "sm_%d%d" of rt_cuda_device_info, or the default (sm_90, the
 * H200's) where no GPU is seen. The first call may probe the GPU. */
void rt_build_arch(char *out, size_t n);
/* The limits VerifyGPUCode checks for an architecture (NULL: the default
 * one). Only sm_90's are written down (lower_limits_sm90); every other
 * architecture is held to them as well. */
const lw_limits *rt_build_limits_for(const char *arch);

/* ---- a scheduled kernel on the GPU, end to end (program.c) ------------------ */

/* Builds f for CUDA (rt_program_build, for rt_build_arch's architecture),
 * computes `ref`'s float64 reference on the CPU, and runs the program on
 * the GPU in a worker process (a fault or a hang costs the worker, not the
 * caller): checked on the first run (unless !check: then the inputs are
 * drawn in the worker and nothing is compared, for shapes whose CPU
 * reference would take too long), then `repeats` timed runs with the L2
 * flushed before each. True when the candidate was judged (res says ok or
 * why not: compile error, wrong numbers, timeout, ...); false with st set
 * when the tool could not do its part (no GPU, no NVRTC, f does not lower). */
bool rt_program_run_cuda(const dg_func *ref, const dg_func *f, uint64_t seed, int repeats,
                         bool check, double timeout_s, rt_cuda_result *res, dg_status *st);

#endif
