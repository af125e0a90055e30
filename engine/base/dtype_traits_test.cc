// engine/base/dtype_traits_test.cc: the dtype traits table (dtype_traits.h):
// names and codes round-trip, the row layouts of every dtype equal the byte
// formulas of docs/FORMAT.md written out here, shapes a dtype cannot hold are
// refused, and docs/FORMAT.md's dtype table lists exactly the table's rows.
#include <gtest/gtest.h>

#include <fstream>
#include <regex>
#include <sstream>
#include <string>

#include "engine/base/dtype_traits.h"
#include "engine/base/status.h"

namespace {

TEST(DtypeTraitsTest, NamesRoundTrip) {
  for (int i = 0; i < SPILL_DT_COUNT; i++) {
    const spill_dtype_traits *t = spill_dtype_traits_of(i);
    ASSERT_NE(t, nullptr) << i;
    spill_dtype dt;
    ASSERT_EQ(spill_dtype_parse(t->name, &dt), SPILL_OK) << t->name;
    EXPECT_EQ((int)dt, i);
    EXPECT_STREQ(spill_dtype_name(dt), t->name);
  }
  spill_dtype dt;
  EXPECT_EQ(spill_dtype_parse("f64", &dt), SPILL_E_FORMAT);
  EXPECT_EQ(spill_dtype_parse(nullptr, &dt), SPILL_E_FORMAT);
  EXPECT_EQ(spill_dtype_traits_of(-1), nullptr);
  EXPECT_EQ(spill_dtype_traits_of(SPILL_DT_COUNT), nullptr);
  EXPECT_STREQ(spill_dtype_name((spill_dtype)SPILL_DT_COUNT), "?");
}

TEST(DtypeTraitsTest, RowLayoutsAreFormatsFormulas) {
  struct Row {
    spill_dtype dt;
    uint64_t bytes, scales;
  };
  const uint64_t c = 512;
  const uint32_t g = 32;
  const Row rows[] = {
      {SPILL_DT_F32, 4 * c, 0},        {SPILL_DT_F16, 2 * c, 0},        {SPILL_DT_BF16, 2 * c, 0},
      {SPILL_DT_Q8, c, c / g},         {SPILL_DT_Q4, c / 2, c / g},     {SPILL_DT_RVQ3, 3 * (c / 8), 1},
      {SPILL_DT_Q4_K, 144 * (c / 256), 0}, {SPILL_DT_Q5_K, 176 * (c / 256), 0},
      {SPILL_DT_Q6_K, 210 * (c / 256), 0}, {SPILL_DT_MXFP4, 17 * (c / 32), 0},
      {SPILL_DT_Q5_0, 22 * (c / 32), 0},   {SPILL_DT_Q5_1, 24 * (c / 32), 0},
  };
  for (const Row &r : rows) {
    uint64_t b = 0, s = 0;
    ASSERT_TRUE(spill_dtype_row_layout(r.dt, c, g, &b, &s)) << spill_dtype_name(r.dt);
    EXPECT_EQ(b, r.bytes) << spill_dtype_name(r.dt);
    EXPECT_EQ(s, r.scales) << spill_dtype_name(r.dt);
  }
  uint64_t b, s;
  EXPECT_FALSE(spill_dtype_row_layout(SPILL_DT_Q4, 512, 31, &b, &s));   // odd group
  EXPECT_FALSE(spill_dtype_row_layout(SPILL_DT_Q8, 512, 0, &b, &s));    // no group
  EXPECT_FALSE(spill_dtype_row_layout(SPILL_DT_Q8, 500, 32, &b, &s));   // cols % group
  EXPECT_FALSE(spill_dtype_row_layout(SPILL_DT_RVQ3, 12, 0, &b, &s));   // cols % 8
  EXPECT_FALSE(spill_dtype_row_layout(SPILL_DT_Q6_K, 384, 0, &b, &s));  // cols % 256
  EXPECT_FALSE(spill_dtype_row_layout(SPILL_DT_Q5_0, 48, 0, &b, &s));   // cols % 32
  EXPECT_TRUE(spill_dtype_row_layout(SPILL_DT_Q5_1, 1408, 0, &b, &s));  // GLM-4.5-Air's d_expert
  EXPECT_EQ(b, 24u * 44);
  EXPECT_FALSE(spill_dtype_row_layout(SPILL_DT_COUNT, 512, 0, &b, &s));
  EXPECT_FALSE(spill_dtype_row_layout(SPILL_DT_F32, UINT64_MAX, 0, &b, &s));  // overflow
}

// docs/FORMAT.md "Tensor formats (dtypes)": rows "| code | `name` | ...".
TEST(DtypeTraitsTest, FormatDocListsTheTable) {
  std::ifstream f("docs/FORMAT.md");
  ASSERT_TRUE(f.good()) << "docs/FORMAT.md not in the runfiles";
  std::stringstream ss;
  ss << f.rdbuf();
  const std::string doc = ss.str();
  const size_t at = doc.find("## Tensor formats (dtypes)");
  ASSERT_NE(at, std::string::npos);
  const std::string sect = doc.substr(at, doc.find("\n## ", at + 1) - at);
  std::regex row(R"(\n\| (\d+) \| `([a-z0-9_]+)` \|)");
  int n = 0;
  for (auto it = std::sregex_iterator(sect.begin(), sect.end(), row); it != std::sregex_iterator(); ++it, n++) {
    const int code = std::stoi((*it)[1]);
    EXPECT_EQ(code, n) << "docs/FORMAT.md lists the dtypes out of order";
    const spill_dtype_traits *t = spill_dtype_traits_of(code);
    ASSERT_NE(t, nullptr) << "docs/FORMAT.md lists code " << code << ", which the table lacks";
    EXPECT_EQ((*it)[2].str(), t->name) << "code " << code;
  }
  EXPECT_EQ(n, SPILL_DT_COUNT) << "docs/FORMAT.md's dtype table and dtype_traits.c differ in length";
}

}  // namespace
