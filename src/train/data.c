/* data.c: SFT data: target segmentation by TSEL line type, examples files
 * (JSON lines) to tokens, the binary token shard (save, fully validated
 * load) and padded batches.
 *
 * Assumes a little-endian host (the shard, like the checkpoints, is written
 * in host order and says so in docs/training.md) and a tokenizer with the
 * six special tokens. Segments are assigned per token by the byte where the
 * token starts, so a target's tokenization is that of the whole text, not
 * of its lines one at a time. Does not compress shards (zstd is optional in
 * the design and not used) and does not split or shuffle: sft.c does.
 */
#include "dragon/train.h"

#include <errno.h>
#include <jansson.h>
#include <math.h>
#include <string.h>
#include <sys/stat.h>

/* ---- segments ------------------------------------------------------------ */

static const struct {
  const char *name;
} segtab[] = {
#define X(e, n, w) {n},
    TRAIN_SEG_LIST(X)
#undef X
};
_Static_assert(DG_ARRAY_LEN(segtab) == TRAIN_SEG_COUNT, "segment table");

const char *train_seg_name(train_seg s) {
  DG_ASSERT((int)s >= 0 && s < TRAIN_SEG_COUNT);
  return segtab[s].name;
}

int train_seg_from_name(const char *name) {
  for (int i = 0; i < TRAIN_SEG_COUNT; i++)
    if (strcmp(name, segtab[i].name) == 0) return i;
  return -1;
}

static bool starts(const char *s, size_t n, const char *p) {
  size_t k = strlen(p);
  return n >= k && memcmp(s, p, k) == 0;
}

train_seg train_line_segment(const char *line, size_t len) {
  if (starts(line, len, "why ")) return TRAIN_SEG_WHY;
  if (starts(line, len, "expect ")) return TRAIN_SEG_EXPECT;
  /* `t<N> ` edits, the header, `#` comments and anything unexpected: the
   * model has to write them all, at full weight. */
  return TRAIN_SEG_EDIT;
}

void train_text_segments(const char *text, size_t n, uint8_t *seg) {
  size_t i = 0;
  while (i < n) {
    const char *nl = memchr(text + i, '\n', n - i);
    size_t end = nl ? (size_t)(nl - text) + 1 : n;
    uint8_t s = (uint8_t)train_line_segment(text + i, (nl ? end - 1 : end) - i);
    memset(seg + i, s, end - i);
    i = end;
  }
}

/* ---- shards in memory ---------------------------------------------------- */

void train_shard_free(train_shard *s) {
  free(s->offsets);
  free(s->tokens);
  free(s->segs);
  memset(s, 0, sizeof *s);
}

void train_shard_append(train_shard *s, const int32_t *tokens, const uint8_t *segs, int64_t n) {
  DG_ASSERT(n >= 2);
  s->offsets = dg_realloc(s->offsets, sizeof(int64_t) * (size_t)(s->n_examples + 2));
  if (s->n_examples == 0) s->offsets[0] = 0;
  s->tokens = dg_realloc(s->tokens, sizeof(int32_t) * (size_t)(s->n_tokens + n));
  s->segs = dg_realloc(s->segs, (size_t)(s->n_tokens + n));
  memcpy(s->tokens + s->n_tokens, tokens, sizeof(int32_t) * (size_t)n);
  memcpy(s->segs + s->n_tokens, segs, (size_t)n);
  for (int64_t i = 0; i < n; i++) {
    DG_ASSERT(tokens[i] >= 0 && segs[i] < TRAIN_SEG_COUNT);
    if (tokens[i] >= s->vocab_size) s->vocab_size = tokens[i] + 1;
  }
  s->n_tokens += n;
  s->n_examples++;
  s->offsets[s->n_examples] = s->n_tokens;
}

/* ---- shard files --------------------------------------------------------- */

enum {
  HDR_INTS = 256,
  HDR_BYTES = HDR_INTS * 4,
  H_MAGIC = 0,
  H_VERSION = 1,
  H_NEX = 2,   /* u64, low word first */
  H_NTOK = 4,  /* u64 */
  H_VOCAB = 6,
  H_NSEG = 7,
  H_DATASUM = 8, /* u64 */
  H_HDRSUM = 255,
};
/* Bounds that keep every size computation far from overflow. */
#define SHARD_MAX_EXAMPLES (1ll << 40)
#define SHARD_MAX_TOKENS (1ll << 44)

