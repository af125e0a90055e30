// engine/stream/fault_test.cc: I/O faults injected into a running ENGINE
// (spill_engine_open + spill_generate on a nano container) through the
// reader's fault hook, installed with spill_stream_test_fault_hook.
//
// Guarantees checked, for every storage/backend/cache arm:
// - EIO on an expert read fails that generate call with SPILL_E_IO and a
//   message naming the bank file; the engine stays usable: the next generate
//   on the same engine gives exactly the tokens of a clean run.
// - Short reads (every first attempt returns a fraction) are retried: same
//   tokens as a clean run, status OK.
// - Latency spikes (20 ms on some reads) change timing only: same tokens.
// - A bank truncated under a running engine ends the call with
//   SPILL_E_SHORT_READ naming the file, never a hang (the bazel test timeout
//   is the hang guard); restoring the file restores identical output.
#include <gtest/gtest.h>

#include <atomic>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include <unistd.h>

#include "engine/spill.h"
#include "engine/stream/expert_stream.h"
#include "research/gen/spill_gen.h"

namespace {

const std::string &Nano() {
  static std::string dir;
  if (dir.empty()) {
    const char *t = std::getenv("TEST_TMPDIR");
    std::string d = std::string(t ? t : "/tmp") + "/fault-nano";
    spill_gen_request r = {};
    r.preset = "nano";
    spill_err e = {};
    int rc = spill_gen(d.c_str(), &r, nullptr, nullptr, &e);
    EXPECT_EQ(rc, SPILL_OK) << e.msg;
    dir = d;
  }
  return dir;
}

// A switchable hook: faults fire only while armed, from the `skip`-th
// matching attempt on, `times` times (0 = forever).
struct Injector {
  std::atomic<int> armed{0};
  spill_io_fault fault{};
  int first_attempt_only = 0;
  uint64_t skip = 0, times = 0;
  std::atomic<uint64_t> seen{0}, fired{0};

