/* test_train.c: supervised fine-tuning (src/train/): segmentation of
 * targets, the token layout of an example, shards (round trip, corrupt and
 * truncated files), examples-file errors, the training config, zero weight
 * on the prompt, a tiny model overfitting real kernel texts, exact resume,
 * bad inputs that must leave the run directory alone, and the CLI end to
 * end (train, sample, tokenizer).
 *
 * B batch, T time.
 */
#include <jansson.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "dragon/ir.h"
#include "dragon/train.h"
#include "dragon/wl.h"
#include "test.h"

/* ---- fixtures ------------------------------------------------------------- */

/* A ring of paths: each test uses far fewer than there are slots. */
static const char *tmp_path(const char *name) {
  static char buf[64][512];
  static int k;
  char *p = buf[k++ % 64];
  snprintf(p, 512, "%s/train_%s", dg_test_tmpdir(), name);
  return p;
}

static bool write_text(const char *path, const char *text) {
  dg_status st;
  return dg_write_file_atomic(path, text, strlen(text), &st);
}

static char *kernel_text(const char *spec) {
  dg_status st;
  dg_func *f = wl_build(spec, &st);
  DG_ASSERT(f);
  char *s = ir_print(f);
  ir_func_free(f);
  return s;
}

static const char *specs[] = {"GMM/0", "gemv:n=64,k=32", "reduce_sum:m=16,n=32"};

/* A short TSEL-like target per kernel: header, edits, why, expect. */
static char *target_text(int i) {
  dg_str s;
  dg_str_init(&s);
  dg_str_printf(&s, "tsel 1 kernel %s\n", specs[i]);
  dg_str_printf(&s, "t1 block \"%s\"\n", i == 0 ? "Z" : i == 1 ? "C" : "B");
  dg_str_printf(&s, "t2 loops t1 x%d\n", i == 0 ? 4 : 2);
  dg_str_printf(&s, "t3 tile t2.0 [1 %d %d] max=64\n", 2 << i, 16 >> i);
  dg_str_printf(&s, "why t3: tile of %d\n", 8 * (i + 1));
  dg_str_printf(&s, "expect p1: %d.5x over the unscheduled kernel\n", i + 2);
  return dg_str_take(&s);
}

/* Writes the examples file of the three kernels; returns its path. */
static const char *write_examples(const char *name) {
  dg_str out;
  dg_str_init(&out);
  for (int i = 0; i < (int)DG_ARRAY_LEN(specs); i++) {
    char *k = kernel_text(specs[i]), *t = target_text(i);
    /* JSON-escape by hand: kernel text and TSEL hold quotes and newlines */
    dg_str_printf(&out, "{\"task\": \"t%d\", \"kind\": \"construct\", \"workload\": \"%s\", \"prompt\": \"", i,
                  specs[i]);
    for (const char *p = k; *p; p++) {
      if (*p == '"' || *p == '\\') dg_str_putc(&out, '\\'), dg_str_putc(&out, *p);
      else if (*p == '\n') dg_str_puts(&out, "\\n");
      else dg_str_putc(&out, *p);
    }
    dg_str_puts(&out, "\", \"target\": \"");
    for (const char *p = t; *p; p++) {
      if (*p == '"' || *p == '\\') dg_str_putc(&out, '\\'), dg_str_putc(&out, *p);
      else if (*p == '\n') dg_str_puts(&out, "\\n");
      else dg_str_putc(&out, *p);
    }
    dg_str_puts(&out, "\", \"weights_by_segment\": {\"edit\": 1.0, \"why\": 0.2}, \"source_records\": []}\n");
    free(k);
    free(t);
  }
  const char *path = tmp_path(name);
  bool ok = write_text(path, out.s);
  DG_ASSERT(ok);
  dg_str_free(&out);
  return path;
}

/* A model small enough to train in seconds on the CPU. */
static const char *small_cfg =
    "base = tiny\n"
    "d_model = 32\n"
    "n_heads = 4\n"
    "n_kv_heads = 2\n"
    "head_dim = 8\n"
    "ffn_hidden = 64\n"
    "max_seq_len = 256\n"
    "seq_len = 256\n"
    "batch = 3\n"
    "lr = 0.01\n"
    "lr_min = 0.005\n"
    "warmup_steps = 10\n"
    "steps = 80\n"
    "seed = 3\n";
/* No validation set, checkpoints only at the end. */
static const char *quiet_cadence = "val_fraction = 0\neval_every = 0\nckpt_every = 0\n";

/* small_cfg with the cadence keys given (NULL: quiet_cadence). */
static const char *write_cfg(const char *name, const char *cadence) {
  const char *path = tmp_path(name);
  char buf[2048];
  snprintf(buf, sizeof buf, "%s%s", small_cfg, cadence ? cadence : quiet_cadence);
  bool ok = write_text(path, buf);
  DG_ASSERT(ok);
  return path;
}

static char *slurp(const char *path, size_t *len) {
  dg_status st;
  return dg_read_file(path, len, &st);
}

/* ---- segments and layout ---------------------------------------------------- */

DG_TEST(train_segments_by_line) {
  CHECK_EQ(train_line_segment("t12 split t3 [_ 4]", 18), TRAIN_SEG_EDIT);
  CHECK_EQ(train_line_segment("why t1 t2: tile", 15), TRAIN_SEG_WHY);
  CHECK_EQ(train_line_segment("expect p1: 3x", 13), TRAIN_SEG_EXPECT);
  CHECK_EQ(train_line_segment("tsel 1 kernel GMM/0", 19), TRAIN_SEG_EDIT);
  CHECK_EQ(train_line_segment("# comment", 9), TRAIN_SEG_EDIT);
  CHECK_EQ(train_line_segment("whyever", 7), TRAIN_SEG_EDIT);
  CHECK_EQ(train_line_segment("why", 3), TRAIN_SEG_EDIT);
  const char *t = "tsel 1 kernel x\nwhy t1: a\nexpect p1: b\nt1 block \"C\"";
  size_t n = strlen(t);
  uint8_t seg[64];
  train_text_segments(t, n, seg);
  const char *want = "EEEEEEEEEEEEEEEEWWWWWWWWWWXXXXXXXXXXXXXEEEEEEEEEEEE";
  CHECK_EQ(strlen(want), n);
  for (size_t i = 0; i < n; i++) {
    int w = want[i] == 'E' ? TRAIN_SEG_EDIT : want[i] == 'W' ? TRAIN_SEG_WHY : TRAIN_SEG_EXPECT;
    CHECK_MSG(seg[i] == w, "byte %zu ('%c'): segment %d, want %d", i, t[i], seg[i], w);
  }
  CHECK_STREQ(train_seg_name(TRAIN_SEG_EXPECT), "expect");
  CHECK_EQ(train_seg_from_name("why"), TRAIN_SEG_WHY);
  CHECK_EQ(train_seg_from_name("nope"), -1);
}

