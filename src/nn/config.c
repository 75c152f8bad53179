/* config.c: the model configuration: built-in named configs, the
 * `key = value` text format, validation and the parameter count.
 *
 * Validation checks ranges and divisibility so that every later size
 * computation fits in int64 without overflow; whether a config fits in this
 * machine's memory is checked where memory is allocated (model.c), because
 * it depends on training vs inference and on the batch. Does not read
 * Hugging Face config.json files.
 */
#include "dragon/nn.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

/* The two anchor configs are those of anchors/torch_llama_train.py
 * (head_dim = d / h, RMSNorm eps 1e-6, theta 10000); their names are their
 * parameter counts, pinned by a test. */
static const struct {
  const char *name;
  nn_config cfg;
} named[] = {
    {"tiny", {256, 64, 2, 4, 2, 16, 128, 128, 10000.0f, 1e-6f}},
    {"19m", {8192, 384, 8, 6, 2, 64, 1024, 1024, 10000.0f, 1e-6f}},
    {"88m", {8192, 768, 12, 12, 4, 64, 2048, 1024, 10000.0f, 1e-6f}},
};

int nn_config_named_count(void) { return (int)DG_ARRAY_LEN(named); }

const char *nn_config_named_name(int i) {
  DG_ASSERT(i >= 0 && i < nn_config_named_count());
  return named[i].name;
}

bool nn_config_named(const char *name, nn_config *cfg, dg_status *st) {
  for (size_t i = 0; i < DG_ARRAY_LEN(named); i++)
    if (strcasecmp(name, named[i].name) == 0) {
      *cfg = named[i].cfg;
      return true;
    }
  dg_str known;
  dg_str_init(&known);
  for (size_t i = 0; i < DG_ARRAY_LEN(named); i++)
    dg_str_printf(&known, "%s%s", i ? ", " : "", named[i].name);
  dg_fail(st, DG_ERR_INVALID, "model config '%s': no such built-in config (%s)", name, known.s);
  dg_str_free(&known);
  return false;
}

/* One table drives parsing, printing and range checks. */
typedef enum { KEY_INT, KEY_FLOAT } key_type;

static const struct {
  const char *name;
  key_type type;
  size_t offset;
  int64_t lo, hi; /* KEY_INT range */
} keys[] = {
    {"vocab_size", KEY_INT, offsetof(nn_config, vocab_size), 2, 1 << 24},
    {"d_model", KEY_INT, offsetof(nn_config, d_model), 1, 1 << 16},
    {"n_layers", KEY_INT, offsetof(nn_config, n_layers), 1, 1024},
    {"n_heads", KEY_INT, offsetof(nn_config, n_heads), 1, 1024},
    {"n_kv_heads", KEY_INT, offsetof(nn_config, n_kv_heads), 1, 1024},
    {"head_dim", KEY_INT, offsetof(nn_config, head_dim), 2, 1024},
    {"ffn_hidden", KEY_INT, offsetof(nn_config, ffn_hidden), 1, 1 << 18},
    {"max_seq_len", KEY_INT, offsetof(nn_config, max_seq_len), 1, 1 << 20},
    {"rope_theta", KEY_FLOAT, offsetof(nn_config, rope_theta), 0, 0},
    {"norm_eps", KEY_FLOAT, offsetof(nn_config, norm_eps), 0, 0},
};
enum { NKEYS = (int)DG_ARRAY_LEN(keys) };
_Static_assert(DG_ARRAY_LEN(keys) == 10, "one key per nn_config field");

static int *int_field(nn_config *c, int k) { return (int *)((char *)c + keys[k].offset); }
static float *float_field(nn_config *c, int k) { return (float *)((char *)c + keys[k].offset); }

bool nn_config_validate(const nn_config *cfg, dg_status *st) {
  nn_config c = *cfg;
  for (int k = 0; k < NKEYS; k++) {
    if (keys[k].type == KEY_INT) {
      int v = *int_field(&c, k);
      if (v < keys[k].lo || v > keys[k].hi)
        return dg_fail(st, DG_ERR_INVALID, "model config: %s = %d is out of range [%lld, %lld]",
                       keys[k].name, v, (long long)keys[k].lo, (long long)keys[k].hi);
    } else {
      float v = *float_field(&c, k);
      if (!isfinite(v) || v <= 0)
        return dg_fail(st, DG_ERR_INVALID, "model config: %s = %g must be finite and > 0",
                       keys[k].name, (double)v);
    }
  }
  if (c.n_kv_heads > c.n_heads || c.n_heads % c.n_kv_heads != 0)
    return dg_fail(st, DG_ERR_INVALID,
                   "model config: n_heads = %d is not a multiple of n_kv_heads = %d",
                   c.n_heads, c.n_kv_heads);
  if (c.head_dim % 2 != 0)
    return dg_fail(st, DG_ERR_INVALID, "model config: head_dim = %d must be even (RoPE rotates pairs)",
                   c.head_dim);
  if (c.norm_eps >= 1.0f)
    return dg_fail(st, DG_ERR_INVALID, "model config: norm_eps = %g must be < 1", (double)c.norm_eps);
  if ((int64_t)c.n_heads * c.head_dim > (1 << 16))
    return dg_fail(st, DG_ERR_INVALID,
                   "model config: n_heads * head_dim = %lld exceeds 65536",
                   (long long)c.n_heads * c.head_dim);
  return true;
}

