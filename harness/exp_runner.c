/* harness/exp_runner.c: expands a config into runs and executes them.
 *
 * Soundness rules (docs/EXPERIMENTS.md): every measured run starts from an
 * empty expert cache with reset counters (cold also evicts the container from
 * the page cache), so neither the order of arms nor the previous run leaks
 * into a row; the engine is reused only while knobs the engine can change in
 * place differ, and the budget only ever grows inside one engine; tokens of
 * `exact` arms are compared with the control arm's in the same cell and any
 * difference stops the experiment (SPILL_E_INTERNAL) after recording the
 * offending row. Rows are appended one fsynced line at a time.
 */
#define _GNU_SOURCE
#include "harness/exp_runner.h"

#include <cjson/cJSON.h>
#include <dirent.h>
#include <stdarg.h>
#include <errno.h>
#include <fcntl.h>
#include <malloc.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <signal.h>
#include <sys/file.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "harness/bench_workload.h"
#include "harness/emulate_ram.h"
#include "harness/exp_bench_rows.h"
#include "harness/machine_profile.h"
#include "harness/exp_env.h"
#include "harness/exp_files.h"
#include "harness/exp_metrics.h"
#include "harness/exp_peer.h"
#include "harness/exp_report.h"
#include "harness/exp_rows.h"
#include "harness/refuted.h"
#include "harness/stats.h"
#include "research/gen/spill_gen.h"

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec + ts.tv_nsec / 1e9;
}


void spill_exp_model_dir(const spill_exp_config *cfg, const char *cache_root, char *buf,
                         size_t n) {
  if (cfg->model_recipe) snprintf(buf, n, "%s/%s", cache_root ? cache_root : "cache/models", cfg->recipe_hash);
  else snprintf(buf, n, "%s", cfg->model_path);
}

static int exists(const char *p) {
  struct stat st;
  return stat(p, &st) == 0;
}

typedef struct runner {
  const spill_exp_config *cfg;
  const spill_exp_opts *o;
  spill_err *e;
  char dir[SPILL_PATH_MAX];
  char rows_file[SPILL_PATH_MAX];
  char model[SPILL_PATH_MAX];
  spill_engine *eng;
  spill_config cur;  /* config the engine runs with (live knobs as applied) */
  uint64_t cur_budget;
  int *prompt;
  int n_prompt;
  int *bench_toks; /* workload.bench: cfg->bench_pp ids per prompt (spill's tokenizer) */
  /* done keys and token hashes of finished runs */
  char **done_keys;
  uint64_t *done_hash;
  int *done_cell, *done_arm;
  int n_done, cap_done;
  spill_ramlock lock;
  uint64_t lock_emulate; /* the emulated RAM the running lock serves (0 = none) */
  spill_machine mach;    /* the machine profile, when the config has one */
  spill_machine_counters mach_at_run; /* its counters when the current run started */
  char mach_reaped[4096]; /* what this start cleaned up after killed runners ("" = nothing) */
  char peer_exe[SPILL_PATH_MAX];   /* llama_peer, when the config has peer arms */
  int dir_lock_fd;   /* flock'ed ROWS.lock (one writer per rows file), -1 = none */
  int created_dir;   /* setup_dir made R->dir (not a resume) */
  uint64_t ram_total;
  double t0;
  int measured_now; /* measured runs done in this process */
  double t_run;      /* start of the current measured run */
  double measured_s; /* ... and their wall time (the ETA ignores model builds) */
  /* greedy draft source (arms with "drafts_from": "greedy"): the prompt and
   * the model's greedy continuation of it, for (greedy_cell, greedy_arm) */
  int *greedy_seq;
  int greedy_n, greedy_cell, greedy_arm;
  /* machine-profile runs run in a child (run_in_child): there finish_row
   * hands the row to the runner through this pipe (-1 = in the runner) */
  int child_fd;
  uint8_t *done_oom; /* per done run: OOM-killed (no tokens to compare) */
} runner;

static void progress(runner *R, const char *phase, const char *key, int done, int total,
                     double tok_s) {
  if (!R->o->progress) return;
  spill_exp_progress p = {phase, key, done, total, now_s() - R->t0, 0, tok_s};
  if (R->measured_now > 0 && done < total) {
    /* the run just finished is not in measured_s yet: do_run reports first */
    double per = (R->measured_s + (now_s() - R->t_run)) / R->measured_now;
    p.eta_s = per * (total - done);
  }
  R->o->progress(R->o->user, &p);
}

static void gen_progress(void *user, uint64_t done, uint64_t total) {
  runner *R = user;
  if (R->o->progress) {
    spill_exp_progress p = {"model", NULL, (int)(done >> 20), (int)(total >> 20),
                            now_s() - R->t0, 0, 0};
    R->o->progress(R->o->user, &p);
  }
}

/* Generated models are built into a temporary directory and renamed, so a
 * cache directory with a manifest is always complete. */
/* Removes a generator's temporary directory (flat: container files only). */
static void remove_tmp_dir(const char *dir) {
  DIR *d = opendir(dir);
  if (d) {
    struct dirent *ent;
    char p[SPILL_PATH_MAX];
    while ((ent = readdir(d)))
      if (strcmp(ent->d_name, ".") && strcmp(ent->d_name, "..")) {
        snprintf(p, sizeof p, "%s/%s", dir, ent->d_name);
        unlink(p);
      }
    closedir(d);
  }
  rmdir(dir);
}

/* Removes MODEL.tmp.<pid> directories left by generators that died (killed
 * mid-generation). Called with the recipe lock held, so no live process is
 * generating this recipe: a tmp directory whose PID is gone is garbage, and
 * one whose PID lives (reused by another process) is too, as its generator
 * would hold the lock. */
static void clean_stale_tmps(const char *model) {
  char parent[SPILL_PATH_MAX], base[512];
  snprintf(parent, sizeof parent, "%s", model);
  char *slash = strrchr(parent, '/');
  if (slash) {
    snprintf(base, sizeof base, "%s", slash + 1);
    *slash = 0;
  } else {
    snprintf(base, sizeof base, "%s", parent);
    snprintf(parent, sizeof parent, ".");
  }
  size_t bl = strlen(base);
  DIR *d = opendir(parent);
  if (!d) return;
  struct dirent *ent;
  while ((ent = readdir(d))) {
    if (strncmp(ent->d_name, base, bl) || strncmp(ent->d_name + bl, ".tmp.", 5)) continue;
    char p[SPILL_PATH_MAX];
    snprintf(p, sizeof p, "%s/%s", parent, ent->d_name);
    remove_tmp_dir(p);
  }
  closedir(d);
}

/* The generation request of cfg's model recipe (strings borrowed from cfg):
 * what ensure_model generates and what preflight plans. */
static int recipe_request(const spill_exp_config *c, spill_gen_request *req, spill_err *e) {
  memset(req, 0, sizeof *req);
  req->preset = c->recipe_preset;
  req->ram_bytes = c->recipe_ram;
  req->disk_bytes = c->recipe_disk;
  req->seed = c->recipe_seed;
  req->attn_mix = c->recipe_attn_mix;
  req->trunk_dtype = c->recipe_trunk_dtype;
  req->expert_dtype = c->recipe_expert_dtype;
  if (c->recipe_like_trace[0]) return spill_gen_request_like_trace(req, c->recipe_like_trace, e);
  return SPILL_OK;
}

static int ensure_model(runner *R) {
  const spill_exp_config *c = R->cfg;
  spill_exp_model_dir(c, R->o->cache_root, R->model, sizeof R->model);
  char man[SPILL_PATH_MAX];
  snprintf(man, sizeof man, "%s/manifest.json", R->model);
  if (exists(man)) return SPILL_OK;
  if (!c->model_recipe) return spill_err_set(R->e, SPILL_E_IO, "model %s: no manifest.json", R->model);
  SPILL_TRY(spill_exp_mkdirs(R->o->cache_root ? R->o->cache_root : "cache/models", R->e));
  /* One generator per recipe: MODEL.lock (flock, released by the kernel on
   * death). A second experiment wanting the same recipe waits, then reuses
   * what the first generated. */
  char lk[SPILL_PATH_MAX];
  SPILL_TRY(spill_path_fmt(lk, sizeof lk, R->e, "%s.lock", R->model));
  int lfd;
  SPILL_TRY(spill_file_open_write(lk, O_RDWR | O_CREAT, 0644, &lfd, R->e));
  if (flock(lfd, LOCK_EX | LOCK_NB) < 0) {
    progress(R, "model", "waiting for another process generating this model", 0, 0, 0);
    int r;
    while ((r = flock(lfd, LOCK_EX)) < 0 && errno == EINTR)
      if (R->o->stop && *R->o->stop) break;
    if (r < 0) {
      int err = errno;
      close(lfd);
      if (R->o->stop && *R->o->stop)
        return spill_err_set(R->e, SPILL_E_INTERRUPTED, "stopped waiting for %s", lk);
      return spill_err_set(R->e, SPILL_E_IO, "%s: %s", lk, strerror(err));
    }
  }
  if (exists(man)) {
    close(lfd);
    return SPILL_OK;
  }
  clean_stale_tmps(R->model);
  char tmp[SPILL_PATH_MAX];
  snprintf(tmp, sizeof tmp, "%s.tmp.%ld", R->model, (long)getpid());
  spill_gen_request req;
  int rc = recipe_request(c, &req, R->e);
  if (rc == SPILL_OK) rc = spill_gen(tmp, &req, gen_progress, R, R->e);
  if (rc == SPILL_OK && exists(R->model)) remove_tmp_dir(R->model); /* a partial leftover */
  if (rc == SPILL_OK && rename(tmp, R->model) < 0)
    rc = spill_err_set(R->e, SPILL_E_IO, "rename %s -> %s: %s", tmp, R->model, strerror(errno));
  if (rc < 0) remove_tmp_dir(tmp);
  close(lfd);
  return rc;
}

static int copy_file(const char *src, const char *dst, spill_err *e) {
  char part[SPILL_PATH_MAX];
  /* tasks may copy at once */
  SPILL_TRY(spill_path_fmt(part, sizeof part, e, "%s.part.%ld", dst, (long)getpid()));
  FILE *in = spill_exp_fopen_read(src, e), *out = in ? spill_exp_fopen_write(part, e) : NULL;
  if (!in || !out) {
    if (in) fclose(in);
    spill_err_prefix(e, "copy %s -> %s", src, part);
    return SPILL_E_IO;
  }
  static char buf[1 << 20];
  size_t r;
  int bad = 0;
  while ((r = fread(buf, 1, sizeof buf, in)) > 0)
    if (fwrite(buf, 1, r, out) != r) bad = 1;
  bad |= ferror(in);
  fclose(in);
  bad |= fflush(out) != 0 || fsync(fileno(out)) != 0;
  bad |= fclose(out) != 0;
  if (bad || rename(part, dst) < 0) {
    unlink(part);
    return spill_err_set(e, SPILL_E_IO, "copy %s -> %s failed", src, dst);
  }
  return SPILL_OK;
}

/* storage_path: copy the container there once (files whose size matches are
 * kept; manifest.json last, so a partial copy has no manifest). */
static int ensure_storage_copy(runner *R) {
  const char *sp = R->cfg->storage_path;
  if (!sp[0]) return SPILL_OK;
  spill_info info;
  SPILL_TRY(spill_info_read(R->model, &info, R->e));
  char dst[SPILL_PATH_MAX];
  snprintf(dst, sizeof dst, "%s/%s", sp, info.name);
  SPILL_TRY(spill_exp_mkdirs(dst, R->e));
  DIR *d = opendir(R->model);
  if (!d) return spill_err_set(R->e, SPILL_E_IO, "%s: %s", R->model, strerror(errno));
  struct dirent *ent;
  int rc = SPILL_OK;
  while (rc == SPILL_OK && (ent = readdir(d))) {
    if (ent->d_name[0] == '.' || !strcmp(ent->d_name, "manifest.json")) continue;
    char s[SPILL_PATH_MAX], t[SPILL_PATH_MAX];
    snprintf(s, sizeof s, "%s/%s", R->model, ent->d_name);
    snprintf(t, sizeof t, "%s/%s", dst, ent->d_name);
    struct stat a, b;
    if (stat(s, &a) < 0 || !S_ISREG(a.st_mode)) continue;
    if (stat(t, &b) == 0 && b.st_size == a.st_size) continue;
    progress(R, "copy", ent->d_name, 0, 0, 0);
    rc = copy_file(s, t, R->e);
  }
  closedir(d);
  SPILL_TRY(rc);
  char s[SPILL_PATH_MAX], t[SPILL_PATH_MAX];
  snprintf(s, sizeof s, "%s/manifest.json", R->model);
  snprintf(t, sizeof t, "%s/manifest.json", dst);
  SPILL_TRY(copy_file(s, t, R->e));
  snprintf(R->model, sizeof R->model, "%s", dst);
  return SPILL_OK;
}

