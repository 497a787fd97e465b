#!/bin/sh
# Cross-builds the extension for CPython 3.13, 3.14 or 3.15 on the host (against the
# chroot's headers; the chroot has no Rust) and runs the recorder's test suite there.
#
# Usage: python/tests/chroot.sh 3.13|3.14|3.15 [pytest args...]
# (with pytest args `--co -q`, only builds and stages; TACH_KEEP_STAGE=1 keeps
# .chroot-build/VERSION for the accuracy harness)
# Needs: the host's .venv with pytest (python/tests/run.sh makes it), and
# the cpython-chroot tool. Exit status 3 when the chroot is unavailable.
set -eu
ver=$1
shift
root=$(cd "$(dirname "$0")/../.." && pwd)
cd "$root"
# The project's own chroot tool.
chroot_tool=$root/scripts/cpython-chroot
"$chroot_tool" status >/dev/null || exit 3
chroot_dir=$("$chroot_tool" path)
inc="$chroot_dir/usr/include/python$ver"
[ -f "$inc/Python.h" ] || { echo "no CPython $ver headers in the chroot ($inc)" >&2; exit 3; }
nodot=$(echo "$ver" | tr -d .)
stage="$root/.chroot-build/$ver"
# The same target directory as every other build: only pyo3 and tach itself rebuild for
# each interpreter, polars is shared (a separate directory would be another full build).
export CARGO_TARGET_DIR="${TACH_CROSS_TARGET_DIR:-${CARGO_TARGET_DIR:-$root/target}}"
mkdir -p "$stage/tach"
cat > "$stage/pyo3-config.txt" <<EOF
implementation=CPython
version=$ver
shared=false
abi3=false
lib_name=python$ver
pointer_width=64
build_flags=
suppress_build_script_link_lines=true
EOF
PYO3_CONFIG_FILE="$stage/pyo3-config.txt" \
TACH_PYTHON_INCLUDE="$inc" \
TACH_PYTHON_INCLUDE_AFTER="$chroot_dir/usr/include" \
    cargo rustc -q --lib --crate-type cdylib --features python,pyo3/extension-module -- -C strip=symbols
cp python/tach/*.py "$stage/tach/"
cp "$CARGO_TARGET_DIR/debug/libtach.so" "$stage/tach/_native.cpython-$nodot-x86_64-linux-gnu.so"
# pytest is pure Python: borrow the host venv's copy.
site=$(.venv/bin/python -c "import pytest, os; print(os.path.dirname(os.path.dirname(pytest.__file__)))")
set +e
"$chroot_tool" run -- env PYTHONPATH="$stage:$site" TACH_SKIP_LOG="${TACH_SKIP_LOG:-}" "python$ver" -m pytest \
    -p no:cacheprovider --basetemp="$root/.pytest-tmp-$ver" python/tests/test_record.py "$@"
rc=$?
# The staged extension is a copy of a polars-sized library: do not keep three of them
# (TACH_KEEP_STAGE=1 keeps it, for python/bench/accuracy.py --tach-path).
[ -n "${TACH_KEEP_STAGE:-}" ] || rm -rf "$stage"
exit $rc
