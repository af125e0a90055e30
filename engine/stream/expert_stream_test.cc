// engine/stream/expert_stream_test.cc: the stream's record checks, driven
// directly through spill_expert_source on a nano container in TEST_TMPDIR.
//
// With verify on, records are checked beside the consumer (record_check.h);
// checked here, for every storage/backend/cache arm:
// - every delivered record is byte-identical to a pread of it, and the
//   deterministic counters (requested, hits, misses, reads, bytes) are the
//   same with verify on and off;
// - a damaged payload or header of one expert fails exactly that expert's
//   delivery, with the status and message an inline spill_record_check
//   gives, whether it was read on demand or by a prefetch (landed, or still
//   in flight when the demand joins it); the other experts of the layer are
//   delivered and the stream stays usable;
// - a preload reads every record into the cache with multi-record reads:
//   afterwards every request hits and delivers the right bytes, with no
//   demand read; a smaller cache keeps the first records; a damaged record
//   fails the preload with the inline message and is read again on demand;
// - a random mix of requests, prefetches, abandoned requests, clears,
//   resizes, verify toggles and closes with reads and checks in flight
//   delivers only correct records (run under TSan in CI).
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <random>
#include <string>
#include <vector>

#include "engine/spill.h"
#include "engine/stream/expert_stream.h"
#include "research/gen/spill_gen.h"

namespace {

namespace fs = std::filesystem;

std::string TmpDir() {
  const char *t = std::getenv("TEST_TMPDIR");
  return t ? t : "/tmp";
}

const std::string &Nano() {
  static std::string dir;
  if (dir.empty()) {
    std::string d = TmpDir() + "/stream-nano";
    spill_gen_request r = {};
    r.preset = "nano";
    spill_err e = {};
    int rc = spill_gen(d.c_str(), &r, nullptr, nullptr, &e);
    EXPECT_EQ(rc, SPILL_OK) << e.msg;
    dir = d;
  }
  return dir;
}

struct Arm {
  const char *name;
  int storage; // 0 direct, 1 pagecache, 2 mmap
  int backend; // 0 pread, 1 io_uring
  uint32_t cache_slots;
};

const Arm kArms[] = {
    {"direct-pread-nocache", 0, 0, 0},   {"direct-pread-cache64", 0, 0, 64},
    {"pagecache-pread-cache64", 1, 0, 64}, {"direct-uring-cache64", 0, 1, 64},
    {"pagecache-uring-nocache", 1, 1, 0}, {"mmap-pread", 2, 0, 0},
};

// An open container plus the reference bytes of every record (pread).
struct Model {
  spill_container c{};
  std::vector<int> layers;                // MoE layers
  std::vector<std::vector<std::string>> rec; // [moe index][expert] bytes
  uint32_t n_experts = 0;

