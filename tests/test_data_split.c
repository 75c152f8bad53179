/* test_data_split.c: the workload universe and its splits (src/data/split.c).
 *
 * The committed file (data/splits.tsv.zst) loads; over all of it no
 * workload or kernel of a sealed split (val, test, held-out) is one that
 * trains; a spread sample of its lines rebuilds to the stored kernel hash
 * and recomputes to the stored split; a small universe regenerates to the
 * same bytes and agrees with the committed file's first lines as far as the
 * structural guard allows; the guard itself on made-up groups; the loader's
 * located refusals; the command; the fuzzer's kept inputs.
 */
#include <dirent.h>
#include <zstd.h>

#include "dragon/data.h"
#include "dragon/wl.h"
#include "test.h"

/* The committed table, loaded once (it is read-only to the tests). */
static const data_splits *committed(void) {
  static data_splits *t;
  static bool tried;
  if (!tried) {
    tried = true;
    dg_status st;
    t = data_splits_load(DATA_SPLIT_FILE, &st);
    if (!t) dg_test_fail(__FILE__, __LINE__, "%s", st.msg);
  }
  return t;
}

static char *zpack(const char *text, size_t n, size_t *zn) {
  size_t cap = ZSTD_compressBound(n);
  char *z = dg_malloc(cap);
  *zn = ZSTD_compress(z, cap, text, n, 3);
  DG_ASSERT(!ZSTD_isError(*zn));
  return z;
}

/* Parses a text (compressed first) as if it were a file named x.tsv.zst. */
static data_splits *parse_text(const char *text, dg_status *st) {
  size_t zn;
  char *z = zpack(text, strlen(text), &zn);
  data_splits *t = data_splits_parse(z, zn, "x.tsv.zst", st);
  free(z);
  return t;
}

static int cmp_u64(const void *a, const void *b) {
  uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
  return x < y ? -1 : x > y;
}

/* How many entries of t have kernel hash h (sorted: t's hashes). */
static int64_t hash_count(const uint64_t *sorted, int64_t n, uint64_t h) {
  int64_t lo = 0, hi = n;
  while (lo < hi) {
    int64_t mid = (lo + hi) / 2;
    if (sorted[mid] < h) lo = mid + 1;
    else hi = mid;
  }
  int64_t c = 0;
  while (lo + c < n && sorted[lo + c] == h) c++;
  return c;
}

static uint64_t *sorted_hashes(const data_splits *t) {
  int64_t n = data_splits_count(t);
  uint64_t *h = dg_malloc(sizeof *h * (size_t)(n ? n : 1));
  for (int64_t i = 0; i < n; i++) h[i] = data_splits_at(t, i)->kernel_hash;
  qsort(h, (size_t)n, sizeof *h, cmp_u64);
  return h;
}

static bool family_is(const char *spec, const char *family) {
  size_t n = strlen(family);
  return strncmp(spec, family, n) == 0 && spec[n] == ':';
}

/* ---- names and rules ------------------------------------------------------ */

