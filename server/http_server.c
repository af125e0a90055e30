/* server/http_server.c: routes, the job queue and the engine loop
 * (http_server.h, docs/SERVER.md).
 *
 * Threads: libmicrohttpd's listener plus one thread per connection; the
 * engine thread is spill_server_run's caller. A job is shared by its
 * connection thread and the engine thread (refcount, both under s->mu); the
 * engine thread appends output (SSE event bytes, or the text for a JSON
 * reply) and signals the job's condition variable; the connection thread
 * waits on it in slices of 50 ms and between slices polls its socket, so a
 * client that goes away sets job->cancel, which the token callback returns
 * to spill_generate: the generation stops at the next token.
 * The queue holds jobs not yet started; past max_queue waiting jobs a new
 * one is refused with 429 before it is queued.
 * Connections: the gate (http_gate.h) owns the listening socket and every
 * connection until its request head is whole and well framed; it answers
 * /health, a missing or wrong API key and framing errors itself, so idle or
 * slow sockets never hold a libmicrohttpd slot. Every reply carries
 * "Connection: close": one request per connection, each through the gate.
 * A peer is gone when its socket reports a hang-up or an error (a reset,
 * e.g. after a write to a closed client), not when it has only shut down
 * its sending side: a half-closed client still gets its reply.
 */
#define _GNU_SOURCE
#include "server/http_server.h"

#include <arpa/inet.h>
#include <cjson/cJSON.h>
#include <errno.h>
#include <microhttpd.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "server/chat_prompt.h"
#include "server/completion_text.h"
#include "server/http_gate.h"
#include "server/reply_channels.h"
#include "server/request_parse.h"
#include "server/server_metrics.h"

enum { JOB_QUEUED = 0, JOB_RUNNING = 1, JOB_DONE = 2 };

typedef struct job job;
struct job {
  job *next;
  spill_server *srv;
  int refs; /* connection + queue/engine; under srv->mu */
  pthread_cond_t cv;
  spill_srv_request req;
  spill_srv_endpoint ep;
  int state;
  volatile int cancel;
  int fd; /* the client's socket, to notice it going away */
  struct MHD_Connection *c; /* its connection (the reply's; outlives it) */
  uint64_t t_arrival, t_last_tok;
  char id[64];
  uint64_t seq; /* this job's number (set under srv->mu, fixed after) */
  long long created;
  spill_srv_error err;        /* http_status != 0: failed */
  char *out;                  /* SSE bytes not yet sent */
  size_t out_len, out_off, out_cap;
  spill_srv_text text;
  int prompt_tokens, completion_tokens;
  int cached_tokens; /* prompt tokens whose state the engine kept (prefix reuse) */
  int last_token;
  const char *finish;         /* "stop" | "length" | NULL */
  int oom;
  /* an XTML (Kimi K3) or harmony (gpt-oss) chat: the reply split into
   * reasoning_content and content (server/reply_channels.h); split 0 = the
   * whole reply is content */
  int split;
  spill_srv_channels ch;
  int turn_end; /* the format's end-of-turn marker came (harmony's <|call|>) */
};

struct spill_server {
  spill_engine *eng;
  spill_server_opts o;
  char *host, *api_key, *trace_dir, *model_id;
  char *session_file; /* session_dir/conversation.session, or NULL */
  struct MHD_Daemon *d;
  int port, ctx, eos_id;
  long long started;
  pthread_mutex_t mu;
  pthread_cond_t qcv;
  job *head, *tail;
  int n_waiting, stopping;
  volatile sig_atomic_t *stop;
  uint64_t next_id, id_salt;
  const spill_tok *tok;      /* the engine's tokenizer (borrowed), NULL = bytes */
  const char *chat_template; /* its chat template (borrowed), or NULL */
  /* the marker tokens of XTML [0] and harmony [1] (spill_srv_channels_markers);
   * mark_ok: the tokenizer has all of that format's as special tokens */
  int32_t mark[2][8];
  int n_mark[2], mark_ok[2];
  spill_srv_metrics m;
  spill_srv_gate *gate;
  int n_conns;   /* libmicrohttpd connections open (under mu) */
  int max_conns; /* admitted past the gate at most */
};

/* Per connection (idle, body and reply times), docs/SERVER.md "Connections". */
enum {
  IDLE_TIMEOUT_S = 15,  /* libmicrohttpd: no byte read or written for this long */
  BODY_DEADLINE_MS = 30000, /* the whole body, from the end of the head */
};

typedef struct conn {
  uint64_t t0;
  spill_srv_endpoint ep;
  char *body;
  size_t len, cap;
  int too_large;
  int auth_ok;
} conn;

static uint64_t now_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static char *dup_s(const char *s) {
  if (!s) return NULL;
  size_t n = strlen(s) + 1;
  char *d = malloc(n);
  if (d) memcpy(d, s, n);
  return d;
}

/* ------------------------------------------------------------------ jobs */

static void job_release_locked(job *j, int *free_it) {
  *free_it = --j->refs == 0;
}

static void job_free(job *j) {
  if (!j) return;
  pthread_cond_destroy(&j->cv);
  spill_srv_request_free(&j->req);
  spill_srv_text_free(&j->text);
  spill_srv_channels_free(&j->ch);
  free(j->out);
  free(j);
}

static void job_release(spill_server *s, job *j) {
  int f;
  pthread_mutex_lock(&s->mu);
  job_release_locked(j, &f);
  pthread_mutex_unlock(&s->mu);
  if (f) job_free(j);
}

/* Appends to the job's outgoing SSE bytes (under s->mu). */
static void out_append(job *j, const char *p, size_t n) {
  if (j->oom) return;
  if (j->out_off && j->out_off == j->out_len) j->out_off = j->out_len = 0;
  if (j->out_len + n > j->out_cap) {
    size_t c = j->out_cap ? j->out_cap : 1024;
    while (c < j->out_len + n) c *= 2;
    char *q = realloc(j->out, c);
    if (!q) {
      j->oom = 1;
      return;
    }
    j->out = q;
    j->out_cap = c;
  }
  memcpy(j->out + j->out_len, p, n);
  j->out_len += n;
}

/* "data: JSON\n\n" (takes o). */
static void out_event(job *j, cJSON *o) {
  char *t = o ? cJSON_PrintUnformatted(o) : NULL;
  cJSON_Delete(o);
  if (!t) {
    j->oom = 1;
    return;
  }
  out_append(j, "data: ", 6);
  out_append(j, t, strlen(t));
  out_append(j, "\n\n", 2);
  free(t);
}

static cJSON *usage_obj(const job *j) {
  cJSON *u = cJSON_CreateObject();
  cJSON_AddNumberToObject(u, "prompt_tokens", j->prompt_tokens);
  cJSON_AddNumberToObject(u, "completion_tokens", j->completion_tokens);
  cJSON_AddNumberToObject(u, "total_tokens", j->prompt_tokens + j->completion_tokens);
  cJSON *d = cJSON_AddObjectToObject(u, "prompt_tokens_details");
  cJSON_AddNumberToObject(d, "cached_tokens", j->cached_tokens);
  return u;
}

/* One streamed chunk: content (may be NULL), finish (may be NULL), role on
 * the first chat chunk, usage on the last. */
static cJSON *chunk_field(const job *j, const char *field, const char *content, size_t n,
                          const char *finish, int role, int with_usage);
