/* cpu.c: the CPU runner. Writes C source to a fresh temporary directory,
 * compiles it with the system C compiler into a shared object, loads it
 * with dlopen and hands out its functions.
 *
 * The compiler is $CC (default cc), with -O2 -shared -fPIC -march=native
 * -fno-strict-aliasing -ffp-contract=off (no FMA contraction, so results
 * match the interpreter bit for bit) and then $DRAGON_CFLAGS (the sanitizer
 * build passes -fsanitize=... there). The temporary files are removed once
 * the object is loaded; a mapped object stays valid after its file is gone.
 * Several functions of one source share one loaded object, unloaded with
 * the last of them.
 *
 * The compiler runs as a child that dies with this process (it is asked
 * for SIGKILL at its parent's death, PR_SET_PDEATHSIG, and the shell that
 * starts it execs it): a killed tuner leaves no compiler behind. The
 * directory is /tmp/dragon-cc-<pid>-XXXXXX; those of processes that are
 * gone (killed between mkdtemp and the cleanup) are removed by the next
 * process's first compilation.
 *
 * It does not isolate a faulting or hanging kernel: a kernel runs in this
 * process (the crash-isolated workers are another module's job).
 */
#include "dragon/rt.h"

#include <dirent.h>
#include <dlfcn.h>
#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

typedef struct {
  void *handle;
  int refs;
} cpu_module;

struct rt_cpu_kernel {
  cpu_module *mod;
  void (*fn)(void **args);
};

static bool write_text(const char *path, const char *text, dg_status *st) {
  FILE *f = fopen(path, "wb");
  if (!f) return dg_fail(st, DG_ERR_IO, "cc: cannot write %s", path);
  size_t n = strlen(text);
  bool ok = fwrite(text, 1, n, f) == n;
  ok = (fclose(f) == 0) && ok;
  if (!ok) return dg_fail(st, DG_ERR_IO, "cc: cannot write %s", path);
  return true;
}

/* The part of the compiler's log worth showing: from the first line that
 * says "error" (or the start), as much as the status holds. */
static void log_excerpt(const char *log, char *out, size_t n) {
  const char *p = strstr(log, "error");
  if (p) {
    while (p > log && p[-1] != '\n') p--;
  } else {
    p = log;
  }
  snprintf(out, n, "%s", p);
  size_t len = strlen(out);
  while (len && (out[len - 1] == '\n' || out[len - 1] == ' ')) out[--len] = 0;
}

static void remove_dir(const char *dir) {
  static const char *const names[] = {"k.c", "k.so", "log.txt"};
  char path[512];
  for (size_t i = 0; i < DG_ARRAY_LEN(names); i++) {
    snprintf(path, sizeof path, "%s/%s", dir, names[i]);
    unlink(path);
  }
  rmdir(dir);
}

/* A compiler directory's owner: the pid in "dragon-cc-<pid>-XXXXXX", or
 * -1 for another name. */
static long cc_dir_owner(const char *name) {
  static const char prefix[] = "dragon-cc-";
  if (strncmp(name, prefix, sizeof prefix - 1) != 0) return -1;
  const char *p = name + sizeof prefix - 1;
  long pid = 0;
  if (*p < '1' || *p > '9') return -1;
  for (; *p >= '0' && *p <= '9'; p++) {
    if (pid > 100000000) return -1;
    pid = pid * 10 + (*p - '0');
  }
  return *p == '-' ? pid : -1;
}

/* Removes the compiler directories under tmp of processes that are gone
 * (with whatever the compiler had written into them). */
static void remove_stale_dirs(const char *tmp) {
  DIR *d = opendir(tmp);
  if (!d) return;
  struct dirent *e;
  while ((e = readdir(d))) {
    long pid = cc_dir_owner(e->d_name);
    if (pid < 0 || dg_pid_alive(pid)) continue;
    char dir[600];
    snprintf(dir, sizeof dir, "%s/%s", tmp, e->d_name);
    struct stat sb;
    if (lstat(dir, &sb) != 0 || !S_ISDIR(sb.st_mode) || sb.st_uid != geteuid()) continue;
    DIR *sub = opendir(dir);
    if (sub) {
      struct dirent *f;
      while ((f = readdir(sub))) {
        if (strcmp(f->d_name, ".") == 0 || strcmp(f->d_name, "..") == 0) continue;
        char path[900];
        snprintf(path, sizeof path, "%s/%s", dir, f->d_name);
        unlink(path);
      }
      closedir(sub);
    }
    rmdir(dir);
  }
  closedir(d);
}

static const char *stale_tmp;
static void remove_stale_once(void) { remove_stale_dirs(stale_tmp); }

