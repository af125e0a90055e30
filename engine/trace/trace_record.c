/* engine/trace/trace_record.c: the engine's two per-token outputs, written
 * where the trace schema is read: router-format trace rows (one per token
 * and MoE layer, docs/TRACE.md "Router format") and per-token profile rows
 * (docs/TRACE.md "Profile").
 *
 * The engine fills a spill_trace_row / spill_profile_row and calls the
 * writers here; trace_read.c reads the router rows back and
 * spill_profile_parse_row reads a profile row, so each schema is written and
 * read in this module (round trip tested in trace_record_test.cc). Rows are
 * appended and flushed per call so that a crashed or killed run keeps every
 * row written so far; the trace stops at max_bytes (spill_trace_writer.capped). Never
 * prints to stdout/stderr; depends on engine/base only.
 */
#define _POSIX_C_SOURCE 200809L /* fdopen */
#include <cjson/cJSON.h>
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "engine/base/json_util.h"
#include "engine/base/safe_file.h"
#include "engine/trace/router_trace.h"

/* ------------------------------------------------------------ router rows */

int spill_trace_writer_open(spill_trace_writer *w, const char *path, uint64_t max_bytes,
                            spill_err *e) {
  memset(w, 0, sizeof *w);
  int fd, rc = spill_file_open_write(path, O_WRONLY | O_CREAT | O_TRUNC, 0644, &fd, e);
  if (rc < 0) { /* "trace PATH: is a symbolic link; ..." */
    char m[SPILL_ERR_MSG_MAX];
    snprintf(m, sizeof m, "%s", e ? e->msg : "");
    return spill_err_set(e, rc, "trace %s", m);
  }
  w->f = fdopen(fd, "w");
  if (!w->f) close(fd);
  SPILL_FAIL_IF(e, !w->f, SPILL_E_IO, "trace %s: %s", path, strerror(errno));
  w->max_bytes = max_bytes;
  return SPILL_OK;
}

void spill_trace_writer_close(spill_trace_writer *w) {
  if (!w) return;
  if (w->f) fclose(w->f);
  memset(w, 0, sizeof *w);
}

/* One line of at most 8192 bytes; each list stops 64 bytes before the end
 * of the line buffer (a row never overflows; with k in the thousands the
 * lists would be cut, which the schema's limits rule out). */
int spill_trace_row_format(const spill_trace_row *r, char *line, size_t cap) {
  int n = snprintf(line, cap, "{\"tok\": %lld, \"pos\": %lld, \"phase\": \"%s\", \"layer\": %d, \"ids\": [",
                   (long long)r->tok, (long long)r->pos,
                   r->phase == SPILL_TRACE_PHASE_PREFILL ? "prefill" : "decode", r->layer);
  const int lim = (int)cap - 64;
  for (int j = 0; j < r->k && n < lim; j++)
    n += snprintf(line + n, cap - (size_t)n, "%s%u", j ? ", " : "", r->ids[j]);
  n += snprintf(line + n, cap - (size_t)n, "], \"weights\": [");
  for (int j = 0; j < r->k && n < lim; j++)
    n += isfinite(r->weights[j]) /* JSON has no NaN or inf: a model gone non-finite writes null */
             ? snprintf(line + n, cap - (size_t)n, "%s%.6g", j ? ", " : "", r->weights[j])
             : snprintf(line + n, cap - (size_t)n, "%snull", j ? ", " : "");
  n += snprintf(line + n, cap - (size_t)n, "], \"pred\": [");
  for (int j = 0; j < r->n_pred && n < lim; j++)
    n += snprintf(line + n, cap - (size_t)n, "%s%u", j ? ", " : "", r->pred[j]);
  n += snprintf(line + n, cap - (size_t)n, "], \"hit\": [");
  for (int j = 0; j < r->k && n < lim; j++)
    n += snprintf(line + n, cap - (size_t)n, "%s%d", j ? ", " : "", (int)r->hit[j]);
  n += snprintf(line + n, cap - (size_t)n, r->rejected ? "], \"rejected\": true}\n" : "]}\n");
  return n;
}

