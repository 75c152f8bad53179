/* test_data_examples.c: construction and refinement examples
 * (src/data/examples.c, `dragon data build`).
 *
 * The committed examples are rebuilt byte for byte from the committed
 * records; every committed training example names a train workload whose
 * kernel no sealed split holds (the pretraining examples too, which are
 * deterministic and admitted); examples of a split never hold another
 * split's workload, even when the database holds them all; a planted bad
 * target is refused at its gate with its reason and the next record
 * becomes the target; refinement priors are slower than their target by
 * the asked gain and come from the same device and build. */
#include <dirent.h>
#include <jansson.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "dragon/data.h"
#include "dragon/eval.h"
#include "dragon/search.h"
#include "dragon/wl.h"
#include "test.h"

static const data_splits *splits(void) {
  static data_splits *t;
  if (!t) {
    dg_status st;
    t = data_splits_load(DATA_SPLIT_FILE, &st);
    if (!t) dg_test_fail(__FILE__, __LINE__, "%s", st.msg);
  }
  return t;
}

static char *read_zst(const char *path) {
  dg_status st;
  size_t n, len;
  char *z = dg_read_file(path, &n, &st);
  if (!z) return NULL;
  char *text = dg_zstd_unpack(z, n, path, 0, &len, &st);
  free(z);
  return text;
}

/* Under the sanitizers (make test-asan) the commands that read every
 * committed shard (data build, data card: their time grows with the data,
 * fourfold under ASan) read the smallest shard instead, and their output
 * is checked for form: the byte-for-byte comparisons with the committed
 * files are the plain tier's (make test). */
#if defined(__SANITIZE_ADDRESS__)
enum { SANITIZED = 1 };
#else
enum { SANITIZED = 0 };
#endif

/* Runs `dragon ARGS`, which must succeed. */
static void run_ok(const char *args) {
  char *out = NULL;
  int rc = dg_test_run_dragon(args, NULL, &out);
  CHECK_MSG(rc == 0, "dragon %s: rc %d: %s", args, rc, out);
  free(out);
}

/* The smallest committed shard, by size (the first name of equals). */
static bool smallest_shard(char *path, size_t cap) {
  DIR *d = opendir("data/records");
  if (!d) return false;
  long best = -1;
  char name[512] = "";
  for (struct dirent *e; (e = readdir(d));) {
    size_t n = strlen(e->d_name);
    if (n < 10 || strcmp(e->d_name + n - 10, ".jsonl.zst") != 0) continue;
    char p[600];
    snprintf(p, sizeof p, "data/records/%s", e->d_name);
    struct stat sb;
    if (stat(p, &sb) != 0) continue;
    if (best < 0 || sb.st_size < best || (sb.st_size == best && strcmp(e->d_name, name) < 0)) {
      best = sb.st_size;
      snprintf(name, sizeof name, "%s", e->d_name);
    }
  }
  closedir(d);
  if (best < 0) return false;
  snprintf(path, cap, "data/records/%s", name);
  return true;
}

/* Sanitized: the examples built from the smallest shard are well formed
 * (each line a JSON object naming a train workload, construct or refine). */
static void rebuild_from_one_shard(void) {
  char shard[600], args[1400];
  CHECK(smallest_shard(shard, sizeof shard));
  snprintf(args, sizeof args, "data build --records %s --split train --out %s/examples --quiet", shard,
           dg_test_tmpdir());
  run_ok(args);
  char path[600];
  snprintf(path, sizeof path, "%s/examples/train.jsonl.zst", dg_test_tmpdir());
  char *text = read_zst(path);
  CHECK_MSG(text, "%s", path);
  int lines = 0;
  for (char *line = text ? strtok(text, "\n") : NULL; line; line = strtok(NULL, "\n")) {
    json_t *j = json_loads(line, 0, NULL);
    CHECK(j && json_is_object(j));
    const char *spec = json_string_value(json_object_get(j, "workload"));
    const data_split_entry *e = spec ? data_splits_find(splits(), spec) : NULL;
    CHECK_MSG(e && e->split == DATA_SPLIT_TRAIN, "%s is not a train workload", spec ? spec : "(none)");
    json_decref(j);
    lines++;
  }
  CHECK_MSG(lines > 0, "no example from %s", shard);
  free(text);
}

