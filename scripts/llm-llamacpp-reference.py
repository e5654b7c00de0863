#!/usr/bin/env python3
"""Writes tests/data/llm/smollm2_llamacpp_streams.json: llama.cpp's greedy token streams for three
prompts with the SmolLM2-135M-Instruct Q4_1 GGUF, the reference that models/llm's decoder is
compared against.

Run it with llama-cpp-python 0.3.36 built on this machine (the committed file was made with
CMAKE_ARGS=-DGGML_NATIVE=ON on an x86-64 with AVX-512 VNNI; llama.cpp's kernels, and so its logits
to the last bits, depend on the build and the CPU):

    python3 -m venv /tmp/lcpp-venv
    CMAKE_ARGS=-DGGML_NATIVE=ON /tmp/lcpp-venv/bin/pip install --no-binary llama-cpp-python llama-cpp-python==0.3.36
    /tmp/lcpp-venv/bin/python scripts/llm-llamacpp-reference.py \\
        ~/.local/share/hcq/models/SmolLM2-135M-Instruct.Q4_1.gguf > tests/data/llm/smollm2_llamacpp_streams.json
    /tmp/lcpp-venv/bin/python scripts/llm-llamacpp-reference.py --gemma \\
        ~/.local/share/hcq/models/gemma-3-270m-q4_k_m.gguf > tests/data/llm/gemma3_llamacpp_streams.json

(--gemma: Gemma 3 270M's four raw prompts with BOS, GEMMA_PROMPTS below.)

    /tmp/lcpp-venv/bin/python scripts/llm-llamacpp-reference.py --types build/tests/llm_requant \\
        ~/.local/share/hcq/models/SmolLM2-135M-Instruct.Q4_1.gguf > tests/data/llm/smollm2_types_llamacpp_streams.json

(--types: SmolLM2 requantized by tests/llm_requant.h into every recipe of TYPE_RECIPES below, each
file's SHA-256 and llama.cpp's greedy streams for two prompts; the test writes the files again and
checks the SHA-256 before comparing.)

(bench/llm_peers.py --install VENV does the same install.) It takes under a minute on 2 cores and
prints its checks on stderr.

How a stream is made, as llama-cli or llama-cpp-python's Llama.generate make it with temperature 0:
the prompt's ids (llm.tokenize(text, add_bos=False, special=True); the GGUF does not ask for BOS)
are decoded as one batch from an empty cache, then one token at a time, each the argmax of the
last position's logits (the lowest id among equal maxima, as llama.cpp's greedy sampler), until
MAX_NEW tokens or an end-of-generation token (llama_vocab_is_eog: ids 0 <|endoftext|>, 2 <|im_end|>
and 4 <reponame>); the end token is kept as the stream's last id. Only the last position's logits
are asked for (llama_batch_get_one, and llama_get_logits_ith(ctx, -1)): logits_all=True would make
llama.cpp compute the whole batch's output rows, another graph. Context: n_ctx 512, n_batch and
n_ubatch 512, 2 threads (n_threads and n_threads_batch), llama-cpp-python's defaults otherwise (an
f16 KV cache; flash attention off: llama-cli's default is "auto", which turns it on for the CPU,
so the file also says whether flash attention changes the streams).

What the file holds:
  - producer: versions (llama-cpp-python, ggml's commit and version, llama.cpp's system info),
    the context parameters, the CPU, and the note on the build;
  - streams: per prompt {name, kind ("chat": SmolLM2's ChatML template with its default system
    prompt, or "raw"), prompt_text, prompt_ids, generated_ids, stop ("eog" or "max_new"), text
    (the decoded generation, for reading), top5: per generated position the five largest logits
    as [id, logit] pairs, largest first (float32 values, shortest repr), from the logits that
    chose that position's id};
  - streams_1_thread: the same with n_threads = n_threads_batch = 1: {name, generated_ids, top5};
  - streams_flash_attn: the same (2 threads) with flash attention on, llama-cli's default on the
    CPU (its flash_attn "auto" resolves to on); it accumulates attention in f16, so its streams
    leave the others after a few tokens;
  - checks: whether Llama.generate(temp=0) and Llama.create_completion(temperature=0, top_k=1)
    give the same streams as the loop above, whether 1 thread and flash attention change them
    (where the first difference is, the top-5 there, and the largest top-5 logit difference over
    the positions with the same history).
"""
import ctypes
import json
import os
import platform
import sys

import numpy as np
import llama_cpp

N_CTX = 512
N_BATCH = 512
N_THREADS = 2
MAX_NEW = 96
MIN_NEW = 40  # a prompt whose generation ends sooner is not used

SYSTEM = "You are a helpful AI assistant named SmolLM, trained by Hugging Face"