static cJSON *chunk_obj(const job *j, const char *content, size_t n, const char *finish,
                        int role, int with_usage) {
  return chunk_field(j, "content", content, n, finish, role, with_usage);
}
/* field: "content", or "reasoning_content" for an XTML think channel's text */
static cJSON *chunk_field(const job *j, const char *field, const char *content, size_t n,
                          const char *finish, int role, int with_usage) {
  int chat = j->req.kind == SPILL_SRV_CHAT;
  cJSON *o = cJSON_CreateObject();
  cJSON_AddStringToObject(o, "id", j->id);
  cJSON_AddStringToObject(o, "object", chat ? "chat.completion.chunk" : "text_completion");
  cJSON_AddNumberToObject(o, "created", (double)j->created);
  cJSON_AddStringToObject(o, "model", j->srv->model_id);
  cJSON *choices = cJSON_AddArrayToObject(o, "choices");
  cJSON *c = cJSON_CreateObject();
  cJSON_AddItemToArray(choices, c);
  cJSON_AddNumberToObject(c, "index", 0);
  char *tmp = NULL;
  if (content) {
    tmp = malloc(n + 1);
    if (tmp) {
      memcpy(tmp, content, n);
      tmp[n] = 0;
    }
  }
  if (chat) {
    cJSON *d = cJSON_AddObjectToObject(c, "delta");
    if (role) cJSON_AddStringToObject(d, "role", "assistant");
    if (content) cJSON_AddStringToObject(d, field, tmp ? tmp : "");
  } else {
    cJSON_AddStringToObject(c, "text", content && tmp ? tmp : "");
  }
  free(tmp);
  cJSON_AddNullToObject(c, "logprobs");
  if (finish) cJSON_AddStringToObject(c, "finish_reason", finish);
  else cJSON_AddNullToObject(c, "finish_reason");
  if (with_usage) cJSON_AddItemToObject(o, "usage", usage_obj(j));
  return o;
}

/* src as valid UTF-8 into dst (n >= 1 bytes, NUL-terminated): a byte
 * that does not begin a valid sequence (spill_utf8_check: RFC 3629) becomes
 * U+FFFD; the text is cut on a character boundary to fit n - 1 bytes. So
 * an error body stays valid UTF-8 whatever a client sent or a cut left. */
static void utf8_clean(char *dst, size_t n, const char *src) {
  static const char repl[] = "\xEF\xBF\xBD";
  size_t o = 0, len = strlen(src), i = 0;
  while (i < len) {
    size_t ok = spill_utf8_check(src + i, len - i);
    size_t take = ok;
    if (o + take > n - 1) { /* cut: back to the start of a character */
      take = n - 1 - o;
      while (take > 0 && ((unsigned char)src[i + take] & 0xC0) == 0x80) take--;
    }
    memcpy(dst + o, src + i, take);
    o += take;
    if (take < ok || ok == len - i) break;
    if (o + 3 > n - 1) break;
    memcpy(dst + o, repl, 3);
    o += 3;
    i += ok + 1;
  }
  dst[o] = 0;
}

static cJSON *error_obj(const spill_srv_error *e) {
  char t[3 * sizeof e->message + 1];
  cJSON *o = cJSON_CreateObject();
  cJSON *er = cJSON_AddObjectToObject(o, "error");
  utf8_clean(t, sizeof t, e->message);
  cJSON_AddStringToObject(er, "message", t);
  utf8_clean(t, sizeof t, e->type);
  cJSON_AddStringToObject(er, "type", t);
  utf8_clean(t, sizeof t, e->param);
  if (t[0]) cJSON_AddStringToObject(er, "param", t);
  else cJSON_AddNullToObject(er, "param");
  utf8_clean(t, sizeof t, e->code);
  if (t[0]) cJSON_AddStringToObject(er, "code", t);
  else cJSON_AddNullToObject(er, "code");
  return o;
}

/* --------------------------------------------------------------- engine side */

/* The client's connection is reset or hung up. A client that only shut
 * down its sending side (POLLRDHUP alone: a half-close after the request)
 * is still there; one that closed is seen at the next write, whose reset
 * raises POLLERR/POLLHUP (a stream writes every token). */
static int peer_gone(int fd) {
  if (fd < 0) return 0;
  struct pollfd p = {fd, 0, 0};
  if (poll(&p, 1, 0) <= 0) return 0;
  return (p.revents & (POLLHUP | POLLERR | POLLNVAL)) != 0;
}

/* libmicrohttpd checks its idle timeout right after a handler or a content
 * reader returns, counting the time spent inside it: a wait for the engine
 * longer than the timeout would close the connection before the reply is
 * sent. Setting the timeout from 0 restarts its clock (libmicrohttpd 0.9.75
 * connection.c, MHD_set_connection_option). Called on c's own thread. */
static void idle_clock_restart(struct MHD_Connection *c) {
  if (!c) return;
  MHD_set_connection_option(c, MHD_CONNECTION_OPTION_TIMEOUT, 0u);
  MHD_set_connection_option(c, MHD_CONNECTION_OPTION_TIMEOUT, (unsigned)IDLE_TIMEOUT_S);
}


static void stream_text(job *j, int final);
static int on_token(void *user, int token, const char *text, const spill_run_stats *ts) {
  (void)ts;
  job *j = user;
  spill_server *s = j->srv;
  uint64_t t = now_ns();
  if (j->completion_tokens == 0) spill_srv_metrics_ttft(&s->m, (double)(t - j->t_arrival) / 1e9);
  else spill_srv_metrics_itl(&s->m, (double)(t - j->t_last_tok) / 1e9);
  j->t_last_tok = t;
  pthread_mutex_lock(&s->mu);
  j->completion_tokens++;
  j->last_token = token;
  /* an XTML or harmony reply's markers are special tokens (they print
   * nothing): the splitter reads them as their text */
  size_t tlen = strlen(text);
  int f = j->split == SPILL_SRV_CH_HARMONY;
  if (j->split)
    for (int k = 0; k < s->n_mark[f]; k++)
      if (token == s->mark[f][k]) {
        const char *piece = spill_tok_piece(s->tok, token, &tlen);
        if (piece) text = piece;
        else tlen = 0;
      }
  int stopped = spill_srv_text_push(&j->text, text, tlen);
  if (j->split && spill_srv_channels_turn_ends(j->split, text, tlen)) j->turn_end = 1;
  if (stopped < 0) j->oom = 1;
  if (j->req.stream) stream_text(j, 0);
  /* a client that went away stops the generation here, at this token */
  if (!j->cancel && peer_gone(j->fd)) j->cancel = 1;
  int stop = stopped != 0 || j->turn_end || j->cancel || j->oom || (s->stop && *s->stop);
  pthread_cond_broadcast(&j->cv);
  pthread_mutex_unlock(&s->mu);
  return stop;
}

/* Sends the text decided since the last call as delta chunks (under
 * s->mu): content, or for an XTML reply its reasoning_content and content;
 * final: the generation ended (held text is released). */
static void stream_text(job *j, int final) {
  const char *p;
  size_t n = spill_srv_text_take(&j->text, &p);
  if (!j->split) {
    if (n) out_event(j, chunk_obj(j, p, n, NULL, 0, 0));
    return;
  }
  if (spill_srv_channels_push(&j->ch, p, n)) j->oom = 1;
  if (final && spill_srv_channels_finish(&j->ch)) j->oom = 1;
  n = spill_srv_channels_take(&j->ch, 0, &p);
  if (n) out_event(j, chunk_field(j, "reasoning_content", p, n, NULL, 0, 0));
  n = spill_srv_channels_take(&j->ch, 1, &p);
  if (n) out_event(j, chunk_obj(j, p, n, NULL, 0, 0));
}

