/* cli/bench_prompts.h: the prompt set of `spill bench`'s workload, the text
 * of the files bench/prompts/NAME.txt embedded at build time (cli/embed_prompts.sh), so
 * the command needs no data files. */
#ifndef SPILL_CLI_BENCH_PROMPTS_H
#define SPILL_CLI_BENCH_PROMPTS_H

typedef struct cli_bench_prompt {
  const char *name; /* file base name: "prose", "code", ... */
  const char *text; /* the file's bytes */
} cli_bench_prompt;

extern const cli_bench_prompt cli_bench_prompts[];
extern const int cli_bench_n_prompts;

#endif
