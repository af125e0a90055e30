/* harness/exp_peer.c: finding, checking and running the llama.cpp peer.
 *
 * A run forks llama_peer with PR_SET_PDEATHSIG (it dies with the runner),
 * reads its one JSON line from a pipe while polling the stop flag, waits
 * for it with WNOWAIT so /proc/PID/io can still be read from the zombie,
 * then reaps it with wait4 for its rusage. Nothing here prints.
 */
#define _GNU_SOURCE
#include "harness/exp_peer.h"

#include <cjson/cJSON.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <math.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "harness/exp_files.h"

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec + ts.tv_nsec / 1e9;
}

int spill_exp_peer_path(char *buf, size_t n, spill_err *e) {
  const char *env = getenv("SPILL_LLAMA_PEER");
  if (env && env[0]) {
    snprintf(buf, n, "%s", env);
  } else {
    const char *cache = getenv("SPILL_PEER_CACHE"), *xdg = getenv("XDG_CACHE_HOME"),
               *home = getenv("HOME");
    if (cache && cache[0]) snprintf(buf, n, "%s/%s/bin/llama_peer", cache, SPILL_PEER_LLAMA_KEY);
    else if (xdg && xdg[0])
      snprintf(buf, n, "%s/spill/peers/%s/bin/llama_peer", xdg, SPILL_PEER_LLAMA_KEY);
    else
      snprintf(buf, n, "%s/.cache/spill/peers/%s/bin/llama_peer", home ? home : "",
               SPILL_PEER_LLAMA_KEY);
  }
  struct stat st;
  if (stat(buf, &st) != 0 || !S_ISREG(st.st_mode) || access(buf, X_OK) != 0)
    return spill_err_set(e, SPILL_E_CONFIG,
                         "llama.cpp peer not built: %s is not an executable (run ./lab peers, "
                         "or set SPILL_LLAMA_PEER to a llama_peer binary)", buf);
  return SPILL_OK;
}

/* Line 1 of DST/import.journal: "spill-import 2 ... files=PATH:size=N:mtime=..[,...]"
 * (engine/import/import_run.c, identity(): PATH is the real path with ','
 * ':' '%' ' ' and bytes outside 0x21-0x7e as %XX). */
static int journal_files(const char *container, char *files, size_t n, spill_err *e) {
  char p[PATH_MAX + 32];
  snprintf(p, sizeof p, "%s/import.journal", container);
  spill_err oe = {0};
  FILE *f = spill_exp_fopen_read(p, &oe);
  if (!f)
    return spill_err_set(e, SPILL_E_CONFIG,
                         "model %s has no import provenance (%s): a peer arm needs the "
                         "container `spill import` made from model_gguf", container, oe.msg);
  char line[8192];
  int ok = fgets(line, sizeof line, f) != NULL;
  fclose(f);
  const char *fl = ok && !strncmp(line, "spill-import ", 13) ? strstr(line, " files=") : NULL;
  if (!fl) return spill_err_set(e, SPILL_E_CONFIG, "%s: no identity line", p);
  snprintf(files, n, "%s", fl + 7);
  files[strcspn(files, "\n")] = 0;
  return SPILL_OK;
}

/* The manifest's generator says `spill import` of a GGUF. */
static int manifest_is_gguf_import(const char *container, spill_err *e) {
  char p[PATH_MAX + 32], *text = NULL;
  snprintf(p, sizeof p, "%s/manifest.json", container);
  SPILL_TRY(spill_read_file(p, 64 << 20, &text, NULL, e));
  cJSON *j = spill_json_parse_quiet(text);
  free(text);
  const cJSON *g = j ? cJSON_GetObjectItemCaseSensitive(j, "generator") : NULL;
  const cJSON *tool = g ? cJSON_GetObjectItemCaseSensitive(g, "tool") : NULL;
  const cJSON *fmt = g ? cJSON_GetObjectItemCaseSensitive(g, "source_format") : NULL;
  int ok = cJSON_IsString(tool) && !strcmp(tool->valuestring, "spill import") &&
           cJSON_IsString(fmt) && !strcmp(fmt->valuestring, "gguf");
  cJSON_Delete(j);
  if (!ok)
    return spill_err_set(e, SPILL_E_CONFIG,
                         "%s: the manifest's generator is not `spill import` of a GGUF file", p);
  return SPILL_OK;
}

