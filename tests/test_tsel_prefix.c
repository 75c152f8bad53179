/* test_tsel_prefix.c: constrained decoding of TSEL (src/tsel/prefix.c,
 * mask.c, decode.c). No false refusals: every prefix of every committed
 * target (data/examples/SPLIT.jsonl.zst), of the valid graphs in
 * tests/data/tsel (up to a comment or a raw edit, which the checker does
 * not read), of the hand-written GPU schedules, of design-space samples
 * and of random schedules, all lifted, is accepted, and each ends
 * complete. No false acceptance: the broken graphs of tests/data/tsel are
 * refused on the line the checker names; hand-made faults (a wrong edit
 * name, a wrong handle type, an output index, a decision, a factor, a
 * count, a scope, a name) are refused at their first wrong byte; every
 * single-byte change of a target that reads to a complete graph parses and
 * checks; completions from every prefix check; random walks over the
 * accepted bytes never get stuck and end in graphs that check. The graphs
 * that check but are refused are the documented ones. The forced text is
 * the header and the edit ids; the mask over a vocabulary trained on the
 * examples allows each graph's next token at every step and equals a
 * brute-force feed of every token; a random model decoded with the mask
 * always writes graphs that parse and check, and without it garbage.
 *
 * The tests over every committed example take an even sample of at most
 * EXAMPLES_MAX of them.
 *
 * V vocabulary.
 */
#include <dirent.h>
#include <jansson.h>
#include <string.h>

#include "dragon/eval.h"
#include "dragon/intrin.h"
#include "dragon/sched.h"
#include "dragon/search.h"
#include "dragon/train.h"
#include "dragon/tsel.h"
#include "dragon/wl.h"
#include "test.h"
#include "tsel/tsel_impl.h"

typedef struct {
  char *workload, *target, *prompt;
  bool construct;
} record;

static record *recs;
static int n_recs;

/* Every example of every split (data/examples/SPLIT.jsonl.zst). */
static bool load_records(void) {
  if (recs) return true;
  static const char *const splits[] = {"train", "val", "test"};
  DG_VEC(record) v = {0};
  for (size_t s = 0; s < DG_ARRAY_LEN(splits); s++) {
    dg_status st;
    size_t n, len;
    char path[64];
    snprintf(path, sizeof path, "data/examples/%s.jsonl.zst", splits[s]);
    char *z = dg_read_file(path, &n, &st);
    if (!z) continue;
    char *text = dg_zstd_unpack(z, n, path, 0, &len, &st);
    free(z);
    if (!text) continue;
    for (char *line = strtok(text, "\n"); line; line = strtok(NULL, "\n")) {
      json_t *j = json_loads(line, 0, NULL);
      if (!j) continue;
      record r = {dg_strdup(json_string_value(json_object_get(j, "workload"))),
                  dg_strdup(json_string_value(json_object_get(j, "target"))),
                  dg_strdup(json_string_value(json_object_get(j, "prompt"))),
                  strcmp(json_string_value(json_object_get(j, "kind")), "construct") == 0};
      DG_VEC_PUSH(&v, r);
      json_decref(j);
    }
    free(text);
  }
  recs = v.data;
  n_recs = (int)v.len;
  return n_recs > 0;
}

/* The tests over every committed example visit at most EXAMPLES_MAX of
 * them, at an even stride (the examples grow with every labelling window;
 * the tests' time must not), fewer under the sanitizers (make test-asan),
 * where each is four times slower. */
#if defined(__SANITIZE_ADDRESS__)
enum { EXAMPLES_MAX = 300 };
#else
enum { EXAMPLES_MAX = 1500 };
#endif
/* The byte-by-byte tests (every mutation, every prefix's completion) take
 * the first UNIQUE_MAX unique targets: the same paths at a third of the
 * time under the sanitizers, where they ran 15 times slower than plain. */
#if defined(__SANITIZE_ADDRESS__)
enum { UNIQUE_MAX = 6 };
#else
enum { UNIQUE_MAX = 16 };
#endif
static int rec_stride(void) { return n_recs > EXAMPLES_MAX ? (n_recs + EXAMPLES_MAX - 1) / EXAMPLES_MAX : 1; }

/* Parses and checks a graph against the kernel; the message in why. */
static bool graph_checks(const char *text, const dg_func *k, tsel_target target, char *why, size_t n) {
  dg_status st;
  tsel_graph *g = tsel_parse(text, NULL, &st);
  bool ok = g && tsel_check(g, k, target, &st);
  if (!ok) snprintf(why, n, "%s", st.msg);
  tsel_graph_free(g);
  return ok;
}

/* Feeds text byte by byte; the index of the first refused byte, or -1. */
static long first_refused(tsel_prefix *p, const char *text, size_t n) {
  for (size_t i = 0; i < n; i++)
    if (!tsel_prefix_feed(p, text + i, 1)) return (long)i;
  return -1;
}

static long line_of(const char *text, long at) {
  long l = 1;
  for (long i = 0; i < at; i++) l += text[i] == '\n';
  return l;
}

DG_TEST(tsel_prefix_accepts_every_target) {
  CHECK(load_records());
  int n_construct = 0;
  for (int r = 0; r < n_recs; r += rec_stride()) {
    dg_status st;
    dg_func *k = wl_build(recs[r].workload, &st);
    CHECK_MSG(k, "%s: %s", recs[r].workload, st.msg);
    tsel_prefix *p = tsel_prefix_new(k, recs[r].workload, TSEL_TARGET_CUDA, &st);
    CHECK_OK(st);
    const char *t = recs[r].target;
    size_t n = strlen(t);
    long bad = first_refused(p, t, n);
    CHECK_MSG(bad < 0, "%s: byte %ld (line %ld) refused: ...%.40s", recs[r].workload, bad, line_of(t, bad),
              t + (bad > 20 ? bad - 20 : 0));
    CHECK_MSG(tsel_prefix_complete(p), "%s: not complete at the end", recs[r].workload);
    size_t len;
    CHECK_STREQ(tsel_prefix_text(p, &len), t);
    CHECK_EQ(len, n);
    /* <|end|> only at the end: no proper line-start prefix is complete */
    tsel_prefix_free(p);
    ir_func_free(k);
    n_construct += recs[r].construct;
  }
  CHECK(n_construct >= 10);
}

/* ---- graphs the project writes: lifted hand schedules, design-space
 * samples and random schedules ---- */

typedef struct {
  char *spec, *text;
  int kind; /* LG_* */
} lifted;
enum { LG_HAND, LG_SPACE, LG_RANDOM, LG_KINDS };

static lifted *lifts;
static int n_lifts;

/* The 13 MetaSchedule workloads with a hand-written GPU schedule. */
static const char *const ms_names[] = {"C1D", "C2D", "C3D", "CAP", "DEP", "DIL", "GMM",
                                       "GRP", "T2D", "NRM", "SFM", "CBR", "TBG"};

static void lift_add(const sched_trace *t, const char *spec, const dg_func *f, bool explain, int kind) {
  dg_status st;
  char *canon = wl_canonical(spec, &st);
  if (!canon) return;
  tsel_graph *g = tsel_lift(t, canon, explain ? f : NULL, NULL, &st);
  if (g) {
    dg_str text;
    dg_str_init(&text);
    char *x = tsel_print(g);
    dg_str_puts(&text, x);
    free(x);
    /* a random schedule has no postproc edit: one closes it */
    if (kind == LG_RANDOM) dg_str_printf(&text, "t%d postproc\n", tsel_graph_edit_count(g) + 1);
    lifted l = {canon, dg_str_take(&text), kind};
    lifts = dg_realloc(lifts, sizeof(lifted) * (size_t)(n_lifts + 1));
    lifts[n_lifts++] = l;
    canon = NULL;
    tsel_graph_free(g);
  }
  free(canon);
}

static void random_add(const char *spec, void *ctx) {
  (void)ctx;
  dg_status st;
  dg_func *f = wl_build(spec, &st);
  if (!f) return;
  for (uint64_t k = 0; k < 3; k++) {
    sched *s = sched_new(f, k + 1);
    dg_rng r;
    dg_rng_seed(&r, 7 * k + strlen(spec));
    sched_random_steps(s, &r, 24);
    lift_add(sched_get_trace(s), spec, f, false, LG_RANDOM);
    sched_free(s);
  }
  ir_func_free(f);
}

/* count design-space samples of f, postprocessed. */
static void space_add(const dg_func *f, const char *spec, uint64_t seed, uint64_t rng_seed, int count) {
  dg_status st;
  search_space sp;
  search_space_opts o = {.seed = seed};
  if (!search_space_generate(f, &o, &sp, &st)) return;
  dg_rng rng;
  dg_rng_seed(&rng, rng_seed);
  search_postprocs pp = {0};
  for (int k = 0; k < count; k++) {
    sched *s = NULL;
    for (int tries = 0; tries < 100 && !s; tries++) s = search_sample(f, &sp, &pp, &rng, NULL, &st);
    if (s) lift_add(sched_get_trace(s), spec, f, true, LG_SPACE);
    sched_free(s);
  }
  search_space_free(&sp);
}

/* The f16 GEMM whose design space is the tensor-core one (WMMA fill, loads,
 * mma and store tensorized). */
static const char *const tc_gemm = "gemm:m=256,n=256,k=256,dtype=f16";

static bool load_lifts(void) {
  if (lifts) return true;
  for (size_t i = 0; i < DG_ARRAY_LEN(ms_names); i++) {
    char path[64], spec[16];
    snprintf(path, sizeof path, "schedules/%s.json", ms_names[i]);
    snprintf(spec, sizeof spec, "%s/0", ms_names[i]);
    dg_status st;
    dg_func *f = wl_build(spec, &st);
    char *js = dg_read_file(path, NULL, &st);
    sched_trace *t = js ? sched_trace_from_json(js, &st) : NULL;
    free(js);
    if (f && t) lift_add(t, spec, f, true, LG_HAND);
    sched_trace_free(t);
    if (f) space_add(f, spec, 5 + i, 41 + i, 1);
    ir_func_free(f);
  }
  dg_status st;
  dg_func *tc = wl_build(tc_gemm, &st);
  if (tc) space_add(tc, tc_gemm, 3, 17, 8);
  ir_func_free(tc);
  wl_generate(11, 40, NULL, random_add, NULL, &st);
  return n_lifts > 0;
}

/* Every prefix of the graphs the project writes is accepted and each ends
 * complete: the hand schedules (a bare `postproc` and the postprocessors'
 * edits, then why lines), design-space samples (`postproc default`; those
 * of the tensor-core space tensorize with the WMMA intrinsics) and
 * random schedules of every family (compute_at, rfactor, decompose_reduction,
 * add_unit_loop, sample_loc, cache stages, inlining, ...) closed by a bare
 * `postproc`, over-covering splits included. Only graphs that check count. */
DG_TEST(tsel_prefix_accepts_lifted_graphs) {
  CHECK(load_lifts());
  int n[LG_KINDS] = {0}, after_postproc = 0, tensorized = 0;
  for (int i = 0; i < n_lifts; i++) {
    const lifted *l = &lifts[i];
    dg_status st;
    dg_func *k = wl_build(l->spec, &st);
    CHECK(k);
    char why[600];
    if (graph_checks(l->text, k, TSEL_TARGET_CUDA, why, sizeof why)) {
      tsel_prefix *p = tsel_prefix_new(k, l->spec, TSEL_TARGET_CUDA, &st);
      CHECK_OK(st);
      size_t len = strlen(l->text);
      long bad = first_refused(p, l->text, len);
      CHECK_MSG(bad < 0, "%s (kind %d): byte %ld (line %ld) refused: ...%.40s\n%s", l->spec, l->kind, bad,
                line_of(l->text, bad), l->text + (bad > 20 ? bad - 20 : 0), l->text);
      CHECK_MSG(tsel_prefix_complete(p), "%s: not complete at the end", l->spec);
      n[l->kind]++;
      const char *pp = strstr(l->text, " postproc\n");
      after_postproc += pp && pp[10] == 't';
      tensorized += strstr(l->text, " tensorize ") && strstr(l->text, "\"wmma_sync_16x16x16_f16f16f32\"");
      tsel_prefix_free(p);
    } else
      CHECK_MSG(l->kind == LG_RANDOM, "%s (kind %d) does not check: %s", l->spec, l->kind, why);
    ir_func_free(k);
  }
  CHECK_MSG(n[LG_HAND] == 13 && n[LG_SPACE] >= 18 && n[LG_RANDOM] >= 100 && after_postproc >= 13 &&
                tensorized >= 8,
            "%d hand, %d design-space (%d tensorized), %d random, %d with edits after postproc", n[LG_HAND],
            n[LG_SPACE], tensorized, n[LG_RANDOM], after_postproc);
}

/* The kernel spec of a graph's header (caller frees). */
static char *header_spec(const char *text) {
  if (strncmp(text, "tsel 1 kernel ", 14) != 0) return NULL;
  return strndup(text + 14, strcspn(text + 14, "\n"));
}

/* The path of the next .tsel file of directory d (dir), or false. */
static bool next_tsel(DIR *d, const char *dir, char *path, size_t cap) {
  struct dirent *de;
  while ((de = readdir(d))) {
    size_t nl = strlen(de->d_name);
    if (nl < 5 || strcmp(de->d_name + nl - 5, ".tsel") != 0) continue;
    snprintf(path, cap, "%s/%s", dir, de->d_name);
    return true;
  }
  return false;
}

/* The valid graphs of tests/data/tsel: every prefix is accepted, up to the
 * first line the checker does not read (a comment, a raw edit), where the
 * refusal comes at the line's first byte that says so ('#', the 'a' of
 * raw). Those read whole end complete. */
DG_TEST(tsel_prefix_reads_valid_files) {
  const char *dir = "tests/data/tsel/valid";
  DIR *d = opendir(dir);
  CHECK(d);
  int whole = 0, files = 0;
  char path[512];
  while (next_tsel(d, dir, path, sizeof path)) {
    dg_status st;
    size_t n;
    char *t = dg_read_file(path, &n, &st);
    CHECK(t);
    char *spec = header_spec(t), why[600];
    CHECK(spec);
    dg_func *k = wl_build(spec, &st);
    CHECK(k);
    CHECK_MSG(graph_checks(t, k, TSEL_TARGET_CUDA, why, sizeof why), "%s: %s", path, why);
    tsel_prefix *p = tsel_prefix_new(k, spec, TSEL_TARGET_CUDA, &st);
    CHECK_OK(st);
    long bad = first_refused(p, t, n);
    if (bad < 0) {
      CHECK_MSG(tsel_prefix_complete(p), "%s: not complete at the end", path);
      whole++;
    } else {
      const char *ls = t + bad;
      while (ls > t && ls[-1] != '\n') ls--;
      const char *sp = strchr(ls, ' ');
      bool comment = ls[0] == '#' && t + bad == ls;
      bool raw = ls[0] == 't' && sp && strncmp(sp, " raw ", 5) == 0 && t + bad == sp + 2;
      CHECK_MSG(comment || raw, "%s: byte %ld (line %ld) refused: '%.40s'", path, bad, line_of(t, bad), ls);
    }
    tsel_prefix_free(p);
    ir_func_free(k);
    free(spec);
    free(t);
    files++;
  }
  closedir(d);
  CHECK(files >= 2 && whole >= 1);
}

/* The broken graphs of tests/data/tsel are refused, and on the line that
 * the checker's message (the .err file) names, never before it: at its
 * first byte that no valid graph continues, or at the start of the next
 * line when the named line ends a graph that checks (`postproc default`
 * with an edit after it). */
DG_TEST(tsel_prefix_refuses_broken_files_on_their_line) {
  const char *dir = "tests/data/tsel/broken";
  DIR *d = opendir(dir);
  CHECK(d);
  dg_status st;
  const char *gmm = "batch_matmul:b=1,n=128,m=128,k=128,dtype=f32";
  dg_func *k = wl_build(gmm, &st);
  CHECK(k);
  int files = 0, on_line = 0;
  char path[512], errp[520];
  while (next_tsel(d, dir, path, sizeof path)) {
    snprintf(errp, sizeof errp, "%.*s.err", (int)(strlen(path) - 5), path);
    char *err = dg_read_file(errp, NULL, &st);
    CHECK_MSG(err, "%s", errp);
    size_t n;
    char *t = dg_read_file(path, &n, &st);
    CHECK(t);
    const char *colon = strstr(err, ".tsel:");
    CHECK(colon);
    long line = strtol(colon + 6, NULL, 10);
    tsel_prefix *p = tsel_prefix_new(k, gmm, TSEL_TARGET_CUDA, &st);
    CHECK_OK(st);
    long bad = first_refused(p, t, n);
    CHECK_MSG(bad >= 0, "%s is accepted", path);
    long at = line_of(t, bad);
    bool next_start = at == line + 1 && (bad == 0 || t[bad - 1] == '\n');
    CHECK_MSG(at == line || next_start, "%s: refused on line %ld ('%.30s'), the checker names line %ld", path, at,
              t + bad, line);
    on_line += at == line;
    tsel_prefix_free(p);
    free(t);
    free(err);
    files++;
  }
  closedir(d);
  ir_func_free(k);
  CHECK(files >= 30 && on_line >= files - 2);
}

/* A text with '|' before the first byte that must be refused: fed without
 * the marker, the checker refuses exactly there, and the whole text (no
 * marker) fails tsel_check with msg (NULL: the narrowings, texts that
 * check but are not read). */
static void fault_at(const dg_func *k, const char *spec, tsel_target target, const char *marked, const char *msg) {
  dg_str t;
  dg_str_init(&t);
  dg_str_printf(&t, "tsel 1 kernel %s\n", spec);
  size_t at = t.len + (size_t)(strchr(marked, '|') - marked);
  dg_str_putn(&t, marked, (size_t)(strchr(marked, '|') - marked));
  dg_str_puts(&t, strchr(marked, '|') + 1);
  dg_status st;
  tsel_prefix *p = tsel_prefix_new(k, spec, target, &st);
  CHECK_OK(st);
  long r = first_refused(p, t.s, t.len);
  tsel_prefix_free(p);
  CHECK_MSG(r == (long)at, "refused at %ld, not %zu: '%s'", r, at, marked);
  char why[600] = "";
  bool ok = graph_checks(t.s, k, target, why, sizeof why);
  if (msg) CHECK_MSG(!ok && strstr(why, msg), "'%s': the checker says '%s', not '%s'", marked, ok ? "ok" : why, msg);
  else CHECK_MSG(ok, "'%s' does not check: %s", marked, why);
  dg_str_free(&t);
}

/* A text read whole, complete, that checks. */
static void reads_whole(const dg_func *k, const char *spec, const char *body) {
  dg_str t;
  dg_str_init(&t);
  dg_str_printf(&t, "tsel 1 kernel %s\n%s", spec, body);
  dg_status st;
  tsel_prefix *p = tsel_prefix_new(k, spec, TSEL_TARGET_CUDA, &st);
  CHECK_OK(st);
  long r = first_refused(p, t.s, t.len);
  CHECK_MSG(r < 0, "refused at %ld: '...%s'", r, t.s + (r > 0 ? r : 0));
  CHECK_MSG(tsel_prefix_complete(p), "not complete: '%s'", body);
  char why[600];
  CHECK_MSG(graph_checks(t.s, k, TSEL_TARGET_CUDA, why, sizeof why), "'%s': %s", body, why);
  tsel_prefix_free(p);
  dg_str_free(&t);
}

/* Faults at their first wrong byte, on GMM/0 (blocks root and Z; Z has 4
 * loops of extent 1, 128, 128, 128, reads X and Y, writes Z). */
