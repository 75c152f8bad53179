/* test_replay_exact.c: a trace is replayed exactly or refused. A recorded
 * decision that is not valid where it stands (tiles that do not multiply to
 * the loop's extent, an innermost factor above its limit, a categorical
 * index or a compute location out of range or not legal) is refused with
 * the instruction named, by the library and by `dragon check` / `dragon
 * schedule`; valid traces (MetaSchedule's own, the hand schedules, design
 * space samples and their mutants) replay to the kernel the repairing
 * replay gives, with their decisions unchanged; TSEL refuses text and
 * strings that are not UTF-8, at their line:col. */
#include <stdlib.h>
#include <string.h>

#include "dragon/search.h"
#include "dragon/tsel.h"
#include "dragon/wl.h"
#include "test.h"
#include "tsel/tsel_impl.h"
#include "tvm_traces.h"

#define GMM_SPACE "tests/data/traces/gmm0_space.json"
#define CONV_SPEC \
  "conv2d_nhwc:n=1,h=8,w=8,ci=2,co=4,kernel=3,stride=2,pad=1,dilation=1,groups=1,dtype=f32"

/* The canonical JSON of a trace file (no trailing newline); NULL on error. */
static char *read_json(const char *path) {
  dg_status st;
  char *text = dg_read_file(path, NULL, &st);
  if (!text) return NULL;
  size_t n = strlen(text);
  while (n > 0 && (text[n - 1] == '\n' || text[n - 1] == ' ')) text[--n] = 0;
  return text;
}

/* text with its only occurrence of `from` replaced by `to`; NULL if `from`
 * does not occur exactly once. */
static char *replace_once(const char *text, const char *from, const char *to) {
  const char *at = strstr(text, from);
  if (!at || strstr(at + 1, from)) return NULL;
  size_t a = (size_t)(at - text), nf = strlen(from), nt = strlen(to);
  char *out = dg_malloc(strlen(text) - nf + nt + 1);
  memcpy(out, text, a);
  memcpy(out + a, to, nt);
  strcpy(out + a + nt, at + nf);
  return out;
}

/* Replays json on spec in `mode`; the status in *st, the recorded trace's
 * JSON in *recorded (when not NULL and the replay succeeds). */
static bool replay_json(const char *spec, const char *json, sched_replay_mode mode,
                        char **recorded, dg_func **func, dg_status *st) {
  dg_func *f = wl_build(spec, st);
  if (!f) return false;
  sched_trace *t = sched_trace_from_json(json, st);
  bool ok = false;
  if (t) {
    sched *s = sched_new(f, 0);
    ok = sched_replay_with(s, t, mode, false, st);
    if (ok && recorded) *recorded = sched_trace_to_json(sched_get_trace(s));
    if (ok && func) *func = ir_func_clone(sched_func(s));
    sched_free(s);
    sched_trace_free(t);
  }
  ir_func_free(f);
  return ok;
}

/* Writes text to a file in the test's directory; returns its path. */
static const char *write_tmp(const char *name, const char *text) {
  static char path[600];
  snprintf(path, sizeof path, "%s/%s", dg_test_tmpdir(), name);
  FILE *f = fopen(path, "wb");
  if (!f) return NULL;
  fputs(text, f);
  fclose(f);
  return path;
}

/* `dragon CMD SPEC --trace FILE`: exit 1 and exactly "dragon CMD: FILE: want". */
static bool cli_refuses(const char *cmd, const char *spec, const char *json, const char *want) {
  const char *path = write_tmp("bad.json", json);
  if (!path) return false;
  char args[1200], line[1400];
  snprintf(args, sizeof args, "%s '%s' --trace %s", cmd, spec, path);
  snprintf(line, sizeof line, "dragon %s: %s: %s\n", cmd, path, want);
  char *out = NULL;
  int rc = dg_test_run_dragon(args, NULL, &out);
  bool ok = rc == 1 && out && strcmp(out, line) == 0;
  if (!ok)
    fprintf(stderr, "  %s: rc %d, output '%s', wanted '%s'\n", cmd, rc, out ? out : "", line);
  free(out);
  return ok;
}

/* ---- SamplePerfectTile -------------------------------------------------------- */

typedef struct {
  const char *from, *to; /* the decision entry in the JSON, and its edit */
  const char *msg;       /* the refusal */
} tile_case;

