"""Time a sampling profiler takes from the thread it samples, as that thread sees it.

A Python thread spins on `time.perf_counter_ns()` for SECONDS and adds up every gap
between two consecutive readings longer than 3 us: the time it was not running (stopped
by a profiler, descheduled, interrupted). Run once alone and once per profiler attached
to it from outside at RATE; the difference to the run alone is what the profiler's
stops cost the thread. A blocking profiler stops the thread once per sample (ptrace):
its cost per sample is that difference divided by the samples taken.

    .venv/bin/python python/bench/stolen.py --rate 1000 --repeat 3 \\
        --tach target/release/tach --pyspy .venv/bin/py-spy
    .venv/bin/python python/bench/stolen.py --rate 1000 --repeat 3 --tach target/release/tach \\
        --python "scripts/cpython-chroot run -- python3.15" --cpython
    .venv/bin/python python/bench/stolen.py --rate 1000 --repeat 5 --tach target/release/tach \\
        --python "scripts/cpython-chroot run -- python3.15" --cpython --asyncio

--floor adds a stopper that stops the thread with ptrace at RATE and resumes it at
once, reading nothing: what any profiler that stops the thread for each sample pays
on this machine, to put the others' rows beside.

--asyncio: the thread spins in the innermost of a chain of asyncio tasks (a TaskGroup
task gathering a task that awaits the spinning one), and tach and CPython's sampler are
also run with --async-aware (the running task and the tasks awaiting it read at every
sample), beside their rows without it.

Profilers: tach (blocking, the default at 1 kHz, and --no-blocking), py-spy (default,
which stops every thread, and --nonblocking), CPython 3.15's `profiling.sampling attach`
(`--blocking` and not). With --native: tach blocking and `tach record --native`, py-spy
default and `--native` (the extra stop time of a native walk; the spinning thread's
native stack is the interpreter's own frames). With --in-process, also the program run
under `python -m tach run` (blocking, and --native with --native): the tach package must
be on PYTHONPATH. Prints one Markdown row per profiler:
the median share of the thread's time stolen over the runs, that minus the median
alone, the median of each run minus the run alone of its round (paired: the machine's
slow swings cancel), and the first difference as microseconds per sample at RATE (an
upper bound on the time per stop when the profiler fell behind RATE); then the share
of the spin the scheduler says the thread was not running (its own count,
`/proc/self/task/TID/schedstat`: a stop shows there, time the virtual machine's host
took from the whole CPU does not), and that minus alone. The gaps are the measure; the scheduler's count is the same loss
without the host's noise, which here moves the gaps alone by a point between runs.

    .venv-native-3.12/bin/python python/bench/stolen.py --native --rate 1000 --repeat 5 \
        --tach target/release/tach --pyspy .venv-native-3.12/bin/py-spy
    PYTHONPATH=python .venv-native-3.12/bin/python python/bench/stolen.py --native \
        --in-process --rate 1000 --repeat 5 --tach target/release/tach \
        --pyspy .venv-native-3.12/bin/py-spy
"""

import argparse
import json
import os
import shlex
import statistics
import subprocess
import sys
import tempfile

# The accuracy harness's search for the interpreter behind a wrapper (the chroot's).
from accuracy import wait_for_child_python

SPIN = r"""
import json, sys, threading, time
def ran_ns():
    with open(f"/proc/self/task/{threading.get_native_id()}/schedstat") as f:
        return int(f.read().split()[0])
print("ready", flush=True)
time.sleep(float(sys.argv[2]))
pc = time.perf_counter_ns
end = pc() + int(float(sys.argv[1]) * 1e9)
stolen = gaps = 0
ran0 = ran_ns()
last = t0 = pc()
while last < end:
    now = pc()
    if now - last > 3000:
        stolen += now - last
        gaps += 1
    last = now
off = (last - t0) - (ran_ns() - ran0)
print(json.dumps({"stolen_pct": 100 * stolen / (last - t0), "gaps": gaps,
                  "off_cpu_pct": 100 * off / (last - t0)}), flush=True)
"""


