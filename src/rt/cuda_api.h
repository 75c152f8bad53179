/* cuda_api.h: private to rt/, what its CUDA files share. The tables of
 * driver and NVRTC functions that cuda_api.c resolves with dlsym, and the
 * one check macro every call goes through; compilation in this process or
 * in NVRTC workers; the GPU lock; the CUDA context and the pieces of a run
 * (cuda_run.c) that the GPU job (cuda_job.c) runs over its own buffers; the
 * data a job runs on (cuda_data.c); the message layout; worker handlers.
 *
 * CUDA's headers are not needed to build: the handful of types and
 * constants used are declared here with their ABI values (cuda.h, nvrtc.h
 * of CUDA 12 and 13), so dragon builds where CUDA is not installed.
 */
#ifndef DRAGON_RT_CUDA_API_H
#define DRAGON_RT_CUDA_API_H

#include "dragon/rt_cuda.h"

#include <sys/types.h>
#include <time.h>

typedef int cu_result;                  /* CUresult */
typedef unsigned long long cu_devptr;   /* CUdeviceptr */
typedef void *cu_handle;                /* CUcontext, CUmodule, CUfunction, CUstream, CUevent */

enum {
  CU_SUCCESS = 0,
  CU_ERR_INVALID_VALUE = 1,
  CU_ERR_OUT_OF_MEMORY = 2,
  CU_ERR_NOT_READY = 600,
  CU_ERR_ILLEGAL_ADDRESS = 700,
  CU_ERR_LAUNCH_OUT_OF_RESOURCES = 701,
  CU_ERR_LAUNCH_TIMEOUT = 702,
  CU_ERR_ASSERT = 710,
  CU_ERR_HARDWARE_STACK_ERROR = 714,
  CU_ERR_ILLEGAL_INSTRUCTION = 715,
  CU_ERR_MISALIGNED_ADDRESS = 716,
  CU_ERR_INVALID_ADDRESS_SPACE = 717,
  CU_ERR_INVALID_PC = 718,
  CU_ERR_LAUNCH_FAILED = 719,
  CU_ERR_UNKNOWN = 999,
};

enum {
  CU_ATTR_MULTIPROCESSOR_COUNT = 16,
  CU_ATTR_MAX_THREADS_PER_SM = 39,
  CU_ATTR_L2_CACHE_SIZE = 38,
  CU_ATTR_CC_MAJOR = 75,
  CU_ATTR_CC_MINOR = 76,
  CU_ATTR_SMEM_OPTIN = 97,
  CU_FUNC_ATTR_LOCAL_SIZE_BYTES = 3,
  CU_FUNC_ATTR_MAX_DYNAMIC_SHARED = 8,
  CU_LIMIT_STACK_SIZE = 0,
  CU_STREAM_NON_BLOCKING_FLAG = 1,
};

