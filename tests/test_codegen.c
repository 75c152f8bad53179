/* test_codegen.c: the C emitter: a golden string for a tiny reduction,
 * reference mode, f16 rounding calls, heap allocations, name mangling and
 * the errors it reports. Numbers (running the emitted code) are in
 * test_rt.c. */
#include <stdlib.h>

#include "dragon/codegen.h"
#include "dragon/rt.h"
#include "dragon/wl.h"
#include "test.h"

/* B (2) = sum over k of A (2, 3): one block with a reduce iteration var. */
static dg_func *rowsum(void) {
  dg_func *f = ir_func_new("rowsum");
  dg_buffer *A = ir_buffer_new(f, "A", DG_F32, 2, (int64_t[]){2, 3}, DG_SCOPE_GLOBAL);
  dg_buffer *B = ir_buffer_new(f, "B", DG_F32, 1, (int64_t[]){2}, DG_SCOPE_GLOBAL);
  ir_func_add_param(f, A);
  ir_func_add_param(f, B);
  dg_var *i = ir_var_new(f, "i", DG_I32), *k = ir_var_new(f, "k", DG_I32);
  dg_var *vi = ir_var_new(f, "vi", DG_I32), *vk = ir_var_new(f, "vk", DG_I32);
  dg_block *b = ir_block_new(f, "B");
  ir_block_add_iter(f, b, vi, 2, DG_ITER_SPATIAL, ir_var(f, i));
  ir_block_add_iter(f, b, vk, 3, DG_ITER_REDUCE, ir_var(f, k));
  dg_expr *bi[1] = {ir_var(f, vi)};
  dg_expr *ai[2] = {ir_var(f, vi), ir_var(f, vk)};
  ir_block_add_write(f, b, B, bi, NULL);
  b->init = ir_store(f, B, bi, 1, ir_float(f, 0, DG_F32));
  b->body = ir_store(f, B, bi, 1, ir_add(f, ir_load(f, B, bi, 1), ir_load(f, A, ai, 2)));
  dg_stmt *s = ir_for(f, k, 3, DG_LOOP_SERIAL, DG_TAG_NONE, ir_block_stmt(f, b));
  s = ir_for(f, i, 2, DG_LOOP_PARALLEL, DG_TAG_NONE, s);
  dg_block *root = ir_block_new(f, "root");
  root->body = s;
  f->body = ir_block_stmt(f, root);
  return f;
}

DG_TEST(codegen_c_golden) {
  dg_func *f = rowsum();
  dg_status st;
  dg_status_ok(&st);
  char *src = codegen_emit(f, &codegen_lang_c, NULL, &st);
  ir_func_free(f);
  CHECK_OK(st);
  CHECK_STREQ(src,
              "void rowsum(void **args) {\n"
              "  const float *restrict A = (const float *)args[0];\n"
              "  float *restrict B = (float *)args[1];\n"
              "  for (int32_t i = 0; i < 2; i++) {  /* parallel */\n"
              "    for (int32_t k = 0; k < 3; k++) {\n"
              "      {  /* block B */\n"
              "        const int32_t vi = i;\n"
              "        const int32_t vk = k;\n"
              "        if (vk == 0) {\n"
              "          B[vi] = 0.0f;\n"
              "        }\n"
              "        B[vi] = (B[vi] + A[vi * 3 + vk]);\n"
              "      }\n"
              "    }\n"
              "  }\n"
              "}\n");
  free(src);
}

DG_TEST(codegen_c_reference_is_double) {
  dg_func *f = rowsum();
  dg_status st;
  codegen_opts o = {.reference = true, .fn_name = "ref"};
  char *src = codegen_emit(f, &codegen_lang_c, &o, &st);
  ir_func_free(f);
  CHECK(src != NULL);
  CHECK(strstr(src, "void ref(void **args)") != NULL);
  CHECK(strstr(src, "const double *restrict A = (const double *)args[0];") != NULL);
  CHECK(strstr(src, "B[vi] = 0.0;") != NULL);
  CHECK(strstr(src, "float") == NULL);
  free(src);
}

/* The reference's outermost loops that bind spatial iterators indexing
 * every store get an OpenMP pragma (collapsed when several); the same nest with the reduction loop
 * outermost, and non-reference code, do not. Compiled with -fopenmp the
 * reference gives the numbers it gives without. */
