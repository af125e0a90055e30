/* engine/format/record.c: the binary headers of a container, the 64-byte
 * expert record header and the 4096-byte bank header page: encoding,
 * decoding and validation against a parsed manifest.
 *
 * spill_record_check runs on the hot path of every expert load, so it reads
 * only the 64 header bytes unless verification of the payload crc is asked
 * for. Checks run in the order docs/FORMAT.md gives (magic first, so a
 * record that is not a record at all is reported as such), and every error
 * names the bank file, the layer and the expert. Version 2 headers carry the
 * container id (covered by the header crc) and must match the manifest's;
 * version 1 headers are read as before (no identity).
 */
#include <string.h>

#include "engine/base/crc32.h"
#include "engine/format/container.h"
#include "engine/format/format_internal.h"

/* Byte offsets inside the record header (docs/FORMAT.md). */
enum {
  RH_MAGIC = 0,
  RH_VERSION = 4,
  RH_DTYPE = 6,
  RH_LAYER = 8,
  RH_EXPERT = 12,
  RH_PAYLOAD_OFFSET = 16,
  RH_PAYLOAD_BYTES = 20,
  RH_PAYLOAD_CRC = 24,
  RH_HEADER_CRC = 28,
  RH_SECT = 32,
  RH_N_SECTIONS = 44,
  RH_ID = 48,          /* v2: container_id; v1: reserved */
  RH_RESERVED_V1 = 48,
  RH_RESERVED_V2 = 56,
  RH_SECT_DTYPE = 56,  /* v3: one byte per section */
  RH_RESERVED_V3 = 59,
};

/* Byte offsets inside the bank header page. */
enum {
  BH_MAGIC = 0,
  BH_VERSION = 8,
  BH_LAYER = 12,
  BH_N_EXPERTS = 16,
  BH_DTYPE = 20,
  BH_RECORD_BYTES = 24,
  BH_DATA_OFFSET = 32,
  BH_HEADER_CRC = 40,
  BH_ID = 44,          /* v2: container_id; v1: reserved */
  BH_RESERVED_V1 = 44,
  BH_RESERVED_V2 = 52,
  BH_SECT_DTYPE = 52,  /* v3: one byte per section */
  BH_RESERVED_V3 = 55,
  BH_AFTER_CRC = 44,   /* the crc covers everything but bytes 40..43 */
};

static uint32_t record_header_crc(const uint8_t in[SPILL_RECORD_HEADER_BYTES]) {
  uint8_t tmp[SPILL_RECORD_HEADER_BYTES];
  memcpy(tmp, in, sizeof tmp);
  memset(tmp + RH_HEADER_CRC, 0, 4);
  return spill_crc32(0, tmp, sizeof tmp);
}

void spill_record_header_encode(const spill_record_header *h, uint8_t out[64]) {
  memset(out, 0, SPILL_RECORD_HEADER_BYTES);
  spill_put_u32(out + RH_MAGIC, h->magic);
  spill_put_u16(out + RH_VERSION, h->version);
  spill_put_u16(out + RH_DTYPE, h->dtype);
  spill_put_u32(out + RH_LAYER, h->layer);
  spill_put_u32(out + RH_EXPERT, h->expert);
  spill_put_u32(out + RH_PAYLOAD_OFFSET, h->payload_offset);
  spill_put_u32(out + RH_PAYLOAD_BYTES, h->payload_bytes);
  spill_put_u32(out + RH_PAYLOAD_CRC, h->payload_crc32);
  for (int i = 0; i < SPILL_SEC_COUNT; i++) spill_put_u32(out + RH_SECT + 4 * i, h->sect_offset[i]);
  spill_put_u32(out + RH_N_SECTIONS, h->n_sections);
  spill_put_u64(out + RH_ID, h->container_id);
  memcpy(out + RH_SECT_DTYPE, h->sect_dtype, SPILL_SEC_COUNT);
  /* header_crc32 is derived, never taken from h. */
  spill_put_u32(out + RH_HEADER_CRC, spill_crc32(0, out, SPILL_RECORD_HEADER_BYTES));
}

