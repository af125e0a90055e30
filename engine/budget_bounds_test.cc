// engine/budget_bounds_test.cc: a RAM budget is bounded by the model and by
// the machine (issue 19 item 4). A budget far above what a model can use
// gives a cache of every expert record, not the budget's worth of slots (a
// 4G budget on the 576 KiB nano model once held 4.36 GB of RSS); a budget
// above 7/8 of usable RAM is refused with the numbers unless force_budget is
// set, in the engine and in spill_plan_model (`spill plan`).
#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

#include "engine/format/container.h"
#include "engine/model/model_memory.h"
#include "engine/spill.h"
#include "research/gen/spill_gen.h"

namespace {

std::string Nano() {
  static std::string dir;
  if (dir.empty()) {
    const char *t = std::getenv("TEST_TMPDIR");
    dir = std::string(t ? t : "/tmp") + "/nano-budget";
    spill_gen_request r = {};
    r.preset = "nano";
    spill_err e = {};
    EXPECT_EQ(spill_gen(dir.c_str(), &r, nullptr, nullptr, &e), SPILL_OK) << e.msg;
  }
  return dir;
}

uint64_t StatusBytes(const char *key) {
  FILE *f = fopen("/proc/self/status", "r");
  char line[256];
  uint64_t v = 0;
  while (f && fgets(line, sizeof line, f))
    if (!strncmp(line, key, strlen(key))) v = strtoull(line + strlen(key), nullptr, 10) * 1024;
  if (f) fclose(f);
  return v;
}

TEST(BudgetBoundsTest, CacheNeverHoldsMoreSlotsThanTheModelHasExperts) {
  spill_info info;
  spill_err e = {};
  ASSERT_EQ(spill_info_read(Nano().c_str(), &info, &e), SPILL_OK) << e.msg;
  const uint64_t records = (uint64_t)info.n_experts * (uint64_t)(info.n_layers - info.n_dense_layers);
  spill_config c;
  spill_config_default(&c);
  ASSERT_EQ(spill_config_set(&c, "budget", "4G", &e), SPILL_OK);
  ASSERT_EQ(spill_config_set(&c, "usable_ram", "64G", &e), SPILL_OK);
  c.storage = SPILL_STORAGE_PAGECACHE;
  uint64_t before = StatusBytes("VmRSS:");
  spill_engine *eng = nullptr;
  ASSERT_EQ(spill_engine_open(Nano().c_str(), &c, &eng, &e), SPILL_OK) << e.msg;
  const spill_plan *p = spill_engine_plan(eng);
  EXPECT_EQ(p->cache_slots, records);
  EXPECT_EQ(p->expert_cache, records * p->record_bytes);
  EXPECT_NE(std::string(spill_engine_warnings(eng)).find("more than the model can use"),
            std::string::npos)
      << spill_engine_warnings(eng);
  // The open engine holds the model, not the budget (< 64 MiB more RSS
  // for a 4 GiB budget; the nano model with every record is ~1 MiB).
  EXPECT_LT(StatusBytes("VmRSS:") - before, 64ull << 20);
  // Raising the budget in place is bounded the same way.
  ASSERT_EQ(spill_engine_set_budget(eng, 8ull << 30, &e), SPILL_OK) << e.msg;
  EXPECT_EQ(spill_engine_plan(eng)->cache_slots, records);
  spill_engine_close(eng);
}

// The engine's plan counts the state and scratch of the knobs it runs with
// (prefill_chunk, act_quant, threads): engine/model's memory formula, the
// bytes its model allocates (engine/model/model_memory_test.cc), not the
// defaults' (the plan used to count one token's activations while the
// model allocated a prefill chunk's).
TEST(BudgetBoundsTest, PlanCountsTheScratchOfTheEnginesKnobs) {
  spill_err e = {};
  spill_config c;
  spill_config_default(&c);
  ASSERT_EQ(spill_config_set(&c, "usable_ram", "64G", &e), SPILL_OK);
  ASSERT_EQ(spill_config_set(&c, "prefill_chunk", "64", &e), SPILL_OK);
  ASSERT_EQ(spill_config_set(&c, "act_quant", "q8", &e), SPILL_OK);
  ASSERT_EQ(spill_config_set(&c, "threads", "2", &e), SPILL_OK);
  c.storage = SPILL_STORAGE_PAGECACHE;
  spill_engine *eng = nullptr;
  ASSERT_EQ(spill_engine_open(Nano().c_str(), &c, &eng, &e), SPILL_OK) << e.msg;
  const spill_plan p = *spill_engine_plan(eng);
  spill_engine_close(eng);
  spill_container ct;
  ASSERT_EQ(spill_container_open(Nano().c_str(), &ct, &e), SPILL_OK) << e.msg;
  const spill_model_mem_opts mo = {c.ctx, 2, 64, 1, spill_model_rvq3_qlut(ct.m.expert_dtype), 0, 0};
  spill_model_mem mem;
  spill_model_memory(&ct.m.arch, &mo, &mem);
  spill_container_close(&ct);
  EXPECT_EQ(p.scratch.total, mem.scratch_total);
  EXPECT_EQ(p.state.total, mem.state_total);
  spill_plan d;  // spill_plan_model: the knobs' defaults (chunk 16, f32, 1 thread)
  ASSERT_EQ(spill_plan_model(Nano().c_str(), c.ctx, 1, 0, 64ull << 30, &d, &e), SPILL_OK) << e.msg;
  EXPECT_GT(p.scratch.total, d.scratch.total);
  EXPECT_EQ(p.floor - p.scratch.total, d.floor - d.scratch.total);
}

TEST(BudgetBoundsTest, BudgetAboveTheMachineIsRefusedUnlessForced) {
  // usable RAM 1 GiB: cap 896 MiB. A 2G budget on a model that could use
  // all of it (every record cached is less, so bound the model too: the
  // refusal must come from the machine side only when the model could use
  // more than the cap).
  spill_plan plan;
  spill_err e = {};
  // nano cannot use 2G: its use is model_max, under the cap -> accepted.
  ASSERT_EQ(spill_plan_model(Nano().c_str(), 4096, 2, 2ull << 30, 1ull << 30, &plan, &e), SPILL_OK)
      << e.msg;
  EXPECT_TRUE(plan.budget_above_model);
  // A machine too small even for nano's every record: usable = floor, so
  // 7/8 of it is below the floor + records the budget asks for.
  spill_plan base;
  ASSERT_EQ(spill_plan_model(Nano().c_str(), 4096, 2, 0, 1ull << 30, &base, &e), SPILL_OK);
  const uint64_t usable = base.model_max;  // cap = 7/8 of it < model_max
  const uint64_t budget = base.model_max;
  e = {};
  EXPECT_EQ(spill_plan_model(Nano().c_str(), 4096, 2, budget, usable, &plan, &e),
            SPILL_E_RAM_BUDGET);
  EXPECT_NE(std::string(e.msg).find("this machine can give (7/8 of"), std::string::npos) << e.msg;
  EXPECT_NE(std::string(e.msg).find("--force-budget"), std::string::npos) << e.msg;
  EXPECT_EQ(plan.budget, budget);  // filled for reporting
  // The engine refuses it too, and accepts it with force_budget.
  spill_config c;
  spill_config_default(&c);
  c.budget_bytes = budget;
  c.usable_ram = usable;
  c.storage = SPILL_STORAGE_PAGECACHE;
  spill_engine *eng = nullptr;
  e = {};
  EXPECT_EQ(spill_engine_open(Nano().c_str(), &c, &eng, &e), SPILL_E_RAM_BUDGET);
  ASSERT_EQ(spill_config_set(&c, "force_budget", "true", &e), SPILL_OK) << e.msg;
  e = {};
  ASSERT_EQ(spill_engine_open(Nano().c_str(), &c, &eng, &e), SPILL_OK) << e.msg;
  EXPECT_TRUE(spill_engine_plan(eng)->budget_forced);
  EXPECT_NE(std::string(spill_engine_warnings(eng)).find("force_budget"), std::string::npos);
  spill_engine_close(eng);
}

TEST(BudgetBoundsTest, RefusalBelowTheFloorPrintsMeaningfulSizes) {
  spill_plan plan;
  spill_err e = {};
  EXPECT_EQ(spill_plan_model(Nano().c_str(), 4096, 2, 4096, 0, &plan, &e), SPILL_E_RAM_BUDGET);
  // nano's floor is well under 0.01 GiB: "0.00 GiB is below 0.00 GiB" helps nobody
  EXPECT_EQ(std::string(e.msg).find("0.00 GiB"), std::string::npos) << e.msg;
  EXPECT_NE(std::string(e.msg).find("budget 4.00 KiB is below the RAM floor of "),
            std::string::npos)
      << e.msg;
}

}  // namespace
