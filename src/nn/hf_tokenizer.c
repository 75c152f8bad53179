/* hf_tokenizer.c: loading a Hugging Face tokenizer.json (byte-level BPE).
 *
 * Reads model.vocab (token string -> id, over the GPT-2 bytes-to-unicode
 * alphabet), model.merges ("a b" strings or ["a", "b"] pairs; rank = index)
 * and added_tokens, and keeps every id as in the file. Added tokens that are
 * not ordinary vocabulary entries become special tokens, reachable only
 * through tok_special. The pre-tokenizer is recognised from the file: a
 * ByteLevel one (GPT-2 regex or none), or a Split on the GPT-2, Llama 3 or
 * Qwen2 regex followed by ByteLevel; anything else is rejected, as are
 * normalizers other than NFC (taken as the identity: exact on ASCII and on
 * NFC text) and BPE options that change the algorithm (byte_fallback,
 * dropout, subword prefixes and suffixes).
 *
 * Does not read the post-processor (callers add BOS with tok_special) or the
 * decoder (byte-level decoding is the concatenation of token bytes).
 */
#include "dragon/tokenizer.h"

#include <jansson.h>
#include <stdlib.h>
#include <string.h>

static const char *const re_gpt2 =
    "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+";
static const char *const re_llama3 =
    "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| "
    "?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";
static const char *const re_qwen2 =
    "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| "
    "?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";

enum { N_BYTE_CPS = 256 + 68 };

/* GPT-2's bytes_to_unicode, inverted: printable bytes stand for
 * themselves, the 68 others for U+0100.. in byte order. */
static void byte_level_inverse(int16_t cp_to_byte[N_BYTE_CPS]) {
  int extra = 0;
  for (int i = 0; i < N_BYTE_CPS; i++) cp_to_byte[i] = -1;
  for (int b = 0; b < 256; b++) {
    bool self = (b >= 33 && b <= 126) || (b >= 161 && b <= 172) || (b >= 174 && b <= 255);
    cp_to_byte[self ? b : 256 + extra++] = (int16_t)b;
  }
}

/* A token string's bytes. As in HF's ByteLevel decoder, a string with a
 * code point outside the alphabet stands for its own UTF-8 bytes. */
static void token_bytes(const int16_t *inv, const char *str, size_t n, dg_str *out) {
  const uint8_t *s = (const uint8_t *)str;
  size_t start = out->len;
  for (size_t i = 0; i < n;) {
    uint32_t cp;
    int k;
    if (s[i] < 0x80) cp = s[i], k = 1;
    else if ((s[i] & 0xe0) == 0xc0) cp = s[i] & 0x1f, k = 2;
    else if ((s[i] & 0xf0) == 0xe0) cp = s[i] & 0x0f, k = 3;
    else cp = s[i] & 0x07, k = 4;
    for (int q = 1; q < k && i + (size_t)q < n; q++) cp = cp << 6 | (s[i + (size_t)q] & 0x3f);
    i += (size_t)k;
    if (cp >= N_BYTE_CPS || inv[cp] < 0) {
      out->len = start;
      dg_str_putn(out, str, n);
      return;
    }
    dg_str_putc(out, (char)inv[cp]);
  }
}

static bool fail_at(dg_status *st, const char *path, const char *where, const char *what) {
  return dg_fail(st, DG_ERR_PARSE, "%s: %s: %s", path, where, what);
}

static bool is_true(json_t *j) { return j && json_is_true(j); }
static bool is_nullish(json_t *j) { return !j || json_is_null(j); }

static bool parse_byte_level(const char *path, const char *where, json_t *bl,
                             bool *add_prefix_space, bool *use_regex, dg_status *st) {
  *add_prefix_space = is_true(json_object_get(bl, "add_prefix_space"));
  json_t *ur = json_object_get(bl, "use_regex");
  if (ur && !json_is_boolean(ur)) return fail_at(st, path, where, "use_regex is not a boolean");
  *use_regex = !ur || json_is_true(ur);
  return true;
}

