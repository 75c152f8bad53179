/* cmd_sample.c: `dragon sample KERNEL --count N --seed S`: generates the
 * kernel's CUDA design space (search/space.c) and prints N samples of it as
 * TVM trace JSON lines: a sketch drawn uniformly, every decision drawn
 * anew, then EnterPostproc and the postprocessors (the part TVM records
 * after the marker). Samples a postprocessor rejects are drawn again; the
 * rejections per postprocessor go to stderr with the other counts.
 * Deterministic for the seed. --space-only stops before the
 * postprocessors, --sketches prints the design space itself, --check runs
 * every printed sample through the C emulation of its GPU launches and
 * compares it with the float64 reference.
 */
#include "cli/cli.h"
#include "dragon/rt.h"
#include "dragon/search.h"

static bool emit(sched *s, const dg_func *f, bool check, uint64_t seed, int64_t i, dg_status *st) {
  if (check) {
    rt_check chk;
    if (!rt_program_check_c(f, sched_func(s), seed, &chk, st)) {
      dg_status_prefix(st, "sample %lld", (long long)i);
      return false;
    }
    if (!chk.pass)
      return dg_fail(st, DG_ERR_RUNTIME,
                     "sample %lld: %lld of %lld elements out of tolerance; first %s", (long long)i,
                     (long long)chk.n_bad, (long long)chk.n_checked,
                     chk.first_bad[0] ? chk.first_bad : "-");
  }
  char *js = sched_trace_to_json(sched_get_trace(s));
  puts(js);
  free(js);
  return true;
}

int cmd_sample(int argc, char **argv) {
  int64_t count = 1, seed = 1, max_tries = -1;
  bool space_only = false, sketches = false, check = false;
  const cli_opt opts[] = {
      {"--count", CLI_OPT_INT, &count, 0, 1000000, "number of samples to print"},
      {"--seed", CLI_OPT_INT, &seed, 0, INT64_MAX, "seed of the design space and the samples"},
      {"--space-only", CLI_OPT_FLAG, &space_only, 0, 0, "samples without the postprocessors"},
      {"--sketches", CLI_OPT_FLAG, &sketches, 0, 0,
       "print the design space's sketches (as generated) instead of samples"},
      {"--check", CLI_OPT_FLAG, &check, 0, 0,
       "check each sample numerically through the C emulation of its launches"},
      {"--max-tries", CLI_OPT_INT, &max_tries, -1, INT64_MAX,
       "samples drawn at most before giving up (-1: 1000 + 200 per sample)"},
  };
  const cli_spec spec = {
      "sample",
      "KERNEL [--count N] [--seed S] [--space-only] [--sketches] [--check] [--max-tries N]",
      "Generates MetaSchedule's CUDA design space of a kernel (a workload spec or alias\n"
      "such as GMM/0, a kernel-text file, or - for stdin) and prints samples of it, one\n"
      "trace JSON (TVM's layout, postprocessing included) per line. A sample is a sketch\n"
      "drawn uniformly with every decision drawn anew, then postprocessed; samples that a\n"
      "postprocessor rejects are drawn again, and the rejections per postprocessor are\n"
      "printed on stderr. Deterministic for the seed.",
      opts, DG_ARRAY_LEN(opts), 1, 1};
  char **pos;
  int npos;
  int rc = cli_parse(&spec, argc, argv, &pos, &npos);
  if (rc) return rc < 0 ? CLI_OK : rc;
  dg_status st;
  dg_func *f = cli_load_kernel(pos[0], &st);
  free(pos);
  if (!f) return cli_report("sample", &st);
  search_space_opts so = {.seed = (uint64_t)seed};
  search_space sp;
  if (!ir_verify(f, &st) || !search_space_generate(f, &so, &sp, &st)) {
    ir_func_free(f);
    return cli_report("sample", &st);
  }
  bool ok = true;
  search_postprocs pp = {0};
  int64_t printed = 0, tried = 0, replay_failed = 0;
  if (sketches) {
    for (int i = 0; i < sp.n; i++) {
      char *js = sched_trace_to_json(sp.sketches[i]);
      puts(js);
      free(js);
    }
  } else {
    dg_rng rng;
    dg_rng_seed(&rng, (uint64_t)seed);
    if (max_tries < 0) max_tries = 1000 + 200 * count;
    dg_status last;
    dg_status_ok(&last);
    while (ok && printed < count && tried < max_tries) {
      tried++;
      sched *s = search_sample(f, &sp, space_only ? NULL : &pp, &rng, &replay_failed, &last);
      if (!s) continue;
      ok = emit(s, f, check, (uint64_t)seed + (uint64_t)printed, printed, &st);
      printed += ok;
      sched_free(s);
    }
    if (ok && printed < count)
      ok = dg_fail(&st, DG_ERR_INVALID, "%lld of %lld samples after %lld tries; last rejection: %s",
                   (long long)printed, (long long)count, (long long)tried, last.msg);
  }
  fflush(stdout);
  fprintf(stderr, "sketches  %d", sp.n);
  if (sp.n_undone) fprintf(stderr, "  (%d rule steps undone; first: %s)", sp.n_undone, sp.undone);
  if (sp.n_fallbacks) fprintf(stderr, "\nfallback  %s", sp.fallback);
  fprintf(stderr, "\nsamples   %lld printed, %lld drawn, %lld failed to replay\n",
          (long long)printed, (long long)tried, (long long)replay_failed);
  if (!space_only && !sketches) {
    fprintf(stderr, "rejected ");
    for (int p = 0; p < SEARCH_POSTPROC_COUNT; p++)
      fprintf(stderr, " %s=%lld", search_postproc_name((search_postproc)p),
              (long long)pp.rejected[p]);
    fputc('\n', stderr);
  }
  search_space_free(&sp);
  ir_func_free(f);
  return ok ? CLI_OK : cli_report("sample", &st);
}
