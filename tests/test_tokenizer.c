/* test_tokenizer.c: the byte-level BPE tokenizer: pre-tokenizers, training
 * (hand-worked merges), exact round trips, a naive reference encoder, the
 * binary file (truncated and corrupted at many places), the Hugging Face
 * loader on hand-written fixtures, and special tokens. */
#include <stdlib.h>

#include "dragon/tokenizer.h"
#include "test.h"

/* ---- a small corpus of the model's text ---------------------------------- */

static const char *const kernel_fmt =
    "kernel matmul_%d(A: f32[%d, %d], B: f32[%d, %d], C: f32[%d, %d]) {\n"
    "  for i0 in range(%d):\n"
    "    for j0 in range(%d):\n"
    "      for k0 in range(%d):\n"
    "        block C(vi = spatial(%d, i0), vj = spatial(%d, j0), vk = reduce(%d, k0)) {\n"
    "          reads A[vi, vk], B[vk, vj]\n"
    "          writes C[vi, vj]\n"
    "          init { C[vi, vj] = 0.0 }\n"
    "          C[vi, vj] = C[vi, vj] + A[vi, vk] * B[vk, vj]\n"
    "        }\n"
    "}\n";

static const char *const tsel_fmt =
    "tsel 1 kernel gemm:m=%d,n=%d,k=%d,dtype=f32\n"
    "t1 block \"C\"\n"
    "t2 loops t1 x3\n"
    "t3 tile t2.0 [1 %d 1 2 2] max=64\n"
    "t4 tile t2.1 [1 1 2 %d 1] max=64\n"
    "t5 tile t2.2 [%d 32 4] max=64\n"
    "t6 reorder t3.0 t4.0 t3.1 t4.1 t5.0 t5.1 t3.2 t4.2 t5.2\n"
    "t7 fuse_bind t3.0 t4.0 blockIdx.x\n"
    "t8 fuse_bind t3.1 t4.1 threadIdx.x\n"
    "t9 cache_read_at t1 0 shared t5.0\n"
    "why t3 t4 t5: block tile 1x%dx128 of C, 64 threads\n"
    "expect p1: 64 threads/block, 8 KiB shared, %d.%dx over the unscheduled kernel\n";

/* About 60 KB of kernel text and TSEL with varying numbers. */
static char *make_corpus(size_t *n) {
  dg_str b;
  dg_str_init(&b);
  static const int sizes[] = {16, 32, 64, 128, 256, 512, 1024, 2048, 4096, 96, 384};
  int ns = (int)DG_ARRAY_LEN(sizes);
  for (int r = 0; r < 4; r++)
    for (int i = 0; i < ns; i++) {
      int m = sizes[i], k = sizes[(i + r + 1) % ns], q = sizes[(i + 2 * r) % ns];
      dg_str_printf(&b, kernel_fmt, m, m, k, k, q, m, q, m, q, k, m, q, k);
      dg_str_printf(&b, tsel_fmt, m, q, k, m % 64 + 1, k % 32 + 1, q % 16 + 1, m, i + r, i);
    }
  *n = b.len;
  return dg_str_take(&b);
}

static tok_tokenizer *trained(int vocab, char **corpus, size_t *n) {
  *corpus = make_corpus(n);
  dg_status st;
  dg_status_ok(&st);
  tok_tokenizer *t = tok_train(*corpus, *n, vocab, NULL, &st);
  if (!t) fprintf(stderr, "tok_train: %s\n", st.msg);
  return t;
}

/* Joins the chunks of s with '|'. */
static char *split(tok_pre_kind kind, int max_digits, const char *s) {
  tok_pretok p = {kind, max_digits, false};
  size_t n = strlen(s);
  dg_str b;
  dg_str_init(&b);
  for (size_t i = 0; i < n;) {
    size_t e = tok_pretok_next(&p, (const uint8_t *)s, n, i);
    if (i) dg_str_putc(&b, '|');
    dg_str_putn(&b, s + i, e - i);
    i = e;
  }
  return dg_str_take(&b);
}

static bool ids_equal(const tok_ids *a, const int32_t *want, size_t n) {
  if (a->len != n) return false;
  for (size_t i = 0; i < n; i++)
    if (a->data[i] != want[i]) return false;
  return true;
}

static void print_ids(const char *what, const tok_ids *v) {
  fprintf(stderr, "%s:", what);
  for (size_t i = 0; i < v->len; i++) fprintf(stderr, " %d", v->data[i]);
  fputc('\n', stderr);
}

/* Encodes s and compares with the expected ids; prints both on a mismatch. */
static bool encodes_to(tok_tokenizer *t, const char *s, const int32_t *want, size_t n) {
  tok_ids v = {0};
  dg_status st;
  dg_status_ok(&st);
  bool ok = tok_encode(t, s, strlen(s), &v, &st) && ids_equal(&v, want, n);
  if (!ok) {
    fprintf(stderr, "encoding '%s' (%s)\n", s, st.code ? st.msg : "ok");
    print_ids("  got", &v);
  }
  tok_ids_free(&v);
  return ok;
}
#define ENCODES(t, s, ...)                                                    \
  do {                                                                        \
    static const int32_t want_[] = {__VA_ARGS__};                             \
    CHECK(encodes_to((t), (s), want_, DG_ARRAY_LEN(want_)));                  \
  } while (0)

/* ---- pre-tokenizers ------------------------------------------------------ */

