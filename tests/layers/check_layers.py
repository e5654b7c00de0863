#!/usr/bin/env python3
"""hcq's layers import only downward: core <- graph <- backends <- jit <- io <- mpi <- models <- cli.

Three checks, on the sources and on what the build really holds (and the house rule on function
size, below):
  * includes: a source or private header may include only private headers of its own layer or a
    lower one (public headers in include/hcq/ are the API and may be included anywhere);
  * calls: every symbol an object file uses from another hcq object file must be defined in its
    own layer or a lower one (read with nm from the build directory's object files);
  * backends stand side by side: one backend's folder neither includes nor calls another's, and
    the layers that serve every kind (core, graph, jit, io, mpi) and the tool (cli, but for its
    default kind in cli/cli.h) name no kind (HCQ_DEVICE_CPU, ...); the backend table
    (src/backends.c) is where kinds are named.

The backend folders are read from the backend table: each row (&hcq__x_backend in src/backends.c)
is defined in one folder under src/, which is that backend's. A folder under src/ that is neither a
layer below nor a backend's fails the check, so a new folder is never skipped silently.

  check_layers.py SOURCE_DIR BUILD_DIR            the check (exit 1 naming every violation)
  check_layers.py SOURCE_DIR BUILD_DIR --report   also counts files over 800 and 1,000 lines and
                                                  functions over 80 lines (the house metrics)

It also fails on a function over 80 lines anywhere in the tracked C, C++ and CUDA sources
(function_sizes.py: signature to closing brace, measured by a lexer).
"""
import os
import re
import subprocess
import sys

from function_sizes import long_functions

# The graph layer's kind-neutral runner sits below the backends: a backend with a graph runner of its
# own (the CUDA graph, the Metal graph) builds it in its folder on that runner, and the graph layer
# reaches it through the row's graph_create.
LAYERS = ["core", "graph", "backends", "jit", "io", "mpi", "models", "cli"]

# Folder (relative to the source root) -> layer, the backends' folders added from the backend table
# (backend_folders). The longest matching prefix wins.
FOLDERS = {
    "src/core": "core",
    "src/trace": "core",
    "src/graph": "graph",
    "src/jit": "jit",
    "src/io": "io",
    "src/mpi": "mpi",
    "models": "models",
    "cli": "cli",
}

# The backend table is the one place the library names every backend: its rows sit with the
# backends (src/backends.c), and core reads them through hcq__backends, declared in core/backend.h.
# It is data, not a call, and the only reference core holds to a layer above.
ALLOWED_UP = {("core", "hcq__backends")}


def layer_of(rel):
    best = None
    for folder, layer in FOLDERS.items():
        if rel == folder or rel.startswith(folder + "/"):
            if best is None or len(folder) > len(best[0]):
                best = (folder, layer)
    if rel == "src/backends.c":
        return "backends"
    return best[1] if best else None


def rank(layer):
    return LAYERS.index(layer)


def sources(root):
    for top in ("src", "cli", "models"):
        for d, _, files in os.walk(os.path.join(root, top)):
            for f in sorted(files):
                if f.endswith((".c", ".h", ".cpp", ".hpp")):
                    yield os.path.relpath(os.path.join(d, f), root)


INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"', re.M)


def resolve_include(root, rel, name):
    here = os.path.dirname(rel)
    for base in (here, "src", ".", "models", "models/common"):
        cand = os.path.normpath(os.path.join(base, name))
        if os.path.isfile(os.path.join(root, cand)):
            return cand
    return None


BACKEND_FOLDERS = ()  # set by main from the backend table
KIND_BLIND = ("src/core", "src/trace", "src/graph", "src/jit", "src/io", "src/mpi", "cli")
# The tool's default kind (without --device) is named once, in cli/cli.h.
KIND_NAMED_HERE = ("cli/cli.h",)
ROW = re.compile(r"&\s*(hcq__\w+_backend)\b")


