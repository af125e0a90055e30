/* harness/exp_peer.h: peer arms, another engine run by the experiment
 * runner on the same weights (docs/PEERS.md, docs/EXPERIMENTS.md).
 *
 * The one peer is llama.cpp through our tools/peers/llama_peer (built by
 * `./lab peers` into a machine-wide cache, never by Bazel). A peer run is a
 * child process measured from outside: wall times and tokens from its JSON
 * line, peak RSS and page faults from wait4's rusage, bytes read from the
 * disk from /proc/PID/io read_bytes (read while the child is a zombie, so
 * the whole life of the process is counted). The library never prints: the
 * child's stderr goes to a file.
 */
#ifndef SPILL_HARNESS_EXP_PEER_H
#define SPILL_HARNESS_EXP_PEER_H

#include <stddef.h>
#include <stdint.h>

#include "engine/spill.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The llama.cpp build `./lab peers` makes (keep in step with ./lab's
 * PEER_LLAMA_NPM and PEER_LLAMA_COMMIT). */
#define SPILL_PEER_LLAMA_KEY "llama.cpp-3.22.1-de3ff81"

/* The llama_peer executable: $SPILL_LLAMA_PEER, else
 * ${SPILL_PEER_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/spill/peers}/KEY/bin/llama_peer.
 * SPILL_E_CONFIG naming `./lab peers` when it is not an executable file. */
int spill_exp_peer_path(char *buf, size_t n, spill_err *e);

/* Checks that container was imported from gguf (its import provenance):
 * DST/import.journal's identity line names gguf's real path and size, the
 * manifest's generator is `spill import` of a GGUF, and gguf was not
 * modified after the import finished (mtime not after manifest.json's).
 * SPILL_E_CONFIG with the difference otherwise. */
int spill_exp_peer_provenance(const char *container, const char *gguf, spill_err *e);

typedef struct spill_exp_peer_req {
  const char *exe;      /* llama_peer */
  const char *gguf;
  const char *load;     /* mmap | none | mlock */
  int threads, batch, decode_tokens;
  int repack;           /* 0: --no-repack */
  const int *prompt;    /* token ids */
  int n_prompt;
  const char *ids_file; /* where the ids are written for the child (@FILE) */
  const char *log_file; /* the child's stderr */
  volatile int *stop;   /* non-zero: kill the child, SPILL_E_INTERRUPTED */
  int repeat;           /* 0: one request, totals only; >= 1: that many requests in the
                         * process (--repeat), each one's figures in result.requests */
} spill_exp_peer_req;

/* One request of a --repeat run (the bench workload's cold and warm). */
#define SPILL_EXP_PEER_MAX_REQUESTS 2
typedef struct spill_exp_peer_request {
  double prefill_s, decode_s;
  uint64_t read_bytes_prefill, read_bytes_decode, major_faults, peak_rss_bytes;
  uint64_t tokens_hash; /* FNV-1a 64 of its generated ids */
} spill_exp_peer_request;

typedef struct spill_exp_peer_result {
  double load_s, prefill_s, decode_s, wall_s;
  int n_prefill, n_decode;
  int *tokens;          /* malloc'd generated ids (n_decode) */
  uint64_t peak_rss_bytes, major_faults, minor_faults, read_bytes;
  double user_s, sys_s;
  char phases[512];     /* the child's per-phase counters (JSON object text) */
  int n_requests;       /* req.repeat's requests, measured by the child */
  spill_exp_peer_request requests[SPILL_EXP_PEER_MAX_REQUESTS];
} spill_exp_peer_result;

/* Runs one `llama_peer bench` and measures it (with repeat >= 1, each
 * request's own figures from the child's "requests"). Frees nothing of req. */
int spill_exp_peer_run(const spill_exp_peer_req *req, spill_exp_peer_result *res, spill_err *e);
void spill_exp_peer_result_free(spill_exp_peer_result *res);

/* Drops a file's (or every regular file of a directory's) pages from the
 * page cache: posix_fadvise DONTNEED after fdatasync. Best effort. */
void spill_exp_evict_path(const char *path);

#ifdef __cplusplus
}
#endif
#endif
