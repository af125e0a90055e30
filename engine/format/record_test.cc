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