/* One writer per rows file (docs/RELIABILITY.md): an exclusive flock on
 * ROWS.lock (DIR/runs.jsonl.lock; a Slurm task's own rows file has its
 * own), which the kernel releases when the holder dies (so a killed run
 * never leaves a stale lock). The file holds the holder's PID for the second
 * writer's message; flock, not the PID, is the lock. */
static int lock_rows(runner *R) {
  char p[SPILL_PATH_MAX];
  SPILL_TRY(spill_path_fmt(p, sizeof p, R->e, "%s.lock", R->rows_file));
  int fd; /* never through a symlink: a planted link would have it truncated */
  int orc = spill_file_open_write(p, O_RDWR | O_CREAT, 0644, &fd, R->e);
  if (orc < 0) {
    spill_err_prefix(R->e, "cannot open the results lock");
    return orc;
  }
  if (flock(fd, LOCK_EX | LOCK_NB) < 0) {
    int err = errno;
    char buf[32] = "";
    ssize_t n = pread(fd, buf, sizeof buf - 1, 0);
    close(fd);
    long pid = n > 0 ? strtol(buf, NULL, 10) : 0;
    if (err != EWOULDBLOCK)
      return spill_err_set(R->e, SPILL_E_IO, "%s: cannot lock: %s", p, strerror(err));
    if (pid > 0)
      return spill_err_set(R->e, SPILL_E_IO,
                           "%s is being written by process %ld (it holds %s); a results "
                           "directory has one writer: wait for it to finish or stop it",
                           R->rows_file, pid, p);
    return spill_err_set(R->e, SPILL_E_IO,
                         "%s is being written by another process (it holds %s); a results "
                         "directory has one writer", R->rows_file, p);
  }
  char pid[32];
  int k = snprintf(pid, sizeof pid, "%ld\n", (long)getpid());
  if (ftruncate(fd, 0) != 0 || pwrite(fd, pid, (size_t)k, 0) != k) {
    int err = errno;
    close(fd);
    return spill_err_set(R->e, SPILL_E_IO, "%s: cannot write: %s", p, strerror(err));
  }
  R->dir_lock_fd = fd;
  return SPILL_OK;
}

/* DIR/interrupted.json records a stop (SIGINT/SIGTERM through o->stop): the
 * run that was cut (its row is not written), rows done and planned. A later
 * run of the directory that finishes every planned run removes it. */
static void mark_interrupted(runner *R, int rc, const char *key, int planned) {
  if (!R->dir[0] || R->dir_lock_fd < 0 || R->o->prepare_only) return;
  char p[SPILL_PATH_MAX];
  snprintf(p, sizeof p, "%s/interrupted.json", R->dir);
  if (rc == SPILL_OK && R->n_done == planned) {
    unlink(p);
    return;
  }
  if (rc != SPILL_E_INTERRUPTED) return;
  cJSON *j = cJSON_CreateObject();
  char ts[32];
  time_t now = time(NULL);
  struct tm tm;
  gmtime_r(&now, &tm);
  strftime(ts, sizeof ts, "%Y-%m-%dT%H:%M:%SZ", &tm);
  cJSON_AddStringToObject(j, "utc", ts);
  cJSON_AddNumberToObject(j, "pid", (double)getpid());
  cJSON_AddStringToObject(j, "interrupted_run", key ? key : "");
  cJSON_AddNumberToObject(j, "rows_done", R->n_done);
  cJSON_AddNumberToObject(j, "rows_planned", planned);
  cJSON_AddStringToObject(j, "rows_file", R->rows_file);
  char *text = cJSON_Print(j);
  cJSON_Delete(j);
  spill_err ig = {0};
  if (text) (void)spill_write_file_atomic(p, text, strlen(text), &ig);
  free(text);
}

/* The JSON path that sets knob `key` for (cell, arm): the arm, the sweep or
 * base, in the order spill_exp_config_engine applies them. */
static void knob_path(const spill_exp_config *cfg, int arm, const char *key, char *buf, size_t n) {
  for (int k = 0; k < cfg->arms[arm].n_knobs; k++)
    if (!strcmp(cfg->arms[arm].knobs[k].key, key)) {
      snprintf(buf, n, "arms[%d].set.%s", arm, key);
      return;
    }
  for (int a = 0; a < cfg->n_axes; a++)
    if (!strcmp(cfg->axes[a].key, key)) {
      snprintf(buf, n, "sweep.%s", key);
      return;
    }
  for (int k = 0; k < cfg->n_base; k++)
    if (!strcmp(cfg->base[k].key, key)) {
      snprintf(buf, n, "base.%s", key);
      return;
    }
  snprintf(buf, n, "%s (default)", key);
}

/* Every emulated RAM of the config is safe (spill_ramlock_plan), refused
 * before anything runs. */
static int check_emulation(const spill_exp_config *cfg, spill_err *e) {
  const char *src = cfg->source[0] ? cfg->source : "config";
  int swept = cfg->n_axes && !strcmp(cfg->axes[0].key, SPILL_EXP_AXIS_EMULATE_RAM);
  for (int c = 0; c < spill_exp_config_n_cells(cfg); c++) {
    spill_machine_spec ms;
    if (spill_exp_config_machine(cfg, c, &ms.ram, &ms.wired, &ms.swap, &ms.swappiness)) {
      int rc = spill_machine_check(&ms, e);
      if (rc < 0) {
        spill_err_prefix(e, "%s: machine", src);
        return rc;
      }
    }
    uint64_t ram = spill_exp_config_emulate_ram(cfg, c), lock_bytes;
    if (!ram) continue;
    int rc = spill_ramlock_plan(ram, &lock_bytes, e);
    if (rc < 0) {
      spill_err_prefix(e, "%s: %s", src, swept ? "sweep.emulate_ram" : "machine.emulate_ram");
      return rc;
    }
  }
  return SPILL_OK;
}

/* Peer arms: the peer is built and model_gguf holds the container's weights. */
static int check_peer(const spill_exp_config *cfg, const char *model, char *exe, size_t n,
                      spill_err *e) {
  const char *src = cfg->source[0] ? cfg->source : "config";
  int rc = spill_exp_peer_path(exe, n, e);
  if (rc == SPILL_OK) rc = spill_exp_peer_provenance(model, cfg->model_gguf, e);
  if (rc < 0) spill_err_prefix(e, "%s", src);
  return rc;
}

/* The model preflight judges: a container on disk, or the recipe that will
 * generate it (req: planned by spill_plan_recipe, nothing written). */
typedef struct preflight_model {
  char dir[SPILL_PATH_MAX];
  int recipe; /* 1: dir has no manifest yet; req describes what will be there */
  spill_gen_request req;
  int prompt_tokens; /* the workload's prompt in the model's tokens (with BOS) */
} preflight_model;

/* The prompt's length in tokens as the runner's spill_tokenize (add_bos)
 * gives it: the model directory's own tokenizer when it holds one (found by
 * spill_tok_locate as spill_engine_open finds it), else the byte tokenizer
 * (one token per byte, plus BOS when the model has one). */
static int preflight_prompt(const spill_exp_config *cfg, preflight_model *pm, int bos_id,
                            spill_err *e) {
  if (cfg->bench) { /* every request is cut or repeated to exactly pp tokens */
    pm->prompt_tokens = cfg->bench_pp;
    return SPILL_OK;
  }
  char p[SPILL_PATH_MAX];
  int found = pm->recipe ? 0 : spill_tok_locate(pm->dir, 0, p, sizeof p, e);
  if (found < 0) return found;
  if (found) {
    spill_tok *tok = NULL;
    SPILL_TRY(spill_tok_load(p, &tok, e));
    spill_tok_ids ids = {0};
    int rc = spill_tok_encode(tok, cfg->prompt, strlen(cfg->prompt),
                              SPILL_TOK_SPECIAL | SPILL_TOK_ADD_BOS, &ids, e);
    pm->prompt_tokens = (int)ids.n;
    spill_tok_ids_free(&ids);
    spill_tok_free(tok);
    return rc;
  }
  pm->prompt_tokens = (int)strlen(cfg->prompt) + (bos_id >= 0);
  return SPILL_OK;
}

/* The model of cfg: on disk (with its manifest) or a recipe; the peer arms'
 * binary (and, on disk, model_gguf's provenance); the prompt's tokens. */
static int preflight_open_model(const spill_exp_config *cfg, const char *cache_root,
                                const char *src, preflight_model *pm, spill_err *e) {
  char man[SPILL_PATH_MAX];
  spill_exp_model_dir(cfg, cache_root ? cache_root : "cache/models", pm->dir, sizeof pm->dir);
  snprintf(man, sizeof man, "%s/manifest.json", pm->dir);
  pm->recipe = !exists(man);
  if (pm->recipe && !cfg->model_recipe)
    return spill_err_set(e, SPILL_E_CONFIG, "%s: model: %s: no manifest.json (not a container)",
                         src, pm->dir);
  if (cfg->n_peer_arms) {
    char exe[SPILL_PATH_MAX];
    if (pm->recipe) { /* model_gguf's provenance is checked once the model exists */
      int rc = spill_exp_peer_path(exe, sizeof exe, e);
      if (rc < 0) spill_err_prefix(e, "%s", src);
      SPILL_TRY(rc);
    } else {
      SPILL_TRY(check_peer(cfg, pm->dir, exe, sizeof exe, e));
    }
  }
  int bos_id = -1;
  if (pm->recipe) {
    SPILL_TRY(recipe_request(cfg, &pm->req, e));
    spill_plan ig;
    spill_err pe = {0};
    int rc = spill_plan_recipe(&pm->req, 64, 1, 0, 0, &ig, &bos_id, &pe);
    if (rc < 0 && rc != SPILL_E_RAM_BUDGET)
      return spill_err_set(e, rc, "%s: model: the recipe cannot be planned: %s", src, pe.msg);
  } else {
    spill_info info;
    SPILL_TRY(spill_info_read(pm->dir, &info, e));
    bos_id = info.bos_id;
  }
  return preflight_prompt(cfg, pm, bos_id, e);
}

/* One (cell, arm): cache_slots vs the model's records, ctx vs the prompt's
 * tokens plus decode_tokens, the budget vs the model's floor and the machine
 * (the plan of the container, or of the recipe's model). */
static int preflight_arm(const spill_exp_config *cfg, const preflight_model *pm, const char *src,
                         int c, int a, spill_err *e) {
  char cell[200], path[128];
  spill_exp_cell_key(cfg, c, cell, sizeof cell);
  const char *arm = cfg->arms[a].name;
  spill_config sc;
  SPILL_TRY(spill_exp_config_engine(cfg, c, a, &sc, e));
  const uint64_t ram = sc.usable_ram ? sc.usable_ram : spill_exp_config_emulate_ram(cfg, c);
  spill_plan p;
  memset(&p, 0, sizeof p);
  spill_err pe = {0};
  int rc = pm->recipe ? spill_plan_recipe(&pm->req, sc.ctx, sc.threads, sc.budget_bytes, ram, &p,
                                          NULL, &pe)
                      : spill_plan_model(pm->dir, sc.ctx, sc.threads, sc.budget_bytes, ram, &p,
                                         &pe);
  if ((rc == SPILL_OK || rc == SPILL_E_RAM_BUDGET) && sc.cache_slots > 0 &&
      (uint64_t)sc.cache_slots > p.model_records) {
    knob_path(cfg, a, "cache_slots", path, sizeof path);
    return spill_err_set(e, SPILL_E_CONFIG,
                         "%s: %s: cell %s, arm %s: %lld slots, but the model has %llu "
                         "expert records", src, path, cell, arm, (long long)sc.cache_slots,
                         (unsigned long long)p.model_records);
  }
  if ((int64_t)pm->prompt_tokens + cfg->decode_tokens > (int64_t)sc.ctx) {
    knob_path(cfg, a, "ctx", path, sizeof path);
    return spill_err_set(e, SPILL_E_CONFIG,
                         "%s: %s: cell %s, arm %s: ctx %d cannot hold the prompt (%d tokens, "
                         "%s) and %d decode tokens (%s): needs %lld",
                         src, path, cell, arm, sc.ctx, pm->prompt_tokens,
                         cfg->bench ? "workload.bench.pp" : cfg->prompt_file[0] ? "workload.prompt_file"
                                                                                : "workload.prompt",
                         cfg->decode_tokens, cfg->bench ? "workload.bench.tg" : "workload.decode_tokens",
                         (long long)pm->prompt_tokens + cfg->decode_tokens);
  }
  if (rc == SPILL_E_RAM_BUDGET && sc.force_budget && p.budget >= p.floor) rc = SPILL_OK;
  if (rc < 0) {
    knob_path(cfg, a, "budget", path, sizeof path);
    return spill_err_set(e, rc == SPILL_E_RAM_BUDGET ? SPILL_E_CONFIG : rc,
                         "%s: %s: cell %s, arm %s: %s%s", src, path, cell, arm, pe.msg,
                         pm->recipe ? " (the model recipe's plan; not generated yet)" : "");
  }
  return SPILL_OK;
}

