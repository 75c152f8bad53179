/* test_codegen_reference.c: the float64 reference's loop interchange (a
 * reduction nest's innermost spatial loop moved inside its reduction
 * loops): the text of a small GEMM, the nests it leaves as they are, and
 * the same bits as the nest in its own order for workloads of every
 * reduction shape (GEMM, batched and transposed matmuls, convolutions,
 * pooling with a max and its init, fused epilogues). */
#include <stdlib.h>

#include "dragon/codegen.h"
#include "dragon/rt.h"
#include "dragon/wl.h"
#include "test.h"

static char *emit_ref(const dg_func *f, bool in_order, const char *name, dg_status *st) {
  codegen_opts o = {.reference = true, .reference_in_order = in_order, .fn_name = name};
  return codegen_emit(f, &codegen_lang_c, &o, st);
}

/* C (2, 3) = A (2, 4) · B (4, 3): j runs inside k; the parallel loop is
 * i alone, j no longer collapsed into it. */
DG_TEST(codegen_reference_interchange_text) {
  dg_status st;
  dg_status_ok(&st);
  dg_func *f = wl_build("gemm:m=2,n=3,k=4,dtype=f32", &st);
  CHECK_OK(st);
  char *src = emit_ref(f, false, "ref", &st);
  char *old = emit_ref(f, true, "ref", &st);
  ir_func_free(f);
  CHECK_OK(st);
  CHECK_STREQ(src,
              "void ref(void **args) {\n"
              "  const double *restrict A = (const double *)args[0];\n"
              "  const double *restrict B = (const double *)args[1];\n"
              "  double *restrict C = (double *)args[2];\n"
              "  #pragma omp parallel for schedule(static)\n"
              "  for (int32_t i = 0; i < 2; i++) {\n"
              "    for (int32_t j = 0; j < 3; j++) {\n"
              "      {  /* block C, init */\n"
              "        const int32_t v_i = i;\n"
              "        const int32_t v_j = j;\n"
              "        C[v_i * 3 + v_j] = 0.0;\n"
              "      }\n"
              "    }\n"
              "    for (int32_t k = 0; k < 4; k++) {\n"
              "      for (int32_t j = 0; j < 3; j++) {\n"
              "        {  /* block C, update */\n"
              "          const int32_t v_i = i;\n"
              "          const int32_t v_j = j;\n"
              "          const int32_t v_k = k;\n"
              "          C[v_i * 3 + v_j] = (C[v_i * 3 + v_j] + (A[v_i * 4 + v_k] * B[v_k * 3 + v_j]));\n"
              "        }\n"
              "      }\n"
              "    }\n"
              "  }\n"
              "}\n");
  /* in its own order: the nest as written, i and j collapsed */
  CHECK(old != NULL);
  CHECK(strstr(old, "#pragma omp parallel for collapse(2) schedule(static)\n") != NULL);
  CHECK(strstr(old, "if (v_k == 0) {") != NULL);
  CHECK(strstr(old, "init */") == NULL);
  free(src);
  free(old);
}

/* Nests the interchange must leave as they are: a lone spatial loop over
 * its reduction (it stays the parallel loop), a reduction over contiguous
 * elements (gemm with B transposed: j would stride), a body that reads
 * another element of what it writes, a reduce iterator bound to an
 * expression, and non-reference code. */
