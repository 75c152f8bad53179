/* cost_model.c: MetaSchedule's XGBModel through XGBoost's C API.
 *
 * Pack-sum regression: a candidate is several feature rows (one per store,
 * features.c); XGBoost predicts a value per row and the candidate's score is
 * the sum over its rows. Labels are normalised throughput per workload
 * group, min cost / cost (a failure, cost >= 1e10, is ~0). Training boosts
 * one tree at a time with XGBoosterBoostOneIter and the candidate-level
 * squared error as custom objective: gradient (pred - y) * y and hessian y,
 * spread to the candidate's rows; it stops when the training pack-sum RMSE
 * has not improved for early_stopping_rounds and keeps the best iteration
 * (XGBoosterSlice). Retraining is adaptive (data grew by >= 20% since the
 * last training) and always uses every group, so a model loaded from
 * another run keeps its data and warm-starts a new workload. Until
 * num_warmup_samples candidates and a trained booster exist, predictions
 * are uniform random in [0, 1), as TVM's.
 *
 * Threads: one by default (nthread); OpenMP's spinning workers slow
 * training down by orders of magnitude on a loaded machine.
 * Deviations: base_score is 0 (XGBoost's default 0.5 would add 0.5 per row
 * to a pack sum); an RMSE improvement below 1e-6 does not reset the early
 * stopping count. Does not do: XGBoost's own evaluation logging.
 */
#include "dragon/search.h"

#include <math.h>
#include <string.h>
#include <unistd.h>
#include <xgboost/c_api.h>

typedef struct {
  char *name;
  DG_VEC(double) rows;  /* (n_rows, SEARCH_FEATURE_LEN) */
  DG_VEC(int) n_rows;   /* per candidate */
  DG_VEC(double) costs; /* per candidate */
} cm_group;

struct search_cost_model {
  search_xgb_opts o;
  dg_rng rng;
  BoosterHandle booster; /* NULL until trained */
  DG_VEC(cm_group) groups;
  int64_t n_samples, last_train_size;
};

void search_xgb_opts_default(search_xgb_opts *o) {
  o->max_depth = 10;
  o->gamma = 0.001;
  o->min_child_weight = 0;
  o->eta = 0.2;
  o->seed = 43;
  o->nthread = 1;
  o->num_warmup_samples = 100;
  o->num_boost_round = 10000;
  o->early_stopping_rounds = 50;
  o->adaptive_training = true;
}

search_cost_model *search_cost_model_new(const search_xgb_opts *o, uint64_t seed) {
  search_cost_model *m = dg_calloc(1, sizeof *m);
  if (o) m->o = *o;
  else search_xgb_opts_default(&m->o);
  dg_rng_seed(&m->rng, seed);
  return m;
}

static void free_groups(search_cost_model *m) {
  for (size_t i = 0; i < m->groups.len; i++) {
    cm_group *g = &m->groups.data[i];
    free(g->name);
    DG_VEC_FREE(&g->rows);
    DG_VEC_FREE(&g->n_rows);
    DG_VEC_FREE(&g->costs);
  }
  DG_VEC_FREE(&m->groups);
}

void search_cost_model_free(search_cost_model *m) {
  if (!m) return;
  if (m->booster) XGBoosterFree(m->booster);
  free_groups(m);
  free(m);
}

bool search_cost_model_trained(const search_cost_model *m) {
  return m->booster && m->n_samples >= m->o.num_warmup_samples;
}

int search_cost_model_samples(const search_cost_model *m) { return (int)m->n_samples; }

static bool xgb_fail(dg_status *st, const char *what) {
  return dg_fail(st, DG_ERR_RUNTIME, "xgboost: %s: %s", what, XGBGetLastError());
}

static cm_group *group_get(search_cost_model *m, const char *name) {
  for (size_t i = 0; i < m->groups.len; i++)
    if (strcmp(m->groups.data[i].name, name) == 0) return &m->groups.data[i];
  cm_group g;
  memset(&g, 0, sizeof g);
  g.name = dg_strdup(name);
  DG_VEC_PUSH(&m->groups, g);
  return &m->groups.data[m->groups.len - 1];
}

