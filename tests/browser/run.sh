#!/usr/bin/env bash
# Headless-Chromium checks of the speedscope, flamegraph and heatmap exports against CPython's
# golden answers. Run by `cargo test --test suite browser::` (which passes TACH_BIN), or by hand:
#
#   TACH_BIN=target/debug/tach tests/browser/run.sh [OUT_DIR]
#
# Needs node (>= 18), Debian's chromium (/usr/bin/chromium, or TACH_CHROMIUM) and this
# directory's npm packages (playwright-core, speedscope; no browser download). With
# TACH_BROWSER_TESTS=1 missing pieces are installed (apt-get install of whichever of
# chromium, nodejs, npm is missing; npm ci here) and a missing piece is an error; without it a missing piece skips LOUDLY
# (exit 0 with "SKIPPED: ..." on stderr).
#
# Exit status: 0 pass or skip, 1 a check failed, 2 usage or setup error.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="$(cd "$here/../.." && pwd)"
golden="$root/golden/cpython-3.15.2"
out="${1:-$(mktemp -d "${TMPDIR:-/tmp}/tach-browser.XXXXXX")}"
mkdir -p "$out"
tach="${TACH_BIN:-$root/target/debug/tach}"
chromium="${TACH_CHROMIUM:-/usr/bin/chromium}"
strict="${TACH_BROWSER_TESTS:-0}"

skip() {
  if [ "$strict" = 1 ]; then
    echo "ERROR: $1 (TACH_BROWSER_TESTS=1, so this is a failure)" >&2
    exit 2
  fi
  echo "SKIPPED: browser tests: $1 (set TACH_BROWSER_TESTS=1 to install and run them)" >&2
  if [ -n "${TACH_SKIP_LOG:-}" ]; then
    echo "SKIPPED: browser tests: $1" >>"$TACH_SKIP_LOG"
  fi
  exit 0
}

as_root() { if [ "$(id -u)" = 0 ]; then "$@"; else sudo "$@"; fi; }

if [ "$strict" = 1 ]; then
  # Only what is missing: a NodeSource nodejs ships npm and conflicts with Debian's npm.
  pkgs=()
  [ -x "$chromium" ] || pkgs+=(chromium)
  command -v node >/dev/null || pkgs+=(nodejs)
  command -v npm >/dev/null || pkgs+=(npm)
  if [ ${#pkgs[@]} -gt 0 ]; then
    as_root apt-get update -q
    as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -q "${pkgs[@]}"
    [ -x "$chromium" ] || chromium=/usr/bin/chromium
  fi
  if [ ! -d "$here/node_modules/speedscope" ] || [ ! -d "$here/node_modules/playwright-core" ]; then
    (cd "$here" && npm ci --no-audit --no-fund)
  fi
fi
command -v node >/dev/null || skip "node not found"
[ -x "$chromium" ] || skip "chromium not found at $chromium"
[ -d "$here/node_modules/speedscope" ] && [ -d "$here/node_modules/playwright-core" ] ||
  skip "npm packages missing: run (cd tests/browser && npm ci)"
[ -x "$tach" ] || { echo "ERROR: tach binary not found at $tach (set TACH_BIN)" >&2; exit 2; }
export TACH_CHROMIUM="$chromium"

status=0
check() { "$@" || status=1; }

# speedscope: recorded files (checked against CPython's gecko sample times) and
# synthetic ones (against the samples fed to CPython's writer), including 380 threads in
# three interpreters with 64-bit ids, empty stacks, and timestamps near 2^40 us.
for name in cpu_recursive threads_mixed stdlib_tests_large synthetic_deep_stacks \
  synthetic_empty_stacks synthetic_timestamps synthetic_rle synthetic_many_threads_none; do
  "$tach" export --speedscope -o "$out/$name.speedscope.json" "$golden/$name.bin" >/dev/null
  check node "$here/speedscope_check.mjs" "$out/$name.speedscope.json" "$golden" "$name" \
    "$out/$name.speedscope.png"
done

# pprof: speedscope's own pprof importer reads tach's export without error (weights are
# not checked here; tests/suite/pprof.rs checks the content with go tool pprof).
for name in cpu_recursive threads_mixed stdlib_tests_large synthetic_many_threads_none; do
  "$tach" export --pprof -o "$out/$name.pb.gz" "$golden/$name.bin" >/dev/null
  check node "$here/pprof_check.mjs" "$out/$name.pb.gz" "$name" "$out/$name.pprof.png"
done

# flamegraph: merged and per thread.
for name in cpu_recursive threads_mixed stdlib_tests_large synthetic_huge_strings \
  synthetic_many_threads_none; do
  "$tach" export --flamegraph -o "$out/$name.svg" "$golden/$name.bin" >/dev/null
  check node "$here/flamegraph_check.mjs" "$out/$name.svg" "$golden" "$name" merged \
    "$out/$name.svg.png"
  "$tach" export --flamegraph --per-thread -o "$out/$name.per-thread.svg" "$golden/$name.bin" >/dev/null
  check node "$here/flamegraph_check.mjs" "$out/$name.per-thread.svg" "$golden" "$name" per-thread \
    "$out/$name.per-thread.svg.png"
done

# heatmap: a real recording whose sources are in the CPython chroot (read through
# --source-root; without the chroot they are "missing" and the page must say so), and
# the golden 166-file profile (sources recorded on another machine: missing here).
chroot_root="${TACH_CPYTHON_CHROOT:-/var/tmp/cpython-chroot}"
"$tach" export --heatmap -o "$out/stdlib_workload.heatmap.html" \
  --source-root "/usr/lib/python3.15=$chroot_root/usr/lib/python3.15" \
  --source-root "/work/wt/heatmap=$root" "$root/tests/data/heatmap/stdlib_workload.bin" >/dev/null
check node "$here/heatmap_check.mjs" "$out/stdlib_workload.heatmap.html" \
  "$out/stdlib_workload.heatmap.png" json/encoder.py
for name in stdlib_tests_large cpu_recursive_opcodes deep_recursion synthetic_huge_strings; do
  "$tach" export --heatmap -o "$out/$name.heatmap.html" "$golden/$name.bin" >/dev/null
  check node "$here/heatmap_check.mjs" "$out/$name.heatmap.html"
done
"$tach" export --heatmap -o "$out/stdlib_tests_large.sources.heatmap.html" \
  --source-root "/usr/lib/python3.15=$chroot_root/usr/lib/python3.15" "$golden/stdlib_tests_large.bin" >/dev/null
check node "$here/heatmap_check.mjs" "$out/stdlib_tests_large.sources.heatmap.html" \
  "$out/stdlib_tests_large.heatmap.png" email/_header_value_parser.py
# The size budget (docs/exporters.md): 166 source files with their sources stay one page
# of at most 2 MiB (1.06 MB measured).
size=$(stat -c %s "$out/stdlib_tests_large.sources.heatmap.html")
if [ "$size" -gt $((2 * 1024 * 1024)) ]; then
  echo "FAIL: stdlib_tests_large.sources.heatmap.html is $size bytes, over the 2 MiB budget" >&2
  status=1
fi

echo "browser checks: outputs and screenshots in $out" >&2
exit $status
