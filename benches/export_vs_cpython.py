"""Whole-process time of `tach export` against CPython 3.15's `replay` on the same file.

Runs inside the CPython chroot, which mounts the checkout, so both commands run on the
same machine in the same environment, alternately (run i of one, then run i of the
other), and the paired ratios are reported with the medians:

    scripts/cpython-chroot run -- python3.15 benches/export_vs_cpython.py \
        target/release/tach collapsed golden/cpython-3.15.2/stdlib_tests_large.bin 10

FORMAT is one CPython replay knows: collapsed, pstats, gecko, flamegraph (CPython's is
an HTML page, ours an SVG). Outputs go to a temporary directory and are deleted.
"""

import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time


def timed(cmd):
    r0 = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    subprocess.run(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=True)
    wall = time.perf_counter() - t0
    r1 = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (r1.ru_utime - r0.ru_utime) + (r1.ru_stime - r0.ru_stime)
    return wall, cpu


def main():
    if len(sys.argv) < 4:
        sys.exit(__doc__)
    tach, fmt, path = sys.argv[1:4]
    runs = int(sys.argv[4]) if len(sys.argv) > 4 else 10
    with tempfile.TemporaryDirectory() as tmp:
        ours = [tach, "export", f"--{fmt}", "-o", os.path.join(tmp, "tach.out"), path]
        theirs = [sys.executable, "-m", "profiling.sampling", "replay", f"--{fmt}",
                  "-o", os.path.join(tmp, "cpython.out"), path]
        results = {"tach": [], "cpython": []}
        for _ in range(runs):
            results["cpython"].append(timed(theirs))
            results["tach"].append(timed(ours))
    for name, rows in results.items():
        walls = [w for w, _ in rows]
        cpus = [c for _, c in rows]
        print(f"{name:8} wall median {statistics.median(walls) * 1000:9.1f} ms "
              f"(min {min(walls) * 1000:.1f})  cpu median {statistics.median(cpus) * 1000:9.1f} ms")
    ratios = [c[0] / t[0] for c, t in zip(results["cpython"], results["tach"])]
    print(f"{fmt} {os.path.basename(path)}: CPython / tach wall time, paired median "
          f"{statistics.median(ratios):.1f}x (min {min(ratios):.1f}x, max {max(ratios):.1f}x, {runs} runs)")


if __name__ == "__main__":
    main()
