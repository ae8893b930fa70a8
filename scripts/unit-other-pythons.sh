#!/usr/bin/env bash
# Runs the unit suite (tests/unit) on the other Python versions the project supports (3.12, 3.13),
# each in its own venv (.venv-3.12, .venv-3.13) with the project installed from pyproject.toml +
# constraints.txt, exactly like .venv. Idempotent: a venv is rebuilt only when its inputs change
# (a stamp file holds their checksum), so re-runs take only the test time.
# The interpreters come from pyenv (~/.pyenv/versions/3.X.*) or PATH (python3.X); a version whose
# interpreter is missing is skipped with a message (a plain Debian machine has only python3.11).
# Usage: scripts/unit-other-pythons.sh [3.12 3.13] [-- extra pytest args]
set -euo pipefail
cd "$(dirname "$0")/.."

say() { printf '\033[1m[other-pythons]\033[0m %s\n' "$*"; }

versions=()
while (($#)) && [ "$1" != "--" ]; do versions+=("$1"); shift; done
[ "${1:-}" = "--" ] && shift
((${#versions[@]})) || versions=(3.12 3.13)

find_python() {  # 3.X -> path of an interpreter, or nothing
  local v=$1 p
  for p in "${PYENV_ROOT:-$HOME/.pyenv}"/versions/"$v".*/bin/python"$v"; do
    [ -x "$p" ] && { echo "$p"; return; }
  done
  command -v "python$v" 2>/dev/null || true
}

# Inputs of an install, as for .venv in bootstrap.sh: the dependency pins.
stamp=$(cat pyproject.toml constraints.txt | sha256sum | cut -c1-16)
status=0
for v in "${versions[@]}"; do
  venv=".venv-$v"
  py=$(find_python "$v")
  if [ -z "$py" ]; then
    say "Python $v: SKIPPED, no interpreter (neither pyenv's $v.* nor python$v on PATH)"
    continue
  fi
  if [ ! -x "$venv/bin/python" ] || [ "$(cat "$venv/.stamp" 2>/dev/null)" != "$stamp" ]; then
    say "Python $v: installing the project into $venv (first time: a few minutes)"
    rm -rf "$venv"
    "$py" -m venv "$venv"
    "$venv/bin/pip" install -q --upgrade pip
    "$venv/bin/pip" install -q -c constraints.txt -e ".[dev]"
    echo "$stamp" > "$venv/.stamp"
  fi
  say "Python $v: unit tests"
  if ! "$venv/bin/python" -m pytest -q -p no:cacheprovider tests/unit "$@"; then
    say "Python $v: unit tests FAILED"
    status=1
  fi
done
exit "$status"
