#!/bin/sh
# The recorder's whole test suite: CPython 3.11 on the host, the tach binary attached to
# pyenv's and the chroot's interpreters, then 3.13, 3.14 and 3.15 in-process through the
# CPython chroot when it is available (skipped, not failed, when it is not), and tach top's
# live view driven in tmux.
# Usage: python/tests/run_all.sh [pytest args...]     (about 5 minutes on 2 cores)
set -u
here=$(cd "$(dirname "$0")" && pwd)
status=0
echo "== CPython 3.11 (host)"
"$here/run.sh" "$@" || status=1
echo "== Recorder accuracy against py-spy on real programs (CPython 3.11, host)"
(cd "$here/../.." && .venv/bin/python -m pytest -p no:cacheprovider -rs "$@" python/tests/test_accuracy.py) || status=1
echo "== The tach binary attached from outside: pyenv 3.9-3.13 here, 3.13-3.15 in the chroot"
(cd "$here/../.." && TACH_BIN="${TACH_BIN:-${CARGO_TARGET_DIR:-$PWD/target}/debug/tach}" \
    .venv/bin/python -m pytest -p no:cacheprovider -rs "$@" python/tests/test_attach.py) || status=1
echo "== tach top's live view in tmux: pyenv 3.13 here, 3.15 in the chroot"
(cd "$here/../.." && TACH_BIN="${TACH_BIN:-${CARGO_TARGET_DIR:-$PWD/target}/debug/tach}" \
    .venv/bin/python -m pytest -p no:cacheprovider -rs "$@" python/tests/test_top_live.py) || status=1
for v in 3.13 3.14 3.15; do
    echo "== CPython $v (chroot)"
    "$here/chroot.sh" "$v" "$@"
    rc=$?
    case $rc in
        0) ;;
        3) echo "SKIPPED: recorder tests on CPython $v: no CPython $v chroot here" >&2
           [ -z "${TACH_SKIP_LOG:-}" ] || echo "SKIPPED: recorder tests on CPython $v: no CPython $v chroot here" >>"$TACH_SKIP_LOG" ;;
        *) status=1 ;;
    esac
done
exit $status
