/* engine/spill_session.c: session files, an engine's conversation on disk
 * (docs/FORMAT.md "Session files"; spill.h spill_session_save / load).
 *
 * A session holds the engine's tokens, each layer's live attention state
 * (the spans its kind's row of the attention table names for that many
 * tokens: GQA keys and values, a sliding-window layer's of its last W - 1
 * positions only, MLA latents, all of a KDA state and its conv
 * rings), the last logits and the sampler's generator. It is bound to the
 * container (id, name, and a crc32 of the attention layout) and to ctx.
 * Saving streams straight from the model's state into a temp file (no copy
 * of the state in memory), fsyncs, renames and fsyncs the directory.
 * Loading checks the header (magic, version, header crc, identity, counts,
 * the exact file size those counts give) before it reads a byte of state,
 * then streams the body into the model with a running crc32; any failure
 * leaves the engine with an empty conversation. The file is untrusted: no
 * count from it sizes an allocation. Floats and integers are little-endian
 * (the engine runs on little-endian x86-64 only).
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <libgen.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "engine/base/crc32.h"
#include "engine/model/model.h"
#include "engine/spill.h"
#include "engine/spill_internal.h"

#if !defined(__BYTE_ORDER__) || __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "session files are written in host order, which must be little-endian"
#endif

#define SES_MAGIC "SPILLSES"
#define SES_VERSION 2u /* 2: sliding-window layers hold their last W - 1 positions */
#define SES_HEADER 128u
#define SES_F_LOGITS 1u
#define SES_F_RNG 2u
#define SES_NAME 56

/* The 128-byte header (docs/FORMAT.md). */
typedef struct ses_header {
  char magic[8];
  uint32_t version, header_bytes;
  uint64_t container_id;
  uint32_t ctx, n_tokens, n_layers, vocab;
  uint32_t arch_crc, flags;
  uint64_t seed, rng;
  char name[SES_NAME];
  uint32_t reserved;
  uint32_t header_crc; /* of bytes [0, 124) */
} ses_header;
_Static_assert(sizeof(ses_header) == SES_HEADER, "session header is 128 bytes");

/* crc32 of the attention layout: n_layers, d_model, vocab, and per layer its
 * kind and the float counts of its live spans at 0 and 1 tokens. */
static uint32_t arch_crc(spill_model *m) {
  const spill_arch *a = spill_model_arch(m);
  uint32_t v[3] = {(uint32_t)a->n_layers, (uint32_t)a->d_model, (uint32_t)a->vocab_size};
  uint32_t crc = spill_crc32(0, v, sizeof v);
  for (int l = 0; l < a->n_layers; l++) {
    uint64_t row[1 + 2 * SPILL_MODEL_STATE_SPANS] = {(uint64_t)a->layer_attn[l]};
    for (int n = 0; n < 2; n++) { /* ctx >= 1 */
      float *p[SPILL_MODEL_STATE_SPANS];
      spill_model_state_spans(m, l, n, p, row + 1 + n * SPILL_MODEL_STATE_SPANS);
    }
    crc = spill_crc32(crc, row, sizeof row);
  }
  return crc;
}

/* Floats of live state of every layer for n tokens. */
static uint64_t live_floats(spill_model *m, int n) {
  uint64_t total = 0;
  for (int l = 0; l < spill_model_arch(m)->n_layers; l++) {
    float *p[SPILL_MODEL_STATE_SPANS];
    uint64_t c[SPILL_MODEL_STATE_SPANS] = {0};
    const int k = spill_model_state_spans(m, l, n, p, c);
    for (int i = 0; i < k; i++) total += c[i];
  }
  return total;
}

static void fill_identity(spill_engine *g, ses_header *h) {
  spill_model *m = spill_engine_model_of(g);
  const spill_container *c = spill_model_container(m);
  memset(h, 0, sizeof *h);
  memcpy(h->magic, SES_MAGIC, 8);
  h->version = SES_VERSION;
  h->header_bytes = SES_HEADER;
  h->container_id = c->m.container_id;
  h->ctx = (uint32_t)spill_engine_config(g)->ctx;
  h->n_layers = (uint32_t)spill_model_arch(m)->n_layers;
  h->vocab = (uint32_t)spill_model_arch(m)->vocab_size;
  h->arch_crc = arch_crc(m);
  snprintf(h->name, sizeof h->name, "%s", c->m.name);
}

