/* args.c: option parsing shared by all subcommands: --name value or
 * --name=value, range-checked numbers, --help printing every flag with its
 * default. */
#include <stdlib.h>
#include <string.h>

#include "cli/cli.h"

void cli_print_help(const cli_spec *spec, FILE *out) {
  fprintf(out, "usage: dragon %s %s\n\n%s\n", spec->name, spec->synopsis, spec->about);
  if (spec->n_opts) fprintf(out, "\noptions:\n");
  for (int i = 0; i < spec->n_opts; i++) {
    const cli_opt *o = &spec->opts[i];
    char left[64];
    const char *arg = o->type == CLI_OPT_FLAG ? "" : o->type == CLI_OPT_INT ? " N"
                      : o->type == CLI_OPT_F64  ? " X" : " S";
    snprintf(left, sizeof left, "%s%s", o->name, arg);
    fprintf(out, "  %-22s %s", left, o->help);
    switch (o->type) {
      case CLI_OPT_FLAG: break;
      case CLI_OPT_INT:
        fprintf(out, " (default %lld, range %lld..%lld)", (long long)*(int64_t *)o->dst,
                (long long)o->lo, (long long)o->hi);
        break;
      case CLI_OPT_F64: fprintf(out, " (default %g)", *(double *)o->dst); break;
      case CLI_OPT_STR: {
        const char *d = *(const char **)o->dst;
        if (d) fprintf(out, " (default %s)", d);
        break;
      }
    }
    fputc('\n', out);
  }
  fprintf(out, "  %-22s %s\n", "--help", "print this help");
}

int cli_parse(const cli_spec *spec, int argc, char **argv, char ***pos, int *npos) {
  char **p = dg_malloc(sizeof(char *) * (size_t)(argc + 1));
  int np = 0;
  bool opts_done = false;
  dg_status st;
  for (int i = 1; i < argc; i++) {
    char *a = argv[i];
    if (opts_done || a[0] != '-' || a[1] == 0) {
      p[np++] = a;
      continue;
    }
    if (strcmp(a, "--") == 0) {
      opts_done = true;
      continue;
    }
    if (strcmp(a, "--help") == 0 || strcmp(a, "-h") == 0) {
      cli_print_help(spec, stdout);
      free(p);
      return -1;
    }
    const char *eq = strchr(a, '=');
    size_t nlen = eq ? (size_t)(eq - a) : strlen(a);
    const cli_opt *o = NULL;
    for (int k = 0; k < spec->n_opts; k++)
      if (strlen(spec->opts[k].name) == nlen && memcmp(spec->opts[k].name, a, nlen) == 0)
        o = &spec->opts[k];
    if (!o) {
      fprintf(stderr, "dragon %s: unknown option '%.*s' (try --help)\n", spec->name, (int)nlen, a);
      free(p);
      return CLI_USAGE;
    }
    if (o->type == CLI_OPT_FLAG) {
      if (eq) {
        fprintf(stderr, "dragon %s: %s takes no value\n", spec->name, o->name);
        free(p);
        return CLI_USAGE;
      }
      *(bool *)o->dst = true;
      continue;
    }
    const char *val = eq ? eq + 1 : (i + 1 < argc ? argv[++i] : NULL);
    if (!val) {
      fprintf(stderr, "dragon %s: %s needs a value\n", spec->name, o->name);
      free(p);
      return CLI_USAGE;
    }
    bool ok = true;
    switch (o->type) {
      case CLI_OPT_INT: ok = dg_parse_i64(val, o->lo, o->hi, o->dst, o->name, &st); break;
      case CLI_OPT_F64: ok = dg_parse_f64(val, o->dst, o->name, &st); break;
      case CLI_OPT_STR: *(const char **)o->dst = val; break;
      case CLI_OPT_FLAG: break;
    }
    if (!ok) {
      fprintf(stderr, "dragon %s: %s\n", spec->name, st.msg);
      free(p);
      return CLI_USAGE;
    }
  }
  if (np < spec->min_pos || (spec->max_pos >= 0 && np > spec->max_pos)) {
    if (np < spec->min_pos)
      fprintf(stderr, "dragon %s: missing argument (usage: dragon %s %s)\n", spec->name,
              spec->name, spec->synopsis);
    else
      fprintf(stderr, "dragon %s: unexpected argument '%s' (usage: dragon %s %s)\n",
              spec->name, p[spec->max_pos], spec->name, spec->synopsis);
    free(p);
    return CLI_USAGE;
  }
  p[np] = NULL;
  *pos = p;
  *npos = np;
  return CLI_OK;
}

int cli_report(const char *cmd, const dg_status *st) {
  fprintf(stderr, "dragon %s: %s\n", cmd, st->msg);
  return st->code == DG_ERR_USAGE ? CLI_USAGE : CLI_ERROR;
}
