// harness/exp_peer_test.cc: peer arms (docs/PEERS.md). Without the peer: a
// missing llama_peer is an error naming `./lab peers`, the import
// provenance check refuses a GGUF that is not the container's source, and an
// emulated-RAM sweep restarts the RAM lock per cell (a few MiB, within the
// sandbox's mlock cap). With the peer (SPILL_LLAMA_PEER, which `./lab test`
// passes when `./lab peers` has built it; otherwise that test is skipped
// with a message): a llama.cpp arm runs ABBA-interleaved with spill on a
// tiny GGUF from our own writer and its rows carry the same metrics; and the
// bench workload (workload.bench) runs on both engines with the same ids.
#include "harness/exp_peer.h"

#include <gtest/gtest.h>
#include <sys/stat.h>
#include <sys/time.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <sstream>
#include <string>

#include "harness/emulate_ram.h"
#include "harness/exp_config.h"
#include "harness/exp_runner.h"
#include "research/gen/spill_gen.h"

namespace {

std::string TmpDir() {
  const char *d = getenv("TEST_TMPDIR");
  return d ? d : "/tmp";
}

int Sh(const std::string &cmd) { return system(cmd.c_str()); }

// A tiny random qwen3moe GGUF with a vocabulary llama.cpp loads (our writer)
// and its `spill import` (runfiles: cli/spill, tools/reference/import_ref.py).
std::string MakeGguf(const std::string &name, int seed, const char *type = "F32") {
  std::string g = TmpDir() + "/" + name + ".gguf";
  std::string cmd = "/usr/bin/python3 tools/reference/import_ref.py make-gguf '" + g +
                    "' --arch qwen3_moe --type " + type + " --seed " + std::to_string(seed) +
                    " --vocab >/dev/null";
  EXPECT_EQ(Sh(cmd), 0) << cmd;
  return g;
}

std::string Import(const std::string &gguf) {
  std::string dst = gguf + ".spill";
  std::string cmd = "rm -rf '" + dst + "' && cli/spill import '" + gguf + "' '" + dst + "' >/dev/null";
  EXPECT_EQ(Sh(cmd), 0) << cmd;
  return dst;
}

spill_exp_config Parse(const std::string &text) {
  spill_exp_config cfg;
  spill_err e = {};
  EXPECT_EQ(spill_exp_config_parse(text.c_str(), "t.json", &cfg, &e), 0) << e.msg;
  return cfg;
}

std::string Slurp(const std::string &p) {
  std::ifstream f(p);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

std::string PeerConfig(const std::string &name, const std::string &model, const std::string &gguf,
                       const std::string &extra) {
  return R"({"name": ")" + name + R"(", "model": ")" + model + R"(", "model_gguf": ")" + gguf +
         R"(", "workload": {"prompt": "the peer test", "decode_tokens": 4},
    "arms": [{"name": "spill", "set": {"threads": 2}},
             {"name": "llama.cpp-mmap", "peer": "llama.cpp", "args": {"load": "mmap", "repack": false}},
             {"name": "llama.cpp-none", "peer": "llama.cpp", "args": {"load": "none"}}],
    "repeats": 2, "order": "abba", "cold": true)" + extra + "}";
}

}  // namespace

TEST(ExpPeerTest, MissingPeerIsAnErrorNamingLabPeers) {
  const char *was = getenv("SPILL_LLAMA_PEER");
  std::string saved = was ? was : "";
  setenv("SPILL_LLAMA_PEER", (TmpDir() + "/no-such-llama_peer").c_str(), 1);
  char buf[1024];
  spill_err e = {};
  EXPECT_EQ(spill_exp_peer_path(buf, sizeof buf, &e), SPILL_E_CONFIG);
  EXPECT_NE(std::string(e.msg).find("llama.cpp peer not built"), std::string::npos) << e.msg;
  EXPECT_NE(std::string(e.msg).find("./lab peers"), std::string::npos) << e.msg;
  // the runner's preflight (spill exp --validate / --dry-run) says the same
  std::string g = MakeGguf("nopeer", 3);
  std::string c = Import(g);
  spill_exp_config cfg = Parse(PeerConfig("nopeer", c, g, ""));
  EXPECT_EQ(spill_exp_preflight(&cfg, nullptr, &e), SPILL_E_CONFIG);
  EXPECT_NE(std::string(e.msg).find("t.json: llama.cpp peer not built"), std::string::npos) << e.msg;
  spill_exp_config_free(&cfg);
  if (was) setenv("SPILL_LLAMA_PEER", saved.c_str(), 1);
  else unsetenv("SPILL_LLAMA_PEER");
}

