/* cli/cmd_knobs.c: `spill knobs [--markdown]`: the engine's knob table
 * (engine/spill.h spill_knob_at) as text or as the Markdown table that
 * README.md carries between its knob markers; //cli:knobs_doc_test fails when
 * the two differ, so the README list cannot drift from the table. */
#include <stdio.h>
#include <string.h>

#include "cli/cli_util.h"
#include "cli/commands.h"
#include "engine/spill.h"

/* Accepted values; md escapes '|' for a Markdown table cell. */
const char cmd_knobs_usage[] =
    "usage: spill knobs [--markdown]\n"
    "Lists the engine's knob table: key (experiment configs), flag, values, default,\n"
    "live (changes on an open engine) or fixed at open, meaning. --markdown prints\n"
    "README.md's table.\n";

static void values_of(const spill_knob *k, int md, char *buf, size_t n) {
  if (k->type == SPILL_KNOB_BOOL) snprintf(buf, n, md ? "true\\|false" : "true|false");
  else if (k->type == SPILL_KNOB_CHOICE) {
    char ch[256];
    spill_knob_choices(k, ch, sizeof ch);
    buf[0] = 0;
    for (const char *p = ch; *p && strlen(buf) + 3 < n; p++) {
      size_t l = strlen(buf);
      if (*p == '|' && md) snprintf(buf + l, n - l, "\\|");
      else snprintf(buf + l, n - l, "%c", *p);
    }
  } else if (k->type == SPILL_KNOB_INT || k->type == SPILL_KNOB_FLOAT)
    snprintf(buf, n, "%s in [%.15g, %.15g]%s%s", k->arg, k->lo, k->hi, k->special ? " or " : "",
             k->special ? k->special : "");
  else
    snprintf(buf, n, "%s%s%s", k->arg, k->special ? " or " : "", k->special ? k->special : "");
}

static void default_of(const spill_knob *k, char *buf, size_t n) {
  snprintf(buf, n, "%s", k->def ? k->def : "");
}

static void flag_of(const spill_knob *k, char *buf, size_t n) {
  snprintf(buf, n, "--%s", k->name);
  for (char *p = buf + 2; *p; p++)
    if (*p == '_') *p = '-';
}

int cmd_knobs(int argc, char **argv) {
  int md = 0;
  for (int i = 1; i < argc; i++) {
    if (!strcmp(argv[i], "--markdown")) md = 1;
    else if (argv[i][0] == '-') return cli_usage_error("unknown option %s", argv[i]);
    else return cli_usage_error("unexpected argument %s", argv[i]);
  }
  printf(md ? "| key | flag | values | default | on an open engine | meaning |\n"
              "|---|---|---|---|---|---|\n"
            : "");
  for (int i = 0; i < spill_knob_count(); i++) {
    const spill_knob *k = spill_knob_at(i);
    char v[300], d[64] = "", f[64];
    values_of(k, md, v, sizeof v);
    default_of(k, d, sizeof d);
    flag_of(k, f, sizeof f);
    const char *when = k->target == SPILL_KNOB_SAMPLING ? "per run (sampling)"
                       : k->live                        ? "live"
                                                        : "fixed at open";
    if (md)
      printf("| `%s` | `%s` | %s | %s | %s | %s |\n", k->name, f, v, d[0] ? d : "(none)", when,
             k->help);
    else
      printf("%-18s %-20s %-34s %-10s %-18s %s\n", k->name, f, v, d[0] ? d : "-", when, k->help);
  }
  return 0;
}