/* ---- save ---- */

typedef struct sink {
  int fd;
  uint32_t crc;
  const char *file;
} sink;

static int put(sink *s, const void *buf, size_t n, spill_err *e) {
  const char *p = buf;
  s->crc = spill_crc32(s->crc, buf, n);
  while (n) {
    const size_t want = n < (1u << 30) ? n : (1u << 30);
    const ssize_t w = write(s->fd, p, want);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0)
      return spill_err_set(e, SPILL_E_IO, "session %s: write failed: %s", s->file,
                           w < 0 ? strerror(errno) : "no progress");
    p += w;
    n -= (size_t)w;
  }
  return SPILL_OK;
}

static int write_body(spill_engine *g, sink *s, const ses_header *h, spill_err *e) {
  spill_engine_conv *cv = spill_engine_conv_of(g);
  spill_model *m = spill_engine_model_of(g);
  const int n = (int)h->n_tokens;
  SPILL_TRY(put(s, h, sizeof *h, e));
  s->crc = 0; /* the body crc starts after the header */
  SPILL_TRY(put(s, cv->tokens, (size_t)n * sizeof(int), e));
  for (int l = 0; l < (int)h->n_layers; l++) {
    float *p[SPILL_MODEL_STATE_SPANS];
    uint64_t c[SPILL_MODEL_STATE_SPANS] = {0};
    const int k = spill_model_state_spans(m, l, n, p, c);
    for (int i = 0; i < k; i++) SPILL_TRY(put(s, p[i], (size_t)c[i] * sizeof(float), e));
  }
  if (h->flags & SES_F_LOGITS) SPILL_TRY(put(s, cv->logits, (size_t)h->vocab * sizeof(float), e));
  const uint32_t crc = s->crc;
  return put(s, &crc, sizeof crc, e);
}

/* fsync of the directory holding file, so the rename survives a crash. */
static int sync_dir(const char *file, spill_err *e) {
  char *copy = strdup(file);
  SPILL_FAIL_IF(e, !copy, SPILL_E_NOMEM, "session %s: out of memory", file);
  const int fd = open(dirname(copy), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  int rc = SPILL_OK;
  if (fd < 0 || fsync(fd) != 0)
    rc = spill_err_set(e, SPILL_E_IO, "session %s: cannot sync its directory: %s", file,
                       strerror(errno));
  if (fd >= 0) close(fd);
  free(copy);
  return rc;
}

int spill_session_save(spill_engine *g, const char *file, spill_err *e) {
  SPILL_FAIL_IF(e, !g || !file || !*file, SPILL_E_INVALID_ARG, "session save: no engine or file");
  spill_engine_conv *cv = spill_engine_conv_of(g);
  spill_model *m = spill_engine_model_of(g);
  ses_header h;
  fill_identity(g, &h);
  h.n_tokens = (uint32_t)spill_model_n_past(m);
  if (cv->logits_pos == (int)h.n_tokens && h.n_tokens > 0) h.flags |= SES_F_LOGITS;
  if (cv->rng_valid) {
    h.flags |= SES_F_RNG;
    h.seed = cv->seed;
    h.rng = cv->rng;
  }
  h.header_crc = spill_crc32(0, &h, offsetof(ses_header, header_crc));
  const size_t flen = strlen(file);
  char *tmp = malloc(flen + 32);
  SPILL_FAIL_IF(e, !tmp, SPILL_E_NOMEM, "session %s: out of memory", file);
  snprintf(tmp, flen + 32, "%s.tmp.%ld", file, (long)getpid());
  sink s = {open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644), 0, file};
  if (s.fd < 0) {
    const int err = errno;
    free(tmp);
    return spill_err_set(e, SPILL_E_IO, "session %s: cannot create %s.tmp.*: %s", file, file,
                         strerror(err));
  }
  int rc = write_body(g, &s, &h, e);
  if (rc == SPILL_OK && fsync(s.fd) != 0)
    rc = spill_err_set(e, SPILL_E_IO, "session %s: fsync failed: %s", file, strerror(errno));
  if (close(s.fd) != 0 && rc == SPILL_OK)
    rc = spill_err_set(e, SPILL_E_IO, "session %s: close failed: %s", file, strerror(errno));
  if (rc == SPILL_OK && rename(tmp, file) != 0)
    rc = spill_err_set(e, SPILL_E_IO, "session %s: rename failed: %s", file, strerror(errno));
  if (rc != SPILL_OK) unlink(tmp);
  free(tmp);
  if (rc == SPILL_OK) rc = sync_dir(file, e);
  return rc;
}

