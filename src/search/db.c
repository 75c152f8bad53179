/* db.c: the tuning database, append-only JSON-lines files in a directory
 * (workloads.jsonl, records.jsonl, baselines.jsonl; layout in search.h and
 * docs/search.md), its shards (one zstd-compressed file of lines, the form
 * records are committed in), merging, and the export to TVM's JSONDatabase
 * files.
 *
 * Writers and readers. search_db_open opens for writing: it creates the
 * directory and takes an exclusive flock on its file `writer.lock` (which
 * then names the holder's pid), so a second writer, in this process or
 * another, is refused naming the directory and the holder. The lock goes
 * with the process: the kernel drops it when the writer exits or is
 * killed, and processes forked from the writer do not keep it (their copy
 * of the descriptor is closed in the child at fork). search_db_open_readonly
 * never writes anything: a missing directory is an error naming it, and it
 * takes no lock, so readers run alongside a writer.
 *
 * Durability: a line is appended by a single write() on an O_APPEND file
 * descriptor followed by fsync, so a killed writer leaves at most one torn
 * last line. A writer opening the files cuts that torn tail off (with a
 * warning) so the next append starts on a line of its own; a reader skips
 * it with a warning and leaves the file as it is (a live writer may be
 * finishing that line). Any other line that does not parse or lacks a field
 * is skipped with a warning naming file:line.
 *
 * Records are unique by (workload, trace): appends and merges never add a
 * second line for a pair the database holds; the trace is kept as
 * jansson's compact dump of its JSON value, the same text whether it came
 * from a caller or a file. Files written by concurrent writers before the
 * lock existed may repeat a pair: on load the first line stands as the
 * record and the others are its copies, and the record's time is then the
 * median over the copies that ran of each one's mean (search_record_secs),
 * so one lucky or unlucky duplicate does not decide `db best`. Merges and
 * shards carry the first line only.
 *
 * Does not recompute workload hashes from the kernel text (TVM does): the
 * stored hash is trusted. Records of a workload that no workload line
 * names are kept, and reported once per workload on open (export, recall
 * and the cost model cannot rebuild their kernels and leave them out).
 */
#include "dragon/search.h"

#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <pthread.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "dragon/lower.h"
#include "dragon/rt_cuda.h"

typedef struct {
  char *hash, *spec, *kernel;
  bool unread; /* a view's (search_db_open_some): its records left unread */
} db_workload;

/* A loaded record: search_record's pointers point into these. copies:
 * the mean times of the lines of its file that repeat its (workload,
 * trace), itself included, that ran; n_lines counts them all. */
typedef struct {
  search_record r;
  char *workload, *trace, *error, *target, *date, *build, *device;
  double *secs;
  DG_VEC(double) copies;
  int n_lines;
} db_record;

/* The records of one workload: their indices in the table, in the order
 * they were filed. workload points into the first record's string. */
typedef struct {
  const char *workload;
  DG_VEC(int) idx;
} rec_group;

/* Records or baselines: the loaded lines, their file, an index keyed by
 * (workload, trace), and the records grouped by workload (an index over
 * the groups keyed by workload), so that a workload's records are found
 * without a scan of the table. */
typedef struct {
  DG_VEC(db_record *) v;
  dg_slots slots;
  DG_VEC(rec_group) groups;
  dg_slots group_slots;
  char *path;
} rec_table;

/* A workload whose search ran out of new kernels (measured whole): its
 * labelling is done though it has fewer records than asked for. */
typedef struct {
  char *workload, *build, *date;
  int64_t kernels; /* its records when the search ran out */
} db_mark;

struct search_db {
  char *dir;
  char *wl_path;
  char *marks_path;
  DG_VEC(db_mark) marks; /* unique by workload; the first line stands */
  DG_VEC(db_workload) wls;
  dg_slots wl_slots; /* an index over wls, keyed by hash */
  rec_table recs, bases;
  int warnings;
  bool readonly;
  bool partial;   /* a view of some workloads (search_db_open_some) */
  int64_t unread; /* its record and baseline lines left unread */
  int lock_fd;            /* writers: the flock'ed writer.lock; -1 */
  search_db *next_locked; /* the list of this process's writers */
};

/* ---- small helpers ------------------------------------------------------- */

const char *search_build_id(void) {
  static char id[96];
  if (!id[0]) snprintf(id, sizeof id, "dragon %s lower %d", dg_build_commit(), LOWER_VERSION);
  return id;
}

static uint64_t rec_key(const char *workload, const char *trace) {
  uint64_t h = dg_hash_bytes(workload, strlen(workload), 0x5eed);
  return dg_hash_bytes(trace, strlen(trace), h);
}

static uint64_t rec_key_at(const void *ctx, size_t i) {
  const db_record *r = ((const rec_table *)ctx)->v.data[i];
  return rec_key(r->workload, r->trace);
}

static int find_rec(const rec_table *t, const char *workload, const char *trace) {
  size_t k = 0;
  for (int p; (p = dg_slots_next(&t->slots, rec_key(workload, trace), &k)) >= 0;) {
    const db_record *r = t->v.data[p];
    if (strcmp(r->workload, workload) == 0 && strcmp(r->trace, trace) == 0) return p;
  }
  return -1;
}

static uint64_t group_key(const char *workload) {
  return dg_hash_bytes(workload, strlen(workload), 0x9a7);
}

static uint64_t group_key_at(const void *ctx, size_t i) {
  return group_key(((const rec_table *)ctx)->groups.data[i].workload);
}

/* The group of a workload's records, or NULL. */
static rec_group *find_group(const rec_table *t, const char *workload) {
  size_t k = 0;
  for (int p; (p = dg_slots_next(&t->group_slots, group_key(workload), &k)) >= 0;)
    if (strcmp(t->groups.data[p].workload, workload) == 0) return &t->groups.data[p];
  return NULL;
}

/* Appends r to the table, its index and its workload's group (made when
 * it is the first). */
static void push_record(rec_table *t, db_record *r) {
  DG_VEC_PUSH(&t->v, r);
  int idx = (int)t->v.len - 1;
  dg_slots_add(&t->slots, t->v.len, rec_key(r->workload, r->trace), rec_key_at, t);
  rec_group *g = find_group(t, r->workload);
  if (!g) {
    rec_group fresh = {r->workload, {0}};
    DG_VEC_PUSH(&t->groups, fresh);
    dg_slots_add(&t->group_slots, t->groups.len, group_key(r->workload), group_key_at, t);
    g = &t->groups.data[t->groups.len - 1];
  }
  DG_VEC_PUSH(&g->idx, idx);
}

/* A workload's records: their indices in t, in filing order (*n of them;
 * NULL when none). */
static const int *group_of(const rec_table *t, const char *workload, int *n) {
  const rec_group *g = find_group(t, workload);
  *n = g ? (int)g->idx.len : 0;
  return g ? g->idx.data : NULL;
}

