/* engine/import/arch_registry.c: the table of the architectures `spill
 * import` reads, one row each: its name, its Hugging Face model_type(s), its
 * GGUF general.architecture and the plan functions of its family file
 * (arch_*.c). imp_plan_build picks the row of the source's model_type or
 * general.architecture; the refusals of another one list the table's
 * names, and spill_import_arch_at() hands the rows to `spill import
 * --architectures` (docs/MODEL.md's list is checked against it).
 *
 * A new architecture is a row here plus its family file (arch_<family>.c:
 * config / metadata reading and the tensor plan, with import_plan.c's
 * helpers), and its model file only if it brings a new block. Calls go from
 * here to the family files and import_plan.c, never back.
 */
#define _GNU_SOURCE
#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/base/json_util.h"
#include "engine/base/safe_file.h"
#include "engine/import/import_internal.h"

const imp_arch_row imp_arch_rows[] = {
    {{"Qwen3-MoE", {"qwen3_moe"}, "qwen3moe", NULL, NULL}, imp_gqa_moe_plan_hf, imp_gqa_moe_plan_gguf, IMP_GQA_QWEN3MOE},
    {{"OLMoE", {"olmoe"}, "olmoe", NULL, NULL}, imp_gqa_moe_plan_hf, imp_gqa_moe_plan_gguf, IMP_GQA_OLMOE},
    {{"Mixtral", {"mixtral"}, "llama", "with experts", NULL}, imp_gqa_moe_plan_hf, imp_gqa_moe_plan_gguf,
     IMP_GQA_MIXTRAL},
    {{"DeepSeek-V2/V3, Kimi-K2", {"deepseek_v2", "deepseek_v3", "kimi_k2"}, "deepseek2", NULL, NULL},
     imp_deepseek_plan_hf, imp_deepseek_plan_gguf, 0},
    /* GLM-4.7-Flash's checkpoint: llama.cpp converts it as a DeepSeek-V2
     * (deepseek2 with nextn_predict_layers, which the row above reads) */
    {{"GLM-4.7-Flash", {"glm4_moe_lite"}, "deepseek2", "(the DeepSeek row)", NULL}, imp_deepseek_plan_hf, NULL, 0},
    {{"Kimi-Linear", {"kimi_linear"}, "kimi-linear", NULL, NULL}, imp_kimi_linear_plan_hf, imp_kimi_linear_plan_gguf,
     0},
    {{"Kimi K3", {NULL}, "kimi-k3", NULL, "KimiK3ForConditionalGeneration"}, imp_kimi_k3_plan_hf,
     imp_kimi_k3_plan_gguf, 0},
    {{"GLM-4.5/4.6/4.7", {"glm4_moe"}, "glm4moe", NULL, NULL}, imp_glm4moe_plan_hf, imp_glm4moe_plan_gguf, 0},
    {{"Qwen3.5-MoE", {"qwen3_5_moe", "qwen3_5_moe_text"}, "qwen35moe", NULL, NULL}, imp_qwen35moe_plan_hf,
     imp_qwen35moe_plan_gguf, 0},
    {{"gpt-oss", {"gpt_oss"}, "gpt-oss", NULL, NULL}, imp_gptoss_plan_hf, imp_gptoss_plan_gguf, 0},
};
const int imp_n_arch_rows = (int)(sizeof imp_arch_rows / sizeof imp_arch_rows[0]);

int spill_import_n_archs(void) { return imp_n_arch_rows; }

const spill_import_arch *spill_import_arch_at(int i) {
  return i >= 0 && i < imp_n_arch_rows ? &imp_arch_rows[i].info : NULL;
}

/* "a, b, c" of the table's HF model_types (gguf = 0) or GGUF names with
 * their notes (gguf = 1), into buf. */
static const char *supported(int gguf, char *buf, size_t n) {
  buf[0] = 0;
  for (int i = 0; i < imp_n_arch_rows; i++) {
    const spill_import_arch *a = &imp_arch_rows[i].info;
    if (gguf && a->gguf_arch && imp_arch_rows[i].plan_gguf) {
      snprintf(buf + strlen(buf), n - strlen(buf), "%s%s%s%s", buf[0] ? ", " : "", a->gguf_arch,
               a->gguf_note ? " " : "", a->gguf_note ? a->gguf_note : "");
    } else if (!gguf && imp_arch_rows[i].plan_hf) {
      for (int k = 0; k < 4 && a->hf_model_type[k]; k++)
        snprintf(buf + strlen(buf), n - strlen(buf), "%s%s", buf[0] ? ", " : "", a->hf_model_type[k]);
    }
  }
  return buf;
}