/* Fails a job that has not started streaming (under s->mu). */
static void fail_locked(job *j, int status, const char *type, const char *code,
                        const char *fmt, const char *detail) {
  spill_srv_error_set(&j->err, status, type, NULL, code, fmt, detail);
  j->state = JOB_DONE;
  pthread_cond_broadcast(&j->cv);
}

static void trace_knobs(spill_server *s, const job *j, int on) {
  if (!s->trace_dir) return;
  char path[4096];
  spill_err e = {0};
  const char *keys[2] = {"profile", "trace"};
  for (int k = 0; k < 2; k++) {
    if (on) snprintf(path, sizeof path, "%s/%s.%s.jsonl", s->trace_dir, j->id, keys[k]);
    if (spill_engine_set_knob(s->eng, keys[k], on ? path : "", &e) && !s->o.quiet)
      fprintf(stderr, "spill serve: %s: %s\n", j->id, e.msg);
  }
}

/* The render budget's cancellation (polled every SPILL_CHAT_POLL_STEPS
 * steps): the client went away or the server is stopping. */
static int render_cancelled(void *user) {
  job *j = user;
  spill_server *s = j->srv;
  pthread_mutex_lock(&s->mu);
  if (!j->cancel && peer_gone(j->fd)) j->cancel = 1;
  int stop = j->cancel || (s->stop && *s->stop);
  pthread_mutex_unlock(&s->mu);
  return stop;
}

/* The prompt's text: a completion's text with BOS; a chat through the
 * model's template (which writes its own BOS text, so none is added) under
 * the default render budget (docs/SERVER.md), or the documented fallback
 * rendering (with BOS, like a completion). */
static int render_prompt(spill_server *s, job *j, char **text, int *add_bos, spill_err *e) {
  int rc = SPILL_OK;
  *add_bos = 1;
  *text = NULL;
  if (j->req.kind == SPILL_SRV_CHAT && s->chat_template) {
    spill_chat_msg *msgs = calloc((size_t)j->req.n_messages, sizeof *msgs);
    if (!msgs) rc = SPILL_E_NOMEM;
    for (int i = 0; msgs && i < j->req.n_messages; i++) {
      msgs[i].role = j->req.messages[i].role;
      msgs[i].content = j->req.messages[i].content;
    }
    spill_chat_budget b;
    spill_chat_budget_default(&b);
    b.cancel = render_cancelled;
    b.cancel_user = j;
    if (msgs) rc = spill_tok_chat_render_budget(s->tok, msgs, (size_t)j->req.n_messages, 1, &b, text, e);
    free(msgs);
    /* Kimi K3's XTML or gpt-oss's harmony: the generation prompt opens a
     * channel or a message header */
    if (rc == SPILL_OK) {
      j->split = spill_srv_channels_detect(*text, strlen(*text));
      if (j->split && !s->mark_ok[j->split == SPILL_SRV_CH_HARMONY]) j->split = SPILL_SRV_CH_OFF;
      if (j->split) spill_srv_channels_init(&j->ch, j->split);
    }
    *add_bos = 0;
  } else {
    *text = j->req.kind == SPILL_SRV_CHAT
                ? spill_srv_chat_fallback(j->req.messages, j->req.n_messages)
                : dup_s(j->req.prompt);
    if (!*text) rc = SPILL_E_NOMEM;
  }
  return rc;
}

/* Renders and tokenizes j's prompt and checks it against the context. A
 * job that cannot run fails here (counted, reply ready) and 0 is returned;
 * otherwise it is RUNNING (a streamed chat has its first chunk), *toks_out
 * holds its *n_out prompt tokens (caller frees) and 1 is returned. */
static int start_job(spill_server *s, job *j, int **toks_out, int *n_out) {
  spill_err e = {0};
  int add_bos = 1;
  char *text = NULL;
  int rc = render_prompt(s, j, &text, &add_bos, &e);
  int render_rc = rc;
  size_t tl = text ? strlen(text) : 0;
  int cap = tl + 16 < (size_t)1 << 30 ? (int)tl + 16 : 0;
  int *toks = !rc && cap ? malloc((size_t)cap * sizeof(int)) : NULL;
  int n = 0;
  if (!rc) rc = toks ? spill_tokenize(s->eng, text, add_bos, toks, cap, &n, &e) : SPILL_E_NOMEM;
  free(text);
  pthread_mutex_lock(&s->mu);
  if (render_rc) {
    /* the template raised an exception (e.g. roles must alternate) or
     * these messages exceed the render budget: the client's messages (400);
     * the client went away or the server stops (499); anything else is ours */
    int client = render_rc == SPILL_E_CONFIG || (render_rc <= SPILL_E_TMPL_PARSE_DEPTH &&
                                                 render_rc >= SPILL_E_TMPL_MEMORY);
    if (render_rc == SPILL_E_INTERRUPTED)
      fail_locked(j, 499, "cancelled", NULL, "%s", "the chat template's rendering was cancelled (the client went away or the server is "
                  "stopping)");
    else
      fail_locked(j, client ? 400 : 500, client ? "invalid_request_error" : "server_error", NULL,
                  "chat template: %s", render_rc == SPILL_E_NOMEM ? "out of memory" : e.msg);
    if (client) snprintf(j->err.param, sizeof j->err.param, "messages");
  } else if (rc) {
    fail_locked(j, rc == SPILL_E_NOMEM ? 500 : 400,
                rc == SPILL_E_NOMEM ? "server_error" : "invalid_request_error", NULL,
                "cannot tokenize the prompt: %s", rc == SPILL_E_NOMEM ? "out of memory" : e.msg);
  } else if (n >= s->ctx || (j->req.max_tokens > 0 && n + j->req.max_tokens > s->ctx)) {
    char msg[200];
    snprintf(msg, sizeof msg,
             "This model's maximum context length is %d tokens. However, you requested %d "
             "tokens (%d in the %s, %d in the completion).",
             s->ctx, n + (j->req.max_tokens > 0 ? j->req.max_tokens : 1), n,
             j->req.kind == SPILL_SRV_CHAT ? "messages" : "prompt",
             j->req.max_tokens > 0 ? j->req.max_tokens : 1);
    fail_locked(j, 400, "invalid_request_error", "context_length_exceeded", "%s", msg);
    snprintf(j->err.param, sizeof j->err.param, "%s",
             j->req.kind == SPILL_SRV_CHAT ? "messages" : "prompt");
  }
  if (j->state == JOB_DONE) {
    spill_srv_metrics_run(&s->m, NULL, SPILL_FIN_ERROR); /* before the reply can go */
    pthread_mutex_unlock(&s->mu);
    free(toks);
    return 0;
  }
  j->prompt_tokens = n;
  j->state = JOB_RUNNING;
  if (j->req.stream && j->req.kind == SPILL_SRV_CHAT)
    out_event(j, chunk_obj(j, "", 0, NULL, 1, 0));
  pthread_cond_broadcast(&j->cv);
  pthread_mutex_unlock(&s->mu);
  *toks_out = toks;
  *n_out = n;
  return 1;
}

