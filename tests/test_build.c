/* test_build.c: rt_program_build, the one road from a scheduled kernel to
 * compiled code. Each stage's failure is reported at that stage with its
 * reason: a kernel that does not verify, one that does not lower, one past
 * VerifyGPUCode's limits (the sm_90 table, a tiny one, a vthread), source
 * the target cannot have (a reference with other parameters), and a
 * compilation that fails (a malformed architecture, one NVRTC refuses, a C
 * compiler that fails). Then what it builds: the emit-only source is the
 * one `dragon emit` prints, the C targets come back compiled and right,
 * and CUDA compiles for the architecture asked for or the default one.
 *
 * One kernel throughout: C[i] = A[i] + B[i] over N = 4096 elements, bound
 * as N / T blocks of T threads (T = 256 unless said).
 */
#include <stdlib.h>
#include <string.h>

#include "dragon/codegen.h"
#include "dragon/rt_cuda.h"
#include "dragon/sched.h"
#include "dragon/search.h"
#include "dragon/wl.h"
#include "test.h"

/* vadd bound as blocks of `threads` threads; vthread > 1 wraps the thread
 * loop's body in a vthread.x loop of that extent (each virtual thread a
 * slice of the block's elements). */
static dg_func *vadd(int threads, int vthread) {
  int per_block = threads * vthread;
  char text[1200];
  if (vthread > 1)
    snprintf(text, sizeof text,
             "kernel vadd(A: f32[4096], B: f32[4096], C: f32[4096]):\n"
             "  block root:\n"
             "    for b in %d bind(blockIdx.x):\n"
             "      for v in %d bind(vthread.x):\n"
             "        for t in %d bind(threadIdx.x):\n"
             "          block C(vi: S(4096) = b * %d + v * %d + t):\n"
             "            reads A[vi], B[vi]\n"
             "            writes C[vi]\n"
             "            C[vi] = A[vi] + B[vi]\n",
             4096 / per_block, vthread, threads, per_block, threads);
  else
    snprintf(text, sizeof text,
             "kernel vadd(A: f32[4096], B: f32[4096], C: f32[4096]):\n"
             "  block root:\n"
             "    for b in %d bind(blockIdx.x):\n"
             "      for t in %d bind(threadIdx.x):\n"
             "        block C(vi: S(4096) = b * %d + t):\n"
             "          reads A[vi], B[vi]\n"
             "          writes C[vi]\n"
             "          C[vi] = A[vi] + B[vi]\n",
             4096 / per_block, threads, per_block);
  dg_status st;
  dg_func *f = ir_parse(text, "vadd", &st);
  if (!f) dg_test_fail(__FILE__, __LINE__, "parse: %s", st.msg);
  return f;
}

/* The same kernel's loops as written (no binding): the reference. */
static dg_func *vadd_plain(void) {
  static const char text[] =
      "kernel vadd(A: f32[4096], B: f32[4096], C: f32[4096]):\n"
      "  block root:\n"
      "    for i in 4096:\n"
      "      block C(vi: S(4096) = i):\n"
      "        reads A[vi], B[vi]\n"
      "        writes C[vi]\n"
      "        C[vi] = A[vi] + B[vi]\n";
  dg_status st;
  dg_func *f = ir_parse(text, "vadd", &st);
  if (!f) dg_test_fail(__FILE__, __LINE__, "parse: %s", st.msg);
  return f;
}

/* Builds f for target with opts (target and compile set here); expects a
 * failure at `stage` whose message contains `want`. */
static bool fails_at(const dg_func *f, rt_build_opts o, rt_build_stage stage, const char *want) {
  rt_build b;
  dg_status st;
  bool ok = rt_program_build(f, &o, &b, &st);
  bool right = !ok && st.code != DG_OK && b.stage == stage && strstr(st.msg, want) != NULL;
  if (!right)
    dg_test_fail(__FILE__, __LINE__,
                 "target %d: want a failure at %s containing '%s'; got %s at %s: '%s'",
                 (int)o.target, rt_build_stage_name(stage), want, ok ? "success" : "a failure",
                 rt_build_stage_name(b.stage), st.msg);
  /* what the stages before it made is kept, nothing after */
  bool kept = (b.prog != NULL) == (stage > RT_BUILD_LIMITS && o.target != RT_BUILD_C) &&
              (b.source != NULL) == (stage > RT_BUILD_CODEGEN) && b.fn == NULL &&
              b.bin.image == NULL;
  if (right && !kept)
    dg_test_fail(__FILE__, __LINE__, "%s: products of the stages before it: prog %d source %d",
                 rt_build_stage_name(stage), b.prog != NULL, b.source != NULL);
  rt_build_free(&b);
  return right && kept;
}

