/* cli/cmd_chat.c: `spill chat MODEL`: a REPL that keeps the conversation,
 * renders it with the model's own chat template (engine/tok, spill_tok_chat_render),
 * streams the reply as it is decoded (whole UTF-8 characters) to stdout and
 * prints per-turn stats on stderr. Every turn re-runs the whole conversation
 * (spill_generate resets the sequence), except with --session FILE: then a
 * turn keeps the state of the conversation so far (spill_generate_next with
 * SPILL_GEN_REUSE | SPILL_GEN_CONTINUE_RNG) and, after every turn, the
 * engine's state is saved to FILE (spill_session_save) and the messages to
 * FILE.messages.json, so that the next `spill chat --session FILE` goes on
 * where this one stopped (docs/FORMAT.md "Session files").
 * Lines: text = a user message; /reset clears the conversation; /exit or
 * end of input quits. Needs a model with a tokenizer and a chat template
 * (an imported checkpoint). A Kimi K3 (XTML) or gpt-oss (harmony) reply
 * is split as the server splits it (server/reply_channels.h): the think
 * (analysis) channel goes to stderr after "[think] ", the response to
 * stdout, and only the response is kept in the conversation. Client of spill.h (and the server's pure splitter).
 */
#define _POSIX_C_SOURCE 200809L
#include <cjson/cJSON.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "cli/cli_util.h"
#include "cli/commands.h"
#include "engine/spill.h"
#include "server/reply_channels.h"

const char cmd_chat_usage[] =
    "usage: spill chat MODEL [--system TEXT] [-n N] [--session FILE] [sampling knobs]\n"
    "                  [engine knobs]\n"
    "  reads user messages line by line from stdin (/reset, /exit), streams each reply\n"
    "  to stdout and its stats to stderr; -n N: at most N tokens per reply (256);\n"
    "  --session FILE: resume the conversation FILE holds (if it exists) and save it\n"
    "  after every turn (FILE and FILE.messages.json)\n" CLI_TUNED_HELP;

static volatile int g_stop;
static void on_sigint(int sig) {
  (void)sig;
  g_stop = 1;
}

typedef struct turn {
  const spill_tok *tok;
  char *text; /* the reply so far (the response of an XTML reply) */
  size_t n, cap;
  int oom;
  volatile int *stop; /* Ctrl-C */
  int split;          /* an XTML or harmony reply: ch splits it */
  spill_srv_channels ch;
  int32_t mark[8];    /* the format's marker tokens' ids */
  int n_mark;
  int thinking;       /* "[think] " printed, its line not ended */
} turn;

static void keep(turn *t, const char *text, size_t k) {
  if (t->n + k + 1 > t->cap) {
    size_t cap = (t->cap ? t->cap * 2 : 256) + k;
    char *p = realloc(t->text, cap);
    if (!p) { t->oom = 1; return; }
    t->text = p;
    t->cap = cap;
  }
  memcpy(t->text + t->n, text, k);
  t->n += k;
  t->text[t->n] = 0;
  fwrite(text, 1, k, stdout);
  fflush(stdout);
}

/* An XTML reply's decided text: the think channel to stderr, the response
 * kept and printed; final: the reply ended. */
static void split_out(turn *t, int final) {
  const char *p;
  if (final && spill_srv_channels_finish(&t->ch)) t->oom = 1;
  size_t k = spill_srv_channels_take(&t->ch, 0, &p);
  if (k) {
    fputs(t->thinking ? "" : "[think] ", stderr);
    fwrite(p, 1, k, stderr);
    t->thinking = 1;
  }
  k = spill_srv_channels_take(&t->ch, 1, &p);
  if ((k || final) && t->thinking) {
    fputs("\n", stderr);
    t->thinking = 0;
  }
  if (k) keep(t, p, k);
}

