/* cuda_api.c: opens libcuda and libnvrtc with dlopen and resolves the
 * functions dragon uses into tables (cuda_api.h); probes for a GPU.
 *
 * Where it looks: $DRAGON_CUDA_LIB_DIR first, then the dynamic loader's own
 * search (LD_LIBRARY_PATH, ld.so.cache), then the usual install places
 * (/usr/local/cuda/lib64, /usr/local/nvidia/lib64, ...). The driver is only
 * ever libcuda.so.1: the toolkit's stubs/libcuda.so answers every call with
 * an error and must not be mistaken for a driver.
 *
 * The GPU probe runs cuInit in an exec'd worker (worker.c) and reports back,
 * so that this process never initialises CUDA (rt_cuda.h says why). It does not pick among several GPUs: device 0.
 */
#include "rt/cuda_api.h"

#include <dlfcn.h>
#include <pthread.h>
#include <string.h>
#include <sys/stat.h>

static const char *const lib_dirs[] = {
    "/usr/local/cuda/lib64",           "/usr/local/cuda/lib",
    "/usr/local/nvidia/lib64",         "/usr/local/nvidia/lib",
    "/usr/lib/x86_64-linux-gnu",       "/usr/lib64",
    "/usr/local/cuda/targets/x86_64-linux/lib",
    "/usr/lib/wsl/lib",
};

/* Tries dir/name for each name in $DRAGON_CUDA_LIB_DIR, then the bare names
 * (the loader's search), then the fixed directories. `tried` collects a
 * short description for the error message. */
static void *open_first(const char *const *names, int n_names, dg_str *tried) {
  const char *env = getenv("DRAGON_CUDA_LIB_DIR");
  char path[600];
  if (env && *env) {
    for (int i = 0; i < n_names; i++) {
      snprintf(path, sizeof path, "%s/%s", env, names[i]);
      void *h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
      if (h) return h;
    }
    dg_str_printf(tried, "$DRAGON_CUDA_LIB_DIR=%s, ", env);
  }
  for (int i = 0; i < n_names; i++) {
    void *h = dlopen(names[i], RTLD_NOW | RTLD_LOCAL);
    if (h) return h;
  }
  dg_str_puts(tried, "the loader's path");
  for (size_t d = 0; d < DG_ARRAY_LEN(lib_dirs); d++) {
    struct stat sb;
    if (stat(lib_dirs[d], &sb) != 0) continue;
    for (int i = 0; i < n_names; i++) {
      snprintf(path, sizeof path, "%s/%s", lib_dirs[d], names[i]);
      void *h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
      if (h) return h;
    }
    dg_str_printf(tried, ", %s", lib_dirs[d]);
  }
  return NULL;
}

/* dlsym into a function pointer field; POSIX lets a function pointer round
 * trip through void *, and memcpy says so without a pedantic warning. */
static bool resolve(void *lib, const char *const *names, void *fnptr, dg_str *missing) {
  for (int i = 0; names[i]; i++) {
    void *sym = dlsym(lib, names[i]);
    if (sym) {
      memcpy(fnptr, &sym, sizeof sym);
      return true;
    }
  }
  dg_str_printf(missing, "%s%s", missing->len ? ", " : "", names[0]);
  return false;
}

#define SYM(lib, field, ...)                                                  \
  do {                                                                        \
    static const char *const names_[] = {__VA_ARGS__, NULL};                  \
    resolve((lib), names_, (void *)&(field), &missing);                       \
  } while (0)

/* ---- driver --------------------------------------------------------------- */

static pthread_mutex_t load_mu = PTHREAD_MUTEX_INITIALIZER;
static rt_cu_api cu_api;
static int cu_state; /* 0 not tried, 1 loaded, -1 failed */
static char cu_err[512];