void spill_record_header_decode(const uint8_t in[64], spill_record_header *h) {
  memset(h, 0, sizeof *h);
  h->magic = spill_get_u32(in + RH_MAGIC);
  h->version = spill_get_u16(in + RH_VERSION);
  h->dtype = spill_get_u16(in + RH_DTYPE);
  h->layer = spill_get_u32(in + RH_LAYER);
  h->expert = spill_get_u32(in + RH_EXPERT);
  h->payload_offset = spill_get_u32(in + RH_PAYLOAD_OFFSET);
  h->payload_bytes = spill_get_u32(in + RH_PAYLOAD_BYTES);
  h->payload_crc32 = spill_get_u32(in + RH_PAYLOAD_CRC);
  h->header_crc32 = spill_get_u32(in + RH_HEADER_CRC);
  for (int i = 0; i < SPILL_SEC_COUNT; i++) h->sect_offset[i] = spill_get_u32(in + RH_SECT + 4 * i);
  h->n_sections = spill_get_u32(in + RH_N_SECTIONS);
  h->container_id = spill_get_u64(in + RH_ID);
  memcpy(h->sect_dtype, in + RH_SECT_DTYPE, SPILL_SEC_COUNT);
}

int spill_record_check(const spill_manifest *m, const char *file, int layer, uint32_t expert,
                       const void *rec, size_t len, int verify, spill_err *e) {
  const uint8_t *b = rec;
  spill_record_header h;
  if (!file) file = "?";
  SPILL_FAIL_IF(e, !m || !rec, SPILL_E_INVALID_ARG, "%s: layer %d expert %u: no record", file,
                layer, expert);
  SPILL_FAIL_IF(e, len < SPILL_RECORD_HEADER_BYTES ||
                       len - SPILL_RECORD_HEADER_BYTES < (size_t)m->payload_bytes,
                SPILL_E_SHORT_READ,
                "%s: layer %d expert %u: record buffer of %zu bytes is shorter than the "
                "%u-byte header plus payload", file, layer, expert, len,
                (unsigned)(SPILL_RECORD_HEADER_BYTES + m->payload_bytes));
  spill_record_header_decode(b, &h);
  SPILL_FAIL_IF(e, h.magic != SPILL_RECORD_MAGIC, SPILL_E_FORMAT,
                "%s: layer %d expert %u: bad record magic 0x%08x (expected 0x%08x)", file, layer,
                expert, h.magic, SPILL_RECORD_MAGIC);
  SPILL_FAIL_IF(e, h.version != (uint32_t)m->version, SPILL_E_VERSION,
                "%s: layer %d expert %u: record version %u in a version %d container (a "
                "record from another container?)", file, layer, expert, h.version, m->version);
  uint32_t hcrc = record_header_crc(b);
  SPILL_FAIL_IF(e, hcrc != h.header_crc32, SPILL_E_CHECKSUM,
                "%s: layer %d expert %u: record header checksum mismatch (stored 0x%08x, "
                "computed 0x%08x)", file, layer, expert, h.header_crc32, hcrc);
  const int rsv = m->version >= 3 ? RH_RESERVED_V3 : m->version >= 2 ? RH_RESERVED_V2 : RH_RESERVED_V1;
  SPILL_FAIL_IF(e, !spill_fmt_all_zero(b + rsv, SPILL_RECORD_HEADER_BYTES - rsv),
                SPILL_E_FORMAT, "%s: layer %d expert %u: reserved header bytes are not zero",
                file, layer, expert);
  SPILL_FAIL_IF(e, m->version >= 2 && h.container_id != m->container_id, SPILL_E_FORMAT,
                "%s: layer %d expert %u: record of container %016llx, this container is %016llx "
                "(a record or bank file from another model)", file, layer, expert,
                (unsigned long long)h.container_id, (unsigned long long)m->container_id);
  SPILL_FAIL_IF(e, h.dtype != (uint32_t)m->expert_dtype, SPILL_E_FORMAT,
                "%s: layer %d expert %u: record dtype %u, manifest says %s (%d)", file, layer,
                expert, h.dtype, spill_dtype_name(m->expert_dtype), (int)m->expert_dtype);
  for (int i = 0; m->version >= 3 && i < SPILL_SEC_COUNT; i++) {
    const spill_dtype want = spill_manifest_sect_dtype(m, layer, i);
    SPILL_FAIL_IF(e, h.sect_dtype[i] != (uint8_t)want, SPILL_E_FORMAT,
                  "%s: layer %d expert %u: section %d dtype %u, manifest says %s (%d)", file,
                  layer, expert, i, h.sect_dtype[i], spill_dtype_name(want), (int)want);
  }
  SPILL_FAIL_IF(e, h.layer != (uint32_t)layer || h.expert != expert, SPILL_E_FORMAT,
                "%s: layer %d expert %u: record holds layer %u expert %u (records swapped or "
                "misplaced)", file, layer, expert, h.layer, h.expert);
  SPILL_FAIL_IF(e, h.payload_offset != SPILL_RECORD_HEADER_BYTES ||
                       h.payload_bytes != m->payload_bytes,
                SPILL_E_FORMAT,
                "%s: layer %d expert %u: payload [%u, +%u) differs from the manifest's [%u, +%u)",
                file, layer, expert, h.payload_offset, h.payload_bytes,
                (unsigned)SPILL_RECORD_HEADER_BYTES, m->payload_bytes);
  SPILL_FAIL_IF(e, h.n_sections != SPILL_SEC_COUNT, SPILL_E_FORMAT,
                "%s: layer %d expert %u: %u sections, expected %d", file, layer, expert,
                h.n_sections, SPILL_SEC_COUNT);
  for (int i = 0; i < SPILL_SEC_COUNT; i++) {
    SPILL_FAIL_IF(e, h.sect_offset[i] != m->sect[i].offset, SPILL_E_FORMAT,
                  "%s: layer %d expert %u: section %d at offset %u, manifest says %u", file,
                  layer, expert, i, h.sect_offset[i], m->sect[i].offset);
  }
  if (verify) {
    uint32_t pcrc = spill_crc32(0, b + SPILL_RECORD_HEADER_BYTES, m->payload_bytes);
    SPILL_FAIL_IF(e, pcrc != h.payload_crc32, SPILL_E_CHECKSUM,
                  "%s: layer %d expert %u: payload checksum mismatch (stored 0x%08x, computed "
                  "0x%08x)", file, layer, expert, h.payload_crc32, pcrc);
    for (int i = 0; i < SPILL_SEC_COUNT; i++) { /* values no kernel may see (mxfp4 e = 255) */
      const spill_section_info *s = &m->sect[i];
      int rc = spill_dtype_check_values(spill_manifest_sect_dtype(m, layer, i), b + s->offset,
                                        s->rows, s->cols, e);
      if (rc < 0) {
        spill_err_prefix(e, "%s: layer %d expert %u: section %d", file, layer, expert, i);
        return rc;
      }
    }
  }
  return SPILL_OK;
}

