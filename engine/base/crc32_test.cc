// Tests for engine/base/crc32: known vectors (zlib's crc32) for every
// implementation, and agreement of the folding paths (PCLMULQDQ,
// VPCLMULQDQ) with the slice-by-8 and bytewise references on every length
// around their thresholds, random lengths up to ~70000 at every alignment,
// and continuation (a crc computed in pieces, across implementations).
// A folding path the CPU lacks is skipped with the reason printed.
#include "engine/base/crc32.h"

#include <gtest/gtest.h>

#include <cstring>
#include <random>
#include <string>
#include <vector>

namespace {

typedef uint32_t (*crc_fn)(uint32_t, const void *, size_t);

struct Impl {
  const char *name;
  crc_fn fn;
  bool available;
};

std::vector<Impl> Impls() {
  return {
      {"bytewise", spill_crc32__bytewise, true},
      {"slice8", spill_crc32__slice8, true},
      {"pclmul", spill_crc32__pclmul, spill_crc32__pclmul_available() != 0},
      {"vpclmul", spill_crc32__vpclmul, spill_crc32__vpclmul_available() != 0},
      {"dispatch", spill_crc32, true},
  };
}

std::vector<uint8_t> RandomBytes(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<uint8_t> b(n);
  for (auto &x : b) x = static_cast<uint8_t>(rng());
  return b;
}

TEST(Crc32Test, KnownVectors) {
  std::vector<uint8_t> zeros(4096, 0);
  std::vector<uint8_t> ff(1000, 0xFF);
  const char *fox = "The quick brown fox jumps over the lazy dog";
  for (const Impl &im : Impls()) {
    if (!im.available) {
      std::printf("skipping %s: the CPU lacks its instructions\n", im.name);
      continue;
    }
    SCOPED_TRACE(im.name);
    EXPECT_EQ(im.fn(0, "", 0), 0u);
    EXPECT_EQ(im.fn(0, "a", 1), 0xE8B7BE43u);
    EXPECT_EQ(im.fn(0, "123456789", 9), 0xCBF43926u);
    EXPECT_EQ(im.fn(0, fox, strlen(fox)), 0x414FA339u);
    // zlib crc32 of 4096 zero bytes, of 1000 0xFF bytes (both past every
    // folding threshold).
    EXPECT_EQ(im.fn(0, zeros.data(), zeros.size()), 0xC71C0011u);
    EXPECT_EQ(im.fn(0, ff.data(), ff.size()), 0xE0533230u);
  }
}

TEST(Crc32Test, ChainsAcrossCalls) {
  const char *s = "123456789";
  uint32_t c = spill_crc32(0, s, 4);
  c = spill_crc32(c, s + 4, 5);
  EXPECT_EQ(c, 0xCBF43926u);
}

TEST(Crc32Test, DispatchPicksTheWidestAvailable) {
  std::string want = spill_crc32__vpclmul_available() ? "vpclmul"
                     : spill_crc32__pclmul_available() ? "pclmul"
                                                       : "slice8";
  std::printf("spill_crc32 uses: %s\n", spill_crc32_impl());
  EXPECT_EQ(want, spill_crc32_impl());
}

TEST(Crc32Test, AllImplementationsAgreeOnRandomInput) {
  std::mt19937 rng(7);
  std::vector<uint8_t> buf = RandomBytes(70000, 11);
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

// Every length 0..1300 (the 64- and 256-byte folding thresholds and the
// tails after them) at a few alignments, against slice-by-8.
TEST(Crc32Test, FoldingMatchesSlice8AtEveryShortLength) {
  std::vector<uint8_t> buf = RandomBytes(1300 + 64, 5);
  for (const Impl &im : Impls()) {
    if (!im.available) {
      std::printf("skipping %s: the CPU lacks its instructions\n", im.name);
      continue;
    }
    for (size_t off : {0, 1, 7, 16, 33, 63})
      for (size_t len = 0; len <= 1300; len++) {
        uint32_t seed = static_cast<uint32_t>(len * 2654435761u);
        ASSERT_EQ(im.fn(seed, buf.data() + off, len),
                  spill_crc32__slice8(seed, buf.data() + off, len))
            << im.name << " off " << off << " len " << len;
      }
  }
}

// Random lengths up to ~70000 at every alignment 0..63.
TEST(Crc32Test, FoldingMatchesSlice8AtRandomLengthsAndEveryAlignment) {
  std::vector<uint8_t> buf = RandomBytes(70000 + 64, 9);
  std::mt19937 rng(123);
  for (const Impl &im : Impls()) {
    if (!im.available) {
      std::printf("skipping %s: the CPU lacks its instructions\n", im.name);
      continue;
    }
    for (size_t off = 0; off < 64; off++)
      for (int trial = 0; trial < 12; trial++) {
        size_t len = rng() % 70001;
        uint32_t seed = (trial % 2) ? static_cast<uint32_t>(rng()) : 0;
        ASSERT_EQ(im.fn(seed, buf.data() + off, len),
                  spill_crc32__slice8(seed, buf.data() + off, len))
            << im.name << " off " << off << " len " << len;
      }
  }
}

// The crc of a||b||c computed in pieces (any split, any implementation per
// piece) equals the crc of the whole.
TEST(Crc32Test, ContinuationInPiecesMatchesWhole) {
  std::vector<uint8_t> buf = RandomBytes(70000, 21);
  std::vector<Impl> impls;
  for (const Impl &im : Impls())
    if (im.available) impls.push_back(im);
  std::mt19937 rng(99);
  for (int trial = 0; trial < 400; trial++) {
    size_t len = rng() % buf.size();
    uint32_t want = spill_crc32__slice8(0, buf.data(), len);
    size_t a = len ? rng() % (len + 1) : 0;
    size_t b = a + (len - a ? rng() % (len - a + 1) : 0);
    const Impl &i1 = impls[rng() % impls.size()];
    const Impl &i2 = impls[rng() % impls.size()];
    const Impl &i3 = impls[rng() % impls.size()];
    uint32_t c = i1.fn(0, buf.data(), a);
    c = i2.fn(c, buf.data() + a, b - a);
    c = i3.fn(c, buf.data() + b, len - b);
    ASSERT_EQ(c, want) << "len " << len << " splits " << a << "," << b << " via " << i1.name
                       << "," << i2.name << "," << i3.name;
  }
}

// One expert record's size (256 KiB, mini) and the twin's (1.5 MiB): the
// sizes the stream checks.
TEST(Crc32Test, FoldingMatchesSlice8OnRecordSizes) {
  for (size_t n : {(size_t)256 * 1024, (size_t)1540 * 1024 + 17}) {
    std::vector<uint8_t> buf = RandomBytes(n, static_cast<uint32_t>(n));
    uint32_t want = spill_crc32__slice8(0, buf.data(), n);
    for (const Impl &im : Impls())
      if (im.available) EXPECT_EQ(im.fn(0, buf.data(), n), want) << im.name << " " << n;
  }
}

}  // namespace
