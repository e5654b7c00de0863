#!/bin/sh
# The house format (.clang-format) over every C, C++, CUDA, GLSL and Metal source git tracks, except
# generated files (a "do not edit" in their first lines).
#   scripts/format.sh           rewrites the files in place (make format)
#   scripts/format.sh --check   changes nothing; lists the files that differ and exits 1 (make format-check)
# The output of clang-format changes between its major versions: the check wants the version
# Debian 12 ships (14) and exits 77 (skipped) under any other, so a newer one cannot fail the tests.
set -eu
cd "$(dirname "$0")/.."
skip() {
  echo "format: $1" >&2
  [ -n "${HCQ_SKIP_LOG:-}" ] && echo "format: $1" >> "$HCQ_SKIP_LOG"
  exit 77
}
git rev-parse --is-inside-work-tree >/dev/null 2>&1 || skip "not a git checkout (the files to check are the ones git tracks)"
want=14
cf=""
for c in clang-format-$want clang-format; do
  if command -v "$c" >/dev/null 2>&1; then cf=$c; break; fi
done
[ -n "$cf" ] || skip "no clang-format (scripts/install-deps.sh installs it)"
have=$("$cf" --version | sed -n 's/.*version \([0-9]*\)\..*/\1/p')
[ "$have" = "$want" ] || skip "$cf is version $have; the house format is clang-format $want's output"

check=0
[ "${1:-}" = "--check" ] && check=1
bad=0
for f in $(git ls-files '*.c' '*.h' '*.cpp' '*.hpp' '*.cu' '*.glsl' '*.metal'); do
  [ -f "$f" ] || continue
  if head -n 3 "$f" | grep -q "do not edit"; then continue; fi
  # GLSL and Metal are formatted as the C++ they resemble (clang-format has no mode of its own for them).
  case "$f" in *.glsl | *.metal) as="$f.cpp" ;; *) as="$f" ;; esac
  if [ $check = 1 ]; then
    if ! "$cf" --style=file --assume-filename="$as" < "$f" | cmp -s - "$f"; then
      echo "format: $f differs from the house format (run: make format)"
      bad=1
    fi
    # clang-format leaves comments as written (ReflowComments would merge tables and code
    # examples): their lines are held to the column limit here.
    if long=$(LC_ALL=C.UTF-8 grep -n '.\{101,\}' "$f" | cut -d: -f1 | tr '\n' ' ') && [ -n "$long" ]; then
      echo "format: $f has lines over 100 columns (lines $long)"
      bad=1
    fi
  else
    "$cf" --style=file --assume-filename="$as" < "$f" > "$f.fmt"
    cmp -s "$f.fmt" "$f" || cat "$f.fmt" > "$f"
    rm -f "$f.fmt"
  fi
done
exit $bad