static const tile_case tile_cases[] = {
    {"[6,[1,32,1,2,2]]", "[6,[1,1,1,1,999]]",
     "instruction 6: SamplePerfectTile: decision [1,1,1,1,999] multiplies to 999, the loop l3 (i) "
     "has extent 128"},
    {"[6,[1,32,1,2,2]]", "[6,[1,32,1,2,4]]",
     "instruction 6: SamplePerfectTile: decision [1,32,1,2,4] multiplies to 256, the loop l3 (i) "
     "has extent 128"},
    {"[6,[1,32,1,2,2]]", "[6,[1,32,1,2,9223372036854775807]]",
     "instruction 6: SamplePerfectTile: decision [1,32,1,2,9223372036854775807] multiplies to "
     "more than 2^63-1, the loop l3 (i) has extent 128"},
    {"[6,[1,32,1,2,2]]", "[6,[1,1,1,1,128]]",
     "instruction 6: SamplePerfectTile: decision [1,1,1,1,128] for the loop l3 (i) has the "
     "innermost factor 128, above max_innermost_factor 64"},
    {"[4,[1,1,1,1,1]]", "[4,[1,1,1,1,999]]",
     "instruction 4: SamplePerfectTile: decision [1,1,1,1,999] multiplies to 999, the loop l2 (b) "
     "has extent 1"},
};

DG_TEST(replay_exact_tile_refused_by_library) {
  char *space = read_json(GMM_SPACE);
  CHECK(space);
  for (size_t i = 0; i < DG_ARRAY_LEN(tile_cases); i++) {
    const tile_case *c = &tile_cases[i];
    char *bad = replace_once(space, c->from, c->to);
    CHECK(bad);
    dg_status st;
    CHECK_MSG(!replay_json("GMM/0", bad, SCHED_REPLAY_EXACT, NULL, NULL, &st), "%s replayed",
              c->to);
    CHECK_STREQ(st.msg, c->msg);
    /* the legacy entry point is the exact mode */
    dg_func *f = wl_build("GMM/0", &st);
    sched_trace *t = sched_trace_from_json(bad, &st);
    CHECK(f && t);
    sched *s = sched_new(f, 0);
    CHECK(!sched_replay(s, t, false, false, &st));
    CHECK_STREQ(st.msg, c->msg);
    sched_free(s);
    sched_trace_free(t);
    ir_func_free(f);
    free(bad);
  }
  free(space);
}

DG_TEST(replay_exact_tile_refused_by_cli) {
  char *space = read_json(GMM_SPACE);
  CHECK(space);
  for (size_t i = 0; i < DG_ARRAY_LEN(tile_cases); i++) {
    char *bad = replace_once(space, tile_cases[i].from, tile_cases[i].to);
    CHECK(bad);
    CHECK(cli_refuses("check", "GMM/0", bad, tile_cases[i].msg));
    CHECK(cli_refuses("schedule", "GMM/0", bad, tile_cases[i].msg));
    free(bad);
  }
  /* emit shares the path; one case is enough */
  char *bad = replace_once(space, tile_cases[1].from, tile_cases[1].to);
  CHECK(bad);
  CHECK(cli_refuses("emit", "GMM/0", bad, tile_cases[1].msg));
  free(bad);
  free(space);
}

DG_TEST(replay_exact_repair_is_the_search_mode) {
  /* what the search's mutants get: TVM's repair, innermost first */
  char *space = read_json(GMM_SPACE);
  CHECK(space);
  char *stale = replace_once(space, "[6,[1,32,1,2,2]]", "[6,[1,32,1,2,4]]");
  CHECK(stale);
  char *rec = NULL;
  dg_status st;
  CHECK_MSG(replay_json("GMM/0", stale, SCHED_REPLAY_REPAIR, &rec, NULL, &st), "%s", st.msg);
  CHECK(strstr(rec, "[6,[1,16,1,2,4]]") != NULL);
  /* the repaired trace it records replays exactly */
  char *again = NULL;
  CHECK_MSG(replay_json("GMM/0", rec, SCHED_REPLAY_EXACT, &again, NULL, &st), "%s", st.msg);
  CHECK_STREQ(again, rec);
  free(again);
  free(rec);
  free(stale);
  /* a repair that ends above the innermost limit is refused even there */
  stale = replace_once(space, "[6,[1,32,1,2,2]]", "[6,[1,32,1,2,9223372036854775807]]");
  CHECK(stale);
  CHECK(!replay_json("GMM/0", stale, SCHED_REPLAY_REPAIR, NULL, NULL, &st));
  CHECK_STREQ(st.msg,
              "instruction 6: SamplePerfectTile: decision [1,32,1,2,9223372036854775807], "
              "repaired to [1,1,1,1,128] for the loop l3 (i) of extent 128, has the innermost "
              "factor 128, above max_innermost_factor 64");
  free(stale);
  free(space);
}

