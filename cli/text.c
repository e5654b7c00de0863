/* Printing text the user gave back to them: a terminal must not run the escape sequences in it,
 * JSON must stay valid UTF-8, and a shortened echo ends on a character, not inside one. */
#include <stdio.h>

#include "cli/cli.h"
#include "model_utf8.h"

void cli_print_text(FILE *out, const char *text, size_t max_chars, bool json) {
  const unsigned char *s = (const unsigned char *)text;
  size_t n = 0;
  while (s[n]) n++;
  if (json) fputc('"', out);
  size_t chars = 0;
  for (size_t i = 0; i < n;) {
    if (max_chars && chars == max_chars) {
      fputs("...", out);
      break;
    }
    chars++;
    uint32_t cp;
    size_t len = hcq_model_utf8_decode(s + i, n - i, &cp);
    if (!len) { /* a byte that is not UTF-8: shown, never passed through */
      if (json)
        fputs("\\ufffd", out);
      else
        fprintf(out, "\\x%02x", s[i]);
      i++;
      continue;
    }
    const char *named = cp == '\n'          ? "\\n"
                        : cp == '\t'        ? "\\t"
                        : cp == '\r'        ? "\\r"
                        : cp == '\\'        ? "\\\\"
                        : json && cp == '"' ? "\\\""
                                            : NULL;
    if (named)
      fputs(named, out);
    else if (cp < 0x20 || (cp >= 0x7f && cp < 0xa0)) /* C0, DEL and C1 controls: ESC among them */
      fprintf(out, json || cp >= 0x80 ? "\\u%04x" : "\\x%02x", cp);
    else
      fwrite(s + i, 1, len, out);
    i += len;
  }
  if (json) fputc('"', out);
}
