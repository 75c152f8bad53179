/* tokenizer.c: the byte-level BPE tokenizer: pre-tokenizers, the validated
 * vocabulary (tok_from_spec), encoding, decoding and the binary file.
 *
 * Encoding cuts the text into chunks (tok_pretok_next), starts each chunk as
 * one token per byte and merges the adjacent pair of lowest rank, leftmost
 * first, until no pair has a merge: a heap of candidate pairs over a linked
 * list of symbols, O(n log n) per chunk, the same order as Hugging Face's
 * BPE model. Chunk encodings are cached (bounded; cleared when full).
 *
 * Assumes the vocabulary passed tok_from_spec; everything a file can get
 * wrong is caught there or in tok_load. Training is in bpe_train.c, the
 * Hugging Face loader in hf_tokenizer.c. Does not split special tokens out of
 * text: they come only from tok_special.
 */
#include "dragon/tokenizer.h"

#include <stdlib.h>
#include <string.h>

/* ---- pre-tokenization ---------------------------------------------------- */

enum { C_LETTER, C_DIGIT, C_SPACE, C_NEWLINE, C_PUNCT, C_OTHER };

/* Non-ASCII bytes count as letters: UTF-8 words stay whole, and the GPT-2 and
 * Llama 3 regexes' \p{L} is approximated without a Unicode table. */
static int byte_class(uint8_t c) {
  if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_' || c >= 0x80)
    return C_LETTER;
  if (c >= '0' && c <= '9') return C_DIGIT;
  if (c == ' ') return C_SPACE;
  if (c == '\n') return C_NEWLINE;
  if (c > ' ' && c < 0x7f) return C_PUNCT;
  return C_OTHER;
}

/* The regexes' classes: \p{L} (with '_' not a letter), \p{N}, \s. */
static bool re_letter(uint8_t c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c >= 0x80;
}
static bool re_digit(uint8_t c) { return c >= '0' && c <= '9'; }
static bool re_space(uint8_t c) {
  return c == ' ' || c == '\t' || c == '\n' || c == '\v' || c == '\f' || c == '\r';
}
static bool re_other(uint8_t c) { return !re_letter(c) && !re_digit(c) && !re_space(c); }

static size_t run_of(bool (*f)(uint8_t), const uint8_t *s, size_t n, size_t i) {
  while (i < n && f(s[i])) i++;
  return i;
}

static size_t digits_capped(const uint8_t *s, size_t n, size_t i, int cap) {
  size_t j = i;
  while (j < n && re_digit(s[j]) && (cap <= 0 || j - i < (size_t)cap)) j++;
  return j;
}

/* The body of a DRAGON chunk that starts with a non-space at i. */
static size_t dragon_body(const tok_pretok *p, const uint8_t *s, size_t n, size_t i) {
  switch (byte_class(s[i])) {
  case C_LETTER: {
    size_t j = i;
    while (j < n && byte_class(s[j]) == C_LETTER) j++;
    return j;
  }
  case C_DIGIT: return digits_capped(s, n, i, p->max_digits);
  default: return i + 1;
  }
}

static size_t dragon_next(const tok_pretok *p, const uint8_t *s, size_t n, size_t i) {
  size_t j = i;
  if (s[i] == '\n') { /* a line break and the next line's indentation */
    for (j = i + 1; j < n && s[j] == ' ';) j++;
    return j;
  }
  if (s[i] != ' ') return dragon_body(p, s, n, i);
  while (j < n && s[j] == ' ') j++;
  /* A lone space joins the word, number or punctuation after it; longer runs
   * (indentation, alignment) stay whole so they tokenize the same way. */
  if (j == i + 1 && j < n) {
    int c = byte_class(s[j]);
    if (c == C_LETTER || c == C_DIGIT || c == C_PUNCT) return dragon_body(p, s, n, j);
  }
  return j;
}

static size_t contraction(const uint8_t *s, size_t n, size_t i, bool fold) {
  static const char *const tails[] = {"s", "t", "re", "ve", "m", "ll", "d"};
  if (s[i] != '\'') return 0;
  for (size_t k = 0; k < DG_ARRAY_LEN(tails); k++) {
    size_t m = strlen(tails[k]);
    if (i + 1 + m > n) continue;
    bool ok = true;
    for (size_t q = 0; q < m && ok; q++) {
      uint8_t c = s[i + 1 + q];
      if (fold && c >= 'A' && c <= 'Z') c = (uint8_t)(c - 'A' + 'a');
      ok = c == (uint8_t)tails[k][q];
    }
    if (ok) return i + 1 + m;
  }
  return 0;
}

/* \s+(?!\S) then \s+, for a whitespace run [i, j). */
static size_t space_tail(size_t i, size_t j, size_t n) {
  if (j == n || j - i == 1) return j;
  return j - 1;
}

