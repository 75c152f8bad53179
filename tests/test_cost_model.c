/* test_cost_model.c: per-store features of known kernels, and the XGBoost
 * cost model on synthetic data (a planted fast candidate must rank first),
 * its save/load and its random scores before training. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "dragon/search.h"
#include "dragon/wl.h"
#include "test.h"

/* ---- features ---------------------------------------------------------------- */

/* batch_matmul 1 x 8 x 16 x 4 with loops b, i, k, j: a parallel i and a
 * vectorized j. Z[b, i, j] += X[b, i, k] * Y[b, k, j]. */
static sched *matmul_sched(dg_func **fout) {
  dg_status st;
  dg_func *f = wl_build("batch_matmul:b=1,n=8,m=16,k=4,dtype=f32", &st);
  if (!f) return NULL;
  sched *s = sched_new(f, 0);
  int blk = sched_get_block(s, "Z", "main", &st);
  int l[4];
  bool ok = blk >= 0 && sched_get_loops(s, blk, l, 4, &st) == 4;
  int order[4] = {l[0], l[1], l[3], l[2]};
  ok = ok && sched_reorder(s, order, 4, &st) && sched_parallel(s, l[1], &st) &&
       sched_vectorize(s, l[2], &st);
  if (!ok) {
    fprintf(stderr, "%s\n", st.msg);
    sched_free(s);
    ir_func_free(f);
    return NULL;
  }
  *fout = f;
  return s;
}

static int feat(const char *name) {
  char buf[64];
  for (int i = 0; i < SEARCH_FEATURE_LEN; i++)
    if (strcmp(search_feature_name(i, buf, sizeof buf), name) == 0) return i;
  return -1;
}

DG_TEST(cost_features_matmul_counts) {
  dg_status st;
  dg_func *f0 = NULL;
  sched *sc = matmul_sched(&f0);
  CHECK(sc);
  const dg_func *f = sched_func(sc);
  search_features x;
  CHECK(search_features_extract(f, false, &x, &st));
  CHECK_EQ(x.n, 1); /* one non-constant store (the init stores 0) */
  const double *v = x.rows;
  double prod = 8 * 4 * 16;
  /* one add and one multiply per iteration, 512 iterations */
  CHECK_NEAR(v[feat("float_add_sub")], log2(prod + 1), 1e-9);
  CHECK_NEAR(v[feat("float_mul")], log2(prod + 1), 1e-9);
  CHECK_NEAR(v[feat("float_div_mod")], 0, 1e-12);
  CHECK_NEAR(v[feat("int_add_sub")], 0, 1e-12);
  /* loop kinds: one vectorized loop of 16, one parallel loop of 8, no unroll */
  CHECK_NEAR(v[feat("vec_num")], 1, 1e-12);
  CHECK_NEAR(v[feat("vec_prod")], log2(17), 1e-12);
  CHECK_NEAR(v[feat("vec_len")], log2(17), 1e-12);
  CHECK_NEAR(v[feat("vec_pos_mixed")], 1, 0);
  CHECK_NEAR(v[feat("unroll_pos_none")], 1, 0);
  CHECK_NEAR(v[feat("unroll_num")], 0, 0);
  CHECK_NEAR(v[feat("parallel_prod")], log2(9), 1e-12);
  CHECK_NEAR(v[feat("is_gpu")], 0, 0);
  /* group 5: three loops (the unit loop b is not one), product 512 */
  CHECK_NEAR(v[SEARCH_FEAT_G5 + 0], log2(prod + 1), 1e-9);
  CHECK_NEAR(v[SEARCH_FEAT_G5 + 1], 2, 1e-12);
  CHECK_NEAR(v[SEARCH_FEAT_G5 + 2], 0, 0);
  /* group 2: Z is read-write, X and Y read, each touched 512 times */
  int rw = 0, rd = 0;
  for (int b = 0; b < 5; b++) {
    const double *s = v + SEARCH_FEAT_G2 + 18 * b;
    if (s[2] == 1) rw++;
    if (s[0] == 1) rd++;
    if (s[0] + s[1] + s[2] > 0) CHECK_NEAR(s[3], log2(4 * prod + 1), 1e-9); /* bytes */
  }
  CHECK_EQ(rw, 1);
  CHECK_EQ(rd, 2);
  /* X[b, i, k] does not depend on j, the innermost loop: loop-invariant
   * reuse with count 16; its unique bytes are all of X (8 * 4 floats) */
  bool found_a = false;
  for (int b = 0; b < 3; b++) {
    const double *s = v + SEARCH_FEAT_G2 + 18 * b;
    if (fabs(s[4] - log2(8 * 4 * 4 + 1)) < 1e-9 && s[7] == 1) {
      CHECK_NEAR(s[12], log2(17), 1e-9); /* reuse count 16 */
      CHECK_NEAR(s[10], 1, 1e-9);        /* reuse distance: 1 iteration */
      found_a = true;
    }
  }
  CHECK(found_a);
  /* group 4: Z is a parameter of 8 * 16 floats */
  CHECK_NEAR(v[SEARCH_FEAT_G4 + 0], log2(8 * 16 * 4 + 1), 1e-9);
  search_features y;
  CHECK(search_features_extract(f, false, &y, &st));
  CHECK(memcmp(x.rows, y.rows, sizeof(double) * SEARCH_FEATURE_LEN) == 0); /* deterministic */
  search_features_free(&x);
  search_features_free(&y);
  sched_free(sc);
  ir_func_free(f0);
}