DG_TEST(data_examples_rebuild_byte_for_byte) {
  if (SANITIZED) {
    rebuild_from_one_shard();
    return;
  }
  char args[1024];
  snprintf(args, sizeof args, "data build --out %s/examples --quiet", dg_test_tmpdir());
  run_ok(args);
  static const char *const names[] = {"train", "val", "test"};
  for (size_t i = 0; i < DG_ARRAY_LEN(names); i++) {
    char a[600], b[600];
    snprintf(a, sizeof a, "data/examples/%s.jsonl.zst", names[i]);
    snprintf(b, sizeof b, "%s/examples/%s.jsonl.zst", dg_test_tmpdir(), names[i]);
    dg_status st;
    size_t na, nb;
    char *x = dg_read_file(a, &na, &st), *y = dg_read_file(b, &nb, &st);
    CHECK_MSG(x && y, "%s or %s missing", a, b);
    CHECK_MSG(na == nb && memcmp(x, y, na) == 0, "%s differs from its rebuild", a);
    free(x);
    free(y);
  }
}

/* The examples of a small committed shard (8 workloads) are the same
 * bytes built on one thread and on three (workloads are built at once and
 * put in the split's order). */
DG_TEST(data_examples_same_bytes_whatever_the_threads) {
  static const char shard[] = "data/records/records-20261202T031718Z-train-1.jsonl.zst";
  char args[1400];
  char *text[2] = {NULL, NULL};
  static const int threads[2] = {1, 3};
  for (int k = 0; k < 2; k++) {
    snprintf(args, sizeof args, "data build --records %s --split train --threads %d --out %s/ex%d --quiet",
             shard, threads[k], dg_test_tmpdir(), k);
    run_ok(args);
    char path[600];
    snprintf(path, sizeof path, "%s/ex%d/train.jsonl.zst", dg_test_tmpdir(), k);
    text[k] = read_zst(path);
    CHECK_MSG(text[k] && text[k][0], "%s: no examples", path);
  }
  if (text[0] && text[1]) {
    CHECK_MSG(strcmp(text[0], text[1]) == 0, "the examples depend on --threads");
    int constructs = 0;
    for (const char *p = text[0]; (p = strstr(p, "\"kind\":\"construct\"")); p++) constructs++;
    CHECK_MSG(constructs >= 4, "%d workloads: too few to tell an order", constructs);
  }
  free(text[0]);
  free(text[1]);
}

/* Every example of the file names a train workload whose kernel (by
 * structural hash) is in no sealed split. */
static void check_train_only(const char *path) {
  const data_splits *t = splits();
  CHECK(t);
  int64_t n = data_splits_count(t);
  /* the kernel hashes of every sealed workload */
  DG_VEC(uint64_t) sealed = {0};
  for (int64_t i = 0; i < n; i++)
    if (!data_split_is_training(data_splits_at(t, i)->split))
      DG_VEC_PUSH(&sealed, data_splits_at(t, i)->kernel_hash);
  char *text = read_zst(path);
  CHECK_MSG(text, "%s", path);
  int lines = 0;
  for (char *line = strtok(text, "\n"); line; line = strtok(NULL, "\n")) {
    json_t *j = json_loads(line, 0, NULL);
    CHECK(j);
    const char *spec = json_string_value(json_object_get(j, "workload"));
    const data_split_entry *e = spec ? data_splits_find(t, spec) : NULL;
    CHECK_MSG(e && e->split == DATA_SPLIT_TRAIN, "%s is not a train workload", spec);
    dg_status st;
    dg_func *f = wl_build(spec, &st);
    CHECK(f);
    uint64_t h = ir_func_hash(f);
    ir_func_free(f);
    for (size_t k = 0; k < sealed.len; k++) CHECK_MSG(sealed.data[k] != h, "%s: sealed kernel", spec);
    json_decref(j);
    lines++;
  }
  CHECK(lines > 0);
  free(text);
  DG_VEC_FREE(&sealed);
}

