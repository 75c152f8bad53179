/* tune.c: the tuning loop of one workload, and measurement on the CPU.
 *
 * search_tune registers the workload in the database, asks the design-space
 * callback for the spaces, seeds the evolutionary search with every record
 * of the workload already in the database (their kernels are never
 * measured again; the best are the first population), then runs rounds:
 * generate candidates, measure them through the callback, append one
 * record per candidate (failures included, with their reason) and feed the
 * times back to the search and its cost model, until the workload has
 * max_trials records or the search stops early. A record is written right
 * after its measurement, so a killed run loses at most the candidates in
 * flight and a rerun continues where it stopped.
 *
 * search_measure_cpu compiles each candidate with its float64 reference
 * into one shared object (the compile path of rt_compare_cpu), then runs it
 * in a child process (rt_worker_call): check against the reference, then
 * `repeats` timed runs. The child's crash or hang fails that candidate only.
 * With several workers, each takes a contiguous share of the candidates in
 * a process of its own (compilation is the costly part).
 */
#include "dragon/search.h"

#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "dragon/rt.h"
#include "dragon/rt_cuda.h"

void search_tune_opts_default(search_tune_opts *o) {
  memset(o, 0, sizeof *o);
  o->max_trials = 64;
  o->target = "cpu";
  search_evolve_opts_default(&o->evolve);
  for (int m = 0; m < SEARCH_MUT_COUNT; m++)
    o->mutator_probs[m] = search_mutator_cuda_prob((search_mutator)m);
  o->seed = 1;
}

static double mean_secs(const search_measure_result *r) {
  if (r->n_secs <= 0) return SEARCH_FAILED_SECS;
  double s = 0;
  for (int i = 0; i < r->n_secs; i++) s += r->secs[i];
  return s / r->n_secs;
}

/* Seeds the search with the database's records of this workload. */
static bool seed_from_db(search_db *db, search_evolve *ev, const dg_func *f, const char *hash,
                         dg_status *st) {
  int n = 0;
  const int *idx = search_db_workload_records(db, hash, &n);
  for (int i = 0; i < n; i++) {
    const search_record *r = search_db_record_at(db, idx[i]);
    dg_status tst;
    sched_trace *t = sched_trace_from_json(r->trace, &tst);
    if (!t) continue; /* an unreadable trace cannot seed anything */
    uint64_t kh = r->kernel_hash;
    if (!kh) {
      sched *s = sched_new(f, 0);
      if (sched_replay(s, t, false, false, &tst)) kh = ir_func_hash(sched_func(s));
      sched_free(s);
    }
    bool ok = search_evolve_add_measured(ev, t, search_record_secs(r), kh, st);
    sched_trace_free(t);
    if (!ok) return false;
  }
  return true;
}

/* The planned first round: each trace replayed exactly on f, those that do
 * not replay or whose kernel was measured already (a rerun) left out.
 * Returns the count (*out freed with search_cands_free). */
static int planned_round(const search_tune_opts *o, const search_evolve *ev, search_cand **out) {
  *out = dg_calloc((size_t)(o->n_planned > 0 ? o->n_planned : 1), sizeof **out);
  int n = 0;
  for (int i = 0; i < o->n_planned; i++) {
    dg_status st;
    sched_trace *t = sched_trace_from_json(o->planned[i], &st);
    if (!t) continue;
    sched *s = sched_new(o->f, 0);
    if (sched_replay(s, t, false, false, &st)) {
      uint64_t h = ir_func_hash(sched_func(s));
      bool dup = search_evolve_measured(ev, h);
      for (int k = 0; k < n && !dup; k++) dup = (*out)[k].hash == h;
      if (!dup) {
        (*out)[n].trace = t;
        (*out)[n].func = ir_func_clone(sched_func(s));
        (*out)[n++].hash = h;
        t = NULL;
      }
    }
    sched_free(s);
    sched_trace_free(t);
  }
  return n;
}

/* The sink of one round: each result becomes a record the moment it is
 * final. */
