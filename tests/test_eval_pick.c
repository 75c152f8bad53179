/* test_eval_pick.c: what `dragon optimize` keeps (src/eval/pick.c), the
 * command itself, and `dragon eval` (src/eval/run.c) on planted outputs
 * and with a model. Planted bad graphs are stopped at their gates and the
 * first valid one is kept; with none valid the prior, then the untuned
 * baseline, is kept and the reason says so; a malformed prior is reported
 * with its place. The command falls back to the baseline without a model,
 * and with a (random) model writes graphs that all parse and type-check. */
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "dragon/data.h"
#include "dragon/eval.h"
#include "dragon/nn.h"
#include "dragon/rt_cuda.h"
#include "dragon/search.h"
#include "dragon/tokenizer.h"
#include "dragon/train.h"
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
  rc = dg_test_run_dragon("optimize GMM/0 --target c --restart-temperature -1", NULL, &out);
  CHECK_MSG(rc == 2 && strstr(out, "--restart-temperature must be"), "rc %d: %s", rc, out);
  free(out);
  rc = dg_test_run_dragon("eval --target c --restart-temperature 1e9", NULL, &out);
  CHECK_MSG(rc == 2 && strstr(out, "--restart-temperature must be"), "rc %d: %s", rc, out);
  free(out);
  rc = dg_test_run_dragon("eval --target c --restarts 65", NULL, &out);
  CHECK_MSG(rc == 2 && strstr(out, "--restarts"), "rc %d: %s", rc, out);
  free(out);
}

/* A random model with a tokenizer trained on TSEL text, saved as a run
 * would save them: every graph it writes under the mask parses and
 * type-checks, so nothing is stopped before the lowering. */
/* A random model with a tokenizer trained on TSEL text and kernel text,
 * saved as a run would save them, in the test's directory: model.bin and
 * tokenizer.bin. */
static bool random_model_files(const dg_func *f, const char *graph, char *model, size_t n) {
  dg_status st;
  dg_str corpus;
  dg_str_init(&corpus);
  char *kt = ir_print(f);
  for (int i = 0; i < 20; i++) {
    dg_str_puts(&corpus, graph);
    dg_str_puts(&corpus, kt);
  }
  free(kt);
  tok_tokenizer *tok = tok_train(corpus.s, corpus.len, 600, NULL, &st);
  dg_str_free(&corpus);
  if (!tok) return false;
  nn_config c = {tok_vocab_size(tok), 32, 1, 2, 2, 16, 64, 2048, 10000.0f, 1e-6f};
  nn_model m;
  if (!nn_model_init(&m, &c, false, &st)) {
    tok_free(tok);
    return false;
  }
  dg_rng r;
  dg_rng_seed(&r, 5);
  for (size_t i = 0; i < m.num_params; i++) m.params_mem[i] = (float)(0.3 * dg_rng_normal(&r));
  char tokp[600];
  snprintf(model, n, "%s/model.bin", dg_test_tmpdir());
  snprintf(tokp, sizeof tokp, "%s/tokenizer.bin", dg_test_tmpdir());
  bool ok = nn_checkpoint_save(&m, model, &st) && tok_save(tok, tokp, &st);
  nn_model_free(&m);
  tok_free(tok);
  return ok;
}

/* A random model's graphs under the mask all parse and type-check, so
 * nothing is stopped before the lowering. */
DG_TEST(optimize_cli_random_model_graphs_all_check) {
  dg_status st;
  dg_func *f = wl_build(GMM, &st);
  CHECK(f);
  char *good = ts_graph_of("schedules/GMM.json", GMM, f);
  CHECK(good);
  char model[600];
  CHECK(random_model_files(f, good, model, sizeof model));
  char args[1400], *out = NULL;
  snprintf(args, sizeof args, "optimize GMM/0 --target c --model %s --samples 3 --max-tokens 400 --out %s/opt",
           model, dg_test_tmpdir());
  int rc = dg_test_run_dragon(args, NULL, &out);
  CHECK_MSG(rc == 0, "rc %d: %s", rc, out);
  CHECK_MSG(strstr(out, "(constrained decoding, line guard, written on the CPU)") && strstr(out, "round 1  "), "%s", out);
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
  ir_func_free(f);
}

/* `dragon train export --pack` writes a model directory that --model
 * reads (the same graphs as from the checkpoint: bf16 rounding aside, the
 * random model's greedy choices are far apart); a directory whose packed
 * model is corrupt is named in optimize's notes, and the baseline comes
 * back. */
DG_TEST(optimize_cli_exported_model_directory) {
  dg_status st;
  dg_func *f = wl_build(GMM, &st);
  CHECK(f);
  char *good = ts_graph_of("schedules/GMM.json", GMM, f);
  CHECK(good);
  char model[600];
  CHECK(random_model_files(f, good, model, sizeof model));
  char args[1600], *out = NULL;
  snprintf(args, sizeof args, "train export --model %s --out %s/exported --pack", model, dg_test_tmpdir());
  int rc = dg_test_run_dragon(args, NULL, &out);
  CHECK_MSG(rc == 0 && strstr(out, "model.safetensors.zst") && strstr(out, "bf16"), "rc %d: %s", rc, out);
  free(out);
  snprintf(args, sizeof args,
           "optimize GMM/0 --target c --model %s/exported --samples 1 --max-tokens 300 --out %s/opt_exp",
           dg_test_tmpdir(), dg_test_tmpdir());
  rc = dg_test_run_dragon(args, NULL, &out);
  CHECK_MSG(rc == 0 && strstr(out, "exported/model.safetensors.zst (constrained decoding"), "rc %d: %s", rc,
            out);
  free(out);
  /* the packed model, damaged */
  char path[800];
  snprintf(path, sizeof path, "%s/exported/model.safetensors.zst", dg_test_tmpdir());
  size_t n;
  char *bytes = dg_read_file(path, &n, &st);
  CHECK(bytes && n > 100);
  CHECK(dg_write_file_atomic(path, bytes, n / 3, &st));
  free(bytes);
  snprintf(args, sizeof args, "optimize GMM/0 --target c --model %s/exported --samples 1", dg_test_tmpdir());
  rc = dg_test_run_dragon(args, NULL, &out);
  CHECK_MSG(rc == 0 && strstr(out, "no model: ") && strstr(out, "model.safetensors.zst") &&
                strstr(out, "kept     the baseline"),
            "rc %d: %s", rc, out);
  free(out);
  free(good);
  ir_func_free(f);
}

/* Three small test-split workloads */
#define W1 "softmax:m=3,n=4,dtype=f32"
#define W2 "gemv:n=2,k=8,dtype=f32"
#define W3 "reduce_sum:m=7,n=2,dtype=f16"

/* The untuned baseline of f as a graph (caller frees), NULL if it cannot
 * be made. */
static char *baseline_graph(const dg_func *f, const char *spec) {
  dg_status st;
  sched *bs = NULL;
  if (!search_baseline_schedule(f, NULL, &bs, &st)) return NULL;
  tsel_graph *g = tsel_lift(sched_get_trace(bs), spec, f, NULL, &st);
  char *text = g ? tsel_print(g) : NULL;
  tsel_graph_free(g);
  sched_free(bs);
  return text;
}

/* --no-numbers: the build gate is the last (the note says so, and the
 * tasks file names another evaluation). */
