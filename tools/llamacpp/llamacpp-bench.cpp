// llamacpp-bench: llama.cpp's decode and prompt rates on a GGUF, measured the way
// bench/llm_peers.py measures them through llama-cpp-python, so that tools/gpu-check.sh can set
// them beside `hcq generate --bench` on the same file and the same token ids.
//
//   llamacpp-bench --model FILE.gguf --chat-ids 1,2,3 --prompt-ids 4,5,6 [--steps 128] [--rounds 3]
//                  [--ctx 512] [--threads N] [--gpu-layers N] [--flash-attn auto|on|off]
//                  [--verbose]
//
// decode: the chat ids are evaluated as one batch from an empty cache (not timed), then --steps
//   tokens, each the argmax of the last logits (llama.cpp's greedy sampler) fed back one at a time;
//   tok/s = steps / the time of those steps.
// prompt: the prompt ids as one llama_decode from an empty cache, waited for; tok/s = ids / time.
// One warm-up of each, then --rounds rounds of one decode and three prompt passes; medians. Every
// layer on the GPU (--gpu-layers -1), n_ctx = n_batch = n_ubatch = --ctx, llama.cpp's defaults
// otherwise (flash attention "auto", an f16 KV cache, CUDA graphs as the build has them).
// Prints one JSON object on stdout; llama.cpp's log goes to stderr with --verbose only. Exit 1
// with the reason on stderr when anything fails.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "ggml-backend.h"
#include "ggml.h"
#include "llama.h"

namespace {

bool g_verbose = false;
std::string g_flash_attn_log;  // llama.cpp's log lines on flash attention: asked for, then what
                               // "auto" resolved to

void log_cb(ggml_log_level, const char *text, void *) {
  if (strstr(text, "flash_attn") || strstr(text, "Flash Attention")) g_flash_attn_log += text;
  if (g_verbose) fputs(text, stderr);
}

[[noreturn]] void die(const std::string &why) {
  fprintf(stderr, "llamacpp-bench: %s\n", why.c_str());
  exit(1);
}

std::vector<llama_token> parse_ids(const char *s) {
  std::vector<llama_token> ids;
  const char *p = s;
  while (*p) {
    char *end;
    long v = strtol(p, &end, 10);
    if (end == p || v < 0)
      die(std::string("token ids \"") + s +
          "\": expected non-negative integers separated by commas");
    ids.push_back((llama_token)v);
    p = *end == ',' ? end + 1 : end;
    if (*end && *end != ',')
      die(std::string("token ids \"") + s +
          "\": expected non-negative integers separated by commas");
  }
  if (ids.empty()) die("an empty list of token ids");
  return ids;
}

double now_s() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty()      ? 0
         : v.size() % 2 ? v[v.size() / 2]
                        : (v[v.size() / 2 - 1] + v[v.size() / 2]) / 2;
}

void json_string(const char *s) {
  putchar('"');
  for (; *s; s++) {
    unsigned char c = (unsigned char)*s;
    if (c == '"' || c == '\\')
      printf("\\%c", c);
    else if (c < 0x20)
      printf("\\u%04x", c);
    else
      putchar(c);
  }
  putchar('"');
}

template <typename T>
void json_list(const std::vector<T> &v, const char *fmt) {
  putchar('[');
  for (size_t i = 0; i < v.size(); i++) {
    if (i) printf(", ");
    printf(fmt, v[i]);
  }
  putchar(']');
}

struct Options {
  const char *model_path = nullptr, *chat_s = nullptr, *prompt_s = nullptr, *fa = "auto";
  int steps = 128, rounds = 3, ctx_size = 512, threads = 0, gpu_layers = -1;
};