DG_TEST(codegen_c_reference_parallel_loop) {
  dg_func *f = rowsum();
  dg_status st;
  codegen_opts o = {.reference = true, .fn_name = "ref"};
  char *src = codegen_emit(f, &codegen_lang_c, &o, &st);
  CHECK(src != NULL);
  CHECK(strstr(src, "  #pragma omp parallel for schedule(static)\n  for (int32_t i = 0;") != NULL);
  char *plain = codegen_emit(f, &codegen_lang_c, NULL, &st);
  CHECK(plain != NULL && strstr(plain, "pragma") == NULL);
  free(plain);
  /* swap the loops: k (reduce) outermost */
  dg_stmt *outer = f->body->block->body, *inner = outer->body;
  dg_var *vi = outer->loop_var;
  int64_t ei = outer->extent;
  outer->loop_var = inner->loop_var;
  outer->extent = inner->extent;
  inner->loop_var = vi;
  inner->extent = ei;
  char *swapped = codegen_emit(f, &codegen_lang_c, &o, &st);
  CHECK(swapped != NULL && strstr(swapped, "pragma") == NULL);
  free(swapped);
  ir_func_free(f);
  free(src);
  f = rowsum();
  src = codegen_emit_source(f, f, &codegen_lang_c, &st); /* with its prelude */
  ir_func_free(f);
  CHECK(src != NULL);

  /* a batch of one outermost: the spatial loops below it are collapsed in,
   * the reduction loop is not, nor the innermost spatial loop once it is
   * moved inside the reduction loop (test_codegen_reference.c) */
  f = wl_build("GMM/0", &st);
  CHECK(f != NULL);
  if (f) {
    char *gmm = codegen_emit(f, &codegen_lang_c, &o, &st);
    CHECK(gmm != NULL && strstr(gmm, "#pragma omp parallel for collapse(2) schedule(static)") != NULL);
    free(gmm);
    o.reference_in_order = true;
    gmm = codegen_emit(f, &codegen_lang_c, &o, &st);
    o.reference_in_order = false;
    CHECK(gmm != NULL && strstr(gmm, "#pragma omp parallel for collapse(3) schedule(static)") != NULL);
    free(gmm);
    ir_func_free(f);
  }

  double a[6] = {1, 2, 3, 4, 5, 6}, b0[2] = {-1, -1}, b1[2] = {-1, -1};
  const char *old = getenv("DRAGON_CFLAGS");
  char *saved = old ? strdup(old) : NULL;
  rt_cpu_kernel *k0 = NULL, *k1 = NULL;
  CHECK(rt_cpu_compile(src, CODEGEN_REFERENCE_FN, &k0, &st));
  setenv("DRAGON_CFLAGS", "-fopenmp", 1);
  bool ok = rt_cpu_compile(src, CODEGEN_REFERENCE_FN, &k1, &st);
  if (saved) setenv("DRAGON_CFLAGS", saved, 1);
  else unsetenv("DRAGON_CFLAGS");
  free(saved);
  CHECK(ok);
  if (k0 && k1) {
    rt_cpu_call(k0, (void *[]){a, b0});
    rt_cpu_call(k1, (void *[]){a, b1});
    CHECK(b0[0] == 6 && b0[1] == 15);
    CHECK(b1[0] == b0[0] && b1[1] == b0[1]);
  }
  rt_cpu_free(k0);
  rt_cpu_free(k1);
  free(src);
}

/* C (4) f16 = exp(A) + A: every f16 operation rounds, loads and stores
 * convert. */
DG_TEST(codegen_c_f16_rounds) {
  dg_func *f = ir_func_new("h");
  dg_buffer *A = ir_buffer_new(f, "A", DG_F16, 1, (int64_t[]){4}, DG_SCOPE_GLOBAL);
  dg_buffer *C = ir_buffer_new(f, "C", DG_F16, 1, (int64_t[]){4}, DG_SCOPE_GLOBAL);
  ir_func_add_param(f, A);
  ir_func_add_param(f, C);
  dg_var *i = ir_var_new(f, "i", DG_I32);
  dg_expr *ix[1] = {ir_var(f, i)};
  dg_expr *a = ir_load(f, A, ix, 1);
  dg_block *root = ir_block_new(f, "root");
  root->body = ir_for(f, i, 4, DG_LOOP_VECTORIZED, DG_TAG_NONE,
                      ir_store(f, C, ix, 1, ir_add(f, ir_call1(f, DG_MATH_EXP, a), a)));
  f->body = ir_block_stmt(f, root);
  dg_status st;
  char *src = codegen_emit(f, &codegen_lang_c, NULL, &st);
  ir_func_free(f);
  CHECK(src != NULL);
  CHECK(strstr(src, "const uint16_t *restrict A") != NULL);
  CHECK(strstr(src, "C[i] = dg_f2h(dg_rh((dg_rh(expf(dg_h2f(A[i]))) + dg_h2f(A[i]))));") != NULL);
  free(src);
}

/* A root-allocated buffer over 64 KiB comes from malloc and is freed; one
 * named like a C keyword is renamed, and so is a variable named like a
 * buffer; a buffer used outside its block fails. */
