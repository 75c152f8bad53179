/* test_pipeline.c: software pipelining (src/lower/pipeline.c), VerifyGPUCode
 * counting the multi-buffered stages, and vthread extents past 8.
 *
 * The pipelined samples of MultiLevelTiling's design spaces, for every
 * family that has pipelined sketches, lower to prologue, body and epilogue
 * over multi-buffered shared tiles, compute the workload through the C
 * emulation (checked against the float64 reference) and compile with
 * NVRTC for sm_90. The multi-buffered bytes are TVM's, sample for sample
 * (tests/data/tvm_shared, from scripts/tvm_spaces.py --shared-bytes).
 */
#include <jansson.h>
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

/* ---- traces ----------------------------------------------------------------------- */

static bool is_pipeline_ann(const sched_inst *in) {
  return in->kind == SCHED_INST_ANNOTATE && in->n_attrs == 1 && in->attrs[0].kind == SV_STR &&
         strncmp(in->attrs[0].s, "software_pipeline_", 18) == 0;
}

/* The Annotate of `key` in t (-1: none). */
static int find_ann(const sched_trace *t, const char *key) {
  for (int i = 0; i < t->n; i++)
    if (is_pipeline_ann(&t->insts[i]) && strcmp(t->insts[i].attrs[0].s, key) == 0) return i;
  return -1;
}

/* The last stage of a pipelined trace (-1: not pipelined). */
static int max_stage(const sched_trace *t) {
  int i = find_ann(t, "software_pipeline_stage");
  if (i < 0) return -1;
  const sched_val *v = &t->insts[i].inputs[1];
  int m = 0;
  for (int j = 0; v->kind == SV_ARRAY && j < v->n; j++)
    if (v->items[j].i > m) m = (int)v->items[j].i;
  return m;
}

/* t without its software-pipeline annotations. */
static sched_trace *unpipelined(const sched_trace *t) {
  sched_trace *c = sched_trace_new();
  for (int i = 0; i < t->n; i++)
    if (!is_pipeline_ann(&t->insts[i])) sched_trace_append(c, &t->insts[i]);
  return c;
}

/* t with annotation `key` set to v[0..n) (NULL if t has none). */
static sched_trace *with_ann(const sched_trace *t, const char *key, const int64_t *v, int n) {
  int i = find_ann(t, key);
  if (i < 0) return NULL;
  sched_trace *c = sched_trace_clone(t);
  sched_val *items = DG_ANEWN(c->arena, sched_val, n > 0 ? n : 1);
  for (int j = 0; j < n; j++) items[j] = (sched_val){.kind = SV_INT, .i = v[j]};
  c->insts[i].inputs[1] = (sched_val){.kind = SV_ARRAY, .items = items, .n = n};
  return c;
}


/* The extent of the pipelined loop of a scheduled kernel (0: none). */
static int64_t pipelined_extent(const dg_stmt *s) {
  if (!s) return 0;
  int64_t e = 0;
  switch (s->kind) {
    case DG_STMT_FOR:
      if (ir_anns_get(&s->anns, "software_pipeline_stage")) return s->extent;
      return pipelined_extent(s->body);
    case DG_STMT_SEQ:
      for (int i = 0; i < s->n && !e; i++) e = pipelined_extent(s->stmts[i]);
      return e;
    case DG_STMT_BLOCK: return pipelined_extent(s->block->body);
    case DG_STMT_IF:
      e = pipelined_extent(s->then_s);
      return e ? e : pipelined_extent(s->else_s);
    case DG_STMT_STORE: return 0;
  }
  return 0;
}

/* Shared bytes of a program's launches, as TVM counts them (no padding). */
static int64_t shared_bytes(const lw_program *p) {
  int64_t n = 0;
  for (int k = 0; k < p->n_kernels; k++)
    for (int i = 0; i < p->kernels[k].n_shared; i++) {
      const dg_buffer *b = p->kernels[k].shared[i];
      n += ir_buffer_numel(b) * dg_dtype_bytes(b->dtype);
    }
  return n;
}

static lw_program *lowered(const dg_func *f, bool verify, dg_status *st) {
  lower_opts o = {.skip_verify = !verify};
  return lower_program(f, &o, st);
}

/* Samples of f's design space until `want` pipelined ones are found (at
 * most `tries` draws); returns how many, in out. */
static int pipelined_samples(const dg_func *f, uint64_t seed, sched **out, int want, int tries) {
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
  for (int k = 0; k < tries && n < want; k++) {
    search_postprocs pp = {0};
    sched *s = search_sample(f, &sp, &pp, &rng, NULL, &st);
    if (!s) continue;
    int m = max_stage(sched_get_trace(s));
    /* one of each pipeline depth first */
    bool seen = false;
    for (int i = 0; i < n; i++) seen |= max_stage(sched_get_trace(out[i])) == m;
    if (m < 0 || (seen && k < tries / 2)) {
      sched_free(s);
      continue;
    }
    out[n++] = s;
  }
  search_space_free(&sp);
  return n;
}

static int pipelined_sketches(const dg_func *f) {
  search_space sp;
  search_space_opts o = {.seed = 1};
  dg_status st;
  if (!search_space_generate(f, &o, &sp, &st)) return -1;
  int n = 0;
  for (int i = 0; i < sp.n; i++) n += max_stage(sp.sketches[i]) >= 0;
  search_space_free(&sp);
  return n;
}