TEST(ExpPeerTest, ProvenanceRefusesAGgufThatIsNotTheContainersSource) {
  std::string g1 = MakeGguf("prov1", 11), g2 = MakeGguf("prov2", 12);
  std::string c1 = Import(g1);
  spill_err e = {};
  EXPECT_EQ(spill_exp_peer_provenance(c1.c_str(), g1.c_str(), &e), SPILL_OK) << e.msg;
  // another file (same writer, other seed)
  EXPECT_EQ(spill_exp_peer_provenance(c1.c_str(), g2.c_str(), &e), SPILL_E_CONFIG);
  EXPECT_NE(std::string(e.msg).find("does not hold the container's weights"), std::string::npos) << e.msg;
  // the same path rewritten after the import
  struct timeval later[2];
  gettimeofday(&later[0], nullptr);
  later[0].tv_sec += 100;
  later[1] = later[0];
  ASSERT_EQ(utimes(g1.c_str(), later), 0);
  EXPECT_EQ(spill_exp_peer_provenance(c1.c_str(), g1.c_str(), &e), SPILL_E_CONFIG);
  EXPECT_NE(std::string(e.msg).find("was modified after"), std::string::npos) << e.msg;
  // a generated container has no import provenance
  std::string gen = TmpDir() + "/prov-gen";
  spill_gen_request req = {};
  req.preset = "nano";
  ASSERT_EQ(spill_gen(gen.c_str(), &req, nullptr, nullptr, &e), 0) << e.msg;
  EXPECT_EQ(spill_exp_peer_provenance(gen.c_str(), g2.c_str(), &e), SPILL_E_CONFIG);
  EXPECT_NE(std::string(e.msg).find("is not `spill import` of a GGUF"), std::string::npos) << e.msg;
  // a GGUF that does not exist
  EXPECT_EQ(spill_exp_peer_provenance(c1.c_str(), (TmpDir() + "/none.gguf").c_str(), &e),
            SPILL_E_CONFIG);
  EXPECT_NE(std::string(e.msg).find("model_gguf: "), std::string::npos) << e.msg;
}

// The emulated RAM is per cell: the lock is restarted between cells and each
// row records its cell's emulation (a few MiB below this machine's usable
// RAM, within the sandbox's 8 MiB mlock cap); the cliff plot's x axis is the
// emulated RAM.
TEST(ExpPeerTest, EmulatedRamSweepRestartsTheLockPerCell) {
  uint64_t total, avail;
  spill_err e = {};
  ASSERT_EQ(spill_ramlock_meminfo(&total, &avail, &e), 0) << e.msg;
  uint64_t usable = spill_usable_ram();
  if (avail < (1ull << 30) + (16ull << 20)) GTEST_SKIP() << "less than 1 GiB of MemAvailable";
  std::string model = TmpDir() + "/sweep-nano";
  spill_gen_request req = {};
  req.preset = "nano";
  ASSERT_EQ(spill_gen(model.c_str(), &req, nullptr, nullptr, &e), 0) << e.msg;
  uint64_t a = usable - (6ull << 20), b = usable - (3ull << 20);
  std::string text = R"({"name": "ramsweep", "model": ")" + model +
                     R"(", "workload": {"prompt": "x", "decode_tokens": 2},
      "sweep": {"emulate_ram": [)" + std::to_string(b) + ", " + std::to_string(a) + R"(]},
      "repeats": 1, "outputs": {"tables": ["md"], "plots": ["cliff"]}})";
  spill_exp_config cfg = Parse(text);
  spill_exp_opts o = {};
  std::string results = TmpDir() + "/ramsweep";
  o.results_root = results.c_str();
  o.commit = "test";
  o.quick_env = 1;
  char dir[1024];
  int rc = spill_exp_execute(&cfg, &o, dir, sizeof dir, &e);
  if (rc == SPILL_E_CONFIG && std::string(e.msg).find("lock") != std::string::npos)
    GTEST_SKIP() << "cannot lock here: " << e.msg;
  ASSERT_EQ(rc, 0) << e.msg;
  std::string rows = Slurp(std::string(dir) + "/runs.jsonl");
  std::istringstream in(rows);
  std::string line;
  int n = 0;
  while (std::getline(in, line)) {
    uint64_t want = n == 0 ? a : b; // sorted upward
    EXPECT_NE(line.find("\"emulate_ram_bytes\":" + std::to_string(want)), std::string::npos) << line;
    EXPECT_NE(line.find("\"locked_bytes\":" + std::to_string(usable - want)), std::string::npos) << line;
    n++;
  }
  EXPECT_EQ(n, 2);
  std::string gp = Slurp(std::string(dir) + "/plots/cliff.gp");
  EXPECT_NE(gp.find("emulated machine RAM (GiB"), std::string::npos) << gp;
  spill_exp_config_free(&cfg);
}

