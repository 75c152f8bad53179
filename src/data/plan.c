/* plan.c: a labelling round compiled ahead, on a machine without a GPU.
 *
 * NVRTC bounds the labelling rate on the GPU machine (0.67-0.75 thread-s a
 * candidate, bench/RESULTS.md) while its GPU is held 0.03 s a candidate.
 * NVRTC needs no GPU: data_plan_run takes the next workloads a labelling
 * run would begin (the split's order, those the database has not
 * labelled), draws each one's first round as the labeller would (the
 * search's candidates from the cost model fitted on the committed records,
 * measuring nothing: search_tune's probe), and compiles every candidate for
 * the GPU's architecture exactly as the GPU machine would (rt_program_build:
 * lowered, checked against the limits, emitted, NVRTC). What it keeps of a
 * workload is a plan entry: the candidates' traces, their kernel hashes,
 * and the CUDA source and image of each one that compiled.
 *
 * On the GPU machine (`dragon data label --plan DIR`) a workload with an
 * entry puts its compilations in the NVRTC cache (rt_nvrtc_cache_put: the
 * same source, name and architecture take the image) and measures the
 * planned traces as its first round (search_tune's planned round); the
 * rest of its search is the labeller's own. Nothing in a plan is trusted
 * further than that: a trace is replayed on the workload as it is built
 * there, and a kernel whose source differs (another dragon) is compiled
 * there as any other.
 *
 * Files. A plan is a directory of part files, `plan-<date>-<n>.zst`, each
 * written whole (temporary file, rename) by one run: zstd frames of
 *   "DGPLAN1\n", then per workload a 'W' item (JSON: workload, spec, arch,
 *   build, date, n), then n candidates, each a 'C' item (JSON: trace,
 *   kernel_hash), an 'S' item (the CUDA source) and a 'B' item (the image),
 * an item being its tag byte, its length (4 bytes, little endian) and its
 * bytes. A reader refuses a file whose items do not add up, naming the
 * file and the byte. A rerun skips the workloads a plan holds.
 */
#include <dirent.h>
#include <jansson.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#include "data/data_impl.h"
#include "dragon/data.h"
#include "dragon/lower.h"
#include "dragon/rt_cuda.h"
#include "dragon/search.h"
#include "dragon/wl.h"

#define PLAN_MAGIC "DGPLAN1\n"
#define PLAN_ZSTD_LEVEL 19
enum { PLAN_MAX_BYTES = 1 << 30 }; /* a part file, unpacked */

typedef DG_VEC(data_plan_entry *) entry_vec;

struct data_plan {
  entry_vec v;
  size_t bytes; /* the part files' sizes on disk */
};

static void cand_free(data_plan_cand *c) {
  free(c->trace);
  free(c->source);
  free(c->image);
}

static void entry_free(data_plan_entry *e) {
  if (!e) return;
  for (int i = 0; i < e->n; i++) cand_free(&e->cands[i]);
  free(e->cands);
  free(e->spec);
  free(e->build);
  free(e);
}

void data_plan_free(data_plan *p) {
  if (!p) return;
  for (size_t i = 0; i < p->v.len; i++) entry_free(p->v.data[i]);
  DG_VEC_FREE(&p->v);
  free(p);
}

int data_plan_count(const data_plan *p) { return p ? (int)p->v.len : 0; }
const data_plan_entry *data_plan_at(const data_plan *p, int i) { return p->v.data[i]; }
size_t data_plan_bytes(const data_plan *p) { return p ? p->bytes : 0; }

const data_plan_entry *data_plan_find(const data_plan *p, const char *workload) {
  if (!p) return NULL;
  for (size_t i = 0; i < p->v.len; i++)
    if (strcmp(p->v.data[i]->workload, workload) == 0) return p->v.data[i];
  return NULL;
}

/* ---- items ------------------------------------------------------------------ */