DG_TEST(cost_features_gpu_schedule) {
  /* the GMM design space's recorded decisions on GMM/0: extents known from
   * the tiles [1,1,1,1,1] [1,32,1,2,2] [1,1,2,64,1] [1,32,4] */
  dg_status st;
  dg_func *f = wl_build("GMM/0", &st);
  CHECK_MSG(f, "%s", st.msg);
  size_t len;
  char *json = dg_read_file(dg_test_data("traces/gmm0_space.json"), &len, &st);
  CHECK(json);
  sched_trace *t = sched_trace_from_json(json, &st);
  free(json);
  CHECK(t);
  sched *s = sched_new(f, 0);
  CHECK(sched_replay(s, t, false, true, &st));
  search_features x;
  CHECK(search_features_extract(sched_func(s), true, &x, &st));
  /* stores: X_shared, Y_shared (copies), Z_local (compute), Z (write-back) */
  CHECK_EQ(x.n, 4);
  const double *z = NULL;
  for (int r = 0; r < x.n; r++) {
    const double *v = x.rows + (size_t)r * SEARCH_FEATURE_LEN;
    CHECK_NEAR(v[feat("is_gpu")], 1, 0);
    CHECK_NEAR(v[feat("blockIdx_x_len")], log2(1 * 1 * 1 + 1), 1e-9);   /* 1*1*1 */
    CHECK_NEAR(v[feat("vthread_len")], log2(32 * 1 + 1), 1e-9);         /* 1*32*1 */
    CHECK_NEAR(v[feat("threadIdx_x_len")], log2(1 * 1 * 2 + 1), 1e-9);  /* 1*1*2 */
    if (v[feat("float_mul")] > 0) z = v;
  }
  CHECK(z);
  /* the multiply-add runs 128 * 128 * 128 times */
  CHECK_NEAR(z[feat("float_mul")], log2(128.0 * 128 * 128 + 1), 1e-9);
  search_features_free(&x);
  sched_free(s);
  sched_trace_free(t);
  ir_func_free(f);
}

/* ---- cost model ----------------------------------------------------------------- */

/* Candidates of a synthetic workload: 1-2 rows of random features; the cost
 * depends on two of them; one planted candidate is much faster. */
static void synth(dg_rng *r, int n, search_features *feats, double *costs, int every) {
  for (int i = 0; i < n; i++) {
    int rows = 1 + (int)dg_rng_below(r, 2);
    feats[i].n = rows;
    feats[i].rows = dg_calloc((size_t)rows * SEARCH_FEATURE_LEN, sizeof(double));
    double a = dg_rng_uniform(r) * 4, b = dg_rng_uniform(r) * 4;
    bool planted = every > 0 && i % every == 0;
    if (planted) a = b = 0;
    for (int k = 0; k < rows; k++) {
      double *v = feats[i].rows + (size_t)k * SEARCH_FEATURE_LEN;
      for (int j = 0; j < SEARCH_FEATURE_LEN; j++) v[j] = dg_rng_uniform(r);
      v[3] = a;
      v[60] = b;
    }
    costs[i] = (planted ? 0.05 : 1 + a + b) * 1e-3;
  }
}

static void free_feats(search_features *f, int n) {
  for (int i = 0; i < n; i++) search_features_free(&f[i]);
}

