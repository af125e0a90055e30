// engine/model/moe_test.cc: the MoE's contract with expert sources. Arrival
// order never changes a bit of the logits; a chunk requests each distinct
// expert of a layer exactly once; the lookahead router hook reproduces the
// forward's own selection; top-k orders by score then id.
#include <algorithm>
#include <cstdlib>
#include <cmath>
#include <cstring>
#include <random>

#include <unistd.h>

#include "engine/base/alloc.h"
#include "engine/model/model_test_util.h"
#include "engine/quant/kernels.h"

using spill_test::Nano;
using spill_test::Open;
using spill_test::Prompt;
using spill_test::RunSeq;

namespace {

// Reads every requested record at request time, then hands them out in
// reverse or shuffled order. Records requests for inspection.
struct TestSource {
  const spill_container *c = nullptr;
  int mode = 0;  // 0 = request order, 1 = reverse, 2 = shuffled
  std::mt19937 rng{1234};
  int layer = -1;
  std::vector<uint32_t> ids;
  std::vector<uint8_t *> bufs;
  std::vector<int> order;
  std::vector<bool> pinned;
  size_t next = 0;
  size_t rec_bytes = 0;
  std::vector<std::pair<int, std::vector<uint32_t>>> requests;
  int errors = 0;
  int calls = 0, fail_request_at = -1;  // request calls; the one (0-based) refused

  ~TestSource() { FreeBufs(); }
  int Pinned() const { return (int)std::count(pinned.begin(), pinned.end(), true); }
  void FreeBufs() {
    for (uint8_t *b : bufs) spill_free(b, rec_bytes);
    bufs.clear();
  }