/* Every committed training example and every committed pretraining
 * example: a train workload, whose kernel is in no sealed split. */
DG_TEST(data_examples_committed_train_holds_no_sealed_workload) {
  check_train_only("data/examples/train.jsonl.zst");
  check_train_only("data/examples/pretrain.jsonl.zst");
}

/* Pretraining examples: the same bytes on one thread and on three; each a
 * train workload's admitted design-space sample (parse, check, lower,
 * replay and build again here); and the committed file begins with what
 * its first workloads give (workload i draws from the seed and i alone). */
DG_TEST(data_pretrain_deterministic_and_admitted) {
  const data_splits *t = splits();
  CHECK(t);
  data_pretrain_opts o;
  data_pretrain_opts_default(&o);
  o.splits = t;
  o.count = 24;
  o.per = 2;
  o.threads = 1;
  dg_str a, b;
  dg_str_init(&a);
  dg_str_init(&b);
  data_pretrain_stats sa, sb;
  dg_status st;
  CHECK(data_pretrain_examples(&o, &a, &sa, &st));
  o.threads = 3;
  CHECK(data_pretrain_examples(&o, &b, &sb, &st));
  CHECK(a.len > 0 && a.len == b.len && memcmp(a.s, b.s, a.len) == 0);
  CHECK_MSG(sa.workloads == 24 && sa.examples >= 40 && sa.refused == 0, "%lld examples, %lld refused: %s",
            (long long)sa.examples, (long long)sa.refused, sa.first_refusal);
  int n = 0;
  char *copy = dg_strdup(a.s);
  for (char *line = strtok(copy, "\n"); line; line = strtok(NULL, "\n"), n++) {
    json_t *j = json_loads(line, 0, NULL);
    CHECK(j);
    const char *spec = json_string_value(json_object_get(j, "workload"));
    const char *target = json_string_value(json_object_get(j, "target"));
    CHECK(spec && target && strcmp(json_string_value(json_object_get(j, "task")), "pretrain") == 0);
    const data_split_entry *e = data_splits_find(t, spec);
    CHECK_MSG(e && e->split == DATA_SPLIT_TRAIN, "%s is not a train workload", spec);
    dg_func *f = wl_build(spec, &st);
    CHECK(f);
    eval_score_opts eo = {.kernel = f, .spec = spec, .last = EVAL_GATE_BUILD};
    eval_score sc;
    CHECK_MSG(eval_score_tsel(target, spec, &eo, &sc), "%s: %s", eval_gate_name(sc.failed), sc.reason);
    eval_score_free(&sc);
    ir_func_free(f);
    json_decref(j);
  }
  CHECK_EQ(n, (int)sa.examples);
  free(copy);
  /* the committed file (made with the defaults' seed and per) starts so */
  char *committed = read_zst("data/examples/pretrain.jsonl.zst");
  CHECK(committed);
  CHECK_MSG(strlen(committed) > a.len && memcmp(committed, a.s, a.len) == 0,
            "data/examples/pretrain.jsonl.zst does not begin with its first 24 workloads' examples");
  free(committed);
  dg_str_free(&a);
  dg_str_free(&b);
}

/* The first cheap workload of split s in the committed file. */
static const char *cheap_of(data_split s) {
  const data_splits *t = splits();
  for (int64_t i = data_splits_next(t, s, 0); i >= 0; i = data_splits_next(t, s, i + 1)) {
    dg_status st;
    dg_func *f = wl_build(data_splits_at(t, i)->spec, &st);
    bool cheap = f && data_label_work(f) < 4e5;
    ir_func_free(f);
    if (cheap) return data_splits_at(t, i)->spec;
  }
  return NULL;
}