static tok_tokenizer *small_tokenizer(void) {
  dg_str c;
  dg_str_init(&c);
  for (int i = 0; i < 3; i++) {
    char *k = kernel_text(specs[i]), *t = target_text(i);
    dg_str_puts(&c, k);
    dg_str_puts(&c, t);
    free(k);
    free(t);
  }
  dg_status st;
  tok_tokenizer *tok = tok_train(c.s, c.len, 600, NULL, &st);
  dg_str_free(&c);
  return tok;
}

DG_TEST(train_example_layout) {
  tok_tokenizer *tok = small_tokenizer();
  CHECK(tok);
  dg_status st;
  dg_status_ok(&st);
  train_shard s = {0};
  const char *prompt = "kernel main(A: f32[4]):\n", *prior = "tsel 1 kernel old\nt1 block \"A\"\n";
  const char *target = "tsel 1 kernel x\nt1 block \"A\"\nwhy t1: the block\nexpect p1: 2x\n";
  CHECK(train_example_tokenize(tok, prompt, NULL, target, &s, &st));
  CHECK(train_example_tokenize(tok, prompt, prior, target, &s, &st));
  CHECK_EQ(s.n_examples, 2);
  int32_t kid = tok_special(tok, TOK_KERNEL), gid = tok_special(tok, TOK_GRAPH),
          eid = tok_special(tok, TOK_END), pid = tok_special(tok, TOK_PRIOR);
  for (int e = 0; e < 2; e++) {
    const int32_t *x = s.tokens + s.offsets[e];
    const uint8_t *g = s.segs + s.offsets[e];
    int64_t n = s.offsets[e + 1] - s.offsets[e], at = -1, pr = -1;
    CHECK_EQ(x[0], kid);
    CHECK_EQ(x[n - 1], eid);
    CHECK_EQ(g[n - 1], TRAIN_SEG_EDIT);
    for (int64_t i = 0; i < n; i++) {
      if (x[i] == gid) at = i;
      if (x[i] == pid) pr = i;
    }
    CHECK(at > 0);
    CHECK(e == 0 ? pr < 0 : (pr > 0 && pr < at));
    for (int64_t i = 0; i <= at; i++) CHECK_EQ(g[i], TRAIN_SEG_PROMPT);
    /* the target decodes back, and its why/expect tokens are marked */
    dg_str d;
    dg_str_init(&d);
    CHECK(tok_decode(tok, x + at + 1, (size_t)(n - at - 2), &d, &st));
    CHECK_STREQ(d.s, target);
    dg_str_free(&d);
    int nwhy = 0, nexp = 0;
    for (int64_t i = at + 1; i < n; i++) nwhy += g[i] == TRAIN_SEG_WHY, nexp += g[i] == TRAIN_SEG_EXPECT;
    CHECK(nwhy >= 3 && nexp >= 3);
  }
  train_shard_free(&s);
  tok_free(tok);
}

/* The plan first (train_config.plan_first): the expect lines move to right
 * after the header, in order, every other line kept in its place; the
 * examples loaded so tokenize the moved text, the prior as it was; the
 * key reads, prints and is bounded; a model's config is found beside it
 * (a model directory's train_config.txt before a run's config.txt), a bad
 * one is named, and a copy goes where the model is written. */