/* Whether some shared buffer of the launches has `versions` as its new
 * leading dimension. */
static bool has_versions(const lw_program *p, int64_t versions) {
  for (int k = 0; k < p->n_kernels; k++)
    for (int i = 0; i < p->kernels[k].n_shared; i++)
      if (p->kernels[k].shared[i]->ndim >= 2 && p->kernels[k].shared[i]->shape[0] == versions)
        return true;
  return false;
}

/* ---- every family's pipelined samples --------------------------------------------- */

/* Small workloads of the families whose design spaces have pipelined
 * sketches (every other family must have none). */
static const struct {
  const char *family, *spec;
} piped_families[] = {
    {"gemm", "gemm:m=64,n=64,k=128,dtype=f32"},
    {"gemm", "gemm:m=40,n=40,k=64,dtype=f16"}, /* not in WMMA form: MultiLevelTiling */
    {"batch_matmul", "batch_matmul:b=2,n=32,m=32,k=64,dtype=f32"},
    {"gemv", "gemv:n=64,k=128,dtype=f32"},
    {"transpose_batch_matmul", "transpose_batch_matmul:batch=1,seq=32,heads=2,dim=16,dtype=f32"},
    {"conv1d_nlc", "conv1d_nlc:n=1,l=32,ci=16,co=32,kernel=3,stride=1,pad=1,dilation=1,groups=1,"
                   "dtype=f32"},
    {"conv2d_nhwc", "conv2d_nhwc:n=1,h=8,w=8,ci=8,co=16,kernel=3,stride=1,pad=1,dilation=1,"
                    "groups=1,dtype=f32"},
    {"conv2d_nchw", "conv2d_nchw:n=1,h=8,w=8,ci=8,co=16,kernel=3,stride=1,pad=1,dilation=1,"
                    "dtype=f32"},
    {"conv3d_ndhwc", "conv3d_ndhwc:n=1,d=4,h=6,w=6,ci=4,co=8,kernel=3,stride=1,pad=1,dilation=1,"
                     "groups=1,dtype=f32"},
    {"depthwise_conv2d_nhwc", "depthwise_conv2d_nhwc:n=1,h=8,w=8,c=16,kernel=3,stride=1,pad=1,"
                              "dilation=1,dtype=f32"},
    {"conv2d_transpose_nhwc", "conv2d_transpose_nhwc:n=1,h=4,w=4,ci=16,co=8,kernel=4,stride=2,"
                              "pad=1,dtype=f32"},
    {"conv2d_capsule_nhwijc", "conv2d_capsule_nhwijc:n=1,h=8,w=8,ci=4,co=4,kernel=3,stride=2,"
                              "pad=1,capsule=4,dtype=f32"},
    {"conv2d_bias_bn_relu", "conv2d_bias_bn_relu:n=1,h=8,w=8,ci=4,co=16,kernel=3,stride=1,pad=1,"
                            "dilation=1,dtype=f32"},
};

static bool family_piped(const char *name) {
  for (size_t i = 0; i < DG_ARRAY_LEN(piped_families); i++)
    if (strcmp(piped_families[i].family, name) == 0) return true;
  return false;
}

DG_TEST(pipeline_families_without_pipelined_sketches) {
  /* the table below covers every family whose space has pipelined sketches */
  for (int i = 0; i < wl_family_count(); i++) {
    if (family_piped(wl_family_name(i))) continue;
    dg_status st;
    dg_func *f = wl_build(wl_family_example(i), &st);
    CHECK_MSG(f, "%s: %s", wl_family_example(i), st.msg);
    int n = pipelined_sketches(f);
    CHECK_MSG(n == 0, "%s: %d pipelined sketches; add it to piped_families", wl_family_name(i), n);
    ir_func_free(f);
  }
}

DG_TEST(pipeline_every_family_samples_compute_and_compile) {
  dg_status probe;
  bool nvrtc = rt_nvrtc_available(&probe);
  if (!nvrtc) dg_test_skip("NVRTC: %s (the C emulation still runs)", probe.msg);
  int checked = 0, depths[8] = {0};
  for (size_t w = 0; w < DG_ARRAY_LEN(piped_families); w++) {
    const char *spec = piped_families[w].spec;
    dg_status st;
    dg_func *f = wl_build(spec, &st);
    CHECK_MSG(f, "%s: %s", spec, st.msg);
    CHECK_MSG(pipelined_sketches(f) == 2, "%s: %d pipelined sketches", spec, pipelined_sketches(f));
    sched *got[2];
    int n = pipelined_samples(f, 7 + w, got, 2, 300);
    CHECK_MSG(n == 2, "%s: %d pipelined samples", spec, n);
    for (int i = 0; i < n; i++) {
      const sched_trace *t = sched_get_trace(got[i]);
      int m = max_stage(t);
      CHECK(m >= 1 && m < 8);
      depths[m]++;
      /* lowered: the copies' tiles in m + 1 versions */
      lw_program *p = lowered(sched_func(got[i]), true, &st);
      CHECK_MSG(p, "%s: %s", spec, st.msg);
      CHECK_MSG(has_versions(p, m + 1), "%s: no shared tile in %d versions", spec, m + 1);
      lower_program_free(p);
      /* the C emulation computes the workload */
      rt_check chk;
      CHECK_MSG(rt_program_check_c(f, sched_func(got[i]), 3, &chk, &st), "%s: %s", spec, st.msg);
      CHECK_MSG(chk.pass, "%s (stage %d): %s", spec, m, chk.first_bad);
      /* and the CUDA compiles for sm_90 */
      if (nvrtc) {
        rt_build b;
        rt_build_opts o = {.target = RT_BUILD_CUDA, .arch = "sm_90", .compile = true};
        bool ok = rt_program_build(sched_func(got[i]), &o, &b, &st);
        CHECK_MSG(ok, "%s: %s: %s", spec, rt_build_stage_name(b.stage), st.msg);
        rt_build_free(&b);
      }
      checked++;
      sched_free(got[i]);
    }
    ir_func_free(f);
  }
  CHECK_EQ(checked, 2 * (int)DG_ARRAY_LEN(piped_families));
  /* both of MultiLevelTiling's depths (stages 0, 0, 2 and 0, 0, 3) */
  CHECK(depths[2] > 0 && depths[3] > 0);
}

