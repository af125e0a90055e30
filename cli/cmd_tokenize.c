/* cli/cmd_tokenize.c: `spill tokenize` and `spill detokenize`: a real
 * tokenizer (engine/tok, docs/TOKENIZER.md) from a checkpoint directory, a
 * tokenizer.json, a tiktoken rank file or a GGUF, applied to text or ids.
 * Client of spill.h only (spill_tok_*). Output: one token per line (id,
 * byte offset, piece), or --json {"ids", "offsets", "pieces", "count"}.
 */
#define _POSIX_C_SOURCE 200809L
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/cli_util.h"
#include "cli/commands.h"
#include "engine/spill.h"

const char cmd_tokenize_usage[] =
    "usage: spill tokenize SOURCE [TEXT] [--file F] [--json] [--no-special] [--bos]\n"
    "  SOURCE: a checkpoint directory, tokenizer.json, tiktoken rank file or GGUF\n"
    "  TEXT, or --file F (bytes of a file; - = stdin). Special tokens in the text are\n"
    "  parsed as special unless --no-special; --bos adds the tokenizer's BOS tokens.\n"
    "  Prints id, byte offset (in the normalised text) and piece per token;\n"
    "  --json prints {\"ids\": [...], \"offsets\": [...], \"pieces\": [...], \"count\": N}.\n";

const char cmd_detokenize_usage[] =
    "usage: spill detokenize SOURCE [IDS...] [--file F] [--skip-special] [--json]\n"
    "  IDS as arguments (spaces or commas) or --file F (- = stdin), e.g. the output of\n"
    "  `spill tokenize --json` or a JSON array. Writes the decoded bytes to stdout;\n"
    "  --json prints {\"text\": ...} instead.\n";

static int read_all(const char *path, char **out, size_t *len) {
  if (strcmp(path, "-")) { /* a file: the one whole-file reader (spill.h) */
    spill_err e = {0};
    if (spill_read_file(path, (size_t)1 << 31, out, len, &e) == SPILL_OK) return 0;
    fprintf(stderr, "spill: %s\n", e.msg);
    return 1;
  }
  FILE *f = stdin;
  size_t cap = 1 << 16, n = 0;
  char *b = malloc(cap);
  while (b) {
    if (n == cap) {
      char *nb = realloc(b, cap * 2);
      if (!nb) { free(b); b = NULL; break; }
      b = nb;
      cap *= 2;
    }
    size_t r = fread(b + n, 1, cap - n, f);
    n += r;
    if (r == 0) break;
  }
  int bad = ferror(f);
  if (!b || bad) {
    free(b);
    fprintf(stderr, "spill: %s: read failed\n", path);
    return 1;
  }
  *out = b;
  *len = n;
  return 0;
}

/* A JSON string of bytes through the one escaper (spill.h): invalid UTF-8
 * bytes are written as U+FFFD. */
static void json_str(FILE *f, const char *s, size_t n) {
  char *q = spill_json_quote(s, n);
  fputs(q ? q : "\"\"", f);
  free(q);
}

static int load_tok(const char *src, spill_tok **t) {
  spill_err e = {0};
  int rc = spill_tok_load(src, t, &e);
  if (rc) {
    fprintf(stderr, "spill: %s: %s (%s)\n", src, e.msg, spill_status_name(rc));
    return 1;
  }
  return 0;
}

int cmd_tokenize(int argc, char **argv) {
  const char *src = NULL, *text = NULL, *file = NULL;
  int json = 0, special = 1, bos = 0;
  for (int i = 1; i < argc; i++) {
    if (!strcmp(argv[i], "--json")) json = 1;
    else if (!strcmp(argv[i], "--no-special")) special = 0;
    else if (!strcmp(argv[i], "--bos")) bos = 1;
    else if (!strcmp(argv[i], "--file")) {
      if (++i >= argc) return cli_usage_error("--file needs a value");
      file = argv[i];
    } else if (argv[i][0] == '-' && argv[i][1]) return cli_usage_error("unknown option %s", argv[i]);
    else if (!src) src = argv[i];
    else if (!text) text = argv[i];
    else return cli_usage_error("unexpected argument %s", argv[i]);
  }
  if (!src) return cli_usage_error("no SOURCE");
  if (!text && !file) return cli_usage_error("no TEXT and no --file");
  if (text && file) return cli_usage_error("both TEXT and --file");
  char *buf = NULL;
  size_t len = 0;
  if (file) {
    if (read_all(file, &buf, &len)) return 1;
  } else {
    len = strlen(text);
  }
  const char *s = file ? buf : text;
  spill_tok *t = NULL;
  if (load_tok(src, &t)) { free(buf); return 1; }
  spill_tok_ids ids = {0};
  spill_err e = {0};
  int rc = spill_tok_encode(t, s, len, (special ? SPILL_TOK_SPECIAL : 0) | (bos ? SPILL_TOK_ADD_BOS : 0),
                            &ids, &e);
  if (rc) {
    fprintf(stderr, "spill tokenize: %s (%s)\n", e.msg, spill_status_name(rc));
    spill_tok_free(t);
    free(buf);
    return 1;
  }
  if (json) {
    printf("{\"ids\": [");
    for (size_t i = 0; i < ids.n; i++) printf("%s%d", i ? ", " : "", ids.ids[i]);
    printf("], \"offsets\": [");
    for (size_t i = 0; i < ids.n; i++) printf("%s%u", i ? ", " : "", ids.offsets[i]);
    printf("], \"pieces\": [");
    for (size_t i = 0; i < ids.n; i++) {
      size_t pl = 0;
      const char *p = spill_tok_piece(t, ids.ids[i], &pl);
      if (i) printf(", ");
      json_str(stdout, p ? p : "", p ? pl : 0);
    }
    printf("], \"count\": %zu}\n", ids.n);
  } else {
    for (size_t i = 0; i < ids.n; i++) {
      size_t pl = 0;
      const char *p = spill_tok_piece(t, ids.ids[i], &pl);
      printf("%8d %8u  ", ids.ids[i], ids.offsets[i]);
      json_str(stdout, p ? p : "", p ? pl : 0);
      printf("%s\n", spill_tok_is_special(t, ids.ids[i]) ? "  (special)" : "");
    }
    fprintf(stderr, "spill tokenize: %zu tokens, %zu bytes, %s vocabulary of %d\n", ids.n, len,
            spill_tok_kind(t), spill_tok_vocab_size(t));
  }
  spill_tok_ids_free(&ids);
  spill_tok_free(t);
  free(buf);
  return 0;
}