int spill_exp_preflight(const spill_exp_config *cfg, const char *cache_root, spill_err *e) {
  const char *src = cfg->source[0] ? cfg->source : "config";
  SPILL_TRY(check_emulation(cfg, e));
  preflight_model pm;
  memset(&pm, 0, sizeof pm);
  SPILL_TRY(preflight_open_model(cfg, cache_root, src, &pm, e));
  for (int c = 0; c < spill_exp_config_n_cells(cfg); c++)
    for (int a = 0; a < cfg->n_arms; a++)
      if (!cfg->arms[a].peer.name[0]) /* peers: checked in preflight_open_model */
        SPILL_TRY(preflight_arm(cfg, &pm, src, c, a, e));
  return SPILL_OK;
}

static long long file_size_or_zero(const char *p) {
  struct stat st;
  return stat(p, &st) == 0 ? (long long)st.st_size : 0;
}

#define EXP_DIR_MAX SPILL_EXP_DIR_MAX

/* A results directory's path into out (EXP_DIR_MAX bytes): refused, never
 * cut, when it leaves no room for the paths of its files. */
__attribute__((format(printf, 3, 4))) static int dir_fmt(runner *R, char *out, const char *fmt,
                                                         ...) {
  va_list ap;
  va_start(ap, fmt);
  int rc = spill_path_vfmt(out, EXP_DIR_MAX, R->e, fmt, ap);
  va_end(ap);
  if (rc < 0)
    spill_err_prefix(R->e, "results directory (at most %d bytes, so that the paths of its "
                           "files fit PATH_MAX)", EXP_DIR_MAX - 1);
  return rc;
}

/* The latest results directory under parent into R->dir: 1, or 0 when there
 * is none, or an error. */
static int latest_dir(runner *R, const char *parent) {
  DIR *d = opendir(parent);
  if (!d) return 0;
  char best[256] = "";
  struct dirent *ent;
  while ((ent = readdir(d)))
    if (ent->d_name[0] != '.' && strcmp(ent->d_name, best) > 0)
      snprintf(best, sizeof best, "%s", ent->d_name);
  closedir(d);
  if (!best[0]) return 0;
  SPILL_TRY(dir_fmt(R, R->dir, "%s/%s", parent, best));
  return 1;
}

static int setup_dir(runner *R, const char *resolved) {
  const spill_exp_opts *o = R->o;
  const char *root = o->results_root ? o->results_root : "results";
  /* Every path of the results directory is DIR plus a suffix shorter than
   * 512 bytes (SPILL_EXP_DIR_MAX, exp_files.h), so a directory that leaves
   * that room makes every later path fit: the one check here, and
   * spill_path_fmt, never a cut path (a 1,219-byte --results was cut at
   * 699 into another directory). */
  char parent[EXP_DIR_MAX];
  SPILL_TRY(dir_fmt(R, parent, "%s/%s", root, R->cfg->name));
  if (o->resume) {
    int found = 1;
    if (o->resume_dir) SPILL_TRY(dir_fmt(R, R->dir, "%s", o->resume_dir));
    else SPILL_TRY(found = latest_dir(R, parent));
    if (!found)
      return spill_err_set(R->e, SPILL_E_IO, "--resume: no results under %s", parent);
    struct stat st;
    if (stat(R->dir, &st) != 0 || !S_ISDIR(st.st_mode))
      return spill_err_set(R->e, SPILL_E_IO, "--resume: %s is not a results directory", R->dir);
    char cf[SPILL_PATH_MAX], *old = NULL;
    SPILL_TRY(spill_path_fmt(cf, sizeof cf, R->e, "%s/config.json", R->dir));
    SPILL_TRY(spill_read_file(cf, 1 << 20, &old, NULL, R->e));
    int same = strcmp(old, resolved) == 0;
    free(old);
    if (!same)
      return spill_err_set(R->e, SPILL_E_CONFIG,
                           "--resume: %s was run with a different config (config.json differs); "
                           "start a new run instead", R->dir);
  } else {
    char commit[64];
    int dirty = 0;
    if (o->commit) snprintf(commit, sizeof commit, "%s", o->commit);
    else spill_exp_git_commit(commit, sizeof commit, &dirty);
    char ts[32];
    time_t t = time(NULL);
    struct tm tm;
    gmtime_r(&t, &tm);
    strftime(ts, sizeof ts, "%Y%m%dT%H%M%SZ", &tm);
    /* two starts within a second get distinct directories: mkdir of the
     * last component is the atomic claim (two processes racing on one name
     * both saw it free with a stat) */
    SPILL_TRY(spill_exp_mkdirs(parent, R->e));
    int made = 0;
    for (int i = 1; !made && i < 100; i++) {
      if (i == 1) SPILL_TRY(dir_fmt(R, R->dir, "%s/%s-%s%s", parent, ts, commit, dirty ? "-dirty" : ""));
      else SPILL_TRY(dir_fmt(R, R->dir, "%s/%s-%s%s-%d", parent, ts, commit, dirty ? "-dirty" : "", i));
      if (mkdir(R->dir, 0755) == 0) made = 1;
      else if (errno != EEXIST)
        return spill_err_set(R->e, SPILL_E_IO, "%s: cannot create: %s", R->dir, strerror(errno));
    }
    if (!made) return spill_err_set(R->e, SPILL_E_IO, "%s: 99 results directories this second", parent);
    R->created_dir = 1;
    char cf[SPILL_PATH_MAX];
    SPILL_TRY(spill_path_fmt(cf, sizeof cf, R->e, "%s/config.json", R->dir));
    SPILL_TRY(spill_write_file_atomic(cf, resolved, strlen(resolved), R->e));
  }
  if (o->rows_file) SPILL_TRY(dir_fmt(R, R->rows_file, "%s", o->rows_file));
  else SPILL_TRY(spill_path_fmt(R->rows_file, sizeof R->rows_file, R->e, "%s/runs.jsonl", R->dir));
  return lock_rows(R);
}

static int add_done(runner *R, const char *key, uint64_t hash, int cell, int arm, int oom) {
  if (R->n_done == R->cap_done) {
    int cap = R->cap_done ? R->cap_done * 2 : 64;
    uint8_t *o = realloc(R->done_oom, (size_t)cap);
    if (!o) return spill_err_set(R->e, SPILL_E_NOMEM, "no memory");
    R->done_oom = o;
    char **k = realloc(R->done_keys, (size_t)cap * sizeof *k);
    if (k) R->done_keys = k;
    uint64_t *h = realloc(R->done_hash, (size_t)cap * sizeof *h);
    if (h) R->done_hash = h;
    int *c = realloc(R->done_cell, (size_t)cap * sizeof *c);
    if (c) R->done_cell = c;
    int *a = realloc(R->done_arm, (size_t)cap * sizeof *a);
    if (a) R->done_arm = a;
    if (!k || !h || !c || !a) return spill_err_set(R->e, SPILL_E_NOMEM, "no memory");
    R->cap_done = cap;
  }
  R->done_keys[R->n_done] = strdup(key);
  R->done_hash[R->n_done] = hash;
  R->done_cell[R->n_done] = cell;
  R->done_arm[R->n_done] = arm;
  R->done_oom[R->n_done] = (uint8_t)(oom != 0);
  R->n_done++;
  return SPILL_OK;
}

static int is_done(const runner *R, const char *key) {
  for (int i = 0; i < R->n_done; i++)
    if (!strcmp(R->done_keys[i], key)) return 1;
  return 0;
}

static int load_done(runner *R) {
  char **lines;
  int n;
  SPILL_TRY(spill_exp_read_lines(R->rows_file, 1, &lines, &n, R->e));
  spill_exp_rows rows;
  int rc = spill_exp_rows_parse(R->cfg, R->rows_file, lines, n, &rows, R->e);
  spill_exp_lines_free(lines, n);
  for (int i = 0; rc == SPILL_OK && i < rows.n; i++)
    rc = add_done(R, rows.runs[rows.rows[i].plan].key, rows.rows[i].hash, rows.rows[i].cell,
                  rows.rows[i].arm, spill_exp_row_oom_killed(&rows.rows[i]));
  spill_exp_rows_free(&rows);
  return rc;
}

/* The budget (raised in place, reopened to shrink) and the per-run
 * profile/trace files are live knobs the runner handles itself (do_run). */
static int runner_handled(const char *key) {
  return !strcmp(key, "budget") || !strcmp(key, "profile") || !strcmp(key, "trace");
}

/* Knob `key` has different values in a and b (compared in text form). */
static int knob_differs(const spill_config *a, const spill_config *b, const char *key) {
  char x[4200], y[4200];
  if (spill_config_get(a, key, x, sizeof x, NULL) || spill_config_get(b, key, y, sizeof y, NULL))
    return 1;
  return strcmp(x, y) != 0;
}

/* Sets every live knob (the knob table's split) whose value differs on the
 * open engine (spill_engine_set_knob); R->cur follows. */
static int apply_live(runner *R, const spill_config *want) {
  char v[64];
  for (int i = 0; i < spill_knob_count(); i++) {
    const spill_knob *k = spill_knob_at(i);
    if (k->target != SPILL_KNOB_CONFIG || !k->live || runner_handled(k->name) ||
        !knob_differs(&R->cur, want, k->name))
      continue;
    SPILL_TRY(spill_config_get(want, k->name, v, sizeof v, R->e));
    SPILL_TRY(spill_engine_set_knob(R->eng, k->name, v, R->e));
    SPILL_TRY(spill_config_set(&R->cur, k->name, v, R->e));
  }
  return SPILL_OK;
}

/* Same engine-shaping knobs: every knob the engine fixes at open (not live
 * in the knob table) has the same value. */
static int same_shape(const spill_config *a, const spill_config *b) {
  for (int i = 0; i < spill_knob_count(); i++) {
    const spill_knob *k = spill_knob_at(i);
    if (k->target == SPILL_KNOB_CONFIG && !k->live && knob_differs(a, b, k->name)) return 0;
  }
  return 1;
}

typedef struct tok_rec {
  runner *R;
  int *tokens;
  int n, cap;
  FILE *timeline; /* tokens.jsonl: one row per decoded token */
  double last;
  const char *key; /* the run's key (paging warning) */
  int paging_told; /* the paging warning went out */
} tok_rec;

static int on_token(void *user, int token, const char *text, const spill_run_stats *ts) {
  (void)text;
  tok_rec *t = user;
  if (t->n == t->cap) {
    int cap = t->cap ? t->cap * 2 : 256;
    int *nt = realloc(t->tokens, (size_t)cap * sizeof *nt);
    if (!nt) return 1;
    t->tokens = nt;
    t->cap = cap;
  }
  t->tokens[t->n++] = token;
  if (t->timeline && ts)
    fprintf(t->timeline,
            "{\"i\": %d, \"token\": %d, \"wall_s\": %.6f, \"io_wait_s\": %.6f, "
            "\"hits\": %llu, \"misses\": %llu, \"bytes_read\": %llu, \"major_faults\": %llu}\n",
            t->n - 1, token, ts->decode_s, ts->io_wait_s, (unsigned long long)ts->decode_hits,
            (unsigned long long)ts->decode_misses, (unsigned long long)ts->bytes_read,
            (unsigned long long)ts->major_faults);
  if (t->timeline && t->R->child_fd >= 0) fflush(t->timeline); /* a killed run shows its reach */
  /* the engine saw the machine paging: say so now, not after the run
   * (progress phase "paging", done = the decode token it was detected at) */
  if (ts && ts->paging && !t->paging_told) {
    t->paging_told = 1;
    progress(t->R, "paging", t->key, ts->paging_token, (int)ts->paging_tokens, 0);
  }
  return 0;
}