DG_TEST(tsel_prefix_refuses_faults_at_their_first_byte) {
  const char *gmm = "batch_matmul:b=1,n=128,m=128,k=128,dtype=f32";
  dg_status st;
  dg_func *k = wl_build(gmm, &st);
  CHECK(k);
  static const struct {
    const char *text, *msg;
  } faults[] = {
      /* edit names */
      {"t1 block \"Z\"\nt2 lo|pz t1 x4\n", "unknown edit 'lopz'"},
      {"t1 |inline t1\n", "used before it is defined"}, /* no block exists yet */
      {"t1 block \"Z\"\nt2 cache_read t1 0 shared [t1]\nt3 inline t2\nt4 loops t|2 x4\n",
       "is stale"}, /* ... nor after the inline */
      /* handle types, output indices, staleness */
      {"t1 block \"Z\"\nt2 loops t1 x4\nt3 parallel t|1\n", "is a block handle, expected a loop"},
      {"t1 block \"Z\"\nt2 loops t1 x4\nt3 loops t|2.0 x1\n", "is a loop handle, expected a block"},
      {"t1 block \"Z\"\nt2 loops t1 x4\nt3 parallel t2.|4\n", "t2.4 does not exist"},
      {"t1 block \"Z\"\nt2 loops t1 x4\nt3 parallel t2|\n", "has 4 outputs"},
      {"t1 block \"Z\"\nt2 producers t1|.0 x1\n", "has one output"},
      {"t1 block \"Z\"\nt2 loops t1 x4\nt3 fuse t2.1 t2.2\nt4 parallel t2.|1\n", "is stale"},
      {"t1 block \"Z\"\nt2 loops t1 x4\nt3 fuse t2.1 t2.|1\n", "the same loop is given twice"},
      {"t1 block \"Z\"\nt2 loops t1 x4\nt3 reorder t2.1 t2.|1\n", "the same loop is given twice"},
      /* decisions */
      {"t1 block \"Z\"\nt2 cache_read t1 0 shared [t1]\nt3 coop t2 [1 2 3 4] =|5\n", "is not among the candidates"},
      {"t1 sample [0 16 64] =6|5\n", "is not among the candidates"},
      {"t1 sample [0 16 64] =16 index=|2\n", "not the chosen value"},
      {"t1 sample [0 16 64] =16 probs=[0.5 0.5|]\n", "probs= has 2 entries"},
      {"t1 block \"Z\"\nt2 loops t1 x4\nt3 thread_split t2.1 [32 64] =|128\n", "is not among the candidates"},
      /* tile and split factors */
      {"t1 block \"Z\"\nt2 loops t1 x4\nt3 tile t2.1 [2 |5 1 1 1] max=64\n", "multiply to"},
      {"t1 block \"Z\"\nt2 loops t1 x4\nt3 tile t2.1 [2 4|] max=64\n", "multiply to 8"},
      {"t1 block \"Z\"\nt2 loops t1 x4\nt3 tile t2.1 [1 1 1 1 128] max=64|\n", "exceeds max=64"},
      {"t1 block \"Z\"\nt2 loops t1 x4\nt3 sample_tile t2.0 [|2] max=4\n", "multiply to 2"},
      {"t1 block \"Z\"\nt2 loops t1 x4\nt3 split t2.1 [4 8|]\n", "less than the extent"},
      {"t1 block \"Z\"\nt2 loops t1 x4\nt3 split t2.1 [|0 _]\n", "factors must be positive"},
      /* counts, axes, thread limits */
      {"t1 block \"Z\"\nt2 loops t1 x|5\n", "has 4 loops here, not 5"},
      {"t1 block \"Z\"\nt2 loops t1 x4\nt3 bind t2.0 threadIdx.|w\n", "unknown thread axis"},
      {"t1 block \"Z\"\nt2 loops t1 x4\nt3 fuse t2.1 t2.2\nt4 bind t3 |threadIdx.x\n", "exceeds the limit of 1024"},
      {"t1 block \"Z\"\nt2 loops t1 x4\nt3 bind t2.1 threadIdx.|z\n", "exceeds the limit of 64"},
      /* regions, scopes, names */
      {"t1 block \"Z\"\nt2 cache_read t1 |2 shared []\n", "index 2 does not exist"},
      {"t1 block \"Z\"\nt2 cache_write t1 |1 local []\n", "index 1 does not exist"},
      {"t1 block \"Z\"\nt2 cache_write t1 0 wmma.|matrix_a []\n", "a write stage cannot be"},
      {"t1 block \"Z\"\nt2 cache_read t1 0 shar|d []\n", "unknown storage scope"},
      {"t1 block \"|W\"\n", "has no block"},
      {"t1 block \"Z\" func=\"|x\"\n", "no function"},
      {"t1 block \"Z\"\nt2 annotate t1 \"meta_schedule.|cooperative_fetch\" 2\n", "write the alias"},
      {"t1 block \"Z\"\nt2 annotate t1 tilin|x \"S\"\n", "unknown annotation alias"},
      /* tensor intrinsics: registered names, byte by byte */
      {"t1 block \"Z\"\nt2 loops t1 x4\nt3 tensorize t2.3 \"wmma_sync_16x16x16_f16f16f3|3\"\n",
       "unknown tensor intrinsic"},
      {"t1 block \"Z\"\nt2 loops t1 x4\nt3 tensorize t2.3 \"wmma_sync_16x16x16_f16f16|\"\n",
       "unknown tensor intrinsic"},
      {"t1 block \"Z\"\nt2 tensorize t1 \"|\"\n", "unknown tensor intrinsic ''"},
      {"t1 block \"Z\"\nt2 tensorize t1 \"|x\"\n", "unknown tensor intrinsic 'x'"},
      {"t1 block \"Z\"\nt2 annotate t1 tensorize_as \"|cit t2 threadIdx1: 512 threads/block\"\n",
       "unknown tensor intrinsic 'cit t2"},
      {"t1 block \"Z\"\nt2 annotate t1 tensorize_init \"wmma_fill_16x16x16_f|64\"\n",
       "(closest: wmma_fill_16x16x16_f32"},
      {"t1 block \"Z\"\nt2 annotate t1 tensorize_as \"wmma_|\"\n", "unknown tensor intrinsic 'wmma_'"},
      /* the lexical form */
      {"t1 block \"Z\"\nt2 loops t1 x4\nt3 tile t2.1 [1 1 1 1 128] max=128| max=128\n", "given twice"},
      {"t1 block \"Z\"\nt2 loops t1 | x4\n", "expected a single space"},
      {"t1 block \"Z\"|\t\n", "trailing space"},
      {"t1 block \"Z\"\nt2 annotate t1 \"software_pipeline_stage\" [1 |]\n", "space before ']'"},
      {"t1 block \"Z\"\nt2 block \"|\\q\"\n", "unknown escape"},
      {"t1 sample [1 2] =1 probs=[1.|e5 0.5]\n", "expected digits after '.'"},
      {"t1 block \"Z\"\nt|3 loops t1 x4\n", "expected edit id t2"},
      /* why and expect lines */
      {"t1 postproc default\nwhy t|9: x\n", "why names t9"},
      {"t1 postproc default\nexpect p|2: x\n", "expected p1"},
      {"t1 postproc default\nwhy t1: |\n", "trailing space"},
      {"t1 postproc default\n|t2 block \"Z\"\n", "must be the last edit"},
  };
  for (size_t i = 0; i < DG_ARRAY_LEN(faults); i++) fault_at(k, gmm, TSEL_TARGET_CUDA, faults[i].text, faults[i].msg);
  /* the cpu target: no shared memory */
  fault_at(k, gmm, TSEL_TARGET_CPU, "t1 block \"Z\"\nt2 cache_read t1 0 |shared []\n", "not available on the cpu");
  /* and what is read whole */
  reads_whole(k, gmm, "t1 block \"Z\"\nt2 loops t1 x4\nt3 split t2.1 [3 43]\nt4 postproc default\n");
  /* a block the graph made, by its name (the checker takes any here) */
  reads_whole(k, gmm, "t1 block \"Z\"\nt2 cache_read t1 0 shared [t1]\nt3 block \"X_shared\"\nt4 postproc default\n");
  reads_whole(k, gmm, "t1 block \"Z\"\nt2 loops t1 x4\nt3 split t2.1 [_ 3 5]\nt4 postproc\n");
  reads_whole(k, gmm,
              "t1 block \"Z\"\nt2 postproc\nt3 loops t1 x4\nt4 vectorize t3.3\nwhy t4: vectors\nexpect p1: fast\n");
  reads_whole(k, gmm,
              "t1 block \"Z\"\nt2 annotate t1 \"software_pipeline_stage\" [0 0 2]\nt3 annotate t1 "
              "\"warp_execution\" 1\nt4 annotate t1 tx_lo 32\nt5 sample [1 2 4] =2\nt6 annotate t1 coop t5\n"
              "t7 postproc default\n");
  reads_whole(k, gmm, "t1 sample [1 2 4] =4 probs=[0.5 0.25 0.25]\nt2 postproc default\nwhy t1 t2: ok\n");
  /* every registered intrinsic, where a name is taken; "" as an annotation's value; any string elsewhere */
  for (int i = 0; i < intrin_count(); i++) {
    char body[512];
    const char *name = intrin_at(i)->name;
    snprintf(body, sizeof body,
             "t1 block \"Z\"\nt2 loops t1 x4\nt3 tensorize t2.3 \"%s\"\nt4 annotate t1 tensorize_as \"%s\"\n"
             "t5 annotate t1 tensorize_init \"%s\"\nt6 postproc\n",
             name, name, name);
    reads_whole(k, gmm, body);
  }
  reads_whole(k, gmm,
              "t1 block \"Z\"\nt2 annotate t1 tensorize_as \"\"\nt3 annotate t1 tensorize_init \"\"\n"
              "t4 annotate t1 tiling \"SSRSRS\"\nt5 postproc default\n");
  ir_func_free(k);
}

/* What checks but is not read: the narrowings docs/tsel.md lists, each
 * refused at its first byte. */
DG_TEST(tsel_prefix_refuses_only_documented_narrowings) {
  const char *gmm = "batch_matmul:b=1,n=128,m=128,k=128,dtype=f32";
  dg_status st;
  dg_func *k = wl_build(gmm, &st);
  CHECK(k);
  static const char *const narrow[] = {
      "t1 block \"Z\"\n|# a comment\nt2 postproc default\n",
      "t1 block \"Z\"\nt2 r|aw \"PadEinsum\" [t1] [] x1\nt3 postproc default\n",
      "t1 block \"Z\"\n|why t1: early\nt2 postproc default\n",
      "t1 block \"Z\"\nt2 postproc\nt3 p|ostproc default\n",
      "t1 block \"Z\"\nt2 annotate t1 \"warp_execution\" 0|7\nt3 postproc default\n",
      "t1 block \"Z\"\nt2 annotate t1 \"warp_execution\" -|0\nt3 postproc default\n",
      "t1 block \"Z\"\nt2 block \"|\\x5a\"\nt3 postproc default\n",
      /* where the checker takes any block name (after a cache_read), a
       * name of the replayed graph's blocks only */
      "t1 block \"Z\"\nt2 cache_read t1 0 shared [t1]\nt3 block \"|Q\"\nt4 postproc default\n",
      "t1 block \"Z\"\nt2 cache_read t1 0 shared [t1]\nt3 block \"Z|x\"\nt4 postproc default\n",
      /* annotations MetaSchedule does not write: another key, a value of
       * another kind than its key's */
      "t1 block \"Z\"\nt2 annotate t1 \"|k\" 1\nt3 postproc default\n",
      "t1 block \"Z\"\nt2 annotate t1 \"warp_execution\" 1|.5\nt3 postproc default\n",
      "t1 block \"Z\"\nt2 annotate t1 tx_lo |\"32\"\nt3 postproc default\n",
      "t1 block \"Z\"\nt2 annotate t1 tiling |3\nt3 postproc default\n",
      "t1 block \"Z\"\nt2 annotate t1 tiling \"SSR|R\"\nt3 postproc default\n",
      /* a cooperative fetch of a block that is no copy into shared memory */
      "t1 block \"Z\"\nt2 co|op t1 [1 2] =1\nt3 postproc default\n",
      "t1 block \"Z\"\nt2 loops t1 x4\nt3 cache_read_at t1 0 local t2.2\nt4 co|op t3 [1 2] =1\n"
      "t5 postproc default\n",
      "t1 block \"Z\"\nt2 loops t1 x4\nt3 cache_read_at t1 0 shared t2.2\nt4 coop t|1 [1 2] =1\n"
      "t5 postproc default\n",
      "t1 block \"Z\"\nt2 annotate t1 \"software_pipeline_stage\" [0 |\"a\"]\nt3 postproc default\n",
      "t1 block \"Z\"\nt2 annotate t1 tensorize_as |[\"x\"]\nt3 postproc default\n",
      "t1 block \"Z\"\nt2 tensorize t1 \"wmma|\\x5ffill_16x16x16_f32\"\nt3 postproc default\n",
      "t1 sample [1 2 2|] =1\nt2 postproc default\n",
      "t1 block \"Z\"\nt2 loops t1 x4\nt3 thread_split t2.1 [32 204|8] =32\nt4 postproc default\n",
      "t1 block \"Z\"\nt2 loops t1 x4\nt3 split t2.1 [_ 32] unit=|2\nt4 postproc default\n",
      "t1 postproc default\nwhy t1: a|\x01b\n",
      /* a multi-level tiling: 5 factors a spatial loop, 3 a reduction loop */
      "t1 block \"Z\"\nt2 annotate t1 tiling \"SSSRRSRS\"\nt3 loops t1 x4\nt4 tile t3.0 [1 1 1 1 1| 1] max=64\n"
      "t5 postproc default\n",
      "t1 block \"Z\"\nt2 annotate t1 tiling \"SSSRRSRS\"\nt3 loops t1 x4\nt4 tile t3.3 [8 4 4| 1] max=64\n"
      "t5 postproc default\n",
      /* its innermost factors at most 64, its max= a design space's (4 or 64) */
      "t1 block \"Z\"\nt2 annotate t1 tiling \"SSSRRSRS\"\nt3 loops t1 x4\nt4 tile t3.1 [1 1 1 1| 128] max=128\n"
      "t5 postproc default\n",
      "t1 block \"Z\"\nt2 annotate t1 tiling \"SSSRRSRS\"\nt3 loops t1 x4\nt4 tile t3.1 [1 1 1 2 64] max=6|5\n"
      "t5 postproc default\n",
      "t1 block \"Z\"\nt2 annotate t1 tiling \"SSSRRSRS\"\nt3 loops t1 x4\nt4 tile t3.1 [1 1 1 32 4] max=|0\n"
      "t5 postproc default\n",
      /* and its reorder, once its tiles are written */
      "t1 block \"Z\"\nt2 annotate t1 tiling \"SSSRRSRS\"\nt3 loops t1 x4\nt4 tile t3.0 [1 1 1 1 1] max=64\n"
      "t5 tile t3.1 [2 2 8 2 2] max=64\nt6 tile t3.2 [2 2 8 2 2] max=64\nt7 tile t3.3 [8 4 4] max=64\n"
      "t8 |postproc default\n",
      /* its threads at least the warp's 32 (the spatial loops hold more
       * than 64 iterations): after 1 and 8, the last thread factor 4 */
      "t1 block \"Z\"\nt2 annotate t1 tiling \"SSSRRSRS\"\nt3 loops t1 x4\nt4 tile t3.0 [1 1 1 1 1] max=64\n"
      "t5 tile t3.1 [2 2 8 2 2] max=64\nt6 tile t3.2 [32 1 |1 2 2] max=64\nt7 postproc default\n",
      /* in a graph of a tiling: a key once on a handle, the tiling's keys
       * on blocks, the thread bounds on a tiled block and as MetaSchedule
       * writes them (32 here, 1,024) */
      "t1 block \"Z\"\nt2 annotate t1 tiling \"SSSRRSRS\"\nt3 loops t1 x4\nt4 cache_read_at t1 0 shared t3.2\n"
      "t5 coop t4 [1 2] =1\nt6 co|op t4 [1 2] =2\nt7 postproc default\n",
      "t1 block \"Z\"\nt2 block \"root\"\nt3 annotate t1 tiling \"SSSRRSRS\"\n"
      "t4 unroll_steps t2 [0 16] =16\nt5 un|roll_steps t2 [0 16] =0\nt6 postproc default\n",
      "t1 block \"Z\"\nt2 annotate t1 tiling \"SSSRRSRS\"\nt3 annotate t1 \"warp_execution\" 1\n"
      "t4 annotate t1 |\"warp_execution\" 1\nt5 postproc default\n",
      "t1 block \"Z\"\nt2 annotate t1 tiling \"SSSRRSRS\"\nt3 loops t1 x4\nt4 annotate t3.0 |coop 1\n"
      "t5 postproc default\n",
      "t1 block \"Z\"\nt2 block \"root\"\nt3 annotate t1 tiling \"SSSRRSRS\"\nt4 annotate t2 t|x_lo 32\n"
      "t5 postproc default\n",
      "t1 block \"Z\"\nt2 annotate t1 tiling \"SSSRRSRS\"\nt3 annotate t1 tx_lo |1\nt4 postproc default\n",
      "t1 block \"Z\"\nt2 annotate t1 tiling \"SSSRRSRS\"\nt3 annotate t1 tx_hi 102|3\nt4 postproc default\n",
      /* unroll_steps on the root block; no inline of a reduction block (the
       * replay's) */
      "t1 block \"Z\"\nt2 block \"root\"\nt3 annotate t1 tiling \"SSSRRSRS\"\nt4 unroll_steps t|1 [0 16] =16\n"
      "t5 postproc default\n",
      "t1 block \"Z\"\nt2 |inline t1\nt3 postproc default\n",
      /* a software pipeline on the tiled block's own tile loops, with one
       * of the sketches' lists */
      "t1 block \"Z\"\nt2 annotate t1 tiling \"SSSRRSRS\"\nt3 loops t1 x4\nt4 tile t3.3 [8 4 4] max=64\n"
      "t5 fuse t4.0\nt6 annotate t5 \"software_pipeline_order\" [0 |0 2]\nt7 postproc default\n",
      "t1 block \"Z\"\nt2 annotate t1 tiling \"SSSRRSRS\"\nt3 loops t1 x4\nt4 cache_read_at t1 0 shared t3.2\n"
      "t5 loops t4 x6\nt6 fuse t5.4 t5.5\nt7 annotate t6 |\"software_pipeline_stage\" [0 0 2]\n"
      "t8 coop t4 [1 2] =1\nt9 postproc default\n",
  };
  for (size_t i = 0; i < DG_ARRAY_LEN(narrow); i++) fault_at(k, gmm, TSEL_TARGET_CUDA, narrow[i], NULL);
  ir_func_free(k);
}

/* The unique workloads' first targets (refinements repeat them closely). */
static int unique_targets(int *idx, int cap) {
  int n = 0;
  for (int r = 0; r < n_recs && n < cap; r++) {
    bool seen = false;
    for (int k = 0; k < n; k++) seen |= strcmp(recs[idx[k]].workload, recs[r].workload) == 0;
    if (!seen) idx[n++] = r;
  }
  return n;
}

/* The forced text is exactly the header, `tN ` at the start of each edit
 * line (after a bare `postproc`, where the graph may end, `N ` once the
 * model wrote the 't') and the whole line of each multi-level tiling's
 * reorder (the line after its last tile: tsel_determined_line), and a
 * caller that feeds it, then the rest, reads the whole text. */
static void check_forced(const char *spec, const char *t) {
  dg_status st;
  dg_func *k = wl_build(spec, &st);
  CHECK(k);
  tsel_prefix *p = tsel_prefix_new(k, spec, TSEL_TARGET_CUDA, &st);
  CHECK_OK(st);
  size_t n = strlen(t);
  /* the expected forced bytes, from the text alone */
  char *want = dg_calloc(n + 1, 1), *got = dg_calloc(n + 1, 1);
  const char *nl = strchr(t, '\n');
  memset(want, 1, (size_t)(nl - t + 1));
  int edit = 0;
  bool post = false, after_tile = false; /* the last line tiled a `loops` edit's loop */
  DG_VEC(bool) is_loops = {0};
  for (const char *l = nl + 1; *l; l = strchr(l, '\n') + 1) {
    char id[16];
    int m = snprintf(id, sizeof id, "t%d ", edit + 1);
    if (strncmp(l, id, (size_t)m) == 0) {
      bool reorder = strncmp(l + m, "reorder ", 8) == 0;
      size_t len = reorder && after_tile ? (size_t)(strchr(l, '\n') - l + 1) : (size_t)m;
      memset(want + (l - t) + post, 1, len - post);
      post |= strncmp(l + m, "postproc", 8) == 0;
      int src = 0;
      after_tile = sscanf(l + m, "tile t%d.", &src) == 1 && src >= 1 && src <= (int)is_loops.len &&
                   is_loops.data[src - 1];
      DG_VEC_PUSH(&is_loops, strncmp(l + m, "loops ", 6) == 0);
      edit++;
    } else {
      after_tile = false;
    }
  }
  DG_VEC_FREE(&is_loops);
  size_t pos = 0;
  while (pos < n) {
    const char *f = tsel_prefix_forced(p);
    size_t fl = strlen(f);
    if (fl) {
      CHECK_MSG(strncmp(t + pos, f, fl) == 0, "%s: forced '%s' at %zu", spec, f, pos);
      memset(got + pos, 1, fl);
      CHECK(tsel_prefix_feed(p, t + pos, fl));
      pos += fl;
    } else {
      CHECK_MSG(tsel_prefix_feed(p, t + pos, 1), "%s: byte %zu refused", spec, pos);
      pos++;
    }
  }
  for (size_t i = 0; i < n; i++)
    CHECK_MSG(!want[i] == !got[i], "%s: byte %zu ('%c') forced %d, expected %d", spec, i, t[i], got[i], want[i]);
  CHECK(tsel_prefix_complete(p));
  CHECK_STREQ(tsel_prefix_forced(p), "");
  free(want);
  free(got);
  tsel_prefix_free(p);
  ir_func_free(k);
}

