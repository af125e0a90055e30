// engine/format/corruption_test.cc: corrupted containers through the whole
// ENGINE (spill_engine_open + spill_generate, and spill_verify), not the
// format functions alone (container_test.cc / record_test.cc cover those).
//
// Each case copies a generated nano container (3 MoE banks of 16 rvq3
// experts, 4 KiB records) into TEST_TMPDIR, damages it one way and checks
// that the engine answers with a specific status and a message naming the
// file (and, for a record, its layer and expert): never a crash, a hang or a
// silently wrong answer. Payload bit flips are caught only with verify on;
// with verify off they are undetectable by design (docs/RELIABILITY.md),
// which the test pins down so the documentation stays true.
#include <gtest/gtest.h>
#include <cjson/cJSON.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <fstream>
#include <iterator>
#include <regex>
#include <string>
#include <vector>

#include <unistd.h>

#include "engine/base/crc32.h"
#include "engine/format/container.h"
#include "engine/spill.h"
#include "research/gen/spill_gen.h"

namespace {

std::string Tmp() {
  const char *t = std::getenv("TEST_TMPDIR");
  return t ? t : "/tmp";
}

const std::string &Pristine() {
  static std::string dir;
  if (dir.empty()) {
    std::string d = Tmp() + "/nano-pristine";
    spill_gen_request r = {};
    r.preset = "nano";
    spill_err e = {};
    EXPECT_EQ(spill_gen(d.c_str(), &r, nullptr, nullptr, &e), SPILL_OK) << e.msg;
    dir = d;
  }
  return dir;
}

// A fresh copy of the pristine container, to damage.
std::string Copy(const std::string &name) {
  std::string d = Tmp() + "/corrupt-" + name;
  std::string cmd = "rm -rf '" + d + "' && cp -r '" + Pristine() + "' '" + d + "'";
  EXPECT_EQ(system(cmd.c_str()), 0);
  return d;
}

std::string ReadAll(const std::string &p) {
  std::ifstream f(p, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>());
}

void WriteAll(const std::string &p, const std::string &s) {
  std::ofstream f(p, std::ios::binary | std::ios::trunc);
  f.write(s.data(), (std::streamsize)s.size());
}

// Edits manifest.json with fn(root).
template <class F>
void EditManifest(const std::string &dir, F fn) {
  std::string text = ReadAll(dir + "/manifest.json");
  cJSON *root = cJSON_Parse(text.c_str());
  ASSERT_NE(root, nullptr);
  fn(root);
  char *out = cJSON_Print(root);
  WriteAll(dir + "/manifest.json", out);
  free(out);
  cJSON_Delete(root);
}

cJSON *Bank(cJSON *root, int i) { return cJSON_GetArrayItem(cJSON_GetObjectItem(root, "banks"), i); }

void SetNumber(cJSON *obj, const char *key, double v) {
  cJSON_ReplaceItemInObject(obj, key, cJSON_CreateNumber(v));
}

struct Outcome {
  int open_rc = 0, gen_rc = 0, verify_rc = 0;
  std::string open_msg, gen_msg, verify_msg;
  std::vector<int> tokens;
};

int Collect(void *user, int token, const char *, const spill_run_stats *) {
  static_cast<std::vector<int> *>(user)->push_back(token);
  return 0;
}

// Opens the container, generates 16 greedy tokens (cache off, so every
// routed expert is read from disk each time), and runs spill_verify.
Outcome RunEngine(const std::string &dir, int verify) {
  Outcome o;
  spill_config c;
  spill_config_default(&c);
  c.ctx = 128;
  c.io_threads = 2;
  c.storage = SPILL_STORAGE_PAGECACHE;
  c.cache_slots = 0;
  c.verify = verify;
  spill_engine *eng = nullptr;
  spill_err e = {};
  o.open_rc = spill_engine_open(dir.c_str(), &c, &eng, &e);
  o.open_msg = e.msg;
  if (o.open_rc == SPILL_OK) {
    int toks[64], n = 0;
    EXPECT_EQ(spill_tokenize(eng, "A corrupted expert must be named", 1, toks, 64, &n, &e),
              SPILL_OK);
    spill_sampling s = {0.0f, 0, 1.0f, 1};
    spill_run_stats st;
    spill_err ge = {};
    o.gen_rc = spill_generate(eng, toks, n, 16, &s, Collect, &o.tokens, nullptr, &st, &ge);
    o.gen_msg = ge.msg;
    spill_engine_close(eng);
  }
  spill_err ve = {};
  o.verify_rc = spill_verify(dir.c_str(), nullptr, nullptr, &ve);
  o.verify_msg = ve.msg;
  return o;
}

bool Has(const std::string &msg, const std::string &sub) {
  return msg.find(sub) != std::string::npos;
}

// "experts-002.bin: layer 2 expert 7: ..." for any expert of layer L.
bool NamesRecord(const std::string &msg, int layer) {
  char file[32];
  snprintf(file, sizeof file, "experts-%03d.bin", layer);
  std::regex re(std::string(file) + ".*layer " + std::to_string(layer) + " expert [0-9]+");
  return std::regex_search(msg, re);
}

const uint64_t kRec = 4096, kHdr = 4096;
const int kExperts = 16;

// Applies fn to every record of bank `layer` (bytes of the whole record).
template <class F>
void EditRecords(const std::string &dir, int layer, F fn) {
  char name[32];
  snprintf(name, sizeof name, "/experts-%03d.bin", layer);
  std::string p = dir + name;
  std::string b = ReadAll(p);
  ASSERT_EQ(b.size(), kHdr + kExperts * kRec);
  for (int x = 0; x < kExperts; x++) fn(x, &b[kHdr + x * kRec]);
  WriteAll(p, b);
}

TEST(EngineCorruptionTest, PristineContainerRunsAndVerifies) {
  Outcome o = RunEngine(Copy("pristine"), 1);
  ASSERT_EQ(o.open_rc, SPILL_OK) << o.open_msg;
  EXPECT_EQ(o.gen_rc, SPILL_OK) << o.gen_msg;
  EXPECT_EQ(o.tokens.size(), 16u);
  EXPECT_EQ(o.verify_rc, SPILL_OK) << o.verify_msg;
}

TEST(EngineCorruptionTest, TruncatedBankIsRefusedAtOpenNamingTheFile) {
  std::string d = Copy("trunc-bank");
  ASSERT_EQ(truncate((d + "/experts-002.bin").c_str(), kHdr + 15 * kRec + 100), 0);
  Outcome o = RunEngine(d, 0);
  EXPECT_LT(o.open_rc, 0);
  EXPECT_TRUE(Has(o.open_msg, "experts-002.bin")) << o.open_msg;
  EXPECT_LT(o.verify_rc, 0);
  EXPECT_TRUE(Has(o.verify_msg, "experts-002.bin")) << o.verify_msg;
}

TEST(EngineCorruptionTest, TruncatedManifestIsAFormatErrorNamingIt) {
  for (size_t keep : {size_t(0), size_t(1), size_t(100), size_t(5000)}) {
    std::string d = Copy("trunc-manifest");
    std::string m = ReadAll(d + "/manifest.json");
    ASSERT_GT(m.size(), keep);
    WriteAll(d + "/manifest.json", m.substr(0, keep));
    Outcome o = RunEngine(d, 0);
    EXPECT_LT(o.open_rc, 0) << keep;
    EXPECT_TRUE(Has(o.open_msg, "manifest.json")) << keep << ": " << o.open_msg;
    EXPECT_LT(o.verify_rc, 0) << keep;
  }
}

TEST(EngineCorruptionTest, FlippedPayloadBitIsCaughtWithVerifyOnly) {
  // One bit in the middle of every payload of layer 2 (whatever the router
  // picks, it reads a damaged record).
  std::string d = Copy("bitflip");
  EditRecords(d, 2, [](int, char *rec) { rec[64 + 700] ^= 0x10; });
  Outcome on = RunEngine(d, 1);
  ASSERT_EQ(on.open_rc, SPILL_OK) << on.open_msg;
  EXPECT_EQ(on.gen_rc, SPILL_E_CHECKSUM) << on.gen_msg;
  EXPECT_TRUE(NamesRecord(on.gen_msg, 2)) << on.gen_msg;
  EXPECT_TRUE(Has(on.gen_msg, "payload checksum")) << on.gen_msg;
  // The offline audit catches it too, whatever the runtime setting.
  EXPECT_EQ(on.verify_rc, SPILL_E_CHECKSUM) << on.verify_msg;
  EXPECT_TRUE(Has(on.verify_msg, "experts-002.bin")) << on.verify_msg;
  // verify off: undetectable by design (headers are intact); it must still
  // run to completion without crashing.
  Outcome off = RunEngine(d, 0);
  ASSERT_EQ(off.open_rc, SPILL_OK) << off.open_msg;
  EXPECT_EQ(off.gen_rc, SPILL_OK) << off.gen_msg;
  EXPECT_EQ(off.tokens.size(), 16u);
}

// Re-encodes each record header of layer 2 after fn changed it, with a valid
// header crc: the damage is semantic, not a checksum error.
template <class F>
void EditHeaders(const std::string &dir, F fn) {
  EditRecords(dir, 2, [&](int x, char *rec) {
    spill_record_header h;
    spill_record_header_decode(reinterpret_cast<const uint8_t *>(rec), &h);
    fn(x, &h);
    spill_record_header_encode(&h, reinterpret_cast<uint8_t *>(rec));
  });
}

TEST(EngineCorruptionTest, HeaderNamingAnotherLayerIsAlwaysCaught) {
  std::string d = Copy("wrong-layer");
  EditHeaders(d, [](int, spill_record_header *h) { h->layer = 3; });
  for (int verify : {0, 1}) {
    Outcome o = RunEngine(d, verify);
    ASSERT_EQ(o.open_rc, SPILL_OK) << o.open_msg;
    EXPECT_EQ(o.gen_rc, SPILL_E_FORMAT) << verify << ": " << o.gen_msg;
    EXPECT_TRUE(NamesRecord(o.gen_msg, 2)) << o.gen_msg;
    EXPECT_TRUE(Has(o.gen_msg, "holds layer 3")) << o.gen_msg;
    EXPECT_LT(o.verify_rc, 0);
  }
}

TEST(EngineCorruptionTest, HeaderNamingAnotherExpertIsAlwaysCaught) {
  std::string d = Copy("wrong-expert");
  EditHeaders(d, [](int x, spill_record_header *h) { h->expert = (uint32_t)(x + 1) % kExperts; });
  for (int verify : {0, 1}) {
    Outcome o = RunEngine(d, verify);
    ASSERT_EQ(o.open_rc, SPILL_OK) << o.open_msg;
    EXPECT_EQ(o.gen_rc, SPILL_E_FORMAT) << verify << ": " << o.gen_msg;
    EXPECT_TRUE(NamesRecord(o.gen_msg, 2)) << o.gen_msg;
  }
}

TEST(EngineCorruptionTest, BadRecordMagicIsAlwaysCaught) {
  std::string d = Copy("bad-magic");
  EditHeaders(d, [](int, spill_record_header *h) { h->magic = 0x12345678u; });
  for (int verify : {0, 1}) {
    Outcome o = RunEngine(d, verify);
    ASSERT_EQ(o.open_rc, SPILL_OK) << o.open_msg;
    EXPECT_EQ(o.gen_rc, SPILL_E_FORMAT) << o.gen_msg;
    EXPECT_TRUE(NamesRecord(o.gen_msg, 2)) << o.gen_msg;
    EXPECT_TRUE(Has(o.gen_msg, "magic")) << o.gen_msg;
  }
}

TEST(EngineCorruptionTest, RawHeaderByteDamageIsAlwaysCaught) {
  // A flipped header bit without re-encoding: the header crc catches it.
  std::string d = Copy("hdr-bit");
  EditRecords(d, 2, [](int, char *rec) { rec[9] ^= 0x01; });
  Outcome o = RunEngine(d, 0);
  ASSERT_EQ(o.open_rc, SPILL_OK) << o.open_msg;
  EXPECT_EQ(o.gen_rc, SPILL_E_CHECKSUM) << o.gen_msg;
  EXPECT_TRUE(NamesRecord(o.gen_msg, 2)) << o.gen_msg;
}

TEST(EngineCorruptionTest, SwappedRecordsAreCaughtWithVerifyOff) {
  // Every pair (2k, 2k+1) of layer 2 swapped: valid records, wrong places.
  std::string d = Copy("swapped");
  std::string p = d + "/experts-002.bin";
  std::string b = ReadAll(p);
  for (int x = 0; x + 1 < kExperts; x += 2)
    std::swap_ranges(b.begin() + kHdr + x * kRec, b.begin() + kHdr + (x + 1) * kRec,
                     b.begin() + kHdr + (x + 1) * kRec);
  WriteAll(p, b);
  Outcome o = RunEngine(d, 0);
  ASSERT_EQ(o.open_rc, SPILL_OK) << o.open_msg;
  EXPECT_EQ(o.gen_rc, SPILL_E_FORMAT) << o.gen_msg;
  EXPECT_TRUE(NamesRecord(o.gen_msg, 2)) << o.gen_msg;
  EXPECT_TRUE(Has(o.gen_msg, "swapped")) << o.gen_msg;
}

// A model of the same shape from another seed: its banks and records are
// self-consistent (valid crcs, right layer and expert ids), so only the
// container identity (format v2) ties them to their own manifest.
const std::string &OtherSeed() {
  static std::string dir;
  if (dir.empty()) {
    std::string d = Tmp() + "/nano-seed2";
    spill_gen_request r = {};
    r.preset = "nano";
    r.seed = 2;
    spill_err e = {};
    EXPECT_EQ(spill_gen(d.c_str(), &r, nullptr, nullptr, &e), SPILL_OK) << e.msg;
    dir = d;
  }
  return dir;
}

TEST(EngineCorruptionTest, BankFromAnotherModelIsRefusedWithAndWithoutVerify) {
  // The whole bank file copied over: refused at open (bank header id).
  std::string d = Copy("foreign-bank");
  WriteAll(d + "/experts-002.bin", ReadAll(OtherSeed() + "/experts-002.bin"));
  for (int verify : {0, 1}) {
    Outcome o = RunEngine(d, verify);
    EXPECT_EQ(o.open_rc, SPILL_E_FORMAT) << verify << ": " << o.open_msg;
    EXPECT_TRUE(Has(o.open_msg, "experts-002.bin: bank of container")) << o.open_msg;
    EXPECT_TRUE(Has(o.open_msg, "another model")) << o.open_msg;
    EXPECT_NE(o.verify_rc, SPILL_OK);
  }
  // Only the records copied (this container's bank header kept): every
  // record read is refused, verify on or off.
  d = Copy("foreign-records");
  std::string mine = ReadAll(d + "/experts-002.bin");
  std::string theirs = ReadAll(OtherSeed() + "/experts-002.bin");
  ASSERT_EQ(mine.size(), theirs.size());
  WriteAll(d + "/experts-002.bin", mine.substr(0, kHdr) + theirs.substr(kHdr));
  for (int verify : {0, 1}) {
    Outcome o = RunEngine(d, verify);
    ASSERT_EQ(o.open_rc, SPILL_OK) << o.open_msg;
    EXPECT_EQ(o.gen_rc, SPILL_E_FORMAT) << verify << ": " << o.gen_msg;
    EXPECT_TRUE(NamesRecord(o.gen_msg, 2)) << o.gen_msg;
    EXPECT_TRUE(Has(o.gen_msg, "from another model")) << o.gen_msg;
    EXPECT_NE(o.verify_rc, SPILL_OK);
  }
}

// Format v1 (no container id) is still read: the pristine v2 container
// rewritten as v1 (headers re-encoded with version 1 and zero ids, manifest
// without container_id, file crcs updated) runs, verifies and gives the same
// tokens.
TEST(EngineCorruptionTest, Version1ContainerIsStillReadWithTheSameTokens) {
  std::string d = Copy("v1");
  std::vector<std::pair<std::string, uint32_t>> crcs;
  for (int layer = 1; layer <= 3; layer++) {
    char name[32];
    snprintf(name, sizeof name, "experts-%03d.bin", layer);
    std::string p = d + "/" + name;
    std::string b = ReadAll(p);
    ASSERT_EQ(b.size(), kHdr + kExperts * kRec);
    uint8_t *u = reinterpret_cast<uint8_t *>(&b[0]);
    spill_bank_header bh;
    spill_bank_header_decode(u, &bh);
    ASSERT_EQ(bh.version, 2u);
    ASSERT_NE(bh.container_id, 0u);
    bh.version = 1;
    bh.container_id = 0;
    spill_bank_header_encode(&bh, u);
    for (int x = 0; x < kExperts; x++) {
      spill_record_header rh;
      spill_record_header_decode(u + kHdr + x * kRec, &rh);
      rh.version = 1;
      rh.container_id = 0;
      spill_record_header_encode(&rh, u + kHdr + x * kRec);
    }
    WriteAll(p, b);
    crcs.push_back({name, spill_crc32(0, u, b.size())});
  }
  EditManifest(d, [&](cJSON *root) {
    SetNumber(root, "version", 1);
    cJSON_DeleteItemFromObject(root, "container_id");
    cJSON *files = cJSON_GetObjectItem(root, "files");
    for (cJSON *f = files->child; f; f = f->next)
      for (auto &c : crcs)
        if (c.first == cJSON_GetObjectItem(f, "name")->valuestring)
          SetNumber(f, "crc32", c.second);
  });
  Outcome v1 = RunEngine(d, 1), v2 = RunEngine(Pristine(), 1);
  ASSERT_EQ(v1.open_rc, SPILL_OK) << v1.open_msg;
  EXPECT_EQ(v1.gen_rc, SPILL_OK) << v1.gen_msg;
  EXPECT_EQ(v1.verify_rc, SPILL_OK) << v1.verify_msg;
  EXPECT_EQ(v1.tokens, v2.tokens);
  EXPECT_EQ(v1.tokens.size(), 16u);
  // A v2 bank in the v1 container is refused by its version.
  WriteAll(d + "/experts-002.bin", ReadAll(Pristine() + "/experts-002.bin"));
  Outcome mixed = RunEngine(d, 0);
  EXPECT_EQ(mixed.open_rc, SPILL_E_VERSION) << mixed.open_msg;
  EXPECT_TRUE(Has(mixed.open_msg, "experts-002.bin: bank version 2 in a version 1 container"))
      << mixed.open_msg;
}

TEST(EngineCorruptionTest, BankHeaderMismatchIsRefusedAtOpen) {
  // Bank magic damaged, then a bank header claiming another layer.
  std::string d = Copy("bank-magic");
  std::string p = d + "/experts-003.bin";
  std::string b = ReadAll(p);
  b[0] ^= 0x20;
  WriteAll(p, b);
  Outcome o = RunEngine(d, 0);
  EXPECT_EQ(o.open_rc, SPILL_E_FORMAT) << o.open_msg;
  EXPECT_TRUE(Has(o.open_msg, "experts-003.bin")) << o.open_msg;

  d = Copy("bank-layer");
  p = d + "/experts-003.bin";
  b = ReadAll(p);
  spill_bank_header h;
  spill_bank_header_decode(reinterpret_cast<const uint8_t *>(b.data()), &h);
  h.layer = 1;
  spill_bank_header_encode(&h, reinterpret_cast<uint8_t *>(&b[0]));
  WriteAll(p, b);
  o = RunEngine(d, 0);
  EXPECT_EQ(o.open_rc, SPILL_E_FORMAT) << o.open_msg;
  EXPECT_TRUE(Has(o.open_msg, "experts-003.bin")) << o.open_msg;
}

TEST(EngineCorruptionTest, OffsetsPastTheEndOfFileAreRefused) {
  // A bank whose records would start past the end of its file, and a bank
  // claiming more experts than its file holds.
  std::string d = Copy("offset-past-eof");
  EditManifest(d, [](cJSON *root) { SetNumber(Bank(root, 1), "data_offset", 1 << 30); });
  Outcome o = RunEngine(d, 0);
  EXPECT_LT(o.open_rc, 0);
  EXPECT_FALSE(o.open_msg.empty());
  EXPECT_LT(o.verify_rc, 0);

  d = Copy("more-experts");
  EditManifest(d, [](cJSON *root) { SetNumber(Bank(root, 1), "n_experts", 17); });
  o = RunEngine(d, 0);
  EXPECT_LT(o.open_rc, 0);
  EXPECT_TRUE(Has(o.open_msg, "manifest.json") || Has(o.open_msg, "experts-002.bin"))
      << o.open_msg;

  // A trunk tensor whose offset lies past the end of trunk.bin.
  d = Copy("tensor-past-eof");
  EditManifest(d, [](cJSON *root) {
    cJSON *t = cJSON_GetArrayItem(cJSON_GetObjectItem(root, "tensors"), 0);
    SetNumber(t, "offset", 64.0 * (1 << 24));
  });
  o = RunEngine(d, 0);
  EXPECT_LT(o.open_rc, 0);
  EXPECT_FALSE(o.open_msg.empty());
}

TEST(EngineCorruptionTest, DimensionProductsThatOverflowAreRefused) {
  // Products that overflow 32 or 64 bits must be errors, not wrapped sizes.
  struct Case {
    const char *name;
    void (*edit)(cJSON *);
  } cases[] = {
      {"d_model", [](cJSON *r) { SetNumber(cJSON_GetObjectItem(r, "arch"), "d_model", 2147483647.0); }},
      {"vocab", [](cJSON *r) { SetNumber(cJSON_GetObjectItem(r, "arch"), "vocab_size", 2147483647.0); }},
      {"d_expert",
       [](cJSON *r) {
         SetNumber(cJSON_GetObjectItem(cJSON_GetObjectItem(r, "arch"), "moe"), "d_expert",
                   2147483647.0);
       }},
      {"tensor-shape",
       [](cJSON *r) {
         cJSON *t = cJSON_GetArrayItem(cJSON_GetObjectItem(r, "tensors"), 0);
         cJSON *shape = cJSON_CreateArray();
         cJSON_AddItemToArray(shape, cJSON_CreateNumber(4294967296.0 * 65536));
         cJSON_AddItemToArray(shape, cJSON_CreateNumber(4294967296.0 * 65536));
         cJSON_ReplaceItemInObject(t, "shape", shape);
       }},
      {"n_experts",
       [](cJSON *r) {
         SetNumber(cJSON_GetObjectItem(cJSON_GetObjectItem(r, "arch"), "moe"), "n_experts",
                   4294967295.0);
       }},
  };
  for (const Case &c : cases) {
    std::string d = Copy(std::string("overflow-") + c.name);
    EditManifest(d, c.edit);
    Outcome o = RunEngine(d, 0);
    EXPECT_LT(o.open_rc, 0) << c.name;
    EXPECT_TRUE(Has(o.open_msg, "manifest.json")) << c.name << ": " << o.open_msg;
  }
}

TEST(EngineCorruptionTest, ManifestLyingAboutRecordSizeIsRefused) {
  // Record size doubled everywhere it is stated: the layout of the arch
  // says 4096 and the files are too short for 8192-byte records.
  std::string d = Copy("record-size");
  EditManifest(d, [](cJSON *root) {
    SetNumber(cJSON_GetObjectItem(root, "experts"), "record_bytes", 8192);
    cJSON *banks = cJSON_GetObjectItem(root, "banks");
    for (int i = 0; i < cJSON_GetArraySize(banks); i++)
      SetNumber(cJSON_GetArrayItem(banks, i), "record_bytes", 8192);
  });
  Outcome o = RunEngine(d, 0);
  EXPECT_LT(o.open_rc, 0);
  EXPECT_TRUE(Has(o.open_msg, "manifest.json") || Has(o.open_msg, "experts-00")) << o.open_msg;

  // Only one bank lies.
  d = Copy("record-size-bank");
  EditManifest(d, [](cJSON *root) { SetNumber(Bank(root, 2), "record_bytes", 2048); });
  o = RunEngine(d, 0);
  EXPECT_LT(o.open_rc, 0);
  EXPECT_FALSE(o.open_msg.empty());

  // Payload size smaller than the sections: the record check would read
  // past it.
  d = Copy("payload-size");
  EditManifest(d, [](cJSON *root) {
    SetNumber(cJSON_GetObjectItem(root, "experts"), "payload_bytes", 100);
  });
  o = RunEngine(d, 0);
  EXPECT_LT(o.open_rc, 0);
  EXPECT_TRUE(Has(o.open_msg, "manifest.json")) << o.open_msg;
}


// The trunk's tensor crc32s are checked at open in every trunk mode (mmap
// used to skip them without verify: a corrupt trunk gave exit 0 and wrong
// text), issue 19 item 7.
TEST(EngineCorruptionTest, CorruptTrunkIsRefusedInEveryTrunkMode) {
  std::string d = Copy("trunk-bit");
  std::string t = ReadAll(d + "/trunk.bin");
  t[100] ^= 0x10;  // inside tok_embd (offset 0)
  WriteAll(d + "/trunk.bin", t);
  for (spill_trunk_mode mode : {SPILL_TRUNK_READ, SPILL_TRUNK_MMAP, SPILL_TRUNK_MLOCK}) {
    spill_config c;
    spill_config_default(&c);
    c.ctx = 128;
    c.storage = SPILL_STORAGE_PAGECACHE;
    c.trunk = mode;
    c.verify = 0;
    spill_engine *eng = nullptr;
    spill_err e = {};
    int rc = spill_engine_open(d.c_str(), &c, &eng, &e);
    if (rc == SPILL_E_NOMEM && mode == SPILL_TRUNK_MLOCK) continue;  // RLIMIT_MEMLOCK
    EXPECT_EQ(rc, SPILL_E_CHECKSUM) << spill_trunk_mode_name(mode) << ": " << e.msg;
    EXPECT_TRUE(Has(e.msg, "trunk.bin: tensor tok_embd:") && Has(e.msg, "mismatch")) << e.msg;
    if (rc == SPILL_OK) spill_engine_close(eng);
  }
}

// `spill verify` runs every check `spill run` (spill_engine_open) runs:
// manifests that pass the byte audit but describe another model are refused
// by both (issue 19 item 6).
TEST(EngineCorruptionTest, VerifyRefusesWhatOpenRefuses) {
  struct Case {
    const char *name;
    std::function<void(cJSON *)> edit;
  } cases[] = {
      {"d_model", [](cJSON *r) { SetNumber(cJSON_GetObjectItem(r, "arch"), "d_model", 32); }},
      {"shape-swapped",
       [](cJSON *r) {
         cJSON *t = cJSON_GetArrayItem(cJSON_GetObjectItem(r, "tensors"), 0);
         cJSON *s = cJSON_GetObjectItem(t, "shape");
         double a = cJSON_GetArrayItem(s, 0)->valuedouble, b = cJSON_GetArrayItem(s, 1)->valuedouble;
         cJSON_ReplaceItemInObject(t, "shape", cJSON_CreateIntArray(std::vector<int>{(int)b, (int)a}.data(), 2));
       }},
      {"name-byte",
       [](cJSON *r) {
         cJSON *t = cJSON_GetArrayItem(cJSON_GetObjectItem(r, "tensors"), 0);
         std::string n = cJSON_GetObjectItem(t, "name")->valuestring;
         n[n.size() - 1] ^= 1;
         cJSON_ReplaceItemInObject(t, "name", cJSON_CreateString(n.c_str()));
       }},
  };
  for (auto &c : cases) {
    std::string d = Copy(std::string("verify-") + c.name);
    EditManifest(d, c.edit);
    Outcome o = RunEngine(d, 0);
    EXPECT_NE(o.open_rc, SPILL_OK) << c.name;
    EXPECT_NE(o.verify_rc, SPILL_OK) << c.name << ": verify said clean; open said: " << o.open_msg;
  }
}

// The manifest is UTF-8: invalid bytes are refused, naming the offset
// (issue 19 item 13).
TEST(EngineCorruptionTest, InvalidUtf8InTheManifestIsRefused) {
  std::string d = Copy("utf8");
  std::string m = ReadAll(d + "/manifest.json");
  size_t at = m.find("nano-k3-s1");
  ASSERT_NE(at, std::string::npos);
  m[at] = '\xC0';  // an overlong lead byte
  WriteAll(d + "/manifest.json", m);
  Outcome o = RunEngine(d, 0);
  EXPECT_EQ(o.open_rc, SPILL_E_FORMAT) << o.open_msg;
  EXPECT_TRUE(Has(o.open_msg, "invalid UTF-8")) << o.open_msg;
}

}  // namespace
