/* split.c: the universe of workloads and its partition into train, val,
 * test and the two held-out splits; the splits file (data/splits.tsv.zst),
 * its writer and its loader.
 *
 * The rules (data_split_rule) look only at a canonical spec: its family
 * (the held-out family), one key's value against the family's band (the
 * held-out shapes), else a hash of the spec string. The structural guard
 * (data_split_guard) then looks at the whole universe, so a table is a
 * function of (seed, count) and nothing else; a shorter universe is a
 * prefix of a longer one in its specs, hashes and rule splits, but a guard
 * move can depend on a workload past the prefix.
 *
 * The loader trusts nothing: the zstd frame (magic, checksum, truncation,
 * a size cap), the header's magic and version, every line's three fields,
 * canonical and distinct specs, and the header's count. It does not
 * rebuild kernels to check the stored hashes (the tests and `dragon data
 * split --check` do).
 */
#include "dragon/data.h"

#include <string.h>

#include "dragon/wl.h"

#define MAGIC "# dragon splits "
/* Parts of 10000 taken by train and val; test is the rest. */
#define TRAIN_PARTS 9400
#define VAL_PARTS 300
#define SPLIT_HASH_SEED 0x73706c6974ull /* "split" */
#define ZSTD_LEVEL 19 /* the committed file: small, written once */
#define MAX_TEXT ((size_t)256 << 20)
#define MAX_COUNT 100000000

/* ---- names ---------------------------------------------------------------- */

static const char *const split_names[] = {
#define X(e, name) name,
    DATA_SPLIT_LIST(X)
#undef X
};
_Static_assert(DG_ARRAY_LEN(split_names) == DATA_SPLIT_COUNT, "one name per split");

const char *data_split_name(data_split s) {
  DG_ASSERT((unsigned)s < DATA_SPLIT_COUNT);
  return split_names[s];
}

bool data_split_from_name(const char *name, size_t n, data_split *out) {
  for (int i = 0; i < DATA_SPLIT_COUNT; i++)
    if (strlen(split_names[i]) == n && memcmp(split_names[i], name, n) == 0) {
      *out = (data_split)i;
      return true;
    }
  return false;
}

bool data_split_is_training(data_split s) { return s == DATA_SPLIT_TRAIN; }

/* ---- the rules ------------------------------------------------------------ */

static const char heldout_family[] = "layernorm";

/* One band per family but the held-out one; docs/data.md gives the reason
 * for each. Each holds out 3-8% of its family in the committed universe,
 * an interior region around a real model size whose neighbours train. */
static const struct {
  const char *family, *key;
  int64_t lo, hi;
} bands[] = {
    {"gemm", "k", 2049, 2560},
    {"batch_matmul", "k", 78, 95},
    {"gemv", "n", 2561, 3583},
    {"transpose_batch_matmul", "seq", 257, 511},
    {"conv1d_nlc", "l", 257, 511},
    {"conv2d_nhwc", "ci", 41, 63},
    {"conv2d_nchw", "co", 161, 255},
    {"conv3d_ndhwc", "co", 81, 111},
    {"depthwise_conv2d_nhwc", "c", 81, 100},
    {"conv2d_transpose_nhwc", "ci", 161, 255},
    {"conv2d_capsule_nhwijc", "n", 17, 31},
    {"conv2d_bias_bn_relu", "co", 97, 127},
    {"max_pool2d", "c", 145, 191},
    {"avg_pool2d", "h", 36, 56},
    {"norm_bmn", "m", 257, 511},
    {"softmax", "n", 2049, 2560},
    {"rmsnorm", "n", 2561, 3072},
    {"reduce_sum", "n", 3001, 3584},
    {"reduce_max", "m", 3000, 4095},
    {"bias_gelu", "n", 5121, 8191},
    {"silu_mul", "n", 5121, 8191},
    {"rope", "s", 2049, 4096},
};

const char *data_split_heldout_family(void) { return heldout_family; }

static int find_band(const char *family, size_t n) {
  for (size_t i = 0; i < DG_ARRAY_LEN(bands); i++)
    if (strlen(bands[i].family) == n && memcmp(bands[i].family, family, n) == 0) return (int)i;
  return -1;
}

bool data_split_band(const char *family, const char **key, int64_t *lo, int64_t *hi) {
  int b = find_band(family, strlen(family));
  if (b < 0) return false;
  *key = bands[b].key;
  *lo = bands[b].lo;
  *hi = bands[b].hi;
  return true;
}

