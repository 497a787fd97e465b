#!/usr/bin/env python3
"""The recorder's memory over a long rotating recording (docs/performance.md, "Always on").

A program that keeps changing what it runs is recorded from outside at RATE with
`--rotate`, for SECONDS; the recorder's resident memory (VmRSS) is read every
`--every` seconds. Printed: the table of readings, the peak, and the slope of a least
squares line through the readings after the first `--warmup` seconds (KiB per minute):
a recorder whose state grows with the recording's length shows a positive slope.

    python3 benches/soak.py --tach target/release/tach --seconds 1800 --rate 1000 \\
        --rotate 10s --keep 2m

The program (below, run by the interpreter given with --python) churns what a service
churns: short-lived threads, asyncio tasks created and finished, functions compiled
from new source text (new code objects, each with a new name), and deep and shallow
stacks, so that every table the recorder keeps (threads, code objects, frames,
strings, tasks) keeps meeting new entries.
"""

import argparse
import os
import shlex
import subprocess
import sys
import tempfile
import time

PROGRAM = r'''
import asyncio, itertools, sys, threading, time

def churn_code(i):
    # A new function from new source text every time: a new code object and name.
    src = f"def f_{i}(n):\n    s = 0\n    for k in range(n):\n        s += k * {i % 97}\n    return s\n"
    ns = {}
    exec(compile(src, f"<gen {i % 5000}>", "exec"), ns)
    return ns[f"f_{i}"](2000)

def deep(n):
    return deep(n - 1) if n else sum(range(3000))

def short_thread(i):
    deep(20 + i % 30)

async def task(i):
    await asyncio.sleep(0)
    churn_code(i)
    await asyncio.sleep(0.001)

async def main(seconds):
    end = time.monotonic() + seconds
    counter = itertools.count()
    while time.monotonic() < end:
        i = next(counter)
        await asyncio.gather(*(task(i * 8 + k) for k in range(8)))
        if i % 20 == 0:
            t = threading.Thread(target=short_thread, args=(i,), name=f"worker-{i}")
            t.start()
            t.join()
        deep(i % 60)

asyncio.run(main(float(sys.argv[1])))
'''


def rss_kib(pid: int) -> int | None:
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1])
    except OSError:
        return None
    return None


def slope_per_minute(points: list[tuple[float, int]]) -> float:
    """Least squares slope of (seconds, KiB), in KiB per minute."""
    n = len(points)
    if n < 2:
        return 0.0
    mx = sum(t for t, _ in points) / n
    my = sum(v for _, v in points) / n
    sxx = sum((t - mx) ** 2 for t, _ in points)
    sxy = sum((t - mx) * (v - my) for t, v in points)
    return 60.0 * sxy / sxx if sxx else 0.0


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--tach", required=True, help="the tach binary")
    ap.add_argument("--python", default=sys.executable, help="the interpreter recorded")
    ap.add_argument("--seconds", type=float, default=1800)
    ap.add_argument("--rate", type=int, default=1000)
    ap.add_argument("--rotate", default="10s")
    ap.add_argument("--keep", default="2m")
    ap.add_argument("--every", type=float, default=60, help="seconds between readings")
    ap.add_argument("--warmup", type=float, default=120, help="seconds left out of the slope")
    ap.add_argument("--extra", default="", help="more tach record flags, e.g. '--async-aware'")
    args = ap.parse_args()

    with tempfile.TemporaryDirectory(prefix="tach-soak-") as tmp:
        script = os.path.join(tmp, "churn.py")
        with open(script, "w") as f:
            f.write(PROGRAM)
        out = os.path.join(tmp, "segments")
        cmd = [args.tach, "record", "-r", str(args.rate), "--rotate", args.rotate,
               "--keep", args.keep, "-o", out, *shlex.split(args.extra), "--",
               *shlex.split(args.python), script, str(args.seconds)]
        print("$", " ".join(shlex.quote(c) for c in cmd), flush=True)
        t0 = time.monotonic()
        rec = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        readings: list[tuple[float, int]] = []
        next_at = 0.0
        while rec.poll() is None:
            now = time.monotonic() - t0
            if now >= next_at:
                kib = rss_kib(rec.pid)
                if kib is not None:
                    readings.append((now, kib))
                    segs = len(os.listdir(out)) if os.path.isdir(out) else 0
                    print(f"{now:8.0f} s  {kib / 1024:8.1f} MiB  {segs} files kept", flush=True)
                next_at += args.every
            time.sleep(0.2)
        err = rec.stderr.read()
        if rec.returncode != 0:
            sys.exit(f"tach record failed ({rec.returncode}):\n{err}")
    late = [(t, v) for t, v in readings if t >= args.warmup]
    peak = max((v for _, v in readings), default=0)
    print(f"peak {peak / 1024:.1f} MiB; slope after {args.warmup:.0f} s: "
          f"{slope_per_minute(late):+.1f} KiB/min over {len(late)} readings")


if __name__ == "__main__":
    main()
