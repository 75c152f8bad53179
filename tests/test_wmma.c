/* test_wmma.c: tensorized (WMMA) blocks lowered end to end: fragments,
 * warp execution, the C emulation against the float64 reference, the CUDA
 * source compiled by NVRTC for sm_90 (counted skipped where NVRTC is
 * absent), the hand-written f16 GEMM schedules of schedules/, and the
 * rejected cases with their messages.
 *
 * Dimension letters: M N K of the GEMM; tiles are 16x16x16.
 */
#include <stdlib.h>

#include "dragon/codegen.h"
#include "dragon/intrin.h"
#include "dragon/lower.h"
#include "dragon/rt.h"
#include "dragon/rt_cuda.h"
#include "dragon/sched.h"
#include "dragon/wl.h"
#include "lower/lower_impl.h"
#include "test.h"

static sched_val I(int64_t v) { return (sched_val){.kind = SV_INT, .i = v}; }
static const sched_val NONE = {.kind = SV_NONE};

static bool split2(sched *s, int l, int64_t f, int *out) {
  dg_status st;
  sched_val fs[2] = {NONE, I(f)};
  if (sched_split(s, l, fs, 2, true, false, out, &st) == 2) return true;
  fprintf(stderr, "split: %s\n", st.msg);
  return false;
}

/* How a test varies the GEMM of test_sched_tensorize.c. */
typedef struct {
  dg_thread_tag warp_tag;  /* the tag of loop j_0 (the warps) */
  int64_t fetch_lanes;     /* > 0: bind the inner loop of A's shared copy to threadIdx.x */
  const char *load_b;      /* the intrinsic of the matrix_b load */
} gemm_opts;

/* gemm:m=64,n=64,k=64,dtype=f16 in the WMMA style (16x16x16 tiles, A and B
 * through shared.dyn into matrix_a/matrix_b fragments, a wmma.accumulator
 * fragment), i_0 bound to blockIdx.x and j_0 to o->warp_tag. NULL after a
 * failed CHECK. */
static dg_func *wmma_gemm(const dg_func *f, const gemm_opts *o) {
  dg_status st;
  sched *s = sched_new(f, 1);
  int b = sched_get_block(s, "C", NULL, &st);
  int l[3], li[2], lj[2], lk[2];
  CHECKR(sched_get_loops(s, b, l, 3, &st) == 3, NULL);
  CHECKR(split2(s, l[0], 16, li) && split2(s, l[1], 16, lj) && split2(s, l[2], 16, lk), NULL);
  int order[6] = {li[0], lj[0], lk[0], li[1], lj[1], lk[1]};
  CHECKR(sched_reorder(s, order, 6, &st), NULL);
  int acc = sched_cache_write(s, b, 0, DG_SCOPE_WMMA_ACC, NULL, 0, &st);
  CHECKR(acc >= 0 && sched_reverse_compute_at(s, acc, lj[0], true, -1, &st), NULL);
  int ash = sched_cache_read(s, b, 0, DG_SCOPE_SHARED_DYN, &b, 1, &st);
  CHECKR(ash >= 0 && sched_compute_at(s, ash, lk[0], true, -1, &st), NULL);
  int bsh = sched_cache_read(s, b, 1, DG_SCOPE_SHARED_DYN, &b, 1, &st);
  CHECKR(bsh >= 0 && sched_compute_at(s, bsh, lk[0], true, -1, &st), NULL);
  int afr = sched_cache_read(s, b, 0, DG_SCOPE_WMMA_A, &b, 1, &st);
  int bfr = sched_cache_read(s, b, 1, DG_SCOPE_WMMA_B, &b, 1, &st);
  CHECKR(afr >= 0 && bfr >= 0, NULL);
  int init = sched_decompose_reduction(s, b, lk[0], &st);
  CHECKR(init >= 0, NULL);
  CHECKR(sched_tensorize(s, li[1], "wmma_sync_16x16x16_f16f16f32", true, &st), NULL);
  int il[8];
  CHECKR(sched_get_loops(s, init, il, 8, &st) == 4, NULL);
  CHECKR(sched_tensorize(s, il[2], "wmma_fill_16x16x16_f32", true, &st), NULL);
  int n = sched_get_loops(s, afr, il, 8, &st);
  CHECKR(sched_tensorize(s, il[n - 2], "wmma_load_16x16x16_f16_a_shared_dyn", true, &st), NULL);
  n = sched_get_loops(s, bfr, il, 8, &st);
  CHECKR(sched_tensorize(s, il[n - 2], o->load_b, true, &st), NULL);
  n = sched_get_loops(s, acc, il, 8, &st);
  CHECKR(sched_tensorize(s, il[n - 2], "wmma_store_16x16x16_f32_global", true, &st), NULL);
  CHECKR(sched_bind(s, li[0], DG_TAG_BLOCK_X, &st), NULL);
  CHECKR(sched_bind(s, lj[0], o->warp_tag, &st), NULL);
  if (o->fetch_lanes > 0) {
    n = sched_get_loops(s, ash, il, 8, &st);
    int lx[2];
    CHECKR(split2(s, il[n - 1], o->fetch_lanes, lx), NULL);
    CHECKR(sched_bind(s, lx[1], DG_TAG_THREAD_X, &st), NULL);
  }
  dg_func *g = ir_func_clone(sched_func(s));
  sched_free(s);
  CHECKR(ir_verify(g, &st), NULL);
  return g;
}

