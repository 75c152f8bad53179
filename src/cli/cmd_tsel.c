/* cmd_tsel.c: `dragon tsel lift|lower|check|stats`: traces to TSEL and back,
 * the checker, and the size of TSEL against trace JSON and TVM's Python
 * form over a set of traces (files, directories of *.json, and random
 * schedules of small workloads of every family). */
#include <dirent.h>
#include <string.h>
#include <sys/stat.h>

#include "cli/cli.h"
#include "dragon/rt.h"
#include "dragon/tsel.h"
#include "dragon/wl.h"

/* The header spec of a KERNEL argument: canonical for specs and aliases,
 * the argument itself for kernel-text files. */
static char *header_spec(const char *arg, dg_status *st) {
  dg_status tmp;
  char *c = wl_canonical(arg, &tmp);
  if (c) return c;
  if (strchr(arg, ' ') || !arg[0]) {
    dg_fail(st, DG_ERR_USAGE, "--kernel '%s': a TSEL header names the kernel without spaces", arg);
    return NULL;
  }
  return dg_strdup(arg);
}

static int sub_lift(int argc, char **argv) {
  const char *kernel = NULL, *record = NULL;
  bool no_explain = false;
  const cli_opt opts[] = {
      {"--kernel", CLI_OPT_STR, &kernel, 0, 0, "the trace's kernel: workload spec, alias or kernel-text file (required)"},
      {"--record", CLI_OPT_STR, &record, 0, 0, "JSON record with run_secs and unscheduled_secs, for expect lines"},
      {"--no-explain", CLI_OPT_FLAG, &no_explain, 0, 0, "edits only: no why/expect lines (the kernel is not built)"},
  };
  const cli_spec spec = {"tsel lift", "T.json --kernel SPEC [--record R.json] [--no-explain]",
                         "Lifts a trace (TVM's trace JSON, - for stdin) to canonical TSEL on stdout,\n"
                         "with why/expect lines computed on the kernel.",
                         opts, DG_ARRAY_LEN(opts), 1, 1};
  char **pos;
  int npos;
  int rc = cli_parse(&spec, argc, argv, &pos, &npos);
  if (rc) return rc < 0 ? CLI_OK : rc;
  const char *path = pos[0];
  free(pos);
  if (!kernel) {
    fprintf(stderr, "dragon tsel lift: --kernel is required\n");
    return CLI_USAGE;
  }
  dg_status st;
  char *hs = header_spec(kernel, &st);
  if (!hs) return cli_report("tsel lift", &st);
  dg_func *f = NULL;
  tsel_record rec, *recp = NULL;
  sched_trace *t = NULL;
  tsel_graph *g = NULL;
  int ret = CLI_OK;
  if (!no_explain && !(f = cli_load_kernel(kernel, &st))) goto fail;
  if (record) {
    char *txt = dg_read_file(record, NULL, &st);
    bool ok = txt && tsel_record_parse(txt, &rec, &st);
    free(txt);
    if (!ok) {
      dg_status_prefix(&st, "%s", record);
      goto fail;
    }
    recp = &rec;
  }
  if (!(t = cli_load_trace(path, &st))) goto fail;
  if (!(g = tsel_lift(t, hs, f, recp, &st))) {
    dg_status_prefix(&st, "%s", path);
    goto fail;
  }
  char *out = tsel_print(g);
  fputs(out, stdout);
  free(out);
  goto done;
fail:
  ret = cli_report("tsel lift", &st);
done:
  tsel_graph_free(g);
  sched_trace_free(t);
  ir_func_free(f);
  free(hs);
  return ret;
}

static tsel_graph *load_graph(const char *path, dg_status *st) {
  char *text = dg_read_file(path, NULL, st);
  if (!text) return NULL;
  tsel_graph *g = tsel_parse(text, strcmp(path, "-") == 0 ? "<stdin>" : path, st);
  free(text);
  return g;
}