DG_TEST(data_split_names) {
  for (int s = 0; s < DATA_SPLIT_COUNT; s++) {
    const char *name = data_split_name((data_split)s);
    data_split back;
    CHECK(data_split_from_name(name, strlen(name), &back));
    CHECK_EQ(back, s);
    CHECK_EQ(data_split_is_training((data_split)s), s == DATA_SPLIT_TRAIN);
  }
  data_split x;
  CHECK(!data_split_from_name("trai", 4, &x));
  CHECK(!data_split_from_name("training", 8, &x));
  CHECK(!data_split_from_name("", 0, &x));
  CHECK_STREQ(data_split_name(DATA_SPLIT_HELDOUT_FAMILY), "heldout_family");
  CHECK_STREQ(data_split_heldout_family(), "layernorm");

  /* every family has a band but the held-out one, whose sibling trains */
  const char *key;
  int64_t lo, hi;
  for (int k = 0; k < wl_family_count(); k++) {
    const char *f = wl_family_name(k);
    bool held = strcmp(f, data_split_heldout_family()) == 0;
    CHECK_MSG(data_split_band(f, &key, &lo, &hi) != held, "%s: band", f);
    if (held) continue;
    CHECK(lo <= hi);
    char pat[64];
    snprintf(pat, sizeof pat, "%s=", key);
    CHECK_MSG(strstr(strchr(wl_family_example(k), ':'), pat), "%s has no key %s", f, key);
  }
  CHECK(data_split_band("rmsnorm", &key, &lo, &hi));

  dg_status st;
  data_split s;
  CHECK(data_split_rule("layernorm:m=8,n=2560,dtype=f32", &s, &st));
  CHECK_EQ(s, DATA_SPLIT_HELDOUT_FAMILY);
  CHECK(data_split_band("gemm", &key, &lo, &hi));
  char spec[128];
  snprintf(spec, sizeof spec, "gemm:m=64,n=64,k=%lld,trans_a=0,trans_b=0,dtype=f32", (long long)lo);
  CHECK(data_split_rule(spec, &s, &st));
  CHECK_EQ(s, DATA_SPLIT_HELDOUT_SHAPE);
  snprintf(spec, sizeof spec, "gemm:m=64,n=64,k=%lld,trans_a=0,trans_b=0,dtype=f32", (long long)hi + 1);
  CHECK(data_split_rule(spec, &s, &st));
  CHECK(s <= DATA_SPLIT_TEST);
  /* m holds the band's value, k does not: the band is of k alone */
  snprintf(spec, sizeof spec, "gemm:m=%lld,n=64,k=64,trans_a=0,trans_b=0,dtype=f32", (long long)lo);
  CHECK(data_split_rule(spec, &s, &st));
  CHECK(s <= DATA_SPLIT_TEST);
  CHECK(!data_split_rule("GMM/0", &s, &st));
  CHECK_ERR(st, "not a canonical spec");
  CHECK(!data_split_rule("gemm:m=1", &s, &st));
  CHECK_ERR(st, "missing required key");

  /* the hash split is near 94/3/3 over many specs */
  int64_t n[DATA_SPLIT_COUNT] = {0};
  for (int m = 1; m <= 20000; m++) {
    snprintf(spec, sizeof spec, "gemm:m=%d,n=64,k=64,trans_a=0,trans_b=0,dtype=f32", m);
    CHECK(data_split_rule(spec, &s, &st));
    n[s]++;
  }
  CHECK(n[DATA_SPLIT_TRAIN] > 18600 && n[DATA_SPLIT_TRAIN] < 19000);
  CHECK(n[DATA_SPLIT_VAL] > 480 && n[DATA_SPLIT_VAL] < 720);
  CHECK(n[DATA_SPLIT_TEST] > 480 && n[DATA_SPLIT_TEST] < 720);
}

DG_TEST(data_split_guard) {
  data_split s[] = {DATA_SPLIT_TRAIN, DATA_SPLIT_VAL,  DATA_SPLIT_TEST,
                    DATA_SPLIT_HELDOUT_SHAPE, DATA_SPLIT_TRAIN, DATA_SPLIT_TRAIN,
                    DATA_SPLIT_TEST, DATA_SPLIT_TRAIN, DATA_SPLIT_VAL,
                    DATA_SPLIT_HELDOUT_FAMILY};
  uint64_t h[] = {1, 1, 2, 2, 3, 4, 5, 5, 5, 4};
  int64_t moves[DATA_SPLIT_COUNT][DATA_SPLIT_COUNT];
  data_split_guard(s, h, (int64_t)DG_ARRAY_LEN(s), moves);
  data_split want[] = {DATA_SPLIT_VAL,  DATA_SPLIT_VAL,  DATA_SPLIT_HELDOUT_SHAPE,
                       DATA_SPLIT_HELDOUT_SHAPE, DATA_SPLIT_TRAIN, DATA_SPLIT_HELDOUT_FAMILY,
                       DATA_SPLIT_TEST, DATA_SPLIT_TEST, DATA_SPLIT_TEST,
                       DATA_SPLIT_HELDOUT_FAMILY};
  for (size_t i = 0; i < DG_ARRAY_LEN(s); i++) CHECK_MSG(s[i] == want[i], "workload %zu", i);
  CHECK_EQ(moves[DATA_SPLIT_TRAIN][DATA_SPLIT_VAL], 1);
  CHECK_EQ(moves[DATA_SPLIT_TEST][DATA_SPLIT_HELDOUT_SHAPE], 1);
  CHECK_EQ(moves[DATA_SPLIT_TRAIN][DATA_SPLIT_HELDOUT_FAMILY], 1);
  CHECK_EQ(moves[DATA_SPLIT_TRAIN][DATA_SPLIT_TEST], 1);
  CHECK_EQ(moves[DATA_SPLIT_VAL][DATA_SPLIT_TEST], 1);
  int64_t total = 0;
  for (int a = 0; a < DATA_SPLIT_COUNT; a++)
    for (int b = 0; b < DATA_SPLIT_COUNT; b++) total += moves[a][b];
  CHECK_EQ(total, 5);
  data_split_guard(s, h, 0, moves);
  CHECK_EQ(moves[DATA_SPLIT_TRAIN][DATA_SPLIT_VAL], 0);
}