DG_TEST(train_plan_first_layout) {
  char *t = train_plan_first("tsel 1 kernel x\nt1 block \"A\"\nwhy t1: the block\nexpect p1: 2x\nexpect p2: 3x");
  CHECK_STREQ(t, "tsel 1 kernel x\nexpect p1: 2x\nexpect p2: 3x\nt1 block \"A\"\nwhy t1: the block\n");
  free(t);
  t = train_plan_first("tsel 1 kernel x\nt1 block \"A\"\n");
  CHECK_STREQ(t, "tsel 1 kernel x\nt1 block \"A\"\n");
  free(t);
  t = train_plan_first("");
  CHECK_STREQ(t, "");
  free(t);
  /* the examples, loaded with the plan first */
  tok_tokenizer *tok = small_tokenizer();
  CHECK(tok);
  const char *p = tmp_path("plan.jsonl");
  CHECK(write_text(p, "{\"prompt\": \"k\", \"prior\": \"tsel 1 kernel x\\nt1 block \\\"A\\\"\\nexpect p1: 1x\\n\", "
                      "\"target\": \"tsel 1 kernel x\\nt1 block \\\"A\\\"\\nexpect p1: 2x\\n\", \"kind\": \"refine\"}\n"));
  dg_status st;
  for (int plan = 0; plan < 2; plan++) {
    train_shard s = {0};
    CHECK(train_examples_load(p, tok, plan, &s, &st));
    CHECK_EQ(s.n_examples, 1);
    dg_str d;
    dg_str_init(&d);
    CHECK(tok_decode(tok, s.tokens, (size_t)s.offsets[1], &d, &st));
    const char *want = plan ? "<|graph|>tsel 1 kernel x\nexpect p1: 2x\nt1 block \"A\"\n"
                            : "<|graph|>tsel 1 kernel x\nt1 block \"A\"\nexpect p1: 2x\n";
    CHECK_MSG(strstr(d.s, want) && strstr(d.s, "<|prior|>tsel 1 kernel x\nt1 block \"A\"\nexpect p1: 1x\n"), "%s", d.s);
    dg_str_free(&d);
    train_shard_free(&s);
  }
  tok_free(tok);
  /* the key */
  train_config c;
  CHECK(train_config_parse("plan_first = 1\n", "t", &c, &st));
  CHECK_EQ(c.plan_first, 1);
  dg_str out;
  dg_str_init(&out);
  train_config_print(&c, &out);
  CHECK(strstr(out.s, "plan_first = 1\n"));
  dg_str_free(&out);
  CHECK(!train_config_parse("plan_first = 2\n", "t", &c, &st));
  CHECK_ERR(st, "t:1: plan_first");
  CHECK(train_config_parse("steps = 5\n", "t", &c, &st));
  CHECK_EQ(c.plan_first, 0);
  /* beside a model */
  const char *dir = tmp_path("plan-model");
  CHECK(dg_mkdirs(dir, &st));
  char model[600], cfg[600], run_cfg[600], copy_dir[600], copied[700];
  snprintf(model, sizeof model, "%s/model.safetensors", dir);
  snprintf(cfg, sizeof cfg, "%s/" TRAIN_MODEL_CONFIG, dir);
  snprintf(run_cfg, sizeof run_cfg, "%s/config.txt", dir);
  bool pf = true;
  CHECK(train_model_plan_first(model, &pf, &st));
  CHECK(!pf);
  CHECK(write_text(run_cfg, "plan_first = 1\n"));
  CHECK(train_model_plan_first(model, &pf, &st));
  CHECK(pf);
  CHECK(write_text(cfg, "plan_first = 0\n"));
  CHECK(train_model_plan_first(model, &pf, &st));
  CHECK(!pf);
  CHECK(write_text(cfg, "plan_first = yes\n"));
  CHECK(!train_model_plan_first(model, &pf, &st));
  CHECK_ERR(st, TRAIN_MODEL_CONFIG ":1: plan_first");
  CHECK(write_text(cfg, "plan_first = 1\nsteps = 9\n"));
  snprintf(copy_dir, sizeof copy_dir, "%s/out", dir);
  CHECK(dg_mkdirs(copy_dir, &st));
  CHECK(train_model_config_copy(model, copy_dir, &st));
  snprintf(copied, sizeof copied, "%s/model.safetensors", copy_dir);
  CHECK(train_model_plan_first(copied, &pf, &st));
  CHECK(pf);
  CHECK(write_text(cfg, "plan_first = 3\n"));
  CHECK(!train_model_config_copy(model, copy_dir, &st));
  CHECK_ERR(st, "plan_first");
  CHECK(train_model_plan_first(copied, &pf, &st)); /* the earlier copy stays */
  CHECK(pf);
}

/* ---- shards ------------------------------------------------------------------ */

static void two_example_shard(train_shard *s) {
  memset(s, 0, sizeof *s);
  int32_t a[5] = {1, 2, 3, 4, 5}, b[3] = {7, 8, 9};
  uint8_t sa[5] = {0, 0, 1, 3, 1}, sb[3] = {0, 2, 1};
  train_shard_append(s, a, sa, 5);
  train_shard_append(s, b, sb, 3);
  s->vocab_size = 12;
}

DG_TEST(train_shard_round_trip) {
  train_shard s, r;
  two_example_shard(&s);
  dg_status st;
  dg_status_ok(&st);
  const char *p = tmp_path("rt.shard");
  CHECK(train_shard_save(&s, p, &st));
  CHECK(train_shard_sniff(p));
  CHECK(train_shard_load(&r, p, &st));
  CHECK_EQ(r.n_examples, 2);
  CHECK_EQ(r.n_tokens, 8);
  CHECK_EQ(r.vocab_size, 12);
  CHECK(memcmp(r.offsets, s.offsets, 3 * sizeof(int64_t)) == 0);
  CHECK(memcmp(r.tokens, s.tokens, 8 * sizeof(int32_t)) == 0);
  CHECK(memcmp(r.segs, s.segs, 8) == 0);
  struct stat sb;
  CHECK(stat(p, &sb) == 0);
  CHECK_EQ(sb.st_size, 1024 + 3 * 8 + 8 * 4 + 8);
  train_shard_free(&r);
  train_shard_free(&s);
}

DG_TEST(train_shard_rejects_corrupt) {
  train_shard s, r;
  two_example_shard(&s);
  dg_status st;
  const char *good = tmp_path("good.shard"), *bad = tmp_path("bad.shard");
  CHECK(train_shard_save(&s, good, &st));
  size_t n;
  char *bytes = slurp(good, &n);
  CHECK(bytes);
  nn_file_part part;
  /* cut points: empty, inside and at the end of the header, inside each array */
  size_t cuts[] = {0, 7, 1023, 1024, 1025, 1024 + 24, 1024 + 30, n / 2, n - 1};
  for (size_t i = 0; i < DG_ARRAY_LEN(cuts); i++) {
    part = (nn_file_part){bytes, cuts[i]};
    CHECK(nn_file_write_atomic(bad, &part, 1, &st));
    memset(&r, 0x5a, sizeof r);
    train_shard before = r;
    CHECK_MSG(!train_shard_load(&r, bad, &st), "cut at %zu accepted", cuts[i]);
    CHECK_ERR(st, bad);
    CHECK_ERR(st, "truncated");
    CHECK(memcmp(&before, &r, sizeof r) == 0); /* untouched on failure */
  }
  char *more = dg_malloc(n + 1);
  memcpy(more, bytes, n);
  more[n] = 0;
  part = (nn_file_part){more, n + 1};
  CHECK(nn_file_write_atomic(bad, &part, 1, &st));
  CHECK(!train_shard_load(&r, bad, &st));
  CHECK_ERR(st, "trailing data");
  free(more);
  struct {
    size_t at;
    const char *msg;
  } flips[] = {{0, "not a dragon token shard"}, {4, "version"}, {24, "header checksum"},
               {1024 + 24 + 5, "data checksum"}, {n - 2, "data checksum"}};
  for (size_t i = 0; i < DG_ARRAY_LEN(flips); i++) {
    bytes[flips[i].at] ^= 0x10;
    part = (nn_file_part){bytes, n};
    CHECK(nn_file_write_atomic(bad, &part, 1, &st));
    CHECK(!train_shard_load(&r, bad, &st));
    CHECK_ERR(st, flips[i].msg);
    bytes[flips[i].at] ^= 0x10;
  }
  free(bytes);
  /* well-formed files that lie: a token beyond the vocabulary, a 1-token example */
  s.vocab_size = 8;
  CHECK(train_shard_save(&s, bad, &st));
  CHECK(!train_shard_load(&r, bad, &st));
  CHECK_ERR(st, "outside the vocabulary of 8");
  s.vocab_size = 12;
  s.offsets[1] = 7;
  CHECK(train_shard_save(&s, bad, &st));
  CHECK(!train_shard_load(&r, bad, &st));
  CHECK_ERR(st, "example 1 has 1 tokens");
  CHECK(!train_shard_load(&r, tmp_path("missing.shard"), &st));
  CHECK_ERR(st, "missing.shard");
  train_shard_free(&s);
}

