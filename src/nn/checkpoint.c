/* checkpoint.c: model checkpoints and optimizer state files, and the
 * atomic multi-part file writer they (and safetensors.c) use.
 *
 * Both formats are llm.c-style: a 256-int32 little-endian header, then raw
 * fp32 data. Model file: magic NN_CKPT_MAGIC, version, the config (floats
 * stored as their bits), tensor and parameter counts, a checksum of the
 * parameters and a checksum of the header itself, then the parameters in
 * NN_PARAM_LIST order. State file: magic NN_STATE_MAGIC, version, config,
 * counts, the step, the caller's RNG state, a data checksum and the header
 * checksum, then AdamW m and v. Together they make training resume
 * bitwise. Loading reads and checks everything before touching the model;
 * files are written by dg_write_parts_atomic (temporary file, fsync,
 * rename, fsync of the directory). Assumes a
 * little-endian host. Does not convert between configs or dtypes.
 */
#include "dragon/nn.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

_Static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__, "file formats are little-endian");

enum {
  HDR_INTS = 256,
  HDR_BYTES = HDR_INTS * 4,
  /* header slots */
  H_MAGIC = 0,
  H_VERSION = 1,
  H_CONFIG = 2, /* 10 slots: V C L NH NKV HD F maxT theta eps */
  H_NTENSORS = 12,
  H_NPARAMS = 13, /* 2 slots */
  H_SUM = 15,     /* 2 slots: data checksum */
  H_STEP = 17,    /* 2 slots (state) */
  H_HAS_RNG = 19, /* state */
  H_RNG = 20,     /* 8 slots (state) */
  H_HDRSUM = 255, /* low 32 bits of the hash of slots 0..254 */
};

/* ---- atomic writes ------------------------------------------------------- */

/* The parts go through base's one atomic write (dg_write_parts_atomic). */
bool nn_file_write_atomic(const char *path, const nn_file_part *parts, int n_parts, dg_status *st) {
  dg_part *p = dg_malloc(sizeof(dg_part) * (size_t)(n_parts > 0 ? n_parts : 1));
  for (int i = 0; i < n_parts; i++) {
    p[i].data = parts[i].data;
    p[i].len = parts[i].len;
  }
  bool ok = dg_write_parts_atomic(path, p, n_parts, st);
  free(p);
  return ok;
}

/* ---- headers ------------------------------------------------------------- */

static int32_t f2i(float f) {
  int32_t i;
  memcpy(&i, &f, 4);
  return i;
}

static float i2f(int32_t i) {
  float f;
  memcpy(&f, &i, 4);
  return f;
}

static void put64(int32_t *h, int slot, uint64_t v) {
  h[slot] = (int32_t)(uint32_t)v;
  h[slot + 1] = (int32_t)(uint32_t)(v >> 32);
}

static uint64_t get64(const int32_t *h, int slot) {
  return (uint64_t)(uint32_t)h[slot] | (uint64_t)(uint32_t)h[slot + 1] << 32;
}

static int32_t header_sum(const int32_t *h) {
  return (int32_t)(uint32_t)dg_hash_bytes(h, sizeof(int32_t) * H_HDRSUM, 0x6468);
}

static void put_config(int32_t *h, const nn_config *c) {
  int32_t *p = h + H_CONFIG;
  p[0] = c->vocab_size, p[1] = c->d_model, p[2] = c->n_layers, p[3] = c->n_heads;
  p[4] = c->n_kv_heads, p[5] = c->head_dim, p[6] = c->ffn_hidden, p[7] = c->max_seq_len;
  p[8] = f2i(c->rope_theta), p[9] = f2i(c->norm_eps);
}

static nn_config get_config(const int32_t *h) {
  const int32_t *p = h + H_CONFIG;
  nn_config c = {p[0], p[1], p[2], p[3], p[4], p[5], p[6], p[7], i2f(p[8]), i2f(p[9])};
  return c;
}

static void header_init(int32_t *h, int32_t magic, const nn_model *m) {
  memset(h, 0, HDR_BYTES);
  h[H_MAGIC] = magic;
  h[H_VERSION] = NN_CKPT_VERSION;
  put_config(h, &m->cfg);
  h[H_NTENSORS] = NN_PARAM_COUNT;
  put64(h, H_NPARAMS, m->num_params);
}

/* Opens `path`, reads and checks its header against `magic`, and returns
 * the open file, its size and the config (validated). */
