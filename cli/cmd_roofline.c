/* cli/cmd_roofline.c: `spill roofline [--json] [--fio] MODEL [knobs]`.
 *
 * Prints spill_roofline_measure (research/roofline/spill_roofline.h): the
 * device's random-read bandwidth at the record size (O_DIRECT probe),
 * memory bandwidth, compute time per token with every expert resident,
 * bytes read per decode token at the configured cache (demand misses +
 * lookahead prefetches), the bound min(disk / read, 1 / compute) and the
 * achieved decode tok/s as a fraction of it. --fio also runs Debian's fio
 * once with the same record size, threads (psync, one read in flight each),
 * O_DIRECT and duration on one bank file of the model and prints the
 * agreement of the two probes. Engine knobs are flags as in `spill bench`.
 */
#define _POSIX_C_SOURCE 200809L
#define _GNU_SOURCE
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "cli/cli_util.h"
#include "cli/commands.h"
#include "engine/spill.h"
#include "research/roofline/spill_roofline.h"

const char cmd_roofline_usage[] =
    "usage: spill roofline [--json] [--fio] [-n N] [--repeats R] [--prompt TEXT]\n"
    "                      [--probe-threads N] [--probe-seconds S] MODEL [engine knobs]\n";

/* fio's randread bandwidth (bytes/s) on FILE, or -1 with the reason in why.
 * fio is run with fork/exec, never through a shell, so no character of the
 * model's path is a command (issue 26 item 3); fio's own list separator ':'
 * is escaped as fio documents ("\:"). */
static double run_fio(const char *file, uint64_t bs, int threads, double seconds, char *why,
                      size_t why_n) {
  char errf[] = "/tmp/spill-fio-XXXXXX";
  int efd = mkstemp(errf);
  if (efd < 0) {
    snprintf(why, why_n, "cannot create a temporary file for fio's stderr");
    return -1;
  }
  char fname[8192], a_bs[64], a_jobs[64], a_rt[64];
  size_t o = (size_t)snprintf(fname, sizeof fname, "--filename=");
  for (const char *p = file; *p && o + 3 < sizeof fname; p++) {
    if (*p == ':') fname[o++] = '\\';
    fname[o++] = *p;
  }
  fname[o] = 0;
  snprintf(a_bs, sizeof a_bs, "--bs=%llu", (unsigned long long)bs);
  snprintf(a_jobs, sizeof a_jobs, "--numjobs=%d", threads);
  snprintf(a_rt, sizeof a_rt, "--runtime=%.0f", seconds < 1 ? 1 : seconds);
  char *const argv[] = {"fio", "--name=spill-roofline", fname, "--readonly", "--rw=randread",
                        a_bs, "--direct=1", "--ioengine=psync", a_jobs, "--group_reporting",
                        "--time_based", a_rt, "--output-format=json", NULL};
  double bw = -1;
  int pfd[2];
  pid_t pid = -1;
  if (pipe(pfd) == 0) {
    pid = fork();
    if (pid == 0) {
      dup2(pfd[1], 1);
      dup2(efd, 2);
      close(pfd[0]);
      close(pfd[1]);
      close(efd);
      execvp("fio", argv);
      _exit(127);
    }
    close(pfd[1]);
    if (pid < 0) close(pfd[0]);
  }
  close(efd);
  if (pid < 0) {
    snprintf(why, why_n, "cannot start fio");
  } else {
    static char out[1 << 20];
    size_t n = 0;
    ssize_t r;
    char drain[4096]; /* past 1 MiB: read and dropped, so fio never blocks */
    for (;;) {
      int room = n < sizeof out - 1;
      r = room ? read(pfd[0], out + n, sizeof out - 1 - n) : read(pfd[0], drain, sizeof drain);
      if (r < 0 && errno == EINTR) continue;
      if (r <= 0) break;
      if (room) n += (size_t)r;
    }
    out[n] = 0;
    close(pfd[0]);
    int st = 0;
    while (waitpid(pid, &st, 0) < 0 && errno == EINTR) {
    }
    const char *rd = strstr(out, "\"read\"");
    const char *b = rd ? strstr(rd, "\"bw_bytes\"") : NULL;
    if (st != 0) {
      char line[256] = "";
      FILE *ef = fopen(errf, "r");
      if (ef) {
        char l[256];
        while (fgets(l, sizeof l, ef)) snprintf(line, sizeof line, "%s", l);
        fclose(ef);
      }
      line[strcspn(line, "\n")] = 0;
      snprintf(why, why_n, "fio exited with status %d%s%s%s", st,
               st == 127 * 256 ? " (not installed? ./lab installs it)" : "", line[0] ? ": " : "",
               line);
    } else if (!b || !(b = strchr(b, ':'))) {
      snprintf(why, why_n, "no read bandwidth in fio's JSON output");
    } else {
      bw = strtod(b + 1, NULL);
    }
  }
  unlink(errf);
  return bw;
}

