/* hcq inspect: what a GGUF file holds and whether hcq can run it, without loading it: the
 * architecture and its dimensions (read under the architecture's prefix: "gemma3.block_count"), the
 * tensors' types, the tokenizer and chat template, and per device kind whether hcq runs it
 * (models/llm/support.h). Everything is gathered into one JSON object; --json prints it, otherwise
 * a few aligned lines. A file that reads exits 0 whatever it holds; metadata of an unexpected type
 * shows as absent. Only a file that does not read (missing, damaged) is an error. */
#include <jansson.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/cli.h"
#include "fetch.h"
#include "gguf.h"
#include "model_utf8.h"
#include "support.h"

/* A string of the file as valid UTF-8 without NUL bytes: U+FFFD for what is not (malloc'd). */
static char *file_text(gguf_str_t s) {
  size_t cap = (size_t)s.len * 3 + 1;
  char *out = malloc(cap);
  if (!out) return NULL;
  size_t o = 0;
  const unsigned char *p = (const unsigned char *)s.ptr;
  for (size_t i = 0; i < s.len;) {
    uint32_t cp;
    size_t len = hcq_model_utf8_decode(p + i, (size_t)s.len - i, &cp);
    if (len && cp) {
      memcpy(out + o, p + i, len), o += len, i += len;
    } else {
      memcpy(out + o, "\xef\xbf\xbd", 3), o += 3, i++;
    }
  }
  out[o] = 0;
  return out;
}

static json_t *text_json(gguf_str_t s) {
  char *t = file_text(s);
  json_t *j = t ? json_string(t) : NULL;
  free(t);
  return j ? j : json_null();
}

/* A C string that may not be UTF-8 (a path, a message naming one). */
static json_t *cstr_json(const char *s) { return text_json((gguf_str_t){s, strlen(s)}); }

/* A string value, or null when absent or of another type. */
static json_t *str_json(const gguf_file_t *g, const char *key) {
  const gguf_kv_t *kv = gguf_find_kv(g, key);
  gguf_str_t s;
  if (!kv || kv->type != GGUF_STRING) return json_null();
  hcq_status_t st = gguf_get_str(g, key, &s);
  if (st) return hcq_status_destroy(st), json_null();
  return text_json(s);
}

static json_t *int_json(const gguf_file_t *g, const char *key) {
  int64_t v;
  if (!gguf_find_kv(g, key)) return json_null();
  hcq_status_t st = gguf_get_i64(g, key, &v);
  if (st) return hcq_status_destroy(st), json_null();
  return json_integer(v);
}

static json_t *arch_int(const gguf_file_t *g, const char *arch, const char *suffix) {
  char key[192];
  snprintf(key, sizeof(key), "%s.%s", arch, suffix);
  return int_json(g, key);
}

static json_int_t int_or(const json_t *j, json_int_t fallback) {
  return json_is_integer(j) ? json_integer_value(j) : fallback;
}

/* Elements of every tensor, and how many tensors of each type (in the order the types first
 * appear). */
static void add_tensors(json_t *root, const gguf_file_t *g) {
  json_t *types = json_object();
  uint64_t params = 0;
  for (size_t i = 0; i < gguf_tensor_count(g); i++) {
    const gguf_tensor_t *t = gguf_tensor_at(g, i);
    uint64_t elems = 1;
    for (uint32_t d = 0; d < t->n_dims; d++) elems *= t->ne[d]; /* gguf_open checked the product */
    params += elems;
    const char *name = ggml_type_name(t->type);
    json_object_set_new(types, name, json_integer(int_or(json_object_get(types, name), 0) + 1));
  }
  json_object_set_new(root, "parameters", json_integer((json_int_t)params));
  json_object_set_new(root, "tensors", json_integer((json_int_t)gguf_tensor_count(g)));
  json_object_set_new(root, "tensor_types", types);
}