static void put64(int32_t *h, int slot, uint64_t v) {
  h[slot] = (int32_t)(uint32_t)v;
  h[slot + 1] = (int32_t)(uint32_t)(v >> 32);
}
static uint64_t get64(const int32_t *h, int slot) {
  return (uint64_t)(uint32_t)h[slot] | (uint64_t)(uint32_t)h[slot + 1] << 32;
}
static int32_t header_sum(const int32_t *h) {
  return (int32_t)(uint32_t)dg_hash_bytes(h, 4 * (HDR_INTS - 1), 0x5348);
}
static uint64_t data_sum(const int64_t *off, int64_t ne, const int32_t *tok, const uint8_t *seg,
                         int64_t nt) {
  uint64_t h = dg_hash_bytes(off, sizeof(int64_t) * (size_t)(ne + 1), 0x5348);
  h = dg_hash_bytes(tok, sizeof(int32_t) * (size_t)nt, h);
  return dg_hash_bytes(seg, (size_t)nt, h);
}

bool train_shard_save(const train_shard *s, const char *path, dg_status *st) {
  int32_t h[HDR_INTS];
  memset(h, 0, sizeof h);
  int64_t zero = 0;
  const int64_t *off = s->n_examples ? s->offsets : &zero;
  h[H_MAGIC] = TRAIN_SHARD_MAGIC;
  h[H_VERSION] = TRAIN_SHARD_VERSION;
  put64(h, H_NEX, (uint64_t)s->n_examples);
  put64(h, H_NTOK, (uint64_t)s->n_tokens);
  h[H_VOCAB] = s->vocab_size;
  h[H_NSEG] = TRAIN_SEG_COUNT;
  put64(h, H_DATASUM, data_sum(off, s->n_examples, s->tokens, s->segs, s->n_tokens));
  h[H_HDRSUM] = header_sum(h);
  nn_file_part parts[4] = {
      {h, sizeof h},
      {off, sizeof(int64_t) * (size_t)(s->n_examples + 1)},
      {s->tokens, sizeof(int32_t) * (size_t)s->n_tokens},
      {s->segs, (size_t)s->n_tokens},
  };
  return nn_file_write_atomic(path, parts, 4, st);
}

bool train_shard_sniff(const char *path) {
  FILE *f = fopen(path, "rb");
  if (!f) return false;
  int32_t magic = 0;
  bool yes = fread(&magic, 4, 1, f) == 1 && magic == TRAIN_SHARD_MAGIC;
  fclose(f);
  return yes;
}

static bool read_all(FILE *f, void *dst, size_t n, const char *path, dg_status *st) {
  if (n && fread(dst, 1, n, f) != n) return dg_fail(st, DG_ERR_IO, "%s: read error", path);
  return true;
}