DG_TEST(tsel_prefix_forced_is_header_and_edit_ids) {
  CHECK(load_records() && load_lifts());
  for (int r = 0; r < n_recs; r += rec_stride()) check_forced(recs[r].workload, recs[r].target);
  for (int i = 0; i < n_lifts; i++)
    if (lifts[i].kind != LG_RANDOM) check_forced(lifts[i].spec, lifts[i].text);
}

/* Replaces [at, at+len) of text by rep. */
static char *splice(const char *text, size_t at, size_t len, const char *rep) {
  dg_str o;
  dg_str_init(&o);
  dg_str_putn(&o, text, at);
  dg_str_puts(&o, rep);
  dg_str_puts(&o, text + at + len);
  return dg_str_take(&o);
}

/* The line (without its newline) that starts with `tN OP `, or NULL. */
static const char *find_edit(const char *text, const char *op, int from, int *num) {
  int edit = 0;
  for (const char *l = strchr(text, '\n') + 1; *l; l = strchr(l, '\n') + 1) {
    if (l[0] != 't' || l[1] < '0' || l[1] > '9') break;
    edit++;
    const char *sp = strchr(l, ' ');
    size_t on = strlen(op);
    if (edit >= from && strncmp(sp + 1, op, on) == 0 && (sp[1 + on] == ' ' || sp[1 + on] == '\n')) {
      *num = edit;
      return l;
    }
  }
  return NULL;
}

/* A planted fault: the checker must refuse exactly byte `at` (and the
 * complete graph must fail tsel_check with `msg`). */
static void expect_refused_at(const dg_func *k, const char *spec, tsel_target target, const char *bad, size_t at,
                              const char *msg, int *count) {
  dg_status st;
  tsel_prefix *p = tsel_prefix_new(k, spec, target, &st);
  CHECK_OK(st);
  long r = first_refused(p, bad, strlen(bad));
  tsel_prefix_free(p);
  char why[600] = "";
  bool ok = graph_checks(bad, k, target, why, sizeof why);
  CHECK_MSG(!ok, "%s: the planted graph checks", spec);
  if (msg) CHECK_MSG(strstr(why, msg), "%s: the checker says '%s', not '%s'", spec, why, msg);
  CHECK_MSG(r == (long)at, "%s: refused at %ld, planted at %zu ('%.30s')", spec, r, at, bad + at);
  (*count)++;
}

DG_TEST(tsel_prefix_refuses_planted_faults) {
  CHECK(load_records());
  int idx[64], nu = unique_targets(idx, 64);
  int n_count = 0, n_tile = 0, n_op = 0, n_axis = 0, n_limit = 0, n_scope = 0, n_stage = 0, n_cpu = 0, n_stale = 0,
      n_stale_block = 0;
  for (int u = 0; u < nu; u++) {
    const record *rc = &recs[idx[u]];
    dg_status st;
    dg_func *k = wl_build(rc->workload, &st);
    CHECK(k);
    const char *t = rc->target, *l;
    int num;
    /* an unknown edit: no edit starts with 'z'; 'tilz' is none either */
    l = find_edit(t, "block", 1, &num);
    CHECK(l);
    {
      size_t at = (size_t)(strchr(l, ' ') + 1 - t);
      char *bad = splice(t, at, 0, "z");
      expect_refused_at(k, rc->workload, TSEL_TARGET_CUDA, bad, at, "unknown edit", &n_op);
      free(bad);
    }
    if ((l = find_edit(t, "tile", 1, &num))) {
      size_t at = (size_t)(strchr(l, ' ') + 4 - t);
      char *bad = splice(t, at, 1, "z");
      expect_refused_at(k, rc->workload, TSEL_TARGET_CUDA, bad, at, "unknown edit", &n_op);
      free(bad);
    }
    /* a wrong loop count, where the checker knows the count */
    for (int from = 1; (l = find_edit(t, "loops", from, &num)); from = num + 1) {
      const char *x = strstr(l, " x") + 2;
      long c = strtol(x, NULL, 10);
      char rep[24];
      snprintf(rep, sizeof rep, "%ld", c + 1);
      size_t at = (size_t)(x - t), cl = strspn(x, "0123456789");
      char *bad = splice(t, at, cl, rep);
      char why[600];
      if (!graph_checks(bad, k, TSEL_TARGET_CUDA, why, sizeof why) && strstr(why, "loops here")) {
        size_t d = 0;
        while (rep[d] == x[d]) d++;
        expect_refused_at(k, rc->workload, TSEL_TARGET_CUDA, bad, at + d, "loops here", &n_count);
      }
      free(bad);
    }
    /* a tile whose last factor breaks the product: a digit no divisor of
     * the needed factor starts with */
    for (int from = 1; (l = find_edit(t, "tile", from, &num)); from = num + 1) {
      const char *close = strchr(l, ']');
      const char *last = close;
      while (last[-1] != ' ' && last[-1] != '[') last--;
      long q = strtol(last, NULL, 10);
      for (int d = 1; d <= 9; d++) {
        bool lead = false;
        for (long x = 1; x <= q; x++)
          if (q % x == 0) {
            long y = x;
            while (y >= 10) y /= 10;
            lead |= y == d;
          }
        if (lead) continue;
        char rep[4] = {(char)('0' + d), 0};
        size_t at = (size_t)(last - t);
        char *bad = splice(t, at, (size_t)(close - last), rep);
        expect_refused_at(k, rc->workload, TSEL_TARGET_CUDA, bad, at, "multiply to", &n_tile);
        free(bad);
        break;
      }
    }
    /* thread axes: a misspelt one, and one past its limit */
    for (int from = 1; (l = find_edit(t, "fuse_bind", from, &num)); from = num + 1) {
      const char *e = strchr(l, '\n'), *sp = e;
      while (sp[-1] != ' ') sp--;
      size_t at = (size_t)(sp - t);
      if (strncmp(sp, "threadIdx.", 10) == 0 || strncmp(sp, "blockIdx.", 9) == 0) {
        size_t dot = (size_t)(strchr(sp, '.') - t) + 1;
        char *bad = splice(t, dot, 1, "w");
        expect_refused_at(k, rc->workload, TSEL_TARGET_CUDA, bad, dot, "unknown thread axis", &n_axis);
        free(bad);
      }
      /* past threadIdx.z's 64: refused at the 'z', or at the 'h' when
       * threadIdx.x's 1024 is passed too (no thread axis fits) */
      char *bad = splice(t, at, (size_t)(e - sp), "threadIdx.z");
      char *bad_x = splice(t, at, (size_t)(e - sp), "threadIdx.x");
      char why[600];
      bool x_over = !graph_checks(bad_x, k, TSEL_TARGET_CUDA, why, sizeof why) && strstr(why, "exceeds the limit");
      if (!graph_checks(bad, k, TSEL_TARGET_CUDA, why, sizeof why) && strstr(why, "exceeds the limit"))
        expect_refused_at(k, rc->workload, TSEL_TARGET_CUDA, bad, at + (x_over ? 1 : 10), "exceeds the limit",
                          &n_limit);
      free(bad_x);
      free(bad);
    }
    /* scopes: misspelt, wrong for the stage, not on the cpu */
    bool cpu_done = false;
    for (int from = 1; (l = find_edit(t, "cache_read_at", from, &num)); from = num + 1) {
      const char *sc = strstr(l, " shared ");
      if (!sc || sc > strchr(l, '\n')) continue;
      size_t at = (size_t)(sc + 1 - t);
      char *bad = splice(t, at + 5, 1, "x");
      expect_refused_at(k, rc->workload, TSEL_TARGET_CUDA, bad, at + 5, "unknown storage scope", &n_scope);
      free(bad);
      bad = splice(t, at, 6, "wmma.accumulator");
      expect_refused_at(k, rc->workload, TSEL_TARGET_CUDA, bad, at + 5, "cannot be wmma.accumulator", &n_stage);
      free(bad);
      /* cpu: the text up to the first such scope is read, "shared" is not */
      if (cpu_done) continue;
      cpu_done = true;
      tsel_prefix *p = tsel_prefix_new(k, rc->workload, TSEL_TARGET_CPU, &st);
      CHECK_OK(st);
      long rf = first_refused(p, t, strlen(t));
      CHECK_MSG(rf == (long)at, "%s cpu: refused at %ld, not %zu: '%.30s'", rc->workload, rf, at, t + rf);
      tsel_prefix_free(p);
      n_cpu++;
    }
    /* a stale loop: the reorder after the tiles names a loop of the loops
     * edit L whose every output a tile consumed (and no edit tL0 ... exists
     * yet): refused at the digit of L */
    if ((l = find_edit(t, "reorder", 1, &num))) {
      int ln;
      const char *lp = find_edit(t, "loops", 1, &ln);
      int tiled = 0, outs = lp ? atoi(strstr(lp, " x") + 2) : 0;
      for (int from = ln + 1, tn; lp && find_edit(t, "tile", from, &tn) && tn < num; from = tn + 1) {
        char pre[32];
        snprintf(pre, sizeof pre, "tile t%d.", ln);
        tiled += strstr(find_edit(t, "tile", from, &tn), pre) != NULL;
      }
      if (lp && tiled == outs && ln < 10 && num < 10 * ln) {
        const char *op = strstr(l, "reorder t") + 9;
        size_t at = (size_t)(op - t), dl = strspn(op, "0123456789");
        char rep[16];
        snprintf(rep, sizeof rep, "%d", ln);
        char *bad = splice(t, at, dl, rep);
        expect_refused_at(k, rc->workload, TSEL_TARGET_CUDA, bad, at, "is stale", &n_stale);
        free(bad);
      }
    }
    /* a stale block: the inlined block named after the inline. Its id may
     * be a prefix of a live block's (t1 of t12): then the byte after it is
     * the first that is wrong, else its last digit */
    if ((l = find_edit(t, "inline", 1, &num))) {
      const char *b = strstr(l, "inline t") + 7;
      size_t bl = strcspn(b, "\n");
      int un;
      const char *us = find_edit(t, "unroll_steps", num + 1, &un);
      if (us) {
        const char *ub = strstr(us, "unroll_steps t") + 13;
        size_t at = (size_t)(ub - t), ul = strcspn(ub, " ");
        char *rep = strndup(b, bl);
        bool longer = false; /* a live block tBk (the checker says), the root (unroll_steps' block) */
        for (int m = 0; m < un && !longer; m++) {
          char id[32], root[64];
          snprintf(id, sizeof id, "t%d", m);
          snprintf(root, sizeof root, "\nt%d block \"root\"\n", m);
          if (strlen(id) <= bl || strncmp(id, rep, bl) != 0 || !strstr(t, root)) continue;
          char *alt = splice(t, at, ul, id), why[600];
          longer = graph_checks(alt, k, TSEL_TARGET_CUDA, why, sizeof why);
          free(alt);
        }
        char *bad = splice(t, at, ul, rep);
        expect_refused_at(k, rc->workload, TSEL_TARGET_CUDA, bad, at + bl - (longer ? 0 : 1), "is stale",
                          &n_stale_block);
        free(rep);
        free(bad);
      }
    }
    ir_func_free(k);
  }
  CHECK(n_op >= 10 && n_count >= 5 && n_tile >= 20 && n_axis >= 10 && n_limit >= 1 && n_scope >= 5 && n_stage >= 5 &&
        n_cpu >= 5 && n_stale >= 3 && n_stale_block >= 1);
}

/* Whether the number around m[i] has a leading zero (the checker reads
 * none). */
static bool leading_zero(const char *m, size_t i) {
  size_t j = i;
  while (j > 0 && m[j - 1] >= '0' && m[j - 1] <= '9') j--;
  bool starts = j == 0 || m[j - 1] == ' ' || m[j - 1] == '[' || m[j - 1] == '=' || m[j - 1] == '-';
  return starts && m[j] == '0' && m[j + 1] >= '0' && m[j + 1] <= '9';
}

/* The full key edit e annotates (or unannotates) its first handle with;
 * coop and unroll_steps annotate too. */
static const char *ann_key_of(const tsel_edit *e) {
  if (e->op == TSEL_OP_COOP) return "meta_schedule.cooperative_fetch";
  if (e->op == TSEL_OP_UNROLL_STEPS) return "meta_schedule.unroll_explicit";
  if ((e->op != TSEL_OP_ANNOTATE && e->op != TSEL_OP_UNANNOTATE) || e->n_args < 2) return NULL;
  return e->args[1].kind == TV_WORD ? tsel_ann_full(e->args[1].s) : e->args[1].kind == TV_STR ? e->args[1].s : NULL;
}

/* Whether edit i of a graph of a multi-level tiling (as MetaSchedule's
 * sketches write them) sets a key its handle has (no unannotate between),
 * unroll_steps on another block than the root, a tiling's key (tiling,
 * coop, tx_lo, tx_hi) on a loop, the thread bounds on a block with no
 * tiling or other than 1,024 and 1 or 32, a software pipeline off the tiled
 * block's tile loops or with another list than the sketches', or the
 * tensor-core and warp keys other than the sketches write them. */
static bool tiling_annotation_narrowed(const tsel_graph *g, int i) {
  bool tiled = false;
  for (int t = 0; t < g->n_edits && !tiled; t++)
    tiled = g->edits[t].op == TSEL_OP_ANNOTATE && g->edits[t].args[0].kind == TV_REF &&
            tsel_tiling_of(g, (int)g->edits[t].args[0].i);
  const tsel_edit *e = &g->edits[i];
  if (!tiled) return false;
  const char *key = ann_key_of(e);
  if (!key || e->args[0].kind != TV_REF) return false;
  bool taken = false;
  for (int t = 0; t < i; t++) {
    const tsel_edit *f = &g->edits[t];
    const char *k = ann_key_of(f);
    if (k && f->args[0].kind == TV_REF && f->args[0].i == e->args[0].i && f->args[0].sub == e->args[0].sub &&
        strcmp(k, key) == 0)
      taken = f->op != TSEL_OP_UNANNOTATE;
  }
  if (e->op == TSEL_OP_UNANNOTATE) return false;
  if (taken) return true;
  const tsel_edit *made = e->args[0].i >= 1 && e->args[0].i <= g->n_edits ? &g->edits[e->args[0].i - 1] : NULL;
  if (e->op == TSEL_OP_UNROLL_STEPS)
    return !made || made->op != TSEL_OP_BLOCK || made->args[0].kind != TV_STR || strcmp(made->args[0].s, "root") != 0;
  if (e->op == TSEL_OP_ANNOTATE && e->args[1].kind == TV_STR && e->n_args >= 3) {
    const tsel_val *v = &e->args[2];
    if (strncmp(key, "software_pipeline_", 18) == 0) {
      /* on a tile's loop or a fuse of such, one of the sketches' lists */
      bool tiles = made && (made->op == TSEL_OP_TILE ? e->args[0].sub >= 0 : made->op == TSEL_OP_FUSE);
      for (int a = 0; tiles && made->op == TSEL_OP_FUSE && a < made->n_args; a++)
        tiles = made->args[a].kind == TV_REF && made->args[a].sub >= 0 && made->args[a].i >= 1 &&
                g->edits[made->args[a].i - 1].op == TSEL_OP_TILE;
      static const char *const lists[][2] = {
          {"software_pipeline_stage", "0 0 1"},         {"software_pipeline_stage", "0 0 2"},
          {"software_pipeline_stage", "0 0 3"},         {"software_pipeline_stage", "0 0 0 0 0 1 1"},
          {"software_pipeline_order", "0 1 2"},         {"software_pipeline_order", "0 3 1 4 5 2 6"},
          {"software_pipeline_async_stages", "0"}};
      char got[64] = "";
      for (int a = 0; v->kind == TV_LIST && a < v->n && a < 8; a++)
        snprintf(got + strlen(got), sizeof got - strlen(got), "%s%lld", a ? " " : "", (long long)v->items[a].i);
      bool known = false;
      for (size_t l = 0; l < sizeof lists / sizeof lists[0]; l++)
        known |= strcmp(key, lists[l][0]) == 0 && strcmp(got, lists[l][1]) == 0;
      return !tiles || !known;
    }
    if (strcmp(key, "warp_execution") == 0 || strcmp(key, "tirx.manifest_shared_memory_local_stage") == 0)
      return v->kind != TV_INT || v->i != 1 || !made || e->args[0].sub != -1;
    if (strcmp(key, "double_buffer_scope") == 0) return v->kind != TV_INT || v->i != 0;
    return strncmp(key, "meta_schedule.", 14) == 0;
  }
  if (e->op != TSEL_OP_ANNOTATE || e->args[1].kind != TV_WORD) return false;
  const char *a = e->args[1].s;
  bool bounds = strcmp(a, "tx_lo") == 0 || strcmp(a, "tx_hi") == 0;
  bool block_key = bounds || strcmp(a, "tiling") == 0 || strcmp(a, "coop") == 0;
  bool block = made && e->args[0].sub == -1 &&
               (made->op == TSEL_OP_BLOCK || made->op == TSEL_OP_CACHE_READ || made->op == TSEL_OP_CACHE_READ_AT ||
                made->op == TSEL_OP_CACHE_WRITE || made->op == TSEL_OP_CACHE_WRITE_AT);
  if (block_key && !block) return true;
  if (bounds && !tsel_tiling_of(g, (int)e->args[0].i)) return true;
  const tsel_val *v = &e->args[2];
  if (strcmp(a, "tx_hi") == 0) return v->kind != TV_INT || v->i != 1024;
  if (strcmp(a, "tx_lo") == 0) return v->kind != TV_INT || (v->i != 1 && v->i != 32);
  return false;
}

/* Whether a graph that checks uses a narrowing a single-byte change can
 * make: repeated candidates, thread_split candidates past [1, 1024], a flag
 * other than 0 and 1, a multi-level tiling's tile of the wrong count, or
 * with an innermost factor over 64 or a max= other than 4 and 64. */
static bool narrowed(const char *text) {
  dg_status st;
  tsel_graph *g = tsel_parse(text, NULL, &st);
  bool n = false;
  for (int i = 0; g && i < g->n_edits && !n; i++) {
    const tsel_edit *e = &g->edits[i];
    if (e->op == TSEL_OP_SAMPLE || e->op == TSEL_OP_COOP || e->op == TSEL_OP_UNROLL_STEPS ||
        e->op == TSEL_OP_THREAD_SPLIT) {
      const tsel_val *c = &e->args[e->op == TSEL_OP_SAMPLE ? 0 : 1];
      for (int a = 0; a < c->n; a++) {
        for (int b = 0; b < a; b++) n |= c->items[a].i == c->items[b].i;
        n |= e->op == TSEL_OP_THREAD_SPLIT && (c->items[a].i < 1 || c->items[a].i > 1024);
      }
    }
    /* a cooperative fetch of a block that is no copy into shared memory */
    if (e->op == TSEL_OP_COOP && e->n_args >= 1 && e->args[0].kind == TV_REF && e->args[0].i >= 1 &&
        e->args[0].i <= g->n_edits) {
      const tsel_edit *b = &g->edits[e->args[0].i - 1];
      n |= !((b->op == TSEL_OP_CACHE_READ || b->op == TSEL_OP_CACHE_READ_AT ||
              b->op == TSEL_OP_CACHE_WRITE || b->op == TSEL_OP_CACHE_WRITE_AT) &&
             b->n_args >= 3 &&
             b->args[2].kind == TV_WORD &&
             (strcmp(b->args[2].s, "shared") == 0 || strcmp(b->args[2].s, "shared.dyn") == 0));
    }
    /* an annotation MetaSchedule does not write: another key, or a value
     * of another kind than its key's */
    if (e->op == TSEL_OP_ANNOTATE && e->n_args >= 3) {
      const tsel_val *key = &e->args[1], *v = &e->args[2];
      tsel_ann_kind kind = tsel_ann_value_kind(key->s);
      bool tiling = false;
      for (int a = 0; v->kind == TV_STR && a < tsel_ann_tiling_count(); a++)
        tiling |= strcmp(v->s, tsel_ann_tiling_at(a)) == 0;
      bool ints = v->kind == TV_LIST;
      for (int a = 0; ints && a < v->n; a++) ints = v->items[a].kind == TV_INT;
      n |= (key->kind == TV_STR && kind == TSEL_ANN_ANY) ||
           (kind == TSEL_ANN_INT && v->kind != TV_INT && v->kind != TV_REF) ||
           ((kind == TSEL_ANN_STR || kind == TSEL_ANN_INTRIN) && v->kind != TV_STR) ||
           (kind == TSEL_ANN_TILING && !tiling) ||
           (kind == TSEL_ANN_INTS && !ints);
    }
    n |= tiling_annotation_narrowed(g, i);
    for (int k = 0; k < e->n_kws; k++)
      n |= (strcmp(e->kws[k].key, "unit") == 0 || strcmp(e->kws[k].key, "nopred") == 0) &&
           e->kws[k].val.kind == TV_INT && e->kws[k].val.i != 0 && e->kws[k].val.i != 1;
    /* a GPU tiling's block of fewer than 32 threads (its five-factor
     * tiles' third factors) where its spatial loops hold more than 64 */
    if (e->op == TSEL_OP_LOOPS && e->args[0].kind == TV_REF && tsel_tiling_of(g, (int)e->args[0].i) &&
        strcmp(tsel_tiling_of(g, (int)e->args[0].i), "SSSRRSRS") == 0) {
      long long threads = 1, spatial = 1;
      for (int t = 0; t < g->n_edits; t++) {
        const tsel_edit *f = &g->edits[t];
        if (f->op != TSEL_OP_TILE || f->args[0].kind != TV_REF || f->args[0].i != i + 1 ||
            f->args[1].kind != TV_LIST || f->args[1].n != 5)
          continue;
        for (int a = 0; a < 5; a++)
          if (f->args[1].items[a].kind == TV_INT && spatial < (1LL << 40)) spatial *= f->args[1].items[a].i;
        if (f->args[1].items[2].kind == TV_INT) threads *= f->args[1].items[2].i;
      }
      n |= spatial > 64 && threads < 32;
    }
    /* a tile of a multi-level tiling's loop with a factor count of neither
     * kind (one byte changes a count by one: 5 and 3 become 4 or 6, 2 or 4) */
    if (e->op == TSEL_OP_TILE && e->n_args >= 2 && e->args[0].kind == TV_REF && e->args[0].i >= 1 &&
        e->args[0].i <= g->n_edits && e->args[1].kind == TV_LIST) {
      const tsel_edit *le = &g->edits[e->args[0].i - 1];
      const char *q = le->op == TSEL_OP_LOOPS && le->args[0].kind == TV_REF ? tsel_tiling_of(g, (int)le->args[0].i)
                                                                             : NULL;
      int ns = 0, nr = 0;
      for (const char *x = q; x && *x; x++) ns += *x == 'S', nr += *x == 'R';
      n |= q && e->args[1].n != ns && e->args[1].n != nr;
      /* and one of the structure's count with an innermost factor over 64,
       * or a max= other than the design spaces' 4 and 64 */
      const tsel_val *fs = &e->args[1];
      if (q && fs->n >= 1 && (fs->n == ns || fs->n == nr)) {
        n |= fs->items[fs->n - 1].kind == TV_INT && fs->items[fs->n - 1].i > 64;
        for (int k = 0; k < e->n_kws; k++)
          n |= strcmp(e->kws[k].key, "max") == 0 && e->kws[k].val.kind == TV_INT && e->kws[k].val.i != 4 &&
               e->kws[k].val.i != 64;
      }
    }
  }
  tsel_graph_free(g);
  return n;
}