def backend_folders(root):
    """The folder under src/ of each row of the backend table (src/backends.c), and what is wrong
    with the table: a row defined nowhere, or in no folder of its own."""
    table = open(os.path.join(root, "src/backends.c"), encoding="utf-8", errors="replace").read()
    rows = ROW.findall(re.sub(r"/\*.*?\*/", "", table, flags=re.S))
    folders, bad = {}, []
    for rel in sources(root):
        if not rel.startswith("src/") or not rel.endswith(".c"):
            continue
        text = open(os.path.join(root, rel), encoding="utf-8", errors="replace").read()
        for row in rows:
            if re.search(r"\bconst\s+hcq__backend_t\s+" + row + r"\s*=", text):
                folders[row] = os.path.dirname(rel)
    for row in rows:
        where = folders.get(row)
        if where is None:
            bad.append(f"src/backends.c: the row {row} is defined in no source under src/")
        elif where == "src" or FOLDERS.get(where, "backends") != "backends":
            bad.append(f"src/backends.c: the row {row} is defined in {where}, not in a backend folder of its own")
    mine = set(f for f in folders.values() if f != "src" and FOLDERS.get(f, "backends") == "backends")
    return sorted(mine), rows, bad


def unknown_folders(root):
    """Folders under src/ that are no layer's and no backend's (the check would skip them)."""
    out = []
    for name in sorted(os.listdir(os.path.join(root, "src"))):
        rel = "src/" + name
        if os.path.isdir(os.path.join(root, rel)) and rel not in FOLDERS:
            out.append(f"{rel}: a folder no layer knows: a backend's folder defines a row of src/backends.c "
                       f"(docs/new-backend.md); another layer's is named in FOLDERS of {os.path.basename(__file__)}")
    return out
KIND_NAME = None  # set by main from the kind list (kind_pattern)


def kind_pattern(root):
    """HCQ_DEVICE_<kind> for every kind of the public kind list (HCQ_DEVICE_KINDS_ARG in
    include/hcq/device.h), so that a new kind is checked as the others are."""
    text = open(os.path.join(root, "include/hcq/device.h"), encoding="utf-8").read()
    kinds = re.findall(r'^\s*X\((\w+), "\w+", arg\)', text, re.M)
    return re.compile(r"\bHCQ_DEVICE_(" + "|".join(kinds) + r")\b")


def backend_of(rel):
    for f in BACKEND_FOLDERS:
        if rel.startswith(f + "/"):
            return f
    return None


def sideways(rel, target):
    a, b = backend_of(rel), backend_of(target)
    return a is not None and b is not None and a != b


def kind_names(root):
    out = []
    for rel in sources(root):
        if not rel.startswith(tuple(f + "/" for f in KIND_BLIND)) or rel in KIND_NAMED_HERE:
            continue
        for n, line in enumerate(open(os.path.join(root, rel), encoding="utf-8", errors="replace"), 1):
            code = line.split("//")[0]
            if code.lstrip().startswith(("/*", "*")):
                continue
            m = KIND_NAME.search(code)
            if m:
                out.append(f"{rel}:{n}: names the kind {m.group(0)} (a layer that serves every kind asks the backend table)")
    return out


def include_violations(root):
    out = []
    for rel in sources(root):
        mine = layer_of(rel)
        if mine is None:
            continue
        text = open(os.path.join(root, rel), encoding="utf-8", errors="replace").read()
        for m in INCLUDE.finditer(text):
            target = resolve_include(root, rel, m.group(1))
            if target is None or target.startswith("include/"):
                continue
            theirs = layer_of(target)
            line = text.count("\n", 0, m.start()) + 1
            if theirs is not None and rank(theirs) > rank(mine):
                out.append(f"{rel}:{line}: includes {target} ({mine} includes {theirs})")
            elif sideways(rel, target):
                out.append(f"{rel}:{line}: includes {target} (one backend includes another)")
    return out


