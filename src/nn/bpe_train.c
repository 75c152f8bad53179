/* bpe_train.c: training a byte-level BPE vocabulary on a corpus.
 *
 * The standard algorithm over unique chunks: the corpus is cut by the DRAGON
 * pre-tokenizer, equal chunks are counted once with their frequency, and the
 * most frequent adjacent pair (ties: smallest left id, then smallest right
 * id) is merged into a new token, again and again. Pair counts are kept up
 * to date incrementally: each pair knows the chunks it occurs in, a merge
 * touches only those, and a max-heap with lazy re-insertion picks the next
 * pair. No randomness: one corpus, one vocabulary.
 *
 * Produces ids 0..255 for the bytes, 256.. for the merges in rank order,
 * then the special tokens; the result goes through tok_from_spec like any
 * loaded vocabulary. Does not look at special-token spellings in the corpus
 * (they are ordinary text there).
 */
#include "dragon/tokenizer.h"

#include <stdlib.h>
#include <string.h>

static const char *const fixed_specials[] = {TOK_KERNEL, TOK_PRIOR, TOK_GRAPH,
                                             TOK_END,    TOK_PAD,   TOK_BOS};

typedef struct {
  uint64_t h;
  size_t off; /* into the corpus */
  uint32_t len;
  int64_t count; /* 0: empty slot */
} chunk_ent;

typedef struct {
  int32_t *sym;
  int32_t len;
  int32_t stamp; /* last merge that visited this word, plus one */
  int64_t count;
} word;

typedef struct {
  int32_t a, b;
  int64_t count;
  int32_t *words; /* may repeat a word; visits are deduplicated by stamp */
  uint32_t nw, cw;
  int32_t last_word;
  bool banned;
} pair;

typedef struct {
  int64_t count;
  int32_t a, b, idx;
} heap_ent;

typedef struct {
  DG_VEC(word) words;
  DG_VEC(pair) pairs;
  uint64_t *pkey; /* pair map: (a << 32 | b) -> index; ~0 empty */
  int32_t *pval;
  size_t pmask, pcount;
  DG_VEC(heap_ent) heap;
  DG_VEC(int32_t) fresh; /* pairs created by the current merge */
  int64_t min_freq;
} trainer;

