/* label.c: the labelling campaign: many workloads tuned with small budgets
 * into one database, in the order given, within a wall-clock budget.
 *
 * For each workload, in order: its baseline (the untuned kernel through
 * search_baseline_schedule, TVM's DefaultGPUSchedule) is measured once and
 * kept in the database's baselines; then MetaSchedule's search tunes it
 * (search_tune) with one cost model shared by every workload of the run,
 * warm-started from the database's earlier records: at least trials_min
 * measured candidates, then more while the last round still improved the
 * best by more than `plateau`, up to trials_max. A workload is labelled
 * once it has trials_min records and a baseline, or once its search ran
 * out of new kernels (a small space, measured whole; the database marks
 * it, search_db_mark_exhausted, as it does a workload for which no design
 * space yields a valid schedule). A rerun skips both kinds (the second
 * cost seconds a workload to find nothing new again: a quarter of a
 * window's labelling went to it before the mark), and continues an
 * unfinished one where it stopped (the search resumes from its records),
 * so a run stopped by its budget or killed loses at most the candidate in
 * flight (each record is appended as it is measured).
 *
 * A workload whose float64 reference would take more than max_work
 * operations is deferred (counted, not tuned): the reference runs on the
 * CPU once per workload and would hold the GPU idle. A workload that
 * cannot be built, has no design space or whose search fails is counted
 * with its reason and the run goes on.
 *
 * Measurement is the tuner's: on the GPU (search_measure_cuda: NVRTC on
 * every core, a crash-isolated worker, checked against the float64
 * reference, timed with the L2 flushed), or compiled C on the CPU (the C
 * emulation of the GPU schedules: the same loop without a GPU).
 */
#include <malloc.h>
#include <string.h>

#include "data/data_impl.h"
#include "dragon/data.h"
#include "dragon/lower.h"
#include "dragon/rt_cuda.h"
#include "dragon/search.h"
#include "dragon/wl.h"

void data_label_opts_default(data_label_opts *o) {
  memset(o, 0, sizeof *o);
  o->trials_min = 64;
  o->trials_max = 192;
  o->plateau = 0.02;
  o->population = 256;
  o->seed = 1;
  o->warm_records = 20000;
  o->compile_limit_s = 5; /* bench/RESULTS.md: the compile times of the measured candidates */
  o->repeats = 3;
  o->no_software_pipeline = !LOWER_HAS_SOFTWARE_PIPELINE;
}

/* ---- the work of a float64 reference ---------------------------------------- */

double data_label_work(const dg_func *f) { return ir_func_iterations(f, true); }

/* ---- one workload --------------------------------------------------------- */

void data_label_search(search_tune_opts *to, const char *spec, const dg_func *f, int64_t i,
                       search_space_opts *so, search_postprocs *pp, search_cost_model *model,
                       int population, int threads, uint64_t seed) {
  search_tune_opts_default(to);
  to->spec = spec;
  to->f = f;
  to->space = search_space_cuda;
  to->space_ctx = so;
  to->postproc = search_postproc_cuda;
  to->postproc_ctx = pp;
  to->model = model;
  to->is_gpu = true;
  to->evolve.population_size = population;
  to->evolve.threads = threads;
  if (to->evolve.init_min_unmeasured > population / 2)
    to->evolve.init_min_unmeasured = population / 2;
  to->seed = seed + (uint64_t)i;
}

typedef struct {
  const data_label_opts *o;
} keep_ctx;

/* Past trials_min, one more round only while the last one still paid. */
static bool keep_going(void *ctx, const search_tune_result *r) {
  const data_label_opts *o = ((keep_ctx *)ctx)->o;
  if (r->trials < o->trials_min) return true;
  if (r->best_secs >= SEARCH_FAILED_SECS) return false;
  return r->best_before_round > r->best_secs * (1 + o->plateau);
}