/* The value of `key` in a canonical spec ("fam:k=v,k=v"); false if absent
 * or not a plain decimal. */
static bool spec_value(const char *spec, const char *key, int64_t *out) {
  const char *p = strchr(spec, ':');
  size_t kn = strlen(key);
  while (p) {
    p++;
    if (strncmp(p, key, kn) == 0 && p[kn] == '=') {
      const char *v = p + kn + 1;
      int64_t x = 0;
      int digits = 0;
      for (; *v >= '0' && *v <= '9' && digits < 18; v++, digits++) x = 10 * x + (*v - '0');
      if (digits == 0 || (*v != ',' && *v != 0)) return false;
      *out = x;
      return true;
    }
    p = strchr(p, ',');
  }
  return false;
}

bool data_split_rule(const char *spec, data_split *out, dg_status *st) {
  char *canon = wl_canonical(spec, st);
  if (!canon) return false;
  bool same = strcmp(canon, spec) == 0;
  free(canon);
  if (!same) return dg_fail(st, DG_ERR_INVALID, "'%.120s' is not a canonical spec", spec);
  size_t fn = (size_t)(strchr(spec, ':') - spec);
  if (fn == strlen(heldout_family) && memcmp(spec, heldout_family, fn) == 0) {
    *out = DATA_SPLIT_HELDOUT_FAMILY;
    return true;
  }
  int b = find_band(spec, fn);
  if (b < 0)
    return dg_fail(st, DG_ERR_INVALID,
                   "family %.*s has no held-out shape band (src/data/split.c)", (int)fn, spec);
  int64_t v;
  if (!spec_value(spec, bands[b].key, &v))
    return dg_fail(st, DG_ERR_INVALID, "'%.120s' has no key '%s' (the band of %s)", spec,
                   bands[b].key, bands[b].family);
  if (v >= bands[b].lo && v <= bands[b].hi) {
    *out = DATA_SPLIT_HELDOUT_SHAPE;
    return true;
  }
  uint64_t h = dg_hash_bytes(spec, strlen(spec), SPLIT_HASH_SEED) % 10000;
  *out = h < TRAIN_PARTS ? DATA_SPLIT_TRAIN
         : h < TRAIN_PARTS + VAL_PARTS ? DATA_SPLIT_VAL
                                       : DATA_SPLIT_TEST;
  return true;
}

/* ---- the structural guard ------------------------------------------------- */

static size_t pow2_at_least(size_t n) {
  size_t c = 16;
  while (c < n) c *= 2;
  return c;
}

void data_split_guard(data_split *split, const uint64_t *kernel_hash, int64_t n,
                      int64_t moves[DATA_SPLIT_COUNT][DATA_SPLIT_COUNT]) {
  if (moves) memset(moves, 0, sizeof(int64_t) * DATA_SPLIT_COUNT * DATA_SPLIT_COUNT);
  if (n <= 0) return;
  /* kernel hash -> the largest split of its group, open addressing */
  size_t cap = pow2_at_least(2 * (size_t)n);
  uint64_t *key = dg_calloc(cap, sizeof *key);
  int *top = dg_calloc(cap, sizeof *top); /* split + 1; 0: empty slot */
  size_t *slot = dg_malloc(sizeof *slot * (size_t)n);
  for (int64_t i = 0; i < n; i++) {
    size_t j = (size_t)dg_hash_combine(kernel_hash[i], 0) & (cap - 1);
    while (top[j] && key[j] != kernel_hash[i]) j = (j + 1) & (cap - 1);
    key[j] = kernel_hash[i];
    if ((int)split[i] + 1 > top[j]) top[j] = (int)split[i] + 1;
    slot[i] = j;
  }
  for (int64_t i = 0; i < n; i++) {
    data_split to = (data_split)(top[slot[i]] - 1);
    if (to != split[i]) {
      if (moves) moves[split[i]][to]++;
      split[i] = to;
    }
  }
  free(key);
  free(top);
  free(slot);
}

/* ---- the table ------------------------------------------------------------ */

struct data_splits {
  uint64_t seed;
  int64_t count;
  DG_VEC(data_split_entry) e;
  dg_arena *arena;     /* the spec strings */
  int64_t *index;      /* spec map: entry + 1, 0 empty; (cap) */
  size_t cap;
  int64_t size[DATA_SPLIT_COUNT];
  bool built;          /* moves are known */
  int64_t moves[DATA_SPLIT_COUNT][DATA_SPLIT_COUNT];
};

