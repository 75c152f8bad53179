/* cmd_optimize.c: `dragon optimize KERNEL`: the model writes schedules for
 * a kernel (or refines a prior one), every graph walks the one road (eval.h)
 * and the best valid schedule is kept (eval_pick_best), with the untuned
 * baseline as the last resort.
 *
 * Per round: K graphs from the model by constrained decoding (train_decode_graph:
 * the header and the edit numbers forced, every other token one that keeps
 * the graph parseable and well-typed), scored in one batch together with
 * the prior and the baseline; with --rounds R the kept graph becomes the
 * next round's prior, so that the model refines its own best. A model that
 * cannot be loaded, a prior that fails a gate and samples that fail are
 * reported by name and the best valid schedule is still returned; the
 * command fails only when not even the baseline passes. Output: the graph
 * (stdout, or OUT/graph.tsel), and with --out the trace JSON, the CUDA
 * source and the report, which goes to stderr as well.
 */
#include <string.h>
#include <sys/stat.h>

#include "cli/cli.h"
#include "dragon/eval.h"
#include "dragon/rt_cuda.h"
#include "dragon/search.h"
#include "dragon/train.h"
#include "dragon/tsel.h"
#include "dragon/wl.h"


/* The prompt's kernel text, the spec named in every graph's header: the
 * canonical spec of a workload, or the file name of a kernel-text file. */
static char *header_spec(const char *arg, dg_status *st) {
  struct stat sb;
  if (strcmp(arg, "-") == 0) return dg_strdup("stdin");
  if (stat(arg, &sb) == 0) return dg_strdup(arg);
  return wl_canonical(arg, st);
}

/* The CUDA source of a trace on f (for OUT/kernel.cu). */
static char *cuda_source(const dg_func *f, const char *trace_json, const char *arch,
                         dg_status *st) {
  sched_trace *tr = sched_trace_from_json(trace_json, st);
  if (!tr) return NULL;
  sched *s = sched_new(f, 0);
  char *src = NULL;
  if (sched_replay(s, tr, false, false, st)) {
    rt_build_opts bo;
    memset(&bo, 0, sizeof bo);
    bo.target = RT_BUILD_CUDA;
    bo.arch = arch && arch[0] ? arch : NULL;
    bo.name = "optimized";
    rt_build b;
    if (rt_program_build(sched_func(s), &bo, &b, st)) {
      src = b.source;
      b.source = NULL;
    }
    rt_build_free(&b);
  }
  sched_free(s);
  sched_trace_free(tr);
  return src;
}

static const char *kind_name(const eval_pick *p, char *buf, size_t n) {
  if (p->kind == EVAL_PICK_SAMPLE) snprintf(buf, n, "sample %d", p->sample + 1);
  else snprintf(buf, n, "%s", p->kind == EVAL_PICK_PRIOR ? "the prior" : "the baseline");
  return buf;
}

/* The kernel of `dragon optimize` with no argument. */
#define OPTIMIZE_DEFAULT_KERNEL "GMM/0"

