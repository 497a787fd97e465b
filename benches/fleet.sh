#!/usr/bin/env bash
# The fleet benchmark (issue 18; docs/performance.md, "A fleet of recordings"):
#   1. a simulated fleet of COUNT recordings cut from real ones (examples/make_fleet:
#      rates of 100 Hz-10 kHz, 2,000-60,000 samples, thread subsets, per-host ids);
#   2. `tach export --parquet --out-dir` converts them: files/s, samples/s, peak memory;
#      then the same command again (an incremental dataset: nothing left to write);
#   3. two questions asked three ways, end to end: `tach query` over the TACH files,
#      `tach query` over the dataset, DuckDB and Spark (local mode) over the dataset:
#      the top ten self functions (answered from `stack_counts`) and per-second samples
#      of one function (only `samples` answers it).
#
#   benches/fleet.sh [COUNT] [RUNS]     # default 1000 recordings, 3 runs of each query
#
# Needs an optimised tach with the query feature (TACH, default target/release/tach:
# `cargo build --release --bin tach --example make_fleet`) and a Python with duckdb
# and pyspark (PY, default python3; tests/python/requirements*.txt) and Java 17 for
# Spark. Peak RSS of Spark is its Python driver's only (the JVM is a child process).
# SPARK=0 leaves Spark out (it is said so in the output): at 10,000 recordings its
# local mode takes minutes a run.
set -euo pipefail
cd "$(dirname "$0")/.."
count=${1:-1000}
runs=${2:-3}
tach=${TACH:-target/release/tach}
make_fleet=${MAKE_FLEET:-target/release/examples/make_fleet}
py=${PY:-python3}
spark=${SPARK:-1}
fleet=target/fleet
g=golden/cpython-3.15.2
big=target/bench/testsuite_20khz.bin
[ -s "$big" ] || scripts/make-big-recording "$big" 60

rm -rf "$fleet"
"$make_fleet" "$fleet/tach" "$count" $g/stdlib_tests_large.bin $g/threads_mixed.bin \
  $g/cpu_recursive.bin $g/deep_recursion.bin $g/threads_mixed_gil.bin "$big"
samples=$("$tach" query --format csv "select count(*) as n from samples" "$fleet"/tach/*.bin | tail -1)
echo "fleet: $count recordings, $samples samples, $(du -sh "$fleet/tach" | cut -f1)"

echo "== convert: tach export --parquet --out-dir (first time, then again)"
for pass in first again; do
  /usr/bin/time -f "%e %M" -o "$fleet/time" "$tach" export --parquet --out-dir "$fleet/ds" "$fleet"/tach/*.bin >/dev/null 2>&1
  read -r secs kb <"$fleet/time"
  awk -v p="$pass" -v s="$secs" -v kb="$kb" -v n="$count" -v k="$samples" 'BEGIN {
    printf "%s: %.2f s, %.0f files/s, %.2f M samples/s, peak %.0f MB\n", p, s, n / s, k / s / 1e6, kb / 1024 }'
done
# Bytes a sample: the TACH files, the whole dataset, and its samples table alone.
bytes() { du -sb "$1" | cut -f1; }
awk -v t="$(bytes "$fleet/tach")" -v d="$(bytes "$fleet/ds")" -v s="$(bytes "$fleet/ds/samples")" \
  -v k="$samples" 'BEGIN {
  printf "TACH %.1f MB (%.2f B/sample); dataset %.1f MB (%.2f B/sample; samples table %.2f)\n",
    t / 1e6, t / k, d / 1e6, d / k, s / k }'


top_self="select funcname, count(*) as n from samples group by funcname order by n desc, funcname limit 10"
echo "== the same question: top self functions over the fleet"
# tach expands the quoted pattern itself: 10,000 paths are more than one argument of
# time_rss.py may hold (128 KiB).
files="'$fleet/tach/*.bin'"
engines=(duckdb)
if [ "$spark" = 1 ]; then engines+=(spark); else echo "Spark left out (SPARK=0)"; fi
over_dataset=()
for e in "${engines[@]}"; do over_dataset+=("$py benches/fleet_query.py $e top_self $fleet/ds"); done
python3 benches/time_rss.py -n "$runs" \
  "$tach query --format csv '$top_self' $files" \
  "$tach query --format csv '$top_self' $fleet/ds" \
  "${over_dataset[@]}"

# A question only the samples answer (no count pushdown: `time_s` is per sample).
per_second="select cast(floor(time_s) as bigint) as sec, count(*) as n from samples where funcname = 'io_worker' group by sec order by sec"
echo "== a question of the samples: per-second samples of one function"
over_dataset=()
for e in "${engines[@]}"; do over_dataset+=("$py benches/fleet_query.py $e per_second $fleet/ds"); done
python3 benches/time_rss.py -n "$runs" \
  "$tach query --format csv \"$per_second\" $files" \
  "$tach query --format csv \"$per_second\" $fleet/ds" \
  "${over_dataset[@]}"

echo "== the answers must be the same rows"
"$tach" query --format csv "$top_self" "$fleet"/tach/*.bin | tail -n +2 | tr ',' '\t' >"$fleet/answer.tach"
"$tach" query --format csv "$top_self" "$fleet/ds" | tail -n +2 | tr ',' '\t' >"$fleet/answer.ds"
for e in "${engines[@]}"; do
  "$py" benches/fleet_query.py "$e" top_self "$fleet/ds" 2>/dev/null >"$fleet/answer.$e"
done
for a in ds "${engines[@]}"; do
  cmp -s "$fleet/answer.tach" "$fleet/answer.$a" || { echo "$a differs from tach query over the TACH files" >&2; exit 1; }
done
"$tach" query --format csv "$per_second" "$fleet"/tach/*.bin | tail -n +2 | tr ',' '\t' >"$fleet/second.tach"
"$tach" query --format csv "$per_second" "$fleet/ds" | tail -n +2 | tr ',' '\t' >"$fleet/second.ds"
for e in "${engines[@]}"; do
  "$py" benches/fleet_query.py "$e" per_second "$fleet/ds" 2>/dev/null >"$fleet/second.$e"
done
for a in ds "${engines[@]}"; do
  cmp -s "$fleet/second.tach" "$fleet/second.$a" || { echo "$a differs from tach query over the TACH files (per_second)" >&2; exit 1; }
done
echo "same rows: tach (TACH files), tach (dataset), ${engines[*]}"
