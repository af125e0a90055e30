/* research/sim/routing_defaults.h: the calibrated routing statistics that
 * synthetic routing reproduces by default, in one place for `spill sim`
 * (research/sim, drawn routing) and `spill gen` (research/gen, routing that
 * emerges from the generated weights).
 *
 * Sources (docs/SIM.md, docs/GEN.md): per-layer top-10% share, next-token
 * reuse and co-activation precision measured by `spill trace stats --tokens
 * 0:150` on traces/olmoe-1b-7b-299.jsonl (the tuning half); lookahead
 * precision by rank from the published K3 figures
 * (../shared/reference/k3-published.md: 92% at rank 1, 81% over the top 6,
 * linear between them). Plain data: no dependencies, no state.
 */
#ifndef SPILL_SIM_ROUTING_DEFAULTS_H
#define SPILL_SIM_ROUTING_DEFAULTS_H

#ifdef __cplusplus
extern "C" {
#endif

#define SPILL_SIM_DEFAULT_REUSE 0.411
#define SPILL_SIM_DEFAULT_COACT 0.575
/* Per-layer top-10% share of the OLMoE trace's 16 layers. */
extern const double spill_sim_default_top10[16];
/* Lookahead precision by rank: linear from 0.92, mean 0.81 over six ranks. */
#define SPILL_SIM_DEFAULT_LA_RANKS 6
extern const double spill_sim_default_la_precision[SPILL_SIM_DEFAULT_LA_RANKS];

#ifdef __cplusplus
}
#endif
#endif
