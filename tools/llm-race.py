#!/usr/bin/env python3
"""The LLM rows of tools/gpu-check.sh and tools/vulkan-check.sh: hcq's decoder on a GPU, eager
launches against graph replays, and llama.cpp on the same GGUF and the same token ids, in one table.

    llm-race.py --hcq HCQ --device CUDA|VULKAN --model FILE.gguf [--llamacpp BIN | --llamacpp-why TEXT]
                [--targets] [--quick] [--out DIR] [--title TEXT] [--timeout S] [--budget S]

Needs Python 3 and its standard library only (the GPU machine has it). Runs, each under --timeout
seconds (default 90), all of them within --budget seconds when given:
  1. `HCQ tokenize` on the chat prompt and the text of bench/llm_peers.py (the CPU race's inputs):
     the 37-token chat prompt "What is the capital of France?" in SmolLM2's template, and the first
     100 ids of a fixed English text;
  2. `HCQ generate --device KIND --bench --json` twice: decode of 128 tokens greedily after the
     chat prompt (--steps 129: the first token comes from the prompt pass), and the 100-token
     prompt as one pass; each eager launches against graph replays, 3 timed runs after a warm-up,
     medians; the host's time to queue one step with the device idle; whether eager launches and
     replays chose the same tokens (hcq's own check, exit status 1 when not);
  3. BIN (tools/llamacpp/llamacpp-bench, llama.cpp with its CUDA backend) on the same file and the
     same ids: decode and prompt tok/s, llama.cpp's greedy tokens; with --llamacpp-why the row says
     why it did not run instead.
Prints one table: decode and prompt tok/s, host us per token, the ratios; with --targets the
targets set for an H200 next to the measured values (CUDA graph decode >= 3x hcq eager, >= 1.5x
llama.cpp's decode, host us per token <= 5), each "met" or "MISSED". A missed target is not a
failure. --quick (the stand-in runs): 8 decode steps, a 16-token prompt, one timed run (the numbers
mean nothing there). --out DIR: llm.json (every object) and llm-table.txt there.
Exit status: 1 when a correctness check failed (eager and replay tokens differ; hcq generate
failed other than for want of kernels or a device, or ran past --timeout), else 0; a device
without the decoder's kernels ("no kernels for CUDA devices yet") or llama.cpp not running makes
a row that says so.
"""
import argparse
import json
import os
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "bench"))
import llm_peers  # noqa: E402  (the inputs of the CPU race: CHAT, TEXT, N_DECODE, N_PROMPT, N_CTX)

TARGET_GRAPH_VS_EAGER = 3.0
TARGET_VS_LLAMACPP = 1.5
TARGET_HOST_US = 5.0


def last_line(text):
    lines = [x.strip() for x in (text or "").splitlines() if x.strip()]
    return lines[-1][:300] if lines else ""


DEADLINE = None  # --budget: when every run must be over


def run(cmd, timeout, env=None):
    """(status, stdout, stderr, seconds); status None when it ran past the timeout (or the budget)."""
    t = time.time()
    if DEADLINE is not None:
        timeout = max(1, min(timeout, int(DEADLINE - t)))
    try:
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=env, check=False)
        return p.returncode, p.stdout, p.stderr, time.time() - t
    except subprocess.TimeoutExpired as e:
        out = e.stdout.decode(errors="replace") if isinstance(e.stdout, bytes) else (e.stdout or "")
        err = e.stderr.decode(errors="replace") if isinstance(e.stderr, bytes) else (e.stderr or "")
        return None, out, err, time.time() - t
    except OSError as e:
        return 127, "", str(e), time.time() - t


def json_object(text):
    for line in reversed((text or "").splitlines()):
        if line.startswith("{"):
            try:
                return json.loads(line)
            except ValueError:
                return None
    return None


def tokenize(a, text, special):
    cmd = [a.hcq, "tokenize", "--model", a.model, "--json"] + ([] if special else ["--no-special"]) + ["--", text]
    rc, out, err, _ = run(cmd, a.timeout)
    j = json_object(out)
    if rc != 0 or not j or "ids" not in j:
        raise RuntimeError("hcq tokenize failed (status %s): %s" % (rc, last_line(err) or last_line(out)))
    return j["ids"]


