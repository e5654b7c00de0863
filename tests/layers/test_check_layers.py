#!/usr/bin/env python3
"""check_layers.py's backend folders on made-up source trees: they come from the rows of
src/backends.c, a folder under src/ that no layer and no row claims is reported, and so is a row
defined nowhere or outside a folder of its own."""
import os
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import check_layers  # noqa: E402
import function_sizes  # noqa: E402


def tree(files):
    root = tempfile.mkdtemp(prefix="hcq_layers_")
    for rel, text in files.items():
        os.makedirs(os.path.join(root, os.path.dirname(rel)), exist_ok=True)
        with open(os.path.join(root, rel), "w") as f:
            f.write(text)
    return root


TABLE = "/* the rows */\nconst hcq__backend_t *const hcq__backends[] = {&hcq__a_backend, &hcq__b_backend, NULL};\n"


def expect(cond, what):
    if not cond:
        print("FAIL:", what)
        sys.exit(1)


def main():
    root = tree({"src/backends.c": TABLE, "src/core/x.c": "",
                 "src/alpha/a.c": "const hcq__backend_t hcq__a_backend = {0};\n",
                 "src/beta/b.c": "const hcq__backend_t hcq__b_backend = {0};\n"})
    folders, rows, bad = check_layers.backend_folders(root)
    expect(folders == ["src/alpha", "src/beta"] and rows == ["hcq__a_backend", "hcq__b_backend"] and not bad,
           f"two rows, two folders: {folders} {rows} {bad}")
    check_layers.FOLDERS.update({f: "backends" for f in folders})
    expect(check_layers.unknown_folders(root) == [], "every folder known")

    os.makedirs(os.path.join(root, "src/gamma"))
    unknown = check_layers.unknown_folders(root)
    expect(len(unknown) == 1 and unknown[0].startswith("src/gamma: a folder no layer knows"),
           f"an unknown folder is reported: {unknown}")

    root = tree({"src/backends.c": TABLE, "src/alpha/a.c": "const hcq__backend_t hcq__a_backend = {0};\n"})
    _, _, bad = check_layers.backend_folders(root)
    expect(bad == ["src/backends.c: the row hcq__b_backend is defined in no source under src/"],
           f"a row defined nowhere is reported: {bad}")
    kinds = check_layers.kind_pattern(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
    expect(kinds.pattern == r"\bHCQ_DEVICE_(CPU|CUDA|METAL|VULKAN)\b", f"the kinds come from device.h: {kinds.pattern}")

    # Function sizes by the lexer: a signature over several lines counts, braces in strings and
    # comments do not, and a struct's initializer is no function.
    body = "".join("  x += %d; /* } */\n" % i for i in range(79))
    src = ("static int\nlong_one(int a,\n         int b) {\n  int x = a + b;\n" + body + "  return x;\n}\n"
           "static const struct { int a; } table = {\n" + "  1,\n" * 90 + "};\n"
           "int short_one(void) { return \"}\" [0]; }\n")
    found = function_sizes.functions(src)
    expect([(n, b - a + 1) for n, a, b in found] == [("long_one", 85), ("short_one", 1)],
           f"function sizes: {found}")
    expect([f for f in function_sizes.functions("void f(void) {\n" + "  ;\n" * 79 + "}\n")] == [("f", 1, 81)],
           "an 81-line function measured as 81 lines")
    print("test_check_layers: backend folders come from the table; unknown folders and lost rows are reported; "
          "function sizes count multi-line signatures and skip literals, comments and initializers")


if __name__ == "__main__":
    main()
