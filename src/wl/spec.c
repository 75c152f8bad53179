/* spec.c: workload spec strings: the family table, parsing, checking and
 * the canonical form, and the public entry points wl_canonical / wl_build.
 *
 * Grammar: `family:key=val,key=val,...` with keys in any order (optional
 * ones may be left out and take their defaults), or an alias `GMM` /
 * `GMM/2`. Nothing else is accepted: no spaces, no empty entries, no
 * trailing characters. The canonical form lists every key in the family's
 * order with its value written out (integers in decimal, flags 0/1, dtype
 * f32/f16). Errors name the family and key at fault; user text quoted in a
 * message is cut short so that any input gives a readable message.
 */
#include <stdarg.h>
#include <string.h>

#include "wl/wl_impl.h"

static const wl_family *const families[] = {
    &wl_family_gemm,
    &wl_family_batch_matmul,
    &wl_family_gemv,
    &wl_family_transpose_batch_matmul,
    &wl_family_conv1d_nlc,
    &wl_family_conv2d_nhwc,
    &wl_family_conv2d_nchw,
    &wl_family_conv3d_ndhwc,
    &wl_family_depthwise_conv2d_nhwc,
    &wl_family_conv2d_transpose_nhwc,
    &wl_family_conv2d_capsule_nhwijc,
    &wl_family_conv2d_bias_bn_relu,
    &wl_family_max_pool2d,
    &wl_family_avg_pool2d,
    &wl_family_norm_bmn,
    &wl_family_softmax,
    &wl_family_layernorm,
    &wl_family_rmsnorm,
    &wl_family_reduce_sum,
    &wl_family_reduce_max,
    &wl_family_bias_gelu,
    &wl_family_silu_mul,
    &wl_family_rope,
};

int wl_family_count(void) { return (int)DG_ARRAY_LEN(families); }
const wl_family *wl_family_at(int i) {
  DG_ASSERT(i >= 0 && i < wl_family_count());
  return families[i];
}
const char *wl_family_name(int i) { return wl_family_at(i)->name; }
const char *wl_family_about(int i) { return wl_family_at(i)->about; }
const char *wl_family_example(int i) { return wl_family_at(i)->example; }

const wl_family *wl_family_find(const char *name, size_t n) {
  for (int i = 0; i < wl_family_count(); i++)
    if (strlen(families[i]->name) == n && memcmp(families[i]->name, name, n) == 0)
      return families[i];
  return NULL;
}

/* ---- sizes --------------------------------------------------------------- */

#define BYTES_CAP (INT64_MAX / 4)

void wl_bytes_add(int64_t *acc, dg_dtype t, int ndim, ...) {
  va_list ap;
  va_start(ap, ndim);
  int64_t n = dg_dtype_bytes(t);
  for (int i = 0; i < ndim; i++) {
    int64_t d = va_arg(ap, int64_t);
    DG_ASSERT(d >= 0);
    if (d != 0 && n > BYTES_CAP / d) n = BYTES_CAP;
    else n *= d;
  }
  va_end(ap);
  *acc = *acc > BYTES_CAP - n ? BYTES_CAP : *acc + n;
}

int64_t wl_numel(int n, const int64_t *d) {
  int64_t x = 1;
  for (int i = 0; i < n; i++) {
    DG_ASSERT(d[i] >= 0);
    if (d[i] != 0 && x > BYTES_CAP / d[i]) x = BYTES_CAP;
    else x *= d[i];
  }
  return x;
}

/* ---- printing ------------------------------------------------------------ */

void wl_params_print(const wl_params *p, dg_str *out) {
  dg_str_puts(out, p->fam->name);
  for (int i = 0; i < p->fam->nkeys; i++) {
    const wl_key *k = &p->fam->keys[i];
    dg_str_putc(out, i ? ',' : ':');
    if (k->kind == WL_KEY_DTYPE)
      dg_str_printf(out, "%s=%s", k->name, dg_dtype_name(wl_dtype_of(p->v[i])));
    else
      dg_str_printf(out, "%s=%lld", k->name, (long long)p->v[i]);
  }
}