static data_splits *table_new(uint64_t seed, int64_t count) {
  data_splits *t = dg_calloc(1, sizeof *t);
  t->seed = seed;
  t->count = count;
  t->arena = dg_arena_new();
  return t;
}

void data_splits_free(data_splits *t) {
  if (!t) return;
  DG_VEC_FREE(&t->e);
  dg_arena_free(t->arena);
  free(t->index);
  free(t);
}

static uint64_t spec_hash(const char *s) { return dg_hash_bytes(s, strlen(s), 0x5eed); }

/* Adds entry i to the spec map; returns the entry it duplicates, or -1. */
static int64_t index_insert(data_splits *t, int64_t i) {
  const char *s = t->e.data[i].spec;
  size_t j = (size_t)spec_hash(s) & (t->cap - 1);
  while (t->index[j]) {
    if (strcmp(t->e.data[t->index[j] - 1].spec, s) == 0) return t->index[j] - 1;
    j = (j + 1) & (t->cap - 1);
  }
  t->index[j] = i + 1;
  return -1;
}

static void index_reset(data_splits *t, size_t n) {
  free(t->index);
  t->cap = pow2_at_least(2 * n);
  t->index = dg_calloc(t->cap, sizeof *t->index);
}

static void collect(const char *spec, void *ctx) {
  data_splits *t = ctx;
  data_split_entry e = {DATA_SPLIT_TRAIN, 0, dg_arena_strdup(t->arena, spec)};
  DG_VEC_PUSH(&t->e, e);
}

data_splits *data_splits_build(uint64_t seed, int64_t count, dg_status *st) {
  if (count < 0 || count > MAX_COUNT) {
    dg_fail(st, DG_ERR_INVALID, "count must be in [0, %d], got %lld", MAX_COUNT, (long long)count);
    return NULL;
  }
  data_splits *t = table_new(seed, count);
  if (!wl_generate(seed, count, NULL, collect, t, st)) {
    data_splits_free(t);
    return NULL;
  }
  int64_t n = (int64_t)t->e.len;
  data_split *split = dg_malloc(sizeof *split * (size_t)(n ? n : 1));
  uint64_t *hash = dg_malloc(sizeof *hash * (size_t)(n ? n : 1));
  bool ok = true;
  for (int64_t i = 0; i < n && ok; i++) {
    const char *spec = t->e.data[i].spec;
    dg_func *f = wl_build(spec, st);
    ok = f && data_split_rule(spec, &split[i], st);
    if (f) hash[i] = ir_func_hash(f);
    ir_func_free(f);
    if (!ok) dg_status_prefix(st, "workload %lld", (long long)i);
  }
  if (ok) {
    data_split_guard(split, hash, n, t->moves);
    index_reset(t, (size_t)n);
    for (int64_t i = 0; i < n; i++) {
      t->e.data[i].split = split[i];
      t->e.data[i].kernel_hash = hash[i];
      t->size[split[i]]++;
      DG_ASSERT(index_insert(t, i) < 0); /* the generator's specs are distinct */
    }
    t->built = true;
  }
  free(split);
  free(hash);
  if (!ok) {
    data_splits_free(t);
    return NULL;
  }
  return t;
}

uint64_t data_splits_seed(const data_splits *t) { return t->seed; }
int64_t data_splits_count(const data_splits *t) { return (int64_t)t->e.len; }

const data_split_entry *data_splits_at(const data_splits *t, int64_t i) {
  DG_ASSERT(i >= 0 && (size_t)i < t->e.len);
  return &t->e.data[i];
}

const data_split_entry *data_splits_find(const data_splits *t, const char *spec) {
  if (!t->cap) return NULL;
  size_t j = (size_t)spec_hash(spec) & (t->cap - 1);
  while (t->index[j]) {
    const data_split_entry *e = &t->e.data[t->index[j] - 1];
    if (strcmp(e->spec, spec) == 0) return e;
    j = (j + 1) & (t->cap - 1);
  }
  return NULL;
}

int64_t data_splits_next(const data_splits *t, data_split s, int64_t from) {
  for (int64_t i = from < 0 ? 0 : from; (size_t)i < t->e.len; i++)
    if (t->e.data[i].split == s) return i;
  return -1;
}

int64_t data_splits_size(const data_splits *t, data_split s) {
  DG_ASSERT((unsigned)s < DATA_SPLIT_COUNT);
  return t->size[s];
}

int64_t data_splits_moved(const data_splits *t, data_split from, data_split to) {
  DG_ASSERT((unsigned)from < DATA_SPLIT_COUNT && (unsigned)to < DATA_SPLIT_COUNT);
  return t->built ? t->moves[from][to] : -1;
}

