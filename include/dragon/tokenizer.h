/* tokenizer.h: the byte-level BPE tokenizer of the model module.
 *
 * A tokenizer maps any byte string to token ids and back, exactly. Text is
 * first cut into chunks by a pre-tokenizer (merges never cross a chunk
 * boundary), each chunk starts as one token per byte, and merges are applied
 * lowest rank first. Special tokens (`<|kernel|>`, `<|prior|>`, `<|graph|>`,
 * `<|end|>`, `<|pad|>`, `<|bos|>`) mark the segments of the model's text;
 * they come only from tok_special, never from encoding text that happens to
 * spell them, so tok_decode(tok_encode(x)) == x for every byte string x.
 *
 * Vocabularies come from three places, all checked by one validator
 * (tok_from_spec): tok_train (BPE trained here: ids 0..255 are the bytes,
 * then the merges in rank order, then the specials), tok_load (our binary
 * file, written by tok_save) and tok_load_hf (a Hugging Face tokenizer.json
 * of the byte-level BPE kind, with its ids as in the file).
 *
 * A tokenizer caches chunk encodings, so tok_encode changes it: one
 * tokenizer must not be used by several threads at once (load one each).
 * docs/tokenizer.md describes the pre-tokenizers and the file format.
 */
#ifndef DRAGON_TOKENIZER_H
#define DRAGON_TOKENIZER_H

#include "dragon/base.h"

typedef struct tok_tokenizer tok_tokenizer;

/* Token ids, growable like DG_VEC(int32_t). */
typedef struct {
  int32_t *data;
  size_t len, cap;
} tok_ids;
void tok_ids_free(tok_ids *v);

/* The special tokens every trained tokenizer has, in id order. */
#define TOK_KERNEL "<|kernel|>"
#define TOK_PRIOR "<|prior|>"
#define TOK_GRAPH "<|graph|>"
#define TOK_END "<|end|>"
#define TOK_PAD "<|pad|>"
#define TOK_BOS "<|bos|>"

/* Limits that every vocabulary, and every file, must respect. */
enum {
  TOK_MAX_VOCAB = 1 << 24,
  TOK_MAX_TOKEN_BYTES = 4096,
  TOK_MAX_SPECIALS = 1 << 16,
};

/* ---- pre-tokenization ---------------------------------------------------- */

typedef enum {
  TOK_PRE_DRAGON, /* ours, for kernel text and TSEL (docs/tokenizer.md) */
  TOK_PRE_GPT2,   /* the GPT-2 regex, ASCII-exact, non-ASCII bytes = letters */
  TOK_PRE_LLAMA3, /* the Llama 3 regex, same approximation */
  TOK_PRE_NONE,   /* the whole text is one chunk */
  TOK_PRE_COUNT
} tok_pre_kind;

typedef struct {
  tok_pre_kind kind;
  int max_digits;        /* digits per chunk: DRAGON 3; LLAMA3 3 (Qwen2: 1) */
  bool add_prefix_space; /* HF ByteLevel: a space before text not starting with one */
} tok_pretok;

/* The end of the chunk that starts at s[i] (i < n); always > i. */
size_t tok_pretok_next(const tok_pretok *p, const uint8_t *s, size_t n,
                       size_t i);
const char *tok_pre_kind_name(tok_pre_kind k);

/* ---- building and inspecting --------------------------------------------- */

/* A vocabulary in plain arrays: what the three sources produce and what
 * tok_from_spec checks. Token bytes of a special token are its name. */
typedef struct {
  int32_t vocab_size;        /* ids 0 .. vocab_size-1 */
  const int32_t *tok_len;    /* (vocab_size) bytes of each token; -1: unused id */
  const uint8_t *tok_bytes;  /* the used tokens' bytes, concatenated in id order */
  size_t n_tok_bytes;        /* total length of tok_bytes */
  const uint8_t *is_special; /* (vocab_size) 1 for a special token, else 0 */
  int32_t n_merges;
  const int32_t *merges;     /* (n_merges, 3) left, right, result; rank order */
  tok_pretok pretok;
  bool ignore_merges;        /* HF: a chunk that is itself a token is taken whole */
} tok_spec;

/* Validates the spec and builds a tokenizer (the arrays are copied). Every
 * message starts with `where` (a file name or "tok_train"). */
tok_tokenizer *tok_from_spec(const tok_spec *spec, const char *where,
                             dg_status *st);
void tok_free(tok_tokenizer *t);

/* Number of ids (one more than the largest id). */
int tok_vocab_size(const tok_tokenizer *t);
int tok_merge_count(const tok_tokenizer *t);
/* The merge of rank r: left + right -> result. False if r is out of range. */
bool tok_merge_get(const tok_tokenizer *t, int r, int32_t *left,
                   int32_t *right, int32_t *result);
/* The bytes of a token (a special token's name); NULL for an unused or
 * out-of-range id. Not NUL-terminated. */
const uint8_t *tok_token_bytes(const tok_tokenizer *t, int32_t id, size_t *len);
/* The id of a special token by name, or -1 if there is none. */
int32_t tok_special(const tok_tokenizer *t, const char *name);
bool tok_is_special(const tok_tokenizer *t, int32_t id);
tok_pretok tok_get_pretok(const tok_tokenizer *t);

/* ---- encoding ------------------------------------------------------------ */

/* Appends the ids of text[0..n) to out. Fails only if the text holds a byte
 * that the vocabulary has no token for (possible with HF vocabularies). */
bool tok_encode(tok_tokenizer *t, const void *text, size_t n, tok_ids *out,
                dg_status *st);
/* Appends the bytes of the tokens to out (specials as their names). Fails on
 * an unused or out-of-range id, naming its position. */
bool tok_decode(const tok_tokenizer *t, const int32_t *ids, size_t n,
                dg_str *out, dg_status *st);

/* ---- training ------------------------------------------------------------ */

typedef struct {
  int min_frequency;                 /* stop when the best pair is rarer (default 2) */
  const char *const *extra_specials; /* added after the six fixed ones */
  int n_extra_specials;
  bool progress;                     /* a progress line on stderr */
} tok_train_opts;

/* Trains byte-level BPE on corpus[0..n) with the DRAGON pre-tokenizer.
 * vocab_size counts everything (256 bytes, merges, specials) and is an upper
 * bound: training stops early when no pair reaches min_frequency. opts may
 * be NULL. Deterministic: the same corpus gives the same vocabulary. */
tok_tokenizer *tok_train(const char *corpus, size_t n, int vocab_size,
                         const tok_train_opts *opts, dg_status *st);

/* ---- files --------------------------------------------------------------- */

/* Our binary format (magic, version, 256-int32 header; docs/tokenizer.md),
 * written atomically. tok_load rejects a corrupt or truncated file with a
 * message naming the file and the fault. */
bool tok_save(const tok_tokenizer *t, const char *path, dg_status *st);
tok_tokenizer *tok_load(const char *path, dg_status *st);

/* A Hugging Face tokenizer.json with model.type "BPE" over the GPT-2
 * byte-to-unicode alphabet; added_tokens become special tokens. */
tok_tokenizer *tok_load_hf(const char *path, dg_status *st);

#endif
