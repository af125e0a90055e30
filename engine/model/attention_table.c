/* engine/model/attention_table.c: the attention-kind table, one row per
 * spill_attn_kind (each row lives beside its kind's maths in
 * attention_<kind>.c: arch checks, state size and layout, scratch widths,
 * tensor loading, the per-token run). Everything that differs between
 * attention kinds goes through this table; nothing else in engine/model
 * switches on the kind. Above the three attention files, below
 * model_memory.c, forward.c and model.c.
 */
#include "engine/model/model_internal.h"

static const spill_attn_ops *const kinds[SPILL_ATTN_KINDS] = {
    [SPILL_ATTN_GQA] = &spill_attn_gqa_ops,
    [SPILL_ATTN_MLA] = &spill_attn_mla_ops,
    [SPILL_ATTN_KDA] = &spill_attn_kda_ops,
    [SPILL_ATTN_GDN] = &spill_attn_gdn_ops,
};

const spill_attn_ops *spill_attn_kind_ops(int kind) {
  return kind >= 0 && kind < SPILL_ATTN_KINDS ? kinds[kind] : NULL;
}
