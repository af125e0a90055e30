// engine/format/container_test_util.h: a tiny model description and a
// container writer shared by the format tests. Everything it writes lives
// under $TEST_TMPDIR and is a few tens of KiB.
#ifndef SPILL_FORMAT_CONTAINER_TEST_UTIL_H
#define SPILL_FORMAT_CONTAINER_TEST_UTIL_H

#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include <cstdio>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "engine/format/container.h"

namespace spill_test {

// 3 layers (0 dense gqa, 1 MoE mla, 2 MoE kda), d_model 16, 4 experts of
// width 8, trunk tensors in every dtype, and rvq3 codebooks when needed.
struct TinyModel {
  spill_manifest m;
  std::vector<spill_tensor_info> tensors;

  explicit TinyModel(spill_dtype expert_dtype, uint32_t group = 8) {
    memset(&m, 0, sizeof m);
    m.version = 1;  // a v1 description (no container id); writers write v2
    snprintf(m.name, sizeof m.name, "tiny-%s", spill_dtype_name(expert_dtype));
    spill_arch &a = m.arch;
    snprintf(a.family, sizeof a.family, "test");
    a.vocab_size = 256;
    a.d_model = 16;
    a.n_layers = 3;
    a.n_dense_layers = 1;
    a.d_ff = 32;
    a.norm_eps = 1e-5;
    a.bos_id = 1;
    a.eos_id = -1;
    a.layer_attn[0] = SPILL_ATTN_GQA;
    a.layer_attn[1] = SPILL_ATTN_MLA;
    a.layer_attn[2] = SPILL_ATTN_KDA;
    a.gqa = {2, 1, 8, 10000.0};
    a.mla = {2, 0, 8, 8, 4, 8, 0, 50000.0};
    a.kda = {2, 8, 4, 4, 0, -5.0};
    a.moe = {4, 2, 8, 1, 8, 0, SPILL_ROUTER_SIGMOID, 1, 2.5};
    m.expert_dtype = expert_dtype;
    m.expert_group = group;
    Add("tok_embd", SPILL_DT_F32, 256, 16);
    Add("output_norm", SPILL_DT_F32, 16, 0);
    Add("output", SPILL_DT_Q8, 256, 16, 8);
    Add("blk.0.ffn_gate", SPILL_DT_F16, 32, 16);
    Add("blk.0.ffn_up", SPILL_DT_BF16, 32, 16);
    Add("blk.0.ffn_down", SPILL_DT_Q4, 16, 32, 16);
    Add("blk.1.ffn_gate_inp", SPILL_DT_F32, 4, 16);
    Add("blk.2.ffn_gate_inp", SPILL_DT_F32, 4, 16);
    if (expert_dtype == SPILL_DT_RVQ3) {
      for (int l = 1; l <= 2; l++)
        for (const char *mat : {"gate", "up", "down"})
          Add("blk." + std::to_string(l) + ".ffn_" + mat + "_exps.codebook", SPILL_DT_F32, 768, 8);
    }
    m.tensors = tensors.data();
    m.n_tensors = (int)tensors.size();
    m.generator_json = nullptr;
  }

  // cols == 0: a 1-D tensor of `rows` elements.
  void Add(const std::string &name, spill_dtype dt, uint64_t rows, uint64_t cols,
           uint32_t group = 0) {
    spill_tensor_info t;
    memset(&t, 0, sizeof t);
    snprintf(t.name, sizeof t.name, "%s", name.c_str());
    t.dtype = dt;
    t.ndim = cols ? 2 : 1;
    t.shape[0] = rows;
    t.shape[1] = cols ? cols : 1;
    t.group = group;
    tensors.push_back(t);
    m.tensors = tensors.data();
    m.n_tensors = (int)tensors.size();
  }
};

// Deterministic content: byte i of tensor `salt` / record (layer, expert).
inline std::vector<uint8_t> Pattern(uint64_t n, uint32_t salt) {
  std::vector<uint8_t> v(n);
  uint32_t x = 2654435761u * (salt + 1);
  for (uint64_t i = 0; i < n; i++) {
    x ^= x << 13;
    x ^= x >> 17;
    x ^= x << 5;
    v[i] = (uint8_t)x;
  }
  return v;
}

inline uint32_t RecordSalt(int layer, uint32_t expert) { return 1000u + layer * 100u + expert; }

inline std::string TmpDir(const std::string &name) {
  const char *t = getenv("TEST_TMPDIR");
  std::string dir = std::string(t ? t : "/tmp") + "/" + name;
  std::string cmd = "rm -rf '" + dir + "'";
  if (system(cmd.c_str()) != 0) return dir;
  return dir;
}

// Writes the tiny model's container into dir; returns the status.
inline int WriteTiny(const std::string &dir, TinyModel &tm, spill_err *e) {
  spill_writer *w = nullptr;
  int rc = spill_writer_open(dir.c_str(), &tm.m, &w, e);
  if (rc < 0) return rc;
  const spill_manifest *lm = spill_writer_manifest(w);
  // Tensors in reverse order: the writer must not depend on the order.
  for (int i = lm->n_tensors - 1; i >= 0; i--) {
    std::vector<uint8_t> d = Pattern(lm->tensors[i].bytes, (uint32_t)i);
    rc = spill_writer_tensor(w, lm->tensors[i].name, d.data(), d.size(), e);
    if (rc < 0) {
      spill_writer_abort(w);
      return rc;
    }
  }
  // Records interleaved across banks, in expert order within each bank.
  for (uint32_t x = 0; x < (uint32_t)lm->arch.moe.n_experts; x++) {
    for (int l = lm->arch.n_dense_layers; l < lm->arch.n_layers; l++) {
      std::vector<uint8_t> p = Pattern(lm->payload_bytes, RecordSalt(l, x));
      rc = spill_writer_record(w, l, x, p.data(), e);
      if (rc < 0) {
        spill_writer_abort(w);
        return rc;
      }
    }
  }
  return spill_writer_finish(w, e);
}

inline std::string ReadAll(const std::string &path) {
  std::ifstream f(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>());
}

inline void WriteAll(const std::string &path, const std::string &data) {
  std::ofstream f(path, std::ios::binary | std::ios::trunc);
  f.write(data.data(), (std::streamsize)data.size());
}

inline bool Contains(const char *msg, const std::string &sub) {
  return std::string(msg).find(sub) != std::string::npos;
}

}  // namespace spill_test

#endif