/* ---- SampleCategorical and SampleComputeLocation ------------------------------- */

DG_TEST(replay_exact_categorical_out_of_range) {
  char *space = read_json(GMM_SPACE);
  CHECK(space);
  static const struct {
    const char *to, *msg;
  } cases[] = {
      {"[27,4]", "instruction 27: SampleCategorical: decision must be an index in [0, 4), got 4"},
      {"[27,-1]", "instruction 27: SampleCategorical: decision must be an index in [0, 4), got -1"},
  };
  for (size_t i = 0; i < DG_ARRAY_LEN(cases); i++) {
    char *bad = replace_once(space, "[27,1]", cases[i].to);
    CHECK(bad);
    dg_status st;
    CHECK(!replay_json("GMM/0", bad, SCHED_REPLAY_EXACT, NULL, NULL, &st));
    CHECK_STREQ(st.msg, cases[i].msg);
    /* TVM refuses it too: no mode repairs an index */
    CHECK(!replay_json("GMM/0", bad, SCHED_REPLAY_REPAIR, NULL, NULL, &st));
    CHECK_STREQ(st.msg, cases[i].msg);
    CHECK(cli_refuses("check", "GMM/0", bad, cases[i].msg));
    free(bad);
  }
  free(space);
}

/* PadInput computed at a sampled location of the convolution. */
static char *location_trace(const char *decision) {
  dg_str o;
  dg_str_init(&o);
  dg_str_printf(&o,
                "[[[\"GetBlock\",[],[\"PadInput\",\"main\"],[\"b0\"]],"
                "[\"SampleComputeLocation\",[\"b0\"],[],[\"l1\"]],"
                "[\"ComputeAt\",[\"b0\",\"l1\"],[1,-1],[]]],[[1,%s]]]",
                decision);
  return dg_str_take(&o);
}

DG_TEST(replay_exact_compute_location_refused) {
  /* PadInput's legal locations: inline, root, h, w, co (n has extent 1) */
  const char *legal = "the legal ones are -2 (inline), -1 (root), 1 (h), 2 (w), 3 (co)";
  const char *legal_range =
      "the legal locations of block PadInput are -2 (inline), -1 (root), 1 (h), 2 (w), 3 (co)";
  char msg[3][400];
  snprintf(msg[0], sizeof msg[0],
           "instruction 1: SampleComputeLocation: decision 0 is not a legal compute location of "
           "block PadInput; %s",
           legal);
  snprintf(msg[1], sizeof msg[1],
           "instruction 1: SampleComputeLocation: decision 99 is out of range [-2, 7) (-2 inline, "
           "-1 root, 0.. the loops above the first consumer); %s",
           legal_range);
  snprintf(msg[2], sizeof msg[2],
           "instruction 1: SampleComputeLocation: decision -3 is out of range [-2, 7) (-2 inline, "
           "-1 root, 0.. the loops above the first consumer); %s",
           legal_range);
  const char *decs[3] = {"0", "99", "-3"};
  /* what TVM's repair makes of them: the nearest earlier legal location */
  const char *repaired[3] = {"[1,-1]", "[1,3]", "[1,-1]"};
  for (int i = 0; i < 3; i++) {
    char *json = location_trace(decs[i]);
    dg_status st;
    CHECK_MSG(!replay_json(CONV_SPEC, json, SCHED_REPLAY_EXACT, NULL, NULL, &st), "%s", decs[i]);
    CHECK_STREQ(st.msg, msg[i]);
    CHECK(cli_refuses("check", CONV_SPEC, json, msg[i]));
    char *rec = NULL;
    CHECK_MSG(replay_json(CONV_SPEC, json, SCHED_REPLAY_REPAIR, &rec, NULL, &st), "%s", st.msg);
    CHECK_MSG(strstr(rec, repaired[i]) != NULL, "%s", rec);
    free(rec);
    free(json);
  }
  /* the legal ones replay as recorded */
  const char *ok[5] = {"-2", "-1", "1", "2", "3"};
  for (int i = 0; i < 5; i++) {
    char *json = location_trace(ok[i]);
    char *rec = NULL;
    dg_status st;
    CHECK_MSG(replay_json(CONV_SPEC, json, SCHED_REPLAY_EXACT, &rec, NULL, &st), "%s", st.msg);
    CHECK_STREQ(rec, json);
    free(rec);
    free(json);
  }
}

