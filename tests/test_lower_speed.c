/* test_lower_speed.c: lower_check, the verdict of lower_program without
 * the unrolled program (what VerifyGPUCode runs on every sample), gives
 * the same verdict and message as the full lowering on random samples of
 * several design spaces: the f16 GEMM 4096^3 of the tensor-core sketch
 * (bodies unrolled into tens of thousands of tile operations), a small f16
 * GEMM, GMM/0 and C2D/0. The samples are taken as VerifyGPUCode sees
 * them: every postprocessor before it applied. Hand-written kernels cover
 * what the samples rarely reach: a tile check failing in one unrolled copy
 * of a loop, under nested unrolled loops and conditions.
 */
#include <stdlib.h>

#include "dragon/ir.h"
#include "dragon/lower.h"
#include "dragon/search.h"
#include "dragon/wl.h"
#include "test.h"

typedef struct {
  int compared, accepted, rejected;
} verdicts;

/* n samples of spec's design space, each lowered both ways; false (with
 * the sample and both messages printed) at the first disagreement. */
static bool compare_samples(const char *spec, int n, uint64_t seed, verdicts *v) {
  dg_status st;
  dg_func *f = wl_build(spec, &st);
  CHECKR(f, false);
  search_space sp;
  search_space_opts so = {.seed = seed};
  if (!search_space_generate(f, &so, &sp, &st)) {
    fprintf(stderr, "%s: %s\n", spec, st.msg);
    ir_func_free(f);
    return false;
  }
  const search_target *t = &search_target_sm90;
  lw_limits lim = lower_limits_sm90;
  lim.max_threads_per_block = t->max_threads_per_block;
  lim.warp_size = t->warp_size;
  lower_opts o = {.limits = &lim};
  dg_rng rng;
  dg_rng_seed(&rng, seed);
  bool same = true;
  for (int i = 0; i < n && same; i++) {
    sched *s = search_sample(f, &sp, NULL, &rng, NULL, &st);
    if (!s) continue;
    bool ready = sched_enter_postproc(s, &st);
    for (int p = 0; ready && p < SEARCH_POSTPROC_VERIFY_GPU_CODE; p++)
      ready = search_postproc_apply((search_postproc)p, s, t, &st);
    if (ready) {
      dg_status full, fast;
      lw_program *prog = lower_program(sched_func(s), &o, &full);
      bool ok = lower_check(sched_func(s), &o, &fast);
      lower_program_free(prog);
      v->compared++;
      if (prog) v->accepted++;
      else v->rejected++;
      if ((prog != NULL) != ok || (!ok && strcmp(full.msg, fast.msg) != 0)) {
        char *js = sched_trace_to_json(sched_get_trace(s));
        fprintf(stderr, "%s sample %d: lower_program %s (%s), lower_check %s (%s)\n%s\n", spec,
                i, prog ? "accepts" : "rejects", prog ? "" : full.msg,
                ok ? "accepts" : "rejects", ok ? "" : fast.msg, js);
        free(js);
        same = false;
      }
    }
    sched_free(s);
  }
  search_space_free(&sp);
  ir_func_free(f);
  return same;
}

DG_TEST(lower_speed_check_agrees_f16_gemm_4096) {
  verdicts v = {0};
  CHECK(compare_samples("gemm:m=4096,n=4096,k=4096,dtype=f16", 12, 1, &v));
  CHECK_MSG(v.compared >= 6, "only %d samples reached VerifyGPUCode", v.compared);
  CHECK_MSG(v.rejected > 0, "no sample rejected: the comparison saw one side only");
}

DG_TEST(lower_speed_check_agrees_small_f16_gemm) {
  verdicts v = {0};
  CHECK(compare_samples("gemm:m=256,n=256,k=128,dtype=f16", 40, 7, &v));
  CHECK(compare_samples("gemm:m=128,n=128,k=128,trans_a=0,trans_b=1,dtype=f16", 40, 8, &v));
  CHECK_MSG(v.accepted > 0 && v.rejected > 0, "accepted %d, rejected %d", v.accepted,
            v.rejected);
}

DG_TEST(lower_speed_check_agrees_gmm_c2d) {
  verdicts v = {0};
  CHECK(compare_samples("GMM/0", 40, 3, &v));
  CHECK(compare_samples("C2D/0", 40, 5, &v));
  CHECK_MSG(v.accepted > 0 && v.rejected > 0, "accepted %d, rejected %d", v.accepted,
            v.rejected);
}

