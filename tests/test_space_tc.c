/* test_space_tc.c: the tensor-core sketch of MultiLevelTilingTensorCore
 * (search/rule_mlt_tc.c) on f16 GEMM-like blocks whose extents are
 * multiples of 16: its two sketches and their decisions, samples that
 * tensorize (the lowered program is WMMA fill / load / mma / store) and
 * compute the GEMM through the C emulation of their launches, mutations of
 * the samples that keep the 16x16x16 tile, the hand-written 4096^3 schedule
 * as one point of the space, the fallbacks, and (on a GPU) samples run on
 * the tensor cores.
 *
 * Dimension letters: M N K of the GEMM; tiles are 16x16x16.
 */
#include <stdlib.h>

#include "dragon/codegen.h"
#include "dragon/lower.h"
#include "dragon/rt.h"
#include "dragon/rt_cuda.h"
#include "dragon/search.h"
#include "dragon/wl.h"
#include "test.h"
#include "tvm_traces.h"

static const char *const small_gemm = "gemm:m=128,n=128,k=128,trans_a=0,trans_b=0,dtype=f16";

static int count(const char *hay, const char *needle) {
  int n = 0;
  for (const char *p = strstr(hay, needle); p; p = strstr(p + 1, needle)) n++;
  return n;
}

/* Whether the lowered program of g runs the GEMM as WMMA operations: fill,
 * both loads, mma and store (the names of `sync` and `load_b` given). */
static bool lowers_to_wmma(const dg_func *g, const char *sync, const char *load_b) {
  dg_status st;
  lw_program *p = lower_program(g, NULL, &st);
  if (!p) {
    fprintf(stderr, "lower: %s\n", st.msg);
    return false;
  }
  char *txt = lower_print(p);
  char want_sync[96], want_b[96];
  snprintf(want_sync, sizeof want_sync, "wmma %s(", sync);
  snprintf(want_b, sizeof want_b, "wmma %s(", load_b);
  bool ok = strstr(txt, "wmma wmma_fill_16x16x16_f32(") && strstr(txt, want_sync) &&
            strstr(txt, "wmma wmma_load_16x16x16_f16_a_shared_dyn(") && strstr(txt, want_b) &&
            strstr(txt, "wmma wmma_store_16x16x16_f32_");
  if (!ok) fprintf(stderr, "not WMMA:\n%.4000s\n", txt);
  free(txt);
  lower_program_free(p);
  return ok;
}

/* The GPU program of g, emulated in C, computes what f computes. */
static bool emulation_passes(const dg_func *f, const dg_func *g, uint64_t seed) {
  rt_check chk;
  dg_status st;
  if (!rt_program_check_c(f, g, seed, &chk, &st)) {
    fprintf(stderr, "C emulation: %s\n", st.msg);
    return false;
  }
  if (!chk.pass) fprintf(stderr, "wrong numbers: %s\n", chk.first_bad);
  return chk.pass;
}

static char *json_of(const sched_trace *t) { return sched_trace_to_json(t); }

