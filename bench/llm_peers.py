#!/usr/bin/env python3
"""The llama.cpp rows of `make bench`: SmolLM2-135M-Instruct (the Q4_1 GGUF models/llm decodes)
through llama.cpp, as llama-cpp-python 0.3.36 built from source for this CPU runs it.

    llm_peers.py [--model FILE] [--threads 1,2] [--rounds 5] [--json | --rows] [--flash-attn] [--hcq HCQ]
        Measures, in a venv with llama-cpp-python (see --install), on 1 and on 2 threads
        (n_threads = n_threads_batch):
          decode: 128 tokens, each the argmax of the last logits (llama.cpp's greedy sampler),
            after the 37-token chat prompt "What is the capital of France?" in SmolLM2's template,
            which is evaluated first and not timed; tokens/s = 128 / the time of the 128 steps;
          prompt: a 100-token prompt (the first 100 ids of a fixed English text) evaluated as one
            batch from an empty cache; tokens/s = 100 / the time of that llama_decode;
        with n_ctx 512 (n_batch = n_ubatch = 512), llama-cpp-python's defaults otherwise (the model
        mmapped, an f16 KV cache, flash attention off; --flash-attn turns it on, llama-cli's
        default on the CPU). One context for all: llama_set_n_threads switches between thread
        counts. After one warm-up of each, the thread counts take turns within each of --rounds
        rounds (their order alternating), one decode and three prompt passes per turn; medians over
        the rounds. Also: resident memory (VmRSS, VmHWM, RssFile, RssAnon of /proc/self/status)
        before loading, after loading and after the runs; the file's size and the KV cache's
        (n_layers x 2 x n_ctx x n_kv_heads x head_dim x 2 bytes, f16); the 1-minute load average
        before and after; versions. Prints a table, or with --json one JSON object, or with --rows
        the rows of bench/run.sh (JSON lines, bench/rows.h format; a failure becomes "missing"
        rows saying why). --hcq HCQ: in each round, after llama.cpp's turns, `HCQ generate
        --prompt-ids ... --bench --json` on the same ids and thread counts (HCQ_CPU_THREADS): hcq's
        graph replays and eager launches (decode of 128 tokens after the chat prompt, the 100-token
        prompt as one pass, the host's time to queue a step, resident memory) in the same rows.
    llm_peers.py --install [VENV] [--log FILE] [--rebuild]
        Installs llama-cpp-python==0.3.36 from PyPI into VENV (default build/bench/venv-llamacpp,
        created if missing), built from source with CMAKE_ARGS=-DGGML_NATIVE=ON (needs cmake and a
        C++ compiler). The first build takes up to 15 minutes on 2 cores (7.5 minutes on an idle
        2-core AVX-512 Xeon); pip keeps the wheel it built in its cache (~/.cache/pip/wheels), so installing again, in this venv or another, takes
        seconds (--rebuild passes --no-cache-dir: the cache is keyed by the sdist, not by CMAKE_ARGS
        or the CPU, so a wheel built elsewhere or without GGML_NATIVE would be reused as it is).
        Nothing is done when VENV already imports llama_cpp 0.3.36. pip's output goes to FILE
        (default: stderr), what it is doing to stderr; on failure the reason is the one line on
        stdout and the status is 1. Needs only the standard library, as does:
    llm_peers.py --missing --why TEXT
        "missing" rows for llama.cpp saying TEXT, in the decode and prompt sections.

The model is found where hcq keeps it ($HCQ_DATA_DIR, else $XDG_DATA_HOME/hcq, else
~/.local/share/hcq, then models/SmolLM2-135M-Instruct.Q4_1.gguf; `hcq generate --fetch-model`
downloads it) unless --model names it.
"""
import argparse
import ctypes
import json
import os
import statistics
import subprocess
import sys
import time

VERSION = "0.3.36"
SPEC = "llama-cpp-python==" + VERSION
MODEL_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"
N_CTX = 512
N_DECODE = 128
N_PROMPT = 100
PROMPT_REPEATS = 3  # prompt passes per turn (a pass is short)

