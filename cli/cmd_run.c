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
#include <sys/stat.h>
#include <time.h>

#include "cli/cli_util.h"
#include "cli/commands.h"
#include "engine/spill.h"

const char cmd_run_usage[] =
    "usage: spill run MODEL PROMPT [-n N] [--chat] [--session FILE] [--json] [sampling knobs]\n"
    "                 [engine knobs]\n"
    "-n N: tokens to generate (64)\n"
    "--chat: PROMPT is a user message, rendered with the model's chat template\n"
    "--session FILE: continue the conversation saved in FILE (if it exists: PROMPT's tokens\n"
    "  are appended to it and only they are prefilled) and save it there at the end\n"
    "  (docs/FORMAT.md \"Session files\"; not with --chat)\n"
    "--json: the closing summary as one JSON object on stderr\n" CLI_TUNED_HELP;

/* cli/cmd_chat.c */
int cli_chat_turn(spill_engine *eng, const spill_chat_msg *msgs, size_t n_msgs, int n_new, int flags,
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

/* With a session FILE that exists, loads it into eng (*n_loaded: its
 * tokens); then *toks (malloc'ed, *n of them) = the engine's tokens and
 * PROMPT's (BOS only when nothing is held). A real tokenizer may turn an
 * invalid byte into U+FFFD (3 bytes). */
static int run_prompt(spill_engine *eng, const char *session, const char *prompt, int **toks,
                      int *n, int *n_loaded, double *load_s, spill_err *e) {
  struct stat sb;
  if (session && stat(session, &sb) == 0) { /* load if present */
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    SPILL_TRY(spill_session_load(eng, session, e));
    clock_gettime(CLOCK_MONOTONIC, &t1);
    *load_s = (double)(t1.tv_sec - t0.tv_sec) + (double)(t1.tv_nsec - t0.tv_nsec) / 1e9;
    *n_loaded = spill_engine_tokens(eng, NULL);
  }
  const int *held = NULL;
  const int n_held = spill_engine_tokens(eng, &held);
  const int cap = n_held + (int)strlen(prompt) * 3 + 8;
  *toks = malloc((size_t)cap * sizeof(int));
  SPILL_FAIL_IF(e, !*toks, SPILL_E_NOMEM, "out of memory");
  memcpy(*toks, held, (size_t)n_held * sizeof(int));
  SPILL_TRY(spill_tokenize(eng, prompt, n_held == 0, *toks + n_held, cap - n_held, n, e));
  *n += n_held;
  return SPILL_OK;
}

typedef struct run_report {
  const char *session;
  int n_prompt, n_loaded, n_saved; /* n_saved -1: not saved */
  int rc, interrupted;
  double load_s; /* the session's load */
} run_report;

static void print_json(spill_engine *eng, const run_report *r, const spill_run_stats *st) {
  const char *why = spill_engine_io_backend_why(eng);
  char *why_q = spill_json_quote(why, strlen(why));
  fprintf(stderr,
          "{\"tokens_prompt\": %d, \"tokens_cached\": %d, \"tokens_prefill\": %d, "
          "\"tokens_decode\": %d, \"prefill_s\": %.6f, \"decode_s\": %.6f, "
          "\"decode_tok_per_s\": %.4f, \"reads\": %llu, \"bytes_read\": %llu, "
          "\"session_loaded_tokens\": %d, \"session_load_s\": %.6f, \"session_saved_tokens\": %d, "
          "\"draft_tokens\": %llu, \"draft_accepted\": %llu, \"decode_forwards\": %llu, "
          "\"draft_switched_off\": %llu, \"ctx_switches_voluntary\": %llu, "
          "\"ctx_switches_involuntary\": %llu, \"io_backend\": \"%s\", \"io_backend_why\": %s, "
          "\"status\": \"%s\"}\n",
          r->n_prompt, st->tokens_cached, st->tokens_prefill, st->tokens_decode, st->prefill_s,
          st->decode_s, st->decode_tok_per_s, (unsigned long long)st->reads,
          (unsigned long long)st->bytes_read, r->n_loaded, r->load_s, r->n_saved,
          (unsigned long long)st->draft_tokens, (unsigned long long)st->draft_accepted,
          (unsigned long long)st->decode_forwards, (unsigned long long)st->draft_switched_off,
          (unsigned long long)st->ctx_switches_voluntary,
          (unsigned long long)st->ctx_switches_involuntary,
          spill_io_backend_kind_name(spill_engine_config(eng)->io_backend),
          why_q ? why_q : "null", spill_status_name(r->rc));
  free(why_q);
}

static void print_text(spill_engine *eng, const run_report *r, const spill_run_stats *st) {
  if (r->rc == SPILL_OK || r->interrupted || r->rc == SPILL_E_NONFINITE)
    cli_print_run_summary(eng, st);
  if (r->session)
    fprintf(stderr, "spill: session %s: %d tokens loaded, %d of the prompt's %d reused, %s\n",
            r->session, r->n_loaded, st->tokens_cached, r->n_prompt,
            r->n_saved >= 0 ? "saved" : "NOT saved (the run did not finish)");
}

int cmd_run(int argc, char **argv) {
  spill_config cfg;
  spill_config_default(&cfg);
  spill_sampling s;
  spill_sampling_default(&s);
  long n_new = 64;
  int chat = 0, json = 0;
  const char *model = NULL, *prompt = NULL, *session = NULL, *v;
  cli_tuned tuned = {0};
  for (int i = 1; i < argc; i++) {
    int k = cli_knob_flag(argc, argv, &i, CLI_KNOBS_CONFIG | CLI_KNOBS_SAMPLING, &cfg, &s);
    if (!k) k = cli_tuned_flag(argc, argv, &i, &tuned);
    if (k < 0) return 2;
    if (k) continue;
    const char *a = argv[i];
    if (!strcmp(a, "-n")) {
      if (!(v = cli_value(argc, argv, &i)) || cli_int(a, v, 0, 1L << 24, &n_new)) return 2;
    } else if (!strcmp(a, "--chat")) {
      chat = 1;
    } else if (!strcmp(a, "--session")) {
      if (!(v = cli_value(argc, argv, &i))) return 2;
      session = v;
    } else if (!strcmp(a, "--json")) {
      json = 1;
    } else if (a[0] == '-') {
      return cli_usage_error("unknown option %s", a);
    } else if (!model) model = a;
    else if (!prompt) prompt = a;
    else return cli_usage_error("unexpected argument %s", a);
  }
  if (!model || !prompt) return cli_usage_error(model ? "no prompt" : "no model");
  if (chat && session)
    return cli_usage_error("--session continues a token conversation; use it without --chat");
  if (chat && json) return cli_usage_error("--json is for plain runs; use it without --chat");
  if (cli_apply_tuned("run", model, &tuned, argc, argv, &cfg)) return 1;
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
    int rc = cli_chat_turn(eng, &msg, 1, (int)n_new, 0, &s, &g_stop, &reply, &st, &e);
    fputs("\n", stdout);
    fflush(stdout);
    if (rc == SPILL_OK || rc == SPILL_E_INTERRUPTED || rc == SPILL_E_NONFINITE)
      cli_print_run_summary(eng, &st);
    free(reply);
    spill_engine_close(eng);
    if (rc && rc != SPILL_E_INTERRUPTED) return cli_fail("run", rc, e.msg);
    return 0;
  }
  spill_err e = {0};
  int n_loaded = 0, n = 0, *toks = NULL;
  double load_s = 0;
  int rc = run_prompt(eng, session, prompt, &toks, &n, &n_loaded, &load_s, &e);
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
  rc = spill_generate_next(eng, toks, n, (int)n_new, &s,
                           session ? SPILL_GEN_REUSE | SPILL_GEN_CONTINUE_RNG : 0, on_token, NULL,
                           &g_stop, &st, &e);
  fputs("\n", stdout);
  fflush(stdout);
  /* a session is saved only after a whole run: an interrupted prefill
   * leaves a partial state, never written over the old file */
  int saved = 0;
  spill_err se = {0};
  int src = SPILL_OK;
  if (session && rc == SPILL_OK) {
    src = spill_session_save(eng, session, &se);
    saved = src == SPILL_OK;
  }
  /* The summary of what was done, after an interruption too (exit 130 like
   * a shell) and after non-finite logits (the summary notes the position);
   * another error is printed alone, not after a summary of nothing. */
  int interrupted = rc == SPILL_E_INTERRUPTED || (rc == SPILL_OK && g_stop);
  if (interrupted) fprintf(stderr, "spill run: interrupted: %s\n", rc ? e.msg : "stopped");
  const run_report r = {session, n,  n_loaded, saved ? spill_engine_tokens(eng, NULL) : -1,
                        rc,      interrupted, load_s};
  if (json) print_json(eng, &r, &st);
  else print_text(eng, &r, &st);
  free(toks);
  spill_engine_close(eng);
  if (rc && !interrupted) return cli_fail("run", rc, e.msg);
  if (src) return cli_fail("run", src, se.msg);
  return interrupted ? 130 : 0;
}