DG_TEST(space_tc_sketches) {
  /* two sketches, the tiles sampled over the 16-tiles, the 16s literal */
  dg_status st;
  dg_func *f = wl_build(small_gemm, &st);
  CHECK_MSG(f, "%s", st.msg);
  search_space sp;
  search_space_opts o = {.seed = 4, .no_software_pipeline = true}; /* the unpipelined pair */
  CHECK_MSG(search_space_generate(f, &o, &sp, &st), "%s", st.msg);
  CHECK_EQ(sp.n, 2);
  CHECK_EQ(sp.n_fallbacks, 0);
  CHECK_MSG(sp.n_undone == 0, "%s", sp.undone);
  for (int i = 0; i < sp.n; i++) {
    char *js = json_of(sp.sketches[i]);
    /* i, j, k split by a literal 16, then the outer parts tiled 5, 5, 3 ways
     * with innermost factors <= 4 */
    CHECK_EQ(count(js, "[\"Split\",[\"l2\",\"None\",16]"), 1);
    CHECK_EQ(count(js, "\"None\",16],[1,0]"), 3 + 6);
    CHECK_EQ(count(js, "[\"SamplePerfectTile\""), 3);
    CHECK_EQ(count(js, "],[5,4],[\"v"), 2);
    CHECK_EQ(count(js, "],[3,4],[\"v"), 1);
    CHECK(strstr(js, "[\"Annotate\",[\"b0\",\"\\\"SSSRRSRS\\\"\"],[\"meta_schedule.tiling_structure\"]"));
    CHECK(strstr(js, "[0,\"wmma.accumulator\"]") && strstr(js, "[0,\"wmma.matrix_a\"]") &&
          strstr(js, "[1,\"wmma.matrix_b\"]"));
    CHECK_EQ(count(js, "[0,0,32,8]"), 2); /* StorageAlign of both operand tiles */
    CHECK(strstr(js, "[\"blockIdx.y\"]") && strstr(js, "[\"blockIdx.x\"]") &&
          strstr(js, "[\"threadIdx.y\"]") && !strstr(js, "threadIdx.x"));
    CHECK(strstr(js, "[\"warp_execution\"]"));
    CHECK(strstr(js, "[\"wmma_sync_16x16x16_f16f16f32\",true]") &&
          strstr(js, "[\"wmma_fill_16x16x16_f32\",true]") &&
          strstr(js, "[\"wmma_load_16x16x16_f16_a_shared_dyn\",true]") &&
          strstr(js, "[\"wmma_load_16x16x16_f16_b_shared_dyn\",true]"));
    /* f16 operand tiles fetched with 1, 2, 4 or 8 lanes */
    CHECK_EQ(count(js, "[[1,2,4,8],[0.25,0.25,0.25,0.25]]"), 2);
    /* one sketch stores the fragments to C (the driver lists it second,
     * as it lists the outputs of a rule that has an even number of rules
     * after it); the other goes through a shared.dyn tile whose f32
     * copy-out has its own vector length */
    CHECK_EQ(count(js, "wmma_store_16x16x16_f32_global"), i == 1);
    CHECK_EQ(count(js, "wmma_store_16x16x16_f32_shared_dyn"), i == 0);
    CHECK_EQ(count(js, "[[1,2,4],["), i == 0);
    free(js);
  }
  search_space_free(&sp);
  ir_func_free(f);
}

/* Accepted samples of f's design space drawn with rng, into out (at most
 * max); returns how many, drawing at most 10 per wanted sample. */
static int draw(const dg_func *f, const search_space *sp, dg_rng *rng, sched **out, int max) {
  int n = 0;
  search_postprocs pp = {0};
  dg_status st;
  for (int tries = 0; tries < 10 * max && n < max; tries++) {
    sched *s = search_sample(f, sp, &pp, rng, NULL, &st);
    if (s) out[n++] = s;
  }
  return n;
}

enum { N_SAMPLES = 20 };

DG_TEST(space_tc_samples_tensorize_and_compute) {
  /* >= 20 postprocessed samples of a 128^3 f16 GEMM: each lowers to WMMA
   * operations and its C emulation computes the GEMM; both sketches drawn */
  dg_status st;
  dg_func *f = wl_build(small_gemm, &st);
  CHECK_MSG(f, "%s", st.msg);
  search_space sp;
  search_space_opts o = {.seed = 4};
  CHECK_MSG(search_space_generate(f, &o, &sp, &st), "%s", st.msg);
  dg_rng rng;
  dg_rng_seed(&rng, 2024);
  sched *s[N_SAMPLES];
  int n = draw(f, &sp, &rng, s, N_SAMPLES);
  CHECK_EQ(n, N_SAMPLES);
  int shared_out = 0;
  for (int i = 0; i < n; i++) {
    char *js = json_of(sched_get_trace(s[i]));
    shared_out += strstr(js, "wmma_store_16x16x16_f32_shared_dyn") != NULL;
    free(js);
    CHECK_MSG(lowers_to_wmma(sched_func(s[i]), "wmma_sync_16x16x16_f16f16f32",
                             "wmma_load_16x16x16_f16_b_shared_dyn"),
              "sample %d", i);
    CHECK_MSG(emulation_passes(f, sched_func(s[i]), 5 + (uint64_t)i), "sample %d", i);
  }
  CHECK(shared_out > 0 && shared_out < n);
  for (int i = 0; i < n; i++) sched_free(s[i]);
  search_space_free(&sp);
  ir_func_free(f);
}