DG_TEST(eval_cli_no_numbers_stops_at_the_build) {
  dg_status st;
  dg_func *f1 = wl_build(W1, &st);
  CHECK(f1);
  char *g1 = baseline_graph(f1, W1);
  CHECK(g1);
  json_t *a = json_pack("{s:s, s:s}", "workload", W1, "graph", g1);
  char *la = json_dumps(a, JSON_COMPACT);
  char path[600], args[1600], out_dir[700];
  snprintf(path, sizeof path, "%s/graphs_nn.jsonl", dg_test_tmpdir());
  snprintf(out_dir, sizeof out_dir, "%s/ev_nn", dg_test_tmpdir());
  dg_str file;
  dg_str_init(&file);
  dg_str_printf(&file, "%s\n", la);
  CHECK(dg_write_file_atomic(path, file.s, file.len, &st));
  snprintf(args, sizeof args, "eval --workloads '%s' --graphs %s --target c --out %s --quiet --no-numbers",
           W1, path, out_dir);
  char *out = NULL;
  int rc = dg_test_run_dragon(args, NULL, &out);
  CHECK_MSG(rc == 0 && strstr(out, "stopped after the build gate") && strstr(out, "1 tasks"),
            "rc %d: %s", rc, out);
  free(out);
  char tpath[800];
  snprintf(tpath, sizeof tpath, "%s/test.tasks.jsonl", out_dir);
  char *t = dg_read_file(tpath, NULL, &st);
  CHECK(t && strstr(t, "gates=build"));
  free(t);
  dg_str_free(&file);
  free(la);
  json_decref(a);
  free(g1);
  ir_func_free(f1);
}

/* dragon eval on planted outputs: a correct graph counts as correct, a
 * graph for another workload fails at the header, a missing one at the
 * parse gate; the JSON and the table say so. Training workloads and the
 * train split are refused. */
DG_TEST(eval_cli_planted_outputs_counted) {
  dg_status st;
  dg_func *f1 = wl_build(W1, &st);
  CHECK(f1);
  char *g1 = baseline_graph(f1, W1);
  CHECK(g1);
  json_t *a = json_pack("{s:s, s:s}", "workload", W1, "graph", g1);
  json_t *b = json_pack("{s:s, s:s}", "workload", W2, "graph", g1);
  char *la = json_dumps(a, JSON_COMPACT), *lb = json_dumps(b, JSON_COMPACT);
  dg_str file;
  dg_str_init(&file);
  dg_str_printf(&file, "%s\n%s\n", la, lb);
  char path[600], args[1600], out_dir[700];
  snprintf(path, sizeof path, "%s/graphs.jsonl", dg_test_tmpdir());
  snprintf(out_dir, sizeof out_dir, "%s/ev", dg_test_tmpdir());
  CHECK(dg_write_file_atomic(path, file.s, file.len, &st));
  snprintf(args, sizeof args, "eval --workloads '%s;%s;%s' --graphs %s --target c --out %s --quiet",
           W1, W2, W3, path, out_dir);
  char *out = NULL;
  int rc = dg_test_run_dragon(args, NULL, &out);
  CHECK_MSG(rc == 0, "rc %d: %s", rc, out);
  CHECK_MSG(strstr(out, "3 tasks, Correct@1 1 (33.3%)") && strstr(out, "| softmax | 1 | 100.0% |") &&
                strstr(out, "| gemv | 1 | 0.0% |") && strstr(out, "Failed at: parse 1, header 1"),
            "%s", out);
  free(out);
  char jpath[800];
  snprintf(jpath, sizeof jpath, "%s/test.json", out_dir);
  json_error_t je;
  json_t *j = json_load_file(jpath, 0, &je);
  CHECK_MSG(j, "%s", je.text);
  CHECK_EQ(json_integer_value(json_object_get(j, "correct")), 1);
  json_t *tasks = json_object_get(j, "tasks");
  CHECK_EQ(json_array_size(tasks), 3);
  const char *want[] = {"passed", "header", "parse"};
  for (size_t i = 0; i < 3; i++) {
    json_t *t = json_array_get(tasks, i);
    CHECK_STREQ(json_string_value(json_object_get(t, "gate")), want[i]);
    CHECK_EQ(json_is_true(json_object_get(t, "correct")), i == 0);
    /* the output as written is kept, where there was one */
    const char *gw = json_string_value(json_object_get(t, "graph"));
    if (i < 2) CHECK_MSG(gw && strcmp(gw, g1) == 0, "task %zu: graph %s", i, gw ? gw : "(none)");
    else CHECK(gw == NULL);
  }
  json_decref(j);
  /* the plot, where gnuplot is (scripts/setup.sh installs it) */
  if (system("command -v gnuplot >/dev/null 2>&1") == 0) {
    static const char *const plots[] = {"test.png", "test.svg", "test.plot.tsv"};
    for (size_t i = 0; i < DG_ARRAY_LEN(plots); i++) {
      char pp[900];
      snprintf(pp, sizeof pp, "%s/%s", out_dir, plots[i]);
      size_t pn = 0;
      char *pb = dg_read_file(pp, &pn, &st);
      CHECK_MSG(pb && pn > 50, "%s: %s", pp, pb ? "too short" : st.msg);
      if (i == 2) CHECK(strstr(pb, "fam\t0\tsoftmax\t1.0000\t1") && strstr(pb, "fam\t1\tgemv\t0.0000\t1"));
      free(pb);
    }
  }
  /* resuming: the run stopped after its first task (and in the middle of
   * writing the second's line) resumes to the same outcomes; another
   * evaluation's file is refused */
  char tpath[800];
  snprintf(tpath, sizeof tpath, "%s/test.tasks.jsonl", out_dir);
  size_t tn;
  char *tasks_text = dg_read_file(tpath, &tn, &st);
  CHECK_MSG(tasks_text, "%s", st.msg);
  char *second = strchr(tasks_text, '\n');
  CHECK(second && strchr(second + 1, '\n'));
  size_t cut = (size_t)(second + 1 - tasks_text) + 20; /* the first line, part of the second */
  CHECK(dg_write_file_atomic(tpath, tasks_text, cut, &st));
  snprintf(args, sizeof args, "eval --workloads '%s;%s;%s' --graphs %s --target c --out %s --resume", W1, W2, W3,
           path, out_dir);
  rc = dg_test_run_dragon(args, NULL, &out);
  CHECK_MSG(rc == 0 && strstr(out, "resuming: 1 of 3 tasks") && strstr(out, "(resumed)") &&
                strstr(out, "3 tasks, Correct@1 1 (33.3%)") && strstr(out, "Failed at: parse 1, header 1"),
            "rc %d: %s", rc, out);
  free(out);
  j = json_load_file(jpath, 0, &je);
  CHECK_MSG(j, "%s", je.text);
  { /* the resumed task's graph came back from the tasks file */
    const char *gw = json_string_value(json_object_get(json_array_get(json_object_get(j, "tasks"), 0), "graph"));
    CHECK_MSG(gw && strcmp(gw, g1) == 0, "resumed graph %s", gw ? gw : "(none)");
  }
  json_decref(j);
  snprintf(args, sizeof args, "eval --workloads '%s;%s;%s' --graphs %s --target c --out %s --resume --seed 9", W1,
           W2, W3, path, out_dir);
  rc = dg_test_run_dragon(args, NULL, &out);
  CHECK_MSG(rc == 2 && strstr(out, "test.tasks.jsonl:1: written by another evaluation"), "rc %d: %s", rc, out);
  free(out);
  free(tasks_text);
  /* the model is never judged on what it trained on */
  const char *train = NULL;
  data_splits *sp = data_splits_load(DATA_SPLIT_FILE, &st);
  CHECK_MSG(sp, "%s", st.msg);
  train = data_splits_at(sp, data_splits_next(sp, DATA_SPLIT_TRAIN, 0))->spec;
  snprintf(args, sizeof args, "eval --workloads '%s' --graphs %s --target c --out %s", train, path, out_dir);
  rc = dg_test_run_dragon(args, NULL, &out);
  CHECK_MSG(rc != 0 && strstr(out, "is a training workload"), "rc %d: %s", rc, out);
  free(out);
  rc = dg_test_run_dragon("eval --split train --target c", NULL, &out);
  CHECK_MSG(rc != 0 && strstr(out, "the model trained on it"), "rc %d: %s", rc, out);
  free(out);
  data_splits_free(sp);
  json_decref(a);
  json_decref(b);
  free(la);
  free(lb);
  dg_str_free(&file);
  free(g1);
  ir_func_free(f1);
}

