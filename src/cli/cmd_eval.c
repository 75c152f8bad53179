/* cmd_eval.c: `dragon eval`: a model's first outputs on held-out workloads
 * (a split of data/splits.tsv.zst, or the workloads named), judged by the
 * gates of `dragon optimize` (eval_run), written as JSON and a table.
 *
 * The writer is the model (constrained decoding, as `dragon optimize`
 * writes) or, with --graphs, a file of graphs someone else wrote (JSON
 * lines {"workload": SPEC, "graph": TSEL}), so that any writer is judged
 * the same way. No training workload is ever a task: the command refuses
 * the train split and any workload the splits file puts in it.
 */
#include <errno.h>
#include <jansson.h>
#include <pthread.h>
#include <string.h>
#include <unistd.h>

#include "cli/cli.h"
#include "dragon/data.h"
#include "dragon/eval.h"
#include "dragon/rt_cuda.h"
#include "dragon/search.h"
#include "dragon/train.h"
#include "dragon/wl.h"

typedef struct {
  cli_model *model;
  const train_decode_opts *dopts;
  json_t *graphs; /* --graphs: spec -> graph text */
  const char *graphs_path;
  cli_write_stats ws; /* the model's, over every task (under lock) */
  pthread_mutex_t lock;
} writer_ctx;

/* A writer's stats into the evaluation's. */
static void add_stats(writer_ctx *w, const cli_write_stats *ws) {
  pthread_mutex_lock(&w->lock);
  w->ws.tokens += ws->tokens;
  w->ws.backtracks += ws->backtracks;
  w->ws.narrowed += ws->narrowed;
  w->ws.gave_up += ws->gave_up;
  w->ws.restarts += ws->restarts;
  w->ws.guard_secs += ws->guard_secs;
  w->ws.lock_wait_s += ws->lock_wait_s;
  pthread_mutex_unlock(&w->lock);
}

static char *write_one(void *ctx, const dg_func *f, const char *spec, const char *prior, uint64_t seed,
                       int64_t *tokens, dg_status *st) {
  writer_ctx *w = ctx;
  if (w->graphs) {
    const char *g = json_string_value(json_object_get(w->graphs, spec));
    if (!g) {
      dg_fail(st, DG_ERR_INVALID, "%s has no graph for this workload", w->graphs_path);
      return NULL;
    }
    return dg_strdup(g);
  }
  char *kernel_text = ir_print(f);
  char *text = NULL;
  dg_str errs;
  dg_str_init(&errs);
  cli_write_stats ws = {0};
  cli_model_write(w->model, f, spec, kernel_text, prior, 1, w->dopts, seed, &text, &ws, &errs);
  *tokens += ws.tokens;
  add_stats(w, &ws);
  if (!text) dg_fail(st, DG_ERR_RUNTIME, "%s", errs.len ? errs.s : "decoding failed");
  dg_str_free(&errs);
  free(kernel_text);
  return text;
}

/* The model's first outputs for a group of tasks, written in step. */
static void write_group(void *ctx, const dg_func *const *f, const char *const *specs, const char *const *priors,
                        const uint64_t *seeds, int n, char **texts, int64_t *tokens, dg_status *sts) {
  writer_ctx *w = ctx;
  cli_write_stats ws = {0};
  cli_model_write_each(w->model, f, specs, priors, seeds, n, w->dopts, texts, tokens, &ws, sts);
  add_stats(w, &ws);
}

/* Hands each object of a JSON-lines text (blank lines passed over) to
 * take; a line that is not JSON, or that take refuses, fails naming
 * path:line:column and what a line should be (want). */
static bool each_json_line(const char *text, const char *path, const char *want,
                           bool (*take)(void *ctx, json_t *j), void *ctx, dg_status *st) {
  int line = 0;
  for (const char *p = text, *nl; *p; p = nl ? nl + 1 : p + strlen(p)) {
    nl = strchr(p, '\n');
    line++;
    size_t n = nl ? (size_t)(nl - p) : strlen(p);
    if (n == 0) continue;
    json_error_t je;
    json_t *j = json_loadb(p, n, 0, &je);
    bool ok = j && take(ctx, j);
    json_decref(j);
    if (!ok)
      return dg_fail(st, DG_ERR_PARSE, "%s:%d:%d: %s%s%s", path, line, j ? 1 : je.column, want, j ? "" : ": ",
                     j ? "" : je.text);
  }
  return true;
}

/* A --graphs line: workload -> graph. */
static bool take_graph(void *ctx, json_t *j) {
  const char *w = json_string_value(json_object_get(j, "workload"));
  const char *g = json_string_value(json_object_get(j, "graph"));
  if (!w || !g) return false;
  json_object_set_new(ctx, w, json_string(g));
  return true;
}

/* --graphs FILE (plain or zstd): one {"workload", "graph"} object a line;
 * errors name the line. */
static json_t *load_graphs(const char *path, dg_status *st) {
  size_t len;
  char *text = dg_read_text(path, 0, &len, st);
  if (!text) return NULL;
  json_t *map = json_object();
  if (!each_json_line(text, path, "want {\"workload\": SPEC, \"graph\": TSEL}", take_graph, map, st)) {
    json_decref(map);
    map = NULL;
  }
  free(text);
  return map;
}

/* ---- another writer's outputs ------------------------------------------- */

/* An --against line: its task (its name, else its workload) -> its graph,
 * "" where that writer wrote none (a task line of an evaluation). */
static bool take_against(void *ctx, json_t *j) {
  const char *w = json_string_value(json_object_get(j, "workload"));
  const char *task = json_string_value(json_object_get(j, "task"));
  json_t *g = json_object_get(j, "graph");
  if (!w || (g && !json_is_string(g))) return false;
  json_object_set_new(ctx, task ? task : w, json_string(g ? json_string_value(g) : ""));
  return true;
}

