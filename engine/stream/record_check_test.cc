// engine/stream/record_check_test.cc: the record checker beside the
// consumer (record_check.h) on the records of a nano container: every
// submitted check comes back exactly once under its tag with the verdict and
// message of an inline spill_record_check, whether the helper thread or the
// consumer (steal) ran it; the helper does run once enough is queued; free
// works with and without a started helper. Run under TSan in CI.
#include "engine/stream/record_check.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "engine/spill.h"
#include "research/gen/spill_gen.h"

namespace {

struct Records {
  spill_container c{};
  std::vector<std::vector<uint8_t>> rec; // good records of the first bank
  std::vector<uint8_t> bad;              // expert 3's record, one payload bit flipped
  std::string file;
  int layer = 0;

  Records() {
    const char *t = std::getenv("TEST_TMPDIR");
    std::string d = std::string(t ? t : "/tmp") + "/rcheck-nano";
    spill_gen_request r = {};
    r.preset = "nano";
    spill_err e = {};
    EXPECT_EQ(spill_gen(d.c_str(), &r, nullptr, nullptr, &e), SPILL_OK) << e.msg;
    EXPECT_EQ(spill_container_open(d.c_str(), &c, &e), SPILL_OK) << e.msg;
    const spill_bank_info &b = c.m.banks[0];
    layer = c.m.arch.n_dense_layers;
    file = b.file;
    for (uint32_t x = 0; x < b.n_experts; x++) {
      std::vector<uint8_t> buf(b.record_bytes);
      EXPECT_EQ(spill_container_read_record(&c, layer, x, buf.data(), 1, &e), SPILL_OK) << e.msg;
      rec.push_back(buf);
    }
    bad = rec[3];
    bad[SPILL_RECORD_HEADER_BYTES + 5] ^= 0x01;
  }
  ~Records() { spill_container_close(&c); }
};

Records &R() {
  static Records *r = new Records();
  return *r;
}

// Collects until n results arrived; returns them by tag.
std::vector<spill_rcheck_result> CollectAll(spill_rcheck *v, int n, int mode) {
  std::vector<spill_rcheck_result> by_tag(n);
  std::vector<int> seen(n, 0);
  int got = 0;
  spill_rcheck_result out[8];
  while (got < n) {
    int k = spill_rcheck_collect(v, out, 8, mode);
    if (k == 0 && mode == SPILL_RCHECK_STEAL) { // the helper holds the rest
      std::this_thread::yield();
      continue;
    }
    EXPECT_GT(k, 0) << "collect returned nothing with " << n - got << " checks pending";
    if (k <= 0) break;
    for (int i = 0; i < k; i++) {
      EXPECT_GE(out[i].tag, 0);
      EXPECT_LT(out[i].tag, n);
      EXPECT_EQ(seen[out[i].tag], 0) << "tag " << out[i].tag << " returned twice";
      seen[out[i].tag] = 1;
      by_tag[out[i].tag] = out[i];
      got++;
    }
  }
  EXPECT_EQ(spill_rcheck_pending(v), 0);
  return by_tag;
}

TEST(RecordCheckTest, EveryCheckReturnsOnceWithTheInlineVerdict) {
  Records &r = R();
  spill_err want = {};
  int want_rc = spill_record_check(&r.c.m, r.file.c_str(), r.layer, 3, r.bad.data(), r.bad.size(),
                                   1, &want);
  ASSERT_EQ(want_rc, SPILL_E_CHECKSUM);
  for (int mode : {SPILL_RCHECK_STEAL, SPILL_RCHECK_BLOCK}) {
    spill_rcheck *v = nullptr;
    spill_err e = {};
    ASSERT_EQ(spill_rcheck_init(&r.c.m, &v, &e), SPILL_OK);
    // Enough bytes that a kick wakes the helper: the same records many
    // times (checks only read them), every 7th one the damaged record.
    const int n = 600;
    for (int t = 0; t < n; t++) {
      uint32_t x = (uint32_t)(t % r.rec.size());
      const std::vector<uint8_t> &b = (t % 7 == 0) ? r.bad : r.rec[x];
      uint32_t id = (t % 7 == 0) ? 3 : x;
      ASSERT_EQ(spill_rcheck_submit(v, t, r.file.c_str(), r.layer, id, b.data(), b.size()), 1);
      if (t % 50 == 49) spill_rcheck_kick(v);
    }
    spill_rcheck_kick(v);
    std::vector<spill_rcheck_result> res = CollectAll(v, n, mode);
    for (int t = 0; t < n; t++) {
      if (t % 7 == 0) {
        EXPECT_EQ(res[t].rc, want_rc) << t;
        EXPECT_STREQ(res[t].err.msg, want.msg) << t;
      } else {
        EXPECT_EQ(res[t].rc, SPILL_OK) << t << ": " << res[t].err.msg;
      }
    }
    spill_rcheck_free(v);
  }
}

TEST(RecordCheckTest, TheHelperRunsOnceEnoughIsQueued) {
  Records &r = R();
  spill_rcheck *v = nullptr;
  spill_err e = {};
  ASSERT_EQ(spill_rcheck_init(&r.c.m, &v, &e), SPILL_OK);
  size_t bytes = 0;
  int n = 0;
  for (; bytes < (size_t)(2u << 20); n++) { // well past the wake threshold
    const std::vector<uint8_t> &b = r.rec[n % r.rec.size()];
    ASSERT_EQ(spill_rcheck_submit(v, n, r.file.c_str(), r.layer, (uint32_t)(n % r.rec.size()),
                                  b.data(), b.size()),
              1);
    bytes += b.size();
  }
  spill_rcheck_kick(v);
  // Without the consumer taking any, finished checks appear: the helper ran.
  spill_rcheck_result out[8];
  int k = 0;
  for (int i = 0; i < 20000 && k == 0; i++) {
    k = spill_rcheck_collect(v, out, 8, SPILL_RCHECK_POLL);
    if (k == 0) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  ASSERT_GT(k, 0) << "the helper never checked anything";
  for (int i = 0; i < k; i++) EXPECT_EQ(out[i].rc, SPILL_OK);
  uint64_t helper_ns = 0, consumer_ns = 0;
  spill_rcheck_times(v, &helper_ns, &consumer_ns);
  EXPECT_GT(helper_ns, 0u);
  // The rest, whoever runs them.
  int left = n - k;
  while (left > 0) {
    int got = spill_rcheck_collect(v, out, 8, SPILL_RCHECK_BLOCK);
    ASSERT_GT(got, 0);
    left -= got;
  }
  EXPECT_EQ(spill_rcheck_pending(v), 0);
  spill_rcheck_free(v);
}

TEST(RecordCheckTest, WithoutAKickTheConsumerRunsEverything) {
  Records &r = R();
  spill_rcheck *v = nullptr;
  spill_err e = {};
  ASSERT_EQ(spill_rcheck_init(&r.c.m, &v, &e), SPILL_OK);
  for (int t = 0; t < 40; t++)
    ASSERT_EQ(spill_rcheck_submit(v, t, r.file.c_str(), r.layer, 0, r.rec[0].data(),
                                  r.rec[0].size()),
              1);
  spill_rcheck_result out[8];
  EXPECT_EQ(spill_rcheck_collect(v, out, 8, SPILL_RCHECK_POLL), 0); // nobody ran any
  std::vector<spill_rcheck_result> res = CollectAll(v, 40, SPILL_RCHECK_STEAL);
  for (const auto &x : res) EXPECT_EQ(x.rc, SPILL_OK);
  uint64_t helper_ns = 0, consumer_ns = 0;
  spill_rcheck_times(v, &helper_ns, &consumer_ns);
  EXPECT_EQ(helper_ns, 0u);
  EXPECT_GT(consumer_ns, 0u);
  spill_rcheck_free(v); // never started
  spill_rcheck_free(nullptr);
}

}  // namespace
