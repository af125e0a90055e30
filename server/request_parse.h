/* server/request_parse.h: HTTP request bodies (JSON) -> a checked request
 * struct, for POST /v1/chat/completions and POST /v1/completions.
 *
 * Role: the only code that reads client JSON. Every field the server acts
 * on is type- and range-checked here; a body that is not a JSON object, a
 * known field of the wrong type or out of range, or a feature we do not
 * implement asked for with a non-default value (n > 1, logprobs, penalties,
 * tools) is rejected with an OpenAI-style error (param + message) and
 * HTTP 400. As in the OpenAI API, a field the endpoint does not define
 * (top level, in a message, a content part or stream_options) is a 400
 * with code "unknown_parameter" and param naming it. Pure: no engine, no
 * I/O, no globals; fuzzed by fuzz/fuzz_server_request.c.
 */
#ifndef SPILL_SERVER_REQUEST_PARSE_H
#define SPILL_SERVER_REQUEST_PARSE_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define SPILL_SRV_MAX_STOP 4       /* OpenAI's limit on stop sequences */
#define SPILL_SRV_MAX_MESSAGES 1024

typedef enum spill_srv_kind {
  SPILL_SRV_CHAT = 0,       /* /v1/chat/completions: messages */
  SPILL_SRV_COMPLETION = 1, /* /v1/completions: prompt */
} spill_srv_kind;

typedef struct spill_srv_message {
  char *role;    /* system | developer | user | assistant | tool (owned) */
  char *content; /* text; array-of-parts content is joined (owned) */
} spill_srv_message;

typedef struct spill_srv_request {
  spill_srv_kind kind;
  char *model;                 /* owned; required by the API */
  spill_srv_message *messages; /* chat: n_messages >= 1 (owned) */
  int n_messages;
  char *prompt;                /* completion: the prompt text (owned) */
  int max_tokens;              /* -1 = not given (up to the context) */
  float temperature;           /* default 1 (OpenAI's default) */
  float top_p;                 /* default 1 */
  int top_k;                   /* 0 = off (an extension, as in llama-server) */
  int has_seed;
  uint64_t seed;
  char *stop[SPILL_SRV_MAX_STOP]; /* owned, non-empty strings */
  int n_stop;
  int stream;
  int include_usage;           /* stream_options.include_usage */
} spill_srv_request;

/* An error for the client: HTTP status 400 and the OpenAI error object
 * {"error": {"message", "type": "invalid_request_error", "param", "code"}}. */
typedef struct spill_srv_error {
  int http_status;   /* 0 = no error */
  char type[40];
  char param[96];    /* "" = null; valid UTF-8 ("messages[2].nme") */
  char code[40];     /* "" = null */
  char message[256];
} spill_srv_error;

/* Parses body[0..len) (need not be NUL-terminated; any bytes) as a request
 * of `kind`. On success returns 0 and fills *req (caller frees with
 * spill_srv_request_free). On failure returns -1, fills *err (400) and
 * leaves *req empty (freeing it is still fine). */
int spill_srv_request_parse(spill_srv_kind kind, const char *body, size_t len,
                            spill_srv_request *req, spill_srv_error *err);
void spill_srv_request_free(spill_srv_request *req); /* NULL fine; zeroes it */

/* The i-th top-level field `kind` accepts (i from 0), NULL past the last:
 * the table behind the unknown-field check (docs/SERVER.md lists it). */
const char *spill_srv_request_field(spill_srv_kind kind, int i);

/* Fills err with status, type, param (may be NULL) and a printf message. */
void spill_srv_error_set(spill_srv_error *err, int http_status, const char *type,
                         const char *param, const char *code, const char *fmt, ...)
    __attribute__((format(printf, 6, 7)));

#ifdef __cplusplus
}
#endif
#endif
