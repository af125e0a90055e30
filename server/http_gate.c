/* server/http_gate.c: accept, wait for a whole request head, check its
 * framing, then answer or hand over (http_gate.h).
 *
 * One thread polls the listening socket, a wake pipe and every pending
 * connection. A pending connection is only peeked at, so the bytes stay in
 * the socket for libmicrohttpd. The list is an array in accept order;
 * max_pending is small (64), so linear scans are fine. The parser is
 * stricter than libmicrohttpd's (single spaces in the request line, token
 * header names, no folded lines, no Transfer-Encoding), so a head it
 * passes is one libmicrohttpd parses without an error of its own. */
#define _GNU_SOURCE
#include "server/http_gate.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

/* ------------------------------------------------------------ the parser */

static int is_tchar(unsigned char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
         (c && strchr("!#$%&'*+-.^_`|~", c));
}

static int name_is(const char *p, size_t n, const char *want) {
  return strlen(want) == n && !strncasecmp(p, want, n);
}

static int fail(char *why, size_t why_n, int status, const char *msg) {
  snprintf(why, why_n, "%s", msg);
  return status;
}

/* One line of buf[*i..end): its start and length without CR LF; *i moves
 * past it. Returns -1 on a bare CR inside the line. */
static int next_line(const char *buf, size_t end, size_t *i, const char **l, size_t *ln) {
  size_t s = *i, e = s;
  while (e < end && buf[e] != '\n') e++;
  *i = e + 1;
  if (e > s && buf[e - 1] == '\r') e--;
  *l = buf + s;
  *ln = e - s;
  return memchr(*l, '\r', *ln) ? -1 : 0;
}

static int parse_request_line(const char *l, size_t n, spill_srv_head *out, char *why,
                              size_t why_n) {
  size_t m = 0;
  while (m < n && is_tchar((unsigned char)l[m])) m++;
  if (m == 0 || m >= n || l[m] != ' ')
    return fail(why, why_n, 400, "malformed request line (expected METHOD /path HTTP/1.1)");
  size_t p = m + 1, q = p;
  while (q < n && (unsigned char)l[q] > 0x20 && (unsigned char)l[q] < 0x7f) q++;
  if (q == p || l[p] != '/' || q >= n || l[q] != ' ')
    return fail(why, why_n, 400, "malformed request line (expected METHOD /path HTTP/1.1)");
  const char *v = l + q + 1;
  size_t vn = n - q - 1;
  if (vn != 8 || strncmp(v, "HTTP/1.", 7) || (v[7] != '0' && v[7] != '1'))
    return vn >= 5 && !strncmp(v, "HTTP/", 5)
               ? fail(why, why_n, 505, "only HTTP/1.0 and HTTP/1.1 are served")
               : fail(why, why_n, 400, "malformed request line (expected METHOD /path HTTP/1.1)");
  out->method = l;
  out->method_len = m;
  out->path = l + p;
  out->path_len = q - p;
  return 0;
}

/* Content-Length: 1-19 decimal digits (optional spaces around). */
static int parse_length(const char *v, size_t n, uint64_t *out, char *why, size_t why_n) {
  size_t digits = 0;
  uint64_t x = 0;
  for (size_t i = 0; i < n; i++) {
    if (v[i] < '0' || v[i] > '9')
      return fail(why, why_n, 400, "Content-Length is not a decimal number");
    if (++digits > 19) return fail(why, why_n, 413, "Content-Length is too large");
    x = x * 10 + (uint64_t)(v[i] - '0');
  }
  if (!digits) return fail(why, why_n, 400, "Content-Length is empty");
  *out = x;
  return 0;
}