/* First bank file of the model (experts-*.bin by the container convention).
 * The bank list comes after the tensor table, hundreds of KiB into a big
 * model's manifest, so the whole file is scanned (manifests are capped at
 * 64 MiB by the format). */
static int first_bank(const char *model, char *out, size_t n) {
  char path[4096];
  snprintf(path, sizeof path, "%s/manifest.json", model);
  FILE *f = fopen(path, "r");
  if (!f) return -1;
  const size_t cap = 64u << 20;
  char *buf = malloc(cap + 1);
  if (!buf) {
    fclose(f);
    return -1;
  }
  size_t k = fread(buf, 1, cap, f);
  fclose(f);
  buf[k] = 0;
  int rc = -1;
  const char *b = strstr(buf, "\"experts-");
  const char *q = b ? strchr(b + 1, '"') : NULL;
  if (q && (size_t)(q - b) + strlen(model) + 2 <= n) {
    snprintf(out, n, "%s/%.*s", model, (int)(q - b - 1), b + 1);
    rc = 0;
  }
  free(buf);
  return rc;
}

static void put_json_str(const char *s) { /* the one escaper (spill.h) */
  char *q = spill_json_quote(s, strlen(s));
  fputs(q ? q : "\"\"", stdout);
  free(q);
}

/* Parses the command line into model, cfg (engine knobs) and o; returns
 * -1 to go on, or the exit status (2 on a usage error). */
static int parse_args(int argc, char **argv, const char **model, spill_config *cfg,
                      spill_roofline_opts *o, int *json, int *fio) {
  long v;
  const char *s;
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i];
    if (!strcmp(a, "--json")) *json = 1;
    else if (!strcmp(a, "--fio")) *fio = 1;
    else if (!strcmp(a, "-n")) {
      if (!(s = cli_value(argc, argv, &i)) || cli_int(a, s, 1, 4096, &v)) return 2;
      o->n_tokens = (int)v;
    } else if (!strcmp(a, "--repeats")) {
      if (!(s = cli_value(argc, argv, &i)) || cli_int(a, s, 1, 16, &v)) return 2;
      o->repeats = (int)v;
    } else if (!strcmp(a, "--prompt")) {
      if (!(s = cli_value(argc, argv, &i))) return 2;
      if (!s[0]) return cli_usage_error("--prompt: empty prompt");
      o->prompt = s;
    } else if (!strcmp(a, "--probe-threads")) {
      if (!(s = cli_value(argc, argv, &i)) || cli_int(a, s, 1, 64, &v)) return 2;
      o->probe_threads = (int)v;
    } else if (!strcmp(a, "--probe-seconds")) {
      if (!(s = cli_value(argc, argv, &i)) || cli_int(a, s, 1, 600, &v)) return 2;
      o->probe_seconds = (double)v;
    } else {
      int k = cli_knob_flag(argc, argv, &i, CLI_KNOBS_CONFIG, cfg, NULL);
      if (k < 0) return 2;
      if (k) continue;
      if (a[0] == '-') return cli_usage_error("unknown option %s", a);
      if (*model) return cli_usage_error("unexpected argument %s", a);
      *model = a;
    }
  }
  if (!*model) return cli_usage_error("no model");
  return -1;
}