Options parse_options(int argc, char **argv) {
  Options o;
  struct {
    const char *name;
    const char **text;
    int *number;
  } const table[] = {
      {"--model", &o.model_path, nullptr},    {"--chat-ids", &o.chat_s, nullptr},
      {"--prompt-ids", &o.prompt_s, nullptr}, {"--steps", nullptr, &o.steps},
      {"--rounds", nullptr, &o.rounds},       {"--ctx", nullptr, &o.ctx_size},
      {"--threads", nullptr, &o.threads},     {"--gpu-layers", nullptr, &o.gpu_layers},
      {"--flash-attn", &o.fa, nullptr},
  };
  for (int i = 1; i < argc; i++) {
    std::string opt = argv[i];
    if (opt == "--verbose") {
      g_verbose = true;
      continue;
    }
    if (i + 1 >= argc) die("unknown option or missing value: " + opt);
    const char *v = argv[++i];
    bool known = false;
    for (const auto &t : table) {
      if (opt != t.name) continue;
      if (t.text) *t.text = v;
      if (t.number) *t.number = atoi(v);
      known = true;
    }
    if (!known) die("unknown option " + opt);
  }
  if (!o.model_path || !o.chat_s || !o.prompt_s)
    die("usage: llamacpp-bench --model FILE.gguf --chat-ids IDS --prompt-ids IDS [...]");
  if (o.steps < 1 || o.rounds < 1 || o.ctx_size < 1)
    die("--steps, --rounds and --ctx must be positive");
  return o;
}

std::vector<std::string> device_names() {
  std::vector<std::string> devices;
  for (size_t i = 0; i < ggml_backend_dev_count(); i++) {
    ggml_backend_dev_t d = ggml_backend_dev_get(i);
    devices.push_back(std::string(ggml_backend_dev_name(d)) + ": " +
                      ggml_backend_dev_description(d));
  }
  return devices;
}

// The model and its context, with the token ids they run.
struct Bench {
  const Options &o;
  std::vector<llama_token> chat, prompt;
  llama_model *model = nullptr;
  llama_context *ctx = nullptr;
  llama_memory_t mem = nullptr;
  llama_sampler *greedy = nullptr;
  double load_s = 0;
};

void load(Bench &b) {
  const Options &o = b.o;
  llama_model_params mp = llama_model_default_params();
  mp.n_gpu_layers = o.gpu_layers;
  double t0 = now_s();
  b.model = llama_model_load_from_file(o.model_path, mp);
  if (!b.model)
    die(std::string("cannot load ") + o.model_path + " (--verbose shows llama.cpp's log)");
  llama_context_params cp = llama_context_default_params();
  cp.n_ctx = cp.n_batch = cp.n_ubatch = (uint32_t)o.ctx_size;
  if (o.threads > 0) cp.n_threads = cp.n_threads_batch = o.threads;
  cp.flash_attn_type = !strcmp(o.fa, "on")    ? LLAMA_FLASH_ATTN_TYPE_ENABLED
                       : !strcmp(o.fa, "off") ? LLAMA_FLASH_ATTN_TYPE_DISABLED
                                              : LLAMA_FLASH_ATTN_TYPE_AUTO;
  b.ctx = llama_init_from_model(b.model, cp);
  if (!b.ctx) die("cannot create a context (--verbose shows llama.cpp's log)");
  b.load_s = now_s() - t0;
  int n_vocab = llama_vocab_n_tokens(llama_model_get_vocab(b.model));
  for (llama_token t : b.chat)
    if (t >= n_vocab) die("token id " + std::to_string(t) + " is outside the vocabulary");
  for (llama_token t : b.prompt)
    if (t >= n_vocab) die("token id " + std::to_string(t) + " is outside the vocabulary");
  b.mem = llama_get_memory(b.ctx);
  b.greedy = llama_sampler_init_greedy();
}

void decode(Bench &b, std::vector<llama_token> ids) {
  int rc = llama_decode(b.ctx, llama_batch_get_one(ids.data(), (int32_t)ids.size()));
  if (rc != 0) die("llama_decode returned " + std::to_string(rc));
}

