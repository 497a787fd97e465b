#!/bin/sh
# Prints the path of a maturin for the test runners that build wheels (build_wheel.sh,
# run_record_wheel.sh), installing it from PyPI into .venv-maturin the first time.
set -eu
root=$(cd "$(dirname "$0")/../.." && pwd)
tools="$root/.venv-maturin"
if ! "$tools/bin/maturin" --version >/dev/null 2>&1; then
    python3 -m venv "$tools"
    "$tools/bin/pip" install -q --disable-pip-version-check maturin >&2
fi
echo "$tools/bin/maturin"