static int on_token(void *user, int token, const char *text, const spill_run_stats *ts) {
  (void)ts;
  turn *t = user;
  if (token == spill_tok_eos(t->tok)) return 1; /* end of the reply */
  size_t k = strlen(text);
  if (!t->split) {
    keep(t, text, k);
    return *t->stop || t->oom;
  }
  for (int m = 0; m < t->n_mark; m++) /* the markers print nothing: the splitter reads their text */
    if (token == t->mark[m]) {
      text = spill_tok_piece(t->tok, token, &k);
      if (!text) k = 0;
    }
  if (k && spill_srv_channels_push(&t->ch, text, k)) t->oom = 1;
  split_out(t, 0);
  /* harmony's <|call|> ends the turn as EOS does */
  return *t->stop || t->oom || spill_srv_channels_turn_ends(t->split, text, k);
}

/* Renders msgs with the model's template (under the default render budget;
 * *stop, set by Ctrl-C, stops the rendering within a poll of the budget and
 * the generation at the next token) and generates the reply; *reply gets it
 * (malloc'ed). flags: spill_generate_next's (0: the whole conversation is
 * run). Shared with `spill run --chat`. */
int cli_chat_turn(spill_engine *eng, const spill_chat_msg *msgs, size_t n_msgs, int n_new,
                  int flags, const spill_sampling *s, volatile int *stop, char **reply,
                  spill_run_stats *st, spill_err *e);
int cli_chat_turn(spill_engine *eng, const spill_chat_msg *msgs, size_t n_msgs, int n_new,
                  int flags, const spill_sampling *s, volatile int *stop, char **reply,
                  spill_run_stats *st, spill_err *e) {
  const spill_tok *tok = spill_engine_tokenizer(eng);
  *reply = NULL;
  SPILL_FAIL_IF(e, !tok, SPILL_E_UNSUPPORTED,
                "chat: this model has no tokenizer (a synthetic model speaks bytes; import a "
                "checkpoint)");
  char *prompt = NULL;
  spill_chat_budget b;
  spill_chat_budget_default(&b);
  b.stop_flag = stop;
  int rc = spill_tok_chat_render_budget(tok, msgs, n_msgs, 1, &b, &prompt, e);
  if (rc == SPILL_E_INTERRUPTED) { /* Ctrl-C while rendering: an empty turn */
    memset(st, 0, sizeof *st);
    *reply = calloc(1, 1);
    return rc;
  }
  SPILL_TRY(rc);
  int cap = (int)strlen(prompt) * 3 + 8, n = 0;
  int *toks = malloc((size_t)cap * sizeof(int));
  rc = toks ? spill_tokenize(eng, prompt, 0, toks, cap, &n, e)
                : spill_err_set(e, SPILL_E_NOMEM, "chat: out of memory");
  turn t = {tok, NULL, 0, 0, 0, stop, 0, {0}, {0}, 0, 0};
  /* split when the prompt opens an XTML channel or a harmony header and the
   * tokenizer has every marker of that format as a special token */
  t.split = spill_srv_channels_detect(prompt, strlen(prompt));
  const char *const *texts;
  t.n_mark = (int)spill_srv_channels_markers(t.split, &texts);
  for (int m = 0; m < t.n_mark; m++) {
    t.mark[m] = spill_tok_find(tok, texts[m], strlen(texts[m]));
    if (t.mark[m] < 0 || !spill_tok_is_special(tok, t.mark[m])) t.split = SPILL_SRV_CH_OFF;
  }
  if (t.split) spill_srv_channels_init(&t.ch, t.split);
  free(prompt);
  if (rc == SPILL_OK)
    rc = spill_generate_next(eng, toks, n, n_new, s, flags, on_token, &t, stop, st, e);
  if (t.split) {
    split_out(&t, 1);
    spill_srv_channels_free(&t.ch);
  }
  free(toks);
  if (rc == SPILL_OK && t.oom) rc = spill_err_set(e, SPILL_E_NOMEM, "chat: out of memory");
  if (rc != SPILL_OK && rc != SPILL_E_INTERRUPTED) {
    free(t.text);
    return rc;
  }
  *reply = t.text ? t.text : calloc(1, 1);
  return rc;
}