/* Whether the graph checks and replays on the kernel (the road's gates up
 * to the replay), and if not why. */
static bool graph_replays(const char *text, const dg_func *k, char *why, size_t n) {
  eval_score_opts o;
  memset(&o, 0, sizeof o);
  o.kernel = k;
  o.last = EVAL_GATE_REPLAY;
  eval_score sc;
  bool ok = eval_score_tsel(text, "graph", &o, &sc);
  if (!ok && why) snprintf(why, n, "%.200s", sc.reason);
  eval_score_free(&sc);
  return ok;
}

/* The narrowings from the replay: the line of the refused byte (at) names
 * a handle and the graph up to and with it does not replay (a loop that is
 * stale, not plain or not the only child of the one before it in a fuse, a
 * loop holding a reduction bound to other than threadIdx or past its 1,024,
 * a `loops` count other than the block's, an init below a reduction loop
 * or on a block without one, an inline or a compute_at the schedule
 * refuses). */
static bool replay_narrowed(const char *text, const dg_func *k, size_t at) {
  dg_status st;
  tsel_graph *g = tsel_parse(text, NULL, &st);
  if (!g) return false;
  int line = 1;
  for (size_t i = 0; i < at; i++) line += text[i] == '\n';
  int edit = 0;
  for (int i = 0; i < g->n_edits; i++)
    if (g->edits[i].line == line) edit = i + 1;
  bool handle = edit && g->edits[edit - 1].op == TSEL_OP_BLOCK; /* a name the replay finds */
  for (int a = 0; edit && a < g->edits[edit - 1].n_args; a++) handle |= g->edits[edit - 1].args[a].kind == TV_REF;
  tsel_graph_free(g);
  if (!handle) return false;
  /* the graph up to and with the changed edit, replayed */
  const char *end = strchr(text + at, '\n');
  size_t hn = end ? (size_t)(end - text) + 1 : strlen(text);
  char *head = dg_malloc(hn + 1);
  memcpy(head, text, hn);
  head[hn] = 0;
  bool replays = graph_replays(head, k, NULL, 0);
  free(head);
  return !replays;
}

/* Single-byte changes of the first UNIQUE_MAX unique targets and 2 hand schedules,
 * at every position: whatever the checker reads to a complete graph parses
 * and checks (no false acceptance), and whatever it refuses does not check,
 * unless the change made one of the documented narrowings (a leading zero,
 * repeated candidates, a fuse the schedule refuses, ...) or changed the
 * header's kernel spec. */
DG_TEST(tsel_prefix_mutations_are_sound) {
  CHECK(load_records() && load_lifts());
  int idx[UNIQUE_MAX], nu = unique_targets(idx, UNIQUE_MAX), hand[2], nh = 0;
  for (int i = 0; i < n_lifts && nh < 2; i++)
    if (lifts[i].kind == LG_HAND) hand[nh++] = i;
  static const char reps[] = {'0', '7', ' ', '\n', 't', '.', ']', '"'};
  long n_accepted = 0, n_refused = 0;
  for (int u = 0; u < nu + nh; u++) { /* the targets, then hand schedules (a bare postproc) */
    const char *spec = u < nu ? recs[idx[u]].workload : lifts[hand[u - nu]].spec;
    const char *t = u < nu ? recs[idx[u]].target : lifts[hand[u - nu]].text;
    dg_status st;
    dg_func *k = wl_build(spec, &st);
    CHECK(k);
    size_t n = strlen(t);
    tsel_prefix *p = tsel_prefix_new(k, spec, TSEL_TARGET_CUDA, &st);
    CHECK_OK(st);
    tsel_prefix *at = tsel_prefix_save(p);
    char *m = dg_strdup(t);
    size_t header = (size_t)(strchr(t, '\n') - t) + 1; /* another spec names another kernel (score.c) */
    for (size_t i = 0; i < n; i++) {
      for (size_t r = 0; r < sizeof reps; r++) {
        if (reps[r] == t[i]) continue;
        m[i] = reps[r];
        tsel_prefix_restore(p, at);
        long bad = first_refused(p, m + i, n - i);
        if (bad < 0 && tsel_prefix_complete(p)) {
          char why[600];
          CHECK_MSG(graph_checks(m, k, TSEL_TARGET_CUDA, why, sizeof why),
                    "%s: '%c' at %zu is read to the end but %s", spec, reps[r], i, why);
          n_accepted++;
        } else if (bad >= 0) { /* (a text read whole but not complete lacks the final newline) */
          char why[600];
          CHECK_MSG(i < header || leading_zero(m, i) || !graph_checks(m, k, TSEL_TARGET_CUDA, why, sizeof why) ||
                        narrowed(m) || replay_narrowed(m, k, i + (size_t)bad),
                    "%s: '%c' at %zu is refused but checks (at %ld): ...%.80s", spec, reps[r], i, bad, m + (i > 60 ? i - 60 : 0));
          n_refused++;
        }
      }
      m[i] = t[i];
      tsel_prefix_restore(p, at);
      CHECK(tsel_prefix_feed(p, t + i, 1));
      tsel_prefix_free(at);
      at = tsel_prefix_save(p);
    }
    free(m);
    tsel_prefix_free(at);
    tsel_prefix_free(p);
    ir_func_free(k);
  }
  CHECK(n_accepted > 100 && n_refused > 1000);
}

/* The checker's completion from where p stands (at byte `at` of a text)
 * ends the graph, short, and the graph checks; p is unchanged. */
static void completion_checks(tsel_prefix *p, const dg_func *k, const char *spec, size_t at) {
  dg_str c;
  dg_str_init(&c);
  CHECK_MSG(tsel_prefix_completion(p, &c), "%s: no completion after %zu bytes", spec, at);
  tsel_prefix *q = tsel_prefix_save(p);
  CHECK_MSG(tsel_prefix_feed(q, c.s, c.len) && tsel_prefix_complete(q), "%s: completion '%s' after %zu", spec, c.s,
            at);
  size_t len;
  char why[600];
  const char *full = tsel_prefix_text(q, &len);
  CHECK_MSG(graph_checks(full, k, TSEL_TARGET_CUDA, why, sizeof why), "%s: '%s' after %zu: %s", spec, c.s, at, why);
  CHECK_MSG(c.len < 400, "%s: a completion of %zu bytes", spec, c.len);
  tsel_prefix_free(q);
  dg_str_free(&c);
}

/* From every other prefix of the first UNIQUE_MAX unique targets, the completion
 * ends the graph, and the graph checks. */
DG_TEST(tsel_prefix_completions_check) {
  CHECK(load_records());
  int idx[UNIQUE_MAX], nu = unique_targets(idx, UNIQUE_MAX);
  long n_done = 0;
  for (int u = 0; u < nu; u++) {
    const record *rc = &recs[idx[u]];
    dg_status st;
    dg_func *k = wl_build(rc->workload, &st);
    CHECK(k);
    for (int explain = 0; explain < 2; explain++) {
      tsel_prefix *p = tsel_prefix_new(k, rc->workload, TSEL_TARGET_CUDA, &st);
      CHECK_OK(st);
      tsel_prefix_set_explain(p, explain);
      const char *t = rc->target;
      size_t n = strlen(t);
      if (!explain) n = (size_t)(strstr(t, "postproc default\n") + 17 - t);
      for (size_t i = 0; i <= n; i++) {
        if (i > 0) CHECK(tsel_prefix_feed(p, t + i - 1, 1));
        if (i % 2 && i != n) continue; /* every other prefix */
        completion_checks(p, k, rc->workload, i);
        n_done++;
      }
      tsel_prefix_free(p);
    }
    ir_func_free(k);
  }
  CHECK_MSG(n_done > 300 * UNIQUE_MAX, "%ld prefixes completed", n_done);
}

static void corpus_add(const char *spec, void *ctx) {
  dg_str *c = ctx;
  dg_status st;
  dg_func *f = wl_build(spec, &st);
  if (!f) return;
  char *t = ir_print(f);
  dg_str_puts(c, t);
  free(t);
  for (int k = 0; k < 2; k++) {
    sched *s = sched_new(f, (uint64_t)k + 1);
    dg_rng r;
    dg_rng_seed(&r, (uint64_t)k + 1);
    sched_random_steps(s, &r, 12);
    tsel_graph *g = tsel_lift(sched_get_trace(s), spec, NULL, NULL, &st);
    if (g) {
      char *x = tsel_print(g);
      dg_str_puts(c, x);
      free(x);
      tsel_graph_free(g);
    }
    sched_free(s);
  }
  ir_func_free(f);
}

/* A vocabulary like the model's: BPE trained on the examples' kernels and
 * graphs, the kernel texts and lifted random schedules of 300 generated
 * workloads, and the project's docs for the English of why lines (the
 * kernel and TSEL chunks alone saturate below 2000 tokens). */
static tok_tokenizer *trained_tokenizer(void) {
  static tok_tokenizer *t;
  if (t) return t;
  if (!load_records()) return NULL;
  dg_str corpus;
  dg_str_init(&corpus);
  for (int r = 0; r < n_recs; r++) {
    dg_str_puts(&corpus, recs[r].prompt);
    dg_str_puts(&corpus, recs[r].target);
  }
  dg_status st;
  wl_generate(5, 300, NULL, corpus_add, &corpus, &st);
  static const char *const docs[] = {"docs/tsel.md", "docs/workloads.md", "docs/schedules.md", "docs/model.md",
                                     "docs/training.md", "docs/search.md", "docs/lowering.md", "docs/data.md"};
  for (size_t i = 0; i < DG_ARRAY_LEN(docs); i++) {
    size_t n;
    char *d = dg_read_file(docs[i], &n, &st);
    if (d) dg_str_putn(&corpus, d, n);
    free(d);
  }
  t = tok_train(corpus.s, corpus.len, 4096, NULL, &st);
  dg_str_free(&corpus);
  return t;
}

/* Whether the checker reads token id next (the mask's answer, brute force). */
static bool token_reads(tsel_prefix *p, const tok_tokenizer *tok, int32_t id) {
  size_t len;
  const uint8_t *b = tok_token_bytes(tok, id, &len);
  if (!b || tok_is_special(tok, id)) return false;
  tsel_prefix *q = tsel_prefix_save(p);
  bool ok = tsel_prefix_feed(q, (const char *)b, len);
  tsel_prefix_free(q);
  return ok;
}

/* Each target, tokenized whole, is allowed token by token (the tokens of
 * forced text too, since the checker reads forced bytes), <|end|> only at
 * its end; the mask equals a brute-force feed of every token at sampled
 * steps; the digits of a known loop count and the factors of a tile are
 * narrowed to the right ones. */
DG_TEST(tsel_prefix_mask_allows_targets) {
  tok_tokenizer *tok = trained_tokenizer();
  CHECK(tok);
  int V = tok_vocab_size(tok);
  CHECK_MSG(V >= 2000, "a vocabulary of %d", V);
  dg_status st;
  tsel_mask *m = tsel_mask_new(tok, &st);
  CHECK_OK(st);
  int32_t end = tok_special(tok, TOK_END);
  uint8_t *allowed = dg_malloc((size_t)V);
  long steps = 0, brute = 0, narrow = 0;
  CHECK(load_lifts());
  /* the targets, then the hand schedules (edits after a bare postproc) */
  int n_hand = 0;
  for (int i = 0; i < n_lifts; i++) n_hand += lifts[i].kind == LG_HAND;
  CHECK(n_hand > 0);
  /* (the targets at rec_stride, then the hand schedules; v counts them) */
  for (int r = 0, h = -1, v = 0; r < n_recs + n_hand;
       r = r < n_recs && r + rec_stride() < n_recs ? r + rec_stride() : r < n_recs ? n_recs : r + 1, v++) {
    const char *spec = r < n_recs ? recs[r].workload : NULL, *t = r < n_recs ? recs[r].target : NULL;
    if (r >= n_recs) {
      while (lifts[++h].kind != LG_HAND) continue;
      spec = lifts[h].spec;
      t = lifts[h].text;
    }
    dg_func *k = wl_build(spec, &st);
    CHECK(k);
    tsel_prefix *p = tsel_prefix_new(k, spec, TSEL_TARGET_CUDA, &st);
    CHECK_OK(st);
    size_t edits_end = (size_t)(strchr(strstr(t, " postproc"), '\n') + 1 - t);
    tok_ids ids = {0};
    CHECK(tok_encode(tok, t, strlen(t), &ids, &st));
    size_t pos = 0;
    for (size_t i = 0; i <= ids.len; i++) {
      int n = tsel_mask_compute(m, p, allowed);
      CHECK(n >= 1 && n < V);
      /* <|end|> where the graph may end: at its end, and at the line
       * starts after the postproc edit (why and expect lines are optional) */
      CHECK_EQ(allowed[end], tsel_prefix_complete(p));
      CHECK(i < ids.len || allowed[end]);
      if (pos < edits_end) CHECK(!allowed[end]);
      if (i == ids.len) break;
      int32_t id = ids.data[i];
      size_t len;
      const char *b = (const char *)tok_token_bytes(tok, id, &len);
      CHECK_MSG(allowed[id], "%s: token %zu '%.*s' (at byte %zu) not allowed", spec, i, (int)len, b, pos);
      if ((v < 3 || r == n_recs) && i % 13 == 0) { /* the mask is the brute force */
        for (int32_t j = 0; j < V; j++)
          CHECK_MSG(allowed[j] == (j == end ? tsel_prefix_complete(p) : token_reads(p, tok, j)), "%s: step %zu token %d",
                    spec, i, (int)j);
        brute++;
      }
      /* steps where every allowed token starts with the target's byte
       * (a known loop count, the one factor that completes a tile, ...) */
      bool one = true;
      for (int32_t j = 0; j < V && one; j++) {
        size_t jl;
        const uint8_t *jb = tok_token_bytes(tok, j, &jl);
        one = !allowed[j] || (jb && jl > 0 && jb[0] == (uint8_t)b[0]);
      }
      narrow += one;
      CHECK(tsel_prefix_feed(p, b, len));
      pos += len;
      steps++;
    }
    CHECK(tsel_prefix_complete(p));
    tok_ids_free(&ids);
    tsel_prefix_free(p);
    ir_func_free(k);
  }
  CHECK(steps > 10000 && brute > 30 && narrow > steps / 4 && narrow < steps);
  free(allowed);
  tsel_mask_free(m);
}

/* A graph with its plan first (train_plan_first: the expect line right
 * after the header) reads only where the checker has a plan
 * (tsel_prefix_set_plan): with it, the whole text and its edits alone
 * (explanations off) read and complete; nothing is forced at the plan's
 * place and the first edit's id is forced after it; every token of the
 * text is allowed by the mask, and at the plan's place tokens of both an
 * expect line and the first edit are; completions from every prefix in
 * and around the plan line end in graphs that check. Without a plan the
 * checker refuses the 'e' right after the header. */
DG_TEST(tsel_prefix_reads_the_plan_first) {
  CHECK(load_records());
  tok_tokenizer *tok = trained_tokenizer();
  CHECK(tok);
  int V = tok_vocab_size(tok);
  dg_status st;
  tsel_mask *m = tsel_mask_new(tok, &st);
  CHECK_OK(st);
  uint8_t *allowed = dg_malloc((size_t)V);
  int idx[12], nu = unique_targets(idx, 12), n_plans = 0;
  long n_completions = 0;
  for (int u = 0; u < nu; u++) {
    const record *rc = &recs[idx[u]];
    if (!strstr(rc->target, "\nexpect p1: ")) continue;
    char *t = train_plan_first(rc->target);
    size_t head = (size_t)(strchr(t, '\n') + 1 - t), n = strlen(t);
    CHECK_MSG(strncmp(t + head, "expect p1: ", 11) == 0, "%s", t);
    CHECK_EQ(n, strlen(rc->target));
    size_t plan_end = (size_t)(strchr(t + head, '\n') + 1 - t);
    dg_func *k = wl_build(rc->workload, &st);
    CHECK(k);
    /* without a plan: the byte after the header is refused */
    tsel_prefix *p = tsel_prefix_new(k, rc->workload, TSEL_TARGET_CUDA, &st);
    CHECK_OK(st);
    CHECK_EQ(first_refused(p, t, n), (long)head);
    tsel_prefix_free(p);
    /* with one: the whole text, then its edits alone */
    for (int explain = 1; explain >= 0; explain--) {
      p = tsel_prefix_new(k, rc->workload, TSEL_TARGET_CUDA, &st);
      CHECK_OK(st);
      tsel_prefix_set_plan(p, true);
      tsel_prefix_set_explain(p, explain);
      size_t end = explain ? n : (size_t)(strstr(t, "postproc default\n") + 17 - t);
      CHECK(tsel_prefix_feed(p, t, head));
      CHECK_STREQ(tsel_prefix_forced(p), "");
      CHECK(!tsel_prefix_complete(p));
      CHECK(tsel_prefix_feed(p, t + head, plan_end - head));
      CHECK_MSG(strncmp(tsel_prefix_forced(p), "t1 ", 3) == 0, "forced '%s'", tsel_prefix_forced(p));
      CHECK_EQ(first_refused(p, t + plan_end, end - plan_end), -1L);
      CHECK(tsel_prefix_complete(p));
      tsel_prefix_free(p);
    }
    /* the mask: each token of the text allowed; both kinds of line at the plan's place */
    p = tsel_prefix_new(k, rc->workload, TSEL_TARGET_CUDA, &st);
    CHECK_OK(st);
    tsel_prefix_set_plan(p, true);
    CHECK(tsel_prefix_feed(p, t, head));
    CHECK(tsel_mask_compute(m, p, allowed) >= 2);
    bool to_e = false, to_t = false;
    for (int32_t j = 0; j < V; j++) {
      size_t jl;
      const uint8_t *jb = tok_token_bytes(tok, j, &jl);
      if (!allowed[j]) continue;
      CHECK(jb && jl > 0 && (jb[0] == 'e' || jb[0] == 't'));
      to_e |= jb[0] == 'e';
      to_t |= jb[0] == 't';
      CHECK_EQ(allowed[j], token_reads(p, tok, j));
    }
    CHECK(to_e && to_t);
    tok_ids ids = {0};
    CHECK(tok_encode(tok, t + head, n - head, &ids, &st));
    for (size_t i = 0; i < ids.len; i++) {
      CHECK(tsel_mask_compute(m, p, allowed) >= 1);
      size_t len;
      const char *b = (const char *)tok_token_bytes(tok, ids.data[i], &len);
      CHECK_MSG(allowed[ids.data[i]], "%s: token %zu '%.*s' not allowed", rc->workload, i, (int)len, b);
      CHECK(tsel_prefix_feed(p, b, len));
    }
    CHECK(tsel_prefix_complete(p));
    tok_ids_free(&ids);
    tsel_prefix_free(p);
    /* completions from the header to the second edit line */
    p = tsel_prefix_new(k, rc->workload, TSEL_TARGET_CUDA, &st);
    CHECK_OK(st);
    tsel_prefix_set_plan(p, true);
    tsel_prefix_set_explain(p, false);
    size_t stop = (size_t)(strchr(t + plan_end, '\n') + 1 - t);
    for (size_t i = 0; i <= stop; i++) {
      if (i > 0) CHECK(tsel_prefix_feed(p, t + i - 1, 1));
      completion_checks(p, k, rc->workload, i);
      n_completions++;
    }
    tsel_prefix_free(p);
    ir_func_free(k);
    free(t);
    n_plans++;
  }
  CHECK_MSG(n_plans >= 8 && n_completions > 1000, "%d plans, %ld completions", n_plans, n_completions);
  free(allowed);
  tsel_mask_free(m);
}