/* Also called from the threads that parse a file's lines (parse_lines). */
static pthread_mutex_t warn_mu = PTHREAD_MUTEX_INITIALIZER;
static void warn(search_db *db, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void warn(search_db *db, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  pthread_mutex_lock(&warn_mu);
  fprintf(stderr, "warning: ");
  vfprintf(stderr, fmt, ap);
  fputc('\n', stderr);
  db->warnings++;
  pthread_mutex_unlock(&warn_mu);
  va_end(ap);
}

static char *join_path(const char *dir, const char *name) {
  dg_str s;
  dg_str_init(&s);
  dg_str_printf(&s, "%s/%s", dir, name);
  return dg_str_take(&s);
}

static char *dump_compact(const json_t *j) {
  return json_dumps(j, JSON_COMPACT | JSON_ENCODE_ANY | JSON_REAL_PRECISION(17));
}

static void free_record(db_record *r) {
  if (!r) return;
  free(r->workload);
  free(r->trace);
  free(r->error);
  free(r->target);
  free(r->date);
  free(r->build);
  free(r->device);
  free(r->secs);
  DG_VEC_FREE(&r->copies);
  free(r);
}

static void fill_view(db_record *r) {
  r->r.workload = r->workload;
  r->r.trace = r->trace;
  r->r.run_secs = r->secs;
  r->r.error = r->error;
  r->r.target = r->target;
  r->r.date = r->date;
  r->r.build = r->build;
  r->r.device = r->device;
}

static void table_free(rec_table *t) {
  for (size_t i = 0; i < t->v.len; i++) free_record(t->v.data[i]);
  DG_VEC_FREE(&t->v);
  dg_slots_free(&t->slots);
  for (size_t i = 0; i < t->groups.len; i++) DG_VEC_FREE(&t->groups.data[i].idx);
  DG_VEC_FREE(&t->groups);
  dg_slots_free(&t->group_slots);
  free(t->path);
}

static int cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return x < y ? -1 : x > y;
}

/* ---- lines --------------------------------------------------------------- */

/* A record's line (no newline), its fields in the files' order. With tag
 * (shards), "t" comes first. */
static char *record_line(const db_record *r, const char *tag) {
  json_t *j = json_object();
  if (tag) json_object_set_new(j, "t", json_string(tag));
  json_object_set_new(j, "workload", json_string(r->workload));
  /* the trace is kept as its compact dump already: spliced in whole, not
   * parsed and dumped again (two thirds of a merge's time went to that) */
  json_object_set_new(j, "trace", json_null());
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
  json_object_set_new(j, "build", json_string(r->build));
  json_object_set_new(j, "device", json_string(r->device));
  char *line = json_dumps(j, JSON_COMPACT | JSON_PRESERVE_ORDER | JSON_REAL_PRECISION(17));
  json_decref(j);
  /* inside a JSON string every quote is escaped, so the first `,"trace":`
   * is the key's */
  static const char key[] = ",\"trace\":null";
  char *at = strstr(line, key);
  DG_ASSERT(at);
  size_t head = (size_t)(at - line) + sizeof key - 5, tail = strlen(at + sizeof key - 1);
  size_t tn = strlen(r->trace);
  char *out = dg_malloc(head + tn + tail + 1);
  memcpy(out, line, head);
  memcpy(out + head, r->trace, tn);
  memcpy(out + head + tn, at + sizeof key - 1, tail + 1);
  free(line);
  return out;
}

static char *workload_line(const db_workload *w, const char *tag) {
  json_t *j = json_object();
  if (tag) json_object_set_new(j, "t", json_string(tag));
  json_object_set_new(j, "workload", json_string(w->hash));
  json_object_set_new(j, "spec", json_string(w->spec));
  json_object_set_new(j, "kernel", json_string(w->kernel));
  char *line = json_dumps(j, JSON_COMPACT | JSON_PRESERVE_ORDER);
  json_decref(j);
  return line;
}

static char *mark_line(const db_mark *m, const char *tag) {
  json_t *j = json_object();
  if (tag) json_object_set_new(j, "t", json_string(tag));
  json_object_set_new(j, "workload", json_string(m->workload));
  json_object_set_new(j, "exhausted", json_integer((json_int_t)m->kernels));
  json_object_set_new(j, "build", json_string(m->build));
  json_object_set_new(j, "date", json_string(m->date));
  char *line = json_dumps(j, JSON_COMPACT | JSON_PRESERVE_ORDER);
  json_decref(j);
  return line;
}

static void put_line(dg_str *out, char *line) {
  dg_str_puts(out, line);
  dg_str_putc(out, '\n');
  free(line);
}

/* A record from a parsed line, or NULL (warned) when a field is missing or
 * of the wrong type. */
static db_record *record_from_json(search_db *db, json_t *j, const char *where) {
  const char *wl = json_string_value(json_object_get(j, "workload"));
  json_t *trace = json_object_get(j, "trace");
  json_t *secs = json_object_get(j, "run_secs");
  json_t *err = json_object_get(j, "error");
  const char *target = json_string_value(json_object_get(j, "target"));
  const char *date = json_string_value(json_object_get(j, "date"));
  const char *build = json_string_value(json_object_get(j, "build"));
  const char *device = json_string_value(json_object_get(j, "device"));
  json_t *kh = json_object_get(j, "kernel_hash");
  if (!wl || !json_is_array(trace) || !target) {
    warn(db, "%s: record needs workload, trace (an array) and target; skipped", where);
    return NULL;
  }
  if (secs && !json_is_null(secs) && !json_is_array(secs)) {
    warn(db, "%s: run_secs must be an array or null; skipped", where);
    return NULL;
  }
  size_t n = json_is_array(secs) ? json_array_size(secs) : 0;
  if (n > DG_ARRAY_LEN(((search_measure_result *)0)->secs)) {
    warn(db, "%s: run_secs has %zu values, more than %zu; skipped", where, n,
         DG_ARRAY_LEN(((search_measure_result *)0)->secs));
    return NULL;
  }
  for (size_t i = 0; i < n; i++) {
    json_t *v = json_array_get(secs, i);
    double x = json_is_number(v) ? json_number_value(v) : -1;
    if (!(x > 0)) {
      warn(db, "%s: run_secs[%zu] is not a positive number of seconds; skipped", where, i);
      return NULL;
    }
  }
  db_record *r = dg_calloc(1, sizeof *r);
  r->workload = dg_strdup(wl);
  r->trace = dump_compact(trace);
  r->target = dg_strdup(target);
  r->date = dg_strdup(date ? date : "");
  r->build = dg_strdup(build ? build : "");
  r->device = dg_strdup(device ? device : "");
  if (json_is_string(err)) r->error = dg_strdup(json_string_value(err));
  r->secs = dg_calloc(n ? n : 1, sizeof(double));
  for (size_t i = 0; i < n; i++) r->secs[r->r.n_secs++] = json_number_value(json_array_get(secs, i));
  if (json_is_string(kh)) r->r.kernel_hash = strtoull(json_string_value(kh), NULL, 10);
  fill_view(r);
  return r;
}

/* ---- loading ------------------------------------------------------------- */

typedef bool (*line_fn)(search_db *db, json_t *j, const char *where, void *ctx);

static uint64_t wl_key(const char *hash) { return dg_hash_bytes(hash, strlen(hash), 0x3c1); }

static uint64_t wl_key_at(const void *ctx, size_t i) {
  return wl_key(((const search_db *)ctx)->wls.data[i].hash);
}

