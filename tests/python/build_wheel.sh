#!/bin/sh
# Builds the full `tach` wheel ONCE (a dev build, as every Python test uses; abi3, so one
# wheel serves every CPython from 3.10) for the test runners to install instead of each
# building the extension again: run_api.sh into its fresh venv, run.sh into .venv and
# python/tach/ (where run_on.sh's other interpreters find it). Building it twice cost CI a
# whole build of the extension: each venv's interpreter is part of pyo3's fingerprint, so
# `pip install .` in one venv and `maturin develop` in another rebuild everything from pyo3
# up. Prints the wheel's path (and nothing else) on stdout.
# Usage: TACH_WHEEL=$(tests/python/build_wheel.sh) tests/python/run_all.sh ...
# Env: CARGO_TARGET_DIR is honoured (the wheel goes to its wheels-dev/).
set -eu
root=$(cd "$(dirname "$0")/../.." && pwd)
cd "$root"
maturin=$(tests/python/maturin.sh)
wheels="${CARGO_TARGET_DIR:-$root/target}/wheels-dev"
rm -rf "$wheels"
started=$(date +%s)
# Our crate at opt-level 0 (the dev profile gives it 1): the build is then a tenth of the
# CPU, and it runs beside the Rust tests on CI's two cores. The extension's tests (the
# in-process recorder at 1 kHz, native and async included, and the API's) pass at
# either level in about the same time.
"$maturin" build --quiet --profile dev --config 'profile.dev.package.tach.opt-level=0' \
    -o "$wheels" >&2
echo "the tach wheel built (maturin build --profile dev, tach at opt-level 0) in $(($(date +%s) - started)) s" >&2
ls "$wheels"/tach-*.whl