/* A random model over the vocabulary: weights large enough that the
 * logits differ by whole units, so that it has strong, arbitrary tastes. */
static bool random_model(nn_model *m, int V, uint64_t seed, dg_status *st) {
  nn_config c = {V, 32, 1, 2, 2, 16, 64, 2048, 10000.0f, 1e-6f};
  if (!nn_model_init(m, &c, false, st)) return false;
  dg_rng r;
  dg_rng_seed(&r, seed);
  for (size_t i = 0; i < m->num_params; i++) m->params_mem[i] = (float)(0.3 * dg_rng_normal(&r));
  return true;
}

/* The kernel text of a workload: the examples' prompt, else printed. */
static char *kernel_text(const char *spec, const dg_func *k) {
  for (int r = 0; r < n_recs; r++)
    if (strcmp(recs[r].workload, spec) == 0) return dg_strdup(recs[r].prompt);
  return ir_print(k);
}

/* Masked decoding with a random model writes graphs that parse and check,
 * for a gemm, a conv2d and a softmax and several seeds, deterministically
 * (and long ones: models are drawn until one writes five edits); the same
 * model unmasked writes text that does not. */
DG_TEST(tsel_prefix_masked_random_model_decodes) {
  tok_tokenizer *tok = trained_tokenizer();
  CHECK(tok);
  int V = tok_vocab_size(tok);
  dg_status st;
  tsel_mask *mask = tsel_mask_new(tok, &st);
  CHECK_OK(st);
  static const char *const specs[] = {
      "gemm:m=1,n=1024,k=1024,trans_a=0,trans_b=1,dtype=f32",
      "conv2d_nchw:n=16,h=8,w=8,ci=384,co=48,kernel=3,stride=1,pad=1,dilation=1,dtype=f32",
      "softmax:m=33,n=1536,dtype=f32",
  };
  int most = 0, runs = 0, garbage = 0;
  long masks = 0;
  for (size_t w = 0; w < DG_ARRAY_LEN(specs); w++) {
    dg_func *k = wl_build(specs[w], &st);
    CHECK_MSG(k, "%s", st.msg);
    char *ktext = kernel_text(specs[w], k);
    tok_ids prompt = {0};
    CHECK(train_prompt_encode(tok, ktext, NULL, &prompt, &st));
    for (uint64_t seed = 1; seed <= 3; seed++) {
      nn_model m;
      CHECK(random_model(&m, V, 100 * w + seed, &st));
      train_decode_opts o;
      train_decode_opts_default(&o);
      o.sample.max_tokens = 400;
      o.explain = seed != 2;
      train_decode_stats ds;
      char *g = train_decode_graph(&m, tok, mask, prompt.data, (int)prompt.len, k, specs[w], TSEL_TARGET_CUDA, &o, seed,
                            &ds, &st);
      CHECK_MSG(g, "%s seed %llu: %s", specs[w], (unsigned long long)seed, st.msg);
      char why[600];
      CHECK_MSG(graph_checks(g, k, TSEL_TARGET_CUDA, why, sizeof why), "%s seed %llu: %s\n%s", specs[w],
                (unsigned long long)seed, why, g);
      CHECK(ds.complete && ds.n_masks > 0 && ds.n_sampled > 0 && ds.n_forced > 0);
      tsel_graph *pg = tsel_parse(g, NULL, &st);
      if (tsel_graph_edit_count(pg) > most) most = tsel_graph_edit_count(pg);
      tsel_graph_free(pg);
      masks += ds.n_masks;
      runs++;
      if (seed == 1) { /* the same seed, the same graph */
        char *again = train_decode_graph(&m, tok, mask, prompt.data, (int)prompt.len, k, specs[w], TSEL_TARGET_CUDA, &o,
                                  seed, NULL, &st);
        CHECK_STREQ(again, g);
        free(again);
      }
      /* unmasked: the header, then whatever the model likes */
      o.unconstrained = true;
      o.sample.max_tokens = 120;
      char *u = train_decode_graph(&m, tok, NULL, prompt.data, (int)prompt.len, k, specs[w], TSEL_TARGET_CUDA, &o, seed,
                            &ds, &st);
      CHECK_MSG(u, "%s", st.msg);
      CHECK(strncmp(u, "tsel 1 kernel ", 14) == 0);
      garbage += !graph_checks(u, k, TSEL_TARGET_CUDA, why, sizeof why);
      free(u);
      free(g);
      nn_model_free(&m);
    }
    /* a random model's graphs are short or long by its draws: more models
     * (each graph checked) until one has written five edits or more */
    for (uint64_t seed = 4; seed <= 40 && most < 5; seed++) {
      nn_model m;
      CHECK(random_model(&m, V, 100 * w + seed, &st));
      train_decode_opts o;
      train_decode_opts_default(&o);
      o.sample.max_tokens = 400;
      train_decode_stats ds;
      char *g = train_decode_graph(&m, tok, mask, prompt.data, (int)prompt.len, k, specs[w], TSEL_TARGET_CUDA, &o, seed,
                                   &ds, &st);
      char why[600];
      CHECK_MSG(g && graph_checks(g, k, TSEL_TARGET_CUDA, why, sizeof why), "%s seed %llu: %s", specs[w],
                (unsigned long long)seed, g ? why : st.msg);
      tsel_graph *pg = g ? tsel_parse(g, NULL, &st) : NULL;
      if (pg && tsel_graph_edit_count(pg) > most) most = tsel_graph_edit_count(pg);
      tsel_graph_free(pg);
      masks += ds.n_masks;
      free(g);
      nn_model_free(&m);
    }
    tok_ids_free(&prompt);
    free(ktext);
    ir_func_free(k);
  }
  CHECK_EQ(garbage, runs);
  CHECK_MSG(most >= 5 && masks >= 1000, "at most %d edits, %ld masks", most, masks);
  tsel_mask_free(mask);
}

/* What the decoding tests share: the trained tokenizer and its mask, a
 * kernel and its prompt. */
typedef struct {
  tok_tokenizer *tok; /* trained_tokenizer's, kept */
  tsel_mask *mask;
  const char *spec;
  dg_func *k;
  char *ktext;
  tok_ids prompt;
} decode_fixture;

static bool fixture_open(decode_fixture *f, const char *spec) {
  memset(f, 0, sizeof *f);
  dg_status st;
  f->spec = spec;
  if (!(f->tok = trained_tokenizer())) return false;
  f->mask = tsel_mask_new(f->tok, &st);
  if (!f->mask || !(f->k = wl_build(spec, &st))) return false;
  f->ktext = kernel_text(spec, f->k);
  return train_prompt_encode(f->tok, f->ktext, NULL, &f->prompt, &st);
}

static void fixture_close(decode_fixture *f) {
  tok_ids_free(&f->prompt);
  free(f->ktext);
  ir_func_free(f->k);
  tsel_mask_free(f->mask);
}

/* Decoding for a model that writes its plan first (train_decode_opts.
 * plan_first): random models write graphs that check, some of them with a
 * plan line before their edits; written again with explain_after, the
 * plan gives way to the compiler's own expect line after the edits. */
DG_TEST(tsel_prefix_decodes_with_a_plan) {
  static const char *const specs[] = {
      "gemm:m=1,n=1024,k=1024,trans_a=0,trans_b=1,dtype=f32",
      "softmax:m=33,n=1536,dtype=f32",
  };
  int planned = 0, runs = 0;
  dg_status st;
  for (size_t w = 0; w < DG_ARRAY_LEN(specs); w++) {
    decode_fixture f;
    CHECK(fixture_open(&f, specs[w]));
    for (uint64_t seed = 1; seed <= 12; seed++) {
      nn_model m;
      CHECK(random_model(&m, tok_vocab_size(f.tok), 1000 + 100 * w + seed, &st));
      train_decode_opts o;
      train_decode_opts_default(&o);
      o.sample.max_tokens = 300;
      o.explain = false;
      o.plan_first = true;
      char *g = train_decode_graph(&m, f.tok, f.mask, f.prompt.data, (int)f.prompt.len, f.k, f.spec,
                                   TSEL_TARGET_CUDA, &o, seed, NULL, &st);
      char why[600];
      CHECK_MSG(g && graph_checks(g, f.k, TSEL_TARGET_CUDA, why, sizeof why), "%s seed %llu: %s", f.spec,
                (unsigned long long)seed, g ? why : st.msg);
      const char *second = strchr(g, '\n') + 1;
      bool plan = strncmp(second, "expect p1: ", 11) == 0;
      CHECK_MSG(plan || strncmp(second, "t1 ", 3) == 0, "%s", g);
      planned += plan;
      runs++;
      if (plan) {
        o.explain_after = true;
        char *e = train_decode_graph(&m, f.tok, f.mask, f.prompt.data, (int)f.prompt.len, f.k, f.spec,
                                     TSEL_TARGET_CUDA, &o, seed, NULL, &st);
        CHECK(e && graph_checks(e, f.k, TSEL_TARGET_CUDA, why, sizeof why));
        CHECK_MSG(strncmp(strchr(e, '\n') + 1, "t1 ", 3) == 0 && strstr(e, "\nexpect p1: "), "%s", e);
        free(e);
      }
      free(g);
      nn_model_free(&m);
    }
    fixture_close(&f);
  }
  CHECK_MSG(planned > 0 && planned < runs, "%d of %d graphs with a plan", planned, runs);
}

/* A guard of the test's own: refuses, the first time it is shown them,
 * the graphs whose edit count is in refuse_at (that line is taken back and
 * written again), or every graph (always); counts its calls. */
typedef struct {
  int calls, refused;
  int refuse_at[4], n_refuse;
  bool shown[256];
  bool always;
  int refuse_first; /* also refuses its first this many calls */
} planted_guard;

static int edit_lines(const char *text) {
  int n = 0;
  for (const char *p = text; *p; p = strchr(p, '\n') ? strchr(p, '\n') + 1 : p + strlen(p))
    n += p[0] == 't' && p[1] >= '1' && p[1] <= '9';
  return n;
}

static bool planted_guard_fn(void *ctx, const char *text, size_t len, bool postprocessed, int *back_to,
                             tsel_tile_narrowing *narrow) {
  (void)narrow;
  (void)postprocessed;
  (void)back_to;
  planted_guard *g = ctx;
  g->calls++;
  CHECKR(strlen(text) == len, false);
  if (g->always || g->calls <= g->refuse_first) return false;
  int n = edit_lines(text);
  for (int i = 0; i < g->n_refuse; i++)
    if (n == g->refuse_at[i] && n < 256 && !g->shown[n]) {
      g->shown[n] = true;
      g->refused++;
      return false;
    }
  return true;
}

/* The line guard of constrained decoding: a refused line is taken back and
 * written again (the graph still checks, and its lines were each passed),
 * a guard that refuses everything is given up after max_backtracks (the
 * graph is still complete), and the real guard (eval_guard_line: replay,
 * and the build once postprocessed) leaves a graph that passes the gates
 * up to the build unless it gave up (or the token budget ended the graph:
 * the checker's completion is not guarded). */
DG_TEST(tsel_prefix_guard_takes_lines_back) {
  decode_fixture fx;
  CHECK(fixture_open(&fx, "gemm:m=1,n=1024,k=1024,trans_a=0,trans_b=1,dtype=f32"));
  tok_tokenizer *tok = fx.tok;
  tsel_mask *mask = fx.mask;
  const char *spec = fx.spec;
  const dg_func *k = fx.k;
  const tok_ids prompt = fx.prompt;
  int V = tok_vocab_size(tok);
  dg_status st;
  int real_passed = 0, real_runs = 0, gave_up = 0, planted_refusals = 0, restarted = 0;
  /* four random models at least, more until each case was met (the
   * tokenizer is trained on the committed examples and docs, so which
   * models meet them changes with those) */
  for (uint64_t seed = 1;
       seed <= 32 && (seed <= 4 || real_passed == 0 || gave_up == 0 || planted_refusals < 2 || restarted == 0);
       seed++) {
    nn_model m;
    CHECK(random_model(&m, V, 900 + seed, &st));
    train_decode_opts o;
    train_decode_opts_default(&o);
    o.sample.max_tokens = 1500; /* room for a random model's long lines */
    o.explain = false;
    /* refused once at 2 and at 3 edits: two lines taken back */
    planted_guard pg = {.refuse_at = {2, 3}, .n_refuse = 2};
    o.guard = planted_guard_fn;
    o.guard_ctx = &pg;
    train_decode_stats ds;
    char *g = train_decode_graph(&m, tok, mask, prompt.data, (int)prompt.len, k, spec, TSEL_TARGET_CUDA, &o, seed,
                                 &ds, &st);
    CHECK_MSG(g, "%s", st.msg);
    char why[600];
    CHECK_MSG(graph_checks(g, k, TSEL_TARGET_CUDA, why, sizeof why), "%s\n%s", why, g);
    /* each refusal took its line back; a graph that reached 2 (3) edits
     * was shown them and refused once (unless the token budget ended it;
     * a refused third line may also be followed by the end, where the
     * graph may end after two) */
    int edits = edit_lines(g);
    CHECK_MSG(ds.n_backtracks == pg.refused && pg.refused <= 2 &&
                  (ds.budget_completed || pg.refused >= (edits >= 2) + (edits >= 3)),
              "%d edits: %d taken back, %d refused", edits, ds.n_backtracks, pg.refused);
    planted_refusals += pg.refused;
    CHECK(ds.n_guarded == pg.calls && !ds.guard_gave_up && ds.complete);
    free(g);
    /* a guard that refuses everything: given up after max_backtracks */
    planted_guard never = {.always = true};
    o.guard_ctx = &never;
    o.max_backtracks = 5;
    o.line_retries = 2;
    o.sample.max_tokens = 1500;
    g = train_decode_graph(&m, tok, mask, prompt.data, (int)prompt.len, k, spec, TSEL_TARGET_CUDA, &o, seed, &ds,
                           &st);
    CHECK_MSG(g, "%s", st.msg);
    CHECK(graph_checks(g, k, TSEL_TARGET_CUDA, why, sizeof why));
    /* (a line written again may also run into the token budget first) */
    CHECK_MSG((ds.guard_gave_up || ds.budget_completed) && ds.n_backtracks <= 5 &&
                  never.calls == ds.n_backtracks + ds.guard_gave_up,
              "gave up %d, %d taken back, %d calls", ds.guard_gave_up, ds.n_backtracks, never.calls);
    gave_up += ds.guard_gave_up;
    free(g);
    /* with restarts: the graph is written again from its first edit line
     * each time the limit is reached, then given up */
    planted_guard never2 = {.always = true};
    o.guard_ctx = &never2;
    o.restarts = 2;
    o.sample.max_tokens = 400;
    g = train_decode_graph(&m, tok, mask, prompt.data, (int)prompt.len, k, spec, TSEL_TARGET_CUDA, &o, seed, &ds,
                           &st);
    CHECK_MSG(g, "%s", st.msg);
    CHECK(graph_checks(g, k, TSEL_TARGET_CUDA, why, sizeof why));
    CHECK_MSG(never2.calls == ds.n_backtracks + ds.n_restarts + ds.guard_gave_up && ds.n_restarts <= 2 &&
                  ds.n_backtracks <= 15 && (ds.budget_completed || (ds.n_restarts == 2 && ds.guard_gave_up)),
              "%d restarts, gave up %d, %d taken back, %d calls", ds.n_restarts, ds.guard_gave_up,
              ds.n_backtracks, never2.calls);
    free(g);
    /* refusals up to the limit, then none: one restart, and the graph
     * written again is guarded to its end */
    planted_guard once = {.refuse_first = 6};
    o.guard_ctx = &once;
    o.sample.max_tokens = 1500;
    g = train_decode_graph(&m, tok, mask, prompt.data, (int)prompt.len, k, spec, TSEL_TARGET_CUDA, &o, seed, &ds,
                           &st);
    CHECK_MSG(g, "%s", st.msg);
    CHECK(graph_checks(g, k, TSEL_TARGET_CUDA, why, sizeof why));
    if (!ds.budget_completed)
      CHECK_MSG(ds.n_restarts == 1 && !ds.guard_gave_up && ds.n_backtracks == 5 && ds.complete &&
                    ds.n_guarded == once.calls,
                "%d restarts, gave up %d, %d taken back", ds.n_restarts, ds.guard_gave_up, ds.n_backtracks);
    restarted += ds.n_restarts == 1 && !ds.budget_completed;
    free(g);
    o.restarts = 0;
    /* the real guard */
    eval_guard eg = {k, spec};
    o.guard = eval_guard_line;
    o.guard_ctx = &eg;
    o.max_backtracks = 64;
    o.line_retries = 4;
    o.sample.max_tokens = 400;
    g = train_decode_graph(&m, tok, mask, prompt.data, (int)prompt.len, k, spec, TSEL_TARGET_CUDA, &o, seed, &ds,
                           &st);
    CHECK_MSG(g, "%s", st.msg);
    /* every line of a graph the model finished was guarded */
    if (!ds.guard_gave_up && !ds.budget_completed) {
      CHECK(ds.n_guarded > 0);
      eval_score_opts so = {.kernel = k, .spec = spec, .last = EVAL_GATE_BUILD};
      eval_score sc;
      CHECK_MSG(eval_score_tsel(g, "guarded", &so, &sc), "%s: %s\n%s", eval_gate_name(sc.failed), sc.reason, g);
      eval_score_free(&sc);
      real_passed++;
    }
    real_runs++;
    free(g);
    nn_model_free(&m);
  }
  CHECK_MSG(real_passed > 0, "the real guard gave up on all %d random models", real_runs);
  CHECK(gave_up > 0);              /* the limit was reached at least once */
  CHECK(restarted > 0);            /* and a graph written again passed its guard */
  CHECK(planted_refusals >= 2);     /* and planted refusals were met */
  fixture_close(&fx);
}

/* A guard that blames an earlier line: refuses the first graph of 4 edits
 * naming edit 2; records the edit count of every graph it is shown. */
typedef struct {
  int calls, refused;
  int seen[512];
} blaming_guard;

static bool blaming_guard_fn(void *ctx, const char *text, size_t len, bool postprocessed, int *back_to,
                             tsel_tile_narrowing *narrow) {
  (void)narrow;
  (void)len;
  (void)postprocessed;
  blaming_guard *g = ctx;
  int n = edit_lines(text);
  if (g->calls < 512) g->seen[g->calls] = n;
  g->calls++;
  if (n == 4 && g->refused == 0) {
    g->refused++;
    *back_to = 2;
    return false;
  }
  return true;
}

/* A refusal that names an earlier line goes back to it at once: the next
 * graph the guard is shown has that line written again (2 edits), after
 * one line taken back, or the graph ends there. */
DG_TEST(tsel_prefix_guard_goes_back_to_the_blamed_line) {
  decode_fixture fx;
  CHECK(fixture_open(&fx, "gemm:m=1,n=1024,k=1024,trans_a=0,trans_b=1,dtype=f32"));
  tok_tokenizer *tok = fx.tok;
  tsel_mask *mask = fx.mask;
  const char *spec = fx.spec;
  const dg_func *k = fx.k;
  const tok_ids prompt = fx.prompt;
  int V = tok_vocab_size(tok);
  dg_status st;
  int met = 0;
  /* random models until two have written a fourth edit (the tokenizer is
   * trained on the committed examples, so which ones do changes with them) */
  for (uint64_t seed = 1; seed <= 24 && met < 2; seed++) {
    nn_model m;
    CHECK(random_model(&m, V, 900 + seed, &st));
    train_decode_opts o;
    train_decode_opts_default(&o);
    o.sample.max_tokens = 1500;
    o.explain = false;
    blaming_guard bg = {0};
    o.guard = blaming_guard_fn;
    o.guard_ctx = &bg;
    train_decode_stats ds;
    char *g = train_decode_graph(&m, tok, mask, prompt.data, (int)prompt.len, k, spec, TSEL_TARGET_CUDA, &o, seed,
                                 &ds, &st);
    CHECK_MSG(g, "%s", st.msg);
    char why[600];
    CHECK_MSG(graph_checks(g, k, TSEL_TARGET_CUDA, why, sizeof why), "%s\n%s", why, g);
    CHECK(ds.n_backtracks == bg.refused && ds.n_blamed == bg.refused);
    if (bg.refused) {
      int i = 0;
      while (i < bg.calls && bg.seen[i] != 4) i++;
      /* (or the graph ended at the blamed line's start: after a bare
       * `postproc` edit a graph may end at any line start) */
      CHECK_MSG(i + 1 < bg.calls || ds.budget_completed || edit_lines(g) < 2, "no call after the refusal");
      if (i + 1 < bg.calls) CHECK_MSG(bg.seen[i + 1] == 2, "after the refusal: %d edits", bg.seen[i + 1]);
      met++;
    }
    free(g);
    nn_model_free(&m);
  }
  CHECK_MSG(met > 0, "no random model wrote 4 edits");
  fixture_close(&fx);
}