# The model file's name in the sections (--label): SmolLM2's Q4_1 file by default.
LABEL = "SmolLM2-135M Q4_1"


def section_memory():
    return "%s: resident memory, n_ctx 512" % LABEL


def section_host():
    return "%s: host us to queue a decode step" % LABEL
NAME = "llama.cpp"
HCQ_GRAPH, HCQ_EAGER = "hcq graph replay", "hcq eager launches"


def section_decode(t):
    return "%s: decode, 128 tokens greedily after a chat prompt, %s" % (LABEL, threads_name(t))


def section_prompt(t):
    return "%s: prompt of 100 tokens in one batch, %s" % (LABEL, threads_name(t))

CHAT = ("<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging Face<|im_end|>\n"
        "<|im_start|>user\nWhat is the capital of France?<|im_end|>\n<|im_start|>assistant\n")
# Tokenized without special tokens; its first 100 ids are the prompt.
TEXT = ("The lighthouse keeper climbed the narrow stairs every evening at dusk, carrying a can of oil and a "
        "small brass key. From the gallery he could see the whole bay: the fishing boats coming home, the "
        "gulls circling over the harbour wall, and the long grey line of the cliffs that ran north toward "
        "the city. He trimmed the wick, wound the clockwork that turned the great lens, and wrote the time "
        "and the weather in a book that his father had kept before him. On clear nights the beam reached "
        "twenty miles out to sea, and ships he would never see steered by it.")

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DEFAULT_VENV = os.path.join(ROOT, "build", "bench", "venv-llamacpp")


def row(section, name, value, unit, note):
    value = float("%.6g" % value) if value >= 0 else -1
    print(json.dumps({"section": section, "name": name, "value": value, "unit": unit, "note": note}), flush=True)


def missing_rows(why, name=NAME, threads=(1, 2)):
    for t in threads:
        for section in (section_decode(t), section_prompt(t)):
            row(section, name, -1, "", "missing: " + why)


def default_model():
    env, xdg, home = os.environ.get("HCQ_DATA_DIR"), os.environ.get("XDG_DATA_HOME"), os.environ.get("HOME")
    if env:
        d = env
    elif xdg:
        d = os.path.join(xdg, "hcq")
    elif home:
        d = os.path.join(home, ".local", "share", "hcq")
    else:
        d = "/tmp/hcq-data-%d" % os.getuid()
    return os.path.join(d, "models", MODEL_FILE)


def loadavg():
    with open("/proc/loadavg") as f:
        return [float(x) for x in f.read().split()[:3]]


def memory():
    """VmRSS, VmHWM, RssAnon and RssFile of this process, in MiB."""
    out = {}
    with open("/proc/self/status") as f:
        for line in f:
            key, _, rest = line.partition(":")
            if key in ("VmRSS", "VmHWM", "RssAnon", "RssFile"):
                out[key] = int(rest.split()[0]) / 1024.0  # kB
    return out


# --- install -------------------------------------------------------------------------------------

