// server/reply_channels_test.cc: the XTML reply splitter (Kimi K3's think
// channel -> reasoning_content) on replies shaped like the ones
// llama.cpp's kimi-k3 parser reads (common/parsers/kimi-k3.cpp): every
// reply fed whole, byte by byte and in pieces of 3 gives the same two
// strings, and the streamed takes concatenate to them.
#include <gtest/gtest.h>

#include <string>

#include "server/reply_channels.h"

namespace {

struct Split {
  std::string reasoning, content;
};

// Feeds text in pieces of `step` bytes (0 = whole), taking after each push.
Split Run(const std::string &text, int start, size_t step) {
  spill_srv_channels c;
  spill_srv_channels_init(&c, start);
  Split s, taken;
  size_t i = 0;
  do {
    size_t n = step ? std::min(step, text.size() - i) : text.size();
    EXPECT_EQ(spill_srv_channels_push(&c, text.data() + i, n), 0);
    i += n;
    const char *p;
    size_t k = spill_srv_channels_take(&c, 0, &p);
    taken.reasoning.append(p, k);
    k = spill_srv_channels_take(&c, 1, &p);
    taken.content.append(p, k);
  } while (i < text.size());
  EXPECT_EQ(spill_srv_channels_finish(&c), 0);
  const char *p;
  size_t k = spill_srv_channels_take(&c, 0, &p);
  taken.reasoning.append(p, k);
  k = spill_srv_channels_take(&c, 1, &p);
  taken.content.append(p, k);
  s.reasoning.assign(c.out[0] ? c.out[0] : "", c.len[0]);
  s.content.assign(c.out[1] ? c.out[1] : "", c.len[1]);
  EXPECT_EQ(taken.reasoning, s.reasoning) << text;
  EXPECT_EQ(taken.content, s.content) << text;
  spill_srv_channels_free(&c);
  return s;
}

void Expect(const std::string &text, int start, const std::string &reasoning,
            const std::string &content) {
  for (size_t step : {0, 1, 3, 7}) {
    Split s = Run(text, start, step);
    EXPECT_EQ(s.reasoning, reasoning) << "step " << step << ": " << text;
    EXPECT_EQ(s.content, content) << "step " << step << ": " << text;
  }
}

TEST(ReplyChannelsTest, DetectsTheChannelTheGenerationPromptOpens) {
  std::string p = "<|open|>message role=\"user\"<|sep|>Hi<|close|>message<|sep|><|end_of_msg|>"
                  "<|open|>message role=\"assistant\"<|sep|>";
  EXPECT_EQ(spill_srv_channels_detect((p + "<|open|>think<|sep|>").c_str(), p.size() + 20),
            SPILL_SRV_CH_REASONING);
  EXPECT_EQ(spill_srv_channels_detect((p + "<|open|>response<|sep|>").c_str(), p.size() + 23),
            SPILL_SRV_CH_CONTENT);
  EXPECT_EQ(spill_srv_channels_detect(p.c_str(), p.size()), SPILL_SRV_CH_OFF);
  EXPECT_EQ(spill_srv_channels_detect("<|im_start|>assistant\n", 22), SPILL_SRV_CH_OFF);
}

TEST(ReplyChannelsTest, ThinkThenResponseThenTheTrailerIsDropped) {
  const int R = SPILL_SRV_CH_REASONING, C = SPILL_SRV_CH_CONTENT;
  // the whole turn as K3's template writes an assistant message
  Expect("7 times 6 <is> 42.<|close|>think<|sep|><|open|>response<|sep|>It is 42."
         "<|close|>response<|sep|><|close|>message<|sep|><|end_of_msg|>",
         R, "7 times 6 <is> 42.", "It is 42.");
  // the response opener alone ends the think channel (a skipped closer)
  Expect("hmm<|open|>response<|sep|>ok<|close|>message<|sep|>", R, "hmm", "ok");
  // a closer without the opener: the rest is the response
  Expect("a<|close|>think<|sep|>b", R, "a", "b");
  // openers repeated by the model are taken, not returned
  Expect("<|open|>message role=\"assistant\"<|sep|><|open|>think<|sep|>x<|close|>think<|sep|>y", R,
         "x", "y");
  // cut off inside the think channel (max_tokens): all of it is reasoning,
  // a marker's prefix at the end included
  Expect("still thinking <|clo", R, "still thinking <|clo", "");
  Expect("", R, "", "");
  // a tool-call section ends the response and is not returned
  Expect("r<|close|>think<|sep|><|open|>response<|sep|>c<|open|>tools<|sep|><|open|>call tool=\"f\""
         "<|sep|><|close|>call<|sep|><|close|>tools<|sep|>",
         R, "r", "c");
  // the end of turn inside the think channel ends the reply (not text)
  Expect("only thoughts<|end_of_msg|>", R, "only thoughts", "");
  Expect("t<|close|>message<|sep|><|end_of_msg|>", R, "t", "");
  Expect("t<|close|>think<|sep|>c<|end_of_msg|>", R, "t", "c");
  // thinking off: the reply starts in the response
  Expect("plain answer<|close|>response<|sep|><|end_of_msg|>", C, "", "plain answer");
  Expect("<|open|>response<|sep|>again", C, "", "again");
  // UTF-8 and marker-like text that is not a marker pass through
  Expect("é <|open|> <|close|>thin <|sep|><|close|>think<|sep|>ü <|close|>respons",
         R, "é <|open|> <|close|>thin <|sep|>", "ü <|close|>respons");
}

}  // namespace