const rt_cu_api *rt_cu_api_load(dg_status *st) {
  pthread_mutex_lock(&load_mu);
  if (cu_state == 0) {
    static const char *const names[] = {"libcuda.so.1"};
    dg_str tried, missing;
    dg_str_init(&tried);
    dg_str_init(&missing);
    void *lib = open_first(names, 1, &tried);
    if (!lib) {
      snprintf(cu_err, sizeof cu_err,
               "cuda: the driver library libcuda.so.1 was not found (looked in %s); "
               "no NVIDIA driver here",
               tried.s);
      cu_state = -1;
    } else {
      rt_cu_api *a = &cu_api;
      SYM(lib, a->Init, "cuInit");
      SYM(lib, a->DriverGetVersion, "cuDriverGetVersion");
      SYM(lib, a->DeviceGetCount, "cuDeviceGetCount");
      SYM(lib, a->DeviceGet, "cuDeviceGet");
      SYM(lib, a->DeviceGetName, "cuDeviceGetName");
      SYM(lib, a->DeviceGetAttribute, "cuDeviceGetAttribute");
      SYM(lib, a->DeviceTotalMem, "cuDeviceTotalMem_v2");
      SYM(lib, a->DevicePrimaryCtxRetain, "cuDevicePrimaryCtxRetain");
      SYM(lib, a->DevicePrimaryCtxRelease, "cuDevicePrimaryCtxRelease_v2",
          "cuDevicePrimaryCtxRelease");
      SYM(lib, a->CtxSetCurrent, "cuCtxSetCurrent");
      SYM(lib, a->CtxSynchronize, "cuCtxSynchronize");
      SYM(lib, a->CtxGetLimit, "cuCtxGetLimit");
      SYM(lib, a->CtxSetLimit, "cuCtxSetLimit");
      SYM(lib, a->ModuleLoadData, "cuModuleLoadData");
      SYM(lib, a->ModuleUnload, "cuModuleUnload");
      SYM(lib, a->ModuleGetFunction, "cuModuleGetFunction");
      SYM(lib, a->FuncSetAttribute, "cuFuncSetAttribute");
      SYM(lib, a->FuncGetAttribute, "cuFuncGetAttribute");
      SYM(lib, a->MemGetInfo, "cuMemGetInfo_v2");
      SYM(lib, a->MemAlloc, "cuMemAlloc_v2");
      SYM(lib, a->MemFree, "cuMemFree_v2");
      SYM(lib, a->MemcpyHtoD, "cuMemcpyHtoD_v2");
      SYM(lib, a->MemcpyDtoH, "cuMemcpyDtoH_v2");
      SYM(lib, a->MemsetD8, "cuMemsetD8_v2");
      SYM(lib, a->MemsetD32Async, "cuMemsetD32Async");
      SYM(lib, a->MemsetD8Async, "cuMemsetD8Async");
      SYM(lib, a->MemcpyDtoDAsync, "cuMemcpyDtoDAsync_v2");
      SYM(lib, a->MemcpyDtoHAsync, "cuMemcpyDtoHAsync_v2");
      SYM(lib, a->MemAllocHost, "cuMemAllocHost_v2");
      SYM(lib, a->MemFreeHost, "cuMemFreeHost");
      SYM(lib, a->StreamCreate, "cuStreamCreate");
      SYM(lib, a->StreamDestroy, "cuStreamDestroy_v2");
      SYM(lib, a->StreamSynchronize, "cuStreamSynchronize");
      SYM(lib, a->EventCreate, "cuEventCreate");
      SYM(lib, a->EventDestroy, "cuEventDestroy_v2");
      SYM(lib, a->EventRecord, "cuEventRecord");
      SYM(lib, a->EventQuery, "cuEventQuery");
      SYM(lib, a->EventElapsedTime, "cuEventElapsedTime_v2", "cuEventElapsedTime");
      SYM(lib, a->LaunchKernel, "cuLaunchKernel");
      SYM(lib, a->GetErrorName, "cuGetErrorName");
      SYM(lib, a->GetErrorString, "cuGetErrorString");
      if (missing.len) {
        snprintf(cu_err, sizeof cu_err,
                 "cuda: libcuda.so.1 lacks %s (driver too old for CUDA 12)", missing.s);
        dlclose(lib);
        cu_state = -1;
      } else {
        cu_state = 1;
      }
    }
    dg_str_free(&tried);
    dg_str_free(&missing);
  }
  int s = cu_state;
  pthread_mutex_unlock(&load_mu);
  if (s < 0) {
    dg_fail(st, DG_ERR_RUNTIME, "%s", cu_err);
    return NULL;
  }
  return &cu_api;
}

void rt_cu_error_text(const rt_cu_api *cu, cu_result r, char *out, size_t n) {
  const char *name = NULL, *text = NULL;
  if (cu && cu->GetErrorName(r, &name) != CU_SUCCESS) name = NULL;
  if (cu && cu->GetErrorString(r, &text) != CU_SUCCESS) text = NULL;
  if (name && text) snprintf(out, n, "%s (%s)", name, text);
  else snprintf(out, n, "CUDA error %d", r);
}

bool rt_cu_check(const rt_cu_api *cu, cu_result r, dg_status *st, const char *what,
                 const char *file, int line) {
  (void)file;
  (void)line;
  if (r == CU_SUCCESS) return true;
  char text[200];
  rt_cu_error_text(cu, r, text, sizeof text);
  return dg_fail(st, DG_ERR_RUNTIME, "%s: %s", what, text);
}