/* ---- training ------------------------------------------------------------- */

typedef struct {
  float *x;       /* (rows, SEARCH_FEATURE_LEN) */
  int *cand_of;   /* (rows) */
  double *y;      /* (cands) labels */
  int rows, cands;
} cm_data;

static void data_free(cm_data *d) {
  free(d->x);
  free(d->cand_of);
  free(d->y);
}

static void data_build(const search_cost_model *m, cm_data *d) {
  int rows = 0, cands = 0;
  for (size_t g = 0; g < m->groups.len; g++) {
    rows += (int)(m->groups.data[g].rows.len / SEARCH_FEATURE_LEN);
    cands += (int)m->groups.data[g].costs.len;
  }
  d->rows = rows;
  d->cands = cands;
  d->x = dg_malloc(sizeof(float) * (size_t)(rows ? rows : 1) * SEARCH_FEATURE_LEN);
  d->cand_of = dg_malloc(sizeof(int) * (size_t)(rows ? rows : 1));
  d->y = dg_malloc(sizeof(double) * (size_t)(cands ? cands : 1));
  int r = 0, c = 0;
  for (size_t gi = 0; gi < m->groups.len; gi++) {
    const cm_group *g = &m->groups.data[gi];
    double best = SEARCH_FAILED_SECS;
    for (size_t k = 0; k < g->costs.len; k++)
      if (g->costs.data[k] < best) best = g->costs.data[k];
    size_t off = 0;
    for (size_t k = 0; k < g->costs.len; k++, c++) {
      d->y[c] = best / g->costs.data[k];
      for (int j = 0; j < g->n_rows.data[k]; j++, r++, off++) {
        for (int f = 0; f < SEARCH_FEATURE_LEN; f++)
          d->x[(size_t)r * SEARCH_FEATURE_LEN + f] =
              (float)g->rows.data[off * SEARCH_FEATURE_LEN + (size_t)f];
        d->cand_of[r] = c;
      }
    }
  }
}

static bool set_params(BoosterHandle b, const search_xgb_opts *o, dg_status *st) {
  char v[64];
  struct {
    const char *k;
    double x;
    bool integer;
  } ps[] = {{"max_depth", o->max_depth, true}, {"gamma", o->gamma, false},
            {"min_child_weight", o->min_child_weight, false}, {"eta", o->eta, false},
            {"seed", o->seed, true}, {"base_score", 0, false}};
  for (size_t i = 0; i < DG_ARRAY_LEN(ps); i++) {
    if (ps[i].integer) snprintf(v, sizeof v, "%lld", (long long)ps[i].x);
    else snprintf(v, sizeof v, "%.17g", ps[i].x);
    if (XGBoosterSetParam(b, ps[i].k, v) != 0) return xgb_fail(st, ps[i].k);
  }
  if (o->nthread > 0) {
    snprintf(v, sizeof v, "%d", o->nthread);
    if (XGBoosterSetParam(b, "nthread", v) != 0) return xgb_fail(st, "nthread");
  }
  if (XGBoosterSetParam(b, "verbosity", "0") != 0) return xgb_fail(st, "verbosity");
  return true;
}

/* Candidate-level sums of row predictions. */
static void pack_sum(const cm_data *d, const float *pred, double *out) {
  for (int c = 0; c < d->cands; c++) out[c] = 0;
  for (int r = 0; r < d->rows; r++) out[d->cand_of[r]] += pred[r];
}

/* An improvement of the training RMSE smaller than this does not count:
 * trees keep shaving float noise off a fitted training set, and without a
 * floor early stopping would never trigger (the labels lie in [0, 1]). */
#define RMSE_TOL 1e-6