/* ---- the committed file --------------------------------------------------- */

DG_TEST(data_split_committed_loads) {
  const data_splits *t = committed();
  CHECK(t != NULL);
  CHECK_EQ(data_splits_seed(t), DATA_SPLIT_SEED);
  CHECK_EQ(data_splits_count(t), DATA_SPLIT_UNIVERSE);
  CHECK(DATA_SPLIT_UNIVERSE >= 54116);
  int64_t n = data_splits_count(t), sum = 0;
  for (int s = 0; s < DATA_SPLIT_COUNT; s++) {
    int64_t k = 0, last = -1;
    for (int64_t i = data_splits_next(t, (data_split)s, 0); i >= 0;
         i = data_splits_next(t, (data_split)s, i + 1)) {
      CHECK(i > last && data_splits_at(t, i)->split == (data_split)s);
      last = i;
      k++;
    }
    CHECK_EQ(k, data_splits_size(t, (data_split)s));
    CHECK(k > 0);
    sum += k;
  }
  CHECK_EQ(sum, n);
  /* train near 94% of what the held-out rules leave */
  int64_t open = data_splits_size(t, DATA_SPLIT_TRAIN) + data_splits_size(t, DATA_SPLIT_VAL) +
                 data_splits_size(t, DATA_SPLIT_TEST);
  CHECK_NEAR((double)data_splits_size(t, DATA_SPLIT_TRAIN) / (double)open, 0.94, 0.005);
  for (int64_t i = 0; i < n; i += 97) {
    const data_split_entry *e = data_splits_at(t, i);
    CHECK(data_splits_find(t, e->spec) == e);
  }
  CHECK(data_splits_find(t, "gemm:m=1,n=1,k=1,trans_a=0,trans_b=0,dtype=f64") == NULL);
  CHECK_EQ(data_splits_moved(t, DATA_SPLIT_TRAIN, DATA_SPLIT_TEST), -1);
}

/* Over the whole file, from the stored hashes: nothing sealed trains. */
DG_TEST(data_split_committed_sealed) {
  const data_splits *t = committed();
  CHECK(t != NULL);
  int64_t n = data_splits_count(t);
  /* sealed kernel hashes, sorted */
  uint64_t *sealed = dg_malloc(sizeof *sealed * (size_t)n);
  int64_t ns = 0;
  for (int64_t i = 0; i < n; i++)
    if (!data_split_is_training(data_splits_at(t, i)->split))
      sealed[ns++] = data_splits_at(t, i)->kernel_hash;
  qsort(sealed, (size_t)ns, sizeof *sealed, cmp_u64);
  int nf = wl_family_count();
  int64_t(*per)[DATA_SPLIT_COUNT] = dg_calloc((size_t)nf, sizeof *per);
  int64_t leaks = 0;
  for (int64_t i = 0; i < n; i++) {
    const data_split_entry *e = data_splits_at(t, i);
    /* one spec, one entry, one split */
    if (data_splits_find(t, e->spec) != e) leaks++;
    if (data_split_is_training(e->split) && hash_count(sealed, ns, e->kernel_hash) > 0) leaks++;
    bool lnorm = family_is(e->spec, data_split_heldout_family());
    CHECK_MSG(lnorm == (e->split == DATA_SPLIT_HELDOUT_FAMILY), "line %lld", (long long)i + 2);
    for (int k = 0; k < nf; k++)
      if (family_is(e->spec, wl_family_name(k))) per[k][e->split]++;
  }
  free(sealed);
  CHECK_EQ(leaks, 0);
  /* each band holds out 3-8% of its family */
  for (int k = 0; k < nf; k++) {
    int64_t tot = 0;
    for (int s = 0; s < DATA_SPLIT_COUNT; s++) tot += per[k][s];
    CHECK_MSG(tot > 0, "%s: no workloads", wl_family_name(k));
    if (strcmp(wl_family_name(k), data_split_heldout_family()) == 0) continue;
    double share = (double)per[k][DATA_SPLIT_HELDOUT_SHAPE] / (double)tot;
    CHECK_MSG(share >= 0.03 && share <= 0.08, "%s: %.2f%% of its shapes held out",
              wl_family_name(k), 100 * share);
  }
  free(per);
}

