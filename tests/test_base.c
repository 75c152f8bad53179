/* test_base.c: arena, strings, RNG, number parsing, half floats, atomic files. */
#include <math.h>
#include <stdlib.h>

#include "test.h"

DG_TEST(base_arena) {
  dg_arena *a = dg_arena_new();
  char *s = dg_arena_strdup(a, "hello");
  CHECK_STREQ(s, "hello");
  int *big = DG_ANEWN(a, int, 100000);
  CHECK(big[99999] == 0);
  big[99999] = 7;
  char *p = dg_arena_printf(a, "%d-%s", 42, "x");
  CHECK_STREQ(p, "42-x");
  CHECK(dg_arena_bytes(a) >= 400000);
  dg_arena_free(a);
}

DG_TEST(base_str) {
  dg_str b;
  dg_str_init(&b);
  for (int i = 0; i < 1000; i++) dg_str_printf(&b, "%d,", i);
  CHECK(b.len == strlen(b.s));
  CHECK(strncmp(b.s, "0,1,2,", 6) == 0);
  dg_str_clear(&b);
  dg_str_indent(&b, 3);
  dg_str_puts(&b, "x");
  CHECK_STREQ(b.s, "   x");
  dg_str_free(&b);
}

DG_TEST(base_rng_reproducible) {
  dg_rng a, b;
  dg_rng_seed(&a, 7);
  dg_rng_seed(&b, 7);
  for (int i = 0; i < 100; i++) CHECK(dg_rng_next(&a) == dg_rng_next(&b));
  /* xoshiro256** with splitmix64 seeding: first output for seed 0 is fixed */
  dg_rng c;
  dg_rng_seed(&c, 0);
  uint64_t first = dg_rng_next(&c);
  dg_rng_seed(&c, 0);
  CHECK(first == dg_rng_next(&c));
  int hist[6] = {0};
  for (int i = 0; i < 60000; i++) hist[dg_rng_below(&a, 6)]++;
  for (int i = 0; i < 6; i++) CHECK(hist[i] > 9000 && hist[i] < 11000);
  double w[3] = {0, 1, 3};
  int hw[3] = {0};
  for (int i = 0; i < 40000; i++) hw[dg_rng_weighted(&a, w, 3)]++;
  CHECK(hw[0] == 0);
  CHECK(hw[2] > 2 * hw[1]);
  for (int i = 0; i < 1000; i++) {
    int64_t x = dg_rng_range(&a, -3, 3);
    CHECK(x >= -3 && x <= 3);
  }
}

DG_TEST(base_parse_numbers) {
  dg_status st;
  int64_t v;
  CHECK(dg_parse_i64("42", 0, 100, &v, "--n", &st) && v == 42);
  CHECK(!dg_parse_i64("42x", 0, 100, &v, "--n", &st));
  CHECK_ERR(st, "--n: '42x' is not an integer");
  CHECK(!dg_parse_i64("101", 0, 100, &v, "--n", &st));
  CHECK_ERR(st, "out of range");
  CHECK(!dg_parse_i64("", 0, 100, &v, "--n", &st));
  double d;
  CHECK(dg_parse_f64("1.5e3", &d, "x", &st) && d == 1500);
  CHECK(!dg_parse_f64("nan", &d, "x", &st));
}

DG_TEST(base_f16) {
  /* values known in advance */
  CHECK(dg_f32_to_f16(1.0f) == 0x3c00);
  CHECK(dg_f32_to_f16(-2.0f) == 0xc000);
  CHECK(dg_f32_to_f16(65504.0f) == 0x7bff);
  CHECK(dg_f32_to_f16(65536.0f) == 0x7c00);
  CHECK(dg_f32_to_f16(5.9604645e-8f) == 0x0001);
  CHECK(dg_f32_to_f16(0.1f) == 0x2e66);
  CHECK(dg_f16_to_f32(0x3555) == 0.333251953125f);
  CHECK(isnan(dg_f16_to_f32(dg_f32_to_f16(NAN))));
  /* every half round-trips */
  for (uint32_t h = 0; h < 65536; h++) {
    if ((h & 0x7c00) == 0x7c00 && (h & 0x3ff)) continue; /* NaNs */
    CHECK(dg_f32_to_f16(dg_f16_to_f32((uint16_t)h)) == h);
  }
}

