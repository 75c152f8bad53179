/* test_schedules.c: the hand-written GPU schedules of schedules/ (one TVM
 * trace per MetaSchedule workload, config /0, fp32).
 *
 * Each schedule must replay on its workload, come back to the same bytes
 * through trace JSON, lower within sm_90's limits with every launch bound
 * to blockIdx/threadIdx (the launch shapes below are the ones
 * schedules/README.md explains), compute the right numbers through the C
 * emulation of blocks and threads against the float64 reference
 * (rt_program_check_c), and compile as CUDA with NVRTC for sm_90 (the test
 * is counted skipped where NVRTC is absent).
 *
 * C3D/0 is 13 GFLOP, too slow to emulate here: its trace is replayed,
 * lowered and compiled on the real shape, and emulated on a smaller
 * conv3d (depth 2, 32x32 image) where the replay keeps the same structure
 * (tile decisions that no longer divide are repaired as TVM repairs them).
 * Tests run from the repository root (the Makefile's `make test`).
 */
#include <stdlib.h>
#include <string.h>

#include "dragon/codegen.h"
#include "dragon/lower.h"
#include "dragon/rt.h"
#include "dragon/rt_cuda.h"
#include "dragon/sched.h"
#include "dragon/wl.h"
#include "test.h"

/* What the lowering must give: one launch each, its grid (blockIdx.x) and
 * threads (threadIdx.x), and its static shared memory in bytes. */
typedef struct {
  const char *name;
  int64_t grid, threads, shared_bytes;
} hand_expect;

/* Replays schedules/NAME.json on spec; NULL after a failed CHECK. */
static sched *hand_replay(const char *name, const char *spec, sched_replay_mode mode,
                          dg_func **f_out) {
  char path[64];
  snprintf(path, sizeof path, "schedules/%s.json", name);
  dg_status st;
  char *text = dg_read_file(path, NULL, &st);
  if (!text) dg_test_fail(__FILE__, __LINE__, "%s", st.msg);
  CHECKR(text != NULL, NULL);
  sched_trace *t = sched_trace_from_json(text, &st);
  if (!t) dg_test_fail(__FILE__, __LINE__, "%s: %s", path, st.msg);
  if (!t) free(text);
  CHECKR(t != NULL, NULL);
  /* canonical: the file is the trace's own JSON */
  char *again = sched_trace_to_json(t);
  size_t n = strlen(text);
  while (n > 0 && (text[n - 1] == '\n' || text[n - 1] == ' ')) text[--n] = 0;
  bool same = strcmp(again, text) == 0;
  free(again);
  free(text);
  if (!same) dg_test_fail(__FILE__, __LINE__, "%s is not in canonical trace JSON", path);
  dg_func *f = wl_build(spec, &st);
  if (!f) dg_test_fail(__FILE__, __LINE__, "%s: %s", spec, st.msg);
  sched *s = f ? sched_new(f, 0) : NULL;
  bool ok = s && sched_replay_with(s, t, mode, false, &st);
  if (s && !ok) dg_test_fail(__FILE__, __LINE__, "%s on %s: %s", path, spec, st.msg);
  /* the postprocessing is part of the trace */
  bool post = false;
  for (int i = 0; i < t->n; i++) post |= t->insts[i].kind == SCHED_INST_ENTER_POSTPROC;
  sched_trace_free(t);
  if (!ok || !same || !post) {
    if (!post) dg_test_fail(__FILE__, __LINE__, "%s has no EnterPostproc", path);
    sched_free(s);
    ir_func_free(f);
    return NULL;
  }
  *f_out = f;
  return s;
}

/* 1: compiled; 0: NVRTC rejected it; -1: no NVRTC here. */
static int hand_nvrtc(const lw_program *p, const char *name) {
  dg_status st;
  if (!rt_nvrtc_available(&st)) {
    dg_test_skip("NVRTC not available (%s first): %s", name, st.msg);
    return -1;
  }
  char *src = codegen_emit_program(p, &codegen_lang_cuda, &st);
  if (!src) {
    dg_test_fail(__FILE__, __LINE__, "%s: CUDA emission: %s", name, st.msg);
    return 0;
  }
  rt_cubin bin = {0};
  bool ok = rt_nvrtc_compile(src, name, "sm_90", &bin, &st);
  if (!ok) dg_test_fail(__FILE__, __LINE__, "%s: %s", name, st.msg);
  rt_cubin_free(&bin);
  free(src);
  return ok ? 1 : 0;
}

/* Replay, lowering (shapes as expected), NVRTC; with emulate, the C
 * emulation against the reference on `spec` (the workload itself, or a
 * smaller one of the same family). */
