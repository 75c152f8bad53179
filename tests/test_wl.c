/* test_wl.c: workload families, specs, aliases and the generator.
 *
 * Every family's example builds (and verifies); all 52 aliases build and
 * canonicalise to known specs; known kernels have known shapes, blocks and
 * buffer names (TVM's); the bytes a family declares equal the bytes of the
 * kernel it builds; small instances of every family run in the interpreter
 * (which rejects out-of-bounds accesses) and a set of them match naive
 * references computed here; bad specs get messages naming the key; the
 * generator is distinct, deterministic and canonical; fuzz regressions
 * replay without crashing.
 */
#include <dirent.h>
#include <math.h>
#include <stdlib.h>

#include "dragon/rt.h"
#include "dragon/wl.h"
#include "test.h"
#include "wl/wl_impl.h"

/* Bytes of every buffer the kernel holds: parameters and root allocations. */
static int64_t kernel_bytes(const dg_func *f) {
  int64_t n = 0;
  for (int i = 0; i < f->n_params; i++)
    n += ir_buffer_numel(f->params[i]) * dg_dtype_bytes(f->params[i]->dtype);
  const dg_block *root = ir_func_root(f);
  for (int i = 0; i < root->n_allocs; i++)
    n += ir_buffer_numel(root->allocs[i]) * dg_dtype_bytes(root->allocs[i]->dtype);
  return n;
}

static int64_t declared_bytes(const char *spec) {
  wl_params p;
  dg_status st;
  if (!wl_params_parse(spec, &p, &st)) return -1;
  int64_t b = 0;
  if (!p.fam->check(p.v, &b, &st)) return -1;
  return b;
}

static bool shape_is(const dg_buffer *b, int n, const int64_t *s) {
  if (!b || b->ndim != n) return false;
  for (int i = 0; i < n; i++)
    if (b->shape[i] != s[i]) return false;
  return true;
}
#define SHAPE(b, ...) shape_is((b), (int)(sizeof((int64_t[]){__VA_ARGS__}) / sizeof(int64_t)), \
                               (int64_t[]){__VA_ARGS__})

/* Canonicalises and builds a spec, checking the invariants every spec
 * shares. Returns the kernel or NULL after a failure was reported. */
static dg_func *build_checked(const char *spec) {
  dg_status st;
  char *c = wl_canonical(spec, &st);
  CHECKR(c != NULL, NULL);
  char *c2 = wl_canonical(c, &st);
  bool same = c2 && strcmp(c, c2) == 0;
  free(c2);
  if (!same) {
    dg_test_fail(__FILE__, __LINE__, "canonical form of %s is not a fixed point", spec);
    free(c);
    return NULL;
  }
  dg_func *f = wl_build(spec, &st);
  if (!f) {
    dg_test_fail(__FILE__, __LINE__, "%s: %s", spec, st.msg);
    free(c);
    return NULL;
  }
  bool ok = strcmp(f->name, "main") == 0 && strcmp(ir_func_root(f)->name, "root") == 0;
  if (!ok) dg_test_fail(__FILE__, __LINE__, "%s: kernel or root misnamed", spec);
  if (ok && !ir_verify(f, &st)) {
    dg_test_fail(__FILE__, __LINE__, "%s: ir_verify: %s", spec, st.msg);
    ok = false;
  }
  int64_t kb = kernel_bytes(f), db = declared_bytes(c);
  if (ok && kb != db) {
    dg_test_fail(__FILE__, __LINE__, "%s: kernel holds %lld bytes, family declares %lld", spec,
                 (long long)kb, (long long)db);
    ok = false;
  }
  if (ok && kb > WL_MAX_BYTES) {
    dg_test_fail(__FILE__, __LINE__, "%s: %lld bytes exceed WL_MAX_BYTES", spec, (long long)kb);
    ok = false;
  }
  free(c);
  if (!ok) {
    ir_func_free(f);
    return NULL;
  }
  return f;
}

DG_TEST(wl_family_examples) {
  CHECK(wl_family_count() >= 20);
  for (int i = 0; i < wl_family_count(); i++) {
    dg_status st;
    char *c = wl_canonical(wl_family_example(i), &st);
    CHECK_MSG(c != NULL, "%s: %s", wl_family_example(i), st.msg);
    CHECK_STREQ(c, wl_family_example(i));
    free(c);
    CHECK(strncmp(wl_family_example(i), wl_family_name(i), strlen(wl_family_name(i))) == 0);
    CHECK(strlen(wl_family_about(i)) > 10 && !strchr(wl_family_about(i), '\n'));
    dg_func *f = build_checked(wl_family_example(i));
    CHECK(f != NULL);
    ir_func_free(f);
    for (int j = 0; j < i; j++) CHECK(strcmp(wl_family_name(i), wl_family_name(j)) != 0);
  }
}

