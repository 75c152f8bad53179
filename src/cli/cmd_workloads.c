/* cmd_workloads.c: `dragon workloads`: prints N distinct canonical workload
 * specs for a seed, one a line (optionally of one family), or with --list
 * the families (about line and example) and the MetaSchedule aliases, or
 * with --canonical SPEC the canonical form of one spec or alias. Output
 * goes to stdout; errors to stderr with exit 1 (2 for usage).
 */
#include <string.h>

#include "cli/cli.h"
#include "dragon/wl.h"

static void emit_line(const char *spec, void *ctx) {
  FILE *out = ctx;
  fputs(spec, out);
  fputc('\n', out);
}

static void print_list(FILE *out) {
  fprintf(out, "families (%d):\n", wl_family_count());
  for (int i = 0; i < wl_family_count(); i++)
    fprintf(out, "  %-24s %s\n  %-24s e.g. %s\n", wl_family_name(i), wl_family_about(i), "",
            wl_family_example(i));
  fprintf(out, "\naliases (MetaSchedule test workloads; NAME means NAME/0):\n");
  for (int i = 0; i < wl_alias_count(); i++) {
    for (int k = 0; k < 4; k++) {
      char name[32];
      snprintf(name, sizeof name, "%s/%d", wl_alias_name(i), k);
      dg_status st;
      char *spec = wl_canonical(name, &st);
      fprintf(out, "  %-8s %s\n", name, spec ? spec : st.msg);
      free(spec);
    }
  }
}

int cmd_workloads(int argc, char **argv) {
  int64_t count = 10, seed = 0;
  const char *family = NULL, *canon = NULL;
  bool list = false;
  const cli_opt opts[] = {
      {"--count", CLI_OPT_INT, &count, 0, 100000000, "number of distinct workloads"},
      {"--seed", CLI_OPT_INT, &seed, 0, INT64_MAX, "random seed (same seed, same list)"},
      {"--family", CLI_OPT_STR, &family, 0, 0, "only this family (default: the documented mix)"},
      {"--list", CLI_OPT_FLAG, &list, 0, 0, "list the families and the aliases, then exit"},
      {"--canonical", CLI_OPT_STR, &canon, 0, 0, "print the canonical form of a spec or alias"},
  };
  const cli_spec spec = {
      "workloads",
      "[--count N] [--seed S] [--family F] | --list | --canonical SPEC",
      "Prints N distinct workload specs (family:key=val,...), one a line, in canonical\n"
      "form, deterministic for a seed. Shapes are drawn from real models (hidden sizes,\n"
      "heads, image sizes, channels, batches), powers of two and odd sizes; every\n"
      "workload fits WL_MAX_BYTES (256 MiB). docs/workloads.md lists the families.",
      opts, (int)DG_ARRAY_LEN(opts), 0, 0};
  char **pos;
  int npos;
  int rc = cli_parse(&spec, argc, argv, &pos, &npos);
  if (rc == -1) return CLI_OK;
  if (rc != CLI_OK) return rc;
  free(pos);

  dg_status st;
  if (list) {
    print_list(stdout);
    return CLI_OK;
  }
  if (canon) {
    char *c = wl_canonical(canon, &st);
    if (!c) return cli_report("workloads", &st);
    printf("%s\n", c);
    free(c);
    return CLI_OK;
  }
  if (!wl_generate((uint64_t)seed, count, family, emit_line, stdout, &st))
    return cli_report("workloads", &st);
  if (fflush(stdout) != 0) {
    fprintf(stderr, "dragon workloads: writing stdout failed\n");
    return CLI_ERROR;
  }
  return CLI_OK;
}
