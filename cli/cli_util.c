/* cli/cli_util.c: progress, argument scanning, formatting for the CLI. */
#define _POSIX_C_SOURCE 200809L
#include "cli/cli_util.h"

#include <stdarg.h>

#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "cli/commands.h"
#include "engine/spill.h"
#include "harness/tune_profile.h"

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

int cli_usage_error(const char *fmt, ...) {
  const cli_command *c = cli_current();
  if (fmt) {
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "spill%s%s: ", c ? " " : "", c ? c->name : "");
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
  }
  if (c) {
    fputs(c->usage, stderr);
    if (c->knobs) fprintf(stderr, "(the knobs: spill %s --help)\n", c->name);
  }
  return 2;
}

const char *cli_value(int argc, char **argv, int *i) {
  if (*i + 1 >= argc) {
    cli_usage_error("%s needs a value", argv[*i]);
    return NULL;
  }
  return argv[++*i];
}

int cli_int(const char *flag, const char *v, long lo, long hi, long *out) {
  char *end = NULL;
  long x = strtol(v, &end, 10);
  if (!*v || *end || x < lo || x > hi) {
    cli_usage_error("%s: '%s' is not an integer in [%ld, %ld]", flag, v, lo, hi);
    return -1;
  }
  *out = x;
  return 0;
}