typedef struct {
  search_db *db;
  const search_tune_opts *o;
  const char *hash;
  const search_cand *cand;
  bool *written;
  search_tune_result *out;
  bool ok;
  dg_status st; /* the first append that failed */
} round_sink;

static void record_result(void *ctx, int i, const search_measure_result *res) {
  round_sink *rs = ctx;
  if (rs->written[i] || !rs->ok || res->not_measured) return;
  rs->written[i] = true;
  char *json = sched_trace_to_json(rs->cand[i].trace);
  search_record r = {rs->hash,
                     json,
                     res->secs,
                     res->n_secs,
                     res->n_secs ? NULL : (res->error[0] ? res->error : "failed"),
                     rs->o->target,
                     NULL,
                     rs->cand[i].hash,
                     NULL,
                     rs->o->device ? rs->o->device : ""};
  bool added = false;
  if (!search_db_add_record(rs->db, &r, &added, &rs->st)) rs->ok = false;
  if (added) rs->out->trials++;
  double secs = mean_secs(res);
  if (secs < rs->out->best_secs) rs->out->best_secs = secs;
  free(json);
}

static void print_round(const search_tune_opts *o, const search_tune_result *out,
                        const search_evolve *ev, double t_start, double t_round,
                        double t_measure, int64_t start_trials) {
  const search_evolve_stats *s = search_evolve_get_stats(ev);
  double el = dg_now() - t_start, dt = dg_now() - t_round;
  double rate = (double)(out->trials - start_trials) / (el > 0 ? el : 1);
  double eta = rate > 0 ? (double)(o->max_trials - out->trials) / rate : 0;
  if (out->best_secs < SEARCH_FAILED_SECS)
    fprintf(o->progress, "round %d  trials %lld/%lld  best %.3f us  %.1f cand/s  ETA %.0f s",
            out->rounds, (long long)out->trials, (long long)o->max_trials,
            out->best_secs * 1e6, rate, eta);
  else
    fprintf(o->progress, "round %d  trials %lld/%lld  best none  %.1f cand/s  ETA %.0f s",
            out->rounds, (long long)out->trials, (long long)o->max_trials, rate, eta);
  fprintf(o->progress, "  [round %.2f s: sample %.2f  evolve %.2f  model %.2f  measure %.2f]",
          dt, s->t_sample, s->t_evolve, s->t_model, t_measure);
  if (o->measure == search_measure_cuda && o->measure_ctx) {
    /* where measurement time went, since the start (thread-seconds for
     * lowering and NVRTC, wall time for the two waits) */
    const search_cuda_measure *gm = o->measure_ctx;
    fprintf(o->progress, "  [gpu: %lld/%lld passed; lower %.1f  nvrtc %.1f thr-s; wait gpu %.1f"
            "  wait nvrtc %.1f  worker %.1f s; %lld cached]",
            (long long)gm->stats.passed, (long long)gm->stats.candidates, gm->stats.t_lower,
            gm->stats.t_compile, gm->stats.t_gpu_wait, gm->stats.t_compile_wait,
            gm->stats.t_worker, (long long)gm->stats.cached);
  }
  fputc('\n', o->progress);
  fflush(o->progress);
}

