/* tools/peers/llama_peer.c: llama.cpp as an external judge of spill.
 *
 * Built by `./lab peers` against the llama.cpp library that npm's
 * node-llama-cpp ships as source (never committed here; see docs/PEERS.md),
 * outside Bazel because the library lives in a machine-wide cache.
 *
 *   llama_peer logits MODEL.gguf --tokens 1,2,3 --out PREFIX [--threads N]
 *       every position's logits, as the oracle needs them: F32 KV cache,
 *       flash attention disabled. Writes PREFIX.bin (f32 little-endian,
 *       n_pos x n_vocab, row-major, the layout of `spill eval --logits-out
 *       --all-positions`) and PREFIX.json (shape and settings).
 *   llama_peer bench MODEL.gguf --tokens 1,2,3 -n N [--load mmap|none|mlock]
 *       [--threads N] [--batch N] [--repeat R]
 *       prefill the prompt, then N greedy decode tokens, one JSON line on
 *       stdout: load, prefill and decode seconds and tok/s, per phase (load,
 *       prefill, decode) the major page faults and bytes read from the disk
 *       (/proc/self/io), the generated ids. --repeat R runs the same request
 *       R times in this process (the KV memory cleared between; the bench
 *       workload's warm phase is the second), and "requests" lists each one's
 *       seconds, bytes read, major faults, peak RSS (ru_maxrss after it) and
 *       ids; the top-level figures are the first request's.
 *   llama_peer tokenize MODEL.gguf --docs FILE [--special]
 *       llama.cpp's tokenizer (the vocabulary only): FILE holds documents as
 *       "LEN\n" + LEN bytes each; one line of comma-separated ids per
 *       document on stdout. --special parses special tokens in the text
 *       (llama_tokenize's parse_special); no BOS/EOS is added.
 *
 * Depends only on llama.h. Prints errors on stderr, exit 1; usage errors
 * exit 2; -h/--help prints the usage on stdout.
 */
#define _POSIX_C_SOURCE 200809L
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>

#include "llama.h"

static const char *USAGE =
    "usage: llama_peer logits MODEL.gguf --tokens IDS --out PREFIX [--threads N] [--batch N]\n"
    "       llama_peer bench  MODEL.gguf --tokens IDS -n N [--load mmap|none|mlock]\n"
    "                         [--threads N] [--batch N] [--repeat R]\n"
    "       llama_peer tokenize MODEL.gguf --docs FILE [--special]\n"
    "IDS is a comma-separated list of token ids (or @FILE holding one).\n"
    "--no-repack keeps ggml from repacking weights into its CPU layouts (use_extra_bufts).\n";

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

static int quiet_logs = 1;
static void log_cb(enum ggml_log_level level, const char *text, void *ud) {
  (void)ud;
  if (!quiet_logs || level == GGML_LOG_LEVEL_ERROR) fputs(text, stderr);
}

/* Parses "1,2,3" (or the contents of @FILE) into a malloc'd array. */
static int parse_ids(const char *arg, int32_t **out, int *n_out) {
  char *buf = NULL;
  if (arg[0] == '@') {
    FILE *f = fopen(arg + 1, "rb");
    if (!f) {
      fprintf(stderr, "llama_peer: %s: %s\n", arg + 1, strerror(errno));
      return -1;
    }
    size_t cap = 1 << 16, len = 0;
    buf = malloc(cap + 1);
    size_t got;
    while (buf && (got = fread(buf + len, 1, cap - len, f)) > 0) {
      len += got;
      if (len == cap) {
        char *nb = realloc(buf, 2 * cap + 1);
        if (!nb) { free(buf); buf = NULL; break; }
        buf = nb; cap *= 2;
      }
    }
    fclose(f);
    if (!buf) return -1;
    buf[len] = 0;
  } else {
    buf = strdup(arg);
  }
  int cap = 64, n = 0;
  int32_t *ids = malloc(sizeof *ids * cap);
  char *p = buf;
  while (ids && *p) {
    while (*p == ',' || *p == ' ' || *p == '\n' || *p == '\t' || *p == '\r') p++;
    if (!*p) break;
    char *end;
    errno = 0;
    long v = strtol(p, &end, 10);
    if (end == p || errno || v < 0 || v > INT32_MAX) {
      fprintf(stderr, "llama_peer: --tokens: not a token id at \"%.16s\"\n", p);
      free(ids); free(buf);
      return -1;
    }
    if (n == cap) {
      int32_t *ni = realloc(ids, sizeof *ids * (cap *= 2));
      if (!ni) { free(ids); ids = NULL; break; }
      ids = ni;
    }
    ids[n++] = (int32_t)v;
    p = end;
  }
  free(buf);
  if (!ids || n == 0) {
    fprintf(stderr, "llama_peer: --tokens: no token ids\n");
    free(ids);
    return -1;
  }
  *out = ids;
  *n_out = n;
  return 0;
}