/* ~300 lines spread over the file: the kernel rebuilds to its hash and the
 * rules give its split (or the guard moved it up, to a kernel it shares). */
DG_TEST(data_split_committed_sample) {
  const data_splits *t = committed();
  CHECK(t != NULL);
  int64_t n = data_splits_count(t);
  uint64_t *sorted = sorted_hashes(t);
  int checked = 0;
  for (int k = 0; k < 300; k++) {
    int64_t i = (int64_t)k * n / 300 + (k * 37) % (n / 300);
    const data_split_entry *e = data_splits_at(t, i);
    dg_status st;
    dg_func *f = wl_build(e->spec, &st);
    CHECK_MSG(f != NULL, "line %lld: %s", (long long)i + 2, st.msg);
    uint64_t h = ir_func_hash(f);
    ir_func_free(f);
    CHECK_MSG(h == e->kernel_hash, "line %lld: kernel hash %llu, stored %llu", (long long)i + 2,
              (unsigned long long)h, (unsigned long long)e->kernel_hash);
    data_split r;
    CHECK_MSG(data_split_rule(e->spec, &r, &st), "line %lld: %s", (long long)i + 2, st.msg);
    CHECK_MSG(r == e->split || (e->split > r && hash_count(sorted, n, h) > 1),
              "line %lld: rules give %s, stored %s", (long long)i + 2, data_split_name(r),
              data_split_name(e->split));
    checked++;
  }
  free(sorted);
  CHECK_EQ(checked, 300);
}

/* A small universe: the same bytes twice; the committed file's first lines
 * in specs, hashes and rule splits; and in final splits wherever the
 * committed file's group of equal kernels lies inside the prefix (a group
 * reaching past it may have moved the line up). */
DG_TEST(data_split_regenerate_prefix) {
  enum { N = 2000 };
  dg_status st;
  data_splits *a = data_splits_build(DATA_SPLIT_SEED, N, &st);
  CHECK_MSG(a != NULL, "%s", st.msg);
  data_splits *b = data_splits_build(DATA_SPLIT_SEED, N, &st);
  CHECK(b != NULL);
  size_t la, lb;
  char *ta = data_splits_text(a, &la), *tb = data_splits_text(b, &lb);
  CHECK(la == lb && memcmp(ta, tb, la) == 0);
  CHECK(strncmp(ta, "# dragon splits v1 seed=7 count=2000\n", 37) == 0);
  char pa[512], pb[512];
  snprintf(pa, sizeof pa, "%s/small_a.tsv.zst", dg_test_tmpdir());
  snprintf(pb, sizeof pb, "%s/small_b.tsv.zst", dg_test_tmpdir());
  CHECK(data_splits_save(a, pa, &st) && data_splits_save(b, pb, &st));
  char *fa = dg_read_file(pa, &la, &st), *fb = dg_read_file(pb, &lb, &st);
  CHECK(fa && fb && la == lb && memcmp(fa, fb, la) == 0);
  free(fa);
  free(fb);
  /* the file round-trips */
  data_splits *c = data_splits_load(pa, &st);
  CHECK_MSG(c != NULL, "%s", st.msg);
  char *tc = data_splits_text(c, NULL);
  CHECK_STREQ(tc, ta);
  free(tc);
  data_splits_free(c);

  const data_splits *t = committed();
  CHECK(t != NULL);
  int64_t n = data_splits_count(t);
  uint64_t *sorted = sorted_hashes(t);
  static data_split rule[N];
  static uint64_t hash[N], prefix[N];
  for (int64_t i = 0; i < N; i++) prefix[i] = data_splits_at(t, i)->kernel_hash;
  qsort(prefix, N, sizeof *prefix, cmp_u64);
  int64_t differ = 0;
  for (int64_t i = 0; i < N; i++) {
    const data_split_entry *x = data_splits_at(a, i), *y = data_splits_at(t, i);
    /* the generator must draw the same universe in every build (compiler,
     * flags, sanitizers): RNG calls in one expression break that */
    CHECK_MSG(strcmp(x->spec, y->spec) == 0,
              "line %lld: this build draws %s, the committed file has %s", (long long)i + 2,
              x->spec, y->spec);
    CHECK(x->kernel_hash == y->kernel_hash);
    CHECK(data_split_rule(x->spec, &rule[i], &st));
    hash[i] = x->kernel_hash;
    /* the group of i in the committed file lies inside the prefix */
    if (hash_count(prefix, N, x->kernel_hash) == hash_count(sorted, n, x->kernel_hash))
      CHECK_MSG(x->split == y->split, "line %lld", (long long)i + 2);
    differ += x->split != y->split;
  }
  /* the small table is exactly the guard over its own rule splits */
  data_split_guard(rule, hash, N, NULL);
  for (int64_t i = 0; i < N; i++) CHECK(data_splits_at(a, i)->split == rule[i]);
  CHECK_EQ(differ, 0); /* no group of the committed universe crosses line 2001 */
  free(sorted);
  free(ta);
  free(tb);
  data_splits_free(a);
  data_splits_free(b);
}