static void hand_check(const hand_expect *e, const char *emulate_spec) {
  char spec[16];
  snprintf(spec, sizeof spec, "%s/0", e->name);
  dg_func *f = NULL;
  sched *s = hand_replay(e->name, spec, SCHED_REPLAY_EXACT, &f);
  CHECK(s != NULL);
  dg_status st;
  lw_program *p = lower_program(sched_func(s), NULL, &st);
  if (!p) dg_test_fail(__FILE__, __LINE__, "%s: %s", e->name, st.msg);
  bool ok = p && lower_verify(p, &lower_limits_sm90, &st);
  if (p && !ok) dg_test_fail(__FILE__, __LINE__, "%s: %s", e->name, st.msg);
  if (ok) {
    /* one launch, bound to blockIdx.x and threadIdx.x, as planned */
    ok = p->n_kernels == 1;
    if (!ok) dg_test_fail(__FILE__, __LINE__, "%s: %d launches", e->name, p->n_kernels);
  }
  if (ok) {
    const lw_kernel *k = &p->kernels[0];
    ok = k->grid[0] == e->grid && k->grid[1] == 1 && k->grid[2] == 1 &&
         k->block[0] == e->threads && k->block[1] == 1 && k->block[2] == 1 &&
         lower_kernel_shared_bytes(k, false) == e->shared_bytes &&
         lower_kernel_shared_bytes(k, true) == 0;
    if (!ok)
      dg_test_fail(__FILE__, __LINE__,
                   "%s: grid (%lld, %lld, %lld) block (%lld, %lld, %lld) shared %lld, want grid "
                   "%lld, %lld threads, shared %lld",
                   e->name, (long long)k->grid[0], (long long)k->grid[1], (long long)k->grid[2],
                   (long long)k->block[0], (long long)k->block[1], (long long)k->block[2],
                   (long long)lower_kernel_shared_bytes(k, false), (long long)e->grid,
                   (long long)e->threads, (long long)e->shared_bytes);
  }
  if (ok) ok = hand_nvrtc(p, e->name) != 0;
  lower_program_free(p);
  if (ok) {
    /* the numbers, through the GPU program emulated on the CPU */
    dg_func *ref = f;
    sched *small = NULL;
    dg_func *small_f = NULL;
    if (emulate_spec) {
      /* written for the full size, the schedule is emulated on a smaller
       * workload: its tile decisions are repaired to the smaller loops */
      small = hand_replay(e->name, emulate_spec, SCHED_REPLAY_REPAIR, &small_f);
      ok = small != NULL;
      ref = small_f;
    }
    rt_check chk;
    if (ok && !rt_program_check_c(ref, small ? sched_func(small) : sched_func(s), 11, &chk, &st)) {
      dg_test_fail(__FILE__, __LINE__, "%s: %s", e->name, st.msg);
      ok = false;
    }
    if (ok && !chk.pass) {
      dg_test_fail(__FILE__, __LINE__, "%s: %lld of %lld wrong, first %s", e->name,
                   (long long)chk.n_bad, (long long)chk.n_checked, chk.first_bad);
    }
    if (ok) CHECK(chk.n_checked > 0);
    sched_free(small);
    ir_func_free(small_f);
  }
  sched_free(s);
  ir_func_free(f);
}

/* C3D's structure on a conv3d small enough to emulate (see the top). */
#define C3D_SMALL "conv3d_ndhwc:n=1,d=2,h=32,w=32,ci=3,co=64,kernel=7,stride=2,pad=3"

/* Bytes of a static shared array of n floats (16-byte aligned). */
#define F(n) (((n) * 4 + 15) / 16 * 16)

/* Each: name, grid, threads, static shared bytes: the read caches' tiles
 * (input patch + weights, or the two operands) as compacted by the lowering,
 * the rows read (a cooperative fetch's predicate bounds its tile, as in
 * TVM, whose tiles C1D, C2D, C3D, DIL and CBR's are); NRM and SFM hold
 * their reduction results and each allreduce's per-warp slots. */
DG_TEST(hand_c1d) {
  static const hand_expect e = {"C1D", 64, 32, F(17 * 16) + F(3 * 16 * 32)};
  hand_check(&e, NULL);
}

DG_TEST(hand_c2d) {
  static const hand_expect e = {"C2D", 392, 128, F(21 * 21 * 3) + F(7 * 7 * 3 * 32)};
  hand_check(&e, NULL);
}

DG_TEST(hand_c3d) {
  static const hand_expect e = {"C3D", 1568, 256, F(21 * 21 * 3) + F(7 * 7 * 3 * 64)};
  hand_check(&e, C3D_SMALL);
}

DG_TEST(hand_cap) {
  static const hand_expect e = {"CAP", 128, 128, F(3 * 4 * 4 * 16) + F(4 * 4 * 16 * 8)};
  hand_check(&e, NULL);
}

DG_TEST(hand_dep) {
  static const hand_expect e = {"DEP", 196, 128, F(10 * 10 * 32) + F(3 * 3 * 32)};
  hand_check(&e, NULL);
}

DG_TEST(hand_dil) {
  static const hand_expect e = {"DIL", 218, 218, F(229 * 3) + F(7 * 3 * 32)};
  hand_check(&e, NULL);
}

DG_TEST(hand_gmm) {
  static const hand_expect e = {"GMM", 64, 64, F(16 * 128) + F(128 * 16)};
  hand_check(&e, NULL);
}

DG_TEST(hand_grp) {
  static const hand_expect e = {"GRP", 224, 112, F(9 * 15 * 16) + F(3 * 3 * 16 * 16)};
  hand_check(&e, NULL);
}

DG_TEST(hand_t2d) {
  static const hand_expect e = {"T2D", 64, 128, F(6 * 6 * 64) + F(4 * 4 * 64 * 4)};
  hand_check(&e, NULL);
}

DG_TEST(hand_nrm) {
  static const hand_expect e = {"NRM", 1, 512, F(1) + F(16)};
  hand_check(&e, NULL);
}

DG_TEST(hand_sfm) {
  static const hand_expect e = {"SFM", 256, 64, F(1) + F(1) + F(2) + F(2)};
  hand_check(&e, NULL);
}

DG_TEST(hand_cbr) {
  static const hand_expect e = {"CBR", 392, 128, F(21 * 21 * 3) + F(7 * 7 * 3 * 32)};
  hand_check(&e, NULL);
}

DG_TEST(hand_tbg) {
  static const hand_expect e = {"TBG", 192, 64, F(32 * 64) + F(64 * 32)};
  hand_check(&e, NULL);
}
