/* fuzz/fuzz_record.c: libFuzzer target for expert-record and bank-header
 * validation (spill_record_check, spill_bank_header_check) on arbitrary
 * bytes, against one fixed small manifest (fuzz/data/nano_manifest.json: the
 * nano preset: 3 MoE banks of 16 rvq3 experts of 4 KiB).
 *
 * Input layout: byte 0 selects the check (bit 0: record or bank header;
 * bit 1: verify on), byte 1 the bank, byte 2 the expert id (may be out of
 * range on purpose); the rest is the record or header page as read from
 * disk, of any length. Every call must return a status; a successful record
 * check must mean the header fields really match (checked here).
 */
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/format/container.h"

#ifndef SPILL_FUZZ_MANIFEST
#define SPILL_FUZZ_MANIFEST "fuzz/data/nano_manifest.json"
#endif

static spill_manifest g_m;

int LLVMFuzzerInitialize(int *argc, char ***argv) {
  (void)argc;
  (void)argv;
  const char *path = getenv("SPILL_FUZZ_MANIFEST");
  if (!path) path = SPILL_FUZZ_MANIFEST;
  FILE *f = fopen(path, "rb");
  if (!f) {
    fprintf(stderr, "fuzz_record: cannot open %s\n", path);
    exit(2);
  }
  static char buf[1 << 20];
  size_t n = fread(buf, 1, sizeof buf, f);
  fclose(f);
  spill_err e = {0};
  if (spill_manifest_parse(buf, n, path, &g_m, &e) != SPILL_OK || g_m.n_banks < 1) {
    fprintf(stderr, "fuzz_record: bad manifest %s: %s\n", path, e.msg);
    exit(2);
  }
  return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (size < 3) return 0;
  int mode = data[0];
  const spill_bank_info *b = &g_m.banks[data[1] % g_m.n_banks];
  uint32_t expert = data[2];
  const uint8_t *rec = data + 3;
  size_t len = size - 3;
  /* Copy into an exact-size heap buffer so ASan sees any overread. */
  uint8_t *buf = malloc(len ? len : 1);
  if (!buf) return 0;
  memcpy(buf, rec, len);
  spill_err e = {0};
  if (mode & 1) {
    (void)spill_bank_header_check(&g_m, b, buf, len, &e);
    if (len >= SPILL_BANK_HEADER_BYTES) {
      spill_bank_header h;
      spill_bank_header_decode(buf, &h);
    }
  } else {
    int rc = spill_record_check(&g_m, b->file, b->layer, expert, buf, len, (mode >> 1) & 1, &e);
    if (rc == SPILL_OK) {
      spill_record_header h;
      if (len < SPILL_RECORD_HEADER_BYTES) abort();
      spill_record_header_decode(buf, &h);
      if (h.magic != SPILL_RECORD_MAGIC || h.layer != (uint32_t)b->layer || h.expert != expert)
        abort(); /* accepted a record that is not the one asked for */
    }
  }
  free(buf);
  return 0;
}