static int sub_lower(int argc, char **argv) {
  const cli_spec spec = {"tsel lower", "G.tsel",
                         "Lowers a TSEL graph (- for stdin) to the trace JSON it stands for, on stdout.",
                         NULL, 0, 1, 1};
  char **pos;
  int npos;
  int rc = cli_parse(&spec, argc, argv, &pos, &npos);
  if (rc) return rc < 0 ? CLI_OK : rc;
  dg_status st;
  tsel_graph *g = load_graph(pos[0], &st);
  free(pos);
  if (!g) return cli_report("tsel lower", &st);
  sched_trace *t = tsel_lower(g, &st);
  tsel_graph_free(g);
  if (!t) return cli_report("tsel lower", &st);
  char *js = sched_trace_to_json(t);
  puts(js);
  free(js);
  sched_trace_free(t);
  return CLI_OK;
}

static int sub_check(int argc, char **argv) {
  const char *kernel = NULL, *target = "cuda";
  bool no_kernel = false;
  const cli_opt opts[] = {
      {"--kernel", CLI_OPT_STR, &kernel, 0, 0, "kernel to check against (default: the header's spec)"},
      {"--no-kernel", CLI_OPT_FLAG, &no_kernel, 0, 0, "kernel-free checks only (types, references, links)"},
      {"--target", CLI_OPT_STR, &target, 0, 0, "cuda or cpu: which storage scopes are valid"},
  };
  const cli_spec spec = {"tsel check", "G.tsel [--kernel K] [--no-kernel] [--target cuda|cpu]",
                         "Checks a TSEL graph before anything runs: syntax, operand types, definition\n"
                         "before use, stale handles, why/expect links and, given the kernel, tile\n"
                         "products, buffer indices, thread extents and scopes. Prints `ok` or the first\n"
                         "error as FILE:line:col: message.",
                         opts, DG_ARRAY_LEN(opts), 1, 1};
  char **pos;
  int npos;
  int rc = cli_parse(&spec, argc, argv, &pos, &npos);
  if (rc) return rc < 0 ? CLI_OK : rc;
  tsel_target tg;
  if (strcmp(target, "cuda") == 0) tg = TSEL_TARGET_CUDA;
  else if (strcmp(target, "cpu") == 0) tg = TSEL_TARGET_CPU;
  else {
    fprintf(stderr, "dragon tsel check: --target must be cuda or cpu, not '%s'\n", target);
    free(pos);
    return CLI_USAGE;
  }
  dg_status st;
  const char *path = pos[0];
  tsel_graph *g = load_graph(path, &st);
  free(pos);
  if (!g) return cli_report("tsel check", &st);
  dg_func *f = NULL;
  if (!no_kernel) {
    f = cli_load_kernel(kernel ? kernel : tsel_graph_kernel(g), &st);
    if (!f) {
      if (!kernel) dg_status_prefix(&st, "%s:1:15: kernel '%s'", strcmp(path, "-") == 0 ? "<stdin>" : path,
                                    tsel_graph_kernel(g));
      tsel_graph_free(g);
      return cli_report("tsel check", &st);
    }
  }
  bool ok = tsel_check(g, f, tg, &st);
  int n = tsel_graph_edit_count(g);
  tsel_graph_free(g);
  ir_func_free(f);
  if (!ok) return cli_report("tsel check", &st);
  printf("ok: %d edits%s\n", n, no_kernel ? " (kernel-free checks)" : "");
  return CLI_OK;
}

/* ---- stats ------------------------------------------------------------------ */

typedef struct {
  int64_t traces, insts, json_bytes, py_bytes, py_lines, tsel_bytes, tsel_lines;
} sizes;

static void measure(sizes *z, const sched_trace *t, const char *spec, dg_status *st, int64_t *failures) {
  tsel_graph *g = tsel_lift(t, spec, NULL, NULL, st);
  if (!g) {
    (*failures)++;
    return;
  }
  char *js = sched_trace_to_json(t), *py = tsel_trace_to_python(t), *ts = tsel_print(g);
  z->traces++;
  z->insts += t->n;
  z->json_bytes += (int64_t)strlen(js) + 1;
  z->py_bytes += (int64_t)strlen(py);
  z->py_lines += t->n;
  z->tsel_bytes += (int64_t)strlen(ts);
  z->tsel_lines += tsel_graph_edit_count(g) + 1;
  free(js);
  free(py);
  free(ts);
  tsel_graph_free(g);
}