static bool parse_pretok(const char *path, json_t *pt, tok_pretok *out, dg_status *st) {
  const char *where = "pre_tokenizer";
  if (is_nullish(pt) || !json_is_object(pt))
    return fail_at(st, path, where,
                   "missing; byte-level BPE needs ByteLevel or Sequence[Split, ByteLevel]");
  const char *type = json_string_value(json_object_get(pt, "type"));
  bool prefix, use_regex;
  if (type && strcmp(type, "ByteLevel") == 0) {
    if (!parse_byte_level(path, where, pt, &prefix, &use_regex, st)) return false;
    *out = (tok_pretok){use_regex ? TOK_PRE_GPT2 : TOK_PRE_NONE, 0, prefix};
    return true;
  }
  json_t *list = json_object_get(pt, "pretokenizers");
  if (!type || strcmp(type, "Sequence") != 0 || !json_is_array(list) ||
      json_array_size(list) != 2)
    return fail_at(st, path, where,
                   "unsupported (this loader reads ByteLevel and Sequence[Split, ByteLevel])");
  json_t *split = json_array_get(list, 0), *bl = json_array_get(list, 1);
  const char *t0 = json_string_value(json_object_get(split, "type"));
  const char *t1 = json_string_value(json_object_get(bl, "type"));
  if (!t0 || !t1 || strcmp(t0, "Split") != 0 || strcmp(t1, "ByteLevel") != 0)
    return fail_at(st, path, where, "a Sequence must be [Split, ByteLevel]");
  const char *behavior = json_string_value(json_object_get(split, "behavior"));
  if (!behavior || strcmp(behavior, "Isolated") != 0 ||
      is_true(json_object_get(split, "invert")))
    return fail_at(st, path, where, "Split must have behavior Isolated and invert false");
  const char *re = json_string_value(json_object_get(json_object_get(split, "pattern"), "Regex"));
  if (!re) return fail_at(st, path, where, "Split has no pattern.Regex");
  if (strcmp(re, re_gpt2) == 0) *out = (tok_pretok){TOK_PRE_GPT2, 0, false};
  else if (strcmp(re, re_llama3) == 0) *out = (tok_pretok){TOK_PRE_LLAMA3, 3, false};
  else if (strcmp(re, re_qwen2) == 0) *out = (tok_pretok){TOK_PRE_LLAMA3, 1, false};
  else
    return dg_fail(st, DG_ERR_PARSE,
                   "%s: pre_tokenizer: unsupported Split regex '%.200s' (known: GPT-2, "
                   "Llama 3, Qwen2)",
                   path, re);
  if (!parse_byte_level(path, where, bl, &prefix, &use_regex, st)) return false;
  if (use_regex)
    return fail_at(st, path, where, "ByteLevel after Split must have use_regex false");
  out->add_prefix_space = prefix;
  return true;
}

static bool check_model_options(const char *path, json_t *model, json_t *norm, dg_status *st) {
  const char *type = json_string_value(json_object_get(model, "type"));
  if (json_object_get(model, "type") && (!type || strcmp(type, "BPE") != 0))
    return dg_fail(st, DG_ERR_PARSE, "%s: model.type is '%s'; only BPE is supported", path,
                   type ? type : "?");
  if (is_true(json_object_get(model, "byte_fallback")))
    return fail_at(st, path, "model.byte_fallback", "true is not byte-level BPE");
  json_t *drop = json_object_get(model, "dropout");
  if (!is_nullish(drop) && !(json_is_number(drop) && json_number_value(drop) == 0))
    return fail_at(st, path, "model.dropout", "BPE dropout is not supported");
  const char *affix[] = {"continuing_subword_prefix", "end_of_word_suffix"};
  for (size_t k = 0; k < DG_ARRAY_LEN(affix); k++) {
    json_t *a = json_object_get(model, affix[k]);
    if (!is_nullish(a) && !(json_is_string(a) && json_string_length(a) == 0))
      return dg_fail(st, DG_ERR_PARSE, "%s: model.%s: not supported in byte-level BPE",
                     path, affix[k]);
  }
  if (!is_nullish(norm)) {
    const char *nt = json_string_value(json_object_get(norm, "type"));
    if (!nt || strcmp(nt, "NFC") != 0)
      return dg_fail(st, DG_ERR_PARSE, "%s: normalizer '%s' is not supported (only NFC)",
                     path, nt ? nt : "?");
  }
  return true;
}