static const db_workload *find_wl(const search_db *db, const char *hash) {
  size_t k = 0;
  for (int p; (p = dg_slots_next(&db->wl_slots, wl_key(hash), &k)) >= 0;)
    if (strcmp(db->wls.data[p].hash, hash) == 0) return &db->wls.data[p];
  return NULL;
}

/* Whether a view holds the records of workload hash: a workload no line
 * names is held, as a whole database holds it. */
static bool held(const search_db *db, const char *hash) {
  if (!db->partial) return true;
  const db_workload *w = find_wl(db, hash);
  return !w || !w->unread;
}

/* The workload a record line opens with (`{"workload":"HASH",`, as every
 * writer of these files writes it) into out, or false: the line is parsed
 * whole before a view decides. */
static bool line_workload(const char *s, char out[24]) {
  static const char pre[] = "{\"workload\":\"";
  if (strncmp(s, pre, sizeof pre - 1) != 0) return false;
  s += sizeof pre - 1;
  size_t n = 0;
  while (n < 23 && s[n] && s[n] != '"' && s[n] != '\\') n++;
  if (s[n] != '"') return false;
  memcpy(out, s, n);
  out[n] = 0;
  return true;
}

/* Appends w (its strings now the database's) to the workloads and their
 * index. */
static void push_wl(search_db *db, db_workload w) {
  DG_VEC_PUSH(&db->wls, w);
  dg_slots_add(&db->wl_slots, db->wls.len, wl_key(w.hash), wl_key_at, db);
}

static void free_wls(search_db *db) {
  for (size_t i = 0; i < db->wls.len; i++) {
    free(db->wls.data[i].hash);
    free(db->wls.data[i].spec);
    free(db->wls.data[i].kernel);
  }
  DG_VEC_FREE(&db->wls);
  dg_slots_free(&db->wl_slots);
}

/* ctx: a dg_str collecting the lines of new workloads (merges), or NULL. */
static bool load_workload(search_db *db, json_t *j, const char *where, void *ctx) {
  const char *hash = json_string_value(json_object_get(j, "workload"));
  const char *spec = json_string_value(json_object_get(j, "spec"));
  const char *kernel = json_string_value(json_object_get(j, "kernel"));
  if (!hash || !spec || !kernel) {
    warn(db, "%s: workload line needs string fields workload, spec, kernel; skipped", where);
    return false;
  }
  if (find_wl(db, hash)) return true;
  db_workload w = {dg_strdup(hash), dg_strdup(spec), dg_strdup(kernel)};
  push_wl(db, w);
  if (ctx) put_line(ctx, workload_line(&w, NULL));
  return true;
}

static const db_mark *find_mark(const search_db *db, const char *workload) {
  for (size_t i = 0; i < db->marks.len; i++)
    if (strcmp(db->marks.data[i].workload, workload) == 0) return &db->marks.data[i];
  return NULL;
}

static void free_marks(search_db *db) {
  for (size_t i = 0; i < db->marks.len; i++) {
    free(db->marks.data[i].workload);
    free(db->marks.data[i].build);
    free(db->marks.data[i].date);
  }
  DG_VEC_FREE(&db->marks);
}

/* ctx: a dg_str collecting the lines of new marks (merges), or NULL. */
static bool load_mark(search_db *db, json_t *j, const char *where, void *ctx) {
  const char *wl = json_string_value(json_object_get(j, "workload"));
  json_t *n = json_object_get(j, "exhausted");
  const char *build = json_string_value(json_object_get(j, "build"));
  const char *date = json_string_value(json_object_get(j, "date"));
  if (!wl || !json_is_integer(n) || json_integer_value(n) < 0) {
    warn(db, "%s: an exhausted line needs workload (a string) and exhausted (a count of records, "
             ">= 0); skipped", where);
    return false;
  }
  if (find_mark(db, wl)) return true;
  db_mark m = {dg_strdup(wl), dg_strdup(build ? build : ""), dg_strdup(date ? date : ""),
               (int64_t)json_integer_value(n)};
  DG_VEC_PUSH(&db->marks, m);
  if (ctx) put_line(ctx, mark_line(&m, NULL));
  return true;
}

/* A record or baseline line into table t (ctx: a load_dest). */
typedef struct {
  rec_table *t;
  dg_str *out; /* lines of new entries (merges), or NULL */
  int64_t added;
  int64_t repeats; /* lines that repeat an earlier (workload, trace) */
  int64_t memory_full; /* failures of a full GPU memory: no verdict, not loaded */
} load_dest;

bool search_error_memory_full(const char *error) {
  return error && strstr(error, "CUDA_ERROR_OUT_OF_MEMORY") != NULL;
}

/* A record built from its line (record_from_json) into d's table. A
 * failure that says the GPU's memory was full is no verdict: dropped, so
 * its kernel counts as unmeasured. */
static void insert_record(load_dest *d, db_record *r) {
  if (r->r.n_secs == 0 && search_error_memory_full(r->r.error)) {
    d->memory_full++;
    free_record(r);
    return;
  }
  int at = find_rec(d->t, r->workload, r->trace);
  if (at >= 0) {
    /* a repeated (workload, trace): the first line stands as the record,
     * this one is a copy of it */
    db_record *first = d->t->v.data[at];
    first->n_lines++;
    if (r->r.n_secs > 0) DG_VEC_PUSH(&first->copies, search_record_secs(&r->r));
    d->repeats++;
    free_record(r);
    return;
  }
  r->n_lines = 1;
  if (r->r.n_secs > 0) DG_VEC_PUSH(&r->copies, search_record_secs(&r->r));
  push_record(d->t, r);
  d->added++;
  if (d->out) put_line(d->out, record_line(r, NULL));
}

static bool load_record_into(search_db *db, json_t *j, const char *where, void *ctx) {
  db_record *r = record_from_json(db, j, where);
  if (!r) return false;
  insert_record(ctx, r);
  return true;
}

/* How a file's lines are read: each JSON object to fn in order; where a
 * line is a record (record_dest says into which table, from the object
 * alone), it is built on the parsing threads and handed to rec_fn in order
 * instead. */
typedef struct {
  line_fn fn;
  load_dest *(*record_dest)(json_t *j, void *ctx); /* NULL: no record lines */
  bool (*rec_fn)(search_db *db, db_record *r, load_dest *d, const char *where, void *ctx);
  void *ctx;
} line_reader;

static load_dest *whole_file_dest(json_t *j, void *ctx) {
  (void)j;
  return ctx;
}

static bool insert_in_order(search_db *db, db_record *r, load_dest *d, const char *where,
                            void *ctx) {
  (void)db, (void)where, (void)ctx;
  insert_record(d, r);
  return true;
}

/* A line of a file being read: its text, and what the threads made of it. */
typedef struct {
  char *s;          /* NUL-terminated, leading blanks skipped */
  int line;         /* 1-based */
  json_t *j;        /* an object that is not a record */
  db_record *rec;   /* a record, built */
  load_dest *dest;  /* its table */
  bool unread;      /* a record of a workload the view leaves unread */
  bool bad;         /* not a JSON object: bad_why says why */
  char bad_why[160];
} read_line;

typedef struct {
  search_db *db;
  const char *name;
  const line_reader *rd;
  read_line *lines;
  size_t n, per_task;
} read_job;

static void where_of(char *buf, size_t n, const char *name, int line) {
  snprintf(buf, n, "%s:%d", name, line);
}