static bool train(search_cost_model *m, dg_status *st) {
  cm_data d;
  data_build(m, &d);
  bool ok = true;
  DMatrixHandle dm = NULL;
  BoosterHandle b = NULL;
  float *grad = dg_malloc(sizeof(float) * (size_t)(d.rows ? d.rows : 1));
  float *hess = dg_malloc(sizeof(float) * (size_t)(d.rows ? d.rows : 1));
  double *cpred = dg_malloc(sizeof(double) * (size_t)(d.cands ? d.cands : 1));
  if (d.rows == 0) goto done;
  if (XGDMatrixCreateFromMat(d.x, (bst_ulong)d.rows, SEARCH_FEATURE_LEN, NAN, &dm) != 0) {
    ok = xgb_fail(st, "DMatrix");
    goto done;
  }
  if (XGBoosterCreate(&dm, 1, &b) != 0) {
    ok = xgb_fail(st, "booster");
    goto done;
  }
  if (!(ok = set_params(b, &m->o, st))) goto done;
  double best_rmse = INFINITY;
  int best_iter = -1;
  for (int it = 0; it < m->o.num_boost_round; it++) {
    bst_ulong len = 0;
    const float *pred = NULL;
    if (it == 0) {
      for (int c = 0; c < d.cands; c++) cpred[c] = 0;
    } else {
      if (XGBoosterPredict(b, dm, 0, 0, 1, &len, &pred) != 0 || len != (bst_ulong)d.rows) {
        ok = xgb_fail(st, "predict");
        goto done;
      }
      pack_sum(&d, pred, cpred);
    }
    for (int r = 0; r < d.rows; r++) {
      double y = d.y[d.cand_of[r]];
      grad[r] = (float)((cpred[d.cand_of[r]] - y) * y);
      hess[r] = (float)y;
    }
    if (XGBoosterBoostOneIter(b, dm, grad, hess, (bst_ulong)d.rows) != 0) {
      ok = xgb_fail(st, "boost");
      goto done;
    }
    /* the training pack-sum RMSE after this round */
    if (XGBoosterPredict(b, dm, 0, 0, 1, &len, &pred) != 0 || len != (bst_ulong)d.rows) {
      ok = xgb_fail(st, "predict");
      goto done;
    }
    pack_sum(&d, pred, cpred);
    double se = 0;
    for (int c = 0; c < d.cands; c++) se += (cpred[c] - d.y[c]) * (cpred[c] - d.y[c]);
    double rmse = sqrt(se / (d.cands ? d.cands : 1));
    if (rmse < best_rmse - RMSE_TOL) {
      best_rmse = rmse;
      best_iter = it;
    } else if (it - best_iter >= m->o.early_stopping_rounds) {
      break;
    }
  }
  int rounds = 0;
  XGBoosterBoostedRounds(b, &rounds);
  if (best_iter >= 0 && best_iter + 1 < rounds) {
    BoosterHandle sliced = NULL;
    if (XGBoosterSlice(b, 0, best_iter + 1, 1, &sliced) != 0) {
      ok = xgb_fail(st, "slice");
      goto done;
    }
    XGBoosterFree(b);
    b = sliced;
  }
  if (m->booster) XGBoosterFree(m->booster);
  m->booster = b;
  b = NULL;
  m->last_train_size = m->n_samples;
done:
  if (b) XGBoosterFree(b);
  if (dm) XGDMatrixFree(dm);
  free(grad);
  free(hess);
  free(cpred);
  data_free(&d);
  return ok;
}

void search_cost_model_add(search_cost_model *m, const char *group, const search_features *feats,
                           const double *costs, int n) {
  cm_group *g = group_get(m, group);
  for (int i = 0; i < n; i++) {
    if (feats[i].n == 0) continue;
    for (size_t k = 0; k < (size_t)feats[i].n * SEARCH_FEATURE_LEN; k++)
      DG_VEC_PUSH(&g->rows, feats[i].rows[k]);
    DG_VEC_PUSH(&g->n_rows, feats[i].n);
    double c = costs[i] > 0 && costs[i] < SEARCH_FAILED_SECS ? costs[i] : SEARCH_FAILED_SECS;
    DG_VEC_PUSH(&g->costs, c);
    m->n_samples++;
  }
}

bool search_cost_model_retrain(search_cost_model *m, dg_status *st) {
  dg_status_ok(st);
  return train(m, st);
}