/* Against the search: a timed result whose tasks carry their labels'
 * times gives each family's median speed against the search over the
 * labelled tasks that passed (a failed output counts as labelled, not as
 * near), the share at least 0.9x, and the same numbers in the JSON. */
DG_TEST(eval_table_reads_the_outputs_against_the_labels) {
  eval_task t[5];
  memset(t, 0, sizeof t);
  const char *fam[] = {"gemm", "gemm", "gemm", "softmax", "softmax"};
  /* gemm: 0.5x, 1.0x, failed; softmax: 2.0x, unlabelled */
  const double secs[] = {2e-6, 1e-6, 0, 1e-6, 1e-6}, label[] = {1e-6, 1e-6, 1e-6, 2e-6, 0};
  for (int i = 0; i < 5; i++) {
    t[i].spec = (char *)"w";
    snprintf(t[i].family, sizeof t[i].family, "%s", fam[i]);
    t[i].gate = secs[i] > 0 ? EVAL_PASSED : EVAL_GATE_NUMERIC;
    t[i].secs = secs[i];
    t[i].baseline_secs = 4e-6;
    t[i].label_secs = label[i];
  }
  eval_result r = {t, 5, true, 4, 4, 0, 1.0};
  CHECK(eval_task_vs_label(&t[0]) == 0.5 && eval_task_vs_label(&t[2]) == 0 && eval_task_vs_label(&t[4]) == 0);
  char *table = eval_result_table(&r, "m", "test");
  CHECK_MSG(strstr(table, "on 4 labelled tasks: median 1.00x over the 3 correct; 2 (50.0%) correct and at "
                          "least 0.9x") &&
                strstr(table, "| vs search (labelled) |") && strstr(table, "| gemm | 3 | 66.7% |") &&
                strstr(table, "| 0.71x (3) |") && strstr(table, "| 2.00x (1) |") &&
                strstr(table, "| **all** | 5 | 80.0% |"),
            "%s", table);
  free(table);
  char *json = eval_result_json(&r, "m", "test", 1, 0);
  json_error_t je;
  json_t *j = json_loads(json, 0, &je);
  CHECK_MSG(j, "%s", je.text);
  CHECK_EQ(json_integer_value(json_object_get(j, "labelled")), 4);
  CHECK_EQ(json_integer_value(json_object_get(j, "vs_label_0.9")), 2);
  CHECK(json_real_value(json_object_get(j, "vs_label_median")) == 1.0);
  json_t *t0 = json_array_get(json_object_get(j, "tasks"), 0);
  CHECK(json_real_value(json_object_get(t0, "vs_label")) == 0.5);
  CHECK(!json_object_get(json_array_get(json_object_get(j, "tasks"), 4), "label_secs"));
  json_decref(j);
  free(json);
  /* untimed (the C emulation): no column, however the tasks are labelled */
  r.timed = false;
  table = eval_result_table(&r, "m", "test");
  CHECK_MSG(!strstr(table, "vs search") && !strstr(table, "Against the search"), "%s", table);
  free(table);
}

/* Refinement tasks read against their priors: faster counts the outputs
 * correct and at least EVAL_REFINE_GAIN times faster than their prior
 * (an output as fast as its prior is not), 2x the prior those at least
 * twice as fast, in the table and the JSON. */
DG_TEST(eval_table_reads_refinements_against_their_priors) {
  eval_task t[4];
  memset(t, 0, sizeof t);
  /* 1.02x (not faster), 1.5x, 3x, failed */
  const double secs[] = {1e-6, 1e-6, 1e-6, 0}, prior[] = {1.02e-6, 1.5e-6, 3e-6, 2e-6};
  for (int i = 0; i < 4; i++) {
    t[i].spec = (char *)"w";
    t[i].name = (char *)"refine/1/0";
    snprintf(t[i].family, sizeof t[i].family, "gemm");
    t[i].gate = secs[i] > 0 ? EVAL_PASSED : EVAL_GATE_NUMERIC;
    t[i].secs = secs[i];
    t[i].baseline_secs = 4e-6;
    t[i].prior_secs = prior[i];
  }
  eval_result r = {t, 4, true, true, 3, 3, 0, 2, 1, 1.0};
  CHECK(eval_task_vs_prior(&t[2]) == 3.0 && eval_task_vs_prior(&t[3]) == 0);
  char *table = eval_result_table(&r, "m", "test");
  CHECK_MSG(strstr(table, "4 refinement tasks, Correct@1 3 (75.0%)") &&
                strstr(table, "2 (50.0%) correct and at least 1.03x faster than their prior, 1 (25.0%) at least 2x") &&
                strstr(table, "| faster than the prior | 2x the prior | fast_2 |") &&
                strstr(table, "| gemm | 4 | 75.0% | 50.0% | 25.0% | 75.0% |"),
            "%s", table);
  free(table);
  char *json = eval_result_json(&r, "m", "test", 1, 0);
  json_t *j = json_loads(json, 0, NULL);
  CHECK(j);
  CHECK_STREQ(json_string_value(json_object_get(j, "tasks_kind")), "refine");
  CHECK_EQ(json_integer_value(json_object_get(j, "faster")), 2);
  json_t *t1 = json_array_get(json_object_get(j, "tasks"), 1);
  CHECK(json_real_value(json_object_get(t1, "vs_prior")) == 1.5);
  CHECK_STREQ(json_string_value(json_object_get(t1, "task")), "refine/1/0");
  json_decref(j);
  free(json);
}

/* Writes one {workload, graph} line a pair into path (graph NULL: none). */
static void graphs_file(const char *path, const char *const *w, const char *const *g, int n) {
  dg_str file;
  dg_str_init(&file);
  for (int i = 0; i < n; i++) {
    if (!g[i]) continue;
    json_t *a = json_pack("{s:s, s:s}", "workload", w[i], "graph", g[i]);
    char *l = json_dumps(a, JSON_COMPACT);
    dg_str_printf(&file, "%s\n", l);
    free(l);
    json_decref(a);
  }
  dg_status st;
  size_t len = strlen(path);
  if (len > 4 && strcmp(path + len - 4, ".zst") == 0) { /* written as `zstd` packs it */
    dg_str z;
    dg_str_init(&z);
    CHECK_MSG(dg_zstd_pack(file.s, file.len, 3, &z, &st), "%s", st.msg);
    dg_str_free(&file);
    file = z;
  }
  CHECK_MSG(dg_write_file_atomic(path, file.s, file.len, &st), "%s", st.msg);
  dg_str_free(&file);
}

/* --against: another writer's outputs (here another evaluation's tasks
 * file) judged beside this one's: the tasks where either is correct, and
 * those where only this one is; in the JSON, the table and after a resume.
 * A line that is not an output is refused naming the file and line. The
 * first --graphs file is zstd-packed: read as the plain one. */
