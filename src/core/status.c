#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/status.h"
#include "hcq/status.h"

struct hcq_status {
  hcq_status_code_t code;
  char message[];
};

/* Returned when even the failure report cannot be allocated; never freed. */
static struct {
  hcq_status_code_t code;
  char message[64];
} hcq__status_oom = {HCQ_OUT_OF_MEMORY, "out of memory"};

static hcq_status_t oom_status(void) { return (hcq_status_t)(void *)&hcq__status_oom; }

hcq_status_code_t hcq_status_code(hcq_status_t status) { return status ? status->code : HCQ_OK; }

const char *hcq_status_message(hcq_status_t status) { return status ? status->message : ""; }

const char *hcq_status_code_name(hcq_status_code_t code) {
  static const char *const names[] = {
#define HCQ__STATUS_NAME(name, desc) #name,
      HCQ_STATUS_CODES(HCQ__STATUS_NAME)
#undef HCQ__STATUS_NAME
  };
  if ((unsigned)code >= sizeof(names) / sizeof(names[0])) return "UNKNOWN";
  return names[code];
}

void hcq_status_destroy(hcq_status_t status) {
  if (status && status != oom_status()) free(status);
}

hcq_status_t hcq_status_makev(hcq_status_code_t code, const char *fmt, va_list ap) {
  if (!fmt) fmt = "";
  va_list ap2;
  va_copy(ap2, ap);
  int len = vsnprintf(NULL, 0, fmt, ap2);
  va_end(ap2);
  if (len < 0) len = 0;
  struct hcq_status *s = malloc(sizeof(*s) + (size_t)len + 1);
  if (!s) return oom_status();
  s->code = code == HCQ_OK ? HCQ_INTERNAL : code;
  vsnprintf(s->message, (size_t)len + 1, fmt, ap);
  return s;
}

hcq_status_t hcq_status_make(hcq_status_code_t code, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  hcq_status_t s = hcq_status_makev(code, fmt, ap);
  va_end(ap);
  return s;
}

hcq_status_t hcq_status_annotate(hcq_status_t status, const char *fmt, ...) {
  if (!status || status == oom_status() || !fmt || !*fmt) return status;
  char prefix[512];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(prefix, sizeof(prefix), fmt, ap);
  va_end(ap);
  hcq_status_t out = hcq_status_make(status->code, "%s: %s", prefix, status->message);
  if (out == oom_status()) return status; /* keep the original rather than lose it */
  hcq_status_destroy(status);
  return out;
}

bool hcq__is_c_identifier(const char *s) {
  if (!((*s >= 'a' && *s <= 'z') || (*s >= 'A' && *s <= 'Z') || *s == '_')) return false;
  for (s++; *s; s++)
    if (!((*s >= 'a' && *s <= 'z') || (*s >= 'A' && *s <= 'Z') || (*s >= '0' && *s <= '9') ||
          *s == '_'))
      return false;
  return true;
}

void hcq__quote(const char *s, char *out, size_t size) {
  size_t len = 0;
  out[len++] = '"';
  for (; *s && len + 6 < size; s++) {
    unsigned char c = (unsigned char)*s;
    if (c == '\n')
      len += (size_t)snprintf(out + len, size - len, "\\n");
    else if (c == '\t')
      len += (size_t)snprintf(out + len, size - len, "\\t");
    else if (c == '"' || c == '\\')
      len += (size_t)snprintf(out + len, size - len, "\\%c", c);
    else if (c < 0x20 || c >= 0x7f)
      len += (size_t)snprintf(out + len, size - len, "\\x%02x", c);
    else
      out[len++] = (char)c;
  }
  snprintf(out + len, size - len, "\"");
}