static bool get_id(json_t *v, int32_t *id) {
  if (!json_is_integer(v)) return false;
  json_int_t x = json_integer_value(v);
  if (x < 0 || x >= TOK_MAX_VOCAB) return false;
  *id = (int32_t)x;
  return true;
}

/* The ids of merge k: "a b" or ["a", "b"], both parts and their
 * concatenation in the vocabulary. */
static bool parse_merge(const char *path, json_t *vocab, json_t *m, size_t k,
                        int32_t out[3], dg_str *tmp, dg_status *st) {
  const char *a, *b;
  size_t na, nb;
  if (json_is_string(m)) {
    const char *s = json_string_value(m);
    const char *sp = strchr(s, ' ');
    if (!sp || sp == s || !sp[1] || strchr(sp + 1, ' '))
      return dg_fail(st, DG_ERR_PARSE, "%s: model.merges[%zu]: '%.100s' is not \"a b\"",
                     path, k, s);
    a = s, na = (size_t)(sp - s), b = sp + 1, nb = strlen(b);
  } else if (json_is_array(m) && json_array_size(m) == 2 &&
             json_is_string(json_array_get(m, 0)) && json_is_string(json_array_get(m, 1))) {
    a = json_string_value(json_array_get(m, 0)), na = strlen(a);
    b = json_string_value(json_array_get(m, 1)), nb = strlen(b);
  } else {
    return dg_fail(st, DG_ERR_PARSE, "%s: model.merges[%zu]: not a string or a pair", path, k);
  }
  const char *parts[3];
  dg_str_clear(tmp);
  dg_str_putn(tmp, a, na);
  dg_str_putc(tmp, 0);
  dg_str_putn(tmp, b, nb);
  dg_str_putc(tmp, 0);
  dg_str_putn(tmp, a, na);
  dg_str_putn(tmp, b, nb);
  parts[0] = tmp->s, parts[1] = tmp->s + na + 1, parts[2] = tmp->s + na + nb + 2;
  for (int q = 0; q < 3; q++)
    if (!get_id(json_object_get(vocab, parts[q]), &out[q]))
      return dg_fail(st, DG_ERR_PARSE, "%s: model.merges[%zu]: '%.100s' is not in model.vocab",
                     path, k, parts[q]);
  return true;
}