typedef struct {
  cu_result (*Init)(unsigned flags);
  cu_result (*DriverGetVersion)(int *v);
  cu_result (*DeviceGetCount)(int *n);
  cu_result (*DeviceGet)(int *dev, int ordinal);
  cu_result (*DeviceGetName)(char *name, int len, int dev);
  cu_result (*DeviceGetAttribute)(int *v, int attr, int dev);
  cu_result (*DeviceTotalMem)(size_t *bytes, int dev);
  cu_result (*DevicePrimaryCtxRetain)(cu_handle *ctx, int dev);
  cu_result (*DevicePrimaryCtxRelease)(int dev);
  cu_result (*CtxSetCurrent)(cu_handle ctx);
  cu_result (*CtxSynchronize)(void);
  cu_result (*CtxGetLimit)(size_t *value, int limit);
  cu_result (*CtxSetLimit)(int limit, size_t value);
  cu_result (*ModuleLoadData)(cu_handle *mod, const void *image);
  cu_result (*ModuleUnload)(cu_handle mod);
  cu_result (*ModuleGetFunction)(cu_handle *fn, cu_handle mod, const char *name);
  cu_result (*FuncSetAttribute)(cu_handle fn, int attr, int value);
  cu_result (*FuncGetAttribute)(int *value, int attr, cu_handle fn);
  cu_result (*MemGetInfo)(size_t *free_bytes, size_t *total_bytes);
  cu_result (*MemAlloc)(cu_devptr *p, size_t bytes);
  cu_result (*MemFree)(cu_devptr p);
  cu_result (*MemcpyHtoD)(cu_devptr dst, const void *src, size_t bytes);
  cu_result (*MemcpyDtoH)(void *dst, cu_devptr src, size_t bytes);
  cu_result (*MemsetD8)(cu_devptr dst, unsigned char v, size_t n);
  cu_result (*MemsetD32Async)(cu_devptr dst, unsigned v, size_t n, cu_handle stream);
  cu_result (*MemsetD8Async)(cu_devptr dst, unsigned char v, size_t n, cu_handle stream);
  cu_result (*MemcpyDtoDAsync)(cu_devptr dst, cu_devptr src, size_t bytes, cu_handle stream);
  cu_result (*MemcpyDtoHAsync)(void *dst, cu_devptr src, size_t bytes, cu_handle stream);
  cu_result (*MemAllocHost)(void **p, size_t bytes); /* page-locked */
  cu_result (*MemFreeHost)(void *p);
  cu_result (*StreamCreate)(cu_handle *s, unsigned flags);
  cu_result (*StreamDestroy)(cu_handle s);
  cu_result (*StreamSynchronize)(cu_handle s);
  cu_result (*EventCreate)(cu_handle *e, unsigned flags);
  cu_result (*EventDestroy)(cu_handle e);
  cu_result (*EventRecord)(cu_handle e, cu_handle stream);
  cu_result (*EventQuery)(cu_handle e);
  cu_result (*EventElapsedTime)(float *ms, cu_handle start, cu_handle end);
  cu_result (*LaunchKernel)(cu_handle fn, unsigned gx, unsigned gy, unsigned gz,
                            unsigned bx, unsigned by, unsigned bz, unsigned shared,
                            cu_handle stream, void **params, void **extra);
  cu_result (*GetErrorName)(cu_result r, const char **s);
  cu_result (*GetErrorString)(cu_result r, const char **s);
} rt_cu_api;

typedef void *nvrtc_prog;

typedef struct {
  int (*Version)(int *major, int *minor);
  int (*CreateProgram)(nvrtc_prog *p, const char *src, const char *name, int n_headers,
                       const char *const *headers, const char *const *include_names);
  int (*DestroyProgram)(nvrtc_prog *p);
  int (*CompileProgram)(nvrtc_prog p, int n_opts, const char *const *opts);
  int (*GetPTXSize)(nvrtc_prog p, size_t *n);
  int (*GetPTX)(nvrtc_prog p, char *out);
  int (*GetCUBINSize)(nvrtc_prog p, size_t *n);
  int (*GetCUBIN)(nvrtc_prog p, char *out);
  int (*GetProgramLogSize)(nvrtc_prog p, size_t *n);
  int (*GetProgramLog)(nvrtc_prog p, char *out);
  const char *(*GetErrorString)(int r);
  /* optional (CUDA 12.8 on; NULL before): a callback NVRTC polls during a
   * compilation, which cancels it by returning 1 */
  int (*SetFlowCallback)(nvrtc_prog p, int (*cb)(void *payload, void *reserved), void *payload);
  /* "-I<dir>" for the toolkit's headers (cuda_fp16.h), "" if not found */
  char include_opt[600];
  char path[512]; /* the library that was opened */
} rt_nvrtc_api;

/* The tables, opened once (thread-safe); NULL with st set if absent. */
const rt_cu_api *rt_cu_api_load(dg_status *st);
const rt_nvrtc_api *rt_nvrtc_api_load(dg_status *st);

/* Fills d from device dev's attributes (the driver must be initialised). */
void rt_cu_describe(const rt_cu_api *cu, int dev, rt_cuda_device *d);

/* "CUDA_ERROR_ILLEGAL_ADDRESS (an illegal memory access was encountered)" */
void rt_cu_error_text(const rt_cu_api *cu, cu_result r, char *out, size_t n);

/* ---- NVRTC in this process or in worker processes --------------------------- */

/* The compilation itself, always in this process (nvrtc.c); arch non-NULL. */
bool rt_nvrtc_compile_here(const char *src, const char *name, const char *arch, double limit_s,
                           rt_cubin *out, dg_status *st);
/* The same in an NVRTC worker process (nvrtc_pool.c), where processes are
 * allowed and one can run: then *done and the result is the compilation's;
 * otherwise *done is false and nothing was touched. */
bool rt_nvrtc_compile_pooled(const char *src, const char *name, const char *arch, double limit_s,
                             rt_cubin *out, dg_status *st, bool *done);
/* In a worker process where one is allowed, in this one otherwise: what
 * rt_nvrtc_compile_within does with a source the cache does not hold
 * (nvrtc.c). */