/* The product of a SamplePerfectTile decision. */
static int64_t tile_product(const sched_inst *in) {
  int64_t p = 1;
  for (int i = 0; i < in->decision.n; i++) p *= in->decision.items[i].i;
  return p;
}

DG_TEST(space_tc_mutations_keep_the_tile) {
  /* every mutator on every sample: the mutated trace replays (every
   * Tensorize still matches), the 16s are untouched, each tile decision
   * still multiplies to 128 / 16, and a mutant the postprocessors accept
   * is WMMA (and, for a first changed tile per sample, computes the GEMM) */
  dg_status st;
  dg_func *f = wl_build(small_gemm, &st);
  CHECK_MSG(f, "%s", st.msg);
  search_space sp;
  search_space_opts o = {.seed = 6};
  CHECK_MSG(search_space_generate(f, &o, &sp, &st), "%s", st.msg);
  dg_rng rng;
  dg_rng_seed(&rng, 77);
  sched *s[8];
  int n = draw(f, &sp, &rng, s, 8);
  CHECK_EQ(n, 8);
  int mutated = 0, accepted = 0, changed_tiles = 0;
  for (int i = 0; i < n; i++) {
    const sched_trace *t = sched_get_trace(s[i]);
    char *orig = json_of(t);
    int sixteens = count(orig, "\"None\",16]");
    for (int m = 0; m < SEARCH_MUT_COUNT; m++) {
      for (int rep = 0; rep < 2; rep++) {
        sched_trace *mt = search_mutate((search_mutator)m, t, &rng);
        if (!mt) continue;
        mutated++;
        char *js = json_of(mt);
        CHECK_MSG(count(js, "\"None\",16]") == sixteens, "%s changed a 16", search_mutator_name(m));
        free(js);
        sched *r = sched_new(f, 9);
        bool ok = sched_replay(r, mt, false, false, &st);
        CHECK_MSG(ok, "%s on sample %d: %s", search_mutator_name(m), i, st.msg);
        const sched_trace *rt = sched_get_trace(r);
        for (int k = 0; k < rt->n; k++)
          if (rt->insts[k].kind == SCHED_INST_SAMPLE_PERFECT_TILE) {
            CHECK_EQ(tile_product(&rt->insts[k]), 128 / 16);
            CHECK(rt->insts[k].decision.items[rt->insts[k].decision.n - 1].i <= 4);
          }
        if (m == SEARCH_MUT_TILE_SIZE) {
          /* the replayed decisions are the mutated ones (no repair needed) */
          sched_trace *a = sched_trace_simplified(rt, true), *b = sched_trace_simplified(mt, true);
          CHECK(sched_trace_equal(a, b));
          sched_trace *c = sched_trace_simplified(t, true);
          changed_tiles += !sched_trace_equal(a, c);
          sched_trace_free(a);
          sched_trace_free(b);
          sched_trace_free(c);
        }
        search_postprocs pp = {0};
        if (search_postproc_cuda(r, &pp, &st)) {
          accepted++;
          CHECK_MSG(lowers_to_wmma(sched_func(r), "wmma_sync_16x16x16_f16f16f32",
                                   "wmma_load_16x16x16_f16_b_shared_dyn"),
                    "%s on sample %d", search_mutator_name(m), i);
          if (rep == 0 && m == SEARCH_MUT_TILE_SIZE)
            CHECK_MSG(emulation_passes(f, sched_func(r), 40 + (uint64_t)i), "%s on sample %d",
                      search_mutator_name(m), i);
        }
        sched_free(r);
        sched_trace_free(mt);
      }
    }
    free(orig);
  }
  CHECK(mutated >= 2 * n);  /* tile size and unroll find something in every sample */
  CHECK(changed_tiles > 0);
  CHECK(accepted >= n);
  for (int i = 0; i < n; i++) sched_free(s[i]);
  search_space_free(&sp);
  ir_func_free(f);
}

