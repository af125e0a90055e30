/* engine/import/import_checked.h: the import with a check of the tokenizer
 * files it writes into DST, run after they are written and before the
 * manifest (so a refused tokenizer leaves nothing `spill verify` accepts).
 * engine/import cannot load tokenizers (engine/tok depends on it), so the
 * top of the engine (engine/spill_import.c) passes the check that the engine
 * itself uses when it opens a model; spill_import_run (import.h) is that
 * call. Not a public API.
 */
#ifndef SPILL_IMPORT_CHECKED_H
#define SPILL_IMPORT_CHECKED_H

#include "engine/import/import.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Checks the tokenizer of directory dst against a model of `vocab` tokens;
 * SPILL_OK when it is usable (or there is none). */
typedef int (*spill_import_check_fn)(const char *dst, int vocab, spill_err *e);

/* spill_import_run with check (NULL: none). */
int spill_import_run_checked(const spill_import_request *r, spill_import_summary *s,
                             spill_import_check_fn check, spill_err *e);

#ifdef __cplusplus
}
#endif
#endif