/* On a thread: lines [i * per_task, ...) parsed, their records built. */
static void read_task(void *p, int i) {
  read_job *r = p;
  size_t lo = (size_t)i * r->per_task, hi = lo + r->per_task < r->n ? lo + r->per_task : r->n;
  for (size_t k = lo; k < hi; k++) {
    read_line *l = &r->lines[k];
    char wl[24];
    if (r->db->partial && r->rd->record_dest && line_workload(l->s, wl) && !held(r->db, wl)) {
      l->unread = true;
      continue;
    }
    json_error_t je;
    json_t *j = json_loads(l->s, 0, &je);
    if (!j || !json_is_object(j)) {
      l->bad = true;
      snprintf(l->bad_why, sizeof l->bad_why, "%s", j ? "other value" : je.text);
      json_decref(j);
      continue;
    }
    load_dest *d = r->rd->record_dest ? r->rd->record_dest(j, r->rd->ctx) : NULL;
    if (d) {
      char where[600];
      where_of(where, sizeof where, r->name, l->line);
      l->rec = record_from_json(r->db, j, where); /* NULL: warned, skipped */
      l->dest = d;
      if (l->rec && !held(r->db, l->rec->workload)) {
        free_record(l->rec);
        l->rec = NULL;
        l->unread = true;
      }
      json_decref(j);
    } else {
      l->j = j;
    }
  }
}

enum { PARALLEL_READ_BYTES = 1 << 20 }; /* smaller files are read on this thread */

/* Parses the lines of text (len bytes, NUL-terminated at len) and hands
 * each JSON object to the reader, in order; where names file:line. Large
 * files are parsed on every core (records built there too), then handed
 * over in order on this thread. Returns the offset past the last complete
 * line (a last line without a newline is torn). */
static size_t parse_lines(search_db *db, const char *name, char *text, size_t len,
                          const line_reader *rd) {
  DG_VEC(read_line) lines = {0};
  size_t pos = 0, good_end = 0;
  int line = 0;
  while (pos < len) {
    line++;
    char *nl = memchr(text + pos, '\n', len - pos);
    if (!nl) break;
    *nl = 0;
    char *s = text + pos;
    while (*s == ' ' || *s == '\t' || *s == '\r') s++;
    if (*s) {
      read_line l = {0};
      l.s = s;
      l.line = line;
      DG_VEC_PUSH(&lines, l);
    }
    pos = (size_t)(nl - text) + 1;
    good_end = pos;
  }
  read_job job = {db, name, rd, lines.data, lines.len, lines.len ? lines.len : 1};
  int threads = len >= PARALLEL_READ_BYTES ? rt_cpu_count() : 1;
  if (threads > 1 && lines.len > 1) {
    size_t tasks = (size_t)threads * 8;
    job.per_task = (lines.len + tasks - 1) / tasks;
    int n_tasks = (int)((lines.len + job.per_task - 1) / job.per_task);
    rt_tasks_free(rt_tasks_start(n_tasks, threads, read_task, &job));
  } else if (lines.len > 0) {
    read_task(&job, 0);
  }
  for (size_t k = 0; k < lines.len; k++) {
    read_line *l = &lines.data[k];
    char where[600];
    where_of(where, sizeof where, name, l->line);
    if (l->unread) {
      db->unread++;
    } else if (l->bad) {
      warn(db, "%s: not a JSON object (%s); skipped", where, l->bad_why);
    } else if (l->rec) {
      if (!rd->rec_fn(db, l->rec, l->dest, where, rd->ctx)) free_record(l->rec);
    } else if (l->j) {
      rd->fn(db, l->j, where, rd->ctx);
      json_decref(l->j);
    }
  }
  DG_VEC_FREE(&lines);
  return good_end;
}

static bool load_file(search_db *db, const char *path, const line_reader *rd, dg_status *st) {
  struct stat sb;
  if (stat(path, &sb) != 0) {
    if (errno == ENOENT) return true;
    return dg_fail(st, DG_ERR_IO, "%s: %s", path, strerror(errno));
  }
  if (S_ISDIR(sb.st_mode))
    return dg_fail(st, DG_ERR_IO, "%s: is a directory, not a database file", path);
  size_t len;
  char *text = dg_read_file(path, &len, st);
  if (!text) return false;
  size_t good_end = parse_lines(db, path, text, len, rd);
  if (good_end < len) {
    int line = 1;
    for (size_t i = 0; i < good_end; i++) line += text[i] == '\n';
    if (db->readonly) {
      warn(db, "%s:%d: torn last line (%zu bytes, no newline) skipped", path, line,
           len - good_end);
    } else {
      warn(db, "%s:%d: torn last line (%zu bytes, no newline) cut off", path, line,
           len - good_end);
      if (truncate(path, (off_t)good_end) != 0) {
        free(text);
        return dg_fail(st, DG_ERR_IO, "%s: cannot cut the torn last line: %s", path,
                       strerror(errno));
      }
    }
  }
  free(text);
  return true;
}

/* ---- the writer lock ------------------------------------------------------ */

/* This process's writers, so that a forked child can close its copies of
 * their lock descriptors: a child must not keep the lock alive once the
 * writer is gone (the kernel drops a flock when the last descriptor of it
 * closes). */
static pthread_mutex_t locked_mu = PTHREAD_MUTEX_INITIALIZER;
static search_db *locked_head;
static pthread_once_t atfork_once = PTHREAD_ONCE_INIT;

static void before_fork(void) { pthread_mutex_lock(&locked_mu); }
static void after_fork_parent(void) { pthread_mutex_unlock(&locked_mu); }
static void after_fork_child(void) {
  for (search_db *d = locked_head; d; d = d->next_locked) {
    close(d->lock_fd);
    d->lock_fd = -1;
  }
  locked_head = NULL;
  pthread_mutex_unlock(&locked_mu);
}
static void install_atfork(void) {
  pthread_atfork(before_fork, after_fork_parent, after_fork_child);
}

/* The pid a lock file names, or 0. */
static long lock_holder(int fd) {
  char buf[32];
  ssize_t n = pread(fd, buf, sizeof buf - 1, 0);
  if (n <= 0) return 0;
  buf[n] = 0;
  char *end;
  long pid = strtol(buf, &end, 10);
  return end != buf && pid > 0 ? pid : 0;
}

static bool take_lock(search_db *db, dg_status *st) {
  pthread_once(&atfork_once, install_atfork);
  char *path = join_path(db->dir, "writer.lock");
  int fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  if (fd < 0) {
    dg_fail(st, DG_ERR_IO, "%s: cannot open the writer lock: %s", path, strerror(errno));
    free(path);
    return false;
  }
  free(path);
  int rc;
  while ((rc = flock(fd, LOCK_EX | LOCK_NB)) != 0 && errno == EINTR) {
  }
  if (rc != 0) {
    int err = errno;
    long pid = err == EWOULDBLOCK ? lock_holder(fd) : 0;
    close(fd);
    if (err != EWOULDBLOCK)
      return dg_fail(st, DG_ERR_IO, "%s: cannot lock the database: %s", db->dir, strerror(err));
    if (pid && dg_pid_alive(pid))
      return dg_fail(st, DG_ERR_IO,
                     "%s: the database is open for writing by another process (pid %ld); one "
                     "writer at a time",
                     db->dir, pid);
    if (pid)
      return dg_fail(st, DG_ERR_IO,
                     "%s: the database is open for writing by another process (pid %ld, which "
                     "has exited; a process it started still holds the lock); one writer at a "
                     "time",
                     db->dir, pid);
    return dg_fail(st, DG_ERR_IO,
                   "%s: the database is open for writing by another process; one writer at a time",
                   db->dir);
  }
  char num[32];
  int n = snprintf(num, sizeof num, "%ld\n", (long)getpid());
  if (ftruncate(fd, 0) != 0 || pwrite(fd, num, (size_t)n, 0) != n) {
    /* the pid is a courtesy for the message of a refused writer */
  }
  db->lock_fd = fd;
  pthread_mutex_lock(&locked_mu);
  db->next_locked = locked_head;
  locked_head = db;
  pthread_mutex_unlock(&locked_mu);
  return true;
}