/* ---- load ---- */

typedef struct source {
  int fd;
  uint64_t off;
  uint32_t crc;
  const char *file;
} source;

static int get(source *s, void *buf, size_t n, spill_err *e) {
  char *p = buf;
  size_t left = n;
  while (left) {
    const size_t want = left < (1u << 30) ? left : (1u << 30);
    const ssize_t r = pread(s->fd, p, want, (off_t)s->off);
    if (r < 0 && errno == EINTR) continue;
    if (r < 0)
      return spill_err_set(e, SPILL_E_IO, "session %s: read failed: %s", s->file, strerror(errno));
    if (r == 0)
      return spill_err_set(e, SPILL_E_FORMAT, "session %s: truncated at byte %llu", s->file,
                           (unsigned long long)s->off);
    p += r;
    left -= (size_t)r;
    s->off += (uint64_t)r;
  }
  s->crc = spill_crc32(s->crc, buf, n);
  return SPILL_OK;
}

/* The header checks, in the order that names the real problem first. */
static int check_header(spill_engine *g, const ses_header *h, uint64_t size, const char *file,
                        spill_err *e) {
  SPILL_FAIL_IF(e, memcmp(h->magic, SES_MAGIC, 8) != 0, SPILL_E_FORMAT,
                "session %s: not a session file (no SPILLSES magic)", file);
  SPILL_FAIL_IF(e, h->version == 1, SPILL_E_VERSION,
                "session %s: version 1 (every GQA layer's keys of all positions), this engine "
                "reads version %u (sliding-window layers keep their last W - 1): run the "
                "conversation again",
                file, SES_VERSION);
  SPILL_FAIL_IF(e, h->version != SES_VERSION, SPILL_E_VERSION,
                "session %s: version %u, this engine reads version %u", file, h->version,
                SES_VERSION);
  SPILL_FAIL_IF(e, h->header_crc != spill_crc32(0, h, offsetof(ses_header, header_crc)),
                SPILL_E_CHECKSUM, "session %s: header crc32 mismatch", file);
  SPILL_FAIL_IF(e, h->header_bytes != SES_HEADER || h->reserved != 0 ||
                       (h->flags & ~(SES_F_LOGITS | SES_F_RNG)) || memchr(h->name, 0, SES_NAME) == NULL,
                SPILL_E_FORMAT, "session %s: malformed header (size %u, flags 0x%x)", file,
                h->header_bytes, h->flags);
  ses_header mine;
  fill_identity(g, &mine);
  SPILL_FAIL_IF(e, h->container_id != mine.container_id || strcmp(h->name, mine.name) != 0 ||
                       h->arch_crc != mine.arch_crc || h->n_layers != mine.n_layers ||
                       h->vocab != mine.vocab,
                SPILL_E_SESSION,
                "session %s: saved for model '%s' (container %016llx, layout %08x), this engine "
                "runs '%s' (container %016llx, layout %08x)",
                file, h->name, (unsigned long long)h->container_id, h->arch_crc, mine.name,
                (unsigned long long)mine.container_id, mine.arch_crc);
  SPILL_FAIL_IF(e, h->ctx != mine.ctx, SPILL_E_SESSION,
                "session %s: saved at ctx %u, this engine runs ctx %u", file, h->ctx, mine.ctx);
  SPILL_FAIL_IF(e, h->n_tokens > mine.ctx, SPILL_E_FORMAT,
                "session %s: %u tokens exceed its ctx %u", file, h->n_tokens, mine.ctx);
  SPILL_FAIL_IF(e, (h->flags & SES_F_LOGITS) && h->n_tokens == 0, SPILL_E_FORMAT,
                "session %s: logits without tokens", file);
  SPILL_FAIL_IF(e, (h->flags & SES_F_RNG) && h->rng == 0, SPILL_E_FORMAT,
                "session %s: sampler generator state 0", file);
  const uint64_t want = SES_HEADER + 4ull * h->n_tokens +
                        4ull * live_floats(spill_engine_model_of(g), (int)h->n_tokens) +
                        (h->flags & SES_F_LOGITS ? 4ull * h->vocab : 0) + 4;
  SPILL_FAIL_IF(e, size != want, SPILL_E_FORMAT,
                "session %s: %llu bytes, but %u tokens of this model make %llu (%s)", file,
                (unsigned long long)size, h->n_tokens, (unsigned long long)want,
                size < want ? "truncated" : "trailing bytes");
  return SPILL_OK;
}