/* --json: one object (the disk bound is null when nothing was missed). */
static void print_json(const char *model, const spill_roofline_opts *o, const spill_roofline *rp,
                       double fio_bw) {
  const spill_roofline r = *rp;
  const int disk_inf = r.bound_disk_tok_s > 1e200;
  char dbound[64]; /* null: nothing missed, the disk does not bound */
  if (disk_inf) snprintf(dbound, sizeof dbound, "null");
  else snprintf(dbound, sizeof dbound, "%.4f", r.bound_disk_tok_s);
  printf("{\"model\": ");
  put_json_str(model);
  printf(", \"prompt\": ");
  put_json_str(o->prompt ? o->prompt : "The quick brown fox");
  printf(", \"prompt_tokens\": %d, \"read_bytes_per_token\": %.0f, "
         "\"spec_bytes_per_token\": %.0f, ",
         r.prompt_tokens, r.read_bytes_per_token, r.spec_bytes_per_token);
  printf("\"disk_probe1_bytes_per_s\": %.0f, \"disk_probe2_bytes_per_s\": %.0f, "
         "\"disk_workload_bytes_per_s\": %.0f, \"workload_records\": %llu, ",
         r.disk_probe1_bytes_per_s, r.disk_probe2_bytes_per_s, r.disk_workload_bytes_per_s,
         (unsigned long long)r.workload_records);
  printf("\"record_bytes\": %llu, \"probe_threads\": %d, "
         "\"disk_bytes_per_s\": %.0f, \"disk_reads_per_s\": %.1f, \"disk_p50_ms\": %.3f, "
         "\"mem_bytes_per_s\": %.0f, \"compute_s_per_token\": %.6f, "
         "\"resident_hit_rate\": %.4f, \"resident_budget\": %llu, \"resident_capped\": %s, "
         "\"missed_bytes_per_token\": %.0f, \"misses_per_token\": %.2f, "
         "\"cache_slots\": %llu, \"budget\": %llu, \"tokens\": %d, "
         "\"io_wait_s_per_token\": %.6f, \"bound_disk_tok_s\": %s, "
         "\"bound_compute_tok_s\": %.4f, \"bound_tok_s\": %.4f, \"achieved_tok_s\": %.4f, "
         "\"fraction\": %.4f, \"bound_by\": \"%s\", \"achieved_min_tok_s\": %.4f, "
         "\"achieved_max_tok_s\": %.4f, \"compute_max_s_per_token\": %.6f",
         (unsigned long long)r.record_bytes, r.probe_threads, r.disk_bytes_per_s,
         r.disk_reads_per_s, r.disk_p50_ms, r.mem_bytes_per_s, r.compute_s_per_token,
         r.resident_hit_rate, (unsigned long long)r.resident_budget,
         r.resident_capped ? "true" : "false", r.missed_bytes_per_token,
         r.misses_per_token, (unsigned long long)r.cache_slots, (unsigned long long)r.budget,
         r.tokens, r.io_wait_s_per_token, dbound, r.bound_compute_tok_s, r.bound_tok_s,
         r.achieved_tok_s, r.fraction,
         r.bound_disk_tok_s < r.bound_compute_tok_s ? "disk" : "compute", r.achieved_min_tok_s,
         r.achieved_max_tok_s, r.compute_max_s_per_token);
  printf(", \"paired_fraction\": %.4f, \"paired_fraction_min\": %.4f, "
         "\"paired_fraction_max\": %.4f",
         r.paired_fraction, r.paired_fraction_min, r.paired_fraction_max);
  if (fio_bw >= 0)
    printf(", \"fio_bytes_per_s\": %.0f, \"probe_over_fio\": %.4f", fio_bw,
           r.disk_bytes_per_s / fio_bw);
  printf("}\n");
}