static const imp_arch_row *find_hf(const char *model_type) {
  for (int i = 0; i < imp_n_arch_rows; i++)
    for (int k = 0; k < 4 && imp_arch_rows[i].info.hf_model_type[k]; k++)
      if (imp_arch_rows[i].plan_hf && !strcmp(imp_arch_rows[i].info.hf_model_type[k], model_type))
        return &imp_arch_rows[i];
  return NULL;
}

/* The row claiming config.json's architectures[0] (a class name), or NULL. */
static const imp_arch_row *find_hf_class(const cJSON *root) {
  const cJSON *a = cJSON_GetObjectItemCaseSensitive(root, "architectures");
  const cJSON *c = cJSON_IsArray(a) ? a->child : NULL;
  if (!cJSON_IsString(c)) return NULL;
  for (int i = 0; i < imp_n_arch_rows; i++)
    if (imp_arch_rows[i].plan_hf && imp_arch_rows[i].info.hf_class &&
        !strcmp(imp_arch_rows[i].info.hf_class, c->valuestring))
      return &imp_arch_rows[i];
  return NULL;
}

static const imp_arch_row *find_gguf(const char *arch) {
  for (int i = 0; i < imp_n_arch_rows; i++)
    if (imp_arch_rows[i].plan_gguf && imp_arch_rows[i].info.gguf_arch &&
        !strcmp(imp_arch_rows[i].info.gguf_arch, arch))
      return &imp_arch_rows[i];
  return NULL;
}

/* config.json of dir: its model_type picks the row. */
static int plan_hf(imp_src *s, const char *dir, imp_plan *p, spill_err *e) {
  char path[4200], *json = NULL, list[512];
  size_t len = 0;
  snprintf(path, sizeof path, "%s/config.json", dir);
  SPILL_TRY(spill_read_file(path, 16u << 20, &json, &len, e));
  /* one reading layer: num_experts_per_tok twice is refused by name
   * (cJSON would keep the first, transformers the last) */
  cJSON *root = NULL;
  int prc = spill_json_parse(json, len, path, SPILL_E_FORMAT, &root, e);
  free(json);
  SPILL_TRY(prc);
  if (!cJSON_IsObject(root)) {
    cJSON_Delete(root);
    return spill_err_set(e, SPILL_E_FORMAT, "%s: not a JSON object", path);
  }
  const char *mt = NULL;
  const imp_arch_row *row = find_hf_class(root);
  int rc = SPILL_OK;
  if (row) { /* the class decides (Kimi K3's text_config says kimi_linear) */
    snprintf(s->arch_name, sizeof s->arch_name, "%s", row->info.hf_class);
  } else if ((rc = spill_json_str(root, "model_type", "config.json", 31, &mt, SPILL_E_FORMAT, e)) == SPILL_OK) {
    snprintf(s->arch_name, sizeof s->arch_name, "%s", mt);
    row = find_hf(mt);
    if (!row)
      rc = spill_err_set(e, SPILL_E_UNSUPPORTED, "config.json: model_type \"%s\" is not supported (%s)", mt,
                         supported(0, list, sizeof list));
  }
  if (rc == SPILL_OK) rc = row->plan_hf(s, dir, root, row->variant, p, e);
  cJSON_Delete(root);
  return rc;
}

/* GGUF: general.architecture picks the row. */
static int plan_gguf(imp_src *s, imp_plan *p, spill_err *e) {
  const char *an;
  char list[512];
  SPILL_TRY(spill_gguf_get_str(&s->gg, "general.architecture", &an, NULL, e));
  snprintf(s->arch_name, sizeof s->arch_name, "%s", an);
  const imp_arch_row *row = find_gguf(an);
  if (!row)
    return spill_err_set(e, SPILL_E_UNSUPPORTED, "GGUF general.architecture \"%.40s\" is not supported (%s)", an,
                         supported(1, list, sizeof list));
  return row->plan_gguf(s, row->variant, p, e);
}

int imp_plan_build(imp_src *s, imp_plan *p, spill_err *e) {
  memset(p, 0, sizeof *p);
  /* the directory of the checkpoint */
  char dir[4096];
  snprintf(dir, sizeof dir, "%s", !s->is_gguf && s->st.n_files ? s->st.paths[0] : ".");
  char *slash = strrchr(dir, '/');
  if (slash) *slash = 0; else snprintf(dir, sizeof dir, ".");
  const int rc = s->is_gguf ? plan_gguf(s, p, e) : plan_hf(s, dir, p, e);
  if (rc != SPILL_OK) imp_plan_free(p);
  return rc;
}
