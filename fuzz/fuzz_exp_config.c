/* fuzz/fuzz_exp_config.c: libFuzzer target for the experiment-config parser
 * (spill_exp_config_parse, harness/exp_config.c), which validates engine
 * knobs through spill_config_set.
 *
 * Configs are shared files: any bytes must give SPILL_OK or SPILL_E_CONFIG
 * with a message, never a crash. A config that parses is also resolved to
 * JSON, its cells and engine configs built, and the resolved JSON must parse
 * again. The text is NUL-terminated (the parser's contract). The working
 * directory is a fresh temporary one so prompt_file paths resolve to nothing.
 */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "harness/exp_config.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  char *text = malloc(size + 1);
  if (!text) return 0;
  memcpy(text, data, size);
  text[size] = 0;
  spill_exp_config cfg;
  spill_err e = {0};
  memset(&cfg, 0, sizeof cfg);
  int rc = spill_exp_config_parse(text, "fuzz.json", &cfg, &e);
  if (rc == SPILL_OK) {
    int n = spill_exp_config_n_cells(&cfg);
    for (int c = 0; c < n && c < 4; c++) {
      const char *vals[SPILL_EXP_MAX_AXES];
      spill_exp_config_cell(&cfg, c, vals);
      for (int a = 0; a < cfg.n_arms; a++) {
        spill_config sc;
        spill_err e2 = {0};
        (void)spill_exp_config_engine(&cfg, c, a, &sc, &e2);
      }
    }
    char *json = spill_exp_config_resolved_json(&cfg);
    if (json) {
      spill_exp_config cfg2;
      memset(&cfg2, 0, sizeof cfg2);
      spill_err e3 = {0};
      if (spill_exp_config_parse(json, "resolved.json", &cfg2, &e3) == SPILL_OK)
        spill_exp_config_free(&cfg2);
      free(json);
    }
    spill_exp_config_free(&cfg);
  } else if (rc != SPILL_E_CONFIG && rc != SPILL_E_NOMEM && rc != SPILL_E_IO) {
    abort(); /* the contract: config errors are SPILL_E_CONFIG */
  }
  free(text);
  return 0;
}