/* Runs a shell command line as system() does, but as a child that is
 * killed when this process dies: the shell gets PR_SET_PDEATHSIG and
 * execs the compiler, which keeps it. Returns the wait status, or -1. */
static int run_child(const char *cmd) {
  pid_t parent = getpid();
  pid_t pid = fork();
  if (pid < 0) return -1;
  if (pid == 0) {
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (getppid() != parent) _exit(127); /* the parent died before prctl */
    execl("/bin/sh", "sh", "-c", cmd, (char *)NULL);
    _exit(127);
  }
  int status;
  while (waitpid(pid, &status, 0) < 0)
    if (errno != EINTR) return -1;
  return status;
}

bool rt_cpu_compile_many(const char *src, const char *const *fn_names, int n,
                         rt_cpu_kernel **out, dg_status *st) {
  DG_ASSERT(n > 0);
  const char *tmp = getenv("TMPDIR");
  if (!tmp || !*tmp) tmp = "/tmp";
  static pthread_once_t once = PTHREAD_ONCE_INIT;
  stale_tmp = tmp;
  pthread_once(&once, remove_stale_once);
  char dir[400];
  snprintf(dir, sizeof dir, "%s/dragon-cc-%ld-XXXXXX", tmp, (long)getpid());
  if (!mkdtemp(dir)) return dg_fail(st, DG_ERR_IO, "cc: cannot create a directory in %s", tmp);
  char csrc[512], so[512], logp[512];
  snprintf(csrc, sizeof csrc, "%s/k.c", dir);
  snprintf(so, sizeof so, "%s/k.so", dir);
  snprintf(logp, sizeof logp, "%s/log.txt", dir);
  if (!write_text(csrc, src, st)) {
    remove_dir(dir);
    return false;
  }

  const char *cc = getenv("CC");
  if (!cc || !*cc) cc = "cc";
  const char *extra = getenv("DRAGON_CFLAGS");
  if (!extra) extra = "";
  dg_str cmd;
  dg_str_init(&cmd);
  dg_str_printf(&cmd,
                "exec %s -O2 -shared -fPIC -march=native -fno-strict-aliasing -ffp-contract=off "
                "%s -o '%s' '%s' >'%s' 2>&1",
                cc, extra, so, csrc, logp);
  int rc = run_child(cmd.s);
  dg_str_free(&cmd);
  if (rc != 0) {
    size_t len = 0;
    char *log = dg_read_file(logp, &len, NULL);
    char excerpt[400];
    log_excerpt(log ? log : "(no compiler output)", excerpt, sizeof excerpt);
    free(log);
    int code = rc == -1 ? -1 : WIFEXITED(rc) ? WEXITSTATUS(rc) : 128 + WTERMSIG(rc);
    dg_fail(st, DG_ERR_RUNTIME, "cc: compiling %s failed (%s exited with %d):\n%s",
            fn_names[0], cc, code, excerpt);
    remove_dir(dir);
    return false;
  }

  void *h = dlopen(so, RTLD_NOW | RTLD_LOCAL);
  if (!h) {
    const char *why = dlerror();
    dg_fail(st, DG_ERR_RUNTIME, "cc: loading %s failed: %s", so, why ? why : "unknown");
    remove_dir(dir);
    return false;
  }
  remove_dir(dir);

  cpu_module *m = dg_calloc(1, sizeof *m);
  m->handle = h;
  for (int i = 0; i < n; i++) {
    dlerror();
    void *sym = dlsym(h, fn_names[i]);
    if (!sym) {
      dg_fail(st, DG_ERR_RUNTIME, "cc: the compiled source has no function %s", fn_names[i]);
      for (int j = 0; j < i; j++) {
        free(out[j]);
        out[j] = NULL;
      }
      dlclose(h);
      free(m);
      return false;
    }
    rt_cpu_kernel *k = dg_calloc(1, sizeof *k);
    k->mod = m;
    /* POSIX guarantees a function pointer survives the round trip through
     * void * for dlsym; memcpy says so without a pedantic warning. */
    memcpy(&k->fn, &sym, sizeof k->fn);
    m->refs++;
    out[i] = k;
  }
  return true;
}

bool rt_cpu_compile(const char *src, const char *fn_name, rt_cpu_kernel **out,
                    dg_status *st) {
  return rt_cpu_compile_many(src, &fn_name, 1, out, st);
}

void rt_cpu_call(const rt_cpu_kernel *k, void **args) { k->fn(args); }

void rt_cpu_free(rt_cpu_kernel *k) {
  if (!k) return;
  if (--k->mod->refs == 0) {
    dlclose(k->mod->handle);
    free(k->mod);
  }
  free(k);
}