static int read_body(spill_engine *g, source *s, const ses_header *h, spill_err *e) {
  spill_engine_conv *cv = spill_engine_conv_of(g);
  spill_model *m = spill_engine_model_of(g);
  const int n = (int)h->n_tokens;
  s->crc = 0;
  SPILL_TRY(get(s, cv->tokens, (size_t)n * sizeof(int), e));
  for (int i = 0; i < n; i++)
    SPILL_FAIL_IF(e, cv->tokens[i] < 0 || cv->tokens[i] >= (int)h->vocab, SPILL_E_FORMAT,
                  "session %s: token %d at index %d out of range (vocab %u)", s->file,
                  cv->tokens[i], i, h->vocab);
  for (int l = 0; l < (int)h->n_layers; l++) {
    float *p[SPILL_MODEL_STATE_SPANS];
    uint64_t c[SPILL_MODEL_STATE_SPANS] = {0};
    const int k = spill_model_state_spans(m, l, n, p, c);
    for (int i = 0; i < k; i++) SPILL_TRY(get(s, p[i], (size_t)c[i] * sizeof(float), e));
  }
  if (h->flags & SES_F_LOGITS) SPILL_TRY(get(s, cv->logits, (size_t)h->vocab * sizeof(float), e));
  const uint32_t body = s->crc;
  uint32_t stored;
  SPILL_TRY(get(s, &stored, sizeof stored, e));
  SPILL_FAIL_IF(e, stored != body, SPILL_E_CHECKSUM,
                "session %s: body crc32 mismatch (stored %08x, computed %08x)", s->file, stored,
                body);
  return SPILL_OK;
}

int spill_session_load(spill_engine *g, const char *file, spill_err *e) {
  SPILL_FAIL_IF(e, !g || !file || !*file, SPILL_E_INVALID_ARG, "session load: no engine or file");
  spill_engine_conv *cv = spill_engine_conv_of(g);
  spill_model *m = spill_engine_model_of(g);
  /* whatever happens below, the old conversation is gone */
  spill_model_reset(m);
  cv->logits_pos = -1;
  cv->rng_valid = 0;
  source s = {open(file, O_RDONLY | O_CLOEXEC), 0, 0, file};
  if (s.fd < 0)
    return spill_err_set(e, SPILL_E_IO, "session %s: cannot open: %s", file, strerror(errno));
  struct stat sb;
  int rc = SPILL_OK;
  ses_header h;
  if (fstat(s.fd, &sb) != 0)
    rc = spill_err_set(e, SPILL_E_IO, "session %s: cannot stat: %s", file, strerror(errno));
  else if (!S_ISREG(sb.st_mode))
    rc = spill_err_set(e, SPILL_E_FORMAT, "session %s: not a regular file", file);
  else if ((uint64_t)sb.st_size < SES_HEADER)
    rc = spill_err_set(e, SPILL_E_FORMAT, "session %s: %lld bytes, shorter than its %u-byte header",
                       file, (long long)sb.st_size, SES_HEADER);
  if (rc == SPILL_OK) rc = get(&s, &h, sizeof h, e);
  if (rc == SPILL_OK) rc = check_header(g, &h, (uint64_t)sb.st_size, file, e);
  if (rc == SPILL_OK) rc = read_body(g, &s, &h, e);
  close(s.fd);
  if (rc == SPILL_OK) rc = spill_model_state_restore(m, (int)h.n_tokens, e);
  if (rc != SPILL_OK) {
    spill_model_reset(m); /* a partly read state is no conversation */
    return rc;
  }
  cv->logits_pos = h.flags & SES_F_LOGITS ? (int)h.n_tokens : -1;
  if (h.flags & SES_F_RNG) {
    cv->rng_valid = 1;
    cv->seed = h.seed;
    cv->rng = h.rng;
  }
  return SPILL_OK;
}