/* 1: compiled for sm_90; 0: NVRTC rejected it (message in st); -1: no
 * NVRTC here. */
static int nvrtc_compiles(const lw_program *p, dg_status *st) {
  dg_status probe;
  if (!rt_nvrtc_available(&probe)) {
    dg_test_skip("NVRTC not available: %s", probe.msg);
    return -1;
  }
  char *src = codegen_emit_program(p, &codegen_lang_cuda, st);
  if (!src) return 0;
  rt_cubin bin = {0};
  bool ok = rt_nvrtc_compile(src, p->name, "sm_90", &bin, st);
  if (!ok) fprintf(stderr, "%s\n", bin.log ? bin.log : "");
  rt_cubin_free(&bin);
  free(src);
  return ok ? 1 : 0;
}

static int count(const char *hay, const char *needle) {
  int n = 0;
  for (const char *p = strstr(hay, needle); p; p = strstr(p + 1, needle)) n++;
  return n;
}

/* The tensorized GEMM of test_sched_tensorize.c, warps on threadIdx.y and
 * threadIdx.x left to the lanes: lowered, emulated, compiled. */
DG_TEST(wmma_gemm_lowers_and_runs) {
  dg_status st;
  dg_func *f = wl_build("gemm:m=64,n=64,k=64,dtype=f16", &st);
  CHECK_MSG(f, "%s", st.msg);
  gemm_opts o = {.warp_tag = DG_TAG_THREAD_Y, .load_b = "wmma_load_16x16x16_f16_b_shared_dyn"};
  dg_func *g = wmma_gemm(f, &o);
  CHECK(g);
  lw_program *p = lower_program(g, NULL, &st);
  CHECK_MSG(p, "lower: %s", st.msg);
  CHECK_EQ(p->n_kernels, 1);
  const lw_kernel *k = &p->kernels[0];
  /* 4 warps of 32 implicit lanes, one block per 16 rows */
  CHECK(k->implicit_lanes);
  CHECK_EQ(k->grid[0], 4);
  CHECK_EQ(k->block[0], 32);
  CHECK_EQ(k->block[1], 4);
  CHECK_EQ(lower_kernel_shared_bytes(k, true), 16 * 16 * 2 + 16 * 64 * 2);
  char *txt = lower_print(p);
  /* one 16x16 tile per fragment array, per warp */
  CHECK_MSG(strstr(txt, "  local C_wmma_accumulator: f32[16, 16]\n") &&
                strstr(txt, "  local A_shared_dyn_wmma_matrix_a: f16[16, 16]\n") &&
                strstr(txt, "  shared B_shared_dyn: f16[16, 64]\n"),
            "got\n%s", txt);
  CHECK_MSG(strstr(txt, "wmma wmma_sync_16x16x16_f16f16f32(A_shared_dyn_wmma_matrix_a[0, 0] "
                        "fragment 0, B_shared_dyn_wmma_matrix_b[0, 0] fragment 0, "
                        "C_wmma_accumulator[0, 0] fragment 0)  # block C_update_o") != NULL,
            "got\n%s", txt);
  CHECK_MSG(strstr(txt, "wmma wmma_store_16x16x16_f32_global(C_wmma_accumulator[0, 0] fragment "
                        "0, C[blockIdx.x * 16, threadIdx.y * 16])") != NULL,
            "got\n%s", txt);
  /* the copies were written for one thread per warp: lane 0 runs them */
  CHECK_MSG(strstr(txt, "if threadIdx.x == 0:") != NULL, "got\n%s", txt);
  free(txt);

  rt_check chk;
  CHECK_MSG(rt_program_check_c(f, g, 3, &chk, &st), "%s", st.msg);
  CHECK_MSG(chk.pass, "wrong numbers: %s", chk.first_bad);
  CHECK(chk.n_checked == 64 * 64);

  char *cu = codegen_emit_program(p, &codegen_lang_cuda, &st);
  CHECK_MSG(cu, "%s", st.msg);
  CHECK(strstr(cu, "#include <mma.h>\n") != NULL);
  CHECK(strstr(cu, "extern __shared__ __align__(128) unsigned char dg_dyn_smem[];") != NULL);
  CHECK(strstr(cu, "nvcuda::wmma::fragment<nvcuda::wmma::matrix_a, 16, 16, 16, __half, "
                   "nvcuda::wmma::row_major> A_shared_dyn_wmma_matrix_a[1];") != NULL);
  CHECK(strstr(cu, "nvcuda::wmma::fragment<nvcuda::wmma::accumulator, 16, 16, 16, float> "
                   "C_wmma_accumulator[1];") != NULL);
  CHECK(strstr(cu, "nvcuda::wmma::fill_fragment(C_wmma_accumulator[0], 0.0f);") != NULL);
  CHECK(strstr(cu, "nvcuda::wmma::mma_sync(C_wmma_accumulator[0], A_shared_dyn_wmma_matrix_a[0], "
                   "B_shared_dyn_wmma_matrix_b[0], C_wmma_accumulator[0]);") != NULL);
  CHECK(strstr(cu, "nvcuda::wmma::load_matrix_sync(B_shared_dyn_wmma_matrix_b[0], "
                   "&B_shared_dyn[(dg_ty * 16)], 64);") != NULL);
  CHECK(strstr(cu, ", 64, nvcuda::wmma::mem_row_major);") != NULL);
  CHECK(strstr(cu, "float *__restrict__ C") != NULL && strstr(cu, "const float") == NULL);
  free(cu);
  /* the C target runs each tile op on lane 0 of its warp, fragments per warp */
  char *c = codegen_emit_program(p, &codegen_lang_c, &st);
  CHECK_MSG(c, "%s", st.msg);
  CHECK(strstr(c, "if (dg_tx == 0) {  /* wmma_sync_16x16x16_f16f16f32 (block C_update_o)") != NULL);
  CHECK(strstr(c, "const int32_t dg_wid = dg_tid / 32;") != NULL);
  CHECK(strstr(c, "mma.h") == NULL);
  free(c);
  int nv = nvrtc_compiles(p, &st);
  CHECK_MSG(nv != 0, "nvrtc: %s", st.msg);
  lower_program_free(p);

  /* threadIdx.x bound to 32 lanes by a copy: no implicit lanes, same numbers */
  ir_func_free(g);
  o.fetch_lanes = 16;
  dg_func *h = wmma_gemm(f, &o);
  CHECK(h);
  CHECK(!rt_program_check_c(f, h, 3, &chk, &st));
  CHECK_ERR(st, "threadIdx.x has extent 16 in this launch, but a tensorized block runs on whole "
                "warps: threadIdx.x must be 32");
  ir_func_free(h);
  ir_func_free(f);
}

