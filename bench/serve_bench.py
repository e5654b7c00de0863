#!/usr/bin/env python3
"""hcq serve against llama.cpp's llama-server (bench/serve.sh builds it), issue 44 item 6.

    serve_bench.py --hcq HCQ (--llama-server PATH | --llama-server-missing WHY) [--model FILE]
                   [--threads 2] [--rounds 3] [--tokens 96] [--streams 1,4,8] [--rows FILE] [--json]

Both servers run on the same GGUF file (SmolLM2-135M-Instruct Q4_1 by default) with the same CPU
threads, one at a time (each started for its turn and stopped after it: llama.cpp's threads spin
after a request and would take the cores from the other's turn): `hcq serve --threads T --parallel 8 --ctx 1024` and `llama-server -t T -tb T -np 8 -c 8192
--cont-batching` (1024 positions a slot). Each round, for each stream count N (1, 4, 8), each server
in turn (the order alternating between rounds) gets N concurrent streamed /v1/completions requests,
each a different 20-odd-token prompt (so that no prompt cache helps), greedy, 96 new tokens with
EOS ignored. Per measurement: aggregate decode tok/s = N x 95 / (the last stream's end - the first
token of any stream), the tokens after each stream's first over the time the streams decode (what
`hcq generate` reports as its decode tok/s); end-to-end tok/s = N x 96 / (the last stream's end -
the requests' start), prompts included; time to first token = the median over the N streams of
(first text chunk - its request sent). Medians over the rounds. Also `hcq generate` on one stream (the same prompt shape, 96 tokens,
its decode tok/s, HCQ_CPU_THREADS=T) for the "one stream within 10%" target, and the load average
before and after. Prints a table; --rows FILE appends bench/rows.h JSON lines; --json one object.
Only the standard library."""
import argparse
import http.client
import json
import os
import socket
import statistics
import subprocess
import sys
import threading
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "serve"))
from serve_util import model_path  # noqa: E402

TOPICS = ["a lighthouse keeper", "the first snow", "a lost key", "two old friends", "a city at night",
          "a river in spring", "a clockmaker", "a letter never sent", "the last train", "a garden"]


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Peer:
    """A server, started for each round and stopped after it: only one runs at a time (llama.cpp's
    threads spin after a request, which would take the cores from the other server's turn)."""

    def __init__(self, name, args, port):
        self.name, self.args, self.port, self.proc = name, args, port, None
        self.log = open("/tmp/serve-bench-%s-%d.log" % (name.split()[0], port), "w")

    def start(self, seconds=600):
        self.proc = subprocess.Popen(self.args, stdout=self.log, stderr=subprocess.STDOUT)
        until = time.time() + seconds
        while time.time() < until:
            if self.proc.poll() is not None:
                raise RuntimeError("%s exited %d (see %s)" % (self.name, self.proc.returncode, self.log.name))
            try:
                c = http.client.HTTPConnection("127.0.0.1", self.port, timeout=5)
                c.request("GET", "/health")
                if c.getresponse().status == 200:
                    measure(self, 8, 16, 99)  # warm-up: every batch size once
                    return
            except OSError:
                pass
            time.sleep(0.1)
        raise RuntimeError("%s not ready after %ds" % (self.name, seconds))

    def stop(self):
        if self.proc is None:
            return
        self.proc.terminate()
        try:
            self.proc.wait(30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        self.proc = None


def one_stream(port, prompt, tokens, out, index, start):
    body = json.dumps({"prompt": prompt, "max_tokens": tokens, "temperature": 0, "stream": True, "ignore_eos": True,
                       "cache_prompt": False})
    start.wait()
    t_send = time.perf_counter()
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=600)
    c.request("POST", "/v1/completions", body=body, headers={"Content-Type": "application/json"})
    r = c.getresponse()
    first, chunks, buf = None, 0, b""
    while True:
        piece = r.read1(65536)
        if not piece:
            break
        buf += piece
        while b"\n\n" in buf:
            event, buf = buf.split(b"\n\n", 1)
            data = event.decode().strip()
            if not data.startswith("data: ") or data == "data: [DONE]":
                continue
            text = json.loads(data[6:])["choices"][0].get("text") or ""
            if text and first is None:
                first = time.perf_counter()
            chunks += 1
    out[index] = (t_send, first or time.perf_counter(), time.perf_counter(), r.status, chunks)
    c.close()


def measure(peer, streams, tokens, round_no):
    out = [None] * streams
    start = threading.Barrier(streams + 1)
    threads = []
    for i in range(streams):
        prompt = "Story %d-%d. Write a short story about %s, in plain words, for a child." % (
            round_no, i, TOPICS[(round_no * 8 + i) % len(TOPICS)])
        t = threading.Thread(target=one_stream, args=(peer.port, prompt, tokens, out, i, start))
        t.start()
        threads.append(t)
    t0 = time.perf_counter()
    start.wait()
    for t in threads:
        t.join()
    if any(o is None or o[3] != 200 for o in out):
        raise RuntimeError("%s: a stream failed: %s" % (peer.name, out))
    end = max(o[2] for o in out)
    ttft = statistics.median((o[1] - o[0]) * 1000 for o in out)
    decode = streams * (tokens - 1) / (end - min(o[1] for o in out))
    return streams * tokens / (end - t0), ttft, decode