DG_TEST(space_tc_other_gemm_forms) {
  /* B transposed (the _trans mma and col-major B loads), a batch
   * dimension, and TBG (two leading dimensions; value_T is [.., k, j]):
   * samples tensorize and compute */
  static const struct {
    const char *spec, *sync, *load_b;
  } cases[] = {
      {"gemm:m=64,n=128,k=64,trans_a=0,trans_b=1,dtype=f16", "wmma_sync_16x16x16_f16f16f32_trans",
       "wmma_load_16x16x16_f16_b_trans_shared_dyn"},
      {"batch_matmul:b=2,n=64,m=32,k=64,dtype=f16", "wmma_sync_16x16x16_f16f16f32",
       "wmma_load_16x16x16_f16_b_shared_dyn"},
      {"transpose_batch_matmul:batch=1,seq=32,heads=2,dim=16,dtype=f16",
       "wmma_sync_16x16x16_f16f16f32", "wmma_load_16x16x16_f16_b_shared_dyn"},
  };
  for (size_t c = 0; c < DG_ARRAY_LEN(cases); c++) {
    dg_status st;
    dg_func *f = wl_build(cases[c].spec, &st);
    CHECK_MSG(f, "%s", st.msg);
    search_space sp;
    search_space_opts o = {.seed = 1, .no_software_pipeline = true}; /* the unpipelined pair */
    CHECK_MSG(search_space_generate(f, &o, &sp, &st), "%s", st.msg);
    CHECK_MSG(sp.n == 2 && sp.n_fallbacks == 0 && sp.n_undone == 0, "%s: %d sketches, %s %s",
              cases[c].spec, sp.n, sp.fallback, sp.undone);
    dg_rng rng;
    dg_rng_seed(&rng, 3 + c);
    sched *s[3];
    int n = draw(f, &sp, &rng, s, 3);
    CHECK_EQ(n, 3);
    for (int i = 0; i < n; i++) {
      CHECK_MSG(lowers_to_wmma(sched_func(s[i]), cases[c].sync, cases[c].load_b), "%s",
                cases[c].spec);
      CHECK_MSG(emulation_passes(f, sched_func(s[i]), 11), "%s sample %d", cases[c].spec, i);
      sched_free(s[i]);
    }
    search_space_free(&sp);
    ir_func_free(f);
  }
}

DG_TEST(space_tc_fallbacks_and_f32) {
  /* a transposed A (no mma reads A column-major) falls back with the
   * reason; f32 GEMMs and the 13 MetaSchedule workloads do not match */
  dg_status st;
  dg_func *f = wl_build("gemm:m=64,n=64,k=64,trans_a=1,trans_b=0,dtype=f16", &st);
  CHECK_MSG(f, "%s", st.msg);
  static const search_rule tc_only[] = {SEARCH_RULE_MLT_TC};
  search_space_opts o = {.seed = 1, .rules = tc_only, .n_rules = 1};
  search_space sp;
  CHECK(search_space_generate(f, &o, &sp, &st));
  CHECK_EQ(sp.n_fallbacks, 1);
  CHECK_MSG(strstr(sp.fallback, "block C matches wmma_sync_16x16x16_f16f16f32_trans but A is "
                                "not indexed [.., v_i, v_k]; MultiLevelTiling tiles it"),
            "%s", sp.fallback);
  CHECK_EQ(sp.n, 1);
  search_space_free(&sp);
  ir_func_free(f);
  char spec[16];
  for (size_t w = 0; w <= DG_ARRAY_LEN(tvm_aliases); w++) {
    snprintf(spec, sizeof spec, "%s/0", w < DG_ARRAY_LEN(tvm_aliases) ? tvm_aliases[w] : "GMM");
    f = wl_build(w < DG_ARRAY_LEN(tvm_aliases) ? spec : "gemm:m=64,n=64,k=64,dtype=f32", &st);
    CHECK_MSG(f, "%s", st.msg);
    CHECK(search_space_generate(f, &o, &sp, &st));
    CHECK_MSG(sp.n == 1 && sp.n_fallbacks == 0, "%s", spec);
    /* the rule recorded nothing: only the GetBlock of every block */
    for (int i = 0; i < sp.sketches[0]->n; i++)
      CHECK_MSG(sp.sketches[0]->insts[i].kind == SCHED_INST_GET_BLOCK, "%s", spec);
    search_space_free(&sp);
    ir_func_free(f);
  }
}

/* sketch with the decision of every SamplePerfectTile (in order) and
 * SampleCategorical (in order) replaced. */