DG_TEST(tok_pretok_dragon) {
  char *s = split(TOK_PRE_DRAGON, 3, "t5 tile t4.0 [1 1]  max=12345\n    x_y2 (\"C\")\t\xff\xfe!");
  CHECK_STREQ(s, "t|5| tile| t|4|.|0| [|1| 1|]|  |max|=|123|45|\n    |x_y|2| (|\"|C|\"|)|\t|\xff\xfe|!");
  free(s);
  /* The examples in docs/tokenizer.md. */
  s = split(TOK_PRE_DRAGON, 3, "t5 tile t4.0 [1 32 4] max=64");
  CHECK_STREQ(s, "t|5| tile| t|4|.|0| [|1| 32| 4|]| max|=|64");
  free(s);
  s = split(TOK_PRE_DRAGON, 3, "\n    for i0 in range(128):");
  CHECK_STREQ(s, "\n    |for| i|0| in| range|(|128|)|:");
  free(s);
  s = split(TOK_PRE_DRAGON, 3, " a  \n\n  b\n c");
  CHECK_STREQ(s, " a|  |\n|\n  |b|\n |c");
  free(s);
}

DG_TEST(tok_pretok_gpt2) {
  char *s = split(TOK_PRE_GPT2, 0, "Hello world  foo's 123\n\n x_y 12345");
  CHECK_STREQ(s, "Hello| world| | foo|'s| 123|\n\n| x|_|y| 12345");
  free(s);
  s = split(TOK_PRE_GPT2, 0, "a   b  ");
  CHECK_STREQ(s, "a|  | b|  ");
  free(s);
}

DG_TEST(tok_pretok_llama3) {
  char *s = split(TOK_PRE_LLAMA3, 3, "Hello world  foo's 123\n\n x 12345");
  CHECK_STREQ(s, "Hello| world| | foo|'s| |123|\n\n| x| |123|45");
  free(s);
  s = split(TOK_PRE_LLAMA3, 3, "x = f(a)\r\n.x a..b I'LL \t\n  y");
  CHECK_STREQ(s, "x| =| f|(a|)\r\n|.x| a|..|b| I|'LL| \t\n| | y");
  free(s);
  s = split(TOK_PRE_LLAMA3, 1, "x12");
  CHECK_STREQ(s, "x|1|2");
  free(s);
}

/* ---- training ------------------------------------------------------------ */

DG_TEST(tok_train_hand_worked) {
  /* Chunks "ab", " ab" x2, " cd" x2. (a,b) occurs 3 times; then four pairs
   * tie at 2 and the smallest ids win: (' ', c), (' ', ab), (' c', d). */
  const char *corpus = "ab ab ab cd cd";
  dg_status st;
  dg_status_ok(&st);
  tok_tokenizer *t = tok_train(corpus, strlen(corpus), 1000, NULL, &st);
  CHECK_OK(st);
  CHECK_EQ(tok_merge_count(t), 4);
  static const int32_t want[4][3] = {{'a', 'b', 256}, {' ', 'c', 257}, {' ', 256, 258}, {257, 'd', 259}};
  for (int r = 0; r < 4; r++) {
    int32_t a, b, z;
    CHECK(tok_merge_get(t, r, &a, &b, &z));
    CHECK_EQ(a, want[r][0]);
    CHECK_EQ(b, want[r][1]);
    CHECK_EQ(z, want[r][2]);
  }
  CHECK(!tok_merge_get(t, 4, NULL, NULL, NULL));
  size_t n;
  const uint8_t *p = tok_token_bytes(t, 259, &n);
  CHECK(p && n == 3 && memcmp(p, " cd", 3) == 0);
  CHECK_EQ(tok_vocab_size(t), 266);
  CHECK_EQ(tok_special(t, TOK_KERNEL), 260);
  CHECK_EQ(tok_special(t, TOK_BOS), 265);
  ENCODES(t, "ab cd abab", 256, 259, 258, 256);
  tok_free(t);

  /* The vocabulary size is a cap: room for exactly two merges. */
  t = tok_train(corpus, strlen(corpus), 256 + 6 + 2, NULL, &st);
  CHECK_OK(st);
  CHECK_EQ(tok_merge_count(t), 2);
  CHECK_EQ(tok_special(t, TOK_KERNEL), 258);
  tok_free(t);

  CHECK(!tok_train(corpus, strlen(corpus), 200, NULL, &st));
  CHECK_ERR(st, "vocabulary size 200");
}

/* The most frequent adjacent pair inside DRAGON chunks, by brute force. */
static void most_frequent_pair(const char *s, size_t n, int *best_a, int *best_b) {
  int64_t *cnt = dg_calloc(256 * 256, sizeof(int64_t));
  tok_pretok p = {TOK_PRE_DRAGON, 3, false};
  for (size_t i = 0; i < n;) {
    size_t e = tok_pretok_next(&p, (const uint8_t *)s, n, i);
    for (size_t k = i; k + 1 < e; k++) cnt[(uint8_t)s[k] * 256 + (uint8_t)s[k + 1]]++;
    i = e;
  }
  int64_t best = -1;
  for (int k = 0; k < 256 * 256; k++)
    if (cnt[k] > best) best = cnt[k], *best_a = k / 256, *best_b = k % 256;
  free(cnt);
}

/* Naive BPE: ids from the byte tokens, then the lowest-rank pair, leftmost
 * first, one merge at a time, with ranks looked up in a dense table. */
