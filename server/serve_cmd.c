/* server/serve_cmd.c: `spill serve MODEL [engine knobs] [server flags]`.
 *
 * Opens one engine with the knobs given (the same --kebab-case flags as
 * `spill run`, validated by spill_config_set), starts the HTTP server
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
#include "server/http_server.h"

static volatile sig_atomic_t g_stop;
static void on_signal(int sig) {
  (void)sig;
  g_stop = 1;
}

const char spill_serve_cmd_usage[] =
    "usage: spill serve MODEL [--host 127.0.0.1] [--port 8080] [--api-key KEY]\n"
    "                   [--max-queue N] [--trace-dir DIR] [--model-id ID] [--quiet]\n"
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
    "engine knobs: --budget SIZE --ctx N --threads N --prefill-chunk N --io-threads N\n"
    "  --io-depth N --io-backend pread|uring --storage direct|pagecache|mmap\n"
    "  --trunk read|mmap|mlock --policy lru|lfru|wtinylfu|nextuse --lookahead N\n"
    "  --lookahead-depth N --lookahead-prefill --verify --overlap true|false\n"
    "  --io-throttle RATE --cache-slots N --seed N --usable-ram SIZE\n"
    "  --routing-trace FILE\n";

/* Engine knobs as flags (the names of cli/cmd_run.c; per-run --profile and
 * --trace are per request here: --trace-dir). 1 consumed, 0 not a knob,
 * -1 error (printed). */
static int engine_flag(int argc, char **argv, int *i, spill_config *cfg) {
  const char *a = argv[*i];
  if (strncmp(a, "--", 2) != 0) return 0;
  static const char *const bools[] = {"verify", "lookahead-prefill", NULL};
  static const char *const valued[] = {
      "budget", "usable-ram", "cache-slots", "ctx", "threads", "prefill-chunk", "io-threads",
      "io-depth", "io-backend", "storage", "trunk", "policy", "lookahead", "lookahead-depth",
      "io-throttle", "seed", "overlap", "routing-trace", NULL};
  char key[64];
  snprintf(key, sizeof key, "%s", a + 2);
  for (char *p = key; *p; p++)
    if (*p == '-') *p = '_';
  spill_err e = {0};
  for (const char *const *b = bools; *b; b++)
    if (!strcmp(a + 2, *b)) {
      if (spill_config_set(cfg, key, "true", &e)) goto bad;
      return 1;
    }
  for (const char *const *v = valued; *v; v++)
    if (!strcmp(a + 2, *v)) {
      if (*i + 1 >= argc) {
        fprintf(stderr, "spill serve: %s needs a value\n", a);
        return -1;
      }
      if (spill_config_set(cfg, key, argv[++*i], &e)) goto bad;
      return 1;
    }
  return 0;
bad:
  fprintf(stderr, "spill serve: %s (%s)\n", e.msg, spill_status_name(e.code));
  return -1;
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

int spill_serve_cmd(int argc, char **argv) {
  spill_config cfg;
  spill_config_default(&cfg);
  spill_server_opts o;
  memset(&o, 0, sizeof o);
  o.host = "127.0.0.1";
  o.port = 8080;
  o.max_queue = 16;
  o.api_key = getenv("SPILL_API_KEY");
  const char *model = NULL;
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i];
    if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
      fputs(k_usage, stdout);
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
    else if (!strcmp(a, "--quiet")) o.quiet = 1;
    else if (a[0] == '-') {
      fprintf(stderr, "spill serve: unknown option or missing value: %s\n%s", a, k_usage);
      return 2;
    } else if (!model) model = a;
    else {
      fprintf(stderr, "spill serve: unexpected argument %s\n%s", a, k_usage);
      return 2;
    }
  }
  if (!model) {
    fputs(k_usage, stderr);
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
  spill_err e = {0};
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
