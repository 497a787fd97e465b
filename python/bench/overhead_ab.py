"""Steady-state overhead of the tach recorder, measured in one process by A/B chunks.

    python python/bench/overhead_ab.py [--rates 100,1000,10000] [--pairs 150] [--chunk-ms 100]

`overhead.py` times whole runs of a workload, one process per run; on a shared machine
whose speed drifts by several percent from one run to the next, that cannot resolve a
1% slowdown. This script runs the same CPU-bound work (recursive fib and dict work) in
chunks of about `--chunk-ms`, alternating a chunk with the recorder running and a chunk
without, in the same process, and reports the median over pairs of (time with / time
without) - 1: neighbouring chunks see the same machine. The order within a pair
alternates, so that a drift inside a pair cancels out. The recorder is started before
and stopped after its chunk's timing, so the figure is the cost of sampling, not of
creating and finishing a file (`overhead.py` covers the whole run). A 95% interval for
the median comes from resampling the pairs.

Build the extension optimised first (`maturin develop --release`, or a release wheel).
"""

import argparse
import os
import random
import statistics
import sys
import tempfile
import time

import tach

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from overhead import FUNCTIONS  # noqa: E402  (the same work as the whole-run benchmark)

exec(FUNCTIONS)  # defines fib and mix here


def work(rounds):
    for _ in range(rounds):
        fib(18)
        mix(2000)


def timed(rounds):
    t0 = time.perf_counter()
    work(rounds)
    return time.perf_counter() - t0


def median_interval(ratios, n=2000, seed=1):
    """The median and a 95% bootstrap interval for it."""
    rng = random.Random(seed)
    meds = sorted(statistics.median(rng.choices(ratios, k=len(ratios))) for _ in range(n))
    return statistics.median(ratios), meds[int(0.025 * n)], meds[int(0.975 * n)]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--rates", default="100,1000,10000")
    ap.add_argument("--pairs", type=int, default=150)
    ap.add_argument("--chunk-ms", type=float, default=100.0)
    ap.add_argument("--warmup", type=int, default=5, help="pairs run first and not counted")
    ap.add_argument("--blocking", choices=["auto", "yes", "no"], default="auto",
                    help="tach.start(blocking=None, True or False)")
    args = ap.parse_args()
    if getattr(tach._native, "DEBUG_BUILD", False):
        print("warning: the tach extension is a debug build; the figures are meaningless",
              file=sys.stderr)

    # Calibrate the chunk: rounds of work for about --chunk-ms.
    rounds = 1
    while timed(rounds) < args.chunk_ms / 1000:
        rounds *= 2
    rounds = max(1, int(rounds * (args.chunk_ms / 1000) / timed(rounds)))

    print(f"| rate (Hz) | chunk (ms) | pairs | slowdown, median of paired ratios | 95% interval | "
          f"sampler thread, share of a CPU |")
    print("|---|---|---|---|---|---|")
    with tempfile.TemporaryDirectory(prefix="tach-ab-") as tmp:
        path = os.path.join(tmp, "ab.tach")
        for rate in [int(r) for r in args.rates.split(",")]:
            ratios, cpu_share = [], []
            for i in range(args.warmup + args.pairs):
                on_first = i % 2 == 0
                if not on_first:
                    off = timed(rounds)
                tach.start(path, rate=rate, quiet=True, blocking={"auto": None, "yes": True, "no": False}[args.blocking])
                on = timed(rounds)
                stats = tach.stop()
                if on_first:
                    off = timed(rounds)
                if i >= args.warmup:
                    ratios.append(on / off)
                    cpu_share.append(stats["sampler_cpu_sec"] / stats["duration_sec"])
            med, lo, hi = median_interval(ratios)
            print(f"| {rate} | {1000 * statistics.median([timed(rounds) for _ in range(3)]):.0f} | "
                  f"{len(ratios)} | {100 * (med - 1):+.2f}% | {100 * (lo - 1):+.2f}% to "
                  f"{100 * (hi - 1):+.2f}% | {100 * statistics.median(cpu_share):.1f}% |", flush=True)


if __name__ == "__main__":
    main()