def venv_has_it(venv):
    py = os.path.join(venv, "bin", "python")
    if not os.access(py, os.X_OK):
        return False
    r = subprocess.run([py, "-c", "import llama_cpp, sys; sys.exit(llama_cpp.__version__ != %r)" % VERSION],
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return r.returncode == 0


def install(venv, log_path=None, rebuild=False):
    """Returns None when VENV has llama-cpp-python VERSION, else the reason it could not be had."""
    if not rebuild and venv_has_it(venv):
        print("llm_peers.py: %s already has %s" % (venv, SPEC), file=sys.stderr)
        return None
    log = open(log_path, "a") if log_path else sys.stderr
    try:
        def run(cmd, **kw):
            log.write("llm_peers.py: $ %s\n" % " ".join(cmd))
            log.flush()
            return subprocess.run(cmd, stdout=log, stderr=subprocess.STDOUT, **kw).returncode

        if not os.access(os.path.join(venv, "bin", "python"), os.X_OK):
            if run([sys.executable, "-m", "venv", venv]) != 0:
                return "cannot create a venv in %s (python3-venv missing?)%s" % (
                    venv, ", see " + log_path if log_path else "")
        print("llm_peers.py: installing %s into %s from PyPI, built from source with CMAKE_ARGS=-DGGML_NATIVE=ON "
              "(cmake and a C++ compiler); the first build takes up to 15 minutes on 2 cores (7.5 on an idle "
              "2-core Xeon), later installs reuse the wheel in pip's cache (seconds)%s" % (SPEC, venv, " (not this time: --rebuild)" if rebuild else ""),
              file=sys.stderr, flush=True)
        env = dict(os.environ)
        args = env.get("CMAKE_ARGS", "")
        if "GGML_NATIVE" not in args:
            env["CMAKE_ARGS"] = (args + " -DGGML_NATIVE=ON").strip()
        t0 = time.time()
        cmd = [os.path.join(venv, "bin", "pip"), "install", "--disable-pip-version-check", "--retries", "1",
               "--timeout", "30", "--no-binary", "llama-cpp-python"] + (["--no-cache-dir"] if rebuild else []) + [SPEC]
        status = run(cmd, env=env)
        if status != 0:
            tail = ""
            if log_path:
                log.flush()
                with open(log_path, errors="replace") as f:
                    lines = [x.strip() for x in f.read().splitlines() if x.strip()]
                errs = [x for x in lines if "error" in x.lower()]
                tail = ": " + (errs[-1] if errs else lines[-1] if lines else "")[:200]
            return "pip install %s (from source, GGML_NATIVE=ON) failed with status %d%s" % (SPEC, status, tail)
        if not venv_has_it(venv):
            return "%s installed into %s but it does not import" % (SPEC, venv)
        print("llm_peers.py: installed %s in %.0f s" % (SPEC, time.time() - t0), file=sys.stderr)
        return None
    finally:
        if log_path:
            log.close()


# --- measurement ---------------------------------------------------------------------------------

def versions(llama_cpp):
    import ctypes
    out = {"llama_cpp_python": llama_cpp.__version__}
    try:  # ggml lives in llama.cpp's tree: its commit is llama.cpp's (the build number is not exported)
        lib = ctypes.CDLL(os.path.join(os.path.dirname(llama_cpp.__file__), "lib", "libggml-base.so"))
        for name in ("ggml_commit", "ggml_version"):
            fn = getattr(lib, name, None)
            if fn is not None:
                fn.restype = ctypes.c_char_p
                out[name] = fn().decode()
    except OSError:
        pass
    out["system_info"] = llama_cpp.llama_print_system_info().decode().strip()
    return out


def run_hcq(a, t, ids, steps, reps):
    """One `hcq generate --bench --json` on t threads (HCQ_CPU_THREADS) of the prompt ids."""
    cmd = [a.hcq, "generate", "--prompt-ids", ",".join(str(i) for i in ids), "--steps", str(steps), "--ignore-eos",
           "--bench", "--repeat", str(reps), "--ctx", str(N_CTX), "--json"]
    if a.model:
        cmd[2:2] = ["--model", a.model]
    env = dict(os.environ, HCQ_CPU_THREADS=str(t))
    p = subprocess.run(cmd, env=env, capture_output=True, text=True, check=False)
    if p.returncode != 0:
        raise RuntimeError("%s exited with %d: %s" % (" ".join(cmd[:2]), p.returncode, p.stderr.strip()[-300:]))
    return json.loads(p.stdout)


def measure(a):
    mem_start = memory()
    try:
        import llama_cpp
    except ImportError as e:
        raise ImportError("%s can not import llama_cpp (%s): llm_peers.py --install VENV installs it"
                          % (sys.executable, e)) from e
    mem_import = memory()
    model = a.model or default_model()
    if not os.path.isfile(model):
        raise FileNotFoundError("no model at %s (hcq generate --fetch-model downloads it; or --model FILE)" % model)
    load_before = loadavg()
    t0 = time.perf_counter()
    llm = llama_cpp.Llama(model, n_ctx=N_CTX, n_batch=N_CTX, n_ubatch=N_CTX, n_threads=a.threads[0],
                          n_threads_batch=a.threads[0], flash_attn=a.flash_attn, logits_all=False, verbose=False)
    load_s = time.perf_counter() - t0
    mem_load = memory()
    ctx, mdl = llm.ctx, llm._model.model
    n_layer, n_head = llama_cpp.llama_model_n_layer(mdl), llama_cpp.llama_model_n_head(mdl)
    n_head_kv, n_embd = llama_cpp.llama_model_n_head_kv(mdl), llama_cpp.llama_model_n_embd(mdl)
    # the head size: the file's key_length where it has one (Gemma 3: 256 in a 640-wide model)
    arch = llm.metadata.get("general.architecture", "llama")
    head_dim = int(llm.metadata.get("%s.attention.key_length" % arch, n_embd // n_head))
    kv_bytes = n_layer * 2 * N_CTX * n_head_kv * head_dim * 2

    chat = llm.tokenize(CHAT.encode(), add_bos=False, special=True)
    text = llm.tokenize(TEXT.encode(), add_bos=False, special=False)
    if len(text) < N_PROMPT:
        raise RuntimeError("the prompt text is %d tokens, fewer than %d" % (len(text), N_PROMPT))
    prompt = text[:N_PROMPT]
    mem = llama_cpp.llama_get_memory(ctx)
    greedy = llama_cpp.llama_sampler_init_greedy()

    def decode(ids):
        arr = (llama_cpp.llama_token * len(ids))(*ids)
        rc = llama_cpp.llama_decode(ctx, llama_cpp.llama_batch_get_one(arr, len(ids)))
        if rc != 0:
            raise RuntimeError("llama_decode returned %d" % rc)

    def run_decode():
        llama_cpp.llama_memory_clear(mem, True)
        decode(chat)
        ids = []
        t = time.perf_counter()
        for _ in range(N_DECODE):
            tok = llama_cpp.llama_sampler_sample(greedy, ctx, -1)  # argmax of the last logits
            ids.append(tok)
            decode([tok])
        return N_DECODE / (time.perf_counter() - t), ids

    def run_prompt():
        llama_cpp.llama_memory_clear(mem, True)
        t = time.perf_counter()
        decode(prompt)
        llama_cpp.llama_synchronize(ctx)
        return N_PROMPT / (time.perf_counter() - t)

    res = {t: {"decode": [], "prompt": []} for t in a.threads}
    hres = {t: {k: [] for k in ("graph_decode", "eager_decode", "graph_prompt", "eager_prompt", "host_graph",
                                "host_eager")} for t in a.threads}
    hcq_last = {}
    streams = {}
    for t in a.threads:  # warm-up: every weight page read once, each thread count started
        llama_cpp.llama_set_n_threads(ctx, t, t)
        _, streams[t] = run_decode()
        run_prompt()
    for r in range(a.rounds):
        for t in (a.threads if r % 2 == 0 else a.threads[::-1]):
            llama_cpp.llama_set_n_threads(ctx, t, t)
            tps, ids = run_decode()
            res[t]["decode"].append(tps)
            if ids != streams[t]:
                raise RuntimeError("decode on %d threads gave other tokens in round %d" % (t, r))
            for _ in range(PROMPT_REPEATS):
                res[t]["prompt"].append(run_prompt())
        if a.hcq:  # hcq's turn in the same round; llama.cpp's threads go to sleep first
            time.sleep(0.5)
            for t in (a.threads if r % 2 == 0 else a.threads[::-1]):
                d = run_hcq(a, t, chat, N_DECODE + 1, 1)
                p = run_hcq(a, t, prompt, 1, PROMPT_REPEATS)
                h = hres[t]
                h["graph_decode"].append(d["graph_decode_tok_s"]), h["eager_decode"].append(d["eager_decode_tok_s"])
                h["host_graph"].append(d["host_us_per_token_graph"]), h["host_eager"].append(d["host_us_per_token_eager"])
                h["graph_prompt"].append(p["graph_prefill_tok_s"]), h["eager_prompt"].append(p["eager_prefill_tok_s"])
                if not d["identical"] or not p["identical"]:
                    raise RuntimeError("hcq's eager and graph tokens differ on %d threads" % t)
                hcq_last[t] = d
    load_after = loadavg()
    mem_runs = memory()
    llama_cpp.llama_sampler_free(greedy)
    same = all(streams[t] == streams[a.threads[0]] for t in a.threads)
    hcq = None
    if a.hcq:
        d = hcq_last[a.threads[-1]]
        ours, theirs = d["token_ids"], streams[a.threads[0]]
        agree = next((i for i, (x, y) in enumerate(zip(ours, theirs)) if x != y), min(len(ours), len(theirs)))
        hcq = {"results": {str(t): {k: statistics.median(v) for k, v in hres[t].items()} for t in a.threads},
               "samples": {str(t): hres[t] for t in a.threads},
               "memory_mib": d["memory_mib"], "kv_cache_bytes": d["kv_cache_bytes"], "ctx": d["ctx"],
               "kernels_per_token": d["kernels_per_token"], "decode_ids": ours,
               "same_tokens_as_llamacpp": agree, "of": min(len(ours), len(theirs))}
    return {
        "hcq": hcq,
        "versions": versions(llama_cpp),
        "model": model,
        "model_bytes": os.path.getsize(model),
        "model_shape": {"n_layer": n_layer, "n_head": n_head, "n_head_kv": n_head_kv, "head_dim": head_dim,
                        "n_embd": n_embd},
        "n_ctx": N_CTX, "n_batch": N_CTX, "n_ubatch": N_CTX, "flash_attn": a.flash_attn, "kv_cache_type": "f16",
        "kv_cache_bytes": kv_bytes,
        "kv_cache_formula": "n_layer %d x 2 (K, V) x n_ctx %d x n_head_kv %d x head_dim %d x 2 bytes (f16)"
                            % (n_layer, N_CTX, n_head_kv, head_dim),
        "decode": {"tokens": N_DECODE, "after_prompt_tokens": len(chat), "prompt": CHAT},
        "prompt": {"tokens": N_PROMPT, "ids": prompt},
        "threads": a.threads, "rounds": a.rounds, "prompt_passes_per_round": PROMPT_REPEATS,
        "results": {str(t): {"decode_tok_s": statistics.median(res[t]["decode"]),
                             "prompt_tok_s": statistics.median(res[t]["prompt"]),
                             "decode_samples": res[t]["decode"], "prompt_samples": res[t]["prompt"]}
                    for t in a.threads},
        "decode_tokens_same_on_all_thread_counts": same,
        "decode_ids": streams[a.threads[0]],
        "load_s": load_s,
        "memory_mib": {"at_start": mem_start, "after_import": mem_import, "after_load": mem_load,
                       "after_runs": mem_runs},
        "loadavg_1min": {"before": load_before[0], "after": load_after[0]},
        "cpus": len(os.sched_getaffinity(0)),
    }


def quantize(ftype, src, dst):
    """llama.cpp's own requantization (what llama-quantize does) of src into dst: test files in other
    weight types, not better models."""
    import llama_cpp
    code = getattr(llama_cpp, "LLAMA_FTYPE_MOSTLY_" + ftype.upper(), None)
    if code is None:
        print("llm_peers.py: llama.cpp has no file type %s" % ftype, file=sys.stderr)
        return 2
    params = llama_cpp.llama_model_quantize_default_params()
    params.ftype = code
    params.allow_requantize = True
    params.nthread = 2
    rc = llama_cpp.llama_model_quantize(src.encode(), dst.encode(), ctypes.byref(params))
    if rc != 0:
        print("llm_peers.py: llama_model_quantize returned %d" % rc, file=sys.stderr)
        return 1
    return 0


def mib(x):
    return "%.2f MiB" % x if x < 100 else "%.1f MiB" % x


def threads_name(t):
    return "%d thread%s" % (t, "" if t == 1 else "s")


def describe(j):
    v = j["versions"]
    return "llama-cpp-python %s (llama.cpp %s, ggml %s)" % (v["llama_cpp_python"], v.get("ggml_commit", "?"),
                                                            v.get("ggml_version", "?"))


def emit_rows(j):
    load = "load average %.2f before, %.2f after" % (j["loadavg_1min"]["before"], j["loadavg_1min"]["after"])
    common = "%s; n_ctx %d, f16 KV cache, flash attention %s; median of %d interleaved rounds; %s" % (
        describe(j), j["n_ctx"], "on" if j["flash_attn"] else "off", j["rounds"], load)
    h = j.get("hcq")
    if h:
        hnote = ("%d kernels a token; hcq generate --bench in the same rounds, HCQ_CPU_THREADS; its first %d of %d "
                 "greedy tokens are llama.cpp's" % (h["kernels_per_token"], h["same_tokens_as_llamacpp"], h["of"]))
    for t in j["threads"]:
        r = j["results"][str(t)]
        row(section_decode(t), NAME, r["decode_tok_s"], "tok/s",
            "%d tokens after the %d-token chat prompt (not timed), greedy; %s"
            % (j["decode"]["tokens"], j["decode"]["after_prompt_tokens"], common))
        if h:
            x = h["results"][str(t)]
            row(section_decode(t), HCQ_GRAPH, x["graph_decode"], "tok/s", "one captured step replayed per token; " + hnote)
            row(section_decode(t), HCQ_EAGER, x["eager_decode"], "tok/s", "every kernel launched one by one")
        row(section_prompt(t), NAME, r["prompt_tok_s"], "tok/s",
            "one llama_decode of %d tokens from an empty cache, %d per round; %s"
            % (j["prompt"]["tokens"], j["prompt_passes_per_round"], common))
        if h:
            x = h["results"][str(t)]
            row(section_prompt(t), HCQ_GRAPH, x["graph_prompt"], "tok/s", "the same ids as one captured pass replayed")
            row(section_prompt(t), HCQ_EAGER, x["eager_prompt"], "tok/s", "the same pass launched kernel by kernel")
    if h:
        for t in j["threads"]:
            x = h["results"][str(t)]
            row(section_host(), "%s, %s" % (HCQ_EAGER, threads_name(t)), x["host_eager"], "us",
                "median time to queue one step with the devices idle: %d launches" % h["kernels_per_token"])
            row(section_host(), "%s, %s" % (HCQ_GRAPH, threads_name(t)), x["host_graph"], "us", "one replay")
    m = j["memory_mib"]
    base = "model file %s (mmapped), KV cache %s (%s); python with llama_cpp imported %s" % (
        mib(j["model_bytes"] / 2**20), mib(j["kv_cache_bytes"] / 2**20), j["kv_cache_formula"],
        mib(m["after_import"]["VmRSS"]))
    row(section_memory(), "%s, VmRSS after the runs" % NAME, m["after_runs"]["VmRSS"], "MiB",
        "RssFile %s, RssAnon %s; peak (VmHWM) %s; %s" % (
            mib(m["after_runs"].get("RssFile", 0)), mib(m["after_runs"].get("RssAnon", 0)),
            mib(m["after_runs"]["VmHWM"]), base))
    if h:
        hm = h["memory_mib"]
        row(section_memory(), "hcq generate, VmRSS after the runs", hm["VmRSS"], "MiB",
            "RssFile %s, RssAnon %s, peak %s; the weights repacked into device buffers, the file unmapped; KV "
            "cache %s (float32, %d positions); target: file + KV cache + 20 MiB = %s" % (
                mib(hm["RssFile"]), mib(hm["RssAnon"]), mib(hm["VmHWM"]), mib(h["kv_cache_bytes"] / 2**20), h["ctx"],
                mib(j["model_bytes"] / 2**20 + h["kv_cache_bytes"] / 2**20 + 20)))


def table(j):
    m = j["memory_mib"]
    out = ["llama.cpp on %s (%s): %s" % (os.path.basename(j["model"]), mib(j["model_bytes"] / 2**20), describe(j)),
           "  n_ctx %d, n_batch = n_ubatch = %d, flash attention %s; KV cache %s = %s"
           % (j["n_ctx"], j["n_batch"], "on" if j["flash_attn"] else "off", mib(j["kv_cache_bytes"] / 2**20),
              j["kv_cache_formula"]),
           "",
           "                decode tok/s   prompt tok/s"]
    for t in j["threads"]:
        r = j["results"][str(t)]
        out.append("  %-12s %12.1f %14.1f" % (threads_name(t), r["decode_tok_s"], r["prompt_tok_s"]))
        if j.get("hcq"):
            x = j["hcq"]["results"][str(t)]
            out.append("    hcq graph  %12.1f %14.1f   (%.2fx, %.2fx)" % (
                x["graph_decode"], x["graph_prompt"], x["graph_decode"] / r["decode_tok_s"],
                x["graph_prompt"] / r["prompt_tok_s"]))
            out.append("    hcq eager  %12.1f %14.1f" % (x["eager_decode"], x["eager_prompt"]))
    out += ["",
            "  decode: %d tokens greedily after the %d-token chat prompt (evaluated first, not timed);"
            % (j["decode"]["tokens"], j["decode"]["after_prompt_tokens"]),
            "  prompt: %d tokens in one llama_decode from an empty cache; medians of %d interleaved rounds"
            % (j["prompt"]["tokens"], j["rounds"]),
            "  (%d prompt passes per round); same decode tokens on every thread count: %s"
            % (j["prompt_passes_per_round"], "yes" if j["decode_tokens_same_on_all_thread_counts"] else "NO"),
            "  1-minute load average %.2f before, %.2f after; %d CPUs"
            % (j["loadavg_1min"]["before"], j["loadavg_1min"]["after"], j["cpus"]),
            "",
            "  resident memory   VmRSS       RssFile     RssAnon     VmHWM"]
    for key, label in (("after_import", "before load"), ("after_load", "after load"), ("after_runs", "after runs")):
        x = m[key]
        out.append("  %-16s %-11s %-11s %-11s %s" % (label, mib(x["VmRSS"]), mib(x.get("RssFile", 0)),
                                                      mib(x.get("RssAnon", 0)), mib(x["VmHWM"])))
    return "\n".join(out)


def parse_threads(s):
    return [int(x) for x in s.split(",") if x.strip()]


def main():
    global LABEL
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--install", nargs="?", const=DEFAULT_VENV, metavar="VENV")
    ap.add_argument("--log", help="with --install: where pip's output goes (appended)")
    ap.add_argument("--rebuild", action="store_true", help="with --install: build again, not from pip's cache")
    ap.add_argument("--missing", action="store_true")
    ap.add_argument("--why", default="not measured")
    ap.add_argument("--model")
    ap.add_argument("--threads", type=parse_threads, default=[1, 2])
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--flash-attn", action="store_true")
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--rows", action="store_true")
    ap.add_argument("--hcq", help="the hcq command: measure hcq generate --bench in the same rounds")
    ap.add_argument("--label", help="the model file's name in the rows' sections (default: %s)" % LABEL)
    ap.add_argument("--quantize", nargs=3, metavar=("TYPE", "IN", "OUT"),
                    help="write IN requantized by llama.cpp (llama_model_quantize, allow_requantize) as TYPE "
                         "(Q4_K_M, Q8_0, ...) to OUT, and exit")
    a = ap.parse_args()
    LABEL = a.label or LABEL
    if a.quantize:
        return quantize(*a.quantize)
    if a.install:
        why = install(a.install, a.log, a.rebuild)
        if why:
            print("llm_peers.py: " + why, file=sys.stderr)
            print(why)
            return 1
        return 0
    if a.missing:
        missing_rows(a.why)
        return 0
    if a.rows:
        try:
            j = measure(a)
        except Exception as e:  # noqa: BLE001  (any failure is the rows' reason)
            missing_rows("%s: %s" % (type(e).__name__, str(e).splitlines()[0][:200] if str(e) else ""))
            return 0
        emit_rows(j)
        return 0
    j = measure(a)
    print(json.dumps(j, indent=1) if a.json else table(j))
    return 0


if __name__ == "__main__":
    sys.exit(main())