static void print_sizes(const char *what, const sizes *z) {
  if (!z->traces) return;
  printf("%-10s %7lld %7lld %11lld %11lld %11lld %6.2fx %6.2fx %9lld %9lld\n", what, (long long)z->traces,
         (long long)z->insts, (long long)z->json_bytes, (long long)z->py_bytes, (long long)z->tsel_bytes,
         (double)z->json_bytes / (double)z->tsel_bytes, (double)z->py_bytes / (double)z->tsel_bytes,
         (long long)z->py_lines, (long long)z->tsel_lines);
}

static void add_sizes(sizes *a, const sizes *b) {
  a->traces += b->traces;
  a->insts += b->insts;
  a->json_bytes += b->json_bytes;
  a->py_bytes += b->py_bytes;
  a->py_lines += b->py_lines;
  a->tsel_bytes += b->tsel_bytes;
  a->tsel_lines += b->tsel_lines;
}

static int cmp_str(const void *a, const void *b) { return strcmp(*(char *const *)a, *(char *const *)b); }

static void stats_file(sizes *z, const char *path, const char *spec, int64_t *failures) {
  dg_status st;
  sched_trace *t = cli_load_trace(path, &st);
  if (!t) {
    fprintf(stderr, "dragon tsel stats: %s\n", st.msg);
    (*failures)++;
    return;
  }
  measure(z, t, spec, &st, failures);
  sched_trace_free(t);
}

typedef struct {
  char **v;
  int n, cap;
} strs;

static void strs_add(const char *s, void *ctx) {
  strs *p = ctx;
  if (p->n == p->cap) {
    p->cap = p->cap ? 2 * p->cap : 64;
    p->v = dg_realloc(p->v, sizeof(char *) * (size_t)p->cap);
  }
  p->v[p->n++] = dg_strdup(s);
}

static void stats_random(sizes *z, int64_t count, uint64_t seed, int steps, int64_t *failures) {
  int nfam = wl_family_count();
  strs *pools = dg_calloc((size_t)nfam, sizeof(strs));
  dg_status st;
  for (int i = 0; i < nfam; i++) {
    strs all = {0};
    wl_generate(seed * 1000003u + (uint64_t)i, 50, wl_family_name(i), strs_add, &all, &st);
    strs_add(wl_family_example(i), &all);
    for (int k = 0; k < all.n; k++) {
      dg_func *f = wl_build(all.v[k], &st);
      if (f && rt_kernel_iterations(f) <= (1 << 16)) strs_add(all.v[k], &pools[i]);
      ir_func_free(f);
      free(all.v[k]);
    }
    free(all.v);
  }
  dg_rng r;
  dg_rng_seed(&r, seed);
  for (int64_t i = 0; i < count; i++) {
    strs *p = &pools[i % nfam];
    if (p->n == 0) continue;
    const char *spec = p->v[dg_rng_below(&r, (uint64_t)p->n)];
    dg_func *f = wl_build(spec, &st);
    if (!f) continue;
    sched *s = sched_new(f, dg_rng_next(&r));
    dg_rng sr = dg_rng_fork(&r);
    sched_random_steps(s, &sr, steps);
    char *canon = wl_canonical(spec, &st);
    measure(z, sched_get_trace(s), canon ? canon : "unknown", &st, failures);
    free(canon);
    sched_free(s);
    ir_func_free(f);
  }
  for (int i = 0; i < nfam; i++) {
    for (int k = 0; k < pools[i].n; k++) free(pools[i].v[k]);
    free(pools[i].v);
  }
  free(pools);
}