static uint32_t bank_header_crc(const uint8_t *in) {
  uint32_t crc = spill_crc32(0, in, BH_HEADER_CRC);
  crc = spill_fmt_crc32_zeros(crc, 4);
  return spill_crc32(crc, in + BH_AFTER_CRC, SPILL_BANK_HEADER_BYTES - BH_AFTER_CRC);
}

void spill_bank_header_encode(const spill_bank_header *h, uint8_t out[SPILL_BANK_HEADER_BYTES]) {
  memset(out, 0, SPILL_BANK_HEADER_BYTES);
  memcpy(out + BH_MAGIC, SPILL_BANK_MAGIC, 8);
  spill_put_u32(out + BH_VERSION, h->version);
  spill_put_u32(out + BH_LAYER, h->layer);
  spill_put_u32(out + BH_N_EXPERTS, h->n_experts);
  spill_put_u32(out + BH_DTYPE, h->dtype);
  spill_put_u64(out + BH_RECORD_BYTES, h->record_bytes);
  spill_put_u64(out + BH_DATA_OFFSET, h->data_offset);
  spill_put_u64(out + BH_ID, h->container_id);
  memcpy(out + BH_SECT_DTYPE, h->sect_dtype, SPILL_SEC_COUNT);
  spill_put_u32(out + BH_HEADER_CRC, bank_header_crc(out));
}

