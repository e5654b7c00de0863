/* A software engine's place in the command words it interprets (docs/design.md,
 * "Queues and patch points"): the CPU device's engine and the MPI layer's communication thread read
 * the same rings and bound lists, follow CALLs the same way, run WAIT, SIGNAL and TIMESTAMP alike
 * and publish the same hang-report state. What differs (EXEC, COPY, where an entry comes from)
 * stays in each engine. */
#ifndef HCQ_CORE_CMD_CURSOR_H
#define HCQ_CORE_CMD_CURSOR_H

#include "core/command.h"
#include "core/hang_report.h"
#include "core/host_wait.h"
#include "core/signal.h"

typedef struct hcq__cmd_cursor {
  /* Written per command by the engine, read only by hang reports. */
  _Atomic(const uint32_t *) cur;       /* command being run or waited at (NULL: idle) */
  _Atomic(const uint32_t *) prev;      /* the command before it in the same list */
  _Atomic(const uint32_t *) call_base; /* the bound list being run (NULL: the ring) */
  /* When the engine began the command since_cmd (a kernel, a copy, a wait that blocked): a hang
   * report gives how long a queue has really been there, not how long since someone first looked.
   * since_cmd goes back to NULL when the cursor moves past it, so a replay of the same list does
   * not inherit the previous replay's time. */
  _Atomic(const uint32_t *) since_cmd;
  _Atomic uint64_t since_ns;
  /* The engine thread's own. */
  const uint32_t *w, *end;         /* next command and end of the list being run */
  const uint32_t *ret_w, *ret_end; /* inside a CALL: where the ring entry continues */
  bool stamped;                    /* since_cmd is the command at w */
} hcq__cmd_cursor_t;

/* The engine begins the command at w (now on hcq__now_ns's clock); once per visit to it. */
static inline void hcq__cursor_stamp(hcq__cmd_cursor_t *c, const uint32_t *w, uint64_t now) {
  atomic_store_explicit(&c->since_ns, now, memory_order_relaxed);
  atomic_store_explicit(&c->since_cmd, w, memory_order_release);
  c->stamped = true;
}

static inline void hcq__cursor_unstamp(hcq__cmd_cursor_t *c) {
  if (!c->stamped) return;
  atomic_store_explicit(&c->since_cmd, NULL, memory_order_relaxed);
  c->stamped = false;
}

/* Starts running the n words at w; base names the bound list they are (NULL: a ring entry). */
static inline void hcq__cursor_enter(hcq__cmd_cursor_t *c, const uint32_t *w, size_t n,
                                     const uint32_t *base) {
  c->w = w, c->end = w + n;
  atomic_store_explicit(&c->call_base, base, memory_order_relaxed);
  atomic_store_explicit(&c->prev, NULL, memory_order_relaxed);
}

/* At the end of the list being run: true when that was a CALL's list and the ring entry continues
 * after the CALL, false when the entry itself ended. */
static inline bool hcq__cursor_return(hcq__cmd_cursor_t *c) {
  if (!c->ret_w) return false;
  atomic_store_explicit(&c->prev, c->ret_w - HCQ__LEN_CALL, memory_order_relaxed);
  c->w = c->ret_w, c->end = c->ret_end, c->ret_w = c->ret_end = NULL;
  atomic_store_explicit(&c->call_base, NULL, memory_order_relaxed);
  return true;
}

/* Runs the CALL at w: its bound list next, then back after it. Returns the list. */
static inline const uint32_t *hcq__cursor_call(hcq__cmd_cursor_t *c, const uint32_t *w) {
  const uint32_t *list = (const uint32_t *)(uintptr_t)hcq__rd64(w + HCQ__CALL_PTR);
  c->ret_w = w + HCQ__LEN_CALL, c->ret_end = c->end;
  c->w = list, c->end = list + w[HCQ__CALL_LEN];
  atomic_store_explicit(&c->call_base, list, memory_order_relaxed);
  atomic_store_explicit(&c->prev, NULL, memory_order_relaxed);
  return list;
}

/* The command at w is done: on to the next one. */
static inline void hcq__cursor_advance(hcq__cmd_cursor_t *c, const uint32_t *w) {
  hcq__cursor_unstamp(c);
  atomic_store_explicit(&c->prev, w, memory_order_relaxed);
  c->w = w + HCQ__HDR_LEN(w[0]);
}

/* Everything queued was dropped (a lost device). */
static inline void hcq__cursor_clear(hcq__cmd_cursor_t *c) {
  c->w = c->end = c->ret_w = c->ret_end = NULL;
  hcq__cursor_unstamp(c);
  atomic_store_explicit(&c->cur, NULL, memory_order_relaxed);
  atomic_store_explicit(&c->call_base, NULL, memory_order_relaxed);
}

/* A hang report's view, the counters already in out: an idle queue is at no command. */
static inline void hcq__cursor_snapshot(hcq__cmd_cursor_t *c, hcq__engine_snapshot_t *out) {
  out->present = true;
  out->cur = atomic_load_explicit(&c->cur, memory_order_relaxed);
  out->prev = atomic_load_explicit(&c->prev, memory_order_relaxed);
  out->call_base = atomic_load_explicit(&c->call_base, memory_order_relaxed);
  /* since_ns was stored before since_cmd: read after it, it is that visit's time or a later one. */
  if (out->cur && atomic_load_explicit(&c->since_cmd, memory_order_acquire) == out->cur)
    out->cur_since_ns = atomic_load_explicit(&c->since_ns, memory_order_relaxed);
  if (out->completed >= out->submitted) out->cur = out->prev = NULL;
}

/* Runs the command at c->w (published as the current one first) when it is a WAIT, SIGNAL or
 * TIMESTAMP: HCQ__CMD_RAN (the cursor moved past it), HCQ__CMD_BLOCKED (a WAIT not met yet), or
 * HCQ__CMD_OTHER (none of them: the engine's own to run). clock(ctx) is read for a TIMESTAMP and
 * when a WAIT first blocks. */
enum { HCQ__CMD_RAN, HCQ__CMD_BLOCKED, HCQ__CMD_OTHER };
static inline int hcq__cursor_run_signal_op(hcq__cmd_cursor_t *c, uint64_t (*clock)(void *),
                                            void *ctx) {
  const uint32_t *w = c->w;
  atomic_store_explicit(&c->cur, w, memory_order_relaxed);
  switch (HCQ__HDR_OP(w[0])) {
    case HCQ__OP_WAIT: {
      const hcq__signal_words_t *s =
          (const hcq__signal_words_t *)(uintptr_t)hcq__rd64(w + HCQ__WAIT_ADDR);
      if (atomic_load_explicit(&s->value, memory_order_acquire) < w[HCQ__WAIT_VALUE]) {
        if (!c->stamped) hcq__cursor_stamp(c, w, clock(ctx));
        return HCQ__CMD_BLOCKED;
      }
      break;
    }
    case HCQ__OP_SIGNAL:
      hcq__signal_words_set((hcq__signal_words_t *)(uintptr_t)hcq__rd64(w + HCQ__SIGNAL_ADDR),
                            w[HCQ__SIGNAL_VALUE]);
      break;
    case HCQ__OP_TIMESTAMP: {
      hcq__signal_words_t *s = (hcq__signal_words_t *)(uintptr_t)hcq__rd64(w + HCQ__TIMESTAMP_ADDR);
      atomic_store_explicit(&s->timestamp, clock(ctx), memory_order_release);
      break;
    }
    default: return HCQ__CMD_OTHER;
  }
  hcq__cursor_advance(c, w);
  return HCQ__CMD_RAN;
}

#endif
