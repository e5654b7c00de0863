/* Hang reports (core/hang_report.h): each queue's current command in words, for how long, and what
 * finished last. */
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>

#include "core/command.h"
#include "core/device.h"
#include "core/hang_report.h"
#include "core/host_wait.h"
#include "core/program.h"
#include "core/queue.h"
#include "core/remote.h"
#include "core/signal.h"

static const char *op_name(uint32_t op) {
  static const char *const names[] = {
#define HCQ__OP_NAME(name, len) #name,
      HCQ__OPS(HCQ__OP_NAME)
#undef HCQ__OP_NAME
  };
  return op < sizeof(names) / sizeof(names[0]) ? names[op] : "?";
}

/* One command in words: "wait "CPU:1 timeline" >= 17 (value 16)", "exec kernel mix", ... plus its
 * graph item. */
static void describe_command(const uint32_t *w, char *out, size_t size) {
  uint32_t op = HCQ__HDR_OP(w[0]), tag = 0;
  char name[80];
  uint64_t value = 0;
  hcq_device_t *sdev = NULL;
  switch (op) {
    case HCQ__OP_WAIT:
    case HCQ__OP_SIGNAL: {
      uint64_t addr = hcq__rd64(w + HCQ__WAIT_ADDR);
      uint32_t want = w[HCQ__WAIT_VALUE];
      if (op == HCQ__OP_WAIT) tag = w[HCQ__WAIT_TAG];
      if (hcq__signal_lookup(addr, name, sizeof(name), &value, &sdev))
        snprintf(out, size, "%s \"%s\" %s %" PRIu32 " (value %" PRIu64 "%s%s)",
                 op == HCQ__OP_WAIT ? "wait" : "signal", name, op == HCQ__OP_WAIT ? ">=" : "=",
                 want, value, sdev && hcq__device_is_lost(sdev) ? ", its device " : "",
                 sdev && hcq__device_is_lost(sdev) ? "is lost" : "");
      else
        snprintf(out, size, "%s on the signal at 0x%" PRIx64 " %s %" PRIu32 " (not an hcq signal)",
                 op == HCQ__OP_WAIT ? "wait" : "signal", addr, op == HCQ__OP_WAIT ? ">=" : "=",
                 want);
      break;
    }
    case HCQ__OP_EXEC: {
      const hcq_program_t *p = (const hcq_program_t *)(uintptr_t)hcq__rd64(w + HCQ__EXEC_PROGRAM);
      tag = w[HCQ__EXEC_TAG];
      snprintf(out, size,
               "exec kernel %s, grid %" PRIu32 "x%" PRIu32 "x%" PRIu32 " of %" PRIu32 "x%" PRIu32
               "x%" PRIu32,
               p ? p->name : "?", w[HCQ__EXEC_GLOBAL], w[HCQ__EXEC_GLOBAL + 1],
               w[HCQ__EXEC_GLOBAL + 2], w[HCQ__EXEC_LOCAL], w[HCQ__EXEC_LOCAL + 1],
               w[HCQ__EXEC_LOCAL + 2]);
      break;
    }
    case HCQ__OP_COPY:
      tag = w[HCQ__COPY_TAG];
      snprintf(out, size, "copy of %" PRIu64 " bytes 0x%" PRIx64 " -> 0x%" PRIx64,
               hcq__rd64(w + HCQ__COPY_SIZE), hcq__rd64(w + HCQ__COPY_SRC),
               hcq__rd64(w + HCQ__COPY_DST));
      break;
    default: snprintf(out, size, "%s", op_name(op)); break;
  }
  uint32_t item;
  if (hcq__tag_item(tag, &item)) {
    size_t n = strlen(out);
    snprintf(out + n, size - n, ", graph item %" PRIu32, item);
  }
}

/* When the engine's current command was first seen (it is the same command while cur and the
 * completed count stay the same). */
static uint64_t watch_update(hcq_device_t *dev, hcq_queue_kind_t kind,
                             const hcq__engine_snapshot_t *s, uint64_t now) {
  pthread_mutex_lock(&dev->watch_lock);
  if (dev->watch_cmd[kind] != s->cur || dev->watch_completed[kind] != s->completed) {
    dev->watch_cmd[kind] = s->cur;
    dev->watch_completed[kind] = s->completed;
    dev->watch_since[kind] = now;
  }
  uint64_t since = dev->watch_since[kind];
  pthread_mutex_unlock(&dev->watch_lock);
  return since;
}