void spill_bank_header_decode(const uint8_t in[SPILL_BANK_HEADER_BYTES], spill_bank_header *h) {
  memset(h, 0, sizeof *h);
  h->version = spill_get_u32(in + BH_VERSION);
  h->layer = spill_get_u32(in + BH_LAYER);
  h->n_experts = spill_get_u32(in + BH_N_EXPERTS);
  h->dtype = spill_get_u32(in + BH_DTYPE);
  h->record_bytes = spill_get_u64(in + BH_RECORD_BYTES);
  h->data_offset = spill_get_u64(in + BH_DATA_OFFSET);
  h->container_id = spill_get_u64(in + BH_ID);
  memcpy(h->sect_dtype, in + BH_SECT_DTYPE, SPILL_SEC_COUNT);
}

int spill_bank_header_check(const spill_manifest *m, const spill_bank_info *b, const void *page,
                            size_t len, spill_err *e) {
  SPILL_FAIL_IF(e, !m || !b || !page, SPILL_E_INVALID_ARG, "bank header check: NULL argument");
  const uint8_t *p = page;
  const char *f = b->file;
  SPILL_FAIL_IF(e, len < SPILL_BANK_HEADER_BYTES, SPILL_E_SHORT_READ,
                "%s: bank header is %zu bytes, expected %u", f, len, SPILL_BANK_HEADER_BYTES);
  SPILL_FAIL_IF(e, memcmp(p + BH_MAGIC, SPILL_BANK_MAGIC, 8) != 0, SPILL_E_FORMAT,
                "%s: bad bank magic (not a spill bank file)", f);
  spill_bank_header h;
  spill_bank_header_decode(p, &h);
  SPILL_FAIL_IF(e, h.version != (uint32_t)m->version, SPILL_E_VERSION,
                "%s: bank version %u in a version %d container (a bank from another "
                "container?)", f, h.version, m->version);
  uint32_t stored = spill_get_u32(p + BH_HEADER_CRC), crc = bank_header_crc(p);
  SPILL_FAIL_IF(e, stored != crc, SPILL_E_CHECKSUM,
                "%s: bank header checksum mismatch (stored 0x%08x, computed 0x%08x)", f, stored,
                crc);
  const int rsv = m->version >= 3 ? BH_RESERVED_V3 : m->version >= 2 ? BH_RESERVED_V2 : BH_RESERVED_V1;
  SPILL_FAIL_IF(e, !spill_fmt_all_zero(p + rsv, SPILL_BANK_HEADER_BYTES - rsv), SPILL_E_FORMAT,
                "%s: reserved bank header bytes are not zero", f);
  SPILL_FAIL_IF(e, m->version >= 2 && h.container_id != m->container_id, SPILL_E_FORMAT,
                "%s: bank of container %016llx, this container is %016llx (a bank file from "
                "another model)", f, (unsigned long long)h.container_id,
                (unsigned long long)m->container_id);
  SPILL_FAIL_IF(e, h.layer != (uint32_t)b->layer, SPILL_E_FORMAT,
                "%s: bank holds layer %u, manifest says %d", f, h.layer, b->layer);
  SPILL_FAIL_IF(e, h.n_experts != b->n_experts, SPILL_E_FORMAT,
                "%s: bank has %u experts, manifest says %u", f, h.n_experts, b->n_experts);
  SPILL_FAIL_IF(e, h.dtype != (uint32_t)m->expert_dtype, SPILL_E_FORMAT,
                "%s: bank dtype %u, manifest says %s", f, h.dtype,
                spill_dtype_name(m->expert_dtype));
  for (int i = 0; m->version >= 3 && i < SPILL_SEC_COUNT; i++) {
    const spill_dtype want = spill_manifest_sect_dtype(m, b->layer, i);
    SPILL_FAIL_IF(e, h.sect_dtype[i] != (uint8_t)want, SPILL_E_FORMAT,
                  "%s: bank section %d dtype %u, manifest says %s", f, i, h.sect_dtype[i],
                  spill_dtype_name(want));
  }
  SPILL_FAIL_IF(e, h.record_bytes != b->record_bytes, SPILL_E_FORMAT,
                "%s: bank record size %llu, manifest says %llu", f,
                (unsigned long long)h.record_bytes, (unsigned long long)b->record_bytes);
  SPILL_FAIL_IF(e, h.data_offset != b->data_offset, SPILL_E_FORMAT,
                "%s: bank data offset %llu, manifest says %llu", f,
                (unsigned long long)h.data_offset, (unsigned long long)b->data_offset);
  return SPILL_OK;
}