/* ---- writing -------------------------------------------------------------- */

char *data_splits_text(const data_splits *t, size_t *len) {
  dg_str s;
  dg_str_init(&s);
  dg_str_printf(&s, MAGIC "v%d seed=%llu count=%lld\n", DATA_SPLIT_VERSION,
                (unsigned long long)t->seed, (long long)t->count);
  for (size_t i = 0; i < t->e.len; i++) {
    const data_split_entry *e = &t->e.data[i];
    dg_str_printf(&s, "%s\t%llu\t%s\n", split_names[e->split],
                  (unsigned long long)e->kernel_hash, e->spec);
  }
  if (len) *len = s.len;
  return dg_str_take(&s);
}

bool data_splits_save(const data_splits *t, const char *path, dg_status *st) {
  size_t n;
  char *text = data_splits_text(t, &n);
  dg_str z;
  dg_str_init(&z);
  bool ok = dg_zstd_pack(text, n, ZSTD_LEVEL, &z, st);
  free(text);
  if (ok) ok = dg_write_file_atomic(path, z.s, z.len, st);
  else dg_status_prefix(st, "%s", path);
  dg_str_free(&z);
  return ok;
}

/* ---- reading -------------------------------------------------------------- */

static char *unpack(const void *bytes, size_t n, const char *name, size_t *len, dg_status *st) {
  return dg_zstd_unpack(bytes, n, name, MAX_TEXT, len, st);
}

/* Parses a whole decimal number of at most 20 digits that fits in u64. */
static bool parse_u64(const char *s, size_t n, uint64_t *out) {
  if (n == 0 || n > 20) return false;
  uint64_t x = 0;
  for (size_t i = 0; i < n; i++) {
    if (s[i] < '0' || s[i] > '9') return false;
    unsigned d = (unsigned)(s[i] - '0');
    if (x > (UINT64_MAX - d) / 10) return false;
    x = 10 * x + d;
  }
  if (n > 1 && s[0] == '0') return false; /* one spelling per number */
  *out = x;
  return true;
}

/* "seed=S count=N" after the version, exactly. */
static bool parse_header(const char *h, size_t n, const char *name, uint64_t *seed,
                         int64_t *count, dg_status *st) {
  size_t m = strlen(MAGIC);
  if (n < m || memcmp(h, MAGIC, m) != 0)
    return dg_fail(st, DG_ERR_PARSE, "%s:1: not a splits file (the first line must begin '%sv%d')",
                   name, MAGIC, DATA_SPLIT_VERSION);
  const char *p = h + m, *end = h + n;
  const char *sp = memchr(p, ' ', (size_t)(end - p));
  size_t vn = (size_t)((sp ? sp : end) - p);
  char want[16];
  snprintf(want, sizeof want, "v%d", DATA_SPLIT_VERSION);
  if (vn != strlen(want) || memcmp(p, want, vn) != 0)
    return dg_fail(st, DG_ERR_PARSE, "%s:1: splits file version '%.*s', this dragon reads only %s",
                   name, (int)(vn > 20 ? 20 : vn), p, want);
  if (!sp || (size_t)(end - sp) < 7 || memcmp(sp, " seed=", 6) != 0)
    return dg_fail(st, DG_ERR_PARSE, "%s:1: header: expected ' seed=S count=N' after %s", name,
                   want);
  p = sp + 6;
  sp = memchr(p, ' ', (size_t)(end - p));
  uint64_t c;
  if (!sp || !parse_u64(p, (size_t)(sp - p), seed))
    return dg_fail(st, DG_ERR_PARSE, "%s:1: header: seed is not a decimal 64-bit number", name);
  if ((size_t)(end - sp) < 8 || memcmp(sp, " count=", 7) != 0)
    return dg_fail(st, DG_ERR_PARSE, "%s:1: header: expected ' count=N' after the seed", name);
  p = sp + 7;
  if (!parse_u64(p, (size_t)(end - p), &c) || c > MAX_COUNT)
    return dg_fail(st, DG_ERR_PARSE, "%s:1: header: count must be a decimal in [0, %d]", name,
                   MAX_COUNT);
  *count = (int64_t)c;
  return true;
}

