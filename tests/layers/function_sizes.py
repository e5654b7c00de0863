#!/usr/bin/env python3
"""Function sizes in hcq's C, C++ and CUDA sources, measured by a lexer rather than by line patterns.

Comments, string and character literals and preprocessor lines are blanked first (newlines kept);
then, at brace depth 0, a `{` whose preceding code ends with `)` opens a function body, however
many lines the signature spans, and the matching `}` closes it. A function's size is the lines
from its signature's first line to its closing brace. Struct, enum and initializer braces (not
preceded by `)`) and `extern "C" {` are not functions.

  function_sizes.py SOURCE_DIR [--limit N] [--list]   exit 1 naming every function over N (80) lines
"""
import os
import re
import subprocess
import sys

EXTENSIONS = (".c", ".h", ".cpp", ".hpp", ".cu", ".metal")


def tracked_sources(root):
    try:
        out = subprocess.run(["git", "-C", root, "ls-files"], capture_output=True, text=True, check=True).stdout
        files = out.split()
    except (OSError, subprocess.CalledProcessError):
        files = []
        for top in ("src", "cli", "models", "tests", "bench", "examples", "fuzz", "include"):
            for d, _, names in os.walk(os.path.join(root, top)):
                files += [os.path.relpath(os.path.join(d, n), root) for n in names]
    return sorted(f for f in files if f.endswith(EXTENSIONS) and os.path.isfile(os.path.join(root, f)))


def blank(text):
    """text with comments, literals and preprocessor lines replaced by spaces (newlines kept)."""
    out = []
    i, n = 0, len(text)
    line_start = True
    while i < n:
        c = text[i]
        if line_start and c in " \t":
            out.append(c)
            i += 1
            continue
        if line_start and c == "#":  # a preprocessor line, with its continuations
            while i < n and text[i] != "\n":
                if text[i] == "\\" and i + 1 < n and text[i + 1] == "\n":
                    out.append(" \n")
                    i += 2
                    continue
                out.append(" ")
                i += 1
            continue
        line_start = False
        if c == "\n":
            line_start = True
            out.append(c)
            i += 1
        elif text.startswith("//", i):
            j = text.find("\n", i)
            j = n if j < 0 else j
            out.append(" " * (j - i))
            i = j
        elif text.startswith("/*", i):
            j = text.find("*/", i + 2)
            j = n if j < 0 else j + 2
            out.append(re.sub(r"[^\n]", " ", text[i:j]))
            i = j
        elif c in "\"'":
            j = i + 1
            while j < n and text[j] != c and text[j] != "\n":
                j += 2 if text[j] == "\\" else 1
            j = min(j + 1, n)
            out.append(re.sub(r"[^\n]", " ", text[i:j]))
            i = j
        else:
            out.append(c)
            i += 1
    return "".join(out)


def functions(text):
    """(name, first line, last line) of every function body in text (lines from 1)."""
    code = blank(text)
    found = []
    depth = 0
    decl_start = 0  # where the current top-level declaration began
    body = None  # (name, first line) while inside a function
    for i, c in enumerate(code):
        if c == "{":
            if depth == 0:
                head = code[decl_start:i].rstrip()
                if head.endswith(")") and not re.search(r"\bextern\s*$", head):
                    name = re.findall(r"([A-Za-z_]\w*)\s*\(", head)
                    test = re.search(r"\b(?:Test|ParameterizedTest)\s*\(\s*[^,]*,\s*(\w+)", head)
                    if test:  # a Criterion test: its name, not the macro's
                        name = [test.group(1)]
                    lead = len(code[decl_start:i]) - len(code[decl_start:i].lstrip())
                    first = code.count("\n", 0, decl_start + lead) + 1
                    body = (name[0] if name else "?", first)
                elif re.search(r"\bextern\s*$", head) or re.search(r"\bnamespace\b[\w\s]*$", head):
                    decl_start = i + 1
                    continue  # extern "C" { ... } and namespaces hold functions; stay at depth 0
            depth += 1
        elif c == "}":
            depth = max(depth - 1, 0)
            if depth == 0:
                if body:
                    found.append((body[0], body[1], code.count("\n", 0, i) + 1))
                    body = None
                decl_start = i + 1
        elif c == ";" and depth == 0:
            decl_start = i + 1
    return found


def long_functions(root, limit=80):
    out = []
    for rel in tracked_sources(root):
        text = open(os.path.join(root, rel), encoding="utf-8", errors="replace").read()
        for name, first, last in functions(text):
            size = last - first + 1
            if size > limit:
                out.append((size, f"{rel}:{first} {name}"))
    return sorted(out, reverse=True)


def main():
    args = sys.argv[1:]
    if not args or args[0].startswith("-"):
        print(__doc__)
        return 2
    root = args[0]
    limit = int(args[args.index("--limit") + 1]) if "--limit" in args else 80
    over = long_functions(root, limit)
    for size, where in over:
        print(f"{size:5d} {where}")
    print(f"function_sizes: {len(over)} function(s) over {limit} lines in {len(tracked_sources(root))} sources")
    return 1 if over else 0


if __name__ == "__main__":
    sys.exit(main())
