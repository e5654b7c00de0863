#!/usr/bin/env python3
"""Prints the core internals libhcq.so exports for the MPI layer (one per line): the names whose
declaration in src/**/*.h carries HCQ__PRIVATE_EXPORT (src/core/export.h).
usage: private_api.py SRC_DIR"""
import glob
import os
import re
import sys

names = set()
for path in glob.glob(os.path.join(sys.argv[1], "src", "**", "*.h"), recursive=True):
    text = open(path, encoding="utf-8").read()
    text = re.sub(r"/\*.*?\*/", " ", text, flags=re.S)  # comments may name the macro
    text = re.sub(r"^\s*#.*$", " ", text, flags=re.M)    # so may its own #define
    # the declared name: the first hcq__ identifier followed by "(" (a function) or ";" (an object)
    for m in re.finditer(r"\bHCQ__PRIVATE_EXPORT\b[^;(]*?\b(hcq__\w+)\s*[(;]", text):
        names.add(m.group(1))
print("\n".join(sorted(names)))