/* ---- checking ------------------------------------------------------------ */

/* Quoted user text is cut to this many bytes in messages. */
#define QUOTE 40

bool wl_params_check(const wl_params *p, dg_status *st) {
  const wl_family *fam = p->fam;
  for (int i = 0; i < fam->nkeys; i++) {
    const wl_key *k = &fam->keys[i];
    if (p->v[i] < k->lo || p->v[i] > k->hi)
      return dg_fail(st, DG_ERR_INVALID, "%s:%s=%lld: %s must be in [%lld, %lld]", fam->name,
                     k->name, (long long)p->v[i], k->name, (long long)k->lo, (long long)k->hi);
  }
  int64_t bytes = 0;
  if (!fam->check(p->v, &bytes, st)) {
    dg_status_prefix(st, "%s", fam->name);
    return false;
  }
  if (bytes > WL_MAX_BYTES) {
    dg_str s;
    dg_str_init(&s);
    wl_params_print(p, &s);
    dg_fail(st, DG_ERR_INVALID,
            "%.200s: the tensors take %.1f MiB, more than WL_MAX_BYTES (%lld MiB)", s.s,
            (double)bytes / (1 << 20), (long long)(WL_MAX_BYTES >> 20));
    dg_str_free(&s);
    return false;
  }
  return true;
}

/* ---- parsing ------------------------------------------------------------- */

static bool parse_alias(const char *spec, wl_params *p, dg_status *st, bool *is_alias) {
  size_t n = strcspn(spec, "/");
  *is_alias = false;
  bool bad = false;
  if (!wl_alias_spec(spec, n, 0, &bad)) return true;
  *is_alias = true;
  int idx = 0;
  if (spec[n] == '/') {
    const char *d = spec + n + 1;
    if (d[0] < '0' || d[0] > '9' || d[1] != 0)
      return dg_fail(st, DG_ERR_PARSE, "%.*s: config must be one digit 0..3, got '/%.*s'",
                     (int)n, spec, QUOTE, d);
    idx = d[0] - '0';
  }
  const char *target = wl_alias_spec(spec, n, idx, &bad);
  if (!target)
    return dg_fail(st, DG_ERR_INVALID, "%.*s: config %d does not exist (0..3)", (int)n, spec, idx);
  return wl_params_parse(target, p, st);
}

static void list_families(dg_str *s) {
  for (int i = 0; i < wl_family_count(); i++) {
    if (i) dg_str_puts(s, ", ");
    dg_str_puts(s, families[i]->name);
  }
}

static void list_keys(const wl_family *fam, dg_str *s) {
  for (int i = 0; i < fam->nkeys; i++) {
    if (i) dg_str_puts(s, ", ");
    dg_str_puts(s, fam->keys[i].name);
  }
}

static bool parse_value(const wl_family *fam, const wl_key *k, const char *val, size_t vn,
                        int64_t *out, dg_status *st) {
  if (k->kind == WL_KEY_DTYPE) {
    dg_dtype t;
    if (dg_dtype_from_name(val, vn, &t) && (t == DG_F32 || t == DG_F16)) {
      *out = t == DG_F16;
      return true;
    }
    return dg_fail(st, DG_ERR_INVALID, "%s:%s=%.*s: dtype must be f32 or f16", fam->name,
                   k->name, (int)(vn < QUOTE ? vn : QUOTE), val);
  }
  /* Digits only (an optional minus sign), so that "+3", " 3", "0x3" and
   * "3.0" are refused rather than read loosely. */
  size_t i = (vn > 0 && val[0] == '-') ? 1 : 0;
  bool digits = i < vn;
  for (size_t j = i; j < vn; j++)
    if (val[j] < '0' || val[j] > '9') digits = false;
  if (!digits)
    return dg_fail(st, DG_ERR_PARSE, "%s:%s=%.*s: %s must be an integer", fam->name, k->name,
                   (int)(vn < QUOTE ? vn : QUOTE), val, k->name);
  int64_t x = 0;
  bool big = vn - i > 12;
  for (size_t j = i; j < vn && !big; j++) x = x * 10 + (val[j] - '0');
  if (i) x = -x;
  if (big || x < k->lo || x > k->hi)
    return dg_fail(st, DG_ERR_INVALID, "%s:%s=%.*s: %s must be in [%lld, %lld]", fam->name,
                   k->name, (int)(vn < QUOTE ? vn : QUOTE), val, k->name, (long long)k->lo,
                   (long long)k->hi);
  *out = x;
  return true;
}