DG_TEST(codegen_reference_interchange_skips) {
  static const char *const specs[] = {
      "reduce_sum:m=8,n=16,dtype=f32",
      "softmax:m=8,n=16,dtype=f32",
      "gemm:m=8,n=8,k=16,trans_a=0,trans_b=1,dtype=f32",
  };
  dg_status st;
  dg_status_ok(&st);
  for (size_t i = 0; i < DG_ARRAY_LEN(specs); i++) {
    dg_func *f = wl_build(specs[i], &st);
    CHECK_OK(st);
    char *a = emit_ref(f, false, "ref", &st), *b = emit_ref(f, true, "ref", &st);
    ir_func_free(f);
    CHECK_OK(st);
    CHECK_MSG(strcmp(a, b) == 0, "%s: the nest was reordered:\n%s", specs[i], a);
    free(a);
    free(b);
  }

  dg_func *f = wl_build("gemm:m=4,n=4,k=4,dtype=f32", &st);
  CHECK_OK(st);
  dg_block *c = ir_find_block(f, "C");
  CHECK(c != NULL && c->body->kind == DG_STMT_STORE);
  char *src = emit_ref(f, false, "ref", &st);
  CHECK(src != NULL && strstr(src, "init */") != NULL); /* reordered as it is */
  free(src);
  /* C[v_i, v_j] += C[v_i, 0]: iterations of j would read each other's sums */
  dg_stmt *store = c->body;
  dg_expr *first[2] = {store->idx[0], ir_int(f, 0)};
  dg_expr *value = store->value;
  store->value = ir_add(f, value, ir_load(f, store->buf, first, 2));
  src = emit_ref(f, false, "ref", &st);
  CHECK(src != NULL && strstr(src, "init */") == NULL && strstr(src, "if (v_k == 0)") != NULL);
  free(src);
  store->value = value;
  /* v_k = k + 0 */
  dg_iter *vk = &c->iters[2];
  CHECK(vk->kind == DG_ITER_REDUCE);
  dg_expr *binding = vk->binding;
  vk->binding = ir_add(f, binding, ir_int(f, 0));
  src = emit_ref(f, false, "ref", &st);
  CHECK(src != NULL && strstr(src, "init */") == NULL);
  free(src);
  vk->binding = binding;
  src = codegen_emit(f, &codegen_lang_c, NULL, &st);
  CHECK(src != NULL && strstr(src, "init */") == NULL && strstr(src, "if (v_k == 0)") != NULL);
  free(src);
  ir_func_free(f);
}

/* Bytes of element storage of a tensor in the reference. */
static size_t ref_bytes(const rt_tensor *t) {
  size_t elem = dg_dtype_is_float(t->buf->dtype) ? sizeof(double) : (size_t)dg_dtype_bytes(t->buf->dtype);
  return (size_t)t->numel * elem;
}

/* Compiles the reference of spec both ways into one object (with
 * DRAGON_CFLAGS as set, then again with -fopenmp where `omp`), runs both on
 * the same inputs and compares every output bit for bit. */
static void check_same_bits(const char *spec, bool swapped, bool omp) {
  dg_status st;
  dg_status_ok(&st);
  dg_func *f = wl_build(spec, &st);
  CHECK_MSG(f != NULL, "%s: %s", spec, st.msg);
  char *mine = emit_ref(f, false, "ref_new", &st);
  char *old = emit_ref(f, true, "ref_old", &st);
  CHECK_MSG(mine && old, "%s: %s", spec, st.msg);
  CHECK_MSG((strstr(mine, ", init */") != NULL) == swapped && !strstr(old, ", init */"),
            "%s: %s expected:\n%s", spec, swapped ? "an interchange" : "no interchange", mine);
  dg_str src;
  dg_str_init(&src);
  dg_str_printf(&src, "%s\n%s\n%s", codegen_lang_c.preamble, mine, old);
  free(mine);
  free(old);
  static const char *const names[2] = {"ref_new", "ref_old"};
  rt_cpu_kernel *k[2] = {NULL, NULL}, *kp[2] = {NULL, NULL};
  bool ok = rt_cpu_compile_many(src.s, names, 2, k, &st);
  if (ok && omp) {
    const char *env = getenv("DRAGON_CFLAGS");
    char *saved = env ? strdup(env) : NULL;
    setenv("DRAGON_CFLAGS", "-fopenmp", 1);
    ok = rt_cpu_compile_many(src.s, names, 2, kp, &st);
    if (saved) setenv("DRAGON_CFLAGS", saved, 1);
    else unsetenv("DRAGON_CFLAGS");
    free(saved);
  }
  dg_str_free(&src);
  rt_tensors ts;
  bool have = ok && rt_tensors_init(&ts, f, &st);
  if (have) {
    rt_data_fill(&ts, 7, rt_data_dist_for(f));
    void **want = calloc((size_t)ts.n, sizeof *want);
    rt_cpu_call(k[1], ts.ref_args);
    for (int i = 0; i < ts.n; i++)
      if (ts.t[i].is_output) {
        want[i] = malloc(ref_bytes(&ts.t[i]));
        memcpy(want[i], ts.t[i].ref, ref_bytes(&ts.t[i]));
      }
    const rt_cpu_kernel *runs[2] = {k[0], kp[0]};
    for (int r = 0; r < 2 && ok; r++) {
      if (!runs[r]) continue;
      rt_data_poison(&ts);
      rt_cpu_call(runs[r], ts.ref_args);
      for (int i = 0; i < ts.n && ok; i++)
        if (want[i] && memcmp(want[i], ts.t[i].ref, ref_bytes(&ts.t[i])) != 0) {
          dg_test_fail(__FILE__, __LINE__, "%s: output %s differs from the nest in order%s", spec,
                       ts.t[i].buf->name, r ? " (OpenMP)" : "");
          ok = false;
        }
    }
    for (int i = 0; i < ts.n; i++) free(want[i]);
    free(want);
    rt_tensors_free(&ts);
  }
  for (int i = 0; i < 2; i++) {
    rt_cpu_free(k[i]);
    rt_cpu_free(kp[i]);
  }
  ir_func_free(f);
  CHECK_MSG(have, "%s: %s", spec, st.msg);
}