// gpt-oss's harmony format (its chat template's generation prompt ends with
// `<|start|>assistant`; llama.cpp's server, common/chat.cpp's gpt-oss parser,
// returns the analysis channel as reasoning_content and the final channel
// as content).
TEST(ReplyChannelsTest, HarmonyIsDetectedFromTheGenerationPrompt) {
  std::string p = "<|start|>system<|message|>You are ChatGPT.<|end|><|start|>user<|message|>Hi<|end|>"
                  "<|start|>assistant";
  EXPECT_EQ(spill_srv_channels_detect(p.c_str(), p.size()), SPILL_SRV_CH_HARMONY);
  std::string q = p + "<|channel|>final<|message|>";
  EXPECT_EQ(spill_srv_channels_detect(q.c_str(), q.size()), SPILL_SRV_CH_OFF);
  const char *const *texts = nullptr;
  size_t n = spill_srv_channels_markers(SPILL_SRV_CH_HARMONY, &texts);
  ASSERT_EQ(n, 7u);
  EXPECT_STREQ(texts[0], "<|start|>");
  EXPECT_EQ(spill_srv_channels_markers(SPILL_SRV_CH_REASONING, &texts), 4u);
  EXPECT_STREQ(texts[0], "<|open|>");
  EXPECT_EQ(spill_srv_channels_markers(SPILL_SRV_CH_OFF, &texts), 0u);
}

TEST(ReplyChannelsTest, HarmonyAnalysisThenFinal) {
  const int H = SPILL_SRV_CH_HARMONY;
  Expect("<|channel|>analysis<|message|>User says hi. Reply <short>.<|end|>"
         "<|start|>assistant<|channel|>final<|message|>Hello! <|end|> is text here? no<|return|>",
         H, "User says hi. Reply <short>.", "Hello! ");
  // straight to the final channel; what follows <|return|> is not returned
  Expect("<|channel|>final<|message|>Just this.<|return|>junk", H, "", "Just this.");
  // two analysis messages join; an unfinished final is released at the end
  Expect("<|channel|>analysis<|message|>a<|end|><|start|>assistant<|channel|>analysis<|message|>b<|end|>"
         "<|start|>assistant<|channel|>final<|message|>partial <|ret",
         H, "ab", "partial <|ret");
  // a tool call (a recipient in the header) ends the reply's text: the call
  // itself is not content, as the XTML tools section is not
  Expect("<|channel|>analysis<|message|>need weather<|end|><|start|>assistant to=functions.get_weather"
         "<|channel|>commentary <|constrain|>json<|message|>{\"city\":\"Paris\"}<|call|>",
         H, "need weather", "");
  Expect("<|channel|>commentary to=functions.now <|constrain|>json<|message|>{}<|call|>", H, "", "");
  // no header at all: the model answered in plain text
  Expect("Plain answer <b>.", H, "", "Plain answer <b>.");
  // a header that never reaches <|message|>: released as content at the end
  Expect("<|channel|>final", H, "", "<|channel|>final");
  // the analysis cut off by the token limit stays reasoning
  Expect("<|channel|>analysis<|message|>thinking about <|e", H, "thinking about <|e", "");
  // a preamble on the commentary channel with no recipient is for the user
  Expect("<|channel|>commentary<|message|>Let me check.<|end|><|start|>assistant<|channel|>final"
         "<|message|>Done.<|return|>",
         H, "", "Let me check.Done.");
  // gpt-oss-20b's stray commentary prefix addressed to the assistant is no tool call
  Expect("<|channel|>commentary to=assistant<|channel|>analysis<|message|>hmm<|end|>"
         "<|start|>assistant<|channel|>final<|message|>ok<|return|>",
         H, "hmm", "ok");
  Expect("", H, "", "");
}

// A header is one only when <|message|> begins within 512 bytes of it; the
// decision must not depend on how much text one push brought (the server
// fuzzer found a 600-byte header split as a header whole, as content in
// pieces).
TEST(ReplyChannelsTest, HarmonyHeaderLengthBoundIsTheSameInAnyPieces) {
  const int H = SPILL_SRV_CH_HARMONY;
  const std::string ch = "<|channel|>";
  for (size_t pad : {0, 1, 500, 512 - 11 - 1, 512 - 11, 512 - 11 + 1, 600}) {
    std::string head = ch + std::string(pad, 'x');  // `x...` is the channel name
    std::string text = head + "<|message|>body<|end|>";
    if (head.size() <= 512) Expect(text, H, "", "body");
    else Expect(text, H, "", head + "<|message|>body");  // never a header: content up to <|end|>
  }
}

TEST(ReplyChannelsTest, HarmonyToolCallEndsTheTurn) {
  EXPECT_EQ(spill_srv_channels_turn_ends(SPILL_SRV_CH_HARMONY, "<|call|>", 8), 1);
  EXPECT_EQ(spill_srv_channels_turn_ends(SPILL_SRV_CH_HARMONY, "<|end|>", 7), 0);
  EXPECT_EQ(spill_srv_channels_turn_ends(SPILL_SRV_CH_HARMONY, "<|call|>x", 9), 0);
  EXPECT_EQ(spill_srv_channels_turn_ends(SPILL_SRV_CH_REASONING, "<|call|>", 8), 0);
  EXPECT_EQ(spill_srv_channels_turn_ends(SPILL_SRV_CH_OFF, "<|call|>", 8), 0);
}