/* ---- --session: the messages beside the engine's session file ---- */

static const char *const k_roles[3] = {"system", "user", "assistant"};

/* FILE.messages.json: [{"role": "system|user|assistant", "content": TEXT}, ...],
 * written atomically after the engine's session. */
static int msgs_save(const char *path, const spill_chat_msg *msgs, size_t n, spill_err *e) {
  size_t cap = 64, len = 0;
  char *buf = malloc(cap);
  int rc = buf ? SPILL_OK : spill_err_set(e, SPILL_E_NOMEM, "chat: out of memory");
  for (size_t i = 0; i <= n && rc == SPILL_OK; i++) {
    char *q = i < n ? spill_json_quote(msgs[i].content, strlen(msgs[i].content)) : NULL;
    if (i < n && !q) {
      rc = spill_err_set(e, SPILL_E_NOMEM, "chat: out of memory");
      break;
    }
    const size_t need = len + (q ? strlen(q) : 0) + 64;
    if (need > cap) {
      char *b2 = realloc(buf, need * 2);
      if (!b2) {
        free(q);
        rc = spill_err_set(e, SPILL_E_NOMEM, "chat: out of memory");
        break;
      }
      buf = b2;
      cap = need * 2;
    }
    if (i < n)
      len += (size_t)snprintf(buf + len, cap - len, "%s{\"role\": \"%s\", \"content\": %s}",
                              i ? ",\n " : "[", msgs[i].role, q);
    else
      len += (size_t)snprintf(buf + len, cap - len, "%s]\n", n ? "" : "[");
    free(q);
  }
  if (rc == SPILL_OK) rc = spill_write_file_atomic(path, buf, len, e);
  free(buf);
  return rc;
}

/* Reads FILE.messages.json into msgs/owned (roles point to k_roles; the
 * contents are owned); SPILL_E_SESSION naming the file and entry for
 * anything msgs_save would not write. */
static int msgs_load(const char *path, spill_chat_msg **msgs, char ***owned, size_t *n,
                     size_t *cap, spill_err *e) {
  char *text = NULL;
  size_t len = 0;
  SPILL_TRY(spill_read_file(path, (size_t)1 << 28, &text, &len, e));
  cJSON *arr = NULL;
  int rc = spill_json_parse(text, len, path, SPILL_E_SESSION, &arr, e);
  free(text);
  if (rc < 0) return rc;
  if (!cJSON_IsArray(arr)) rc = spill_err_set(e, SPILL_E_SESSION, "%s: expected an array", path);
  size_t i = 0;
  for (const cJSON *m = arr ? arr->child : NULL; m && rc == SPILL_OK; m = m->next, i++) {
    const cJSON *r = cJSON_GetObjectItemCaseSensitive(m, "role");
    const cJSON *c = cJSON_GetObjectItemCaseSensitive(m, "content");
    int role = -1;
    for (int k = 0; k < 3 && cJSON_IsString(r); k++)
      if (!strcmp(r->valuestring, k_roles[k])) role = k;
    if (!cJSON_IsObject(m) || role < 0 || !cJSON_IsString(c) || cJSON_GetArraySize(m) != 2) {
      rc = spill_err_set(e, SPILL_E_SESSION,
                         "%s: message %zu: expected {\"role\": system|user|assistant, "
                         "\"content\": a string}", path, i);
      break;
    }
    if (*n + 2 > *cap) {
      spill_chat_msg *m2 = realloc(*msgs, *cap * 2 * sizeof *m2);
      if (m2) *msgs = m2;
      char **o2 = m2 ? realloc(*owned, *cap * 2 * sizeof *o2) : NULL;
      if (o2) *owned = o2;
      if (!m2 || !o2) {
        rc = spill_err_set(e, SPILL_E_NOMEM, "chat: out of memory");
        break;
      }
      *cap *= 2;
    }
    (*owned)[*n] = strdup(c->valuestring);
    if (!(*owned)[*n]) {
      rc = spill_err_set(e, SPILL_E_NOMEM, "chat: out of memory");
      break;
    }
    (*msgs)[*n] = (spill_chat_msg){k_roles[role], (*owned)[*n]};
    (*n)++;
  }
  cJSON_Delete(arr);
  return rc;
}