/* Records for spec in db: n distinct design-space samples, the i-th
 * measured at (n - i) microseconds (the last the fastest), and a baseline. */
static bool add_samples(search_db *db, const char *spec, int n, char hash[21]) {
  dg_status st;
  dg_func *f = wl_build(spec, &st);
  if (!f || !search_db_add_workload(db, spec, f, hash, &st)) return false;
  search_space sp;
  if (!search_space_generate(f, NULL, &sp, &st)) return false;
  dg_rng rng;
  dg_rng_seed(&rng, 5);
  int got = 0;
  DG_VEC(uint64_t) seen = {0};
  for (int tries = 0; tries < 400 && got < n; tries++) {
    sched *s = search_sample(f, &sp, NULL, &rng, NULL, &st);
    if (!s) continue;
    uint64_t kh = ir_func_hash(sched_func(s));
    bool dup = false;
    for (size_t k = 0; k < seen.len; k++) dup |= seen.data[k] == kh;
    if (!dup) {
      DG_VEC_PUSH(&seen, kh);
      char *json = sched_trace_to_json(sched_get_trace(s));
      double secs = 1e-6 * (double)(n - got);
      search_record r = {hash, json, &secs, 1, NULL, "cuda", "2026-12-01T00:00:00Z", kh,
                         "dragon test lower 1", "GPU T"};
      bool ok = search_db_add_record(db, &r, NULL, &st);
      free(json);
      if (!ok) return false;
      got++;
    }
    sched_free(s);
  }
  double b = 50e-6;
  search_record base = {hash, "[[],[]]", &b, 1, NULL, "cuda", "2026-12-01T00:00:00Z", 0,
                        "dragon test lower 1", "GPU T"};
  bool ok = got == n && search_db_add_baseline(db, &base, NULL, &st);
  DG_VEC_FREE(&seen);
  search_space_free(&sp);
  ir_func_free(f);
  return ok;
}

DG_TEST(data_examples_split_holds_only_its_workloads) {
  dg_status st;
  search_db *db;
  char dir[600];
  snprintf(dir, sizeof dir, "%s/examples_db", dg_test_tmpdir());
  CHECK(search_db_open(dir, &db, &st));
  const char *specs[DATA_SPLIT_COUNT];
  for (int s = 0; s < DATA_SPLIT_COUNT; s++) {
    specs[s] = cheap_of((data_split)s);
    CHECK_MSG(specs[s], "no cheap workload in %s", data_split_name((data_split)s));
    char h[21];
    CHECK_MSG(add_samples(db, specs[s], 3, h), "%s", specs[s]);
  }
  for (int s = 0; s < DATA_SPLIT_COUNT; s++) {
    data_build_opts o;
    data_build_opts_default(&o);
    o.db = db;
    o.splits = splits();
    o.split = (data_split)s;
    o.min_gain = 1.1;
    dg_str text;
    dg_str_init(&text);
    data_build_stats bs;
    CHECK(data_build_examples(&o, &text, &bs, &st));
    CHECK_MSG(bs.construct == 1, "%s: %lld construction examples (%s)",
              data_split_name((data_split)s), (long long)bs.construct, bs.first_refusal);
    /* 3 us and 2 us are slower than 1 us by 3x and 2x: two refinements */
    CHECK_EQ(bs.refine, 2);
    for (char *line = strtok(text.s, "\n"); line; line = strtok(NULL, "\n")) {
      json_t *j = json_loads(line, 0, NULL);
      CHECK(j);
      CHECK_STREQ(json_string_value(json_object_get(j, "workload")), specs[s]);
      if (strcmp(json_string_value(json_object_get(j, "kind")), "refine") == 0)
        CHECK(json_real_value(json_object_get(j, "speedup_over_prior")) >= 1.1);
      json_decref(j);
    }
    dg_str_free(&text);
  }
  search_db_close(db);
}

