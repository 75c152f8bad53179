/* cuda_api.h: private to rt/. The tables of driver and NVRTC functions that
 * cuda_api.c resolves with dlsym, and the one check macro every call goes
 * through.
 *
 * CUDA's headers are not needed to build: the handful of types and
 * constants used are declared here with their ABI values (cuda.h, nvrtc.h
 * of CUDA 12 and 13), so dragon builds where CUDA is not installed.
 */
#ifndef DRAGON_RT_CUDA_API_H
#define DRAGON_RT_CUDA_API_H

#include "dragon/rt_cuda.h"

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
  CU_ATTR_L2_CACHE_SIZE = 38,
  CU_ATTR_CC_MAJOR = 75,
  CU_ATTR_CC_MINOR = 76,
  CU_ATTR_SMEM_OPTIN = 97,
  CU_FUNC_ATTR_MAX_DYNAMIC_SHARED = 8,
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
  cu_result (*ModuleLoadData)(cu_handle *mod, const void *image);
  cu_result (*ModuleUnload)(cu_handle mod);
  cu_result (*ModuleGetFunction)(cu_handle *fn, cu_handle mod, const char *name);
  cu_result (*FuncSetAttribute)(cu_handle fn, int attr, int value);
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
/* The "nvrtc" handler of exec'd workers and its start-up. */
bool rt_nvrtc_job_handle(void *ctx, const void *job, size_t len, dg_str *reply);
void rt_nvrtc_worker_init(void);

/* ---- one measurement at a time on a GPU (gpu_lock.c) ------------------------ */

/* The lock file of device dev (its PCI address), or -1 if none opens. */
int rt_gpu_lock_open(const rt_cu_api *cu, int dev);
void rt_gpu_lock(int fd);   /* waits for the GPU; fd < 0: nothing */
void rt_gpu_unlock(int fd);

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
 * "cuda" runs rt_cuda_job messages (cuda_run.c), "cuda-probe" initialises
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