/* A fragment filled in NFILL tiles TILE2 rows apart under `for t in
 * NFILL KIND` (KIND "" or "unrolled"), inside OUTER copies of an unrolled
 * loop u (u adds nothing to the tile's row) and, with COND, under a
 * condition on blockIdx.x; then stored in two tiles. */
static char *fill_kernel(int nfill, int tile2, int rows, const char *kind, int outer, bool cond) {
  dg_str t;
  dg_str_init(&t);
  dg_str_printf(&t,
                "kernel main(C: f32[48, 16]):\n"
                "  block root:\n"
                "    alloc Cf: f32[%d, 16] wmma.accumulator\n"
                "    for bx in 2 bind(blockIdx.x):\n"
                "      for u in %d unrolled:\n",
                rows, outer);
  dg_str_printf(&t, "%s", cond ? "        if bx < 1:\n" : "        if 0 < 1:\n");
  dg_str_printf(&t,
                "          for t in %d %s:\n"
                "            block fill_o(vt: S(%d) = t, vu: S(%d) = u):\n"
                "              writes Cf[vt * %d + vu * 0:vt * %d + vu * 0 + 16, 0:16]\n"
                "              attr tensor_intrin = \"wmma_fill_16x16x16_f32\"\n"
                "              for i, j in grid(16, 16):\n"
                "                block fill(vi: S(16) = i, vj: S(16) = j):\n"
                "                  writes Cf[vi + vt * %d + vu * 0, vj]\n"
                "                  Cf[vi + vt * %d + vu * 0, vj] = 0.0\n",
                nfill, kind, nfill, outer, tile2, tile2, tile2, tile2);
  dg_str_printf(&t,
                "      for t2 in 2:\n"
                "        block store_o(vs: S(2) = t2):\n"
                "          reads Cf[vs * 16:vs * 16 + 16, 0:16]\n"
                "          writes C[vs * 24:vs * 24 + 16, 0:16]\n"
                "          attr tensor_intrin = \"wmma_store_16x16x16_f32_global\"\n"
                "          for i2, j2 in grid(16, 16):\n"
                "            block store(wi: S(16) = i2, wj: S(16) = j2):\n"
                "              reads Cf[wi + vs * 16, wj]\n"
                "              writes C[wi + vs * 24, wj]\n"
                "              C[wi + vs * 24, wj] = Cf[wi + vs * 16, wj]\n");
  return dg_str_take(&t);
}

/* lower_program and lower_check of text agree; *msg (if not NULL) gets the
 * message of a rejection ("" if accepted). */
static bool agree(const char *text, char *msg, size_t cap) {
  dg_status st, full, fast;
  dg_func *f = ir_parse(text, "test", &st);
  if (!f) {
    fprintf(stderr, "parse: %s\n%s\n", st.msg, text);
    return false;
  }
  lw_program *p = lower_program(f, NULL, &full);
  bool ok = lower_check(f, NULL, &fast);
  bool same = (p != NULL) == ok && (ok || strcmp(full.msg, fast.msg) == 0);
  if (!same)
    fprintf(stderr, "lower_program: %s\nlower_check: %s\n", p ? "ok" : full.msg,
            ok ? "ok" : fast.msg);
  if (msg) snprintf(msg, cap, "%s", p ? "" : full.msg);
  lower_program_free(p);
  ir_func_free(f);
  return same;
}

DG_TEST(lower_speed_check_agrees_on_unrolled_tiles) {
  char msg[512];
  static const char *const kinds[] = {"", "unrolled"};
  for (int k = 0; k < 2; k++)
    for (int outer = 1; outer <= 3; outer += 2)
      for (int cond = 0; cond < 2; cond++) {
        /* whole tiles: accepted (a condition on blockIdx is no lane condition) */
        char *text = fill_kernel(2, 16, 32, kinds[k], outer, cond);
        CHECK_MSG(agree(text, msg, sizeof msg), "%s", text);
        CHECK_MSG(msg[0] == 0, "%s\n%s", msg, text);
        free(text);
        /* tiles 8 rows apart: the copy t = 1 starts mid-tile */
        text = fill_kernel(3, 8, 32, kinds[k], outer, cond);
        CHECK_MSG(agree(text, msg, sizeof msg), "%s", text);
        CHECK_MSG(strstr(msg, k ? "starts at [8, 0], not on a 16x16 tile"
                                 : "starts at [t * 8, 0], not on a 16x16 tile"),
                  "%s\n%s", msg, text);
        free(text);
      }
}