/* --against FILE (plain or zstd): another writer's outputs, as --graphs
 * takes them or as an evaluation keeps its tasks (SPLIT.tasks.jsonl: a task
 * it wrote no graph for has none); errors name the line. */
static json_t *load_against(const char *path, dg_status *st) {
  size_t len;
  char *text = dg_read_text(path, 0, &len, st);
  if (!text) return NULL;
  json_t *map = json_object();
  if (!each_json_line(text, path, "want {\"workload\": SPEC, \"graph\": TSEL} (\"task\": its name, for a refinement)",
                      take_against, map, st)) {
    json_decref(map);
    map = NULL;
  }
  free(text);
  return map;
}

/* ---- the search's labels: a split's construction examples ---------------- */

typedef struct {
  json_t *map, *refines;
} labels_ctx;

/* An examples line: a construction's target into map, a refinement into
 * refines; anything else is refused. */
static bool take_example(void *ctx, json_t *j) {
  labels_ctx *c = ctx;
  const char *kind = json_string_value(json_object_get(j, "kind"));
  const char *w = json_string_value(json_object_get(j, "workload"));
  const char *g = json_string_value(json_object_get(j, "target"));
  const char *task = json_string_value(json_object_get(j, "task"));
  const char *prior = json_string_value(json_object_get(j, "prior"));
  bool refine = kind && strcmp(kind, "refine") == 0;
  if (!kind || !w || !g || (refine && (!task || !prior))) return false;
  if (strcmp(kind, "construct") == 0) json_object_set_new(c->map, w, json_string(g));
  else if (refine)
    json_array_append_new(c->refines, json_pack("{s:s, s:s, s:s}", "task", task, "workload", w, "prior", prior));
  return true;
}

/* --labels FILE (JSON lines, plain or zstd, as `dragon data build` writes
 * them): workload -> the construction target, its best measured
 * schedule's graph; and into *refines the refinement examples in order
 * ({task, workload, prior}: the refinement tasks). A line that is not an
 * example is refused naming file:line. */
static json_t *load_labels(const char *path, json_t **refines, dg_status *st) {
  size_t len;
  char *text = dg_read_text(path, 0, &len, st);
  if (!text) return NULL;
  labels_ctx c = {json_object(), json_array()};
  if (!each_json_line(text, path, "not an example (want kind, workload and target; a refinement's task and prior too)",
                      take_example, &c, st)) {
    json_decref(c.map);
    json_decref(c.refines);
    c.map = c.refines = NULL;
  }
  free(text);
  *refines = c.refines;
  return c.map;
}

/* ---- resuming: OUT/SPLIT.tasks.jsonl, a line a judged task ----------------- */

typedef struct {
  const char *path, *key;
} keep_ctx;

/* Appends a judged task (whole line, fsync'd: a kill loses at most the
 * task in flight). */
static bool keep_task(void *ctx, int i, const eval_task *t, dg_status *st) {
  (void)i;
  const keep_ctx *k = ctx;
  json_t *j = json_pack("{s:s, s:s, s:s, s:s, s:s, s:f, s:f, s:f, s:f, s:I}", "key", k->key, "workload",
                        t->spec, "family", t->family, "gate", eval_gate_name(t->gate), "reason",
                        t->reason, "secs", t->secs, "baseline_secs", t->baseline_secs, "write_s",
                        t->t_write, "check_s", t->t_check, "tokens", (json_int_t)t->tokens);
  if (t->graph) json_object_set_new(j, "graph", json_string(t->graph));
  if (t->label_secs > 0) json_object_set_new(j, "label_secs", json_real(t->label_secs));
  if (t->prior_secs > 0) json_object_set_new(j, "prior_secs", json_real(t->prior_secs));
  if (t->name) json_object_set_new(j, "task", json_string(t->name));
  if (t->has_against) {
    json_object_set_new(j, "against_gate", json_string(eval_gate_name(t->against_gate)));
    if (t->against_secs > 0) json_object_set_new(j, "against_secs", json_real(t->against_secs));
  }
  char *line = json_dumps(j, JSON_COMPACT | JSON_REAL_PRECISION(17));
  json_decref(j);
  dg_str s;
  dg_str_init(&s);
  dg_str_printf(&s, "%s\n", line);
  free(line);
  bool ok = dg_append_lines(k->path, s.s, s.len, st);
  dg_str_free(&s);
  return ok;
}

/* The tasks an earlier run of this evaluation (the same key) judged, by
 * task index (tasks named by ids[i]: a line's task name, else its
 * workload); a torn last line (a killed run) is not a task. Another
 * evaluation's file, a task not of this one or a line that is not a task
 * is refused naming the file and line. */
