/* test_local_stage.c: ManifestSharedMemoryLocalStage (src/lower/local_stage.c)
 * and the software-pipelined sketches of MultiLevelTilingTensorCore.
 *
 * Pipelined tensor-core samples (TVM's use_software_pipeline form: the
 * shared read caches annotated with the register stage, k1 pipelined
 * [0, 0, 1], k0 the seven-part pipeline around it) lower with a local
 * buffer per operand, compute the workload through the C emulation
 * (checked against the float64 reference) and compile with NVRTC for
 * sm_90; the same sample without the pipeline's annotations gives other
 * CUDA, without the register stage.
 */
#include <stdlib.h>
#include <string.h>

#include "dragon/codegen.h"
#include "dragon/lower.h"
#include "dragon/rt.h"
#include "dragon/rt_cuda.h"
#include "dragon/sched.h"
#include "dragon/search.h"
#include "dragon/wl.h"
#include "sched_support.h"
#include "test.h"

#define LOCAL_STAGE_KEY "tirx.manifest_shared_memory_local_stage"

static bool is_ann(const sched_inst *in, const char *prefix) {
  return in->kind == SCHED_INST_ANNOTATE && in->n_attrs == 1 && in->attrs[0].kind == SV_STR &&
         strncmp(in->attrs[0].s, prefix, strlen(prefix)) == 0;
}

static bool is_pipeline_inst(const sched_inst *in) {
  return is_ann(in, "software_pipeline_") || is_ann(in, LOCAL_STAGE_KEY) ||
         is_ann(in, "double_buffer_scope");
}

static bool pipelined(const sched_trace *t) {
  for (int i = 0; i < t->n; i++)
    if (is_ann(&t->insts[i], LOCAL_STAGE_KEY)) return true;
  return false;
}

/* t without AddSoftwarePipeline's annotations: the unpipelined sketch. */
static sched_trace *unpipelined(const sched_trace *t) {
  sched_trace *c = sched_trace_new();
  for (int i = 0; i < t->n; i++)
    if (!is_pipeline_inst(&t->insts[i])) sched_trace_append(c, &t->insts[i]);
  return c;
}


/* Postprocessed pipelined tensor-core samples of f that VerifyGPUCode
 * accepts; returns how many (at most want). */
static int tc_samples(const dg_func *f, uint64_t seed, sched **out, int want) {
  search_space sp;
  search_space_opts o = {.seed = seed};
  dg_status st;
  if (!search_space_generate(f, &o, &sp, &st)) {
    dg_test_fail(__FILE__, __LINE__, "space: %s", st.msg);
    return 0;
  }
  dg_rng rng;
  dg_rng_seed(&rng, seed);
  int n = 0;
  for (int k = 0; k < 400 && n < want; k++) {
    search_postprocs pp = {0};
    sched *s = search_sample(f, &sp, &pp, &rng, NULL, &st);
    if (!s) continue;
    if (!pipelined(sched_get_trace(s))) {
      sched_free(s);
      continue;
    }
    out[n++] = s;
  }
  search_space_free(&sp);
  return n;
}

static const char *kernel_text(const char *src) {
  const char *k = strstr(src, "__global__");
  return k ? k : src;
}

static char *cuda_of(const dg_func *f) {
  dg_status st;
  lw_program *p = lower_program(f, NULL, &st);
  if (!p) {
    dg_test_fail(__FILE__, __LINE__, "lower: %s", st.msg);
    return NULL;
  }
  char *src = codegen_emit_program(p, &codegen_lang_cuda, &st);
  lower_program_free(p);
  return src;
}

/* The checks every pipelined sample passes. */
static void check_sample(const dg_func *f, sched *s) {
  dg_status st;
  const dg_func *g = sched_func(s);
  lw_program *p = lower_program(g, NULL, &st);
  CHECK_MSG(p, "%s", st.msg);
  if (!p) return;
  /* a register stage per operand: local buffers named after the tiles */
  int locals = 0;
  for (int k = 0; k < p->n_kernels; k++)
    for (int i = 0; i < p->kernels[k].n_local; i++) {
      const dg_buffer *b = p->kernels[k].local[i];
      if (b->scope == DG_SCOPE_LOCAL && strstr(b->name, "_shared_dyn_local")) locals++;
    }
  CHECK_EQ(locals, 2);
  /* the fragments are prefetched: two versions or more */
  bool frag2 = false;
  for (int i = 0; i < p->kernels[0].n_local; i++) {
    const dg_buffer *b = p->kernels[0].local[i];
    frag2 |= b->scope == DG_SCOPE_WMMA_A && b->ndim >= 3 && b->shape[0] == 2;
  }
  CHECK(frag2);
  lower_program_free(p);

  char *src = cuda_of(g);
  CHECK(src);
  if (!src) return;
  const char *kt = kernel_text(src);
  CHECK(strstr(kt, "_shared_dyn_local["));
  CHECK(strstr(kt, "nvcuda::wmma::load_matrix_sync"));

  /* the same sample unpipelined: other CUDA, no register stage */
  sched_trace *u = unpipelined(sched_get_trace(s));
  sched *us = ts_replay(f, u);
  CHECK(us);
  if (us) {
    char *usrc = cuda_of(sched_func(us));
    CHECK(usrc);
    if (usrc) {
      CHECK(strcmp(usrc, src) != 0);
      CHECK(!strstr(kernel_text(usrc), "_shared_dyn_local["));
      free(usrc);
    }
    sched_free(us);
  }
  sched_trace_free(u);
  free(src);

  rt_check chk;
  CHECK_MSG(rt_program_check_c(f, g, 7, &chk, &st), "%s", st.msg);
  CHECK_MSG(chk.pass, "%s", chk.first_bad);
  dg_status probe;
  if (rt_nvrtc_available(&probe)) {
    rt_build b;
    rt_build_opts o = {.target = RT_BUILD_CUDA, .arch = "sm_90", .compile = true};
    CHECK_MSG(rt_program_build(g, &o, &b, &st), "%s: %s", rt_build_stage_name(b.stage), st.msg);
    rt_build_free(&b);
  } else {
    dg_test_skip("NVRTC: %s", probe.msg);
  }
}