/* ---- pipelined and unpipelined CUDA ------------------------------------------------- */

/* The text after the first kernel's opening (past the preamble). */
static const char *kernel_text(const char *src) {
  const char *k = strstr(src, "__global__");
  return k ? k : src;
}

static int count(const char *s, const char *sub) {
  int n = 0;
  for (const char *p = strstr(s, sub); p; p = strstr(p + 1, sub)) n++;
  return n;
}

/* A pipelined sample of gemm whose copies go asynchronous (found by
 * seed); NULL after a failure. */
static sched *async_gemm_sample(const dg_func *f, int want_stage) {
  for (uint64_t seed = 1; seed < 40; seed++) {
    sched *got[2];
    int n = pipelined_samples(f, seed, got, 2, 200);
    sched *keep = NULL;
    for (int i = 0; i < n; i++) {
      if (!keep && max_stage(sched_get_trace(got[i])) == want_stage) {
        keep = got[i];
        continue;
      }
      sched_free(got[i]);
    }
    if (keep && pipelined_extent(sched_func(keep)->body) > want_stage) return keep;
    sched_free(keep);
  }
  dg_test_fail(__FILE__, __LINE__, "no pipelined sample of stage %d", want_stage);
  return NULL;
}

DG_TEST(pipeline_cuda_differs_from_unpipelined) {
  dg_status st;
  dg_func *f = wl_build("gemm:m=64,n=64,k=256,dtype=f32", &st);
  CHECK(f);
  sched *s = async_gemm_sample(f, 2);
  CHECK(s);
  sched_trace *plain_t = unpipelined(sched_get_trace(s));
  sched *u = ts_replay(f, plain_t);
  CHECK(u);
  lw_program *pp = lowered(sched_func(s), true, &st);
  CHECK_MSG(pp, "%s", st.msg);
  lw_program *pu = lowered(sched_func(u), true, &st);
  CHECK_MSG(pu, "%s", st.msg);
  /* the same tiles, three versions each */
  CHECK_EQ(pp->kernels[0].n_shared, pu->kernels[0].n_shared);
  for (int i = 0; i < pp->kernels[0].n_shared; i++) {
    const dg_buffer *a = pp->kernels[0].shared[i], *b = pu->kernels[0].shared[i];
    CHECK_STREQ(a->name, b->name);
    CHECK_EQ(a->ndim, b->ndim + 1);
    CHECK_EQ(a->shape[0], 3);
    CHECK_EQ(ir_buffer_numel(a), 3 * ir_buffer_numel(b));
  }
  char *cs = codegen_emit_program(pp, &codegen_lang_cuda, &st);
  char *cu = codegen_emit_program(pu, &codegen_lang_cuda, &st);
  CHECK(cs && cu);
  const char *ks = kernel_text(cs), *ku = kernel_text(cu);
  CHECK(strcmp(ks, ku) != 0);
  /* cp.async for the copies, committed per iteration, waited for with two
   * groups in flight (stage 2), then a barrier, then the compute */
  CHECK(strstr(ks, "dg_cp_async4(&") || strstr(ks, "dg_cp_async8(&") ||
        strstr(ks, "dg_cp_async16(&"));
  CHECK(strstr(ks, "dg_cp_async_commit();"));
  const char *wait = strstr(ks, "dg_cp_async_wait(2);");
  CHECK(wait);
  const char *sync = strstr(wait, "__syncthreads();");
  CHECK(sync);
  CHECK(strstr(sync, "C_local[") != NULL);
  CHECK(!strstr(ku, "dg_cp_async") && !strstr(ku, "dg_cp_async_wait("));
  /* the body loop: copies, commit, wait, barrier, compute, and a barrier
   * last, before the next iteration's copies overwrite the version just
   * read */
  const char *loop = strstr(ks, "for (int32_t k_0_fused = 0;");
  CHECK(loop);
  const char *open = strchr(loop, '{'), *end = open;
  for (int depth = 0; *end; end++) {
    depth += *end == '{';
    depth -= *end == '}';
    if (depth == 0) break;
  }
  CHECK(*end == '}');
  char *body = strndup(open, (size_t)(end - open));
  CHECK_EQ(count(body, "__syncthreads();"), 2);
  const char *last = strstr(body, "__syncthreads();");
  last = strstr(last + 1, "__syncthreads();");
  CHECK(last && strspn(last + strlen("__syncthreads();"), " \n") ==
                    strlen(last + strlen("__syncthreads();")));
  CHECK(strstr(body, "dg_cp_async_commit();") < strstr(body, "dg_cp_async_wait(2);"));
  free(body);
  /* the shared arrays three times as large */
  for (int i = 0; i < pp->kernels[0].n_shared; i++) {
    char decl[128];
    snprintf(decl, sizeof decl, "float %s[%lld];", pp->kernels[0].shared[i]->name,
             (long long)ir_buffer_numel(pp->kernels[0].shared[i]));
    CHECK_MSG(strstr(ks, decl), "%s", decl);
    snprintf(decl, sizeof decl, "float %s[%lld];", pu->kernels[0].shared[i]->name,
             (long long)ir_buffer_numel(pu->kernels[0].shared[i]));
    CHECK_MSG(strstr(ku, decl), "%s", decl);
  }
  /* both compute the same GEMM */
  rt_check chk;
  CHECK_MSG(rt_program_check_c(f, sched_func(s), 5, &chk, &st), "%s", st.msg);
  CHECK_MSG(chk.pass, "%s", chk.first_bad);
  CHECK_MSG(rt_program_check_c(f, sched_func(u), 5, &chk, &st), "%s", st.msg);
  CHECK_MSG(chk.pass, "%s", chk.first_bad);
  free(cs);
  free(cu);
  lower_program_free(pp);
  lower_program_free(pu);
  sched_free(u);
  sched_trace_free(plain_t);
  sched_free(s);
  ir_func_free(f);
}

