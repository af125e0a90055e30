/* server/http_server.h: the OpenAI-compatible HTTP server around one engine
 * (docs/SERVER.md).
 *
 * Role: a front door (http_gate.h) accepts connections and hands those
 * whose request head is whole and well framed to libmicrohttpd, which runs
 * one thread per connection; those threads parse
 * and check requests and put generation jobs on a bounded FIFO queue. One
 * thread -- the caller of spill_server_run, which owns the engine -- takes
 * jobs one at a time and drives spill_generate; tokens flow back to the
 * connection thread (server-sent events or one JSON body). A connection
 * whose peer goes away cancels its job: the token callback stops the
 * generation at the next token. Uses engine/spill.h only.
 */
#ifndef SPILL_SERVER_HTTP_SERVER_H
#define SPILL_SERVER_HTTP_SERVER_H

#include <signal.h>
#include <stddef.h>

#include "engine/spill.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct spill_server_opts {
  const char *host;      /* bind address (IPv4 or IPv6 literal); NULL = 127.0.0.1 */
  int port;              /* 0 = any free port (see spill_server_port) */
  const char *api_key;   /* NULL/"" = no key; else "Authorization: Bearer KEY" */
  int max_queue;         /* generation requests allowed to wait; more get 429 */
  const char *trace_dir; /* per-request router trace + per-token profile, or NULL */
  const char *model_id;  /* the id served in /v1/models and required in requests */
  size_t max_body;       /* request body cap in bytes (413 past it); 0 = 1 MiB */
  int quiet;             /* no access log on stderr */
  /* The engine's conversation across restarts: loaded at open from
   * DIR/conversation.session when it exists (a session of another model or
   * ctx, or a damaged one, fails the open with its error), saved there
   * after every generation. NULL = none. */
  const char *session_dir;
  int no_prefix_reuse; /* 1: every request prefills its whole prompt (the reference) */
} spill_server_opts;

typedef struct spill_server spill_server;

/* Starts listening. eng is borrowed (must outlive the server) and must only
 * be driven by spill_server_run's thread from now on. On success *out is
 * owned by the caller: spill_server_close. Errors: SPILL_E_IO (bind, with
 * the reason), SPILL_E_CONFIG (bad host), SPILL_E_NOMEM, and
 * spill_session_load's for a session_dir's file. */
int spill_server_open(spill_engine *eng, const spill_server_opts *o, spill_server **out,
                      spill_err *e);
/* The port actually bound. */
int spill_server_port(const spill_server *s);
/* Serves generation jobs on the calling thread until *stop becomes non-zero
 * (a signal handler may set it); then fails the queued jobs with 503 and
 * cancels the running one. */
void spill_server_run(spill_server *s, volatile sig_atomic_t *stop);
/* Stops listening, lets the replies already decided go out (up to 10 s:
 * queued jobs' 503s, a stopped generation's end), then closes every
 * connection (waits for their threads) and frees. NULL fine. */
void spill_server_close(spill_server *s);

#ifdef __cplusplus
}
#endif
#endif