static void check_workload(const char *spec, uint64_t seed, int want) {
  dg_status st;
  dg_func *f = wl_build(spec, &st);
  CHECK_MSG(f, "%s", st.msg);
  if (!f) return;
  sched *s[4];
  int n = tc_samples(f, seed, s, want);
  CHECK_MSG(n == want, "%s: %d pipelined tensor-core samples of %d", spec, n, want);
  for (int i = 0; i < n; i++) {
    check_sample(f, s[i]);
    sched_free(s[i]);
  }
  ir_func_free(f);
}

DG_TEST(local_stage_tc_gemm) { check_workload("gemm:m=64,n=64,k=128,dtype=f16", 3, 2); }

DG_TEST(local_stage_tc_batch_matmul) {
  check_workload("batch_matmul:b=2,n=64,m=32,k=64,dtype=f16", 5, 1);
}

DG_TEST(local_stage_sketches) {
  /* on sm_80+ the tensor-core rule gives its two sketches twice, the
   * second pair pipelined; none with no_software_pipeline, none where the
   * reduction is one 16-wide tile */
  dg_status st;
  dg_func *f = wl_build("gemm:m=128,n=128,k=256,dtype=f16", &st);
  CHECK(f);
  search_space sp;
  search_space_opts o = {.seed = 1};
  CHECK(search_space_generate(f, &o, &sp, &st));
  int piped = 0;
  for (int i = 0; i < sp.n; i++) piped += pipelined(sp.sketches[i]);
  CHECK_EQ(sp.n, 4);
  CHECK_EQ(piped, 2);
  search_space_free(&sp);
  o.no_software_pipeline = true;
  CHECK(search_space_generate(f, &o, &sp, &st));
  CHECK_EQ(sp.n, 2);
  for (int i = 0; i < sp.n; i++) CHECK(!pipelined(sp.sketches[i]));
  search_space_free(&sp);
  ir_func_free(f);
  f = wl_build("gemm:m=128,n=128,k=16,dtype=f16", &st);
  CHECK(f);
  o.no_software_pipeline = false;
  CHECK(search_space_generate(f, &o, &sp, &st));
  for (int i = 0; i < sp.n; i++) CHECK(!pipelined(sp.sketches[i]));
  search_space_free(&sp);
  ir_func_free(f);
}

DG_TEST(local_stage_refuses_unrolled_nest) {
  /* TVM's pass refuses a copy under loops other than serial or
   * vectorized (after the thread loops are lifted): an unrolled loop in
   * the nest is named */
  dg_status st;
  dg_func *f = wl_build("gemm:m=128,n=128,k=256,dtype=f16", &st);
  CHECK(f);
  sched *s[1];
  CHECK_EQ(tc_samples(f, 3, s, 1), 1);
  dg_func *g = ir_func_clone(sched_func(s[0]));
  /* the first loop over a register-stage copy made unrolled */
  dg_block *b = ir_find_block(g, "A_shared_dyn");
  CHECK(b && ir_anns_get(&b->anns, LOCAL_STAGE_KEY));
  bool changed = false;
  dg_stmt *stack[64];
  int n = 0;
  stack[n++] = g->body;
  while (n && !changed) {
    dg_stmt *x = stack[--n];
    if (x->kind == DG_STMT_SEQ)
      for (int i = 0; i < x->n && n < 64; i++) stack[n++] = x->stmts[i];
    else if (x->kind == DG_STMT_BLOCK)
      stack[n++] = x->block->body;
    else if (x->kind == DG_STMT_FOR) {
      if (x->loop_kind == DG_LOOP_SERIAL && x->body->kind == DG_STMT_FOR &&
          x->body->loop_kind == DG_LOOP_THREAD) {
        const dg_stmt *y = x->body;
        while (y->kind == DG_STMT_FOR) y = y->body;
        if (y->kind == DG_STMT_BLOCK && y->block == b) {
          x->loop_kind = DG_LOOP_UNROLLED;
          changed = true;
          continue;
        }
      }
      stack[n++] = x->body;
    }
  }
  CHECK(changed);
  lw_program *p = lower_program(g, NULL, &st);
  CHECK(!p);
  CHECK_MSG(strstr(st.msg, LOCAL_STAGE_KEY) && strstr(st.msg, "A_shared_dyn"), "%s", st.msg);
  lower_program_free(p);
  ir_func_free(g);
  sched_free(s[0]);
  ir_func_free(f);
}
