/* cli/cmd_import.c: `spill import SRC DST`: a Hugging Face checkpoint or a
 * GGUF file into a spill container (engine/import through spill.h).
 * Progress with ETA on stderr (a rewritten line on a terminal, a line every
 * 10 s otherwise); the summary on stderr, or as JSON on stdout with --json.
 */
#define _GNU_SOURCE
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "cli/cli_util.h"
#include "cli/commands.h"
#include "engine/spill.h"

const char cmd_import_usage[] =
    "usage: spill import SRC DST [--experts keep|q8|q4|rvq3] [--trunk keep|q8|q4] [--group N] "
    "[--threads N] [--json]\n"
    "       spill import --architectures\n"
    "\n"
    "  SRC  a checkpoint directory (config.json + *.safetensors [+ index]) or a .gguf file\n"
    "       (split GGUF: name the -00001-of-0000N.gguf file)\n"
    "  DST  the container directory to write (new, empty, or an interrupted import of the\n"
    "       same SRC with the same options: it resumes where it stopped)\n"
    "\n"
    "  --experts T  routed experts: keep (default: the source's numbers exactly, refused\n"
    "               where the container has no such format), q8, q4 (requantise by rounding),\n"
    "               rvq3 (k-means residual VQ: 3 x 256-entry codebooks of 8-dim vectors per\n"
    "               layer and matrix, one f16 scale per row; error per tensor reported)\n"
    "  --trunk T    other matrices: keep (default), q8, q4; norms are always f32\n"
    "  --group N    q8/q4 group size when requantising (default 32)\n"
    "  --threads N  rvq3 encoder threads (default 0: every CPU); the output is the same\n"
    "  --json       print the summary as JSON on stdout\n"
    "\n"
    "spill import --architectures: the architectures it reads (the importer's table, as a\n"
    "Markdown table: name, Hugging Face model_type, GGUF general.architecture)\n";

typedef struct prog {
  int kill_after; /* test hook SPILL_IMPORT_TEST_KILL_AFTER=N: SIGKILL after N units (resume tests) */
  int tty;
  struct timespec t0, last;
  double last_frac;
} prog;

static double since(const struct timespec *a) {
  struct timespec b;
  clock_gettime(CLOCK_MONOTONIC, &b);
  return (double)(b.tv_sec - a->tv_sec) + (double)(b.tv_nsec - a->tv_nsec) * 1e-9;
}

static void on_progress(void *user, const spill_import_progress *p) {
  prog *g = user;
  if (g->kill_after > 0 && p->units_done - p->units_adopted >= g->kill_after) raise(SIGKILL);
  const double t = since(&g->t0), frac = p->bytes_total ? (double)p->bytes_done / (double)p->bytes_total : 1.0;
  const int last = p->units_done == p->units_total;
  if (!g->tty && !last && since(&g->last) < 10.0) return;
  if (g->tty && !last && since(&g->last) < 0.2) return;
  clock_gettime(CLOCK_MONOTONIC, &g->last);
  const double eta = frac > 0 && frac < 1 ? t * (1 - frac) / frac : 0;
  fprintf(stderr, "%simport: %d/%d units (%d resumed), %.1f/%.1f MB, %.0f%%, %.1f s, ETA %.0f s: %s%s",
          g->tty ? "\r\033[K" : "", p->units_done, p->units_total, p->units_adopted,
          (double)p->bytes_done / 1e6, (double)p->bytes_total / 1e6, 100 * frac, t, eta, p->unit,
          g->tty && !last ? "" : "\n");
}

static int parse_target(const char *v, int trunk, spill_import_target *out) {
  if (!strcmp(v, "keep")) *out = SPILL_IMPORT_KEEP;
  else if (!strcmp(v, "q8")) *out = SPILL_IMPORT_Q8;
  else if (!strcmp(v, "q4")) *out = SPILL_IMPORT_Q4;
  else if (!strcmp(v, "rvq3") && !trunk) *out = SPILL_IMPORT_RVQ3;
  else return -1;
  return 0;
}

/* The importer's architecture table (spill_import_arch_at), as docs/MODEL.md
 * shows it (//cli:import_archs_doc_test, cli/doc_block_test.sh, compares the two). */
static int print_architectures(void) {
  printf("| architecture | Hugging Face `model_type` | GGUF `general.architecture` |\n|---|---|---|\n");
  for (int i = 0; i < spill_import_n_archs(); i++) {
    const spill_import_arch *a = spill_import_arch_at(i);
    printf("| %s |", a->name);
    for (int k = 0; k < 4 && a->hf_model_type[k]; k++) printf("%s`%s`", k ? ", " : " ", a->hf_model_type[k]);
    if (a->hf_class) printf("%s`architectures` `%s`", a->hf_model_type[0] ? ", " : " ", a->hf_class);
    if (!a->hf_model_type[0] && !a->hf_class) printf(" -");
    if (a->gguf_arch)
      printf(" | `%s`%s%s |\n", a->gguf_arch, a->gguf_note ? " " : "", a->gguf_note ? a->gguf_note : "");
    else
      printf(" | - |\n");
  }
  return 0;
}