DG_TEST(wl_aliases_build) {
  CHECK_EQ(wl_alias_count(), 13);
  const char *names = "C1D C2D C3D CAP DEP DIL GMM GRP T2D NRM SFM CBR TBG";
  int built = 0;
  for (int i = 0; i < wl_alias_count(); i++) {
    CHECK(strstr(names, wl_alias_name(i)) != NULL);
    for (int k = 0; k < 4; k++) {
      char a[16];
      snprintf(a, sizeof a, "%s/%d", wl_alias_name(i), k);
      dg_status st;
      char *c = wl_canonical(a, &st);
      CHECK_MSG(c != NULL, "%s: %s", a, st.msg);
      CHECK(strstr(c, "dtype=f32") != NULL);
      dg_func *f = build_checked(a);
      CHECK(f != NULL);
      /* the alias builds the same kernel as its spec */
      dg_func *g = wl_build(c, &st);
      CHECK(g != NULL);
      char *pa = ir_print(f), *pb = ir_print(g);
      CHECK_STREQ(pa, pb);
      free(pa);
      free(pb);
      ir_func_free(g);
      ir_func_free(f);
      free(c);
      built++;
    }
  }
  CHECK_EQ(built, 52);
}

DG_TEST(wl_alias_canonical) {
  static const struct {
    const char *in, *want;
  } cases[] = {
      {"GMM/0", "batch_matmul:b=1,n=128,m=128,k=128,dtype=f32"},
      {"GMM", "batch_matmul:b=1,n=128,m=128,k=128,dtype=f32"},
      {"GMM/1", "batch_matmul:b=1,n=512,m=32,k=512,dtype=f32"},
      {"C2D/0",
       "conv2d_nhwc:n=1,h=224,w=224,ci=3,co=64,kernel=7,stride=2,pad=3,dilation=1,groups=1,"
       "dtype=f32"},
      {"GRP/0",
       "conv2d_nhwc:n=1,h=56,w=56,ci=64,co=128,kernel=3,stride=2,pad=1,dilation=1,groups=4,"
       "dtype=f32"},
      {"DIL/3",
       "conv2d_nhwc:n=1,h=7,w=7,ci=512,co=512,kernel=3,stride=1,pad=1,dilation=2,groups=1,"
       "dtype=f32"},
      {"SFM/3", "softmax:m=2048,n=2048,dtype=f32"},
      {"NRM/3", "norm_bmn:b=1,m=4096,n=1024,dtype=f32"},
      {"TBG/2", "transpose_batch_matmul:batch=1,seq=64,heads=12,dim=128,dtype=f32"},
      {"C1D/2",
       "conv1d_nlc:n=1,l=64,ci=256,co=256,kernel=5,stride=1,pad=2,dilation=1,groups=1,dtype=f32"},
      {"DEP/1",
       "depthwise_conv2d_nhwc:n=1,h=112,w=112,c=64,kernel=3,stride=2,pad=1,dilation=1,dtype=f32"},
      {"CAP/2",
       "conv2d_capsule_nhwijc:n=1,h=16,w=16,ci=8,co=16,kernel=3,stride=2,pad=1,capsule=4,"
       "dtype=f32"},
      {"T2D/3", "conv2d_transpose_nhwc:n=1,h=32,w=32,ci=64,co=3,kernel=4,stride=2,pad=1,dtype=f32"},
      {"CBR/2",
       "conv2d_bias_bn_relu:n=1,h=28,w=28,ci=128,co=256,kernel=1,stride=2,pad=0,dilation=1,"
       "dtype=f32"},
      /* keys in any order, defaults filled in */
      {"gemm:k=64,n=32,m=16", "gemm:m=16,n=32,k=64,trans_a=0,trans_b=0,dtype=f32"},
      {"softmax:dtype=f16,n=7,m=3", "softmax:m=3,n=7,dtype=f16"},
  };
  for (size_t i = 0; i < DG_ARRAY_LEN(cases); i++) {
    dg_status st;
    char *c = wl_canonical(cases[i].in, &st);
    CHECK_MSG(c != NULL, "%s: %s", cases[i].in, st.msg);
    CHECK_STREQ(c, cases[i].want);
    free(c);
  }
}

static const dg_buffer *param(const dg_func *f, int i) {
  return i < f->n_params ? f->params[i] : NULL;
}

