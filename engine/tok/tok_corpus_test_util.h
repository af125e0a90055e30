// engine/tok/tok_corpus_test_util.h: the tokenizer test corpus: hand-written
// edge cases plus slices of text every Debian machine has, and the record
// format shared with tools/tok/oracle.js ("<byte length>\n<bytes>").
// SPILL_TOK_CORPUS=FILE replaces it with a prebuilt corpus file (the 5 MB
// run of tools/tok/oracle_corpus.sh).
#ifndef SPILL_TOK_TOK_CORPUS_TEST_UTIL_H
#define SPILL_TOK_TOK_CORPUS_TEST_UTIL_H

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

namespace tok_test {

inline std::string Base64Decode(const std::string &s) {
  auto v = [](char c) -> int {
    if (c >= 'A' && c <= 'Z') return c - 'A';
    if (c >= 'a' && c <= 'z') return c - 'a' + 26;
    if (c >= '0' && c <= '9') return c - '0' + 52;
    if (c == '+') return 62;
    if (c == '/') return 63;
    return -1;
  };
  std::string out;
  unsigned buf = 0;
  int bits = 0;
  for (char c : s) {
    int x = v(c);
    if (x < 0) continue;
    buf = ((buf << 6) | (unsigned)x) & 0xffffu;
    bits += 6;
    if (bits >= 8) {
      bits -= 8;
      out.push_back((char)((buf >> bits) & 0xff));
    }
  }
  return out;
}

inline std::vector<std::string> EdgeCases() {
  std::vector<std::string> d = {
      "",
      "a",
      " ",
      "Hello, world! The quick brown fox jumps over the lazy dog.",
      "我爱北京天安门。日本語のテキスト、カタカナとひらがな。한국어 텍스트입니다. 中文，标点！",
      "مرحبا بالعالم، هذا نصٌّ عربيٌّ مع تشكيل. ١٢٣٤٥٦",
      "नमस्ते दुनिया। यह हिंदी पाठ है। १२३४५ क्षत्रिय",
      "Ελληνικά κείμενα, Кириллица и русский текст, עברית, ไทย ภาษา",
      "👩‍👩‍👧‍👦 family 🏳️‍🌈 flag 👍🏽 skin 🇩🇪🇯🇵 ❤️‍🔥 🧑🏿‍💻 keycap 1️⃣",
      "a" + std::string(100, ' ') + "b\n\n\n\t\t  \r\n  x  \n",
      std::string(1500, ' '),
      std::string(300, '\n') + "end",
      "1234567890123456789 3.14159 1,000,000 0x7fff ٣٤٥ १२३ 12345678901234567890123",
      "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n",
      "<|im_start| <|im_end <| endoftext |> < |endoftext| > <|endoftext|>x<|endofprompt|>",
      "<｜begin▁of▁sentence｜>Hi<｜end▁of▁sentence｜><｜User｜>q<｜Assistant｜>",
      "<s>[INST] hi [/INST] ok</s><unk> <s> </s>",
      "<|begin_of_text|><|start_header_id|>user<|end_header_id|>\n\nhi<|eot_id|>",
      "<think>\nreasoning\n</think>\n\nanswer <tool_call>{}</tool_call>",
      "<0x41> <0xFF> ▁hello ▁▁ x▁y",
      std::string("invalid: \xff\xfe abc \xc3\x28 \xe2\x82 \xf0\x9f\x98 end \xed\xa0\x80 \xc0\xaf") +
          std::string("\x80\x80 \xf4\x90\x80\x80 \xe0\x80\x80 tail\xe4"),
      "NFC: e\xcc\x81 \xe2\x84\xab \xe1\x84\x80\xe1\x85\xa1 A\xcc\x8a o\xcc\x88\xcc\x81 "
      "\xef\xac\x81 \xe2\x85\xa0",
      "\xef\xbb\xbf" "BOM then text, NEL\xc2\x85here, NBSP\xc2\xa0there, ideographic\xe3\x80\x80space",
      "I'm you'RE they'Ll don't WE'VE it's he'd SHE'S 'tis o'clock ''",
      "int main(void) {\n\tif (x->y != NULL && a[i] <= 0x10) return -1;\n    // comment\n}\n",
      "https://example.com/path?q=1&r=two#frag user@example.org $HOME/~/.bashrc C:\\\\Windows",
      std::string(800, 'a'),
      [] {
        std::string s;
        for (int i = 0; i < 300; i++) s += "ab";
        return s;
      }(),
      "   leading and trailing spaces   ",
      "tabs\tand\u00a0nbsp\u2003em space\u2028line sep\u2029para sep",
      "\x01\x02\x7f control \x1b[31mred\x1b[0m",
      "Mixed: naïve café résumé Straße ǅ ǈ ß ﬀ İstanbul ıi",
      "数学 ∀x∈ℝ: x²≥0 ∑ᵢ aᵢ → ∞ ½ ⅔ № ™ © ®",
      // combining marks NFC leaves in place (after x, q, punctuation, a digit,
      // a space, at the start; Hebrew points, Zalgo): Qwen3.5's split keeps
      // them in the word, Qwen2's cuts there
      "\xcc\x81 Marks: ax\xcc\x81y q\xcc\x88q !\xcc\x81x 1\xcc\x81 2 \xcc\x81\xcc\x81 x\xe2\x83\x9d "
      "\xd7\x91\xd6\xbc\xd6\xb0\xd7\xa8\xd6\xb5 Z\xcd\x91\xcd\xab\xcc\x83" "A\xcc\xb4\xcc\x9c L\xcc\xa0\xcd\xa8",
      "ภาษาไทยเป็นภาษาราชการของประเทศไทย ที่นี่มีคนพูดภาษาไทยมากกว่า น้ำ ผู้ใหญ่ เด็ก ๆ",
  };
  return d;
}

inline std::vector<std::string> SmallCorpus() {
  const char *file = getenv("SPILL_TOK_CORPUS");
  std::vector<std::string> docs;
  if (file && *file) {
    std::ifstream in(file, std::ios::binary);
    std::string all((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    size_t i = 0;
    while (i < all.size()) {
      size_t j = all.find('\n', i);
      if (j == std::string::npos) break;
      size_t n = strtoul(all.substr(i, j - i).c_str(), nullptr, 10);
      docs.push_back(all.substr(j + 1, n));
      i = j + 1 + n;
    }
    return docs;
  }
  docs = EdgeCases();
  const char *lic[] = {"/usr/share/common-licenses/GPL-3", "/usr/share/common-licenses/Apache-2.0",
                       "/usr/share/common-licenses/Artistic"};
  for (const char *p : lic) {
    std::ifstream in(p, std::ios::binary);
    std::string all((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    for (size_t i = 0; i < all.size() && i < 24000; i += 6000) docs.push_back(all.substr(i, 6000));
  }
  return docs;
}

inline void WriteCorpus(const std::string &path, const std::vector<std::string> &docs) {
  std::ofstream out(path, std::ios::binary);
  for (const auto &d : docs) out << d.size() << "\n" << d;
}

}  // namespace tok_test

#endif