static void naive_encode(const tok_tokenizer *t, const int32_t *rank, const char *s,
                         size_t n, tok_ids *out) {
  int V = tok_vocab_size(t);
  tok_pretok p = tok_get_pretok(t);
  int32_t buf[4096];
  for (size_t i = 0; i < n;) {
    size_t e = tok_pretok_next(&p, (const uint8_t *)s, n, i);
    int m = 0;
    DG_ASSERT(e - i <= DG_ARRAY_LEN(buf));
    for (size_t k = i; k < e; k++) buf[m++] = (uint8_t)s[k]; /* trained: id == byte */
    for (;;) {
      int best = -1, at = -1;
      for (int k = 0; k + 1 < m; k++) {
        int32_t r = rank[(size_t)buf[k] * (size_t)V + (size_t)buf[k + 1]];
        if (r >= 0 && (best < 0 || r < best)) best = r, at = k;
      }
      if (best < 0) break;
      int32_t z;
      tok_merge_get(t, best, NULL, NULL, &z);
      buf[at] = z;
      memmove(buf + at + 1, buf + at + 2, sizeof(int32_t) * (size_t)(m - at - 2));
      m--;
    }
    for (int k = 0; k < m; k++) DG_VEC_PUSH(out, buf[k]);
    i = e;
  }
}

/* Naive BPE training: recount every pair of every unique chunk before each
 * merge. Returns the merges as (left, right) pairs; ids are 256 + rank. */
static int naive_train(const char *s, size_t n, int max_merges, int32_t *out) {
  DG_VEC(size_t) off = {0};
  DG_VEC(size_t) len = {0};
  DG_VEC(int64_t) cnt = {0};
  tok_pretok p = {TOK_PRE_DRAGON, 3, false};
  for (size_t i = 0; i < n;) {
    size_t e = tok_pretok_next(&p, (const uint8_t *)s, n, i), k = 0;
    for (; k < off.len; k++)
      if (len.data[k] == e - i && memcmp(s + off.data[k], s + i, e - i) == 0) break;
    if (k == off.len) {
      DG_VEC_PUSH(&off, i);
      DG_VEC_PUSH(&len, e - i);
      DG_VEC_PUSH(&cnt, 0);
    }
    cnt.data[k]++;
    i = e;
  }
  size_t nw = off.len, V = 256 + (size_t)max_merges;
  int32_t **w = dg_malloc(sizeof(int32_t *) * nw);
  for (size_t k = 0; k < nw; k++) {
    w[k] = dg_malloc(sizeof(int32_t) * len.data[k]);
    for (size_t q = 0; q < len.data[k]; q++) w[k][q] = (uint8_t)s[off.data[k] + q];
  }
  int64_t *pc = dg_malloc(sizeof(int64_t) * V * V);
  int m = 0;
  for (; m < max_merges; m++) {
    memset(pc, 0, sizeof(int64_t) * V * V);
    for (size_t k = 0; k < nw; k++)
      for (size_t q = 0; q + 1 < len.data[k]; q++)
        pc[(size_t)w[k][q] * V + (size_t)w[k][q + 1]] += cnt.data[k];
    size_t best = 0;
    for (size_t x = 1; x < V * V; x++)
      if (pc[x] > pc[best]) best = x;
    if (pc[best] < 2) break;
    int32_t a = (int32_t)(best / V), b = (int32_t)(best % V), z = 256 + m;
    out[2 * m] = a, out[2 * m + 1] = b;
    for (size_t k = 0; k < nw; k++) {
      size_t o = 0;
      for (size_t q = 0; q < len.data[k];) {
        if (q + 1 < len.data[k] && w[k][q] == a && w[k][q + 1] == b) w[k][o++] = z, q += 2;
        else w[k][o++] = w[k][q++];
      }
      len.data[k] = o;
    }
  }
  for (size_t k = 0; k < nw; k++) free(w[k]);
  free(w);
  free(pc);
  DG_VEC_FREE(&off);
  DG_VEC_FREE(&len);
  DG_VEC_FREE(&cnt);
  return m;
}

