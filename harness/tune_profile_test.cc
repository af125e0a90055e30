// harness/tune_profile_test.cc: tuned profiles (tune_profile.h): saved and
// read back exactly; malformed files refused naming the field; a profile of
// another model or machine refused naming what differs; the knobs the user
// set on the command line win; no profile is no change.
#include "harness/tune_profile.h"

#include <gtest/gtest.h>
#include <stdlib.h>
#include <sys/stat.h>

#include <fstream>
#include <string>

#include <cjson/cJSON.h>

#include "research/gen/spill_gen.h"

namespace {

std::string TmpDir() {
  const char *t = getenv("TEST_TMPDIR");
  return t ? t : "/tmp";
}

std::string Nano() {
  static std::string dir;
  if (!dir.empty()) return dir;
  dir = TmpDir() + "/tune-nano";
  spill_gen_request req = {};
  req.preset = "nano";
  spill_err e = {};
  EXPECT_EQ(spill_gen(dir.c_str(), &req, nullptr, nullptr, &e), SPILL_OK) << e.msg;
  return dir;
}

spill_tune_profile Profile(const spill_info &info, const spill_tune_machine &m) {
  spill_tune_profile p = {};
  p.version = SPILL_TUNE_VERSION;
  p.container_id = info.container_id;
  snprintf(p.model_name, sizeof p.model_name, "%s", info.name);
  p.machine = m;
  snprintf(p.measured_at, sizeof p.measured_at, "2026-12-07T00:00:00Z");
  snprintf(p.commit, sizeof p.commit, "abc123");
  p.n_knobs = 3;
  snprintf(p.knobs[0].name, 32, "threads");
  snprintf(p.knobs[0].value, 64, "1");
  snprintf(p.knobs[1].name, 32, "io_backend");
  snprintf(p.knobs[1].value, 64, "uring");
  snprintf(p.knobs[2].name, 32, "lookahead");
  snprintf(p.knobs[2].value, 64, "8");
  return p;
}

void Write(const std::string &path, const std::string &text) {
  std::ofstream(path) << text;
}

TEST(TuneProfileTest, SavedThenLoadedExactlyAndAppliedUnderTheCommandLine) {
  const std::string model = Nano();
  spill_info info;
  spill_err e = {};
  ASSERT_EQ(spill_info_read(model.c_str(), &info, &e), SPILL_OK) << e.msg;
  spill_tune_machine here;
  ASSERT_EQ(spill_tune_machine_probe(model.c_str(), &here, &e), SPILL_OK) << e.msg;
  EXPECT_GE(here.cpus, 1);
  EXPECT_GT(here.ram, 0u);
  const std::string path = TmpDir() + "/tp/sub/profile.json";  // directories made
  spill_tune_profile p = Profile(info, here);
  cJSON *ev = cJSON_Parse("[{\"axis\": \"threads\"}]");
  ASSERT_EQ(spill_tune_profile_save(path.c_str(), &p, ev, &e), SPILL_OK) << e.msg;
  cJSON_Delete(ev);
  spill_tune_profile q;
  ASSERT_EQ(spill_tune_profile_load(path.c_str(), &q, &e), SPILL_OK) << e.msg;
  EXPECT_EQ(q.container_id, p.container_id);
  EXPECT_STREQ(q.model_name, p.model_name);
  EXPECT_STREQ(q.machine.machine_id, here.machine_id);
  EXPECT_STREQ(q.machine.cpu, here.cpu);
  EXPECT_EQ(q.machine.cpus, here.cpus);
  EXPECT_EQ(q.machine.ram, here.ram);
  EXPECT_STREQ(q.machine.device, here.device);
  ASSERT_EQ(q.n_knobs, 3);
  EXPECT_STREQ(q.knobs[1].name, "io_backend");
  EXPECT_STREQ(q.knobs[1].value, "uring");
  ASSERT_EQ(spill_tune_profile_check(&q, path.c_str(), &info, &here, &e), SPILL_OK) << e.msg;

  // --threads 2 on the command line wins over the profile's threads=1
  char a0[] = "spill", a1[] = "--threads", a2[] = "2", a3[] = "--lookahead-depth", a4[] = "1";
  char *argv[] = {a0, a1, a2, a3, a4};
  spill_tune_argv av = {5, argv};
  EXPECT_EQ(spill_tune_skip_argv("threads", &av), 1);
  EXPECT_EQ(spill_tune_skip_argv("lookahead", &av), 0);  // --lookahead-depth is another knob
  spill_config cfg;
  spill_config_default(&cfg);
  cfg.threads = 2;
  char applied[256];
  ASSERT_EQ(spill_tune_profile_apply(&q, &cfg, spill_tune_skip_argv, &av, applied, sizeof applied,
                                     &e),
            SPILL_OK)
      << e.msg;
  EXPECT_STREQ(applied, "io_backend=uring lookahead=8");
  EXPECT_EQ(cfg.threads, 2);
  EXPECT_EQ(cfg.io_backend, SPILL_IO_URING);
  EXPECT_EQ(cfg.lookahead, 8);

  // spill_tune_for_model finds it by the model's default path
  setenv("SPILL_TUNE_DIR", (TmpDir() + "/tunedir").c_str(), 1);
  char def[4096], note[1024];
  ASSERT_EQ(spill_tune_profile_path(&info, def, sizeof def, &e), SPILL_OK) << e.msg;
  EXPECT_EQ(std::string(def).rfind(TmpDir() + "/tunedir/", 0), 0u) << def;
  spill_config_default(&cfg);
  ASSERT_EQ(spill_tune_for_model(model.c_str(), nullptr, &cfg, nullptr, nullptr, note, sizeof note,
                                 &e),
            SPILL_OK);
  EXPECT_STREQ(note, "");  // no profile yet: nothing changes
  EXPECT_EQ(cfg.lookahead, 0);
  ASSERT_EQ(spill_tune_profile_save(def, &p, nullptr, &e), SPILL_OK) << e.msg;
  ASSERT_EQ(spill_tune_for_model(model.c_str(), nullptr, &cfg, nullptr, nullptr, note, sizeof note,
                                 &e),
            SPILL_OK)
      << e.msg;
  EXPECT_NE(std::string(note).find("tuned: threads=1 io_backend=uring lookahead=8"),
            std::string::npos)
      << note;
  EXPECT_EQ(cfg.threads, 1);
  unsetenv("SPILL_TUNE_DIR");
}

TEST(TuneProfileTest, AnotherModelOrMachineIsRefusedByName) {
  const std::string model = Nano();
  spill_info info;
  spill_err e = {};
  ASSERT_EQ(spill_info_read(model.c_str(), &info, &e), SPILL_OK) << e.msg;
  spill_tune_machine here;
  ASSERT_EQ(spill_tune_machine_probe(model.c_str(), &here, &e), SPILL_OK) << e.msg;
  struct Case {
    const char *what;
    void (*mutate)(spill_tune_profile *);
  };
  const Case cases[] = {
      {"another model", [](spill_tune_profile *p) { p->container_id ^= 1; }},
      {"another model", [](spill_tune_profile *p) { p->model_name[0] ^= 1; }},
      {"machine-id differs", [](spill_tune_profile *p) { p->machine.machine_id[0] ^= 1; }},
      {"CPU differs", [](spill_tune_profile *p) { snprintf(p->machine.cpu, 128, "Other CPU"); }},
      {"CPU count differs", [](spill_tune_profile *p) { p->machine.cpus += 1; }},
      {"RAM differs", [](spill_tune_profile *p) { p->machine.ram += 4096; }},
      {"the model's device differs",
       [](spill_tune_profile *p) { snprintf(p->machine.device, 32, "9:99"); }},
  };
  for (const Case &c : cases) {
    spill_tune_profile p = Profile(info, here);
    c.mutate(&p);
    e = {};
    EXPECT_EQ(spill_tune_profile_check(&p, "F.json", &info, &here, &e), SPILL_E_CONFIG) << c.what;
    EXPECT_NE(std::string(e.msg).find(c.what), std::string::npos) << e.msg;
    EXPECT_NE(std::string(e.msg).find("F.json"), std::string::npos) << e.msg;
  }
  // through spill_tune_for_model: an error, and cfg untouched
  spill_tune_profile p = Profile(info, here);
  p.machine.cpus += 1;
  const std::string path = TmpDir() + "/other-machine.json";
  ASSERT_EQ(spill_tune_profile_save(path.c_str(), &p, nullptr, &e), SPILL_OK) << e.msg;
  spill_config cfg;
  spill_config_default(&cfg);
  char note[512];
  e = {};
  EXPECT_EQ(spill_tune_for_model(model.c_str(), path.c_str(), &cfg, nullptr, nullptr, note,
                                 sizeof note, &e),
            SPILL_E_CONFIG);
  EXPECT_NE(std::string(e.msg).find("re-run spill tune"), std::string::npos) << e.msg;
  EXPECT_EQ(cfg.lookahead, 0);
  // a named file that does not exist is an error, not "no profile"
  EXPECT_NE(spill_tune_for_model(model.c_str(), (TmpDir() + "/nope.json").c_str(), &cfg, nullptr,
                                 nullptr, note, sizeof note, &e),
            SPILL_OK);
}

TEST(TuneProfileTest, MalformedFilesAreRefusedNamingTheField) {
  const std::string ok =
      R"({"version": 1, "model": {"container_id": "00000000000000ff", "name": "m"},
          "machine": {"machine_id": "x", "cpu": "c", "cpus": 2, "ram": 1024, "device": "1:2"},
          "measured_at": "t", "commit": "c", "knobs": {"threads": "2"}})";
  const std::string path = TmpDir() + "/malformed.json";
  Write(path, ok);
  spill_tune_profile p;
  spill_err e = {};
  ASSERT_EQ(spill_tune_profile_load(path.c_str(), &p, &e), SPILL_OK) << e.msg;
  EXPECT_EQ(p.container_id, 0xffu);
  struct Case {
    const char *from, *to, *expect;
  };
  const Case cases[] = {
      {R"("version": 1)", R"("version": 2)", "version 2"},
      {R"("threads": "2")", R"("threadz": "2")", "profile.knobs.threadz: not an engine knob"},
      {R"("threads": "2")", R"("threads": "many")", "profile.knobs.threads"},
      {R"("threads": "2")", R"("temperature": "0.5")", "not an engine knob"},
      {R"("00000000000000ff")", R"("ff")", "container_id"},
      {R"("00000000000000ff")", R"("zz000000000000ff")", "container_id"},
      {R"("cpus": 2)", R"("cpus": 0)", "cpus"},
      {R"("cpus": 2)", R"("cpus": "2")", "cpus"},
      {R"("device": "1:2")", R"("device": "")", "device"},
      {R"("commit": "c")", R"("commit": "c", "extra": 1)", "extra"},
      {R"("commit": "c")", R"("commit": "c", "commit": "d")", "duplicate key"},
  };
  for (const Case &c : cases) {
    std::string t = ok;
    size_t at = t.find(c.from);
    ASSERT_NE(at, std::string::npos) << c.from;
    t.replace(at, strlen(c.from), c.to);
    Write(path, t);
    e = {};
    EXPECT_EQ(spill_tune_profile_load(path.c_str(), &p, &e), SPILL_E_CONFIG) << c.to;
    EXPECT_NE(std::string(e.msg).find(c.expect), std::string::npos) << c.to << ": " << e.msg;
    EXPECT_NE(std::string(e.msg).find(path), std::string::npos) << e.msg;
  }
  Write(path, "not json");
  EXPECT_EQ(spill_tune_profile_load(path.c_str(), &p, &e), SPILL_E_CONFIG);
}

}  // namespace
