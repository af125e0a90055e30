// Tests of spill_disk_probe (engine/spill_probe.c), the one O_DIRECT probe
// of `spill roofline` and of env.json: byte and read counts (timing is not
// asserted), the record list, the sequential pass over the largest file,
// and its errors.
#include <gtest/gtest.h>

#include <cstdlib>
#include <fstream>
#include <string>
#include <sys/stat.h>

#include "engine/spill.h"
#include "research/gen/spill_gen.h"

namespace {

std::string Tmp(const std::string &name) {
  const char *t = std::getenv("TEST_TMPDIR");
  return std::string(t ? t : "/tmp") + "/" + name;
}

const std::string &Nano() {
  static std::string dir;
  if (dir.empty()) {
    dir = Tmp("probe-nano");
    spill_gen_request r = {};
    r.preset = "nano";
    spill_err e = {};
    EXPECT_EQ(spill_gen(dir.c_str(), &r, nullptr, nullptr, &e), SPILL_OK) << e.msg;
  }
  return dir;
}

TEST(DiskProbe, RecordsModeReadsWholeRecords) {
  spill_info info;
  spill_err e = {};
  ASSERT_EQ(spill_info_read(Nano().c_str(), &info, &e), SPILL_OK) << e.msg;
  spill_disk_probe_opts o = {};
  o.threads = 2;
  o.seconds = 0.1;
  spill_disk_probe_result r;
  ASSERT_EQ(spill_disk_probe(Nano().c_str(), &o, &r, &e), SPILL_OK) << e.msg;
  EXPECT_EQ(r.record_bytes, info.record_bytes);
  EXPECT_EQ(r.threads, 2);
  EXPECT_GT(r.reads, 0u);
  EXPECT_EQ(r.bytes, r.reads * r.record_bytes);
  EXPECT_GT(r.bytes_per_s, 0);
  EXPECT_GT(r.p50_ms, 0);
  // a record list: only those records; one out of range is refused
  const uint64_t recs[2] = {0, (1ull << 32) | 3};
  o.records = recs;
  o.n_records = 2;
  ASSERT_EQ(spill_disk_probe(Nano().c_str(), &o, &r, &e), SPILL_OK) << e.msg;
  EXPECT_GT(r.reads, 0u);
  const uint64_t bad[1] = {(uint64_t)info.n_experts};
  o.records = bad;
  o.n_records = 1;
  EXPECT_EQ(spill_disk_probe(Nano().c_str(), &o, &r, &e), SPILL_E_INVALID_ARG);
  EXPECT_NE(std::string(e.msg).find("out of range"), std::string::npos) << e.msg;
  o.n_records = 0;
  EXPECT_EQ(spill_disk_probe(Nano().c_str(), &o, &r, &e), SPILL_E_INVALID_ARG);
}

TEST(DiskProbe, RecordsModeNeedsAContainer) {
  const std::string dir = Tmp("probe-empty");
  mkdir(dir.c_str(), 0755);
  spill_disk_probe_result r;
  spill_err e = {};
  EXPECT_LT(spill_disk_probe(dir.c_str(), nullptr, &r, &e), 0);
  EXPECT_NE(std::string(e.msg), "");
}

TEST(DiskProbe, SequentialReadsTheLargestFileOnce) {
  const std::string dir = Tmp("probe-seq");
  mkdir(dir.c_str(), 0755);
  {
    std::ofstream(dir + "/small.bin") << std::string(8192, 'a');
    std::ofstream(dir + "/.hidden-but-larger") << std::string(1 << 20, 'h');
    std::ofstream(dir + "/big.bin") << std::string(50 * 4096, 'b');  // 200 KiB
  }
  spill_disk_probe_opts o = {};
  o.mode = SPILL_PROBE_SEQUENTIAL;
  o.block_bytes = 64 << 10;
  spill_disk_probe_result r;
  spill_err e = {};
  ASSERT_EQ(spill_disk_probe(dir.c_str(), &o, &r, &e), SPILL_OK) << e.msg;
  EXPECT_EQ(r.file, dir + "/big.bin");
  EXPECT_EQ(r.bytes, 50u * 4096);  // to EOF: 3 full blocks and a short one
  EXPECT_EQ(r.reads, 4u);
  EXPECT_EQ(r.threads, 1);
  o.max_bytes = 128 << 10;  // stops at the limit
  ASSERT_EQ(spill_disk_probe(dir.c_str(), &o, &r, &e), SPILL_OK) << e.msg;
  EXPECT_EQ(r.bytes, 128u << 10);
  EXPECT_EQ(r.reads, 2u);
}

TEST(DiskProbe, SequentialErrorsNameTheDirectory) {
  const std::string dir = Tmp("probe-nofile");
  mkdir(dir.c_str(), 0755);
  spill_disk_probe_opts o = {};
  o.mode = SPILL_PROBE_SEQUENTIAL;
  spill_disk_probe_result r;
  spill_err e = {};
  EXPECT_EQ(spill_disk_probe(dir.c_str(), &o, &r, &e), SPILL_E_IO);
  EXPECT_EQ(std::string(e.msg), "disk probe: no file to read in " + dir);
  EXPECT_EQ(spill_disk_probe((dir + "/missing").c_str(), &o, &r, &e), SPILL_E_IO);
  EXPECT_EQ(spill_disk_probe(nullptr, &o, &r, &e), SPILL_E_INVALID_ARG);
}

}  // namespace