static void drop_lock(search_db *db) {
  pthread_mutex_lock(&locked_mu);
  for (search_db **p = &locked_head; *p; p = &(*p)->next_locked)
    if (*p == db) {
      *p = db->next_locked;
      break;
    }
  int fd = db->lock_fd;
  db->lock_fd = -1;
  pthread_mutex_unlock(&locked_mu);
  if (fd >= 0) close(fd);
}

/* ---- opening --------------------------------------------------------------- */

/* After loading: each repeated record's time (the median of its copies),
 * and a warning per file with repeats. */
static void settle_copies(search_db *db, rec_table *t, int64_t repeats) {
  for (size_t i = 0; i < t->v.len; i++) {
    db_record *r = t->v.data[i];
    r->r.n_copies = r->n_lines > 0 ? r->n_lines : 1;
    if (r->n_lines <= 1) continue;
    size_t n = r->copies.len;
    double *c = r->copies.data;
    if (n > 1) qsort(c, n, sizeof(double), cmp_double);
    r->r.copies_secs = n == 0       ? SEARCH_FAILED_SECS
                       : n % 2 == 1 ? c[n / 2]
                                    : 0.5 * (c[n / 2 - 1] + c[n / 2]);
  }
  if (repeats > 0)
    warn(db,
         "%s: %lld lines repeat the (workload, trace) of an earlier line (written by concurrent "
         "writers); each such record's time is the median of its copies",
         t->path, (long long)repeats);
}

/* Records and baselines of workloads that no workload line names: kept,
 * but nothing can rebuild their kernels. Once per workload, with a count
 * (not counted among the warnings about skipped lines); 20 workloads at
 * most, then a line for the rest. */
static void report_unnamed(const search_db *db) {
  enum { SHOWN = 20 };
  struct {
    const char *hash;
    int64_t n;
  } u[SHOWN];
  int nu = 0;
  bool more = false;
  const rec_table *ts[2] = {&db->recs, &db->bases};
  for (int k = 0; k < 2; k++)
    for (size_t i = 0; i < ts[k]->v.len; i++) {
      const char *h = ts[k]->v.data[i]->workload;
      if (find_wl(db, h)) continue;
      int j = 0;
      while (j < nu && strcmp(u[j].hash, h) != 0) j++;
      if (j == nu) {
        if (nu == SHOWN) {
          more = true;
          continue;
        }
        u[nu].hash = h;
        u[nu++].n = 0;
      }
      u[j].n++;
    }
  for (int j = 0; j < nu; j++)
    fprintf(stderr,
            "warning: %s: %lld record%s of workload %.40s, which workloads.jsonl does not name: "
            "export, recall and the cost model leave %s out\n",
            db->dir, (long long)u[j].n, u[j].n == 1 ? "" : "s", u[j].hash,
            u[j].n == 1 ? "it" : "them");
  if (more) fprintf(stderr, "warning: %s: and records of more such workloads\n", db->dir);
}

static bool open_db(const char *dir, bool readonly, search_db_keep_fn keep, void *keep_ctx,
                    search_db **out, dg_status *st) {
  dg_status_ok(st);
  *out = NULL;
  if (readonly) {
    struct stat sb;
    if (stat(dir, &sb) != 0)
      return dg_fail(st, DG_ERR_IO, "%s: no such database directory", dir);
    if (!S_ISDIR(sb.st_mode))
      return dg_fail(st, DG_ERR_IO, "%s: not a database directory (not a directory)", dir);
  } else if (!dg_mkdirs(dir, st)) {
    return false;
  }
  search_db *db = dg_calloc(1, sizeof *db);
  db->dir = dg_strdup(dir);
  db->readonly = readonly;
  db->lock_fd = -1;
  db->wl_path = join_path(dir, "workloads.jsonl");
  db->recs.path = join_path(dir, "records.jsonl");
  db->bases.path = join_path(dir, "baselines.jsonl");
  db->marks_path = join_path(dir, "exhausted.jsonl");
  load_dest dr = {&db->recs, NULL, 0, 0, 0}, dbase = {&db->bases, NULL, 0, 0, 0};
  line_reader wl_rd = {load_workload, NULL, NULL, NULL};
  line_reader rec_rd = {load_record_into, whole_file_dest, insert_in_order, &dr};
  line_reader base_rd = {load_record_into, whole_file_dest, insert_in_order, &dbase};
  line_reader mark_rd = {load_mark, NULL, NULL, NULL};
  bool ok = (readonly || take_lock(db, st)) && load_file(db, db->wl_path, &wl_rd, st);
  if (ok && keep) {
    /* a view: the workloads keep() refuses have their records left unread */
    db->partial = true;
    for (size_t i = 0; i < db->wls.len; i++)
      db->wls.data[i].unread = !keep(db->wls.data[i].spec, keep_ctx);
  }
  if (!ok || !load_file(db, db->recs.path, &rec_rd, st) ||
      !load_file(db, db->bases.path, &base_rd, st) || !load_file(db, db->marks_path, &mark_rd, st)) {
    search_db_close(db);
    return false;
  }
  settle_copies(db, &db->recs, dr.repeats);
  settle_copies(db, &db->bases, dbase.repeats);
  report_unnamed(db);
  *out = db;
  return true;
}

bool search_db_open(const char *dir, search_db **out, dg_status *st) {
  return open_db(dir, false, NULL, NULL, out, st);
}

bool search_db_open_readonly(const char *dir, search_db **out, dg_status *st) {
  return open_db(dir, true, NULL, NULL, out, st);
}

bool search_db_open_some(const char *dir, search_db_keep_fn keep, void *ctx, search_db **out,
                         dg_status *st) {
  if (!keep) return dg_fail(st, DG_ERR_USAGE, "%s: a view needs its keep function", dir);
  return open_db(dir, false, keep, ctx, out, st);
}

int64_t search_db_unread_count(const search_db *db) { return db->unread; }

/* A view cannot stand for its database where every record counts. */
static bool whole(const search_db *db, const char *what, dg_status *st) {
  if (!db->partial) return true;
  return dg_fail(st, DG_ERR_USAGE,
                 "%s: opened for some workloads only (%lld record lines left unread): %s needs "
                 "the whole database",
                 db->dir, (long long)db->unread, what);
}