  explicit Model(const std::string &dir) {
    spill_err e = {};
    EXPECT_EQ(spill_container_open(dir.c_str(), &c, &e), SPILL_OK) << e.msg;
    const spill_manifest &m = c.m;
    n_experts = m.banks[0].n_experts;
    std::vector<char> buf(m.record_bytes);
    for (int b = 0; b < m.n_banks; b++) {
      const spill_bank_info &bank = m.banks[b];
      layers.push_back(m.arch.n_dense_layers + b);
      rec.emplace_back();
      for (uint32_t x = 0; x < n_experts; x++) { // raw bytes, damaged or not
        off_t off = (off_t)(bank.data_offset + (uint64_t)x * bank.record_bytes);
        EXPECT_EQ(pread(c.bank_fd[b], buf.data(), buf.size(), off), (ssize_t)buf.size());
        rec.back().emplace_back(buf.data(), buf.size());
      }
    }
  }
  ~Model() { spill_container_close(&c); }
  const std::string &Ref(int layer, uint32_t x) const {
    return rec[layer - layers[0]][x];
  }
};

spill_stream *Open(const Model &md, const Arm &a, int verify, spill_err *e, int *rc,
                   int io_threads = 2) {
  spill_stream_opts o = {};
  o.storage = a.storage;
  o.backend = a.backend;
  o.io_threads = io_threads;
  o.io_depth = 8;
  o.cache_slots = a.cache_slots;
  o.policy = "lru";
  o.seed = 1;
  o.verify = verify;
  o.overlap = 1;
  spill_stream *s = nullptr;
  *rc = spill_stream_open(&md.c, &o, &s, e);
  return *rc == SPILL_OK ? s : nullptr;
}

// Requests ids of layer, consumes every delivery (checking its bytes) and
// releases it. Returns the first error (or OK) and the ids delivered.
int ConsumeLayer(spill_stream *s, const Model &md, int layer, const std::vector<uint32_t> &ids,
                 std::vector<uint32_t> *delivered, spill_err *e) {
  spill_expert_source src;
  spill_stream_source(s, &src);
  int rc = src.request(src.ctx, layer, ids.data(), (int)ids.size(), e);
  if (rc < 0) return rc;
  for (size_t k = 0; k < ids.size(); k++) {
    int idx = -1;
    const uint8_t *r = nullptr;
    rc = src.next_ready(src.ctx, &idx, &r, e);
    if (rc < 0) return rc;
    EXPECT_GE(idx, 0);
    EXPECT_LT(idx, (int)ids.size());
    const std::string &ref = md.Ref(layer, ids[idx]);
    EXPECT_EQ(0, memcmp(r, ref.data(), ref.size()))
        << "layer " << layer << " expert " << ids[idx] << ": wrong bytes";
    if (delivered) delivered->push_back(ids[idx]);
    src.release(src.ctx, layer, ids[idx]);
  }
  return SPILL_OK;
}

std::vector<uint32_t> AllIds(uint32_t n) {
  std::vector<uint32_t> v(n);
  for (uint32_t i = 0; i < n; i++) v[i] = i;
  return v;
}

TEST(ExpertStreamVerifyTest, SameRecordsAndCountersWithVerifyOnAndOff) {
  Model md(Nano());
  for (const Arm &a : kArms) {
    SCOPED_TRACE(a.name);
    spill_stream_counters k[2];
    for (int verify : {0, 1}) {
      spill_err e = {};
      int rc;
      spill_stream *s = Open(md, a, verify, &e, &rc);
      if (rc == SPILL_E_UNSUPPORTED) {
        printf("skipping %s: io_uring unavailable here (%s)\n", a.name, e.msg);
        goto next_arm;
      }
      ASSERT_EQ(rc, SPILL_OK) << e.msg;
      {
        spill_expert_source src;
        spill_stream_source(s, &src);
        for (int round = 0; round < 3; round++)
          for (size_t li = 0; li < md.layers.size(); li++) {
            int layer = md.layers[li];
            if (li + 1 < md.layers.size()) { // prefetch half of the next layer
              std::vector<uint32_t> hint;
              for (uint32_t x = round % 2; x < md.n_experts; x += 2) hint.push_back(x);
              ASSERT_EQ(src.prefetch(src.ctx, md.layers[li + 1], hint.data(), (int)hint.size(), &e),
                        SPILL_OK)
                  << e.msg;
            }
            ASSERT_EQ(ConsumeLayer(s, md, layer, AllIds(md.n_experts), nullptr, &e), SPILL_OK)
                << e.msg;
          }
        ASSERT_EQ(spill_stream_quiesce(s, &e), SPILL_OK) << e.msg;
        spill_stream_get_counters(s, &k[verify]);
        const spill_stream_counters &c = k[verify];
        if (verify)
          EXPECT_GT(c.verify_helper_ns + c.verify_consumer_ns, 0u);
        else
          EXPECT_EQ(c.verify_helper_ns + c.verify_consumer_ns, 0u);
        EXPECT_EQ(c.requested, c.demand_hits + c.demand_misses);
        EXPECT_EQ(c.bytes_read_demand + c.bytes_read_spec, c.reads * md.c.m.record_bytes);
      }
      spill_stream_close(s);
    }
    EXPECT_EQ(k[0].requested, k[1].requested);
    EXPECT_EQ(k[0].demand_hits, k[1].demand_hits);
    EXPECT_EQ(k[0].demand_misses, k[1].demand_misses);
    EXPECT_EQ(k[0].reads, k[1].reads);
    EXPECT_EQ(k[0].bytes_read_demand, k[1].bytes_read_demand);
    EXPECT_EQ(k[0].bytes_read_spec, k[1].bytes_read_spec);
  next_arm:;
  }
}

// A copy of nano with one byte of (layer, expert)'s record flipped at
// offset `at` inside the record.
std::string Damaged(const std::string &name, int layer, uint32_t expert, uint64_t at) {
  std::string d = TmpDir() + "/" + name;
  fs::remove_all(d);
  fs::copy(Nano(), d, fs::copy_options::recursive);
  spill_container c{};
  spill_err e = {};
  EXPECT_EQ(spill_container_open(d.c_str(), &c, &e), SPILL_OK) << e.msg;
  const spill_bank_info *b = spill_container_bank(&c, layer);
  uint64_t off = b->data_offset + (uint64_t)expert * b->record_bytes + at;
  char path[4096];
  EXPECT_EQ(spill_container_path(&c, b->file, path, sizeof path, &e), SPILL_OK);
  spill_container_close(&c);
  FILE *f = fopen(path, "r+b");
  EXPECT_NE(f, nullptr);
  fseek(f, (long)off, SEEK_SET);
  int ch = fgetc(f);
  fseek(f, (long)off, SEEK_SET);
  fputc(ch ^ 0x10, f);
  fclose(f);
  return d;
}

void ExpectDamageReportedLikeInline(const std::string &dir, int layer, uint32_t bad) {
  Model md(dir);
  // The inline check's verdict on the damaged record.
  std::vector<char> buf(md.c.m.record_bytes);
  spill_err want = {};
  int want_rc = spill_container_read_record(&md.c, layer, bad, buf.data(), 1, &want);
  ASSERT_LT(want_rc, 0);
  for (const Arm &a : kArms) {
    // 0: read on demand; 1: prefetched and landed (failed) before the
    // request; 2: prefetched and still in flight, so the demand joins it
    // (and, when it fails, reads again: same verdict).
    for (int prefetch : {0, 1, 2}) {
      SCOPED_TRACE(std::string(a.name) + " prefetch mode " + std::to_string(prefetch));
      spill_err e = {};
      int rc;
      spill_stream *s = Open(md, a, 1, &e, &rc);
      if (rc == SPILL_E_UNSUPPORTED) continue;
      ASSERT_EQ(rc, SPILL_OK) << e.msg;
      spill_expert_source src;
      spill_stream_source(s, &src);
      std::vector<uint32_t> ids = AllIds(md.n_experts);
      if (prefetch) {
        ASSERT_EQ(src.prefetch(src.ctx, layer, ids.data(), (int)ids.size(), &e), SPILL_OK);
        if (prefetch == 1) ASSERT_EQ(spill_stream_quiesce(s, &e), SPILL_OK) << e.msg;
      }
      std::vector<uint32_t> got;
      spill_err ge = {};
      rc = ConsumeLayer(s, md, layer, ids, &got, &ge);
      EXPECT_EQ(rc, want_rc);
      EXPECT_STREQ(ge.msg, want.msg);
      for (uint32_t x : got) EXPECT_NE(x, bad);
      if (prefetch == 2 && a.cache_slots > 0) { // the demand joined the prefetches
        spill_stream_counters k;
        spill_stream_get_counters(s, &k);
        EXPECT_GT(k.demand_hits_loading, 0u);
      }
      // Still usable: every other expert of the layer, and another layer.
      std::vector<uint32_t> rest;
      for (uint32_t x : ids)
        if (x != bad) rest.push_back(x);
      EXPECT_EQ(ConsumeLayer(s, md, layer, rest, nullptr, &e), SPILL_OK) << e.msg;
      int other = layer == md.layers[0] ? md.layers[1] : md.layers[0];
      EXPECT_EQ(ConsumeLayer(s, md, other, ids, nullptr, &e), SPILL_OK) << e.msg;
      // And the bad one fails again, the same way.
      spill_err again = {};
      EXPECT_EQ(ConsumeLayer(s, md, layer, {bad}, nullptr, &again), want_rc);
      EXPECT_STREQ(again.msg, want.msg);
      spill_stream_close(s);
    }
  }
}

TEST(ExpertStreamVerifyTest, DamagedPayloadFailsThatExpertWithTheInlineMessage) {
  Model md(Nano());
  int layer = md.layers[1];
  std::string d = Damaged("payload-flip", layer, 5, 64 + 100);
  ExpectDamageReportedLikeInline(d, layer, 5);
}

TEST(ExpertStreamVerifyTest, DamagedHeaderFailsThatExpertWithTheInlineMessage) {
  Model md(Nano());
  int layer = md.layers[0];
  std::string d = Damaged("header-flip", layer, 11, 13); // the expert id field
  ExpectDamageReportedLikeInline(d, layer, 11);
}

// Random requests (some abandoned half-consumed), prefetches, clears,
// resizes and verify toggles; closes with reads and checks in flight.
TEST(ExpertStreamVerifyTest, RandomUseDeliversOnlyCorrectRecords) {
  Model md(Nano());
  std::mt19937 rng(17);
  for (const Arm &a : kArms) {
    SCOPED_TRACE(a.name);
    for (int life = 0; life < 3; life++) {
      spill_err e = {};
      int rc;
      spill_stream *s = Open(md, a, 1, &e, &rc);
      if (rc == SPILL_E_UNSUPPORTED) break;
      ASSERT_EQ(rc, SPILL_OK) << e.msg;
      spill_expert_source src;
      spill_stream_source(s, &src);
      for (int step = 0; step < 60; step++) {
        int layer = md.layers[rng() % md.layers.size()];
        std::vector<uint32_t> ids = AllIds(md.n_experts);
        std::shuffle(ids.begin(), ids.end(), rng);
        ids.resize(1 + rng() % md.n_experts);
        std::vector<uint32_t> hint = AllIds(md.n_experts);
        std::shuffle(hint.begin(), hint.end(), rng);
        hint.resize(rng() % 8);
        int hint_layer = md.layers[rng() % md.layers.size()];
        ASSERT_EQ(src.request(src.ctx, layer, ids.data(), (int)ids.size(), &e), SPILL_OK) << e.msg;
        ASSERT_EQ(src.prefetch(src.ctx, hint_layer, hint.data(), (int)hint.size(), &e), SPILL_OK)
            << e.msg;
        size_t take = (rng() % 4 == 0) ? rng() % ids.size() : ids.size(); // sometimes abandon
        for (size_t k = 0; k < take; k++) {
          int idx;
          const uint8_t *r;
          ASSERT_EQ(src.next_ready(src.ctx, &idx, &r, &e), SPILL_OK) << e.msg;
          const std::string &ref = md.Ref(layer, ids[idx]);
          ASSERT_EQ(0, memcmp(r, ref.data(), ref.size()));
          src.release(src.ctx, layer, ids[idx]);
        }
        switch (rng() % 16) {
          case 0:
            ASSERT_EQ(spill_stream_clear(s, rng() % 2, &e), SPILL_OK) << e.msg;
            break;
          case 1:
            ASSERT_EQ(spill_stream_resize(s, rng() % 2 ? 0 : 8 + rng() % 40, &e), SPILL_OK)
                << e.msg;
            break;
          case 2:
            spill_stream_set_verify(s, (int)(rng() % 2));
            break;
          default:
            break;
        }
      }
      if (life == 2) ASSERT_EQ(spill_stream_quiesce(s, &e), SPILL_OK) << e.msg;
      // lives 0 and 1 close with whatever is in flight
      spill_stream_close(s);
    }
  }
}


// Stream arms with a cache (preload fills the cache; mmap has none).
const Arm kCacheArms[] = {
    {"direct-pread", 0, 0, 0}, {"pagecache-pread", 1, 0, 0}, {"direct-uring", 0, 1, 0}};

uint32_t TotalRecords(const Model &md) { return (uint32_t)md.layers.size() * md.n_experts; }

TEST(ExpertStreamPreloadTest, EveryRecordLoadedThenEveryRequestHits) {
  Model md(Nano());
  const uint32_t total = TotalRecords(md);
  const uint64_t rec = md.c.m.record_bytes;
  for (Arm a : kCacheArms) {
    for (uint32_t per_read : {1u, 3u, 1000u}) {
      SCOPED_TRACE(std::string(a.name) + " records per read " + std::to_string(per_read));
      a.cache_slots = total;
      spill_err e = {};
      int rc;
      spill_stream *s = Open(md, a, per_read == 3, &e, &rc);
      if (rc == SPILL_E_UNSUPPORTED) break;
      ASSERT_EQ(rc, SPILL_OK) << e.msg;
      spill_stream_preload_stats ps;
      ASSERT_EQ(spill_stream_preload(s, per_read * rec, &ps, &e), SPILL_OK) << e.msg;
      EXPECT_EQ(ps.records, total);
      EXPECT_EQ(ps.bytes, total * rec);
      EXPECT_EQ(ps.no_slot, 0u);
      EXPECT_EQ(ps.resident, 0u);
      uint32_t per_bank = (md.n_experts + per_read - 1) / per_read;
      EXPECT_EQ(ps.reads, per_bank * md.layers.size());
      spill_stream_counters k;
      spill_stream_get_counters(s, &k);
      EXPECT_EQ(k.reads, 0u); // demand/prefetch counters untouched
      for (int round = 0; round < 2; round++)
        for (int layer : md.layers)
          ASSERT_EQ(ConsumeLayer(s, md, layer, AllIds(md.n_experts), nullptr, &e), SPILL_OK)
              << e.msg;
      spill_stream_get_counters(s, &k);
      EXPECT_EQ(k.demand_misses, 0u);
      EXPECT_EQ(k.demand_hits, 2u * total);
      EXPECT_EQ(k.reads, 0u);
      EXPECT_EQ(k.evictions, 0u);
      // again after a clear: everything is read again, nothing is resident
      ASSERT_EQ(spill_stream_clear(s, 1, &e), SPILL_OK) << e.msg;
      ASSERT_EQ(spill_stream_preload(s, per_read * rec, &ps, &e), SPILL_OK) << e.msg;
      EXPECT_EQ(ps.records, total);
      spill_stream_close(s);
    }
  }
}

TEST(ExpertStreamPreloadTest, SmallCacheKeepsTheFirstRecordsAndResidentOnesStay) {
  Model md(Nano());
  const uint32_t total = TotalRecords(md);
  Arm a = kCacheArms[0];
  a.cache_slots = md.n_experts + md.n_experts / 2; // bank 0 and half of bank 1
  spill_err e = {};
  int rc;
  spill_stream *s = Open(md, a, 0, &e, &rc);
  ASSERT_EQ(rc, SPILL_OK) << e.msg;
  // two records of the last layer are resident before the preload
  const int last = md.layers.back();
  ASSERT_EQ(ConsumeLayer(s, md, last, {0, 1}, nullptr, &e), SPILL_OK) << e.msg;
  spill_stream_preload_stats ps;
  ASSERT_EQ(spill_stream_preload(s, 0, &ps, &e), SPILL_OK) << e.msg;
  EXPECT_EQ(ps.records, a.cache_slots - 2);
  EXPECT_EQ(ps.resident, 2u);
  EXPECT_EQ(ps.no_slot, total - a.cache_slots);
  spill_stream_reset_counters(s);
  ASSERT_EQ(ConsumeLayer(s, md, md.layers[0], AllIds(md.n_experts), nullptr, &e), SPILL_OK);
  ASSERT_EQ(ConsumeLayer(s, md, last, {0, 1}, nullptr, &e), SPILL_OK);
  spill_stream_counters k;
  spill_stream_get_counters(s, &k);
  EXPECT_EQ(k.demand_misses, 0u);
  EXPECT_EQ(k.evictions, 0u);
  spill_stream_close(s);
}

TEST(ExpertStreamPreloadTest, NoCacheIsAConfigError) {
  Model md(Nano());
  for (const Arm &a : {kArms[0], kArms[5]}) { // no slots; mmap
    spill_err e = {};
    int rc;
    spill_stream *s = Open(md, a, 0, &e, &rc);
    ASSERT_EQ(rc, SPILL_OK) << e.msg;
    spill_stream_preload_stats ps;
    EXPECT_EQ(spill_stream_preload(s, 0, &ps, &e), SPILL_E_CONFIG);
    EXPECT_NE(std::string(e.msg).find("preload: no expert cache"), std::string::npos) << e.msg;
    EXPECT_EQ(ps.records, 0u);
    spill_stream_close(s);
  }
}

TEST(ExpertStreamPreloadTest, DamagedRecordFailsThePreloadWithTheInlineMessage) {
  Model nano(Nano());
  const int layer = nano.layers[1];
  std::string d = Damaged("preload-flip", layer, 6, 64 + 7);
  Model md(d);
  std::vector<char> buf(md.c.m.record_bytes);
  spill_err want = {};
  int want_rc = spill_container_read_record(&md.c, layer, 6, buf.data(), 1, &want);
  ASSERT_LT(want_rc, 0);
  for (Arm a : kCacheArms) {
    SCOPED_TRACE(a.name);
    a.cache_slots = TotalRecords(md);
    spill_err e = {};
    int rc;
    spill_stream *s = Open(md, a, 1, &e, &rc);
    if (rc == SPILL_E_UNSUPPORTED) continue;
    ASSERT_EQ(rc, SPILL_OK) << e.msg;
    spill_stream_preload_stats ps;
    EXPECT_EQ(spill_stream_preload(s, 4 * md.c.m.record_bytes, &ps, &e), want_rc);
    EXPECT_EQ(std::string(e.msg), std::string("preload: ") + want.msg);
    EXPECT_LT(ps.records, TotalRecords(md));
    // the stream is still usable; the damaged record fails on demand the same way
    EXPECT_EQ(ConsumeLayer(s, md, md.layers[0], AllIds(md.n_experts), nullptr, &e), SPILL_OK)
        << e.msg;
    spill_err again = {};
    EXPECT_EQ(ConsumeLayer(s, md, layer, {6}, nullptr, &again), want_rc);
    EXPECT_STREQ(again.msg, want.msg);
    spill_stream_close(s);
  }
}

}  // namespace

