// engine/import/import_files_test.cc: what spill import reads from outside
// goes through engine/base's one file opener and one JSON reading layer
// (issue 26 items 7, 8): a repeated config key is refused by name, a FIFO in
// place of a checkpoint file is refused by kind without blocking.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <string>

#include "engine/import/import.h"
#include "engine/import/import_test_util.h"

namespace {
using namespace spill_test;

// A hang is a failure: the alarm kills the test instead of Bazel's timeout.
struct NoHang {
  NoHang() { alarm(30); }
  ~NoHang() { alarm(0); }
};

std::string Checkpoint(const std::string &name, const std::string &config) {
  std::string d = TmpDir() + "/" + name;
  mkdir(d.c_str(), 0755);
  WriteFile(d + "/config.json", config);
  WriteFile(d + "/model.safetensors",
            Safetensors({{"model.norm.weight", "F32", {4}, F32Bytes({1, 1, 1, 1})}}));
  return d;
}

int Import(const std::string &src, spill_err *e) {
  std::string dst = src + ".spill";
  spill_import_request r = {};
  r.src = src.c_str();
  r.dst = dst.c_str();
  spill_import_summary s = {};
  int rc = spill_import_run(&r, &s, e);
  spill_import_summary_free(&s);
  return rc;
}

// cJSON keeps the first copy, transformers the last: top-k 2 or 8.
TEST(ImportFilesTest, RepeatedConfigKeyIsRefusedByName) {
  std::string d = Checkpoint("dupkey", R"({"model_type": "qwen3_moe", "num_experts_per_tok": 2,
    "hidden_size": 4, "num_experts_per_tok": 8})");
  spill_err e = {};
  EXPECT_EQ(Import(d, &e), SPILL_E_FORMAT);
  EXPECT_NE(std::string(e.msg).find("config.json: num_experts_per_tok: duplicate key"),
            std::string::npos)
      << e.msg;
  d = Checkpoint("nulkey", R"({"model_type": "qwen3_moe", "num_experts_per_tok\u0000x": 2})");
  EXPECT_EQ(Import(d, &e), SPILL_E_FORMAT);
  EXPECT_NE(std::string(e.msg).find("(NUL) inside a string"), std::string::npos) << e.msg;
}

TEST(ImportFilesTest, FifoInPlaceOfACheckpointFileIsRefusedWithoutBlocking) {
  NoHang guard;
  spill_err e = {};
  // the weights
  std::string d = Checkpoint("fifo_st", R"({"model_type": "qwen3_moe"})");
  unlink((d + "/model.safetensors").c_str());
  ASSERT_EQ(mkfifo((d + "/model.safetensors").c_str(), 0644), 0);
  EXPECT_EQ(Import(d, &e), SPILL_E_IO);
  EXPECT_NE(std::string(e.msg).find("model.safetensors: is a FIFO, not a regular file"),
            std::string::npos)
      << e.msg;
  // config.json
  d = Checkpoint("fifo_cfg", "{}");
  unlink((d + "/config.json").c_str());
  ASSERT_EQ(mkfifo((d + "/config.json").c_str(), 0644), 0);
  e = {};
  EXPECT_NE(Import(d, &e), SPILL_OK);
  EXPECT_NE(std::string(e.msg).find("config.json: is a FIFO"), std::string::npos) << e.msg;
  // a .gguf
  std::string g = TmpDir() + "/fifo.gguf";
  unlink(g.c_str());
  ASSERT_EQ(mkfifo(g.c_str(), 0644), 0);
  e = {};
  EXPECT_EQ(Import(g, &e), SPILL_E_IO);
  EXPECT_NE(std::string(e.msg).find("fifo.gguf: is a FIFO"), std::string::npos) << e.msg;
}

}  // namespace