bool search_cost_model_update(search_cost_model *m, const char *group, const search_features *feats,
                              const double *costs, int n, dg_status *st) {
  dg_status_ok(st);
  search_cost_model_add(m, group, feats, costs, n);
  if (m->o.adaptive_training && m->booster &&
      m->n_samples - m->last_train_size < m->last_train_size / 5)
    return true;
  return train(m, st);
}

bool search_cost_model_predict(search_cost_model *m, const search_features *feats, int n,
                               double *scores, dg_status *st) {
  dg_status_ok(st);
  if (!search_cost_model_trained(m)) {
    for (int i = 0; i < n; i++) scores[i] = dg_rng_uniform(&m->rng);
    return true;
  }
  int rows = 0;
  for (int i = 0; i < n; i++) rows += feats[i].n;
  for (int i = 0; i < n; i++) scores[i] = 0;
  if (rows == 0) return true;
  float *x = dg_malloc(sizeof(float) * (size_t)rows * SEARCH_FEATURE_LEN);
  int r = 0;
  for (int i = 0; i < n; i++)
    for (int j = 0; j < feats[i].n; j++, r++)
      for (int f = 0; f < SEARCH_FEATURE_LEN; f++)
        x[(size_t)r * SEARCH_FEATURE_LEN + f] =
            (float)feats[i].rows[(size_t)j * SEARCH_FEATURE_LEN + f];
  DMatrixHandle dm = NULL;
  bool ok = true;
  bst_ulong len = 0;
  const float *pred = NULL;
  if (XGDMatrixCreateFromMat(x, (bst_ulong)rows, SEARCH_FEATURE_LEN, NAN, &dm) != 0) {
    ok = xgb_fail(st, "DMatrix");
  } else if (XGBoosterPredict(m->booster, dm, 0, 0, 0, &len, &pred) != 0 ||
             len != (bst_ulong)rows) {
    ok = xgb_fail(st, "predict");
  } else {
    r = 0;
    for (int i = 0; i < n; i++)
      for (int j = 0; j < feats[i].n; j++) scores[i] += pred[r++];
    for (int i = 0; i < n; i++)
      if (!(scores[i] >= 0)) scores[i] = 0; /* TVM clamps at 0 (and NaN -> 0) */
  }
  if (dm) XGDMatrixFree(dm);
  free(x);
  return ok;
}

/* ---- save / load ------------------------------------------------------------ */

#define CM_MAGIC 0x47584744u /* "DGXG" */
#define CM_VERSION 1

static void put_u32(dg_str *s, uint32_t v) { dg_str_putn(s, (const char *)&v, 4); }
static void put_f64(dg_str *s, double v) { dg_str_putn(s, (const char *)&v, 8); }

static char *path_in(const char *dir, const char *name) {
  dg_str s;
  dg_str_init(&s);
  dg_str_printf(&s, "%s/%s", dir, name);
  return dg_str_take(&s);
}

bool search_cost_model_save(const search_cost_model *m, const char *dir, dg_status *st) {
  dg_status_ok(st);
  if (!dg_mkdirs(dir, st)) return false;
  dg_str s;
  dg_str_init(&s);
  put_u32(&s, CM_MAGIC);
  put_u32(&s, CM_VERSION);
  put_u32(&s, SEARCH_FEATURE_LEN);
  put_u32(&s, (uint32_t)m->groups.len);
  for (size_t gi = 0; gi < m->groups.len; gi++) {
    const cm_group *g = &m->groups.data[gi];
    uint32_t nl = (uint32_t)strlen(g->name);
    put_u32(&s, nl);
    dg_str_putn(&s, g->name, nl);
    put_u32(&s, (uint32_t)g->costs.len);
    size_t off = 0;
    for (size_t k = 0; k < g->costs.len; k++) {
      put_u32(&s, (uint32_t)g->n_rows.data[k]);
      put_f64(&s, g->costs.data[k]);
      for (size_t j = 0; j < (size_t)g->n_rows.data[k] * SEARCH_FEATURE_LEN; j++)
        put_f64(&s, g->rows.data[off++]);
    }
  }
  /* one zstd frame: the features of 20,000 records are about 100 MB raw
   * and 27 times smaller packed, small enough to carry to a GPU machine */
  dg_str z;
  dg_str_init(&z);
  char *p = path_in(dir, "data.bin");
  bool ok = dg_zstd_pack(s.s, s.len, 3, &z, st) && dg_write_file_atomic(p, z.s, z.len, st);
  free(p);
  dg_str_free(&s);
  dg_str_free(&z);
  /* the trees as XGBoost's JSON, zstd-packed (6.9 MB of JSON for the
   * labelling's model, a fifth of that packed: it travels to the GPU
   * machine beside the tree) */
  if (ok && m->booster) {
    p = path_in(dir, "model.json.zst");
    bst_ulong n = 0;
    const char *json = NULL;
    if (XGBoosterSaveModelToBuffer(m->booster, "{\"format\": \"json\"}", &n, &json) != 0) {
      ok = xgb_fail(st, p);
    } else {
      dg_str_init(&z);
      ok = dg_zstd_pack(json, (size_t)n, 9, &z, st) && dg_write_file_atomic(p, z.s, z.len, st);
      dg_str_free(&z);
    }
    free(p);
    /* the unpacked file of an earlier save goes: the packed one stands */
    p = path_in(dir, "model.json");
    unlink(p);
    free(p);
  }
  return ok;
}