bool wl_params_parse(const char *spec, wl_params *p, dg_status *st) {
  memset(p, 0, sizeof *p);
  if (!spec || !*spec) return dg_fail(st, DG_ERR_PARSE, "empty workload spec");
  bool is_alias;
  if (!parse_alias(spec, p, st, &is_alias)) return false;
  if (is_alias) return true;

  size_t fn = strcspn(spec, ":");
  const wl_family *fam = wl_family_find(spec, fn);
  if (!fam) {
    dg_str s;
    dg_str_init(&s);
    list_families(&s);
    dg_fail(st, DG_ERR_PARSE, "unknown family '%.*s' (families: %s; aliases: C1D C2D C3D CAP "
            "DEP DIL GMM GRP T2D NRM SFM CBR TBG, each /0../3)",
            (int)(fn < QUOTE ? fn : QUOTE), spec, s.s);
    dg_str_free(&s);
    return false;
  }
  p->fam = fam;
  bool seen[WL_MAX_KEYS] = {false};
  const char *s = spec + fn;
  if (*s == ':') {
    s++;
    for (;;) {
      size_t en = strcspn(s, ",");
      const char *eq = memchr(s, '=', en);
      if (en == 0 || !eq)
        return dg_fail(st, DG_ERR_PARSE, "%s: expected key=value at position %d, got '%.*s'",
                       fam->name, (int)(s - spec), (int)(en < QUOTE ? en : QUOTE), s);
      size_t kn = (size_t)(eq - s);
      int ki = -1;
      for (int i = 0; i < fam->nkeys; i++)
        if (strlen(fam->keys[i].name) == kn && memcmp(fam->keys[i].name, s, kn) == 0) ki = i;
      if (ki < 0) {
        dg_str ks;
        dg_str_init(&ks);
        list_keys(fam, &ks);
        dg_fail(st, DG_ERR_PARSE, "%s: unknown key '%.*s' (keys: %s)", fam->name,
                (int)(kn < QUOTE ? kn : QUOTE), s, ks.s);
        dg_str_free(&ks);
        return false;
      }
      if (seen[ki])
        return dg_fail(st, DG_ERR_PARSE, "%s: duplicate key '%s'", fam->name, fam->keys[ki].name);
      seen[ki] = true;
      if (!parse_value(fam, &fam->keys[ki], eq + 1, en - kn - 1, &p->v[ki], st)) return false;
      s += en;
      if (*s == 0) break;
      s++; /* ',' */
      if (*s == 0)
        return dg_fail(st, DG_ERR_PARSE, "%s: trailing ',' at position %d", fam->name,
                       (int)(s - spec - 1));
    }
  } else if (*s != 0) {
    DG_UNREACHABLE();
  }
  for (int i = 0; i < fam->nkeys; i++) {
    if (seen[i]) continue;
    if (fam->keys[i].required)
      return dg_fail(st, DG_ERR_INVALID, "%s: missing required key '%s'", fam->name,
                     fam->keys[i].name);
    p->v[i] = fam->keys[i].def;
  }
  return wl_params_check(p, st);
}

/* ---- public -------------------------------------------------------------- */

char *wl_canonical(const char *spec, dg_status *st) {
  wl_params p;
  if (!wl_params_parse(spec, &p, st)) return NULL;
  dg_str s;
  dg_str_init(&s);
  wl_params_print(&p, &s);
  return dg_str_take(&s);
}

dg_func *wl_build(const char *spec, dg_status *st) {
  wl_params p;
  if (!wl_params_parse(spec, &p, st)) return NULL;
  return p.fam->build(p.v);
}
