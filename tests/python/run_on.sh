#!/bin/sh
# Runs the recorder's test suite in-process on another CPython, with the one abi3
# extension that tests/python/run.sh built into python/tach/. Nothing is rebuilt: the
# recorder picks the interpreter's layout at run time, from tables in the repository.
#
# Usage: tests/python/run_on.sh pyenv 3.10|3.12|...   [pytest args...]   (on this host)
#        tests/python/run_on.sh chroot 3.13|3.14|3.15 [pytest args...]   (CPython chroot)
# Exit status 3 when that interpreter is not available here (the caller skips loudly).
set -eu
where=$1
ver=$2
shift 2
root=$(cd "$(dirname "$0")/../.." && pwd)
cd "$root"
if ! ls python/tach/_native*.so >/dev/null 2>&1; then
    echo "no built extension in python/tach/ (tests/python/run.sh builds it)" >&2
    exit 1
fi
# pytest is pure Python: borrow the host venv's copy.
site=$(.venv/bin/python -c "import pytest, os; print(os.path.dirname(os.path.dirname(pytest.__file__)))")
case $where in
    pyenv)
        prefix=$(pyenv prefix "$ver" 2>/dev/null) || exit 3
        [ -x "$prefix/bin/python$ver" ] || exit 3
        # Its own venv with its own pytest (3.10's needs backports 3.11's venv lacks).
        venv="$root/.venv-$ver"
        if ! "$venv/bin/python" -c "import pytest" 2>/dev/null; then
            "$prefix/bin/python$ver" -m venv "$venv"
            "$venv/bin/pip" install -q --disable-pip-version-check pytest || exit 3
        fi
        site=""
        set -- "$venv/bin/python" -m pytest -p no:cacheprovider --basetemp="$root/.pytest-tmp-$ver" \
            tests/python/recorder/test_record.py "$@"
        ;;
    chroot)
        # The project's own chroot tool; the chroot sees the checkout at the same path.
        chroot_tool=$root/scripts/cpython-chroot
        "$chroot_tool" status >/dev/null || exit 3
        [ -x "$("$chroot_tool" path)/usr/bin/python$ver" ] || exit 3
        set -- "$chroot_tool" run -- env PYTHONPATH="$root/python:$site" \
            TACH_SKIP_LOG="${TACH_SKIP_LOG:-}" "python$ver" -m pytest -p no:cacheprovider \
            --basetemp="$root/.pytest-tmp-$ver" tests/python/recorder/test_record.py "$@"
        ;;
    *)
        echo "usage: $0 pyenv|chroot VERSION [pytest args...]" >&2
        exit 2
        ;;
esac
exec env PYTHONPATH="$root/python:$site" TACH_SKIP_LOG="${TACH_SKIP_LOG:-}" "$@"