/* Measures the workload's baseline once and records it. */
static bool measure_baseline(const data_label_opts *o, search_measure_fn measure, void *mctx,
                             const char *device, const dg_func *f, const char *hash,
                             double *secs, dg_status *st) {
  *secs = SEARCH_FAILED_SECS;
  sched *s = NULL;
  search_measure_result res;
  memset(&res, 0, sizeof res);
  search_cand c = {0};
  if (search_baseline_schedule(f, NULL, &s, st)) {
    c.trace = sched_trace_clone(sched_get_trace(s));
    c.func = ir_func_clone(sched_func(s));
    c.hash = ir_func_hash(c.func);
    measure(mctx, f, &c, 1, &res, NULL);
    /* the budget ran out first, or the GPU's memory was full: nothing to
     * record (a later run measures it) */
    if (res.not_measured) {
      sched_trace_free(c.trace);
      ir_func_free(c.func);
      sched_free(s);
      return true;
    }
  } else {
    snprintf(res.error, sizeof res.error, "baseline: %.240s", st->msg);
  }
  dg_status_ok(st);
  char *json = c.trace ? sched_trace_to_json(c.trace) : dg_strdup("[[],[]]");
  search_record r = {hash,       json, res.secs, res.n_secs, res.n_secs ? NULL : res.error,
                     o->on_gpu ? "cuda" : "cpu", NULL, c.hash, NULL, device};
  bool ok = search_db_add_baseline(o->db, &r, NULL, st);
  free(json);
  sched_trace_free(c.trace);
  ir_func_free(c.func);
  sched_free(s);
  if (res.n_secs) {
    double sum = 0;
    for (int i = 0; i < res.n_secs; i++) sum += res.secs[i];
    *secs = sum / res.n_secs;
  }
  return ok;
}

static void note_failure(data_label_stats *out, const char *spec, const char *why) {
  out->failed++;
  if (!out->first_failure[0])
    snprintf(out->first_failure, sizeof out->first_failure, "%.100s: %.150s", spec, why);
}

/* ---- the run -------------------------------------------------------------- */