static int parse_header(const char *l, size_t n, spill_srv_head *out, char *why, size_t why_n) {
  if (l[0] == ' ' || l[0] == '\t')
    return fail(why, why_n, 400, "folded header lines are not accepted");
  size_t c = 0;
  while (c < n && is_tchar((unsigned char)l[c])) c++;
  if (c == 0 || c >= n || l[c] != ':')
    return fail(why, why_n, 400, "malformed header line (expected Name: value)");
  const char *v = l + c + 1;
  size_t vn = n - c - 1;
  for (size_t i = 0; i < vn; i++) {
    unsigned char b = (unsigned char)v[i];
    if ((b < 0x20 && b != '\t') || b == 0x7f)
      return fail(why, why_n, 400, "a control character in a header value");
  }
  while (vn && (*v == ' ' || *v == '\t')) v++, vn--;
  while (vn && (v[vn - 1] == ' ' || v[vn - 1] == '\t')) vn--;
  if (name_is(l, c, "content-length")) {
    if (out->has_length) return fail(why, why_n, 400, "Content-Length given twice");
    int rc = parse_length(v, vn, &out->content_length, why, why_n);
    if (rc) return rc;
    out->has_length = 1;
  } else if (name_is(l, c, "transfer-encoding")) {
    return fail(why, why_n, 411,
                "Transfer-Encoding is not accepted: send the body with a Content-Length");
  } else if (name_is(l, c, "authorization")) {
    if (out->auth) return fail(why, why_n, 400, "Authorization given twice");
    out->auth = v;
    out->auth_len = vn;
  }
  return 0;
}

int spill_srv_head_parse(const char *buf, size_t n, size_t max_head, uint64_t max_body,
                         spill_srv_head *out, char *why, size_t why_n) {
  memset(out, 0, sizeof *out);
  size_t lim = n < max_head ? n : max_head, end = 0;
  /* the blank line: "\n\r\n" or "\n\n" */
  for (size_t i = 0; i < lim && !end; i++) {
    if (buf[i] != '\n') continue;
    if (i + 1 < lim && buf[i + 1] == '\n') end = i + 2;
    else if (i + 2 < lim && buf[i + 1] == '\r' && buf[i + 2] == '\n') end = i + 3;
  }
  if (!end) {
    if (n >= max_head) return fail(why, why_n, 431, "the request head is too large");
    return 1;
  }
  size_t i = 0;
  const char *l;
  size_t ln;
  if (next_line(buf, end, &i, &l, &ln)) return fail(why, why_n, 400, "a bare CR in the request line");
  int rc = parse_request_line(l, ln, out, why, why_n);
  if (rc) return rc;
  while (i < end) {
    if (next_line(buf, end, &i, &l, &ln)) return fail(why, why_n, 400, "a bare CR in a header line");
    if (ln == 0) break;
    rc = parse_header(l, ln, out, why, why_n);
    if (rc) return rc;
  }
  if (!out->has_length && out->method_len == 4 && !strncmp(out->method, "POST", 4))
    return fail(why, why_n, 411, "a POST needs a Content-Length");
  if (out->has_length && out->content_length > max_body) {
    snprintf(why, why_n, "the request body is larger than %llu bytes",
             (unsigned long long)max_body);
    return 413;
  }
  out->head_len = end;
  return 0;
}

/* -------------------------------------------------------------- replies */

static const char *reason(int st) {
  switch (st) {
    case 200: return "OK";
    case 400: return "Bad Request";
    case 401: return "Unauthorized";
    case 404: return "Not Found";
    case 405: return "Method Not Allowed";
    case 408: return "Request Timeout";
    case 411: return "Length Required";
    case 413: return "Content Too Large";
    case 431: return "Request Header Fields Too Large";
    case 503: return "Service Unavailable";
    case 505: return "HTTP Version Not Supported";
    default: return "Error";
  }
}

static const char *code_of(int st) {
  switch (st) {
    case 408: return "request_timeout";
    case 411: return "length_required";
    case 413: return "body_too_large";
    case 431: return "header_too_large";
    case 503: return "unavailable";
    case 505: return "http_version_not_supported";
    default: return "bad_request";
  }
}

