/* nccl.cu: data-parallel training over NCCL, one process per GPU, started
 * by the binary itself.
 *
 * nn_cuda_dp_launch forks one process per rank (rank r on device r); rank
 * 0 creates the NCCL unique id and writes it into a pipe to each other
 * rank; every rank builds its communicator and runs the caller's function;
 * results come back to the launcher over one pipe per rank ('O' or 'E',
 * then text). A rank that fails or hangs ends the group: the launcher
 * kills the other ranks (its own children, by pid) instead of leaving them
 * blocked in a collective. The gradient all-reduce sums in place, layer by
 * layer during the backward on a second stream of the model's (model.cu).
 *
 * NCCL is loaded with dlopen ($DRAGON_NCCL_LIB, else libnccl.so.2 on the
 * library path), with the few types and constants it needs declared here
 * from NCCL's stable ABI (nccl.h 2.x), so that building needs no NCCL
 * header and the binary starts where NCCL is absent (the GPU machine's
 * toolkit has none; PyTorch ships one). One rank needs no NCCL at all.
 * NVLink multicast (NVLS) stays off: NCCL_NVLS_ENABLE=0 unless already set.
 * Does not do multi-node launches or ZeRO sharding.
 */
#include <dlfcn.h>
#include <errno.h>
#include <poll.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "common.cuh"

enum { MAX_RANKS = 64, SCRATCH_DOUBLES = 64 };

/* ---- NCCL through dlopen ------------------------------------------------- */

typedef struct {
  char internal[128]; /* NCCL_UNIQUE_ID_BYTES */
} nccl_id;
typedef int nccl_result;                         /* ncclResult_t, ncclSuccess = 0 */
enum { NCCL_FLOAT32 = 7, NCCL_FLOAT64 = 8 };     /* ncclDataType_t */
enum { NCCL_SUM = 0 };                           /* ncclRedOp_t */

static struct {
  void *lib;
  nccl_result (*get_unique_id)(nccl_id *);
  nccl_result (*comm_init_rank)(void **comm, int nranks, nccl_id id, int rank);
  nccl_result (*all_reduce)(const void *, void *, size_t, int, int, void *, cudaStream_t);
  nccl_result (*comm_destroy)(void *);
  const char *(*error_string)(nccl_result);
} nccl;

static bool nccl_load(dg_status *st) {
  if (nccl.lib) return true;
  const char *env = getenv("DRAGON_NCCL_LIB");
  const char *names[] = {env && *env ? env : "libnccl.so.2", "libnccl.so"};
  void *lib = NULL;
  for (int i = 0; i < 2 && !lib; i++) lib = dlopen(names[i], RTLD_NOW | RTLD_LOCAL);
  if (!lib)
    return dg_fail(st, DG_ERR_RUNTIME,
                   "NCCL: cannot load %s (%s); set DRAGON_NCCL_LIB to libnccl.so.2 or add its "
                   "folder to LD_LIBRARY_PATH",
                   names[0], dlerror());
  struct {
    const char *name;
    void **slot;
  } syms[] = {{"ncclGetUniqueId", (void **)&nccl.get_unique_id},
              {"ncclCommInitRank", (void **)&nccl.comm_init_rank},
              {"ncclAllReduce", (void **)&nccl.all_reduce},
              {"ncclCommDestroy", (void **)&nccl.comm_destroy},
              {"ncclGetErrorString", (void **)&nccl.error_string}};
  for (size_t i = 0; i < DG_ARRAY_LEN(syms); i++) {
    *syms[i].slot = dlsym(lib, syms[i].name);
    if (!*syms[i].slot) {
      dlclose(lib);
      return dg_fail(st, DG_ERR_RUNTIME, "NCCL: %s has no %s", names[0], syms[i].name);
    }
  }
  nccl.lib = lib;
  return true;
}