/* ---- NVRTC ----------------------------------------------------------------- */

static rt_nvrtc_api nvrtc_api;
static int nvrtc_state;
static char nvrtc_err[600];

/* -I for the toolkit's include directory beside the library, if it holds
 * cuda_fp16.h (kernels with f16 include it). */
static void find_include(rt_nvrtc_api *a, void *sym) {
  Dl_info info;
  a->include_opt[0] = 0;
  a->path[0] = 0;
  if (!dladdr(sym, &info) || !info.dli_fname) return;
  snprintf(a->path, sizeof a->path, "%s", info.dli_fname);
  char dir[512];
  snprintf(dir, sizeof dir, "%s", info.dli_fname);
  char *slash = strrchr(dir, '/');
  if (!slash) return;
  *slash = 0;
  static const char *const rel[] = {"/../include", "/../../include", "/../targets/x86_64-linux/include"};
  for (size_t i = 0; i < DG_ARRAY_LEN(rel); i++) {
    char p[600];
    snprintf(p, sizeof p, "%s%s/cuda_fp16.h", dir, rel[i]);
    struct stat sb;
    if (stat(p, &sb) == 0) {
      snprintf(a->include_opt, sizeof a->include_opt, "-I%s%s", dir, rel[i]);
      return;
    }
  }
}

const rt_nvrtc_api *rt_nvrtc_api_load(dg_status *st) {
  pthread_mutex_lock(&load_mu);
  if (nvrtc_state == 0) {
    static const char *const names[] = {"libnvrtc.so", "libnvrtc.so.13", "libnvrtc.so.12"};
    dg_str tried, missing;
    dg_str_init(&tried);
    dg_str_init(&missing);
    void *lib = open_first(names, (int)DG_ARRAY_LEN(names), &tried);
    if (!lib) {
      snprintf(nvrtc_err, sizeof nvrtc_err,
               "nvrtc: libnvrtc.so was not found (looked in %s); install the CUDA toolkit "
               "or set DRAGON_CUDA_LIB_DIR",
               tried.s);
      nvrtc_state = -1;
    } else {
      rt_nvrtc_api *a = &nvrtc_api;
      SYM(lib, a->Version, "nvrtcVersion");
      SYM(lib, a->CreateProgram, "nvrtcCreateProgram");
      SYM(lib, a->DestroyProgram, "nvrtcDestroyProgram");
      SYM(lib, a->CompileProgram, "nvrtcCompileProgram");
      SYM(lib, a->GetPTXSize, "nvrtcGetPTXSize");
      SYM(lib, a->GetPTX, "nvrtcGetPTX");
      SYM(lib, a->GetCUBINSize, "nvrtcGetCUBINSize");
      SYM(lib, a->GetCUBIN, "nvrtcGetCUBIN");
      SYM(lib, a->GetProgramLogSize, "nvrtcGetProgramLogSize");
      SYM(lib, a->GetProgramLog, "nvrtcGetProgramLog");
      SYM(lib, a->GetErrorString, "nvrtcGetErrorString");
      if (missing.len) {
        snprintf(nvrtc_err, sizeof nvrtc_err, "nvrtc: the library lacks %s (CUDA 11.1 or newer needed)",
                 missing.s);
        dlclose(lib);
        nvrtc_state = -1;
      } else {
        static const char *const flow[] = {"nvrtcSetFlowCallback", NULL};
        dg_str absent;
        dg_str_init(&absent);
        if (!resolve(lib, flow, &a->SetFlowCallback, &absent)) a->SetFlowCallback = NULL;
        dg_str_free(&absent);
        void *sym = dlsym(lib, "nvrtcVersion");
        find_include(a, sym);
        nvrtc_state = 1;
      }
    }
    dg_str_free(&tried);
    dg_str_free(&missing);
  }
  int s = nvrtc_state;
  pthread_mutex_unlock(&load_mu);
  if (s < 0) {
    dg_fail(st, DG_ERR_RUNTIME, "%s", nvrtc_err);
    return NULL;
  }
  return &nvrtc_api;
}

bool rt_nvrtc_available(dg_status *st) { return rt_nvrtc_api_load(st) != NULL; }

