/* server/http_gate.h: the server's front door (docs/SERVER.md "Connections").
 *
 * One thread owns the listening socket and every connection until its
 * request head (request line and headers) has arrived whole: it peeks
 * (MSG_PEEK, nothing consumed) until the blank line, checks the head's
 * framing (spill_srv_head_parse below) and then either answers it itself
 * (a JSON error, or what the owner's admit callback answers, such as
 * /health) or hands the socket to libmicrohttpd, which reads the same bytes.
 * So a connection that sends nothing, or half a head, costs no
 * libmicrohttpd slot and no thread: at most max_pending wait here, each at
 * most header_ms, and one more closes the oldest waiting one (answered 408).
 * libmicrohttpd never sees a head it would answer with its own HTML error
 * (bad Content-Length, chunked or unknown Transfer-Encoding, a malformed
 * line): the gate answers those in JSON, at once.
 * Depends on libc only; the policy (auth, endpoints) is the owner's. */
#ifndef SPILL_SERVER_HTTP_GATE_H
#define SPILL_SERVER_HTTP_GATE_H

#include <stddef.h>
#include <stdint.h>
#include <sys/socket.h>

#ifdef __cplusplus
extern "C" {
#endif

/* A request head, parsed: pointers into the peeked bytes (not
 * NUL-terminated; lengths given), valid during the admit callback only. */
typedef struct spill_srv_head {
  size_t head_len;            /* bytes up to and including the blank line */
  const char *method, *path;  /* "GET", "/health" (query string included) */
  size_t method_len, path_len;
  const char *auth;           /* the Authorization value, or NULL */
  size_t auth_len;
  int has_length;             /* a Content-Length was given */
  uint64_t content_length;
} spill_srv_head;

/* Parses the head at the start of buf[0..n). Returns 0 (out filled), 1 if
 * the head is not complete yet (and fits max_head bytes), or an HTTP status
 * with the reason in why (why_n bytes): 400 (a malformed request line or
 * header line, a bad or repeated Content-Length), 411 (a Transfer-Encoding,
 * chunked included, or a POST without Content-Length: bodies are sent with
 * Content-Length), 413 (Content-Length over max_body), 431 (no blank line
 * within max_head bytes), 505 (not HTTP/1.0 or 1.1). Never reads past n. */
int spill_srv_head_parse(const char *buf, size_t n, size_t max_head, uint64_t max_body,
                         spill_srv_head *out, char *why, size_t why_n);

/* What the owner does with a complete, well-formed head. */
typedef enum spill_srv_gate_verdict {
  SPILL_GATE_ADMIT = 0,  /* the owner took the socket (libmicrohttpd has it) */
  SPILL_GATE_ANSWER = 1, /* the gate writes *status / *body and closes */
} spill_srv_gate_verdict;

typedef struct spill_srv_gate_opts {
  int listen_fd;         /* bound and listening; the gate closes it */
  int max_pending;       /* connections waiting for their head (64) */
  int header_ms;         /* per connection, from accept (10000) */
  size_t max_head;       /* head bytes (8192) */
  uint64_t max_body;     /* Content-Length cap (413 above) */
  /* Called on the gate's thread for each complete head: takes fd (returns
   * ADMIT) or leaves it and sets *status and *body (malloc'ed JSON, taken;
   * NULL: a generic one). Must not block. */
  spill_srv_gate_verdict (*admit)(void *user, int fd, const struct sockaddr *addr,
                                  socklen_t addr_len, const spill_srv_head *h, int *status,
                                  char **body);
  /* Counts an answer the gate wrote itself (path may be NULL: none parsed). */
  void (*answered)(void *user, const char *path, size_t path_len, int status);
  void *user;
} spill_srv_gate_opts;

typedef struct spill_srv_gate spill_srv_gate;

/* Starts the gate's thread. 0, or -1 with errno (out of memory, thread). */
int spill_srv_gate_open(const spill_srv_gate_opts *o, spill_srv_gate **out);
/* Stops accepting: pending connections are answered 503 and closed, the
 * listening socket closed, the thread joined. NULL is fine. */
void spill_srv_gate_close(spill_srv_gate *g);

/* Writes a whole JSON reply (status line, Content-Type, Content-Length,
 * Connection: close) to fd without blocking for long (best effort: a
 * client that does not read loses it). */
void spill_srv_gate_reply(int fd, int status, const char *json);

#ifdef __cplusplus
}
#endif

#endif