/* After the generation: the finish reason, the streamed tail or the error
 * event, the metrics, JOB_DONE; then the log line. */
static void finish_job(spill_server *s, job *j, int rc, const spill_run_stats *st, spill_err *e) {
  pthread_mutex_lock(&s->mu);
  spill_srv_finish fin;
  j->completion_tokens = st->tokens_decode;
  j->cached_tokens = st->tokens_cached;
  if (spill_srv_text_finish(&j->text)) j->oom = 1;
  if (j->oom) {
    rc = SPILL_E_NOMEM;
    snprintf(e->msg, sizeof e->msg, "out of memory");
  }
  if (rc && rc != SPILL_E_INTERRUPTED) {
    fin = SPILL_FIN_ERROR;
    /* the engine's message names files of the server: its log gets it,
     * the client the status and the request id */
    fprintf(stderr, "spill serve: %s: generation failed: %s (%s)\n", j->id, e->msg,
            spill_status_name(rc));
    spill_srv_error_set(&j->err, 500, "server_error", NULL, NULL,
                        "generation failed (%s); the server's log has the details of %s",
                        spill_status_name(rc), j->id);
  } else if (j->cancel || (s->stop && *s->stop && !j->text.stopped)) {
    fin = SPILL_FIN_CANCELLED;
    j->finish = "length"; /* only seen if the server is shutting down */
  } else if (j->text.stopped || j->turn_end ||
             (j->completion_tokens > 0 && s->eos_id >= 0 && j->last_token == s->eos_id)) {
    fin = SPILL_FIN_STOP;
    j->finish = "stop";
  } else {
    fin = SPILL_FIN_LENGTH;
    j->finish = "length";
  }
  if (j->req.stream) {
    if (j->err.http_status) {
      out_event(j, error_obj(&j->err));
    } else {
      stream_text(j, 1);
      out_event(j, chunk_obj(j, NULL, 0, j->finish, 0, 1));
      if (j->req.include_usage) {
        cJSON *u = chunk_obj(j, NULL, 0, NULL, 0, 1);
        cJSON_ReplaceItemInObject(u, "choices", cJSON_CreateArray());
        out_event(j, u);
      }
    }
    out_append(j, "data: [DONE]\n\n", 14);
  }
  /* counted before the reply can reach the client, so a /metrics scrape
   * after the reply includes this generation */
  spill_srv_metrics_run(&s->m, st, fin);
  j->state = JOB_DONE;
  pthread_cond_broadcast(&j->cv);
  pthread_mutex_unlock(&s->mu);
  if (!s->o.quiet)
    fprintf(stderr,
            "spill serve: %s %s %d prompt + %d generated tokens, %s, hits %llu misses %llu, "
            "%d prompt tokens cached\n",
            j->id, j->req.kind == SPILL_SRV_CHAT ? "chat" : "completion", j->prompt_tokens,
            j->completion_tokens,
            fin == SPILL_FIN_CANCELLED ? "cancelled" : fin == SPILL_FIN_ERROR ? "error" : j->finish,
            (unsigned long long)st->demand_hits, (unsigned long long)st->demand_misses,
            j->cached_tokens);
}

static void run_job(spill_server *s, job *j) {
  spill_srv_metrics_queue_wait(&s->m, (double)(now_ns() - j->t_arrival) / 1e9);
  pthread_mutex_lock(&s->mu);
  int cancelled = j->cancel;
  pthread_mutex_unlock(&s->mu);
  if (cancelled) {
    spill_srv_metrics_run(&s->m, NULL, SPILL_FIN_CANCELLED);
    pthread_mutex_lock(&s->mu);
    fail_locked(j, 499, "cancelled", NULL, "%s", "the client went away before the job started");
    pthread_mutex_unlock(&s->mu);
    return;
  }
  int *toks = NULL, n = 0;
  if (!start_job(s, j, &toks, &n)) return;
  int n_new = j->req.max_tokens > 0 ? j->req.max_tokens : s->ctx - n;
  spill_sampling smp = {j->req.temperature, j->req.top_k, j->req.top_p,
                        j->req.has_seed ? j->req.seed : (now_ns() ^ (s->id_salt + j->seq))};
  trace_knobs(s, j, 1);
  spill_run_stats st;
  memset(&st, 0, sizeof st);
  spill_err e = {0};
  /* the next turn of the conversation the engine holds prefills only its
   * new tokens; the sampler starts from the request's seed either way, so
   * the reply is the one a full prefill gives (docs/SERVER.md) */
  int rc = spill_generate_next(s->eng, toks, n, n_new, &smp,
                               s->o.no_prefix_reuse ? 0 : SPILL_GEN_REUSE, on_token, j, NULL, &st,
                               &e);
  free(toks);
  trace_knobs(s, j, 0);
  finish_job(s, j, rc, &st, &e);
  if (s->session_file) { /* what the engine now holds, for a restart */
    spill_err se = {0};
    int src = spill_session_save(s->eng, s->session_file, &se);
    if (src)
      fprintf(stderr, "spill serve: session not saved: %s (%s)\n", se.msg, spill_status_name(src));
  }
}

void spill_server_run(spill_server *s, volatile sig_atomic_t *stop) {
  s->stop = stop;
  for (;;) {
    pthread_mutex_lock(&s->mu);
    while (!s->head && !*stop) {
      struct timespec ts;
      clock_gettime(CLOCK_REALTIME, &ts);
      ts.tv_nsec += 100 * 1000000L;
      if (ts.tv_nsec >= 1000000000L) {
        ts.tv_sec++;
        ts.tv_nsec -= 1000000000L;
      }
      pthread_cond_timedwait(&s->qcv, &s->mu, &ts);
    }
    if (*stop) {
      /* fail every queued job */
      s->stopping = 1;
      job *j = s->head;
      s->head = s->tail = NULL;
      s->n_waiting = 0;
      while (j) {
        job *nx = j->next;
        fail_locked(j, 503, "server_error", NULL, "%s", "the server is shutting down");
        int f;
        job_release_locked(j, &f);
        if (f) {
          pthread_mutex_unlock(&s->mu);
          job_free(j);
          pthread_mutex_lock(&s->mu);
        }
        j = nx;
      }
      pthread_mutex_unlock(&s->mu);
      return;
    }
    job *j = s->head;
    s->head = j->next;
    if (!s->head) s->tail = NULL;
    s->n_waiting--;
    int depth = s->n_waiting;
    pthread_mutex_unlock(&s->mu);
    spill_srv_metrics_queue(&s->m, depth, 1);
    run_job(s, j);
    pthread_mutex_lock(&s->mu);
    depth = s->n_waiting;
    pthread_mutex_unlock(&s->mu);
    spill_srv_metrics_queue(&s->m, depth, 0);
    job_release(s, j);
  }
}

/* ---------------------------------------------------------- connection side */

/* Waits (under s->mu) until the job reaches `state`; returns 0, or -1 if
 * the client went away first (the job is then cancelled). */
static int wait_for(spill_server *s, job *j, int state) {
  while (j->state < state) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    ts.tv_nsec += 50 * 1000000L;
    if (ts.tv_nsec >= 1000000000L) {
      ts.tv_sec++;
      ts.tv_nsec -= 1000000000L;
    }
    pthread_cond_timedwait(&j->cv, &s->mu, &ts);
    if (j->state < state && peer_gone(j->fd)) {
      j->cancel = 1;
      return -1;
    }
  }
  return 0;
}