DG_TEST(train_examples_errors) {
  tok_tokenizer *tok = small_tokenizer();
  CHECK(tok);
  struct {
    const char *text, *msg;
  } cases[] = {
      {"{\"prompt\": \"a\", \"target\": \"b\"}\n{\"prompt\": \"a\"}\n", ":2: missing \"target\""},
      {"\n{\"prompt\": \"a\", \"target\": \"b\"\n", ":2:"},
      {"{\"prompt\": 3, \"target\": \"b\"}\n", ":1: \"prompt\" must be a string"},
      {"{\"prompt\": \"a\", \"target\": \"b\", \"kind\": \"refine\"}\n", "needs \"prior\""},
      {"{\"prompt\": \"a\", \"target\": \"b\", \"kind\": \"other\"}\n", "\"construct\" or \"refine\""},
      {"{\"prompt\": \"a\", \"target\": \"b\", \"weights_by_segment\": {\"bogus\": 1}}\n", "unknown segment"},
      {"{\"prompt\": \"a\", \"target\": \"b\", \"weights_by_segment\": {\"why\": -1}}\n", "must be a number >= 0"},
      {"[1, 2]\n", "must be a JSON object"},
      {"\n\n", "no examples"},
  };
  const char *p = tmp_path("bad.jsonl");
  for (size_t i = 0; i < DG_ARRAY_LEN(cases); i++) {
    CHECK(write_text(p, cases[i].text));
    train_shard s = {0};
    dg_status st;
    CHECK_MSG(!train_examples_load(p, tok, false, &s, &st), "case %zu accepted", i);
    CHECK_ERR(st, cases[i].msg);
    CHECK_ERR(st, p);
  }
  /* refine with a prior is fine, blank lines are skipped */
  CHECK(write_text(p, "\n{\"prompt\": \"a\", \"prior\": \"t1 x\", \"target\": \"b\", \"kind\": \"refine\"}\n"));
  train_shard s = {0};
  dg_status st;
  CHECK(train_examples_load(p, tok, false, &s, &st));
  CHECK_EQ(s.n_examples, 1);
  train_shard_free(&s);
  tok_free(tok);
}

/* ---- config ------------------------------------------------------------------ */

DG_TEST(train_config_parse_print) {
  train_config c, r;
  dg_status st;
  dg_status_ok(&st);
  CHECK(train_config_parse(small_cfg, "cfg", &c, &st));
  CHECK_EQ(c.model.d_model, 32);
  CHECK_EQ(c.model.n_layers, 2); /* from base = tiny */
  CHECK_EQ(c.batch, 3);
  CHECK_NEAR(c.lr, 0.01, 1e-9);
  CHECK_NEAR(c.seg_weights[TRAIN_SEG_WHY], 0.2, 1e-7); /* TSEL.md's defaults */
  CHECK_NEAR(c.seg_weights[TRAIN_SEG_EXPECT], 0.5, 1e-7);
  CHECK_NEAR(c.seg_weights[TRAIN_SEG_EDIT], 1.0, 0);
  CHECK_NEAR(c.seg_weights[TRAIN_SEG_PROMPT], 0.0, 0);
  dg_str s;
  dg_str_init(&s);
  train_config_print(&c, &s);
  CHECK(train_config_parse(s.s, "printed", &r, &st));
  CHECK(memcmp(&c, &r, sizeof c) == 0);
  dg_str_free(&s);
  /* only training keys: the model is the built-in tiny */
  CHECK(train_config_parse("steps = 5\nloss_weight_why = 0.7\n", "t", &c, &st));
  CHECK_EQ(c.steps, 5);
  CHECK_NEAR(c.seg_weights[TRAIN_SEG_WHY], 0.7, 1e-7);
  CHECK_EQ(c.model.d_model, 64);
  struct {
    const char *text, *msg;
  } bad[] = {
      {"steps = 5\n\nfoo = 1\n", "t:3: unknown key 'foo'"},
      {"lr = -1\n", "t:1: lr"},
      {"steps = 1\nsteps = 2\n", "t:2: steps: given twice"},
      {"base = tiny\nseq_len = 200\n", "seq_len = 200 exceeds the model's max_seq_len = 128"},
      {"batch = 0\n", "t:1: batch"},
      {"lr = 0.001\nlr_min = 0.01\n", "lr_min"},
      {"d_model = 32\n", "missing key"},
  };
  for (size_t i = 0; i < DG_ARRAY_LEN(bad); i++) {
    CHECK_MSG(!train_config_parse(bad[i].text, "t", &c, &st), "case %zu accepted", i);
    CHECK_ERR(st, bad[i].msg);
  }
  CHECK(train_config_load("tiny", &c, &st));
  CHECK(!train_config_load(tmp_path("nope.cfg"), &c, &st));
  CHECK_ERR(st, "nope.cfg");
}

