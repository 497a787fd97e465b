#!/bin/sh
# Builds the extension into .venv (debug build) and runs the recorder's test suite.
# Usage: tests/python/run.sh [pytest args...]
# Env: PYTHON (default python3) creates the venv; CARGO_TARGET_DIR is honoured.
set -eu
root=$(cd "$(dirname "$0")/../.." && pwd)
cd "$root"
if [ ! -x .venv/bin/python ]; then
    "${PYTHON:-python3}" -m venv .venv
fi
if ! .venv/bin/python -c "import maturin, pytest" 2>/dev/null; then
    .venv/bin/pip install -q maturin pytest
fi
built=$(date +%s)
.venv/bin/maturin develop -q
echo "the extension built (maturin develop) in $(($(date +%s) - built)) s"
# Temporary files under the worktree: the CPython 3.15 chroot only sees /work.
exec .venv/bin/python -m pytest -p no:cacheprovider --basetemp="$root/.pytest-tmp" tests/python/recorder/test_record.py "$@"
