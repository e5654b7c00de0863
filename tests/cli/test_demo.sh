#!/usr/bin/env bash
# `hcq demo` end to end: a written model reads back to the same tokens, a tokenizer turns ids into
# text, and every malformed checkpoint, tokenizer or option exits 2 with a message naming the problem.
#
#   bash tests/cli/test_demo.sh /path/to/hcq
set -u
HCQ=$1
case $HCQ in /*) ;; *) HCQ=$PWD/$HCQ ;; esac
T=$(mktemp -d "${TMPDIR:-/tmp}/hcq-demo-test.XXXXXX") || exit 1
trap 'rm -rf "$T"' EXIT
export HCQ_CACHE_DIR=${HCQ_CACHE_DIR:-$T/cache}
cd "$T" || exit 1
PASS=0
FAIL=0
ok() { PASS=$((PASS + 1)); echo "ok   $*"; }
bad() { FAIL=$((FAIL + 1)); echo "FAIL $*"; }

# expect_fail NAME CODE FRAGMENT ARGS...: exit code CODE and FRAGMENT on stderr.
expect_fail() {
  local name=$1 code=$2 frag=$3
  shift 3
  timeout 60 "$HCQ" demo "$@" >out.txt 2>err.txt
  local rc=$?
  if [ "$rc" -ne "$code" ]; then
    bad "$name: exit $rc, expected $code ($(head -c 300 err.txt))"
  elif ! grep -qF -- "$frag" err.txt; then
    bad "$name: stderr lacks \"$frag\": $(head -c 300 err.txt)"
  else
    ok "$name"
  fi
}

json_field() { python3 -c 'import json,sys; d=json.load(open(sys.argv[1])); print(json.dumps(d[sys.argv[2]]))' "$@"; }

# A generated model, written out, then read back: the same tokens.
if "$HCQ" demo --steps 24 --repeat 1 --json --write-model model.bin >gen.json 2>err.txt; then
  ok "generated model decodes and is written"
else
  bad "generated model: $(cat err.txt)"
fi
if "$HCQ" demo --model model.bin --steps 24 --repeat 1 --json >read.json 2>err.txt &&
   [ "$(json_field gen.json tokens)" = "$(json_field read.json tokens)" ] &&
   [ "$(json_field read.json identical)" = true ]; then
  ok "the written model reads back to the same tokens"
else
  bad "written model read back: $(cat err.txt) $(head -c 300 read.json)"
fi
if python3 - gen.json <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))
need = ["tokens", "steps", "kernels_per_token", "eager_tok_s", "graph_tok_s", "host_us_per_token_eager",
        "host_us_per_token_graph", "identical"]
assert all(k in d for k in need), [k for k in need if k not in d]
assert d["steps"] == 24 and len(d["tokens"]) == 24 and d["identical"] is True
assert d["tokens"] == d["eager_tokens"]
assert d["kernels_per_token"] == 33 and d["eager_tok_s"] > 0 and d["graph_tok_s"] > 0
assert all(0 <= t < 512 for t in d["tokens"])
PY
then ok "--json has the contract's fields"; else bad "--json fields"; fi

# Two devices: the same tokens as one.
if "$HCQ" demo --devices 2 --steps 24 --repeat 1 --json >two.json 2>err.txt &&
   [ "$(json_field gen.json tokens)" = "$(json_field two.json tokens)" ] &&
   [ "$(json_field two.json transfers_per_token)" = 5 ]; then # x there and back; the classifier's split (models/llama2)
  ok "--devices 2 gives the same tokens"
else
  bad "--devices 2: $(cat err.txt)"
fi

# A tokenizer: piece i is "<i>" with byte-fallback pieces for 10 (newline) and 11 (unprintable).
python3 - <<'PY'
import struct
with open("tok.bin", "wb") as f:
    f.write(struct.pack("<i", 8))
    for i in range(512):
        p = {10: b"<0x0A>", 11: b"<0x01>"}.get(i, ("<%d>" % i).encode())
        f.write(struct.pack("<fi", 0.0, len(p)) + p)
PY
if "$HCQ" demo --steps 24 --repeat 1 --tokenizer tok.bin >text.txt 2>err.txt &&
   python3 - gen.json text.txt <<'PY'
import json, sys
tokens = json.load(open(sys.argv[1]))["tokens"]
want = "".join({10: "\n", 11: ""}.get(t, "<%d>" % t) for t in tokens)
assert want in open(sys.argv[2]).read(), want
PY
then ok "--tokenizer prints the text of the tokens"; else bad "--tokenizer: $(cat err.txt)"; fi

# Malformed checkpoints.
head -c 10 model.bin >short.bin
expect_fail "short file" 2 "short file: 10 bytes" --model short.bin
head -c $(($(stat -c %s model.bin) - 4)) model.bin >cut.bin
expect_fail "truncated weights" 2 "size does not match the header" --model cut.bin
cp model.bin long.bin && printf 'xxxx' >>long.bin
expect_fail "trailing bytes" 2 "size does not match the header" --model long.bin
python3 - <<'PY'
import struct
data = open("model.bin", "rb").read()
def patch(name, index, value):
    h = list(struct.unpack("<7i", data[:28]))
    h[index] = value
    open(name, "wb").write(struct.pack("<7i", *h) + data[28:])
patch("zero_heads.bin", 3, 0)
patch("bad_div.bin", 3, 6)
patch("neg_layers.bin", 2, -5)
patch("shared.bin", 5, 512)
PY
expect_fail "bad header: n_heads 0" 2 "bad header: n_heads is 0" --model zero_heads.bin
expect_fail "bad header: dim not a multiple of n_heads" 2 "dim 64 is not a multiple of n_heads 6" --model bad_div.bin
expect_fail "bad header: negative layers" 2 "n_layers is -5" --model neg_layers.bin
expect_fail "classifier flag that does not match the size" 2 "with a shared classifier need" --model shared.bin
expect_fail "missing file" 2 "cannot open the checkpoint" --model nonexistent.bin
expect_fail "directory" 2 "not a regular file" --model .
# A FIFO with no writer as the checkpoint or the tokenizer: refused at once, not an open() that
# waits forever (the timeout above turns a hang into exit 124).
rm -f fifo.bin && mkfifo fifo.bin
expect_fail "FIFO checkpoint" 2 "fifo.bin: cannot read the checkpoint: it is a FIFO (named pipe), not a regular file" --model fifo.bin
expect_fail "FIFO tokenizer" 2 "fifo.bin: cannot read the tokenizer: it is a FIFO (named pipe), not a regular file" --tokenizer fifo.bin --steps 2 --repeat 1

# Malformed tokenizers and options.
head -c 100 tok.bin >tok_short.bin
expect_fail "short tokenizer" 2 "token 8 is cut short" --tokenizer tok_short.bin --steps 2 --repeat 1
python3 -c 'import struct; open("tok_few.bin","wb").write(struct.pack("<i", 8) + b"".join(struct.pack("<fi", 0.0, 1) + b"a" for _ in range(100)))'
expect_fail "tokenizer with too few tokens" 2 "holds 100 tokens, fewer than the model's vocab_size 512" --tokenizer tok_few.bin --steps 2 --repeat 1
expect_fail "steps past seq_len" 2 "more than the model's seq_len 512" --steps 513
expect_fail "devices 3" 2 "expected 1 or 2" --devices 3
expect_fail "unknown size" 2 "expected small or 15m" --size 7b
expect_fail "unknown argument" 2 "unknown argument" --frobnicate

# --device: the kind and the graph kind in --json; an absent kind exits 3 with hcq info's reason.
if [ "$(json_field gen.json device_kind)" = '"CPU"' ] && [ "$(json_field gen.json graph_kind)" = '"hcq"' ]; then
  ok "--json names the device kind and graph kind"
else
  bad "--json device_kind/graph_kind: $(head -c 300 gen.json)"
fi
expect_fail "unknown device kind" 2 "expected CPU, VULKAN, CUDA or METAL" --device TPU
HCQ_CUDA_LIBRARY=/nonexistent/libcuda.so expect_fail "absent CUDA" 3 "no CUDA device: " --device CUDA --steps 2
HCQ_METAL_FRAMEWORK=/nonexistent/Metal expect_fail "absent Metal" 3 "no METAL device: Metal.framework not found" \
  --device METAL --steps 2
# A kernel that does not compile: exit 3 with the compiler's own message.
HCQ_CFLAGS="-O2 -include /nonexistent/hcq-missing.h" expect_fail "kernel that does not compile" 3 \
  "/nonexistent/hcq-missing.h: No such file" --steps 2 --repeat 1
# demo_on KIND DEVICES GRAPH_KIND [ENV...]: the decode runs there, eager and replays identical.
demo_on() {
  local kind=$1 n=$2 graph=$3
  shift 3
  if env "$@" "$HCQ" demo --device "$kind" --devices "$n" --steps 8 --repeat 1 --json >dev.json 2>err.txt &&
     [ "$(json_field dev.json device_kind)" = "\"$kind\"" ] && [ "$(json_field dev.json graph_kind)" = "\"$graph\"" ] &&
     [ "$(json_field dev.json identical)" = true ] && [ "$(json_field dev.json devices)" = "$n" ]; then
    ok "--device $kind --devices $n"
  else
    bad "--device $kind --devices $n: $(head -c 300 err.txt) $(head -c 300 dev.json)"
  fi
}
if "$HCQ" info | grep -q '^VULKAN *available'; then
  demo_on VULKAN 1 hcq
  demo_on VULKAN 2 hcq HCQ_VULKAN_VIRTUAL=1
else
  echo "skip --device VULKAN: $("$HCQ" info | grep '^VULKAN')"
fi
if [ -n "${HCQ_TEST_FAKE_CUDA:-}" ]; then
  demo_on CUDA 1 cuda HCQ_CUDA_LIBRARY="$HCQ_TEST_FAKE_CUDA" HCQ_FAKE_CUDA_DEVICES=2 HCQ_CUDA_ARCH=sm_90
  demo_on CUDA 2 cuda HCQ_CUDA_LIBRARY="$HCQ_TEST_FAKE_CUDA" HCQ_FAKE_CUDA_DEVICES=2 HCQ_CUDA_ARCH=sm_90
fi
if [ -n "${HCQ_TEST_FAKE_METAL:-}" ]; then # the stand-in's one GPU; METAL:1 a logical device on it
  demo_on METAL 1 metal HCQ_OBJC_LIBRARY="$HCQ_TEST_FAKE_METAL" HCQ_METAL_FRAMEWORK="$HCQ_TEST_FAKE_METAL"
  demo_on METAL 2 metal HCQ_OBJC_LIBRARY="$HCQ_TEST_FAKE_METAL" HCQ_METAL_FRAMEWORK="$HCQ_TEST_FAKE_METAL" \
    HCQ_METAL_VIRTUAL=1
fi

echo "$PASS passed, $FAIL failed"
[ "$FAIL" -eq 0 ]
