// research/sim/sim_engine_testutil.cc: the nano48 model of the
// simulator-vs-engine tests (sim_engine_testutil.h).
#include "research/sim/sim_engine_testutil.h"

#include <gtest/gtest.h>

#include <cstdlib>

extern "C" {
#include "research/gen/spill_gen.h"
}

namespace spill_sim_test {

std::string TmpDir() {
  const char *t = std::getenv("TEST_TMPDIR");
  return t ? t : "/tmp";
}

void MakeNano48(Nano48 *out) {
  out->model = TmpDir() + "/nano48";
  spill_gen_request req = {};
  req.preset = "nano";
  req.experts = 48;
  spill_err e = {};
  ASSERT_EQ(spill_gen(out->model.c_str(), &req, nullptr, nullptr, &e), 0) << e.msg;
  ASSERT_EQ(spill_info_read(out->model.c_str(), &out->info, &e), 0) << e.msg;
  ASSERT_EQ(spill_plan_model(out->model.c_str(), 4096, 2, 0, 0, &out->plan, &e), 0) << e.msg;
}

}  // namespace spill_sim_test