DG_TEST(tok_train_corpus) {
  char *corpus;
  size_t n;
  tok_tokenizer *t = trained(700, &corpus, &n);
  CHECK(t);
  CHECK_MSG(tok_merge_count(t) > 150, "%d merges", tok_merge_count(t));
  int fa = -1, fb = -1;
  most_frequent_pair(corpus, n, &fa, &fb);
  int32_t a, b, z;
  CHECK(tok_merge_get(t, 0, &a, &b, &z));
  CHECK_EQ(a, fa);
  CHECK_EQ(b, fb);
  CHECK_EQ(z, 256);

  /* Every merge as the naive trainer makes it. */
  int max_merges = 700 - 256 - 6;
  int32_t *ref = dg_malloc(sizeof(int32_t) * 2 * (size_t)max_merges);
  int n_ref = naive_train(corpus, n, max_merges, ref);
  CHECK_EQ(tok_merge_count(t), n_ref);
  for (int r = 0; r < n_ref; r++) {
    CHECK(tok_merge_get(t, r, &a, &b, &z));
    CHECK_MSG(a == ref[2 * r] && b == ref[2 * r + 1] && z == 256 + r,
              "merge %d: %d + %d, naive %d + %d", r, a, b, ref[2 * r], ref[2 * r + 1]);
  }
  free(ref);

  /* Same corpus, same vocabulary. */
  dg_status st;
  dg_status_ok(&st);
  tok_tokenizer *t2 = tok_train(corpus, n, 700, NULL, &st);
  CHECK_OK(st);
  CHECK_EQ(tok_merge_count(t2), tok_merge_count(t));
  for (int r = 0; r < tok_merge_count(t); r++) {
    int32_t m1[3], m2[3];
    tok_merge_get(t, r, &m1[0], &m1[1], &m1[2]);
    tok_merge_get(t2, r, &m2[0], &m2[1], &m2[2]);
    CHECK(memcmp(m1, m2, sizeof m1) == 0);
  }
  tok_free(t2);

  /* Nearly every chunk of this repetitive corpus becomes one token. */
  tok_ids v = {0}, w = {0};
  CHECK(tok_encode(t, corpus, n, &v, &st));
  size_t chunks = 0;
  tok_pretok pre = tok_get_pretok(t);
  for (size_t i = 0; i < n; chunks++) i = tok_pretok_next(&pre, (const uint8_t *)corpus, n, i);
  CHECK_MSG(v.len * 2 < n && v.len <= chunks + chunks / 20,
            "%zu tokens for %zu bytes in %zu chunks", v.len, n, chunks);
  /* The same ids as the naive encoder. */
  int V = tok_vocab_size(t);
  int32_t *rank = dg_malloc(sizeof(int32_t) * (size_t)V * (size_t)V);
  for (size_t k = 0; k < (size_t)V * (size_t)V; k++) rank[k] = -1;
  for (int r = 0; r < tok_merge_count(t); r++) {
    tok_merge_get(t, r, &a, &b, &z);
    rank[(size_t)a * (size_t)V + (size_t)b] = r;
  }
  naive_encode(t, rank, corpus, n, &w);
  CHECK(v.len == w.len && memcmp(v.data, w.data, sizeof(int32_t) * v.len) == 0);
  dg_str d;
  dg_str_init(&d);
  CHECK(tok_decode(t, v.data, v.len, &d, &st));
  CHECK(d.len == n && memcmp(d.s, corpus, n) == 0);

  /* Shuffled pieces of the corpus: new chunk boundaries, same agreement. */
  dg_rng rng;
  dg_rng_seed(&rng, 11);
  for (int trial = 0; trial < 300; trial++) {
    char text[400];
    size_t len = 0;
    while (len < 300) {
      size_t at = (size_t)dg_rng_below(&rng, n - 40), k = (size_t)dg_rng_range(&rng, 1, 40);
      memcpy(text + len, corpus + at, k);
      len += k;
    }
    v.len = w.len = 0;
    CHECK(tok_encode(t, text, len, &v, &st));
    naive_encode(t, rank, text, len, &w);
    CHECK(v.len == w.len && memcmp(v.data, w.data, sizeof(int32_t) * v.len) == 0);
  }
  free(rank);
  dg_str_free(&d);
  tok_ids_free(&v);
  tok_ids_free(&w);
  tok_free(t);
  free(corpus);
}

/* Random text over a tiny alphabet: runs like "aaaa" (overlapping pairs)
 * and many ties in the counts. */
DG_TEST(tok_train_random_matches_naive) {
  dg_rng rng;
  dg_rng_seed(&rng, 3);
  char text[4000];
  int32_t ref[2 * 200];
  for (int trial = 0; trial < 8; trial++) {
    size_t n = 500 + (size_t)dg_rng_below(&rng, 3000);
    const char *alpha = trial % 2 ? "aab_ 1\n" : "aaaab";
    size_t na = strlen(alpha);
    for (size_t i = 0; i < n; i++) text[i] = alpha[dg_rng_below(&rng, na)];
    dg_status st;
    dg_status_ok(&st);
    tok_tokenizer *t = tok_train(text, n, 256 + 6 + 200, NULL, &st);
    CHECK_OK(st);
    int n_ref = naive_train(text, n, 200, ref);
    CHECK_EQ(tok_merge_count(t), n_ref);
    for (int r = 0; r < n_ref; r++) {
      int32_t a, b, z;
      CHECK(tok_merge_get(t, r, &a, &b, &z));
      CHECK_MSG(a == ref[2 * r] && b == ref[2 * r + 1], "trial %d merge %d: %d + %d, naive %d + %d",
                trial, r, a, b, ref[2 * r], ref[2 * r + 1]);
    }
    /* The heap encoder agrees with the naive one on overlapping runs. */
    size_t V = (size_t)tok_vocab_size(t);
    int32_t *rank = dg_malloc(sizeof(int32_t) * V * V);
    for (size_t k = 0; k < V * V; k++) rank[k] = -1;
    for (int r = 0; r < n_ref; r++) rank[(size_t)ref[2 * r] * V + (size_t)ref[2 * r + 1]] = r;
    tok_ids v = {0}, w = {0};
    dg_str d;
    dg_str_init(&d);
    CHECK(tok_encode(t, text, n, &v, &st));
    naive_encode(t, rank, text, n, &w);
    CHECK(v.len == w.len && memcmp(v.data, w.data, sizeof(int32_t) * v.len) == 0);
    CHECK(tok_decode(t, v.data, v.len, &d, &st));
    CHECK(d.len == n && memcmp(d.s, text, n) == 0);
    free(rank);
    tok_ids_free(&v);
    tok_ids_free(&w);
    dg_str_free(&d);
    tok_free(t);
  }
}

/* ---- round trips and special tokens -------------------------------------- */

