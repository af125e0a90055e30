/* server/serve_cmd.c: `spill serve MODEL [engine knobs] [server flags]`.
 *
 * Opens one engine with the knobs given (the engine knob table's
 * --kebab-case flags, as `spill run` takes them), starts the HTTP server
 * (server/http_server.h) and drives the engine on this thread until SIGINT
 * or SIGTERM. Prints "spill serve: listening on http://HOST:PORT" on stderr
 * once it accepts connections (tests read the port from it with --port 0).
 */
#define _POSIX_C_SOURCE 200809L
#include "server/serve_cmd.h"

#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "engine/spill.h"
#include "harness/tune_profile.h"
#include "server/http_server.h"

static volatile sig_atomic_t g_stop;
static void on_signal(int sig) {
  (void)sig;
  g_stop = 1;
}

const char spill_serve_cmd_usage[] =
    "usage: spill serve MODEL [--host 127.0.0.1] [--port 8080] [--api-key KEY]\n"
    "                   [--max-queue N] [--trace-dir DIR] [--model-id ID] [--quiet]\n"
    "                   [--session-dir DIR] [--no-prefix-reuse] [--tuned FILE | --no-tuned]\n"
    "                   [engine knobs]\n"
    "An OpenAI-compatible HTTP server for one model (docs/SERVER.md):\n"
    "  POST /v1/chat/completions, POST /v1/completions, GET /v1/models,\n"
    "  GET /health, GET /metrics (Prometheus).\n"
    "One engine: generation requests run one at a time, in arrival order;\n"
    "  --max-queue N   requests allowed to wait (16); more get 429\n"
    "  --api-key KEY   require 'Authorization: Bearer KEY' (not on /health);\n"
    "                  also read from SPILL_API_KEY\n"
    "  --trace-dir DIR write each request's router trace and per-token profile\n"
    "                  to DIR/ID.trace.jsonl and DIR/ID.profile.jsonl\n"
    "  --port 0        any free port (printed on stderr)\n"
    "  --model-id ID   the model name clients use (default: the manifest's name)\n"
    "  --session-dir DIR  keep the engine's conversation across restarts:\n"
    "                  DIR/conversation.session is loaded at start (refused if it is\n"
    "                  another model's or ctx's, or damaged) and saved after each request\n"
    "  --no-prefix-reuse  prefill every prompt whole (by default a prompt that\n"
    "                  extends the held conversation prefills only its new tokens)\n"
    "Sampling is per request (temperature, top_p, top_k, seed in the body).\n"
    "Engine knobs: the flags of `spill knobs`, as for spill run, except --profile\n"
    "and --trace (per request here: --trace-dir). The tuned profile `spill tune` saved\n"
    "for the model on this machine is applied under the flags given (--tuned FILE: that\n"
    "file; --no-tuned: none; a profile of another machine or model is refused).\n";

/* Per-run outputs that are per request here (--trace-dir). */
static int per_request_knob(const char *name) {
  return !strcmp(name, "profile") || !strcmp(name, "trace");
}

/* The engine knobs of the knob table (target CONFIG) through the engine's
 * knob-flag layer (spill_knob_flag*), as `spill run` takes them. Returns 1
 * consumed, 0 not a knob flag, -1 error (printed). */
static int engine_flag(int argc, char **argv, int *i, spill_config *cfg) {
  const spill_knob *k = spill_knob_flag(argv[*i]);
  if (!k || k->target != SPILL_KNOB_CONFIG) return 0;
  if (per_request_knob(k->name)) {
    fprintf(stderr, "spill serve: %s is per request here: use --trace-dir DIR\n", argv[*i]);
    return -1;
  }
  spill_err e = {0};
  int rc = spill_knob_flag_set(k, argc, argv, i, cfg, NULL, &e);
  if (rc) {
    fprintf(stderr, "spill serve: %s (%s)\n", e.msg, spill_status_name(rc));
    return -1;
  }
  return 1;
}

/* Usage plus the engine knobs' lines, from the knob table. */
static void usage(FILE *f) {
  fputs(spill_serve_cmd_usage, f);
  fprintf(f, "engine knobs (experiment-config keys in snake_case; `spill knobs`):\n");
  for (int i = 0; i < spill_knob_count(); i++) {
    const spill_knob *k = spill_knob_at(i);
    char line[512];
    if (k->target != SPILL_KNOB_CONFIG || per_request_knob(k->name)) continue;
    spill_knob_flag_help(k, line, sizeof line);
    fprintf(f, "%s\n", line);
  }
}

static int parse_int(const char *flag, const char *v, long lo, long hi, int *out) {
  char *end;
  errno = 0;
  long x = v ? strtol(v, &end, 10) : 0;
  if (!v || errno || end == v || *end || x < lo || x > hi) {
    fprintf(stderr, "spill serve: %s: expected an integer in [%ld, %ld]\n", flag, lo, hi);
    return -1;
  }
  *out = (int)x;
  return 0;
}

/* The model's tuned profile (harness/tune_profile.h), under the flags given:
 * 0, or the exit code (2 usage, 1 refused). */