static enum MHD_Result reply(spill_server *s, struct MHD_Connection *c, spill_srv_endpoint ep,
                             int status, const char *ctype, char *body, const char *tmpl_hdr) {
  /* body is malloc'ed and taken */
  struct MHD_Response *r =
      MHD_create_response_from_buffer(body ? strlen(body) : 0, body, MHD_RESPMEM_MUST_FREE);
  if (!r) {
    free(body);
    return MHD_NO;
  }
  MHD_add_response_header(r, "Content-Type", ctype);
  MHD_add_response_header(r, "Connection", "close");
  if (status == 429) MHD_add_response_header(r, "Retry-After", "1");
  if (status == 401) MHD_add_response_header(r, "WWW-Authenticate", "Bearer");
  if (tmpl_hdr) MHD_add_response_header(r, "X-Spill-Chat-Template", tmpl_hdr);
  enum MHD_Result ret = MHD_queue_response(c, (unsigned)status, r);
  MHD_destroy_response(r);
  spill_srv_metrics_http(&s->m, ep, status);
  return ret;
}

static enum MHD_Result reply_json(spill_server *s, struct MHD_Connection *c, spill_srv_endpoint ep,
                                  int status, cJSON *o) {
  char *t = o ? cJSON_PrintUnformatted(o) : NULL;
  cJSON_Delete(o);
  if (!t) return MHD_NO;
  size_t n = strlen(t);
  char *b = realloc(t, n + 2);
  if (!b) {
    free(t);
    return MHD_NO;
  }
  b[n] = '\n';
  b[n + 1] = 0;
  return reply(s, c, ep, status, "application/json", b, NULL);
}

static enum MHD_Result reply_error(spill_server *s, struct MHD_Connection *c,
                                   spill_srv_endpoint ep, const spill_srv_error *e) {
  return reply_json(s, c, ep, e->http_status, error_obj(e));
}

static enum MHD_Result simple_error(spill_server *s, struct MHD_Connection *c,
                                    spill_srv_endpoint ep, int status, const char *type,
                                    const char *code, const char *msg) {
  spill_srv_error e;
  spill_srv_error_set(&e, status, type, NULL, code, "%s", msg);
  return reply_error(s, c, ep, &e);
}

static ssize_t sse_read(void *cls, uint64_t pos, char *buf, size_t max) {
  (void)pos;
  job *j = cls;
  spill_server *s = j->srv;
  pthread_mutex_lock(&s->mu);
  for (;;) {
    if (j->out_off < j->out_len) {
      size_t n = j->out_len - j->out_off;
      if (n > max) n = max;
      memcpy(buf, j->out + j->out_off, n);
      j->out_off += n;
      pthread_mutex_unlock(&s->mu);
      idle_clock_restart(j->c);
      return (ssize_t)n;
    }
    if (j->state == JOB_DONE) {
      pthread_mutex_unlock(&s->mu);
      return MHD_CONTENT_READER_END_OF_STREAM;
    }
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    ts.tv_nsec += 50 * 1000000L;
    if (ts.tv_nsec >= 1000000000L) {
      ts.tv_sec++;
      ts.tv_nsec -= 1000000000L;
    }
    pthread_cond_timedwait(&j->cv, &s->mu, &ts);
    if (j->out_off >= j->out_len && j->state != JOB_DONE && peer_gone(j->fd)) {
      j->cancel = 1;
      pthread_mutex_unlock(&s->mu);
      return MHD_CONTENT_READER_END_WITH_ERROR;
    }
  }
}

static void sse_free(void *cls) {
  job *j = cls;
  spill_server *s = j->srv;
  pthread_mutex_lock(&s->mu);
  if (j->state != JOB_DONE) j->cancel = 1;
  pthread_mutex_unlock(&s->mu);
  job_release(s, j);
}

/* A plain reply's choice text: a completion's text; a chat's message with
 * its content, or for an XTML reply (j->split) the same split the stream
 * makes, over the whole text. -1 out of memory. */
static int add_message(job *j, cJSON *ch, const char *text) {
  if (j->req.kind != SPILL_SRV_CHAT) {
    cJSON_AddStringToObject(ch, "text", text);
    return 0;
  }
  cJSON *m = cJSON_AddObjectToObject(ch, "message");
  cJSON_AddStringToObject(m, "role", "assistant");
  if (!j->split) {
    cJSON_AddStringToObject(m, "content", text);
    return 0;
  }
  if (spill_srv_channels_push(&j->ch, text, strlen(text)) || spill_srv_channels_finish(&j->ch))
    return -1;
  cJSON_AddStringToObject(m, "content", j->ch.out[1] ? j->ch.out[1] : "");
  if (j->ch.len[0]) cJSON_AddStringToObject(m, "reasoning_content", j->ch.out[0]);
  return 0;
}

static enum MHD_Result do_generate(spill_server *s, struct MHD_Connection *c, conn *cn) {
  spill_srv_kind kind = cn->ep == SPILL_EP_CHAT ? SPILL_SRV_CHAT : SPILL_SRV_COMPLETION;
  job *j = calloc(1, sizeof *j);
  if (!j) return simple_error(s, c, cn->ep, 500, "server_error", NULL, "out of memory");
  j->t_arrival = now_ns();
  if (spill_srv_request_parse(kind, cn->body, cn->len, &j->req, &j->err)) {
    enum MHD_Result r = reply_error(s, c, cn->ep, &j->err);
    spill_srv_request_free(&j->req);
    free(j);
    return r;
  }
  if (strcmp(j->req.model, s->model_id) != 0) {
    spill_srv_error e;
    char asked[81], served[81]; /* at most 80 bytes each, whole characters */
    utf8_clean(asked, sizeof asked, j->req.model);
    utf8_clean(served, sizeof served, s->model_id);
    spill_srv_error_set(&e, 404, "invalid_request_error", "model", "model_not_found",
                        "The model '%s' does not exist: this server serves '%s'", asked, served);
    spill_srv_request_free(&j->req);
    free(j);
    return reply_error(s, c, cn->ep, &e);
  }
  pthread_cond_init(&j->cv, NULL);
  j->srv = s;
  j->ep = cn->ep;
  j->created = (long long)time(NULL);
  j->last_token = -1;
  const union MHD_ConnectionInfo *ci = MHD_get_connection_info(c, MHD_CONNECTION_INFO_CONNECTION_FD);
  j->fd = ci ? ci->connect_fd : -1;
  j->c = c;
  spill_srv_text_init(&j->text, (const char *const *)j->req.stop, j->req.n_stop);

