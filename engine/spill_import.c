/* engine/spill_import.c: spill_import_run (import.h) = the importer of
 * engine/import plus the tokenizer check it cannot make itself (engine/tok
 * depends on engine/import): the tokenizer files written into DST are loaded
 * exactly as spill_engine_open loads them, before the manifest is written,
 * so an import that exits 0 gives a container `spill run` can speak through
 * (issue 26 item 14). spill_model_tokenizer, that one loader, lives here too;
 * spill_engine_open and spill_verify call it.
 */
#include <stdio.h>

#include "engine/import/import_checked.h"
#include "engine/spill_internal.h"

int spill_model_tokenizer(const char *model_dir, int vocab, spill_tok **out, spill_err *e) {
  *out = NULL;
  char p[4096];
  int found = spill_tok_locate(model_dir, 0, p, sizeof p, e);
  if (found <= 0) return found;
  spill_tok *t = NULL;
  int rc = spill_tok_load(p, &t, e);
  if (rc != SPILL_OK) {
    spill_err_prefix(e, "tokenizer %s", p);
    return rc;
  }
  if (spill_tok_vocab_size(t) > vocab) {
    rc = spill_err_set(e, SPILL_E_FORMAT, "tokenizer %s: %d tokens, the model's vocabulary %d", p,
                       spill_tok_vocab_size(t), vocab);
    spill_tok_free(t);
    return rc;
  }
  *out = t;
  return SPILL_OK;
}

static int check_tokenizer(const char *dst, int vocab, spill_err *e) {
  spill_tok *t = NULL;
  SPILL_TRY(spill_model_tokenizer(dst, vocab, &t, e));
  spill_tok_free(t);
  return SPILL_OK;
}

int spill_import_run(const spill_import_request *r, spill_import_summary *s, spill_err *e) {
  return spill_import_run_checked(r, s, check_tokenizer, e);
}