DG_TEST(wl_known_shapes) {
  dg_status st;
  dg_func *f = wl_build("C2D/0", &st);
  CHECK(f != NULL);
  CHECK(SHAPE(ir_find_buffer(f, "PadInput"), 1, 230, 230, 3));
  CHECK(SHAPE(ir_find_buffer(f, "conv2d_nhwc"), 1, 112, 112, 64));
  CHECK(SHAPE(param(f, 1), 7, 7, 3, 64));
  ir_func_free(f);

  f = wl_build("T2D/0", &st);
  CHECK(SHAPE(ir_find_buffer(f, "PadInput"), 1, 6, 6, 512));
  CHECK(SHAPE(param(f, 2), 1, 8, 8, 256));
  ir_func_free(f);

  f = wl_build("C3D/0", &st);
  CHECK(SHAPE(ir_find_buffer(f, "PadInput"), 1, 22, 230, 230, 3));
  CHECK(SHAPE(param(f, 2), 1, 8, 112, 112, 64));
  ir_func_free(f);

  f = wl_build("GRP/0", &st);
  CHECK(SHAPE(param(f, 1), 3, 3, 16, 128));
  CHECK(SHAPE(param(f, 2), 1, 28, 28, 128));
  ir_func_free(f);

  f = wl_build("DIL/0", &st); /* (224 + 6 - 2*6 - 1) // 2 + 1 = 109 */
  CHECK(SHAPE(param(f, 2), 1, 109, 109, 64));
  ir_func_free(f);

  f = wl_build("CAP/0", &st);
  CHECK(SHAPE(ir_find_buffer(f, "PadInput"), 1, 18, 18, 4, 4, 32));
  CHECK(SHAPE(param(f, 2), 1, 8, 8, 4, 4, 32));
  ir_func_free(f);

  f = wl_build("DEP/0", &st);
  CHECK(SHAPE(param(f, 1), 1, 3, 3, 32));
  CHECK(SHAPE(ir_find_buffer(f, "PadInput"), 1, 114, 114, 32));
  ir_func_free(f);

  f = wl_build("C1D/0", &st);
  CHECK(SHAPE(ir_find_buffer(f, "PadInput"), 1, 258, 64));
  CHECK(SHAPE(param(f, 2), 1, 128, 128));
  ir_func_free(f);

  f = wl_build("TBG/0", &st);
  CHECK(SHAPE(param(f, 2), 1, 12, 128, 128));
  CHECK(SHAPE(ir_find_buffer(f, "value_T"), 1, 12, 64, 128));
  ir_func_free(f);

  f = wl_build("gemm:m=3,n=5,k=7,trans_a=1,trans_b=1,dtype=f16", &st);
  CHECK(SHAPE(param(f, 0), 7, 3) && param(f, 0)->dtype == DG_F16);
  CHECK(SHAPE(param(f, 1), 5, 7) && param(f, 1)->dtype == DG_F16);
  CHECK(SHAPE(param(f, 2), 3, 5) && param(f, 2)->dtype == DG_F32);
  ir_func_free(f);

  f = wl_build("softmax:m=8,n=16,dtype=f16", &st);
  CHECK(param(f, 1)->dtype == DG_F16 && ir_find_buffer(f, "T_softmax_exp")->dtype == DG_F32);
  ir_func_free(f);
}

typedef struct {
  const char *names[16];
  int n;
} block_names;

static bool collect_block(dg_block *b, dg_stmt *s, void *ctx) {
  (void)s;
  block_names *bn = ctx;
  if (bn->n < 16) bn->names[bn->n] = b->name;
  bn->n++;
  return true;
}

