// Tests of dtype sizes, the record layout, CRC combination and the binary
// record and bank headers (engine/format/dtype.c, record.c).
#include <gtest/gtest.h>
#include <string.h>

#include <vector>

#include "engine/base/crc32.h"
#include "engine/format/container.h"
#include "engine/format/container_test_util.h"
#include "engine/format/format_internal.h"

namespace {

TEST(DtypeTest, NamesRoundTripAndUnknownIsRejected) {
  for (int i = 0; i < SPILL_DT_COUNT; i++) {
    spill_dtype dt;
    ASSERT_EQ(spill_dtype_parse(spill_dtype_name((spill_dtype)i), &dt), SPILL_OK);
    EXPECT_EQ(dt, i);
  }
  spill_dtype dt;
  EXPECT_EQ(spill_dtype_parse("q5", &dt), SPILL_E_FORMAT);
  EXPECT_EQ(spill_dtype_parse(nullptr, &dt), SPILL_E_FORMAT);
  EXPECT_STREQ(spill_dtype_name(SPILL_DT_RVQ3), "rvq3");
}

TEST(DtypeTest, MatrixBytesFollowTheSpec) {
  spill_err e = {};
  uint64_t n = 0;
  ASSERT_EQ(spill_dtype_matrix_bytes(SPILL_DT_F32, 3, 5, 0, &n, &e), SPILL_OK);
  EXPECT_EQ(n, 60u);
  ASSERT_EQ(spill_dtype_matrix_bytes(SPILL_DT_BF16, 3, 5, 0, &n, &e), SPILL_OK);
  EXPECT_EQ(n, 30u);
  ASSERT_EQ(spill_dtype_matrix_bytes(SPILL_DT_Q8, 3, 32, 16, &n, &e), SPILL_OK);
  EXPECT_EQ(n, 3u * 32 + 3 * 2 * 2);
  ASSERT_EQ(spill_dtype_matrix_bytes(SPILL_DT_Q4, 3, 32, 16, &n, &e), SPILL_OK);
  EXPECT_EQ(n, 3u * 16 + 3 * 2 * 2);
  ASSERT_EQ(spill_dtype_matrix_bytes(SPILL_DT_RVQ3, 3072, 3584, 0, &n, &e), SPILL_OK);
  EXPECT_EQ(n, 4134912u);
}

TEST(DtypeTest, MatrixBytesRejectsBadShapesAndOverflow) {
  spill_err e = {};
  uint64_t n = 0;
  EXPECT_EQ(spill_dtype_matrix_bytes(SPILL_DT_RVQ3, 4, 12, 0, &n, &e), SPILL_E_FORMAT);
  EXPECT_TRUE(spill_test::Contains(e.msg, "multiple of 8")) << e.msg;
  EXPECT_EQ(spill_dtype_matrix_bytes(SPILL_DT_Q4, 4, 12, 3, &n, &e), SPILL_E_FORMAT);
  EXPECT_TRUE(spill_test::Contains(e.msg, "odd")) << e.msg;
  EXPECT_EQ(spill_dtype_matrix_bytes(SPILL_DT_Q8, 4, 12, 8, &n, &e), SPILL_E_FORMAT);
  EXPECT_EQ(spill_dtype_matrix_bytes(SPILL_DT_Q8, 4, 16, 0, &n, &e), SPILL_E_FORMAT);
  EXPECT_EQ(spill_dtype_matrix_bytes(SPILL_DT_F32, 1ull << 40, 1ull << 40, 0, &n, &e),
            SPILL_E_FORMAT);
  EXPECT_TRUE(spill_test::Contains(e.msg, "overflows")) << e.msg;
  EXPECT_EQ(spill_dtype_matrix_bytes(SPILL_DT_F32, 1ull << 30, 1ull << 30, 0, &n, &e),
            SPILL_E_FORMAT);  // 2^62 bytes fits u64 but not the 2^53 JSON limit
  EXPECT_EQ(spill_dtype_matrix_bytes(SPILL_DT_F32, 0, 4, 0, &n, &e), SPILL_E_FORMAT);
}

TEST(DtypeTest, Mxfp4SizesAndTheK3RecordAsShipped) {
  spill_err e = {};
  uint64_t n = 0;
  ASSERT_EQ(spill_dtype_matrix_bytes(SPILL_DT_MXFP4, 3072, 3584, 0, &n, &e), SPILL_OK);
  EXPECT_EQ(n, 3072u * 112 * 17);
  EXPECT_EQ(spill_dtype_matrix_bytes(SPILL_DT_MXFP4, 4, 48, 0, &n, &e), SPILL_E_FORMAT);
  EXPECT_TRUE(spill_test::Contains(e.msg, "multiple of 32")) << e.msg;
  // the released K3's expert: gate/up (3072, 3584), down (3584, 3072): 17,547,264
  // payload bytes (docs/REPRODUCTIONS.md's figure), one page more with the header
  spill_arch a;
  memset(&a, 0, sizeof a);
  a.d_model = 7168;
  a.moe.d_expert = 3072;
  a.moe.d_latent = 3584;
  spill_section_info s[SPILL_SEC_COUNT];
  uint32_t payload = 0;
  uint64_t rec = 0;
  ASSERT_EQ(spill_record_layout(&a, SPILL_DT_MXFP4, 0, s, &payload, &rec, &e), SPILL_OK) << e.msg;
  EXPECT_EQ(payload, 17547264u);
  EXPECT_EQ(rec, 17551360u);
}

// Every exponent but 255 is a value; 255 (NaN in e8m0) is refused by name,
// by the value check, by the writer, and by spill_record_check with verify
// (a record whose payload was changed on disk, CRC recomputed).
TEST(DtypeTest, Mxfp4Exponent255IsRefused) {
  std::vector<uint8_t> m(3 * 2 * 17, 0xFF);  // (3, 64): codes 0xFF are fine
  for (size_t b = 0; b < 6; b++) m[b * 17] = (uint8_t)(b * 50);  // exponents 0..250
  spill_err e = {};
  EXPECT_EQ(spill_dtype_check_values(SPILL_DT_MXFP4, m.data(), 3, 64, &e), SPILL_OK) << e.msg;
  m[3 * 17] = 254;
  EXPECT_EQ(spill_dtype_check_values(SPILL_DT_MXFP4, m.data(), 3, 64, &e), SPILL_OK) << e.msg;
  m[3 * 17] = 255;  // row 1, block 1
  EXPECT_EQ(spill_dtype_check_values(SPILL_DT_MXFP4, m.data(), 3, 64, &e), SPILL_E_FORMAT);
  EXPECT_TRUE(spill_test::Contains(e.msg, "row 1 block 1: scale exponent 255")) << e.msg;
  EXPECT_EQ(spill_dtype_check_values(SPILL_DT_Q8, m.data(), 3, 32, &e), SPILL_OK);  // no e8m0

  spill_test::TinyModel tm(SPILL_DT_MXFP4);
  tm.m.arch.moe.d_expert = 32;
  tm.m.arch.moe.d_latent = 32;  // every section (32, 32): one block per row
  const std::string dir = spill_test::TmpDir("mxfp4_255");
  spill_writer *w = nullptr;
  ASSERT_EQ(spill_writer_open(dir.c_str(), &tm.m, &w, &e), SPILL_OK) << e.msg;
  const spill_manifest *lm = spill_writer_manifest(w);
  spill_section_info sect[SPILL_SEC_COUNT];
  memcpy(sect, lm->sect, sizeof sect);
  std::vector<uint8_t> p(lm->payload_bytes, 0x21);
  for (int i = 0; i < SPILL_SEC_COUNT; i++)
    for (uint32_t r = 0; r < 32; r++) p[lm->sect[i].offset - SPILL_RECORD_HEADER_BYTES + r * 17] = 127;
  ASSERT_EQ(spill_writer_record(w, 1, 0, p.data(), &e), SPILL_OK) << e.msg;
  p[lm->sect[SPILL_SEC_DOWN].offset - SPILL_RECORD_HEADER_BYTES + 5 * 17] = 255;
  EXPECT_EQ(spill_writer_record(w, 1, 1, p.data(), &e), SPILL_E_FORMAT);
  EXPECT_TRUE(spill_test::Contains(e.msg, "layer 1 expert 1: section 2: mxfp4: row 5 block 0: scale "
                                          "exponent 255")) << e.msg;
  spill_writer_abort(w);

  // the check with verify: a valid record, then one exponent set to 255
  spill_manifest &mm = tm.m;
  mm.version = 2;
  memcpy(mm.sect, sect, sizeof mm.sect);
  mm.payload_bytes = (uint32_t)p.size();
  mm.record_bytes = SPILL_PAGE;
  p[sect[SPILL_SEC_DOWN].offset - SPILL_RECORD_HEADER_BYTES + 5 * 17] = 127;
  std::vector<uint8_t> rec(SPILL_PAGE, 0);
  memcpy(rec.data() + SPILL_RECORD_HEADER_BYTES, p.data(), p.size());
  spill_record_header h = {};
  h.magic = SPILL_RECORD_MAGIC;
  h.version = 2;
  h.dtype = SPILL_DT_MXFP4;
  h.layer = 1;
  h.expert = 0;
  h.payload_offset = SPILL_RECORD_HEADER_BYTES;
  h.payload_bytes = mm.payload_bytes;
  h.n_sections = SPILL_SEC_COUNT;
  for (int i = 0; i < SPILL_SEC_COUNT; i++) h.sect_offset[i] = mm.sect[i].offset;
  h.payload_crc32 = spill_crc32(0, p.data(), p.size());
  spill_record_header_encode(&h, rec.data());
  ASSERT_EQ(spill_record_check(&mm, "b", 1, 0, rec.data(), rec.size(), 1, &e), SPILL_OK) << e.msg;
  rec[mm.sect[SPILL_SEC_UP].offset + 3 * 17] = 255;
  h.payload_crc32 = spill_crc32(0, rec.data() + SPILL_RECORD_HEADER_BYTES, p.size());
  spill_record_header_encode(&h, rec.data());
  EXPECT_EQ(spill_record_check(&mm, "b", 1, 0, rec.data(), rec.size(), 0, &e), SPILL_OK);  // no verify
  EXPECT_EQ(spill_record_check(&mm, "b", 1, 0, rec.data(), rec.size(), 1, &e), SPILL_E_FORMAT);
  EXPECT_TRUE(spill_test::Contains(e.msg, "b: layer 1 expert 0: section 1: mxfp4: row 3 block 0")) << e.msg;
}

TEST(RecordLayoutTest, K3Rvq3RecordIsExactly3029Pages) {
  spill_arch a;
  memset(&a, 0, sizeof a);
  a.d_model = 7168;
  a.moe.d_expert = 3072;
  a.moe.d_latent = 3584;
  spill_section_info s[SPILL_SEC_COUNT];
  uint32_t payload = 0;
  uint64_t rec = 0;
  spill_err e = {};
  ASSERT_EQ(spill_record_layout(&a, SPILL_DT_RVQ3, 0, s, &payload, &rec, &e), SPILL_OK) << e.msg;
  EXPECT_EQ(rec, 12406784u);
  EXPECT_EQ(rec / SPILL_PAGE, 3029u);
  EXPECT_EQ(rec % SPILL_PAGE, 0u);
  EXPECT_EQ(payload, 12405760u);
  EXPECT_EQ(s[SPILL_SEC_GATE].offset, 64u);
  EXPECT_EQ(s[SPILL_SEC_GATE].rows, 3072u);
  EXPECT_EQ(s[SPILL_SEC_GATE].cols, 3584u);
  EXPECT_EQ(s[SPILL_SEC_UP].offset, 4134976u);
  EXPECT_EQ(s[SPILL_SEC_DOWN].offset, 8269888u);
  EXPECT_EQ(s[SPILL_SEC_DOWN].rows, 3584u);
  EXPECT_EQ(s[SPILL_SEC_DOWN].cols, 3072u);
  EXPECT_EQ(s[SPILL_SEC_DOWN].bytes, 4135936u);
}

TEST(RecordLayoutTest, SectionsAre64ByteAlignedAndUseDModelWithoutLatent) {
  spill_arch a;
  memset(&a, 0, sizeof a);
  a.d_model = 16;
  a.moe.d_expert = 8;
  spill_section_info s[SPILL_SEC_COUNT];
  uint32_t payload = 0;
  uint64_t rec = 0;
  spill_err e = {};
  // rvq3 (8, 16): 48 + 16 = 64; (16, 8): 48 + 32 = 80.
  ASSERT_EQ(spill_record_layout(&a, SPILL_DT_RVQ3, 0, s, &payload, &rec, &e), SPILL_OK);
  EXPECT_EQ(s[0].offset, 64u);
  EXPECT_EQ(s[1].offset, 128u);
  EXPECT_EQ(s[2].offset, 192u);
  EXPECT_EQ(s[2].bytes, 80u);
  EXPECT_EQ(payload, 208u);
  EXPECT_EQ(rec, 4096u);
  // q8 group 8: (8,16) = 128 + 32 = 160 -> next at 64 + 192 = 256.
  ASSERT_EQ(spill_record_layout(&a, SPILL_DT_Q8, 8, s, &payload, &rec, &e), SPILL_OK);
  EXPECT_EQ(s[1].offset, 256u);
  EXPECT_EQ(s[2].offset, 448u);
  a.moe.d_expert = 12;  // rvq3 down has cols = d_expert = 12
  EXPECT_EQ(spill_record_layout(&a, SPILL_DT_RVQ3, 0, s, &payload, &rec, &e), SPILL_E_FORMAT);
  a.moe.d_expert = 1 << 20;
  a.d_model = 1 << 20;  // 2^40 f32 bytes per section: beyond 32-bit record offsets
  EXPECT_EQ(spill_record_layout(&a, SPILL_DT_F32, 0, s, &payload, &rec, &e), SPILL_E_FORMAT);
  EXPECT_TRUE(spill_test::Contains(e.msg, "32 bits")) << e.msg;
}

TEST(CrcCombineTest, CombineEqualsCrcOfConcatenation) {
  std::vector<uint8_t> d = spill_test::Pattern(10000, 7);
  uint32_t whole = spill_crc32(0, d.data(), d.size());
  for (size_t cut : {0ul, 1ul, 63ul, 4096ul, 9999ul, 10000ul}) {
    uint32_t a = spill_crc32(0, d.data(), cut);
    uint32_t b = spill_crc32(0, d.data() + cut, d.size() - cut);
    EXPECT_EQ(spill_fmt_crc32_combine(a, b, d.size() - cut), whole) << cut;
  }
  std::vector<uint8_t> z(5000, 0);
  EXPECT_EQ(spill_fmt_crc32_zeros(0x1234u, z.size()), spill_crc32(0x1234u, z.data(), z.size()));
}

spill_record_header SampleHeader() {
  spill_record_header h;
  memset(&h, 0, sizeof h);
  h.magic = SPILL_RECORD_MAGIC;
  h.version = 1;
  h.dtype = SPILL_DT_RVQ3;
  h.layer = 3;
  h.expert = 77;
  h.payload_offset = 64;
  h.payload_bytes = 12405760;
  h.payload_crc32 = 0xDEADBEEF;
  h.sect_offset[0] = 64;
  h.sect_offset[1] = 4134976;
  h.sect_offset[2] = 8269888;
  h.n_sections = 3;
  return h;
}

TEST(RecordHeaderTest, EncodeDecodeRoundTripAtSpecOffsets) {
  spill_record_header h = SampleHeader(), back;
  uint8_t b[64];
  memset(b, 0xAA, sizeof b);
  spill_record_header_encode(&h, b);
  EXPECT_EQ(memcmp(b, "SPXR", 4), 0);
  EXPECT_EQ(b[4], 1);
  EXPECT_EQ(b[6], SPILL_DT_RVQ3);
  EXPECT_EQ(b[12], 77);
  EXPECT_EQ(spill_get_u32(b + 24), 0xDEADBEEFu);
  EXPECT_EQ(spill_get_u32(b + 44), 3u);
  for (int i = 48; i < 64; i++) EXPECT_EQ(b[i], 0) << i;
  uint8_t z[64];
  memcpy(z, b, 64);
  memset(z + 28, 0, 4);
  EXPECT_EQ(spill_get_u32(b + 28), spill_crc32(0, z, 64));
  spill_record_header_decode(b, &back);
  h.header_crc32 = spill_get_u32(b + 28);
  EXPECT_EQ(memcmp(&h, &back, sizeof h), 0);
}

TEST(BankHeaderTest, EncodeDecodeAndCheckAgainstManifest) {
  spill_test::TinyModel tm(SPILL_DT_F32);
  spill_manifest &m = tm.m;
  m.record_bytes = 4096;
  spill_bank_info b;
  memset(&b, 0, sizeof b);
  b.layer = 2;
  snprintf(b.file, sizeof b.file, "experts-002.bin");
  b.n_experts = 4;
  b.record_bytes = 4096;
  b.data_offset = 4096;
  spill_bank_header h = {1, 2, 4, SPILL_DT_F32, 4096, 4096}, back;
  std::vector<uint8_t> page(SPILL_BANK_HEADER_BYTES, 0xFF);
  spill_bank_header_encode(&h, page.data());
  EXPECT_EQ(memcmp(page.data(), "SPILLBNK", 8), 0);
  EXPECT_EQ(spill_get_u64(page.data() + 24), 4096u);
  spill_bank_header_decode(page.data(), &back);
  EXPECT_EQ(memcmp(&h, &back, sizeof h), 0);
  spill_err e = {};
  EXPECT_EQ(spill_bank_header_check(&m, &b, page.data(), page.size(), &e), SPILL_OK) << e.msg;

  b.layer = 1;  // the page says layer 2
  EXPECT_EQ(spill_bank_header_check(&m, &b, page.data(), page.size(), &e), SPILL_E_FORMAT);
  EXPECT_TRUE(spill_test::Contains(e.msg, "layer 2")) << e.msg;
  b.layer = 2;
  page[100] ^= 1;  // a reserved byte: caught by the header crc
  EXPECT_EQ(spill_bank_header_check(&m, &b, page.data(), page.size(), &e), SPILL_E_CHECKSUM);
  page[100] ^= 1;
  page[0] = 'X';
  EXPECT_EQ(spill_bank_header_check(&m, &b, page.data(), page.size(), &e), SPILL_E_FORMAT);
  EXPECT_TRUE(spill_test::Contains(e.msg, "experts-002.bin")) << e.msg;
  EXPECT_EQ(spill_bank_header_check(&m, &b, page.data(), 100, &e), SPILL_E_SHORT_READ);
}

}  // namespace
