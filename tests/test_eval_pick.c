/* test_eval_pick.c: what `dragon optimize` keeps (src/eval/pick.c) and the
 * command itself. Planted bad graphs are stopped at their gates and the
 * first valid one is kept; with none valid the prior, then the untuned
 * baseline, is kept and the reason says so; a malformed prior is reported
 * with its place. The command falls back to the baseline without a model,
 * and with a (random) model writes graphs that all parse and type-check. */
#include <stdlib.h>
#include <string.h>

#include "dragon/eval.h"
#include "dragon/nn.h"
#include "dragon/search.h"
#include "dragon/tokenizer.h"
#include "dragon/tsel.h"
#include "dragon/wl.h"
#include "sched_support.h"
#include "test.h"

#define GMM "batch_matmul:b=1,n=128,m=128,k=128,dtype=f32"


static char *replace(const char *text, const char *from, const char *to) {
  const char *p = strstr(text, from);
  if (!p) return NULL;
  dg_str s;
  dg_str_init(&s);
  dg_str_putn(&s, text, (size_t)(p - text));
  dg_str_puts(&s, to);
  dg_str_puts(&s, p + strlen(from));
  return dg_str_take(&s);
}

/* Whether text is a graph that walks every CPU gate on f. */
static bool passes(const char *text, const dg_func *f) {
  eval_score_opts o;
  memset(&o, 0, sizeof o);
  o.kernel = f;
  o.spec = GMM;
  o.last = EVAL_GATE_NUMERIC;
  eval_score r;
  bool ok = eval_score_tsel(text, "kept", &o, &r);
  eval_score_free(&r);
  return ok;
}

DG_TEST(eval_pick_planted_bad_samples_stop_at_their_gates) {
  dg_status st;
  dg_func *f = wl_build(GMM, &st);
  CHECK_MSG(f, "%s", st.msg);
  char *good = ts_graph_of("schedules/GMM.json", GMM, f);
  char *big = ts_graph_of("tests/data/traces/gmm0_space.json", GMM, f);
  char *other = good ? replace(good, "n=128,", "n=64,") : NULL;
  CHECK(good && big && other);
  const char *samples[] = {
      "tsel 1 kernel " GMM "\nhello world\n", /* parse */
      other,                                  /* header */
      "tsel 1 kernel " GMM "\nt1 block \"Z\"\nt2 inline t1\n", /* replay */
      big,                                    /* build: past the shared memory */
      good,
      good,
  };
  eval_pick_opts o = {f, GMM, NULL, 0, 2};
  eval_pick p;
  CHECK_MSG(eval_pick_best(samples, 6, NULL, &o, &p, &st), "%s", st.msg);
  CHECK_EQ(p.n_samples, 6);
  CHECK_EQ(p.n_passed, 2);
  CHECK_EQ(p.failed_at[EVAL_GATE_PARSE], 1);
  CHECK_EQ(p.failed_at[EVAL_GATE_HEADER], 1);
  CHECK_EQ(p.failed_at[EVAL_GATE_REPLAY], 1);
  CHECK_EQ(p.failed_at[EVAL_GATE_BUILD], 1);
  CHECK_MSG(strstr(p.scores[0].reason, "sample 1:2:"), "%s", p.scores[0].reason);
  CHECK_MSG(strstr(p.scores[3].reason, "shared memory"), "%s", p.scores[3].reason);
  /* no GPU: the first that passed, not timed */
  CHECK_EQ(p.kind, EVAL_PICK_SAMPLE);
  CHECK_EQ(p.sample, 4);
  CHECK_STREQ(p.graph, good);
  CHECK(p.secs == 0 && p.baseline_secs == 0);
  CHECK_MSG(strstr(p.why, "2 of 6 samples passed") && strstr(p.why, "sample 5"), "%s", p.why);
  /* its trace is the graph's */
  sched_trace *tr = sched_trace_from_json(p.trace_json, &st);
  CHECK_MSG(tr, "%s", st.msg);
  sched_trace_free(tr);
  eval_pick_free(&p);
  free(good);
  free(big);
  free(other);
  ir_func_free(f);
}

DG_TEST(eval_pick_falls_back_to_prior_then_baseline) {
  dg_status st;
  dg_func *f = wl_build(GMM, &st);
  CHECK_MSG(f, "%s", st.msg);
  char *good = ts_graph_of("schedules/GMM.json", GMM, f);
  CHECK(good);
  const char *bad[] = {"tsel 1 kernel " GMM "\nt1 block \"nope\"\n", ""};
  eval_pick_opts o = {f, GMM, NULL, 0, 2};
  eval_pick p;
  /* a valid prior and no valid sample: the prior */
  CHECK_MSG(eval_pick_best(bad, 2, good, &o, &p, &st), "%s", st.msg);
  CHECK_EQ(p.kind, EVAL_PICK_PRIOR);
  CHECK_STREQ(p.graph, good);
  CHECK_EQ(p.n_passed, 0);
  CHECK(p.has_prior && p.prior.failed == EVAL_PASSED);
  CHECK_MSG(strstr(p.why, "the prior is kept"), "%s", p.why);
  eval_pick_free(&p);
  /* a malformed prior: reported where it breaks; the baseline is kept */
  char *broken = replace(good, "\nt2 ", "\nt2 nonsense ");
  CHECK(broken);
  CHECK_MSG(eval_pick_best(bad, 2, broken, &o, &p, &st), "%s", st.msg);
  CHECK_EQ(p.kind, EVAL_PICK_BASELINE);
  CHECK(p.prior.failed <= EVAL_GATE_CHECK);
  CHECK_MSG(strstr(p.prior.reason, "prior:3:"), "%s", p.prior.reason);
  CHECK_MSG(strstr(p.why, "the prior did not pass") && strstr(p.why, "baseline"), "%s", p.why);
  CHECK(passes(p.graph, f));
  CHECK(strncmp(p.graph, "tsel 1 kernel " GMM "\n", strlen("tsel 1 kernel " GMM "\n")) == 0);
  eval_pick_free(&p);
  /* no samples, no prior: the baseline */
  CHECK(eval_pick_best(NULL, 0, NULL, &o, &p, &st));
  CHECK_EQ(p.kind, EVAL_PICK_BASELINE);
  CHECK(passes(p.graph, f));
  eval_pick_free(&p);
  free(broken);
  free(good);
  ir_func_free(f);
}