int spill_exp_peer_provenance(const char *container, const char *gguf, spill_err *e) {
  struct stat gs, ms;
  char real[PATH_MAX], man[PATH_MAX + 32], files[8192], want[3 * PATH_MAX + 32];
  if (stat(gguf, &gs) != 0 || !S_ISREG(gs.st_mode) || !realpath(gguf, real))
    return spill_err_set(e, SPILL_E_CONFIG, "model_gguf: %s: not a readable file (%s)", gguf,
                         strerror(errno ? errno : EINVAL));
  SPILL_TRY(manifest_is_gguf_import(container, e));
  SPILL_TRY(journal_files(container, files, sizeof files, e));
  size_t o = 0;
  for (const unsigned char *c = (const unsigned char *)real; *c && o + 4 < sizeof want; c++) {
    if (*c > 0x20 && *c < 0x7f && *c != ',' && *c != ':' && *c != '%') want[o++] = (char)*c;
    else o += (size_t)snprintf(want + o, 4, "%%%02X", *c);
  }
  snprintf(want + o, sizeof want - o, ":size=%llu:", (unsigned long long)gs.st_size);
  if (strncmp(files, want, strlen(want)) || strchr(files, ','))
    return spill_err_set(e, SPILL_E_CONFIG,
                         "model_gguf: %s does not hold the container's weights: %s was imported "
                         "from %s, not %s", gguf, container, files, want);
  snprintf(man, sizeof man, "%s/manifest.json", container);
  if (stat(man, &ms) == 0 && gs.st_mtime > ms.st_mtime)
    return spill_err_set(e, SPILL_E_CONFIG,
                         "model_gguf: %s was modified after %s was imported from it (re-run "
                         "`spill import` or regenerate neither)", gguf, container);
  return SPILL_OK;
}