static uint64_t mix64(uint64_t x) {
  x ^= x >> 30;
  x *= 0xbf58476d1ce4e5b9ull;
  x ^= x >> 27;
  x *= 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

/* ---- counting chunks ----------------------------------------------------- */

static void chunks_grow(chunk_ent **tab, size_t *mask) {
  size_t old = *mask + 1, cap = 2 * old;
  chunk_ent *nt = dg_calloc(cap, sizeof(chunk_ent));
  for (size_t i = 0; i < old; i++) {
    chunk_ent e = (*tab)[i];
    if (!e.count) continue;
    size_t j = e.h & (cap - 1);
    while (nt[j].count) j = (j + 1) & (cap - 1);
    nt[j] = e;
  }
  free(*tab);
  *tab = nt;
  *mask = cap - 1;
}

/* Unique chunks of two or more bytes with their counts (single bytes hold no
 * pair and never change). */
static chunk_ent *count_chunks(const uint8_t *s, size_t n, size_t *n_slots) {
  tok_pretok pre = {TOK_PRE_DRAGON, 3, false};
  size_t mask = 1023, used = 0;
  chunk_ent *tab = dg_calloc(mask + 1, sizeof(chunk_ent));
  for (size_t i = 0; i < n;) {
    size_t e = tok_pretok_next(&pre, s, n, i);
    size_t len = e - i;
    if (len >= 2 && len <= TOK_MAX_TOKEN_BYTES) {
      uint64_t h = dg_hash_bytes(s + i, len, 0);
      size_t j = h & mask;
      while (tab[j].count &&
             !(tab[j].h == h && tab[j].len == len && memcmp(s + tab[j].off, s + i, len) == 0))
        j = (j + 1) & mask;
      if (tab[j].count) tab[j].count++;
      else {
        tab[j] = (chunk_ent){h, i, (uint32_t)len, 1};
        if (++used * 2 > mask + 1) chunks_grow(&tab, &mask);
      }
    }
    i = e;
  }
  *n_slots = mask + 1;
  return tab;
}

/* ---- pairs --------------------------------------------------------------- */

static void pmap_grow(trainer *tr) {
  size_t old = tr->pkey ? tr->pmask + 1 : 0, cap = old ? 2 * old : 1024;
  uint64_t *nk = dg_malloc(sizeof(uint64_t) * cap);
  int32_t *nv = dg_malloc(sizeof(int32_t) * cap);
  memset(nk, 0xff, sizeof(uint64_t) * cap);
  for (size_t i = 0; i < old; i++) {
    if (tr->pkey[i] == UINT64_MAX) continue;
    size_t j = mix64(tr->pkey[i]) & (cap - 1);
    while (nk[j] != UINT64_MAX) j = (j + 1) & (cap - 1);
    nk[j] = tr->pkey[i];
    nv[j] = tr->pval[i];
  }
  free(tr->pkey);
  free(tr->pval);
  tr->pkey = nk;
  tr->pval = nv;
  tr->pmask = cap - 1;
}

static int32_t pair_get(trainer *tr, int32_t a, int32_t b) {
  uint64_t key = (uint64_t)(uint32_t)a << 32 | (uint32_t)b;
  size_t j = mix64(key) & tr->pmask;
  while (tr->pkey[j] != UINT64_MAX && tr->pkey[j] != key) j = (j + 1) & tr->pmask;
  if (tr->pkey[j] != UINT64_MAX) return tr->pval[j];
  int32_t idx = (int32_t)tr->pairs.len;
  DG_VEC_PUSH(&tr->pairs, ((pair){.a = a, .b = b, .last_word = -1}));
  DG_VEC_PUSH(&tr->fresh, idx);
  tr->pkey[j] = key;
  tr->pval[j] = idx;
  if (++tr->pcount * 2 > tr->pmask + 1) pmap_grow(tr);
  return idx;
}

static void pair_add(trainer *tr, int32_t a, int32_t b, int64_t c, int32_t w) {
  int32_t idx = pair_get(tr, a, b); /* may move tr->pairs.data */
  pair *p = &tr->pairs.data[idx];
  p->count += c;
  if (c > 0 && p->last_word != w) {
    if (p->nw == p->cw) {
      p->cw = p->cw ? 2 * p->cw : 4;
      p->words = dg_realloc(p->words, sizeof(int32_t) * p->cw);
    }
    p->words[p->nw++] = w;
    p->last_word = w;
  }
}

/* ---- the heap: most frequent first, then smallest (a, b) ------------------ */

static bool heap_before(heap_ent x, heap_ent y) {
  if (x.count != y.count) return x.count > y.count;
  if (x.a != y.a) return x.a < y.a;
  return x.b < y.b;
}

static void heap_push(trainer *tr, int32_t idx) {
  const pair *p = &tr->pairs.data[idx];
  DG_VEC_PUSH(&tr->heap, ((heap_ent){p->count, p->a, p->b, idx}));
  heap_ent *h = tr->heap.data;
  for (size_t i = tr->heap.len - 1; i > 0 && heap_before(h[i], h[(i - 1) / 2]);
       i = (i - 1) / 2) {
    heap_ent t = h[i];
    h[i] = h[(i - 1) / 2];
    h[(i - 1) / 2] = t;
  }
}

static heap_ent heap_pop(trainer *tr) {
  heap_ent *h = tr->heap.data, top = h[0];
  size_t n = --tr->heap.len, i = 0;
  h[0] = h[n];
  for (;;) {
    size_t l = 2 * i + 1, r = l + 1, m = i;
    if (l < n && heap_before(h[l], h[m])) m = l;
    if (r < n && heap_before(h[r], h[m])) m = r;
    if (m == i) break;
    heap_ent t = h[i];
    h[i] = h[m];
    h[m] = t;
    i = m;
  }
  return top;
}

/* ---- merging ------------------------------------------------------------- */

/* Replaces every (a, b) in word w, left to right, by z, and moves the pair
 * counts of the neighbours: (x, a) becomes (x, z), (b, y) becomes (z, y). */
static void merge_word(trainer *tr, int32_t w, int32_t a, int32_t b, int32_t z) {
  word *wd = &tr->words.data[w];
  int32_t *s = wd->sym, n = wd->len, o = 0;
  int64_t c = wd->count;
  for (int32_t i = 0; i < n;) {
    if (i + 1 < n && s[i] == a && s[i + 1] == b) {
      if (o > 0) {
        pair_add(tr, s[o - 1], a, -c, w);
        pair_add(tr, s[o - 1], z, c, w);
      }
      if (i + 2 < n) {
        pair_add(tr, b, s[i + 2], -c, w);
        pair_add(tr, z, s[i + 2], c, w);
      }
      pair_add(tr, a, b, -c, w);
      s[o++] = z;
      i += 2;
    } else {
      s[o++] = s[i++];
    }
  }
  wd->len = o;
}

static void trainer_free(trainer *tr) {
  for (size_t i = 0; i < tr->pairs.len; i++) free(tr->pairs.data[i].words);
  DG_VEC_FREE(&tr->pairs);
  DG_VEC_FREE(&tr->words);
  DG_VEC_FREE(&tr->heap);
  DG_VEC_FREE(&tr->fresh);
  free(tr->pkey);
  free(tr->pval);
}

static void push_fresh(trainer *tr) {
  for (size_t k = 0; k < tr->fresh.len; k++) {
    int32_t idx = tr->fresh.data[k];
    if (tr->pairs.data[idx].count >= tr->min_freq) heap_push(tr, idx);
  }
  tr->fresh.len = 0;
}

tok_tokenizer *tok_train(const char *corpus, size_t n, int vocab_size,
                         const tok_train_opts *opts, dg_status *st) {
  tok_train_opts defaults = {0};
  if (!opts) opts = &defaults;
  int n_extra = opts->n_extra_specials;
  int n_fixed = (int)DG_ARRAY_LEN(fixed_specials);
  if (n_extra < 0 || n_extra > TOK_MAX_SPECIALS - n_fixed || (n_extra && !opts->extra_specials)) {
    dg_fail(st, DG_ERR_INVALID, "tok_train: %d extra special tokens", n_extra);
    return NULL;
  }
  int n_specials = n_fixed + n_extra;
  if (vocab_size < 256 + n_specials || vocab_size > TOK_MAX_VOCAB) {
    dg_fail(st, DG_ERR_INVALID,
            "tok_train: vocabulary size %d is not in [%d, %d] (256 bytes + %d specials)",
            vocab_size, 256 + n_specials, TOK_MAX_VOCAB, n_specials);
    return NULL;
  }
  for (int k = 0; k < n_extra; k++) {
    const char *e = opts->extra_specials[k];
    size_t len = e ? strlen(e) : 0;
    if (len == 0 || len > TOK_MAX_TOKEN_BYTES) {
      dg_fail(st, DG_ERR_INVALID, "tok_train: extra special token %d is empty or too long", k);
      return NULL;
    }
  }
  int max_merges = vocab_size - 256 - n_specials;

  trainer tr = {0};
  tr.min_freq = opts->min_frequency > 0 ? opts->min_frequency : 2;
  const uint8_t *s = (const uint8_t *)corpus;
  size_t n_slots;
  chunk_ent *chunks = count_chunks(s, n, &n_slots);
  size_t total_sym = 0;
  for (size_t i = 0; i < n_slots; i++) total_sym += chunks[i].count ? chunks[i].len : 0;
  int32_t *sym_store = dg_malloc(sizeof(int32_t) * (total_sym ? total_sym : 1));
  size_t used = 0;
  /* Word order does not matter: counts are sums and ties break on ids. */
  for (size_t i = 0; i < n_slots; i++) {
    if (!chunks[i].count) continue;
    word wd = {sym_store + used, (int32_t)chunks[i].len, 0, chunks[i].count};
    for (uint32_t k = 0; k < chunks[i].len; k++) wd.sym[k] = s[chunks[i].off + k];
    used += chunks[i].len;
    DG_VEC_PUSH(&tr.words, wd);
  }
  free(chunks);
  pmap_grow(&tr);
  for (size_t w = 0; w < tr.words.len; w++) {
    word *wd = &tr.words.data[w];
    for (int32_t k = 0; k + 1 < wd->len; k++)
      pair_add(&tr, wd->sym[k], wd->sym[k + 1], wd->count, (int32_t)w);
  }
  push_fresh(&tr);

  /* Token table: bytes, then one entry per merge. */
  DG_VEC(int32_t) tlen = {0};
  DG_VEC(int64_t) toff = {0};
  DG_VEC(uint8_t) tbytes = {0};
  DG_VEC(int32_t) merges = {0};
  for (int b = 0; b < 256; b++) {
    DG_VEC_PUSH(&tlen, 1);
    DG_VEC_PUSH(&toff, (int64_t)b);
    DG_VEC_PUSH(&tbytes, (uint8_t)b);
  }
  dg_progress prog;
  if (opts->progress) dg_progress_init(&prog, "bpe merges", max_merges);
  int n_merges = 0;
  while (n_merges < max_merges && tr.heap.len > 0) {
    heap_ent e = heap_pop(&tr);
    pair *p = &tr.pairs.data[e.idx];
    if (p->banned) continue;
    if (p->count != e.count) {
      if (p->count >= tr.min_freq) heap_push(&tr, e.idx); /* lazy update */
      continue;
    }
    if (e.count < tr.min_freq) break;
    int32_t a = p->a, b = p->b, z = 256 + n_merges;
    if (tlen.data[a] + tlen.data[b] > TOK_MAX_TOKEN_BYTES) {
      p->banned = true;
      continue;
    }
    DG_VEC_PUSH(&merges, a);
    DG_VEC_PUSH(&merges, b);
    DG_VEC_PUSH(&merges, z);
    DG_VEC_PUSH(&toff, (int64_t)tbytes.len);
    DG_VEC_PUSH(&tlen, tlen.data[a] + tlen.data[b]);
    for (int32_t k = 0; k < tlen.data[a]; k++) DG_VEC_PUSH(&tbytes, tbytes.data[toff.data[a] + k]);
    for (int32_t k = 0; k < tlen.data[b]; k++) DG_VEC_PUSH(&tbytes, tbytes.data[toff.data[b] + k]);
    n_merges++;
    /* The pair's word list is not touched while we walk it: only pairs with
     * z gain words, and (a, b) does not contain z. */
    int32_t *ws = p->words;
    uint32_t nw = p->nw;
    for (uint32_t k = 0; k < nw; k++) {
      word *wd = &tr.words.data[ws[k]];
      if (wd->stamp == n_merges) continue;
      wd->stamp = n_merges;
      merge_word(&tr, ws[k], a, b, z);
    }
    p = &tr.pairs.data[e.idx];
    DG_ASSERT(p->count == 0);
    free(p->words);
    p->words = NULL;
    p->nw = p->cw = 0;
    push_fresh(&tr);
    if (opts->progress) dg_progress_step(&prog, 1, NULL);
  }
  if (opts->progress) dg_progress_done(&prog);
  trainer_free(&tr);
  free(sym_store);

  /* Specials after the merges, then the spec that tok_from_spec checks. */
  DG_VEC(uint8_t) flags = {0};
  for (size_t i = 0; i < tlen.len; i++) DG_VEC_PUSH(&flags, 0);
  for (int k = 0; k < n_specials; k++) {
    const char *name = k < n_fixed ? fixed_specials[k] : opts->extra_specials[k - n_fixed];
    size_t len = strlen(name);
    DG_VEC_PUSH(&tlen, (int32_t)len);
    for (size_t q = 0; q < len; q++) DG_VEC_PUSH(&tbytes, (uint8_t)name[q]);
    DG_VEC_PUSH(&flags, 1);
  }
  tok_spec sp = {
      .vocab_size = (int32_t)tlen.len,
      .tok_len = tlen.data,
      .tok_bytes = tbytes.data,
      .n_tok_bytes = tbytes.len,
      .is_special = flags.data,
      .n_merges = n_merges,
      .merges = merges.data,
      .pretok = {TOK_PRE_DRAGON, 3, false},
      .ignore_merges = false,
  };
  tok_tokenizer *t = tok_from_spec(&sp, "tok_train", st);
  DG_VEC_FREE(&tlen);
  DG_VEC_FREE(&toff);
  DG_VEC_FREE(&tbytes);
  DG_VEC_FREE(&merges);
  DG_VEC_FREE(&flags);
  return t;
}
