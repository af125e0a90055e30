/* fuzz/fuzz_tok.c: libFuzzer target for engine/tok (tokenizers and chat
 * templates). The first byte picks a mode, the rest is the input:
 *   0: text through a byte-level BPE tokenizer (NFC, a Qwen-style split,
 *      merges, special tokens): decode(encode(x)) must equal normalize(x)
 *      and the streaming decoder must emit the same bytes;
 *   1: text through a SentencePiece-style tokenizer (byte fallback):
 *      the same round trip where it holds (no U+2581, no "<s>"/"<unk>");
 *   2: the bytes as a tokenizer.json: loads or fails cleanly; if it loads,
 *      a fixed text encodes and decodes;
 *   3: the bytes as a chat template, rendered over a fixed conversation:
 *      renders or fails cleanly;
 *   4: the bytes as a tiktoken rank file (not NUL-terminated): loads or
 *      fails cleanly; if it loads, a fixed text round-trips.
 * Any mismatch aborts; crashes, leaks and UB are found by the sanitizers.
 */
#define _GNU_SOURCE
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/tok/spill_tok.h"

static spill_tok *g_bl, *g_spm;

static int printable(int b) { return (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || b >= 0xAE; }

static size_t put_cp(char *o, unsigned cp) {
  if (cp < 0x80) {
    if (cp == '"' || cp == '\\') { o[0] = '\\'; o[1] = (char)cp; return 2; }
    o[0] = (char)cp;
    return 1;
  }
  o[0] = (char)(0xC0 | (cp >> 6));
  o[1] = (char)(0x80 | (cp & 0x3F));
  return 2;
}

static spill_tok *make_bytelevel(void) {
  static char json[32768];
  size_t n = 0;
  n += (size_t)snprintf(json + n, sizeof json - n,
                        "{\"added_tokens\":[{\"id\":262,\"content\":\"<|end|>\",\"special\":true},"
                        "{\"id\":263,\"content\":\"<think>\",\"special\":false}],"
                        "\"normalizer\":{\"type\":\"NFC\"},\"pre_tokenizer\":{\"type\":\"Sequence\","
                        "\"pretokenizers\":[{\"type\":\"Split\",\"pattern\":{\"Regex\":"
                        "\"(?i:'s|'t)|[^\\\\r\\\\n\\\\p{L}\\\\p{N}]?\\\\p{L}+|\\\\p{N}| ?[^\\\\s\\\\p{L}\\\\p{N}]+"
                        "[\\\\r\\\\n]*|\\\\s*[\\\\r\\\\n]+|\\\\s+(?!\\\\S)|\\\\s+\"},\"behavior\":\"Isolated\"},"
                        "{\"type\":\"ByteLevel\",\"use_regex\":false}]},\"decoder\":{\"type\":\"ByteLevel\"},"
                        "\"model\":{\"type\":\"BPE\",\"vocab\":{");
  for (int b = 0, k = 0; b < 256; b++) {
    unsigned cp = (unsigned)b;
    if (!printable(b)) {
      int m = 0;
      for (int c = 0; c < b; c++) m += !printable(c);
      cp = 256u + (unsigned)m;
    }
    json[n++] = k++ ? ',' : ' ';
    json[n++] = '"';
    n += put_cp(json + n, cp);
    n += (size_t)snprintf(json + n, sizeof json - n, "\":%d", b);
  }
  n += (size_t)snprintf(json + n, sizeof json - n,
                        ",\"he\":256,\"ll\":257,\"hell\":258,\"\xC4\xA0w\":259,\"hello\":260,\"\xC3\xA4\xC2\xB8\":261},"
                        "\"merges\":[\"h e\",\"l l\",\"he ll\",\"\xC4\xA0 w\",\"hell o\",\"\xC3\xA4 \xC2\xB8\"]}}");
  spill_tok *t = NULL;
  spill_err e = {0};
  if (spill_tok_load_hf(json, n, NULL, 0, &t, &e) != SPILL_OK) {
    fprintf(stderr, "fuzz_tok: byte-level fixture: %s\n", e.msg);
    abort();
  }
  return t;
}

static spill_tok *make_spm(void) {
  static char json[32768];
  size_t n = 0;
  n += (size_t)snprintf(json + n, sizeof json - n,
                        "{\"added_tokens\":[{\"id\":0,\"content\":\"<unk>\",\"special\":true},{\"id\":1,"
                        "\"content\":\"<s>\",\"special\":true}],\"normalizer\":{\"type\":\"Sequence\","
                        "\"normalizers\":[{\"type\":\"Prepend\",\"prepend\":\"\xE2\x96\x81\"},{\"type\":"
                        "\"Replace\",\"pattern\":{\"String\":\" \"},\"content\":\"\xE2\x96\x81\"}]},"
                        "\"pre_tokenizer\":null,\"decoder\":{\"type\":\"Sequence\",\"decoders\":[{\"type\":"
                        "\"Replace\",\"pattern\":{\"String\":\"\xE2\x96\x81\"},\"content\":\" \"},{\"type\":"
                        "\"ByteFallback\"},{\"type\":\"Fuse\"},{\"type\":\"Strip\",\"content\":\" \","
                        "\"start\":1,\"stop\":0}]},\"model\":{\"type\":\"BPE\",\"unk_token\":\"<unk>\","
                        "\"byte_fallback\":true,\"vocab\":{\"<unk>\":0,\"<s>\":1");
  for (int b = 0; b < 256; b++) n += (size_t)snprintf(json + n, sizeof json - n, ",\"<0x%02X>\":%d", b, 2 + b);
  n += (size_t)snprintf(json + n, sizeof json - n,
                        ",\"\xE2\x96\x81\":258,\"a\":259,\"b\":260,\"ab\":261,\"\xE2\x96\x81" "ab\":262,"
                        "\"\xC3\xA9\":263},\"merges\":[\"a b\",\"\xE2\x96\x81 ab\"]}}");
  spill_tok *t = NULL;
  spill_err e = {0};
  if (spill_tok_load_hf(json, n, NULL, 0, &t, &e) != SPILL_OK) {
    fprintf(stderr, "fuzz_tok: sentencepiece fixture: %s\n", e.msg);
    abort();
  }
  return t;
}

int LLVMFuzzerInitialize(int *argc, char ***argv) {
  (void)argc;
  (void)argv;
  g_bl = make_bytelevel();
  g_spm = make_spm();
  return 0;
}

static void round_trip(spill_tok *t, const char *s, size_t n, int must_hold) {
  spill_tok_ids ids = {0};
  spill_err e = {0};
  if (spill_tok_encode(t, s, n, SPILL_TOK_SPECIAL, &ids, &e) != SPILL_OK) abort();
  char *dec = NULL, *norm = NULL;
  size_t dl = 0, nl = 0;
  if (spill_tok_decode(t, ids.ids, ids.n, 0, &dec, &dl, &e) != SPILL_OK) abort();
  if (spill_tok_normalize(t, s, n, &norm, &nl, &e) != SPILL_OK) abort();
  int holds = dl == nl && memcmp(dec, norm, dl) == 0;
  if (must_hold == 1) {
    if (!holds) abort();
  } else if (must_hold == 2) { /* SentencePiece: only when the text has no U+2581 / added tokens */
    if (!memmem(norm, nl, "\xE2\x96\x81", 3) && !memmem(norm, nl, "<s>", 3) &&
        !memmem(norm, nl, "<unk>", 5) && !holds)
      abort();
  }
  /* streaming decode emits the same bytes */
  spill_tok_stream st = {0};
  size_t cap = 64 + spill_tok_max_piece(t) + 8;
  char *buf = malloc(cap), *all = malloc(dl + 16);
  size_t got = 0;
  for (size_t i = 0; i < ids.n; i++) {
    int k = spill_tok_stream_push(t, &st, ids.ids[i], 0, buf, cap, &e);
    if (k < 0 || got + (size_t)k > dl) abort();
    memcpy(all + got, buf, (size_t)k);
    got += (size_t)k;
  }
  int k = spill_tok_stream_flush(&st, buf, cap);
  if (k < 0 || got + (size_t)k != dl) abort();
  memcpy(all + got, buf, (size_t)k);
  if (memcmp(all, dec, dl) != 0) abort();
  free(buf);
  free(all);
  free(dec);
  free(norm);
  spill_tok_ids_free(&ids);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (!g_bl) LLVMFuzzerInitialize(NULL, NULL);
  if (size == 0) return 0;
  const char *s = (const char *)data + 1;
  size_t n = size - 1;
  switch (data[0] % 5) {
    case 0: round_trip(g_bl, s, n, 1); break;
    case 1: round_trip(g_spm, s, n, 2); break;
    case 2: {
      spill_tok *t = NULL;
      spill_err e = {0};
      if (spill_tok_load_hf(s, n, NULL, 0, &t, &e) == SPILL_OK) {
        spill_tok_ids ids = {0};
        if (spill_tok_encode(t, "Hello world", 11, SPILL_TOK_SPECIAL, &ids, &e) == SPILL_OK) {
          char *d = NULL;
          size_t dl;
          if (spill_tok_decode(t, ids.ids, ids.n, 0, &d, &dl, &e) == SPILL_OK) free(d);
        }
        spill_tok_ids_free(&ids);
        spill_tok_free(t);
      }
      break;
    }
    case 4: {
      spill_tok *t = NULL;
      spill_err e = {0};
      if (spill_tok_load_tiktoken(s, n, NULL, NULL, NULL, 0, &t, &e) == SPILL_OK) {
        spill_tok_ids ids = {0};
        /* a vocabulary without every byte may refuse the text; if it
         * encodes, the round trip must hold */
        int ok = spill_tok_encode(t, "Hello world 123", 15, SPILL_TOK_SPECIAL, &ids, &e) == SPILL_OK;
        spill_tok_ids_free(&ids);
        if (ok) round_trip(t, "Hello world 123", 15, 1);
        spill_tok_free(t);
      }
      break;
    }
    default: {
      char *tmpl = malloc(n + 1);
      memcpy(tmpl, s, n);
      tmpl[n] = 0;
      spill_chat_msg msgs[] = {{"system", "sys"}, {"user", "hi"}, {"assistant", "ok"}};
      char *out = NULL;
      spill_err e = {0};
      if (spill_chat_render(tmpl, msgs, 3, 1, "<s>", "</s>", &out, &e) == SPILL_OK) free(out);
      free(tmpl);
      break;
    }
  }
  return 0;
}
