/* engine/base/dtype_traits.c: the dtype traits table (dtype_traits.h) and
 * what is derived from it: names, parsing, row layouts. One row per dtype;
 * the static assertion below fails the build if a dtype has no row.
 */
#include "engine/base/dtype_traits.h"

#include <string.h>

#include "engine/base/status.h"

static const spill_dtype_traits kTraits[] = {
    [SPILL_DT_F32] = {"f32", 1, 4, SPILL_DT_SCALES_NONE, 0},
    [SPILL_DT_F16] = {"f16", 1, 2, SPILL_DT_SCALES_NONE, 0},
    [SPILL_DT_BF16] = {"bf16", 1, 2, SPILL_DT_SCALES_NONE, 0},
    [SPILL_DT_Q8] = {"q8", 1, 1, SPILL_DT_SCALES_GROUP_F16, 0},
    [SPILL_DT_Q4] = {"q4", 2, 1, SPILL_DT_SCALES_GROUP_F16, 0},
    [SPILL_DT_RVQ3] = {"rvq3", 8, 3, SPILL_DT_SCALES_ROW_F16, 1},
    [SPILL_DT_Q4_K] = {"q4_k", 256, 144, SPILL_DT_SCALES_IN_BLOCK, 0},
    [SPILL_DT_Q5_K] = {"q5_k", 256, 176, SPILL_DT_SCALES_IN_BLOCK, 0},
    [SPILL_DT_Q6_K] = {"q6_k", 256, 210, SPILL_DT_SCALES_IN_BLOCK, 0},
    [SPILL_DT_MXFP4] = {"mxfp4", 32, 17, SPILL_DT_SCALES_IN_BLOCK, 0, 1},
    [SPILL_DT_Q5_0] = {"q5_0", 32, 22, SPILL_DT_SCALES_IN_BLOCK, 0, 0},
    [SPILL_DT_Q5_1] = {"q5_1", 32, 24, SPILL_DT_SCALES_IN_BLOCK, 0, 0},
};

_Static_assert(sizeof kTraits / sizeof kTraits[0] == SPILL_DT_COUNT,
               "every spill_dtype needs a row in kTraits");

const spill_dtype_traits *spill_dtype_traits_of(int dt) {
  if (dt < 0 || dt >= SPILL_DT_COUNT || !kTraits[dt].name) return NULL;
  return &kTraits[dt];
}

const char *spill_dtype_name(spill_dtype dt) {
  const spill_dtype_traits *t = spill_dtype_traits_of((int)dt);
  return t ? t->name : "?";
}

int spill_dtype_parse(const char *name, spill_dtype *out) {
  if (!name) return SPILL_E_FORMAT;
  for (int i = 0; i < SPILL_DT_COUNT; i++) {
    if (kTraits[i].name && strcmp(name, kTraits[i].name) == 0) {
      *out = (spill_dtype)i;
      return SPILL_OK;
    }
  }
  return SPILL_E_FORMAT;
}

int spill_dtype_row_layout(int dt, uint64_t cols, uint32_t group, uint64_t *row_bytes,
                           uint64_t *row_scales) {
  const spill_dtype_traits *t = spill_dtype_traits_of(dt);
  if (!t || cols % t->block_elems != 0) return 0;
  uint64_t s = 0;
  if (t->scales == SPILL_DT_SCALES_GROUP_F16) {
    if (group == 0 || group % t->block_elems != 0 || cols % group != 0) return 0;
    s = cols / group;
  } else if (t->scales == SPILL_DT_SCALES_ROW_F16) {
    s = 1;
  }
  if (cols / t->block_elems > UINT64_MAX / t->block_bytes) return 0;
  *row_bytes = cols / t->block_elems * t->block_bytes;
  *row_scales = s;
  return 1;
}