namespace {

// The readiness call (poll_ready, expert_source.h). Reads submitted first
// (even request_seq) are delayed 200 ms, the others not: wait 0 never
// blocks and hands out the undelayed records first (arrival order), wait 1
// blocks for the delayed ones; with every slot held by delivered records,
// wait 1 returns 0 (next_ready's error) until one is released.
void DelayEvenReads(void *, const spill_io_fault_site *site, spill_io_fault *out) {
  if (site->request_seq % 2 == 0 && site->attempt == 0) {
    out->kind = SPILL_IO_FAULT_DELAY;
    out->delay_ns = 200ull * 1000 * 1000;
  }
}

double Ms(const std::chrono::steady_clock::time_point &t0) {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
}

TEST(ExpertStreamPollTest, NeverBlocksAndDeliversInArrivalOrder) {
  Model md(Nano());
  ASSERT_GE(md.n_experts, 4u);
  const int layer = md.layers[0];
  for (const Arm &a : kArms) {
    SCOPED_TRACE(a.name);
    spill_stream_test_fault_hook(DelayEvenReads, nullptr);
    spill_err e = {};
    int rc;
    // 4 pread workers: a delayed read sleeps on its worker, and the two
    // undelayed ones must not queue behind the two delayed ones
    spill_stream *s = Open(md, a, 1, &e, &rc, 4);
    spill_stream_test_fault_hook(nullptr, nullptr);
    if (rc == SPILL_E_UNSUPPORTED) continue;  // io_uring unavailable here
    ASSERT_EQ(rc, SPILL_OK) << e.msg;
    spill_expert_source src;
    spill_stream_source(s, &src);
    ASSERT_NE(src.poll_ready, nullptr);
    const uint32_t ids[4] = {0, 1, 2, 3};
    const auto t0 = std::chrono::steady_clock::now();
    ASSERT_EQ(src.request(src.ctx, layer, ids, 4, &e), SPILL_OK) << e.msg;
    std::vector<int> order;
    while (order.size() < 2) {  // the two undelayed reads, without blocking
      int idx = -1;
      const uint8_t *r = nullptr;
      const auto tp = std::chrono::steady_clock::now();
      rc = src.poll_ready(src.ctx, 0, &idx, &r, &e);
      ASSERT_GE(rc, 0) << e.msg;
      EXPECT_LT(Ms(tp), 100.0) << "poll_ready(wait 0) blocked";
      if (rc == 1) {
        EXPECT_EQ(0, memcmp(r, md.Ref(layer, ids[idx]).data(), md.c.m.record_bytes));
        order.push_back(idx);
      } else {
        ASSERT_LT(Ms(t0), 150.0) << "undelayed reads did not land";
        usleep(1000);
      }
    }
    EXPECT_LT(Ms(t0), 150.0);
    std::sort(order.begin(), order.end());
    EXPECT_EQ(order, (std::vector<int>{1, 3}));  // submitted 2nd and 4th: not delayed
    for (int k = 0; k < 2; k++) {
      int idx = -1;
      const uint8_t *r = nullptr;
      ASSERT_EQ(src.poll_ready(src.ctx, 1, &idx, &r, &e), 1) << e.msg;
      EXPECT_TRUE(idx == 0 || idx == 2);
      EXPECT_EQ(0, memcmp(r, md.Ref(layer, ids[idx]).data(), md.c.m.record_bytes));
    }
    EXPECT_GE(Ms(t0), 190.0);
    for (uint32_t id : ids) src.release(src.ctx, layer, id);
    spill_stream_close(s);
  }
}

TEST(ExpertStreamPollTest, AllSlotsHeldGivesZeroUntilARelease) {
  Model md(Nano());
  ASSERT_GE(md.n_experts, 6u);
  const int layer = md.layers[0];
  Arm a = {"direct-pread-cache2", 0, 0, 2};  // 2 slots + 2 bounce buffers: 4 records held at most
  spill_err e = {};
  int rc;
  spill_stream *s = Open(md, a, 0, &e, &rc);
  ASSERT_EQ(rc, SPILL_OK) << e.msg;
  spill_expert_source src;
  spill_stream_source(s, &src);
  const uint32_t ids[6] = {0, 1, 2, 3, 4, 5};
  ASSERT_EQ(src.request(src.ctx, layer, ids, 6, &e), SPILL_OK) << e.msg;
  std::vector<int> held;
  for (;;) {
    int idx = -1;
    const uint8_t *r = nullptr;
    rc = src.poll_ready(src.ctx, 1, &idx, &r, &e);
    ASSERT_GE(rc, 0) << e.msg;
    if (rc == 0) break;
    held.push_back(idx);
    ASSERT_LE(held.size(), 4u);
  }
  EXPECT_EQ(held.size(), 4u);
  int idx = -1;
  const uint8_t *r = nullptr;
  EXPECT_EQ(src.next_ready(src.ctx, &idx, &r, &e), SPILL_E_INTERNAL);  // next_ready: an error
  EXPECT_NE(std::string(e.msg).find("pinned"), std::string::npos) << e.msg;
  for (int k = 0; k < 2; k++) {
    src.release(src.ctx, layer, ids[held[k]]);
    ASSERT_EQ(src.poll_ready(src.ctx, 1, &idx, &r, &e), 1) << e.msg;
    EXPECT_EQ(0, memcmp(r, md.Ref(layer, ids[idx]).data(), md.c.m.record_bytes));
    held.push_back(idx);
  }
  std::vector<int> all = held;
  std::sort(all.begin(), all.end());
  EXPECT_EQ(all, (std::vector<int>{0, 1, 2, 3, 4, 5}));
  for (size_t k = 2; k < held.size(); k++) src.release(src.ctx, layer, ids[held[k]]);
  spill_stream_close(s);
}

}  // namespace