DG_TEST(base_atomic_write) {
  char path[512];
  snprintf(path, sizeof path, "%s/a/b/file.txt", dg_test_tmpdir());
  dg_status st;
  char dir[512];
  snprintf(dir, sizeof dir, "%s/a/b", dg_test_tmpdir());
  CHECK(dg_mkdirs(dir, &st));
  CHECK(dg_write_file_atomic(path, "abc", 3, &st));
  size_t n;
  char *s = dg_read_file(path, &n, &st);
  CHECK(s && n == 3 && strcmp(s, "abc") == 0);
  free(s);
  CHECK(!dg_read_file("/nonexistent/x", &n, &st));
  CHECK_ERR(st, "/nonexistent/x");
}

typedef struct {
  char got[512];
} kv_seen;

static bool kv_collect(void *ctx, const char *key, const char *value, int line, dg_status *st) {
  kv_seen *k = ctx;
  size_t n = strlen(k->got);
  snprintf(k->got + n, sizeof k->got - n, "%d:%s=%s;", line, key, value);
  if (strcmp(key, "bad") == 0) return dg_fail(st, DG_ERR_PARSE, "line %d: bad key", line);
  return true;
}

/* The one `key = value` reader: comments, blank lines, trimming, line
 * numbers, and located refusals. */
DG_TEST(base_kv_reader) {
  dg_status st;
  kv_seen k = {""};
  const char *text = "# a comment\n\n  lr = 3e-3   # trailing\nsteps=10\n\tname =  tiny model \n";
  CHECK(dg_kv_parse(text, strlen(text), "c.cfg", kv_collect, &k, &st));
  CHECK_STREQ(k.got, "3:lr=3e-3;4:steps=10;5:name=tiny model;");
  kv_seen k2 = {""};
  const char *no_eq = "lr = 1\njust words\n";
  CHECK(!dg_kv_parse(no_eq, strlen(no_eq), "c.cfg", kv_collect, &k2, &st));
  CHECK(strstr(st.msg, "c.cfg:2: expected 'key = value', got 'just words'"));
  const char *no_key = " = 4\n";
  CHECK(!dg_kv_parse(no_key, strlen(no_key), "c.cfg", kv_collect, &k2, &st));
  CHECK(strstr(st.msg, "c.cfg:1: a value without a key"));
  const char nul[] = "lr = 1\n\0steps = 2\n";
  CHECK(!dg_kv_parse(nul, sizeof nul - 1, "c.cfg", kv_collect, &k2, &st));
  CHECK(strstr(st.msg, "c.cfg: not a text file"));
  /* the caller's refusal stops the reading there */
  kv_seen k3 = {""};
  const char *bad = "a = 1\nbad = 2\nc = 3\n";
  CHECK(!dg_kv_parse(bad, strlen(bad), "c.cfg", kv_collect, &k3, &st));
  CHECK_STREQ(k3.got, "1:a=1;2:bad=2;");
  CHECK(strstr(st.msg, "line 2: bad key"));
}

/* The open-addressing index: every position found under its key among
 * colliding ones, across rebuilds; a key never added finds nothing. */
static uint64_t slots_key_of(const void *ctx, size_t i) {
  const uint64_t *keys = ctx;
  return keys[i];
}

DG_TEST(base_slots_find_every_position) {
  enum { N = 5000 };
  static uint64_t keys[N];
  dg_slots s = {0};
  size_t k = 0;
  CHECK_EQ(dg_slots_next(&s, 7, &k), -1); /* empty */
  for (size_t i = 0; i < N; i++) {
    keys[i] = (i % 3 == 0) ? 42 : dg_hash_bytes(&i, sizeof i, 1); /* a third collide on one key */
    dg_slots_add(&s, i + 1, keys[i], slots_key_of, keys);
  }
  CHECK(s.size >= 2 * N && (s.size & (s.size - 1)) == 0);
  for (size_t i = 0; i < N; i += 7) {
    bool found = false;
    k = 0;
    for (int p; (p = dg_slots_next(&s, keys[i], &k)) >= 0;) found |= (size_t)p == i;
    CHECK_MSG(found, "position %zu not under its key", i);
  }
  int n42 = 0;
  k = 0;
  for (int p; (p = dg_slots_next(&s, 42, &k)) >= 0;) n42 += keys[p] == 42;
  CHECK_EQ(n42, (N + 2) / 3);
  dg_slots_free(&s);
  CHECK(s.size == 0 && s.slot == NULL);
}