bool train_shard_load(train_shard *out, const char *path, dg_status *st) {
  FILE *f = fopen(path, "rb");
  if (!f) return dg_fail(st, DG_ERR_IO, "%s: %s", path, strerror(errno));
  train_shard s;
  memset(&s, 0, sizeof s);
  int32_t h[HDR_INTS];
  struct stat sb;
  if (fstat(fileno(f), &sb) != 0 || !S_ISREG(sb.st_mode)) {
    dg_fail(st, DG_ERR_IO, "%s: not a regular file", path);
    goto fail;
  }
  int64_t size = (int64_t)sb.st_size;
  if (size < HDR_BYTES) {
    dg_fail(st, DG_ERR_PARSE, "%s: truncated: %lld bytes, shorter than the %d-byte header", path,
            (long long)size, HDR_BYTES);
    goto fail;
  }
  if (!read_all(f, h, sizeof h, path, st)) goto fail;
  if (h[H_MAGIC] != TRAIN_SHARD_MAGIC) {
    dg_fail(st, DG_ERR_PARSE, "%s: not a dragon token shard (magic %d, expected %d)", path,
            (int)h[H_MAGIC], TRAIN_SHARD_MAGIC);
    goto fail;
  }
  if (h[H_VERSION] != TRAIN_SHARD_VERSION) {
    dg_fail(st, DG_ERR_PARSE, "%s: token shard version %d; this build reads version %d", path,
            (int)h[H_VERSION], TRAIN_SHARD_VERSION);
    goto fail;
  }
  if (h[H_HDRSUM] != header_sum(h)) {
    dg_fail(st, DG_ERR_PARSE, "%s: header checksum mismatch (corrupt header)", path);
    goto fail;
  }
  uint64_t ne = get64(h, H_NEX), nt = get64(h, H_NTOK);
  if (ne > (uint64_t)SHARD_MAX_EXAMPLES || nt > (uint64_t)SHARD_MAX_TOKENS || h[H_VOCAB] < 0 ||
      h[H_VOCAB] > TOK_MAX_VOCAB || h[H_NSEG] != TRAIN_SEG_COUNT) {
    dg_fail(st, DG_ERR_PARSE,
            "%s: header: %llu examples, %llu tokens, vocabulary %d, %d segments are out of range",
            path, (unsigned long long)ne, (unsigned long long)nt, (int)h[H_VOCAB], (int)h[H_NSEG]);
    goto fail;
  }
  int64_t want = HDR_BYTES + 8 * (int64_t)(ne + 1) + 5 * (int64_t)nt;
  if (size != want) {
    if (size < want)
      dg_fail(st, DG_ERR_PARSE, "%s: truncated: %lld bytes, expected %lld", path, (long long)size,
              (long long)want);
    else
      dg_fail(st, DG_ERR_PARSE, "%s: trailing data: %lld bytes, expected %lld", path,
              (long long)size, (long long)want);
    goto fail;
  }
  s.n_examples = (int64_t)ne;
  s.n_tokens = (int64_t)nt;
  s.vocab_size = h[H_VOCAB];
  s.offsets = malloc(sizeof(int64_t) * (size_t)(ne + 1));
  s.tokens = malloc(sizeof(int32_t) * (size_t)(nt ? nt : 1));
  s.segs = malloc((size_t)(nt ? nt : 1));
  if (!s.offsets || !s.tokens || !s.segs) {
    dg_fail(st, DG_ERR_RUNTIME, "%s: out of memory for %llu tokens", path, (unsigned long long)nt);
    goto fail;
  }
  if (!read_all(f, s.offsets, sizeof(int64_t) * (size_t)(ne + 1), path, st) ||
      !read_all(f, s.tokens, sizeof(int32_t) * (size_t)nt, path, st) ||
      !read_all(f, s.segs, (size_t)nt, path, st))
    goto fail;
  if (data_sum(s.offsets, s.n_examples, s.tokens, s.segs, s.n_tokens) != get64(h, H_DATASUM)) {
    dg_fail(st, DG_ERR_PARSE, "%s: data checksum mismatch (corrupt data)", path);
    goto fail;
  }
  /* The checksum catches accidents; these catch a well-formed lie. */
  if (s.offsets[0] != 0 || s.offsets[s.n_examples] != s.n_tokens) {
    dg_fail(st, DG_ERR_PARSE, "%s: example offsets do not span the %lld tokens", path,
            (long long)s.n_tokens);
    goto fail;
  }
  /* offsets[i] lies in [0, n_tokens] by induction, so offsets[i] + 2
   * cannot overflow whatever offsets[i + 1] holds (a difference could) */
  for (int64_t i = 0; i < s.n_examples; i++) {
    int64_t n;
    if (s.offsets[i + 1] > s.n_tokens) {
      dg_fail(st, DG_ERR_PARSE, "%s: example %lld ends at offset %lld, beyond the %lld tokens",
              path, (long long)i, (long long)s.offsets[i + 1], (long long)s.n_tokens);
      goto fail;
    }
    if (s.offsets[i + 1] < s.offsets[i] + 2) {
      if (__builtin_sub_overflow(s.offsets[i + 1], s.offsets[i], &n))
        dg_fail(st, DG_ERR_PARSE, "%s: example %lld: offsets %lld .. %lld (offsets must rise by >= 2)",
                path, (long long)i, (long long)s.offsets[i], (long long)s.offsets[i + 1]);
      else
        dg_fail(st, DG_ERR_PARSE, "%s: example %lld has %lld tokens (offsets must rise by >= 2)",
                path, (long long)i, (long long)n);
      goto fail;
    }
  }
  for (int64_t i = 0; i < s.n_tokens; i++) {
    if (s.tokens[i] < 0 || s.tokens[i] >= s.vocab_size) {
      dg_fail(st, DG_ERR_PARSE, "%s: token %lld has id %u, outside the vocabulary of %d", path,
              (long long)i, (unsigned)s.tokens[i], (int)s.vocab_size);
      goto fail;
    }
    if (s.segs[i] >= TRAIN_SEG_COUNT) {
      dg_fail(st, DG_ERR_PARSE, "%s: token %lld has segment id %d (there are %d)", path,
              (long long)i, (int)s.segs[i], TRAIN_SEG_COUNT);
      goto fail;
    }
  }
  fclose(f);
  *out = s;
  return true;
fail:
  fclose(f);
  train_shard_free(&s);
  return false;
}

