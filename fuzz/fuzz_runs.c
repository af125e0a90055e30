/* fuzz/fuzz_runs.c: libFuzzer target for the runs.jsonl reader shared by
 * `spill report`, `spill compare` and `spill exp --resume`
 * (harness/exp_rows.c) and the summary/tables built from its rows
 * (spill_exp_report_summary, harness/exp_report.c).
 *
 * The input is a runs.jsonl file for a fixed config (2 sweep cells x 2 arms
 * x 3 repeats, with a hypothesis), split into lines the way
 * spill_exp_read_lines does (a last line without '\n' is a torn write and
 * dropped). Any bytes must give SPILL_OK or SPILL_E_FORMAT with a message,
 * never a crash, and the two readers must agree.
 */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "harness/exp_config.h"
#include "harness/exp_report.h"
#include "harness/exp_rows.h"

static const char kConfig[] =
    "{\"name\": \"fuzz\", \"model\": \"m\", \"workload\": {\"prompt\": \"x\", \"decode_tokens\": 1},"
    " \"sweep\": {\"lookahead\": [0, 2]},"
    " \"arms\": [{\"name\": \"A\"}, {\"name\": \"B\", \"set\": {\"verify\": true}}],"
    " \"repeats\": 3, \"hypothesis\": {\"claim\": \"B is faster\", \"metric\": \"decode_tok_per_s\","
    " \"direction\": \"increase\", \"min_effect\": 0.05, \"alpha\": 0.05, \"control\": \"A\","
    " \"treatment\": \"B\"}}";

static spill_exp_config g_cfg;
static int g_ready;

int LLVMFuzzerInitialize(int *argc, char ***argv) {
  (void)argc, (void)argv;
  spill_err e = {0};
  if (spill_exp_config_parse(kConfig, "fuzz.json", &g_cfg, &e) != SPILL_OK) abort();
  g_ready = 1;
  return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (!g_ready) LLVMFuzzerInitialize(NULL, NULL);
  /* Split into complete lines (NUL-terminated copies). */
  int n = 0;
  for (size_t i = 0; i < size; i++) n += data[i] == '\n';
  char **lines = calloc((size_t)n + 1, sizeof *lines);
  if (!lines) return 0;
  size_t start = 0;
  int k = 0;
  for (size_t i = 0; i < size && k < n; i++)
    if (data[i] == '\n') {
      lines[k] = malloc(i - start + 1);
      if (!lines[k]) break;
      memcpy(lines[k], data + start, i - start);
      lines[k][i - start] = 0;
      k++;
      start = i + 1;
    }
  spill_exp_rows rows;
  spill_err e = {0};
  int rc = spill_exp_rows_parse(&g_cfg, "runs.jsonl", lines, k, &rows, &e);
  if (rc != SPILL_OK && rc != SPILL_E_FORMAT && rc != SPILL_E_NOMEM) abort();
  if (rc == SPILL_E_FORMAT && !e.msg[0]) abort();
  if (rc == SPILL_OK) spill_exp_rows_free(&rows);
  char *json = NULL;
  spill_err e2 = {0};
  int rc2 = spill_exp_report_summary(&g_cfg, lines, k, &json, &e2);
  if (rc != SPILL_E_NOMEM && rc2 != SPILL_E_NOMEM && rc2 != rc) abort(); /* readers agree */
  free(json);
  for (int i = 0; i < k; i++) free(lines[i]);
  free(lines);
  return 0;
}