def chat(user):
    """SmolLM2-Instruct's ChatML template with its default system prompt, ready for the answer."""
    return ("<|im_start|>system\n%s<|im_end|>\n<|im_start|>user\n%s<|im_end|>\n<|im_start|>assistant\n"
            % (SYSTEM, user))


PROMPTS = [
    ("chat_france", "chat", chat("What is the capital of France?")),
    ("chat_reverse_string", "chat", chat("Write a short Python function that reverses a string.")),
    ("raw_once_upon_a_time", "raw", "Once upon a time, in a small village by the sea,"),
]

# Gemma 3 270M is a base model: raw prompts, BOS in front (its tokenizer.ggml.add_bos_token).
GEMMA_PROMPTS = [
    ("raw_france", "raw", "The capital of France is"),
    ("raw_once_upon_a_time", "raw", "Once upon a time, in a small village by the sea,"),
    ("raw_python", "raw", "def reverse_string(s):\n    \"\"\"Return s reversed.\"\"\"\n"),
    ("raw_recipe", "raw", "To bake bread at home, you need flour, water, salt and"),
]


def ggml_info():
    """ggml's commit and version from the package's libggml-base (llama.cpp's own build number is not
    exported by the shared libraries)."""
    out = {}
    try:
        lib = ctypes.CDLL(os.path.join(os.path.dirname(llama_cpp.__file__), "lib", "libggml-base.so"))
        for name in ("ggml_commit", "ggml_version"):
            fn = getattr(lib, name, None)
            if fn is not None:
                fn.restype = ctypes.c_char_p
                out[name] = fn().decode()
    except OSError as e:
        out["error"] = str(e)
    return out


def cpu_name():
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor()


def load(path, threads, flash_attn=False):
    return llama_cpp.Llama(path, n_ctx=N_CTX, n_batch=N_BATCH, n_ubatch=N_BATCH, n_threads=threads,
                           n_threads_batch=threads, flash_attn=flash_attn, logits_all=False, verbose=False)


def f32(x):
    """A float32 as the shortest decimal that reads back as the same float32."""
    return float(np.format_float_positional(np.float32(x), unique=True, trim="0"))


def top5(logits):
    order = np.lexsort((np.arange(len(logits)), -logits))[:5]  # by logit descending, then id
    return [[int(i), f32(logits[i])] for i in order]


class Runner:
    """The greedy loop on a Llama's context through llama.cpp's C API."""

    def __init__(self, llm):
        self.llm = llm
        self.ctx = llm.ctx
        self.n_vocab = llm.n_vocab()
        self.vocab = llm._model.vocab

    def decode(self, ids):
        arr = (llama_cpp.llama_token * len(ids))(*ids)
        # llama_batch_get_one: positions follow the cache, only the last token's logits are output.
        rc = llama_cpp.llama_decode(self.ctx, llama_cpp.llama_batch_get_one(arr, len(ids)))
        if rc != 0:
            raise RuntimeError("llama_decode returned %d" % rc)
        ptr = llama_cpp.llama_get_logits_ith(self.ctx, -1)
        return np.ctypeslib.as_array(ptr, shape=(self.n_vocab,)).copy()

    def generate(self, prompt_ids):
        llama_cpp.llama_memory_clear(llama_cpp.llama_get_memory(self.ctx), True)
        self.llm.reset()  # the Llama object's own record of the cache, for its later generate()
        logits = self.decode(prompt_ids)
        ids, tops, stop = [], [], "max_new"
        while True:
            t = int(np.argmax(logits))  # the first of equal maxima, as llama.cpp's greedy sampler
            ids.append(t)
            tops.append(top5(logits))
            if llama_cpp.llama_vocab_is_eog(self.vocab, t):
                stop = "eog"
                break
            if len(ids) == MAX_NEW:
                break
            logits = self.decode([t])
        return ids, tops, stop


def via_generate(llm, prompt_ids):
    llm.reset()
    out = []
    for t in llm.generate(prompt_ids, temp=0.0, top_k=1, repeat_penalty=1.0, reset=True):
        out.append(int(t))
        if llama_cpp.llama_vocab_is_eog(llm._model.vocab, t) or len(out) == MAX_NEW:
            break
    return out


def via_create_completion(llm, prompt_ids):
    """create_completion stops before an end token and returns text: its text and token count."""
    llm.reset()
    r = llm.create_completion(list(prompt_ids), max_tokens=MAX_NEW, temperature=0.0, top_k=1, repeat_penalty=1.0)
    return r["choices"][0]["text"], r["usage"]["completion_tokens"]


def first_difference(a, b):
    for i, (x, y) in enumerate(zip(a, b)):
        if x != y:
            return i
    return None if len(a) == len(b) else min(len(a), len(b))