void spill_srv_gate_reply(int fd, int status, const char *json) {
  char head[256];
  size_t bn = json ? strlen(json) : 0;
  int hn = snprintf(head, sizeof head,
                    "HTTP/1.1 %d %s\r\nContent-Type: application/json\r\nContent-Length: %zu\r\n"
                    "Connection: close\r\n%s\r\n",
                    status, reason(status), bn, status == 401 ? "WWW-Authenticate: Bearer\r\n" : "");
  struct iovec iov[2] = {{head, (size_t)hn}, {(void *)json, bn}};
  struct msghdr mh;
  memset(&mh, 0, sizeof mh);
  mh.msg_iov = iov;
  mh.msg_iovlen = 2;
  size_t left = (size_t)hn + bn;
  for (int tries = 0; left && tries < 20; tries++) {
    ssize_t w = sendmsg(fd, &mh, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (w < 0 && (errno == EAGAIN || errno == EINTR)) {
      struct pollfd p = {fd, POLLOUT, 0};
      poll(&p, 1, 10);
      continue;
    }
    if (w <= 0) return;
    left -= (size_t)w;
    while (w > 0 && mh.msg_iovlen) {
      size_t take = (size_t)w < mh.msg_iov[0].iov_len ? (size_t)w : mh.msg_iov[0].iov_len;
      mh.msg_iov[0].iov_base = (char *)mh.msg_iov[0].iov_base + take;
      mh.msg_iov[0].iov_len -= take;
      w -= (ssize_t)take;
      if (!mh.msg_iov[0].iov_len) mh.msg_iov++, mh.msg_iovlen--;
    }
  }
}

/* Answers with a JSON error of ours (msg: our own ASCII text, no quotes). */
static void reply_error(int fd, int status, const char *msg) {
  char body[512];
  snprintf(body, sizeof body,
           "{\"error\":{\"message\":\"%s\",\"type\":\"%s\",\"param\":null,\"code\":\"%s\"}}\n", msg,
           status >= 500 ? "server_error" : "invalid_request_error", code_of(status));
  spill_srv_gate_reply(fd, status, body);
}

/* Closes after a reply: what the client already sent is read and dropped
 * first, so the close sends FIN, not a reset that could destroy the reply. */
static void close_conn(int fd) {
  char drop[4096];
  for (int k = 0; k < 16 && recv(fd, drop, sizeof drop, MSG_DONTWAIT) > 0; k++) {
  }
  shutdown(fd, SHUT_WR);
  close(fd);
}

/* ------------------------------------------------------------ the thread */

typedef struct pending {
  int fd;
  uint64_t t0_ms;
  struct sockaddr_storage addr;
  socklen_t addr_len;
} pending;

struct spill_srv_gate {
  spill_srv_gate_opts o;
  pthread_t th;
  int wake[2];
  int stop; /* __atomic */
  pending *p;
  int n;
  char *buf;
};

static uint64_t now_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (uint64_t)ts.tv_sec * 1000u + (uint64_t)ts.tv_nsec / 1000000u;
}

static void drop(spill_srv_gate *g, int i) {
  memmove(g->p + i, g->p + i + 1, (size_t)(g->n - i - 1) * sizeof *g->p);
  g->n--;
}

static void answer_and_drop(spill_srv_gate *g, int i, int status, const char *msg,
                            const spill_srv_head *h) {
  reply_error(g->p[i].fd, status, msg);
  if (g->o.answered) g->o.answered(g->o.user, h ? h->path : NULL, h ? h->path_len : 0, status);
  close_conn(g->p[i].fd);
  drop(g, i);
}

/* Looks at pending connection i (rdhup: the client closed its sending
 * side). Returns 1 if it left the list. */
static int check(spill_srv_gate *g, int i, int rdhup) {
  pending *c = &g->p[i];
  ssize_t r = recv(c->fd, g->buf, g->o.max_head, MSG_PEEK | MSG_DONTWAIT);
  if (r == 0 || (r < 0 && errno != EAGAIN && errno != EINTR)) {
    close(c->fd); /* gone before sending a head: nobody to answer */
    drop(g, i);
    return 1;
  }
  if (r < 0) return 0;
  spill_srv_head h;
  char why[160];
  int rc = spill_srv_head_parse(g->buf, (size_t)r, g->o.max_head, g->o.max_body, &h, why, sizeof why);
  if (rc == 1 && !rdhup) return 0;
  if (rc == 1) {
    answer_and_drop(g, i, 400, "the connection was closed inside the request head", NULL);
    return 1;
  }
  if (rc) {
    answer_and_drop(g, i, rc, why, h.path ? &h : NULL);
    return 1;
  }
  int status = 500;
  char *body = NULL;
  int fd = c->fd;
  if (g->o.admit(g->o.user, fd, (struct sockaddr *)&c->addr, c->addr_len, &h, &status, &body) ==
      SPILL_GATE_ADMIT) {
    drop(g, i);
    return 1;
  }
  if (body) spill_srv_gate_reply(fd, status, body);
  else reply_error(fd, status, "the request cannot be served");
  free(body);
  if (g->o.answered) g->o.answered(g->o.user, h.path, h.path_len, status);
  close_conn(fd);
  drop(g, i);
  return 1;
}

