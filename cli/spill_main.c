/* cli/spill_main.c: the `spill` command: the command table and the
 * dispatcher. Every row answers -h/--help (its usage on stdout, exit 0)
 * here, before its entry point runs; a group ("trace") answers with its
 * subcommands. Results go to stdout (machine-readable with --json),
 * progress, warnings and errors to stderr; usage errors exit 2. */
#include <stdio.h>
#include <string.h>

#include "cli/cli_util.h"
#include "cli/commands.h"
#include "server/serve_cmd.h"

#define KC CLI_KNOBS_CONFIG
#define KS CLI_KNOBS_SAMPLING

/* name, entry point, summary, usage, knob groups in --help */
static const cli_command k_commands[] = {
    {"gen", cmd_gen, "write a synthetic model (nano, mini, or a K3 twin for a RAM size)",
     cmd_gen_usage, 0},
    {"info", cmd_info, "describe a model container", cmd_info_usage, 0},
    {"verify", cmd_verify, "audit a container: every header, crc and file hash", cmd_verify_usage,
     0},
    {"import", cmd_import, "a Hugging Face checkpoint or a GGUF file into a container",
     cmd_import_usage, 0},
    {"plan", cmd_plan, "RAM budget term by term (a model, or --shape k3)", cmd_plan_usage, 0},
    {"run", cmd_run, "generate text, streaming experts (engine knobs as flags)", cmd_run_usage,
     KC | KS},
    {"serve", spill_serve_cmd, "OpenAI-compatible HTTP server for a model (docs/SERVER.md)",
     spill_serve_cmd_usage, KC},
    {"eval", cmd_eval, "logits of a prompt (top-k, or all positions to a file)", cmd_eval_usage,
     KC},
    {"bench", cmd_bench, "fixed decode workload: tok/s, hits, bytes read", cmd_bench_usage, KC},
    {"roofline", cmd_roofline, "disk, memory and compute bounds of a model vs the achieved tok/s",
     cmd_roofline_usage, KC},
    {"knobs", cmd_knobs, "every engine and sampling knob: flag, values, default, live or fixed",
     cmd_knobs_usage, 0},
    {"trace stats", cmd_trace_stats, "locality statistics of a router trace",
     cmd_trace_stats_usage, 0},
    {"trace replay", cmd_trace_replay, "replay a router trace through cache policies and Belady",
     cmd_trace_replay_usage, 0},
    {"trace chunks", cmd_trace_chunks, "expert loads of verify chunks (drafts) in a router trace",
     cmd_trace_chunks_usage, 0},
    {"trace convert", cmd_trace_convert, "convert other tools' router traces into ours",
     cmd_trace_convert_usage, 0},
    {"sim", cmd_sim, "simulate decode per RAM budget: hit rate, bytes, tok/s (docs/SIM.md)",
     cmd_sim_usage, 0},
    {"exp", cmd_exp, "run an experiment config (docs/EXPERIMENTS.md)", cmd_exp_usage, 0},
    {"tune", cmd_tune, "measure this machine's best knobs for a model; run/bench/serve use them",
     cmd_tune_usage, 0},
    {"report", cmd_report, "regenerate tables and plots of a results directory", cmd_report_usage,
     0},
    {"compare", cmd_compare, "compare two results directories cell by cell", cmd_compare_usage, 0},
    {"refuted list", cmd_refuted_list, "list refuted hypotheses (refuted/)",
     cmd_refuted_list_usage, 0},
    {"tokenize", cmd_tokenize, "text -> token ids with a real tokenizer (docs/TOKENIZER.md)",
     cmd_tokenize_usage, 0},
    {"detokenize", cmd_detokenize, "token ids -> text with a real tokenizer", cmd_detokenize_usage,
     0},
    {"chat", cmd_chat, "chat REPL with the model's own chat template, streamed replies",
     cmd_chat_usage, KC | KS},
};
#define N_COMMANDS (sizeof k_commands / sizeof k_commands[0])

static const cli_command *g_current;

const cli_command *cli_current(void) { return g_current; }

void cli_print_usage(FILE *f, const cli_command *c) {
  fputs(c->usage, f);
  if (c->knobs & KS) {
    fprintf(f, "sampling knobs:\n");
    cli_knob_help(f, KS);
  }
  if (c->knobs & KC) {
    fprintf(f, "engine knobs (experiment-config keys in snake_case; `spill knobs`):\n");
    cli_knob_help(f, KC);
  }
}