/* The hand schedule for the 256^3 GEMM through the CLI's C emulation, and
 * its lowered shape: 128x128 blocks of 2x2 warps, 64x64 per warp, padded
 * shared tiles, every fragment index a constant. */
DG_TEST(wmma_hand_schedule_256) {
  char *out = NULL;
  int rc = dg_test_run_dragon("run gemm:m=256,n=256,k=256,dtype=f16 --trace "
                              "schedules/gemm_f16_256.json --target c",
                              NULL, &out);
  CHECK_MSG(rc == 0 && strstr(out, "check     pass"), "rc %d:\n%s", rc, out);
  free(out);
  rc = dg_test_run_dragon("emit gemm:m=256,n=256,k=256,dtype=f16 --trace "
                          "schedules/gemm_f16_256.json --lowered",
                          NULL, &out);
  CHECK_MSG(rc == 0, "rc %d:\n%s", rc, out);
  CHECK_MSG(strstr(out, "kernel main_kernel0 grid(2, 2, 1) block(32, 2, 2):\n"
                        "  shared A_shared_dyn: f16[128, 72]\n"
                        "  shared B_shared_dyn: f16[64, 136]\n"
                        "  local C_wmma_accumulator: f32[64, 64]\n"
                        "  local A_shared_dyn_wmma_matrix_a: f16[64, 16]\n"
                        "  local B_shared_dyn_wmma_matrix_b: f16[16, 64]\n") != NULL,
            "got\n%s", out);
  CHECK_EQ(count(out, "wmma wmma_sync_16x16x16_f16f16f32("), 64);
  CHECK_EQ(count(out, "wmma wmma_load_16x16x16_f16_a_shared_dyn("), 16);
  CHECK_EQ(count(out, "    sync\n"), 2);
  CHECK(strstr(out, "C_wmma_accumulator[48, 48] fragment 15)") != NULL);
  free(out);
}