TEST(ExpPeerTest, LlamaCppArmRunsInterleavedWithSpill) {
  const char *peer = getenv("SPILL_LLAMA_PEER");
  if (!peer || access(peer, X_OK) != 0)
    GTEST_SKIP() << "llama.cpp peer not built (run ./lab peers; ./lab test passes SPILL_LLAMA_PEER)";
  std::string g = MakeGguf("arm", 21, "Q8_0");
  std::string c = Import(g);
  std::string hyp = R"(, "hypothesis": {"claim": "spill decodes at least 1/100 as fast as llama.cpp",
      "metric": "decode_tok_per_s", "direction": "increase", "control": "llama.cpp-mmap",
      "treatment": "spill", "cell_thresholds": {"-": 0.01}})";
  std::string text = PeerConfig("arm", c, g, hyp);
  text.replace(text.find("\"repeats\": 2"), 12, "\"repeats\": 3");
  spill_exp_config cfg = Parse(text);
  spill_err e = {};
  ASSERT_EQ(spill_exp_preflight(&cfg, nullptr, &e), 0) << e.msg;
  spill_exp_opts o = {};
  std::string results = TmpDir() + "/arm";
  o.results_root = results.c_str();
  o.commit = "test";
  o.quick_env = 1;
  char dir[1024], verdict[1024];
  o.verdict_out = verdict;
  o.verdict_n = sizeof verdict;
  ASSERT_EQ(spill_exp_execute(&cfg, &o, dir, sizeof dir, &e), 0) << e.msg;
  std::string rows = Slurp(std::string(dir) + "/runs.jsonl");
  std::istringstream in(rows);
  std::string line, order;
  struct stat gs;
  ASSERT_EQ(stat(g.c_str(), &gs), 0);
  while (std::getline(in, line)) {
    bool is_peer = line.find("\"peer\":\"llama.cpp\"") != std::string::npos;
    order += is_peer ? (line.find("\"load\":\"none\"") != std::string::npos ? "N" : "M") : "S";
    EXPECT_NE(line.find("\"tokens\":{\"n\":4,"), std::string::npos) << line;
    if (!is_peer) continue;
    // cold: the peer reads its GGUF from the disk (none: all of it at load)
    double rb = 0, rss = 0, tok = 0;
    sscanf(line.substr(line.find("\"bytes_read\":")).c_str(), "\"bytes_read\":%lf", &rb);
    sscanf(line.substr(line.find("\"peak_rss_bytes\":")).c_str(), "\"peak_rss_bytes\":%lf", &rss);
    sscanf(line.substr(line.find("\"decode_tok_per_s\":")).c_str(), "\"decode_tok_per_s\":%lf", &tok);
    EXPECT_GT(tok, 0) << line;
    EXPECT_GT(rss, 1e6) << line;
    if (line.find("\"load\":\"none\"") != std::string::npos)
      EXPECT_GE(rb, 0.5 * (double)gs.st_size) << "a cold `none` load reads the file: " << line;
    EXPECT_EQ(line.find("decode_hit_rate"), std::string::npos) << "a peer has no expert cache";
  }
  EXPECT_EQ(order, "SMNNMSSMN") << "ABBA over three arms";
  std::string table = Slurp(std::string(dir) + "/table.md");
  EXPECT_NE(table.find("| llama.cpp-mmap | 3 |"), std::string::npos) << table;
  std::string summary = Slurp(std::string(dir) + "/summary.json");
  EXPECT_NE(summary.find("\"treatment\":\t\"llama.cpp-none\""), std::string::npos) << summary;
  EXPECT_NE(std::string(verdict).find("vs >= 0.01"), std::string::npos) << verdict;
  spill_exp_config_free(&cfg);
}

