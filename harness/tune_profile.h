/* harness/tune_profile.h: a machine's tuned knobs for one model (issue 28).
 *
 * `spill tune MODEL` (harness/tune.h) measures which io_backend, io_threads,
 * io_depth, threads, lookahead and policy decode fastest for that model on
 * this machine and saves them here; `spill run`, `spill bench` and `spill
 * serve` load the profile of the model they open and apply it under the
 * knobs the user set explicitly. A profile is bound to the model (its
 * container id and name) and to the machine it was measured on (machine-id,
 * CPU model, logical CPUs, RAM, and the device holding the model): a profile
 * from another machine or model is refused by name, never applied.
 *
 * Where profiles live: $SPILL_TUNE_DIR, else $XDG_CACHE_HOME/spill/tune,
 * else $HOME/.cache/spill/tune; one file per model, <container_id>-<name>.json
 * (docs/FORMAT.md "Tuned profiles"). Files are untrusted: read through the
 * JSON layer, every field checked, written atomically. Depends on the public
 * header only.
 */
#ifndef SPILL_HARNESS_TUNE_PROFILE_H
#define SPILL_HARNESS_TUNE_PROFILE_H

#include <limits.h>
#include <stddef.h>
#include <stdint.h>

#include "engine/spill.h"

#ifdef __cplusplus
extern "C" {
#endif

#define SPILL_TUNE_VERSION 1
#define SPILL_TUNE_MAX_KNOBS 8

/* What binds a profile to a machine. */
typedef struct spill_tune_machine {
  char machine_id[64]; /* /etc/machine-id (or dbus's); "" when neither exists */
  char cpu[128];       /* /proc/cpuinfo "model name" of the first CPU; "" if none */
  int cpus;            /* online logical CPUs */
  uint64_t ram;        /* MemTotal, bytes */
  char device[32];     /* "major:minor" of the file system holding the model */
} spill_tune_machine;

typedef struct spill_tune_knob {
  char name[32];  /* a config knob of the table (spill_knob_find) */
  char value[64]; /* its text form */
} spill_tune_knob;

typedef struct spill_tune_profile {
  int version;
  uint64_t container_id;
  char model_name[64];
  spill_tune_machine machine;
  char measured_at[32]; /* UTC, ISO 8601 */
  char commit[64];      /* spill's commit when measured ("" unknown) */
  int n_knobs;
  spill_tune_knob knobs[SPILL_TUNE_MAX_KNOBS];
} spill_tune_profile;

/* This machine, for a model in model_dir. */
int spill_tune_machine_probe(const char *model_dir, spill_tune_machine *m, spill_err *e);

/* The profile file of a model (its container id and name) in the profile
 * directory, into buf. SPILL_E_INVALID_ARG when it does not fit or no
 * directory can be named (no $SPILL_TUNE_DIR, $XDG_CACHE_HOME or $HOME). */
int spill_tune_profile_path(const spill_info *model, char *buf, size_t n, spill_err *e);

struct cJSON;
/* Writes p (and, when evidence is not NULL, a copy of the JSON array of measurements
 * behind it, serialised) to path atomically, creating its directory. */
int spill_tune_profile_save(const char *path, const spill_tune_profile *p,
                            const struct cJSON *evidence,
                            spill_err *e);

/* Reads and checks a profile file (untrusted): SPILL_E_CONFIG naming the
 * file and the field for anything malformed, an unknown knob or a value the
 * knob refuses. */
int spill_tune_profile_load(const char *path, spill_tune_profile *p, spill_err *e);

/* SPILL_E_CONFIG when p was measured for another model or on another machine
 * than (model, here): the message names what differs, both ways. */
int spill_tune_profile_check(const spill_tune_profile *p, const char *path,
                             const spill_info *model, const spill_tune_machine *here,
                             spill_err *e);

/* Sets each knob of p into cfg unless skip(name, user) says the user set it
 * (skip may be NULL). applied gets "name=value ..." of what was set ("" when
 * nothing), n bytes. */
int spill_tune_profile_apply(const spill_tune_profile *p, spill_config *cfg,
                             int (*skip)(const char *name, void *user), void *user,
                             char *applied, size_t n, spill_err *e);

/* A skip callback for the commands: 1 when the command line (user: a
 * spill_tune_argv) holds the knob's flag (--io-threads for io_threads), so
 * a knob the user set on the command line wins over the profile. */
typedef struct spill_tune_argv {
  int argc;
  char **argv;
} spill_tune_argv;
int spill_tune_skip_argv(const char *name, void *user);

/* What the commands do before opening an engine on model_dir: find the
 * model's profile; if there is none, return SPILL_OK with note "". If there
 * is one, check it and apply it (under skip) and write "tuned: name=value
 * ... (PATH, measured AT)" to note; a profile for another machine or model
 * is an error (SPILL_E_CONFIG: "... re-run spill tune, or --no-tuned").
 * explicit_path: a profile the user named (--tuned FILE): must exist. */
int spill_tune_for_model(const char *model_dir, const char *explicit_path, spill_config *cfg,
                         int (*skip)(const char *name, void *user), void *user, char *note,
                         size_t n, spill_err *e);

#ifdef __cplusplus
}
#endif
#endif
