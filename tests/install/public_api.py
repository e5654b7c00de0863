#!/usr/bin/env python3
"""Prints the functions the public headers declare (one per line), read from the preprocessed
hcq/hcq.h (or HEADER, e.g. hcq/mpi.h with CC an MPI compiler wrapper): every top-level declaration
of a function, not static inline ones, not typedefs.
usage: public_api.py CC INCLUDE_DIR [HEADER]"""
import re
import subprocess
import sys

cc, include = sys.argv[1], sys.argv[2]
header = sys.argv[3] if len(sys.argv) > 3 else "hcq/hcq.h"
text = subprocess.run([cc, "-E", "-P", "-D__attribute__(x)=", "-I", include, "-x", "c", "-"],
                      input=f"#include <{header}>\n", capture_output=True, text=True, check=True).stdout

names, depth, stmt = set(), 0, []
for ch in text:
    if ch == "{":
        depth += 1
    elif ch == "}":
        depth -= 1
        if depth == 0:
            s = "".join(stmt)
            # a function body at top level (static inline): drop it with its declarator
            if re.search(r"\)\s*$", s.split("{")[0]) and "static" in s:
                stmt = []
                continue
    if depth == 0 and ch == ";":
        s = " ".join("".join(stmt).split())
        stmt = []
        if s.startswith(("typedef", "static", "extern \"C\"")) or "{" in s:
            continue
        m = re.search(r"\b(hcq_[A-Za-z0-9_]+)\s*\(", s)
        if m and not re.search(r"\(\s*\*\s*" + m.group(1), s):
            names.add(m.group(1))
        continue
    stmt.append(ch)
print("\n".join(sorted(names)))
