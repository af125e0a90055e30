/* cli/spill_main.c: the `spill` command: dispatches to a subcommand.
 * Results go to stdout (machine-readable with --json), progress, warnings and
 * errors to stderr. */
#include <stdio.h>
#include <string.h>

#include "cli/commands.h"

static const struct {
  const char *name;
  int (*fn)(int, char **);
  const char *help;
} k_cmds[] = {
    {"gen", cmd_gen, "write a synthetic model (nano, mini, or a K3 twin for a RAM size)"},
    {"info", cmd_info, "describe a model container"},
    {"verify", cmd_verify, "audit a container: every header, crc and file hash"},
    {"plan", cmd_plan, "RAM budget term by term (a model, or --shape k3)"},
    {"run", cmd_run, "generate text, streaming experts (engine knobs as flags)"},
    {"eval", cmd_eval, "logits of a prompt (top-k, or all positions to a file)"},
    {"bench", cmd_bench, "fixed decode workload: tok/s, hits, bytes read"},
    {"knobs", cmd_knobs, "every engine and sampling knob: flag, values, default, live or fixed"},
    {"trace", cmd_trace, "router traces: stats, replay through cache policies and Belady"},
    {"sim", cmd_sim, "simulate decode per RAM budget: hit rate, bytes, tok/s (docs/SIM.md)"},
    {"exp", cmd_exp, "run an experiment config (docs/EXPERIMENTS.md)"},
    {"report", cmd_report, "regenerate tables and plots of a results directory"},
    {"compare", cmd_compare, "compare two results directories cell by cell"},
    {"refuted", cmd_refuted, "list refuted hypotheses (refuted/)"},
};

static void usage(FILE *f) {
  fprintf(f, "usage: spill COMMAND [ARGS]\n\ncommands:\n");
  for (size_t i = 0; i < sizeof k_cmds / sizeof k_cmds[0]; i++)
    fprintf(f, "  %-8s %s\n", k_cmds[i].name, k_cmds[i].help);
  fprintf(f, "\nrun 'spill COMMAND' without arguments for its usage\n");
}

int main(int argc, char **argv) {
  if (argc < 2 || !strcmp(argv[1], "-h") || !strcmp(argv[1], "--help") ||
      !strcmp(argv[1], "help")) {
    usage(argc < 2 ? stderr : stdout);
    return argc < 2 ? 2 : 0;
  }
  for (size_t i = 0; i < sizeof k_cmds / sizeof k_cmds[0]; i++)
    if (!strcmp(argv[1], k_cmds[i].name)) return k_cmds[i].fn(argc - 1, argv + 1);
  fprintf(stderr, "spill: unknown command '%s'\n", argv[1]);
  usage(stderr);
  return 2;
}
