/* engine/spill_draft.c: n-gram drafts (prompt lookup) and the adaptive
 * rule (spill_draft.h). A draft costs no model work: it is a copy of what
 * followed the latest earlier occurrence of the context's last n tokens, so
 * it is right exactly when the text repeats itself (code, quotes, lists,
 * a reply restating the prompt). The rule judges by expert bytes requested,
 * a deterministic counter: what a verify chunk asks of storage does not
 * depend on timing, so the drafting decisions (and every counter) of a run
 * are reproducible on a loaded machine. */
#include "engine/spill_draft.h"

#include <string.h>

int spill_draft_lookup(const int *hist, int n_hist, int max, int stop, int *out) {
  if (max <= 0 || !hist) return 0;
  for (int n = SPILL_DRAFT_NGRAM_MAX; n >= SPILL_DRAFT_NGRAM_MIN; n--) {
    if (n_hist <= n) continue;
    const int *suf = hist + n_hist - n;
    /* a match ending at i (exclusive), i < n_hist: hist[i-n, i) == suf */
    for (int i = n_hist - 1; i >= n; i--) {
      if (memcmp(hist + i - n, suf, (size_t)n * sizeof(int)) != 0) continue;
      int k = 0;
      while (k < max && i + k < n_hist && hist[i + k] != stop) {
        out[k] = hist[i + k];
        k++;
      }
      if (k > 0) return k;
    }
  }
  return 0;
}

void spill_draft_rule_init(spill_draft_rule *r, int max, int adaptive, uint64_t single_bytes) {
  memset(r, 0, sizeof *r);
  r->max = max < 0 ? 0 : max > SPILL_DRAFT_MAX ? SPILL_DRAFT_MAX : max;
  r->adaptive = adaptive;
  r->single_bytes = single_bytes;
  r->len = adaptive ? (r->max > 0 ? 1 : 0) : r->max;
  r->backoff = 32;
}

int spill_draft_rule_len(const spill_draft_rule *r) {
  if (r->max <= 0) return 0;
  if (!r->adaptive) return r->max;
  return r->cooldown > 0 ? 0 : r->len;
}

void spill_draft_rule_plain(spill_draft_rule *r, int generated) {
  if (r->cooldown > 0) r->cooldown = generated >= r->cooldown ? 0 : r->cooldown - generated;
}

void spill_draft_rule_verify(spill_draft_rule *r, int drafted, int accepted, int generated,
                             uint64_t requested_bytes) {
  if (!r->adaptive) return;
  /* draft length: grow while whole drafts are accepted */
  if (accepted >= drafted) r->len = r->len * 2 > r->max ? r->max : r->len * 2;
  else r->len = accepted + 1 > r->max ? r->max : accepted + 1;
  if (r->len < 1) r->len = 1;
  /* the window: shift in this step */
  if (r->n_win == SPILL_DRAFT_WINDOW) {
    memmove(r->win_bytes, r->win_bytes + 1, (SPILL_DRAFT_WINDOW - 1) * sizeof r->win_bytes[0]);
    memmove(r->win_tokens, r->win_tokens + 1, (SPILL_DRAFT_WINDOW - 1) * sizeof r->win_tokens[0]);
    r->n_win--;
  }
  r->win_bytes[r->n_win] = requested_bytes;
  r->win_tokens[r->n_win] = (uint64_t)(generated > 0 ? generated : 0);
  r->n_win++;
  uint64_t b = 0, t = 0;
  for (int i = 0; i < r->n_win; i++) {
    b += r->win_bytes[i];
    t += r->win_tokens[i];
  }
  /* pays when the chunks requested no more per generated token than single steps would */
  const double per_tok = t ? (double)b / (double)t : 1e300;
  if (per_tok > (double)r->single_bytes) {
    r->cooldown = r->backoff;
    r->backoff = r->backoff * 2 > 1024 ? 1024 : r->backoff * 2;
    r->n_win = 0;
    r->len = 1;
    r->switched_off++;
  } else if (r->n_win == SPILL_DRAFT_WINDOW) {
    r->backoff = 32;
  }
}
