#!/usr/bin/env python3
"""make bench's roofline rows (issue 42, items 2 and 3): how close hcq's decoding comes to the
memory bandwidth, and its prompt pass to the int8 dot-product peak, on 1 and 2 threads.

    roofline.py --hcq HCQ --roofline BENCH_ROOFLINE [--rows FILE] LABEL=FILE.gguf ...

bench_roofline measures the machine (memory read bandwidth, int8 dot-product peak, each on 1 and 2
threads) and each file's bytes and multiply-adds per token. For each file and thread count,
`hcq generate` (HCQ_CPU_THREADS=T) decodes 128 tokens after a 128-token prompt, twice (the better
run counts). Decode: tok/s x bytes per token / bandwidth, the fraction of the tokens a second that
streaming every weight once per token allows. Prompt: prompt tok/s x 2 x multiply-adds per prompt
token (the classifier's left out: a prompt pass classifies its last token only), as a fraction of the int8 peak (the kernels multiply int8 weights by int8 activations). Rows as
bench/rows.h's JSON lines; without --rows, a table."""
import argparse
import json
import os
import subprocess
import sys

PROMPT = [1 + (i * 7919) % 30000 for i in range(128)]  # ids spread over the vocabulary


def run_json(cmd, env=None):
    p = subprocess.run(cmd, capture_output=True, text=True, env=env, check=False)
    if p.returncode != 0:
        raise RuntimeError("%s exited %d: %s" % (os.path.basename(cmd[0]), p.returncode, p.stderr.strip()[-300:]))
    return json.loads(p.stdout)


def generate(hcq, model, threads):
    cmd = [hcq, "generate", "--model", model, "--prompt-ids", ",".join(map(str, PROMPT)), "--steps", "128",
           "--ignore-eos", "--ctx", "512", "--json"]
    env = dict(os.environ, HCQ_CPU_THREADS=str(threads))
    runs = [run_json(cmd, env) for _ in range(2)]
    return max(r["decode_tok_s"] for r in runs), max(r["prefill_tok_s"] for r in runs)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--hcq", required=True)
    ap.add_argument("--roofline", required=True)
    ap.add_argument("--rows")
    ap.add_argument("files", nargs="+", help="LABEL=FILE")
    a = ap.parse_args()
    section = "Roofline: decode against memory bandwidth, prompt against the int8 peak"
    rows = []

    def row(name, value, unit, note):
        rows.append({"section": section, "name": name, "value": round(value, 3), "unit": unit, "note": note})

    m = run_json([a.roofline, "machine"])
    for t in (1, 2):
        row("memory read bandwidth, %d thread%s" % (t, "s" if t > 1 else ""), m["read_gbs"][t - 1], "GB/s",
            "vector loads over 1 GiB, best of 7")
        row("int8 dot-product peak, %d thread%s" % (t, "s" if t > 1 else ""), m["int8_gops"][t - 1], "GOP/s",
            "AVX-512 VNNI vpdpbusd, 16 accumulators; -1: no VNNI")
    for spec in a.files:
        label, path = spec.split("=", 1)
        try:
            need = run_json([a.roofline, "model", path])
            for t in (1, 2):
                decode, prompt = generate(a.hcq, path, t)
                bw, peak = m["read_gbs"][t - 1] * 1e9, m["int8_gops"][t - 1] * 1e9
                limit = bw / need["bytes_per_token"]
                row("%s decode, %d thread%s" % (label, t, "s" if t > 1 else ""), decode / limit, "of roofline",
                    "%.0f tok/s x %.1f MB a token = %.1f GB/s; the limit is %.0f tok/s"
                    % (decode, need["bytes_per_token"] / 1e6, decode * need["bytes_per_token"] / 1e9, limit))
                gops = prompt * 2 * need["prompt_macs_per_token"] / 1e9
                row("%s prompt, %d thread%s" % (label, t, "s" if t > 1 else ""),
                    gops * 1e9 / peak if peak > 0 else -1, "of int8 peak",
                    "%.0f tok/s x %.0f M multiply-adds = %.1f GOP/s"
                    % (prompt, need["prompt_macs_per_token"] / 1e6, gops))
        except (RuntimeError, ValueError, KeyError) as e:
            rows.append({"section": section, "name": label, "value": -1, "unit": "", "note": "missing: %s" % e})
    if a.rows:
        with open(a.rows, "a") as f:
            for r in rows:
                f.write(json.dumps(r) + "\n")
    else:
        for r in rows:
            print("  %-44s %10.3f %-12s %s" % (r["name"], r["value"], r["unit"], r["note"]))


if __name__ == "__main__":
    sys.exit(main())
