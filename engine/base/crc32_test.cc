// Tests for engine/base/crc32: known vectors (zlib's crc32) and agreement of
// every implementation on random lengths and alignments.
#include "engine/base/crc32.h"

#include <gtest/gtest.h>

#include <cstring>
#include <random>
#include <vector>

namespace {

TEST(Crc32Test, KnownVectors) {
  EXPECT_EQ(spill_crc32(0, "", 0), 0u);
  EXPECT_EQ(spill_crc32(0, "a", 1), 0xE8B7BE43u);
  EXPECT_EQ(spill_crc32(0, "123456789", 9), 0xCBF43926u);
  const char *fox = "The quick brown fox jumps over the lazy dog";
  EXPECT_EQ(spill_crc32(0, fox, strlen(fox)), 0x414FA339u);
  std::vector<uint8_t> zeros(4096, 0);
  // crc32 of 4096 zero bytes (zlib): 0xC71C0011.
  EXPECT_EQ(spill_crc32__bytewise(0, zeros.data(), zeros.size()), 0xC71C0011u);
  EXPECT_EQ(spill_crc32(0, zeros.data(), zeros.size()), 0xC71C0011u);
}

TEST(Crc32Test, ChainsAcrossCalls) {
  const char *s = "123456789";
  uint32_t c = spill_crc32(0, s, 4);
  c = spill_crc32(c, s + 4, 5);
  EXPECT_EQ(c, 0xCBF43926u);
}

TEST(Crc32Test, AllImplementationsAgreeOnRandomInput) {
  std::mt19937 rng(7);
  std::vector<uint8_t> buf(70000);
  for (auto &b : buf) b = static_cast<uint8_t>(rng());
  std::printf("spill_crc32 uses: %s\n", spill_crc32_impl());
  for (int trial = 0; trial < 300; trial++) {
    size_t off = rng() % 64;
    size_t len = (trial < 200) ? trial : rng() % (buf.size() - off);
    uint32_t seed = (trial % 3 == 0) ? 0 : static_cast<uint32_t>(rng());
    uint32_t want = spill_crc32__bytewise(seed, buf.data() + off, len);
    ASSERT_EQ(spill_crc32__slice8(seed, buf.data() + off, len), want) << "len " << len;
    ASSERT_EQ(spill_crc32(seed, buf.data() + off, len), want) << "len " << len;
  }
}

}  // namespace