/* 's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+ */
static size_t gpt2_next(const uint8_t *s, size_t n, size_t i) {
  size_t e = contraction(s, n, i, false);
  if (e) return e;
  size_t k = (s[i] == ' ' && i + 1 < n) ? i + 1 : i;
  if (re_letter(s[k])) return run_of(re_letter, s, n, k);
  if (re_digit(s[k])) return run_of(re_digit, s, n, k);
  if (re_other(s[k])) return run_of(re_other, s, n, k);
  return space_tail(i, run_of(re_space, s, n, i), n);
}

static bool re_newline(uint8_t c) { return c == '\r' || c == '\n'; }

/* (?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}|
 *  ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+ */
static size_t llama3_next(const tok_pretok *p, const uint8_t *s, size_t n, size_t i) {
  size_t e = contraction(s, n, i, true);
  if (e) return e;
  uint8_t c = s[i];
  if (re_letter(c)) return run_of(re_letter, s, n, i);
  if (!re_newline(c) && !re_digit(c) && i + 1 < n && re_letter(s[i + 1]))
    return run_of(re_letter, s, n, i + 1);
  if (re_digit(c)) return digits_capped(s, n, i, p->max_digits);
  size_t k = (c == ' ' && i + 1 < n && re_other(s[i + 1])) ? i + 1 : i;
  if (re_other(s[k])) return run_of(re_newline, s, n, run_of(re_other, s, n, k));
  size_t j = run_of(re_space, s, n, i);
  for (size_t q = j; q > i; q--)
    if (re_newline(s[q - 1])) return q;
  return space_tail(i, j, n);
}

size_t tok_pretok_next(const tok_pretok *p, const uint8_t *s, size_t n, size_t i) {
  DG_ASSERT(i < n);
  switch (p->kind) {
  case TOK_PRE_DRAGON: return dragon_next(p, s, n, i);
  case TOK_PRE_GPT2: return gpt2_next(s, n, i);
  case TOK_PRE_LLAMA3: return llama3_next(p, s, n, i);
  case TOK_PRE_NONE: return n;
  case TOK_PRE_COUNT: break;
  }
  DG_UNREACHABLE();
}

const char *tok_pre_kind_name(tok_pre_kind k) {
  static const char *const names[] = {"dragon", "gpt2", "llama3", "none"};
  _Static_assert(DG_ARRAY_LEN(names) == TOK_PRE_COUNT, "pre-tokenizer names");
  return (unsigned)k < TOK_PRE_COUNT ? names[k] : "?";
}

/* ---- the tokenizer ------------------------------------------------------- */

enum { CACHE_SLOTS = 1 << 17, CACHE_MAX_ENTRIES = 1 << 16, CACHE_MAX_KEY = 256 };

typedef struct {
  uint64_t h;
  uint32_t koff, klen, voff, vlen; /* klen == 0: empty slot */
} cache_ent;

typedef struct {
  int32_t rank, pos, rpos;
} heap_ent;

struct tok_tokenizer {
  int32_t n_vocab;
  int64_t *off;     /* (n_vocab) offset of each token's bytes */
  int32_t *len;     /* (n_vocab) -1: unused */
  uint8_t *bytes;
  size_t n_bytes;
  uint8_t *special; /* (n_vocab) */
  int32_t *specials; /* ids of the special tokens, ascending */
  int32_t n_specials;
  int32_t n_merges;
  int32_t *merges;  /* (n_merges, 3) */
  int32_t byte_id[256];
  tok_pretok pre;
  bool ignore_merges;
  /* pair (left << 32 | right) -> rank; open addressing, key ~0 empty */
  uint64_t *pair_key;
  int32_t *pair_rank;
  size_t pair_mask;
  /* whole token bytes -> id, for ignore_merges; -1 empty */
  int32_t *whole;
  size_t whole_mask;
  /* chunk encoding cache */
  cache_ent *cache;
  size_t cache_count;
  DG_VEC(uint8_t) cache_keys;
  DG_VEC(int32_t) cache_vals;
  /* scratch for one chunk */
  int32_t *sym_id, *sym_next, *sym_prev;
  size_t sym_cap;
  DG_VEC(heap_ent) heap;
  DG_VEC(uint8_t) prefixed;
};