/* Parses integers separated by spaces, commas, brackets or colons; any
 * other character is an error (2). */
static int parse_ids(const char *s, int32_t **ids, size_t *n, size_t *cap) {
  const char *p = s;
  while (*p) {
    if (!strchr("0123456789- \t\r\n,[]:", *p)) {
      fprintf(stderr, "spill detokenize: not an id list near \"%.20s\"\n", p);
      return 2;
    }
    if ((*p >= '0' && *p <= '9') || (*p == '-' && p[1] >= '0' && p[1] <= '9')) {
      char *end;
      errno = 0;
      long v = strtol(p, &end, 10);
      if (errno || v < 0 || v > 0x7fffffff) {
        fprintf(stderr, "spill detokenize: bad id near \"%.20s\"\n", p);
        return 2;
      }
      if (*n == *cap) {
        size_t nc = *cap ? *cap * 2 : 256;
        int32_t *ni = realloc(*ids, nc * sizeof *ni);
        if (!ni) return 1;
        *ids = ni;
        *cap = nc;
      }
      (*ids)[(*n)++] = (int32_t)v;
      p = end;
    } else {
      p++;
    }
  }
  return 0;
}

int cmd_detokenize(int argc, char **argv) {
  const char *src = NULL, *file = NULL;
  int skip = 0, json = 0;
  int32_t *ids = NULL;
  size_t n = 0, cap = 0;
  int rc;
  for (int i = 1; i < argc; i++) {
    if (!strcmp(argv[i], "--skip-special")) skip = 1;
    else if (!strcmp(argv[i], "--json")) json = 1;
    else if (!strcmp(argv[i], "--file")) {
      if (++i >= argc) { free(ids); return cli_usage_error("--file needs a value"); }
      file = argv[i];
    } else if (argv[i][0] == '-' && !(argv[i][1] >= '0' && argv[i][1] <= '9')) {
      free(ids);
      return cli_usage_error("unknown option %s", argv[i]);
    } else if (!src) src = argv[i];
    else if ((rc = parse_ids(argv[i], &ids, &n, &cap)) != 0) {
      free(ids);
      return rc == 2 ? cli_usage_error("bad id list %s", argv[i]) : 1;
    }
  }
  if (!src) { free(ids); return cli_usage_error("no SOURCE"); }
  if (file) {
    char *buf;
    size_t len;
    if (read_all(file, &buf, &len)) { free(ids); return 1; }
    /* `spill tokenize --json` output: take the "ids" array only */
    char *b = realloc(buf, len + 1);
    if (!b) { free(buf); free(ids); return 1; }
    b[len] = 0;
    char *start = strstr(b, "\"ids\"");
    char *end = start ? strchr(start, ']') : NULL;
    if (end) *end = 0;
    rc = parse_ids(start ? start + 6 : b, &ids, &n, &cap);
    free(b);
    if (rc) { free(ids); return rc == 2 ? cli_usage_error("bad id list in %s", file) : 1; }
  }
  spill_tok *t = NULL;
  if (load_tok(src, &t)) { free(ids); return 1; }
  char *out = NULL;
  size_t olen = 0;
  spill_err e = {0};
  rc = spill_tok_decode(t, ids, n, skip, &out, &olen, &e);
  if (rc) {
    fprintf(stderr, "spill detokenize: %s (%s)\n", e.msg, spill_status_name(rc));
  } else if (json) {
    printf("{\"text\": ");
    json_str(stdout, out, olen);
    printf("}\n");
  } else {
    fwrite(out, 1, olen, stdout);
  }
  free(out);
  free(ids);
  spill_tok_free(t);
  return rc ? 1 : 0;
}
