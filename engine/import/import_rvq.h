/* engine/import/import_rvq.h: the rvq3 trainer and encoder of
 * `spill import --experts rvq3` (import_rvq.c) and the AVX2 twin of its
 * nearest-entry search (import_rvq_avx2.c). Its own library (//engine/import:rvq)
 * so that the unit test and bench/rvq_bench.cc reach it.
 */
#ifndef SPILL_IMPORT_IMPORT_RVQ_H
#define SPILL_IMPORT_IMPORT_RVQ_H

#include <stdint.h>

#include "engine/base/status.h"
#include "engine/format/container.h"

#ifdef __cplusplus
extern "C" {
#endif

/* --experts rvq3 (import_rvq.c): a bounded, seeded reservoir of row-scaled
 * 8-dim vectors of one (layer, matrix) over all its experts, k-means trained
 * into the 3 x 256 x 8 codebook, and the greedy stage-by-stage encoder. */
#define IMP_RVQ_SAMPLE 16384 /* vectors kept for training (512 KiB) */
#define IMP_RVQ_ITERS 12     /* Lloyd iterations per stage */
typedef struct imp_rvq_sample {
  float v[IMP_RVQ_SAMPLE][SPILL_RVQ_DIM];
  uint64_t seen; /* vectors offered */
  uint64_t rng;
} imp_rvq_sample;
void imp_rvq_sample_init(imp_rvq_sample *s, uint64_t seed);
/* f16-rounded RMS of the row: its rvq3 scale. */
float imp_rvq_row_scale(const float *row, uint64_t cols);
void imp_rvq_sample_row(imp_rvq_sample *s, const float *row, uint64_t cols);
/* Trains cb (768 x 8 floats, stage t entry k at row 256 t + k); consumes s.
 * threads: 0 = every online CPU; the codebook is the same for any count. */
int imp_rvq_train(imp_rvq_sample *s, float *cb, int threads, spill_err *e);
/* Encodes the (rows, cols) f32 matrix m: per row cols/8 x 3 index bytes at
 * idx + r * (cols/8) * 3 and its f16 scale at scales + 2 r (any alignment);
 * num/den accumulate the squared reconstruction error and the squared
 * weights (row by row, in row order). Same bytes for any thread count/ISA. */
int imp_rvq_encode_rows(const float *cb, const float *m, uint64_t rows, uint64_t cols, uint8_t *idx,
                        uint8_t *scales, double *num, double *den, int threads, spill_err *e);
/* The worker count for a requested one (0 = online CPUs; capped at 64). */
int imp_rvq_threads(int requested);

/* Index of the entry of cb (256 x 8 floats) nearest to x: the first
 * minimum of the double squared distance sum_j ((double)x[j] - cb[k][j])^2
 * summed in j order. The AVX2 twin also takes the codebook transposed,
 * cbtf[j * 256 + k] = cb[k * 8 + j], and returns the same index. */
int imp_rvq_nearest__ref(const float *cb, const float *x);
int imp_rvq_nearest__avx2(const float *cb, const float *cbtf, const float *x);

#ifdef __cplusplus
}
#endif
#endif
