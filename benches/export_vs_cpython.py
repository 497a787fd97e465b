"""Whole-process time of `tach export` against CPython 3.15's `replay` on the same file.

Runs inside the CPython chroot, which mounts the checkout, so both commands run on the
same machine in the same environment, alternately (run i of one, then run i of the
other), and the paired ratios are reported with the medians:

    scripts/cpython-chroot run -- python3.15 benches/export_vs_cpython.py \
        target/release/tach collapsed golden/cpython-3.15.2/stdlib_tests_large.bin 10

FORMAT is one CPython replay knows: collapsed, pstats, jsonl, gecko, flamegraph
(CPython's is an HTML page, ours an SVG). OURS:THEIRS times two formats against each
other: `speedscope:gecko` is tach's Speedscope file against CPython's nearest, its
per-sample Gecko timeline (CPython writes no Speedscope). Outputs go to a temporary
directory and are deleted. Peak memory is each process's maximum RSS (wait4).
"""

import os
import statistics
import subprocess
import sys
import tempfile
import time


def timed(cmd):
    """(wall s, CPU s, peak RSS MiB) of one run of `cmd`."""
    t0 = time.perf_counter()
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    _, status, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - t0
    if os.waitstatus_to_exitcode(status) != 0:
        raise SystemExit(f"{cmd} failed")
    return wall, usage.ru_utime + usage.ru_stime, usage.ru_maxrss / 1024


def main():
    if len(sys.argv) < 4:
        sys.exit(__doc__)
    tach, fmt, path = sys.argv[1:4]
    runs = int(sys.argv[4]) if len(sys.argv) > 4 else 10
    with tempfile.TemporaryDirectory() as tmp:
        our_fmt, _, their_fmt = fmt.partition(":")
        their_fmt = their_fmt or our_fmt
        ours = [tach, "export", f"--{our_fmt}", "-o", os.path.join(tmp, "tach.out"), path]
        theirs = [sys.executable, "-m", "profiling.sampling", "replay", f"--{their_fmt}",
                  "-o", os.path.join(tmp, "cpython.out"), path]
        results = {"tach": [], "cpython": []}
        for _ in range(runs):
            results["cpython"].append(timed(theirs))
            results["tach"].append(timed(ours))
    for name, rows in results.items():
        walls = [w for w, _, _ in rows]
        cpus = [c for _, c, _ in rows]
        peaks = [m for _, _, m in rows]
        print(f"{name:8} wall median {statistics.median(walls) * 1000:9.1f} ms "
              f"(min {min(walls) * 1000:.1f})  cpu median {statistics.median(cpus) * 1000:9.1f} ms"
              f"  peak {max(peaks):.1f} MiB")
    ratios = [c[0] / t[0] for c, t in zip(results["cpython"], results["tach"])]
    print(f"{fmt} {os.path.basename(path)}: CPython / tach wall time, paired median "
          f"{statistics.median(ratios):.1f}x (min {min(ratios):.1f}x, max {max(ratios):.1f}x, {runs} runs)")


if __name__ == "__main__":
    main()