int cmd_optimize(int argc, char **argv) {
  const char *prior_path = NULL, *model_arg = NULL, *tokp = NULL, *target = NULL, *out_dir = NULL;
  int64_t samples = 4, rounds = 0, seed = 1, max_tokens = 2048, top_k = 0, threads = 0;
  int64_t restarts = CLI_RESTARTS;
  double temperature = 0.8, top_p = 1.0, min_gain = 1.03, restart_temperature = 1.0;
  bool unconstrained = false, no_explain = false, no_guard = false, decode_explain = false, write_gpu = false;
  const char *write_on = NULL, *guard_log = NULL;
  const cli_opt opts[] = {
      {"--prior", CLI_OPT_STR, &prior_path, 0, 0, "a TSEL graph to refine instead of writing one"},
      {"--samples", CLI_OPT_INT, &samples, 0, 256, "graphs the model writes per round (default 4; 0: none)"},
      {"--rounds", CLI_OPT_INT, &rounds, 0, 64, "rounds in which the model refines its own best (default 0)"},
      {"--target", CLI_OPT_STR, &target, 0, 0, "cuda (checked and timed on the GPU) or c (checked in the C emulation, not timed); default: cuda where a GPU is seen"},
      {"--model", CLI_OPT_STR, &model_arg, 0, 0, "run directory or model file (default $DRAGON_MODEL, else " CLI_DEFAULT_MODEL ")"},
      {"--tokenizer", CLI_OPT_STR, &tokp, 0, 0, "tokenizer file; default: tokenizer.bin beside the model"},
      {"--out", CLI_OPT_STR, &out_dir, 0, 0, "write graph.tsel, trace.json, kernel.cu and report.txt here"},
      {"--seed", CLI_OPT_INT, &seed, 0, INT64_MAX, "sampling seed (same seed, same graphs)"},
      {"--temperature", CLI_OPT_F64, &temperature, 0, 0, "softmax temperature; 0: greedy (default 0.8)"},
      {"--top-k", CLI_OPT_INT, &top_k, 0, 1 << 24, "keep the k most likely tokens; 0: all"},
      {"--top-p", CLI_OPT_F64, &top_p, 0, 0, "keep the most likely tokens up to this mass, in (0, 1]"},
      {"--max-tokens", CLI_OPT_INT, &max_tokens, 16, 1 << 16, "tokens per graph at most (default 2048)"},
      {"--min-gain", CLI_OPT_F64, &min_gain, 0, 0, "a refinement is kept when this many times faster than its prior (default 1.03)"},
      {"--unconstrained", CLI_OPT_FLAG, &unconstrained, 0, 0, "sample without the grammar and type mask (for comparison)"},
      {"--no-explain", CLI_OPT_FLAG, &no_explain, 0, 0, "stop each graph after its edits (no why/expect lines)"},
      {"--decode-explain", CLI_OPT_FLAG, &decode_explain, 0, 0, "the model writes the why/expect lines (default: dragon writes them from the compiler's facts on the finished graph)"},
      {"--no-guard", CLI_OPT_FLAG, &no_guard, 0, 0, "decode without the line guard (each edit line replayed as it is written; for comparison)"},
      {"--restarts", CLI_OPT_INT, &restarts, 0, 64, CLI_RESTARTS_HELP},
      {"--restart-temperature", CLI_OPT_F64, &restart_temperature, 0, 0, CLI_RESTART_TEMPERATURE_HELP},
      {"--guard-log", CLI_OPT_STR, &guard_log, 0, 0, CLI_GUARD_LOG_HELP},
      {"--write", CLI_OPT_STR, &write_on, 0, 0, "where the model writes: cuda (the GPU's KV cache, the samples its rows; the default where the checks run on a GPU) or cpu (every core)"},
      {"--threads", CLI_OPT_INT, &threads, 0, 1024, "threads for the checks (default: every core)"},
  };
  const cli_spec spec = {
      "optimize", "[KERNEL] [--prior G.tsel] [--samples K] [--rounds R] [--target c|cuda] [--model DIR] [--out DIR]",
      "Writes a schedule for KERNEL (a workload spec, an alias or a kernel-text file;\n"
      "default " OPTIMIZE_DEFAULT_KERNEL ", a batched matmul of MetaSchedule's set)\n"
      "with the model, or refines the --prior graph, and keeps the best one that passes\n"
      "every gate: parse, header, type check, lowering to the trace, exact replay, the\n"
      "build (VerifyGPUCode), the numeric check against the float64 reference on fresh\n"
      "inputs, and on the GPU the timing (a refinement must beat its prior by\n"
      "--min-gain; the untuned baseline is kept where it is faster). Without a model,\n"
      "or when no graph passes, the prior or the baseline is returned and the report\n"
      "says why. Prints the kept graph on stdout and the report on stderr.",
      opts, DG_ARRAY_LEN(opts), 0, 1};
  char **pos;
  int npos;
  int rc = cli_parse(&spec, argc, argv, &pos, &npos);
  if (rc) return rc < 0 ? CLI_OK : rc;
  const char *kernel_arg = npos > 0 ? pos[0] : OPTIMIZE_DEFAULT_KERNEL;
  free(pos);
  if (!(temperature >= 0 && temperature <= 1e6) || !(top_p > 0 && top_p <= 1) ||
      !(min_gain >= 1 && min_gain <= 100) || !(restart_temperature >= 0 && restart_temperature <= 1e6)) {
    fprintf(stderr, "dragon optimize: --temperature and --restart-temperature must be in [0, 1e6], "
                    "--top-p in (0, 1] and --min-gain in [1, 100]\n");
    return CLI_USAGE;
  }
  if (target && strcmp(target, "c") != 0 && strcmp(target, "cuda") != 0) {
    fprintf(stderr, "dragon optimize: --target %s: the model writes GPU schedules: cuda (timed "
                    "on the GPU) or c (checked in the C emulation of the GPU program)\n", target);
    return CLI_USAGE;
  }
  dg_status st;
  dg_status_ok(&st);
  int ret = CLI_OK;
  dg_func *f = NULL;
  char *hspec = NULL, *prior = NULL, *kernel_text = NULL;
  cli_model ms;
  memset(&ms, 0, sizeof ms);
  search_cuda_measure gm = {5, 10, 1, NULL};
  bool have_gpu = false;
  eval_pick pick;
  memset(&pick, 0, sizeof pick);
  bool have_pick = false;
  dg_str report, errs;
  dg_str_init(&report);
  dg_str_init(&errs);
  double t_start = dg_now(), t_model = 0, t_check = 0;
  cli_write_stats ws = {0};

  if (!(f = cli_load_kernel(kernel_arg, &st))) goto fail;
  if (!(hspec = header_spec(kernel_arg, &st))) goto fail;
  kernel_text = ir_print(f);
  if (prior_path && !(prior = cli_read_text(prior_path, &st))) goto fail;

  /* the GPU, where asked or seen */
  if (!cli_gpu_open(target, (int)threads, &gm, &have_gpu, &errs, &st)) goto fail;

  /* the model */
  model_arg = cli_model_arg(model_arg);
  if (samples > 0) {
    if (!cli_model_open(&ms, "--model", model_arg, tokp, !unconstrained, &st)) {
      dg_str_printf(&errs, "  no model: %s\n", st.msg);
      dg_status_ok(&st);
    }
    ms.no_guard = no_guard;
    if (ms.loaded && guard_log && !(ms.guard_log = eval_guard_log_open(guard_log, &st))) goto fail;
  }
  if (!cli_write_device(write_on, have_gpu && ms.loaded && !unconstrained, &write_gpu, &st)) goto fail;
  if (write_gpu && ms.loaded && !cli_model_use_gpu(&ms, &st)) {
    dg_status_prefix(&st, "--write cuda");
    goto fail;
  }
  train_decode_opts dopts;
  train_decode_opts_default(&dopts);
  dopts.sample.temperature = (float)temperature;
  dopts.sample.top_k = (int)top_k;
  dopts.sample.top_p = (float)top_p;
  dopts.sample.max_tokens = (int)max_tokens;
  dopts.unconstrained = unconstrained;
  dopts.restarts = (int)restarts;
  dopts.restart_temperature = (float)restart_temperature;
  dopts.explain = !no_explain && decode_explain;
  dopts.explain_after = !no_explain && !decode_explain;

  dg_str_printf(&report, "kernel   %s\n", hspec);
  if (ms.loaded)
    dg_str_printf(&report, "model    %s (%s, written on the %s)\n", ms.path,
                  unconstrained ? "unconstrained decoding"
                  : no_guard    ? "constrained decoding, no line guard"
                                : "constrained decoding, line guard",
                  write_gpu ? "GPU" : "CPU");
  else
    dg_str_printf(&report, "model    none\n");
  dg_str_printf(&report, "checks   %s\n",
                have_gpu ? gm.device : "C emulation of the GPU program on the CPU (not timed)");

  eval_pick_opts po = {f, hspec, have_gpu ? &gm : NULL, min_gain, (int)threads};
  int k = ms.loaded ? (int)samples : 0;
  char **texts = dg_calloc((size_t)(k ? k : 1), sizeof *texts);
  char *cur_prior = prior ? dg_strdup(prior) : NULL;
  for (int r = 0; r <= rounds; r++) {
    for (int i = 0; i < k; i++) {
      free(texts[i]);
      texts[i] = NULL;
    }
    if (k > 0)
      t_model += cli_model_write(&ms, f, hspec, kernel_text, cur_prior, k, &dopts,
                                 (uint64_t)seed + (uint64_t)r * (uint64_t)k, texts, &ws, &errs);
    if (have_pick) eval_pick_free(&pick);
    double t0 = dg_now();
    bool ok = eval_pick_best((const char *const *)texts, k, cur_prior, &po, &pick, &st);
    t_check += dg_now() - t0;
    have_pick = true;
    char kb[32];
    dg_str_printf(&report, "round %d  %s; kept %s\n", r + 1, pick.why, kind_name(&pick, kb, sizeof kb));
    for (int i = 0; i < pick.n_samples; i++)
      if (pick.scores[i].failed != EVAL_PASSED && texts[i])
        dg_str_printf(&errs, "  round %d sample %d: %s: %s\n", r + 1, i + 1,
                      eval_gate_name(pick.scores[i].failed), pick.scores[i].reason);
    if (pick.has_prior && pick.prior.failed != EVAL_PASSED)
      dg_str_printf(&errs, "  round %d prior: %s: %s\n", r + 1, eval_gate_name(pick.prior.failed),
                    pick.prior.reason);
    if (!ok) break;
    free(cur_prior);
    cur_prior = dg_strdup(pick.graph); /* the next round refines the kept graph */
    if (k == 0) break;                 /* nothing to sample: more rounds change nothing */
  }
  free(cur_prior);
  for (int i = 0; i < k; i++) free(texts[i]);
  free(texts);

  if (!pick.graph) {
    ret = cli_report("optimize", &st);
  } else {
    char kb[32];
    dg_str_printf(&report, "kept     %s\n", kind_name(&pick, kb, sizeof kb));
    if (pick.secs > 0) {
      dg_str_printf(&report, "time     %.2f us", pick.secs * 1e6);
      if (pick.baseline_secs > 0)
        dg_str_printf(&report, "; baseline %.2f us (%.2fx)", pick.baseline_secs * 1e6,
                      pick.baseline_secs / pick.secs);
      if (pick.prior_secs > 0)
        dg_str_printf(&report, "; prior %.2f us (%.2fx)", pick.prior_secs * 1e6,
                      pick.prior_secs / pick.secs);
      dg_str_puts(&report, "\n");
    } else {
      dg_str_puts(&report, "time     not measured (no GPU)\n");
    }
    dg_str_printf(&report, "spent    %.1f s: model %.1f s (%lld tokens, %.0f tokens/s), checks %.1f s\n",
                  dg_now() - t_start, t_model, (long long)ws.tokens,
                  t_model > 0 ? (double)ws.tokens / t_model : 0.0, t_check);
    if (ws.backtracks || ws.gave_up)
      dg_str_printf(&report, "guard    %lld lines taken back, %lld graphs written again from the start (%.1f s)%s\n",
                    (long long)ws.backtracks, (long long)ws.restarts, ws.guard_secs,
                    ws.gave_up ? "; the backtrack limit reached" : "");
  }
  if (errs.len) {
    dg_str_puts(&report, "notes\n");
    dg_str_puts(&report, errs.s);
  }
  fputs(report.s ? report.s : "", stderr);
  if (pick.graph) {
    fputs(pick.graph, stdout);
    if (out_dir) {
      if (!cli_out_dir(out_dir, &st)) {
        dg_status_prefix(&st, "--out");
        goto fail;
      }
      dg_status cst;
      char *src = cuda_source(f, pick.trace_json, have_gpu ? gm.arch : NULL, &cst);
      if (!src) {
        dg_str no;
        dg_str_init(&no);
        dg_str_printf(&no, "// no CUDA source: %s\n", cst.msg);
        src = dg_str_take(&no);
      }
      bool ok = cli_write_in(out_dir, "graph.tsel", pick.graph, &st) &&
                cli_write_in(out_dir, "trace.json", pick.trace_json, &st) &&
                cli_write_in(out_dir, "kernel.cu", src, &st) &&
                cli_write_in(out_dir, "report.txt", report.s, &st);
      free(src);
      if (!ok) goto fail;
    }
  }
  goto done;
fail:
  ret = cli_report("optimize", &st);
done:
  if (have_pick) eval_pick_free(&pick);
  if (have_gpu) search_cuda_measure_free(&gm);
  cli_model_close(&ms);
  free(hspec);
  free(prior);
  free(kernel_text);
  if (f) ir_func_free(f);
  dg_str_free(&report);
  dg_str_free(&errs);
  return ret;
}