/* ---- valid traces replay as before ---------------------------------------------- */

static bool val_equal(const sched_val *a, const sched_val *b) {
  if (a->kind != b->kind) return false;
  switch (a->kind) {
    case SV_NONE: return true;
    case SV_INT: case SV_BOOL: case SV_RV: return a->i == b->i;
    case SV_FLOAT: return a->f == b->f;
    case SV_STR: return strcmp(a->s, b->s) == 0;
    case SV_ARRAY:
      if (a->n != b->n) return false;
      for (int i = 0; i < a->n; i++)
        if (!val_equal(&a->items[i], &b->items[i])) return false;
      return true;
  }
  return false;
}

/* Exact and repairing replay of t on f agree (both succeed, one kernel),
 * and the exact one records t's decisions unchanged. */
static bool same_both_ways(const dg_func *f, const sched_trace *t, bool remove_postproc,
                           const char *what) {
  sched *a = sched_new(f, 0), *b = sched_new(f, 0);
  dg_status sa, sb;
  bool oka = sched_replay_with(a, t, SCHED_REPLAY_EXACT, remove_postproc, &sa);
  bool okb = sched_replay_with(b, t, SCHED_REPLAY_REPAIR, remove_postproc, &sb);
  bool ok = oka && okb && ir_func_equal(sched_func(a), sched_func(b));
  if (!ok)
    fprintf(stderr, "  %s: exact %s, repair %s\n", what, oka ? "ok" : sa.msg, okb ? "ok" : sb.msg);
  /* replay appends one instruction per instruction replayed */
  const sched_trace *got = sched_get_trace(a);
  for (int i = 0; ok && i < got->n; i++) {
    const sched_inst *x = &t->insts[i], *y = &got->insts[i];
    ok = x->kind == y->kind && x->has_decision == y->has_decision &&
         (!x->has_decision || val_equal(&x->decision, &y->decision));
    if (!ok) fprintf(stderr, "  %s: instruction %d recorded differently\n", what, i);
  }
  sched_free(a);
  sched_free(b);
  return ok;
}

DG_TEST(replay_exact_valid_traces_unchanged) {
  /* the hand-written traces: same kernel, the same bytes recorded */
  static const struct {
    const char *path, *spec;
  } files[] = {
      {GMM_SPACE, "GMM/0"},
      {"tests/data/traces/gmm0_tiling.json", "GMM/0"},
      {"tests/data/traces/gemm_bind.json", "gemm:m=64,n=48,k=32,dtype=f32"},
  };
  for (size_t i = 0; i < DG_ARRAY_LEN(files); i++) {
    char *json = read_json(files[i].path);
    CHECK(json);
    char *rec = NULL, *rep = NULL;
    dg_func *fe = NULL, *fr = NULL;
    dg_status st;
    CHECK_MSG(replay_json(files[i].spec, json, SCHED_REPLAY_EXACT, &rec, &fe, &st), "%s: %s",
              files[i].path, st.msg);
    CHECK_MSG(replay_json(files[i].spec, json, SCHED_REPLAY_REPAIR, &rep, &fr, &st), "%s: %s",
              files[i].path, st.msg);
    CHECK_STREQ(rec, json);
    CHECK_STREQ(rep, json);
    CHECK(ir_func_equal(fe, fr));
    free(rec);
    free(rep);
    ir_func_free(fe);
    ir_func_free(fr);
    free(json);
  }
  /* the hand schedules of the 13 workloads, postprocessing included */
  for (size_t w = 0; w < DG_ARRAY_LEN(tvm_aliases); w++) {
    char path[64], spec[16];
    snprintf(path, sizeof path, "schedules/%s.json", tvm_aliases[w]);
    snprintf(spec, sizeof spec, "%s/0", tvm_aliases[w]);
    char *json = read_json(path);
    CHECK(json);
    char *rec = NULL;
    dg_status st;
    CHECK_MSG(replay_json(spec, json, SCHED_REPLAY_EXACT, &rec, NULL, &st), "%s: %s", path, st.msg);
    CHECK_MSG(strcmp(rec, json) == 0, "%s: recorded differently", path);
    free(rec);
    free(json);
  }
}

