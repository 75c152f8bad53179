/* test_cli_sched.c: `dragon schedule`, `dragon check`, `dragon fuzz-schedules`
 * from the command line: output, exit codes, located errors. */
#include <stdlib.h>

#include "test.h"

DG_TEST(cli_schedule_prints_kernel) {
  char *out = NULL;
  int rc = dg_test_run_dragon("schedule GMM/0 --trace tests/data/traces/gmm0_tiling.json", NULL, &out);
  CHECK_MSG(rc == 0, "rc %d: %s", rc, out);
  CHECK(strstr(out, "for b_0_i_0_j_0_fused in 1 bind(blockIdx.x):") != NULL);
  CHECK(strstr(out, "for b_2_i_2_j_2_fused in 2 bind(threadIdx.x):") != NULL);
  free(out);
  rc = dg_test_run_dragon("schedule GMM/0 --trace tests/data/traces/gmm0_tiling.json --json", NULL, &out);
  CHECK(rc == 0);
  char *orig = dg_read_file("tests/data/traces/gmm0_tiling.json", NULL, NULL);
  CHECK(orig && strcmp(out, orig) == 0); /* canonical JSON round trip, byte for byte */
  free(orig);
  free(out);
}

DG_TEST(cli_check_pass_and_errors) {
  char *out = NULL;
  int rc = dg_test_run_dragon("check GMM/0 --trace tests/data/traces/gmm0_tiling.json --interp", NULL, &out);
  CHECK_MSG(rc == 0, "rc %d: %s", rc, out);
  CHECK(strstr(out, "check     pass") != NULL);
  free(out);
  /* a trace naming a block that does not exist */
  char path[512];
  snprintf(path, sizeof path, "%s/bad.json", dg_test_tmpdir());
  FILE *f = fopen(path, "w");
  CHECK(f);
  fputs("[[[\"GetBlock\",[],[\"Q\",\"main\"],[\"b0\"]]],[]]\n", f);
  fclose(f);
  char args[700];
  snprintf(args, sizeof args, "check GMM/0 --trace %s", path);
  rc = dg_test_run_dragon(args, NULL, &out);
  CHECK(rc == 1);
  CHECK(strstr(out, "bad.json: instruction 0: GetBlock: no block named 'Q'") != NULL);
  free(out);
  /* truncated JSON */
  f = fopen(path, "w");
  fputs("[[[\"GetBlock\",[],[\"Z\",\"ma", f);
  fclose(f);
  rc = dg_test_run_dragon(args, NULL, &out);
  CHECK(rc == 1);
  CHECK(strstr(out, "bad.json: trace JSON:1:") != NULL);
  free(out);
  rc = dg_test_run_dragon("check GMM/0", NULL, &out);
  CHECK(rc == 2);
  CHECK(strstr(out, "--trace is required") != NULL);
  free(out);
  rc = dg_test_run_dragon("check nosuch:x=1 --trace tests/data/traces/gmm0_tiling.json", NULL, &out);
  CHECK(rc == 1);
  free(out);
}

DG_TEST(cli_fuzz_schedules_small) {
  char *out = NULL;
  int rc = dg_test_run_dragon("fuzz-schedules --count 120 --seed 5", NULL, &out);
  CHECK_MSG(rc == 0, "rc %d: %s", rc, out);
  CHECK(strstr(out, "120 schedules, 120 checked, 0 mismatches") != NULL);
  free(out);
  rc = dg_test_run_dragon("fuzz-schedules --count 0", NULL, &out);
  CHECK(rc == 2);
  free(out);
}

/* MetaSchedule's GMM/0 CUDA design space (MultiLevelTiling "SSSRRSRS" with
 * the decisions of TVM's gmm_0 test: tiles [1,1,1,1,1] [1,32,1,2,2]
 * [1,1,2,64,1] [1,32,4], cooperative fetch 1 and 0, unroll 4), written in
 * TVM's trace JSON: it replays, checks numerically, and re-serializes to the
 * same bytes. */
DG_TEST(cli_gmm0_design_space) {
  char *out = NULL;
  int rc = dg_test_run_dragon("check GMM/0 --trace tests/data/traces/gmm0_space.json", NULL, &out);
  CHECK_MSG(rc == 0, "rc %d: %s", rc, out);
  CHECK(strstr(out, "check     pass") != NULL);
  free(out);
  rc = dg_test_run_dragon("schedule GMM/0 --trace tests/data/traces/gmm0_space.json --json", NULL, &out);
  CHECK(rc == 0);
  char *orig = dg_read_file("tests/data/traces/gmm0_space.json", NULL, NULL);
  CHECK(orig && strcmp(out, orig) == 0);
  free(orig);
  free(out);
  rc = dg_test_run_dragon("schedule GMM/0 --trace tests/data/traces/gmm0_space.json", NULL, &out);
  CHECK(rc == 0);
  /* the shape of TVM's gmm_0 sketch */
  CHECK(strstr(out, "for k_1, b_3, i_3, j_3, k_2, b_4, i_4, j_4 in grid(32, 1, 2, 64, 4, 1, 2, 1):"));
  CHECK(strstr(out, "for ax0, ax1, ax2 in grid(1, 4, 64):"));
  CHECK(strstr(out, "alloc Y_shared: f32[1, 128, 128] shared"));
  CHECK(strstr(out, "attr meta_schedule.unroll_explicit = 1024"));
  free(out);
}

/* `dragon run --trace --target c`: the lowered GPU program, emulated on the
 * CPU, checked against the float64 reference; a schedule that breaks the
 * GPU's limits is refused with the reason; without a GPU the cuda target
 * says so clearly. */
DG_TEST(cli_run_targets) {
  char *out = NULL;
  const char *k = "'gemm:m=64,n=48,k=32,dtype=f32' --trace tests/data/traces/gemm_bind.json";
  char args[256];
  snprintf(args, sizeof args, "run %s --target c", k);
  int rc = dg_test_run_dragon(args, NULL, &out);
  CHECK_MSG(rc == 0, "rc %d: %s", rc, out);
  CHECK(strstr(out, "check     pass") != NULL);
  free(out);
  snprintf(args, sizeof args, "run %s --target cpu --repeat 2", k);
  rc = dg_test_run_dragon(args, NULL, &out);
  CHECK_MSG(rc == 0, "rc %d: %s", rc, out);
  free(out);
  rc = dg_test_run_dragon("run GMM/0 --trace tests/data/traces/gmm0_space.json --target c", NULL, &out);
  CHECK(rc == 1);
  CHECK(strstr(out, "bytes of shared memory (limit 49152)") != NULL);
  free(out);
  /* without a trace, the untuned baseline (DefaultGPUSchedule) runs */
  rc = dg_test_run_dragon("run GMM/0 --target c", NULL, &out);
  CHECK_MSG(rc == 0, "rc %d: %s", rc, out);
  CHECK(strstr(out, "DefaultGPUSchedule") != NULL && strstr(out, "check     pass") != NULL);
  free(out);
  rc = dg_test_run_dragon("run GMM/0 --target tpu", NULL, &out);
  CHECK(rc == 2);
  free(out);
}