DG_TEST(eval_cli_against_another_writer) {
  dg_status st;
  const char *w[] = {W1, W2, W3};
  dg_func *f[3];
  char *g[3];
  for (int i = 0; i < 3; i++) {
    f[i] = wl_build(w[i], &st);
    CHECK(f[i]);
    g[i] = f[i] ? baseline_graph(f[i], w[i]) : NULL;
    CHECK(g[i]);
  }
  if (!g[0] || !g[1] || !g[2]) return;
  /* this writer: W1 right, W2 W1's graph (wrong), W3 right; the other:
   * W1 W3's graph (wrong), W2 right, W3 none */
  const char *mine[] = {g[0], g[0], g[2]}, *other[] = {g[2], g[1], NULL};
  char pa[600], pb[600], pz[600], out_a[700], out_b[700], args[3000];
  snprintf(pa, sizeof pa, "%s/against_a.jsonl", dg_test_tmpdir());
  snprintf(pb, sizeof pb, "%s/against_b.jsonl", dg_test_tmpdir());
  snprintf(pz, sizeof pz, "%s/against_b.jsonl.zst", dg_test_tmpdir());
  snprintf(out_a, sizeof out_a, "%s/ev_against_a", dg_test_tmpdir());
  snprintf(out_b, sizeof out_b, "%s/ev_against_b", dg_test_tmpdir());
  graphs_file(pa, w, mine, 3);
  graphs_file(pb, w, other, 3);
  graphs_file(pz, w, other, 3);
  char *out = NULL;
  snprintf(args, sizeof args, "eval --workloads '%s;%s;%s' --graphs %s --target c --out %s --quiet", W1, W2, W3,
           pz, out_b);
  int rc = dg_test_run_dragon(args, NULL, &out);
  CHECK_MSG(rc == 0 && strstr(out, "3 tasks, Correct@1 1 (33.3%)"), "rc %d: %s", rc, out);
  free(out);
  snprintf(args, sizeof args,
           "eval --workloads '%s;%s;%s' --graphs %s --against %s/test.tasks.jsonl --target c --out %s --quiet", W1,
           W2, W3, pa, out_b, out_a);
  rc = dg_test_run_dragon(args, NULL, &out);
  CHECK_MSG(rc == 0 && strstr(out, "3 tasks, Correct@1 2 (66.7%)") &&
                strstr(out, "of the 3 tasks where either is correct (of 3 with both outputs), this one is correct "
                            "and the other not on 2"),
            "rc %d: %s", rc, out);
  free(out);
  char jpath[800];
  snprintf(jpath, sizeof jpath, "%s/test.json", out_a);
  json_error_t je;
  for (int pass = 0; pass < 2; pass++) {
    json_t *j = json_load_file(jpath, 0, &je);
    CHECK_MSG(j, "%s", je.text);
    if (!j) break;
    CHECK_EQ(json_integer_value(json_object_get(j, "against_n")), 3);
    CHECK_EQ(json_integer_value(json_object_get(j, "against_either")), 3);
    CHECK_EQ(json_integer_value(json_object_get(j, "against_only")), 2);
    const char *want[] = {"header", "passed", "parse"};
    for (size_t i = 0; i < 3; i++)
      CHECK_STREQ(json_string_value(json_object_get(json_array_get(json_object_get(j, "tasks"), i), "against_gate")),
                  want[i]);
    json_decref(j);
    if (pass == 1) break;
    /* resumed after its first task: the other's outcome comes back from the tasks file */
    char tpath[800];
    snprintf(tpath, sizeof tpath, "%s/test.tasks.jsonl", out_a);
    size_t tn;
    char *text = dg_read_file(tpath, &tn, &st);
    CHECK_MSG(text && strchr(text, '\n'), "%s", st.msg);
    if (!text) break;
    CHECK(dg_write_file_atomic(tpath, text, (size_t)(strchr(text, '\n') + 1 - text), &st));
    free(text);
    snprintf(args, sizeof args,
             "eval --workloads '%s;%s;%s' --graphs %s --against %s/test.tasks.jsonl --target c --out %s --resume",
             W1, W2, W3, pa, out_b, out_a);
    rc = dg_test_run_dragon(args, NULL, &out);
    CHECK_MSG(rc == 0 && strstr(out, "resuming: 1 of 3 tasks") && strstr(out, "this one is correct and the other not on 2"),
              "rc %d: %s", rc, out);
    free(out);
  }
  /* a line that is not an output */
  static const char bad[] = "{\"workload\": \"" W1 "\", \"graph\": 7}\n";
  CHECK(dg_write_file_atomic(pb, bad, strlen(bad), &st));
  snprintf(args, sizeof args, "eval --workloads '%s' --graphs %s --against %s --target c --out %s --quiet", W1, pa,
           pb, out_a);
  rc = dg_test_run_dragon(args, NULL, &out);
  CHECK_MSG(rc != 0 && strstr(out, "against_b.jsonl:1"), "rc %d: %s", rc, out);
  free(out);
  for (int i = 0; i < 3; i++) {
    free(g[i]);
    ir_func_free(f[i]);
  }
}

/* --refine: each refinement example of the tasks' workloads is a task
 * named as the example (a workload with two priors is two tasks, a
 * workload not among the tasks none); its files are SPLIT.refine.*; an
 * interrupted run resumes by task name; a refinement line without its
 * prior is refused with its place; with no example of the tasks'
 * workloads there is no task. */
DG_TEST(eval_cli_refine_tasks) {
  dg_status st;
  dg_func *f1 = wl_build(W1, &st);
  CHECK(f1);
  char *g1 = baseline_graph(f1, W1);
  CHECK(g1);
  char path[600], bad[600], graphs[600], args[2400], out_dir[700], tpath[800];
  snprintf(path, sizeof path, "%s/refine.jsonl", dg_test_tmpdir());
  snprintf(bad, sizeof bad, "%s/refine_bad.jsonl", dg_test_tmpdir());
  snprintf(graphs, sizeof graphs, "%s/refine_graphs.jsonl", dg_test_tmpdir());
  snprintf(out_dir, sizeof out_dir, "%s/evr", dg_test_tmpdir());
  dg_str lines;
  dg_str_init(&lines);
  dg_str_printf(&lines,
                "{\"task\":\"construct/1\",\"kind\":\"construct\",\"workload\":\"" W1 "\",\"target\":\"tsel 1\"}\n"
                "{\"task\":\"refine/1/0\",\"kind\":\"refine\",\"workload\":\"" W1 "\",\"prior\":\"p0\",\"target\":\"t\"}\n"
                "{\"task\":\"refine/2/0\",\"kind\":\"refine\",\"workload\":\"" W3 "\",\"prior\":\"p\",\"target\":\"t\"}\n"
                "{\"task\":\"refine/1/1\",\"kind\":\"refine\",\"workload\":\"" W1 "\",\"prior\":\"p1\",\"target\":\"t\"}\n");
  CHECK(dg_write_file_atomic(path, lines.s, lines.len, &st));
  const char *bad_lines = "{\"task\":\"refine/1/0\",\"kind\":\"refine\",\"workload\":\"w\",\"target\":\"t\"}\n";
  CHECK(dg_write_file_atomic(bad, bad_lines, strlen(bad_lines), &st));
  json_t *a = json_pack("{s:s, s:s}", "workload", W1, "graph", g1);
  char *la = json_dumps(a, JSON_COMPACT);
  dg_str gl;
  dg_str_init(&gl);
  dg_str_printf(&gl, "%s\n", la);
  CHECK(dg_write_file_atomic(graphs, gl.s, gl.len, &st));
  char *out = NULL;
  snprintf(args, sizeof args, "eval --workloads '%s;%s' --graphs %s --labels %s --refine --target c --out %s", W1, W2,
           graphs, path, out_dir);
  int rc = dg_test_run_dragon(args, NULL, &out);
  CHECK_MSG(rc == 0 && strstr(out, "2 refinement tasks, Correct@1 2 (100.0%)") && strstr(out, "refine/1/1") &&
                !strstr(out, "refine/2/0"),
            "rc %d: %s", rc, out);
  free(out);
  char jpath[800];
  snprintf(jpath, sizeof jpath, "%s/test.refine.json", out_dir);
  json_t *j = json_load_file(jpath, 0, NULL);
  CHECK_MSG(j, "no %s", jpath);
  CHECK_STREQ(json_string_value(json_object_get(j, "tasks_kind")), "refine");
  CHECK_STREQ(json_string_value(json_object_get(json_array_get(json_object_get(j, "tasks"), 1), "task")), "refine/1/1");
  json_decref(j);
  /* resumed after its first task, by name */
  snprintf(tpath, sizeof tpath, "%s/test.refine.tasks.jsonl", out_dir);
  size_t tn;
  char *tasks_text = dg_read_file(tpath, &tn, &st);
  CHECK_MSG(tasks_text, "%s", st.msg);
  char *second = strchr(tasks_text, '\n');
  CHECK(second);
  CHECK(dg_write_file_atomic(tpath, tasks_text, (size_t)(second + 1 - tasks_text), &st));
  free(tasks_text);
  snprintf(args, sizeof args, "eval --workloads '%s;%s' --graphs %s --labels %s --refine --target c --out %s --resume",
           W1, W2, graphs, path, out_dir);
  rc = dg_test_run_dragon(args, NULL, &out);
  CHECK_MSG(rc == 0 && strstr(out, "resuming: 1 of 2 tasks") && strstr(out, "refine/1/0  passed (resumed)") &&
                strstr(out, "2 refinement tasks, Correct@1 2"),
            "rc %d: %s", rc, out);
  free(out);
  snprintf(args, sizeof args, "eval --workloads '%s' --graphs %s --labels %s --refine --target c --out %s", W1, graphs,
           bad, out_dir);
  rc = dg_test_run_dragon(args, NULL, &out);
  CHECK_MSG(rc != 0 && strstr(out, "refine_bad.jsonl:1:1: not an example"), "rc %d: %s", rc, out);
  free(out);
  snprintf(args, sizeof args, "eval --workloads '%s' --graphs %s --labels %s --refine --target c --out %s", W2, graphs,
           path, out_dir);
  rc = dg_test_run_dragon(args, NULL, &out);
  CHECK_MSG(rc == 2 && strstr(out, "no refinement example of its workloads"), "rc %d: %s", rc, out);
  free(out);
  json_decref(a);
  free(la);
  dg_str_free(&gl);
  dg_str_free(&lines);
  free(g1);
  ir_func_free(f1);
}

