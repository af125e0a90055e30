/* cli/cmd_run.c: `spill run`: generates text from a prompt, streaming
 * experts. Every engine and sampling knob is a flag (--kebab-case of the
 * knob table's key, cli_knob_flag), so the CLI, the experiment configs and
 * the library agree on names and validation. Generated text goes to stdout
 * only; progress, warnings and the closing summary go to stderr. Ctrl-C
 * stops generation and still prints the summary. */
#define _POSIX_C_SOURCE 200809L
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/cli_util.h"
#include "cli/commands.h"
#include "engine/spill.h"

const char cmd_run_usage[] = "usage: spill run MODEL PROMPT [-n N] [--chat] [sampling knobs] [engine knobs]\n"
                             "-n N: tokens to generate (64)\n"
                             "--chat: PROMPT is a user message, rendered with the model's chat template\n";

/* cli/cmd_chat.c */
int cli_chat_turn(spill_engine *eng, const spill_chat_msg *msgs, size_t n_msgs, int n_new,
                  const spill_sampling *s, volatile int *stop, char **reply, spill_run_stats *st,
                  spill_err *e);

static volatile int g_stop;
static void on_sigint(int sig) {
  (void)sig;
  g_stop = 1;
}

static int on_token(void *user, int token, const char *text, const spill_run_stats *ts) {
  (void)user;
  (void)token;
  fputs(text, stdout);
  fflush(stdout);
  static int told; /* the engine detected paging: say so while it runs */
  cli_warn_paging_live(stderr, ts, &told);
  return g_stop;
}

int cmd_run(int argc, char **argv) {
  spill_config cfg;
  spill_config_default(&cfg);
  spill_sampling s;
  spill_sampling_default(&s);
  long n_new = 64;
  int chat = 0;
  const char *model = NULL, *prompt = NULL, *v;
  for (int i = 1; i < argc; i++) {
    int k = cli_knob_flag(argc, argv, &i, CLI_KNOBS_CONFIG | CLI_KNOBS_SAMPLING, &cfg, &s);
    if (k < 0) return 2;
    if (k) continue;
    const char *a = argv[i];
    if (!strcmp(a, "-n")) {
      if (!(v = cli_value(argc, argv, &i)) || cli_int(a, v, 0, 1L << 24, &n_new)) return 2;
    } else if (!strcmp(a, "--chat")) {
      chat = 1;
    } else if (a[0] == '-') {
      return cli_usage_error("unknown option %s", a);
    } else if (!model) model = a;
    else if (!prompt) prompt = a;
    else return cli_usage_error("unexpected argument %s", a);
  }
  if (!model || !prompt) return cli_usage_error(model ? "no prompt" : "no model");
  spill_engine *eng;
  if (cli_open_engine("run", model, &cfg, &eng)) return 1;
  if (chat) {
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_sigint;
    sigaction(SIGINT, &sa, NULL);
    spill_chat_msg msg = {"user", prompt};
    char *reply = NULL;
    spill_run_stats st;
    spill_err e = {0};
    int rc = cli_chat_turn(eng, &msg, 1, (int)n_new, &s, &g_stop, &reply, &st, &e);
    fputs("\n", stdout);
    fflush(stdout);
    if (rc == SPILL_OK || rc == SPILL_E_INTERRUPTED || rc == SPILL_E_NONFINITE)
      cli_print_run_summary(eng, &st);
    free(reply);
    spill_engine_close(eng);
    if (rc && rc != SPILL_E_INTERRUPTED) return cli_fail("run", rc, e.msg);
    return 0;
  }
  /* a real tokenizer may turn an invalid byte into U+FFFD (3 bytes) */
  int cap = (int)strlen(prompt) * 3 + 8, n = 0;
  int *toks = malloc((size_t)cap * sizeof(int));
  spill_err e = {0};
  int rc = toks ? spill_tokenize(eng, prompt, 1, toks, cap, &n, &e) : SPILL_E_NOMEM;
  if (rc) {
    free(toks);
    spill_engine_close(eng);
    return cli_fail("run", rc, e.msg);
  }
  struct sigaction sa;
  memset(&sa, 0, sizeof sa);
  sa.sa_handler = on_sigint;
  sigaction(SIGINT, &sa, NULL);
  spill_run_stats st;
  rc = spill_generate(eng, toks, n, (int)n_new, &s, on_token, NULL, &g_stop, &st, &e);
  fputs("\n", stdout);
  fflush(stdout);
  /* The summary of what was done, after an interruption too (exit 130 like
   * a shell) and after non-finite logits (the summary notes the position);
   * another error is printed alone, not after a summary of nothing. */
  int interrupted = rc == SPILL_E_INTERRUPTED || (rc == SPILL_OK && g_stop);
  if (interrupted) fprintf(stderr, "spill run: interrupted: %s\n", rc ? e.msg : "stopped");
  if (rc == SPILL_OK || interrupted || rc == SPILL_E_NONFINITE) cli_print_run_summary(eng, &st);
  free(toks);
  spill_engine_close(eng);
  if (rc && !interrupted) return cli_fail("run", rc, e.msg);
  return interrupted ? 130 : 0;
}
