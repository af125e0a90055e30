/* engine/base/dtype_traits.h: the weight types (dtypes), one table.
 *
 * Every dtype is one row of a traits table (dtype_traits.c): its name, its
 * block (elements and bytes) and where its scales live. Byte sizes and row
 * layouts everywhere (engine/format's matrix sizes and record layout,
 * engine/model's matrix views, engine/quant's row addressing) are derived
 * from these rows, so a new dtype is one row here plus its kernels (the
 * kernel table of engine/quant/kernels_dispatch.c) and tests. The enum values
 * are stored in record headers and manifests: frozen, append only.
 * Depends on nothing; lives in engine/base so that format and quant, which
 * do not depend on each other, share it.
 */
#ifndef SPILL_BASE_DTYPE_TRAITS_H
#define SPILL_BASE_DTYPE_TRAITS_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Tensor formats (docs/FORMAT.md "Dtypes"). Values are stored on disk: frozen. */
typedef enum spill_dtype {
  SPILL_DT_F32 = 0,
  SPILL_DT_F16 = 1,
  SPILL_DT_BF16 = 2,
  SPILL_DT_Q8 = 3,   /* int8 values, then one f16 scale per group of `group` */
  SPILL_DT_Q4 = 4,   /* 4-bit values (nibble - 8), then f16 scale per group */
  SPILL_DT_RVQ3 = 5, /* 3 x 8-bit codebook indices per 8 weights, f16 row scale */
  SPILL_DT_Q4_K = 6, /* ggml Q4_K super-blocks of 256, verbatim (144 bytes each) */
  SPILL_DT_Q5_K = 7, /* ggml Q5_K (176 bytes per 256) */
  SPILL_DT_Q6_K = 8, /* ggml Q6_K (210 bytes per 256) */
  SPILL_DT_MXFP4 = 9, /* ggml MXFP4: e8m0 exponent + 16 bytes of e2m1 codes per 32 (17 bytes) */
  SPILL_DT_Q5_0 = 10, /* ggml Q5_0: f16 d, 4 bytes of 5th bits, 16 nibble bytes per 32 (22 bytes) */
  SPILL_DT_Q5_1 = 11, /* ggml Q5_1: f16 d, f16 m, 4 bytes of 5th bits, 16 nibble bytes (24 bytes) */
  SPILL_DT_COUNT
} spill_dtype;

/* Where a dtype's scales are. */
typedef enum spill_dtype_scales {
  SPILL_DT_SCALES_NONE = 0,  /* plain values (f32/f16/bf16) */
  SPILL_DT_SCALES_IN_BLOCK,  /* each block carries its own scales (ggml blocks) */
  SPILL_DT_SCALES_GROUP_F16, /* after every row's values: rows * (cols / group) f16, row-major;
                              * the matrix has a group size (a multiple of block_elems) */
  SPILL_DT_SCALES_ROW_F16    /* after every row's values: one f16 per row */
} spill_dtype_scales;

typedef struct spill_dtype_traits {
  const char *name;          /* manifest name: "f32", "q4_k", ... */
  uint32_t block_elems;      /* elements per block: a row's cols is a multiple of it */
  uint32_t block_bytes;      /* bytes of one block (values, and in-block scales) */
  spill_dtype_scales scales;
  int codebook;              /* 1: values are codebook indices (rvq3; LUT kernels, no matvec) */
  int e8m0_scale;            /* 1: byte 0 of every block is an e8m0 exponent; 255 (NaN) is
                              * refused by engine/format (spill_dtype_check_values) */
} spill_dtype_traits;

/* The row of dt, or NULL for a code outside the table. */
const spill_dtype_traits *spill_dtype_traits_of(int dt);
const char *spill_dtype_name(spill_dtype dt); /* "f32", ..., "?" for an unknown code */
/* Parses a dtype name; returns 0 (SPILL_OK) or SPILL_E_FORMAT. */
int spill_dtype_parse(const char *name, spill_dtype *out);
/* Bytes of one row's values (blocks) and f16 scales per row, for a row of
 * cols elements with the given group size (SPILL_DT_SCALES_GROUP_F16 only;
 * ignored otherwise). Returns 0 for an unknown dtype or a shape the dtype
 * cannot hold (cols not a multiple of the block, or of the group; a group
 * that is 0 or not a multiple of the block), 1 otherwise. */
int spill_dtype_row_layout(int dt, uint64_t cols, uint32_t group, uint64_t *row_bytes,
                           uint64_t *row_scales);

#ifdef __cplusplus
}
#endif
#endif