def compact_json(obj):
    """Indented JSON with lists nested at most two deep on one line (ids; a position's top-5 pairs),
    so that a stream's top5 is one line per position."""
    def depth(v):
        return 1 + max((depth(x) for x in v), default=0) if isinstance(v, list) else (99 if isinstance(v, dict) else 0)

    def enc(v, ind):
        pad = " " * ind
        if isinstance(v, dict):
            return "{\n" + ",\n".join("%s %s: %s" % (pad, json.dumps(k), enc(x, ind + 1)) for k, x in v.items()) + \
                "\n" + pad + "}"
        if isinstance(v, list) and depth(v) > 2:
            return "[\n" + ",\n".join(pad + " " + enc(x, ind + 1) for x in v) + "\n" + pad + "]"
        return json.dumps(v, ensure_ascii=False)
    return enc(obj, 0)


def log(*a):
    print(*a, file=sys.stderr, flush=True)


# --types: SmolLM2 requantized by tests/llm_requant.h into each recipe (the files the tests write
# again), two prompts of 48 tokens each.
TYPE_RECIPES = ["Q8_0", "Q5_0", "Q5_1", "IQ4_NL", "BF16", "Q4_K_M", "Q2_K", "Q3_K", "Q4_K", "Q5_K", "Q6_K", "IQ4_XS"]
TYPE_PROMPTS = [PROMPTS[0], PROMPTS[2]]
TYPE_MAX_NEW = 48


def types_main(requant, path):
    """llama.cpp's greedy streams on each requantized file: {"producer", "files": [{recipe, sha256, bytes,
    streams: [{name, prompt_ids, generated_ids, stop}]}]}."""
    import hashlib
    import subprocess
    import tempfile
    global MAX_NEW
    MAX_NEW = TYPE_MAX_NEW
    files = []
    with tempfile.TemporaryDirectory() as tmp:
        for recipe in TYPE_RECIPES:
            out = os.path.join(tmp, recipe + ".gguf")
            subprocess.run([requant, path, out, recipe], check=True)
            with open(out, "rb") as f:
                digest = hashlib.sha256(f.read()).hexdigest()
            llm = load(out, N_THREADS)
            run = Runner(llm)
            streams = []
            for name, kind, text in TYPE_PROMPTS:
                prompt_ids = llm.tokenize(text.encode(), add_bos=False, special=True)
                ids, _, stop = run.generate(prompt_ids)
                streams.append({"name": name, "prompt_ids": prompt_ids, "generated_ids": ids, "stop": stop})
            llm.close()
            files.append({"recipe": recipe, "sha256": digest, "bytes": os.path.getsize(out), "streams": streams})
            log("%s: %s, %d bytes, %s" % (recipe, digest[:12], os.path.getsize(out),
                                          ", ".join("%s %d ids" % (s["name"], len(s["generated_ids"])) for s in streams)))
    producer = {"llama_cpp_python": llama_cpp.__version__, "ggml": ggml_info(), "cpu": cpu_name(),
                "source_model": os.path.basename(path), "requant": "tests/llm_requant.h (build/tests/llm_requant)",
                "n_ctx": N_CTX, "n_threads": N_THREADS, "max_new": TYPE_MAX_NEW,
                "method": "as the main streams: prompt as one batch, then greedy argmax per llama_decode",
                "script": "scripts/llm-llamacpp-reference.py --types"}
    print(compact_json({"producer": producer, "files": files}))
    return 0


