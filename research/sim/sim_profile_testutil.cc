// research/sim/sim_profile_testutil.cc: see sim_profile_testutil.h.
#include "research/sim/sim_profile_testutil.h"

#include <cjson/cJSON.h>

#include <fstream>

namespace spill_sim_test {

DecodeProfile ReadDecodeProfile(const std::string &path) {
  DecodeProfile p;
  std::ifstream in(path);
  std::string line;
  while (std::getline(in, line)) {
    cJSON *o = cJSON_Parse(line.c_str());
    if (!o) continue;
    const cJSON *ph = cJSON_GetObjectItemCaseSensitive(o, "phase");
    const cJSON *cm = cJSON_GetObjectItemCaseSensitive(o, "compute_ms");
    if (cJSON_IsString(ph) && std::string(ph->valuestring) == "decode" && cJSON_IsObject(cm)) {
      auto num = [](const cJSON *obj, const char *k) {
        const cJSON *v = cJSON_GetObjectItemCaseSensitive(obj, k);
        return cJSON_IsNumber(v) ? v->valuedouble : 0.0;
      };
      p.expert_ms += num(cm, "expert_matmul");
      p.layer_ms += num(cm, "attention") + num(cm, "router") + num(cm, "table_build") +
                    num(cm, "other");
      p.token_ms += num(cm, "lm_head");
      p.wall_ms += num(o, "wall_ms");
      p.reads += (uint64_t)num(o, "reads");
      p.rows++;
    }
    cJSON_Delete(o);
  }
  if (p.rows) {
    p.expert_ms /= p.rows;
    p.layer_ms /= p.rows;
    p.token_ms /= p.rows;
    p.wall_ms /= p.rows;
  }
  return p;
}

}  // namespace spill_sim_test
