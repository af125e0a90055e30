/* engine/spill_routing.c: router traces as a routing source (forced routing,
 * docs/MODEL.md "Forced routing"): reading a trace for replay and checking its
 * shape against a model (research/gen shapes a synthetic model for a trace
 * through spill_routing_trace_inspect).
 *
 * A trace records no expert count, so a trace's experts per layer is its
 * highest id + 1; a model replays a trace only if its MoE layers, experts per
 * layer and top-k equal the trace's. Every difference is reported at once,
 * with both values, and when the trace has ids beyond the model's experts the
 * first offending line is named (a second parse with the model's count).
 * The trace itself is untrusted input and is validated by engine/trace.
 * Depends on engine/format and engine/trace only (the experiment-config
 * parser links it, also in the fuzz build, fuzz/build.sh).
 */
#include <limits.h>
#include <stdio.h>
#include <string.h>

#include "engine/format/container.h"
#include "engine/spill.h"
#include "engine/spill_routing_internal.h"
#include "engine/trace/router_trace.h"

/* Appends ("; " and) text to buf (n bytes), truncating. */
static void add_reason(char *buf, size_t n, const char *text) {
  size_t used = strlen(buf);
  if (used && used + 2 < n) {
    memcpy(buf + used, "; ", 2);
    used += 2;
  }
  size_t len = strlen(text);
  if (used + 1 >= n) return;
  if (len > n - 1 - used) len = n - 1 - used;
  memcpy(buf + used, text, len);
  buf[used + len] = 0;
}

int spill_routing_trace_check_shape(const char *file, const spill_trace *t, int n_moe,
                                    int n_experts, int top_k, spill_err *e) {
  char why[SPILL_ERR_MSG_MAX] = "", part[160];
  if ((int)t->n_layers != n_moe) {
    snprintf(part, sizeof part, "%u MoE layers, model has %d", t->n_layers, n_moe);
    add_reason(why, sizeof why, part);
  }
  if ((int)t->n_experts != n_experts) {
    snprintf(part, sizeof part, "%u experts per layer (highest id %u + 1), model has %d",
             t->n_experts, t->n_experts - 1, n_experts);
    add_reason(why, sizeof why, part);
  }
  if ((int)t->top_k != top_k) {
    snprintf(part, sizeof part, "top-%u, model has top-%d", t->top_k, top_k);
    add_reason(why, sizeof why, part);
  }
  if (!why[0]) return SPILL_OK;
  if ((int)t->n_experts > n_experts && n_experts > 0) {
    /* name the first line with an id the model does not have */
    spill_trace_read_opts o = {(uint32_t)n_experts, NULL};
    spill_trace t2;
    spill_err e2 = {0};
    if (spill_trace_read_file(file, &o, &t2, &e2) < 0) {
      char line[SPILL_ERR_MSG_MAX + 32];
      snprintf(line, sizeof line, "first id beyond the model: %s", e2.msg);
      add_reason(why, sizeof why, line);
    }
    spill_trace_free(&t2);
  }
  return spill_err_set(e, SPILL_E_TRACE, "routing trace %s: %s", file, why);
}

int spill_routing_trace_load(const char *file, const spill_arch *a, spill_trace *out,
                             spill_err *e) {
  SPILL_TRY(spill_trace_read_file(file, NULL, out, e));
  int rc = SPILL_OK;
  if (out->n_tokens > (uint32_t)INT_MAX)
    rc = spill_err_set(e, SPILL_E_TRACE, "routing trace %s: %u tokens, more than %d", file,
                       out->n_tokens, INT_MAX);
  const int n_moe = spill_arch_n_moe(a);
  if (rc == SPILL_OK && n_moe == 0)
    rc = spill_err_set(e, SPILL_E_TRACE, "routing trace %s: the model has no MoE layer", file);
  if (rc == SPILL_OK)
    rc = spill_routing_trace_check_shape(file, out, n_moe, a->moe.n_experts, a->moe.top_k, e);
  if (rc < 0) spill_trace_free(out);
  return rc;
}

int spill_routing_trace_inspect(const char *file, const char *model_dir,
                                spill_routing_trace_info *info, spill_err *e) {
  SPILL_FAIL_IF(e, !file || !*file, SPILL_E_INVALID_ARG, "routing trace: no file");
  spill_trace t;
  SPILL_TRY(spill_trace_read_file(file, NULL, &t, e));
  int rc = SPILL_OK;
  if (t.n_tokens > (uint32_t)INT_MAX)
    rc = spill_err_set(e, SPILL_E_TRACE, "routing trace %s: %u tokens, more than %d", file,
                       t.n_tokens, INT_MAX);
  if (rc == SPILL_OK && info) {
    memset(info, 0, sizeof *info);
    info->n_tokens = (int)t.n_tokens;
    info->n_layers = (int)t.n_layers;
    info->n_experts = (int)t.n_experts;
    info->top_k = (int)t.top_k;
    info->router_format = t.format == SPILL_TRACE_ROUTER;
  }
  if (rc == SPILL_OK && model_dir) {
    spill_container c;
    rc = spill_container_open(model_dir, &c, e);
    if (rc == SPILL_OK) {
      const spill_arch *a = &c.m.arch;
      if (spill_arch_n_moe(a) == 0)
        rc = spill_err_set(e, SPILL_E_TRACE, "routing trace %s: model %s has no MoE layer", file,
                           model_dir);
      else
        rc = spill_routing_trace_check_shape(file, &t, spill_arch_n_moe(a), a->moe.n_experts,
                                             a->moe.top_k, e);
      spill_container_close(&c);
    }
  }
  spill_trace_free(&t);
  return rc;
}