/* The dimensions under the architecture's prefix; head_dim and vocab derived when not given. */
static void add_dimensions(json_t *root, const gguf_file_t *g, const char *arch) {
  json_t *heads = arch_int(g, arch, "attention.head_count"),
         *dim = arch_int(g, arch, "embedding_length");
  json_t *kv_heads = arch_int(g, arch, "attention.head_count_kv"),
         *head_dim = arch_int(g, arch, "attention.key_length");
  if (json_is_null(kv_heads) && json_is_integer(heads))
    json_decref(kv_heads), kv_heads = json_integer(json_integer_value(heads));
  if (json_is_null(head_dim) && int_or(heads, 0) > 0 && json_is_integer(dim))
    json_decref(head_dim),
        head_dim = json_integer(json_integer_value(dim) / json_integer_value(heads));
  json_t *vocab = arch_int(g, arch, "vocab_size");
  const gguf_kv_t *tokens = gguf_find_kv(g, "tokenizer.ggml.tokens");
  const gguf_tensor_t *embd = gguf_find_tensor(g, "token_embd.weight");
  if (json_is_null(vocab) && tokens && tokens->type == GGUF_ARRAY)
    json_decref(vocab), vocab = json_integer((json_int_t)tokens->count);
  else if (json_is_null(vocab) && embd && embd->n_dims == 2)
    json_decref(vocab), vocab = json_integer((json_int_t)embd->ne[1]);
  json_object_set_new(root, "layers", arch_int(g, arch, "block_count"));
  json_object_set_new(root, "dim", dim);
  json_object_set_new(root, "heads", heads);
  json_object_set_new(root, "kv_heads", kv_heads);
  json_object_set_new(root, "head_dim", head_dim);
  json_object_set_new(root, "ffn", arch_int(g, arch, "feed_forward_length"));
  json_object_set_new(root, "vocab", vocab);
  json_object_set_new(root, "context_length", arch_int(g, arch, "context_length"));
}

/* The token's text when id is in the vocabulary, else null. */
static json_t *token_text(const gguf_str_t *tokens, uint64_t count, const json_t *id) {
  if (!json_is_integer(id) || json_integer_value(id) < 0 ||
      (uint64_t)json_integer_value(id) >= count)
    return json_null();
  return text_json(tokens[json_integer_value(id)]);
}

static json_t *tokenizer_json(const gguf_file_t *g) {
  json_t *tok = json_object();
  json_object_set_new(tok, "model", str_json(g, "tokenizer.ggml.model"));
  json_object_set_new(tok, "pre", str_json(g, "tokenizer.ggml.pre"));
  gguf_str_t *tokens = NULL;
  uint64_t count = 0;
  const gguf_kv_t *kv = gguf_find_kv(g, "tokenizer.ggml.tokens");
  if (kv && kv->type == GGUF_ARRAY && kv->elem_type == GGUF_STRING) {
    hcq_status_t st = gguf_get_str_array(g, "tokenizer.ggml.tokens", &tokens, &count);
    if (st) hcq_status_destroy(st), tokens = NULL, count = 0;
  }
  json_object_set_new(tok, "tokens", tokens ? json_integer((json_int_t)count) : json_null());
  json_t *bos = int_json(g, "tokenizer.ggml.bos_token_id"),
         *eos = int_json(g, "tokenizer.ggml.eos_token_id");
  json_object_set_new(tok, "bos_id", bos);
  json_object_set_new(tok, "bos", token_text(tokens, count, bos));
  json_object_set_new(tok, "eos_id", eos);
  json_object_set_new(tok, "eos", token_text(tokens, count, eos));
  free(tokens);
  const gguf_kv_t *add_bos = gguf_find_kv(g, "tokenizer.ggml.add_bos_token");
  json_object_set_new(
      tok, "add_bos",
      add_bos && add_bos->type == GGUF_BOOL ? json_boolean(add_bos->data[0]) : json_null());
  return tok;
}

/* The template's family by a marker it contains (the first that matches). */
static const char *template_name(gguf_str_t s) {
  static const struct {
    const char *marker, *name;
  } k_markers[] = {{"<|im_start|>", "chatml"},
                   {"<|start_header_id|>", "llama3"},
                   {"<start_of_turn>", "gemma"},
                   {"[INST]", "llama2"}};
  for (size_t i = 0; i < sizeof(k_markers) / sizeof(k_markers[0]); i++)
    if (memmem(s.ptr, (size_t)s.len, k_markers[i].marker, strlen(k_markers[i].marker)))
      return k_markers[i].name;
  return NULL;
}