/* ---- examples ------------------------------------------------------------ */

static bool special(tok_tokenizer *tok, const char *name, int32_t *id, dg_status *st) {
  *id = tok_special(tok, name);
  if (*id < 0) return dg_fail(st, DG_ERR_INVALID, "the tokenizer has no %s token", name);
  return true;
}

typedef struct {
  DG_VEC(int32_t) ids;
  DG_VEC(uint8_t) segs;
} seq;

static void seq_push(seq *q, int32_t id, train_seg s) {
  DG_VEC_PUSH(&q->ids, id);
  DG_VEC_PUSH(&q->segs, (uint8_t)s);
}

static bool seq_text(seq *q, tok_tokenizer *tok, const char *text, bool by_line, dg_status *st) {
  size_t n = strlen(text);
  tok_ids ids = {0};
  if (!tok_encode(tok, text, n, &ids, st)) return false;
  uint8_t *bseg = NULL;
  if (by_line) {
    bseg = dg_malloc(n ? n : 1);
    train_text_segments(text, n, bseg);
  }
  size_t at = 0;
  for (size_t i = 0; i < ids.len; i++) {
    size_t len = 0;
    const uint8_t *b = tok_token_bytes(tok, ids.data[i], &len);
    DG_ASSERT(b && at < n);
    seq_push(q, ids.data[i], by_line ? (train_seg)bseg[at] : TRAIN_SEG_PROMPT);
    at += len;
  }
  DG_ASSERT(at == n); /* encode/decode is lossless */
  free(bseg);
  tok_ids_free(&ids);
  return true;
}

bool train_example_tokenize(tok_tokenizer *tok, const char *prompt, const char *prior,
                            const char *target, train_shard *out, dg_status *st) {
  int32_t end;
  if (!special(tok, TOK_END, &end, st)) return false;
  /* the prompt is laid out once, as sampling lays it out */
  tok_ids head = {0};
  if (!train_prompt_encode(tok, prompt, prior, &head, st)) {
    tok_ids_free(&head);
    return false;
  }
  seq q = {0};
  for (size_t i = 0; i < head.len; i++) seq_push(&q, head.data[i], TRAIN_SEG_PROMPT);
  tok_ids_free(&head);
  bool ok = seq_text(&q, tok, target, true, st);
  if (ok) {
    seq_push(&q, end, TRAIN_SEG_EDIT);
    train_shard_append(out, q.ids.data, q.segs.data, (int64_t)q.ids.len);
  }
  DG_VEC_FREE(&q.ids);
  DG_VEC_FREE(&q.segs);
  return ok;
}

/* One example line's fields, checked. */
typedef struct {
  const char *prompt, *prior, *target;
} example_fields;

static bool string_field(json_t *o, const char *key, bool required, const char **out,
                         const char *where, dg_status *st) {
  json_t *v = json_object_get(o, key);
  *out = NULL;
  if (!v) {
    if (required) return dg_fail(st, DG_ERR_PARSE, "%s: missing \"%s\"", where, key);
    return true;
  }
  if (!json_is_string(v)) return dg_fail(st, DG_ERR_PARSE, "%s: \"%s\" must be a string", where, key);
  *out = json_string_value(v);
  return true;
}