void search_db_close(search_db *db) {
  if (!db) return;
  if (db->lock_fd >= 0) drop_lock(db);
  free_wls(db);
  table_free(&db->recs);
  table_free(&db->bases);
  free_marks(db);
  free(db->dir);
  free(db->wl_path);
  free(db->marks_path);
  free(db);
}

static bool writable(const search_db *db, dg_status *st) {
  if (db->readonly)
    return dg_fail(st, DG_ERR_INVALID, "%s: the database is open read-only", db->dir);
  return true;
}

int search_db_warning_count(const search_db *db) { return db->warnings; }

/* ---- workloads ----------------------------------------------------------- */

/* Appends lines to a file of the database; a database in memory has none. */
static bool append_to(const char *path, const char *lines, size_t n, dg_status *st) {
  return !path || dg_append_lines(path, lines, n, st);
}

bool search_db_open_memory(search_db **out) {
  search_db *db = dg_calloc(1, sizeof *db);
  db->dir = dg_strdup("(a database in memory)");
  db->lock_fd = -1;
  *out = db;
  return true;
}

bool search_db_add_workload(search_db *db, const char *spec, const dg_func *f, char hash[21],
                            dg_status *st) {
  dg_status_ok(st);
  snprintf(hash, 21, "%llu", (unsigned long long)ir_func_hash(f));
  if (find_wl(db, hash)) return true;
  if (!writable(db, st)) return false;
  db_workload w = {dg_strdup(hash), dg_strdup(spec ? spec : ""), ir_print(f)};
  dg_str line;
  dg_str_init(&line);
  put_line(&line, workload_line(&w, NULL));
  bool ok = append_to(db->wl_path, line.s, line.len, st);
  dg_str_free(&line);
  if (!ok) {
    free(w.hash);
    free(w.spec);
    free(w.kernel);
    return false;
  }
  push_wl(db, w);
  return true;
}

int search_db_workload_count(const search_db *db) { return (int)db->wls.len; }

const char *search_db_workload_hash(const search_db *db, int i) {
  DG_ASSERT(i >= 0 && (size_t)i < db->wls.len);
  return db->wls.data[i].hash;
}

const char *search_db_workload_spec(const search_db *db, const char *hash) {
  const db_workload *w = find_wl(db, hash);
  return w ? w->spec : NULL;
}

const char *search_db_workload_kernel(const search_db *db, const char *hash) {
  const db_workload *w = find_wl(db, hash);
  return w ? w->kernel : NULL;
}

/* ---- exhausted searches -------------------------------------------------- */

bool search_db_mark_exhausted(search_db *db, const char *workload, int64_t kernels,
                              dg_status *st) {
  dg_status_ok(st);
  if (find_mark(db, workload)) return true;
  if (!writable(db, st)) return false;
  char *date = dg_now_iso();
  db_mark m = {dg_strdup(workload), dg_strdup(search_build_id()), date,
               kernels > 0 ? kernels : 0};
  dg_str line;
  dg_str_init(&line);
  put_line(&line, mark_line(&m, NULL));
  bool ok = append_to(db->marks_path, line.s, line.len, st);
  dg_str_free(&line);
  if (!ok) {
    free(m.workload);
    free(m.build);
    free(m.date);
    return false;
  }
  DG_VEC_PUSH(&db->marks, m);
  return true;
}

int64_t search_db_workload_exhausted(const search_db *db, const char *workload) {
  const db_mark *m = find_mark(db, workload);
  return m ? m->kernels : -1;
}

int search_db_exhausted_count(const search_db *db) { return (int)db->marks.len; }

/* ---- records and baselines ----------------------------------------------- */

static bool add_to(search_db *db, rec_table *t, const search_record *in, bool *added,
                   dg_status *st) {
  dg_status_ok(st);
  if (added) *added = false;
  json_error_t je;
  json_t *trace = json_loads(in->trace, 0, &je);
  if (!trace || !json_is_array(trace)) {
    json_decref(trace);
    return dg_fail(st, DG_ERR_PARSE, "record trace: not a JSON array: %s", je.text);
  }
  char *canon = dump_compact(trace);
  json_decref(trace);
  if (find_rec(t, in->workload, canon) >= 0) {
    free(canon);
    return true;
  }
  if (!writable(db, st)) {
    free(canon);
    return false;
  }
  if (in->n_secs < 0 || in->n_secs > (int)DG_ARRAY_LEN(((search_measure_result *)0)->secs)) {
    free(canon);
    return dg_fail(st, DG_ERR_INVALID, "record: %d run times", in->n_secs);
  }
  for (int i = 0; i < in->n_secs; i++)
    if (!(in->run_secs[i] > 0)) {
      free(canon);
      return dg_fail(st, DG_ERR_INVALID, "record: run time %d is %g s, not positive", i,
                     in->run_secs[i]);
    }
  db_record *r = dg_calloc(1, sizeof *r);
  r->workload = dg_strdup(in->workload);
  r->trace = canon;
  r->target = dg_strdup(in->target ? in->target : "");
  r->date = in->date ? dg_strdup(in->date) : dg_now_iso();
  r->build = dg_strdup(in->build ? in->build : search_build_id());
  r->device = dg_strdup(in->device ? in->device : "");
  r->error = in->error ? dg_strdup(in->error) : NULL;
  r->secs = dg_calloc((size_t)(in->n_secs > 0 ? in->n_secs : 1), sizeof(double));
  for (int i = 0; i < in->n_secs; i++) r->secs[i] = in->run_secs[i];
  r->r.n_secs = in->n_secs;
  r->r.kernel_hash = in->kernel_hash;
  r->n_lines = 1;
  r->r.n_copies = 1;
  fill_view(r);
  dg_str line;
  dg_str_init(&line);
  put_line(&line, record_line(r, NULL));
  bool ok = append_to(t->path, line.s, line.len, st);
  dg_str_free(&line);
  if (!ok) {
    free_record(r);
    return false;
  }
  push_record(t, r);
  if (added) *added = true;
  return true;
}

bool search_db_add_record(search_db *db, const search_record *in, bool *added, dg_status *st) {
  return add_to(db, &db->recs, in, added, st);
}

bool search_db_add_baseline(search_db *db, const search_record *in, bool *added, dg_status *st) {
  return add_to(db, &db->bases, in, added, st);
}

int search_db_record_count(const search_db *db) { return (int)db->recs.v.len; }

const search_record *search_db_record_at(const search_db *db, int i) {
  DG_ASSERT(i >= 0 && (size_t)i < db->recs.v.len);
  return &db->recs.v.data[i]->r;
}

int search_db_baseline_count(const search_db *db) { return (int)db->bases.v.len; }

const search_record *search_db_baseline_at(const search_db *db, int i) {
  DG_ASSERT(i >= 0 && (size_t)i < db->bases.v.len);
  return &db->bases.v.data[i]->r;
}


const int *search_db_workload_records(const search_db *db, const char *workload, int *n) {
  return group_of(&db->recs, workload, n);
}

