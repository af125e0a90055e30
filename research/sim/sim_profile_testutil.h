// research/sim/sim_profile_testutil.h: reads the engine's per-token profile
// (docs/TRACE.md) for the simulator-vs-engine tests: the mean compute per
// decode token, split the way results/published/k3-twin-analyze.py feeds the
// simulator (routed expert_matmul per expert use; attention, router, tables
// and other per MoE layer; lm_head per token). Test-only.
#ifndef SPILL_SIM_SIM_PROFILE_TESTUTIL_H
#define SPILL_SIM_SIM_PROFILE_TESTUTIL_H

#include <cstdint>
#include <string>

namespace spill_sim_test {

struct DecodeProfile {
  int rows = 0;               // decode rows read
  double expert_ms = 0;       // mean per token: compute_ms.expert_matmul
  double layer_ms = 0;        // ... attention + router + table_build + other
  double token_ms = 0;        // ... lm_head
  double wall_ms = 0;         // ... forward wall time (compute + I/O wait)
  uint64_t reads = 0;         // records read during decode (summed)
  double compute_ms() const { return expert_ms + layer_ms + token_ms; }
};

// Reads the decode rows of a profile JSONL file; rows == 0 if none.
DecodeProfile ReadDecodeProfile(const std::string &path);

}  // namespace spill_sim_test

#endif
