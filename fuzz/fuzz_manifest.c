/* fuzz/fuzz_manifest.c: libFuzzer target for the container manifest parser
 * (spill_manifest_parse, engine/format/manifest_parse.c).
 *
 * The input is manifest JSON from an untrusted container. Whatever the bytes,
 * the parser must return a status (never crash, read out of bounds, leak or
 * hit undefined behaviour); on success the parsed manifest must serialise
 * again and the serialised form must parse (a round trip), and it is freed.
 * Built outside Bazel with clang's -fsanitize=fuzzer,address,undefined by
 * fuzz/build.sh; ./lab fuzz runs it.
 */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "engine/format/container.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  spill_manifest m;
  spill_err e = {0};
  memset(&m, 0, sizeof m);
  if (spill_manifest_parse((const char *)data, size, "fuzz.json", &m, &e) == SPILL_OK) {
    char *json = NULL;
    if (spill_manifest_to_json(&m, &json, &e) == SPILL_OK) {
      spill_manifest m2;
      memset(&m2, 0, sizeof m2);
      /* What the writer serialises from a valid manifest must parse again. */
      if (spill_manifest_parse(json, strlen(json), "roundtrip.json", &m2, &e) != SPILL_OK)
        abort();
      spill_manifest_free(&m2);
      free(json);
    }
    (void)spill_manifest_find(&m, "tok_embd");
    spill_manifest_free(&m);
  }
  return 0;
}