static bool nccl_ok(nccl_result r, const char *expr) {
  if (r == 0) return true;
  nc_error_set("%s: NCCL error %d: %s", expr, r, nccl.error_string ? nccl.error_string(r) : "?");
  return false;
}

/* ---- a rank -------------------------------------------------------------- */

struct nn_cuda_dp {
  int rank, size;
  void *comm; /* ncclComm_t; NULL with one rank */
  double *scratch;
  cudaStream_t stream;
};

extern "C" int nn_cuda_dp_rank(const nn_cuda_dp *dp) { return dp->rank; }
extern "C" int nn_cuda_dp_size(const nn_cuda_dp *dp) { return dp->size; }

bool nc_dp_allreduce(nn_cuda_dp *dp, void *buf, size_t count, bool f64, cudaStream_t s) {
  if (dp->size == 1) return true;
  return nccl_ok(nccl.all_reduce(buf, buf, count, f64 ? NCCL_FLOAT64 : NCCL_FLOAT32, NCCL_SUM,
                                 dp->comm, s),
                 "ncclAllReduce");
}

extern "C" bool nn_cuda_dp_sum(nn_cuda_dp *dp, double *vals, int n, dg_status *st) {
  if (dp->size == 1) return true;
  if (n < 1 || n > SCRATCH_DOUBLES)
    return dg_fail(st, DG_ERR_INVALID, "data parallel sum: %d values (1 to %d)", n, SCRATCH_DOUBLES);
  size_t bytes = sizeof(double) * (size_t)n;
  NC_CUDA(cudaMemcpyAsync(dp->scratch, vals, bytes, cudaMemcpyHostToDevice, dp->stream)) &&
      nc_dp_allreduce(dp, dp->scratch, (size_t)n, true, dp->stream) &&
      NC_CUDA(cudaMemcpyAsync(vals, dp->scratch, bytes, cudaMemcpyDeviceToHost, dp->stream)) &&
      NC_CUDA(cudaStreamSynchronize(dp->stream));
  return nc_error_take(st, "data parallel sum");
}

static bool write_all(int fd, const void *p, size_t n) {
  const char *c = (const char *)p;
  while (n > 0) {
    ssize_t w = write(fd, c, n);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) return false;
    c += w, n -= (size_t)w;
  }
  return true;
}

static bool read_all(int fd, void *p, size_t n) {
  char *c = (char *)p;
  while (n > 0) {
    ssize_t r = read(fd, c, n);
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) return false;
    c += r, n -= (size_t)r;
  }
  return true;
}

/* The body of a forked rank; returns its exit status. */
static int rank_main(int rank, int nranks, int id_fds[][2], int result_fd, nn_cuda_dp_fn fn,
                     void *arg) {
  dg_status st;
  dg_status_ok(&st);
  nn_cuda_dp dp;
  memset(&dp, 0, sizeof dp);
  dp.rank = rank;
  dp.size = nranks;
  dg_str text;
  dg_str_init(&text);
  int ndev = 0;
  bool ok = true;
  cudaError_t e = cudaGetDeviceCount(&ndev);
  if (e != cudaSuccess || ndev < nranks)
    ok = dg_fail(&st, DG_ERR_RUNTIME, "%d ranks need %d GPUs, %d found%s%s", nranks, nranks,
                 e == cudaSuccess ? ndev : 0, e == cudaSuccess ? "" : ": ",
                 e == cudaSuccess ? "" : cudaGetErrorString(e));
  if (ok && !(NC_CUDA(cudaSetDevice(rank)) &&
              NC_CUDA(cudaStreamCreateWithFlags(&dp.stream, cudaStreamNonBlocking)) &&
              NC_CUDA(cudaMalloc(&dp.scratch, sizeof(double) * SCRATCH_DOUBLES))))
    ok = nc_error_take(&st, "rank setup");
  if (ok && nranks > 1) {
    nccl_id id;
    memset(&id, 0, sizeof id);
    ok = nccl_load(&st);
    if (ok && rank == 0) {
      if (!nccl_ok(nccl.get_unique_id(&id), "ncclGetUniqueId")) ok = nc_error_take(&st, "rank 0");
      for (int r = 1; ok && r < nranks; r++)
        if (!write_all(id_fds[r][1], &id, sizeof id))
          ok = dg_fail(&st, DG_ERR_RUNTIME, "rank 0: cannot send the NCCL id to rank %d", r);
    } else if (ok && !read_all(id_fds[rank][0], &id, sizeof id)) {
      ok = dg_fail(&st, DG_ERR_RUNTIME, "rank %d: no NCCL id from rank 0", rank);
    }
    if (ok && !nccl_ok(nccl.comm_init_rank(&dp.comm, nranks, id, rank), "ncclCommInitRank"))
      ok = nc_error_take(&st, "NCCL");
  }
  if (ok) ok = fn(&dp, arg, &text, &st);
  char tag = ok ? 'O' : 'E';
  write_all(result_fd, &tag, 1);
  if (ok) write_all(result_fd, text.s, text.len);
  else write_all(result_fd, st.msg, strlen(st.msg));
  close(result_fd);
  dg_str_free(&text);
  if (dp.comm) nccl.comm_destroy(dp.comm);
  if (dp.scratch) cudaFree(dp.scratch);
  if (dp.stream) cudaStreamDestroy(dp.stream);
  return ok ? 0 : 1;
}