static int sub_stats(int argc, char **argv) {
  const char *kernel = NULL;
  int64_t random = 0, seed = 1, steps = 16;
  const cli_opt opts[] = {
      {"--kernel", CLI_OPT_STR, &kernel, 0, 0, "kernel spec for the headers of file traces (default: unknown)"},
      {"--random", CLI_OPT_INT, &random, 0, 1000000, "also this many random schedules of small workloads"},
      {"--seed", CLI_OPT_INT, &seed, 0, INT64_MAX, "seed of the random schedules"},
      {"--steps", CLI_OPT_INT, &steps, 1, 1000, "random steps drawn per schedule"},
  };
  const cli_spec spec = {"tsel stats", "[DIR|FILE.json ...] [--random N] [--kernel SPEC]",
                         "Bytes and lines of TSEL (edits only, with its header line) against canonical\n"
                         "trace JSON and TVM's Python form (one statement a line), per source and in\n"
                         "total. Directories contribute their *.json files, in name order.",
                         opts, DG_ARRAY_LEN(opts), 0, -1};
  char **pos;
  int npos;
  int rc = cli_parse(&spec, argc, argv, &pos, &npos);
  if (rc) return rc < 0 ? CLI_OK : rc;
  if (npos == 0 && random == 0) {
    fprintf(stderr, "dragon tsel stats: give trace files, directories or --random N\n");
    free(pos);
    return CLI_USAGE;
  }
  const char *hs = kernel ? kernel : "unknown";
  sizes files = {0}, rnd = {0}, total = {0};
  int64_t failures = 0;
  for (int i = 0; i < npos; i++) {
    struct stat sb;
    if (stat(pos[i], &sb) == 0 && S_ISDIR(sb.st_mode)) {
      DIR *d = opendir(pos[i]);
      if (!d) {
        fprintf(stderr, "dragon tsel stats: cannot open %s\n", pos[i]);
        failures++;
        continue;
      }
      strs names = {0};
      struct dirent *e;
      while ((e = readdir(d))) {
        size_t l = strlen(e->d_name);
        if (l > 5 && strcmp(e->d_name + l - 5, ".json") == 0) {
          char *p = dg_malloc(strlen(pos[i]) + l + 2);
          sprintf(p, "%s/%s", pos[i], e->d_name);
          strs_add(p, &names);
          free(p);
        }
      }
      closedir(d);
      qsort(names.v, (size_t)names.n, sizeof(char *), cmp_str);
      for (int k = 0; k < names.n; k++) {
        stats_file(&files, names.v[k], hs, &failures);
        free(names.v[k]);
      }
      free(names.v);
    } else {
      stats_file(&files, pos[i], hs, &failures);
    }
  }
  free(pos);
  if (random) stats_random(&rnd, random, (uint64_t)seed, (int)steps, &failures);
  add_sizes(&total, &files);
  add_sizes(&total, &rnd);
  printf("%-10s %7s %7s %11s %11s %11s %7s %7s %9s %9s\n", "source", "traces", "insts", "json_B", "python_B",
         "tsel_B", "json/ts", "py/ts", "py_lines", "ts_lines");
  print_sizes("files", &files);
  print_sizes("random", &rnd);
  print_sizes("total", &total);
  if (failures) fprintf(stderr, "dragon tsel stats: %lld traces could not be read or lifted\n", (long long)failures);
  return failures ? CLI_ERROR : CLI_OK;
}

int cmd_tsel(int argc, char **argv) {
  static const struct {
    const char *name;
    int (*fn)(int, char **);
    const char *help;
  } subs[] = {
      {"lift", sub_lift, "trace JSON -> canonical TSEL (with why/expect lines)"},
      {"lower", sub_lower, "TSEL -> the exact trace JSON"},
      {"check", sub_check, "check a TSEL graph, with located errors"},
      {"stats", sub_stats, "bytes and lines of TSEL vs trace JSON vs TVM's Python form"},
  };
  if (argc >= 2)
    for (size_t i = 0; i < DG_ARRAY_LEN(subs); i++)
      if (strcmp(argv[1], subs[i].name) == 0) return subs[i].fn(argc - 1, argv + 1);
  bool help = argc >= 2 && (strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "-h") == 0);
  FILE *out = help ? stdout : stderr;
  if (argc >= 2 && !help) fprintf(stderr, "dragon tsel: unknown subcommand '%s'\n", argv[1]);
  fprintf(out, "usage: dragon tsel SUBCOMMAND ...\n\nTSEL, the typed schedule edit language (docs/tsel.md):\n\n");
  for (size_t i = 0; i < DG_ARRAY_LEN(subs); i++) fprintf(out, "  %-6s %s\n", subs[i].name, subs[i].help);
  fprintf(out, "\n`dragon tsel SUBCOMMAND --help` describes each one.\n");
  return help ? CLI_OK : CLI_USAGE;
}
