#!/usr/bin/env python3
"""Command output shown in the docs is the command's real output, so it cannot go stale.

A fenced block right after a line `<!-- checked-output -->` (in README.md, docs/*.md or
examples/README.md) is a checked sample. In it, a line `$ COMMAND` is a command and the lines after
it, up to the next `$ ` line, are what it prints (standard output and error together). The test runs
each command from the repository root with bash, `hcq` (or `build/cli/hcq`) being the built tool,
and compares line by line:

- runs of white space count as one space, and leading and trailing space is ignored (column padding
  follows the width of the numbers);
- a decimal number (`0.611`, `1014.4`, `1.02x`) matches any decimal number: timings, sizes and
  ratios vary from run to run; whole numbers (counts, item indices, byte sizes) must be equal;
- a sample line `...` matches any number of lines (zero or more);
- a command shown with no output is not run (it is there to be read).

The marker may name lines that depend on the machine, by their start (after the rules above):
`<!-- checked-output numbers="CPU|kernel cache" lines="CUDA|VULKAN" -->`: in a line that starts
with a `numbers` prefix every number matches any number (core counts, the cache's contents); of a
line that starts with a `lines` prefix only that start is compared (a device kind is available on
one machine and absent on another). `requires="VULKAN"` skips the block, saying so, where `hcq info`
reports that device kind absent; `requires="SmolLM2"` where the default model of `hcq generate` is not
in the data folder (the llm_model test fetches it).

The load line benchmarks print last (`load average 0.42 (1 minute) on 2 CPUs`, or `the machine was
busy: load 3.2 on 2 CPUs; ...`) reports the machine, not hcq: a sample's `load average` line
matches either.

usage: check_samples.py HCQ SOURCE_DIR"""
import glob
import os
import re
import subprocess
import sys
import tempfile

hcq, root = os.path.abspath(sys.argv[1]), os.path.abspath(sys.argv[2])
failures = []
MARK = re.compile(r"^<!-- checked-output(?P<opts>(?:\s+\w+=\"[^\"]*\")*)\s*-->\s*$")
OPT = re.compile(r"(\w+)=\"([^\"]*)\"")
DECIMAL = re.compile(r"\d+\.\d+")
NUMBER = re.compile(r"\d+(?:\.\d+)?")


def norm(line):
    # Padding before a number follows its width (aligned columns), so it is not compared either.
    return " ".join(DECIMAL.sub(" #.# ", line).split())


def prefixes(opts, key):
    return [p for p in opts.get(key, "").split("|") if p]


LOAD_LINES = ("load average ", "the machine was busy: load ")


def line_matches(want, got, opts):
    w, g = " ".join(want.split()), " ".join(got.split())
    if w.startswith(LOAD_LINES[0]):
        return g.startswith(LOAD_LINES)
    for p in prefixes(opts, "lines"):
        if w.startswith(p):
            return g.startswith(p)
    for p in prefixes(opts, "numbers"):
        if w.startswith(p):
            return " ".join(NUMBER.sub(" # ", w).split()) == " ".join(NUMBER.sub(" # ", g).split())
    return norm(w) == norm(g)


def match(want, got, opts):
    """True when the sample lines match the output lines; '...' matches any run of lines."""
    if not want:
        return not got
    if want[0].strip() == "...":
        return any(match(want[1:], got[i:], opts) for i in range(len(got) + 1))
    return bool(got) and line_matches(want[0], got[0], opts) and match(want[1:], got[1:], opts)


def samples(path):
    """(line number, options, [(command, expected lines)]) for each checked block of a file."""
    lines = open(path, encoding="utf-8").read().split("\n")
    out = []
    for i, line in enumerate(lines):
        m = MARK.match(line)
        if not m:
            continue
        if i + 1 >= len(lines) or not lines[i + 1].startswith("```"):
            failures.append(f"{os.path.relpath(path, root)}:{i + 1}: checked-output marker not followed by a fenced block")
            continue
        opts = dict(OPT.findall(m.group("opts")))
        cmds, j = [], i + 2
        while j < len(lines) and not lines[j].startswith("```"):
            if lines[j].startswith("$ "):
                cmds.append((lines[j][2:], []))
            elif cmds:
                cmds[-1][1].append(lines[j])
            else:
                failures.append(f"{os.path.relpath(path, root)}:{j + 1}: output before the first `$ ` command")
            j += 1
        if not cmds:
            failures.append(f"{os.path.relpath(path, root)}:{i + 1}: checked block without a `$ ` command")
        out.append((i + 1, opts, cmds))
    return out


def model_present():
    d = os.environ.get("HCQ_DATA_DIR") or (os.path.join(os.environ["XDG_DATA_HOME"], "hcq") if os.environ.get(
        "XDG_DATA_HOME") else os.path.join(os.path.expanduser("~"), ".local", "share", "hcq"))
    return os.path.isfile(os.path.join(d, "models", "SmolLM2-135M-Instruct.Q4_1.gguf"))


docs = [os.path.join(root, "README.md"), os.path.join(root, "examples/README.md")] + sorted(glob.glob(os.path.join(root, "docs/*.md")))
checked = 0
with tempfile.TemporaryDirectory(prefix="hcq-doc-samples.") as tmp:
    bindir = os.path.join(tmp, "bin")
    os.mkdir(bindir)
    os.symlink(hcq, os.path.join(bindir, "hcq"))
    env = dict(os.environ, PATH=bindir + os.pathsep + os.environ.get("PATH", ""))
    info = subprocess.run([hcq, "info"], env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True).stdout
    for path in docs:
        for line, opts, cmds in samples(path):
            kinds = prefixes(opts, "requires")
            if "SmolLM2" in kinds:
                kinds.remove("SmolLM2")
                if not model_present():
                    print(f"skip {os.path.relpath(path, root)}:{line}: the SmolLM2 model is not here (hcq generate --fetch-model)")
                    continue
            absent = [k for k in kinds if not re.search(rf"^{k}\s+available", info, re.M)]
            if absent:
                print(f"skip {os.path.relpath(path, root)}:{line}: no {', '.join(absent)} device here")
                continue
            for cmd, want in cmds:
                while want and not want[-1].strip():
                    want.pop()
                if not want:
                    continue
                run = re.sub(r"^(?:\./)?build/cli/hcq\b", "hcq", cmd.strip())
                if not run.startswith("hcq ") and run != "hcq":
                    failures.append(f"{os.path.relpath(path, root)}:{line}: `{cmd}` is not an hcq command")
                    continue
                try:
                    p = subprocess.run(["bash", "-c", run], cwd=root, env=env, stdout=subprocess.PIPE,
                                       stderr=subprocess.STDOUT, text=True, timeout=120)
                    got = p.stdout.rstrip("\n").split("\n") if p.stdout.strip() else []
                except subprocess.TimeoutExpired:
                    got = ["(timed out after 120 s)"]
                checked += 1
                if not match(want, got, opts):
                    failures.append(f"{os.path.relpath(path, root)}:{line}: `{cmd}` prints something else than the "
                                    f"docs show.\n  docs:\n" + "\n".join("    | " + l for l in want) +
                                    "\n  real:\n" + "\n".join("    | " + l for l in got))

for f in failures:
    print("FAIL:", f)
print(f"{checked} documented commands run against their shown output: "
      f"{'all match' if not failures else str(len(failures)) + ' problem(s)'}")
if checked == 0 and not failures:
    print("FAIL: no checked-output sample found")
    sys.exit(1)
sys.exit(1 if failures else 0)