static eval_task **load_done(const char *path, const char *key, const char *const *ids, int n,
                             dg_status *st) {
  eval_task **done = dg_calloc((size_t)(n ? n : 1), sizeof *done);
  size_t len;
  char *text = dg_read_file(path, &len, st);
  if (!text) {
    if (errno == ENOENT) { /* nothing to resume: every task is to do */
      dg_status_ok(st);
      return done;
    }
    free(done);
    return NULL;
  }
  int line = 0, kept = 0;
  bool ok = true;
  for (char *p = text, *nl; ok && *p; p = nl + 1) {
    nl = strchr(p, '\n');
    line++;
    if (!nl) break; /* a torn last line: the task in flight when it stopped */
    json_error_t je;
    json_t *j = json_loadb(p, (size_t)(nl - p), 0, &je);
    const char *k = j ? json_string_value(json_object_get(j, "key")) : NULL;
    const char *w = j ? json_string_value(json_object_get(j, "workload")) : NULL;
    const char *g = j ? json_string_value(json_object_get(j, "gate")) : NULL;
    const char *r = j ? json_string_value(json_object_get(j, "reason")) : NULL;
    eval_gate gate, against_gate = EVAL_PASSED;
    const char *ag = j ? json_string_value(json_object_get(j, "against_gate")) : NULL;
    if (!k || !w || !g || !r || !eval_gate_from_name(g, &gate) || (ag && !eval_gate_from_name(ag, &against_gate))) {
      ok = dg_fail(st, DG_ERR_PARSE, "%s:%d: not a judged task", path, line);
    } else if (strcmp(k, key) != 0) {
      ok = dg_fail(st, DG_ERR_USAGE, "%s:%d: written by another evaluation (%s, not %s): run without --resume",
                   path, line, k, key);
    } else {
      const char *id = json_string_value(json_object_get(j, "task"));
      if (!id) id = w;
      int i = 0;
      while (i < n && strcmp(ids[i], id) != 0) i++;
      if (i == n) {
        ok = dg_fail(st, DG_ERR_USAGE, "%s:%d: %s is not a task of this evaluation", path, line, id);
      } else if (!done[i]) {
        eval_task *t = dg_calloc(1, sizeof *t);
        t->spec = dg_strdup(w);
        snprintf(t->family, sizeof t->family, "%s", json_string_value(json_object_get(j, "family")) ? json_string_value(json_object_get(j, "family")) : "");
        t->gate = gate;
        snprintf(t->reason, sizeof t->reason, "%s", r);
        t->secs = json_number_value(json_object_get(j, "secs"));
        t->baseline_secs = json_number_value(json_object_get(j, "baseline_secs"));
        t->label_secs = json_number_value(json_object_get(j, "label_secs"));
        t->prior_secs = json_number_value(json_object_get(j, "prior_secs"));
        t->t_write = json_number_value(json_object_get(j, "write_s"));
        t->t_check = json_number_value(json_object_get(j, "check_s"));
        t->tokens = json_integer_value(json_object_get(j, "tokens"));
        t->has_against = ag != NULL;
        t->against_gate = against_gate;
        t->against_secs = json_number_value(json_object_get(j, "against_secs"));
        const char *graph = json_string_value(json_object_get(j, "graph"));
        t->graph = graph ? dg_strdup(graph) : NULL;
        done[i] = t;
        kept++;
      }
    }
    json_decref(j);
  }
  free(text);
  if (!ok) {
    for (int i = 0; i < n; i++)
      if (done[i]) {
        free(done[i]->spec);
        free(done[i]->graph);
        free(done[i]);
      }
    free(done);
    return NULL;
  }
  fprintf(stderr, "dragon eval: resuming: %d of %d tasks judged before (%s)\n", kept, n, path);
  return done;
}

/* ---- the plot: OUT/SPLIT.png and .svg ------------------------------------- */

/* Correct@1 by family; where timed, the share of tasks correct and at
 * least p times faster than the baseline against p (the cumulative fast_p
 * curve), and each correct task's speedup by family. The points go to
 * OUT/SPLIT.plot.tsv beside it. */
static bool plot_result(const eval_result *r, const char *dir, const char *split, const char *name,
                        dg_status *st) {
  dg_str pts, sc;
  dg_str_init(&pts);
  dg_str_init(&sc);
  int nf = 0;
  char fam[256][64];
  for (int i = 0; i < r->n && nf < 256; i++) {
    bool seen = false;
    for (int f = 0; f < nf && !seen; f++) seen = strcmp(fam[f], r->tasks[i].family) == 0;
    if (!seen) snprintf(fam[nf++], sizeof fam[0], "%s", r->tasks[i].family);
  }
  for (int f = 0; f < nf; f++) {
    int n = 0, c = 0;
    for (int i = 0; i < r->n; i++)
      if (strcmp(r->tasks[i].family, fam[f]) == 0) n++, c += r->tasks[i].gate == EVAL_PASSED;
    dg_str_printf(&pts, "fam\t%d\t%s\t%.4f\t%d\n", f, fam[f], n ? (double)c / n : 0.0, n);
  }
  if (r->timed) {
    for (double p = 0.25; p <= 1000; p *= 1.1) {
      int k = 0;
      for (int i = 0; i < r->n; i++) {
        const eval_task *t = &r->tasks[i];
        k += t->gate == EVAL_PASSED && t->secs > 0 && t->baseline_secs / t->secs >= p;
      }
      dg_str_printf(&pts, "fastp\t%.5g\t%.4f\n", p, r->n ? (double)k / r->n : 0.0);
    }
    for (int f = 0; f < nf; f++)
      for (int i = 0; i < r->n; i++) {
        const eval_task *t = &r->tasks[i];
        if (strcmp(t->family, fam[f]) == 0 && t->gate == EVAL_PASSED && t->secs > 0)
          dg_str_printf(&pts, "speed\t%d\t%.5g\t%s\n", f, t->baseline_secs / t->secs, fam[f]);
      }
  }
  char pts_path[1600];
  snprintf(pts_path, sizeof pts_path, "%s/%s.plot.tsv", dir, split);
  bool ok = dg_write_file_atomic(pts_path, pts.s ? pts.s : "", pts.len, st);
  for (int fmt = 0; ok && fmt < 2; fmt++) {
    dg_str_clear(&sc);
    dg_str_printf(&sc, "%s\nset output '%s/%s.%s'\n", fmt ? "set terminal svg size 1200,440 noenhanced"
                                                           : "set terminal pngcairo size 1200,440 noenhanced",
                  dir, split, fmt ? "svg" : "png");
    dg_str_printf(&sc,
                  "set datafile separator '\\t'\n"
                  "set multiplot layout 1,%d title '%s on %s: %d tasks, Correct@1 %.1f%%'\n"
                  "set style fill solid 0.6\nset boxwidth 0.7\nset yrange [0:1.05]\n"
                  "set xtics rotate by -45 font ',8'\nset ylabel 'Correct@1'\n"
                  "plot '< grep ^fam %s' using 2:4:xtic(3) with boxes notitle\n",
                  r->timed ? 3 : 1, name, split, r->n, r->n ? 100.0 * r->correct / r->n : 0.0,
                  pts_path);
    if (r->timed)
      dg_str_printf(&sc,
                    "set logscale x\nset xtics auto rotate by 0 font ''\nset xlabel 'p'\n"
                    "set ylabel 'share correct and >= p x the baseline'\n"
                    "plot '< grep ^fastp %s' using 2:3 with lines lw 2 notitle\n"
                    "unset logscale x\nset logscale y\nset yrange [*:*]\nset xlabel ''\n"
                    "set ylabel 'speedup over the baseline'\nset xrange [-0.5:%d.5]\n"
                    "set xtics rotate by -45 font ',8'\n"
                    "plot '< grep ^speed %s' using 2:3:xtic(4) with points pt 7 notitle\n",
                    pts_path, nf - 1, pts_path);
    dg_str_puts(&sc, "unset multiplot\n");
    ok = cli_gnuplot(sc.s, st);
  }
  dg_str_free(&pts);
  dg_str_free(&sc);
  return ok;
}

