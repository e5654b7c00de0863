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

}  // namespace

int main(int argc, char **argv) {
  const char *model_path = nullptr, *chat_s = nullptr, *prompt_s = nullptr, *fa = "auto";
  int steps = 128, rounds = 3, ctx_size = 512, threads = 0, gpu_layers = -1;
  for (int i = 1; i < argc; i++) {
    std::string o = argv[i];
    if (o == "--verbose") {
      g_verbose = true;
      continue;
    }
    if (i + 1 >= argc) die("unknown option or missing value: " + o);
    const char *v = argv[++i];
    if (o == "--model")
      model_path = v;
    else if (o == "--chat-ids")
      chat_s = v;
    else if (o == "--prompt-ids")
      prompt_s = v;
    else if (o == "--steps")
      steps = atoi(v);
    else if (o == "--rounds")
      rounds = atoi(v);
    else if (o == "--ctx")
      ctx_size = atoi(v);
    else if (o == "--threads")
      threads = atoi(v);
    else if (o == "--gpu-layers")
      gpu_layers = atoi(v);
    else if (o == "--flash-attn")
      fa = v;
    else
      die("unknown option " + o);
  }
  if (!model_path || !chat_s || !prompt_s)
    die("usage: llamacpp-bench --model FILE.gguf --chat-ids IDS --prompt-ids IDS [...]");
  if (steps < 1 || rounds < 1 || ctx_size < 1) die("--steps, --rounds and --ctx must be positive");
  std::vector<llama_token> chat = parse_ids(chat_s), prompt = parse_ids(prompt_s);
  if ((int)chat.size() + steps + 1 > ctx_size || (int)prompt.size() > ctx_size)
    die("the ids and steps do not fit in --ctx");

  llama_log_set(log_cb, nullptr);
  llama_backend_init();
  std::vector<std::string> devices;
  for (size_t i = 0; i < ggml_backend_dev_count(); i++) {
    ggml_backend_dev_t d = ggml_backend_dev_get(i);
    devices.push_back(std::string(ggml_backend_dev_name(d)) + ": " +
                      ggml_backend_dev_description(d));
  }

  llama_model_params mp = llama_model_default_params();
  mp.n_gpu_layers = gpu_layers;
  double t0 = now_s();
  llama_model *model = llama_model_load_from_file(model_path, mp);
  if (!model) die(std::string("cannot load ") + model_path + " (--verbose shows llama.cpp's log)");
  llama_context_params cp = llama_context_default_params();
  cp.n_ctx = cp.n_batch = cp.n_ubatch = (uint32_t)ctx_size;
  if (threads > 0) cp.n_threads = cp.n_threads_batch = threads;
  cp.flash_attn_type = !strcmp(fa, "on")    ? LLAMA_FLASH_ATTN_TYPE_ENABLED
                       : !strcmp(fa, "off") ? LLAMA_FLASH_ATTN_TYPE_DISABLED
                                            : LLAMA_FLASH_ATTN_TYPE_AUTO;
  llama_context *ctx = llama_init_from_model(model, cp);
  if (!ctx) die("cannot create a context (--verbose shows llama.cpp's log)");
  double load_s = now_s() - t0;
  const llama_vocab *vocab = llama_model_get_vocab(model);
  int n_vocab = llama_vocab_n_tokens(vocab);
  for (llama_token t : chat)
    if (t >= n_vocab) die("token id " + std::to_string(t) + " is outside the vocabulary");
  for (llama_token t : prompt)
    if (t >= n_vocab) die("token id " + std::to_string(t) + " is outside the vocabulary");
  llama_memory_t mem = llama_get_memory(ctx);
  llama_sampler *greedy = llama_sampler_init_greedy();

  auto decode = [&](std::vector<llama_token> ids) {
    int rc = llama_decode(ctx, llama_batch_get_one(ids.data(), (int32_t)ids.size()));
    if (rc != 0) die("llama_decode returned " + std::to_string(rc));
  };
  auto run_decode = [&](std::vector<llama_token> *out) {
    llama_memory_clear(mem, true);
    decode(chat);
    out->clear();
    double t = now_s();
    for (int i = 0; i < steps; i++) {
      llama_token tok = llama_sampler_sample(greedy, ctx, -1);  // the argmax of the last logits
      out->push_back(tok);
      decode({tok});
    }
    llama_synchronize(ctx);
    return steps / (now_s() - t);
  };
  auto run_prompt = [&]() {
    llama_memory_clear(mem, true);
    double t = now_s();
    decode(prompt);
    llama_synchronize(ctx);
    return prompt.size() / (now_s() - t);
  };

  std::vector<llama_token> ids, again;
  run_decode(&ids);  // warm-up: weights touched, kernels loaded, CUDA graphs captured
  run_prompt();
  std::vector<double> dec, pre;
  bool same = true;
  for (int r = 0; r < rounds; r++) {
    dec.push_back(run_decode(&again));
    same = same && again == ids;
    for (int k = 0; k < 3; k++) pre.push_back(run_prompt());
  }

  std::string fa_line = g_flash_attn_log;
  while (!fa_line.empty() && (fa_line.back() == '\n' || fa_line.back() == ' ')) fa_line.pop_back();
  size_t nl = fa_line.rfind('\n');
  if (nl != std::string::npos) fa_line = fa_line.substr(nl + 1);
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
  printf("], \"gpu_layers\": %d, \"n_ctx\": %d, \"flash_attn\": ", gpu_layers, ctx_size);
  json_string(fa);
  printf(", \"flash_attn_log\": ");
  json_string(fa_line.c_str());
  printf(
      ", \"load_s\": %.3f, \"steps\": %d, \"chat_tokens\": %zu, \"prompt_tokens\": %zu, "
      "\"rounds\": %d",
      load_s, steps, chat.size(), prompt.size(), rounds);
  printf(", \"decode_tok_s\": %.1f, \"prompt_tok_s\": %.1f, \"decode_samples\": ", median(dec),
         median(pre));
  json_list(dec, "%.1f");
  printf(", \"prompt_samples\": ");
  json_list(pre, "%.1f");
  printf(", \"same_tokens_every_round\": %s, \"token_ids\": ", same ? "true" : "false");
  json_list(ids, "%d");
  printf("}\n");
  llama_sampler_free(greedy);
  llama_free(ctx);
  llama_model_free(model);
  llama_backend_free();
  return 0;
}