static sched_trace *with_decisions(const sched_trace *sketch, const int64_t (*tiles)[5],
                                   const int *n_tile, const int64_t *cats) {
  sched_trace *t = sched_trace_clone(sketch);
  int nt = 0, nc = 0;
  for (int i = 0; i < t->n; i++) {
    sched_inst *in = &t->insts[i];
    sched_val v;
    sched_val items[5];
    if (in->kind == SCHED_INST_SAMPLE_PERFECT_TILE) {
      for (int k = 0; k < n_tile[nt]; k++) items[k] = (sched_val){.kind = SV_INT, .i = tiles[nt][k]};
      v = (sched_val){.kind = SV_ARRAY, .items = items, .n = n_tile[nt]};
      nt++;
    } else if (in->kind == SCHED_INST_SAMPLE_CATEGORICAL) {
      v = (sched_val){.kind = SV_INT, .i = cats[nc++]};
    } else {
      continue;
    }
    sched_trace *u = sched_trace_with_decision(t, i, &v, false);
    sched_trace_free(t);
    t = u;
  }
  return t;
}

DG_TEST(space_tc_hand_schedule_is_a_sample) {
  /* schedules/gemm_f16_4096.json's decisions in the 4096^3 GEMM's sketch
   * that stores the accumulators to global memory: 32x32 blocks of 128x128, 4 warps of 64x64 (16 accumulator
   * fragments), K steps of 64 in 4 fragment steps, 16-byte copies: the
   * hand schedule's launch and shared memory */
  dg_status st;
  dg_func *f = wl_build("gemm:m=4096,n=4096,k=4096,trans_a=0,trans_b=0,dtype=f16", &st);
  CHECK_MSG(f, "%s", st.msg);
  search_space sp;
  search_space_opts o = {.seed = 1, .no_software_pipeline = true}; /* the unpipelined pair */
  CHECK_MSG(search_space_generate(f, &o, &sp, &st), "%s", st.msg);
  CHECK_EQ(sp.n, 2);
  /* i [by 32, bx 1, warps 2, 4, 1], j [1, 32, 2, 4, 1], k [64, 4, 1];
   * lanes 8 and 8, unroll step 0 */
  static const int64_t tiles[3][5] = {{32, 1, 2, 4, 1}, {1, 32, 2, 4, 1}, {64, 4, 1}};
  static const int n_tile[3] = {5, 5, 3};
  static const int64_t cats[3] = {3, 3, 0};
  int g = -1;
  for (int i = 0; i < sp.n; i++) {
    char *js = json_of(sp.sketches[i]);
    if (strstr(js, "wmma_store_16x16x16_f32_global")) g = i;
    free(js);
  }
  CHECK(g >= 0);
  sched_trace *t = with_decisions(sp.sketches[g], tiles, n_tile, cats);
  sched *s = sched_new(f, 1);
  CHECK_MSG(sched_replay(s, t, false, false, &st), "%s", st.msg);
  sched_trace_free(t);
  search_postprocs pp = {0};
  CHECK_MSG(search_postproc_cuda(s, &pp, &st), "%s", st.msg);
  char *js = json_of(sched_get_trace(s));
  CHECK(strstr(js, "[\"Split\",[\"l") && strstr(js, "\"None\",4,32,8],[1,0]")); /* the fetch */
  free(js);
  lw_program *p = lower_program(sched_func(s), NULL, &st);
  CHECK_MSG(p, "lower: %s", st.msg);
  CHECK_EQ(p->n_kernels, 1);
  const lw_kernel *k = &p->kernels[0];
  CHECK(k->grid[0] == 32 && k->grid[1] == 32 && k->grid[2] == 1);
  CHECK(k->block[0] == 32 && k->block[1] == 4 && k->block[2] == 1);
  CHECK_EQ(lower_kernel_shared_bytes(k, true), 35840); /* f16[128, 72] + f16[64, 136] */
  char *txt = lower_print(p);
  CHECK_MSG(strstr(txt, "  local C_wmma_accumulator: f32[64, 64]\n"), "%.3000s", txt);
  CHECK_EQ(count(txt, "wmma wmma_sync_16x16x16_f16f16f32("), 64); /* one K step, unrolled */
  free(txt);
  char *cu = codegen_emit_program(p, &codegen_lang_cuda, &st);
  CHECK_MSG(cu, "%s", st.msg);
  CHECK(strstr(cu, "nvcuda::wmma::fragment<nvcuda::wmma::accumulator, 16, 16, 16, float> "
                   "C_wmma_accumulator[16];"));
  dg_status probe;
  if (rt_nvrtc_available(&probe)) {
    rt_cubin bin = {0};
    bool ok = rt_nvrtc_compile(cu, p->name, "sm_90", &bin, &st);
    CHECK_MSG(ok, "nvrtc: %s\n%s", st.msg, bin.log ? bin.log : "");
    rt_cubin_free(&bin);
  } else {
    dg_test_skip("NVRTC not available: %s", probe.msg);
  }
  free(cu);
  lower_program_free(p);
  sched_free(s);
  search_space_free(&sp);
  ir_func_free(f);
}