static void evict_file(const char *p) {
  int fd = open(p, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return;
  (void)fdatasync(fd);
  (void)posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
  close(fd);
}

void spill_exp_evict_path(const char *path) {
  struct stat st;
  if (stat(path, &st) != 0) return;
  if (!S_ISDIR(st.st_mode)) {
    evict_file(path);
    return;
  }
  DIR *d = opendir(path);
  struct dirent *ent;
  while (d && (ent = readdir(d))) {
    char p[PATH_MAX + 256];
    snprintf(p, sizeof p, "%s/%s", path, ent->d_name);
    if (ent->d_name[0] != '.' && stat(p, &st) == 0 && S_ISREG(st.st_mode)) evict_file(p);
  }
  if (d) closedir(d);
}

void spill_exp_peer_result_free(spill_exp_peer_result *res) {
  if (!res) return;
  free(res->tokens);
  res->tokens = NULL;
}

static int write_ids(const spill_exp_peer_req *q, spill_err *e) {
  size_t cap = (size_t)q->n_prompt * 12 + 2, off = 0;
  char *buf = malloc(cap);
  if (!buf) return spill_err_set(e, SPILL_E_NOMEM, "peer: no memory");
  for (int i = 0; i < q->n_prompt; i++)
    off += (size_t)snprintf(buf + off, cap - off, i ? ",%d" : "%d", q->prompt[i]);
  buf[off++] = '\n';
  int rc = spill_write_file_atomic(q->ids_file, buf, off, e);
  free(buf);
  return rc;
}

/* The child: stdout to the pipe, stderr to the log, dies with the runner. */
static void child_exec(const spill_exp_peer_req *q, int out_fd, pid_t parent) {
  prctl(PR_SET_PDEATHSIG, SIGKILL);
  if (getppid() != parent) _exit(127);
  int log = open(q->log_file, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (dup2(out_fd, 1) < 0 || (log >= 0 && dup2(log, 2) < 0)) _exit(127);
  char ids[PATH_MAX + 2], n[16], th[16], bt[16], rp[16];
  snprintf(ids, sizeof ids, "@%s", q->ids_file);
  snprintf(n, sizeof n, "%d", q->decode_tokens);
  snprintf(th, sizeof th, "%d", q->threads);
  snprintf(bt, sizeof bt, "%d", q->batch);
  snprintf(rp, sizeof rp, "%d", q->repeat > 1 ? q->repeat : 1);
  char *argv[20] = {(char *)q->exe, "bench", (char *)q->gguf, "--tokens", ids, "-n", n,
                    "--load", (char *)q->load, "--threads", th, "--batch", bt};
  int k = 13; /* then at most --repeat R, --no-repack and the NULL */
  if (q->repeat > 1) argv[k++] = "--repeat", argv[k++] = rp; /* older builds lack the flag */
  if (!q->repack) argv[k++] = "--no-repack";
  argv[k] = NULL;
  execv(q->exe, argv);
  _exit(127);
}

/* Reads the child's stdout until EOF, polling the stop flag. */
static int read_output(int fd, pid_t pid, volatile int *stop, char **out, spill_err *e) {
  size_t cap = 1 << 16, len = 0;
  char *buf = malloc(cap);
  if (!buf) return spill_err_set(e, SPILL_E_NOMEM, "peer: no memory");
  for (;;) {
    if (stop && *stop) {
      kill(pid, SIGKILL);
      free(buf);
      return spill_err_set(e, SPILL_E_INTERRUPTED, "peer run stopped");
    }
    struct pollfd p = {fd, POLLIN, 0};
    int r = poll(&p, 1, 200);
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) continue;
    if (len + 4096 > cap) {
      char *nb = realloc(buf, cap * 2);
      if (!nb) {
        free(buf);
        kill(pid, SIGKILL);
        return spill_err_set(e, SPILL_E_NOMEM, "peer: no memory");
      }
      buf = nb;
      cap *= 2;
    }
    ssize_t k = read(fd, buf + len, cap - len - 1);
    if (k < 0 && errno == EINTR) continue;
    if (k <= 0) break;
    len += (size_t)k;
  }
  buf[len] = 0;
  *out = buf;
  return SPILL_OK;
}

/* read_bytes of /proc/PID/io (0 when unreadable). */
static uint64_t proc_read_bytes(pid_t pid) {
  char p[64], line[128];
  snprintf(p, sizeof p, "/proc/%ld/io", (long)pid);
  FILE *f = fopen(p, "r");
  unsigned long long v = 0;
  while (f && fgets(line, sizeof line, f))
    if (sscanf(line, "read_bytes: %llu", &v) == 1) break;
  if (f) fclose(f);
  return v;
}

static double num(const cJSON *j, const char *k) {
  const cJSON *v = cJSON_GetObjectItemCaseSensitive(j, k);
  return cJSON_IsNumber(v) ? v->valuedouble : NAN;
}

/* FNV-1a 64 of a JSON array of ids' int bytes (as the runner hashes
 * tokens); 0 and *ok = 0 when it is not n integers. */
static uint64_t ids_hash(const cJSON *t, int n, int *ok) {
  uint64_t h = 0xcbf29ce484222325ull;
  int i = 0;
  *ok = cJSON_IsArray(t) && cJSON_GetArraySize(t) == n;
  for (const cJSON *it = *ok ? t->child : NULL; it && *ok; it = it->next, i++) {
    *ok = cJSON_IsNumber(it);
    int v = it->valueint;
    const unsigned char *p = (const unsigned char *)&v;
    for (size_t b = 0; b < sizeof v; b++) h = (h ^ p[b]) * 0x100000001b3ull;
  }
  return *ok ? h : 0;
}

/* "requests" into res (q->repeat of them; builds with --repeat print them
 * for every bench run). */
static int parse_requests(const cJSON *j, const spill_exp_peer_req *q, spill_exp_peer_result *res,
                          spill_err *e) {
  int want = q->repeat;
  const cJSON *rq = cJSON_GetObjectItemCaseSensitive(j, "requests");
  if (want > SPILL_EXP_PEER_MAX_REQUESTS || !cJSON_IsArray(rq) || cJSON_GetArraySize(rq) != want)
    return spill_err_set(e, SPILL_E_FORMAT, "llama_peer printed no \"requests\" for --repeat %d "
                         "(an older build? run ./lab peers; see %s)", want, q->log_file);
  int i = 0;
  for (const cJSON *r = rq->child; r; r = r->next, i++) {
    spill_exp_peer_request *o = &res->requests[i];
    int ok;
    o->prefill_s = num(r, "prefill_s");
    o->decode_s = num(r, "decode_s");
    double f[4] = {num(r, "read_bytes_prefill"), num(r, "read_bytes_decode"),
                   num(r, "major_faults"), num(r, "peak_rss_bytes")};
    o->tokens_hash = ids_hash(cJSON_GetObjectItemCaseSensitive(r, "tokens"), q->decode_tokens, &ok);
    for (int k = 0; k < 4; k++) ok = ok && f[k] >= 0;
    if (!ok || !(o->prefill_s >= 0) || !(o->decode_s > 0))
      return spill_err_set(e, SPILL_E_FORMAT, "llama_peer's request %d is malformed (see %s)", i,
                           q->log_file);
    o->read_bytes_prefill = (uint64_t)f[0];
    o->read_bytes_decode = (uint64_t)f[1];
    o->major_faults = (uint64_t)f[2];
    o->peak_rss_bytes = (uint64_t)f[3];
  }
  res->n_requests = want;
  return SPILL_OK;
}

/* The child's JSON line into res. */
static int parse_line(const char *text, const spill_exp_peer_req *q, spill_exp_peer_result *res,
                      spill_err *e) {
  cJSON *j = spill_json_parse_quiet(text);
  const cJSON *t = j ? cJSON_GetObjectItemCaseSensitive(j, "tokens") : NULL;
  if (!cJSON_IsArray(t) || cJSON_GetArraySize(t) != q->decode_tokens) {
    cJSON_Delete(j);
    return spill_err_set(e, SPILL_E_FORMAT, "llama_peer printed no result line with %d tokens "
                         "(see %s)", q->decode_tokens, q->log_file);
  }
  res->load_s = num(j, "load_s");
  res->prefill_s = num(j, "prefill_s");
  res->decode_s = num(j, "decode_s");
  res->n_prefill = q->n_prompt;
  res->n_decode = q->decode_tokens;
  res->tokens = malloc(sizeof(int) * (size_t)(q->decode_tokens + 1));
  int i = 0, bad = !res->tokens;
  for (const cJSON *it = t->child; !bad && it; it = it->next, i++) {
    bad = !cJSON_IsNumber(it);
    if (!bad) res->tokens[i] = it->valueint;
  }
  const cJSON *ph = cJSON_GetObjectItemCaseSensitive(j, "phases");
  char *pt = ph ? cJSON_PrintUnformatted(ph) : NULL;
  snprintf(res->phases, sizeof res->phases, "%s", pt && strlen(pt) < sizeof res->phases ? pt : "");
  free(pt);
  int rc = bad || !(res->decode_s > 0) || !(res->prefill_s >= 0)
               ? spill_err_set(e, SPILL_E_FORMAT, "llama_peer's result line is malformed (see %s)",
                               q->log_file)
               : SPILL_OK;
  if (rc == SPILL_OK && q->repeat >= 1) rc = parse_requests(j, q, res, e);
  cJSON_Delete(j);
  return rc;
}

int spill_exp_peer_run(const spill_exp_peer_req *q, spill_exp_peer_result *res, spill_err *e) {
  memset(res, 0, sizeof *res);
  SPILL_TRY(write_ids(q, e));
  int fds[2];
  if (pipe2(fds, O_CLOEXEC) < 0) return spill_err_set(e, SPILL_E_IO, "pipe: %s", strerror(errno));
  pid_t parent = getpid();
  double t0 = now_s();
  pid_t pid = fork();
  if (pid < 0) {
    close(fds[0]), close(fds[1]);
    return spill_err_set(e, SPILL_E_IO, "fork: %s", strerror(errno));
  }
  if (pid == 0) child_exec(q, fds[1], parent);
  close(fds[1]);
  char *out = NULL;
  int rc = read_output(fds[0], pid, q->stop, &out, e);
  close(fds[0]);
  /* wait without reaping: a zombie's /proc/PID/io still holds its totals */
  siginfo_t si;
  while (waitid(P_PID, (id_t)pid, &si, WEXITED | WNOWAIT) < 0 && errno == EINTR) {}
  res->read_bytes = proc_read_bytes(pid);
  int status = 0;
  struct rusage ru;
  memset(&ru, 0, sizeof ru);
  while (wait4(pid, &status, 0, &ru) < 0 && errno == EINTR) {}
  res->wall_s = now_s() - t0;
  if (rc == SPILL_OK && !(WIFEXITED(status) && WEXITSTATUS(status) == 0))
    rc = spill_err_set(e, SPILL_E_IO, "llama_peer %s (see %s)",
                       WIFSIGNALED(status) ? strsignal(WTERMSIG(status)) : "failed", q->log_file);
  if (rc == SPILL_OK) rc = parse_line(out, q, res, e);
  free(out);
  res->peak_rss_bytes = (uint64_t)ru.ru_maxrss * 1024;
  res->major_faults = (uint64_t)ru.ru_majflt;
  res->minor_faults = (uint64_t)ru.ru_minflt;
  res->user_s = ru.ru_utime.tv_sec + ru.ru_utime.tv_usec / 1e6;
  res->sys_s = ru.ru_stime.tv_sec + ru.ru_stime.tv_usec / 1e6;
  if (rc < 0) spill_exp_peer_result_free(res);
  return rc;
}