static void accept_new(spill_srv_gate *g) {
  for (int k = 0; k < 64; k++) {
    pending c;
    c.addr_len = sizeof c.addr;
    c.fd = accept4(g->o.listen_fd, (struct sockaddr *)&c.addr, &c.addr_len,
                   SOCK_NONBLOCK | SOCK_CLOEXEC);
    if (c.fd < 0) return; /* EAGAIN, or out of fds: try again at the next poll */
    if (g->n == g->o.max_pending) /* the oldest waiting head makes room */
      answer_and_drop(g, 0, 408, "the request head did not arrive before newer connections needed the place", NULL);
    c.t0_ms = now_ms();
    g->p[g->n++] = c;
    check(g, g->n - 1, 0);
  }
}

static void *gate_main(void *arg) {
  spill_srv_gate *g = arg;
  struct pollfd *pf = calloc((size_t)g->o.max_pending + 2, sizeof *pf);
  while (pf && !__atomic_load_n(&g->stop, __ATOMIC_ACQUIRE)) {
    uint64_t now = now_ms();
    int timeout = 1000;
    for (int i = 0; i < g->n; i++) {
      uint64_t dl = g->p[i].t0_ms + (uint64_t)g->o.header_ms;
      int left = dl > now ? (int)(dl - now) : 0;
      if (left < timeout) timeout = left;
    }
    pf[0] = (struct pollfd){g->wake[0], POLLIN, 0};
    pf[1] = (struct pollfd){g->o.listen_fd, POLLIN, 0};
    int n = g->n;
    for (int i = 0; i < n; i++) pf[2 + i] = (struct pollfd){g->p[i].fd, POLLIN | POLLRDHUP, 0};
    if (poll(pf, (nfds_t)n + 2, timeout) < 0 && errno != EINTR) break;
    if (__atomic_load_n(&g->stop, __ATOMIC_ACQUIRE)) break;
    if (pf[0].revents) {
      char b[64];
      while (read(g->wake[0], b, sizeof b) > 0) {
      }
    }
    /* pending ones first (indices shift as they leave: walk backwards) */
    for (int i = n - 1; i >= 0; i--)
      if (pf[2 + i].revents) check(g, i, (pf[2 + i].revents & (POLLRDHUP | POLLHUP | POLLERR)) != 0);
    now = now_ms();
    for (int i = g->n - 1; i >= 0; i--)
      if (now >= g->p[i].t0_ms + (uint64_t)g->o.header_ms)
        answer_and_drop(g, i, 408, "the request head did not arrive in time", NULL);
    if (pf[1].revents) accept_new(g);
  }
  free(pf);
  return NULL;
}

int spill_srv_gate_open(const spill_srv_gate_opts *o, spill_srv_gate **out) {
  *out = NULL;
  spill_srv_gate *g = calloc(1, sizeof *g);
  if (!g) return -1;
  g->o = *o;
  if (g->o.max_pending <= 0) g->o.max_pending = 64;
  if (g->o.header_ms <= 0) g->o.header_ms = 10000;
  if (!g->o.max_head) g->o.max_head = 8192;
  g->p = calloc((size_t)g->o.max_pending, sizeof *g->p);
  g->buf = malloc(g->o.max_head);
  g->wake[0] = g->wake[1] = -1;
  if (!g->p || !g->buf || pipe2(g->wake, O_NONBLOCK | O_CLOEXEC) != 0 ||
      pthread_create(&g->th, NULL, gate_main, g) != 0) {
    int err = errno ? errno : ENOMEM;
    if (g->wake[0] >= 0) close(g->wake[0]), close(g->wake[1]);
    free(g->p);
    free(g->buf);
    free(g);
    errno = err;
    return -1;
  }
  *out = g;
  return 0;
}

void spill_srv_gate_close(spill_srv_gate *g) {
  if (!g) return;
  __atomic_store_n(&g->stop, 1, __ATOMIC_RELEASE);
  if (write(g->wake[1], "x", 1) < 0) {
    /* the pipe is full: the thread is awake anyway */
  }
  pthread_join(g->th, NULL);
  while (g->n > 0) answer_and_drop(g, g->n - 1, 503, "the server is shutting down", NULL);
  close(g->o.listen_fd);
  close(g->wake[0]);
  close(g->wake[1]);
  free(g->p);
  free(g->buf);
  free(g);
}
