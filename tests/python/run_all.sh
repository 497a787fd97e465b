#!/bin/sh
# The recorder's whole test suite: the tach binary attached to pyenv's and the chroot's
# interpreters (also --native and --async-aware), tach top's live view driven in tmux,
# then the in-process suite with one abi3 extension on the host's CPython 3.11, pyenv's
# 3.10 and 3.12 and the chroot's 3.13, 3.14 and 3.15 (each skipped loudly, not failed,
# when missing).
# Usage: tests/python/run_all.sh [pytest args...]     (about 20 minutes on 2 cores)
set -u
here=$(cd "$(dirname "$0")" && pwd)
status=0
start=$(date +%s)
# Each part with the seconds since this script began and, when it ends, how long it took;
# a table of them at the end: the parts CI's time budget goes to.
part=""
part_began=$start
times=""
end_section() {
    [ -n "$part" ] || return 0
    took=$(($(date +%s) - part_began))
    echo "== $part: done in $took s"
    times="$times$(printf '%6d s  %s' "$took" "$part")
"
}
section() {
    end_section
    part=$*
    part_began=$(date +%s)
    echo "== $*  [$((part_began - start)) s into the recorder tests]"
}
section "The extension into .venv and python/tach (its tests on the host's CPython 3.11 run with the other interpreters' below)"
TACH_INSTALL_ONLY=1 "$here/run.sh" || status=1
section "Recorder accuracy against py-spy on real programs (CPython 3.11, host)"
(cd "$here/../.." && .venv/bin/python -m pytest -p no:cacheprovider -rs "$@" tests/python/recorder/test_accuracy.py) || status=1
section "The tach binary attached from outside: pyenv 3.9-3.13 here, 3.13-3.15 in the chroot"
(cd "$here/../.." && TACH_BIN="${TACH_BIN:-${CARGO_TARGET_DIR:-$PWD/target}/debug/tach}" \
    .venv/bin/python -m pytest -p no:cacheprovider -rs "$@" tests/python/recorder/test_attach.py) || status=1
section "Rotating segments from outside (--rotate, --keep, --on-segment, recover), and a 60 s soak of an aiohttp server"
(cd "$here/../.." && TACH_BIN="${TACH_BIN:-${CARGO_TARGET_DIR:-$PWD/target}/debug/tach}" \
    .venv/bin/python -m pytest -p no:cacheprovider -rs "$@" tests/python/recorder/test_rotate.py) || status=1
section "Native stacks (--native) from outside and in-process against py-spy --native: pyenv 3.9-3.13, the chroot's 3.13-3.15"
(cd "$here/../.." && TACH_BIN="${TACH_BIN:-${CARGO_TARGET_DIR:-$PWD/target}/debug/tach}" \
    .venv/bin/python -m pytest -p no:cacheprovider -rs "$@" tests/python/recorder/test_native.py) || status=1
section "Async-aware stacks from outside (--async-aware) against CPython's sampler (3.15) and asyncio ps (3.14); by construction and on a real server (3.11-3.13)"
(cd "$here/../.." && TACH_BIN="${TACH_BIN:-${CARGO_TARGET_DIR:-$PWD/target}/debug/tach}" \
    .venv/bin/python -m pytest -p no:cacheprovider -rs "$@" tests/python/recorder/test_async.py \
    tests/python/recorder/test_async_stack.py) || status=1
section "tach top's live view in tmux: pyenv 3.13 here, 3.15 in the chroot"
(cd "$here/../.." && TACH_BIN="${TACH_BIN:-${CARGO_TARGET_DIR:-$PWD/target}/debug/tach}" \
    .venv/bin/python -m pytest -p no:cacheprovider -rs "$@" tests/python/recorder/test_top_live.py) || status=1
# The front_end tests (options, journal, exit paths, rotation: nothing an interpreter's
# layout changes) run on the host's 3.11, the oldest (3.10) and the newest (3.15); the
# versions between run the rest, which read each version's stacks.
#
# Two interpreters' runs at a time: each is one program and its sampler thread at a time
# (about one core of two), so a pair takes little longer than one. Each run's output is
# kept and printed whole when the pair ends.
in_process() {  # where version log: runs one interpreter's in-process suite into log
    where=$1 v=$2 log=$3
    shift 3
    case $v in
        3.10|3.11|3.15) only="" ;;
        *) only="not front_end" ;;
    esac
    if [ "$where" = host ]; then
        (cd "$here/../.." && .venv/bin/python -m pytest -p no:cacheprovider \
            --basetemp="$PWD/.pytest-tmp" tests/python/recorder/test_record.py "$@") >"$log" 2>&1
    else
        "$here/run_on.sh" "$where" "$v" ${only:+-m "$only"} "$@" >"$log" 2>&1
    fi
}
pair_dir=$(mktemp -d)
for pair in "host:3.11 pyenv:3.10" "pyenv:3.12 chroot:3.13" "chroot:3.14 chroot:3.15"; do
    section "CPython $(echo "$pair" | sed 's/[a-z]*://g; s/ / and /') in-process, the same extension (3.12-3.14: not the front_end tests, run on 3.10, 3.11 and 3.15)"
    pids=""
    for where_version in $pair; do
        where=${where_version%%:*}
        v=${where_version#*:}
        in_process "$where" "$v" "$pair_dir/$v.log" "$@" &
        pids="$pids $!:$where:$v"
    done
    for entry in $pids; do
        pid=${entry%%:*}
        rest=${entry#*:}
        where=${rest%%:*}
        v=${rest#*:}
        wait "$pid"
        rc=$?
        echo "-- CPython $v in-process ($where):"
        cat "$pair_dir/$v.log"
        case $rc in
            0) ;;
            3) msg="SKIPPED: in-process recorder tests on CPython $v: no $where CPython $v here"
               echo "$msg" >&2
               [ -z "${TACH_SKIP_LOG:-}" ] || echo "$msg" >>"$TACH_SKIP_LOG" ;;
            *) status=1 ;;
        esac
    done
done
rm -rf "$pair_dir"
end_section
echo "== Recorder tests: time per part"
printf '%s' "$times"
exit $status