/* ---- the launcher ---------------------------------------------------------- */

extern "C" bool nn_cuda_dp_launch(int nranks, nn_cuda_dp_fn fn, void *arg, int timeout_s,
                                  dg_str *out, dg_status *st) {
  if (nranks < 1 || nranks > MAX_RANKS)
    return dg_fail(st, DG_ERR_INVALID, "data parallel: %d ranks (1 to %d)", nranks, MAX_RANKS);
  if (timeout_s < 1) return dg_fail(st, DG_ERR_INVALID, "data parallel: timeout %d s", timeout_s);
  int id_fds[MAX_RANKS][2], res_fds[MAX_RANKS][2];
  pid_t pids[MAX_RANKS];
  for (int r = 0; r < nranks; r++) id_fds[r][0] = id_fds[r][1] = res_fds[r][0] = res_fds[r][1] = -1;
  bool ok = true;
  for (int r = 0; ok && r < nranks; r++)
    if (pipe(id_fds[r]) != 0 || pipe(res_fds[r]) != 0)
      ok = dg_fail(st, DG_ERR_RUNTIME, "data parallel: pipe: %s", strerror(errno));
  int started = 0;
  if (ok) {
    setenv("NCCL_NVLS_ENABLE", "0", 0);
    fflush(stdout);
    fflush(stderr);
    for (int r = 0; r < nranks; r++) {
      pid_t pid = fork();
      if (pid < 0) {
        ok = dg_fail(st, DG_ERR_RUNTIME, "data parallel: fork: %s", strerror(errno));
        break;
      }
      if (pid == 0) {
        /* keep only this rank's ends, so a dead peer is seen as EOF */
        for (int j = 0; j < nranks; j++) {
          if (!(r == 0 && j > 0)) close(id_fds[j][1]);
          if (j != r || r == 0) close(id_fds[j][0]);
          close(res_fds[j][0]);
          if (j != r) close(res_fds[j][1]);
        }
        _exit(rank_main(r, nranks, id_fds, res_fds[r][1], fn, arg));
      }
      pids[started++] = pid;
    }
  }
  for (int r = 0; r < nranks; r++) {
    if (id_fds[r][0] >= 0) close(id_fds[r][0]);
    if (id_fds[r][1] >= 0) close(id_fds[r][1]);
    if (res_fds[r][1] >= 0) close(res_fds[r][1]);
  }
  dg_str res[MAX_RANKS];
  int status[MAX_RANKS];
  bool open_fd[MAX_RANKS], live[MAX_RANKS];
  for (int r = 0; r < nranks; r++) {
    dg_str_init(&res[r]);
    status[r] = -1;
    open_fd[r] = r < started;
    live[r] = r < started;
    if (!open_fd[r] && res_fds[r][0] >= 0) close(res_fds[r][0]);
  }
  double deadline = dg_now() + timeout_s;
  int first_bad = -1; /* the first rank seen to fail */
  bool timed_out = false;
  for (;;) {
    bool any = false;
    for (int r = 0; r < nranks; r++) any = any || open_fd[r] || live[r];
    if (!any) break;
    if (!ok || first_bad >= 0 || dg_now() > deadline) {
      /* a failed rank leaves the others blocked in a collective */
      timed_out = ok && first_bad < 0;
      for (int r = 0; r < nranks; r++)
        if (live[r]) kill(pids[r], SIGKILL);
      for (int r = 0; r < nranks; r++) {
        if (open_fd[r]) { /* what a failed rank said before it ended */
          char buf[4096];
          ssize_t n;
          while ((n = read(res_fds[r][0], buf, sizeof buf)) > 0) dg_str_putn(&res[r], buf, (size_t)n);
          close(res_fds[r][0]);
          open_fd[r] = false;
        }
        if (live[r]) waitpid(pids[r], &status[r], 0);
        live[r] = false;
      }
      break;
    }
    struct pollfd pf[MAX_RANKS];
    int map[MAX_RANKS], np = 0;
    for (int r = 0; r < nranks; r++)
      if (open_fd[r]) {
        pf[np].fd = res_fds[r][0];
        pf[np].events = POLLIN;
        pf[np].revents = 0;
        map[np++] = r;
      }
    if (np > 0 && poll(pf, (nfds_t)np, 100) > 0) {
      for (int i = 0; i < np; i++) {
        if (!(pf[i].revents & (POLLIN | POLLHUP | POLLERR))) continue;
        char buf[4096];
        ssize_t n = read(pf[i].fd, buf, sizeof buf);
        if (n > 0) {
          dg_str_putn(&res[map[i]], buf, (size_t)n);
        } else if (n == 0 || errno != EINTR) {
          close(pf[i].fd);
          open_fd[map[i]] = false;
        }
      }
    } else if (np == 0) {
      usleep(20000);
    }
    for (int r = 0; r < nranks; r++)
      if (live[r] && waitpid(pids[r], &status[r], WNOHANG) == pids[r]) {
        live[r] = false;
        if (!(WIFEXITED(status[r]) && WEXITSTATUS(status[r]) == 0) && first_bad < 0) first_bad = r;
      }
  }
  if (ok && timed_out) {
    ok = dg_fail(st, DG_ERR_RUNTIME, "data parallel: timed out after %d s; the ranks were killed",
                 timeout_s);
  } else if (ok && first_bad >= 0) {
    int r = first_bad;
    if (res[r].len > 0 && res[r].s[0] == 'E')
      ok = dg_fail(st, DG_ERR_RUNTIME, "rank %d: %s", r, res[r].s + 1);
    else if (WIFSIGNALED(status[r]))
      ok = dg_fail(st, DG_ERR_RUNTIME, "rank %d was killed by signal %d", r, WTERMSIG(status[r]));
    else
      ok = dg_fail(st, DG_ERR_RUNTIME, "rank %d exited with status %d", r,
                   WIFEXITED(status[r]) ? WEXITSTATUS(status[r]) : -1);
  }
  for (int r = 0; r < started && ok; r++)
    if (res[r].len == 0 || res[r].s[0] != 'O')
      ok = dg_fail(st, DG_ERR_RUNTIME, "rank %d ended without a result", r);
  if (ok && out && res[0].len > 1) dg_str_putn(out, res[0].s + 1, res[0].len - 1);
  for (int r = 0; r < nranks; r++) dg_str_free(&res[r]);
  return ok;
}