/* One workload line (without its newline) at line number ln. */
static bool parse_line(data_splits *t, const char *s, size_t n, int64_t ln, const char *name,
                       dg_status *st) {
  if (memchr(s, 0, n))
    return dg_fail(st, DG_ERR_PARSE, "%s:%lld: NUL byte in the line", name, (long long)ln);
  const char *t1 = memchr(s, '\t', n);
  const char *t2 = t1 ? memchr(t1 + 1, '\t', (size_t)(s + n - t1 - 1)) : NULL;
  if (!t2)
    return dg_fail(st, DG_ERR_PARSE, "%s:%lld: expected split<TAB>kernel_hash<TAB>spec", name,
                   (long long)ln);
  data_split_entry e;
  size_t sn = (size_t)(t1 - s);
  if (!data_split_from_name(s, sn, &e.split))
    return dg_fail(st, DG_ERR_PARSE,
                   "%s:%lld: unknown split '%.*s' (splits: train, val, test, heldout_shape, "
                   "heldout_family)",
                   name, (long long)ln, (int)(sn > 40 ? 40 : sn), s);
  size_t hn = (size_t)(t2 - t1 - 1);
  if (!parse_u64(t1 + 1, hn, &e.kernel_hash))
    return dg_fail(st, DG_ERR_PARSE, "%s:%lld: kernel hash '%.*s' is not a decimal 64-bit number",
                   name, (long long)ln, (int)(hn > 40 ? 40 : hn), t1 + 1);
  size_t pn = (size_t)(s + n - t2 - 1);
  char *spec = dg_arena_strndup(t->arena, t2 + 1, pn);
  dg_status ws;
  char *canon = wl_canonical(spec, &ws);
  bool parsed = canon != NULL, same = parsed && strcmp(canon, spec) == 0;
  free(canon);
  if (!same) {
    if (pn > 80) spec[80] = 0;
    return dg_fail(st, DG_ERR_PARSE, "%s:%lld: '%s' is not a canonical workload spec%s%s", name,
                   (long long)ln, spec, parsed ? "" : ": ", parsed ? "" : ws.msg);
  }
  e.spec = spec;
  if ((int64_t)t->e.len >= t->count)
    return dg_fail(st, DG_ERR_PARSE, "%s:%lld: more workloads than the header's count=%lld", name,
                   (long long)ln, (long long)t->count);
  DG_VEC_PUSH(&t->e, e);
  int64_t dup = index_insert(t, (int64_t)t->e.len - 1);
  if (dup >= 0)
    return dg_fail(st, DG_ERR_PARSE, "%s:%lld: duplicate workload (also at line %lld)", name,
                   (long long)ln, (long long)dup + 2);
  t->size[e.split]++;
  return true;
}

data_splits *data_splits_parse(const void *bytes, size_t n, const char *name, dg_status *st) {
  size_t len;
  char *text = unpack(bytes, n, name, &len, st);
  if (!text) return NULL;
  const char *nl = memchr(text, '\n', len);
  uint64_t seed = 0;
  int64_t count = 0;
  data_splits *t = NULL;
  bool ok = parse_header(text, nl ? (size_t)(nl - text) : len, name, &seed, &count, st);
  if (ok && !nl) ok = dg_fail(st, DG_ERR_PARSE, "%s:1: no newline after the header", name);
  if (ok) {
    t = table_new(seed, count);
    /* the map grows with the lines, not with what the header claims */
    index_reset(t, 1024);
    const char *p = nl + 1, *end = text + len;
    int64_t ln = 2;
    for (; ok && p < end; ln++) {
      const char *e = memchr(p, '\n', (size_t)(end - p));
      if (!e) {
        ok = dg_fail(st, DG_ERR_PARSE, "%s:%lld: the last line has no newline (truncated file?)",
                     name, (long long)ln);
        break;
      }
      if (2 * (t->e.len + 1) > t->cap) {
        index_reset(t, 2 * t->cap);
        for (size_t i = 0; i < t->e.len; i++) index_insert(t, (int64_t)i);
      }
      ok = parse_line(t, p, (size_t)(e - p), ln, name, st);
      p = e + 1;
    }
    if (ok && (int64_t)t->e.len != count)
      ok = dg_fail(st, DG_ERR_PARSE, "%s: %lld workloads, the header says count=%lld (truncated?)",
                   name, (long long)t->e.len, (long long)count);
  }
  free(text);
  if (!ok) {
    data_splits_free(t);
    return NULL;
  }
  return t;
}

data_splits *data_splits_load(const char *path, dg_status *st) {
  size_t n;
  char *bytes = dg_read_file(path, &n, st);
  if (!bytes) return NULL;
  data_splits *t = data_splits_parse(bytes, n, path, st);
  free(bytes);
  return t;
}
