/* tools/tok/tok_speed.c: single-thread tokenizer speed of engine/tok for
 * tools/tok/speed.sh: loads SOURCE (timed: the startup figure), then
 * encodes every document of CORPUS (record format of tools/tok/oracle.js)
 * with special tokens parsed, and prints one JSON line:
 * {"impl": "spill", "source", "load_ms", "load_cpu_ms", "bytes", "tokens", "encode_s",
 * "encode_cpu_s", "mb_s", "mb_cpu_s"} (wall clock and process CPU time: on a
 * shared machine the CPU figures are the comparable ones).
 *   tok_speed SOURCE CORPUS
 */
#define _POSIX_C_SOURCE 200809L
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "engine/spill.h"

static double clk(clockid_t id) {
  struct timespec ts;
  clock_gettime(id, &ts);
  return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}
static double now(void) { return clk(CLOCK_MONOTONIC); }
static double cpu(void) { return clk(CLOCK_PROCESS_CPUTIME_ID); }

int main(int argc, char **argv) {
  if (argc == 2 && (!strcmp(argv[1], "-h") || !strcmp(argv[1], "--help"))) {
    printf("usage: tok_speed SOURCE CORPUS\n");
    return 0;
  }
  if (argc != 3) {
    fprintf(stderr, "usage: tok_speed SOURCE CORPUS\n");
    return 2;
  }
  FILE *f = fopen(argv[2], "rb");
  if (!f) { perror(argv[2]); return 1; }
  fseek(f, 0, SEEK_END);
  long size = ftell(f);
  fseek(f, 0, SEEK_SET);
  char *buf = malloc((size_t)size + 1);
  if (!buf || fread(buf, 1, (size_t)size, f) != (size_t)size) { fprintf(stderr, "read failed\n"); return 1; }
  fclose(f);
  double t0 = now(), c0 = cpu();
  spill_tok *t = NULL;
  spill_err e = {0};
  if (spill_tok_load(argv[1], &t, &e)) { fprintf(stderr, "%s\n", e.msg); return 1; }
  double load = now() - t0, load_cpu = cpu() - c0;
  spill_tok_ids ids = {0};
  size_t bytes = 0, tokens = 0;
  double t1 = now(), c1 = cpu();
  for (long i = 0; i < size;) {
    char *nl = memchr(buf + i, '\n', (size_t)(size - i));
    if (!nl) break;
    size_t n = strtoul(buf + i, NULL, 10);
    const char *doc = nl + 1;
    ids.n = 0;
    if (spill_tok_encode(t, doc, n, SPILL_TOK_SPECIAL, &ids, &e)) { fprintf(stderr, "%s\n", e.msg); return 1; }
    bytes += n;
    tokens += ids.n;
    i = (long)(doc - buf) + (long)n;
  }
  double enc = now() - t1, enc_cpu = cpu() - c1;
  printf("{\"impl\": \"spill\", \"source\": \"%s\", \"load_ms\": %.2f, \"load_cpu_ms\": %.2f, "
         "\"bytes\": %zu, \"tokens\": %zu, \"encode_s\": %.4f, \"encode_cpu_s\": %.4f, "
         "\"mb_s\": %.3f, \"mb_cpu_s\": %.3f}\n",
         argv[1], load * 1e3, load_cpu * 1e3, bytes, tokens, enc, enc_cpu, bytes / enc / 1e6,
         bytes / enc_cpu / 1e6);
  spill_tok_ids_free(&ids);
  spill_tok_free(t);
  free(buf);
  return 0;
}