def hcq_generate(a, ids, steps, reps):
    """{"ok": bench object} or {"why": text, "failed": bool}."""
    cmd = [a.hcq, "generate", "--model", a.model, "--device", a.device, "--prompt-ids", ",".join(map(str, ids)),
           "--steps", str(steps), "--ignore-eos", "--bench", "--repeat", str(reps), "--ctx", str(llm_peers.N_CTX),
           "--json"]
    rc, out, err, secs = run(cmd, a.timeout)
    j = json_object(out)
    if rc is None:
        return {"why": "ran past its time (%.0f s)" % secs, "failed": True, "seconds": secs}
    if j and "identical" in j and rc in (0, 1):
        return {"ok": j, "failed": not j["identical"], "seconds": secs}
    why = last_line(err) or last_line(out) or "no output"
    # No kernels for this kind, or no such device: a row that says so, not a failed check.
    absent = rc == 3 and ("no kernels for" in why or "no %s device" % a.device in why)
    return {"why": "exit %d: %s" % (rc, why), "failed": not absent, "absent": absent, "seconds": secs}


def llamacpp(a, chat, prompt, steps, rounds):
    if not a.llamacpp:
        return {"why": a.llamacpp_why or "not asked for"}
    cmd = [a.llamacpp, "--model", a.model, "--chat-ids", ",".join(map(str, chat)), "--prompt-ids",
           ",".join(map(str, prompt)), "--steps", str(steps), "--rounds", str(rounds), "--ctx", str(llm_peers.N_CTX)]
    rc, out, err, secs = run(cmd, a.timeout)
    j = json_object(out)
    if rc is None:
        return {"why": "ran past its time (%.0f s)" % secs}
    if rc != 0 or not j:
        return {"why": "exit %s: %s" % (rc, last_line(err) or last_line(out) or "no output")}
    j["seconds"] = secs
    return {"ok": j}


def fmt(x, spec="%.1f"):
    return spec % x if isinstance(x, (int, float)) and x > 0 else "-"