DG_TEST(codegen_reference_interchange_same_bits) {
  static const struct {
    const char *spec;
    bool swapped, omp;
  } cases[] = {
      {"gemm:m=64,n=48,k=40,dtype=f16", true, true},
      {"gemm:m=33,n=17,k=29,dtype=f32", true, false},
      {"gemm:m=24,n=20,k=16,trans_a=1,trans_b=0,dtype=f32", true, false},
      {"gemm:m=16,n=16,k=24,trans_a=0,trans_b=1,dtype=f16", false, false},
      {"batch_matmul:b=2,n=32,m=24,k=16,dtype=f32", true, true},
      {"transpose_batch_matmul:batch=1,seq=32,heads=4,dim=16,dtype=f32", true, false},
      {"conv1d_nlc:n=2,l=32,ci=16,co=24,kernel=3,stride=2,pad=1,dilation=1,groups=1,dtype=f32",
       true, false},
      {"conv2d_nhwc:n=1,h=14,w=14,ci=16,co=32,kernel=3,stride=2,pad=1,dilation=1,groups=2,"
       "dtype=f32",
       true, true},
      {"conv2d_nhwc:n=1,h=12,w=12,ci=8,co=16,kernel=3,stride=1,pad=1,dilation=2,groups=1,"
       "dtype=f16",
       true, false},
      {"conv2d_nchw:n=1,h=14,w=14,ci=16,co=16,kernel=3,stride=1,pad=1,dilation=1,dtype=f32",
       true, false},
      {"conv3d_ndhwc:n=1,d=4,h=8,w=8,ci=8,co=16,kernel=3,stride=1,pad=1,dilation=1,groups=1,"
       "dtype=f32",
       true, false},
      {"depthwise_conv2d_nhwc:n=1,h=14,w=14,c=16,kernel=3,stride=1,pad=1,dilation=1,dtype=f32",
       true, false},
      {"conv2d_transpose_nhwc:n=1,h=4,w=4,ci=32,co=16,kernel=4,stride=2,pad=1,dtype=f32", true,
       false},
      {"conv2d_capsule_nhwijc:n=1,h=8,w=8,ci=8,co=8,kernel=3,stride=2,pad=1,capsule=4,dtype=f32",
       true, false},
      {"conv2d_bias_bn_relu:n=1,h=16,w=16,ci=8,co=16,kernel=3,stride=2,pad=1,dilation=1,"
       "dtype=f32",
       true, false},
      {"max_pool2d:n=1,c=8,h=16,w=16,kernel=3,stride=2,pad=1,dtype=f32", true, false},
      {"avg_pool2d:n=1,c=8,h=16,w=16,kernel=2,stride=2,pad=0,dtype=f32", true, false},
      {"softmax:m=16,n=24,dtype=f32", false, false},
      {"norm_bmn:b=2,m=16,n=16,dtype=f32", false, false},
  };
  for (size_t i = 0; i < DG_ARRAY_LEN(cases); i++)
    check_same_bits(cases[i].spec, cases[i].swapped, cases[i].omp);
}