DG_TEST(wl_alias_blocks) {
  static const struct {
    const char *alias;
    const char *blocks; /* pre-order, root first */
    const char *params;
  } cases[] = {
      {"C1D", "root PadInput conv1d_nlc", "inputs weight conv1d_nlc"},
      {"C2D", "root PadInput conv2d_nhwc", "inputs weight conv2d_nhwc"},
      {"C3D", "root PadInput conv3d_ndhwc", "inputs weight conv3d_ndhwc"},
      {"CAP", "root PadInput conv2d_capsule_nhwijc", "inputs weight conv2d_capsule_nhwijc"},
      {"DEP", "root PadInput depth_conv2d_nhwc", "placeholder placeholder_1 depth_conv2d_nhwc"},
      {"DIL", "root PadInput conv2d_nhwc", "inputs weight conv2d_nhwc"},
      {"GMM", "root Z", "X Y Z"},
      {"GRP", "root PadInput conv2d_nhwc", "inputs weight conv2d_nhwc"},
      {"T2D", "root PadInput conv2d_transpose_nhwc", "inputs weight conv2d_transpose_nhwc"},
      {"NRM", "root C D", "A D"},
      {"SFM", "root T_softmax_maxelem T_softmax_exp T_softmax_expsum T_softmax_norm",
       "A T_softmax_norm"},
      {"CBR", "root PaddedInput Conv2dOutput bias_add bn_mul bn_add compute",
       "data kernel bias bn_offset bn_scale compute"},
      {"TBG", "root query_T value_T C", "query value C"},
  };
  for (size_t i = 0; i < DG_ARRAY_LEN(cases); i++) {
    for (int k = 0; k < 4; k++) {
      char a[16];
      snprintf(a, sizeof a, "%s/%d", cases[i].alias, k);
      dg_status st;
      dg_func *f = wl_build(a, &st);
      CHECK_MSG(f != NULL, "%s: %s", a, st.msg);
      block_names bn = {{0}, 0};
      ir_visit_blocks(f->body, collect_block, &bn);
      dg_str got;
      dg_str_init(&got);
      for (int j = 0; j < bn.n && j < 16; j++) dg_str_printf(&got, "%s%s", j ? " " : "", bn.names[j]);
      CHECK_STREQ(got.s, cases[i].blocks);
      dg_str_clear(&got);
      for (int j = 0; j < f->n_params; j++)
        dg_str_printf(&got, "%s%s", j ? " " : "", f->params[j]->name);
      CHECK_STREQ(got.s, cases[i].params);
      dg_str_free(&got);
      ir_func_free(f);
    }
  }
  /* The details TVM's create_prim_func gives C2D: iteration variables,
   * kinds, bindings to loops of the axis names, the read points, the init. */
  dg_status st;
  dg_func *f = wl_build("C2D", &st);
  dg_block *b = ir_find_block(f, "conv2d_nhwc");
  CHECK(b && b->n_iters == 7 && b->n_reads == 2 && b->n_writes == 1 && b->init);
  const char *iv = "v_n v_h v_w v_co v_rh v_rw v_rc";
  dg_str s;
  dg_str_init(&s);
  for (int i = 0; i < b->n_iters; i++) {
    dg_str_printf(&s, "%s%s", i ? " " : "", b->iters[i].var->name);
    CHECK(b->iters[i].kind == (i < 4 ? DG_ITER_SPATIAL : DG_ITER_REDUCE));
    CHECK(b->iters[i].binding->kind == DG_EXPR_VAR &&
          strcmp(b->iters[i].binding->var->name, b->iters[i].var->name + 2) == 0);
  }
  CHECK_STREQ(s.s, iv);
  dg_str_clear(&s);
  for (int d = 0; d < 4; d++) {
    if (d) dg_str_puts(&s, ", ");
    ir_print_expr(&s, b->reads[0].min[d]);
  }
  CHECK_STREQ(s.s, "v_n, v_h * 2 + v_rh, v_w * 2 + v_rw, v_co // 64 * 3 + v_rc");
  dg_str_free(&s);
  CHECK(b->init->kind == DG_STMT_STORE && b->init->value->kind == DG_EXPR_FLOAT &&
        b->init->value->fval == 0.0);
  ir_func_free(f);

  f = wl_build("SFM", &st);
  b = ir_find_block(f, "T_softmax_maxelem");
  CHECK(b && b->init && b->init->value->fval == -3.4028234663852886e+38);
  b = ir_find_block(f, "T_softmax_norm");
  const dg_ann *ann = ir_anns_get(&b->anns, "axis");
  CHECK(ann && ann->kind == DG_ANN_INT && ann->i == 1);
  ir_func_free(f);
}

/* ---- numbers: small instances in the interpreter ---------------------------- */

typedef struct {
  dg_func *f;
  rt_tensors ts;
} run_t;

/* Builds, fills with seed 1 and runs the float64 reference interpreter. */
static bool run_small(const char *spec, run_t *r) {
  dg_status st;
  r->f = wl_build(spec, &st);
  CHECKR(r->f != NULL, false);
  CHECKR(rt_tensors_init(&r->ts, r->f, &st), false);
  rt_data_fill(&r->ts, 1, rt_data_dist_for(r->f));
  if (!rt_interp_run(r->f, r->ts.ref_args, true, &st)) {
    dg_test_fail(__FILE__, __LINE__, "%s: %s", spec, st.msg);
    return false;
  }
  return true;
}

static void run_free(run_t *r) {
  rt_tensors_free(&r->ts);
  ir_func_free(r->f);
}

static double in_at(run_t *r, int p, int64_t i) { return rt_data_get(&r->ts.t[p], i, true); }