bool rt_nvrtc_compile_uncached(const char *src, const char *name, const char *arch,
                               double limit_s, rt_cubin *out, dg_status *st);
/* The cache of compiled sources in front of it (nvrtc_cache.c); arch
 * non-NULL. */
bool rt_nvrtc_compile_cached(const char *src, const char *name, const char *arch, double limit_s,
                             rt_cubin *out, dg_status *st);
/* The "nvrtc" handler of exec'd workers and its start-up. */
bool rt_nvrtc_job_handle(void *ctx, const void *job, size_t len, dg_str *reply);
void rt_nvrtc_worker_init(void);

/* ---- one measurement at a time on a GPU (gpu_lock.c) ------------------------ */

/* The lock file of device dev (its PCI address), or -1 if none opens
 * (rt_gpu_lock and rt_gpu_unlock: rt_cuda.h). */
int rt_gpu_lock_open(const rt_cu_api *cu, int dev);

/* ---- runs (cuda_run.c), shared with the GPU job (cuda_job.c) --------------- */

/* Timed runs in flight at once: each holds a pair of events until its time
 * is read, so at most this many are queued ahead of the host. */
enum { RT_CUDA_RING = 64 };

/* The most local memory (bytes a thread: spilled registers, arrays kept in
 * local memory) a kernel may use. The driver reserves it for every thread
 * the GPU can hold at once (270,336 on an H100 or H200): 16 KiB is 4.1 GiB
 * of the GPU's memory. A kernel past it is refused before it is launched:
 * its reservation would starve the other processes that share the GPU,
 * and a kernel that keeps 4,096 floats a thread in local memory is never
 * the fast one. */
enum { RT_CUDA_LOCAL_MAX = 16 * 1024 };

struct rt_cuda_ctx {
  const rt_cu_api *cu;
  int dev;
  cu_handle ctx, stream;
  cu_handle ev_out;                 /* the checked run's outputs are back */
  cu_handle ev_warm;                /* the warm-up runs are done */
  cu_handle ev_done;                /* everything queued so far is done */
  cu_handle ev_t[2 * RT_CUDA_RING]; /* run k: start ev_t[2 (k % RT_CUDA_RING)], end the next */
  rt_cuda_device info;
  cu_devptr flush; /* written before each timed run to evict the L2 */
  size_t flush_bytes;
  cu_devptr scratch; /* a program's intermediate buffers, carved out of one block */
  size_t scratch_bytes;
  void *pinned; /* page-locked staging for outputs on their way back */
  size_t pinned_bytes;
  /* The per-thread stack the context began with. The driver grows it for
   * a kernel that needs more local memory and never shrinks it: a kernel
   * of 170 KB a thread would keep 46 GB of an H100 reserved for the rest
   * of the process, and the other processes sharing the GPU find it full.
   * So once such a kernel's module is unloaded the stack is set back. */
  size_t stack0;
  bool stack_grown;
  bool broken;
};

/* Sets res's failure and its reason unless it has one already: the first
 * failure is the reason. */