DG_TEST(tok_roundtrip_random_bytes) {
  char *corpus;
  size_t n;
  tok_tokenizer *t = trained(600, &corpus, &n);
  CHECK(t);
  dg_rng rng;
  dg_rng_seed(&rng, 5);
  tok_ids v = {0};
  dg_str d;
  dg_str_init(&d);
  dg_status st;
  dg_status_ok(&st);
  uint8_t text[512];
  for (int trial = 0; trial < 3000; trial++) {
    size_t len = (size_t)dg_rng_below(&rng, 300);
    int mode = trial % 3;
    for (size_t i = 0; i < len; i++) {
      if (mode == 0) text[i] = (uint8_t)dg_rng_below(&rng, 256); /* NUL, invalid UTF-8 */
      else if (mode == 1) text[i] = (uint8_t)" \n a0_[]."[dg_rng_below(&rng, 10)];
      else text[i] = (uint8_t)corpus[dg_rng_below(&rng, n)];
    }
    v.len = 0;
    dg_str_clear(&d);
    CHECK(tok_encode(t, text, len, &v, &st));
    for (size_t i = 0; i < v.len; i++) CHECK(!tok_is_special(t, v.data[i]));
    CHECK(tok_decode(t, v.data, v.len, &d, &st));
    CHECK_MSG(d.len == len && memcmp(d.s, text, len) == 0, "trial %d: round trip differs",
              trial);
  }
  tok_ids_free(&v);
  dg_str_free(&d);
  tok_free(t);
  free(corpus);
}

DG_TEST(tok_specials_only_by_api) {
  char *corpus;
  size_t n;
  tok_tokenizer *t = trained(600, &corpus, &n);
  CHECK(t);
  const char *names[] = {TOK_KERNEL, TOK_PRIOR, TOK_GRAPH, TOK_END, TOK_PAD, TOK_BOS};
  int32_t first = tok_special(t, TOK_KERNEL);
  CHECK_EQ(first, 256 + tok_merge_count(t));
  for (int k = 0; k < 6; k++) {
    CHECK_EQ(tok_special(t, names[k]), first + k);
    CHECK(tok_is_special(t, first + k));
  }
  CHECK_EQ(tok_vocab_size(t), first + 6);
  CHECK_EQ(tok_special(t, "<|nope|>"), -1);
  CHECK(!tok_is_special(t, 'a'));

  /* Text that spells every special token encodes as ordinary bytes. */
  const char *text = "<|kernel|>gemm<|prior|>t1<|graph|>t1 block \"C\"<|end|><|pad|><|bos|>";
  tok_ids v = {0};
  dg_status st;
  dg_status_ok(&st);
  CHECK(tok_encode(t, text, strlen(text), &v, &st));
  for (size_t i = 0; i < v.len; i++) CHECK(!tok_is_special(t, v.data[i]));
  dg_str d;
  dg_str_init(&d);
  CHECK(tok_decode(t, v.data, v.len, &d, &st));
  CHECK_STREQ(d.s, text);

  /* The model's layout: specials by id, decoded to their names. */
  v.len = 0;
  DG_VEC_PUSH(&v, tok_special(t, TOK_KERNEL));
  CHECK(tok_encode(t, "x", 1, &v, &st));
  DG_VEC_PUSH(&v, tok_special(t, TOK_GRAPH));
  DG_VEC_PUSH(&v, tok_special(t, TOK_END));
  dg_str_clear(&d);
  CHECK(tok_decode(t, v.data, v.len, &d, &st));
  CHECK_STREQ(d.s, "<|kernel|>x<|graph|><|end|>");

  int32_t bad[] = {'a', tok_vocab_size(t)};
  CHECK(!tok_decode(t, bad, 2, &d, &st));
  CHECK_ERR(st, "token 1: id");
  tok_ids_free(&v);
  dg_str_free(&d);
  tok_free(t);

  /* Extra specials follow the fixed six. */
  const char *extra[] = {"<|why|>", "<|expect|>"};
  tok_train_opts o = {.extra_specials = extra, .n_extra_specials = 2};
  dg_status_ok(&st);
  t = tok_train(corpus, n, 400, &o, &st);
  CHECK_OK(st);
  CHECK_EQ(tok_vocab_size(t), 400);
  CHECK_EQ(tok_special(t, "<|why|>"), 398);
  CHECK_EQ(tok_special(t, "<|expect|>"), 399);
  tok_free(t);
  const char *dup[] = {"<|graph|>"};
  o = (tok_train_opts){.extra_specials = dup, .n_extra_specials = 1};
  CHECK(!tok_train(corpus, n, 400, &o, &st));
  CHECK_ERR(st, "same name '<|graph|>'");
  free(corpus);
}

/* ---- files --------------------------------------------------------------- */

static char *tmp_path(const char *name) {
  static char path[4][512];
  static int k;
  k = (k + 1) % 4;
  snprintf(path[k], sizeof path[k], "%s/%s", dg_test_tmpdir(), name);
  return path[k];
}

/* Plain writes: the damage loops write thousands of files, no fsync needed. */
static void write_bytes(const char *path, const void *p, size_t n) {
  FILE *f = fopen(path, "wb");
  if (!f || fwrite(p, 1, n, f) != n || fclose(f) != 0)
    dg_panic(__FILE__, __LINE__, "cannot write %s", path);
}

/* Recomputes the checksum (header ints 10 and 11) after a change. */
static void resign(char *buf, size_t n) {
  memset(buf + 40, 0, 8);
  uint64_t h = dg_hash_bytes(buf, n, 0);
  for (int k = 0; k < 8; k++) buf[40 + k] = (char)(h >> (8 * k));
}

static void write_text(const char *path, const char *s) { write_bytes(path, s, strlen(s)); }

static bool same_encoding(tok_tokenizer *a, tok_tokenizer *b, const char *s, size_t n) {
  tok_ids x = {0}, y = {0};
  dg_status st;
  dg_status_ok(&st);
  bool ok = tok_encode(a, s, n, &x, &st) && tok_encode(b, s, n, &y, &st) && x.len == y.len &&
            memcmp(x.data, y.data, sizeof(int32_t) * x.len) == 0;
  tok_ids_free(&x);
  tok_ids_free(&y);
  return ok;
}