  pthread_mutex_lock(&s->mu);
  if (s->stopping) {
    pthread_mutex_unlock(&s->mu);
    job_free(j);
    return simple_error(s, c, cn->ep, 503, "server_error", NULL, "the server is shutting down");
  }
  if (s->n_waiting >= s->o.max_queue) {
    int q = s->n_waiting;
    pthread_mutex_unlock(&s->mu);
    job_free(j);
    char msg[160];
    snprintf(msg, sizeof msg,
             "the server is busy: %d requests are waiting for the engine (--max-queue %d); "
             "retry later",
             q, s->o.max_queue);
    return simple_error(s, c, cn->ep, 429, "rate_limit_error", "queue_full", msg);
  }
  snprintf(j->id, sizeof j->id, "%s-%llx-%llu", kind == SPILL_SRV_CHAT ? "chatcmpl" : "cmpl",
           (unsigned long long)s->id_salt, (unsigned long long)++s->next_id);
  j->seq = s->next_id;
  j->refs = 2;
  if (s->tail) s->tail->next = j;
  else s->head = j;
  s->tail = j;
  s->n_waiting++;
  spill_srv_metrics_queue(&s->m, s->n_waiting, -1);
  pthread_cond_signal(&s->qcv);
  int gone = wait_for(s, j, j->req.stream ? JOB_RUNNING : JOB_DONE);
  pthread_mutex_unlock(&s->mu);
  idle_clock_restart(c); /* the wait was not idleness */
  if (gone) {
    job_release(s, j);
    return MHD_NO;
  }
  if (j->err.http_status) {
    spill_srv_error err = j->err;
    job_release(s, j);
    if (err.http_status == 499) return MHD_NO;
    return reply_error(s, c, cn->ep, &err);
  }
  const char *tmpl = s->chat_template ? "model" : "fallback";
  if (j->req.stream) {
    struct MHD_Response *r = MHD_create_response_from_callback(MHD_SIZE_UNKNOWN, 4096, sse_read, j,
                                                               sse_free);
    if (!r) {
      pthread_mutex_lock(&s->mu);
      j->cancel = 1;
      pthread_mutex_unlock(&s->mu);
      job_release(s, j);
      return MHD_NO;
    }
    MHD_add_response_header(r, "Content-Type", "text/event-stream");
    MHD_add_response_header(r, "Connection", "close");
    MHD_add_response_header(r, "Cache-Control", "no-cache");
    if (kind == SPILL_SRV_CHAT) MHD_add_response_header(r, "X-Spill-Chat-Template", tmpl);
    enum MHD_Result ret = MHD_queue_response(c, 200, r);
    MHD_destroy_response(r);
    spill_srv_metrics_http(&s->m, cn->ep, 200);
    return ret;
  }
  /* one JSON body */
  cJSON *o = cJSON_CreateObject();
  cJSON_AddStringToObject(o, "id", j->id);
  cJSON_AddStringToObject(o, "object", kind == SPILL_SRV_CHAT ? "chat.completion" : "text_completion");
  cJSON_AddNumberToObject(o, "created", (double)j->created);
  cJSON_AddStringToObject(o, "model", s->model_id);
  cJSON *choices = cJSON_AddArrayToObject(o, "choices");
  cJSON *ch = cJSON_CreateObject();
  cJSON_AddItemToArray(choices, ch);
  cJSON_AddNumberToObject(ch, "index", 0);
  if (add_message(j, ch, j->text.buf ? j->text.buf : "")) {
    cJSON_Delete(o);
    job_release(s, j);
    return MHD_NO;
  }
  cJSON_AddNullToObject(ch, "logprobs");
  cJSON_AddStringToObject(ch, "finish_reason", j->finish ? j->finish : "length");
  cJSON_AddItemToObject(o, "usage", usage_obj(j));
  job_release(s, j);
  char *t = cJSON_PrintUnformatted(o);
  cJSON_Delete(o);
  if (!t) return MHD_NO;
  return reply(s, c, cn->ep, 200, "application/json", t, kind == SPILL_SRV_CHAT ? tmpl : NULL);
}

static cJSON *model_obj(spill_server *s) {
  cJSON *m = cJSON_CreateObject();
  cJSON_AddStringToObject(m, "id", s->model_id);
  cJSON_AddStringToObject(m, "object", "model");
  cJSON_AddNumberToObject(m, "created", (double)s->started);
  cJSON_AddStringToObject(m, "owned_by", "spill");
  cJSON_AddNumberToObject(m, "context_length", s->ctx);
  cJSON_AddStringToObject(m, "chat_template", s->chat_template ? "model" : "fallback");
  return m;
}

/* Constant-time comparison of the Authorization header with "Bearer KEY":
 * the time depends only on the expected length, never on where they differ. */
static int auth_ok(const spill_server *s, const char *h, size_t hn) {
  if (!s->api_key) return 1;
  static const char pre[] = "Bearer ";
  size_t kn = strlen(s->api_key);
  if (!h) hn = 0;
  unsigned diff = (hn != kn + 7);
  for (size_t i = 0; i < kn + 7; i++) {
    unsigned char want = i < 7 ? (unsigned char)pre[i] : (unsigned char)s->api_key[i - 7];
    unsigned char got = i < hn ? (unsigned char)h[i] : 0;
    diff |= (unsigned)(want ^ got);
  }
  return diff == 0;
}

static spill_srv_endpoint endpoint_of(const char *url) {
  if (!strcmp(url, "/v1/chat/completions")) return SPILL_EP_CHAT;
  if (!strcmp(url, "/v1/completions")) return SPILL_EP_COMPLETIONS;
  if (!strcmp(url, "/v1/models") || !strncmp(url, "/v1/models/", 11)) return SPILL_EP_MODELS;
  if (!strcmp(url, "/health")) return SPILL_EP_HEALTH;
  if (!strcmp(url, "/metrics")) return SPILL_EP_METRICS;
  return SPILL_EP_OTHER;
}

