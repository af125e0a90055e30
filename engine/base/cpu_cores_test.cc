// engine/base/cpu_cores_test.cc: physical cores from a made-up sysfs tree
// (SMT siblings count once, CPUs outside the list are ignored, a CPU
// without topology counts as a core) and on this machine (1..mask size).
#include "engine/base/cpu_cores.h"

#include <gtest/gtest.h>
#include <sched.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>

namespace {

namespace fs = std::filesystem;

void Cpu(const std::string &root, int cpu, int pkg, int core) {
  const std::string d = root + "/cpu" + std::to_string(cpu) + "/topology";
  fs::create_directories(d);
  std::ofstream(d + "/physical_package_id") << pkg << "\n";
  std::ofstream(d + "/core_id") << core << "\n";
}

TEST(CpuCoresTest, SmtSiblingsCountOnce) {
  const char *t = std::getenv("TEST_TMPDIR");
  const std::string root = std::string(t ? t : "/tmp") + "/cpu-topology";
  fs::remove_all(root);
  // 2 packages x 2 cores x 2 threads: cpus 0-7; core ids repeat per package
  for (int cpu = 0; cpu < 8; cpu++) Cpu(root, cpu, cpu / 4, (cpu / 2) % 2);
  const int all[] = {0, 1, 2, 3, 4, 5, 6, 7};
  EXPECT_EQ(spill_cpu_physical_cores_at(root.c_str(), all, 8), 4);
  const int siblings[] = {0, 1};  // one core's two threads
  EXPECT_EQ(spill_cpu_physical_cores_at(root.c_str(), siblings, 2), 1);
  const int across[] = {0, 4};  // core 0 of each package
  EXPECT_EQ(spill_cpu_physical_cores_at(root.c_str(), across, 2), 2);
  const int missing[] = {0, 1, 9};  // cpu9 has no topology: a core of its own
  EXPECT_EQ(spill_cpu_physical_cores_at(root.c_str(), missing, 3), 2);
  EXPECT_EQ(spill_cpu_physical_cores_at(root.c_str(), all, 0), 1);
}

TEST(CpuCoresTest, ThisMachineHasAtLeastOneCoreAndNoMoreThanItsMask) {
  cpu_set_t set;
  CPU_ZERO(&set);
  ASSERT_EQ(sched_getaffinity(0, sizeof set, &set), 0);
  const int n = spill_cpu_physical_cores();
  EXPECT_GE(n, 1);
  EXPECT_LE(n, CPU_COUNT(&set));
}

}  // namespace