bool data_label_run(const data_label_opts *o, data_label_stats *out, dg_status *st) {
  dg_status_ok(st);
  memset(out, 0, sizeof *out);
  double t0 = o->t_start > 0 ? o->t_start : dg_now();
  double deadline = o->budget_s > 0 ? t0 + o->budget_s : 0;
  /* building schedules allocates and frees a few MiB: keep the heap */
  mallopt(M_MMAP_THRESHOLD, 4 << 20);
  mallopt(M_TRIM_THRESHOLD, 32 << 20);

  search_cuda_measure gm = {o->repeats, 10, o->seed, NULL};
  /* one core is left to the GPU worker and this thread */
  gm.threads = o->threads > 1 ? o->threads - 1 : 0;
  gm.compile_limit_s = o->compile_limit_s;
  /* no candidate is built past the budget: a round ends within a compile
   * of it, its unbuilt candidates left for the next run */
  gm.deadline = deadline;
  search_cpu_measure cm = {o->repeats, 10, o->seed, 1};
  if (o->on_gpu && !search_cuda_measure_init(&gm, st)) return false;
  search_measure_fn measure = o->on_gpu ? search_measure_cuda : search_measure_cpu;
  void *mctx = o->on_gpu ? (void *)&gm : (void *)&cm;
  const char *device = o->on_gpu ? gm.device : "cpu";

  search_xgb_opts xo;
  search_xgb_opts_default(&xo);
  search_cost_model *model = search_cost_model_new(&xo, o->seed);
  if (o->cost_model) {
    double tw = dg_now();
    if (!search_cost_model_load(model, o->cost_model, st)) {
      search_cost_model_free(model);
      search_cuda_measure_free(&gm);
      return false;
    }
    if (o->progress)
      fprintf(o->progress, "cost model: %s, %d samples, loaded in %.1f s\n", o->cost_model,
              search_cost_model_samples(model), dg_now() - tw);
  } else if (o->warm_records > 0 && search_db_record_count(o->db) > 0) {
    double tw = dg_now();
    int used = 0;
    if (!search_cost_model_fit_db(model, o->db, o->warm_records, o->threads, &used, st)) {
      search_cost_model_free(model);
      search_cuda_measure_free(&gm);
      return false;
    }
    if (o->progress)
      fprintf(o->progress, "cost model: warm start from %d records in %.1f s\n", used,
              dg_now() - tw);
  }
  search_space_opts so = {0};
  so.seed = o->seed;
  so.no_software_pipeline = o->no_software_pipeline;
  search_postprocs pp = {0};
  int64_t planned = o->n_specs;
  bool ok = true;
  /* On the CPU, the longest a round has taken (a workload's seconds over
   * its rounds, its baseline and reference included): a workload is not
   * begun in the budget's last seconds if they are fewer, since its first
   * round would run past the budget. On the GPU a round stops building at
   * the deadline (gm.deadline) and ends within a compile of it, so a
   * workload is begun while any time is left: its first candidates are
   * measured now, the rest in the next run (every process of a window
   * once stopped with 80-214 s of its 445 left, bench/RESULTS.md). */
  double round_s = 0;
  for (int64_t i = 0; i < o->n_specs && ok; i++) {
    if (deadline > 0 && dg_now() + (o->on_gpu ? 0 : round_s) >= deadline) {
      out->budget_hit = true;
      if (o->progress && dg_now() < deadline)
        fprintf(o->progress, "stopped with %.0f s left, less than a round takes (%.0f s)\n", deadline - dg_now(),
                round_s);
      break;
    }
    const char *spec = o->specs[i];
    dg_status wst;
    dg_func *f = wl_build(spec, &wst);
    if (!f) {
      note_failure(out, spec, wst.msg);
      continue;
    }
    if (o->max_work > 0 && data_label_work(f) > o->max_work) {
      out->deferred++;
      ir_func_free(f);
      continue;
    }
    char hash[21];
    snprintf(hash, sizeof hash, "%llu", (unsigned long long)ir_func_hash(f));
    if (o->find_exhausted && !search_db_workload_spec(o->db, hash)) {
      ir_func_free(f); /* never begun: nothing to find (and nothing written) */
      continue;
    }
    if (!search_db_add_workload(o->db, spec, f, hash, st)) {
      ir_func_free(f);
      ok = false;
      break;
    }
    int n_base = 0;
    double base = search_db_baseline_secs(o->db, hash, &n_base);
    int64_t had = search_db_workload_trials(o->db, hash);
    bool marked = !o->retry_exhausted && search_db_workload_exhausted(o->db, hash) >= 0;
    if ((had >= o->trials_min || marked) && n_base > 0) {
      out->already++;
      if (had < o->trials_min && !o->find_exhausted) out->exhausted++;
      ir_func_free(f);
      continue;
    }
    if (o->find_exhausted && n_base == 0) { /* no baseline: not begun */
      ir_func_free(f);
      continue;
    }
    double tw = dg_now();
    if (n_base == 0 && !o->find_exhausted && !measure_baseline(o, measure, mctx, device, f, hash, &base, st)) {
      ir_func_free(f);
      ok = false;
      break;
    }
    search_tune_opts to;
    data_label_search(&to, spec, f, i, &so, &pp, model, o->population, o->threads, o->seed);
    to.max_trials = o->trials_max;
    to.measure = measure;
    to.measure_ctx = mctx;
    to.target = o->on_gpu ? "cuda" : "cpu";
    to.device = device;
    /* the C emulation measures a candidate in a second or more: smaller
     * rounds, so that the budget is checked often */
    if (!o->on_gpu) to.evolve.num_trials_per_iter = 16;
    to.deadline = deadline;
    /* a plan compiled ahead: its compilations in the NVRTC cache, its
     * candidates the first round */
    const data_plan_entry *pe = o->plan && o->on_gpu && had == 0 ? data_plan_find(o->plan, hash) : NULL;
    const char **plan_traces = NULL;
    if (pe && strcmp(pe->arch, gm.arch) == 0) {
      plan_traces = dg_malloc(sizeof *plan_traces * (size_t)(pe->n ? pe->n : 1));
      for (int c = 0; c < pe->n; c++) {
        const data_plan_cand *pc = &pe->cands[c];
        rt_cubin img = {(char *)pc->image, pc->image_len, false, {0}, (char *)"", 0};
        snprintf(img.arch, sizeof img.arch, "%s", pe->arch);
        rt_nvrtc_cache_put(pc->source, "cand", pe->arch, &img);
        plan_traces[c] = pc->trace;
      }
      to.planned = plan_traces;
      to.n_planned = pe->n;
    }
    keep_ctx kc = {o};
    to.keep_going = keep_going;
    to.keep_going_ctx = &kc;
    to.probe_only = o->find_exhausted;
    search_tune_result res;
    dg_status tst;
    if (!search_tune(o->db, &to, &res, &tst)) {
      /* a failed append is the run's end; anything else is this workload's */
      if (tst.code == DG_ERR_IO) {
        *st = tst;
        ok = false;
      } else {
        note_failure(out, spec, tst.msg);
        /* every sample of every design space refused: the same next time */
        if (strstr(tst.msg, SEARCH_NO_VALID_SCHEDULE)) {
          if (!search_db_mark_exhausted(o->db, hash, res.trials, st)) ok = false;
          else if (o->find_exhausted) out->exhausted++;
        }
      }
    }
    /* a small space measured whole: a rerun would search it again only
     * to find nothing new (seconds a workload, a quarter of a window) */
    if (ok && res.exhausted && res.trials < o->trials_min) {
      if (!search_db_mark_exhausted(o->db, hash, res.trials, st)) ok = false;
      else if (o->find_exhausted) out->exhausted++;
    }
    free(plan_traces);
    if (res.planned > 0) {
      out->planned++;
      out->planned_cands += res.planned;
    }
    out->measured += res.new_trials + (n_base == 0);
    out->t_search += res.t_sample;
    out->t_model += res.t_model;
    out->t_measure += res.t_measure;
    if (o->on_gpu) out->passed = gm.stats.passed;
    /* a space with fewer distinct kernels than trials_min is labelled once
     * the search has measured them all */
    bool labelled = res.trials >= o->trials_min || res.exhausted;
    if (labelled) out->labelled++;
    if (res.deadline_hit) out->budget_hit = true;
    double per_round = res.rounds > 0 ? (dg_now() - tw) / (double)res.rounds : 0;
    if (per_round > round_s) round_s = per_round;
    if (o->progress) {
      double el = dg_now() - t0;
      int64_t done = out->labelled + out->already;
      double rate = el > 0 ? (double)out->measured / el : 0;
      fprintf(o->progress, "[%lld/%lld] %s  trials %lld", (long long)(i + 1),
              (long long)planned, spec, (long long)res.trials);
      if (base < SEARCH_FAILED_SECS) fprintf(o->progress, "  baseline %.2f us", base * 1e6);
      else fprintf(o->progress, "  baseline failed");
      if (res.best_secs < SEARCH_FAILED_SECS) {
        fprintf(o->progress, "  best %.2f us", res.best_secs * 1e6);
        if (base < SEARCH_FAILED_SECS) fprintf(o->progress, " (%.2fx)", base / res.best_secs);
      } else {
        fprintf(o->progress, "  no valid candidate");
      }
      fprintf(o->progress, "  %.1f s%s | %lld labelled, %.1f cand/s", dg_now() - tw,
              res.exhausted           ? " (space exhausted)"
              : labelled              ? ""
              : res.memory_full       ? " (unfinished: the GPU's memory was full)"
                                      : " (unfinished)",
              (long long)done, rate);
      if (deadline > 0) fprintf(o->progress, ", %.0f s left", deadline - dg_now());
      if (o->on_gpu)
        fprintf(o->progress, " [%lld of %lld candidates passed]",
                (long long)gm.stats.passed, (long long)gm.stats.candidates);
      fputc('\n', o->progress);
      fflush(o->progress);
    }
    ir_func_free(f);
  }
  out->wall_s = dg_now() - t0;
  if (o->on_gpu) {
    out->t_lower = gm.stats.t_lower;
    out->t_compile = gm.stats.t_compile;
    out->t_gpu_wait = gm.stats.t_gpu_wait;
    out->t_compile_wait = gm.stats.t_compile_wait;
    out->t_data_build = gm.stats.t_data_build;
    out->t_data_run = gm.stats.t_data_run;
    out->t_worker = gm.stats.t_worker;
    out->t_held = gm.stats.t_held;
    out->compiled = gm.stats.compiled;
    out->cached = gm.stats.cached;
    out->memory_full = gm.stats.memory_full;
  }
  search_cost_model_free(model);
  search_cuda_measure_free(&gm);
  return ok;
}
