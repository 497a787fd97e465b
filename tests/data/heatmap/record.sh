#!/usr/bin/env bash
# Re-records stdlib_workload.bin in the CPython chroot (CPython 3.15's own sampler, with
# opcodes). Run from the repository root: tests/data/heatmap/record.sh
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../../.."
scripts/cpython-chroot run -- python3.15 -m profiling.sampling run --binary \
  --opcodes -r 1khz -o tests/data/heatmap/stdlib_workload.bin tests/data/heatmap/stdlib_workload.py
