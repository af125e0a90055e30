// research/sim/sim_engine_testutil.h: the model the simulator-vs-engine tests
// (sim_engine_test, sim_engine_timing_test) run on, made one way: the nano
// preset with 48 experts per MoE layer generated into TEST_TMPDIR, its info
// and its plan (ctx 4096, 2 threads, no explicit budget, this machine's
// usable RAM). Test-only: it links the engine and the generator, so only
// test targets may depend on it.
#ifndef SPILL_SIM_SIM_ENGINE_TESTUTIL_H
#define SPILL_SIM_SIM_ENGINE_TESTUTIL_H

#include <string>

extern "C" {
#include "engine/spill.h"
}

namespace spill_sim_test {

// TEST_TMPDIR, or /tmp outside Bazel.
std::string TmpDir();

struct Nano48 {
  std::string model;  // the model directory, TmpDir() + "/nano48"
  spill_info info;
  spill_plan plan;
};

// Generates the model and reads its info and plan; fails the current test
// with a gtest assertion on any error (call it in ASSERT_NO_FATAL_FAILURE).
void MakeNano48(Nano48 *out);

}  // namespace spill_sim_test

#endif
