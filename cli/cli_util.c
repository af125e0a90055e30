/* cli/cli_util.c: progress, argument scanning, formatting for the CLI. */
#define _POSIX_C_SOURCE 200809L
#include "cli/cli_util.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "engine/spill.h"

static uint64_t now_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

void cli_progress_init(cli_progress *p, const char *label) {
  memset(p, 0, sizeof *p);
  p->label = label;
  p->start_ns = now_ns();
  p->tty = isatty(2);
  p->last_decile = -1;
}

void cli_progress_cb(void *vp, uint64_t done, uint64_t total) {
  cli_progress *p = vp;
  uint64_t t = now_ns();
  double frac = total ? (double)done / (double)total : 1.0;
  int decile = (int)(frac * 10);
  int final = done >= total;
  if (p->tty) {
    if (!final && t - p->last_ns < 100000000ull) return;
  } else if (!final && decile == p->last_decile) {
    return;
  }
  p->last_ns = t;
  p->last_decile = decile;
  double secs = (double)(t - p->start_ns) / 1e9;
  double rate = secs > 0 ? (double)done / secs : 0;
  double eta = (rate > 0 && total > done) ? (double)(total - done) / rate : 0;
  char bar[31];
  int fill = (int)(frac * 30);
  for (int i = 0; i < 30; i++) bar[i] = i < fill ? '#' : '.';
  bar[30] = 0;
  fprintf(stderr, "%s%s [%s] %5.1f%%  %.1f/%.1f GiB  %.0f MiB/s  eta %.0fs%s",
          p->tty ? "\r" : "", p->label, bar, frac * 100, done / 1073741824.0,
          total / 1073741824.0, rate / 1048576.0, eta, (p->tty && !final) ? "" : "\n");
  fflush(stderr);
}

const char *cli_value(int argc, char **argv, int *i) {
  if (*i + 1 >= argc) {
    fprintf(stderr, "spill: %s needs a value\n", argv[*i]);
    return NULL;
  }
  return argv[++*i];
}

int cli_int(const char *flag, const char *v, long lo, long hi, long *out) {
  char *end = NULL;
  long x = strtol(v, &end, 10);
  if (!*v || *end || x < lo || x > hi) {
    fprintf(stderr, "spill: %s: '%s' is not an integer in [%ld, %ld]\n", flag, v, lo, hi);
    return -1;
  }
  *out = x;
  return 0;
}

int cli_size(const char *flag, const char *v, uint64_t *out) {
  uint64_t b = spill_parse_size(v);
  if (!b) {
    fprintf(stderr, "spill: %s: '%s' is not a size (e.g. 8G, 512M, 1.5GiB)\n", flag, v);
    return -1;
  }
  *out = b;
  return 0;
}

const char *cli_bytes(uint64_t b, char *buf, size_t n) {
  if (b >= (1ull << 30)) snprintf(buf, n, "%.2f GiB", b / 1073741824.0);
  else if (b >= (1ull << 20)) snprintf(buf, n, "%.2f MiB", b / 1048576.0);
  else if (b >= 1024) snprintf(buf, n, "%.1f KiB", b / 1024.0);
  else snprintf(buf, n, "%llu B", (unsigned long long)b);
  return buf;
}

int cli_fail(const char *cmd, int code, const char *msg) {
  fprintf(stderr, "spill %s: %s (%s)\n", cmd, msg, spill_status_name(code));
  return 1;
}

int cli_float(const char *flag, const char *v, double lo, double hi, double *out) {
  char *end = NULL;
  double x = strtod(v, &end);
  if (!*v || *end || !isfinite(x) || x < lo || x > hi) {
    fprintf(stderr, "spill: %s: '%s' is not a number in [%g, %g]\n", flag, v, lo, hi);
    return -1;
  }
  *out = x;
  return 0;
}

/* argv[*i] ("--io-threads") as a table row of one of `targets`, or NULL. */
static const spill_knob *knob_of_flag(const char *a, unsigned targets) {
  if (strncmp(a, "--", 2) != 0) return NULL;
  char key[64];
  if (snprintf(key, sizeof key, "%s", a + 2) >= (int)sizeof key) return NULL;
  for (char *p = key; *p; p++) {
    if (*p == '_') return NULL; /* flags are kebab-case only */
    if (*p == '-') *p = '_';
  }
  const spill_knob *k = spill_knob_find(key);
  return k && (targets & (1u << k->target)) ? k : NULL;
}

int cli_knob_flag(const char *cmd, int argc, char **argv, int *i, unsigned targets,
                  spill_config *cfg, spill_sampling *s) {
  const spill_knob *k = knob_of_flag(argv[*i], targets);
  if (!k) return 0;
  const char *v;
  if (k->type == SPILL_KNOB_BOOL) {
    v = *i + 1 < argc && spill_knob_is_bool_word(argv[*i + 1]) ? argv[++*i] : "true";
  } else if (*i + 1 >= argc) {
    fprintf(stderr, "spill %s: %s needs a value\n", cmd, argv[*i]);
    return -1;
  } else {
    v = argv[++*i];
  }
  spill_err e = {0};
  int rc = k->target == SPILL_KNOB_CONFIG ? spill_config_set(cfg, k->name, v, &e)
                                          : spill_sampling_set(s, k->name, v, &e);
  if (rc) {
    fprintf(stderr, "spill %s: %s (%s)\n", cmd, e.msg, spill_status_name(rc));
    return -1;
  }
  return 1;
}

void cli_knob_help(FILE *f, unsigned targets) {
  spill_config dc;
  spill_sampling ds;
  spill_config_default(&dc);
  spill_sampling_default(&ds);
  for (int i = 0; i < spill_knob_count(); i++) {
    const spill_knob *k = spill_knob_at(i);
    if (!(targets & (1u << k->target))) continue;
    char flag[64], arg[160], def[64] = "", head[240];
    snprintf(flag, sizeof flag, "--%s", k->name);
    for (char *p = flag + 2; *p; p++)
      if (*p == '_') *p = '-';
    if (k->type == SPILL_KNOB_BOOL) snprintf(arg, sizeof arg, "[true|false]");
    else if (k->type == SPILL_KNOB_CHOICE) spill_knob_choices(k, arg, sizeof arg);
    else snprintf(arg, sizeof arg, "%s", k->arg ? k->arg : "X");
    snprintf(head, sizeof head, "%s %s", flag, arg);
    if (k->target == SPILL_KNOB_CONFIG) spill_config_get(&dc, k->name, def, sizeof def, NULL);
    else spill_sampling_get(&ds, k->name, def, sizeof def, NULL);
    fprintf(f, "  %-34s %s%s%s%s\n", head, k->help, def[0] ? " [" : "", def, def[0] ? "]" : "");
  }
}