def hcq_generate_rate(hcq, model, threads, tokens):
    env = dict(os.environ, HCQ_CPU_THREADS=str(threads))
    prompt = "Story 0-0. Write a short story about a lighthouse keeper, in plain words, for a child."
    rates = []
    for _ in range(3):
        out = subprocess.run([hcq, "generate", "--model", model, "--prompt", prompt, "--steps", str(tokens),
                              "--ignore-eos", "--json"], env=env, check=True, capture_output=True, text=True).stdout
        rates.append(json.loads(out)["decode_tok_s"])
    return statistics.median(rates)


def loadavg():
    with open("/proc/loadavg") as f:
        return float(f.read().split()[0])


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--hcq", required=True)
    ap.add_argument("--llama-server")
    ap.add_argument("--llama-server-missing")
    ap.add_argument("--model")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--tokens", type=int, default=96)
    ap.add_argument("--streams", default="1,4,8")
    ap.add_argument("--rows")
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args()
    model = a.model or model_path()
    if not model:
        sys.exit("serve_bench.py: no SmolLM2 model (hcq generate --fetch-model fetches it)")
    streams = [int(s) for s in a.streams.split(",")]
    port = free_port()
    peers = [Peer("hcq serve", [a.hcq, "serve", "--model", model, "--port", str(port), "--threads", str(a.threads),
                                "--parallel", "8", "--ctx", "1024"], port)]
    if a.llama_server:
        port = free_port()
        peers.append(Peer("llama-server", [a.llama_server, "-m", model, "--port", str(port), "-t", str(a.threads),
                                           "-tb", str(a.threads), "-np", "8", "-c", "8192", "--cont-batching"], port))
    load0 = loadavg()
    results = {p.name: {n: [] for n in streams} for p in peers}
    try:
        for r in range(a.rounds):
            for p in (peers if r % 2 == 0 else peers[::-1]):
                p.start()
                for n in streams:
                    results[p.name][n].append(measure(p, n, a.tokens, r))
                p.stop()
    finally:
        for p in peers:
            p.stop()
    one = hcq_generate_rate(a.hcq, model, a.threads, a.tokens)
    load1 = loadavg()
    summary = {"threads": a.threads, "tokens": a.tokens, "rounds": a.rounds, "model": model, "hcq_generate_tok_s": one,
               "loadavg_before": load0, "loadavg_after": load1, "servers": {}}
    for name, by_n in results.items():
        summary["servers"][name] = {str(n): {"tok_s": statistics.median(x[0] for x in v),
                                             "ttft_ms": statistics.median(x[1] for x in v),
                                             "decode_tok_s": statistics.median(x[2] for x in v)}
                                    for n, v in by_n.items()}
    if a.llama_server_missing:
        summary["llama_server_missing"] = a.llama_server_missing
    report(summary, streams, a)


def report(summary, streams, a):
    rows = []
    section = "SmolLM2 served: %d concurrent streams of %d tokens, %d threads" % (max(streams), a.tokens, a.threads)
    for name, by_n in summary["servers"].items():
        for n in streams:
            m = by_n[str(n)]
            rows.append({"section": section, "name": "%s, %d stream%s, aggregate" % (name, n, "s" if n > 1 else ""),
                         "value": round(m["decode_tok_s"], 1), "unit": "tok/s",
                         "note": "decode; TTFT %.0f ms; %.1f tok/s end to end" % (m["ttft_ms"], m["tok_s"])})
    if "llama_server_missing" in summary:
        rows.append({"section": section, "name": "llama-server", "value": -1, "unit": "",
                     "note": "missing: " + summary["llama_server_missing"]})
    rows.append({"section": section, "name": "hcq generate, one stream",
                 "value": round(summary["hcq_generate_tok_s"], 1),
                 "unit": "tok/s", "note": "load %.2f -> %.2f" % (summary["loadavg_before"], summary["loadavg_after"])})
    if a.rows:
        with open(a.rows, "a") as f:
            for r in rows:
                f.write(json.dumps(r) + "\n")
    if a.json:
        print(json.dumps(summary))
        return
    print(section)
    print("  %-14s %8s %14s %12s %16s" % ("server", "streams", "decode tok/s", "TTFT ms", "end-to-end tok/s"))
    for name, by_n in summary["servers"].items():
        for n in streams:
            m = by_n[str(n)]
            print("  %-14s %8d %14.1f %12.0f %16.1f" % (name, n, m["decode_tok_s"], m["ttft_ms"], m["tok_s"]))
    print("  hcq generate, one stream: %.1f tok/s; load average %.2f -> %.2f" % (
        summary["hcq_generate_tok_s"], summary["loadavg_before"], summary["loadavg_after"]))
    if "llama_server_missing" in summary:
        print("  llama-server: missing: " + summary["llama_server_missing"])


if __name__ == "__main__":
    main()
