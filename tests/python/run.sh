#!/bin/sh
# Builds the extension into .venv (debug build) and runs the recorder's test suite.
# Usage: tests/python/run.sh [pytest args...]
# Env: PYTHON (default python3) creates the venv; CARGO_TARGET_DIR is honoured;
#      TACH_WHEEL, if set, is a full wheel tests/python/build_wheel.sh built: it is installed
#      instead of building the extension again (scripts/test-all builds one for all venvs);
#      TACH_INSTALL_ONLY=1 installs and runs no test.
set -eu
root=$(cd "$(dirname "$0")/../.." && pwd)
cd "$root"
if [ ! -x .venv/bin/python ]; then
    "${PYTHON:-python3}" -m venv .venv
fi
if [ -n "${TACH_WHEEL:-}" ]; then
    # The wheel and its dependencies, as `maturin develop` installs them; the old copy
    # first out, since the same version already installed would be kept.
    .venv/bin/python -m pip uninstall -q -y tach 2>/dev/null || true
    .venv/bin/python -m pip install -q --disable-pip-version-check pytest "$TACH_WHEEL"
    # As `maturin develop` leaves it: the extension beside the package's sources too, for
    # the interpreters that import tach from python/ (run_on.sh, the chroot's).
    rm -f python/tach/_native*.so
    .venv/bin/python - "$TACH_WHEEL" <<'PY'
import os, sys, zipfile
with zipfile.ZipFile(sys.argv[1]) as wheel:
    (so,) = [n for n in wheel.namelist() if n.startswith("tach/_native") and n.endswith(".so")]
    with open(os.path.join("python", so), "wb") as out:
        out.write(wheel.read(so))
PY
    echo "the extension installed from $TACH_WHEEL"
else
    if ! .venv/bin/python -c "import maturin, pytest" 2>/dev/null; then
        .venv/bin/pip install -q maturin pytest
    fi
    built=$(date +%s)
    .venv/bin/maturin develop -q
    echo "the extension built (maturin develop) in $(($(date +%s) - built)) s"
fi
# TACH_INSTALL_ONLY: the extension is installed, the tests are run by the caller.
[ -z "${TACH_INSTALL_ONLY:-}" ] || exit 0
# Temporary files under the worktree: the CPython 3.15 chroot only sees /work.
exec .venv/bin/python -m pytest -p no:cacheprovider --basetemp="$root/.pytest-tmp" tests/python/recorder/test_record.py "$@"