static enum MHD_Result on_request(void *cls, struct MHD_Connection *c, const char *url,
                                  const char *method, const char *version,
                                  const char *upload, size_t *upload_size, void **con_cls) {
  (void)version;
  spill_server *s = cls;
  conn *cn = *con_cls;
  if (!cn) {
    cn = calloc(1, sizeof *cn);
    if (!cn) return MHD_NO;
    *con_cls = cn;
    cn->t0 = now_ns();
    cn->ep = endpoint_of(url);
    int post = !strcmp(method, "POST");
    if (cn->ep == SPILL_EP_OTHER)
      return simple_error(s, c, cn->ep, 404, "invalid_request_error", "not_found",
                          "unknown endpoint (see docs/SERVER.md)");
    int want_post = cn->ep == SPILL_EP_CHAT || cn->ep == SPILL_EP_COMPLETIONS;
    if (want_post ? !post : strcmp(method, "GET") != 0)
      return simple_error(s, c, cn->ep, 405, "invalid_request_error", "method_not_allowed",
                          want_post ? "use POST" : "use GET");
    const char *ah = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Authorization");
    if (cn->ep != SPILL_EP_HEALTH && !auth_ok(s, ah, ah ? strlen(ah) : 0))
      return simple_error(s, c, cn->ep, 401, "invalid_request_error", "invalid_api_key",
                          "missing or wrong API key (Authorization: Bearer KEY)");
    const char *cl = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Content-Length");
    if (cl && strtoull(cl, NULL, 10) > s->o.max_body) {
      char msg[96];
      snprintf(msg, sizeof msg, "the request body is larger than %zu bytes", s->o.max_body);
      return simple_error(s, c, cn->ep, 413, "invalid_request_error", "body_too_large", msg);
    }
    return MHD_YES;
  }
  if (*upload_size) {
    size_t n = *upload_size;
    *upload_size = 0;
    if (now_ns() - cn->t0 > (uint64_t)BODY_DEADLINE_MS * 1000000u) {
      char msg[96];
      snprintf(msg, sizeof msg, "the request body did not arrive within %d s",
               BODY_DEADLINE_MS / 1000);
      return simple_error(s, c, cn->ep, 408, "invalid_request_error", "request_timeout", msg);
    }
    if (cn->too_large) return MHD_YES;
    if (cn->len + n > s->o.max_body) {
      cn->too_large = 1;
      free(cn->body);
      cn->body = NULL;
      cn->len = cn->cap = 0;
      return MHD_YES;
    }
    if (cn->len + n + 1 > cn->cap) {
      size_t cap = cn->cap ? cn->cap : 4096;
      while (cap < cn->len + n + 1) cap *= 2;
      char *b = realloc(cn->body, cap);
      if (!b) return MHD_NO;
      cn->body = b;
      cn->cap = cap;
    }
    memcpy(cn->body + cn->len, upload, n);
    cn->len += n;
    cn->body[cn->len] = 0;
    return MHD_YES;
  }
  if (cn->too_large) {
    char msg[96];
    snprintf(msg, sizeof msg, "the request body is larger than %zu bytes", s->o.max_body);
    return simple_error(s, c, cn->ep, 413, "invalid_request_error", "body_too_large", msg);
  }
  switch (cn->ep) {
  case SPILL_EP_CHAT:
  case SPILL_EP_COMPLETIONS:
    return do_generate(s, c, cn);
  case SPILL_EP_HEALTH: {
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "status", "ok");
    return reply_json(s, c, cn->ep, 200, o);
  }
  case SPILL_EP_MODELS: {
    if (strlen(url) > 11) { /* /v1/models/ID */
      if (strcmp(url + 11, s->model_id) != 0)
        return simple_error(s, c, cn->ep, 404, "invalid_request_error", "model_not_found",
                            "no such model");
      return reply_json(s, c, cn->ep, 200, model_obj(s));
    }
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "object", "list");
    cJSON *d = cJSON_AddArrayToObject(o, "data");
    cJSON_AddItemToArray(d, model_obj(s));
    return reply_json(s, c, cn->ep, 200, o);
  }
  case SPILL_EP_METRICS: {
    /* counted before rendering, so a scrape includes itself */
    spill_srv_metrics_http(&s->m, cn->ep, 200);
    char *t = spill_srv_metrics_render(&s->m);
    if (!t) return MHD_NO;
    struct MHD_Response *r = MHD_create_response_from_buffer(strlen(t), t, MHD_RESPMEM_MUST_FREE);
    if (!r) {
      free(t);
      return MHD_NO;
    }
    MHD_add_response_header(r, "Content-Type", "text/plain; version=0.0.4; charset=utf-8");
    MHD_add_response_header(r, "Connection", "close");
    enum MHD_Result ret = MHD_queue_response(c, 200, r);
    MHD_destroy_response(r);
    return ret;
  }
  default:
    return simple_error(s, c, cn->ep, 404, "invalid_request_error", "not_found", "unknown endpoint");
  }
}

static void on_completed(void *cls, struct MHD_Connection *c, void **con_cls,
                         enum MHD_RequestTerminationCode toe) {
  (void)cls;
  (void)c;
  (void)toe;
  conn *cn = *con_cls;
  if (cn) {
    free(cn->body);
    free(cn);
  }
  *con_cls = NULL;
}

/* libmicrohttpd's connections, counted for the gate's admission. */
static void on_connection(void *cls, struct MHD_Connection *c, void **socket_context,
                          enum MHD_ConnectionNotificationCode code) {
  (void)c;
  (void)socket_context;
  spill_server *s = cls;
  pthread_mutex_lock(&s->mu);
  s->n_conns += code == MHD_CONNECTION_NOTIFY_STARTED ? 1 : -1;
  pthread_mutex_unlock(&s->mu);
}

/* A whole, well-framed request head (on the gate's thread; must not block):
 * /health and a refused API key are answered here, without a libmicrohttpd
 * slot; the rest goes to libmicrohttpd while it has room. */
static spill_srv_gate_verdict gate_admit(void *user, int fd, const struct sockaddr *addr,
                                         socklen_t addr_len, const spill_srv_head *h, int *status,
                                         char **body) {
  spill_server *s = user;
  char path[64];
  size_t pl = h->path_len;
  const char *q = memchr(h->path, '?', pl);
  if (q) pl = (size_t)(q - h->path);
  snprintf(path, sizeof path, "%.*s", (int)(pl < sizeof path ? pl : sizeof path - 1), h->path);
  spill_srv_endpoint ep = pl < sizeof path ? endpoint_of(path) : SPILL_EP_OTHER;
  int get = h->method_len == 3 && !memcmp(h->method, "GET", 3);
  spill_srv_error err;
  err.http_status = 0;
  pthread_mutex_lock(&s->mu);
  int stopping = s->stopping, full = s->n_conns >= s->max_conns;
  pthread_mutex_unlock(&s->mu);
  if (stopping) {
    spill_srv_error_set(&err, 503, "server_error", NULL, NULL, "%s", "the server is shutting down");
  } else if (ep == SPILL_EP_HEALTH && get) {
    *status = 200;
    *body = dup_s("{\"status\":\"ok\"}\n");
    return SPILL_GATE_ANSWER;
  } else if (ep != SPILL_EP_HEALTH && !auth_ok(s, h->auth, h->auth_len)) {
    spill_srv_error_set(&err, 401, "invalid_request_error", NULL, "invalid_api_key", "%s",
                        "missing or wrong API key (Authorization: Bearer KEY)");
  } else if (full) {
    spill_srv_error_set(&err, 503, "server_error", NULL, "too_many_connections",
                        "%d requests are being served; retry later", s->max_conns);
  }
  if (err.http_status) {
    *status = err.http_status;
    cJSON *o = error_obj(&err);
    *body = o ? cJSON_PrintUnformatted(o) : NULL;
    cJSON_Delete(o);
    return SPILL_GATE_ANSWER;
  }
  /* on failure libmicrohttpd has closed fd: nothing left to answer */
  MHD_add_connection(s->d, fd, addr, addr_len);
  return SPILL_GATE_ADMIT;
}

static void gate_answered(void *user, const char *path, size_t path_len, int status) {
  spill_server *s = user;
  char p[64] = "";
  if (path && path_len < sizeof p) {
    memcpy(p, path, path_len);
    p[path_len] = 0;
    p[strcspn(p, "?")] = 0;
  }
  spill_srv_metrics_http(&s->m, p[0] ? endpoint_of(p) : SPILL_EP_OTHER, status);
}

/* The XTML (Kimi K3) and harmony (gpt-oss) markers' ids; a format splits
 * replies only when the tokenizer has all of its markers as special tokens
 * and the model has a chat template. */
static void find_markers(spill_server *s) {
  static const int fmt[2] = {SPILL_SRV_CH_REASONING, SPILL_SRV_CH_HARMONY};
  for (int f = 0; f < 2; f++) {
    const char *const *texts;
    s->n_mark[f] = (int)spill_srv_channels_markers(fmt[f], &texts);
    s->mark_ok[f] = s->chat_template != NULL;
    for (int k = 0; k < s->n_mark[f]; k++) {
      s->mark[f][k] = s->chat_template ? spill_tok_find(s->tok, texts[k], strlen(texts[k])) : -1;
      if (s->mark[f][k] < 0 || !spill_tok_is_special(s->tok, s->mark[f][k])) s->mark_ok[f] = 0;
    }
  }
}

