/* base.h: the small runtime every module stands on.
 *
 * Arena allocation (one arena per compilation, freed at once), growable
 * arrays, string building, a seeded reproducible RNG, the status/error
 * convention, checked parsing of numbers, and a progress line.
 *
 * Two kinds of failure, one convention each: a broken invariant is a bug and
 * DG_ASSERT aborts with file:line; anything a user, a file or the search can
 * cause returns a dg_status carrying a message that names the place.
 */
#ifndef DRAGON_BASE_H
#define DRAGON_BASE_H

#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

/* ---- invariants ---------------------------------------------------------- */

void dg_panic(const char *file, int line, const char *fmt, ...)
    __attribute__((noreturn, format(printf, 3, 4)));

#define DG_ASSERT(c)                                                          \
  do {                                                                        \
    if (!(c)) dg_panic(__FILE__, __LINE__, "assertion failed: %s", #c);       \
  } while (0)
#define DG_UNREACHABLE() dg_panic(__FILE__, __LINE__, "unreachable")
#define DG_ARRAY_LEN(a) (sizeof(a) / sizeof((a)[0]))

/* ---- status -------------------------------------------------------------- */

/* A status is ok (code 0) or an error with a message. Messages name the
 * place: "file:line:col: ...", "t12 split: ...", "--count: ...". */
typedef enum {
  DG_OK = 0,
  DG_ERR_PARSE,   /* malformed text: kernel text, spec, TSEL, JSON */
  DG_ERR_INVALID, /* well-formed but illegal: bad schedule step, bad value */
  DG_ERR_IO,      /* file system */
  DG_ERR_RUNTIME, /* compiler, loader, device, child process */
  DG_ERR_USAGE,   /* command line */
} dg_code;

typedef struct {
  dg_code code;
  char msg[512];
} dg_status;

void dg_status_ok(dg_status *st);
/* Sets st to an error with a printf-style message; returns false so that
 * `return dg_fail(st, ...)` works in bool functions. st may be NULL. */
bool dg_fail(dg_status *st, dg_code code, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
bool dg_vfail(dg_status *st, dg_code code, const char *fmt, va_list ap);
/* Prepends "prefix: " to an existing message (adds context on the way up). */
void dg_status_prefix(dg_status *st, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

/* ---- memory -------------------------------------------------------------- */

void *dg_malloc(size_t n); /* aborts on out-of-memory */
void *dg_calloc(size_t n, size_t size);
void *dg_realloc(void *p, size_t n);
char *dg_strdup(const char *s);

/* Arena: bump allocation in chunks, freed all at once. Built with
 * -DDG_ARENA_MALLOC every allocation is a separate malloc so that the
 * sanitizers see each one's bounds. Memory is zeroed. */
typedef struct dg_arena dg_arena;
dg_arena *dg_arena_new(void);
void dg_arena_free(dg_arena *a);
void *dg_arena_alloc(dg_arena *a, size_t n);
char *dg_arena_strdup(dg_arena *a, const char *s);
char *dg_arena_strndup(dg_arena *a, const char *s, size_t n);
char *dg_arena_printf(dg_arena *a, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
void *dg_arena_memdup(dg_arena *a, const void *p, size_t n);
size_t dg_arena_bytes(const dg_arena *a); /* bytes handed out so far */

#define DG_ANEW(a, T) ((T *)dg_arena_alloc((a), sizeof(T)))
#define DG_ANEWN(a, T, n) ((T *)dg_arena_alloc((a), sizeof(T) * (size_t)(n)))

/* Growable array on the heap: `DG_VEC(int) v = {0}; DG_VEC_PUSH(&v, 3);`. */
#define DG_VEC(T)                                                             \
  struct {                                                                    \
    T *data;                                                                  \
    size_t len, cap;                                                          \
  }
#define DG_VEC_PUSH(v, x)                                                     \
  do {                                                                        \
    if ((v)->len == (v)->cap) {                                               \
      (v)->cap = (v)->cap ? 2 * (v)->cap : 8;                                 \
      (v)->data = dg_realloc((v)->data, (v)->cap * sizeof(*(v)->data));       \
    }                                                                         \
    (v)->data[(v)->len++] = (x);                                              \
  } while (0)
#define DG_VEC_FREE(v)                                                        \
  do {                                                                        \
    free((v)->data);                                                          \
    (v)->data = NULL;                                                         \
    (v)->len = (v)->cap = 0;                                                  \
  } while (0)

/* ---- strings ------------------------------------------------------------- */

/* A growable, always NUL-terminated string on the heap. */
typedef struct {
  char *s;
  size_t len, cap;
} dg_str;

void dg_str_init(dg_str *b);
void dg_str_free(dg_str *b);
void dg_str_clear(dg_str *b);
void dg_str_putc(dg_str *b, char c);
void dg_str_puts(dg_str *b, const char *s);
void dg_str_putn(dg_str *b, const char *s, size_t n);
void dg_str_printf(dg_str *b, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
void dg_str_vprintf(dg_str *b, const char *fmt, va_list ap);
void dg_str_indent(dg_str *b, int n); /* n spaces */
char *dg_str_take(dg_str *b);         /* hands the buffer over; b is reset */

/* Reads a whole file ("-" is stdin). Returns NULL and sets st on failure. */
char *dg_read_file(const char *path, size_t *len, dg_status *st);
/* The one atomic write: a temporary file "PATH.tmp.PID" in PATH's
 * directory, fsync, rename over PATH, then fsync of the directory. A reader
 * sees the old file or the new one, never a part of one, and once this
 * returns true the new file survives a crash. On failure the temporary file
 * is removed and PATH is untouched. */
typedef struct {
  const void *data;
  size_t len;
} dg_part;
bool dg_write_parts_atomic(const char *path, const dg_part *parts, int n_parts,
                           dg_status *st);
bool dg_write_file_atomic(const char *path, const void *data, size_t len,
                          dg_status *st);
/* Appends whole lines (text, n bytes) to path by one write() on an
 * O_APPEND descriptor, then fsync: the unit of durability of the
 * append-only files (a killed writer leaves at most one torn last line). */
bool dg_append_lines(const char *path, const char *text, size_t n, dg_status *st);
/* Removes the temporary files ("NAME.tmp.PID", regular files) that
 * processes no longer alive left in dir; returns how many. Files of live
 * processes (a write in progress) are kept. */
int dg_remove_stale_tmp(const char *dir);
/* Whether a process with this pid exists. */
bool dg_pid_alive(long pid);
/* mkdir -p */
bool dg_mkdirs(const char *path, dg_status *st);

/* zstd (zstd.c): data into one frame with its content checksum, appended
 * to out; and every frame of a buffer back into a NUL-terminated text
 * (*len bytes), refusing an empty, foreign, corrupt or truncated stream or
 * one past max_len bytes (0: no limit) with a message naming `name`. */
bool dg_zstd_pack(const void *data, size_t n, int level, dg_str *out, dg_status *st);
char *dg_zstd_unpack(const void *bytes, size_t n, const char *name, size_t max_len, size_t *len,
                     dg_status *st);
/* A text file, plain or zstd (by its frame magic), NUL-terminated; errors
 * name the path. */
char *dg_read_text(const char *path, size_t max_len, size_t *len, dg_status *st);

/* `key = value` text (kv.c), the one reader of config files: '#'
 * comments, blank lines skipped, key and value trimmed; fn gets each pair
 * with its line number and may fail (st). A line that is not a pair or a
 * NUL byte is an error naming `where:line`. */
typedef bool (*dg_kv_fn)(void *ctx, const char *key, const char *value, int line, dg_status *st);
bool dg_kv_parse(const char *text, size_t len, const char *where, dg_kv_fn fn, void *ctx,
                 dg_status *st);

/* ---- numbers ------------------------------------------------------------- */

/* Parse a whole string as an integer in [lo, hi]; names `what` on error. */
bool dg_parse_i64(const char *s, int64_t lo, int64_t hi, int64_t *out,
                  const char *what, dg_status *st);
bool dg_parse_f64(const char *s, double *out, const char *what,
                  dg_status *st);

/* ---- hashing ------------------------------------------------------------- */

uint64_t dg_hash_bytes(const void *p, size_t n, uint64_t seed);
uint64_t dg_hash_combine(uint64_t h, uint64_t v);

/* An open-addressing index over the positions 0..count-1 of a vector the
 * caller keeps (slots.c): it places and walks, the caller hashes and
 * compares. Slots hold position + 1 (0: empty), at most half full, probed
 * linearly from the key. A zeroed dg_slots is empty. */
typedef struct {
  int *slot;
  size_t size; /* a power of two, or 0 */
} dg_slots;
/* Adds position count - 1 under key. Where the index would be more than
 * half full it is rebuilt twice as large from key_of(ctx, i) of every
 * position i < count (the new one included). */
void dg_slots_add(dg_slots *s, size_t count, uint64_t key,
                  uint64_t (*key_of)(const void *ctx, size_t i), const void *ctx);
/* The positions under key's probe, in probe order: *step starts at 0;
 * -1 at the first empty slot (no more). The caller compares each.
 *   size_t k = 0;
 *   for (int p; (p = dg_slots_next(&s, key, &k)) >= 0;) if (same(p)) ... */
int dg_slots_next(const dg_slots *s, uint64_t key, size_t *step);
void dg_slots_free(dg_slots *s);

/* ---- RNG ----------------------------------------------------------------- */

/* Seeded, reproducible across platforms (xoshiro256**, seeded through
 * splitmix64). Every random choice in dragon draws from one of these. */
typedef struct {
  uint64_t s[4];
} dg_rng;

void dg_rng_seed(dg_rng *r, uint64_t seed);
uint64_t dg_rng_next(dg_rng *r);
/* Uniform in [0, n), n > 0, without modulo bias. */
uint64_t dg_rng_below(dg_rng *r, uint64_t n);
/* Uniform in [lo, hi], inclusive. */
int64_t dg_rng_range(dg_rng *r, int64_t lo, int64_t hi);
double dg_rng_uniform(dg_rng *r);             /* [0, 1) */
double dg_rng_normal(dg_rng *r);              /* N(0, 1) */
/* Index drawn with probability proportional to w[i] (w[i] >= 0, sum > 0). */
size_t dg_rng_weighted(dg_rng *r, const double *w, size_t n);
/* A new independent stream derived from this one (for workers, shards). */
dg_rng dg_rng_fork(dg_rng *r);

/* ---- time and progress --------------------------------------------------- */

double dg_now(void); /* seconds, monotonic */
/* The wall-clock time in UTC as ISO 8601 ("2026-12-06T05:44:15Z"), on the heap. */
char *dg_now_iso(void);

/* A progress line on stderr: "what  done/total  rate/s  ETA", redrawn at
 * most every 0.2 s, only when stderr is a terminal (or force is set). */
typedef struct {
  const char *what;
  int64_t total, done;
  double t0, last;
  bool tty, drawn;
} dg_progress;

void dg_progress_init(dg_progress *p, const char *what, int64_t total);
void dg_progress_step(dg_progress *p, int64_t n, const char *extra);
void dg_progress_done(dg_progress *p);

/* ---- build --------------------------------------------------------------- */

/* The commit this binary was built from (git's short hash, "+dirty" when
 * the tracked files differed, "unknown" without git or DG_COMMIT). */
const char *dg_build_commit(void);

/* ---- float16 ------------------------------------------------------------- */

/* IEEE binary16 conversion with round-to-nearest-even, independent of the
 * compiler's _Float16 support. */
uint16_t dg_f32_to_f16(float f);
float dg_f16_to_f32(uint16_t h);

#endif
