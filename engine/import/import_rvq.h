/* engine/import/import_rvq.h: the rvq3 encoder's nearest-entry search and
 * its AVX2 twin (import_rvq.c, import_rvq_avx2.c), apart from
 * import_internal.h so that the -mavx2 library needs nothing else.
 */
#ifndef SPILL_IMPORT_IMPORT_RVQ_H
#define SPILL_IMPORT_IMPORT_RVQ_H

#include "engine/format/container.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Index of the entry of cb (256 x 8 floats) nearest to x (first minimum of
 * the double squared distance); the AVX2 twin takes the same codebook as
 * cbt (8 x 256 doubles, cbt[j * 256 + k] = cb[k * 8 + j]) and returns the
 * same index. */
int imp_rvq_nearest__ref(const float *cb, const float *x);
int imp_rvq_nearest__avx2(const double *cbt, const float *x);

#ifdef __cplusplus
}
#endif
#endif
