/* fuzz/fuzz_jinja.c: libFuzzer target for the Jinja chat-template engine
 * (engine/tok jinja_parse.c, jinja_eval.c, jinja_value.c) under its render
 * budget. The input is a template; if it holds a NUL byte, the bytes after
 * the first NUL are the context as JSON (else a fixed conversation with a
 * system prompt, tools and add_generation_prompt). Properties:
 *   - it renders, or fails with a named status and a detail message (no
 *     crash, no stack overflow at the default depth limits, no leak);
 *   - a failure returns no output, a success a NUL-terminated one no longer
 *     than the output budget;
 *   - rendering is deterministic (twice, same bytes; templates calling
 *     strftime_now excepted).
 * The steps and memory budgets are smaller than the defaults so an input
 * runs in milliseconds; the depth limits are the defaults, so the C stack
 * at the deepest allowed nesting is what the sanitizers see. Seeds
 * (fuzz/corpus/jinja) are the real templates of engine/tok/testdata/chat
 * (provenance in its SOURCES.md) plus small hostile ones.
 */
#define _GNU_SOURCE
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "engine/tok/spill_tok.h"

static const char k_context[] =
    "{\"messages\":[{\"role\":\"system\",\"content\":\"Be brief.\"},"
    "{\"role\":\"user\",\"content\":\"What is 2+2? <think>\"},"
    "{\"role\":\"assistant\",\"content\":\"<think>easy</think>4\",\"tool_calls\":"
    "[{\"type\":\"function\",\"function\":{\"name\":\"add\",\"arguments\":{\"a\":2,\"b\":2}}}]},"
    "{\"role\":\"tool\",\"content\":\"4\"},{\"role\":\"user\",\"content\":\"\\u00e9t\\u00e9 ok\"}],"
    "\"tools\":[{\"type\":\"function\",\"function\":{\"name\":\"add\",\"description\":\"adds\","
    "\"parameters\":{\"type\":\"object\",\"properties\":{\"a\":{\"type\":\"integer\"}}}}}],"
    "\"add_generation_prompt\":true,\"bos_token\":\"<s>\",\"eos_token\":\"</s>\"}";

static int render(const char *tmpl, const char *ctx, const spill_chat_budget *b, char **out,
                  spill_err *e) {
  *out = NULL;
  int rc = spill_chat_render_json_budget(tmpl, ctx, b, out, e);
  if (rc == SPILL_OK) {
    if (!*out || strlen(*out) > b->max_output_bytes) abort();
  } else {
    if (*out) abort();
    if (!strcmp(spill_status_name(rc), "SPILL_E_UNKNOWN") || e->msg[0] == 0) abort();
  }
  return rc;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  char *buf = malloc(size + 1);
  if (!buf) return 0;
  memcpy(buf, data, size);
  buf[size] = 0;
  const char *tmpl = buf, *ctx = k_context;
  size_t tl = strlen(buf);
  if (tl < size) ctx = buf + tl + 1; /* template NUL context */
  spill_chat_budget b;
  spill_chat_budget_default(&b);
  b.max_steps = 200000;
  b.max_memory_bytes = (size_t)32 << 20;
  b.max_output_bytes = (size_t)1 << 20;
  char *a = NULL, *c = NULL;
  spill_err e1 = {0}, e2 = {0};
  int r1 = render(tmpl, ctx, &b, &a, &e1);
  if (!strstr(tmpl, "strftime_now")) {
    int r2 = render(tmpl, ctx, &b, &c, &e2);
    if (r1 != r2) abort();
    if (r1 == SPILL_OK && strcmp(a, c) != 0) abort();
  }
  free(a);
  free(c);
  free(buf);
  return 0;
}