int spill_server_open(spill_engine *eng, const spill_server_opts *o, spill_server **out,
                      spill_err *e) {
  *out = NULL;
  spill_server *s = calloc(1, sizeof *s);
  if (!s) return spill_err_set(e, SPILL_E_NOMEM, "out of memory");
  s->eng = eng;
  s->o = *o;
  if (!s->o.max_body) s->o.max_body = 1 << 20;
  if (s->o.max_queue < 0) s->o.max_queue = 0;
  s->host = dup_s(o->host ? o->host : "127.0.0.1");
  s->api_key = o->api_key && *o->api_key ? dup_s(o->api_key) : NULL;
  s->trace_dir = o->trace_dir && *o->trace_dir ? dup_s(o->trace_dir) : NULL;
  s->model_id = dup_s(o->model_id ? o->model_id : spill_engine_info(eng)->name);
  if (o->session_dir && *o->session_dir) {
    size_t n = strlen(o->session_dir) + 32;
    s->session_file = malloc(n);
    if (s->session_file) snprintf(s->session_file, n, "%s/conversation.session", o->session_dir);
  }
  s->ctx = spill_engine_config(eng)->ctx;
  s->eos_id = spill_engine_info(eng)->eos_id;
  s->started = (long long)time(NULL);
  s->id_salt = (uint64_t)time(NULL) & 0xffffff;
  pthread_mutex_init(&s->mu, NULL);
  pthread_cond_init(&s->qcv, NULL);
  spill_srv_metrics_init(&s->m);
  s->m.queue_capacity = s->o.max_queue;
  s->m.budget_bytes = spill_engine_plan(eng)->budget;
  const spill_config *cfg = spill_engine_config(eng);
  s->m.cache_slots = cfg->storage == SPILL_STORAGE_MMAP ? 0
                     : cfg->cache_slots >= 0           ? (uint64_t)cfg->cache_slots
                                                       : spill_engine_plan(eng)->cache_slots;
  if (!s->host || !s->model_id || (o->api_key && *o->api_key && !s->api_key) ||
      (o->session_dir && *o->session_dir && !s->session_file)) {
    spill_server_close(s);
    return spill_err_set(e, SPILL_E_NOMEM, "out of memory");
  }
  struct stat sst;
  if (s->session_file && stat(s->session_file, &sst) == 0) {
    /* the conversation of the last run; another model's or ctx's, or a
     * damaged file, is refused rather than overwritten */
    int rc = spill_session_load(eng, s->session_file, e);
    if (rc) {
      spill_server_close(s);
      return rc;
    }
    if (!s->o.quiet)
      fprintf(stderr, "spill serve: session %s: %d tokens loaded\n", s->session_file,
                      spill_engine_tokens(eng, NULL));
  }
  /* a model directory with a tokenizer (spill_engine_tokenizer): chat goes
   * through its own template when it has one */
  s->tok = spill_engine_tokenizer(eng);
  if (s->tok && spill_tok_chat_template(s->tok)) s->chat_template = spill_tok_chat_template(s->tok);
  find_markers(s);
  struct sockaddr_storage ss;
  memset(&ss, 0, sizeof ss);
  socklen_t ss_len;
  struct sockaddr_in *a4 = (struct sockaddr_in *)&ss;
  struct sockaddr_in6 *a6 = (struct sockaddr_in6 *)&ss;
  if (inet_pton(AF_INET, s->host, &a4->sin_addr) == 1) {
    a4->sin_family = AF_INET;
    a4->sin_port = htons((uint16_t)o->port);
    ss_len = sizeof *a4;
  } else if (inet_pton(AF_INET6, s->host, &a6->sin6_addr) == 1) {
    a6->sin6_family = AF_INET6;
    a6->sin6_port = htons((uint16_t)o->port);
    ss_len = sizeof *a6;
  } else {
    int rc = spill_err_set(e, SPILL_E_CONFIG, "--host %s: not an IPv4 or IPv6 address", s->host);
    spill_server_close(s);
    return rc;
  }
  /* our own listening socket: the gate accepts, libmicrohttpd gets only
   * connections whose head is whole (MHD_add_connection) */
  int lfd = socket(ss.ss_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  int one = 1;
  if (lfd >= 0) setsockopt(lfd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  if (lfd < 0 || bind(lfd, (struct sockaddr *)&ss, ss_len) != 0 || listen(lfd, 256) != 0) {
    int rc = spill_err_set(e, SPILL_E_IO, "cannot listen on %s:%d: %s", s->host, o->port,
                           strerror(errno));
    if (lfd >= 0) close(lfd);
    spill_server_close(s);
    return rc;
  }
  struct sockaddr_storage bound;
  socklen_t bl = sizeof bound;
  getsockname(lfd, (struct sockaddr *)&bound, &bl);
  s->port = ntohs(bound.ss_family == AF_INET6 ? ((struct sockaddr_in6 *)&bound)->sin6_port
                                              : ((struct sockaddr_in *)&bound)->sin_port);
  s->max_conns = s->o.max_queue + 64;
  errno = 0;
  unsigned flags = MHD_USE_THREAD_PER_CONNECTION | MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_POLL |
                   MHD_USE_ITC | MHD_USE_NO_LISTEN_SOCKET;
  s->d = MHD_start_daemon(flags, 0, NULL, NULL, on_request, s,
                          MHD_OPTION_NOTIFY_COMPLETED, on_completed, s,
                          MHD_OPTION_NOTIFY_CONNECTION, on_connection, s,
                          /* slack over max_conns: the gate counts a connection
                           * when libmicrohttpd's thread reports it */
                          MHD_OPTION_CONNECTION_LIMIT, (unsigned)(s->max_conns + 16),
                          MHD_OPTION_CONNECTION_TIMEOUT, (unsigned)IDLE_TIMEOUT_S, MHD_OPTION_END);
  spill_srv_gate_opts go = {lfd, 64, 10000, 8192, s->o.max_body, gate_admit, gate_answered, s};
  if (!s->d || spill_srv_gate_open(&go, &s->gate) != 0) {
    int rc = spill_err_set(e, SPILL_E_IO, "cannot serve on %s:%d: %s", s->host, o->port,
                           errno ? strerror(errno) : "libmicrohttpd failed to start");
    close(lfd);
    spill_server_close(s);
    return rc;
  }
  *out = s;
  return SPILL_OK;
}

int spill_server_port(const spill_server *s) { return s->port; }

void spill_server_close(spill_server *s) {
  if (!s) return;
  pthread_mutex_lock(&s->mu);
  s->stopping = 1;
  pthread_mutex_unlock(&s->mu);
  /* no new connections (waiting heads get 503); then the replies already
   * decided (a queued job's 503, a stopped generation's end) are sent
   * before the connections are torn down: up to 10 s */
  spill_srv_gate_close(s->gate);
  for (int i = 0; s->d && i < 200; i++) {
    pthread_mutex_lock(&s->mu);
    int n = s->n_conns;
    pthread_mutex_unlock(&s->mu);
    if (n == 0) break;
    struct timespec ts = {0, 50 * 1000000L};
    nanosleep(&ts, NULL);
  }
  if (s->d) MHD_stop_daemon(s->d);
  /* jobs still queued (spill_server_run never ran or returned early) */
  job *j = s->head;
  while (j) {
    job *nx = j->next;
    job_free(j);
    j = nx;
  }
  spill_srv_metrics_free(&s->m);
  pthread_cond_destroy(&s->qcv);
  pthread_mutex_destroy(&s->mu);
  free(s->host);
  free(s->api_key);
  free(s->trace_dir);
  free(s->model_id);
  free(s->session_file);
  free(s);
}