static json_t *chat_template_json(const gguf_file_t *g) {
  const gguf_kv_t *kv = gguf_find_kv(g, "tokenizer.chat_template");
  gguf_str_t s;
  hcq_status_t st =
      kv && kv->type == GGUF_STRING ? gguf_get_str(g, "tokenizer.chat_template", &s) : NULL;
  if (st) hcq_status_destroy(st);
  if (!kv || kv->type != GGUF_STRING || st)
    return json_pack("{s:b, s:n, s:n}", "present", 0, "bytes", "name");
  const char *name = template_name(s);
  return json_pack("{s:b, s:I, s:o}", "present", 1, "bytes", (json_int_t)s.len, "name",
                   name ? json_string(name) : json_null());
}

static json_t *support_json(const gguf_file_t *g) {
  json_t *support = json_object();
  for (int k = 0; k < HCQ_DEVICE_KIND_COUNT; k++) { /* every kind hcq knows */
    hcq_device_kind_t kind = (hcq_device_kind_t)k;
    hcq_status_t st = llm_model_check(g, kind);
    json_t *why = st ? cstr_json(hcq_status_message(st)) : json_null();
    hcq_status_destroy(st);
    json_object_set_new(support, hcq_device_kind_name(kind),
                        json_pack("{s:b, s:o}", "runs", st == NULL, "why", why));
  }
  return support;
}

static json_t *inspect_json(const gguf_file_t *g, const char *given) {
  json_t *root = json_object();
  json_object_set_new(root, "file", cstr_json(given));
  json_object_set_new(root, "path", cstr_json(gguf_path(g)));
  json_object_set_new(root, "file_bytes", json_integer((json_int_t)gguf_file_size(g)));
  json_object_set_new(root, "gguf_version", json_integer(gguf_version(g)));
  json_t *arch = str_json(g, "general.architecture");
  json_object_set_new(root, "architecture", arch);
  json_object_set_new(root, "name", str_json(g, "general.name"));
  add_tensors(root, g);
  add_dimensions(root, g, json_is_string(arch) ? json_string_value(arch) : "(none)");
  json_object_set_new(root, "tokenizer", tokenizer_json(g));
  json_object_set_new(root, "chat_template", chat_template_json(g));
  json_object_set_new(root, "support", support_json(g));
  return root;
}

/* ---- the text form ---- */

static void print_label(const char *label) { printf("%-14s ", label); }

/* A value as text: null as "-", strings escaped (cli_print_text), numbers as they are. */
static void print_value(const json_t *v) {
  if (json_is_string(v))
    cli_print_text(stdout, json_string_value(v), 0, false);
  else if (json_is_integer(v))
    printf("%" JSON_INTEGER_FORMAT, json_integer_value(v));
  else if (json_is_boolean(v))
    printf("%s", json_is_true(v) ? "yes" : "no");
  else
    printf("-");
}

static void print_line(const json_t *root, const char *label, const char *key) {
  print_label(label);
  print_value(json_object_get(root, key));
  printf("\n");
}

/* 268098176 as "268,098,176". */
static void print_grouped(json_int_t v) {
  char digits[32];
  int n = snprintf(digits, sizeof(digits), "%" JSON_INTEGER_FORMAT, v);
  for (int i = 0; i < n; i++) printf("%s%c", i && (n - i) % 3 == 0 ? "," : "", digits[i]);
}

static void print_tokenizer(const json_t *tok) {
  print_label("tokenizer");
  print_value(json_object_get(tok, "model"));
  printf(" (pre-tokenizer ");
  print_value(json_object_get(tok, "pre"));
  printf("), ");
  print_value(json_object_get(tok, "tokens"));
  printf(" tokens\n");
  static const char *const ends[] = {"bos", "eos"};
  for (int i = 0; i < 2; i++) {
    char id_key[8];
    snprintf(id_key, sizeof(id_key), "%s_id", ends[i]);
    print_label(ends[i]);
    print_value(json_object_get(tok, id_key));
    printf(" ");
    json_t *text = json_object_get(tok, ends[i]);
    if (json_is_string(text)) cli_print_text(stdout, json_string_value(text), 40, true);
    printf("\n");
  }
  print_line(tok, "add_bos", "add_bos");
}