def main():
    if "--types" in sys.argv:
        rest = [a for a in sys.argv[1:] if a != "--types"]
        if len(rest) != 2:
            print(__doc__, file=sys.stderr)
            return 2
        return types_main(rest[0], rest[1])
    args = [a for a in sys.argv[1:] if not a.startswith("--")]
    if len(args) != 1:
        print(__doc__, file=sys.stderr)
        return 2
    path = args[0]
    prompts = GEMMA_PROMPTS if "--gemma" in sys.argv else PROMPTS
    add_bos = "--gemma" in sys.argv
    llm = load(path, N_THREADS)
    run = Runner(llm)
    vocab = llm._model.vocab
    eog = [i for i in range(llm.n_vocab()) if llama_cpp.llama_vocab_is_eog(vocab, i)]

    streams, checks = [], {"generate_agrees": True, "create_completion_agrees": True, "details": []}
    for name, kind, text in prompts:
        prompt_ids = llm.tokenize(text.encode(), add_bos=add_bos, special=True)
        ids, tops, stop = run.generate(prompt_ids)
        body = ids[:-1] if stop == "eog" else ids
        if stop == "eog" and len(body) < MIN_NEW:
            log("%s: ends after %d tokens (< %d): pick another prompt" % (name, len(body), MIN_NEW))
            return 1
        streams.append({"name": name, "kind": kind, "prompt_text": text, "prompt_ids": prompt_ids,
                        "generated_ids": ids, "stop": stop,
                        "text": llm.detokenize(body, prev_tokens=prompt_ids).decode("utf-8", "replace"),
                        "top5": tops})
        g = via_generate(llm, prompt_ids)
        c_text, c_n = via_create_completion(llm, prompt_ids)
        want_text = llm.detokenize(body, prev_tokens=prompt_ids).decode("utf-8", "ignore")
        g_ok, c_ok = g == ids, (c_text == want_text and c_n == len(body))
        checks["generate_agrees"] &= g_ok
        checks["create_completion_agrees"] &= c_ok
        checks["details"].append({"name": name, "generate": "identical" if g_ok else
                                  "differs at %s" % first_difference(g, ids),
                                  "create_completion": "identical text and token count" if c_ok else
                                  "differs: %d tokens, text %r" % (c_n, c_text[:80])})
        log("%s: %d prompt ids, %d generated (%s); generate %s; create_completion %s"
            % (name, len(prompt_ids), len(ids), stop, "agrees" if g_ok else "DIFFERS",
               "agrees" if c_ok else "DIFFERS"))
    llm.close()

    def again(threads, flash_attn):
        other = load(path, threads, flash_attn)
        r = Runner(other)
        out = []
        for s in streams:
            ids, tops, _ = r.generate(s["prompt_ids"])
            out.append({"name": s["name"], "generated_ids": ids, "top5": tops})
        other.close()
        return out

    def compare(key, alt):
        diffs = {}
        for s, a in zip(streams, alt):
            d = first_difference(s["generated_ids"], a["generated_ids"])
            n = len(s["top5"]) if d is None else d + 1  # the positions whose histories are the same
            lg = max((abs(x[1] - y[1]) for p, q in zip(s["top5"][:n], a["top5"][:n])
                      for x, y in zip(p, q) if x[0] == y[0]), default=0.0)
            e = {"ids": "identical" if d is None else "first differ at generated position %d" % d,
                 "max_abs_top5_logit_diff_same_history": f32(lg)}
            if d is not None:
                e["top5_at_difference"] = {"this": s["top5"][d], "other": a["top5"][d]}
            diffs[s["name"]] = e
        checks[key] = diffs
        log("%s: %s" % (key, json.dumps(diffs)))
        return all(v["ids"] == "identical" for v in diffs.values())

    one = again(1, False)
    checks["one_thread_identical"] = compare("one_thread_vs_two", one)
    # llama-cli's default, flash_attn "auto", turns flash attention on for the CPU (its log says
    # "resolve_fused_ops: Flash Attention enabled"); llama-cpp-python's default is off.
    fa = again(N_THREADS, True)
    checks["flash_attn_identical"] = compare("flash_attn_on_vs_off", fa)

    producer = {
        "llama_cpp_python": llama_cpp.__version__,
        "llama_cpp": "ggml-org/llama.cpp@0c1e57098 (llama-cpp-python 0.3.36's vendored commit, its CHANGELOG)"
                     if llama_cpp.__version__ == "0.3.36" else "see llama-cpp-python %s's CHANGELOG" % llama_cpp.__version__,
        "ggml": ggml_info(),
        "llama_version": llama_cpp.llama_version().decode(),
        "system_info": llama_cpp.llama_print_system_info().decode().strip(),
        "build": "built from source with CMAKE_ARGS=-DGGML_NATIVE=ON on an x86-64 with AVX-512 VNNI "
                 "(pip install --no-binary llama-cpp-python llama-cpp-python==0.3.36)",
        "cpu": cpu_name(),
        "model": os.path.basename(path),
        "model_bytes": os.path.getsize(path),
        "n_ctx": N_CTX, "n_batch": N_BATCH, "n_ubatch": N_BATCH,
        "n_threads": N_THREADS, "n_threads_batch": N_THREADS,
        "flash_attn": False, "kv_cache_type": "f16",
        "max_new": MAX_NEW, "min_new": MIN_NEW, "eog_ids": eog,
        "tokenize": "llm.tokenize(text.encode(), add_bos=%s, special=True)" % add_bos,
        "method": "prompt decoded as one batch (llama_batch_get_one) from an empty cache, then one token per "
                  "llama_decode; each id the argmax of llama_get_logits_ith(ctx, -1) (lowest id among equal "
                  "maxima); logits_all=False; stops after MAX_NEW ids or at an eog id, which is kept",
        "script": "scripts/llm-llamacpp-reference.py",
    }
    print(compact_json({"producer": producer, "streams": streams, "streams_1_thread": one,
                        "streams_flash_attn": fa, "checks": checks}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