/* Every family, small: no out-of-bounds access, every output finite. */
DG_TEST(wl_small_run_all) {
  static const char *const specs[] = {
      "gemm:m=5,n=3,k=4,trans_a=1", "batch_matmul:b=2,n=3,m=4,k=5", "gemv:n=7,k=5",
      "transpose_batch_matmul:batch=2,seq=5,heads=3,dim=4",
      "conv1d_nlc:n=2,l=9,ci=4,co=6,kernel=3,stride=2,pad=2,dilation=2,groups=2",
      "conv2d_nhwc:n=1,h=7,w=6,ci=4,co=4,kernel=3,stride=2,pad=1,dilation=2,groups=2",
      "conv2d_nchw:n=1,h=6,w=5,ci=3,co=2,kernel=3,stride=1,pad=1",
      "conv3d_ndhwc:n=1,d=4,h=5,w=5,ci=2,co=3,kernel=3,stride=2,pad=1",
      "depthwise_conv2d_nhwc:n=1,h=6,w=6,c=3,kernel=3,stride=2,pad=1",
      "conv2d_transpose_nhwc:n=1,h=3,w=4,ci=2,co=3,kernel=3,stride=2,pad=1",
      "conv2d_transpose_nhwc:n=1,h=3,w=3,ci=2,co=2,kernel=4,stride=3,pad=0",
      "conv2d_transpose_nhwc:n=1,h=3,w=3,ci=2,co=2,kernel=3,stride=1,pad=2",
      "conv2d_capsule_nhwijc:n=1,h=5,w=5,ci=2,co=2,kernel=3,stride=2,pad=1,capsule=2",
      "conv2d_bias_bn_relu:n=1,h=5,w=5,ci=2,co=3,kernel=3,stride=1,pad=1",
      "max_pool2d:n=1,c=2,h=5,w=5,kernel=3,stride=2,pad=1",
      "avg_pool2d:n=1,c=2,h=6,w=5,kernel=2,stride=2,pad=1",
      "norm_bmn:b=2,m=3,n=4", "softmax:m=3,n=5", "layernorm:m=3,n=8", "rmsnorm:m=3,n=8",
      "reduce_sum:m=4,n=5", "reduce_max:m=4,n=5", "bias_gelu:m=3,n=4", "silu_mul:m=3,n=4",
      "rope:b=1,s=3,h=2,d=4", "softmax:m=3,n=5,dtype=f16", "gemm:m=4,n=4,k=4,dtype=f16",
      "layernorm:m=2,n=4,dtype=f16", "max_pool2d:n=1,c=1,h=4,w=4,kernel=3,stride=1,pad=1,dtype=f16",
  };
  bool seen[64] = {false};
  for (size_t i = 0; i < DG_ARRAY_LEN(specs); i++) {
    run_t r;
    CHECK(run_small(specs[i], &r));
    for (int p = 0; p < r.ts.n; p++) {
      if (!r.ts.t[p].is_output) continue;
      for (int64_t j = 0; j < r.ts.t[p].numel; j++)
        CHECK_MSG(isfinite(rt_data_get(&r.ts.t[p], j, true)), "%s: output %lld not finite",
                  specs[i], (long long)j);
    }
    run_free(&r);
    wl_params p;
    dg_status st;
    CHECK(wl_params_parse(specs[i], &p, &st));
    for (int k = 0; k < wl_family_count(); k++)
      if (wl_family_at(k) == p.fam) seen[k] = true;
  }
  for (int k = 0; k < wl_family_count(); k++)
    CHECK_MSG(seen[k], "family %s has no small run", wl_family_name(k));
}

/* conv2d_nhwc with groups, dilation, stride and padding against the direct
 * definition. */
DG_TEST(wl_numeric_conv2d) {
  const int N = 1, H = 7, W = 6, CI = 4, CO = 6, K = 3, S = 2, P = 2, DIL = 2, G = 2;
  run_t r;
  CHECK(run_small("conv2d_nhwc:n=1,h=7,w=6,ci=4,co=6,kernel=3,stride=2,pad=2,dilation=2,groups=2",
                  &r));
  int OH = (H + 2 * P - DIL * (K - 1) - 1) / S + 1, OW = (W + 2 * P - DIL * (K - 1) - 1) / S + 1;
  CHECK_EQ(r.ts.t[2].numel, N * OH * OW * CO);
  for (int oh = 0; oh < OH; oh++)
    for (int ow = 0; ow < OW; ow++)
      for (int co = 0; co < CO; co++) {
        double acc = 0;
        for (int rh = 0; rh < K; rh++)
          for (int rw = 0; rw < K; rw++)
            for (int rc = 0; rc < CI / G; rc++) {
              int ih = oh * S + rh * DIL - P, iw = ow * S + rw * DIL - P;
              if (ih < 0 || ih >= H || iw < 0 || iw >= W) continue;
              int ci = co / (CO / G) * (CI / G) + rc;
              acc += in_at(&r, 0, (ih * W + iw) * CI + ci) *
                     in_at(&r, 1, ((rh * K + rw) * (CI / G) + rc) * CO + co);
            }
        CHECK_NEAR(in_at(&r, 2, (oh * OW + ow) * CO + co), acc, 1e-9);
      }
  run_free(&r);
}

/* conv2d_transpose_nhwc against the scatter definition
 * out[ih*s + kh - p] += in[ih] * w[kh], for strides 2 and 3. */
static void check_t2d(int H, int W, int CI, int CO, int K, int S, int P) {
  char spec[200];
  snprintf(spec, sizeof spec,
           "conv2d_transpose_nhwc:n=1,h=%d,w=%d,ci=%d,co=%d,kernel=%d,stride=%d,pad=%d", H, W, CI,
           CO, K, S, P);
  run_t r;
  CHECK(run_small(spec, &r));
  int OH = (H - 1) * S - 2 * P + K, OW = (W - 1) * S - 2 * P + K;
  CHECK_EQ(r.ts.t[2].numel, OH * OW * CO);
  double *ref = calloc((size_t)(OH * OW * CO), sizeof(double));
  for (int ih = 0; ih < H; ih++)
    for (int iw = 0; iw < W; iw++)
      for (int kh = 0; kh < K; kh++)
        for (int kw = 0; kw < K; kw++) {
          int y = ih * S + kh - P, x = iw * S + kw - P;
          if (y < 0 || y >= OH || x < 0 || x >= OW) continue;
          for (int ci = 0; ci < CI; ci++)
            for (int co = 0; co < CO; co++)
              ref[(y * OW + x) * CO + co] += in_at(&r, 0, (ih * W + iw) * CI + ci) *
                                             in_at(&r, 1, ((kh * K + kw) * CI + ci) * CO + co);
        }
  for (int i = 0; i < OH * OW * CO; i++) {
    double got = in_at(&r, 2, i), want = ref[i];
    if (fabs(got - want) > 1e-9) {
      dg_test_fail(__FILE__, __LINE__, "%s: out[%d] = %g, want %g", spec, i, got, want);
      break;
    }
  }
  free(ref);
  run_free(&r);
}