bool search_tune(search_db *db, const search_tune_opts *o, search_tune_result *out,
                 dg_status *st) {
  dg_status_ok(st);
  memset(out, 0, sizeof *out);
  out->best_secs = SEARCH_FAILED_SECS;
  out->best_before_round = SEARCH_FAILED_SECS;
  double t_start = dg_now();
  char hash[21];
  if (!search_db_add_workload(db, o->spec, o->f, hash, st)) return false;
  out->trials = search_db_workload_trials(db, hash);
  const search_record *best = NULL;
  if (search_db_top_k(db, hash, 1, &best) == 1) out->best_secs = search_record_secs(best);
  if (out->trials >= o->max_trials) {
    out->t_total = dg_now() - t_start;
    return true;
  }
  if (!o->space || !o->measure)
    return dg_fail(st, DG_ERR_USAGE, "tune: a design-space and a measurement callback are needed");
  sched_trace **spaces = NULL;
  int n_spaces = 0;
  if (!o->space(o->space_ctx, o->f, &spaces, &n_spaces, st)) return false;
  if (n_spaces == 0) {
    free(spaces);
    return dg_fail(st, DG_ERR_INVALID, "tune %s: the workload has no design space", o->spec);
  }
  search_task task = {o->f, spaces, n_spaces, o->postproc, o->postproc_ctx, o->model, hash,
                      o->is_gpu, {0}, o->seed};
  memcpy(task.mutator_probs, o->mutator_probs, sizeof task.mutator_probs);
  search_evolve *ev = search_evolve_new(&task, &o->evolve);
  for (int i = 0; i < n_spaces; i++) sched_trace_free(spaces[i]);
  free(spaces);
  bool ok = seed_from_db(db, ev, o->f, hash, st);
  double t_measure = 0;
  int64_t start_trials = out->trials;
  while (ok && out->trials < o->max_trials && !search_evolve_stopped(ev)) {
    if (o->deadline > 0 && dg_now() >= o->deadline) {
      out->deadline_hit = true;
      break;
    }
    if (out->rounds > 0 && o->keep_going && !o->keep_going(o->keep_going_ctx, out)) break;
    double t_round = dg_now();
    search_cand *c = NULL;
    int want = (int)(o->max_trials - out->trials);
    /* The first round of a large workload can take minutes (the first
     * population, the float64 reference, the first compiles): say so. */
    bool first = out->rounds == 0;
    if (first && o->progress) {
      fprintf(o->progress, "round 1: sampling the first population...\n");
      fflush(o->progress);
    }
    int n = -1;
    if (first && o->n_planned > 0) {
      n = planned_round(o, ev, &c);
      for (int i = want; i < n; i++) { /* more than the trials left */
        sched_trace_free(c[i].trace);
        ir_func_free(c[i].func);
      }
      if (n > want) n = want;
      out->planned = n;
      if (n == 0) {
        free(c);
        c = NULL;
        n = -1; /* nothing planned is left: the search's own round */
      }
    }
    if (n < 0) n = search_evolve_generate(ev, want, &c, st);
    if (n < 0) {
      ok = false;
      break;
    }
    out->rounds++;
    out->best_before_round = out->best_secs;
    if (n == 0) continue;
    if (o->probe_only) {
      if (o->probe) o->probe(o->probe_ctx, c, n);
      search_cands_free(c, n);
      break;
    }
    search_measure_result *res = dg_calloc((size_t)n, sizeof *res);
    double t0 = dg_now();
    if (first && o->progress) {
      fprintf(o->progress, "round 1: %.1f s to sample; measuring %d candidates...\n",
              t0 - t_round, n);
      fflush(o->progress);
    }
    round_sink rs = {db, o, hash, c, dg_calloc((size_t)n, sizeof(bool)), out, true, {0}};
    dg_status_ok(&rs.st);
    search_measure_sink sink = {record_result, &rs};
    o->measure(o->measure_ctx, o->f, c, n, res, &sink);
    t_measure += dg_now() - t0;
    /* a measurement that did not hand a result over is recorded now */
    for (int i = 0; i < n; i++) record_result(&rs, i, &res[i]);
    free(rs.written);
    if (!rs.ok) {
      *st = rs.st;
      ok = false;
    }
    /* what the deadline left unbuilt is neither recorded nor known to the
     * search: a later round (or run) may draw it again */
    double *secs = dg_malloc(sizeof(double) * (size_t)n);
    search_cand *done = dg_malloc(sizeof *done * (size_t)n);
    int n_done = 0;
    for (int i = 0; i < n; i++) {
      if (res[i].not_measured) {
        if (res[i].memory_full) out->memory_full = true;
        else out->deadline_hit = true;
        continue;
      }
      done[n_done] = c[i];
      secs[n_done++] = mean_secs(&res[i]);
    }
    if (ok) ok = search_evolve_notify(ev, done, secs, n_done, st);
    free(done);
    free(secs);
    free(res);
    search_cands_free(c, n);
    if (o->progress) print_round(o, out, ev, t_start, t_round, t_measure, start_trials);
    if (out->deadline_hit) break; /* the measurement's own deadline came */
    if (out->memory_full) break;  /* a later run labels it again */
  }
  out->exhausted = ok && !out->deadline_hit && search_evolve_stopped(ev);
  const search_evolve_stats *s = search_evolve_get_stats(ev);
  out->t_sample = s->t_sample + s->t_evolve;
  out->t_model = s->t_model;
  out->t_measure = t_measure;
  out->new_trials = out->trials - start_trials;
  search_evolve_free(ev);
  out->t_total = dg_now() - t_start;
  return ok;
}

