#!/usr/bin/env bash
# The core issue's goal figures on a big real recording (docs/performance.md, "A big
# real recording"): CPython 3.15's own sampler recording part of its test suite at
# 20 kHz, every thread (scripts/make-big-recording), then
#   - tach verify against `zstd -d` of the same sample region (paired);
#   - each export against CPython 3.15's replay of the same format, in the chroot
#     (paired; speedscope against CPython's gecko, its nearest), with peak memory;
#   - a 100 M-sample file repeating that recording: the aggregate exports against
#     `tach top` (one count of the file and a ten-row table).
#
#   benches/big_recording.sh [RUNS]        # default 5 runs of each pair
#
# Needs an optimised binary: cargo build --release --no-default-features --bin tach
# --example repeat_profile (no polars: these commands do not use it).
set -euo pipefail
cd "$(dirname "$0")/.."
runs=${1:-5}
tach=target/release/tach
big=target/bench/testsuite_20khz.bin
huge=target/bench/testsuite_100m.bin
[ -s "$big" ] || scripts/make-big-recording "$big" 60
[ -s "$huge" ] || target/release/examples/repeat_profile "$big" "$huge" 100000000
"$tach" info "$big" | grep -E "samples|threads|sample data|records REPEAT"

echo "== verify against zstd -d of the sample region"
python3 benches/sample_region.py "$big" target/bench/region.zst
python3 benches/paired.py -n $((runs * 4)) "$tach verify -q $big" \
  "zstd -d -q -c target/bench/region.zst -o /dev/null"

for fmt in collapsed pstats jsonl flamegraph speedscope:gecko gecko; do
  echo "== $fmt against CPython's replay"
  scripts/cpython-chroot run -- python3.15 benches/export_vs_cpython.py "$PWD/$tach" "$fmt" "$big" "$runs"
done

echo "== 100 M samples: aggregate exports against one count (tach top)"
for cmd in "top -l 10" "export --collapsed -o /tmp/big.collapsed" "export --pstats -o /tmp/big.pstats" \
  "export --jsonl -o /tmp/big.jsonl" "export --flamegraph -o /tmp/big.svg" "verify -q"; do
  /usr/bin/time -f "$cmd: %e s wall, %U s user, %S s sys, %M KB peak" "$tach" $cmd "$huge" >/dev/null
done
rm -f /tmp/big.collapsed /tmp/big.pstats /tmp/big.jsonl /tmp/big.svg