/* ---- the pipeline's structure -------------------------------------------------------- */

DG_TEST(pipeline_prologue_body_epilogue) {
  dg_status st;
  dg_func *f = wl_build("gemm:m=64,n=64,k=256,dtype=f32", &st);
  CHECK(f);
  sched *s = async_gemm_sample(f, 2);
  CHECK(s);
  int64_t E = pipelined_extent(sched_func(s)->body);
  CHECK(E > 2);
  for (int64_t stage = 1; stage <= 3; stage++) {
    int64_t v[3] = {0, 0, stage};
    sched_trace *t = with_ann(sched_get_trace(s), "software_pipeline_stage", v, 3);
    CHECK(t);
    sched *x = ts_replay(f, t);
    CHECK(x);
    lower_opts o = {.skip_verify = true};
    lw_program *p = lower_program(sched_func(x), &o, &st);
    CHECK_MSG(p, "%s", st.msg);
    CHECK(has_versions(p, stage + 1));
    char *txt = lower_print(p);
    /* commits: one per iteration of the prologue (stage), the body (1) and
     * the epilogue (stage); the body loop runs E - stage iterations */
    CHECK_EQ(count(txt, "async_commit"), 2 * stage + (E > stage));
    char head[64];
    snprintf(head, sizeof head, " in %lld auto_unroll", (long long)(E - stage));
    if (E > stage) CHECK_MSG(strstr(txt, head), "%s", head);
    char wait[32];
    snprintf(wait, sizeof wait, "async_wait %lld", (long long)stage);
    CHECK(strstr(txt, wait));
    free(txt);
    rt_check chk;
    CHECK_MSG(rt_program_check_c(f, sched_func(x), 2, &chk, &st), "%s", st.msg);
    CHECK_MSG(chk.pass, "stage %lld: %s", (long long)stage, chk.first_bad);
    lower_program_free(p);
    sched_free(x);
    sched_trace_free(t);
  }
  /* the copies in the other order, B before A */
  int64_t order[3] = {1, 0, 2};
  sched_trace *t = with_ann(sched_get_trace(s), "software_pipeline_order", order, 3);
  sched *x = ts_replay(f, t);
  CHECK(x);
  rt_check chk;
  CHECK_MSG(rt_program_check_c(f, sched_func(x), 4, &chk, &st), "%s", st.msg);
  CHECK_MSG(chk.pass, "%s", chk.first_bad);
  sched_free(x);
  sched_trace_free(t);
  /* no asynchronous stage (none of the loop's stages is listed): still
   * multi-buffered, no cp.async, no waits */
  int64_t none[1] = {7};
  t = with_ann(sched_get_trace(s), "software_pipeline_async_stages", none, 1);
  x = ts_replay(f, t);
  CHECK(x);
  lw_program *p = lowered(sched_func(x), true, &st);
  CHECK_MSG(p, "%s", st.msg);
  CHECK(has_versions(p, 3));
  char *txt = lower_print(p);
  CHECK(!strstr(txt, "async") && !strstr(txt, "cp.async"));
  free(txt);
  lower_program_free(p);
  sched_free(x);
  sched_trace_free(t);
  /* a target without cp.async: the same, for the asynchronous stage too */
  lw_limits lim = lower_limits_sm90;
  lim.async_copy = false;
  lower_opts lo = {.limits = &lim};
  p = lower_program(sched_func(s), &lo, &st);
  CHECK_MSG(p, "%s", st.msg);
  txt = lower_print(p);
  CHECK(has_versions(p, 3) && !strstr(txt, "cp.async") && !strstr(txt, "async_wait"));
  free(txt);
  lower_program_free(p);
  sched_free(s);
  ir_func_free(f);
}