/* Feeds ids[0..n) from position pos0 in chunks of `batch`; with all_logits
 * every position's logits are copied into out (n x n_vocab), otherwise only
 * the last position's. Returns 0 or -1. */
static int feed(struct llama_context *ctx, const int32_t *ids, int n, int pos0, int batch,
                int all_logits, float *out, int n_vocab) {
  struct llama_batch b = llama_batch_init(batch, 0, 1);
  for (int i0 = 0; i0 < n; i0 += batch) {
    int m = n - i0 < batch ? n - i0 : batch;
    b.n_tokens = m;
    for (int j = 0; j < m; j++) {
      b.token[j] = ids[i0 + j];
      b.pos[j] = pos0 + i0 + j;
      b.n_seq_id[j] = 1;
      b.seq_id[j][0] = 0;
      b.logits[j] = all_logits || (i0 + j == n - 1);
    }
    int rc = llama_decode(ctx, b);
    if (rc != 0) {
      fprintf(stderr, "llama_peer: llama_decode failed (%d) at position %d\n", rc, pos0 + i0);
      llama_batch_free(b);
      return -1;
    }
    for (int j = 0; j < m; j++) {
      if (!b.logits[j]) continue;
      const float *l = llama_get_logits_ith(ctx, j);
      if (!l) {
        fprintf(stderr, "llama_peer: no logits at position %d\n", pos0 + i0 + j);
        llama_batch_free(b);
        return -1;
      }
      float *dst = all_logits ? out + (size_t)(i0 + j) * n_vocab : out;
      memcpy(dst, l, sizeof(float) * n_vocab);
    }
  }
  llama_batch_free(b);
  return 0;
}

static int write_all(const char *path, const void *p, size_t n) {
  char tmp[4096];
  snprintf(tmp, sizeof tmp, "%s.tmp", path);
  FILE *f = fopen(tmp, "wb");
  if (!f || fwrite(p, 1, n, f) != n || fclose(f) != 0) {
    fprintf(stderr, "llama_peer: write %s: %s\n", tmp, strerror(errno));
    return -1;
  }
  if (rename(tmp, path) != 0) {
    fprintf(stderr, "llama_peer: rename %s: %s\n", path, strerror(errno));
    return -1;
  }
  return 0;
}

/* Process counters at a phase boundary: major faults (getrusage) and bytes
 * read from the disk (/proc/self/io read_bytes). */
typedef struct counters {
  long majflt;
  unsigned long long read_bytes;
  long maxrss_kb; /* ru_maxrss: the process's peak RSS so far */
} counters;

static counters sample(void) {
  counters c = {0, 0, 0};
  struct rusage ru;
  if (getrusage(RUSAGE_SELF, &ru) == 0) c.majflt = ru.ru_majflt, c.maxrss_kb = ru.ru_maxrss;
  FILE *f = fopen("/proc/self/io", "r");
  char line[128];
  while (f && fgets(line, sizeof line, f))
    if (sscanf(line, "read_bytes: %llu", &c.read_bytes) == 1) break;
  if (f) fclose(f);
  return c;
}

typedef struct opts {
  const char *mode, *model, *tokens, *out, *load;
  int is_logits, threads, batch, n_decode, no_repack, repeat;
} opts;