// workload.bench with a llama.cpp arm: per prompt one llama_peer process
// (--repeat 2: cold, then the same request warm), the same prompt ids as
// spill's, rows with the bench metrics (no hit rate for the peer), every
// request's sample and the processes' own figures.
TEST(ExpPeerTest, BenchWorkloadRunsOnBothEngines) {
  const char *peer = getenv("SPILL_LLAMA_PEER");
  if (!peer || access(peer, X_OK) != 0)
    GTEST_SKIP() << "llama.cpp peer not built (run ./lab peers; ./lab test passes SPILL_LLAMA_PEER)";
  std::string g = MakeGguf("bench", 23, "Q8_0");
  std::string c = Import(g);
  std::string text = R"({"name": "bench", "model": ")" + c + R"(", "model_gguf": ")" + g +
                     R"(", "workload": {"bench": {"pp": 24, "tg": 3, "prompts": ["code", "chat"]}},
    "arms": [{"name": "spill", "set": {"threads": 2}},
             {"name": "llama.cpp-mmap", "peer": "llama.cpp", "args": {"load": "mmap", "repack": false}}],
    "repeats": 1})";
  spill_exp_config cfg = Parse(text);
  spill_err e = {};
  ASSERT_EQ(spill_exp_preflight(&cfg, nullptr, &e), 0) << e.msg;
  spill_exp_opts o = {};
  std::string results = TmpDir() + "/bench";
  o.results_root = results.c_str();
  o.commit = "test";
  o.quick_env = 1;
  char dir[1024];
  ASSERT_EQ(spill_exp_execute(&cfg, &o, dir, sizeof dir, &e), 0) << e.msg;
  std::istringstream in(Slurp(std::string(dir) + "/runs.jsonl"));
  std::string line;
  int rows = 0;
  while (std::getline(in, line)) {
    rows++;
    bool is_peer = line.find("\"peer\":\"llama.cpp\"") != std::string::npos;
    EXPECT_NE(line.find("\"tokens\":{\"n\":12,"), std::string::npos) << "2 prompts x 2 phases x 3: " << line;
    for (const char *m : {"pp_tok_per_s_cold", "tg_tok_per_s_cold", "ttft_s_cold", "peak_rss_bytes_cold",
                          "pp_tok_per_s_warm", "tg_tok_per_s_warm", "ttft_s_warm",
                          "decode_bytes_per_token_warm"}) {
      double v = -1;
      size_t at = line.find(std::string("\"") + m + "\":");
      ASSERT_NE(at, std::string::npos) << m << ": " << line;
      sscanf(line.c_str() + at + strlen(m) + 3, "%lf", &v);
      if (strncmp(m, "decode_bytes", 12)) EXPECT_GT(v, 0) << m << ": " << line;
    }
    EXPECT_NE(line.find("\"prompt\":\"chat\",\"phase\":\"warm\",\"n_prompt\":24,\"n_gen\":3"),
              std::string::npos) << line;
    if (!is_peer) continue;
    EXPECT_EQ(line.find("decode_hit_rate"), std::string::npos) << "a peer has no expert cache";
    EXPECT_NE(line.find("\"processes\":[{\"prompt\":\"code\""), std::string::npos) << line;
    // the peer's warm request is the same request in the same process: same ids
    size_t h0 = line.find("\"tokens_hash\":\""), h1 = line.find("\"tokens_hash\":\"", h0 + 1);
    ASSERT_NE(h1, std::string::npos) << line;
    EXPECT_EQ(line.substr(h0 + 15, 16), line.substr(h1 + 15, 16)) << line;
  }
  EXPECT_EQ(rows, 2);
  std::string table = Slurp(std::string(dir) + "/table.md");
  EXPECT_NE(table.find("| llama.cpp-mmap | 1 |"), std::string::npos) << table;
  EXPECT_NE(table.find("tg tok/s warm"), std::string::npos) << table;
  spill_exp_config_free(&cfg);
}
