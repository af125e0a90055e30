// Tests for engine/base/status: names, messages, the error helpers.
#include "engine/base/status.h"

#include <gtest/gtest.h>

#include <cstring>
#include <string>

namespace {

int fails_with_detail(spill_err *e, int layer) {
  SPILL_FAIL_IF(e, layer > 2, SPILL_E_FORMAT, "layer %d expert %d: checksum mismatch", layer, 7);
  return SPILL_OK;
}

int propagates(spill_err *e) {
  SPILL_TRY(fails_with_detail(e, 5));
  return 42;
}

TEST(StatusTest, EveryCodeHasANameAndMessage) {
  for (int c = 0; c >= SPILL_E_SESSION; c--) {
    EXPECT_STRNE(spill_status_name(c), "SPILL_E_UNKNOWN") << c;
    EXPECT_STRNE(spill_status_str(c), "unknown status") << c;
  }
  EXPECT_STREQ(spill_status_name(-999), "SPILL_E_UNKNOWN");
  EXPECT_STREQ(spill_status_name(SPILL_E_RAM_BUDGET), "SPILL_E_RAM_BUDGET");
}

TEST(StatusTest, FailIfRecordsDetailAndTryPropagates) {
  spill_err e = {};
  EXPECT_EQ(fails_with_detail(&e, 1), SPILL_OK);
  EXPECT_EQ(e.code, 0);
  EXPECT_EQ(propagates(&e), SPILL_E_FORMAT);
  EXPECT_EQ(e.code, SPILL_E_FORMAT);
  EXPECT_STREQ(e.msg, "layer 5 expert 7: checksum mismatch");
  spill_err_prefix(&e, "model %s", "nano");
  EXPECT_STREQ(e.msg, "model nano: layer 5 expert 7: checksum mismatch");
  spill_err_clear(&e);
  EXPECT_EQ(e.code, 0);
  EXPECT_EQ(e.msg[0], 0);
}

TEST(StatusTest, LongMessagesAreTruncatedNotOverflowed) {
  spill_err e = {};
  std::string big(5000, 'x');
  spill_err_set(&e, SPILL_E_IO, "%s", big.c_str());
  EXPECT_EQ(strlen(e.msg), static_cast<size_t>(SPILL_ERR_MSG_MAX - 1));
  spill_err_prefix(&e, "%s", big.c_str());
  EXPECT_EQ(strlen(e.msg), static_cast<size_t>(SPILL_ERR_MSG_MAX - 1));
}

}  // namespace