static void put_item(dg_str *out, char tag, const void *bytes, size_t n) {
  unsigned char h[5] = {(unsigned char)tag, (unsigned char)n, (unsigned char)(n >> 8),
                        (unsigned char)(n >> 16), (unsigned char)(n >> 24)};
  dg_str_putn(out, (const char *)h, 5);
  dg_str_putn(out, bytes, n);
}

static void put_json(dg_str *out, char tag, json_t *j) {
  char *s = json_dumps(j, JSON_COMPACT | JSON_PRESERVE_ORDER);
  put_item(out, tag, s, strlen(s));
  free(s);
  json_decref(j);
}

static void entry_bytes(const data_plan_entry *e, dg_str *out) {
  put_json(out, 'W',
           json_pack("{s:s, s:s, s:s, s:s, s:s, s:i}", "workload", e->workload, "spec", e->spec,
                     "arch", e->arch, "build", e->build, "date", e->date, "n", e->n));
  for (int i = 0; i < e->n; i++) {
    const data_plan_cand *c = &e->cands[i];
    char kh[24];
    snprintf(kh, sizeof kh, "%llu", (unsigned long long)c->kernel_hash);
    json_t *trace = json_loads(c->trace, 0, NULL);
    put_json(out, 'C', json_pack("{s:o, s:s}", "trace", trace ? trace : json_null(), "kernel_hash", kh));
    put_item(out, 'S', c->source, strlen(c->source));
    put_item(out, 'B', c->image, c->image_len);
  }
}

bool data_plan_write(const char *path, const data_plan_entry *const *e, int n, dg_status *st) {
  dg_status_ok(st);
  dg_str raw, z;
  dg_str_init(&raw);
  dg_str_init(&z);
  dg_str_puts(&raw, PLAN_MAGIC);
  for (int i = 0; i < n; i++) entry_bytes(e[i], &raw);
  bool ok = dg_zstd_pack(raw.s, raw.len, PLAN_ZSTD_LEVEL, &z, st) &&
            dg_write_file_atomic(path, z.s, z.len, st);
  dg_str_free(&raw);
  dg_str_free(&z);
  return ok;
}

/* A reader over a part file's unpacked bytes. */
typedef struct {
  const unsigned char *p;
  size_t n, at;
  const char *name;
  dg_status *st;
} item_reader;

static bool next_item(item_reader *r, char want, const unsigned char **bytes, size_t *len) {
  if (r->n - r->at < 5)
    return dg_fail(r->st, DG_ERR_PARSE, "%s: byte %zu: the file ends inside an item's header",
                   r->name, r->at);
  char tag = (char)r->p[r->at];
  size_t n = (size_t)r->p[r->at + 1] | (size_t)r->p[r->at + 2] << 8 |
             (size_t)r->p[r->at + 3] << 16 | (size_t)r->p[r->at + 4] << 24;
  if (tag != want)
    return dg_fail(r->st, DG_ERR_PARSE, "%s: byte %zu: item '%c' where '%c' was expected",
                   r->name, r->at, tag >= 32 && tag < 127 ? tag : '?', want);
  if (n > r->n - r->at - 5)
    return dg_fail(r->st, DG_ERR_PARSE,
                   "%s: byte %zu: an item of %zu bytes, past the end of the file", r->name,
                   r->at, n);
  *bytes = r->p + r->at + 5;
  *len = n;
  r->at += 5 + n;
  return true;
}

static json_t *item_json(item_reader *r, char tag) {
  const unsigned char *b;
  size_t n;
  size_t at = r->at;
  if (!next_item(r, tag, &b, &n)) return NULL;
  json_error_t je;
  json_t *j = json_loadb((const char *)b, n, 0, &je);
  if (!j || !json_is_object(j)) {
    json_decref(j);
    dg_fail(r->st, DG_ERR_PARSE, "%s: byte %zu: item '%c' is not a JSON object%s%s", r->name, at,
            tag, j ? "" : ": ", j ? "" : je.text);
    return NULL;
  }
  return j;
}