  static void Hook(void *ctx, const spill_io_fault_site *site, spill_io_fault *out) {
    Injector *in = static_cast<Injector *>(ctx);
    if (!in->armed.load()) return;
    if (in->first_attempt_only && site->attempt != 0) return;
    uint64_t n = in->seen.fetch_add(1);
    if (n < in->skip) return;
    if (in->times && n - in->skip >= in->times) return;
    in->fired.fetch_add(1);
    *out = in->fault;
  }
};

struct Arm {
  const char *name;
  spill_storage storage;
  spill_io_backend_kind backend;
  int64_t cache_slots;
};

const Arm kArms[] = {
    {"pagecache-pread-nocache", SPILL_STORAGE_PAGECACHE, SPILL_IO_PREAD, 0},
    {"pagecache-pread-cache8", SPILL_STORAGE_PAGECACHE, SPILL_IO_PREAD, 8},
    {"direct-pread-cache8", SPILL_STORAGE_DIRECT, SPILL_IO_PREAD, 8},
    {"direct-uring-cache8", SPILL_STORAGE_DIRECT, SPILL_IO_URING, 8},
    {"pagecache-uring-nocache", SPILL_STORAGE_PAGECACHE, SPILL_IO_URING, 0},
};

spill_config Cfg(const Arm &a) {
  spill_config c;
  spill_config_default(&c);
  c.ctx = 128;
  c.io_threads = 2;
  c.storage = a.storage;
  c.io_backend = a.backend;
  c.cache_slots = a.cache_slots;
  c.verify = 1;
  return c;
}

int Collect(void *user, int token, const char *, const spill_run_stats *) {
  static_cast<std::vector<int> *>(user)->push_back(token);
  return 0;
}

struct GenRun {
  int rc = 0;
  std::string msg;
  std::vector<int> tokens;
};

GenRun Gen(spill_engine *eng, int n_new = 12) {
  GenRun r;
  spill_err e = {};
  int toks[64], n = 0;
  EXPECT_EQ(spill_tokenize(eng, "Faults must not change a token", 1, toks, 64, &n, &e),
            SPILL_OK);
  spill_sampling s = {0.0f, 0, 1.0f, 1};
  spill_run_stats st;
  r.rc = spill_generate(eng, toks, n, n_new, &s, Collect, &r.tokens, nullptr, &st, &e);
  r.msg = e.msg;
  return r;
}

// Clean reference tokens of an arm (no hook installed).
GenRun Clean(const Arm &a) {
  spill_stream_test_fault_hook(nullptr, nullptr);
  spill_config c = Cfg(a);
  spill_engine *eng = nullptr;
  spill_err e = {};
  GenRun r;
  r.rc = spill_engine_open(Nano().c_str(), &c, &eng, &e);
  if (r.rc != SPILL_OK) {
    r.msg = e.msg;
    return r;
  }
  r = Gen(eng);
  spill_engine_close(eng);
  return r;
}

// Opens an engine whose stream consults `in`.
spill_engine *OpenWith(const Arm &a, Injector *in) {
  spill_stream_test_fault_hook(&Injector::Hook, in);
  spill_config c = Cfg(a);
  spill_engine *eng = nullptr;
  spill_err e = {};
  int rc = spill_engine_open(Nano().c_str(), &c, &eng, &e);
  spill_stream_test_fault_hook(nullptr, nullptr);
  EXPECT_EQ(rc, SPILL_OK) << a.name << ": " << e.msg;
  return eng;
}

bool UringUsable(const Arm &a, const GenRun &clean) {
  if (a.backend != SPILL_IO_URING) return true;
  if (clean.rc == SPILL_OK) return true;
  printf("skipping %s: io_uring unavailable here (%s)\n", a.name, clean.msg.c_str());
  return false;
}

TEST(EngineFaultTest, EioFailsTheTokenAndTheNextGenerateMatchesACleanRun) {
  for (const Arm &a : kArms) {
    SCOPED_TRACE(a.name);
    GenRun clean = Clean(a);
    if (!UringUsable(a, clean)) continue;
    ASSERT_EQ(clean.rc, SPILL_OK) << clean.msg;
    ASSERT_EQ(clean.tokens.size(), 12u);
    Injector in;
    in.fault.kind = SPILL_IO_FAULT_ERROR;
    in.fault.err = 0;  // EIO
    in.skip = 20;      // let the prompt's first reads pass
    in.times = 1;
    spill_engine *eng = OpenWith(a, &in);
    ASSERT_NE(eng, nullptr);
    in.armed = 1;
    GenRun bad = Gen(eng);
    EXPECT_EQ(bad.rc, SPILL_E_IO) << bad.msg;
    EXPECT_EQ(in.fired.load(), 1u);
    EXPECT_NE(bad.msg.find("experts-00"), std::string::npos) << bad.msg;
    // What was produced before the fault is a prefix of the clean output:
    // never a wrong token.
    ASSERT_LE(bad.tokens.size(), clean.tokens.size());
    EXPECT_TRUE(std::equal(bad.tokens.begin(), bad.tokens.end(), clean.tokens.begin()));
    in.armed = 0;
    GenRun again = Gen(eng);
    EXPECT_EQ(again.rc, SPILL_OK) << again.msg;
    EXPECT_EQ(again.tokens, clean.tokens);
    spill_engine_close(eng);
  }
}

TEST(EngineFaultTest, EioOnEveryReadFailsEveryCallThenRecovers) {
  const Arm &a = kArms[1];
  GenRun clean = Clean(a);
  ASSERT_EQ(clean.rc, SPILL_OK) << clean.msg;
  Injector in;
  in.fault.kind = SPILL_IO_FAULT_ERROR;
  in.fault.err = 5;
  spill_engine *eng = OpenWith(a, &in);
  ASSERT_NE(eng, nullptr);
  in.armed = 1;
  for (int i = 0; i < 3; i++) {
    GenRun bad = Gen(eng);
    EXPECT_EQ(bad.rc, SPILL_E_IO) << bad.msg;
    EXPECT_TRUE(bad.tokens.empty());
  }
  in.armed = 0;
  GenRun again = Gen(eng);
  EXPECT_EQ(again.rc, SPILL_OK) << again.msg;
  EXPECT_EQ(again.tokens, clean.tokens);
  spill_engine_close(eng);
}

TEST(EngineFaultTest, ShortReadsAreRetriedAndChangeNothing) {
  for (const Arm &a : kArms) {
    SCOPED_TRACE(a.name);
    GenRun clean = Clean(a);
    if (!UringUsable(a, clean)) continue;
    ASSERT_EQ(clean.rc, SPILL_OK) << clean.msg;
    Injector in;
    in.fault.kind = SPILL_IO_FAULT_SHORT;
    in.fault.short_len = 1000;  // direct mode rounds this to one 4 KiB page
    in.first_attempt_only = 1;
    spill_engine *eng = OpenWith(a, &in);
    ASSERT_NE(eng, nullptr);
    in.armed = 1;
    GenRun r = Gen(eng);
    EXPECT_EQ(r.rc, SPILL_OK) << r.msg;
    EXPECT_EQ(r.tokens, clean.tokens);
    EXPECT_GT(in.fired.load(), 0u);
    spill_engine_close(eng);
  }
}

TEST(EngineFaultTest, LatencySpikesChangeTimingOnly) {
  for (const Arm &a : kArms) {
    SCOPED_TRACE(a.name);
    GenRun clean = Clean(a);
    if (!UringUsable(a, clean)) continue;
    ASSERT_EQ(clean.rc, SPILL_OK) << clean.msg;
    Injector in;
    in.fault.kind = SPILL_IO_FAULT_DELAY;
    in.fault.delay_ns = 20 * 1000 * 1000;
    in.skip = 3;
    in.times = 6;
    spill_engine *eng = OpenWith(a, &in);
    ASSERT_NE(eng, nullptr);
    in.armed = 1;
    GenRun r = Gen(eng);
    EXPECT_EQ(r.rc, SPILL_OK) << r.msg;
    EXPECT_EQ(r.tokens, clean.tokens);
    EXPECT_EQ(in.fired.load(), 6u);
    spill_engine_close(eng);
  }
}

TEST(EngineFaultTest, BankTruncatedWhileRunningFailsInsteadOfHanging) {
  // The reader retries short reads until EOF; a bank cut short under a
  // running engine must end the call with a short-read error naming the
  // file, never spin. Restoring the file makes the engine whole again.
  const char *t = std::getenv("TEST_TMPDIR");
  std::string dir = std::string(t ? t : "/tmp") + "/fault-nano-trunc";
  std::string cmd = "rm -rf '" + dir + "' && cp -r '" + Nano() + "' '" + dir + "'";
  ASSERT_EQ(system(cmd.c_str()), 0);
  std::string bank = dir + "/experts-002.bin";
  std::string saved = dir + "/experts-002.bin.orig";
  ASSERT_EQ(system(("cp '" + bank + "' '" + saved + "'").c_str()), 0);
  spill_config c = Cfg(kArms[0]);
  spill_engine *eng = nullptr;
  spill_err e = {};
  ASSERT_EQ(spill_engine_open(dir.c_str(), &c, &eng, &e), SPILL_OK) << e.msg;
  GenRun clean = Gen(eng);
  ASSERT_EQ(clean.rc, SPILL_OK) << clean.msg;
  ASSERT_EQ(truncate(bank.c_str(), 4096 + 4096 / 2), 0);  // header + half a record
  GenRun bad = Gen(eng);
  EXPECT_EQ(bad.rc, SPILL_E_SHORT_READ) << bad.msg;
  EXPECT_NE(bad.msg.find("experts-002.bin"), std::string::npos) << bad.msg;
  ASSERT_EQ(system(("cp '" + saved + "' '" + bank + "'").c_str()), 0);
  GenRun again = Gen(eng);
  EXPECT_EQ(again.rc, SPILL_OK) << again.msg;
  EXPECT_EQ(again.tokens, clean.tokens);
  spill_engine_close(eng);
}

}  // namespace