/* A sample's trace JSON run by `dragon run --target cuda` and checked
 * against the float64 reference; the test fails, naming it, if not. */
static void run_on_gpu(const char *spec, const char *js, const char *what, int i) {
  char path[400], args[600], *out = NULL;
  snprintf(path, sizeof path, "%s/tc_%s_%d.json", dg_test_tmpdir(), what, i);
  FILE *fp = fopen(path, "w");
  CHECK(fp);
  if (!fp) return;
  fputs(js, fp);
  fclose(fp);
  snprintf(args, sizeof args, "run '%s' --trace %s --target cuda --repeat 5", spec, path);
  int rc = dg_test_run_dragon(args, NULL, &out);
  CHECK_MSG(rc == 0 && strstr(out, "check     pass"), "%s sample %d: rc %d\n%s", what, i, rc, out);
  free(out);
}

DG_TEST(gpu_space_tc_samples) {
  /* samples of the 1024^3 f16 GEMM's tensor-core space run on the GPU
   * against the float64 reference */
  dg_status st;
  if (!rt_cuda_available(&st)) {
    SKIP("no GPU: %s", st.msg);
  }
  static const char spec[] = "gemm:m=1024,n=1024,k=1024,trans_a=0,trans_b=0,dtype=f16";
  dg_func *f = wl_build(spec, &st);
  CHECK_MSG(f, "%s", st.msg);
  search_space sp;
  search_space_opts o = {.seed = 8};
  CHECK_MSG(search_space_generate(f, &o, &sp, &st), "%s", st.msg);
  dg_rng rng;
  dg_rng_seed(&rng, 8);
  sched *s[6];
  int n = draw(f, &sp, &rng, s, 6);
  CHECK_EQ(n, 6);
  for (int i = 0; i < n; i++) {
    char *js = json_of(sched_get_trace(s[i]));
    run_on_gpu(spec, js, "sample", i);
    free(js);
    sched_free(s[i]);
  }
  search_space_free(&sp);
  ir_func_free(f);
}

DG_TEST(gpu_space_tc_pipelined_samples) {
  /* samples of the pipelined tensor-core sketches alone (register stage,
   * nested fragment pipeline) run on the GPU against the float64 reference */
  dg_status st;
  if (!rt_cuda_available(&st)) {
    SKIP("no GPU: %s", st.msg);
  }
  static const char spec[] = "gemm:m=1024,n=1024,k=1024,trans_a=0,trans_b=0,dtype=f16";
  dg_func *f = wl_build(spec, &st);
  CHECK_MSG(f, "%s", st.msg);
  search_space sp;
  search_space_opts o = {.seed = 9};
  CHECK_MSG(search_space_generate(f, &o, &sp, &st), "%s", st.msg);
  dg_rng rng;
  dg_rng_seed(&rng, 9);
  enum { WANT = 4 };
  int n = 0;
  for (int tries = 0; tries < 400 && n < WANT; tries++) {
    sched *s = NULL;
    draw(f, &sp, &rng, &s, 1);
    if (!s) continue;
    char *js = json_of(sched_get_trace(s));
    sched_free(s);
    if (!strstr(js, "manifest_shared_memory_local_stage")) {
      free(js);
      continue;
    }
    run_on_gpu(spec, js, "pipelined", n++);
    free(js);
  }
  CHECK_EQ(n, WANT);
  search_space_free(&sp);
  ir_func_free(f);
}