/* A tile narrowed by the guard: capped (shared memory past the limit), its
 * first factor leaving at most the cap to the rest; with a thread factor's
 * range, that factor within it and the factors before it leaving a divisor
 * there. Narrowings of later edits are lifted with unnarrow_after, and no
 * other line is narrowed. */
DG_TEST(tsel_prefix_narrowed_tile_keeps_its_bounds) {
  const char *spec = "gemm:m=896,n=64,k=8192,trans_a=0,trans_b=1,dtype=f32";
  dg_status st;
  dg_func *f = wl_build(spec, &st);
  CHECK_MSG(f, "%s", st.msg);
  tsel_prefix *p = tsel_prefix_new(f, spec, TSEL_TARGET_CUDA, &st);
  CHECK_MSG(p, "%s", st.msg);
  dg_str head;
  dg_str_init(&head);
  dg_str_printf(&head,
                "tsel 1 kernel %s\nt1 block \"C\"\nt2 block \"root\"\nt3 annotate t1 tiling \"SSSRRSRS\"\n"
                "t4 loops t1 x3\nt5 tile t4.0 [16 1 14 1 4] max=64\nt6 tile t4.1 [8 1 8 1 1] max=64\n"
                "t7 tile t4.2 [",
                spec);
  CHECK_EQ(first_refused(p, head.s, head.len), -1L);
  tsel_prefix *at = tsel_prefix_save(p);
  /* uncapped: 128 (inner extent 64) reads */
  CHECK(tsel_prefix_feed(p, "128 ", 4));
  tsel_prefix_restore(p, at);
  /* capped at 48: the first factor must leave at most 48 of 8192 */
  tsel_prefix_narrow_tile(p, 7, &(tsel_tile_narrowing){.cap = 48});
  CHECK(!tsel_prefix_feed(p, "128 ", 4));
  CHECK(!tsel_prefix_feed(p, "1 ", 2));
  CHECK(tsel_prefix_feed(p, "256 ", 4));
  CHECK_EQ(first_refused(p, "1 32] max=64\n", 13), -1L);
  tsel_prefix_restore(p, at);
  CHECK(tsel_prefix_feed(p, "8192 ", 5));
  tsel_prefix_restore(p, at);
  /* a cap on another edit narrows nothing here; unnarrow_after lifts it */
  tsel_prefix_narrow_tile(p, 8, &(tsel_tile_narrowing){.cap = 2});
  tsel_prefix_unnarrow_after(p, 6);
  CHECK(tsel_prefix_feed(p, "128 ", 4));
  tsel_prefix_restore(p, at);
  tsel_prefix_narrow_tile(p, 7, &(tsel_tile_narrowing){.cap = 48});
  tsel_prefix_narrow_tile(p, 7, NULL);
  CHECK(tsel_prefix_feed(p, "128 ", 4));
  tsel_prefix_free(at);
  tsel_prefix_free(p);
  /* a thread factor's range: the third factor of t6 (extent 64) within
   * [16, 32], the factors before it leaving a divisor there */
  p = tsel_prefix_new(f, spec, TSEL_TARGET_CUDA, &st);
  CHECK_MSG(p, "%s", st.msg);
  const char *t6 = strstr(head.s, "t6 tile t4.1 [");
  CHECK(t6);
  size_t n6 = (size_t)(t6 - head.s) + strlen("t6 tile t4.1 [");
  CHECK_EQ(first_refused(p, head.s, n6), -1L);
  at = tsel_prefix_save(p);
  tsel_prefix_narrow_tile(p, 6, &(tsel_tile_narrowing){.factor = 2, .lo = 16, .hi = 32});
  CHECK(!tsel_prefix_feed(p, "8 ", 2)); /* leaves 8: no divisor in [16, 32] */
  CHECK(tsel_prefix_feed(p, "2 ", 2));
  CHECK(!tsel_prefix_feed(p, "4 ", 2)); /* leaves 8 again */
  CHECK(tsel_prefix_feed(p, "1 ", 2));
  CHECK(!tsel_prefix_feed(p, "8 ", 2)); /* out of the range */
  CHECK(!tsel_prefix_feed(p, "64 ", 3));
  CHECK(tsel_prefix_feed(p, "32 ", 3));
  CHECK_EQ(first_refused(p, "1 1] max=64\n", 12), -1L);
  tsel_prefix_restore(p, at);
  /* a range the tile cannot meet (no divisor of 64 in [33, 63]), or not
   * within its cap, is not applied: the checker is never left stuck */
  tsel_prefix_narrow_tile(p, 6, &(tsel_tile_narrowing){.factor = 2, .lo = 33, .hi = 63});
  CHECK(tsel_prefix_feed(p, "8 ", 2));
  tsel_prefix_restore(p, at);
  tsel_prefix_narrow_tile(p, 6, NULL);
  tsel_prefix_narrow_tile(p, 6, &(tsel_tile_narrowing){.cap = 4, .factor = 2, .lo = 16, .hi = 32});
  CHECK(!tsel_prefix_feed(p, "8 ", 2)); /* the cap alone: leaves 8 > 4 */
  CHECK(tsel_prefix_feed(p, "16 ", 3));
  CHECK(tsel_prefix_feed(p, "1 ", 2));
  CHECK(!tsel_prefix_feed(p, "2 ", 2)); /* t5's 14 threads and 2: under a warp */
  CHECK(tsel_prefix_feed(p, "4 ", 2));  /* not the range: 16 > 4 cannot be */
  tsel_prefix_restore(p, at);
  /* lifted with the edits after t5 */
  tsel_prefix_unnarrow_after(p, 5);
  CHECK(tsel_prefix_feed(p, "8 ", 2));
  tsel_prefix_free(at);
  tsel_prefix_free(p);
  dg_str_free(&head);
  ir_func_free(f);
}

/* Graphs written in step (train_decode_graphs: one cache, a pass of the
 * model feeds them all) are, seed for seed, the graphs written one at a
 * time, with the guard taking lines back in some and not others: the
 * same texts, the same traces, the same counts; the unconstrained writer
 * too. */
/* A guard that keeps no state (its verdict is the text's alone, as the
 * real one's): refuses the graphs of one or two edits whose text length
 * is not a multiple of three. */
static bool parity_guard_fn(void *ctx, const char *text, size_t len, bool postprocessed, int *back_to,
                             tsel_tile_narrowing *narrow) {
  (void)narrow;
  (void)postprocessed;
  (void)back_to;
  int *calls = ctx;
  __atomic_add_fetch(calls, 1, __ATOMIC_RELAXED);
  int n = edit_lines(text);
  return !(n >= 1 && n <= 2 && len % 3 != 0);
}

DG_TEST(tsel_prefix_graphs_in_step_match_one_at_a_time) {
  decode_fixture fx;
  CHECK(fixture_open(&fx, "softmax:m=33,n=1536,dtype=f32"));
  int V = tok_vocab_size(fx.tok);
  dg_status st;
  nn_model m;
  enum { N = 5 };
  uint64_t seeds[N] = {3, 1, 4, 15, 9};
  /* random models are drawn until the guard takes lines back in the
   * graphs (the tokenizer, and so what a model writes, follows the
   * committed docs): every model drawn must match one at a time */
  bool taken_back = false;
  for (uint64_t mseed = 77; mseed < 77 + 16 && !taken_back; mseed++) {
    if (mseed > 77) nn_model_free(&m);
    CHECK(random_model(&m, V, mseed, &st));
    for (int mode = 0; mode < 2; mode++) {
      train_decode_opts o;
      train_decode_opts_default(&o);
      o.sample.max_tokens = 400;
      o.explain = false;
      o.unconstrained = mode == 1;
      int calls = 0;
      if (mode == 0) {
        o.guard = parity_guard_fn;
        o.guard_ctx = &calls;
      }
      char *texts[N];
      train_decode_trace tr[N];
      train_decode_stats ds[N];
      dg_status es[N];
      memset(tr, 0, sizeof tr);
      CHECK_MSG(train_decode_graphs(&m, fx.tok, fx.mask, fx.prompt.data, (int)fx.prompt.len, fx.k, fx.spec,
                                    TSEL_TARGET_CUDA, &o, N, seeds, texts, tr, ds, es, &st),
                "%s", st.msg);
      int backtracks = 0;
      for (int i = 0; i < N; i++) {
        train_decode_trace one = {0};
        train_decode_stats d1;
        train_decode_opts o1 = o;
        o1.trace = &one;
        char *g = train_decode_graph(&m, fx.tok, fx.mask, fx.prompt.data, (int)fx.prompt.len, fx.k, fx.spec,
                                     TSEL_TARGET_CUDA, &o1, seeds[i], &d1, &st);
        CHECK_MSG(g && texts[i], "graph %d: %s / %s", i, g ? "" : st.msg, texts[i] ? "" : es[i].msg);
        if (g && texts[i]) CHECK_MSG(strcmp(g, texts[i]) == 0, "graph %d:\n%s\n---\n%s", i, g, texts[i]);
        CHECK(one.n == tr[i].n && memcmp(one.ids, tr[i].ids, sizeof *one.ids * (size_t)one.n) == 0 &&
              memcmp(one.sampled, tr[i].sampled, (size_t)one.n) == 0);
        CHECK(d1.n_sampled == ds[i].n_sampled && d1.n_forced == ds[i].n_forced &&
              d1.n_backtracks == ds[i].n_backtracks && d1.budget_completed == ds[i].budget_completed);
        backtracks += d1.n_backtracks;
        free(g);
        free(texts[i]);
        train_decode_trace_free(&one);
        train_decode_trace_free(&tr[i]);
      }
      if (mode == 0) taken_back = backtracks >= N;
    }
  }
  CHECK_MSG(taken_back, "no random model had at least %d lines taken back in its %d graphs", N, N);
  /* jobs of two kernels, one prompt repeated, one prompt too long: each
   * graph is its kernel's graph written alone */
  decode_fixture fy;
  CHECK(fixture_open(&fy, "gemm:m=1,n=1024,k=1024,trans_a=0,trans_b=1,dtype=f32"));
  int32_t *longp = dg_calloc(4096, sizeof *longp);
  train_decode_job jobs[4] = {
      {fx.prompt.data, (int)fx.prompt.len, fx.k, fx.spec, 5, NULL},
      {fy.prompt.data, (int)fy.prompt.len, fy.k, fy.spec, 6, NULL},
      {longp, 4000, fy.k, fy.spec, 7, NULL},
      {fx.prompt.data, (int)fx.prompt.len, fx.k, fx.spec, 8, NULL},
  };
  train_decode_opts o;
  train_decode_opts_default(&o);
  o.sample.max_tokens = 300;
  o.explain = false;
  char *texts[4];
  dg_status es[4];
  CHECK_MSG(train_decode_jobs(&m, fx.tok, fx.mask, jobs, 4, TSEL_TARGET_CUDA, &o, texts, NULL, NULL, es, &st), "%s",
            st.msg);
  CHECK(!texts[2] && strstr(es[2].msg, "the prompt has 4000 tokens"));
  for (int i = 0; i < 4; i++) {
    if (i == 2) continue;
    char *g = train_decode_graph(&m, fx.tok, fx.mask, jobs[i].prompt, jobs[i].n_prompt, jobs[i].kernel, jobs[i].spec,
                                 TSEL_TARGET_CUDA, &o, jobs[i].seed, NULL, &st);
    CHECK_MSG(g && texts[i] && strcmp(g, texts[i]) == 0, "job %d", i);
    free(g);
    free(texts[i]);
  }
  free(longp);
  fixture_close(&fy);
  nn_model_free(&m);
  fixture_close(&fx);
}

/* explain_after: the model writes the edits and stops, dragon writes the
 * why/expect lines from the compiler's facts: the same edits as without
 * it, and the lines tsel_explain gives that graph. */
DG_TEST(tsel_prefix_explanations_written_after) {
  decode_fixture fx;
  CHECK(fixture_open(&fx, "softmax:m=33,n=1536,dtype=f32"));
  tok_tokenizer *tok = fx.tok;
  tsel_mask *mask = fx.mask;
  const char *spec = fx.spec;
  const dg_func *k = fx.k;
  const tok_ids prompt = fx.prompt;
  dg_status st;
  int explained = 0;
  for (uint64_t seed = 1; seed <= 3; seed++) {
    nn_model m;
    CHECK(random_model(&m, tok_vocab_size(tok), 700 + seed, &st));
    train_decode_opts o;
    train_decode_opts_default(&o);
    o.sample.max_tokens = 400;
    o.explain = false;
    char *edits = train_decode_graph(&m, tok, mask, prompt.data, (int)prompt.len, k, spec, TSEL_TARGET_CUDA, &o,
                                     seed, NULL, &st);
    CHECK_MSG(edits, "%s", st.msg);
    CHECK(!strstr(edits, "\nwhy ") && !strstr(edits, "\nexpect "));
    o.explain_after = true;
    char *full = train_decode_graph(&m, tok, mask, prompt.data, (int)prompt.len, k, spec, TSEL_TARGET_CUDA, &o,
                                    seed, NULL, &st);
    CHECK_MSG(full, "%s", st.msg);
    tsel_graph *g = tsel_parse(edits, NULL, &st);
    CHECK(g);
    if (tsel_explain(g, k, NULL, &st)) {
      char *want = tsel_print(g);
      CHECK_STREQ(full, want);
      free(want);
      explained += strstr(full, "\nexpect p1: ") != NULL;
    } else {
      CHECK_STREQ(full, edits); /* a graph that does not check is left as it is */
    }
    tsel_graph_free(g);
    free(edits);
    free(full);
    nn_model_free(&m);
  }
  CHECK(explained > 0);
  fixture_close(&fx);
}

static int walk_tiles; /* random walks whose text has a tile edit */

/* One random walk over the accepted bytes from start (NULL: the empty
 * text): it never reaches a state with no way on; now and then the
 * completion is taken, and it and the graph the walk ends in check. Now and
 * then the bytes that end things are preferred, so that lines end; with
 * avoid_postproc, an edit name rarely starts with 'p', so that walks write
 * many edits before the postproc edit that ends them. */
static void random_walk(const dg_func *k, const char *spec, tsel_target tg, bool explain, const char *start,
                        uint64_t seed, bool avoid_postproc, int narrow, int *complete, int *completions) {
  dg_status st;
  tsel_prefix *p = tsel_prefix_new(k, spec, tg, &st);
  CHECK_OK(st);
  tsel_prefix_set_explain(p, explain);
  /* with narrow, the guard's narrowings drawn at random on the first
   * narrow edits (a cap, a thread factor's range, both or neither) */
  dg_rng nr;
  dg_rng_seed(&nr, seed ^ 0x5eed);
  for (int e = 1; e <= narrow; e++) {
    tsel_tile_narrowing n = {0};
    if (dg_rng_below(&nr, 2)) n.cap = 1 + (int64_t)dg_rng_below(&nr, 96);
    if (dg_rng_below(&nr, 2)) {
      n.factor = (int)dg_rng_below(&nr, 4);
      static const int64_t odd[] = {3, 5, 7, 11, 13, 17};
      n.lo = 1 + (int64_t)dg_rng_below(&nr, 64);
      n.hi = n.lo + (int64_t)dg_rng_below(&nr, 4 * (uint64_t)n.lo);
      /* or one odd value, which most extents here have no divisor at */
      if (dg_rng_below(&nr, 2)) n.lo = n.hi = odd[dg_rng_below(&nr, DG_ARRAY_LEN(odd))];
    }
    tsel_prefix_narrow_tile(p, e, &n);
  }
  if (start) CHECK(tsel_prefix_feed(p, start, strlen(start)));
  tsel_pstate *trial = dg_malloc(tsel_pstate_size());
  dg_rng r;
  dg_rng_seed(&r, seed);
  bool op_start = false;
  for (int step = 0; step < 1500; step++) {
    const char *f = tsel_prefix_forced(p);
    if (*f) {
      CHECK(tsel_prefix_feed(p, f, strlen(f)));
      op_start = true;
      continue;
    }
    unsigned char ok[256];
    int n = 0;
    tsel_prefix_reserve(p, 2);
    for (int b = 1; b < 256; b++) {
      tsel_pstate_copy(trial, tsel_prefix_state(p));
      if (tsel_pstate_feed(p, trial, (unsigned char)b)) ok[n++] = (unsigned char)b;
    }
    tsel_prefix_collect(p);
    size_t len;
    CHECK_MSG(n > 0 || tsel_prefix_complete(p), "%s seed %llu: stuck after\n%s", spec, (unsigned long long)seed,
              tsel_prefix_text(p, &len));
    if (n == 0) break;
    if (dg_rng_below(&r, 40) == 0) {
      dg_str c;
      dg_str_init(&c);
      CHECK_MSG(tsel_prefix_completion(p, &c), "%s seed %llu: no completion after\n%s\n(so far: %s)", spec,
                (unsigned long long)seed, tsel_prefix_text(p, &len), c.s ? c.s : "");
      tsel_prefix *q = tsel_prefix_save(p);
      char why[600];
      CHECK(tsel_prefix_feed(q, c.s, c.len) && tsel_prefix_complete(q));
      CHECK_MSG(graph_checks(tsel_prefix_text(q, &len), k, tg, why, sizeof why), "%s: %s", spec, why);
      tsel_prefix_free(q);
      dg_str_free(&c);
      (*completions)++;
    }
    unsigned char b = ok[dg_rng_below(&r, (uint64_t)n)];
    for (int i = 0; i < n; i++)
      if (strchr("\n ]\"", ok[i]) && dg_rng_below(&r, 3) == 0) {
        b = ok[i];
        break;
      }
    for (int tries = 0; avoid_postproc && op_start && b == 'p' && tries < 8; tries++)
      b = ok[dg_rng_below(&r, (uint64_t)n)];
    op_start = false;
    CHECK(tsel_prefix_feed(p, (const char *)&b, 1));
    if (tsel_prefix_complete(p) && dg_rng_below(&r, 4) == 0) break;
  }
  size_t tlen;
  walk_tiles += strstr(tsel_prefix_text(p, &tlen), " tile t") != NULL;
  if (tsel_prefix_complete(p)) {
    char why[600];
    size_t len;
    CHECK_MSG(graph_checks(tsel_prefix_text(p, &len), k, tg, why, sizeof why), "%s: %s", spec, why);
    (*complete)++;
  }
  free(trial);
  tsel_prefix_free(p);
}

/* Random walks from the start, and from the hand schedules' edits up to
 * their bare `postproc` (where edits and the end may follow). */
DG_TEST(tsel_prefix_random_walks_never_stick) {
  static const char *const specs[] = {
      "gemm:m=1,n=1024,k=1024,trans_a=0,trans_b=1,dtype=f32", "GMM/0",
      "conv2d_nchw:n=16,h=8,w=8,ci=384,co=48,kernel=3,stride=1,pad=1,dilation=1,dtype=f32",
      "softmax:m=33,n=1536,dtype=f32", "norm_bmn:b=32,m=3,n=512,dtype=f16",
  };
  int complete = 0, completions = 0;
  for (size_t w = 0; w < DG_ARRAY_LEN(specs); w++) {
    dg_status st;
    dg_func *k = wl_build(specs[w], &st);
    CHECK(k);
    char *canon = wl_canonical(specs[w], &st);
    for (uint64_t seed = 0; seed < 8; seed++)
      random_walk(k, canon, seed % 4 == 3 ? TSEL_TARGET_CPU : TSEL_TARGET_CUDA, seed % 2, NULL, 31 * seed + w,
                  seed >= 4, 0, &complete, &completions);
    free(canon);
    ir_func_free(k);
  }
  CHECK(load_lifts());
  int hand = 0;
  for (int i = 0; i < n_lifts && hand < 4; i++) {
    if (lifts[i].kind != LG_HAND) continue;
    dg_status st;
    dg_func *k = wl_build(lifts[i].spec, &st);
    CHECK(k);
    char *start = dg_strdup(lifts[i].text);
    char *pp = strstr(start, " postproc\n");
    CHECK(pp);
    pp[10] = 0;
    for (uint64_t seed = 0; seed < 4; seed++)
      random_walk(k, lifts[i].spec, TSEL_TARGET_CUDA, seed % 2, start, 77 * seed + (uint64_t)i, false, 0,
                  &complete, &completions);
    free(start);
    ir_func_free(k);
    hand++;
  }
  CHECK(complete >= 20 && completions >= 100);
}