double search_db_baseline_secs(const search_db *db, const char *workload, int *n) {
  DG_VEC(double) ran = {0};
  int count = 0;
  const int *idx = group_of(&db->bases, workload, &count);
  for (int i = 0; i < count; i++) {
    const search_record *r = &db->bases.v.data[idx[i]]->r;
    if (r->n_secs > 0) DG_VEC_PUSH(&ran, search_record_secs(r));
  }
  if (n) *n = count;
  double med = SEARCH_FAILED_SECS;
  if (ran.len) {
    qsort(ran.data, ran.len, sizeof(double), cmp_double);
    med = ran.len % 2 ? ran.data[ran.len / 2]
                      : 0.5 * (ran.data[ran.len / 2 - 1] + ran.data[ran.len / 2]);
  }
  DG_VEC_FREE(&ran);
  return med;
}

int search_db_workload_trials(const search_db *db, const char *workload) {
  int n = 0;
  group_of(&db->recs, workload, &n);
  return n;
}

double search_record_secs(const search_record *r) {
  if (r->n_copies > 1) return r->copies_secs;
  if (r->n_secs <= 0) return SEARCH_FAILED_SECS;
  double s = 0;
  for (int i = 0; i < r->n_secs; i++) s += r->run_secs[i];
  return s / r->n_secs;
}

bool search_record_valid(const search_record *r) {
  bool ran = false;
  for (int i = 0; i < r->n_secs; i++)
    if (r->run_secs[i] < SEARCH_FAILED_SECS) ran = true;
  if (r->n_copies > 1) ran = r->copies_secs < SEARCH_FAILED_SECS;
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
  int count = 0;
  const int *idx = group_of(&db->recs, workload, &count);
  for (int i = 0; i < count; i++) {
    const search_record *r = &db->recs.v.data[idx[i]]->r;
    if (search_record_valid(r)) {
      ranked x = {r, search_record_secs(r), (size_t)idx[i]};
      DG_VEC_PUSH(&v, x);
    }
  }
  if (v.len > 1) qsort(v.data, v.len, sizeof *v.data, cmp_ranked);
  int n = (int)(v.len < (size_t)k ? v.len : (size_t)k);
  for (int i = 0; i < n; i++) out[i] = v.data[i].r;
  DG_VEC_FREE(&v);
  return n;
}

/* ---- shards and merges ---------------------------------------------------- */

#define SHARD_VERSION 1
#define SHARD_ZSTD_LEVEL 19

static void shard_entries(const search_db *db, const rec_table *t, const rec_table *except,
                          const char *tag, bool *need_wl, dg_str *body, int64_t *n) {
  for (size_t i = 0; i < t->v.len; i++) {
    const db_record *r = t->v.data[i];
    if (except && find_rec(except, r->workload, r->trace) >= 0) continue;
    put_line(body, record_line(r, tag));
    (*n)++;
    const db_workload *w = find_wl(db, r->workload);
    if (w) need_wl[w - db->wls.data] = true;
  }
}

bool search_db_write_shard(const search_db *db, const search_db *except, const char *path,
                           int64_t *n_lines, dg_status *st) {
  dg_status_ok(st);
  if (!whole(db, "a shard", st) || (except && !whole(except, "a shard's exception", st)))
    return false;
  bool *need_wl = dg_calloc(db->wls.len ? db->wls.len : 1, sizeof(bool));
  dg_str body;
  dg_str_init(&body);
  int64_t n_rec = 0, n_base = 0;
  shard_entries(db, &db->recs, except ? &except->recs : NULL, "record", need_wl, &body, &n_rec);
  shard_entries(db, &db->bases, except ? &except->bases : NULL, "baseline", need_wl, &body,
                &n_base);
  int64_t n_marks = 0;
  for (size_t i = 0; i < db->marks.len; i++) {
    const db_mark *m = &db->marks.data[i];
    if (except && find_mark(except, m->workload)) continue;
    put_line(&body, mark_line(m, "exhausted"));
    n_marks++;
    const db_workload *w = find_wl(db, m->workload);
    if (w) need_wl[w - db->wls.data] = true;
  }
  if (n_lines) *n_lines = n_rec + n_base + n_marks;
  bool ok = true;
  if (n_rec + n_base + n_marks > 0) {
    dg_str text;
    dg_str_init(&text);
    int64_t n_wl = 0;
    for (size_t w = 0; w < db->wls.len; w++) n_wl += need_wl[w];
    char *date = dg_now_iso();
    json_t *h = json_pack("{s:s, s:i, s:s, s:s, s:I, s:I, s:I}", "t", "shard", "version",
                          SHARD_VERSION, "build", search_build_id(), "date", date, "workloads",
                          (json_int_t)n_wl, "records", (json_int_t)n_rec, "baselines",
                          (json_int_t)n_base);
    /* older shards have no such lines, and readers skip a type they do
     * not know: the header names the count only where there are some */
    if (n_marks) json_object_set_new(h, "exhausted", json_integer((json_int_t)n_marks));
    free(date);
    put_line(&text, json_dumps(h, JSON_COMPACT | JSON_PRESERVE_ORDER));
    json_decref(h);
    for (size_t w = 0; w < db->wls.len; w++)
      if (need_wl[w]) put_line(&text, workload_line(&db->wls.data[w], "workload"));
    dg_str_putn(&text, body.s ? body.s : "", body.len);
    dg_str z;
    dg_str_init(&z);
    ok = dg_zstd_pack(text.s, text.len, SHARD_ZSTD_LEVEL, &z, st) &&
         dg_write_file_atomic(path, z.s, z.len, st);
    dg_str_free(&z);
    dg_str_free(&text);
  }
  dg_str_free(&body);
  free(need_wl);
  return ok;
}

/* A shard being read into a scratch database. */
typedef struct {
  load_dest dr, dbase;
  int header_seen;
  dg_status err; /* no header, or one of another version */
} shard_ctx;

static bool shard_line(search_db *db, json_t *j, const char *where, void *ctx) {
  shard_ctx *m = ctx;
  const char *t = json_string_value(json_object_get(j, "t"));
  if (!t) {
    warn(db, "%s: shard line without its type \"t\"; skipped", where);
    return false;
  }
  if (strcmp(t, "shard") == 0) {
    json_t *v = json_object_get(j, "version");
    if (!json_is_integer(v) || json_integer_value(v) != SHARD_VERSION) {
      if (m->err.code == DG_OK)
        dg_fail(&m->err, DG_ERR_PARSE, "%s: shard version %s, this build reads %d", where,
                json_is_integer(v) ? "other" : "missing", SHARD_VERSION);
    }
    m->header_seen++;
    return true;
  }
  if (!m->header_seen) {
    if (m->err.code == DG_OK)
      dg_fail(&m->err, DG_ERR_PARSE, "%s: a shard begins with its header line", where);
    return false;
  }
  if (strcmp(t, "workload") == 0) return load_workload(db, j, where, NULL);
  /* record and baseline lines go to shard_record, built on the parsing
   * threads (shard_dest) */
  if (strcmp(t, "exhausted") == 0) return load_mark(db, j, where, NULL);
  warn(db, "%s: unknown shard line type '%.40s'; skipped", where, t);
  return false;
}

/* A shard's record and baseline lines: their tables. */
static load_dest *shard_dest(json_t *j, void *ctx) {
  shard_ctx *m = ctx;
  const char *t = json_string_value(json_object_get(j, "t"));
  if (!t) return NULL;
  if (strcmp(t, "record") == 0) return &m->dr;
  if (strcmp(t, "baseline") == 0) return &m->dbase;
  return NULL;
}

