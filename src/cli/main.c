/* main.c: `dragon` and its table of subcommands. */
#include <stdlib.h>
#include <string.h>

#include "cli/cli.h"
#include "dragon/search.h"
#include "dragon/tsel.h"

static const struct {
  const char *name;
  int (*fn)(int, char **);
  const char *help;
} commands[] = {
    {"workloads", cmd_workloads, "print N distinct workload specs for a seed"},
    {"show", cmd_show, "print the kernel text of a spec, or reprint a kernel-text file canonically"},
    {"run", cmd_run, "run a kernel and check it against the float64 reference"},
    {"schedule", cmd_schedule, "replay a trace on a kernel and print the scheduled kernel"},
    {"check", cmd_check, "replay a trace, run the scheduled kernel on the CPU, compare with the reference"},
    {"emit", cmd_emit, "replay a trace, lower to device kernels and print CUDA C or emulating C"},
    {"tsel", cmd_tsel, "TSEL: lift traces, lower graphs, check them, compare sizes"},
    {"fuzz-schedules", cmd_fuzz_schedules, "apply random schedules to random workloads and check each"},
    {"train", cmd_train, "train the schedule-writing model: sft (supervised fine-tuning)"},
    {"optimize", cmd_optimize, "write a schedule for a kernel with the model, keep the best that passes every gate"},
    {"eval", cmd_eval, "judge a model's first outputs on a held-out split: Correct@1, fast_2, fast_10"},
    {"sample-model", cmd_sample_model, "write TSEL graphs for a kernel with a trained model"},
    {"tokenizer", cmd_tokenizer, "train a BPE tokenizer, encode text, decode ids"},
    {"sample", cmd_sample, "print samples of a kernel's CUDA design space (TVM trace JSON lines)"},
    {"tune", cmd_tune, "evolutionary search with a cost model; every measurement a database record"},
    {"db", cmd_db, "tuning database: best record, export to TVM's format, cost-model recall"},
    {"data", cmd_data, "the data stage: the workload universe and its splits"},
};

static void usage(FILE *out) {
  fprintf(out,
          "usage: dragon COMMAND [options]\n\n"
          "Little Dragon: a tensor-kernel compiler, schedule search and a model that\n"
          "writes schedules. Commands:\n\n");
  for (size_t i = 0; i < DG_ARRAY_LEN(commands); i++)
    fprintf(out, "  %-15s %s\n", commands[i].name, commands[i].help);
  fprintf(out, "\n`dragon COMMAND --help` describes each command and its flags.\n");
}

int main(int argc, char **argv) {
  /* what TSEL's `postproc default` stands for */
  tsel_set_postprocessor(search_postproc_cuda, NULL);
  if (argc < 2) {
    usage(stderr);
    return CLI_USAGE;
  }
  if (strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "-h") == 0 ||
      strcmp(argv[1], "help") == 0) {
    usage(stdout);
    return CLI_OK;
  }
  for (size_t i = 0; i < DG_ARRAY_LEN(commands); i++)
    if (strcmp(argv[1], commands[i].name) == 0) return commands[i].fn(argc - 1, argv + 1);
  fprintf(stderr, "dragon: unknown command '%s' (try dragon --help)\n", argv[1]);
  return CLI_USAGE;
}