/* Parses the command line: 0 to run, 1 = help printed (exit 0), 2 = usage error. */
static int parse_opts(int argc, char **argv, opts *o) {
  if (argc >= 2 && (!strcmp(argv[1], "-h") || !strcmp(argv[1], "--help"))) {
    fputs(USAGE, stdout);
    return 1;
  }
  if (argc < 3) {
    fputs(USAGE, stderr);
    return 2;
  }
  *o = (opts){argv[1], argv[2], NULL, NULL, "mmap", !strcmp(argv[1], "logits"), 2, 512, -1, 0, 1};
  if (!o->is_logits && strcmp(o->mode, "bench")) {
    fprintf(stderr, "llama_peer: unknown mode %s\n%s", o->mode, USAGE);
    return 2;
  }
  for (int i = 3; i < argc; i++) {
    const char *a = argv[i];
    const char *v = i + 1 < argc ? argv[i + 1] : NULL;
    if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
      fputs(USAGE, stdout);
      return 1;
    }
    if (!strcmp(a, "--verbose")) { quiet_logs = 0; continue; }
    if (!strcmp(a, "--no-repack")) { o->no_repack = 1; continue; }
    if (!v) {
      fprintf(stderr, "llama_peer: %s needs a value\n%s", a, USAGE);
      return 2;
    }
    i++;
    if (!strcmp(a, "--tokens")) o->tokens = v;
    else if (!strcmp(a, "--out")) o->out = v;
    else if (!strcmp(a, "--load")) o->load = v;
    else if (!strcmp(a, "--threads") || !strcmp(a, "--batch") || !strcmp(a, "-n") ||
             !strcmp(a, "--repeat")) {
      char *end;
      long x = strtol(v, &end, 10);
      if (*end || end == v || x < 1 || x > 1 << 20) {
        fprintf(stderr, "llama_peer: %s: expected an integer in [1, 1048576], got %s\n", a, v);
        return 2;
      }
      if (a[2] == 't') o->threads = (int)x;
      else if (a[2] == 'b') o->batch = (int)x;
      else if (a[2] == 'r') o->repeat = (int)x;
      else o->n_decode = (int)x;
    } else {
      fprintf(stderr, "llama_peer: unknown option %s\n%s", a, USAGE);
      return 2;
    }
  }
  if (!o->tokens || (o->is_logits && !o->out) || (!o->is_logits && o->n_decode < 1)) {
    fprintf(stderr, "llama_peer: missing %s\n%s",
            !o->tokens ? "--tokens" : o->is_logits ? "--out" : "-n", USAGE);
    return 2;
  }
  if (o->is_logits && o->repeat != 1) {
    fprintf(stderr, "llama_peer: --repeat is bench's (logits runs one pass)\n%s", USAGE);
    return 2;
  }
  if (strcmp(o->load, "mmap") && strcmp(o->load, "none") && strcmp(o->load, "mlock")) {
    fprintf(stderr, "llama_peer: --load: expected mmap, none or mlock, got %s\n", o->load);
    return 2;
  }
  return 0;
}

/* logits: every position's logits to PREFIX.bin and PREFIX.json. */
static int run_logits(struct llama_context *ctx, const opts *o, const int32_t *ids, int n_ids,
                      int n_vocab) {
  float *logits = malloc(sizeof(float) * (size_t)n_ids * n_vocab);
  if (!logits) { fprintf(stderr, "llama_peer: out of memory\n"); return 1; }
  int rc = feed(ctx, ids, n_ids, 0, o->batch, 1, logits, n_vocab);
  if (!rc) {
    char path[4096];
    snprintf(path, sizeof path, "%s.bin", o->out);
    rc = write_all(path, logits, sizeof(float) * (size_t)n_ids * n_vocab);
    if (!rc) {
      char hdr[1024];
      int len = snprintf(hdr, sizeof hdr,
                         "{\"n_pos\": %d, \"n_vocab\": %d, \"dtype\": \"f32le\", "
                         "\"kv_cache\": \"f32\", \"flash_attn\": false, \"threads\": %d, "
                         "\"batch\": %d}\n",
                         n_ids, n_vocab, o->threads, o->batch);
      snprintf(path, sizeof path, "%s.json", o->out);
      rc = write_all(path, hdr, (size_t)len);
    }
  }
  free(logits);
  return rc;
}

/* One request: prefill, then N greedy decode steps; gen gets the ids, c the
 * counters before prefill, after it and after decode. */
typedef struct request {
  double prefill_s, decode_s;
  counters c[3];
} request;

static int bench_request(struct llama_context *ctx, const opts *o, const int32_t *ids, int n_ids,
                         int n_vocab, float *last, int32_t *gen, request *r) {
  r->c[0] = sample();
  double tp = now_s();
  int rc = feed(ctx, ids, n_ids, 0, o->batch, 0, last, n_vocab);
  r->prefill_s = now_s() - tp;
  double td = now_s();
  r->c[1] = sample();
  /* as spill_generate: each of the N tokens is chosen from the current
   * logits and then fed through one forward step, so N steps are timed */
  for (int i = 0; !rc && i < o->n_decode; i++) {
    int best = 0; /* greedy: the lowest id among equal maxima, as spill's sampler */
    for (int v = 1; v < n_vocab; v++)
      if (last[v] > last[best]) best = v;
    gen[i] = best;
    rc = feed(ctx, &gen[i], 1, n_ids + i, 1, 0, last, n_vocab);
  }
  r->decode_s = now_s() - td;
  r->c[2] = sample();
  return rc;
}