static bool shard_record(search_db *db, db_record *r, load_dest *d, const char *where, void *ctx) {
  (void)db;
  shard_ctx *m = ctx;
  if (!m->header_seen) {
    if (m->err.code == DG_OK)
      dg_fail(&m->err, DG_ERR_PARSE, "%s: a shard begins with its header line", where);
    return false;
  }
  insert_record(d, r);
  return true;
}

static bool merge_from(search_db *dst, search_db *src, bool steal, int64_t *n_added, dg_status *st);

bool search_db_merge_shard(search_db *db, const char *path, int64_t *n_added, dg_status *st) {
  dg_status_ok(st);
  if (n_added) *n_added = 0;
  if (!writable(db, st) || !whole(db, "a merge", st)) return false;
  size_t zlen, len;
  char *z = dg_read_file(path, &zlen, st);
  if (!z) return false;
  char *text = dg_zstd_unpack(z, zlen, path, 0, &len, st);
  free(z);
  if (!text) return false;
  /* Read into a scratch database first, so that a shard refused as a
   * whole adds nothing. */
  search_db scratch = {0};
  scratch.lock_fd = -1;
  shard_ctx m = {{&scratch.recs, NULL, 0, 0, 0}, {&scratch.bases, NULL, 0, 0, 0}, 0, {0}};
  dg_status_ok(&m.err);
  line_reader rd = {shard_line, shard_dest, shard_record, &m};
  size_t end = parse_lines(&scratch, path, text, len, &rd);
  free(text);
  db->warnings += scratch.warnings;
  bool ok = true;
  if (m.err.code != DG_OK) {
    *st = m.err;
    ok = false;
  } else if (!m.header_seen) {
    ok = dg_fail(st, DG_ERR_PARSE, "%s: no shard header line", path);
  } else if (end < len) {
    ok = dg_fail(st, DG_ERR_PARSE, "%s: the last line has no newline (a torn shard)", path);
  }
  if (ok) ok = merge_from(db, &scratch, true, n_added, st);
  free_wls(&scratch);
  table_free(&scratch.recs);
  table_free(&scratch.bases);
  free_marks(&scratch);
  return ok;
}

static db_record *record_copy(const db_record *s) {
  db_record *r = dg_calloc(1, sizeof *r);
  r->workload = dg_strdup(s->workload);
  r->trace = dg_strdup(s->trace);
  r->target = dg_strdup(s->target);
  r->date = dg_strdup(s->date);
  r->build = dg_strdup(s->build);
  r->device = dg_strdup(s->device);
  r->error = s->error ? dg_strdup(s->error) : NULL;
  r->secs = dg_calloc((size_t)(s->r.n_secs ? s->r.n_secs : 1), sizeof(double));
  memcpy(r->secs, s->secs, sizeof(double) * (size_t)s->r.n_secs);
  r->r.n_secs = s->r.n_secs;
  r->r.kernel_hash = s->r.kernel_hash;
  r->n_lines = 1;
  r->r.n_copies = 1;
  fill_view(r);
  return r;
}

/* src's records that dst lacks, copied into dst (their lines into out);
 * with steal, src is a scratch table about to be freed and its records
 * move instead (a shard's 3.8 KB traces are not copied again). */
static void merge_table(rec_table *dst, rec_table *src, bool steal, dg_str *out, int64_t *added) {
  for (size_t i = 0; i < src->v.len; i++) {
    db_record *s = src->v.data[i];
    if (find_rec(dst, s->workload, s->trace) >= 0) continue;
    db_record *r = steal ? s : record_copy(s);
    if (steal) {
      src->v.data[i] = NULL; /* table_free skips it */
      r->n_lines = 1;
      r->r.n_copies = 1;
      DG_VEC_FREE(&r->copies);
    }
    push_record(dst, r);
    if (dst->path) put_line(out, record_line(r, NULL)); /* none for a database in memory */
    (*added)++;
  }
}

bool search_db_merge(search_db *dst, const search_db *src, int64_t *n_added, dg_status *st) {
  return merge_from(dst, (search_db *)src, false, n_added, st);
}

/* With steal, src is a scratch database about to be freed: its records
 * move into dst (src's tables keep only what dst had). */
static bool merge_from(search_db *dst, search_db *src, bool steal, int64_t *n_added, dg_status *st) {
  dg_status_ok(st);
  if (n_added) *n_added = 0;
  if (!writable(dst, st) || !whole(dst, "a merge", st) || !whole(src, "a merge", st)) return false;
  dg_str wl, rec, base, marks;
  dg_str_init(&wl);
  dg_str_init(&rec);
  dg_str_init(&base);
  dg_str_init(&marks);
  for (size_t i = 0; i < src->wls.len; i++) {
    const db_workload *w = &src->wls.data[i];
    if (find_wl(dst, w->hash)) continue;
    db_workload c = {dg_strdup(w->hash), dg_strdup(w->spec), dg_strdup(w->kernel)};
    push_wl(dst, c);
    if (dst->wl_path) put_line(&wl, workload_line(&c, NULL));
  }
  int64_t added = 0;
  merge_table(&dst->recs, &src->recs, steal, &rec, &added);
  merge_table(&dst->bases, &src->bases, steal, &base, &added);
  for (size_t i = 0; i < src->marks.len; i++) {
    const db_mark *m = &src->marks.data[i];
    if (find_mark(dst, m->workload)) continue;
    db_mark c = {dg_strdup(m->workload), dg_strdup(m->build), dg_strdup(m->date), m->kernels};
    DG_VEC_PUSH(&dst->marks, c);
    if (dst->marks_path) put_line(&marks, mark_line(&c, NULL));
    added++;
  }
  /* a record whose workload no line names cannot be rebuilt: say so,
   * once per workload */
  for (size_t i = 0; i < src->recs.groups.len; i++) {
    const rec_group *g = &src->recs.groups.data[i];
    if (find_wl(dst, g->workload)) continue;
    warn(dst, "merge: %lld records of workload %.40s, which no workload line names",
         (long long)g->idx.len, g->workload);
  }
  if (n_added) *n_added = added;
  /* workloads first, so that a record's workload is on disk before it */
  bool ok = append_to(dst->wl_path, wl.s, wl.len, st) &&
            append_to(dst->recs.path, rec.s, rec.len, st) &&
            append_to(dst->bases.path, base.s, base.len, st) &&
            append_to(dst->marks_path, marks.s, marks.len, st);
  dg_str_free(&wl);
  dg_str_free(&rec);
  dg_str_free(&base);
  dg_str_free(&marks);
  return ok;
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
  if (!whole(db, "an export", st)) return false;
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
  for (size_t i = 0; i < db->recs.v.len && ok; i++) {
    const db_record *r = db->recs.v.data[i];
    const db_workload *w = find_wl(db, r->workload);
    if (!w) continue; /* a record without its workload cannot be replayed by TVM */
    json_t *trace = json_loads(r->trace, 0, NULL);
    json_t *secs = json_array();
    if (r->r.n_secs)
      for (int k = 0; k < r->r.n_secs; k++) json_array_append_new(secs, json_real(r->secs[k]));
    else
      json_array_append_new(secs, json_real(SEARCH_FAILED_SECS));
    int wi = (int)(w - db->wls.data);
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