/* ---- the loader ----------------------------------------------------------- */

#define HDR "# dragon splits v1 seed=7 count="
#define L1 "train\t123\tgemm:m=64,n=64,k=64,trans_a=0,trans_b=0,dtype=f32\n"
#define L2 "val\t18446744073709551615\tsoftmax:m=8,n=8,dtype=f16\n"

static void expect_error(const char *text, const char *want) {
  dg_status st;
  data_splits *t = parse_text(text, &st);
  if (t) {
    data_splits_free(t);
    dg_test_fail(__FILE__, __LINE__, "accepted: %s", text);
    return;
  }
  if (!strstr(st.msg, want))
    dg_test_fail(__FILE__, __LINE__, "expected '%s', got '%s'", want, st.msg);
}

DG_TEST(data_split_loader) {
  dg_status st;
  data_splits *t = parse_text(HDR "2\n" L1 L2, &st);
  CHECK_MSG(t != NULL, "%s", st.msg);
  CHECK_EQ(data_splits_count(t), 2);
  const data_split_entry *e = data_splits_find(t, "softmax:m=8,n=8,dtype=f16");
  CHECK(e && e->split == DATA_SPLIT_VAL && e->kernel_hash == UINT64_MAX);
  CHECK_EQ(data_splits_size(t, DATA_SPLIT_TRAIN), 1);
  char *text = data_splits_text(t, NULL);
  CHECK_STREQ(text, HDR "2\n" L1 L2);
  free(text);
  data_splits_free(t);
  t = parse_text(HDR "0\n", &st);
  CHECK(t && data_splits_count(t) == 0 && data_splits_next(t, DATA_SPLIT_TRAIN, 0) == -1);
  data_splits_free(t);

  expect_error("hello\n", "x.tsv.zst:1: not a splits file");
  expect_error("# dragon splits v2 seed=7 count=1\n" L1, "x.tsv.zst:1: splits file version 'v2'");
  expect_error("# dragon splits v10 seed=7 count=1\n" L1, "version 'v10'");
  expect_error("# dragon splits v1\n", "x.tsv.zst:1: header: expected ' seed=S count=N'");
  expect_error("# dragon splits v1 seed=x count=1\n", "x.tsv.zst:1: header: seed");
  expect_error(HDR "1 extra\n" L1, "x.tsv.zst:1: header: count");
  expect_error(HDR "2", "x.tsv.zst:1: no newline after the header");
  expect_error(HDR "2\n" L1 "trian\t1\tsoftmax:m=8,n=8,dtype=f16\n", "x.tsv.zst:3: unknown split 'trian'");
  expect_error(HDR "1\nTrain\t1\tsoftmax:m=8,n=8,dtype=f16\n", "x.tsv.zst:2: unknown split 'Train'");
  expect_error(HDR "1\ntrain\t12x4\tsoftmax:m=8,n=8,dtype=f16\n", "x.tsv.zst:2: kernel hash '12x4'");
  expect_error(HDR "1\ntrain\t18446744073709551616\tsoftmax:m=8,n=8,dtype=f16\n",
               "x.tsv.zst:2: kernel hash '18446744073709551616' is not a decimal 64-bit number");
  expect_error(HDR "1\ntrain\t\tsoftmax:m=8,n=8,dtype=f16\n", "x.tsv.zst:2: kernel hash ''");
  expect_error(HDR "1\ntrain\t-1\tsoftmax:m=8,n=8,dtype=f16\n", "x.tsv.zst:2: kernel hash '-1'");
  expect_error(HDR "1\ntrain\t007\tsoftmax:m=8,n=8,dtype=f16\n", "x.tsv.zst:2: kernel hash '007'");
  expect_error(HDR "1\ntrain softmax:m=8,n=8,dtype=f16\n", "x.tsv.zst:2: expected split<TAB>");
  expect_error(HDR "1\ntrain\t1\tGMM/0\n", "x.tsv.zst:2: 'GMM/0' is not a canonical workload spec");
  expect_error(HDR "1\ntrain\t1\tsoftmax:n=8,m=8\n", "is not a canonical workload spec");
  expect_error(HDR "1\ntrain\t1\tsoftmax:m=8,n=8,dtype=f16\t\n", "x.tsv.zst:2: ");
  expect_error(HDR "2\n" L1 L1, "x.tsv.zst:3: duplicate workload (also at line 2)");
  expect_error(HDR "3\n" L1 L2, "x.tsv.zst: 2 workloads, the header says count=3");
  expect_error(HDR "1\n" L1 L2, "x.tsv.zst:3: more workloads than the header's count=1");
  expect_error(HDR "1\ntrain\t1\tsoftmax:m=8,n=8,dtype=f16", "x.tsv.zst:2: the last line has no newline");

  /* the stream: not zstd, truncated, corrupt, empty */
  const char *good = HDR "2\n" L1 L2;
  CHECK(data_splits_parse(good, strlen(good), "x.tsv.zst", &st) == NULL);
  CHECK_ERR(st, "x.tsv.zst: not a zstd stream");
  CHECK(data_splits_parse("", 0, "x.tsv.zst", &st) == NULL);
  CHECK_ERR(st, "x.tsv.zst: empty file");
  data_splits *big = data_splits_build(3, 200, &st);
  CHECK(big != NULL);
  char path[512];
  snprintf(path, sizeof path, "%s/loader.tsv.zst", dg_test_tmpdir());
  CHECK(data_splits_save(big, path, &st));
  data_splits_free(big);
  size_t zn;
  char *z = dg_read_file(path, &zn, &st);
  CHECK(z != NULL && zn > 100);
  CHECK(data_splits_parse(z, zn / 2, "x.tsv.zst", &st) == NULL);
  CHECK_ERR(st, "x.tsv.zst: truncated zstd stream");
  CHECK(data_splits_parse(z, zn - 1, "x.tsv.zst", &st) == NULL);
  CHECK_ERR(st, "x.tsv.zst: truncated zstd stream");
  z[zn / 2] ^= 0x5a;
  CHECK(data_splits_parse(z, zn, "x.tsv.zst", &st) == NULL);
  CHECK_ERR(st, "x.tsv.zst: corrupt zstd stream");
  z[zn / 2] ^= 0x5a;
  t = data_splits_parse(z, zn, "x.tsv.zst", &st);
  CHECK_MSG(t != NULL, "%s", st.msg);
  CHECK_EQ(data_splits_count(t), 200);
  data_splits_free(t);
  free(z);
  CHECK(data_splits_load("tests/data/no-such-file.tsv.zst", &st) == NULL);
  CHECK_ERR(st, "no-such-file.tsv.zst");
}