static char *item_text(item_reader *r, char tag, size_t *len) {
  const unsigned char *b;
  size_t n;
  if (!next_item(r, tag, &b, &n)) return NULL;
  char *s = dg_malloc(n + 1);
  memcpy(s, b, n);
  s[n] = 0;
  if (len) *len = n;
  return s;
}

static bool json_str_field(json_t *j, const char *key, const char **out) {
  *out = json_string_value(json_object_get(j, key));
  return *out != NULL;
}

/* One workload's entry at r; NULL with st set. */
static data_plan_entry *read_entry(item_reader *r) {
  size_t at = r->at;
  json_t *w = item_json(r, 'W');
  if (!w) return NULL;
  const char *wl, *spec, *arch, *build, *date;
  json_t *jn = json_object_get(w, "n");
  if (!json_str_field(w, "workload", &wl) || !json_str_field(w, "spec", &spec) ||
      !json_str_field(w, "arch", &arch) || !json_str_field(w, "build", &build) ||
      !json_str_field(w, "date", &date) || !json_is_integer(jn) || json_integer_value(jn) < 0 ||
      json_integer_value(jn) > 100000 || strlen(wl) > 20 || strlen(arch) > 15 ||
      strlen(date) > 31) {
    json_decref(w);
    dg_fail(r->st, DG_ERR_PARSE,
            "%s: byte %zu: a workload item needs workload, spec, arch, build, date (strings) and "
            "n (a count)",
            r->name, at);
    return NULL;
  }
  data_plan_entry *e = dg_calloc(1, sizeof *e);
  snprintf(e->workload, sizeof e->workload, "%s", wl);
  snprintf(e->arch, sizeof e->arch, "%s", arch);
  snprintf(e->date, sizeof e->date, "%s", date);
  e->spec = dg_strdup(spec);
  e->build = dg_strdup(build);
  int n = (int)json_integer_value(jn);
  json_decref(w);
  e->cands = dg_calloc((size_t)(n ? n : 1), sizeof *e->cands);
  for (int i = 0; i < n; i++) {
    data_plan_cand *c = &e->cands[e->n];
    at = r->at;
    json_t *cj = item_json(r, 'C');
    if (!cj) goto bad;
    json_t *trace = json_object_get(cj, "trace");
    const char *kh = json_string_value(json_object_get(cj, "kernel_hash"));
    if (!json_is_array(trace) || !kh) {
      json_decref(cj);
      dg_fail(r->st, DG_ERR_PARSE,
              "%s: byte %zu: a candidate item needs trace (an array) and kernel_hash", r->name,
              at);
      goto bad;
    }
    c->trace = json_dumps(trace, JSON_COMPACT | JSON_ENCODE_ANY | JSON_REAL_PRECISION(17));
    c->kernel_hash = strtoull(kh, NULL, 10);
    json_decref(cj);
    e->n++; /* c is the entry's now, freed with it */
    if (!(c->source = item_text(r, 'S', NULL))) goto bad;
    size_t len = 0;
    if (!(c->image = (unsigned char *)item_text(r, 'B', &len))) goto bad;
    c->image_len = len;
  }
  return e;
bad:
  entry_free(e);
  return NULL;
}

bool data_plan_parse(const char *name, const void *bytes, size_t len, data_plan *into,
                     dg_status *st) {
  dg_status_ok(st);
  size_t m = strlen(PLAN_MAGIC);
  if (len < m || memcmp(bytes, PLAN_MAGIC, m) != 0)
    return dg_fail(st, DG_ERR_PARSE, "%s: not a plan (no \"DGPLAN1\" header)", name);
  item_reader r = {bytes, len, m, name, st};
  entry_vec got = {0};
  while (r.at < r.n) {
    data_plan_entry *e = read_entry(&r);
    if (!e) {
      for (size_t i = 0; i < got.len; i++) entry_free(got.data[i]);
      DG_VEC_FREE(&got);
      return false;
    }
    DG_VEC_PUSH(&got, e);
  }
  for (size_t i = 0; i < got.len; i++) {
    if (data_plan_find(into, got.data[i]->workload)) {
      entry_free(got.data[i]); /* the first part's entry stands */
      continue;
    }
    DG_VEC_PUSH(&into->v, got.data[i]);
  }
  DG_VEC_FREE(&got);
  return true;
}