static void sanitize(const char *key, char *out, size_t n) {
  size_t i = 0;
  for (; key[i] && i + 1 < n; i++) {
    char c = key[i];
    out[i] = (c == '/' || c == ',' || c == '=' || c == ' ') ? '_' : c;
  }
  out[i] = 0;
}

/* Opens without profile/trace files: do_run switches them per run. */
static int open_engine(runner *R, const spill_config *want) {
  spill_engine_close(R->eng);
  R->eng = NULL;
  spill_config c = *want;
  c.profile_path = c.trace_path = NULL;
  SPILL_TRY(spill_engine_open(R->model, &c, &R->eng, R->e));
  R->cur = c;
  R->cur_budget = spill_engine_plan(R->eng)->budget;
  if (R->cfg->bench) return SPILL_OK; /* its ids: ensure_bench_tokens */
  if (!R->prompt) {
    int cap = (int)strlen(R->cfg->prompt) + 16;
    R->prompt = malloc((size_t)cap * sizeof *R->prompt);
    if (!R->prompt) return spill_err_set(R->e, SPILL_E_NOMEM, "prompt: no memory");
    SPILL_TRY(spill_tokenize(R->eng, R->cfg->prompt, 1, R->prompt, cap, &R->n_prompt, R->e));
  }
  return SPILL_OK;
}

static cJSON *knobs_of(const spill_exp_config *cfg, int cell, int arm) {
  cJSON *o = cJSON_CreateObject();
  const spill_exp_peer *pa = &cfg->arms[arm].peer;
  if (pa->name[0]) { /* a peer: its args (threads as run: in the row's engine) */
    uint64_t ram = spill_exp_config_emulate_ram(cfg, cell);
    cJSON_AddStringToObject(o, "peer", pa->name);
    cJSON_AddStringToObject(o, "load", pa->load);
    cJSON_AddNumberToObject(o, "batch", pa->batch);
    cJSON_AddBoolToObject(o, "repack", pa->repack);
    if (ram) cJSON_AddNumberToObject(o, "emulate_ram", (double)ram);
    return o;
  }
  for (int i = 0; i < cfg->n_base; i++) cJSON_AddStringToObject(o, cfg->base[i].key, cfg->base[i].value);
  const char *v[SPILL_EXP_MAX_AXES];
  spill_exp_config_cell(cfg, cell, v);
  for (int a = 0; a < cfg->n_axes; a++) cJSON_AddStringToObject(o, cfg->axes[a].key, v[a]);
  const spill_exp_arm *am = &cfg->arms[arm];
  for (int i = 0; i < am->n_knobs; i++) {
    cJSON_DeleteItemFromObjectCaseSensitive(o, am->knobs[i].key);
    cJSON_AddStringToObject(o, am->knobs[i].key, am->knobs[i].value);
  }
  return o;
}

/* The emulated machine of a cell: the RAM lock is restarted when the cell's
 * emulated RAM differs from the running lock's. The engine is closed first
 * (its memory must not count against the next machine) and reopens at the
 * next spill run. */
/* Closes the machine profile; what it could not undo (a swap file the
 * kernel would not turn off) is said, and left for the next runner's reap. */
static void close_machine(runner *R) {
  spill_machine_close(&R->mach);
  if (R->mach.leftover[0] && R->o->progress) {
    spill_exp_progress p = {"machine", R->mach.leftover, 1, 1, now_s() - R->t0, 0, 0};
    R->o->progress(R->o->user, &p);
  }
}

static int ensure_machine(runner *R, int cell) {
  spill_machine_spec want;
  int has = spill_exp_config_machine(R->cfg, cell, &want.ram, &want.wired, &want.swap, &want.swappiness);
  if (R->mach.up && has && !memcmp(&want, &R->mach.spec, sizeof want)) return SPILL_OK;
  if (!R->mach.up && !has) return SPILL_OK;
  spill_engine_close(R->eng);
  R->eng = NULL;
  close_machine(R);
  if (!has) return SPILL_OK;
  return spill_machine_open(&want, R->dir, &R->mach, R->e);
}

static int ensure_lock(runner *R, int cell) {
  SPILL_TRY(ensure_machine(R, cell));
  uint64_t want = spill_exp_config_emulate_ram(R->cfg, cell);
  if (want && want == R->lock_emulate) {
    int rc = spill_ramlock_check(&R->lock, R->e);
    if (rc < 0) R->lock_emulate = 0;
    return rc;
  }
  if (want == R->lock_emulate) return SPILL_OK;
  spill_engine_close(R->eng);
  R->eng = NULL;
  spill_ramlock_release(&R->lock);
  memset(&R->lock, 0, sizeof R->lock);
  R->lock_emulate = 0;
  if (!want) return SPILL_OK;
  uint64_t lock_bytes = 0;
  SPILL_TRY(spill_ramlock_plan(want, &lock_bytes, R->e));
  if (lock_bytes) SPILL_TRY(spill_ramlock_start(lock_bytes, &R->lock, R->e));
  R->lock_emulate = want;
  return SPILL_OK;
}

/* Cold runs start with neither engine's files in the page cache (with peer
 * arms, the GGUF and the container are both evicted before every run). */
static int evict_cold(runner *R) {
  if (!R->cfg->cold) return SPILL_OK;
  if (R->eng) SPILL_TRY(spill_engine_evict_page_cache(R->eng, R->e));
  else spill_exp_evict_path(R->model);
  if (R->cfg->n_peer_arms) spill_exp_evict_path(R->cfg->model_gguf);
  return SPILL_OK;
}

/* A measured run's directory and files: runs/<key>/tokens.jsonl, and the
 * profile/trace paths the config asks for (spill arms). */
typedef struct run_files {
  char rundir[SPILL_PATH_MAX], profile[SPILL_PATH_MAX], trace[SPILL_PATH_MAX], timeline[SPILL_PATH_MAX];
} run_files;

/* runs/<key, sanitised>: a run's own directory. */
static void run_dir(const runner *R, const spill_exp_run *run, char *buf, size_t n) {
  char s[300];
  sanitize(run->key, s, sizeof s);
  snprintf(buf, n, "%s/runs/%s", R->dir, s);
}

static int make_run_files(runner *R, const spill_exp_run *run, int spill_arm, run_files *f) {
  memset(f, 0, sizeof *f);
  run_dir(R, run, f->rundir, sizeof f->rundir);
  SPILL_TRY(spill_exp_mkdirs(f->rundir, R->e));
  snprintf(f->timeline, sizeof f->timeline, "%s/tokens.jsonl", f->rundir);
  if (spill_arm && R->cfg->out.profile) snprintf(f->profile, sizeof f->profile, "%s/profile.jsonl", f->rundir);
  if (spill_arm && R->cfg->out.trace) snprintf(f->trace, sizeof f->trace, "%s/trace.jsonl", f->rundir);
  return SPILL_OK;
}

/* Reopens the engine when the shape changes or the budget would shrink,
 * otherwise applies live knobs and raises the budget in place. */
static int prepare_engine(runner *R, const spill_config *want, int *reopened, int *raised) {
  uint64_t want_budget = want->budget_bytes;
  *reopened = *raised = 0;
  if (!R->eng || !same_shape(&R->cur, want) || (want_budget && want_budget < R->cur_budget) ||
      (!want_budget && R->cur.budget_bytes)) {
    SPILL_TRY(open_engine(R, want));
    *reopened = 1;
    return SPILL_OK;
  }
  SPILL_TRY(apply_live(R, want));
  if (want_budget != R->cur.budget_bytes) {
    SPILL_TRY(spill_engine_set_budget(R->eng, want_budget, R->e));
    *raised = 1;
    R->cur.budget_bytes = want_budget;
    R->cur_budget = spill_engine_plan(R->eng)->budget;
  }
  return SPILL_OK;
}

/* Resets the kernel's peak-RSS mark (VmHWM) so peak_rss_bytes is this run's
 * peak, not the process's: an earlier mmap arm would otherwise show in every
 * later row. Best effort (Linux >= 4.0); failure leaves the process peak. */
static void reset_peak_rss(void) {
  int cr = open("/proc/self/clear_refs", O_WRONLY);
  if (cr >= 0) {
    ssize_t w = write(cr, "5", 1);
    (void)w;
    close(cr);
  }
}

/* The fields every row starts with: key, seq, utc, cell, arm, repeat, node,
 * knobs (a peer arm's: its peer and args), routing. */
static cJSON *row_head(runner *R, const spill_exp_run *run, int seq, char *cell_key, size_t n) {
  const spill_exp_config *cfg = R->cfg;
  cJSON *row = cJSON_CreateObject();
  cJSON_AddStringToObject(row, "key", run->key);
  cJSON_AddNumberToObject(row, "seq", seq);
  char ts[32];
  time_t now = time(NULL);
  struct tm tm;
  gmtime_r(&now, &tm);
  strftime(ts, sizeof ts, "%Y-%m-%dT%H:%M:%SZ", &tm);
  cJSON_AddStringToObject(row, "utc", ts);
  spill_exp_cell_key(cfg, run->cell, cell_key, n);
  cJSON_AddStringToObject(row, "cell", cell_key);
  cJSON_AddStringToObject(row, "arm", cfg->arms[run->arm].name);
  cJSON_AddNumberToObject(row, "repeat", run->repeat);
  if (R->o->node) cJSON_AddStringToObject(row, "node", R->o->node);
  cJSON_AddItemToObject(row, "knobs", knobs_of(cfg, run->cell, run->arm));
  cJSON_AddStringToObject(row, "routing", cfg->routing); /* "model" or "trace:FILE" */
  return row;
}

/* machine, tokens and wall_s. */
static void row_machine_tokens(runner *R, cJSON *row, int cell, int n_tokens, uint64_t hash,
                               double wall) {
  cJSON *mach = cJSON_AddObjectToObject(row, "machine");
  cJSON_AddNumberToObject(mach, "ram_bytes", (double)R->ram_total);
  cJSON_AddNumberToObject(mach, "emulate_ram_bytes", (double)spill_exp_config_emulate_ram(R->cfg, cell));
  cJSON_AddNumberToObject(mach, "locked_bytes", (double)R->lock.locked);
  if (R->mach.up) { /* the machine profile: limits as the kernel took them, counter deltas */
    const spill_machine *m = &R->mach;
    spill_machine_counters b;
    spill_err se = {0};
    cJSON *pr = cJSON_AddObjectToObject(mach, "profile");
    cJSON_AddNumberToObject(pr, "cgroup_version", m->cg_version);
    cJSON_AddNumberToObject(pr, "ram", (double)m->spec.ram);
    cJSON_AddNumberToObject(pr, "wired", (double)m->spec.wired);
    cJSON_AddNumberToObject(pr, "swap", (double)m->spec.swap);
    cJSON_AddNumberToObject(pr, "limit_ram", (double)m->limit_ram);
    cJSON_AddNumberToObject(pr, "limit_ram_swap", (double)m->limit_ram_swap);
    cJSON_AddNumberToObject(pr, "ballast_locked", (double)m->ballast.locked);
    cJSON_AddNumberToObject(pr, "swappiness", m->swappiness);
    cJSON_AddNumberToObject(pr, "swap_total", (double)m->swap_total);
    cJSON_AddStringToObject(pr, "swap_devices", m->swap_devices);
    if (spill_machine_sample(m, &b, &se) == SPILL_OK) {
      const spill_machine_counters *a = &R->mach_at_run;
      cJSON_AddNumberToObject(pr, "cgroup_major_faults", (double)(b.major_faults - a->major_faults));
      cJSON_AddNumberToObject(pr, "swap_ins", (double)(b.swap_ins - a->swap_ins));
      cJSON_AddNumberToObject(pr, "swap_outs", (double)(b.swap_outs - a->swap_outs));
      cJSON_AddNumberToObject(pr, "limit_hits", (double)(b.failcnt - a->failcnt));
      cJSON_AddNumberToObject(pr, "usage", (double)b.usage);
      cJSON_AddNumberToObject(pr, "usage_with_swap", (double)b.usage_swap);
    }
  }
  cJSON *tk = cJSON_AddObjectToObject(row, "tokens");
  cJSON_AddNumberToObject(tk, "n", n_tokens);
  char hx[20];
  snprintf(hx, sizeof hx, "%016llx", (unsigned long long)hash);
  cJSON_AddStringToObject(tk, "hash", hx);
  cJSON_AddNumberToObject(row, "wall_s", wall);
}