/* Random walks under random narrowings of the guard's kind
 * (tsel_prefix_narrow_tile: caps, thread factor ranges, often ones the
 * loop has no divisor in) from a multi-level tiling's first tile of each
 * loop of a batched matmul: never stuck, and what they end in checks. */
DG_TEST(tsel_prefix_random_walks_never_stick_narrowed) {
  static const char *const spec = "batch_matmul:b=12,n=21,m=21,k=256,dtype=f32";
  dg_status st;
  dg_func *k = wl_build(spec, &st);
  CHECK(k);
  int complete = 0, completions = 0;
  walk_tiles = 0;
  for (int loop = 0; loop < 4; loop++)
    for (uint64_t seed = 0; seed < 24; seed++) {
      char start[400];
      snprintf(start, sizeof start,
               "tsel 1 kernel %s\nt1 block \"Z\"\nt2 block \"root\"\nt3 annotate t1 tiling \"SSSRRSRS\"\n"
               "t4 loops t1 x4\nt5 tile t4.%d [",
               spec, loop);
      random_walk(k, spec, TSEL_TARGET_CUDA, false, start, 53 * seed + (uint64_t)loop, seed % 2, 24, &complete,
                  &completions);
    }
  ir_func_free(k);
  CHECK_MSG(complete >= 12 && completions >= 40 && walk_tiles == 96, "%d complete, %d completions, %d with tiles",
            complete, completions, walk_tiles);
}

/* A batched matmul's multi-level tiling up to its last tile: the tests of
 * the tiling's reorder and of fuse's loops start here. */
#define BMM_SPEC "batch_matmul:b=12,n=21,m=21,k=256,dtype=f32"
#define BMM_TILED                                                                                  \
  "tsel 1 kernel " BMM_SPEC "\n"                                                                  \
  "t1 block \"Z\"\nt2 block \"root\"\nt3 annotate t1 tiling \"SSSRRSRS\"\nt4 loops t1 x4\n"           \
  "t5 tile t4.0 [4 1 3 1 1] max=64\nt6 tile t4.1 [3 1 7 1 1] max=64\nt7 tile t4.2 [1 1 7 3 1] max=64\n"

static tsel_prefix *bmm_prefix(dg_func **k) {
  dg_status st;
  *k = wl_build(BMM_SPEC, &st);
  CHECKR(*k, NULL);
  tsel_prefix *p = tsel_prefix_new(*k, BMM_SPEC, TSEL_TARGET_CUDA, &st);
  CHECKR(p, NULL);
  CHECKR(tsel_prefix_feed(p, BMM_TILED, strlen(BMM_TILED)), NULL);
  return p;
}

/* Where the checker loses a block's loop count (here after a
 * cache_write_at), `loops` writes the count of the replayed graph: a
 * conv2d graph of the test split whose model wrote the usual x10 for its
 * block of 20 loops until the guard gave up. */
DG_TEST(tsel_prefix_loops_count_from_the_replay) {
  const char *spec = "conv2d_bias_bn_relu:n=1,h=35,w=35,ci=768,co=96,kernel=3,stride=1,pad=1,dilation=1,dtype=f16";
  const char *head = "tsel 1 kernel conv2d_bias_bn_relu:n=1,h=35,w=35,ci=768,co=96,kernel=3,stride=1,pad=1,"
                     "dilation=1,dtype=f16\n"
                      "t1 block \"PaddedInput\"\n"
                      "t2 block \"Conv2dOutput\"\n"
                      "t3 block \"bias_add\"\n"
                      "t4 block \"bn_mul\"\n"
                      "t5 block \"bn_add\"\n"
                      "t6 block \"compute\"\n"
                      "t7 block \"root\"\n"
                      "t8 annotate t2 tiling \"SSSRRSRS\"\n"
                      "t9 loops t2 x7\n"
                      "t10 tile t9.0 [1 1 1 1 1] max=64\n"
                      "t11 tile t9.1 [1 1 7 5 1] max=64\n"
                      "t12 tile t9.2 [35 1 1 1 1] max=64\n"
                      "t13 tile t9.3 [3 1 32 1 1] max=64\n"
                      "t14 tile t9.4 [1 1 3] max=64\n"
                      "t15 tile t9.5 [1 3 1] max=64\n"
                      "t16 tile t9.6 [3 128 2] max=64\n"
                      "t17 reorder t10.0 t11.0 t12.0 t13.0 t10.1 t11.1 t12.1 t13.1 t10.2 t11.2 t12.2 t13.2 t14.0 t15.0 t16.0 t14.1 t15.1 t16.1 t10.3 t11.3 t12.3 t13.3 t14.2 t15.2 t16.2 t10.4 t11.4 t12.4 t13.4\n"
                      "t18 fuse_bind t10.0 t11.0 t12.0 t13.0 blockIdx.x\n"
                      "t19 fuse_bind t10.1 t11.1 t12.1 t13.1 vthread.x\n"
                      "t20 fuse_bind t10.2 t11.2 t12.2 t13.2 threadIdx.x\n"
                      "t21 annotate t2 tx_lo 32\n"
                      "t22 annotate t2 tx_hi 1024\n"
                      "t23 cache_write_at t2 0 local t12.3\n";
  dg_status st;
  dg_func *k = wl_build(spec, &st);
  CHECK_MSG(k, "%s", st.msg);
  if (!k) return;
  tsel_prefix *p = tsel_prefix_new(k, spec, TSEL_TARGET_CUDA, &st);
  CHECK_MSG(p, "%s", st.msg);
  CHECK(p && first_refused(p, head, strlen(head)) == -1);
  tsel_prefix *q = tsel_prefix_save(p);
  const char *wrong = "t24 loops t2 x10\n", *right = "t24 loops t2 x20\n";
  CHECK_MSG(first_refused(q, wrong, strlen(wrong)) == 14, "x10 refused at its 1");
  tsel_prefix_restore(q, p);
  CHECK(first_refused(q, right, strlen(right)) == -1);
  /* the graph goes on from there, the replay agreeing */
  char why[256];
  dg_str g;
  dg_str_init(&g);
  dg_str_printf(&g, "%st24 loops t2 x20\nt25 postproc default\n", head);
  CHECK_MSG(graph_checks(g.s, k, TSEL_TARGET_CUDA, why, sizeof why), "%s", why);
  tsel_graph *gr = tsel_parse(g.s, NULL, &st);
  sched_trace *t = gr ? tsel_lower(gr, &st) : NULL;
  CHECK_MSG(t, "%s", st.msg);
  sched_trace_free(t);
  tsel_graph_free(gr);
  dg_str_free(&g);
  tsel_prefix_free(q);
  tsel_prefix_free(p);
  ir_func_free(k);
}

static tsel_prefix *fed_prefix(const char *spec, const char *body, dg_func **k);

/* Where the replay refuses a handle, the mask does too, and only there: a
 * loop a compute_at regenerated, a compute_at or a cache copy's location
 * under a loop that holds the block or is not over its consumers, a split
 * of a bound loop, a count of producers or consumers other than the
 * block's, a storage_align offset past its factor. Each line's verdict is
 * the replay's (checked here too), and the mask's at the line's end. */
DG_TEST(tsel_prefix_refuses_what_the_replay_refuses) {
  const char *spec = "conv2d_bias_bn_relu:n=1,h=8,w=8,ci=16,co=16,kernel=3,stride=1,pad=1,dilation=1,dtype=f32";
  const char *body = "t1 block \"PaddedInput\"\n"
                     "t2 block \"Conv2dOutput\"\n"
                     "t3 block \"bias_add\"\n"
                     "t4 block \"compute\"\n"
                     "t5 block \"root\"\n"
                     "t6 loops t1 x4\n"
                     "t7 loops t2 x7\n"
                     "t8 loops t3 x4\n";
  static const struct {
    const char *line;
    bool ok;
  } cases[] = {
      {"t9 compute_at t1 t7.3\n", true},
      {"t9 compute_at t1 t8.0\n", false},    /* its consumer is not under bias_add's loops */
      {"t9 compute_at t2 t7.0\n", false},    /* the loop holds the block */
      {"t9 reverse_compute_at t3 t7.3\n", true},
      {"t9 compute_at t1 t7.3\nt10 fuse t6.0 t6.1\n", false}, /* t6.* regenerated */
      {"t9 bind t6.0 blockIdx.x\nt10 tile t6.0 [1 1] max=64\n", false},
      {"t9 fuse_bind t7.3 t7.4 threadIdx.x\n", true},
      {"t9 fuse_bind t7.2 t7.3 t7.4 threadIdx.x\n", true},       /* 384 threads */
      {"t9 fuse_bind t7.1 t7.2 t7.3 t7.4 threadIdx.x\n", false}, /* 3,072 threads */
      {"t9 fuse_bind t7.3 t7.4 blockIdx.x\n", false},
      {"t9 cache_read_at t2 0 shared t7.3\n", true},
      {"t9 cache_read_at t2 0 shared t8.0\n", false}, /* not over its consumer */
      {"t9 cache_write_at t2 0 local t7.3\n", true},
      {"t9 cache_write_at t2 0 local t8.0\n", false},
      {"t9 storage_align t1 0 3 32 31\n", true},
      {"t9 storage_align t1 0 3 32 32\n", false}, /* an offset below the factor */
      {"t9 consumers t1 x1\n", true},
      {"t9 consumers t1 x2\n", false},
      {"t9 producers t3 x1\n", true},
      {"t9 producers t5 x1\n", false}, /* the root has none */
  };
  dg_func *k = NULL;
  tsel_prefix *p = fed_prefix(spec, body, &k);
  CHECK(p);
  if (!p) {
    ir_func_free(k);
    return;
  }
  tsel_prefix *q = tsel_prefix_save(p);
  for (size_t i = 0; i < DG_ARRAY_LEN(cases); i++) {
    char why[256] = "", text[2048];
    snprintf(text, sizeof text, "tsel 1 kernel %s\n%s%s", spec, body, cases[i].line);
    bool replays = graph_replays(text, k, why, sizeof why);
    CHECK_MSG(replays == cases[i].ok, "%s: the replay %s (%s)", cases[i].line,
              replays ? "takes it" : "refuses it", why);
    tsel_prefix_restore(q, p);
    bool taken = first_refused(q, cases[i].line, strlen(cases[i].line)) == -1;
    CHECK_MSG(taken == cases[i].ok, "%s: the mask %s it", cases[i].line, taken ? "takes" : "refuses");
  }
  tsel_prefix_free(q);
  tsel_prefix_free(p);
  ir_func_free(k);
}

/* After a multi-level tiling's last tile the reorder is forced, level by
 * level (the structure's S and R), whole; the completion writes it too; a
 * tiling whose tile was tiled again is left to the model. */
DG_TEST(tsel_prefix_forces_the_tiling_reorder) {
  const char *spec = BMM_SPEC, *head = BMM_TILED;
  dg_status st;
  dg_func *k;
  tsel_prefix *p = bmm_prefix(&k);
  CHECK(p);
  CHECK_STREQ(tsel_prefix_forced(p), "t8 "); /* the last loop is not tiled yet */
  const char *t8 = "t8 tile t4.3 [16 2 8] max=64\n";
  CHECK(tsel_prefix_feed(p, t8, strlen(t8)));
  const char *want = "t9 reorder t5.0 t6.0 t7.0 t5.1 t6.1 t7.1 t5.2 t6.2 t7.2 t8.0 t8.1 t5.3 t6.3 t7.3 t8.2 "
                     "t5.4 t6.4 t7.4\n";
  CHECK_STREQ(tsel_prefix_forced(p), want);
  /* another line is refused at its first differing byte */
  tsel_prefix *q = tsel_prefix_save(p);
  CHECK(!tsel_prefix_feed(q, "t9 fuse", 7));
  tsel_prefix_restore(q, p);
  CHECK(tsel_prefix_feed(q, "t9 reorder t5.0 ", 16));
  CHECK_STREQ(tsel_prefix_forced(q), want + 16);
  tsel_prefix_free(q);
  dg_str c;
  dg_str_init(&c);
  CHECK(tsel_prefix_completion(p, &c));
  CHECK_MSG(strncmp(c.s, want, strlen(want)) == 0, "completion: %s", c.s);
  dg_str_free(&c);
  CHECK(tsel_prefix_feed(p, want, strlen(want)));
  CHECK_STREQ(tsel_prefix_forced(p), "t10 ");
  tsel_prefix_free(p);
  /* a tile of a tile: not the tiling's reorder */
  p = tsel_prefix_new(k, spec, TSEL_TARGET_CUDA, &st);
  CHECK_OK(st);
  const char *other = "t8 tile t5.0 [2 2] max=64\nt9 tile t4.3 [16 2 8] max=64\n";
  CHECK(tsel_prefix_feed(p, head, strlen(head)) && tsel_prefix_feed(p, other, strlen(other)));
  CHECK_STREQ(tsel_prefix_forced(p), "t10 ");
  tsel_prefix_free(p);
  ir_func_free(k);
}

/* The loops of a fuse or fuse_bind, as the replayed schedule has them:
 * plain, each the only child of the one before; a loop holding a
 * reduction is bound to threadIdx.* alone. The newline judge alone takes
 * all of these (they check), the replay refuses them. */
DG_TEST(tsel_prefix_fuse_knows_the_nest) {
  dg_status st;
  dg_func *k;
  tsel_prefix *p = bmm_prefix(&k);
  CHECK(p);
  const char *head = BMM_TILED
      "t8 tile t4.3 [16 2 8] max=64\n"
      "t9 reorder t5.0 t6.0 t7.0 t5.1 t6.1 t7.1 t5.2 t6.2 t7.2 t8.0 t8.1 t5.3 t6.3 t7.3 t8.2 t5.4 t6.4 t7.4\n";
  CHECK(tsel_prefix_feed(p, head + strlen(BMM_TILED), strlen(head) - strlen(BMM_TILED)));
  tsel_prefix *at = tsel_prefix_save(p);
  /* nested in order: taken, to the end of the line */
  const char *good = "t10 fuse_bind t5.0 t6.0 t7.0 blockIdx.x\n";
  CHECK(tsel_prefix_feed(p, good, strlen(good)));
  /* after t5.0 only its only child, t6.0: no t5.k (t5.1 is further in) */
  tsel_prefix_restore(p, at);
  CHECK(tsel_prefix_feed(p, "t10 fuse_bind t5.0 t", 20));
  CHECK(!tsel_prefix_feed(p, "5", 1));
  CHECK(!tsel_prefix_feed(p, "7", 1));
  CHECK(tsel_prefix_feed(p, "6.0 ", 4));
  /* the same text without the nest in the graph checks: only the replay refuses it */
  {
    char text[1200];
    snprintf(text, sizeof text, "%st10 fuse_bind t5.0 t5.1 blockIdx.x\n", head);
    tsel_graph *g = tsel_parse(text, NULL, &st);
    CHECK(g && tsel_check(g, k, TSEL_TARGET_CUDA, &st));
    tsel_graph_free(g);
  }
  /* a bound loop is not plain: nothing fuses it */
  tsel_prefix_restore(p, at);
  CHECK(tsel_prefix_feed(p, good, strlen(good)));
  CHECK(!tsel_prefix_feed(p, "t11 fuse t10 ", 13));
  /* a reduction loop (t8.*) goes to threadIdx.* alone */
  tsel_prefix_restore(p, at);
  CHECK(tsel_prefix_feed(p, "t10 bind t8.0 ", 14));
  tsel_prefix *r = tsel_prefix_save(p);
  CHECK(!tsel_prefix_feed(p, "b", 1)); /* blockIdx */
  CHECK(!tsel_prefix_feed(p, "v", 1)); /* vthread */
  CHECK(tsel_prefix_feed(p, "threadIdx.x\n", 12));
  tsel_prefix_restore(p, r);
  tsel_prefix_free(r);
  tsel_prefix_free(at);
  tsel_prefix_free(p);
  ir_func_free(k);
}

/* In a graph of a tiling a key goes once on a handle: a loop given all six
 * of a loop's keys is no operand of annotate (the line would have no way
 * on: a lost model's graph stuck there), and one given five still is. */
DG_TEST(tsel_prefix_annotate_needs_a_key_left) {
  dg_func *k;
  tsel_prefix *p = bmm_prefix(&k);
  CHECK(p);
  if (!p) return;
  const char *five = "t8 annotate t4.3 unroll_explicit 1\nt9 annotate t4.3 unroll_implicit 1\n"
                     "t10 annotate t4.3 auto_unroll 1\nt11 annotate t4.3 unroll_pragma 1\n"
                     "t12 annotate t4.3 tensorize_as \"\"\n";
  CHECK_MSG(first_refused(p, five, strlen(five)) == -1, "the five keys refused");
  tsel_prefix *q = tsel_prefix_save(p);
  const char *sixth = "t13 annotate t4.3 tensorize_init \"\"\n";
  CHECK(first_refused(q, sixth, strlen(sixth)) == -1);
  const char *seventh = "t14 annotate t4.3 ";
  long at = first_refused(q, seventh, strlen(seventh));
  CHECK_MSG(at >= 0 && at <= (long)strlen(seventh) - 2, "t4.3 taken with no key left (refused at %ld)", at);
  tsel_prefix_restore(q, p);
  CHECK(first_refused(q, "t13 annotate t4.3 ", 18) == -1);
  tsel_prefix_free(q);
  tsel_prefix_free(p);
  ir_func_free(k);
}

/* decompose_reduction's loop is one the init can go at: not below the
 * first loop that binds the reduction (t8.0 in this order); at or above
 * it, taken; the checker alone would take any of the block's loops. */
DG_TEST(tsel_prefix_decompose_reduction_knows_the_nest) {
  dg_func *k;
  tsel_prefix *p = bmm_prefix(&k);
  CHECK(p);
  const char *head =
      "t8 tile t4.3 [16 2 8] max=64\n"
      "t9 reorder t5.0 t6.0 t7.0 t5.1 t6.1 t7.1 t5.2 t6.2 t7.2 t8.0 t8.1 t5.3 t6.3 t7.3 t8.2 t5.4 t6.4 t7.4\n"
      "t10 decompose_reduction t1 t";
  CHECK(tsel_prefix_feed(p, head, strlen(head)));
  tsel_prefix *at = tsel_prefix_save(p);
  static const char *const below[] = {"8.1\n", "5.3\n", "8.2\n", "7.4\n"};
  for (size_t i = 0; i < DG_ARRAY_LEN(below); i++) {
    tsel_prefix_restore(p, at);
    CHECK_MSG(!tsel_prefix_feed(p, below[i], strlen(below[i])), "t%.3s taken", below[i]);
  }
  static const char *const fit[] = {"8.0\n", "7.2\n", "5.0\n"};
  for (size_t i = 0; i < DG_ARRAY_LEN(fit); i++) {
    tsel_prefix_restore(p, at);
    CHECK_MSG(tsel_prefix_feed(p, fit[i], strlen(fit[i])), "t%.3s refused", fit[i]);
  }
  tsel_prefix_free(at);
  tsel_prefix_free(p);
  ir_func_free(k);
}

/* A multi-level tiling's tile has its structure's number of factors: the
 * last one completes the extent (no dead end), the list closes only then,
 * and a reduction loop takes 3. */
/* The kernel's blocks and its matmul's four loops under a multi-level
 * tiling's structure: where the tiles of the test below begin. */
#define TILED_BMM_HEAD                                                                            \
  "tsel 1 kernel batch_matmul:b=12,n=21,m=21,k=256,dtype=f32\n"                                   \
  "t1 block \"Z\"\nt2 block \"root\"\nt3 annotate t1 tiling \"SSSRRSRS\"\nt4 loops t1 x4\n"