  static int Request(void *ctx, int layer, const uint32_t *ids, int n, spill_err *e) {
    TestSource *s = static_cast<TestSource *>(ctx);
    for (bool p : s->pinned)
      if (p) s->errors++;  // previous request not fully released
    if (s->calls++ == s->fail_request_at)
      return spill_err_set(e, SPILL_E_IO, "test source: request %d refused", s->fail_request_at);
    s->FreeBufs();
    s->rec_bytes = s->c->m.record_bytes;
    s->layer = layer;
    s->ids.assign(ids, ids + n);
    s->requests.emplace_back(layer, s->ids);
    s->order.resize(n);
    for (int i = 0; i < n; i++) s->order[i] = i;
    if (s->mode == 1) std::reverse(s->order.begin(), s->order.end());
    if (s->mode == 2) std::shuffle(s->order.begin(), s->order.end(), s->rng);
    for (int i = 0; i < n; i++) {
      uint8_t *b = static_cast<uint8_t *>(spill_alloc_nozero(s->rec_bytes, 4096));
      s->bufs.push_back(b);
      SPILL_TRY(spill_container_read_record(s->c, layer, ids[i], b, 1, e));
    }
    s->pinned.assign(n, false);
    s->next = 0;
    return SPILL_OK;
  }
  static int NextReady(void *ctx, int *idx, const uint8_t **rec, spill_err *e) {
    TestSource *s = static_cast<TestSource *>(ctx);
    if (s->next >= s->order.size()) return spill_err_set(e, SPILL_E_INTERNAL, "test source: empty");
    *idx = s->order[s->next++];
    *rec = s->bufs[*idx];
    s->pinned[*idx] = true;
    return SPILL_OK;
  }
  static void Release(void *ctx, int layer, uint32_t id) {
    TestSource *s = static_cast<TestSource *>(ctx);
    for (size_t i = 0; i < s->ids.size(); i++)
      if (s->ids[i] == id && layer == s->layer && s->pinned[i]) {
        s->pinned[i] = false;
        return;
      }
    s->errors++;  // release of something not pinned
  }
  // The readiness call: the same order; with wait 0 a record is "not ready
  // yet" on about every other call, and with max_pins set no record is
  // delivered while that many are held (0 returned until a release).
  int max_pins = 0;
  int not_ready = 0, stalls = 0, max_held = 0;
  // delay_us > 0: a slow device: nothing is ever ready without waiting, and
  // a waiting call takes delay_us before it delivers
  int delay_us = 0;
  static int PollReady(void *ctx, int wait, int *idx, const uint8_t **rec, spill_err *e) {
    TestSource *s = static_cast<TestSource *>(ctx);
    if (s->delay_us > 0) {
      if (!wait) return 0;
      usleep((useconds_t)s->delay_us);
    }
    int held = 0;
    for (bool p : s->pinned) held += p;
    if (s->max_pins && held >= s->max_pins) {
      s->stalls++;
      return 0;
    }
    if (!wait && (s->rng() & 1)) {
      s->not_ready++;
      return 0;
    }
    SPILL_TRY(NextReady(ctx, idx, rec, e));
    if (held + 1 > s->max_held) s->max_held = held + 1;
    return 1;
  }
  spill_expert_source Make(bool poll = false) {
    spill_expert_source src = {};
    src.ctx = this;
    src.request = Request;
    src.next_ready = NextReady;
    src.release = Release;
    if (poll) src.poll_ready = PollReady;
    return src;
  }
};

// Sources without and with the readiness call (poll_ready), the latter
// with and without a limit on records held at once, for 1, 2 and 3
// threads: reversed or shuffled arrival never changes a bit.
TEST(MoeTest, ShuffledExpertArrivalGivesBitIdenticalLogits) {
  for (const char *mix : {"k3", "gqa"}) {
    for (int threads : {1, 2, 3}) {
      spill_test::ModelHandle base;
      base.m = Open(Nano(mix), threads, 4);
      ASSERT_NE(base.m, nullptr);
      const std::vector<float> want = RunSeq(base.m, Prompt(9), 3);
      for (int mode : {1, 2}) {
        for (int variant : {0, 1, 2}) {  // next_ready only; poll_ready; poll_ready, 2 pins
          SCOPED_TRACE(std::string(mix) + " threads " + std::to_string(threads) + " mode " +
                       std::to_string(mode) + " variant " + std::to_string(variant));
          spill_test::ModelHandle h;
          h.m = Open(Nano(mix), threads, 4);
          ASSERT_NE(h.m, nullptr);
          TestSource ts;
          ts.c = spill_model_container(h.m);
          ts.mode = mode;
          ts.max_pins = variant == 2 ? 2 : 0;
          spill_expert_source src = ts.Make(variant > 0);
          spill_model_set_expert_source(h.m, &src);
          const std::vector<float> got = RunSeq(h.m, Prompt(9), 3);
          ASSERT_EQ(got.size(), want.size());
          EXPECT_EQ(0, memcmp(got.data(), want.data(), got.size() * sizeof(float)));
          EXPECT_EQ(ts.errors, 0);
          EXPECT_FALSE(ts.requests.empty());
          if (variant == 2) EXPECT_LE(ts.max_held, 2);
          if (variant == 1 && threads > 1) EXPECT_GT(ts.max_held, 1);  // experts overlapped
          spill_model_set_expert_source(h.m, nullptr);
        }
      }
    }
  }
}

// The wait inside the MoE region is counted on every thread: behind a slow
// source (every record 4 ms away, one poll at a time) a decode token's
// threads all wait about as long as the reads take, so the threads' sum is
// about n_threads times the caller's own wait (which alone was counted
// before); with one thread the two are the same figure.
TEST(MoeTest, RegionWaitIsCountedOnEveryThread) {
  for (int threads : {1, 2}) {
    SCOPED_TRACE(std::to_string(threads) + " threads");
    spill_test::ModelHandle h;
    h.m = Open(Nano("gqa"), threads, 4);
    ASSERT_NE(h.m, nullptr);
    TestSource ts;
    ts.c = spill_model_container(h.m);
    ts.delay_us = 4000;
    spill_expert_source src = ts.Make(true);
    spill_model_set_expert_source(h.m, &src);
    const std::vector<int> p = Prompt(3);
    std::vector<float> lg(spill_model_arch(h.m)->vocab_size);
    spill_err e = {};
    ASSERT_EQ(spill_model_forward(h.m, p.data(), 1, 0, lg.data(), &e), SPILL_OK) << e.msg;
    const spill_model_stats *st = spill_model_last_stats(h.m);
    const uint64_t n_rec = st->n_expert_requests;  // one 4 ms wait each
    ASSERT_GT(n_rec, 0u);
    const uint64_t floor_ns = n_rec * 4000000ull;
    EXPECT_GE(st->ns_expert_wait, floor_ns * 9 / 10);
    if (threads == 1) {
      EXPECT_EQ(st->ns_expert_wait_threads, st->ns_expert_wait);
    } else {
      EXPECT_GE(st->ns_expert_wait_threads, floor_ns * 2 * 9 / 10);
      EXPECT_GT(st->ns_expert_wait_threads, st->ns_expert_wait * 3 / 2);
    }
    EXPECT_EQ(spill_model_moe_wait_threads_ns(h.m), st->ns_expert_wait_threads);
    EXPECT_EQ(ts.errors, 0);
    spill_model_set_expert_source(h.m, nullptr);
  }
}

// Observer: remembers the union of the selections of the last routed layer
// and checks the lookahead hook against the forward's own routing.
struct RouteLog {
  spill_model *m = nullptr;
  int layer = -1;
  std::set<uint32_t> uni;
  std::vector<std::pair<int, std::set<uint32_t>>> unions;
  int mismatches = 0, calls = 0, tokens = 0;
  static int OnRoute(void *ctx, int layer, int pos0, int n_tok, const float *x, const uint32_t *ids,
                     const float *w, int k) {
    (void)pos0;
    (void)w;
    RouteLog *r = static_cast<RouteLog *>(ctx);
    r->calls++;
    r->tokens += n_tok;
    r->layer = layer;
    r->uni.clear();
    const int D = spill_model_arch(r->m)->d_model;
    for (int t = 0; t < n_tok; t++) {
      uint32_t la[SPILL_MAX_TOPK];
      float sc[SPILL_MAX_TOPK];
      spill_err e = {};
      if (spill_model_router_topk(r->m, layer, x + (size_t)t * D, t, k, la, sc, &e) != SPILL_OK) {
        r->mismatches++;
        continue;
      }
      for (int i = 0; i < k; i++) {
        r->uni.insert(ids[t * k + i]);
        if (la[i] != ids[t * k + i]) r->mismatches++;
        if (i > 0 && sc[i] > sc[i - 1]) r->mismatches++;
      }
    }
    r->unions.emplace_back(layer, r->uni);
    return 0;
  }
};

struct CountingSource {
  spill_expert_source inner = {};
  std::vector<std::pair<int, std::set<uint32_t>>> sets;
  int requests = 0, bad = 0;
  uint64_t ids_requested = 0;
  static int Request(void *ctx, int layer, const uint32_t *ids, int n, spill_err *e) {
    CountingSource *s = static_cast<CountingSource *>(ctx);
    s->requests++;
    s->ids_requested += (uint64_t)n;
    std::set<uint32_t> got(ids, ids + n);
    if ((int)got.size() != n) s->bad++;  // duplicate id
    s->sets.emplace_back(layer, got);
    return s->inner.request(s->inner.ctx, layer, ids, n, e);
  }
  static int NextReady(void *ctx, int *idx, const uint8_t **rec, spill_err *e) {
    CountingSource *s = static_cast<CountingSource *>(ctx);
    return s->inner.next_ready(s->inner.ctx, idx, rec, e);
  }
  static void Release(void *ctx, int layer, uint32_t id) {
    CountingSource *s = static_cast<CountingSource *>(ctx);
    s->inner.release(s->inner.ctx, layer, id);
  }
};

TEST(MoeTest, ChunkRequestsEachDistinctExpertOncePerLayer) {
  spill_test::ModelHandle h;
  h.m = Open(Nano("k3"), 2, 8);
  ASSERT_NE(h.m, nullptr);
  const spill_arch *a = spill_model_arch(h.m);
  RouteLog log;
  log.m = h.m;
  spill_model_observer obs = {&log, RouteLog::OnRoute};
  spill_model_set_observer(h.m, &obs);
  CountingSource cs;
  spill_err e = {};
  ASSERT_EQ(spill_expert_source_sync_open(spill_model_container(h.m), 0, 1, &cs.inner, &e), SPILL_OK)
      << e.msg;
  spill_expert_source src = {&cs, CountingSource::Request, CountingSource::NextReady,
                             CountingSource::Release, nullptr};
  spill_model_set_expert_source(h.m, &src);

  const std::vector<int> p = Prompt(20);  // chunks of 8, 8, 4
  std::vector<float> lg(a->vocab_size);
  ASSERT_EQ(spill_model_forward(h.m, p.data(), 20, 0, lg.data(), &e), SPILL_OK) << e.msg;
  const int n_moe = spill_arch_n_moe(a);
  EXPECT_EQ(cs.requests, 3 * n_moe);
  EXPECT_EQ(log.calls, 3 * n_moe);
  EXPECT_EQ(log.tokens, 20 * n_moe);
  EXPECT_EQ(cs.bad, 0);
  EXPECT_EQ(cs.sets, log.unions);  // each request is exactly its chunk's union
  EXPECT_EQ(log.mismatches, 0);
  EXPECT_EQ(spill_model_last_stats(h.m)->n_expert_requests, cs.ids_requested);
  // a chunk of 8 tokens x top-4 over 16 experts must share experts
  EXPECT_LT(cs.ids_requested, (uint64_t)20 * a->moe.top_k * n_moe);
  spill_model_set_expert_source(h.m, nullptr);
  spill_model_set_observer(h.m, nullptr);
  spill_expert_source_sync_close(&cs.inner);
}

// An observer that fails on its n-th call (0-based), else does nothing.
struct FailingObserver {
  int calls = 0, fail_at = -1;
  static int OnRoute(void *ctx, int, int, int, const float *, const uint32_t *, const float *,
                     int) {
    FailingObserver *o = static_cast<FailingObserver *>(ctx);
    return o->calls++ == o->fail_at ? SPILL_E_INTERRUPTED : SPILL_OK;
  }
};

// A decode token (and a one-token chunk) routes inside the MoE region, on
// whichever thread finishes the router's rows: the observer still sees the
// layer's own selection (the lookahead hook reproduces it, called from that
// thread), and a request or observer failing there returns its error with
// every record released or drained, so the model runs on after a reset
// with the logits of a clean run. 1 and 2 threads, sources with and
// without the readiness call.
TEST(MoeTest, RoutingInTheRegionKeepsTheObserverAndFailuresClean) {
  for (int threads : {1, 2}) {
    for (bool poll : {false, true}) {
      SCOPED_TRACE(std::to_string(threads) + " threads" + (poll ? ", poll_ready" : ""));
      spill_test::ModelHandle h;
      h.m = Open(Nano("k3"), threads, 4);
      ASSERT_NE(h.m, nullptr);
      const int n_moe = spill_arch_n_moe(spill_model_arch(h.m));
      TestSource ts;
      ts.c = spill_model_container(h.m);
      ts.mode = 2;
      spill_expert_source src = ts.Make(poll);
      spill_model_set_expert_source(h.m, &src);
      // the observer of a clean run: 5 prompt tokens (chunks of 4 and 1), 3 decode
      RouteLog log;
      log.m = h.m;
      spill_model_observer obs = {&log, RouteLog::OnRoute};
      spill_model_set_observer(h.m, &obs);
      const std::vector<float> want = RunSeq(h.m, Prompt(5), 3);
      EXPECT_EQ(log.calls, 5 * n_moe);
      EXPECT_EQ(log.tokens, 8 * n_moe);
      EXPECT_EQ(log.mismatches, 0);
      // the observer fails in the one-token chunk's second MoE layer
      FailingObserver fo;
      fo.fail_at = n_moe + 1;
      spill_model_observer fobs = {&fo, FailingObserver::OnRoute};
      spill_model_set_observer(h.m, &fobs);
      const std::vector<int> p = Prompt(5);
      std::vector<float> lg(spill_model_arch(h.m)->vocab_size);
      spill_err e = {};
      EXPECT_EQ(spill_model_forward(h.m, p.data(), 5, 0, lg.data(), &e), SPILL_E_INTERRUPTED);
      EXPECT_NE(std::string(e.msg).find("stopped by the route observer"), std::string::npos)
          << e.msg;
      EXPECT_EQ(ts.Pinned(), 0);
      // the request of a decode token's first MoE layer fails
      spill_model_set_observer(h.m, nullptr);
      ts.fail_request_at = ts.calls + n_moe + n_moe;  // chunk of 4, chunk of 1, then decode
      ASSERT_EQ(spill_model_forward(h.m, p.data(), 5, 0, lg.data(), &e), SPILL_OK) << e.msg;
      int tok = 1;
      e = {};
      EXPECT_EQ(spill_model_forward(h.m, &tok, 1, 5, lg.data(), &e), SPILL_E_IO);
      EXPECT_NE(std::string(e.msg).find("request"), std::string::npos) << e.msg;
      EXPECT_EQ(ts.Pinned(), 0);
      // a clean run after both: the same logits
      spill_model_set_observer(h.m, &obs);
      const std::vector<float> again = RunSeq(h.m, Prompt(5), 3);
      ASSERT_EQ(again.size(), want.size());
      EXPECT_EQ(0, memcmp(again.data(), want.data(), want.size() * sizeof(float)));
      EXPECT_EQ(ts.errors, 0);
      spill_model_set_observer(h.m, nullptr);
      spill_model_set_expert_source(h.m, nullptr);
    }
  }
}

TEST(MoeTest, RouterTopkRejectsDenseLayerAndBadK) {
  spill_test::ModelHandle h;
  h.m = Open(Nano("k3"), 1);
  ASSERT_NE(h.m, nullptr);
  std::vector<float> x(64, 0.5f);
  uint32_t ids[SPILL_MAX_TOPK];
  spill_err e = {};
  EXPECT_EQ(spill_model_router_topk(h.m, 0, x.data(), -1, 4, ids, nullptr, &e), SPILL_E_RANGE);
  EXPECT_EQ(spill_model_router_topk(h.m, 1, x.data(), -1, 17, ids, nullptr, &e), SPILL_E_RANGE);
  EXPECT_EQ(spill_model_router_topk(h.m, 1, x.data(), -1, 6, ids, nullptr, &e), SPILL_OK) << e.msg;
  // nano k3 has attention residuals: a token index names a token of the
  // chunk run last, and none has run yet
  ASSERT_GT(spill_model_arch(h.m)->attn_res_block, 0);
  EXPECT_EQ(spill_model_router_topk(h.m, 1, x.data(), 0, 6, ids, nullptr, &e), SPILL_E_RANGE);
}

}  // namespace