static void print_text(const json_t *root) {
  print_label("file");
  print_value(json_object_get(root, "path"));
  printf(" (");
  print_grouped(json_integer_value(json_object_get(root, "file_bytes")));
  printf(" bytes, GGUF v%" JSON_INTEGER_FORMAT ")\n",
         json_integer_value(json_object_get(root, "gguf_version")));
  print_line(root, "architecture", "architecture");
  print_line(root, "name", "name");
  print_label("parameters");
  print_grouped(json_integer_value(json_object_get(root, "parameters")));
  printf(" (%.1f M)\n", (double)json_integer_value(json_object_get(root, "parameters")) / 1e6);
  static const char *const dims[][2] = {
      {"layers", "layers"},     {"dim", "dim"}, {"heads", "heads"}, {"kv heads", "kv_heads"},
      {"head dim", "head_dim"}, {"ffn", "ffn"}, {"vocab", "vocab"}, {"context", "context_length"}};
  for (size_t i = 0; i < sizeof(dims) / sizeof(dims[0]); i++)
    print_line(root, dims[i][0], dims[i][1]);
  print_label("tensors");
  print_value(json_object_get(root, "tensors"));
  const char *type, *sep = ": ";
  json_t *count;
  json_object_foreach(json_object_get(root, "tensor_types"), type, count) {
    printf("%s%s %" JSON_INTEGER_FORMAT, sep, type, json_integer_value(count));
    sep = ", ";
  }
  printf("\n");
  print_tokenizer(json_object_get(root, "tokenizer"));
  const json_t *chat = json_object_get(root, "chat_template");
  print_label("chat template");
  if (json_is_true(json_object_get(chat, "present"))) {
    printf("%" JSON_INTEGER_FORMAT " bytes, ", json_integer_value(json_object_get(chat, "bytes")));
    const json_t *name = json_object_get(chat, "name");
    printf("%s\n", json_is_string(name) ? json_string_value(name) : "not recognised");
  } else {
    printf("none\n");
  }
  const char *kind;
  json_t *verdict;
  json_object_foreach(json_object_get(root, "support"), kind, verdict) {
    printf("%s: ", kind);
    if (json_is_true(json_object_get(verdict, "runs")))
      printf("yes\n");
    else
      printf("no: "), print_value(json_object_get(verdict, "why")), printf("\n");
  }
}

int cli_inspect(int argc, char **argv) {
  const char *given = NULL;
  bool json = false;
  for (int i = 0; i < argc; i++) {
    if (!strcmp(argv[i], "--json"))
      json = true;
    else if (!strcmp(argv[i], "--") && i + 1 < argc && !given)
      given = argv[++i];
    else if (!strncmp(argv[i], "--", 2) || given)
      return cli_usage_error(
          "inspect: unexpected \"%s\" (usage: hcq inspect FILE.gguf|NAME [--json])", argv[i]);
    else
      given = argv[i];
  }
  if (!given)
    return cli_usage_error(
        "inspect: give a GGUF file or a model name (usage: hcq inspect FILE.gguf|NAME [--json])");
  char path[PATH_MAX];
  gguf_file_t *g = NULL;
  hcq_status_t st;
  if ((st = llm_resolve_model(given, stderr, path, sizeof(path))) || (st = gguf_open(path, &g)))
    return cli_fail(st);
  json_t *root = inspect_json(g, given);
  gguf_close(g);
  if (json) {
    char *text = json_dumps(root, JSON_INDENT(2) | JSON_PRESERVE_ORDER);
    if (text) puts(text);
    free(text);
  } else {
    print_text(root);
  }
  json_decref(root);
  return HCQ_EXIT_OK;
}