/* The model's short name: its run directory's (or file's) base name. */
static void model_name(const char *arg, char *out, size_t n) {
  char buf[1024];
  snprintf(buf, sizeof buf, "%s", arg);
  size_t len = strlen(buf);
  while (len > 1 && buf[len - 1] == '/') buf[--len] = 0;
  const char *slash = strrchr(buf, '/');
  snprintf(out, n, "%s", slash ? slash + 1 : buf);
}

/* ---- against the search: a section of SPLIT.md, SPLIT.search.png ------------ */

/* The cost-speed plane: each correct output (the model's seconds, its
 * speedup over the baseline) beside its search at 64, 256 and 1,000 trials
 * (the search's wall seconds, its speedup). */
static bool plot_versus(const eval_versus *v, const char *dir, const char *base, const char *name, dg_status *st) {
  dg_str pts, sc;
  dg_str_init(&pts);
  dg_str_init(&sc);
  eval_versus_points(v, &pts);
  char pts_path[1600];
  snprintf(pts_path, sizeof pts_path, "%s/%s.search.tsv", dir, base);
  bool ok = dg_write_file_atomic(pts_path, pts.s ? pts.s : "", pts.len, st);
  for (int fmt = 0; ok && fmt < 2; fmt++) {
    dg_str_clear(&sc);
    dg_str_printf(&sc, "%s\nset output '%s/%s.search.%s'\n",
                  fmt ? "set terminal svg size 800,560 noenhanced" : "set terminal pngcairo size 800,560 noenhanced",
                  dir, base, fmt ? "svg" : "png");
    dg_str_printf(&sc,
                  "set datafile separator '\\t'\nset logscale xy\nset key top left\n"
                  "set title '%s on %s: the first output against the search (%d tasks)'\n"
                  "set xlabel 'wall seconds'\nset ylabel 'speedup over the untuned baseline'\n"
                  "plot '< grep ^model %s' using 2:3 with points pt 7 ps 0.6 title 'model, first output', \\\n"
                  "     '< grep ^search64 %s' using 2:3 with points pt 6 ps 0.6 title 'search, 64 trials', \\\n"
                  "     '< grep ^search256 %s' using 2:3 with points pt 4 ps 0.6 title 'search, 256 trials', \\\n"
                  "     '< grep ^search1000 %s' using 2:3 with points pt 8 ps 0.6 title 'search, 1,000 trials'\n",
                  name, base, v->n, pts_path, pts_path, pts_path, pts_path);
    ok = cli_gnuplot(sc.s, st);
  }
  dg_str_free(&pts);
  dg_str_free(&sc);
  return ok;
}

/* Reads the correct, labelled outputs against the search's records in
 * db_dir and appends the section to *table; the plot is best effort. */
static bool versus_section(const eval_result *res, const char *db_dir, const char *dir, const char *base,
                           const char *name, char **table, dg_status *st) {
  search_db *db = NULL;
  char probe[4096];
  snprintf(probe, sizeof probe, "%s/records.jsonl", db_dir);
  if (access(probe, F_OK) == 0) {
    if (!search_db_open_readonly(db_dir, &db, st)) {
      dg_status_prefix(st, "--search-db");
      return false;
    }
  } else {
    /* shards (data/records, or one file): merged in memory */
    int64_t added;
    int n_ok;
    search_db_open_memory(&db);
    if (cli_merge_shards(db, db_dir, "eval", &added, &n_ok, st) != 0) {
      if (st->code == DG_OK) dg_fail(st, DG_ERR_PARSE, "%s: a shard could not be read", db_dir);
      dg_status_prefix(st, "--search-db");
      search_db_close(db);
      return false;
    }
  }
  eval_versus v;
  bool ok = eval_versus_search(res, db, &v, st);
  search_db_close(db);
  if (!ok) return false;
  char *sec = eval_versus_table(&v);
  dg_str t;
  dg_str_init(&t);
  dg_str_printf(&t, "%s\n%s", *table, sec);
  free(sec);
  free(*table);
  *table = dg_str_take(&t);
  dg_status pst;
  if (!plot_versus(&v, dir, base, name, &pst)) fprintf(stderr, "dragon eval: no plot against the search: %s\n", pst.msg);
  eval_versus_free(&v);
  return true;
}

