/* engine/spill_h_test.c: the public header stands alone. This file is built
 * against //engine:api only (spill.h and engine/base's status.h): if spill.h
 * included an internal header (it used to include engine/plan/ram_plan.h and
 * through it the container API), the sandboxed compile fails. It also checks
 * that the API's own types are complete. */
#include "engine/spill.h"

#include <stdio.h>

int main(void) {
  spill_plan p = {0};
  spill_config c = {0};
  spill_sampling s = {0};
  spill_knob k = {0};
  p.cache_slots = 1;
  c.ctx = 1;
  s.top_k = 1;
  k.live = 1;
  if (!(sizeof p && sizeof c && sizeof s && sizeof k && p.cache_slots + c.ctx + s.top_k + k.live == 4)) {
    fprintf(stderr, "spill.h types incomplete\n");
    return 1;
  }
  printf("engine/spill.h compiles alone\n");
  return 0;
}