DG_TEST(build_stage_names) {
  static const char *const want[] = {"verify",  "lowering", "VerifyGPUCode",
                                     "codegen", "compile",  "built"};
  CHECK_EQ(DG_ARRAY_LEN(want), RT_BUILD_STAGE_COUNT);
  for (int s = 0; s < RT_BUILD_STAGE_COUNT; s++)
    CHECK_STREQ(rt_build_stage_name((rt_build_stage)s), want[s]);
}

DG_TEST(build_fails_at_verify) {
  dg_func *f = vadd(256, 1);
  CHECK(f != NULL);
  f->params[1]->name = "A"; /* two buffers named A */
  static const rt_build_target targets[] = {RT_BUILD_C, RT_BUILD_C_EMULATION, RT_BUILD_CUDA};
  for (size_t i = 0; i < DG_ARRAY_LEN(targets); i++)
    CHECK(fails_at(f, (rt_build_opts){.target = targets[i], .compile = true}, RT_BUILD_VERIFY,
                   "buffer name A is used twice"));
  ir_func_free(f);
}

DG_TEST(build_fails_at_lowering) {
  /* nothing bound to the GPU: no launch can be made of it */
  dg_func *f = vadd_plain();
  CHECK(f != NULL);
  CHECK(fails_at(f, (rt_build_opts){.target = RT_BUILD_C_EMULATION}, RT_BUILD_LOWER,
                 "blockIdx"));
  CHECK(fails_at(f, (rt_build_opts){.target = RT_BUILD_CUDA, .compile = true}, RT_BUILD_LOWER,
                 "blockIdx"));
  /* not a question of limits: none would let it through */
  lw_limits roomy = *rt_build_limits_for(NULL);
  roomy.max_threads_per_block = 1 << 20;
  CHECK(fails_at(f, (rt_build_opts){.target = RT_BUILD_CUDA, .limits = &roomy}, RT_BUILD_LOWER,
                 "blockIdx"));
  /* the plain C target does not lower: the loops as written build */
  rt_build b;
  dg_status st;
  rt_build_opts o = {.target = RT_BUILD_C, .compile = true, .reference = f};
  CHECK_MSG(rt_program_build(f, &o, &b, &st), "%s", st.msg);
  CHECK(b.stage == RT_BUILD_DONE && b.prog == NULL && b.fn && b.ref_fn);
  rt_build_free(&b);
  ir_func_free(f);
}

DG_TEST(build_fails_at_limits) {
  /* 2048 threads a block: past sm_90's 1024 */
  dg_func *f = vadd(2048, 1);
  CHECK(f != NULL);
  CHECK(fails_at(f, (rt_build_opts){.target = RT_BUILD_CUDA, .compile = true}, RT_BUILD_LIMITS,
                 "lower: kernel vadd_kernel0: 2048 threads per block (limit 1024)"));
  CHECK(fails_at(f, (rt_build_opts){.target = RT_BUILD_C_EMULATION, .compile = true},
                 RT_BUILD_LIMITS, "2048 threads per block (limit 1024)"));
  /* without the limits (dragon emit --no-verify) it lowers and emits */
  rt_build b;
  dg_status st;
  rt_build_opts o = {.target = RT_BUILD_CUDA, .no_limits = true};
  CHECK_MSG(rt_program_build(f, &o, &b, &st), "%s", st.msg);
  CHECK(b.stage == RT_BUILD_DONE && b.prog && b.prog->kernels[0].block[0] == 2048);
  CHECK(b.source && strstr(b.source, "__launch_bounds__(2048)"));
  rt_build_free(&b);
  ir_func_free(f);

  /* a schedule within sm_90's limits, past a tiny table's */
  f = vadd(256, 1);
  CHECK(f != NULL);
  lw_limits tiny = *rt_build_limits_for(NULL);
  tiny.max_threads_per_block = 16;
  CHECK(fails_at(f, (rt_build_opts){.target = RT_BUILD_CUDA, .limits = &tiny}, RT_BUILD_LIMITS,
                 "256 threads per block (limit 16)"));
  tiny = *rt_build_limits_for(NULL);
  tiny.max_grid_dim[0] = 8;
  CHECK(fails_at(f, (rt_build_opts){.target = RT_BUILD_C_EMULATION, .limits = &tiny},
                 RT_BUILD_LIMITS, "blockIdx.x extent 16 (limit 8)"));
  ir_func_free(f);

  /* a vthread past a table's limit (sm_90's sets none, as TVM's check
   * comes after vthread expansion) */
  f = vadd(32, 16);
  CHECK(f != NULL);
  tiny = *rt_build_limits_for(NULL);
  tiny.max_vthread = 8;
  CHECK(fails_at(f, (rt_build_opts){.target = RT_BUILD_CUDA, .limits = &tiny}, RT_BUILD_LIMITS,
                 "a vthread loop of extent 16 (limit 8)"));
  ir_func_free(f);
  /* and within it, the same kernel builds and computes the same */
  f = vadd(32, 4);
  dg_func *ref = vadd_plain();
  CHECK(f && ref);
  rt_check chk;
  CHECK_MSG(rt_program_check_c(ref, f, 3, &chk, &st), "%s", st.msg);
  CHECK_MSG(chk.pass, "%s", chk.first_bad);
  ir_func_free(ref);
  ir_func_free(f);
}