int cmd_import(int argc, char **argv) {
  spill_import_request r;
  memset(&r, 0, sizeof r);
  int json = 0;
  const char *pos[2] = {NULL, NULL};
  int npos = 0;
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i];
    if (!strcmp(a, "--architectures")) {
      return print_architectures();
    } else if (!strcmp(a, "--json")) {
      json = 1;
    } else if ((!strcmp(a, "--experts") || !strcmp(a, "--trunk")) && i + 1 < argc) {
      int tr = !strcmp(a, "--trunk");
      if (parse_target(argv[++i], tr, tr ? &r.trunk : &r.experts) != 0)
        return cli_usage_error("%s %s: expected %s", a, argv[i],
                               tr ? "keep, q8 or q4" : "keep, q8, q4 or rvq3");
    } else if (!strcmp(a, "--group") && i + 1 < argc) {
      char *end;
      long g = strtol(argv[++i], &end, 10);
      if (*end || g < 1 || g > 1048576)
        return cli_usage_error("--group %s: expected an integer in [1, 1048576]", argv[i]);
      r.group = (uint32_t)g;
    } else if (!strcmp(a, "--threads") && i + 1 < argc) {
      char *end;
      long t = strtol(argv[++i], &end, 10);
      if (*end || t < 0 || t > 64) return cli_usage_error("--threads %s: expected an integer in [0, 64]", argv[i]);
      r.threads = (int)t;
    } else if (a[0] == '-') {
      return cli_usage_error("unknown option %s", a);
    } else if (npos < 2) {
      pos[npos++] = a;
    } else {
      return cli_usage_error("unexpected argument %s", a);
    }
  }
  if (npos != 2) return cli_usage_error("SRC and DST are required");
  r.src = pos[0];
  r.dst = pos[1];
  prog g;
  memset(&g, 0, sizeof g);
  g.tty = isatty(2);
  const char *ka = getenv("SPILL_IMPORT_TEST_KILL_AFTER");
  g.kill_after = ka ? atoi(ka) : 0;
  clock_gettime(CLOCK_MONOTONIC, &g.t0);
  g.last = g.t0;
  r.progress = on_progress;
  r.user = &g;
  spill_import_summary s;
  spill_err e = {0};
  int rc = spill_import_run(&r, &s, &e);
  if (rc) {
    fprintf(stderr, "spill import: %s (%s)\n", e.msg, spill_status_name(rc));
    return 1;
  }
  const double mbs = s.seconds > 0 ? (double)s.src_bytes / 1e6 / s.seconds : 0;
  if (json) {
    printf("{\"src\": \"%s\", \"dst\": \"%s\", \"arch\": \"%s\", \"source_format\": \"%s\", "
           "\"tensors\": %d, \"records\": %d, \"resumed_units\": %d, \"src_bytes\": %llu, "
           "\"dst_bytes\": %llu, \"seconds\": %.3f, \"mb_per_s\": %.1f, \"max_rel_err\": %.6g, "
           "\"skipped\": \"%s\", \"requantised\": [",
           r.src, r.dst, s.arch, s.source, s.n_tensors, s.n_records, s.n_adopted,
           (unsigned long long)s.src_bytes, (unsigned long long)s.dst_bytes, s.seconds, mbs, s.max_rel_err,
           s.skipped);
    for (int i = 0; i < s.n_errors; i++)
      printf("%s{\"name\": \"%s\", \"rel_err\": %.6g}", i ? ", " : "", s.errors[i].name, s.errors[i].rel_err);
    printf("]}\n");
  } else {
    fprintf(stderr, "spill import: %s (%s %s): %d tensors, %d expert records (%d resumed), %.1f MB "
            "read, %.1f MB written, %.2f s, %.1f MB/s\n",
            r.dst, s.source, s.arch, s.n_tensors, s.n_records, s.n_adopted, (double)s.src_bytes / 1e6,
            (double)s.dst_bytes / 1e6, s.seconds, mbs);
    if (s.skipped[0]) fprintf(stderr, "  skipped source %s: not part of the forward pass\n", s.skipped);
    for (int i = 0; i < s.n_errors; i++)
      fprintf(stderr, "  requantised %-40s relative error %.3g\n", s.errors[i].name, s.errors[i].rel_err);
    if (s.n_errors) fprintf(stderr, "  max relative error %.3g\n", s.max_rel_err);
  }
  spill_import_summary_free(&s);
  return 0;
}