/* ---- loss weights ------------------------------------------------------------ */

DG_TEST(train_prompt_weight_zero) {
  tok_tokenizer *tok = small_tokenizer();
  CHECK(tok);
  dg_status st;
  dg_status_ok(&st);
  train_shard s = {0};
  for (int i = 0; i < 2; i++) {
    char *k = kernel_text(specs[i + 1]), *t = target_text(i + 1);
    CHECK(train_example_tokenize(tok, k, NULL, t, &s, &st));
    free(k);
    free(t);
  }
  train_config c;
  CHECK(train_config_parse(small_cfg, "cfg", &c, &st));
  c.model.vocab_size = tok_vocab_size(tok);
  nn_model m;
  CHECK(nn_model_init(&m, &c.model, false, &st));
  nn_model_init_weights(&m, 5);
  train_batch b;
  train_batch_init(&b, 2, 256);
  int64_t idx[2] = {0, 1};
  train_batch_fill(&b, &s, idx, 2, c.seg_weights, tok_special(tok, TOK_PAD));
  CHECK(nn_model_reserve(&m, b.B, b.T, &st));
  CHECK(nn_batch_check(&m, b.inputs, b.targets, b.weights, b.B, b.T, &st));
  /* the weights are the segments' weights; padding and prompt weigh 0 */
  int nw[5] = {0};
  for (int i = 0; i < b.B * b.T; i++) {
    float w = b.weights[i];
    nw[w == 0 ? 0 : w == 1.0f ? 1 : w == 0.5f ? 2 : w == 0.2f ? 3 : 4]++;
  }
  CHECK(nw[0] > 200 && nw[1] > 20 && nw[2] > 5 && nw[3] > 5);
  CHECK_EQ(nw[4], 0);
  CHECK_EQ(b.n_real, (s.offsets[1] - 1) + (s.offsets[2] - s.offsets[1] - 1));
  float loss = nn_forward(&m, b.inputs, b.targets, b.weights, b.B, b.T);
  /* other targets for every weight-0 position: the loss does not move */
  int64_t first_weighted = -1;
  for (int i = 0; i < b.B * b.T; i++) {
    if (b.weights[i] == 0) b.targets[i] = (b.targets[i] + 17) % tok_vocab_size(tok);
    else if (first_weighted < 0) first_weighted = i;
  }
  float loss2 = nn_forward(&m, b.inputs, b.targets, b.weights, b.B, b.T);
  CHECK(loss == loss2);
  /* and it does move for a weighted one */
  b.targets[first_weighted] = (b.targets[first_weighted] + 1) % tok_vocab_size(tok);
  float loss3 = nn_forward(&m, b.inputs, b.targets, b.weights, b.B, b.T);
  CHECK(loss3 != loss2);
  train_batch_free(&b);
  nn_model_free(&m);
  train_shard_free(&s);
  tok_free(tok);
}

/* ---- training runs ------------------------------------------------------------ */

DG_TEST(train_overfit_kernels) {
  const char *ex = write_examples("overfit.jsonl"), *cfg = write_cfg("overfit.cfg", NULL);
  train_sft_args a = {ex, cfg, NULL, 600, tmp_path("overfit_run"), false, 0, 0, true};
  train_result r;
  dg_status st;
  dg_status_ok(&st);
  CHECK_MSG(train_sft_run(&a, &r, &st), "%s", st.msg);
  int64_t n = r.last_step - r.first_step;
  CHECK_EQ(n, 80);
  CHECK_EQ(r.n_train, 3);
  CHECK(r.losses[0] > 3.0f); /* about ln V at the start */
  float best = r.losses[n - 1];
  CHECK_MSG(best < 0.05f, "weighted loss %g after %lld steps", (double)best, (long long)n);
  train_result_free(&r);
  /* the run directory holds what docs/training.md lists */
  const char *files[] = {"config.txt", "tokenizer.bin", "data.shard", "latest", "model_80.bin",
                         "state_80.bin", "log.jsonl"};
  for (size_t i = 0; i < DG_ARRAY_LEN(files); i++) {
    char p[600];
    snprintf(p, sizeof p, "%s/%s", a.out_dir, files[i]);
    CHECK_MSG(access(p, R_OK) == 0, "missing %s", p);
  }
}

/* A new run started from a trained checkpoint (--init: fine-tuning after a
 * first stage) starts where that model ended, far below a fresh start; a
 * checkpoint of another model is refused with both models named, before
 * the run directory is written. */
DG_TEST(train_init_from_checkpoint) {
  const char *ex = write_examples("init.jsonl"), *cfg = write_cfg("init.cfg", NULL);
  train_sft_args a = {ex, cfg, NULL, 600, tmp_path("init_first"), false, 40, 0, true};
  train_result first, second;
  dg_status st;
  dg_status_ok(&st);
  CHECK_MSG(train_sft_run(&a, &first, &st), "%s", st.msg);
  float fresh = first.losses[0], trained = first.losses[39];
  CHECK(trained < fresh / 2);
  char model[700], tok[700];
  snprintf(model, sizeof model, "%s/model_40.bin", a.out_dir);
  snprintf(tok, sizeof tok, "%s/tokenizer.bin", a.out_dir);
  train_sft_args b = a;
  b.out_dir = tmp_path("init_second");
  b.tokenizer = tok;
  b.init = model;
  b.steps = 2;
  CHECK_MSG(train_sft_run(&b, &second, &st), "%s", st.msg);
  CHECK_MSG(second.losses[0] < fresh / 2 && second.losses[0] < 2 * trained + 0.5f,
            "first loss %g from the checkpoint (it ended at %g; fresh %g)", (double)second.losses[0],
            (double)trained, (double)fresh);
  train_result_free(&first);
  train_result_free(&second);
  /* another model's checkpoint */
  const char *wide = tmp_path("init_wide.cfg");
  CHECK(write_text(wide, "base = tiny\nd_model = 32\nn_heads = 4\nn_kv_heads = 2\nhead_dim = 8\n"
                         "ffn_hidden = 96\nmax_seq_len = 256\nseq_len = 256\nbatch = 3\nsteps = 2\n"));
  train_sft_args c = b;
  c.config = wide;
  c.out_dir = tmp_path("init_wide");
  CHECK(!train_sft_run(&c, &second, &st));
  CHECK_ERR(st, "is not the run's");
  char p[800];
  snprintf(p, sizeof p, "%s/latest", c.out_dir);
  CHECK(access(p, F_OK) != 0);
}