DG_TEST(build_fails_at_codegen) {
  /* the emulation's reference must have the program's parameters */
  dg_func *f = vadd(256, 1);
  dg_status st;
  dg_func *other = ir_parse("kernel other(A: f32[8], B: f32[8]):\n"
                            "  block root:\n"
                            "    for i in 8:\n"
                            "      block B(vi: S(8) = i):\n"
                            "        reads A[vi]\n"
                            "        writes B[vi]\n"
                            "        B[vi] = A[vi]\n",
                            "other", &st);
  CHECK(f && other);
  CHECK(fails_at(f, (rt_build_opts){.target = RT_BUILD_C_EMULATION, .reference = other},
                 RT_BUILD_CODEGEN, "have different parameters"));
  ir_func_free(other);
  ir_func_free(f);
}

DG_TEST(build_fails_at_compile) {
  dg_func *f = vadd(256, 1);
  CHECK(f != NULL);
  /* an architecture NVRTC is never asked about */
  CHECK(fails_at(f, (rt_build_opts){.target = RT_BUILD_CUDA, .arch = "sm_1", .compile = true},
                 RT_BUILD_COMPILE, "unknown target 'sm_1'"));
  /* the system C compiler failing */
  const char *cc = getenv("CC");
  char *saved = cc ? dg_strdup(cc) : NULL;
  setenv("CC", "false", 1);
  bool c_fails = fails_at(f, (rt_build_opts){.target = RT_BUILD_C_EMULATION, .compile = true},
                          RT_BUILD_COMPILE, "cc: compiling");
  if (saved) setenv("CC", saved, 1);
  else unsetenv("CC");
  free(saved);
  CHECK(c_fails);
  /* an architecture NVRTC refuses, where NVRTC is */
  dg_status st;
  if (!rt_nvrtc_available(&st)) {
    ir_func_free(f);
    SKIP("NVRTC is not here: %s", st.msg);
  }
  CHECK(fails_at(f, (rt_build_opts){.target = RT_BUILD_CUDA, .arch = "sm_10", .compile = true},
                 RT_BUILD_COMPILE, "nvrtc: dragon.cu for sm_10 failed"));
  /* and one stopped past its time limit */
  if (rt_nvrtc_can_cancel())
    CHECK(fails_at(f,
                   (rt_build_opts){.target = RT_BUILD_CUDA, .compile = true,
                                   .compile_limit_s = 1e-9, .name = "quick"},
                   RT_BUILD_COMPILE, "nvrtc: quick.cu: stopped after"));
  ir_func_free(f);
}

/* `dragon emit` prints what an emit-only build makes, for both targets,
 * with a trace and with the untuned baseline. */