/* --labels: a split's construction examples label its tasks (refinement
 * lines passed over); --labelled keeps only the labelled tasks; a line
 * that is not an example is refused with its place; --labelled without
 * labels is a usage error. */
DG_TEST(eval_cli_labels) {
  char path[600], bad[600], graphs[600], args[2400], out_dir[700];
  dg_status st;
  snprintf(path, sizeof path, "%s/labels.jsonl", dg_test_tmpdir());
  snprintf(bad, sizeof bad, "%s/labels_bad.jsonl", dg_test_tmpdir());
  snprintf(graphs, sizeof graphs, "%s/none.jsonl", dg_test_tmpdir());
  snprintf(out_dir, sizeof out_dir, "%s/evl", dg_test_tmpdir());
  const char *lines = "{\"kind\":\"construct\",\"workload\":\"" W2 "\",\"target\":\"tsel 1\"}\n"
                      "{\"kind\":\"refine\",\"task\":\"refine/3/0\",\"workload\":\"" W3
                      "\",\"prior\":\"tsel 1\",\"target\":\"tsel 1\"}\n";
  CHECK(dg_write_file_atomic(path, lines, strlen(lines), &st));
  const char *bad_lines = "\n{\"kind\":\"construct\"}\n";
  CHECK(dg_write_file_atomic(bad, bad_lines, strlen(bad_lines), &st));
  CHECK(dg_write_file_atomic(graphs, "\n", 1, &st));
  char *out = NULL;
  snprintf(args, sizeof args, "eval --workloads '%s;%s;%s' --graphs %s --labels %s --labelled --target c --out %s",
           W1, W2, W3, graphs, path, out_dir);
  int rc = dg_test_run_dragon(args, NULL, &out);
  CHECK_MSG(rc == 0 && strstr(out, "1 of the 1 tasks have one") && strstr(out, ": 1 tasks,") &&
                strstr(out, "| gemv | 1 |") && !strstr(out, "| softmax"),
            "rc %d: %s", rc, out);
  free(out);
  snprintf(args, sizeof args, "eval --workloads '%s;%s' --graphs %s --labels %s --target c --out %s", W1, W2, graphs,
           path, out_dir);
  rc = dg_test_run_dragon(args, NULL, &out);
  CHECK_MSG(rc == 0 && strstr(out, "1 of the 2 tasks have one") && strstr(out, ": 2 tasks,"), "rc %d: %s", rc, out);
  free(out);
  snprintf(args, sizeof args, "eval --workloads '%s' --graphs %s --labels %s --target c --out %s", W1, graphs, bad,
           out_dir);
  rc = dg_test_run_dragon(args, NULL, &out);
  CHECK_MSG(rc != 0 && strstr(out, "labels_bad.jsonl:2:1: not an example"), "rc %d: %s", rc, out);
  free(out);
  snprintf(args, sizeof args, "eval --workloads '%s' --graphs %s --labels none --labelled --target c --out %s", W1,
           graphs, out_dir);
  rc = dg_test_run_dragon(args, NULL, &out);
  CHECK_MSG(rc == 2 && strstr(out, "--labelled: no examples"), "rc %d: %s", rc, out);
  free(out);
  snprintf(args, sizeof args, "eval --workloads '%s' --graphs %s --labels %s --labelled --target c --out %s", W1,
           graphs, path, out_dir);
  rc = dg_test_run_dragon(args, NULL, &out);
  CHECK_MSG(rc == 2 && strstr(out, "none has a label"), "rc %d: %s", rc, out);
  free(out);
}

/* dragon eval end to end with a (random) model on the C emulation: every
 * task judged, its tokens counted, the files written. */
/* --max-work leaves out the split's workloads whose float64 reference is
 * larger, as labelling defers them: the tasks judged are the first N
 * under the limit, and the count left out stands beside the table. */
DG_TEST(eval_cli_max_work_leaves_out_large_workloads) {
  char path[600], args[1600], out_dir[700];
  dg_status st;
  snprintf(path, sizeof path, "%s/none.jsonl", dg_test_tmpdir());
  snprintf(out_dir, sizeof out_dir, "%s/evw", dg_test_tmpdir());
  CHECK(dg_write_file_atomic(path, "\n", 1, &st));
  snprintf(args, sizeof args, "eval --split test --limit 4 --max-work 1e7 --graphs %s --target c --out %s --quiet",
           path, out_dir);
  char *out = NULL;
  int rc = dg_test_run_dragon(args, NULL, &out);
  CHECK_MSG(rc == 0, "rc %d: %s", rc, out);
  const char *left = strstr(out, "Left out: ");
  CHECK_MSG(strstr(out, "4 tasks") && left && atoi(left + 10) > 0, "%s", out);
  free(out);
  char jpath[800];
  snprintf(jpath, sizeof jpath, "%s/test.json", out_dir);
  json_error_t je;
  json_t *j = json_load_file(jpath, 0, &je);
  CHECK_MSG(j, "%s", je.text);
  json_t *tasks = json_object_get(j, "tasks");
  CHECK_EQ(json_array_size(tasks), 4);
  for (size_t i = 0; i < 4; i++) {
    const char *w = json_string_value(json_object_get(json_array_get(tasks, i), "workload"));
    dg_func *f = w ? wl_build(w, &st) : NULL;
    CHECK_MSG(f && data_label_work(f) <= 1e7, "%s", w ? w : "(no workload)");
    ir_func_free(f);
  }
  json_decref(j);
  /* 0: nothing left out */
  snprintf(args, sizeof args, "eval --split test --limit 2 --max-work 0 --graphs %s --target c --out %s --quiet",
           path, out_dir);
  rc = dg_test_run_dragon(args, NULL, &out);
  CHECK_MSG(rc == 0 && strstr(out, "2 tasks") && !strstr(out, "Left out"), "rc %d: %s", rc, out);
  free(out);
}