# The same spin, in a task awaited by a task gathered by a TaskGroup's task under main.
ASYNC_SPIN = r"""
import asyncio, json, sys, threading, time

def ran_ns():
    with open(f"/proc/self/task/{threading.get_native_id()}/schedstat") as f:
        return int(f.read().split()[0])

def spin(seconds):
    pc = time.perf_counter_ns
    end = pc() + int(seconds * 1e9)
    stolen = gaps = 0
    ran0 = ran_ns()
    last = t0 = pc()
    while last < end:
        now = pc()
        if now - last > 3000:
            stolen += now - last
            gaps += 1
        last = now
    off = (last - t0) - (ran_ns() - ran0)
    return {"stolen_pct": 100 * stolen / (last - t0), "gaps": gaps,
            "off_cpu_pct": 100 * off / (last - t0)}

async def leaf(seconds):
    return spin(seconds)

async def mid(seconds):
    return await asyncio.create_task(leaf(seconds), name="leaf")

async def main():
    print("ready", flush=True)
    await asyncio.sleep(float(sys.argv[2]))
    async with asyncio.TaskGroup() as tg:
        t = tg.create_task(mid(float(sys.argv[1])), name="mid")
        other = tg.create_task(asyncio.sleep(0), name="other")
    print(json.dumps(t.result()), flush=True)

asyncio.run(main())
"""

# The least a blocking profiler can take: a stopper that stops the thread with ptrace at
# RATE and resumes it at once, reading nothing (`PTRACE_SEIZE`, `PTRACE_INTERRUPT`, a
# spin on `waitid` for the stop that yields the CPU after 50 us, as tach's does, in case
# the thread waits for this CPU to stop on; `PTRACE_DETACH`). Its row is the floor of
# any profiler that stops the thread once a sample, on this machine.
# argv: pid, rate, seconds.
PTRACE_FLOOR = r"""
import ctypes, os, sys, time
libc = ctypes.CDLL(None, use_errno=True)
libc.ptrace.argtypes = [ctypes.c_long, ctypes.c_long, ctypes.c_void_p, ctypes.c_void_p]
SEIZE, INTERRUPT, DETACH = 0x4206, 0x4207, 17
P_PID, WNOHANG, WSTOPPED, WALL = 1, 1, 2, 0x40000000
pid, rate, seconds = int(sys.argv[1]), int(sys.argv[2]), float(sys.argv[3])
info = ctypes.create_string_buffer(128)
period = 1.0 / rate
end = time.monotonic() + seconds
tick = time.monotonic()
stops = 0
while True:
    tick += period
    delay = tick - time.monotonic()
    if delay > 0:
        time.sleep(delay)
    if time.monotonic() >= end:
        break
    if libc.ptrace(SEIZE, pid, None, None) != 0:
        break  # the program ended
    if libc.ptrace(INTERRUPT, pid, None, None) != 0:
        libc.ptrace(DETACH, pid, None, None)
        break
    asked = time.monotonic()
    while True:
        ctypes.memset(info, 0, 128)
        if libc.waitid(P_PID, pid, info, WSTOPPED | WALL | WNOHANG) != 0:
            sys.exit(0)  # the program ended while seized
        if int.from_bytes(info.raw[16:20], "little") != 0:  # si_pid: stopped
            break
        if time.monotonic() - asked > 50e-6:
            os.sched_yield()
    libc.ptrace(DETACH, pid, None, None)
    stops += 1
print(stops, file=sys.stderr)
"""


class InProcess:
    """A profiler that is not attached: the program runs under `python -m tach run` with
    these options (the tach package on PYTHONPATH)."""

    def __init__(self, *options):
        self.options = list(options)


