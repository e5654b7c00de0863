#!/usr/bin/env python3
"""The documentation stands alone and shows code that compiles:
- every C snippet (```c) in README.md is a run of consecutive lines of a file in examples/c/, and
  every C++ snippet (```cpp) of one in examples/cpp/ (the install test builds both with -Wall
  -Wextra -Werror and runs them), indentation aside;
- README.md, docs/, examples/, the models' READMEs, the public headers and tools/ (the scripts run
  on other machines, whose headers say what they need) cite nothing outside the repository, and
  every repository path they name (a relative link, or a `path/like/this`) exists;
- no source either: src/, cli/, models/, tests/, bench/, scripts/, cmake/, fuzz/, examples/, every
  CMakeLists.txt, the Makefile and .ci/ cite nothing outside the repository (the design is
  docs/design.md: comments cite its sections, never a document only some contributors have);
- README.md's architecture section stays one screen (30 lines);
- every script in tools/ and scripts/ that starts with #! is executable;
- the headers and docs give HCQ_CFLAGS's real default.
usage: test_docs.py SOURCE_DIR"""
import glob
import os
import re
import sys

root = sys.argv[1]
failures = []


def rel(path):
    return os.path.relpath(path, root)


def dedent(lines):
    lines = [l.rstrip() for l in lines]
    indent = min((len(l) - len(l.lstrip()) for l in lines if l.strip()), default=0)
    return [l[indent:] for l in lines]


readme_path = os.path.join(root, "README.md")
readme = open(readme_path, encoding="utf-8").read()

# ---- C snippets come from examples/c, C++ ones from examples/cpp ----
snippets = []
for lang, pattern in (("c", "examples/c/*.c"), ("cpp", "examples/cpp/*.cpp")):
    sources = {rel(p): open(p, encoding="utf-8").read().split("\n") for p in glob.glob(os.path.join(root, pattern))}
    blocks = re.findall(rf"^```{lang}\n(.*?)^```", readme, flags=re.S | re.M)
    if not blocks:
        failures.append(f"README.md has no ```{lang} snippet")
    snippets += blocks
    for n, snippet in enumerate(blocks):
        want = dedent(snippet.rstrip("\n").split("\n"))
        found = any(dedent(lines[i:i + len(want)]) == want for lines in sources.values()
                    for i in range(len(lines) - len(want) + 1))
        if not found:
            failures.append(f"README.md {lang} snippet {n + 1} (starting {want[0].strip()!r}) is not a run of lines of "
                            f"any {pattern}: copy it from the example it comes from")

# ---- nothing outside the repository ----
docs = [readme_path] + glob.glob(os.path.join(root, "docs/*")) + glob.glob(os.path.join(root, "examples/**/*.md"), recursive=True) \
    + glob.glob(os.path.join(root, "models/**/*.md"), recursive=True) \
    + glob.glob(os.path.join(root, "examples/c/*")) + glob.glob(os.path.join(root, "examples/cpp/*")) \
    + glob.glob(os.path.join(root, "include/hcq/*.h")) + glob.glob(os.path.join(root, "include/hcq/*.hpp")) \
    + [p for p in glob.glob(os.path.join(root, "tools/**/*"), recursive=True) if os.path.isfile(p)]
# References to documents outside the repository: the design notes (SPEC and its sections, STYLE, CLI)
# and the directories they lived in, named with a slash. Not ordinary words: a "shared library",
# "shared.bin", or a directory of that name inside a longer path (a build tree's) is fine.
outside = [r"\.\./shared\b", r"(?<![\w./${}-])shared(?=/)", r"\b(?:CLI|SPEC|STYLE)\.md\b", r"\bSPEC ?(?:\d|\u00a7)",
           r"\bSPEC section", r"(?<![\w.-])/wor[k]/"]
# The patterns catch what they are for and leave ordinary words alone (written split, so that this
# file does not match itself).
for sample in ["(SPEC " + "5 step 7)", "SPEC" + " 6b", "see SPEC" + ".md", "../" + "shar" + "ed/SPEC", "shared" + "/STYLE",
               "CLI" + ".md", "/wor" + "k/shared/x", "SPEC \u00a7" + "3"]:
    if not any(re.search(p, sample) for p in outside):
        failures.append(f"test_docs.py: no pattern catches {sample!r}")
for sample in ["a shared library", "shared.bin", "libhcq_shared", "${CMAKE_BINARY_DIR}/shared/x", "build/shared/", "SPECIAL_OFF",
               "SPEC = 'llama-cpp-python'", "the spec of a model", "docs/cli.md", "network/work/x"]:
    if any(re.search(p, sample) for p in outside):
        failures.append(f"test_docs.py: a pattern catches the ordinary {sample!r}")