int64_t nn_config_param_count(const nn_config *cfg) {
  int64_t n = 0;
  for (int i = 0; i < NN_PARAM_COUNT; i++) {
    int64_t dims[2] = {1, 1};
    nn_param_shape(cfg, (nn_param_id)i, dims);
    n += dims[0] * dims[1] * (nn_param_per_layer((nn_param_id)i) ? cfg->n_layers : 1);
  }
  return n;
}

void nn_config_print(const nn_config *cfg, dg_str *out) {
  nn_config c = *cfg;
  for (int k = 0; k < NKEYS; k++) {
    if (keys[k].type == KEY_INT)
      dg_str_printf(out, "%s = %d\n", keys[k].name, *int_field(&c, k));
    else /* %.9g round-trips every float */
      dg_str_printf(out, "%s = %.9g\n", keys[k].name, (double)*float_field(&c, k));
  }
}

/* The state of one parse, handed to each pair. */
typedef struct {
  nn_config *c;
  const char *where;
  bool seen[NKEYS], have_base, any_key;
} cfg_parse;

static bool parse_pair(void *ctx, const char *key, const char *val, int lineno, dg_status *st) {
  cfg_parse *p = ctx;
  nn_config *c = p->c;
  const char *where = p->where;
  char what[160];
  snprintf(what, sizeof what, "%s:%d: %s", where, lineno, key);
  if (strcmp(key, "base") == 0) {
    if (p->any_key)
      return dg_fail(st, DG_ERR_PARSE, "%s:%d: 'base' must come before every other key", where,
                     lineno);
    if (!nn_config_named(val, c, st)) {
      dg_status_prefix(st, "%s:%d", where, lineno);
      return false;
    }
    p->have_base = p->any_key = true;
    return true;
  }
  for (int k = 0; k < NKEYS; k++) {
    if (strcmp(key, keys[k].name) != 0) continue;
    if (p->seen[k]) return dg_fail(st, DG_ERR_PARSE, "%s: given twice", what);
    p->seen[k] = p->any_key = true;
    if (keys[k].type == KEY_INT) {
      int64_t v;
      if (!dg_parse_i64(val, keys[k].lo, keys[k].hi, &v, what, st)) {
        st->code = DG_ERR_PARSE;
        return false;
      }
      *int_field(c, k) = (int)v;
    } else {
      double v;
      if (!dg_parse_f64(val, &v, what, st)) {
        st->code = DG_ERR_PARSE;
        return false;
      }
      if (!isfinite(v) || v <= 0 || v > 3.0e38)
        return dg_fail(st, DG_ERR_PARSE, "%s: %s must be finite and > 0", what, val);
      *float_field(c, k) = (float)v;
    }
    return true;
  }
  return dg_fail(st, DG_ERR_PARSE, "%s:%d: unknown key '%s'", where, lineno, key);
}

/* len bytes of text (a NUL among them is refused by the reader) */
static bool parse_text(const char *text, size_t len, const char *where, nn_config *cfg,
                       dg_status *st) {
  nn_config c = {0};
  cfg_parse p = {&c, where, {0}, false, false};
  if (!dg_kv_parse(text, len, where, parse_pair, &p, st)) return false;
  bool *seen = p.seen;
  if (!p.have_base) {
    for (int k = 0; k < NKEYS; k++) {
      if (seen[k]) continue;
      const char *name = keys[k].name;
      if (strcmp(name, "n_kv_heads") == 0) continue;
      if (strcmp(name, "head_dim") == 0) continue;
      if (strcmp(name, "rope_theta") == 0) c.rope_theta = 10000.0f;
      else if (strcmp(name, "norm_eps") == 0) c.norm_eps = 1e-6f;
      else return dg_fail(st, DG_ERR_PARSE, "%s: missing key '%s'", where, name);
    }
    if (!seen[4]) c.n_kv_heads = c.n_heads;
    if (!seen[5]) {
      if (c.d_model % c.n_heads != 0)
        return dg_fail(st, DG_ERR_INVALID,
                       "%s: d_model = %d is not a multiple of n_heads = %d (give head_dim)",
                       where, c.d_model, c.n_heads);
      c.head_dim = c.d_model / c.n_heads;
    }
  }
  if (!nn_config_validate(&c, st)) {
    dg_status_prefix(st, "%s", where);
    return false;
  }
  *cfg = c;
  return true;
}

bool nn_config_parse(const char *text, const char *where, nn_config *cfg, dg_status *st) {
  return parse_text(text, strlen(text), where, cfg, st);
}

bool nn_config_load(const char *name_or_path, nn_config *cfg, dg_status *st) {
  for (size_t i = 0; i < DG_ARRAY_LEN(named); i++)
    if (strcasecmp(name_or_path, named[i].name) == 0) return nn_config_named(name_or_path, cfg, st);
  size_t len;
  char *text = dg_read_file(name_or_path, &len, st);
  if (!text) return false;
  bool ok = parse_text(text, len, name_or_path, cfg, st);
  free(text);
  return ok;
}