static bool is_part_name(const char *s) {
  size_t n = strlen(s);
  return strncmp(s, "plan-", 5) == 0 && n > 9 && strcmp(s + n - 4, ".zst") == 0;
}

static int cmp_str(const void *a, const void *b) {
  return strcmp(*(const char *const *)a, *(const char *const *)b);
}

data_plan *data_plan_load(const char *dir, bool missing_ok, dg_status *st) {
  dg_status_ok(st);
  data_plan *p = dg_calloc(1, sizeof *p);
  DIR *d = opendir(dir);
  if (!d) {
    if (missing_ok) return p;
    dg_fail(st, DG_ERR_IO, "%s: no such plan directory", dir);
    free(p);
    return NULL;
  }
  DG_VEC(char *) names = {0};
  struct dirent *de;
  while ((de = readdir(d)))
    if (is_part_name(de->d_name)) DG_VEC_PUSH(&names, dg_strdup(de->d_name));
  closedir(d);
  if (names.len > 1) qsort(names.data, names.len, sizeof(char *), cmp_str);
  bool ok = true;
  for (size_t i = 0; i < names.len && ok; i++) {
    char path[1024];
    snprintf(path, sizeof path, "%s/%s", dir, names.data[i]);
    size_t zlen = 0, len = 0;
    char *z = dg_read_file(path, &zlen, st);
    char *raw = z ? dg_zstd_unpack(z, zlen, path, PLAN_MAX_BYTES, &len, st) : NULL;
    free(z);
    ok = raw && data_plan_parse(path, raw, len, p, st);
    free(raw);
    p->bytes += zlen;
  }
  for (size_t i = 0; i < names.len; i++) free(names.data[i]);
  DG_VEC_FREE(&names);
  if (!ok) {
    data_plan_free(p);
    return NULL;
  }
  return p;
}

/* ---- compiling ahead ------------------------------------------------------------- */

void data_plan_opts_default(data_plan_opts *o) {
  memset(o, 0, sizeof *o);
  o->trials_min = 64;
  o->population = 256;
  o->seed = 1;
  o->arch = "sm_90";
  o->compile_limit_s = 5;
  o->max_bytes = 16 << 20;
  o->flush_every = 8;
  o->no_software_pipeline = !LOWER_HAS_SOFTWARE_PIPELINE;
}

/* The probe's catch: the first round's candidates, copied. */
typedef struct {
  search_cand *c;
  int n;
} probe_catch;

static void catch_round(void *ctx, const search_cand *c, int n) {
  probe_catch *k = ctx;
  k->c = dg_calloc((size_t)(n ? n : 1), sizeof *k->c);
  for (int i = 0; i < n; i++) {
    k->c[i].trace = sched_trace_clone(c[i].trace);
    k->c[i].func = ir_func_clone(c[i].func);
    k->c[i].hash = c[i].hash;
  }
  k->n = n;
}

/* Candidates compiled on threads, as the GPU machine's measurement builds
 * them (measure_cuda.c: cand_prepare). */
typedef struct {
  const search_cand *c;
  const data_plan_opts *o;
  rt_build *b;
  bool *ok;
} compile_job;

static void compile_one(void *p, int i) {
  compile_job *j = p;
  rt_build_opts bo = {.target = RT_BUILD_CUDA,
                      .arch = j->o->arch,
                      .compile_limit_s = j->o->compile_limit_s,
                      .compile = true,
                      .name = "cand"};
  dg_status st;
  j->ok[i] = rt_program_build(j->c[i].func, &bo, &j->b[i], &st);
}

