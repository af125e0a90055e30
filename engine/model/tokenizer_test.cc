// engine/model/tokenizer_test.cc: byte tokenizer round trip with BOS.
#include <gtest/gtest.h>

#include <cstring>

#include "engine/model/tokenizer.h"

namespace {

TEST(TokenizerTest, EncodesBytesWithBosAndDecodesBack) {
  spill_arch a = {};
  a.vocab_size = 320;
  a.bos_id = 256;
  a.eos_id = 257;
  const char *text = "h\xc3\xa9llo";
  int tok[16], n = 0;
  ASSERT_EQ(spill_tokenizer_encode(&a, text, strlen(text), 1, tok, 16, &n, nullptr), SPILL_OK);
  ASSERT_EQ(n, 7);
  EXPECT_EQ(tok[0], 256);
  EXPECT_EQ(tok[2], 0xc3);
  char buf[16];
  EXPECT_EQ(spill_tokenizer_decode(&a, tok, n, buf, sizeof buf), strlen(text));
  EXPECT_STREQ(buf, text);
  int more[3] = {257, 65, 300};
  EXPECT_EQ(spill_tokenizer_decode(&a, more, 3, buf, sizeof buf), 1u);
  EXPECT_STREQ(buf, "A");
}

TEST(TokenizerTest, RefusesTooSmallBufferAndTinyVocab) {
  spill_arch a = {};
  a.vocab_size = 320;
  a.bos_id = 256;
  int tok[3], n = 0;
  spill_err e = {};
  EXPECT_EQ(spill_tokenizer_encode(&a, "abc", 3, 1, tok, 3, &n, &e), SPILL_E_RANGE);
  EXPECT_EQ(spill_tokenizer_encode(&a, "abc", 3, 0, tok, 3, &n, &e), SPILL_OK);
  a.vocab_size = 100;
  EXPECT_EQ(spill_tokenizer_encode(&a, "a", 1, 0, tok, 3, &n, &e), SPILL_E_INVALID_ARG);
  char small[3];
  int t[4] = {'a', 'b', 'c', 'd'};
  a.vocab_size = 320;
  EXPECT_EQ(spill_tokenizer_decode(&a, t, 4, small, sizeof small), 4u);
  EXPECT_STREQ(small, "ab");
}

}  // namespace