DG_TEST(tok_save_load) {
  char *corpus;
  size_t n;
  tok_tokenizer *t = trained(600, &corpus, &n);
  CHECK(t);
  dg_status st;
  dg_status_ok(&st);
  const char *path = tmp_path("tok.bin");
  CHECK(tok_save(t, path, &st));
  tok_tokenizer *u = tok_load(path, &st);
  CHECK_OK(st);
  CHECK_EQ(tok_vocab_size(u), tok_vocab_size(t));
  CHECK_EQ(tok_merge_count(u), tok_merge_count(t));
  for (int32_t id = 0; id < tok_vocab_size(t); id++) {
    size_t la, lb;
    const uint8_t *pa = tok_token_bytes(t, id, &la), *pb = tok_token_bytes(u, id, &lb);
    CHECK(pa && pb && la == lb && memcmp(pa, pb, la) == 0);
    CHECK(tok_is_special(t, id) == tok_is_special(u, id));
  }
  CHECK(same_encoding(t, u, corpus, n));
  CHECK_EQ(tok_special(u, TOK_GRAPH), tok_special(t, TOK_GRAPH));
  tok_free(u);
  tok_free(t);
  free(corpus);
}

DG_TEST(tok_load_rejects_damage) {
  const char *corpus = "for i in range(4):\n  x = y + 1\nfor j in range(8):\n  x = y + 2\n";
  dg_status st;
  dg_status_ok(&st);
  tok_tokenizer *t = tok_train(corpus, strlen(corpus), 300, NULL, &st);
  CHECK_OK(st);
  const char *good = tmp_path("good.bin");
  CHECK(tok_save(t, good, &st));
  size_t n;
  char *buf = dg_read_file(good, &n, &st);
  CHECK(buf);
  const char *bad = tmp_path("bad.bin");

  /* Truncations are rejected, naming the file. */
  for (size_t cut = 0; cut < n; cut += (cut + 16 < n ? 37 : 1)) {
    write_bytes(bad, buf, cut);
    tok_tokenizer *u = tok_load(bad, &st);
    CHECK_MSG(!u, "truncated at %zu of %zu: loaded", cut, n);
    CHECK_ERR(st, bad);
    CHECK_ERR(st, "truncated");
  }
  /* Flipped bytes anywhere are rejected. */
  for (size_t at = 0; at < n; at += (at < 48 ? 1 : 13)) {
    buf[at] ^= 0x5a;
    write_bytes(bad, buf, n);
    buf[at] ^= 0x5a;
    tok_tokenizer *u = tok_load(bad, &st);
    CHECK_MSG(!u, "byte %zu flipped: loaded", at);
    CHECK_ERR(st, bad);
  }
  /* The messages say what is wrong. */
  char *big = dg_malloc(n + 3);
  memcpy(big, buf, n);
  memcpy(big + n, "xyz", 3);
  write_bytes(bad, big, n + 3);
  CHECK(!tok_load(bad, &st));
  CHECK_ERR(st, "trailing data");
  free(big);
  buf[0] ^= 1;
  write_bytes(bad, buf, n);
  CHECK(!tok_load(bad, &st));
  CHECK_ERR(st, "not a dragon tokenizer file");
  buf[0] ^= 1;
  buf[4] = 9;
  write_bytes(bad, buf, n);
  CHECK(!tok_load(bad, &st));
  CHECK_ERR(st, "unsupported version 9");
  buf[4] = 1;
  buf[1023] = 1;
  write_bytes(bad, buf, n);
  CHECK(!tok_load(bad, &st));
  CHECK_ERR(st, "reserved field 255");
  buf[1023] = 0;
  buf[1100] ^= 1;
  write_bytes(bad, buf, n);
  CHECK(!tok_load(bad, &st));
  CHECK_ERR(st, "checksum mismatch");
  buf[1100] ^= 1;
  /* Damage behind a valid checksum reaches the structural checks: the file
   * is rejected with a message, or it loads a vocabulary that still
   * round-trips whatever it can encode. */
  dg_rng rng;
  dg_rng_seed(&rng, 9);
  int rejected = 0, trials = 0;
  for (size_t at = 1024; at < n; at += 1 + (size_t)dg_rng_below(&rng, 12), trials++) {
    uint8_t old = (uint8_t)buf[at];
    buf[at] = (char)(trials % 2 ? old ^ 1 : (uint8_t)dg_rng_below(&rng, 256));
    resign(buf, n);
    write_bytes(bad, buf, n);
    buf[at] = (char)old;
    dg_status_ok(&st);
    tok_tokenizer *u = tok_load(bad, &st);
    if (!u) {
      rejected++;
      CHECK_ERR(st, bad);
      continue;
    }
    tok_ids v = {0};
    dg_str d;
    dg_str_init(&d);
    if (tok_encode(u, corpus, strlen(corpus), &v, &st)) {
      CHECK(tok_decode(u, v.data, v.len, &d, &st));
      CHECK_STREQ(d.s, corpus);
    }
    tok_ids_free(&v);
    dg_str_free(&d);
    tok_free(u);
  }
  CHECK_MSG(rejected > trials / 2, "%d of %d rejected", rejected, trials);
  CHECK(!tok_load(tmp_path("missing.bin"), &st));
  CHECK_ERR(st, "missing.bin");
  free(buf);
  tok_free(t);
}

