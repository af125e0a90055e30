/* server/chat_prompt.c: the fallback chat rendering (chat_prompt.h). */
#include "server/chat_prompt.h"

#include <stdlib.h>
#include <string.h>

char *spill_srv_chat_fallback(const spill_srv_message *m, int n) {
  static const char gen[] = "<|assistant|>\n";
  size_t total = sizeof gen;
  for (int i = 0; i < n; i++) total += strlen(m[i].role) + strlen(m[i].content) + 6;
  char *s = malloc(total);
  if (!s) return NULL;
  size_t k = 0;
  for (int i = 0; i < n; i++) {
    size_t r = strlen(m[i].role), c = strlen(m[i].content);
    memcpy(s + k, "<|", 2);
    memcpy(s + k + 2, m[i].role, r);
    memcpy(s + k + 2 + r, "|>\n", 3);
    k += r + 5;
    memcpy(s + k, m[i].content, c);
    k += c;
    s[k++] = '\n';
  }
  memcpy(s + k, gen, sizeof gen);
  return s;
}