DG_TEST(wl_numeric_conv2d_transpose) {
  check_t2d(3, 4, 2, 3, 4, 2, 1);
  check_t2d(3, 3, 2, 2, 3, 2, 1);
  check_t2d(3, 3, 2, 2, 4, 3, 0);
  check_t2d(4, 3, 1, 2, 3, 1, 2);
}

DG_TEST(wl_numeric_rows) {
  run_t r;
  /* softmax */
  CHECK(run_small("softmax:m=3,n=5", &r));
  for (int i = 0; i < 3; i++) {
    double mx = -INFINITY, sum = 0;
    for (int j = 0; j < 5; j++) mx = fmax(mx, in_at(&r, 0, i * 5 + j));
    for (int j = 0; j < 5; j++) sum += exp(in_at(&r, 0, i * 5 + j) - mx);
    for (int j = 0; j < 5; j++)
      CHECK_NEAR(in_at(&r, 1, i * 5 + j), exp(in_at(&r, 0, i * 5 + j) - mx) / sum, 1e-12);
  }
  run_free(&r);
  /* layernorm: A, gamma, beta -> out */
  CHECK(run_small("layernorm:m=2,n=6", &r));
  for (int i = 0; i < 2; i++) {
    double mean = 0, var = 0;
    for (int j = 0; j < 6; j++) mean += in_at(&r, 0, i * 6 + j) / 6;
    for (int j = 0; j < 6; j++) var += pow(in_at(&r, 0, i * 6 + j) - mean, 2) / 6;
    for (int j = 0; j < 6; j++) {
      double y = (in_at(&r, 0, i * 6 + j) - mean) / sqrt(var + (double)(float)1e-5) *
                     in_at(&r, 1, j) + in_at(&r, 2, j);
      CHECK_NEAR(in_at(&r, 3, i * 6 + j), y, 1e-9);
    }
  }
  run_free(&r);
  /* rope: x, cos, sin -> out (b=1, s=2, h=2, d=4) */
  CHECK(run_small("rope:b=1,s=2,h=2,d=4", &r));
  for (int s = 0; s < 2; s++)
    for (int h = 0; h < 2; h++)
      for (int d = 0; d < 4; d++) {
        int64_t base = (s * 2 + h) * 4;
        double rot = d < 2 ? -in_at(&r, 0, base + d + 2) : in_at(&r, 0, base + d - 2);
        double y = in_at(&r, 0, base + d) * in_at(&r, 1, s * 4 + d) + rot * in_at(&r, 2, s * 4 + d);
        CHECK_NEAR(in_at(&r, 3, base + d), y, 1e-12);
      }
  run_free(&r);
  /* avg_pool2d with padding counts the padding (count_include_pad) */
  CHECK(run_small("avg_pool2d:n=1,c=1,h=3,w=3,kernel=2,stride=2,pad=1", &r));
  CHECK_NEAR(in_at(&r, 1, 0), in_at(&r, 0, 0) / 4, 1e-12);
  CHECK_NEAR(in_at(&r, 1, 3),
             (in_at(&r, 0, 4) + in_at(&r, 0, 5) + in_at(&r, 0, 7) + in_at(&r, 0, 8)) / 4, 1e-12);
  run_free(&r);
  /* gemm with both operands transposed: A (k, m), B (n, k) */
  CHECK(run_small("gemm:m=2,n=3,k=4,trans_a=1,trans_b=1", &r));
  for (int i = 0; i < 2; i++)
    for (int j = 0; j < 3; j++) {
      double acc = 0;
      for (int k = 0; k < 4; k++) acc += in_at(&r, 0, k * 2 + i) * in_at(&r, 1, j * 4 + k);
      CHECK_NEAR(in_at(&r, 2, i * 3 + j), acc, 1e-12);
    }
  run_free(&r);
}

/* ---- errors ------------------------------------------------------------------ */