static int apply_tuned(const char *model, const char *tuned, int no_tuned, int argc, char **argv,
                       spill_config *cfg) {
  if (no_tuned && tuned) {
    fprintf(stderr, "spill serve: --tuned and --no-tuned together\n");
    return 2;
  }
  if (no_tuned) return 0;
  spill_tune_argv av = {argc, argv};
  char note[1024];
  spill_err e = {0};
  int rc = spill_tune_for_model(model, tuned, cfg, spill_tune_skip_argv, &av, note, sizeof note, &e);
  if (rc) {
    fprintf(stderr, "spill serve: %s (%s)\n", e.msg, spill_status_name(rc));
    return 1;
  }
  if (note[0]) fprintf(stderr, "spill serve: %s\n", note);
  return 0;
}

int spill_serve_cmd(int argc, char **argv) {
  spill_config cfg;
  spill_config_default(&cfg);
  spill_server_opts o;
  memset(&o, 0, sizeof o);
  o.host = "127.0.0.1";
  o.port = 8080;
  o.max_queue = 16;
  o.api_key = getenv("SPILL_API_KEY");
  const char *model = NULL, *tuned = NULL;
  int no_tuned = 0;
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i];
    if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
      usage(stdout);
      return 0;
    }
    int k = engine_flag(argc, argv, &i, &cfg);
    if (k < 0) return 2;
    if (k) continue;
    const char *v = i + 1 < argc ? argv[i + 1] : NULL;
    if (!strcmp(a, "--host") && v) o.host = argv[++i];
    else if (!strcmp(a, "--port")) {
      if (parse_int(a, v, 0, 65535, &o.port)) return 2;
      i++;
    } else if (!strcmp(a, "--max-queue")) {
      if (parse_int(a, v, 0, 100000, &o.max_queue)) return 2;
      i++;
    } else if (!strcmp(a, "--api-key") && v) o.api_key = argv[++i];
    else if (!strcmp(a, "--trace-dir") && v) o.trace_dir = argv[++i];
    else if (!strcmp(a, "--model-id") && v) o.model_id = argv[++i];
    else if (!strcmp(a, "--session-dir") && v) o.session_dir = argv[++i];
    else if (!strcmp(a, "--no-prefix-reuse")) o.no_prefix_reuse = 1;
    else if (!strcmp(a, "--no-tuned")) no_tuned = 1;
    else if (!strcmp(a, "--tuned") && v) tuned = argv[++i];
    else if (!strcmp(a, "--quiet")) o.quiet = 1;
    else if (a[0] == '-') {
      fprintf(stderr, "spill serve: unknown option or missing value: %s\n", a);
      usage(stderr);
      return 2;
    } else if (!model) model = a;
    else {
      fprintf(stderr, "spill serve: unexpected argument %s\n", a);
      usage(stderr);
      return 2;
    }
  }
  if (!model) {
    usage(stderr);
    return 2;
  }
  if (o.trace_dir) {
    struct stat sb;
    if (mkdir(o.trace_dir, 0777) != 0 && errno != EEXIST) {
      fprintf(stderr, "spill serve: --trace-dir %s: %s\n", o.trace_dir, strerror(errno));
      return 1;
    }
    if (stat(o.trace_dir, &sb) != 0 || !S_ISDIR(sb.st_mode)) {
      fprintf(stderr, "spill serve: --trace-dir %s: not a directory\n", o.trace_dir);
      return 1;
    }
  }
  if (o.session_dir) {
    struct stat sb;
    if (mkdir(o.session_dir, 0777) != 0 && errno != EEXIST) {
      fprintf(stderr, "spill serve: --session-dir %s: %s\n", o.session_dir, strerror(errno));
      return 1;
    }
    if (stat(o.session_dir, &sb) != 0 || !S_ISDIR(sb.st_mode)) {
      fprintf(stderr, "spill serve: --session-dir %s: not a directory\n", o.session_dir);
      return 1;
    }
  }
  spill_err e = {0};
  int trc = apply_tuned(model, tuned, no_tuned, argc, argv, &cfg);
  if (trc) return trc;
  spill_engine *eng = NULL;
  int rc = spill_engine_open(model, &cfg, &eng, &e);
  if (rc) {
    fprintf(stderr, "spill serve: %s (%s)\n", e.msg, spill_status_name(rc));
    return 1;
  }
  const char *w = spill_engine_warnings(eng);
  if (w && *w) fprintf(stderr, "spill serve: warning: %s", w);
  struct sigaction sa;
  memset(&sa, 0, sizeof sa);
  sa.sa_handler = on_signal;
  sigaction(SIGINT, &sa, NULL);
  sigaction(SIGTERM, &sa, NULL);
  signal(SIGPIPE, SIG_IGN);
  spill_server *srv = NULL;
  rc = spill_server_open(eng, &o, &srv, &e);
  if (rc) {
    fprintf(stderr, "spill serve: %s (%s)\n", e.msg, spill_status_name(rc));
    spill_engine_close(eng);
    return 1;
  }
  int v6 = strchr(o.host, ':') != NULL;
  fprintf(stderr, "spill serve: model %s, ctx %d, max queue %d%s\n", model,
          spill_engine_config(eng)->ctx, o.max_queue, o.api_key && *o.api_key ? ", API key required" : "");
  fprintf(stderr, "spill serve: listening on http://%s%s%s:%d\n", v6 ? "[" : "", o.host,
          v6 ? "]" : "", spill_server_port(srv));
  fflush(stderr);
  spill_server_run(srv, &g_stop);
  fprintf(stderr, "spill serve: shutting down\n");
  spill_server_close(srv);
  spill_engine_close(eng);
  return 0;
}