/* ---- measurement on the CPU ----------------------------------------------- */

typedef struct {
  const dg_func *f;
  rt_cpu_kernel *k[2]; /* kernel, reference */
  int repeats;
  uint64_t seed;
} cpu_job;

/* Runs in the child: data, reference, checked run, timed runs. Replies
 * "ok t1 t2 ..." or "fail reason". */
static bool cpu_job_run(void *ctx, const void *job, size_t len, dg_str *reply) {
  (void)job;
  (void)len;
  const cpu_job *j = ctx;
  rt_tensors ts;
  dg_status st;
  if (!rt_tensors_init(&ts, j->f, &st)) {
    dg_str_printf(reply, "fail %s", st.msg);
    return true;
  }
  rt_data_fill(&ts, j->seed, rt_data_dist_for(j->f));
  rt_data_poison(&ts);
  rt_cpu_call(j->k[1], ts.ref_args);
  rt_cpu_call(j->k[0], ts.args);
  rt_check chk;
  if (!rt_check_outputs_for(j->f, &ts, true, &chk, &st)) {
    dg_str_printf(reply, "fail %s", st.msg);
  } else if (!chk.pass) {
    dg_str_printf(reply, "fail wrong numbers: %s", chk.first_bad);
  } else {
    dg_str_puts(reply, "ok");
    for (int r = 0; r < j->repeats; r++) {
      double t0 = dg_now();
      rt_cpu_call(j->k[0], ts.args);
      dg_str_printf(reply, " %.9g", dg_now() - t0);
    }
  }
  rt_tensors_free(&ts);
  return true;
}

static void measure_cpu_serial(const search_cpu_measure *m, const dg_func *f,
                               const search_cand *cand, int n, search_measure_result *out,
                               const search_measure_sink *sink, int sink_base) {
  int repeats = m && m->repeats > 0 ? m->repeats : 3;
  if (repeats > (int)DG_ARRAY_LEN(out[0].secs)) repeats = (int)DG_ARRAY_LEN(out[0].secs);
  double timeout = m && m->timeout_s > 0 ? m->timeout_s : 10;
  for (int i = 0; i < n; i++) {
    search_measure_result *r = &out[i];
    memset(r, 0, sizeof *r);
    dg_status st;
    /* the candidate as plain C with its float64 reference in one unit */
    rt_build_opts bo = {RT_BUILD_C, NULL, NULL, false, 0, true, f, "cand"};
    rt_build b;
    if (!rt_program_build(cand[i].func, &bo, &b, &st)) {
      snprintf(r->error, sizeof r->error, "%s error: %.230s", rt_build_stage_name(b.stage),
               st.msg);
      rt_build_free(&b);
      if (sink) sink->fn(sink->ctx, sink_base + i, r);
      continue;
    }
    cpu_job j = {f, {b.fn, b.ref_fn}, repeats, m ? m->seed : 1};
    rt_worker_result wr;
    if (!rt_worker_call(cpu_job_run, &j, "x", 1, timeout, &wr, &st)) {
      snprintf(r->error, sizeof r->error, "run: %.240s", st.msg);
    } else if (wr.outcome != RT_WORKER_REPLIED) {
      snprintf(r->error, sizeof r->error, "run: %s", wr.reason);
    } else if (strncmp(wr.reply, "ok", 2) == 0) {
      const char *p = wr.reply + 2;
      char *end;
      while (r->n_secs < repeats) {
        double v = strtod(p, &end);
        if (end == p) break;
        r->secs[r->n_secs++] = v > 0 ? v : 1e-9;
        p = end;
      }
      if (!r->n_secs) snprintf(r->error, sizeof r->error, "run: no timings");
    } else {
      snprintf(r->error, sizeof r->error, "%s",
               strncmp(wr.reply, "fail ", 5) == 0 ? wr.reply + 5 : wr.reply);
    }
    rt_worker_result_free(&wr);
    rt_build_free(&b);
    if (sink) sink->fn(sink->ctx, sink_base + i, r);
  }
}