DG_TEST(wl_spec_errors) {
  static const struct {
    const char *spec, *want;
  } cases[] = {
      {"", "empty"},
      {"foo:m=1", "unknown family 'foo'"},
      {"foo:m=1", "gemm, batch_matmul"},
      {"gemm:m=1,n=2,k=3,x=4", "unknown key 'x'"},
      {"gemm:m=1,n=2", "missing required key 'k'"},
      {"gemm:m=abc,n=2,k=3", "m must be an integer"},
      {"gemm:m=1.5,n=2,k=3", "m must be an integer"},
      {"gemm:m=0,n=2,k=3", "gemm:m=0: m must be in [1, 65536]"},
      {"gemm:m=99999999999999999999,n=2,k=3", "m must be in [1, 65536]"},
      {"gemm:m=1,n=2,k=3,dtype=f64", "dtype must be f32 or f16"},
      {"gemm:m=1,n=2,k=3,trans_a=2", "trans_a must be in [0, 1]"},
      {"gemm:m=1,m=2,n=2,k=3", "duplicate key 'm'"},
      {"gemm:m=1,n=2,k=3,", "trailing ','"},
      {"gemm:m=1,,n=2,k=3", "expected key=value"},
      {"gemm:m=1,n=2,k=3 ", "k must be an integer"},
      {"gemm:m=65536,n=65536,k=65536", "more than WL_MAX_BYTES"},
      {"conv2d_nhwc:n=1,h=4,w=4,ci=3,co=8,kernel=7", "kernel=7 is larger than the padded input h"},
      {"conv2d_nhwc:n=1,h=8,w=8,ci=6,co=8,kernel=3,groups=4", "ci=6 is not divisible by groups=4"},
      {"conv2d_nhwc:n=1,h=8,w=8,ci=3,co=8,kernel=3,dilation=4", "with dilation=4 spans 9"},
      {"conv2d_transpose_nhwc:n=1,h=4,w=4,ci=2,co=2,kernel=3,pad=3", "pad=3 must be smaller"},
      {"max_pool2d:n=1,c=1,h=4,w=4,kernel=2,pad=2", "pad=2 must be smaller than kernel=2"},
      {"rope:b=1,s=4,h=2,d=5", "d=5 must be even"},
      {"GMM/4", "config 4 does not exist"},
      {"GMM/x", "config must be one digit"},
      {"GMM/01", "config must be one digit"},
  };
  for (size_t i = 0; i < DG_ARRAY_LEN(cases); i++) {
    dg_status st;
    char *c = wl_canonical(cases[i].spec, &st);
    CHECK_MSG(c == NULL, "'%s' was accepted as %s", cases[i].spec, c);
    CHECK_ERR(st, cases[i].want);
    dg_func *f = wl_build(cases[i].spec, &st);
    CHECK(f == NULL);
    CHECK_ERR(st, cases[i].want);
  }
}

/* ---- the generator ------------------------------------------------------------- */

typedef struct {
  char **specs;
  int64_t n, cap;
} spec_list;

static void collect(const char *spec, void *ctx) {
  spec_list *l = ctx;
  if (l->n == l->cap) {
    l->cap = l->cap ? 2 * l->cap : 1024;
    l->specs = dg_realloc(l->specs, sizeof(char *) * (size_t)l->cap);
  }
  l->specs[l->n++] = dg_strdup(spec);
}

static void list_free(spec_list *l) {
  for (int64_t i = 0; i < l->n; i++) free(l->specs[i]);
  free(l->specs);
  memset(l, 0, sizeof *l);
}

static int cmp_str(const void *a, const void *b) {
  return strcmp(*(char *const *)a, *(char *const *)b);
}

static int64_t count_distinct(spec_list *l) {
  char **c = dg_malloc(sizeof(char *) * (size_t)(l->n ? l->n : 1));
  memcpy(c, l->specs, sizeof(char *) * (size_t)l->n);
  qsort(c, (size_t)l->n, sizeof(char *), cmp_str);
  int64_t d = l->n ? 1 : 0;
  for (int64_t i = 1; i < l->n; i++) d += strcmp(c[i - 1], c[i]) != 0;
  free(c);
  return d;
}

DG_TEST(wl_generate_sample) {
  spec_list a = {0}, b = {0}, c = {0};
  dg_status st;
  CHECK(wl_generate(1, 300, NULL, collect, &a, &st));
  CHECK(wl_generate(1, 300, NULL, collect, &b, &st));
  CHECK(wl_generate(2, 300, NULL, collect, &c, &st));
  CHECK_EQ(a.n, 300);
  CHECK_EQ(count_distinct(&a), 300);
  int same_as_other_seed = 0;
  bool seen[64] = {false};
  for (int64_t i = 0; i < a.n; i++) {
    CHECK_STREQ(a.specs[i], b.specs[i]);
    same_as_other_seed += strcmp(a.specs[i], c.specs[i]) == 0;
    dg_func *f = build_checked(a.specs[i]);
    CHECK_MSG(f != NULL, "%s", a.specs[i]);
    ir_func_free(f);
    char *canon = wl_canonical(a.specs[i], &st);
    CHECK_STREQ(canon, a.specs[i]);
    free(canon);
    for (int k = 0; k < wl_family_count(); k++) {
      size_t n = strlen(wl_family_name(k));
      if (strncmp(a.specs[i], wl_family_name(k), n) == 0 && a.specs[i][n] == ':') seen[k] = true;
    }
  }
  CHECK(same_as_other_seed < 10);
  int families = 0;
  for (int k = 0; k < wl_family_count(); k++) families += seen[k];
  CHECK(families >= 18); /* the mix reaches (almost) every family in 300 draws */
  /* a shorter count is a prefix of a longer one */
  spec_list d = {0};
  CHECK(wl_generate(1, 50, NULL, collect, &d, &st));
  for (int64_t i = 0; i < d.n; i++) CHECK_STREQ(d.specs[i], a.specs[i]);
  list_free(&a);
  list_free(&b);
  list_free(&c);
  list_free(&d);
}