DG_TEST(cost_model_ranks_planted_first) {
  dg_rng r;
  dg_rng_seed(&r, 42);
  enum { N = 240, H = 40 };
  search_features tr[N], te[H];
  double ctr[N], cte[H];
  synth(&r, N, tr, ctr, 40); /* 6 fast ones to learn from */
  synth(&r, H, te, cte, 1000); /* one fast one, the first */
  search_xgb_opts o;
  search_xgb_opts_default(&o);
  o.nthread = 1;
  search_cost_model *m = search_cost_model_new(&o, 1);
  dg_status st;
  /* untrained: random scores in [0, 1) */
  double sc[H];
  CHECK(search_cost_model_predict(m, te, H, sc, &st));
  CHECK(!search_cost_model_trained(m));
  for (int i = 0; i < H; i++) CHECK(sc[i] >= 0 && sc[i] < 1);
  CHECK(search_cost_model_update(m, "w", tr, ctr, N, &st));
  CHECK_OK(st);
  CHECK(search_cost_model_trained(m));
  CHECK_EQ(search_cost_model_samples(m), N);
  int group[H];
  for (int i = 0; i < H; i++) group[i] = 0;
  search_recall rc;
  CHECK(search_cost_model_recall(m, te, cte, group, H, &rc, &st));
  CHECK_EQ(rc.n_groups, 1);
  CHECK_NEAR(rc.top1, 1, 0); /* the planted candidate is predicted best */
  CHECK(rc.top5 >= 0.2); /* the planted one is in both top 5 */
  /* save, load into a fresh model: the same predictions */
  char dir[512];
  snprintf(dir, sizeof dir, "%s/cost_model", dg_test_tmpdir());
  CHECK(search_cost_model_save(m, dir, &st));
  search_cost_model *m2 = search_cost_model_new(&o, 2);
  CHECK(search_cost_model_load(m2, dir, &st));
  CHECK(search_cost_model_trained(m2));
  CHECK_EQ(search_cost_model_samples(m2), N);
  double a[H], b[H];
  CHECK(search_cost_model_predict(m, te, H, a, &st));
  CHECK(search_cost_model_predict(m2, te, H, b, &st));
  for (int i = 0; i < H; i++) CHECK_NEAR(a[i], b[i], 1e-6);
  /* the data is one zstd frame; the raw bytes of the first saves load too */
  char data[600];
  snprintf(data, sizeof data, "%s/data.bin", dir);
  size_t zn = 0, rn = 0;
  char *z = dg_read_file(data, &zn, &st);
  CHECK(z && zn > 4 && memcmp(z, "\x28\xb5\x2f\xfd", 4) == 0);
  char *raw = z ? dg_zstd_unpack(z, zn, data, 0, &rn, &st) : NULL;
  CHECK(raw && rn > zn && memcmp(raw, "DGXG", 4) == 0);
  if (raw) CHECK(dg_write_file_atomic(data, raw, rn, &st));
  search_cost_model *m3 = search_cost_model_new(&o, 3);
  CHECK(search_cost_model_load(m3, dir, &st));
  CHECK_EQ(search_cost_model_samples(m3), N);
  search_cost_model_free(m3);
  /* a frame cut short is refused, naming the file */
  if (z) CHECK(dg_write_file_atomic(data, z, zn / 2, &st));
  search_cost_model *m4 = search_cost_model_new(&o, 4);
  CHECK(!search_cost_model_load(m4, dir, &st));
  CHECK_ERR(st, "data.bin");
  search_cost_model_free(m4);
  free(z);
  free(raw);
  /* warm start: a second workload's data joins the first's */
  CHECK(search_cost_model_update(m2, "w2", te, cte, H, &st));
  CHECK_EQ(search_cost_model_samples(m2), N + H);
  search_cost_model_free(m);
  search_cost_model_free(m2);
  free_feats(tr, N);
  free_feats(te, H);
}

DG_TEST(cost_model_load_rejects_garbage) {
  char dir[512];
  snprintf(dir, sizeof dir, "%s/cost_garbage", dg_test_tmpdir());
  dg_status st;
  CHECK(dg_mkdirs(dir, &st));
  char path[600];
  snprintf(path, sizeof path, "%s/data.bin", dir);
  CHECK(dg_write_file_atomic(path, "not a model", 11, &st));
  search_cost_model *m = search_cost_model_new(NULL, 1);
  CHECK(!search_cost_model_load(m, dir, &st));
  CHECK_ERR(st, "not a dragon cost-model data file");
  CHECK(!search_cost_model_trained(m));
  search_cost_model_free(m);
}