static void print_ids(const int32_t *gen, int n) {
  printf("[");
  for (int i = 0; i < n; i++) printf(i ? ", %d" : "%d", gen[i]);
  printf("]");
}

/* bench: o->repeat requests (the KV memory cleared between), one JSON line.
 * c0/c1: the counters at start and after loading. */
static int run_bench(struct llama_context *ctx, const opts *o, const int32_t *ids, int n_ids,
                     int n_vocab, double t_load, counters c0, counters c1) {
  float *last = malloc(sizeof(float) * n_vocab);
  int32_t *gen = malloc(sizeof(int32_t) * (size_t)o->n_decode * o->repeat);
  request *rq = malloc(sizeof *rq * (size_t)o->repeat);
  if (!last || !gen || !rq) { fprintf(stderr, "llama_peer: out of memory\n"); return 1; }
  int rc = 0;
  for (int k = 0; !rc && k < o->repeat; k++) {
    if (k) llama_memory_clear(llama_get_memory(ctx), true);
    rc = bench_request(ctx, o, ids, n_ids, n_vocab, last, gen + (size_t)k * o->n_decode, &rq[k]);
  }
  if (!rc) {
    const request *r = &rq[0];
    printf("{\"peer\": \"llama.cpp\", \"load\": \"%s\", \"threads\": %d, \"load_s\": %.6f, "
           "\"prefill_tokens\": %d, \"prefill_s\": %.6f, \"prefill_tok_s\": %.4f, "
           "\"decode_tokens\": %d, \"decode_s\": %.6f, \"decode_tok_s\": %.4f, \"phases\": {",
           o->load, o->threads, t_load, n_ids, r->prefill_s, n_ids / r->prefill_s, o->n_decode,
           r->decode_s, r->decode_s > 0 ? o->n_decode / r->decode_s : 0.0);
    const char *names[3] = {"load", "prefill", "decode"};
    counters cs[4] = {c0, c1, r->c[1], r->c[2]};
    for (int p = 0; p < 3; p++)
      printf("%s\"%s\": {\"major_faults\": %ld, \"read_bytes\": %llu}", p ? ", " : "", names[p],
             cs[p + 1].majflt - cs[p].majflt, cs[p + 1].read_bytes - cs[p].read_bytes);
    printf("}, \"tokens\": ");
    print_ids(gen, o->n_decode);
    printf(", \"requests\": [");
    for (int k = 0; k < o->repeat; k++) {
      const request *q = &rq[k];
      printf("%s{\"prefill_s\": %.6f, \"decode_s\": %.6f, \"read_bytes_prefill\": %llu, "
             "\"read_bytes_decode\": %llu, \"major_faults\": %ld, \"peak_rss_bytes\": %lld, "
             "\"tokens\": ", k ? ", " : "", q->prefill_s, q->decode_s,
             q->c[1].read_bytes - q->c[0].read_bytes, q->c[2].read_bytes - q->c[1].read_bytes,
             q->c[2].majflt - q->c[0].majflt, (long long)q->c[2].maxrss_kb * 1024);
      print_ids(gen + (size_t)k * o->n_decode, o->n_decode);
      printf("}");
    }
    printf("]}\n");
  }
  free(last);
  free(gen);
  free(rq);
  return rc;
}