/* ---- the command ---------------------------------------------------------- */

DG_TEST(data_split_cli) {
  char *out = NULL, args[1024];
  CHECK_EQ(dg_test_run_dragon("data --help", NULL, &out), 0);
  CHECK(strstr(out, "split"));
  free(out);
  CHECK_EQ(dg_test_run_dragon("data", NULL, &out), 2);
  free(out);
  CHECK_EQ(dg_test_run_dragon("data nosuch", NULL, &out), 2);
  CHECK(strstr(out, "unknown subcommand 'nosuch'"));
  free(out);
  CHECK_EQ(dg_test_run_dragon("data split --help", NULL, &out), 0);
  CHECK(strstr(out, "--seed") && strstr(out, "--count") && strstr(out, "--out") &&
        strstr(out, "--check") && strstr(out, "default 60000"));
  free(out);
  CHECK_EQ(dg_test_run_dragon("data split --count 0", NULL, &out), 2);
  free(out);

  const char *dir = dg_test_tmpdir();
  snprintf(args, sizeof args, "data split --count 300 --seed 5 --out %s/cli/s.tsv.zst", dir);
  CHECK_EQ(dg_test_run_dragon(args, NULL, &out), 0);
  CHECK(strstr(out, "heldout_family") && strstr(out, "structural guard: 0 workloads moved") &&
        strstr(out, "gemm") && strstr(out, "wrote "));
  free(out);
  snprintf(args, sizeof args, "data split --check %s/cli/s.tsv.zst", dir);
  CHECK_EQ(dg_test_run_dragon(args, NULL, &out), 0);
  CHECK(strstr(out, "identical to its regeneration (300 workloads)"));
  CHECK(strstr(out, "seed=5 count=300"));
  free(out);

  /* one split changed on line 5: --check names it */
  dg_status st;
  char path[512];
  snprintf(path, sizeof path, "%s/cli/s.tsv.zst", dir);
  data_splits *t = data_splits_load(path, &st);
  CHECK(t != NULL);
  char *text = data_splits_text(t, NULL);
  data_splits_free(t);
  char *p = text;
  for (int ln = 1; ln < 5; ln++) p = strchr(p, '\n') + 1;
  const char *now = strncmp(p, "train\t", 6) == 0 ? "test\t" : "train\t";
  size_t old = strcspn(p, "\t") + 1;
  dg_str edited;
  dg_str_init(&edited);
  dg_str_putn(&edited, text, (size_t)(p - text));
  dg_str_puts(&edited, now);
  dg_str_puts(&edited, p + old);
  size_t zn;
  char *z = zpack(edited.s, edited.len, &zn);
  snprintf(path, sizeof path, "%s/cli/bad.tsv.zst", dir);
  CHECK(dg_write_file_atomic(path, z, zn, &st));
  free(z);
  dg_str_free(&edited);
  free(text);
  snprintf(args, sizeof args, "data split --check %s", path);
  CHECK_EQ(dg_test_run_dragon(args, NULL, &out), 1);
  CHECK_MSG(strstr(out, "bad.tsv.zst:5: differs from its regeneration"), "%s", out);
  free(out);
  snprintf(args, sizeof args, "data split --check %s/nothing.tsv.zst", dir);
  CHECK_EQ(dg_test_run_dragon(args, NULL, &out), 1);
  free(out);
}