void rt_cu_describe(const rt_cu_api *cu, int dev, rt_cuda_device *d) {
  size_t mem = 0;
  int l2 = 0;
  memset(d, 0, sizeof *d);
  cu->DeviceGetName(d->name, (int)sizeof d->name - 1, dev);
  cu->DeviceGetAttribute(&d->cc_major, CU_ATTR_CC_MAJOR, dev);
  cu->DeviceGetAttribute(&d->cc_minor, CU_ATTR_CC_MINOR, dev);
  cu->DeviceGetAttribute(&d->sm_count, CU_ATTR_MULTIPROCESSOR_COUNT, dev);
  cu->DeviceGetAttribute(&d->threads_per_sm, CU_ATTR_MAX_THREADS_PER_SM, dev);
  cu->DeviceGetAttribute(&l2, CU_ATTR_L2_CACHE_SIZE, dev);
  cu->DeviceGetAttribute(&d->smem_optin, CU_ATTR_SMEM_OPTIN, dev);
  cu->DeviceTotalMem(&mem, dev);
  cu->DriverGetVersion(&d->driver_version);
  d->l2_bytes = l2;
  d->mem_bytes = (int64_t)mem;
}

/* ---- the GPU probe ------------------------------------------------------- */

static int probe_state; /* 0 not run, 1 a GPU, -1 none */
static rt_cuda_device probe_dev;
static char probe_err[512];

/* In the probe worker: initialise, describe device 0, reply
 * (int ok, rt_cuda_device, 512 bytes of message). */
bool rt_cuda_probe_handle(void *ctx, const void *job, size_t len, dg_str *reply) {
  (void)ctx;
  (void)job;
  (void)len;
  dg_status st;
  dg_status_ok(&st);
  rt_cuda_device d;
  memset(&d, 0, sizeof d);
  char msg[512] = "";
  int ok = 0;
  const rt_cu_api *cu = rt_cu_api_load(&st);
  int n = 0, dev = 0;
  if (!cu) {
    snprintf(msg, sizeof msg, "%s", st.msg);
  } else if (!RT_CU_CHECK(cu, cu->Init(0), &st, "cuda: cuInit") ||
             !RT_CU_CHECK(cu, cu->DeviceGetCount(&n), &st, "cuda: cuDeviceGetCount")) {
    snprintf(msg, sizeof msg, "%s", st.msg);
  } else if (n < 1) {
    snprintf(msg, sizeof msg, "cuda: the driver sees no GPU");
  } else if (RT_CU_CHECK(cu, cu->DeviceGet(&dev, 0), &st, "cuda: cuDeviceGet")) {
    rt_cu_describe(cu, dev, &d);
    ok = 1;
  } else {
    snprintf(msg, sizeof msg, "%s", st.msg);
  }
  dg_str_putn(reply, (const char *)&ok, sizeof ok);
  dg_str_putn(reply, (const char *)&d, sizeof d);
  dg_str_putn(reply, msg, sizeof msg);
  return true;
}

/* The library is opened in the probe process only: this one keeps no trace
 * of the driver, not even its constructors. cuInit can take seconds on a
 * cold driver; a minute means it is stuck. */
static void probe_run(void) {
  rt_worker_opts o = {1, 1, 60, NULL, NULL, "cuda-probe"};
  rt_worker_pool *p;
  dg_status st;
  rt_worker_result r;
  memset(&r, 0, sizeof r);
  enum { REPLY = sizeof(int) + sizeof(rt_cuda_device) + 512 };
  bool got = false;
  if (rt_worker_pool_new(&o, &p, &st)) {
    rt_worker_pool_submit(p, 0, "", 0, 0);
    got = rt_worker_pool_next(p, &r, &st);
    rt_worker_pool_free(p);
  }
  int ok = 0;
  if (got && r.outcome == RT_WORKER_REPLIED && r.reply_len == REPLY) {
    memcpy(&ok, r.reply, sizeof ok);
    if (ok) memcpy(&probe_dev, r.reply + sizeof(int), sizeof probe_dev);
    else snprintf(probe_err, sizeof probe_err, "%.511s", r.reply + sizeof(int) + sizeof(rt_cuda_device));
  } else if (got) {
    snprintf(probe_err, sizeof probe_err, "cuda: the GPU probe process %s", r.reason);
  } else {
    snprintf(probe_err, sizeof probe_err, "cuda: the GPU probe could not start: %.400s", st.msg);
  }
  probe_state = ok ? 1 : -1;
  rt_worker_result_free(&r);
}

static pthread_mutex_t probe_mu = PTHREAD_MUTEX_INITIALIZER;

bool rt_cuda_available(dg_status *st) {
  pthread_mutex_lock(&probe_mu);
  if (probe_state == 0) probe_run();
  int s = probe_state;
  pthread_mutex_unlock(&probe_mu);
  if (s < 0) return dg_fail(st, DG_ERR_RUNTIME, "%s", probe_err);
  return true;
}

bool rt_cuda_device_info(rt_cuda_device *out, dg_status *st) {
  if (!rt_cuda_available(st)) return false;
  *out = probe_dev;
  return true;
}