DG_TEST(tok_spec_rejects) {
  /* Tokens: 0 "a", 1 "b", 2 "ab", 3 "<|s|>" (special), 4 unused. */
  int32_t len[] = {1, 1, 2, 5, -1};
  uint8_t special[] = {0, 0, 0, 1, 0};
  const uint8_t bytes[] = "abab<|s|>";
  int32_t merges[] = {0, 1, 2, 0, 1, 2};
  tok_spec sp = {5, len, bytes, 9, special, 1, merges, {TOK_PRE_DRAGON, 3, false}, false};
  dg_status st;
  dg_status_ok(&st);
  tok_tokenizer *t = tok_from_spec(&sp, "spec", &st);
  CHECK_OK(st);
  CHECK_EQ(tok_special(t, "<|s|>"), 3);
  ENCODES(t, "abba", 2, 1, 0);
  tok_ids v = {0};
  CHECK(!tok_encode(t, "abc", 3, &v, &st));
  CHECK_ERR(st, "byte 0x63 at offset 2");
  CHECK_EQ(v.len, 0);
  tok_ids_free(&v);
  tok_free(t);

  sp.n_merges = 2;
  CHECK(!tok_from_spec(&sp, "spec", &st));
  CHECK_ERR(st, "spec: merge 1 repeats merge 0");
  sp.n_merges = 1;
  merges[2] = 1;
  CHECK(!tok_from_spec(&sp, "spec", &st));
  CHECK_ERR(st, "not the concatenation");
  merges[2] = 3;
  CHECK(!tok_from_spec(&sp, "spec", &st));
  CHECK_ERR(st, "is a special token");
  merges[2] = 4;
  CHECK(!tok_from_spec(&sp, "spec", &st));
  CHECK_ERR(st, "unused id");
  merges[2] = 9;
  CHECK(!tok_from_spec(&sp, "spec", &st));
  CHECK_ERR(st, "out of range");
  merges[2] = 2;
  sp.n_tok_bytes = 8;
  CHECK(!tok_from_spec(&sp, "spec", &st));
  CHECK_ERR(st, "run past");
  sp.n_tok_bytes = 10;
  CHECK(!tok_from_spec(&sp, "spec", &st));
  CHECK_ERR(st, "tokens use 9 bytes but 10");
  sp.n_tok_bytes = 9;
  len[0] = 0;
  CHECK(!tok_from_spec(&sp, "spec", &st));
  CHECK_ERR(st, "token 0: length 0");
  len[0] = 1;
  special[4] = 1;
  CHECK(!tok_from_spec(&sp, "spec", &st));
  CHECK_ERR(st, "special but unused");
}

/* ---- Hugging Face tokenizer.json ----------------------------------------- */

DG_TEST(tok_hf_gpt2_fixture) {
  dg_status st;
  dg_status_ok(&st);
  tok_tokenizer *t = tok_load_hf(dg_test_data("tokenizer/gpt2_tiny.json"), &st);
  CHECK_OK(st);
  CHECK_EQ(tok_vocab_size(t), 45);
  CHECK_EQ(tok_merge_count(t), 17);
  CHECK_EQ(tok_get_pretok(t).kind, TOK_PRE_GPT2);
  size_t n;
  const uint8_t *p = tok_token_bytes(t, 30, &n); /* "Ġworld" */
  CHECK(p && n == 6 && memcmp(p, " world", 6) == 0);
  /* Worked by hand from the merges' ranks (see the fixture): */
  ENCODES(t, "hello world\n", 25, 30, 1);
  /* b+c (rank 14) before a+b (15), then a+bc: not the greedy ab|c. */
  ENCODES(t, "abc", 38);
  /* 1+2 (rank 9) before Ġ+1 (10), so Ġ12 is never reached. */
  ENCODES(t, "a's 123", 2, 34, 0, 31, 15);
  /* \s+(?!\S): two of three spaces alone, the last one with the b. */
  ENCODES(t, "a   b", 2, 35, 0, 3);
  ENCODES(t, "a  ", 2, 35);
  /* The special token's spelling is plain text. */
  ENCODES(t, "<|endoftext|>", 40, 41, 6, 43, 5, 9, 7, 21, 6, 44, 21, 41, 42);
  CHECK_EQ(tok_special(t, "<|endoftext|>"), 39);
  int32_t ids[] = {25, 30, 39, 1};
  dg_str d;
  dg_str_init(&d);
  CHECK(tok_decode(t, ids, 4, &d, &st));
  CHECK_STREQ(d.s, "hello world<|endoftext|>\n");
  dg_str_free(&d);
  tok_ids v = {0};
  CHECK(!tok_encode(t, "hello zoo", 9, &v, &st));
  CHECK_ERR(st, "byte 0x7a at offset 6");
  CHECK_EQ(v.len, 0);
  tok_ids_free(&v);
  dg_status_ok(&st);

  /* Saved in our format and loaded back: same ids. */
  const char *path = tmp_path("gpt2_tiny.bin");
  CHECK(tok_save(t, path, &st));
  tok_tokenizer *u = tok_load(path, &st);
  CHECK_OK(st);
  const char *text = "hello world  abc's 12 123\n";
  CHECK(same_encoding(t, u, text, strlen(text)));
  CHECK_EQ(tok_special(u, "<|endoftext|>"), 39);
  tok_free(u);
  tok_free(t);
}