DG_TEST(pipeline_short_loops) {
  /* a pipelined loop of fewer iterations than stages: prologue and
   * epilogue only, the parts out of range left out */
  dg_status st;
  dg_func *f = wl_build("gemm:m=32,n=32,k=32,dtype=f32", &st);
  CHECK(f);
  int found = 0;
  for (uint64_t seed = 1; seed < 60 && found < 2; seed++) {
    sched *got[2];
    int n = pipelined_samples(f, seed, got, 2, 100);
    for (int i = 0; i < n; i++) {
      int64_t E = pipelined_extent(sched_func(got[i])->body);
      int m = max_stage(sched_get_trace(got[i]));
      if (E <= m && found < 2) {
        lw_program *p = lowered(sched_func(got[i]), true, &st);
        CHECK_MSG(p, "%s", st.msg);
        char *txt = lower_print(p);
        /* no body loop: m iterations of prologue, E of epilogue, each
         * committing its (possibly empty) group */
        CHECK_EQ(count(txt, "async_commit"), m + E);
        CHECK(!strstr(txt, "pipeline("));
        free(txt);
        lower_program_free(p);
        rt_check chk;
        CHECK_MSG(rt_program_check_c(f, sched_func(got[i]), 9, &chk, &st), "%s", st.msg);
        CHECK_MSG(chk.pass, "E %lld stage %d: %s", (long long)E, m, chk.first_bad);
        found++;
      }
      sched_free(got[i]);
    }
  }
  CHECK_EQ(found, 2);
  ir_func_free(f);
}

DG_TEST(pipeline_rejects_bad_annotations) {
  dg_status st;
  dg_func *f = wl_build("gemm:m=64,n=64,k=256,dtype=f32", &st);
  CHECK(f);
  sched *s = async_gemm_sample(f, 2);
  CHECK(s);
  static const struct {
    const char *key;
    int64_t v[3];
    int n;
    const char *why;
  } bad[] = {
      {"software_pipeline_order", {0, 0, 2}, 3, "statements 0 and 1 have the same order 0"},
      {"software_pipeline_stage", {2, 0, 0}, 3,
       "statement 2 in stage 0 reads what statement 0 writes in the later stage 2"},
      {"software_pipeline_order", {0, 2, 1}, 3,
       "statement 2 reads what statement 1 writes in the same stage 0, but is ordered before it"},
      {"software_pipeline_stage", {0, 2}, 2,
       "software_pipeline_stage has 2 entries, software_pipeline_order 3"},
  };
  for (size_t i = 0; i < DG_ARRAY_LEN(bad); i++) {
    int64_t stage0[3] = {0, 0, 0};
    sched_trace *t0 = i == 2 ? with_ann(sched_get_trace(s), "software_pipeline_stage", stage0, 3)
                             : sched_trace_clone(sched_get_trace(s));
    sched_trace *t = with_ann(t0, bad[i].key, bad[i].v, bad[i].n);
    sched *x = ts_replay(f, t);
    CHECK(x);
    lw_program *p = lowered(sched_func(x), true, &st);
    CHECK_MSG(!p, "%zu lowered", i);
    CHECK_MSG(strstr(st.msg, bad[i].why), "%zu: %s", i, st.msg);
    sched_free(x);
    sched_trace_free(t);
    sched_trace_free(t0);
  }
  sched_free(s);
  ir_func_free(f);
}

DG_TEST(pipeline_async_only_where_possible) {
  /* a convolution: the padded input's copy is a select (stays a plain
   * store, multi-buffered all the same), the weights' a plain load
   * (cp.async); f16 copies of one element (2 bytes) stay plain, and a
   * launch with no cp.async left has no commits or waits */
  dg_status st;
  dg_func *f = wl_build("conv2d_nhwc:n=1,h=8,w=8,ci=8,co=16,kernel=3,stride=1,pad=1,dilation=1,"
                        "groups=1,dtype=f32", &st);
  CHECK(f);
  sched *got[2];
  CHECK_EQ(pipelined_samples(f, 3, got, 2, 300), 2);
  for (int i = 0; i < 2; i++) {
    lw_program *p = lowered(sched_func(got[i]), true, &st);
    CHECK_MSG(p, "%s", st.msg);
    char *src = codegen_emit_program(p, &codegen_lang_cuda, &st);
    CHECK(src);
    const char *k = kernel_text(src);
    /* PadInput_shared stored directly, weight_shared through cp.async */
    CHECK(strstr(k, "PadInput_shared[") && strstr(k, "] = ((("));
    CHECK(!strstr(k, "dg_cp_async4(&PadInput_shared") && !strstr(k, "(&PadInput_shared"));
    CHECK(strstr(k, "(&weight_shared") && strstr(k, "dg_cp_async"));
    free(src);
    lower_program_free(p);
    sched_free(got[i]);
  }
  ir_func_free(f);
  f = wl_build("gemm:m=40,n=40,k=64,dtype=f16", &st);
  CHECK(f);
  int plain = 0;
  for (uint64_t seed = 1; seed < 30 && plain < 1; seed++) {
    int n = pipelined_samples(f, seed, got, 2, 100);
    for (int i = 0; i < n; i++) {
      char *js = sched_trace_to_json(sched_get_trace(got[i]));
      /* both copies of one element at a time: no vectorized fetch */
      bool scalar = !strstr(js, "\"Vectorize\"");
      free(js);
      if (scalar && !plain) {
        lw_program *p = lowered(sched_func(got[i]), true, &st);
        CHECK_MSG(p, "%s", st.msg);
        char *txt = lower_print(p);
        CHECK(has_versions(p, max_stage(sched_get_trace(got[i])) + 1));
        CHECK(strstr(txt, "async A_shared") && !strstr(txt, "cp.async"));
        CHECK(!strstr(txt, "async_commit") && !strstr(txt, "async_wait"));
        free(txt);
        lower_program_free(p);
        plain++;
      }
      sched_free(got[i]);
    }
  }
  CHECK_EQ(plain, 1);
  ir_func_free(f);
}

