#!/bin/sh
# Builds the package with `pip install .` into a FRESH virtual environment (with polars,
# pyarrow and pytest from PyPI) and runs the API tests (tests/python/package/test_api.py).
# Usage: tests/python/run_api.sh [pytest args...]
# Env: PYTHON (default python3, >= 3.11) creates the venv; CARGO_TARGET_DIR is honoured;
#      TACH_API_VENV (default .venv-api, deleted first) is where the venv goes;
#      TACH_BIN, if set, is a Rust `tach` binary the entry point is compared with;
#      TACH_WHEEL, if set, is a full wheel tests/python/build_wheel.sh built: it is installed
#      instead of `pip install .` (scripts/test-all builds one wheel for every venv).
# The build is a dev (debug) build: `pip install .` alone builds release (much slower),
# MATURIN_PEP517_ARGS below is the only difference.
set -eu
root=$(cd "$(dirname "$0")/../.." && pwd)
cd "$root"
venv=${TACH_API_VENV:-$root/.venv-api}
rm -rf "$venv"
"${PYTHON:-python3}" -m venv "$venv"
if [ -n "${TACH_WHEEL:-}" ]; then
    "$venv/bin/pip" install -q --disable-pip-version-check polars pyarrow pytest nbclient nbformat ipykernel \
        "$TACH_WHEEL"
else
    "$venv/bin/pip" install -q --disable-pip-version-check maturin polars pyarrow pytest nbclient nbformat ipykernel
    # --no-build-isolation: use the maturin just installed instead of fetching another.
    PATH="$venv/bin:$PATH" MATURIN_PEP517_ARGS="--profile dev" "$venv/bin/pip" install -q --disable-pip-version-check \
        --no-build-isolation "$root"
fi
# Run from outside the source tree so `import tach` is the installed package.
cd "$venv"
exec env PATH="$venv/bin:$PATH" "$venv/bin/python" -m pytest -p no:cacheprovider \
    --basetemp="$venv/pytest-tmp" -q "$root/tests/python/package/test_api.py" \
    "$root/tests/python/package/test_entrances.py" "$@"