DG_TEST(replay_exact_tvm_traces) {
  /* MetaSchedule's own sketches and postprocessed samples (TVM 0.27) */
  int n = 0;
  for (size_t w = 0; w < DG_ARRAY_LEN(tvm_aliases); w++) {
    json_t *doc = tvm_load(tvm_aliases[w]);
    CHECK(doc);
    char spec[16];
    snprintf(spec, sizeof spec, "%s/0", tvm_aliases[w]);
    dg_status st;
    dg_func *f = wl_build(spec, &st);
    CHECK(f);
    static const char *const parts[2] = {"sketches", "postprocessed"};
    for (int p = 0; p < 2; p++) {
      json_t *arr = json_object_get(doc, parts[p]);
      for (size_t k = 0; k < json_array_size(arr); k++) {
        json_t *j = json_array_get(arr, k);
        if (json_is_null(j)) continue;
        sched_trace *theirs = tvm_trace(j);
        CHECK(theirs);
        sched_trace *tn = tvm_normal(theirs);
        CHECK(tn);
        char what[64];
        snprintf(what, sizeof what, "%s %s %zu", tvm_aliases[w], parts[p], k);
        CHECK(same_both_ways(f, tn, true, what));
        n++;
        sched_trace_free(tn);
        sched_trace_free(theirs);
      }
    }
    ir_func_free(f);
    json_decref(doc);
  }
  CHECK(n >= 40);
}

DG_TEST(replay_exact_samples_and_mutants) {
  /* the design-space sampler and the mutators make only valid decisions:
   * every sample replays exactly, and every mutant replays exactly
   * wherever the repairing replay accepts it, to the same kernel */
  dg_rng r;
  dg_rng_seed(&r, 77);
  int samples = 0, mutants = 0;
  for (size_t w = 0; w < DG_ARRAY_LEN(tvm_aliases); w++) {
    char spec[16];
    snprintf(spec, sizeof spec, "%s/0", tvm_aliases[w]);
    dg_status st;
    dg_func *f = wl_build(spec, &st);
    CHECK(f);
    search_space sp;
    search_space_opts o = {.seed = 13};
    CHECK_MSG(search_space_generate(f, &o, &sp, &st), "%s: %s", spec, st.msg);
    for (int k = 0, got = 0; k < 120 && got < 3; k++) {
      search_postprocs pp = {0};
      sched *s = search_sample(f, &sp, &pp, &r, NULL, &st);
      if (!s) continue; /* a postprocessor refused it */
      samples++;
      got++;
      const sched_trace *t = sched_get_trace(s);
      sched *again = sched_new(f, 0);
      CHECK_MSG(sched_replay_with(again, t, SCHED_REPLAY_EXACT, false, &st), "%s: %s", spec,
                st.msg);
      CHECK(ir_func_equal(sched_func(again), sched_func(s)));
      sched_free(again);
      for (int m = 0; m < SEARCH_MUT_COUNT; m++)
        for (int tries = 0; tries < 4; tries++) {
          sched_trace *mt = search_mutate((search_mutator)m, t, &r);
          if (!mt) break;
          sched *e = sched_new(f, 0), *p = sched_new(f, 0);
          dg_status se, sr;
          bool oke = sched_replay_with(e, mt, SCHED_REPLAY_EXACT, true, &se);
          bool okr = sched_replay_with(p, mt, SCHED_REPLAY_REPAIR, true, &sr);
          CHECK_MSG(oke == okr, "%s %s: exact %s, repair %s", spec,
                    search_mutator_name((search_mutator)m), oke ? "ok" : se.msg,
                    okr ? "ok" : sr.msg);
          if (oke) CHECK(ir_func_equal(sched_func(e), sched_func(p)));
          mutants += oke;
          sched_free(e);
          sched_free(p);
          sched_trace_free(mt);
        }
      sched_free(s);
    }
    search_space_free(&sp);
    ir_func_free(f);
  }
  CHECK_MSG(samples >= 20 && mutants >= 100, "%d samples, %d mutants", samples, mutants);
}

/* ---- TSEL: UTF-8 ----------------------------------------------------------------- */

/* `dragon tsel check|lower FILE` on text: exit 1 and exactly the message. */
static bool tsel_refuses(const char *sub, const char *text, const char *where_msg) {
  const char *path = write_tmp("bad.tsel", text);
  if (!path) return false;
  char args[700], line[1200];
  snprintf(args, sizeof args, "tsel %s %s", sub, path);
  snprintf(line, sizeof line, "dragon tsel %s: %s:%s\n", sub, path, where_msg);
  char *out = NULL;
  int rc = dg_test_run_dragon(args, NULL, &out);
  bool ok = rc == 1 && out && strcmp(out, line) == 0;
  if (!ok)
    fprintf(stderr, "  tsel %s: rc %d, output '%s', wanted '%s'\n", sub, rc, out ? out : "", line);
  free(out);
  return ok;
}