static FILE *header_read(const char *path, int32_t magic, int32_t *h, int64_t *size, nn_config *cfg,
                         dg_status *st) {
  const char *kind = magic == NN_CKPT_MAGIC ? "model checkpoint" : "optimizer state file";
  const char *other = magic == NN_CKPT_MAGIC ? "an optimizer state file" : "a model checkpoint";
  FILE *f = fopen(path, "rb");
  if (!f) {
    dg_fail(st, DG_ERR_IO, "%s: %s", path, strerror(errno));
    return NULL;
  }
  struct stat sb;
  if (fstat(fileno(f), &sb) != 0 || !S_ISREG(sb.st_mode)) {
    dg_fail(st, DG_ERR_IO, "%s: not a regular file", path);
    goto fail;
  }
  *size = (int64_t)sb.st_size;
  if (*size < HDR_BYTES) {
    dg_fail(st, DG_ERR_PARSE, "%s: truncated: %lld bytes, shorter than the %d-byte header", path,
            (long long)*size, HDR_BYTES);
    goto fail;
  }
  if (fread(h, 4, HDR_INTS, f) != HDR_INTS) {
    dg_fail(st, DG_ERR_IO, "%s: read error in the header", path);
    goto fail;
  }
  if (h[H_MAGIC] != magic) {
    if (h[H_MAGIC] == NN_CKPT_MAGIC || h[H_MAGIC] == NN_STATE_MAGIC)
      dg_fail(st, DG_ERR_PARSE, "%s: is %s, not a dragon %s", path, other, kind);
    else
      dg_fail(st, DG_ERR_PARSE, "%s: not a dragon %s (magic %d, expected %d)", path, kind,
              (int)h[H_MAGIC], (int)magic);
    goto fail;
  }
  if (h[H_VERSION] != NN_CKPT_VERSION) {
    dg_fail(st, DG_ERR_PARSE, "%s: %s version %d; this build reads version %d", path, kind,
            (int)h[H_VERSION], NN_CKPT_VERSION);
    goto fail;
  }
  if (h[H_HDRSUM] != header_sum(h)) {
    dg_fail(st, DG_ERR_PARSE, "%s: header checksum mismatch (corrupt header)", path);
    goto fail;
  }
  *cfg = get_config(h);
  if (!nn_config_validate(cfg, st)) {
    dg_status_prefix(st, "%s: header", path);
    goto fail;
  }
  if (h[H_NTENSORS] != NN_PARAM_COUNT ||
      get64(h, H_NPARAMS) != (uint64_t)nn_config_param_count(cfg)) {
    dg_fail(st, DG_ERR_PARSE, "%s: header: %d tensors with %llu parameters do not match the config's %d with %lld",
            path, (int)h[H_NTENSORS], (unsigned long long)get64(h, H_NPARAMS), NN_PARAM_COUNT,
            (long long)nn_config_param_count(cfg));
    goto fail;
  }
  return f;
fail:
  fclose(f);
  return NULL;
}

static bool check_size(const char *path, int64_t size, int64_t want, dg_status *st) {
  if (size < want)
    return dg_fail(st, DG_ERR_PARSE, "%s: truncated: %lld bytes, expected %lld", path, (long long)size,
                   (long long)want);
  if (size > want)
    return dg_fail(st, DG_ERR_PARSE, "%s: %lld bytes, expected %lld (trailing data)", path,
                   (long long)size, (long long)want);
  return true;
}

static bool read_floats(FILE *f, float *dst, size_t n, const char *path, dg_status *st) {
  if (fread(dst, sizeof(float), n, f) != n)
    return dg_fail(st, DG_ERR_IO, "%s: read error or file changed while reading", path);
  return true;
}

/* ---- model checkpoints --------------------------------------------------- */

bool nn_checkpoint_save(const nn_model *m, const char *path, dg_status *st) {
  int32_t h[HDR_INTS];
  header_init(h, NN_CKPT_MAGIC, m);
  put64(h, H_SUM, dg_hash_bytes(m->params_mem, sizeof(float) * m->num_params, 0));
  h[H_HDRSUM] = header_sum(h);
  nn_file_part parts[2] = {{h, HDR_BYTES}, {m->params_mem, sizeof(float) * m->num_params}};
  return nn_file_write_atomic(path, parts, 2, st);
}

bool nn_checkpoint_read_config(const char *path, nn_config *cfg, dg_status *st) {
  int32_t h[HDR_INTS];
  int64_t size;
  FILE *f = header_read(path, NN_CKPT_MAGIC, h, &size, cfg, st);
  if (!f) return false;
  fclose(f);
  return true;
}