/* The command without a model: the baseline, said so, exit 0; a prior
 * file that does not parse: named with its place, the baseline kept. */
DG_TEST(optimize_cli_without_model_keeps_baseline) {
  char *out = NULL;
  int rc = dg_test_run_dragon("optimize GMM/0 --target c --model /nonexistent/model", NULL, &out);
  CHECK_MSG(rc == 0, "rc %d: %s", rc, out);
  CHECK_MSG(strstr(out, "no model: --model /nonexistent/model") && strstr(out, "kept     the baseline") &&
                strstr(out, "tsel 1 kernel " GMM "\nt1 block \"Z\"\n"),
            "%s", out);
  free(out);
  char path[600];
  snprintf(path, sizeof path, "%s/bad_prior.tsel", dg_test_tmpdir());
  dg_status st;
  const char *prior = "tsel 1 kernel " GMM "\nt1 block \"Z\"\nt2 loops t1 x9\n";
  CHECK(dg_write_file_atomic(path, prior, strlen(prior), &st));
  char args[900];
  snprintf(args, sizeof args, "optimize GMM/0 --target c --samples 0 --prior %s", path);
  rc = dg_test_run_dragon(args, NULL, &out);
  CHECK_MSG(rc == 0, "rc %d: %s", rc, out);
  CHECK_MSG(strstr(out, "prior: check: prior:3:") && strstr(out, "kept     the baseline"), "%s", out);
  free(out);
  rc = dg_test_run_dragon("optimize GMM/0 --target cpu", NULL, &out);
  CHECK_MSG(rc != 0 && strstr(out, "--target cpu"), "rc %d: %s", rc, out);
  free(out);
  rc = dg_test_run_dragon("optimize gemm:m=0 --target c", NULL, &out);
  CHECK_MSG(rc != 0 && strstr(out, "m must be"), "rc %d: %s", rc, out);
  free(out);
}

/* A random model with a tokenizer trained on TSEL text, saved as a run
 * would save them: every graph it writes under the mask parses and
 * type-checks, so nothing is stopped before the lowering. */
DG_TEST(optimize_cli_random_model_graphs_all_check) {
  dg_status st;
  dg_str corpus;
  dg_str_init(&corpus);
  dg_func *f = wl_build(GMM, &st);
  CHECK(f);
  char *good = ts_graph_of("schedules/GMM.json", GMM, f);
  char *kt = ir_print(f);
  CHECK(good && kt);
  for (int i = 0; i < 20; i++) {
    dg_str_puts(&corpus, good);
    dg_str_puts(&corpus, kt);
  }
  tok_tokenizer *tok = tok_train(corpus.s, corpus.len, 600, NULL, &st);
  CHECK_MSG(tok, "%s", st.msg);
  dg_str_free(&corpus);
  int V = tok_vocab_size(tok);
  nn_config c = {V, 32, 1, 2, 2, 16, 64, 2048, 10000.0f, 1e-6f};
  nn_model m;
  CHECK_MSG(nn_model_init(&m, &c, false, &st), "%s", st.msg);
  dg_rng r;
  dg_rng_seed(&r, 5);
  for (size_t i = 0; i < m.num_params; i++) m.params_mem[i] = (float)(0.3 * dg_rng_normal(&r));
  char model[600], tokp[600];
  snprintf(model, sizeof model, "%s/model.bin", dg_test_tmpdir());
  snprintf(tokp, sizeof tokp, "%s/tokenizer.bin", dg_test_tmpdir());
  CHECK_MSG(nn_checkpoint_save(&m, model, &st), "%s", st.msg);
  CHECK_MSG(tok_save(tok, tokp, &st), "%s", st.msg);
  nn_model_free(&m);
  tok_free(tok);
  char args[1400], *out = NULL;
  snprintf(args, sizeof args, "optimize GMM/0 --target c --model %s --samples 3 --max-tokens 400 --out %s/opt",
           model, dg_test_tmpdir());
  int rc = dg_test_run_dragon(args, NULL, &out);
  CHECK_MSG(rc == 0, "rc %d: %s", rc, out);
  CHECK_MSG(strstr(out, "(constrained decoding)") && strstr(out, "round 1  "), "%s", out);
  /* every sample parsed, named the kernel and type-checked */
  CHECK_MSG(!strstr(out, ": parse: ") && !strstr(out, ": header: ") && !strstr(out, ": check: "), "%s", out);
  char path[800];
  snprintf(path, sizeof path, "%s/opt/graph.tsel", dg_test_tmpdir());
  char *kept = dg_read_file(path, NULL, &st);
  CHECK_MSG(kept && passes(kept, f), "%s", st.msg);
  free(kept);
  snprintf(path, sizeof path, "%s/opt/kernel.cu", dg_test_tmpdir());
  char *cu = dg_read_file(path, NULL, &st);
  CHECK_MSG(cu && strstr(cu, "__global__"), "%s", cu ? cu : st.msg);
  free(cu);
  free(out);
  free(good);
  free(kt);
  ir_func_free(f);
}
