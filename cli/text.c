/* Printing text the user gave back to them: a terminal must not run the escape sequences in it,
 * JSON must stay valid UTF-8, and a shortened echo ends on a character, not inside one. */
#include <stdio.h>

#include "cli/cli.h"

/* The length of the UTF-8 sequence at s (n bytes left) and its code point; 0 when malformed
 * (overlong, a surrogate, beyond U+10FFFF, cut short). */
static size_t utf8_next(const unsigned char *s, size_t n, unsigned *cp) {
  if (s[0] < 0x80) return *cp = s[0], 1;
  size_t len = s[0] >= 0xc2 && s[0] <= 0xdf ? 2 : s[0] >= 0xe0 && s[0] <= 0xef ? 3 : s[0] >= 0xf0 && s[0] <= 0xf4 ? 4 : 0;
  if (!len || len > n) return 0;
  unsigned v = s[0] & (0x7f >> len);
  for (size_t i = 1; i < len; i++) {
    if ((s[i] & 0xc0) != 0x80) return 0;
    v = v << 6 | (s[i] & 0x3f);
  }
  static const unsigned least[] = {0, 0, 0x80, 0x800, 0x10000};
  if (v < least[len] || (v >= 0xd800 && v <= 0xdfff) || v > 0x10ffff) return 0;
  return *cp = v, len;
}

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
    unsigned cp;
    size_t len = utf8_next(s + i, n - i, &cp);
    if (!len) { /* a byte that is not UTF-8: shown, never passed through */
      if (json) fputs("\\ufffd", out);
      else fprintf(out, "\\x%02x", s[i]);
      i++;
      continue;
    }
    const char *named = cp == '\n' ? "\\n" : cp == '\t' ? "\\t" : cp == '\r' ? "\\r" : cp == '\\' ? "\\\\"
                        : json && cp == '"' ? "\\\"" : NULL;
    if (named) fputs(named, out);
    else if (cp < 0x20 || (cp >= 0x7f && cp < 0xa0)) /* C0, DEL and C1 controls: ESC among them */
      fprintf(out, json || cp >= 0x80 ? "\\u%04x" : "\\x%02x", cp);
    else fwrite(s + i, 1, len, out);
    i += len;
  }
  if (json) fputc('"', out);
}