DG_TEST(build_emit_is_dragon_emit) {
  dg_status st;
  char *text = dg_read_file("schedules/GMM.json", NULL, &st);
  CHECK_MSG(text, "%s", st.msg);
  sched_trace *t = sched_trace_from_json(text, &st);
  free(text);
  CHECK_MSG(t, "%s", st.msg);
  dg_func *f = wl_build("GMM/0", &st);
  CHECK_MSG(f, "%s", st.msg);
  sched *traced = sched_new(f, 0);
  CHECK_MSG(sched_replay(traced, t, false, false, &st), "%s", st.msg);
  sched_trace_free(t);
  sched *base = NULL;
  CHECK_MSG(search_baseline_schedule(f, NULL, &base, &st), "%s", st.msg);
  static const struct {
    const char *target;
    rt_build_target build;
  } targets[] = {{"cuda", RT_BUILD_CUDA}, {"c", RT_BUILD_C_EMULATION}};
  for (size_t i = 0; i < DG_ARRAY_LEN(targets); i++)
    for (int traced_run = 0; traced_run < 2; traced_run++) {
      rt_build b;
      rt_build_opts o = {.target = targets[i].build};
      sched *s = traced_run ? traced : base;
      CHECK_MSG(rt_program_build(sched_func(s), &o, &b, &st), "%s", st.msg);
      CHECK(b.stage == RT_BUILD_DONE && b.source && !b.fn && !b.bin.image);
      char args[200], *out = NULL;
      snprintf(args, sizeof args, "emit GMM/0 --target %s%s", targets[i].target,
               traced_run ? " --trace schedules/GMM.json" : "");
      int rc = dg_test_run_dragon(args, NULL, &out);
      CHECK_MSG(rc == 0, "dragon %s: exit %d\n%s", args, rc, out);
      CHECK_MSG(strcmp(out, b.source) == 0, "dragon %s prints other source than the build",
                args);
      free(out);
      rt_build_free(&b);
    }
  sched_free(traced);
  sched_free(base);
  ir_func_free(f);
}

/* The C targets come back compiled, and their numbers are the reference's. */
DG_TEST(build_c_targets_compiled) {
  dg_func *f = vadd(256, 1), *ref = vadd_plain();
  CHECK(f && ref);
  dg_status st;
  static const rt_build_target targets[] = {RT_BUILD_C, RT_BUILD_C_EMULATION};
  for (size_t i = 0; i < DG_ARRAY_LEN(targets); i++) {
    rt_build b;
    rt_build_opts o = {.target = targets[i], .compile = true, .reference = ref};
    CHECK_MSG(rt_program_build(f, &o, &b, &st), "%s", st.msg);
    CHECK(b.stage == RT_BUILD_DONE && b.fn && b.ref_fn);
    CHECK((b.prog != NULL) == (targets[i] == RT_BUILD_C_EMULATION));
    CHECK(b.t_lower >= 0 && b.t_codegen > 0 && b.t_compile > 0);
    rt_tensors ts;
    CHECK(rt_tensors_init(&ts, ref, &st));
    rt_data_fill(&ts, 9, RT_DIST_UNIFORM);
    rt_cpu_call(b.ref_fn, ts.ref_args);
    rt_cpu_call(b.fn, ts.args);
    rt_check chk;
    rt_check_outputs(&ts, rt_check_reduce_len(ref), &chk);
    rt_tensors_free(&ts);
    rt_build_free(&b);
    CHECK_MSG(chk.pass, "target %d: %s", (int)targets[i], chk.first_bad);
  }
  /* without a reference only the kernel is there */
  rt_build b;
  rt_build_opts o = {.target = RT_BUILD_C_EMULATION, .compile = true};
  CHECK_MSG(rt_program_build(f, &o, &b, &st), "%s", st.msg);
  CHECK(b.fn && !b.ref_fn);
  rt_build_free(&b);
  ir_func_free(ref);
  ir_func_free(f);
}

/* The expected outputs of a check (rt_reference_run, one compiler run): the
 * reference's, bit for bit those of the reference compiled beside a
 * kernel, and the baseline's, bit for bit the unscheduled kernel's as the
 * interpreter computes it (its loops run in the reference's order and in
 * parallel: the same bits); a reference alone holds no kernel; a kernel
 * that does not verify is refused by name. */