typedef struct {
  const unsigned char *p;
  size_t n, pos;
} reader;

static bool get(reader *r, void *out, size_t n) {
  if (r->pos + n > r->n) return false;
  memcpy(out, r->p + r->pos, n);
  r->pos += n;
  return true;
}

bool search_cost_model_load(search_cost_model *m, const char *dir, dg_status *st) {
  dg_status_ok(st);
  char *p = path_in(dir, "data.bin");
  size_t len;
  char *buf = dg_read_file(p, &len, st);
  if (!buf) {
    free(p);
    return false;
  }
  /* packed since version 1 was first saved raw; both load */
  static const unsigned char zstd_magic[4] = {0x28, 0xb5, 0x2f, 0xfd};
  if (len >= 4 && memcmp(buf, zstd_magic, 4) == 0) {
    /* 2 GiB: 400,000 records' features, far past any warm start */
    char *raw = dg_zstd_unpack(buf, len, p, (size_t)2 << 30, &len, st);
    free(buf);
    if (!raw) {
      free(p);
      return false;
    }
    buf = raw;
  }
  reader r = {(const unsigned char *)buf, len, 0};
  uint32_t magic = 0, version = 0, flen = 0, ng = 0;
  bool ok = get(&r, &magic, 4) && get(&r, &version, 4) && get(&r, &flen, 4) && get(&r, &ng, 4);
  if (!ok || magic != CM_MAGIC) {
    ok = dg_fail(st, DG_ERR_PARSE, "%s: not a dragon cost-model data file", p);
  } else if (version != CM_VERSION || flen != SEARCH_FEATURE_LEN) {
    ok = dg_fail(st, DG_ERR_PARSE, "%s: version %u with %u features, expected %d with %d", p,
                 version, flen, CM_VERSION, SEARCH_FEATURE_LEN);
  }
  search_cost_model tmp;
  memset(&tmp, 0, sizeof tmp);
  for (uint32_t gi = 0; ok && gi < ng; gi++) {
    uint32_t nl = 0, nc = 0;
    char name[512];
    if (!get(&r, &nl, 4) || nl >= sizeof name || !get(&r, name, nl) || !get(&r, &nc, 4)) {
      ok = dg_fail(st, DG_ERR_PARSE, "%s: truncated in group %u", p, gi);
      break;
    }
    name[nl] = 0;
    cm_group *g = group_get(&tmp, name);
    for (uint32_t k = 0; ok && k < nc; k++) {
      uint32_t rows = 0;
      double cost = 0;
      if (!get(&r, &rows, 4) || !get(&r, &cost, 8) ||
          r.pos + (size_t)rows * SEARCH_FEATURE_LEN * 8 > r.n) {
        ok = dg_fail(st, DG_ERR_PARSE, "%s: truncated in group %s, candidate %u", p, name, k);
        break;
      }
      for (size_t j = 0; j < (size_t)rows * SEARCH_FEATURE_LEN; j++) {
        double v;
        get(&r, &v, 8);
        DG_VEC_PUSH(&g->rows, v);
      }
      DG_VEC_PUSH(&g->n_rows, (int)rows);
      DG_VEC_PUSH(&g->costs, cost);
      tmp.n_samples++;
    }
  }
  free(buf);
  free(p);
  if (!ok) {
    free_groups(&tmp);
    return false;
  }
  /* the trees: model.json.zst, or model.json as saved before */
  BoosterHandle b = NULL;
  p = path_in(dir, "model.json.zst");
  size_t zn = 0;
  char *zb = dg_read_file(p, &zn, NULL);
  if (zb) {
    size_t jn = 0;
    char *json = dg_zstd_unpack(zb, zn, p, (size_t)1 << 30, &jn, st);
    free(zb);
    if (!json) {
      ok = false;
    } else if (XGBoosterCreate(NULL, 0, &b) != 0 ||
               XGBoosterLoadModelFromBuffer(b, json, (bst_ulong)jn) != 0) {
      ok = xgb_fail(st, p);
    }
    free(json);
  } else {
    free(p);
    p = path_in(dir, "model.json");
    FILE *fp = fopen(p, "r");
    if (fp) {
      fclose(fp);
      if (XGBoosterCreate(NULL, 0, &b) != 0 || XGBoosterLoadModel(b, p) != 0)
        ok = xgb_fail(st, p);
    }
  }
  free(p);
  if (!ok) {
    if (b) XGBoosterFree(b);
    free_groups(&tmp);
    return false;
  }
  free_groups(m);
  m->groups = tmp.groups;
  m->n_samples = tmp.n_samples;
  if (m->booster) XGBoosterFree(m->booster);
  m->booster = b;
  m->last_train_size = b ? m->n_samples : 0;
  return true;
}

