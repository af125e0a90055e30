// engine/model/model_load_test.cc: loading checks every tensor the arch
// needs; a missing or misshaped tensor fails with an error naming it.
#include <fstream>
#include <sstream>
#include <sys/stat.h>

#include "engine/model/model_test_util.h"

using spill_test::Nano;

namespace {

std::string ReadFile(const std::string &p) {
  std::ifstream f(p, std::ios::binary);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

void WriteFile(const std::string &p, const std::string &s) {
  std::ofstream f(p, std::ios::binary);
  f << s;
}

// Copies the container in src to a new dir with manifest.json edited by fn.
template <class Fn>
std::string EditedCopy(const std::string &src, const std::string &name, Fn fn) {
  const std::string dir = spill_test::TmpDir() + "/" + name;
  mkdir(dir.c_str(), 0755);
  for (const char *f : {"trunk.bin", "experts-001.bin", "experts-002.bin", "experts-003.bin"})
    WriteFile(dir + "/" + f, ReadFile(src + "/" + f));
  std::string js = ReadFile(src + "/manifest.json");
  fn(js);
  WriteFile(dir + "/manifest.json", js);
  return dir;
}

int OpenErr(const std::string &dir, spill_err *e) {
  spill_model *m = nullptr;
  spill_model_opts o = {};
  int rc = spill_model_open(dir.c_str(), &o, &m, e);
  spill_model_close(m);
  return rc;
}

TEST(ModelLoadTest, MissingTensorIsNamed) {
  const std::string dir = EditedCopy(Nano("k3", SPILL_GEN_TRUNK_F32), "missing", [](std::string &js) {
    const std::string from = "\"blk.3.attn_kv_a_norm\"";
    size_t at = js.find(from);
    ASSERT_NE(at, std::string::npos);
    js.replace(at, from.size(), "\"blk.3.attn_kv_a_nrm\"");
  });
  spill_err e = {};
  EXPECT_EQ(OpenErr(dir, &e), SPILL_E_FORMAT);
  EXPECT_NE(std::string(e.msg).find("blk.3.attn_kv_a_norm"), std::string::npos) << e.msg;
  EXPECT_NE(std::string(e.msg).find("missing"), std::string::npos) << e.msg;
}

TEST(ModelLoadTest, WrongShapeIsNamed) {
  // Transposing an f32 matrix keeps its byte size, so only the model notices.
  const std::string dir = EditedCopy(Nano("k3", SPILL_GEN_TRUNK_F32), "shape", [](std::string &js) {
    size_t at = js.find("\"blk.2.ffn_gate_inp\"");
    ASSERT_NE(at, std::string::npos);
    size_t sh = js.find("[16, 64]", at);
    ASSERT_NE(sh, std::string::npos);
    js.replace(sh, 8, "[64, 16]");
  });
  spill_err e = {};
  EXPECT_EQ(OpenErr(dir, &e), SPILL_E_FORMAT);
  EXPECT_NE(std::string(e.msg).find("blk.2.ffn_gate_inp"), std::string::npos) << e.msg;
  EXPECT_NE(std::string(e.msg).find("(16, 64)"), std::string::npos) << e.msg;
}

TEST(ModelLoadTest, MissingDirectoryFailsCleanly) {
  spill_err e = {};
  EXPECT_LT(OpenErr(spill_test::TmpDir() + "/no-such-model", &e), 0);
  EXPECT_NE(e.msg[0], '\0');
}

TEST(ModelLoadTest, SyncSourceDeliversInRequestOrderAndRefusesOverPinning) {
  spill_test::ModelHandle h;
  h.m = spill_test::Open(Nano("k3"), 1);
  ASSERT_NE(h.m, nullptr);
  spill_expert_source s = {};
  spill_err e = {};
  ASSERT_EQ(spill_expert_source_sync_open(spill_model_container(h.m), 1, 2, &s, &e), SPILL_OK);
  const uint32_t ids[3] = {7, 2, 11};
  ASSERT_EQ(s.request(s.ctx, 1, ids, 3, &e), SPILL_OK);
  int idx;
  const uint8_t *rec;
  spill_record_header rh;
  ASSERT_EQ(s.next_ready(s.ctx, &idx, &rec, &e), SPILL_OK);
  spill_record_header_decode(rec, &rh);
  EXPECT_EQ(idx, 0);
  EXPECT_EQ(rh.expert, 7u);
  EXPECT_EQ(rh.layer, 1u);
  ASSERT_EQ(s.next_ready(s.ctx, &idx, &rec, &e), SPILL_OK);
  EXPECT_EQ(idx, 1);
  EXPECT_EQ(s.next_ready(s.ctx, &idx, &rec, &e), SPILL_E_INTERNAL);  // both buffers pinned
  s.release(s.ctx, 1, 7);
  ASSERT_EQ(s.next_ready(s.ctx, &idx, &rec, &e), SPILL_OK);
  spill_record_header_decode(rec, &rh);
  EXPECT_EQ(idx, 2);
  EXPECT_EQ(rh.expert, 11u);
  EXPECT_EQ(s.next_ready(s.ctx, &idx, &rec, &e), SPILL_E_INVALID_ARG);  // nothing outstanding
  EXPECT_EQ(s.request(s.ctx, 0, ids, 3, &e), SPILL_E_RANGE);             // dense layer
  spill_expert_source_sync_close(&s);
}

}  // namespace