DG_TEST(train_resume_exact) {
  const char *ex = write_examples("resume.jsonl");
  const char *cfg = write_cfg("resume.cfg", NULL);
  train_sft_args a = {ex, cfg, NULL, 600, tmp_path("resume_full"), false, 7, 0, true};
  train_result full, part, rest;
  dg_status st;
  dg_status_ok(&st);
  CHECK_MSG(train_sft_run(&a, &full, &st), "%s", st.msg);
  a.out_dir = tmp_path("resume_split");
  a.stop_after = 3;
  CHECK_MSG(train_sft_run(&a, &part, &st), "%s", st.msg);
  CHECK_EQ(part.last_step, 3);
  a.resume = true;
  a.stop_after = 0;
  a.data = a.config = NULL; /* a resumed run needs only its directory */
  CHECK_MSG(train_sft_run(&a, &rest, &st), "%s", st.msg);
  CHECK_EQ(rest.first_step, 3);
  CHECK_EQ(rest.last_step, 7);
  for (int i = 0; i < 3; i++) CHECK(part.losses[i] == full.losses[i]);
  for (int i = 0; i < 4; i++)
    CHECK_MSG(rest.losses[i] == full.losses[3 + i], "step %d: %.9g after resume, %.9g without", 3 + i,
              (double)rest.losses[i], (double)full.losses[3 + i]);
  CHECK(full.losses[6] < full.losses[0]);
  train_result_free(&full);
  train_result_free(&part);
  train_result_free(&rest);
}

/* The loop reports a step only after it has queued the next, and finishes
 * the steps that validate or write a checkpoint first: log.jsonl still
 * holds every step once, in order, with its loss as returned, a
 * validation loss exactly on the eval steps and the last, and the last
 * checkpoint. */
DG_TEST(train_log_every_step_once) {
  const char *ex = write_examples("order.jsonl");
  const char *cfg = write_cfg("order.cfg", "val_fraction = 0.4\neval_every = 3\nckpt_every = 4\n");
  const char *dir = tmp_path("order_run");
  train_sft_args a = {ex, cfg, NULL, 600, dir, false, 7, 0, true};
  train_result r;
  dg_status st;
  CHECK_MSG(train_sft_run(&a, &r, &st), "%s", st.msg);
  CHECK(r.n_val > 0 && r.n_train > 0);
  char path[700];
  snprintf(path, sizeof path, "%s/log.jsonl", dir);
  size_t n = 0;
  char *log = slurp(path, &n), *save = NULL;
  CHECK(log != NULL);
  int line = 0;
  for (char *l = log ? strtok_r(log, "\n", &save) : NULL; l; l = strtok_r(NULL, "\n", &save)) {
    long long step = -1;
    double loss = 0;
    CHECK_MSG(sscanf(l, "{\"step\": %lld, \"loss\": %lf", &step, &loss) == 2, "line %d: %s",
              line + 1, l);
    CHECK_MSG(step == line + 1, "line %d holds step %lld", line + 1, step);
    if (line < 7)
      CHECK_MSG(fabs(loss - r.losses[line]) <= 1e-5 * fabs(loss), "step %lld: %g logged, %g run",
                step, loss, (double)r.losses[line]);
    bool val = strstr(l, "\"val_loss\"") != NULL;
    CHECK_MSG(val == (step % 3 == 0 || step == 7), "step %lld: val_loss %s", step,
              val ? "present" : "missing");
    line++;
  }
  CHECK_EQ(line, 7);
  /* the last checkpoint replaced the one of step 4 */
  for (int step = 1; step <= 8; step++) {
    snprintf(path, sizeof path, "%s/model_%d.bin", dir, step);
    bool there = access(path, F_OK) == 0;
    CHECK_MSG(there == (step == 7), "model_%d.bin %s", step, there ? "left" : "missing");
  }
  free(log);
  train_result_free(&r);
}

static bool same_file(const char *a, const char *b) {
  size_t na, nb;
  char *x = slurp(a, &na), *y = slurp(b, &nb);
  bool same = x && y && na == nb && memcmp(x, y, na) == 0;
  free(x);
  free(y);
  return same;
}

static bool copy_file(const char *from, const char *to, size_t cut) {
  size_t n;
  char *x = slurp(from, &n);
  if (!x) return false;
  dg_status st;
  bool ok = dg_write_file_atomic(to, x, cut && cut < n ? cut : n, &st);
  free(x);
  return ok;
}