/* ---- ranking quality ---------------------------------------------------------- */

bool search_cost_model_recall(search_cost_model *m, const search_features *feats, const double *costs,
                              const int *group_of, int n, search_recall *out, dg_status *st) {
  memset(out, 0, sizeof *out);
  double *pred = dg_malloc(sizeof(double) * (size_t)(n ? n : 1));
  if (!search_cost_model_predict(m, feats, n, pred, st)) {
    free(pred);
    return false;
  }
  int max_g = -1;
  for (int i = 0; i < n; i++)
    if (group_of[i] > max_g) max_g = group_of[i];
  int *idx = dg_malloc(sizeof(int) * (size_t)(n ? n : 1));
  for (int g = 0; g <= max_g; g++) {
    int k = 0;
    for (int i = 0; i < n; i++)
      if (group_of[i] == g && costs[i] < SEARCH_FAILED_SECS) idx[k++] = i;
    if (k == 0) continue;
    int top = k < 5 ? k : 5;
    /* measured top and predicted top by partial selection (small k) */
    int mt[5], pt[5];
    bool *used_m = dg_calloc((size_t)k, 1), *used_p = dg_calloc((size_t)k, 1);
    for (int t = 0; t < top; t++) {
      int bm = -1, bp = -1;
      for (int j = 0; j < k; j++) {
        if (!used_m[j] && (bm < 0 || costs[idx[j]] < costs[idx[bm]])) bm = j;
        if (!used_p[j] && (bp < 0 || pred[idx[j]] > pred[idx[bp]])) bp = j;
      }
      used_m[bm] = used_p[bp] = true;
      mt[t] = bm;
      pt[t] = bp;
    }
    int hit = 0;
    for (int a = 0; a < top; a++)
      for (int b = 0; b < top; b++)
        if (mt[a] == pt[b]) hit++;
    out->top1 += costs[idx[pt[0]]] <= costs[idx[mt[0]]] ? 1 : 0;
    out->top5 += (double)hit / top;
    out->n_groups++;
    free(used_m);
    free(used_p);
  }
  if (out->n_groups) {
    out->top1 /= out->n_groups;
    out->top5 /= out->n_groups;
  }
  free(idx);
  free(pred);
  return true;
}