/* --session FILE at start: nothing when FILE does not exist; else the
 * engine's conversation from FILE and the messages from FILE.messages.json
 * (both needed); a --system differing from the saved one is refused. */
static int session_resume(spill_engine *eng, const char *file, const char *mfile,
                          const char *system, spill_chat_msg **msgs, char ***owned, size_t *n,
                          size_t *cap, spill_err *e) {
  struct stat sb;
  if (stat(file, &sb) != 0) return SPILL_OK;
  SPILL_TRY(spill_session_load(eng, file, e));
  SPILL_FAIL_IF(e, stat(mfile, &sb) != 0, SPILL_E_SESSION,
                "%s: missing (%s holds a chat's state without its messages)", mfile, file);
  SPILL_TRY(msgs_load(mfile, msgs, owned, n, cap, e));
  const int has_sys = *n > 0 && !strcmp((*msgs)[0].role, "system");
  SPILL_FAIL_IF(e, system && (!has_sys || strcmp((*msgs)[0].content, system)), SPILL_E_SESSION,
                "%s: --system differs from the resumed conversation's system message", mfile);
  return SPILL_OK;
}

static int session_save(spill_engine *eng, const char *file, const char *mfile,
                        const spill_chat_msg *msgs, size_t n, spill_err *e) {
  SPILL_TRY(spill_session_save(eng, file, e));
  return msgs_save(mfile, msgs, n, e);
}

/* Ctrl-C stops the reply being generated, not the REPL */
static void catch_sigint(void) {
  struct sigaction sa;
  memset(&sa, 0, sizeof sa);
  sa.sa_handler = on_sigint;
  sigaction(SIGINT, &sa, NULL);
}