DG_TEST(train_bad_inputs_leave_run_alone) {
  const char *ex = write_examples("bad.jsonl"), *cfg = write_cfg("bad.cfg", NULL);
  const char *dir = tmp_path("bad_run");
  train_sft_args a = {ex, cfg, NULL, 600, dir, false, 2, 0, true};
  train_result r;
  dg_status st;
  CHECK_MSG(train_sft_run(&a, &r, &st), "%s", st.msg);
  train_result_free(&r);
  char model[600], keep[700], log[600], logkeep[700], tokp[600], tokkeep[600];
  snprintf(model, sizeof model, "%s/model_2.bin", dir);
  snprintf(log, sizeof log, "%s/log.jsonl", dir);
  snprintf(tokp, sizeof tokp, "%s/tokenizer.bin", dir);
  snprintf(keep, sizeof keep, "%s.keep", model);
  snprintf(logkeep, sizeof logkeep, "%s.keep", log);
  snprintf(tokkeep, sizeof tokkeep, "%s", tmp_path("tok.keep"));
  CHECK(copy_file(log, logkeep, 0));
  CHECK(copy_file(tokp, tokkeep, 0));

  /* a new run into a run directory is refused */
  CHECK(!train_sft_run(&a, &r, &st));
  CHECK_ERR(st, "already holds a training run");
  train_result_free(&r);

  /* a corrupt, then truncated checkpoint: resume fails, nothing is written */
  CHECK(copy_file(model, keep, 0));
  size_t n;
  char *bytes = slurp(model, &n);
  CHECK(bytes);
  bytes[n - 5] ^= 1;
  CHECK(dg_write_file_atomic(model, bytes, n, &st));
  a.resume = true;
  a.steps = 4;
  CHECK(!train_sft_run(&a, &r, &st));
  CHECK_ERR(st, model);
  CHECK_ERR(st, "checksum");
  train_result_free(&r);
  CHECK(dg_write_file_atomic(model, bytes, n / 2, &st));
  CHECK(!train_sft_run(&a, &r, &st));
  CHECK_ERR(st, "truncated");
  train_result_free(&r);
  free(bytes);
  CHECK(same_file(log, logkeep));
  char *latest_path = dg_malloc(600);
  snprintf(latest_path, 600, "%s/latest", dir);
  char *latest = slurp(latest_path, &n);
  CHECK_STREQ(latest, "2\n");
  free(latest);
  free(latest_path);
  CHECK(copy_file(keep, model, 0));

  /* a truncated tokenizer */
  CHECK(copy_file(tokkeep, tokp, 100));
  CHECK(!train_sft_run(&a, &r, &st));
  CHECK_ERR(st, "tokenizer.bin");
  train_result_free(&r);
  CHECK(copy_file(tokkeep, tokp, 0));
  CHECK(same_file(log, logkeep));

  /* with everything restored the resume works */
  CHECK_MSG(train_sft_run(&a, &r, &st), "%s", st.msg);
  CHECK_EQ(r.first_step, 2);
  CHECK_EQ(r.last_step, 4);
  train_result_free(&r);

  /* new runs with bad inputs create nothing */
  const char *fresh = tmp_path("bad_fresh");
  const char *huge = tmp_path("huge.cfg");
  CHECK(write_text(huge, "base = 88m\nd_model = 65536\nn_layers = 1024\nffn_hidden = 262144\n"));
  train_sft_args b = {ex, huge, NULL, 600, fresh, false, 2, 0, true};
  CHECK(!train_sft_run(&b, &r, &st));
  CHECK_ERR(st, "GiB");
  train_result_free(&r);
  b.config = cfg;
  b.data = tmp_path("short.shard");
  char shard[600];
  snprintf(shard, sizeof shard, "%s/data.shard", dir);
  CHECK(copy_file(shard, b.data, 1500));
  b.tokenizer = tokp;
  CHECK(!train_sft_run(&b, &r, &st));
  CHECK_ERR(st, "short.shard");
  CHECK_ERR(st, "truncated");
  train_result_free(&r);
  b.data = shard; /* the whole shard with its tokenizer trains */
  b.tokenizer = NULL;
  CHECK(!train_sft_run(&b, &r, &st));
  CHECK_ERR(st, "needs the --tokenizer");
  train_result_free(&r);
  b.data = tmp_path("no_such.jsonl");
  CHECK(!train_sft_run(&b, &r, &st));
  CHECK_ERR(st, "no_such.jsonl");
  train_result_free(&r);
  CHECK(access(fresh, F_OK) != 0);
  /* seq_len too small for every example */
  b.data = ex;
  b.config = tmp_path("short.cfg");
  CHECK(write_text(b.config, "base = tiny\nseq_len = 20\n"));
  CHECK(!train_sft_run(&b, &r, &st));
  CHECK_ERR(st, "no example fits seq_len = 20");
  train_result_free(&r);
  CHECK(access(fresh, F_OK) != 0);
}

/* ---- the CLI ------------------------------------------------------------------ */

DG_TEST(train_cli_end_to_end) {
  const char *ex = write_examples("cli.jsonl"), *cfg = write_cfg("cli.cfg", NULL);
  const char *dir = tmp_path("cli_run"), *prompt = tmp_path("cli_prompt.txt");
  char *k = kernel_text("GMM/0");
  CHECK(write_text(prompt, k));
  free(k);
  char args[2048], *out = NULL;
  snprintf(args, sizeof args, "train sft --data %s --config %s --out %s --steps 3", ex, cfg, dir);
  int rc = dg_test_run_dragon(args, NULL, &out);
  CHECK_MSG(rc == 0, "rc %d: %s", rc, out);
  CHECK(strstr(out, "step 3/3 | loss "));
  CHECK(strstr(out, "tok/s"));
  CHECK(strstr(out, "steps 0..3 of"));
  free(out);
  snprintf(args, sizeof args, "train sft --resume --out %s --steps 5 --quiet", dir);
  rc = dg_test_run_dragon(args, NULL, &out);
  CHECK_MSG(rc == 0, "rc %d: %s", rc, out);
  CHECK(strstr(out, "steps 3..5 of"));
  free(out);
  snprintf(args, sizeof args,
           "sample-model --ckpt %s --prompt %s --n 2 --max-tokens 6 --temperature 0.8 --top-k 20 --top-p 0.9 --seed 4",
           dir, prompt);
  rc = dg_test_run_dragon(args, NULL, &out);
  CHECK_MSG(rc == 0, "rc %d: %s", rc, out);
  CHECK(strstr(out, "# sample 1/2\n"));
  CHECK(strstr(out, "# sample 2/2\n"));
  char *again = NULL;
  rc = dg_test_run_dragon(args, NULL, &again);
  CHECK_STREQ(again, out); /* seeded */
  free(again);
  free(out);
  /* a model file works too, with its tokenizer found beside it */
  snprintf(args, sizeof args, "sample-model --ckpt %s/model_5.bin --prompt %s --max-tokens 4 --temperature 0", dir,
           prompt);
  rc = dg_test_run_dragon(args, NULL, &out);
  CHECK_MSG(rc == 0, "rc %d: %s", rc, out);
  free(out);
  /* errors: usage, missing checkpoint, bad flags */
  CHECK_EQ(dg_test_run_dragon("train sft --data x", NULL, &out), 2);
  CHECK(strstr(out, "--out is required"));
  free(out);
  snprintf(args, sizeof args, "sample-model --ckpt %s/nothing --prompt %s", dir, prompt);
  CHECK_EQ(dg_test_run_dragon(args, NULL, &out), 1);
  CHECK(strstr(out, "nothing"));
  free(out);
  snprintf(args, sizeof args, "sample-model --ckpt %s --prompt %s --top-p 0", dir, prompt);
  CHECK_EQ(dg_test_run_dragon(args, NULL, &out), 2);
  free(out);
  const char *helps[] = {"train sft --help", "sample-model --help", "tokenizer train --help",
                         "tokenizer encode --help", "tokenizer decode --help", "train --help"};
  for (size_t i = 0; i < DG_ARRAY_LEN(helps); i++) {
    CHECK_EQ(dg_test_run_dragon(helps[i], NULL, &out), 0);
    free(out);
  }
  CHECK_EQ(dg_test_run_dragon("train sft --help", NULL, &out), 0);
  CHECK(strstr(out, "--config S"));
  CHECK(strstr(out, "(default tiny)"));
  free(out);
}