/* A run's child tells the runner how it ended, one message on the pipe:
 * 'R' HASH TOK_S ROW (a finished row) or 'E' CODE MESSAGE (an error). */
static int child_send(runner *R, char kind, uint64_t hash, double num, const char *text) {
  size_t n = strlen(text) + 64;
  char *msg = malloc(n);
  if (!msg) return spill_err_set(R->e, SPILL_E_NOMEM, "run child: no memory");
  int len = snprintf(msg, n, "%c %016llx %.17g\n%s", kind, (unsigned long long)hash, num, text);
  int rc = SPILL_OK;
  for (int off = 0; off < len;) {
    ssize_t w = write(R->child_fd, msg + off, (size_t)(len - off));
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) {
      rc = spill_err_set(R->e, SPILL_E_IO, "run child: writing to the runner: %s", strerror(errno));
      break;
    }
    off += (int)w;
  }
  free(msg);
  return rc;
}

/* Appends the row, records the run as done and checks exactness: every
 * exact arm and the control produce one token sequence per cell (greedy
 * decoding; placement never changes numerics). Takes the row. */
static int finish_row(runner *R, const spill_exp_run *run, cJSON *row, uint64_t hash,
                      const char *cell_key, double tok_s) {
  const spill_exp_config *cfg = R->cfg;
  const cJSON *oc = cJSON_GetObjectItemCaseSensitive(row, "outcome");
  const int oom = cJSON_IsString(oc) && !strcmp(oc->valuestring, SPILL_EXP_OUTCOME_OOM);
  char *line = cJSON_PrintUnformatted(row);
  cJSON_Delete(row);
  if (!line) return spill_err_set(R->e, SPILL_E_NOMEM, "row: no memory");
  if (R->child_fd >= 0) { /* in a run's child: the runner appends it */
    int rc = child_send(R, 'R', hash, tok_s, line);
    free(line);
    return rc;
  }
  /* a row is recorded only while the cell's RAM is still emulated: the lock's
   * helper may have been killed during the run (the OOM killer picks it) */
  int rc = spill_ramlock_check(&R->lock, R->e);
  if (rc < 0) {
    free(line);
    R->lock_emulate = 0; /* the next run of a cell with emulated RAM locks again */
    spill_err_prefix(R->e, "run %s, not recorded (continue with --resume once the memory is free)",
                     run->key);
    return rc;
  }
  rc = spill_exp_append_line(R->rows_file, line, R->e);
  free(line);
  SPILL_TRY(rc);
  SPILL_TRY(add_done(R, run->key, hash, run->cell, run->arm, oom));
  R->measured_now++;
  const spill_exp_arm *am = &cfg->arms[run->arm];
  if (!oom && (am->exact || run->arm == 0)) {
    for (int i = 0; i < R->n_done - 1; i++) {
      if (R->done_cell[i] != run->cell || R->done_oom[i]) continue;
      int other = R->done_arm[i];
      if (other != 0 && !cfg->arms[other].exact) continue;
      if (R->done_hash[i] != hash)
        return spill_err_set(R->e, SPILL_E_INTERNAL,
                             "exactness violated in cell %s: run %s produced tokens %016llx but "
                             "run %s produced %016llx (arms marked exact must produce the "
                             "control arm's tokens)",
                             cell_key, run->key, (unsigned long long)hash, R->done_keys[i],
                             (unsigned long long)R->done_hash[i]);
    }
  }
  progress(R, "run", run->key, R->n_done, cfg->repeats * cfg->n_arms * spill_exp_config_n_cells(cfg),
           tok_s);
  return SPILL_OK;
}

/* The "engine" object of a spill run's row. */
static void row_engine(runner *R, cJSON *row, int reopened, int raised, const spill_run_stats *st) {
  const spill_plan *plan = spill_engine_plan(R->eng);
  cJSON *eng = cJSON_AddObjectToObject(row, "engine");
  cJSON_AddBoolToObject(eng, "reopened", reopened);
  cJSON_AddBoolToObject(eng, "budget_raised", raised);
  cJSON_AddNumberToObject(eng, "budget_bytes", (double)plan->budget);
  cJSON_AddNumberToObject(eng, "floor_bytes", (double)plan->floor);
  /* the slots the cache really has: the cache_slots knob overrides the plan's */
  uint64_t slots = R->cur.storage == SPILL_STORAGE_MMAP ? 0
                   : R->cur.cache_slots >= 0         ? (uint64_t)R->cur.cache_slots
                                                     : plan->cache_slots;
  cJSON_AddNumberToObject(eng, "cache_slots", (double)slots);
  cJSON_AddStringToObject(eng, "storage", spill_storage_name(R->cur.storage));
  cJSON_AddStringToObject(eng, "warnings", spill_engine_warnings(R->eng));
  /* read p50/p99 cover the whole run (rows without this field come from
   * engines that reset the window per forward call: reports drop them) */
  cJSON_AddStringToObject(eng, "read_latency", "run");
  /* runtime paging detection (SPILL_PAGING_*): the run crossed the RAM cliff */
  cJSON_AddBoolToObject(eng, "paging", st->paging);
  cJSON_AddNumberToObject(eng, "paging_token", st->paging_token);
  cJSON_AddNumberToObject(eng, "paging_tokens", (double)st->paging_tokens);
}

/* Switches this run's profile/trace files on (before) or off (after: closes
 * and flushes them so the next run cannot write into them). */
static int switch_run_files(runner *R, const run_files *f, int on, int rc) {
  spill_err ig = {0};
  if (on) {
    if (f->profile[0]) SPILL_TRY(spill_engine_set_knob(R->eng, "profile", f->profile, R->e));
    if (f->trace[0]) SPILL_TRY(spill_engine_set_knob(R->eng, "trace", f->trace, R->e));
    return SPILL_OK;
  }
  if (f->profile[0] && spill_engine_set_knob(R->eng, "profile", "", &ig) < 0 && rc >= 0)
    rc = spill_err_set(R->e, ig.code, "%s", ig.msg);
  if (f->trace[0] && spill_engine_set_knob(R->eng, "trace", "", &ig) < 0 && rc >= 0)
    rc = spill_err_set(R->e, ig.code, "%s", ig.msg);
  return rc;
}

/* The draft source of (cell, arm) on the open engine: an arm with
 * "drafts_from": "greedy" drafts the model's own greedy continuation of the
 * prompt, which an unrecorded reference pass of the arm's engine (its
 * drafts limited to the prompt, so it drafts nothing) produces once per
 * (cell, arm); every other arm drafts from the context's n-grams. The run
 * that follows clears the cache and the counters. */
static int set_draft_source(runner *R, const spill_exp_run *run) {
  const spill_exp_config *cfg = R->cfg;
  if (!cfg->arms[run->arm].drafts_greedy)
    return spill_engine_set_draft_source(R->eng, NULL, 0, R->e);
  if (R->greedy_cell != run->cell || R->greedy_arm != run->arm) {
    R->greedy_cell = R->greedy_arm = -1;
    SPILL_TRY(spill_engine_set_draft_source(R->eng, R->prompt, R->n_prompt, R->e));
    tok_rec t = {R, NULL, 0, 0, NULL, 0, run->key, 0};
    spill_sampling samp = {0.0f, 0, 1.0f, 1};
    spill_run_stats st;
    int rc = spill_generate(R->eng, R->prompt, R->n_prompt, cfg->decode_tokens, &samp, on_token,
                            &t, R->o->stop, &st, R->e);
    int *seq = rc == SPILL_OK ? realloc(R->greedy_seq, (size_t)(R->n_prompt + t.n) * sizeof *seq)
                              : NULL;
    if (rc == SPILL_OK && !seq) rc = spill_err_set(R->e, SPILL_E_NOMEM, "greedy drafts: no memory");
    if (rc < 0) {
      free(t.tokens);
      if (rc != SPILL_E_INTERRUPTED) spill_err_prefix(R->e, "run %s: greedy reference pass", run->key);
      return rc;
    }
    memcpy(seq, R->prompt, (size_t)R->n_prompt * sizeof *seq);
    if (t.n) memcpy(seq + R->n_prompt, t.tokens, (size_t)t.n * sizeof *seq);
    free(t.tokens);
    R->greedy_seq = seq;
    R->greedy_n = R->n_prompt + t.n;
    R->greedy_cell = run->cell;
    R->greedy_arm = run->arm;
  }
  return spill_engine_set_draft_source(R->eng, R->greedy_seq, R->greedy_n, R->e);
}

/* One spill run: a measured one (measured != 0) writes its row, profile,
 * trace and token timeline under runs/; a warmup writes nothing. */
static int do_spill_run(runner *R, const spill_exp_run *run, int measured, int seq) {
  const spill_exp_config *cfg = R->cfg;
  spill_config want;
  SPILL_TRY(spill_exp_config_engine(cfg, run->cell, run->arm, &want, R->e));
  run_files f;
  memset(&f, 0, sizeof f);
  if (measured) {
    SPILL_TRY(make_run_files(R, run, 1, &f));
    if (f.profile[0]) want.profile_path = f.profile;
    if (f.trace[0]) {
      want.trace_path = f.trace;
      want.trace_max_bytes = cfg->out.trace_max_bytes;
    }
  }
  if (measured && R->child_fd >= 0) { /* a run the OOM killer may end while it opens its engine: */
    FILE *tf = spill_exp_fopen_write(f.timeline, R->e); /* its (empty) timeline exists already */
    if (!tf) return SPILL_E_IO;
    fclose(tf);
  }
  int reopened, raised;
  SPILL_TRY(prepare_engine(R, &want, &reopened, &raised));
  SPILL_TRY(set_draft_source(R, run));
  SPILL_TRY(spill_engine_clear_cache(R->eng, 1, R->e));
  SPILL_TRY(evict_cold(R));
  SPILL_TRY(switch_run_files(R, &f, 1, SPILL_OK));
  reset_peak_rss();
  tok_rec t = {R, NULL, 0, 0, NULL, 0, run->key, 0};
  if (measured) {
    t.timeline = spill_exp_fopen_write(f.timeline, R->e);
    if (!t.timeline) return SPILL_E_IO;
  }
  spill_sampling samp = {0.0f, 0, 1.0f, 1};
  spill_run_stats st;
  double t_start = now_s();
  int rc = spill_generate(R->eng, R->prompt, R->n_prompt, cfg->decode_tokens, &samp, on_token, &t,
                          R->o->stop, &st, R->e);
  double wall = now_s() - t_start;
  if (t.timeline) fclose(t.timeline);
  rc = switch_run_files(R, &f, 0, rc);
  if (rc < 0) {
    free(t.tokens);
    if (measured && rc == SPILL_E_INTERRUPTED) unlink(f.timeline);
    if (rc != SPILL_E_INTERRUPTED) spill_err_prefix(R->e, "run %s", run->key);
    return rc;
  }
  uint64_t hash = spill_exp_fnv1a(t.tokens, (size_t)t.n * sizeof(int), SPILL_EXP_FNV_SEED);
  int n_tokens = t.n;
  free(t.tokens);
  if (!measured) return SPILL_OK;
  char cell_key[200];
  cJSON *row = row_head(R, run, seq, cell_key, sizeof cell_key);
  row_engine(R, row, reopened, raised, &st);
  row_machine_tokens(R, row, run->cell, n_tokens, hash, wall);
  cJSON *m = cJSON_AddObjectToObject(row, "metrics");
  int nm;
  const spill_exp_metric *mt = spill_exp_metrics(&nm);
  for (int i = 0; i < nm; i++) /* a bench metric is not a one-request row's */
    if (mt[i].scope != SPILL_EXP_SCOPE_BENCH)
      cJSON_AddNumberToObject(m, mt[i].name, spill_exp_metric_value(i, &st));
  cJSON *fj = cJSON_AddObjectToObject(row, "files");
  cJSON_AddStringToObject(fj, "tokens", f.timeline + strlen(R->dir) + 1);
  if (f.profile[0]) cJSON_AddStringToObject(fj, "profile", f.profile + strlen(R->dir) + 1);
  if (f.trace[0]) cJSON_AddStringToObject(fj, "trace", f.trace + strlen(R->dir) + 1);
  return finish_row(R, run, row, hash, cell_key, st.decode_tok_per_s);
}

