"""Wall-time overhead of the tach recorder on a CPU-bound workload.

    python python/bench/overhead.py [--python PY] [--rates 100,1000,10000] [--repeat 5]
                                    [--tools tach,attach,attach-nonblocking,pyspy,
                                             pyspy-nonblocking,cpython]
                                    [--tach-bin PATH] [--markdown]

Runs the workload without a profiler and under each tool at each rate, one run of each
in turn per round, for `--repeat` rounds, and reports the median of the workload's own
timing (measured inside the workload, so interpreter start-up and file finishing are
excluded) and the slowdown: the median over rounds of the time divided by the same
round's run without a profiler (paired, so that a machine whose speed drifts does not
bias one configuration). The slowdown is given for the wall time (what the goals are
about) and for the workload thread's CPU time (`time.thread_time()`), which a shared
machine's other tenants disturb less. For tach, the sampler thread's own CPU time (from
its summary line) says what the recording costs whichever core it runs on.

Tools:
- tach: `PY -m tach run -q -r RATE -o FILE workload.py` (the installed extension; build
  it optimised first: `maturin develop --release`, or the figures are meaningless).
- attach, attach-nonblocking: the tach binary recording from outside (`--no-blocking`), `TACH record -r RATE -o FILE -- PY
  workload.py` (CPython 3.13+; `--tach-bin`, default target/release/tach: build it with
  `cargo build --release --no-default-features --bin tach`, the recorder needs no SQL).
- pyspy, pyspy-nonblocking: `py-spy record [--nonblocking] -r RATE -f raw -o FILE -- PY
  workload.py` (`pip install py-spy`; needs ptrace permission).
- cpython: CPython 3.15's own sampler, `python3.15 -m profiling.sampling run -r RATE
  --binary -o FILE workload.py`, compared against python3.15 without a profiler, in the
  chroot (scripts/cpython-chroot) unless this interpreter is 3.15.
"""

import argparse
import re
import os
import shutil
import statistics
import subprocess
import sys
import tempfile

# The CPU-bound work (also run in chunks by overhead_ab.py).
FUNCTIONS = r'''
def fib(n):
    return n if n < 2 else fib(n - 1) + fib(n - 2)

def mix(n):
    d = {}
    for i in range(n):
        d[i % 97] = d.get(i % 97, 0) + len(str(i))
    return sorted(d.items(), key=lambda kv: -kv[1])[:3]
'''

WORKLOAD = "import sys, time\n" + FUNCTIONS + r'''
def main(rounds):
    for _ in range(rounds):
        fib(22)
        mix(20000)

t0, c0 = time.perf_counter(), time.thread_time()
main(int(sys.argv[1]))
print("ELAPSED", time.perf_counter() - t0, time.thread_time() - c0)
'''

CHROOT = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))), "scripts", "cpython-chroot")


def run_timed(cmd, cwd):
    proc = subprocess.run(cmd, capture_output=True, text=True, cwd=cwd, timeout=600)
    if proc.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} failed:\n{proc.stderr[-2000:]}")
    for line in proc.stdout.splitlines():
        if line.startswith("ELAPSED "):
            # (wall seconds, the workload thread's CPU seconds, tach's sampler thread's
            # CPU use in % of a CPU from its summary line, if any)
            wall, cpu = line.split()[1:3]
            m = re.search(r"sampler ([0-9.]+)% of a CPU", proc.stderr)
            return float(wall), float(cpu), float(m.group(1)) if m else None
    raise RuntimeError(f"no timing from {' '.join(cmd)}:\n{proc.stdout[-2000:]}")


def interleaved(configs, cwd, repeat):
    """Runs every command once per round, in turn, for `repeat` rounds: a machine whose
    speed drifts slows every configuration of a round alike. Returns each command's
    times, by name."""
    times = {name: [] for name, _ in configs}
    for _ in range(repeat):
        for name, cmd in configs:
            times[name].append(run_timed(cmd, cwd))
    return times


def paired_slowdown(times, baseline, k=0):
    """The median over rounds of (time / the baseline's time in the same round) - 1, for
    the wall time (k=0) or the workload thread's CPU time (k=1)."""
    return statistics.median(t[k] / b[k] for t, b in zip(times, baseline)) - 1


def median_wall(times):
    return statistics.median(t[0] for t in times)