/* ---- VerifyGPUCode ---------------------------------------------------------------- */

DG_TEST(pipeline_verify_counts_every_version) {
  /* a pipelined sample VerifyGPUCode refuses for its multi-buffered shared
   * memory, whose schedule without the annotations it accepts */
  dg_status st;
  dg_func *f = wl_build("gemm:m=512,n=512,k=512,dtype=f32", &st);
  CHECK(f);
  search_space sp;
  search_space_opts so = {.seed = 5};
  CHECK(search_space_generate(f, &so, &sp, &st));
  dg_rng rng;
  dg_rng_seed(&rng, 5);
  int found = 0;
  for (int k = 0; k < 400 && found < 2; k++) {
    sched *s = search_sample(f, &sp, NULL, &rng, NULL, &st);
    if (!s) continue;
    int m = max_stage(sched_get_trace(s));
    if (m < 0) {
      sched_free(s);
      continue;
    }
    sched_trace *tp = sched_trace_clone(sched_get_trace(s));
    sched_trace *tu = unpipelined(tp);
    sched *a = ts_replay(f, tp), *b = ts_replay(f, tu);
    CHECK(a && b);
    search_postprocs ppa = {0}, ppb = {0};
    dg_status sa, sb;
    bool oka = search_postproc_cuda(a, &ppa, &sa);
    bool okb = search_postproc_cuda(b, &ppb, &sb);
    if (!oka && okb && ppa.rejected[SEARCH_POSTPROC_VERIFY_GPU_CODE] == 1 &&
        strstr(sa.msg, "bytes of shared memory (limit 49152)")) {
      /* the refused bytes are every version of the accepted tiles */
      lw_program *pu = lowered(sched_func(b), true, &st);
      CHECK_MSG(pu, "%s", st.msg);
      long long want = (long long)(m + 1) * lower_kernel_shared_bytes(&pu->kernels[0], false);
      char msg[64];
      snprintf(msg, sizeof msg, ": %lld bytes of shared memory", want);
      CHECK_MSG(strstr(sa.msg, msg), "%s, want%s", sa.msg, msg);
      CHECK(want <= (m + 1) * 49152LL && want > 49152);
      lower_program_free(pu);
      found++;
    }
    sched_free(a);
    sched_free(b);
    sched_trace_free(tp);
    sched_trace_free(tu);
    sched_free(s);
  }
  CHECK_EQ(found, 2);
  search_space_free(&sp);
  ir_func_free(f);
}

DG_TEST(pipeline_shared_bytes_match_tvm) {
  /* TVM's VerifyGPUCode lowering of its own postprocessed samples
   * (tests/data/tvm_shared): the shared memory dragon allocates, pipelined
   * and with the pipeline annotations left out, is TVM's to the byte */
  static const char *const aliases[] = {"C1D", "C2D", "C3D", "CAP", "DEP", "DIL", "GMM",
                                        "GRP", "T2D", "NRM", "SFM", "CBR", "TBG"};
  int compared = 0, pipelined = 0;
  for (size_t w = 0; w < DG_ARRAY_LEN(aliases); w++) {
    char name[64], spec[16];
    snprintf(name, sizeof name, "tvm_shared/%s.json", aliases[w]);
    snprintf(spec, sizeof spec, "%s/0", aliases[w]);
    json_error_t je;
    json_t *doc = json_load_file(dg_test_data(name), 0, &je);
    CHECK_MSG(doc, "%s: %s", name, je.text);
    dg_status st;
    dg_func *f = wl_build(spec, &st);
    CHECK(f);
    json_t *samples = json_object_get(doc, "samples");
    for (size_t i = 0; i < json_array_size(samples); i++) {
      json_t *smp = json_array_get(samples, i);
      char *js = json_dumps(json_object_get(smp, "trace"), JSON_COMPACT);
      sched_trace *t = sched_trace_from_json(js, &st);
      free(js);
      CHECK_MSG(t, "%s %zu: %s", spec, i, st.msg);
      bool piped = json_integer_value(json_object_get(smp, "pipelined")) != 0;
      CHECK_EQ(piped, max_stage(t) >= 0);
      for (int variant = 0; variant < (piped ? 2 : 1); variant++) {
        sched_trace *tv = variant ? unpipelined(t) : sched_trace_clone(t);
        sched *s = ts_replay(f, tv);
        CHECK(s);
        lw_program *p = lowered(sched_func(s), false, &st);
        CHECK_MSG(p, "%s %zu: %s", spec, i, st.msg);
        json_int_t want = json_integer_value(
            json_object_get(smp, variant ? "shared_bytes_unpipelined" : "shared_bytes"));
        CHECK_MSG(shared_bytes(p) == want, "%s sample %zu%s: %lld bytes of shared memory, TVM %lld",
                  spec, i, variant ? " unpipelined" : "", (long long)shared_bytes(p),
                  (long long)want);
        /* and VerifyGPUCode's verdict at TVM's limit is TVM's: accepted */
        CHECK_MSG(variant || lower_check(sched_func(s), NULL, &st), "%s %zu: %s", spec, i, st.msg);
        lower_program_free(p);
        sched_free(s);
        sched_trace_free(tv);
        compared++;
      }
      pipelined += piped;
      sched_trace_free(t);
    }
    ir_func_free(f);
    json_decref(doc);
  }
  CHECK(compared >= 50 && pipelined >= 18);
}