/* The bench workload's ids per prompt, once (spill's tokenizer on the open
 * engine; a peer gets the same ids). */
static int ensure_bench_tokens(runner *R) {
  const spill_exp_config *cfg = R->cfg;
  if (R->bench_toks) return SPILL_OK;
  const int pp = cfg->bench_pp;
  int *t = malloc(sizeof(int) * (size_t)pp * (size_t)cfg->bench_n_prompts);
  if (!t) return spill_err_set(R->e, SPILL_E_NOMEM, "bench: no memory");
  for (int p = 0; p < cfg->bench_n_prompts; p++) {
    int rc = spill_bench_tokens(R->eng, spill_bench_prompts[cfg->bench_prompts[p]].text,
                                t + (size_t)p * pp, pp, R->e);
    if (rc < 0) {
      free(t);
      return rc;
    }
  }
  R->bench_toks = t;
  return SPILL_OK;
}

/* One spill run of the bench workload (docs/EXPERIMENTS.md "Bench workload"): on
 * one engine, every prompt cold (spill_bench_run_prompt empties the cache
 * and evicts the container; with peer arms the GGUF too) then warm, and a
 * warm request must give its cold twin's tokens (placement never changes
 * numerics). A measured run writes its row and profile/trace (no per-token
 * timeline: a run is many requests). */
static int do_bench_spill_run(runner *R, const spill_exp_run *run, int measured, int seq) {
  const spill_exp_config *cfg = R->cfg;
  spill_config want;
  SPILL_TRY(spill_exp_config_engine(cfg, run->cell, run->arm, &want, R->e));
  run_files f;
  memset(&f, 0, sizeof f);
  if (measured) {
    SPILL_TRY(make_run_files(R, run, 1, &f));
    if (f.profile[0]) want.profile_path = f.profile;
    if (f.trace[0]) {
      want.trace_path = f.trace;
      want.trace_max_bytes = cfg->out.trace_max_bytes;
    }
  }
  int reopened, raised;
  SPILL_TRY(prepare_engine(R, &want, &reopened, &raised));
  SPILL_TRY(ensure_bench_tokens(R));
  SPILL_TRY(switch_run_files(R, &f, 1, SPILL_OK));
  reset_peak_rss();
  const int np = cfg->bench_n_prompts, nph = spill_exp_config_bench_n_phases(cfg);
  spill_bench_sample s[SPILL_EXP_MAX_BENCH_PROMPTS * SPILL_BENCH_N_PHASES];
  memset(s, 0, sizeof s);
  double t0 = now_s();
  int rc = SPILL_OK;
  for (int p = 0; rc == SPILL_OK && p < np; p++) {
    spill_bench_sample *o = &s[p * SPILL_BENCH_N_PHASES];
    if (cfg->n_peer_arms) spill_exp_evict_path(cfg->model_gguf);
    rc = spill_bench_run_prompt(R->eng, R->bench_toks + (size_t)p * cfg->bench_pp, cfg->bench_pp,
                                cfg->bench_tg, nph, R->o->stop, o, R->e);
    if (rc == SPILL_OK && nph == 2 && o[0].tokens_hash != o[1].tokens_hash)
      rc = spill_err_set(R->e, SPILL_E_INTERNAL,
                         "prompt %s: the warm request's tokens (%016llx) differ from the cold "
                         "one's (%016llx): the cache's contents changed numerics",
                         spill_bench_prompts[cfg->bench_prompts[p]].name,
                         (unsigned long long)o[1].tokens_hash, (unsigned long long)o[0].tokens_hash);
  }
  double wall = now_s() - t0;
  rc = switch_run_files(R, &f, 0, rc);
  if (rc < 0) {
    if (rc != SPILL_E_INTERRUPTED) spill_err_prefix(R->e, "run %s", run->key);
    return rc;
  }
  if (!measured) return SPILL_OK;
  spill_exp_bench_run b = {s, 0, 0, 0};
  spill_run_stats st; /* the row's engine.paging: any request's */
  memset(&st, 0, sizeof st);
  st.paging_token = -1;
  for (int p = 0; p < np; p++)
    for (int ph = 0; ph < nph; ph++) {
      const spill_bench_sample *x = &s[p * SPILL_BENCH_N_PHASES + ph];
      b.bytes_read += x->bytes_read;
      b.major_faults += x->major_faults;
      st.paging |= x->paging;
      st.paging_tokens += x->paging_tokens;
    }
  char cell_key[200];
  cJSON *row = row_head(R, run, seq, cell_key, sizeof cell_key);
  row_engine(R, row, reopened, raised, &st);
  uint64_t hash;
  int n_tokens;
  double primary;
  spill_exp_bench_row(cfg, &b, row, &hash, &n_tokens, &primary);
  row_machine_tokens(R, row, run->cell, n_tokens, hash, wall);
  cJSON *fj = cJSON_AddObjectToObject(row, "files");
  if (f.profile[0]) cJSON_AddStringToObject(fj, "profile", f.profile + strlen(R->dir) + 1);
  if (f.trace[0]) cJSON_AddStringToObject(fj, "trace", f.trace + strlen(R->dir) + 1);
  return finish_row(R, run, row, hash, cell_key, primary);
}

/* The prompt's token ids come from spill's tokenizer (a peer gets the same
 * ids): a peer run before any spill run opens the engine once for them. */
static int ensure_prompt(runner *R, int cell) {
  if (R->prompt || R->bench_toks) return SPILL_OK;
  spill_config c;
  SPILL_TRY(spill_exp_config_engine(R->cfg, cell, 0, &c, R->e));
  SPILL_TRY(open_engine(R, &c));
  return R->cfg->bench ? ensure_bench_tokens(R) : SPILL_OK;
}

/* The metrics of a peer row: what another engine can tell (no expert
 * cache: hit rates, reads and I/O wait are absent, "-" in tables). */
static void peer_metrics(cJSON *row, const spill_exp_peer_result *p) {
  cJSON *m = cJSON_AddObjectToObject(row, "metrics");
  cJSON_AddNumberToObject(m, "decode_tok_per_s", p->n_decode / p->decode_s);
  cJSON_AddNumberToObject(m, "prefill_tok_per_s", p->prefill_s > 0 ? p->n_prefill / p->prefill_s : 0);
  cJSON_AddNumberToObject(m, "decode_s", p->decode_s);
  cJSON_AddNumberToObject(m, "prefill_s", p->prefill_s);
  cJSON_AddNumberToObject(m, "peak_rss_bytes", (double)p->peak_rss_bytes);
  cJSON_AddNumberToObject(m, "major_faults", (double)p->major_faults);
  cJSON_AddNumberToObject(m, "tokens_prefill", p->n_prefill);
  cJSON_AddNumberToObject(m, "tokens_decode", p->n_decode);
  cJSON_AddNumberToObject(m, "bytes_read", (double)p->read_bytes);
  /* its load (the GGUF read or mapped before the first token) is what spill's
   * preload_s is for knob preload all: one column beside decode tok/s */
  cJSON_AddNumberToObject(m, "preload_s", p->load_s);
}

/* What every peer run does first: the cell's prompt and engine knobs (the
 * peer's thread default), spill's engine closed (its memory must not
 * squeeze the peer), and the run's files (warmups keep none but the
 * peer's own, in the results directory). */
static int peer_run_begin(runner *R, const spill_exp_run *run, int measured, int *threads, run_files *f) {
  SPILL_TRY(ensure_prompt(R, run->cell));
  spill_config ctl;
  SPILL_TRY(spill_exp_config_engine(R->cfg, run->cell, 0, &ctl, R->e));
  const spill_exp_peer *pa = &R->cfg->arms[run->arm].peer;
  *threads = pa->threads ? pa->threads : ctl.threads;
  spill_engine_close(R->eng);
  R->eng = NULL;
  malloc_trim(0);
  memset(f, 0, sizeof *f);
  if (measured) SPILL_TRY(make_run_files(R, run, 0, f));
  else snprintf(f->rundir, sizeof f->rundir, "%s", R->dir);
  return SPILL_OK;
}

/* One peer run (docs/PEERS.md): the spill engine is closed first (its
 * memory must not squeeze the peer), both engines' files are evicted when
 * cold, and the child is measured from outside (harness/exp_peer.h). */
static int do_peer_run(runner *R, const spill_exp_run *run, int measured, int seq) {
  const spill_exp_config *cfg = R->cfg;
  const spill_exp_peer *pa = &cfg->arms[run->arm].peer;
  int threads;
  run_files f;
  SPILL_TRY(peer_run_begin(R, run, measured, &threads, &f));
  char ids[SPILL_PATH_MAX], log[SPILL_PATH_MAX];
  snprintf(ids, sizeof ids, "%s/peer-prompt.ids", f.rundir);
  snprintf(log, sizeof log, "%s/peer%s.log", f.rundir, measured ? "" : "-warmup");
  SPILL_TRY(evict_cold(R));
  spill_exp_peer_req q = {R->peer_exe, cfg->model_gguf, pa->load,
                          threads, pa->batch, cfg->decode_tokens,
                          pa->repack, R->prompt, R->n_prompt, ids, log, R->o->stop, 0};
  spill_exp_peer_result p;
  int rc = spill_exp_peer_run(&q, &p, R->e);
  if (rc < 0) {
    if (rc != SPILL_E_INTERRUPTED) spill_err_prefix(R->e, "run %s", run->key);
    return rc;
  }
  uint64_t hash = spill_exp_fnv1a(p.tokens, (size_t)p.n_decode * sizeof(int), SPILL_EXP_FNV_SEED);
  if (!measured) {
    spill_exp_peer_result_free(&p);
    return SPILL_OK;
  }
  char cell_key[200];
  cJSON *row = row_head(R, run, seq, cell_key, sizeof cell_key);
  cJSON *eng = cJSON_AddObjectToObject(row, "engine");
  cJSON_AddStringToObject(eng, "peer", pa->name);
  cJSON_AddStringToObject(eng, "load", pa->load);
  cJSON_AddNumberToObject(eng, "threads", q.threads);
  cJSON_AddNumberToObject(eng, "batch", q.batch);
  cJSON_AddBoolToObject(eng, "repack", q.repack);
  cJSON_AddNumberToObject(eng, "load_s", p.load_s);
  cJSON_AddNumberToObject(eng, "minor_faults", (double)p.minor_faults);
  cJSON_AddNumberToObject(eng, "user_s", p.user_s);
  cJSON_AddNumberToObject(eng, "sys_s", p.sys_s);
  cJSON_AddStringToObject(eng, "measured", "bytes_read: /proc/PID/io read_bytes; peak RSS and "
                                           "major faults: wait4 rusage; whole process (load, "
                                           "prefill, decode)");
  cJSON *ph = p.phases[0] ? spill_json_parse_quiet(p.phases) : NULL;
  if (ph) cJSON_AddItemToObject(eng, "phases", ph);
  row_machine_tokens(R, row, run->cell, p.n_decode, hash, p.wall_s);
  peer_metrics(row, &p);
  cJSON *fj = cJSON_AddObjectToObject(row, "files");
  cJSON_AddStringToObject(fj, "log", log + strlen(R->dir) + 1);
  double tok_s = p.n_decode / p.decode_s;
  spill_exp_peer_result_free(&p);
  return finish_row(R, run, row, hash, cell_key, tok_s);
}

/* A bench request of the peer into the shape of spill's (pp and tg exact:
 * llama_peer neither stops at EOS nor cuts the prompt). */
static void peer_sample(const spill_exp_config *cfg, const spill_exp_peer_request *q,
                        spill_bench_sample *o) {
  memset(o, 0, sizeof *o);
  o->n_prompt = cfg->bench_pp;
  o->n_gen = cfg->bench_tg;
  o->pp_ts = q->prefill_s > 0 ? cfg->bench_pp / q->prefill_s : 0;
  o->tg_ts = cfg->bench_tg / q->decode_s;
  o->ttft_s = q->prefill_s;
  o->bytes_read = q->read_bytes_prefill + q->read_bytes_decode;
  o->bytes_read_decode = q->read_bytes_decode;
  o->peak_rss = q->peak_rss_bytes;
  o->major_faults = q->major_faults;
  o->read_bps = o->bytes_read / (q->prefill_s + q->decode_s);
  o->tokens_hash = q->tokens_hash;
}

/* The processes of a bench peer run, one per prompt (the row's
 * engine.processes), measured from outside as do_peer_run's. */