DG_TEST(data_examples_planted_bad_target_refused_at_its_gate) {
  dg_status st;
  search_db *db;
  char dir[600];
  snprintf(dir, sizeof dir, "%s/examples_bad", dg_test_tmpdir());
  CHECK(search_db_open(dir, &db, &st));
  const char *spec = cheap_of(DATA_SPLIT_TRAIN);
  CHECK(spec);
  char h[21];
  CHECK(add_samples(db, spec, 2, h));
  /* the fastest record of all: a trace whose block does not exist */
  double fast = 1e-7;
  search_record bad = {h, "[[[\"GetBlock\",[],[\"nope\",\"main\"],[\"b0\"]]],[]]", &fast, 1, NULL,
                       "cuda", "2026-12-01T00:00:00Z", 0, "dragon test lower 1", "GPU T"};
  CHECK(search_db_add_record(db, &bad, NULL, &st));
  data_build_opts o;
  data_build_opts_default(&o);
  o.db = db;
  o.splits = splits();
  dg_str text;
  dg_str_init(&text);
  data_build_stats bs;
  CHECK(data_build_examples(&o, &text, &bs, &st));
  CHECK_EQ(bs.construct, 1);
  int64_t refused = 0;
  for (int g = 0; g < EVAL_GATE_COUNT; g++) refused += bs.refused[g];
  CHECK_EQ(refused, 1);
  CHECK_MSG(bs.refused[EVAL_GATE_CHECK] == 1 || bs.refused[EVAL_GATE_REPLAY] == 1, "%s",
            bs.first_refusal);
  CHECK_MSG(strstr(bs.first_refusal, "nope"), "%s", bs.first_refusal);
  /* the target is the next record, 1 us: its example says so */
  CHECK(!strstr(text.s, "nope"));
  char *nl = strchr(text.s, '\n');
  CHECK(nl);
  *nl = 0;
  json_t *j = json_loads(text.s, 0, NULL);
  CHECK(j);
  CHECK_STREQ(json_string_value(json_object_get(j, "kind")), "construct");
  json_t *src = json_array_get(json_object_get(j, "source_records"), 0);
  CHECK_NEAR(json_real_value(json_object_get(src, "secs")), 1e-6, 1e-12);
  json_decref(j);
  dg_str_free(&text);
  search_db_close(db);
}

/* The committed card is what `dragon data card` writes from the committed
 * records and examples (the plot aside). */
DG_TEST(data_card_matches_committed) {
  char args[1400];
  if (SANITIZED) {
    /* the smallest shard's card, for form (see SANITIZED) */
    char shard[600];
    CHECK(smallest_shard(shard, sizeof shard));
    snprintf(args, sizeof args, "data card --records %s --out %s/CARD.md --no-plot", shard, dg_test_tmpdir());
    run_ok(args);
    char path[600];
    snprintf(path, sizeof path, "%s/CARD.md", dg_test_tmpdir());
    dg_status st;
    size_t n;
    char *b = dg_read_file(path, &n, &st);
    CHECK_MSG(b && strstr(b, "## Labelled workloads by family and split"), "%s", path);
    free(b);
    return;
  }
  snprintf(args, sizeof args, "data card --out %s/CARD.md --plot %s/card.png", dg_test_tmpdir(),
           dg_test_tmpdir());
  run_ok(args);
  char path[600];
  snprintf(path, sizeof path, "%s/CARD.md", dg_test_tmpdir());
  dg_status st;
  size_t na, nb;
  char *a = dg_read_file("data/CARD.md", &na, &st), *b = dg_read_file(path, &nb, &st);
  CHECK(a && b);
  CHECK_MSG(na == nb && memcmp(a, b, na) == 0, "data/CARD.md differs from `dragon data card`");
  CHECK(strstr(a, "## Labelled workloads by family and split"));
  free(a);
  free(b);
}
