/* harness/gnuplot_text.h: text we did not write (file names, trace paths,
 * config names, knob values) as gnuplot string literals, the one way the
 * CLI and the harness put such text into a gnuplot script (issue 26 item 3).
 *
 * gnuplot reads a script line by line: a single-quoted string has no
 * backquote, macro or backslash processing, but a quote ends it, a newline
 * ends the line and the string with it, and a file name that starts with '<'
 * (data) or '|' (output) is a command run by a shell. So the text becomes a
 * string expression of single-quoted pieces with each quote as "'" between
 * them ('a'."'".'b': valid wherever gnuplot takes a string: set output,
 * set title, plot's file and title), control bytes are refused in paths
 * (replaced by '?' in labels), and a relative path gets a "./" prefix.
 * Pure: no I/O, no allocation. */
#ifndef SPILL_HARNESS_GNUPLOT_TEXT_H
#define SPILL_HARNESS_GNUPLOT_TEXT_H

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

/* path as a gnuplot string expression ('./name' for a relative one) into out
 * (n bytes, NUL-terminated). 0, or -1 if path is empty or holds a control
 * byte (< 0x20 or 0x7f), -2 if it does not fit; out is then "''". */
int spill_gp_path(char *out, size_t n, const char *path);

/* s as a gnuplot string expression for a label (a title: shown, never opened) into out (n >= 3
 * bytes): control bytes become '?'; cut on a UTF-8 character boundary if it
 * does not fit, the closing quote always written. Returns out. */
const char *spill_gp_label(char *out, size_t n, const char *s);

#ifdef __cplusplus
}
#endif

#endif