extern "C" void spill_model_group_mask(const spill_moe_cfg *c, float *sel);

namespace {

// The router selects with the one top-k (spill_k_topk, engine/quant).
TEST(MoeTest, TopkOrdersByScoreThenLowerId) {
  const float s[8] = {0.5f, 0.9f, 0.1f, 0.9f, -1.0f, 0.5f, 0.7f, 0.5f};
  uint32_t ids[8];
  spill_k_topk(s, 8, 5, ids);
  const uint32_t want[5] = {1, 3, 6, 0, 5};
  for (int i = 0; i < 5; i++) EXPECT_EQ(ids[i], want[i]) << i;
  spill_k_topk(s, 8, 1, ids);
  EXPECT_EQ(ids[0], 1u);
  spill_k_topk(s, 8, 8, ids);
  const uint32_t all[8] = {1, 3, 6, 0, 5, 7, 2, 4};
  for (int i = 0; i < 8; i++) EXPECT_EQ(ids[i], all[i]) << i;
}

// A NaN score (a broken router row) is never selected ahead of a number,
// wherever it sits: the router's old top-k kept a NaN that arrived while
// its list was filling at the top and selected expert 0 here.
TEST(MoeTest, TopkRanksNanBelowEveryNumber) {
  const float s[4] = {NAN, 0.1f, 0.2f, -INFINITY};
  uint32_t ids[4];
  spill_k_topk(s, 4, 2, ids);
  EXPECT_EQ(ids[0], 2u);
  EXPECT_EQ(ids[1], 1u);
  spill_k_topk(s, 4, 4, ids);
  EXPECT_EQ(ids[2], 3u);
  EXPECT_EQ(ids[3], 0u);
}

// Group-limited selection: V2 scores a group by its best expert, V3 by the
// sum of its two best; dropped groups go to -inf (llama.cpp) or 0 (DeepSeek's
// masked_fill).
TEST(MoeTest, GroupMaskScoresGroupsByMaxOrTopTwo) {
  // groups of 3 (exact binary fractions): {0.75, 0, 0} best 0.75, sum2 0.75;
  // {0.5, 0.5, 0.125} best 0.5, sum2 1.0; {0.625, 0.125, 0.125} best 0.625,
  // sum2 0.75 (ties with group 0: the lower id wins)
  const float s[9] = {0.75f, 0.0f, 0.0f, 0.5f, 0.5f, 0.125f, 0.625f, 0.125f, 0.125f};
  spill_moe_cfg c = {};
  c.n_experts = 9;
  c.top_k = 2;
  c.n_group = 3;
  c.topk_group = 1;
  float x[9];
  memcpy(x, s, sizeof x);
  c.group_score = SPILL_GROUP_MAX;
  spill_model_group_mask(&c, x);
  for (int i = 0; i < 9; i++) EXPECT_EQ(x[i], i < 3 ? s[i] : -INFINITY) << i;
  memcpy(x, s, sizeof x);
  c.group_score = SPILL_GROUP_TOP2;
  spill_model_group_mask(&c, x);
  for (int i = 0; i < 9; i++) EXPECT_EQ(x[i], i >= 3 && i < 6 ? s[i] : -INFINITY) << i;
  memcpy(x, s, sizeof x);
  c.topk_group = 2;
  c.group_mask_zero = 1;
  spill_model_group_mask(&c, x);  // groups 1 (1.0) and 0 (0.9, lower id than group 2)
  for (int i = 0; i < 9; i++) EXPECT_EQ(x[i], i < 6 ? s[i] : 0.0f) << i;
  c.n_group = 1;  // no groups: unchanged
  memcpy(x, s, sizeof x);
  spill_model_group_mask(&c, x);
  EXPECT_EQ(memcmp(x, s, sizeof x), 0);
}

}  // namespace
