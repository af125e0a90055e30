// Tests of manifest.json parsing and serialisation (manifest_parse.c,
// manifest_json.c): the round trip, and one specific error code and message
// per validation rule. Malformed input must fail cleanly, never crash.
#include <cjson/cJSON.h>
#include <gtest/gtest.h>
#include <string.h>

#include <functional>
#include <string>
#include <vector>

#include "engine/format/container.h"
#include "engine/format/container_test_util.h"
#include "engine/format/format_internal.h"

namespace {

using spill_test::Contains;

// manifest.json of a freshly written tiny container.
std::string ValidJson(spill_dtype dt) {
  std::string dir = spill_test::TmpDir(std::string("manifest_") + spill_dtype_name(dt));
  spill_test::TinyModel tm(dt);
  spill_err e = {};
  EXPECT_EQ(spill_test::WriteTiny(dir, tm, &e), SPILL_OK) << e.msg;
  return spill_test::ReadAll(dir + "/manifest.json");
}

std::string Mutate(const std::string &json, const std::function<void(cJSON *)> &f) {
  cJSON *root = cJSON_Parse(json.c_str());
  EXPECT_NE(root, nullptr);
  f(root);
  char *txt = cJSON_PrintUnformatted(root);
  std::string out(txt);
  cJSON_free(txt);
  cJSON_Delete(root);
  return out;
}

cJSON *At(cJSON *root, const char *a, const char *b = nullptr, const char *c = nullptr) {
  cJSON *o = cJSON_GetObjectItemCaseSensitive(root, a);
  if (b) o = cJSON_GetObjectItemCaseSensitive(o, b);
  if (c) o = cJSON_GetObjectItemCaseSensitive(o, c);
  return o;
}

void SetNum(cJSON *obj, const char *key, double v) {
  cJSON_ReplaceItemInObjectCaseSensitive(obj, key, cJSON_CreateNumber(v));
}

int Parse(const std::string &json, spill_err *e) {
  spill_manifest m;
  int rc = spill_manifest_parse(json.data(), json.size(), "manifest.json", &m, e);
  spill_manifest_free(&m);
  return rc;
}

TEST(ManifestTest, RoundTripsThroughJson) {
  for (spill_dtype dt : {SPILL_DT_F32, SPILL_DT_RVQ3, SPILL_DT_Q8, SPILL_DT_Q4}) {
    std::string json = ValidJson(dt);
    spill_manifest m, m2;
    spill_err e = {};
    ASSERT_EQ(spill_manifest_parse(json.data(), json.size(), "manifest.json", &m, &e), SPILL_OK)
        << e.msg;
    char *out = nullptr;
    ASSERT_EQ(spill_manifest_to_json(&m, &out, &e), SPILL_OK) << e.msg;
    EXPECT_EQ(std::string(out), json);
    ASSERT_EQ(spill_manifest_parse(out, strlen(out), "again", &m2, &e), SPILL_OK) << e.msg;
    free(out);
    EXPECT_EQ(memcmp(&m.arch, &m2.arch, sizeof m.arch), 0);
    ASSERT_EQ(m.n_tensors, m2.n_tensors);
    EXPECT_EQ(memcmp(m.tensors, m2.tensors, sizeof *m.tensors * m.n_tensors), 0);
    ASSERT_EQ(m.n_banks, 2);
    EXPECT_EQ(memcmp(m.banks, m2.banks, sizeof *m.banks * m.n_banks), 0);
    EXPECT_EQ(memcmp(m.files, m2.files, sizeof *m.files * m.n_files), 0);
    EXPECT_EQ(memcmp(m.sect, m2.sect, sizeof m.sect), 0);
    EXPECT_EQ(m.record_bytes, m2.record_bytes);
    EXPECT_EQ(m.expert_dtype, dt);
    EXPECT_EQ(m.arch.layer_attn[1], SPILL_ATTN_MLA);
    EXPECT_EQ(m.arch.moe.routed_scale, 2.5);
    EXPECT_EQ(m.arch.kda.decay_floor, -5.0);
    ASSERT_NE(spill_manifest_find(&m, "output"), nullptr);
    EXPECT_EQ(spill_manifest_find(&m, "output")->group, 8u);
    EXPECT_EQ(spill_manifest_find(&m, "nope"), nullptr);
    EXPECT_EQ(spill_arch_n_moe(&m.arch), 2);
    EXPECT_TRUE(spill_arch_is_moe(&m.arch, 2));
    EXPECT_FALSE(spill_arch_is_moe(&m.arch, 0));
    EXPECT_FALSE(spill_arch_is_moe(&m.arch, 3));
    spill_manifest_free(&m);
    spill_manifest_free(&m2);
  }
  spill_manifest_free(nullptr);
}

TEST(ManifestTest, GeneratorObjectIsKeptVerbatim) {
  std::string json = Mutate(ValidJson(SPILL_DT_F32), [](cJSON *r) {
    cJSON *g = cJSON_AddObjectToObject(r, "generator");
    cJSON_AddStringToObject(g, "tool", "unit");
    cJSON_AddNumberToObject(g, "seed", 42);
  });
  spill_manifest m;
  spill_err e = {};
  ASSERT_EQ(spill_manifest_parse(json.data(), json.size(), "m", &m, &e), SPILL_OK) << e.msg;
  ASSERT_NE(m.generator_json, nullptr);
  EXPECT_STREQ(m.generator_json, "{\"tool\":\"unit\",\"seed\":42}");
  spill_manifest_free(&m);
}

struct BadCase {
  const char *what;
  std::function<void(cJSON *)> mutate;
  int code;
  const char *msg;
};

// The optional YaRN / softmax-scale / group-routing fields (DeepSeek import)
// and the latent norm eps (Kimi-Linear)
// survive a round trip, are omitted at their defaults, and are validated.
TEST(ManifestTest, OptionalMlaAndGroupFieldsRoundTripAndValidate) {
  const std::string base = ValidJson(SPILL_DT_F32);
  const std::string with = Mutate(base, [](cJSON *r) {
    cJSON *mla = At(r, "arch", "mla"), *moe = At(r, "arch", "moe");
    cJSON_AddNumberToObject(mla, "rope_mscale", 0.75);
    cJSON_AddNumberToObject(mla, "softmax_scale", 0.3125);
    cJSON_AddNumberToObject(mla, "kv_norm_eps", 1e-6);
    cJSON *y = cJSON_AddObjectToObject(mla, "yarn");
    cJSON_AddNumberToObject(y, "factor", 40);
    cJSON_AddNumberToObject(y, "orig_ctx", 4096);
    cJSON_AddNumberToObject(y, "beta_fast", 32);
    cJSON_AddNumberToObject(y, "beta_slow", 1);
    cJSON_AddNumberToObject(moe, "n_group", 2);
    cJSON_AddNumberToObject(moe, "topk_group", 1);
    cJSON_AddStringToObject(moe, "group_score", "top2");
    cJSON_AddStringToObject(moe, "group_mask", "zero");
  });
  spill_manifest m;
  spill_err e = {};
  ASSERT_EQ(spill_manifest_parse(with.data(), with.size(), "manifest.json", &m, &e), SPILL_OK) << e.msg;
  EXPECT_EQ(m.arch.mla.yarn_factor, 40.0);
  EXPECT_EQ(m.arch.mla.yarn_orig_ctx, 4096);
  EXPECT_EQ(m.arch.mla.rope_mscale, 0.75);
  EXPECT_EQ(m.arch.mla.softmax_scale, 0.3125);
  EXPECT_EQ(m.arch.mla.kv_norm_eps, 1e-6);
  EXPECT_EQ(m.arch.moe.n_group, 2);
  EXPECT_EQ(m.arch.moe.topk_group, 1);
  EXPECT_EQ(m.arch.moe.group_score, SPILL_GROUP_TOP2);
  EXPECT_EQ(m.arch.moe.group_mask_zero, 1);
  char *out = nullptr;
  ASSERT_EQ(spill_manifest_to_json(&m, &out, &e), SPILL_OK) << e.msg;
  spill_manifest m2;
  ASSERT_EQ(spill_manifest_parse(out, strlen(out), "again", &m2, &e), SPILL_OK) << e.msg;
  free(out);
  EXPECT_EQ(memcmp(&m.arch, &m2.arch, sizeof m.arch), 0);
  spill_manifest_free(&m);
  spill_manifest_free(&m2);
  // absent: defaults, and the writer omits them (checked by RoundTripsThroughJson's equality)
  ASSERT_EQ(spill_manifest_parse(base.data(), base.size(), "manifest.json", &m, &e), SPILL_OK);
  EXPECT_EQ(m.arch.mla.yarn_factor, 0.0);
  EXPECT_EQ(m.arch.moe.n_group, 0);
  spill_manifest_free(&m);
  struct Bad {
    std::function<void(cJSON *)> f;
    const char *msg;
  } bad[] = {
      {[](cJSON *r) { cJSON_AddNumberToObject(At(r, "arch", "moe"), "n_group", 3); },
       "arch.moe.n_group: 3 does not divide n_experts 4"},
      {[](cJSON *r) { cJSON_AddNumberToObject(At(r, "arch", "moe"), "topk_group", 1); },
       "topk_group / group_score without n_group"},
      {[](cJSON *r) {
         cJSON_AddNumberToObject(At(r, "arch", "moe"), "n_group", 2);
         cJSON_AddStringToObject(At(r, "arch", "moe"), "group_score", "best");
       }, "group_score: \"best\" is not \"max\" or \"top2\""},
      {[](cJSON *r) {
         cJSON_AddNumberToObject(At(r, "arch", "moe"), "n_group", 4);
         cJSON_AddNumberToObject(At(r, "arch", "moe"), "topk_group", 1);
       }, "exceeds the 1 experts of topk_group 1 groups"},
      {[](cJSON *r) { cJSON_AddObjectToObject(At(r, "arch", "mla"), "yarn"); },
       "arch.mla.yarn.factor: missing key"},
      {[](cJSON *r) { cJSON_AddNumberToObject(At(r, "arch", "mla"), "kv_norm_eps", 2.0); },
       "arch.mla.kv_norm_eps"},
  };
  for (const Bad &b : bad) {
    spill_err e2 = {};
    EXPECT_EQ(Parse(Mutate(base, b.f), &e2), SPILL_E_FORMAT) << b.msg;
    EXPECT_TRUE(Contains(e2.msg, b.msg)) << e2.msg;
  }
}

// arch.kda.l2norm_eps (the GGUF kimi-linear import writes llama.cpp's eps):
// optional, 0 = 1e-6 and omitted, round-trips exactly, range [0, 1].
TEST(ManifestTest, OptionalKdaL2normEpsRoundTripsAndValidates) {
  const std::string base = ValidJson(SPILL_DT_F32);
  spill_manifest m, m2;
  spill_err e = {};
  ASSERT_EQ(spill_manifest_parse(base.data(), base.size(), "manifest.json", &m, &e), SPILL_OK);
  EXPECT_EQ(m.arch.kda.l2norm_eps, 0.0);
  char *out = nullptr;
  ASSERT_EQ(spill_manifest_to_json(&m, &out, &e), SPILL_OK) << e.msg;
  EXPECT_EQ(strstr(out, "l2norm_eps"), nullptr);
  free(out);
  spill_manifest_free(&m);
  const double eps = (double)9.99999974737875163e-06f; /* a GGUF's f32 1e-5 */
  const std::string with = Mutate(base, [eps](cJSON *r) {
    cJSON_AddNumberToObject(At(r, "arch", "kda"), "l2norm_eps", eps);
  });
  ASSERT_EQ(spill_manifest_parse(with.data(), with.size(), "manifest.json", &m, &e), SPILL_OK)
      << e.msg;
  // cJSON writes 15 significant digits unless that is off by more than its
  // compare_double's relative DBL_EPSILON, so the double may move by an ulp;
  // the engine uses it as f32, which is exact.
  EXPECT_EQ((float)m.arch.kda.l2norm_eps, (float)eps);
  ASSERT_EQ(spill_manifest_to_json(&m, &out, &e), SPILL_OK) << e.msg;
  EXPECT_NE(strstr(out, "\"l2norm_eps\""), nullptr);
  ASSERT_EQ(spill_manifest_parse(out, strlen(out), "again", &m2, &e), SPILL_OK) << e.msg;
  free(out);
  EXPECT_EQ(memcmp(&m.arch, &m2.arch, sizeof m.arch), 0);
  spill_manifest_free(&m);
  spill_manifest_free(&m2);
  const double bad[] = {-1e-6, 2.0};
  for (double v : bad) {
    spill_err e2 = {};
    std::string j = Mutate(base, [v](cJSON *r) {
      cJSON_AddNumberToObject(At(r, "arch", "kda"), "l2norm_eps", v);
    });
    EXPECT_EQ(Parse(j, &e2), SPILL_E_FORMAT) << v;
    EXPECT_TRUE(Contains(e2.msg, "arch.kda.l2norm_eps")) << e2.msg;
  }
  spill_err e3 = {};
  std::string j = Mutate(base, [](cJSON *r) {
    cJSON_AddStringToObject(At(r, "arch", "kda"), "l2norm_eps", "max");
  });
  EXPECT_EQ(Parse(j, &e3), SPILL_E_FORMAT);
  EXPECT_TRUE(Contains(e3.msg, "arch.kda.l2norm_eps")) << e3.msg;
}

// arch.gqa.rope_dim (partial RoPE, GLM-4.5): optional, 0 = the whole head;
// an odd value or one above head_dim is refused by name; absent reads as 0
// and a manifest without it is written back without it.
TEST(ManifestTest, GqaRopeDimIsOptionalEvenAndAtMostHeadDim) {
  const std::string base = ValidJson(SPILL_DT_F32);
  spill_manifest m;
  spill_err e = {};
  ASSERT_EQ(spill_manifest_parse(base.data(), base.size(), "manifest.json", &m, &e), SPILL_OK) << e.msg;
  EXPECT_EQ(m.arch.gqa.rope_dim, 0);
  EXPECT_EQ(m.arch.gqa.qkv_bias, 0);
  EXPECT_EQ(m.arch.gqa.o_bias, 0);
  const int hd = m.arch.gqa.head_dim;
  char *out = nullptr;
  ASSERT_EQ(spill_manifest_to_json(&m, &out, &e), SPILL_OK) << e.msg;
  EXPECT_FALSE(Contains(out, "\"rope_dim\"")) << out;
  EXPECT_FALSE(Contains(out, "\"qkv_bias\"")) << out;
  free(out);
  spill_manifest_free(&m);
  for (int v : {3, hd + 2, -2}) {
    std::string j = Mutate(base, [&](cJSON *r) { cJSON_AddNumberToObject(At(r, "arch", "gqa"), "rope_dim", v); });
    spill_err e2 = {};
    EXPECT_EQ(Parse(j, &e2), SPILL_E_FORMAT) << v;
    EXPECT_TRUE(Contains(e2.msg, "arch.gqa.rope_dim")) << e2.msg;
  }
  std::string j = Mutate(base, [&](cJSON *r) { cJSON_AddNumberToObject(At(r, "arch", "gqa"), "rope_dim", hd / 2); });
  ASSERT_EQ(spill_manifest_parse(j.data(), j.size(), "manifest.json", &m, &e), SPILL_OK) << e.msg;
  EXPECT_EQ(m.arch.gqa.rope_dim, hd / 2);
  spill_manifest_free(&m);
}

// The field table (manifest_fields.c) is what the reader and the writer
// use: for every typed row of the arch objects, the writer writes the key
// (required rows always, optional rows when not at their default), the
// reader refuses it missing (required rows) and out of its range, naming
// "<object>.<key>"; and every object refuses a key that is not a row.
TEST(ManifestTest, EveryTableFieldIsWrittenReadAndChecked) {
  struct Obj {
    spill_mf_obj id;
    const char *path;
    std::vector<const char *> at;
  } objs[] = {{SPILL_MF_ARCH, "arch", {"arch"}},
              {SPILL_MF_GQA, "arch.gqa", {"arch", "gqa"}},
              {SPILL_MF_MLA, "arch.mla", {"arch", "mla"}},
              {SPILL_MF_YARN, "arch.mla.yarn", {"arch", "mla", "yarn"}},
              {SPILL_MF_KDA, "arch.kda", {"arch", "kda"}},
              {SPILL_MF_GDN, "arch.gdn", {"arch", "gdn"}},
              {SPILL_MF_MOE, "arch.moe", {"arch", "moe"}}};
  // the base has every optional row set off its default, and a yarn object
  const std::string base = Mutate(ValidJson(SPILL_DT_F32), [](cJSON *r) {
    cJSON *mla = At(r, "arch", "mla");
    cJSON_AddNumberToObject(mla, "rope_mscale", 0.75);
    cJSON_AddNumberToObject(mla, "softmax_scale", 0.3125);
    cJSON_AddNumberToObject(mla, "kv_norm_eps", 1e-6);
    cJSON *y = cJSON_AddObjectToObject(mla, "yarn");
    cJSON_AddNumberToObject(y, "factor", 40);
    cJSON_AddNumberToObject(y, "orig_ctx", 4096);
    cJSON_AddNumberToObject(y, "beta_fast", 32);
    cJSON_AddNumberToObject(y, "beta_slow", 1);
    cJSON_AddStringToObject(At(r, "arch", "gqa"), "qk_norm", "head");
    // GLM-4.5 / gpt-oss: partial RoPE and attention biases
    cJSON_AddNumberToObject(At(r, "arch", "gqa"), "rope_dim", 4);
    cJSON_AddBoolToObject(At(r, "arch", "gqa"), "qkv_bias", 1);
    cJSON_AddBoolToObject(At(r, "arch", "gqa"), "o_bias", 1);
    // Qwen3.5-MoE: the gated query, a Gated DeltaNet object, the shared-expert gate
    cJSON_AddBoolToObject(At(r, "arch", "gqa"), "out_gate", 1);
    cJSON *gdn = cJSON_AddObjectToObject(At(r, "arch"), "gdn");
    cJSON_AddNumberToObject(gdn, "n_k_heads", 2);
    cJSON_AddNumberToObject(gdn, "n_v_heads", 4);
    cJSON_AddNumberToObject(gdn, "head_dim", 8);
    cJSON_AddNumberToObject(gdn, "conv_kernel", 4);
    cJSON_AddBoolToObject(At(r, "arch", "moe"), "shared_gate", 1);
    // gpt-oss: sinks, the sliding window, YaRN on GQA, router and expert biases
    cJSON_AddBoolToObject(At(r, "arch", "gqa"), "sinks", 1);
    cJSON_AddNumberToObject(At(r, "arch", "gqa"), "swa_window", 128);
    cJSON_AddNumberToObject(At(r, "arch", "gqa"), "swa_pattern", 2);
    cJSON_AddNumberToObject(At(r, "arch", "gqa"), "yarn_factor", 32);
    cJSON_AddNumberToObject(At(r, "arch", "gqa"), "yarn_orig_ctx", 4096);
    cJSON_AddNumberToObject(At(r, "arch", "gqa"), "yarn_beta_fast", 32);
    cJSON_AddNumberToObject(At(r, "arch", "gqa"), "yarn_beta_slow", 1);
    cJSON_AddNumberToObject(At(r, "arch", "gqa"), "rope_mscale", 1.25);
    cJSON_AddBoolToObject(At(r, "arch", "gqa"), "yarn_unrounded", 1);
    cJSON_AddBoolToObject(At(r, "arch", "moe"), "router_bias", 1);
    cJSON_AddBoolToObject(At(r, "arch", "moe"), "expert_bias", 1);
    cJSON_AddNumberToObject(At(r, "arch", "kda"), "l2norm_eps", 1e-5);
    // Kimi K3 as released: SiTU, AttnRes, the MLA output gate, the bounded KDA decay
    // (no floor), the latent norm's place and the renormalisation clamp
    cJSON_ReplaceItemInObjectCaseSensitive(At(r, "arch"), "activation", cJSON_CreateString("situ"));
    cJSON_AddNumberToObject(At(r, "arch"), "situ_beta", 1.5);
    cJSON_AddNumberToObject(At(r, "arch"), "situ_linear_beta", 2.0);
    cJSON_AddNumberToObject(At(r, "arch"), "attn_res_block", 2);
    cJSON_AddBoolToObject(mla, "out_gate", 1);
    SetNum(At(r, "arch", "kda"), "decay_floor", 0);
    cJSON_AddNumberToObject(At(r, "arch", "kda"), "gate_lower_bound", -5.0);
    cJSON_AddStringToObject(At(r, "arch", "moe"), "latent_norm", "output");
    cJSON_AddNumberToObject(At(r, "arch", "moe"), "norm_min", 6.103515625e-5);
  });
  spill_manifest m;
  spill_err e = {};
  ASSERT_EQ(spill_manifest_parse(base.data(), base.size(), "manifest.json", &m, &e), SPILL_OK) << e.msg;
  char *out = nullptr;
  ASSERT_EQ(spill_manifest_to_json(&m, &out, &e), SPILL_OK) << e.msg;
  const std::string written(out);
  free(out);
  spill_manifest_free(&m);
  auto find = [](cJSON *r, const Obj &o) {
    cJSON *x = r;
    for (const char *k : o.at) x = cJSON_GetObjectItemCaseSensitive(x, k);
    return x;
  };
  int typed = 0;
  for (const Obj &o : objs) {
    // a key that is no row of the object
    std::string j = Mutate(base, [&](cJSON *r) { cJSON_AddNumberToObject(find(r, o), "not_a_row", 1); });
    EXPECT_EQ(Parse(j, &e), SPILL_E_FORMAT) << o.path;
    EXPECT_TRUE(Contains(e.msg, (std::string(o.path) + ".not_a_row: unknown key").c_str())) << e.msg;
    for (int i = 0; i < spill_mf_n_fields; i++) {
      const spill_mf_field &f = spill_mf_fields[i];
      if (f.obj != o.id || f.kind == SPILL_MF_CUSTOM) continue;
      typed++;
      const std::string name = std::string(o.path) + "." + f.key;
      // written: the key appears in the written object
      cJSON *w = cJSON_Parse(written.c_str());
      EXPECT_NE(cJSON_GetObjectItemCaseSensitive(find(w, o), f.key), nullptr) << name << " not written";
      cJSON_Delete(w);
      if (!(f.flags & SPILL_MF_OPTIONAL)) {
        j = Mutate(base, [&](cJSON *r) { cJSON_DeleteItemFromObjectCaseSensitive(find(r, o), f.key); });
        EXPECT_EQ(Parse(j, &e), SPILL_E_FORMAT) << name;
        EXPECT_TRUE(Contains(e.msg, (name + ": missing key").c_str())) << name << ": " << e.msg;
      }
      // out of range (numbers), not one of the names (enums), wrong type (others)
      j = Mutate(base, [&](cJSON *r) {
        cJSON *x = find(r, o);
        if (f.kind == SPILL_MF_INT || f.kind == SPILL_MF_NUM || f.kind == SPILL_MF_POS)
          SetNum(x, f.key, f.hi * 2 + 1e7);
        else if (f.kind == SPILL_MF_ENUM)
          cJSON_ReplaceItemInObjectCaseSensitive(x, f.key, cJSON_CreateString("nope"));
        else
          cJSON_ReplaceItemInObjectCaseSensitive(x, f.key, cJSON_CreateNumber(7));
      });
      EXPECT_EQ(Parse(j, &e), SPILL_E_FORMAT) << name;
      EXPECT_TRUE(Contains(e.msg, name.c_str())) << name << ": " << e.msg;
    }
  }
  EXPECT_GE(typed, 40);
}

// The mutations of base, each with the error it must give.
void ExpectEachError(const std::string &base, const BadCase *cases, size_t n) {
  for (size_t i = 0; i < n; i++) {
    const BadCase &c = cases[i];
    spill_err e = {};
    std::string json = Mutate(base, c.mutate);
    EXPECT_EQ(Parse(json, &e), c.code) << c.what << ": " << e.msg;
    EXPECT_TRUE(Contains(e.msg, c.msg)) << c.what << ": got \"" << e.msg << "\", want \"" << c.msg
                                        << "\"";
  }
}

// Types, keys, version, container id and format.
TEST(ManifestTest, EachKeyVersionAndIdRuleHasItsOwnError) {
  const BadCase cases[] = {
      {"top_k > n_experts", [](cJSON *r) { SetNum(At(r, "arch", "moe"), "top_k", 20); },
       SPILL_E_FORMAT, "manifest.json: arch.moe.top_k: 20 out of range [1, 4]"},
      {"wrong type", [](cJSON *r) {
         cJSON_ReplaceItemInObjectCaseSensitive(At(r, "arch"), "d_model", cJSON_CreateString("16"));
       }, SPILL_E_FORMAT, "manifest.json: arch.d_model: expected integer"},
      {"fractional integer", [](cJSON *r) { SetNum(At(r, "arch"), "n_layers", 2.5); },
       SPILL_E_FORMAT, "arch.n_layers: expected integer"},
      {"missing key", [](cJSON *r) { cJSON_DeleteItemFromObject(At(r, "arch", "moe"), "top_k"); },
       SPILL_E_FORMAT, "manifest.json: arch.moe.top_k: missing key"},
      {"missing arch", [](cJSON *r) { cJSON_DeleteItemFromObject(r, "arch"); }, SPILL_E_FORMAT,
       "manifest.json: arch: missing key"},
      {"unknown key", [](cJSON *r) { cJSON_AddNumberToObject(r, "bogus", 1); }, SPILL_E_FORMAT,
       "manifest.json: bogus: unknown key"},
      {"unknown nested key", [](cJSON *r) { cJSON_AddNumberToObject(At(r, "arch", "kda"), "x", 1); },
       SPILL_E_FORMAT, "arch.kda.x: unknown key"},
      {"version", [](cJSON *r) { SetNum(r, "version", 4); }, SPILL_E_VERSION,
       "version: 4, this reader reads versions 1 to 3"},
      {"v1 with a container id", [](cJSON *r) { SetNum(r, "version", 1); }, SPILL_E_FORMAT,
       "manifest.json: container_id: unknown key"},
      {"v2 without a container id", [](cJSON *r) { cJSON_DeleteItemFromObject(r, "container_id"); },
       SPILL_E_FORMAT, "manifest.json: container_id: missing key"},
      {"v2 with a zero container id", [](cJSON *r) {
         cJSON_ReplaceItemInObjectCaseSensitive(r, "container_id", cJSON_CreateString("0000000000000000"));
       }, SPILL_E_FORMAT, "container_id: \"0000000000000000\" is not 16 lower-case hex digits"},
      {"v2 with an upper-case container id", [](cJSON *r) {
         cJSON_ReplaceItemInObjectCaseSensitive(r, "container_id", cJSON_CreateString("00000000000000AA"));
       }, SPILL_E_FORMAT, "is not 16 lower-case hex digits"},
      {"format", [](cJSON *r) {
         cJSON_ReplaceItemInObjectCaseSensitive(r, "format", cJSON_CreateString("gguf"));
       }, SPILL_E_FORMAT, "format: \"gguf\""},
  };
  ExpectEachError(ValidJson(SPILL_DT_RVQ3), cases, sizeof cases / sizeof cases[0]);
}

// The architecture: attention kinds, configs, dims, norm, vocabulary.
TEST(ManifestTest, EachArchRuleHasItsOwnError) {
  const BadCase cases[] = {
      {"layer_attn length", [](cJSON *r) {
         cJSON_DeleteItemFromArray(At(r, "arch", "layer_attn"), 0);
       }, SPILL_E_FORMAT, "arch.layer_attn: 2 entries, n_layers is 3"},
      {"bad attention kind", [](cJSON *r) {
         cJSON_ReplaceItemInArray(At(r, "arch", "layer_attn"), 1, cJSON_CreateString("mha"));
       }, SPILL_E_FORMAT, "arch.layer_attn[1]"},
      {"used config missing", [](cJSON *r) { cJSON_DeleteItemFromObject(At(r, "arch"), "mla"); },
       SPILL_E_FORMAT, "arch.mla: missing key"},
      {"non-positive dim", [](cJSON *r) { SetNum(At(r, "arch", "gqa"), "head_dim", 0); },
       SPILL_E_FORMAT, "arch.gqa.head_dim: 0 out of range"},
      {"kv heads do not divide", [](cJSON *r) {
         SetNum(At(r, "arch", "gqa"), "n_heads", 3);
         SetNum(At(r, "arch", "gqa"), "n_kv_heads", 2);
       }, SPILL_E_FORMAT, "arch.gqa.n_kv_heads: 2 does not divide"},
      {"norm_eps zero", [](cJSON *r) { SetNum(At(r, "arch"), "norm_eps", 0); }, SPILL_E_FORMAT,
       "arch.norm_eps: must be > 0"},
      {"bos out of vocab", [](cJSON *r) { SetNum(At(r, "arch"), "bos_id", 256); }, SPILL_E_FORMAT,
       "arch.bos_id: 256 out of range [-1, 255]"},
      {"situ without beta", [](cJSON *r) {
         cJSON_ReplaceItemInObjectCaseSensitive(At(r, "arch"), "activation", cJSON_CreateString("situ"));
       }, SPILL_E_FORMAT, "arch.situ_beta: 0 with activation \"situ\""},
      {"swiglu with a situ beta", [](cJSON *r) { cJSON_AddNumberToObject(At(r, "arch"), "situ_beta", 2.0); },
       SPILL_E_FORMAT, "arch.situ_beta: 2 with activation \"swiglu\""},
      {"linear beta without situ", [](cJSON *r) {
         cJSON_AddNumberToObject(At(r, "arch"), "situ_linear_beta", 2.0);
       }, SPILL_E_FORMAT, "arch.situ_linear_beta: set without activation \"situ\""},
      {"attn_res_block past n_layers", [](cJSON *r) { cJSON_AddNumberToObject(At(r, "arch"), "attn_res_block", 4); },
       SPILL_E_FORMAT, "arch.attn_res_block: 4 out of range [0, 3]"},
      {"bounded decay with a floor", [](cJSON *r) {
         cJSON_AddNumberToObject(At(r, "arch", "kda"), "gate_lower_bound", -5.0);
       }, SPILL_E_FORMAT, "arch.kda.decay_floor: -5 with gate_lower_bound -5"},
  };
  ExpectEachError(ValidJson(SPILL_DT_RVQ3), cases, sizeof cases / sizeof cases[0]);
}

// The tensor table: offsets, sizes, shapes, names, dtypes, codebooks.
TEST(ManifestTest, EachTensorRuleHasItsOwnError) {
  const BadCase cases[] = {
      {"misaligned tensor", [](cJSON *r) {
         SetNum(cJSON_GetArrayItem(At(r, "tensors"), 1), "offset", 65568);
       }, SPILL_E_FORMAT, "tensors[1].offset: 65568 is not a multiple of 64"},
      {"tensor bytes lie", [](cJSON *r) {
         SetNum(cJSON_GetArrayItem(At(r, "tensors"), 0), "bytes", 16000);
       }, SPILL_E_FORMAT, "tensors[0].bytes: 16000, but f32 of this shape takes 16384"},
      {"offset past end", [](cJSON *r) {
         SetNum(cJSON_GetArrayItem(At(r, "tensors"), 1), "offset", 1 << 30);
       }, SPILL_E_FORMAT, "tensors[1] (output_norm): [1073741824, 1073741888) extends past the end"},
      {"dimension overflow", [](cJSON *r) {
         cJSON *t = cJSON_GetArrayItem(At(r, "tensors"), 0);
         cJSON *sh = cJSON_CreateArray();
         cJSON_AddItemToArray(sh, cJSON_CreateNumber(1099511627776.0));
         cJSON_AddItemToArray(sh, cJSON_CreateNumber(1099511627776.0));
         cJSON_ReplaceItemInObjectCaseSensitive(t, "shape", sh);
       }, SPILL_E_FORMAT, "tensors[0] (tok_embd): f32 (1099511627776, 1099511627776): byte size overflows"},
      {"3-d shape", [](cJSON *r) {
         cJSON_AddItemToArray(At(cJSON_GetArrayItem(At(r, "tensors"), 0), "shape"),
                              cJSON_CreateNumber(1));
       }, SPILL_E_FORMAT, "tensors[0].shape: 3 dimensions"},
      {"negative dim", [](cJSON *r) {
         cJSON_ReplaceItemInArray(At(cJSON_GetArrayItem(At(r, "tensors"), 0), "shape"), 0,
                                  cJSON_CreateNumber(-4));
       }, SPILL_E_FORMAT, "tensors[0].shape[0]: expected an integer"},
      {"overlap", [](cJSON *r) {
         SetNum(cJSON_GetArrayItem(At(r, "tensors"), 1), "offset", 64);
       }, SPILL_E_FORMAT, "overlaps"},
      {"duplicate name", [](cJSON *r) {
         cJSON_ReplaceItemInObjectCaseSensitive(cJSON_GetArrayItem(At(r, "tensors"), 1), "name",
                                                cJSON_CreateString("tok_embd"));
       }, SPILL_E_FORMAT, "duplicate name \"tok_embd\""},
      {"group on f32", [](cJSON *r) {
         cJSON_AddNumberToObject(cJSON_GetArrayItem(At(r, "tensors"), 0), "group", 8);
       }, SPILL_E_FORMAT, "tensors[0].group: only q8 and q4"},
      {"unknown dtype", [](cJSON *r) {
         cJSON_ReplaceItemInObjectCaseSensitive(cJSON_GetArrayItem(At(r, "tensors"), 0), "dtype",
                                                cJSON_CreateString("f64"));
       }, SPILL_E_FORMAT, "tensors[0].dtype: unknown dtype \"f64\""},
      {"missing codebook", [](cJSON *r) {
         cJSON *ts = At(r, "tensors");
         cJSON_DeleteItemFromArray(ts, cJSON_GetArraySize(ts) - 1);
       }, SPILL_E_FORMAT, "codebook tensor \"blk.2.ffn_down_exps.codebook\""},
  };
  ExpectEachError(ValidJson(SPILL_DT_RVQ3), cases, sizeof cases / sizeof cases[0]);
}

// Expert records, banks, files and the shape of the top-level keys.
TEST(ManifestTest, EachExpertBankAndFileRuleHasItsOwnError) {
  const BadCase cases[] = {
      {"record size lie", [](cJSON *r) { SetNum(At(r, "experts"), "record_bytes", 8192); },
       SPILL_E_FORMAT, "experts.record_bytes: 8192, but the layout of rvq3 experts (8 x 16) needs 4096"},
      {"section lie", [](cJSON *r) {
         SetNum(cJSON_GetArrayItem(At(r, "experts", "sections"), 2), "offset", 256);
       }, SPILL_E_FORMAT, "experts.sections[2].offset: 256, but the layout needs 192"},
      {"bank layer order", [](cJSON *r) {
         SetNum(cJSON_GetArrayItem(At(r, "banks"), 0), "layer", 2);
       }, SPILL_E_FORMAT, "banks[0].layer: 2, expected 1"},
      {"bank file name", [](cJSON *r) {
         cJSON_ReplaceItemInObjectCaseSensitive(cJSON_GetArrayItem(At(r, "banks"), 0), "file",
                                                cJSON_CreateString("../etc/passwd"));
       }, SPILL_E_FORMAT, "banks[0].file: \"../etc/passwd\", expected \"experts-001.bin\""},
      {"missing bank", [](cJSON *r) { cJSON_DeleteItemFromArray(At(r, "banks"), 1); },
       SPILL_E_FORMAT, "banks: 1 entries, the model has 2 MoE layers"},
      {"file size lie", [](cJSON *r) {
         SetNum(cJSON_GetArrayItem(At(r, "files"), 1), "bytes", 4096);
       }, SPILL_E_FORMAT, "files[1].bytes: 4096, but experts-001.bin must be 20480 bytes"},
      {"crc out of range", [](cJSON *r) {
         SetNum(cJSON_GetArrayItem(At(r, "files"), 0), "crc32", 4294967296.0);
       }, SPILL_E_FORMAT, "files[0].crc32: 4294967296 out of range"},
      {"experts without MoE", [](cJSON *r) {
         SetNum(At(r, "arch"), "n_dense_layers", 3);
         cJSON_DeleteItemFromObject(r, "banks");
         cJSON_AddArrayToObject(r, "banks");
       }, SPILL_E_FORMAT, "experts: present, but the model has no MoE layers"},
      {"tensors not an array", [](cJSON *r) {
         cJSON_ReplaceItemInObjectCaseSensitive(r, "tensors", cJSON_CreateObject());
       }, SPILL_E_FORMAT, "manifest.json: tensors: expected array"},
      {"bool as number", [](cJSON *r) { SetNum(At(r, "arch", "moe"), "norm_topk", 1); },
       SPILL_E_FORMAT, "arch.moe.norm_topk: expected true or false"},
  };
  ExpectEachError(ValidJson(SPILL_DT_RVQ3), cases, sizeof cases / sizeof cases[0]);
}

TEST(ManifestTest, RejectsMalformedJsonText) {
  spill_err e = {};
  EXPECT_EQ(Parse("", &e), SPILL_E_FORMAT);
  EXPECT_EQ(Parse("[1, 2]", &e), SPILL_E_FORMAT);
  EXPECT_TRUE(Contains(e.msg, "expected a JSON object")) << e.msg;
  EXPECT_EQ(Parse("{\"format\": \"spill\"", &e), SPILL_E_FORMAT);
  EXPECT_TRUE(Contains(e.msg, "not valid JSON")) << e.msg;
  std::string base = ValidJson(SPILL_DT_F32);
  EXPECT_EQ(Parse(base + " x", &e), SPILL_E_FORMAT);
  EXPECT_TRUE(Contains(e.msg, "trailing bytes")) << e.msg;
  std::string dup = "{\"format\": \"spill\", \"format\": \"spill\"}";
  EXPECT_EQ(Parse(dup, &e), SPILL_E_FORMAT);
  EXPECT_TRUE(Contains(e.msg, "format: duplicate key")) << e.msg;
  spill_manifest m;
  EXPECT_EQ(spill_manifest_parse(base.data(), SPILL_MANIFEST_MAX_BYTES + 1ull, "m", &m, &e),
            SPILL_E_FORMAT);
}

// Every prefix and many single-byte corruptions of a valid manifest must be
// rejected or accepted cleanly (run under --config=asan for memory errors).
TEST(ManifestTest, TruncatedOrCorruptedTextNeverCrashes) {
  std::string base = ValidJson(SPILL_DT_Q4);
  spill_err e = {};
  for (size_t n = 0; n < base.size() - 2; n++) {
    std::string cut = base.substr(0, n);
    EXPECT_LT(Parse(cut, &e), 0) << n;
  }
  int accepted = 0;
  for (size_t i = 0; i < base.size(); i += 3) {
    for (char c : {'0', '9', '"', '{', ']', '-', 'e'}) {
      std::string bad = base;
      if (bad[i] == c) continue;
      bad[i] = c;
      if (Parse(bad, &e) == SPILL_OK) accepted++;
    }
  }
  // Some corruptions (inside a crc value) are still valid manifests; most are not.
  EXPECT_LT(accepted, (int)base.size());
}

}  // namespace