/* ---- virtual threads past 8 -------------------------------------------------------- */

/* The widest vthread loop of a scheduled kernel. */
static int64_t widest_vthread(const dg_stmt *s) {
  if (!s) return 1;
  int64_t w = 1, x;
  switch (s->kind) {
    case DG_STMT_FOR:
      if (s->loop_kind == DG_LOOP_THREAD && dg_thread_tag_is_vthread(s->tag)) w = s->extent;
      x = widest_vthread(s->body);
      return x > w ? x : w;
    case DG_STMT_SEQ:
      for (int i = 0; i < s->n; i++)
        if ((x = widest_vthread(s->stmts[i])) > w) w = x;
      return w;
    case DG_STMT_BLOCK: return widest_vthread(s->block->body);
    case DG_STMT_IF: return widest_vthread(s->then_s);
    case DG_STMT_STORE: return 1;
  }
  return w;
}

DG_TEST(pipeline_vthread_past_8_accepted) {
  /* TVM's postprocessed samples with a vthread wider than 8 (TVM expands
   * virtual threads before its check): dragon's VerifyGPUCode accepts
   * them too */
  static const char *const aliases[] = {"C1D", "C2D", "C3D", "CAP", "DEP", "DIL", "GMM",
                                        "GRP", "T2D", "NRM", "SFM", "CBR", "TBG"};
  int wide = 0;
  for (size_t w = 0; w < DG_ARRAY_LEN(aliases); w++) {
    char name[64], spec[16];
    snprintf(name, sizeof name, "tvm_spaces/%s.json", aliases[w]);
    snprintf(spec, sizeof spec, "%s/0", aliases[w]);
    json_error_t je;
    json_t *doc = json_load_file(dg_test_data(name), 0, &je);
    CHECK_MSG(doc, "%s: %s", name, je.text);
    dg_status st;
    dg_func *f = wl_build(spec, &st);
    CHECK(f);
    json_t *post = json_object_get(doc, "postprocessed");
    for (size_t k = 0; k < json_array_size(post); k++) {
      json_t *j = json_array_get(post, k);
      if (json_is_null(j)) continue;
      char *js = json_dumps(j, JSON_COMPACT);
      sched_trace *t = sched_trace_from_json(js, &st);
      free(js);
      CHECK(t);
      sched *s = ts_replay(f, t);
      CHECK(s);
      if (widest_vthread(sched_func(s)->body) > 8) {
        CHECK_MSG(lower_check(sched_func(s), NULL, &st), "%s %zu: %s", spec, k, st.msg);
        wide++;
      }
      sched_free(s);
      sched_trace_free(t);
    }
    ir_func_free(f);
    json_decref(doc);
  }
  CHECK(wide >= 2);
  /* and such a sample of a small GEMM computes it and compiles */
  dg_status st;
  dg_func *f = wl_build("gemm:m=128,n=128,k=32,dtype=f32", &st);
  CHECK(f);
  search_space sp;
  search_space_opts so = {.seed = 2};
  CHECK(search_space_generate(f, &so, &sp, &st));
  dg_rng rng;
  dg_rng_seed(&rng, 2);
  int checked = 0;
  for (int k = 0; k < 400 && checked < 1; k++) {
    search_postprocs pp = {0};
    sched *s = search_sample(f, &sp, &pp, &rng, NULL, &st);
    if (!s) continue;
    if (widest_vthread(sched_func(s)->body) > 8) {
      rt_check chk;
      CHECK_MSG(rt_program_check_c(f, sched_func(s), 1, &chk, &st), "%s", st.msg);
      CHECK_MSG(chk.pass, "%s", chk.first_bad);
      dg_status probe;
      if (rt_nvrtc_available(&probe)) {
        rt_build b;
        rt_build_opts o = {.target = RT_BUILD_CUDA, .arch = "sm_90", .compile = true};
        CHECK_MSG(rt_program_build(sched_func(s), &o, &b, &st), "%s", st.msg);
        rt_build_free(&b);
      } else {
        dg_test_skip("NVRTC: %s", probe.msg);
      }
      checked++;
    }
    sched_free(s);
  }
  CHECK_EQ(checked, 1);
  search_space_free(&sp);
  ir_func_free(f);
}

/* ---- tensor cores ------------------------------------------------------------------- */

/* The loop a cache of `scope` is computed at in a trace (its ComputeAt's
 * loop handle); NULL if none. */