/* The 4096^3 schedule: the same trace as the 256^3 one (its outer
 * factors are None), lowered for the H200 and compiled by NVRTC. */
DG_TEST(wmma_hand_schedule_4096) {
  dg_status st;
  char *js = dg_read_file("schedules/gemm_f16_4096.json", NULL, &st);
  CHECK_MSG(js, "%s", st.msg);
  char *js256 = dg_read_file("schedules/gemm_f16_256.json", NULL, &st);
  CHECK_MSG(js256, "%s", st.msg);
  CHECK_STREQ(js, js256);
  free(js256);
  dg_func *f = wl_build("gemm:m=4096,n=4096,k=4096,dtype=f16", &st);
  CHECK_MSG(f, "%s", st.msg);
  sched_trace *t = sched_trace_from_json(js, &st);
  free(js);
  CHECK_MSG(t, "%s", st.msg);
  sched *s = sched_new(f, 0);
  CHECK_MSG(sched_replay(s, t, false, false, &st), "%s", st.msg);
  sched_trace_free(t);
  lw_program *p = lower_program(sched_func(s), NULL, &st);
  CHECK_MSG(p, "lower: %s", st.msg);
  const lw_kernel *k = &p->kernels[0];
  CHECK(k->grid[0] == 32 && k->grid[1] == 32 && k->grid[2] == 1);
  CHECK(k->block[0] == 32 && k->block[1] == 2 && k->block[2] == 2);
  CHECK(!k->implicit_lanes);
  /* (128 x (64+8) + 64 x (128+8)) halves, each part 128-byte aligned */
  CHECK_EQ(lower_kernel_shared_bytes(k, true), 18432 + 17408);
  CHECK_EQ(lower_kernel_shared_bytes(k, false), 0);
  dg_arena *a = dg_arena_new();
  rt_cuda_program prog;
  CHECK_MSG(rt_cuda_program_from_lowered(p, a, &prog, &st), "%s", st.msg);
  CHECK_EQ(prog.launches[0].shared_bytes, 35840);
  dg_arena_free(a);
  char *cu = codegen_emit_program(p, &codegen_lang_cuda, &st);
  CHECK_MSG(cu, "%s", st.msg);
  CHECK_EQ(count(cu, "nvcuda::wmma::mma_sync("), 64);
  CHECK_EQ(count(cu, "__syncthreads();"), 2);
  CHECK(strstr(cu, "__launch_bounds__(128)") != NULL);
  CHECK(strstr(cu, "for (int32_t k_0 = 0; k_0 < 64; k_0++) {") != NULL);
  free(cu);
  int nv = nvrtc_compiles(p, &st);
  CHECK_MSG(nv != 0, "nvrtc: %s", st.msg);
  /* its fragments (a 64 x 64 warp tile of accumulators and the A and B
   * fragments of a K step) fit the register file; one byte less of room
   * rejects it, naming the fragments */
  int64_t frag = 0;
  for (int i = 0; i < k->n_local; i++)
    if (lower_scope_is_fragment(k->local[i]->scope))
      frag += ir_buffer_numel(k->local[i]) * dg_dtype_bytes(k->local[i]->dtype) / 32;
  CHECK(frag > 0 && frag <= lower_limits_sm90.max_fragment_bytes);
  CHECK_MSG(lower_verify(p, &lower_limits_sm90, &st), "%s", st.msg);
  lw_limits tight = lower_limits_sm90;
  tight.max_fragment_bytes = frag - 1;
  CHECK(!lower_verify(p, &tight, &st));
  CHECK_MSG(strstr(st.msg, "bytes of tensor-core fragments per thread") != NULL, "%s", st.msg);
  lower_program_free(p);
  sched_free(s);
  ir_func_free(f);
}

