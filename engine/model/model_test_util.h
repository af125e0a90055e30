// engine/model/model_test_util.h: fixtures shared by the model tests. Tiny
// nano containers are written with research/gen into TEST_TMPDIR once per test
// binary and per variant; models are opened with explicit options.
#ifndef SPILL_MODEL_TEST_UTIL_H
#define SPILL_MODEL_TEST_UTIL_H

#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <set>
#include <string>
#include <vector>

#include "engine/format/container.h"
#include "research/gen/synth.h"
#include "engine/model/model.h"

namespace spill_test {

inline std::string TmpDir() {
  const char *t = getenv("TEST_TMPDIR");
  return t ? t : "/tmp";
}

// Writes (once) a nano container with the given mix/trunk/expert dtype and
// returns its directory.
inline std::string Nano(const std::string &mix, spill_gen_trunk trunk = SPILL_GEN_TRUNK_Q4,
                        spill_dtype edt = SPILL_DT_RVQ3) {
  static std::set<std::string> made;
  const std::string dir = TmpDir() + "/nano-" + mix + "-" + (trunk == SPILL_GEN_TRUNK_F32 ? "f32" : "q4") +
                          "-" + spill_dtype_name(edt);
  if (made.count(dir)) return dir;
  spill_gen_opts o;
  spill_gen_opts_init(&o);
  o.preset = "nano";
  o.attn_mix = mix.c_str();
  o.trunk = trunk;
  o.expert_dtype = edt;
  spill_err e = {};
  int rc = spill_gen_write(dir.c_str(), &o, &e);
  EXPECT_EQ(rc, SPILL_OK) << e.msg;
  made.insert(dir);
  return dir;
}

struct ModelHandle {
  spill_model *m = nullptr;
  ~ModelHandle() { spill_model_close(m); }
};

// par_min_weights 1: with 2 threads every matvec and LUT build is split;
// task_max_weights 256: big matrices are cut into many tasks of a few rows.
inline spill_model *Open(const std::string &dir, int threads, int max_chunk = 16,
                         const spill_expert_source *src = nullptr, int ctx = 256) {
  spill_model_opts o = {};
  o.par_min_weights = 1;
  o.task_max_weights = 256;
  o.n_threads = threads;
  o.ctx = ctx;
  o.max_chunk = max_chunk;
  o.experts = src;
  spill_model *m = nullptr;
  spill_err e = {};
  int rc = spill_model_open(dir.c_str(), &o, &m, &e);
  EXPECT_EQ(rc, SPILL_OK) << e.msg;
  return m;
}

inline std::vector<int> Prompt(int n) {
  std::vector<int> t;
  t.push_back(256);  // nano's BOS
  const char *s = "Experts stream from the disk, one aligned read each.";
  for (int i = 0; (int)t.size() < n; i++) t.push_back((unsigned char)s[i % 51]);
  return t;
}

// Prefill `tokens` in one call, then `n_decode` greedy steps; returns the
// logits of every call concatenated.
inline std::vector<float> RunSeq(spill_model *m, const std::vector<int> &tokens, int n_decode) {
  const int V = spill_model_arch(m)->vocab_size;
  std::vector<float> all, lg(V);
  spill_err e = {};
  EXPECT_EQ(spill_model_forward(m, tokens.data(), (int)tokens.size(), 0, lg.data(), &e), SPILL_OK)
      << e.msg;
  all.insert(all.end(), lg.begin(), lg.end());
  int pos = (int)tokens.size();
  for (int i = 0; i < n_decode; i++) {
    int tok = 0;
    for (int v = 1; v < V; v++)
      if (lg[v] > lg[tok]) tok = v;
    EXPECT_EQ(spill_model_forward(m, &tok, 1, pos++, lg.data(), &e), SPILL_OK) << e.msg;
    all.insert(all.end(), lg.begin(), lg.end());
  }
  return all;
}

}  // namespace spill_test

#endif
