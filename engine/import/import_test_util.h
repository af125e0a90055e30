// engine/import/import_test_util.h: tiny in-memory builders of safetensors
// and GGUF files for the readers' tests (valid ones and deliberately broken
// ones). Byte layouts as in the readers' headers; no checks of their own, so
// tests can write anything.
#ifndef SPILL_IMPORT_TEST_UTIL_H
#define SPILL_IMPORT_TEST_UTIL_H

#include <cstdint>
#include <cstring>
#include <fstream>
#include <string>
#include <vector>

namespace spill_test {

inline void Put(std::string &s, const void *p, size_t n) { s.append((const char *)p, n); }
inline void PutU32(std::string &s, uint32_t v) { Put(s, &v, 4); }
inline void PutU64(std::string &s, uint64_t v) { Put(s, &v, 8); }
inline void PutStr(std::string &s, const std::string &v) {
  PutU64(s, v.size());
  s += v;
}

struct GgufTensor {
  std::string name;
  std::vector<uint64_t> ne;  // ggml order (ne[0] contiguous)
  uint32_t type;
  std::string data;
  int64_t offset = -1;       // -1: next aligned position
};

// A GGUF v3 image: header, kvs (pre-encoded), tensor infos, aligned data.
struct Gguf {
  uint32_t magic = 0x46554747u, version = 3;
  uint32_t align = 32;
  std::vector<std::string> kv;  // each: key + type + value, encoded
  int n_kv_extra = 0;           // lie about the count
  std::vector<GgufTensor> t;

  void KvU32(const std::string &k, uint32_t v) {
    std::string s; PutStr(s, k); PutU32(s, 4); PutU32(s, v); kv.push_back(s);
  }
  void KvF32(const std::string &k, float v) {
    std::string s; PutStr(s, k); PutU32(s, 6); Put(s, &v, 4); kv.push_back(s);
  }
  void KvBool(const std::string &k, bool v) {
    std::string s; PutStr(s, k); PutU32(s, 7); s.push_back(v ? 1 : 0); kv.push_back(s);
  }
  void KvStr(const std::string &k, const std::string &v) {
    std::string s; PutStr(s, k); PutU32(s, 8); PutStr(s, v); kv.push_back(s);
  }
  void KvStrArr(const std::string &k, const std::vector<std::string> &v) {
    std::string s; PutStr(s, k); PutU32(s, 9); PutU32(s, 8); PutU64(s, v.size());
    for (auto &x : v) PutStr(s, x);
    kv.push_back(s);
  }
  void KvI32Arr(const std::string &k, const std::vector<int32_t> &v) {
    std::string s; PutStr(s, k); PutU32(s, 9); PutU32(s, 5); PutU64(s, v.size());
    for (auto x : v) Put(s, &x, 4);
    kv.push_back(s);
  }
  std::string Bytes() const {
    std::string s;
    PutU32(s, magic); PutU32(s, version);
    PutU64(s, t.size()); PutU64(s, kv.size() + n_kv_extra);
    for (auto &k : kv) s += k;
    uint64_t off = 0;
    std::vector<uint64_t> offs;
    for (auto &x : t) {
      uint64_t o = x.offset >= 0 ? (uint64_t)x.offset : off;
      offs.push_back(o);
      off = (o + x.data.size() + align - 1) / align * align;
    }
    for (size_t i = 0; i < t.size(); i++) {
      PutStr(s, t[i].name); PutU32(s, (uint32_t)t[i].ne.size());
      for (auto d : t[i].ne) PutU64(s, d);
      PutU32(s, t[i].type); PutU64(s, offs[i]);
    }
    while (s.size() % align) s.push_back(0);
    size_t ds = s.size();
    for (size_t i = 0; i < t.size(); i++) {
      if (s.size() < ds + offs[i] + t[i].data.size()) s.resize(ds + offs[i] + t[i].data.size());
      memcpy(&s[ds + offs[i]], t[i].data.data(), t[i].data.size());
    }
    return s;
  }
};

struct StTensor {
  std::string name, dtype;
  std::vector<uint64_t> shape;
  std::string data;
};

// A safetensors image; header JSON written by hand (in tensor order).
inline std::string Safetensors(const std::vector<StTensor> &ts, const std::string &meta = "") {
  std::string h = "{";
  if (!meta.empty()) h += "\"__metadata__\":" + meta + ",";
  uint64_t off = 0;
  for (size_t i = 0; i < ts.size(); i++) {
    if (i) h += ",";
    h += "\"" + ts[i].name + "\":{\"dtype\":\"" + ts[i].dtype + "\",\"shape\":[";
    for (size_t j = 0; j < ts[i].shape.size(); j++)
      h += (j ? "," : "") + std::to_string(ts[i].shape[j]);
    h += "],\"data_offsets\":[" + std::to_string(off) + "," +
         std::to_string(off + ts[i].data.size()) + "]}";
    off += ts[i].data.size();
  }
  h += "}";
  while (h.size() % 8) h += " ";
  std::string s;
  PutU64(s, h.size());
  s += h;
  for (auto &t : ts) s += t.data;
  return s;
}

inline std::string F32Bytes(const std::vector<float> &v) {
  return std::string((const char *)v.data(), v.size() * 4);
}

inline void WriteFile(const std::string &path, const std::string &b) {
  std::ofstream f(path, std::ios::binary);
  f.write(b.data(), (std::streamsize)b.size());
}

inline std::string TmpDir() {
  const char *t = getenv("TEST_TMPDIR");
  return t ? t : "/tmp";
}

}  // namespace spill_test
#endif