static cJSON *peer_process_json(const runner *R, const char *prompt, const spill_exp_peer_result *p,
                                const char *log) {
  cJSON *o = cJSON_CreateObject();
  cJSON_AddStringToObject(o, "prompt", prompt);
  cJSON_AddNumberToObject(o, "load_s", p->load_s);
  cJSON_AddNumberToObject(o, "wall_s", p->wall_s);
  cJSON_AddNumberToObject(o, "peak_rss_bytes", (double)p->peak_rss_bytes);
  cJSON_AddNumberToObject(o, "read_bytes", (double)p->read_bytes);
  cJSON_AddNumberToObject(o, "major_faults", (double)p->major_faults);
  cJSON_AddNumberToObject(o, "minor_faults", (double)p->minor_faults);
  cJSON_AddNumberToObject(o, "user_s", p->user_s);
  cJSON_AddNumberToObject(o, "sys_s", p->sys_s);
  cJSON_AddStringToObject(o, "log", log + strlen(R->dir) + 1);
  return o;
}

/* One llama.cpp run of the bench workload: per prompt one llama_peer
 * process started with both engines' files evicted (cold: its first
 * request; the load is before it, in neither phase), warm = the same
 * request again in that process (--repeat 2). Spill's engine is closed
 * first, as for do_peer_run. */
static int do_bench_peer_run(runner *R, const spill_exp_run *run, int measured, int seq) {
  const spill_exp_config *cfg = R->cfg;
  const spill_exp_peer *pa = &cfg->arms[run->arm].peer;
  int threads;
  run_files f;
  SPILL_TRY(peer_run_begin(R, run, measured, &threads, &f));
  const int np = cfg->bench_n_prompts, nph = spill_exp_config_bench_n_phases(cfg);
  spill_bench_sample s[SPILL_EXP_MAX_BENCH_PROMPTS * SPILL_BENCH_N_PHASES];
  memset(s, 0, sizeof s);
  spill_exp_bench_run b = {s, 1, 0, 0};
  cJSON *procs = cJSON_CreateArray();
  double wall = 0;
  int rc = SPILL_OK;
  for (int p = 0; rc == SPILL_OK && p < np; p++) {
    const char *name = spill_bench_prompts[cfg->bench_prompts[p]].name;
    char ids[SPILL_PATH_MAX], log[SPILL_PATH_MAX];
    snprintf(ids, sizeof ids, "%s/peer-%s.ids", f.rundir, name);
    snprintf(log, sizeof log, "%s/peer-%s%s.log", f.rundir, name, measured ? "" : "-warmup");
    spill_exp_evict_path(R->model);
    spill_exp_evict_path(cfg->model_gguf);
    spill_exp_peer_req q = {R->peer_exe, cfg->model_gguf, pa->load, threads, pa->batch,
                            cfg->bench_tg, pa->repack, R->bench_toks + (size_t)p * cfg->bench_pp,
                            cfg->bench_pp, ids, log, R->o->stop, nph};
    spill_exp_peer_result r;
    rc = spill_exp_peer_run(&q, &r, R->e);
    if (rc < 0) break;
    wall += r.wall_s;
    b.bytes_read += r.read_bytes;
    b.major_faults += r.major_faults;
    for (int k = 0; k < nph; k++) peer_sample(cfg, &r.requests[k], &s[p * SPILL_BENCH_N_PHASES + k]);
    if (procs) cJSON_AddItemToArray(procs, peer_process_json(R, name, &r, log));
    spill_exp_peer_result_free(&r);
  }
  if (rc < 0 || !measured) {
    cJSON_Delete(procs);
    if (rc < 0 && rc != SPILL_E_INTERRUPTED) spill_err_prefix(R->e, "run %s", run->key);
    return rc;
  }
  char cell_key[200];
  cJSON *row = row_head(R, run, seq, cell_key, sizeof cell_key);
  cJSON *eng = cJSON_AddObjectToObject(row, "engine");
  cJSON_AddStringToObject(eng, "peer", pa->name);
  cJSON_AddStringToObject(eng, "load", pa->load);
  cJSON_AddNumberToObject(eng, "threads", threads);
  cJSON_AddNumberToObject(eng, "batch", pa->batch);
  cJSON_AddBoolToObject(eng, "repack", pa->repack);
  cJSON_AddStringToObject(eng, "measured",
                          "per request (bench.samples): llama_peer's own clock, /proc/self/io "
                          "read_bytes and ru_maxrss; per process (processes, metrics bytes_read "
                          "and major_faults): /proc/PID/io and wait4 rusage, load included");
  cJSON_AddItemToObject(eng, "processes", procs);
  uint64_t hash;
  int n_tokens;
  double primary;
  spill_exp_bench_row(cfg, &b, row, &hash, &n_tokens, &primary);
  row_machine_tokens(R, row, run->cell, n_tokens, hash, wall);
  return finish_row(R, run, row, hash, cell_key, primary);
}

static int run_here(runner *R, const spill_exp_run *run, int measured, int seq) {
  int peer = R->cfg->arms[run->arm].peer.name[0] != 0;
  if (R->cfg->bench)
    return peer ? do_bench_peer_run(R, run, measured, seq) : do_bench_spill_run(R, run, measured, seq);
  if (peer) return do_peer_run(R, run, measured, seq);
  return do_spill_run(R, run, measured, seq);
}

/* Lines in a run's token timeline: the tokens a killed run got to. */
static int count_lines(const char *path) {
  FILE *f = fopen(path, "r");
  if (!f) return 0;
  int n = 0, ch;
  while ((ch = getc(f)) != EOF) n += ch == '\n';
  fclose(f);
  return n;
}

/* The row of a run the machine's OOM killer ended: no metrics (the report
 * counts it as OOM-killed, not as a missing run), the tokens it reached,
 * the machine's counters up to the kill. */
static int oom_row(runner *R, const spill_exp_run *run, int seq, const spill_machine_counters *at) {
  char cell_key[200], rd[SPILL_PATH_MAX], tl[SPILL_PATH_MAX + 16];
  cJSON *row = row_head(R, run, seq, cell_key, sizeof cell_key);
  cJSON_AddStringToObject(row, "outcome", SPILL_EXP_OUTCOME_OOM);
  run_dir(R, run, rd, sizeof rd);
  snprintf(tl, sizeof tl, "%s/tokens.jsonl", rd);
  int reached = count_lines(tl);
  row_machine_tokens(R, row, run->cell, reached, 0, now_s() - R->t_run);
  cJSON *pr = cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(row, "machine"),
                                               "profile");
  if (pr) cJSON_AddNumberToObject(pr, "oom_kills", (double)(at->oom_kills - R->mach_at_run.oom_kills));
  if (access(tl, F_OK) == 0)
    cJSON_AddStringToObject(cJSON_AddObjectToObject(row, "files"), "tokens", tl + strlen(R->dir) + 1);
  progress(R, "oom-killed", run->key, reached, R->cfg->decode_tokens, 0);
  return finish_row(R, run, row, 0, cell_key, NAN); /* no tok/s: progress says OOM-killed */
}

/* A run under a machine profile runs in a forked child that joins the
 * machine's cgroup; the runner stays outside, so when the cgroup's OOM
 * killer ends the run (SIGKILL, the cgroup's oom_kill count risen) the
 * sweep goes on: the run gets a row with outcome "oom-killed". The child
 * opens its own engine (the runner keeps none open while the machine is
 * up) and hands its row or its error back through a pipe. */
static int run_in_child(runner *R, const spill_exp_run *run, int measured, int seq) {
  spill_engine_close(R->eng); /* nothing of the engine in the runner */
  R->eng = NULL;
  malloc_trim(0);
  int fd[2];
  if (pipe2(fd, O_CLOEXEC) < 0) return spill_err_set(R->e, SPILL_E_IO, "pipe: %s", strerror(errno));
  fflush(NULL);
  pid_t pid = fork();
  if (pid < 0) {
    close(fd[0]), close(fd[1]);
    return spill_err_set(R->e, SPILL_E_IO, "run %s: fork: %s", run->key, strerror(errno));
  }
  if (pid == 0) {
    close(fd[0]);
    R->child_fd = fd[1];
    prctl(PR_SET_PDEATHSIG, SIGKILL); /* a killed runner takes its run along */
    int rc = spill_machine_enter(&R->mach, R->e);
    if (rc == SPILL_OK) rc = run_here(R, run, measured, seq);
    spill_engine_close(R->eng);
    if (rc < 0) child_send(R, 'E', (uint64_t)(-rc), 0, R->e->msg);
    fflush(NULL);
    _exit(rc < 0 ? 3 : 0);
  }
  close(fd[1]);
  size_t cap = 1 << 16, len = 0;
  char *buf = malloc(cap);
  int rc = buf ? SPILL_OK : spill_err_set(R->e, SPILL_E_NOMEM, "run %s: no memory", run->key);
  for (;;) {
    if (rc == SPILL_OK && len + 4096 > cap) {
      char *nb = realloc(buf, cap * 2);
      if (!nb) rc = spill_err_set(R->e, SPILL_E_NOMEM, "run %s: no memory", run->key);
      else buf = nb, cap *= 2;
    }
    char sink[4096];
    ssize_t r = rc == SPILL_OK ? read(fd[0], buf + len, cap - len - 1) : read(fd[0], sink, sizeof sink);
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) break;
    if (rc == SPILL_OK) len += (size_t)r;
  }
  close(fd[0]);
  int status = 0;
  while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  if (buf) buf[len] = 0;
  spill_machine_counters after;
  memset(&after, 0, sizeof after);
  spill_err se = {0};
  spill_machine_sample(&R->mach, &after, &se);
  if (rc == SPILL_OK && WIFSIGNALED(status)) {
    free(buf);
    if (WTERMSIG(status) == SIGKILL && after.oom_kills > R->mach_at_run.oom_kills) {
      if (!measured) { /* a warmup: nothing to record, the measured run will tell */
        progress(R, "oom-killed", run->key, 0, 0, 0);
        return SPILL_OK;
      }
      return oom_row(R, run, seq, &after);
    }
    return spill_err_set(R->e, SPILL_E_INTERNAL,
                         "run %s: its process was killed by signal %d (%s), not by the machine "
                         "profile's OOM killer (the cgroup's oom_kill count did not rise)",
                         run->key, WTERMSIG(status), strsignal(WTERMSIG(status)));
  }
  char kind = 0;
  unsigned long long hash = 0;
  double num = 0;
  int head = 0;
  if (rc == SPILL_OK && buf && sscanf(buf, "%c %16llx %lg\n%n", &kind, &hash, &num, &head) < 3)
    kind = 0;
  if (rc == SPILL_OK && kind == 'E') {
    rc = (int)-(long long)hash;
    if (rc >= 0) rc = SPILL_E_INTERNAL;
    spill_err_set(R->e, rc, "%s", buf + head);
  } else if (rc == SPILL_OK && kind == 'R' && WIFEXITED(status) && WEXITSTATUS(status) == 0) {
    cJSON *row = cJSON_Parse(buf + head);
    char cell_key[200];
    spill_exp_cell_key(R->cfg, run->cell, cell_key, sizeof cell_key);
    rc = row ? finish_row(R, run, row, hash, cell_key, num)
             : spill_err_set(R->e, SPILL_E_INTERNAL, "run %s: its child sent a row that is not JSON",
                             run->key);
  } else if (rc == SPILL_OK && !(measured == 0 && WIFEXITED(status) && WEXITSTATUS(status) == 0 &&
                                 len == 0)) {
    rc = spill_err_set(R->e, SPILL_E_INTERNAL, "run %s: its process ended (status %d) without a row",
                       run->key, status);
  }
  free(buf);
  return rc;
}

static int do_run(runner *R, const spill_exp_run *run, int measured, int seq) {
  SPILL_TRY(ensure_lock(R, run->cell));
  if (R->mach.up) {
    SPILL_TRY(spill_machine_sample(&R->mach, &R->mach_at_run, R->e));
    return run_in_child(R, run, measured, seq);
  }
  return run_here(R, run, measured, seq);
}

/* --publish: a git checkout with no uncommitted changes to tracked files. */
static int check_publish(spill_err *e) {
  char commit[64];
  int dirty = 0;
  spill_exp_git_commit(commit, sizeof commit, &dirty);
  if (!strcmp(commit, "nogit"))
    return spill_err_set(e, SPILL_E_CONFIG,
                         "--publish: not in a git checkout (a published result names the "
                         "commit it ran on)");
  if (dirty)
    return spill_err_set(e, SPILL_E_CONFIG,
                         "--publish: the working tree has uncommitted changes to tracked files "
                         "(git status); commit them first so the results name the code they "
                         "ran on");
  return SPILL_OK;
}