double run_decode(Bench &b, std::vector<llama_token> *out) {
  llama_memory_clear(b.mem, true);
  decode(b, b.chat);
  out->clear();
  double t = now_s();
  for (int i = 0; i < b.o.steps; i++) {
    llama_token tok = llama_sampler_sample(b.greedy, b.ctx, -1);  // the argmax of the last logits
    out->push_back(tok);
    decode(b, {tok});
  }
  llama_synchronize(b.ctx);
  return b.o.steps / (now_s() - t);
}

double run_prompt(Bench &b) {
  llama_memory_clear(b.mem, true);
  double t = now_s();
  decode(b, b.prompt);
  llama_synchronize(b.ctx);
  return b.prompt.size() / (now_s() - t);
}

struct Samples {
  std::vector<llama_token> ids;
  std::vector<double> dec, pre;
  bool same = true;
};

Samples measure(Bench &b) {
  Samples s;
  std::vector<llama_token> again;
  run_decode(b, &s.ids);  // warm-up: weights touched, kernels loaded, CUDA graphs captured
  run_prompt(b);
  for (int r = 0; r < b.o.rounds; r++) {
    s.dec.push_back(run_decode(b, &again));
    s.same = s.same && again == s.ids;
    for (int k = 0; k < 3; k++) s.pre.push_back(run_prompt(b));
  }
  return s;
}

// The last line of llama.cpp's log on flash attention: what "auto" resolved to.
std::string flash_attn_line() {
  std::string fa_line = g_flash_attn_log;
  while (!fa_line.empty() && (fa_line.back() == '\n' || fa_line.back() == ' ')) fa_line.pop_back();
  size_t nl = fa_line.rfind('\n');
  if (nl != std::string::npos) fa_line = fa_line.substr(nl + 1);
  return fa_line;
}

void print_json(const Bench &b, const std::vector<std::string> &devices, const Samples &s) {
  const Options &o = b.o;
  printf("{\"ggml_version\": ");
  json_string(ggml_version());
  printf(", \"ggml_commit\": ");
  json_string(ggml_commit());
  printf(", \"system_info\": ");
  json_string(llama_print_system_info());
  printf(", \"devices\": [");
  for (size_t i = 0; i < devices.size(); i++) {
    if (i) printf(", ");
    json_string(devices[i].c_str());
  }
  printf("], \"gpu_layers\": %d, \"n_ctx\": %d, \"flash_attn\": ", o.gpu_layers, o.ctx_size);
  json_string(o.fa);
  printf(", \"flash_attn_log\": ");
  json_string(flash_attn_line().c_str());
  printf(
      ", \"load_s\": %.3f, \"steps\": %d, \"chat_tokens\": %zu, \"prompt_tokens\": %zu, "
      "\"rounds\": %d",
      b.load_s, o.steps, b.chat.size(), b.prompt.size(), o.rounds);
  printf(", \"decode_tok_s\": %.1f, \"prompt_tok_s\": %.1f, \"decode_samples\": ", median(s.dec),
         median(s.pre));
  json_list(s.dec, "%.1f");
  printf(", \"prompt_samples\": ");
  json_list(s.pre, "%.1f");
  printf(", \"same_tokens_every_round\": %s, \"token_ids\": ", s.same ? "true" : "false");
  json_list(s.ids, "%d");
  printf("}\n");
}

}  // namespace

int main(int argc, char **argv) {
  Options o = parse_options(argc, argv);
  Bench b{o, parse_ids(o.chat_s), parse_ids(o.prompt_s)};
  if ((int)b.chat.size() + o.steps + 1 > o.ctx_size || (int)b.prompt.size() > o.ctx_size)
    die("the ids and steps do not fit in --ctx");
  llama_log_set(log_cb, nullptr);
  llama_backend_init();
  std::vector<std::string> devices = device_names();
  load(b);
  Samples s = measure(b);
  print_json(b, devices, s);
  llama_sampler_free(b.greedy);
  llama_free(b.ctx);
  llama_model_free(b.model);
  llama_backend_free();
  return 0;
}