tok_tokenizer *tok_load_hf(const char *path, dg_status *st) {
  json_error_t jerr;
  json_t *root = json_load_file(path, JSON_REJECT_DUPLICATES, &jerr);
  if (!root) {
    dg_fail(st, DG_ERR_PARSE, "%s:%d:%d: %s", path, jerr.line, jerr.column, jerr.text);
    return NULL;
  }
  tok_tokenizer *t = NULL;
  int32_t *len = NULL, *merges = NULL;
  uint8_t *special = NULL;
  const char **name = NULL; /* (V) vocab string or added content */
  size_t *name_len = NULL;
  dg_str bytes, tmp;
  dg_str_init(&bytes);
  dg_str_init(&tmp);

  json_t *model = json_object_get(root, "model");
  json_t *vocab = json_object_get(model, "vocab");
  json_t *jmerges = json_object_get(model, "merges");
  json_t *added = json_object_get(root, "added_tokens");
  tok_pretok pre;
  if (!json_is_object(root) || !json_is_object(model)) {
    fail_at(st, path, "model", "missing or not an object");
    goto done;
  }
  if (!json_is_object(vocab) || !json_is_array(jmerges)) {
    fail_at(st, path, "model", "needs a vocab object and a merges array");
    goto done;
  }
  if (!is_nullish(added) && !json_is_array(added)) {
    fail_at(st, path, "added_tokens", "not an array");
    goto done;
  }
  if (!check_model_options(path, model, json_object_get(root, "normalizer"), st) ||
      !parse_pretok(path, json_object_get(root, "pre_tokenizer"), &pre, st))
    goto done;

  int32_t V = 0, id;
  const char *key;
  json_t *val;
  json_object_foreach(vocab, key, val) {
    if (!get_id(val, &id)) {
      dg_fail(st, DG_ERR_PARSE, "%s: model.vocab['%.100s']: id is not an integer in [0, %d)",
              path, key, TOK_MAX_VOCAB);
      goto done;
    }
    if (id >= V) V = id + 1;
  }
  size_t i_added;
  json_array_foreach(added, i_added, val) {
    if (!get_id(json_object_get(val, "id"), &id) ||
        !json_is_string(json_object_get(val, "content"))) {
      dg_fail(st, DG_ERR_PARSE, "%s: added_tokens[%zu]: needs an id in [0, %d) and a content",
              path, i_added, TOK_MAX_VOCAB);
      goto done;
    }
    if (id >= V) V = id + 1;
  }
  if (V == 0) {
    fail_at(st, path, "model.vocab", "empty");
    goto done;
  }
  /* Real vocabularies are dense; a stray huge id must not cost gigabytes. */
  size_t n_listed = json_object_size(vocab) + json_array_size(added);
  if ((size_t)V > 2 * n_listed + 1024) {
    dg_fail(st, DG_ERR_PARSE, "%s: model.vocab: largest id %d for only %zu tokens", path,
            V - 1, n_listed);
    goto done;
  }
  name = dg_calloc((size_t)V, sizeof *name);
  name_len = dg_calloc((size_t)V, sizeof *name_len);
  special = dg_calloc((size_t)V, 1);
  json_object_foreach(vocab, key, val) {
    get_id(val, &id);
    if (name[id]) {
      dg_fail(st, DG_ERR_PARSE, "%s: model.vocab: id %d is given to '%.100s' and '%.100s'",
              path, id, name[id], key);
      goto done;
    }
    name[id] = key;
    name_len[id] = strlen(key);
  }
  json_array_foreach(added, i_added, val) {
    get_id(json_object_get(val, "id"), &id);
    json_t *content = json_object_get(val, "content");
    /* An added token that is an ordinary vocabulary entry stays one;
     * everything else is special. */
    if (name[id] && !special[id] && !is_true(json_object_get(val, "special")) &&
        strcmp(name[id], json_string_value(content)) == 0)
      continue;
    if (special[id]) {
      dg_fail(st, DG_ERR_PARSE, "%s: added_tokens[%zu]: id %d is added twice", path, i_added, id);
      goto done;
    }
    name[id] = json_string_value(content);
    name_len[id] = json_string_length(content);
    special[id] = 1;
  }

  int16_t inv[N_BYTE_CPS];
  byte_level_inverse(inv);
  len = dg_malloc(sizeof(int32_t) * (size_t)V);
  for (int32_t k = 0; k < V; k++) {
    size_t before = bytes.len;
    if (!name[k]) len[k] = -1;
    else {
      if (special[k]) dg_str_putn(&bytes, name[k], name_len[k]);
      else token_bytes(inv, name[k], name_len[k], &bytes);
      size_t n = bytes.len - before;
      len[k] = n > TOK_MAX_TOKEN_BYTES ? TOK_MAX_TOKEN_BYTES + 1 : (int32_t)n;
    }
  }
  size_t M = json_array_size(jmerges);
  if (M > 4 * (size_t)TOK_MAX_VOCAB) {
    fail_at(st, path, "model.merges", "too many merges");
    goto done;
  }
  merges = dg_malloc(sizeof(int32_t) * 3 * (M ? M : 1));
  for (size_t k = 0; k < M; k++)
    if (!parse_merge(path, vocab, json_array_get(jmerges, k), k, merges + 3 * k, &tmp, st))
      goto done;
  tok_spec sp = {
      .vocab_size = V,
      .tok_len = len,
      .tok_bytes = (const uint8_t *)bytes.s,
      .n_tok_bytes = bytes.len,
      .is_special = special,
      .n_merges = (int32_t)M,
      .merges = merges,
      .pretok = pre,
      .ignore_merges = is_true(json_object_get(model, "ignore_merges")),
  };
  t = tok_from_spec(&sp, path, st);
done:
  free(len);
  free(merges);
  free(special);
  free(name);
  free(name_len);
  dg_str_free(&bytes);
  dg_str_free(&tmp);
  json_decref(root);
  return t;
}