DG_TEST(eval_cli_random_model_end_to_end) {
  dg_status st;
  dg_func *f = wl_build(GMM, &st);
  CHECK(f);
  char *good = ts_graph_of("schedules/GMM.json", GMM, f);
  CHECK(good);
  char model[600];
  CHECK(random_model_files(f, good, model, sizeof model));
  char args[1600], *out = NULL;
  snprintf(args, sizeof args,
           "eval --workloads '%s;%s;%s' --model %s --max-tokens 300 --target c --threads 1 --out %s/ev2 --quiet",
           W1, W2, W3, model, dg_test_tmpdir());
  int rc = dg_test_run_dragon(args, NULL, &out);
  CHECK_MSG(rc == 0 && strstr(out, "model.bin on test: 3 tasks"), "rc %d: %s", rc, out);
  free(out);
  /* written three at once: the same outputs, gates and reasons (the
   * writers share the model and take tokenizers and masks of their own);
   * with one thread the three were written in step (one group) */
  snprintf(args, sizeof args,
           "eval --workloads '%s;%s;%s' --model %s --max-tokens 300 --target c --threads 3 --out %s/ev3 --quiet",
           W1, W2, W3, model, dg_test_tmpdir());
  rc = dg_test_run_dragon(args, NULL, &out);
  CHECK_MSG(rc == 0, "rc %d: %s", rc, out);
  free(out);
  char p1[800], p3[800];
  snprintf(p1, sizeof p1, "%s/ev2/test.json", dg_test_tmpdir());
  snprintf(p3, sizeof p3, "%s/ev3/test.json", dg_test_tmpdir());
  json_error_t e1;
  json_t *j1 = json_load_file(p1, 0, &e1), *j3 = json_load_file(p3, 0, &e1);
  CHECK(j1 && j3);
  for (size_t i = 0; i < 3; i++) {
    json_t *a = json_array_get(json_object_get(j1, "tasks"), i), *b = json_array_get(json_object_get(j3, "tasks"), i);
    static const char *const keys[] = {"workload", "gate", "reason", "graph"};
    for (size_t k = 0; k < 4; k++)
      CHECK_STREQ(json_string_value(json_object_get(a, keys[k])), json_string_value(json_object_get(b, keys[k])));
    CHECK_EQ(json_integer_value(json_object_get(a, "tokens")), json_integer_value(json_object_get(b, "tokens")));
  }
  json_decref(j1);
  json_decref(j3);
  /* without the mask the same model writes what the type check refuses */
  snprintf(args, sizeof args,
           "eval --workloads '%s;%s;%s' --model %s --max-tokens 300 --target c --unconstrained --out %s/evu --quiet",
           W1, W2, W3, model, dg_test_tmpdir());
  rc = dg_test_run_dragon(args, NULL, &out);
  CHECK_MSG(rc == 0 && strstr(out, "Correct@1 0 (0.0%)") && strstr(out, "no mask") &&
                (strstr(out, "Failed at: parse") || strstr(out, "Failed at: check")),
            "rc %d: %s", rc, out);
  free(out);
  char jpath[800];
  snprintf(jpath, sizeof jpath, "%s/ev2/test.json", dg_test_tmpdir());
  json_error_t je;
  json_t *j = json_load_file(jpath, 0, &je);
  CHECK_MSG(j, "%s", je.text);
  json_t *tasks = json_object_get(j, "tasks");
  CHECK_EQ(json_array_size(tasks), 3);
  for (size_t i = 0; i < 3; i++) {
    json_t *t = json_array_get(tasks, i);
    const char *gate = json_string_value(json_object_get(t, "gate"));
    /* constrained: nothing stops before the lowering */
    CHECK_MSG(gate && strcmp(gate, "parse") && strcmp(gate, "header") && strcmp(gate, "check"), "%s: %s",
              gate, json_string_value(json_object_get(t, "reason")));
    CHECK(json_integer_value(json_object_get(t, "tokens")) > 0);
  }
  json_decref(j);
  free(good);
  ir_func_free(f);
}

/* --write: a word other than cpu or cuda is refused by name, and where no
 * GPU is, asking to write on one says so and writes nothing. */
DG_TEST(optimize_cli_write_device_refusals) {
  char args[1400], *out = NULL;
  snprintf(args, sizeof args, "optimize GMM/0 --target c --samples 1 --write gpu --out %s/opt_w", dg_test_tmpdir());
  int rc = dg_test_run_dragon(args, NULL, &out);
  CHECK_MSG(rc != 0 && strstr(out, "--write gpu: cpu or cuda"), "rc %d: %s", rc, out);
  free(out);
  dg_status st;
  if (train_device_available(TRAIN_DEVICE_CUDA, &st)) return;
  snprintf(args, sizeof args, "optimize GMM/0 --target c --samples 1 --write cuda --out %s/opt_w", dg_test_tmpdir());
  rc = dg_test_run_dragon(args, NULL, &out);
  CHECK_MSG(rc != 0 && strstr(out, "--write cuda"), "rc %d: %s", rc, out);
  free(out);
  snprintf(args, sizeof args, "eval --split val --limit 1 --target c --write cuda --out %s/eval_w", dg_test_tmpdir());
  rc = dg_test_run_dragon(args, NULL, &out);
  CHECK_MSG(rc != 0 && strstr(out, "--write cuda"), "rc %d: %s", rc, out);
  free(out);
}

/* On a GPU the shipped model writes where the checks run: optimize's
 * samples and eval's tasks are rows of the GPU's cache (the report says
 * so), the kept graph passes, and --write cpu writes on the cores. */
DG_TEST(gpu_optimize_and_eval_write_on_gpu) {
  dg_status st;
  if (!train_device_available(TRAIN_DEVICE_CUDA, &st)) {
    dg_test_skip("%s", st.msg);
    return;
  }
  dg_func *f = wl_build(GMM, &st);
  CHECK(f);
  char args[1400], *out = NULL;
  for (int gpu = 1; gpu >= 0; gpu--) {
    snprintf(args, sizeof args, "optimize GMM/0 --target cuda --samples 4 --write %s --out %s/opt_g%d",
             gpu ? "cuda" : "cpu", dg_test_tmpdir(), gpu);
    int rc = dg_test_run_dragon(args, NULL, &out);
    CHECK_MSG(rc == 0, "rc %d: %s", rc, out);
    CHECK_MSG(strstr(out, gpu ? "written on the GPU)" : "written on the CPU)"), "%s", out);
    char path[800];
    snprintf(path, sizeof path, "%s/opt_g%d/graph.tsel", dg_test_tmpdir(), gpu);
    char *kept = dg_read_file(path, NULL, &st);
    CHECK_MSG(kept && passes(kept, f), "%s", kept ? kept : st.msg);
    free(kept);
    free(out);
  }
  /* 66 tasks: a group of 64, then one of 2 written while the first is
   * judged (the writer's steps and the measurements taking the GPU's lock
   * in turn) */
  snprintf(args, sizeof args, "eval --split val --limit 66 --target cuda --out %s/eval_g", dg_test_tmpdir());
  int rc = dg_test_run_dragon(args, NULL, &out);
  CHECK_MSG(rc == 0 && strstr(out, "Correct@1") && strstr(out, "written 64 of 66") && strstr(out, "written 66 of 66"),
            "rc %d: %s", rc, out);
  free(out);
  char path[800];
  snprintf(path, sizeof path, "%s/eval_g/val.tasks.jsonl", dg_test_tmpdir());
  char *tasks = dg_read_file(path, NULL, &st);
  CHECK_MSG(tasks && strstr(tasks, "write=cuda"), "%s", tasks ? tasks : st.msg);
  free(tasks);
  ir_func_free(f);
}

/* On a GPU each labelled task's label is timed beside its output: with
 * the labels themselves as the outputs, every task passes, has its
 * label's time, and the table reads them against the search; as
 * refinement tasks, each prior is timed too. */
