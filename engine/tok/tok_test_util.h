// engine/tok/tok_test_util.h: a tiny byte-level BPE tokenizer.json for
// tests (the 256 GPT-2 byte symbols, six merges, "<|end|>" special and
// "<think>" added), shared by engine/tok's and the engine's tests.
#ifndef SPILL_TOK_TOK_TEST_UTIL_H
#define SPILL_TOK_TOK_TEST_UTIL_H

#include <string>

namespace tok_test {

// Byte-level BPE: vocab = the 256 byte symbols (GPT-2 alphabet) + merges.
inline std::string ByteLevelJson(const std::string &normalizer, bool ignore_merges) {
  // GPT-2 byte alphabet: printable bytes map to themselves.
  std::string vocab = "{";
  int n = 0;
  for (int b = 0; b < 256; b++) {
    bool printable = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE);
    unsigned cp = printable ? (unsigned)b : 0;
    if (!printable) {
      int k = 0;
      for (int c = 0; c < b; c++)
        if (!((c >= '!' && c <= '~') || (c >= 0xA1 && c <= 0xAC) || (c >= 0xAE))) k++;
      cp = 256 + (unsigned)k;
    }
    std::string u;
    if (cp < 0x80) {
      if (cp == '"' || cp == '\\') u = std::string("\\") + (char)cp;
      else u = std::string(1, (char)cp);
    } else {
      u += (char)(0xC0 | (cp >> 6));
      u += (char)(0x80 | (cp & 0x3F));
    }
    vocab += (n ? "," : "") + std::string("\"") + u + "\":" + std::to_string(b);
    n++;
  }
  // merges: "h e" -> he (256), "l l" -> ll (257), "he ll" -> hell (258),
  // "Ġ w" -> Ġw (259), "hell o" -> hello (260)
  vocab += ",\"he\":256,\"ll\":257,\"hell\":258,\"\xC4\xA0w\":259,\"hello\":260,\"lo\":261}";
  return std::string("{\"version\":\"1.0\",\"added_tokens\":[{\"id\":262,\"content\":\"<|end|>\","
                     "\"special\":true},{\"id\":263,\"content\":\"<think>\",\"special\":false}],"
                     "\"normalizer\":") +
         normalizer +
         ",\"pre_tokenizer\":{\"type\":\"Sequence\",\"pretokenizers\":[{\"type\":\"Split\","
         "\"pattern\":{\"Regex\":\" ?\\\\p{L}+|\\\\p{N}| ?[^\\\\s\\\\p{L}\\\\p{N}]+|\\\\s+(?!\\\\S)|\\\\s+\"},"
         "\"behavior\":\"Isolated\",\"invert\":false},{\"type\":\"ByteLevel\",\"add_prefix_space\":"
         "false,\"use_regex\":false}]},\"post_processor\":null,\"decoder\":{\"type\":\"ByteLevel\"},"
         "\"model\":{\"type\":\"BPE\",\"ignore_merges\":" +
         (ignore_merges ? "true" : "false") + ",\"vocab\":" + vocab +
         ",\"merges\":[\"h e\",\"l l\",\"he ll\",\"\xC4\xA0 w\",\"hell o\",\"l o\"]}}";
}

}  // namespace tok_test

#endif