int cmd_eval(int argc, char **argv) {
  const char *split_name = "test", *workloads = NULL, *model_arg = NULL, *tokp = NULL,
             *graphs_path = NULL, *target = NULL, *out_dir = NULL, *splits_path = DATA_SPLIT_FILE,
             *labels_path = NULL, *guard_log = NULL, *search_db_dir = NULL, *against_path = NULL;
  int64_t limit = 0, seed = 1, threads = 0, max_tokens = 2048, restarts = CLI_RESTARTS, judges = 0;
  double temperature = 0, max_work = -1, restart_temperature = 1.0;
  int n_past = 0;
  bool no_numbers = false;
  bool quiet = false, no_guard = false, resume = false, unconstrained = false, write_gpu = false,
       labelled_only = false, refine = false, write_first = false;
  const char *write_on = NULL;
  const cli_opt opts[] = {
      {"--split", CLI_OPT_STR, &split_name, 0, 0, "the held-out split: val, test, heldout_shape or heldout_family (default test)"},
      {"--limit", CLI_OPT_INT, &limit, 0, INT32_MAX, "the split's first N workloads (default 0: all)"},
      {"--workloads", CLI_OPT_STR, &workloads, 0, 0, "specs separated by ';' or spaces, instead of the split's (none may be a training workload)"},
      {"--model", CLI_OPT_STR, &model_arg, 0, 0, "run directory or model file (default $DRAGON_MODEL, else " CLI_DEFAULT_MODEL ")"},
      {"--tokenizer", CLI_OPT_STR, &tokp, 0, 0, "tokenizer file; default: tokenizer.bin beside the model"},
      {"--graphs", CLI_OPT_STR, &graphs_path, 0, 0, "judge these graphs instead of the model's (JSON lines {workload, graph}, plain or zstd)"},
      {"--target", CLI_OPT_STR, &target, 0, 0, "cuda (checked and timed) or c (the C emulation, not timed); default: cuda where a GPU is seen"},
      {"--max-work", CLI_OPT_F64, &max_work, 0, 0,
       "leave out the split's workloads whose float64 reference takes more operations, as labelling "
       "defers them (0: none; default 4e10, none with --target c); the count left out is reported"},
      {"--seed", CLI_OPT_INT, &seed, 0, INT64_MAX, "task i is written with seed + i"},
      {"--temperature", CLI_OPT_F64, &temperature, 0, 0, "sampling temperature of the first output (default 0: greedy)"},
      {"--max-tokens", CLI_OPT_INT, &max_tokens, 16, 1 << 16, "tokens per graph at most (default 2048)"},
      {"--threads", CLI_OPT_INT, &threads, 0, 1024, "threads for the checks (default: every core)"},
      {"--judges", CLI_OPT_INT, &judges, 0, 16,
       "on the GPU: batches of 32 tasks judged at once, each with a measuring worker of its own, so that "
       "one batch's slowest compile holds no other (default 0: 1 while the model writes on the GPU beside "
       "the judging, its steps waiting for the GPU behind every measuring worker; 2 where the graphs are "
       "written first)"},
      {"--write-first", CLI_OPT_FLAG, &write_first, 0, 0,
       "where the model writes on the GPU: every graph written before any is judged, the writer alone "
       "on the GPU and the cores, then the batches judged by --judges judges (default 2); without it the "
       "graphs are written beside the judging"},
      {"--no-guard", CLI_OPT_FLAG, &no_guard, 0, 0, "decode without the line guard (each edit line replayed as it is written; for comparison)"},
      {"--restarts", CLI_OPT_INT, &restarts, 0, 64, CLI_RESTARTS_HELP},
      {"--restart-temperature", CLI_OPT_F64, &restart_temperature, 0, 0, CLI_RESTART_TEMPERATURE_HELP},
      {"--guard-log", CLI_OPT_STR, &guard_log, 0, 0, CLI_GUARD_LOG_HELP},
      {"--no-numbers", CLI_OPT_FLAG, &no_numbers, 0, 0,
       "with --target c: stop each task after the build gate, no numeric check (what the "
       "decoding gets through, quickly; \"passed\" is then no Correct@1)"},
      {"--write", CLI_OPT_STR, &write_on, 0, 0, "where the model writes: cuda (the GPU's KV cache, every task a row; the default where the checks run on a GPU) or cpu (every core)"},
      {"--unconstrained", CLI_OPT_FLAG, &unconstrained, 0, 0, "decode without the grammar and type mask (and so without the guard; for comparison)"},
      {"--splits", CLI_OPT_STR, &splits_path, 0, 0, "the splits file (default " DATA_SPLIT_FILE ")"},
      {"--labels", CLI_OPT_STR, &labels_path, 0, 0,
       "the search's labels: construction examples whose targets are timed beside the outputs on the GPU "
       "(default data/examples/SPLIT.jsonl.zst where it exists; none: no labels)"},
      {"--labelled", CLI_OPT_FLAG, &labelled_only, 0, 0, "only the tasks that have a label (after --limit)"},
      {"--refine", CLI_OPT_FLAG, &refine, 0, 0,
       "refinement tasks: each refinement example of the tasks' workloads (in --labels) is a task, its prior in "
       "the prompt and, on the GPU, timed beside the output; SPLIT.refine.* are written"},
      {"--search-db", CLI_OPT_STR, &search_db_dir, 0, 0,
       "the search's records: a tuning database, or shards (data/records) merged in memory: on the GPU, each "
       "correct output with a timed label is read against the search after 64, 256 and 1,000 trials and at the "
       "model's cost, per family (a section of SPLIT.md, the plot SPLIT.search.png and .svg)"},
      {"--against", CLI_OPT_STR, &against_path, 0, 0,
       "another writer's outputs on the same tasks (JSON lines {workload, graph}, as --graphs, or another "
       "evaluation's SPLIT.tasks.jsonl): each judged beside this output in the same run; the table says on how "
       "many tasks where either is correct this one is correct and the other not, or both and this one faster"},
      {"--out", CLI_OPT_STR, &out_dir, 0, 0, "where SPLIT.json and SPLIT.md go (default eval/MODEL)"},
      {"--resume", CLI_OPT_FLAG, &resume, 0, 0, "keep the tasks an interrupted run of the same evaluation judged (OUT/SPLIT.tasks.jsonl) and do the rest"},
      {"--quiet", CLI_OPT_FLAG, &quiet, 0, 0, "no line per task on stderr"},
  };
  const cli_spec spec = {
      "eval", "[--split test] [--limit N] [--model DIR | --graphs FILE] [--target c|cuda] [--out DIR]",
      "Judges a model's first output on every workload of a held-out split with the\n"
      "gates of `dragon optimize`: Correct@1, and on the GPU fast_2 and fast_10 over\n"
      "the untuned baseline measured in the same run, per family. Writes\n"
      "OUT/SPLIT.json (every task's gate, reason and times) and OUT/SPLIT.md (the\n"
      "table, also printed). On the GPU each labelled task's search label (its best\n"
      "measured schedule, --labels) is timed beside the output too: the output's speed\n"
      "against the search's, per family. With --refine the split's refinement examples\n"
      "are the tasks (the prior in the prompt, timed beside the output on the GPU).\n"
      "Refuses training workloads.",
      opts, DG_ARRAY_LEN(opts), 0, 0};
  char **pos;
  int npos;
  int rc = cli_parse(&spec, argc, argv, &pos, &npos);
  if (rc) return rc < 0 ? CLI_OK : rc;
  free(pos);
  if (!(temperature >= 0 && temperature <= 1e6) || !(restart_temperature >= 0 && restart_temperature <= 1e6)) {
    fprintf(stderr, "dragon eval: --temperature and --restart-temperature must be in [0, 1e6]\n");
    return CLI_USAGE;
  }
  if (target && strcmp(target, "c") != 0 && strcmp(target, "cuda") != 0) {
    fprintf(stderr, "dragon eval: --target %s: cuda or c\n", target);
    return CLI_USAGE;
  }
  data_split split;
  if (!data_split_from_name(split_name, strlen(split_name), &split)) {
    fprintf(stderr, "dragon eval: --split %s: no such split (val, test, heldout_shape, heldout_family)\n",
            split_name);
    return CLI_USAGE;
  }
  if (data_split_is_training(split)) {
    fprintf(stderr, "dragon eval: --split %s: the model trained on it; it is judged only on "
                    "workloads it never trained on\n", split_name);
    return CLI_USAGE;
  }
  dg_status st;
  dg_status_ok(&st);
  int ret = CLI_OK;
  data_splits *splits = NULL;
  char **specs = NULL;
  int n = 0;
  cli_model cm;
  memset(&cm, 0, sizeof cm);
  json_t *graphs = NULL;
  search_cuda_measure gm = {5, 10, 1, NULL};
  bool have_gpu = false;
  eval_result res;
  memset(&res, 0, sizeof res);
  char *json = NULL, *table = NULL;
  eval_task **done = NULL;
  json_t *label_map = NULL, *refines = NULL;
  const char **labels = NULL, **priors = NULL, **names = NULL, **against = NULL;
  json_t *against_map = NULL;

  if (!(splits = data_splits_load(splits_path, &st))) goto fail;
  if (workloads) {
    char *list = dg_strdup(workloads);
    for (char *tok = strtok(list, "; \t\n"); tok; tok = strtok(NULL, "; \t\n")) {
      char *canon = wl_canonical(tok, &st);
      if (!canon) {
        free(list);
        dg_status_prefix(&st, "--workloads");
        goto fail;
      }
      const data_split_entry *e = data_splits_find(splits, canon);
      if (e && data_split_is_training(e->split)) {
        dg_fail(&st, DG_ERR_USAGE, "--workloads: %s is a training workload (%s): the model is "
                "judged only on workloads it never trained on", canon, splits_path);
        free(canon);
        free(list);
        goto fail;
      }
      specs = dg_realloc(specs, sizeof *specs * (size_t)(n + 1));
      specs[n++] = canon;
    }
    free(list);
  } else {
    if (max_work < 0) max_work = target && strcmp(target, "c") == 0 ? 0 : 4e10;
    for (int64_t i = data_splits_next(splits, split, 0); i >= 0 && (!limit || n < limit);
         i = data_splits_next(splits, split, i + 1)) {
      const char *sp = data_splits_at(splits, i)->spec;
      if (max_work > 0) {
        dg_status wst;
        dg_func *f = wl_build(sp, &wst);
        bool past = f && data_label_work(f) > max_work;
        ir_func_free(f);
        if (past) {
          n_past++;
          continue;
        }
      }
      specs = dg_realloc(specs, sizeof *specs * (size_t)(n + 1));
      specs[n++] = dg_strdup(sp);
    }
    if (n_past > 0)
      fprintf(stderr, "dragon eval: %d of the split's workloads left out: their float64 reference "
              "takes more than %.3g operations (--max-work)\n", n_past, max_work);
  }
  /* the search's labels, and with --labelled only the tasks they label */
  {
    char default_labels[300];
    snprintf(default_labels, sizeof default_labels, "data/examples/%s.jsonl.zst", split_name);
    bool named = labels_path && strcmp(labels_path, "none") != 0;
    if (!labels_path) labels_path = access(default_labels, R_OK) == 0 ? default_labels : NULL;
    else if (!named) labels_path = NULL;
    if ((labelled_only || refine) && !labels_path) {
      dg_fail(&st, DG_ERR_USAGE, "%s: no examples (%s does not exist; --labels FILE names them)",
              refine ? "--refine" : "--labelled", default_labels);
      goto fail;
    }
    if (labels_path && !(label_map = load_labels(labels_path, &refines, &st))) goto fail;
    if (refine) {
      /* the refinement examples of the tasks' workloads, in the file's
       * order: a workload is as many tasks as it has priors */
      int m = 0;
      char **rspecs = dg_calloc(json_array_size(refines) + 1, sizeof *rspecs);
      priors = dg_calloc(json_array_size(refines) + 1, sizeof *priors);
      names = dg_calloc(json_array_size(refines) + 1, sizeof *names);
      for (size_t k = 0; k < json_array_size(refines); k++) {
        json_t *e = json_array_get(refines, k);
        const char *w = json_string_value(json_object_get(e, "workload"));
        bool in = false;
        for (int i = 0; i < n && !in; i++) in = strcmp(specs[i], w) == 0;
        if (!in) continue;
        rspecs[m] = dg_strdup(w);
        priors[m] = json_string_value(json_object_get(e, "prior"));
        names[m++] = json_string_value(json_object_get(e, "task"));
      }
      for (int i = 0; i < n; i++) free(specs[i]);
      free(specs);
      specs = rspecs;
      n = m;
    }
    labels = dg_calloc((size_t)(n ? n : 1), sizeof *labels);
    int kept = 0;
    for (int i = 0; i < n; i++) {
      const char *g = label_map ? json_string_value(json_object_get(label_map, specs[i])) : NULL;
      if (labelled_only && !g) {
        free(specs[i]);
        continue;
      }
      if (refine) priors[kept] = priors[i], names[kept] = names[i];
      specs[kept] = specs[i];
      labels[kept++] = g;
    }
    n = kept;
    int with = 0;
    for (int i = 0; i < n; i++) with += labels[i] != NULL;
    if (label_map && !quiet)
      fprintf(stderr, "dragon eval: labels from %s: %d of the %d tasks have one (timed on a GPU only)\n",
              labels_path, with, n);
  }
  /* another writer's outputs, by task: a task it did not reach is not compared */
  if (against_path && n > 0) {
    if (!(against_map = load_against(against_path, &st))) goto fail;
    against = dg_calloc((size_t)n, sizeof *against);
    int with = 0;
    for (int i = 0; i < n; i++) {
      against[i] = json_string_value(json_object_get(against_map, refine ? names[i] : specs[i]));
      with += against[i] != NULL;
    }
    if (!quiet)
      fprintf(stderr, "dragon eval: --against %s: %d of the %d tasks have its output\n", against_path, with, n);
  }
  if (n == 0) {
    dg_fail(&st, DG_ERR_USAGE, "no tasks: the split is empty or --workloads names none%s",
            refine ? " (with --refine: no refinement example of its workloads)"
            : labelled_only ? " (with --labelled: none has a label)" : "");
    goto fail;
  }

  train_decode_opts dopts;
  train_decode_opts_default(&dopts);
  dopts.sample.temperature = (float)temperature;
  dopts.sample.max_tokens = (int)max_tokens;
  /* the first output's edits are judged; its explanations are not */
  dopts.explain = false;
  dopts.unconstrained = unconstrained;
  dopts.restarts = (int)restarts;
  dopts.restart_temperature = (float)restart_temperature;
  dopts.gpu_rows = CLI_GPU_ROWS; /* a group's tasks take the GPU writer's rows in turn */
  char name[256];
  if (graphs_path) {
    if (!(graphs = load_graphs(graphs_path, &st))) goto fail;
    model_name(graphs_path, name, sizeof name);
  } else {
    model_arg = cli_model_arg(model_arg);
    if (!cli_model_open(&cm, "--model", model_arg, tokp, !unconstrained, &st)) goto fail;
    cm.no_guard = no_guard || unconstrained;
    if (guard_log && !(cm.guard_log = eval_guard_log_open(guard_log, &st))) goto fail;
    model_name(model_arg, name, sizeof name);
  }
  {
    dg_str notes;
    dg_str_init(&notes);
    bool ok = cli_gpu_open(target, (int)threads, &gm, &have_gpu, &notes, &st);
    if (notes.len) fprintf(stderr, "dragon eval:%s", notes.s + 1);
    dg_str_free(&notes);
    if (!ok) goto fail;
  }
  if (!cli_write_device(write_on, have_gpu && !graphs && !unconstrained, &write_gpu, &st)) goto fail;
  if (write_gpu && !graphs && !cli_model_use_gpu(&cm, &st)) {
    dg_status_prefix(&st, "--write cuda");
    goto fail;
  }
  char dir[1200], tasks_path[1600];
  if (out_dir) snprintf(dir, sizeof dir, "%s", out_dir);
  else snprintf(dir, sizeof dir, "eval/%s", name);
  /* the files' base name: SPLIT, or SPLIT.refine for refinement tasks */
  char base[300];
  snprintf(base, sizeof base, "%s%s", split_name, refine ? ".refine" : "");
  snprintf(tasks_path, sizeof tasks_path, "%s/%s.tasks.jsonl", dir, base);
  if (!cli_out_dir(dir, &st)) goto fail;
  /* what identifies this evaluation: a resumed run must be the same one */
  char key[2600];
  snprintf(key, sizeof key, "writer=%s seed=%lld temperature=%.17g target=%s guard=%d max_tokens=%lld",
           graphs_path ? graphs_path : cm.path, (long long)seed, temperature,
           have_gpu ? "cuda" : "c", unconstrained ? -1 : !no_guard, (long long)max_tokens);
  /* a build-gate-only run is another evaluation */
  if (no_numbers && !have_gpu) snprintf(key + strlen(key), sizeof key - strlen(key), " gates=build");
  /* the GPU's logits are bf16's: its graphs are another evaluation's */
  if (write_gpu) snprintf(key + strlen(key), sizeof key - strlen(key), " write=cuda");
  if (refine) snprintf(key + strlen(key), sizeof key - strlen(key), " refine=1");
  /* judged against other outputs is another evaluation */
  if (against_path) snprintf(key + strlen(key), sizeof key - strlen(key), " against=%.300s", against_path);
  /* graphs written again past the backtrack limit are another decoding */
  if (restarts > 0 && !no_guard && !unconstrained)
    snprintf(key + strlen(key), sizeof key - strlen(key), " restarts=%lld restart_temperature=%.17g",
             (long long)restarts, restart_temperature);
  if (resume) {
    if (!(done = load_done(tasks_path, key, refine ? names : (const char *const *)specs, n, &st))) goto fail;
  } else if (unlink(tasks_path) != 0 && errno != ENOENT) {
    dg_fail(&st, DG_ERR_IO, "%s: %s", tasks_path, strerror(errno));
    goto fail;
  }
  keep_ctx kc = {tasks_path, key};
  writer_ctx w = {&cm, &dopts, graphs, graphs_path, {0}, PTHREAD_MUTEX_INITIALIZER};
  /* the tasks' outputs are written at once, a core each (the model is
   * read only; each writer takes a tokenizer and mask of its own) */
  int writers = (int)(threads > 0 ? threads : rt_cpu_count());
  eval_run_opts eo = {.specs = (const char *const *)specs,
                      .n = n,
                      .write = write_one,
                      .write_ctx = &w,
                      .write_group = w.graphs ? NULL : write_group,
                      .write_group_size = write_gpu ? 2 * CLI_GPU_ROWS : 0,
                      .gpu = have_gpu ? &gm : NULL,
                      .seed = (uint64_t)seed,
                      .threads = (int)threads,
                      .progress = quiet ? NULL : stderr,
                      .write_threads = write_gpu ? 1 : writers,
                      .done = done,
                      .on_task = keep_task,
                      .on_task_ctx = &kc,
                      .labels = labels,
                      .priors = refine ? priors : NULL,
                      .names = refine ? names : NULL,
                      .no_numbers = no_numbers,
                      .judges = (int)judges,
                      .write_first = write_first,
                      .against = against};
  if (!eval_run(&eo, &res, &st)) goto fail;
  json = eval_result_json(&res, name, split_name, (uint64_t)seed, temperature);
  table = eval_result_table(&res, name, split_name);
  if (n_past > 0) { /* beside the table, so that no reader takes it for the whole split */
    dg_str t;
    dg_str_init(&t);
    dg_str_puts(&t, table);
    dg_str_printf(&t, "\nLeft out: %d of the split's workloads, whose float64 reference takes more than %.3g "
                  "operations (--max-work).\n", n_past, max_work);
    free(table);
    table = dg_str_take(&t);
  }
  /* the evaluation is kept whatever the comparison meets */
  dg_status vst;
  if (search_db_dir && res.timed && !refine && !versus_section(&res, search_db_dir, dir, base, name, &table, &vst))
    fprintf(stderr, "dragon eval: no comparison with the search: %s\n", vst.msg);
  if (search_db_dir && (!res.timed || refine))
    fprintf(stderr, "dragon eval: --search-db: %s, no comparison with the search\n",
            refine ? "refinement tasks" : "nothing timed (no GPU)");
  if (no_numbers && !have_gpu)
    printf("(--no-numbers: each task stopped after the build gate; \"passed\" is not Correct@1)\n");
  fputs(table, stdout);
  if (!graphs)
    printf("\ndecoding: %lld tokens; the line guard %s\n", (long long)w.ws.tokens,
           unconstrained ? "off, and no mask" : no_guard ? "off" : "on");
  if (!graphs && w.ws.lock_wait_s > 0)
    printf("writing on the GPU waited %.1f s for its lock (the measurements beside it)\n", w.ws.lock_wait_s);
  if (res.judges > 1)
    printf("judged by %d judges side by side, at most %d batches at once, in %.1f s\n", res.judges,
           res.judged_at_once, res.t_total);
  if (!graphs && !no_guard && !unconstrained)
    printf("guard: %lld lines taken back (%lld to a narrowed tile), %lld graphs written again "
           "from the start, %d past its backtrack limit, %.1f s\n",
           (long long)w.ws.backtracks, (long long)w.ws.narrowed, (long long)w.ws.restarts,
           w.ws.gave_up, w.ws.guard_secs);
  {
    char name_json[320], name_md[320];
    snprintf(name_json, sizeof name_json, "%s.json", base);
    snprintf(name_md, sizeof name_md, "%s.md", base);
    if (!cli_write_in(dir, name_json, json, &st) || !cli_write_in(dir, name_md, table, &st))
      goto fail;
    dg_status pst;
    if (!plot_result(&res, dir, base, name, &pst) && !quiet)
      fprintf(stderr, "dragon eval: no plot: %s\n", pst.msg);
    if (!quiet) fprintf(stderr, "wrote %s/%s.json, %s.md and its plot (%s.png, %s.svg)\n", dir, base, base, base, base);
  }
  goto done;
fail:
  ret = cli_report("eval", &st);
done:
  free(json);
  free(table);
  eval_result_free(&res);
  if (done) {
    for (int i = 0; i < n; i++)
      if (done[i]) {
        free(done[i]->spec);
        free(done[i]->graph);
        free(done[i]);
      }
    free(done);
  }
  if (have_gpu) search_cuda_measure_free(&gm);
  cli_model_close(&cm);
  json_decref(graphs);
  free(labels);
  free(priors);
  free(names);
  free(against);
  json_decref(against_map);
  json_decref(label_map);
  json_decref(refines);
  for (int i = 0; i < n; i++) free(specs[i]);
  free(specs);
  data_splits_free(splits);
  return ret;
}
