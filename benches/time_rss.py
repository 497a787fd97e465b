#!/usr/bin/env python3
"""Runs each command N times under `/usr/bin/time -f '%e s %M KB'` and prints every
run's wall time and peak RSS, then the medians (docs/performance.md, "Parquet and
DataFrames at scale").

    python3 benches/time_rss.py -n 5 'CMD 1' 'CMD 2' ...

The commands run in turn (1 2 ... 1 2 ...), so drift of the shared machine's speed
falls on all of them alike.
"""

import argparse
import re
import shlex
import statistics
import subprocess
import sys


def run(cmd: str) -> tuple[float, int]:
    r = subprocess.run(
        ["/usr/bin/time", "-f", "%e s %M KB", *shlex.split(cmd)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    if r.returncode != 0:
        sys.exit(f"failed ({r.returncode}): {cmd}\n{r.stderr}")
    m = re.search(r"([0-9.]+) s ([0-9]+) KB\s*$", r.stderr)
    if not m:
        sys.exit(f"no timing in the output of {cmd}:\n{r.stderr}")
    return float(m.group(1)), int(m.group(2))


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("-n", type=int, default=5)
    ap.add_argument("commands", nargs="+")
    args = ap.parse_args()
    results: dict[str, list[tuple[float, int]]] = {c: [] for c in args.commands}
    for _ in range(args.n):
        for c in args.commands:
            results[c].append(run(c))
    for c, runs in results.items():
        walls = [w for w, _ in runs]
        rss = [k for _, k in runs]
        # A command over a thousand files is shown by its start and end.
        print(c if len(c) <= 240 else f"{c[:160]} ... {c[-60:]}")
        print("  runs: " + ", ".join(f"{w:.2f} s {k / 1024:.0f} MiB" for w, k in runs))
        print(
            f"  median: {statistics.median(walls):.2f} s, "
            f"{statistics.median(rss) / 1024:.0f} MiB peak RSS"
        )


if __name__ == "__main__":
    main()