/* Length of the group prefix of `name` ("trace " -> 5), 0 if none. */
static size_t group_len(const char *name) {
  const char *sp = strchr(name, ' ');
  return sp ? (size_t)(sp - name) : 0;
}

static int in_group(const cli_command *c, const char *group) {
  size_t g = group_len(c->name);
  return g && g == strlen(group) && !strncmp(c->name, group, g);
}

static void usage(FILE *f) {
  fprintf(f, "usage: spill COMMAND [ARGS]    (spill COMMAND --help: its usage)\n\ncommands:\n");
  for (size_t i = 0; i < N_COMMANDS; i++)
    fprintf(f, "  %-13s %s\n", k_commands[i].name, k_commands[i].summary);
  fprintf(f, "  %-13s %s\n", "help", "this list; help COMMAND: its usage; help --commands: names");
}

static int group_usage(FILE *f, const char *group) {
  fprintf(f, "usage: spill %s SUBCOMMAND [ARGS]    (spill %s SUBCOMMAND --help: its usage)\n\n",
          group, group);
  for (size_t i = 0; i < N_COMMANDS; i++)
    if (in_group(&k_commands[i], group))
      fprintf(f, "  %-13s %s\n", k_commands[i].name, k_commands[i].summary);
  return 0;
}

static int is_help(const char *a) { return !strcmp(a, "-h") || !strcmp(a, "--help"); }

/* The row named by argv[0] (and argv[1] for a subcommand); *words gets 1 or 2. */
static const cli_command *find(int argc, char **argv, int *words) {
  for (size_t i = 0; i < N_COMMANDS; i++) {
    const cli_command *c = &k_commands[i];
    size_t g = group_len(c->name);
    if (!g && !strcmp(argv[0], c->name)) {
      *words = 1;
      return c;
    }
    if (g && argc >= 2 && in_group(c, argv[0]) && !strcmp(argv[1], c->name + g + 1)) {
      *words = 2;
      return c;
    }
  }
  return NULL;
}

static int is_group(const char *name) {
  for (size_t i = 0; i < N_COMMANDS; i++)
    if (in_group(&k_commands[i], name)) return 1;
  return 0;
}

/* `spill help [--commands | COMMAND...]` */
static int help(int argc, char **argv) {
  if (argc == 0) {
    usage(stdout);
    return 0;
  }
  if (argc == 1 && !strcmp(argv[0], "--commands")) {
    for (size_t i = 0; i < N_COMMANDS; i++) printf("%s\n", k_commands[i].name);
    return 0;
  }
  int words = 0;
  const cli_command *c = find(argc, argv, &words);
  if (c && words == argc) {
    cli_print_usage(stdout, c);
    return 0;
  }
  if (argc == 1 && is_group(argv[0])) return group_usage(stdout, argv[0]);
  fprintf(stderr, "spill help: no command '%s'\n", argv[0]);
  usage(stderr);
  return 2;
}

int main(int argc, char **argv) {
  if (argc < 2) {
    usage(stderr);
    return 2;
  }
  if (is_help(argv[1])) {
    if (argc > 2) {
      fprintf(stderr, "spill: unexpected argument %s\n", argv[2]);
      return 2;
    }
    usage(stdout);
    return 0;
  }
  if (!strcmp(argv[1], "help")) return help(argc - 2, argv + 2);
  int words = 0;
  const cli_command *c = find(argc - 1, argv + 1, &words);
  if (!c) {
    if (is_group(argv[1])) {
      if (argc > 2 && is_help(argv[2])) return group_usage(stdout, argv[1]);
      if (argc > 2) fprintf(stderr, "spill %s: unknown subcommand '%s'\n", argv[1], argv[2]);
      group_usage(stderr, argv[1]);
      return 2;
    }
    fprintf(stderr, "spill: unknown command '%s'\n", argv[1]);
    usage(stderr);
    return 2;
  }
  g_current = c;
  int sub_argc = argc - words;
  char **sub_argv = argv + words;
  for (int i = 1; i < sub_argc; i++)
    if (is_help(sub_argv[i])) {
      cli_print_usage(stdout, c);
      return 0;
    }
  return c->fn(sub_argc, sub_argv);
}
