#include "model_utf8.h"

size_t hcq_model_utf8_decode(const unsigned char *s, size_t n, uint32_t *out) {
  if (s[0] < 0x80) return *out = s[0], 1;
  size_t len = s[0] >= 0xC2 && s[0] < 0xE0    ? 2
               : s[0] >= 0xE0 && s[0] < 0xF0  ? 3
               : s[0] >= 0xF0 && s[0] <= 0xF4 ? 4
                                              : 0;
  if (!len || len > n) return 0;
  uint32_t c = s[0] & (0x7F >> len);
  for (size_t i = 1; i < len; i++) {
    if ((s[i] & 0xC0) != 0x80) return 0;
    c = c << 6 | (s[i] & 0x3F);
  }
  static const uint32_t least[5] = {0, 0, 0x80, 0x800, 0x10000};
  if (c < least[len] || c > 0x10FFFF || (c >= 0xD800 && c < 0xE000)) return 0;
  *out = c;
  return len;
}

size_t hcq_model_utf8_encode(uint32_t c, unsigned char *o) {
  if (c < 0x80) return o[0] = (unsigned char)c, 1;
  if (c < 0x800)
    return o[0] = (unsigned char)(0xC0 | c >> 6), o[1] = (unsigned char)(0x80 | (c & 0x3F)), 2;
  if (c < 0x10000) {
    o[0] = (unsigned char)(0xE0 | c >> 12), o[1] = (unsigned char)(0x80 | (c >> 6 & 0x3F));
    o[2] = (unsigned char)(0x80 | (c & 0x3F));
    return 3;
  }
  o[0] = (unsigned char)(0xF0 | c >> 18), o[1] = (unsigned char)(0x80 | (c >> 12 & 0x3F));
  o[2] = (unsigned char)(0x80 | (c >> 6 & 0x3F)), o[3] = (unsigned char)(0x80 | (c & 0x3F));
  return 4;
}