static void expect_reject(const char *text, const char *want) {
  dg_status st;
  dg_func *f = ir_parse(text, "test", &st);
  CHECK_MSG(f, "%s", st.msg);
  CHECK_MSG(ir_verify(f, &st), "%s", st.msg);
  lw_program *p = lower_program(f, NULL, &st);
  CHECK(!p);
  CHECK_ERR(st, want);
  ir_func_free(f);
}

/* A fragment of ROWS x 16 (-ROWS: a kernel parameter), filled in NFILL
 * tiles TILE2 rows apart and stored in two. FILL and STORE are the two blocks' annotations (an empty
 * string: not tensorized); PRED a line of predicate for the fill block. */
static char *fragment_kernel(int nfill, int tile2, int rows, const char *fill, const char *store,
                             const char *pred) {
  dg_str t;
  dg_str_init(&t);
  if (rows > 0)
    dg_str_printf(&t,
                  "kernel main(C: f32[48, 16]):\n"
                  "  block root:\n"
                  "    alloc Cf: f32[%d, 16] wmma.accumulator\n",
                  rows);
  else /* the fragment a parameter */
    dg_str_printf(&t, "kernel main(C: f32[48, 16], Cf: f32[%d, 16] wmma.accumulator):\n"
                      "  block root:\n",
                  -rows);
  dg_str_printf(&t,
                "    for bx in 1 bind(blockIdx.x):\n"
                "      for t in %d:\n"
                "        block fill_o(vt: S(%d) = t):\n"
                "          writes Cf[vt * %d:vt * %d + 16, 0:16]\n"
                "%s",
                nfill, nfill, tile2, tile2, pred);
  if (fill[0]) dg_str_printf(&t, "          attr tensor_intrin = \"%s\"\n", fill);
  dg_str_printf(&t,
                "          for i, j in grid(16, 16):\n"
                "            block fill(vi: S(16) = i, vj: S(16) = j):\n"
                "              writes Cf[vi + vt * %d, vj]\n"
                "              Cf[vi + vt * %d, vj] = 0.0\n"
                "      for t2 in 2:\n"
                "        block store_o(vs: S(2) = t2):\n"
                "          reads Cf[vs * %d:vs * %d + 16, 0:16]\n"
                "          writes C[vs * 24:vs * 24 + 16, 0:16]\n",
                tile2, tile2, tile2, tile2);
  if (store[0]) dg_str_printf(&t, "          attr tensor_intrin = \"%s\"\n", store);
  dg_str_printf(&t,
                "          for i2, j2 in grid(16, 16):\n"
                "            block store(wi: S(16) = i2, wj: S(16) = j2):\n"
                "              reads Cf[wi + vs * %d, wj]\n"
                "              writes C[wi + vs * 24, wj]\n"
                "              C[wi + vs * 24, wj] = Cf[wi + vs * %d, wj]\n",
                tile2, tile2);
  return dg_str_take(&t);
}