static void print_text(const char *model, const spill_roofline_opts *o, const spill_roofline *rp,
                       double fio_bw) {
  const spill_roofline r = *rp;
  const int disk_inf = r.bound_disk_tok_s > 1e200;
  char b1[32], b2[32];
  printf("roofline of %s (record %s, %d decode tokens, prompt \"%s\" = %d tokens)\n", model,
         cli_bytes(r.record_bytes, b1, sizeof b1), r.tokens,
         o->prompt ? o->prompt : "The quick brown fox", r.prompt_tokens);
  printf("  disk     %8.1f MB/s  %7.1f reads/s  p50 %.2f ms  (O_DIRECT random records, %d threads;\n"
         "           fastest probe: all records before %.1f and after %.1f MB/s, the workload's\n"
         "           %llu records %.1f MB/s)\n",
         r.disk_bytes_per_s / 1e6, r.disk_reads_per_s, r.disk_p50_ms, r.probe_threads,
         r.disk_probe1_bytes_per_s / 1e6, r.disk_probe2_bytes_per_s / 1e6,
         (unsigned long long)r.workload_records, r.disk_workload_bytes_per_s / 1e6);
  if (fio_bw >= 0)
    printf("  fio      %8.1f MB/s  (randread psync direct, same bs/threads, one bank): probe/fio %.3f\n",
           fio_bw / 1e6, r.disk_bytes_per_s / fio_bw);
  printf("  memory   %8.1f GB/s  (read, 2 threads)\n", r.mem_bytes_per_s / 1e9);
  printf("  compute  %8.2f ms/token with every expert resident (slowest run %.2f; budget %s%s, "
         "hit rate %.1f%%)\n",
         r.compute_s_per_token * 1e3, r.compute_max_s_per_token * 1e3,
         cli_bytes(r.resident_budget, b2, sizeof b2),
         r.resident_capped ? ", cut to the memory available now" : "",
         100 * r.resident_hit_rate);
  printf("  missed   %8.2f MB/token  (%.1f misses/token; %llu cache slots, budget %s)\n",
         r.missed_bytes_per_token / 1e6, r.misses_per_token, (unsigned long long)r.cache_slots,
         cli_bytes(r.budget, b1, sizeof b1));
  printf("  read     %8.2f MB/token  (missed + %.2f MB lookahead prefetch: the disk leg)\n",
         r.read_bytes_per_token / 1e6, r.spec_bytes_per_token / 1e6);
  if (disk_inf)
    printf("  bound    disk unbounded (nothing missed), compute %.2f tok/s -> %.2f tok/s\n",
           r.bound_compute_tok_s, r.bound_tok_s);
  else
    printf("  bound    min(disk %.2f, compute %.2f) = %.2f tok/s (%s-bound)\n", r.bound_disk_tok_s,
           r.bound_compute_tok_s, r.bound_tok_s,
           r.bound_disk_tok_s < r.bound_compute_tok_s ? "disk" : "compute");
  printf("  achieved %8.2f tok/s (median; runs %.2f .. %.2f) = %.1f%% of the bound (io wait %.2f "
         "ms/token)\n",
         r.achieved_tok_s, r.achieved_min_tok_s, r.achieved_max_tok_s, 100 * r.fraction,
         r.io_wait_s_per_token * 1e3);
  printf("  paired   %8.1f%% of the resident speed in the same round (median; %.1f .. %.1f%%)\n",
         100 * r.paired_fraction, 100 * r.paired_fraction_min, 100 * r.paired_fraction_max);
}

int cmd_roofline(int argc, char **argv) {
  spill_config cfg;
  spill_config_default(&cfg);
  spill_roofline_opts o = {0};
  int json = 0, fio = 0;
  const char *model = NULL;
  int prc = parse_args(argc, argv, &model, &cfg, &o, &json, &fio);
  if (prc >= 0) return prc;
  spill_roofline r;
  spill_err e = {0};
  int rc = spill_roofline_measure(model, &cfg, &o, &r, &e);
  if (rc) return cli_fail("roofline", rc, e.msg);
  double fio_bw = -1;
  if (fio) {
    char bank[4096];
    char why[512] = "no experts-*.bin bank in the manifest";
    if (first_bank(model, bank, sizeof bank) == 0)
      fio_bw = run_fio(bank, r.record_bytes, r.probe_threads,
                       o.probe_seconds > 0 ? o.probe_seconds : 3, why, sizeof why);
    if (fio_bw < 0) fprintf(stderr, "spill roofline: warning: no fio comparison: %s\n", why);
  }
  if (json) print_json(model, &o, &r, fio_bw);
  else print_text(model, &o, &r, fio_bw);
  return 0;
}
