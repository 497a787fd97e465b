#!/bin/sh
# The small install: builds the `tach-record` wheel (the recorder without polars; a dev
# build, as the other Python tests use), installs it into a FRESH virtual environment with
# nothing else but pytest, on two CPython versions (the host's python3 and pyenv's 3.12),
# and runs tests/python/package/test_record_wheel.py there: it records a program in-process and
# from outside with what the wheel installed, and checks polars is absent.
# Usage: tests/python/run_record_wheel.sh [pytest args...]
# Env: CARGO_TARGET_DIR is honoured; TACH_RECORD_TARGET_DIR (default: a tach-record-cargo/
#      folder inside it) is cargo's target directory for this build. A version that is
#      not here is skipped loudly.
#
# Its own target directory because cargo gives a cdylib no metadata hash: the wheel's
# extension (other features) and the full one would share one fingerprint and output, and
# each build would rebuild the other (195 s on CI). The cost is the dependencies built
# once more; scripts/test-all, which runs this after every use of the full extension,
# shares the main target directory instead to save that.
set -eu
root=$(cd "$(dirname "$0")/../.." && pwd)
cd "$root"
maturin=$(tests/python/maturin.sh)
wheels="$root/target/tach-record-wheels"
rm -rf "$wheels"
target=${CARGO_TARGET_DIR:-$root/target}
CARGO_TARGET_DIR=${TACH_RECORD_TARGET_DIR:-$target/tach-record-cargo} MATURIN="$maturin" \
    scripts/build-tach-record --profile dev --config 'profile.dev.package.tach.opt-level=0' \
    -o "$wheels" >/dev/null
wheel=$(ls "$wheels"/tach_record-*.whl)
status=0
for python in "$(command -v python3)" "$(pyenv prefix 3.12 2>/dev/null || echo /nonexistent)/bin/python3.12"; do
    if [ ! -x "$python" ]; then
        msg="SKIPPED: tach-record wheel on $python: no such interpreter here"
        echo "$msg" >&2
        [ -z "${TACH_SKIP_LOG:-}" ] || echo "$msg" >>"$TACH_SKIP_LOG"
        continue
    fi
    venv="$root/.venv-record-wheel"
    rm -rf "$venv"
    "$python" -m venv "$venv"
    "$venv/bin/pip" install -q --disable-pip-version-check pytest "$wheel"
    echo "== tach-record wheel on $("$venv/bin/python" -V)"
    # From outside the source tree, so `import tach` is the installed package.
    (cd "$venv" && TACH_RECORD_WHEEL="$wheel" "$venv/bin/python" -m pytest -p no:cacheprovider \
        --basetemp="$venv/pytest-tmp" -q "$root/tests/python/package/test_record_wheel.py" "$@") || status=1
    rm -rf "$venv"
done
exit $status