/* The entries made since the last flush, into a part file of their own. */
static bool flush_part(const data_plan_opts *o, entry_vec *pend, int *seq,
                       const char *stamp, data_plan_stats *out, dg_status *st) {
  if (pend->len == 0) return true;
  char path[1024];
  snprintf(path, sizeof path, "%s/plan-%s-%04d.zst", o->out_dir, stamp, (*seq)++);
  bool ok = data_plan_write(path, (const data_plan_entry *const *)pend->data, (int)pend->len, st);
  if (ok) {
    struct stat sb;
    if (stat(path, &sb) == 0) out->bytes += (int64_t)sb.st_size;
    out->files++;
  }
  for (size_t i = 0; i < pend->len; i++) entry_free(pend->data[i]);
  pend->len = 0;
  return ok;
}

bool data_plan_run(const data_plan_opts *o, data_plan_stats *out, dg_status *st) {
  dg_status_ok(st);
  memset(out, 0, sizeof *out);
  double t0 = dg_now();
  double deadline = o->budget_s > 0 ? t0 + o->budget_s : 0;
  if (!dg_mkdirs(o->out_dir, st)) return false;
  data_plan *have = data_plan_load(o->out_dir, true, st);
  if (!have) return false;
  out->bytes = (int64_t)data_plan_bytes(have);
  search_xgb_opts xo;
  search_xgb_opts_default(&xo);
  search_cost_model *model = search_cost_model_new(&xo, o->seed);
  if (o->cost_model && !search_cost_model_load(model, o->cost_model, st)) {
    search_cost_model_free(model);
    data_plan_free(have);
    return false;
  }
  search_space_opts so = {0};
  so.seed = o->seed;
  so.no_software_pipeline = o->no_software_pipeline;
  search_postprocs pp = {0};
  search_cpu_measure cm = {1, 10, o->seed, 1}; /* never called: the probe measures nothing */
  char *stamp = dg_now_iso();
  for (char *s = stamp; *s; s++)
    if (*s == '-' || *s == ':') memmove(s, s + 1, strlen(s));
  char *date = dg_now_iso();
  entry_vec pend = {0};
  int seq = 0;
  bool ok = true;
  for (int64_t i = 0; i < o->n_specs && ok; i++) {
    if (deadline > 0 && dg_now() >= deadline) {
      out->budget_hit = true;
      break;
    }
    if (o->max_bytes > 0 && out->bytes + out->pending_bytes >= o->max_bytes) {
      out->full = true;
      break;
    }
    const char *spec = o->specs[i];
    dg_status wst;
    dg_func *f = wl_build(spec, &wst);
    if (!f) {
      out->failed++;
      if (!out->first_failure[0])
        snprintf(out->first_failure, sizeof out->first_failure, "%.100s: %.150s", spec, wst.msg);
      continue;
    }
    if (o->max_work > 0 && data_label_work(f) > o->max_work) {
      out->deferred++;
      ir_func_free(f);
      continue;
    }
    char hash[21];
    snprintf(hash, sizeof hash, "%llu", (unsigned long long)ir_func_hash(f));
    int n_base = 0;
    search_db_baseline_secs(o->db, hash, &n_base);
    bool begun = search_db_workload_trials(o->db, hash) > 0 ||
                 search_db_workload_exhausted(o->db, hash) >= 0;
    if (begun || n_base > 0 || data_plan_find(have, hash)) {
      out->already++;
      ir_func_free(f);
      continue;
    }
    /* the first round, as the labeller would draw it, measuring nothing */
    search_tune_opts to;
    data_label_search(&to, spec, f, i, &so, &pp, model, o->population, o->threads, o->seed);
    to.max_trials = o->trials_min;
    to.measure = search_measure_cpu;
    to.measure_ctx = &cm;
    to.target = "cuda";
    to.probe_only = true;
    probe_catch k = {NULL, 0};
    to.probe = catch_round;
    to.probe_ctx = &k;
    search_tune_result res;
    dg_status tst;
    double ts = dg_now();
    /* (the database gets the workload's line, nothing more) */
    bool tuned = search_tune(o->db, &to, &res, &tst);
    out->t_search += dg_now() - ts;
    if (!tuned || k.n == 0) {
      out->failed++;
      if (!out->first_failure[0])
        snprintf(out->first_failure, sizeof out->first_failure, "%.100s: %.150s", spec,
                 tuned ? "the search drew no candidate" : tst.msg);
      search_cands_free(k.c, k.n);
      ir_func_free(f);
      continue;
    }
    /* every candidate compiled as the GPU machine would */
    double tc = dg_now();
    compile_job job = {k.c, o, dg_calloc((size_t)k.n, sizeof(rt_build)),
                       dg_calloc((size_t)k.n, sizeof(bool))};
    int threads = o->threads > 0 ? o->threads : rt_cpu_count();
    /* NVRTC serialises the compilations of one process: each compiling
     * thread gets a compiler process of its own, as on the GPU machine */
    rt_nvrtc_set_processes(threads);
    rt_tasks_free(rt_tasks_start(k.n, threads < k.n ? threads : k.n, compile_one, &job));
    out->t_compile += dg_now() - tc;
    data_plan_entry *e = dg_calloc(1, sizeof *e);
    snprintf(e->workload, sizeof e->workload, "%s", hash);
    snprintf(e->arch, sizeof e->arch, "%s", o->arch);
    snprintf(e->date, sizeof e->date, "%s", date);
    e->spec = dg_strdup(spec);
    e->build = dg_strdup(search_build_id());
    e->cands = dg_calloc((size_t)k.n, sizeof *e->cands);
    size_t bytes = 0;
    for (int c = 0; c < k.n; c++) {
      if (!job.ok[c]) {
        /* what did not build here is built, or refused, there */
        out->not_compiled++;
      } else {
        data_plan_cand *pc = &e->cands[e->n++];
        pc->trace = sched_trace_to_json(k.c[c].trace);
        pc->kernel_hash = k.c[c].hash;
        pc->source = dg_strdup(job.b[c].source);
        pc->image_len = job.b[c].bin.size;
        pc->image = dg_malloc(pc->image_len ? pc->image_len : 1);
        memcpy(pc->image, job.b[c].bin.image, pc->image_len);
        bytes += pc->image_len;
      }
      rt_build_free(&job.b[c]);
    }
    free(job.b);
    free(job.ok);
    search_cands_free(k.c, k.n);
    ir_func_free(f);
    out->planned++;
    out->cands += e->n;
    out->pending_bytes += (int64_t)bytes / 8; /* about what zstd -19 keeps of the images */
    DG_VEC_PUSH(&pend, e);
    if (o->progress) {
      double el = dg_now() - t0;
      fprintf(o->progress, "[%lld/%lld] %s  %d candidates compiled%s | %lld planned, %.1f cand/s\n",
              (long long)(i + 1), (long long)o->n_specs, spec, e->n,
              e->n < k.n ? " (some not)" : "", (long long)out->planned,
              el > 0 ? (double)out->cands / el : 0);
      fflush(o->progress);
    }
    if ((int)pend.len >= o->flush_every) {
      ok = flush_part(o, &pend, &seq, stamp, out, st);
      out->pending_bytes = 0;
    }
  }
  if (ok) ok = flush_part(o, &pend, &seq, stamp, out, st);
  for (size_t i = 0; i < pend.len; i++) entry_free(pend.data[i]);
  DG_VEC_FREE(&pend);
  free(stamp);
  free(date);
  search_cost_model_free(model);
  data_plan_free(have);
  out->wall_s = dg_now() - t0;
  return ok;
}