/* env.json (or o->env_file) once per results directory. */
/* env.json's "machine_profile": the controller, the kernel's swap settings
 * and the swap active when the experiment started, what was cleaned up after
 * killed runners; each row's machine.profile has the cell's limits as taken. */
static int env_machine_profile(runner *R, char **env) {
  cJSON *root = spill_json_parse_quiet(*env);
  if (!root) return spill_err_set(R->e, SPILL_E_NOMEM, "env.json: no memory");
  cJSON *mp = cJSON_AddObjectToObject(root, "machine_profile");
  int ver = 0;
  char home[PATH_MAX] = "", names[512], buf[64];
  spill_err pe = {0};
  if (spill_machine_probe(&ver, home, sizeof home, &pe) == SPILL_OK) {
    cJSON_AddNumberToObject(mp, "cgroup_version", ver);
    cJSON_AddStringToObject(mp, "cgroup_parent", home);
  } else {
    cJSON_AddStringToObject(mp, "cgroup_error", pe.msg);
  }
  static const char *const knobs[][2] = {{"vm_swappiness", "/proc/sys/vm/swappiness"},
                                         {"vm_page_cluster", "/proc/sys/vm/page-cluster"},
                                         {"vm_overcommit_memory", "/proc/sys/vm/overcommit_memory"}};
  for (size_t i = 0; i < sizeof knobs / sizeof knobs[0]; i++) {
    FILE *f = fopen(knobs[i][1], "r");
    if (f && fgets(buf, sizeof buf, f)) cJSON_AddNumberToObject(mp, knobs[i][0], atof(buf));
    if (f) fclose(f);
  }
  uint64_t total, used;
  spill_machine_swaps(&total, &used, names, sizeof names);
  cJSON_AddNumberToObject(mp, "swap_active_bytes_at_start", (double)total);
  cJSON_AddStringToObject(mp, "swap_active_at_start", names);
  cJSON_AddStringToObject(mp, "cleaned_up_at_start", R->mach_reaped);
  cJSON_AddStringToObject(mp, "note",
                          "per cell: rows' machine.profile (limits as the kernel took them, "
                          "ballast, swap devices, counters per run)");
  char *out = cJSON_Print(root);
  cJSON_Delete(root);
  if (!out) return spill_err_set(R->e, SPILL_E_NOMEM, "env.json: no memory");
  free(*env);
  *env = out;
  return SPILL_OK;
}

static int ensure_env(runner *R) {
  char envf[SPILL_PATH_MAX];
  if (R->o->env_file) snprintf(envf, sizeof envf, "%s", R->o->env_file);
  else snprintf(envf, sizeof envf, "%s/env.json", R->dir);
  if (exists(envf)) return SPILL_OK;
  char *env = NULL;
  int rc = spill_exp_env_json(R->model, R->o->quick_env, &env, R->e);
  if (rc == SPILL_OK && R->cfg->machine_ram) rc = env_machine_profile(R, &env);
  if (rc == SPILL_OK) rc = spill_write_file_atomic(envf, env, strlen(env), R->e);
  free(env);
  return rc;
}

/* Everything before the first run: the plan, the model (generated, copied to
 * storage_path), the peer, the results directory, env.json and the rows
 * already done (a resume). */
static int prepare(runner *R, const char *resolved, spill_exp_run **runs, int *n_runs,
                   char *out_dir, size_t out_n) {
  const spill_exp_config *cfg = R->cfg;
  uint64_t avail;
  int rc = spill_ramlock_meminfo(&R->ram_total, &avail, R->e);
  if (rc == SPILL_OK) rc = spill_exp_plan_runs(cfg, runs, n_runs, R->e);
  /* Refuse an unsafe emulation before touching anything; undo what a
   * killed runner's machine profile left (and say so) before making ours. */
  if (rc == SPILL_OK) rc = check_emulation(cfg, R->e);
  if (rc == SPILL_OK && cfg->machine_ram) {
    char *what = R->mach_reaped;
    int n = spill_machine_reap_stale(what, sizeof R->mach_reaped, R->e);
    if (n < 0) rc = n;
    else if (n > 0 && R->o->progress) {
      spill_exp_progress p = {"machine", what, n, n, now_s() - R->t0, 0, 0};
      R->o->progress(R->o->user, &p);
    }
  }
  if (rc == SPILL_OK) rc = ensure_model(R);
  if (rc == SPILL_OK && cfg->n_peer_arms)
    rc = check_peer(cfg, R->model, R->peer_exe, sizeof R->peer_exe, R->e);
  if (rc == SPILL_OK) rc = ensure_storage_copy(R);
  if (rc == SPILL_OK) rc = setup_dir(R, resolved);
  if (rc == SPILL_OK && out_dir) snprintf(out_dir, out_n, "%s", R->dir);
  if (rc == SPILL_OK) rc = ensure_env(R);
  if (rc == SPILL_OK) rc = load_done(R);
  return rc;
}

/* The pending runs in plan order; *last_key gets the last one started. */
static int run_pending(runner *R, const spill_exp_run *runs, int n_runs, const char **last_key) {
  const spill_exp_config *cfg = R->cfg;
  const spill_exp_opts *o = R->o;
  int rc = SPILL_OK, measured = 0, warmed_cell = -1;
  for (int i = 0; rc == SPILL_OK && !o->prepare_only && i < n_runs; i++) {
    if (o->cells && !o->cells[runs[i].cell]) continue;
    if (is_done(R, runs[i].key)) continue;
    if (o->max_runs && measured >= o->max_runs) break;
    /* Warmups before the first pending run of a cell: each arm, unrecorded. */
    int first_pending = runs[i].cell != warmed_cell;
    warmed_cell = runs[i].cell;
    if (first_pending)
      for (int w = 0; rc == SPILL_OK && w < cfg->warmup; w++)
        for (int a = 0; rc == SPILL_OK && a < cfg->n_arms; a++) {
          spill_exp_run wr = runs[i];
          wr.arm = a;
          snprintf(wr.key, sizeof wr.key, "warmup/%s", cfg->arms[a].name);
          progress(R, "warmup", wr.key, R->n_done, n_runs, 0);
          rc = do_run(R, &wr, 0, -1);
        }
    R->t_run = now_s();
    if (rc == SPILL_OK) {
      *last_key = runs[i].key;
      rc = do_run(R, &runs[i], 1, i);
    }
    R->measured_s += now_s() - R->t_run;
    measured++;
  }
  return rc;
}

/* Reports from whatever rows exist (also after an interruption or a
 * failure, so the finished runs are usable); the refuted entry only for a
 * complete experiment. Returns rc, or the report's error when rc was OK. */
static int report_rows(runner *R, int rc, int n_runs) {
  const spill_exp_opts *o = R->o;
  spill_err re = {0};
  spill_exp_report_result *res = calloc(1, sizeof *res);
  progress(R, "report", NULL, R->n_done, n_runs, 0);
  int rr = res ? spill_exp_report(R->dir, res, &re) : SPILL_E_NOMEM;
  int complete = rc == SPILL_OK && R->n_done == n_runs;
  if (rr == SPILL_OK && res->has_hypothesis && o->verdict_out && o->verdict_n)
    snprintf(o->verdict_out, o->verdict_n, "%s: %s: %s",
             complete ? spill_verdict_name(res->verdict) : "withheld (incomplete)", res->claim,
             res->result_text);
  if (rr == SPILL_OK && complete && res->has_hypothesis &&
      res->verdict == SPILL_VERDICT_REFUTED && !o->no_refuted) {
    char entry[SPILL_PATH_MAX], own[SPILL_PATH_MAX];
    const char *rdir = o->refuted_dir;
    if (!rdir) { /* the run's own record, inside its results directory */
      snprintf(own, sizeof own, "%s/refuted", R->dir);
      rdir = own;
      rr = spill_exp_mkdirs(own, &re);
    }
    if (rr == SPILL_OK)
      rr = spill_refuted_write(rdir, R->dir, R->cfg->source, res, entry, sizeof entry, &re);
    if (rr == SPILL_OK && o->refuted_entry_out && o->refuted_entry_n)
      snprintf(o->refuted_entry_out, o->refuted_entry_n, "%s", entry);
  }
  if (rr < 0 && rc == SPILL_OK) {
    *R->e = re;
    rc = rr;
  }
  free(res);
  return rc;
}

/* A start that failed before any row leaves no results directory: removes
 * R->dir when it holds only what the runner put there. */
static void remove_failed_start(runner *R, char *out_dir, size_t out_n) {
  DIR *d = opendir(R->dir);
  int only_ours = d != NULL;
  struct dirent *ent;
  while (d && (ent = readdir(d)))
    if (ent->d_name[0] != '.' && strcmp(ent->d_name, "config.json") &&
        strcmp(ent->d_name, "env.json") && strcmp(ent->d_name, "runs.jsonl.lock") &&
        strcmp(ent->d_name, "runs.jsonl") && strcmp(ent->d_name, "runs"))
      only_ours = 0;
  if (d) closedir(d);
  if (!only_ours || file_size_or_zero(R->rows_file) != 0) return;
  const char *names[] = {"config.json", "env.json", "runs.jsonl.lock", "runs.jsonl"};
  char p[SPILL_PATH_MAX];
  for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
    snprintf(p, sizeof p, "%s/%s", R->dir, names[i]);
    unlink(p);
  }
  /* runs/<run>/ of the run that failed (no run finished: nothing else) */
  snprintf(p, sizeof p, "%s/runs", R->dir);
  DIR *rd = opendir(p);
  struct dirent *re;
  while (rd && (re = readdir(rd)))
    if (re->d_name[0] != '.') {
      char q[SPILL_PATH_MAX];
      snprintf(q, sizeof q, "%s/%s", p, re->d_name);
      remove_tmp_dir(q);
    }
  if (rd) closedir(rd);
  rmdir(p);
  if (rmdir(R->dir) == 0 && out_dir && out_n) out_dir[0] = 0;
}

int spill_exp_execute(const spill_exp_config *cfg, const spill_exp_opts *o, char *out_dir,
                  size_t out_n, spill_err *e) {
  runner R;
  memset(&R, 0, sizeof R);
  R.dir_lock_fd = -1;
  R.child_fd = -1;
  R.greedy_cell = R.greedy_arm = -1;
  R.cfg = cfg;
  R.o = o;
  R.e = e;
  R.t0 = now_s();
  if (out_dir && out_n) out_dir[0] = 0;
  if (o->verdict_out && o->verdict_n) o->verdict_out[0] = 0;
  if (o->refuted_entry_out && o->refuted_entry_n) o->refuted_entry_out[0] = 0;
  if (o->publish) SPILL_TRY(check_publish(e));
  char *resolved = spill_exp_config_resolved_json(cfg);
  if (!resolved) return spill_err_set(e, SPILL_E_NOMEM, "config: no memory");
  spill_exp_run *runs = NULL;
  int n_runs = 0;
  const char *last_key = NULL;
  int rc = prepare(&R, resolved, &runs, &n_runs, out_dir, out_n);
  if (rc == SPILL_OK) rc = run_pending(&R, runs, n_runs, &last_key);
  spill_engine_close(R.eng);
  mark_interrupted(&R, rc, last_key, n_runs);
  R.eng = NULL;
  close_machine(&R);
  spill_ramlock_release(&R.lock);
  /* only the directory's writer (the lock holder) rewrites its reports: a
   * resume refused by the lock leaves the other writer's directory alone */
  if (R.dir[0] && R.dir_lock_fd >= 0 && exists(R.rows_file) && rc != SPILL_E_CONFIG &&
      !o->no_report)
    rc = report_rows(&R, rc, n_runs);
  if (rc < 0 && rc != SPILL_E_INTERRUPTED && R.created_dir && R.n_done == 0 &&
      !o->prepare_only)
    remove_failed_start(&R, out_dir, out_n);
  if (R.dir_lock_fd >= 0) close(R.dir_lock_fd); /* releases the flock */
  for (int i = 0; i < R.n_done; i++) free(R.done_keys[i]);
  free(R.done_keys), free(R.done_hash), free(R.done_cell), free(R.done_arm), free(R.done_oom);
  free(R.prompt);
  free(R.bench_toks);
  free(R.greedy_seq);
  free(runs);
  free(resolved);
  return rc;
}
