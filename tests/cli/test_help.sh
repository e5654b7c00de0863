#!/usr/bin/env bash
# hcq --help, hcq help COMMAND and hcq COMMAND --help print usage on standard output and exit 0;
# the man page docs/hcq.1 is what scripts/gen-man.py makes of those texts (and renders cleanly).
#
# usage: test_help.sh HCQ SOURCE_DIR VERSION
set -u
hcq=$1 src=$2 version=$3
tmp=$(mktemp -d "${TMPDIR:-/tmp}/hcq-help.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
fails=0
fail() {
  echo "FAIL: $*"
  fails=$((fails + 1))
}

# help_ok NAME ARGS...: exit 0, usage on stdout, nothing on stderr, lines within 80 columns.
help_ok() {
  local name=$1
  shift
  "$hcq" "$@" >"$tmp/out" 2>"$tmp/err"
  local rc=$?
  [ $rc = 0 ] || fail "hcq $*: exit $rc"
  [ -s "$tmp/err" ] && fail "hcq $*: wrote to stderr: $(head -2 "$tmp/err")"
  head -1 "$tmp/out" | grep -q "^usage: hcq $name" || fail "hcq $*: first line is not \"usage: hcq $name...\": $(head -1 "$tmp/out")"
  awk 'length > 79 { bad = 1 } END { exit bad }' "$tmp/out" || fail "hcq $*: lines longer than 79 columns"
  cp "$tmp/out" "$tmp/last"
}

help_ok COMMAND --help
cp "$tmp/last" "$tmp/main"
for alias in -h help; do
  help_ok COMMAND $alias
  cmp -s "$tmp/last" "$tmp/main" || fail "hcq $alias differs from hcq --help"
done

# Every command the main text lists has its own help, the same three ways.
commands=$(sed -n '/^commands:/,/^$/p' "$tmp/main" | awk 'NR > 1 && $1 !~ /^-/ && $1 != "help" { print $1 }')
[ "$(echo "$commands" | wc -w)" -ge 4 ] || fail "the commands list has only: $commands"
for c in $commands; do
  help_ok "$c" "$c" --help
  cp "$tmp/last" "$tmp/cmd"
  help_ok "$c" "$c" -h
  cmp -s "$tmp/last" "$tmp/cmd" || fail "hcq $c -h differs from hcq $c --help"
  help_ok "$c" help "$c"
  cmp -s "$tmp/last" "$tmp/cmd" || fail "hcq help $c differs from hcq $c --help"
done
# --help wins over anything else on the line, even arguments that are wrong.
help_ok run run no-such-file.json --bogus --help
help_ok bench bench --json -h

"$hcq" help no-such-command >"$tmp/out" 2>"$tmp/err"
[ $? = 2 ] || fail "hcq help no-such-command: want exit 2"
grep -q 'no help for "no-such-command"' "$tmp/err" || fail "hcq help no-such-command: message: $(cat "$tmp/err")"
"$hcq" >"$tmp/out" 2>"$tmp/err"
[ $? = 2 ] || fail "hcq without a command: want exit 2"
grep -q "^usage: hcq" "$tmp/err" || fail "hcq without a command: no usage on stderr"
[ "$("$hcq" --version)" = "hcq $version" ] || fail "hcq --version: $("$hcq" --version), want hcq $version"

# Every variable of the README's environment table is in hcq --help (and so in the man page).
for v in $(sed -n '/^## Environment/,/^## /p' "$src/README.md" | grep -o '^| `HCQ_[A-Z_]*`' | tr -d '|` '); do
  grep -q "^  $v\b\|, $v\b" "$tmp/main" || fail "hcq --help does not list $v (README.md's environment table does)"
done

# The man page.
python3 "$src/scripts/gen-man.py" "$hcq" --check "$src/docs/hcq.1" || fail "docs/hcq.1 does not match the help texts"
if command -v groff >/dev/null 2>&1; then
  groff -man -Tutf8 -ww -z "$src/docs/hcq.1" >"$tmp/groff" 2>&1
  [ -s "$tmp/groff" ] && fail "groff warns about docs/hcq.1: $(head -3 "$tmp/groff")"
fi

if [ $fails -gt 0 ]; then
  echo "$fails check(s) failed"
  exit 1
fi
echo "help texts and man page: all checks passed"
