/* engine/import/source.h: what the checkpoint readers (safetensors.c,
 * gguf.c) hand to the importer: source dtypes with their block traits, a
 * tensor description in numpy (row-major, outermost first) order with its
 * absolute byte range in one file, bounded reads, and dequantisers to f32.
 *
 * Invariants: every spill_src_tensor returned by a reader has been checked
 * against its file's size (begin + bytes <= size, no overlap with another
 * tensor of the same file) and its byte count equals the dtype's size of its
 * shape. This module is on the inference-library side (import is part of
 * what a user needs to run a model); it depends on engine/base only and
 * never prints.
 */
#ifndef SPILL_IMPORT_SOURCE_H
#define SPILL_IMPORT_SOURCE_H

#include <stddef.h>
#include <stdint.h>

#include "engine/base/status.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Source element formats. Not stored anywhere: free to extend. */
typedef enum spill_src_dtype {
  SPILL_SRC_F32 = 0,
  SPILL_SRC_F16,
  SPILL_SRC_BF16,
  SPILL_SRC_F8_E4M3, /* safetensors F8_E4M3 (e4m3fn: no inf, 0x7f/0xff NaN) */
  SPILL_SRC_Q8_0,    /* ggml: blocks of 32: f16 d, 32 x int8 */
  SPILL_SRC_Q4_0,    /* ggml: blocks of 32: f16 d, 16 bytes (j low, j+16 high) */
  SPILL_SRC_Q4_K,    /* ggml super-blocks of 256 */
  SPILL_SRC_Q5_K,
  SPILL_SRC_Q6_K,
  SPILL_SRC_MXFP4,   /* ggml block_mxfp4: blocks of 32: e8m0 e, 16 bytes (j low, j+16 high) */
  SPILL_SRC_Q5_0,    /* ggml: blocks of 32: f16 d, 4 bytes of fifth bits, 16 bytes (j low, j+16 high) */
  SPILL_SRC_Q5_1,    /* ggml: blocks of 32: f16 d, f16 m, then as Q5_0 */
  /* formats whose size is known (so a file holding them can be validated)
   * but whose values spill does not read: importing them is
   * SPILL_E_UNSUPPORTED naming the tensor */
  SPILL_SRC_OTHER,
  SPILL_SRC_COUNT
} spill_src_dtype;

/* Block traits: a row of n elements (n a multiple of block_elems) takes
 * n / block_elems * block_bytes bytes. For SPILL_SRC_OTHER the reader stores
 * the real traits in the tensor (other_* below). */
typedef struct spill_src_traits {
  const char *name;
  uint32_t block_elems, block_bytes;
} spill_src_traits;
const spill_src_traits *spill_src_dtype_traits(spill_src_dtype dt);

#define SPILL_SRC_MAX_DIMS 4
#define SPILL_SRC_NAME_MAX 256

typedef struct spill_src_tensor {
  char *name;             /* owned by the reader */
  spill_src_dtype dtype;
  char other_name[16];    /* SPILL_SRC_OTHER: the source's own type name */
  int ndim;               /* 1..SPILL_SRC_MAX_DIMS */
  uint64_t shape[SPILL_SRC_MAX_DIMS]; /* numpy order: shape[ndim-1] is contiguous */
  int file;               /* index of the file (shard) within the reader */
  uint64_t begin;         /* absolute offset in that file */
  uint64_t bytes;
} spill_src_tensor;

/* Elements of t (product of shape), checked against 2^62 by the readers. */
uint64_t spill_src_numel(const spill_src_tensor *t);
/* Bytes of `n` contiguous elements of dtype dt starting on a block boundary;
 * fails (SPILL_E_FORMAT) when n is not a multiple of the block or overflows. */
int spill_src_bytes(spill_src_dtype dt, uint64_t n, uint64_t *out, spill_err *e);

/* Dequantises n elements (a multiple of the block) of src into dst (f32).
 * F8_E4M3 without scales gives the raw fp8 values (the importer applies
 * weight_scale_inv). NaN inputs stay NaN. SPILL_E_UNSUPPORTED for OTHER. */
int spill_src_dequant(spill_src_dtype dt, const void *src, uint64_t n, float *dst, spill_err *e);

/* compressed-tensors mxfp4-pack-quantized -> ggml block_mxfp4, a lossless
 * byte repack: packed (rows, cols/2), byte i of a row holding element 2i
 * (low nibble) and 2i+1 (high); scale (rows, cols/32) e8m0 bytes. out gets
 * rows x cols/32 blocks of 17 bytes (e8m0, then byte j = element j | element
 * j+16 << 4). cols % 32 == 0. An e8m0 255 (NaN) is SPILL_E_FORMAT naming
 * `what`, the row and the block. spill_src_mxfp4_to_ct is the inverse. */
int spill_src_mxfp4_from_ct(const uint8_t *packed, const uint8_t *scale, uint64_t rows, uint64_t cols,
                            uint8_t *out, const char *what, spill_err *e);
void spill_src_mxfp4_to_ct(const uint8_t *blocks, uint64_t rows, uint64_t cols, uint8_t *packed,
                           uint8_t *scale);

/* e4m3fn byte to f32 (exact). */
float spill_src_fp8_e4m3_to_f32(uint8_t b);

/* pread exactly n bytes at off of fd (retrying short reads and EINTR);
 * SPILL_E_SHORT_READ at EOF, SPILL_E_IO otherwise. `what` names the file. */
int spill_src_pread(int fd, void *dst, size_t n, uint64_t off, const char *what, spill_err *e);

#ifdef __cplusplus
}
#endif
#endif
