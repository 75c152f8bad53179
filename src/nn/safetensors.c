/* safetensors.c: export to and import from the safetensors format with
 * Hugging Face LlamaForCausalLM tensor names.
 *
 * Layout: an 8-byte little-endian header length N, N bytes of JSON
 * {name: {dtype, shape, data_offsets: [begin, end)}, "__metadata__":
 * {string: string}} padded with spaces to a multiple of 8, then the data
 * (offsets relative to its start). Per-layer tensors (L, ...) are split into
 * one tensor per layer. RoPE here is HF's rotate-half, so q_proj/k_proj rows
 * need no permutation either way. The importer checks the whole header
 * (JSON, dtypes, shapes, offsets in range, no gaps or overlaps, every
 * tensor present exactly once) before reading any data into a scratch copy,
 * and only then replaces the model's parameters. Reads F32, BF16, F16;
 * writes any of them. A zstd-packed file is read as the file it packs.
 * Does not read sharded (index.json) checkpoints.
 */
#include "dragon/nn.h"

#include <errno.h>
#include <jansson.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#define MAX_HEADER 100000000ll /* the reference implementation's limit */

static const char *dtype_names[] = {"F32", "BF16", "F16"};
static const int dtype_bytes[] = {4, 2, 2};

/* One tensor of the model: a parameter, and a layer for per-layer ones. */
typedef struct {
  char name[128];
  nn_param_id id;
  int layer;
  int ndim;
  int64_t dims[2];
  size_t numel, offset; /* floats, into params_mem */
} st_tensor;

/* The model's tensors in storage order; count is returned. */
static int list_tensors(const nn_model *m, st_tensor **out) {
  int L = m->cfg.n_layers, n = 0;
  st_tensor *t = dg_calloc((size_t)NN_PARAM_COUNT * L, sizeof *t);
  size_t off = 0;
  for (int i = 0; i < NN_PARAM_COUNT; i++) {
    nn_param_id id = (nn_param_id)i;
    int layers = nn_param_per_layer(id) ? L : 1;
    size_t per = m->param_sizes[i] / (size_t)layers;
    for (int l = 0; l < layers; l++, n++) {
      t[n].id = id;
      t[n].layer = nn_param_per_layer(id) ? l : -1;
      snprintf(t[n].name, sizeof t[n].name, nn_param_hf_name(id), l);
      t[n].ndim = nn_param_shape(&m->cfg, id, t[n].dims);
      t[n].numel = per;
      t[n].offset = off + (size_t)l * per;
    }
    off += m->param_sizes[i];
  }
  *out = t;
  return n;
}

/* ---- export -------------------------------------------------------------- */