int spill_trace_writer_row(spill_trace_writer *w, const spill_trace_row *r) {
  if (!w->f || w->capped) return 0;
  char line[8192];
  const int n = spill_trace_row_format(r, line, sizeof line);
  if (w->max_bytes && w->bytes + (uint64_t)n > w->max_bytes) {
    w->capped = 1;
    fflush(w->f);
    return 0;
  }
  fwrite(line, 1, (size_t)n, w->f);
  w->bytes += (uint64_t)n;
  return 1;
}

void spill_trace_writer_flush(spill_trace_writer *w) {
  if (w && w->f) fflush(w->f);
}

/* ----------------------------------------------------------- profile rows */

int spill_profile_write_row(FILE *f, const spill_profile_row *p) {
  if (!f) return 0;
  char backend[sizeof p->io_backend * 6 + 1], why[sizeof p->io_backend_why * 6 + 1];
  spill_json_escape(backend, sizeof backend, p->io_backend,
                    strnlen(p->io_backend, sizeof p->io_backend));
  spill_json_escape(why, sizeof why, p->io_backend_why,
                    strnlen(p->io_backend_why, sizeof p->io_backend_why));
  fprintf(f,
          "{\"pos\": %d, \"phase\": \"%s\", \"n_tokens\": %d, \"wall_ms\": %.3f, "
          "\"compute_ms\": {\"attention\": %.3f, \"router\": %.3f, \"expert_matmul\": %.3f, "
          "\"table_build\": %.3f, \"lm_head\": %.3f, \"other\": %.3f}, \"io_wait_ms\": %.3f, "
          "\"expert_wait_threads_ms\": %.3f, "
          "\"reads\": %llu, \"bytes_read\": %llu, \"demand_hits\": %llu, \"demand_misses\": %llu, "
          "\"spec_issued\": %llu, \"spec_used\": %llu, \"spec_wasted\": %llu, "
          "\"read_p50_ms\": %.3f, \"read_p99_ms\": %.3f, \"major_faults\": %llu, "
          "\"rss_bytes\": %llu, \"drafted\": %llu, \"accepted\": %llu, \"generated\": %llu, "
          "\"ctx_switches_voluntary\": %llu, \"ctx_switches_involuntary\": %llu, "
          "\"parallel_regions\": %llu, \"parallel_regions_moe\": %llu, "
          "\"io_backend\": \"%s\", \"io_backend_why\": \"%s\"}\n",
          p->pos, p->phase == SPILL_TRACE_PHASE_PREFILL ? "prefill" : "decode", p->n_tokens,
          p->wall_ms, p->attention_ms, p->router_ms, p->expert_matmul_ms, p->table_build_ms,
          p->lm_head_ms, p->other_ms, p->io_wait_ms, p->expert_wait_threads_ms,
          (unsigned long long)p->reads,
          (unsigned long long)p->bytes_read, (unsigned long long)p->demand_hits,
          (unsigned long long)p->demand_misses, (unsigned long long)p->spec_issued,
          (unsigned long long)p->spec_used, (unsigned long long)p->spec_wasted, p->read_p50_ms,
          p->read_p99_ms, (unsigned long long)p->major_faults, (unsigned long long)p->rss_bytes,
          (unsigned long long)p->drafted, (unsigned long long)p->accepted,
          (unsigned long long)p->generated, (unsigned long long)p->ctx_switches_voluntary,
          (unsigned long long)p->ctx_switches_involuntary,
          (unsigned long long)p->parallel_regions, (unsigned long long)p->parallel_regions_moe,
          backend, why);
  fflush(f);
  return 1;
}

static int prof_num(const cJSON *o, const char *key, const char *name, double *out, spill_err *e) {
  const cJSON *it = cJSON_GetObjectItemCaseSensitive(o, key);
  SPILL_FAIL_IF(e, !cJSON_IsNumber(it) || !isfinite(it->valuedouble) || it->valuedouble < 0,
                SPILL_E_TRACE, "%s: %s: expected a number >= 0", name, key);
  *out = it->valuedouble;
  return SPILL_OK;
}

