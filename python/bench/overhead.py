"""Wall-time overhead of the tach recorder on a CPU-bound workload.

    python python/bench/overhead.py [--python PY] [--rates 100,1000,10000] [--repeat 5]
                                    [--tools tach,pyspy,cpython] [--markdown]

For each rate, runs the workload without a profiler and under each tool, `--repeat`
times, and reports the median of the workload's own timing (measured inside the
workload, so interpreter start-up and file finishing are excluded) and the slowdown.

Tools:
- tach: `PY -m tach run -q -r RATE -o FILE workload.py` (the installed extension; build
  it optimised first: `maturin develop --release`, or the figures are meaningless).
- pyspy: `py-spy record -r RATE -f raw -o FILE -- PY workload.py` (`pip install py-spy`;
  needs ptrace permission).
- cpython: CPython 3.15's own sampler, `python3.15 -m profiling.sampling run -r RATE
  --binary -o FILE workload.py`, compared against python3.15 without a profiler, in the
  chroot (/work/shared/tools/cpython-chroot) unless this interpreter is 3.15.
"""

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile

WORKLOAD = r'''
import sys, time

def fib(n):
    return n if n < 2 else fib(n - 1) + fib(n - 2)

def mix(n):
    d = {}
    for i in range(n):
        d[i % 97] = d.get(i % 97, 0) + len(str(i))
    return sorted(d.items(), key=lambda kv: -kv[1])[:3]

def main(rounds):
    for _ in range(rounds):
        fib(22)
        mix(20000)

t0 = time.perf_counter()
main(int(sys.argv[1]))
print("ELAPSED", time.perf_counter() - t0)
'''

CHROOT = "/work/shared/tools/cpython-chroot"


def run_timed(cmd, cwd):
    proc = subprocess.run(cmd, capture_output=True, text=True, cwd=cwd, timeout=600)
    if proc.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} failed:\n{proc.stderr[-2000:]}")
    for line in proc.stdout.splitlines():
        if line.startswith("ELAPSED "):
            return float(line.split()[1])
    raise RuntimeError(f"no timing from {' '.join(cmd)}:\n{proc.stdout[-2000:]}")


def median_of(cmd, cwd, repeat):
    return statistics.median(run_timed(cmd, cwd) for _ in range(repeat))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--python", default=sys.executable)
    ap.add_argument("--rates", default="100,1000,10000")
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--rounds", type=int, default=200, help="workload size (about 2-3 s)")
    ap.add_argument("--tools", default="tach,pyspy,cpython")
    ap.add_argument("--markdown", action="store_true")
    args = ap.parse_args()
    rates = [int(r) for r in args.rates.split(",")]
    tools = args.tools.split(",")

    check = subprocess.run(
        [args.python, "-c", "import tach._native as n, sys; print(n.DEBUG_BUILD, sys.version.split()[0])"],
        capture_output=True, text=True,
    )
    if check.returncode == 0:
        debug, version = check.stdout.split()
        if debug == "True":
            print("warning: the tach extension is a debug build; build it with "
                  "`maturin develop --release` for meaningful figures", file=sys.stderr)
    else:
        version = "?"

    # Under /work so that the chroot sees it.
    base = "/work" if os.path.isdir("/work") and os.access("/work", os.W_OK) else None
    with tempfile.TemporaryDirectory(prefix="tach-bench-", dir=base) as tmp:
        script = os.path.join(tmp, "workload.py")
        with open(script, "w") as f:
            f.write(WORKLOAD)
        rows = []
        n = str(args.rounds)
        baseline = median_of([args.python, script, n], tmp, args.repeat)
        rows.append((f"none (Python {version})", "-", baseline, None))
        for rate in rates:
            if "tach" in tools:
                out = os.path.join(tmp, "t.tach")
                t = median_of([args.python, "-m", "tach", "run", "-q", "-r", str(rate), "-o", out, script, n],
                              tmp, args.repeat)
                rows.append(("tach", rate, t, t / baseline - 1))
            if "pyspy" in tools:
                pyspy = shutil.which("py-spy") or os.path.join(os.path.dirname(args.python), "py-spy")
                if os.path.exists(pyspy):
                    out = os.path.join(tmp, "p.txt")
                    try:
                        t = median_of([pyspy, "record", "-r", str(rate), "-f", "raw", "-o", out,
                                       "--", args.python, script, n], tmp, args.repeat)
                        rows.append(("py-spy", rate, t, t / baseline - 1))
                    except RuntimeError as e:
                        print(f"py-spy skipped: {e}", file=sys.stderr)
        if "cpython" in tools:
            if sys.version_info >= (3, 15):
                py315 = [sys.executable]
            elif os.path.exists(CHROOT):
                py315 = [CHROOT, "run", "--", "python3.15"]
            else:
                py315 = None
            if py315 is None:
                print("CPython 3.15 not available: skipped", file=sys.stderr)
            else:
                b315 = median_of([*py315, script, n], tmp, args.repeat)
                rows.append(("none (Python 3.15)", "-", b315, None))
                for rate in rates:
                    out = os.path.join(tmp, "c.bin")
                    t = median_of([*py315, "-m", "profiling.sampling", "run", "-r", str(rate), "--binary",
                                   "-o", out, script, n], tmp, args.repeat)
                    rows.append(("CPython 3.15 profiling.sampling", rate, t, t / b315 - 1))

    if args.markdown:
        print("| profiler | rate (Hz) | workload time (s, median) | slowdown |")
        print("|---|---|---|---|")
        for name, rate, t, slow in rows:
            print(f"| {name} | {rate} | {t:.3f} | {'-' if slow is None else f'{100 * slow:+.1f}%'} |")
    else:
        for name, rate, t, slow in rows:
            print(f"{name:34} {str(rate):>6} {t:8.3f} s  {'' if slow is None else f'{100 * slow:+.1f}%'}")


if __name__ == "__main__":
    main()