/* tokenize: the vocabulary's tokenization of each document of --docs. */
static int run_tokenize(int argc, char **argv) {
  const char *model = argc > 2 ? argv[2] : NULL, *docs = NULL;
  int special = 0;
  for (int i = 3; i < argc; i++) {
    if (!strcmp(argv[i], "--special")) special = 1;
    else if (!strcmp(argv[i], "--docs") && i + 1 < argc) docs = argv[++i];
    else { fprintf(stderr, "llama_peer: tokenize: unknown option %s\n%s", argv[i], USAGE); return 2; }
  }
  if (!model || !docs) { fputs(USAGE, stderr); return 2; }
  FILE *f = fopen(docs, "rb");
  if (!f) { fprintf(stderr, "llama_peer: %s: %s\n", docs, strerror(errno)); return 1; }
  llama_log_set(log_cb, NULL);
  llama_backend_init();
  struct llama_model_params mp = llama_model_default_params();
  mp.vocab_only = 1;
  struct llama_model *m = llama_model_load_from_file(model, mp);
  if (!m) { fprintf(stderr, "llama_peer: %s: llama.cpp could not load the vocabulary\n", model); fclose(f); return 1; }
  const struct llama_vocab *vocab = llama_model_get_vocab(m);
  int rc = 0;
  long len;
  while (!rc && fscanf(f, "%ld", &len) == 1 && fgetc(f) == '\n') {
    char *text = len >= 0 && len < (1L << 30) ? malloc((size_t)len + 1) : NULL;
    int32_t cap = (int32_t)len + 16, n = 0;
    llama_token *ids = text ? malloc(sizeof *ids * (size_t)cap) : NULL;
    if (!ids || fread(text, 1, (size_t)len, f) != (size_t)len) rc = 1;
    if (!rc) n = llama_tokenize(vocab, text, (int32_t)len, ids, cap, 0, special != 0);
    if (!rc && n < 0) rc = 1;
    for (int i = 0; !rc && i < n; i++) printf(i ? ",%d" : "%d", ids[i]);
    if (!rc) putchar('\n');
    free(text);
    free(ids);
  }
  if (rc) fprintf(stderr, "llama_peer: %s: cannot read or tokenize a document\n", docs);
  fclose(f);
  llama_model_free(m);
  llama_backend_free();
  return rc;
}

int main(int argc, char **argv) {
  if (argc >= 2 && !strcmp(argv[1], "tokenize")) return run_tokenize(argc, argv);
  opts o;
  int pr = parse_opts(argc, argv, &o);
  if (pr) return pr == 1 ? 0 : 2;
  enum llama_load_mode lm = !strcmp(o.load, "mmap")   ? LLAMA_LOAD_MODE_MMAP
                            : !strcmp(o.load, "none") ? LLAMA_LOAD_MODE_NONE
                                                      : LLAMA_LOAD_MODE_MMAP_MLOCK;
  int32_t *ids = NULL;
  int n_ids = 0;
  if (parse_ids(o.tokens, &ids, &n_ids)) return 2;
  llama_log_set(log_cb, NULL);
  llama_backend_init();
  counters c0 = sample();
  double t0 = now_s();
  struct llama_model_params mp = llama_model_default_params();
  mp.n_gpu_layers = 0;
  mp.load_mode = lm;
  if (o.no_repack) mp.use_extra_bufts = 0; /* ggml's repacked CPU weight layouts off */
  struct llama_model *model = llama_model_load_from_file(o.model, mp);
  if (!model) {
    fprintf(stderr, "llama_peer: %s: llama.cpp could not load the model\n", o.model);
    return 1;
  }
  const struct llama_vocab *vocab = llama_model_get_vocab(model);
  int n_vocab = llama_vocab_n_tokens(vocab);
  for (int i = 0; i < n_ids; i++)
    if (ids[i] >= n_vocab) {
      fprintf(stderr, "llama_peer: token id %d >= vocabulary size %d\n", ids[i], n_vocab);
      return 1;
    }
  struct llama_context_params cp = llama_context_default_params();
  cp.n_ctx = (uint32_t)(n_ids + (o.n_decode > 0 ? o.n_decode : 0) + 1);
  cp.n_batch = cp.n_ubatch = (uint32_t)o.batch;
  cp.n_threads = cp.n_threads_batch = o.threads;
  cp.no_perf = 1;
  if (o.is_logits) { /* the tight-oracle settings of ../shared/reference/llama-cpp.md */
    cp.flash_attn_type = LLAMA_FLASH_ATTN_TYPE_DISABLED;
    cp.type_k = GGML_TYPE_F32;
    cp.type_v = GGML_TYPE_F32;
  }
  struct llama_context *ctx = llama_init_from_model(model, cp);
  if (!ctx) {
    fprintf(stderr, "llama_peer: llama.cpp could not create a context\n");
    return 1;
  }
  double t_load = now_s() - t0;
  int rc = o.is_logits ? run_logits(ctx, &o, ids, n_ids, n_vocab)
                       : run_bench(ctx, &o, ids, n_ids, n_vocab, t_load, c0, sample());
  llama_free(ctx);
  llama_model_free(model);
  llama_backend_free();
  free(ids);
  return rc ? 1 : 0;
}