DG_TEST(train_cli_tokenizer) {
  const char *corpus = tmp_path("corpus.txt"), *tokp = tmp_path("cli_tok.bin");
  char *k = kernel_text("GMM/0");
  CHECK(write_text(corpus, k));
  char args[1024], *out = NULL;
  snprintf(args, sizeof args, "tokenizer train --corpus %s --vocab 300 --out %s", corpus, tokp);
  int rc = dg_test_run_dragon(args, NULL, &out);
  CHECK_MSG(rc == 0, "rc %d: %s", rc, out);
  CHECK(strstr(out, "tokens ("));
  free(out);
  snprintf(args, sizeof args, "tokenizer encode --tokenizer %s", tokp);
  CHECK_EQ(dg_test_run_dragon(args, k, &out), 0);
  char *ids = out;
  CHECK(strlen(ids) > 10);
  snprintf(args, sizeof args, "tokenizer decode --tokenizer %s", tokp);
  CHECK_EQ(dg_test_run_dragon(args, ids, &out), 0);
  CHECK_STREQ(out, k);
  free(out);
  free(ids);
  CHECK_EQ(dg_test_run_dragon(args, "1 2 x3", &out), 1);
  CHECK(strstr(out, "id 3"));
  free(out);
  CHECK_EQ(dg_test_run_dragon(args, "99999", &out), 1);
  free(out);
  snprintf(args, sizeof args, "tokenizer encode --tokenizer %s", corpus); /* not a tokenizer */
  CHECK_EQ(dg_test_run_dragon(args, "x", &out), 1);
  CHECK(strstr(out, corpus));
  free(out);
  CHECK_EQ(dg_test_run_dragon("tokenizer frobnicate", NULL, &out), 2);
  free(out);
  free(k);
}

/* Training's tokens of an example and sampling's tokens of its prompt are
 * the same up to and including <|graph|>: both lay the prompt out through
 * train_prompt_encode. Checked on the committed examples, construction and
 * refinement, and on the literal layout of the specials. */
DG_TEST(train_prompt_same_as_sampling) {
  tok_tokenizer *tok = small_tokenizer();
  CHECK(tok);
  dg_status st;
  size_t zn, len;
  char *z = dg_read_file("data/examples/train.jsonl.zst", &zn, &st);
  CHECK(z);
  char *text = dg_zstd_unpack(z, zn, "train.jsonl.zst", 0, &len, &st);
  free(z);
  CHECK(text);
  int seen[2] = {0, 0};
  int32_t kid = tok_special(tok, TOK_KERNEL), pid = tok_special(tok, TOK_PRIOR),
          gid = tok_special(tok, TOK_GRAPH);
  for (char *line = strtok(text, "\n"); line; line = strtok(NULL, "\n")) {
    json_t *j = json_loads(line, 0, NULL);
    CHECK(j);
    const char *prompt = json_string_value(json_object_get(j, "prompt"));
    const char *prior = json_string_value(json_object_get(j, "prior"));
    const char *target = json_string_value(json_object_get(j, "target"));
    CHECK(prompt && target);
    train_shard s = {0};
    CHECK(train_example_tokenize(tok, prompt, prior, target, &s, &st));
    tok_ids p = {0};
    CHECK(train_prompt_encode(tok, prompt, prior, &p, &st));
    CHECK((int64_t)p.len < s.n_tokens);
    CHECK(memcmp(s.tokens, p.data, p.len * sizeof(int32_t)) == 0);
    CHECK_EQ(p.data[0], kid);
    CHECK_EQ(p.data[p.len - 1], gid);
    /* <|prior|> appears exactly where a prior is given */
    int n_prior = 0;
    for (size_t i = 0; i < p.len; i++) n_prior += p.data[i] == pid;
    CHECK_EQ(n_prior, prior ? 1 : 0);
    /* the prompt's text decodes back to the kernel and the prior */
    dg_str d;
    dg_str_init(&d);
    CHECK(tok_decode(tok, p.data, p.len, &d, &st));
    dg_str want;
    dg_str_init(&want);
    dg_str_printf(&want, "%s%s%s%s%s", TOK_KERNEL, prompt, prior ? TOK_PRIOR : "", prior ? prior : "",
                  TOK_GRAPH);
    CHECK_STREQ(d.s, want.s);
    dg_str_free(&d);
    dg_str_free(&want);
    seen[prior != NULL]++;
    tok_ids_free(&p);
    train_shard_free(&s);
    json_decref(j);
  }
  CHECK(seen[0] > 0 && seen[1] > 0);
  free(text);
  tok_free(tok);
}