DG_TEST(build_reference_run) {
  dg_func *f = vadd(256, 1), *ref = vadd_plain();
  CHECK(f && ref);
  dg_status st;
  char *src = codegen_emit_source(NULL, ref, &codegen_lang_c, &st);
  CHECK_MSG(src, "%s", st.msg);
  CHECK(strstr(src, CODEGEN_REFERENCE_FN) && !strstr(src, CODEGEN_KERNEL_FN));
  free(src);
  rt_build b;
  rt_build_opts o = {.target = RT_BUILD_C, .compile = true, .reference = ref};
  CHECK_MSG(rt_program_build(f, &o, &b, &st), "%s", st.msg);
  rt_tensors alone, beside;
  CHECK(rt_tensors_init(&alone, ref, &st) && rt_tensors_init(&beside, ref, &st));
  rt_data_fill(&alone, 5, RT_DIST_UNIFORM);
  rt_data_fill(&beside, 5, RT_DIST_UNIFORM);
  CHECK_MSG(rt_reference_run(ref, &alone, NULL, &st), "%s", st.msg);
  rt_cpu_call(b.ref_fn, beside.ref_args);
  rt_cpu_call(b.fn, alone.args);
  int out = -1;
  for (int i = 0; i < alone.n; i++)
    if (alone.t[i].is_output) out = i;
  CHECK(out >= 0 && alone.t[out].base);
  size_t bytes = (size_t)alone.t[out].numel * sizeof(double);
  CHECK(memcmp(alone.ref_args[out], beside.ref_args[out], bytes) == 0);
  rt_check chk;
  rt_check_outputs(&alone, rt_check_reduce_len(ref), &chk);
  CHECK_MSG(chk.pass, "%s", chk.first_bad);
  rt_tensors_free(&alone);
  rt_tensors_free(&beside);
  rt_build_free(&b);

  /* reductions whose loops the reference reorders: the baseline keeps
   * every bit of the unscheduled kernel */
  static const char *const specs[] = {"gemm:m=24,n=40,k=72,trans_a=0,trans_b=1,dtype=f32",
                                      "gemm:m=8,n=16,k=40,trans_a=1,trans_b=0,dtype=f16",
                                      "layernorm:m=6,n=50,dtype=f32"};
  for (size_t w = 0; w < DG_ARRAY_LEN(specs); w++) {
    dg_func *g = wl_build(specs[w], &st);
    CHECK_MSG(g, "%s: %s", specs[w], st.msg);
    rt_tensors ts;
    CHECK(rt_tensors_init(&ts, g, &st));
    rt_data_fill(&ts, 3, rt_data_dist_for(g));
    CHECK_MSG(rt_reference_run(g, &ts, NULL, &st), "%s", st.msg);
    CHECK(rt_interp_run(g, ts.args, false, &st));
    for (int i = 0; i < ts.n; i++) {
      const rt_tensor *t = &ts.t[i];
      if (!t->is_output) continue;
      CHECK(t->base != NULL);
      size_t n = (size_t)t->numel * (size_t)dg_dtype_bytes(t->buf->dtype);
      CHECK_MSG(memcmp(t->base, t->data, n) == 0, "%s: the baseline is not the kernel's own", specs[w]);
    }
    rt_tensors_free(&ts);
    ir_func_free(g);
  }

  ref->params[1]->name = "A"; /* two buffers named A */
  CHECK(rt_tensors_init(&alone, ref, &st));
  CHECK(!rt_reference_run(ref, &alone, NULL, &st));
  CHECK_MSG(strstr(st.msg, "buffer name A is used twice"), "%s", st.msg);
  rt_tensors_free(&alone);
  ir_func_free(ref);
  ir_func_free(f);
}

/* CUDA: compiled for the architecture asked for, else the default one (the
 * device's where there is a GPU); emit-only asks no device. */
DG_TEST(build_cuda_arch) {
  dg_func *f = vadd(256, 1);
  CHECK(f != NULL);
  dg_status st;
  rt_build b;
  rt_build_opts o = {.target = RT_BUILD_CUDA, .arch = "sm_80"};
  CHECK_MSG(rt_program_build(f, &o, &b, &st), "%s", st.msg);
  CHECK_STREQ(b.arch, "sm_80");
  rt_build_free(&b);
  if (!rt_nvrtc_available(&st)) {
    ir_func_free(f);
    SKIP("NVRTC is not here: %s", st.msg);
  }
  char want[16];
  rt_build_arch(want, sizeof want);
  CHECK(strncmp(want, "sm_", 3) == 0);
  o = (rt_build_opts){.target = RT_BUILD_CUDA, .compile = true};
  CHECK_MSG(rt_program_build(f, &o, &b, &st), "%s", st.msg);
  CHECK(b.stage == RT_BUILD_DONE && b.bin.image && !b.bin.is_ptx);
  CHECK_STREQ(b.arch, want);
  CHECK_STREQ(b.bin.arch, want);
  CHECK(b.t_compile > 0);
  rt_build_free(&b);
  o = (rt_build_opts){.target = RT_BUILD_CUDA, .arch = "compute_80", .compile = true};
  CHECK_MSG(rt_program_build(f, &o, &b, &st), "%s", st.msg);
  CHECK(b.bin.is_ptx && strstr(b.bin.image, ".entry vadd_kernel0"));
  rt_build_free(&b);
  ir_func_free(f);
}