static uint16_t f32_to_bf16(float f) {
  uint32_t x;
  memcpy(&x, &f, 4);
  if ((x & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((x >> 16) | 0x40); /* quiet NaN */
  x += 0x7fffu + ((x >> 16) & 1u);                                          /* nearest even */
  return (uint16_t)(x >> 16);
}

bool nn_safetensors_export(const nn_model *m, const char *path, nn_st_dtype dtype, dg_status *st) {
  st_tensor *t;
  int n = list_tensors(m, &t);
  int eb = dtype_bytes[dtype];
  json_t *root = json_object(), *meta = json_object();
  dg_str cfg;
  dg_str_init(&cfg);
  nn_config_print(&m->cfg, &cfg);
  json_object_set_new(meta, "format", json_string("pt"));
  json_object_set_new(meta, "dragon.config", json_string(cfg.s));
  dg_str_free(&cfg);
  json_object_set_new(root, "__metadata__", meta);
  size_t pos = 0;
  for (int i = 0; i < n; i++) {
    json_t *e = json_object(), *shape = json_array(), *offs = json_array();
    for (int d = 0; d < t[i].ndim; d++) json_array_append_new(shape, json_integer(t[i].dims[d]));
    json_array_append_new(offs, json_integer((json_int_t)pos));
    pos += t[i].numel * (size_t)eb;
    json_array_append_new(offs, json_integer((json_int_t)pos));
    json_object_set_new(e, "dtype", json_string(dtype_names[dtype]));
    json_object_set_new(e, "shape", shape);
    json_object_set_new(e, "data_offsets", offs);
    json_object_set_new(root, t[i].name, e);
  }
  char *js = json_dumps(root, JSON_COMPACT);
  json_decref(root);
  DG_ASSERT(js);
  size_t hlen = strlen(js), padded = (hlen + 7) / 8 * 8;
  char *hdr = dg_malloc(8 + padded);
  for (int b = 0; b < 8; b++) hdr[b] = (char)(((uint64_t)padded >> (8 * b)) & 0xff);
  memcpy(hdr + 8, js, hlen);
  memset(hdr + 8 + hlen, ' ', padded - hlen);
  free(js);

  /* F32 parts point into the parameters; other dtypes into one converted copy */
  nn_file_part *parts = dg_malloc(sizeof(nn_file_part) * (size_t)(n + 1));
  parts[0].data = hdr;
  parts[0].len = 8 + padded;
  uint16_t *half = NULL;
  if (dtype != NN_ST_F32) {
    half = dg_malloc(sizeof(uint16_t) * (m->num_params ? m->num_params : 1));
    for (size_t j = 0; j < m->num_params; j++)
      half[j] = dtype == NN_ST_BF16 ? f32_to_bf16(m->params_mem[j]) : dg_f32_to_f16(m->params_mem[j]);
  }
  for (int i = 0; i < n; i++) {
    parts[i + 1].data = half ? (const void *)(half + t[i].offset) : (const void *)(m->params_mem + t[i].offset);
    parts[i + 1].len = t[i].numel * (size_t)eb;
  }
  bool ok = nn_file_write_atomic(path, parts, n + 1, st);
  free(parts);
  free(half);
  free(hdr);
  free(t);
  return ok;
}

/* ---- import -------------------------------------------------------------- */

typedef struct {
  FILE *f;
  int64_t size, data_start; /* data_start = 8 + N */
  json_t *root;
  char *unpacked; /* a zstd-packed file, unpacked in memory (f reads it) */
} st_file;

static void st_close(st_file *sf) {
  if (sf->f) fclose(sf->f);
  json_decref(sf->root);
  free(sf->unpacked);
  memset(sf, 0, sizeof *sf);
}

/* A zstd-packed file (model.safetensors.zst, as dragon ships its model)
 * is read as the file it packs. */
static bool st_open_packed(const char *path, st_file *sf, dg_status *st) {
  size_t n, len;
  char *z = dg_read_file(path, &n, st);
  if (!z) return false;
  sf->unpacked = dg_zstd_unpack(z, n, path, (size_t)8 << 30, &len, st);
  free(z);
  if (!sf->unpacked) return false;
  sf->f = fmemopen(sf->unpacked, len ? len : 1, "rb");
  if (!sf->f) {
    st_close(sf);
    return dg_fail(st, DG_ERR_IO, "%s: cannot read the unpacked file: %s", path, strerror(errno));
  }
  sf->size = (int64_t)len;
  return true;
}

static bool st_open(const char *path, st_file *sf, dg_status *st) {
  memset(sf, 0, sizeof *sf);
  sf->f = fopen(path, "rb");
  if (!sf->f) return dg_fail(st, DG_ERR_IO, "%s: %s", path, strerror(errno));
  struct stat sb;
  if (fstat(fileno(sf->f), &sb) != 0 || !S_ISREG(sb.st_mode)) {
    st_close(sf);
    return dg_fail(st, DG_ERR_IO, "%s: not a regular file", path);
  }
  sf->size = (int64_t)sb.st_size;
  unsigned char magic[4];
  static const unsigned char zmagic[4] = {0x28, 0xb5, 0x2f, 0xfd};
  if (sf->size >= 4 && fread(magic, 1, 4, sf->f) == 4 && memcmp(magic, zmagic, 4) == 0) {
    st_close(sf);
    if (!st_open_packed(path, sf, st)) return false;
  } else {
    rewind(sf->f);
  }
  unsigned char lenb[8];
  if (sf->size < 8 || fread(lenb, 1, 8, sf->f) != 8) {
    st_close(sf);
    return dg_fail(st, DG_ERR_PARSE, "%s: truncated: %lld bytes, too short for the 8-byte header length",
                   path, (long long)sf->size);
  }
  uint64_t hlen = 0;
  for (int b = 7; b >= 0; b--) hlen = hlen << 8 | lenb[b];
  if (hlen > (uint64_t)MAX_HEADER || (int64_t)hlen > sf->size - 8) {
    int64_t size = sf->size;
    st_close(sf);
    return dg_fail(st, DG_ERR_PARSE, "%s: header length %llu exceeds the file (%lld bytes) or the limit of %lld",
                   path, (unsigned long long)hlen, (long long)size, MAX_HEADER);
  }
  char *js = dg_malloc(hlen ? hlen : 1);
  if (fread(js, 1, hlen, sf->f) != hlen) {
    free(js);
    st_close(sf);
    return dg_fail(st, DG_ERR_IO, "%s: read error in the header", path);
  }
  json_error_t err;
  sf->root = json_loadb(js, hlen, JSON_REJECT_DUPLICATES, &err);
  free(js);
  if (!sf->root || !json_is_object(sf->root)) {
    bool parsed = sf->root != NULL;
    st_close(sf);
    if (parsed) return dg_fail(st, DG_ERR_PARSE, "%s: header: JSON is not an object", path);
    return dg_fail(st, DG_ERR_PARSE, "%s: header JSON:%d:%d: %s", path, err.line, err.column, err.text);
  }
  sf->data_start = 8 + (int64_t)hlen;
  json_t *meta = json_object_get(sf->root, "__metadata__");
  if (meta) {
    const char *k;
    json_t *v;
    bool ok = json_is_object(meta);
    if (ok)
      json_object_foreach(meta, k, v) ok = ok && json_is_string(v);
    if (!ok) {
      st_close(sf);
      return dg_fail(st, DG_ERR_PARSE, "%s: header: __metadata__ must map strings to strings", path);
    }
  }
  return true;
}

bool nn_safetensors_read_config(const char *path, nn_config *cfg, dg_status *st) {
  st_file sf;
  if (!st_open(path, &sf, st)) return false;
  json_t *text = json_object_get(json_object_get(sf.root, "__metadata__"), "dragon.config");
  bool ok;
  if (!text) {
    ok = dg_fail(st, DG_ERR_INVALID, "%s: no dragon.config in __metadata__ (give the model config)", path);
  } else {
    char where[600];
    snprintf(where, sizeof where, "%s: __metadata__ dragon.config", path);
    ok = nn_config_parse(json_string_value(text), where, cfg, st);
  }
  st_close(&sf);
  return ok;
}

/* Finds the model tensor a name refers to; -1 if none. */
static int find_tensor(const st_tensor *t, int n, const char *name) {
  for (int i = 0; i < n; i++)
    if (strcmp(t[i].name, name) == 0) return i;
  return -1;
}

static bool is_ignored(const char *name) {
  const char *suffix = "rotary_emb.inv_freq";
  size_t a = strlen(name), b = strlen(suffix);
  return a >= b && strcmp(name + a - b, suffix) == 0;
}

typedef struct {
  int64_t begin, end;
} span;

static int span_cmp(const void *a, const void *b) {
  const span *x = a, *y = b;
  return x->begin < y->begin ? -1 : x->begin > y->begin ? 1 : (x->end > y->end) - (x->end < y->end);
}

/* Checks one header entry; fills its dtype and span. */
static bool check_entry(const char *path, const char *name, json_t *e, const st_tensor *want,
                        int *dtype, span *sp, int64_t buf_len, dg_status *st) {
  if (!json_is_object(e)) return dg_fail(st, DG_ERR_PARSE, "%s: tensor '%s': entry is not an object", path, name);
  json_t *dt = json_object_get(e, "dtype"), *shape = json_object_get(e, "shape");
  json_t *offs = json_object_get(e, "data_offsets");
  if (!json_is_string(dt) || !json_is_array(shape) || !json_is_array(offs) || json_array_size(offs) != 2)
    return dg_fail(st, DG_ERR_PARSE, "%s: tensor '%s': needs dtype, shape and data_offsets [begin, end]",
                   path, name);
  *dtype = -1;
  for (int d = 0; d < (int)DG_ARRAY_LEN(dtype_names); d++)
    if (strcmp(json_string_value(dt), dtype_names[d]) == 0) *dtype = d;
  int64_t numel = 1;
  size_t nd = json_array_size(shape);
  for (size_t d = 0; d < nd; d++) {
    json_t *x = json_array_get(shape, d);
    if (!json_is_integer(x) || json_integer_value(x) < 0 || json_integer_value(x) > (1ll << 40))
      return dg_fail(st, DG_ERR_PARSE, "%s: tensor '%s': shape[%zu] is not a size", path, name, d);
    numel *= json_integer_value(x);
    if (numel > (1ll << 40)) return dg_fail(st, DG_ERR_PARSE, "%s: tensor '%s': shape too large", path, name);
  }
  json_t *b = json_array_get(offs, 0), *en = json_array_get(offs, 1);
  if (!json_is_integer(b) || !json_is_integer(en))
    return dg_fail(st, DG_ERR_PARSE, "%s: tensor '%s': data_offsets are not integers", path, name);
  sp->begin = json_integer_value(b);
  sp->end = json_integer_value(en);
  if (sp->begin < 0 || sp->end < sp->begin || sp->end > buf_len)
    return dg_fail(st, DG_ERR_PARSE, "%s: tensor '%s': data_offsets [%lld, %lld] outside the %lld-byte data",
                   path, name, (long long)sp->begin, (long long)sp->end, (long long)buf_len);
  if (!want) return true; /* ignored buffers: any dtype, only the span matters */
  if (*dtype < 0)
    return dg_fail(st, DG_ERR_INVALID, "%s: tensor '%s': dtype %s not supported (F32, BF16, F16)", path,
                   name, json_string_value(dt));
  bool same = (int)nd == want->ndim;
  for (size_t d = 0; same && d < nd; d++) same = json_integer_value(json_array_get(shape, d)) == want->dims[d];
  if (!same) {
    char ws[64];
    if (want->ndim == 1) snprintf(ws, sizeof ws, "[%lld]", (long long)want->dims[0]);
    else snprintf(ws, sizeof ws, "[%lld, %lld]", (long long)want->dims[0], (long long)want->dims[1]);
    return dg_fail(st, DG_ERR_INVALID, "%s: tensor '%s': shape does not match the model's %s", path, name, ws);
  }
  if (sp->end - sp->begin != numel * dtype_bytes[*dtype])
    return dg_fail(st, DG_ERR_PARSE, "%s: tensor '%s': data_offsets span %lld bytes, shape and dtype need %lld",
                   path, name, (long long)(sp->end - sp->begin), (long long)(numel * dtype_bytes[*dtype]));
  return true;
}

static void convert(float *dst, const unsigned char *src, size_t n, int dtype) {
  for (size_t i = 0; i < n; i++) {
    if (dtype == NN_ST_F32) {
      memcpy(dst + i, src + 4 * i, 4);
      continue;
    }
    uint16_t h = (uint16_t)(src[2 * i] | src[2 * i + 1] << 8);
    if (dtype == NN_ST_F16) {
      dst[i] = dg_f16_to_f32(h);
    } else {
      uint32_t x = (uint32_t)h << 16;
      memcpy(dst + i, &x, 4);
    }
  }
}

bool nn_safetensors_import(nn_model *m, const char *path, dg_status *st) {
  st_file sf;
  if (!st_open(path, &sf, st)) return false;
  st_tensor *t;
  int n = list_tensors(m, &t);
  int64_t buf_len = sf.size - sf.data_start;
  size_t count = json_object_size(sf.root);
  span *spans = dg_calloc(count + 1, sizeof(span));
  int *found = dg_calloc((size_t)n, sizeof(int)); /* header dtype + 1, 0 = absent */
  span *where = dg_calloc((size_t)n, sizeof(span));
  size_t nspans = 0;
  float *scratch = NULL;
  unsigned char *raw = NULL;
  bool ok = true;
  const char *name;
  json_t *e;
  json_object_foreach(sf.root, name, e) {
    if (strcmp(name, "__metadata__") == 0) continue;
    int i = find_tensor(t, n, name);
    if (i < 0 && !is_ignored(name)) {
      ok = dg_fail(st, DG_ERR_INVALID, "%s: unknown tensor '%s' for this model config", path, name);
      break;
    }
    int dtype = -1;
    span sp;
    if (!check_entry(path, name, e, i >= 0 ? &t[i] : NULL, &dtype, &sp, buf_len, st)) {
      ok = false;
      break;
    }
    spans[nspans++] = sp;
    if (i >= 0) {
      found[i] = dtype + 1;
      where[i] = sp;
    }
  }
  if (ok) {
    /* the data must be covered exactly: no gaps, no overlaps, no tail */
    qsort(spans, nspans, sizeof(span), span_cmp);
    int64_t at = 0;
    for (size_t k = 0; k < nspans && ok; k++) {
      if (spans[k].begin != at)
        ok = dg_fail(st, DG_ERR_PARSE, "%s: data_offsets %s at byte %lld of the data", path,
                     spans[k].begin < at ? "overlap" : "leave a gap", (long long)at);
      at = spans[k].end;
    }
    if (ok && at != buf_len)
      ok = dg_fail(st, DG_ERR_PARSE, "%s: tensors cover %lld bytes of data but the file holds %lld%s", path,
                   (long long)at, (long long)buf_len, at > buf_len ? " (truncated)" : "");
  }
  for (int i = 0; i < n && ok; i++)
    if (!found[i] && t[i].id != NN_PARAM_WLM)
      ok = dg_fail(st, DG_ERR_INVALID, "%s: missing tensor '%s'", path, t[i].name);
  if (ok) {
    scratch = malloc(sizeof(float) * (m->num_params ? m->num_params : 1));
    if (!scratch) ok = dg_fail(st, DG_ERR_RUNTIME, "%s: out of memory", path);
  }
  for (int i = 0; i < n && ok; i++) {
    if (!found[i]) continue;
    size_t bytes = (size_t)(where[i].end - where[i].begin);
    raw = dg_realloc(raw, bytes ? bytes : 1);
    if (fseeko(sf.f, (off_t)(sf.data_start + where[i].begin), SEEK_SET) != 0 ||
        fread(raw, 1, bytes, sf.f) != bytes) {
      ok = dg_fail(st, DG_ERR_IO, "%s: tensor '%s': read error", path, t[i].name);
      break;
    }
    convert(scratch + t[i].offset, raw, t[i].numel, found[i] - 1);
  }
  if (ok) {
    int lm = find_tensor(t, n, nn_param_hf_name(NN_PARAM_WLM));
    int emb = find_tensor(t, n, nn_param_hf_name(NN_PARAM_WTE));
    if (!found[lm]) /* tied embeddings */
      memcpy(scratch + t[lm].offset, scratch + t[emb].offset, sizeof(float) * t[lm].numel);
    memcpy(m->params_mem, scratch, sizeof(float) * m->num_params);
  }
  free(raw);
  free(scratch);
  free(spans);
  free(found);
  free(where);
  free(t);
  st_close(&sf);
  return ok;
}