DG_TEST(tsel_prefix_counts_the_tiling_factors) {
  const char *spec = "batch_matmul:b=12,n=21,m=21,k=256,dtype=f32";
  dg_status st;
  dg_func *k = wl_build(spec, &st);
  CHECK_MSG(k, "%s", st.msg);
  tsel_prefix *p = tsel_prefix_new(k, spec, TSEL_TARGET_CUDA, &st);
  CHECK_OK(st);
  const char *head = TILED_BMM_HEAD "t5 tile t4.0 [2 1 3 1";
  CHECK(tsel_prefix_feed(p, head, strlen(head)));
  tsel_prefix *q = tsel_prefix_save(p);
  CHECK(!tsel_prefix_feed(q, "]", 1)); /* four of five */
  tsel_prefix_restore(q, p);
  CHECK(!tsel_prefix_feed(q, " 1]", 3)); /* 2 x 1 x 3 x 1 x 1 is not 12 */
  tsel_prefix_restore(q, p);
  CHECK(!tsel_prefix_feed(q, " 2 1", 4)); /* no sixth */
  tsel_prefix_restore(q, p);
  CHECK(tsel_prefix_feed(q, " 2] max=64\n", 11));
  tsel_prefix_free(q);
  dg_str c;
  dg_str_init(&c);
  CHECK(tsel_prefix_completion(p, &c));
  CHECK_MSG(strncmp(c.s, " 2]", 3) == 0, "completion: %s", c.s);
  dg_str_free(&c);
  tsel_prefix_free(p);
  /* the reduction loop (k): three */
  p = tsel_prefix_new(k, spec, TSEL_TARGET_CUDA, &st);
  const char *red = TILED_BMM_HEAD "t5 tile t4.3 [16 2";
  CHECK(tsel_prefix_feed(p, red, strlen(red)));
  q = tsel_prefix_save(p);
  CHECK(!tsel_prefix_feed(q, "]", 1));
  tsel_prefix_restore(q, p);
  CHECK(tsel_prefix_feed(q, " 8]", 3));
  tsel_prefix_free(q);
  tsel_prefix_free(p);
  /* a tensor-core tiling's tile of a split loop: five factors for the
   * outer part of a spatial loop (n=21 over 16 leaves 2: [1 1 2 1 1]),
   * three for the reduction's (k=256 over 16: 16) */
  p = tsel_prefix_new(k, spec, TSEL_TARGET_CUDA, &st);
  const char *tc = TILED_BMM_HEAD "t5 split t4.1 [_ 16]\nt6 split t4.3 [_ 16]\nt7 tile t5.0 [1 1 2";
  CHECK(tsel_prefix_feed(p, tc, strlen(tc)));
  q = tsel_prefix_save(p);
  CHECK(!tsel_prefix_feed(q, "]", 1)); /* three of five */
  tsel_prefix_restore(q, p);
  CHECK(!tsel_prefix_feed(q, " 1 1 1", 6)); /* no sixth */
  tsel_prefix_restore(q, p);
  const char *next = " 1 1] max=4\nt8 tile t6.0 [2 2";
  CHECK(tsel_prefix_feed(q, next, strlen(next)));
  tsel_prefix *r = tsel_prefix_save(q);
  CHECK(!tsel_prefix_feed(r, " 2 2", 4)); /* no fourth */
  tsel_prefix_restore(r, q);
  CHECK(tsel_prefix_feed(r, " 4]", 3));
  tsel_prefix_free(r);
  tsel_prefix_free(q);
  tsel_prefix_free(p);
  /* the inner part (16, the intrinsic's) is no tiling's: any count */
  p = tsel_prefix_new(k, spec, TSEL_TARGET_CUDA, &st);
  const char *inner = TILED_BMM_HEAD "t5 split t4.1 [_ 16]\nt6 tile t5.1 [4 4]";
  CHECK(tsel_prefix_feed(p, inner, strlen(inner)));
  tsel_prefix_free(p);
  /* without the structure annotation: any count */
  p = tsel_prefix_new(k, spec, TSEL_TARGET_CUDA, &st);
  const char *free_tile = "tsel 1 kernel batch_matmul:b=12,n=21,m=21,k=256,dtype=f32\n"
                          "t1 block \"Z\"\nt2 loops t1 x4\nt3 tile t2.0 [12";
  CHECK(tsel_prefix_feed(p, free_tile, strlen(free_tile)) && tsel_prefix_feed(p, "]", 1));
  tsel_prefix_free(p);
  ir_func_free(k);
}

/* A checker for spec's kernel (into *k) fed its header and body; NULL
 * where it refuses them. */
static tsel_prefix *fed_prefix(const char *spec, const char *body, dg_func **k) {
  dg_status st;
  *k = wl_build(spec, &st);
  CHECKR(*k, NULL);
  tsel_prefix *p = tsel_prefix_new(*k, spec, TSEL_TARGET_CUDA, &st);
  CHECKR(p, NULL);
  char head[200];
  snprintf(head, sizeof head, "tsel 1 kernel %s\n", spec);
  CHECKR(tsel_prefix_feed(p, head, strlen(head)) && tsel_prefix_feed(p, body, strlen(body)), NULL);
  return p;
}

/* A GPU tiling's thread factors (the third of each spatial tile, fused
 * and bound to threadIdx.x) multiply to at most 1,024: after a tile of
 * n with 64 threads, m's tile may give 16 threads, not 32; the batch
 * tile then 1. A reduction tile has no thread factor. */
DG_TEST(tsel_prefix_caps_a_tilings_threads) {
  const char *spec = "batch_matmul:b=4,n=512,m=512,k=64,dtype=f32";
  const char *tiled = "t1 block \"Z\"\nt2 block \"root\"\nt3 annotate t1 tiling \"SSSRRSRS\"\nt4 loops t1 x4\n";
  char body[300];
  snprintf(body, sizeof body, "%st5 tile t4.1 [1 1 64 4 2] max=64\nt6 tile t4.2 [1 1 ", tiled);
  dg_func *k;
  tsel_prefix *p = fed_prefix(spec, body, &k);
  CHECK(p);
  tsel_prefix *q = tsel_prefix_save(p);
  CHECK(!tsel_prefix_feed(q, "32", 2)); /* 64 x 32 threads */
  tsel_prefix_restore(q, p);
  const char *m_tile = "16 8 4] max=64\nt7 tile t4.0 [2 2 ";
  CHECK(tsel_prefix_feed(q, m_tile, strlen(m_tile)));
  tsel_prefix *r = tsel_prefix_save(q);
  CHECK(!tsel_prefix_feed(r, "2", 1)); /* 64 x 16 x 2 */
  tsel_prefix_restore(r, q);
  const char *rest = "1 1 1] max=64\nt8 tile t4.3 [2 1 32] max=64\n";
  CHECK(tsel_prefix_feed(r, rest, strlen(rest)));
  tsel_prefix_free(r);
  tsel_prefix_free(q);
  tsel_prefix_free(p);
  ir_func_free(k);
  /* without the threads before it, 32 is allowed */
  snprintf(body, sizeof body, "%st5 tile t4.2 [1 1 32", tiled);
  p = fed_prefix(spec, body, &k);
  CHECK(p);
  tsel_prefix_free(p);
  ir_func_free(k);
}

/* And at least the warp's 32 where the block's spatial loops hold more
 * than 64 iterations: gemm m=256 n=1 has only m to give threads, so its
 * tile's third factor is at least 32 and its first leaves room for one
 * (16 leaves 16); a block of 2 to 16 threads was the guard's commonest
 * refusal. A tile leaves the later ones a count they can make up, and the
 * last makes up the rest; a block of at most 64 iterations has no least. */
DG_TEST(tsel_prefix_keeps_a_tilings_threads_at_least_a_warp) {
  dg_func *k;
  tsel_prefix *p = fed_prefix("gemm:m=256,n=1,k=128,trans_a=0,trans_b=0,dtype=f32",
                              "t1 block \"C\"\nt2 block \"root\"\nt3 annotate t1 tiling \"SSSRRSRS\"\n"
                              "t4 loops t1 x3\nt5 tile t4.0 [",
                              &k);
  CHECK(p);
  tsel_prefix *q = tsel_prefix_save(p);
  CHECK(!tsel_prefix_feed(q, "16 ", 3)); /* leaves 16 */
  tsel_prefix_restore(q, p);
  CHECK(tsel_prefix_feed(q, "8 1 ", 4));
  tsel_prefix *r = tsel_prefix_save(q);
  CHECK(!tsel_prefix_feed(r, "16", 2));
  tsel_prefix_restore(r, q);
  CHECK(tsel_prefix_feed(r, "32 1 1]", 7));
  tsel_prefix_free(r);
  tsel_prefix_free(q);
  /* a guard's cap of shared memory that leaves no warp: the cap holds,
   * the checker is not left stuck */
  tsel_prefix_narrow_tile(p, 5, &(tsel_tile_narrowing){.cap = 4});
  CHECK(!tsel_prefix_feed(p, "8 ", 2)); /* leaves 32 > 4 */
  CHECK(tsel_prefix_feed(p, "64 1 4 1 1]", 11));
  tsel_prefix_free(p);
  ir_func_free(k);

  p = fed_prefix("batch_matmul:b=4,n=512,m=512,k=64,dtype=f32",
                 "t1 block \"Z\"\nt2 block \"root\"\nt3 annotate t1 tiling \"SSSRRSRS\"\n"
                 "t4 loops t1 x4\nt5 tile t4.1 [512 1 1 1 1] max=64\nt6 tile t4.2 [64 1 ",
                 &k);
  CHECK(p);
  q = tsel_prefix_save(p);
  CHECK(!tsel_prefix_feed(q, "4 ", 2)); /* 1 x 4 x at most 4 (b) */
  tsel_prefix_restore(q, p);
  CHECK(tsel_prefix_feed(q, "8 1 1]", 6));
  tsel_prefix_free(q);
  tsel_prefix_free(p);
  ir_func_free(k);

  /* what the loops not tiled yet can give, divisor by divisor: b=12's
   * tile may not take 2 threads where n=2049 gives 1, 3 or 683 and m=2 1
   * or 2 (2 x 6 is 12, 2 x 683 past 1,024); n's then takes 683 */
  p = fed_prefix("batch_matmul:b=12,n=2049,m=2,k=65,dtype=f16",
                 "t1 block \"Z\"\nt2 block \"root\"\nt3 annotate t1 tiling \"SSSRRSRS\"\n"
                 "t4 loops t1 x4\nt5 tile t4.0 [6 1 ",
                 &k);
  CHECK(p);
  q = tsel_prefix_save(p);
  CHECK(!tsel_prefix_feed(q, "2", 1));
  tsel_prefix_restore(q, p);
  const char *n_tile = "1 2 1] max=64\nt6 tile t4.1 [3 1 ";
  CHECK(tsel_prefix_feed(q, n_tile, strlen(n_tile)));
  r = tsel_prefix_save(q);
  CHECK(!tsel_prefix_feed(r, "1 ", 2));
  tsel_prefix_restore(r, q);
  CHECK(tsel_prefix_feed(r, "683 1 1]", 8));
  tsel_prefix_free(r);
  tsel_prefix_free(q);
  tsel_prefix_free(p);
  ir_func_free(k);

  /* 64 iterations: no least */
  p = fed_prefix("gemm:m=32,n=2,k=128,trans_a=0,trans_b=0,dtype=f32",
                 "t1 block \"C\"\nt2 block \"root\"\nt3 annotate t1 tiling \"SSSRRSRS\"\n"
                 "t4 loops t1 x3\nt5 tile t4.0 [2 1 16 1 1]",
                 &k);
  CHECK(p);
  tsel_prefix_free(p);
  ir_func_free(k);
}

/* A loop unrolled by hand is a tensor-core graph's line: in a CUDA graph
 * of a multi-level tiling but no tensor-core tiling `unroll` is refused
 * (unroll_steps stays), after one it is written, and a graph of no tiling
 * may write it. */
DG_TEST(tsel_prefix_unroll_only_in_tensor_core_graphs) {
  const char *spec = "batch_matmul:b=12,n=21,m=21,k=256,dtype=f32";
  dg_status st;
  dg_func *k = wl_build(spec, &st);
  CHECK_MSG(k, "%s", st.msg);
  tsel_prefix *p = tsel_prefix_new(k, spec, TSEL_TARGET_CUDA, &st);
  CHECK_OK(st);
  const char *head = TILED_BMM_HEAD "t5 tile t4.0 [2 1 3 1 2] max=64\nt6 unroll";
  CHECK(tsel_prefix_feed(p, head, strlen(head))); /* unroll_steps still */
  tsel_prefix *q = tsel_prefix_save(p);
  CHECK(!tsel_prefix_feed(q, " ", 1));
  tsel_prefix_restore(q, p);
  const char *steps = "_steps t2 [0 16 64 512 1024] =16\n";
  CHECK(tsel_prefix_feed(q, steps, strlen(steps)));
  tsel_prefix_free(q);
  tsel_prefix_free(p);
  p = tsel_prefix_new(k, spec, TSEL_TARGET_CUDA, &st);
  const char *tc = TILED_BMM_HEAD "t5 split t4.1 [_ 16]\nt6 tile t5.0 [1 1 2 1 1] max=4\nt7 unroll t6.4\n";
  CHECK(tsel_prefix_feed(p, tc, strlen(tc)));
  tsel_prefix_free(p);
  /* a graph of no tiling (a schedule written by hand) may unroll */
  p = tsel_prefix_new(k, spec, TSEL_TARGET_CUDA, &st);
  const char *hand = "tsel 1 kernel batch_matmul:b=12,n=21,m=21,k=256,dtype=f32\n"
                     "t1 block \"Z\"\nt2 loops t1 x4\nt3 unroll t2.3\n";
  CHECK(tsel_prefix_feed(p, hand, strlen(hand)));
  tsel_prefix_free(p);
  ir_func_free(k);
}

/* The graphs of the GPU writer (train_decode_jobs_cuda) with the shipped
 * model: greedy, those the C reference writes (the GPU's logits are bf16's:
 * one graph of six may part from the CPU's at a near-tie), a planted
 * guard's refused lines taken back on the GPU's rows as on the CPU's;
 * sampled at temperature 1, every graph complete and checking, and the
 * same graphs whether the writers run on three threads or one. */
DG_TEST(gpu_decode_jobs_match_cpu) {
  dg_status st;
  dg_status_ok(&st);
  if (!train_device_available(TRAIN_DEVICE_CUDA, &st)) {
    dg_test_skip("%s", st.msg);
    return;
  }
  const char *mp = "models/little-dragon/model.safetensors.zst";
  nn_config c;
  CHECK_MSG(nn_safetensors_read_config(mp, &c, &st), "%s", st.msg);
  nn_model m;
  CHECK(nn_model_init(&m, &c, false, &st));
  CHECK_MSG(nn_safetensors_import(&m, mp, &st), "%s", st.msg);
  enum { NT = 3, NK = 3, NS = 8 };
  tok_tokenizer *toks[NT];
  tsel_mask *masks[NT];
  for (int t = 0; t < NT; t++) {
    toks[t] = tok_load("models/little-dragon/tokenizer.bin", &st);
    CHECK_MSG(toks[t], "%s", st.msg);
    masks[t] = tsel_mask_new(toks[t], &st);
    CHECK_MSG(masks[t], "%s", st.msg);
  }
  train_cuda *gpu = NULL;
  CHECK_MSG(train_cuda_init_frozen(&gpu, &m, 1, 64, &st), "%s", st.msg);
  const char *specs[NK] = {"gemm:m=1,n=1024,k=1024,trans_a=0,trans_b=1,dtype=f32", "softmax:m=33,n=1536,dtype=f32",
                           "batch_matmul:b=12,n=21,m=21,k=256,dtype=f32"};
  dg_func *k[NK];
  tok_ids prompt[NK];
  memset(prompt, 0, sizeof prompt);
  for (int i = 0; i < NK; i++) {
    k[i] = wl_build(specs[i], &st);
    CHECK_MSG(k[i], "%s", st.msg);
    char *text = kernel_text(specs[i], k[i]);
    CHECK_MSG(train_prompt_encode(toks[0], text, NULL, &prompt[i], &st), "%s", st.msg);
    free(text);
  }
  /* greedy: each kernel with a guard that passes every line, and with one
   * that refuses edits 2 and 4 once each (one guard a job and a device:
   * a planted guard remembers what it was shown) */
  planted_guard gc[2 * NK], gg[2 * NK];
  train_decode_job jc[2 * NK], jg[2 * NK];
  for (int i = 0; i < 2 * NK; i++) {
    memset(&gc[i], 0, sizeof gc[i]);
    if (i >= NK) gc[i].refuse_at[0] = 2, gc[i].refuse_at[1] = 4, gc[i].n_refuse = 2;
    gg[i] = gc[i];
    int w = i % NK;
    jc[i] = (train_decode_job){prompt[w].data, (int)prompt[w].len, k[w], specs[w], 11 + (uint64_t)i, &gc[i]};
    jg[i] = jc[i];
    jg[i].guard_ctx = &gg[i];
  }
  train_decode_opts o;
  train_decode_opts_default(&o);
  o.sample.temperature = 0;
  o.sample.max_tokens = 600;
  o.explain = false;
  o.guard = planted_guard_fn;
  char *tc[2 * NK], *tg[2 * NK];
  dg_status ec[2 * NK], eg[2 * NK];
  CHECK_MSG(train_decode_jobs(&m, toks[0], masks[0], jc, 2 * NK, TSEL_TARGET_CUDA, &o, tc, NULL, NULL, ec, &st), "%s",
            st.msg);
  train_decode_gpu_stats gs;
  CHECK_MSG(train_decode_jobs_cuda(gpu, toks, masks, NT, jg, 2 * NK, TSEL_TARGET_CUDA, &o, tg, NULL, NULL, eg, &gs, &st),
            "%s", st.msg);
  CHECK(gs.steps > 0 && gs.threads == NT);
  int same = 0;
  for (int i = 0; i < 2 * NK; i++) {
    CHECK_MSG(tc[i] && tg[i], "job %d: %s / %s", i, tc[i] ? "" : ec[i].msg, tg[i] ? "" : eg[i].msg);
    bool eq = tc[i] && tg[i] && strcmp(tc[i], tg[i]) == 0;
    same += eq;
    if (i >= NK) CHECK_MSG(gc[i].refused >= 1 && (!eq || gg[i].refused == gc[i].refused),
                           "job %d: %d lines refused on the CPU, %d on the GPU", i, gc[i].refused, gg[i].refused);
    free(tg[i]);
  }
  CHECK_MSG(same >= 2 * NK - 1, "%d of %d greedy graphs as the CPU writes them", same, 2 * NK);
  /* the same jobs taking two rows in turn: each finished row prefilled
   * with the next job while the other decodes on */
  for (int i = 0; i < 2 * NK; i++) {
    memset(&gg[i], 0, sizeof gg[i]);
    if (i >= NK) gg[i].refuse_at[0] = 2, gg[i].refuse_at[1] = 4, gg[i].n_refuse = 2;
  }
  o.gpu_rows = 2;
  CHECK_MSG(train_decode_jobs_cuda(gpu, toks, masks, NT, jg, 2 * NK, TSEL_TARGET_CUDA, &o, tg, NULL, NULL, eg, &gs, &st),
            "%s", st.msg);
  o.gpu_rows = 0;
  CHECK_MSG(gs.rows == 2 && gs.refills >= 2 && gs.threads == 2, "%d rows, %lld refills, %d threads", gs.rows,
            (long long)gs.refills, gs.threads);
  same = 0;
  for (int i = 0; i < 2 * NK; i++) {
    CHECK_MSG(tg[i], "job %d on two rows: %s", i, eg[i].msg);
    same += tc[i] && tg[i] && strcmp(tc[i], tg[i]) == 0;
    free(tc[i]);
    free(tg[i]);
  }
  CHECK_MSG(same >= 2 * NK - 1, "%d of %d greedy graphs on two rows as the CPU writes them", same, 2 * NK);
  /* sampled: complete, checking, the same on three threads and on one */
  train_decode_job js[NS];
  for (int i = 0; i < NS; i++) {
    int w = i % NK;
    js[i] = (train_decode_job){prompt[w].data, (int)prompt[w].len, k[w], specs[w], 100 + (uint64_t)i, NULL};
  }
  o.sample.temperature = 1;
  o.guard = NULL;
  char *t3[NS], *t1[NS];
  dg_status e3[NS], e1[NS];
  train_decode_trace tr[NS];
  memset(tr, 0, sizeof tr);
  CHECK_MSG(train_decode_jobs_cuda(gpu, toks, masks, NT, js, NS, TSEL_TARGET_CUDA, &o, t3, tr, NULL, e3, NULL, &st),
            "%s", st.msg);
  CHECK_MSG(train_decode_jobs_cuda(gpu, toks, masks, 1, js, NS, TSEL_TARGET_CUDA, &o, t1, NULL, NULL, e1, NULL, &st),
            "%s", st.msg);
  for (int i = 0; i < NS; i++) {
    char why[256];
    CHECK_MSG(t3[i], "job %d: %s", i, e3[i].msg);
    if (t3[i]) CHECK_MSG(graph_checks(t3[i], k[i % NK], TSEL_TARGET_CUDA, why, sizeof why), "job %d: %s", i, why);
    CHECK_MSG(t3[i] && t1[i] && strcmp(t3[i], t1[i]) == 0, "job %d: three threads and one differ", i);
    CHECK(tr[i].n > 0);
    free(t3[i]);
    free(t1[i]);
    train_decode_trace_free(&tr[i]);
  }
  train_cuda_free(gpu);
  for (int i = 0; i < NK; i++) {
    tok_ids_free(&prompt[i]);
    ir_func_free(k[i]);
  }
  for (int t = 0; t < NT; t++) {
    tsel_mask_free(masks[t]);
    tok_free(toks[t]);
  }
  nn_model_free(&m);
}