def table(a, r):
    steps, nprompt = r["steps"], len(r["prompt_ids"])
    d, p, l = r["hcq_decode"], r["hcq_prompt"], r["llamacpp"]
    dj, pj, lj = d.get("ok"), p.get("ok"), l.get("ok")
    out = ["%s: SmolLM2-135M Q4_1 (%s)\n  decode: %d tokens greedily after the %d-token chat prompt; prompt: %d tokens "
           "in one pass" % (a.title or "LLM on " + a.device, os.path.basename(a.model), steps, len(r["chat_ids"]),
                            nprompt)]
    if a.quick:
        out.append("  (--quick: fewer steps and tokens, one timed run; the numbers mean nothing)")
    w = 44
    out.append("  %-*s %12s %12s %12s" % (w, "row", "decode tok/s", "prompt tok/s", "host us/tok"))
    kind = dj.get("graph_kind", "?") if dj else "?"
    if dj:
        out.append("  %-*s %12s %12s %12s" % (w, "hcq %s, eager: %d launches a token" % (
            a.device, dj["kernels_per_token"]), fmt(dj["eager_decode_tok_s"]),
            fmt(pj["eager_prefill_tok_s"]) if pj else "-", fmt(dj["host_us_per_token_eager"], "%.2f")))
        out.append("  %-*s %12s %12s %12s" % (w, "hcq %s, %s graph: one replay a token" % (a.device, kind),
                                           fmt(dj["graph_decode_tok_s"]), fmt(pj["graph_prefill_tok_s"]) if pj else "-",
                                           fmt(dj["host_us_per_token_graph"], "%.2f")))
    else:
        out.append("  %-*s %s" % (w, "hcq %s" % a.device, ("NOT RUN: " if d.get("absent") else "FAILED: ") + d["why"]))
    if dj and not pj:
        out.append("  %-*s %s" % (w, "hcq %s, prompt pass" % a.device, ("NOT RUN: " if p.get("absent") else "FAILED: ")
                                   + p["why"]))
    if lj:
        fa = lj.get("flash_attn_log") or "flash attention %s" % lj.get("flash_attn")
        out.append("  %-*s %12s %12s %12s" % (w, "llama.cpp CUDA", fmt(lj["decode_tok_s"]), fmt(lj["prompt_tok_s"]), "-"))
        out.append("    ggml %s (%s); %s; %s" % (lj.get("ggml_version"), lj.get("ggml_commit"), "; ".join(lj.get("devices", [])),
                                                fa.strip()))
    else:
        out.append("  %-*s %s" % (w, "llama.cpp CUDA", "NOT RUN: " + l["why"]))
    out.append("")
    if dj:
        vs_eager = dj["graph_decode_tok_s"] / dj["eager_decode_tok_s"] if dj["eager_decode_tok_s"] > 0 else 0
        vs_llama = dj["graph_decode_tok_s"] / lj["decode_tok_s"] if lj and lj["decode_tok_s"] > 0 else 0
        host = dj["host_us_per_token_graph"]
        checks = [("graph decode / eager decode", vs_eager, "%.2fx" % vs_eager, ">= %.1fx" % TARGET_GRAPH_VS_EAGER,
                   vs_eager >= TARGET_GRAPH_VS_EAGER),
                  ("graph decode / llama.cpp decode", vs_llama, "%.2fx" % vs_llama if vs_llama else "-",
                   ">= %.1fx" % TARGET_VS_LLAMACPP, vs_llama >= TARGET_VS_LLAMACPP),
                  ("host us per token, graph", host, "%.2f" % host, "<= %.0f" % TARGET_HOST_US, 0 < host <= TARGET_HOST_US)]
        if pj:
            pv = pj["graph_prefill_tok_s"] / pj["eager_prefill_tok_s"] if pj["eager_prefill_tok_s"] > 0 else 0
            checks.append(("graph prompt / eager prompt", pv, "%.2fx" % pv, "", None))
            if lj and lj["prompt_tok_s"] > 0:
                pl = pj["graph_prefill_tok_s"] / lj["prompt_tok_s"]
                checks.append(("graph prompt / llama.cpp prompt", pl, "%.2fx" % pl, "", None))
        out.append("  %-*s %12s %12s %12s" % (w, "ratio or figure", "measured", "target" if a.targets else "", ""))
        for name, value, shown, target, met in checks:
            verdict = ""
            if a.targets and target:
                verdict = "-" if not value else "met" if met else "MISSED"
            out.append("  %-*s %12s %12s %12s" % (w, name, shown, target if a.targets else "", verdict))
    tok = []
    if dj:
        tok.append("decode: eager and replay tokens %s" % ("identical" if dj["identical"] else "DIFFER"))
    if pj:
        tok.append("prompt pass: %s" % ("identical" if pj["identical"] else "DIFFER"))
    if dj and lj:
        ours, theirs = dj["token_ids"], lj["token_ids"]
        n = min(len(ours), len(theirs))
        agree = next((i for i in range(n) if ours[i] != theirs[i]), n)
        tok.append("the first %d of %d greedy tokens are llama.cpp's" % (agree, n))
    if tok:
        out.append("  tokens: " + "; ".join(tok))
    if a.targets:
        out.append("  targets (set for an H200): a missed one is reported, not failed; exit 1 only when a check fails")
    return "\n".join(out)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--hcq", required=True)
    ap.add_argument("--device", required=True, choices=["CPU", "CUDA", "VULKAN", "METAL"])
    ap.add_argument("--model", required=True)
    ap.add_argument("--llamacpp")
    ap.add_argument("--llamacpp-why")
    ap.add_argument("--targets", action="store_true")
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--out")
    ap.add_argument("--title")
    ap.add_argument("--timeout", type=int, default=90)
    ap.add_argument("--budget", type=int, help="seconds for everything: no run goes past it")
    a = ap.parse_args()
    global DEADLINE
    if a.budget:
        DEADLINE = time.time() + a.budget
    steps = 8 if a.quick else llm_peers.N_DECODE
    nprompt = 16 if a.quick else llm_peers.N_PROMPT
    reps = 1 if a.quick else 3
    r = {"device": a.device, "model": a.model, "steps": steps}
    if not os.path.isfile(a.model):
        print("%s: no model file %s" % (a.title or "LLM on " + a.device, a.model))
        return 0
    try:
        r["chat_ids"] = tokenize(a, llm_peers.CHAT, True)
        r["prompt_ids"] = tokenize(a, llm_peers.TEXT, False)[:nprompt]
    except RuntimeError as e:
        print("%s: FAILED: %s" % (a.title or "LLM on " + a.device, e))
        return 1
    r["hcq_decode"] = hcq_generate(a, r["chat_ids"], steps + 1, reps)
    r["hcq_prompt"] = hcq_generate(a, r["prompt_ids"], 1, reps) if "ok" in r["hcq_decode"] else {
        "why": "not run (the decode run did not)", "failed": False, "absent": r["hcq_decode"].get("absent", False)}
    r["llamacpp"] = llamacpp(a, r["chat_ids"], r["prompt_ids"], steps, reps)
    text = table(a, r)
    print(text, flush=True)
    if a.out:
        os.makedirs(a.out, exist_ok=True)
        with open(os.path.join(a.out, "llm.json"), "w") as f:
            json.dump(r, f, indent=1)
        with open(os.path.join(a.out, "llm-table.txt"), "w") as f:
            f.write(text + "\n")
    return 1 if r["hcq_decode"].get("failed") or r["hcq_prompt"].get("failed") else 0


if __name__ == "__main__":
    sys.exit(main())