int cmd_chat(int argc, char **argv) {
  spill_config cfg;
  spill_config_default(&cfg);
  spill_sampling s;
  spill_sampling_default(&s);
  long n_new = 256;
  const char *model = NULL, *system = NULL, *session = NULL, *v;
  cli_tuned tuned = {0};
  for (int i = 1; i < argc; i++) {
    int k = cli_knob_flag(argc, argv, &i, CLI_KNOBS_CONFIG | CLI_KNOBS_SAMPLING, &cfg, &s);
    if (!k) k = cli_tuned_flag(argc, argv, &i, &tuned);
    if (k < 0) return 2;
    if (k) continue;
    const char *a = argv[i];
    if (!strcmp(a, "-n")) {
      if (!(v = cli_value(argc, argv, &i)) || cli_int(a, v, 1, 1L << 24, &n_new)) return 2;
    } else if (!strcmp(a, "--session")) {
      if (!(session = cli_value(argc, argv, &i))) return 2;
    } else if (!strcmp(a, "--system")) {
      if (!(system = cli_value(argc, argv, &i))) return 2;
    } else if (a[0] == '-') {
      return cli_usage_error("unknown option %s", a);
    } else if (!model) model = a;
    else return cli_usage_error("unexpected argument %s", a);
  }
  if (!model) return cli_usage_error("no model");
  if (cli_apply_tuned("chat", model, &tuned, argc, argv, &cfg)) return 1;
  spill_engine *eng;
  if (cli_open_engine("chat", model, &cfg, &eng)) return 1;
  if (!spill_engine_tokenizer(eng) || !spill_tok_chat_template(spill_engine_tokenizer(eng))) {
    spill_engine_close(eng);
    fprintf(stderr, "spill chat: %s has no tokenizer with a chat template (synthetic models speak "
                    "bytes; import a checkpoint)\n", model);
    return 1;
  }
  catch_sigint();
  size_t n = 0, cap = 16;
  spill_chat_msg *msgs = malloc(cap * sizeof *msgs);
  char **owned = malloc(cap * sizeof *owned); /* the strings msgs point to */
  int status = 0, turns = 0;
  char *line = NULL;
  size_t lcap = 0;
  if (!msgs || !owned) status = 1;
  char mfile[4096];
  spill_err se = {0};
  if (session && !status &&
      (spill_path_fmt(mfile, sizeof mfile, &se, "%s.messages.json", session) < 0 ||
       session_resume(eng, session, mfile, system, &msgs, &owned, &n, &cap, &se) < 0))
    status = cli_fail("chat", se.code, se.msg);
  const int resumed = n > 0;
  if (session && resumed)
    fprintf(stderr, "spill chat: session %s: %zu messages, %d tokens resumed\n", session, n,
            spill_engine_tokens(eng, NULL));
  if (system && !status && !resumed) {
    owned[n] = strdup(system);
    msgs[n] = (spill_chat_msg){"system", owned[n]};
    n++;
  }
  while (!status) {
    fprintf(stderr, "> ");
    ssize_t r = getline(&line, &lcap, stdin);
    if (r < 0) break;
    while (r > 0 && (line[r - 1] == '\n' || line[r - 1] == '\r')) line[--r] = 0;
    if (!strcmp(line, "/exit")) break;
    if (!strcmp(line, "/reset")) {
      const size_t keep = n > 0 && !strcmp(msgs[0].role, "system") ? 1 : 0;
      for (size_t i = keep; i < n; i++) free(owned[i]);
      n = keep;
      continue;
    }
    if (r == 0) continue;
    if (n + 2 > cap) {
      cap *= 2;
      spill_chat_msg *m2 = realloc(msgs, cap * sizeof *m2);
      if (m2) msgs = m2;
      char **o2 = m2 ? realloc(owned, cap * sizeof *o2) : NULL;
      if (o2) owned = o2;
      if (!m2 || !o2) { status = 1; break; }
    }
    owned[n] = strdup(line);
    msgs[n] = (spill_chat_msg){"user", owned[n]};
    n++;
    char *reply = NULL;
    spill_run_stats st;
    spill_err e = {0};
    g_stop = 0;
    const int flags = session ? SPILL_GEN_REUSE | SPILL_GEN_CONTINUE_RNG : 0;
    int rc = cli_chat_turn(eng, msgs, n, (int)n_new, flags, &s, &g_stop, &reply, &st, &e);
    fputs("\n", stdout);
    fflush(stdout);
    if (rc && rc != SPILL_E_INTERRUPTED) {
      status = cli_fail("chat", rc, e.msg);
      n--;
      free(owned[n]);
      break;
    }
    turns++;
    fprintf(stderr, "spill chat: turn %d: %d prompt tokens (%d reused) in %.2f s, %d reply tokens "
                    "in %.2f s (%.2f tok/s), hits %llu, misses %llu%s\n",
            turns, st.tokens_prefill, st.tokens_cached, st.prefill_s, st.tokens_decode, st.decode_s,
            st.decode_s > 0 ? st.tokens_decode / st.decode_s : 0.0,
            (unsigned long long)st.decode_hits, (unsigned long long)st.decode_misses,
            rc == SPILL_E_INTERRUPTED ? " (interrupted)" : "");
    owned[n] = reply;
    msgs[n] = (spill_chat_msg){"assistant", reply};
    n++;
    /* a whole turn: save the conversation (an interrupted one is not saved) */
    if (session && rc == SPILL_OK && session_save(eng, session, mfile, msgs, n, &e) < 0) {
      status = cli_fail("chat", e.code, e.msg);
      break;
    }
  }
  for (size_t i = 0; i < n; i++) free(owned[i]);
  free(owned);
  free(msgs);
  free(line);
  spill_engine_close(eng);
  return status;
}
