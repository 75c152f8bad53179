/* db.c: the tuning database, two append-only JSON-lines files in a
 * directory (workloads.jsonl, records.jsonl; layout in search.h and
 * docs/search.md), and its export to TVM's JSONDatabase files.
 *
 * Durability: a line is appended by a single write() on an O_APPEND file
 * descriptor followed by fsync, so a killed writer leaves at most one torn
 * last line. On open that torn tail is cut off (with a warning) so the next
 * append starts on a line of its own; any other line that does not parse or
 * lacks a field is skipped with a warning naming file:line. Records are
 * unique by (workload, trace): the trace is kept as jansson's compact dump
 * of its JSON value, the same text whether it came from a caller or a file.
 *
 * Assumes one writer per directory at a time (tuning processes of one
 * database are not coordinated); readers may run alongside. Does not
 * recompute workload hashes from the kernel text (TVM does): the stored
 * hash is trusted.
 */
#include "dragon/search.h"

#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

typedef struct {
  char *hash, *spec, *kernel;
} db_workload;

/* A loaded record: search_record's pointers point into these. */
typedef struct {
  search_record r;
  char *workload, *trace, *error, *target, *date;
  double *secs;
} db_record;

struct search_db {
  char *dir;
  char *wl_path, *rec_path;
  DG_VEC(db_workload) wls;
  DG_VEC(db_record *) recs;
  /* open addressing over record indices + 1 (0: empty), keyed by
   * (workload, trace) */
  int *slots;
  size_t n_slots;
  int warnings;
};

/* ---- small helpers ------------------------------------------------------- */

static uint64_t rec_key(const char *workload, const char *trace) {
  uint64_t h = dg_hash_bytes(workload, strlen(workload), 0x5eed);
  return dg_hash_bytes(trace, strlen(trace), h);
}

static int find_rec(const search_db *db, const char *workload, const char *trace) {
  if (!db->n_slots) return -1;
  size_t mask = db->n_slots - 1;
  for (size_t i = rec_key(workload, trace) & mask;; i = (i + 1) & mask) {
    int s = db->slots[i];
    if (!s) return -1;
    const db_record *r = db->recs.data[s - 1];
    if (strcmp(r->workload, workload) == 0 && strcmp(r->trace, trace) == 0) return s - 1;
  }
}

static void insert_slot(search_db *db, int idx) {
  size_t mask = db->n_slots - 1;
  const db_record *r = db->recs.data[idx];
  size_t i = rec_key(r->workload, r->trace) & mask;
  while (db->slots[i]) i = (i + 1) & mask;
  db->slots[i] = idx + 1;
}

/* Appends r to the records and the index (rebuilt when it fills up). */
static void push_record(search_db *db, db_record *r) {
  DG_VEC_PUSH(&db->recs, r);
  if (2 * db->recs.len <= db->n_slots) {
    insert_slot(db, (int)db->recs.len - 1);
    return;
  }
  free(db->slots);
  db->n_slots = db->n_slots ? 2 * db->n_slots : 64;
  while (2 * db->recs.len > db->n_slots) db->n_slots *= 2;
  db->slots = dg_calloc(db->n_slots, sizeof(int));
  for (size_t i = 0; i < db->recs.len; i++) insert_slot(db, (int)i);
}

