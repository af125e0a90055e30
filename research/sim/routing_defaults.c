/* research/sim/routing_defaults.c: the values of routing_defaults.h (their
 * sources are stated there and in docs/SIM.md). */
#include "research/sim/routing_defaults.h"

const double spill_sim_default_top10[16] = {0.329, 0.308, 0.368, 0.331, 0.378, 0.374,
                                            0.425, 0.358, 0.313, 0.328, 0.316, 0.362,
                                            0.325, 0.398, 0.438, 0.393};
const double spill_sim_default_la_precision[SPILL_SIM_DEFAULT_LA_RANKS] = {0.92,  0.876, 0.832,
                                                                           0.788, 0.744, 0.70};