static bool example_parse(json_t *o, const char *where, example_fields *ex, dg_status *st) {
  if (!json_is_object(o)) return dg_fail(st, DG_ERR_PARSE, "%s: an example must be a JSON object", where);
  const char *kind;
  if (!string_field(o, "prompt", true, &ex->prompt, where, st) ||
      !string_field(o, "target", true, &ex->target, where, st) ||
      !string_field(o, "prior", false, &ex->prior, where, st) ||
      !string_field(o, "kind", false, &kind, where, st))
    return false;
  bool refine = kind && strcmp(kind, "refine") == 0;
  if (kind && !refine && strcmp(kind, "construct") != 0)
    return dg_fail(st, DG_ERR_PARSE, "%s: \"kind\" must be \"construct\" or \"refine\", not \"%s\"",
                   where, kind);
  if (refine && !ex->prior)
    return dg_fail(st, DG_ERR_PARSE, "%s: a refine example needs \"prior\" (the prior graph)", where);
  if (!refine && ex->prior)
    return dg_fail(st, DG_ERR_PARSE, "%s: \"prior\" is only for refine examples", where);
  json_t *w = json_object_get(o, "weights_by_segment");
  if (w) {
    if (!json_is_object(w))
      return dg_fail(st, DG_ERR_PARSE, "%s: \"weights_by_segment\" must be an object", where);
    const char *key;
    json_t *val;
    json_object_foreach(w, key, val) {
      if (train_seg_from_name(key) < 0)
        return dg_fail(st, DG_ERR_PARSE, "%s: weights_by_segment: unknown segment \"%s\"", where, key);
      if (!json_is_number(val) || !isfinite(json_number_value(val)) || json_number_value(val) < 0)
        return dg_fail(st, DG_ERR_PARSE, "%s: weights_by_segment.%s must be a number >= 0", where, key);
    }
  }
  return true;
}

/* Calls fn on every non-blank line's example; errors name path:line. */
static bool examples_each(const char *path, bool (*fn)(const example_fields *, void *, dg_status *),
                          void *ctx, dg_status *st) {
  size_t len;
  char *text = dg_read_text(path, 0, &len, st);
  if (!text) return false;
  bool ok = true;
  int lineno = 0;
  for (size_t i = 0; i < len && ok;) {
    const char *nl = memchr(text + i, '\n', len - i);
    size_t end = nl ? (size_t)(nl - text) : len;
    lineno++;
    size_t j = i;
    while (j < end && (text[j] == ' ' || text[j] == '\t' || text[j] == '\r')) j++;
    if (j < end) {
      char where[300];
      snprintf(where, sizeof where, "%s:%d", path, lineno);
      json_error_t err;
      json_t *o = json_loadb(text + i, end - i, JSON_REJECT_DUPLICATES, &err);
      if (!o) {
        ok = dg_fail(st, DG_ERR_PARSE, "%s:%d: %s", where, err.column, err.text);
      } else {
        example_fields ex;
        ok = example_parse(o, where, &ex, st) && fn(&ex, ctx, st);
        if (!ok && st && !strstr(st->msg, where)) dg_status_prefix(st, "%s", where);
        json_decref(o);
      }
    }
    i = end + 1;
  }
  free(text);
  return ok;
}

char *train_plan_first(const char *graph) {
  size_t n = strlen(graph);
  const char *nl = memchr(graph, '\n', n);
  size_t head = nl ? (size_t)(nl - graph) + 1 : n;
  dg_str out, rest;
  dg_str_init(&out);
  dg_str_init(&rest);
  dg_str_putn(&out, graph, head);
  if (head < n && graph[head - 1] != '\n') dg_str_putc(&out, '\n');
  for (size_t i = head; i < n;) {
    const char *e = memchr(graph + i, '\n', n - i);
    size_t end = e ? (size_t)(e - graph) + 1 : n;
    bool expect = end - i >= 7 && memcmp(graph + i, "expect ", 7) == 0;
    dg_str *to = expect ? &out : &rest;
    dg_str_putn(to, graph + i, end - i);
    if (expect && graph[end - 1] != '\n') dg_str_putc(to, '\n');
    i = end;
  }
  dg_str_putn(&out, rest.s ? rest.s : "", rest.len);
  dg_str_free(&rest);
  return dg_str_take(&out);
}