DG_TEST(wmma_rejects) {
  static const char *FILL = "wmma_fill_16x16x16_f32", *STORE = "wmma_store_16x16x16_f32_global";
  /* the baseline is accepted and computes zeros where it stores */
  char *ok = fragment_kernel(2, 16, 32, FILL, STORE, "");
  dg_status st;
  dg_func *f = ir_parse(ok, "test", &st);
  CHECK_MSG(f, "%s", st.msg);
  lw_program *p = lower_program(f, NULL, &st);
  CHECK_MSG(p, "%s", st.msg);
  CHECK(p->kernels[0].implicit_lanes && p->kernels[0].block[0] == 32);
  lower_program_free(p);
  ir_func_free(f);
  free(ok);

  /* tiles 24 rows apart: a 40-row fragment array */
  char *k = fragment_kernel(2, 24, 48, FILL, STORE, "");
  expect_reject(k, "lower: kernel main_kernel0: fragment Cf is 40 x 16 per warp after "
                   "compaction; fragments hold whole 16x16 tiles");
  free(k);
  /* tiles 8 rows apart: 32 rows, but the second tile straddles two */
  k = fragment_kernel(3, 8, 32, FILL, STORE, "");
  expect_reject(k, "block fill_o: its tile of fragment Cf starts at [t * 8, 0], not on a 16x16 tile "
                   "of the fragment array");
  free(k);
  /* a fragment element by element */
  k = fragment_kernel(2, 16, 32, FILL, "", "");
  expect_reject(k, "lower: kernel main_kernel0: block store: it accesses Cf (scope "
                   "wmma.accumulator) element by element; a fragment is reachable only through "
                   "tensor intrinsics");
  free(k);
  /* a fragment for a parameter */
  k = fragment_kernel(2, 16, -32, FILL, STORE, "");
  expect_reject(k, "block fill_o: fragment Cf is a kernel parameter, but fragments live in the "
                   "registers of a warp");
  free(k);
  /* a tag the block no longer matches */
  k = fragment_kernel(2, 16, 32, "wmma_fill_16x16x16_f16", STORE, "");
  expect_reject(k, "block fill_o: it is tagged tensor_intrin = \"wmma_fill_16x16x16_f16\" but no "
                   "longer matches it: block fill_o does not match wmma_fill_16x16x16_f16: dtype "
                   "mismatch");
  free(k);
  k = fragment_kernel(2, 16, 32, "wmma_fill_16x16x16_f33", STORE, "");
  expect_reject(k, "unknown tensor intrinsic 'wmma_fill_16x16x16_f33'");
  free(k);
  /* a partial tile */
  k = fragment_kernel(2, 16, 32, FILL, STORE, "          where t < 1\n");
  expect_reject(k, "block fill_o: its predicate t < 1 cuts the tile, but tensor cores compute "
                   "whole tiles");
  free(k);

  /* the GEMM with its warps on threadIdx.x */
  f = wl_build("gemm:m=64,n=64,k=64,dtype=f16", &st);
  CHECK_MSG(f, "%s", st.msg);
  gemm_opts o = {.warp_tag = DG_TAG_THREAD_X, .load_b = "wmma_load_16x16x16_f16_b_shared_dyn"};
  dg_func *g = wmma_gemm(f, &o);
  CHECK(g);
  CHECK(!lower_program(g, NULL, &st));
  CHECK_ERR(st, "block C_init_o: it is under a loop bound to threadIdx.x, but the 32 lanes of a "
                "warp compute its tile together (warp execution)");
  ir_func_free(g);
  /* B loaded col-major for the mma that reads it row-major */
  o = (gemm_opts){.warp_tag = DG_TAG_THREAD_Y, .load_b = "wmma_load_16x16x16_f16_b_trans_shared_dyn"};
  g = wmma_gemm(f, &o);
  CHECK(g);
  CHECK(!lower_program(g, NULL, &st));
  CHECK_ERR(st, "block C_update_o: wmma_sync_16x16x16_f16f16f32 reads fragment "
                "B_shared_dyn_wmma_matrix_b row-major, but block B_shared_dyn_wmma_matrix_b_o "
                "loads it col-major");
  ir_func_free(g);
  ir_func_free(f);
}
