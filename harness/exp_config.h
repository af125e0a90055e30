/* harness/exp_config.h: experiment configs (docs/EXPERIMENTS.md): parsing,
 * validation and the resolved form.
 *
 * A config is untrusted input: every unknown key, wrong type and impossible
 * value is rejected before anything runs, with SPILL_E_CONFIG and a message
 * "<file>: <json path>: <reason>" (e.g. `x.json: sweep.budget[2]: "9Q": not
 * a size`). Engine knobs (base, sweep, arms) are validated by
 * spill_config_set on a scratch spill_config, so they have the engine's
 * spelling and checks. Parsing reads no model and starts nothing; it may read
 * workload.prompt_file and the router traces of workload.routing
 * ("trace:FILE") and model.like_trace (read and validated here). Knob values are kept in their text form (what
 * spill_config_set takes). Limits are generous fixed bounds (stated below) so
 * the structure needs one free.
 */
#ifndef SPILL_HARNESS_EXP_CONFIG_H
#define SPILL_HARNESS_EXP_CONFIG_H

#include <stdint.h>

#include "engine/spill.h"
#include "harness/bench_workload.h"

#ifdef __cplusplus
extern "C" {
#endif

#define SPILL_EXP_MAX_KNOBS 32   /* knobs in base or in one arm */
#define SPILL_EXP_MAX_AXES 6     /* swept knobs */
#define SPILL_EXP_MAX_VALUES 32  /* values per swept knob */
#define SPILL_EXP_MAX_ARMS 8
#define SPILL_EXP_MAX_CELLS 1024 /* product of the sweep */
#define SPILL_EXP_PATH_MAX 512
#define SPILL_EXP_VALUE_MAX 64
#define SPILL_EXP_MAX_BENCH_PROMPTS 16

typedef struct spill_exp_knob {
  char key[32];
  char value[SPILL_EXP_VALUE_MAX];
} spill_exp_knob;

typedef struct spill_exp_axis {
  char key[32];
  int n;
  char values[SPILL_EXP_MAX_VALUES][SPILL_EXP_VALUE_MAX]; /* budget: sorted upward */
} spill_exp_axis;

/* A peer arm runs another engine on the same weights (docs/PEERS.md):
 * `{"name": ..., "peer": "llama.cpp", "args": {"load": "mmap", "threads": 2}}`.
 * It takes no engine knobs; from its cell it takes only the emulated RAM. */
typedef struct spill_exp_peer {
  char name[16];  /* "llama.cpp"; "" = a spill arm */
  char load[8];   /* mmap | none | mlock (llama.cpp's load_mode) */
  int threads;    /* 0 = the control arm's threads knob in the cell */
  int batch;      /* prompt tokens per llama_decode call (sequential prefill: 1) */
  int repack;     /* ggml's repacked CPU weight layouts (llama.cpp's default: on;
                   * they copy the weights into anonymous memory at load) */
} spill_exp_peer;

typedef struct spill_exp_arm {
  char name[32];
  int n_knobs;
  spill_exp_knob knobs[SPILL_EXP_MAX_KNOBS];
  int exact; /* must produce the control arm's tokens */
  /* "drafts_from": "greedy": the arm's drafts (knob draft > 0) are the
   * model's own greedy continuation of the prompt, taken from an unrecorded
   * reference pass of the arm in each cell (spill_engine_set_draft_source),
   * so every draft is right and the knob draft_accept_max sets the
   * acceptance; 0 ("context", the default): the context's n-grams. */
  int drafts_greedy;
  spill_exp_peer peer;
} spill_exp_arm;

/* The runner-owned sweep axis: emulated RAM per cell (machine.emulate_ram
 * swept), sorted upward and always the slowest axis. */
#define SPILL_EXP_AXIS_EMULATE_RAM "emulate_ram"
/* Runner-owned axes of a machine profile (machine.ram set): the wired
 * reserve and the swap of each cell (harness/machine_profile.h). Like
 * emulate_ram they run slowest, before budget. */
#define SPILL_EXP_AXIS_WIRED "wired"
#define SPILL_EXP_AXIS_SWAP "swap"
#define SPILL_EXP_MAX_THRESHOLDS 32

typedef enum spill_exp_order {
  SPILL_EXP_ORDER_INTERLEAVED = 0, /* A B A B ... */
  SPILL_EXP_ORDER_ABBA = 1,        /* A B B A A B ... */
  SPILL_EXP_ORDER_RANDOM = 2,      /* seeded shuffle of (arm, repeat) */
  SPILL_EXP_ORDER_BLOCKED = 3,     /* A A ... B B ... */
} spill_exp_order;

typedef struct spill_exp_hypothesis {
  int present;
  char claim[256];
  char metric[32];
  int direction; /* +1 increase, -1 decrease */
  double min_effect, alpha;
  int control, treatment; /* arm indexes (default 0 and 1) */
  /* "cell_thresholds": {"emulate_ram=8G": 3.0, ...}: the ratio treatment /
   * control a cell must reach (increase) or stay under (decrease), instead
   * of 1 +- min_effect. Keys are cell keys of the sweep. */
  int n_thresholds;
  struct {
    char cell[200];
    double ratio;
  } thresholds[SPILL_EXP_MAX_THRESHOLDS];
} spill_exp_hypothesis;

typedef struct spill_exp_outputs {
  int table_md, table_csv;
  int plot_cliff, plot_ab, plot_timeline;
  int profile, trace;        /* per-run engine profile / router trace */
  uint64_t trace_max_bytes;  /* per run (default 16 MiB) */
} spill_exp_outputs;

/* "cluster": Slurm defaults for `spill exp --slurm` (harness/exp_slurm.h);
 * command-line flags override them. Scheduling only: not part of the
 * resolved config (config.json), so they never change what a run measures.
 * "" / 0 = not set (Slurm's own default). */
typedef struct spill_exp_cluster {
  char partition[64], time[32], mem[32], constraint[128];
  int cpus_per_task, array_max;
} spill_exp_cluster;

typedef struct spill_exp_config {
  char source[SPILL_EXP_PATH_MAX]; /* the file it came from ("" for text) */
  char name[64];
  char description[512];
  /* model: a container path, or a generator recipe */
  char model_path[SPILL_EXP_PATH_MAX];
  int model_recipe;
  /* model_gguf: the GGUF the container was imported from, which peer arms
   * run (required with peer arms; the runner checks the container's import
   * provenance against it). n_peer_arms: arms with a peer. */
  char model_gguf[SPILL_EXP_PATH_MAX];
  int n_peer_arms;
  char recipe_preset[16];    /* nano | mini | twin */
  uint64_t recipe_ram, recipe_disk, recipe_seed;
  char recipe_attn_mix[16], recipe_expert_dtype[16], recipe_trunk_dtype[16];
  char recipe_hash[17];      /* 16 hex digits over the canonical recipe */
  /* {"like_trace": FILE}: MoE layers, experts and top-k of a router trace
   * (spill_gen_request_like_trace), the rest from recipe_preset (nano|mini) */
  char recipe_like_trace[SPILL_EXP_PATH_MAX];
  spill_routing_trace_info recipe_trace; /* its shape, read at validation */
  /* workload: one request (prompt, decode_tokens), or workload.bench */
  char *prompt;              /* owned: the prompt text (from prompt or prompt_file); NULL with bench */
  char prompt_file[SPILL_EXP_PATH_MAX];
  int decode_tokens;         /* with bench: bench_tg */
  /* workload.bench: the workload peers report (harness/bench_workload.h):
   * per run, each prompt of bench_prompts (indexes into spill_bench_prompts)
   * prefills bench_pp tokens and generates bench_tg, cold then warm;
   * bench_phases: the phases recorded (1 << SPILL_BENCH_COLD | WARM) */
  int bench;
  int bench_pp, bench_tg;
  int bench_n_prompts;
  int bench_prompts[SPILL_EXP_MAX_BENCH_PROMPTS];
  int bench_phases;
  int prefill_chunked;       /* 1 chunked (engine prefill_chunk), 0 sequential */
  char routing[SPILL_EXP_PATH_MAX + 8]; /* "model" or "trace:FILE" */
  char routing_trace[SPILL_EXP_PATH_MAX]; /* FILE of "trace:FILE" ("" for model) */
  spill_routing_trace_info routing_info;  /* its shape, read at validation */
  /* knobs */
  int n_base;
  spill_exp_knob base[SPILL_EXP_MAX_KNOBS];
  int n_axes;
  spill_exp_axis axes[SPILL_EXP_MAX_AXES];
  int n_arms;                /* >= 1: a config without arms has one arm "base" */
  spill_exp_arm arms[SPILL_EXP_MAX_ARMS];
  /* protocol */
  int repeats, warmup;
  spill_exp_order order;
  uint64_t order_seed;
  int cold;
  char storage_path[SPILL_EXP_PATH_MAX];
  uint64_t emulate_ram;      /* 0 = off */
  /* machine profile (machine.ram/wired/swap/swappiness): a memory cgroup,
   * a locked ballast and swap around the engine; machine_ram 0 = off.
   * Exclusive with emulate_ram. machine_swappiness -1 = the kernel's. */
  uint64_t machine_ram, machine_wired, machine_swap;
  int machine_swappiness;
  spill_exp_hypothesis hyp;
  spill_exp_outputs out;
  spill_exp_cluster cluster;
} spill_exp_config;

/* Parses and validates JSON text. source names the file in messages (may be
 * NULL). On success cfg owns memory: spill_exp_config_free. On failure cfg
 * holds nothing and e says "<source>: <path>: <reason>". */
int spill_exp_config_parse(const char *text, const char *source, spill_exp_config *cfg,
                           spill_err *e);
/* Reads and parses a file (at most 1 MiB). */
int spill_exp_config_load(const char *file, spill_exp_config *cfg, spill_err *e);
void spill_exp_config_free(spill_exp_config *cfg); /* NULL fine */

/* The resolved config as JSON (every default filled in, budgets sorted):
 * a malloc'd NUL-terminated string the caller frees. NULL on no memory. */
char *spill_exp_config_resolved_json(const spill_exp_config *cfg);

/* Number of sweep cells (product of the axes; 1 without a sweep). */
int spill_exp_config_n_cells(const spill_exp_config *cfg);
/* The value of every axis in cell c (mixed radix, last axis fastest; cell
 * order runs the first axis slowest, so budget, placed first, runs upward). */
void spill_exp_config_cell(const spill_exp_config *cfg, int c, const char **values_out);
/* "budget=1G,lookahead=8" for cell c ("-" without a sweep). */
void spill_exp_cell_key(const spill_exp_config *cfg, int c, char *buf, size_t n);

/* The emulated RAM of cell c: its emulate_ram axis value, else
 * machine.emulate_ram (0 = none). */
uint64_t spill_exp_config_emulate_ram(const spill_exp_config *cfg, int c);
/* The machine profile of cell c (machine.* with the cell's wired/swap axis
 * values): 1 and the four outputs (ram, wired, swap, swappiness) filled when the config has
 * one, else 0. */
int spill_exp_config_machine(const spill_exp_config *cfg, int c, uint64_t *ram, uint64_t *wired,
                             uint64_t *swap, int *swappiness);
/* Whether axis key is runner-owned (emulate_ram, wired, swap): not a knob. */
int spill_exp_axis_is_machine(const char *key);
/* The ratio threshold of the hypothesis in cell c (cell_thresholds, else
 * 1 + min_effect for increase, 1 - min_effect for decrease). */
double spill_exp_config_threshold(const spill_exp_config *cfg, int c);

/* Builds the engine config of (cell, arm): defaults, then base, cell values,
 * arm knobs in that order, then the workload's prefill mode and routing
 * (routing_trace); the emulate_ram axis sets usable_ram. A peer arm gets
 * the control arm's config. String knobs point into cfg (valid while it lives). */
int spill_exp_config_engine(const spill_exp_config *cfg, int cell, int arm, spill_config *out,
                            spill_err *e);

/* Whether rows of cfg's workload carry metric i (exp_metrics.h scope; a
 * bench metric also needs its phase in workload.bench.phases). */
int spill_exp_config_has_metric(const spill_exp_config *cfg, int i);
/* The metric reports default to (A/B comparisons, the cliff and ab plots,
 * progress): decode_tok_per_s, or with bench tg_tok_per_s of the first
 * recorded phase; and the hit rate beside it (decode_hit_rate[_PHASE]). */
const char *spill_exp_config_primary_metric(const spill_exp_config *cfg);
const char *spill_exp_config_hit_metric(const spill_exp_config *cfg);
/* The phases a bench run executes: 1 (cold) or 2 (cold, then warm; a cold
 * request runs unrecorded before a warm-only one). */
int spill_exp_config_bench_n_phases(const spill_exp_config *cfg);

/* Checks one cluster setting's text (key partition|time|mem|constraint);
 * NULL when fine, else a static reason. Values go into sbatch scripts, so
 * only Slurm's own spellings pass. */
const char *spill_exp_cluster_check(const char *key, const char *value);


/* 64-bit FNV-1a (used for run keys, recipe and config hashes). */
uint64_t spill_exp_fnv1a(const void *data, size_t n, uint64_t h);
#define SPILL_EXP_FNV_SEED 0xcbf29ce484222325ull

#ifdef __cplusplus
}
#endif
#endif