void rt_cuda_fail(rt_cuda_result *res, rt_fail f, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
/* An error seen while or after kernels ran; a sticky one breaks c. */
void rt_cuda_run_error(rt_cuda_ctx *c, rt_cuda_result *res, cu_result r, const char *where);
/* Checks the program's shape before anything reaches the driver. */
bool rt_cuda_program_ok(const rt_cuda_ctx *c, const rt_cuda_program *prog, rt_cuda_result *res);
size_t rt_cuda_buf_bytes(const rt_cuda_buf *b); /* on the device, at least 1 */
static inline size_t rt_cuda_align_up(size_t x, size_t a) { return (x + a - 1) / a * a; }
/* Grows a device block to `want` bytes, only between runs. */
bool rt_cuda_device_grow(rt_cuda_ctx *c, cu_devptr *p, size_t *have, size_t want,
                         const char *what, rt_cuda_result *res);
/* The module of bin and the function of each launch of prog (fns: n_launches). */
bool rt_cuda_module_load(rt_cuda_ctx *c, const rt_cubin *bin, const rt_cuda_program *prog,
                         cu_handle *mod, cu_handle *fns, rt_cuda_result *res);
void rt_cuda_module_unload(rt_cuda_ctx *c, cu_handle mod);

/* One buffer of a run: where it lives and how it is set before the run. */
typedef struct {
  cu_devptr ptr;
  size_t bytes;
  cu_devptr pristine; /* != 0: copied from here, device to device */
  bool poison;        /* else, true: poisoned; false: left as it is (uploaded) */
  void *back;         /* != NULL: the checked run's values are copied here */
} rt_cuda_run_buf;

/* Called while the timed runs are on the GPU, once the checked run's
 * outputs are back on the host: compares them (sets res->check and, on a
 * mismatch, RT_FAIL_WRONG). */
typedef void (*rt_cuda_check_fn)(void *ctx, rt_cuda_result *res);

/* A run over buffers that exist (rb: one per buffer of prog): set up, the
 * checked run, check beside the warm-up and timed runs; drained before it
 * returns unless the context broke. */
void rt_cuda_run_bufs(rt_cuda_ctx *c, const rt_cuda_program *prog, const cu_handle *fns,
                      const rt_cuda_run_buf *rb, const rt_cuda_timing *tm,
                      rt_cuda_check_fn check, void *check_ctx, rt_cuda_result *res);
/* *tm = *in (NULL: zeros) with the defaults: a 10 s timeout, no negative counts. */
void rt_cuda_timing_defaults(const rt_cuda_timing *in, rt_cuda_timing *tm);

/* ---- the data a GPU job runs on (cuda_data.c) ------------------------------- */

/* A mapped data set: tensors whose inputs and references point into the
 * mapping; outputs get their own host arrays (the GPU's results). */
typedef struct {
  char path[512];
  dev_t dev;
  ino_t ino;
  struct timespec mtime;
  off_t size;
  void *map;
  size_t map_len;
  dg_arena *arena;
  rt_tensors ts;
  int64_t K;
  uint64_t gen; /* a number of its own for each mapping this process made */
} rt_cuda_data;

/* Maps the data set at path into m, unless m maps that very file already
 * (same path, inode, size and modification time). */
bool rt_cuda_data_map(rt_cuda_data *m, const char *path, dg_status *st);
void rt_cuda_data_unmap(rt_cuda_data *m); /* and zeroes m */
/* Inputs drawn from the seed, for a job without a data set: one tensor per
 * parameter buffer of prog (arrays malloc'ed: rt_cuda_data_seeded_free). */
bool rt_cuda_data_seeded(const rt_cuda_program *prog, uint64_t seed, dg_arena *a,
                         rt_tensors *ts, dg_status *st);
void rt_cuda_data_seeded_free(rt_tensors *ts);
/* Whether prog's parameter buffers match the tensors (dtype, size, output). */
bool rt_cuda_data_matches(const rt_cuda_program *prog, const rt_tensors *ts, dg_status *st);

/* ---- messages to and from worker processes (wire.c) ---------------------- */

void rt_wire_put_i32(dg_str *s, int32_t v);
void rt_wire_put_i64(dg_str *s, int64_t v);
void rt_wire_put_f64(dg_str *s, double v);
void rt_wire_put_bytes(dg_str *s, const void *p, size_t n); /* i64 length, bytes */
void rt_wire_put_text(dg_str *s, const char *t);            /* NULL: "" */

typedef struct {
  const char *p;
  size_t n, at;
  bool bad; /* a read went past the end or met a negative length */
} rt_wire_reader;

const void *rt_wire_take(rt_wire_reader *r, size_t n); /* NULL once bad */
int32_t rt_wire_get_i32(rt_wire_reader *r);
int64_t rt_wire_get_i64(rt_wire_reader *r);
double rt_wire_get_f64(rt_wire_reader *r);
const void *rt_wire_get_bytes(rt_wire_reader *r, size_t *n);
char *rt_wire_get_text(rt_wire_reader *r, dg_arena *a); /* a NUL-terminated copy */

/* Worker handlers registered by name for exec'd workers (worker.c):
 * "cuda" runs rt_cuda_job messages (cuda_job.c), "cuda-probe" initialises
 * the driver and describes device 0 (cuda_api.c). */
bool rt_cuda_job_handle(void *ctx, const void *job, size_t len, dg_str *reply);
/* Run once by an exec'd "cuda" worker before its first job: brings CUDA up
 * while the parent carries on (on failure, each job tries again and reports
 * why it could not). */
void rt_cuda_worker_init(void);
bool rt_cuda_probe_handle(void *ctx, const void *job, size_t len, dg_str *reply);

/* The one check for driver calls: on failure sets st to "WHAT: error text"
 * and evaluates to false. */
#define RT_CU_CHECK(cu, call, st, what)                                       \
  rt_cu_check((cu), (call), (st), (what), __FILE__, __LINE__)
bool rt_cu_check(const rt_cu_api *cu, cu_result r, dg_status *st, const char *what,
                 const char *file, int line);

#endif
