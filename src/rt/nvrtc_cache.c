/* nvrtc_cache.c: one compilation per distinct source in a process.
 *
 * Different traces often lower to the same CUDA source: a sampled unroll
 * step above every loop's extent, a vector width the loop cannot take, a
 * tile order that a fuse undoes. Of 24 candidates of four workloads of the
 * labelling windows, 6 repeated a source byte for byte. NVRTC is
 * deterministic for a given source, name, architecture and options, so a
 * source compiled once is not compiled again: rt_nvrtc_compile_within asks
 * here first, and a compilation already running on another thread is
 * waited for rather than started twice (candidates of one round often
 * share a source). Only successful compilations are kept: a failure may be
 * a limit reached under load, and it is cheap to learn again.
 *
 * The cache is bounded (256 MiB of sources and images); the entries least
 * recently used go first. DRAGON_NVRTC_CACHE=0 turns it off.
 * A hit returns a copy of the image and log the first compilation gave,
 * with seconds the time spent waiting for it.
 */
#include "rt/cuda_api.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

enum { CACHE_BYTES = 256 << 20 };

typedef struct entry {
  struct entry *prev, *next; /* most recently used first */
  uint64_t hash;
  char *src, *name, *arch;
  size_t src_len;
  bool pending; /* being compiled by the thread that made it */
  bool is_ptx;
  char *image, *log;
  size_t size;
  size_t bytes; /* what the entry holds */
} entry;

static struct {
  pthread_mutex_t mu;
  pthread_cond_t done;
  entry *head, *tail;
  size_t bytes;
  int64_t hits, misses;
  int enabled; /* -1: not read from the environment yet */
} cache = {PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER, NULL, NULL, 0, 0, 0, -1};

static uint64_t fnv1a(uint64_t h, const char *s, size_t n) {
  for (size_t i = 0; i < n; i++) {
    h ^= (unsigned char)s[i];
    h *= 1099511628211ULL;
  }
  return h;
}

static uint64_t key_hash(const char *src, size_t n, const char *name, const char *arch) {
  uint64_t h = fnv1a(14695981039346656037ULL, src, n);
  h = fnv1a(h, "\0", 1);
  h = fnv1a(h, name, strlen(name));
  h = fnv1a(h, "\0", 1);
  return fnv1a(h, arch, strlen(arch));
}

static bool enabled_locked(void) {
  if (cache.enabled < 0) {
    const char *e = getenv("DRAGON_NVRTC_CACHE");
    cache.enabled = !(e && strcmp(e, "0") == 0);
  }
  return cache.enabled;
}

static void unlink_entry(entry *e) {
  if (e->prev) e->prev->next = e->next;
  else cache.head = e->next;
  if (e->next) e->next->prev = e->prev;
  else cache.tail = e->prev;
  e->prev = e->next = NULL;
}

static void push_front(entry *e) {
  e->next = cache.head;
  e->prev = NULL;
  if (cache.head) cache.head->prev = e;
  cache.head = e;
  if (!cache.tail) cache.tail = e;
}

static void entry_free(entry *e) {
  free(e->src);
  free(e->name);
  free(e->arch);
  free(e->image);
  free(e->log);
  free(e);
}

static entry *find_locked(uint64_t h, const char *src, size_t n, const char *name,
                          const char *arch) {
  for (entry *e = cache.head; e; e = e->next)
    if (e->hash == h && e->src_len == n && strcmp(e->name, name) == 0 &&
        strcmp(e->arch, arch) == 0 && memcmp(e->src, src, n) == 0)
      return e;
  return NULL;
}

/* Drops the least recently used finished entries past the bound. */
static void evict_locked(void) {
  entry *e = cache.tail;
  while (cache.bytes > CACHE_BYTES && e) {
    entry *prev = e->prev;
    if (!e->pending) {
      unlink_entry(e);
      cache.bytes -= e->bytes;
      entry_free(e);
    }
    e = prev;
  }
}

static void copy_out(const entry *e, rt_cubin *out, double waited) {
  memset(out, 0, sizeof *out);
  out->image = dg_malloc(e->size + 1);
  memcpy(out->image, e->image, e->size);
  out->image[e->size] = 0;
  out->size = e->size;
  out->is_ptx = e->is_ptx;
  snprintf(out->arch, sizeof out->arch, "%s", e->arch);
  out->log = dg_strdup(e->log);
  out->seconds = waited;
}

