#!/usr/bin/env python3
"""Gathers the rows of one `make bench` run (JSON lines, bench/rows.h) into one table.

    report.py ROWS.jsonl [--json] [--plot OUT.svg|OUT.png] [--machine TEXT] [--command TEXT]

Prints a Markdown table grouped by benchmark, each row with its speed against the section's
baseline (the hand-written code, the -Ofast single-thread C decoder, llama.cpp, or hcq's eager launches); --json prints one JSON object instead.
--plot draws the same numbers with matplotlib (one panel per benchmark, log scale).
"""
import argparse
import json
import math
import sys

BASELINES = ("C decoder -Ofast, one thread", "hand-written 2-thread spin pipeline", "plain C loop, one thread",
             "hcq graph replay, unprofiled", "hcq eager on VULKAN", "hcq eager on CUDA", "hcq eager on METAL",
             "PyTorch eager (CPU), sentence-transformers", "llama.cpp", "hcq eager launches, 1 thread",
             "llama.cpp, VmRSS after the runs", "hcq C call through cffi: hcq_jit_run")


def load(path):
    rows = []
    with open(path) as f:
        for line in f:
            line = line.strip()
            if line.startswith("{"):
                rows.append(json.loads(line))
    return rows


def sections(rows):
    order, by = [], {}
    for r in rows:
        if r["section"] not in by:
            order.append(r["section"])
            by[r["section"]] = []
        by[r["section"]].append(r)
    return [(s, by[s]) for s in order]


def relative(row, base):
    """Speed against the baseline: > 1 is faster. None when either is missing."""
    if base is None or row["value"] <= 0 or base["value"] <= 0:
        return None
    if row["unit"] == "tok/s":
        return row["value"] / base["value"]
    return base["value"] / row["value"]


def annotate(rows):
    for _, group in sections(rows):
        base = next((r for r in group if r["name"] in BASELINES), None)
        for r in group:
            r["baseline"] = base["name"] if base else None
            r["speed_vs_baseline"] = relative(r, base)


def fmt(v):
    return "%.3g" % v if v < 100 else "%.0f" % v


def table(rows, machine, command):
    out = []
    if machine:
        out.append("Machine: " + machine)
    if command:
        out.append("Command: `%s`" % command)
    out.append("")
    out.append("| benchmark | implementation | median | unit | speed vs baseline | note |")
    out.append("| --- | --- | ---: | --- | ---: | --- |")
    for section, group in sections(rows):
        for i, r in enumerate(group):
            value = "missing" if r["value"] < 0 else fmt(r["value"])
            rel = r.get("speed_vs_baseline")
            rel = "baseline" if r["name"] in BASELINES else ("%.2fx" % rel if rel else "")
            out.append("| %s | %s | %s | %s | %s | %s |" % (section if i == 0 else "", r["name"], value, r["unit"], rel,
                                                          r["note"]))
    return "\n".join(out)


def plot(rows, path, machine):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    groups = [(s, [r for r in g if r["value"] > 0]) for s, g in sections(rows)]
    groups = [(s, g) for s, g in groups if g and s != "idle process" and s != "hcq primitives"]
    # MiniLM by query length is 8 sections: the plot keeps one short length and the mean over all.
    groups = [(s, g) for s, g in groups if not s.startswith("MiniLM embedding, one query of ") or
              s == "MiniLM embedding, one query of 16 tokens"]
    heights = [max(1.2, 0.42 * len(g) + 0.7) for _, g in groups]
    fig, axes = plt.subplots(len(groups), 1, figsize=(9.5, sum(heights)), gridspec_kw={"height_ratios": heights})
    if len(groups) == 1:
        axes = [axes]
    for ax, (section, group) in zip(axes, groups):
        names = [r["name"] for r in group]
        values = [r["value"] for r in group]
        colors = ["#d62728" if r["name"].startswith("hcq") else
                  "#7f7f7f" if r["name"] in BASELINES else "#1f77b4" for r in group]
        ax.barh(range(len(group)), values, color=colors)
        ax.set_yticks(range(len(group)))
        ax.set_yticklabels(names, fontsize=8)
        ax.invert_yaxis()
        if max(values) / min(values) > 30:  # bars on a log scale start a decade below the smallest
            ax.set_xscale("log")
            ax.set_xlim(left=10 ** math.floor(math.log10(min(values)) - 0.5), right=max(values) * 4)
        else:
            ax.set_xlim(left=0, right=max(values) * 1.15)
        better = "higher is better" if group[0]["unit"] == "tok/s" else "lower is better"
        ax.set_title("%s (%s, %s)" % (section, group[0]["unit"], better), fontsize=9, loc="left")
        for i, v in enumerate(values):
            ax.text(v, i, " " + fmt(v), va="center", fontsize=7)
        ax.tick_params(axis="x", labelsize=7)
    fig.suptitle("hcq benchmarks" + (" - " + machine if machine else ""), fontsize=9)
    fig.tight_layout(rect=(0, 0, 1, 0.98))
    fig.savefig(path)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("rows")
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--plot")
    ap.add_argument("--machine", default="")
    ap.add_argument("--command", default="")
    a = ap.parse_args()
    rows = load(a.rows)
    if not rows:
        print("report.py: no rows in %s" % a.rows, file=sys.stderr)
        return 1
    annotate(rows)
    if a.json:
        print(json.dumps({"machine": a.machine, "command": a.command, "rows": rows}, indent=1))
    else:
        print(table(rows, a.machine, a.command))
    if a.plot:
        try:
            plot(rows, a.plot, a.machine)
        except ImportError as e:
            print("report.py: no plot (%s); install python3-matplotlib" % e, file=sys.stderr)
            return 1
        print("report.py: wrote %s" % a.plot, file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