DG_TEST(gpu_eval_times_the_labels) {
  dg_status st;
  if (!rt_cuda_available(&st)) {
    dg_test_skip("no GPU: %s", st.msg);
    return;
  }
  size_t len;
  char *text = dg_read_text("data/examples/test.jsonl.zst", 0, &len, &st);
  CHECK_MSG(text, "%s", st.msg);
  /* the first 8 labelled workloads small enough to judge fast */
  dg_str graphs, specs;
  dg_str_init(&graphs);
  dg_str_init(&specs);
  int n = 0;
  for (char *p = text, *nl; *p && n < 8; p = nl + 1) {
    nl = strchr(p, '\n');
    if (!nl) break;
    json_t *j = json_loadb(p, (size_t)(nl - p), 0, NULL);
    const char *kind = json_string_value(json_object_get(j, "kind"));
    const char *w = json_string_value(json_object_get(j, "workload"));
    const char *g = json_string_value(json_object_get(j, "target"));
    dg_func *f = kind && strcmp(kind, "construct") == 0 && w ? wl_build(w, &st) : NULL;
    if (f && g && data_label_work(f) < 1e8) {
      json_t *line = json_pack("{s:s, s:s}", "workload", w, "graph", g);
      char *l = json_dumps(line, JSON_COMPACT);
      dg_str_printf(&graphs, "%s\n", l);
      dg_str_printf(&specs, "%s%s", n ? ";" : "", w);
      free(l);
      json_decref(line);
      n++;
    }
    ir_func_free(f);
    json_decref(j);
  }
  free(text);
  CHECK_MSG(n >= 4, "only %d small labelled test workloads", n);
  char path[600], args[4000], out_dir[700], jpath[800];
  snprintf(path, sizeof path, "%s/label_graphs.jsonl", dg_test_tmpdir());
  snprintf(out_dir, sizeof out_dir, "%s/evgl", dg_test_tmpdir());
  CHECK(dg_write_file_atomic(path, graphs.s, graphs.len, &st));
  snprintf(args, sizeof args, "eval --workloads '%s' --graphs %s --target cuda --out %s --quiet", specs.s, path,
           out_dir);
  char *out = NULL;
  int rc = dg_test_run_dragon(args, NULL, &out);
  CHECK_MSG(rc == 0 && strstr(out, "Against the search's best label") && strstr(out, "vs search (labelled)"),
            "rc %d: %s", rc, out);
  free(out);
  snprintf(jpath, sizeof jpath, "%s/test.json", out_dir);
  json_error_t je;
  json_t *j = json_load_file(jpath, 0, &je);
  CHECK_MSG(j, "%s", je.text);
  CHECK_EQ(json_integer_value(json_object_get(j, "correct")), n);
  CHECK_EQ(json_integer_value(json_object_get(j, "labelled")), n);
  for (int i = 0; i < n; i++) {
    json_t *t = json_array_get(json_object_get(j, "tasks"), (size_t)i);
    CHECK(json_real_value(json_object_get(t, "label_secs")) > 0 && json_real_value(json_object_get(t, "vs_label")) > 0);
  }
  json_decref(j);
  /* refinement tasks of the same workloads: each prior timed beside its output */
  snprintf(args, sizeof args, "eval --workloads '%s' --graphs %s --refine --target cuda --out %s --quiet", specs.s,
           path, out_dir);
  rc = dg_test_run_dragon(args, NULL, &out);
  CHECK_MSG(rc == 0 && strstr(out, "refinement tasks") && strstr(out, "Against the prior"), "rc %d: %s", rc, out);
  free(out);
  snprintf(jpath, sizeof jpath, "%s/test.refine.json", out_dir);
  j = json_load_file(jpath, 0, &je);
  CHECK_MSG(j, "%s", je.text);
  json_t *rt = json_object_get(j, "tasks");
  CHECK(json_array_size(rt) > 0);
  for (size_t i = 0; i < json_array_size(rt); i++)
    CHECK(json_real_value(json_object_get(json_array_get(rt, i), "prior_secs")) > 0);
  json_decref(j);
  dg_str_free(&graphs);
  dg_str_free(&specs);
}

/* ---- a batch's data made while its graphs are written ----------------- */

#include <pthread.h>
#include <unistd.h>

/* An evaluation of specs on the GPU measurement m, its graphs written by
 * one group writer in groups of up to size tasks. */
static void gpu_run_opts(eval_run_opts *o, const char **specs, int n, eval_group_writer_fn write, void *ctx, int size,
                         search_cuda_measure *m, FILE *progress) {
  memset(o, 0, sizeof *o);
  o->specs = specs;
  o->n = n;
  o->write_group = write;
  o->write_ctx = ctx;
  o->write_group_size = size;
  o->write_threads = 1;
  o->gpu = m;
  o->threads = 2;
  o->progress = progress;
}

typedef struct {
  const char *good; /* GMM's graph */
  int want;         /* data files the writer waits for */
  bool saw;         /* they were there while it wrote */
} slow_writer;

/* Writes GMM's graph for GMM's task, none for the others, but first waits
 * (up to 60 s) for the batch's data files: made meanwhile, they come; made
 * by the judging after the writing, they never do. */
static void write_after_data(void *ctx, const dg_func *const *f, const char *const *specs, const char *const *priors,
                             const uint64_t *seeds, int n, char **texts, int64_t *tokens, dg_status *sts) {
  (void)f, (void)priors, (void)seeds;
  slow_writer *w = ctx;
  for (int i = 0; i < 6000 && ts_tune_data_files() < w->want; i++) usleep(10000);
  w->saw = ts_tune_data_files() >= w->want;
  for (int i = 0; i < n; i++) {
    tokens[i] = 0;
    texts[i] = strcmp(specs[i], GMM) == 0 ? dg_strdup(w->good) : NULL;
    if (!texts[i]) dg_fail(&sts[i], DG_ERR_PARSE, "no graph for %s", specs[i]);
  }
}

/* On the GPU the workloads' data (inputs and float64 references, made on
 * the CPU) is made ahead: the first batch's while its graphs are written,
 * the next batch's while the one before is judged, each kept before its
 * own judging, which then makes none. Runs where NVRTC is (without a GPU
 * every measurement fails with the worker's reason, after the data is
 * made). */
DG_TEST(eval_run_makes_a_batch_data_ahead) {
  dg_func *f = NULL;
  char *good = NULL;
  search_cuda_measure m;
  char why[300];
  dg_status st;
  if (!ts_gmm_judging_open(false, &f, &good, &m, why, sizeof why)) SKIP("%s", why);
  /* two batches: GMM's 32 tasks (one workload), then a softmax */
  enum { N = 33 };
  const char *specs[N];
  for (int i = 0; i < N - 1; i++) specs[i] = GMM;
  specs[N - 1] = "softmax:m=64,n=96,dtype=f32";
  int before = ts_tune_data_files();
  slow_writer w = {good, before + 1, false};
  FILE *progress = tmpfile();
  eval_run_opts o;
  gpu_run_opts(&o, specs, N, write_after_data, &w, N, &m, progress);
  o.judges = 1; /* one measuring context: its data files counted */
  eval_result r;
  CHECK_MSG(eval_run(&o, &r, &st), "%s", st.msg);
  CHECK_MSG(w.saw, "the first batch's data was not made while it was written");
  CHECK_EQ(r.n, N);
  if (r.n == N) {
    CHECK_EQ(r.tasks[N - 1].gate, EVAL_GATE_PARSE);
    CHECK_MSG(rt_cuda_available(&st) ? r.tasks[0].gate == EVAL_PASSED : strstr(r.tasks[0].reason, "cuda") != NULL,
              "%s", r.tasks[0].reason);
  }
  /* each workload's data made once, ahead of its judging */
  CHECK_EQ(ts_tune_data_files(), before + 2);
  static char text[65536];
  rewind(progress);
  size_t len = fread(text, 1, sizeof text - 1, progress);
  text[len] = 0;
  const char *first = strstr(text, "tasks 1 to 32: their data made ahead"),
             *judged = strstr(text, "judged tasks 1 to 32"),
             *second = strstr(text, "tasks 33 to 33: their data made ahead");
  CHECK_MSG(first && judged && second && first < judged && judged < second, "%s", text);
  fclose(progress);
  eval_result_free(&r);
  search_cuda_measure_free(&m);
  free(good);
  ir_func_free(f);
}

/* ---- the graphs written while the batches before them are judged ------- */

typedef struct {
  const char *good;
  int calls;          /* write_group calls begun */
  bool second_begun;  /* the second group's writing has begun */
  bool judged_while;  /* the first task was judged while it was being written */
  pthread_mutex_t mu;
} overlap_writer;