static const char *cache_loop(json_t *insts, const char *scope) {
  const char *cache = NULL;
  for (size_t i = 0; i < json_array_size(insts); i++) {
    json_t *in = json_array_get(insts, i);
    const char *kind = json_string_value(json_array_get(in, 0));
    json_t *inputs = json_array_get(in, 1), *attrs = json_array_get(in, 2);
    if (strcmp(kind, "CacheRead") == 0 && !cache &&
        strcmp(json_string_value(json_array_get(attrs, 1)), scope) == 0)
      cache = json_string_value(json_array_get(json_array_get(in, 3), 0));
    if (cache && strcmp(kind, "ComputeAt") == 0 &&
        strcmp(json_string_value(json_array_get(inputs, 0)), cache) == 0)
      return json_string_value(json_array_get(inputs, 1));
  }
  return NULL;
}

static void append_ann(json_t *insts, const char *loop, const char *key, const int *v, int n) {
  json_t *vals = json_array();
  for (int i = 0; i < n; i++) json_array_append_new(vals, json_integer(v[i]));
  json_t *in = json_pack("[s, [s, o], [s], []]", "Annotate", loop, vals, key);
  json_array_append_new(insts, in);
}

DG_TEST(pipeline_wmma_gemm) {
  /* the lowering pipelines tensor-core loops too: a WMMA GEMM sample of
   * MultiLevelTilingTensorCore with its k0 loop pipelined (the shared.dyn
   * copies one stage ahead, asynchronous) and its k1 loop too (the
   * fragment loads one stage ahead): shared tiles and fragments in two
   * versions, the GEMM's numbers, NVRTC */
  dg_status st;
  dg_func *f = wl_build("gemm:m=128,n=128,k=128,dtype=f16", &st);
  CHECK(f);
  search_space sp;
  search_space_opts so = {.seed = 4};
  CHECK(search_space_generate(f, &so, &sp, &st));
  dg_rng rng;
  dg_rng_seed(&rng, 4);
  int done = 0;
  for (int k = 0; k < 200 && done < 2; k++) {
    search_postprocs pp = {0};
    sched *s = search_sample(f, &sp, &pp, &rng, NULL, &st);
    if (!s) continue;
    char *js = sched_trace_to_json(sched_get_trace(s));
    json_error_t je;
    json_t *doc = json_loads(js, 0, &je);
    free(js);
    CHECK(doc);
    json_t *insts = json_array_get(doc, 0);
    const char *k0 = cache_loop(insts, "shared.dyn"), *k1 = cache_loop(insts, "wmma.matrix_a");
    if (!k0 || !k1 || strcmp(k0, k1) == 0) {
      json_decref(doc);
      sched_free(s);
      continue;
    }
    static const int outer[3] = {0, 0, 1}, order[3] = {0, 1, 2}, async[1] = {0};
    char l0[32], l1[32];
    snprintf(l0, sizeof l0, "%s", k0);
    snprintf(l1, sizeof l1, "%s", k1);
    append_ann(insts, l0, "software_pipeline_stage", outer, 3);
    append_ann(insts, l0, "software_pipeline_order", order, 3);
    append_ann(insts, l0, "software_pipeline_async_stages", async, 1);
    if (done == 1) {
      append_ann(insts, l1, "software_pipeline_stage", outer, 3);
      append_ann(insts, l1, "software_pipeline_order", order, 3);
    }
    js = json_dumps(doc, JSON_COMPACT);
    sched_trace *t = sched_trace_from_json(js, &st);
    free(js);
    json_decref(doc);
    CHECK_MSG(t, "%s", st.msg);
    sched *x = ts_replay(f, t);
    CHECK(x);
    lw_program *p = lowered(sched_func(x), true, &st);
    if (!p) { /* the sample's tiles do not fit twice */
      CHECK_MSG(strstr(st.msg, "shared memory") || strstr(st.msg, "fragments"), "%s", st.msg);
      sched_free(x);
      sched_trace_free(t);
      sched_free(s);
      continue;
    }
    CHECK(has_versions(p, 2));
    bool frag2 = false;
    for (int i = 0; i < p->kernels[0].n_local; i++) {
      const dg_buffer *b = p->kernels[0].local[i];
      frag2 |= b->scope == DG_SCOPE_WMMA_A && b->ndim == 3 && b->shape[0] == 2;
    }
    CHECK_EQ(frag2, done == 1);
    char *src = codegen_emit_program(p, &codegen_lang_cuda, &st);
    CHECK(src);
    CHECK(strstr(kernel_text(src), "nvcuda::wmma::load_matrix_sync"));
    free(src);
    lower_program_free(p);
    rt_check chk;
    CHECK_MSG(rt_program_check_c(f, sched_func(x), 6, &chk, &st), "%s", st.msg);
    CHECK_MSG(chk.pass, "%s", chk.first_bad);
    dg_status probe;
    if (rt_nvrtc_available(&probe)) {
      rt_build b;
      rt_build_opts o = {.target = RT_BUILD_CUDA, .arch = "sm_90", .compile = true};
      CHECK_MSG(rt_program_build(sched_func(x), &o, &b, &st), "%s: %s",
                rt_build_stage_name(b.stage), st.msg);
      rt_build_free(&b);
    } else {
      dg_test_skip("NVRTC: %s", probe.msg);
    }
    done++;
    sched_free(x);
    sched_trace_free(t);
    sched_free(s);
  }
  CHECK_EQ(done, 2);
  search_space_free(&sp);
  ir_func_free(f);
}