static int prof_u64(const cJSON *o, const char *key, const char *name, uint64_t *out,
                    spill_err *e) {
  double v;
  SPILL_TRY(prof_num(o, key, name, &v, e));
  SPILL_FAIL_IF(e, v != floor(v) || v > 9007199254740992.0, SPILL_E_TRACE,
                "%s: %s: expected an integer", name, key);
  *out = (uint64_t)v;
  return SPILL_OK;
}

int spill_profile_parse_row(const char *buf, size_t len, const char *name, spill_profile_row *p,
                            spill_err *e) {
  memset(p, 0, sizeof *p);
  if (!name) name = "profile";
  cJSON *o = NULL;
  int rc = spill_json_parse(buf, len, name, SPILL_E_TRACE, &o, e);
  if (rc < 0) goto out;
  if (!cJSON_IsObject(o)) {
    rc = spill_err_set(e, SPILL_E_TRACE, "%s: expected a JSON object", name);
    goto out;
  }
  const cJSON *ph = cJSON_GetObjectItemCaseSensitive(o, "phase");
  const cJSON *cm = cJSON_GetObjectItemCaseSensitive(o, "compute_ms");
  if (!cJSON_IsString(ph) ||
      (strcmp(ph->valuestring, "decode") && strcmp(ph->valuestring, "prefill"))) {
    rc = spill_err_set(e, SPILL_E_TRACE, "%s: phase: expected \"decode\" or \"prefill\"", name);
    goto out;
  }
  p->phase = strcmp(ph->valuestring, "prefill") ? SPILL_TRACE_PHASE_DECODE
                                                 : SPILL_TRACE_PHASE_PREFILL;
  if (!cJSON_IsObject(cm)) {
    rc = spill_err_set(e, SPILL_E_TRACE, "%s: compute_ms: expected an object", name);
    goto out;
  }
  uint64_t pos, n_tokens;
  if ((rc = prof_u64(o, "pos", name, &pos, e)) < 0 ||
      (rc = prof_u64(o, "n_tokens", name, &n_tokens, e)) < 0)
    goto out;
  if (pos > 2147483647u || n_tokens > 2147483647u) {
    rc = spill_err_set(e, SPILL_E_TRACE, "%s: pos or n_tokens beyond 2^31", name);
    goto out;
  }
  p->pos = (int)pos;
  p->n_tokens = (int)n_tokens;
  if ((rc = prof_num(o, "wall_ms", name, &p->wall_ms, e)) < 0 ||
      (rc = prof_num(cm, "attention", name, &p->attention_ms, e)) < 0 ||
      (rc = prof_num(cm, "router", name, &p->router_ms, e)) < 0 ||
      (rc = prof_num(cm, "expert_matmul", name, &p->expert_matmul_ms, e)) < 0 ||
      (rc = prof_num(cm, "table_build", name, &p->table_build_ms, e)) < 0 ||
      (rc = prof_num(cm, "lm_head", name, &p->lm_head_ms, e)) < 0 ||
      (rc = prof_num(cm, "other", name, &p->other_ms, e)) < 0 ||
      (rc = prof_num(o, "io_wait_ms", name, &p->io_wait_ms, e)) < 0 ||
      (rc = prof_u64(o, "reads", name, &p->reads, e)) < 0 ||
      (rc = prof_u64(o, "bytes_read", name, &p->bytes_read, e)) < 0 ||
      (rc = prof_u64(o, "demand_hits", name, &p->demand_hits, e)) < 0 ||
      (rc = prof_u64(o, "demand_misses", name, &p->demand_misses, e)) < 0 ||
      (rc = prof_u64(o, "spec_issued", name, &p->spec_issued, e)) < 0 ||
      (rc = prof_u64(o, "spec_used", name, &p->spec_used, e)) < 0 ||
      (rc = prof_u64(o, "spec_wasted", name, &p->spec_wasted, e)) < 0 ||
      (rc = prof_num(o, "read_p50_ms", name, &p->read_p50_ms, e)) < 0 ||
      (rc = prof_num(o, "read_p99_ms", name, &p->read_p99_ms, e)) < 0 ||
      (rc = prof_u64(o, "major_faults", name, &p->major_faults, e)) < 0 ||
      (rc = prof_u64(o, "rss_bytes", name, &p->rss_bytes, e)) < 0)
    goto out;
  /* the draft counters (optional: files written before drafts lack them) */
  p->generated = p->phase == SPILL_TRACE_PHASE_DECODE ? (uint64_t)p->n_tokens : 0;
  if ((cJSON_HasObjectItem(o, "drafted") &&
       (rc = prof_u64(o, "drafted", name, &p->drafted, e)) < 0) ||
      (cJSON_HasObjectItem(o, "accepted") &&
       (rc = prof_u64(o, "accepted", name, &p->accepted, e)) < 0) ||
      (cJSON_HasObjectItem(o, "generated") &&
       (rc = prof_u64(o, "generated", name, &p->generated, e)) < 0))
    goto out;
  /* the threads' wait, context switches and the read backend (optional:
   * older files lack them) */
  if (cJSON_HasObjectItem(o, "expert_wait_threads_ms") &&
      (rc = prof_num(o, "expert_wait_threads_ms", name, &p->expert_wait_threads_ms, e)) < 0)
    goto out;
  if ((cJSON_HasObjectItem(o, "ctx_switches_voluntary") &&
       (rc = prof_u64(o, "ctx_switches_voluntary", name, &p->ctx_switches_voluntary, e)) < 0) ||
      (cJSON_HasObjectItem(o, "ctx_switches_involuntary") &&
       (rc = prof_u64(o, "ctx_switches_involuntary", name, &p->ctx_switches_involuntary, e)) <
           0))
    goto out;
  if ((cJSON_HasObjectItem(o, "parallel_regions") &&
       (rc = prof_u64(o, "parallel_regions", name, &p->parallel_regions, e)) < 0) ||
      (cJSON_HasObjectItem(o, "parallel_regions_moe") &&
       (rc = prof_u64(o, "parallel_regions_moe", name, &p->parallel_regions_moe, e)) < 0))
    goto out;
  if (p->parallel_regions_moe > p->parallel_regions) {
    rc = spill_err_set(e, SPILL_E_TRACE, "%s: parallel_regions_moe above parallel_regions", name);
    goto out;
  }
  if (cJSON_HasObjectItem(o, "io_backend") || cJSON_HasObjectItem(o, "io_backend_why")) {
    const cJSON *b = cJSON_GetObjectItemCaseSensitive(o, "io_backend");
    const cJSON *w = cJSON_GetObjectItemCaseSensitive(o, "io_backend_why");
    if (!cJSON_IsString(b) || (strcmp(b->valuestring, "pread") && strcmp(b->valuestring, "uring"))) {
      rc = spill_err_set(e, SPILL_E_TRACE, "%s: io_backend: expected \"pread\" or \"uring\"", name);
      goto out;
    }
    if (!cJSON_IsString(w) || strlen(w->valuestring) >= sizeof p->io_backend_why) {
      rc = spill_err_set(e, SPILL_E_TRACE, "%s: io_backend_why: expected a string under %zu bytes",
                         name, sizeof p->io_backend_why);
      goto out;
    }
    snprintf(p->io_backend, sizeof p->io_backend, "%s", b->valuestring);
    snprintf(p->io_backend_why, sizeof p->io_backend_why, "%s", w->valuestring);
  }
  if (p->accepted > p->drafted || p->generated > (uint64_t)p->n_tokens) {
    rc = spill_err_set(e, SPILL_E_TRACE, "%s: accepted above drafted or generated above n_tokens",
                       name);
    goto out;
  }
out:
  cJSON_Delete(o);
  return rc;
}