def objects(build, root):
    """(object path, source path relative to root) for every hcq object file in the build."""
    found = []
    for d, _, files in os.walk(build):
        for f in files:
            if not f.endswith(".o"):
                continue
            path = os.path.join(d, f)
            # CMake names objects <build subfolder>/CMakeFiles/<target>.dir/<source path relative to
            # that subfolder's source folder>.o: models/llm/CMakeFiles/hcq_llm.dir/gguf.c.o is
            # models/llm/gguf.c.
            m = re.search(r"^(?:(.*)/)?CMakeFiles/[^/]+\.dir/(.+)\.o$", os.path.relpath(path, build))
            if not m:
                continue
            src = os.path.normpath(os.path.join(m.group(1) or "", m.group(2)))
            # tests, benchmarks, examples and tools are users of the library, not layers of it
            if layer_of(src) is None or not os.path.isfile(os.path.join(root, src)):
                continue
            found.append((path, src))
    return found


def nm(path):
    res = subprocess.run(["nm", "-P", path], capture_output=True, text=True, check=True)
    defined, used = set(), set()
    for line in res.stdout.splitlines():
        parts = line.split()
        if len(parts) < 2:
            continue
        name, kind = parts[0], parts[1]
        if kind == "U":
            used.add(name)
        elif kind in "TDBRCVWGS" or kind in "tdbr":
            if kind.isupper():
                defined.add(name)
    return defined, used


def call_violations(build, root):
    objs = objects(build, root)
    if not objs:
        return None
    where = {}  # symbol -> (layer, source)
    uses = []
    for path, src in objs:
        defined, used = nm(path)
        for s in defined:
            where.setdefault(s, (layer_of(src), src))
        uses.append((src, used))
    out = set()
    for src, used in uses:
        mine = layer_of(src)
        for s in used:
            if s not in where:
                continue
            theirs, dsrc = where[s]
            if rank(theirs) > rank(mine) and (mine, s) not in ALLOWED_UP:
                out.add(f"{src}: calls {s} from {dsrc} ({mine} calls {theirs})")
            elif sideways(src, dsrc):
                out.add(f"{src}: calls {s} from {dsrc} (one backend calls another)")
    return sorted(out)


def big_files(root, limit):
    out = []
    for rel in sources(root):
        if rel.endswith(("unicode_tables.c",)):  # generated data
            continue
        n = sum(1 for _ in open(os.path.join(root, rel), encoding="utf-8", errors="replace"))
        if n > limit:
            out.append((n, rel))
    return sorted(out, reverse=True)


def main():
    if len(sys.argv) < 3:
        print(__doc__)
        return 2
    root, build = sys.argv[1], sys.argv[2]
    report = "--report" in sys.argv[3:]
    global BACKEND_FOLDERS, KIND_NAME
    KIND_NAME = kind_pattern(root)
    BACKEND_FOLDERS, rows, bad = backend_folders(root)
    BACKEND_FOLDERS = tuple(BACKEND_FOLDERS)
    FOLDERS.update({f: "backends" for f in BACKEND_FOLDERS})
    bad += unknown_folders(root)
    bad += include_violations(root) + kind_names(root)
    calls = call_violations(build, root)
    if calls is None:
        print(f"check_layers: no hcq object files under {build}", file=sys.stderr)
        return 1
    bad += calls
    bad += ["function over 80 lines: %s (%d lines; docs/design.md, \"Code conventions\")" % (where, n)
            for n, where in long_functions(root)]
    for b in bad:
        print(b)
    if report:
        for limit in (800, 1000):
            files = big_files(root, limit)
            print(f"files over {limit} lines: {len(files)}")
            for n, rel in files:
                print(f"  {n:5d} {rel}")
        funcs = long_functions(root)
        print(f"functions over 80 lines (function_sizes.py, every tracked source): {len(funcs)}")
        for n, where in funcs:
            print(f"  {n:5d} {where}")
        print(f"upward includes and calls: {len(bad)}")
    if bad:
        print(f"check_layers: {len(bad)} violations: upward or sideways includes and calls, kind names, "
              f"folders no layer knows (layers: {' <- '.join(LAYERS)})")
        return 1
    print(f"check_layers: every include and call goes downward ({' <- '.join(LAYERS)}); "
          f"{len(rows)} backends from src/backends.c: {' '.join(BACKEND_FOLDERS)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