bool nn_checkpoint_load(nn_model *m, const char *path, bool training, dg_status *st) {
  int32_t h[HDR_INTS];
  int64_t size;
  nn_config cfg;
  FILE *f = header_read(path, NN_CKPT_MAGIC, h, &size, &cfg, st);
  if (!f) return false;
  nn_model t;
  bool ok = check_size(path, size, HDR_BYTES + 4 * nn_config_param_count(&cfg), st);
  if (ok && !nn_model_init(&t, &cfg, training, st)) {
    dg_status_prefix(st, "%s", path);
    ok = false;
  } else if (ok) {
    ok = read_floats(f, t.params_mem, t.num_params, path, st);
    if (ok && dg_hash_bytes(t.params_mem, sizeof(float) * t.num_params, 0) != get64(h, H_SUM))
      ok = dg_fail(st, DG_ERR_PARSE, "%s: parameter checksum mismatch (corrupt data)", path);
    if (!ok) nn_model_free(&t);
  }
  fclose(f);
  if (ok) *m = t;
  return ok;
}

/* ---- optimizer state ----------------------------------------------------- */

static uint64_t state_sum(const float *mm, const float *vv, size_t n) {
  return dg_hash_bytes(vv, sizeof(float) * n, dg_hash_bytes(mm, sizeof(float) * n, 1));
}

bool nn_state_save(const nn_model *m, int64_t step, const dg_rng *rng, const char *path,
                   dg_status *st) {
  DG_ASSERT(m->m_mem && m->v_mem && step >= 0);
  int32_t h[HDR_INTS];
  header_init(h, NN_STATE_MAGIC, m);
  put64(h, H_STEP, (uint64_t)step);
  if (rng) {
    h[H_HAS_RNG] = 1;
    for (int i = 0; i < 4; i++) put64(h, H_RNG + 2 * i, rng->s[i]);
  }
  put64(h, H_SUM, state_sum(m->m_mem, m->v_mem, m->num_params));
  h[H_HDRSUM] = header_sum(h);
  size_t bytes = sizeof(float) * m->num_params;
  nn_file_part parts[3] = {{h, HDR_BYTES}, {m->m_mem, bytes}, {m->v_mem, bytes}};
  return nn_file_write_atomic(path, parts, 3, st);
}

bool nn_state_load(nn_model *m, const char *path, int64_t *step, dg_rng *rng, dg_status *st) {
  DG_ASSERT(m->m_mem && m->v_mem);
  int32_t h[HDR_INTS];
  int64_t size;
  nn_config cfg;
  FILE *f = header_read(path, NN_STATE_MAGIC, h, &size, &cfg, st);
  if (!f) return false;
  bool ok = true;
  if (memcmp(&cfg, &m->cfg, sizeof cfg) != 0) {
    dg_str a, b;
    dg_str_init(&a);
    dg_str_init(&b);
    nn_config_print(&cfg, &a);
    nn_config_print(&m->cfg, &b);
    for (char *p = a.s; *p; p++) *p = *p == '\n' ? ' ' : *p;
    for (char *p = b.s; *p; p++) *p = *p == '\n' ? ' ' : *p;
    ok = dg_fail(st, DG_ERR_INVALID, "%s: written for another model config (%.200s) than this model's (%.200s)",
                 path, a.s, b.s);
    dg_str_free(&a);
    dg_str_free(&b);
  }
  int64_t s = (int64_t)get64(h, H_STEP);
  if (ok && s < 0) ok = dg_fail(st, DG_ERR_PARSE, "%s: header: negative step %lld", path, (long long)s);
  ok = ok && check_size(path, size, HDR_BYTES + 8 * (int64_t)m->num_params, st);
  float *mm = NULL, *vv = NULL;
  if (ok) {
    mm = malloc(sizeof(float) * m->num_params);
    vv = malloc(sizeof(float) * m->num_params);
    if (!mm || !vv) ok = dg_fail(st, DG_ERR_RUNTIME, "%s: out of memory", path);
  }
  ok = ok && read_floats(f, mm, m->num_params, path, st) && read_floats(f, vv, m->num_params, path, st);
  if (ok && state_sum(mm, vv, m->num_params) != get64(h, H_SUM))
    ok = dg_fail(st, DG_ERR_PARSE, "%s: optimizer state checksum mismatch (corrupt data)", path);
  fclose(f);
  if (ok) {
    memcpy(m->m_mem, mm, sizeof(float) * m->num_params);
    memcpy(m->v_mem, vv, sizeof(float) * m->num_params);
    *step = s;
    if (rng && h[H_HAS_RNG])
      for (int i = 0; i < 4; i++) rng->s[i] = get64(h, H_RNG + 2 * i);
  }
  free(mm);
  free(vv);
  return ok;
}