def median_sampler(times):
    """The median share of a CPU tach's sampler thread used, if it reported one."""
    shares = [t[2] for t in times if t[2] is not None]
    return statistics.median(shares) / 100 if shares else None


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--python", default=sys.executable)
    ap.add_argument("--rates", default="100,1000,10000")
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--rounds", type=int, default=200, help="workload size (about 2-3 s)")
    ap.add_argument("--tools", default="tach,pyspy,cpython")
    ap.add_argument("--markdown", action="store_true")
    ap.add_argument("--tach-bin", default=os.path.join(
        os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))),
        "target", "release", "tach"), help="the tach binary for --tools attach")
    args = ap.parse_args()
    rates = [int(r) for r in args.rates.split(",")]
    tools = args.tools.split(",")
    if any(t.startswith("attach") for t in tools) and not os.path.exists(args.tach_bin):
        sys.exit(f"no tach binary at {args.tach_bin}: cargo build --release "
                 "--no-default-features --bin tach, or --tach-bin PATH")

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
        # No tach package in that interpreter (the attach tools need none).
        v = subprocess.run([args.python, "-c", "import sys; print(sys.version.split()[0])"],
                           capture_output=True, text=True)
        version = v.stdout.strip() or "?"

    # Under /work so that the chroot sees it.
    base = "/work" if os.path.isdir("/work") and os.access("/work", os.W_OK) else None
    with tempfile.TemporaryDirectory(prefix="tach-bench-", dir=base) as tmp:
        script = os.path.join(tmp, "workload.py")
        with open(script, "w") as f:
            f.write(WORKLOAD)
        n = str(args.rounds)
        # (name, command), one round of each in turn; a baseline per interpreter.
        host = [("none", [args.python, script, n])]
        for rate in rates:
            if "tach" in tools:
                out = os.path.join(tmp, "t.tach")
                host.append((f"tach {rate}", [args.python, "-m", "tach", "run", "-r", str(rate),
                                              "-o", out, script, n]))
            for variant in ("attach", "attach-nonblocking"):
                if variant not in tools:
                    continue
                # The tach binary recording from outside (3.13+ targets; blocking at up
                # to 1 kHz by default, as in-process).
                out = os.path.join(tmp, "a.tach")
                extra = ["--no-blocking"] if variant == "attach-nonblocking" else []
                name = "tach attached --no-blocking" if extra else "tach attached"
                host.append((f"{name} {rate}", [args.tach_bin, "record", *extra, "-r", str(rate),
                                                "-o", out, "--", args.python, script, n]))
            for variant in ("pyspy", "pyspy-nonblocking"):
                if variant not in tools:
                    continue
                pyspy = shutil.which("py-spy") or os.path.join(os.path.dirname(sys.executable), "py-spy")
                if os.path.exists(pyspy):
                    out = os.path.join(tmp, "p.txt")
                    extra = ["--nonblocking"] if variant == "pyspy-nonblocking" else []
                    name = "py-spy --nonblocking" if extra else "py-spy"
                    host.append((f"{name} {rate}", [pyspy, "record", *extra, "-r", str(rate), "-f", "raw",
                                                    "-o", out, "--", args.python, script, n]))
                else:
                    print("py-spy not found: skipped", file=sys.stderr)
        rows = []
        times = interleaved(host, tmp, args.repeat)
        rows.append((f"none (Python {version})", "-", median_wall(times["none"]), None, None, None))
        for name, _ in host[1:]:
            tool, rate = name.rsplit(" ", 1)
            rows.append((tool, int(rate), median_wall(times[name]),
                         paired_slowdown(times[name], times["none"]),
                         paired_slowdown(times[name], times["none"], 1),
                         median_sampler(times[name])))
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
                out = os.path.join(tmp, "c.bin")
                chroot = [("none", [*py315, script, n])] + [
                    (f"CPython 3.15 profiling.sampling {rate}",
                     [*py315, "-m", "profiling.sampling", "run", "-r", str(rate), "--binary", "-o", out, script, n])
                    for rate in rates
                ]
                times = interleaved(chroot, tmp, args.repeat)
                rows.append(("none (Python 3.15)", "-", median_wall(times["none"]), None, None, None))
                for name, _ in chroot[1:]:
                    tool, rate = name.rsplit(" ", 1)
                    rows.append((tool, int(rate), median_wall(times[name]),
                                 paired_slowdown(times[name], times["none"]),
                                 paired_slowdown(times[name], times["none"], 1), None))

    def pct(x):
        return "-" if x is None else f"{100 * x:+.1f}%"

    if args.markdown:
        print("| profiler | rate (Hz) | workload wall time (s, median) | wall slowdown | "
              "workload thread CPU slowdown | sampler thread, share of a CPU |")
        print("|---|---|---|---|---|---|")
        for name, rate, t, slow, cpu, sampler in rows:
            share = "-" if sampler is None else f"{100 * sampler:.1f}%"
            print(f"| {name} | {rate} | {t:.3f} | {pct(slow)} | {pct(cpu)} | {share} |")
    else:
        for name, rate, t, slow, cpu, sampler in rows:
            share = "" if sampler is None else f"  sampler {100 * sampler:.1f}% of a CPU"
            print(f"{name:34} {str(rate):>6} {t:8.3f} s  wall {pct(slow):>7}  cpu {pct(cpu):>7}{share}")


if __name__ == "__main__":
    main()