/* ---- fuzz regressions ----------------------------------------------------- */

/* The inputs kept by fuzz/fuzz_splits.c, replayed as it does: a zstd stream
 * as it is, anything else compressed first; a refusal carries a message,
 * an accepted table prints back to a text that parses to the same. */
DG_TEST(data_split_fuzz_regressions) {
  const char *dirname = "tests/fuzz/splits";
  DIR *d = opendir(dirname);
  CHECK(d != NULL);
  struct dirent *e;
  int n = 0, accepted = 0;
  while ((e = readdir(d))) {
    if (e->d_name[0] == '.') continue;
    char path[512];
    snprintf(path, sizeof path, "%s/%s", dirname, e->d_name);
    dg_status st;
    size_t len;
    char *bytes = dg_read_file(path, &len, &st);
    CHECK(bytes != NULL);
    static const unsigned char zmagic[4] = {0x28, 0xb5, 0x2f, 0xfd};
    size_t zn = len;
    char *z = bytes;
    if (len < 4 || memcmp(bytes, zmagic, 4) != 0) z = zpack(bytes, len, &zn);
    data_splits *t = data_splits_parse(z, zn, path, &st);
    if (t) {
      size_t tn;
      char *text = data_splits_text(t, &tn);
      data_splits *u = parse_text(text, &st);
      CHECK_MSG(u != NULL, "%s: its own text does not parse: %s", path, st.msg);
      char *text2 = data_splits_text(u, NULL);
      CHECK_STREQ(text2, text);
      free(text2);
      free(text);
      data_splits_free(u);
      data_splits_free(t);
      accepted++;
    } else {
      CHECK_MSG(st.msg[0] != 0, "%s: refused without a message", path);
    }
    if (z != bytes) free(z);
    free(bytes);
    n++;
  }
  closedir(d);
  CHECK(n >= 4);
  CHECK(accepted >= 1);
}