DG_TEST(codegen_c_allocs_and_names) {
  dg_func *f = ir_func_new("big");
  dg_buffer *A = ir_buffer_new(f, "A", DG_F32, 1, (int64_t[]){20000}, DG_SCOPE_GLOBAL);
  dg_buffer *T = ir_buffer_new(f, "int", DG_F32, 1, (int64_t[]){20000}, DG_SCOPE_GLOBAL);
  dg_buffer *S = ir_buffer_new(f, "S", DG_F32, 1, (int64_t[]){16}, DG_SCOPE_LOCAL);
  ir_func_add_param(f, A);
  dg_var *i = ir_var_new(f, "A", DG_I32); /* the name of a buffer too */
  dg_expr *ix[1] = {ir_var(f, i)};
  dg_expr *z[1] = {ir_int(f, 0)};
  dg_stmt *body[2] = {
      ir_store(f, T, ix, 1, ir_load(f, A, ix, 1)),
      ir_store(f, S, z, 1, ir_load(f, T, ix, 1)),
  };
  dg_block *root = ir_block_new(f, "root");
  ir_block_add_alloc(f, root, T);
  ir_block_add_alloc(f, root, S);
  root->body = ir_for(f, i, 20000, DG_LOOP_SERIAL, DG_TAG_NONE, ir_seq(f, body, 2));
  f->body = ir_block_stmt(f, root);
  dg_status st;
  dg_status_ok(&st);
  char *src = codegen_emit(f, &codegen_lang_c, NULL, &st);
  CHECK_OK(st);
  char want[128];
  snprintf(want, sizeof want, "float *dg_b%d = (float *)malloc((size_t)20000 * sizeof(float));",
           T->id);
  CHECK_MSG(strstr(src, want) != NULL, "no heap allocation in:\n%s", src);
  snprintf(want, sizeof want, "free(dg_b%d);", T->id);
  CHECK(strstr(src, want) != NULL);
  CHECK(strstr(src, "float S[16];") != NULL);
  snprintf(want, sizeof want, "for (int32_t dg_v%d = 0; dg_v%d < 20000; dg_v%d++) {", i->id,
           i->id, i->id);
  CHECK_MSG(strstr(src, want) != NULL, "%s", src);
  CHECK(strstr(src, "S[0] = ") != NULL);
  free(src);

  /* The same kernel without the allocation of S: S is out of scope. */
  root->n_allocs = 1;
  src = codegen_emit(f, &codegen_lang_c, NULL, &st);
  CHECK(src == NULL);
  CHECK_ERR(st, "buffer S is used outside the block that allocates it");

  codegen_opts o = {.fn_name = "1bad"};
  src = codegen_emit(f, &codegen_lang_c, &o, &st);
  CHECK(src == NULL);
  CHECK_ERR(st, "'1bad' is not a valid function name");
  root->n_allocs = 2;
  f->name = "main";
  src = codegen_emit(f, &codegen_lang_c, NULL, &st);
  const char *head = "void dg_main(void **args) {\n";
  CHECK(src != NULL && strncmp(src, head, strlen(head)) == 0);
  free(src);
  ir_func_free(f);
}

DG_TEST(codegen_c_floordiv_and_source) {
  dg_func *f = ir_func_new("fd");
  dg_buffer *A = ir_buffer_new(f, "A", DG_I32, 1, (int64_t[]){4}, DG_SCOPE_GLOBAL);
  ir_func_add_param(f, A);
  dg_var *i = ir_var_new(f, "i", DG_I32);
  dg_expr *ix[1] = {ir_var(f, i)};
  dg_expr *v = ir_bin(f, DG_EXPR_FLOORDIV, ir_sub(f, ir_var(f, i), ir_int(f, 3)), ir_int(f, 2));
  dg_block *root = ir_block_new(f, "root");
  root->body = ir_for(f, i, 4, DG_LOOP_SERIAL, DG_TAG_NONE, ir_store(f, A, ix, 1, v));
  f->body = ir_block_stmt(f, root);
  dg_status st;
  char *src = codegen_emit_source(f, f, codegen_lang_find("c"), &st);
  ir_func_free(f);
  CHECK(src != NULL);
  CHECK(strstr(src, "A[i] = dg_floordiv_i32((i - 3), 2);") != NULL);
  CHECK(strstr(src, "void " CODEGEN_KERNEL_FN "(void **args)") != NULL);
  CHECK(strstr(src, "void " CODEGEN_REFERENCE_FN "(void **args)") != NULL);
  CHECK(strstr(src, "static inline int32_t dg_floordiv_i32") != NULL);
  CHECK(codegen_lang_find("cobol") == NULL);
  free(src);
}
