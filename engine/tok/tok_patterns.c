/* engine/tok/tok_patterns.c: the pre-tokenizer split patterns a tiktoken
 * rank file does not carry (spill_tok.h SPILL_TOK_PAT_*): o200k, cl100k and
 * Kimi K2's (whose Python pattern uses the class intersection
 * [X&&[^\p{Han}]], written here as (?:(?!\p{Han})[X]) since PCRE2 has no
 * intersection). Data only, below the loaders that name them (tok_load.c for
 * rank files, tok_gguf.c for GGUF pre-tokenizer names).
 */
#include "engine/tok/spill_tok.h"

const char SPILL_TOK_PAT_O200K[] =
    "[^\\r\\n\\p{L}\\p{N}]?[\\p{Lu}\\p{Lt}\\p{Lm}\\p{Lo}\\p{M}]*[\\p{Ll}\\p{Lm}\\p{Lo}\\p{M}]+"
    "(?i:'s|'t|'re|'ve|'m|'ll|'d)?"
    "|[^\\r\\n\\p{L}\\p{N}]?[\\p{Lu}\\p{Lt}\\p{Lm}\\p{Lo}\\p{M}]+[\\p{Ll}\\p{Lm}\\p{Lo}\\p{M}]*"
    "(?i:'s|'t|'re|'ve|'m|'ll|'d)?"
    "|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n/]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";

const char SPILL_TOK_PAT_CL100K[] =
    "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}"
    "| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";

#define KIMI_UP "(?:(?!\\p{Han})[\\p{Lu}\\p{Lt}\\p{Lm}\\p{Lo}\\p{M}])"
#define KIMI_LO "(?:(?!\\p{Han})[\\p{Ll}\\p{Lm}\\p{Lo}\\p{M}])"
const char SPILL_TOK_PAT_KIMI[] =
    "[\\p{Han}]+"
    "|[^\\r\\n\\p{L}\\p{N}]?" KIMI_UP "*" KIMI_LO "+(?i:'s|'t|'re|'ve|'m|'ll|'d)?"
    "|[^\\r\\n\\p{L}\\p{N}]?" KIMI_UP "+" KIMI_LO "*(?i:'s|'t|'re|'ve|'m|'ll|'d)?"
    "|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";