/* Splits the candidates over m->workers processes, each measuring its
 * share serially and sending the results back through a pipe. A worker
 * that dies loses its share's results: they become failures. */
void search_measure_cpu(void *ctx, const dg_func *f, const search_cand *cand, int n,
                        search_measure_result *out, const search_measure_sink *sink) {
  const search_cpu_measure *m = ctx;
  int k = m && m->workers > 1 ? m->workers : 1;
  if (k > n) k = n;
  if (k <= 1) {
    measure_cpu_serial(m, f, cand, n, out, sink, 0);
    return;
  }
  pid_t pids[64];
  int fds[64];
  if (k > 64) k = 64;
  for (int w = 0; w < k; w++) {
    int lo = n * w / k, hi = n * (w + 1) / k;
    int p[2];
    fds[w] = -1;
    pids[w] = -1;
    if (pipe(p) != 0) continue;
    fflush(NULL);
    pid_t pid = fork();
    if (pid == 0) {
      close(p[0]);
      search_measure_result *r = dg_calloc((size_t)(hi - lo ? hi - lo : 1), sizeof *r);
      measure_cpu_serial(m, f, cand + lo, hi - lo, r, NULL, 0);
      const char *b = (const char *)r;
      size_t left = sizeof *r * (size_t)(hi - lo);
      while (left > 0) {
        ssize_t w2 = write(p[1], b, left);
        if (w2 <= 0) break;
        b += w2;
        left -= (size_t)w2;
      }
      _exit(0);
    }
    close(p[1]);
    if (pid < 0) {
      close(p[0]);
      continue;
    }
    pids[w] = pid;
    fds[w] = p[0];
  }
  for (int w = 0; w < k; w++) {
    int lo = n * w / k, hi = n * (w + 1) / k;
    size_t want = sizeof *out * (size_t)(hi - lo), got = 0;
    char *b = (char *)(out + lo);
    if (fds[w] >= 0) {
      while (got < want) {
        ssize_t r = read(fds[w], b + got, want - got);
        if (r <= 0) break;
        got += (size_t)r;
      }
      close(fds[w]);
    }
    if (pids[w] > 0) waitpid(pids[w], NULL, 0);
    if (got < want) {
      if (pids[w] < 0) {
        measure_cpu_serial(m, f, cand + lo, hi - lo, out + lo, sink, lo);
        continue;
      }
      for (int i = lo; i < hi; i++) {
        memset(&out[i], 0, sizeof out[i]);
        snprintf(out[i].error, sizeof out[i].error, "measurement worker died");
      }
    }
    /* a worker's share is handed over as it comes back */
    if (sink)
      for (int i = lo; i < hi; i++) sink->fn(sink->ctx, i, &out[i]);
  }
}

/* ---- a design space from a file ------------------------------------------- */

bool search_space_from_file(void *ctx, const dg_func *f, sched_trace ***out, int *n,
                            dg_status *st) {
  (void)f;
  const search_space_file *sf = ctx;
  size_t len;
  char *text = dg_read_file(sf->path, &len, st);
  if (!text) return false;
  sched_trace *t = sched_trace_from_json(text, st);
  free(text);
  if (!t) {
    dg_status_prefix(st, "%s", sf->path);
    return false;
  }
  *out = dg_malloc(sizeof(sched_trace *));
  (*out)[0] = t;
  *n = 1;
  return true;
}