static void report_queue(hcq_device_t *dev, hcq_queue_kind_t kind, char *out, size_t size) {
  hcq__engine_snapshot_t s;
  memset(&s, 0, sizeof(s));
  if (dev->vt->snapshot) dev->vt->snapshot(dev, kind, &s);
  const char *qname = kind == HCQ_QUEUE_COMPUTE ? "compute" : "copy";
  if (!dev->vt->snapshot) {
    snprintf(out, size, "  %s queue: %s\n", qname,
             dev->vt->completed(dev, kind) >= dev->vt->submitted(dev, kind)
                 ? "idle"
                 : "busy (no detail from this backend)");
    return;
  }
  if (!s.present) {
    out[0] = '\0';
    return;
  }
  uint64_t now = hcq__now_ns(), since = watch_update(dev, kind, &s, now);
  if (s.cur_since_ns && s.cur_since_ns < since) since = s.cur_since_ns;
  if (!s.cur) {
    /* An engine busy on its other queue (a kernel) has not come to this one's work yet. */
    snprintf(out, size, "  %s queue: %s\n", qname,
             s.completed < s.submitted
                 ? "work queued, not started yet (its engine is busy on the other queue)"
                 : "idle, all work done");
    return;
  }
  char cur[256], prev[256] = "none in this command list", where[128] = "";
  describe_command(s.words_copied ? s.cur_words : s.cur, cur, sizeof(cur));
  if (s.prev) describe_command(s.words_copied ? s.prev_words : s.prev, prev, sizeof(prev));
  if (s.call_base) {
    char label[96];
    if (hcq__queue_find_bound(s.call_base, label, sizeof(label)))
      snprintf(where, sizeof(where), " in %s", label);
    else
      snprintf(where, sizeof(where), " in a bound queue");
  }
  const hcq__remote_hooks_t *hooks = atomic_load(&hcq__remote);
  bool remote_copy = HCQ__HDR_OP(s.cur[0]) == HCQ__OP_COPY &&
                     (hcq__addr_is_remote(hcq__rd64(s.cur + HCQ__COPY_DST)) ||
                      hcq__addr_is_remote(hcq__rd64(s.cur + HCQ__COPY_SRC)));
  if (hooks && (hcq__device_is_remote(dev) || remote_copy)) {
    size_t n = strlen(cur);
    hooks->describe(dev, s.cur, cur + n, sizeof(cur) - n);
  }
  uint32_t op = HCQ__HDR_OP(s.cur[0]);
  const char *state = op == HCQ__OP_WAIT ? "blocked at" : op == HCQ__OP_EXEC ? "running" : "at";
  snprintf(out, size, "  %s queue: %s %s%s, for at least %" PRIu64 " ms; last completed: %s\n",
           qname, state, cur, where, (now - since) / 1000000u, prev);
}

size_t hcq_device_report(hcq_device_t *dev, char *out, size_t size) {
  char buf[4096];
  size_t used = 0;
  if (!dev) {
    buf[0] = '\0';
  } else {
    used = (size_t)snprintf(
        buf, sizeof(buf), "%s%s%s%s:\n", dev->name, hcq__device_is_lost(dev) ? " (lost: " : "",
        hcq__device_is_lost(dev) ? dev->lost_reason : "", hcq__device_is_lost(dev) ? ")" : "");
    if (used >= sizeof(buf)) used = sizeof(buf) - 1;
    for (int k = 0; k < 2 && used < sizeof(buf) - 1; k++) {
      report_queue(dev, (hcq_queue_kind_t)k, buf + used, sizeof(buf) - used);
      used += strlen(buf + used);
    }
  }
  if (out && size) snprintf(out, size, "%s", buf);
  return used;
}

void hcq__device_touch_watch(hcq_device_t *const *devs, size_t ndevs) {
  uint64_t now = 0;
  for (size_t i = 0; i < ndevs; i++) {
    if (!devs[i] || !devs[i]->vt->snapshot) continue;
    if (!now) now = hcq__now_ns();
    for (int k = 0; k < 2; k++) {
      hcq__engine_snapshot_t s;
      memset(&s, 0, sizeof(s));
      devs[i]->vt->snapshot(devs[i], (hcq_queue_kind_t)k, &s);
      if (s.present) watch_update(devs[i], (hcq_queue_kind_t)k, &s, now);
    }
  }
}

hcq_status_t hcq__device_annotate_report(hcq_status_t st, hcq_device_t *const *devs, size_t ndevs) {
  if (!st || !ndevs) return st;
  char report[8192];
  size_t used = 0;
  for (size_t i = 0; i < ndevs && used < sizeof(report) - 1; i++) {
    bool dup = false;
    for (size_t k = 0; k < i; k++) dup |= devs[k] == devs[i];
    if (dup || !devs[i]) continue;
    used += hcq_device_report(devs[i], report + used, sizeof(report) - used);
  }
  if (!used) return st;
  if (report[used - 1] == '\n') report[used - 1] = '\0';
  hcq_status_t out =
      hcq_status_make(hcq_status_code(st), "%s\nhang report:\n%s", hcq_status_message(st), report);
  hcq_status_destroy(st);
  return out;
}
