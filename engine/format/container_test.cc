// Tests of the writer, the reader and the verifier on tiny containers written
// into $TEST_TMPDIR (container_write.c, container_read.c, container_verify.c):
// what is written reads back bit for bit, and every kind of damage on disk
// (truncation, wrong magic, swapped records, flipped bits, lying manifest)
// yields its specific error naming the file, layer and expert.
#include <gtest/gtest.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <string>
#include <vector>

#include "engine/base/alloc.h"
#include "engine/format/container.h"
#include "engine/format/container_test_util.h"

namespace {

using spill_test::Contains;
using spill_test::ReadAll;
using spill_test::TinyModel;
using spill_test::WriteAll;

std::string Written(const std::string &name, spill_dtype dt = SPILL_DT_RVQ3) {
  std::string dir = spill_test::TmpDir(name);
  TinyModel tm(dt);
  spill_err e = {};
  EXPECT_EQ(spill_test::WriteTiny(dir, tm, &e), SPILL_OK) << e.msg;
  return dir;
}

// Flips one bit of a file in place.
void FlipBit(const std::string &path, uint64_t off, int bit = 0) {
  std::string d = ReadAll(path);
  ASSERT_LT(off, d.size());
  d[off] = (char)(d[off] ^ (1 << bit));
  WriteAll(path, d);
}

struct Progress {
  uint64_t last = 0, total = 0;
  int calls = 0;
  bool monotonic = true;
  static void Cb(void *ctx, uint64_t done, uint64_t total) {
    Progress *p = static_cast<Progress *>(ctx);
    if (done < p->last) p->monotonic = false;
    p->last = done;
    p->total = total;
    p->calls++;
  }
};

class ContainerRoundTripTest : public ::testing::TestWithParam<spill_dtype> {};

TEST_P(ContainerRoundTripTest, ReadsBackWhatWasWrittenAndVerifies) {
  spill_dtype dt = GetParam();
  std::string dir = Written(std::string("rt_") + spill_dtype_name(dt), dt);
  spill_container c;
  spill_err e = {};
  ASSERT_EQ(spill_container_open(dir.c_str(), &c, &e), SPILL_OK) << e.msg;
  EXPECT_EQ(c.m.expert_dtype, dt);
  EXPECT_EQ(c.m.record_bytes % SPILL_PAGE, 0u);
  for (int i = 0; i < c.m.n_tensors; i++) {
    const spill_tensor_info *t = &c.m.tensors[i];
    EXPECT_EQ(t->offset % SPILL_TENSOR_ALIGN, 0u);
    std::vector<uint8_t> got(t->bytes);
    ASSERT_EQ(spill_container_read_tensor(&c, t, got.data(), got.size(), &e), SPILL_OK) << e.msg;
    EXPECT_EQ(got, spill_test::Pattern(t->bytes, (uint32_t)i)) << t->name;
  }
  void *rec = spill_alloc(c.m.record_bytes, SPILL_PAGE);
  for (int l = 1; l <= 2; l++) {
    ASSERT_NE(spill_container_bank(&c, l), nullptr);
    for (uint32_t x = 0; x < 4; x++) {
      ASSERT_EQ(spill_container_read_record(&c, l, x, rec, 1, &e), SPILL_OK) << e.msg;
      std::vector<uint8_t> want = spill_test::Pattern(c.m.payload_bytes, spill_test::RecordSalt(l, x));
      const uint8_t *r = static_cast<const uint8_t *>(rec);
      for (int s = 0; s < SPILL_SEC_COUNT; s++) {
        uint32_t off = c.m.sect[s].offset;
        EXPECT_EQ(memcmp(r + off, want.data() + off - SPILL_RECORD_HEADER_BYTES,
                         c.m.sect[s].bytes), 0)
            << "layer " << l << " expert " << x << " section " << s;
      }
      spill_record_header h;
      spill_record_header_decode(r, &h);
      EXPECT_EQ(h.layer, (uint32_t)l);
      EXPECT_EQ(h.expert, x);
    }
  }
  EXPECT_EQ(spill_container_bank(&c, 0), nullptr);
  EXPECT_EQ(spill_container_read_record(&c, 0, 0, rec, 0, &e), SPILL_E_RANGE);
  EXPECT_EQ(spill_container_read_record(&c, 1, 4, rec, 0, &e), SPILL_E_RANGE);
  EXPECT_EQ(spill_container_read_record(&c, 3, 0, rec, 0, &e), SPILL_E_RANGE);
  spill_free(rec, c.m.record_bytes);
  spill_container_close(&c);
  spill_container_close(&c);  // closing twice (zeroed) is fine

  Progress p;
  ASSERT_EQ(spill_container_verify(dir.c_str(), Progress::Cb, &p, &e), SPILL_OK) << e.msg;
  EXPECT_TRUE(p.monotonic);
  EXPECT_GT(p.calls, 2);
  EXPECT_EQ(p.last, p.total);
  struct stat st;
  uint64_t sum = 0;
  for (const char *f : {"/trunk.bin", "/experts-001.bin", "/experts-002.bin"}) {
    ASSERT_EQ(stat((dir + f).c_str(), &st), 0);
    sum += (uint64_t)st.st_size;
  }
  EXPECT_EQ(p.total, sum);
}

INSTANTIATE_TEST_SUITE_P(AllExpertDtypes, ContainerRoundTripTest,
                         ::testing::Values(SPILL_DT_F32, SPILL_DT_F16, SPILL_DT_BF16, SPILL_DT_Q8,
                                           SPILL_DT_Q4, SPILL_DT_RVQ3));

TEST(ContainerTest, TruncatedBankIsRejectedAtOpenNamingTheFile) {
  std::string dir = Written("trunc_bank");
  ASSERT_EQ(truncate((dir + "/experts-002.bin").c_str(), 4096 + 3 * 4096), 0);
  spill_container c;
  spill_err e = {};
  EXPECT_EQ(spill_container_open(dir.c_str(), &c, &e), SPILL_E_FORMAT);
  EXPECT_TRUE(Contains(e.msg, "experts-002.bin: 16384 bytes on disk, the manifest says 20480 (truncated)"))
      << e.msg;
  EXPECT_EQ(spill_container_verify(dir.c_str(), nullptr, nullptr, &e), SPILL_E_FORMAT);
  EXPECT_TRUE(Contains(e.msg, "truncated")) << e.msg;
}

// Issue 26 item 8: a FIFO named experts-N.bin made open(2) wait for a writer
// forever (verify, run). Refused by kind, without blocking.
TEST(ContainerTest, FifoInPlaceOfABankIsRefusedWithoutBlocking) {
  alarm(30);  // a hang fails the test
  std::string dir = Written("fifo_bank");
  std::string bank = dir + "/experts-002.bin";
  ASSERT_EQ(unlink(bank.c_str()), 0);
  ASSERT_EQ(mkfifo(bank.c_str(), 0644), 0);
  spill_container c;
  spill_err e = {};
  EXPECT_EQ(spill_container_open(dir.c_str(), &c, &e), SPILL_E_IO);
  EXPECT_TRUE(Contains(e.msg, "experts-002.bin: is a FIFO, not a regular file")) << e.msg;
  EXPECT_EQ(spill_container_verify(dir.c_str(), nullptr, nullptr, &e), SPILL_E_IO);
  EXPECT_TRUE(Contains(e.msg, "is a FIFO")) << e.msg;
  ASSERT_EQ(unlink(bank.c_str()), 0);
  ASSERT_EQ(mkfifo((dir + "/manifest.json.tmp").c_str(), 0644), 0);
  ASSERT_EQ(rename((dir + "/manifest.json.tmp").c_str(), (dir + "/manifest.json").c_str()), 0);
  EXPECT_EQ(spill_container_open(dir.c_str(), &c, &e), SPILL_E_IO);
  EXPECT_TRUE(Contains(e.msg, "manifest.json: is a FIFO")) << e.msg;
  alarm(0);
}

// A NUL escaped into a manifest name would cut it; a repeated key would be
// read as its first copy: both refused by the one reading layer.
TEST(ContainerTest, ManifestNulsAndRepeatedKeysAreRefusedByName) {
  std::string dir = Written("nul_manifest");
  std::string m = ReadAll(dir + "/manifest.json");
  size_t at = m.find("\"name\":");
  ASSERT_NE(at, std::string::npos);
  size_t q = m.find('"', at + 7);  // the value's opening quote
  std::string nul = m;
  nul.insert(q + 1, "x\\u0000");
  spill_manifest man;
  spill_err e = {};
  EXPECT_EQ(spill_manifest_parse(nul.data(), nul.size(), "manifest.json", &man, &e), SPILL_E_FORMAT);
  EXPECT_TRUE(Contains(e.msg, "\\u0000 (NUL) inside a string")) << e.msg;
  std::string dup = m;
  dup.insert(m.find('{') + 1, "\"name\": \"other\", ");
  EXPECT_EQ(spill_manifest_parse(dup.data(), dup.size(), "manifest.json", &man, &e), SPILL_E_FORMAT);
  EXPECT_TRUE(Contains(e.msg, "manifest.json: name: duplicate key")) << e.msg;
}

TEST(ContainerTest, TruncatedTrunkIsRejectedAtOpenNamingTheFile) {
  std::string dir = Written("trunc_trunk");
  ASSERT_EQ(truncate((dir + "/trunk.bin").c_str(), 100), 0);
  spill_container c;
  spill_err e = {};
  EXPECT_EQ(spill_container_open(dir.c_str(), &c, &e), SPILL_E_FORMAT);
  EXPECT_TRUE(Contains(e.msg, "trunk.bin: 100 bytes on disk")) << e.msg;
  ASSERT_EQ(unlink((dir + "/trunk.bin").c_str()), 0);
  EXPECT_EQ(spill_container_open(dir.c_str(), &c, &e), SPILL_E_IO);
  EXPECT_TRUE(Contains(e.msg, "trunk.bin: cannot open")) << e.msg;
}

// v3: per-bank section dtypes (docs/FORMAT.md). Bank of layer 1: gate f16,
// up f16, down f32; layer 2: gate bf16, up f16, down f16 (experts.dtype f16).
// Each section is sized for the largest of its banks' dtypes; a record's
// bytes after its own section are zero; header bytes carry the dtypes.
struct MixedTiny {
  TinyModel tm{SPILL_DT_F16};
  spill_bank_info banks[2];
  MixedTiny() {
    memset(banks, 0, sizeof banks);
    const spill_dtype d[2][3] = {{SPILL_DT_F16, SPILL_DT_F16, SPILL_DT_F32},
                                 {SPILL_DT_BF16, SPILL_DT_F16, SPILL_DT_F16}};
    for (int b = 0; b < 2; b++)
      for (int s = 0; s < 3; s++) banks[b].sect_dtype[s] = d[b][s];
    tm.m.banks = banks;
    tm.m.n_banks = 2;
    tm.m.sect_mixed = 1;
  }
};

int WriteMixed(const std::string &dir, MixedTiny &mt, bool dirty_slack, spill_err *e) {
  spill_writer *w = nullptr;
  SPILL_TRY(spill_writer_open(dir.c_str(), &mt.tm.m, &w, e));
  const spill_manifest *lm = spill_writer_manifest(w);
  int rc = SPILL_OK;
  for (int i = 0; i < lm->n_tensors && rc == SPILL_OK; i++) {
    std::vector<uint8_t> d = spill_test::Pattern(lm->tensors[i].bytes, (uint32_t)i);
    rc = spill_writer_tensor(w, lm->tensors[i].name, d.data(), d.size(), e);
  }
  for (int l = 1; l <= 2 && rc == SPILL_OK; l++)
    for (uint32_t x = 0; x < 4 && rc == SPILL_OK; x++) {
      std::vector<uint8_t> p = spill_test::Pattern(lm->payload_bytes, spill_test::RecordSalt(l, x));
      for (int s = 0; s < SPILL_SEC_COUNT; s++) {
        uint32_t used = spill_manifest_sect_bytes(lm, l, s);
        uint8_t *sp = p.data() + lm->sect[s].offset - SPILL_RECORD_HEADER_BYTES;
        memset(sp + used, 0, lm->sect[s].bytes - used);
        if (dirty_slack && used < lm->sect[s].bytes) sp[used] = 1;
      }
      rc = spill_writer_record(w, l, x, p.data(), e);
    }
  if (rc != SPILL_OK) {
    spill_writer_abort(w);
    return rc;
  }
  return spill_writer_finish(w, e);
}

TEST(ContainerTest, MixedSectionDtypesWriteV3AndReadBack) {
  std::string dir = spill_test::TmpDir("mixed");
  MixedTiny mt;
  spill_err e = {};
  ASSERT_EQ(WriteMixed(dir, mt, false, &e), SPILL_OK) << e.msg;
  spill_container c;
  ASSERT_EQ(spill_container_open(dir.c_str(), &c, &e), SPILL_OK) << e.msg;
  EXPECT_EQ(c.m.version, 3);
  EXPECT_EQ(c.m.sect_mixed, 1);
  EXPECT_EQ(c.m.expert_dtype, SPILL_DT_F16);
  // gate: max(f16, bf16) = 2*8*16; down: f32 in layer 1 = 4*16*8
  EXPECT_EQ(c.m.sect[0].bytes, 256u);
  EXPECT_EQ(c.m.sect[2].bytes, 512u);
  EXPECT_EQ(spill_manifest_sect_dtype(&c.m, 1, 2), SPILL_DT_F32);
  EXPECT_EQ(spill_manifest_sect_dtype(&c.m, 2, 2), SPILL_DT_F16);
  EXPECT_EQ(spill_manifest_sect_dtype(&c.m, 2, 0), SPILL_DT_BF16);
  EXPECT_EQ(spill_manifest_sect_bytes(&c.m, 2, 2), 256u);
  void *rec = spill_alloc(c.m.record_bytes, SPILL_PAGE);
  for (int l = 1; l <= 2; l++)
    for (uint32_t x = 0; x < 4; x++) {
      ASSERT_EQ(spill_container_read_record(&c, l, x, rec, 1, &e), SPILL_OK) << e.msg;
      spill_record_header h;
      spill_record_header_decode(static_cast<const uint8_t *>(rec), &h);
      for (int s = 0; s < 3; s++)
        EXPECT_EQ(h.sect_dtype[s], (uint8_t)mt.banks[l - 1].sect_dtype[s]);
    }
  const uint64_t rb = c.m.record_bytes;
  spill_free(rec, c.m.record_bytes);
  spill_container_close(&c);
  ASSERT_EQ(spill_container_verify(dir.c_str(), nullptr, nullptr, &e), SPILL_OK) << e.msg;

  // A record header claiming another section dtype (crc recomputed) is refused.
  std::string path = dir + "/experts-002.bin";
  std::string d = ReadAll(path);
  uint8_t hdr[64];
  memcpy(hdr, d.data() + 4096 + rb, 64);
  spill_record_header h;
  spill_record_header_decode(hdr, &h);
  h.sect_dtype[2] = SPILL_DT_F32;
  spill_record_header_encode(&h, hdr);
  d.replace(4096 + rb, 64, reinterpret_cast<const char *>(hdr), 64);
  WriteAll(path, d);
  ASSERT_EQ(spill_container_open(dir.c_str(), &c, &e), SPILL_OK) << e.msg;
  rec = spill_alloc(c.m.record_bytes, SPILL_PAGE);
  EXPECT_EQ(spill_container_read_record(&c, 2, 1, rec, 0, &e), SPILL_E_FORMAT);
  EXPECT_TRUE(Contains(e.msg, "layer 2 expert 1: section 2 dtype 0, manifest says f16")) << e.msg;
  spill_free(rec, c.m.record_bytes);
  spill_container_close(&c);
}

TEST(ContainerTest, MixedSectionsRefuseDirtySlackAndBadBankDtypes) {
  MixedTiny mt;
  spill_err e = {};
  EXPECT_EQ(WriteMixed(spill_test::TmpDir("mixed_dirty"), mt, true, &e), SPILL_E_INVALID_ARG);
  EXPECT_TRUE(Contains(e.msg, "non-zero bytes after its")) << e.msg;
  // rvq3 never mixes; q8 without a group dtype has no group
  MixedTiny bad;
  bad.banks[0].sect_dtype[1] = SPILL_DT_RVQ3;
  EXPECT_EQ(WriteMixed(spill_test::TmpDir("mixed_rvq"), bad, false, &e), SPILL_E_FORMAT);
  EXPECT_TRUE(Contains(e.msg, "rvq3 records are never mixed")) << e.msg;
  MixedTiny bad2;
  bad2.banks[1].sect_dtype[0] = SPILL_DT_Q8;
  EXPECT_EQ(WriteMixed(spill_test::TmpDir("mixed_q8"), bad2, false, &e), SPILL_E_FORMAT);
  EXPECT_TRUE(Contains(e.msg, "needs experts.group")) << e.msg;
  // read as v2 (no per-bank dtypes), the stated layout is not v2's
  std::string dir = spill_test::TmpDir("mixed_v2");
  MixedTiny ok;
  ASSERT_EQ(WriteMixed(dir, ok, false, &e), SPILL_OK) << e.msg;
  std::string j = ReadAll(dir + "/manifest.json");
  size_t at = j.find("\"version\":");
  ASSERT_NE(at, std::string::npos);
  size_t three = j.find('3', at);
  j[three] = '2';
  spill_manifest m;
  EXPECT_EQ(spill_manifest_parse(j.data(), j.size(), "m", &m, &e), SPILL_E_FORMAT) << e.msg;
  EXPECT_TRUE(Contains(e.msg, "but the layout needs")) << e.msg;
  spill_manifest_free(&m);
}

TEST(ContainerTest, WrongRecordMagicIsAFormatError) {
  std::string dir = Written("magic");
  FlipBit(dir + "/experts-001.bin", 4096 + 2 * 4096 + 1);  // expert 2, magic byte 1
  spill_container c;
  spill_err e = {};
  ASSERT_EQ(spill_container_open(dir.c_str(), &c, &e), SPILL_OK) << e.msg;
  void *rec = spill_alloc(c.m.record_bytes, SPILL_PAGE);
  EXPECT_EQ(spill_container_read_record(&c, 1, 1, rec, 0, &e), SPILL_OK) << e.msg;
  EXPECT_EQ(spill_container_read_record(&c, 1, 2, rec, 0, &e), SPILL_E_FORMAT);
  EXPECT_TRUE(Contains(e.msg, "experts-001.bin: layer 1 expert 2: bad record magic")) << e.msg;
  spill_free(rec, c.m.record_bytes);
  spill_container_close(&c);
  EXPECT_EQ(spill_container_verify(dir.c_str(), nullptr, nullptr, &e), SPILL_E_FORMAT);
  EXPECT_TRUE(Contains(e.msg, "layer 1 expert 2: bad record magic")) << e.msg;
}

TEST(ContainerTest, SwappedRecordsAreCaughtByTheirIds) {
  std::string dir = Written("swap");
  std::string path = dir + "/experts-002.bin";
  std::string d = ReadAll(path);
  std::string r1 = d.substr(4096 + 4096, 4096), r3 = d.substr(4096 + 3 * 4096, 4096);
  d.replace(4096 + 4096, 4096, r3);
  d.replace(4096 + 3 * 4096, 4096, r1);
  WriteAll(path, d);
  spill_container c;
  spill_err e = {};
  ASSERT_EQ(spill_container_open(dir.c_str(), &c, &e), SPILL_OK) << e.msg;
  void *rec = spill_alloc(c.m.record_bytes, SPILL_PAGE);
  // Each swapped record is internally consistent (crcs pass); only its ids
  // tell that it is in the wrong place.
  EXPECT_EQ(spill_container_read_record(&c, 2, 1, rec, 1, &e), SPILL_E_FORMAT);
  EXPECT_TRUE(Contains(e.msg, "layer 2 expert 1: record holds layer 2 expert 3")) << e.msg;
  EXPECT_EQ(spill_container_read_record(&c, 2, 0, rec, 1, &e), SPILL_OK) << e.msg;
  spill_free(rec, c.m.record_bytes);
  spill_container_close(&c);
  EXPECT_EQ(spill_container_verify(dir.c_str(), nullptr, nullptr, &e), SPILL_E_FORMAT);
  EXPECT_TRUE(Contains(e.msg, "swapped")) << e.msg;
}

TEST(ContainerTest, FlippedPayloadBitIsCaughtOnlyWithVerification) {
  std::string dir = Written("flip");
  spill_container c;
  spill_err e = {};
  ASSERT_EQ(spill_container_open(dir.c_str(), &c, &e), SPILL_OK) << e.msg;
  uint64_t off = c.m.banks[0].data_offset + 3 * c.m.record_bytes + c.m.sect[SPILL_SEC_UP].offset + 5;
  spill_container_close(&c);
  FlipBit(dir + "/experts-001.bin", off, 6);
  ASSERT_EQ(spill_container_open(dir.c_str(), &c, &e), SPILL_OK) << e.msg;
  void *rec = spill_alloc(c.m.record_bytes, SPILL_PAGE);
  EXPECT_EQ(spill_container_read_record(&c, 1, 3, rec, 0, &e), SPILL_OK) << e.msg;
  EXPECT_EQ(spill_container_read_record(&c, 1, 3, rec, 1, &e), SPILL_E_CHECKSUM);
  EXPECT_TRUE(Contains(e.msg, "experts-001.bin: layer 1 expert 3: payload checksum mismatch"))
      << e.msg;
  spill_free(rec, c.m.record_bytes);
  spill_container_close(&c);
  Progress p;
  EXPECT_EQ(spill_container_verify(dir.c_str(), Progress::Cb, &p, &e), SPILL_E_CHECKSUM);
  EXPECT_TRUE(Contains(e.msg, "experts-001.bin: layer 1 expert 3: payload checksum mismatch"))
      << e.msg;
  EXPECT_LT(p.last, p.total);
}

TEST(ContainerTest, FlippedHeaderBitIsAHeaderChecksumError) {
  std::string dir = Written("flip_hdr");
  FlipBit(dir + "/experts-001.bin", 4096 + 20);  // expert 0, payload_bytes field
  spill_container c;
  spill_err e = {};
  ASSERT_EQ(spill_container_open(dir.c_str(), &c, &e), SPILL_OK) << e.msg;
  void *rec = spill_alloc(c.m.record_bytes, SPILL_PAGE);
  EXPECT_EQ(spill_container_read_record(&c, 1, 0, rec, 0, &e), SPILL_E_CHECKSUM);
  EXPECT_TRUE(Contains(e.msg, "record header checksum mismatch")) << e.msg;
  spill_free(rec, c.m.record_bytes);
  spill_container_close(&c);
}

TEST(ContainerTest, VerifyCatchesTrunkBitAndNonZeroPadding) {
  std::string dir = Written("flip_trunk");
  spill_container c;
  spill_err e = {};
  ASSERT_EQ(spill_container_open(dir.c_str(), &c, &e), SPILL_OK) << e.msg;
  const spill_tensor_info *t = spill_manifest_find(&c.m, "blk.0.ffn_up");
  ASSERT_NE(t, nullptr);
  uint64_t off = t->offset + 17, tail = c.m.banks[1].data_offset + c.m.record_bytes - 1;
  spill_container_close(&c);
  FlipBit(dir + "/trunk.bin", off);
  ASSERT_EQ(spill_container_open(dir.c_str(), &c, &e), SPILL_OK) << e.msg;
  t = spill_manifest_find(&c.m, "blk.0.ffn_up");
  std::vector<uint8_t> buf(t->bytes);
  EXPECT_EQ(spill_container_read_tensor(&c, t, buf.data(), buf.size(), &e), SPILL_E_CHECKSUM);
  EXPECT_TRUE(Contains(e.msg, "trunk.bin: tensor blk.0.ffn_up: checksum mismatch")) << e.msg;
  EXPECT_EQ(spill_container_read_tensor(&c, t, buf.data(), buf.size() - 1, &e),
            SPILL_E_INVALID_ARG);
  spill_container_close(&c);
  EXPECT_EQ(spill_container_verify(dir.c_str(), nullptr, nullptr, &e), SPILL_E_CHECKSUM);
  EXPECT_TRUE(Contains(e.msg, "tensor blk.0.ffn_up: checksum mismatch")) << e.msg;
  FlipBit(dir + "/trunk.bin", off);  // restore
  ASSERT_EQ(spill_container_verify(dir.c_str(), nullptr, nullptr, &e), SPILL_OK) << e.msg;
  // Record tail padding is outside the payload crc: verify checks it is zero.
  FlipBit(dir + "/experts-002.bin", tail);
  EXPECT_EQ(spill_container_verify(dir.c_str(), nullptr, nullptr, &e), SPILL_E_FORMAT);
  EXPECT_TRUE(Contains(e.msg, "layer 2 expert 0: padding after the payload is not zero")) << e.msg;
}

TEST(ContainerTest, CorruptBankHeaderIsRejectedAtOpen) {
  std::string dir = Written("bank_hdr");
  FlipBit(dir + "/experts-002.bin", 16);  // n_experts
  spill_container c;
  spill_err e = {};
  EXPECT_EQ(spill_container_open(dir.c_str(), &c, &e), SPILL_E_CHECKSUM);
  EXPECT_TRUE(Contains(e.msg, "experts-002.bin: bank header checksum mismatch")) << e.msg;
}

TEST(ContainerTest, ManifestLyingAboutRecordSizeIsRejected) {
  std::string dir = Written("lie");
  std::string json = ReadAll(dir + "/manifest.json");
  size_t at = json.find("\"record_bytes\":\t4096");
  ASSERT_NE(at, std::string::npos) << json;
  json.replace(at, strlen("\"record_bytes\":\t4096"), "\"record_bytes\":\t8192");
  WriteAll(dir + "/manifest.json", json);
  spill_container c;
  spill_err e = {};
  EXPECT_EQ(spill_container_open(dir.c_str(), &c, &e), SPILL_E_FORMAT);
  EXPECT_TRUE(Contains(e.msg, "manifest.json: experts.record_bytes: 8192")) << e.msg;
}

TEST(ContainerTest, WriterRejectsMisuseAndLeavesNoManifest) {
  std::string dir = spill_test::TmpDir("misuse");
  TinyModel tm(SPILL_DT_F32);
  spill_writer *w = nullptr;
  spill_err e = {};
  ASSERT_EQ(spill_writer_open(dir.c_str(), &tm.m, &w, &e), SPILL_OK) << e.msg;
  const spill_manifest *lm = spill_writer_manifest(w);
  std::vector<uint8_t> p(lm->payload_bytes, 1);
  EXPECT_EQ(spill_writer_record(w, 1, 1, p.data(), &e), SPILL_E_INVALID_ARG);
  EXPECT_TRUE(Contains(e.msg, "out of order (expected 0)")) << e.msg;
  EXPECT_EQ(spill_writer_record(w, 0, 0, p.data(), &e), SPILL_E_RANGE);
  EXPECT_EQ(spill_writer_record(w, 1, 4, p.data(), &e), SPILL_E_RANGE);
  EXPECT_EQ(spill_writer_record(w, 1, 0, p.data(), &e), SPILL_OK) << e.msg;
  std::vector<uint8_t> t(10);
  EXPECT_EQ(spill_writer_tensor(w, "tok_embd", t.data(), t.size(), &e), SPILL_E_INVALID_ARG);
  EXPECT_EQ(spill_writer_tensor(w, "nope", t.data(), t.size(), &e), SPILL_E_INVALID_ARG);
  EXPECT_EQ(spill_writer_finish(w, &e), SPILL_E_INVALID_ARG);  // frees w
  EXPECT_TRUE(Contains(e.msg, "never written")) << e.msg;
  struct stat st;
  EXPECT_NE(stat((dir + "/manifest.json").c_str(), &st), 0);
  EXPECT_NE(stat((dir + "/trunk.bin").c_str(), &st), 0);

  ASSERT_EQ(spill_writer_open(dir.c_str(), &tm.m, &w, &e), SPILL_OK) << e.msg;
  spill_writer_abort(w);
  EXPECT_NE(stat((dir + "/manifest.json").c_str(), &st), 0);
  spill_writer_abort(nullptr);

  tm.m.arch.moe.top_k = 5;  // > n_experts: rejected before any file is made
  EXPECT_EQ(spill_writer_open(dir.c_str(), &tm.m, &w, &e), SPILL_E_FORMAT);
  EXPECT_TRUE(Contains(e.msg, "arch.moe.top_k: 5 out of range [1, 4]")) << e.msg;
  EXPECT_EQ(w, nullptr);
}

TEST(ContainerTest, RewritingAContainerReplacesIt) {
  std::string dir = Written("rewrite", SPILL_DT_RVQ3);
  TinyModel tm(SPILL_DT_F32);
  spill_err e = {};
  ASSERT_EQ(spill_test::WriteTiny(dir, tm, &e), SPILL_OK) << e.msg;
  ASSERT_EQ(spill_container_verify(dir.c_str(), nullptr, nullptr, &e), SPILL_OK) << e.msg;
  spill_container c;
  ASSERT_EQ(spill_container_open(dir.c_str(), &c, &e), SPILL_OK) << e.msg;
  EXPECT_EQ(c.m.expert_dtype, SPILL_DT_F32);
  char path[8];  // too small for any "<dir>/trunk.bin"
  EXPECT_EQ(spill_container_path(&c, "trunk.bin", path, sizeof path, &e), SPILL_E_INVALID_ARG);
  spill_container_close(&c);
}

}  // namespace