DG_TEST(wl_generate_reach) {
  spec_list a = {0};
  dg_status st;
  CHECK(wl_generate(7, 54116, NULL, collect, &a, &st));
  CHECK_EQ(a.n, 54116);
  CHECK_EQ(count_distinct(&a), 54116);
  list_free(&a);
  for (int k = 0; k < wl_family_count(); k++) {
    spec_list f = {0};
    CHECK_MSG(wl_generate(3, 200, wl_family_name(k), collect, &f, &st), "%s: %s",
              wl_family_name(k), st.msg);
    for (int64_t i = 0; i < f.n; i++) {
      size_t n = strlen(wl_family_name(k));
      CHECK(strncmp(f.specs[i], wl_family_name(k), n) == 0 && f.specs[i][n] == ':');
    }
    CHECK_EQ(count_distinct(&f), 200);
    list_free(&f);
  }
  CHECK(!wl_generate(3, 5, "nosuch", collect, &a, &st));
  CHECK_ERR(st, "unknown family 'nosuch'");
  CHECK(!wl_generate(3, -1, NULL, collect, &a, &st));
  CHECK(a.n == 0);
}

DG_TEST(wl_cli) {
  char *out = NULL;
  CHECK_EQ(dg_test_run_dragon("workloads --count 4 --seed 9", NULL, &out), 0);
  int lines = 0;
  for (char *p = out; *p; p++) lines += *p == '\n';
  CHECK_EQ(lines, 4);
  spec_list l = {0};
  dg_status st;
  CHECK(wl_generate(9, 4, NULL, collect, &l, &st));
  CHECK(strncmp(out, l.specs[0], strlen(l.specs[0])) == 0);
  list_free(&l);
  free(out);
  CHECK_EQ(dg_test_run_dragon("workloads --count 3 --family softmax --seed 2", NULL, &out), 0);
  CHECK(strncmp(out, "softmax:", 8) == 0);
  free(out);
  CHECK_EQ(dg_test_run_dragon("workloads --list", NULL, &out), 0);
  CHECK(strstr(out, "conv2d_transpose_nhwc") && strstr(out, "TBG/3"));
  CHECK(strstr(out, "GMM/0    batch_matmul:b=1,n=128,m=128,k=128,dtype=f32"));
  free(out);
  CHECK_EQ(dg_test_run_dragon("workloads --help", NULL, &out), 0);
  CHECK(strstr(out, "--count") && strstr(out, "--seed") && strstr(out, "--family"));
  free(out);
  CHECK_EQ(dg_test_run_dragon("workloads --canonical GMM", NULL, &out), 0);
  CHECK_STREQ(out, "batch_matmul:b=1,n=128,m=128,k=128,dtype=f32\n");
  free(out);
  CHECK_EQ(dg_test_run_dragon("workloads --family nosuch", NULL, &out), 1);
  CHECK(strstr(out, "unknown family 'nosuch'"));
  free(out);
  CHECK_EQ(dg_test_run_dragon("workloads --count -5", NULL, &out), 2);
  free(out);
}

/* ---- fuzz regressions ------------------------------------------------------------ */

DG_TEST(wl_fuzz_regressions) {
  DIR *d = opendir("tests/fuzz/spec");
  CHECK(d != NULL);
  struct dirent *e;
  int n = 0;
  while ((e = readdir(d))) {
    if (e->d_name[0] == '.') continue;
    char path[512];
    snprintf(path, sizeof path, "tests/fuzz/spec/%s", e->d_name);
    dg_status st;
    size_t len;
    char *text = dg_read_file(path, &len, &st);
    CHECK(text != NULL);
    /* as the fuzzer: up to the first NUL, the whole input as a spec */
    char *c = wl_canonical(text, &st);
    if (c) {
      char *c2 = wl_canonical(c, &st);
      CHECK_MSG(c2 && strcmp(c, c2) == 0, "%s: canonical form not stable", path);
      free(c2);
      dg_func *f = wl_build(text, &st);
      CHECK(f != NULL);
      ir_func_free(f);
    } else {
      CHECK_MSG(st.msg[0] != 0, "%s: error without a message", path);
    }
    free(c);
    free(text);
    n++;
  }
  closedir(d);
  CHECK(n >= 10);
}