static uint64_t mix64(uint64_t x) {
  x ^= x >> 30;
  x *= 0xbf58476d1ce4e5b9ull;
  x ^= x >> 27;
  x *= 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

static uint64_t pair_of(int32_t a, int32_t b) {
  return (uint64_t)(uint32_t)a << 32 | (uint32_t)b;
}

/* The slot of key, or of the empty slot where it would go. */
static size_t pair_slot(const tok_tokenizer *t, uint64_t key) {
  size_t i = mix64(key) & t->pair_mask;
  while (t->pair_key[i] != UINT64_MAX && t->pair_key[i] != key)
    i = (i + 1) & t->pair_mask;
  return i;
}

static int32_t pair_rank(const tok_tokenizer *t, int32_t a, int32_t b) {
  size_t i = pair_slot(t, pair_of(a, b));
  return t->pair_key[i] == UINT64_MAX ? -1 : t->pair_rank[i];
}

static size_t table_size(size_t n) {
  size_t s = 16;
  while (s < 2 * n) s *= 2;
  return s;
}

static bool same_bytes(const tok_tokenizer *t, int32_t id, const uint8_t *s, size_t n) {
  return (size_t)t->len[id] == n && memcmp(t->bytes + t->off[id], s, n) == 0;
}

static int32_t whole_lookup(const tok_tokenizer *t, const uint8_t *s, size_t n) {
  size_t i = dg_hash_bytes(s, n, 0) & t->whole_mask;
  for (; t->whole[i] >= 0; i = (i + 1) & t->whole_mask)
    if (same_bytes(t, t->whole[i], s, n)) return t->whole[i];
  return -1;
}

void tok_free(tok_tokenizer *t) {
  if (!t) return;
  free(t->off);
  free(t->len);
  free(t->bytes);
  free(t->special);
  free(t->specials);
  free(t->merges);
  free(t->pair_key);
  free(t->pair_rank);
  free(t->whole);
  free(t->cache);
  DG_VEC_FREE(&t->cache_keys);
  DG_VEC_FREE(&t->cache_vals);
  free(t->sym_id);
  free(t->sym_next);
  free(t->sym_prev);
  DG_VEC_FREE(&t->heap);
  DG_VEC_FREE(&t->prefixed);
  free(t);
}

void tok_ids_free(tok_ids *v) { DG_VEC_FREE(v); }

static bool check_specials(tok_tokenizer *t, const char *where, dg_status *st) {
  int32_t *ids = t->specials;
  for (int32_t a = 0; a < t->n_specials; a++)
    for (int32_t b = a + 1; b < t->n_specials; b++)
      if (t->len[ids[a]] == t->len[ids[b]] &&
          memcmp(t->bytes + t->off[ids[a]], t->bytes + t->off[ids[b]],
                 (size_t)t->len[ids[a]]) == 0)
        return dg_fail(st, DG_ERR_INVALID,
                       "%s: special tokens %d and %d have the same name '%.*s'",
                       where, ids[a], ids[b], t->len[ids[a]],
                       (const char *)t->bytes + t->off[ids[a]]);
  return true;
}

static bool check_merge(tok_tokenizer *t, int32_t r, const char *where, dg_status *st) {
  const int32_t *m = t->merges + 3 * (size_t)r;
  for (int k = 0; k < 3; k++) {
    int32_t id = m[k];
    const char *role = k == 0 ? "left" : k == 1 ? "right" : "result";
    if (id < 0 || id >= t->n_vocab)
      return dg_fail(st, DG_ERR_INVALID, "%s: merge %d: %s id %d is out of range [0, %d)",
                     where, r, role, id, t->n_vocab);
    if (t->len[id] < 0)
      return dg_fail(st, DG_ERR_INVALID, "%s: merge %d: %s id %d is an unused id",
                     where, r, role, id);
    if (t->special[id])
      return dg_fail(st, DG_ERR_INVALID, "%s: merge %d: %s id %d is a special token",
                     where, r, role, id);
  }
  int32_t a = m[0], b = m[1], z = m[2];
  if ((int64_t)t->len[a] + t->len[b] != t->len[z] ||
      memcmp(t->bytes + t->off[z], t->bytes + t->off[a], (size_t)t->len[a]) != 0 ||
      memcmp(t->bytes + t->off[z] + t->len[a], t->bytes + t->off[b], (size_t)t->len[b]) != 0)
    return dg_fail(st, DG_ERR_INVALID,
                   "%s: merge %d: token %d is not the concatenation of tokens %d and %d",
                   where, r, z, a, b);
  size_t slot = pair_slot(t, pair_of(a, b));
  if (t->pair_key[slot] != UINT64_MAX)
    return dg_fail(st, DG_ERR_INVALID, "%s: merge %d repeats merge %d (%d + %d)", where,
                   r, t->pair_rank[slot], a, b);
  t->pair_key[slot] = pair_of(a, b);
  t->pair_rank[slot] = r;
  return true;
}

tok_tokenizer *tok_from_spec(const tok_spec *sp, const char *where, dg_status *st) {
  if (sp->vocab_size < 1 || sp->vocab_size > TOK_MAX_VOCAB) {
    dg_fail(st, DG_ERR_INVALID, "%s: vocabulary size %d is not in [1, %d]", where,
            sp->vocab_size, TOK_MAX_VOCAB);
    return NULL;
  }
  if (sp->n_merges < 0 || sp->n_merges > 4 * TOK_MAX_VOCAB) {
    dg_fail(st, DG_ERR_INVALID, "%s: merge count %d is not in [0, %d]", where,
            sp->n_merges, 4 * TOK_MAX_VOCAB);
    return NULL;
  }
  if ((unsigned)sp->pretok.kind >= TOK_PRE_COUNT || sp->pretok.max_digits < 0 ||
      sp->pretok.max_digits > 64) {
    dg_fail(st, DG_ERR_INVALID, "%s: bad pre-tokenizer (kind %d, max digits %d)", where,
            (int)sp->pretok.kind, sp->pretok.max_digits);
    return NULL;
  }
  int32_t V = sp->vocab_size;
  tok_tokenizer *t = dg_calloc(1, sizeof *t);
  t->n_vocab = V;
  t->pre = sp->pretok;
  t->ignore_merges = sp->ignore_merges;
  t->off = dg_malloc(sizeof(int64_t) * (size_t)V);
  t->len = dg_malloc(sizeof(int32_t) * (size_t)V);
  t->special = dg_malloc((size_t)V);
  t->specials = dg_malloc(sizeof(int32_t) * (size_t)V);
  size_t off = 0;
  for (int32_t id = 0; id < V; id++) {
    int32_t n = sp->tok_len[id];
    uint8_t sp_flag = sp->is_special[id];
    if (sp_flag > 1) {
      dg_fail(st, DG_ERR_INVALID, "%s: token %d: special flag %d is not 0 or 1", where,
              id, sp_flag);
      goto fail;
    }
    if (n == -1 && sp_flag) {
      dg_fail(st, DG_ERR_INVALID, "%s: token %d is special but unused", where, id);
      goto fail;
    }
    if (n != -1 && (n < 1 || n > TOK_MAX_TOKEN_BYTES)) {
      dg_fail(st, DG_ERR_INVALID, "%s: token %d: length %d is not in [1, %d]", where, id,
              n, TOK_MAX_TOKEN_BYTES);
      goto fail;
    }
    t->len[id] = n;
    t->special[id] = sp_flag;
    t->off[id] = (int64_t)off;
    if (n < 0) continue;
    if ((size_t)n > sp->n_tok_bytes - off) {
      dg_fail(st, DG_ERR_INVALID, "%s: token %d: its bytes run past the %zu token bytes",
              where, id, sp->n_tok_bytes);
      goto fail;
    }
    off += (size_t)n;
    if (sp_flag) {
      if (t->n_specials >= TOK_MAX_SPECIALS) {
        dg_fail(st, DG_ERR_INVALID, "%s: more than %d special tokens", where,
                TOK_MAX_SPECIALS);
        goto fail;
      }
      t->specials[t->n_specials++] = id;
    }
  }
  if (off != sp->n_tok_bytes) {
    dg_fail(st, DG_ERR_INVALID, "%s: tokens use %zu bytes but %zu are given", where, off,
            sp->n_tok_bytes);
    goto fail;
  }
  t->n_bytes = off;
  t->bytes = dg_malloc(off);
  if (off) memcpy(t->bytes, sp->tok_bytes, off);
  if (!check_specials(t, where, st)) goto fail;

  t->n_merges = sp->n_merges;
  t->merges = dg_malloc(sizeof(int32_t) * 3 * (size_t)(sp->n_merges ? sp->n_merges : 1));
  if (sp->n_merges) memcpy(t->merges, sp->merges, sizeof(int32_t) * 3 * (size_t)sp->n_merges);
  size_t slots = table_size((size_t)sp->n_merges);
  t->pair_mask = slots - 1;
  t->pair_key = dg_malloc(sizeof(uint64_t) * slots);
  t->pair_rank = dg_malloc(sizeof(int32_t) * slots);
  memset(t->pair_key, 0xff, sizeof(uint64_t) * slots);
  for (int32_t r = 0; r < t->n_merges; r++)
    if (!check_merge(t, r, where, st)) goto fail;

  for (int b = 0; b < 256; b++) t->byte_id[b] = -1;
  for (int32_t id = 0; id < V; id++)
    if (t->len[id] == 1 && !t->special[id] && t->byte_id[t->bytes[t->off[id]]] < 0)
      t->byte_id[t->bytes[t->off[id]]] = id;

  if (t->ignore_merges) {
    size_t ws = table_size((size_t)V);
    t->whole_mask = ws - 1;
    t->whole = dg_malloc(sizeof(int32_t) * ws);
    memset(t->whole, 0xff, sizeof(int32_t) * ws);
    for (int32_t id = 0; id < V; id++) {
      if (t->len[id] < 0 || t->special[id]) continue;
      const uint8_t *s = t->bytes + t->off[id];
      size_t n = (size_t)t->len[id];
      size_t i = dg_hash_bytes(s, n, 0) & t->whole_mask;
      bool dup = false;
      for (; t->whole[i] >= 0 && !dup; i = (i + 1) & t->whole_mask)
        dup = same_bytes(t, t->whole[i], s, n);
      if (!dup) t->whole[i] = id; /* the lowest id of equal byte strings wins */
    }
  }
  return t;
fail:
  tok_free(t);
  return NULL;
}

/* ---- queries ------------------------------------------------------------- */

int tok_vocab_size(const tok_tokenizer *t) { return t->n_vocab; }
int tok_merge_count(const tok_tokenizer *t) { return t->n_merges; }
tok_pretok tok_get_pretok(const tok_tokenizer *t) { return t->pre; }

bool tok_merge_get(const tok_tokenizer *t, int r, int32_t *left, int32_t *right,
                   int32_t *result) {
  if (r < 0 || r >= t->n_merges) return false;
  const int32_t *m = t->merges + 3 * (size_t)r;
  if (left) *left = m[0];
  if (right) *right = m[1];
  if (result) *result = m[2];
  return true;
}

const uint8_t *tok_token_bytes(const tok_tokenizer *t, int32_t id, size_t *len) {
  if (id < 0 || id >= t->n_vocab || t->len[id] < 0) return NULL;
  if (len) *len = (size_t)t->len[id];
  return t->bytes + t->off[id];
}

int32_t tok_special(const tok_tokenizer *t, const char *name) {
  size_t n = strlen(name);
  for (int32_t k = 0; k < t->n_specials; k++)
    if (same_bytes(t, t->specials[k], (const uint8_t *)name, n)) return t->specials[k];
  return -1;
}

bool tok_is_special(const tok_tokenizer *t, int32_t id) {
  return id >= 0 && id < t->n_vocab && t->special[id];
}

/* ---- encoding ------------------------------------------------------------ */

static bool heap_less(heap_ent a, heap_ent b) {
  return a.rank != b.rank ? a.rank < b.rank : a.pos < b.pos;
}

static void heap_push(tok_tokenizer *t, heap_ent e) {
  DG_VEC_PUSH(&t->heap, e);
  heap_ent *h = t->heap.data;
  size_t i = t->heap.len - 1;
  while (i > 0 && heap_less(h[i], h[(i - 1) / 2])) {
    heap_ent tmp = h[i];
    h[i] = h[(i - 1) / 2];
    h[(i - 1) / 2] = tmp;
    i = (i - 1) / 2;
  }
}

static heap_ent heap_pop(tok_tokenizer *t) {
  heap_ent *h = t->heap.data, top = h[0];
  size_t n = --t->heap.len, i = 0;
  h[0] = h[n];
  for (;;) {
    size_t l = 2 * i + 1, r = l + 1, m = i;
    if (l < n && heap_less(h[l], h[m])) m = l;
    if (r < n && heap_less(h[r], h[m])) m = r;
    if (m == i) break;
    heap_ent tmp = h[i];
    h[i] = h[m];
    h[m] = tmp;
    i = m;
  }
  return top;
}

static void push_pair(tok_tokenizer *t, int32_t pos, int32_t rpos) {
  int32_t r = pair_rank(t, t->sym_id[pos], t->sym_id[rpos]);
  if (r >= 0) heap_push(t, (heap_ent){r, pos, rpos});
}

/* BPE on one chunk whose bytes all have tokens; the result is read by
 * following sym_next from position 0. */
static void bpe_chunk(tok_tokenizer *t, const uint8_t *s, size_t n) {
  if (n > t->sym_cap) {
    t->sym_cap = n > 2 * t->sym_cap ? n : 2 * t->sym_cap;
    t->sym_id = dg_realloc(t->sym_id, sizeof(int32_t) * t->sym_cap);
    t->sym_next = dg_realloc(t->sym_next, sizeof(int32_t) * t->sym_cap);
    t->sym_prev = dg_realloc(t->sym_prev, sizeof(int32_t) * t->sym_cap);
  }
  int32_t m = (int32_t)n;
  for (int32_t i = 0; i < m; i++) {
    t->sym_id[i] = t->byte_id[s[i]];
    t->sym_next[i] = i + 1 < m ? i + 1 : -1;
    t->sym_prev[i] = i - 1;
  }
  t->heap.len = 0;
  for (int32_t i = 0; i + 1 < m; i++) push_pair(t, i, i + 1);
  while (t->heap.len > 0) {
    heap_ent e = heap_pop(t);
    const int32_t *mg = t->merges + 3 * (size_t)e.rank;
    /* Entries go stale when a neighbour merged first: skip those. */
    if (t->sym_next[e.pos] != e.rpos || t->sym_id[e.pos] != mg[0] ||
        t->sym_id[e.rpos] != mg[1])
      continue;
    t->sym_id[e.pos] = mg[2];
    t->sym_id[e.rpos] = -1;
    int32_t nx = t->sym_next[e.rpos];
    t->sym_next[e.pos] = nx;
    if (nx >= 0) t->sym_prev[nx] = e.pos;
    if (t->sym_prev[e.pos] >= 0) push_pair(t, t->sym_prev[e.pos], e.pos);
    if (nx >= 0) push_pair(t, e.pos, nx);
  }
}

static cache_ent *cache_find(tok_tokenizer *t, const uint8_t *s, size_t n, uint64_t h) {
  size_t i = h & (CACHE_SLOTS - 1);
  for (;; i = (i + 1) & (CACHE_SLOTS - 1)) {
    cache_ent *e = &t->cache[i];
    if (e->klen == 0) return e;
    if (e->h == h && e->klen == n && memcmp(t->cache_keys.data + e->koff, s, n) == 0)
      return e;
  }
}

static void cache_clear(tok_tokenizer *t) {
  memset(t->cache, 0, sizeof(cache_ent) * CACHE_SLOTS);
  t->cache_count = 0;
  t->cache_keys.len = 0;
  t->cache_vals.len = 0;
}

/* at: the chunk's offset in the encoded text, which starts with `shift`
 * bytes of prefix that the caller did not write. */
static bool encode_chunk(tok_tokenizer *t, const uint8_t *s, size_t n, size_t at,
                         size_t shift, tok_ids *out, dg_status *st) {
  for (size_t i = 0; i < n; i++) {
    if (t->byte_id[s[i]] >= 0) continue;
    if (at + i < shift)
      return dg_fail(st, DG_ERR_INVALID,
                     "the prefix space (add_prefix_space) has no token in this vocabulary");
    return dg_fail(st, DG_ERR_INVALID,
                   "byte 0x%02x at offset %zu has no token in this vocabulary", s[i],
                   at + i - shift);
  }
  if (n > INT32_MAX / 2)
    return dg_fail(st, DG_ERR_INVALID, "a chunk of %zu bytes at offset %zu is too long to encode",
                   n, at - (at >= shift ? shift : 0));
  if (n == 1) {
    DG_VEC_PUSH(out, t->byte_id[s[0]]);
    return true;
  }
  if (t->ignore_merges) {
    int32_t id = whole_lookup(t, s, n);
    if (id >= 0) {
      DG_VEC_PUSH(out, id);
      return true;
    }
  }
  cache_ent *ce = NULL;
  uint64_t h = 0;
  if (n <= CACHE_MAX_KEY) {
    if (!t->cache) t->cache = dg_calloc(CACHE_SLOTS, sizeof(cache_ent));
    h = dg_hash_bytes(s, n, 0);
    ce = cache_find(t, s, n, h);
    if (ce->klen) {
      for (uint32_t k = 0; k < ce->vlen; k++) DG_VEC_PUSH(out, t->cache_vals.data[ce->voff + k]);
      return true;
    }
  }
  bpe_chunk(t, s, n);
  size_t first = out->len;
  for (int32_t i = 0; i >= 0; i = t->sym_next[i]) DG_VEC_PUSH(out, t->sym_id[i]);
  if (ce) {
    if (t->cache_count >= CACHE_MAX_ENTRIES) {
      cache_clear(t);
      ce = cache_find(t, s, n, h);
    }
    ce->h = h;
    ce->koff = (uint32_t)t->cache_keys.len;
    ce->klen = (uint32_t)n;
    ce->voff = (uint32_t)t->cache_vals.len;
    ce->vlen = (uint32_t)(out->len - first);
    for (size_t i = 0; i < n; i++) DG_VEC_PUSH(&t->cache_keys, s[i]);
    for (size_t i = first; i < out->len; i++) DG_VEC_PUSH(&t->cache_vals, out->data[i]);
    t->cache_count++;
  }
  return true;
}

bool tok_encode(tok_tokenizer *t, const void *text, size_t n, tok_ids *out,
                dg_status *st) {
  const uint8_t *s = text;
  size_t shift = 0;
  if (t->pre.add_prefix_space && n > 0 && s[0] != ' ') {
    t->prefixed.len = 0;
    DG_VEC_PUSH(&t->prefixed, ' ');
    for (size_t i = 0; i < n; i++) DG_VEC_PUSH(&t->prefixed, s[i]);
    s = t->prefixed.data;
    n++;
    shift = 1;
  }
  size_t start = out->len;
  for (size_t i = 0; i < n;) {
    size_t e = tok_pretok_next(&t->pre, s, n, i);
    if (!encode_chunk(t, s + i, e - i, i, shift, out, st)) {
      out->len = start;
      return false;
    }
    i = e;
  }
  return true;
}

bool tok_decode(const tok_tokenizer *t, const int32_t *ids, size_t n, dg_str *out,
                dg_status *st) {
  for (size_t i = 0; i < n; i++) {
    int32_t id = ids[i];
    if (id < 0 || id >= t->n_vocab)
      return dg_fail(st, DG_ERR_INVALID, "token %zu: id %d is out of range [0, %d)", i, id,
                     t->n_vocab);
    if (t->len[id] < 0)
      return dg_fail(st, DG_ERR_INVALID, "token %zu: id %d is not in the vocabulary", i, id);
    dg_str_putn(out, (const char *)t->bytes + t->off[id], (size_t)t->len[id]);
  }
  return true;
}

/* ---- the binary file ----------------------------------------------------- */

/* Layout (all integers little-endian int32):
 *   header[256]: magic, version, vocab_size V, n_merges M, n_specials,
 *                n_tok_bytes B, pretok kind, max_digits, add_prefix_space,
 *                ignore_merges, checksum lo, checksum hi, then zeros
 *   int32 len[V]   (-1: unused id)
 *   uint8 special[V]
 *   uint8 bytes[B]
 *   int32 merges[M][3]
 * The checksum is dg_hash_bytes over the whole file with its two fields zero. */
enum {
  TOK_MAGIC = 0x4B4F5444, /* "DTOK" */
  TOK_VERSION = 1,
  HDR_INTS = 256,
  HDR_BYTES = 4 * HDR_INTS,
  H_MAGIC = 0, H_VERSION, H_VOCAB, H_MERGES, H_SPECIALS, H_TOKBYTES, H_PRE_KIND,
  H_MAX_DIGITS, H_PREFIX_SPACE, H_IGNORE_MERGES, H_SUM_LO, H_SUM_HI, H_USED
};

static void put32(uint8_t *p, int32_t v) {
  uint32_t u = (uint32_t)v;
  p[0] = (uint8_t)u;
  p[1] = (uint8_t)(u >> 8);
  p[2] = (uint8_t)(u >> 16);
  p[3] = (uint8_t)(u >> 24);
}

static int32_t get32(const uint8_t *p) {
  uint32_t u = (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 |
               (uint32_t)p[3] << 24;
  int32_t v;
  memcpy(&v, &u, 4);
  return v;
}

/* The checksum fields are zeroed while hashing, then restored. */
static uint64_t file_checksum(uint8_t *buf, size_t n) {
  uint8_t saved[8];
  memcpy(saved, buf + 4 * H_SUM_LO, 8);
  memset(buf + 4 * H_SUM_LO, 0, 8);
  uint64_t h = dg_hash_bytes(buf, n, 0);
  memcpy(buf + 4 * H_SUM_LO, saved, 8);
  return h;
}

bool tok_save(const tok_tokenizer *t, const char *path, dg_status *st) {
  size_t V = (size_t)t->n_vocab, M = (size_t)t->n_merges;
  if (t->n_bytes > INT32_MAX)
    return dg_fail(st, DG_ERR_INVALID, "%s: %zu token bytes do not fit the format", path,
                   t->n_bytes);
  size_t total = HDR_BYTES + 4 * V + V + t->n_bytes + 12 * M;
  uint8_t *buf = dg_calloc(1, total);
  int32_t hdr[H_USED] = {0};
  hdr[H_MAGIC] = TOK_MAGIC;
  hdr[H_VERSION] = TOK_VERSION;
  hdr[H_VOCAB] = t->n_vocab;
  hdr[H_MERGES] = t->n_merges;
  hdr[H_SPECIALS] = t->n_specials;
  hdr[H_TOKBYTES] = (int32_t)t->n_bytes;
  hdr[H_PRE_KIND] = (int32_t)t->pre.kind;
  hdr[H_MAX_DIGITS] = t->pre.max_digits;
  hdr[H_PREFIX_SPACE] = t->pre.add_prefix_space;
  hdr[H_IGNORE_MERGES] = t->ignore_merges;
  for (int k = 0; k < H_USED; k++) put32(buf + 4 * k, hdr[k]);
  uint8_t *p = buf + HDR_BYTES;
  for (size_t i = 0; i < V; i++, p += 4) put32(p, t->len[i]);
  memcpy(p, t->special, V);
  p += V;
  if (t->n_bytes) memcpy(p, t->bytes, t->n_bytes);
  p += t->n_bytes;
  for (size_t i = 0; i < 3 * M; i++, p += 4) put32(p, t->merges[i]);
  DG_ASSERT((size_t)(p - buf) == total);
  uint64_t sum = file_checksum(buf, total);
  put32(buf + 4 * H_SUM_LO, (int32_t)(uint32_t)sum);
  put32(buf + 4 * H_SUM_HI, (int32_t)(uint32_t)(sum >> 32));
  bool ok = dg_write_file_atomic(path, buf, total, st);
  free(buf);
  return ok;
}

static tok_tokenizer *parse_file(const char *path, uint8_t *buf, size_t n, dg_status *st) {
  if (n < HDR_BYTES) {
    dg_fail(st, DG_ERR_PARSE, "%s: truncated: %zu bytes, the header alone needs %d", path,
            n, HDR_BYTES);
    return NULL;
  }
  int32_t h[HDR_INTS];
  for (int k = 0; k < HDR_INTS; k++) h[k] = get32(buf + 4 * k);
  if (h[H_MAGIC] != TOK_MAGIC) {
    dg_fail(st, DG_ERR_PARSE, "%s: not a dragon tokenizer file (magic 0x%08x, expected 0x%08x)",
            path, (unsigned)h[H_MAGIC], (unsigned)TOK_MAGIC);
    return NULL;
  }
  if (h[H_VERSION] != TOK_VERSION) {
    dg_fail(st, DG_ERR_PARSE, "%s: unsupported version %d (this build reads %d)", path,
            h[H_VERSION], TOK_VERSION);
    return NULL;
  }
  const struct {
    int field;
    int64_t lo, hi;
    const char *what;
  } ranges[] = {
      {H_VOCAB, 1, TOK_MAX_VOCAB, "vocabulary size"},
      {H_MERGES, 0, 4 * (int64_t)TOK_MAX_VOCAB, "merge count"},
      {H_SPECIALS, 0, TOK_MAX_SPECIALS, "special token count"},
      {H_TOKBYTES, 0, INT32_MAX, "token byte count"},
      {H_PRE_KIND, 0, TOK_PRE_COUNT - 1, "pre-tokenizer kind"},
      {H_MAX_DIGITS, 0, 64, "max digits"},
      {H_PREFIX_SPACE, 0, 1, "add_prefix_space flag"},
      {H_IGNORE_MERGES, 0, 1, "ignore_merges flag"},
  };
  for (size_t k = 0; k < DG_ARRAY_LEN(ranges); k++) {
    int32_t v = h[ranges[k].field];
    if (v < ranges[k].lo || v > ranges[k].hi) {
      dg_fail(st, DG_ERR_PARSE, "%s: header: %s %d is not in [%lld, %lld]", path,
              ranges[k].what, v, (long long)ranges[k].lo, (long long)ranges[k].hi);
      return NULL;
    }
  }
  for (int k = H_USED; k < HDR_INTS; k++)
    if (h[k] != 0) {
      dg_fail(st, DG_ERR_PARSE, "%s: header: reserved field %d is %d, not 0", path, k, h[k]);
      return NULL;
    }
  size_t V = (size_t)h[H_VOCAB], M = (size_t)h[H_MERGES], B = (size_t)h[H_TOKBYTES];
  uint64_t want = (uint64_t)HDR_BYTES + 5 * (uint64_t)V + B + 12 * (uint64_t)M;
  if (n < want) {
    dg_fail(st, DG_ERR_PARSE, "%s: truncated: %zu bytes, the header announces %llu", path,
            n, (unsigned long long)want);
    return NULL;
  }
  if (n > want) {
    dg_fail(st, DG_ERR_PARSE, "%s: %zu bytes of trailing data after the %llu announced",
            path, n - (size_t)want, (unsigned long long)want);
    return NULL;
  }
  uint64_t sum = (uint64_t)(uint32_t)h[H_SUM_HI] << 32 | (uint32_t)h[H_SUM_LO];
  if (file_checksum(buf, n) != sum) {
    dg_fail(st, DG_ERR_PARSE, "%s: checksum mismatch: the file is corrupt", path);
    return NULL;
  }
  int32_t *len = dg_malloc(sizeof(int32_t) * V);
  int32_t *merges = dg_malloc(sizeof(int32_t) * 3 * (M ? M : 1));
  const uint8_t *p = buf + HDR_BYTES;
  int64_t used = 0, specials = 0;
  for (size_t i = 0; i < V; i++, p += 4) {
    len[i] = get32(p);
    if (len[i] > 0) used += len[i];
  }
  const uint8_t *special = p;
  for (size_t i = 0; i < V; i++) specials += special[i] != 0;
  const uint8_t *bytes = special + V;
  p = bytes + B;
  for (size_t i = 0; i < 3 * M; i++, p += 4) merges[i] = get32(p);
  tok_tokenizer *t = NULL;
  if (specials != h[H_SPECIALS])
    dg_fail(st, DG_ERR_PARSE, "%s: %lld special tokens marked, the header says %d", path,
            (long long)specials, h[H_SPECIALS]);
  else if (used != (int64_t)B)
    dg_fail(st, DG_ERR_PARSE, "%s: token lengths add up to %lld bytes, the header says %zu",
            path, (long long)used, B);
  else {
    tok_spec sp = {
        .vocab_size = (int32_t)V,
        .tok_len = len,
        .tok_bytes = bytes,
        .n_tok_bytes = B,
        .is_special = special,
        .n_merges = (int32_t)M,
        .merges = merges,
        .pretok = {(tok_pre_kind)h[H_PRE_KIND], h[H_MAX_DIGITS], h[H_PREFIX_SPACE] != 0},
        .ignore_merges = h[H_IGNORE_MERGES] != 0,
    };
    t = tok_from_spec(&sp, path, st);
  }
  free(len);
  free(merges);
  return t;
}

tok_tokenizer *tok_load(const char *path, dg_status *st) {
  size_t n;
  char *buf = dg_read_file(path, &n, st);
  if (!buf) return NULL;
  tok_tokenizer *t = parse_file(path, (uint8_t *)buf, n, st);
  free(buf);
  return t;
}
