/* engine/spill_routing_internal.h: forced routing helpers shared by
 * spill_routing.c and spill_engine.c (not part of the public API). */
#ifndef SPILL_ROUTING_INTERNAL_H
#define SPILL_ROUTING_INTERNAL_H

#include "engine/base/status.h"
#include "engine/format/container.h"
#include "engine/trace/router_trace.h"

/* SPILL_E_TRACE naming every difference between the trace t (read from
 * file) and a model of n_moe MoE layers, n_experts experts, top_k. */
int spill_routing_trace_check_shape(const char *file, const spill_trace *t, int n_moe,
                                    int n_experts, int top_k, spill_err *e);
/* Reads file and checks it against arch; on success *out is owned by the
 * caller (spill_trace_free); its ids table is (n_tokens, n_layers, top_k),
 * what spill_model_set_forced_routing takes. */
int spill_routing_trace_load(const char *file, const spill_arch *a, spill_trace *out,
                             spill_err *e);

#endif