typedef struct {
  tok_tokenizer *tok;
  bool plan_first;
  train_shard *out;
} tokenize_ctx;

static bool tokenize_one(const example_fields *ex, void *ctx, dg_status *st) {
  tokenize_ctx *c = ctx;
  if (!c->plan_first) return train_example_tokenize(c->tok, ex->prompt, ex->prior, ex->target, c->out, st);
  char *target = train_plan_first(ex->target);
  bool ok = train_example_tokenize(c->tok, ex->prompt, ex->prior, target, c->out, st);
  free(target);
  return ok;
}

bool train_examples_load(const char *path, tok_tokenizer *tok, bool plan_first, train_shard *out,
                         dg_status *st) {
  train_shard s;
  memset(&s, 0, sizeof s);
  tokenize_ctx c = {tok, plan_first, &s};
  if (!examples_each(path, tokenize_one, &c, st)) {
    train_shard_free(&s);
    return false;
  }
  if (s.n_examples == 0) {
    train_shard_free(&s);
    return dg_fail(st, DG_ERR_INVALID, "%s: no examples", path);
  }
  s.vocab_size = tok_vocab_size(tok);
  *out = s;
  return true;
}

static bool corpus_one(const example_fields *ex, void *ctx, dg_status *st) {
  (void)st;
  dg_str *b = ctx;
  dg_str_puts(b, ex->prompt);
  dg_str_putc(b, '\n');
  if (ex->prior) {
    dg_str_puts(b, ex->prior);
    dg_str_putc(b, '\n');
  }
  dg_str_puts(b, ex->target);
  dg_str_putc(b, '\n');
  return true;
}

char *train_examples_corpus(const char *path, size_t *len, dg_status *st) {
  dg_str b;
  dg_str_init(&b);
  if (!examples_each(path, corpus_one, &b, st)) {
    dg_str_free(&b);
    return NULL;
  }
  *len = b.len;
  return dg_str_take(&b);
}

/* ---- batches ------------------------------------------------------------- */

void train_batch_init(train_batch *b, int cap_B, int cap_T) {
  DG_ASSERT(cap_B >= 1 && cap_T >= 1);
  memset(b, 0, sizeof *b);
  b->cap_B = cap_B;
  b->cap_T = cap_T;
  size_t n = (size_t)cap_B * cap_T;
  b->inputs = dg_calloc(n, sizeof(int32_t));
  b->targets = dg_calloc(n, sizeof(int32_t));
  b->weights = dg_calloc(n, sizeof(float));
}

void train_batch_free(train_batch *b) {
  free(b->inputs);
  free(b->targets);
  free(b->weights);
  memset(b, 0, sizeof *b);
}

void train_batch_fill(train_batch *b, const train_shard *s, const int64_t *idx, int n,
                      const float *seg_weights, int32_t pad_id) {
  DG_ASSERT(n >= 1 && n <= b->cap_B);
  int T = 1;
  for (int r = 0; r < n; r++) {
    int64_t len = s->offsets[idx[r] + 1] - s->offsets[idx[r]] - 1;
    DG_ASSERT(len >= 1 && len <= b->cap_T);
    if (len > T) T = (int)len;
  }
  b->B = n;
  b->T = T;
  b->n_real = 0;
  for (int r = 0; r < n; r++) {
    const int32_t *tok = s->tokens + s->offsets[idx[r]];
    const uint8_t *seg = s->segs + s->offsets[idx[r]];
    int len = (int)(s->offsets[idx[r] + 1] - s->offsets[idx[r]] - 1);
    int32_t *in = b->inputs + (size_t)r * T, *tg = b->targets + (size_t)r * T;
    float *w = b->weights + (size_t)r * T;
    for (int t = 0; t < T; t++) {
      if (t < len) {
        in[t] = tok[t];
        tg[t] = tok[t + 1];
        w[t] = seg_weights[seg[t + 1]];
      } else {
        in[t] = tg[t] = pad_id;
        w[t] = 0.0f;
      }
    }
    b->n_real += len;
  }
}