static void write_overlapping(void *ctx, const dg_func *const *f, const char *const *specs, const char *const *priors,
                              const uint64_t *seeds, int n, char **texts, int64_t *tokens, dg_status *sts) {
  (void)f, (void)specs, (void)priors, (void)seeds, (void)sts;
  overlap_writer *w = ctx;
  pthread_mutex_lock(&w->mu);
  if (++w->calls == 2) w->second_begun = true;
  pthread_mutex_unlock(&w->mu);
  for (int i = 0; i < n; i++) {
    tokens[i] = 0;
    texts[i] = dg_strdup(w->good);
  }
}

/* The first task's outcome waits (up to 60 s) for the second group's
 * writing to begin: it does while the batches of the first are judged,
 * never where a group is written only when the judging reaches it. */
static bool first_judged(void *ctx, int i, const eval_task *t, dg_status *st) {
  (void)t, (void)st;
  overlap_writer *w = ctx;
  if (i != 0) return true;
  for (int k = 0; k < 6000; k++) {
    pthread_mutex_lock(&w->mu);
    bool begun = w->second_begun;
    pthread_mutex_unlock(&w->mu);
    if (begun) {
      w->judged_while = true;
      break;
    }
    usleep(10000);
  }
  return true;
}

/* On the GPU with one writer, the groups are written on a thread of their
 * own while the main thread judges the batches written before: the first
 * group two batches, the next ones larger (write_group_size). */
DG_TEST(eval_run_writes_while_it_judges) {
  dg_func *f = NULL;
  char *good = NULL;
  search_cuda_measure m;
  char why[300];
  dg_status st;
  if (!ts_gmm_judging_open(false, &f, &good, &m, why, sizeof why)) SKIP("%s", why);
  enum { N = 65 }; /* groups of 64 and 1 */
  const char *specs[N];
  for (int i = 0; i < N; i++) specs[i] = GMM;
  overlap_writer w = {.good = good};
  pthread_mutex_init(&w.mu, NULL);
  FILE *progress = tmpfile();
  eval_run_opts o;
  gpu_run_opts(&o, specs, N, write_overlapping, &w, 128, &m, progress);
  o.on_task = first_judged;
  o.on_task_ctx = &w;
  eval_result r;
  CHECK_MSG(eval_run(&o, &r, &st), "%s", st.msg);
  CHECK_EQ(w.calls, 2);
  CHECK_MSG(w.judged_while, "the second group was not written while the first was judged");
  CHECK_EQ(r.n, N);
  for (int i = 0; i < r.n; i++) CHECK_MSG(r.tasks[i].graph && strcmp(r.tasks[i].graph, good) == 0, "task %d", i);
  static char text[65536];
  rewind(progress);
  size_t len = fread(text, 1, sizeof text - 1, progress);
  text[len] = 0;
  CHECK_MSG(strstr(text, "written 64 of 65") && strstr(text, "written 65 of 65"), "%s", text);
  fclose(progress);
  pthread_mutex_destroy(&w.mu);
  eval_result_free(&r);
  search_cuda_measure_free(&m);
  free(good);
  ir_func_free(f);
}

/* The writer's calls when the first task was judged (on_task). */
typedef struct {
  overlap_writer *w;
  int calls_at_first;
} first_seen;

static bool calls_at_first(void *ctx, int i, const eval_task *t, dg_status *st) {
  (void)t, (void)st;
  first_seen *s = ctx;
  if (i == 0) {
    pthread_mutex_lock(&s->w->mu);
    s->calls_at_first = s->w->calls;
    pthread_mutex_unlock(&s->w->mu);
  }
  return true;
}

/* With write_first, every group is written before the first task is
 * judged, then two judges judge the batches by default. */
DG_TEST(gpu_eval_run_writes_every_graph_first) {
  dg_func *f = NULL;
  char *good = NULL;
  search_cuda_measure m;
  char why[300];
  dg_status st;
  if (!ts_gmm_judging_open(false, &f, &good, &m, why, sizeof why)) SKIP("%s", why);
  enum { N = 65 }; /* groups of 32, 32 and 1 */
  const char *specs[N];
  for (int i = 0; i < N; i++) specs[i] = GMM;
  overlap_writer w = {.good = good};
  pthread_mutex_init(&w.mu, NULL);
  eval_run_opts o;
  gpu_run_opts(&o, specs, N, write_overlapping, &w, 32, &m, NULL);
  o.write_first = true;
  first_seen seen = {&w, -1};
  o.on_task = calls_at_first;
  o.on_task_ctx = &seen;
  eval_result r;
  CHECK_MSG(eval_run(&o, &r, &st), "%s", st.msg);
  CHECK_EQ(w.calls, 3);
  CHECK_EQ(seen.calls_at_first, 3);
  CHECK_EQ(r.judges, 2);
  CHECK_EQ(r.n, N);
  for (int i = 0; i < r.n; i++) CHECK_MSG(r.tasks[i].graph && strcmp(r.tasks[i].graph, good) == 0, "task %d", i);
  pthread_mutex_destroy(&w.mu);
  eval_result_free(&r);
  search_cuda_measure_free(&m);
  free(good);
  ir_func_free(f);
}

/* On the GPU the batches are judged by two judges (eval_run_opts.judges),
 * each on a thread with a measuring context of its own, while the main
 * thread takes them in order: the same outcome for every task as one
 * judge gives, the second context's measurements counted in the first's
 * stats.
 * GMM's tasks and softmax's (GMM's graph does not fit it) alternate, so a
 * batch's outcomes put on another batch's tasks would show. */
DG_TEST(eval_run_judges_two_batches_at_once) {
  dg_func *f = NULL;
  char *good = NULL;
  search_cuda_measure m;
  char why[300];
  dg_status st;
  if (!ts_gmm_judging_open(false, &f, &good, &m, why, sizeof why)) SKIP("%s", why);
  enum { N = 65 }; /* batches of 32, 32 and 1; groups of 64 and 1 */
  const char *specs[N];
  for (int i = 0; i < N; i++) specs[i] = i % 3 == 2 ? "softmax:m=64,n=96,dtype=f32" : GMM;
  eval_result r[2];
  int64_t candidates[2];
  for (int k = 0; k < 2; k++) {
    overlap_writer w = {.good = good};
    pthread_mutex_init(&w.mu, NULL);
    eval_run_opts o;
    gpu_run_opts(&o, specs, N, write_overlapping, &w, 128, &m, NULL);
    o.judges = k + 1;
    int64_t c0 = m.stats.candidates;
    CHECK_MSG(eval_run(&o, &r[k], &st), "%s", st.msg);
    candidates[k] = m.stats.candidates - c0;
    pthread_mutex_destroy(&w.mu);
    CHECK_EQ(r[k].n, N);
    CHECK_EQ(r[k].judges, k + 1);
    /* how many overlap depends on the batches' times (here, where the
     * compiles are cached, they may not) */
    CHECK_MSG(r[k].judged_at_once >= 1 && r[k].judged_at_once <= k + 1, "%d", r[k].judged_at_once);
  }
  CHECK_MSG(candidates[0] > 0 && candidates[1] == candidates[0], "%lld, %lld", (long long)candidates[0],
            (long long)candidates[1]);
  int gmm_gate = -1;
  for (int i = 0; i < N && r[0].n == N && r[1].n == N; i++) {
    const eval_task *a = &r[0].tasks[i], *b = &r[1].tasks[i];
    CHECK_MSG(a->gate == b->gate && strcmp(a->reason, b->reason) == 0 && strcmp(a->spec, specs[i]) == 0 &&
                  strcmp(b->spec, specs[i]) == 0,
              "task %d: %s (%s) against %s (%s)", i, eval_gate_name(a->gate), a->reason, eval_gate_name(b->gate),
              b->reason);
    if (i == 0) gmm_gate = (int)a->gate;
    /* softmax's outcome is not GMM's */
    if (i % 3 == 2) CHECK_MSG((int)b->gate != gmm_gate, "task %d: %s", i, eval_gate_name(b->gate));
  }
  for (int k = 0; k < 2; k++) eval_result_free(&r[k]);
  search_cuda_measure_free(&m);
  free(good);
  ir_func_free(f);
}
