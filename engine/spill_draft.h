/* engine/spill_draft.h: n-gram drafts and the rule that decides whether to
 * draft (docs/MODEL.md "Drafts"). Private to //engine:spill: spill_engine.c
 * drafts with these before each greedy decode step; pure functions over
 * token arrays and counters (no model, no I/O), tested in spill_draft_test.cc. */
#ifndef SPILL_ENGINE_SPILL_DRAFT_H
#define SPILL_ENGINE_SPILL_DRAFT_H

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* The most tokens a step may draft (the draft knob's upper bound). */
#define SPILL_DRAFT_MAX 15
/* n-gram lengths matched, longest first (prompt lookup). */
#define SPILL_DRAFT_NGRAM_MAX 4
#define SPILL_DRAFT_NGRAM_MIN 2

/* Prompt lookup: the last n tokens of hist[0..n_hist) (n from
 * SPILL_DRAFT_NGRAM_MAX down to SPILL_DRAFT_NGRAM_MIN) are searched for at
 * an earlier place of hist, the most recent first; the tokens that followed
 * the first match found (up to max, stopping before `stop` and at the end of
 * hist) are copied into out. Returns their count (0: no match, or max <= 0). */
int spill_draft_lookup(const int *hist, int n_hist, int max, int stop, int *out);

/* Whether drafting pays, judged by expert demand: a single-token step
 * requests top_k experts per MoE layer (single_bytes of records); a verify
 * chunk requests the union of its tokens' experts. Over the last verify
 * steps (a window of up to SPILL_DRAFT_WINDOW), when the chunks' requested
 * bytes per generated token exceed single_bytes, drafting is switched off
 * for a cooldown of generated tokens (32, doubling up to 1024 while the
 * probes after it still do not pay; a paying window resets it). The draft
 * length starts at 1, doubles (up to the knob) while whole drafts are
 * accepted and falls back to accepted + 1 after a rejection, so that a
 * probe of text that does not repeat costs one extra token's work. */
#define SPILL_DRAFT_WINDOW 4
typedef struct spill_draft_rule {
  int max;               /* the draft knob */
  int adaptive;          /* 0: always draft max tokens (the draft_adaptive knob off) */
  uint64_t single_bytes; /* expert bytes a single-token step requests */
  int len;               /* next draft length */
  int n_win;             /* verify steps in the window */
  uint64_t win_bytes[SPILL_DRAFT_WINDOW], win_tokens[SPILL_DRAFT_WINDOW];
  int cooldown;          /* generated tokens left without drafting */
  int backoff;           /* the next cooldown */
  uint64_t switched_off; /* times the rule switched drafting off */
} spill_draft_rule;

void spill_draft_rule_init(spill_draft_rule *r, int max, int adaptive, uint64_t single_bytes);
/* How many tokens to draft for the next step (0: none now). */
int spill_draft_rule_len(const spill_draft_rule *r);
/* After a step that generated `generated` tokens without drafting (counts
 * down the cooldown). */
void spill_draft_rule_plain(spill_draft_rule *r, int generated);
/* After a verify step: drafted tokens, accepted ones, tokens it generated
 * and the expert bytes it requested. */
void spill_draft_rule_verify(spill_draft_rule *r, int drafted, int accepted, int generated,
                             uint64_t requested_bytes);

#ifdef __cplusplus
}
#endif
#endif