bool rt_nvrtc_compile_cached(const char *src, const char *name, const char *arch, double limit_s,
                             rt_cubin *out, dg_status *st) {
  if (!name || !*name) name = "kernel";
  size_t n = strlen(src);
  uint64_t h = key_hash(src, n, name, arch);
  double t0 = dg_now();
  pthread_mutex_lock(&cache.mu);
  if (!enabled_locked()) {
    pthread_mutex_unlock(&cache.mu);
    return rt_nvrtc_compile_uncached(src, name, arch, limit_s, out, st);
  }
  entry *e;
  while ((e = find_locked(h, src, n, name, arch)) && e->pending)
    pthread_cond_wait(&cache.done, &cache.mu);
  if (e) {
    cache.hits++;
    unlink_entry(e);
    push_front(e);
    copy_out(e, out, dg_now() - t0);
    pthread_mutex_unlock(&cache.mu);
    dg_status_ok(st);
    return true;
  }
  cache.misses++;
  e = dg_calloc(1, sizeof *e);
  e->hash = h;
  e->src = dg_malloc(n + 1);
  memcpy(e->src, src, n + 1);
  e->src_len = n;
  e->name = dg_strdup(name);
  e->arch = dg_strdup(arch);
  e->pending = true;
  push_front(e);
  pthread_mutex_unlock(&cache.mu);

  bool ok = rt_nvrtc_compile_uncached(src, name, arch, limit_s, out, st);

  pthread_mutex_lock(&cache.mu);
  e->pending = false;
  if (ok) {
    e->size = out->size;
    e->image = dg_malloc(out->size ? out->size : 1);
    memcpy(e->image, out->image, out->size);
    e->is_ptx = out->is_ptx;
    e->log = dg_strdup(out->log ? out->log : "");
    e->bytes = sizeof *e + n + out->size + strlen(e->log);
    cache.bytes += e->bytes;
    evict_locked();
  } else {
    unlink_entry(e); /* a waiter finds nothing and compiles itself */
    entry_free(e);
  }
  pthread_cond_broadcast(&cache.done);
  pthread_mutex_unlock(&cache.mu);
  return ok;
}

void rt_nvrtc_cache_put(const char *src, const char *name, const char *arch, const rt_cubin *img) {
  if (!name || !*name) name = "kernel";
  size_t n = strlen(src);
  uint64_t h = key_hash(src, n, name, arch);
  pthread_mutex_lock(&cache.mu);
  if (enabled_locked() && !find_locked(h, src, n, name, arch)) {
    entry *e = dg_calloc(1, sizeof *e);
    e->hash = h;
    e->src = dg_malloc(n + 1);
    memcpy(e->src, src, n + 1);
    e->src_len = n;
    e->name = dg_strdup(name);
    e->arch = dg_strdup(arch);
    e->size = img->size;
    e->image = dg_malloc(img->size ? img->size : 1);
    memcpy(e->image, img->image, img->size);
    e->is_ptx = img->is_ptx;
    e->log = dg_strdup(img->log ? img->log : "");
    e->bytes = sizeof *e + n + img->size + strlen(e->log);
    push_front(e);
    cache.bytes += e->bytes;
    evict_locked();
  }
  pthread_mutex_unlock(&cache.mu);
}

void rt_nvrtc_cache_stats(int64_t *hits, int64_t *misses) {
  pthread_mutex_lock(&cache.mu);
  if (hits) *hits = cache.hits;
  if (misses) *misses = cache.misses;
  pthread_mutex_unlock(&cache.mu);
}

bool rt_nvrtc_cache_set(bool on) {
  pthread_mutex_lock(&cache.mu);
  bool was = enabled_locked();
  cache.enabled = on;
  pthread_mutex_unlock(&cache.mu);
  return was;
}

void rt_nvrtc_cache_clear(void) {
  pthread_mutex_lock(&cache.mu);
  for (entry *e = cache.head, *next; e; e = next) {
    next = e->next;
    if (e->pending) continue;
    unlink_entry(e);
    cache.bytes -= e->bytes;
    entry_free(e);
  }
  cache.hits = cache.misses = 0;
  pthread_mutex_unlock(&cache.mu);
}