DG_TEST(tok_hf_llama3_fixture) {
  dg_status st;
  dg_status_ok(&st);
  tok_tokenizer *t = tok_load_hf(dg_test_data("tokenizer/llama3_tiny.json"), &st);
  CHECK_OK(st);
  CHECK_EQ(tok_vocab_size(t), 102);
  CHECK_EQ(tok_get_pretok(t).kind, TOK_PRE_LLAMA3);
  CHECK_EQ(tok_get_pretok(t).max_digits, 3);
  /* ignore_merges: "abc" is a token, though no merge makes it. */
  ENCODES(t, "abc", 37);
  ENCODES(t, "abcab", 30, 14, 30);
  ENCODES(t, " a", 31);
  ENCODES(t, "1234", 33, 18);
  ENCODES(t, ".x", 35);
  ENCODES(t, "a\n\nb", 12, 36, 13);
  ENCODES(t, "a  \tb", 12, 34, 23, 13);
  /* (?i:'s...): 'S is a contraction, so 'Sb (id 39) is not one chunk. */
  ENCODES(t, "a'Sb", 12, 38, 13);
  CHECK_EQ(tok_special(t, "<|begin_of_text|>"), 100);
  CHECK_EQ(tok_special(t, "<|eot_id|>"), 101);
  CHECK(tok_token_bytes(t, 50, NULL) == NULL);
  int32_t hole[] = {12, 50};
  dg_str d;
  dg_str_init(&d);
  CHECK(!tok_decode(t, hole, 2, &d, &st));
  CHECK_ERR(st, "token 1: id 50 is not in the vocabulary");
  dg_status_ok(&st);
  dg_str_free(&d);

  const char *path = tmp_path("llama3_tiny.bin");
  CHECK(tok_save(t, path, &st));
  tok_tokenizer *u = tok_load(path, &st);
  CHECK_OK(st);
  const char *text = "abc abcab 1234 .x\n\n'S 'Sab";
  CHECK(same_encoding(t, u, text, strlen(text)));
  CHECK(tok_token_bytes(u, 50, NULL) == NULL);
  tok_free(u);
  tok_free(t);
}


DG_TEST(tok_hf_rejects) {
  static const struct {
    const char *json, *msg;
  } cases[] = {
      {"{\"model\": ", "bad.json:1:"},
      {"{\"model\": {\"type\": \"WordPiece\", \"vocab\": {}, \"merges\": []}}",
       "model.type is 'WordPiece'"},
      {"{\"pre_tokenizer\": {\"type\": \"ByteLevel\"}, \"model\": {\"type\": \"BPE\", "
       "\"vocab\": {\"a\": 0, \"b\": 1}, \"merges\": [\"a b\"]}}",
       "model.merges[0]: 'ab' is not in model.vocab"},
      {"{\"pre_tokenizer\": {\"type\": \"ByteLevel\"}, \"model\": {\"type\": \"BPE\", "
       "\"vocab\": {\"a\": 0, \"b\": 1, \"ab\": 2}, \"merges\": [\"ab\"]}}",
       "model.merges[0]: 'ab' is not \"a b\""},
      {"{\"pre_tokenizer\": {\"type\": \"ByteLevel\"}, \"model\": {\"type\": \"BPE\", "
       "\"vocab\": {\"a\": 0, \"b\": 0}, \"merges\": []}}",
       "id 0 is given to"},
      {"{\"pre_tokenizer\": {\"type\": \"ByteLevel\"}, \"model\": {\"type\": \"BPE\", "
       "\"vocab\": {\"a\": -3}, \"merges\": []}}",
       "model.vocab['a']: id is not an integer"},
      {"{\"pre_tokenizer\": {\"type\": \"Sequence\", \"pretokenizers\": [{\"type\": \"Split\", "
       "\"pattern\": {\"Regex\": \"\\\\w+\"}, \"behavior\": \"Isolated\", \"invert\": false}, "
       "{\"type\": \"ByteLevel\", \"use_regex\": false}]}, \"model\": {\"type\": \"BPE\", "
       "\"vocab\": {\"a\": 0}, \"merges\": []}}",
       "unsupported Split regex '\\w+'"},
      {"{\"pre_tokenizer\": null, \"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": 0}, "
       "\"merges\": []}}",
       "pre_tokenizer: missing"},
      {"{\"pre_tokenizer\": {\"type\": \"ByteLevel\"}, \"normalizer\": {\"type\": "
       "\"Lowercase\"}, \"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": 0}, \"merges\": []}}",
       "normalizer 'Lowercase' is not supported"},
      {"{\"pre_tokenizer\": {\"type\": \"ByteLevel\"}, \"model\": {\"type\": \"BPE\", "
       "\"byte_fallback\": true, \"vocab\": {\"a\": 0}, \"merges\": []}}",
       "model.byte_fallback"},
      {"{\"pre_tokenizer\": {\"type\": \"ByteLevel\"}, \"added_tokens\": [{\"id\": 1, "
       "\"content\": \"<s>\", \"special\": true}, {\"id\": 2, \"content\": \"<s>\", "
       "\"special\": true}], \"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": 0}, "
       "\"merges\": []}}",
       "same name '<s>'"},
      {"[1, 2]", "model: missing"},
      {"{\"pre_tokenizer\": {\"type\": \"ByteLevel\"}, \"model\": {\"type\": \"BPE\", "
       "\"vocab\": {\"a\": 5000000}, \"merges\": []}}",
       "largest id 5000000 for only 1 tokens"},
  };
  const char *path = tmp_path("bad.json");
  for (size_t k = 0; k < DG_ARRAY_LEN(cases); k++) {
    write_text(path, cases[k].json);
    dg_status st;
    dg_status_ok(&st);
    tok_tokenizer *t = tok_load_hf(path, &st);
    CHECK_MSG(!t, "case %zu loaded", k);
    CHECK_ERR(st, cases[k].msg);
    CHECK_ERR(st, "bad.json");
  }
  dg_status st;
  CHECK(!tok_load_hf(tmp_path("none.json"), &st));
  CHECK_ERR(st, "none.json");
}
