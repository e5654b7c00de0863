/* The llama2 decoder on hcq (models/llama2), as `hcq demo` runs it: tokens/s of graph replays
 * and of eager launches, steps queued back to back, median over repetitions (bench/rows.h rows).
 *
 *   decoder_hcq [STEPS] [REPS] [KIND]                 (defaults 256, 5 and CPU)
 *
 * On a GPU kind (VULKAN, CUDA) the rows go to sections of their own, "decoder small on VULKAN",
 * against hcq's own eager launches, with the host's time to submit a step as a second section;
 * an absent kind prints one "missing" row with `hcq info`'s reason.
 */
#include <string.h>

#include "llama2.h"
#include "rows.h"

#define CHECK(call)                                                             \
  do {                                                                          \
    hcq_status_t st_ = (call);                                                  \
    if (st_) {                                                                  \
      fprintf(stderr, "decoder_hcq: %s: %s\n", #call, hcq_status_message(st_)); \
      exit(1);                                                                  \
    }                                                                           \
  } while (0)

static bool parse_kind(const char *name, hcq_device_kind_t *kind) {
  for (int k = 0; k < HCQ_DEVICE_KIND_COUNT; k++)
    if (!strcmp(name, hcq_device_kind_name((hcq_device_kind_t)k))) {
      *kind = (hcq_device_kind_t)k;
      return true;
    }
  return false;
}

/* Mesa's lavapipe runs each dispatch on its thread pool (LP_NUM_THREADS, default one thread per
 * core) or, with LP_NUM_THREADS=0, on its queue thread: a setting of the driver, so its rows get
 * sections of their own. */
static const char *driver_setting(void) {
  const char *lp = getenv("LP_NUM_THREADS");
  static char buf[64];
  if (!lp || !*lp) return "";
  snprintf(buf, sizeof(buf), " (lavapipe LP_NUM_THREADS=%s)", lp);
  return buf;
}

int main(int argc, char **argv) {
  int steps = argc > 1 ? atoi(argv[1]) : 256, reps = argc > 2 ? atoi(argv[2]) : 5;
  hcq_device_kind_t kind = HCQ_DEVICE_CPU;
  if (reps < 1 || reps > LLAMA2_MAX_REPS || steps < 1 ||
      (argc > 3 && !parse_kind(argv[3], &kind))) {
    fprintf(stderr, "usage: decoder_hcq [STEPS] [REPS 1..%d] [CPU|CUDA|METAL|VULKAN]\n",
            LLAMA2_MAX_REPS);
    return 2;
  }
  const char *kname = hcq_device_kind_name(kind);
  bool gpu = kind != HCQ_DEVICE_CPU;
  const llama2_shape_t shapes[2] = {LLAMA2_SHAPE_SMALL, LLAMA2_SHAPE_15M};
  const char *shape_names[2] = {"decoder small", "decoder 15m"};
  hcq_device_info_t infos[HCQ_DEVICE_KIND_COUNT];
  size_t ninfo = hcq_device_query(infos, HCQ_DEVICE_KIND_COUNT);
  for (size_t i = 0; i < ninfo && i < HCQ_DEVICE_KIND_COUNT; i++)
    if (infos[i].kind == kind && !infos[i].available) {
      char section[64], name[48], note[400];
      snprintf(section, sizeof(section), "decoder small on %s", kname);
      snprintf(name, sizeof(name), "hcq eager on %s", kname);
      snprintf(note, sizeof(note), "missing: no %s device (%s)", kname, infos[i].description);
      emit_row(section, name, -1, "", note);
      return 0;
    }
  for (int s = 0; s < 2; s++) {
    llama2_checkpoint_t ck;
    CHECK(llama2_checkpoint_generate(shapes[s], 42, &ck));
    int n = steps < ck.config.seq_len ? steps : ck.config.seq_len;
    llama2_decoder_options_t opts = {1, 0, false, kind};
    llama2_decoder_t *dec;
    CHECK(llama2_decoder_create(&ck, &opts, &dec));
    llama2_checkpoint_free(&ck);
    int32_t *eager_tokens = calloc((size_t)n, 4), *graph_tokens = calloc((size_t)n, 4);
    llama2_timing_t eager, graph;
    CHECK(llama2_decoder_time(dec, false, n, reps, &eager, eager_tokens));
    CHECK(llama2_decoder_capture(dec, 0));
    CHECK(llama2_decoder_time(dec, true, n, reps, &graph, graph_tokens));
    bool same = !memcmp(eager_tokens, graph_tokens, (size_t)n * 4);
    size_t kernels = llama2_decoder_kernels_per_step(dec);
    char section[128], host_section[160], eager_name[48], note[160];
    snprintf(section, sizeof(section), gpu ? "%s on %s%s" : "%s", shape_names[s], kname,
             driver_setting());
    snprintf(eager_name, sizeof(eager_name), gpu ? "hcq eager on %s" : "hcq eager", kname);
    snprintf(note, sizeof(note), "%zu kernels/token, one captured step replayed (%d steps)%s",
             kernels, n, same ? "" : "; TOKENS DIFFER FROM EAGER");
    if (gpu) { /* the section's baseline (report.py) comes first */
      char enote[96];
      snprintf(enote, sizeof(enote), "%zu launches/token, kernel by kernel (%d steps)", kernels, n);
      emit_row(section, eager_name, eager.tok_s, "tok/s", enote);
      emit_row(section, "hcq graph replay", graph.tok_s, "tok/s", note);
      snprintf(host_section, sizeof(host_section), "%s: host us to submit a step", section);
      emit_row(host_section, eager_name, eager.host_us, "us",
               "every launch of a step, the device idle before it");
      emit_row(host_section, "hcq graph replay", graph.host_us, "us",
               "one replay, the device idle before it");
    } else {
      emit_row(section, "hcq graph replay", graph.tok_s, "tok/s", note);
      snprintf(note, sizeof(note), "%zu launches/token, kernel by kernel (%d steps)", kernels, n);
      emit_row(section, eager_name, eager.tok_s, "tok/s", note);
    }
    free(eager_tokens);
    free(graph_tokens);
    CHECK(llama2_decoder_destroy(dec));
  }
  return 0;
}