static void warn(search_db *db, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void warn(search_db *db, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  fprintf(stderr, "warning: ");
  vfprintf(stderr, fmt, ap);
  fputc('\n', stderr);
  va_end(ap);
  db->warnings++;
}

static char *join_path(const char *dir, const char *name) {
  dg_str s;
  dg_str_init(&s);
  dg_str_printf(&s, "%s/%s", dir, name);
  return dg_str_take(&s);
}

/* One line, one write(), then fsync: the unit of durability. */
static bool append_line(const char *path, const char *line, dg_status *st) {
  int fd = open(path, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0644);
  if (fd < 0) return dg_fail(st, DG_ERR_IO, "%s: %s", path, strerror(errno));
  size_t n = strlen(line);
  ssize_t w = write(fd, line, n);
  bool ok = w == (ssize_t)n;
  int err = errno;
  if (ok && fsync(fd) != 0) {
    ok = false;
    err = errno;
  }
  close(fd);
  if (!ok) return dg_fail(st, DG_ERR_IO, "%s: append failed: %s", path, strerror(err));
  return true;
}

static char *dump_compact(const json_t *j) {
  return json_dumps(j, JSON_COMPACT | JSON_ENCODE_ANY | JSON_REAL_PRECISION(17));
}

static char *now_iso(void) {
  time_t t = time(NULL);
  struct tm tm;
  gmtime_r(&t, &tm);
  char buf[32];
  strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", &tm);
  return dg_strdup(buf);
}

static void free_record(db_record *r) {
  if (!r) return;
  free(r->workload);
  free(r->trace);
  free(r->error);
  free(r->target);
  free(r->date);
  free(r->secs);
  free(r);
}

static void fill_view(db_record *r) {
  r->r.workload = r->workload;
  r->r.trace = r->trace;
  r->r.run_secs = r->secs;
  r->r.error = r->error;
  r->r.target = r->target;
  r->r.date = r->date;
}

/* ---- loading ------------------------------------------------------------- */

typedef bool (*line_fn)(search_db *db, json_t *j, const char *where);

static bool load_workload(search_db *db, json_t *j, const char *where) {
  const char *hash = json_string_value(json_object_get(j, "workload"));
  const char *spec = json_string_value(json_object_get(j, "spec"));
  const char *kernel = json_string_value(json_object_get(j, "kernel"));
  if (!hash || !spec || !kernel) {
    warn(db, "%s: workload line needs string fields workload, spec, kernel; skipped", where);
    return false;
  }
  for (size_t i = 0; i < db->wls.len; i++)
    if (strcmp(db->wls.data[i].hash, hash) == 0) return true;
  db_workload w = {dg_strdup(hash), dg_strdup(spec), dg_strdup(kernel)};
  DG_VEC_PUSH(&db->wls, w);
  return true;
}

static bool load_record(search_db *db, json_t *j, const char *where) {
  const char *wl = json_string_value(json_object_get(j, "workload"));
  json_t *trace = json_object_get(j, "trace");
  json_t *secs = json_object_get(j, "run_secs");
  json_t *err = json_object_get(j, "error");
  const char *target = json_string_value(json_object_get(j, "target"));
  const char *date = json_string_value(json_object_get(j, "date"));
  json_t *kh = json_object_get(j, "kernel_hash");
  if (!wl || !json_is_array(trace) || !target) {
    warn(db, "%s: record needs workload, trace (an array) and target; skipped", where);
    return false;
  }
  if (secs && !json_is_null(secs) && !json_is_array(secs)) {
    warn(db, "%s: run_secs must be an array or null; skipped", where);
    return false;
  }
  db_record *r = dg_calloc(1, sizeof *r);
  r->workload = dg_strdup(wl);
  r->trace = dump_compact(trace);
  r->target = dg_strdup(target);
  r->date = dg_strdup(date ? date : "");
  if (json_is_string(err)) r->error = dg_strdup(json_string_value(err));
  size_t n = json_is_array(secs) ? json_array_size(secs) : 0;
  r->secs = dg_calloc(n ? n : 1, sizeof(double));
  for (size_t i = 0; i < n; i++) {
    json_t *v = json_array_get(secs, i);
    if (!json_is_number(v)) {
      warn(db, "%s: run_secs[%zu] is not a number; skipped", where, i);
      free_record(r);
      return false;
    }
    r->secs[r->r.n_secs++] = json_number_value(v);
  }
  if (json_is_string(kh)) r->r.kernel_hash = strtoull(json_string_value(kh), NULL, 10);
  fill_view(r);
  if (find_rec(db, r->workload, r->trace) >= 0) {
    free_record(r);
    return true; /* a duplicate: the first one stands */
  }
  push_record(db, r);
  return true;
}

static bool load_file(search_db *db, const char *path, line_fn fn, dg_status *st) {
  struct stat sb;
  if (stat(path, &sb) != 0) {
    if (errno == ENOENT) return true;
    return dg_fail(st, DG_ERR_IO, "%s: %s", path, strerror(errno));
  }
  size_t len;
  char *text = dg_read_file(path, &len, st);
  if (!text) return false;
  size_t pos = 0, good_end = 0;
  int line = 0;
  while (pos < len) {
    line++;
    char *nl = memchr(text + pos, '\n', len - pos);
    if (!nl) {
      warn(db, "%s:%d: torn last line (%zu bytes, no newline) cut off", path, line, len - pos);
      if (truncate(path, (off_t)good_end) != 0)
        return dg_fail(st, DG_ERR_IO, "%s: cannot cut the torn last line: %s", path,
                       strerror(errno));
      break;
    }
    *nl = 0;
    char where[600];
    snprintf(where, sizeof where, "%s:%d", path, line);
    const char *s = text + pos;
    while (*s == ' ' || *s == '\t' || *s == '\r') s++;
    if (*s) {
      json_error_t je;
      json_t *j = json_loads(s, 0, &je);
      if (!j || !json_is_object(j))
        warn(db, "%s: not a JSON object (%s); skipped", where, j ? "other value" : je.text);
      else
        fn(db, j, where);
      json_decref(j);
    }
    pos = (size_t)(nl - text) + 1;
    good_end = pos;
  }
  free(text);
  return true;
}

bool search_db_open(const char *dir, search_db **out, dg_status *st) {
  dg_status_ok(st);
  *out = NULL;
  if (!dg_mkdirs(dir, st)) return false;
  search_db *db = dg_calloc(1, sizeof *db);
  db->dir = dg_strdup(dir);
  db->wl_path = join_path(dir, "workloads.jsonl");
  db->rec_path = join_path(dir, "records.jsonl");
  if (!load_file(db, db->wl_path, load_workload, st) ||
      !load_file(db, db->rec_path, load_record, st)) {
    search_db_close(db);
    return false;
  }
  *out = db;
  return true;
}

void search_db_close(search_db *db) {
  if (!db) return;
  for (size_t i = 0; i < db->wls.len; i++) {
    free(db->wls.data[i].hash);
    free(db->wls.data[i].spec);
    free(db->wls.data[i].kernel);
  }
  DG_VEC_FREE(&db->wls);
  for (size_t i = 0; i < db->recs.len; i++) free_record(db->recs.data[i]);
  DG_VEC_FREE(&db->recs);
  free(db->slots);
  free(db->dir);
  free(db->wl_path);
  free(db->rec_path);
  free(db);
}

int search_db_warning_count(const search_db *db) { return db->warnings; }

/* ---- workloads ----------------------------------------------------------- */

bool search_db_add_workload(search_db *db, const char *spec, const dg_func *f, char hash[21],
                            dg_status *st) {
  dg_status_ok(st);
  snprintf(hash, 21, "%llu", (unsigned long long)ir_func_hash(f));
  for (size_t i = 0; i < db->wls.len; i++)
    if (strcmp(db->wls.data[i].hash, hash) == 0) return true;
  char *kernel = ir_print(f);
  json_t *j = json_pack("{s:s, s:s, s:s}", "workload", hash, "spec", spec ? spec : "",
                        "kernel", kernel);
  char *line = dump_compact(j);
  json_decref(j);
  size_t n = strlen(line);
  char *full = dg_malloc(n + 2);
  memcpy(full, line, n);
  full[n] = '\n';
  full[n + 1] = 0;
  free(line);
  bool ok = append_line(db->wl_path, full, st);
  free(full);
  if (!ok) {
    free(kernel);
    return false;
  }
  db_workload w = {dg_strdup(hash), dg_strdup(spec ? spec : ""), kernel};
  DG_VEC_PUSH(&db->wls, w);
  return true;
}

int search_db_workload_count(const search_db *db) { return (int)db->wls.len; }

const char *search_db_workload_hash(const search_db *db, int i) {
  DG_ASSERT(i >= 0 && (size_t)i < db->wls.len);
  return db->wls.data[i].hash;
}

static const db_workload *find_wl(const search_db *db, const char *hash) {
  for (size_t i = 0; i < db->wls.len; i++)
    if (strcmp(db->wls.data[i].hash, hash) == 0) return &db->wls.data[i];
  return NULL;
}

const char *search_db_workload_spec(const search_db *db, const char *hash) {
  const db_workload *w = find_wl(db, hash);
  return w ? w->spec : NULL;
}

const char *search_db_workload_kernel(const search_db *db, const char *hash) {
  const db_workload *w = find_wl(db, hash);
  return w ? w->kernel : NULL;
}

/* ---- records ------------------------------------------------------------- */

bool search_db_add_record(search_db *db, const search_record *in, bool *added, dg_status *st) {
  dg_status_ok(st);
  if (added) *added = false;
  json_error_t je;
  json_t *trace = json_loads(in->trace, 0, &je);
  if (!trace || !json_is_array(trace)) {
    json_decref(trace);
    return dg_fail(st, DG_ERR_PARSE, "record trace: not a JSON array: %s", je.text);
  }
  char *canon = dump_compact(trace);
  if (find_rec(db, in->workload, canon) >= 0) {
    free(canon);
    json_decref(trace);
    return true;
  }
  db_record *r = dg_calloc(1, sizeof *r);
  r->workload = dg_strdup(in->workload);
  r->trace = canon;
  r->target = dg_strdup(in->target ? in->target : "");
  r->date = in->date ? dg_strdup(in->date) : now_iso();
  r->error = in->error ? dg_strdup(in->error) : NULL;
  r->secs = dg_calloc((size_t)(in->n_secs > 0 ? in->n_secs : 1), sizeof(double));
  for (int i = 0; i < in->n_secs; i++) r->secs[i] = in->run_secs[i];
  r->r.n_secs = in->n_secs > 0 ? in->n_secs : 0;
  r->r.kernel_hash = in->kernel_hash;
  fill_view(r);

  json_t *j = json_object();
  json_object_set_new(j, "workload", json_string(r->workload));
  json_object_set_new(j, "trace", trace);
  json_t *secs = json_array();
  for (int i = 0; i < r->r.n_secs; i++) json_array_append_new(secs, json_real(r->secs[i]));
  json_object_set_new(j, "run_secs", r->r.n_secs ? secs : json_null());
  if (!r->r.n_secs) json_decref(secs);
  json_object_set_new(j, "error", r->error ? json_string(r->error) : json_null());
  json_object_set_new(j, "target", json_string(r->target));
  json_object_set_new(j, "date", json_string(r->date));
  char kh[24];
  snprintf(kh, sizeof kh, "%llu", (unsigned long long)r->r.kernel_hash);
  json_object_set_new(j, "kernel_hash", json_string(kh));
  char *line = json_dumps(j, JSON_COMPACT | JSON_PRESERVE_ORDER | JSON_REAL_PRECISION(17));
  json_decref(j);
  size_t n = strlen(line);
  char *full = dg_malloc(n + 2);
  memcpy(full, line, n);
  full[n] = '\n';
  full[n + 1] = 0;
  free(line);
  bool ok = append_line(db->rec_path, full, st);
  free(full);
  if (!ok) {
    free_record(r);
    return false;
  }
  push_record(db, r);
  if (added) *added = true;
  return true;
}

int search_db_record_count(const search_db *db) { return (int)db->recs.len; }

const search_record *search_db_record_at(const search_db *db, int i) {
  DG_ASSERT(i >= 0 && (size_t)i < db->recs.len);
  return &db->recs.data[i]->r;
}

int search_db_workload_trials(const search_db *db, const char *workload) {
  int n = 0;
  for (size_t i = 0; i < db->recs.len; i++)
    if (strcmp(db->recs.data[i]->workload, workload) == 0) n++;
  return n;
}

double search_record_secs(const search_record *r) {
  if (r->n_secs <= 0) return SEARCH_FAILED_SECS;
  double s = 0;
  for (int i = 0; i < r->n_secs; i++) s += r->run_secs[i];
  return s / r->n_secs;
}

bool search_record_valid(const search_record *r) {
  bool ran = false;
  for (int i = 0; i < r->n_secs; i++)
    if (r->run_secs[i] < SEARCH_FAILED_SECS) ran = true;
  if (!ran) return false;
  /* at least one instruction before EnterPostproc: the trace's first
   * instruction is not the marker */
  const char *p = strstr(r->trace, "[[[");
  return p && strncmp(p + 3, "\"EnterPostproc\"", 15) != 0;
}

typedef struct {
  const search_record *r;
  double secs;
  size_t pos;
} ranked;

/* by time, then by position in the file, so equal times keep their order */
static int cmp_ranked(const void *a, const void *b) {
  const ranked *x = a, *y = b;
  if (x->secs != y->secs) return x->secs < y->secs ? -1 : 1;
  return x->pos < y->pos ? -1 : x->pos > y->pos;
}

int search_db_top_k(const search_db *db, const char *workload, int k, const search_record **out) {
  if (k <= 0) return 0;
  DG_VEC(ranked) v = {0};
  for (size_t i = 0; i < db->recs.len; i++) {
    const search_record *r = &db->recs.data[i]->r;
    if (strcmp(r->workload, workload) == 0 && search_record_valid(r)) {
      ranked x = {r, search_record_secs(r), i};
      DG_VEC_PUSH(&v, x);
    }
  }
  if (v.len > 1) qsort(v.data, v.len, sizeof *v.data, cmp_ranked);
  int n = (int)(v.len < (size_t)k ? v.len : (size_t)k);
  for (int i = 0; i < n; i++) out[i] = v.data[i].r;
  DG_VEC_FREE(&v);
  return n;
}

/* ---- export to TVM ------------------------------------------------------- */

static char *base64(const char *s, size_t n) {
  static const char tab[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  char *o = dg_malloc(4 * ((n + 2) / 3) + 1);
  size_t k = 0;
  for (size_t i = 0; i < n; i += 3) {
    uint32_t v = (uint32_t)(unsigned char)s[i] << 16;
    if (i + 1 < n) v |= (uint32_t)(unsigned char)s[i + 1] << 8;
    if (i + 2 < n) v |= (unsigned char)s[i + 2];
    o[k++] = tab[(v >> 18) & 63];
    o[k++] = tab[(v >> 12) & 63];
    o[k++] = i + 1 < n ? tab[(v >> 6) & 63] : '=';
    o[k++] = i + 2 < n ? tab[v & 63] : '=';
  }
  o[k] = 0;
  return o;
}

static const char *tvm_dtype(dg_dtype t) {
  switch (t) {
    case DG_BOOL: return "bool";
    case DG_I8: return "int8";
    case DG_I32: return "int32";
    case DG_I64: return "int64";
    case DG_F16: return "float16";
    case DG_F32: return "float32";
    case DG_F64: return "float64";
    case DG_DTYPE_COUNT: break;
  }
  return "unknown";
}

static json_t *tvm_target(const char *target) {
  if (strcmp(target, "cuda") == 0)
    return json_pack("{s:s, s:[s,s], s:s, s:i, s:i, s:i}", "kind", "cuda", "keys", "cuda", "gpu",
                     "tag", "", "max_num_threads", 1024, "max_threads_per_block", 1024,
                     "thread_warp_size", 32);
  return json_pack("{s:s, s:[s], s:s}", "kind", strcmp(target, "cpu") == 0 ? "c" : target,
                   "keys", "cpu", "tag", "");
}

bool search_db_export_tvm(const search_db *db, const char *out_dir, dg_status *st) {
  dg_status_ok(st);
  if (!dg_mkdirs(out_dir, st)) return false;
  dg_str wl, rec;
  dg_str_init(&wl);
  dg_str_init(&rec);
  json_t **args = dg_calloc(db->wls.len ? db->wls.len : 1, sizeof(json_t *));
  bool ok = true;
  for (size_t i = 0; i < db->wls.len && ok; i++) {
    const db_workload *w = &db->wls.data[i];
    char *b = base64(w->kernel, strlen(w->kernel));
    dg_str_printf(&wl, "[\"%s\",\"%s\"]\n", w->hash, b);
    free(b);
    dg_func *f = ir_parse(w->kernel, w->hash, st);
    if (!f) {
      dg_status_prefix(st, "workload %s", w->hash);
      ok = false;
      break;
    }
    args[i] = json_array();
    for (int p = 0; p < f->n_params; p++) {
      json_t *shape = json_array();
      for (int d = 0; d < f->params[p]->ndim; d++)
        json_array_append_new(shape, json_integer(f->params[p]->shape[d]));
      json_array_append_new(args[i], json_pack("[s,s,o]", "TENSOR",
                                               tvm_dtype(f->params[p]->dtype), shape));
    }
    ir_func_free(f);
  }
  for (size_t i = 0; i < db->recs.len && ok; i++) {
    const db_record *r = db->recs.data[i];
    int wi = -1;
    for (size_t k = 0; k < db->wls.len; k++)
      if (strcmp(db->wls.data[k].hash, r->workload) == 0) wi = (int)k;
    if (wi < 0) continue; /* a record without its workload cannot be replayed by TVM */
    json_t *trace = json_loads(r->trace, 0, NULL);
    json_t *secs = json_array();
    if (r->r.n_secs)
      for (int k = 0; k < r->r.n_secs; k++) json_array_append_new(secs, json_real(r->secs[k]));
    else
      json_array_append_new(secs, json_real(SEARCH_FAILED_SECS));
    json_t *line = json_pack("[i,[o,o,o,O]]", wi, trace, secs, tvm_target(r->target), args[wi]);
    char *s = json_dumps(line, JSON_COMPACT | JSON_SORT_KEYS | JSON_REAL_PRECISION(17));
    dg_str_puts(&rec, s);
    dg_str_putc(&rec, '\n');
    free(s);
    json_decref(line);
  }
  for (size_t i = 0; i < db->wls.len; i++) json_decref(args[i]);
  free(args);
  if (ok) {
    char *p1 = join_path(out_dir, "database_workload.json");
    char *p2 = join_path(out_dir, "database_tuning_record.json");
    ok = dg_write_file_atomic(p1, wl.s ? wl.s : "", wl.len, st) &&
         dg_write_file_atomic(p2, rec.s ? rec.s : "", rec.len, st);
    free(p1);
    free(p2);
  }
  dg_str_free(&wl);
  dg_str_free(&rec);
  return ok;
}