def one_run(python, script, seconds, profiler):
    """The share of the spinning thread's time stolen, with `profiler(pid)` (a command,
    or None) attached for the whole spin, or the program run by `profiler` (InProcess)."""
    if isinstance(profiler, InProcess):
        out = os.path.join(os.path.dirname(script), "in-process.tach")
        run = python + ["-m", "tach", "run", "-q", *profiler.options, "-o", out]
        proc = subprocess.Popen(run + [script, str(seconds), "0.5"], stdout=subprocess.PIPE,
                                text=True)
        assert proc.stdout.readline().strip() == "ready"
        line = proc.stdout.readline()
        if proc.wait() != 0:
            raise SystemExit(f"python -m tach run failed ({proc.returncode})")
        return json.loads(line)
    proc = subprocess.Popen(python + [script, str(seconds), "0.5"], stdout=subprocess.PIPE, text=True)
    assert proc.stdout.readline().strip() == "ready"
    pid = wait_for_child_python(proc.pid, script)
    prof = None
    if profiler is not None:
        prof = subprocess.Popen(profiler(pid), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    out = proc.stdout.readline()
    proc.wait()
    if prof is not None:
        _, err = prof.communicate(timeout=60)
        if prof.returncode not in (0, None):
            raise SystemExit(f"profiler failed ({prof.returncode}): {err[-500:]}")
    return json.loads(out)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--python", default=sys.executable, help="the interpreter, a command line")
    ap.add_argument("--rate", type=int, default=1000)
    ap.add_argument("--seconds", type=float, default=3.0)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--tach", help="a tach binary: tach record --pid, blocking and not")
    ap.add_argument("--baseline-tach",
                    help="another tach binary (an earlier build): its blocking row beside "
                         "--tach's, interleaved, to compare two builds in one run")
    ap.add_argument("--pyspy", help="a py-spy binary: py-spy record, default and --nonblocking")
    ap.add_argument("--native", action="store_true",
                    help="compare native stacks: tach --native and py-spy --native against "
                         "their own runs without it")
    ap.add_argument("--in-process", action="store_true",
                    help="python -m tach run (blocking, and --native with --native) from the "
                         "tach package on PYTHONPATH, beside the other rows")
    ap.add_argument("--floor", action="store_true",
                    help="a row for a stopper that stops and resumes the thread at RATE with "
                         "ptrace and reads nothing: what any blocking profiler pays here")
    ap.add_argument("--cpython", action="store_true",
                    help="CPython 3.15's profiling.sampling attach (run by --python)")
    ap.add_argument("--asyncio", action="store_true",
                    help="spin in a chain of asyncio tasks; also run the profilers with --async-aware")
    args = ap.parse_args()
    python = shlex.split(args.python)
    # Under the checkout: a chroot sees only the checkout.
    scratch = tempfile.mkdtemp(prefix="stolen-", dir=os.path.join(os.getcwd(), "target"))
    script = os.path.join(scratch, "spin.py")
    with open(script, "w") as f:
        f.write(ASYNC_SPIN if args.asyncio else SPIN)
    # Whole seconds: py-spy takes no fraction.
    d = str(int(args.seconds) + 2)
    r = str(args.rate)
    out = os.path.join(scratch, "out")
    profilers = [("none", None)]
    if args.floor:
        floor = os.path.join(scratch, "floor.py")
        with open(floor, "w") as f:
            f.write(PTRACE_FLOOR)
        profilers.append(("ptrace stop and resume, nothing read (floor)",
                          lambda p: [sys.executable, floor, str(p), r, d]))
    if args.in_process:
        profilers.append(("python -m tach run (blocking)", InProcess("-r", r, "--blocking")))
        if args.native:
            profilers.append(("python -m tach run --native", InProcess("-r", r, "--native")))
    if args.native:
        if args.tach:
            profilers += [
                ("tach record --pid (blocking)", lambda p, tach=args.tach: [tach, "record", "--pid", str(p), "-r", r, "-d", d, "--blocking", "-o", out + ".tach"]),
                ("tach record --pid --native", lambda p, tach=args.tach: [tach, "record", "--pid", str(p), "-r", r, "-d", d, "--native", "-o", out + ".tach"]),
            ]
        if args.pyspy:
            profilers += [
                ("py-spy record (default)", lambda p, pyspy=args.pyspy: [pyspy, "record", "-p", str(p), "-r", r, "-d", d, "-f", "raw", "-o", out + ".pyspy"]),
                ("py-spy record --native", lambda p, pyspy=args.pyspy: [pyspy, "record", "-p", str(p), "-r", r, "-d", d, "--native", "-f", "raw", "-o", out + ".pyspy"]),
            ]
        # (The rows above hold their binaries: the plain rows below are not run.)
        args.tach = args.pyspy = None
    if args.tach:
        profilers += [
            ("tach record --pid (blocking)", lambda p: [args.tach, "record", "--pid", str(p), "-r", r, "-d", d, "--blocking", "-o", out + ".tach"]),
            ("tach record --pid --no-blocking", lambda p: [args.tach, "record", "--pid", str(p), "-r", r, "-d", d, "--no-blocking", "-o", out + ".tach"]),
        ]
        if args.baseline_tach:
            profilers.append(("baseline tach record --pid (blocking)", lambda p: [args.baseline_tach, "record", "--pid", str(p), "-r", r, "-d", d, "--blocking", "-o", out + ".tach"]))
        if args.asyncio:
            profilers += [
                ("tach record --pid --async-aware (blocking)", lambda p: [args.tach, "record", "--pid", str(p), "-r", r, "-d", d, "--async-aware", "--blocking", "-o", out + ".tach"]),
                ("tach record --pid --async-aware --no-blocking", lambda p: [args.tach, "record", "--pid", str(p), "-r", r, "-d", d, "--async-aware", "--no-blocking", "-o", out + ".tach"]),
            ]
    if args.pyspy:
        profilers += [
            ("py-spy record (default)", lambda p: [args.pyspy, "record", "-p", str(p), "-r", r, "-d", d, "-f", "raw", "-o", out + ".pyspy"]),
            ("py-spy record --nonblocking", lambda p: [args.pyspy, "record", "-p", str(p), "-r", r, "-d", d, "--nonblocking", "-f", "raw", "-o", out + ".pyspy"]),
        ]
    if args.cpython:
        profilers += [
            ("CPython 3.15 attach --blocking", lambda p: python + ["-m", "profiling.sampling", "attach", "--blocking", "-r", r, "-d", d, "--binary", "-o", out + ".bin", str(p)]),
            ("CPython 3.15 attach", lambda p: python + ["-m", "profiling.sampling", "attach", "-r", r, "-d", d, "--binary", "-o", out + ".bin", str(p)]),
        ]
        if args.asyncio:
            # --async-aware cannot write --binary (CPython refuses): collapsed stacks.
            profilers += [
                ("CPython 3.15 attach --async-aware --blocking", lambda p: python + ["-m", "profiling.sampling", "attach", "--async-aware", "--blocking", "-r", r, "-d", d, "--collapsed", "-o", out + ".collapsed", str(p)]),
                ("CPython 3.15 attach --async-aware", lambda p: python + ["-m", "profiling.sampling", "attach", "--async-aware", "-r", r, "-d", d, "--collapsed", "-o", out + ".collapsed", str(p)]),
            ]
    runs = {name: [] for name, _ in profilers}
    for _ in range(args.repeat):
        # Interleaved: a change in the machine's state moves every profiler alike.
        for name, cmd in profilers:
            runs[name].append(one_run(python, script, args.seconds, cmd))
    def med(name, key):
        return statistics.median(r[key] for r in runs[name])

    alone, alone_off = med("none", "stolen_pct"), med("none", "off_cpu_pct")
    def paired(name, key):
        # Each run minus the run alone of the same round (the two are minutes apart at
        # most): the machine's slow swings cancel, which the difference of the medians
        # keeps.
        return statistics.median(r[key] - a[key] for r, a in zip(runs[name], runs["none"]))

    print(f"| profiler ({' '.join(python)}, {args.rate} Hz) | stolen, median of {args.repeat} | runs "
          "| minus alone | paired | per sample at the rate | off CPU (scheduler) | minus alone |")
    print("|---|---|---|---|---|---|---|---|")
    for name, _ in profilers:
        m, off = med(name, "stolen_pct"), med(name, "off_cpu_pct")
        each = ", ".join(f"{r['stolen_pct']:.2f}" for r in runs[name])
        extra = "-" if name == "none" else f"{m - alone:+.2f} points"
        pair = "-" if name == "none" else f"{paired(name, 'stolen_pct'):+.2f} points"
        # A share of each second, spread over RATE samples.
        per = "-" if name == "none" else f"{(m - alone) / 100 * 1e6 / args.rate:.1f} us"
        off_extra = "-" if name == "none" else f"{off - alone_off:+.3f} points"
        print(f"| {name} | {m:.2f}% | {each} | {extra} | {pair} | {per} | {off:.3f}% | {off_extra} |")

if __name__ == "__main__":
    main()
