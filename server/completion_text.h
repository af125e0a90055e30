/* server/completion_text.h: the generated text of one request, as the
 * client sees it: token bytes -> valid UTF-8 -> cut at a stop sequence.
 *
 * Role: tokens arrive as bytes (a byte tokenizer emits any byte; a BPE token
 * may end inside a character). JSON needs valid UTF-8, so the bytes go
 * through an incremental WHATWG UTF-8 decoder: an invalid or truncated
 * sequence becomes U+FFFD exactly as a browser or Node's TextDecoder would
 * decode the whole byte stream, and an incomplete character is held until
 * it completes. Stop sequences are matched on that text; text that could be
 * the start of a stop sequence is held back from streaming until it is
 * decided. Pure; no engine, no I/O.
 */
#ifndef SPILL_SERVER_COMPLETION_TEXT_H
#define SPILL_SERVER_COMPLETION_TEXT_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct spill_srv_text {
  /* WHATWG UTF-8 decoder state */
  uint32_t cp;
  int needed, seen;
  unsigned char lower, upper;
  /* the decoded text so far (NUL-terminated; owned) */
  char *buf;
  size_t len, cap;
  size_t released; /* bytes of buf handed out by spill_srv_text_take */
  const char *const *stop; /* borrowed */
  int n_stop;
  int stopped;     /* a stop sequence matched: buf ends before it */
  int finished;
} spill_srv_text;

/* stop[0..n_stop) are borrowed and must outlive t (may be 0). */
void spill_srv_text_init(spill_srv_text *t, const char *const *stop, int n_stop);
void spill_srv_text_free(spill_srv_text *t);
/* Feeds token bytes. Returns 1 when a stop sequence matched (the text is
 * cut before it; later pushes are ignored), 0 otherwise, -1 out of memory. */
int spill_srv_text_push(spill_srv_text *t, const char *bytes, size_t n);
/* End of generation: an incomplete trailing sequence becomes U+FFFD and all
 * held-back text is releasable. */
int spill_srv_text_finish(spill_srv_text *t);
/* The text not yet released that can no longer change: *p points into the
 * buffer (valid until the next push); returns its length and marks it
 * released. */
size_t spill_srv_text_take(spill_srv_text *t, const char **p);

#ifdef __cplusplus
}
#endif
#endif