int cli_size(const char *flag, const char *v, uint64_t *out) {
  uint64_t b = spill_parse_size(v);
  if (!b) {
    cli_usage_error("%s: '%s' is not a size (e.g. 8G, 512M, 1.5GiB)", flag, v);
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

/* The engine's knob-flag layer (spill_knob_flag*, engine/spill.h), limited
 * to `targets`, with errors as usage errors. */
int cli_knob_flag(int argc, char **argv, int *i, unsigned targets,
                  spill_config *cfg, spill_sampling *s) {
  const spill_knob *k = spill_knob_flag(argv[*i]);
  if (!k || !(targets & (1u << k->target))) return 0;
  spill_err e = {0};
  int rc = spill_knob_flag_set(k, argc, argv, i, cfg, s, &e);
  if (rc) {
    cli_usage_error("%s (%s)", e.msg, spill_status_name(rc));
    return -1;
  }
  return 1;
}

int cli_tuned_flag(int argc, char **argv, int *i, cli_tuned *t) {
  if (!strcmp(argv[*i], "--no-tuned")) t->off = 1;
  else if (!strcmp(argv[*i], "--tuned")) {
    if (!(t->file = cli_value(argc, argv, i))) return -1;
  } else return 0;
  if (t->off && t->file) {
    cli_usage_error("--tuned and --no-tuned together");
    return -1;
  }
  return 1;
}

int cli_apply_tuned(const char *cmd, const char *model, const cli_tuned *t, int argc,
                    char **argv, spill_config *cfg) {
  if (t->off) return 0;
  spill_tune_argv av = {argc, argv};
  char note[1024];
  spill_err e = {0};
  int rc = spill_tune_for_model(model, t->file, cfg, spill_tune_skip_argv, &av, note, sizeof note,
                                &e);
  if (rc) {
    cli_fail(cmd, rc, e.msg);
    return -1;
  }
  if (note[0]) fprintf(stderr, "spill %s: %s\n", cmd, note);
  return 0;
}

void cli_knob_help(FILE *f, unsigned targets) {
  for (int i = 0; i < spill_knob_count(); i++) {
    const spill_knob *k = spill_knob_at(i);
    char line[512];
    if (!(targets & (1u << k->target))) continue;
    spill_knob_flag_help(k, line, sizeof line);
    fprintf(f, "%s\n", line);
  }
}

void cli_enter_workspace(void) {
  const char *wd = getenv("BUILD_WORKING_DIRECTORY");
  if (wd && chdir(wd) != 0) fprintf(stderr, "spill: cannot enter %s\n", wd);
}

int cli_open_engine(const char *cmd, const char *model, const spill_config *cfg,
                    spill_engine **eng) {
  spill_err e = {0};
  int rc = spill_engine_open(model, cfg, eng, &e);
  if (rc) {
    cli_fail(cmd, rc, e.msg);
    return -1;
  }
  const char *w = spill_engine_warnings(*eng);
  if (w && *w) fprintf(stderr, "spill %s: warning: %s", cmd, w);
  return 0;
}

void cli_print_run_summary(spill_engine *eng, const spill_run_stats *st) {
  const spill_config *c = spill_engine_config(eng);
  uint64_t acc = st->demand_hits + st->demand_misses;
  char b[32];
  fprintf(stderr,
          "spill: %d prompt + %d generated tokens, prefill %.2fs, decode %.2fs, %.3f tok/s | "
          "hits %llu misses %llu (hit rate %.1f%%) | read %s in %llu reads | storage %s, "
          "io %s (%s), policy %s, lookahead %d\n",
          st->tokens_prefill, st->tokens_decode, st->prefill_s, st->decode_s,
          st->decode_tok_per_s, (unsigned long long)st->demand_hits,
          (unsigned long long)st->demand_misses, acc ? 100.0 * st->demand_hits / acc : 0.0,
          cli_bytes(st->bytes_read, b, sizeof b), (unsigned long long)st->reads,
          spill_storage_name(c->storage), spill_io_backend_kind_name(c->io_backend),
          spill_engine_io_backend_why(eng), c->policy, c->lookahead);
  if (st->preload_records)
    fprintf(stderr,
            "spill: preload: %llu expert records (%s) read into the cache in %.2fs (%.2f GB/s) "
            "before the run, not counted above (--preload all)\n",
            (unsigned long long)st->preload_records, cli_bytes(st->preload_bytes, b, sizeof b),
            st->preload_s, st->preload_s > 0 ? st->preload_bytes / st->preload_s / 1e9 : 0.0);
  if (c->routing_trace)
    fprintf(stderr, "spill: FORCED routing: expert ids replayed from %s (--routing-trace)\n",
            c->routing_trace);
  if (c->io_throttle)
    fprintf(stderr, "spill: EMULATED device: expert reads throttled to %.2f GB/s (--io-throttle)\n",
            c->io_throttle / 1e9);
  if (c->lookahead > 0 && st->lookahead_predicted > 0) {
    fprintf(stderr, "spill: lookahead precision %.1f%% (%llu predicted); by rank:",
            100.0 * st->lookahead_correct / st->lookahead_predicted,
            (unsigned long long)st->lookahead_predicted);
    for (int r = 0; r < c->lookahead && r < SPILL_LA_RANKS; r++)
      if (st->lookahead_rank_made[r])
        fprintf(stderr, " %.0f%%", 100.0 * st->lookahead_rank_correct[r] / st->lookahead_rank_made[r]);
    fprintf(stderr, "\n");
  }
  if (c->draft > 0)
    fprintf(stderr,
            "spill: drafts: %llu drafted, %llu accepted (%.1f%%); %d tokens in %llu decode "
            "forwards; switched off %llu times (--draft %d%s)\n",
            (unsigned long long)st->draft_tokens, (unsigned long long)st->draft_accepted,
            st->draft_tokens ? 100.0 * st->draft_accepted / st->draft_tokens : 0.0,
            st->tokens_decode, (unsigned long long)st->decode_forwards,
            (unsigned long long)st->draft_switched_off, c->draft,
            c->draft_adaptive ? "" : ", not adaptive");
  if (st->nonfinite_pos >= 0)
    fprintf(stderr,
            "spill: NOT FINITE: the logits at position %d held NaN/Inf; generation stopped there "
            "(SPILL_E_NONFINITE)\n", st->nonfinite_pos);
  cli_warn_paging_after(stderr, st);
}

int cli_warn_paging_live(FILE *f, const spill_run_stats *ts, int *told) {
  if (!ts || !ts->paging || *told) return 0;
  *told = 1;
  fprintf(f,
          "\nspill: WARNING: paging: %d decode tokens in a row with >= %d major page faults "
          "each (from token %d): the budget is past this machine's RAM cliff\n",
          SPILL_PAGING_TOKENS, SPILL_PAGING_FAULTS_PER_TOKEN, ts->paging_token);
  return 1;
}

int cli_warn_paging_after(FILE *f, const spill_run_stats *st) {
  if (st->tokens_decode <= 0 || st->major_faults <= (uint64_t)st->tokens_decode) return 0;
  fprintf(f,
          "spill: WARNING: %llu major page faults during %d tokens: the machine is paging "
          "(cache hits are page faults); the hit rate above does not tell the cost\n",
          (unsigned long long)st->major_faults, st->tokens_decode + st->tokens_prefill);
  return 1;
}