#define TSEL_HEAD "tsel 1 kernel GMM/0\nt1 block \"Z\"\n"

DG_TEST(replay_exact_tsel_invalid_utf8) {
  static const struct {
    const char *text, *msg; /* msg: "line:col: message" */
  } cases[] = {
      /* a raw byte that starts no sequence, in a string */
      {TSEL_HEAD "t2 annotate t1 \"my_key\" \"a\xff" "b\"\n",
       "3:27: byte 0xff is not valid UTF-8 (TSEL text is UTF-8)"},
      /* a lead byte cut short */
      {TSEL_HEAD "t2 annotate t1 \"my_key\" \"\xc3(\"\n",
       "3:26: byte 0xc3 is not valid UTF-8 (TSEL text is UTF-8)"},
      /* an overlong '/' and an encoded surrogate */
      {TSEL_HEAD "t2 annotate t1 \"my_key\" \"\xc0\xaf\"\n",
       "3:26: byte 0xc0 is not valid UTF-8 (TSEL text is UTF-8)"},
      {TSEL_HEAD "t2 annotate t1 \"my_key\" \"\xed\xa0\x80\"\n",
       "3:26: byte 0xed is not valid UTF-8 (TSEL text is UTF-8)"},
      /* escapes that decode to an invalid sequence */
      {TSEL_HEAD "t2 annotate t1 \"my_key\" \"ab\\xc3x\"\n",
       "3:28: \\xc3 makes the string invalid UTF-8 (strings are UTF-8 text)"},
      {TSEL_HEAD "t2 annotate t1 \"my_key\" \"\\n\\xe2\\x82\"\n",
       "3:28: \\xe2 makes the string invalid UTF-8 (strings are UTF-8 text)"},
      /* anywhere in the text: a comment */
      {TSEL_HEAD "# caf\xe9\n", "3:6: byte 0xe9 is not valid UTF-8 (TSEL text is UTF-8)"},
  };
  for (size_t i = 0; i < DG_ARRAY_LEN(cases); i++) {
    CHECK_MSG(tsel_refuses("check", cases[i].text, cases[i].msg), "case %zu", i);
    CHECK_MSG(tsel_refuses("lower", cases[i].text, cases[i].msg), "case %zu", i);
    dg_status st;
    tsel_graph *g = tsel_parse(cases[i].text, NULL, &st);
    CHECK(g == NULL);
    CHECK_STREQ(st.msg, cases[i].msg);
  }
}

DG_TEST(replay_exact_tsel_utf8_lowers_to_loadable_json) {
  /* UTF-8 as it is and through escapes: checked, lowered, loaded, replayed */
  const char *text = TSEL_HEAD "t2 annotate t1 \"my_key\" \"\xc3\xa9\\xc3\\xa9\xe2\x82\xac\"\n";
  dg_status st;
  tsel_graph *g = tsel_parse(text, NULL, &st);
  CHECK_MSG(g, "%s", st.msg);
  CHECK_MSG(tsel_check(g, NULL, TSEL_TARGET_CUDA, &st), "%s", st.msg);
  sched_trace *t = tsel_lower(g, &st);
  CHECK_MSG(t, "%s", st.msg);
  char *json = sched_trace_to_json(t);
  CHECK(strstr(json, "\"\\\"\xc3\xa9\xc3\xa9\xe2\x82\xac\\\"\"") != NULL);
  char *rec = NULL;
  CHECK_MSG(replay_json("GMM/0", json, SCHED_REPLAY_EXACT, &rec, NULL, &st), "%s", st.msg);
  CHECK_STREQ(rec, json);
  free(rec);
  free(json);
  sched_trace_free(t);
  /* a graph whose string is not UTF-8 however it was made: the checker
   * refuses it at the string */
  g->edits[1].args[2].s = "a\xff";
  CHECK(!tsel_check(g, NULL, TSEL_TARGET_CUDA, &st));
  CHECK_STREQ(st.msg, "3:25: t2 annotate: the string is not valid UTF-8 (byte 0xff at offset 1)");
  CHECK(tsel_lower(g, &st) == NULL);
  tsel_graph_free(g);
}