# Sources: every text file of these kinds under the source directories, every CMakeLists.txt.
source_exts = (".c", ".h", ".cpp", ".hpp", ".cu", ".glsl", ".metal", ".m", ".in", ".cmake", ".py", ".sh", ".txt",
               ".supp", ".dict", ".json", ".md", ".1")
sources = [p for d in ("src", "cli", "models", "tests", "bench", "scripts", "cmake", "fuzz", "examples")
           for p in glob.glob(os.path.join(root, d, "**", "*"), recursive=True)
           if os.path.isfile(p) and (p.endswith(source_exts) or os.path.basename(p) == "CMakeLists.txt")]
sources += [os.path.join(root, f) for f in ("CMakeLists.txt", "Makefile", ".ci/run") if os.path.isfile(os.path.join(root, f))]
sources = sorted(set(sources) - set(docs))
for path in sources:
    try:
        text = open(path, encoding="utf-8").read()
    except UnicodeDecodeError:
        continue
    for pattern in outside:
        for m in re.finditer(pattern, text):
            line = text.count("\n", 0, m.start()) + 1
            failures.append(f"{rel(path)}:{line}: cites something outside the repository ({m.group(0)!r}): "
                            "cite docs/design.md or the doc that covers it")
path_re = re.compile(r"`((?:docs|include|examples|models|src|scripts|tests|cli|bench|fuzz|cmake|tools)/[A-Za-z0-9_./*-]*[A-Za-z0-9_*])`")
for path in docs:
    text = open(path, encoding="utf-8").read()
    for pattern in outside:
        for m in re.finditer(pattern, text):
            line = text.count("\n", 0, m.start()) + 1
            failures.append(f"{rel(path)}:{line}: cites something outside the repository ({m.group(0)!r})")
    if path.endswith(".md"):
        for m in re.finditer(r"\]\(([^)#\s]+)(?:#[^)]*)?\)", text):
            target = m.group(1)
            if re.match(r"[a-z]+:", target):
                continue
            if not os.path.exists(os.path.join(os.path.dirname(path), target)):
                failures.append(f"{rel(path)}: link to {target}, which does not exist")
    for m in path_re.finditer(text):
        target = m.group(1)
        if not glob.glob(os.path.join(root, target)) and not os.path.exists(os.path.join(root, target)):
            failures.append(f"{rel(path)}: names {target}, which is not in the repository")

# ---- the documented default compiler flags are the code's ----
m = re.search(r'#define HCQ__DEFAULT_CFLAGS "([^"]+)"', open(os.path.join(root, "src/core/options.h")).read())
if not m:
    failures.append("src/core/options.h: no HCQ__DEFAULT_CFLAGS")
else:
    for doc in ("include/hcq/program.h", "README.md", "docs/kernel-cache.md", "cli/help.c"):
        if m.group(1) not in open(os.path.join(root, doc), encoding="utf-8").read():
            failures.append(f"{doc} does not give HCQ_CFLAGS's default, {m.group(1)!r}")

# ---- scripts the docs tell people to run are executable ----
for path in sorted(glob.glob(os.path.join(root, "tools/*")) + glob.glob(os.path.join(root, "scripts/*"))):
    if not os.path.isfile(path):
        continue
    with open(path, "rb") as f:
        if f.read(2) == b"#!" and not os.access(path, os.X_OK):
            failures.append(f"{rel(path)} starts with #! but is not executable (git update-index --chmod=+x)")

# ---- every call that ends a handle's life says what using it afterwards does ----
for header in sorted(glob.glob(os.path.join(root, "include/hcq/*.h"))):
    text = open(header, encoding="utf-8").read()
    for m in re.finditer(r"^(?:HCQ_MUST_USE )?[\w \*]+\b(hcq_\w+_(?:release|free|destroy))\(", text, flags=re.M):
        if m.group(1) in ("hcq_status_destroy", "hcq_graph_file_destroy"):
            continue  # not handles HCQ_VALIDATE knows: a status is plain memory, a file frees its own objects
        comment = re.search(r"/\*((?:(?!\*/).)*)\*/\s*$", text[:m.start()], flags=re.S)
        if not comment or "HCQ_VALIDATE" not in comment.group(1):
            failures.append(f"{rel(header)}: {m.group(1)}'s comment does not say what use after it does "
                            "(undefined unless HCQ_VALIDATE=1)")

# ---- the architecture section is one screen ----
m = re.search(r"^## Architecture\n(.*?)(?=^## )", readme, flags=re.S | re.M)
if not m:
    failures.append("README.md has no ## Architecture section")
elif m.group(0).count("\n") > 30:
    failures.append(f"README.md's architecture section has {m.group(0).count(chr(10))} lines; keep it to 30")

for f in failures:
    print("FAIL:", f)
print(f"{len(snippets)} README snippets, {len(docs)} documents and {len(sources)} sources checked: "
      f"{'all good' if not failures else str(len(failures)) + ' problem(s)'}")
sys.exit(1 if failures else 0)
